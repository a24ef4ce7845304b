// probe_tma.cu: the Tensor Memory Accelerator (cp.async.bulk.tensor, its reduce, prefetch and tensor-map
// forms) on one CTA per launch, to record on the H100 where every byte of a box goes and check flashsim's
// interpreter against it bit for bit (host side: gpu/validate_tma.py; the interpreter:
// flashsim/sass/ops_tma.py, flashsim/sass/tensormap.py).
//
// What they compile to (NVRTC 13.0, sm_90a): UTMALDG.{1..5}D [URd], [URm] (URd = shared destination,
// URd+1 = the mbarrier, URd+2.. = the coordinates; URm:URm+1 = the tensor map's generic address),
// UTMASTG.{1..5}D [URs], [URm] (URs+1.. = the coordinates), UTMAREDG.{1..5}D.<op>, UTMAPF.L2.{1..5}D
// [URc], [URm], UTMACMDFLUSH (commit_group), DEPBAR.LE SB0, n (wait_group), UTMACCTL.IV / .PF
// (fence.proxy.tensormap::generic.acquire / prefetch.tensormap). The address of a __grid_constant__
// parameter is c[0x0][0x198] + (its constant-bank offset - 0x210).
//
// The tensor map is a kernel parameter (const __grid_constant__, its bytes from cuTensorMapEncodeTiled) or,
// with TMA_F_GLOBAL_MAP, the same 128 bytes in global memory (gtm), copied there by the host before the
// launch (no fence.proxy.tensormap::generic.acquire is needed: no generic-proxy write in the kernel; its
// SASS, DEPBAR {5,4,3,2,1,0} + UTMACCTL.IV, is left out). NVRTC cannot include cuda.h, so the map's type is
// declared here (CUtensorMap: 16 64-bit words, 64-byte aligned).
//
// tma_load: 128 threads fill the dynamic shared memory (region_words words) with a sentinel pattern
// (tma_fill, inverted with TMA_F_INVERT: a byte the copy did not write differs between the two runs), then
// thread 0 initialises the mbarrier at shared word 0, arrives on it expecting tx_bytes, issues the load of
// the box at (c0..c4) into dst_off, and waits (try_wait.parity 0) until the phase completes or `timeout`
// clock cycles pass; info = {completed, the 8 bytes at the mbarrier's address read with ld.shared (on the
// H100 the sentinel stored there before mbarrier.init: the barrier's state is not visible to loads), cycles
// waited, shared address of the region, generic address of the map}; then every word of the region goes to
// `dump`. rank_bit = 1 << (rank - 1).
// tma_store: the region is filled from `src`; thread 0 stores (op_bit 1) or reduces (op_bit 2 .. 256: add,
// min, max, inc, dec, and, or, xor) the box at src_off to the tensor at (c0..c4), commits and waits;
// info = {1, cycles, shared address of the region, generic address of the map}.
// The H100 stops (illegal instruction) a copy whose dimension-0 start is not 16-byte aligned and a store or
// reduction that starts at a negative coordinate (run 1 of the record): the host keeps to that except in its
// "risky" cases, each run in a process of its own.
// param_probe: the generic addresses of two __grid_constant__ parameters and their bytes read back through
// those addresses (generic loads from the parameter window), beside the generic addresses of a __device__
// variable and of shared memory: 40 words per CTA.

#define TMA_F_INVERT 1u
#define TMA_F_GLOBAL_MAP 2u
#define TMA_F_PREFETCH 4u
#define TMA_F_PREFETCH_MAP 8u

struct __align__(64) fs_tensor_map {
    unsigned long long opaque[16];
};

__device__ unsigned long long fs_tma_marker[4];
__constant__ unsigned long long fs_tma_cmarker[4];

// the sentinel word i of seed `seed` (gpu/validate_tma.py: fill_pattern computes the same)
__device__ __forceinline__ unsigned tma_fill(unsigned i, unsigned seed) {
    unsigned x = i * 0x9E3779B1u + seed;
    x ^= x >> 15;
    x *= 0x85EBCA77u;
    x ^= x >> 13;
    return x;
}

#define TMA_G2S(PFX)                                                                                          \
    if (rank_bit & 1) {                                                                                     \
        asm volatile(PFX ".1d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2}], [%3];" \
                     ::"r"(dst), "l"(map), "r"(c0), "r"(bar) : "memory");                                   \
    }                                                                                                      \
    if (rank_bit & 2) {                                                                                     \
        asm volatile(PFX ".2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" \
                     ::"r"(dst), "l"(map), "r"(c0), "r"(c1), "r"(bar) : "memory");                          \
    }                                                                                                      \
    if (rank_bit & 4) {                                                                                     \
        asm volatile(PFX ".3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], " \
                     "[%5];" ::"r"(dst), "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(bar) : "memory");          \
    }                                                                                                      \
    if (rank_bit & 8) {                                                                                     \
        asm volatile(PFX ".4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, " \
                     "%5}], [%6];" ::"r"(dst), "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar) : "memory"); \
    }                                                                                                       \
    if (rank_bit & 16) {                                                                                    \
        asm volatile(PFX ".5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, " \
                     "%5, %6}], [%7];" ::"r"(dst), "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4),      \
                     "r"(bar) : "memory");                                                                   \
    }

#define TMA_PREFETCH()                                                                                        \
    if (rank_bit & 1) {                                                                                     \
        asm volatile("cp.async.bulk.prefetch.tensor.1d.L2.global.tile [%0, {%1}];" ::"l"(map), "r"(c0) : "memory"); \
    }                                                                                                      \
    if (rank_bit & 2) {                                                                                     \
        asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%0, {%1, %2}];" ::"l"(map), "r"(c0),    \
                     "r"(c1) : "memory");                                                                   \
    }                                                                                                      \
    if (rank_bit & 4) {                                                                                     \
        asm volatile("cp.async.bulk.prefetch.tensor.3d.L2.global.tile [%0, {%1, %2, %3}];" ::"l"(map), "r"(c0), \
                     "r"(c1), "r"(c2) : "memory");                                                          \
    }                                                                                                      \
    if (rank_bit & 8) {                                                                                     \
        asm volatile("cp.async.bulk.prefetch.tensor.4d.L2.global.tile [%0, {%1, %2, %3, %4}];" ::"l"(map),     \
                     "r"(c0), "r"(c1), "r"(c2), "r"(c3) : "memory");                                        \
    }                                                                                                       \
    if (rank_bit & 16) {                                                                                    \
        asm volatile("cp.async.bulk.prefetch.tensor.5d.L2.global.tile [%0, {%1, %2, %3, %4, %5}];" ::"l"(map), \
                     "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4) : "memory");                               \
    }

// a store (MID "") or a reduction (MID ".<op>.tile") of the box at shared address s to the tensor
#define TMA_S2G(PFX, MID)                                                                                     \
    if (rank_bit & 1) {                                                                                     \
        asm volatile(PFX ".1d.global.shared::cta" MID ".bulk_group [%0, {%1}], [%2];" ::"l"(map), "r"(c0),     \
                     "r"(s) : "memory");                                                                    \
    }                                                                                                      \
    if (rank_bit & 2) {                                                                                     \
        asm volatile(PFX ".2d.global.shared::cta" MID ".bulk_group [%0, {%1, %2}], [%3];" ::"l"(map), "r"(c0), \
                     "r"(c1), "r"(s) : "memory");                                                           \
    }                                                                                                      \
    if (rank_bit & 4) {                                                                                     \
        asm volatile(PFX ".3d.global.shared::cta" MID ".bulk_group [%0, {%1, %2, %3}], [%4];" ::"l"(map),      \
                     "r"(c0), "r"(c1), "r"(c2), "r"(s) : "memory");                                         \
    }                                                                                                      \
    if (rank_bit & 8) {                                                                                     \
        asm volatile(PFX ".4d.global.shared::cta" MID ".bulk_group [%0, {%1, %2, %3, %4}], [%5];" ::"l"(map),  \
                     "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(s) : "memory");                                \
    }                                                                                                       \
    if (rank_bit & 16) {                                                                                    \
        asm volatile(PFX ".5d.global.shared::cta" MID ".bulk_group [%0, {%1, %2, %3, %4, %5}], [%6];"          \
                     ::"l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4), "r"(s) : "memory");            \
    }

extern "C" __global__ void __launch_bounds__(128) tma_load(const __grid_constant__ fs_tensor_map tm,
                                                           const fs_tensor_map* __restrict__ gtm, unsigned rank_bit,
                                                           int c0, int c1, int c2, int c3, int c4, unsigned dst_off,
                                                           unsigned tx_bytes, unsigned region_words,
                                                           unsigned seed, unsigned flags, long long timeout,
                                                           unsigned* __restrict__ dump,
                                                           unsigned long long* __restrict__ info) {
    extern __shared__ __align__(1024) unsigned tma_smem[];
    const unsigned inv = (flags & TMA_F_INVERT) ? 0xFFFFFFFFu : 0u;
    for (unsigned i = threadIdx.x; i < region_words; i += blockDim.x) tma_smem[i] = tma_fill(i, seed) ^ inv;
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the sentinel before the async proxy's writes
    __syncthreads();
    const unsigned base = (unsigned)__cvta_generic_to_shared(tma_smem);
    const unsigned bar = base;
    const unsigned dst = base + dst_off;
    const void* map = (flags & TMA_F_GLOBAL_MAP) ? (const void*)gtm : (const void*)&tm;
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        if (flags & TMA_F_PREFETCH_MAP) asm volatile("prefetch.tensormap [%0];" ::"l"(map) : "memory");
        if (flags & TMA_F_PREFETCH) {
            TMA_PREFETCH()
        }
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(tx_bytes) : "memory");
        TMA_G2S("cp.async.bulk.tensor")
        const long long t0 = clock64();
        unsigned ok = 0;
        long long t1 = t0;
        do {
            asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0; selp.u32 %0, 1, 0, p; }"
                         : "=r"(ok) : "r"(bar) : "memory");
            t1 = clock64();
        } while (!ok && t1 - t0 < timeout);
        unsigned long long word;
        asm volatile("ld.volatile.shared.b64 %0, [%1];" : "=l"(word) : "r"(bar) : "memory");
        info[0] = ok;
        info[1] = word;
        info[2] = (unsigned long long)(t1 - t0);
        info[3] = base;
        info[4] = (unsigned long long)map;
    }
    __syncthreads();
    for (unsigned i = threadIdx.x; i < region_words; i += blockDim.x) dump[i] = tma_smem[i];
}

extern "C" __global__ void __launch_bounds__(128) tma_store(const __grid_constant__ fs_tensor_map tm,
                                                            const fs_tensor_map* __restrict__ gtm, unsigned rank_bit,
                                                            int c0, int c1, int c2, int c3, int c4, unsigned src_off,
                                                            unsigned region_words, unsigned op_bit, unsigned flags,
                                                            const unsigned* __restrict__ src,
                                                            unsigned long long* __restrict__ info) {
    extern __shared__ __align__(1024) unsigned tma_smem[];
    for (unsigned i = threadIdx.x; i < region_words; i += blockDim.x) tma_smem[i] = src[i];
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the box visible to the async proxy
    __syncthreads();
    const unsigned base = (unsigned)__cvta_generic_to_shared(tma_smem);
    const unsigned s = base + src_off;
    const void* map = (flags & TMA_F_GLOBAL_MAP) ? (const void*)gtm : (const void*)&tm;
    if (threadIdx.x == 0) {
        const long long t0 = clock64();
        // one-hot selectors, not a switch on a value: ptxas makes a switch (or an if chain on one value) a jump
        // table in constant bank 2, which the interpreter does not load
        if (op_bit & 1) {
            TMA_S2G("cp.async.bulk.tensor", "")
        }
        if (op_bit & 2) {
            TMA_S2G("cp.reduce.async.bulk.tensor", ".add.tile")
        }
        if (op_bit & 4) {
            TMA_S2G("cp.reduce.async.bulk.tensor", ".min.tile")
        }
        if (op_bit & 8) {
            TMA_S2G("cp.reduce.async.bulk.tensor", ".max.tile")
        }
        if (op_bit & 16) {
            TMA_S2G("cp.reduce.async.bulk.tensor", ".inc.tile")
        }
        if (op_bit & 32) {
            TMA_S2G("cp.reduce.async.bulk.tensor", ".dec.tile")
        }
        if (op_bit & 64) {
            TMA_S2G("cp.reduce.async.bulk.tensor", ".and.tile")
        }
        if (op_bit & 128) {
            TMA_S2G("cp.reduce.async.bulk.tensor", ".or.tile")
        }
        if (op_bit & 256) {
            TMA_S2G("cp.reduce.async.bulk.tensor", ".xor.tile")
        }
        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
        asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
        info[0] = 1;
        info[1] = (unsigned long long)(clock64() - t0);
        info[2] = base;
        info[3] = (unsigned long long)map;
    }
}

extern "C" __global__ void __launch_bounds__(32) param_probe(const __grid_constant__ fs_tensor_map tm, int x,
                                                             const __grid_constant__ fs_tensor_map tm2,
                                                             long long off, unsigned long long* __restrict__ out) {
    __shared__ unsigned long long sm[2];
    unsigned long long* o = out + 40 * blockIdx.x;
    if (threadIdx.x == 0) {
        sm[0] = x;
        o[0] = (unsigned long long)&tm;
        o[1] = (unsigned long long)&tm2;
        // generic loads through the parameters' addresses (the asm keeps NVRTC from reading the parameter
        // space instead)
        unsigned long long pa, qa, v;
        asm volatile("mov.b64 %0, %1;" : "=l"(pa) : "l"((unsigned long long)&tm + off));
        asm volatile("mov.b64 %0, %1;" : "=l"(qa) : "l"((unsigned long long)&tm2 + off));
        for (int i = 0; i < 16; i++) {
            asm volatile("ld.volatile.u64 %0, [%1];" : "=l"(v) : "l"(pa + 8 * i) : "memory");
            o[2 + i] = v;
            asm volatile("ld.volatile.u64 %0, [%1];" : "=l"(v) : "l"(qa + 8 * i) : "memory");
            o[18 + i] = v;
        }
        o[34] = (unsigned long long)fs_tma_marker;
        o[35] = 0;
        o[36] = (unsigned long long)sm;
        o[37] = (unsigned long long)(unsigned)x;
        o[38] = (unsigned long long)blockIdx.x;
        o[39] = sm[0] + fs_tma_cmarker[0];
    }
}

// the generic address of a __constant__ variable (ptxas reads it from the driver's word c[0x0][0xd0], which
// the interpreter does not model: a kernel of its own, left out of the interpreter's replay)
extern "C" __global__ void const_probe(unsigned long long* __restrict__ out) {
    out[0] = (unsigned long long)fs_tma_cmarker;
    out[1] = fs_tma_cmarker[1];
}
