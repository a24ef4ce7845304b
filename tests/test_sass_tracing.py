"""flashsim.sass.tracing: traces of interpreted kernels at chosen instructions (PCs or source lines),
before/after, CTA/warp/lane filters, shared-memory records with their wavefronts, bad specs, publication only
on success, ``flashsim trace diff`` across interpreted runs (same code: PC for PC; changed code: by source
line), and the FS_TRACE build in the interpreter against a GPU recording."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import flashsim.cuda as fc
from flashsim.cli import main
from flashsim.errors import ArgumentError, SimulatedFault
from flashsim.sass import tracing
from flashsim.sass.tracediff import diff_traces
from flashsim.sass.tracing import TraceSpec, lane_wavefronts
from flashsim.smem import wavefronts
from flashsim.trace.container import SMEM_DTYPE, TraceReader

ROOT = Path(__file__).resolve().parents[1]

SRC = r'''
extern "C" __global__ void k(unsigned* out, unsigned add) {
  __shared__ unsigned s[256];
  __shared__ unsigned s2[1024];
  unsigned t = threadIdx.x;
  unsigned x = t * 3u + blockIdx.x * 1000u + add;             // LINE:x
  s[t] = x;                                                   // LINE:store
  s2[(t * 4u) % 1024u] = t;                                   // LINE:strided
  __syncthreads();
  unsigned y = s[t ^ 1u] * 2u;                                // LINE:y
  if (t & 1u) y += s2[t];                                     // LINE:odd
  unsigned n = t & 3u;
  while (n) { y = y * 31u + s[n + y % 7u]; --n; }             // LINE:loop
  out[blockIdx.x * blockDim.x + t] = y;
}
extern "C" __global__ void oob(unsigned* out) {
  __shared__ unsigned s[64];
  s[threadIdx.x * 1000u] = 1u;                                // LINE:oob
  out[threadIdx.x] = s[threadIdx.x];
}
'''
LINES = {tag: i + 1 for i, line in enumerate(SRC.splitlines()) for tag in [line.rsplit("LINE:", 1)[-1].strip()]
         if "LINE:" in line}
GRID, BLOCK = 2, 64


@pytest.fixture(scope="module")
def mod():
    return fc.RawModule(code=SRC)


@pytest.fixture(scope="module")
def planted():
    """The same kernel with one line changed: y = s[t ^ 1] * 2 + 1."""
    return fc.RawModule(code=SRC.replace("* 2u;", "* 2u + 1u;"))


def _prog(mod, name="k"):
    return mod.get_function(name)._prog()


def _run(mod, spec, add=0, name="k", grid=GRID):
    out = fc.zeros(grid * BLOCK, np.uint32)
    with fc.checking(trace=spec) as rep:
        mod.get_function(name)((grid,), (BLOCK,), (out, np.uint32(add)))
    return rep, out.get()


def _events(path):
    with TraceReader(path) as r:
        r.verify()
        return dict(r.meta), list(r.events())


def _cols(meta, e):
    return meta["tag_info"][e.tag]["registers"]


def _pcs_of_line(mod, line):
    return sorted(pc for pc, i in _prog(mod).instructions.items() if i.line and i.line[1] == line)


def _tid(cta, warp):
    return 32 * warp + np.arange(32)


# ------------------------------------------------------------------------------------------------ tracing


def test_trace_at_a_line_holds_what_the_line_computes(mod, tmp_path):
    path = tmp_path / "x.fstrace"
    _run(mod, TraceSpec(path, at=[f"kernel.cu:{LINES['x']}"], smem=False), add=7)
    meta, events = _events(path)
    pcs = _pcs_of_line(mod, LINES["x"])
    assert pcs and {meta["tag_info"][e.tag]["pc"] for e in events} == set(pcs)
    assert meta["kind"] == tracing.KIND and meta["kernels"] == ["k"]
    assert meta["launches"] == [{"kernel": "k", "program": 0, "grid": [GRID, 1, 1], "block": [BLOCK, 1, 1],
                                 "shared_mem": 0, "cubin_sha256": mod.sha256}]
    regcount = mod.get_function("k").num_regs
    for tag, t in meta["tag_info"].items():
        ins = _prog(mod).instructions[t["pc"]]
        assert tag == f"pc={t['pc']:#06x} kernel.cu:{LINES['x']} {ins.text}"
        assert (t["sass"], t["line"], t["registers"]) == (ins.text, LINES["x"],
                                                          [f"R{i}" for i in range(regcount)] + ["lanes"])
    # per warp: one event per instruction of the line, seq in execution order; after the line's last
    # instruction some register holds x = t * 3 + cta * 1000 + add in every lane
    for cta in range(GRID):
        for warp in range(BLOCK // 32):
            evs = [e for e in events if (e.cta, e.warp) == (cta, warp)]
            assert [e.seq for e in evs] == list(range(len(pcs)))
            assert [meta["tag_info"][e.tag]["pc"] for e in evs] == pcs
            x = (_tid(cta, warp) * 3 + cta * 1000 + 7).astype(np.uint32)
            last = evs[-1]
            assert any(np.array_equal(last.regs[:, c], x) for c in range(regcount)), (cta, warp)
            assert (last.regs[:, -1] == 3).all()  # every lane at the instruction, guard true
            assert last.smem is None


def test_before_and_after_an_instruction_at_a_pc(mod, tmp_path):
    ins = next(i for i in _prog(mod).instructions.values() if i.text.startswith("S2R") and "SR_TID.X" in i.text)
    dst = ins.text.split()[1].rstrip(",")
    for when in ("before", "after"):
        path = tmp_path / f"{when}.fstrace"
        _run(mod, TraceSpec(path, at=[ins.pc], regs=[dst], when=when, smem=False))
        meta, events = _events(path)
        assert len(events) == GRID * BLOCK // 32 and meta["spec"]["when"] == when
        for e in events:
            assert _cols(meta, e) == [dst, "lanes"] and e.seq == 0
            want = _tid(e.cta, e.warp) if when == "after" else np.zeros(32)
            np.testing.assert_array_equal(e.regs[:, 0], want)


def test_filters_keep_the_chosen_ctas_warps_and_lanes(mod, tmp_path):
    ins = next(i for i in _prog(mod).instructions.values() if i.text.startswith("S2R") and "SR_TID.X" in i.text)
    dst = ins.text.split()[1].rstrip(",")
    path = tmp_path / "f.fstrace"
    other = "R1" if dst != "R1" else "R2"
    _run(mod, TraceSpec(path, at=[ins.pc], regs=[dst, other], ctas=[1], warps=range(1, 2), lanes=range(4, 8),
                        smem=False))
    meta, events = _events(path)
    assert [(e.cta, e.warp) for e in events] == [(1, 1)]
    e = events[0]
    assert _cols(meta, e) == [dst, other, "lanes"]
    keep = (np.arange(32) >= 4) & (np.arange(32) < 8)
    np.testing.assert_array_equal(e.regs[:, 0], np.where(keep, 32 + np.arange(32), 0))
    np.testing.assert_array_equal(e.regs[:, -1], np.where(keep, 3, 0))
    assert meta["spec"]["ctas"] == [1] and meta["spec"]["lanes"] == [4, 5, 6, 7]


def test_lane_masks_follow_guards_and_divergence(mod, tmp_path):
    path = tmp_path / "g.fstrace"
    _run(mod, TraceSpec(path, at=[f"kernel.cu:{LINES['odd']}", f"kernel.cu:{LINES['loop']}"], regs=["R0"],
                        smem=False))
    meta, events = _events(path)
    lane = np.arange(32)
    odd = [e for e in events if meta["tag_info"][e.tag]["line"] == LINES["odd"]]
    guarded = [e for e in odd if meta["tag_info"][e.tag]["sass"].startswith("@")]
    assert guarded, "the odd-lane line compiles to predicated instructions"
    for e in guarded:  # every lane at the instruction, only odd lanes execute it
        np.testing.assert_array_equal(e.regs[:, -1], np.where(lane & 1, 3, 1))
    loop = [e for e in events if meta["tag_info"][e.tag]["line"] == LINES["loop"]
            and "LDS" in meta["tag_info"][e.tag]["sass"]]  # the loads of the loop's body
    at = np.zeros(32, bool)
    partial = False
    for e in loop:
        here = (e.regs[:, -1] & 1).astype(bool)
        at |= here
        partial |= here.any() and not here.all()
        assert not (e.regs[~here] != 0).any()  # lanes elsewhere are zero
    np.testing.assert_array_equal(at, (lane & 3) != 0)  # lanes with no iteration never reach the body
    assert partial, "the loop's lanes diverge"


def test_shared_memory_records_addresses_and_wavefronts(mod, tmp_path):
    path = tmp_path / "s.fstrace"
    ins = next(i for i in _prog(mod).instructions.values() if i.text.startswith("S2R") and "SR_TID.X" in i.text)
    rep, _ = _run(mod, TraceSpec(path, at=[ins.pc], regs=["R0"], warps=[1]))
    meta, events = _events(path)
    info = meta["tag_info"]
    by_line = {}
    for e in events:
        by_line.setdefault(info[e.tag]["line"], []).append(e)
    assert all(e.warp == 1 for e in events)
    # s[t] = x: one 4-byte store per lane, consecutive words, one wavefront
    store = by_line[LINES["store"]]
    assert len(store) == GRID and all(info[e.tag]["sass"].startswith("STS") for e in store)
    for e in store:
        assert e.smem.dtype == SMEM_DTYPE and len(e.smem) == 32 and _cols(meta, e) == ["lanes"]
        t = _tid(e.cta, e.warp)
        np.testing.assert_array_equal(e.smem["lane"], np.arange(32))
        assert (e.smem["nbytes"] == 4).all() and (e.smem["store"] == 1).all() and (e.smem["wavefront"] == 0).all()
        base_s = int(e.smem["addr"][0]) - 4 * int(t[0])
        np.testing.assert_array_equal(e.smem["addr"], base_s + 4 * t)
        assert base_s >= 0x400  # after the reserved KiB
    # s2[(t * 4) % 1024] = t: lanes l, l+8, l+16, l+24 hit one bank in four words: wavefront l // 8
    strided = by_line[LINES["strided"]]
    for e in strided:
        t = _tid(e.cta, e.warp)
        off = 4 * ((t * 4) % 1024)
        np.testing.assert_array_equal(e.smem["addr"] - e.smem["addr"][0], off - off[0])
        np.testing.assert_array_equal(e.smem["wavefront"], np.arange(32) // 8)
    site = next(s for s in rep.bank_sites() if s.pc == info[strided[0].tag]["pc"])
    assert site.wavefronts // site.executions == int(strided[0].smem["wavefront"].max()) + 1 == 4
    # y = s[t ^ 1] * 2: loads of the neighbour's word
    load = [e for e in by_line[LINES["y"]] if info[e.tag]["sass"].startswith("LDS")]
    assert load
    for e in load:
        t = _tid(e.cta, e.warp)
        assert (e.smem["store"] == 0).all()
        np.testing.assert_array_equal(e.smem["addr"], base_s + 4 * (t ^ 1))
    # the traced S2R (not a shared-memory instruction) has registers and no records
    s2r = [e for e in events if info[e.tag]["pc"] == ins.pc]
    assert len(s2r) == GRID and all(e.smem is None and _cols(meta, e) == ["R0", "lanes"] for e in s2r)
    # odd lanes only read s2[t] (a guarded LDS): records for those lanes alone
    odd = [e for e in by_line[LINES["odd"]] if "LDS" in info[e.tag]["sass"]]
    assert odd and all(set(e.smem["lane"].tolist()) == set(range(1, 32, 2)) for e in odd)


@pytest.mark.parametrize("op,width,num", [("ld", 4, 4), ("st", 4, 4), ("ld", 8, 4), ("ld", 16, 4), ("st", 16, 4),
                                          ("ldsm", 16, 4), ("ldsm", 16, 2), ("stsm", 16, 1), ("ldgsts", 4, 4),
                                          ("ldgsts", 16, 4), ("ld", 1, 4), ("st", 2, 4)])
def test_lane_wavefronts_add_up_to_the_bank_model(op, width, num):
    rng = np.random.default_rng(width * 7 + num)
    align = 16 if op in ("ldsm", "stsm") else width
    for trial in range(60):
        span = int(rng.choice([64, 512, 4096]))
        addr = rng.integers(0, span // align, 32) * align
        if trial % 3 == 0:  # lane pairs at one address (the packed form of 64/128-bit loads)
            addr = np.repeat(addr[::2], 2)
        active = rng.random(32) < (0.8 if trial % 2 else 1.0)
        got = lane_wavefronts(addr, active, op=op, width=width, num=num)
        wf, _ = wavefronts(addr, width=width, op=op, active=active, num=num)
        lanes = active & ((np.arange(32) < 8 * num) if op in ("ldsm", "stsm") else True)
        assert int(got.max()) + 1 == int(wf), (trial, addr, active)
        assert ((got >= 0) == lanes).all()


# ------------------------------------------------------------------------------------------------ bad specs


def test_a_line_without_code_is_an_error_listing_the_nearest_lines(mod, tmp_path):
    path = tmp_path / "bad.fstrace"
    _run(mod, TraceSpec(path, at=[f"kernel.cu:{LINES['store']}"]))  # a line with code: fine
    have = sorted({i.line[1] for i in _prog(mod).instructions.values()})
    empty = LINES["x"] - 2  # a __shared__ declaration: no code
    assert empty not in have
    near = [x for x in have if x < empty][-3:] + [x for x in have if x > empty][:3]
    with pytest.raises(ArgumentError, match=rf"at='kernel.cu:{empty}': no instruction comes from line {empty}; the "
                                            rf"nearest lines of kernel.cu with code are {', '.join(map(str, near))}$"):
        _run(mod, TraceSpec(tmp_path / "b1.fstrace", at=[f"kernel.cu:{empty}"]))
    with pytest.raises(ArgumentError, match=r"no instruction comes from that file.*kernel.cu"):
        _run(mod, TraceSpec(tmp_path / "b2.fstrace", at=["other.cu:5"]))
    with pytest.raises(ArgumentError, match=r"at='0x4000': no instruction at this PC"):
        _run(mod, TraceSpec(tmp_path / "b3.fstrace", at=[0x4000]))
    with pytest.raises(ArgumentError, match=r"regs='R200'.*uses \d+ registers"):
        _run(mod, TraceSpec(tmp_path / "b4.fstrace", at=[0], regs=["R200"]))
    with pytest.raises(ArgumentError, match=r"ctas=\[5\].*2 CTAs"):
        _run(mod, TraceSpec(tmp_path / "b5.fstrace", at=[0], ctas=[5]))
    with pytest.raises(ArgumentError, match=r"warps=\[2\].*2 warps per CTA"):
        _run(mod, TraceSpec(tmp_path / "b6.fstrace", at=[0], warps=[2]))
    assert sorted(os.listdir(tmp_path)) == ["bad.fstrace"]  # nothing left by the failed blocks


@pytest.mark.parametrize("kw,match", [
    (dict(at=[]), r"^at=\[\]: expected a non-empty list"),
    (dict(at=[0x18]), r"at=24: a PC is a non-negative multiple of 16"),
    (dict(at=["kernel.cu"]), r"at='kernel.cu': expected a source location"),
    (dict(at=[1.5]), r"at=1.5"),
    (dict(at=[0], regs=["X1"]), r"regs='X1': not a register name"),
    (dict(at=[0], regs=["R4-R"]), r"regs='R4-R': not a register name"),
    (dict(at=[0], regs=["R7-R4"]), r"regs='R7-R4'.*empty range"),
    (dict(at=[0], regs=["R255"]), r"regs='R255': R registers are R0..R254"),
    (dict(at=[0], regs=[]), r"regs=\[\]"),
    (dict(at=[0], lanes=[32]), r"lanes=\[32\]: \[32\] out of range"),
    (dict(at=[0], warps=[-1]), r"warps=\[-1\]"),
    (dict(at=[0], ctas="0"), r"ctas='0'"),
    (dict(at=[0], when="during"), r"when='during': expected 'before' or 'after'"),
    (dict(at=[0], smem=1), r"smem=1: expected a bool"),
    (dict(at=[0], kernels=[""]), r"kernels=\[''\]"),
])
def test_bad_specs_name_the_argument(tmp_path, kw, match):
    with pytest.raises(ArgumentError, match=match):
        TraceSpec(tmp_path / "x.fstrace", **kw)


def test_checking_refuses_a_bad_trace_argument_and_an_existing_file(tmp_path):
    with pytest.raises(ArgumentError, match=r"^trace='x.fstrace': expected None or a flashsim.sass.tracing.TraceSpec"):
        with fc.checking(trace="x.fstrace"):
            pass
    p = tmp_path / "there.fstrace"
    p.write_bytes(b"keep me")
    with pytest.raises(ArgumentError, match=r"already exists; pass force=True"):
        with fc.checking(trace=TraceSpec(p, at=[0])):
            pass
    with pytest.raises(ArgumentError, match=r"directory .* does not exist"):
        with fc.checking(trace=TraceSpec(tmp_path / "no" / "x.fstrace", at=[0])):
            pass
    assert p.read_bytes() == b"keep me"


# ------------------------------------------------------------------------------------------------ publication


def test_the_file_is_published_only_when_the_block_succeeds(mod, tmp_path):
    path = tmp_path / "t.fstrace"
    spec = TraceSpec(path, at=[f"kernel.cu:{LINES['x']}"])
    with pytest.raises(RuntimeError, match="after the launch"):
        with fc.checking(trace=spec):
            out = fc.zeros(GRID * BLOCK, np.uint32)
            mod.get_function("k")((GRID,), (BLOCK,), (out, np.uint32(0)))
            raise RuntimeError("after the launch")
    assert os.listdir(tmp_path) == []
    with pytest.raises(SimulatedFault, match="out-of-bounds shared address"):
        with fc.checking(trace=TraceSpec(path, at=[f"kernel.cu:{LINES['oob']}"])):
            mod.get_function("oob")((1,), (32,), (fc.zeros(32, np.uint32),))
    assert os.listdir(tmp_path) == []
    _run(mod, spec)
    assert os.listdir(tmp_path) == ["t.fstrace"]
    with pytest.raises(ArgumentError, match="already exists"):
        _run(mod, spec)
    _run(mod, TraceSpec(path, at=[0], regs=["R1"], force=True))  # overwritten
    meta, events = _events(path)
    assert meta["spec"]["at"] == ["0x0000"]
    assert sum(1 for e in events if meta["tag_info"][e.tag]["pc"] == 0) == GRID * BLOCK // 32


def test_launches_of_one_block_share_one_trace(mod, tmp_path):
    path = tmp_path / "two.fstrace"
    out = fc.zeros(GRID * BLOCK, np.uint32)
    spec = TraceSpec(path, at=[0], regs=["R1"], smem=False, kernels="k")
    with fc.checking(trace=spec):
        mod.get_function("k")((GRID,), (BLOCK,), (out, np.uint32(0)))
        mod.get_function("oob")((1,), (1,), (out,))  # not traced (kernels=), and harmless with one thread
        mod.get_function("k")((GRID,), (BLOCK,), (out, np.uint32(0)))
    meta, events = _events(path)
    assert [x["kernel"] for x in meta["launches"]] == ["k", "k"] and len(meta["programs"]) == 1
    assert sorted({e.seq for e in events}) == [0, 1]  # each warp: one event per launch, in launch order


# ------------------------------------------------------------------------------------------------ diff


def test_diff_finds_a_planted_difference_at_its_line(mod, planted, tmp_path, capsys):
    a, b = tmp_path / "a.fstrace", tmp_path / "b.fstrace"
    spec = dict(at=[f"kernel.cu:{LINES['y']}"])
    _run(mod, TraceSpec(a, **spec))
    _run(planted, TraceSpec(b, **spec))
    d = diff_traces(a, b)
    assert not d.clean and any("different code" in n for n in d.notes)
    f = d.first
    assert (f.cta, f.warp, f.kind, f.matched, f.occurrence) == (0, 0, "registers", "line", 0)
    assert f.site == f"kernel.cu:{LINES['y']}"
    assert f.cells and all(bv == av + 1 for _, _, av, bv in f.cells)  # x * 2 vs x * 2 + 1
    assert {lane for lane, *_ in f.cells} == set(range(32))
    assert main(["trace", "diff", str(a), str(b)]) == 1
    text = capsys.readouterr().out
    assert f"first divergence: cta=0 warp=0 at kernel.cu:{LINES['y']} #0" in text
    assert "matched by source line and occurrence" in text and "lane= 0" in text and "f32 " in text
    assert main(["trace", "diff", str(a), str(a)]) == 0
    assert "no divergence" in capsys.readouterr().out


def test_diff_of_one_build_with_other_inputs_is_pc_for_pc(mod, tmp_path):
    a, b = tmp_path / "a.fstrace", tmp_path / "b.fstrace"
    spec = dict(at=[f"kernel.cu:{LINES['x']}", f"kernel.cu:{LINES['store']}"], smem=True)
    _run(mod, TraceSpec(a, **spec), add=0)
    _run(mod, TraceSpec(b, **spec), add=5)
    d = diff_traces(a, b)
    assert not d.notes  # same code: no caveat
    f = d.first
    assert (f.matched, f.kind, f.cta, f.warp) == ("pc", "registers", 0, 0)
    assert f.site.endswith(f"kernel.cu:{LINES['x']}") and f.a.seq == f.b.seq
    assert any(bv - av == 5 for _, _, av, bv in f.cells)
    # the store of x: same addresses, other values (registers differ; shared-memory records agree)
    sts = [x for x in d.divergences
           if "STS" in d.a_info[x.a.tag]["sass"] and d.a_info[x.a.tag]["line"] == LINES["store"]]
    assert sts and all(x.smem is None for x in sts)


def test_diff_of_kinds_that_do_not_mix_is_an_error(mod, tmp_path, capsys):
    a = tmp_path / "a.fstrace"
    _run(mod, TraceSpec(a, at=[0]))
    golden = ROOT / "traces" / "warp" / "fa2_hdim64_f16_empty_rows.fstrace"
    assert main(["trace", "diff", str(a), str(golden)]) == 2
    assert "only traces of one kind" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------ FS_TRACE


def test_fs_trace_build_in_the_interpreter_equals_the_gpu_recording(tmp_path, capsys):
    golden = ROOT / "traces" / "warp" / "fa2_hdim64_f16_empty_rows.fstrace"
    out = tmp_path / "interp.fstrace"
    assert main(["trace", "record", "--like", str(golden), "--backend", "interp", "-o", str(out)]) == 0
    with TraceReader(out) as r:
        r.verify()
        assert r.meta["backend"] == "interp" and len(r.meta["cubin_sha256"]) == 64
        assert r.meta["ctas"] == [0, 1] and r.count() == 40
    assert main(["trace", "diff", str(golden), str(out)]) == 0
    text = capsys.readouterr().out
    assert "no divergence" in text and "outputs: bit-identical" in text
    assert main(["trace", "diff", str(out), str(out)]) == 0
    capsys.readouterr()
    assert main(["trace", "record", "--like", str(golden), "--backend", "interp", "-o", str(out)]) == 2  # exists
    assert "already exists" in capsys.readouterr().err


def test_fa2_shared_memory_records_add_up_to_the_bank_report(tmp_path):
    """Every shared-memory instruction of a project kernel (LDGSTS, LDSM, LDSM.MT88, LDS.128, STS): per PC,
    the events' highest wavefront + 1 summed equal the wavefronts checking counts, and so do the executions."""
    from flashsim.kernels import problems
    from flashsim import session
    from flashsim.gpu import fa_kernels

    case = problems.make_case(session.make_params("fa2", seed=1, seqlen_q=128, seqlen_k=100, headdim=64))
    prep = fa_kernels.prepare("fa2", case.q, case.k, case.v, backend="interp", **case.kwargs)
    path = tmp_path / "fa2.fstrace"
    with fc.checking(banks=True, trace=TraceSpec(path, at=[0], regs=["R1"])) as rep:
        prep.result()
    meta, events = _events(path)
    wf, ex = {}, {}
    for e in events:
        t = meta["tag_info"][e.tag]
        if e.smem is not None:
            assert len(e.smem) and (e.smem["wavefront"] != 0xFFFF).all()
            wf[t["pc"]] = wf.get(t["pc"], 0) + int(e.smem["wavefront"].max()) + 1
            ex[t["pc"]] = ex.get(t["pc"], 0) + 1
    sites = rep.bank_sites(order="pc")
    assert len(sites) > 50 and {s.pc for s in sites} == set(wf)
    for s in sites:
        assert (wf[s.pc], ex[s.pc]) == (s.wavefronts, s.executions), s.sass
    assert {s.sass.split()[0] if not s.sass.startswith("@") else s.sass.split()[1] for s in sites} >= {
        "LDGSTS.E.BYPASS.128", "LDSM.16.M88.4", "LDSM.16.MT88.4", "LDS.128", "STS"}


def _synthetic(path, sha, code, values):
    """A trace of one warp of a kernel whose code is ``code`` [(pc, sass, dst)] at line k.cu:5, the events
    ``values`` [(pc, value of its destination in every lane)] in order (what a Tracer writes, by hand)."""
    from flashsim.trace.container import TraceWriter

    info, tags = {}, {}
    for pc, sass, dst in code:
        tag = tags[pc] = f"pc={pc:#06x} k.cu:5 {sass}"
        info[tag] = {"program": 0, "kernel": "k", "pc": pc, "sass": sass, "file": "/x/k.cu", "line": 5,
                     "registers": ["R1", "R2", "lanes"], "dst": [dst], "src": [], "traced": True, "smem": False}
    meta = {"kind": tracing.KIND, "version": 1, "kernels": ["k"], "launches": [], "tag_info": info,
            "spec": {"when": "after"},
            "programs": [{"kernel": "k", "cubin_sha256": sha * 64, "code_sha256": sha * 64, "regcount": 3,
                          "columns": ["R1", "R2", "lanes"], "code": [[pc, s, "/x/k.cu", 5] for pc, s, _ in code]}]}
    with TraceWriter(path, meta, list(info)) as w:
        for seq, (pc, v) in enumerate(values):
            regs = np.zeros((32, 3), np.uint32)
            regs[:, int(info[tags[pc]]["dst"][0][1:]) - 1] = v
            regs[:, 2] = 3
            w.add_event(0, 0, seq, tags[pc], regs)
    return path


def test_diff_of_other_code_that_computes_a_line_in_another_order_is_a_reordering(tmp_path):
    """Two builds issue a line's two adds in opposite order (same values): by occurrence they pair other
    values, but per warp and lane the line wrote the same values, so no divergence; a changed value is one."""
    a = _synthetic(tmp_path / "a.fstrace", "a", [(0, "FADD R1, R1, R3", "R1"), (16, "FADD R2, R2, R3", "R2")],
                   [(0, 10), (16, 20)])
    b = _synthetic(tmp_path / "b.fstrace", "b", [(0, "FADD R2, R2, R3", "R2"), (16, "FADD R1, R1, R3", "R1")],
                   [(0, 20), (16, 10)])
    d = diff_traces(a, b)
    assert d.clean and any("differ only in order" in n and "k.cu:5" in n for n in d.notes), d.format()
    # instructions that differ in more than register numbers are told apart: no reordering to explain
    e = _synthetic(tmp_path / "e.fstrace", "e", [(0, "FADD R2, R2, 2", "R2"), (16, "FADD R1, R1, 1", "R1")],
                   [(0, 20), (16, 10)])
    f = _synthetic(tmp_path / "f.fstrace", "f", [(0, "FADD R1, R1, 1", "R1"), (16, "FADD R2, R2, 2", "R2")],
                   [(0, 10), (16, 20)])
    d = diff_traces(f, e)
    assert d.clean and not any("differ only in order" in n for n in d.notes), d.format()
    c = _synthetic(tmp_path / "c.fstrace", "c", [(0, "FADD R2, R2, R3", "R2"), (16, "FADD R1, R1, R3", "R1")],
                   [(0, 21), (16, 10)])
    d = diff_traces(a, c)
    assert not d.clean and d.first.site == "pc=0x0000 k.cu:5" and d.first.matched == "pc"
    assert d.first.cells[0] == (0, "R1/R2", 10, 21)


# ------------------------------------------------------------------------------------------------ trace show


def test_trace_show_prints_what_an_interpreted_trace_holds(mod, tmp_path, capsys):
    """`flashsim trace show` of a trace of interpreted instructions: the summary names every traced instruction;
    --tag selects by PC, source location or SASS text; the lane x register table holds the recorded bits
    (the stored value of the line, lane by lane), '-' for lanes not there; a selector naming nothing is a
    bad --tag listing the file's tags."""
    from flashsim.cli.traceshow import matching_tags

    path = tmp_path / "s.fstrace"
    _run(mod, TraceSpec(path, at=[f"kernel.cu:{LINES['x']}"], smem=False), add=7)
    meta, events = _events(path)
    info = meta["tag_info"]
    assert main(["trace", "show", str(path)]) == 0
    summary = capsys.readouterr().out
    assert all(t in summary for t in info) and f"{len(events)} events" in summary

    last = max(pc for pc in _pcs_of_line(mod, LINES["x"]))
    ins = _prog(mod).instructions[last]
    assert matching_tags(info, hex(last)) == matching_tags(info, f"pc={last:#06x}") == [
        t for t in info if info[t]["pc"] == last]
    assert set(matching_tags(info, f"kernel.cu:{LINES['x']}")) == set(info)
    assert matching_tags(info, ins.text) == [t for t in info if t.endswith(ins.text)]
    with pytest.raises(ArgumentError, match=r"--tag='0x7777'.*names no traced instruction.*its tags: pc="):
        matching_tags(info, "0x7777")

    assert main(["trace", "show", str(path), "--tag", hex(last), "--cta", "1", "--warp", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"cta=1 warp=1 ") and f"pc={last:#06x}" in out[0]
    (e,) = [e for e in events if e.cta == 1 and e.warp == 1 and info[e.tag]["pc"] == last]
    cols = _cols(meta, e)
    header = out[1].split()
    assert header[:2] == ["lane", "lanes"] and header[2:] == [c for c in cols if c != "lanes"]
    for lane in range(32):
        cells = out[2 + lane].split()
        assert int(cells[0]) == lane and cells[1] == "on"
        assert [int(c, 16) for c in cells[2:]] == [int(e.regs[lane, cols.index(c)]) for c in header[2:]]
    assert main(["trace", "show", str(path), "--tag", hex(last), "--cta", "5"]) == 1
    assert "no events match" in capsys.readouterr().out


def test_trace_show_of_an_fs_trace_checks_its_tag(capsys):
    assert main(["trace", "show", str(ROOT / "traces" / "warp" / "v5_d32.fstrace"), "--tag", "nonsense"]) == 2
    assert "--tag='nonsense'" in capsys.readouterr().err


def test_an_unwritable_trace_folder_names_the_trace_not_the_spool(mod, tmp_path, monkeypatch):
    import builtins

    real = builtins.open

    def read_only(file, mode="r", *a, **kw):
        if str(file).endswith(".spool"):
            raise OSError(30, "Read-only file system", str(file))
        return real(file, mode, *a, **kw)

    monkeypatch.setattr(builtins, "open", read_only)
    path = tmp_path / "x.fstrace"
    with pytest.raises(ArgumentError) as info:
        _run(mod, TraceSpec(path, at=[f"kernel.cu:{LINES['x']}"], smem=False))
    msg = str(info.value)
    assert str(path) in msg and "cannot write in" in msg and "Read-only file system" in msg and ".spool" not in msg
