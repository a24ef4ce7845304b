// probe_smem.cu: shared-memory probes measured by tools, not by their outputs.
//
// 1. Bank patterns (gpu/check_banks.py, under `ncu --clock-control none`): each bank_* kernel executes
//    EXACTLY ONE shared-memory warp instruction of its kind, with the per-lane byte offsets `offs[32]`
//    and the lane mask `active` chosen by the host, so Nsight Compute's instruction-level counters
//    (smsp__sass_..._mem_shared_op_{ld,st,ldsm,stsm,ldgsts}) hold that instruction's wavefronts alone.
//    Launch with one block of 32 threads. Loads read uninitialised shared memory (values do not matter)
//    and store them to `sink` so the instruction stays. Every shared access is inline PTX (asm volatile).
// 2. Race probes (gpu/check_races.py, under `compute-sanitizer --tool racecheck`): race_* kernels,
//    one block of 64 threads (two warps), each a known hazard or a correctly synchronised control.
// No CUDA headers: barriers are PTX (bar.sync 0 = __syncthreads, bar.warp.sync = __syncwarp).

#define BANK_SMEM 49152

__device__ __forceinline__ unsigned smem_u32(const void* p) {
    unsigned r;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
    return r;
}

#define BANK_KERNEL(NAME) \
    extern "C" __global__ void NAME(const unsigned* __restrict__ offs, unsigned active, \
                                    const unsigned char* __restrict__ gsrc, unsigned* __restrict__ sink)
#define BANK_PROLOGUE()                                                     \
    __shared__ __align__(1024) unsigned char buf[BANK_SMEM];               \
    const unsigned lane = threadIdx.x & 31u;                                \
    const unsigned a = smem_u32(buf) + offs[lane];                          \
    const bool on = (active >> lane) & 1u;                                  \
    (void)gsrc; (void)on

// ------------------------------------------------------------------------------- ld.shared
BANK_KERNEL(bank_ld8) {
    BANK_PROLOGUE();
    unsigned r = 0;
    if (on) asm volatile("ld.shared.u8 %0, [%1];" : "=r"(r) : "r"(a) : "memory");
    sink[lane] = r;
}
BANK_KERNEL(bank_ld16) {
    BANK_PROLOGUE();
    unsigned short r = 0;
    if (on) asm volatile("ld.shared.u16 %0, [%1];" : "=h"(r) : "r"(a) : "memory");
    sink[lane] = r;
}
BANK_KERNEL(bank_ld32) {
    BANK_PROLOGUE();
    unsigned r = 0;
    if (on) asm volatile("ld.shared.u32 %0, [%1];" : "=r"(r) : "r"(a) : "memory");
    sink[lane] = r;
}
BANK_KERNEL(bank_ld64) {
    BANK_PROLOGUE();
    unsigned x = 0, y = 0;
    if (on) asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(x), "=r"(y) : "r"(a) : "memory");
    sink[lane] = x ^ y;
}
BANK_KERNEL(bank_ld128) {
    BANK_PROLOGUE();
    unsigned x = 0, y = 0, z = 0, w = 0;
    if (on) asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(x), "=r"(y), "=r"(z), "=r"(w) : "r"(a) : "memory");
    sink[lane] = x ^ y ^ z ^ w;
}

// ------------------------------------------------------------------------------- st.shared
BANK_KERNEL(bank_st8) {
    BANK_PROLOGUE();
    if (on) asm volatile("st.shared.u8 [%0], %1;" :: "r"(a), "r"(lane) : "memory");
}
BANK_KERNEL(bank_st16) {
    BANK_PROLOGUE();
    if (on) asm volatile("st.shared.u16 [%0], %1;" :: "r"(a), "h"((unsigned short)lane) : "memory");
}
BANK_KERNEL(bank_st32) {
    BANK_PROLOGUE();
    if (on) asm volatile("st.shared.u32 [%0], %1;" :: "r"(a), "r"(lane) : "memory");
}
BANK_KERNEL(bank_st64) {
    BANK_PROLOGUE();
    if (on) asm volatile("st.shared.v2.u32 [%0], {%1, %2};" :: "r"(a), "r"(lane), "r"(lane + 1u) : "memory");
}
BANK_KERNEL(bank_st128) {
    BANK_PROLOGUE();
    if (on) asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" :: "r"(a), "r"(lane), "r"(lane + 1u), "r"(lane + 2u), "r"(lane + 3u) : "memory");
}

// ------------------------------------------------------------------------------- ldmatrix / stmatrix
// .aligned: every lane executes; lanes past 8*N give ignored addresses (the host passes valid ones)
#define LDSM_X1(TR) \
    unsigned r0; asm volatile("ldmatrix.sync.aligned.m8n8.x1" TR ".shared.b16 {%0}, [%1];" : "=r"(r0) : "r"(a) : "memory"); sink[lane] = r0
#define LDSM_X2(TR) \
    unsigned r0, r1; asm volatile("ldmatrix.sync.aligned.m8n8.x2" TR ".shared.b16 {%0, %1}, [%2];" : "=r"(r0), "=r"(r1) : "r"(a) : "memory"); \
    sink[lane] = r0 ^ r1
#define LDSM_X4(TR) \
    unsigned r0, r1, r2, r3; \
    asm volatile("ldmatrix.sync.aligned.m8n8.x4" TR ".shared.b16 {%0, %1, %2, %3}, [%4];" : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(a) : "memory"); \
    sink[lane] = r0 ^ r1 ^ r2 ^ r3
BANK_KERNEL(bank_ldsm_x1) { BANK_PROLOGUE(); LDSM_X1(""); }
BANK_KERNEL(bank_ldsm_x2) { BANK_PROLOGUE(); LDSM_X2(""); }
BANK_KERNEL(bank_ldsm_x4) { BANK_PROLOGUE(); LDSM_X4(""); }
BANK_KERNEL(bank_ldsm_x1_trans) { BANK_PROLOGUE(); LDSM_X1(".trans"); }
BANK_KERNEL(bank_ldsm_x2_trans) { BANK_PROLOGUE(); LDSM_X2(".trans"); }
BANK_KERNEL(bank_ldsm_x4_trans) { BANK_PROLOGUE(); LDSM_X4(".trans"); }

#define STSM_X1(TR) asm volatile("stmatrix.sync.aligned.m8n8.x1" TR ".shared.b16 [%0], {%1};" :: "r"(a), "r"(lane) : "memory")
#define STSM_X2(TR) asm volatile("stmatrix.sync.aligned.m8n8.x2" TR ".shared.b16 [%0], {%1, %2};" :: "r"(a), "r"(lane), "r"(lane + 1u) : "memory")
#define STSM_X4(TR) asm volatile("stmatrix.sync.aligned.m8n8.x4" TR ".shared.b16 [%0], {%1, %2, %3, %4};" \
                                 :: "r"(a), "r"(lane), "r"(lane + 1u), "r"(lane + 2u), "r"(lane + 3u) : "memory")
BANK_KERNEL(bank_stsm_x1) { BANK_PROLOGUE(); STSM_X1(""); }
BANK_KERNEL(bank_stsm_x2) { BANK_PROLOGUE(); STSM_X2(""); }
BANK_KERNEL(bank_stsm_x4) { BANK_PROLOGUE(); STSM_X4(""); }
BANK_KERNEL(bank_stsm_x4_trans) { BANK_PROLOGUE(); STSM_X4(".trans"); }

// ------------------------------------------------------------------------------- cp.async (LDGSTS)
// source: gsrc + 16 * lane (aligned, distinct); then wait_all (no shared-memory access of its own)
#define BANK_CPASYNC(NAME, CACHE, SIZE)                                                              \
    BANK_KERNEL(NAME) {                                                                              \
        BANK_PROLOGUE();                                                                             \
        if (on) asm volatile("cp.async." CACHE ".shared.global [%0], [%1], " #SIZE ";"              \
                             :: "r"(a), "l"(gsrc + 16u * lane) : "memory");                         \
        asm volatile("cp.async.wait_all;" ::: "memory");                                             \
        sink[lane] = lane;                                                                           \
    }
BANK_CPASYNC(bank_ldgsts_ca4, "ca", 4)
BANK_CPASYNC(bank_ldgsts_ca8, "ca", 8)
BANK_CPASYNC(bank_ldgsts_ca16, "ca", 16)
BANK_CPASYNC(bank_ldgsts_cg16, "cg", 16)

// =============================================================================== race probes
// One block of 64 threads (warps 0 and 1); `out` receives 64 words so no access is dead code.
// `volatile` keeps every shared access in program order. Each case is named for what it shows.
#define RACE_KERNEL(NAME) extern "C" __global__ void NAME(const unsigned char* __restrict__ gsrc, unsigned* __restrict__ out)
#define RACE_PROLOGUE()                                                  \
    __shared__ __align__(16) unsigned sbuf[256];                        \
    volatile unsigned* vb = sbuf;                                        \
    const unsigned tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5; \
    (void)gsrc; (void)lane; (void)warp
#define SYNCTHREADS() asm volatile("bar.sync 0;" ::: "memory")
#define SYNCWARP() asm volatile("bar.warp.sync 0xffffffff;" ::: "memory")

// RAW across warps: warp 0 writes, warp 1 reads, no barrier -> hazard
RACE_KERNEL(race_raw_no_barrier) {
    RACE_PROLOGUE();
    if (warp == 0) vb[lane] = lane + 1u;
    if (warp == 1) out[lane] = vb[lane];
}
// the same with __syncthreads between -> no hazard
RACE_KERNEL(race_raw_syncthreads) {
    RACE_PROLOGUE();
    if (warp == 0) vb[lane] = lane + 1u;
    SYNCTHREADS();
    if (warp == 1) out[lane] = vb[lane];
}
// WAR across warps: warp 1 reads what warp 0 then overwrites, no barrier between -> hazard
RACE_KERNEL(race_war_no_barrier) {
    RACE_PROLOGUE();
    vb[tid] = tid + 1u;
    SYNCTHREADS();
    if (warp == 1) out[lane] = vb[lane];
    if (warp == 0) vb[lane] = lane + 100u;
}
// the same with __syncthreads between the read and the write -> no hazard
RACE_KERNEL(race_war_syncthreads) {
    RACE_PROLOGUE();
    vb[tid] = tid + 1u;
    SYNCTHREADS();
    if (warp == 1) out[lane] = vb[lane];
    SYNCTHREADS();
    if (warp == 0) vb[lane] = lane + 100u;
}
// WAW across warps: both warps write the same words (different values), no barrier -> hazard
RACE_KERNEL(race_waw_no_barrier) {
    RACE_PROLOGUE();
    vb[lane] = tid + 1u;
    SYNCTHREADS();
    out[tid] = vb[tid];
}
// cp.async, then wait_all and __syncthreads before another warp reads -> no hazard
RACE_KERNEL(race_cp_async_wait_syncthreads) {
    RACE_PROLOGUE();
    if (warp == 0) {
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(smem_u32(sbuf) + 16u * lane), "l"(gsrc + 16u * lane) : "memory");
        asm volatile("cp.async.commit_group;" ::: "memory");
        asm volatile("cp.async.wait_group 0;" ::: "memory");
    }
    SYNCTHREADS();
    if (warp == 1) out[lane] = vb[4u * lane];
}
// cp.async, __syncthreads but NO wait before another warp reads -> hazard (read before the copy's wait)
RACE_KERNEL(race_cp_async_no_wait) {
    RACE_PROLOGUE();
    if (warp == 0) {
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(smem_u32(sbuf) + 16u * lane), "l"(gsrc + 16u * lane) : "memory");
        asm volatile("cp.async.commit_group;" ::: "memory");
    }
    SYNCTHREADS();
    if (warp == 1) out[lane] = vb[4u * lane];
    if (warp == 0) asm volatile("cp.async.wait_group 0;" ::: "memory");
}
// cp.async and wait_all, but no __syncthreads before another warp reads -> hazard (RAW across warps)
RACE_KERNEL(race_cp_async_no_barrier) {
    RACE_PROLOGUE();
    if (warp == 0) {
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(smem_u32(sbuf) + 16u * lane), "l"(gsrc + 16u * lane) : "memory");
        asm volatile("cp.async.wait_all;" ::: "memory");
    }
    if (warp == 1) out[lane] = vb[4u * lane];
}
// within one warp: lanes write, __syncwarp, read a neighbour's word -> no hazard
RACE_KERNEL(race_intra_warp_syncwarp) {
    RACE_PROLOGUE();
    if (warp == 0) {
        vb[lane] = lane + 1u;
        SYNCWARP();
        out[lane] = vb[(lane + 1u) & 31u];
    }
}
// within one warp, no __syncwarp between the write and a neighbour's read -> hazard (intra-warp)
RACE_KERNEL(race_intra_warp_no_syncwarp) {
    RACE_PROLOGUE();
    if (warp == 0) {
        vb[lane] = lane + 1u;
        out[lane] = vb[(lane + 1u) & 31u];
    }
}
