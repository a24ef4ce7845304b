"""An interpreted launch's batches of CTAs as tasks on a Dask cluster (:mod:`flashsim.cluster`), with the bits,
counts and diagnostics of the launch run in one process.

A task runs one batch: the same ``ExecOptions.ctas_per_batch`` CTAs one process runs together, so the
warp schedule within the batch, SR_CLOCKLO and every count are those of the one-process run. It runs on
the snapshot of global memory taken when the launch starts, sent to every worker once, through a
:class:`flashsim.sass.gmem.TaskMemory` that records the bytes the batch read and wrote; it returns the
writes, the reads, its instruction counts, its diagnostics and its fault, if any.

This process takes the batches in grid order, as one process runs them. Before applying batch i's writes
it checks that batch i read nothing that batches 0..i-1 wrote: if it did, batch i saw the snapshot where
one process would have shown it those writes (the kernel's CTAs communicate through global memory), so
batch i and the ones after it run here, in order, and the launch says so. Two batches writing the same
byte need nothing: the later one's bytes are applied last, as in one process. A fault in batch i is
raised once batches 0..i-1 and the part of batch i before the fault are applied: the memory, like the
report, is then what one process leaves.

What runs in this process, with a note saying why (``flashsim.cluster.Cluster.note``):

- kernels whose SASS has global atomics (ATOMG, REDG, or a generic ATOM/RED, which may reach global memory):
  their CTAs may communicate through global memory, in an order no snapshot captures;
- launches inside ``checking(trace=...)`` (the tracer sees machine states as they happen) or with
  ``Report.watch_global`` set (who wrote which output element);
- a launch of one batch (nothing to spread; silently).

Banks, races, uninitialised reads (shared and global) and synccheck findings are collected in the workers and
merged here batch by batch, in the order one process collects them (``_LaunchProbe.absorb``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np

from flashsim.cluster import _portable
from flashsim.errors import FlashsimError
from flashsim.sass import checking
from flashsim.sass.gmem import TaskMemory, range_index
from flashsim.sass.machine import Machine

__all__ = ["BatchResult", "local_reason", "run_batch", "run_on"]

#: opcodes that may update global memory atomically (a generic ATOM/RED reaches global memory unless its
#: address lies in the shared window)
GLOBAL_ATOMICS = ("ATOMG", "REDG", "ATOM", "RED")


def local_reason(launch) -> str | None:
    """Why ``launch`` must run in this process, or None."""
    for pc in sorted(launch.program.instructions):
        ins = launch.program.instructions[pc]
        if ins.opcode in GLOBAL_ATOMICS:
            return (f"its SASS has global atomics ({ins.where()}), so its CTAs may communicate through global "
                    "memory")
    probe = launch.probe
    if probe is not None and probe.report.tracer is not None:
        return "checking(trace=...) records machine states as they happen, in this process"
    if probe is not None and probe.report.watch_global is not None:
        return "recording which stores wrote global memory (watch_global) is done in this process"
    return None


@dataclass
class BatchResult:
    """What one batch run in a worker sends back."""

    writes: list  # TaskMemory.write_log()
    reads: list  # TaskMemory.read_log()
    hits: np.ndarray  # Program.hits added by the batch
    warp_hits: np.ndarray
    steps: int
    warp_steps: int
    report: object = None  # the flashsim.sass.checking.Report the batch filled (inside checking)
    fault: BaseException | None = None  # what stopped it (a SimulatedFault, BarrierDeadlock, ...)


def run_batch(spec, snapshot, idx: np.ndarray, hook=None) -> BatchResult:
    """Run the CTAs ``idx`` of the launch ``spec`` (``Launch.detached()``) on global memory ``snapshot``."""
    mem = TaskMemory(snapshot)
    launch = copy.copy(spec)
    launch.memory = mem
    report = None
    if spec.worker_checks is not None:
        banks, races, initcheck, max_records, name, timeline, synccheck = spec.worker_checks
        report = checking.Report(banks=banks, races=races, initcheck=initcheck, synccheck=synccheck,
                                 max_records=max_records, timeline=timeline)
        launch.probe = report.begin(launch, name)
    prog = launch.program
    hits, warp_hits = prog.hits.copy(), prog.warp_hits.copy()
    m = Machine(prog, launch, idx)
    if hook is not None:  # a cancelled run stops here too (flashsim.cluster.Cancelled), not at the batch's end
        m.poll = lambda: hook(idx, 0, 0)
    fault = None
    try:
        m.run()
    except (FlashsimError, NotImplementedError) as exc:
        exc.__traceback__ = None
        fault = _portable(exc)
    finally:
        if launch.probe is not None:
            launch.probe.batch(m)
    if report is not None:
        report._programs = {}  # the launching process has the program
    return BatchResult(mem.write_log(), mem.read_log(), prog.hits - hits, prog.warp_hits - warp_hits, m.steps,
                       m.warp_steps, report, fault)


class _Communicates(FlashsimError):
    """Batch ``batch`` read global memory an earlier batch wrote (internal: the launch runs the rest itself)."""

    def __init__(self, batch: int, why: str):
        super().__init__(why)
        self.batch, self.why = batch, why


class _Merge:
    """The launching process's side: takes the batches' results in grid order."""

    def __init__(self, launch, batches):
        self.launch, self.batches = launch, batches
        self.written: dict[int, np.ndarray] = {}  # allocation -> per byte: written by a batch applied so far
        self.steps = self.warp_steps = 0

    def conflict(self, reads) -> str | None:
        mem = self.launch.memory
        for i, starts, ends in reads:
            w = self.written.get(int(i))
            if w is None:
                continue
            cuts = np.column_stack([starts, ends]).reshape(-1)
            hit = np.logical_or.reduceat(w, cuts)[0::2]
            if hit.any():
                k = int(np.argmax(hit))
                first = int(starts[k]) + int(np.argmax(w[starts[k]:ends[k]]))
                return f"addr={mem.start(int(i)) + first:#x} ({mem.describe(mem.start(int(i)) + first)})"
        return None

    def take(self, i: int, res: BatchResult) -> None:
        where = self.conflict(res.reads)
        if where is not None:
            raise _Communicates(i, where)
        mem, prog = self.launch.memory, self.launch.program
        mem.apply_writes(res.writes)
        for a, starts, ends, _ in res.writes:
            w = self.written.get(int(a))
            if w is None:
                # one extra byte: reduceat's cut at an allocation's end
                w = self.written[int(a)] = np.zeros(mem.word_view(int(a), np.uint8).size + 1, bool)
            w[range_index(starts, ends)] = True
        prog.hits += res.hits
        prog.warp_hits += res.warp_hits
        self.steps += res.steps
        self.warp_steps += res.warp_steps
        if self.launch.probe is not None and res.report is not None:
            self.launch.probe.absorb(res.report)
        if res.fault is not None:
            raise res.fault


def run_on(cluster, launch, batches: list[np.ndarray]) -> tuple[int, int, int]:
    """Run ``batches`` of ``launch`` on ``cluster``; returns (the first batch left to run in this process,
    scheduling steps, warp-instructions of the batches run there)."""
    merge = _Merge(launch, batches)
    try:
        cluster.map(run_batch, launch.detached(), launch.memory, batches, merge.take,
                    progress=launch.options.progress, ordered=True)
    except _Communicates as c:
        ids = batches[c.batch]
        cluster.note(f"CTAs {int(ids[0])}-{int(ids[-1])} read global memory that an earlier batch of CTAs wrote "
                     f"({c.why}): the kernel's CTAs communicate through global memory, so they and the CTAs after "
                     "them run in this process, in order")
        return c.batch, merge.steps, merge.warp_steps
    return len(batches), merge.steps, merge.warp_steps
