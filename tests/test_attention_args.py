"""flash_attn_func's argument checks and normalisations (flashsim.attention.check_args), message by message."""

import dataclasses
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from flashsim.attention import LOG2E, AttentionArgs, check_args, to_numpy
from flashsim.errors import ArgumentError, FlashsimError


def qkv(b=2, sq=8, sk=8, h=4, hk=4, d=64, dtype=np.float16):
    """Zero q/k/v of the given shapes (only shapes and dtypes matter to check_args)."""
    return (np.zeros((b, sq, h, d), dtype), np.zeros((b, sk, hk, d), dtype), np.zeros((b, sk, hk, d), dtype))


# ---- what a good call records ----

@pytest.mark.parametrize("dtype, name", [(np.float16, "float16"), (ml_dtypes.bfloat16, "bfloat16")])
def test_defaults(dtype, name):
    a = check_args(*qkv(b=2, sq=5, sk=7, h=6, hk=2, d=40, dtype=dtype))
    assert (a.batch, a.seqlen_q, a.seqlen_k, a.heads, a.heads_k, a.headdim) == (2, 5, 7, 6, 2, 40)
    assert a.dtype == name and a.np_dtype == np.dtype(dtype) and a.device == "cpu"
    assert a.ngroups == 3 and a.q_shape == (2, 5, 6, 40) and a.kv_shape == (2, 7, 2, 40)
    assert a.out_shape == a.q_shape and a.lse_shape == (2, 6, 5)
    assert a.window_size == (-1, -1) and a.params_window_size == (-1, -1)
    assert not a.is_causal and not a.is_local and a.softcap == 0.0 and a.params_softcap == 0
    assert type(a.softmax_scale) is float and a.softmax_scale == 40 ** -0.5


def test_default_scale_uses_the_unpadded_head_dim_and_padding_is_recorded():
    a = check_args(*qkv(d=20))
    assert a.softmax_scale == 20 ** -0.5 and a.headdim_padded == 24 and a.headdim_rounded == 32
    assert check_args(*qkv(d=160)).headdim_rounded == 192  # above 128: multiples of 64
    assert check_args(*qkv(d=250)).headdim_padded == 256  # pads to the limit: allowed


def _f32_bits(x):
    return int(np.asarray(x, np.float32).view(np.uint32))


@pytest.mark.parametrize("d", [7, 3, 128, 64])
def test_kernel_scales_are_rounded_as_set_params_fprop_does(d):
    a = check_args(*qkv(d=d))
    scale32 = np.float32(d ** -0.5)
    assert a.softmax_scale_f32.dtype == np.float32 and a.softmax_scale_f32 == scale32
    # exact: the float32 scale times the double M_LOG2E, rounded to double, then to float32
    exact = Fraction(float(scale32)) * Fraction(LOG2E)
    assert a.scale_log2_f32 == np.float32(float(exact))  # float(Fraction) rounds to nearest double
    assert a.params_scale_softmax == scale32 and a.params_scale_softmax_log2 == a.scale_log2_f32


def test_scale_log2_double_product_differs_from_a_float32_product():
    """For headdim 7 the two-rounding product differs from a single float32 multiply: pin the bits."""
    a = check_args(*qkv(d=7))
    assert _f32_bits(a.scale_log2_f32) == 0x3F0B97F6
    assert _f32_bits(np.float32(7 ** -0.5) * np.float32(LOG2E)) == 0x3F0B97F5
    assert _f32_bits(check_args(*qkv(d=128)).scale_log2_f32) == 0x3E0293EE  # ~0.1275 (the seed's 0.1276)


def test_explicit_scale_and_softcap_params():
    a = check_args(*qkv(), softmax_scale=0.3, softcap=30)
    assert a.softmax_scale == 0.3 and a.softcap == 30.0
    s32, c32 = np.float32(0.3), np.float32(30.0)
    assert a.params_softcap == s32 / c32 and a.params_softcap.dtype == np.float32  # a float32 division
    assert a.params_scale_softmax == c32
    assert a.params_scale_softmax_log2 == np.float32(np.float64(c32) * LOG2E)
    assert a.scale_log2_f32 == np.float32(np.float64(s32) * LOG2E)  # the plain one is still recorded
    assert check_args(*qkv(), softmax_scale=np.float32(0.5)).softmax_scale == 0.5
    assert check_args(*qkv(), softmax_scale=-1).softmax_scale == -1.0  # negative scales are fine


# ---- window normalisation (mha_fwd, then set_params_fprop) ----

@pytest.mark.parametrize("sq, sk, causal, window, normalised, params, kind", [
    (8, 8, True, (-1, -1), (-1, 0), (8, 0), "causal"),
    (8, 8, False, (-1, 0), (-1, 0), (8, 0), "causal"),
    (8, 8, False, (-5, -2), (-1, -1), (-1, -1), "none"),  # any negative is unbounded
    (8, 8, False, (3, 2), (3, 2), (3, 2), "local"),
    (8, 8, False, (8, 100), (-1, -1), (-1, -1), "none"),  # a side >= seqlen_k becomes -1
    (8, 8, False, (7, 8), (7, -1), (7, 8), "local"),  # unbounded right facing a bounded left -> seqlen_k
    (8, 8, False, (-1, 3), (-1, 3), (8, 3), "local"),  # unbounded left facing a bounded right -> seqlen_k
    (8, 8, True, (3, -1), (3, 0), (3, 0), "local"),  # causal keeps the left window: local (3, 0)
    (8, 8, True, (3, 5), (3, 0), (3, 0), "local"),
    (1, 8, True, (-1, -1), (-1, -1), (-1, -1), "none"),  # seqlen_q == 1: causal is dropped
    (6, 2, True, (-1, -1), (-1, 0), (2, 0), "causal"),
])
def test_window_normalisation(sq, sk, causal, window, normalised, params, kind):
    a = check_args(*qkv(sq=sq, sk=sk), causal=causal, window_size=window)
    assert a.window_size == normalised and a.params_window_size == params
    assert (a.is_causal, a.is_local) == (kind == "causal", kind == "local")


def test_window_accepts_lists_and_numpy_ints():
    a = check_args(*qkv(), window_size=[np.int64(2), np.int32(1)])
    assert a.window_size == (2, 1) and all(type(w) is int for w in a.window_size)


def test_args_are_frozen_hashable_and_validate_themselves():
    a = check_args(*qkv(), causal=True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.seqlen_q = 3
    assert a == check_args(*qkv(), window_size=(-1, 0)) and hash(a) == hash(check_args(*qkv(), causal=True))
    fields = dict(batch=1, seqlen_q=4, seqlen_k=4, heads=2, heads_k=1, headdim=8, dtype="float16",
                  softmax_scale=0.5)
    assert AttentionArgs(**fields).ngroups == 2
    for bad, match in [(dict(heads_k=3), r"heads_k=3: must divide heads=2"),
                       (dict(window_size=(4, -1)), r"window_size=\(4, -1\): expected a normalised"),
                       (dict(window_size=(-2, -1)), r"window_size=\(-2, -1\)"),
                       (dict(dtype="float32"), r"dtype='float32'"),
                       (dict(headdim=257), r"headdim=257: padded to 264, above 256"),
                       (dict(batch=0), r"batch=0: expected a positive int"),
                       (dict(seqlen_q=-1), r"seqlen_q=-1"),
                       (dict(softmax_scale=1), r"softmax_scale=1: expected a float"),
                       (dict(softcap=-1.0), r"softcap=-1.0"),
                       (dict(softcap=1e-46), r"softcap=1e-46"),
                       (dict(deterministic=1), r"deterministic=1")]:
        with pytest.raises(ArgumentError, match=match):
            AttentionArgs(**{**fields, **bad})


def test_seqlen_k_zero_is_accepted():
    a = check_args(*qkv(sk=0), causal=True, window_size=(3, 3))
    assert a.seqlen_k == 0 and a.window_size == (-1, 0)
    lo, hi = a.key_bounds()
    assert (lo > hi).all()


# ---- errors: every bad argument names itself ----

def test_error_type_and_format():
    with pytest.raises(ArgumentError) as info:
        check_args(*qkv(), softcap=-2.0)
    assert isinstance(info.value, FlashsimError) and isinstance(info.value, ValueError)
    assert str(info.value).startswith("softcap=-2.0: ")


def _shape(x, shape):
    return np.zeros(shape, x.dtype)


@pytest.mark.parametrize("make, match", [
    (lambda q, k, v: ([[1.0]], k, v), r"^q=\[\[1\.0\]\]: expected a numpy array"),
    (lambda q, k, v: (None, k, v), r"^q=None: expected a numpy array"),
    (lambda q, k, v: (q.astype(np.float32), k, v), r"^q=ndarray\(shape=\(2, 8, 4, 64\), dtype=float32\): "
                                                    r"FlashAttention supports only float16 and bfloat16$"),
    (lambda q, k, v: (q.view(np.uint16), k, v), r"^q=.*dtype=uint16.*bit patterns are ambiguous"),
    (lambda q, k, v: (q, k.astype(ml_dtypes.bfloat16), v), r"^k=.*dtype=bfloat16\): must have the same "
                                                            r"dtype as q \(float16\)"),
    (lambda q, k, v: (q, k, v.astype(np.float64)), r"^v=.*dtype=float64.*only float16 and bfloat16"),
    (lambda q, k, v: (q[0], k, v), r"^q=ndarray\(shape=\(8, 4, 64\).*expected rank 4 \(batch, seqlen, heads, "
                                   r"headdim\), got rank 3"),
    (lambda q, k, v: (q, k[None], v), r"^k=.*got rank 5"),
    (lambda q, k, v: (_shape(q, (0, 8, 4, 64)), k, v), r"^q=.*batch size must be positive"),
    (lambda q, k, v: (_shape(q, (2, 8, 4, 0)), k, v), r"^q=.*head dimension must be positive"),
    (lambda q, k, v: (q, _shape(k, (3, 8, 4, 64)), v), r"^k=ndarray\(shape=\(3, 8, 4, 64\).*expected shape "
                                                        r"\(batch, seqlen_k, heads_k, headdim\) = \(2, 8, 4, 64\)"),
    (lambda q, k, v: (q, _shape(k, (2, 8, 4, 32)), v), r"^k=.*expected shape"),
    (lambda q, k, v: (q, k, _shape(v, (2, 9, 4, 64))), r"^v=.*expected shape .* = \(2, 8, 4, 'headdim_v'\)"),
    (lambda q, k, v: (q, k, _shape(v, (2, 8, 4, 0))), r"^v=.*headdim_v >= 1"),
    (lambda q, k, v: (q, k, _shape(v, (2, 9, 4, 64))), r"^v=.*expected shape"),
    (lambda q, k, v: (q, k, _shape(v, (2, 8, 2, 64))), r"^v=.*expected shape"),
    (lambda q, k, v: (q, _shape(k, (2, 8, 0, 64)), _shape(v, (2, 8, 0, 64))),
     r"^k=.*number of heads in key/value must be positive"),
    (lambda q, k, v: (q, _shape(k, (2, 8, 3, 64)), _shape(v, (2, 8, 3, 64))),
     r"^k=.*number of heads in key/value \(3\) must divide number of heads in query \(4\)"),
    (lambda q, k, v: (_shape(q, (2, 8, 4, 257)), _shape(k, (2, 8, 4, 257)), _shape(v, (2, 8, 4, 257))),
     r"^q=.*head dimension 257 \(padded to 264\) is above 256"),
])
def test_bad_tensors(make, match):
    with pytest.raises(ArgumentError, match=match):
        check_args(*make(*qkv()))


@pytest.mark.parametrize("kwargs, match", [
    (dict(softmax_scale="0.1"), r"^softmax_scale='0\.1': expected a real number"),
    (dict(softmax_scale=True), r"^softmax_scale=True: expected a real number"),
    (dict(softmax_scale=float("nan")), r"^softmax_scale=nan: .*finite as float32"),
    (dict(softmax_scale=float("inf")), r"^softmax_scale=inf: "),
    (dict(softmax_scale=1e39), r"^softmax_scale=1e\+39: "),  # overflows float32
    (dict(softmax_scale=3e38), r"^softmax_scale=3e\+38: "),  # float32, but not times log2(e)
    (dict(causal=1), r"^causal=1: expected a bool"),
    (dict(causal="yes"), r"^causal='yes': expected a bool"),
    (dict(window_size=(1, 2, 3)), r"^window_size=\(1, 2, 3\): expected a pair"),
    (dict(window_size=5), r"^window_size=5: expected a pair"),
    (dict(window_size="ab"), r"^window_size='ab': expected a pair"),
    (dict(window_size=(1.5, 2)), r"^window_size=\(1\.5, 2\): expected a pair \(left, right\) of 32-bit ints"),
    (dict(window_size=(True, 2)), r"^window_size=\(True, 2\): "),
    (dict(window_size=(2**31, 0)), r"^window_size=\(2147483648, 0\): .*32-bit"),
    (dict(softcap=-0.5), r"^softcap=-0\.5: expected 0 \(off\) or a number > 0"),
    (dict(softcap=1e-50), r"^softcap=1e-50: .*stays > 0 .* as float32"),  # FA2 would read it as off
    (dict(softcap=float("nan")), r"^softcap=nan: "),
    (dict(softcap=float("inf")), r"^softcap=inf: "),
    (dict(softcap="1"), r"^softcap='1': expected a real number"),
    (dict(dropout_p=-0.1), r"^dropout_p=-0\.1: expected a probability in \[0, 1\)"),
    (dict(dropout_p=1.0), r"^dropout_p=1\.0: expected a probability"),
    (dict(dropout_p=None), r"^dropout_p=None: expected a real number"),
    (dict(deterministic="no"), r"^deterministic='no': expected a bool"),
    (dict(return_attn_probs=0), r"^return_attn_probs=0: expected a bool"),
    (dict(dropout_p=0.1, softcap=5.0), r"^dropout_p=0\.1: softcap does not support dropout"),
    (dict(alibi_slopes=np.zeros(4, np.float64)), r"^alibi_slopes=ndarray\(shape=\(4,\), dtype=float64\): ALiBi "
                                                 r"slopes must have dtype float32"),
    (dict(alibi_slopes=np.zeros(3, np.float32)), r"^alibi_slopes=.*expected shape \(heads,\) = \(4,\) or "
                                                 r"\(batch, heads\) = \(2, 4\)"),
    (dict(alibi_slopes=np.zeros((4, 2), np.float32)), r"^alibi_slopes=ndarray\(shape=\(4, 2\).*expected shape"),
    (dict(alibi_slopes=np.zeros((1, 2, 4), np.float32)), r"^alibi_slopes=.*expected shape"),
    (dict(alibi_slopes=[0.1] * 4), r"^alibi_slopes=\[0\.1, .*expected a float32 numpy array or torch tensor"),
    (dict(dropout_p=0.1, rng_state=(1,)), r"^rng_state=\(1,\): expected \(seed, offset\), ints in \[0, 2\*\*64\)"),
    (dict(dropout_p=0.1, rng_state=(-1, 0)), r"^rng_state=\(-1, 0\): expected \(seed, offset\)"),
    (dict(dropout_p=0.1, rng_state=(2**64, 0)), r"^rng_state="),
    (dict(dropout_p=0.1, rng_state=(1.5, 0)), r"^rng_state="),
    (dict(dropout_p=0.1, rng_state=(1, 2), generator=None), None),
    (dict(dropout_p=0.1, generator="torch"), r"^generator='torch': expected a flashsim.attention.PhiloxGenerator"),
])
def test_bad_scalars(kwargs, match):
    if match is None:
        assert check_args(*qkv(), **kwargs).rng_state == (1, 2)
        return
    with pytest.raises(ArgumentError, match=match):
        check_args(*qkv(), **kwargs)


def test_dropout_records_flash_attns_scalars_and_the_philox_state():
    from flashsim.attention import PhiloxGenerator

    a = check_args(*qkv(), dropout_p=0.17, rng_state=(5, 8), return_attn_probs=True)
    assert a.dropout_p == 0.17 and a.rng_state == (5, 8) and a.return_softmax
    # p_dropout = 1.f - 0.17f, floor(p * 255.0) = 211, rp = 1.f / p (float32 arithmetic)
    assert a.params_p_dropout == np.float32(np.float32(1) - np.float32(0.17))
    assert a.params_p_dropout_in_uint8_t == 211
    assert a.params_rp_dropout == np.float32(1) / a.params_p_dropout
    assert a.s_dmask_shape == (2, 4, 128, 128)
    # without dropout: no state and no probabilities (flash-attn: return_softmax and dropout_p > 0)
    b = check_args(*qkv(), return_attn_probs=True)
    assert b.rng_state is None and not b.return_softmax and b.params_p_dropout_in_uint8_t == 255
    # a generator hands out (seed, offset) and advances by batch * heads * 32
    g = PhiloxGenerator(seed=7, offset=4)
    assert check_args(*qkv(), dropout_p=0.5, generator=g).rng_state == (7, 4)
    assert check_args(*qkv(), dropout_p=0.5, generator=g).rng_state == (7, 4 + 2 * 4 * 32)
    assert g.offset == 4 + 2 * 2 * 4 * 32
    assert check_args(*qkv(), generator=g).rng_state is None and g.offset == 4 + 2 * 2 * 4 * 32
    with pytest.raises(ArgumentError, match="^generator=.*give a generator or rng_state, not both"):
        check_args(*qkv(), dropout_p=0.5, generator=g, rng_state=(1, 2))
    with pytest.raises(ArgumentError, match=r"^seed=-1: expected an int in \[0, 2\*\*64\)"):
        PhiloxGenerator(-1)


def test_alibi_slopes_keep_their_float32_values_and_causal_at_seqlen_q_1():
    sl = np.array([0.1, 0.2, 0.3, 1e-30], np.float32)
    a = check_args(*qkv(), alibi_slopes=sl)
    assert a.alibi_array.dtype == np.float32 and np.array_equal(a.alibi_array, np.stack([sl, sl]))
    b = check_args(*qkv(), alibi_slopes=np.arange(8, dtype=np.float32).reshape(2, 4))
    assert b.alibi_array[1, 3] == 7
    # mha_fwd turns causal off at seqlen_q == 1 only without ALiBi
    assert not check_args(*qkv(sq=1), causal=True).is_causal
    assert check_args(*qkv(sq=1), causal=True, alibi_slopes=sl).is_causal


def test_accepted_edge_values():
    assert check_args(*qkv(), softcap=0).softcap == 0.0
    assert check_args(*qkv(), dropout_p=0).window_size == (-1, -1)
    assert check_args(*qkv(), deterministic=np.bool_(True), causal=np.bool_(True)).deterministic is True
    assert check_args(*qkv(d=256)).headdim == 256


# ---- torch tensors (only where torch is installed) ----

def test_torch_tensors_keep_their_bits():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    bits = rng.integers(0, 1 << 16, size=(1, 3, 2, 8), dtype=np.uint16)
    for np_dtype, t_dtype in ((np.float16, torch.float16), (ml_dtypes.bfloat16, torch.bfloat16)):
        t = torch.from_numpy(bits.view(np.int16).copy()).view(t_dtype)
        a = check_args(t, t, t)
        assert a.dtype == np.dtype(np_dtype).name and a.device == "cpu"
        assert (to_numpy(t).view(np.uint16) == bits).all()
    with pytest.raises(ArgumentError, match=r"^q=Tensor\(.*torch\.float32.*only torch\.float16"):
        check_args(torch.zeros(1, 2, 2, 8), torch.zeros(1, 2, 2, 8), torch.zeros(1, 2, 2, 8))
