"""The bank accountant's rule: how many wavefronts a warp instruction on shared memory takes.

Banks, as Nsight Compute counts them (facts in ARCHITECTURE.md; to be confirmed per pattern by
gpu/check_banks.py on the H100). 32 banks of 4 bytes, ``bank = (byte address / 4) % 32``::

    byte address:  ... | word index                     | byte in word |
                         \\_ row _/ \\_ bank (5 bits) _/   \\_ 2 bits __/

A warp instruction is split into *phases* of consecutive lanes; a phase takes as many *wavefronts* as
the most distinct 32-bit words any one bank must serve for it (lanes that touch the same word share it:
broadcast on loads, one winner on stores). Wavefronts of an instruction = the sum over its phases.

=================  ===================  ========================================  ===============
instruction        lanes per phase      unit a lane touches                        ideal
=================  ===================  ========================================  ===============
ld/st 8/16/32-bit  32 (one phase)       the word holding the bytes                 1
ld/st 64-bit       16 (two half-warps)  2 words in 2 adjacent banks                2
ld/st 128-bit      8 (four quarters)    4 words in 4 adjacent banks                4
ldmatrix/stmatrix  8 rows = one 8x8     a 16-byte row (4 adjacent banks)           1 per matrix
cp.async 4/8/16 B  as a store of that width (op ``ldgsts``; sm_90: see below)    as the store
=================  ===================  ========================================  ===============

``ideal`` = the number of phases with at least one active lane; ``conflicts = wavefronts - ideal``
(as Nsight Compute's ``..._bank_conflicts_...`` = wavefronts beyond the minimum). Because an access of
2^k bytes is aligned, the words it touches lie in 2^k/4 adjacent banks, so "distinct words per bank"
equals "distinct units per bank group" (8 groups of 4 banks for 16-byte units), which is what the
numba kernel counts.

cp.async on sm_90 (model ``SM90``) is counted otherwise, as Nsight Compute's per-instruction counters give
it on the H100: its count depends on the global source addresses and on .ca / .cg (LDGSTS.BYPASS), lanes
on one destination are not merged (.ca) or count once (.cg), zero-filling copies add a pass; the rule is
:func:`cp_async_wavefronts` (and traces/sass/ncu_source/README.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numba
import numpy as np

from flashsim.errors import bad_argument
from flashsim.smem.cp_async import _COPY_KEYS, cp_async_wavefronts
from flashsim.smem.lanes import _lane_addresses, _lane_bools

BANKS = 32
WORD = 4
OPS = ("ld", "st", "ldsm", "stsm", "ldgsts", "atom", "atom_cas")
WIDTHS = (1, 2, 4, 8, 16)


def bank_of(addr):
    """Bank of byte address(es): ``(addr >> 2) & 31``."""
    return (np.asarray(addr, dtype=np.int64) >> 2) & 31 if not isinstance(addr, int) else (addr >> 2) & 31


# ----------------------------------------------------------------------------------------------------
# Counting rules
# ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BankModel:
    """One candidate counting rule. ``PHASES`` is the documented one (ARCHITECTURE.md facts).

    ``pair_broadcast``: the rule NVIDIA staff gave for sm_70-75 (forum): a 64/128-bit *load* whose
    active lanes satisfy addr[n] == addr[n^1] for all n, or addr[n] == addr[n^2] for all n, is served
    with half as many phases (the return data is packed). Unverified on sm_90; gpu/check_banks.py
    measures patterns that tell the two apart.
    """

    name: str
    pair_broadcast: bool = False
    # cp.async (LDGSTS) counted by :func:`cp_async_wavefronts` (source lines, .ca/.cg, zero fill) instead
    # of as a plain store of its width
    cp_async: bool = False
    # the ideal of a 64/128-bit ld/st: ceil(active lanes x width / 128), / 256 for a load whose lane pairs
    # pack without a conflict (instead of one per phase with an active lane)
    ideal_bytes: bool = False
    # LDGSTS.BYPASS with a guard or a source predicate held in P0: Nsight Compute's counters read the
    # guard as false and the source predicate as every lane reading (see CP_ASYNC_P0); applied by the SASS
    # interpreter (flashsim.sass.ops_mem), which sees the instruction's registers
    cp_async_p0: bool = False

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise bad_argument("name", self.name, "expected a non-empty str")
        for f in ("pair_broadcast", "cp_async", "ideal_bytes", "cp_async_p0"):
            if not isinstance(getattr(self, f), bool):
                raise bad_argument(f, getattr(self, f), "expected a bool")


PHASES = BankModel("phases")
PAIR_BROADCAST = BankModel("pair-broadcast", pair_broadcast=True)
# what Nsight Compute 2025.3 counted on sm_90 (NVIDIA H200, gpu/check_banks.py, report in
# traces/banks/): 64/128-bit loads whose lanes pair up (addr[n] == addr[n^1] or addr[n^2]) take half
# the phases. Nsight Compute's per-instruction source counters (H100, gpu/ncu_source.py,
# traces/sass/ncu_source/) give the ideal of 64/128-bit accesses by bytes (``ideal_bytes``) and the
# cp.async counts of :func:`cp_async_wavefronts` (``cp_async``, ``cp_async_p0``).
SM90 = BankModel("sm_90", pair_broadcast=True, cp_async=True, ideal_bytes=True, cp_async_p0=True)
MODELS = {m.name: m for m in (SM90, PHASES, PAIR_BROADCAST)}
#: what Nsight Compute's counters read for a predicate held in P0 on LDGSTS.BYPASS (``cp_async_p0``):
#: the guard (``@P0`` / ``@!P0``: P0 read as this) and the source predicate (``, P0`` of .ZFILL and
#: ``, !P0`` of ignore-src alike: every lane reads when True); the copy itself follows the real predicates
CP_ASYNC_P0 = MappingProxyType({"guard": False, "source": True})


def phases_of(op: str, width: int) -> tuple[int, int]:
    """(lanes per phase, unit bytes) of an access: see the table in the module docstring."""
    if op not in OPS:
        raise bad_argument("op", op, f"expected one of {OPS}")
    if op in ("ldsm", "stsm"):
        return 8, 16
    if op in ("atom", "atom_cas"):
        if width != 4:
            raise NotImplementedError(f"bank counts of {8 * width}-bit shared atomics are not modelled "
                                      "(measured only for 32-bit ATOMS)")
        return 32, 4
    if width not in WIDTHS:
        raise bad_argument("width", width, f"expected an access width in bytes, one of {WIDTHS}")
    if op == "ldgsts" and width not in (4, 8, 16):
        raise bad_argument("width", width, "cp.async copies 4, 8 or 16 bytes")
    if width <= 4:
        return 32, 4
    return (16, 8) if width == 8 else (8, 16)


@numba.njit(cache=True, nogil=True)
def _count(addr, active, unit_shift, group_mask, lanes_per_phase, wf, ideal):  # pragma: no cover - numba
    n = addr.shape[0]
    nphase = 32 // lanes_per_phase
    ngroups = group_mask + 1
    glist = np.empty((32, 32), np.int64)
    gcnt = np.zeros(32, np.int32)
    for i in range(n):
        tot = 0
        idl = 0
        for p in range(nphase):
            for g in range(ngroups):
                gcnt[g] = 0
            m = 0
            base = p * lanes_per_phase
            for k in range(lanes_per_phase):
                lane = base + k
                if not active[i, lane]:
                    continue
                u = addr[i, lane] >> unit_shift
                g = u & group_mask
                c = gcnt[g]
                new = True
                for q in range(c):
                    if glist[g, q] == u:
                        new = False
                        break
                if new:
                    glist[g, c] = u
                    c += 1
                    gcnt[g] = c
                    if c > m:
                        m = c
            if m > 0:
                tot += m
                idl += 1
        wf[i] = tot
        ideal[i] = idl


@numba.njit(cache=True, nogil=True)
def _pair_uniform(addr, active):  # pragma: no cover - numba
    """Per instruction: addr[n] == addr[n^1] for every active pair, or addr[n] == addr[n^2] likewise."""
    out = np.zeros(addr.shape[0], np.bool_)
    for i in range(addr.shape[0]):
        for x in (1, 2):
            ok = True
            for lane in range(32):
                p = lane ^ x
                if active[i, lane] and active[i, p] and addr[i, lane] != addr[i, p]:
                    ok = False
                    break
            if ok:
                out[i] = True
                break
    return out


def wavefronts(addr: Any, *, width: int = 4, op: str = "ld", active: Any = None, num: int = 4,
               model: BankModel = SM90, **copy) -> tuple[np.ndarray, np.ndarray]:
    """Wavefronts and ideal wavefronts of warp instruction(s), as Nsight Compute counts them.

    ``addr``: byte addresses, shape (..., 32) (for ``ldsm``/``stsm``: the row address each lane gives);
    ``width``: bytes per lane (ignored for ldsm/stsm: 16-byte rows); ``op``: one of
    'ld', 'st', 'ldsm', 'stsm', 'ldgsts' (cp.async); ``active``: bool (..., 32), default all lanes
    (for ldsm/stsm the lanes 0..8*num-1 that supply row addresses); ``num``: 1, 2 or 4 matrices.
    ``copy``: for 'ldgsts' under a model with ``cp_async``, the keywords ``src``, ``reads``, ``bypass``,
    ``zfill`` of :func:`cp_async_wavefronts` (the destination is ``addr``).
    Returns two int32 arrays of shape (...): wavefronts and ideal wavefronts (conflicts = the difference).
    Addresses must be aligned to the access width (they are not checked here; SharedMemory checks).
    """
    lpp, unit = phases_of(op, width)
    if copy:
        bad = sorted(set(copy) - set(_COPY_KEYS))
        if bad or op != "ldgsts":
            raise bad_argument(bad[0] if bad else next(iter(copy)), "given",
                               f"the keywords {', '.join(_COPY_KEYS)} describe a cp.async (op='ldgsts') only")
    if op == "ldgsts" and model.cp_async:
        return cp_async_wavefronts(addr, width=width, active=active, **copy)
    a, a2 = _lane_addresses("addr", addr)
    lead = a.shape[:-1]
    act = np.ones(a2.shape, dtype=bool) if active is None else _lane_bools("active", active, a.shape).reshape(-1, 32)
    if op in ("ldsm", "stsm"):
        if num not in (1, 2, 4):
            raise bad_argument("num", num, "ldmatrix/stmatrix move 1, 2 or 4 matrices (.x1/.x2/.x4)")
        act = act & (np.arange(32) < 8 * num)
    if op in ("atom", "atom_cas"):
        # 32-bit shared atomics (Nsight Compute's source counters, H100): the lanes are served one per bank
        # per wavefront, lanes on one word not merged; a CAS takes two wavefronts per lane (ideal 2)
        per_bank = np.zeros((a2.shape[0], BANKS), np.int32)
        r, ln = np.nonzero(act)
        np.add.at(per_bank, (r, (a2[r, ln] >> 2) & 31), 1)
        k = 2 if op == "atom_cas" else 1
        wf = (k * per_bank.max(axis=1)).astype(np.int32)
        ideal = (k * act.any(axis=1)).astype(np.int32)
        return wf.reshape(lead), ideal.reshape(lead)
    wf = np.empty(a2.shape[0], np.int32)
    ideal = np.empty(a2.shape[0], np.int32)
    shift = unit.bit_length() - 1
    _count(a2, act, shift, 128 // unit - 1 if unit >= 4 else 31, lpp, wf, ideal)
    packed_clean = np.zeros(wf.shape, bool)
    if model.pair_broadcast and op == "ld" and width in (8, 16):
        packed = _pair_uniform(a2, act)
        if packed.any():
            wf2 = np.empty_like(wf)
            id2 = np.empty_like(ideal)
            _count(a2, act, shift, 128 // unit - 1, lpp * 2, wf2, id2)
            wf = np.where(packed, wf2, wf)
            ideal = np.where(packed, id2, ideal)
            packed_clean = packed & (wf2 == id2)
    if model.ideal_bytes and op in ("ld", "st") and width in (8, 16):
        # Nsight Compute's ideal for 64/128-bit accesses: the bytes the active lanes ask for, 128 per
        # wavefront, 256 when a load packs lane pairs without a conflict (its source counters on sm_90)
        lanes = act.sum(axis=1)
        per = np.where(packed_clean, 256, 128)
        ideal = ((lanes * width + per - 1) // per).astype(ideal.dtype)
    return wf.reshape(lead), ideal.reshape(lead)


def bank_table(addr: Any, *, width: int = 4, op: str = "ld", active: Any = None, num: int = 4) -> list[dict]:
    """For ONE warp instruction: per phase, which wavefront serves which (lane, word) in which bank.

    Returns a list (one entry per phase) of dicts: ``lanes`` (the lanes of the phase), ``wavefronts``,
    and ``cells``: a list of (wavefront, bank, word, lanes-that-touch-it). Wavefront k of a phase serves
    the k-th distinct word of every bank (in lane order); a cell with k >= 1 is a conflict. For display
    (the CLI and the SVG); the counts equal :func:`wavefronts`.
    """
    lpp, unit = phases_of(op, width)
    a = np.asarray(addr, dtype=np.int64).reshape(32)
    act = np.ones(32, bool) if active is None else np.asarray(active, bool).reshape(32)
    if op in ("ldsm", "stsm"):
        act = act & (np.arange(32) < 8 * num)
    words_per_lane = max(1, unit // WORD) if width > 4 or op in ("ldsm", "stsm") else 1
    out = []
    for p in range(32 // lpp):
        lanes = np.arange(p * lpp, (p + 1) * lpp)
        lanes = lanes[act[lanes]]
        if lanes.size == 0:
            continue
        base = (a[lanes] >> 2) & ~(words_per_lane - 1) if words_per_lane > 1 else a[lanes] >> 2
        words = (base[:, None] + np.arange(words_per_lane)[None, :])  # (L, k)
        flat_w = words.reshape(-1)
        flat_l = np.repeat(lanes, words_per_lane)
        uniq, first = np.unique(flat_w, return_index=True)
        order = np.argsort(first, kind="stable")  # distinct words in lane order
        uniq = uniq[order]
        banks = uniq & 31
        slot = np.zeros(uniq.size, np.int64)
        seen: dict[int, int] = {}
        for i, b in enumerate(banks.tolist()):  # <= 32 distinct words per phase: display only
            slot[i] = seen.get(b, 0)
            seen[b] = slot[i] + 1
        cells = []
        for i, w in enumerate(uniq.tolist()):
            who = sorted(set(flat_l[flat_w == w].tolist()))
            cells.append((int(slot[i]), int(w & 31), int(w), who))
        out.append({"phase": p, "lanes": lanes.tolist(), "wavefronts": int(slot.max()) + 1, "cells": cells})
    return out


# ----------------------------------------------------------------------------------------------------
# The ledger
# ----------------------------------------------------------------------------------------------------


@dataclass
class BankRow:
    tag: str
    op: str
    instructions: int = 0
    wavefronts: int = 0
    ideal: int = 0

    @property
    def conflicts(self) -> int:
        return self.wavefronts - self.ideal


@dataclass
class BankLedger:
    """Wavefronts and conflicts summed per (tag, op): where a kernel's bank conflicts come from."""

    rows: dict = field(default_factory=dict)

    def add(self, tag: str, op: str, wf: np.ndarray, ideal: np.ndarray) -> None:
        executed = ideal > 0
        row = self.rows.setdefault((tag, op), BankRow(tag, op))
        row.instructions += int(executed.sum())
        row.wavefronts += int(wf.sum(dtype=np.int64))
        row.ideal += int(ideal.sum(dtype=np.int64))

    def report(self) -> list[BankRow]:
        return sorted(self.rows.values(), key=lambda r: (-r.conflicts, r.tag, r.op))

    def table(self) -> str:
        lines = [f"{'tag':<28} {'op':<7} {'instr':>9} {'wavefronts':>11} {'ideal':>9} {'conflicts':>10}"]
        for r in self.report():
            lines.append(f"{r.tag:<28} {r.op:<7} {r.instructions:>9} {r.wavefronts:>11} {r.ideal:>9} {r.conflicts:>10}")
        return "\n".join(lines)
