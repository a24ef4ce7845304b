"""Runs spread over a Dask cluster (flashsim.cluster): twins and interpreted launches on a local cluster of 2
worker processes give the bits, counts and reports of the one-process run; a killed worker loses no CTA;
Ctrl-C cancels; a fault in a worker is raised here as the same fault."""

from __future__ import annotations

import os
import signal
import time
import traceback

import numpy as np
import pytest

pytest.importorskip("distributed")

import flashsim.cuda as fc  # noqa: E402
from flashsim.cluster import Cluster, ClusterError, DaskNotInstalled  # noqa: E402
from flashsim.errors import SimulatedFault  # noqa: E402
from flashsim.kernels import fa2, kernel1, problems  # noqa: E402
from flashsim.kernels.common import CtaJob, run_job  # noqa: E402


@pytest.fixture(scope="module")
def cluster():
    import dask

    notes = []
    # one retry for a task whose worker died (the default is 3): the test of a batch that kills every worker
    # that runs it then needs two deaths, not four
    with dask.config.set({"distributed.scheduler.allowed-failures": 1}):
        cl = Cluster(workers=2, notify=notes.append).start()
    cl.notes = notes
    yield cl
    cl.close()


def _workers_back(cl, n=2):
    cl.client.wait_for_workers(n, timeout=60)


def _same(a, b):
    return np.array_equal(np.asarray(a).view(np.uint8), np.asarray(b).view(np.uint8))


# ----------------------------------------------------------------------------------------------------
# twins
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [3, 11, 12, 21])
def test_fa2_twin_is_bit_identical_on_the_cluster(cluster, seed):
    case = problems.random_case(np.random.default_rng(seed), "fa2")
    here = fa2.run(case.q, case.k, case.v, threads=1, **case.kwargs)
    seen = []
    with cluster.active():
        there = fa2.run(case.q, case.k, case.v, progress=lambda d, t: seen.append((d, t)), **case.kwargs)
    assert _same(here[0], there[0]) and _same(here[1], there[1]), case.describe()
    assert seen and seen[-1][0] == seen[-1][1]  # progress ends at the total


def test_kernel1_twin_through_a_client(cluster):
    case = problems.random_case(np.random.default_rng(5), "kernel1")
    here = kernel1.run(case.q, case.k, case.v, case.kwargs["softmax_scale"], threads=1)
    there = kernel1.run(case.q, case.k, case.v, case.kwargs["softmax_scale"], client=cluster.client)
    assert _same(here, there)
    assert cluster.client.status == "running"  # a given client is left open


# a compute function the workers import from this module: fa2's batch, slowed down so that batches are in
# flight when the test acts, calling the hook at every step as the twins do
def slow_fa2(params, inputs, idx, hook):
    pb, pause = params
    for step in range(16):
        hook(idx, step, 16)
        time.sleep(pause / 16)
    return fa2.cta_batch(pb, inputs, idx, hook)


def _fa2_job(case, pause, batch=2):
    args = fa2.check(case.q, case.k, case.v, **case.kwargs)
    pb = fa2.problem_from_args(args)
    q, k, v = fa2.pad_inputs(args, case.q, case.k, case.v)
    o = np.zeros(q.shape, np.uint16)
    lse = np.zeros((pb.batch, pb.heads, pb.seqlen_q), np.uint32)
    writes = np.zeros(pb.m_blocks * pb.heads * pb.batch, np.int64)

    def write(idx, res):
        writes[idx] += 1
        fa2._store(pb, o, lse, idx, res)
    job = CtaJob(slow_fa2, (pb, pause), {"q": q, "k": k, "v": v}, write, writes.size, batch)
    return job, o, lse, writes


def test_a_killed_worker_loses_no_cta(cluster):
    case = problems.make_case(dict(problems.draw_params(problems.rng_pick(np.random.default_rng(1)), "fa2"),
                                   batch=2, heads=2, heads_k=1, seqlen_q=300, seqlen_k=100, headdim=64))
    ref = fa2.run(case.q, case.k, case.v, threads=1, **case.kwargs)
    job, o, lse, writes = _fa2_job(case, pause=0.4)
    client = cluster.client
    killed = []

    def progress(done, total):
        if not killed:
            busy = [w for w, keys in client.processing().items() if keys]
            if busy:  # a worker in the middle of a batch: its process dies at once
                pid = client.run(os.getpid, workers=[busy[0]])[busy[0]]
                killed.append(pid)
                os.kill(pid, signal.SIGKILL)

    run_job(job, cluster=cluster, progress=progress)
    assert killed
    assert (writes == 1).all()  # every CTA written once
    out = np.ascontiguousarray(o[..., :case.q.shape[-1]]).view(case.q.dtype)
    assert _same(out, ref[0]) and _same(lse.view(np.float32), ref[1])
    _workers_back(cluster)


def test_ctrl_c_cancels_the_tasks(cluster):
    _workers_back(cluster)
    case = problems.make_case(dict(problems.draw_params(problems.rng_pick(np.random.default_rng(2)), "fa2"),
                                   batch=2, heads=2, heads_k=2, seqlen_q=128 * 8, seqlen_k=64, headdim=32))
    job, _, _, writes = _fa2_job(case, pause=8.0, batch=4)
    client = cluster.client
    calls = []

    def progress(done, total):
        calls.append(done)
        if len(calls) == 30:  # 3 s in: both workers are inside a batch of 8 s
            raise KeyboardInterrupt
    t0 = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        run_job(job, cluster=cluster, progress=progress)
    assert writes.sum() == 0
    # the batches in flight stop at their next step (within REPORT_EVERY), not after their 8 s
    deadline = time.perf_counter() + 4.0
    while any(client.processing().values()) and time.perf_counter() < deadline:
        time.sleep(0.1)
    assert not any(client.processing().values())
    assert time.perf_counter() - t0 < 7.5
    assert 0 < max(calls) < writes.size  # progress moved within the batches before Ctrl-C


def raise_fault(params, inputs, idx, hook):
    if 5 in idx:
        raise SimulatedFault("out-of-bounds global address", cta=5, warp=1, lane=7, addr=0x1234, detail="test")
    return idx


def test_a_fault_in_a_worker_is_the_same_error(cluster):
    job = CtaJob(raise_fault, None, {}, lambda idx, res: None, 16, 2)
    with pytest.raises(SimulatedFault) as info:
        run_job(job, cluster=cluster)
    exc = info.value
    assert str(exc) == "out-of-bounds global address: cta=5 warp=1 lane=7 addr=0x1234 (test)"
    assert (exc.cta, exc.warp, exc.lane, exc.addr) == (5, 1, 7, 0x1234)
    text = "".join(traceback.format_exception(exc))
    assert "distributed" not in text and "raise_fault" not in text  # no remote traceback


def exit_on_batch(params, inputs, idx, hook):
    if 3 in idx:
        os._exit(1)  # the worker dies every time it runs these CTAs
    return idx


def test_a_batch_whose_workers_keep_dying_is_named(cluster):
    _workers_back(cluster)
    job = CtaJob(exit_on_batch, None, {}, lambda idx, res: None, 16, 2)
    with pytest.raises(ClusterError, match=r"CTAs 2-3 \(batch 2 of 8\) failed: every worker that ran them died"):
        run_job(job, cluster=cluster)
    _workers_back(cluster)


def exit_once(params, inputs, idx, hook):
    # batches 1 and 5 each kill the first worker that runs them: with 2 workers, both die (and the restarted
    # ones hold no copy of the inputs)
    marker = os.path.join(params, f"died-{int(idx[0])}")
    if int(idx[0]) in (2, 10) and not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(1)
    return inputs["x"][idx] * 3


def _allowed_failures(cl, n: int) -> None:
    def set_it(dask_scheduler, n=n):
        dask_scheduler.allowed_failures = n
    cl.client.run_on_scheduler(set_it)


def test_every_worker_dying_once_loses_nothing(cluster, tmp_path):
    _workers_back(cluster)
    x = np.arange(16, dtype=np.int64) + 100
    out = np.zeros(16, np.int64)
    cluster.notes.clear()

    def write(idx, res):
        out[idx] += res
    # a worker's death counts against every task it held, queued ones too: the batch that kills the second
    # worker may already count one failure from the first death, so this test allows Dask's default 3
    _allowed_failures(cluster, 3)
    try:
        run_job(CtaJob(exit_once, str(tmp_path), {"x": x}, write, 16, 2), cluster=cluster)
    finally:
        _allowed_failures(cluster, 1)
    assert (out == 3 * x).all() and (tmp_path / "died-2").exists() and (tmp_path / "died-10").exists()
    _workers_back(cluster)


def test_v5_says_it_runs_here(cluster):
    from flashsim.kernels import run_twin

    case = problems.random_case(np.random.default_rng(4), "v5")
    cluster.notes.clear()
    with cluster.active():
        out, _ = run_twin("v5", case.q, case.k, case.v, case.kwargs["softmax_scale"])
    assert _same(out, run_twin("v5", case.q, case.k, case.v, case.kwargs["softmax_scale"])[0])
    assert cluster.notes and "the v5 twin runs in this process" in cluster.notes[0]


def test_missing_dask_names_the_extra(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "distributed", None)
    with pytest.raises(DaskNotInstalled, match=r'pip install "flashsim\[dask\]"'):
        Cluster(workers=2).start()
    with pytest.raises(DaskNotInstalled):
        fa2.run(*(np.zeros((1, 4, 1, 8), np.float16),) * 3, workers=2)


def test_cluster_arguments_are_checked():
    from flashsim.errors import ArgumentError

    with pytest.raises(ArgumentError, match="give exactly one"):
        Cluster(workers=2, scheduler="tcp://x:1")
    with pytest.raises(ArgumentError, match="workers=0"):
        Cluster(workers=0)


# ----------------------------------------------------------------------------------------------------
# interpreted launches
# ----------------------------------------------------------------------------------------------------

SRC = r"""
extern "C" __global__ void row_sums(const float* in, float* out, float scale) {
    __shared__ float tile[32][32];
    __shared__ float sums[32];
    const float* src = in + blockIdx.x * 1024;
    int t = threadIdx.x;
    for (int i = t; i < 1024; i += 64) tile[i / 32][i % 32] = src[i];
    __syncthreads();
    if (t < 32) { float s = 0.0f; for (int c = 0; c < 32; ++c) s += tile[t][c]; sums[t] = s; }
    if (t >= 32) out[blockIdx.x * 32 + (t - 32)] = scale * sums[t - 32];
}
extern "C" __global__ void faulty(float* x) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    x[i] = (float)i;
    if (blockIdx.x == 9 && threadIdx.x == 3) x[i + 100000] = 1.f;
}
extern "C" __global__ void chain(float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (blockIdx.x > 0) y[i] = y[i - blockDim.x] + 1.f;
}
extern "C" __global__ void count(int* c) { atomicAdd(c, 1); }
extern "C" __global__ void spin(volatile int* x) { while (x[0] == 0) { } }
"""


@pytest.fixture(scope="module")
def module():
    return fc.RawModule(code=SRC, name="spread.cu")


def _row_sums(module, opts):
    k = module.get_function("row_sums")
    x = fc.asarray(np.random.default_rng(0).standard_normal((24, 32, 32)).astype(np.float32))
    out = fc.empty((24 * 32,), np.float32)
    with fc.checking(banks=True, races=True, initcheck=True) as rep:
        stats = k((24,), (64,), (x, out, np.float32(0.5)), exec_options=opts)
    return out.get(), stats, rep


def test_interpreted_launch_is_identical_with_its_report(cluster, module):
    opts = dict(ctas_per_batch=4, schedule_seed=7)
    here = _row_sums(module, fc.ExecOptions(**opts))
    seen = []
    there = _row_sums(module, fc.ExecOptions(**opts, cluster=cluster, progress=lambda d, t: seen.append((d, t))))
    assert _same(here[0], there[0]) and here[1] == there[1]
    a, b = here[2].to_dict(), there[2].to_dict()
    assert a == b and b["race_count"] and b["uninit_count"] and b["bank_totals"]  # races, uninit reads, banks
    assert seen[-1] == (24, 24)


def test_a_fault_in_a_batch_leaves_what_one_process_leaves(cluster, module):
    k = module.get_function("faulty")
    results = []
    x = fc.zeros((16 * 32,), np.float32)
    for cl in (None, cluster):
        x.fill(0)
        with pytest.raises(SimulatedFault) as info:
            k((16,), (32,), (x,), exec_options=fc.ExecOptions(ctas_per_batch=2, cluster=cl))
        results.append((str(info.value), x.get()))
    assert results[0][0] == results[1][0] and "cta=9 warp=0 lane=3" in results[0][0]
    assert _same(results[0][1], results[1][1])  # the batches before the fault, and the faulting one's stores


def test_ctas_that_communicate_finish_here_and_say_so(cluster, module):
    k = module.get_function("chain")
    outs = []
    cluster.notes.clear()
    for cl in (None, cluster):
        y = fc.zeros((12 * 32,), np.float32)
        k((12,), (32,), (y,), exec_options=fc.ExecOptions(ctas_per_batch=3, cluster=cl))
        outs.append(y.get())
    assert _same(outs[0], outs[1])
    assert len(cluster.notes) == 1
    assert "CTAs 3-5 read global memory that an earlier batch of CTAs wrote" in cluster.notes[0]


def test_global_atomics_keep_a_launch_here(cluster, module):
    k = module.get_function("count")
    c = fc.zeros((1,), np.int32)
    cluster.notes.clear()
    k((10,), (32,), (c,), exec_options=fc.ExecOptions(ctas_per_batch=2, cluster=cluster))
    assert int(c.get()[0]) == 320
    assert "kernel 'count' runs in this process: its SASS has global atomics" in cluster.notes[0]


def test_flashsim_run_on_a_running_cluster(cluster, tmp_path, capsys):
    from pathlib import Path

    from flashsim.cli import main

    example = Path(__file__).resolve().parent / "data" / "run_example.cu"
    argv = ["run", str(example), "--grid", "16", "--block", "64", "--arg", "in=f32[16,32,32]:normal",
            "--arg", "out=f32[512]:zeros", "--arg", "scale=f32:0.5", "--ctas-per-batch", "4"]
    outs = []
    for extra in ([], ["--scheduler", cluster.client.scheduler.address]):
        assert main(argv + extra + ["--json", str(tmp_path / f"{len(extra)}.json")]) == 1  # the planted race
        outs.append(capsys.readouterr().out)
    assert "cluster: batches of 4 CTAs (--ctas-per-batch) on the Dask cluster at tcp://" in outs[1]
    import json

    a, b = (json.loads((tmp_path / f"{n}.json").read_text()) for n in (0, 2))
    for doc in (a, b):  # the time, and the arrays' addresses (two allocations of one process)
        doc["run"].pop("seconds")
        for arg in doc["run"]["args"]:
            arg.pop("addr")
    assert a == b and a["race_count"]
    assert main(argv + ["--workers", "2", "--scheduler", "tcp://127.0.0.1:1"]) == 2
    assert "give --workers (a local cluster) or --scheduler (a running one), not both" in capsys.readouterr().err


def test_ctrl_c_stops_interpreted_batches_in_flight(cluster, module):
    _workers_back(cluster)
    k = module.get_function("spin")
    x = fc.zeros((1,), np.int32)
    calls = []

    def progress(done, total):
        calls.append(done)
        if len(calls) == 10:
            raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        k((4,), (32,), (x,), exec_options=fc.ExecOptions(ctas_per_batch=1, cluster=cluster, progress=progress))
    deadline = time.perf_counter() + 4.0  # each batch spins for ever: only the stop Event ends it
    while any(cluster.client.processing().values()) and time.perf_counter() < deadline:
        time.sleep(0.1)
    assert not any(cluster.client.processing().values())
