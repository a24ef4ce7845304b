// probe_ldgsts_random.cu: cp.async (LDGSTS) on drawn lane patterns, a held-out check of the cp.async bank
// rule of flashsim.smem (fitted on the patterns of probe_ldgsts.cu): case probe_ldgsts_random of
// gpu/ncu_source.py, one block of 32 threads.
//
// gsrc starts with four tables of RL_PROBES x 32 u32 (per probe and lane): the destination byte offset
// (from a 1024-byte aligned shared buffer), the source byte offset (from gsrc + RL_DATA), the guard
// (nonzero: the lane copies) and an auxiliary word (the ignore-src predicate or the src-size, by form);
// gpu/ncu_source.py draws them (numpy.random.default_rng(2026)). Each probe is ONE line issuing ONE
// cp.async warp instruction; its form is the line's macro (arguments: the probe's name, its index). ptxas
// puts most guards and source predicates of this file in P0:
//   RL_CG16 / RL_CA16 / RL_CA8 / RL_CA4   @guard cp.async.{cg,ca}.shared.global [dst], [src], SIZE
//   RL_CG16_IGN                           cp.async.cg ..., 16, ignore-src (aux != 0), no guard
//   RL_CG16_SZ                            cp.async.cg ..., 16, src-size aux (0, 4, 8 or 16), no guard
// No CUDA headers: everything is PTX, so NVRTC and nvcc compile it alike.

#define RL_PROBES 48
#define RL_SMEM 8192
#define RL_DATA (4u * RL_PROBES * 32u * 4u)

__device__ __forceinline__ unsigned rl_smem_u32(const void* p) {
    unsigned r;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
    return r;
}

#define RL_LOAD(I) \
    const unsigned d_ = base + tab[(I) * 32u + lane]; \
    const unsigned char* s_ = gsrc + RL_DATA + tab[RL_PROBES * 32u + (I) * 32u + lane]; \
    const unsigned on_ = tab[2u * RL_PROBES * 32u + (I) * 32u + lane]; \
    const unsigned aux_ = tab[3u * RL_PROBES * 32u + (I) * 32u + lane]; \
    (void)on_; (void)aux_
#define RL_G(I, CACHE, SIZE) { RL_LOAD(I); asm volatile("{ .reg .pred p; setp.ne.u32 p, %2, 0; @p cp.async." CACHE ".shared.global [%0], [%1], " #SIZE "; }" :: "r"(d_), "l"(s_), "r"(on_) : "memory"); asm volatile("cp.async.wait_all;" ::: "memory"); }
#define RL_CG16(NAME, I) RL_G(I, "cg", 16)
#define RL_CA16(NAME, I) RL_G(I, "ca", 16)
#define RL_CA8(NAME, I) RL_G(I, "ca", 8)
#define RL_CA4(NAME, I) RL_G(I, "ca", 4)
#define RL_CG16_IGN(NAME, I) { RL_LOAD(I); asm volatile("{ .reg .pred q; setp.ne.u32 q, %2, 0; cp.async.cg.shared.global [%0], [%1], 16, q; }" :: "r"(d_), "l"(s_), "r"(aux_) : "memory"); asm volatile("cp.async.wait_all;" ::: "memory"); }
#define RL_CG16_SZ(NAME, I) { RL_LOAD(I); asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(d_), "l"(s_), "r"(aux_) : "memory"); asm volatile("cp.async.wait_all;" ::: "memory"); }

extern "C" __global__ void __launch_bounds__(32) probe_ldgsts_random(const unsigned char* __restrict__ gsrc,
                                                                     unsigned* __restrict__ sink) {
    __shared__ __align__(1024) unsigned char buf[RL_SMEM];
    const unsigned lane = threadIdx.x & 31u;
    const unsigned base = rl_smem_u32(buf);
    const unsigned* tab = reinterpret_cast<const unsigned*>(gsrc);
    RL_CG16(r00_cg16, 0);
    RL_CA16(r01_ca16, 1);
    RL_CA8(r02_ca8, 2);
    RL_CA4(r03_ca4, 3);
    RL_CG16_IGN(r04_cg16_ign, 4);
    RL_CG16_SZ(r05_cg16_sz, 5);
    RL_CG16(r06_cg16, 6);
    RL_CA16(r07_ca16, 7);
    RL_CA8(r08_ca8, 8);
    RL_CA4(r09_ca4, 9);
    RL_CG16_IGN(r10_cg16_ign, 10);
    RL_CG16_SZ(r11_cg16_sz, 11);
    RL_CG16(r12_cg16, 12);
    RL_CA16(r13_ca16, 13);
    RL_CA8(r14_ca8, 14);
    RL_CA4(r15_ca4, 15);
    RL_CG16_IGN(r16_cg16_ign, 16);
    RL_CG16_SZ(r17_cg16_sz, 17);
    RL_CG16(r18_cg16, 18);
    RL_CA16(r19_ca16, 19);
    RL_CA8(r20_ca8, 20);
    RL_CA4(r21_ca4, 21);
    RL_CG16_IGN(r22_cg16_ign, 22);
    RL_CG16_SZ(r23_cg16_sz, 23);
    RL_CG16(r24_cg16, 24);
    RL_CA16(r25_ca16, 25);
    RL_CA8(r26_ca8, 26);
    RL_CA4(r27_ca4, 27);
    RL_CG16_IGN(r28_cg16_ign, 28);
    RL_CG16_SZ(r29_cg16_sz, 29);
    RL_CG16(r30_cg16, 30);
    RL_CA16(r31_ca16, 31);
    RL_CA8(r32_ca8, 32);
    RL_CA4(r33_ca4, 33);
    RL_CG16_IGN(r34_cg16_ign, 34);
    RL_CG16_SZ(r35_cg16_sz, 35);
    RL_CG16(r36_cg16, 36);
    RL_CA16(r37_ca16, 37);
    RL_CA8(r38_ca8, 38);
    RL_CA4(r39_ca4, 39);
    RL_CG16_IGN(r40_cg16_ign, 40);
    RL_CG16_SZ(r41_cg16_sz, 41);
    RL_CG16(r42_cg16, 42);
    RL_CA16(r43_ca16, 43);
    RL_CA8(r44_ca8, 44);
    RL_CA4(r45_ca4, 45);
    RL_CG16_IGN(r46_cg16_ign, 46);
    RL_CG16_SZ(r47_cg16_sz, 47);
    sink[threadIdx.x] = reinterpret_cast<const unsigned*>(buf)[threadIdx.x];
}
