"""flash_attn_with_kvcache on fa2's split-KV kernel (and fa2 itself for a plain cache): the twin against the SASS
interpreter running the cubin (outputs and the caches after the append), the caches written in place, the argument
errors. The H100's record is replayed in tests/test_fa2_features.py (feature kvcache)."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from flashsim import ArgumentError
from flashsim.api import flash_attn_with_kvcache
from flashsim.attention import check_args
from flashsim.kernels import problems, run_twin
from flashsim.kernels.spec import get


def _sha(*arrays) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).view(np.uint8).tobytes())
    return h.hexdigest()


def _case(**kw):
    p = dict(kernel="fa2_splitkv1", seed=11, kind="normal", batch=2, heads=4, heads_k=2, seqlen_q=40, seqlen_k=300,
             headdim=128, dtype="bfloat16", causal=True, window_size=(-1, -1), softcap=0.0, softmax_scale=None,
             kvcache=True, kv_layout="plain", kv_new=40, kv_seqlens=(100, 7), kv_rotary="none", kv_rotary_dim=0,
             num_splits=1)
    p.update(kw)
    forced = p["kv_new"] > 0 or p["kv_layout"] != "plain"
    p["kernel"] = "fa2_splitkv" if p["num_splits"] > 1 else ("fa2_splitkv1" if forced else "fa2")
    return problems.make_case(p)


CASES = [
    dict(),                                                                        # append, causal
    dict(kv_rotary="interleaved", kv_rotary_dim=64, num_splits=3),                 # rotary, split
    dict(kv_rotary="halves", kv_rotary_dim=32, causal=False, window_size=(50, 10), headdim=64),
    # a paged cache: two entries' pages shuffled, keys appended in part of a warp (the interpreter's R2UR takes
    # the lowest executing lane, not the lowest runnable one)
    dict(kv_layout="paged", seqlen_k=512, kv_seqlens=(10, 300), kv_new=5, headdim=192, dtype="float16"),
    dict(kv_layout="batch_idx", kv_new=0, kv_seqlens=(299, 0), alibi="heads", num_splits=2),
    dict(kv_layout="plain", kv_new=0, kv_seqlens=(3, 250), softcap=30.0),          # fa2 with per-entry lengths
]


@pytest.mark.parametrize("extra", CASES, ids=lambda e: "-".join(f"{k}={v}" for k, v in e.items()) or "append")
def test_the_interpreter_is_the_twin_caches_included(extra):
    from flashsim.kernels.launch import run_kernel

    case = _case(**extra)
    kernel = case.params["kernel"]
    tw = run_twin(kernel, case.q, case.k, case.v, **case.kwargs)
    it = run_kernel(kernel, case.q, case.k, case.v, backend="interp", **case.kwargs)
    assert len(tw) == len(it) == 4
    assert _sha(*tw) == _sha(*it), case.describe()


def test_appended_keys_land_in_the_cache_in_place():
    case = _case(kv_rotary="interleaved", kv_rotary_dim=32)
    kc, vc = case.k.copy(), case.v.copy()
    kw = dict(case.kwargs)
    out, lse = flash_attn_with_kvcache(case.q, kc, vc, kw.pop("k_new"), kw.pop("v_new"), return_softmax_lse=True, **kw)
    lens = case.params["kv_seqlens"]
    for b, n in enumerate(lens):
        # the cache before the entry's length is untouched, the 40 new values follow, the rest is untouched
        assert _sha(vc[b, :n]) == _sha(case.v[b, :n]) and _sha(vc[b, n + 40:]) == _sha(case.v[b, n + 40:])
        assert _sha(vc[b, n:n + 40]) == _sha(case.kwargs["v_new"][b])
        assert not np.array_equal(kc[b, n:n + 40], case.kwargs["k_new"][b])  # rotated
    tw = run_twin(case.params["kernel"], case.q, case.k, case.v, **case.kwargs)
    assert _sha(out, lse, kc, vc) == _sha(*tw)
    # num_splits=0 (the default): flash-attn's heuristic, 8 CTAs over 3 blocks of 128 keys: 3 splits
    assert check_args(case.q, case.k, case.v, **{**case.kwargs, "num_splits": 0}).num_splits == 3


def test_a_cache_entry_is_the_plain_call_on_its_keys():
    """Without rotary, batch entry b attends the cache's first cache_seqlens[b] keys and the appended ones: fa2's
    split-KV kernel gives the bits of fa2_splitkv1 run by flash_attn_func on those keys (same tiles, one split)."""
    case = _case(causal=False)
    out = flash_attn_with_kvcache(case.q, case.k.copy(), case.v.copy(), case.kwargs["k_new"], case.kwargs["v_new"],
                                  cache_seqlens=case.kwargs["cache_seqlens"], num_splits=1)
    for b, n in enumerate(case.params["kv_seqlens"]):
        k = np.concatenate([case.k[b, :n], case.kwargs["k_new"][b]])[None]
        v = np.concatenate([case.v[b, :n], case.kwargs["v_new"][b]])[None]
        one = run_twin("fa2_splitkv1", case.q[b:b + 1], k, v)[0]
        assert _sha(out[b]) == _sha(one[0])


# ------------------------------------------------------------------------------------------------ errors

def _arrays(b=2, cap=100, hk=1, d=32, entries=None):
    q = np.zeros((b, 4, hk, d), np.float16)
    kc = np.zeros((entries or b, cap, hk, d), np.float16)
    new = np.zeros((b, 3, hk, d), np.float16)
    return q, kc, new


@pytest.mark.parametrize("call, name, match", [
    (lambda q, kc, new: dict(k=new, cache_seqlens=np.array([1, 2], np.int32)), "v", "value must also"),
    (lambda q, kc, new: dict(k=new, v=new), "cache_seqlens", "cache_seqlens must also"),
    (lambda q, kc, new: dict(cache_seqlens=np.array([1, 101], np.int32)), "cache_seqlens", "<= 100"),
    (lambda q, kc, new: dict(k=new, v=new, cache_seqlens=np.array([98, 2], np.int32)), "cache_seqlens",
     r"\+ seqlen_knew <= 100"),
    (lambda q, kc, new: dict(cache_seqlens=np.array([1, 2], np.int64)), "cache_seqlens", "int32"),
    (lambda q, kc, new: dict(cache_batch_idx=np.array([0, 2], np.int32)), "cache_batch_idx", "past the cache"),
    (lambda q, kc, new: dict(k=new, v=new, cache_seqlens=1, cache_batch_idx=np.array([1, 1], np.int32)),
     "cache_batch_idx", "two batch entries"),
    (lambda q, kc, new: dict(k=new, v=new, cache_seqlens=1, rotary_cos=np.zeros((100, 8), np.float16)),
     "rotary_sin", "rotary sin must also"),
    (lambda q, kc, new: dict(k=new, v=new, cache_seqlens=1, rotary_cos=np.zeros((100, 4), np.float16),
                             rotary_sin=np.zeros((100, 4), np.float16)), "rotary_cos", "multiple of 16"),
    (lambda q, kc, new: dict(k=new, v=new, cache_seqlens=1, rotary_cos=np.zeros((50, 8), np.float16),
                             rotary_sin=np.zeros((50, 8), np.float16)), "rotary_cos", "at least the seqlen"),
    (lambda q, kc, new: dict(k=new, v=new, cache_seqlens=97, causal=True, rotary_cos=np.zeros((100, 8), np.float16),
                             rotary_sin=np.zeros((100, 8), np.float16)), "rotary_cos", "need that many rows"),
])
def test_bad_cache_arguments_name_the_argument(call, name, match):
    q, kc, new = _arrays()
    with pytest.raises(ArgumentError, match=match) as err:
        flash_attn_with_kvcache(q, kc, kc, **call(q, kc, new))
    assert str(err.value).startswith(name + "=")


def test_bad_block_tables_name_the_argument():
    q, _, new = _arrays()
    pages = np.zeros((3, 256, 1, 32), np.float16)
    for table, match in ((np.array([[0], [3]], np.int32), "points past the cache"),
                         (np.array([[0], [-1]], np.int32), "points past the cache"),
                         (np.array([[0]], np.int32), "batch=2"),
                         (np.array([[0], [1]], np.int64), "int32")):
        with pytest.raises(ArgumentError, match=match) as err:
            flash_attn_with_kvcache(q, pages, pages, cache_seqlens=1, block_table=table)
        assert str(err.value).startswith("block_table=")
    with pytest.raises(ArgumentError, match="shared|share a page"):
        flash_attn_with_kvcache(q, pages, pages, new, new, cache_seqlens=1, block_table=np.array([[0], [0]], np.int32))
    odd = np.zeros((3, 128, 1, 32), np.float16)
    with pytest.raises(ArgumentError, match="divisible by 256"):
        flash_attn_with_kvcache(q, odd, odd, cache_seqlens=1, block_table=np.array([[0], [1]], np.int32))
    with pytest.raises(ArgumentError, match="cache_batch_idx"):
        flash_attn_with_kvcache(q, pages, pages, cache_seqlens=1, block_table=np.array([[0], [1]], np.int32),
                                cache_batch_idx=np.array([0, 1], np.int32))


def test_what_is_not_modelled_is_refused():
    q, kc, new = _arrays()
    with pytest.raises(NotImplementedError, match="cache_leftpad"):
        flash_attn_with_kvcache(q, kc, kc, cache_seqlens=1, cache_leftpad=np.zeros(2, np.int32))
    for kernel in ("kernel1", "fa2_sm8x", "fa2_chunked"):
        with pytest.raises(NotImplementedError):
            flash_attn_with_kvcache(q, kc, kc, new, new, cache_seqlens=1, kernel=kernel)
    with pytest.raises(NotImplementedError, match="KV cache"):
        get("fa2_sm8x").check_supported(check_args(q, kc, kc, cache_seqlens=1))
    with pytest.raises(ArgumentError, match="no dropout"):
        check_args(q, kc, kc, cache_seqlens=1, dropout_p=0.1)
