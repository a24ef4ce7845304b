"""Formats and cvt: exact rounding against MPFR, structure laws, and argument errors."""

import numpy as np
import pytest
from hypothesis import given, strategies as st

import mpref
from flashsim import ArgumentError
from flashsim.numerics import cvt as C
from flashsim.numerics.formats import BF16, F16, F32, decode, round_exact, requantize, to_float, bits_of
from flashsim.strategies import bit_arrays, float_bits, special_values

NARROW = [(dst, mode) for dst in (F16, BF16) for mode in ("rn", "rz", "rm", "rp")]


def f32_interesting():
    """f32 inputs around every f16/bf16 rounding boundary: ties, half-ulps, subnormal and overflow edges."""
    rng = np.random.default_rng(7)
    parts = [np.array(special_values(F32), np.uint32)]
    for e in range(-160, 20):
        base = np.uint32((e + 127) << 23) if e >= -126 else np.uint32(0)
        low = np.arange(0, 1 << 14, 97, dtype=np.uint32)
        parts.append(base + low)                     # low bits: ties and sticky bits for f16 and bf16
        parts.append(base + (np.uint32(1) << 12) + np.arange(-2, 3, dtype=np.int64).astype(np.uint32))
    parts.append(rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32))
    x = np.concatenate(parts)
    return np.concatenate([x, x | np.uint32(0x80000000)])


X = f32_interesting()


@pytest.mark.parametrize("dst,mode", NARROW, ids=lambda v: getattr(v, "name", v))
def test_narrowing_matches_mpfr(dst, mode):
    sample = X[:: max(1, len(X) // 20000)]
    got = requantize(sample, F32, dst, mode)
    isnan = np.isnan(sample.view(np.float32))
    ref = np.array([mpref.round_to(mpref.value(int(v), F32), dst, mode) if not n else dst.canonical_nan
                    for v, n in zip(sample, isnan)], dst.dtype)
    bad = np.nonzero(got != ref)[0]
    assert bad.size == 0, [(hex(sample[i]), hex(got[i]), hex(ref[i])) for i in bad[:5]]


def test_rn_matches_numpy_casts_on_many_inputs():
    import ml_dtypes
    with np.errstate(all="ignore"):
        ref16 = X.view(np.float32).astype(np.float16).view(np.uint16)
        refb = X.view(np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)
    ok = ~np.isnan(X.view(np.float32))
    assert np.array_equal(C.f32_to_f16(X)[ok], ref16[ok])
    assert np.array_equal(C.f32_to_bf16(X)[ok], refb[ok])


def test_widening_is_exact_for_every_16_bit_pattern():
    h = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    for fmt, fn in ((F16, C.f16_to_f32), (BF16, C.bf16_to_f32)):
        out = fn(h)
        ok = ~np.isnan(to_float(h, fmt).astype(np.float32))
        assert np.array_equal(out[ok].view(np.float32), to_float(h, fmt)[ok].astype(np.float32))
        # round trip back with every rounding mode is the identity on non-NaN values
        for mode in ("rn", "rz", "rm", "rp"):
            back = requantize(out, F32, fmt, mode)
            assert np.array_equal(back[ok], h[ok])


@given(bit_arrays(F32, (64,)))
def test_directed_modes_bracket_rn(x):
    """rm <= rn <= rp and rz is one of rm/rp, for every non-NaN input."""
    with np.errstate(invalid="ignore"):  # signaling NaN patterns become quiet NaNs in the cast
        v = x.view(np.float32).astype(np.float64)
    keep = ~np.isnan(v)
    for dst in (F16, BF16):
        outs = {m: to_float(requantize(x, F32, dst, m), dst).astype(np.float64)[keep] for m in ("rn", "rz", "rm", "rp")}
        assert np.all(outs["rm"] <= outs["rn"]) and np.all(outs["rn"] <= outs["rp"])
        assert np.all((outs["rz"] == outs["rm"]) | (outs["rz"] == outs["rp"]))
        assert np.all(np.abs(outs["rz"]) <= np.abs(v[keep]))


def test_satfinite_relu_ftz_and_nan():
    x = np.array([0x7F800000, 0xFF800000, 0x7F7FFFFF, 0x477FF000, 0x7FC00001, 0xBF800000, 0x80000000,
                  0x00000001, 0x80000001], np.uint32)
    sat = C.cvt("cvt.rn.satfinite.f16.f32", x)
    assert [hex(v) for v in sat[:5]] == ["0x7bff", "0xfbff", "0x7bff", "0x7bff", "0x7fff"]
    relu = C.cvt("cvt.rn.relu.f16.f32", x)
    assert relu[5] == 0 and relu[6] == 0 and relu[4] == 0x7FFF
    # rp of the smallest f32 subnormal: the smallest f16/bf16 subnormal; .ftz flushes the source for
    # bf16 but not for f16 (the device ignores .ftz on the f16 form)
    assert C.cvt("cvt.rp.f16.f32", x)[7] == 0x0001
    assert C.cvt("cvt.rp.ftz.f16.f32", x)[7] == 0x0001
    assert C.cvt("cvt.rp.bf16.f32", x)[7] == 0x0001
    assert C.cvt("cvt.rp.ftz.bf16.f32", x)[7] == 0x0000
    assert C.cvt("cvt.rm.ftz.bf16.f32", x)[8] == 0x8000
    # widening bf16 keeps NaN payloads (a shift); f16 gives the canonical NaN
    assert C.cvt("cvt.f32.bf16", np.array([0xFF81], np.uint16))[0] == 0xFF810000
    assert C.cvt("cvt.f32.f16", np.array([0xFC01], np.uint16))[0] == 0x7FFFFFFF
    assert C.cvt("cvt.rn.bf16.f32", x)[4] == 0x7FFF


def test_packed_pairs_put_x_in_the_low_half():
    one, two = np.array([0x3F800000], np.uint32), np.array([0x40000000], np.uint32)
    assert C.float22half2_rn(one, two)[0] == 0x40003C00
    assert C.float22bfloat162_rn(one, two)[0] == 0x40003F80
    assert C.cvt("cvt.rn.f16x2.f32", one, two)[0] == 0x3C004000


@given(st.integers(0, 2**16 - 1))
def test_decode_then_round_is_identity(b):
    for fmt in (F16, BF16):
        sign, sig, exp, cls = decode(np.array([b], np.uint16), fmt)
        if cls[0] in (0, 1):
            assert round_exact(sign, sig, exp, fmt, "rz")[0] == b


@given(float_bits(F32))
def test_decode_value_law(b):
    sign, sig, exp, cls = decode(np.array([b], np.uint32), F32)
    v = float(np.array([b], np.uint32).view(np.float32)[0])
    if cls[0] in (0, 1):
        assert (-1) ** int(sign[0]) * int(sig[0]) * 2.0 ** int(exp[0]) == v


def test_round_exact_handles_shifts_beyond_64_bits_and_sticky():
    # 1 * 2^-200 is far below f16: rn gives 0, rp gives the smallest subnormal
    assert int(round_exact(0, 1, -200, F16, "rn")) == 0
    assert int(round_exact(0, 1, -200, F16, "rp")) == 1
    assert int(round_exact(1, 1, -200, F16, "rm")) == 0x8001
    # a tie broken by the sticky bit
    assert int(round_exact(0, 0b11, -26, F16, "rn")) == 1  # 1.5 * 2^-25 -> 2^-24
    assert int(round_exact(0, 0b1, -25, F16, "rn")) == 0   # exactly half: ties to even (0)
    assert round_exact(0, 0b1, -25, F16, "rn", sticky=[True])[0] == 1


@pytest.mark.parametrize("op,match", [
    ("cvt.f16.f32", "rounding modifier"),
    ("cvt.rn.f16.f64", "not a cvt"),
    ("cvt.rm.relu.f16.f32", "only with .rn or .rz"),
    ("cvt.rn.ftz.bf16x2.f32", ".ftz"),
    ("cvt.rn.f32.f16", "takes no rounding"),
    (7, "not a cvt"),
])
def test_bad_ops_name_the_argument(op, match):
    with pytest.raises(ArgumentError, match=r"op=.*" + match.replace(".", r"\.")):
        C.cvt(op, np.zeros(1, np.uint32))


def test_bad_dtype_and_modes():
    with pytest.raises(ArgumentError, match=r"a=dtype\('float32'\)"):
        C.f32_to_f16(np.zeros(2, np.float32))
    with pytest.raises(ArgumentError, match=r"mode='rne'"):
        C.f32_to_f16(np.zeros(2, np.uint32), "rne")
    with pytest.raises(ArgumentError, match=r"x=dtype\('float64'\)"):
        bits_of(np.zeros(2), "f16")
    with pytest.raises(ArgumentError, match=r"fmt='f8'"):
        to_float(np.zeros(2, np.uint16), "f8")
    with pytest.raises(NotImplementedError, match="cvt.f16.bf16"):
        C.cvt("cvt.f16.bf16", np.zeros(1, np.uint16))
