// Probes of double precision (the SASS D* family and the conversions with an f64 side): add, subtract,
// multiply and fma in the four rounding modes (DADD, DMUL, DFMA .RZ/.RM/.RP), compares and their predicate
// combinations (DSETP), min/max (DSETP.MIN/.MAX), conversions to and from f32 (F2F.F32.F64, F2F.F64.F32)
// and the integers (F2I.*.F64, I2F.F64.*), rounding to integral values (FRND.F64), immediates, kernel
// parameters, bit casts, and the NaNs each one makes. gpu/double_probes.py holds the table (inputs, the
// forms each kernel must contain, references) and builds this file as gpu/form_probes.py builds its own:
// NVRTC 13.0, NVRTC's PTX through ptxas 13.0, and through Triton's ptxas 12.8.
// Conventions as gpu/kernels/sass_probes.cu: (inputs..., outputs..., params..., int n), thread i < n handles
// element i; doubles cross as their bit patterns (u64). C code is compiled with cupy's -ftz=true (which
// only touches f32 arithmetic); inline PTX forms carry no .ftz unless named.

typedef unsigned int u32;
typedef unsigned long long u64;

#define TID ((int)(blockIdx.x * blockDim.x + threadIdx.x))
#define GUARD        \
    const int i = TID; \
    if (i >= n) return;
#define D(x) __longlong_as_double((long long)(x))
#define B(x) ((u64)__double_as_longlong(x))

// one PTX instruction on .f64 registers moved from and to u64 bit patterns
#define PTX2(r, op, x, y)                                                                          \
    asm("{ .reg .f64 t, u, v; mov.b64 t, %1; mov.b64 u, %2; " op " v, t, u; mov.b64 %0, v; }"   \
        : "=l"(r) : "l"(x), "l"(y))
#define PTX1(r, op, x) asm("{ .reg .f64 t, v; mov.b64 t, %1; " op " v, t; mov.b64 %0, v; }" : "=l"(r) : "l"(x))
#define PTX3(r, op, x, y, z)                                                                       \
    asm("{ .reg .f64 t, u, w, v; mov.b64 t, %1; mov.b64 u, %2; mov.b64 w, %3; " op " v, t, u, w; " \
        "mov.b64 %0, v; }" : "=l"(r) : "l"(x), "l"(y), "l"(z))

// x + y and x - y in every mode, negation, fabs, an immediate and a kernel parameter:
// DADD, DADD.RZ, DADD.RM, DADD.RP, DADD with -RZ, |a|, -|a|, an immediate and a constant operand
extern "C" __global__ void probe_dadd(const u64* a, const u64* b, u64* out, double p, int n) {
    GUARD
    const double x = D(a[i]), y = D(b[i]);
    u64* o = out + 16 * i;
    o[0] = B(x + y);
    o[1] = B(x - y);
    o[2] = B(__dadd_rz(x, y));
    o[3] = B(__dadd_rd(x, y));
    o[4] = B(__dadd_ru(x, y));
    o[5] = B(__dsub_rz(x, y));
    o[6] = B(__dsub_rd(x, y));
    o[7] = B(__dsub_ru(x, y));
    o[8] = B(-x);
    o[9] = B(fabs(x));
    o[10] = B(-fabs(y));
    o[11] = B(x + 1.5);
    o[12] = B(x + p);
    o[13] = B(fabs(x) - y);
    o[14] = B(__dadd_rn(x, y));
    o[15] = B(__dadd_rz(x, -0.75));
}

// x * y in every mode, with negated operands, an immediate, a constant from a uniform register pair and
// a kernel parameter: DMUL, DMUL.RZ, DMUL.RM, DMUL.RP
extern "C" __global__ void probe_dmul(const u64* a, const u64* b, u64* out, double p, int n) {
    GUARD
    const double x = D(a[i]), y = D(b[i]);
    u64* o = out + 12 * i;
    o[0] = B(x * y);
    o[1] = B(__dmul_rz(x, y));
    o[2] = B(__dmul_rd(x, y));
    o[3] = B(__dmul_ru(x, y));
    o[4] = B(-x * y);
    o[5] = B(x * 3.0);
    o[6] = B(fabs(x) * 0.1);
    o[7] = B(x * p);
    o[8] = B(__dmul_rn(x, y));
    o[9] = B(__dmul_rd(-x, fabs(y)));
    o[10] = B(x * 18014398509481984.0);  // 2^54
    o[11] = B(__dmul_ru(x, 2.2250738585072014e-308));  // the smallest normal
}

// fma in every mode, with negated operands and immediates: DFMA, DFMA.RZ, DFMA.RM, DFMA.RP
extern "C" __global__ void probe_dfma(const u64* a, const u64* b, const u64* c, u64* out, double p, int n) {
    GUARD
    const double x = D(a[i]), y = D(b[i]), z = D(c[i]);
    u64* o = out + 10 * i;
    o[0] = B(fma(x, y, z));
    o[1] = B(__fma_rn(x, y, z));
    o[2] = B(__fma_rz(x, y, z));
    o[3] = B(__fma_rd(x, y, z));
    o[4] = B(__fma_ru(x, y, z));
    o[5] = B(fma(-x, y, z));
    o[6] = B(fma(x, y, -z));
    o[7] = B(fma(x, -y, 1.0));
    o[8] = B(fma(x, p, z));
    o[9] = B(__fma_rz(x, y, 0.5));
}

// every compare of C and of setp.f64 with and / or / xor combinations (a negated predicate input too),
// against a register, immediates, zero (RZ) and a parameter, as two 32-bit masks:
// DSETP.{LT,EQ,LE,GT,NE,GE,LTU,EQU,LEU,GTU,NEU,GEU,NUM,NAN}.{AND,OR,XOR}
#define SETP(k, op)                                                                                \
    asm("{ .reg .pred q; .reg .f64 t, u; mov.b64 t, %1; mov.b64 u, %2; setp." op ".f64 q, t, u; "  \
        "selp.u32 %0, 1, 0, q; }" : "=r"(r[k]) : "l"(xb), "l"(yb))
#define SETPI(k, op, imm)                                                                          \
    asm("{ .reg .pred q; .reg .f64 t; mov.b64 t, %1; setp." op ".f64 q, t, " imm "; "               \
        "selp.u32 %0, 1, 0, q; }" : "=r"(r[k]) : "l"(xb))
#define SETPB(k, op, bop, s)                                                                       \
    asm("{ .reg .pred q, s; .reg .f64 t, u, w; mov.b64 t, %1; mov.b64 u, %2; mov.b64 w, %3; "      \
        "setp.lt.f64 s, t, w; setp." op "." bop ".f64 q, t, u, " s "; selp.u32 %0, 1, 0, q; }"     \
        : "=r"(r[k]) : "l"(xb), "l"(yb), "l"(zb))
extern "C" __global__ void probe_dsetp(const u64* a, const u64* b, const u64* c, u32* out, double p, int n) {
    GUARD
    const u64 xb = a[i], yb = b[i], zb = c[i];
    const double x = D(xb), y = D(yb);
    u32 r[64];
    r[0] = x == y;
    r[1] = x != y;
    r[2] = x < y;
    r[3] = x <= y;
    r[4] = x > y;
    r[5] = x >= y;
    r[6] = isnan(x);
    r[7] = !(x < y);
    r[8] = !(x >= y);
    r[9] = isinf(y);
    r[10] = x < 1.0;
    r[11] = x == 0.0;
    r[12] = x >= p;
    r[13] = fabs(x) > 4.0;
    SETP(14, "lt");
    SETP(15, "eq");
    SETP(16, "le");
    SETP(17, "gt");
    SETP(18, "ne");
    SETP(19, "ge");
    SETP(20, "ltu");
    SETP(21, "equ");
    SETP(22, "leu");
    SETP(23, "gtu");
    SETP(24, "neu");
    SETP(25, "geu");
    SETP(26, "num");
    SETP(27, "nan");
    SETPI(28, "lt", "0d3FF0000000000000");
    SETPI(29, "le", "0d4000000000000000");
    SETPI(30, "ltu", "0d3FF8000000000000");
    SETPI(31, "leu", "0dC000000000000000");
    SETPI(32, "equ", "0d0000000000000000");
    SETPI(33, "num", "0d3FF0000000000000");
    SETPI(34, "gt", "0d7FF0000000000000");
    SETPI(35, "eq", "0dFFF0000000000000");
    SETPB(36, "eq", "and", "s");
    SETPB(37, "ne", "or", "s");
    SETPB(38, "gtu", "xor", "s");
    SETPB(39, "nan", "or", "s");
    SETPB(40, "lt", "and", "s");
    SETPB(41, "le", "xor", "s");
    SETPB(42, "ltu", "or", "s");
    SETPB(43, "leu", "and", "s");
    SETPB(44, "equ", "xor", "s");
    SETPB(45, "num", "or", "s");
    SETPB(46, "lt", "and", "!s");
    SETPB(47, "le", "or", "!s");
    SETPB(48, "equ", "and", "!s");
    SETPB(49, "num", "xor", "!s");
    SETPB(50, "geu", "or", "!s");
    SETPB(51, "nan", "and", "!s");
    SETPB(52, "gt", "xor", "!s");
    SETPB(53, "neu", "and", "!s");
    for (int j = 54; j < 64; j++) r[j] = 0;
    u32 m0 = 0, m1 = 0;
    for (int j = 0; j < 32; j++) {
        m0 |= (r[j] & 1u) << j;
        m1 |= (r[32 + j] & 1u) << j;
    }
    out[2 * i] = m0;
    out[2 * i + 1] = m1;
}

// fmin / fmax of C and min.f64 / max.f64 of PTX (DSETP.MIN, DSETP.MAX and ptxas's selects), a select by a
// compare (FSEL of the two halves), copysign and a value through memory unchanged
extern "C" __global__ void probe_dminmax(const u64* a, const u64* b, u64* out, int n) {
    GUARD
    const u64 xb = a[i], yb = b[i];
    const double x = D(xb), y = D(yb);
    u64* o = out + 8 * i;
    o[0] = B(fmin(x, y));
    o[1] = B(fmax(x, y));
    PTX2(o[2], "min.f64", xb, yb);
    PTX2(o[3], "max.f64", xb, yb);
    o[4] = B(x < y ? x : y);
    o[5] = B(copysign(x, y));
    o[6] = B(fmax(fabs(x), -y));
    o[7] = xb;
}

// to f32 in every mode: C's __double2float_r* (cvt.r*.ftz.f32.f64: F2F.F32.F64 with ptxas's flush) and
// inline cvt.r*.f32.f64 (F2F.F32.F64 alone), and back: (double)f (cvt.ftz.f64.f32: FMUL.FTZ then
// F2F.F64.F32) and inline cvt.f64.f32
#define CVT32(k, op)                                                                               \
    asm("{ .reg .f64 t; .reg .f32 f; mov.b64 t, %1; " op " f, t; mov.b32 %0, f; }" : "=r"(r[k]) : "l"(xb))
extern "C" __global__ void probe_d2f(const u64* a, const u32* fb, u64* out, int n) {
    GUARD
    const u64 xb = a[i];
    const double x = D(xb);
    const float f = __uint_as_float(fb[i]);
    u32 r[8];
    r[0] = __float_as_uint(__double2float_rn(x));
    r[1] = __float_as_uint(__double2float_rz(x));
    r[2] = __float_as_uint(__double2float_rd(x));
    r[3] = __float_as_uint(__double2float_ru(x));
    CVT32(4, "cvt.rn.f32.f64");
    CVT32(5, "cvt.rz.f32.f64");
    CVT32(6, "cvt.rm.f32.f64");
    CVT32(7, "cvt.rp.f32.f64");
    u64* o = out + 10 * i;
    for (int j = 0; j < 8; j++) o[j] = r[j];
    o[8] = B((double)f);
    u64 w;
    asm("{ .reg .f64 t; .reg .f32 g; mov.b32 g, %1; cvt.f64.f32 t, g; mov.b64 %0, t; }" : "=l"(w) : "r"(fb[i]));
    o[9] = w;
}

// to the integers in every rounding mode, saturating: F2I.F64 (s32), F2I.U32.F64, F2I.S64.F64, F2I.U64.F64,
// each .TRUNC, .FLOOR, .CEIL and round-to-nearest-even
extern "C" __global__ void probe_d2i(const u64* a, u64* out, int n) {
    GUARD
    const double x = D(a[i]);
    u64* o = out + 20 * i;
    o[0] = (u32)__double2int_rn(x);
    o[1] = (u32)__double2int_rz(x);
    o[2] = (u32)__double2int_rd(x);
    o[3] = (u32)__double2int_ru(x);
    o[4] = __double2uint_rn(x);
    o[5] = __double2uint_rz(x);
    o[6] = __double2uint_rd(x);
    o[7] = __double2uint_ru(x);
    o[8] = (u64)__double2ll_rn(x);
    o[9] = (u64)__double2ll_rz(x);
    o[10] = (u64)__double2ll_rd(x);
    o[11] = (u64)__double2ll_ru(x);
    o[12] = __double2ull_rn(x);
    o[13] = __double2ull_rz(x);
    o[14] = __double2ull_rd(x);
    o[15] = __double2ull_ru(x);
    o[16] = (u32)__double2int_rz(-x);
    o[17] = (u32)__double2hiint(x);
    o[18] = (u32)__double2loint(x);
    o[19] = (u64)__double2ll_rz(fabs(x));
}

// from the integers in every rounding mode: I2F.F64 (s32), I2F.F64.U32, I2F.F64.S64 / .U64 and their .RZ,
// .RM, .RP, I2F.F64.S16 / .U16; an s32 and a u32 from the low word of the input
extern "C" __global__ void probe_i2d(const u64* a, u64* out, int n) {
    GUARD
    const u64 v = a[i];
    const long long s = (long long)v;
    const int s32 = (int)(u32)v;
    const u32 u32v = (u32)v;
    u64* o = out + 16 * i;
    o[0] = B(__int2double_rn(s32));
    o[1] = B(__uint2double_rn(u32v));
    o[2] = B(__ll2double_rn(s));
    o[3] = B(__ll2double_rz(s));
    o[4] = B(__ll2double_rd(s));
    o[5] = B(__ll2double_ru(s));
    o[6] = B(__ull2double_rn(v));
    o[7] = B(__ull2double_rz(v));
    o[8] = B(__ull2double_rd(v));
    o[9] = B(__ull2double_ru(v));
    o[10] = B((double)s);
    o[11] = B((double)v);
    o[12] = B((double)(short)s32);
    o[13] = B((double)(unsigned short)u32v);
    o[14] = B((double)(signed char)s32);
    o[15] = B(__hiloint2double((int)(v >> 32), s32));
}

// rounding to integral values: trunc, floor, ceil, rint, nearbyint, round (half away from zero: an
// add in .RZ and FRND.F64.TRUNC) and inline cvt.r*i.f64.f64: FRND.F64, FRND.F64.TRUNC, .FLOOR, .CEIL
extern "C" __global__ void probe_drnd(const u64* a, u64* out, int n) {
    GUARD
    const u64 xb = a[i];
    const double x = D(xb);
    u64* o = out + 10 * i;
    o[0] = B(trunc(x));
    o[1] = B(floor(x));
    o[2] = B(ceil(x));
    o[3] = B(rint(x));
    o[4] = B(nearbyint(x));
    o[5] = B(round(x));
    PTX1(o[6], "cvt.rni.f64.f64", xb);
    PTX1(o[7], "cvt.rzi.f64.f64", xb);
    PTX1(o[8], "cvt.rmi.f64.f64", xb);
    PTX1(o[9], "cvt.rpi.f64.f64", xb);
}

// the NaNs of every double instruction, with NaN-heavy inputs (quiet and signalling NaNs of both signs and
// many payloads, infinities, zeros): which NaN each returns is the hardware's (gpu/double_probes.py's census
// checks the candidate rules against it)
extern "C" __global__ void probe_dnan(const u64* a, const u64* b, const u64* c, u64* out, int n) {
    GUARD
    const u64 xb = a[i], yb = b[i], zb = c[i];
    u64* o = out + 16 * i;
    PTX2(o[0], "add.rn.f64", xb, yb);
    PTX2(o[1], "add.rz.f64", xb, yb);
    PTX2(o[2], "sub.rn.f64", xb, yb);
    PTX2(o[3], "mul.rn.f64", xb, yb);
    PTX2(o[4], "mul.rp.f64", xb, yb);
    PTX3(o[5], "fma.rn.f64", xb, yb, zb);
    PTX3(o[6], "fma.rm.f64", xb, yb, zb);
    PTX1(o[7], "neg.f64", xb);
    PTX1(o[8], "abs.f64", xb);
    PTX1(o[9], "cvt.rni.f64.f64", xb);
    PTX1(o[10], "cvt.rzi.f64.f64", xb);
    u64 w;
    asm("{ .reg .f64 t; .reg .f32 g; mov.b32 g, %1; cvt.f64.f32 t, g; mov.b64 %0, t; }" : "=l"(w) : "r"((u32)xb));
    o[11] = w;
    u32 f;
    asm("{ .reg .f64 t; .reg .f32 g; mov.b64 t, %1; cvt.rn.f32.f64 g, t; mov.b32 %0, g; }" : "=r"(f) : "l"(xb));
    o[12] = f;
    PTX2(o[13], "min.f64", xb, yb);
    PTX2(o[14], "max.f64", xb, yb);
    o[15] = B(D(xb) + D(yb));
}

// double division and square roots, built on MUFU.RCP64H / MUFU.RSQ64H (not modelled until measured:
// gpu/validate_sfu64.py sweeps them): a / b, __ddiv_rz, __drcp_rn, rcp.approx.ftz.f64
extern "C" __global__ void probe_ddiv(const u64* a, const u64* b, u64* out, int n) {
    GUARD
    const u64 xb = a[i];
    const double x = D(xb), y = D(b[i]);
    u64* o = out + 4 * i;
    o[0] = B(x / y);
    o[1] = B(__ddiv_rz(x, y));
    o[2] = B(__drcp_rn(y));
    PTX1(o[3], "rcp.approx.ftz.f64", xb);
}

// sqrt, __dsqrt_ru, rsqrt (approximate) and rsqrt.approx.ftz.f64: MUFU.RSQ64H
extern "C" __global__ void probe_dsqrt(const u64* a, u64* out, int n) {
    GUARD
    const u64 xb = a[i];
    const double x = D(xb);
    u64* o = out + 4 * i;
    o[0] = B(sqrt(x));
    o[1] = B(__dsqrt_ru(x));
    o[2] = B(rsqrt(x));
    PTX1(o[3], "rsqrt.approx.ftz.f64", xb);
}
