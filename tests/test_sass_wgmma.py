"""The interpreter's wgmma (flashsim/sass/ops_gmma.py), CPU only: the H100's recorded wgmma outputs replayed
bit for bit through the probe's own cubin (fp8 -> f32 included), the SASS forms ptxas emits,
groups retired by the WARPGROUP.DEPBAR that waits for them, and the hazards of a wgmma in flight
(gpu/kernels/wgmma_hazards.cu) reported with both sides."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pytest

import flashsim.cuda as fc
from flashsim.cuda.module import Function
from flashsim.errors import SimulatedFault
from flashsim.golden import load
from flashsim.gpu import validate_wgmma as V
from flashsim.numerics import wgmma as W
from flashsim.sass.isa import parse_operand
from flashsim.sass.ops_gmma import WGMMA_IN_FLIGHT
from flashsim.sass.program import Program
from flashsim.sass.toolchain import compile_cuda
from flashsim.sass.tracing import TraceSpec
from flashsim.trace.container import TraceReader
from flashsim.warp.fragments import pack, wgmma_fragment
from flashsim.warp.matrix_desc import ARRANGEMENTS

REPO = Path(__file__).resolve().parents[1]
KERNELS = REPO / "gpu" / "kernels"
SAMPLES = REPO / "traces" / "wgmma" / "wgmma_samples.npz"
HAZARDS = KERNELS / "wgmma_hazards.cu"


def _build(path: Path, *defines: str) -> tuple[fc.RawModule, str]:
    cubin, log, _ = compile_cuda(path.read_text(), name=path.name,
                                 options=(f"--include-path={KERNELS}", *(f"-D{d}" for d in defines)), arch="sm_90a")
    return fc.RawModule(cubin=cubin), log


@pytest.fixture(scope="module")
def probe():
    return _build(KERNELS / V.PROBE_FILE)[0]


@pytest.fixture(scope="module")
def samples():
    arrays, prov = load(SAMPLES)
    assert "H100" in prov["name"]
    return arrays


def _groups() -> list[str]:
    with np.load(SAMPLES) as z:
        return sorted({k.rsplit("/", 1)[0] for k in z.files if k.endswith("/d")})


def _modelled(group: str) -> bool:
    from flashsim.gpu.validate_sass_wgmma import modelled

    return modelled(V.FORMS_BY_NAME[group.split("/")[0]])


GROUPS = _groups()
MODELLED = [g for g in GROUPS if _modelled(g)]


def _launch_probe(probe, samples, group, sel=None):
    """Run the recorded cases of ``group`` (all, or the mask ``sel``) through the probe's kernel, one launch per
    (arrangement of A, of B, scale-d); returns (interpreter's D, H100's D) for the cases run."""
    form_name, n_s, s_s = group.split("/")
    form = V.FORMS_BY_NAME[form_name]
    n, steps = int(n_s[1:]), int(s_s[1:])
    a, b, c, d = (samples[f"{group}/{x}"] for x in "abcd")
    arr_a, arr_b, sd = (samples[f"{group}/{x}"] for x in ("arr_a", "arr_b", "scale_d"))
    sel = np.ones(len(d), bool) if sel is None else sel
    kernel = probe.get_function(form.kernel(n))
    got = np.zeros_like(d)
    for key in sorted(set(zip(arr_a[sel].tolist(), arr_b[sel].tolist(), sd[sel].tolist()))):
        these = sel & (arr_a == key[0]) & (arr_b == key[1]) & (sd == key[2])
        out = fc.zeros(d[these].shape, d.dtype)
        err = fc.zeros(1, np.uint32)
        kernel((int(these.sum()),), (128,), (fc.asarray(np.ascontiguousarray(a[these])),
                                            fc.asarray(np.ascontiguousarray(b[these])),
                                            fc.asarray(np.ascontiguousarray(c[these])), out, np.int32(steps),
                                            np.int32(key[0]), np.int32(key[1]), np.int32(key[2]), err))
        assert int(err.get()[0]) == 0
        got[these] = out.get()
    return got[sel], d[sel]


# ------------------------------------------------------------------------------------------------ the H100 record


def test_the_record_holds_the_forms_this_file_replays():
    # 22 groups (11 forms x chains of 1 and 2, N = 8), all modelled: f16/bf16 -> f32, f16 -> f16 with A from
    # shared memory and from registers, e4m3 -> f16, and the 8 fp8 -> f32 groups
    assert len(GROUPS) == 22 and len(MODELLED) == 22


@pytest.mark.parametrize("group", MODELLED)
def test_the_h100_outputs_replay_bit_for_bit_in_the_interpreter(probe, samples, group):
    """Every recorded case of the group (every arrangement of A and B, scale-d 0 and 1, chains of 1 and 2, A
    from shared memory or registers) through the probe's cubin in the interpreter: D equals the H100's D."""
    got, want = _launch_probe(probe, samples, group)
    assert len(want) >= 8
    bad = np.nonzero((got != want).reshape(len(want), -1).any(axis=1))[0]
    assert bad.size == 0, f"{group}: cases {bad.tolist()} of {len(want)} differ from the H100"


# ------------------------------------------------------------------------------------------------ SASS forms


def test_descriptor_operands_parse():
    op = parse_operand("gdesc[UR12].negA.tnspA.tnspB")
    assert (op.kind, op.index, op.suffix) == ("gdesc", 12, ("negA", "tnspA", "tnspB"))
    assert parse_operand("gdesc[URZ]").index == 63
    assert parse_operand("gsb0").kind == "target"


def test_the_probe_commits_with_gsb0_and_waits_with_depbar(probe):
    """Every HGMMA/QGMMA of the probe either closes a group (gsb0) or is a chain member; the commit of a
    group whose wgmma ptxas already waited for is the RZ placeholder; every wait is DEPBAR.LE gsb0, 0."""
    prog = probe.get_function("wgmma_ss_m64n8k16_f32_f16_f16")._prog()
    texts = [i.text for i in prog.instructions.values()]
    gmma = [t for t in texts if "GMMA" in t]
    assert all(t.endswith("gsb0") for t in gmma)
    assert "HGMMA.64x8x16.F16 RZ, gdesc[URZ], RZ, !UPT, gsb0" in gmma
    assert {t for t in texts if t.startswith("WARPGROUP.DEPBAR")} == {"WARPGROUP.DEPBAR.LE gsb0, 0x0"}
    rs = probe.get_function("wgmma_rs_m64n8k32_f32_e4m3_e4m3")._prog()
    assert any(re.fullmatch(r"QGMMA\.64x8x32\.F32\.E4M3\.E4M3 R\d+, R\d+, gdesc\[UR\d+\], R\d+, UP0, gsb0", i.text)
               for i in rs.instructions.values())


# ------------------------------------------------------------------------------------------------ the hazard kernel


def _marker(name: str) -> int:
    for i, line in enumerate(HAZARDS.read_text().splitlines(), 1):
        if line.rstrip().endswith(f"// {name}"):
            return i
    raise AssertionError(f"no marker {name} in {HAZARDS.name}")


def _inputs(seed=0, k=16):
    rng = np.random.default_rng(seed)
    sign = lambda shape: rng.integers(0, 2, shape).astype(np.uint16) << 15  # noqa: E731
    a = rng.integers(0x2000, 0x3C00, (64, k)).astype(np.uint16) ^ sign((64, k))
    b = rng.integers(0x2000, 0x3C00, (k, 8)).astype(np.uint16) ^ sign((k, 8))
    c = rng.standard_normal((64, 8)).astype(np.float32).view(np.uint32)
    return a, b, c


def _run_hazards(kernel, a, b, c, flag=1, races=True):
    d, early = fc.zeros((64, 8), np.uint32), fc.zeros(128, np.uint32)
    with fc.checking(races=races, banks=False) as rep:
        kernel((1,), (128,), (fc.asarray(a), fc.asarray(b), fc.asarray(c), d, early, np.int32(flag)))
    return rep, d.get(), early.get()


def _pcs(fn, pattern: str) -> list[int]:
    return [pc for pc, i in sorted(fn._prog().instructions.items()) if re.search(pattern, i.text)]


def _without(fn, pc: int) -> Function:
    """``fn`` with the instruction at ``pc`` made a NOP: SASS in which a wait ptxas injected is missing."""
    prog = fn._prog()
    ins = [dataclasses.replace(i, opcode="NOP", mods=(), operands=(), guard=None, text="NOP") if i.pc == pc else i
           for i in prog.instructions.values()]
    edited = Function(fn.module, fn.name)
    edited._program = Program(prog.kernel, ins, prog.symbols, prog.cubin_sha256)
    return edited


def _first_register(frag_regs: np.ndarray) -> np.ndarray:
    """(128, regs) fragment registers -> register 0 of each thread (what bug 1 stores)."""
    return frag_regs[:, 0]


D_F32 = wgmma_fragment("D", n=8, dtype="f32")


def test_the_correct_kernel_is_clean_and_equals_the_model():
    mod, log = _build(HAZARDS)
    assert "C7517" not in log
    a, b, c = _inputs()
    rep, d, _ = _run_hazards(mod.get_function("wgmma_hazards"), a, b, c)
    assert rep.clean and rep.race_count == 0
    np.testing.assert_array_equal(d, W.wgmma(a, b, c, n=8, atype="f16", ctype="f32"))


def test_overwriting_b_before_the_wait_is_a_hazard_with_both_sides():
    mod, _ = _build(HAZARDS, "WGMMA_BUG=2")
    fn = mod.get_function("wgmma_hazards")
    a, b, c = _inputs(1)
    rep, d, _ = _run_hazards(fn, a, b, c)
    (gmma,) = _pcs(fn, r"^HGMMA")
    (sts,) = _pcs(fn, r"STS \[")
    hz = rep.race_sites
    assert rep.race_count == len(hz) == 64  # 64 lanes store one word of B each: a WAR with the wgmma's read
    for h in hz:
        assert h.kind == "WAR" and (h.first.op, h.second.op) == ("wgmma read", "write")
        assert (h.first.pc, h.second.pc) == (gmma, sts)
        assert Path(h.second.file).name == HAZARDS.name and h.second.line == _marker("HAZARD:overwrite_b")
        assert h.first.sass.startswith("HGMMA.64x8x16.F32") and h.second.warp in (0, 1)
    assert "with no synchronisation ordering them" in str(hz[0])
    # the wgmma read B when it issued: D is the product with the B the kernel stored first
    np.testing.assert_array_equal(d, W.wgmma(a, b, c, n=8, atype="f16", ctype="f32"))
    # without checking the same run computes the same D
    _, d2, _ = _run_hazards(fn, a, b, c, races=False)
    np.testing.assert_array_equal(d2, d)


def test_an_early_accumulator_read_gets_a_wait_from_ptxas_and_is_a_hazard_without_it():
    mod, log = _build(HAZARDS, "WGMMA_BUG=1")
    assert re.search(r"C7517.*warpgroup\.wait is injected.*'wgmma_hazards'", log)
    fn = mod.get_function("wgmma_hazards")
    a, b, c = _inputs(2)
    want = W.wgmma(a, b, c, n=8, atype="f16", ctype="f32")
    line = _marker("HAZARD:read_early")
    read = [pc for pc in _pcs(fn, r"^STG") if fn._prog().instructions[pc].line[1] == line]
    assert len(read) == 1
    # ptxas's SASS: a WARPGROUP.DEPBAR before the read; clean, and the read sees D
    waits = [pc for pc in _pcs(fn, r"^WARPGROUP\.DEPBAR") if pc < read[0]]
    rep, d, early = _run_hazards(fn, a, b, c)
    assert rep.clean
    np.testing.assert_array_equal(d, want)
    np.testing.assert_array_equal(early, _first_register(pack(D_F32, want)))
    # the same SASS without that wait: the read of the accumulator is reported, and it sees C
    rep, d, early = _run_hazards(_without(fn, waits[-1]), a, b, c)
    assert rep.race_count == len(rep.race_sites) == 4  # once per warp (its first lane)
    (gmma,) = _pcs(fn, r"^HGMMA")
    for w, h in enumerate(sorted(rep.race_sites, key=lambda h: h.second.warp)):
        reg = int(re.search(r"STG\S* \S+, R(\d+)", h.second.sass).group(1))
        assert (h.kind, h.first.pc, h.second.pc, h.second.op, h.second.line) == (WGMMA_IN_FLIGHT, gmma, read[0],
                                                                                 f"read R{reg}", line)
        assert h.resource == f"R{reg} (D of the wgmma)" and h.addr == reg
        assert (h.first.warp, h.second.cta, h.second.warp, h.second.lane) == (w, 0, w, 0)
    np.testing.assert_array_equal(early, _first_register(pack(D_F32, c)))
    np.testing.assert_array_equal(d, want)  # the later wait retires it


def test_leaving_without_the_wait_gets_a_wait_from_ptxas_and_is_a_hazard_without_it():
    mod, log = _build(HAZARDS, "WGMMA_BUG=3")
    assert "C7517" in log
    fn = mod.get_function("wgmma_hazards")
    a, b, c = _inputs(3)
    (exit_,) = [pc for pc in _pcs(fn, r"EXIT") if fn._prog().instructions[pc].guard is not None]
    waits = [pc for pc in _pcs(fn, r"^WARPGROUP\.DEPBAR") if pc < exit_]
    assert _marker("HAZARD:no_wait") == fn._prog().instructions[exit_].line[1]
    rep, _, _ = _run_hazards(fn, a, b, c, flag=0)
    assert rep.clean
    rep, _, _ = _run_hazards(_without(fn, waits[-1]), a, b, c, flag=0)
    assert rep.race_count == len(rep.race_sites) == 4  # each warp of the warpgroup leaves with it
    assert {h.second.warp for h in rep.race_sites} == {0, 1, 2, 3}
    for h in rep.race_sites:
        assert (h.kind, h.second.pc, h.second.op) == (WGMMA_IN_FLIGHT, exit_, "exit")
        assert h.resource.startswith(f"the exit of warp={h.second.warp} with D R")
    # flag 1: the later wait retires it, D is right, nothing left in flight
    rep, d, _ = _run_hazards(_without(fn, waits[-1]), a, b, c, flag=1)
    assert rep.clean
    np.testing.assert_array_equal(d, W.wgmma(a, b, c, n=8, atype="f16", ctype="f32"))


def test_two_groups_retire_at_their_waits(tmp_path):
    """wait_group 1 with two groups in flight retires the first only; the registers of a wgmma hold C until
    the WARPGROUP.DEPBAR that retires it, then D (registers traced after each instruction)."""
    mod, _ = _build(HAZARDS)
    fn = mod.get_function("wgmma_two_groups")
    prog = fn._prog()
    g1, g2 = _pcs(fn, r"^HGMMA")
    w1, w0 = _pcs(fn, r"^WARPGROUP\.DEPBAR")
    assert prog.instructions[w1].text.endswith("0x1") and prog.instructions[w0].text.endswith("0x0")
    assert prog.instructions[w1].line[1] == _marker("WAIT:one")
    r1, r2 = (int(re.match(r"HGMMA\S+ R(\d+),", prog.instructions[p].text).group(1)) for p in (g1, g2))
    a, b0, c0 = _inputs(4)
    _, b1, c1 = _inputs(5)
    want0, want1 = (W.wgmma(a, b, c, n=8, atype="f16", ctype="f32") for b, c in ((b0, c0), (b1, c1)))
    d0, d1 = fc.zeros((64, 8), np.uint32), fc.zeros((64, 8), np.uint32)
    regs = [f"R{r1}-R{r1 + 3}", f"R{r2}-R{r2 + 3}"]
    path = tmp_path / "groups.fstrace"
    with fc.checking(races=True, banks=False, trace=TraceSpec(path, at=[g1, g2, w1, w0], regs=regs, when="after",
                                                              smem=False)) as rep:
        fn((1,), (128,), (fc.asarray(a), fc.asarray(b0), fc.asarray(b1), fc.asarray(c0), fc.asarray(c1), d0, d1))
    with TraceReader(path) as r:
        meta, events = dict(r.meta), list(r.events())
    assert rep.clean
    np.testing.assert_array_equal(d0.get(), want0)
    np.testing.assert_array_equal(d1.get(), want1)
    frag = {name: pack(D_F32, x) for name, x in (("c0", c0), ("c1", c1), ("d0", want0), ("d1", want1))}
    expect = {g1: ("c0", "c1"), g2: ("c0", "c1"), w1: ("d0", "c1"), w0: ("d0", "d1")}
    seen = set()
    for e in events:
        pc = meta["tag_info"][e.tag]["pc"]
        first, second = expect[pc]
        rows = slice(32 * e.warp, 32 * e.warp + 32)
        np.testing.assert_array_equal(e.regs[:, 0:4], frag[first][rows], err_msg=f"pc={pc:#x} warp={e.warp}")
        np.testing.assert_array_equal(e.regs[:, 4:8], frag[second][rows], err_msg=f"pc={pc:#x} warp={e.warp}")
        seen.add((pc, e.warp))
    assert seen == {(pc, w) for pc in expect for w in range(4)}


def test_a_chain_along_k_reads_the_accumulator_still_in_flight():
    """Two wgmma on the same registers with no wait between (HGMMA, HGMMA gsb0, DEPBAR): the second one's C
    is the first one's D, as numerics.wgmma_chain computes the chain."""
    mod, _ = _build(HAZARDS)
    fn = mod.get_function("wgmma_chain")
    texts = [fn._prog().instructions[pc].text for pc in _pcs(fn, r"GMMA|WARPGROUP\.DEPBAR")]
    assert [t.endswith("gsb0") for t in texts[:2]] == [False, True] and texts[2].startswith("WARPGROUP.DEPBAR")
    a, b, c = _inputs(6, k=32)
    d = fc.zeros((64, 8), np.uint32)
    with fc.checking(races=True, banks=False) as rep:
        fn((1,), (128,), (fc.asarray(a), fc.asarray(b), fc.asarray(c), d))
    assert rep.clean
    np.testing.assert_array_equal(d.get(), W.wgmma_chain(a, b, c, n=8, atype="f16", ctype="f32"))


@pytest.mark.parametrize("steps", [1, 2, 4])
def test_a_pipelined_loop_accumulates_into_the_group_in_flight(steps):
    """A loop of one group per k-step with wgmma.wait_group 1 (HGMMA gsb0; DEPBAR.LE gsb0, 0x1): each wgmma's C
    is the D of the group still in flight; the retired older group never overwrites the newer D."""
    mod, _ = _build(HAZARDS)
    fn = mod.get_function("wgmma_pipeline")
    assert [fn._prog().instructions[pc].text for pc in _pcs(fn, r"^WARPGROUP\.DEPBAR")] == [
        "WARPGROUP.DEPBAR.LE gsb0, 0x1", "WARPGROUP.DEPBAR.LE gsb0, 0x0"]
    a, b, c = _inputs(8, k=64)
    d = fc.zeros((64, 8), np.uint32)
    with fc.checking(races=True, banks=False) as rep:
        fn((1,), (128,), (fc.asarray(a), fc.asarray(b), fc.asarray(c), d, np.int32(steps)))
    assert rep.clean
    k = 16 * steps
    np.testing.assert_array_equal(d.get(), W.wgmma_chain(np.ascontiguousarray(a[:, :k]), np.ascontiguousarray(b[:k]),
                                                         c, n=8, atype="f16", ctype="f32"))


@pytest.mark.parametrize(("scale_a", "scale_b"), [(-1, 1), (1, -1), (-1, -1)])
def test_imm_scale_minus_one_negates_the_inputs(scale_a, scale_b):
    mod, _ = _build(HAZARDS, f"WGH_SCALE_A={scale_a}", f"WGH_SCALE_B={scale_b}")
    fn = mod.get_function("wgmma_hazards")
    sfx = "".join(s for s, v in ((".negA", scale_a), (".negB", scale_b)) if v < 0)
    assert any(f"gdesc[UR4]{sfx}," in fn._prog().instructions[pc].text for pc in _pcs(fn, r"^HGMMA"))
    a, b, c = _inputs(7)
    _, d, _ = _run_hazards(fn, a, b, c)
    flip = lambda x, s: x ^ np.uint16(0x8000) if s < 0 else x  # noqa: E731
    np.testing.assert_array_equal(d, W.wgmma(flip(a, scale_a), flip(b, scale_b), c, n=8, atype="f16", ctype="f32"))


def test_a_partial_warpgroup_faults_naming_the_warp_and_pc():
    mod, _ = _build(HAZARDS)
    fn = mod.get_function("wgmma_hazards")
    a, b, c = _inputs()
    with pytest.raises(SimulatedFault, match=r"wgmma without a whole warpgroup.*warp=0 .*warp=0 executes HGMMA, "
                                             r"but its warpgroup 0 \(warps 0\.\.3\) is not complete.*pc=0x[0-9a-f]+ "
                                             r"`HGMMA"):
        fn((1,), (96,), (fc.asarray(a), fc.asarray(b), fc.asarray(c), fc.zeros((64, 8), np.uint32),
                         fc.zeros(128, np.uint32), np.int32(1)))


MN_MAJOR = r"""
extern "C" __global__ void __launch_bounds__(128) k(float* out, unsigned long long da, unsigned long long db) {
    float d[4];
    for (int i = 0; i < 4; ++i) d[i] = out[threadIdx.x * 4 + i];
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {%0, %1, %2, %3}, %4, %5, 1, 1, 1, 1, 0;\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "l"(da), "l"(db) : "memory");
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#endif
    for (int i = 0; i < 4; ++i) out[threadIdx.x * 4 + i] = d[i];
}
"""


def test_mn_major_operand_reads_are_bounds_checked():
    # .tnspA runs (tests/test_wgmma_mn.py has the H100's addresses); a descriptor starting at 0x3fff0 reads past
    # the CTA's shared memory
    cubin, _, _ = compile_cuda(MN_MAJOR, name="mn_major.cu", arch="sm_90a")
    fn = fc.RawModule(cubin=cubin).get_function("k")
    with pytest.raises(SimulatedFault, match=r"out-of-bounds shared address: .*the wgmma's B operand \(descriptor "
                                             r"0x0000000000003fff\) reads shared bytes 0x3fff0\.\.0x"):
        fn((1,), (128,), (fc.zeros(512, np.float32), np.uint64(0x3FFF), np.uint64(0x3FFF)))
    out = fc.zeros(512, np.float32)  # descriptors at 0: zeros in, zeros out
    fn((1,), (128,), (out, np.uint64(0), np.uint64(0)))
    assert not out.get().any()


def test_arrangements_are_the_probe_s():
    # the probe's arrangement codes (arr_a / arr_b in the record) are matrix_desc.ARRANGEMENTS' indices
    assert tuple(str(x) for x in load(SAMPLES)[0]["arrangements"]) == ARRANGEMENTS


def test_the_gpu_check_runs_end_to_end_as_a_dry_run(tmp_path, capsys):
    """gpu/validate_sass_wgmma.py with the GPU side in the interpreter: the report's shape, a modelled form
    compared, the fp8 -> f32 form included."""
    from flashsim.gpu import validate_sass_wgmma as S

    rc = S.main(["--out", str(tmp_path), "--cases", "1", "--ns", "8", "--forms", "ss.f32.f16.f16,rs.f32.e4m3.e4m3",
                 "--dry-run"])
    assert rc == 0
    rep = json.loads((tmp_path / "sass_wgmma_report.json").read_text())
    assert rep["failures"] == [] and rep["summary"]["modelled_runs"] == 2 * len(S.CONFIGS)  # both forms
    assert all(r["interp_vs_gpu"]["mismatches"] == 0 for r in rep["probe"] if r["form"] == "rs.f32.e4m3.e4m3")
    assert {r["run"] for r in rep["hazards"]} >= {"wgmma_two_groups", "wgmma_chain", "wgmma_pipeline"}
    assert "SUMMARY" in capsys.readouterr().out
