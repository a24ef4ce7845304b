"""flash_attn_func: the built kernels through the twin (and the GPU under --gpu), and clear refusals."""

import ml_dtypes
import numpy as np
import pytest

from flashsim import ArgumentError
from flashsim.api import flash_attn_func
from flashsim.kernels import fa_v5


def _qkv(seed=0, s=64, h=2, d=32, dtype=np.float16):
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal((1, s, h, d)).astype(dtype) for _ in range(3))


def test_v5_and_v6_run_through_the_twin():
    q, k, v = _qkv()
    out = flash_attn_func(q, k, v, kernel="v5")
    assert out.dtype == np.float16 and out.shape == q.shape
    assert np.array_equal(out.view(np.uint16), fa_v5.run(q, k, v).view(np.uint16))
    assert np.array_equal(flash_attn_func(q, k, v, kernel="v6").view(np.uint16), out.view(np.uint16))
    scaled = flash_attn_func(q, k, v, softmax_scale=0.3, kernel="v5")
    assert not np.array_equal(scaled, out)


@pytest.mark.parametrize("kw,match", [
    (dict(kernel="fa2"), "kernel 'fa2' is not built yet"),
    (dict(kernel="kernel1"), "kernel 'kernel1' is not built yet"),
    (dict(kernel="v5", causal=True), "does not model causal or local masks"),
    (dict(kernel="v5", window_size=(8, 8)), "does not model causal or local masks"),
    (dict(kernel="v5", softcap=30.0), "does not model softcap"),
    (dict(kernel="v5", dropout_p=0.1), "dropout"),
])
def test_refusals_name_what_is_missing(kw, match):
    q, k, v = _qkv()
    with pytest.raises(NotImplementedError, match=match):
        flash_attn_func(q, k, v, **kw)


def test_bf16_gqa_and_bad_arguments():
    q, k, v = _qkv(dtype=ml_dtypes.bfloat16)
    with pytest.raises(NotImplementedError, match="bf16"):
        flash_attn_func(q, k, v, kernel="v5")
    q, k, v = _qkv()
    with pytest.raises(NotImplementedError, match="GQA/MQA"):
        flash_attn_func(q, k[:, :, :1], v[:, :, :1], kernel="v5")
    with pytest.raises(ArgumentError, match="kernel='v9'"):
        flash_attn_func(q, k, v, kernel="v9")
    with pytest.raises(ArgumentError, match="backend='cpu'"):
        flash_attn_func(q, k, v, kernel="v5", backend="cpu")
    with pytest.raises(ArgumentError, match=r"seqlen_q % 64"):
        flash_attn_func(*_qkv(s=32), kernel="v5")


@pytest.mark.gpu
def test_gpu_backend_equals_the_sim_backend():
    q, k, v = _qkv(seed=3, s=128, d=64)
    for kernel in ("v5", "v6"):
        gpu = flash_attn_func(q, k, v, kernel=kernel, backend="gpu")
        sim = flash_attn_func(q, k, v, kernel=kernel, backend="sim")
        assert np.array_equal(gpu.view(np.uint16), sim.view(np.uint16))
