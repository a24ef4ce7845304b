"""Which kernel flash-attn 2's ``mha_fwd`` launches for a call: its split-KV choice.

Facts from Dao-AILab/flash-attention at 0251105a2fb19d2957484b7f023cd8c115286ced, csrc/flash_attn/flash_api.cpp:

- ``num_splits_heuristic`` (lines 281-315): with ``batch_nheads_mblocks >= 0.8f * num_SMs`` one split; else,
  for n = 1 .. min(max_splits, num_SMs, num_n_blocks), a split count is eligible when it is 1 or
  ``ceil(num_n_blocks / n) != ceil(num_n_blocks / (n - 1))``, its efficiency ``n_waves / ceil(n_waves)`` with
  ``n_waves = float(batch_nheads_mblocks * n) / num_SMs`` (float arithmetic); the smallest eligible n whose
  efficiency is ``>= 0.85 * max_efficiency`` (a double product) wins.
- ``set_params_splitkv`` (lines 317-345): ``block_n`` is 256 up to head size 64, 128 up to 128, else 64;
  ``num_n_blocks = ceil(max_seqlen_k / block_n)``, ``num_m_blocks = ceil(max_seqlen_q / 64)``; the heuristic
  runs on ``batch * num_heads * num_m_blocks`` blocks, ``num_sm * 2`` "SMs" (128 threads per CTA) and at
  most 128 splits, and only without dropout (dropout keeps one kernel).
- ``mha_fwd`` (lines 431-438): with ``seqlen_q == 1``, more query heads than kv heads, no window, no dropout
  and no ALiBi, q is viewed as (batch, ngroups, heads_k, d) (``seqlenq_ngroups_swapped``): the heuristic sees
  seqlen_q = ngroups and heads_k heads. Each row's arithmetic is the same either way, so a twin runs the
  call unswapped with the split count this gives.
- ``run_mha_fwd`` (lines 261-273): more than one split runs the split-KV kernel and its combine kernel.
"""

from __future__ import annotations

import math

import numpy as np

from flashsim.errors import bad_argument

#: SMs of an H100 SXM (and H200), the default of :func:`num_splits`
H100_SMS = 132
#: the split-KV kernel's query rows per CTA (run_mha_fwd_splitkv_dispatch's kBlockM)
SPLITKV_BLOCK_M = 64


def splitkv_block_n(head_size: int) -> int:
    """The split-KV kernel's keys per KV step for a (padded) head size: 256 up to 64, 128 up to 128, else 64."""
    return 256 if head_size <= 64 else (128 if head_size <= 128 else 64)


def num_splits_heuristic(batch_nheads_mblocks: int, num_sms: int, num_n_blocks: int, max_splits: int) -> int:
    """flash-attn's ``num_splits_heuristic``, with its float32 and double arithmetic."""
    f32 = np.float32
    if f32(batch_nheads_mblocks) >= f32(0.8) * f32(num_sms):
        return 1
    max_splits = min(max_splits, num_sms, num_n_blocks)

    def eligible(n: int) -> bool:
        return n == 1 or -(-num_n_blocks // n) != -(-num_n_blocks // (n - 1))

    eff = {}
    for n in range(1, max_splits + 1):
        if eligible(n):
            waves = f32(f32(batch_nheads_mblocks * n) / f32(num_sms))
            eff[n] = f32(waves / f32(math.ceil(waves)))
    best = max(eff.values(), default=f32(0.0))
    for n in range(1, max_splits + 1):
        if n in eff and float(eff[n]) >= 0.85 * float(best):
            return n
    return 1


def num_splits(batch: int, heads: int, heads_k: int, seqlen_q: int, seqlen_k: int, head_size: int, *,
               window=(-1, -1), dropout_p: float = 0.0, alibi: bool = False, num_sms: int | None = None) -> int:
    """The split count ``mha_fwd`` picks for a call (after its normalisations: ``window`` is the normalised
    (left, right), -1 unbounded; ``head_size`` the head dim padded to a multiple of 8) on a GPU of ``num_sms``
    SMs (default :data:`H100_SMS`). Dropout always gives 1."""
    sms = H100_SMS if num_sms is None else num_sms
    if not isinstance(sms, int) or sms < 1:
        raise bad_argument("num_sms", num_sms, "expected a positive int")
    if dropout_p > 0.0:
        return 1
    if seqlen_q == 1 and heads > heads_k and window[0] < 0 and window[1] < 0 and not alibi:
        seqlen_q, heads = heads // heads_k, heads_k  # seqlenq_ngroups_swapped
    block_n = splitkv_block_n(head_size)
    n_blocks = -(-seqlen_k // block_n)
    m_blocks = -(-seqlen_q // SPLITKV_BLOCK_M)
    return num_splits_heuristic(batch * heads * m_blocks, 2 * sms, n_blocks, 128)
