"""The race detector of shared memory: a shadow of every word's latest accesses, checked at every access
against a happens-before order kept as vector clocks.

Race detection keeps a shadow per 4-byte word: the last write (accessor, lane mask, the accessor's clock,
__syncwarp epoch, tag, bytes) and two read records (the latest reader, and the latest reader of another
accessor), plus a pending cp.async (thread, group). Two accesses to overlapping bytes of a word, at least
one a write, race when the first does not happen before the second; within one warp, different lanes
race unless a bar.sync or __syncwarp lies between. A read of a word that a cp.async has not yet made
visible (no cp.async.wait_group / wait_all of that group by the copying thread) is reported too. Accesses
of one warp instruction do not race with each other, except the same word written by two warps of one
batched instruction (a WAW).

Happens-before (:class:`flashsim.smem.clocks.Clocks`). Accessors are the CTA's warps and, per warp, two
asynchronous agents: the bulk/tensor copies (cp.async.bulk[.tensor]) it issues and the wgmma it issues
(both in the async proxy). Order comes from synchronisation only, never from the interleaving the
interpreter picked: bar.sync over the CTA or over the warps of a named barrier; mbarrier arrivals
(release) and successful waits on the completed phase (acquire); a copy's complete_tx on its mbarrier;
cp.async.bulk.wait_group and wgmma.wait_group (the issuing warp acquires its agent). An access by the async
proxy (a bulk copy or TMA store reading shared memory, a wgmma reading its operands) of bytes a thread
wrote is ordered only when the write happens before it and the writing warp executed fence.proxy.async
between the write and the synchronisation that orders it (PTX ISA, "Memory Consistency Model" > "Proxies":
generic-proxy writes are made visible to the async proxy by a proxy fence); otherwise it is reported as
"RAW (no fence.proxy.async)".

Limits (missed races, never invented ones): the shadow keeps one writer per word, so after 8/16-bit
writes by different threads to different bytes of one word only the last writer is checked against later
accesses, and it keeps two reader records; clocks are per warp, so an mbarrier wait by some lanes of a
warp orders the whole warp.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from flashsim.errors import FlashsimError
from flashsim.smem.banks import WORD
from flashsim.smem.clocks import Clocks


# ----------------------------------------------------------------------------------------------------
# Races
# ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RaceAccess:
    """One side of a race: what (``op`` 'read'/'write'/'cp.async'), where in the grid, and its tag."""

    op: str
    tag: str
    cta: int
    warp: int
    lane: int

    def __str__(self) -> str:
        return f"{self.op} by {self.tag!r} at cta={self.cta} warp={self.warp} lane={self.lane}"


@dataclass(frozen=True)
class Race:
    """A hazard: ``kind`` RAW / WAR / WAW (or 'RAW cp.async' for a read before the copy's wait)."""

    kind: str
    addr: int
    first: RaceAccess
    second: RaceAccess

    def __str__(self) -> str:
        why = ("before a cp.async.wait_group of the copying thread covered the copy" if "cp.async" in self.kind
               else "ordered, but the writing warp executed no fence.proxy.async in between" if "fence" in self.kind
               else "with no synchronisation ordering them")
        return f"{self.kind} hazard at shared addr={self.addr:#x} (cta={self.second.cta}): {self.first} then {self.second} {why}"


class RaceError(FlashsimError):
    """Raised for hazards when SharedMemory(on_race='raise'); ``.races`` lists them."""

    def __init__(self, races: list[Race]):
        self.races = list(races)
        more = f" (+{len(races) - 5} more)" if len(races) > 5 else ""
        super().__init__("; ".join(str(r) for r in races[:5]) + more)


# ----------------------------------------------------------------------------------------------------
# The race shadow
# ----------------------------------------------------------------------------------------------------


class _Shadow:
    """Per-word access history of every CTA (see the module docstring)."""

    def __init__(self, ctas: int, words: int, warps: int):
        self.warps = warps
        self.clocks = Clocks(ctas, warps)
        self.wsync = np.zeros((ctas, warps), np.int32)  # __syncwarp (and bar.sync) count per warp
        shape = (ctas, words)
        # slot 0: last write; slots 1, 2: reads (latest reader; latest reader of another accessor). The
        # accessor is a column of the clocks (a warp, or an asynchronous agent of a warp), ``clk`` its clock
        # at the access
        self.warp = np.full((3,) + shape, -1, np.int32)
        self.lanes = np.zeros((3,) + shape, np.uint32)
        self.clk = np.zeros((3,) + shape, np.int32)
        self.ws = np.zeros((3,) + shape, np.int32)
        self.tag = np.zeros((3,) + shape, np.int32)
        self.bytes = np.zeros((3,) + shape, np.uint8)
        # the async proxy's byte-address sets as (words, byte masks): a pipeline's copies and wgmma operands
        # cover the same few regions over and over (one per stage and k-step)
        self.regions: dict = {}
        # pending cp.async writes
        self.a_tid = np.full(shape, -1, np.int32)
        self.a_group = np.zeros(shape, np.int32)
        self.a_tag = np.zeros(shape, np.int32)

    def put(self, slot: int, c, word, who, lanes, clk, ws, tag, bytes_) -> None:
        """Record an access (accessor ``who`` at clock ``clk``, lane mask, __syncwarp epoch, tag, bytes) in
        ``slot`` of the words (c, word)."""
        for arr, v in ((self.warp, who), (self.lanes, lanes), (self.clk, clk), (self.ws, ws), (self.tag, tag),
                       (self.bytes, bytes_)):
            arr[slot, c, word] = v

    def demote(self, c, word) -> None:
        """Slot A's read record of the words (c, word) moves to slot B (another accessor reads them now)."""
        for arr in (self.warp, self.lanes, self.clk, self.ws, self.tag, self.bytes):
            arr[2, c, word] = arr[1, c, word]


def _lowest_lane(mask: int, exclude: int | None = None) -> int:
    if exclude is not None:
        m = mask & ~(1 << exclude)
        if m:
            mask = m
    mask &= 0xFFFFFFFF
    return (mask & -mask).bit_length() - 1 if mask else -1


# ----------------------------------------------------------------------------------------------------
# The checks
# ----------------------------------------------------------------------------------------------------


class RaceDetector:
    """The race detector's half of :class:`flashsim.smem.SharedMemory`, which inherits it: every access checked
    against the shadow (and recorded in it), the barriers that order accesses, hazards reported.

    It holds no state of its own: ``shadow``, ``races``, ``race_count``, ``max_races``, ``on_race``, the tag
    table and (for initcheck, which ``on_read`` / ``on_write`` also serve) ``written`` are SharedMemory's.
    """

    def _report(self, new: list[Race]) -> tuple:
        self.race_count += self._unlisted
        self._unlisted = 0
        if not new:
            return ()
        self.race_count += len(new)
        room = max(0, self.max_races - len(self.races))
        self.races.extend(new[:room])
        if self.on_race == "raise":
            raise RaceError(new)
        return tuple(new)

    # -------------------------------------------------------------------------------- shadow
    @staticmethod
    def _words(addr: np.ndarray, width: int, active: np.ndarray):
        """Flatten the active accesses into per-word records: cta, warp, lane, word, byte mask."""
        c, w, l = np.nonzero(active)
        a = addr[c, w, l]
        if width >= WORD:
            k = width // WORD
            word = (a >> 2)[:, None] + np.arange(k)[None, :]
            rep = lambda x: np.repeat(x, k)  # noqa: E731
            return rep(c), rep(w), rep(l), word.reshape(-1), np.full(word.size, 0xF, np.uint8)
        mask = ((1 << width) - 1) << (a & 3)
        return c, w, l, a >> 2, mask.astype(np.uint8)

    def _unordered(self, slot: int, c, w, l, word, vec: np.ndarray | None = None) -> np.ndarray:
        """Which accesses (cta c, accessor w, lane l, word) the recorded access in ``slot`` does not happen
        before. ``vec``: the accessor's clock vector when it is not warp w's own (an asynchronous agent's,
        taken at its issue)."""
        sh = self.shadow
        pw = sh.warp[slot, c, word]
        known = np.maximum(pw, 0)
        seen = sh.clocks.vc[c, w, known] if vec is None else vec[known]
        after = sh.clk[slot, c, word] > seen
        other_warp = pw != w
        if vec is not None:
            return (pw >= 0) & other_warp & after
        same_ws = sh.ws[slot, c, word] == sh.wsync[c, w]
        other_lanes = (sh.lanes[slot, c, word] & ~(np.uint32(1) << l.astype(np.uint32))) != 0
        return (pw >= 0) & ((other_warp & after) | (~other_warp & same_ws & other_lanes))

    def _race_list(self, kind: str, slot_or_none, mask, c, w, l, word, op2: str, tag2: str, op1: str) -> list[Race]:
        sh = self.shadow
        idx = np.nonzero(mask)[0]
        if idx.size == 0:
            return []
        keys = c[idx] * (self.size // WORD) + word[idx]
        _, first = np.unique(keys, return_index=True)  # one report per word and instruction
        cap = max(1, self.max_races)
        self._unlisted += max(0, first.size - cap)  # counted, not built
        out = []
        for i in idx[np.sort(first)][:cap]:
            ci, wi, li, wd = int(c[i]), int(w[i]), int(l[i]), int(word[i])
            if slot_or_none is None:  # pending cp.async
                tid = int(sh.a_tid[ci, wd])
                a1 = RaceAccess("cp.async", self._tags[int(sh.a_tag[ci, wd])], ci, tid // 32, tid % 32)
            else:
                pw = int(sh.warp[slot_or_none, ci, wd])
                pl = _lowest_lane(int(sh.lanes[slot_or_none, ci, wd]), li if pw == wi else None)
                name, warp = sh.clocks.describe(pw, op1)
                a1 = RaceAccess(name, self._tags[int(sh.tag[slot_or_none, ci, wd])], ci, warp, pl)
            name2, warp2 = sh.clocks.describe(wi, op2)
            out.append(Race(kind, wd * WORD, a1, RaceAccess(name2, tag2, ci, warp2, li)))
        return out

    def on_read(self, addr: np.ndarray, width: int, active: np.ndarray, tag: str) -> tuple:
        """Check a read against the shadow (RAW, read before cp.async wait) and record it; with initcheck,
        list the lanes that read bytes nothing wrote."""
        if self.written is not None:
            self._check_written(addr, width, active, tag)
        sh = self.shadow
        if sh is None:
            return ()
        c, w, l, word, bm = self._words(addr, width, active)
        if c.size == 0:
            return ()
        races = []
        raw = self._unordered(0, c, w, l, word) & ((sh.bytes[0, c, word] & bm) != 0)
        races += self._race_list("RAW", 0, raw, c, w, l, word, "read", tag, "write")
        pend = sh.a_tid[c, word] >= 0
        races += self._race_list("RAW cp.async", None, pend, c, w, l, word, "read", tag, "")
        self._record_reads(c, w, l, word, bm, self.tag_id(tag))
        return self._report(races)

    def _group(self, c, w, l, word, bm):
        """OR-reduce per (cta, word, warp): lane masks and byte masks; returns the unique records."""
        nw = self.size // WORD
        key = (c * nw + word) * self.warps + w
        order = np.argsort(key, kind="stable")
        key, c, w, l, word, bm = key[order], c[order], w[order], l[order], word[order], bm[order]
        starts = np.nonzero(np.r_[True, key[1:] != key[:-1]])[0]
        lanes = np.bitwise_or.reduceat((np.uint32(1) << l.astype(np.uint32)), starts)
        bytes_ = np.bitwise_or.reduceat(bm, starts)
        return c[starts], w[starts], word[starts], lanes, bytes_

    def _record_reads(self, c, w, l, word, bm, tid: int) -> None:
        sh = self.shadow
        gc, gw, gword, glanes, gbytes = self._group(c, w, l, word, bm)
        # rounds: the k-th warp reading a word in this instruction is applied in round k
        cw = gc * (self.size // WORD) + gword
        run_start = np.r_[True, cw[1:] != cw[:-1]]
        idx = np.arange(cw.size)
        rank = idx - np.maximum.accumulate(np.where(run_start, idx, 0))
        for k in range(int(rank.max()) + 1 if rank.size else 0):
            s = rank == k
            c1, w1, wd1, ln1, by1 = gc[s], gw[s], gword[s], glanes[s], gbytes[s]
            E, WS = sh.clocks.vc[c1, w1, w1], sh.wsync[c1, w1]
            a_warp = sh.warp[1, c1, wd1]
            same = a_warp == w1
            merge = same & (sh.clk[1, c1, wd1] == E) & (sh.ws[1, c1, wd1] == WS)
            # merge into slot A
            m = merge
            sh.lanes[1, c1[m], wd1[m]] |= ln1[m]
            sh.bytes[1, c1[m], wd1[m]] |= by1[m]
            sh.tag[1, c1[m], wd1[m]] = tid
            # another warp: slot A moves to slot B
            mv = ~same
            sh.demote(c1[mv], wd1[mv])
            # replace slot A (other warp, or same warp but an older clock)
            r = ~merge
            sh.put(1, c1[r], wd1[r], w1[r], ln1[r], E[r], WS[r], tid, by1[r])

    def on_write(self, addr: np.ndarray, width: int, active: np.ndarray, tag: str, *, op: str = "write") -> tuple:
        """Check a write (WAW, WAR, a write over a pending cp.async, warps of this instruction on one
        word) and, unless ``op == 'cp.async'`` (recorded when its group completes), record it."""
        if self.written is not None and op != "cp.async":
            c, _, _ = np.nonzero(active)
            self._mark_written(c, addr[active], width)
        sh = self.shadow
        if sh is None:
            return ()
        c, w, l, word, bm = self._words(addr, width, active)
        if c.size == 0:
            return ()
        races = []
        waw = self._unordered(0, c, w, l, word) & ((sh.bytes[0, c, word] & bm) != 0)
        races += self._race_list("WAW", 0, waw, c, w, l, word, op, tag, "write")
        for slot in (1, 2):
            war = self._unordered(slot, c, w, l, word) & ((sh.bytes[slot, c, word] & bm) != 0)
            races += self._race_list("WAR", slot, war, c, w, l, word, op, tag, "read")
        tid_here = (w * 32 + l).astype(np.int32)
        pend = (sh.a_tid[c, word] >= 0) & (sh.a_tid[c, word] != tid_here)
        races += self._race_list("WAW cp.async", None, pend, c, w, l, word, op, tag, "")
        gc, gw, gword, glanes, gbytes = self._group(c, w, l, word, bm)
        if self.warps > 1 and gc.size > 1:
            cw = gc * (self.size // WORD) + gword
            dup = np.r_[cw[1:] == cw[:-1], False] | np.r_[False, cw[1:] == cw[:-1]]
            if dup.any():
                races += self._same_instruction_waw(gc[dup], gw[dup], gword[dup], glanes[dup], gbytes[dup], op, tag)
        if op != "cp.async":
            sh.put(0, gc, gword, gw, glanes, sh.clocks.vc[gc, gw, gw], sh.wsync[gc, gw], self.tag_id(tag), gbytes)
        return self._report(races)

    def _same_instruction_waw(self, c, w, word, lanes, bytes_, op, tag) -> list[Race]:
        out = []
        seen = set()
        n = c.size
        i = 0
        while i < n and len(out) < max(1, self.max_races):  # only words written by >1 warp: rare
            j = i
            while j + 1 < n and c[j + 1] == c[i] and word[j + 1] == word[i]:
                j += 1
            for a in range(i, j + 1):
                for b in range(a + 1, j + 1):
                    if bytes_[a] & bytes_[b] and (int(c[i]), int(word[i])) not in seen:
                        seen.add((int(c[i]), int(word[i])))
                        out.append(Race("WAW", int(word[i]) * WORD,
                                        RaceAccess(op, tag, int(c[i]), int(w[a]), _lowest_lane(int(lanes[a]))),
                                        RaceAccess(op, tag, int(c[i]), int(w[b]), _lowest_lane(int(lanes[b])))))
            i = j + 1
        return out

    # -------------------------------------------------------------------------------- async proxy
    @staticmethod
    def _byte_words(addrs: np.ndarray):
        """Byte addresses (any order, no repeats needed) -> (words, byte masks), one record per word."""
        a = np.unique(np.asarray(addrs, np.int64).reshape(-1))
        word = a >> 2
        starts = np.nonzero(np.r_[True, word[1:] != word[:-1]])[0]
        mask = np.bitwise_or.reduceat((np.uint8(1) << (a & 3).astype(np.uint8)), starts) if a.size else a
        return word[starts], mask.astype(np.uint8)

    def _words_of(self, addrs):
        """:meth:`_byte_words`, remembered per address set in the shadow (``_Shadow.regions``)."""
        a = np.ascontiguousarray(np.asarray(addrs, np.int64).reshape(-1))
        key = (a.size, hash(a.data.tobytes()))
        cache = self.shadow.regions
        hit = cache.get(key)
        if hit is not None and np.array_equal(hit[0], a):
            return hit[1], hit[2]
        word, bm = self._byte_words(a)
        if len(cache) >= 512:
            cache.clear()
        cache[key] = (a, word, bm)
        return word, bm

    def _async_records(self, c: int, col: int, lane: int, addrs):
        word, bm = self._words_of(addrs)
        n = word.size
        return np.full(n, c, np.int64), np.full(n, col, np.int64), np.full(n, lane, np.int64), word, bm

    def on_async_write(self, c: int, col: int, vec: np.ndarray, addrs, tag: str, lane: int = 0) -> tuple:
        """Bytes ``addrs`` of CTA c written by the asynchronous agent column ``col`` (a bulk or tensor copy)
        whose clock vector is ``vec`` (:meth:`flashsim.smem.clocks.Clocks.issue`). Checked at the issue (WAW,
        WAR against accesses that do not happen before it) and recorded then, so that a read of the
        destination that its mbarrier's phase does not order after the copy is a race whenever the copy
        lands; ``lane``: the issuing lane."""
        if self.written is not None:
            a = np.asarray(addrs, np.int64).reshape(-1)
            self.written[c, a] = True
        sh = self.shadow
        if sh is None:
            return ()
        c_, w_, l_, word, bm = self._async_records(c, col, lane, addrs)
        if word.size == 0:
            return ()
        races = []
        waw = self._unordered(0, c_, w_, l_, word, vec) & ((sh.bytes[0, c_, word] & bm) != 0)
        races += self._race_list("WAW", 0, waw, c_, w_, l_, word, "write", tag, "write")
        for slot in (1, 2):
            war = self._unordered(slot, c_, w_, l_, word, vec) & ((sh.bytes[slot, c_, word] & bm) != 0)
            races += self._race_list("WAR", slot, war, c_, w_, l_, word, "write", tag, "read")
        sh.put(0, c, word, col, np.uint32(1) << np.uint32(lane), vec[col], -1, self.tag_id(tag), bm)
        return self._report(races)

    def on_async_read(self, c: int, col: int, vec: np.ndarray, addrs, tag: str, lane: int = 0) -> tuple:
        """Bytes ``addrs`` of CTA c read through the async proxy by agent column ``col`` with clock ``vec``
        (a TMA store's or bulk copy's source, a wgmma's operands). A write that does not happen before it
        is a RAW race; a thread's write that does, but with no fence.proxy.async by the writing warp between
        the write and the synchronisation that orders it, is reported as 'RAW (no fence.proxy.async)'."""
        if self.written is not None:
            a = np.asarray(addrs, np.int64).reshape(-1)
            bad = ~self.written[c, a]
            if bad.any():
                self.uninit_count += int(bad.sum())
                room = max(0, self.max_races - len(self.uninit))
                for x in a[bad][:room]:
                    self.uninit.append((c, int(col) % self.warps, lane, int(x), 1, tag))
        sh = self.shadow
        if sh is None:
            return ()
        c_, w_, l_, word, bm = self._async_records(c, col, lane, addrs)
        if word.size == 0:
            return ()
        overlap = (sh.bytes[0, c_, word] & bm) != 0
        raw = self._unordered(0, c_, w_, l_, word, vec) & overlap
        races = self._race_list("RAW", 0, raw, c_, w_, l_, word, "read", tag, "write")
        pw = sh.warp[0, c_, word]
        thread = overlap & ~raw & (pw >= 0) & (pw < sh.clocks.W)
        if thread.any():
            idx = np.nonzero(thread)[0]
            ok = sh.clocks.fenced(c_[idx], pw[idx], sh.clk[0, c_[idx], word[idx]], vec[pw[idx]])
            unfenced = np.zeros(word.size, bool)
            unfenced[idx[~ok]] = True
            races += self._race_list("RAW (no fence.proxy.async)", 0, unfenced, c_, w_, l_, word, "read", tag,
                                     "write")
        # record: slot A moves to slot B when another accessor read it last
        other = sh.warp[1, c, word] != col
        sh.demote(c, word[other])
        sh.put(1, c, word, col, np.uint32(1) << np.uint32(lane), vec[col], -1, self.tag_id(tag),
               np.where(other, bm, sh.bytes[1, c, word] | bm))
        return self._report(races)

    # -------------------------------------------------------------------------------- sync
    def barrier(self, ctas: Any = None) -> None:
        """bar.sync 0 / __syncthreads by every thread of the given CTAs (default all)."""
        if self.shadow is None:
            return
        sel = slice(None) if ctas is None else np.asarray(ctas)
        self.shadow.clocks.barrier(sel)
        self.shadow.wsync[sel] += 1

    @property
    def clocks(self):
        """The happens-before clocks (:class:`flashsim.smem.clocks.Clocks`), or None when races are off."""
        return None if self.shadow is None else self.shadow.clocks

    def named_arrive(self, c: int, w: int, barrier: int) -> None:
        """Warp w of CTA c arrives on named barrier ``barrier`` of a partial-CTA bar.sync / bar.arrive."""
        if self.shadow is not None:
            self.shadow.clocks.named_arrive(c, w, barrier)

    def named_complete(self, c: int, barrier: int, waiting) -> None:
        """Named barrier ``barrier`` of CTA c completed; the warps ``waiting`` (bar.sync) resume ordered
        after every arrival."""
        if self.shadow is not None:
            self.shadow.clocks.named_complete(c, barrier, waiting)
            for w in waiting:
                self.shadow.wsync[c, int(w)] += 1

    def warp_barrier(self, warps_mask: np.ndarray) -> None:
        """__syncwarp(0xffffffff) by the warps where ``warps_mask`` (ctas, warps) is True."""
        if self.shadow is None:
            return
        c, w = np.nonzero(warps_mask)
        self.shadow.wsync[c, w] += 1

    def _complete_shadow(self, c, w, l, dst, k, group) -> None:
        sh = self.shadow
        nw = max(1, k // WORD)
        words = ((dst >> 2)[:, None] + np.arange(nw)[None, :]).reshape(-1)
        cc, ww, ll, gg = (np.repeat(x, nw) for x in (c, w, l, group))
        tid = (ww * 32 + ll).astype(np.int32)
        mine = (sh.a_tid[cc, words] == tid) & (sh.a_group[cc, words] == gg)
        tags = sh.a_tag[cc, words]
        sh.a_tid[cc[mine], words[mine]] = -1
        # the copy becomes an ordinary write by its thread, at the time of the wait
        sh.put(0, cc, words, ww, np.uint32(1) << ll.astype(np.uint32), sh.clocks.vc[cc, ww, ww], sh.wsync[cc, ww],
               tags, 0xF)
