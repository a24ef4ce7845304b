"""flashsim.cuda.checking: banks per PC and source line, executed instructions, faults located at the
PC and line, initcheck of global and shared memory, races with both sides, reports as text/HTML/JSON."""

import json

import numpy as np
import pytest

import flashsim.cuda as fc
from flashsim.errors import ArgumentError, SimulatedFault
from flashsim.smem import wavefronts

SRC = r'''
extern "C" __global__ void strided(float* out, int stride) {
  __shared__ float s[1024];
  int t = threadIdx.x;
  s[(t * stride) % 1024] = t;                                  // LINE:store
  __syncthreads();
  float v = s[(t * 2) % 1024];                                 // LINE:load2
  float2 w = reinterpret_cast<float2*>(s)[t];                  // LINE:load64
  out[blockIdx.x * blockDim.x + t] = v + w.x + w.y;
}
extern "C" __global__ void copy(float* out, const float* in, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * 2.0f;                            // LINE:copy
}
extern "C" __global__ void smem_oob(float* out, int bad_cta) {
  extern __shared__ float dyn[];
  int t = threadIdx.x;
  int i = (blockIdx.x == bad_cta && t == 37) ? 4096 : t;
  dyn[i] = 1.0f;                                               // LINE:oob
  out[t] = dyn[t];
}
extern "C" __global__ void uninit_smem(float* out) {
  __shared__ float s[64];
  int t = threadIdx.x;
  if (t < 32) s[t] = t;
  __syncthreads();
  out[t] = s[63 - t];                                          // LINE:uninit
}
extern "C" __global__ void exchange(float* out, int sync) {
  __shared__ float s[64];
  int t = threadIdx.x;
  s[t] = t;                                                    // LINE:xw
  if (sync) __syncthreads();
  out[t] = s[63 - t];                                          // LINE:xr
}
'''
LINES = {tag: i + 1 for i, line in enumerate(SRC.splitlines()) for tag in [line.rsplit("LINE:", 1)[-1].strip()]
         if "LINE:" in line}


@pytest.fixture(scope="module")
def mod():
    return fc.RawModule(code=SRC)


def _launch(mod, name, grid, block, args, **kw):
    mod.get_function(name)(grid, block, args, **kw)


def test_banks_per_pc_and_line_equal_the_bank_model(mod):
    out = fc.zeros(128, np.float32)
    with fc.checking(banks=True) as rep:
        _launch(mod, "strided", (2,), (64,), (out, np.int32(4)))
    sites = {s.line: s for s in rep.bank_sites()}
    t = np.arange(64)
    # each line's instruction: per warp, the wavefronts the bank model gives for the lane addresses
    expect = {
        "store": wavefronts(((t * 4) % 1024 * 4 + 0x400).reshape(2, 32), width=4, op="st"),
        "load2": wavefronts(((t * 2) % 1024 * 4 + 0x400).reshape(2, 32), width=4, op="ld"),
        "load64": wavefronts((t * 8 + 0x400).reshape(2, 32), width=8, op="ld"),
    }
    for tag, (wf, ideal) in expect.items():
        s = sites[LINES[tag]]
        assert (s.executions, s.wavefronts, s.ideal) == (4, 2 * int(wf.sum()), 2 * int(ideal.sum())), tag
        assert s.sass.startswith(("STS", "LDS")) and s.op in ("st", "ld")
    assert sites[LINES["store"]].conflicts == 12  # 4-way: 4 wavefronts per warp instead of 1
    by_line = rep.banks_by_line()
    assert by_line[0]["line"] == LINES["store"]  # worst first
    tot = rep.bank_totals()["strided"]
    assert tot["wavefronts"] == sum(s.wavefronts for s in sites.values())
    # a second launch inside the block adds up
    with fc.checking() as rep2:
        for _ in range(2):
            _launch(mod, "strided", (2,), (64,), (out, np.int32(4)))
    assert rep2.bank_totals()["strided"]["wavefronts"] == 2 * tot["wavefronts"]
    assert len(rep2.launches) == 2


def test_executed_instructions_per_pc_count_warps(mod):
    out, inp = fc.zeros(100, np.float32), fc.asarray(np.ones(100, np.float32))
    with fc.checking(banks=False) as rep:
        _launch(mod, "copy", (2,), (64,), (out, inp, np.int32(100)))
    assert rep.bank_sites() == []
    ex = rep.executed("copy")
    assert ex[("copy", 0)] == 4  # the first instruction: every warp of both CTAs once
    lines = {d["line"]: d for d in rep.executed_by_line()}
    assert LINES["copy"] in lines and lines[LINES["copy"]]["executions"] >= 4
    assert rep.launches[0].warp_instructions == sum(ex.values())


def test_shared_fault_names_grid_cta_pc_sass_and_line(mod):
    out = fc.zeros(64, np.float32)
    f = mod.get_function("smem_oob")
    with pytest.raises(SimulatedFault) as ei:
        f((3,), (64,), (out, np.int32(2)), shared_mem=256,
          exec_options=fc.ExecOptions(ctas_per_batch=2))  # CTA 2 is slot 0 of the second batch
    e = ei.value
    assert (e.kind, e.cta, e.warp, e.lane) == ("out-of-bounds shared address", 2, 1, 5)
    assert e.line[1] == LINES["oob"] and e.sass.startswith("STS")
    assert f"pc={e.pc:#06x}" in str(e) and f":{LINES['oob']}" in str(e)


def test_initcheck_global_and_shared(mod):
    n = 64
    out = fc.zeros(n, np.float32)
    fresh = fc.empty(n, np.float32)
    with fc.checking(banks=False, initcheck=True) as rep:
        _launch(mod, "copy", (1,), (n,), (out, fresh, np.int32(n)))
    assert rep.uninit_count == n and not rep.clean
    u = rep.uninitialized[0]
    assert u.space == "global" and u.nbytes == 4 and u.access.line == LINES["copy"]
    assert u.addr == fresh.data.ptr
    # what a kernel wrote is initialised for later launches; what the host wrote too
    with fc.checking(banks=False, initcheck=True) as rep:
        _launch(mod, "copy", (1,), (n,), (fresh, out, np.int32(n)))
        _launch(mod, "copy", (1,), (n,), (out, fresh, np.int32(n)))
    assert rep.clean
    part = fc.empty(n, np.float32)
    fc.device_memory().mark_written(part.data.ptr, 4 * (n // 2))
    with fc.checking(banks=False, initcheck=True) as rep:
        _launch(mod, "copy", (1,), (n,), (out, part, np.int32(n)))
    assert rep.uninit_count == n // 2
    assert {u.addr - part.data.ptr for u in rep.uninitialized} == set(range(4 * (n // 2), 4 * n, 4))
    # shared: threads 0..31 write s[0..31]; reads of s[32..63] (by threads 0..31) read nothing written
    with fc.checking(banks=False, initcheck=True) as rep:
        _launch(mod, "uninit_smem", (1,), (64,), (out,))
    sh = [u for u in rep.uninitialized if u.space == "shared"]
    assert len(sh) == 32 and {u.access.lane for u in sh} == set(range(32)) and sh[0].access.warp == 0
    assert sh[0].access.line == LINES["uninit"]


def test_races_report_both_sides_whatever_the_schedule(mod):
    out = fc.zeros(64, np.float32)
    pairs = []
    for seed in (None, 1, 2, 3):
        with fc.checking(banks=False, races=True) as rep:
            _launch(mod, "exchange", (1,), (64,), (out, np.int32(0)), exec_options=fc.ExecOptions(schedule_seed=seed))
        assert rep.race_count > 0
        r = rep.race_sites[0]
        assert {r.first.line, r.second.line} == {LINES["xw"], LINES["xr"]}
        assert r.first.warp != r.second.warp and r.kind in ("RAW", "WAR")
        pairs.append(rep.race_pairs())
    assert all(p == pairs[0] for p in pairs)
    with fc.checking(banks=False, races=True) as rep:
        _launch(mod, "exchange", (1,), (64,), (out, np.int32(1)))
    assert rep.race_count == 0 and rep.clean


def test_report_renders_text_html_json(mod):
    out = fc.zeros(128, np.float32)
    with fc.checking(banks=True, races=True, initcheck=True) as rep:
        _launch(mod, "strided", (2,), (64,), (out, np.int32(4)))
    text = rep.text()
    assert f"kernel.cu:{LINES['store']}" in text and "races: none" in text
    assert "<table>" in rep.html() and "strided" in rep.html()
    d = json.loads(rep.to_json())
    assert d["bank_totals"]["strided"]["conflicts"] == rep.bank_totals()["strided"]["conflicts"]
    assert d["race_count"] == 0


def test_checking_arguments_and_nesting(mod):
    with pytest.raises(ArgumentError, match="banks"):
        with fc.checking(banks="yes"):
            pass
    with pytest.raises(ArgumentError, match="max_records"):
        with fc.checking(max_records=0):
            pass
    out = fc.zeros(128, np.float32)
    with fc.checking() as outer:
        with fc.checking() as inner:
            _launch(mod, "strided", (1,), (64,), (out, np.int32(1)))
        _launch(mod, "strided", (1,), (64,), (out, np.int32(1)))
    assert len(inner.launches) == 1 and len(outer.launches) == 1
    # outside any block nothing is collected and nothing is counted
    _launch(mod, "strided", (1,), (64,), (out, np.int32(1)))
    assert len(outer.launches) == 1
