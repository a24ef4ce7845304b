"""The instruction probes on a real GPU, checked against answers known without any model (identity and
small-integer products, exact conversions), plus the wrappers' argument checks (those need no GPU)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from flashsim.errors import ArgumentError
from flashsim.gpu import probes, runtime
from flashsim.gpu.runtime import CompileError, LaunchError

gpu = pytest.mark.gpu
DATA = Path(__file__).resolve().parent / "data"


def f32_bits(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float32).view(np.uint32)


def f16_bits(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float16).view(np.uint16)


def bf16_bits(x) -> np.ndarray:
    """bf16 encoding of values that bf16 holds exactly: the upper half of the f32 encoding."""
    bits = f32_bits(x)
    assert not np.any(bits & 0xFFFF), "value not exact in bf16"
    return (bits >> 16).astype(np.uint16)


ENCODE = {"f16": f16_bits, "bf16": bf16_bits}
MMA_CASES = [(shape, a, c) for (shape, a, c) in probes.MMA_KERNELS]


def _values(bits: np.ndarray, ctype: str) -> np.ndarray:
    return bits.view(np.float32) if ctype == "f32" else bits.view(np.float16).astype(np.float32)


def _small_ints(rng, shape, lo, hi) -> np.ndarray:
    return rng.integers(lo, hi + 1, size=shape).astype(np.float32)


# ---------------------------------------------------------------------------------------------- mma


@gpu
@pytest.mark.parametrize(("shape", "atype", "ctype"), MMA_CASES)
def test_mma_identity_times_b_is_b(shape, atype, ctype):
    rng = np.random.default_rng(1)
    k = 16 if shape == "m16n8k16" else 8
    tiles = 37  # not a multiple of the 8 warps of a block: the n_tiles guard is exercised
    eye = np.zeros((tiles, 16, k), np.float32)
    eye[:, np.arange(k), np.arange(k)] = 1.0  # rows >= k of A are zero for k8
    b = _small_ints(rng, (tiles, k, 8), -8, 8)
    c = np.zeros((tiles, 16, 8), np.float32)
    cbits = f32_bits(c) if ctype == "f32" else f16_bits(c)
    d = probes.run_mma(ENCODE[atype](eye), ENCODE[atype](b), cbits, shape=shape, atype=atype, ctype=ctype)
    assert d.dtype == cbits.dtype and d.shape == (tiles, 16, 8)
    want = np.zeros((tiles, 16, 8), np.float32)
    want[:, :k] = b
    np.testing.assert_array_equal(_values(d, ctype), want)


@gpu
@pytest.mark.parametrize(("shape", "atype", "ctype"), MMA_CASES)
def test_mma_small_integers_are_exact(shape, atype, ctype):
    # |sum| <= 16 * 9 + 8: exact in f16 and f32, so any correct rounding gives the integer
    rng = np.random.default_rng(2)
    k = 16 if shape == "m16n8k16" else 8
    tiles = 9
    a = _small_ints(rng, (tiles, 16, k), -3, 3)
    b = _small_ints(rng, (tiles, k, 8), -3, 3)
    c = _small_ints(rng, (tiles, 16, 8), -8, 8)
    cbits = f32_bits(c) if ctype == "f32" else f16_bits(c)
    d = probes.run_mma(ENCODE[atype](a), ENCODE[atype](b), cbits, shape=shape, atype=atype, ctype=ctype)
    np.testing.assert_array_equal(_values(d, ctype), a @ b + c)


@gpu
def test_mma_batch_axes_are_kept():
    rng = np.random.default_rng(3)
    a = _small_ints(rng, (2, 3, 16, 16), -2, 2)
    b = _small_ints(rng, (2, 3, 16, 8), -2, 2)
    c = np.zeros((2, 3, 16, 8), np.float32)
    d = probes.run_mma(f16_bits(a), f16_bits(b), f32_bits(c), atype="f16", ctype="f32")
    assert d.shape == (2, 3, 16, 8)
    np.testing.assert_array_equal(d.view(np.float32), a @ b)


@gpu
def test_mma_single_tile_without_leading_axis():
    a = f16_bits(np.eye(16))
    b = f16_bits(np.arange(128).reshape(16, 8) % 7)
    c = f32_bits(np.ones((16, 8)))
    d = probes.run_mma(a, b, c, atype="f16", ctype="f32")
    assert d.shape == (16, 8)
    np.testing.assert_array_equal(d.view(np.float32), np.arange(128).reshape(16, 8) % 7 + 1)


# ---------------------------------------------------------------------------------------------- f32

NORMALS = np.array([1.0, -1.0, 1.5, -2.75, 3.0e-38, -1.0e38, 123.456, 2.0**-126], np.float32)
SUBNORMAL = np.uint32(0x00000001)


@gpu
@pytest.mark.parametrize("op", ["ffma_rn", "ffma_rn_ftz"])
def test_ffma_one_times_x_plus_zero_is_x(op):
    x = f32_bits(NORMALS)
    d = probes.run_f32(op, x, f32_bits(1.0), f32_bits(0.0))  # scalars broadcast
    np.testing.assert_array_equal(d, x)
    assert probes.run_f32(op, f32_bits(2.0), f32_bits(3.0), f32_bits(1.0)) == f32_bits(7.0)


@gpu
@pytest.mark.parametrize(
    ("op", "a", "b", "want"),
    [
        ("fadd_rn", 1.5, 2.25, 3.75),
        ("fadd_rn_ftz", 1.5, 2.25, 3.75),
        ("fmul_rn", 1.5, -2.0, -3.0),
        ("fmul_rn_ftz", 1.5, -2.0, -3.0),
        ("fmax", 1.0, 2.0, 2.0),
        ("fmin", 1.0, 2.0, 1.0),
        ("fmax_ftz", -1.0, -2.0, -1.0),
        ("fmin_ftz", -1.0, -2.0, -2.0),
        ("fmax_nan", 1.0, 2.0, 2.0),
        ("fmin_nan", 1.0, 2.0, 1.0),
    ],
)
def test_f32_binary_ops_on_exact_values(op, a, b, want):
    assert probes.run_f32(op, f32_bits([a]), f32_bits([b])) == f32_bits([want])


@gpu
def test_ftz_flushes_a_subnormal_operand_and_plain_forms_keep_it():
    zero, one = f32_bits(0.0), f32_bits(1.0)
    assert probes.run_f32("ffma_rn", SUBNORMAL, one, zero) == SUBNORMAL
    assert probes.run_f32("ffma_rn_ftz", SUBNORMAL, one, zero) == 0
    assert probes.run_f32("fadd_rn", SUBNORMAL, zero) == SUBNORMAL
    assert probes.run_f32("fadd_rn_ftz", SUBNORMAL, zero) == 0
    assert probes.run_f32("fmul_rn", SUBNORMAL, one) == SUBNORMAL
    assert probes.run_f32("fmul_rn_ftz", SUBNORMAL, one) == 0


@gpu
def test_max_min_ignore_nan_and_nan_forms_propagate_it():
    nan, one = f32_bits(np.nan), f32_bits(1.0)
    assert probes.run_f32("fmax", nan, one) == one  # PTX max.f32: a NaN operand is ignored
    assert probes.run_f32("fmin", one, nan) == one
    assert np.isnan(probes.run_f32("fmax_nan", nan, one).view(np.float32))
    assert np.isnan(probes.run_f32("fmin_nan", one, nan).view(np.float32))


# ---------------------------------------------------------------------------------------------- cvt

EXACT = np.array([0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 1024.0, 2.0**-14], np.float32)  # exact in f16 and bf16
TO16 = [op for op, s in probes.CVT_SPECS.items() if s.arity == 1 and s.src == np.uint32]
X2 = [op for op, s in probes.CVT_SPECS.items() if s.arity == 2]


def _encoder(op: str):
    return bf16_bits if ".bf16" in op else f16_bits


@gpu
@pytest.mark.parametrize("op", TO16)
def test_cvt_to_16_bit_of_exact_values_is_exact(op):
    d = probes.run_cvt(op, f32_bits(EXACT))
    assert d.dtype == np.uint16
    np.testing.assert_array_equal(d, _encoder(op)(EXACT))


@gpu
@pytest.mark.parametrize("op", [op for op in TO16 + X2 if ".relu" in op])
def test_cvt_relu_clamps_negative_values_to_zero(op):
    x = f32_bits([-1.0, -1024.0])
    d = probes.run_cvt(op, x, x) if op in X2 else probes.run_cvt(op, x)
    np.testing.assert_array_equal(d, 0)


@gpu
@pytest.mark.parametrize("op", [op for op in TO16 if ".satfinite" in op])
def test_cvt_satfinite_clamps_to_the_largest_finite_value(op):
    if ".bf16" in op:
        d = probes.run_cvt(op, np.array([0x7F7FFFFF], np.uint32))  # FLT_MAX: rn alone would give +inf
        assert d == 0x7F7F
    else:
        d = probes.run_cvt(op, f32_bits([1.0e30]))
        assert d == 0x7BFF  # 65504


@gpu
def test_cvt_f16_to_f32_matches_numpy_on_every_non_nan_pattern():
    x = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    x = x[~np.isnan(x.view(np.float16))]
    d = probes.run_cvt("cvt.f32.f16", x)
    np.testing.assert_array_equal(d, x.view(np.float16).astype(np.float32).view(np.uint32))


@gpu
def test_cvt_bf16_to_f32_is_a_shift_on_every_non_nan_pattern():
    x = np.arange(1 << 16, dtype=np.uint32)
    x = x[~np.isnan((x << 16).view(np.float32))].astype(np.uint16)
    d = probes.run_cvt("cvt.f32.bf16", x)
    np.testing.assert_array_equal(d, x.astype(np.uint32) << 16)


@gpu
@pytest.mark.parametrize("op", X2)
def test_cvt_x2_puts_the_first_source_in_the_upper_half(op):
    hi, lo = EXACT, EXACT[::-1].copy()
    d = probes.run_cvt(op, f32_bits(hi), f32_bits(lo))
    enc = _encoder(op)
    want = (enc(hi).astype(np.uint32) << 16) | enc(lo).astype(np.uint32)
    np.testing.assert_array_equal(d, want)
    if op == "cvt.rn.f16x2.f32":
        assert probes.run_cvt(op, f32_bits(1.0), f32_bits(2.0)) == 0x3C004000


# ---------------------------------------------------------------------------------------------- runtime


@gpu
def test_device_info_fields():
    info = runtime.device_info()
    assert set(info) >= {"name", "compute_capability", "arch", "driver_version", "cuda_runtime_version",
                         "nvrtc_version", "cupy_version"}
    major, minor = info["compute_capability"].split(".")
    assert info["arch"] == f"sm_{major}{minor}" == runtime.current_arch()


@gpu
def test_load_module_is_cached_in_process():
    assert runtime.load_module("probe_f32.cu") is runtime.load_module("probe_f32.cu")
    assert runtime.load_module("probe_f32.cu") is not runtime.load_module("probe_f32.cu", options=("-lineinfo",))


@gpu
def test_nvrtc_compile_error_names_the_file_and_carries_the_log(monkeypatch):
    from flashsim.kernels import sources

    monkeypatch.setattr(sources, "KERNELS_DIR", DATA)
    with pytest.raises(CompileError, match=r"broken_kernel\.cu") as info:
        runtime.load_module("broken_kernel.cu")
    assert info.value.compiler == "nvrtc"
    assert info.value.filename.endswith("broken_kernel.cu")
    assert "flashsim_undeclared_identifier" in info.value.log
    assert "broken_kernel.cu(3)" in info.value.log  # #line maps NVRTC's diagnostics to the real file


@gpu
def test_launch_error_names_the_kernel():
    import cupy

    kernel = runtime.get_kernel("probe_f32.cu", "probe_fadd_rn")
    x = cupy.zeros(4, dtype=cupy.uint32)
    with pytest.raises(LaunchError, match="probe_fadd_rn") as info:
        runtime.launch(kernel, 1, 32, (x, x, x, np.uint64(4)), shared_mem=1 << 20)  # 1 MiB: too much
    assert info.value.kernel == "probe_fadd_rn"


@gpu
def test_get_kernel_of_unknown_function_is_an_argument_error():
    with pytest.raises(ArgumentError, match=r"^function='no_such_kernel'"):
        runtime.get_kernel("probe_f32.cu", "no_such_kernel")


# ---------------------------------------------------------------------------------------------- no GPU


def test_op_lists_name_ptx_instructions():
    assert len(set(probes.CVT_OPS)) == len(probes.CVT_OPS)
    assert "cvt.rn.f16.f32" in probes.CVT_OPS and "cvt.rn.relu.satfinite.bf16.f32" in probes.CVT_OPS
    assert {"cvt.f32.f16", "cvt.f32.bf16", "cvt.rn.f16x2.f32", "cvt.rn.bf16x2.f32"} <= set(probes.CVT_OPS)
    assert probes.cvt_kernel_name("cvt.rz.ftz.f16.f32") == "probe_cvt_rz_ftz_f16_f32"
    assert probes.F32_OPS == tuple(probes.F32_ARITY)


U16 = np.zeros((2, 16, 16), np.uint16)
B16 = np.zeros((2, 16, 8), np.uint16)
C32 = np.zeros((2, 16, 8), np.uint32)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: probes.run_mma(U16, B16, C32, shape="m16n8k32", atype="f16", ctype="f32"), r"^shape='m16n8k32'"),
        (lambda: probes.run_mma(U16, B16, C32, atype="bf16", ctype="f16"), r"^atype/ctype=\('bf16', 'f16'\)"),
        (lambda: probes.run_mma(U16, B16, B16, atype="f16", ctype="f32"), r"^c=array\(shape=\(2, 16, 8\), dtype=uint16\)"),
        (lambda: probes.run_mma(U16.astype(np.float16), B16, C32, atype="f16", ctype="f32"), r"^a=.*dtype=float16"),
        (lambda: probes.run_mma(U16, B16, C32, shape="m16n8k8", atype="f16", ctype="f32"), r"^a=.*\(\.\.\., 16, 8\)"),
        (lambda: probes.run_mma(U16, B16[:1], C32, atype="f16", ctype="f32"), r"^b/c=.*batch shapes"),
        (lambda: probes.run_f32("fsqrt", C32), r"^op='fsqrt'"),
        (lambda: probes.run_f32("ffma_rn", C32, C32), r"^c=None: ffma_rn takes 3 operands"),
        (lambda: probes.run_f32("fadd_rn", C32, C32, C32), r"^c=.*takes only 2 operands"),
        (lambda: probes.run_f32("fadd_rn", C32, C32[:, :3]), r"^a/b=.*do not broadcast"),
        (lambda: probes.run_cvt("cvt.rm.relu.f16.f32", C32), r"^op='cvt.rm.relu.f16.f32'"),
        (lambda: probes.run_cvt("cvt.f32.f16", C32), r"^x=.*uint16 array of f16"),
        (lambda: probes.run_cvt("cvt.rn.f16x2.f32", C32), r"^y=None: .*upper half"),
        (lambda: probes.run_cvt("cvt.rn.f16.f32", C32, C32), r"^y=.*takes one source"),
    ],
)
def test_wrappers_reject_bad_arguments_without_a_gpu(call, match):
    with pytest.raises(ArgumentError, match=match):
        call()


def test_empty_inputs_need_no_gpu():
    assert probes.run_f32("fadd_rn", C32[:0], C32[:0]).shape == (0, 16, 8)
    assert probes.run_cvt("cvt.rn.f16.f32", C32[:0]).dtype == np.uint16
    assert probes.run_mma(U16[:0], B16[:0], C32[:0], atype="f16", ctype="f32").shape == (0, 16, 8)
