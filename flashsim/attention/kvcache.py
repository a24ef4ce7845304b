"""flash_attn_with_kvcache's arguments: the KV cache, the keys appended to it, paged KV and rotary embedding.

Facts from Dao-AILab/flash-attention at 0251105a2fb19d2957484b7f023cd8c115286ced, csrc/flash_attn/flash_api.cpp
(``mha_fwd_kvcache``) and flash_fwd_kernel.h:

- k_cache, v_cache: (batch_size_c, seqlen_k, heads_k, d), or paged (num_blocks, page_block_size, heads_k, d)
  with ``block_table`` int32 (batch, max_num_blocks_per_seq), page_block_size a multiple of 256, the cache's
  seqlen_k then max_num_blocks_per_seq * page_block_size; paged KV takes no cache_batch_idx.
- ``cache_seqlens`` (int32 (batch,), or an int for every entry): the keys of each entry already in the cache;
  batch entry b reads cache entry ``cache_batch_idx[b]`` (default b).
- ``k``, ``v`` (batch, seqlen_knew, heads_k, d): appended at rows [cache_seqlens[b], cache_seqlens[b] +
  seqlen_knew) of the entry, in place, and attended; they need v and cache_seqlens and seqlen_q <= seqlen_k.
- rotary: ``rotary_cos``/``rotary_sin`` (seqlen_ro, rotary_dim / 2) of q's dtype, only with k; rotary_dim a
  multiple of 16 and <= the head dim; seqlen_ro >= the cache's seqlen_k. The appended key at position j is
  rotated with row j of the tables, q with row cache_seqlens[b] (+ its row with causal or local masks);
  ``rotary_interleaved`` pairs dims (2i, 2i + 1), otherwise i and i + rotary_dim / 2.
- The split-KV kernel runs when keys are appended, cache_batch_idx is given or the cache is paged (with one split
  its one-split tiles), or when the split count (``num_splits``, 0: flash-attn's heuristic) is above 1; otherwise
  the forward kernel with per-entry lengths.

flashsim also refuses what would make the bytes unspecified: a block_table or cache_batch_idx entry outside the
cache, a cache_seqlens (plus the appended keys) beyond the cache, and a cache entry appended to by two batch
entries.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from flashsim.errors import bad_argument

PAGE_MULTIPLE = 256  # "Paged KV cache block size must be divisible by 256"
ROTARY_MULTIPLE = 16  # "Only rotary dimensions divisible by 16 are currently supported"


@dataclass(frozen=True)
class KVCache:
    """The KV cache of a flash_attn_with_kvcache call (shapes and indices; the arrays travel separately)."""

    seqlens: tuple[int, ...]                        # cache_seqlens: keys in the cache before the call, per entry
    entries: int                                    # cache entries (batch_size_c), or pages (num_blocks)
    batch_idx: tuple[int, ...] | None = None        # cache_batch_idx
    block_table: tuple[tuple[int, ...], ...] | None = None
    page_block_size: int = 0                        # paged: rows per page
    seqlen_knew: int = 0                            # keys appended (k's seqlen), 0: none
    rotary_dim: int = 0
    rotary_interleaved: bool = True
    seqlen_ro: int = 0                              # rows of the rotary tables

    def check_rotary_rows(self, seqlen_q: int, masked: bool) -> None:
        """With causal or local masks query row i is rotated at position cache_seqlens[b] + i: every such row
        must be in the tables (flash-attn would read past them)."""
        if self.rotary_dim and masked and max(self.seqlens) + seqlen_q > self.seqlen_ro:
            raise bad_argument("rotary_cos", f"{self.seqlen_ro} rows", f"queries are rotated at cache_seqlens + their "
                                                                     f"row with causal/local masks, up to "
                                                                     f"{max(self.seqlens) + seqlen_q - 1}: the tables "
                                                                     "need that many rows")

    @property
    def paged(self) -> bool:
        return self.block_table is not None

    @property
    def forces_split_kernel(self) -> bool:
        """mha_fwd_kvcache's force_split_kernel: appended keys, cache_batch_idx or a paged cache."""
        return self.seqlen_knew > 0 or self.batch_idx is not None or self.paged

    def rows(self, b: int, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(entry or page, row) of the cache that batch entry ``b``'s keys ``keys`` live in."""
        keys = np.asarray(keys, np.int64)
        if self.paged:
            table = np.asarray(self.block_table[b], np.int64)
            return table[keys // self.page_block_size], keys % self.page_block_size
        e = b if self.batch_idx is None else self.batch_idx[b]
        return np.full(keys.shape, e, np.int64), keys


def check_cache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None, cache_seqlens=None,
                cache_batch_idx=None, cache_leftpad=None, block_table=None, rotary_interleaved=True):
    """mha_fwd_kvcache's checks of the cache arguments. Returns (KVCache, k view, v view): the views stand for
    the attended keys and values, (batch, seqlen_k, heads_k, d) with the cache's seqlen_k, without data, for
    ``check_args``'s shape checks."""
    from flashsim.attention.args import _Summary, _dtype_name, int32_array

    if cache_leftpad is not None:
        raise NotImplementedError("cache_leftpad (left-padded KV cache) is not modelled")
    for name, x in (("k_cache", k_cache), ("v_cache", v_cache)):
        if len(getattr(x, "shape", ())) != 4:
            raise bad_argument(name, _Summary(x), "expected rank 4 (entries or pages, seqlen, heads_k, headdim)")
    if len(q.shape) != 4:
        raise bad_argument("q", _Summary(q), "expected rank 4 (batch, seqlen, heads, headdim)")
    batch, seqlen_q = int(q.shape[0]), int(q.shape[1])
    entries, rows, heads_k, d = (int(n) for n in k_cache.shape)
    if tuple(v_cache.shape[:3]) != tuple(k_cache.shape[:3]):
        raise bad_argument("v_cache", _Summary(v_cache), f"expected the shape of k_cache {tuple(k_cache.shape)} but "
                                                         "its head dim")
    table, page = None, 0
    if block_table is not None:
        if cache_batch_idx is not None:
            raise bad_argument("cache_batch_idx", _Summary(cache_batch_idx), "paged KV cache does not support "
                                                                            "cache_batch_idx")
        t = int32_array("block_table", block_table, 2, "of shape (batch, max_num_blocks_per_seq)")
        if t.shape[0] != batch or t.shape[1] < 1:
            raise bad_argument("block_table", t.shape, f"expected shape (batch={batch}, max_num_blocks_per_seq >= 1)")
        if rows % PAGE_MULTIPLE:
            raise bad_argument("k_cache", _Summary(k_cache), f"paged KV cache block size {rows} must be divisible by "
                                                             f"{PAGE_MULTIPLE}")
        bad = (t < 0) | (t >= entries)
        if bad.any():
            i, j = (int(x) for x in np.argwhere(bad)[0])
            raise bad_argument("block_table", f"[{i}, {j}] = {int(t[i, j])}", f"points past the cache: pages are "
                                                                           f"0..{entries - 1}")
        table, page = tuple(tuple(int(x) for x in row) for row in t), rows
        capacity = t.shape[1] * rows
    else:
        capacity = rows
    idx = None
    if cache_batch_idx is not None:
        ci = int32_array("cache_batch_idx", cache_batch_idx, 1, f"of shape (batch={batch},)")
        if ci.shape[0] != batch:
            raise bad_argument("cache_batch_idx", ci.shape, f"expected shape (batch={batch},)")
        if ((ci < 0) | (ci >= entries)).any():
            i = int(np.argmax((ci < 0) | (ci >= entries)))
            raise bad_argument("cache_batch_idx", f"[{i}] = {int(ci[i])}", f"points past the cache: entries are "
                                                                          f"0..{entries - 1}")
        idx = tuple(int(x) for x in ci)
    elif table is None and entries != batch:
        raise bad_argument("k_cache", _Summary(k_cache), f"expected {batch} entries (q's batch), or cache_batch_idx")
    knew = 0
    if k is not None or v is not None:
        if k is None or v is None:
            raise bad_argument("v" if v is None else "k", None, "if key is supplied, value must also be passed in")
        if cache_seqlens is None:
            raise bad_argument("cache_seqlens", None, "if key is supplied, cache_seqlens must also be passed in")
        for name, x in (("k", k), ("v", v)):
            if _dtype_name(x, name) != _dtype_name(q, "q"):
                raise bad_argument(name, _Summary(x), "must have the same dtype as q")
        knew = int(k.shape[1]) if len(k.shape) == 4 else -1
        want = (batch, knew, heads_k, d)
        if len(k.shape) != 4 or tuple(int(n) for n in k.shape) != want:
            raise bad_argument("k", _Summary(k), f"expected shape (batch, seqlen_knew, heads_k, headdim) = {want}")
        if len(v.shape) != 4 or tuple(int(n) for n in v.shape) != (batch, knew, heads_k, int(v_cache.shape[3])):
            raise bad_argument("v", _Summary(v), f"expected shape (batch, seqlen_knew={knew}, heads_k, headdim_v)")
        if seqlen_q > capacity:
            raise bad_argument("q", _Summary(q), f"if key is supplied, it must have seqlen <= the seqlen of the KV "
                                                 f"cache ({capacity})")
        if idx is not None and knew > 0 and len(set(idx)) < len(idx):
            raise bad_argument("cache_batch_idx", idx, "two batch entries append to one cache entry: the bytes would "
                                                       "depend on the order the GPU runs them")
    if cache_seqlens is None:
        lens = np.full(batch, capacity, np.int64)
    elif isinstance(cache_seqlens, (int, np.integer)) and not isinstance(cache_seqlens, bool):
        lens = np.full(batch, int(cache_seqlens), np.int64)
    else:
        lens = int32_array("cache_seqlens", cache_seqlens, 1, f"of shape (batch={batch},), or an int")
        if lens.shape[0] != batch:
            raise bad_argument("cache_seqlens", lens.shape, f"expected shape (batch={batch},)")
    if ((lens < 0) | (lens + knew > capacity)).any():
        i = int(np.argmax((lens < 0) | (lens + knew > capacity)))
        raise bad_argument("cache_seqlens", f"[{i}] = {int(lens[i])}",
                           f"expected 0 <= cache_seqlens{' + seqlen_knew' if knew else ''} <= {capacity}, the cache's "
                           "seqlen")
    if table is not None and knew > 0:  # appends to a page another entry reads or writes would race
        used = [p_ for b in range(batch) for p_ in table[b][:-(-(int(lens[b]) + knew) // page)]]
        if len(set(used)) < len(used):
            raise bad_argument("block_table", "a page in two entries' keys", "two batch entries share a page that "
                                                                           "keys are appended to: the bytes would "
                                                                           "depend on the order the GPU runs them")
    rdim = 0
    if rotary_cos is not None or rotary_sin is not None:
        if knew == 0 and k is None:
            raise bad_argument("rotary_cos", _Summary(rotary_cos), "rotary cos/sin need new keys and values to "
                                                                   "append (k, v)")
        if rotary_cos is None or rotary_sin is None:
            raise bad_argument("rotary_sin" if rotary_sin is None else "rotary_cos", None,
                               "if rotary cos is provided, rotary sin must also be provided")
        for name, x in (("rotary_cos", rotary_cos), ("rotary_sin", rotary_sin)):
            if _dtype_name(x, name) != _dtype_name(q, "q"):
                raise bad_argument(name, _Summary(x), "must have the same dtype as q")
            if len(x.shape) != 2 or tuple(x.shape) != tuple(rotary_cos.shape):
                raise bad_argument(name, _Summary(x), "expected shape (seqlen_ro, rotary_dim / 2), the same for both")
        rdim = 2 * int(rotary_cos.shape[1])
        if rdim % ROTARY_MULTIPLE or not 0 < rdim <= d:
            raise bad_argument("rotary_cos", _Summary(rotary_cos), f"rotary_dim {rdim} must be a positive multiple "
                                                                   f"of {ROTARY_MULTIPLE}, at most the head dim {d}")
        if int(rotary_cos.shape[0]) < capacity:
            raise bad_argument("rotary_cos", _Summary(rotary_cos), f"cos/sin seqlen must be at least the seqlen of "
                                                                   f"the KV cache ({capacity})")
    if not isinstance(rotary_interleaved, (bool, np.bool_)):
        raise bad_argument("rotary_interleaved", rotary_interleaved, "expected a bool")
    kv = KVCache(seqlens=tuple(int(x) for x in lens), entries=entries, batch_idx=idx, block_table=table,
                 page_block_size=page, seqlen_knew=max(knew, 0), rotary_dim=rdim,
                 rotary_interleaved=bool(rotary_interleaved),
                 seqlen_ro=0 if rotary_cos is None else int(rotary_cos.shape[0]))
    from flashsim.attention.args import DTYPES

    zero = np.zeros((), DTYPES[_dtype_name(k_cache, "k_cache")])
    k_view = np.broadcast_to(zero, (batch, capacity, heads_k, d))
    v_view = np.broadcast_to(np.zeros((), DTYPES[_dtype_name(v_cache, "v_cache")]),
                             (batch, capacity, heads_k, int(v_cache.shape[3])))
    return kv, k_view, v_view
