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
                    backend="sim", attention_chunk=0, generator=None, rng_state=None):
    """Attention over (batch, seqlen, heads, headdim) inputs; returns out with q's shape (v's head dim) and dtype, or with
    ``return_attn_probs`` the tuple (out, softmax_lse, S_dmask) as flash-attn does (LSE float32, (batch, heads,
    seqlen_q)). S_dmask, with dropout, holds the 16-bit probabilities P of every tile the kernel visits, not
    normalised (``exp(S * scale - running max)``), the dropped ones negated, shape (batch, heads, seqlen_q and
    seqlen_k rounded up to 128), 0 where no CTA wrote; without dropout it is an empty array (flash-attn returns
    ``torch.empty(0)``).

    Dropout (``dropout_p`` in [0, 1), not with softcap) draws its pattern from Philox4x32-10 as flash-attn does
    (flashsim.numerics.philox): ``rng_state=(seed, offset)`` fixes the philox state of the call; otherwise
    ``generator`` (a :class:`flashsim.attention.PhiloxGenerator`, by default
    ``flashsim.attention.default_generator``) gives it and advances by batch * heads * 32, as torch's CUDA
    generator does for flash-attn. ``alibi_slopes``: float32 (heads,) or (batch, heads). ``deterministic``
    is accepted (the forward pass is deterministic either way).

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
                      attention_chunk=attention_chunk, rng_state=rng_state, generator=generator)
    spec.check_supported(args)
    if return_attn_probs and not spec.writes_lse:
        raise NotImplementedError(f"kernel {kernel!r} writes no softmax LSE (return_attn_probs needs one of "
                                  f"{WRITES_LSE})")
    torch_in = type(q).__module__.startswith("torch")
    qn, kn, vn = (to_numpy(x, name) for x, name in ((q, "q"), (k, "k"), (v, "v")))
    mask_kw = dict(causal=causal, window_size=window_size, softcap=softcap, attention_chunk=attention_chunk)
    if args.dropout_p > 0:  # the philox state taken above, so that the generator advances once per call
        mask_kw.update(dropout_p=args.dropout_p, rng_state=args.rng_state, return_attn_probs=args.return_softmax)
    if alibi_slopes is not None:
        mask_kw["alibi_slopes"] = args.alibi_array
    if backend == "sim":
        res = run_twin(kernel, qn, kn, vn, args.softmax_scale, **mask_kw)
    else:
        from flashsim.kernels.launch import run_kernel

        res = run_kernel(kernel, qn, kn, vn, args.softmax_scale, **mask_kw)
    out, lse = res[:2]
    probs = res[2] if args.return_softmax else np.zeros((0,), args.np_dtype)
    if torch_in:
        import torch

        def back(x):
            if x.dtype == np.dtype(args.np_dtype) and args.dtype == "bfloat16":
                return torch.from_numpy(np.ascontiguousarray(x).view(np.int16)).view(torch.bfloat16).to(q.device)
            return torch.from_numpy(np.ascontiguousarray(x)).to(q.device)

        out = back(out)
        lse = back(lse) if lse is not None else None
        probs = back(probs)
    return (out, lse, probs) if return_attn_probs else out
