"""``flash_attn_func`` with flash-attn's signature, run by a kernel's twin (``backend="sim"``) or by the
CUDA kernel itself (``backend="gpu"``).

Kernels built so far: ``v5`` and ``v6`` (seed 001). ``kernel1`` and ``fa2`` are not built yet and say
so; a feature a kernel does not have (masks, softcap, GQA, bf16) raises NotImplementedError naming it.
"""

from __future__ import annotations

import numpy as np

from flashsim.attention import check_args, to_numpy
from flashsim.errors import bad_argument

KERNELS = ("v5", "v6", "kernel1", "fa2")
BUILT = ("v5", "v6")
BACKENDS = ("sim", "gpu")


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, deterministic=False, return_attn_probs=False, *, kernel="fa2",
                    backend="sim"):
    """Attention over (batch, seqlen, heads, headdim) inputs; returns out with q's shape and dtype.

    The arguments mean what they mean in flash-attn (see ``flashsim.attention.check_args``).
    """
    if kernel not in KERNELS:
        raise bad_argument("kernel", kernel, f"expected one of {KERNELS}")
    if backend not in BACKENDS:
        raise bad_argument("backend", backend, f"expected one of {BACKENDS}")
    args = check_args(q, k, v, dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal,
                      window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes,
                      deterministic=deterministic, return_attn_probs=return_attn_probs)
    if kernel not in BUILT:
        raise NotImplementedError(f"kernel {kernel!r} is not built yet (built: {', '.join(BUILT)})")
    # seed 001's kernels: plain fp16 attention without masks, softcap or grouped K/V heads
    unsupported = [name for name, on in (("causal or local masks", args.is_causal or args.is_local),
                                         ("softcap", args.softcap > 0),
                                         ("GQA/MQA", args.heads != args.heads_k),
                                         ("bf16", args.dtype != "float16")) if on]
    if unsupported:
        raise NotImplementedError(f"kernel {kernel!r} does not model {', '.join(unsupported)}")
    torch_in = type(q).__module__.startswith("torch")
    qn, kn, vn = (to_numpy(x, name) for x, name in ((q, "q"), (k, "k"), (v, "v")))
    if backend == "sim":
        from flashsim.kernels import fa_v5

        out = fa_v5.run(qn, kn, vn, softmax_scale=args.softmax_scale, kernel=kernel)  # v5, v6: one arithmetic
    else:
        from gpu.fa_kernels import run_fa

        out = run_fa(kernel, qn, kn, vn, softmax_scale=args.softmax_scale)
    if torch_in:
        import torch

        return torch.from_numpy(np.ascontiguousarray(out)).to(q.device)
    return out
