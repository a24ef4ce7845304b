"""The reference attentions (float64 and plain low precision) and flash-attn's acceptance rule."""

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from flashsim.attention import (
    attention_lowp, attention_reference, check_args, max_abs_diff, passes_flash_attn_rule,
)
from flashsim.errors import ArgumentError

DTYPES = [np.float16, ml_dtypes.bfloat16]


def randn(rng, shape, dtype, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(dtype)


def inputs(seed, b, sq, sk, h, hk, d, dtype, scale=1.0):
    rng = np.random.default_rng(seed)
    return (randn(rng, (b, sq, h, d), dtype, scale), randn(rng, (b, sk, hk, d), dtype, scale),
            randn(rng, (b, sk, hk, d), dtype))


def naive(q, k, v, scale, window=(-1, -1), softcap=0.0):
    """Element-by-element attention in Python floats; window as flash_attn_func's docstring states it:
    query i attends keys [i + sk - sq - left, i + sk - sq + right], a negative side unbounded."""
    b, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    out, lse = np.zeros((b, sq, h, d)), np.full((b, h, sq), np.inf)
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    for bi in range(b):
        for hi in range(h):
            kv = hi // (h // hk)
            for i in range(sq):
                lo = i + sk - sq - window[0] if window[0] >= 0 else -math.inf
                up = i + sk - sq + window[1] if window[1] >= 0 else math.inf
                keys = [j for j in range(sk) if lo <= j <= up]
                if not keys:
                    continue
                s = [scale * sum(q[bi, i, hi, c] * k[bi, j, kv, c] for c in range(d)) for j in keys]
                if softcap:
                    s = [softcap * math.tanh(x / softcap) for x in s]
                m = max(s)
                w = [math.exp(x - m) for x in s]
                for c in range(d):
                    out[bi, i, hi, c] = sum(wj * v[bi, j, kv, c] for wj, j in zip(w, keys)) / sum(w)
                lse[bi, hi, i] = m + math.log(sum(w))
    return out, lse


# ---- the float64 reference against independent computations ----

@pytest.mark.parametrize("sq, sk, h, hk, causal, window, softcap", [
    (3, 5, 4, 2, False, (-1, -1), 0.0),
    (5, 3, 3, 1, True, (-1, -1), 0.0),  # MQA, causal with seqlen_q > seqlen_k: fully masked rows
    (4, 6, 2, 2, False, (2, 1), 0.7),
    (6, 4, 6, 3, False, (1, 0), 0.0),
    (4, 4, 2, 1, True, (2, -1), 5.0),  # causal with a left window: local (2, 0)
])
def test_reference_matches_a_naive_loop(sq, sk, h, hk, causal, window, softcap):
    q, k, v = inputs(0, 2, sq, sk, h, hk, 5, np.float16, scale=2.0)
    a = check_args(q, k, v, causal=causal, window_size=window, softcap=softcap)
    out, lse = attention_reference(q, k, v, a)
    assert out.dtype == np.float64 and out.shape == a.out_shape and lse.dtype == np.float64
    assert lse.shape == a.lse_shape
    n_out, n_lse = naive(q, k, v, a.softmax_scale, (window[0], 0) if causal else window, softcap)
    np.testing.assert_allclose(out, n_out, rtol=1e-12, atol=1e-13)
    np.testing.assert_array_equal(np.isinf(lse), np.isinf(n_lse))
    np.testing.assert_allclose(lse, n_lse, rtol=1e-12)


def test_bottom_right_masks_of_the_flash_attn_docstring():
    q, k, v = inputs(0, 1, 2, 5, 1, 1, 8, np.float16)
    assert check_args(q, k, v, causal=True).key_mask().astype(int).tolist() == [[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]
    q, k, v = inputs(0, 1, 5, 2, 1, 1, 8, np.float16)
    assert check_args(q, k, v, causal=True).key_mask().astype(int).tolist() == [
        [0, 0], [0, 0], [0, 0], [1, 0], [1, 1]]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("sq, causal, window, want_out, want_count", [
    (2, True, (-1, -1), [1.0, 1.5], [3, 4]),  # row i sits on key i + 2: keys 0..2, 0..3
    (2, False, (1, 0), [1.5, 2.5], [2, 2]),  # keys {1, 2}, {2, 3}
    (3, False, (0, 1), [1.5, 2.5, 3.0], [2, 2, 1]),  # diagonal i + 1: keys {1, 2}, {2, 3}, {3}
    (2, False, (-1, -1), [1.5, 1.5], [4, 4]),
])
def test_hand_computed_bottom_right_alignment(dtype, sq, causal, window, want_out, want_count):
    """k = 0 makes every score 0: each row averages v[j] = j over the keys it attends, lse = log(count)."""
    q = randn(np.random.default_rng(3), (1, sq, 1, 8), dtype)
    k = np.zeros((1, 4, 1, 8), dtype)
    v = np.broadcast_to(np.arange(4, dtype=np.float32)[None, :, None, None], (1, 4, 1, 8)).astype(dtype)
    a = check_args(q, k, v, causal=causal, window_size=window)
    want = np.broadcast_to(np.array(want_out)[None, :, None, None], a.out_shape)
    for out, lse, rtol in (attention_reference(q, k, v, a) + (1e-15,), attention_lowp(q, k, v, a) + (1e-6,)):
        np.testing.assert_array_equal(out.astype(np.float64), want)  # exact: halves are representable
        np.testing.assert_allclose(lse[0, 0], np.log(want_count), rtol=rtol, atol=1e-7)


@pytest.mark.parametrize("dtype", DTYPES)
def test_fully_masked_rows_give_zero_and_lse_plus_inf(dtype):
    q, k, v = inputs(1, 2, 5, 2, 2, 1, 16, dtype)
    k[:, 1] = np.nan  # key 1 is masked for rows 0..3: its NaN must not leak into them
    a = check_args(q, k, v, causal=True)
    for out, lse in (attention_reference(q, k, v, a), attention_lowp(q, k, v, a)):
        assert (out[:, :3].astype(np.float64) == 0).all() and (lse[:, :, :3] == np.inf).all()
        assert np.isfinite(out[:, 3].astype(np.float64)).all() and np.isfinite(lse[:, :, 3]).all()
        assert np.isnan(out[:, 4].astype(np.float64)).all()  # row 4 attends the NaN key
    out, lse = attention_lowp(q, k, v, a)
    assert out.dtype == np.dtype(dtype) and lse.dtype == np.float32


def test_seqlen_k_zero_gives_zero_and_plus_inf():
    q, k, v = inputs(0, 2, 3, 0, 4, 2, 8, np.float16)
    a = check_args(q, k, v)
    for out, lse in (attention_reference(q, k, v, a), attention_lowp(q, k, v, a)):
        assert out.shape == (2, 3, 4, 8) and (out.astype(np.float64) == 0).all()
        assert lse.shape == (2, 4, 3) and (lse == np.inf).all()
    out, lse = attention_reference(*inputs(0, 1, 0, 3, 2, 2, 8, np.float16), check_args(*inputs(0, 1, 0, 3, 2, 2, 8,
                                                                                                 np.float16)))
    assert out.shape == (1, 0, 2, 8) and lse.shape == (1, 2, 0)


def test_fa2_one_sided_left_window_when_seqlen_q_exceeds_seqlen_k_plus_one():
    """FA2 turns window (0, -1) into (0, seqlen_k) for the kernel, which masks rows that the docstring's
    'unbounded right' would not: the reference follows the kernel."""
    q, k, v = inputs(2, 1, 6, 2, 1, 1, 8, np.float16)
    a = check_args(q, k, v, window_size=(0, -1))
    assert a.window_size == (0, -1) and a.params_window_size == (0, 2) and a.is_local
    # row i sits on key i - 4; keys i - 4 <= j <= i - 2 (the docstring's reading: all j >= i - 4)
    assert a.key_mask().astype(int).tolist() == [[0, 0], [0, 0], [1, 0], [1, 1], [1, 1], [0, 1]]
    out, lse = attention_reference(q, k, v, a)
    assert np.isinf(lse[0, 0, :2]).all() and (out[0, :2] == 0).all() and np.isfinite(lse[0, 0, 2:]).all()
    np.testing.assert_allclose(out[0, 2, 0], v[0, 0, 0].astype(np.float64))  # one key: out is its value


# ---- laws over drawn shapes ----

@st.composite
def problems(draw, max_seq=20):
    b = draw(st.integers(1, 2))
    sq, sk = draw(st.integers(1, max_seq)), draw(st.integers(1, max_seq))
    hk, g = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    d = draw(st.integers(1, 40))
    dtype = draw(st.sampled_from(DTYPES))
    return dict(seed=draw(st.integers(0, 2**32 - 1)), b=b, sq=sq, sk=sk, h=hk * g, hk=hk, d=d, dtype=dtype)


windows = st.tuples(st.integers(-2, 24), st.integers(-2, 24))


@given(p=problems(), causal=st.booleans(), window=windows, softcap=st.sampled_from([0.0, 0.5, 3.0]))
def test_gqa_equals_repeating_kv_heads(p, causal, window, softcap):
    q, k, v = inputs(**p)
    g = p["h"] // p["hk"]
    k_rep, v_rep = np.repeat(k, g, axis=2), np.repeat(v, g, axis=2)  # q head h reads kv head h // g
    kw = dict(causal=causal, window_size=window, softcap=softcap)
    a, a_rep = check_args(q, k, v, **kw), check_args(q, k_rep, v_rep, **kw)
    for fn in (attention_reference, attention_lowp):
        for x, y in zip(fn(q, k, v, a), fn(q, k_rep, v_rep, a_rep)):
            np.testing.assert_array_equal(x, y)


@given(p=problems(), left=st.integers(-1, 24))
def test_causal_is_the_window_minus_one_zero(p, left):
    q, k, v = inputs(**p)
    a, b = check_args(q, k, v, causal=True), check_args(q, k, v, window_size=(-1, 0))
    # with seqlen_q == 1 FA2 drops causal (window stays (-1, -1)), an explicit (-1, 0) stays: same mask
    assert (a == b and a.is_causal) if p["sq"] > 1 else (a.window_size == (-1, -1) and b.is_causal)
    assert (a.key_mask() == b.key_mask()).all()
    for x, y in zip(attention_reference(q, k, v, a), attention_reference(q, k, v, b)):
        np.testing.assert_array_equal(x, y)
    # the mask: key j <= i + sk - sq (bottom-right); with a left window also j >= i + sk - sq - left
    sq, sk = p["sq"], p["sk"]
    i, j = np.arange(sq)[:, None], np.arange(sk)[None, :]
    assert (a.key_mask() == (j <= i + sk - sq)).all()
    c = check_args(q, k, v, causal=True, window_size=(left, -1))
    assert (c.key_mask() == ((j <= i + sk - sq) & ((left < 0) | (j >= i + sk - sq - left)))).all()


@given(p=problems(), left=st.integers(0, 24), right=st.integers(0, 24))
def test_local_mask_is_the_docstring_band(p, left, right):
    """Query i attends [i + sk - sq - left, i + sk - sq + right] (flash_attn_func's docstring) whenever FA2's
    normalisation keeps that band: both sides below seqlen_k, or seqlen_q <= seqlen_k + 1 (then a side
    >= seqlen_k reaches past the keys anyway). Otherwise FA2 masks by (left', seqlen_k) or nothing."""
    sq, sk = p["sq"], p["sk"]
    assume(sq <= sk + 1 or (left < sk and right < sk))
    a = check_args(*inputs(**p), window_size=(left, right))
    i, j = np.arange(sq)[:, None], np.arange(sk)[None, :]
    assert (a.key_mask() == ((j >= i + sk - sq - left) & (j <= i + sk - sq + right))).all()


@given(p=problems(), data=st.data())
def test_a_window_covering_everything_equals_no_mask(p, data):
    sq, sk = p["sq"], data.draw(st.integers(p["sq"], 24))  # sq <= sk keeps the covering window < sk
    p = {**p, "sk": sk}
    q, k, v = inputs(**p)
    local = check_args(q, k, v, window_size=(sk - 1, sq - 1))  # lo <= 0 and hi >= sk - 1 on every row
    plain = check_args(q, k, v)
    assert local.is_local and local.key_mask().all()
    for fn in (attention_reference, attention_lowp):
        for x, y in zip(fn(q, k, v, local), fn(q, k, v, plain)):
            np.testing.assert_array_equal(x, y)


@given(p=problems(max_seq=12), causal=st.booleans())
def test_softcap_limits(p, causal):
    q, k, v = inputs(**p, scale=2.0)
    out, lse = attention_reference(q, k, v, check_args(q, k, v, causal=causal))
    # a huge cap changes nothing: c tanh(s / c) = s (1 - O((s/c)^2))
    big = attention_reference(q, k, v, check_args(q, k, v, causal=causal, softcap=1e6))
    np.testing.assert_allclose(big[0], out, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(big[1], lse, rtol=1e-9, atol=1e-9)
    # a cap -> 0 flattens every score to ~0: each row averages the values it attends, lse -> log(count)
    a = check_args(q, k, v, causal=causal, softcap=1e-7)
    tiny_out, tiny_lse = attention_reference(q, k, v, a)
    mask = a.key_mask().astype(np.float64)
    count = mask.sum(-1)
    vk = np.repeat(v.astype(np.float64), p["h"] // p["hk"], axis=2)
    mean = np.einsum("ij,bjhd->bihd", mask, vk) / np.maximum(count, 1)[None, :, None, None]
    np.testing.assert_allclose(tiny_out, mean, rtol=1e-6, atol=1e-6)
    with np.errstate(divide="ignore"):
        want_lse = np.where(count > 0, np.log(count), np.inf)
    np.testing.assert_allclose(tiny_lse, np.broadcast_to(want_lse, tiny_lse.shape), atol=1e-6)


@given(p=problems())
def test_lowp_is_close_to_the_reference_and_passes_the_rule(p):
    q, k, v = inputs(**p)
    a = check_args(q, k, v)
    ref, lse = attention_reference(q, k, v, a)
    low, low_lse = attention_lowp(q, k, v, a)
    eps = float(ml_dtypes.finfo(p["dtype"]).eps)
    assert max_abs_diff(low.astype(np.float64), ref) <= 4 * eps * np.abs(v.astype(np.float64)).max() + 1e-6
    np.testing.assert_allclose(low_lse, lse, rtol=1e-5, atol=1e-5)
    assert passes_flash_attn_rule(low, ref, low)
    assert passes_flash_attn_rule(ref.astype(p["dtype"]), ref, low)  # the correctly rounded output passes


# ---- the acceptance rule ----

def test_rule_can_fail_on_a_perturbed_output():
    q, k, v = inputs(5, 2, 64, 64, 4, 2, 32, np.float16)
    a = check_args(q, k, v, causal=True)
    ref, _ = attention_reference(q, k, v, a)
    low, _ = attention_lowp(q, k, v, a)
    good = passes_flash_attn_rule(low, ref, low)
    assert good and good.passed and good.max_err == good.max_err_lowp > 0
    assert good.bound == 2 * good.max_err_lowp + 1e-5 and "passes" in str(good)
    bad_out = low.astype(np.float64)
    bad_out[1, 7, 3, 5] += 3 * good.max_err_lowp + 1e-3
    bad = passes_flash_attn_rule(bad_out, ref, low)
    assert not bad and not bad.passed and bad.max_err > bad.bound and "FAILS" in str(bad)
    # atol decides at the margin: an error between 2 * err_lowp and 2 * err_lowp + atol passes
    edge = low.astype(np.float64)
    edge[0, 0, 0, 0] = ref[0, 0, 0, 0] + 2 * good.max_err_lowp + 0.5e-5
    assert passes_flash_attn_rule(edge, ref, low) and not passes_flash_attn_rule(edge, ref, low, atol=0)
    nan_out = low.astype(np.float64)
    nan_out[0, 0, 0, 0] = np.nan
    assert not passes_flash_attn_rule(nan_out, ref, low)


def test_rule_treats_equal_specials_as_equal_and_checks_shapes():
    ref = np.array([0.0, np.inf, np.nan, 1.0])
    assert max_abs_diff(ref, ref) == 0.0
    assert max_abs_diff(np.array([0.0, np.inf, 1.0, 1.0]), ref) == np.inf
    with pytest.raises(ArgumentError, match=r"^out=ndarray\(shape=\(3,\).*must have the shape of ref \(4,\)"):
        passes_flash_attn_rule(ref[:3], ref, ref)
    with pytest.raises(ArgumentError, match=r"^out_lowp=.*must have the shape of ref"):
        passes_flash_attn_rule(ref, ref, ref[:2])
    with pytest.raises(ArgumentError, match=r"^atol=-1\.0"):
        passes_flash_attn_rule(ref, ref, ref, atol=-1)


# ---- the f16-accumulator model and bad calls ----

def test_f16_accumulation_model_is_coarser_than_f32():
    q, k, v = inputs(7, 1, 128, 128, 2, 2, 64, np.float16)
    a = check_args(q, k, v)
    ref, _ = attention_reference(q, k, v, a)
    out32, _ = attention_lowp(q, k, v, a)
    out16, _ = attention_lowp(q, k, v, a, acc="f16")
    e32, e16 = (max_abs_diff(x.astype(np.float64), ref) for x in (out32, out16))
    assert out16.dtype == np.float16 and e32 < e16 < 2e-2


def test_bad_reference_calls():
    q, k, v = inputs(0, 1, 4, 4, 2, 2, 8, np.float16)
    a = check_args(q, k, v)
    with pytest.raises(ArgumentError, match=r"^q=ndarray\(shape=\(1, 4, 2, 8\), dtype=bfloat16\): does not match "
                                            r"args: expected shape \(1, 4, 2, 8\) of float16"):
        attention_reference(q.astype(ml_dtypes.bfloat16), k, v, a)
    with pytest.raises(ArgumentError, match=r"^v=ndarray\(shape=\(1, 3, 2, 8\).*does not match args"):
        attention_reference(q, k, v[:, :3], a)
    with pytest.raises(ArgumentError, match=r"^k=\[1, 2\]: expected a numpy array"):
        attention_lowp(q, [1, 2], v, a)
    with pytest.raises(ArgumentError, match=r"^args=\{\}: expected an AttentionArgs"):
        attention_reference(q, k, v, {})
    with pytest.raises(ArgumentError, match=r"^acc='f64': expected one of \('f32', 'f16'\)"):
        attention_lowp(q, k, v, a, acc="f64")
    qb, kb, vb = (x.astype(ml_dtypes.bfloat16) for x in (q, k, v))
    with pytest.raises(ArgumentError, match=r"^acc='f16': f16 accumulation needs float16 inputs"):
        attention_lowp(qb, kb, vb, check_args(qb, kb, vb), acc="f16")
