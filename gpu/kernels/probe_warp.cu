// probe_warp.cu: bit-exact probes of the warp-level data-movement instructions that flashsim.warp models.
//
// One warp per block, one independent case per block: the host wrapper (gpu/warp_probes.py) launches
// n blocks of 32 threads. Shared memory is a PROBE_SMEM-byte image copied in from global memory, so a
// case fixes every byte the instruction can read. Addresses are byte offsets into that image.
//   ldmatrix.sync.aligned.m8n8.x{1,2,4}{,.trans}.shared.b16   (PTX ISA "ldmatrix")
//   stmatrix.sync.aligned.m8n8.x{1,2,4}{,.trans}.shared.b16   (PTX ISA "stmatrix", sm_90)
//   movmatrix.sync.aligned.m8n8.trans.b16                     (PTX ISA "movmatrix")
//   shfl.sync.{up,down,bfly,idx}.b32 d|p, a, b, c, membermask   (PTX ISA "shfl.sync")
//   cp.async.{ca,cg}.shared.global [dst], [src], {4,8,16}, src-size; commit_group; wait_group 0
// No CUDA headers: barriers are written as PTX (bar.warp.sync), so NVRTC and nvcc compile it alike.

#define PROBE_SMEM 8192
#define PROBE_WORDS (PROBE_SMEM / 4)

__device__ __forceinline__ unsigned smem_u32(const void* p) {
    unsigned r;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
    return r;
}
__device__ __forceinline__ void syncwarp_all() { asm volatile("bar.warp.sync 0xffffffff;" ::: "memory"); }

#define PROBE_LOAD_IMAGE()                                                                  \
    __shared__ __align__(128) unsigned buf[PROBE_WORDS];                                   \
    const unsigned lane = threadIdx.x & 31u;                                                \
    const unsigned long long blk = blockIdx.x;                                              \
    for (unsigned i = lane; i < PROBE_WORDS; i += 32u) buf[i] = image[blk * PROBE_WORDS + i]; \
    syncwarp_all()

#define PROBE_DUMP_IMAGE()                                                                  \
    syncwarp_all();                                                                         \
    for (unsigned i = lane; i < PROBE_WORDS; i += 32u) out[blk * PROBE_WORDS + i] = buf[i]

// ------------------------------------------------------------------------------------ ldmatrix
// image (n, PROBE_WORDS) u32, addr (n, 32) u32 byte offsets, out (n, 32, N) u32
#define LDSM1(NAME, TR)                                                                        \
    extern "C" __global__ void NAME(const unsigned* __restrict__ image, const unsigned* __restrict__ addr, \
                                    unsigned* __restrict__ out) {                              \
        PROBE_LOAD_IMAGE();                                                                    \
        const unsigned a = smem_u32(buf) + addr[blk * 32 + lane];                              \
        unsigned r0;                                                                           \
        asm volatile("ldmatrix.sync.aligned.m8n8.x1" TR ".shared.b16 {%0}, [%1];" : "=r"(r0) : "r"(a) : "memory"); \
        out[blk * 32 + lane] = r0;                                                             \
    }
#define LDSM2(NAME, TR)                                                                        \
    extern "C" __global__ void NAME(const unsigned* __restrict__ image, const unsigned* __restrict__ addr, \
                                    unsigned* __restrict__ out) {                              \
        PROBE_LOAD_IMAGE();                                                                    \
        const unsigned a = smem_u32(buf) + addr[blk * 32 + lane];                              \
        unsigned r0, r1;                                                                       \
        asm volatile("ldmatrix.sync.aligned.m8n8.x2" TR ".shared.b16 {%0, %1}, [%2];"         \
                     : "=r"(r0), "=r"(r1) : "r"(a) : "memory");                                \
        out[(blk * 32 + lane) * 2 + 0] = r0;                                                   \
        out[(blk * 32 + lane) * 2 + 1] = r1;                                                   \
    }
#define LDSM4(NAME, TR)                                                                        \
    extern "C" __global__ void NAME(const unsigned* __restrict__ image, const unsigned* __restrict__ addr, \
                                    unsigned* __restrict__ out) {                              \
        PROBE_LOAD_IMAGE();                                                                    \
        const unsigned a = smem_u32(buf) + addr[blk * 32 + lane];                              \
        unsigned r0, r1, r2, r3;                                                               \
        asm volatile("ldmatrix.sync.aligned.m8n8.x4" TR ".shared.b16 {%0, %1, %2, %3}, [%4];" \
                     : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(a) : "memory");            \
        unsigned* o = out + (blk * 32 + lane) * 4;                                             \
        o[0] = r0; o[1] = r1; o[2] = r2; o[3] = r3;                                            \
    }
LDSM1(ldmatrix_x1, "")
LDSM2(ldmatrix_x2, "")
LDSM4(ldmatrix_x4, "")
LDSM1(ldmatrix_x1_trans, ".trans")
LDSM2(ldmatrix_x2_trans, ".trans")
LDSM4(ldmatrix_x4_trans, ".trans")

// ------------------------------------------------------------------------------------ stmatrix
// image (n, PROBE_WORDS) u32 initial bytes, addr (n, 32), regs (n, 32, N); out (n, PROBE_WORDS) final bytes
#define STSM1(NAME, TR)                                                                        \
    extern "C" __global__ void NAME(const unsigned* __restrict__ image, const unsigned* __restrict__ addr, \
                                    const unsigned* __restrict__ regs, unsigned* __restrict__ out) { \
        PROBE_LOAD_IMAGE();                                                                    \
        const unsigned a = smem_u32(buf) + addr[blk * 32 + lane];                              \
        const unsigned r0 = regs[blk * 32 + lane];                                             \
        asm volatile("stmatrix.sync.aligned.m8n8.x1" TR ".shared.b16 [%0], {%1};" :: "r"(a), "r"(r0) : "memory"); \
        PROBE_DUMP_IMAGE();                                                                    \
    }
#define STSM2(NAME, TR)                                                                        \
    extern "C" __global__ void NAME(const unsigned* __restrict__ image, const unsigned* __restrict__ addr, \
                                    const unsigned* __restrict__ regs, unsigned* __restrict__ out) { \
        PROBE_LOAD_IMAGE();                                                                    \
        const unsigned a = smem_u32(buf) + addr[blk * 32 + lane];                              \
        const unsigned* r = regs + (blk * 32 + lane) * 2;                                      \
        asm volatile("stmatrix.sync.aligned.m8n8.x2" TR ".shared.b16 [%0], {%1, %2};"         \
                     :: "r"(a), "r"(r[0]), "r"(r[1]) : "memory");                              \
        PROBE_DUMP_IMAGE();                                                                    \
    }
#define STSM4(NAME, TR)                                                                        \
    extern "C" __global__ void NAME(const unsigned* __restrict__ image, const unsigned* __restrict__ addr, \
                                    const unsigned* __restrict__ regs, unsigned* __restrict__ out) { \
        PROBE_LOAD_IMAGE();                                                                    \
        const unsigned a = smem_u32(buf) + addr[blk * 32 + lane];                              \
        const unsigned* r = regs + (blk * 32 + lane) * 4;                                      \
        asm volatile("stmatrix.sync.aligned.m8n8.x4" TR ".shared.b16 [%0], {%1, %2, %3, %4};" \
                     :: "r"(a), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");        \
        PROBE_DUMP_IMAGE();                                                                    \
    }
STSM1(stmatrix_x1, "")
STSM2(stmatrix_x2, "")
STSM4(stmatrix_x4, "")
STSM1(stmatrix_x1_trans, ".trans")
STSM2(stmatrix_x2_trans, ".trans")
STSM4(stmatrix_x4_trans, ".trans")

// ------------------------------------------------------------------------------------ movmatrix
// in (n, 32) u32, out (n, 32) u32
extern "C" __global__ void movmatrix_trans(const unsigned* __restrict__ in, unsigned* __restrict__ out) {
    const unsigned long long i = blockIdx.x * 32ull + (threadIdx.x & 31u);
    unsigned d;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(d) : "r"(in[i]));
    out[i] = d;
}

// ------------------------------------------------------------------------------------ shfl.sync
// a, b (n, 32) u32; c, mask (n) u32; d (n, 32); p (n, 32): 1/0, or 2 for a lane outside mask (not executed)
#define SHFL(NAME, MODE)                                                                       \
    extern "C" __global__ void NAME(const unsigned* __restrict__ a, const unsigned* __restrict__ b, \
                                    const unsigned* __restrict__ c, const unsigned* __restrict__ mask, \
                                    unsigned* __restrict__ d, unsigned* __restrict__ p) {      \
        const unsigned lane = threadIdx.x & 31u;                                               \
        const unsigned long long w = blockIdx.x, i = w * 32ull + lane;                         \
        const unsigned m = mask[w];                                                            \
        if ((m >> lane) & 1u) {                                                                \
            unsigned r, q;                                                                     \
            asm volatile("{ .reg .pred pp; shfl.sync." MODE ".b32 %0|pp, %2, %3, %4, %5; selp.u32 %1, 1, 0, pp; }" \
                         : "=r"(r), "=r"(q) : "r"(a[i]), "r"(b[i]), "r"(c[w]), "r"(m));      \
            d[i] = r;                                                                          \
            p[i] = q;                                                                          \
        } else {                                                                               \
            d[i] = 0u;                                                                         \
            p[i] = 2u;                                                                         \
        }                                                                                      \
    }
SHFL(shfl_up, "up")
SHFL(shfl_down, "down")
SHFL(shfl_bfly, "bfly")
SHFL(shfl_idx, "idx")

// ------------------------------------------------------------------------------------ cp.async
// image (n, PROBE_WORDS) initial shared bytes; gmem: global bytes; dst, src, srcsize (n, 32) u32;
// active (n) lane mask; out (n, PROBE_WORDS) shared bytes after wait_group 0.
#define CPASYNC(NAME, CACHE, SIZE)                                                             \
    extern "C" __global__ void NAME(const unsigned* __restrict__ image, const unsigned char* __restrict__ gmem, \
                                    const unsigned* __restrict__ dst, const unsigned* __restrict__ src, \
                                    const unsigned* __restrict__ srcsize, const unsigned* __restrict__ active, \
                                    unsigned* __restrict__ out) {                              \
        PROBE_LOAD_IMAGE();                                                                    \
        if ((active[blk] >> lane) & 1u) {                                                      \
            const unsigned sa = smem_u32(buf) + dst[blk * 32 + lane];                          \
            const unsigned char* ga = gmem + src[blk * 32 + lane];                             \
            asm volatile("cp.async." CACHE ".shared.global [%0], [%1], " #SIZE ", %2;"        \
                         :: "r"(sa), "l"(ga), "r"(srcsize[blk * 32 + lane]) : "memory");       \
        }                                                                                      \
        asm volatile("cp.async.commit_group;" ::: "memory");                                   \
        asm volatile("cp.async.wait_group 0;" ::: "memory");                                   \
        PROBE_DUMP_IMAGE();                                                                    \
    }
CPASYNC(cp_async_ca_4, "ca", 4)
CPASYNC(cp_async_ca_8, "ca", 8)
CPASYNC(cp_async_ca_16, "ca", 16)
CPASYNC(cp_async_cg_16, "cg", 16)
