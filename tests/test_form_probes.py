"""The SASS forms of other compilers (gpu/kernels/probe_forms.cu built by NVRTC 13.0, by ptxas 13.0 from PTX and
by Triton's ptxas 12.8): the interpreter against the PTX ISA's pseudo-code on drawn cases, against the H100's
recorded outputs (traces/triton/form_probes.npz) on the very cubins the GPU ran, and, under --gpu, against
the GPU again. A pending probe (flashsim.gpu.form_probes.pending: a case the interpreter refuses) must be
refused; its GPU answers are recorded all the same. Then the interpreter on whole kernels of the three families
the probes pin down: warp collectives in divergent code, float and 64-bit shared-memory atomics."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import flashsim.cuda as fc
from flashsim.errors import SimulatedFault
from flashsim.gpu import form_probes as F
from flashsim.gpu import sass_probes as sp

BUILDS = [b for b in F.BUILDS if b != "ptxas128"] + (["ptxas128"] if __import__("importlib").util.find_spec("triton")
                                                     else [])
PAIRS = [(b, p) for b in BUILDS for p in F.PROBES]
RUNNABLE = [(b, p) for b, p in PAIRS if not F.pending(p)]
PENDING = [(b, p) for b, p in PAIRS if F.pending(p)]
#: the probes of the current table that a record must hold (an older record may lack them: those tests skip)
NEW_SINCE_RECORD = ("probe_f2fp", "probe_coll_half", "probe_coll_excl", "probe_coll_loop", "probe_coll_cross",
                    "probe_coll_foreign", "probe_atoms_cast", "probe_atoms_f64")


def _ids(x):
    return f"{x[0]}-{x[1].name}"


@pytest.mark.parametrize("pair", PAIRS, ids=_ids)
def test_each_build_contains_the_forms_it_probes(pair):
    which, pr = pair
    assert not F.missing_forms(which, pr), F.forms(which, pr.name)


@pytest.mark.parametrize("pair", RUNNABLE, ids=_ids)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_the_interpreter_follows_the_ptx_isa(pair, data):
    which, pr = pair
    case = data.draw(sp.case_strategy(pr), label="case")
    msgs = sp.compare(case, F.run_interp(case, which), sp.reference(case))
    assert not msgs, "\n".join(msgs)


@pytest.mark.parametrize("pair", PENDING, ids=_ids)
@pytest.mark.parametrize("seed", [1, 2])
def test_a_pending_probe_is_refused(pair, seed):
    which, pr = pair
    with pytest.raises(F.refusals()):
        F.run_interp(sp.make_case(pr, seed), which)


def _record():
    return json.loads(F.TRACE.with_suffix(".json").read_text())


def test_the_h100_record():
    rep = _record()
    for which, r in rep["builds"].items():
        for name, e in r["probes"].items():
            assert not e["forms_missing"] and not e.get("gpu_error"), (which, name, e)
            if F.pending(F.probe(name)):
                # what the GPU does there is the record; the interpreter refused (or, since, runs it: then equal).
                # A probe made pending after its record (the GPU showed the model wrong) must be refused now: the
                # replay tests check that
                assert not e.get("pending") or e.get("refused") or e["equal"], (which, name, e)
                continue
            assert e["equal"] and not e["reference_mismatches"], (which, name, e)
            assert not e.get("driver_jit_mismatches"), (which, name)
    for which, e in rep["smem_sizes"].items():
        assert e["read"] == e["launched"], which  # %dynamic_smem_size is the launch's dynamic shared memory
    assert rep["ptxas128"].startswith("release 12.8") and rep["ptxas130"].startswith("release 13.0")


def _replay_items(recorded, which, name=None):
    cubin, items = recorded[which]
    return fc.RawModule(cubin=cubin), [(c, o) for c, o in items if name is None or c.probe.name == name]


def _check_replay(which, mod, items):
    failures = []
    for case, gpu_out in items:
        if F.pending(case.probe):
            with pytest.raises(F.refusals()):
                F.run_interp(case, which, module=mod)
            continue
        failures += sp.compare(case, F.run_interp(case, which, module=mod), gpu_out, f"the H100 ({which})")
    assert not failures, "\n".join(failures[:10])


@pytest.fixture(scope="module")
def recorded():
    return F.replay(F.TRACE)


def test_the_recorded_cubins_replay_in_the_interpreter(recorded):
    assert set(recorded) == set(F.BUILDS)
    for which in recorded:
        mod, items = _replay_items(recorded, which)
        assert items
        _check_replay(which, mod, [(c, o) for c, o in items if c.probe.name not in NEW_SINCE_RECORD])


@pytest.mark.parametrize("name", NEW_SINCE_RECORD)
@pytest.mark.parametrize("which", F.BUILDS)
def test_the_new_probes_replay_from_the_record(recorded, which, name):
    mod, items = _replay_items(recorded, which, name)
    if not items:
        pytest.skip(f"{name} is not in the H100 record yet (python -m flashsim.gpu.form_probes --out traces/triton)")
    e = _record()["builds"][which]["probes"][name]
    assert not e["forms_missing"] and not e.get("gpu_error"), e
    _check_replay(which, mod, items)


def test_an_older_record_with_fewer_probes_replays(tmp_path, recorded):
    # the record as it was before the table grew: its cases are found, the probes it lacks have none
    data = dict(np.load(F.TRACE))
    kept = {k: v for k, v in data.items() if "/probe_szext/" in k or k.endswith("/__cubin__")}
    np.savez(tmp_path / "old.npz", **kept)
    old = F.replay(tmp_path / "old.npz")
    assert set(old) == set(recorded)
    for which, (cubin, items) in old.items():
        assert cubin == recorded[which][0]
        assert items and {c.probe.name for c, _ in items} == {"probe_szext"}
        _check_replay(which, fc.RawModule(cubin=cubin), items[:1])


@pytest.mark.parametrize("which", BUILDS)
def test_dynamic_smem_size_in_the_interpreter(which):
    assert F.smem_sizes(which, gpu=False) == list(F.SMEM_SIZES)


# ------------------------------------------------------------------------------------------------ the recorder
def test_the_recorder_writes_every_probe_and_reads_it_back(tmp_path, monkeypatch):
    """record() on a stand-in GPU (the interpreter; a pending probe's outputs the initial ones): every build and
    probe of the table is written, isolated probes through their child-process path, and replay() reads back
    what was written."""
    chosen = tuple(F.probe(n) for n in ("probe_szext", "probe_f2fp", "probe_coll_cross", "probe_atoms_f64"))
    monkeypatch.setattr(F, "PROBES", chosen)
    monkeypatch.setattr(F, "BUILDS", tuple(BUILDS))

    def fake_gpu(case, which, cubin=None):
        if F.pending(case.probe):
            return [a.copy() for a in case.outs0]
        return F.run_interp(case, "ptxas130" if which == "driver-jit" else which)
    isolated = []

    def fake_isolated(cases, which, cubin, timeout_s=1.0):
        isolated.append((which, len(cases)))
        return [fake_gpu(c, which) for c in cases], ""
    import flashsim.gpu.runtime as runtime
    monkeypatch.setattr(F, "run_gpu", fake_gpu)
    monkeypatch.setattr(F, "run_gpu_isolated", fake_isolated)
    monkeypatch.setattr(F, "culink_text_check", lambda: {"stand-in": True})
    monkeypatch.setattr(F, "smem_sizes", lambda w, gpu: F.SMEM_SIZES)
    monkeypatch.setattr(runtime, "device_info", lambda: {"name": "stand-in"})
    if "ptxas128" not in BUILDS:
        monkeypatch.setattr(F, "triton_ptxas", lambda: None)
    rep = F.record(tmp_path, cases=1)
    assert isolated == [(w, 1) for w in BUILDS]
    assert set(rep["builds"]) == set(BUILDS)
    saved = json.loads((tmp_path / "form_probes.json").read_text())
    back = F.replay(tmp_path / "form_probes.npz")
    for which in BUILDS:
        entries = saved["builds"][which]["probes"]
        assert set(entries) == {p.name for p in chosen}
        for pr in chosen:
            e = entries[pr.name]
            assert e["cases"] == 1 and not e["forms_missing"], (which, pr.name, e)
            if F.pending(pr):
                assert e["pending"] and e["refused"], e
            else:
                assert e["equal"] and not e["reference_mismatches"], (which, pr.name, e)
                assert e["executed"], (which, pr.name)
        assert back[which][0] == F.build(which).cubin
        assert sorted(c.probe.name for c, _ in back[which][1]) == sorted(p.name for p in chosen)


def test_an_isolated_gpu_run_reports_a_child_that_fails_or_hangs():
    pr = F.probe("probe_coll_cross")
    cases = [sp.make_case(pr, 5, n=64)]
    cubin = F.build("nvrtc13").cubin
    outs, err = F.run_gpu_isolated(cases, "nvrtc13", cubin, timeout_s=0.01)
    assert outs == [] and "no answer within" in err
    try:
        from flashsim.gpu import runtime

        runtime.require_gpu()
        pytest.skip("a GPU is here: the child process would answer")
    except Exception:
        pass
    outs, err = F.run_gpu_isolated(cases, "nvrtc13", cubin, timeout_s=300)
    assert outs == [] and "child process failed" in err


@pytest.mark.gpu
@pytest.mark.parametrize("pair", PAIRS, ids=_ids)
def test_gpu_and_interpreter_agree(pair):
    which, pr = pair
    for k in range(2):
        case = sp.make_case(pr, 777 + k)
        if pr.name in F.ISOLATED:
            outs, err = F.run_gpu_isolated([case], which, F.build(which).cubin)
            assert not err, err
            gpu = outs[0]
        else:
            gpu = F.run_gpu(case, which)
        if F.pending(pr):
            with pytest.raises(F.refusals()):
                F.run_interp(case, which)
            continue
        assert not sp.compare(case, F.run_interp(case, which), gpu, "the GPU")
        if which == "ptxas130" and pr.name not in F.ISOLATED:
            assert not sp.compare(case, F.run_gpu(case, "driver-jit"), gpu, "the driver's JIT")


# ------------------------------------------------------------------------------------------------ whole kernels
def _lanes_of(bits):
    return [j for j in range(32) if bits >> j & 1]


SEGMENTS = r'''
// a segmented warp scan / reduction as libraries write them, each half-warp under its constant mask in code
// only its lanes reach (lanes past n have left): the lower half mixes in its first lane's value three times and
// reduces, the upper half adds up with shfl_xor steps (which need all 16 of its lanes)
extern "C" __global__ void seg_sum(const unsigned* a, unsigned* out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const unsigned lane = threadIdx.x & 31u;
    unsigned v = a[i];
    if (lane < 16u) {
        for (int k = 0; k < 3; k++) v = v * 3u + __shfl_sync(0x0000ffffu, v, 0);
        out[i] = v + __reduce_max_sync(0x0000ffffu, a[i]) + __ballot_sync(0x0000ffffu, a[i] & 1u);
    } else {
        for (int k = 8; k; k >>= 1) v += __shfl_xor_sync(0xffff0000u, v, k);
        out[i] = v;
    }
}
// each lane's group (a register mask): WARPSYNC.EXCLUSIVE
extern "C" __global__ void grouped(const unsigned* a, const unsigned* m, unsigned* out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    out[2 * i] = __reduce_add_sync(m[i], a[i]);
    out[2 * i + 1] = __match_any_sync(m[i], a[i] & 1u);
}
// the lanes 16 .. 31 run collectives whose mask names lanes 0 .. 15 only (WARPSYNC; the slow path's
// WARPSYNC.COLLECTIVE)
extern "C" __global__ void outside(const unsigned* a, unsigned* out) {
    unsigned r = 0;
    if (threadIdx.x >= 16) r = __reduce_add_sync(0x0000ffffu, a[threadIdx.x]);
    out[threadIdx.x] = r;
}
extern "C" __global__ void outside_loop(const unsigned* a, unsigned* out) {
    unsigned v = a[threadIdx.x];
    if (threadIdx.x >= 16)
        for (int k = 0; k < 2; k++) v += __shfl_sync(0x0000ffffu, v, 0);
    out[threadIdx.x] = v;
}
'''


@pytest.fixture(scope="module")
def segments():
    return fc.RawModule(code=SEGMENTS, name="segments.cu")


@pytest.mark.parametrize("n", [256, 235, 200, 250, 17])
def test_a_diverged_half_warp_reduction(segments, n):
    rng = np.random.default_rng(n)
    a = rng.integers(0, 1 << 32, 256, dtype=np.uint64).astype(np.uint32)
    out = fc.asarray(np.full(256, 7, np.uint32))
    f = segments.get_function("seg_sum")
    args = (fc.asarray(a), out, np.int32(n))
    if 16 < n % 32:  # the upper half of the last warp is short: its shfl_xor steps read lanes that have left
        with pytest.raises(F.refusals()):
            f((2,), (128,), args)
        return
    f((2,), (128,), args)
    got = out.get()
    want = np.full(256, 7, np.uint32)
    for base in range(0, 256, 32):
        for h in (0, 16):
            live = [base + h + j for j in range(16) if base + h + j < n]
            for k in live:
                if h == 0:
                    v = {q: int(a[q]) for q in live}
                    for _ in range(3):
                        v = {q: (x * 3 + v[live[0]]) & 0xFFFFFFFF for q, x in v.items()}
                    want[k] = (v[k] + max(int(a[q]) for q in live)
                               + sum(1 << (q - base) for q in live if a[q] & 1)) & 0xFFFFFFFF
                else:
                    want[k] = sum(int(a[q]) for q in live) & 0xFFFFFFFF
    np.testing.assert_array_equal(got, want)
    names = f._prog().executed_forms()
    assert names.get("BRA.DIV")
    if n % 32:  # lanes of the lower half's mask have exited: ptxas's slow path ran
        assert names.get("WARPSYNC.COLLECTIVE") and names.get("ENDCOLLECTIVE")


def test_grouped_collectives_run_each_group_alone(segments):
    rng = np.random.default_rng(3)
    a = rng.integers(0, 1000, 64).astype(np.uint32)
    lab = np.concatenate([np.arange(32) % 3, np.arange(32) >> 3])
    m = np.array([sum(1 << j for j in range(32) if lab[32 * (i // 32) + j] == lab[i]) for i in range(64)], np.uint32)
    out = fc.zeros(128, np.uint32)
    f = segments.get_function("grouped")
    f((1,), (64,), (fc.asarray(a), fc.asarray(m), out, np.int32(64)))
    got = out.get().reshape(64, 2)
    for i in range(64):
        base = 32 * (i // 32)
        grp = [base + j for j in _lanes_of(int(m[i]))]
        assert got[i, 0] == sum(int(a[k]) for k in grp)
        assert got[i, 1] == sum(1 << (k - base) for k in grp if a[k] & 1 == a[i] & 1)
    assert f._prog().executed_forms().get("WARPSYNC.EXCLUSIVE")
    # masks that are no partition (a lane's mask names a lane holding another mask): undefined, refused
    bad = m.copy()
    bad[0] |= 1 << 1 if lab[1] != lab[0] else 1 << 2
    with pytest.raises(NotImplementedError, match="hold other masks"):
        f((1,), (64,), (fc.asarray(a), fc.asarray(bad), fc.zeros(128, np.uint32), np.int32(64)))


def test_a_lane_outside_its_collective_mask_is_refused(segments):
    with pytest.raises(NotImplementedError, match=r"WARPSYNC.COLLECTIVE: cta=0 warp=0 lane=16 executes it outside "
                                                  r"its mask 0x0000ffff"):
        segments.get_function("outside_loop")((1,), (32,), (fc.asarray(np.arange(32, dtype=np.uint32)),
                                                            fc.zeros(32, np.uint32)))


def test_a_lane_outside_its_warpsync_mask_faults_as_on_the_h200(segments):
    # a plain WARPSYNC executed by a lane outside its mask stops the kernel with cudaErrorIllegalInstruction on
    # the H200 (gpu/synccheck_cases.py: syncwarp_not_in_mask, syncwarp_sample)
    with pytest.raises(SimulatedFault, match=r"illegal instruction: cta=0 warp=0 lane=16 .*outside its mask "
                                                r"0x0000ffff.*WARPSYNC"):
        segments.get_function("outside")((1,), (32,), (fc.asarray(np.arange(32, dtype=np.uint32)),
                                                       fc.zeros(32, np.uint32)))


def test_lanes_of_one_mask_at_two_collective_sites_are_refused():
    pr = F.probe("probe_coll_cross")
    case = sp.make_case(pr, 11, n=64)
    case.inputs[0][:16] = np.arange(16, dtype=np.uint32) | 0x300  # odd and even lanes: both sides of the branch
    with pytest.raises(NotImplementedError, match="different collective sites"):
        F.run_interp(case, "nvrtc13")
    case.inputs[0][:] &= ~np.uint32(1)  # every lane on one side: one site, the PTX ISA's result
    got = F.run_interp(case, "nvrtc13")[0].reshape(-1, 2)
    x = case.inputs[0][:16].astype(np.uint64)
    assert (got[:16, 0] == (~x[(x >> 8) & 15]).astype(np.uint32)).all()
    assert (got[:16, 1] == np.uint32((3 * x).sum() & 0xFFFFFFFF)).all()


ATOMICS = r"""
// per block: a float histogram in shared memory, and the old values the lanes got back
extern "C" __global__ void fbins(const float* x, const unsigned* bin, float* fout, float* fold, int n) {
    __shared__ float F[8];
    const int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    if (t < 8) F[t] = 0.f;
    __syncthreads();
    if (i < n) fold[i] = atomicAdd(&F[bin[i] & 7u], x[i]);
    __syncthreads();
    if (t < 8) fout[8 * blockIdx.x + t] = F[t];
}
// per block: 64-bit bins (sum, max, min, or, xor, and, exchange, a double sum) in shared memory, from the first
// `lanes` lanes of each warp
extern "C" __global__ void bins(const unsigned long long* u, const double* d, const unsigned* bin,
                                unsigned long long* uout, double* dout, unsigned long long* uold, int n, int lanes) {
    __shared__ unsigned long long U[8][7];
    __shared__ double D[8];
    const int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    if (t < 8) {
        D[t] = 0.0;
        for (int j = 0; j < 7; j++) U[t][j] = j == 2 ? ~0ull >> 1 : j == 5 ? ~0ull : 0ull;
    }
    __syncthreads();
    if (i < n && (t & 31) < lanes) {
        const unsigned b = bin[i] & 7u;
        const unsigned long long v = u[i];
        uold[2 * i] = atomicAdd(&U[b][0], v);
        atomicMax(&U[b][1], v);
        atomicMin((long long*)&U[b][2], (long long)v);
        atomicOr(&U[b][3], v);
        atomicXor(&U[b][4], v);
        atomicAnd(&U[b][5], v | 1ull);
        uold[2 * i + 1] = atomicExch(&U[b][6], v);
        atomicAdd(&D[b], d[i]);
    }
    __syncthreads();
    if (t < 8) {
        dout[8 * blockIdx.x + t] = D[t];
        for (int j = 0; j < 7; j++) uout[56 * blockIdx.x + 7 * t + j] = U[t][j];
    }
}
"""


@pytest.fixture(scope="module")
def atomics():
    return fc.RawModule(code=ATOMICS, name="atomics.cu")


def _chain(olds, vals, start, add):
    """Each old value is the one before it plus that one's value, in some order: the lanes took the word one
    at a time (what a correct GPU's atomics give, whatever its order)."""
    waiting: dict = {}
    for k, o in enumerate(olds):
        waiting.setdefault(o, []).append(k)
    cur = start
    for _ in olds:
        here = waiting.get(cur)
        if not here:
            return False
        still = [k for k in here if add(cur, vals[k]) == cur]  # (a lane adding nothing goes first)
        k = still[0] if still else here[0]
        here.remove(k)
        cur = add(cur, vals[k])
    return True


@pytest.mark.parametrize("n", [512, 300, 77])
def test_float_and_64_bit_shared_atomics(atomics, n):
    rng = np.random.default_rng(n)
    grid, block = 4, 128
    x = rng.integers(1, 64, grid * block).astype(np.float32) * np.float32(0.25)  # exact sums in any order
    u = sp.DRAWS["u64"](rng, grid * block)
    d = rng.integers(-1000, 1000, grid * block).astype(np.float64)
    bins = rng.integers(0, 8, grid * block).astype(np.uint32)
    bins[:64] = 3  # two warps of one block all on one bin
    fout, fold = fc.zeros(8 * grid, np.float32), fc.zeros(grid * block, np.float32)
    f = atomics.get_function("fbins")
    f((grid,), (block,), (fc.asarray(x), fc.asarray(bins), fout, fold, np.int32(n)))
    fout, fold = fout.get(), fold.get()
    # the 64-bit bins from 8 lanes a warp, each on a bin of its own: lanes of different warps meet on a word
    wbins = (np.arange(grid * block) % 32 % 8).astype(np.uint32)
    outs = [fc.zeros(56 * grid, np.uint64), fc.zeros(8 * grid, np.float64), fc.zeros(2 * grid * block, np.uint64)]
    g = atomics.get_function("bins")
    g((grid,), (block,), (*(fc.asarray(v) for v in (u, d, wbins)), *outs, np.int32(n), np.int32(8)))
    uout, dout, uold = (o.get() for o in outs)
    uout = uout.reshape(grid, 8, 7)
    uold = uold.reshape(-1, 2)
    M = (1 << 64) - 1
    for b in range(grid):
        for k in range(8):
            els = [i for i in range(b * block, min(n, (b + 1) * block)) if bins[i] == k]
            assert fout[8 * b + k] == np.float32(sum(float(x[i]) for i in els))
            assert _chain([float(fold[i]) for i in els], [float(x[i]) for i in els], 0.0, lambda p, q: p + q)
            els = [i for i in range(b * block, min(n, (b + 1) * block)) if wbins[i] == k and i % 32 < 8]
            assert dout[8 * b + k] == sum(float(d[i]) for i in els)
            vs = [int(u[i]) for i in els]
            s64 = [v - (1 << 64) if v >> 63 else v for v in vs]
            o, x_, a = 0, 0, M
            for v in vs:
                o |= v
                x_ ^= v
                a &= v | 1
            want = [sum(vs) & M, max(vs + [0]), min(s64 + [(1 << 63) - 1]) & M, o, x_, a]
            assert [int(v) for v in uout[b, k, :6]] == want, (b, k)
            assert _chain([int(uold[i, 0]) for i in els], vs, 0, lambda p, q: (p + q) & M)
            # the exchanges: each lane got the value of the lane before it (the first the initial 0), and the
            # word keeps the last one's
            olds = Counter(int(uold[i, 1]) for i in els) + Counter([int(uout[b, k, 6])])
            assert olds == Counter([0] + vs)
    assert f._prog().executed_forms().get("ATOMS.CAST.SPIN")
    names = g._prog().executed_forms()
    assert names.get("ATOMS.CAST.SPIN.64") and names.get("ATOMS.EXCH.64")


def test_lanes_of_a_warp_contending_for_a_64_bit_word_are_refused(atomics):
    # the H200 takes them in an order that is not lane order (probe_atoms_cast): refused, naming the lane
    n = 64
    args = (fc.asarray(np.arange(n, dtype=np.uint64)), fc.zeros(n, np.float64), fc.asarray(np.full(n, 5, np.uint32)),
            fc.zeros(56, np.uint64), fc.zeros(8, np.float64), fc.zeros(2 * n, np.uint64), np.int32(n), np.int32(2))
    with pytest.raises(NotImplementedError, match=r"cta=0 warp=0 lane=0 and another lane of its warp contend for one "
                                                  r"64-bit word in ATOMS.CAST.SPIN.64: .*pc=0x"):
        atomics.get_function("bins")((1,), (n,), args)


def test_the_lanes_of_one_execution_take_a_word_in_lane_order(atomics):
    """Lanes of a warp on one 32-bit word (ATOMS.CAST.SPIN, a float add): one after another from the lowest lane,
    so a float sum is added up in lane order (probe_atoms_cast's 32-bit outputs, equal on the H200)."""
    block = 32
    x = np.array([2.0 ** 24, 1.0, -(2.0 ** 24), 1.0] * 8, np.float32)  # the order changes the rounding
    fout, fold = fc.zeros(8, np.float32), fc.zeros(block, np.float32)
    atomics.get_function("fbins")((1,), (block,), (fc.asarray(x), fc.zeros(block, np.uint32), fout, fold,
                                                   np.int32(block)))
    s, olds = np.float32(0), []
    for v in x:
        olds.append(s)
        s = np.float32(s + v)
    assert fout.get()[0] == s and list(fold.get()) == olds