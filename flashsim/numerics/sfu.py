"""The special-function unit (MUFU) of sm_90 and the PTX approx instructions built on it, on f32 bit patterns.

No public bit-exact description of MUFU exists; these models are tables read off the GPU plus the
structural laws that carry one binade to every input, each law checked on all 2^32 inputs
(``python -m flashsim.gpu.validate_sfu``; report in traces/numerics/sfu_report.json):

- MUFU.RCP: rcp(+-2^e * 1.m) = +-2^-e * R[m] exactly (R: the 2^23 outputs on [1, 2)); zero and
  subnormal inputs give +-Inf, Inf gives +-0, NaN gives 0x7FFFFFFF; results below 2^-126 flush to 0.
- MUFU.EX2: x >= 0 is read as fixed point with 23 fraction bits (truncated), n.f, and gives
  2^n * P[f]; x < 0 is read the same way in sign-magnitude, |x| = n.f, and gives 2^-n * N[f], where P
  and N are the outputs on [1, 2) and (-2, -1] (the negative side is *not* the reciprocal or the
  two's-complement reading of P: the device shows a separate datapath). Results below 2^-126 flush.
- MUFU.LG2: lg2(2^e * 1.m) = RZ(e + L'[m]) where L' is the unit's internal value of log2(1.m);
  the outputs on [1, 2) and [0.5, 1) pin down exactly what every other binade needs of L'.
- MUFU.TANH: odd; the identity below 2^-8 (subnormal inputs included: unlike the other MUFU
  operations it does not flush them); +-1 from 8 on; in between, the output depends only on
  the top p(e) bits of the significand in binade e (p = 17..21): a table of block outputs.
- MUFU.EX2.F16 / .BF16 (ex2.approx.f16x2, ex2.approx.ftz.bf16x2): tables of all 65,536 inputs.
- MUFU.SIN / MUFU.COS (the input in turns: sin.approx.f32 is FMUL.RZ x, 1/2pi, then the MUFU): the unit reads
  k = trunc(frac(|x|) * 2^25), the fraction of a turn as 25-bit fixed point (truncated; subnormals and
  |x| < 2^-25 give k = 0, every |x| >= 2^23 is a whole number of turns); sin = sign(x) * G(k) and
  cos = G(k + 2^23 mod 2^25), where G(k + 2^24) = -G(k) and G on [0, 2^24) is a table of the unit's outputs
  (the law and the table checked on all 2^32 inputs of both, ``python -m flashsim.gpu.sfu_trig --table``);
  +-Inf and NaN give 0x7FFFFFFF. The outputs on k * 2^-25 are not mirror-symmetric within a half turn.
- MUFU.RSQ / MUFU.SQRT: rsq(2^(2k+j) * 1.m) = 2^-k * Q_j[m] and sqrt(2^(2k+j) * 1.m) = 2^k * S_j[m]
  exactly, j = 0 or 1 (Q_j, S_j: the outputs on [1, 2) and [2, 4)); zero and subnormal inputs read as
  zeros of their sign (rsq: +-Inf, sqrt: +-0), negative inputs and -Inf give NaN, +Inf gives +0 / +Inf.

The non-ftz PTX forms are short SASS sequences around MUFU (read with cuobjdump -sass, CUDA 13.0,
sm_90) and are modelled instruction by instruction with the exact FMUL/FADD of ``fp32``.
Tables live in ``flashsim/data/sfu_tables.npz`` (delta-encoded, loaded on first use).
"""

from __future__ import annotations

import functools
from importlib import resources

import numba
import numpy as np

from flashsim.errors import TraceError, bad_argument
from flashsim.numerics import fp32
from flashsim.numerics.formats import BF16, F16, F32, as_bits

_NAN = np.uint32(0x7FFFFFFF)
_SIGN = np.uint32(0x80000000)
_INF = np.uint32(0x7F800000)
_MANT = np.uint32(0x7FFFFF)
TABLE_FILE = "data/sfu_tables.npz"

# MUFU.TANH: binades (exponent of |x|) with a table, and how many top significand bits select a block
TANH_BINADES = tuple(range(-8, 3))


# ---- table codec: delta encoding so smooth tables compress ------------------------------------------

def encode_table(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Delta-encode an integer table: (first value as int64[1], steps in the narrowest signed dtype)."""
    v = np.asarray(values).astype(np.int64)
    steps = np.diff(v)
    for dt in (np.int8, np.int16, np.int32, np.int64):
        if steps.size == 0 or (steps.min() >= np.iinfo(dt).min and steps.max() <= np.iinfo(dt).max):
            return v[:1].copy(), steps.astype(dt)
    raise AssertionError("unreachable: int64 holds every step")


def decode_table(first: np.ndarray, steps: np.ndarray, dtype) -> np.ndarray:
    """Inverse of encode_table."""
    return np.concatenate([first.astype(np.int64), first[0] + np.cumsum(steps.astype(np.int64))]).astype(dtype)


def table_arrays(named: dict) -> dict:
    """npz-ready arrays for a dict of name -> integer table (keys carry the name and dtype)."""
    out = {}
    for name, values in named.items():
        first, steps = encode_table(values)
        out[f"{name}:{np.asarray(values).dtype.name}:first"] = first
        out[f"{name}:{np.asarray(values).dtype.name}:steps"] = steps
    return out


@functools.lru_cache(maxsize=1)
def tables() -> dict:
    """The MUFU tables recorded on the GPU (TraceError if the package data is missing or damaged)."""
    try:
        raw = resources.files("flashsim").joinpath(TABLE_FILE).read_bytes()
    except FileNotFoundError:
        raise TraceError(f"flashsim/{TABLE_FILE} is missing: record it with python -m flashsim.gpu.validate_sfu --record") from None
    import io

    try:
        with np.load(io.BytesIO(raw), allow_pickle=False) as z:
            out = {}
            for k in z.files:
                name, dtype, part = k.rsplit(":", 2)
                if part == "first":
                    out[name] = decode_table(z[k], z[f"{name}:{dtype}:steps"], np.dtype(dtype))
    except (ValueError, OSError, KeyError) as e:
        raise TraceError(f"flashsim/{TABLE_FILE}: damaged ({e})") from e
    for arr in out.values():
        arr.flags.writeable = False
    return out


def _f64(bits):
    with np.errstate(invalid="ignore"):
        return bits.view(np.float32).astype(np.float64)


def _pack(values: np.ndarray, sign=None) -> np.ndarray:
    """float64 values that are exact f32 values (or beyond range) -> f32 bits with MUFU's flush to zero."""
    with np.errstate(over="ignore"):
        out = values.astype(np.float32).view(np.uint32)
    out = np.where(np.abs(values) < 2.0**-126, np.uint32(0), out)  # MUFU flushes subnormal results
    if sign is not None:
        out = out | sign
    return out.astype(np.uint32)


# ---- the MUFU operations ----------------------------------------------------------------------------

def mufu_rcp(x) -> np.ndarray:
    """MUFU.RCP (= rcp.approx.ftz.f32)."""
    x = as_bits(x, F32, "x")
    t = tables()
    ef = (x >> 23) & 0xFF
    sign = x & _SIGN
    r = _f64(t["rcp"][x & _MANT]) * np.exp2(127.0 - ef.astype(np.float64))
    out = _pack(r, sign)
    out = np.where(ef == 0, _INF | sign, out)                          # 0 and subnormals (flushed) -> +-Inf
    out = np.where(ef == 0xFF, np.where((x & _MANT) == 0, sign, _NAN), out)  # Inf -> +-0, NaN -> NaN
    return out.astype(np.uint32)


def _root(x, table_even: str, table_odd: str, direction: float):
    """The shared law of MUFU.RSQ (direction -1) and MUFU.SQRT (+1): the binade parity picks a table, the
    exponent halves exactly."""
    x = as_bits(x, F32, "x")
    t = tables()
    ef = ((x >> 23) & 0xFF).astype(np.int64)
    e = ef - 127
    odd = (e & 1).astype(bool)
    k = (e - odd) // 2
    m = x & _MANT
    base = np.where(odd, _f64(t[table_odd][m]), _f64(t[table_even][m]))
    return x, ef, base * np.exp2(direction * k.astype(np.float64))


def mufu_rsq(x) -> np.ndarray:
    """MUFU.RSQ (= rsqrt.approx.ftz.f32)."""
    x, ef, r = _root(x, "rsq_e0", "rsq_e1", -1.0)
    neg = (x & _SIGN) != 0
    out = _pack(r)
    out = np.where(ef == 0, _INF | (x & _SIGN), out)  # +-0 and (flushed) subnormals -> +-Inf
    out = np.where(neg & (ef != 0), _NAN, out)  # negative numbers, -Inf
    out = np.where(ef == 0xFF, np.where((x & _MANT) != 0, _NAN, np.where(neg, _NAN, np.uint32(0))), out)
    return out.astype(np.uint32)


def mufu_sqrt(x) -> np.ndarray:
    """MUFU.SQRT (= sqrt.approx.ftz.f32)."""
    x, ef, r = _root(x, "sqrt_e0", "sqrt_e1", 1.0)
    neg = (x & _SIGN) != 0
    out = _pack(r)
    out = np.where(ef == 0, x & _SIGN, out)  # +-0 and (flushed) subnormals -> +-0
    out = np.where(neg & (ef != 0), _NAN, out)
    out = np.where(ef == 0xFF, np.where((x & _MANT) != 0, _NAN, np.where(neg, _NAN, _INF)), out)
    return out.astype(np.uint32)


@functools.lru_cache(maxsize=1)
def _ex2_factored():
    """MUFU.EX2's two 32 MB tables in a cache-friendly form, rebuilt exactly at load time.

    P[f] = RN32(A[f >> 11] * B[f & 2047]) + d[f] with A, B small float64 tables of 2^(+-(1 + f)) and
    d in a 2-bit packed array (2 MB). The products are computed with the same IEEE operations here and
    in the kernel, so the reconstruction is exact on any machine; it is checked entry by entry.
    """
    t = tables()
    f = np.arange(1 << 23)
    out = []
    for name, sgn in (("ex2_pos", 1.0), ("ex2_neg", -1.0)):
        a = np.exp2(sgn * (1.0 + np.arange(4096) * 2.0**-12))
        b = np.exp2(sgn * np.arange(2048) * 2.0**-23)
        approx = (a[f >> 11] * b[f & 2047]).astype(np.float32).view(np.uint32).astype(np.int64)
        d = t[name].astype(np.int64) - approx
        offset = int(-d.min())
        if d.min() < -3 or d.max() - d.min() > 3:
            raise TraceError(f"flashsim/{TABLE_FILE}: {name} is not within 2 bits of its factored form")
        q = (d + offset).astype(np.uint8).reshape(-1, 4)
        packed = (q[:, 0] | (q[:, 1] << 2) | (q[:, 2] << 4) | (q[:, 3] << 6)).astype(np.uint8)
        out += [a, b, packed, offset]
    return tuple(out)


@numba.njit(cache=True, nogil=True)
def _ex2_kernel(x, pa, pb, pd, poff, na, nb, nd, noff, out):
    """MUFU.EX2 on every element.

    bit diagram of x: [31 sign | 30..23 exponent field ef | 22..0 fraction]; |x| = sig * 2^(ef-150)
    with sig = 1.fraction (24 bits), so the 23-fraction-bit fixed point of |x| is sig * 2^(ef-127),
    truncated: n = its integer part, f = its 23 fraction bits.
    """
    for i in range(x.size):
        u = np.int64(x[i])
        ef = (u >> 23) & 0xFF
        frac = u & 0x7FFFFF
        negative = (u >> 31) != 0
        if ef == 0xFF:
            if frac != 0:
                out[i] = 0x7FFFFFFF            # NaN in: the canonical NaN
            else:
                out[i] = 0 if negative else 0x7F800000
            continue
        if ef == 0:
            q = np.int64(0)                    # zero and subnormals (flushed) read as 0
        elif ef >= 135:
            q = np.int64(256) << 23            # |x| >= 256: saturates either way
        elif ef >= 127:
            q = (frac | 0x800000) << (ef - 127)
        elif ef >= 104:
            q = (frac | 0x800000) >> (127 - ef)
        else:
            q = np.int64(0)
        if q == 0:
            out[i] = 0x3F800000                # 2^0 on either side (tiny |x| and zeros)
            continue
        n = q >> 23
        if n >= 256:
            out[i] = 0 if negative else 0x7F800000  # saturated: +Inf, or 2^-256 flushed to +0
            continue
        f = q & 0x7FFFFF
        sh = (f & 3) * 2
        if not negative:
            # P[f] = 2^(1+f) in [2, 4): exponent field 128
            t = np.int64(np.float32(pa[f >> 11] * pb[f & 2047]).view(np.uint32)) \
                + ((np.int64(pd[f >> 2]) >> sh) & 3) - poff
            field = 127 + n
            out[i] = 0x7F800000 if field >= 255 else ((t & 0x7FFFFF) | (field << 23))
        else:
            # N[f] = 2^-(1+f) in (0.25, 0.5]
            t = np.int64(np.float32(na[f >> 11] * nb[f & 2047]).view(np.uint32)) \
                + ((np.int64(nd[f >> 2]) >> sh) & 3) - noff
            field = ((t >> 23) & 0xFF) + 1 - n
            out[i] = 0 if field <= 0 else ((t & 0x7FFFFF) | (field << 23))  # below 2^-126: flushed


def mufu_ex2(x) -> np.ndarray:
    """MUFU.EX2 (= ex2.approx.ftz.f32)."""
    x = as_bits(x, F32, "x")
    flat = np.ascontiguousarray(x).reshape(-1)
    out = np.empty(flat.shape, np.uint32)
    _ex2_kernel(flat, *_ex2_factored(), out)
    return out.reshape(x.shape)


def mufu_lg2(x) -> np.ndarray:
    """MUFU.LG2 (= lg2.approx.ftz.f32).

    Model: the unit forms e + L'[m] (L' its internal log2(1.m)) and rounds toward zero. L' is known
    through two recorded binades: on [1, 2) the outputs are RZ(L') = floor(L') and on [0.5, 1) they
    are RZ(-1 + L') = -1 + ceil(L') on finer grids than any other binade uses; since the grids nest,
    floor(e + L') for e > 0 needs only the first table and ceil(e + L') for e < 0 only the second.
    """
    x = as_bits(x, F32, "x")
    t = tables()
    ef = ((x >> 23) & 0xFF).astype(np.int64)
    m = x & _MANT
    e = ef - 127
    lo = _f64(t["lg2_b0"])[m]          # floor representative of L'
    hi = 1.0 + _f64(t["lg2_bm1"])[m]   # ceil representative of L' (exact in float64)
    s = e.astype(np.float64) + np.where(e > 0, lo, hi)   # exact in float64
    # RZ to f32: drop the 29 low float64 fraction bits (every result here is a normal f32 number)
    rz = (s.view(np.uint64) & ~np.uint64((1 << 29) - 1)).view(np.float64).astype(np.float32).view(np.uint32)
    out = np.where(e == 0, t["lg2_b0"][m], np.where(e == -1, t["lg2_bm1"][m], rz))
    neg = (x & _SIGN) != 0
    out = np.where(ef == 0, np.uint32(0xFF800000), out)      # +-0 and subnormals (flushed) -> -Inf
    out = np.where(neg & (ef != 0), _NAN, out)               # negative -> NaN
    out = np.where(ef == 0xFF, np.where((m == 0) & ~neg, _INF, _NAN), out)
    return out.astype(np.uint32)


def mufu_tanh(x) -> np.ndarray:
    """MUFU.TANH (= tanh.approx.f32)."""
    x = as_bits(x, F32, "x")
    t = tables()
    sign = x & _SIGN
    a = x & ~_SIGN
    ef = ((a >> 23) & 0xFF).astype(np.int64)
    e = ef - 127
    out = x                                                 # below 2^-8 (subnormals too, no flush): identity
    out = np.where(e >= 3, np.uint32(0x3F800000) | sign, out)
    bits = t["tanh_bits"]
    for i, b in enumerate(TANH_BINADES):
        sel = e == b
        if np.any(sel):
            idx = (a[sel] & _MANT) >> np.uint32(23 - int(bits[i]))
            out[sel] = t[f"tanh_e{b}"][idx] | sign[sel]
    out = np.where(a > _INF, _NAN, out)
    return out.astype(np.uint32)


def mufu_ex2_f16(h) -> np.ndarray:
    """MUFU.EX2.F16 on f16 bit patterns (one half of ex2.approx.f16x2)."""
    return tables()["ex2_f16"][as_bits(h, F16, "h")]


def mufu_ex2_bf16(h) -> np.ndarray:
    """MUFU.EX2.BF16 on bf16 bit patterns (one half of ex2.approx.ftz.bf16x2)."""
    return tables()["ex2_bf16"][as_bits(h, BF16, "h")]


TRIG_BITS = 25  # MUFU.SIN / COS: fraction bits of a turn the unit reads
_HALF_TURN = np.uint32(1 << (TRIG_BITS - 1))


def trig_index(x) -> np.ndarray:
    """k = trunc(frac(|x|) * 2^25) of f32 bit patterns (any value for Inf and NaN, which the callers replace)."""
    x = as_bits(x, F32, "x")
    with np.errstate(invalid="ignore"):
        a = (x & np.uint32(0x7FFFFFFF)).view(np.float32)
        fr = np.where(np.isfinite(a), a - np.trunc(a), np.float32(0))  # exact
        return (fr * np.float32(2.0 ** TRIG_BITS)).astype(np.uint32)  # exact scaling, then truncation


def _turn(k: np.ndarray) -> np.ndarray:
    """G(k) for any k (mod 2^25): the half-turn table, negated on the second half."""
    k = k & np.uint32((1 << TRIG_BITS) - 1)
    return tables()["sin_half"][k & (_HALF_TURN - np.uint32(1))] ^ ((k >> np.uint32(TRIG_BITS - 1)) << np.uint32(31))


def mufu_sin(x) -> np.ndarray:
    """MUFU.SIN (sin(2 pi x) by the unit's table; see the module's notes)."""
    x = as_bits(x, F32, "x")
    out = _turn(trig_index(x)) ^ (x & _SIGN)
    return np.where((x & _INF) == _INF, _NAN, out).astype(np.uint32)


def mufu_cos(x) -> np.ndarray:
    """MUFU.COS (cos(2 pi x) by the same table, a quarter turn on)."""
    x = as_bits(x, F32, "x")
    out = _turn(trig_index(x) + (_HALF_TURN >> np.uint32(1)))
    return np.where((x & _INF) == _INF, _NAN, out).astype(np.uint32)


# ---- PTX instructions as sm_90 compiles them -----------------------------------------------------

def _f32c(v: float) -> np.uint32:
    return np.float32(v).view(np.uint32)


def _full(x, v):
    return np.full(np.shape(x), _f32c(v), np.uint32)


def ex2_approx_f32(x, *, ftz: bool = False) -> np.ndarray:
    """``ex2.approx{.ftz}.f32``. Non-ftz SASS: FSETP.GEU P0, x, -126; @!P0 FMUL x, x, 0.5; MUFU.EX2;
    @!P0 FMUL r, r, r (the squaring produces the subnormal results MUFU cannot)."""
    x = as_bits(x, F32, "x")
    if ftz:
        return mufu_ex2(x)
    small = ~(_f64(x) >= -126.0)  # GEU: true for NaN too
    xs = np.where(small, fp32.mul(x, _full(x, 0.5)), x)
    r = mufu_ex2(xs)
    return np.where(small, fp32.mul(r, r), r).astype(np.uint32)


def lg2_approx_f32(x, *, ftz: bool = False) -> np.ndarray:
    """``lg2.approx{.ftz}.f32``. Non-ftz SASS: FSETP.GEU P0, |x|, 2^-126; @!P0 FMUL x, x, 2^24;
    MUFU.LG2; @!P0 FADD r, r, -24."""
    x = as_bits(x, F32, "x")
    if ftz:
        return mufu_lg2(x)
    small = ~(np.abs(_f64(x)) >= 2.0**-126)
    xs = np.where(small, fp32.mul(x, _full(x, 16777216.0)), x)
    r = mufu_lg2(xs)
    return np.where(small, fp32.add(r, _full(x, -24.0)), r).astype(np.uint32)


def rcp_approx_f32(x, *, ftz: bool = False) -> np.ndarray:
    """``rcp.approx{.ftz}.f32``. Non-ftz SASS: s = |x| < 2^-126 ? 2^24 : 1; s = |x| > 2^126 ? 0.25 : s;
    r = s * MUFU.RCP(x * s)."""
    x = as_bits(x, F32, "x")
    if ftz:
        return mufu_rcp(x)
    ax = np.abs(_f64(x))
    s = np.where(~(ax >= 2.0**-126), _f32c(16777216.0), _f32c(1.0))
    s = np.where(ax > 2.0**126, _f32c(0.25), s).astype(np.uint32)
    return fp32.mul(s, mufu_rcp(fp32.mul(x, s)))


def rsqrt_approx_f32(x, *, ftz: bool = False) -> np.ndarray:
    """``rsqrt.approx{.ftz}.f32``. Non-ftz SASS: FSETP.GEU P0, |x|, 2^-126; @!P0 FMUL x, x, 2^24;
    MUFU.RSQ; @!P0 FMUL r, r, 4096."""
    x = as_bits(x, F32, "x")
    if ftz:
        return mufu_rsq(x)
    small = ~(np.abs(_f64(x)) >= 2.0**-126)
    r = mufu_rsq(np.where(small, fp32.mul(x, _full(x, 16777216.0)), x))
    return np.where(small, fp32.mul(r, _full(x, 4096.0)), r).astype(np.uint32)


def sqrt_approx_f32(x, *, ftz: bool = False) -> np.ndarray:
    """``sqrt.approx{.ftz}.f32``. Non-ftz SASS: FSETP.GEU P0, |x|, 2^-126; @!P0 FMUL x, x, 2^24;
    MUFU.SQRT; @!P0 FMUL r, r, 2^-12."""
    x = as_bits(x, F32, "x")
    if ftz:
        return mufu_sqrt(x)
    small = ~(np.abs(_f64(x)) >= 2.0**-126)
    r = mufu_sqrt(np.where(small, fp32.mul(x, _full(x, 16777216.0)), x))
    return np.where(small, fp32.mul(r, _full(x, 2.0**-12)), r).astype(np.uint32)


INV_2PI = np.uint32(0x3E22F983)  # 0.15915494f, the FMUL.RZ constant ptxas puts before MUFU.SIN / MUFU.COS


def _turns(x) -> np.ndarray:
    """FMUL.RZ x, 1/2pi (no .FTZ: a subnormal product stays, and MUFU reads it as k = 0)."""
    x = as_bits(x, F32, "x")
    return fp32.fma(x, np.full(x.shape, INV_2PI, np.uint32), np.full(x.shape, _SIGN, np.uint32), rnd="rz")


def sin_approx_f32(x, *, ftz: bool = False) -> np.ndarray:
    """``sin.approx{.ftz}.f32``: FMUL.RZ x, 1/2pi; MUFU.SIN (the same SASS with or without .ftz)."""
    return mufu_sin(_turns(x))


def cos_approx_f32(x, *, ftz: bool = False) -> np.ndarray:
    """``cos.approx{.ftz}.f32``: FMUL.RZ x, 1/2pi; MUFU.COS (the same SASS with or without .ftz)."""
    return mufu_cos(_turns(x))


def tanh_approx_f32(x) -> np.ndarray:
    """``tanh.approx.f32`` (one MUFU.TANH)."""
    return mufu_tanh(x)


def ex2_approx_f16x2(x) -> np.ndarray:
    """``ex2.approx.f16x2`` on packed uint32 (two MUFU.EX2.F16, one per half)."""
    x = np.asarray(x)
    if x.dtype != np.uint32:
        raise bad_argument("x", x.dtype, "expected uint32 packed f16x2")
    lo = mufu_ex2_f16((x & 0xFFFF).astype(np.uint16)).astype(np.uint32)
    hi = mufu_ex2_f16((x >> 16).astype(np.uint16)).astype(np.uint32)
    return (hi << np.uint32(16)) | lo


def ex2_approx_ftz_bf16x2(x) -> np.ndarray:
    """``ex2.approx.ftz.bf16x2`` on packed uint32 (two MUFU.EX2.BF16)."""
    x = np.asarray(x)
    if x.dtype != np.uint32:
        raise bad_argument("x", x.dtype, "expected uint32 packed bf16x2")
    lo = mufu_ex2_bf16((x & 0xFFFF).astype(np.uint16)).astype(np.uint32)
    hi = mufu_ex2_bf16((x >> 16).astype(np.uint16)).astype(np.uint32)
    return (hi << np.uint32(16)) | lo


def rcp_rn_f32(x) -> np.ndarray:
    """``rcp.rn.f32``: IEEE reciprocal, round to nearest even, subnormals kept.

    A float64 quotient rounded to f32 is correctly rounded (53 >= 2*24 + 2: double rounding is
    innocuous for division, Figueroa 1995).
    """
    x = as_bits(x, F32, "x")
    with np.errstate(all="ignore"):
        r = 1.0 / _f64(x)
        out = r.astype(np.float32).view(np.uint32)
    return np.where(np.isnan(r), _NAN, out).astype(np.uint32)


def rcp_rn_ftz_f32(x) -> np.ndarray:
    """``rcp.rn.ftz.f32`` (``1.0f / x`` under ``-ftz=true`` without fast math): a subnormal x reads as a zero
    of its sign (result +-Inf); a result that is tiny after rounding to 24 bits with an unbounded exponent,
    which for a reciprocal means |x| > 2^126, is flushed to a zero of its sign; otherwise ``rcp_rn_f32``."""
    x = as_bits(x, F32, "x")
    sign = x & np.uint32(0x80000000)
    mag = x & np.uint32(0x7FFFFFFF)
    xf = np.where(mag < np.uint32(0x00800000), sign, x).astype(np.uint32)
    r = rcp_rn_f32(xf)
    tiny = (mag > np.uint32(0x7E800000)) & (mag <= np.uint32(0x7F800000))  # 2^126 < |x| <= Inf
    return np.where(tiny, sign, r).astype(np.uint32)


def div_rn_f32(a, b) -> np.ndarray:
    """``div.rn.f32``: IEEE division, round to nearest even, subnormals kept (see rcp_rn_f32)."""
    a, b = as_bits(a, F32, "a"), as_bits(b, F32, "b")
    if a.shape != b.shape:
        raise bad_argument("b", b.shape, f"shape differs from a's {a.shape}")
    with np.errstate(all="ignore"):
        r = _f64(a) / _f64(b)
        out = r.astype(np.float32).view(np.uint32)
    return np.where(np.isnan(r), _NAN, out).astype(np.uint32)


# name -> (PTX spelling, model on uint32 bits); the GPU sweeps use the same names
SWEPT = {
    "ex2_approx_ftz_f32": ("ex2.approx.ftz.f32", lambda x: ex2_approx_f32(x, ftz=True)),
    "ex2_approx_f32": ("ex2.approx.f32", ex2_approx_f32),
    "lg2_approx_ftz_f32": ("lg2.approx.ftz.f32", lambda x: lg2_approx_f32(x, ftz=True)),
    "lg2_approx_f32": ("lg2.approx.f32", lg2_approx_f32),
    "rcp_approx_ftz_f32": ("rcp.approx.ftz.f32", lambda x: rcp_approx_f32(x, ftz=True)),
    "rcp_approx_f32": ("rcp.approx.f32", rcp_approx_f32),
    "tanh_approx_f32": ("tanh.approx.f32", tanh_approx_f32),
    "rcp_rn_f32": ("rcp.rn.f32", rcp_rn_f32),
    "rsqrt_approx_ftz_f32": ("rsqrt.approx.ftz.f32", lambda x: rsqrt_approx_f32(x, ftz=True)),
    "rsqrt_approx_f32": ("rsqrt.approx.f32", rsqrt_approx_f32),
    "sqrt_approx_ftz_f32": ("sqrt.approx.ftz.f32", lambda x: sqrt_approx_f32(x, ftz=True)),
    "sqrt_approx_f32": ("sqrt.approx.f32", sqrt_approx_f32),
    "sin_approx_ftz_f32": ("sin.approx.ftz.f32", lambda x: sin_approx_f32(x, ftz=True)),
    "sin_approx_f32": ("sin.approx.f32", sin_approx_f32),
    "cos_approx_ftz_f32": ("cos.approx.ftz.f32", lambda x: cos_approx_f32(x, ftz=True)),
    "cos_approx_f32": ("cos.approx.f32", cos_approx_f32),
}
