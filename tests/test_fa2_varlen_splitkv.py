"""fa2's packed sequences (flash_attn_varlen_func) and split-KV (fa2_splitkv and its combine kernel): the twin
against the SASS interpreter running the cubin, consistency with plain calls, flash-attn's split heuristic and
the argument errors. The H100's record of both features is replayed in tests/test_fa2_features.py."""

from __future__ import annotations

import hashlib

import ml_dtypes
import numpy as np
import pytest

from flashsim import ArgumentError
from flashsim.api import flash_attn_func, flash_attn_varlen_func
from flashsim.attention import check_args
from flashsim.attention.dispatch import num_splits, num_splits_heuristic, splitkv_block_n
from flashsim.kernels import problems, run_twin
from flashsim.kernels.spec import get


def _sha(*arrays) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).view(np.uint8).tobytes())
    return h.hexdigest()


def _interp(kernel, case):
    from flashsim.kernels.launch import run_kernel

    return run_kernel(kernel, case.q, case.k, case.v, backend="interp", **case.kwargs)


def _base(**kw):
    p = dict(kernel="fa2", seed=5, kind="normal", batch=1, heads=2, heads_k=1, seqlen_q=70, seqlen_k=150,
             headdim=64, dtype="float16", causal=False, window_size=(-1, -1), softcap=0.0, softmax_scale=None)
    p.update(kw)
    return p


# ------------------------------------------------------------------------------------------------ interpreter

VARLEN = [
    # zero-length query and key sequences, causal, several KV steps
    dict(headdim=64, causal=True, seqlens_q=(70, 0, 5, 130), seqlens_k=(150, 40, 0, 200)),
    # dropout with the probabilities, ALiBi per batch entry, a local window, bf16, head dim 128
    dict(headdim=120, dtype="bfloat16", window_size=(30, 10), dropout_p=0.17, return_attn_probs=True, alibi="batch",
         seqlens_q=(1, 64, 33), seqlens_k=(100, 64, 1)),
    # head dims above 128, softcap
    dict(headdim=200, softcap=30.0, seqlens_q=(65, 7), seqlens_k=(129, 300)),
]


@pytest.mark.parametrize("extra", VARLEN, ids=lambda e: f"d{e['headdim']}")
def test_packed_sequences_in_the_interpreter_are_the_twin(extra):
    p = _base(varlen=True, batch=len(extra["seqlens_q"]), **extra)
    p["seqlen_q"], p["seqlen_k"] = max(p["seqlens_q"]), max(p["seqlens_k"])
    case = problems.make_case(p)
    tw, it = run_twin("fa2", case.q, case.k, case.v, **case.kwargs), _interp("fa2", case)
    assert len(tw) == len(it) == (3 if p.get("return_attn_probs") else 2)
    assert tw[0].shape == case.q.shape and tw[1].shape == (p["heads"], case.q.shape[0])
    assert _sha(*tw) == _sha(*it), case.describe()
    assert not tw[0][-1].view(np.uint16).any()  # the row of no sequence stays 0


SPLITS = [
    dict(headdim=64, seqlen_k=700, num_splits=2),                                   # 64 x 256: 3 blocks
    dict(headdim=128, seqlen_k=700, num_splits=4, causal=True, dtype="bfloat16"),     # 64 x 128, causal
    dict(headdim=160, seqlen_k=300, num_splits=3, window_size=(50, 20), alibi="heads"),  # 64 x 64, local, ALiBi
    dict(headdim=256, seqlen_k=129, num_splits=16, softcap=5.0, seqlen_q=1),        # empty splits
]


@pytest.mark.parametrize("extra", SPLITS, ids=lambda e: f"d{e['headdim']}x{e['num_splits']}")
def test_split_kv_and_its_combine_in_the_interpreter_are_the_twin(extra):
    case = problems.make_case(_base(kernel="fa2_splitkv", **extra))
    tw, it = run_twin("fa2_splitkv", case.q, case.k, case.v, **case.kwargs), _interp("fa2_splitkv", case)
    assert _sha(*tw) == _sha(*it), case.describe()


# ------------------------------------------------------------------------------------------------ consistency

def test_a_packed_sequence_is_the_call_of_that_sequence_alone():
    """Row arithmetic does not see the packing: the first sequence of a packed call (batch index 0: the same
    philox offsets) gives the bits of flash_attn_func on it alone, its probabilities the same tiles."""
    p = _base(varlen=True, batch=3, seqlens_q=(70, 3, 40), seqlens_k=(150, 9, 80), seqlen_q=70, seqlen_k=150,
              causal=True, dropout_p=0.3, return_attn_probs=True)
    case = problems.make_case(p)
    out, lse, probs = flash_attn_varlen_func(case.q, case.k, case.v, **case.kwargs)
    kw = {n: x for n, x in case.kwargs.items() if not n.startswith(("cu_", "max_"))}
    o0, l0, p0 = flash_attn_func(case.q[None, :70], case.k[None, :150], case.v[None, :150], **kw)
    assert _sha(out[:70]) == _sha(o0[0]) and _sha(lse[:, :70]) == _sha(l0[0])
    assert _sha(probs[0, :, :p0.shape[2], :p0.shape[3]]) == _sha(p0[0])


def test_two_splits_of_one_block_are_the_single_split():
    """With every key in one KV block the second split is empty (LSE -inf, scale 0), the first one's scale is
    expf(0) = 1: the combine hands the split's O and LSE through unchanged."""
    case = problems.make_case(_base(kernel="fa2_splitkv", headdim=128, seqlen_k=100, num_splits=2))
    two = run_twin("fa2_splitkv", case.q, case.k, case.v, **case.kwargs)
    one = run_twin("fa2_splitkv", case.q, case.k, case.v, **{**case.kwargs, "num_splits": 1})
    assert _sha(*two) == _sha(*one)


def test_flash_attn_func_runs_the_split_configuration_when_asked():
    case = problems.make_case(_base(headdim=128, seqlen_q=64, seqlen_k=1024))
    split = flash_attn_func(case.q, case.k, case.v, num_splits=4, return_attn_probs=True)
    twin = run_twin("fa2_splitkv", case.q, case.k, case.v, num_splits=4)
    assert _sha(*split[:2]) == _sha(*twin)
    # num_splits=0: flash-attn's choice; 1 head of 64 rows over 8 blocks of 128 keys on 132 SMs splits 8 ways
    assert check_args(case.q, case.k, case.v, num_splits=0).num_splits == 8
    auto = flash_attn_func(case.q, case.k, case.v, num_splits=0, return_attn_probs=True)
    assert _sha(*auto[:2]) == _sha(*run_twin("fa2_splitkv", case.q, case.k, case.v, num_splits=8))


# ------------------------------------------------------------------------------------------------ heuristic

def test_the_split_heuristic_is_flash_attns():
    # flash_api.cpp's own example: 48 CTAs on 108 SMs take 2 splits (efficiency 0.89, 9 splits reach 1.0)
    assert num_splits_heuristic(48, 108, 64, 128) == 2
    assert num_splits_heuristic(87, 108, 64, 128) == 1    # >= 0.8 of the SMs: one wave is full enough
    assert num_splits_heuristic(10, 264, 3, 128) == 3     # no more splits than KV blocks
    assert num_splits_heuristic(10, 264, 1, 128) == 1
    assert [splitkv_block_n(d) for d in (32, 64, 72, 128, 136, 256)] == [256, 256, 128, 128, 64, 64]
    # dropout keeps one kernel; seqlen_q == 1 with GQA is seen as seqlen_q = ngroups over the kv heads
    assert num_splits(1, 8, 8, 1, 4096, 128) == 32  # 8 CTAs, 32 blocks of 128 keys: 32 splits fill 0.97 of a wave
    assert num_splits(1, 8, 8, 1, 4096, 128, dropout_p=0.1) == 1
    assert num_splits(1, 64, 1, 1, 4096, 128) == 32 == num_splits(1, 1, 1, 64, 4096, 128)
    assert num_splits(1, 64, 1, 1, 4096, 128, window=(8, -1)) == 4  # unswapped: 64 CTAs
    assert num_splits(1, 64, 1, 1, 4096, 128, window=(8, -1)) == num_splits(1, 64, 1, 1, 4096, 128, alibi=True)
    assert num_splits(4, 64, 64, 1024, 4096, 128) == 1


# ------------------------------------------------------------------------------------------------ errors

def _packed(sq=(3, 4), sk=(5, 6), h=2, d=32):
    q = np.zeros((sum(sq), h, d), np.float16)
    k = np.zeros((sum(sk), h, d), np.float16)
    cq = np.cumsum((0,) + sq).astype(np.int32)
    ck = np.cumsum((0,) + sk).astype(np.int32)
    return q, k, cq, ck


@pytest.mark.parametrize("change, name, match", [
    (lambda c: c.update(cu_seqlens_q=np.array([0, 4, 3], np.int32)), "cu_seqlens_q", "must not decrease"),
    (lambda c: c.update(cu_seqlens_k=np.array([0, 5], np.int32)), "cu_seqlens_k", "batch \\+ 1"),
    (lambda c: c.update(cu_seqlens_k=np.array([0, 5, 12], np.int32)), "cu_seqlens_k", "past the tensor"),
    (lambda c: c.update(cu_seqlens_q=np.array([-1, 3, 7], np.int32)), "cu_seqlens_q", ">= 0"),
    (lambda c: c.update(cu_seqlens_q=np.array([0, 3, 7], np.int64)), "cu_seqlens_q", "int32"),
    (lambda c: c.update(max_seqlen_q=3), "max_seqlen_q", "more than max_seqlen_q"),
    (lambda c: c.update(max_seqlen_k=-1), "max_seqlen_k", "int >= 0"),
])
def test_bad_packed_sequences_name_the_argument(change, name, match):
    q, k, cq, ck = _packed()
    call = dict(cu_seqlens_q=cq, cu_seqlens_k=ck, max_seqlen_q=4, max_seqlen_k=6)
    change(call)
    with pytest.raises(ArgumentError, match=match) as err:
        flash_attn_varlen_func(q, k, k, **call)
    assert str(err.value).startswith(name + "=")


def test_packed_calls_refuse_what_is_not_modelled():
    q, k, cq, ck = _packed()
    with pytest.raises(NotImplementedError, match="block_table"):
        flash_attn_varlen_func(q, k, k, cq, ck, 4, 6, block_table=np.zeros((2, 1), np.int32))
    for kernel in ("fa2_sm8x", "fa2_chunked", "fa2_splitkv"):
        with pytest.raises(NotImplementedError, match="packed sequences"):
            flash_attn_varlen_func(q, k, k, cq, ck, 4, 6, kernel=kernel)
    with pytest.raises(ArgumentError, match="rank 3"):
        flash_attn_varlen_func(q[None], k[None], k[None], cq, ck, 4, 6)


@pytest.mark.parametrize("value, match", [(-1, r"\[0, 128\]"), (129, r"\[0, 128\]"), (2.0, "int")])
def test_bad_num_splits_name_the_argument(value, match):
    q = np.zeros((1, 8, 1, 32), np.float16)
    with pytest.raises(ArgumentError, match=match) as err:
        flash_attn_func(q, q, q, num_splits=value)
    assert str(err.value).startswith("num_splits=")


def test_split_kv_refuses_dropout_and_other_kernels():
    q = np.zeros((1, 8, 1, 32), np.float16)
    with pytest.raises(ArgumentError, match="SplitKV is not implemented for dropout") as err:
        flash_attn_func(q, q, q, dropout_p=0.1, num_splits=2)
    assert str(err.value).startswith("num_splits=")
    q64 = np.zeros((1, 64, 1, 64), np.float16)
    for kernel in ("kernel1", "v5", "fa2_sm8x", "fa4h"):
        with pytest.raises(NotImplementedError, match="split-KV"):
            flash_attn_func(q64.astype(np.float16), q64, q64, kernel=kernel, num_splits=2)
    with pytest.raises(ArgumentError) as err:
        flash_attn_func(q, q, q, num_splits=0, num_sms=0)
    assert str(err.value).startswith("num_sms=")
    q2 = np.zeros((8, 1, 32), np.float16)
    cu = np.array([0, 8], np.int32)
    with pytest.raises(NotImplementedError, match="split-KV of packed sequences"):
        check_args(q2, q2, q2, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=8, max_seqlen_k=8, num_splits=2)


def test_the_split_kernel_launches_its_grid_and_names_its_entries():
    spec = get("fa2_splitkv")
    args = check_args(np.zeros((2, 200, 3, 128), ml_dtypes.bfloat16), np.zeros((2, 500, 3, 128), ml_dtypes.bfloat16),
                      np.zeros((2, 500, 3, 128), ml_dtypes.bfloat16), num_splits=5)
    inst = spec.instance_for(args)
    assert (inst.block_m, inst.block_n) == (64, 128) and inst.grid(args) == (4, 5, 6)
    assert inst.function("bfloat16", args) == "fa2_splitkv_hdim128_bf16"
    assert inst.combine_function("bfloat16") == "fa2_combine_hdim128_bf16"
    assert spec.function_names[:2] == ["fa2_splitkv_hdim64_f16", "fa2_splitkv_hdim64_bf16"]
    assert len(spec.function_names) == 16
