// probe_ldgsts_zfill.cu: cp.async.cg 16-byte copies with a run-time src-size (SASS LDGSTS.BYPASS.128.ZFILL)
// and with an ignore-src predicate (LDGSTS.BYPASS.128 ..., !Pn) on simple regular lane patterns, for Nsight
// Compute's per-instruction shared-memory counters: case probe_ldgsts_zfill of gpu/ncu_source.py, ONE block
// of 32 threads, gsrc of at least 8 KiB whose byte 1 is 0.
//
// Two cg16 families the cp.async rule of flashsim.smem misses on drawn patterns
// (traces/sass/ncu_source/README.md, "Held out"):
// - .ZFILL: the H100 counts more than "read pass + zero-fill pass over every lane" (39 vs 23, 64 vs 43,
//   64 vs 40 with every lane's src-size 4); in the drawn rows that differ the source is often one address
//   or a few for the whole warp;
// - ignore-src with the predicate held in P0 (`, !P0`): 1 of 24 drawn rows agree; the H100 counts of 23
//   of them are those of every lane reading (no zero pass), where the rule reads P0 as every lane ignoring.
//
// Each probe is ONE line: a macro (first argument NAME) that issues ONE cp.async warp instruction (inline
// PTX, asm volatile), as in probe_ldgsts.cu, so that gpu.ncu_source.probe_lines maps every LDGSTS to its
// probe through the source line (-lineinfo). Per lane: destination byte offset DST from a 1024-byte
// aligned shared buffer, source byte offset SRC from gsrc; `lane` is the lane index. Every probe starts
// with ZF_FRESH: cp.async.wait_all, then a run-time zero z_ from a volatile load of gsrc[1] that every
// operand depending on the probe's pattern is salted with, so that ptxas computes none of it early and
// each probe's predicate is live only at its own copy.
//
//   SZ(NAME, SRCSIZE, DST, SRC)     cp.async.cg [dst], [src], 16, SRCSIZE + z_ (a register, so ptxas makes
//                                   the .ZFILL form: (16 - src-size) mod 16 in the low 4 bits of the source
//                                   address and a predicate "src-size != 0" as the last operand), followed
//                                   by `@h cp.async.commit_group` with h = (lane & 2) != 0: ptxas makes h
//                                   one predicate for every probe of A..E and holds it in P0 at every copy
//                                   there (a branch around LDGDEPBAR after it), so the copy's own
//                                   predicate lands in P1..P3
//   IGN_HELD(NAME, IGN, DST, SRC)   cp.async.cg [dst], [src], 16, q with q = (IGN + z_ != z_ * __LINE__)
//                                   (where q holds, nothing is read and 16 zero bytes land), and the same
//                                   `@h cp.async.commit_group`: q in P1
//   IGN_P0(...), SZ_P0(...)         the same copies without h (after E, where h is dead): q, and the .ZFILL
//                                   predicate, in P0
//   CPC(NAME, DST, SRC)             a plain cp.async.cg 16 (no src-size, no predicate): the read pass alone
//
// The probes: source line, name, the copy's last operand in the SASS (ptxas's choice, checked by
// tests/test_ncu_source.py), and the count of the rule now (flashsim.smem.cp_async_wavefronts, as the
// interpreter gives it: wavefronts/ideal). d16 / d32: destination 16 * lane / 32 * lane; s16: source
// 16 * lane; s0: one source address (0) for every lane; s128: source 128 * lane; szK: src-size K in every
// lane; pre16_K: 16 in lanes 0..K-1, 0 in the others; halfA_B: A in lanes 0-15, B in 16-31; altA_B: A in
// the even lanes, B in the odd; hi16: lanes 16-31; none / all: no lane / every lane ignores.
//
//   A. uniform src-size, d16 s16
//    159 z_d16_sz0              P1   4/4
//    160 z_d16_sz1              P1   8/8
//    161 z_d16_sz2              P1   8/8
//    162 z_d16_sz4              P1   8/8
//    163 z_d16_sz8              P1   8/8
//    164 z_d16_sz12             P1   8/8
//    165 z_d16_sz15             P1   8/8
//    166 z_d16_sz16             P1   8/8
//   B. mixed src-sizes, d16 s16
//    168 z_d16_pre16_1          P1   5/5
//    169 z_d16_pre16_8          P2   5/5
//    170 z_d16_pre16_16         P2   6/6
//    171 z_d16_pre16_24         P2   7/7
//    172 z_d16_pre16_31         P2   9/8
//    173 z_d16_half4_8          P2   8/8
//    174 z_d16_half16_4         P2   8/8
//    175 z_d16_alt16_0          P3   8/6
//    176 z_d16_alt16_4          P3   8/8
//    177 z_d16_alt4_8           P2   8/8
//    178 z_d16_pre4_16          P1   6/6
//   C. d32 s16
//    180 z_d32_sz0              P1   8/4
//    181 z_d32_sz4              P1   40/8
//    182 z_d32_sz8              P1   40/8
//    183 z_d32_sz16             P1   40/8
//    184 z_d32_pre16_8          P1   16/5
//    185 z_d32_pre16_16         P1   24/6
//    186 z_d32_half4_8          P1   40/8
//    187 z_d32_alt16_0          P1   24/6
//    188 z_d32_alt16_4          P1   40/8
//   D. the source side
//    190 c_d16_s0               -    32/4
//    191 i_d16_s0_none          !P1  32/4
//    192 z_d16_s0_sz16          P1   36/8
//    193 z_d16_s0_sz4           P1   36/8
//    194 z_d16_s0_sz0           P1   4/4
//    195 c_d16_s128             -    32/4
//    196 z_d16_s128_sz16        P1   36/8
//    197 z_d16_s128_sz4         P1   36/8
//    198 z_d32_s0_sz16          P1   40/8
//    199 z_d32_s0_sz4           P1   40/8
//   E. ignore-src off P0
//    201 ih_d32_none            !P1  32/4
//    202 ih_d32_all             !P1  8/4
//    203 ih_d32_hi16            !P1  24/6
//    204 ih_d32_odd             !P1  24/6
//    205 ih_d16_s0_none         !P1  32/4
//    206 ih_d16_s0_all          !P1  4/4
//    207 ih_d16_s0_hi16         !P1  20/6
//   F. ignore-src in P0
//    209 i0_d32_none            !P0  8/4
//    210 i0_d32_all             !P0  8/4
//    211 i0_d32_hi16            !P0  8/4
//    212 i0_d32_odd             !P0  8/4
//    213 i0_d16_s0_none         !P0  4/4
//    214 i0_d16_s0_all          !P0  4/4
//    215 i0_d16_s0_hi16         !P0  4/4
//   G. .ZFILL in P0
//    217 z0_d32_sz4             P0   40/8
//    218 z0_d32_pre16_16        P0   40/8
//    219 z0_d32_sz0             P0   40/8
//    220 z0_d16_s0_sz4          P0   36/8
//
// What the pairs tell apart:
// - A: only the src-size changes (every lane reads; the source address carries (16 - size) mod 16 in its
//   low bits): one pass per 4-byte chunk read (sz4 < sz8 < sz12 < sz16), a cost for any size below 16
//   (sz1..sz15 equal and above sz16), or none (every size like sz16, the rule); sz0 is every lane zero.
// - B: which lanes the zero pass counts (every lane on, the rule; or the lanes that zero-fill something:
//   pre16_K falling with K, pre16_31 below sz0), whether two partial sizes split the read pass (half4_8,
//   alt4_8 against sz4, sz8), whether zero lanes between reading lanes break the whole-sector read
//   (alt16_0 against pre16_16), partial lanes next to full ones (half16_4, alt16_4 against sz16).
// - C: B with the zero pass conflicting (2 wavefronts per quarter) and the read pass one per lane: whether
//   the extra over the rule grows with destination conflicts (d32 against d16).
// - D: the source in the count: c_* (no operand) and i_d16_s0_none (ignore-src false in every lane) are
//   the read pass of those addresses alone; .ZFILL on one source address (s0) or one source line per lane
//   (s128) against d16 s16 says whether the zero pass serializes on the source too (the drawn rows that
//   count 64 read one address: the rule gives 36 here, a pass that conflicts on the source 64), and
//   whether that depends on the bytes read (sz16 against sz4; sz0 reads nothing).
// - E against F: each ignore-src pattern with its predicate off P0 and in P0. d32 s16 separates "every
//   lane reads" (32/4), "every lane zero" (8/4, the rule for P0) and the real predicates (none 32/4,
//   all 8/4, hi16 24/6, odd 24/6); d16 s0 the same with the read pass serialized on the source (every lane
//   reads 32/4, every lane zero 4/4, hi16 20/6).
// - G against C and D (same patterns off P0): `, P0` of .ZFILL read as every lane reading (the rule) for
//   sizes below 16 and for a warp whose lanes all read nothing (z0_d32_sz0: 40/8 by the rule, 8/4 if the
//   real predicate counts).
// No CUDA headers: everything is PTX, so NVRTC and nvcc compile it alike.

#define ZF_SMEM 2048

__device__ __forceinline__ unsigned zf_smem_u32(const void* p) {
    unsigned r;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
    return r;
}

// a run-time zero read after every earlier copy has landed (keeps ptxas from computing what depends on it early)
#define ZF_FRESH() asm volatile("cp.async.wait_all;" ::: "memory"); const unsigned z_ = *(volatile const unsigned char*)(gsrc + 1)

#define SZ(NAME, SRCSIZE, DST, SRC) { ZF_FRESH(); asm volatile("{ .reg .pred h; setp.ne.u32 h, %3, 0; cp.async.cg.shared.global [%0], [%1], 16, %2; @h cp.async.commit_group; }" :: "r"(base + (DST)), "l"(gsrc + (SRC)), "r"((unsigned)(SRCSIZE) + z_), "r"(lane & 2u) : "memory"); }
#define SZ_P0(NAME, SRCSIZE, DST, SRC) { ZF_FRESH(); asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(base + (DST)), "l"(gsrc + (SRC)), "r"((unsigned)(SRCSIZE) + z_) : "memory"); }
#define IGN_HELD(NAME, IGN, DST, SRC) { ZF_FRESH(); asm volatile("{ .reg .pred h, q; setp.ne.u32 h, %4, 0; setp.ne.u32 q, %2, %3; cp.async.cg.shared.global [%0], [%1], 16, q; @h cp.async.commit_group; }" :: "r"(base + (DST)), "l"(gsrc + (SRC)), "r"((unsigned)(IGN) + z_), "r"(z_ * __LINE__), "r"(lane & 2u) : "memory"); }
#define IGN_P0(NAME, IGN, DST, SRC) { ZF_FRESH(); asm volatile("{ .reg .pred q; setp.ne.u32 q, %2, %3; cp.async.cg.shared.global [%0], [%1], 16, q; }" :: "r"(base + (DST)), "l"(gsrc + (SRC)), "r"((unsigned)(IGN) + z_), "r"(z_ * __LINE__) : "memory"); }
#define CPC(NAME, DST, SRC) { ZF_FRESH(); (void)z_; asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(base + (DST)), "l"(gsrc + (SRC)) : "memory"); }

#define D16 (lane * 16u)
#define D32 (lane * 32u)
#define S16 (lane * 16u)
#define PRE16(K) (lane < (K) ? 16u : 0u)

extern "C" __global__ void __launch_bounds__(32) probe_ldgsts_zfill(const unsigned char* __restrict__ gsrc,
                                                                    unsigned* __restrict__ sink) {
    __shared__ __align__(1024) unsigned char buf[ZF_SMEM];
    const unsigned lane = threadIdx.x & 31u;
    const unsigned base = zf_smem_u32(buf);
    // ---- A. uniform src-size, d16 s16
    SZ(z_d16_sz0, 0u, D16, S16);
    SZ(z_d16_sz1, 1u, D16, S16);
    SZ(z_d16_sz2, 2u, D16, S16);
    SZ(z_d16_sz4, 4u, D16, S16);
    SZ(z_d16_sz8, 8u, D16, S16);
    SZ(z_d16_sz12, 12u, D16, S16);
    SZ(z_d16_sz15, 15u, D16, S16);
    SZ(z_d16_sz16, 16u, D16, S16);
    // ---- B. mixed src-sizes, d16 s16
    SZ(z_d16_pre16_1, PRE16(1u), D16, S16);
    SZ(z_d16_pre16_8, PRE16(8u), D16, S16);
    SZ(z_d16_pre16_16, PRE16(16u), D16, S16);
    SZ(z_d16_pre16_24, PRE16(24u), D16, S16);
    SZ(z_d16_pre16_31, PRE16(31u), D16, S16);
    SZ(z_d16_half4_8, lane < 16u ? 4u : 8u, D16, S16);
    SZ(z_d16_half16_4, lane < 16u ? 16u : 4u, D16, S16);
    SZ(z_d16_alt16_0, (lane & 1u) ? 0u : 16u, D16, S16);
    SZ(z_d16_alt16_4, (lane & 1u) ? 4u : 16u, D16, S16);
    SZ(z_d16_alt4_8, (lane & 1u) ? 8u : 4u, D16, S16);
    SZ(z_d16_pre4_16, lane < 16u ? 4u : 0u, D16, S16);
    // ---- C. d32 s16
    SZ(z_d32_sz0, 0u, D32, S16);
    SZ(z_d32_sz4, 4u, D32, S16);
    SZ(z_d32_sz8, 8u, D32, S16);
    SZ(z_d32_sz16, 16u, D32, S16);
    SZ(z_d32_pre16_8, PRE16(8u), D32, S16);
    SZ(z_d32_pre16_16, PRE16(16u), D32, S16);
    SZ(z_d32_half4_8, lane < 16u ? 4u : 8u, D32, S16);
    SZ(z_d32_alt16_0, (lane & 1u) ? 0u : 16u, D32, S16);
    SZ(z_d32_alt16_4, (lane & 1u) ? 4u : 16u, D32, S16);
    // ---- D. the source side
    CPC(c_d16_s0, D16, 0u);
    IGN_HELD(i_d16_s0_none, 0u, D16, 0u);
    SZ(z_d16_s0_sz16, 16u, D16, 0u);
    SZ(z_d16_s0_sz4, 4u, D16, 0u);
    SZ(z_d16_s0_sz0, 0u, D16, 0u);
    CPC(c_d16_s128, D16, lane * 128u);
    SZ(z_d16_s128_sz16, 16u, D16, lane * 128u);
    SZ(z_d16_s128_sz4, 4u, D16, lane * 128u);
    SZ(z_d32_s0_sz16, 16u, D32, 0u);
    SZ(z_d32_s0_sz4, 4u, D32, 0u);
    // ---- E. ignore-src off P0
    IGN_HELD(ih_d32_none, 0u, D32, S16);
    IGN_HELD(ih_d32_all, 1u, D32, S16);
    IGN_HELD(ih_d32_hi16, lane >= 16u, D32, S16);
    IGN_HELD(ih_d32_odd, lane & 1u, D32, S16);
    IGN_HELD(ih_d16_s0_none, 0u, D16, 0u);
    IGN_HELD(ih_d16_s0_all, 1u, D16, 0u);
    IGN_HELD(ih_d16_s0_hi16, lane >= 16u, D16, 0u);
    // ---- F. ignore-src in P0
    IGN_P0(i0_d32_none, 0u, D32, S16);
    IGN_P0(i0_d32_all, 1u, D32, S16);
    IGN_P0(i0_d32_hi16, lane >= 16u, D32, S16);
    IGN_P0(i0_d32_odd, lane & 1u, D32, S16);
    IGN_P0(i0_d16_s0_none, 0u, D16, 0u);
    IGN_P0(i0_d16_s0_all, 1u, D16, 0u);
    IGN_P0(i0_d16_s0_hi16, lane >= 16u, D16, 0u);
    // ---- G. .ZFILL in P0
    SZ_P0(z0_d32_sz4, 4u, D32, S16);
    SZ_P0(z0_d32_pre16_16, PRE16(16u), D32, S16);
    SZ_P0(z0_d32_sz0, 0u, D32, S16);
    SZ_P0(z0_d16_s0_sz4, 4u, D16, 0u);
    asm volatile("cp.async.wait_all;" ::: "memory");
    sink[threadIdx.x] = lane;
}
