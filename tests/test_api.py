"""flash_attn_func: the built kernels through the twin (and the GPU under --gpu), and clear refusals."""

import ml_dtypes
import numpy as np
import pytest

from flashsim import ArgumentError
from flashsim.api import flash_attn_func
from flashsim.kernels import fa2, fa_v5, kernel1


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
    (dict(kernel="kernel1", causal=True), "kernel 'kernel1' does not model causal or local masks"),
    (dict(kernel="kernel1", softcap=5.0), "kernel 'kernel1' does not model softcap"),
    (dict(kernel="v5", return_attn_probs=True), "kernel 'v5' writes no softmax LSE"),
    (dict(kernel="kernel1", alibi_slopes=np.ones(2, np.float32)), "kernel 'kernel1' does not model ALiBi"),
    (dict(kernel="v6", alibi_slopes=np.ones(2, np.float32)), "kernel 'v6' does not model ALiBi"),
    (dict(kernel="kernel1", dropout_p=0.1), "kernel 'kernel1' does not model dropout"),
    (dict(kernel="fa2_chunked", dropout_p=0.1), "kernel 'fa2_chunked' does not model dropout"),
    (dict(kernel="fa4h", dropout_p=0.1), "kernel 'fa4h' does not model dropout"),
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


def test_a_v_head_dim_of_its_own_runs_only_where_an_instance_takes_it():
    q, k, v = _qkv(s=64, d=64)
    with pytest.raises(NotImplementedError, match="kernel 'fa2' does not model a V head dim other than Q's"):
        flash_attn_func(q, k, v[..., :32], kernel="fa2")
    with pytest.raises(ArgumentError, match=r"^v=.*kernel 'fa4h' at head dim 64 takes v of head dim 64"):
        flash_attn_func(q, k, v[..., :32], kernel="fa4h")


def test_fa2_returns_out_and_lse_like_flash_attn():
    q, k, v = _qkv(s=70, d=40)
    out = flash_attn_func(q, k, v, causal=True)
    out2, lse, dmask = flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    assert dmask.shape == (0,) and lse.dtype == np.float32 and lse.shape == (1, 2, 70)  # flash-attn: empty
    assert out.shape == q.shape and np.array_equal(out.view(np.uint16), out2.view(np.uint16))
    ref_out, ref_lse = fa2.run(q, k, v, causal=True)
    assert np.array_equal(out.view(np.uint16), ref_out.view(np.uint16)) and np.array_equal(lse, ref_lse)


def test_kernel1_runs_and_checks_its_preconditions():
    q, k, v = _qkv(s=64, h=1, d=128, dtype=ml_dtypes.bfloat16)
    out = flash_attn_func(q, k, v, kernel="kernel1")
    assert out.dtype == ml_dtypes.bfloat16 and np.array_equal(out.view(np.uint16), kernel1.run(q, k, v).view(np.uint16))
    with pytest.raises(ArgumentError, match="headdim 128 only"):
        flash_attn_func(*_qkv(s=64, d=64), kernel="kernel1")
    with pytest.raises(ArgumentError, match="seqlen % 64"):
        flash_attn_func(*_qkv(s=96, d=128), kernel="kernel1")
    q, k, v = _qkv(s=64, d=128)
    with pytest.raises(ArgumentError, match="seqlen_q == seqlen_k"):
        flash_attn_func(q, np.concatenate([k, k], 1), np.concatenate([v, v], 1), kernel="kernel1")


def test_kernels_refuse_head_dims_above_their_instances():
    with pytest.raises(ArgumentError, match="head dims up to 128"):
        flash_attn_func(*_qkv(s=8, d=136), kernel="fa2_sm8x")


def test_fa2_dropout_returns_flash_attns_probabilities_and_advances_the_generator():
    from flashsim.attention import PhiloxGenerator, check_args

    q, k, v = _qkv(s=70, d=40)
    g = PhiloxGenerator(seed=11)
    out, lse, probs = flash_attn_func(q, k, v, dropout_p=0.3, generator=g, return_attn_probs=True)
    assert g.offset == 1 * 2 * 32 and probs.shape == (1, 2, 128, 128) and probs.dtype == q.dtype
    # the same state again gives the same bits; the next state other ones
    again = flash_attn_func(q, k, v, dropout_p=0.3, rng_state=(11, 0), return_attn_probs=True)
    assert all(np.array_equal(a.view(np.uint8), b.view(np.uint8)) for a, b in zip((out, lse, probs), again))
    other = flash_attn_func(q, k, v, dropout_p=0.3, generator=g)
    assert not np.array_equal(other.view(np.uint16), out.view(np.uint16))
    # the sign bits of the visited tiles are the philox keep pattern
    keep = check_args(q, k, v, dropout_p=0.3, rng_state=(11, 0)).keep_mask()
    assert np.array_equal(~np.signbit(probs[:, :, :70, :70].astype(np.float32)), keep)
    assert 0.6 < keep.mean() < 0.8


def test_fa2_alibi_and_head_dim_256_run():
    q, k, v = _qkv(s=40, d=224)
    out, lse, _ = flash_attn_func(q, k, v, alibi_slopes=np.array([0.1, 0.2], np.float32), causal=True,
                                  return_attn_probs=True)
    ref, ref_lse = fa2.run(q, k, v, causal=True, alibi_slopes=np.array([0.1, 0.2], np.float32))
    assert out.shape == q.shape and np.array_equal(out.view(np.uint16), ref.view(np.uint16))
    assert np.array_equal(lse, ref_lse)


def test_torch_inputs_give_torch_outputs():
    torch = pytest.importorskip("torch")
    q, k, v = _qkv(s=33, d=24)
    tq, tk, tv = (torch.from_numpy(x.view(np.int16)).view(torch.float16) for x in (q, k, v))
    out, lse, _ = flash_attn_func(tq, tk, tv, return_attn_probs=True)
    ref, ref_lse = fa2.run(q, k, v)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float16
    assert np.array_equal(out.view(torch.int16).numpy().view(np.uint16), ref.view(np.uint16))
    assert np.array_equal(lse.numpy(), ref_lse)


@pytest.mark.gpu
def test_gpu_backend_equals_the_sim_backend():
    q, k, v = _qkv(seed=3, s=128, d=64)
    out, lse, _ = flash_attn_func(q, k, v, causal=True, backend="gpu", return_attn_probs=True)
    sim, sim_lse, _ = flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    assert np.array_equal(out.view(np.uint16), sim.view(np.uint16)) and np.array_equal(lse.view(np.uint32), sim_lse.view(np.uint32))
    for kernel in ("v5", "v6"):
        gpu = flash_attn_func(q, k, v, kernel=kernel, backend="gpu")
        sim = flash_attn_func(q, k, v, kernel=kernel, backend="sim")
        assert np.array_equal(gpu.view(np.uint16), sim.view(np.uint16))
