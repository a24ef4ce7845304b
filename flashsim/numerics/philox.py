"""Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11) on numpy arrays of
counters, and FlashAttention-2's dropout pattern built from it.

The generator: a 128-bit counter (four 32-bit words c0..c3) and a 64-bit key (k0, k1). A round is

    (hi0, lo0) = 0xD2511F53 * c0,  (hi1, lo1) = 0xCD9E8D57 * c2      (32 x 32 -> 64-bit products)
    c = (hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0)

and the key is bumped by (0x9E3779B9, 0xBB67AE85) between rounds; ten rounds give the four output words.
This is curand's ``Philox4_32_10`` block function (``curand4`` after ``curand_init(seed, subsequence,
4 * offset)`` returns the block of counter (offset, subsequence)), and the one flash-attn's
csrc/flash_attn/src/philox.cuh computes, with the counter's low 64 bits ``offset`` and high 64 bits
``subsequence``, the key ``seed``. gpu/validate_fa2_features.py checks this module against curand on the GPU.

FlashAttention-2's dropout (Dao-AILab/flash-attention 0251105a, csrc/flash_attn/src):

- flash_api.cpp:142-148 (``set_params_fprop``): ``p_dropout`` is the keep probability ``1.f - dropout_p``
  (float arithmetic), ``p_dropout_in_uint8_t = uint8_t(floor(p_dropout * 255.0))``, ``rp_dropout =
  1.f / p_dropout``;
- flash_api.cpp:506-516 (``mha_fwd``): the generator's philox state is taken with an increment of
  ``batch * heads * 32``: (seed, offset) for this call, and the next call's offset is that much further;
- dropout.h:18-23: a thread's philox offset is ``offset + (bidb * heads + bidh) * 32 + lane``;
- flash_fwd_kernel.h:355-356 and dropout.h:39-45: for each m-tile of 16 rows and 32 columns of a warp's
  P, one philox call with subsequence ``row16 | col32 << 32`` (``row16`` the 16-row block, ``col32`` the
  32-column block of the whole attention matrix: ``m_block * kBlockM / 16 + warp + kNWarps * m`` and
  ``n_block * kBlockN / 32 + n``);
- dropout.h:47-80 and utils.h:218-224 (``convert_layout_acc_dropout``): byte ``4 * (n8 % 4) + e`` of the 16
  output bytes (little-endian words x, y, z, w) decides the element ``e`` (0..3: rows g, g, g + 8, g + 8;
  columns 2t, 2t + 1) of the lane's accumulator fragment of the 8-column tile ``n8``; the element is kept
  when that byte is ``<= p_dropout_in_uint8_t`` (``set.le.u32.f16x2`` of zero-extended bytes). A dropped P
  is set to 0 before P V; ``return_attn_probs`` stores it negated instead (``encode_dropout_in_sign_bit``);
- softmax.h:181: O is scaled by ``inv_sum * rp_dropout`` at the end.

So whether query row r keeps key column c depends on (seed, offset, batch, head, r, c) only, not on the
kernel's tiles (kBlockN a multiple of 32): :func:`keep_tiles` computes it for tiles, :func:`keep_mask` for a whole call.
"""

from __future__ import annotations

import numpy as np

from flashsim.errors import bad_argument

__all__ = ["PHILOX_M", "PHILOX_W", "dropout_scalars", "keep_mask", "keep_threshold", "keep_tiles", "philox4x32_10"]

#: the round multipliers (M0 for c0, M1 for c2) and the Weyl key increments
PHILOX_M = (np.uint64(0xD2511F53), np.uint64(0xCD9E8D57))
PHILOX_W = (np.uint32(0x9E3779B9), np.uint32(0xBB67AE85))
_U32 = np.uint64(0xFFFFFFFF)
_MAX_U64 = 2**64 - 1


def _u64(name: str, x) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype.kind not in "iu" and not (a.dtype == object and all(isinstance(v, int) for v in a.flat)):
        raise bad_argument(name, a.dtype, "expected integers in [0, 2**64)")
    if a.size and (int(np.min(a)) < 0 or int(np.max(a)) > _MAX_U64):
        raise bad_argument(name, (int(np.min(a)), int(np.max(a))), "expected integers in [0, 2**64)")
    return a.astype(np.uint64)


def philox4x32_10(seed, subsequence, offset) -> np.ndarray:
    """The Philox4x32-10 block of counter (offset, subsequence) under key ``seed``, all 64-bit unsigned ints
    (arrays broadcast); returns uint32 of shape (..., 4): the words x, y, z, w."""
    seed, sub, off = np.broadcast_arrays(_u64("seed", seed), _u64("subsequence", subsequence), _u64("offset", offset))
    c0, c1 = off & _U32, off >> np.uint64(32)
    c2, c3 = sub & _U32, sub >> np.uint64(32)
    k0, k1 = seed & _U32, seed >> np.uint64(32)
    m0, m1 = PHILOX_M
    w0, w1 = (np.uint64(w) for w in PHILOX_W)
    for r in range(10):
        p0, p1 = m0 * c0, m1 * c2  # exact 64-bit products of 32-bit words
        c0, c1, c2, c3 = ((p1 >> np.uint64(32)) ^ c1 ^ k0, p1 & _U32, (p0 >> np.uint64(32)) ^ c3 ^ k1, p0 & _U32)
        if r < 9:
            k0, k1 = (k0 + w0) & _U32, (k1 + w1) & _U32
    return np.stack([c0, c1, c2, c3], axis=-1).astype(np.uint32)


def dropout_scalars(dropout_p: float) -> tuple[np.float32, int, np.float32]:
    """(p_dropout, p_dropout_in_uint8_t, rp_dropout) of ``set_params_fprop`` for the Python float
    ``dropout_p``: the keep probability ``1.f - float(dropout_p)``, ``uint8_t(floor(p_dropout * 255.0))``
    (the product in double) and ``1.f / p_dropout`` (float division)."""
    p = np.float32(dropout_p)
    keep = np.float32(np.float32(1.0) - p)
    with np.errstate(divide="ignore"):
        rp = np.float32(np.float32(1.0) / keep)
    return keep, int(np.floor(np.float64(keep) * 255.0)) & 0xFF, rp


def keep_threshold(dropout_p: float) -> int:
    """The byte a random byte must not exceed for its element to be kept."""
    return dropout_scalars(dropout_p)[1]


def keep_tiles(seed: int, offset: int, threshold: int, heads: int, batch_idx, head_idx, row0, col0, nrows: int,
               ncols: int) -> np.ndarray:
    """FlashAttention-2's keep decisions for tiles: bool (n, nrows, ncols), True where row ``row0[i] + r`` keeps
    column ``col0[i] + c`` of head ``head_idx[i]`` of batch ``batch_idx[i]`` (1-D arrays of n tiles, broadcast),
    for the call's philox (``seed``, ``offset``), ``threshold`` (:func:`keep_threshold`) and number of query
    heads ``heads``. Tiles start on a 16-row and 32-column block and hold whole blocks."""
    if not isinstance(threshold, (int, np.integer)) or not 0 <= int(threshold) <= 255:
        raise bad_argument("threshold", threshold, "expected p_dropout_in_uint8_t, an int in [0, 255]")
    if nrows % 16 or ncols % 32 or nrows < 0 or ncols < 0:
        raise bad_argument("nrows, ncols", (nrows, ncols), "expected whole blocks of 16 rows and 32 columns")
    b, h, r0, c0 = np.broadcast_arrays(*(np.atleast_1d(np.asarray(x, np.int64)) for x in
                                         (batch_idx, head_idx, row0, col0)))
    if b.ndim != 1:
        raise bad_argument("batch_idx", b.shape, "expected 1-D arrays of tile origins")
    if b.size and (np.any(r0 % 16) or np.any(c0 % 32) or min(int(x.min()) for x in (b, h, r0, c0)) < 0):
        raise bad_argument("row0, col0", (r0, c0), "expected tile origins >= 0 on 16-row and 32-column blocks")
    n, rb, cb = b.size, nrows // 16, ncols // 32
    rows16 = (r0[:, None] // 16 + np.arange(rb)[None]).astype(np.uint64)         # (n, rb)
    cols32 = (c0[:, None] // 32 + np.arange(cb)[None]).astype(np.uint64)         # (n, cb)
    sub = rows16[:, :, None, None] | (cols32[:, None, :, None] << np.uint64(32))  # (n, rb, cb, 1)
    lanes = np.arange(32, dtype=np.int64)
    off = (np.uint64(offset) + ((b * heads + h)[:, None] * 32 + lanes[None]).astype(np.uint64))[:, None, None, :]
    words = philox4x32_10(np.uint64(seed), sub, off)                               # (n, rb, cb, 32 lanes, 4 words)
    shifts = np.arange(0, 32, 8, dtype=np.uint32)                                  # byte e of a word: element e
    keep = ((words[..., None] >> shifts) & np.uint32(0xFF)) <= np.uint32(threshold)  # (n, rb, cb, lane, w, e)
    # lane = 4 g + t; element e = 2 i + j sits at row 8 i + g, column 8 w + 2 t + j of the 16 x 32 block
    keep = keep.reshape(n, rb, cb, 8, 4, 4, 2, 2)                                  # (n, rb, cb, g, t, w, i, j)
    keep = keep.transpose(0, 1, 6, 3, 2, 5, 4, 7)                                  # (n, rb, i, g, cb, w, t, j)
    return keep.reshape(n, nrows, ncols)


def keep_mask(seed: int, offset: int, threshold: int, batch: int, heads: int, seqlen_q: int, seqlen_k: int,
              rows: slice = slice(None), batch_offset: int = 0) -> np.ndarray:
    """The keep decisions of a call's query ``rows`` (a step-1 slice of range(seqlen_q), default all): bool
    (batch, heads, rows, seqlen_k) (see :func:`keep_tiles`), of the batch entries ``batch_offset`` on (a packed
    sequence is the entry of its launch)."""
    r0, r1, step = rows.indices(seqlen_q)
    if step != 1:
        raise bad_argument("rows", rows, "expected a slice of consecutive rows")
    r1 = max(r0, r1)
    lo = r0 // 16 * 16
    nrows, cols = -(-(r1 - lo) // 16) * 16, -(-seqlen_k // 32) * 32
    b, h = np.meshgrid(np.arange(batch) + batch_offset, np.arange(heads), indexing="ij")
    out = keep_tiles(seed, offset, threshold, heads, b.ravel(), h.ravel(), lo, 0, nrows, cols)
    return out.reshape(batch, heads, nrows, cols)[:, :, r0 - lo:r1 - lo, :seqlen_k]
