"""Where the CTA batches of a run go: threads of this process (the default) or the worker processes of a Dask
cluster (``dask.distributed``), for the twins and for interpreted launches alike.

    from flashsim.cluster import Cluster
    with Cluster(workers=4):                       # a local cluster of 4 worker processes on this machine
        out, lse = run_twin("fa2", q, k, v)        # every run inside the block uses it
        kernel(grid, block, args)                  # flashsim.cuda launches too
    with Cluster(scheduler="tcp://host:8786"):     # an existing cluster (its workers need flashsim installed)
        ...
    Cluster(client=my_client)                      # an existing distributed.Client (left open)

A batch of CTAs is one task. What every batch reads (the twin's inputs, an interpreted launch's program
and global memory) is sent to every worker once, replicated, so a worker that dies takes nothing with it
that the others need. Each task returns its CTAs' results and this process writes them into the outputs,
so the run is bit-identical to the one-process run whatever the number of workers and the order in which
tasks finish (twins: CTAs are independent; interpreted kernels: :mod:`flashsim.sass.spread` checks it).

- Progress: tasks report their KV steps through the scheduler's event log, so ``progress(done, total)``
  (CTAs) moves while batches run; the ETA follows from it (:class:`flashsim.progress.Progress`).
- Ctrl-C (or any exception here): the tasks not started are cancelled, those in flight stop at their next
  KV step (twins) or within 1024 scheduling steps (interpreter): they poll a cluster ``Event``; a local
  cluster started here is shut down.
- A worker that dies: the scheduler runs its tasks again on the others (up to
  ``distributed.scheduler.allowed-failures`` times); if every worker holding the inputs died (a restarted
  worker holds none), they are sent again and the batches they lost run again. Each batch's result is
  written once, whichever run of it came back.
- Errors: a simulated fault (any :class:`FlashsimError`) in a task comes back as a value and is raised here
  as the same exception, with its cta/warp/lane/addr; a batch that cannot be run raises
  :class:`ClusterError` naming its CTAs and why.

Dask is an optional dependency (``pip install "flashsim[dask]"``), imported only when a cluster is used. A
script that starts a local cluster must do it under ``if __name__ == "__main__":`` (Dask starts its worker
processes with multiprocessing's spawn, which imports the script again). Workers of a cluster started
elsewhere should run without Dask's default ``MALLOC_TRIM_THRESHOLD_=65536`` (set
``distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_`` to null): with it, the twins run 3-4x slower.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import contextvars
import logging
import pickle
import threading
import time
import traceback
import uuid
import warnings
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from flashsim.errors import FlashsimError, bad_argument, location

__all__ = ["Cancelled", "Cluster", "ClusterError", "DaskNotInstalled", "current", "note", "require_dask", "using"]

INSTALL = 'pip install "flashsim[dask]"'
#: seconds between two looks at the tasks (and two progress reports) in the calling process
POLL = 0.1
#: seconds between two progress events (and two looks at the stop Event) of a task in a worker
REPORT_EVERY = 0.5
#: seconds to wait for a scheduler to answer, and for the first worker of an existing cluster
CONNECT_TIMEOUT, WORKER_TIMEOUT = 10.0, 60.0
#: times a run sends its inputs again after every worker holding them died
MAX_RESEND = 3

_CURRENT: contextvars.ContextVar["Cluster | None"] = contextvars.ContextVar("flashsim_cluster", default=None)


class Cancelled(Exception):
    """Raised inside a batch of CTAs, by the step hook the batch polls, when the run it belongs to was
    cancelled (Ctrl-C)."""


class ClusterError(FlashsimError):
    """A run on a Dask cluster that could not finish (a batch whose workers kept dying, a lost scheduler, an
    unexpected error in a task): names the CTAs that failed and why."""


class DaskNotInstalled(FlashsimError, ImportError):
    """A cluster was asked for and Dask's distributed scheduler is not installed."""


def require_dask():
    """``dask.distributed``, or :class:`DaskNotInstalled` naming the extra to install."""
    try:
        import distributed
    except ImportError:
        raise DaskNotInstalled("workers and schedulers run on Dask (dask.distributed), which is not installed: "
                               f"{INSTALL} (the extra 'dask')") from None
    return distributed


def current() -> "Cluster | None":
    """The cluster of the innermost ``with Cluster(...)`` block of this thread, or None."""
    return _CURRENT.get()


@contextlib.contextmanager
def using(workers: int | None = None, scheduler: str | None = None, client=None) -> Iterator["Cluster | None"]:
    """The cluster a run uses: one made from ``workers`` / ``scheduler`` / ``client`` for the block (shut down
    after it, a given client left open), else the enclosing one (:func:`current`), else None (this process)."""
    if workers is None and scheduler is None and client is None:
        yield current()
        return
    with Cluster(workers, scheduler=scheduler, client=client) as cl:
        yield cl


def _warn(message: str) -> None:
    warnings.warn(message, stacklevel=3)


def note(message: str) -> None:
    """Tell the user where a run goes: through the enclosing cluster's ``notify``, else ``warnings.warn``."""
    cl = current()
    if cl is not None:
        cl.note(message)
    else:
        _warn(message)


class Cluster:
    """A Dask cluster that runs CTA batches: ``workers=N`` starts a local cluster of N processes (one thread
    each), ``scheduler='tcp://host:port'`` connects to a running one, ``client=`` uses a ``distributed.Client``.

    ``tasks_per_worker``: batches are cut so that each worker gets about that many (no more CTAs per batch
    than a twin's own batch), which evens out the end of a run. ``notify(message)`` is told when a run stays
    in this process and why (default: ``warnings.warn``). Use it as a context manager: inside the block it
    is the default of every twin run and interpreted launch of this thread."""

    def __init__(self, workers: int | None = None, *, scheduler: str | None = None, client=None,
                 tasks_per_worker: int = 4, notify: Callable[[str], None] | None = None):
        given = [n for n, v in (("workers", workers), ("scheduler", scheduler), ("client", client)) if v is not None]
        if len(given) != 1:
            raise bad_argument("workers/scheduler/client", given, "give exactly one: workers=N starts a local "
                                                                  "cluster, scheduler= or client= uses a running one")
        if workers is not None and (not isinstance(workers, (int, np.integer)) or isinstance(workers, bool)
                                    or workers < 1):
            raise bad_argument("workers", workers, "expected a positive number of worker processes")
        if scheduler is not None and (not isinstance(scheduler, str) or not scheduler):
            raise bad_argument("scheduler", scheduler, "expected the scheduler's address, e.g. 'tcp://host:8786'")
        if not isinstance(tasks_per_worker, int) or isinstance(tasks_per_worker, bool) or tasks_per_worker < 1:
            raise bad_argument("tasks_per_worker", tasks_per_worker, "expected a positive int")
        self.workers = None if workers is None else int(workers)
        self.scheduler = scheduler
        self.tasks_per_worker = tasks_per_worker
        self.notify = notify
        self._client = client
        self._own = client is None  # close what we opened, never a caller's client
        self._local = None
        self._tokens: list = []

    # ------------------------------------------------------------------------------------ lifecycle
    def start(self) -> "Cluster":
        """Start the local cluster or connect to the scheduler (done on first use)."""
        if self._client is not None:
            return self
        distributed = require_dask()
        if self.scheduler is not None:
            try:
                self._client = distributed.Client(self.scheduler, set_as_default=False, timeout=CONNECT_TIMEOUT)
            except OSError as exc:
                raise ClusterError(f"no Dask scheduler answers at {self.scheduler!r}: {exc}") from None
        else:
            import dask

            # Dask starts workers with MALLOC_TRIM_THRESHOLD_=65536: glibc then returns freed memory at once
            # and every large numpy temporary of a batch is a fresh mmap and its page faults (the fa2 twin
            # ran 3-4x slower in a worker than in this process). Workers keep glibc's defaults here.
            env = dict(dask.config.get("distributed.nanny.pre-spawn-environ", {}))
            env["MALLOC_TRIM_THRESHOLD_"] = None
            with dask.config.set({"distributed.nanny.pre-spawn-environ": env}):
                self._local = distributed.LocalCluster(n_workers=self.workers, threads_per_worker=1,
                                                       processes=True, dashboard_address=None,
                                                       silence_logs=logging.ERROR)
            self._client = distributed.Client(self._local, set_as_default=False)
        return self

    @property
    def client(self):
        """The ``distributed.Client``."""
        return self.start()._client

    def close(self) -> None:
        """Shut down what this object started (a local cluster, a connection); a given client stays open."""
        client, local = self._client, self._local
        if not self._own:
            return
        self._client = self._local = None
        if client is not None:
            client.close()
        if local is not None:
            local.close()

    @contextlib.contextmanager
    def active(self) -> Iterator["Cluster"]:
        """The default cluster of this thread for the block, left open after it (``with cluster`` closes it)."""
        self.start()
        token = _CURRENT.set(self)
        try:
            yield self
        finally:
            _CURRENT.reset(token)

    def __enter__(self) -> "Cluster":
        self.start()
        self._tokens.append(_CURRENT.set(self))
        return self

    def __exit__(self, *exc) -> None:
        _CURRENT.reset(self._tokens.pop())
        self.close()

    def __repr__(self) -> str:
        return f"Cluster({self.describe()})"

    def describe(self) -> str:
        if self.workers is not None:
            return f"a local Dask cluster of {self.workers} worker processes"
        where = self.scheduler or getattr(getattr(self._client, "scheduler", None), "address", "a client's cluster")
        return f"the Dask cluster at {where}"

    def note(self, message: str) -> None:
        """Tell the user something about where a run goes (``notify``, default ``warnings.warn``)."""
        (self.notify or _warn)(message)

    def worker_threads(self) -> int:
        """Threads over every worker (waits up to WORKER_TIMEOUT seconds for a first worker)."""
        client = self.client
        n = sum(client.nthreads().values())
        if n == 0:
            try:
                client.wait_for_workers(1, timeout=WORKER_TIMEOUT)
            except (TimeoutError, OSError):
                raise ClusterError(f"{self.describe()} has no worker (waited {WORKER_TIMEOUT:.0f} s)") from None
            n = sum(client.nthreads().values())
        return max(1, n)

    def batch_size(self, ctas: int, batch: int) -> int:
        """CTAs per task: at most ``batch``, and small enough for ``tasks_per_worker`` tasks per worker thread."""
        return max(1, min(int(batch), -(-int(ctas) // (self.tasks_per_worker * self.worker_threads()))))

    # ------------------------------------------------------------------------------------ running
    def run_job(self, job, progress: Callable[[float, int], None] | None = None) -> None:
        """Run a twin's :class:`flashsim.kernels.common.CtaJob` on the workers: every batch computed by
        ``job.compute`` in a worker, written by ``job.write`` here as it comes back."""
        size = self.batch_size(job.ctas, job.batch)
        chunks = [np.arange(s, min(s + size, job.ctas)) for s in range(0, job.ctas, size)]
        self.map(job.compute, job.params, job.inputs, chunks, lambda i, value: job.write(chunks[i], value),
                 progress=progress)

    def map(self, fn: Callable, params: Any, inputs: Any, chunks: Sequence[np.ndarray],
            on_result: Callable[[int, Any], None], *, progress: Callable[[float, int], None] | None = None,
            ordered: bool = False) -> None:
        """Run ``fn(params, inputs, chunks[i], hook)`` for every i as a task; ``on_result(i, value)`` is called
        here with what it returned, in the order tasks finish (``ordered``: in the order of ``chunks``).

        ``params`` and ``inputs`` go to every worker once. ``fn`` must be a module-level function; ``hook(idx,
        step, steps)`` reports progress within a batch and raises Cancelled once the run was cancelled. A
        FlashsimError or NotImplementedError raised by ``fn`` is raised here (in order when ``ordered``). Any
        exception here (Ctrl-C, one from ``on_result`` or ``progress``) cancels the tasks and is raised again."""
        distributed = require_dask()
        client = self.client
        run = uuid.uuid4().hex[:12]
        topic, stop_name = f"flashsim-progress-{run}", f"flashsim-stop-{run}"
        total = int(sum(len(c) for c in chunks))
        lock = threading.Lock()
        partial: dict[int, float] = {}  # batch -> CTAs done within it (from the workers' events)
        finished: set[int] = set()

        def on_event(event) -> None:
            i, frac = event[1]
            with lock:
                if i not in finished:
                    partial[i] = float(frac)

        client.subscribe_topic(topic, on_event)
        stop = distributed.Event(stop_name, client=client)
        sent = [client.scatter([(params, inputs)], broadcast=True, hash=False)[0]]
        tries = [0] * len(chunks)

        def submit(i: int):
            tries[i] += 1
            return client.submit(_task, fn, sent[-1], chunks[i], i, topic, stop_name, pure=False,
                                 key=f"flashsim-{run}-{i}-{tries[i]}")

        pending = {i: submit(i) for i in range(len(chunks))}
        ready: dict[int, tuple] = {}
        nxt = 0
        done = 0

        def deliver(i: int, kind: str, value) -> None:
            if kind == "error":
                raise value from None
            if kind != "ok":
                raise ClusterError(f"{_ctas(chunks[i])} (batch {i + 1} of {len(chunks)}) stopped: {value}")
            on_result(i, value)

        try:
            while pending:
                # a batch that failed comes first: its error is why the others were cancelled
                came = sorted((i for i, f in pending.items() if f.done()), key=lambda i: pending[i].status != "error")
                if any(pending[i].status == "cancelled" for i in came) and sent[-1].status != "finished":
                    # every worker holding the inputs died (a restarted worker has none): send them again and
                    # run the batches they cancelled once more
                    if len(sent) > MAX_RESEND:
                        raise ClusterError(f"the workers lost the run's inputs {len(sent)} times: every worker "
                                           "holding them died")
                    sent.append(client.scatter([(params, inputs)], broadcast=True, hash=False)[0])
                    for i in [i for i in came if pending[i].status == "cancelled"]:
                        pending[i] = submit(i)
                    came = [i for i in came if pending[i].done()]
                for i in came:
                    f = pending.pop(i)
                    try:
                        if f.status == "cancelled":
                            raise concurrent.futures.CancelledError
                        kind, value = self._outcome(f, i, chunks)
                    except concurrent.futures.CancelledError:
                        # cancelled, or forgotten between its end and the fetch of its result, while workers
                        # died (another batch's error comes first when it is already in): run it again
                        if tries[i] > MAX_RESEND:
                            raise ClusterError(f"{_ctas(chunks[i])} (batch {i + 1} of {len(chunks)}) was cancelled "
                                               f"by the cluster {tries[i]} times before it finished (did the "
                                               "cluster shut down?)") from None
                        pending[i] = submit(i)
                        continue
                    f.release()
                    with lock:
                        finished.add(i)
                        partial.pop(i, None)
                    done += len(chunks[i])
                    if ordered:
                        ready[i] = (kind, value)
                        while nxt in ready:
                            deliver(nxt, *ready.pop(nxt))
                            nxt += 1
                    else:
                        deliver(i, kind, value)
                if progress is not None:
                    with lock:
                        running = sum(partial.values())
                    progress(done + running, total)
                if not came:
                    time.sleep(POLL)
        except BaseException:
            with contextlib.suppress(Exception):
                stop.set()  # tasks in flight stop at their next KV step
            with contextlib.suppress(Exception):
                client.cancel(list(pending.values()))
            raise
        finally:
            with contextlib.suppress(Exception):
                client.unsubscribe_topic(topic)
            for f in sent:
                with contextlib.suppress(Exception):
                    f.release()

    @staticmethod
    def _outcome(f, i: int, chunks) -> tuple[str, Any]:
        """(kind, value) of a finished task, or ClusterError when it erred, was cancelled or lost."""
        what = f"{_ctas(chunks[i])} (batch {i + 1} of {len(chunks)})"
        if f.status == "finished":
            return f.result()
        if f.status == "error":
            exc, tb = f.exception(), f.traceback()
            name = type(exc).__name__
            if name == "KilledWorker":
                why = (f"every worker that ran them died ({exc.args[2] if len(exc.args) > 2 else '?'} allowed "
                       "failures, distributed.scheduler.allowed-failures)")
            else:
                frames = traceback.extract_tb(tb) if tb is not None else []
                at = f" at {frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name}" if frames else ""
                why = f"{name}: {exc}{at}"
            raise ClusterError(f"{what} failed: {why}") from None
        raise ClusterError(f"{what} was {f.status} by the cluster before it finished (did the cluster shut down?)")


def _ctas(idx: np.ndarray) -> str:
    lo, hi = int(idx[0]), int(idx[-1])
    return location(cta=lo) if lo == hi else f"CTAs {lo}-{hi}"


# ----------------------------------------------------------------------------------------------------
# In a worker
# ----------------------------------------------------------------------------------------------------


class _WorkerHook:
    """The counterpart of :class:`flashsim.kernels.common.StepHook` in a worker: at most every REPORT_EVERY
    seconds it sends the batch's finished fraction to the caller (the scheduler's event log) and looks at
    the run's stop Event, raising Cancelled once it is set."""

    def __init__(self, batch: int, topic: str, stop_name: str):
        self.batch, self.topic, self.stop_name = batch, topic, stop_name
        self._last = time.monotonic()
        self._stop = None

    def __call__(self, idx: np.ndarray, step: int, steps: int) -> None:
        now = time.monotonic()
        if now - self._last < REPORT_EVERY:
            return
        self._last = now
        from distributed import Event, get_worker

        if self._stop is None:
            self._stop = Event(self.stop_name)
        if self._stop.is_set():
            raise Cancelled
        if steps:
            get_worker().log_event(self.topic, (self.batch, len(idx) * step / steps))

    def finish(self, idx: np.ndarray) -> None:
        pass


def _portable(exc: BaseException) -> BaseException:
    """``exc`` if it survives pickling as itself, else a FlashsimError with its type and message."""
    try:
        back = pickle.loads(pickle.dumps(exc))
        if type(back) is type(exc) and str(back) == str(exc):
            return exc
    except Exception:  # noqa: BLE001 - any failure means: send the text instead
        pass
    return FlashsimError(f"{type(exc).__name__}: {exc}")


def _task(fn: Callable, shared: tuple, idx: np.ndarray, batch: int, topic: str, stop_name: str) -> tuple[str, Any]:
    """One batch in a worker: ("ok", what ``fn`` returned), ("error", the FlashsimError it raised) or
    ("cancelled", None)."""
    params, inputs = shared
    try:
        return "ok", fn(params, inputs, idx, _WorkerHook(batch, topic, stop_name))
    except Cancelled:
        return "cancelled", "the run was cancelled"
    except (FlashsimError, NotImplementedError) as exc:
        exc.__traceback__ = None
        return "error", _portable(exc)
