"""Python twins of the CUDA kernels in gpu/kernels: the same arithmetic in the same order, bit for bit.

``run_twin(kernel, q, k, v, softmax_scale=None, **masks)`` runs any of them with flash_attn_func's
conventions and returns (out, lse), lse None for the kernels that write none (all but fa2).
``check_supported`` is the one place that says which flash_attn_func features a kernel lacks.
"""

TWINS = ("fa2", "kernel1", "v5", "v6")
#: what a twin's ``progress(done, total)`` counts
PROGRESS_UNIT = {"fa2": "CTA", "kernel1": "CTA", "v5": "KV tile", "v6": "KV tile"}


def unsupported(kernel: str, args) -> list[str]:
    """The features of a call (``AttentionArgs``) that ``kernel`` does not model (fa2 has them all)."""
    if kernel == "fa2":
        return []
    feats = [("causal or local masks", args.is_causal or args.is_local), ("softcap", args.softcap > 0),
             ("GQA/MQA", args.heads != args.heads_k)]
    if kernel in ("v5", "v6"):
        feats.append(("bf16", args.dtype != "float16"))
    return [name for name, on in feats if on]


def check_supported(kernel: str, args) -> None:
    """NotImplementedError naming every feature of the call that ``kernel`` does not model."""
    missing = unsupported(kernel, args)
    if missing:
        raise NotImplementedError(f"kernel {kernel!r} does not model {', '.join(missing)}")


def run_twin(kernel: str, q, k, v, softmax_scale=None, *, rec=None, progress=None, threads=None, workers=None,
             scheduler=None, client=None, **kw):
    """``progress(done, total)``: CTAs for fa2 and kernel1, KV tiles for v5/v6 (their CTAs step together);
    ``PROGRESS_UNIT`` names the unit per kernel. Where fa2's and kernel1's CTAs run: ``threads`` threads of
    this process, or a Dask cluster (``workers=N`` local processes, ``scheduler=`` or ``client=`` a running
    one, else the one of an enclosing ``with flashsim.cluster.Cluster(...)``); v5/v6 run in this process."""
    from flashsim.attention import check_args
    from flashsim.cluster import current, note
    from flashsim.errors import bad_argument

    if kernel not in TWINS:
        raise bad_argument("kernel", kernel, f"expected one of {TWINS}")
    where = dict(threads=threads, workers=workers, scheduler=scheduler, client=client)
    if kernel == "fa2":
        from flashsim.kernels import fa2

        return fa2.run(q, k, v, softmax_scale, rec=rec, progress=progress, **where, **kw)
    check_supported(kernel, check_args(q, k, v, softmax_scale=softmax_scale, **kw))
    if kernel == "kernel1":
        from flashsim.kernels import kernel1

        return kernel1.run(q, k, v, softmax_scale, rec=rec, progress=progress, **where), None
    from flashsim.kernels import fa_v5

    if workers is not None or scheduler is not None or client is not None or current() is not None:
        note(f"the {kernel} twin runs in this process: it steps every CTA of the grid together through the KV tiles")
    return fa_v5.run(q, k, v, softmax_scale, kernel=kernel, rec=rec, progress=progress), None
