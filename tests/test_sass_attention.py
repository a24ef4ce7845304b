"""The SASS interpreter on three attention kernels it was not built around (gpu/attn_extra.py):
attn_regs (P in registers, cp.async double buffering), attn_spill (register spills, local memory) and
attn_varlen (packed sequences, early-exiting warps, data-dependent loops, shuffles).

CPU: each kernel compiles with the SASS features it exists to exercise; runs in the interpreter on small
seeded problems whose seqlens are not multiples of the tiles, and passes flash-attn's acceptance rule
against the float64 reference (LSE within 1e-4); runs are deterministic, also under a different legal
warp schedule. GPU (``--gpu``): the same problems on the device, from the same cubin, bit for bit.
"""

from __future__ import annotations

import sys
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import flashsim.cuda as fc
from flashsim.attention import passes_flash_attn_rule
from flashsim.errors import ArgumentError
from flashsim.gpu import attn_extra
from flashsim.gpu.attn_extra import EXTRA_KERNELS, make_problem, random_problem, reference

gpu = pytest.mark.gpu

def interp(p, **kw):
    """``p`` in the interpreter."""
    return p.run("interp", **kw)


# ------------------------------------------------------------------------------------------- problems

# (kernel, seed, overrides): every kernel in both dtypes, with and without the causal mask, both head dims
RANDOM = [
    ("attn_regs", 0, dict(headdim=64, dtype="float16", causal=False)),
    ("attn_regs", 1, dict(headdim=64, dtype="bfloat16", causal=True)),
    ("attn_regs", 2, dict(headdim=128, dtype="float16", causal=True)),
    ("attn_regs", 3, dict(headdim=128, dtype="bfloat16", causal=False)),
    ("attn_spill", 0, dict(dtype="float16", causal=False)),
    ("attn_spill", 1, dict(dtype="bfloat16", causal=True)),
    ("attn_spill", 2, dict(dtype="float16", causal=True, max_seqlen=60)),
    ("attn_varlen", 0, dict(dtype="float16", causal=False)),
    ("attn_varlen", 1, dict(dtype="bfloat16", causal=True)),
    ("attn_varlen", 2, dict(dtype="float16", causal=True)),
] + [(kernel, seed, {}) for kernel in sorted(EXTRA_KERNELS) for seed in range(100, 105)]  # all drawn

# corner cases: rows (and whole CTAs) with no key, one row / one key, exact tile multiples, empty sequences
EDGES = [
    ("attn_regs", dict(seqlens_q=130, seqlens_k=40, causal=True)),  # CTA 0 sees no key: O = 0, lse = +inf
    ("attn_regs", dict(seqlens_q=[1, 1], seqlens_k=[1, 1], headdim=128, dtype="bfloat16")),
    ("attn_regs", dict(seqlens_q=64, seqlens_k=128, heads=2, causal=True)),
    # 4 KV blocks: both K/V buffers are refilled while the other is read
    ("attn_regs", dict(seqlens_q=100, seqlens_k=200, headdim=128, dtype="bfloat16")),
    ("attn_regs", dict(seqlens_q=150, seqlens_k=190, headdim=128, causal=True)),
    ("attn_spill", dict(seqlens_q=150, seqlens_k=20, causal=True)),  # empty rows, lane-divergent key counts
    ("attn_spill", dict(seqlens_q=1, seqlens_k=1, dtype="bfloat16")),
    ("attn_varlen", dict(seqlens_q=[0, 65, 1, 130], seqlens_k=[5, 0, 70, 33], causal=True)),
    ("attn_varlen", dict(seqlens_q=[17], seqlens_k=[3], heads=2, dtype="bfloat16")),
]


def _random(case):
    kernel, seed, kw = case
    return random_problem(kernel, seed, **kw)


def _edge(case):
    kernel, kw = case
    return make_problem(kernel, 7, **kw)


PROBLEMS = [pytest.param(_random, c, id=f"{c[0]}-seed{c[1]}") for c in RANDOM] + \
           [pytest.param(_edge, c, id=f"{c[0]}-edge{i}") for i, c in enumerate(EDGES)]


def check_against_reference(p, out, lse):
    ref, ref_lse, lowp = reference(p)
    assert out.shape == p.q.shape and out.dtype == p.q.dtype
    assert lse.shape == ref_lse.shape and lse.dtype == np.float32
    assert not np.isnan(out.astype(np.float32)).any(), f"{p.describe()}: output elements left unwritten (NaN)"
    assert not np.isnan(lse).any(), f"{p.describe()}: lse elements left unwritten (NaN)"
    rule = passes_flash_attn_rule(out, ref, lowp)
    assert rule, f"{p.describe()}: {rule}"
    empty = np.isposinf(ref_lse)
    assert np.array_equal(np.isposinf(lse), empty), f"{p.describe()}: +inf lse where a row has no key"
    np.testing.assert_allclose(lse[~empty], ref_lse[~empty], atol=1e-4, rtol=1e-5, err_msg=p.describe())
    # a row with no key gives O = +0 exactly (FA2's convention)
    rows = np.moveaxis(empty, 0, -1) if p.cu_seqlens_q is not None else np.moveaxis(empty, 1, -1)
    assert (out.view(np.uint16)[rows] == 0).all(), f"{p.describe()}: rows with no key must be +0"


# ------------------------------------------------------------------------------------------- compiling


def _listing(kernel: str, function: str) -> list:
    """The kernel's SASS instructions (flashsim.sass.isa.Instr), in address order."""
    prog = attn_extra.module(kernel).get_function(function)._prog()
    return sorted(prog.instructions.values(), key=lambda ins: ins.pc)


@pytest.mark.parametrize("kernel", sorted(EXTRA_KERNELS))
def test_kernel_compiles_with_every_entry_point(kernel):
    mod = attn_extra.module(kernel)
    assert mod.cubin[:4] == b"\x7fELF"
    assert set(attn_extra.function_names(kernel)) <= set(mod.kernels)
    assert attn_extra.cubin_sha256(kernel) == mod.sha256
    for name in attn_extra.function_names(kernel):
        assert mod.get_function(name).attributes["max_threads_per_block"] == EXTRA_KERNELS[kernel].threads


@pytest.mark.parametrize("function", attn_extra.function_names("attn_regs"))
def test_attn_regs_keeps_p_in_registers_and_double_buffers(function):
    listing = _listing("attn_regs", function)
    ops = Counter(ins.name for ins in listing)
    assert ops["HMMA.16816.F32" + (".BF16" if "bf16" in function else "")] > 0
    assert ops["LDSM.16.MT88.4"] > 0  # V by ldmatrix.trans
    assert ops["LDGSTS.E.BYPASS.128"] > 0 and ops["LDGDEPBAR"] > 0
    waits = {ins.operands[1].value for ins in listing if ins.name == "DEPBAR.LE"}
    assert waits == {0, 1}  # cp.async.wait_group 1 while the next block is in flight, 0 at the last
    # P goes from the S accumulators to the A fragments in registers: no shared-memory store at all
    assert not any(ins.opcode in ("STS", "STSM") for ins in listing)
    assert ops["BAR.SYNC.DEFER_BLOCKING"] == 2


@pytest.mark.parametrize("function", attn_extra.function_names("attn_spill"))
def test_attn_spill_spills_to_local_memory(function):
    ops = Counter(ins.opcode for ins in _listing("attn_spill", function))
    assert ops["STL"] >= 50 and ops["LDL"] >= 50, ops
    attrs = attn_extra.module("attn_spill").get_function(function).attributes
    assert attrs["num_regs"] <= 64 and attrs["local_size_bytes"] >= 4 * 32  # s[32] at least


@pytest.mark.parametrize("function", attn_extra.function_names("attn_varlen"))
def test_attn_varlen_exits_early_and_has_no_block_barrier(function):
    listing = _listing("attn_varlen", function)
    first_shfl = min(ins.pc for ins in listing if ins.opcode == "SHFL")
    early = [ins for ins in listing if ins.opcode == "EXIT" and ins.pc < first_shfl]
    assert len(early) >= 2 and all(ins.guard is not None for ins in early)  # the CTA's and the warps' exits
    assert not any(ins.opcode == "BAR" for ins in listing)  # no block-wide barrier anywhere
    assert {"SHFL.BFLY", "SHFL.IDX"} <= {ins.name for ins in listing}
    # data-dependent loops: backward branches (the sequence search, the KV loop, the P V key loop)
    backward = [ins for ins in listing if ins.opcode == "BRA" and ins.operands[-1].kind == "imm"
                and ins.operands[-1].value < ins.pc]
    assert len(backward) >= 3


# ------------------------------------------------------------------------------------------- running


@pytest.mark.parametrize(("make", "case"), PROBLEMS)
def test_interpreter_passes_the_flash_attn_rule(make, case):
    p = make(case)
    out, lse = interp(p)
    check_against_reference(p, out, lse)


@pytest.mark.parametrize("kernel", sorted(EXTRA_KERNELS))
def test_interpreter_is_deterministic_under_any_schedule(kernel):
    p = random_problem(kernel, 11, max_seqlen=70)
    out1, lse1 = interp(p)
    out2, lse2 = interp(p)
    out3, lse3 = interp(p, exec_options=fc.ExecOptions(schedule_seed=5))  # another legal interleaving
    for out, lse in ((out2, lse2), (out3, lse3)):
        np.testing.assert_array_equal(out.view(np.uint16), out1.view(np.uint16))
        np.testing.assert_array_equal(lse.view(np.uint32), lse1.view(np.uint32))


def test_argument_errors_come_before_any_device(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # importing cupy would now fail
    p = make_problem("attn_regs", 0, seqlens_q=8, seqlens_k=8)
    with pytest.raises(ArgumentError, match=r"kernel='attn_nope'"):
        attn_extra.run("attn_nope", p.q, p.k, p.v)
    with pytest.raises(ArgumentError, match=r"backend='cuda'"):
        attn_extra.run("attn_regs", p.q, p.k, p.v, backend="cuda")
    with pytest.raises(ArgumentError, match=r"head dims \(64,\)"):
        d128 = make_problem("attn_regs", 0, seqlens_q=8, seqlens_k=8, headdim=128)
        attn_extra.run("attn_spill", d128.q, d128.k, d128.v, backend="gpu")
    with pytest.raises(ArgumentError, match=r"needs cu_seqlens_q"):
        attn_extra.run("attn_varlen", p.q[0], p.k[0], p.v[0], backend="gpu")
    vp = make_problem("attn_varlen", 0, seqlens_q=[3, 4], seqlens_k=[2, 2])
    with pytest.raises(ArgumentError, match=r"cu_seqlens_k=\[0, 2, 5\]"):
        attn_extra.run("attn_varlen", vp.q, vp.k, vp.v, cu_seqlens_q=vp.cu_seqlens_q,
                       cu_seqlens_k=np.array([0, 2, 5], np.int32), backend="gpu")
    with pytest.raises(ArgumentError, match=r"expected one of"):
        attn_extra.run("attn_regs", p.q.astype(np.float32), p.k, p.v)
    with pytest.raises(NotImplementedError, match=r"GQA"):
        attn_extra.run("attn_regs", np.concatenate([p.q, p.q], axis=2), p.k, p.v, backend="gpu")


def test_random_problems_are_seeded_and_mostly_off_the_tiles():
    a, b = random_problem("attn_regs", 3), random_problem("attn_regs", 3)
    assert a.describe() == b.describe() and np.array_equal(a.q.view(np.uint16), b.q.view(np.uint16))
    lens = [random_problem("attn_regs", s).q.shape[1] for s in range(20)]
    assert sum(n % 64 != 0 for n in lens) >= 15
    v = random_problem("attn_varlen", 4)
    assert v.cu_seqlens_q[0] == 0 and v.cu_seqlens_q[-1] == v.q.shape[0] and v.q.ndim == 3


@pytest.mark.parametrize("kernel", sorted(EXTRA_KERNELS))
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_hypothesis_draws_the_same_problems_through_pick(kernel, data):
    """random_problem is extra.draw_params on a seeded generator's pick; hypothesis draws through the same
    interface (flashsim.strategies.extra_cases): shapes in the kernel's domain either way."""
    from flashsim.kernels import extra
    from flashsim.kernels.problems import rng_pick
    from flashsim.strategies import extra_cases

    p = data.draw(extra_cases(kernel, max_seqlen=40))
    spec = EXTRA_KERNELS[kernel]
    d = p.q.shape[-1]
    assert d in spec.headdims and attn_extra._digest(p)
    if spec.varlen:
        assert p.cu_seqlens_q[-1] == p.q.shape[0] and p.cu_seqlens_k[-1] == p.k.shape[0]
        assert np.diff(p.cu_seqlens_q).max(initial=0) <= 40
    else:
        assert 1 <= p.q.shape[1] <= 40 and p.q.shape[2] == p.k.shape[2] in (1, 2)
    seed = data.draw(st.integers(0, 1000))
    pick = rng_pick(np.random.default_rng([seed, sorted(EXTRA_KERNELS).index(kernel)]))
    again = extra.make_problem(kernel, seed, **extra.draw_params(pick, kernel))
    assert attn_extra._digest(again) == attn_extra._digest(random_problem(kernel, seed))


# ------------------------------------------------------------------------------------------- GPU


@gpu
@pytest.mark.parametrize(("make", "case"), PROBLEMS)
def test_gpu_and_interpreter_agree_bit_for_bit(make, case):
    p = make(case)
    out_gpu, lse_gpu = p.run("gpu")  # the interpreter module's cubin, sha256-checked on load
    check_against_reference(p, out_gpu, lse_gpu)
    out, lse = interp(p)
    np.testing.assert_array_equal(out.view(np.uint16), out_gpu.view(np.uint16), err_msg=p.describe())
    np.testing.assert_array_equal(lse.view(np.uint32), lse_gpu.view(np.uint32), err_msg=p.describe())


# ------------------------------------------------------------------------------------------- golden replay
GOLDEN = attn_extra.__file__.rsplit("/gpu/", 1)[0] + "/traces/sass/attn_extra_golden.npz"


def _golden_keys():
    import os

    if not os.path.exists(GOLDEN):
        return [pytest.param(None, marks=pytest.mark.skip(reason="no golden data yet: python -m flashsim.gpu.attn_extra "
                                                                    "--install on a GPU machine"))]
    with np.load(GOLDEN) as z:
        return sorted({k.rsplit("/", 1)[0] for k in z.files if k.endswith("/seed")})


@pytest.mark.parametrize("key", _golden_keys())
def test_interpreter_replays_the_h100(key):
    with np.load(GOLDEN) as z:
        kernel = key.split("/")[0]
        p = random_problem(kernel, int(z[f"{key}/seed"]))
        assert attn_extra._digest(p) == str(z[f"{key}/inputs_sha256"]), "the problem generator changed"
        sha = str(z[f"{key}/cubin_sha256"])
        want_out, want_lse = z[f"{key}/out"], z[f"{key}/lse"]
        recorded = z[f"cubin/{sha}"].tobytes()
    from flashsim.gpu import runtime

    spec = EXTRA_KERNELS[kernel]
    key_ = (runtime.source_hash(spec.file), tuple(spec.options))
    saved = runtime._INTERP.pop(key_, None)
    try:  # the recorded cubin: the interpreter equals the GPU on the very code the GPU ran
        assert runtime.interpreted_module(spec.file, options=spec.options, cubin=recorded).sha256 == sha
        out, lse = p.run("interp")
        np.testing.assert_array_equal(out.view(np.uint16), want_out, err_msg=p.describe() + " (recorded cubin)")
        np.testing.assert_array_equal(lse.view(np.uint32), want_lse, err_msg=p.describe() + " (recorded cubin)")
    finally:
        runtime._INTERP.pop(key_, None)
        if saved is not None:
            runtime._INTERP[key_] = saved
    # today's build of the source: a change to the kernel that changes its results fails here
    out, lse = p.run("interp")
    note = "" if attn_extra.cubin_sha256(kernel) == sha else " (the kernel's cubin changed since the recording)"
    np.testing.assert_array_equal(out.view(np.uint16), want_out, err_msg=p.describe() + note)
    np.testing.assert_array_equal(lse.view(np.uint32), want_lse, err_msg=p.describe() + note)
