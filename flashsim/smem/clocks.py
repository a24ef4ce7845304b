"""Happens-before between the accessors of a CTA's shared memory, as vector clocks: what the race detector
(:mod:`flashsim.smem.races`) asks to decide whether one access is ordered before another.

Columns (accessors) of a CTA of W warps: 0..W-1 the warps; W + w the bulk and tensor copies into shared
memory warp w issues (``cp.async.bulk[.tensor]`` global -> shared: the async proxy's copy engine, TMA,
completing on an mbarrier); 2W + w its copies out of shared memory (bulk and tensor stores and reductions,
completing in bulk groups); 3W + 4g the wgmma of warpgroup g (the tensor cores reading shared memory
through the async proxy: one collective operation of the warpgroup's 4 warps, numbered by the warps' own
count of wgmma issued, so that a wait by any warp of the warpgroup covers the operation). ``vc[c, w]`` is what warp w of CTA c has
seen of every column; ``vc[c, w, w]`` its own clock, which every release (a barrier arrival, an mbarrier
arrival) and every fence.proxy.async advances, so accesses after a release are not covered by it. An
agent's operation is numbered when it is issued (``issued``); its clock vector is the issuing warp's at
that moment plus its own number, so it happens after what the warp did before the issue and before only
what acquires it: the phase of the mbarrier its complete_tx lands on, or the issuing warp's wait
(cp.async.bulk.wait_group, wgmma.wait_group).

Synchronisation (PTX ISA, "Memory Consistency Model": release/acquire patterns; "Parallel Synchronization
and Communication Instructions": bar, mbarrier):

- ``bar.sync`` / ``barrier.sync`` of the whole CTA: every warp joins every other (:meth:`barrier`);
  of part of it (``bar.sync id, count``, ``bar.arrive``): arrivals release into the barrier, the warps that
  wait acquire when it completes (:meth:`named_arrive`, :meth:`named_complete`);
- mbarrier: an arrival (any form) and a copy's complete_tx release into the barrier's current phase; when
  the phase completes its clock is kept per parity; a wait that succeeds on a parity acquires the clock
  of the latest completed phase of that parity (:meth:`mbar_release`, :meth:`mbar_phase_completed`,
  :meth:`mbar_acquire`);
- ``fence.proxy.async``: recorded per warp (:meth:`fence`); :meth:`fenced` asks whether a warp fenced
  between a write and the release that orders it before an async-proxy access.
"""

from __future__ import annotations

import numpy as np

__all__ = ["AGENTS", "Clocks"]

#: the asynchronous agents of a warp, by column block
AGENTS = {"load": 1, "store": 2, "wgmma": 3}
_AGENT_OPS = {1: "bulk copy", 2: "bulk store", 3: "wgmma"}


class Clocks:
    """Vector clocks of ``ctas`` CTAs of ``warps`` warps (see the module docstring)."""

    def __init__(self, ctas: int, warps: int):
        self.W = W = int(warps)
        self.cols = (1 + len(AGENTS)) * W
        self.vc = np.zeros((ctas, W, self.cols), np.int32)
        self.vc[:, np.arange(W), np.arange(W)] = 1
        self.issued = np.zeros((ctas, self.cols), np.int32)  # the latest operation number of each agent
        self.wgmma_count = np.zeros((ctas, W), np.int32)  # wgmma issued by each warp
        self.fences: dict[tuple[int, int], list[int]] = {}  # (cta, warp) -> own clocks of its proxy fences
        self.pending: dict[tuple, np.ndarray] = {}  # a barrier's clock so far: (cta, key) -> vector
        self.done: dict[tuple, np.ndarray] = {}  # a completed mbarrier phase: (cta, addr, parity) -> vector
        self.groups: dict[tuple[int, int], list[int]] = {}  # (cta, warp) -> its committed bulk groups' last store

    # ------------------------------------------------------------------------------------ columns
    def column(self, warp: int, agent: str) -> int:
        if agent == "wgmma":  # one column per warpgroup
            warp = int(warp) // 4 * 4
        return AGENTS[agent] * self.W + int(warp)

    def describe(self, col: int, op: str) -> tuple[str, int]:
        """(the operation as reported, the warp) of an access by column ``col`` (``op``: read / write)."""
        block, warp = divmod(int(col), self.W)
        if block == 0:
            return op, warp
        return f"{_AGENT_OPS[block]} {op}", warp

    # ------------------------------------------------------------------------------------ threads
    def _join(self, c: int, w, vec: np.ndarray) -> None:
        np.maximum(self.vc[c, w], vec, out=self.vc[c, w])

    def release(self, c: int, w: int) -> np.ndarray:
        """Warp w's clock vector as it releases, then its own clock advances."""
        vec = self.vc[c, w].copy()
        self.vc[c, w, w] += 1
        return vec

    def barrier(self, sel) -> None:
        """bar.sync of every warp of the CTAs ``sel`` (an index or mask of CTAs)."""
        vc = self.vc[sel]
        vc[...] = vc.max(axis=-2, keepdims=True)
        W = self.W
        vc[..., np.arange(W), np.arange(W)] += 1
        self.vc[sel] = vc

    def named_arrive(self, c: int, w: int, barrier: int) -> None:
        """Warp w of CTA c arrives on named barrier ``barrier`` (bar.arrive, or the arrival of bar.sync)."""
        key = ("bar", c, int(barrier))
        vec = self.release(c, w)
        have = self.pending.get(key)
        self.pending[key] = vec if have is None else np.maximum(have, vec)

    def named_complete(self, c: int, barrier: int, waiting) -> None:
        """Named barrier ``barrier`` of CTA c completed: the warps ``waiting`` on it acquire its arrivals."""
        vec = self.pending.pop(("bar", c, int(barrier)), None)
        if vec is not None:
            for w in waiting:
                self._join(c, int(w), vec)

    # ------------------------------------------------------------------------------------ mbarrier
    def mbar_release(self, c: int, addr: int, vec: np.ndarray) -> None:
        """An arrival (or a copy's complete_tx) with clock vector ``vec`` on the mbarrier at ``addr``."""
        key = ("mbar", c, int(addr))
        have = self.pending.get(key)
        self.pending[key] = vec.copy() if have is None else np.maximum(have, vec)

    def mbar_phase_completed(self, c: int, addr: int, parity: int) -> None:
        """The phase of parity ``parity`` of the mbarrier at ``addr`` completed."""
        vec = self.pending.pop(("mbar", c, int(addr)), None)
        self.done[(c, int(addr), int(parity) & 1)] = np.zeros(self.cols, np.int32) if vec is None else vec

    def mbar_acquire(self, c: int, w: int, addr: int, parity: int) -> None:
        """Warp w's wait on parity ``parity`` of the mbarrier at ``addr`` succeeded."""
        vec = self.done.get((c, int(addr), int(parity) & 1))
        if vec is not None:
            self._join(c, w, vec)

    def mbar_forget(self, c: int, addr: int) -> None:
        """mbarrier.inval (or a new init): the barrier's history ends."""
        self.pending.pop(("mbar", c, int(addr)), None)
        for p in (0, 1):
            self.done.pop((c, int(addr), p), None)

    # ------------------------------------------------------------------------------------ async agents
    def issue(self, c: int, w: int, agent: str) -> tuple[int, np.ndarray]:
        """Warp w issues an operation of its ``agent`` ('load', 'store' or 'wgmma'): (its column, its clock
        vector)."""
        col = self.column(w, agent)
        if agent == "wgmma":
            self.wgmma_count[c, w] += 1
            self.issued[c, col] = max(int(self.issued[c, col]), int(self.wgmma_count[c, w]))
            t = self.wgmma_count[c, w]
        else:
            self.issued[c, col] += 1
            t = self.issued[c, col]
        vec = self.vc[c, w].copy()
        vec[col] = t
        return col, vec

    def agent_acquire(self, c: int, w: int, agent: str, upto: int | None = None) -> None:
        """Warp w waited for its agent's operations numbered <= ``upto`` (default: all issued)."""
        col = self.column(w, agent)
        t = self.issued[c, col] if upto is None else upto
        self.vc[c, w, col] = max(int(self.vc[c, w, col]), int(t))

    def commit_stores(self, c: int, w: int) -> None:
        """cp.async.bulk.commit_group by warp w: its stores issued so far form a group."""
        self.groups.setdefault((int(c), int(w)), []).append(int(self.issued[c, self.column(w, "store")]))

    def wait_stores(self, c: int, w: int, n: int) -> None:
        """cp.async.bulk.wait_group[.read] n by warp w: all but its n most recent groups are done."""
        g = self.groups.get((int(c), int(w)), [])
        if len(g) > n:
            self.agent_acquire(c, w, "store", g[len(g) - 1 - n])

    # ------------------------------------------------------------------------------------ proxy fences
    def fence(self, c: int, w: int) -> None:
        """fence.proxy.async by warp w: its own clock advances and the fence is recorded at the new value."""
        self.vc[c, w, w] += 1
        self.fences.setdefault((int(c), int(w)), []).append(int(self.vc[c, w, w]))

    def fenced(self, c: np.ndarray, writer: np.ndarray, clk: np.ndarray, upto: np.ndarray) -> np.ndarray:
        """Per access: did warp ``writer`` of CTA ``c`` fence after its write at clock ``clk`` and no later
        than clock ``upto`` (what the async-proxy reader has seen of it)?"""
        key = np.stack([np.asarray(c), np.asarray(writer), np.asarray(clk), np.asarray(upto)], axis=1).astype(np.int64)
        uniq, inv = np.unique(key, axis=0, return_inverse=True)
        res = np.zeros(len(uniq), bool)
        for i, (ci, wi, t, u) in enumerate(uniq):
            fs = self.fences.get((int(ci), int(wi)))
            if fs:
                j = int(np.searchsorted(fs, int(t), side="right"))
                res[i] = j < len(fs) and fs[j] <= int(u)
        return res[np.asarray(inv).reshape(-1)]
