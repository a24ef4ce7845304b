// Per-opcode SASS probes: small kernels, one idea each, whose sm_90 SASS (NVRTC 13.0, cupy's options
// -ftz=true -arch=sm_90) contains the instructions named in each kernel's comment. gpu/sass_probes.py
// holds the table (inputs, launch shape, the opcodes each must contain, a numpy reference of the C code)
// and runs every probe on a GPU and in flashsim's SASS interpreter, comparing every output bit.
//
// Conventions. Lane probes: (inputs..., outputs..., int n); thread i < n reads element i of each input
// (or K consecutive elements: a[K*i + k]) and writes K consecutive outputs out[K*i + k]. Warp probes read
// with a guard instead of returning early (every lane of a warp takes part in the collective). Uniform
// probes compute from kernel parameters and blockIdx only (the U* datapath), see their section.
// The opcodes named in each comment are the ones NVRTC 13.0 emits (tests/test_sass_probes.py checks them).
// No CUDA headers: NVRTC gets no include path; intrinsics are builtins, the rest is inline PTX.

typedef unsigned int u32;
typedef int s32;
typedef unsigned long long u64;
typedef long long s64;
typedef unsigned short u16;
typedef unsigned char u8;

#define TID ((int)(blockIdx.x * blockDim.x + threadIdx.x))
#define GUARD        \
    const int i = TID; \
    if (i >= n) return;

__device__ __forceinline__ float f(u32 x) { return __uint_as_float(x); }
__device__ __forceinline__ u32 b(float x) { return __float_as_uint(x); }

// ================================================================================================ adds
// 32-bit add/sub and three-input sums: IADD3 (with '-' operands)
extern "C" __global__ void probe_add32(const u32* a, const u32* bb, const u32* c, u32* out, int n) {
    GUARD
    u32 x = a[i], y = bb[i], z = c[i];
    out[4 * i + 0] = x + y;
    out[4 * i + 1] = x - y;
    out[4 * i + 2] = x + y + z;
    out[4 * i + 3] = x - y - z;
}

// 64-bit add/sub: IADD3 with a carry out, IADD3.X with one carry in, IMAD.X (the high word of a difference)
extern "C" __global__ void probe_add64(const u64* a, const u64* bb, const u64* c, u64* out, int n) {
    GUARD
    u64 x = a[i], y = bb[i], z = c[i];
    out[4 * i + 0] = x + y;
    out[4 * i + 1] = x - y;
    out[4 * i + 2] = x + y + z;
    out[4 * i + 3] = z - x - y;
}

// three-way 64-bit sums: IADD3 with two carry-out predicates, IADD3.X consuming both (with '-' / '~'
// operands for the differences)
extern "C" __global__ void probe_add3_64(const u64* a, const u64* bb, const u64* c, u64* out, int n) {
    GUARD
    u64 x = a[i], y = bb[i], z = c[i];
    out[3 * i + 0] = x + y + z;
    out[3 * i + 1] = x - y - z;
    out[3 * i + 2] = (x + y) + (z << 1);
}

// 128-bit add and subtract through add.cc/addc.cc/addc and sub.cc/subc.cc/subc: IADD3 P, IADD3.X P, IADD3.X
extern "C" __global__ void probe_addc128(const u32* a, const u32* bb, u32* out, int n) {
    GUARD
    u32 a0 = a[4 * i], a1 = a[4 * i + 1], a2 = a[4 * i + 2], a3 = a[4 * i + 3];
    u32 b0 = bb[4 * i], b1 = bb[4 * i + 1], b2 = bb[4 * i + 2], b3 = bb[4 * i + 3];
    u32 r0, r1, r2, r3, s0, s1, s2, s3;
    asm("add.cc.u32 %0, %4, %8;\n\t"
        "addc.cc.u32 %1, %5, %9;\n\t"
        "addc.cc.u32 %2, %6, %10;\n\t"
        "addc.u32 %3, %7, %11;"
        : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(b2), "r"(b3));
    asm("sub.cc.u32 %0, %4, %8;\n\t"
        "subc.cc.u32 %1, %5, %9;\n\t"
        "subc.cc.u32 %2, %6, %10;\n\t"
        "subc.u32 %3, %7, %11;"
        : "=r"(s0), "=r"(s1), "=r"(s2), "=r"(s3)
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(b2), "r"(b3));
    out[8 * i + 0] = r0; out[8 * i + 1] = r1; out[8 * i + 2] = r2; out[8 * i + 3] = r3;
    out[8 * i + 4] = s0; out[8 * i + 5] = s1; out[8 * i + 6] = s2; out[8 * i + 7] = s3;
}

// add.cc / sub.cc with the carry read back (addc / subc of zeros): IADD3 with a carry out, SEL of the
// carry, IADD3.X of an immediate -1 with the carry in
extern "C" __global__ void probe_carry_out(const u32* a, const u32* bb, const u32* c, u32* out, int n) {
    GUARD
    u32 s, cy, d, cy2;
    asm("add.cc.u32 %0, %2, %3;\n\taddc.u32 %1, 0, 0;" : "=r"(s), "=r"(cy) : "r"(a[i]), "r"(bb[i]));
    asm("sub.cc.u32 %0, %2, %3;\n\tsubc.u32 %1, 0, 0;" : "=r"(d), "=r"(cy2) : "r"(a[i]), "r"(c[i]));
    out[4 * i + 0] = s;
    out[4 * i + 1] = cy;
    out[4 * i + 2] = d;
    out[4 * i + 3] = cy2;
}

// ================================================================================================ multiply
// IMAD, IMAD.HI.U32 (__umulhi), IMAD.HI (__mulhi), IMAD.WIDE.U32 / IMAD.WIDE (64-bit products), LEA (x * 7 as
// (x << 3) - x), HFMA2.MMA (ptxas's 32-bit constant load)
extern "C" __global__ void probe_mul32(const u32* a, const u32* bb, const u32* c, u32* out, int n) {
    GUARD
    u32 x = a[i], y = bb[i], z = c[i];
    out[8 * i + 0] = x * y;
    out[8 * i + 1] = x * y + z;
    out[8 * i + 2] = __umulhi(x, y);
    out[8 * i + 3] = (u32)__mulhi((s32)x, (s32)y);
    u64 w = (u64)x * (u64)y;
    s64 v = (s64)(s32)x * (s64)(s32)z;
    out[8 * i + 4] = (u32)(w >> 32) ^ (u32)w;
    out[8 * i + 5] = (u32)((u64)v >> 32) + (u32)v;
    out[8 * i + 6] = x * 0x9E3779B9u + 12345u;
    out[8 * i + 7] = x * 7u - y * 12u;
}

// mad.wide with a 64-bit addend: IMAD.WIDE.U32 / IMAD.WIDE products, then IADD3 + IADD3.X
extern "C" __global__ void probe_mad_wide(const u32* a, const u32* bb, const u64* c, u64* out, int n) {
    GUARD
    u64 r0, r1;
    asm("mad.wide.u32 %0, %1, %2, %3;" : "=l"(r0) : "r"(a[i]), "r"(bb[i]), "l"(c[i]));
    asm("mad.wide.s32 %0, %1, %2, %3;" : "=l"(r1) : "r"(a[i]), "r"(bb[i]), "l"(c[i]));
    out[2 * i + 0] = r0;
    out[2 * i + 1] = r1;
}

// mad.hi with an addend: IMAD.HI.U32 / IMAD.HI whose addend is a register pair (c in its high word);
// mad.lo.cc + madc.hi.cc + addc: one IMAD.WIDE.U32 with a 64-bit addend (c:c) and a carry out
extern "C" __global__ void probe_mad_hi(const u32* a, const u32* bb, const u32* c, u32* out, int n) {
    GUARD
    u32 x = a[i], y = bb[i], z = c[i];
    u32 r0, r1, r2, r3, r4;
    asm("mad.hi.u32 %0, %1, %2, %3;" : "=r"(r0) : "r"(x), "r"(y), "r"(z));
    asm("mad.hi.s32 %0, %1, %2, %3;" : "=r"(r1) : "r"(x), "r"(y), "r"(z));
    asm("mad.lo.cc.u32 %0, %3, %4, %5;\n\t"
        "madc.hi.cc.u32 %1, %3, %4, %5;\n\t"
        "addc.u32 %2, 0, 0;"
        : "=r"(r2), "=r"(r3), "=r"(r4) : "r"(x), "r"(y), "r"(z));
    out[5 * i + 0] = r0;
    out[5 * i + 1] = r1;
    out[5 * i + 2] = r2;
    out[5 * i + 3] = r3;
    out[5 * i + 4] = r4;
}

// 64-bit multiply (IMAD.WIDE.U32 + IMAD), __umul64hi / __mul64hi (IMAD.WIDE.U32 with a carry out,
// IMAD.WIDE.U32.X with a carry in, IADD3 RZ carry-only, IADD3.X, SEL), 64-bit multiply by a constant
extern "C" __global__ void probe_mul64(const u64* a, const u64* bb, u64* out, int n) {
    GUARD
    u64 x = a[i], y = bb[i];
    out[4 * i + 0] = x * y;
    out[4 * i + 1] = __umul64hi(x, y);
    out[4 * i + 2] = (u64)__mul64hi((s64)x, (s64)y);
    out[4 * i + 3] = x * 0x9E3779B97F4A7C15ull;
}

// ================================================================================================ division
// unsigned 32-bit division and modulo by a variable: I2F.U32.RP, MUFU.RCP, IADD3 (reciprocal - 2 ulp),
// F2I.FTZ.U32.TRUNC.NTZ, IMAD.HI.U32 with a register-pair addend (the Newton step r + umulhi(r, e)),
// ISETP.GE.U32, VIADD, LOP3 (division by zero gives all ones)
extern "C" __global__ void probe_udiv32(const u32* a, const u32* bb, u32* out, int n) {
    GUARD
    u32 x = a[i], y = bb[i];
    out[2 * i + 0] = x / y;
    out[2 * i + 1] = x % y;
}

// signed 32-bit division and modulo by a variable: IABS, I2F.RP, MUFU.RCP, IMAD.HI.U32, LOP3 (sign), ISETP
extern "C" __global__ void probe_sdiv32(const s32* a, const s32* bb, s32* out, int n) {
    GUARD
    s32 x = a[i], y = bb[i];
    out[2 * i + 0] = x / y;
    out[2 * i + 1] = x % y;
}

// 32-bit division by constants: IMAD.WIDE.U32 / IMAD.HI with magic numbers, SHF.R, LEA.HI / LEA.HI.SX32
// (rounding toward zero for signed dividends)
extern "C" __global__ void probe_div32_const(const u32* a, u32* out, int n) {
    GUARD
    u32 x = a[i];
    s32 s = (s32)x;
    out[10 * i + 0] = x / 7u;
    out[10 * i + 1] = x % 7u;
    out[10 * i + 2] = x / 1000u;
    out[10 * i + 3] = x / 16u;
    out[10 * i + 4] = (u32)(s / 7);
    out[10 * i + 5] = (u32)(s % 7);
    out[10 * i + 6] = (u32)(s / -3);
    out[10 * i + 7] = (u32)(s / 16);
    out[10 * i + 8] = (u32)(s % 16);
    out[10 * i + 9] = x / 0x80000001u;
}

// unsigned 64-bit division and modulo by a variable: the __cuda_sm20_div_u64 / rem_u64 subroutines
// (CALL.REL.NOINC / RET.REL.NODEC, I2F.U64.RP, F2I.U64.TRUNC, IMAD.WIDE.U32 and IMAD.HI.U32 with carries,
// ISETP.GE.U32.AND.EX) and the 32-bit fast path when both high words are zero
extern "C" __global__ void probe_udiv64(const u64* a, const u64* bb, u64* out, int n) {
    GUARD
    u64 x = a[i], y = bb[i];
    out[2 * i + 0] = x / y;
    out[2 * i + 1] = x % y;
}

// signed 64-bit division and modulo by a variable: __cuda_sm20_div_s64 / rem_s64
extern "C" __global__ void probe_sdiv64(const s64* a, const s64* bb, s64* out, int n) {
    GUARD
    s64 x = a[i], y = bb[i];
    out[2 * i + 0] = x / y;
    out[2 * i + 1] = x % y;
}

// 64-bit division by constants: chains of IMAD.WIDE.U32 with carry outs, IMAD.WIDE.U32.X, IMAD.X, SHF.R.U64,
// SHF.R.S64, LEA.HI.X.SX32
extern "C" __global__ void probe_div64_const(const u64* a, u64* out, int n) {
    GUARD
    u64 x = a[i];
    s64 s = (s64)x;
    out[4 * i + 0] = x / 10ull;
    out[4 * i + 1] = x % 1000000007ull;
    out[4 * i + 2] = (u64)(s / 7);
    out[4 * i + 3] = (u64)(s % 10);
}

// ================================================================================================ LEA
// scaled-index address arithmetic, checked through the values loaded (the table holds tbl[j] = a known
// function of j, so a wrong address reads a wrong value or faults): LEA with a carry out, LEA.HI.X,
// LEA.HI.X.SX32 (sign-extended 32-bit index), LEA.HI / LEA.HI.SX32 (index + (a >> 32-s)), IMAD.WIDE
extern "C" __global__ void probe_lea(const u32* tbl, const s32* idx, const u32* kk, u32* out, int n) {
    GUARD
    s32 j = idx[i];  // in [-512, 512); the table has 2048 entries
    u32 k = kk[i];
    const u32* mid = tbl + 1024;
    const u32* t0 = tbl + (k & 511u);
    const u32* t1 = mid + j;
    out[6 * i + 0] = t0[k >> 23];
    out[6 * i + 1] = t1[(s32)k >> 23];
    out[6 * i + 2] = mid[(s64)j + (s64)((s32)k >> 23)];
    out[6 * i + 3] = ((const u16*)mid)[2 * j + ((s32)k >> 24)];
    out[6 * i + 4] = k * 9u + ((u32)j << 5);       // LEA a, a, 3 and LEA a, b, 5
    out[6 * i + 5] = (k & 511u) + (k >> 23);      // LEA.HI
}

// ================================================================================================ logic
// LOP3.LUT of three inputs, LOP3 with a predicate output ((a & b) != 0), SEL on it
extern "C" __global__ void probe_lop3(const u32* a, const u32* bb, const u32* c, u32* out, int n) {
    GUARD
    u32 x = a[i], y = bb[i], z = c[i];
    out[6 * i + 0] = (x & ~y) | z;
    out[6 * i + 1] = x ^ y ^ z;
    out[6 * i + 2] = (x & y) | (~x & z);
    out[6 * i + 3] = ~(x | y) & (z ^ 0x5A5A5A5Au);
    out[6 * i + 4] = (x & y) != 0 ? z : ~z;
    out[6 * i + 5] = ((x ^ z) & 0xFF00FF00u) == 0 ? y : 0x12345678u;
}

// lop3.b32 with an immediate lookup table in inline PTX: LOP3.LUT with arbitrary tables
extern "C" __global__ void probe_lop3_ptx(const u32* a, const u32* bb, const u32* c, u32* out, int n) {
    GUARD
    u32 x = a[i], y = bb[i], z = c[i], r0, r1, r2;
    asm("lop3.b32 %0, %1, %2, %3, 0x96;" : "=r"(r0) : "r"(x), "r"(y), "r"(z));
    asm("lop3.b32 %0, %1, %2, %3, 0x1e;" : "=r"(r1) : "r"(x), "r"(y), "r"(z));
    asm("lop3.b32 %0, %1, %2, %3, 0xe8;" : "=r"(r2) : "r"(x), "r"(y), "r"(z));
    out[3 * i + 0] = r0;
    out[3 * i + 1] = r1;
    out[3 * i + 2] = r2;
}

// predicate logic (and/or/xor/not) in inline PTX: ptxas folds it into ISETP's boolean operation with a
// predicate input (ISETP.LT.U32.XOR, ISETP.NE.U32.AND, ISETP.GE.U32.OR)
extern "C" __global__ void probe_isetp_bop(const u32* a, const u32* bb, const u32* c, u32* out, int n) {
    GUARD
    u32 x = a[i], y = bb[i], z = c[i], r;
    asm("{\n\t.reg .pred p, q, s, t, u;\n\t"
        "setp.lt.u32 p, %1, %2;\n\t"
        "setp.lt.u32 q, %2, %3;\n\t"
        "setp.ne.u32 s, %1, %3;\n\t"
        "xor.pred t, p, q;\n\t"
        "and.pred u, t, s;\n\t"
        "or.pred t, u, !p;\n\t"
        "selp.u32 %0, 1, 0, t;\n\t"
        "@u add.u32 %0, %0, 2;\n\t"
        "}"
        : "=r"(r) : "r"(x), "r"(y), "r"(z));
    out[i] = r;
}

// boolean logic of float and integer comparisons in C: PLOP3.LUT combining FSETP / ISETP results
extern "C" __global__ void probe_plop3(const u32* a, const u32* bb, const u32* c, u32* out, int n) {
    GUARD
    u32 x = a[i], y = bb[i], z = c[i];
    float fx = f(x), fy = f(y);
    bool p = fx < fy, q = x < z, r = (y & 3u) == 1u, s = fx != fx;
    u32 m = 0;
    if ((p ^ q) && (r || s)) m |= 1u;
    if ((p && !r) || (q && s)) m |= 2u;
    if (p == (q != r)) m |= 4u;
    out[i] = m;
}

// ================================================================================================ shifts
// 32-bit shifts by variable amounts (C: defined below 32; PTX shl/shr clamp): SHF.L.U32, SHF.R.U32.HI,
// SHF.R.S32.HI
extern "C" __global__ void probe_shift32(const u32* a, const u32* s, u32* out, int n) {
    GUARD
    u32 x = a[i], k = s[i], r0, r1, r2;
    asm("shl.b32 %0, %1, %2;" : "=r"(r0) : "r"(x), "r"(k));
    asm("shr.u32 %0, %1, %2;" : "=r"(r1) : "r"(x), "r"(k));
    asm("shr.s32 %0, %1, %2;" : "=r"(r2) : "r"(x), "r"(k));
    out[6 * i + 0] = r0;
    out[6 * i + 1] = r1;
    out[6 * i + 2] = r2;
    out[6 * i + 3] = x << (k & 31);
    out[6 * i + 4] = x >> (k & 31);
    out[6 * i + 5] = (u32)((s32)x >> (k & 31));
}

// 64-bit shifts by variable amounts, including >= 64 (PTX clamps): SHF.L.U64.HI, SHF.R.U64, SHF.R.S64,
// SHF.R.U32.HI / SHF.R.S32.HI on the high word
extern "C" __global__ void probe_shift64(const u64* a, const u32* s, u64* out, int n) {
    GUARD
    u64 x = a[i], r0, r1, r2;
    u32 k = s[i];
    asm("shl.b64 %0, %1, %2;" : "=l"(r0) : "l"(x), "r"(k));
    asm("shr.u64 %0, %1, %2;" : "=l"(r1) : "l"(x), "r"(k));
    asm("shr.s64 %0, %1, %2;" : "=l"(r2) : "l"(x), "r"(k));
    out[6 * i + 0] = r0;
    out[6 * i + 1] = r1;
    out[6 * i + 2] = r2;
    out[6 * i + 3] = x << 13;
    out[6 * i + 4] = x >> 40;
    out[6 * i + 5] = (u64)((s64)x >> 37);
}

// funnel shifts and rotates: SHF.L.W.U32.HI / SHF.R.W.U32 (wrap: amount mod 32), SHF.L.U32.HI / SHF.R.U32
// (clamp: amount capped at 32)
extern "C" __global__ void probe_funnel(const u32* lo, const u32* hi, const u32* s, u32* out, int n) {
    GUARD
    u32 x = lo[i], y = hi[i], k = s[i];
    out[6 * i + 0] = __funnelshift_l(x, y, k);
    out[6 * i + 1] = __funnelshift_r(x, y, k);
    out[6 * i + 2] = __funnelshift_lc(x, y, k);
    out[6 * i + 3] = __funnelshift_rc(x, y, k);
    out[6 * i + 4] = (x << (k & 31)) | (x >> ((32 - k) & 31));  // rotate left
    out[6 * i + 5] = __funnelshift_r(x, x, 7);                    // rotate right by a constant
}

// ================================================================================================ bytes
// __byte_perm with a variable selector (masked with 0x7777: no sign replication) and a constant one, byte
// packing, sign extension of a byte: PRMT
extern "C" __global__ void probe_prmt(const u32* a, const u32* bb, const u32* s, u32* out, int n) {
    GUARD
    u32 x = a[i], y = bb[i], k = s[i];
    out[4 * i + 0] = __byte_perm(x, y, k);
    out[4 * i + 1] = __byte_perm(x, y, 0x7531);
    out[4 * i + 2] = (x & 0xFFu) | ((y & 0xFFu) << 8) | ((x >> 24) << 16) | ((y >> 16) << 24);
    out[4 * i + 3] = (u32)(s32)(signed char)(x >> 8);  // sign-extend a byte
}

// prmt.b32 modes in inline PTX: PRMT.F4E, PRMT.B4E, PRMT.RC8, PRMT.ECL, PRMT.ECR, PRMT.RC16
extern "C" __global__ void probe_prmt_modes(const u32* a, const u32* bb, const u32* s, u32* out, int n) {
    GUARD
    u32 x = a[i], y = bb[i], k = s[i], r0, r1, r2, r3, r4, r5;
    asm("prmt.b32.f4e %0, %1, %2, %3;" : "=r"(r0) : "r"(x), "r"(y), "r"(k));
    asm("prmt.b32.b4e %0, %1, %2, %3;" : "=r"(r1) : "r"(x), "r"(y), "r"(k));
    asm("prmt.b32.rc8 %0, %1, %2, %3;" : "=r"(r2) : "r"(x), "r"(y), "r"(k));
    asm("prmt.b32.ecl %0, %1, %2, %3;" : "=r"(r3) : "r"(x), "r"(y), "r"(k));
    asm("prmt.b32.ecr %0, %1, %2, %3;" : "=r"(r4) : "r"(x), "r"(y), "r"(k));
    asm("prmt.b32.rc16 %0, %1, %2, %3;" : "=r"(r5) : "r"(x), "r"(y), "r"(k));
    out[6 * i + 0] = r0;
    out[6 * i + 1] = r1;
    out[6 * i + 2] = r2;
    out[6 * i + 3] = r3;
    out[6 * i + 4] = r4;
    out[6 * i + 5] = r5;
}

// ================================================================================================ compares
// every 32-bit comparison, signed and unsigned, as a bit mask: ISETP.{GE,GT,NE}[.U32], SEL, LOP3, VIMNMX
extern "C" __global__ void probe_isetp32(const u32* a, const u32* bb, u32* out, int n) {
    GUARD
    u32 x = a[i], y = bb[i];
    s32 p = (s32)x, q = (s32)y;
    u32 m = 0;
    m |= (u32)(x < y) << 0;
    m |= (u32)(x <= y) << 1;
    m |= (u32)(x > y) << 2;
    m |= (u32)(x >= y) << 3;
    m |= (u32)(x == y) << 4;
    m |= (u32)(x != y) << 5;
    m |= (u32)(p < q) << 6;
    m |= (u32)(p <= q) << 7;
    m |= (u32)(p > q) << 8;
    m |= (u32)(p >= q) << 9;
    m |= (u32)(p < 0) << 10;
    m |= (u32)(x > 1000u) << 11;
    out[2 * i + 0] = m;
    out[2 * i + 1] = p < q ? x : y;
}

// 64-bit comparisons: ISETP on the low words, then ISETP.{GE,GT,NE}[.U32].AND.EX on the high words
extern "C" __global__ void probe_isetp64(const u64* a, const u64* bb, u32* out, int n) {
    GUARD
    u64 x = a[i], y = bb[i];
    s64 p = (s64)x, q = (s64)y;
    u32 m = 0;
    m |= (u32)(x < y) << 0;
    m |= (u32)(x <= y) << 1;
    m |= (u32)(x > y) << 2;
    m |= (u32)(x >= y) << 3;
    m |= (u32)(x == y) << 4;
    m |= (u32)(x != y) << 5;
    m |= (u32)(p < q) << 6;
    m |= (u32)(p <= q) << 7;
    m |= (u32)(p > q) << 8;
    m |= (u32)(p >= q) << 9;
    m |= (u32)(p < 0) << 10;
    m |= (u32)(x > 1000ull) << 11;
    out[i] = m;
}

// ================================================================================================ min/max/abs
// IABS (abs.s32 wraps INT_MIN), VIMNMX / VIMNMX.U32 (min/max, also with an immediate)
extern "C" __global__ void probe_minmax(const u32* a, const u32* bb, u32* out, int n) {
    GUARD
    u32 x = a[i], y = bb[i];
    s32 p = (s32)x, q = (s32)y;
    s32 ab;
    asm("abs.s32 %0, %1;" : "=r"(ab) : "r"(p));
    out[6 * i + 0] = (u32)ab;
    out[6 * i + 1] = (u32)min(p, q);
    out[6 * i + 2] = (u32)max(p, q);
    out[6 * i + 3] = min(x, y);
    out[6 * i + 4] = max(x, y);
    out[6 * i + 5] = (u32)max(p, -7);
}

// 64-bit abs / min / max: ISETP.{LT,GT}[.U32].AND.EX, SEL, IADD3 + IMAD.X (negation)
extern "C" __global__ void probe_minmax64(const u64* a, const u64* bb, u64* out, int n) {
    GUARD
    u64 x = a[i], y = bb[i];
    s64 p = (s64)x, q = (s64)y;
    s64 ab;
    asm("abs.s64 %0, %1;" : "=l"(ab) : "l"(p));
    out[5 * i + 0] = (u64)ab;
    out[5 * i + 1] = (u64)min(p, q);
    out[5 * i + 2] = (u64)max(p, q);
    out[5 * i + 3] = min(x, y);
    out[5 * i + 4] = max(x, y);
}

// min/max of a sum: VIADDMNMX.U32 (x + 100 folded in), VIMNMX / VIMNMX.U32 after IADD3
extern "C" __global__ void probe_viaddmnmx(const u32* a, const u32* bb, const u32* c, u32* out, int n) {
    GUARD
    u32 x = a[i], y = bb[i], z = c[i];
    out[4 * i + 0] = (u32)min((s32)(x + y), (s32)z);
    out[4 * i + 1] = (u32)max((s32)(x + y), (s32)z);
    out[4 * i + 2] = min(x + y, z);
    out[4 * i + 3] = max(x + 100u, z);
}

// ================================================================================================ bit counts
// POPC (__popc, __popcll), FLO.U32 (__clz = 31 - FLO), FLO.U32.SH (bfind.shiftamt; __ffs: of BREV, + 1),
// FLO (bfind.s32), BREV (__brev, __brevll), SHF.R.U64
extern "C" __global__ void probe_bits(const u32* a, const u64* w, u32* out, int n) {
    GUARD
    u32 x = a[i];
    u64 y = w[i];
    u32 r0, r1, r2;
    asm("bfind.u32 %0, %1;" : "=r"(r0) : "r"(x));
    asm("bfind.s32 %0, %1;" : "=r"(r1) : "r"(x));
    asm("bfind.shiftamt.u32 %0, %1;" : "=r"(r2) : "r"(x));
    out[12 * i + 0] = __popc(x);
    out[12 * i + 1] = __popcll(y);
    out[12 * i + 2] = __clz(x);
    out[12 * i + 3] = __clzll(y);
    out[12 * i + 4] = __ffs(x);
    out[12 * i + 5] = __ffsll(y);
    out[12 * i + 6] = __brev(x);
    out[12 * i + 7] = (u32)(__brevll(y) >> 17);
    out[12 * i + 8] = r0;
    out[12 * i + 9] = r1;
    out[12 * i + 10] = r2;
    out[12 * i + 11] = (u32)__brevll(y);
}

// ================================================================================================ int -> float
// int -> float with each rounding mode: I2FP.F32.S32[.RZ], I2F.RM / I2F.RP, I2FP.F32.U32[.RZ], I2F.U32.RM/RP
extern "C" __global__ void probe_i2f32(const u32* a, u32* out, int n) {
    GUARD
    u32 x = a[i];
    s32 s = (s32)x;
    out[8 * i + 0] = b(__int2float_rn(s));
    out[8 * i + 1] = b(__int2float_rz(s));
    out[8 * i + 2] = b(__int2float_rd(s));
    out[8 * i + 3] = b(__int2float_ru(s));
    out[8 * i + 4] = b(__uint2float_rn(x));
    out[8 * i + 5] = b(__uint2float_rz(x));
    out[8 * i + 6] = b(__uint2float_rd(x));
    out[8 * i + 7] = b(__uint2float_ru(x));
}

// I2F.S64 / I2F.U64 with every rounding mode
extern "C" __global__ void probe_i2f64(const u64* a, u32* out, int n) {
    GUARD
    u64 x = a[i];
    s64 s = (s64)x;
    out[8 * i + 0] = b(__ll2float_rn(s));
    out[8 * i + 1] = b(__ll2float_rz(s));
    out[8 * i + 2] = b(__ll2float_rd(s));
    out[8 * i + 3] = b(__ll2float_ru(s));
    out[8 * i + 4] = b(__ull2float_rn(x));
    out[8 * i + 5] = b(__ull2float_rz(x));
    out[8 * i + 6] = b(__ull2float_rd(x));
    out[8 * i + 7] = b(__ull2float_ru(x));
}

// ================================================================================================ float -> int
// F2I.FTZ[.U32][.TRUNC|.FLOOR|.CEIL].NTZ: rounding modes, saturation, NaN -> 0
extern "C" __global__ void probe_f2i32(const u32* a, u32* out, int n) {
    GUARD
    float x = f(a[i]);
    out[8 * i + 0] = (u32)__float2int_rn(x);
    out[8 * i + 1] = (u32)__float2int_rz(x);
    out[8 * i + 2] = (u32)__float2int_rd(x);
    out[8 * i + 3] = (u32)__float2int_ru(x);
    out[8 * i + 4] = __float2uint_rn(x);
    out[8 * i + 5] = __float2uint_rz(x);
    out[8 * i + 6] = __float2uint_rd(x);
    out[8 * i + 7] = __float2uint_ru(x);
}

// F2I.S64 / F2I.U64 with every rounding mode (no .FTZ form: ptxas flushes with FMUL.FTZ x, 1 first where a
// subnormal input could change the result)
extern "C" __global__ void probe_f2i64(const u32* a, u64* out, int n) {
    GUARD
    float x = f(a[i]);
    out[8 * i + 0] = (u64)__float2ll_rn(x);
    out[8 * i + 1] = (u64)__float2ll_rz(x);
    out[8 * i + 2] = (u64)__float2ll_rd(x);
    out[8 * i + 3] = (u64)__float2ll_ru(x);
    out[8 * i + 4] = __float2ull_rn(x);
    out[8 * i + 5] = __float2ull_rz(x);
    out[8 * i + 6] = __float2ull_rd(x);
    out[8 * i + 7] = __float2ull_ru(x);
}

// cvt without .ftz in inline PTX: F2I.FLOOR.NTZ, F2I.CEIL.NTZ, F2I.U32.CEIL.NTZ, F2I.NTZ (a subnormal input
// is a tiny nonzero value: ceil gives 1)
extern "C" __global__ void probe_f2i_noftz(const u32* a, u32* out, int n) {
    GUARD
    u32 x = a[i], r0, r1, r2, r3;
    asm("cvt.rmi.s32.f32 %0, %1;" : "=r"(r0) : "f"(f(x)));
    asm("cvt.rpi.s32.f32 %0, %1;" : "=r"(r1) : "f"(f(x)));
    asm("cvt.rpi.u32.f32 %0, %1;" : "=r"(r2) : "f"(f(x)));
    asm("cvt.rni.s32.f32 %0, %1;" : "=r"(r3) : "f"(f(x)));
    out[4 * i + 0] = r0;
    out[4 * i + 1] = r1;
    out[4 * i + 2] = r2;
    out[4 * i + 3] = r3;
}

// ================================================================================================ f32 arithmetic
// FADD.FTZ with every rounding mode (__fadd_rn/rz/rd/ru; -ftz=true)
extern "C" __global__ void probe_fadd(const u32* a, const u32* bb, u32* out, int n) {
    GUARD
    float x = f(a[i]), y = f(bb[i]);
    out[5 * i + 0] = b(__fadd_rn(x, y));
    out[5 * i + 1] = b(__fadd_rz(x, y));
    out[5 * i + 2] = b(__fadd_rd(x, y));
    out[5 * i + 3] = b(__fadd_ru(x, y));
    out[5 * i + 4] = b(__fsub_rn(x, y));
}

// FMUL.FTZ with every rounding mode, FMUL by a constant
extern "C" __global__ void probe_fmul(const u32* a, const u32* bb, u32* out, int n) {
    GUARD
    float x = f(a[i]), y = f(bb[i]);
    out[5 * i + 0] = b(__fmul_rn(x, y));
    out[5 * i + 1] = b(__fmul_rz(x, y));
    out[5 * i + 2] = b(__fmul_rd(x, y));
    out[5 * i + 3] = b(__fmul_ru(x, y));
    out[5 * i + 4] = b(x * 0.75f);
}

// FFMA.FTZ with every rounding mode
extern "C" __global__ void probe_ffma(const u32* a, const u32* bb, const u32* c, u32* out, int n) {
    GUARD
    float x = f(a[i]), y = f(bb[i]), z = f(c[i]);
    out[5 * i + 0] = b(__fmaf_rn(x, y, z));
    out[5 * i + 1] = b(__fmaf_rz(x, y, z));
    out[5 * i + 2] = b(__fmaf_rd(x, y, z));
    out[5 * i + 3] = b(__fmaf_ru(x, y, z));
    out[5 * i + 4] = b(__fmaf_rn(-x, y, -z));
}

// without .ftz (inline PTX): FADD.RZ, FMUL.RP, FFMA.RM keep subnormals; .sat: FADD.SAT, FMUL.SAT, FFMA.SAT,
// FFMA.FTZ.SAT
extern "C" __global__ void probe_f32_noftz(const u32* a, const u32* bb, const u32* c, u32* out, int n) {
    GUARD
    float x = f(a[i]), y = f(bb[i]), z = f(c[i]), r0, r1, r2, r3, r4, r5, r6;
    asm("add.rz.f32 %0, %1, %2;" : "=f"(r0) : "f"(x), "f"(y));
    asm("mul.rp.f32 %0, %1, %2;" : "=f"(r1) : "f"(x), "f"(y));
    asm("fma.rm.f32 %0, %1, %2, %3;" : "=f"(r2) : "f"(x), "f"(y), "f"(z));
    asm("add.rn.sat.f32 %0, %1, %2;" : "=f"(r3) : "f"(x), "f"(y));
    asm("mul.rn.sat.f32 %0, %1, %2;" : "=f"(r4) : "f"(x), "f"(y));
    asm("fma.rn.sat.f32 %0, %1, %2, %3;" : "=f"(r5) : "f"(x), "f"(y), "f"(z));
    asm("fma.rn.ftz.sat.f32 %0, %1, %2, %3;" : "=f"(r6) : "f"(x), "f"(y), "f"(z));
    out[7 * i + 0] = b(r0);
    out[7 * i + 1] = b(r1);
    out[7 * i + 2] = b(r2);
    out[7 * i + 3] = b(r3);
    out[7 * i + 4] = b(r4);
    out[7 * i + 5] = b(r5);
    out[7 * i + 6] = b(r6);
}

// __saturatef (FADD.FTZ.SAT RZ, x), fminf / fmaxf (FMNMX.FTZ), fabsf / negation as operand modifiers,
// max.NaN / min.NaN (FMNMX.NAN) and min without .ftz (FMNMX) in inline PTX
extern "C" __global__ void probe_fminmax(const u32* a, const u32* bb, u32* out, int n) {
    GUARD
    float x = f(a[i]), y = f(bb[i]), r0, r1, r2;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(r0) : "f"(x), "f"(y));
    asm("min.NaN.f32 %0, %1, %2;" : "=f"(r1) : "f"(x), "f"(y));
    asm("min.f32 %0, %1, %2;" : "=f"(r2) : "f"(x), "f"(y));
    out[7 * i + 0] = b(__saturatef(x));
    out[7 * i + 1] = b(fminf(x, y));
    out[7 * i + 2] = b(fmaxf(x, y));
    out[7 * i + 3] = b(fmaxf(fabsf(x), -y));
    out[7 * i + 4] = b(r0);
    out[7 * i + 5] = b(r1);
    out[7 * i + 6] = b(r2);
}

// ================================================================================================ f32 compares
// float comparisons in C (-ftz=true): FSETP.{GEU,GTU,GT,GE,NEU}.FTZ.AND, |x| compares, SEL into a bit
// mask, a predicated FADD.FTZ
extern "C" __global__ void probe_fsetp(const u32* a, const u32* bb, u32* out, int n) {
    GUARD
    float x = f(a[i]), y = f(bb[i]);
    u32 m = 0;
    m |= (u32)(x < y) << 0;
    m |= (u32)(x <= y) << 1;
    m |= (u32)(x > y) << 2;
    m |= (u32)(x >= y) << 3;
    m |= (u32)(x == y) << 4;
    m |= (u32)(x != y) << 5;
    m |= (u32)!(x < y) << 6;
    m |= (u32)!(x <= y) << 7;
    m |= (u32)!(x > y) << 8;
    m |= (u32)!(x >= y) << 9;
    m |= (u32)!(x == y) << 10;
    m |= (u32)(isnan(x)) << 11;
    m |= (u32)(isnan(x) || isnan(y)) << 12;
    m |= (u32)(!isnan(x) && !isnan(y)) << 13;
    m |= (u32)(x < 1.0f) << 14;
    m |= (u32)(fabsf(x) == __uint_as_float(0x7f800000u)) << 15;
    out[2 * i + 0] = m;
    out[2 * i + 1] = b(x < y ? x : y + 1.0f);
}

// every setp.f32 comparison, ordered and unordered, without .ftz (and two with): FSETP.{GEU,GTU,GT,GE,NEU,
// NE,NAN}.AND, FSETP.{GEU,NE}.FTZ.AND (ptxas swaps operands and inverts predicates for the rest)
extern "C" __global__ void probe_fsetp_ptx(const u32* a, const u32* bb, u32* out, int n) {
    GUARD
    float x = f(a[i]), y = f(bb[i]);
    u32 m;
    asm("{\n\t.reg .pred p;\n\t.reg .u32 t;\n\tmov.u32 %0, 0;\n\t"
        "setp.lt.f32 p, %1, %2;   selp.u32 t, 1, 0, p;     or.b32 %0, %0, t;\n\t"
        "setp.le.f32 p, %1, %2;   selp.u32 t, 2, 0, p;     or.b32 %0, %0, t;\n\t"
        "setp.gt.f32 p, %1, %2;   selp.u32 t, 4, 0, p;     or.b32 %0, %0, t;\n\t"
        "setp.ge.f32 p, %1, %2;   selp.u32 t, 8, 0, p;     or.b32 %0, %0, t;\n\t"
        "setp.eq.f32 p, %1, %2;   selp.u32 t, 16, 0, p;    or.b32 %0, %0, t;\n\t"
        "setp.ne.f32 p, %1, %2;   selp.u32 t, 32, 0, p;    or.b32 %0, %0, t;\n\t"
        "setp.ltu.f32 p, %1, %2;  selp.u32 t, 64, 0, p;    or.b32 %0, %0, t;\n\t"
        "setp.leu.f32 p, %1, %2;  selp.u32 t, 128, 0, p;   or.b32 %0, %0, t;\n\t"
        "setp.gtu.f32 p, %1, %2;  selp.u32 t, 256, 0, p;   or.b32 %0, %0, t;\n\t"
        "setp.geu.f32 p, %1, %2;  selp.u32 t, 512, 0, p;   or.b32 %0, %0, t;\n\t"
        "setp.equ.f32 p, %1, %2;  selp.u32 t, 1024, 0, p;  or.b32 %0, %0, t;\n\t"
        "setp.neu.f32 p, %1, %2;  selp.u32 t, 2048, 0, p;  or.b32 %0, %0, t;\n\t"
        "setp.num.f32 p, %1, %2;  selp.u32 t, 4096, 0, p;  or.b32 %0, %0, t;\n\t"
        "setp.nan.f32 p, %1, %2;  selp.u32 t, 8192, 0, p;  or.b32 %0, %0, t;\n\t"
        "setp.lt.ftz.f32 p, %1, %2; selp.u32 t, 16384, 0, p; or.b32 %0, %0, t;\n\t"
        "setp.equ.ftz.f32 p, %1, %2; selp.u32 t, 32768, 0, p; or.b32 %0, %0, t;\n\t"
        "}"
        : "=r"(m) : "f"(x), "f"(y));
    out[i] = m;
}

// float selections and signed min/max of sums: FSEL, VIADDMNMX (signed)
extern "C" __global__ void probe_fsel(const u32* a, const u32* bb, const u32* c, u32* out, int n) {
    GUARD
    float x = f(a[i]), y = f(bb[i]), z = f(c[i]);
    s32 p = (s32)a[i], q = (s32)bb[i], w = (s32)c[i];
    out[4 * i + 0] = b(x > y ? z : y);
    out[4 * i + 1] = b((a[i] & 1u) ? x : z);
    out[4 * i + 2] = (u32)max(p + q, w);
    out[4 * i + 3] = (u32)min(p + 7, w);
}

// ================================================================================================ division
// IEEE division a / b (div.rn.ftz.f32): FCHK, MUFU.RCP, FFMA refinement, the slow-path subroutine
// (CALL.REL.NOINC: FSETP.*.FTZ, PLOP3.LUT, BREAK, MUFU.RSQ of a NaN, FFMA.FTZ); __fdividef (MUFU.RCP + FMUL.FTZ)
extern "C" __global__ void probe_fdiv(const u32* a, const u32* bb, u32* out, int n) {
    GUARD
    float x = f(a[i]), y = f(bb[i]);
    out[2 * i + 0] = b(x / y);
    out[2 * i + 1] = b(__fdividef(x, y));
}

// 1 / x and __frcp_rn (rcp.rn.ftz.f32): MUFU.RCP + FFMA refinement, a slow-path subroutine for extreme exponents
extern "C" __global__ void probe_frcp(const u32* a, u32* out, int n) {
    GUARD
    float x = f(a[i]);
    out[2 * i + 0] = b(1.0f / x);
    out[2 * i + 1] = b(__frcp_rn(x));
}

// ================================================================================================ half / packing
// cvt.f32.f16 (HADD2.F32 d, -RZ, x.H0_H0 / .H1_H1), cvt.rn.{f16x2,bf16x2}.f32 (F2FP.{F16,BF16}.F32.PACK_AB),
// cvt.rn.relu.{f16x2,bf16x2}.f32 (F2FP.RELU.*), cvt.rn.f16.f32 of one value (F2F.F16.F32)
extern "C" __global__ void probe_half(const u32* a, const u32* bb, u32* out, int n) {
    GUARD
    u32 x = a[i], y = bb[i];
    float lo, hi;
    u32 r0, r1, r2, r3;
    unsigned short h;
    asm("{\n\t.reg .f16 l, h;\n\tmov.b32 {l, h}, %2;\n\tcvt.f32.f16 %0, l;\n\tcvt.f32.f16 %1, h;\n\t}"
        : "=f"(lo), "=f"(hi) : "r"(x));
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r0) : "f"(f(x)), "f"(f(y)));
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r1) : "f"(f(x)), "f"(f(y)));
    asm("cvt.rn.relu.f16x2.f32 %0, %1, %2;" : "=r"(r2) : "f"(f(x)), "f"(f(y)));
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f(y)));
    asm("cvt.rn.relu.bf16x2.f32 %0, %1, %2;" : "=r"(r3) : "f"(f(y)), "f"(f(x)));
    out[7 * i + 0] = b(lo);
    out[7 * i + 1] = b(hi);
    out[7 * i + 2] = r0;
    out[7 * i + 3] = r1;
    out[7 * i + 4] = r2;
    out[7 * i + 5] = (u32)h;
    out[7 * i + 6] = r3;
}

// ================================================================================================ warp
// SHFL.IDX / .UP / .DOWN / .BFLY with full and partial widths (c = ((32 - width) << 8) | clamp), and the
// shfl's predicate output (shfl.sync ... d|p)
extern "C" __global__ void probe_shfl(const u32* a, const u32* s, u32* out, int n) {
    const int i = TID;
    u32 v = i < n ? a[i] : 0u;
    u32 k = i < n ? s[i] : 0u;
    u32 r[10];
    r[0] = __shfl_sync(0xffffffffu, v, (int)k);
    r[1] = __shfl_sync(0xffffffffu, v, (int)k, 8);
    r[2] = __shfl_xor_sync(0xffffffffu, v, (int)(k & 31));
    r[3] = __shfl_xor_sync(0xffffffffu, v, 5, 16);
    r[4] = __shfl_up_sync(0xffffffffu, v, k & 31);
    r[5] = __shfl_up_sync(0xffffffffu, v, 3, 4);
    r[6] = __shfl_down_sync(0xffffffffu, v, k & 31);
    r[7] = __shfl_down_sync(0xffffffffu, v, 1, 2);
    u32 d, pr;
    asm("{\n\t.reg .pred p;\n\tshfl.sync.down.b32 %0|p, %2, %3, 0x1f, 0xffffffff;\n\tselp.u32 %1, 1, 0, p;\n\t}"
        : "=r"(d), "=r"(pr) : "r"(v), "r"(k));
    r[8] = d;
    r[9] = pr;
    if (i < n) {
        for (int j = 0; j < 10; ++j) out[10 * i + j] = r[j];
    }
}

// VOTE.ANY R, PT, P (__ballot_sync) of per-lane predicates
extern "C" __global__ void probe_ballot(const u32* a, u32* out, int n) {
    const int i = TID;
    u32 v = i < n ? a[i] : 0u;
    u32 r0 = __ballot_sync(0xffffffffu, v & 1u);
    u32 r1 = __ballot_sync(0xffffffffu, (s32)v < 0);
    u32 r2 = __ballot_sync(0xffffffffu, (v & 0x30u) == 0x30u) != 0u;
    if (i < n) {
        out[3 * i + 0] = r0;
        out[3 * i + 1] = r1;
        out[3 * i + 2] = r2;
    }
}

// VOTE.ANY P, P / VOTE.ALL P, P (__any_sync, __all_sync: a predicate destination only)
extern "C" __global__ void probe_vote(const u32* a, u32* out, int n) {
    const int i = TID;
    u32 v = i < n ? a[i] : 0u;
    u32 r0 = __any_sync(0xffffffffu, (v & 0x30u) == 0x30u);
    u32 r1 = __all_sync(0xffffffffu, (v & 6u) != 0u);
    if (i < n) {
        out[2 * i + 0] = r0;
        out[2 * i + 1] = r1;
    }
}

// ================================================================================================ atomics
// global atomics with per-element addresses (order-independent), old values returned:
// ATOMG.E.{ADD,EXCH,CAS,MAX.S32,MIN,ADD.64}.STRONG.GPU, REDG.E.ADD.F32.FTZ.RN.STRONG.GPU
extern "C" __global__ void probe_atomic_elem(const u32* a, const u32* bb, u32* slots, u32* fslots, u64* wslots,
                                             u32* out, int n) {
    GUARD
    u32 x = a[i], y = bb[i];
    out[6 * i + 0] = atomicAdd(&slots[6 * i + 0], x);
    out[6 * i + 1] = atomicExch(&slots[6 * i + 1], x);
    out[6 * i + 2] = atomicCAS(&slots[6 * i + 2], y, x);
    out[6 * i + 3] = (u32)atomicMax((s32*)&slots[6 * i + 3], (s32)x);
    out[6 * i + 4] = atomicMin(&slots[6 * i + 4], x);
    out[6 * i + 5] = (u32)(atomicAdd(&wslots[i], ((u64)y << 32) | x) >> 16);
    atomicAdd((float*)&fslots[i], f(x));
}

// global atomics into data-dependent bins (lanes of one instruction collide; every result is
// order-independent): REDG.E.{ADD,MAX,MIN.S32,OR,AND,XOR,ADD.64}.STRONG.GPU (atomicInc by all ones is an
// ADD), and an exact float sum of small integers (REDG.E.ADD.F32.FTZ.RN)
extern "C" __global__ void probe_atomic_bins(const u32* a, u32* acc, u64* acc64, int n) {
    GUARD
    u32 x = a[i];
    u32* c = acc + 8 * (x & 15u);
    atomicAdd(&c[0], x);
    atomicMax(&c[1], x);
    atomicMin((s32*)&c[2], (s32)x);
    atomicOr(&c[3], x);
    atomicAnd(&c[4], x | 0x00010000u);
    atomicXor(&c[5], x);
    atomicAdd((float*)&c[6], (float)(s32)((x >> 8) & 0xFFu) - 100.0f);
    atomicInc(&c[7], 0xFFFFFFFFu);
    atomicAdd(&acc64[(x >> 4) & 7u], (u64)x * 0x10001ull);
}

// the same reductions into one counter per block: ptxas first reduces the warp (REDUX.{SUM,MAX,MIN.S32,XOR},
// VOTEU.ANY, UFLO.U32) and the lowest lane performs the atomic (@P0 REDG)
extern "C" __global__ void probe_atomic_block(const u32* a, u32* acc, int n) {
    GUARD
    u32 x = a[i];
    u32* c = acc + 4 * blockIdx.x;
    atomicAdd(&c[0], x);
    atomicMax(&c[1], x);
    atomicMin((s32*)&c[2], (s32)x);
    atomicXor(&c[3], x);
}

// shared-memory atomics: ATOMS.ADD / .EXCH / .CAS on per-thread slots (old values returned), ATOMS .ADD /
// .MAX.S32 / .MIN / .OR into data-dependent shared bins
extern "C" __global__ void probe_atomic_shared(const u32* a, const u32* bb, u32* out, u32* acc, int n) {
    __shared__ u32 slot[128 * 3];
    __shared__ u32 cnt[4 * 8];
    const int i = TID;
    const int t = threadIdx.x;
    if (t < 32) cnt[t] = (t & 3) == 2 ? 0xFFFFFFFFu : 0u;
    slot[3 * t + 0] = 1000u + t;
    slot[3 * t + 1] = 0x55555555u;
    slot[3 * t + 2] = 7u * t;
    __syncthreads();
    if (i < n) {
        u32 x = a[i], y = bb[i];
        u32* c = cnt + 4 * (y & 7u);
        out[3 * i + 0] = atomicAdd(&slot[3 * t + 0], x);
        out[3 * i + 1] = atomicExch(&slot[3 * t + 1], y);
        out[3 * i + 2] = atomicCAS(&slot[3 * t + 2], (y & 7u) ? 7u * t : y, x);
        atomicAdd(&c[0], x);
        atomicMax((s32*)&c[1], (s32)x);
        atomicMin(&c[2], x ^ y);
        atomicOr(&c[3], x ^ y);
    }
    __syncthreads();
    if (i < n) {
        out[3 * i + 0] += slot[3 * t + 0];
        out[3 * i + 1] ^= slot[3 * t + 1];
        out[3 * i + 2] += slot[3 * t + 2] * 3u;
    }
    if (t < 32) acc[32 * blockIdx.x + t] = cnt[t];
}

// ================================================================================================ memory widths
// LDG/STG .U8 .S8 .U16 .S16 .64 .128, LDS/STS of the same widths, LDL/STL (a dynamically indexed local
// array), LDC with a register index (a __constant__ table)
__constant__ u32 probe_table[16] = {0x00000000u, 0x11111111u, 0x22222222u, 0x33333333u, 0x44444444u, 0x55555555u,
                                    0x66666666u, 0x77777777u, 0x88888888u, 0x99999999u, 0xAAAAAAAAu, 0xBBBBBBBBu,
                                    0xCCCCCCCCu, 0xDDDDDDDDu, 0xEEEEEEEEu, 0xFFFFFFFFu};

extern "C" __global__ void probe_mem_widths(const u8* a8, const u16* a16, const uint4* a128, u8* o8, u16* o16,
                                            uint4* o128, u32* out, int n) {
    __shared__ uint4 sh[128 + 8];  // 128 vectors, then 128 bytes
    u8* shb = (u8*)(sh + 128);
    const int i = TID;
    const int t = threadIdx.x;
    u32 v8 = 0, v16 = 0;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (i < n) {
        v8 = a8[i];
        v16 = a16[i];
        v = a128[i];
        o8[i] = (u8)(v8 + 1u);
        o16[i] = (u16)(v16 * 3u);
        out[8 * i + 0] = (u32)(s32)((const signed char*)a8)[i];
        out[8 * i + 1] = (u32)(s32)((const short*)a16)[i];
    }
    sh[t] = v;
    shb[t] = (u8)v8;
    __syncthreads();
    uint4 w = sh[(t + 1) & 127];
    u64 d = ((const u64*)sh)[(t * 3) & 255];
    u32 sb = (u32)(s32)((const signed char*)shb)[(t + 5) & 127];
    u32 sh16 = (u32)(s32)((const short*)sh)[(t * 7) & 1023];
    u32 loc[16];
#pragma unroll 1
    for (int j = 0; j < 16; ++j) loc[j] = v.x * (j + 1) + v.y;
    u32 li = v.z & 15u;
    loc[li] ^= v.w;
    loc[(v.w >> 8) & 15u] += v.z;
    if (i < n) {
        o128[i] = make_uint4(w.w, w.z, w.y, w.x);
        out[8 * i + 2] = (u32)d;
        out[8 * i + 3] = (u32)(d >> 32);
        out[8 * i + 4] = sb;
        out[8 * i + 5] = sh16;
        out[8 * i + 6] = loc[(v.w >> 3) & 15u] + loc[li];
        out[8 * i + 7] = probe_table[v.x & 15u] ^ probe_table[(v.y >> 4) & 15u];
    }
}

// predicates saved in a register across a barrier and a select chain: P2R d, PR, RZ, mask (restored by
// ISETP.NE on the register)
extern "C" __global__ void probe_p2r(const uint4* a, u32* out, int n) {
    __shared__ uint4 sh[128];
    const int i = TID;
    const int t = threadIdx.x;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (i < n) v = a[i];
    sh[t] = v;
    __syncthreads();
    uint4 w = sh[(t + 1) & 127];
    u32 loc[8];
    for (int j = 0; j < 8; ++j) loc[j] = v.x * (j + 1) + v.y;
    u32 li = v.z & 7u;
    loc[li] ^= w.w;
    if (i < n) {
        out[2 * i + 0] = loc[(v.w >> 3) & 7u] + loc[li];
        out[2 * i + 1] = w.x ^ w.y;
    }
}

// ================================================================================================ uniform
// Computations on kernel parameters and blockIdx only. ptxas keeps warp-uniform values in uniform
// registers when vector registers are scarce, so each thread first loads NV values of its own and keeps
// them live (__maxnreg__ caps the vector registers); each output is v[j] + k[j % K] * (j + 1).
#define NV 32

// S2UR, UIMAD, UIADD3, ULOP3.LUT (also predicated), USHF.L.W.U32, USHF.R.W.U32.HI / USHF.R.W.S32.HI (amounts
// masked with 31), USHF.R.{U32,S32}.HI, ULEA.HI (signed / 8), UISETP.{LT,GE}[.U32].AND, USEL, UFLO.U32 (__clz),
// UFLO.U32.SH of UBREV (__ffs), UPRMT (__byte_perm after ULOP3 & 0x7777), UIMAD.WIDE.U32 (__umulhi)
extern "C" __global__ void __maxnreg__(40) probe_uniform(const u32* in, u32* out, u32 p, u32 q, u32 r, u32 s) {
    const u32 bx = blockIdx.x, t = threadIdx.x;
    const u32* src = in + (bx * blockDim.x + t) * NV;
    u32 v[NV];
#pragma unroll
    for (int j = 0; j < NV; ++j) v[j] = src[j];
    u32 x = p * bx + q;
    u32 k[16];
    k[0] = x;
    k[1] = (r << (s & 31)) ^ (x >> 3);
    k[2] = x < k[1] ? x + r : k[1] - s;
    k[3] = (bx & 1) ? (p & ~q) | r : p ^ q ^ r;
    k[4] = min(x, s) + max((s32)k[1], (s32)r);
    k[5] = __umulhi(p, bx + s) + bx * 12u;
    k[6] = __popc(x ^ r);
    k[7] = __clz(p + bx);
    k[8] = __brev(q ^ bx);
    k[9] = __byte_perm(p, q, r + bx);
    k[10] = x + (r << 3);
    k[11] = (u32)((s32)(s ^ bx) >> (p & 31));
    k[12] = (p + bx) >> (q & 31);
    k[13] = (u32)min((s32)(p + bx), (s32)q) ^ max(r, s + bx);
    k[14] = (u32)((s32)(q - bx) / 8);
    k[15] = __ffs(r ^ bx);
    u32* dst = out + (bx * blockDim.x + t) * NV;
#pragma unroll
    for (int j = 0; j < NV; ++j) dst[j] = v[j] + k[j % 16] * (j + 1);
}

// 64-bit uniform arithmetic: UIADD3 with a carry out, UIADD3.X, UIMAD.WIDE.U32 + UIMAD, USHF.L.U32 /
// USHF.L.U64.HI, USHF.R.U64, USHF.R.S64, UISETP.{LT,GT,NE}[.U32].AND.EX (64-bit compares), USEL
extern "C" __global__ void __maxnreg__(40) probe_uniform64(const u32* in, u32* out, u64 p, u64 q, u32 r, u32 s) {
    const u32 bx = blockIdx.x, t = threadIdx.x;
    const u32* src = in + (bx * blockDim.x + t) * NV;
    u32 v[NV];
#pragma unroll
    for (int j = 0; j < NV; ++j) v[j] = src[j];
    u64 x = p + (u64)bx * q;
    u64 y = q - ((u64)bx << (r & 63));
    u64 k[8];
    k[0] = x;
    k[1] = y;
    k[2] = (s64)x < (s64)y ? x : y;
    k[3] = x > y ? x - y : y - x;
    k[4] = (u64)r * (u64)(s + bx) + x;
    k[5] = x >> (s & 63);
    k[6] = (u64)((s64)y >> ((s >> 8) & 63));
    k[7] = x == y ? p : q ^ x;
    u32* dst = out + (bx * blockDim.x + t) * NV;
#pragma unroll
    for (int j = 0; j < NV; ++j) dst[j] = v[j] + (u32)(k[j % 8] >> ((j & 8) ? 32 : 0)) * (j + 1);
}
