"""Python twins of the CUDA kernels in gpu/kernels: the same arithmetic in the same order, bit for bit.

Each kernel is described once in :mod:`flashsim.kernels.spec` (``SPECS``); ``run_twin(kernel, q, k, v,
softmax_scale=None, **masks)`` runs any of them with flash_attn_func's conventions and returns (out, lse),
lse None for the kernels that write none. ``check_supported`` refuses, naming them, the flash_attn_func
features a kernel lacks.
"""

from flashsim.kernels.spec import SPECS, get

#: every kernel with a twin, in registration order
TWINS = tuple(SPECS)
#: what a twin's ``progress(done, total)`` counts
PROGRESS_UNIT = {name: spec.progress_unit for name, spec in SPECS.items()}


def unsupported(kernel: str, args) -> list[str]:
    """The features of a call (``AttentionArgs``) that ``kernel`` does not model."""
    return get(kernel).unsupported(args)


def check_supported(kernel: str, args) -> None:
    """NotImplementedError naming every feature of the call that ``kernel`` does not model."""
    get(kernel).check_supported(args)


def run_twin(kernel: str, q, k, v, softmax_scale=None, *, rec=None, progress=None, threads=None, workers=None,
             scheduler=None, client=None, **kw):
    """``progress(done, total)`` counts ``PROGRESS_UNIT[kernel]``: CTAs, or KV tiles for the twins whose CTAs
    step together. Where a twin's CTAs run: ``threads`` threads of this process, or a Dask cluster
    (``workers=N`` local processes, ``scheduler=`` or ``client=`` a running one, else the one of an enclosing
    ``with flashsim.cluster.Cluster(...)``); a twin that steps every CTA together notes it and runs here."""
    spec = get(kernel)
    res = spec.twin_module.run(q, k, v, softmax_scale, kernel=kernel, rec=rec, progress=progress, threads=threads,
                               workers=workers, scheduler=scheduler, client=client, **kw)
    return res if spec.writes_lse else (res, None)
