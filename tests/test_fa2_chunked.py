"""fa2_chunked: fa2.cu's kChunked instances (FlashAttention-3's chunked attention, ``attention_chunk``, with the
tiles of flash-attn's sm80 traits) on the CPU. The mask is FA3's (a row attends the keys of its own chunk, within
any causal/local window); the twin passes flash-attn's rule against float64 and its block ranges hold every key
a row attends; the cubin in the SASS interpreter equals the twin bit for bit (plain and traced builds); every
other kernel refuses a chunk, bad chunks are refused by name; and fa2.cu still compiles the H100-verified fa2
and fa2_sm8x entry points to the same bytes. On the GPU: pytest --gpu (tests/test_fa_gpu.py draws fa2_chunked
from its domain like every kernel) and docs/adding-a-kernel.md's commands."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
from pathlib import Path

import numpy as np
import pytest

from flashsim import ArgumentError
from flashsim.api import flash_attn_func
from flashsim.attention import attention_lowp, attention_reference, check_args, passes_flash_attn_rule
from flashsim.kernels import fa2, problems, run_twin
from flashsim.kernels.spec import FEATURES, SPECS, get

ROOT = Path(__file__).resolve().parents[1]
KERNEL = "fa2_chunked"


def _case(**over):
    """A small fa2_chunked problem: batch 1, 2 query heads on 1 kv head, no mask, then ``over``."""
    p = problems.draw_params(problems.rng_pick(np.random.default_rng(0)), KERNEL)
    p.update(batch=1, heads=2, heads_k=1, kind="normal", causal=False, window_size=(-1, -1), softcap=0.0,
             softmax_scale=None, seed=3, attention_chunk=0)
    p.update(over)
    return problems.make_case(p)


# ------------------------------------------------------------------------------------------------ the mask


def _fa3_chunk_masked(sq: int, sk: int, chunk: int) -> np.ndarray:
    """FA3's hopper/test_util.py construct_chunk_mask (no padding): True where a key is masked, the chunk start
    taken as diag - diag % C (Python's and torch's remainder: floor semantics, so negative diagonals too)."""
    row = np.arange(sq)[:, None]
    col = np.arange(sk)[None, :]
    start = row + sk - sq - (row + sk - sq) % chunk
    return (col < start) | (col >= start + chunk)


@pytest.mark.parametrize("sq,sk", [(1, 1), (5, 40), (40, 5), (64, 64), (100, 257), (300, 33)])
@pytest.mark.parametrize("chunk", [1, 3, 16, 48, 1000])
@pytest.mark.parametrize("mask", [dict(), dict(causal=True), dict(window_size=(7, 2)), dict(window_size=(-1, 5)),
                                  dict(window_size=(10, -1))], ids=["none", "causal", "local", "right", "left"])
def test_the_mask_is_the_window_anded_with_fa3s_chunk(sq, sk, chunk, mask):
    """key_mask (the float64 reference's mask) with a chunk is FA2's window mask without it, minus FA3's chunk
    mask: attention_ref ORs the masked sets."""
    q, k = np.zeros((1, sq, 1, 8), np.float16), np.zeros((1, sk, 1, 8), np.float16)
    plain = check_args(q, k, k, **mask).key_mask()
    chunked = check_args(q, k, k, attention_chunk=chunk, **mask).key_mask()
    assert np.array_equal(chunked, plain & ~_fa3_chunk_masked(sq, sk, chunk))


def test_a_row_attends_its_chunk_only():
    """Bottom-right aligned chunks: with seqlen_q 4 and seqlen_k 10, rows sit on keys 6..9; chunks of 4 start at
    keys 4 and 8. Causal: a row sees its chunk up to its diagonal; no mask: the whole chunk, later keys too."""
    q, k = np.zeros((1, 4, 1, 8), np.float16), np.zeros((1, 10, 1, 8), np.float16)
    causal = check_args(q, k, k, causal=True, attention_chunk=4).key_mask().astype(int)
    assert causal.tolist() == [[0, 0, 0, 0, 1, 1, 1, 0, 0, 0], [0, 0, 0, 0, 1, 1, 1, 1, 0, 0],
                               [0, 0, 0, 0, 0, 0, 0, 0, 1, 0], [0, 0, 0, 0, 0, 0, 0, 0, 1, 1]]
    free = check_args(q, k, k, attention_chunk=4).key_mask().astype(int)
    assert free.tolist() == [[0, 0, 0, 0, 1, 1, 1, 1, 0, 0]] * 2 + [[0] * 8 + [1, 1]] * 2
    # seqlen_q > seqlen_k: rows before the first key (negative diagonals) have no key in their chunk
    q = np.zeros((1, 12, 1, 8), np.float16)
    assert not check_args(q, k, k, attention_chunk=4).key_mask()[:2].any()


# ------------------------------------------------------------------------------------------------ the twin


@pytest.mark.parametrize("seed", range(12))
def test_twin_passes_flash_attn_rule(seed):
    case = problems.random_case(np.random.default_rng([seed, 15]), KERNEL)
    out, lse = run_twin(KERNEL, case.q, case.k, case.v, **case.kwargs)
    if case.params["kind"] == "nan_inf":
        return  # where NaN and Inf propagate is the hardware's to say (gpu/validate_fa.py): bits only, on the GPU
    args = check_args(case.q, case.k, case.v, **case.kwargs)
    ref, ref_lse = attention_reference(case.q, case.k, case.v, args)
    lowp, _ = attention_lowp(case.q, case.k, case.v, args)
    assert passes_flash_attn_rule(out, ref, lowp), case.describe()
    fin = np.isfinite(ref_lse)
    assert np.array_equal(np.isposinf(lse), np.isposinf(ref_lse) | np.isnan(ref_lse)), case.describe()
    assert np.allclose(lse[fin], ref_lse[fin], atol=1e-4, rtol=1e-5), case.describe()


@pytest.mark.parametrize("mask", [dict(), dict(causal=True), dict(window_size=(30, 4))], ids=["none", "causal", "local"])
@pytest.mark.parametrize("headdim", [64, 128])
def test_chunks_pass_the_rule_with_every_mask(mask, headdim):
    rng = np.random.default_rng(headdim)
    q = rng.standard_normal((1, 150, 2, headdim)).astype(np.float16)
    k, v = (rng.standard_normal((1, 270, 1, headdim)).astype(np.float16) for _ in range(2))
    for chunk in (1, 37, 128):
        out, lse, _ = flash_attn_func(q, k, v, return_attn_probs=True, kernel=KERNEL, attention_chunk=chunk, **mask)
        args = check_args(q, k, v, attention_chunk=chunk, **mask)
        ref, ref_lse = attention_reference(q, k, v, args)
        lowp, _ = attention_lowp(q, k, v, args)
        assert passes_flash_attn_rule(out, ref, lowp), (chunk, mask)
        assert np.array_equal(np.isposinf(lse), np.isposinf(ref_lse)) and np.allclose(lse, ref_lse, atol=1e-4)


def test_a_chunk_holding_every_key_changes_no_bit():
    """seqlen_q <= seqlen_k and C past every key: the chunk masks nothing, and the masked steps give the same
    bits (no row is ever all -inf, so Check_inf changes nothing)."""
    rng = np.random.default_rng(2)
    q = rng.standard_normal((1, 100, 2, 64)).astype(np.float16)
    k, v = (rng.standard_normal((1, 300, 2, 64)).astype(np.float16) for _ in range(2))
    a = flash_attn_func(q, k, v, return_attn_probs=True, kernel=KERNEL)
    b = flash_attn_func(q, k, v, return_attn_probs=True, kernel=KERNEL, attention_chunk=512)
    assert np.array_equal(a[0].view(np.uint16), b[0].view(np.uint16)) and np.array_equal(a[1], b[1])


@pytest.mark.parametrize("sq,sk", [(1, 300), (100, 90), (129, 257), (300, 33), (256, 256)])
@pytest.mark.parametrize("chunk", [1, 7, 64, 100, 512])
@pytest.mark.parametrize("mask", [dict(), dict(causal=True), dict(window_size=(20, 3))], ids=["none", "causal", "local"])
def test_block_ranges_hold_every_attended_key(sq, sk, chunk, mask):
    """n_block_range (fa2.cu's n_block_min/max, FA3's block.h with the chunk): every key a CTA's rows attend
    lies in its KV blocks, and a CTA whose range is empty has rows that attend nothing."""
    q, k = np.zeros((1, sq, 1, 64), np.float16), np.zeros((1, sk, 1, 64), np.float16)
    args = check_args(q, k, k, attention_chunk=chunk, **mask)
    keep = args.key_mask()
    for headdim in (64, 128):
        pb = fa2.problem(get(KERNEL).instance(headdim), args)
        lo, hi = pb.n_block_range(np.arange(pb.m_blocks))
        for m in range(pb.m_blocks):
            rows = keep[m * pb.block_m:(m + 1) * pb.block_m]
            cols = np.nonzero(rows.any(axis=0))[0]
            if cols.size:
                assert lo[m] * pb.block_n <= cols.min() and cols.max() < hi[m] * pb.block_n, (headdim, m)
            else:
                assert pb.local_mask  # an empty range is taken as such (O = 0, lse = +inf)


def test_the_block_range_is_fa3s():
    """hdim 128 (kBlockM 128, kBlockN 64), seqlen_q 256, seqlen_k 300, C 100: m_block 1's rows sit on keys
    172..299, chunks [100, 200) to [200, 300): n_block_min = 100 / 64 = 1, n_block_max = ceil(300 / 64) = 5."""
    q, k = np.zeros((1, 256, 1, 128), np.float16), np.zeros((1, 300, 1, 128), np.float16)
    pb = fa2.problem_from_args(check_args(q, k, k, attention_chunk=100), KERNEL)
    lo, hi = pb.n_block_range(np.arange(2))
    assert (lo.tolist(), hi.tolist()) == ([0, 1], [4, 5])  # m_block 0: keys 44..171, chunks [0, 200): 0 to ceil(200/64)
    assert pb.local_mask and not fa2.problem_from_args(check_args(q, k, k), KERNEL).local_mask


# ------------------------------------------------------------------------------------------------ the kernel


def test_the_chunked_entry_points_take_attention_chunk_last():
    """The launch tuple of fa2_chunked is fa2's plus attention_chunk (int32); fa2's is unchanged."""
    import flashsim.cuda as fc

    case = _case(headdim=64, attention_chunk=48, causal=True)
    args = check_args(case.q, case.k, case.v, **case.kwargs)
    params, _, _ = fa2.launch_args(get(KERNEL).instance_for(args), args, case.q, case.k, case.v, fc)
    base = check_args(case.q, case.k, case.v, causal=True)
    plain, _, _ = fa2.launch_args(get("fa2").instance_for(base), base, case.q, case.k, case.v, fc)
    assert len(params) == len(plain) + 1 == 17
    assert params[-1] == np.int32(48) and params[-1].dtype == np.int32
    assert [type(x) for x in params[5:-1]] == [type(x) for x in plain[5:]]


def test_the_spec():
    s = get(KERNEL)
    assert {d: (s.instance(d).block_m, s.instance(d).block_n) for d in (64, 128)} == {64: (128, 128), 128: (128, 64)}
    assert s.function_names == ["fa2_chunked_hdim64_f16", "fa2_chunked_hdim64_bf16", "fa2_chunked_hdim128_f16",
                                "fa2_chunked_hdim128_bf16"]
    assert s.features == {"masks", "softcap", "gqa", "chunk"} and s.config_of == "fa2"
    assert [n for n, x in SPECS.items() if "chunk" in x.features] == [KERNEL]
    assert s.instance(64).smem_bytes == 48 * 1024 and s.instance(128).smem_bytes == 64 * 1024
    assert 0 in s.domain.attention_chunk and all(c >= 0 for c in s.domain.attention_chunk)


def test_the_domain_draws_chunks_for_the_chunked_kernel_only():
    drawn = {problems.draw_params(problems.rng_pick(np.random.default_rng(i)), KERNEL)["attention_chunk"]
             for i in range(80)}
    assert drawn <= set(get(KERNEL).domain.attention_chunk) and len(drawn) > 3
    for kernel in SPECS:
        if kernel != KERNEL:
            p = problems.draw_params(problems.rng_pick(np.random.default_rng(0)), kernel)
            assert "attention_chunk" not in p and "attention_chunk" not in problems.make_case(p).kwargs
    case = _case(attention_chunk=7)
    assert case.kwargs["attention_chunk"] == 7 and "chunk=7" in case.describe()
    with pytest.raises(ArgumentError, match=r"^domain=.*kernel 'fa2_chunked': draw chunk lengths >= 0 "
                                            r"\(attention_chunk=\.\.\.\) exactly when the kernel models chunked"):
        dataclasses.replace(get(KERNEL), domain=dataclasses.replace(get(KERNEL).domain, attention_chunk=None))
    with pytest.raises(ArgumentError, match=r"^domain=.*kernel 'fa2': draw chunk lengths"):
        dataclasses.replace(get("fa2"), domain=dataclasses.replace(get("fa2").domain, attention_chunk=(0, 16)))


# ------------------------------------------------------------------------------------------------ interpreter


@pytest.mark.parametrize("over", [
    dict(headdim=64, seqlen_q=100, seqlen_k=90, dtype="bfloat16", causal=True, attention_chunk=32),
    dict(headdim=128, seqlen_q=100, seqlen_k=90, dtype="float16", attention_chunk=48),
    dict(headdim=96, seqlen_q=129, seqlen_k=200, dtype="float16", window_size=(20, 7), softcap=30.0, kind="large",
         attention_chunk=100),
    dict(headdim=40, seqlen_q=200, seqlen_k=33, dtype="float16", kind="nan_inf", attention_chunk=7),
    dict(headdim=64, seqlen_q=64, seqlen_k=300, dtype="bfloat16", heads=3, attention_chunk=128),
    dict(headdim=128, seqlen_q=130, seqlen_k=300, dtype="float16", attention_chunk=512),
], ids=lambda o: f"d{o['headdim']}_c{o['attention_chunk']}")
def test_the_interpreter_runs_the_cubin_bit_for_bit_as_the_twin(over):
    """fa2.cu's fa2_chunked entry points in the SASS interpreter (NVRTC's cubin, the one a GPU loads as is),
    out and LSE bit for bit against the twin with its tiles."""
    from flashsim.kernels.launch import run_kernel

    case = _case(**over)
    i_out, i_lse = run_kernel(KERNEL, case.q, case.k, case.v, backend="interp", **case.kwargs)
    t_out, t_lse = run_twin(KERNEL, case.q, case.k, case.v, **case.kwargs)
    np.testing.assert_array_equal(i_out.view(np.uint16), t_out.view(np.uint16), err_msg=case.describe())
    np.testing.assert_array_equal(i_lse.view(np.uint32), t_lse.view(np.uint32), err_msg=case.describe())


@pytest.mark.parametrize("seed", range(10))
def test_the_interpreter_equals_the_twin_on_random_problems(seed):
    from flashsim.kernels.launch import run_kernel

    case = problems.random_case(np.random.default_rng([seed, 77]), KERNEL)
    i_out, i_lse = run_kernel(KERNEL, case.q, case.k, case.v, backend="interp", **case.kwargs)
    t_out, t_lse = run_twin(KERNEL, case.q, case.k, case.v, **case.kwargs)
    np.testing.assert_array_equal(i_out.view(np.uint16), t_out.view(np.uint16), err_msg=case.describe())
    np.testing.assert_array_equal(i_lse.view(np.uint32), t_lse.view(np.uint32), err_msg=case.describe())


def test_the_traced_build_in_the_interpreter_diffs_clean_against_the_twin():
    """The FS_TRACE build of the chunked entry points records at every event the registers the twin records."""
    from flashsim import session

    case = _case(headdim=64, seqlen_q=200, seqlen_k=260, dtype="bfloat16", causal=True, attention_chunk=100)
    interp = session.run_case(case, backend="interp", ctas=[1])  # m_block 1 of head 0
    twin = session.run_case(case, backend="sim", ctas=[1])
    d = session.diff_runs(interp, twin, "interpreter", "twin")
    assert d.clean, d.format(KERNEL, interp.meta["instance_headdim"], "bfloat16")
    assert d.compared == len(twin.events) and np.array_equal(interp.arrays["out"], twin.arrays["out"])


# ------------------------------------------------------------------------------------------------ refusals


@pytest.mark.parametrize("kernel", [k for k, s in SPECS.items() if "chunk" not in s.features])
def test_every_other_kernel_refuses_a_chunk_by_name(kernel):
    from flashsim.kernels.launch import prepare

    s = get(kernel)
    d = s.domain.headdim[-1]
    sq = s.domain.seqlen_q[-1]
    q = np.zeros((1, sq, 1, d), np.float16)
    msg = rf"^kernel '{kernel}' does not model chunked attention \(attention_chunk\)"
    with pytest.raises(NotImplementedError, match=msg):
        flash_attn_func(q, q, q, kernel=kernel, attention_chunk=16)
    with pytest.raises(NotImplementedError, match=msg):
        run_twin(kernel, q, q, q, attention_chunk=16)
    with pytest.raises(NotImplementedError, match=msg):
        prepare(kernel, q, q, q, backend="interp", attention_chunk=16)  # before any device is touched
    assert FEATURES["chunk"][0] == "chunked attention (attention_chunk)"


@pytest.mark.parametrize("bad", [-1, 2**31, 1.5, 16.0, True, "16", None, np.float32(4)])
def test_a_bad_chunk_is_refused_by_name(bad):
    q = np.zeros((1, 8, 1, 16), np.float16)
    match = r"^attention_chunk=.*: expected an int in \[0, 2\*\*31 - 1\]: 0 \(off\) or the chunk length in keys"
    with pytest.raises(ArgumentError, match=match):
        check_args(q, q, q, attention_chunk=bad)
    with pytest.raises(ArgumentError, match=match):
        flash_attn_func(q, q, q, kernel=KERNEL, attention_chunk=bad)


def test_numpy_ints_are_chunks():
    q = np.zeros((1, 8, 1, 16), np.float16)
    assert check_args(q, q, q, attention_chunk=np.int64(4)).attention_chunk == 4
    assert type(check_args(q, q, q, attention_chunk=np.int16(4)).attention_chunk) is int
    assert check_args(q, q, q).attention_chunk == 0


# ------------------------------------------------------------------------------------------------ fa2, fa2_sm8x


def test_fa2_and_fa2_sm8x_compile_to_the_h100_verified_bytes():
    """Adding the kChunked (and kExt) instances must leave the verified ones alone: the .text section of every
    verified fa2 and fa2_sm8x entry point (plain and FS_TRACE builds) has the bytes it had when the H100 verified them
    (tests/data/fa2_verified_text.json). A difference needs a new GPU validation of those kernels."""
    from elftools.elf.elffile import ELFFile

    from flashsim.kernels.sources import interpreted_module
    from flashsim.sass.toolchain import nvrtc_version

    want = json.loads((ROOT / "tests" / "data" / "fa2_verified_text.json").read_text())
    if nvrtc_version() != want["nvrtc"]:
        pytest.skip(f"the digests are of NVRTC {want['nvrtc']}'s cubins; this is NVRTC {nvrtc_version()}")
    for build, trace in (("build", False), ("traced", True)):
        mod = interpreted_module("fa2.cu", options=get("fa2").build_options(trace))
        text = {s.name: s.data() for s in ELFFile(io.BytesIO(mod.cubin)).iter_sections()}
        got = {f: hashlib.sha256(text[".text." + f]).hexdigest() for f in want[build]}
        assert set(want[build]) <= set(get("fa2").function_names + get("fa2_sm8x").function_names
                                       + get("fa2_splitkv").function_names + get("fa2_splitkv1").function_names)
        assert got == want[build], f"{build}: {[f for f in got if got[f] != want[build][f]]} changed"
