"""What ``flashsim check`` is built on (the command itself: :mod:`flashsim.cli.check`): an attention problem
described before any array exists (:func:`fake_inputs`), whether a kernel models it (:func:`in_domain`), its
work in tile-steps (CTAs x KV blocks) and the memory a run takes (:func:`estimate`, which runs beyond the
machine are refused on), the warm-up that takes the one-off compilation (numba, NVRTC) out of the timed
runs (:func:`warm_up`) and the shared-memory bank report of a kernel's cubin run in the SASS interpreter
(:func:`bank_report`; inside ``with flashsim.cluster.Cluster`` its CTA batches run on the cluster's
workers).
"""

from __future__ import annotations

import time

import ml_dtypes
import numpy as np

from flashsim import cluster
from flashsim.kernels import run_twin
from flashsim.kernels.spec import SPECS, get
from flashsim.progress import Estimate

#: the element types of q, k and v, by name
INPUT_DTYPES = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}

#: the kernels ``flashsim check`` runs unless told: one configuration of each kernel
DEFAULT_KERNELS = tuple(name for name, spec in SPECS.items() if spec.config_of is None)
#: atol of flash-attn's acceptance rule as flashsim check applies it
ATOL = 1e-5

# ----------------------------------------------------------------------------------------------------
# The problem, before any array exists: shapes, work and memory
# ----------------------------------------------------------------------------------------------------


def fake_inputs(batch: int, heads: int, heads_k: int, seqlen_q: int, seqlen_k: int, headdim: int, dtype: str):
    """q, k, v of these shapes as zero-strided views of one element: the argument checks and the estimates
    read shapes and dtypes only, so nothing of the problem's size is allocated."""
    z = np.zeros((), INPUT_DTYPES[dtype])
    kv = np.broadcast_to(z, (batch, seqlen_k, heads_k, headdim))
    return np.broadcast_to(z, (batch, seqlen_q, heads, headdim)), kv, kv


def in_domain(kernel: str, q, k, v, kw: dict) -> bool:
    """Whether ``kernel`` models this call (shapes, dtype, masks): the twin's own check."""
    from flashsim.errors import ArgumentError

    try:
        get(kernel).check(q, k, v, **kw)
    except (NotImplementedError, ArgumentError):
        return False
    return True


def tile_steps(kernel: str, a) -> int:
    """CTAs x KV blocks of one launch of ``kernel`` on the call ``a`` (AttentionArgs): the unit of the work."""
    spec = get(kernel)
    return spec.twin_module.tile_steps(spec.instance_for(a), a)


def grid_ctas(kernel: str, a) -> int:
    """CTAs of one launch of ``kernel`` on the call ``a``."""
    return get(kernel).instance_for(a).ctas(a)


def kernel_memory(kernel: str, a, *, workers: int = 1, interp: bool = False) -> int:
    """Bytes the twin of ``kernel`` (or, ``interp``, its cubin in the SASS interpreter) allocates on the call
    ``a`` beyond the inputs: copies of the inputs, outputs and the working arrays of the CTAs in flight on
    ``workers`` threads (or worker processes)."""
    if interp:  # device copies of inputs and outputs, and the state of a batch of CTAs (shared memory, registers)
        nq = a.batch * a.seqlen_q * a.heads * a.headdim
        nk = a.batch * a.seqlen_k * a.heads_k * a.headdim
        return 2 * (nq + 2 * nk) + 8 * nq + 256 * 256 * 1024
    spec = get(kernel)
    return spec.twin_module.memory(spec.instance_for(a), a, workers)


def _chunk(a) -> int:
    """Score elements of one chunk of query rows of the reference attention (flashsim.attention.reference)."""
    per_row = a.batch * a.heads * max(a.seqlen_k, 1)
    rows = min(a.seqlen_q, max(1, (1 << 22) // per_row))
    return rows * per_row


def estimate(kernels, q, k, v, kw: dict, *, banks: bool = True, threads: int | None = None,
             processes: int = 0) -> Estimate:
    """Work and memory of ``flashsim check`` on this call: tile-steps of every twin (and, with ``banks``, of
    every cubin in the SASS interpreter) in its domain; the inputs, the float64 reference and the
    low-precision one, and the largest kernel's arrays (on ``threads`` threads, or, with ``processes``, on a
    local cluster of that many worker processes, each with its own copy of the inputs)."""
    from flashsim.attention import check_args
    from flashsim.kernels.common import default_threads

    a = check_args(q, k, v, **kw)
    threads = processes or (default_threads() if threads is None else threads)
    nq = a.batch * a.seqlen_q * a.heads * a.headdim
    nk = a.batch * a.seqlen_k * a.heads_k * a.headdim
    est = Estimate()
    run = [kn for kn in kernels if in_domain(kn, q, k, v, kw)]
    for kn in run:
        est.work[f"{kn} twin"] = tile_steps(kn, a)
        if banks:
            est.work[f"{kn} cubin"] = tile_steps(kn, a)
    est.memory["inputs"] = 2 * (nq + 2 * nk) + 12 * max(nq, nk)  # float64 draws, narrowed one array at a time
    chunk = _chunk(a)
    est.memory["float64 reference"] = 8 * (nq + 2 * nk) + 16 * nq + 8 * a.batch * a.heads * a.seqlen_q + 32 * chunk
    low = 4 * (nq + 2 * nk) + 10 * nq + 16 * chunk
    per_kernel = [kernel_memory(kn, a, workers=threads)
                  + (kernel_memory(kn, a, interp=True) if banks else 0) for kn in run]
    est.memory["kernels (largest)"] = low + max(per_kernel, default=0)
    if processes:
        est.memory[f"inputs in {processes} worker processes"] = processes * (2 * (nq + 2 * nk) + 8 * nq)
    return est


# ----------------------------------------------------------------------------------------------------
# Warm-up, bank report, output
# ----------------------------------------------------------------------------------------------------


def _tiny(kernel: str, q, k, v):
    """A one-CTA problem in ``kernel``'s domain with this call's dtype and head dim: one block of query rows
    and one KV block (None when no instance runs this head dim)."""
    from flashsim.errors import ArgumentError

    try:
        inst = get(kernel).instance_for_headdim(q.shape[-1])
    except ArgumentError:
        return None
    return fake_inputs(1, 1, 1, inst.block_m, inst.block_n, q.shape[-1], _dtype_name(q))


def _dtype_name(x) -> str:
    return "bfloat16" if x.dtype == ml_dtypes.bfloat16 else "float16"


def warm_up(kernels, q, k, v, kw: dict, *, banks: bool, gpu: bool = False, progress=None) -> float:
    """Run each kernel once on the smallest problem of its domain (its twin, with ``banks`` its cubin in the
    SASS interpreter, with ``gpu`` its CUDA build on the GPU), so that numba's compilation and NVRTC's happen
    here, once, and not inside the first kernel's time (both are cached on disk, so only a first run pays
    much). ``progress(done, total)`` counts the kernels. Returns the seconds it took."""
    from flashsim.errors import ArgumentError

    t0 = time.perf_counter()
    kernels = list(kernels)
    for i, kernel in enumerate(kernels):
        if progress is not None:
            progress(i, len(kernels))
        tiny = _tiny(kernel, q, k, v)
        if tiny is None:
            continue
        tq, tk, tv = (np.ascontiguousarray(x) for x in tiny)
        if not in_domain(kernel, tq, tk, tv, kw):
            continue
        try:
            run_twin(kernel, tq, tk, tv, **kw)
            if banks:
                bank_report(kernel, tq, tk, tv, **kw)
            if gpu:
                from flashsim.kernels.launch import run_kernel

                run_kernel(kernel, tq, tk, tv, **kw)
        except (NotImplementedError, ArgumentError):  # outside the kernel's domain: the run says so
            continue
    if progress is not None:
        progress(len(kernels), len(kernels))
    return time.perf_counter() - t0


def bank_report(kernel: str, q, k, v, progress=None, **kw):
    """The :class:`flashsim.sass.checking.Report` (banks) of one launch of ``kernel``'s cubin in the SASS
    interpreter on these inputs; ``progress(done, total)`` counts CTAs. Inside ``with flashsim.cluster.Cluster``
    the launch's CTA batches run on its workers (about 4 batches per worker)."""
    import flashsim.cuda as fc
    from flashsim.kernels.launch import prepare

    with fc.checking(banks=True) as report:
        if k.shape[1] == 0:  # flash_attn_func launches nothing
            return report
        prep = prepare(kernel, q, k, v, backend="interp", **kw)
        if prep.reset is not None:
            prep.reset()
        ctas = int(np.prod(prep.grid))
        cl = cluster.current()
        # about 10 progress steps, or 4 batches per worker of a cluster; the counts do not depend on it
        per = max(32, min(256, -(-ctas // 10))) if cl is None else max(8, cl.batch_size(ctas, 256))
        prep.func(prep.grid, (prep.threads,), prep.params, shared_mem=prep.smem,
                  exec_options=fc.ExecOptions(progress=progress, ctas_per_batch=per))
    return report
