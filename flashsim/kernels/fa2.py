"""Twin of gpu/kernels/fa2.cu (seed 000's FlashAttention-2 forward): the same floating-point instructions in
the same order on the same values, for a batch of CTAs at once.

The SASS below is what nvcc 13.0 emits for fa2.cu with ``--use_fast_math`` for sm_90 (read with
``cuobjdump -sass``); every f32 instruction is .FTZ.

- S = Q K^T: mma.m16n8k16 f32 chained over the 16-wide slices of the (zero-padded) head dim, from +0.
- softcap: ``FMUL.FTZ s, s, softcap ; MUFU.TANH`` (tanh.approx.f32).
- masks: ``FSEL s, s, -INF`` where the column is past seqlen_k or outside the window.
- row max: FMNMX.FTZ over the lane's values in register order (starting from the running max after the
  first step), then with the lanes xor 2 and xor 1.
- ``max_scaled``: ``FSETP.NEU.FTZ m, -INF ; FMUL.FTZ m, scale_log2 ; FSEL .., RZ``.
- rescale (after the first step): ``cur = (Check_inf && m == -inf) ? 0 : m``; ``FADD.FTZ -cur + prev ;
  FMUL.FTZ scale_log2 ; MUFU.EX2``; O *= c (FMUL.FTZ); the running sum's ``l *= c`` is contracted into the
  first add: ``FFMA.FTZ l, c, l, P0`` (an instance whose spec says ``fma_rescale=False``: ``FMUL.FTZ l, c, l ;
  FADD.FTZ l, P0, l``), then FADD.FTZ for the other values in register order.
- ``P = exp2f(S * scale_log2 - max_scaled)``: ``FFMA.FTZ t, s, scale_log2, -max_scaled ; MUFU.EX2``
  (ex2.approx.ftz.f32); P -> 16 bits: F2FP (cvt.rn pairs); O += P V: mma f32 over the 16-key slices.
- normalize: the sum over the quad (FADD.FTZ with xor 2, then xor 1); ``FSETP.NE.FTZ sum, 0`` (a zero or
  NaN sum is an empty row: inv = 1, lse = +inf); ``inv = MUFU.RCP sum`` (rcp.approx.ftz.f32); ``lse =
  FFMA.FTZ m, scale_softmax, FMUL.FTZ(MUFU.LG2 sum, ln 2)``; O *= inv (FMUL.FTZ); O -> 16 bits (F2FP).

CTAs that share the grid's m_block share the KV range, masks and step count; a batch may mix m_blocks: each
CTA carries its own n_block per step and leaves the batch when its range is done. Values are kept per CTA
as (rows, columns) tiles of f32 :class:`flashsim.numerics.cfloat.Float` under ``--use_fast_math`` (so each
line of the softmax reads as fa2.cu's and runs the instructions above); ``flashsim.trace.record`` maps them to
each lane's registers (the mma fragment layouts) at every FS_TRACE point of fa2.cu, so a twin run records the
events the traced CUDA build does.

The tiles (kBlockM, kBlockN) come from the kernel's spec (flashsim.kernels.spec: "fa2" and its other
configurations "fa2_sm8x" and "fa2_chunked") through :class:`Problem`. The arithmetic of a row does not
depend on kBlockM; the KV range of an m_block and the number of masked steps do. ``Problem.attention_chunk``
(fa2.cu's kChunked instances, "fa2_chunked"): FlashAttention-3's chunked attention, which narrows the KV
range to the chunks of the CTA's rows and masks every step, each row to its own chunk.

Packed sequences (flash_attn_varlen_func, fa2.cu's kExt build with cu_seqlens): each sequence runs as a launch of
its own (``simulate``: its lengths, its batch index for the philox offsets and ALiBi row, flash-attn's Is_even_MN
off, the launch's window). Split-KV ("fa2_splitkv", fa2.cu's kSplit build, flash-attn's
compute_attn_1rowblock_splitkv): split i of n takes KV blocks [i per, (i + 1) per) of the launch's
ceil(seqlen_k / kBlockN), per = ceil(that / n); an empty range writes O 0 and LSE -inf; the masked steps check
for -inf rows when causal, local or not Is_even_MN (the launch's: also off for a local window, ALiBi, a padded
head dim or head dims above 128); with n > 1 each split writes f32 O and its LSE, and :func:`combine` (fa2.cu's
combine kernel, flash-attn's combine_attn_seqk_parallel) merges them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import numpy as np

from flashsim.attention.args import round_multiple
from flashsim.attention.reference import kv_inputs as kv_entry
from flashsim.errors import bad_argument
from flashsim.kernels.spec import fa2_smem_layout as smem_layout  # noqa: F401 (the layout smem_off computes)
from flashsim.kernels.spec import get
from flashsim.kernels.common import (MMA_TYPE, NEG_INF, POS_INF, XOR, CtaJob, narrow, quad_merge, quad_split, run_job,
                                     widen)
from flashsim.numerics.cfloat import FAST_MATH as F  # fa2.cu is built with --use_fast_math
from flashsim.numerics.cfloat import __logf, exp2f, expf, fmaxf, fmul_rn, tanh_approx, where
from flashsim.numerics import sfu
from flashsim.numerics.mma import gemm
from flashsim.numerics.philox import keep_tiles
from flashsim.swizzle import cute_swizzle
from flashsim.trace.record import acc_index, active, quad_index
from flashsim.trace.spec import array_names


_LN2 = 0x3F317218  # 0.69314718246459960938f, __logf's ln 2


def smem_offset(r, c, rows: int) -> np.ndarray:
    """The element offset fa2.cu's ``smem_off<rows>(r, c)`` computes (equal to ``smem_layout``)."""
    r, c = np.asarray(r), np.asarray(c)
    x = 512 * (r // 8 + (rows // 8) * (c // 64)) + 64 * (r % 8) + c % 64  # the (8, 64) atoms, column-major
    return cute_swizzle(x, 3, 3, 3)


@dataclass(frozen=True)
class Problem:
    """The launch: the instance's tiles, shapes, flags and the float32 scalars fa2.cu receives."""

    batch: int
    heads: int
    heads_k: int
    seqlen_q: int
    seqlen_k: int
    headdim: int          # the kernel instance's kHeadDim (inputs are zero-padded to it)
    dtype: str
    scale_softmax: np.float32
    scale_softmax_log2: np.float32
    softcap: np.float32   # softmax_scale / cap, 0 when off
    window_left: int
    window_right: int
    is_causal: bool
    is_local: bool
    block_m: int          # kBlockM: query rows of a CTA
    block_n: int          # kBlockN: keys of a KV step
    warps: int            # warps of a CTA: warp w owns rows 16 w + 16 warps m + (0..15)
    fma_rescale: bool = True  # l *= c contracted into the first add (flashsim.kernels.spec.Tiles)
    attention_chunk: int = 0  # C of the kChunked instances (FA3's attention_chunk), 0: off
    headdim_v: int | None = None  # V's and O's head dim when it differs from Q's and K's (fa4h's qk 192 / v 128)
    # fa2.cu's kExt instances (flashsim.numerics.philox): ALiBi slopes already divided by scale_softmax as the
    # kernel divides them (f32 bit patterns per (batch, head)), dropout and the returned probabilities
    alibi: tuple[tuple[int, ...], ...] | None = None
    dropout: bool = False
    p_dropout_u8: int = 255
    rp_dropout: np.float32 = np.float32(1.0)
    philox_seed: int = 0
    philox_offset: int = 0
    return_softmax: bool = False
    # one sequence of a packed launch (AttentionArgs.sequence): its batch index in the launch (philox offsets,
    # ALiBi row); its lengths are seqlen_q and seqlen_k (the launch's Is_even_MN, off, is in kernel_even_mn)
    batch_offset: int = 0
    # the launch's Is_even_MN, which the kExt and kSplit builds take (launch_even_mn); None: fa2.cu's other builds
    # compute it
    kernel_even_mn: bool | None = None
    # fa2.cu's kSplit instances ("fa2_splitkv"): split n_split of num_splits, over the KV blocks of the launch's
    # seqlen_k; with num_splits > 1 the CTAs write f32 O and an LSE of -inf for empty rows (the combine's input)
    split_kernel: bool = False
    n_split: int = 0
    num_splits: int = 1
    split_seqlen_k: int | None = None  # the launch's seqlen_k the splits divide (a KV cache's capacity), None: seqlen_k

    @property
    def split_out(self) -> bool:
        """The CTAs write a split's f32 O and LSE (more than one split)."""
        return self.split_kernel and self.num_splits > 1

    @property
    def dv(self) -> int:
        """The head dim of V and O."""
        return self.headdim if self.headdim_v is None else self.headdim_v

    @property
    def local_mask(self) -> bool:
        """fa2.cu's FA2_LOCAL_MASK: a local window or a chunk, so that every KV step is masked."""
        return self.is_local or self.attention_chunk > 0

    @property
    def rows_per_m(self) -> int:
        return 16 * self.warps

    @property
    def m_tiles(self) -> int:
        return self.block_m // self.rows_per_m

    @property
    def m_blocks(self) -> int:
        return -(-self.seqlen_q // self.block_m)

    @property
    def even_mn(self) -> bool:
        """fa2.cu's even_mn: the launch's Is_even_MN on the kExt and kSplit builds (``kernel_even_mn``), else both
        seqlens multiples of the tiles at head dims up to 128."""
        if self.kernel_even_mn is not None:
            return self.kernel_even_mn
        return self.headdim <= 128 and self.seqlen_q % self.block_m == 0 and self.seqlen_k % self.block_n == 0

    def n_block_range(self, m_block) -> tuple[np.ndarray, np.ndarray]:
        """(n_block_min, n_block_max) of each m_block, with C++ integer division (truncation toward 0)."""
        m_block = np.asarray(m_block, np.int64)
        bn = self.block_n
        cap = self.seqlen_k if self.split_seqlen_k is None else self.split_seqlen_k
        per = -(-(-(-cap // bn)) // self.num_splits)  # a split's blocks (kSplit), of the launch's seqlen_k
        split_lo = self.n_split * per
        if self.is_local:
            lo = np.maximum(split_lo, _cdiv_trunc(m_block * self.block_m + self.seqlen_k - self.seqlen_q
                                                  - self.window_left, bn))
        else:
            lo = np.full_like(m_block, split_lo)
        hi = np.full_like(m_block, min(_cdiv_trunc(self.seqlen_k + bn - 1, bn), split_lo + per))
        if self.is_causal or self.is_local:
            hi = np.minimum(hi, _cdiv_trunc((m_block + 1) * self.block_m + self.seqlen_k - self.seqlen_q
                                            + self.window_right + bn - 1, bn))
        if self.attention_chunk > 0:  # FA3's block.h: the chunk of the first row to the chunk of the last
            c = self.attention_chunk
            lo = np.maximum(lo, _cdiv_trunc((m_block * self.block_m + self.seqlen_k - self.seqlen_q) // c * c, bn))
            end = ((m_block + 1) * self.block_m + self.seqlen_k - self.seqlen_q - 1) // c * c + c
            hi = np.minimum(hi, _cdiv_trunc(end + bn - 1, bn))
        return lo, hi

    @property
    def s_dmask_shape(self) -> tuple[int, int, int, int]:
        """The returned probabilities: (batch, heads, seqlen_q and seqlen_k rounded up to 128)."""
        return (self.batch, self.heads, round_multiple(self.seqlen_q, 128), round_multiple(self.seqlen_k, 128))

    def cta_coords(self, idx) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(m_block, head, batch) of the CTAs ``idx`` (linear over the grid, m_block fastest)."""
        idx = np.asarray(idx)
        return idx % self.m_blocks, (idx // self.m_blocks) % self.heads, idx // (self.m_blocks * self.heads)

    @property
    def n_masking_steps(self) -> int:
        if not self.is_causal and not self.local_mask:
            return 1
        steps = -(-self.block_m // self.block_n)
        return steps if self.even_mn else steps + 1


def _cdiv_trunc(a, b):
    """C++ ``a / b`` for ints (truncation toward zero)."""
    a = np.asarray(a, np.int64)
    q = np.abs(a) // b
    return np.where(a < 0, -q, q)


def alibi_slopes(args) -> tuple[tuple[int, ...], ...] | None:
    """The ALiBi slope of each (batch, head) as fa2.cu computes it: ``slopes[bidb * stride + head] /
    scale_softmax``, under --use_fast_math one ``FMUL.FTZ slope, MUFU.RCP(scale_softmax)``; f32 bit patterns."""
    a = args.alibi_array
    if a is None:
        return None
    rcp = 1.0 / F(np.float32(args.params_scale_softmax).view(np.uint32))
    bits = (F(a.view(np.uint32)) * rcp).bits
    return tuple(tuple(int(x) for x in row) for row in bits)


def problem(inst, args) -> Problem:
    """The launch of the instance ``inst`` (flashsim.kernels.spec.Instance) on a call (AttentionArgs)."""
    left, right = args.params_window_size
    seed, offset = args.rng_state or (0, 0)
    return Problem(batch=args.batch, heads=args.heads, heads_k=args.heads_k, seqlen_q=args.seqlen_q,
                   seqlen_k=args.seqlen_k, headdim=inst.headdim, dtype=args.dtype,
                   scale_softmax=np.float32(args.params_scale_softmax),
                   scale_softmax_log2=np.float32(args.params_scale_softmax_log2),
                   softcap=np.float32(args.params_softcap), window_left=int(left), window_right=int(right),
                   is_causal=bool(args.is_causal), is_local=bool(args.is_local), block_m=inst.block_m,
                   block_n=inst.block_n, warps=inst.compute_warps, fma_rescale=inst.fma_rescale,
                   attention_chunk=int(args.attention_chunk),
                   headdim_v=None if inst.headdim_v == inst.headdim else inst.headdim_v,
                   alibi=alibi_slopes(args), dropout=args.dropout_p > 0,
                   p_dropout_u8=int(args.params_p_dropout_in_uint8_t), rp_dropout=np.float32(args.params_rp_dropout),
                   philox_seed=int(seed), philox_offset=int(offset), return_softmax=bool(args.return_softmax),
                   kernel_even_mn=(launch_even_mn(inst, args) if inst.spec.split_kernel or inst.uses_ext(args)
                                   else None),
                   split_kernel=inst.spec.split_kernel, num_splits=args.num_splits if inst.spec.split_kernel else 1)


def launch_even_mn(inst, args) -> bool:
    """flash-attn's Is_even_MN of a launch as run_flash_fwd and run_flash_splitkv_fwd template it
    (flash_fwd_launch_template.h:79 and 120): both seqlens multiples of the tiles, no packed sequences or KV cache
    lengths (cu_seqlens), d the instance's (Is_even_K), no local window, no ALiBi, no returned probabilities, head
    dim at most 128."""
    return (not args.varlen and args.kvcache is None and args.seqlen_q % inst.block_m == 0
            and args.seqlen_k % inst.block_n == 0 and args.headdim_padded == inst.headdim and not args.is_local
            and args.alibi_slopes is None and not args.return_softmax and inst.headdim <= 128)


def problem_from_args(args, kernel: str = "fa2") -> Problem:
    """The launch of ``kernel`` (fa2 or another configuration of it) on a call (AttentionArgs)."""
    return problem(get(kernel).instance_for(args), args)


def _maps(pb: Problem):
    """Where each traced register lives in this twin's arrays (flashsim.trace.record): warp w's m-tile m
    starts at row 16 w + rows_per_m m."""

    bn, d, rm, mt = pb.block_n, pb.dv, pb.rows_per_m, pb.m_tiles
    w = pb.warps
    return dict(acc_s=acc_index(rm, mt, bn, bn // 8, warps=w), p=quad_index(rm, mt, bn // 4, warps=w),
                row=quad_index(rm, mt, 0, 4, warps=w), acc_o=acc_index(rm, mt, d, d // 8, warps=w),
                lse=quad_index(rm, mt, 0, 1, warps=w))


def _ctas(pb: Problem, q, k, v, idx, rec=None, hook=None):
    """Run the CTAs ``idx`` (linear over (m_block, head, batch), m_block fastest) to completion; returns their O
    tiles (g, block_m, dv) uint16 and LSE rows (g, block_m) uint32 (rows past seqlen_q included). ``rec`` (a
    flashsim.trace.record.Recorder) gets the events fa2.cu's FS_TRACE marks; ``hook(idx, step, steps)`` (a
    flashsim.kernels.common.StepHook) is called before each KV step (progress, cancellation)."""
    d, bm, bn, mt = pb.headdim, pb.block_m, pb.block_n, MMA_TYPE[pb.dtype]
    rec = active(rec, idx, pb.warps)
    mp = _maps(pb) if rec is not None else None
    m_block, head, bidb = pb.cta_coords(idx)
    head_k = head // (pb.heads // pb.heads_k)
    lo, hi = pb.n_block_range(m_block)
    g = idx.size
    rows = m_block[:, None] * bm + np.arange(bm)[None, :]                             # (g, bm)
    row_ok = rows < pb.seqlen_q
    empty = hi <= lo if (pb.split_kernel or pb.is_causal or pb.local_mask or not pb.even_mn) else np.zeros(g, bool)
    if rec is not None:
        rec.event("empty", idx[empty])
        rec.event("load_q", idx[~empty])
        rec.event("load_k", idx[~empty])

    # sQ: rows past seqlen_q are zero-filled
    qt = np.zeros((g, bm, d), np.uint16)
    rr = np.minimum(rows, pb.seqlen_q - 1)
    qt[:] = np.where(row_ok[..., None], q[bidb[:, None], rr, head[:, None], :], 0)

    acc_o = np.zeros((g, bm, pb.dv), np.uint32)
    row_max = np.zeros((g, bm, 4), np.uint32)
    row_sum = np.zeros((g, bm, 4), np.uint32)
    scale_log2 = pb.scale_softmax_log2
    live = ~empty
    probs = []  # return_softmax: (CTAs of the batch, n_block, 16-bit P tiles) of every step
    n_block = hi - 1
    cols = np.arange(bn)
    steps = int(np.max(np.where(live, hi - lo, 0), initial=0))
    for step in range(steps):
        if hook is not None:
            hook(idx, step, steps)
        act = np.nonzero(live & (n_block >= lo))[0]
        if act.size == 0:
            break
        nb = n_block[act]
        masking = step < pb.n_masking_steps
        first = step == 0
        ids = idx[act]
        if rec is not None:
            rec.event("load_v", ids)
        # K, V blocks (rows past seqlen_k zero-filled)
        keys = nb[:, None] * bn + cols[None, :]                                         # (a, bn)
        key_ok = keys < pb.seqlen_k
        kk = np.minimum(keys, pb.seqlen_k - 1)
        kb = np.where(key_ok[..., None], k[bidb[act, None], kk, head_k[act, None], :], 0).astype(np.uint16)
        vb = np.where(key_ok[..., None], v[bidb[act, None], kk, head_k[act, None], :], 0).astype(np.uint16)
        s = gemm(qt[act], np.ascontiguousarray(kb.transpose(0, 2, 1)), np.zeros((act.size, bm, bn), np.uint32),
                 atype=mt)
        if rec is not None:
            rec.event("mma_qk", ids, (s, mp["acc_s"]))
        if pb.softcap > 0:
            s = tanh_approx(F(s) * pb.softcap).bits
        if pb.alibi is not None:  # every step, before the masks: FFMA.FTZ s, float(col), +-slope
            slope = F(np.asarray(pb.alibi, np.uint32)[bidb[act], head[act]][:, None, None])
            c = keys[:, None, :]
            if pb.is_causal:
                s = (F(s) + F(c.astype(np.float32).view(np.uint32)) * slope).bits
            else:
                dist = np.abs(rows[act][:, :, None] + pb.seqlen_k - pb.seqlen_q - c)
                s = (F(s) - F(dist.astype(np.float32).view(np.uint32)) * slope).bits
        if (masking and (pb.is_causal or pb.local_mask or not pb.even_mn)) or (not masking and pb.local_mask):
            r = rows[act][:, :, None]
            c = keys[:, None, :]
            right = np.full(r.shape, pb.seqlen_k, np.int64)
            left = np.zeros(r.shape, np.int64)
            if pb.is_causal or pb.is_local:
                if pb.is_causal or pb.window_right >= 0:
                    right = np.minimum(pb.seqlen_k, r + 1 + pb.seqlen_k - pb.seqlen_q + pb.window_right)
                if pb.is_local and pb.window_left >= 0:
                    left = np.maximum(0, r + pb.seqlen_k - pb.seqlen_q - pb.window_left)
            if pb.attention_chunk > 0:  # the row's chunk [start, start + C) bounds both sides
                start = (r + pb.seqlen_k - pb.seqlen_q) // pb.attention_chunk * pb.attention_chunk
                left, right = np.maximum(left, start), np.minimum(right, start + pb.attention_chunk)
            s = np.where((c >= right) | (c < left), NEG_INF, s).astype(np.uint32)
        if rec is not None:
            rec.event("mask", ids, (s, mp["acc_s"]))
            rec.event("load_k", ids[nb > lo[act]])
        sv = F(quad_split(s))                                                           # (a, bm, 4, bn/4)
        n_v = sv.shape[-1]
        prev, ao = F(row_max[act]), F(acc_o[act])
        mx = sv[..., 0] if first else fmaxf(prev, sv[..., 0])
        for c_ in range(1, n_v):
            mx = fmaxf(mx, sv[..., c_])
        for x in (2, 1):
            mx = fmaxf(mx, mx[..., XOR[x]])
        if not first:
            check_inf = ((pb.is_causal or pb.local_mask or (pb.split_kernel and not pb.even_mn)) if masking
                         else pb.local_mask)
            cur = where(mx == -np.inf, 0.0, mx) if check_inf else mx
            c = exp2f((prev - cur) * scale_log2)
            ao = ao * c[..., :1]
        max_scaled = where(mx == -np.inf, 0.0, mx * scale_log2)
        p = exp2f(sv * scale_log2 - max_scaled[..., None])
        if first:
            sm = p[..., 0] + p[..., 1]
        else:
            rescaled = c * F(row_sum[act]) if pb.fma_rescale else fmul_rn(c, F(row_sum[act]))
            sm = rescaled + p[..., 0] + p[..., 1]
        for c_ in range(2, n_v):
            sm = sm + p[..., c_]
        if rec is not None:
            rec.event("softmax", ids, (mx.bits, mp["row"]), (sm.bits, mp["row"]), (p.bits, mp["p"]),
                      (ao.bits, mp["acc_o"]))
        row_max[act] = mx.bits
        row_sum[act] = sm.bits
        p16 = narrow(quad_merge(p.bits), pb.dtype)
        if pb.dropout or pb.return_softmax:
            keep = keep_tiles(pb.philox_seed, pb.philox_offset, pb.p_dropout_u8, pb.heads, bidb[act] + pb.batch_offset,
                              head[act],
                              m_block[act] * bm, nb * bn, bm, bn)
            if pb.return_softmax:  # the dropped ones with the sign bit flipped
                probs.append((act, nb, np.where(keep, p16, p16 ^ np.uint16(0x8000)).astype(np.uint16)))
            if pb.dropout:
                p16 = np.where(keep, p16, np.uint16(0)).astype(np.uint16)
        ao = gemm(p16, vb, ao.bits, atype=mt)
        if rec is not None:
            rec.event("mma_pv", ids, (ao, mp["acc_o"]))
        acc_o[act] = ao
        n_block[act] -= 1

    # normalize_softmax_lse
    sm = F(row_sum)
    for x in (2, 1):
        sm = sm + sm[..., XOR[x]]
    sm = sm[..., 0]
    empty_row = (sm == 0.0) | (sm != sm)                                            # FSETP.NE.FTZ: subnormals too
    inv = where(empty_row, 1.0, 1.0 / sm)
    if pb.dropout:
        inv = inv * pb.rp_dropout
    lse_empty = -np.inf if pb.split_out else np.inf  # a split's empty row: -inf, which the combine skips
    lse_v = where(empty_row, lse_empty, F(row_max)[..., 0] * pb.scale_softmax + __logf(sm)).bits
    acc_o = (F(acc_o) * inv[..., None]).bits
    if rec is not None:
        full = np.nonzero(~empty)[0]
        lse_f, acc_f = np.ascontiguousarray(lse_v[full]), np.ascontiguousarray(acc_o[full])
        rec.event("normalize", idx[full], (lse_f, mp["lse"]), (acc_f, mp["acc_o"]))
        lse_v[full], acc_o[full] = lse_f, acc_f
        rec.event("store_o", idx[full])
    out = acc_o.copy() if pb.split_out else narrow(acc_o, pb.dtype)  # a split's O stays f32
    # empty CTAs: O = 0, lse = +inf (a split's: -inf)
    out[empty] = 0
    lse_v[empty] = NEG_INF if pb.split_out else POS_INF
    if pb.return_softmax:
        return out, lse_v, probs
    return out, lse_v


def cta_batch(pb: Problem, inputs: dict, idx: np.ndarray, hook=None, rec=None):
    """The O tiles and LSE rows of the CTAs ``idx`` (:func:`_ctas` on ``inputs`` q, k, v): what a batch computes
    wherever it runs (flashsim.kernels.common.CtaJob)."""
    return _ctas(pb, inputs["q"], inputs["k"], inputs["v"], idx, rec, hook)


def _store(pb: Problem, o: np.ndarray, lse: np.ndarray, idx: np.ndarray, result, s_dmask=None) -> None:
    """Write a batch's O tiles and LSE rows into ``o`` and ``lse`` (the rows below seqlen_q), and with
    return_softmax its P tiles into ``s_dmask`` (every row of the tile: S_dmask has seqlen_q rounded up to 128)."""
    out, lse_v = result[:2]
    m_block, head, bidb = pb.cta_coords(idx)
    if s_dmask is not None:
        for act, nb, tile in result[2]:
            r = m_block[act, None] * pb.block_m + np.arange(pb.block_m)[None, :]
            c = nb[:, None] * pb.block_n + np.arange(pb.block_n)[None, :]
            s_dmask[bidb[act, None, None], head[act, None, None], r[:, :, None], c[:, None, :]] = tile
    rows = m_block[:, None] * pb.block_m + np.arange(pb.block_m)[None, :]
    sel = np.nonzero(rows < pb.seqlen_q)
    o[bidb[sel[0]], rows[sel], head[sel[0]], :] = out[sel]
    lse[bidb[sel[0]], head[sel[0]], rows[sel]] = lse_v[sel]


def forward(pb: Problem, q, k, v, *, batch: int | None = None, threads: int | None = None, progress=None,
            rec=None, cluster=None):
    """O (uint16, q's shape) and LSE (uint32 f32 patterns, (batch, heads, seqlen_q)), and with return_softmax
    S_dmask (uint16), for q (batch, seqlen_q,
    heads, headdim) and k, v (batch, seqlen_k, heads_k, headdim) as 16-bit patterns, headdim == the
    instance's kHeadDim (zero-padded). The CTAs run in batches on ``threads`` threads, or on the workers of
    ``cluster`` (or of an enclosing ``with flashsim.cluster.Cluster(...)``): the same bits either way."""
    for name, x, d in (("q", q, pb.headdim), ("k", k, pb.headdim), ("v", v, pb.dv)):
        if np.asarray(x).dtype != np.uint16 or np.asarray(x).ndim != 4 or x.shape[-1] != d:
            raise bad_argument(name, getattr(x, "shape", x), f"expected uint16 patterns (batch, seqlen, heads, {d})")
    o = np.zeros((*q.shape[:-1], pb.dv), np.uint32 if pb.split_out else np.uint16)  # a split's O: f32 bits
    lse = np.zeros((pb.batch, pb.heads, pb.seqlen_q), np.uint32)
    # return_softmax: S_dmask (batch, heads, seqlen_q and seqlen_k rounded up to 128); tiles no CTA visits
    # stay 0 (flash-attn leaves them as torch.empty left them)
    s_dmask = np.zeros(pb.s_dmask_shape, np.uint16) if pb.return_softmax else None
    n_ctas = pb.m_blocks * pb.heads * pb.batch
    # about 8 KV steps of kBlockM x kBlockN scores per CTA in flight: keep a batch near 64 CTAs
    job = CtaJob(cta_batch if rec is None else functools.partial(cta_batch, rec=rec), pb,
                 {"q": q, "k": k, "v": v}, lambda idx, res: _store(pb, o, lse, idx, res, s_dmask), n_ctas,
                 batch or 64,
                 local_only=None if rec is None else "a trace recorder sees the CTAs in order, one batch at a time")
    run_job(job, threads=threads, progress=progress, cluster=cluster)
    return (o, lse) if s_dmask is None else (o, lse, s_dmask)


def check(q, k, v, softmax_scale=None, kernel: str = "fa2", **kw):
    """flash_attn_func's checks plus the instance limits of ``kernel`` (head dims up to its largest
    instance). Returns the AttentionArgs."""
    from flashsim.attention import check_args

    spec = get(kernel)
    args = check_args(q, k, v, softmax_scale=softmax_scale, **kw)
    spec.check_supported(args)
    spec.instance_for(args)
    return args


def _pad(x, d: int | None) -> np.ndarray:
    """16-bit patterns of ``x``, zero-padded along the last axis to ``d`` (None: as they are)."""
    x = np.ascontiguousarray(np.asarray(x)).view(np.uint16)
    if d is not None and x.shape[-1] != d:
        x = np.concatenate([x, np.zeros((*x.shape[:-1], d - x.shape[-1]), np.uint16)], axis=-1)
    return x


def pad_inputs(args, q, k, v, kernel: str = "fa2"):
    """16-bit patterns zero-padded to the instance's head dim (what FA2's predicated copy leaves in smem);
    v to the instance's V head dim."""
    inst = get(kernel).instance_for(args)
    return [_pad(x, d) for x, d in ((q, inst.headdim), (k, inst.headdim), (v, inst.headdim_v))]


def combine_layout(headdim: int, num_splits: int) -> tuple[int, int]:
    """(kBlockM, max_splits) of fa2.cu's combine kernel: 4 rows per CTA at head dims that are multiples of 128, 8 at
    multiples of 64, else 16 (flash_fwd_launch_template.h:140); the power of two >= num_splits, at least 2."""
    kbm = 4 if headdim % 128 == 0 else (8 if headdim % 64 == 0 else 16)
    return kbm, max(2, 1 << (num_splits - 1).bit_length())


def combine(pb: Problem, oaccum: np.ndarray, lse_accum: np.ndarray):
    """fa2.cu's combine kernel (flash-attn's combine_attn_seqk_parallel) on the splits' outputs: ``oaccum`` (splits,
    batch, seqlen_q, heads, dv) and ``lse_accum`` (splits, batch, heads, seqlen_q), f32 bits. Returns (O 16-bit
    (batch, seqlen_q, heads, dv), LSE f32 bits (batch, heads, seqlen_q)).

    Per row: R = min(128 / kBlockM, max_splits) threads (kBlockM 4 when the head dim is a multiple of 128, else
    8), thread r holding the splits r, r + R, ... (-inf past num_splits); FMNMX over its splits, then the butterfly
    over R; a max of -inf becomes 0; the sum of ``expf(lse - max)`` the same way (FADD.FTZ); lse = +inf for a zero or
    NaN sum, else ``logf(sum) + max`` (``FFMA.FTZ lg2(sum), ln 2, max``); each split's scale ``expf(lse_s - lse)``; O = FFMA.FTZ(scale_s, oaccum_s,
    O) over the splits in order from +0, then cvt.rn to 16 bits."""
    splits = pb.num_splits
    kbm, max_splits = combine_layout(pb.headdim, splits)
    r_threads = min(128 // kbm, max_splits)
    per_thread = -(-max_splits * kbm // 128)
    rows = pb.batch * pb.heads * pb.seqlen_q
    x = np.full((max_splits, rows), NEG_INF, np.uint32)
    x[:splits] = lse_accum.reshape(splits, rows)
    xs = F(x.reshape(per_thread, r_threads, rows))                       # [l, r]: split l R + r

    def reduce(vals, op):  # a thread's values in order, then the butterfly over the R threads (xor R / 2 down to 1)
        acc = vals[0]
        for x_ in vals[1:]:
            acc = op(acc, x_)
        off = r_threads // 2
        while off >= 1:
            acc = op(acc, acc[np.arange(r_threads) ^ off])
            off //= 2
        return acc[0]
    mx = reduce([xs[i] for i in range(per_thread)], fmaxf)
    mx = where(mx == -np.inf, 0.0, mx)
    sm = reduce([expf(xs[i] - mx) for i in range(per_thread)], lambda a, b: a + b)
    # logf(sum) + max under fast math: MUFU.LG2, then the ln 2 multiply contracted into the add (FFMA.FTZ)
    lg2 = F(sfu.lg2_approx_f32(sm.bits, ftz=True))
    logsum = where((sm == 0.0) | (sm != sm), np.inf, lg2 * F(np.uint32(_LN2)) + mx)
    scale = expf(F(x[:splits]) - logsum)                                  # (splits, rows)
    # Oaccum rows in (batch, heads, seqlen_q) order, as the scales
    oa = oaccum.transpose(0, 1, 3, 2, 4).reshape(splits, rows, -1)
    o = F(np.zeros(oa.shape[1:], np.uint32))
    for sp in range(splits):
        o = scale[sp][:, None] * F(oa[sp]) + o
    out = narrow(o.bits, pb.dtype).reshape(pb.batch, pb.heads, pb.seqlen_q, -1).transpose(0, 2, 1, 3)
    return np.ascontiguousarray(out), logsum.bits.reshape(pb.batch, pb.heads, pb.seqlen_q)


def _launch(pb: Problem, q, k, v, progress=None, **kw):
    """One launch of ``pb`` on padded inputs: :func:`forward`, or with more than one split each split and then
    :func:`combine`."""
    if not pb.split_out:
        return forward(pb, q, k, v, progress=progress, **kw)
    parts = [forward(replace(pb, n_split=i), q, k, v, progress=None if progress is None else
                     (lambda d, t, i=i: progress(i * t + d, pb.num_splits * t)), **kw)
             for i in range(pb.num_splits)]
    return combine(pb, np.stack([r[0] for r in parts]), np.stack([r[1] for r in parts]))


def rotate(x: np.ndarray, pos: np.ndarray, cos: np.ndarray, sin: np.ndarray, interleaved: bool, *,
           dtype: str) -> np.ndarray:
    """fa2.cu's rotate8 (flash-attn's rotary.h) on 16-bit rows ``x`` (n, d) at table rows ``pos`` (n,): columns
    below rotary_dim rotated in f32 and rounded back (cvt.rn), the others as they are. Interleaved: ``x0 c - x1 s``
    as FMUL.FTZ x1 s then FFMA.FTZ x0, c, -that; ``x0 s + x1 c`` as FMUL.FTZ x1 c then FFMA.FTZ x0, s, that. Otherwise
    ``x c + x_other (+-s)``: FMUL.FTZ x_other, +-s then FFMA.FTZ x, c, that."""
    rotary_dim = 2 * cos.shape[1]
    out = x.copy()
    c, sn = F(widen(cos[pos], dtype)), F(widen(sin[pos], dtype))
    xf = widen(x[:, :rotary_dim], dtype)
    if interleaved:
        x0, x1 = F(xf[:, 0::2]), F(xf[:, 1::2])
        real = x0 * c - fmul_rn(x1, sn)
        imag = x0 * sn + fmul_rn(x1, c)
        y = np.empty_like(xf)
        y[:, 0::2], y[:, 1::2] = real.bits, imag.bits
    else:
        h = rotary_dim // 2
        x0, x1 = F(xf[:, :h]), F(xf[:, h:])
        y = np.concatenate([(x0 * c + fmul_rn(x1, -sn)).bits, (x1 * c + fmul_rn(x0, sn)).bits], axis=1)
    out[:, :rotary_dim] = narrow(y, dtype)
    return out


def _appended_rows(sub: Problem, skc: int, n_new: int) -> np.ndarray:
    """The appended keys some CTA of a batch entry writes into the cache: of each (m_block, split) whose KV range
    is not empty, the rows [skc, skc + n_new) of its blocks from skc's on (fa2.cu's append); bool (n_new,)."""
    bn, written = sub.block_n, np.zeros(n_new, bool)
    for s_ in range(sub.num_splits):
        lo, hi = replace(sub, n_split=s_).n_block_range(np.arange(sub.m_blocks))
        for a, z in zip(lo, hi):
            if z > a:
                first = max(int(a), skc // bn) * bn
                written[max(first - skc, 0):max(int(z) * bn - skc, 0)] = True
    return written


def simulate(pb: Problem, args, q, k, v, *, threads: int | None = None, progress=None, rec=None, cluster=None,
             inputs: dict | None = None):
    """The launch of ``pb`` on padded 16-bit inputs, as :func:`forward` returns it, for every kind of call: a
    packed call runs each sequence as a launch of its own (``AttentionArgs.sequence``: its lengths, batch index
    and ALiBi row, flash-attn's BlockInfo), a split-KV call (``num_splits > 1``) each split and then the combine
    kernel, a KV-cache call each batch entry on its cache rows and appended keys (``inputs``: padded k_new, v_new
    and the rotary tables), returning the caches after the append third and fourth. Shapes of the call
    (``args.out_shape``, ``args.lse_shape``)."""
    kw = dict(threads=threads, rec=rec, cluster=cluster)
    if args.kvcache is not None:
        kv = args.kvcache
        o = np.zeros((*q.shape[:-1], pb.dv), np.uint16)
        lse = np.zeros(args.lse_shape, np.uint32)
        kc, vc = k.copy(), v.copy()
        for b in range(args.batch):
            # the cache's rows below cache_seqlens[b], then the appended ones (rotated as fa2.cu rotates them)
            qb, kb, vb = kv_entry(q, k, v, args, inputs, b, rotate=functools.partial(rotate, dtype=pb.dtype))
            sub = replace(pb, batch=1, seqlen_k=kb.shape[0], batch_offset=b,
                          split_seqlen_k=pb.seqlen_k, alibi=None if pb.alibi is None else (pb.alibi[b],))
            res = _launch(sub, qb[None], kb[None], vb[None], **kw)
            o[b], lse[b] = res[0][0], res[1][0]
            if kv.seqlen_knew:
                keys = kv.seqlens[b] + np.nonzero(_appended_rows(sub, kv.seqlens[b], kv.seqlen_knew))[0]
                e, r = kv.rows(b, keys)
                kc[e, r], vc[e, r] = kb[keys], vb[keys]
        return o, lse, kc, vc
    if args.varlen:
        o = np.zeros((*q.shape[:-1], pb.dv), np.uint16)
        lse = np.full(args.lse_shape, POS_INF, np.uint32)  # rows of no sequence: out 0, LSE +inf
        s_dmask = np.zeros(pb.s_dmask_shape, np.uint16) if pb.return_softmax else None
        cu_q, cu_k = args.cu_seqlens_q, args.cu_seqlens_k
        sq, sk = args.seqlens()
        totals = [-(-int(n) // pb.block_m) * pb.heads for n in sq]
        for b in range(args.batch):
            if sq[b] == 0:  # every CTA of the sequence returns at once
                continue
            done = sum(totals[:b])
            hook = None if progress is None else (lambda d, t, done=done: progress(done + d, sum(totals)))
            sub = replace(pb, batch=1, seqlen_q=int(sq[b]), seqlen_k=int(sk[b]), batch_offset=b,
                          alibi=None if pb.alibi is None else (pb.alibi[b],))
            q0, k0 = cu_q[b], cu_k[b]
            res = _launch(sub, q[None, q0:q0 + sq[b]], k[None, k0:k0 + sk[b]], v[None, k0:k0 + sk[b]],
                          progress=hook, **kw)
            o[q0:q0 + sq[b]] = res[0][0]
            lse[:, q0:q0 + sq[b]] = res[1][0]
            if s_dmask is not None:
                s_dmask[b, :, :res[2].shape[2], :res[2].shape[3]] = res[2][0]
        return (o, lse) if s_dmask is None else (o, lse, s_dmask)
    return _launch(pb, q, k, v, progress=progress, **kw)


def run(q, k, v, softmax_scale=None, *, kernel: str = "fa2", threads: int | None = None, progress=None, rec=None,
        workers: int | None = None, scheduler: str | None = None, client=None, **kw):
    """The twin of ``kernel`` (fa2 or another configuration of it) with flash_attn_func's conventions:
    returns (out with q's dtype and shape, lse float32), and with dropout and ``return_attn_probs`` the
    probabilities S_dmask (q's dtype, (batch, heads, seqlen_q and seqlen_k rounded up to 128)) third. Packed
    sequences (``cu_seqlens_q``, ``cu_seqlens_k``, ``max_seqlen_q``, ``max_seqlen_k``: flash_attn_varlen_func's) give
    out (total_q, heads, headdim) and lse (heads, total_q); ``num_splits`` > 1 (kernel fa2_splitkv) runs the
    splits and the combine kernel.

    Where the CTAs run: ``threads`` threads of this process (default: the cores); ``workers=N`` a local Dask
    cluster of N processes started for this call, ``scheduler='tcp://host:port'`` or ``client=`` an existing
    one (see :mod:`flashsim.cluster`). The bits do not depend on it."""
    from flashsim.cluster import using

    args = check(q, k, v, softmax_scale, kernel, **kw)
    if args.launches_nothing:  # mha_fwd (mha_varlen_fwd: max_seqlen_k == 0): no launch; out 0, lse +inf
        res = np.zeros(args.out_shape, args.np_dtype), np.full(args.lse_shape, np.inf, np.float32)
        if args.kvcache is not None:
            return res + (np.asarray(k).copy(), np.asarray(v).copy())
        return res + (np.zeros(args.s_dmask_shape, args.np_dtype),) if args.return_softmax else res
    pb = problem_from_args(args, kernel)
    qp, kp, vp = pad_inputs(args, q, k, v, kernel)
    with using(workers=workers, scheduler=scheduler, client=client) as cl:
        res = simulate(pb, args, qp, kp, vp, threads=threads, progress=progress, rec=rec, cluster=cl,
                       inputs=kv_inputs(args, kw, kernel))
    out = (np.ascontiguousarray(res[0][..., :args.headdim_v]).view(args.np_dtype), res[1].view(np.float32))
    if args.kvcache is not None:  # the caches after the append
        return out + tuple(np.ascontiguousarray(c[..., :d]).view(args.np_dtype)
                           for c, d in ((res[2], args.headdim), (res[3], args.headdim_v)))
    return out + (res[2].view(args.np_dtype),) if args.return_softmax else out


def kv_inputs(args, kw: dict, kernel: str = "fa2") -> dict:
    """A KV-cache call's other arrays as 16-bit patterns: k_new and v_new zero-padded to the instance's head dims,
    the rotary tables as given."""
    if args.kvcache is None:
        return {}
    inst = get(kernel).instance_for(args)
    dims = {"k_new": inst.headdim, "v_new": inst.headdim_v, "rotary_cos": None, "rotary_sin": None}
    return {name: _pad(kw[name], d) for name, d in dims.items() if kw.get(name) is not None}


# ---------------------------------------------------------------------------------------------- the kernel


def launch_args(inst, args, q, k, v, xp, **kw):
    """fa2.cu's parameters on the array module ``xp``: q, k, v zero-padded to the instance's head dim, o,
    lse, then the scalars of :class:`Problem` (and of the kChunked, kExt or kSplit entry points); ``fetch()``
    gives (out cropped to the head dim, lse[, S_dmask]), and for a KV-cache call (``kw``: k_new, v_new and the
    rotary tables) the caches after it too. A split-KV launch with more than one split returns a fourth item: the
    combine kernel's launch (entry point, grid, parameters)."""
    pb = problem(inst, args)
    d_q, d_k, d_v = (xp.asarray(x) for x in pad_inputs(args, q, k, v, inst.spec.name))
    d_o = xp.zeros(d_q.shape, d_q.dtype)
    # packed: rows of no sequence keep out 0 and LSE +inf
    d_lse = xp.asarray(np.full(args.lse_shape, np.inf if args.varlen else 0.0, np.float32))
    params = (d_q, d_k, d_v, d_o, d_lse, np.int32(pb.seqlen_q), np.int32(pb.seqlen_k), np.int32(pb.heads),
              np.int32(pb.heads_k), np.float32(pb.scale_softmax), np.float32(pb.scale_softmax_log2),
              np.float32(pb.softcap), np.int32(pb.window_left), np.int32(pb.window_right),
              np.int32(pb.is_causal), np.int32(pb.is_local))
    if "chunk" in inst.spec.features:  # the kChunked entry points take attention_chunk last
        params += (np.int32(pb.attention_chunk),)
    null = np.uint64(0)
    slopes = args.alibi_array
    d_slopes = xp.asarray(np.ascontiguousarray(slopes)) if slopes is not None else null
    d_p, post = None, ()
    kv, inputs = args.kvcache, kv_inputs(args, kw, inst.spec.name)

    def dev(x, dtype=np.int32):
        return null if x is None else xp.asarray(np.ascontiguousarray(np.asarray(x, dtype)))

    d_lens = dev(None if kv is None else kv.seqlens)
    if pb.split_kernel:  # the kSplit entry points (fa2.cu)
        d_oacc = d_lacc = null
        if pb.split_out:
            d_oacc = xp.zeros((pb.num_splits, *d_q.shape), np.float32)
            d_lacc = xp.zeros((pb.num_splits, *args.lse_shape), np.float32)
            kbm, max_splits = combine_layout(inst.headdim, pb.num_splits)
            rows = args.batch * args.heads * args.seqlen_q
            post = ((inst.combine_function(args.dtype), (-(-rows // kbm), 1, 1),
                     (d_oacc, d_lacc, d_o, d_lse, np.int32(args.batch), np.int32(args.heads), np.int32(args.seqlen_q),
                      np.int32(pb.num_splits), np.int32(max_splits))),)
        params += (d_slopes, np.int32(args.heads), d_oacc, d_lacc, np.int32(pb.kernel_even_mn), np.int32(args.batch))
        table = None if kv is None else kv.block_table
        page = 0 if kv is None else kv.page_block_size
        rows = page if table is not None else args.seqlen_k
        params += (d_lens, dev(None if kv is None else kv.batch_idx), dev(table),
                   np.int32(0 if table is None else len(table[0])), np.int32(page),
                   np.int64(rows * args.heads_k * inst.headdim),
                   dev(inputs.get("k_new"), np.uint16), dev(inputs.get("v_new"), np.uint16),
                   np.int32(0 if kv is None else kv.seqlen_knew), dev(inputs.get("rotary_cos"), np.uint16),
                   dev(inputs.get("rotary_sin"), np.uint16), np.int32(0 if kv is None else kv.rotary_dim),
                   np.int32(1 if kv is None else kv.rotary_interleaved))
    elif inst.uses_ext(args):  # the kExt entry points (fa2.cu's header)
        d_p = xp.zeros(args.s_dmask_shape, np.uint16) if args.return_softmax else None
        packed = [xp.asarray(np.asarray(c, np.int32)) for c in (args.cu_seqlens_q, args.cu_seqlens_k)] \
            if args.varlen else [null, null]
        params += (d_slopes, np.int32(args.heads),
                   np.int32(pb.dropout), np.uint32(pb.p_dropout_u8), np.float32(pb.rp_dropout),
                   np.uint64(pb.philox_seed), np.uint64(pb.philox_offset),
                   d_p if d_p is not None else null, np.int32(args.seqlen_q_rounded),
                   np.int32(args.seqlen_k_rounded), *packed, np.int32(args.total_q), d_lens,
                   np.int32(pb.kernel_even_mn))

    def fetch():
        out = np.ascontiguousarray(xp.asnumpy(d_o)[..., :args.headdim]).view(args.np_dtype)
        if kv is not None:
            return out, xp.asnumpy(d_lse), *(np.ascontiguousarray(xp.asnumpy(c)[..., :d]).view(args.np_dtype)
                                            for c, d in ((d_k, args.headdim), (d_v, args.headdim_v)))
        if d_p is not None:
            return out, xp.asnumpy(d_lse), xp.asnumpy(d_p).view(args.np_dtype)
        return out, xp.asnumpy(d_lse)

    return (params, fetch, None) + ((post,) if post else ())


#: every traced register is an f32 (flashsim.trace.spec.register_format)
REGISTER_FORMATS: dict[str, str] = {}


def trace_registers(inst, tag: str) -> list[str]:
    """What fa2.cu's FS_TRACE points record: the accumulators acc_s[m][n][e] (S, kBlockN / 8 n-tiles) and
    acc_o[m][n][e] (O, kHeadDim / 8 n-tiles), the row statistics row_max[m][i], row_sum[m][i] and lse[m][i],
    for the warp's m-tiles m < kBlockM / 64 (the first index stays when there is one)."""
    mt, nt, dt = inst.m_tiles, inst.block_n // 8, inst.headdim // 8
    acc_s, acc_o = array_names("acc_s", mt, nt, 4), array_names("acc_o", mt, dt, 4)
    return {
        "mma_qk": acc_s,
        "mask": acc_s,
        "softmax": array_names("row_max", mt, 2) + array_names("row_sum", mt, 2) + acc_s + acc_o,
        "mma_pv": acc_o,
        "normalize": array_names("lse", mt, 2) + acc_o,
    }.get(tag, [])


def trace_program(inst, steps: int) -> list[str]:
    """The tags a warp records for a CTA of ``steps`` KV steps (the longest path: the next K's load in
    every step)."""
    return (["load_q", "load_k"] + ["load_v", "mma_qk", "mask", "load_k", "softmax", "mma_pv"] * steps
            + ["normalize", "store_o"])


def tile_steps(inst, args) -> int:
    """CTAs x KV blocks of a launch: each m_block's KV range (masks shorten it)."""
    if args.seqlen_k == 0:
        return 0
    pb = problem(inst, args)
    lo, hi = pb.n_block_range(np.arange(pb.m_blocks))
    return int(np.maximum(hi - lo, 0).sum()) * args.heads * args.batch


def memory(inst, args, workers: int = 1) -> int:
    """Bytes a twin run allocates beyond the inputs: the padded copies, the outputs and the working arrays
    of about 64 CTAs per thread (or worker) in flight."""
    nq = args.batch * args.seqlen_q * args.heads * args.headdim
    nk = args.batch * args.seqlen_k * args.heads_k * args.headdim
    d, bm, bn = inst.headdim, inst.block_m, inst.block_n
    pad = (nq + 2 * nk) * d // args.headdim
    io = 2 * pad + 2 * nq * d // args.headdim + 4 * args.batch * args.heads * args.seqlen_q + 2 * nq
    per_cta = bm * d * 18 + bm * bn * 40 + bn * d * 12
    return io + per_cta * min(64 * workers, inst.ctas(args))
