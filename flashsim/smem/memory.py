"""Shared memory itself: :class:`SharedMemory`, the (ctas, size) bytes of a launch with GPU-like faults, the
bank ledger its accesses are counted into, initcheck and the pending cp.async copies; and the :class:`Event`
record a warp instruction returns. Its race checks are :class:`flashsim.smem.races.RaceDetector`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from flashsim.errors import SimulatedFault, bad_argument
from flashsim.smem.banks import WORD, BankLedger, wavefronts
from flashsim.smem.races import Race, RaceDetector, _Shadow

MAX_PER_CTA = 227 * 1024  # bytes of shared memory a CTA may use on sm_90 (static + dynamic)
RESERVED = 1024  # the window the driver reserves at the start of every CTA's shared memory (SASS sees it)


@dataclass(frozen=True)
class Event:
    """What one (batched) warp instruction did: the record the trace recorder chooses from.

    ``addr``/``active`` are (ctas, warps, 32) (row addresses for ldmatrix/stmatrix); ``wavefronts`` and
    ``ideal`` are (ctas, warps) int32 (None for instructions that do not touch shared memory).
    """

    op: str
    tag: str
    kind: str = ""  # the Nsight Compute op class: ld, st, ldsm, stsm, ldgsts ('' if none)
    width: int = 0
    addr: np.ndarray | None = None
    active: np.ndarray | None = None
    wavefronts: np.ndarray | None = None
    ideal: np.ndarray | None = None
    races: tuple = ()

    @property
    def conflicts(self) -> np.ndarray | None:
        return None if self.wavefronts is None else self.wavefronts - self.ideal


# ----------------------------------------------------------------------------------------------------
# Shared memory
# ----------------------------------------------------------------------------------------------------


class SharedMemory(RaceDetector):
    """Shared memory of ``ctas`` CTAs of ``warps`` warps, ``size`` bytes each (a multiple of 16).

    ``data`` is the (ctas, size) uint8 image. Instruction functions in flashsim.warp read and update it,
    add each instruction's wavefronts to ``ledger`` under its tag, and (with ``races=True``) check every
    access against the shadow; hazards are appended to ``races`` (at most ``max_races`` kept, all counted
    in ``race_count``) or raised as :class:`RaceError` with ``on_race='raise'``.
    """

    def __init__(self, ctas: int = 1, size: int = 48 * 1024, *, warps: int = 1, races: bool = True,
                 on_race: str = "record", max_races: int = 1000, reserved: int = 0, banks: bool = True,
                 initcheck: bool = False):
        for name, v in (("ctas", ctas), ("size", size), ("warps", warps)):
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v <= 0:
                raise bad_argument(name, v, "expected a positive int")
        if size % 16:
            raise bad_argument("size", size, "shared memory size must be a multiple of 16 bytes")
        if reserved not in (0, RESERVED):
            raise bad_argument("reserved", reserved, f"expected 0 or {RESERVED} (the window the driver reserves)")
        if size > MAX_PER_CTA + reserved:
            raise bad_argument("size", size, f"an sm_90 CTA has at most 227 KiB ({MAX_PER_CTA} bytes) of shared "
                                             "memory" + (f", plus the reserved {reserved} bytes" if reserved else ""))
        if on_race not in ("record", "raise"):
            raise bad_argument("on_race", on_race, "expected 'record' or 'raise'")
        self.ctas, self.size, self.warps = int(ctas), int(size), int(warps)
        self.data = np.zeros((self.ctas, self.size), np.uint8)
        self.ledger = BankLedger()
        self.banks = bool(banks)  # count wavefronts into the ledger (off: ``account`` returns (None, None))
        # called as observer(tag, op, addr, width, active, num) for every access ``account`` sees (a tracer)
        self.observer = None
        # initcheck: which bytes something wrote; reads of others are listed in ``uninit`` (at most
        # ``max_races`` kept, all counted in ``uninit_count``) as (cta, warp, lane, addr, bytes, tag)
        self.written = np.zeros((self.ctas, self.size), bool) if initcheck else None
        self.uninit: list[tuple] = []
        self.uninit_count = 0
        self.on_race = on_race
        self.max_races = max_races
        self.races: list[Race] = []
        self.race_count = 0
        self._unlisted = 0
        self.shadow = _Shadow(self.ctas, self.size // WORD, self.warps) if races else None
        self._tags: list[str] = []
        self._tag_ids: dict[str, int] = {}
        # cp.async state: per-thread committed group count, pending copies (applied on wait)
        self.cp_committed = np.zeros((self.ctas, self.warps, 32), np.int64)
        self._pending: list[dict] = []

    # -------------------------------------------------------------------------------- helpers
    @classmethod
    def from_image(cls, image: Any, *, warps: int = 1, **kw) -> "SharedMemory":
        """Shared memory whose bytes are ``image`` ((ctas, size) or (size,) uint8)."""
        img = np.asarray(image)
        if img.dtype != np.uint8 or img.ndim not in (1, 2):
            raise bad_argument("image", getattr(img, "shape", img), "expected a uint8 array (size,) or (ctas, size)")
        img = img.reshape(1, -1) if img.ndim == 1 else img
        sm = cls(img.shape[0], img.shape[1], warps=warps, **kw)
        sm.data[...] = img
        return sm

    def tag_id(self, tag: str) -> int:
        i = self._tag_ids.get(tag)
        if i is None:
            i = self._tag_ids[tag] = len(self._tags)
            self._tags.append(tag)
        return i

    def check_shape(self, lead_shape: tuple[int, int]) -> None:
        c, w = lead_shape
        if c != self.ctas or w > self.warps:
            raise bad_argument(
                "addr", f"(ctas, warps) = {lead_shape}",
                f"this SharedMemory holds {self.ctas} CTAs of {self.warps} warps",
            )

    def check_access(self, addr: np.ndarray, width: int, active: np.ndarray, what: str, align: int | None = None) -> None:
        """Raise SimulatedFault for the first active lane with a misaligned or out-of-bounds address."""
        align = width if align is None else align
        bad_align = active & ((addr & (align - 1)) != 0)
        if bad_align.any():
            c, w, l = (int(v) for v in np.argwhere(bad_align)[0])
            raise SimulatedFault("misaligned shared address", cta=c, warp=w, lane=l, addr=int(addr[c, w, l]),
                                 detail=f"{what} needs {align}-byte alignment")
        bad_oob = active & ((addr < 0) | (addr + width > self.size))
        if bad_oob.any():
            c, w, l = (int(v) for v in np.argwhere(bad_oob)[0])
            a = int(addr[c, w, l])
            raise SimulatedFault("out-of-bounds shared address", cta=c, warp=w, lane=l, addr=a & 0xFFFFFFFFFFFFFFFF,
                                 detail=f"{what} of {width} bytes at {a}; the CTA has {self.size} bytes")

    @property
    def watching(self) -> bool:
        """True when accesses must be shown to :meth:`on_read` / :meth:`on_write` (races or initcheck)."""
        return self.shadow is not None or self.written is not None

    def account(self, tag: str, op: str, addr: np.ndarray, width: int, active: np.ndarray, num: int = 4, **copy):
        """Wavefronts / ideal of each warp's instruction over the lanes ``active``; added to the ledger under
        ``tag`` ((None, None) when this SharedMemory does not count banks); the observer sees the same.
        ``copy``: a cp.async's ``src``, ``reads``, ``bypass``, ``zfill`` (see :func:`cp_async_wavefronts`)."""
        if self.observer is not None:
            if copy:
                self.observer(tag, op, addr, width, active, num, **copy)
            else:
                self.observer(tag, op, addr, width, active, num)
        if not self.banks:
            return None, None
        wf, ideal = wavefronts(addr, width=width, op=op, active=active, num=num, **copy)
        self.ledger.add(tag, op, wf, ideal)
        return wf, ideal

    # -------------------------------------------------------------------------------- initcheck
    def _check_written(self, addr: np.ndarray, width: int, active: np.ndarray, tag: str) -> None:
        c, w, l = np.nonzero(active)
        if c.size == 0:
            return
        a = addr[c, w, l]
        ok = self.written[c[:, None], a[:, None] + np.arange(width)].all(axis=1)
        bad = np.nonzero(~ok)[0]
        if bad.size:
            self.uninit_count += int(bad.size)
            room = max(0, self.max_races - len(self.uninit))
            self.uninit.extend((int(c[i]), int(w[i]), int(l[i]), int(a[i]), width, tag) for i in bad[:room])

    def _mark_written(self, c, a, width: int) -> None:
        self.written[np.asarray(c)[:, None], np.asarray(a)[:, None] + np.arange(width)] = True

    def on_atomic(self, addr: np.ndarray, width: int, active: np.ndarray, tag: str, *, reads: bool = True,
                  cas: bool = False) -> None:
        """A shared atomic of ``width`` bytes by ``active`` lanes (addresses checked): initcheck of what it
        reads (not for a reduction, ``reads=False``), its bytes then written, and its banks (32-bit ones;
        a CAS counts as two accesses). Atomics are not watched by the race shadow: two atomics never race."""
        if self.written is not None:
            if reads:
                self._check_written(addr, width, active, tag)
            c, _, _ = np.nonzero(active)
            self._mark_written(c, addr[active], width)
        if width == 4:
            self.account(tag, "atom_cas" if cas else "atom", addr, width, active)

    # -------------------------------------------------------------------------------- cp.async
    def add_pending(self, c, w, l, dst, payload: np.ndarray, tag: str) -> None:
        """Queue copies (cta, warp, lane, dst byte address, bytes (n, k)) in each thread's open group."""
        group = self.cp_committed[c, w, l]
        self._pending.append({"c": c, "w": w, "l": l, "dst": dst, "data": payload, "group": group})
        if self.shadow is not None:
            k = payload.shape[1]
            nw = max(1, k // WORD)
            words = (dst >> 2)[:, None] + np.arange(nw)[None, :]
            tid = np.repeat((w * 32 + l).astype(np.int32), nw)
            cc = np.repeat(c, nw)
            self.shadow.a_tid[cc, words.reshape(-1)] = tid
            self.shadow.a_group[cc, words.reshape(-1)] = np.repeat(group, nw)
            self.shadow.a_tag[cc, words.reshape(-1)] = self.tag_id(tag)

    def complete(self, threshold: np.ndarray) -> None:
        """Make visible every pending copy whose group < ``threshold[cta, warp, lane]`` of its thread."""
        keep = []
        for rec in self._pending:
            done = rec["group"] < threshold[rec["c"], rec["w"], rec["l"]]
            if done.any():
                c, w, l, dst, data = (rec[k][done] for k in ("c", "w", "l", "dst", "data"))
                k = data.shape[1]
                cols = dst[:, None] + np.arange(k)[None, :]
                self.data[np.repeat(c, k), cols.reshape(-1)] = data.reshape(-1)
                if self.written is not None:
                    self._mark_written(c, dst, k)
                if self.shadow is not None:
                    self._complete_shadow(c, w, l, dst, k, rec["group"][done])
            if (~done).any():
                keep.append({key: v[~done] for key, v in rec.items()})
        self._pending = keep

    @property
    def pending_copies(self) -> int:
        """Number of cp.async copies not yet made visible by a wait."""
        return int(sum(r["c"].size for r in self._pending))
