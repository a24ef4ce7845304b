// A deliberately broken kernel: tests check that CompileError names this file and shows the log.
extern "C" __global__ void broken_kernel(float* out) {
    out[threadIdx.x] = flashsim_undeclared_identifier;
}
