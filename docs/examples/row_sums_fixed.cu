// tests/data/run_example.cu with both bugs fixed:
//   - each tile row is padded to 33 floats, so lane t reading row t, column c hits bank (33 t + c) % 32:
//     32 different banks, one wavefront per load;
//   - a __syncthreads() orders warp 0's writes of sums[] before warp 1 reads them.
extern "C" __global__ void row_sums(const float* in, float* out, float scale) {
    __shared__ float tile[32][33];
    __shared__ float sums[32];
    const float* src = in + blockIdx.x * 1024;
    int t = threadIdx.x;
    for (int i = t; i < 1024; i += 64) {
        tile[i / 32][i % 32] = src[i];
    }
    __syncthreads();
    if (t < 32) {
        float s = 0.0f;
        for (int c = 0; c < 32; ++c) {
            s += tile[t][c];
        }
        sums[t] = s;
    }
    __syncthreads();
    if (t >= 32) {
        out[blockIdx.x * 32 + (t - 32)] = scale * sums[t - 32];
    }
}
