// Row sums of 32x32 float tiles, one tile per block of 64 threads (two warps):
//   out[b * 32 + r] = scale * sum_c in[b * 1024 + r * 32 + c]
// Two planted bugs for `flashsim run` to find: a 32-way shared-memory bank conflict and a race.
extern "C" __global__ void row_sums(const float* in, float* out, float scale) {
    __shared__ float tile[32][32];
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
            s += tile[t][c];  // bank conflict: lane t reads row t, all lanes hit one bank
        }
        sums[t] = s;  // race: warp 0 writes sums ...
    }
    // (missing: __syncthreads();)
    if (t >= 32) {
        out[blockIdx.x * 32 + (t - 32)] = scale * sums[t - 32];  // ... warp 1 reads them
    }
}
