"""wgmma: the arithmetic model against exact references, the warpgroup fragments, the shared-memory matrix
descriptor and its swizzles, the C++ twins of both in gpu/kernels/wgmma.cuh, the sm_90a probe, and the
validation's CPU side with a stand-in for the GPU."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flashsim.errors import ArgumentError
from flashsim.gpu import runtime
from flashsim.gpu import validate_wgmma as V
from flashsim.numerics import formats
from flashsim.numerics import wgmma as W
from flashsim.numerics.formats import E4M3, E5M2, F16, F32
from flashsim.numerics.mma import mma_m16n8k16
from flashsim.warp.fragments import fragment, pack, unpack, wgmma_fragment
from flashsim.warp.matrix_desc import (ARRANGEMENTS, CanonicalTile, MatrixDescriptor, element_address, load_operand,
                                       swizzle_address)

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH (CUDA toolkit)")

F8 = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}
F16DT = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}


def _bits(values, dt, store):
    return np.asarray(values, np.float64).astype(dt).view(store)


def _f64(bits, name):
    dt = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32, **F8}[name]
    return bits.view(dt).astype(np.float64)


# ---- formats: e4m3 / e5m2 --------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", [E4M3, E5M2], ids=lambda f: f.name)
def test_fp8_decode_matches_ml_dtypes_on_every_pattern(fmt):
    bits = np.arange(256, dtype=np.uint8)
    sign, sig, exp, cls = formats.decode(bits, fmt)
    ref = bits.view(F8[fmt.name]).astype(np.float64)
    nan = np.isnan(ref)
    assert ((cls == formats.NAN) == nan).all()
    assert ((cls == formats.INF) == np.isinf(ref)).all()
    fin = ~nan & ~np.isinf(ref)
    val = np.where(sign == 1, -1.0, 1.0) * sig * np.exp2(exp.astype(np.float64))
    np.testing.assert_array_equal(val[fin], ref[fin])


def test_fp8_format_constants():
    assert (E4M3.emax, E4M3.max_finite, E4M3.canonical_nan) == (8, 0x7E, 0x7F)
    assert float(np.uint8(0x7E).view(F8["e4m3"])) == 448.0
    assert (E5M2.emax, E5M2.inf, E5M2.canonical_nan) == (15, 0x7C, 0x7F)
    with pytest.raises(ArgumentError, match="e4m3.*no infinity"):
        E4M3.inf
    with pytest.raises(NotImplementedError, match="rounding to e4m3"):
        formats.round_exact(0, 1, 0, E4M3)


# ---- the arithmetic ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("atype", "ctype", "n"), [("f16", "f32", 8), ("bf16", "f32", 64), ("f16", "f16", 24),
                                                   ("f16", "f32", 256)])
def test_k16_small_integers_are_exact(atype, ctype, n):
    rng = np.random.default_rng(1)
    a = _bits(rng.integers(-8, 9, (3, 64, 16)), F16DT[atype], np.uint16)
    b = _bits(rng.integers(-8, 9, (3, 16, n)), F16DT[atype], np.uint16)
    cdt, cst = (np.float32, np.uint32) if ctype == "f32" else (np.float16, np.uint16)
    c = _bits(rng.integers(-200, 200, (3, 64, n)), cdt, cst)
    d = W.wgmma_m64nNk16(a, b, c, n=n, atype=atype, ctype=ctype)
    ref = _f64(a, atype) @ _f64(b, atype) + _f64(c, ctype)
    np.testing.assert_array_equal(_f64(d, ctype), ref)


@pytest.mark.parametrize(("atype", "btype", "ctype"), [("e4m3", "e4m3", "f32"), ("e5m2", "e5m2", "f32"),
                                                       ("e4m3", "e5m2", "f16")])
@pytest.mark.parametrize("model", ["fp8_13", "fp8_25", "exact"])
def test_k32_small_integers_are_exact_under_every_hypothesis(atype, btype, ctype, model):
    # |sum| < 2^13: no hypothesis drops a bit
    rng = np.random.default_rng(2)
    a = _bits(rng.integers(-8, 9, (2, 64, 32)), F8[atype], np.uint8)
    b = _bits(rng.integers(-4, 5, (2, 32, 16)), F8[btype], np.uint8)
    cdt, cst = (np.float32, np.uint32) if ctype == "f32" else (np.float16, np.uint16)
    c = _bits(rng.integers(-500, 500, (2, 64, 16)), cdt, cst)
    d = W.wgmma_m64nNk32(a, b, c, n=16, atype=atype, btype=btype, ctype=ctype, model=model)
    np.testing.assert_array_equal(_f64(d, ctype), _f64(a, atype) @ _f64(b, btype) + _f64(c, ctype))


def test_k16_is_the_mma_sync_rule_tile_by_tile():
    # one wgmma = its 4 x N/8 m16n8k16 tiles, each computed by the mma.sync model (uniform bit patterns:
    # every class, specials included)
    rng = np.random.default_rng(3)
    n = 48
    a = rng.integers(0, 1 << 16, (2, 64, 16)).astype(np.uint16)
    b = rng.integers(0, 1 << 16, (2, 16, n)).astype(np.uint16)
    c = rng.integers(0, 1 << 32, (2, 64, n), dtype=np.uint64).astype(np.uint32)
    d = W.wgmma_m64nNk16(a, b, c, n=n, atype="f16", ctype="f32")
    for i in range(4):
        for j in range(n // 8):
            c_tile = np.ascontiguousarray(c[:, 16 * i:16 * i + 16, 8 * j:8 * j + 8])
            tile = mma_m16n8k16(a[:, 16 * i:16 * i + 16], b[:, :, 8 * j:8 * j + 8], c_tile, atype="f16", ctype="f32")
            np.testing.assert_array_equal(d[:, 16 * i:16 * i + 16, 8 * j:8 * j + 8], tile)


def _rz_f32(v: Fraction) -> int:
    """Bits of the nonzero v rounded toward zero to f32, Inf above the range (the device's overflow)."""
    neg = v < 0
    m = -v if neg else v
    e = m.numerator.bit_length() - m.denominator.bit_length()
    if m < Fraction(2) ** e:
        e -= 1
    if e > 127:
        return 0x7F800000 | (neg << 31)
    q = max(e, -126) - 23
    kept = int(m / Fraction(2) ** q)  # floor
    if kept == 0:
        return 0  # a nonzero sum rounded to zero: +0
    body = (q + 23 + 127 - 1) * (1 << 23) + kept if kept >= 1 << 23 else kept
    return body | (neg << 31)


def test_exact_hypothesis_against_fractions():
    rng = np.random.default_rng(4)
    a = V.finite_bits(rng, E5M2, (1, 64, 32), -16, 15, sub_frac=0.2)
    b = V.finite_bits(rng, E4M3, (1, 32, 8), -9, 8, sub_frac=0.2)
    c = V.finite_bits(rng, F32, (1, 64, 8), -60, 40, sub_frac=0.05)
    d = W.exact_sum_model(a, b, c, afmt=E5M2, bfmt=E4M3, dfmt=F32)
    fa, fb, fc = _f64(a, "e5m2"), _f64(b, "e4m3"), _f64(c, "f32")
    for i in range(64):
        for j in range(8):
            v = Fraction(fc[0, i, j]) + sum(Fraction(fa[0, i, k]) * Fraction(fb[0, k, j]) for k in range(32))
            assert int(d[0, i, j]) == (_rz_f32(v) if v else 0), (i, j)


def _one_term(s: int, model) -> int:
    """C = 2^10 and one product -2^(10-s) (e4m3 x e5m2), every other product 0: D (f32 bits)."""
    a = np.zeros((1, 64, 32), np.uint8)
    b = np.zeros((1, 32, 8), np.uint8)
    p = 10 - s
    ea = max(-9, min(8, p // 2))
    a[0, :, 5] = _bits([-(2.0 ** ea)], F8["e4m3"], np.uint8)[0]
    b[0, 5, :] = _bits([2.0 ** (p - ea)], F8["e5m2"], np.uint8)[0]
    assert _f64(a[0, 0, 5], "e4m3") * _f64(b[0, 5, 0], "e5m2") == -(2.0 ** p)
    c = np.full((1, 64, 8), np.float32(1024.0).view(np.uint32), np.uint32)
    return int(W.wgmma_m64nNk32(a, b, c, n=8, atype="e4m3", btype="e5m2", ctype="f32", model=model)[0, 0, 0])


@pytest.mark.parametrize("s", range(8, 30))
def test_fp8_hypotheses_keep_their_number_of_fraction_bits(s):
    # 2^10 - 2^(10-s) rounded toward zero: exact up to s = 24, then the largest f32 below 2^10
    kept = int(np.float32(1024.0 - 2.0 ** (10 - s)).view(np.uint32)) if s <= 24 else 0x447FFFFF
    full = 0x44800000  # 2^10: the product truncated away
    assert _one_term(s, "fp8_13") == (kept if s <= 13 else full)  # 13 fraction bits
    assert _one_term(s, "fp8_25") == (kept if s <= 25 else full)
    assert _one_term(s, "exact") == kept
    assert _one_term(s, "fp8_13_c_exact") == kept  # one product: its sum is exact, C is added exactly


def test_fp8_13_truncates_the_accumulator_to_13_fraction_bits():
    # every product zero: D = C truncated (toward zero) to 13 fraction bits below its leading bit
    rng = np.random.default_rng(5)
    c = V.finite_bits(rng, F32, (1, 64, 8), -20, 20)
    a = np.zeros((1, 64, 32), np.uint8)
    b = V.finite_bits(rng, E4M3, (1, 32, 8), -3, 3)
    d = W.wgmma_m64nNk32(a, b, c, n=8, atype="e4m3", ctype="f32", model="fp8_13")
    np.testing.assert_array_equal(d, c & np.uint32(~((1 << 10) - 1) & 0xFFFFFFFF))
    for other in ("fp8_25", "fp8_13_c_exact", "exact"):
        np.testing.assert_array_equal(W.wgmma_m64nNk32(a, b, c, n=8, atype="e4m3", ctype="f32", model=other), c)


def test_products_then_c_adds_c_exactly_with_specials():
    from flashsim.numerics.formats import F16

    c = np.array([0x3C00, 0x7C00, 0xFC00, 0x7E00, 0x0001, 0x8000], np.uint16)  # 1, +Inf, -Inf, NaN, 2^-24, -0
    p = np.array([0x33800000, 0xFF800000, 0x3F800000, 0, 0xB3800000, 0x80000000], np.uint32)  # 2^-24, -Inf, 1, 0
    d = W.exact_add(c, p, dfmt=F16)
    # 1 + 2^-24 rounds to 1 (RN); Inf - Inf: NaN; -Inf + 1: -Inf; NaN; 2^-24 - 2^-24: +0; -0 + -0: +0
    assert [hex(int(x)) for x in d] == ["0x3c00", "0x7fff", "0xfc00", "0x7fff", "0x0", "0x0"]


def test_chain_is_the_instructions_in_issue_order_and_scale_d_drops_c():
    rng = np.random.default_rng(6)
    a = V.finite_bits(rng, F16, (2, 64, 48), -6, 6)
    b = V.finite_bits(rng, F16, (2, 48, 16), -6, 6)
    c = V.finite_bits(rng, F32, (2, 64, 16), -4, 4)
    d = c
    for s in range(3):
        d = W.wgmma_m64nNk16(a[..., 16 * s:16 * s + 16], b[:, 16 * s:16 * s + 16], d, n=16, atype="f16", ctype="f32")
    np.testing.assert_array_equal(W.wgmma_chain(a, b, c, n=16, atype="f16", ctype="f32"), d)
    assert (W.wgmma_chain(a, b, c, n=16, atype="f16", ctype="f32", order=[2, 1, 0]) != d).any()
    nan_c = np.full(c.shape, 0x7FFFFFFF, np.uint32)
    zero_c = np.zeros_like(c)
    np.testing.assert_array_equal(W.wgmma_chain(a, b, nan_c, n=16, atype="f16", ctype="f32", scale_d=0),
                                  W.wgmma_chain(a, b, zero_c, n=16, atype="f16", ctype="f32"))


@pytest.mark.parametrize(("kwargs", "exc", "match"), [
    (dict(atype="bf16", ctype="f16", n=8), ArgumentError, r"ctype='f16'.*no \.bf16"),
    (dict(atype="f16", ctype="f32", n=12), ArgumentError, r"n=12"),
    (dict(atype="f16", btype="bf16", ctype="f32", n=8), ArgumentError, r"btype='bf16'"),
    (dict(atype="tf32", ctype="f32", n=8), NotImplementedError, r"tf32"),
    (dict(atype="f16", ctype="f32", n=8, scale_d=2), ArgumentError, r"scale_d=2"),
    (dict(atype="f16", ctype="f32", n=8, model="fp9"), ArgumentError, r"model='fp9'"),
])
def test_bad_arguments(kwargs, exc, match):
    a = np.zeros((64, 16), np.uint16)
    b = np.zeros((16, kwargs["n"]), np.uint16)
    c = np.zeros((64, kwargs["n"]), np.uint32)
    with pytest.raises(exc, match=match):
        W.wgmma(a, b, c, **kwargs)


def test_operand_dtypes_and_shapes_are_checked():
    with pytest.raises(ArgumentError, match=r"^a=dtype\('uint16'\).*uint8"):
        W.wgmma_m64nNk32(np.zeros((64, 32), np.uint16), np.zeros((32, 8), np.uint8), np.zeros((64, 8), np.uint32),
                         n=8, atype="e4m3", ctype="f32")
    with pytest.raises(ArgumentError, match=r"^b=\(16, 16\)"):
        W.wgmma_m64nNk16(np.zeros((64, 16), np.uint16), np.zeros((16, 16), np.uint16), np.zeros((64, 8), np.uint32),
                         n=8, atype="f16", ctype="f32")
    with pytest.raises(ArgumentError, match=r"atype='e4m3'.*m64nNk16"):
        W.wgmma_m64nNk16(np.zeros((64, 32), np.uint8), np.zeros((32, 8), np.uint8), np.zeros((64, 8), np.uint32),
                         n=8, atype="e4m3", ctype="f32")


# ---- fragments ---------------------------------------------------------------------------------------

WG_FRAGMENTS = ([("A", None, "f16"), ("A", None, "e4m3")]
                + [("D", n, dt) for n in range(8, 257, 8) for dt in ("f32", "f16")])


@pytest.mark.parametrize("spec", WG_FRAGMENTS, ids=lambda s: f"{s[0]}-{s[1]}-{s[2]}")
def test_wgmma_fragments_own_every_element_once_and_follow_cutlass_tv_layouts(spec):
    op, n, dt = spec
    f = wgmma_fragment(op, n=n, dtype=dt)
    seen = np.zeros((f.rows, f.cols), int)
    for thread in range(128):
        t0, t1, t2 = thread % 4, (thread // 4) % 8, thread // 32
        for reg in range(f.regs):
            for h in range(f.elems):
                r, c = f.coords(thread, reg, h)
                seen[r, c] += 1
                assert f.owner(r, c) == (thread, reg, h)
                # CUTLASS (cute/atom/mma_traits_sm90_gmma.hpp) thread-value layouts, column-major M x N/K:
                # thread (4, 8, 4):(*, 1, 16) and values (e, 2, rest) with strides (64 / e, 8, 512 / ...)
                v = reg * f.elems + h
                if op == "A" and f.elems == 2:
                    off = 128 * t0 + t1 + 16 * t2 + 64 * (v % 2) + 8 * ((v // 2) % 2) + 512 * (v // 4)
                elif op == "A":
                    off = 256 * t0 + t1 + 16 * t2 + 64 * (v % 4) + 8 * ((v // 4) % 2) + 1024 * (v // 8)
                else:
                    off = 128 * t0 + t1 + 16 * t2 + 64 * (v % 2) + 8 * ((v // 2) % 2) + 512 * (v // 4)
                assert (r, c) == (off % 64, off // 64), (thread, reg, h)
    assert (seen == 1).all()
    rng = np.random.default_rng(0)
    tiles = rng.integers(0, 1 << (8 * f.elem_dtype.itemsize), (2, f.rows, f.cols), dtype=np.uint64).astype(f.elem_dtype)
    regs = pack(f, tiles)
    assert regs.shape == (2, 128, f.regs)
    np.testing.assert_array_equal(unpack(f, regs), tiles)


def test_each_warp_of_the_warpgroup_holds_an_mma_fragment():
    # warp w's part of the wgmma A (k16) and of D (n8) is mma.m16n8k16's A and C layout on rows 16w..
    for op, wg, mma in (("A", wgmma_fragment("A", dtype="f16"), fragment("mma.m16n8k16", "A")),
                        ("D", wgmma_fragment("D", n=8, dtype="f32"), fragment("mma.m16n8k16", "C", "f32")),
                        ("D", wgmma_fragment("D", n=8, dtype="f16"), fragment("mma.m16n8k16", "C", "f16"))):
        for thread in range(128):
            for reg in range(mma.regs):
                for h in range(mma.elems):
                    r, c = mma.coords(thread % 32, reg, h)
                    assert wg.coords(thread, reg, h) == (r + 16 * (thread // 32), c), (op, thread, reg, h)


def test_wgmma_fragment_spot_checks_and_errors():
    # thread 37: warp 1, g = 1, t = 1
    assert wgmma_fragment("A", dtype="bf16").coords(37, 3, 1) == (25, 11)
    assert wgmma_fragment("A", dtype="e5m2").coords(37, 2, 3) == (17, 23)
    assert wgmma_fragment("D", n=64, dtype="f32").coords(37, 7) == (25, 11)
    assert wgmma_fragment("C", n=64, dtype="f16").coords(37, 3, 1) == (25, 11)
    with pytest.raises(ArgumentError, match=r"^n=12"):
        wgmma_fragment("D", n=12)
    with pytest.raises(ArgumentError, match=r"^operand='B'"):
        wgmma_fragment("B")
    with pytest.raises(ArgumentError, match=r"^dtype='tf32'"):
        wgmma_fragment("A", dtype="tf32")
    with pytest.raises(ArgumentError, match="a warpgroup has 128 threads"):
        unpack(wgmma_fragment("D", n=8), np.zeros((32, 4), np.uint32))


# ---- the matrix descriptor -------------------------------------------------------------------------

def test_descriptor_bits_by_hand():
    # PTX ISA "Asynchronous Warpgroup Level Matrix Shared Memory Layout" > "Matrix Descriptor": start >> 4 in
    # [13:0], LBO >> 4 in [29:16], SBO >> 4 in [45:32],
    # base offset in [51:49], swizzle in [63:62] (1 = 128B)
    d = MatrixDescriptor(start_address=0x400, leading_byte_offset=16, stride_byte_offset=1024, swizzle="128B")
    assert d.encode() == 0x40 | 1 << 16 | 64 << 32 | 1 << 62 == 0x4000004000010040
    assert MatrixDescriptor.decode(0x4000004000010040) == d
    assert MatrixDescriptor(0x3FFF0, 0x3FFF0, 0x3FFF0, "32B", 7).encode() == 0xC00E3FFF3FFF3FFF


@settings(max_examples=200)
@given(st.integers(0, 0x3FFF), st.integers(0, 0x3FFF), st.integers(0, 0x3FFF),
       st.sampled_from(["none", "128B", "64B", "32B"]), st.integers(0, 7))
def test_descriptor_round_trips(start, lbo, sbo, swz, base):
    d = MatrixDescriptor(start << 4, lbo << 4, sbo << 4, swz, base)
    v = d.encode()
    assert 0 <= v < 1 << 64 and MatrixDescriptor.decode(v) == d
    assert MatrixDescriptor.decode(v).encode() == v


def test_descriptor_errors():
    with pytest.raises(ArgumentError, match=r"^start_address=8: expected a multiple of 16"):
        MatrixDescriptor(8, 16, 16)
    with pytest.raises(ArgumentError, match=r"^swizzle='16B'"):
        MatrixDescriptor(0, 16, 16, "16B")
    with pytest.raises(ArgumentError, match=r"^value='0x8000': reserved bits"):
        MatrixDescriptor.decode(0x8000)
    with pytest.raises(NotImplementedError, match="base_offset=1"):
        element_address(MatrixDescriptor(0, 16, 1024, "128B", 1), 0, 0)
    with pytest.raises(ArgumentError, match=r"^major='mn'"):
        element_address(MatrixDescriptor(0, 16, 1024), 0, 0, major="mn")
    with pytest.raises(ArgumentError, match=r"^base=512: 128B tiles start on a 1024-byte boundary"):
        CanonicalTile(64, 32, "128B", base=512)


@pytest.mark.parametrize(("swizzle", "width"), [("128B", 128), ("64B", 64), ("32B", 32)])
def test_swizzle_atoms_by_hand(swizzle, width):
    # PTX ISA, the swizzling modes of the shared-memory matrix layouts: inside an atom of 8 rows x W bytes, the
    # 16-byte chunk c of row r lands at chunk c ^ (r / (8 / (W / 16))): 128B c ^ r, 64B c ^ (r >> 1), 32B c ^ (r >> 2)
    chunks = width // 16
    for r in range(8):
        for c in range(chunks):
            phys = swizzle_address(1024 + r * width + 16 * c, swizzle)
            assert phys == 1024 + r * width + 16 * (c ^ (r // (8 // chunks))), (r, c)
    assert swizzle_address(0x1234, "none") == 0x1234


def test_canonical_addresses_by_hand():
    t = CanonicalTile(64, 32, "128B")
    assert [t.address(1, 0), t.address(3, 16), t.address(8, 0), t.address(9, 31)] == [144, 416, 1024, 1024 + 128 + 15]
    t = CanonicalTile(64, 64, "none")  # core matrices along K adjacent: LBO 128, SBO 4 * 128
    assert [t.address(0, 16), t.address(1, 0), t.address(8, 0), t.address(8, 33)] == [128, 16, 512, 512 + 256 + 1]
    d = t.descriptor(1)
    assert (d.start_address, d.leading_byte_offset, d.stride_byte_offset) == (256, 128, 512)
    t = CanonicalTile(16, 64, "none_mn")  # core matrices along M adjacent: LBO 2 * 128, SBO 128
    assert [t.address(8, 0), t.address(0, 16), t.address(9, 40)] == [128, 256, 512 + 128 + 16 + 8]
    d = CanonicalTile(64, 128, "64B").descriptor(3)  # the second 64-byte atom column, its second step
    assert (d.start_address, d.stride_byte_offset, d.swizzle) == (8 * 512 + 32, 512, "64B")


@pytest.mark.parametrize("arrangement", ARRANGEMENTS)
@pytest.mark.parametrize("esize", [1, 2])
def test_descriptors_read_back_what_the_tile_stored(arrangement, esize):
    rng = np.random.default_rng(7)
    for rows, kbytes in ((8, 32), (64, 128), (256, 64)):
        t = CanonicalTile(rows, kbytes, arrangement, base=2048)
        r, kb = np.meshgrid(np.arange(rows), np.arange(kbytes), indexing="ij")
        addr = t.address(r, kb)
        assert np.unique(addr).size == addr.size and addr.min() >= 2048 and addr.max() < 2048 + t.nbytes
        smem = np.zeros(2048 + t.nbytes, np.uint8)
        m = rng.integers(0, 1 << (8 * esize), (rows, kbytes // esize)).astype(np.uint8 if esize == 1 else np.uint16)
        t.store(smem, m)
        for s in range(t.steps):
            d = MatrixDescriptor.decode(t.descriptor(s).encode())
            got = load_operand(smem, d, rows, esize)
            np.testing.assert_array_equal(got, m[:, s * 32 // esize:(s + 1) * 32 // esize])


# ---- gpu/kernels/wgmma.cuh agrees with the Python tables -----------------------------------------------

CUH_DUMP = r"""
#include <cstdio>
#include "wgmma.cuh"
int main() {
    for (int t = 0; t < 128; ++t) {
        for (int r = 0; r < 4; ++r) for (int h = 0; h < 2; ++h)
            std::printf("A16 %d %d %d %d %d\n", t, r, h, wg::a_k16_row(t, r), wg::a_k16_col(t, r, h));
        for (int r = 0; r < 4; ++r) for (int q = 0; q < 4; ++q)
            std::printf("A32 %d %d %d %d %d\n", t, r, q, wg::a_k32_row(t, r), wg::a_k32_col(t, r, q));
        for (int i = 0; i < 128; ++i)
            std::printf("D32 %d %d 0 %d %d\n", t, i, wg::d_f32_row(t, i), wg::d_f32_col(t, i));
        for (int r = 0; r < 64; ++r) for (int h = 0; h < 2; ++h)
            std::printf("D16 %d %d %d %d %d\n", t, r, h, wg::d_f16_row(t, r), wg::d_f16_col(t, r, h));
    }
    const int shapes[3][2] = {{64, 32}, {64, 128}, {256, 64}};
    for (int arr = 0; arr < 5; ++arr) for (int s = 0; s < 3; ++s) {
        const int rows = shapes[s][0], kbytes = shapes[s][1];
        for (int step = 0; step < kbytes / 32; ++step)
            std::printf("DESC %d %d %d %d %llu\n", arr, rows, kbytes, step,
                        wg::tile_desc(arr, 1024u, rows, kbytes, step));
        for (int r = 0; r < rows; ++r) for (int kb = 0; kb < kbytes; ++kb)
            std::printf("ADDR %d %d %d %d %d %u\n", arr, rows, kbytes, r, kb,
                        wg::tile_address(arr, 1024u, rows, kbytes, r, kb));
    }
}
"""


@pytest.fixture(scope="module")
def cuh_dump(tmp_path_factory):
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH (CUDA toolkit)")
    tmp = tmp_path_factory.mktemp("wgcuh")
    src, exe = tmp / "dump.cu", tmp / "dump"
    src.write_text(CUH_DUMP)
    subprocess.run(["nvcc", "-std=c++17", f"-I{runtime.KERNELS_DIR}", "-o", str(exe), str(src)],
                   check=True, capture_output=True, text=True)
    rows: dict[str, list] = {}
    for line in subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.splitlines():
        name, *nums = line.split()
        rows.setdefault(name, []).append(tuple(int(x) for x in nums))
    return rows


@pytest.mark.parametrize(("name", "frag"), [("A16", ("A", None, "f16")), ("A32", ("A", None, "e4m3")),
                                            ("D32", ("D", 256, "f32")), ("D16", ("D", 256, "f16"))])
def test_cuh_fragments_equal_the_python_ones(cuh_dump, name, frag):
    f = wgmma_fragment(frag[0], n=frag[1], dtype=frag[2])
    for t, r, h, row, col in cuh_dump[name]:
        assert (row, col) == f.coords(t, r, h), (name, t, r, h)
    assert len(cuh_dump[name]) == f.rows * f.cols


def test_cuh_tiles_and_descriptors_equal_the_python_ones(cuh_dump):
    tiles = {}
    for arr, rows, kbytes, step, value in cuh_dump["DESC"]:
        t = tiles.setdefault((arr, rows, kbytes), CanonicalTile(rows, kbytes, ARRANGEMENTS[arr], base=1024))
        assert value == t.descriptor(step).encode(), (ARRANGEMENTS[arr], rows, kbytes, step)
    got = np.array(cuh_dump["ADDR"], np.int64)
    for (arr, rows, kbytes), t in tiles.items():
        sel = got[(got[:, 0] == arr) & (got[:, 1] == rows) & (got[:, 2] == kbytes)]
        assert len(sel) == rows * kbytes
        np.testing.assert_array_equal(sel[:, 5], t.address(sel[:, 3], sel[:, 4]))


# ---- the probe -------------------------------------------------------------------------------------

def _kernel_names_in_source() -> set[str]:
    return set(re.findall(r"^WG_KERNEL\((\w+),", runtime.kernel_source(V.PROBE_FILE), re.MULTILINE))


def test_probe_offers_every_form_and_n_of_the_validation():
    want = {f.kernel(n) for f in V.FORMS for n in V.NS}
    assert _kernel_names_in_source() == want


@pytest.fixture(scope="module")
def probe_cubin():
    """probe_wgmma.cu for sm_90a with nvcc; without nvcc, the project's NVRTC build (sm_90: wgmma left out)."""
    path = runtime.kernel_path(V.PROBE_FILE)
    if shutil.which("nvcc") is not None:
        return "sm_90a", runtime.check_compiles_nvcc(path, arch="sm_90a")
    from flashsim.sass.toolchain import compile_cuda

    cubin, _, _ = compile_cuda(path.read_text(), name=path.name,
                               options=(*runtime.BASE_OPTIONS, f"--include-path={runtime.KERNELS_DIR}"))
    return "sm_90", cubin


def test_probe_compiles_with_every_kernel(probe_cubin):
    _, cubin = probe_cubin
    assert cubin[:4] == b"\x7fELF"
    symbols = {m.decode() for m in re.findall(rb"[A-Za-z_][A-Za-z0-9_]{2,}", cubin)}
    missing = _kernel_names_in_source() - symbols
    assert not missing


def test_probe_issues_the_expected_gmma_per_kernel(probe_cubin, tmp_path):
    arch, cubin = probe_cubin
    if arch != "sm_90a":
        pytest.skip("needs nvcc for the sm_90a build")
    from flashsim.sass import toolchain

    try:
        exe = toolchain.nvdisasm_path()
    except toolchain.ToolchainError as exc:
        pytest.skip(str(exc))
    f = tmp_path / "p.cubin"
    f.write_bytes(cubin)
    text = subprocess.run([exe, str(f)], capture_output=True, text=True, check=True).stdout
    bodies = dict(re.findall(r"\.text\.(wgmma_\w+):\n(.*?)(?=\n\s*\.section|\Z)", text, re.S))
    for form in V.FORMS:
        for n in V.NS:
            body = bodies[form.kernel(n)]
            op = "QGMMA" if form.k == 32 else "HGMMA"
            suffix = {("f32", "f16"): "F32", ("f32", "bf16"): "F32.BF16", ("f16", "f16"): "F16"}.get(
                (form.ctype, form.atype), f"{form.ctype.upper()}.{form.atype.upper()}.{form.btype.upper()}")
            a_operand = r"R\d+, gdesc" if form.a_src == "rs" else r"gdesc"
            pat = rf"{op}\.64x{n}x{form.k}\.{re.escape(suffix)} R\d+, {a_operand}"
            assert re.search(pat, body), (form.kernel(n), pat)
            # one per unrolled step (ptxas may add a placeholder GMMA on RZ after the exit)
            assert len(re.findall(r"GMMA\.\S+ R\d+,", body)) == V.MAX_STEPS, form.kernel(n)


# ---- the validation's CPU side -----------------------------------------------------------------------

class FakeDevice:
    """Stands in for the GPU: computes D with a hypothesis (and can misplace elements)."""

    build = {"compiler": "fake"}

    def __init__(self, hypothesis="default", swap_rows=False):
        self.hypothesis, self.swap_rows = hypothesis, swap_rows

    def info(self):
        return {"name": "fake GPU", "compute_capability": "9.0", "driver_release": "0"}

    def run(self, run, a, b, c):
        d = V.model_d(run.form, V.hypotheses(run.form)[self.hypothesis], a, b, c, run.n, run.scale_d)
        if self.swap_rows:
            d = d.copy()
            d[:, [0, 8]] = d[:, [8, 0]]  # a fragment bug: rows g and g+8 exchanged for g = 0
        return d


def test_input_sets_have_the_shapes_and_values_of_every_form():
    rng = np.random.default_rng(8)
    for form in V.FORMS:
        for name in V.SET_NAMES:
            a, b, c = V.input_set(name, rng, form, 16, 2, 2)
            af = formats.FP8_FORMATS.get(form.atype) or formats.FORMATS[form.atype]
            assert a.shape == (2, 64, 2 * form.k) and a.dtype == af.dtype, (form.name, name)
            assert b.shape == (2, 2 * form.k, 16) and c.shape == (2, 64, 16), (form.name, name)
            if name not in ("specials", "inf_nan"):
                for x, t in ((a, form.atype), (b, form.btype), (c, form.ctype)):
                    assert np.isfinite(_f64(x, t)).all(), (form.name, name)
        if form.k == 16:
            for name in V._mma_sets_of(form):
                a, b, c = V.input_set("mma:" + name, rng, form, 16, 1, 4)
                assert a.shape == (4, 64, 16) and b.shape == (4, 16, 16) and c.shape == (4, 64, 16)
                np.testing.assert_array_equal(a[:, :16], a[:, 48:])


def test_validation_reports_a_matching_device(tmp_path):
    argv = ["--out", str(tmp_path), "--cases", "1", "--forms", "ss.f32.f16.f16,rs.f32.e4m3.e4m3", "--ns", "8,16"]
    assert V.main(argv, device=FakeDevice()) == 0
    report = json.loads((tmp_path / "wgmma_report.json").read_text())
    assert report["provenance"]["name"] == "fake GPU" and report["provenance"]["seed"] == 20261124
    forms = {f["form"]: f for f in report["forms"]}
    f16, f8 = forms["ss.f32.f16.f16"], forms["rs.f32.e4m3.e4m3"]
    assert f16["mismatches"] == 0 and f8["mismatches"] == 0
    assert f8["hypotheses"]["fp8_25"] > 0 and f8["hypotheses"]["exact"] > 0 and f8["hypotheses"]["order=reversed"] > 0
    assert f16["hypotheses"]["frac_bits=24"] > 0 and f16["hypotheses"]["products_per_step=8"] > 0
    assert "default" in f8["best"] and "fp8_25" not in f8["best"]
    assert f16["by"]["config=mma_sets"]["default"]["outputs"] > 0
    assert any("follows the mma.sync sm_90 rule" in d and "yes" in d for d in report["decisions"])
    md = (tmp_path / "wgmma_report.md").read_text()
    assert "## What the run decides" in md and "m64nNk32.f32.e4m3.e4m3 (A from registers)" in md
    from flashsim.golden import load

    arrays, prov = load(tmp_path / "wgmma_samples.npz")
    assert prov["build"] == {"compiler": "fake"} and "rs.f32.e4m3.e4m3/n8/s1/d" in arrays
    replay = V.replay_samples(tmp_path / "wgmma_samples.npz")
    assert replay and all(m == 0 for m, _ in replay.values())


def test_validation_names_the_hypothesis_an_exact_device_follows(tmp_path):
    argv = ["--out", str(tmp_path), "--cases", "1", "--forms", "ss.f32.e5m2.e5m2", "--ns", "8"]
    assert V.main(argv, device=FakeDevice("exact")) == 1
    report = json.loads((tmp_path / "wgmma_report.json").read_text())
    f = report["forms"][0]
    assert f["mismatches"] > 0 and f["best"] == ["exact"]
    assert any("fits best: ['exact'] (exactly)" in d for d in report["decisions"])
    assert sum(m for m, _ in V.replay_samples(tmp_path / "wgmma_samples.npz", "exact").values()) == 0


def test_validation_shows_where_misplaced_elements_came_from(tmp_path):
    argv = ["--out", str(tmp_path), "--cases", "1", "--forms", "rs.f32.bf16.bf16", "--ns", "16"]
    assert V.main(argv, device=FakeDevice(swap_rows=True)) == 1
    f = json.loads((tmp_path / "wgmma_report.json").read_text())["forms"][0]
    moved = {(tuple(x["element"]), tuple(x.get("gpu_value_of", ()))) for x in f["layout_misplaced"]}
    assert ((0, 0), (8, 0)) in moved and ((0, 5), (8, 5)) in moved


def test_validation_rejects_unknown_forms(tmp_path, capsys):
    with pytest.raises(SystemExit):
        V.main(["--out", str(tmp_path), "--forms", "ss.f32.tf32.tf32"], device=FakeDevice())
    assert "unknown ['ss.f32.tf32.tf32']" in capsys.readouterr().err


# ---- the H100 record (traces/wgmma) ---------------------------------------------------------------------

H100_SAMPLES = Path(__file__).resolve().parents[1] / "traces" / "wgmma" / "wgmma_samples.npz"


def test_the_h100_samples_replay_bit_for_bit():
    """The GPU outputs stored on the H100 (every form, N 8, chains of 1 and 2) recomputed by the model: every
    form bit for bit, the fp8 -> f32 forms under the 1-8-13 accumulator (FP8_F32), which the earlier
    hypotheses (13 fraction bits then RZ to f32) missed."""
    replay = V.replay_samples(H100_SAMPLES)
    assert len(replay) == 22  # N = 8: 11 forms x chains of 1 and 2
    assert all(mism == 0 for mism, _ in replay.values()), replay
    assert sum(n for group, (_, n) in replay.items() if ".f32.e" in group) == 94208
    # the earlier closest hypothesis leaves most of them wrong
    z = np.load(H100_SAMPLES)
    p = "ss.f32.e4m3.e4m3/n8/s1/"
    one = z[p + "scale_d"] == 1
    old = W.wgmma(z[p + "a"][one], z[p + "b"][one], z[p + "c"][one], n=8, atype="e4m3", ctype="f32", model="fp8_13")
    assert (old != z[p + "d"][one]).sum() > 1000


def test_the_held_out_h100_run_agrees_on_every_element():
    """The run of traces/wgmma/wgmma_report_heldout.json.gz (inputs drawn with a seed the rule was not read off):
    the default hypothesis of every form, fp8 -> f32 included, 0 mismatches on every D element."""
    import gzip

    rep = json.loads(gzip.open(H100_SAMPLES.parent / "wgmma_report_heldout.json.gz", "rt").read())
    assert rep["provenance"]["name"].startswith("NVIDIA H100") and rep["provenance"]["seed"] == 20261125
    forms = {f["form"]: f for f in rep["forms"]}
    assert len(forms) == 11 and all(f["hypotheses"]["default"] == 0 for f in forms.values())
    fp8_f32 = [f for name, f in forms.items() if name.split(".")[1] == "f32" and name.split(".")[2] in ("e4m3", "e5m2")]
    assert len(fp8_f32) == 4 and sum(f["outputs"] for f in fp8_f32) == 23683072
    assert all(f["hypotheses"]["fp8_13"] > 0 for f in fp8_f32)  # the earlier closest hypothesis misses


def test_every_fp8_pair_agrees_on_the_h100():
    """traces/wgmma/wgmma_report_fp8forms.json.gz: the fp8 pairs the first runs left out (e5m2 -> f16, e4m3 x e5m2
    -> f16, e5m2 x e4m3 -> f16 and -> f32) on the H100: every D element of the default rule."""
    import gzip

    rep = json.loads(gzip.open(H100_SAMPLES.parent / "wgmma_report_fp8forms.json.gz", "rt").read())
    forms = {f["form"]: f for f in rep["forms"]}
    assert set(forms) == {"ss.f16.e5m2.e5m2", "ss.f16.e4m3.e5m2", "ss.f32.e5m2.e4m3", "ss.f16.e5m2.e4m3"}
    assert all(f["hypotheses"]["default"] == 0 and f["outputs"] == 5920768 for f in forms.values())
    assert {f.name for f in V.FORMS} >= set(forms)


def test_the_fp8_f32_rule_on_the_mma_engine_agrees_with_a_third_h100_run():
    import gzip

    rep = json.loads(gzip.open(H100_SAMPLES.parent / "wgmma_report_fp8f32_review.json.gz", "rt").read())
    forms = {f["form"]: f for f in rep["forms"]}
    assert len(forms) == 5 and all(f["form"].split(".")[1] == "f32" for f in forms.values())
    assert all(f["hypotheses"]["default"] == 0 and f["outputs"] == 5920768 for f in forms.values())


def _f32(x) -> np.ndarray:
    return np.asarray(x, np.float32).view(np.uint32)


def test_fp8_f32_accumulator_keeps_14_significant_bits():
    e4m3 = lambda v: np.asarray(v, ml_dtypes.float8_e4m3fn).view(np.uint8)  # noqa: E731
    a = np.zeros((64, 32), np.uint8)
    b = np.zeros((32, 8), np.uint8)
    a[0, 0], b[0, 0] = e4m3(1.0), e4m3(1.0)  # one product 1.0
    c = np.zeros((64, 8), np.uint32)
    c[0, 0] = _f32(1.0 + 3 * 2.0 ** -13 + 2.0 ** -20)[()]  # C's bits below 2^-13 (E = 0) are truncated
    d = W.wgmma(a, b, c, n=8, atype="e4m3", ctype="f32")
    # the sum 2 + 3 * 2^-13 keeps 13 fraction bits of its own exponent (1): 2 + 2^-12
    assert d[0, 0].view(np.float32) == np.float32(2.0 + 2.0 ** -12)
    c[0, 0] = _f32(-1.0)[()]
    d = W.wgmma(a, b, c, n=8, atype="e4m3", ctype="f32")
    assert d[0, 0] == 0 and d[1, 0] == 0  # an exact zero is +0
    c[0, 0] = _f32(2.0 ** 13 - 1)[()]  # 13 bits of C below 2^12: 1 + (2^13 - 1) = 2^13 exactly
    assert W.wgmma(a, b, c, n=8, atype="e4m3", ctype="f32")[0, 0].view(np.float32) == np.float32(2.0 ** 13)
    c[0, 0] = _f32(2.0 ** 14 + 2.0)[()]  # E = 14: the product 1.0 is below 2^(14-13) and truncated away
    assert W.wgmma(a, b, c, n=8, atype="e4m3", ctype="f32")[0, 0].view(np.float32) == np.float32(2.0 ** 14 + 2.0)
    c[0, 0] = np.uint32(0x7FC00000)  # a NaN C: the canonical NaN
    assert W.wgmma(a, b, c, n=8, atype="e4m3", ctype="f32")[0, 0] == 0x7FFFFFFF


def test_fp8_f32_aligns_to_exponent_fields_with_subnormals_at_emin():
    # the largest term is a product of two subnormal operands: its exponent is emin + emin = -12, not its value's
    # (2^-9 * 2^-9 = 2^-18), so terms are kept to 2^-25 and C = 2^-26 is truncated away (kept under 2^-18)
    e4m3 = lambda v: np.asarray(v, ml_dtypes.float8_e4m3fn).view(np.uint8)  # noqa: E731
    a = np.zeros((64, 32), np.uint8)
    b = np.zeros((32, 8), np.uint8)
    a[0, 0], b[0, 0] = e4m3(2.0 ** -9), e4m3(2.0 ** -9)
    c = np.zeros((64, 8), np.uint32)
    c[0, 0] = _f32(2.0 ** -26)[()]
    d = W.wgmma(a, b, c, n=8, atype="e4m3", ctype="f32")[0, 0].view(np.float32)
    assert d == np.float32(2.0 ** -18)
    with pytest.raises(ArgumentError, match="fp8_f32 is the e4m3/e5m2 -> f32 rule"):
        W.wgmma(a, b, np.zeros((64, 8), np.uint16), n=8, atype="e4m3", ctype="f16", model="fp8_f32")
