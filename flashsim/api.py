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


#: the split-KV configuration of a kernel (``num_splits`` > 1 runs it)
SPLIT_KERNELS = {"fa2": "fa2_splitkv"}


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, deterministic=False, return_attn_probs=False, *, kernel="fa2",
                    backend="sim", attention_chunk=0, generator=None, rng_state=None, num_splits=1, num_sms=None):
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

    ``num_splits`` (keyword only): 1, one kernel (the default); n > 1, split-KV: n CTAs share each query block's
    keys and a combine kernel merges their f32 partial outputs (kernel fa2 runs its configuration fa2_splitkv);
    0, the count flash-attn's ``mha_fwd`` picks itself (``flashsim.attention.dispatch.num_splits`` on ``num_sms``
    SMs, default 132), which is what flash-attn's flash_attn_func runs.
    """
    return _forward(q, k, v, dict(dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal,
                                  window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes,
                                  deterministic=deterministic, return_attn_probs=return_attn_probs,
                                  attention_chunk=attention_chunk, rng_state=rng_state, generator=generator,
                                  num_splits=num_splits, num_sms=num_sms), kernel, backend)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None, *, kernel="fa2",
                           backend="sim", generator=None, rng_state=None):
    """flash-attn's flash_attn_varlen_func: packed sequences, q (total_q, heads, headdim), k and v (total_k,
    heads_k, headdim); sequence b holds rows ``cu_seqlens_q[b]:cu_seqlens_q[b + 1]`` of q and
    ``cu_seqlens_k[b]:cu_seqlens_k[b + 1]`` of k and v (int32 (batch + 1,), non-decreasing: a zero-length
    sequence repeats an offset), at most ``max_seqlen_q`` and ``max_seqlen_k`` rows. Masks are aligned per
    sequence (bottom right); a window side at or beyond max_seqlen_k is unbounded; dropout offsets and ALiBi rows
    are the sequence's batch index's. Returns out (total_q, heads, headdim), rows of no sequence 0, or with
    ``return_attn_probs`` (out, softmax_lse (heads, total_q), S_dmask (batch, heads, max_seqlen_q and max_seqlen_k
    rounded up to 128)). Other arguments as :func:`flash_attn_func`. ``block_table`` (paged KV) is not modelled
    yet (NotImplementedError)."""
    if block_table is not None:
        raise NotImplementedError("paged KV (block_table) is not modelled")
    return _forward(q, k, v, dict(dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal,
                                  window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes,
                                  deterministic=deterministic, return_attn_probs=return_attn_probs,
                                  rng_state=rng_state, generator=generator, cu_seqlens_q=cu_seqlens_q,
                                  cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k),
                    kernel, backend)


def _forward(q, k, v, kw: dict, kernel: str, backend: str):
    """Check a call, pick the kernel configuration (split-KV), run it and give its outputs back in the inputs'
    kind."""
    spec = get(kernel)
    if backend not in BACKENDS:
        raise bad_argument("backend", backend, f"expected one of {BACKENDS}")
    args = check_args(q, k, v, **kw)
    if args.num_splits > 1 and kernel in SPLIT_KERNELS:
        spec = get(SPLIT_KERNELS[kernel])
    spec.check_supported(args)
    if kw["return_attn_probs"] and not spec.writes_lse:
        raise NotImplementedError(f"kernel {kernel!r} writes no softmax LSE (return_attn_probs needs one of "
                                  f"{WRITES_LSE})")
    torch_in = type(q).__module__.startswith("torch")
    qn, kn, vn = (to_numpy(x, name) for x, name in ((q, "q"), (k, "k"), (v, "v")))
    call = {n: kw[n] for n in ("causal", "window_size", "softcap")}
    call["attention_chunk"] = kw.get("attention_chunk", 0)
    if args.dropout_p > 0:  # the philox state taken above, so that the generator advances once per call
        call.update(dropout_p=args.dropout_p, rng_state=args.rng_state, return_attn_probs=args.return_softmax)
    if args.alibi_slopes is not None:
        call["alibi_slopes"] = args.alibi_array
    if args.num_splits != 1:
        call["num_splits"] = args.num_splits  # the count the check chose (num_splits=0: the heuristic's)
    if args.varlen:
        call.update(cu_seqlens_q=np.asarray(args.cu_seqlens_q, np.int32),
                    cu_seqlens_k=np.asarray(args.cu_seqlens_k, np.int32), max_seqlen_q=args.seqlen_q,
                    max_seqlen_k=args.seqlen_k)
    if backend == "sim":
        res = run_twin(spec.name, qn, kn, vn, args.softmax_scale, **call)
    else:
        from flashsim.kernels.launch import run_kernel

        res = run_kernel(spec.name, qn, kn, vn, args.softmax_scale, **call)
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
    return (out, lse, probs) if kw["return_attn_probs"] else out
