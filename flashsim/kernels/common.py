"""Pieces the f32-accumulating twins (kernel1, fa2) share: the quad layout of an mma accumulator row, the
16-bit conversions, the infinities' bit patterns and the CTA-batch driver that streams a grid through a
twin (:class:`CtaJob`: a batch's results are computed by a module-level function and written by the caller,
so a batch runs on a thread of this process or on a worker of a Dask cluster, :mod:`flashsim.cluster`, with
the same bits). Their f32 arithmetic is :mod:`flashsim.numerics.cfloat`.

Accumulator rows and quads: in an m16n8k16 f32 accumulator the four lanes of a quad hold one row, each
its columns in register order (``flashsim.warp.fragments.quad_columns``, from the PTX ISA's C table). A row
of N values is therefore seen as (4, N / 4): ``quad_split`` puts each lane's values in its register order
and ``quad_merge`` undoes it.
"""

from __future__ import annotations

import functools
import os
import threading
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from flashsim.errors import bad_argument
from flashsim.numerics import cvt
from flashsim.warp.fragments import quad_columns

NEG_INF = np.uint32(0xFF800000)
POS_INF = np.uint32(0x7F800000)

#: the cvt that turns an f32 accumulator into the kernel's 16-bit element type
_NARROW = {"float16": "cvt.rn.f16.f32", "bfloat16": "cvt.rn.bf16.f32"}
_WIDEN = {"float16": "cvt.f32.f16", "bfloat16": "cvt.f32.bf16"}
MMA_TYPE = {"float16": "f16", "bfloat16": "bf16"}


def quad_split(x: np.ndarray) -> np.ndarray:
    """(..., N) accumulator row -> (..., 4, N // 4): lane t's values in its register order (``quad_columns``)."""
    n = x.shape[-1]
    if n % 8:
        raise bad_argument("x", x.shape, "an accumulator row has a multiple of 8 columns")
    return np.take(x, quad_columns(n), axis=-1)


def quad_merge(x: np.ndarray) -> np.ndarray:
    """Inverse of ``quad_split``: (..., 4, N // 4) -> (..., N)."""
    return np.take(x.reshape(*x.shape[:-2], -1), _quad_positions(4 * x.shape[-1]), axis=-1)


@functools.lru_cache(maxsize=None)
def _quad_positions(n: int) -> np.ndarray:
    """Where column c of an accumulator row lies in its ``quad_split`` form (flattened)."""
    pos = np.empty(n, np.int64)
    pos[quad_columns(n).reshape(-1)] = np.arange(n)
    return pos


XOR = {m: np.arange(4) ^ m for m in (1, 2)}  # __shfl_xor_sync partners within a quad


def narrow(x32: np.ndarray, dtype: str) -> np.ndarray:
    """f32 -> the kernel's 16-bit type, round to nearest even (cvt.rn.{f16,bf16}x2.f32 per half)."""
    return cvt.cvt(_NARROW[dtype], x32)


def widen(x16: np.ndarray, dtype: str) -> np.ndarray:
    return cvt.cvt(_WIDEN[dtype], x16)


def default_threads() -> int:
    """Threads for the CTA batches run in this process: the machine's cores (``FLASHSIM_THREADS`` overrides)."""
    env = os.environ.get("FLASHSIM_THREADS")
    if env:
        try:
            n = int(env)
        except ValueError:
            raise bad_argument("FLASHSIM_THREADS", env, "expected a positive integer") from None
        if n < 1:
            raise bad_argument("FLASHSIM_THREADS", env, "expected a positive integer")
        return n
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))


class Cancelled(Exception):
    """Raised inside a batch of CTAs when the run it belongs to was cancelled (Ctrl-C)."""


class StepHook:
    """The twins call it before each KV step of a batch of CTAs, as ``hook(idx, step, steps)``: it records how
    far the batch is (so that progress moves within a batch of long CTAs) and raises :class:`Cancelled` once
    the run was cancelled, so that a batch in flight stops at its next step. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._partial: dict[int, float] = {}
        self._stop = threading.Event()
        self.listener: Callable[[], None] | None = None  # called after each step (the serial driver's report)

    def __call__(self, idx: np.ndarray, step: int, steps: int) -> None:
        if self._stop.is_set():
            raise Cancelled
        if steps and len(idx):
            with self._lock:
                self._partial[int(idx[0])] = len(idx) * step / steps
        if self.listener is not None:
            self.listener()

    def finish(self, idx: np.ndarray) -> None:
        with self._lock:
            self._partial.pop(int(idx[0]), None)

    def partial(self) -> float:
        """CTAs done within the batches in flight (fractions of each batch)."""
        with self._lock:
            return float(sum(self._partial.values()))

    def cancel(self) -> None:
        self._stop.set()

    @property
    def cancelled(self) -> bool:
        return self._stop.is_set()


#: seconds the driver waits, after a cancellation, for the batches in flight to stop at their next step
STOP_WAIT = 5.0


def run_batches(fn: Callable[[np.ndarray], None], ctas: Sequence[int] | np.ndarray, batch: int,
                threads: int | None = None, progress: Callable[[float, int], None] | None = None,
                hook: StepHook | None = None) -> None:
    """Call ``fn(cta_indices)`` on consecutive batches of ``ctas``, ``threads`` batches at a time, in this process.

    ``fn`` writes its results itself (into disjoint parts of the outputs), so memory stays at about
    ``threads`` batches whatever the grid. The numeric kernels release the GIL, so threads share the cores.
    ``progress(done, total)`` (CTAs) is called after each batch, and, with a ``hook`` that ``fn`` calls at
    each KV step, also while batches run (``done`` then counts the finished part of each batch).

    An exception in a batch or in the calling thread (Ctrl-C, or one raised by ``progress``) cancels the
    batches not started (``shutdown(cancel_futures=True)``), stops those in flight at their next step (through
    ``hook``) and is raised again.
    """
    ctas = np.asarray(ctas)
    if not isinstance(batch, (int, np.integer)) or batch < 1:
        raise bad_argument("batch", batch, "expected a positive number of CTAs per batch")
    threads = default_threads() if threads is None else threads
    batch = max(1, min(batch, -(-ctas.size // max(threads, 1))))  # at least one batch per thread
    chunks = [ctas[i:i + batch] for i in range(0, ctas.size, batch)]
    total = int(ctas.size)
    done = 0

    def report() -> None:
        if progress is not None:
            progress(done + (hook.partial() if hook is not None else 0.0), total)

    if threads <= 1 or len(chunks) <= 1:
        if hook is not None:
            hook.listener = report
        try:
            for c in chunks:
                fn(c)
                if hook is not None:
                    hook.finish(c)
                done += c.size
                report()
        finally:
            if hook is not None:
                hook.listener = None
        return
    pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="flashsim-cta")
    futures = {pool.submit(fn, c): c for c in chunks}
    pending = set(futures)
    try:
        while pending:
            finished, pending = wait(pending, timeout=0.25, return_when=FIRST_COMPLETED)
            for f in finished:
                f.result()
                c = futures[f]
                if hook is not None:
                    hook.finish(c)
                done += c.size
            report()
    except BaseException:
        if hook is not None:
            hook.cancel()
        pool.shutdown(wait=False, cancel_futures=True)
        wait([f for f in futures if not f.cancelled()], timeout=STOP_WAIT)  # in flight: stop at their next KV step
        raise
    pool.shutdown(wait=True)


@dataclass(frozen=True)
class CtaJob:
    """A twin's grid of CTAs, cut into batches that can run anywhere.

    ``compute(params, inputs, idx, hook)`` runs the CTAs ``idx`` and returns their results; it is a module-level
    function of small picklable ``params`` (the problem) and ``inputs`` (name -> array, sent to each worker
    once), so a worker process of a cluster can run it. ``hook`` is a :class:`StepHook` or its cluster
    counterpart (progress at each KV step, cancellation). ``write(idx, result)`` stores a batch's results
    into the outputs, in the calling process. ``local_only``: why the job must run in this process (a
    trace recorder sees the CTAs in order), or None.
    """

    compute: Callable[[Any, dict, np.ndarray, Any], Any]
    params: Any
    inputs: dict
    write: Callable[[np.ndarray, Any], None]
    ctas: int
    batch: int = 64
    local_only: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.batch, (int, np.integer)) or isinstance(self.batch, bool) or self.batch < 1:
            raise bad_argument("batch", self.batch, "expected a positive number of CTAs per batch")


def run_job(job: CtaJob, *, threads: int | None = None, progress: Callable[[float, int], None] | None = None,
            cluster=None) -> None:
    """Run every CTA of ``job``: on the workers of ``cluster`` (a :class:`flashsim.cluster.Cluster`), else on the
    one of an enclosing ``with Cluster(...)``, else in this process on ``threads`` threads. Either way each
    batch is computed by ``job.compute`` and written by ``job.write``, so both give the same bits."""
    from flashsim import cluster as _cluster

    cl = cluster if cluster is not None else _cluster.current()
    if cl is not None and job.local_only is not None:
        cl.note(f"this twin runs in this process: {job.local_only}")
        cl = None
    if cl is not None:
        cl.run_job(job, progress=progress)
        return
    hook = StepHook()
    run_batches(lambda idx: job.write(idx, job.compute(job.params, job.inputs, idx, hook)), np.arange(job.ctas),
                job.batch, 1 if job.local_only is not None else threads, progress, hook=hook)
