// probe_banks_source.cu: shared-memory instructions for Nsight Compute's per-instruction source counters
// (L1 Wavefronts Shared / Ideal, Instructions Executed), compared PC by PC with the interpreter by
// gpu/ncu_source.py.
//
// Each probe is ONE line: a macro that executes ONE shared-memory warp instruction (inline PTX, asm
// volatile, so none is merged, dropped or reordered) with a per-lane byte offset written as an expression
// of `lane`, for the lanes where a condition holds. The macro's first argument names the probe; the host
// maps each SASS instruction to its probe through the source line (-lineinfo). Launch each kernel with
// ONE block of 32 threads. Loads read whatever the buffer holds (values do not matter) and fold it into
// `acc`, stored to `sink` at the end so nothing is dead code.
//
//   probe_banks_ldst:    ld/st.shared u8, s8, u16, u32, v2.u32, v4.u32; generic ld/st to shared
//   probe_banks_matrix:  ldmatrix x1/x2/x4 (.trans), stmatrix x1/x2/x4 (.trans), cp.async .ca 4/8/16, .cg 16
//   probe_banks_atomics: shared atomics (add/min/or u32, cas, exch, red, generic atom)
//   probe_banks_atomics_more: f32 and u64 atomic adds (compare-and-swap loops), generic atom
//
// Bank: (byte address / 4) % 32. Offsets below are bytes from a 1024-byte aligned buffer. No two loads
// load the same address (ptxas folds such loads into one instruction): broadcasts get their own 1 KiB,
// probes with a lane condition start at 8 KiB and generic ones each at their own 1 KiB from 16 KiB.
// No CUDA headers: everything is PTX, so NVRTC and nvcc compile it alike.

#define PB_SMEM 32768

__device__ __forceinline__ unsigned pb_smem_u32(const void* p) {
    unsigned r;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
    return r;
}

#define PB_PROLOGUE()                                             \
    __shared__ __align__(1024) unsigned char buf[PB_SMEM];        \
    const unsigned lane = threadIdx.x & 31u;                       \
    const unsigned base = pb_smem_u32(buf);                        \
    unsigned acc = 0u;                                             \
    (void)gsrc

// ------------------------------------------------------------------------------- ld.shared / st.shared
#define LDS_U8(NAME, ON, OFF)  if (ON) { unsigned r_; asm volatile("ld.shared.u8 %0, [%1];" : "=r"(r_) : "r"(base + (OFF)) : "memory"); acc ^= r_; }
#define LDS_S8(NAME, ON, OFF)  if (ON) { int r_; asm volatile("ld.shared.s8 %0, [%1];" : "=r"(r_) : "r"(base + (OFF)) : "memory"); acc ^= (unsigned)r_; }
#define LDS_U16(NAME, ON, OFF) if (ON) { unsigned short r_; asm volatile("ld.shared.u16 %0, [%1];" : "=h"(r_) : "r"(base + (OFF)) : "memory"); acc ^= r_; }
#define LDS_32(NAME, ON, OFF)  if (ON) { unsigned r_; asm volatile("ld.shared.u32 %0, [%1];" : "=r"(r_) : "r"(base + (OFF)) : "memory"); acc ^= r_; }
#define LDS_64(NAME, ON, OFF)  if (ON) { unsigned x_, y_; asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(x_), "=r"(y_) : "r"(base + (OFF)) : "memory"); acc ^= x_ + 3u * y_; }
#define LDS_128(NAME, ON, OFF) if (ON) { unsigned x_, y_, z_, w_; asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(x_), "=r"(y_), "=r"(z_), "=r"(w_) : "r"(base + (OFF)) : "memory"); acc ^= x_ + 3u * y_ + 5u * z_ + 7u * w_; }
#define STS_U8(NAME, ON, OFF)  if (ON) { asm volatile("st.shared.u8 [%0], %1;" :: "r"(base + (OFF)), "r"(lane) : "memory"); }
#define STS_U16(NAME, ON, OFF) if (ON) { asm volatile("st.shared.u16 [%0], %1;" :: "r"(base + (OFF)), "h"((unsigned short)lane) : "memory"); }
#define STS_32(NAME, ON, OFF)  if (ON) { asm volatile("st.shared.u32 [%0], %1;" :: "r"(base + (OFF)), "r"(lane) : "memory"); }
#define STS_64(NAME, ON, OFF)  if (ON) { asm volatile("st.shared.v2.u32 [%0], {%1, %2};" :: "r"(base + (OFF)), "r"(lane), "r"(acc) : "memory"); }
#define STS_128(NAME, ON, OFF) if (ON) { asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" :: "r"(base + (OFF)), "r"(lane), "r"(acc), "r"(lane + 7u), "r"(acc + 1u) : "memory"); }
// generic ld/st: a 64-bit generic address that points into shared memory
#define LD_G32(NAME, ON, OFF)  if (ON) { unsigned r_; asm volatile("ld.u32 %0, [%1];" : "=r"(r_) : "l"(buf + (OFF)) : "memory"); acc ^= r_; }
#define LD_G64(NAME, ON, OFF)  if (ON) { unsigned x_, y_; asm volatile("ld.v2.u32 {%0, %1}, [%2];" : "=r"(x_), "=r"(y_) : "l"(buf + (OFF)) : "memory"); acc ^= x_ + 3u * y_; }
#define LD_G128(NAME, ON, OFF) if (ON) { unsigned x_, y_, z_, w_; asm volatile("ld.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(x_), "=r"(y_), "=r"(z_), "=r"(w_) : "l"(buf + (OFF)) : "memory"); acc ^= x_ + 3u * y_ + 5u * z_ + 7u * w_; }
#define ST_G32(NAME, ON, OFF)  if (ON) { asm volatile("st.u32 [%0], %1;" :: "l"(buf + (OFF)), "r"(lane) : "memory"); }
#define ST_G128(NAME, ON, OFF) if (ON) { asm volatile("st.v4.u32 [%0], {%1, %2, %3, %4};" :: "l"(buf + (OFF)), "r"(lane), "r"(acc), "r"(lane + 7u), "r"(acc + 1u) : "memory"); }

extern "C" __global__ void __launch_bounds__(32) probe_banks_ldst(const unsigned char* __restrict__ gsrc,
                                                                  unsigned* __restrict__ sink) {
    PB_PROLOGUE();
    // ---- 8-bit and 16-bit loads: one phase of 32 lanes, unit = the 32-bit word holding the bytes
    LDS_U8(ld8_linear, true, lane);
    LDS_U8(ld8_stride4, true, lane * 4u);
    LDS_U8(ld8_stride128, true, lane * 128u);
    LDS_U8(ld8_broadcast, true, 0u);
    LDS_S8(ld8s_stride8, true, lane * 8u);
    LDS_U16(ld16_linear, true, lane * 2u);
    LDS_U16(ld16_stride64, true, lane * 64u);
    LDS_U16(ld16_broadcast, true, 1024u + 6u);
    // ---- 32-bit loads
    LDS_32(ld32_linear, true, lane * 4u);
    LDS_32(ld32_stride2, true, lane * 8u);
    LDS_32(ld32_stride4, true, lane * 16u);
    LDS_32(ld32_stride32, true, lane * 128u);
    LDS_32(ld32_padded33, true, lane * 132u);
    LDS_32(ld32_broadcast, true, 2048u);
    LDS_32(ld32_multicast4, true, (lane / 4u) * 4u);
    LDS_32(ld32_two_words_one_bank, true, (lane % 2u) * 128u);
    LDS_32(ld32_permuted, true, ((lane * 7u) % 32u) * 4u);
    LDS_32(ld32_lanes0to7_stride32, lane < 8u, 8192u + lane * 128u);
    LDS_32(ld32_half_warp_linear, lane < 16u, 8192u + lane * 4u);
    // ---- 64-bit loads: two half-warp phases
    LDS_64(ld64_linear, true, lane * 8u);
    LDS_64(ld64_stride16, true, lane * 16u);
    LDS_64(ld64_stride256, true, lane * 256u);
    LDS_64(ld64_broadcast, true, 3072u);
    LDS_64(ld64_pairs_xor1, true, (lane / 2u) * 8u);
    LDS_64(ld64_pairs_xor2, true, ((lane / 4u) * 2u + (lane % 2u)) * 8u);
    LDS_64(ld64_pairs_xor1_stride16, true, (lane / 2u) * 16u);
    LDS_64(ld64_tid_mod2, true, (lane % 2u) * 8u);
    LDS_64(ld64_second_half_only, lane >= 16u, 8192u + lane * 8u);
    // ---- 128-bit loads: four quarter-warp phases
    LDS_128(ld128_linear, true, lane * 16u);
    LDS_128(ld128_stride32, true, lane * 32u);
    LDS_128(ld128_stride128, true, lane * 128u);
    LDS_128(ld128_padded144, true, lane * 144u);
    LDS_128(ld128_broadcast, true, 4096u);
    LDS_128(ld128_pairs_xor1, true, (lane / 2u) * 16u);
    LDS_128(ld128_pairs_xor2, true, ((lane / 4u) * 2u + (lane % 2u)) * 16u);
    LDS_128(ld128_tid_mod4, true, (lane % 4u) * 16u);
    LDS_128(ld128_quarter0_conflicts, true, lane < 8u ? lane * 128u : lane * 16u);
    LDS_128(ld128_quarter1_only, lane >= 8u && lane < 16u, 8192u + lane * 16u);
    // ---- the ideal of 64/128-bit accesses by few lanes, and of lane pairs that span 128-byte lines
    LDS_64(ld64_lanes0_16_adjacent, lane % 16u == 0u, 12288u + (lane / 16u) * 8u);
    LDS_64(ld64_lanes0_16_same_bank, lane % 16u == 0u, 12544u + (lane / 16u) * 256u);
    LDS_64(ld64_lanes0to7_16to23_packed, lane % 16u < 8u, 13312u + ((lane / 16u) * 8u + lane % 16u) * 8u);
    LDS_64(ld64_pairs_xor1_across_128B, true, 13888u + (lane / 2u) * 8u);
    LDS_64(ld64_pairs_xor1_stride32, true, 14336u + (lane / 2u) * 32u);
    LDS_128(ld128_one_lane_per_quarter, lane % 8u == 0u, 14848u + (lane / 8u) * 16u);
    LDS_128(ld128_pairs_xor1_across_128B, true, 15424u + (lane / 2u) * 16u);
    // ---- stores
    STS_U8(st8_linear, true, lane);
    STS_U8(st8_stride128, true, lane * 128u);
    STS_U8(st8_same_word, true, lane % 4u);
    STS_U16(st16_linear, true, lane * 2u);
    STS_U16(st16_stride64, true, lane * 64u);
    STS_32(st32_linear, true, lane * 4u);
    STS_32(st32_stride2, true, lane * 8u);
    STS_32(st32_stride4, true, lane * 16u);
    STS_32(st32_stride32, true, lane * 128u);
    STS_32(st32_same_word, true, 0u);
    STS_32(st32_lanes0to7_stride32, lane < 8u, lane * 128u);
    STS_64(st64_linear, true, lane * 8u);
    STS_64(st64_stride16, true, lane * 16u);
    STS_64(st64_stride256, true, lane * 256u);
    STS_64(st64_pairs_xor1, true, (lane / 2u) * 8u);
    STS_128(st128_linear, true, lane * 16u);
    STS_128(st128_stride32, true, lane * 32u);
    STS_128(st128_stride128, true, lane * 128u);
    STS_128(st128_pairs_xor1, true, (lane / 2u) * 16u);
    STS_128(st128_broadcast, true, 7168u);
    STS_32(st32_lanes0_16_adjacent, lane % 16u == 0u, 12032u + (lane / 16u) * 4u);
    STS_64(st64_lanes0_16_adjacent, lane % 16u == 0u, 12288u + (lane / 16u) * 8u);
    STS_64(st64_lanes0_16_same_bank, lane % 16u == 0u, 12544u + (lane / 16u) * 256u);
    STS_64(st64_lanes0to7_16to23_packed, lane % 16u < 8u, 13312u + ((lane / 16u) * 8u + lane % 16u) * 8u);
    STS_64(st64_pairs_xor1_across_128B, true, 13888u + (lane / 2u) * 8u);
    STS_128(st128_one_lane_per_quarter, lane % 8u == 0u, 14848u + (lane / 8u) * 16u);
    STS_128(st128_two_lanes_per_quarter, lane % 8u < 2u, 15360u + ((lane / 8u) * 2u + lane % 8u) * 16u);
    // ---- generic ld/st of shared memory
    LD_G32(gld32_linear, true, 16384u + lane * 4u);
    LD_G32(gld32_stride2, true, 17408u + lane * 8u);
    LD_G32(gld32_broadcast, true, 18432u);
    LD_G64(gld64_linear, true, 19456u + lane * 8u);
    LD_G64(gld64_pairs_xor1, true, 20480u + (lane / 2u) * 8u);
    LD_G128(gld128_linear, true, 21504u + lane * 16u);
    LD_G128(gld128_stride128, true, 22528u + lane * 128u);
    ST_G32(gst32_linear, true, 27648u + lane * 4u);
    ST_G32(gst32_stride2, true, 28672u + lane * 8u);
    ST_G128(gst128_linear, true, 29696u + lane * 16u);
    sink[lane] = acc;
}

// ------------------------------------------------------------------------------- ldmatrix / stmatrix / cp.async
// .aligned: every lane executes; lanes past 8*N give addresses that are ignored (they are kept valid)
#define LDSM_X1(NAME, TR, OFF) { unsigned r0; asm volatile("ldmatrix.sync.aligned.m8n8.x1" TR ".shared.b16 {%0}, [%1];" : "=r"(r0) : "r"(base + (OFF)) : "memory"); acc ^= r0; }
#define LDSM_X2(NAME, TR, OFF) { unsigned r0, r1; asm volatile("ldmatrix.sync.aligned.m8n8.x2" TR ".shared.b16 {%0, %1}, [%2];" : "=r"(r0), "=r"(r1) : "r"(base + (OFF)) : "memory"); acc ^= r0 + 3u * r1; }
#define LDSM_X4(NAME, TR, OFF) { unsigned r0, r1, r2, r3; asm volatile("ldmatrix.sync.aligned.m8n8.x4" TR ".shared.b16 {%0, %1, %2, %3}, [%4];" : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(base + (OFF)) : "memory"); acc ^= r0 + 3u * r1 + 5u * r2 + 7u * r3; }
#define STSM_X1(NAME, TR, OFF) { asm volatile("stmatrix.sync.aligned.m8n8.x1" TR ".shared.b16 [%0], {%1};" :: "r"(base + (OFF)), "r"(lane) : "memory"); }
#define STSM_X2(NAME, TR, OFF) { asm volatile("stmatrix.sync.aligned.m8n8.x2" TR ".shared.b16 [%0], {%1, %2};" :: "r"(base + (OFF)), "r"(lane), "r"(acc) : "memory"); }
#define STSM_X4(NAME, TR, OFF) { asm volatile("stmatrix.sync.aligned.m8n8.x4" TR ".shared.b16 [%0], {%1, %2, %3, %4};" :: "r"(base + (OFF)), "r"(lane), "r"(acc), "r"(lane + 7u), "r"(acc + 1u) : "memory"); }
// cp.async from gsrc + 16 * lane (distinct, 16-byte aligned); one wait_all at the end
#define CP_ASYNC(NAME, CACHE, SIZE, ON, OFF) if (ON) { asm volatile("cp.async." CACHE ".shared.global [%0], [%1], " #SIZE ";" :: "r"(base + (OFF)), "l"(gsrc + 16u * lane) : "memory"); }
// with a source size (bytes read; the rest of SIZE is zero-filled), a run-time value
#define CP_ASYNC_Z(NAME, CACHE, SIZE, SRC, OFF) { asm volatile("cp.async." CACHE ".shared.global [%0], [%1], " #SIZE ", %2;" :: "r"(base + (OFF)), "l"(gsrc + 16u * lane), "r"(SRC) : "memory"); }

extern "C" __global__ void __launch_bounds__(32) probe_banks_matrix(const unsigned char* __restrict__ gsrc,
                                                                    unsigned* __restrict__ sink) {
    PB_PROLOGUE();
    // gsrc holds the bytes of the u32 values 0, 1, 2, ...: byte 1 is 0 (the compiler cannot know it)
    const unsigned zero = gsrc[1];
    const bool never = zero != 0u;
    // ---- ldmatrix: one 8-lane phase per 8x8 matrix, unit = a 16-byte row
    LDSM_X1(ldsm_x1_contiguous, "", lane * 16u);
    LDSM_X1(ldsm_x1_rows_stride256, "", (lane % 8u) * 256u);
    LDSM_X1(ldsm_x1_rows_broadcast, "", 0u);
    LDSM_X2(ldsm_x2_contiguous, "", lane * 16u);
    LDSM_X2(ldsm_x2_rows_stride256, "", (lane % 16u) * 256u);
    LDSM_X2(ldsm_x2_rows_stride32, "", (lane % 16u) * 32u);
    LDSM_X4(ldsm_x4_contiguous, "", lane * 16u);
    LDSM_X4(ldsm_x4_rows_stride256, "", lane * 256u);
    LDSM_X4(ldsm_x4_rows_stride128, "", lane * 128u);
    LDSM_X4(ldsm_x4_rows_padded144, "", lane * 144u);
    LDSM_X4(ldsm_x4_rows_broadcast, "", 0u);
    LDSM_X4(ldsm_x4_rows_two_per_row, "", (lane / 2u) * 16u);
    LDSM_X1(ldsm_x1_trans_contiguous, ".trans", lane * 16u);
    LDSM_X1(ldsm_x1_trans_rows_stride256, ".trans", (lane % 8u) * 256u);
    LDSM_X2(ldsm_x2_trans_contiguous, ".trans", lane * 16u);
    LDSM_X2(ldsm_x2_trans_rows_stride256, ".trans", (lane % 16u) * 256u);
    LDSM_X4(ldsm_x4_trans_contiguous, ".trans", lane * 16u);
    LDSM_X4(ldsm_x4_trans_rows_stride256, ".trans", lane * 256u);
    // ---- stmatrix (sm_90)
    STSM_X1(stsm_x1_contiguous, "", lane * 16u);
    STSM_X1(stsm_x1_rows_stride256, "", (lane % 8u) * 256u);
    STSM_X2(stsm_x2_contiguous, "", lane * 16u);
    STSM_X2(stsm_x2_rows_stride256, "", (lane % 16u) * 256u);
    STSM_X4(stsm_x4_contiguous, "", lane * 16u);
    STSM_X4(stsm_x4_rows_stride256, "", lane * 256u);
    STSM_X4(stsm_x4_rows_stride128, "", lane * 128u);
    STSM_X4(stsm_x4_trans_contiguous, ".trans", lane * 16u);
    STSM_X4(stsm_x4_trans_rows_stride256, ".trans", lane * 256u);
    // ---- cp.async (LDGSTS)
    CP_ASYNC(ldgsts_ca4_linear, "ca", 4, true, 16384u + lane * 4u);
    CP_ASYNC(ldgsts_ca4_stride8, "ca", 4, true, 16384u + lane * 8u);
    CP_ASYNC(ldgsts_ca4_stride128, "ca", 4, true, 16384u + lane * 128u);
    CP_ASYNC(ldgsts_ca4_lanes0to3_stride128, "ca", 4, lane < 4u, 16384u + lane * 128u);
    CP_ASYNC(ldgsts_ca8_linear, "ca", 8, true, 16384u + lane * 8u);
    CP_ASYNC(ldgsts_ca8_stride16, "ca", 8, true, 16384u + lane * 16u);
    CP_ASYNC(ldgsts_ca8_stride256, "ca", 8, true, 16384u + lane * 256u);
    CP_ASYNC(ldgsts_ca16_linear, "ca", 16, true, 16384u + lane * 16u);
    CP_ASYNC(ldgsts_ca16_stride32, "ca", 16, true, 16384u + lane * 32u);
    CP_ASYNC(ldgsts_ca16_stride128, "ca", 16, true, 16384u + lane * 128u);
    CP_ASYNC(ldgsts_cg16_linear, "cg", 16, true, 16384u + lane * 16u);
    CP_ASYNC(ldgsts_cg16_stride32, "cg", 16, true, 16384u + lane * 32u);
    CP_ASYNC(ldgsts_cg16_stride128, "cg", 16, true, 16384u + lane * 128u);
    CP_ASYNC(ldgsts_cg16_lanes0to7, "cg", 16, lane < 8u, 16384u + lane * 16u);
    CP_ASYNC(ldgsts_ca16_one_conflict_in_q0, "ca", 16, true, 16384u + (lane == 1u ? 128u : lane * 16u));
    CP_ASYNC(ldgsts_cg16_one_conflict_in_q0, "cg", 16, true, 16384u + (lane == 1u ? 128u : lane * 16u));
    CP_ASYNC(ldgsts_ca16_stride64, "ca", 16, true, 16384u + lane * 64u);
    CP_ASYNC(ldgsts_cg16_stride64, "cg", 16, true, 16384u + lane * 64u);
    CP_ASYNC(ldgsts_cg16_lanes0to15_stride32, "cg", 16, lane < 16u, 16384u + lane * 32u);
    CP_ASYNC(ldgsts_ca16_broadcast, "ca", 16, true, 16384u);
    CP_ASYNC(ldgsts_cg16_broadcast, "cg", 16, true, 16384u);
    CP_ASYNC(ldgsts_ca8_broadcast, "ca", 8, true, 16384u);
    // a guard that is false for every lane (known only at run time)
    CP_ASYNC(ldgsts_cg16_guard_off_linear, "cg", 16, never, 16384u + lane * 16u);
    CP_ASYNC(ldgsts_cg16_guard_off_stride128, "cg", 16, never, 16384u + lane * 128u);
    CP_ASYNC(ldgsts_ca4_guard_off_linear, "ca", 4, never, 16384u + lane * 4u);
    // zero fill: source size 0 for every lane, or for lanes 16-31
    CP_ASYNC_Z(ldgsts_cg16_zfill_all_linear, "cg", 16, zero, 16384u + lane * 16u);
    CP_ASYNC_Z(ldgsts_cg16_zfill_all_stride32, "cg", 16, zero, 16384u + lane * 32u);
    CP_ASYNC_Z(ldgsts_cg16_zfill_upper_half_linear, "cg", 16, lane < 16u ? 16u : zero, 16384u + lane * 16u);
    CP_ASYNC_Z(ldgsts_ca4_zfill_all_linear, "ca", 4, zero, 16384u + lane * 4u);
    // source size 16 or 0 (a condition): the copy's ignore-source predicate
    CP_ASYNC_Z(ldgsts_cg16_src16or0_all_zero, "cg", 16, never ? 16u : 0u, 16384u + lane * 16u);
    CP_ASYNC_Z(ldgsts_cg16_src16or0_upper_half_zero, "cg", 16, lane < 16u ? 16u : 0u, 16384u + lane * 16u);
    CP_ASYNC_Z(ldgsts_cg16_src16or0_all_zero_stride32, "cg", 16, never ? 16u : 0u, 16384u + lane * 32u);
    asm volatile("cp.async.wait_all;" ::: "memory");
    sink[lane] = acc;
}

// ------------------------------------------------------------------------------- shared atomics
// Values are chosen so that no instruction depends on the order in which the lanes are served.
#define ATOMS_U32(NAME, OP, ON, OFF) if (ON) { unsigned r_; asm volatile("atom.shared." OP " %0, [%1], %2;" : "=r"(r_) : "r"(base + (OFF)), "r"(lane + 1u) : "memory"); acc ^= r_; }
#define ATOMS_F32(NAME, ON, OFF) if (ON) { float r_; asm volatile("atom.shared.add.f32 %0, [%1], %2;" : "=f"(r_) : "r"(base + (OFF)), "f"(1.0f) : "memory"); acc ^= (unsigned)r_; }
#define ATOMS_U64(NAME, ON, OFF) if (ON) { unsigned long long r_; asm volatile("atom.shared.add.u64 %0, [%1], %2;" : "=l"(r_) : "r"(base + (OFF)), "l"((unsigned long long)lane) : "memory"); acc ^= (unsigned)r_; }
#define ATOMS_CAS(NAME, ON, OFF) if (ON) { unsigned r_; asm volatile("atom.shared.cas.b32 %0, [%1], %2, %3;" : "=r"(r_) : "r"(base + (OFF)), "r"(0xFFFFFFFFu), "r"(lane) : "memory"); acc ^= r_; }
#define ATOMS_EXCH(NAME, ON, OFF) if (ON) { unsigned r_; asm volatile("atom.shared.exch.b32 %0, [%1], %2;" : "=r"(r_) : "r"(base + (OFF)), "r"(7u) : "memory"); acc ^= r_; }
#define REDS_U32(NAME, ON, OFF) if (ON) { asm volatile("red.shared.add.u32 [%0], %1;" :: "r"(base + (OFF)), "r"(lane + 1u) : "memory"); }
#define ATOM_G32(NAME, ON, OFF) if (ON) { unsigned r_; asm volatile("atom.add.u32 %0, [%1], %2;" : "=r"(r_) : "l"(buf + (OFF)), "r"(lane + 1u) : "memory"); acc ^= r_; }

extern "C" __global__ void __launch_bounds__(32) probe_banks_atomics(const unsigned char* __restrict__ gsrc,
                                                                     unsigned* __restrict__ sink) {
    PB_PROLOGUE();
    // a known start: the words the atomics touch are zero (plain stores, compared like any other)
    for (unsigned i = lane; i < 1024u; i += 32u) STS_32(atomics_zero_fill, true, i * 4u);
    asm volatile("bar.warp.sync 0xffffffff;" ::: "memory");
    ATOMS_U32(atoms_add_u32_distinct, "add.u32", true, lane * 4u);
    ATOMS_U32(atoms_add_u32_one_word, "add.u32", true, 0u);
    ATOMS_U32(atoms_add_u32_stride2, "add.u32", true, lane * 8u);
    ATOMS_U32(atoms_add_u32_stride4, "add.u32", true, lane * 16u);
    ATOMS_U32(atoms_add_u32_stride32, "add.u32", true, lane * 128u);
    ATOMS_U32(atoms_add_u32_pairs, "add.u32", true, (lane / 2u) * 4u);
    ATOMS_U32(atoms_add_u32_lanes0to7, "add.u32", lane < 8u, lane * 4u);
    ATOMS_U32(atoms_min_u32_distinct, "min.u32", true, lane * 4u);
    ATOMS_U32(atoms_or_b32_one_word, "or.b32", true, 64u);
    ATOMS_CAS(atoms_cas_distinct, true, 2048u + lane * 4u);
    ATOMS_CAS(atoms_cas_one_word, true, 2048u);
    ATOMS_CAS(atoms_cas_stride2, true, 2048u + lane * 8u);
    ATOMS_EXCH(atoms_exch_distinct, true, lane * 4u);
    ATOMS_EXCH(atoms_exch_one_word, true, 0u);
    REDS_U32(reds_add_u32_distinct, true, 3072u + lane * 4u);
    REDS_U32(reds_add_u32_one_word, true, 3072u);
    sink[lane] = acc;
}

// f32 and 64-bit adds have no shared-memory atomic instruction on sm_90: ptxas makes a compare-and-swap
// loop (LDS, ATOMS.CAST.SPIN, branch back). Every lane updates its own word, so each loop runs once.
// Then generic atomics (ATOM) on addresses in shared memory.
extern "C" __global__ void __launch_bounds__(32) probe_banks_atomics_more(const unsigned char* __restrict__ gsrc,
                                                                          unsigned* __restrict__ sink) {
    PB_PROLOGUE();
    for (unsigned i = lane; i < 1024u; i += 32u) STS_32(more_zero_fill, true, i * 4u);
    asm volatile("bar.warp.sync 0xffffffff;" ::: "memory");
    ATOMS_F32(atoms_add_f32_distinct, true, 1024u + lane * 4u);
    ATOMS_F32(atoms_add_f32_stride2, true, 1024u + lane * 8u);
    ATOMS_U64(atoms_add_u64_distinct, true, 2048u + lane * 8u);
    ATOMS_U64(atoms_add_u64_stride16, true, 2048u + lane * 16u);
    ATOM_G32(atom_generic_add_u32_distinct, true, lane * 4u);
    ATOM_G32(atom_generic_add_u32_stride2, true, lane * 8u);
    sink[lane] = acc;
}
