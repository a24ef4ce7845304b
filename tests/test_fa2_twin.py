"""The kernel1 and fa2 twins (and fa2_sm8x, fa2 with other tiles) on the CPU: flash-attn's rule on random problems of each domain, FA2's rules
for empty and NaN rows, the block ranges, the smem layout, and the preconditions."""

import ml_dtypes
import numpy as np
import pytest

from flashsim import ArgumentError
from flashsim.attention import attention_lowp, attention_reference, check_args, passes_flash_attn_rule
from flashsim.kernels import fa2, kernel1, problems, run_twin
from flashsim.kernels.common import quad_merge, quad_split


@pytest.mark.parametrize("kernel", ["fa2", "kernel1", "fa2_sm8x"])
@pytest.mark.parametrize("seed", range(6))
def test_twin_passes_flash_attn_rule(kernel, seed):
    case = problems.random_case(np.random.default_rng([seed, 7]), kernel)
    out, lse = run_twin(kernel, case.q, case.k, case.v, **case.kwargs)[:2]
    args = check_args(case.q, case.k, case.v, **case.kwargs)
    ref, ref_lse = attention_reference(case.q, case.k, case.v, args)
    lowp, _ = attention_lowp(case.q, case.k, case.v, args)
    assert passes_flash_attn_rule(out, ref, lowp), case.describe()
    if lse is not None:
        fin = np.isfinite(ref_lse)
        assert np.array_equal(np.isposinf(lse), np.isposinf(ref_lse) | np.isnan(ref_lse))
        assert np.allclose(lse[fin], ref_lse[fin], atol=1e-4, rtol=1e-5)


def test_quad_split_is_the_register_order_and_merge_inverts_it():
    x = np.arange(32).reshape(1, 32)
    s = quad_split(x)
    assert s[0, 1].tolist() == [2, 3, 10, 11, 18, 19, 26, 27]  # lane t = 1: columns 8n + 2 + j
    assert np.array_equal(quad_merge(s), x)


def test_smem_offset_is_the_layout_algebra_swizzle():
    for rows, d in ((128, 128), (32, 128), (64, 64)):
        lay = fa2.smem_layout(rows, d)
        r, c = np.meshgrid(np.arange(rows), np.arange(d), indexing="ij")
        expect = np.array([lay((int(a), int(b))) for a, b in zip(r.ravel()[::7], c.ravel()[::7])])
        assert np.array_equal(fa2.smem_offset(r.ravel()[::7], c.ravel()[::7], rows), expect)


def test_block_ranges_use_cpp_truncation():
    q = np.zeros((1, 300, 1, 64), np.float16)
    k = np.zeros((1, 40, 1, 64), np.float16)
    pb = fa2.problem_from_args(check_args(q, k, k, causal=True))
    lo, hi = pb.n_block_range(np.arange(pb.m_blocks))
    # causal, seqlen_q 300 > seqlen_k 40: (m+1)*128 + 40 - 300 + 63 over 64 truncated: -69/64 -> -1 (empty)
    assert lo.tolist() == [0, 0, 0] and hi.tolist() == [-1, 0, 1]
    assert pb.n_masking_steps == 3  # ceil(128 / 64) + 1: seqlens not multiples of the blocks


def test_empty_rows_get_zero_out_and_infinite_lse():
    rng = np.random.default_rng(1)
    q = rng.standard_normal((1, 300, 2, 64)).astype(np.float16)
    k = rng.standard_normal((1, 40, 2, 64)).astype(np.float16)
    out, lse = fa2.run(q, k, k, causal=True)
    empty = np.arange(300) < 300 - 40  # bottom-right alignment: rows before seqlen_q - seqlen_k see no key
    assert np.all(out[0, empty].view(np.uint16) == 0) and np.all(np.isposinf(lse[0][:, empty]))
    assert np.all(np.isfinite(lse[0][:, ~empty]))


def test_nan_rows_get_infinite_lse_and_nan_out():
    q = np.ones((1, 8, 1, 16), np.float16)
    q[0, 3, 0, 0] = np.nan
    out, lse = fa2.run(q, q, q)
    assert np.isposinf(lse[0, 0]).tolist() == [True] * 8  # the NaN key poisons every row's sum
    assert np.isnan(out.astype(np.float32)).all()


def test_fa2_and_kernel1_agree_where_both_apply_within_the_rule():
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((1, 128, 1, 128)).astype(ml_dtypes.bfloat16) for _ in range(3))
    a, _ = fa2.run(q, k, v)
    b = kernel1.run(q, k, v)
    args = check_args(q, k, v)
    ref, _ = attention_reference(q, k, v, args)
    lowp, _ = attention_lowp(q, k, v, args)
    assert passes_flash_attn_rule(a, ref, lowp) and passes_flash_attn_rule(b, ref, lowp)


def test_kernel1_preconditions_name_the_seed_limits():
    q = np.zeros((1, 64, 1, 64), np.float16)
    with pytest.raises(ArgumentError, match="headdim 128 only"):
        kernel1.run(q, q, q)
    q = np.zeros((1, 96, 1, 128), np.float16)
    with pytest.raises(ArgumentError, match="seqlen % 64"):
        kernel1.run(q, q, q)
    with pytest.raises(NotImplementedError, match="does not model causal or local masks"):
        run_twin("kernel1", q, q, q, causal=True)


def test_fa2_forward_checks_its_arrays():
    pb = fa2.problem_from_args(check_args(*(np.zeros((1, 4, 1, 64), np.float16),) * 3))
    with pytest.raises(ArgumentError, match="q="):
        fa2.forward(pb, np.zeros((1, 4, 1, 32), np.uint16), np.zeros((1, 4, 1, 64), np.uint16),
                    np.zeros((1, 4, 1, 64), np.uint16))


def test_cta_batches_check_their_arguments(monkeypatch):
    from flashsim.kernels.common import default_threads, run_batches

    with pytest.raises(ArgumentError, match="batch=0"):
        run_batches(lambda idx: None, np.arange(4), 0)
    monkeypatch.setenv("FLASHSIM_THREADS", "two")
    with pytest.raises(ArgumentError, match="FLASHSIM_THREADS='two'"):
        default_threads()
    monkeypatch.setenv("FLASHSIM_THREADS", "0")
    with pytest.raises(ArgumentError, match="FLASHSIM_THREADS='0'"):
        default_threads()
    monkeypatch.setenv("FLASHSIM_THREADS", "2")
    seen = []
    run_batches(lambda idx: seen.extend(idx.tolist()), np.arange(10), 3)
    assert sorted(seen) == list(range(10))  # every CTA once, whatever the threads


def test_threads_do_not_change_a_bit():
    case = problems.random_case(np.random.default_rng(11), "fa2")
    one = fa2.run(case.q, case.k, case.v, threads=1, **case.kwargs)
    two = fa2.run(case.q, case.k, case.v, threads=2, **case.kwargs)
    assert np.array_equal(one[0].view(np.uint16), two[0].view(np.uint16)) and np.array_equal(one[1], two[1])
