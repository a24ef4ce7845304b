"""``flash_attn_func`` with flash-attn's signature, run by a kernel's twin (``backend="sim"``) or by the
CUDA kernel itself (``backend="gpu"``).

Kernels: every kernel of ``flashsim.kernels.spec.SPECS`` (``fa2``, seed 000's FlashAttention-2 with masks,
softcap, GQA/MQA, fp16/bf16, dropout, ALiBi, packed sequences, the KV cache, head dims up to 256 with flash-attn's
sm_90 traits for the call above 128, and LSE; ``fa2_splitkv`` and ``fa2_splitkv1``, its split-KV kernel;
``fa2_sm8x``, the same kernel with flash-attn's sm8x tiles, and ``fa2_chunked``, with FlashAttention-3's chunked
attention (``attention_chunk``) too;
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


#: the split-KV configuration of a kernel (``num_splits`` > 1 runs it), and its one-split tiles (a KV cache's
#: appends, cache_batch_idx and paged caches without splitting)
SPLIT_KERNELS = {"fa2": "fa2_splitkv"}
SPLIT1_KERNELS = {"fa2": "fa2_splitkv1"}


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


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None, cache_seqlens=None,
                            cache_batch_idx=None, cache_leftpad=None, block_table=None, softmax_scale=None,
                            causal=False, window_size=(-1, -1), softcap=0.0, rotary_interleaved=True,
                            alibi_slopes=None, num_splits=0, return_softmax_lse=False, *, kernel="fa2", backend="sim",
                            num_sms=None):
    """flash-attn's flash_attn_with_kvcache: q (batch, seqlen_q, heads, headdim) attends each batch entry's cache
    (k_cache, v_cache (batch_size_c, seqlen_cache, heads_k, headdim), entry ``cache_batch_idx[b]`` (default b), its
    first ``cache_seqlens[b]`` keys; or paged: (num_blocks, page_block_size, heads_k, headdim) with ``block_table``
    (batch, max_num_blocks_per_seq)) and the keys ``k``, ``v`` (batch, seqlen_new, heads_k, headdim) appended after
    them, which are written into the caches in place (numpy arrays and torch tensors alike), rotated first with
    ``rotary_cos``/``rotary_sin`` (seqlen_ro, rotary_dim / 2), q too (``rotary_interleaved`` or not). Masks are
    aligned to each entry's keys (bottom right). ``num_splits``: 0, flash-attn's choice on ``num_sms`` SMs (default
    132); 1 or n. Returns out, or (out, softmax_lse (batch, heads, seqlen_q)) with ``return_softmax_lse``.
    ``cache_leftpad`` is not modelled (NotImplementedError). See :mod:`flashsim.attention.kvcache`."""
    get(kernel)
    if backend not in BACKENDS:
        raise bad_argument("backend", backend, f"expected one of {BACKENDS}")
    arrays = {"q": q, "k_cache": k_cache, "v_cache": v_cache, "k": k, "v": v, "rotary_cos": rotary_cos,
              "rotary_sin": rotary_sin}
    torch_in = type(q).__module__.startswith("torch")
    for name, x in arrays.items():
        if x is not None and torch_in and getattr(x, "device", None) != q.device:
            raise bad_argument(name, f"tensor on {getattr(x, 'device', 'cpu')}", f"must be on the same device as q "
                                                                               f"({q.device})")
    npy = {n: (None if x is None else to_numpy(x, n)) for n, x in arrays.items()}
    kv = dict(k_new=npy["k"], v_new=npy["v"], rotary_cos=npy["rotary_cos"], rotary_sin=npy["rotary_sin"],
              cache_seqlens=cache_seqlens, cache_batch_idx=cache_batch_idx, cache_leftpad=cache_leftpad,
              block_table=block_table, rotary_interleaved=rotary_interleaved)
    call = dict(softmax_scale=softmax_scale, causal=causal, window_size=window_size, softcap=softcap,
                alibi_slopes=alibi_slopes, num_splits=num_splits, num_sms=num_sms, **kv)
    args = check_args(npy["q"], npy["k_cache"], npy["v_cache"], **call)
    spec = _configuration(kernel, args)
    call.update(num_splits=args.num_splits, num_sms=None)  # the count the check chose
    if args.alibi_slopes is not None:
        call["alibi_slopes"] = args.alibi_array
    out, lse, kc, vc = _run(spec, backend, npy["q"], npy["k_cache"], npy["v_cache"], call)
    if args.kvcache.seqlen_knew:  # in place, as flash-attn writes the caches
        for dst, src in ((k_cache, kc), (v_cache, vc)):
            if torch_in:
                dst.copy_(_to_torch(src, args, dst.device))
            else:
                np.copyto(dst, src.view(dst.dtype))
    if torch_in:
        out, lse = _to_torch(out, args, q.device), _to_torch(lse, args, q.device)
    return (out, lse) if return_softmax_lse else out


def _configuration(kernel: str, args):
    """The spec that runs a call of ``kernel``: its split-KV configuration with more than one split, its one-split
    one for a KV cache's appends, cache_batch_idx or paged cache (flash-attn's force_split_kernel); refused with
    NotImplementedError naming what the spec does not model."""
    name = kernel
    forced = args.kvcache is not None and args.kvcache.forces_split_kernel
    if args.num_splits > 1 or forced:
        table = SPLIT_KERNELS if args.num_splits > 1 else SPLIT1_KERNELS
        if kernel not in table:
            raise NotImplementedError(f"kernel {kernel!r} has no split-KV configuration, which split-KV and the KV "
                                      "cache's appends, cache_batch_idx and paged caches run")
        name = table[kernel]
    spec = get(name)
    spec.check_supported(args)
    return spec


def _run(spec, backend: str, q, k, v, call: dict):
    """The twin (``backend="sim"``) or the kernel of ``spec`` on numpy inputs."""
    if backend == "sim":
        return run_twin(spec.name, q, k, v, **call)
    from flashsim.kernels.launch import run_kernel

    return run_kernel(spec.name, q, k, v, **call)


def _to_torch(x: np.ndarray, args, device):
    """A numpy output as a torch tensor on ``device`` (16-bit patterns of a bf16 call as torch.bfloat16)."""
    import torch

    if x.dtype == np.dtype(args.np_dtype) and args.dtype == "bfloat16":
        return torch.from_numpy(np.ascontiguousarray(x).view(np.int16)).view(torch.bfloat16).to(device)
    return torch.from_numpy(np.ascontiguousarray(x)).to(device)


def _forward(q, k, v, kw: dict, kernel: str, backend: str):
    """Check a call, pick the kernel configuration (split-KV), run it and give its outputs back in the inputs'
    kind."""
    get(kernel)
    if backend not in BACKENDS:
        raise bad_argument("backend", backend, f"expected one of {BACKENDS}")
    args = check_args(q, k, v, **kw)
    spec = _configuration(kernel, args)
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
    res = _run(spec, backend, qn, kn, vn, {**call, "softmax_scale": args.softmax_scale})
    out, lse = res[:2]
    probs = res[2] if args.return_softmax else np.zeros((0,), args.np_dtype)
    if torch_in:
        out, probs = _to_torch(out, args, q.device), _to_torch(probs, args, q.device)
        lse = _to_torch(lse, args, q.device) if lse is not None else None
    return (out, lse, probs) if kw["return_attn_probs"] else out
