// cuda_math.cu: CUDA math-library calls as the compiler emits them, for flashsim.numerics.cuda_math.
// Built with nvcc (not NVRTC, which adds -ftz=true) twice: plain and with --use_fast_math.
// Bit patterns in and out (uint32 viewed as float), one element per thread.

#define UNARY(NAME, EXPR)                                                                            \
    extern "C" __global__ void NAME(const unsigned int* __restrict__ xs, unsigned int* __restrict__ out, \
                                    unsigned long long n) {                                        \
        unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;           \
        if (i >= n) return;                                                                         \
        float x = __uint_as_float(xs[i]);                                                           \
        out[i] = __float_as_uint(EXPR);                                                             \
    }

UNARY(cm_exp2f, exp2f(x))
UNARY(cm___expf, __expf(x))
UNARY(cm_expf, expf(x))
UNARY(cm___logf, __logf(x))
UNARY(cm_logf, logf(x))
UNARY(cm_reciprocal, 1.f / x)
UNARY(cm_tanhf, tanhf(x))

extern "C" __global__ void cm___fdividef(const unsigned int* __restrict__ a, const unsigned int* __restrict__ b,
                                         unsigned int* __restrict__ out, unsigned long long n) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    if (i >= n) return;
    out[i] = __float_as_uint(__fdividef(__uint_as_float(a[i]), __uint_as_float(b[i])));
}

// FlashAttention's softmax step: exp2f(x * scale - max_scaled), contracted to one FFMA
extern "C" __global__ void cm_scaled_exp2(const unsigned int* __restrict__ xs, const unsigned int* __restrict__ sc,
                                          const unsigned int* __restrict__ mx, unsigned int* __restrict__ out,
                                          unsigned long long n) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    if (i >= n) return;
    out[i] = __float_as_uint(exp2f(__uint_as_float(xs[i]) * __uint_as_float(sc[i]) - __uint_as_float(mx[i])));
}
