"""Python twins of the CUDA kernels in gpu/kernels: the same arithmetic in the same order, bit for bit.

``run_twin(kernel, q, k, v, softmax_scale=None, **masks)`` runs any of them with flash_attn_func's
conventions and returns (out, lse), lse None for the kernels that write none (all but fa2).
"""

TWINS = ("fa2", "kernel1", "v5", "v6")


def run_twin(kernel: str, q, k, v, softmax_scale=None, **kw):
    from flashsim.errors import bad_argument

    if kernel == "fa2":
        from flashsim.kernels import fa2

        return fa2.run(q, k, v, softmax_scale, **kw)
    if kw.get("causal") or tuple(kw.get("window_size", (-1, -1))) != (-1, -1) or kw.get("softcap", 0.0):
        raise NotImplementedError(f"kernel {kernel!r} does not model masks or softcap")
    if kernel == "kernel1":
        from flashsim.kernels import kernel1

        return kernel1.run(q, k, v, softmax_scale), None
    if kernel in ("v5", "v6"):
        from flashsim.kernels import fa_v5

        return fa_v5.run(q, k, v, softmax_scale, kernel=kernel), None
    raise bad_argument("kernel", kernel, f"expected one of {TWINS}")
