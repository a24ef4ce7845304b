"""cp.async (LDGSTS): the wavefronts Nsight Compute counts for a copy into shared memory on sm_90.

Not the store of its width that the plain bank rule (flashsim.smem.banks) would count: the count depends on
the global source addresses and on .ca / .cg, and zero-filling copies add a pass. The rule, and what it was
measured on, is the comment below; :func:`cp_async_wavefronts` counts by it (and ``wavefronts(op="ldgsts")``
under a model with ``cp_async``, such as ``SM90``), :func:`cp_async_table` shows it wavefront by wavefront.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

from flashsim.errors import bad_argument
from flashsim.smem.lanes import _lane_addresses, _lane_bools


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
