"""flashsim.locate: the first register write where two runs of a kernel part, found by comparing the
logs of an instrumented build. Without a GPU both runners are interpreters, one with a planted FFMA bug;
gpu/locate_check.py runs the same checks with the H100 as the first runner."""

import json
import re
from pathlib import Path

import numpy as np
import pytest

import flashsim.cuda as fc
import flashsim.locate as loc
from flashsim import testing
from flashsim.gpu import locate_check as lc
from flashsim.sass import ptxlog
from flashsim.warp.fragments import fragment

REPO = Path(__file__).resolve().parents[1]

SRC = r'''
extern "C" __global__ void poly(float* y, const float* x, const float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = x[i];
  float acc = c[0];
  for (int k = 1; k < 4; ++k) acc = acc * v + c[k];      // LINE:horner
  float w = acc * acc;
  y[i] = w - v;                                          // LINE:store
}
'''
HORNER = next(i + 1 for i, s in enumerate(SRC.splitlines()) if "LINE:horner" in s)


@pytest.fixture(scope="module")
def mod():
    return fc.RawModule(code=SRC, name="poly.cu")


def _args(n=100):
    rng = np.random.default_rng(0)
    return [np.zeros(n, np.float32), rng.standard_normal(n).astype(np.float32),
            np.array([0.5, -1.25, 0.75, 2.0], np.float32), np.int32(n)]


def _pair(kernel="poly", grid=2, block=64, plant=True):
    a = loc.interpreter_runner(kernel, grid, block)
    b = loc.interpreter_runner(kernel, grid, block)
    return (a, lc.PlantedRunner(b) if plant else b)


def test_a_planted_ffma_bug_is_located_at_its_line_with_both_values(mod):
    d = loc.locate(mod, "poly", 2, 64, _args(), runners=_pair(), names=("reference", "planted"))
    assert d is not None and d.site is not None
    assert d.site.text.startswith("fma.rn.ftz.f32") and d.site.line == HORNER and d.site.file.endswith("poly.cu")
    assert d.occurrence == 1 and d.other_site is None
    va, vb = d.values
    assert va ^ vb == 1  # the planted bug flips the low bit of FFMA's result in lane 7
    x, c = _args()[1], _args()[2]
    want = np.float32(np.float64(c[0]) * np.float64(x[lc.PLANT_LANE]) + np.float64(c[1]))  # one rounding
    assert va == int(want.view(np.uint32))
    assert (d.thread.ctaid, d.thread.tid, d.thread.lane, d.thread.warp) == ((0, 0, 0), (7, 0, 0), 7, 0)
    assert d.outputs_differ and d.plain_outputs_differ
    assert d.sass and all("FFMA" in s for s in d.sass)
    text = d.summary()
    assert len(text) <= 5
    assert f"poly.cu:{HORNER}" in text[0] and "cta=0 warp=0 lane=7" in text[0] and "occurrence 1" in text[0]
    assert f"reference {va:#010x} (f32 " in text[1] and f"planted {vb:#010x} (f32 " in text[1]
    full = d.text()
    assert ">> " in full and "FFMA" in full
    js = json.loads(json.dumps(d.to_dict()))
    assert js["site"]["line"] == HORNER and js["values"] == [va, vb] and js["thread"]["lane"] == 7


LOOP = r'''
extern "C" __global__ void loop(float* y, const float* x, int n) {
  float acc = x[threadIdx.x];
  #pragma unroll 1
  for (int k = 0; k < n; ++k) acc = acc * 1.5f + 0.25f;   // LINE:loop
  y[threadIdx.x] = acc;
}
'''


def test_a_later_occurrence_of_a_site_is_counted():
    """The planted bug strikes the third trip through a loop that is not unrolled: one PTX site, its third
    execution in the thread."""
    m = fc.RawModule(code=LOOP, name="loop.cu")
    x = np.linspace(-1, 1, 32, dtype=np.float32)
    args = [np.zeros(32, np.float32), x, np.int32(5)]
    runners = (loc.interpreter_runner("loop", 1, 32),
               lc.PlantedRunner(loc.interpreter_runner("loop", 1, 32), lane=4, xor=2, nth=3))
    d = loc.locate(m, "loop", 1, 32, args, runners=runners)
    line = next(i + 1 for i, s in enumerate(LOOP.splitlines()) if "LINE:loop" in s)
    assert d.thread.lane == 4 and d.site.line == line and d.site.text.startswith("fma.rn")
    assert d.occurrence == 3 and d.values[0] ^ d.values[1] == 2
    assert "occurrence 3 in the thread" in d.summary()[0]


def test_nothing_differs(mod):
    assert loc.locate(mod, "poly", 2, 64, _args(), runners=_pair(plant=False)) is None
    # with a thread given, the logs are compared anyway: they agree, addresses read as array offsets
    t = loc.Thread.of((2,), (64,), ctaid=(1, 0, 0), warp=1, lane=3)
    d = loc.locate(mod, "poly", 2, 64, _args(), runners=_pair(plant=False), thread=t)
    assert d.index is None and d.differing == 0 and not d.outputs_differ and d.compared > 10
    la, lb = d.logs
    assert (la.values != lb.values).any()  # the raw pointers differ between the two runs
    assert d.summary() == [f"the register-write logs of {t} agree over {d.compared} entries"]
    assert str(t) == "cta=1 warp=1 lane=3 (ctaid=(1, 0, 0) tid=(35, 0, 0))"


def test_agreeing_logs_with_differing_outputs_say_where_to_look(mod):
    """The planted lane is 7; logging lane 8 shows agreeing logs, and the note says the divergence is
    elsewhere."""
    t = loc.Thread.of((2,), (64,), ctaid=(0, 0, 0), warp=0, lane=8)
    d = loc.locate(mod, "poly", 2, 64, _args(), runners=_pair(), thread=t)
    assert d.index is None and d.outputs_differ
    assert "another thread" in d.summary()[1]


def test_overflow_is_reported_with_how_far_the_logs_agree(mod):
    t = loc.Thread.of((2,), (64,), ctaid=(0, 0, 0), warp=0, lane=7)
    d = loc.locate(mod, "poly", 2, 64, _args(), runners=_pair(), thread=t, capacity=6)
    assert d.index is None and d.logs[0].overflowed and d.compared == 6
    assert "overflowed (capacity 6 entries" in d.summary()[1] and "agree over the 6 entries kept" in d.summary()[1]


def test_a_module_from_cubin_bytes_cannot_be_located(mod, monkeypatch):
    with pytest.raises(loc.LocateError, match="needs the module's CUDA source"):
        loc.locate(fc.RawModule(cubin=mod.cubin), "poly", 2, 64, _args(), runners=_pair())


def test_runners_must_return_one_entry_per_argument(mod):
    bad = (lambda cubin, args: [None], loc.interpreter_runner("poly", 2, 64))
    t = loc.Thread.of((2,), (64,), ctaid=(0, 0, 0), warp=0, lane=0)
    with pytest.raises(Exception, match="one entry per argument"):
        loc.locate_first_divergence(mod.build, "poly", 2, 64, _args(), thread=t, runners=bad)


def test_format_value_reads_each_register_kind():
    assert loc.format_value(0x3F800000, "f32") == "0x3f800000 (f32 1.0)"
    assert loc.format_value(0x3C003800, "b32") == "0x3c003800 (int 1006647296, f32 0.007825851, f16x2 (0.5, 1.0))"
    assert loc.format_value(0x3C00, "b16") == "0x3c00 (f16 1.0)"
    assert loc.format_value(1, "pred") == "true"
    assert loc.format_value(0xFFFFFFFF, "s32") == "0xffffffff (-1)"
    assert loc.format_value(0x3FF0000000000000, "f64") == "0x3ff0000000000000 (f64 1.0)"


def test_window_and_stack_addresses_compare_by_offset():
    """Two runs whose shared window (or stack) sits elsewhere log the same offsets from it: no divergence;
    an offset that differs is one."""
    sites = (ptxlog.Site(0, 0, 1, "cvta.shared.u64 %rd1, %rd0", "%rd1", "b64", None, None, None,
                         address=("shared window",)),
             ptxlog.Site(1, 1, 2, "add.s64 %rd2, %rd1, 16", "%rd2", "b64", None, None, None, sources=("%rd1",),
                         address=("shared window",)),
             ptxlog.Site(2, 2, 3, "and.b64 %rd3, %rd2, 15", "%rd3", "b64", None, None, None, sources=("%rd2",),
                         address=("shared window",)))

    def log(base, third=0):
        v = np.array([base, base + 16, third], np.uint64)
        return ptxlog.ThreadLog((0, 0, 0), (0, 0, 0), 8, 3, np.array([0, 1, 2], np.uint32), v)

    t = loc.Thread.of(1, 32, ctaid=0, warp=0, lane=0)
    same = loc.compare_logs("k", ("a", "b"), t, log(0x7FFF_0000_0400), log(0x1_0000_0400), sites)
    assert same.index is None and same.differing == 0  # the and.b64 result is equal as bits
    moved = log(0x1_0000_0400)
    moved.values[1] += 4
    d = loc.compare_logs("k", ("a", "b"), t, log(0x7FFF_0000_0400), moved, sites)
    assert d.index == 1 and d.addresses == ("shared window+0x10", "shared window+0x14")


# ------------------------------------------------------------------------------------ pointers and arrays

#: the GPU's false divergences of pointers past the end of their arrays: (case, ctaid, tid, the site, its
#: occurrence, the argument whose array the pointer walks, the value as the GPU's log reads it, the
#: pointer's offset from its array)
PAST_THE_END = [
    ("run_example row_sums", (1, 0, 0), (5, 0, 0), r"add\.s64 (%rd\d+), \1, 1024", 4, 0, "args[1]+0x14", 0x2014),
    ("row_sums_fixed", (1, 0, 0), (37, 0, 0), r"add\.s64 (%rd\d+), \1, 1024", 4, 0, "args[1]+0x94", 0x2094),
    ("mma_tile", (0, 0, 0), (0, 0, 0), r"add\.s64 (%rd\d+), \1, 256", 2, 1, "args[2]+0x80", 0x280),
]


@pytest.mark.parametrize("label,ctaid,tid,pattern,occurrence,walked,gpu,offset", PAST_THE_END,
                         ids=[p[0] for p in PAST_THE_END])
def test_a_pointer_past_the_end_of_its_array_is_compared_by_that_array(label, ctaid, tid, pattern, occurrence,
                                                                       walked, gpu, offset):
    """As on the GPU, the "GPU" runner lays the arrays out back to back, so a loop's pointer after its last
    trip points into the next array there and into unmapped space in the interpreter: the two values are
    at the same offset from the array the pointer walks, so they agree. Moved by 4 bytes, one diverges."""
    case = next(c for c in lc.CASES if c.label == label)
    m = case.build()
    args = case.make_args(np.random.default_rng(0))
    packed = lc.PackedRunner(loc.interpreter_runner(case.kernel, case.grid, case.block))
    t = loc.Thread(ctaid, tid, loc._dims("grid", case.grid), loc._dims("block", case.block))
    d = loc.locate_first_divergence(m.build, case.kernel, case.grid, case.block, args, thread=t,
                                    runners=(packed, loc.interpreter_runner(case.kernel, case.grid, case.block)))
    assert d.index is None and d.differing == 0 and not d.outputs_differ
    arrays = [i for i, a in enumerate(args) if isinstance(a, np.ndarray)]
    for i, j in zip(arrays, arrays[1:]):  # back to back on 512-byte boundaries
        assert packed.addresses[j] == packed.addresses[i] + -(-args[i].nbytes // 512) * 512

    # the entry: in the next array on the "GPU", past the end of its own in the interpreter
    la, lb = d.logs
    arg_bytes = {i: args[i].nbytes for i in arrays}
    ba, bb = (loc._argument_bases(log, d.sites, d.kernel, arg_bytes) for log in d.logs)
    parted = [k for k in range(len(la)) if d.sites[int(la.sites[k])].width == 64
              and (loc._nearest_argument(int(la.values[k]), ba, arg_bytes) or (None,))[0]
              != (loc._nearest_argument(int(lb.values[k]), bb, arg_bytes) or (None,))[0]]
    assert parted, "no pointer of the log lies in different arrays on the two sides"
    k = parted[0]
    site = d.sites[int(la.sites[k])]
    assert re.fullmatch(pattern, site.text), site.text
    assert int(np.count_nonzero(la.sites[:k + 1] == site.id)) == occurrence
    assert loc._argument_taint(d.sites, d.kernel)[site.id] == {walked}
    assert (int(la.values[k]) - ba[walked], int(lb.values[k]) - bb[walked]) == (offset, offset)

    # a genuine difference of that pointer is still one, reported against the nearest arrays
    moved = ptxlog.ThreadLog(lb.ctaid, lb.tid, lb.capacity, lb.produced, lb.sites.copy(), lb.values.copy())
    moved.values[k] += np.uint64(4)
    e = loc.compare_logs(d.kernel, ("GPU", "interpreter"), t, la, moved, d.sites, arg_bytes)
    interp = f"args[{walked}]+{offset + 4:#x}"
    assert e.index == k and e.site == site and e.occurrence == occurrence
    assert e.addresses == (gpu, interp)
    assert f"= {gpu}" in e.summary()[1] and f"= {interp}" in e.summary()[1]


# a kernel's sites as the comparison reads them: two array arguments, a pointer walked from args[0], one
# loaded from memory (derived from no argument), an index that is no address
_SITES = (
    ptxlog.Site(0, 0, 1, "ld.param.u64 %rd1, [k_param_0]", "%rd1", "b64", None, None, None),
    ptxlog.Site(1, 1, 2, "ld.param.u64 %rd2, [k_param_1]", "%rd2", "b64", None, None, None),
    ptxlog.Site(2, 2, 3, "cvta.to.global.u64 %rd3, %rd1", "%rd3", "b64", None, None, None, sources=("%rd1",)),
    ptxlog.Site(3, 3, 4, "add.s64 %rd4, %rd3, %rd5", "%rd4", "b64", None, None, None, sources=("%rd3", "%rd5")),
    ptxlog.Site(4, 4, 5, "ld.global.u64 %rd6, [%rd2]", "%rd6", "b64", None, None, None),
    ptxlog.Site(5, 5, 6, "mul.wide.u32 %rd5, %r1, 4", "%rd5", "b64", None, None, None, sources=("%r1",)),
)
_BYTES = {0: 0x2000, 1: 0x100}
_GPU = (0x7F7A_93E0_0000, 0x7F7A_93E0_2000)  # back to back
_INTERP = (0x7F00_0000_0000, 0x7F00_0000_3000)  # apart


def _pointer_logs(rows):
    """Two logs: the arguments' ld.param, then (site, GPU value, interpreter value) per row."""
    sites = [0, 1, 2] + [s for s, _, _ in rows]
    a = [_GPU[0], _GPU[1], _GPU[0]] + [v for _, v, _ in rows]
    b = [_INTERP[0], _INTERP[1], _INTERP[0]] + [v for _, _, v in rows]
    return tuple(ptxlog.ThreadLog((0, 0, 0), (0, 0, 0), 64, len(sites), np.array(sites, np.uint32),
                                  np.array(v, np.uint64)) for v in (a, b))


def _compare(rows):
    t = loc.Thread.of(1, 32, ctaid=0, warp=0, lane=0)
    return loc.compare_logs("k", ("GPU", "interpreter"), t, *_pointer_logs(rows), _SITES, _BYTES)


def test_argument_taint_names_the_array_a_pointer_walks():
    taint = loc._argument_taint(_SITES, "k")
    assert [sorted(x) for x in taint] == [[0], [1], [0], [0], [], []]


def test_pointers_compare_by_their_offset_from_one_array():
    past = 0x2000 + 0x14  # past the end of args[0]: inside args[1] on the GPU, unmapped in the interpreter
    ok = _compare([(3, _GPU[0] + 0x40, _INTERP[0] + 0x40),  # inside
                   (3, _GPU[0] + past, _INTERP[0] + past),
                   (3, _GPU[0] - 0x40, _INTERP[0] - 0x40),  # before the start
                   (3, _GPU[0] + 0x2000 + (1 << 20), _INTERP[0] + 0x2000 + (1 << 20)),  # 1 MiB past the end
                   (4, _GPU[1] + 0x8, _INTERP[1] + 0x8),  # loaded: any argument
                   (4, _GPU[0] + past, _INTERP[0] + past),
                   (5, 0x40, 0x40)])  # not an address: the bits
    assert ok.index is None and ok.differing == 0


@pytest.mark.parametrize("site,gpu,interp,shown", [
    # 4 bytes apart against the same array: a genuine divergence
    (3, _GPU[0] + 0x40, _INTERP[0] + 0x44, ("args[0]+0x40", "args[0]+0x44")),
    (3, _GPU[0] + 0x2014, _INTERP[0] + 0x2018, ("args[1]+0x14", "args[0]+0x2018")),
    (4, _GPU[1] + 0x8, _INTERP[1] + 0xc, ("args[1]+0x8", "args[1]+0xc")),
    (3, _GPU[0] - 0x40, _INTERP[0] - 0x3c, ("args[0]-0x40", "args[0]-0x3c")),
    # same offset from args[1], but the pointer walks args[0], from which the offsets differ
    (3, _GPU[1] + 0x4, _INTERP[1] + 0x4, ("args[1]+0x4", "args[1]+0x4")),
    # the same offset, too far from the array to be a pointer into it
    (3, _GPU[0] + 0x2000 + (2 << 20), _INTERP[0] + 0x2000 + (2 << 20), (None, None)),
])
def test_a_genuine_pointer_divergence_is_reported(site, gpu, interp, shown):
    d = _compare([(3, _GPU[0] + 0x10, _INTERP[0] + 0x10), (site, gpu, interp)])
    assert d.index == 4 and d.site == _SITES[site] and d.values == (gpu, interp)
    assert d.addresses == shown
    if shown[0]:
        assert f"= {shown[0]}" in d.summary()[1] and f"= {shown[1]}" in d.summary()[1]


@pytest.mark.parametrize("case", lc.CASES, ids=lambda c: c.label)
def test_instrumented_builds_compute_what_the_plain_builds_compute(case):
    src, name = case.source()
    m = fc.RawModule(code=src, name=name)
    ins, cubin = loc.instrumented_build(m.build, case.kernel)
    args = case.make_args(np.random.default_rng(5))
    run = loc.interpreter_runner(case.kernel, case.grid, case.block)
    plain = run(m.cubin, [np.copy(a) if isinstance(a, np.ndarray) else a for a in args])
    ctaid, tid = case.threads[0]
    inst = run(cubin, [np.copy(a) if isinstance(a, np.ndarray) else a for a in args]
               + [ptxlog.log_buffer(1 << 12, ctaid, tid)])
    for p, q in zip(plain, inst):
        if p is not None:
            np.testing.assert_array_equal(p.view(np.uint8), q.view(np.uint8))
    assert any(np.asarray(p).any() for p in plain if p is not None)
    log = ptxlog.read_log(inst[-1])
    assert len(log) > 50 and not log.overflowed


def test_mma_destinations_are_logged_element_by_element():
    case = next(c for c in lc.CASES if c.kernel == "mma_tile")
    src, name = case.source()
    m = fc.RawModule(code=src, name=name)
    ins, cubin = loc.instrumented_build(m.build, "mma_tile")
    mma = [s for s in ins.sites if s.text.startswith("mma.sync")]
    ldm = [s for s in ins.sites if s.text.startswith("ldmatrix.sync.aligned.m8n8.x4")]
    assert len(mma) == 4 and len({s.register for s in mma}) == 4 and len(ldm) == 4
    args = case.make_args(np.random.default_rng(1))
    args[3], args[4] = np.float32(1), np.float32(0)  # d = c * 1 + 0: the output holds the mma results
    lane = 9
    out = loc.interpreter_runner("mma_tile", 1, 32)(cubin, args + [ptxlog.log_buffer(1 << 10, 0, lane)])
    log = ptxlog.read_log(out[-1])
    got = [int(v) for s, v in zip(log.sites, log.values) if int(s) in {x.id for x in mma}]
    c_frag = fragment("mma.m16n8k16", "C", "f32")  # register e of the lane: element (row, col) of the 16 x 8 D tile
    want = out[0].view(np.uint32)[[8 * r + c for r, c in (c_frag.coords(lane, e) for e in range(4))]]
    assert got == want.tolist()


# ----------------------------------------------------------------------------------------- assert_matches_gpu

@pytest.fixture
def session(tmp_path):
    s = testing._SESSION
    saved = (s.gpu, s.update_golden, s.golden_dir)
    yield tmp_path
    testing.configure(gpu=saved[0], update_golden=saved[1], golden_dir=saved[2])


def test_without_the_gpu_the_message_says_locating_needs_it(mod, session):
    testing.configure(gpu=False, update_golden=False, golden_dir=session)
    args = _args()
    want = loc.interpreter_runner("poly", 2, 64)(mod.cubin, [np.copy(a) if isinstance(a, np.ndarray) else a
                                                            for a in args])
    want[0][7] = np.nextafter(want[0][7], np.float32(9))
    key = testing.launch_key(testing.code_digest(mod, "poly"), "poly", (2, 1, 1), (64, 1, 1), 0, args)
    path = testing._golden_path("poly", key)
    np.savez(path, provenance=np.array(json.dumps({"kernel": "poly"})),
             **{f"out{i}": o for i, o in enumerate(want) if o is not None})
    with pytest.raises(testing.KernelMismatch) as ei:
        testing.assert_matches_gpu(mod, "poly", (2,), (64,), args)
    assert "locating the first divergent instruction needs the GPU (pytest --gpu)" in str(ei.value)
    assert ei.value.divergence is None


def test_under_gpu_the_message_names_the_first_divergence():
    r = lc.check_testing(cpu=True)
    assert r["ok"], r
    lines = r["message"].splitlines()
    assert len(lines) <= 6
    assert "first divergence" in lines[2] and f"locate_probes.cu:{r['line']}" in lines[2]


def test_under_gpu_a_module_from_cubin_bytes_says_locating_needs_the_source(mod, session, monkeypatch):
    monkeypatch.setattr(testing, "_run_gpu", lambda cubin, name, grid, block, a, sm: loc.interpreter_runner(
        name, grid, block, sm)(cubin, list(a)))
    testing.configure(gpu=True, update_golden=False, golden_dir=session)
    bare = fc.RawModule(cubin=mod.cubin)
    with lc.planted():  # the module's program is compiled with the planted FFMA; the "GPU" keeps the sound one
        bare.get_function("poly")._prog()
    with pytest.raises(testing.KernelMismatch) as ei:
        testing.assert_matches_gpu(bare, "poly", (2,), (64,), _args())
    assert "needs the kernel's CUDA source" in str(ei.value) and ei.value.divergence is None


# ----------------------------------------------------------------------------------------- the device check

def test_the_device_check_runs_on_the_cpu(tmp_path):
    assert lc.main(["--out", str(tmp_path), "--cpu", "--no-fa2"]) == 0
    rep = json.loads((tmp_path / "locate_check.json").read_text())
    assert rep["ok"] and rep["planted"]["ok"] and rep["testing"]["ok"]
    assert [c["case"] for c in rep["cases"]] == [c.label for c in lc.CASES]
    rows = [t for c in rep["cases"] for t in c["threads"]]
    assert all(t["differing"] == 0 and t["entries"][0] == t["entries"][1] > 0 for t in rows)
    md = (tmp_path / "locate_check.md").read_text()
    assert "overall: PASS" in md and "mode: cpu" in md


def test_the_device_check_without_a_gpu_says_so(tmp_path, monkeypatch, capsys):
    import sys

    monkeypatch.setitem(sys.modules, "cupy", None)  # as if cupy were not installed
    from flashsim.gpu.runtime import GpuUnavailable

    with pytest.raises(GpuUnavailable, match="cupy is not importable"):
        lc.check_planted(cpu=False)
    assert lc.main(["--out", str(tmp_path)]) == 2
    assert "locate_check: no GPU" in capsys.readouterr().err
