"""Deterministic input generators for validating the numerics models against a GPU.

Each generator takes a numpy Generator and a count and returns bit arrays. They aim at what
distinguishes one rounding/alignment model from another: exponent spreads, cancellation, ties,
subnormals, specials, and the directed edge cases of the mma alignment (zero products, tiny sums).
"""

from __future__ import annotations

import numpy as np

from flashsim.numerics.formats import BF16, F16, F32, FloatFormat


def _finite(rng, fmt: FloatFormat, shape, elo: int, ehi: int, sub_frac: float = 0.0) -> np.ndarray:
    """Random finite values with unbiased exponents in [elo, ehi] (clamped), random sign and fraction."""
    e = rng.integers(max(elo, fmt.emin), min(ehi, fmt.emax) + 1, shape)
    field = (e + fmt.bias).astype(np.int64)
    frac = rng.integers(0, 1 << fmt.mbits, shape)
    sign = rng.integers(0, 2, shape)
    bits = (sign << (fmt.nbits - 1)) | (field << fmt.mbits) | frac
    if sub_frac:
        sub = rng.random(shape) < sub_frac
        bits = np.where(sub, (sign << (fmt.nbits - 1)) | rng.integers(1, 1 << fmt.mbits, shape), bits)
    return bits.astype(fmt.dtype)


def _sprinkle(rng, bits: np.ndarray, fmt: FloatFormat, p: float) -> np.ndarray:
    """Replace a fraction p of the elements with special values (zeros, Inf, NaNs, subnormal limits)."""
    specials = np.array([0, fmt.sign_bit, fmt.inf, fmt.inf | fmt.sign_bit, fmt.canonical_nan, fmt.inf | 1,
                         1, fmt.sign_bit | 1, fmt.max_finite, fmt.max_finite | fmt.sign_bit, 1 << fmt.mbits],
                        np.int64)
    pick = rng.random(bits.shape) < p
    return np.where(pick, specials[rng.integers(0, len(specials), bits.shape)], bits).astype(fmt.dtype)


# ---- mma ---------------------------------------------------------------------------------------

def mma_sets(rng, atype: str, ctype: str, k: int, tiles: int) -> dict[str, tuple]:
    """Named (a, b, c) input sets for one mma variant; ``tiles`` tiles per random set."""
    af = {"f16": F16, "bf16": BF16}[atype]
    cf = {"f32": F32, "f16": F16}[ctype]
    sa, sb, sc = (tiles, 16, k), (tiles, k, 8), (tiles, 16, 8)
    lo, hi = af.emin, af.emax
    sets = {}
    # whole exponent range (finite); bf16 products may overflow f32, f16 ones never do
    sets["wide"] = (_finite(rng, af, sa, lo, hi), _finite(rng, af, sb, lo, hi), _finite(rng, cf, sc, lo, hi))
    # controlled spreads: every A/B exponent in a window of `s` binades, C around the products
    for s in (0, 1, 2, 3, 5, 8, 12, 16, 20, 24, 28, 32, 40):
        centre = rng.integers(-6, 7, (tiles, 1, 1))
        ea = centre - s // 2 + rng.integers(0, s + 1, sa)
        eb = -s // 2 + rng.integers(0, s + 1, sb)
        a = _with_exp(rng, af, ea)
        b = _with_exp(rng, af, eb)
        c = _with_exp(rng, cf, centre - s + rng.integers(0, 2 * s + 1, sc))
        sets[f"spread{s}"] = (a, b, c)
    # cancellation: products in +/- pairs over k and C equal to minus a product, so big terms vanish
    a = _finite(rng, af, sa, -4, 4)
    b = _finite(rng, af, sb, -4, 4)
    a[:, :, 1::2] = a[:, :, 0::2] ^ np.asarray(af.sign_bit, af.dtype)
    b[:, 1::2, :] = b[:, 0::2, :]
    small = _finite(rng, af, sa, -14, -6)
    a[:, :, -1] = small[:, :, -1]
    sets["cancel"] = (a, b, _finite(rng, cf, sc, -20, 2))
    # C large or tiny against the products
    sets["large_c"] = (_finite(rng, af, sa, -3, 3), _finite(rng, af, sb, -3, 3), _finite(rng, cf, sc, 10, 15))
    sets["tiny_c"] = (_finite(rng, af, sa, -3, 3), _finite(rng, af, sb, -3, 3),
                      _finite(rng, cf, sc, cf.emin, cf.emin + 4, sub_frac=0.5))
    # subnormal A/B
    sets["subnormal"] = (_finite(rng, af, sa, lo, lo + 3, sub_frac=0.6), _finite(rng, af, sb, -2, 6, sub_frac=0.3),
                         _finite(rng, cf, sc, -30, -10, sub_frac=0.1))
    # specials sprinkled in (NaN in, Inf - Inf, Inf * 0, zeros)
    a, b, c = (_finite(rng, af, sa, -4, 4), _finite(rng, af, sb, -4, 4), _finite(rng, cf, sc, -4, 4))
    sets["specials"] = (_sprinkle(rng, a, af, 0.02), _sprinkle(rng, b, af, 0.02), _sprinkle(rng, c, cf, 0.05))
    sets["zeros"] = (_sprinkle(rng, _finite(rng, af, sa, -6, 6), af, 0.3) & ~np.asarray(0, af.dtype),
                     _finite(rng, af, sb, -6, 6), _finite(rng, cf, sc, -8, 8))
    sets["zeros"] = tuple(_zeros_only(x, f) for x, f in zip(sets["zeros"], (af, af, cf)))
    if atype == "bf16":
        # products near and below the f32 subnormal range: the lower end of the alignment exponent
        sets["tiny_products"] = (_finite(rng, af, sa, -80, -55), _finite(rng, af, sb, -80, -55),
                                 _finite(rng, cf, sc, -149, -120, sub_frac=0.5))
        sets["tiny_products_c0"] = (_finite(rng, af, sa, -75, -60), _finite(rng, af, sb, -75, -60),
                                    np.zeros(sc, cf.dtype))
        # overflow of the f32 sum
        sets["overflow"] = (_finite(rng, af, sa, 60, 64), _finite(rng, af, sb, 60, 64), _finite(rng, cf, sc, 120, 127))
    else:
        sets["overflow"] = (_finite(rng, af, sa, 12, 15), _finite(rng, af, sb, 0, 3), _finite(rng, cf, sc, 10, 15))
    # every term far below D's smallest normal, mixed signs: where (if anywhere) is E clamped below?
    lo_e = (-80, -62) if atype == "bf16" else (af.emin, af.emin + 6)
    c = _finite(rng, cf, sc, cf.emin, cf.emin + 2, sub_frac=0.8)
    c[rng.random(sc) < 0.5] = 0
    sets["below_floor"] = (_finite(rng, af, sa, *lo_e, sub_frac=0.3), _finite(rng, af, sb, *lo_e, sub_frac=0.3), c)
    sets.update(_directed(af, cf, k))
    return sets


def _zeros_only(bits, fmt):
    """Keep only the zero specials of a sprinkled array; other specials become +1.0."""
    f = bits.astype(np.int64)
    special = (f & fmt.inf) == fmt.inf
    return np.where(special, fmt.bias << fmt.mbits, f).astype(fmt.dtype)


def _with_exp(rng, fmt, e):
    e = np.clip(e, fmt.emin, fmt.emax)
    frac = rng.integers(0, 1 << fmt.mbits, e.shape)
    sign = rng.integers(0, 2, e.shape)
    return ((sign << (fmt.nbits - 1)) | ((e + fmt.bias) << fmt.mbits) | frac).astype(fmt.dtype)


def _val(fmt, x: float) -> int:
    """Bits of a float exactly representable in ``fmt``."""
    import ml_dtypes

    dt = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32}[fmt.name]
    v = np.array([x], np.float64).astype(dt)
    assert float(v[0]) == x or np.isnan(x), (x, fmt.name)
    return int(v.view(fmt.dtype)[0])


def _directed(af, cf, k) -> dict[str, tuple]:
    """Hand-made tiles, one question each; every tile is the same question with a different row/col."""
    out = {}

    def tile_set(fill):
        n = 64
        a = np.zeros((n, 16, k), af.dtype)
        b = np.zeros((n, k, 8), af.dtype)
        c = np.zeros((n, 16, 8), cf.dtype)
        rng = np.random.default_rng(1234)
        for t in range(n):
            fill(t, a[t], b[t], c[t], rng)
        return a, b, c

    big = 2.0 ** (12 if af is F16 else 60)
    one = _val(af, 1.0)

    def zero_product(t, a, b, c, rng):
        # a zero times a large value next to small products with many bits: does the zero product's
        # exponent (from its fields) take part in the alignment maximum?
        a[:, :] = _finite(rng, af, a.shape, -7, -5)
        b[:, :] = _finite(rng, af, b.shape, -7, -5)
        a[:, t % k] = 0 if t % 2 == 0 else af.sign_bit
        b[t % k, :] = _val(af, big)
    out["zero_product"] = tile_set(zero_product)

    def zero_c(t, a, b, c, rng):
        # C = +-0 with small products: does a zero C take part in the maximum exponent?
        a[:, :] = _finite(rng, af, a.shape, -12 if af is F16 else -70, -9 if af is F16 else -60)
        b[:, :] = _finite(rng, af, b.shape, -12 if af is F16 else -70, -9 if af is F16 else -60)
        c[:, :] = 0 if t % 2 == 0 else cf.sign_bit
    out["zero_c"] = tile_set(zero_c)

    def negative_zero(t, a, b, c, rng):
        # every term is zero, with mixed signs: +0 or IEEE signs?
        a[:, :] = af.sign_bit if t % 2 else 0
        b[:, :] = one if t % 3 else 0
        c[:, :] = cf.sign_bit if t % 4 < 2 else 0
    out["negative_zero"] = tile_set(negative_zero)

    def exact_cancel(t, a, b, c, rng):
        # products that cancel exactly with C: zero result sign
        a[:, :] = 0
        x = _finite(rng, af, (16,), -3, 3)
        a[:, 0] = x
        b[0, :] = one
        fa = _decode_float(x, af)
        c[:, :] = np.array([[_val(cf, -v)] * 8 for v in fa], np.int64).astype(cf.dtype)
    out["exact_cancel"] = tile_set(exact_cancel)

    def truncation_bits(t, a, b, c, rng):
        # one term at 2^E and one whose lowest set bit sits 23..27 bits below: where does truncation cut?
        a[:, :] = 0
        b[:, :] = 0
        a[:, 0] = one
        b[0, :] = one
        shift = 22 + t % 6
        sgn = -1.0 if (t // 6) % 2 else 1.0
        lo = min(shift, 14 if af is F16 else 100)
        a[:, 1] = _val(af, sgn * 1.5 * 2.0 ** -lo)
        b[1, :] = _val(af, 2.0 ** (lo - shift)) if af is BF16 or lo - shift >= -14 else _val(af, 2.0 ** -14)
        a[:, 2] = _val(af, 1.0 + 2.0 ** -(af.mbits))
        b[2, :] = _val(af, 2.0 ** -3)
    out["truncation_bits"] = tile_set(truncation_bits)

    def floor_sweep(t, a, b, c, rng):
        # a term on D's rounding boundary minus a tiny term 2^-j: the tiny term survives the
        # alignment only if j <= E - frac_bits, so the j where the result changes gives E's clamp
        a[:, :] = 0
        b[:, :] = 0
        if cf is F16:   # f16 D: 1.5 * 2^-24 is a tie on the 2^-24 grid; tiny 2^-j, j = 40..48
            a[:, 0], b[0, :] = _val(af, 1.5 * 2.0 ** -12), _val(af, 2.0 ** -12)
            j = 40 + t % 9
            a[:, 1], b[1, :] = _val(af, -(2.0 ** -(j - 24))), _val(af, 2.0 ** -24)
        elif af is BF16:  # f32 D: 2^-148 = two f32 subnormal units (RZ); tiny 2^-j, j = 150..181
            a[:, 0], b[0, :] = _val(af, 2.0 ** -74), _val(af, 2.0 ** -74)
            j = 150 + t % 32
            a[:, 1], b[1, :] = _val(af, -(2.0 ** -75)), _val(af, 2.0 ** -(j - 75))
        else:           # f16 products cannot come near the f32 clamp; a plain tie test instead
            a[:, 0], b[0, :] = one, one
            a[:, 1], b[1, :] = _val(af, -(2.0 ** -(12 + t % 12))), _val(af, 2.0 ** -12)
    out["floor_sweep"] = tile_set(floor_sweep)

    def inf_nan(t, a, b, c, rng):
        a[:, :] = _finite(rng, af, a.shape, -2, 2)
        b[:, :] = _finite(rng, af, b.shape, -2, 2)
        kind = t % 4
        if kind == 0:    # Inf - Inf
            a[:, 0], a[:, 1] = af.inf, af.inf | af.sign_bit
            b[0, :], b[1, :] = one, one
        elif kind == 1:  # Inf * 0
            a[:, 0] = af.inf
            b[0, :] = 0
        elif kind == 2:  # NaN payload in
            a[:, 0] = af.inf | (t % 5 + 1)
        else:            # Inf in C, finite products
            c[:, :] = cf.inf | (cf.sign_bit if t % 8 > 3 else 0)
    out["inf_nan"] = tile_set(inf_nan)
    return out


def _decode_float(bits, fmt):
    import ml_dtypes

    dt = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32}[fmt.name]
    return bits.view(dt).astype(np.float64)


# ---- f32 arithmetic and cvt ---------------------------------------------------------------------

def f32_operands(rng, n: int) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Named (a, b, c) f32 operand sets: uniform bits, narrow ranges, subnormals, cancellation, ties."""
    sets = {}
    u = lambda: rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)  # noqa: E731
    sets["uniform_bits"] = (u(), u(), u())
    sets["near_one"] = tuple(_finite(rng, F32, (n,), -3, 3) for _ in range(3))
    sets["subnormal"] = (_finite(rng, F32, (n,), -126, -100, sub_frac=0.5), _finite(rng, F32, (n,), -30, 5),
                         _finite(rng, F32, (n,), -149, -120, sub_frac=0.5))
    sets["underflow_edge"] = (_finite(rng, F32, (n,), -70, -56), _finite(rng, F32, (n,), -70, -56),
                              _finite(rng, F32, (n,), -127, -125, sub_frac=0.3))
    a, b = _finite(rng, F32, (n,), -20, 20), _finite(rng, F32, (n,), -20, 20)
    with np.errstate(all="ignore"):
        c = (-(a.view(np.float32).astype(np.float64) * b.view(np.float32))).astype(np.float32).view(np.uint32)
    sets["cancel"] = (a, b, c)
    # ties for add and fma: b = half an ulp of a (times a random power of two offset 0..2)
    a = _finite(rng, F32, (n,), -10, 10)
    ea = ((a >> 23) & 0xFF).astype(np.int64) - 127
    sgn = rng.integers(0, 2, n).astype(np.uint32) << 31
    c = (sgn | ((ea - 24 - rng.integers(0, 3, n) + 127).astype(np.uint32) << 23)).astype(np.uint32)
    sets["ties"] = (a, np.full(n, 0x3F800000, np.uint32), c)
    sets["overflow_edge"] = (_finite(rng, F32, (n,), 60, 64), _finite(rng, F32, (n,), 60, 64),
                             _finite(rng, F32, (n,), 125, 127))
    sets["specials"] = tuple(_sprinkle(rng, _finite(rng, F32, (n,), -5, 5), F32, 0.2) for _ in range(3))
    # products just below 2^-126 that round up to it (or stay below): does .ftz flush by the value
    # before rounding or by the rounded result?
    a = (0x3F7FFF00 + rng.integers(0, 256, n)).astype(np.uint32)
    b = (0x00800000 + rng.integers(0, 4, n)).astype(np.uint32) | (rng.integers(0, 2, n).astype(np.uint32) << 31)
    c = np.where(rng.random(n) < 0.5, 0, rng.integers(0, 8, n)).astype(np.uint32)
    sets["ftz_boundary"] = (a, b, c)
    return sets


def cvt_inputs(rng, n_random: int) -> np.ndarray:
    """f32 inputs for f32 -> f16/bf16 conversions: every boundary region densely, plus random bits."""
    parts = []
    # all binades from below f16/bf16 subnormals to beyond f16 overflow, low 17 bits swept in steps
    # that hit every tie/half-ulp pattern of both f16 (13 dropped bits) and bf16 (16 dropped bits)
    low = np.unique(np.concatenate([np.arange(0, 1 << 17, 13), np.arange(0, 1 << 17, 1 << 12),
                                    (np.arange(0, 1 << 17, 1 << 12) + 1), (np.arange(0, 1 << 17, 1 << 12) - 1) % (1 << 17)]))
    for e in list(range(-149, 20)) + list(range(120, 128)):
        base = ((e + 127) << 23) if e >= -126 else 0
        hi = rng.integers(0, 1 << 6, len(low)) << 17
        parts.append((base + (hi | low)) & 0x7FFFFFFF)
    parts.append(np.arange(0, 1 << 20))                      # f32 subnormals
    parts.append(np.arange(0x7F800000, 0x7F800000 + 4096))   # Inf and NaN payloads
    parts.append(np.arange(0x7FFFF000, 0x80000000))
    x = np.concatenate(parts).astype(np.uint32)
    x = np.concatenate([x, x | np.uint32(0x80000000), rng.integers(0, 2**32, n_random, dtype=np.uint64).astype(np.uint32)])
    return x
