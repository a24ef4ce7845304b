"""Recording (and forcing) the twins' per-warp register state at their trace tags.

A twin batches CTAs and keeps each value where its arithmetic wants it (a CTA's accumulator as a
(rows, columns) array, a quad's partial sums as (rows, 4), ...). ``reg_index`` gives, for one variable,
which element of that array lane ``l`` of warp ``w`` holds as register ``r`` (``tiled_index``: the fragment
tables of flashsim.warp.fragments, mma accumulators and A fragments, placed per warp and m-tile as the
instance arranges them; or a kernel's own lane map, such as the 16-lane softmax groups of v5); the recorder gathers
those elements into the (32 lanes x registers) tables the GPU writes (gpu/kernels/trace.cuh), per CTA and
warp, in the order ``flashsim.trace.spec.registers`` lists.

Forcing: given a reference trace (a GPU recording), the recorder also writes the reference's registers
back into the twin's arrays at every event up to a chosen sequence number, after recording the twin's
own values. Since every event records what its step wrote (spec.py), the twin then continues from the
GPU's state: events up to that point that still differ are steps that introduce a difference by
themselves (``flashsim.session.force``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable, Iterable

import numpy as np

from flashsim.errors import bad_argument
from flashsim.trace import spec
from flashsim.warp.fragments import Fragment, fragment, quad_columns, thread_in_group

#: warps per CTA of a traced instance unless it says otherwise (the register maps below take ``warps``)
WARPS = 4
#: the most warps a CTA has (1024 threads; the GPU's trace buffers select warps with a 32-bit mask)
MAX_WARPS = 32
LANES = 32


@dataclass(frozen=True)
class RegEvent:
    """One recorded event: ``regs[lane, r]`` is register r of the lane as 32 bits."""

    cta: int
    warp: int
    seq: int
    tag: str
    regs: np.ndarray


def reg_index(nregs: int, fn: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray],
              warps: int = WARPS) -> np.ndarray:
    """(warps, 32, nregs) flat element indices from ``fn(warp, lane, reg)`` (broadcast int64 arrays) for a CTA of
    ``warps`` warps; an index of -1 is a register the lane does not hold (recorded as 0)."""
    w = np.arange(warps)[:, None, None]
    lane = np.arange(LANES)[None, :, None]
    r = np.arange(nregs)[None, None, :]
    out = np.broadcast_to(fn(w, lane, r), (warps, LANES, nregs))
    out = np.ascontiguousarray(out, dtype=np.int64)
    out.setflags(write=False)
    return out


def tiled_index(frag: Fragment, rows_per_m: int, m_tiles: int, n_tiles: int, row_len: int, *, col0: int = 0,
                per: int = 1, col_map: np.ndarray | None = None, warps: int = WARPS) -> np.ndarray:
    """Register r = (m, n, reg) of the fragments ``x[m][n]`` of each warp (``frag``'s tables, flashsim.warp.
    fragments) in a twin's (rows, row_len) array: warp w's tile (m, n) has its origin at row frag.rows w +
    rows_per_m m, column col0 + frag.cols n. ``per``: columns per array element (2 where 16-bit pairs are
    viewed as uint32: the register's first element names the pair); ``col_map``: where a row's column lies
    within the row of the array (a permutation, e.g. ``quad_columns``'s inverse); ``warps``: of the CTA."""
    def fn(w, lane, r):
        m, n, reg = r // (frag.regs * n_tiles), (r // frag.regs) % n_tiles, r % frag.regs
        row = frag.rows * w + rows_per_m * m + frag.row[lane, reg, 0]
        col = col0 + frag.cols * n + frag.col[lane, reg, 0]
        if col_map is not None:
            col = col_map[col]
        return row * row_len + col // per
    return reg_index(m_tiles * n_tiles * frag.regs, fn, warps)


_C = fragment("mma.m16n8k16", "C", "f32")
_A = fragment("mma.m16n8k16", "A", "f16")


@lru_cache(maxsize=None)
def acc_index(rows_per_m: int, m_tiles: int, row_len: int, n_tiles: int, col0: int = 0,
              warps: int = WARPS) -> np.ndarray:
    """An m16n8 f32 accumulator ``x[m][n][e]`` of each of ``warps`` warps in a (rows, row_len) array: warp w's
    m-tile m starts at row 16 w + rows_per_m m, n-tile n at column col0 + 8 n (the C table of the fragments)."""
    return tiled_index(_C, rows_per_m, m_tiles, n_tiles, row_len, col0=col0, warps=warps)


@lru_cache(maxsize=None)
def quad_index(rows_per_m: int, m_tiles: int, n_vals: int, per_lane: int = 4, warps: int = WARPS) -> np.ndarray:
    """A quad-split row value ``x[m][n][e]`` kept as (rows, 4 lanes, n_vals) (``quad_split``: each row in
    ``quad_columns`` order), or, with n_vals == 0, a per-row value ``x[m][i]`` (row g + 8 i of the C table)
    kept as (rows, per_lane) (per_lane 4: each lane of the quad its own; 1: one per row)."""
    if n_vals == 0:
        def fn(w, lane, r):
            m, i = r // 2, r % 2
            row = _C.rows * w + rows_per_m * m + _C.row[lane, 2 * i, 0]
            return row * per_lane + (thread_in_group(lane) if per_lane == 4 else 0)
        return reg_index(m_tiles * 2, fn, warps)
    ncols = 4 * n_vals
    pos = np.empty(ncols, np.int64)
    pos[quad_columns(ncols).reshape(-1)] = np.arange(ncols)
    return tiled_index(_C, rows_per_m, m_tiles, n_vals // 2, ncols, col_map=pos, warps=warps)


@lru_cache(maxsize=None)
def afrag_index(rows_per_m: int, m_tiles: int, pairs_per_row: int, k_slices: int) -> np.ndarray:
    """An ldmatrix.x4 / mma A fragment ``x[(m)][k][r]`` of packed 16-bit pairs in a (rows, pairs_per_row)
    uint32 view: slice k is the 16 x 16 A tile at column 16 k (the A table of the fragments)."""
    return tiled_index(_A, rows_per_m, m_tiles, k_slices, pairs_per_row, per=2)


def check_filter(ctas, warps, n_ctas: int | None,
                 n_warps: int | None) -> tuple[list[int] | None, list[int] | None]:
    """The run-time filter as sorted lists: ``ctas`` (None: all) within the grid's ``n_ctas`` when given,
    ``warps`` (None: all ``n_warps``) within a CTA of ``n_warps`` warps (None: not known yet, the warps stay None
    and are checked against :data:`MAX_WARPS`). The one check the twins' recorder and the GPU's trace buffers
    share."""
    if ctas is not None:
        ctas = sorted(set(int(c) for c in ctas))
        for c in ctas:
            if c < 0 or (n_ctas is not None and c >= n_ctas):
                raise bad_argument("ctas", c, f"the grid has CTAs 0..{'N-1' if n_ctas is None else n_ctas - 1}")
    if warps is None:
        return ctas, None if n_warps is None else list(range(n_warps))
    warps = sorted(set(int(w) for w in warps))
    top = MAX_WARPS if n_warps is None else n_warps
    for w in warps:
        if not 0 <= w < top:
            raise bad_argument("warps", w, f"a CTA of this kernel has warps 0..{top - 1}")
    return ctas, warps


def active(rec, cta_ids, warps: int = WARPS):
    """``rec`` if it records any CTA of ``cta_ids``, else None (a twin's batch then runs untouched); the twin's
    CTAs have ``warps`` warps (the recorder checks its filter against them)."""
    if rec is None or not rec.rows(cta_ids).size:
        return None
    rec.bind(warps)
    return rec


def _as_u32(values: np.ndarray) -> np.ndarray:
    if values.dtype == np.uint32:
        return values
    if values.dtype == np.uint16:
        return values.astype(np.uint32)
    raise bad_argument("array", values.dtype, "a traced variable must hold uint16 or uint32 bit patterns")


@dataclass
class Recorder:
    """Collects the events of the CTAs ``ctas`` (None: all) and warps ``warps`` (None: every warp of the twin's
    CTA, which the twin gives with ``bind``).

    ``sink`` (optional) gets ``add_event(cta, warp, seq, tag, regs)`` for each event (a TraceWriter);
    without one the events stay in ``events``. ``reference`` (a mapping (cta, warp, seq) -> (tag, regs))
    with ``force_through`` (a sequence number, or None for every event) turns on forcing."""

    kernel: str
    ctas: Iterable[int] | None = None
    warps: Iterable[int] | None = None
    sink: object = None
    reference: dict | None = None
    force_through: int | None = None
    events: list = field(default_factory=list)

    def __post_init__(self):
        if self.kernel not in spec.KERNELS:
            raise bad_argument("kernel", self.kernel, f"expected one of {spec.KERNELS}")
        ctas, self._warps = check_filter(self.ctas, self.warps, None, None)
        self._ctas = None if ctas is None else np.asarray(ctas, np.int64)
        self._n_warps: int | None = None
        self._seq: dict[int, int] = {}
        self.forced = 0

    def bind(self, n_warps: int) -> None:
        """The warps of a CTA of the run (the twin's instance): the filter's warps must lie within them, and
        without a filter every one of them is recorded."""
        if self._n_warps == n_warps:
            return
        if self._n_warps is not None:
            raise bad_argument("warps", n_warps, f"this recorder records a run of {self._n_warps} warps per CTA")
        _, warps = check_filter(None, self.warps, None, n_warps)
        self._warps, self._n_warps = warps, n_warps

    def rows(self, cta_ids: np.ndarray) -> np.ndarray:
        """Positions in ``cta_ids`` of the CTAs this recorder records."""
        cta_ids = np.asarray(cta_ids, np.int64)
        if self._ctas is None:
            return np.arange(cta_ids.size)
        return np.nonzero(np.isin(cta_ids, self._ctas))[0]

    def event(self, tag: str, cta_ids, *variables: tuple[np.ndarray, np.ndarray]) -> None:
        """Record ``tag`` for the CTAs ``cta_ids`` (one per leading row of every variable): each variable is
        (array (len(cta_ids), ...), index from ``reg_index``)."""
        sel = self.rows(cta_ids)
        if sel.size == 0:
            return
        cta_ids = np.asarray(cta_ids, np.int64)
        flats = []
        for arr, idx in variables:
            if self.reference is not None and not arr.flags.c_contiguous:
                raise bad_argument("variables", arr.shape, f"{tag}: a forced variable must be C-contiguous "
                                                           "(forcing writes through a reshaped view)")
            flats.append((arr.reshape(arr.shape[0], -1), idx))
        for row in sel:
            cta = int(cta_ids[row])
            seq = self._seq.get(cta, 0)
            self._seq[cta] = seq + 1
            for w in self._warps:
                parts = []
                for flat, idx in flats:
                    ix = idx[w]
                    vals = _as_u32(flat[row][np.maximum(ix, 0)])
                    parts.append(np.where(ix >= 0, vals, np.uint32(0)).astype(np.uint32))
                regs = np.concatenate(parts, axis=1) if parts else np.zeros((LANES, 0), np.uint32)
                if self.sink is not None:
                    self.sink.add_event(cta, w, seq, tag, regs)
                else:
                    self.events.append(RegEvent(cta, w, seq, tag, regs))
                if self.reference is not None and (self.force_through is None or seq <= self.force_through):
                    self._force(cta, w, seq, tag, row, flats)

    def _force(self, cta, w, seq, tag, row, flats) -> None:
        ref = self.reference.get((cta, w, seq))
        if ref is None:
            return
        ref_tag, ref_regs = ref
        if ref_tag != tag:
            return  # the programs went different ways: nothing to force
        off = 0
        for flat, idx in flats:
            ix = idx[w]
            nr = ix.shape[1]
            vals = ref_regs[:, off:off + nr]
            off += nr
            ok = ix >= 0
            flat[row][ix[ok]] = vals[ok].astype(flat.dtype)
        self.forced += 1
