"""``flash_attn_func`` with flash-attn's signature, run by a kernel's twin (``backend="sim"``) or by the
CUDA kernel itself (``backend="gpu"``).

Kernels: every kernel of ``flashsim.kernels.spec.SPECS`` (``fa2``, seed 000's FlashAttention-2 with masks,
softcap, GQA/MQA, fp16/bf16, head dims up to 128 and LSE, ``fa2_sm8x``, the same kernel with flash-attn's
sm8x tiles, and ``fa2_chunked``, with FlashAttention-3's chunked attention (``attention_chunk``) too;
``kernel1``, seed 002; ``v5`` and ``v6``, seed 001; ``fa4h``, seed 004's warp-specialised pipeline on sm_90 with
head dims 64, 128 and qk 192 / v 128); each spec's ``doc`` says what it models. A feature a
kernel does not have raises NotImplementedError naming it; a shape outside a kernel's preconditions raises
ArgumentError naming the precondition.
"""

from __future__ import annotations

import numpy as np

from flashsim.attention import check_args, to_numpy
from flashsim.errors import bad_argument
from flashsim.kernels import run_twin
from flashsim.kernels.spec import SPECS, get

KERNELS = tuple(SPECS)
BACKENDS = ("sim", "gpu")
#: kernels that write the softmax LSE (the others return no LSE)
WRITES_LSE = tuple(name for name, spec in SPECS.items() if spec.writes_lse)


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, deterministic=False, return_attn_probs=False, *, kernel="fa2",
                    backend="sim", attention_chunk=0):
    """Attention over (batch, seqlen, heads, headdim) inputs; returns out with q's shape (v's head dim) and dtype, or with
    ``return_attn_probs`` the tuple (out, softmax_lse, None) as flash-attn does (LSE float32, (batch, heads,
    seqlen_q); the third item, flash-attn's dropout pattern, is None: dropout is not modelled).

    The arguments mean what they mean in flash-attn (see ``flashsim.attention.check_args``). Inputs are
    numpy arrays (float16 or ``ml_dtypes.bfloat16``) or torch tensors; outputs follow the inputs' kind
    (and device for torch).

    ``attention_chunk`` (keyword only, as named by FlashAttention-3's flash_attn_func; 0 is off): chunked
    attention, query row i attending only the keys of its chunk of that many keys (i + seqlen_k - seqlen_q
    rounded down to a multiple of it, up to the next multiple), within any causal/local window; a kernel
    without it (all but ``fa2_chunked``) refuses a chunk > 0 with NotImplementedError.
    """
    spec = get(kernel)
    if backend not in BACKENDS:
        raise bad_argument("backend", backend, f"expected one of {BACKENDS}")
    args = check_args(q, k, v, dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal,
                      window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes,
                      deterministic=deterministic, return_attn_probs=return_attn_probs,
                      attention_chunk=attention_chunk)
    spec.check_supported(args)
    if return_attn_probs and not spec.writes_lse:
        raise NotImplementedError(f"kernel {kernel!r} writes no softmax LSE (return_attn_probs needs one of "
                                  f"{WRITES_LSE})")
    torch_in = type(q).__module__.startswith("torch")
    qn, kn, vn = (to_numpy(x, name) for x, name in ((q, "q"), (k, "k"), (v, "v")))
    mask_kw = dict(causal=causal, window_size=window_size, softcap=softcap, attention_chunk=attention_chunk)
    if backend == "sim":
        out, lse = run_twin(kernel, qn, kn, vn, args.softmax_scale, **mask_kw)
    else:
        from flashsim.kernels.launch import run_kernel

        out, lse = run_kernel(kernel, qn, kn, vn, args.softmax_scale, **mask_kw)
    if torch_in:
        import torch

        def back(x):
            if x.dtype == np.dtype(args.np_dtype) and args.dtype == "bfloat16":
                return torch.from_numpy(np.ascontiguousarray(x).view(np.int16)).view(torch.bfloat16).to(q.device)
            return torch.from_numpy(np.ascontiguousarray(x)).to(q.device)

        out = back(out)
        lse = back(lse) if lse is not None else None
    return (out, lse, None) if return_attn_probs else out
