"""The race detector of shared memory: a shadow of every word's latest accesses, checked at every access.

Race detection keeps a shadow per 4-byte word: the last write (warp, lane mask, barrier epoch,
__syncwarp epoch, tag, bytes) and two read records (the latest reader warp, and the latest reader
of another warp), plus a pending cp.async (thread, group). Two accesses to overlapping bytes of a word,
at least one a write, race when no barrier orders them: different warps with no bar.sync between, or
different lanes of one warp with neither bar.sync nor __syncwarp between. A read of a word that a
cp.async has not yet made visible (no cp.async.wait_group / wait_all of that group by the copying
thread) is reported too. Accesses of one warp instruction do not race with each other, except the same
word written by two warps of one batched instruction (a WAW). Limits (missed races, never invented ones):
the shadow keeps one writer per word, so after 8/16-bit writes by different threads to different bytes
of one word only the last writer is checked against later accesses, and it keeps two reader records.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from flashsim.errors import FlashsimError
from flashsim.smem.banks import WORD


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
               else "with no barrier between")
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
        self.epoch = np.zeros(ctas, np.int32)  # bar.sync count per CTA
        self.wsync = np.zeros((ctas, warps), np.int32)  # __syncwarp (and bar.sync) count per warp
        shape = (ctas, words)
        # slot 0: last write; slots 1, 2: reads (latest reader warp; latest reader of another warp)
        self.warp = np.full((3,) + shape, -1, np.int32)
        self.lanes = np.zeros((3,) + shape, np.uint32)
        self.ep = np.zeros((3,) + shape, np.int32)
        self.ws = np.zeros((3,) + shape, np.int32)
        self.tag = np.zeros((3,) + shape, np.int32)
        self.bytes = np.zeros((3,) + shape, np.uint8)
        # pending cp.async writes
        self.a_tid = np.full(shape, -1, np.int32)
        self.a_group = np.zeros(shape, np.int32)
        self.a_tag = np.zeros(shape, np.int32)


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

    def _unordered(self, slot: int, c, w, l, word) -> np.ndarray:
        sh = self.shadow
        pw = sh.warp[slot, c, word]
        same_epoch = sh.ep[slot, c, word] == sh.epoch[c]
        other_warp = pw != w
        same_ws = sh.ws[slot, c, word] == sh.wsync[c, w]
        other_lanes = (sh.lanes[slot, c, word] & ~(np.uint32(1) << l.astype(np.uint32))) != 0
        return (pw >= 0) & same_epoch & (other_warp | (same_ws & other_lanes))

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
                a1 = RaceAccess(op1, self._tags[int(sh.tag[slot_or_none, ci, wd])], ci, pw, pl)
            out.append(Race(kind, wd * WORD, a1, RaceAccess(op2, tag2, ci, wi, li)))
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
            E, WS = sh.epoch[c1], sh.wsync[c1, w1]
            a_warp = sh.warp[1, c1, wd1]
            same = a_warp == w1
            merge = same & (sh.ep[1, c1, wd1] == E) & (sh.ws[1, c1, wd1] == WS)
            # merge into slot A
            m = merge
            sh.lanes[1, c1[m], wd1[m]] |= ln1[m]
            sh.bytes[1, c1[m], wd1[m]] |= by1[m]
            sh.tag[1, c1[m], wd1[m]] = tid
            # another warp: slot A moves to slot B
            mv = ~same
            for arr in (sh.warp, sh.lanes, sh.ep, sh.ws, sh.tag, sh.bytes):
                arr[2, c1[mv], wd1[mv]] = arr[1, c1[mv], wd1[mv]]
            # replace slot A (other warp, or same warp but an older epoch)
            r = ~merge
            sh.warp[1, c1[r], wd1[r]] = w1[r]
            sh.lanes[1, c1[r], wd1[r]] = ln1[r]
            sh.ep[1, c1[r], wd1[r]] = E[r]
            sh.ws[1, c1[r], wd1[r]] = WS[r]
            sh.tag[1, c1[r], wd1[r]] = tid
            sh.bytes[1, c1[r], wd1[r]] = by1[r]

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
            tid = self.tag_id(tag)
            sh.warp[0, gc, gword] = gw
            sh.lanes[0, gc, gword] = glanes
            sh.ep[0, gc, gword] = sh.epoch[gc]
            sh.ws[0, gc, gword] = sh.wsync[gc, gw]
            sh.tag[0, gc, gword] = tid
            sh.bytes[0, gc, gword] = gbytes
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

    # -------------------------------------------------------------------------------- sync
    def barrier(self, ctas: Any = None) -> None:
        """bar.sync 0 / __syncthreads by every thread of the given CTAs (default all)."""
        if self.shadow is None:
            return
        sel = slice(None) if ctas is None else np.asarray(ctas)
        self.shadow.epoch[sel] += 1
        self.shadow.wsync[sel] += 1

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
        sh.warp[0, cc, words] = ww
        sh.lanes[0, cc, words] = np.uint32(1) << ll.astype(np.uint32)
        sh.ep[0, cc, words] = sh.epoch[cc]
        sh.ws[0, cc, words] = sh.wsync[cc, ww]
        sh.tag[0, cc, words] = tags
        sh.bytes[0, cc, words] = 0xF
