"""Reference attention for checking kernels: the float64 truth, a plain low-precision attention, and
flash-attn's acceptance rule that compares a kernel's error with the low-precision one's.

Semantics (FA2, Dao-AILab/flash-attention; facts only): scores are ``softmax_scale * q.k``; with softcap
they become ``softcap * tanh(scores / softcap)`` before masking (``attention_ref`` of flash-attn's
test_flash_attn.py); causal and local masks are aligned to the bottom-right corner
(``AttentionArgs.key_bounds``), and so is FlashAttention-3's chunked attention (``attention_chunk``: a row
attends the keys of its chunk only, FA3's hopper/test_util.py ``construct_chunk_mask``, within the window);
q head h reads kv head ``h // ngroups``; ALiBi adds ``AttentionArgs.alibi_bias`` to the masked scores
(test_flash_attn.py's ``attn_bias_from_alibi_slopes``); dropout zeroes the probabilities its keep mask
(``AttentionArgs.keep_mask``, the kernel's own philox pattern) drops after the row sums are taken and scales
O by ``1 / (1 - dropout_p)``, as flash-attn's ``attention_ref`` with the kernel's ``dropout_mask``; a row with
no key to attend gives
out 0 and LSE +inf (the kernel's early exit and ``normalize_softmax_lse``: ``sum == 0`` gives ``INFINITY``,
and the split-KV combine maps all -inf partial LSEs to +inf too); ``seqlen_k == 0`` likewise. LSE is the
natural-log logsumexp of the (softcapped, scaled) scores of a row. Work is vectorised over batch and heads
and chunked over query rows so that memory stays bounded for long sequences.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass

import numpy as np

from flashsim.attention.args import AttentionArgs, _Summary, to_numpy
from flashsim.errors import bad_argument

_CHUNK_ELEMENTS = 1 << 22  # scores per chunk of query rows (32 MiB of float64)
ACCUMULATORS = ("f32", "f16")
MMA_K = 16  # k-depth of one mma.m16n8k16: the unit of rounding in the f16-accumulator model


def _inputs(q, k, v, args: AttentionArgs) -> list[np.ndarray]:
    """q, k, v as numpy arrays, checked against ``args`` (shape and dtype)."""
    if not isinstance(args, AttentionArgs):
        raise bad_argument("args", args, "expected an AttentionArgs (from check_args)")
    arrays = []
    for name, x, shape in (("q", q, args.q_shape), ("k", k, args.kv_shape), ("v", v, args.v_shape)):
        a = to_numpy(x, name)
        if a.shape != shape or a.dtype != args.np_dtype:
            raise bad_argument(name, _Summary(a), f"does not match args: expected shape {shape} of {args.dtype}")
        arrays.append(a)
    return arrays


def _matmul(a: np.ndarray, b: np.ndarray, acc16: bool) -> np.ndarray:
    """a @ b; with ``acc16``, a model of f16 accumulation: each 16-deep slice of the contraction is summed
    in float32, added to the running f16 sum and rounded to f16 (RN), as an mma with an f16 D rounds once
    per instruction. A model for precision estimates, not a bit-exact mma."""
    if not acc16:
        return a @ b
    acc = np.zeros(a.shape[:-1] + b.shape[-1:], np.float32)
    with np.errstate(over="ignore"):  # f16 overflow gives inf, as the mma does
        for c in range(0, a.shape[-1], MMA_K):
            acc = (acc + a[..., c:c + MMA_K] @ b[..., c:c + MMA_K, :]).astype(np.float16).astype(np.float32)
    return acc


def _attention(q, k, v, args: AttentionArgs, ftype, scale, softcap, p_dtype=None, acc16=False, keep_scale=None):
    """The shared body: out (b, sq, h, d) and lse (b, h, sq) in ``ftype``, one softmax over the whole row.

    ``p_dtype``: round the unnormalised probabilities to it before P @ V (the row sum uses the unrounded
    ones), as FA2 converts P to the input type for the second mma and sums in float32. ``keep_scale``: what O is
    multiplied by with dropout (1 / keep probability).
    """
    b, sq, h, d = args.q_shape
    sk, hk, g, dv = args.seqlen_k, args.heads_k, args.ngroups, args.headdim_v
    out = np.zeros((b, hk, g, sq, dv), ftype)
    lse = np.full((b, hk, g, sq), np.inf, ftype)
    if sq and sk:
        # (b, s, h, d) -> heads-major; q head hk*g + i reads kv head hk (broadcast over the group axis)
        qh = np.ascontiguousarray(q.astype(ftype).reshape(b, sq, hk, g, d).transpose(0, 2, 3, 1, 4))
        kt = np.ascontiguousarray(k.astype(ftype).transpose(0, 2, 3, 1))[:, :, None]  # (b, hk, 1, d, sk)
        vh = np.ascontiguousarray(v.astype(ftype).transpose(0, 2, 1, 3))[:, :, None]  # (b, hk, 1, sk, d)
        step = max(1, _CHUNK_ELEMENTS // (b * h * sk))
        for r0 in range(0, sq, step):
            rows = slice(r0, min(sq, r0 + step))
            with np.errstate(invalid="ignore", over="ignore", divide="ignore"):  # NaN/inf inputs propagate
                s = _matmul(qh[:, :, :, rows], kt, acc16) * scale
                if softcap:
                    s = softcap * np.tanh(s / softcap)  # before masking, as attention_ref does
                keep = args.key_mask(rows)  # (rows, sk), bottom-right aligned
                s = np.where(keep, s, -np.inf)
                bias = args.alibi_bias(rows)
                if bias is not None:
                    s = s + bias.reshape(b, hk, g, *bias.shape[2:]).astype(ftype)
                empty = ~keep.any(-1)[:, None]  # rows with no key: out 0, lse +inf
                m = np.where(empty, 0, s.max(-1, keepdims=True))
                p = np.exp(s - m)
                l = p.sum(-1, keepdims=True)
                if p_dtype is not None:
                    p = p.astype(p_dtype).astype(ftype)
                drop_keep = args.keep_mask(rows)  # (b, h, rows, sk) or None
                if drop_keep is not None:
                    p = np.where(drop_keep.reshape(b, hk, g, *drop_keep.shape[2:]), p, ftype(0))
                o = _matmul(p, vh, acc16)
                if keep_scale is not None:
                    o = o * keep_scale
                out[..., rows, :] = np.where(empty, 0, o / np.where(empty, 1, l))
                lse[..., rows] = np.where(empty, np.inf, m + np.log(l))[..., 0]
    return out.transpose(0, 3, 1, 2, 4).reshape(b, sq, h, dv), lse.reshape(b, h, sq)


def attention_reference(q, k, v, args: AttentionArgs,
                        kv: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(out, lse) in float64 from the inputs' exact values: the truth a kernel is measured against.

    Uses ``args.softmax_scale`` (the Python float asked for, not the kernel's float32 copy) and
    ``args.softcap``. Shapes: out (batch, seqlen_q, heads, headdim), lse (batch, heads, seqlen_q). A row
    with no key gives out 0 and lse +inf (FA2's convention); NaN inputs give NaN (the kernel instead
    writes lse +inf for a NaN row sum: a twin models that, the reference does not).
    """
    if getattr(args, "kvcache", None) is not None:  # (a bad args is reported by _inputs)
        return _kv_reference(attention_reference, q, k, v, args, kv, np.float64)
    q, k, v = _inputs(q, k, v, args)
    if args.varlen:
        return _per_sequence(attention_reference, q, k, v, args, np.float64)
    keep_scale = 1.0 / (1.0 - args.dropout_p) if args.dropout_p > 0 else None
    return _attention(q, k, v, args, np.float64, args.softmax_scale, args.softcap, keep_scale=keep_scale)


def rotary(x: np.ndarray, pos: np.ndarray, cos: np.ndarray, sin: np.ndarray, interleaved: bool) -> np.ndarray:
    """Rotary embedding of rows ``x`` (n, d) at table rows ``pos`` in float64, rounded to x's dtype: the first
    rotary_dim = 2 cos.shape[1] dims, in pairs (2i, 2i + 1) or (i, i + rotary_dim / 2)."""
    rd = 2 * cos.shape[1]
    f = x.astype(np.float64)
    c, s_ = cos[pos].astype(np.float64), sin[pos].astype(np.float64)
    out = f.copy()
    if interleaved:
        x0, x1 = f[:, 0:rd:2], f[:, 1:rd:2]
        out[:, 0:rd:2], out[:, 1:rd:2] = x0 * c - x1 * s_, x0 * s_ + x1 * c
    else:
        x0, x1 = f[:, :rd // 2], f[:, rd // 2:rd]
        out[:, :rd // 2], out[:, rd // 2:rd] = x0 * c - x1 * s_, x1 * c + x0 * s_
    with np.errstate(over="ignore"):
        return out.astype(x.dtype)


def kv_inputs(q, k_cache, v_cache, args: AttentionArgs, kv: dict | None, b: int, rotate=rotary):
    """Batch entry ``b`` of a KV-cache call as attention inputs: its queries, the cache's first cache_seqlens[b]
    keys and values then the appended ones (``kv``: k_new, v_new, rotary_cos, rotary_sin), rotated where the call
    has rotary tables, by ``rotate(x, pos, cos, sin, interleaved)`` (default :func:`rotary`, in float64; the fa2 twin
    passes the kernel's f32 rotation)."""
    kc = args.kvcache
    kv = kv or {}
    skc, n = kc.seqlens[b], kc.seqlen_knew
    e, r = kc.rows(b, np.arange(skc))
    kb, vb, qb = k_cache[e, r], v_cache[e, r], q[b]
    if n:
        kn, vn = kv["k_new"][b], kv["v_new"][b]
        if kc.rotary_dim:
            cos, sin, il = kv["rotary_cos"], kv["rotary_sin"], kc.rotary_interleaved
            kn = np.stack([rotate(kn[:, h], skc + np.arange(n), cos, sin, il) for h in range(kn.shape[1])], axis=1)
            rows = skc + (np.arange(args.seqlen_q) if (args.is_causal or args.is_local) else np.zeros(args.seqlen_q, int))
            qb = np.stack([rotate(qb[:, h], rows, cos, sin, il) for h in range(qb.shape[1])], axis=1)
        kb, vb = np.concatenate([kb, kn]), np.concatenate([vb, vn])
    return qb, kb, vb


def _kv_reference(fn, q, k, v, args: AttentionArgs, kv, out_dtype, **kw):
    """``fn`` on each batch entry of a KV-cache call (:func:`kv_inputs`): out (batch, seqlen_q, heads, headdim_v),
    lse (batch, heads, seqlen_q)."""
    q, k, v = (to_numpy(x, n) for x, n in ((q, "q"), (k, "k_cache"), (v, "v_cache")))
    out = np.zeros(args.out_shape, out_dtype)
    lse = np.zeros(args.lse_shape, np.float32 if out_dtype != np.float64 else np.float64)
    for b in range(args.batch):
        qb, kb, vb = kv_inputs(q, k, v, args, kv, b)
        o_b, l_b = fn(qb[None], kb[None], vb[None], args.sequence(b), **kw)
        out[b], lse[b] = o_b[0], l_b[0]
    return out, lse


def _per_sequence(fn, q, k, v, args: AttentionArgs, out_dtype, **kw):
    """``fn`` on each sequence of a packed call (``AttentionArgs.sequence``): out (total_q, heads, headdim_v),
    rows of no sequence 0, and lse (heads, total_q), +inf there."""
    out = np.zeros(args.out_shape, out_dtype)
    lse = np.full(args.lse_shape, np.inf, np.float32 if out_dtype != np.float64 else np.float64)
    sq, sk = args.seqlens()
    for b in range(args.batch):
        q0, k0 = args.cu_seqlens_q[b], args.cu_seqlens_k[b]
        o_b, l_b = fn(q[None, q0:q0 + sq[b]], k[None, k0:k0 + sk[b]], v[None, k0:k0 + sk[b]], args.sequence(b), **kw)
        out[q0:q0 + sq[b]], lse[:, q0:q0 + sq[b]] = o_b[0], l_b[0]
    return out, lse


def attention_lowp(q, k, v, args: AttentionArgs, *, acc: str = "f32",
                   kv: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(out in the input dtype, lse float32) of a plain attention at the kernel's precisions.

    Inputs as given; scores, scale (``args.softmax_scale_f32``), softcap, softmax and the row sum in
    float32 (numpy's exp, one pass with the row max); P unnormalised, rounded to the input dtype before
    P @ V as FA2 does; O divided by the float32 row sum and rounded (RN) to the input dtype, as the kernel
    writes it. ``acc="f16"`` (float16 inputs only) models f16 mma accumulators for Q K^T and P V (see
    ``_matmul``), as kernels with f16 accumulation use. Plays the role of flash-attn tests' ``out_pt``.
    """
    if acc not in ACCUMULATORS:
        raise bad_argument("acc", acc, f"expected one of {ACCUMULATORS}")
    if acc == "f16" and args.dtype != "float16":
        raise bad_argument("acc", acc, f"f16 accumulation needs float16 inputs (mma has no {args.dtype} "
                                       f"inputs with an f16 accumulator)")
    if getattr(args, "kvcache", None) is not None:
        return _kv_reference(attention_lowp, q, k, v, args, kv, args.np_dtype, acc=acc)
    q, k, v = _inputs(q, k, v, args)
    if args.varlen:
        return _per_sequence(attention_lowp, q, k, v, args, args.np_dtype, acc=acc)
    cap = np.float32(args.softcap) if args.softcap > 0 else 0.0
    keep_scale = args.params_rp_dropout if args.dropout_p > 0 else None
    out, lse = _attention(q, k, v, args, np.float32, args.softmax_scale_f32, cap, p_dtype=args.np_dtype,
                          acc16=acc == "f16", keep_scale=keep_scale)
    with np.errstate(over="ignore"):
        return out.astype(args.np_dtype), lse


# ---------------------------------------------------------------------------------------------------
# flash-attn's acceptance rule


@dataclass(frozen=True)
class RuleResult:
    """Outcome of the rule; truthy when it passed. ``bound = 2 * max_err_lowp + atol``."""

    passed: bool
    max_err: float
    max_err_lowp: float
    bound: float

    def __bool__(self) -> bool:
        return self.passed

    def __str__(self) -> str:
        verdict = "passes" if self.passed else "FAILS"
        return (f"{verdict}: max|out - ref| = {self.max_err:.3e} vs bound 2 * max|out_lowp - ref| + atol "
                f"= {self.bound:.3e} (max|out_lowp - ref| = {self.max_err_lowp:.3e})")


def _as_f64(x, name: str) -> np.ndarray:
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        x = to_numpy(x, name) if str(x.dtype) in ("torch.float16", "torch.bfloat16") else x.detach().cpu().numpy()
    a = np.asarray(x)
    if a.dtype.kind not in "fiu" and a.dtype.name != "bfloat16":
        raise bad_argument(name, _Summary(a), "expected a numeric array")
    return a.astype(np.float64)


def max_abs_diff(a: np.ndarray, b: np.ndarray) -> float:
    """max |a - b| where equal values (equal infinities, NaN against NaN) count 0 and any other NaN inf."""
    with np.errstate(invalid="ignore"):
        d = np.abs(a - b)
        d = np.where((a == b) | (np.isnan(a) & np.isnan(b)), 0.0, d)
    d = np.where(np.isnan(d), np.inf, d)
    return float(d.max()) if d.size else 0.0


def passes_flash_attn_rule(out, ref, out_lowp, *, atol: float = 1e-5) -> RuleResult:
    """flash-attn's test rule, max|out - ref| <= 2 * max|out_lowp - ref| + atol (its test_flash_attn.py
    asserts it with atol 0 in test_flash_attn_output and 1e-5 in test_flash_attn_causal; the issue asks 1e-5).

    ``ref`` is the float64 truth (``attention_reference``), ``out_lowp`` a plain attention at the kernel's
    precisions (``attention_lowp``). An error that is not finite never passes.
    """
    arrays = [_as_f64(x, name) for name, x in (("out", out), ("ref", ref), ("out_lowp", out_lowp))]
    for name, a in zip(("out", "out_lowp"), (arrays[0], arrays[2])):
        if a.shape != arrays[1].shape:
            raise bad_argument(name, _Summary(a), f"must have the shape of ref {arrays[1].shape}")
    atol = float(atol)
    if not atol >= 0:
        raise bad_argument("atol", atol, "expected a number >= 0")
    err, err_lowp = max_abs_diff(arrays[0], arrays[1]), max_abs_diff(arrays[2], arrays[1])
    bound = 2.0 * err_lowp + atol
    return RuleResult(passed=math.isfinite(err) and err <= bound, max_err=err, max_err_lowp=err_lowp,
                      bound=bound)
