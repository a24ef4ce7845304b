"""``flash_attn_func`` with flash-attn's signature, run by a kernel's twin (``backend="sim"``) or by the
CUDA kernel itself (``backend="gpu"``).

Kernels: ``fa2`` (seed 000: masks, softcap, GQA/MQA, fp16/bf16, head dims up to 128, LSE), ``kernel1``
(seed 002: d = 128, seqlen_q == seqlen_k, multiples of 64, fp16/bf16), ``v5`` and ``v6`` (seed 001: fp16,
N % 64, M % 16, d % 16). A feature a kernel does not have raises NotImplementedError naming it; a shape
outside a kernel's preconditions raises ArgumentError naming the precondition.
"""

from __future__ import annotations

import numpy as np

from flashsim.attention import check_args, to_numpy
from flashsim.errors import bad_argument
from flashsim.kernels import check_supported

KERNELS = ("fa2", "kernel1", "v5", "v6")
BACKENDS = ("sim", "gpu")
#: kernels that write the softmax LSE (the others return no LSE)
WRITES_LSE = ("fa2",)


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, deterministic=False, return_attn_probs=False, *, kernel="fa2",
                    backend="sim"):
    """Attention over (batch, seqlen, heads, headdim) inputs; returns out with q's shape and dtype, or with
    ``return_attn_probs`` the tuple (out, softmax_lse, None) as flash-attn does (LSE float32, (batch, heads,
    seqlen_q); the third item, flash-attn's dropout pattern, is None: dropout is not modelled).

    The arguments mean what they mean in flash-attn (see ``flashsim.attention.check_args``). Inputs are
    numpy arrays (float16 or ``ml_dtypes.bfloat16``) or torch tensors; outputs follow the inputs' kind
    (and device for torch).
    """
    if kernel not in KERNELS:
        raise bad_argument("kernel", kernel, f"expected one of {KERNELS}")
    if backend not in BACKENDS:
        raise bad_argument("backend", backend, f"expected one of {BACKENDS}")
    args = check_args(q, k, v, dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal,
                      window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes,
                      deterministic=deterministic, return_attn_probs=return_attn_probs)
    check_supported(kernel, args)
    if return_attn_probs and kernel not in WRITES_LSE:
        raise NotImplementedError(f"kernel {kernel!r} writes no softmax LSE (return_attn_probs needs one of "
                                  f"{WRITES_LSE})")
    torch_in = type(q).__module__.startswith("torch")
    qn, kn, vn = (to_numpy(x, name) for x, name in ((q, "q"), (k, "k"), (v, "v")))
    mask_kw = dict(causal=causal, window_size=window_size, softcap=softcap)
    if backend == "sim":
        from flashsim.kernels import fa2, fa_v5, kernel1

        if kernel == "fa2":
            out, lse = fa2.run(qn, kn, vn, softmax_scale=args.softmax_scale, **mask_kw)
        elif kernel == "kernel1":
            out, lse = kernel1.run(qn, kn, vn, softmax_scale=args.softmax_scale), None
        else:
            out, lse = fa_v5.run(qn, kn, vn, softmax_scale=args.softmax_scale, kernel=kernel), None  # one arithmetic
    else:
        from flashsim.gpu.fa_kernels import run_kernel

        out, lse = run_kernel(kernel, qn, kn, vn, args.softmax_scale, **(mask_kw if kernel == "fa2" else {}))
    if torch_in:
        import torch

        def back(x):
            if x.dtype == np.dtype(args.np_dtype) and args.dtype == "bfloat16":
                return torch.from_numpy(np.ascontiguousarray(x).view(np.int16)).view(torch.bfloat16).to(q.device)
            return torch.from_numpy(np.ascontiguousarray(x)).to(q.device)

        out = back(out)
        lse = back(lse) if lse is not None else None
    return (out, lse, None) if return_attn_probs else out
