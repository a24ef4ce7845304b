"""The seed-001 CUDA kernels v5/v6 (gpu/kernels/fa_v5.cu) through gpu.fa_kernels.run_fa.

CPU tests: argument and precondition errors (raised before cupy is imported). GPU tests (``--gpu``):
flash-attn's accuracy rule against float64, v5 == v6 bit for bit, NaN propagation.
"""

from __future__ import annotations

import sys

import ml_dtypes
import numpy as np
import pytest
from fa_problems import random_problem

from flashsim.attention import attention_lowp, attention_reference, check_args, passes_flash_attn_rule
from flashsim.errors import ArgumentError
from flashsim.gpu import fa_kernels
from flashsim.gpu.fa_kernels import FA_KERNELS, run_fa, run_kernel
from flashsim.kernels.spec import get

gpu = pytest.mark.gpu


def _zeros(batch=1, seqlen=64, heads=1, d=16, dtype=np.float16):
    return np.zeros((batch, seqlen, heads, d), dtype=dtype)


# ------------------------------------------------------------------------------------- CPU: preconditions


@pytest.mark.parametrize(
    ("q", "k", "match"),
    [
        (_zeros(seqlen=32), _zeros(seqlen=64), r"seqlen_q % 64 == 0"),
        (_zeros(seqlen=80), _zeros(seqlen=64), r"seqlen_q % 64 == 0"),
        (_zeros(), _zeros(seqlen=40), r"seqlen_k % 16 == 0"),
        (_zeros(d=8), _zeros(d=8), r"headdim % 16 == 0"),
        (_zeros(d=24), _zeros(d=24), r"headdim % 16 == 0"),
    ],
)
@pytest.mark.parametrize("kernel", ["v5", "v6"])
def test_precondition_errors_name_the_precondition(kernel, q, k, match):
    with pytest.raises(ArgumentError, match=match):
        run_fa(kernel, q, k, k.copy())


def test_unknown_kernel():
    q = _zeros()
    with pytest.raises(ArgumentError, match=r"kernel='v7'"):
        run_fa("v7", q, q, q)


def test_float16_only():
    q = np.zeros((1, 64, 1, 16), dtype=np.float32)
    with pytest.raises(ArgumentError):
        run_fa("v5", q, q, q)
    b = _zeros().astype(ml_dtypes.bfloat16)
    with pytest.raises(NotImplementedError, match="does not model bf16"):
        run_fa("v5", b, b, b)


def test_non_numpy_input_is_rejected():
    q = _zeros()
    with pytest.raises(ArgumentError, match="expected a numpy array"):
        run_fa("v6", q.tolist(), q, q)


def test_argument_errors_do_not_import_cupy(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # importing cupy would now fail
    with pytest.raises(ArgumentError, match=r"seqlen_q % 64"):
        run_fa("v5", _zeros(seqlen=16), _zeros(), _zeros())


@pytest.mark.parametrize(("kernel", "q", "k", "match"), [
    ("kernel1", _zeros(d=64), _zeros(d=64), r"headdim 128 only"),
    ("kernel1", _zeros(seqlen=64, d=128), _zeros(seqlen=128, d=128), r"seqlen_q == seqlen_k"),
    ("fa2_sm8x", _zeros(d=160), _zeros(d=160), r"head dims up to 128"),
    ("fa2", _zeros(heads=3), _zeros(heads=2), r"\(2\) must divide number of heads in query \(3\)"),
])
def test_kernel1_and_fa2_preconditions(kernel, q, k, match, monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # checked before any cupy import
    with pytest.raises(ArgumentError, match=match):
        run_kernel(kernel, q, k, k.copy())


def test_features_are_refused_by_the_kernels_without_them(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # refused before any cupy import
    with pytest.raises(NotImplementedError, match="kernel 'kernel1' does not model causal or local masks"):
        run_kernel("kernel1", _zeros(d=128), _zeros(d=128), _zeros(d=128), causal=True)
    for kernel in ("v5", "kernel1"):
        with pytest.raises(NotImplementedError, match=f"kernel '{kernel}' does not model GQA/MQA"):
            run_kernel(kernel, _zeros(heads=2, d=128), _zeros(heads=1, d=128), _zeros(heads=1, d=128))


def test_smem_formula_matches_the_seed():
    # the seed: about 31.5 KB at d = 128 (f16 tiles + 3 x 64 MD_F of 8 bytes)
    for kernel in ("v5", "v6"):
        assert get(kernel).instance(128).smem_bytes == 2 * (64 * 128 + 2 * 16 * 128 + 3 * 64 * 16) + 3 * 64 * 8 == 32256


# ------------------------------------------------------------------------------------------- GPU


@gpu
@pytest.mark.parametrize("seed", range(24))
def test_v5_v6_pass_flash_attn_rule_and_agree_bitwise(seed):
    q, k, v = random_problem(seed)
    args = check_args(q, k, v)
    ref, _ = attention_reference(q, k, v, args)
    lowp, _ = attention_lowp(q, k, v, args, acc="f16")
    out5 = run_fa("v5", q, k, v)
    out6 = run_fa("v6", q, k, v)
    assert out5.dtype == np.float16 and out5.shape == q.shape
    r5, r6 = passes_flash_attn_rule(out5, ref, lowp), passes_flash_attn_rule(out6, ref, lowp)
    assert r5, r5
    assert r6, r6
    # swizzling changes smem addresses only: the arithmetic and so every output bit must be the same
    np.testing.assert_array_equal(out5.view(np.uint16), out6.view(np.uint16))


@gpu
@pytest.mark.parametrize("kernel", sorted(FA_KERNELS))
def test_nan_propagates(kernel):
    rng = np.random.default_rng(6)
    b, s, h, d = 2, 128, 2, 128  # in every kernel's domain (kernel1: d = 128)
    q = rng.standard_normal((b, s, h, d)).astype(np.float16)
    k = rng.standard_normal((b, s, h, d)).astype(np.float16)
    v = rng.standard_normal((b, s, h, d)).astype(np.float16)
    # a NaN in one query row poisons exactly that output row
    q_nan = q.copy()
    q_nan[1, 70, 0, 5] = np.nan
    out = run_fa(kernel, q_nan, k, v)
    assert np.isnan(out[1, 70, 0]).all()
    mask = np.ones(out.shape[:3], dtype=bool)
    mask[1, 70, 0] = False
    assert np.isfinite(out[mask]).all()
    # a NaN in V poisons one column of every output row of that (batch, head)
    v_nan = v.copy()
    v_nan[0, 33, 1, 7] = np.nan
    out = run_fa(kernel, q, k, v_nan)
    assert np.isnan(out[0, :, 1, 7]).all()
    assert np.isfinite(np.delete(out[0, :, 1], 7, axis=-1)).all()
    assert np.isfinite(out[1]).all() and np.isfinite(out[0, :, 0]).all()


@gpu
def test_module_compiles_with_nvrtc():
    from flashsim import device

    for name, spec in FA_KERNELS.items():
        for function in fa_kernels.function_names(name):
            device.get_kernel(spec.source, function, options=spec.options)
