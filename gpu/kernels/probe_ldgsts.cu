// probe_ldgsts.cu: cp.async (SASS LDGSTS) patterns for Nsight Compute's per-instruction shared-memory counters
// (L1 Wavefronts Shared / Ideal, Instructions Executed), compared PC by PC with the interpreter by
// gpu/ncu_source.py (cases probe_ldgsts and probe_ldgsts_warps).
//
// Each probe is ONE line: a macro that issues ONE cp.async warp instruction (inline PTX, asm volatile, so
// none is merged, dropped or reordered), named by the macro's first argument; the host maps each SASS
// instruction to its probe through the source line (-lineinfo). Per lane: a destination byte offset DST
// (from a 1024-byte aligned shared buffer) and a source byte offset SRC (from gsrc), both expressions of
// `lane` (and `warp`), and, depending on the macro (arguments: NAME, CACHE, SIZE, [ON | SRCSIZE | IGN], DST, SRC):
//
//   CP     cp.async.CACHE.shared.global [dst], [src], SIZE (no guard)
//   CPG    the same under a guard @p, p = (ON != 0); every guard is a predicate of its own (compared with
//          a run-time zero times the line number), so ptxas neither shares it between probes nor turns
//          probes with one guard into a branch around them. The register a guard lands in is ptxas's
//          choice (P1..P6 in turn in a run of probes, P0 where no other predicate is live, as in the first
//          probes below): the SASS of every probe shows it
//   CPG_HELD  the same with a second predicate live across the copy
//   CP_SZ  cp.async ..., SIZE, src-size (a run-time register): SRCSIZE bytes are read, the rest zero-filled
//   CP_IGN cp.async ..., SIZE, q with the ignore-src predicate q = (IGN != 0): where q holds, nothing is
//          read and zeros land; CP_IGN_HELD with a second predicate live across the copy
//   CPG_IGN   a guard ON and an ignore-src predicate IGN on one copy
//   CP_ELSE_ZERO  C code of the shape FlashAttention kernels have: `if (ON) cp.async.CACHE 16 bytes; else
//          st.shared.v4 of zeros`, which ptxas makes `@P STS.128` (the zeros) and `@!P LDGSTS` (two shared
//          instructions on one line: the STS is compared too); `lane` and `warp` are salted with the
//          run-time zero so that no two probes share the condition
//
// What the patterns tell apart (per warp instruction; "line" = a 128-byte aligned line of shared memory):
// - cp.async.cg (LDGSTS.BYPASS) with bank conflicts: quarter-warp phases with conflicts counted as for a
//   128-bit store, or one wavefront per destination line written whole and one per 32-byte sector of a
//   line written in part (strides, lines interleaved between quarters, lines shifted by half a line);
// - cp.async.ca: quarter-warp phases whatever the size; lanes on one destination merged or not;
// - guards false in some lanes or in a whole warp, with the guard in P0 or in another register;
// - zero-filling lanes (src-size 0, ignore-src) counted as a plain store, and warps that mix them with
//   reading lanes (which part is counted over every lane);
// - whether the global source addresses play any part.
// Launch probe_ldgsts with ONE block of 32 threads and probe_ldgsts_warps with ONE block of 64 threads;
// gsrc must hold at least 8 KiB whose byte 1 is 0 (a run-time zero the compiler cannot see).
// No CUDA headers: everything is PTX, so NVRTC and nvcc compile it alike.

#define PL_SMEM 32768

__device__ __forceinline__ unsigned pl_smem_u32(const void* p) {
    unsigned r;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
    return r;
}

#define PL_PROLOGUE()                                             \
    __shared__ __align__(1024) unsigned char buf[PL_SMEM];        \
    const unsigned lane = threadIdx.x & 31u;                       \
    const unsigned warp = threadIdx.x >> 5;                        \
    const unsigned base = pl_smem_u32(buf);                        \
    const unsigned zero = gsrc[1];                                 \
    unsigned acc = 0u;                                             \
    (void)warp

#define CP(NAME, CACHE, SIZE, DST, SRC) { asm volatile("cp.async." CACHE ".shared.global [%0], [%1], " #SIZE ";" :: "r"(base + (DST)), "l"(gsrc + (SRC)) : "memory"); }
#define CPG(NAME, CACHE, SIZE, ON, DST, SRC) { asm volatile("{ .reg .pred p; setp.ne.u32 p, %2, %3; @p cp.async." CACHE ".shared.global [%0], [%1], " #SIZE "; }" :: "r"(base + (DST)), "l"(gsrc + (SRC)), "r"((unsigned)(ON)), "r"(zero * __LINE__) : "memory"); }
#define CPG_HELD(NAME, CACHE, SIZE, ON, DST, SRC) { asm volatile("{ .reg .pred h, p; setp.ne.u32 h, %5, %4; setp.ne.u32 p, %3, %4; @h add.u32 %0, %0, 1; @p cp.async." CACHE ".shared.global [%1], [%2], " #SIZE "; @h add.u32 %0, %0, 3; }" : "+r"(acc) : "r"(base + (DST)), "l"(gsrc + (SRC)), "r"((unsigned)(ON)), "r"(zero * __LINE__), "r"(lane & 2u) : "memory"); }
#define CP_SZ(NAME, CACHE, SIZE, SRCSIZE, DST, SRC) { asm volatile("cp.async." CACHE ".shared.global [%0], [%1], " #SIZE ", %2;" :: "r"(base + (DST)), "l"(gsrc + (SRC)), "r"((unsigned)(SRCSIZE)) : "memory"); }
#define CP_IGN(NAME, CACHE, SIZE, IGN, DST, SRC) { asm volatile("{ .reg .pred q; setp.ne.u32 q, %2, %3; cp.async." CACHE ".shared.global [%0], [%1], " #SIZE ", q; }" :: "r"(base + (DST)), "l"(gsrc + (SRC)), "r"((unsigned)(IGN)), "r"(zero * __LINE__) : "memory"); }
#define CP_IGN_HELD(NAME, CACHE, SIZE, IGN, DST, SRC) { asm volatile("{ .reg .pred h, q; setp.ne.u32 h, %5, %4; setp.ne.u32 q, %3, %4; @h add.u32 %0, %0, 1; cp.async." CACHE ".shared.global [%1], [%2], " #SIZE ", q; @h add.u32 %0, %0, 3; }" : "+r"(acc) : "r"(base + (DST)), "l"(gsrc + (SRC)), "r"((unsigned)(IGN)), "r"(zero * __LINE__), "r"(lane & 2u) : "memory"); }
#define CP_ELSE_ZERO(NAME, CACHE, ON, DST, SRC) { const unsigned l_ = lane + zero * __LINE__, w_ = warp + zero * __LINE__; { const unsigned lane = l_, warp = w_; (void)warp; if (ON) { asm volatile("cp.async." CACHE ".shared.global [%0], [%1], 16;" :: "r"(base + (DST)), "l"(gsrc + (SRC)) : "memory"); } else { asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};" :: "r"(base + (DST)), "r"(zero) : "memory"); } } }
#define CPG_IGN(NAME, CACHE, SIZE, ON, IGN, DST, SRC) { asm volatile("{ .reg .pred p, q; setp.ne.u32 p, %2, %4; setp.ne.u32 q, %3, %4; @p cp.async." CACHE ".shared.global [%0], [%1], " #SIZE ", q; }" :: "r"(base + (DST)), "l"(gsrc + (SRC)), "r"((unsigned)(ON)), "r"((unsigned)(IGN)), "r"(zero * __LINE__) : "memory"); }

// the default source: 16 distinct bytes per lane, consecutive lanes adjacent
#define S16 (16u * lane)

extern "C" __global__ void __launch_bounds__(32) probe_ldgsts(const unsigned char* __restrict__ gsrc,
                                                              unsigned* __restrict__ sink) {
    PL_PROLOGUE();
    // ---- 0. partial guards first, before any other predicate is live (the guard lands in P0, as in
    //      FlashAttention kernels' `@!P0 LDGSTS`); the same patterns with other registers in E, I, J
    CP_ELSE_ZERO(fa_first_cg16_stride16_lanes0to7, "cg", lane < 8u, lane * 16u, S16);
    asm volatile("cp.async.wait_all;" ::: "memory");
    CPG(first_cg16_stride32_guard_lanes0to15, "cg", 16, lane < 16u, lane * 32u, S16);
    asm volatile("cp.async.wait_all;" ::: "memory");
    CPG(first_ca4_stride128_guard_lanes0to7, "ca", 4, lane < 8u, lane * 128u, S16);
    asm volatile("cp.async.wait_all;" ::: "memory");
    // ---- A. every lane reads; destination stride per lane (bytes)
    CP(cg16_stride16, "cg", 16, lane * 16u, S16);
    CP(cg16_stride32, "cg", 16, lane * 32u, S16);
    CP(cg16_stride64, "cg", 16, lane * 64u, S16);
    CP(cg16_stride128, "cg", 16, lane * 128u, S16);
    CP(cg16_stride256, "cg", 16, lane * 256u, S16);
    CP(cg16_stride512, "cg", 16, lane * 512u, S16);
    CP(ca16_stride16, "ca", 16, lane * 16u, S16);
    CP(ca16_stride32, "ca", 16, lane * 32u, S16);
    CP(ca16_stride64, "ca", 16, lane * 64u, S16);
    CP(ca16_stride128, "ca", 16, lane * 128u, S16);
    CP(ca16_stride256, "ca", 16, lane * 256u, S16);
    CP(ca16_stride512, "ca", 16, lane * 512u, S16);
    CP(ca8_stride8, "ca", 8, lane * 8u, S16);
    CP(ca8_stride16, "ca", 8, lane * 16u, S16);
    CP(ca8_stride32, "ca", 8, lane * 32u, S16);
    CP(ca8_stride64, "ca", 8, lane * 64u, S16);
    CP(ca8_stride128, "ca", 8, lane * 128u, S16);
    CP(ca8_stride256, "ca", 8, lane * 256u, S16);
    CP(ca8_stride512, "ca", 8, lane * 512u, S16);
    CP(ca4_stride4, "ca", 4, lane * 4u, S16);
    CP(ca4_stride8, "ca", 4, lane * 8u, S16);
    CP(ca4_stride16, "ca", 4, lane * 16u, S16);
    CP(ca4_stride32, "ca", 4, lane * 32u, S16);
    CP(ca4_stride64, "ca", 4, lane * 64u, S16);
    CP(ca4_stride128, "ca", 4, lane * 128u, S16);
    CP(ca4_stride256, "ca", 4, lane * 256u, S16);
    CP(ca4_stride512, "ca", 4, lane * 512u, S16);
    // ---- B. lanes on one destination: all lanes, pairs of adjacent lanes, lane i with lane i + 8
    CP(cg16_one_dst, "cg", 16, 0u, S16);
    CP(ca16_one_dst, "ca", 16, 0u, S16);
    CP(ca8_one_dst, "ca", 8, 0u, S16);
    CP(ca4_one_dst, "ca", 4, 0u, S16);
    CP(cg16_pairs, "cg", 16, (lane / 2u) * 16u, S16);
    CP(ca16_pairs, "ca", 16, (lane / 2u) * 16u, S16);
    CP(ca8_pairs, "ca", 8, (lane / 2u) * 8u, S16);
    CP(ca4_pairs, "ca", 4, (lane / 2u) * 4u, S16);
    CP(cg16_pairs_across_quarters, "cg", 16, (lane % 8u) * 16u + (lane / 16u) * 128u, S16);
    CP(ca16_pairs_across_quarters, "ca", 16, (lane % 8u) * 16u + (lane / 16u) * 128u, S16);
    CP(cg16_lane1_on_lane0, "cg", 16, lane == 1u ? 0u : lane * 16u, S16);
    CP(ca16_lane1_on_lane0, "ca", 16, lane == 1u ? 0u : lane * 16u, S16);
    CP(cg16_lane1_on_lane8, "cg", 16, lane == 1u ? 128u : lane * 16u, S16);
    CP(ca16_lane1_on_lane8, "ca", 16, lane == 1u ? 128u : lane * 16u, S16);
    // ---- C. how the destination covers 128-byte lines (.cg), and the same for .ca
    CP(cg16_shift64, "cg", 16, 64u + lane * 16u, S16);
    CP(cg16_reversed, "cg", 16, (31u - lane) * 16u, S16);
    CP(cg16_xor_swizzle, "cg", 16, (lane / 8u) * 128u + ((lane % 8u) ^ (lane / 8u)) * 16u, S16);
    CP(cg16_lines_interleaved, "cg", 16, (lane % 4u) * 128u + (lane / 4u) * 16u, S16);
    CP(cg16_halves_interleaved, "cg", 16, (lane % 16u) * 32u + (lane / 16u) * 16u, S16);
    CP(cg16_two_sectors_per_line, "cg", 16, (lane / 4u) * 128u + (lane % 4u) * 16u, S16);
    CP(cg16_one_sector_per_line, "cg", 16, (lane / 2u) * 128u + (lane % 2u) * 16u, S16);
    CP(cg16_half_sector_per_line, "cg", 16, lane * 128u + 32u, S16);
    CP(cg16_lane7_on_lane6, "cg", 16, lane == 7u ? 96u : lane * 16u, S16);
    CP(ca16_shift64, "ca", 16, 64u + lane * 16u, S16);
    CP(ca16_lines_interleaved, "ca", 16, (lane % 4u) * 128u + (lane / 4u) * 16u, S16);
    CP(ca16_halves_interleaved, "ca", 16, (lane % 16u) * 32u + (lane / 16u) * 16u, S16);
    CP(ca16_two_sectors_per_line, "ca", 16, (lane / 4u) * 128u + (lane % 4u) * 16u, S16);
    CP(ca8_lines_interleaved, "ca", 8, (lane % 4u) * 128u + (lane / 4u) * 8u, S16);
    CP(ca4_lines_interleaved, "ca", 4, (lane % 4u) * 128u + (lane / 4u) * 4u, S16);
    // ---- D. the global side: the same destinations read from other source patterns
    CP(cg16_stride16_src_stride128, "cg", 16, lane * 16u, lane * 128u);
    CP(cg16_stride16_src_one, "cg", 16, lane * 16u, 0u);
    CP(cg16_stride16_src_reversed, "cg", 16, lane * 16u, (31u - lane) * 16u);
    CP(cg16_stride32_src_stride128, "cg", 16, lane * 32u, lane * 128u);
    CP(cg16_stride32_src_one, "cg", 16, lane * 32u, 0u);
    CP(ca16_stride32_src_one, "ca", 16, lane * 32u, 0u);
    CP(ca4_stride4_src_one, "ca", 4, lane * 4u, 0u);
    // ---- E. a guard false in some lanes (the guard in P0 or in another register: see the SASS)
    CPG(cg16_stride16_guard_odd, "cg", 16, lane & 1u, lane * 16u, S16);
    CPG(cg16_stride16_guard_lanes0to15, "cg", 16, lane < 16u, lane * 16u, S16);
    CPG(cg16_stride16_guard_lanes0to7, "cg", 16, lane < 8u, lane * 16u, S16);
    CPG(cg16_stride16_guard_lane0, "cg", 16, lane == 0u, lane * 16u, S16);
    CPG(cg16_stride16_guard_every4th, "cg", 16, (lane % 4u) == 0u, lane * 16u, S16);
    CPG(cg16_stride16_guard_lanes16to31, "cg", 16, lane >= 16u, lane * 16u, S16);
    CPG(cg16_stride16_guard_not_lane7, "cg", 16, lane != 7u, lane * 16u, S16);
    CPG_HELD(cg16_stride16_held_guard_odd, "cg", 16, lane & 1u, lane * 16u, S16);
    CPG_HELD(cg16_stride16_held_guard_lanes0to15, "cg", 16, lane < 16u, lane * 16u, S16);
    CPG_HELD(cg16_stride16_held_guard_lanes0to7, "cg", 16, lane < 8u, lane * 16u, S16);
    CPG_HELD(cg16_stride16_held_guard_lane0, "cg", 16, lane == 0u, lane * 16u, S16);
    CPG_HELD(cg16_stride16_held_guard_every4th, "cg", 16, (lane % 4u) == 0u, lane * 16u, S16);
    CPG_HELD(cg16_stride16_held_guard_lanes16to31, "cg", 16, lane >= 16u, lane * 16u, S16);
    CPG(cg16_stride32_guard_odd, "cg", 16, lane & 1u, lane * 32u, S16);
    CPG(cg16_stride32_guard_lanes0to15, "cg", 16, lane < 16u, lane * 32u, S16);
    CPG(cg16_stride32_guard_lanes0to7, "cg", 16, lane < 8u, lane * 32u, S16);
    CPG(cg16_stride32_guard_lane0, "cg", 16, lane == 0u, lane * 32u, S16);
    CPG(cg16_stride32_guard_every4th, "cg", 16, (lane % 4u) == 0u, lane * 32u, S16);
    CPG_HELD(cg16_stride32_held_guard_odd, "cg", 16, lane & 1u, lane * 32u, S16);
    CPG_HELD(cg16_stride32_held_guard_lanes0to15, "cg", 16, lane < 16u, lane * 32u, S16);
    CPG_HELD(cg16_stride32_held_guard_lanes0to7, "cg", 16, lane < 8u, lane * 32u, S16);
    CPG_HELD(cg16_stride32_held_guard_every4th, "cg", 16, (lane % 4u) == 0u, lane * 32u, S16);
    CPG(cg16_one_dst_guard_lanes0to15, "cg", 16, lane < 16u, 0u, S16);
    CPG(ca16_stride16_guard_odd, "ca", 16, lane & 1u, lane * 16u, S16);
    CPG(ca16_stride16_guard_lanes0to15, "ca", 16, lane < 16u, lane * 16u, S16);
    CPG(ca16_stride16_guard_lanes0to7, "ca", 16, lane < 8u, lane * 16u, S16);
    CPG(ca16_stride16_guard_lane0, "ca", 16, lane == 0u, lane * 16u, S16);
    CPG_HELD(ca16_stride16_held_guard_lanes0to7, "ca", 16, lane < 8u, lane * 16u, S16);
    CPG(ca16_stride32_guard_odd, "ca", 16, lane & 1u, lane * 32u, S16);
    CPG(ca16_stride32_guard_lanes0to15, "ca", 16, lane < 16u, lane * 32u, S16);
    CPG(ca16_stride32_guard_every4th, "ca", 16, (lane % 4u) == 0u, lane * 32u, S16);
    CPG_HELD(ca16_stride32_held_guard_lanes0to15, "ca", 16, lane < 16u, lane * 32u, S16);
    CPG(ca8_stride8_guard_lanes0to15, "ca", 8, lane < 16u, lane * 8u, S16);
    CPG(ca4_stride4_guard_lanes0to15, "ca", 4, lane < 16u, lane * 4u, S16);
    CPG(ca4_stride128_guard_lanes0to7, "ca", 4, lane < 8u, lane * 128u, S16);
    CPG(ca4_stride128_guard_odd, "ca", 4, lane & 1u, lane * 128u, S16);
    CPG_HELD(ca4_stride128_held_guard_lanes0to7, "ca", 4, lane < 8u, lane * 128u, S16);
    CPG(cg16_stride16_guard_none, "cg", 16, zero, lane * 16u, S16);
    CPG_HELD(cg16_stride16_held_guard_none, "cg", 16, zero, lane * 16u, S16);
    CPG(ca4_stride4_guard_none, "ca", 4, zero, lane * 4u, S16);
    // ---- F. src-size (zero fill): 0 in every lane or in some, a partial size in some
    CP_SZ(cg16_stride16_sz0_all, "cg", 16, zero, lane * 16u, S16);
    CP_SZ(cg16_stride32_sz0_all, "cg", 16, zero, lane * 32u, S16);
    CP_SZ(cg16_stride128_sz0_all, "cg", 16, zero, lane * 128u, S16);
    CP_SZ(cg16_one_dst_sz0_all, "cg", 16, zero, 0u, S16);
    CP_SZ(cg16_stride16_sz0_lanes16to31, "cg", 16, lane < 16u ? 16u : zero, lane * 16u, S16);
    CP_SZ(cg16_stride16_sz0_lanes0to15, "cg", 16, lane < 16u ? zero : 16u, lane * 16u, S16);
    CP_SZ(cg16_stride16_sz0_lanes8to31, "cg", 16, lane < 8u ? 16u : zero, lane * 16u, S16);
    CP_SZ(cg16_stride16_sz0_lanes0to7, "cg", 16, lane < 8u ? zero : 16u, lane * 16u, S16);
    CP_SZ(cg16_stride16_sz0_odd, "cg", 16, (lane & 1u) ? zero : 16u, lane * 16u, S16);
    CP_SZ(cg16_stride16_sz0_lane0, "cg", 16, lane == 0u ? zero : 16u, lane * 16u, S16);
    CP_SZ(cg16_stride32_sz0_lanes16to31, "cg", 16, lane < 16u ? 16u : zero, lane * 32u, S16);
    CP_SZ(cg16_stride32_sz0_lanes8to31, "cg", 16, lane < 8u ? 16u : zero, lane * 32u, S16);
    CP_SZ(cg16_stride16_sz8_all, "cg", 16, zero + 8u, lane * 16u, S16);
    CP_SZ(cg16_stride32_sz8_all, "cg", 16, zero + 8u, lane * 32u, S16);
    CP_SZ(cg16_stride16_sz4_all, "cg", 16, zero + 4u, lane * 16u, S16);
    CP_SZ(cg16_stride16_sz8_lanes16to31, "cg", 16, lane < 16u ? 16u : zero + 8u, lane * 16u, S16);
    CP_SZ(cg16_stride16_sz16_all, "cg", 16, zero + 16u, lane * 16u, S16);
    CP_SZ(ca16_stride16_sz0_all, "ca", 16, zero, lane * 16u, S16);
    CP_SZ(ca16_stride32_sz0_all, "ca", 16, zero, lane * 32u, S16);
    CP_SZ(ca16_one_dst_sz0_all, "ca", 16, zero, 0u, S16);
    CP_SZ(ca16_stride16_sz0_lanes16to31, "ca", 16, lane < 16u ? 16u : zero, lane * 16u, S16);
    CP_SZ(ca16_stride32_sz0_lanes16to31, "ca", 16, lane < 16u ? 16u : zero, lane * 32u, S16);
    CP_SZ(ca8_stride8_sz0_all, "ca", 8, zero, lane * 8u, S16);
    CP_SZ(ca8_stride8_sz0_lanes16to31, "ca", 8, lane < 16u ? 8u : zero, lane * 8u, S16);
    CP_SZ(ca4_stride4_sz0_all, "ca", 4, zero, lane * 4u, S16);
    CP_SZ(ca4_stride128_sz0_all, "ca", 4, zero, lane * 128u, S16);
    CP_SZ(ca4_one_dst_sz0_all, "ca", 4, zero, 0u, S16);
    CP_SZ(ca4_stride4_sz0_lanes16to31, "ca", 4, lane < 16u ? 4u : zero, lane * 4u, S16);
    CP_SZ(ca4_stride4_sz2_all, "ca", 4, zero + 2u, lane * 4u, S16);
    // ---- G. the ignore-src predicate: true in every lane or in some
    CP_IGN(cg16_stride16_ign_all, "cg", 16, lane < 32u + zero, lane * 16u, S16);
    CP_IGN(cg16_stride32_ign_all, "cg", 16, lane < 32u + zero, lane * 32u, S16);
    CP_IGN(cg16_stride16_ign_lanes16to31, "cg", 16, lane >= 16u, lane * 16u, S16);
    CP_IGN(cg16_stride16_ign_lanes8to31, "cg", 16, lane >= 8u, lane * 16u, S16);
    CP_IGN(cg16_stride16_ign_lanes0to7, "cg", 16, lane < 8u, lane * 16u, S16);
    CP_IGN(cg16_stride16_ign_odd, "cg", 16, lane & 1u, lane * 16u, S16);
    CP_IGN(cg16_stride32_ign_lanes16to31, "cg", 16, lane >= 16u, lane * 32u, S16);
    CP_IGN(cg16_stride32_ign_lanes8to31, "cg", 16, lane >= 8u, lane * 32u, S16);
    CP_IGN_HELD(cg16_stride16_held_ign_lanes16to31, "cg", 16, lane >= 16u, lane * 16u, S16);
    CP_IGN_HELD(cg16_stride16_held_ign_lanes8to31, "cg", 16, lane >= 8u, lane * 16u, S16);
    CP_IGN_HELD(cg16_stride16_held_ign_lanes0to7, "cg", 16, lane < 8u, lane * 16u, S16);
    CP_IGN(ca16_stride16_ign_lanes16to31, "ca", 16, lane >= 16u, lane * 16u, S16);
    CP_IGN(ca16_stride32_ign_lanes8to31, "ca", 16, lane >= 8u, lane * 32u, S16);
    CP_IGN(ca4_stride4_ign_all, "ca", 4, lane < 32u + zero, lane * 4u, S16);
    CP_IGN(ca4_stride4_ign_lanes16to31, "ca", 4, lane >= 16u, lane * 4u, S16);
    // ---- H. a guard and an ignore-src predicate on one copy
    CPG_IGN(cg16_stride16_guard_lanes0to15_ign_lanes0to7, "cg", 16, lane < 16u, lane < 8u, lane * 16u, S16);
    CPG_IGN(cg16_stride32_guard_lanes0to15_ign_odd, "cg", 16, lane < 16u, lane & 1u, lane * 32u, S16);
    // ---- I. the shape of FlashAttention's predicated tile loads: a copy where ON holds, zeros stored elsewhere
    CP_ELSE_ZERO(fa_cg16_stride16_lanes0to7, "cg", lane < 8u, lane * 16u, S16);
    CP_ELSE_ZERO(fa_cg16_stride16_lanes0to15, "cg", lane < 16u, lane * 16u, S16);
    CP_ELSE_ZERO(fa_cg16_stride32_lanes0to15, "cg", lane < 16u, lane * 32u, S16);
    CP_ELSE_ZERO(fa_cg16_xor_swizzle_lanes16to31, "cg", lane >= 16u, (lane / 8u) * 128u + ((lane % 8u) ^ (lane / 8u)) * 16u, S16);
    CP_ELSE_ZERO(fa_ca16_stride16_lanes0to7, "ca", lane < 8u, lane * 16u, S16);
    CP_ELSE_ZERO(fa_cg16_stride16_lanes0to7_again, "cg", lane < 8u, lane * 16u, S16);
    asm volatile("cp.async.wait_all;" ::: "memory");
    // ---- J. the same after every other copy has landed (few predicates live)
    CP_ELSE_ZERO(fa_tail_cg16_stride16_lanes0to7, "cg", lane < 8u, lane * 16u, S16);
    asm volatile("cp.async.wait_all;" ::: "memory");
    CP_ELSE_ZERO(fa_tail_cg16_stride32_lanes0to15, "cg", lane < 16u, lane * 32u, S16);
    asm volatile("cp.async.wait_all;" ::: "memory");
    CP_ELSE_ZERO(fa_tail_ca16_stride128_lanes0to7, "ca", lane < 8u, lane * 128u, S16);
    asm volatile("cp.async.wait_all;" ::: "memory");
    sink[threadIdx.x] = acc;
}

// Two warps (64 threads): a guard or a zero fill that differs from warp to warp. Warp w writes at
// w * 16 KiB; a warp whose guard is false everywhere still has its own destination addresses in the
// register (all lanes on one address, or the pattern warp 0 uses).
#define W0 (warp * 16384u)
#define S16W (16u * threadIdx.x)

extern "C" __global__ void __launch_bounds__(64) probe_ldgsts_warps(const unsigned char* __restrict__ gsrc,
                                                                    unsigned* __restrict__ sink) {
    PL_PROLOGUE();
    CP(w_cg16_stride16_both_warps, "cg", 16, W0 + lane * 16u, S16W);
    CPG(w_cg16_stride16_warp1_off_one_dst, "cg", 16, warp == 0u, W0 + (warp == 0u ? lane * 16u : 0u), S16W);
    CPG(w_cg16_stride16_warp1_off, "cg", 16, warp == 0u, W0 + lane * 16u, S16W);
    CPG(w_cg16_stride32_warp1_off, "cg", 16, warp == 0u, W0 + lane * 32u, S16W);
    CPG(w_cg16_stride16_warp0_off, "cg", 16, warp != 0u, W0 + lane * 16u, S16W);
    CPG_HELD(w_cg16_stride16_held_warp1_off_one_dst, "cg", 16, warp == 0u, W0 + (warp == 0u ? lane * 16u : 0u), S16W);
    CPG_HELD(w_cg16_stride16_held_warp1_off, "cg", 16, warp == 0u, W0 + lane * 16u, S16W);
    CPG_HELD(w_cg16_stride32_held_warp1_off, "cg", 16, warp == 0u, W0 + lane * 32u, S16W);
    CPG(w_cg16_stride16_warp1_lanes0to15, "cg", 16, warp == 0u || lane < 16u, W0 + lane * 16u, S16W);
    CPG(w_ca16_stride16_warp1_off_one_dst, "ca", 16, warp == 0u, W0 + (warp == 0u ? lane * 16u : 0u), S16W);
    CPG(w_ca16_stride32_warp1_off, "ca", 16, warp == 0u, W0 + lane * 32u, S16W);
    CPG_HELD(w_ca16_stride32_held_warp1_off, "ca", 16, warp == 0u, W0 + lane * 32u, S16W);
    CPG(w_ca4_stride128_warp1_off, "ca", 4, warp == 0u, W0 + lane * 128u, S16W);
    CP_SZ(w_cg16_stride16_sz0_warp1, "cg", 16, warp == 0u ? 16u : zero, W0 + lane * 16u, S16W);
    CP_SZ(w_cg16_stride32_sz0_warp1, "cg", 16, warp == 0u ? 16u : zero, W0 + lane * 32u, S16W);
    CP_IGN(w_cg16_stride16_ign_warp1, "cg", 16, warp != 0u, W0 + lane * 16u, S16W);
    CP_IGN(w_cg16_stride32_ign_warp1, "cg", 16, warp != 0u, W0 + lane * 32u, S16W);
    CP_IGN(w_cg16_stride16_ign_warp1_lanes16to31, "cg", 16, warp != 0u && lane >= 16u, W0 + lane * 16u, S16W);
    CP_ELSE_ZERO(fa_w_cg16_xor_swizzle_warp1_off, "cg", warp == 0u, W0 + (lane / 8u) * 128u + ((lane % 8u) ^ (lane / 8u)) * 16u, S16W);
    CP_ELSE_ZERO(fa_w_cg16_stride16_warp1_off, "cg", warp == 0u, W0 + lane * 16u, S16W);
    CP_ELSE_ZERO(fa_w_cg16_stride32_warp1_off, "cg", warp == 0u, W0 + lane * 32u, S16W);
    CP_ELSE_ZERO(fa_w_ca16_stride32_warp1_off, "ca", warp == 0u, W0 + lane * 32u, S16W);
    asm volatile("cp.async.wait_all;" ::: "memory");
    sink[threadIdx.x] = acc;
}
