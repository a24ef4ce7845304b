"""Probes of the SASS forms other compilers emit: gpu/kernels/probe_forms.cu built by NVRTC 13.0 and by
Triton's ptxas 12.8 (NVRTC's PTX, its ``.version`` lowered to what 12.8 reads), run on the GPU and in the
interpreter from the same cubin bytes, every output bit compared; the same PTX also JIT-compiled by the
driver (its outputs, and cuLink's SASS, against ptxas 13.0's); and what %dynamic_smem_size reads.

The probe table, inputs and comparison are gpu/sass_probes.py's (:class:`Probe`, :func:`make_case`,
:func:`compare`); the references here are the PTX ISA's pseudo-code of each instruction, defined where C and
the PTX ISA define the result (for a collective: over the mask's lanes that have not exited; for an atomic on a
word several lanes share: only what no order changes), the rest compared with the GPU alone.

A pending probe (:func:`pending`) is one the interpreter refuses (a case not modelled: lanes of one mask at
two collective sites, a shuffle reading outside its mask, or an instruction of another family not modelled
yet): its GPU answers are recorded all the same, for the model to come. The probes of :data:`ISOLATED` run on
the GPU in a child process with a time limit (:func:`run_gpu_isolated`), so that a warp that never goes on
costs that probe's answers, not the record.

``python -m flashsim.gpu.form_probes --out DIR`` records ``form_probes.npz`` / ``.json`` (traces/triton);
tests/test_form_probes.py replays them.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from flashsim.gpu import sass_probes as sp
from flashsim.gpu.sass_probes import I, O, P, Probe

__all__ = ["BUILDS", "ISOLATED", "PROBES", "TRACE", "build", "main", "pending", "record", "replay", "run_gpu",
           "run_gpu_isolated", "run_interp"]

KERNEL_FILE = "probe_forms.cu"
TRACE = Path(__file__).resolve().parent.parent / "traces" / "triton" / "form_probes.npz"
M32 = 0xFFFFFFFF
#: the builds of the probe file: NVRTC 13.0 (the project's compiler), NVRTC's PTX assembled by ptxas 13.0 as
#: flashsim JIT-compiles PTX (the GPU also JIT-compiles that PTX itself, its outputs compared), and Triton's
#: bundled ptxas 12.8
BUILDS = ("nvrtc13", "ptxas130", "ptxas128")


# ------------------------------------------------------------------------------------------------ references
def szext(a, b, clamp: bool, signed: bool) -> np.ndarray:
    """PTX ISA szext.{clamp,wrap}.{s32,u32}: b1 = b & 31; a clamp b >= 32 leaves a; else the low b1 bits
    sign- or zero-extended (b1 = 0 gives 0)."""
    a = np.asarray(a, np.uint64)
    b = np.broadcast_to(np.asarray(b, np.uint64), a.shape)
    b1 = b & np.uint64(31)
    big = (b >= np.uint64(32)) & clamp
    mask = np.where(big, np.uint64(0), (np.uint64(M32) << b1) & np.uint64(M32))
    sbit = ((a >> ((b1 - np.uint64(1)) & np.uint64(31))) & np.uint64(1)) == 1
    sign = signed & (b1 != 0) & ~big & sbit
    return ((a & ~mask & np.uint64(M32)) | np.where(sign, mask, np.uint64(0))).astype(np.uint32)


def bfe(a, pos, length, signed: bool) -> np.ndarray:
    """PTX ISA bfe.{u32,s32}: bits pos .. pos+len-1 of a (pos, len taken mod 256), sign-filled from the
    field's top bit (bit 31 when the field runs past it) for .s32, 0-filled for .u32; len 0 gives 0."""
    a = np.asarray(a, np.uint64)
    pos = np.broadcast_to(np.asarray(pos, np.uint64) & np.uint64(255), a.shape)
    ln = np.broadcast_to(np.asarray(length, np.uint64) & np.uint64(255), a.shape)
    out = np.zeros(a.shape, np.uint64)
    top = np.minimum(pos + ln - np.uint64(1), np.uint64(31)).astype(np.int64)
    sbit = np.where((ln == 0) | ~np.bool_(signed), 0, (a >> top.astype(np.uint64)) & np.uint64(1)).astype(np.uint64)
    for i in range(32):
        src = pos + np.uint64(i)
        inside = (np.uint64(i) < ln) & (src <= np.uint64(31))
        bit = np.where(inside, (a >> np.minimum(src, np.uint64(31))) & np.uint64(1), sbit)
        out |= bit << np.uint64(i)
    return out.astype(np.uint32)


def bmsk(a, b, clamp: bool) -> np.ndarray:
    """PTX ISA bmsk.{clamp,wrap}.b32: b ones from bit a (positions mod 32; with clamp, a >= 32 gives 0 and
    b >= 32 runs to bit 31; a + b >= 32 runs to bit 31; b mod 32 = 0 gives 0)."""
    a = np.asarray(a, np.uint64)
    b = np.broadcast_to(np.asarray(b, np.uint64), a.shape)
    a1, b1 = a & np.uint64(31), b & np.uint64(31)
    total = a1 + b1
    mask0 = (np.uint64(M32) << a1) & np.uint64(M32)
    over = total >= np.uint64(32)
    if clamp:
        mask0 = np.where(a >= np.uint64(32), np.uint64(0), mask0)
        over = over | (a >= np.uint64(32)) | (b >= np.uint64(32))
    mask1 = np.where(over, np.uint64(0), np.where(b1 == 0, np.uint64(M32),
                                                  (np.uint64(M32) << np.minimum(total, np.uint64(31))) & np.uint64(M32)))
    return (mask0 & ~mask1 & np.uint64(M32)).astype(np.uint32)


def _r_szext(c):
    x, k = c.inputs
    return [sp._cols(szext(x, k, True, False), szext(x, k, False, False), szext(x, k, True, True),
                     szext(x, k, False, True), szext(x, 5, True, False), szext(x, 7, False, True),
                     szext(x, 31, True, True), bfe(x, 3, k & 31, False), bfe(x, k & 31, 5, True), bfe(x, 0, k, False))]


def _r_bmsk(c):
    x, k = c.inputs
    x6 = x & np.uint32(63)
    return [sp._cols(bmsk(x6, k, True), bmsk(x6, k, False), bmsk(x, k, True), bmsk(np.full_like(k, 3), k, False))]


def _r_f32_noftz(c):
    x, y, z = c.inputs
    r = sp._fcmp(x, y, False)
    gt = sp._fcmp(x, z, False)["gt"]
    lt = sp._fcmp(z, x, False)["lt"]
    add, sub = sp._vec(sp.f32_add, x, y), sp._vec(sp.f32_add, x, z ^ np.uint32(0x80000000))
    mul, fma = sp._vec(sp.f32_mul, x, y), sp._vec(sp.f32_fma, x, y, z)
    cols = [add, sub, mul, fma, (r["eq"] | gt).astype(np.uint32), (r["eq"] & lt).astype(np.uint32)]
    # a NaN result's payload is the hardware's (the canonical NaN): compared with the GPU, not with C
    defined = np.stack([~np.isnan(np.asarray(col, np.uint32).view(np.float32)) if j < 4 else np.ones(len(x), bool)
                        for j, col in enumerate(cols)], axis=-1).ravel()
    return [(sp._cols(*cols), defined)]


def _r_vote_partial(c):
    p, q = (int(v) for v in c.params)
    pr = c.probe
    out = []
    for blk in range(pr.grid):
        u = (p >> (blk & 31)) & 1
        anyv = (q >> (blk & 31)) & 1
        vote = (q >> (blk & 7)) & 1
        for t in range(pr.block):
            lane = t % 32
            inside = lane < (p & 31) + 1
            ballot = ((1 << ((p & 31) + 1)) - 1) if vote else 0
            out.append((u, anyv, u if inside else 7, (ballot & M32) if inside else 7))
    return [np.array(out, np.uint32).ravel()]


def _r_depbar(c):
    src = c.inputs[0]
    n, blk = c.n, c.probe.block
    out = np.zeros((n, 5), np.uint32)
    for i in range(n):
        b, t = divmod(i, blk)
        base = b * blk * 5
        out[i, 0] = src[base + ((t + 5) & 127)]
        out[i, 1:] = src[base + 128 + 4 * ((t + 3) & 127) + np.arange(4)]
    return [out.ravel(), None]


def _r_i2f_sub(c):
    x = c.inputs[0].astype(np.int64)
    s8 = np.where((x & 0xFF) >= 128, (x & 0xFF) - 256, x & 0xFF)
    s16 = np.where((x & 0xFFFF) >= 32768, (x & 0xFFFF) - 65536, x & 0xFFFF)
    f = lambda v: np.asarray(v, np.float64).astype(np.float32).view(np.uint32)  # noqa: E731 - exact in f32
    return [sp._cols(f(s8), f(x & 0xFF), f(s16), f(x & 0xFFFF))]


# ------------------------------------------------------------------------------------------------ f32 -> 16 bit
#: (significand bits, exponent of the subnormals' quantum, bias, +Inf) of the 16-bit destinations
_HALF = {"f16": (11, -24, 15, 0x7C00), "bf16": (8, -133, 127, 0x7F80)}


def cvt16(b: int, fmt: str, rnd: str, relu: bool, sat: bool) -> int:
    """PTX ISA cvt.{rn,rz}{.relu}{.satfinite}.{f16,bf16}.f32 of the f32 bits b, in integer arithmetic: the
    value sig * 2^exp rounded to the destination's precision (its subnormals included: a quantum of at least
    2^qmin); past the largest finite value .rn gives Inf and .rz the largest finite value; .satfinite turns
    Inf into the largest finite value of its sign; .relu turns a negative result (-0 and -Inf included) into
    +0; a NaN gives the canonical NaN 0x7FFF."""
    p, qmin, bias, inf = _HALF[fmt]
    sign, e8, frac = b >> 31, (b >> 23) & 0xFF, b & 0x7FFFFF
    if e8 == 0xFF and frac:
        return 0x7FFF
    if relu and sign:
        return 0
    out = sign << 15
    largest = out | ((2 * bias) << (p - 1)) | ((1 << (p - 1)) - 1)
    if e8 == 0xFF:
        return largest if sat else out | inf
    sig, exp = (frac, -149) if e8 == 0 else (frac | 0x800000, e8 - 150)
    if sig == 0:
        return out
    qe = max(exp + sig.bit_length() - 1 - (p - 1), qmin)  # the quantum of the result
    if qe <= exp:
        k = sig << (exp - qe)
    else:
        sh = qe - exp
        k, rem, half = sig >> sh, sig & ((1 << sh) - 1), 1 << (sh - 1)
        if rnd == "rn" and (rem > half or (rem == half and k & 1)):
            k += 1
    if k == 0:
        return out
    top = qe + k.bit_length() - 1  # the result is k * 2^qe, in [2^top, 2^(top+1))
    if top > bias:
        return out | inf if rnd == "rn" and not sat else largest
    if top < 1 - bias:  # subnormal: k quanta of 2^qmin
        return out | k
    sh = p - k.bit_length()
    m = k << sh if sh >= 0 else k >> -sh
    return out | ((top + bias) << (p - 1)) | (m - (1 << (p - 1)))


#: every F2FP form ptxas (13.0 and 12.8) builds from cvt.{rn,rz}{.relu}{.satfinite}.{f16,bf16}{x2}.f32
_F2FP_FORMS = tuple(f"F2FP{sat}{relu}.{t}.F32.{kind}{rz}" for t in ("F16", "BF16") for kind in ("PACK_AB", "MERGE_C")
                    for rz in ("", ".RZ") for sat in ("", ".SATFINITE") for relu in ("", ".RELU")
                    if kind == "PACK_AB" or sat or relu)
_CVT_COLUMNS = [(fmt, rnd, relu, sat) for fmt in ("f16", "bf16") for rnd in ("rn", "rz")
                for relu, sat in ((False, False), (True, False), (False, True), (True, True))]


def _r_f2fp(c):
    x, y = (c.inputs[0].astype(np.int64), c.inputs[1].astype(np.int64))
    cols = []
    for fmt, rnd, relu, sat in _CVT_COLUMNS:
        hi = np.array([cvt16(int(v), fmt, rnd, relu, sat) for v in x], np.uint32)
        lo = np.array([cvt16(int(v), fmt, rnd, relu, sat) for v in y], np.uint32)
        cols += [(hi << np.uint32(16)) | lo, hi]
    return [sp._cols(*cols)]


def _prep_f2fp(c, rng):
    """Half the elements near the 16-bit formats' rounding boundaries: a representable value plus a multiple of
    a quarter of its ulp (ties and their neighbours, in f16 and in bf16), around the largest finite values, and
    in the subnormal ranges."""
    for arr in c.inputs[:2]:
        size = len(arr)
        pick = rng.random(size)
        # f16: bits h -> its f32 value, plus k quarter-ulps (exact in f32)
        h = rng.integers(0, 0x7C00, size).astype(np.uint16)
        hv = h.view(np.float16).astype(np.float64)
        ulp16 = np.where(h < 0x400, 2.0 ** -24, np.exp2(np.floor(np.log2(np.maximum(hv, 2.0 ** -14))) - 10))
        near16 = hv + rng.integers(-3, 4, size) * ulp16 / 4
        # bf16: bits hi << 16 plus k quarter-ulps (a multiple of 2^14 in the f32 bits)
        bh = rng.integers(0, 0x7F80, size).astype(np.uint32) << np.uint32(16)
        nearbf = (bh.astype(np.int64) + rng.integers(-3, 4, size) * (1 << 14)).clip(0, 0x7F7FFFFF)
        big = rng.choice([65504.0, 65519.0, 65520.0, 65535.0, 65536.0, 70000.0, 1e6, 3.3895313892515355e38,
                          3.3961776e38, 3.4e38, 6.1e-5, 5.96e-8, 2.98e-8, 2.0 ** -25, 2.0 ** -126, 2.0 ** -133,
                          2.0 ** -134, 9.2e-41], size)
        sign = np.where(rng.random(size) < 0.5, np.uint32(0x80000000), np.uint32(0))
        v16 = near16.astype(np.float32).view(np.uint32)
        vbf = nearbf.astype(np.uint32)
        vbig = big.astype(np.float32).view(np.uint32)
        new = np.where(pick < 0.2, v16, np.where(pick < 0.4, vbf, vbig)) | sign
        arr[:] = np.where(pick < 0.5, new, arr)


# ------------------------------------------------------------------------------------------------ collectives
def _nth(bits: int, k: int) -> int:
    for _ in range(k):
        bits &= bits - 1
    return (bits & -bits).bit_length() - 1


def _staying(c, ex, base: int, pair: bool) -> int:
    live = 0
    for j in range(32):
        lead, last = (base + (j & ~1), base + (j | 1)) if pair else (base + j, base + j)
        if last < c.n and not int(ex[lead]) & 1:
            live |= 1 << j
    return live


def _lanes(bits: int):
    return [j for j in range(32) if bits >> j & 1]


def _r_coll_half(c):
    a, ex = c.inputs
    n = c.n
    out = np.zeros((n, 10), np.uint32)
    for base in range(0, n, 32):
        live = _staying(c, ex, base, True)
        x = {j: int(a[base + j]) for j in _lanes(live)}
        y = {j: ((v * 3 + 1) & M32) if v & 4 else ((v >> 1) ^ 0x55) for j, v in x.items()}
        for j in range(min(32, n - base)):
            if not live >> j & 1:
                out[base + j] = 0xDEAD
                continue
            mask = 0x0000FFFF if j < 16 else 0xFFFF0000
            grp = live & mask
            xs = x[j]
            src = _nth(grp, xs % bin(grp).count("1"))
            v = (lambda k: (x[k] & 1) if int(ex[base]) & 2 else 7)
            same = sum(1 << k for k in _lanes(grp) if x[k] & 3 == xs & 3)
            alleq = len({v(k) for k in _lanes(grp)}) == 1
            down = j + 1 if j % 2 == 0 else j
            out[base + j] = [x[src], y[j ^ 1], sum(1 << k for k in _lanes(grp) if x[k] & 1),
                             sum(x[k] for k in _lanes(grp)) & M32, same, grp if alleq else 0, int(alleq),
                             x[src], y[src], x[down]]
    return [out.ravel()]


def _prep_coll_half(c, rng):
    """Exit flags per even-odd pair of lanes (bit 0 of the pair's first element), with a rate drawn per warp
    (none, a few, many, all but a few); bit 1 of a warp's first element: its match.all values differ."""
    ex = c.inputs[1]
    for base in range(0, len(ex), 32):
        rate = rng.choice([0.0, 0.1, 0.35, 0.7, 0.95])
        k = min(32, len(ex) - base)
        ex[base:base + k] = (rng.random(k) < rate).astype(np.uint32) | (rng.integers(0, 2, k).astype(np.uint32) << 1)


def _partition(rng) -> list[int]:
    """Group labels of the 32 lanes of a warp: one group, halves, quarters, interleaved, random, singletons."""
    lane = np.arange(32)
    style = rng.integers(0, 7)
    if style == 0:
        lab = np.zeros(32, int)
    elif style == 1:
        lab = lane >> 4
    elif style == 2:
        lab = lane >> 3
    elif style == 3:
        lab = lane % int(rng.choice([2, 3, 5]))
    elif style == 4:
        lab = rng.integers(0, int(rng.integers(2, 6)), 32)
    elif style == 5:
        lab = lane
    else:
        lab = np.where(lane < int(rng.integers(1, 32)), 0, 1)
    return [sum(1 << k for k in range(32) if lab[k] == lab[j]) for j in range(32)]


def _prep_coll_excl(c, rng):
    gm, ex = c.inputs[1], c.inputs[2]
    for base in range(0, len(gm), 32):
        k = min(32, len(gm) - base)
        gm[base:base + k] = np.array(_partition(rng), np.uint32)[:k]
        ex[base:base + k] = (rng.random(k) < rng.choice([0.0, 0.15, 0.5])).astype(np.uint32)


def _r_coll_excl(c):
    a, gm, ex = c.inputs
    n = c.n
    out = np.zeros((n, 12), np.uint32)
    for base in range(0, n, 32):
        live = _staying(c, ex, base, False)
        x = {j: int(a[base + j]) for j in _lanes(live)}
        for j in range(min(32, n - base)):
            if not live >> j & 1:
                out[base + j] = 0xDEAD
                continue
            grp = int(gm[base + j]) & live
            ks = _lanes(grp)
            xs = [x[k] for k in ks]
            sx = [v - (1 << 32) if v >> 31 else v for v in xs]
            a_, o_, x_ = M32, 0, 0
            for v in xs:
                a_ &= v | 0x10001
                o_ |= v & 0xFF0
                x_ ^= v
            src = _nth(grp, (x[j] >> 5) % len(ks))
            alleq = len({v >> 30 for v in xs}) == 1
            out[base + j] = [sum(xs) & M32, min(xs), max(sx) & M32, a_, o_, x_,
                             sum(1 << k for k in ks if x[k] & 1), sum(1 << k for k in ks if x[k] & 3 == x[j] & 3),
                             grp if alleq else 0, int(alleq), x[src],
                             int(all(v & 2 for v in xs)) | (int(any(v & 8 for v in xs)) << 1)]
    return [out.ravel()]


def _r_coll_loop(c):
    a, cc = c.inputs
    n = c.n
    out = np.zeros((n, 4), np.uint32)
    for base in range(0, n, 32):
        lanes = range(min(32, n - base))
        cnt = {j: int(cc[base + j]) & 7 for j in lanes}
        best = {}
        for h in (0, 16):
            mine = [j for j in lanes if j & 16 == h]
            if mine:
                top = max(cnt[j] for j in mine)
                for j in mine:
                    best[j] = min(k for k in mine if cnt[k] == top) if top > cnt[j] or True else j
        # (a lane's own count ties itself: the first lane of the half with the most trips)
        acc = {j: [0, 0, 0, 0] for j in lanes}
        for k in range(8):
            alive = [j for j in lanes if cnt[j] > k]
            if not alive:
                break
            v = {j: (int(a[base + j]) + k * 0x9E3779B9) & M32 for j in alive}
            ballot = sum(1 << j for j in alive if v[j] & 1)
            for j in alive:
                half = [q for q in alive if q & 16 == j & 16]
                if j < 16:
                    acc[j][0] += sum(v[q] for q in half)
                    acc[j][2] += v[best[j]]
                else:
                    acc[j][0] += sum(v[q] ^ 0x5555 for q in half)
                    acc[j][2] += v[best[j]] * 3
                acc[j][1] ^= ballot
                acc[j][3] += sum(1 << q for q in alive if v[q] & 3 == v[j] & 3)
        for j in lanes:
            out[base + j] = [s & M32 for s in acc[j]]
    return [out.ravel()]


def _prep_coll_loop(c, rng):
    """Trip counts: the same in the whole warp, the same in each half, or lane by lane."""
    cc = c.inputs[1]
    for base in range(0, len(cc), 32):
        k = min(32, len(cc) - base)
        style = rng.integers(0, 3)
        if style == 0:
            cc[base:base + k] = rng.integers(0, 8)
        elif style == 1:
            cc[base:base + k] = np.where(np.arange(k) < 16, rng.integers(0, 8), rng.integers(0, 8))
        else:
            cc[base:base + k] = rng.integers(0, 8, k)


def _r_coll_cross(c):
    """What the PTX ISA defines (from sm_70 on, lanes of a mask may meet at different shfl.sync / redux.sync):
    each lane of the first half-warp gets its source lane's operand, and the sum of every lane's operand."""
    a = c.inputs[0]
    n = c.n
    out = np.zeros((n, 2), np.uint32)
    ok = np.zeros((n, 2), bool)
    for base in range(0, n, 32):
        if base + 16 > n:
            continue  # lanes of the mask past n have exited: sources may be gone
        x = [int(a[base + j]) for j in range(16)]
        opnd = [v if v & 1 else (~v) & M32 for v in x]
        tot = sum(v if v & 1 else 3 * v for v in x) & M32
        for j in range(16):
            out[base + j] = [opnd[(x[j] >> 8) & 15], tot]
            ok[base + j] = True
        out[base + 16:min(n, base + 32)] = 0
        ok[base + 16:min(n, base + 32)] = True
    return [(out.ravel(), ok.ravel())]


# ------------------------------------------------------------------------------------------------ shared atomics
_PATTERNS = 8


def _word_pattern(rng, width: int) -> np.ndarray:
    """The word (0 .. width-1) each of a warp's 32 lanes works on: all one word, pairs, every fourth lane,
    blocks of eight, a few random words, every lane its own, reversed blocks, random."""
    lane = np.arange(32)
    style = rng.integers(0, _PATTERNS)
    words = [np.zeros(32, int), lane >> 1, lane & 3, lane >> 3, rng.integers(0, 4, 32), lane % width,
             (31 - lane) >> 2, rng.integers(0, width, 32)][style]
    return (np.asarray(words) + (rng.integers(0, width) if style in (0, 2, 3) else 0)) % width


#: f32 values whose sum depends on the order of the additions (magnitudes 2^-24 .. 2^24 and beyond, subnormals,
#: signed zeros)
_ORDER_F32 = (1.0, -1.0, 3.0, 0.1, 16777216.0, -16777216.0, 5.960464477539063e-08, 33554432.0, 1e30, -1e30,
              1e-3, 2.0 ** -140, -(2.0 ** -140), 0.0, -0.0, 7.0, 0.3333333432674408)


def _prep_atoms_cast(c, rng):
    fv, mp, uv, i32, i64 = c.inputs
    size = len(fv)
    pick = rng.random(size)
    order = np.asarray(_ORDER_F32, np.float32)[rng.integers(0, len(_ORDER_F32), size)].view(np.uint32)
    fv[:] = np.where(pick < 0.6, order, fv)
    for base in range(0, len(mp), 32):
        k = min(32, len(mp) - base)
        m = _word_pattern(rng, 32) | (_word_pattern(rng, 16) << 8) | (_word_pattern(rng, 16) << 16)
        m = m | (rng.integers(0, 4, 32) << 24)
        mp[base:base + k] = m[:k].astype(np.uint32)
    blocks = len(i32) // 448
    f0 = np.where(rng.random(blocks * 128) < 0.5, 0.0, rng.standard_normal(blocks * 128) * 1e3).astype(np.float32)
    i32[:] = sp.DRAWS["u32"](rng, len(i32))
    i32.reshape(blocks, 448)[:, :128] = f0.view(np.uint32).reshape(blocks, 128)
    g = i32.reshape(blocks, 448)[:, 128:192]
    g[:] = np.where(rng.random(g.shape) < 0.5, np.float32(-1e38).view(np.uint32), g)  # float max from below
    inc = i32.reshape(blocks, 448)[:, 320:448]
    inc[:] = rng.integers(0, 8, inc.shape)  # inc / dec counters around their limits
    i64[:] = sp.DRAWS["u64"](rng, len(i64))


def _atom_words(c, field: int, width: int):
    """{(block, word): [element, ...] in lane order} of the words a field of map names."""
    mp = c.inputs[1]
    B = c.probe.block
    out: dict = {}
    for i in range(c.n):
        b, t = divmod(i, B)
        w = (t >> 5) * width + ((int(mp[i]) >> field) & (width - 1))
        out.setdefault((b, w), []).append(i)
    return out


def _r_atoms_cast(c):
    """What C defines: a word that one lane or none works on (its old value and final value), and the final
    values of the order-independent integer operations; the rest (which lane goes first: the old values on a
    shared word, a float sum's rounding, the last exchange) is the hardware's, compared with the GPU only."""
    fv, mp, uv, i32, i64 = c.inputs
    G = c.grid
    i32 = i32.reshape(G, 448)
    i64 = i64.reshape(G, 512)
    old32 = np.zeros((c.n, 6), np.uint32)
    ok32 = np.zeros((c.n, 6), bool)
    old64 = np.zeros((c.n, 8), np.uint64)
    ok64 = np.zeros((c.n, 8), bool)
    fin32 = i32.copy()
    okf32 = np.ones(fin32.shape, bool)
    fin64 = i64.copy()
    okf64 = np.ones(fin64.shape, bool)

    def f32(bits):
        return float(np.uint32(bits).view(np.float32))

    # F: float add (one lane: old = initial, final = initial + value, rounded to nearest, subnormals kept)
    for (b, w), els in _atom_words(c, 0, 32).items():
        init = int(i32[b, w])
        if len(els) == 1:
            old32[els[0], 0], ok32[els[0], 0] = init, True
            r = sp.f32_add(init, int(fv[els[0]]))
            fin32[b, w] = r
            okf32[b, w] = not np.isnan(np.uint32(r).view(np.float32))
        else:
            okf32[b, w] = False
    for (b, w), els in _atom_words(c, 8, 16).items():
        vals = [int(fv[e]) for e in els]
        one = len(els) == 1
        # G: float max by a CAS loop (fmaxf, flush-to-zero): defined without NaNs, subnormals or signed zeros
        g0 = int(i32[b, 128 + w])
        fl = [f32(v) for v in [g0] + vals]
        clean = all(np.isfinite(v) and (v == 0 or abs(v) >= 2.0 ** -126) for v in fl) and \
            not (0.0 in fl and any(v == 0 and np.signbit(v) for v in fl))
        if clean:
            fin32[b, 128 + w] = int(np.float32(max(fl)).view(np.uint32))
        okf32[b, 128 + w] = clean
        if one:
            old32[els[0], 1], ok32[els[0], 1] = g0, clean
        # X: exchange
        x0 = int(i32[b, 192 + w])
        if one:
            old32[els[0], 2], ok32[els[0], 2] = x0, True
        fin32[b, 192 + w] = vals[-1] if one else 0
        okf32[b, 192 + w] = one
        # C: compare-and-swap
        c0 = int(i32[b, 256 + w])
        if one:
            e = els[0]
            cmp = c0 if int(mp[e]) >> 24 & 1 else vals[0] ^ 1
            old32[e, 3], ok32[e, 3] = c0, True
            fin32[b, 256 + w] = vals[0] if cmp == c0 else c0
        okf32[b, 256 + w] = one
        # I, D: inc / dec wrap at their limits (5, 6): the final count is order-independent
        v_i, v_d = int(i32[b, 320 + w]), int(i32[b, 384 + w])
        if one:
            old32[els[0], 4], ok32[els[0], 4] = v_i, True
            old32[els[0], 5], ok32[els[0], 5] = v_d, True
        for _ in els:
            v_i = 0 if v_i >= 5 else v_i + 1
            v_d = 6 if v_d == 0 or v_d > 6 else v_d - 1
        fin32[b, 320 + w], fin32[b, 384 + w] = v_i, v_d
    M64 = (1 << 64) - 1
    for (b, w), els in _atom_words(c, 16, 16).items():
        us = [int(uv[e]) for e in els]
        one = len(els) == 1
        s64 = lambda v: v - (1 << 64) if v >> 63 else v  # noqa: E731
        inits = [int(i64[b, 64 * j + w]) for j in range(8)]
        fin = [(inits[0] + sum(us)) & M64, max([inits[1]] + us), min([s64(inits[2])] + [s64(u) for u in us]) & M64,
               inits[3], inits[4], inits[5]]
        for u in us:
            fin[3] |= u
            fin[4] ^= u
            fin[5] &= u | ((u << 1) & M64) | (u >> 1)
        for j in range(6):
            fin64[b, 64 * j + w] = fin[j]
        e0 = els[0]
        if one:
            for j in range(8):
                old64[e0, j], ok64[e0, j] = inits[j], True
            fin64[b, 384 + w] = us[0]
            cmp = inits[7] if int(mp[e0]) >> 25 & 1 else us[0]
            fin64[b, 448 + w] = (us[0] ^ 0x5555) if cmp == inits[7] else inits[7]
        okf64[b, 384 + w] = okf64[b, 448 + w] = one
    return [(old32.ravel(), ok32.ravel()), (old64.ravel(), ok64.ravel()), (fin32.ravel(), okf32.ravel()),
            (fin64.ravel(), okf64.ravel())]


def _prep_atoms_f64(c, rng):
    """Per warp: small integers (every order gives the exact sum: defined) or values whose sum depends on
    the order; word patterns as probe_atoms_cast's; initial words small integers or zero."""
    dv, mp, init = c.inputs
    size = len(dv)
    for base in range(0, size, 32):
        k = min(32, size - base)
        if rng.random() < 0.5:
            vals = rng.integers(-1000, 1000, k).astype(np.float64)
        else:
            vals = rng.choice([1.0, -1.0, 2.0 ** 53, -(2.0 ** 53), 0.1, 3.0, 1e300, -1e300, 5e-324, -0.0, 1e-20], k)
        dv[base:base + k] = vals.view(np.uint64)
        mp[base:base + k] = _word_pattern(rng, 32)[:k].astype(np.uint32)
    init[:] = np.where(rng.random(len(init)) < 0.5, 0.0, rng.integers(-50, 50, len(init)).astype(np.float64)).view(
        np.uint64)


def _r_atoms_f64(c):
    """C defines a word one lane works on (IEEE double add, to nearest), or one whose values are all integers
    small enough that every order sums them exactly."""
    dv, mp, init = c.inputs
    G = c.grid
    old = np.zeros(c.n, np.uint64)
    ok = np.zeros(c.n, bool)
    fin = init.copy().reshape(G, 128)
    okf = np.ones(fin.shape, bool)
    for (b, w), els in _atom_words(c, 0, 32).items():
        x0 = float(np.uint64(fin[b, w]).view(np.float64))
        vals = [float(np.uint64(dv[e]).view(np.float64)) for e in els]
        exact = all(v == int(v) and abs(v) < 2.0 ** 40 for v in vals + [x0]) and not any(
            v == 0 and np.signbit(v) for v in vals)
        if len(els) == 1:
            old[els[0]], ok[els[0]] = fin[b, w], True
        if len(els) == 1 or exact:
            s = x0
            for v in vals:
                s = s + v
            fin[b, w] = np.float64(s).view(np.uint64)
            okf[b, w] = not np.isnan(s)
        else:
            okf[b, w] = False
    return [(old, ok), (fin.ravel(), okf.ravel())]


#: why the probes of contended 64-bit shared atomics are pending: recorded on the H200 (2026-12-02), their 32-bit
#: outputs equal the interpreter's, but lanes of a warp on one word win ATOMS.CAST.SPIN.64 in an order that is not
#: lane order (0, 8, 16, 24, 4, 20, 28, 12 for lanes 0, 4, ..., 28), which the interpreter refuses to guess
SPIN64 = ("lanes of a warp contending for one 64-bit word in ATOMS.CAST.SPIN.64: the H200 does not take them in "
          "lane order; the interpreter refuses")

PROBES: tuple[Probe, ...] = (
    Probe("probe_szext", ("SGXT", "SGXT.W", "SGXT.U32", "SGXT.W.U32"), (I(), I("u32", "shift"), O(per=10)), _r_szext),
    Probe("probe_bmsk", ("BMSK", "BMSK.W"), (I(), I("u32", "shift"), O(per=4)), _r_bmsk),
    Probe("probe_f32_noftz", ("FADD", "FMUL", "FFMA", "FSETP.GT.OR", "FSETP.LT.AND"),
          (I("u32", "f32"), I("u32", "f32"), I("u32", "f32"), O(per=6)), _r_f32_noftz),
    Probe("probe_vote_partial", ("VOTE.ALL", "VOTE.ANY"), (O(per=4), P(), P()), _r_vote_partial, uniform=True,
          grid=40, block=64),
    Probe("probe_i2f_sub", ("I2F.S8", "I2F.U8", "I2F.S16", "I2F.U16"), (I(), O(per=4)), _r_i2f_sub),
    Probe("probe_depbar_set", ("DEPBAR|^\\{", "UTMACCTL.IV", "LDGSTS.E", "LDGSTS.E.BYPASS.128"),
          (I(per=640, scope="block"), I(scope="fixed", per=32, draw="zeros"), O(per=5)), _r_depbar, block=128,
          n=1024),
    Probe("probe_f2fp", _F2FP_FORMS + ("F2F.F16.F32.RZ", "F2F.BF16.F32.RZ"),
          (I("u32", "f32"), I("u32", "f32"), O(per=32)), _r_f2fp, prepare=_prep_f2fp),
    Probe("probe_coll_half", ("BRA.DIV", "WARPSYNC.COLLECTIVE", "ENDCOLLECTIVE", "SHFL.IDX|^P\\d", "SHFL.BFLY|^P\\d",
                              "SHFL.DOWN|^P\\d", "VOTE.ANY", "REDUX.SUM|^UR62", "MATCH.ANY", "MATCH.ALL"),
          (I(), I(), O(per=10)), _r_coll_half, prepare=_prep_coll_half),
    Probe("probe_coll_excl", ("WARPSYNC.EXCLUSIVE", "REDUX", "REDUX.MIN", "REDUX.MAX.S32", "REDUX.OR", "REDUX.XOR",
                              "REDUX.SUM", "VOTE.ANY", "VOTE.ALL", "MATCH.ANY", "MATCH.ALL", "SHFL.IDX"),
          (I(), I("u32", "zeros"), I(), O(per=12)), _r_coll_excl, prepare=_prep_coll_excl),
    Probe("probe_coll_loop", ("BRA.DIV", "WARPSYNC.COLLECTIVE", "ENDCOLLECTIVE", "REDUX.SUM|^UR62", "SHFL.IDX|^P\\d",
                              "WARPSYNC.ALL", "VOTE.ANY", "MATCH.ANY"),
          (I(), I(), O(per=4)), _r_coll_loop, prepare=_prep_coll_loop),
    Probe("probe_coll_cross", ("BRA.DIV", "WARPSYNC.COLLECTIVE", "ENDCOLLECTIVE", "SHFL.IDX|^P\\d", "REDUX.SUM|^UR62"),
          (I(), O(per=2)), _r_coll_cross,
          pending="lanes of one mask at two collective sites: the interpreter refuses (which lanes the GPU runs "
                  "each site's collective with is what this probe records)"),
    Probe("probe_coll_foreign", ("BRA.DIV", "WARPSYNC.COLLECTIVE", "ENDCOLLECTIVE", "SHFL.IDX"), (I(), O()), None,
          pending="a shuffle reading a lane outside its mask: undefined (PTX ISA); the interpreter refuses"),
    Probe("probe_atoms_cast", ("ATOMS.CAST.SPIN", "ATOMS.CAST.SPIN.64", "ATOMS.CAS", "ATOMS.CAS.64", "ATOMS.EXCH",
                               "ATOMS.EXCH.64", "ATOMS.INC", "ATOMS.DEC", "YIELD"),
          (I("u32", "f32"), I("u32", "zeros"), I("u64"), I(per=448, scope="block", draw="zeros"),
           I("u64", per=512, scope="block", draw="zeros"), O(per=6), O("u64", per=8), O(per=448, scope="block"),
           O("u64", per=512, scope="block")), _r_atoms_cast, prepare=_prep_atoms_cast,
          pending=SPIN64),
    Probe("probe_atoms_f64", ("ATOMS.CAST.SPIN.64", "DADD"),
          (I("u64", "zeros"), I("u32", "zeros"), I("u64", per=128, scope="block", draw="zeros"), O("u64"),
           O("u64", per=128, scope="block")), _r_atoms_f64, prepare=_prep_atoms_f64, pending=SPIN64),
)

#: probes whose GPU runs go to a child process with a time limit: a warp that might wait for ever
ISOLATED = ("probe_coll_cross",)
ISOLATED_TIMEOUT_S = 180
#: opcodes of another family a probe needs: until the interpreter models them the probe is pending
NEEDS = {"probe_atoms_f64": ("DADD",)}
#: what an interpreter refusing a pending probe raises
REFUSALS: tuple[type, ...] = (NotImplementedError,)


def pending(pr: Probe) -> str:
    """Why the interpreter cannot run ``pr`` yet ('' when it can): the probe's own reason, or the opcodes it
    needs that are not modelled. A pending probe's GPU answers are recorded all the same; its CPU tests
    expect the interpreter to refuse."""
    if pr.pending:
        return pr.pending
    from flashsim.sass import opcodes  # noqa: F401  (registers every semantic)
    from flashsim.sass.program import SEMANTICS

    missing = [op for op in NEEDS.get(pr.name, ()) if op not in SEMANTICS]
    return f"{', '.join(missing)} not modelled yet" if missing else ""


def refusals() -> tuple[type, ...]:
    from flashsim.warp.state import UndefinedResult

    return REFUSALS + (UndefinedResult,)


def probe(name: str) -> Probe:
    for p in PROBES:
        if p.name == name:
            return p
    raise KeyError(f"no probe {name!r} in {KERNEL_FILE}")


# ------------------------------------------------------------------------------------------------ the builds
def triton_ptxas() -> str:
    """Triton's bundled ptxas (12.8 with Triton 3.6.0)."""
    import flashsim.triton as ft

    return ft.bundled_ptxas()


@functools.lru_cache(maxsize=None)
def ptx_text(kernel_file: str = KERNEL_FILE) -> str:
    """NVRTC 13.0's PTX of a probe file of gpu/kernels (the compilation nvrtc13's cubin comes from)."""
    from flashsim.kernels.sources import kernel_path
    from flashsim.sass.toolchain import compile_cuda_ptx

    src = f'#line 1 "gpu/kernels/{kernel_file}"\n' + kernel_path(kernel_file).read_text(encoding="utf-8")
    ptx, _, _ = compile_cuda_ptx(src, name=kernel_file, options=("-std=c++17",))
    return ptx


def build(which: str, kernel_file: str = KERNEL_FILE):
    """A probe file's cubin of one build as a flashsim.cuda module (one module per build and file: the
    interpreter's counters, Program.executed_forms, are the module's)."""
    return _build(which, kernel_file)


@functools.lru_cache(maxsize=None)
def _build(which: str, kernel_file: str):
    import flashsim.cuda as fc
    import flashsim.triton as ft
    from flashsim.kernels.sources import interpreted_module, kernel_path
    from flashsim.sass.toolchain import assemble_ptx, compile_cuda_ptx

    if which == "nvrtc13":
        return interpreted_module(kernel_file)
    if which == "ptxas128":
        return fc.RawModule(cubin=assemble_ptx(ft.ptx_for_bundled_ptxas(ptx_text(kernel_file)), name=kernel_file,
                                               ptxas=triton_ptxas()))
    if which == "ptxas130":
        return fc.RawModule(cubin=bytes(ptx_text(kernel_file), "utf-8"))  # flashsim.sass.binaries: JIT by ptxas 13.0
    raise KeyError(f"no build {which!r} (builds: {BUILDS})")


def forms(which: str, kernel: str, kernel_file: str = KERNEL_FILE) -> list[tuple[str, tuple[str, ...], str]]:
    """(opcode, modifiers, operands) of every instruction of ``kernel`` in build ``which``."""
    from flashsim.sass.toolchain import disassemble

    doc = disassemble(build(which, kernel_file).cubin)
    fn = next(f for f in doc[1] if f.get("function-name") == kernel)
    out = []
    for rec in fn["sass-instructions"]:
        op, *mods = rec["opcode"].split(".")
        out.append((op, tuple(mods), rec.get("operands", "")))
    return out


def missing_forms(which: str, pr: Probe, kernel_file: str = KERNEL_FILE) -> list[str]:
    names = forms(which, pr.name, kernel_file)
    return [p for p in pr.sass if not any(sp._matches(p, ins) for ins in names)]


def _args(case, dev_in, dev_out):
    return case.args(dev_in, dev_out)


def run_interp(case, which: str, module=None, kernel_file: str = KERNEL_FILE) -> list[np.ndarray]:
    import flashsim.cuda as fc

    pr = case.probe
    f = (module or build(which, kernel_file)).get_function(pr.name)
    d_in = [fc.asarray(np.ascontiguousarray(a)) for a in case.inputs]
    d_out = [fc.asarray(np.ascontiguousarray(a).copy()) for a in case.outs0]
    f((case.grid,), (pr.block,), _args(case, d_in, d_out))
    return [d.get() for d in d_out]


@functools.lru_cache(maxsize=None)
def _driver_ptx_module(kernel_file: str = KERNEL_FILE):
    """NVRTC's PTX loaded as PTX by cupy: the driver JIT-compiles it (once per file and process)."""
    import tempfile

    from flashsim.gpu import runtime

    cupy = runtime.require_gpu()
    d = Path(tempfile.mkdtemp(prefix="flashsim-ptx-"))
    path = d / (Path(kernel_file).stem + ".ptx")
    path.write_text(ptx_text(kernel_file))
    return cupy.RawModule(path=str(path))


def run_gpu(case, which: str, cubin: bytes | None = None, kernel_file: str = KERNEL_FILE) -> list[np.ndarray]:
    from flashsim.gpu import runtime

    cupy = runtime.require_gpu()
    pr = case.probe
    if which == "driver-jit":
        f = _driver_ptx_module(kernel_file).get_function(pr.name)
    else:
        data = bytes(cubin if cubin is not None else build(which, kernel_file).cubin)
        f = runtime.load_cubin(data).get_function(pr.name)
    d_in = [cupy.asarray(np.ascontiguousarray(a)) for a in case.inputs]
    d_out = [cupy.asarray(np.ascontiguousarray(a).copy()) for a in case.outs0]
    f((case.grid,), (pr.block,), _args(case, d_in, d_out))
    cupy.cuda.Device().synchronize()
    return [cupy.asnumpy(d) for d in d_out]


# ------------------------------------------------------------------------------------------------ cuLink
def culink_text_check() -> dict:
    """The driver's JIT output for the probe PTX (cuLinkCreate / cuLinkAddData / cuLinkComplete) against
    ptxas 13.0's (flashsim's JIT): are their .text sections the same bytes?"""
    import ctypes

    try:
        lib = ctypes.CDLL("libcuda.so.1")
        from flashsim.gpu import runtime

        runtime.require_gpu().zeros(1)  # a current context
        state = ctypes.c_void_p()
        lib.cuLinkCreate_v2.argtypes = [ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
        rc = lib.cuLinkCreate_v2(0, None, None, ctypes.byref(state))
        if rc:
            return {"error": f"cuLinkCreate {rc}"}
        data = ptx_text().encode() + b"\0"
        lib.cuLinkAddData_v2.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t,
                                         ctypes.c_char_p, ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p]
        rc = lib.cuLinkAddData_v2(state, 1, data, len(data), b"probe_forms.ptx", 0, None, None)  # CU_JIT_INPUT_PTX
        if rc:
            return {"error": f"cuLinkAddData {rc}"}
        out, size = ctypes.c_void_p(), ctypes.c_size_t()
        lib.cuLinkComplete.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t)]
        rc = lib.cuLinkComplete(state, ctypes.byref(out), ctypes.byref(size))
        if rc:
            return {"error": f"cuLinkComplete {rc}"}
        cubin = ctypes.string_at(out, size.value)
        lib.cuLinkDestroy(state)
        from flashsim.gpu.triton_suite import text_digests

        drv, ours = text_digests(cubin), text_digests(build("ptxas130").cubin)
        return {"same_text": drv == ours, "differ": sorted(k for k in ours if drv.get(k) != ours[k]),
                "driver_cubin_sha256": hashlib.sha256(cubin).hexdigest()}
    except Exception as exc:  # recorded, not fatal: the outputs comparison is the evidence
        return {"error": f"{type(exc).__name__}: {exc}"}


# ------------------------------------------------------------------------------------------------ smem size
SMEM_SIZES = (0, 4, 100, 4096, 48 * 1024, 100_000)


def smem_sizes(which: str, gpu: bool) -> list[int]:
    """What probe_smem_size reads as %dynamic_smem_size in launches with each of SMEM_SIZES bytes."""
    out = []
    for size in SMEM_SIZES:
        if gpu:
            from flashsim.gpu import runtime

            cupy = runtime.require_gpu()
            f = runtime.load_cubin(bytes(build(which).cubin)).get_function("probe_smem_size")
            f.max_dynamic_shared_size_bytes = max(size, 0)
            d = cupy.zeros(64, cupy.uint32)
            f((1,), (64,), (d,), shared_mem=size)
            cupy.cuda.Device().synchronize()
            got = cupy.asnumpy(d)
        else:
            import flashsim.cuda as fc

            f = build(which).get_function("probe_smem_size")
            f.max_dynamic_shared_size_bytes = max(size, 48 * 1024)
            d = fc.zeros(64, np.uint32)
            f((1,), (64,), (d,), shared_mem=size)
            got = d.get()
        vals = sorted(set(int(v) for v in got))
        out.append(vals[0] if len(vals) == 1 else -1)
    return out


# ------------------------------------------------------------------------------------------------ record
def _key(which: str, pr: Probe, k: int, what: str) -> str:
    return f"{which}/{pr.name}/{k}/{what}"


def record(out_dir: Path, *, cases: int = 4, seed: int = 0) -> dict:
    from flashsim.gpu import runtime
    from flashsim.sass.toolchain import ptxas_version, versions

    out_dir.mkdir(parents=True, exist_ok=True)
    arrays: dict[str, np.ndarray] = {}
    report: dict[str, Any] = {"device": runtime.device_info(), "toolchain": versions(),
                              "ptxas128": ptxas_version(triton_ptxas()), "ptxas130": ptxas_version(),
                              "builds": {}, "culink": culink_text_check()}
    for which in BUILDS:
        mod = build(which)
        arrays[f"{which}/__cubin__"] = np.frombuffer(mod.cubin, np.uint8)
        rep: dict[str, Any] = {"cubin_sha256": mod.sha256, "probes": {}}
        for pr in PROBES:
            prog = mod.get_function(pr.name)._prog()
            before = prog.executed_forms()
            why = pending(pr)
            entry: dict[str, Any] = {"forms_missing": missing_forms(which, pr), "cases": 0, "equal": True,
                                     "mismatches": [], "interp_error": None, "reference_mismatches": []}
            if why:
                entry["pending"] = why
            drawn = [sp.make_case(pr, sp._seed(pr, k, seed)) for k in range(cases)]
            if pr.name in ISOLATED:  # in a child process with a time limit
                answers, error = run_gpu_isolated(drawn, which, mod.cubin)
                if error:
                    entry["gpu_error"] = error
            else:
                answers = [run_gpu(case, which) for case in drawn]
            for k, (case, gpu_out) in enumerate(zip(drawn, answers)):
                for j, a in enumerate(case.inputs):
                    arrays[_key(which, pr, k, f"in{j}")] = a
                for j, a in enumerate(case.outs0):
                    arrays[_key(which, pr, k, f"init{j}")] = a
                for j, a in enumerate(gpu_out):
                    arrays[_key(which, pr, k, f"out{j}")] = a
                arrays[_key(which, pr, k, "params")] = np.array([int(p) for p in case.params], np.uint64)
                arrays[_key(which, pr, k, "n")] = np.array(case.n, np.int64)
                entry["cases"] += 1
                if which == "ptxas130" and pr.name not in ISOLATED:  # the driver's JIT of the PTX: the same outputs?
                    jit = run_gpu(case, "driver-jit")
                    entry.setdefault("driver_jit_mismatches", [])
                    entry["driver_jit_mismatches"] += sp.compare(case, jit, gpu_out, "the driver's JIT of the PTX")
                entry["reference_mismatches"] += sp.compare(case, gpu_out, sp.reference(case), "the PTX reference")
                try:
                    msgs = sp.compare(case, run_interp(case, which), gpu_out, "the GPU")
                except refusals() as exc:
                    if why:  # expected: the GPU's answer is the record
                        entry["refused"] = f"{type(exc).__name__}: {exc}"
                        continue
                    entry["interp_error"] = f"{type(exc).__name__}: {exc}"
                    entry["equal"] = False
                    continue
                except Exception as exc:
                    entry["interp_error"] = f"{type(exc).__name__}: {exc}"
                    entry["equal"] = False
                    continue
                if msgs:
                    entry["equal"] = False
                    entry["mismatches"] += msgs
            after = prog.executed_forms()
            entry["executed"] = {f: c - before.get(f, 0) for f, c in after.items() if c > before.get(f, 0)}
            rep["probes"][pr.name] = entry
        report["builds"][which] = rep
    report["smem_sizes"] = {w: {"launched": list(SMEM_SIZES), "read": smem_sizes(w, gpu=True)} for w in BUILDS}
    np.savez_compressed(out_dir / "form_probes.npz", **arrays)
    (out_dir / "form_probes.json").write_text(json.dumps(report, indent=1) + "\n")
    return report


# ------------------------------------------------------------------------------------------------ child runs
def run_gpu_isolated(cases: Sequence, which: str, cubin: bytes,
                     timeout_s: float = ISOLATED_TIMEOUT_S) -> tuple[list[list[np.ndarray]], str]:
    """The GPU's outputs of ``cases`` (one probe, one build's ``cubin``) from a child process
    (``python -m flashsim.gpu.form_probes --child DIR``) killed after ``timeout_s``: (outputs of the cases
    that finished, '' or why the rest did not)."""
    with tempfile.TemporaryDirectory(prefix="flashsim-form-child-") as tmp:
        d = Path(tmp)
        job = {"cubin": np.frombuffer(bytes(cubin), np.uint8)}
        meta = []
        for k, case in enumerate(cases):
            for j, a in enumerate(case.inputs):
                job[f"{k}/in{j}"] = a
            for j, a in enumerate(case.outs0):
                job[f"{k}/init{j}"] = a
            meta.append({"kernel": case.probe.name, "grid": case.grid, "block": case.probe.block,
                         "ins": len(case.inputs), "outs": len(case.outs0), "n": case.n,
                         "params": [[str(np.asarray(p).dtype), int(p)] for p in case.params],
                         "uniform": case.probe.uniform})
        np.savez(d / "job.npz", **job)
        (d / "job.json").write_text(json.dumps(meta))
        cmd = [sys.executable, "-m", "flashsim.gpu.form_probes", "--child", str(d)]
        error = ""
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
            if proc.returncode:
                error = f"the child process failed ({proc.returncode}): {(proc.stderr or proc.stdout)[-2000:]}"
        except subprocess.TimeoutExpired:
            error = (f"no answer within {timeout_s:.0f} s on {which}: the child process was killed (a warp that "
                     "never went on?)")
        outs = []
        for k in range(len(cases)):
            f = d / f"out{k}.npz"
            if not f.is_file():
                break
            with np.load(f) as got:
                outs.append([got[f"out{j}"] for j in range(len(cases[k].outs0))])
        if not error and len(outs) < len(cases):
            error = f"the child process answered {len(outs)} of {len(cases)} cases"
        return outs, error


def _child(d: Path) -> int:
    """Run the job of :func:`run_gpu_isolated` on the GPU, writing each case's outputs as it finishes."""
    from flashsim.gpu import runtime

    cupy = runtime.require_gpu()
    job = np.load(d / "job.npz")
    meta = json.loads((d / "job.json").read_text())
    mod = runtime.load_cubin(bytes(job["cubin"]))
    for k, m in enumerate(meta):
        f = mod.get_function(m["kernel"])
        d_in = [cupy.asarray(job[f"{k}/in{j}"]) for j in range(m["ins"])]
        d_out = [cupy.asarray(job[f"{k}/init{j}"].copy()) for j in range(m["outs"])]
        params = [np.dtype(dt).type(v) for dt, v in m["params"]]
        tail = () if m["uniform"] else (np.int32(m["n"]),)
        f((m["grid"],), (m["block"],), (*d_in, *d_out, *params, *tail))
        cupy.cuda.Device().synchronize()
        np.savez(d / f"out{k}.npz", **{f"out{j}": cupy.asnumpy(x) for j, x in enumerate(d_out)})
    return 0


def replay(path: Path = TRACE, probes: Sequence[Probe] | None = None):
    """{build: (cubin, [(case, gpu outputs)])} of a record (of ``probes``, default this file's)."""
    data = np.load(path)
    out = {}
    for which in BUILDS:
        if f"{which}/__cubin__" not in data:
            continue
        cubin = bytes(data[f"{which}/__cubin__"])
        items = []
        for pr in (PROBES if probes is None else probes):
            k = 0
            while _key(which, pr, k, "n") in data:
                case = sp.Case(pr, [data[_key(which, pr, k, f"in{j}")] for j in range(len(pr.ins))],
                               [data[_key(which, pr, k, f"init{j}")] for j in range(len(pr.outs))],
                               [sp._param(a, int(v)) for a, v in zip(pr.params, data[_key(which, pr, k, "params")])],
                               int(data[_key(which, pr, k, "n")]))
                items.append((case, [data[_key(which, pr, k, f"out{j}")] for j in range(len(pr.outs))]))
                k += 1
        out[which] = (cubin, items)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flashsim.gpu.form_probes", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--cases", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)  # run_gpu_isolated's child process
    a = ap.parse_args(argv)
    if a.child is not None:
        return _child(a.child)
    if a.out is None:
        ap.error("--out DIR is required")
    rep = record(a.out, cases=a.cases, seed=a.seed)
    bad = 0
    for which, r in rep["builds"].items():
        for name, e in r["probes"].items():
            if e.get("pending"):
                ok = not e["forms_missing"] and (e.get("refused") or e["equal"]) and not e.get("gpu_error")
                status = "pending, recorded" if ok else "PENDING, FAILED"
            else:
                ok = e["equal"] and not e["forms_missing"] and not e.get("gpu_error")
                status = "ok" if ok else "DIFFERS"
            bad += not ok
            print(f"{which:9s} {name:18s} {status} missing={e['forms_missing']} "
                  f"err={e['interp_error'] or e.get('gpu_error')} ref={len(e['reference_mismatches'])}")
            for m in e["mismatches"][:2] + e["reference_mismatches"][:2]:
                print("    " + m[:300])
    for w, e in rep["smem_sizes"].items():
        print(f"smem_size {w}: launched {e['launched']} read {e['read']}")
    print(f"cuLink (the driver's JIT) against ptxas 13.0: {rep['culink']}")
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
