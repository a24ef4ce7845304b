"""Shared memory: a per-CTA byte array with GPU-like faults, a bank accountant and a race detector.

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

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numba
import numpy as np

from flashsim.errors import FlashsimError, SimulatedFault, bad_argument

__all__ = [
    "BANKS", "BankLedger", "BankModel", "BankRow", "Event", "MODELS", "PHASES", "PAIR_BROADCAST", "SM90", "Race",
    "RaceAccess", "RaceError", "SharedMemory", "bank_of", "bank_table", "cp_async_table", "cp_async_wavefronts",
    "phases_of", "wavefronts", "CP_ASYNC_P0",
]

BANKS = 32
WORD = 4
MAX_PER_CTA = 227 * 1024  # bytes of shared memory a CTA may use on sm_90 (static + dynamic)
RESERVED = 1024  # the window the driver reserves at the start of every CTA's shared memory (SASS sees it)
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


# ----------------------------------------------------------------------------------------------------
# cp.async (LDGSTS)
# ----------------------------------------------------------------------------------------------------
#
# What Nsight Compute's per-instruction counters give for cp.async on sm_90 (H100: every LDGSTS of the
# recorded kernels, 307 instructions in 7 kernels, 161 + 22 of them the patterns of
# gpu/kernels/probe_ldgsts.cu; executions, wavefronts and ideal all agree; of 96 drawn patterns
# (probe_ldgsts_random, _random2) 79 agree, of 48 more (_random3) 38, of 56 designed src-size and
# ignore-src patterns (probe_ldgsts_zfill) 56; the record and the rule with its examples:
# traces/sass/ncu_source/README.md). Per warp instruction, with "reading" lanes = on and
# reading global memory, "zero" lanes = on but reading nothing (ignore-src true, src-size 0), a "line" =
# 128 aligned bytes, a "chunk" = 16, a "sector" = 32:
#
# cp.async.cg (LDGSTS.BYPASS, 16 bytes):
#   - reading lanes on one destination chunk: the lowest lane counts, the others not at all;
#   - a source sector whose two chunks are read by the two lanes into one destination line that read it,
#     and write one destination sector (in either order), moves whole: one wavefront per (destination line,
#     source line) for all whole sectors (a source line copied to several destination lines: one each);
#   - every other reading lane: one wavefront per distinct (destination line, source line,
#     (destination - source) / 16 mod 8); so a line copied to a line in any order of its sectors takes 1,
#     a copy that spreads a source line's chunks over destination chunks at other distances takes one
#     per distance (8 lanes at a 32-byte destination stride: 8);
#   - ideal: the distinct destination addresses of the reading lanes x 16 bytes / 128;
#   - the .ZFILL form, and the ignore-src form when a lane is zero, add a zero-fill pass over EVERY lane
#     on, scheduled as a 16-byte cp.async.ca copy (below) of those lanes: destination banks and, for the
#     reading lanes, source banks (every lane reading one source address: 32 more), ideal lanes x 16 / 128.
# cp.async.ca (LDGSTS, 4/8/16 bytes), one pass over every lane on:
#   - phases of 32 / 16 / 8 lanes (4 / 8 / 16 bytes), as a store of that width;
#   - in a phase, lanes in lane order: a lane goes into the wavefront after the latest one of any earlier
#     lane on that shares a destination bank with it, or, both reading, a source bank ((source / 4) mod
#     32); the first wavefront if none: lanes on one word are not merged, and a lane never overtakes an
#     earlier lane it conflicts with (so whole source lines in a row cost one wavefront each, lines spread
#     over many banks share);
#   - ideal: lanes on x width / 128.
# The measured probes read 16 bytes per lane from 16 * lane (every width), the default ``src`` here.
# Which lanes are "on" is the SASS interpreter's part: for LDGSTS.BYPASS with a guard or a source
# predicate in P0 the counters read P0 as CP_ASYNC_P0 says (flashsim.sass.ops_mem applies it): a guard as
# false, a source predicate (`, P0` of .ZFILL, `, !P0` of ignore-src) as every lane reading.

_COPY_KEYS = ("src", "reads", "bypass", "zfill", "nread")


@numba.njit(cache=True, nogil=True)
def _cg_read(dst, src, reads, wf, lane_wf):  # pragma: no cover - numba
    """cp.async.cg, the reading lanes (16-byte aligned addresses): wavefronts and each lane's (-1: none)."""
    keep = np.empty(32, np.int64)
    keys = np.empty((32, 3), np.int64)
    key_of = np.empty(32, np.int64)
    for i in range(dst.shape[0]):
        nk = 0
        for ln in range(32):
            lane_wf[i, ln] = -1
            if not reads[i, ln]:
                continue
            # one lane per destination chunk: the lowest
            c = dst[i, ln] >> 4
            owner = -1
            for q in range(nk):
                if (dst[i, keep[q]] >> 4) == c:
                    owner = keep[q]
                    break
            if owner < 0:
                keep[nk] = ln
                nk += 1
        nkeys = 0
        for a in range(nk):
            ln = keep[a]
            sec = src[i, ln] >> 5
            mate = -1
            n_sec = 0
            for b in range(nk):  # the lanes into the same destination line
                if (src[i, keep[b]] >> 5) == sec and (dst[i, keep[b]] >> 7) == (dst[i, ln] >> 7):
                    n_sec += 1
                    if b != a:
                        mate = keep[b]
            whole = (n_sec == 2 and (src[i, mate] >> 4) != (src[i, ln] >> 4)
                     and (dst[i, mate] >> 5) == (dst[i, ln] >> 5))
            k0 = dst[i, ln] >> 7
            k1 = src[i, ln] >> 7
            k2 = -1 if whole else ((dst[i, ln] - src[i, ln]) >> 4) & 7
            found = -1
            for q in range(nkeys):
                if keys[q, 0] == k0 and keys[q, 1] == k1 and keys[q, 2] == k2:
                    found = q
                    break
            if found < 0:
                keys[nkeys, 0] = k0
                keys[nkeys, 1] = k1
                keys[nkeys, 2] = k2
                found = nkeys
                nkeys += 1
            key_of[a] = found
            lane_wf[i, ln] = found
        for ln in range(32):  # a lane dropped for another on its chunk: that lane's wavefront
            if reads[i, ln] and lane_wf[i, ln] < 0:
                for a in range(nk):
                    if (dst[i, keep[a]] >> 4) == (dst[i, ln] >> 4):
                        lane_wf[i, ln] = key_of[a]
                        break
        wf[i] = nkeys


@numba.njit(cache=True, nogil=True)
def _store_unmerged(dst, on, unit_shift, group_mask, lanes_per_phase, base, wf, lane_wf):  # pragma: no cover
    """A store whose lanes on one unit are not merged: per phase, the most lanes on one bank group;
    lane k of a group in a phase gets that phase's k-th wavefront (after ``base[i]``)."""
    cnt = np.zeros(32, np.int64)
    for i in range(dst.shape[0]):
        tot = 0
        for p in range(32 // lanes_per_phase):
            for g in range(32):
                cnt[g] = 0
            m = 0
            for k in range(lanes_per_phase):
                ln = p * lanes_per_phase + k
                if not on[i, ln]:
                    continue
                g = (dst[i, ln] >> unit_shift) & group_mask
                lane_wf[i, ln] = base[i] + tot + cnt[g]
                cnt[g] += 1
                if cnt[g] > m:
                    m = cnt[g]
            tot += m
        wf[i] = tot


@numba.njit(cache=True, nogil=True)
def _ca_sched(dst, src, on, reads, words, lanes_per_phase, wf, lane_wf):  # pragma: no cover - numba
    """cp.async.ca: see the rule above (per bank, the latest wavefront of an earlier lane on it)."""
    lastd = np.empty(32, np.int64)
    lasts = np.empty(32, np.int64)
    for i in range(dst.shape[0]):
        tot = 0
        for p in range(32 // lanes_per_phase):
            for b in range(32):
                lastd[b] = -1
                lasts[b] = -1
            used = 0
            for q in range(lanes_per_phase):
                ln = p * lanes_per_phase + q
                lane_wf[i, ln] = -1
                if not on[i, ln]:
                    continue
                k = 0
                for w in range(words):
                    b = ((dst[i, ln] >> 2) + w) & 31
                    if lastd[b] + 1 > k:
                        k = lastd[b] + 1
                    if reads[i, ln]:
                        b = ((src[i, ln] >> 2) + w) & 31
                        if lasts[b] + 1 > k:
                            k = lasts[b] + 1
                for w in range(words):
                    lastd[((dst[i, ln] >> 2) + w) & 31] = k
                    if reads[i, ln]:
                        lasts[((src[i, ln] >> 2) + w) & 31] = k
                lane_wf[i, ln] = tot + k
                if k + 1 > used:
                    used = k + 1
            tot += used
        wf[i] = tot


def _lane_addresses(name: str, v: Any) -> tuple[np.ndarray, np.ndarray]:
    """(the array as given, its rows of 32 lanes as contiguous int64) of per-lane byte addresses (..., 32)."""
    a = np.asarray(v)
    if a.dtype.kind not in "iu" or a.ndim < 1 or a.shape[-1] != 32:
        raise bad_argument(name, getattr(a, "shape", a), "expected integer byte addresses of shape (..., 32)")
    return a, np.ascontiguousarray(a.reshape(-1, 32), dtype=np.int64)


def _lane_bools(name: str, v: Any, shape: tuple) -> np.ndarray:
    b = np.asarray(v)
    if b.dtype != np.bool_:
        raise bad_argument(name, b.dtype, "expected a bool array")
    try:
        return np.ascontiguousarray(np.broadcast_to(b, shape))
    except ValueError:
        raise bad_argument(name, b.shape, f"expected a shape that broadcasts to {shape}") from None


def cp_async_wavefronts(dst: Any, *, width: int = 16, src: Any = None, active: Any = None, reads: Any = None,
                        bypass: bool = False, zfill: bool = False, nread: Any = None, lanes: bool = False):
    """Wavefronts and ideal wavefronts of cp.async warp instruction(s) as Nsight Compute counts them on
    sm_90 (the rule in the comment above, measured on the H100).

    ``dst``: shared byte addresses (..., 32); ``width``: 4, 8 or 16 bytes; ``src``: global byte addresses
    (..., 32), default ``16 * lane`` (what the measured probes read); ``active``: the lanes on (default
    all); ``reads``: the lanes on that read global memory (default: every lane on; the rest zero-fill);
    ``bypass``: cp.async.cg (LDGSTS.BYPASS, 16 bytes only); ``zfill``: the LDGSTS .ZFILL form (a src-size
    only known at run time), whose .cg copy always takes the zero-fill pass; ``nread``: for .ZFILL, the bytes
    each lane reads (its src-size; recorded with the count, not used by the rule yet). Returns int32 (wavefronts,
    ideal) of shape (...), and with ``lanes=True`` also each lane's wavefront (0-based, -1 for lanes off;
    a .cg lane in both the read and the zero-fill pass shows its zero-fill wavefront, so that the highest
    plus one is the count).
    """
    if width not in (4, 8, 16):
        raise bad_argument("width", width, "cp.async copies 4, 8 or 16 bytes")
    if bypass and width != 16:
        raise bad_argument("width", width, "cp.async.cg (bypass) copies 16 bytes")
    a, d = _lane_addresses("dst", dst)
    lead = a.shape[:-1]
    if src is None:
        s = np.broadcast_to(16 * np.arange(32, dtype=np.int64), d.shape)
    else:
        s = np.asarray(src)
        if s.dtype.kind not in "iu":
            raise bad_argument("src", s.dtype, "expected integer byte addresses")
        try:  # addresses as 64-bit patterns: only their differences and low bits matter
            s = np.broadcast_to(s, a.shape).reshape(-1, 32)
        except ValueError:
            raise bad_argument("src", s.shape, f"expected a shape that broadcasts to {a.shape}") from None
        s = s.astype(np.uint64).view(np.int64) if s.dtype != np.int64 else s
    s = np.ascontiguousarray(s)
    on = np.ones(d.shape, bool) if active is None else _lane_bools("active", active, a.shape).reshape(-1, 32)
    rd = on if reads is None else _lane_bools("reads", reads, a.shape).reshape(-1, 32) & on
    wf, ideal, lane_wf, zlane = _cp_async(d, np.ascontiguousarray(s), on, np.ascontiguousarray(rd), width, bypass,
                                          zfill)
    if lanes:
        lane_wf = np.maximum(lane_wf, zlane)
        return wf.reshape(lead), ideal.reshape(lead), lane_wf.reshape(lead + (32,))
    return wf.reshape(lead), ideal.reshape(lead)


def _cp_async(d, s, on, rd, width, bypass, zfill):
    """(wavefronts, ideal, each lane's wavefront of the read / .ca pass, of the .cg zero-fill pass)."""
    n = d.shape[0]
    wf = np.zeros(n, np.int32)
    ideal = np.zeros(n, np.int32)
    lane_wf = np.full((n, 32), -1, np.int64)
    zlane = np.full((n, 32), -1, np.int64)
    count = on.sum(axis=1)
    if bypass:
        d16 = d & ~15
        _cg_read(d16, s & ~15, rd, wf, lane_wf)
        # the ideal counts distinct destination addresses as given (an unaligned one is its own)
        dd = np.where(rd, d, -1)
        srt = np.sort(dd, axis=1)
        ndist = ((srt[:, 1:] != srt[:, :-1]) & (srt[:, 1:] >= 0)).sum(axis=1) + (srt[:, 0] >= 0)
        ideal = ((ndist * 16 + 127) // 128).astype(np.int32)
        zero = count > 0
        if not zfill:
            zero &= (on & ~rd).any(axis=1)
        if zero.any():
            # scheduled as a 16-byte cp.async.ca copy of every lane on: destination banks and, for the
            # reading lanes, source banks
            zwf = np.zeros(n, np.int32)
            zon = np.ascontiguousarray(on & zero[:, None])
            _ca_sched(d16, s & ~15, zon, np.ascontiguousarray(rd & zon), 4, 8, zwf, zlane)
            zlane = np.where(zlane >= 0, zlane + wf[:, None], -1)
            wf = wf + zwf
            ideal = ideal + np.where(zero, (count * 16 + 127) // 128, 0).astype(np.int32)
    else:
        lpp = 32 if width == 4 else (16 if width == 8 else 8)
        _ca_sched(d & ~(width - 1), s & ~(width - 1), on, rd, width // 4, lpp, wf, lane_wf)
        ideal = ((count * width + 127) // 128).astype(np.int32)
    return wf, ideal, lane_wf, zlane


def cp_async_table(dst: Any, **kw) -> list[dict]:
    """For ONE cp.async warp instruction: the :func:`bank_table` structure (one entry holding every lane)
    by the cp.async rule: which wavefront writes which (lane, word) in which bank. ``kw``: the keywords
    of :func:`cp_async_wavefronts` but ``lanes``. A .cg lane that also takes the zero-fill pass shows in
    both passes."""
    width = kw.get("width", 16)
    a = np.asarray(dst, dtype=np.int64).reshape(32)
    wf, _, lane_wf = cp_async_wavefronts(a, **kw, lanes=True)
    rows = [lane_wf]
    if kw.get("bypass"):
        on = np.ones(32, bool) if kw.get("active") is None else np.asarray(kw["active"], bool).reshape(32)
        rd = on if kw.get("reads") is None else np.asarray(kw["reads"], bool).reshape(32) & on
        src = 16 * np.arange(32, dtype=np.int64) if kw.get("src") is None else np.asarray(kw["src"]).reshape(32)
        src = src.astype(np.uint64).view(np.int64) if src.dtype != np.int64 else src
        _, _, read_wf, zlane = _cp_async(a.reshape(1, 32), src.reshape(1, 32).copy(), on.reshape(1, 32).copy(),
                                         rd.reshape(1, 32).copy(), width, True, bool(kw.get("zfill")))
        rows = [read_wf[0], zlane[0]]
    words = max(width, 4) // 4
    cells: dict[tuple, list] = {}
    for r in rows:
        for lane in np.flatnonzero(r >= 0).tolist():
            for wd in range(int(a[lane]) // 4, int(a[lane]) // 4 + words):
                cells.setdefault((int(r[lane]), wd & 31, wd), []).append(lane)
    out = [(k, b, w, sorted(set(ls))) for (k, b, w), ls in sorted(cells.items())]
    lanes_on = sorted({ln for r in rows for ln in np.flatnonzero(r >= 0).tolist()})
    return [{"phase": 0, "lanes": lanes_on, "wavefronts": int(wf), "cells": out}] if lanes_on else []


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
# Events and races
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
# Shared memory
# ----------------------------------------------------------------------------------------------------


class SharedMemory:
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

    @property
    def pending_copies(self) -> int:
        """Number of cp.async copies not yet made visible by a wait."""
        return int(sum(r["c"].size for r in self._pending))


class RaceError(FlashsimError):
    """Raised for hazards when SharedMemory(on_race='raise'); ``.races`` lists them."""

    def __init__(self, races: list[Race]):
        self.races = list(races)
        more = f" (+{len(races) - 5} more)" if len(races) > 5 else ""
        super().__init__("; ".join(str(r) for r in races[:5]) + more)
