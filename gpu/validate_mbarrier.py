"""Hopper's mbarrier machinery on the GPU against flashsim's interpreter, bit for bit: the probes of
gpu/kernels/probe_mbarrier.cu and the warp-specialised pipeline of gpu/kernels/ws_pipeline.cu.

    python -m flashsim.gpu.validate_mbarrier --out DIR [--record] [--cases 64] [--seed 0] [--seeds 8]

Both sources are built once for sm_90a by NVRTC (flashsim's pinned wheel, the NVRTC cupy uses), and the GPU
loads the very cubin bytes the interpreter runs (gpu.runtime.load_cubin). What runs, on the GPU and in the
interpreter, compared element by element:

  mbar_script     random scripts of mbarrier operations (init, arrive with and without counts, expect_tx,
                  complete_tx, arrive.expect_tx, arrive_drop, the release.cluster forms, inval, test_wait /
                  try_wait by parity and by state, pending_count, cp.async.bulk completing a phase), one warp
                  per case on 4 barriers; after every step the 4 barrier words (ld.volatile.shared.b64) and every
                  lane's result. Set "basic": every wait in a script is on a completed phase; set "timeouts":
                  try_wait also on phases that cannot complete (the GPU returns false at its time limit, the
                  interpreter when no lane can run). The scripts are built so that every result is
                  deterministic, and :func:`script_reference` computes them from the PTX ISA and the rules
                  of flashsim.smem.mbarrier (the state's layout, the state an arrive returns, the bytes a
                  load reads): a GPU/interpreter mismatch names the step, the op and the differing bits.
  elect_probe     elect.sync by random sets of lanes.
  namedbar_probe  bar.arrive / bar.sync / barrier.sync with ids and counts in registers across 4 warps.
  setmaxnreg      setmaxnreg.dec / .inc across 3 warpgroups (40 + 2 x 232 registers).
  ws_pipeline     the producer/consumer pipeline (WS_STAGES 2 and 4): GPU output against the interpreter's
                  under the default schedule and ``--seeds`` seeded schedules, and against numpy.
  mbar_word_probe what generic accesses see of and do to an mbarrier's bytes: loads of every kind and a
                  32-bit atomic on a live barrier, a load right after inval, an inval next to an invalid
                  neighbour that a store overwrote, a store into a live barrier (WORD_PROBE_OUTPUTS names them;
                  run last: such a store is undefined in the PTX ISA).
  mbar_many_probe 1024 mbarriers per CTA and 4 x --cases CTAs: do states reach the bytes without an inval?

The planted-bug copies of ws_pipeline (WS_MUTANT 1..3) hang on a GPU and are not run here; their deadlock
reports are CPU tests (tests/test_mbarrier.py).

Writes DIR/mbarrier_report.json and DIR/mbarrier_report.md; with ``--record`` also DIR/mbarrier_probes.json
(provenance, case counts per probe and per instruction form) and DIR/mbarrier_probes.npz (the cubins, the
inputs and the GPU's outputs), which belong in traces/sass/ (tests/test_mbarrier.py replays them without a
GPU). Exit status 1 when any output differs.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import hashlib
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from flashsim.errors import location
from flashsim.smem import mbarrier as mb

__all__ = ["ARCH", "OPS", "TRACE_JSON", "TRACE_NPZ", "WORD_PROBE_OUTPUTS", "Build", "build", "elect_cases",
           "elect_reference", "main", "make_scripts", "many_reference", "namedbar_reference", "pipeline_inputs",
           "pipeline_reference", "replay", "run_probe", "script_reference", "setmaxnreg_reference",
           "word_probe_reference"]

ARCH = "sm_90a"
PROBE_FILE = "probe_mbarrier.cu"
PIPE_FILE = "ws_pipeline.cu"
_ROOT = Path(__file__).resolve().parent.parent
TRACE_JSON = _ROOT / "traces" / "sass" / "mbarrier_probes.json"
TRACE_NPZ = _ROOT / "traces" / "sass" / "mbarrier_probes.npz"

#: mbar_script's operations (probe_mbarrier.cu, enum OP_*)
OPS = {"init": 0, "arrive": 1, "arrive_n": 2, "arrive_tx": 3, "expect_tx": 4, "complete_tx": 5, "drop": 6,
       "drop_n": 7, "test_parity": 8, "try_parity": 9, "test_state": 10, "try_state": 11, "pending": 12,
       "bulk": 13, "arrive_tx_cluster": 14, "arrive_cluster": 15, "inval": 16, "test_raw": 17,
       "try_parity_hint": 18}
OP_NAMES = {v: k for k, v in OPS.items()}
STEPS = 48
SRC_WORDS = 128  # mbar_script: each case's source words for bulk copies
PIPE_TILE = 64
PIPE_TILES = 10
PIPE_CTAS = 6
M64 = 0xFFFFFFFFFFFFFFFF


# ================================================================================================ builds
@dataclass(frozen=True)
class Build:
    """One sm_90a build of a gpu/kernels source: its cubin and the interpreter module of those bytes."""

    name: str
    defines: tuple[str, ...]
    cubin: bytes
    module: Any

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.cubin).hexdigest()


@functools.lru_cache(maxsize=None)
def build(name: str, defines: tuple[str, ...] = (), cubin: bytes | None = None) -> Build:
    """``gpu/kernels/<name>`` with ``-D`` ``defines`` for sm_90a, as flashsim.kernels.sources builds for sm_90
    (repository-relative #line name and cache key); ``cubin``: use these recorded bytes instead."""
    import flashsim.cuda as fc
    from flashsim.kernels.sources import BASE_OPTIONS, KERNELS_DIR, kernel_path, source_hash
    from flashsim.sass.toolchain import compile_cuda

    if cubin is None:
        path = kernel_path(name)
        code = f'#line 1 "gpu/kernels/{path.name}"\n' + path.read_text(encoding="utf-8")
        common = (*BASE_OPTIONS, f"-DFLASHSIM_SOURCE_HASH=0x{source_hash(name)[:16]}", *(f"-D{d}" for d in defines))
        cubin, _, _ = compile_cuda(code, name=path.name, options=(*common, f"--include-path={KERNELS_DIR}"),
                                   key_options=(*common, "--include-path=gpu/kernels"), arch=ARCH)
    return Build(name, tuple(defines), bytes(cubin), fc.RawModule(cubin=bytes(cubin)))


def pipeline_build(stages: int, mutant: int = 0, cubin: bytes | None = None) -> Build:
    return build(PIPE_FILE, (f"WS_STAGES={stages}", f"WS_MUTANT={mutant}"), cubin)


# ================================================================================================ mbar_script
class _Case:
    """The state one mbar_script case goes through (the reference model, also used to generate scripts):
    ``state`` the 4 barriers' states, ``mem`` their shared-memory bytes, which a load reads and only an inval
    writes (flashsim.smem.mbarrier; the barriers are two aligned 16-byte blocks, {0, 1} and {2, 3})."""

    def __init__(self, src: np.ndarray, combine: bool = True):
        self.state = np.zeros(4, np.uint64)
        self.mem = np.zeros(4, np.uint64)  # the probe stores 0 before the first init
        self.inited = np.zeros(4, bool)
        self.tok = np.zeros(32, np.uint64)
        self.tokbar = np.full(32, -1)
        self.buf = np.zeros(64, np.uint32)
        self.src = src
        self.combine = combine

    def f(self, b: int) -> dict:
        return {k: int(v) for k, v in mb.fields(self.state[b]).items()}

    def step(self, op: int, arg: int, mask: int) -> np.ndarray:
        """Apply one step; returns every lane's 64-bit result."""
        code, b = op & 31, (op >> 5) & 3
        lanes = [i for i in range(32) if (mask >> i) & 1]
        res = np.zeros(32, np.uint64)
        name = OP_NAMES.get(code)
        arrive = {"arrive": (1, 0, False), "arrive_n": (arg, 0, False), "arrive_tx": (1, arg, False),
                  "drop": (1, 0, True), "drop_n": (arg, 0, True), "arrive_tx_cluster": (1, arg, False),
                  "arrive_cluster": (1, 0, False), "expect_tx": (0, arg, False), "complete_tx": (0, -arg, False)}
        if not lanes:
            return res
        if name == "init":
            self.state[b] = mb.init_word(arg)
            self.inited[b] = True
        elif name in arrive:
            cnt, tx, drop = arrive[name]
            if self.combine:
                old = self.state[b]
                new, _, mis = mb.arrive(old, cnt * len(lanes), tx * len(lanes), drop)
                if int(mis):
                    raise ValueError(f"script misuse at {name}: {mb.MISUSE[int(mis)]}")
                self.state[b] = new
                olds = [old] * len(lanes)
            else:
                olds = []
                for _ in lanes:
                    olds.append(self.state[b])
                    new, _, mis = mb.arrive(self.state[b], cnt, tx, drop)
                    if int(mis):
                        raise ValueError(f"script misuse at {name}: {mb.MISUSE[int(mis)]}")
                    self.state[b] = new
            if name in ("arrive", "arrive_n", "arrive_tx", "drop", "drop_n"):
                for ln, o in zip(lanes, olds):
                    res[ln] = self.tok[ln] = mb.state_token(o)
                    self.tokbar[ln] = b
        elif name in ("test_parity", "try_parity", "try_parity_hint"):
            res[lanes] = int(mb.phase_done(self.state[b], arg & 1))
        elif name == "test_raw":
            res[lanes] = int(mb.phase_done(self.state[b], (arg >> 31) & 1))
        elif name in ("test_state", "try_state"):
            for ln in lanes:
                res[ln] = int(mb.phase_done(self.state[b], int(self.tok[ln]) >> 63))
        elif name == "pending":
            for ln in lanes:
                res[ln] = int(mb.pending_count(self.tok[ln]))
        elif name == "bulk":
            n, soff, doff = arg & 0x1FF, ((arg >> 16) & 15) * 16, ((arg >> 20) & 15) * 16
            for _ in lanes:
                self.buf.view(np.uint8)[doff:doff + n] = self.src.view(np.uint8)[soff:soff + n]
                new, _, mis = mb.complete_tx(self.state[b], n)
                self.state[b] = new
            res[lanes] = 1
        elif name == "inval":
            for k in (b & ~1, b | 1):  # the valid barriers of the 16-byte block write their states back
                if self.inited[k]:
                    self.mem[k] = self.state[k]
            self.inited[b] = False
        return res


def script_reference(ops: np.ndarray, args: np.ndarray, masks: np.ndarray, src: np.ndarray,
                     combine: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The outputs mbar_script must produce for (cases, steps) scripts: words (cases, steps, 4: the barriers'
    shared-memory bytes), results (cases, steps, 32) and the bulk destination (cases, 64). ``combine``: the lanes
    of one instruction on one barrier act as one update and all get the state before it (the H100's rule);
    False: they act one after another in lane order, each getting the state before its own update."""
    C, S = ops.shape
    words = np.zeros((C, S, 4), np.uint64)
    res = np.zeros((C, S, 32), np.uint64)
    buf = np.zeros((C, 64), np.uint32)
    for c in range(C):
        st = _Case(src[c], combine)
        for i in range(S):
            res[c, i] = st.step(int(ops[c, i]), int(args[c, i]), int(masks[c, i]))
            words[c, i] = st.mem
        buf[c] = st.buf
    return words, res, buf


def _lanes(rng, k: int) -> int:
    """A mask of ``k`` random lanes (lane 0 first when k == 1, half the time)."""
    if k == 1 and rng.random() < 0.5:
        return 1
    return int(sum(1 << int(i) for i in rng.choice(32, size=k, replace=False)))


def _script(rng, steps: int, timeouts: bool, src: np.ndarray) -> list[tuple[int, int, int]]:
    st = _Case(src)
    out: list[tuple[int, int, int]] = []

    def emit(name, b, arg, mask):
        op = OPS[name] | (b << 5)
        st.step(op, arg, mask)
        out.append((op, arg & 0xFFFFFFFF, mask))

    counts = (1, 1, 2, 3, 4, 7, 32, 33, 100, 1000, 65535, (1 << 20) - 1)
    nb = int(rng.integers(1, 5))
    for b in range(nb):
        emit("init", b, int(rng.choice(counts[:9])) if b else int(rng.choice((1, 2, 3, 32))), 1)
    while len(out) < steps:
        live = [b for b in range(4) if st.inited[b]]
        if not live:
            emit("init", int(rng.integers(4)), int(rng.choice(counts)), 1)
            continue
        b = int(rng.choice(live))
        f = st.f(b)
        pend, exp, tx = f["pending"], f["expected"], f["tx"]
        r = rng.random()
        if r < 0.12 and pend <= 32 and tx == 0 and 0 < pend:
            # the producer's pattern: the last arrivals announce the bytes, a bulk copy brings them
            k = pend
            per = int(rng.choice((16, 32, 48, 64))) if k <= 4 else 16 if k <= 16 else 0
            if per == 0 or per * k > 256:
                emit("arrive", b, 0, _lanes(rng, k))
                continue
            emit("arrive_tx" if rng.random() < 0.7 else "arrive_tx_cluster", b, per, _lanes(rng, k))
            n = per * k
            soff = int(rng.integers(0, 16)) * 16
            doff = int(rng.integers(0, (256 - n) // 16 + 1)) * 16
            if len(out) < steps:
                emit("bulk", b, n | (soff // 16) << 16 | (doff // 16) << 20 | (f["phase"] << 31), 1)
            continue
        if r < 0.30 and pend > 0:
            k = int(rng.integers(1, min(pend, 32) + 1)) if rng.random() < 0.5 else 1
            name = str(rng.choice(["arrive", "arrive", "arrive_cluster", "arrive_n", "drop", "drop_n", "arrive_tx"]))
            if name in ("arrive_n", "drop_n"):
                c = int(rng.integers(1, max(1, pend // k) + 1))
                if name == "drop_n" and exp - c * k < 1:
                    continue
                emit(name, b, c, _lanes(rng, k))
            elif name == "drop":
                if exp - k < 1:
                    continue
                emit(name, b, 0, _lanes(rng, k))
            elif name == "arrive_tx":
                per = int(rng.choice((16, 128, 1000, 4096)))
                if abs(tx + per * k) >= (1 << 20):
                    continue
                emit(name, b, per, _lanes(rng, k))
            else:
                emit(name, b, 0, _lanes(rng, k))
            continue
        if r < 0.40:
            k = 1 if rng.random() < 0.8 else int(rng.integers(1, 4))
            n = int(rng.choice((16, 64, 256, 4096, 100000, 1)))
            name = "expect_tx" if rng.random() < 0.5 else "complete_tx"
            new = tx + (n * k if name == "expect_tx" else -n * k)
            if abs(new) >= (1 << 20):
                continue
            emit(name, b, n, _lanes(rng, k))
            continue
        if r < 0.55:
            emit(str(rng.choice(["test_parity", "test_parity", "test_raw"])), b,
                 int(rng.integers(0, 1 << 32)) if rng.random() < 0.3 else int(rng.integers(2)),
                 _lanes(rng, int(rng.integers(1, 33))))
            continue
        if r < 0.65:
            parity = int(rng.integers(2))
            done = bool(mb.phase_done(st.state[b], parity))
            if done or timeouts:
                emit(str(rng.choice(["try_parity", "try_parity_hint"])), b, parity,
                     _lanes(rng, int(rng.integers(1, 33))))
            continue
        if r < 0.78:
            have = [ln for ln in range(32) if st.tokbar[ln] == b]
            if not have:
                continue
            name = str(rng.choice(["test_state", "try_state", "pending"]))
            pick = [ln for ln in have if rng.random() < 0.6] or have[:1]
            if name == "try_state" and not timeouts:
                pick = [ln for ln in pick if bool(mb.phase_done(st.state[b], int(st.tok[ln]) >> 63))]
                if not pick:
                    continue
            emit(name, b, 0, int(sum(1 << ln for ln in pick)))
            continue
        if r < 0.80:
            emit("inval", b, 0, 1)
            if len(out) < steps:
                emit("init", b, int(rng.choice(counts)), 1)
            continue
        if r < 0.84:
            emit("init", b, int(rng.choice(counts)), 1)
            continue
        if r < 0.90 and tx != 0 and pend == 0:
            # close a phase left waiting on transactions
            name = "complete_tx" if tx > 0 else "expect_tx"
            emit(name, b, abs(tx), 1)
            continue
    return out[:steps]


def make_scripts(seed: int, cases: int, steps: int = STEPS, timeouts: bool = False):
    """(ops, args, masks) (cases, steps) uint32 and src (cases, SRC_WORDS) uint32 for mbar_script, from
    ``seed``: every result deterministic (see the module docstring)."""
    rng = np.random.default_rng([seed, 1 if timeouts else 0])
    src = rng.integers(0, 1 << 32, (cases, SRC_WORDS), dtype=np.uint64).astype(np.uint32)
    ops = np.zeros((cases, steps), np.uint32)
    args = np.zeros((cases, steps), np.uint32)
    masks = np.zeros((cases, steps), np.uint32)
    for c in range(cases):
        sc = _script(rng, steps, timeouts, src[c])
        while len(sc) < steps:  # pad with reads of barrier 0
            sc.append((OPS["test_parity"], 0, 1))
        for i, (o, a, m) in enumerate(sc):
            ops[c, i], args[c, i], masks[c, i] = o, a, m
    return ops, args, masks, src


# ================================================================================================ mbarrier bytes
#: mbar_word_probe's outputs, in the order the kernel writes them (probe_mbarrier.cu: experiments A..D)
WORD_PROBE_OUTPUTS = (
    "A: the state arrive returns (init 3)", "A: ld.volatile of the live barrier", "A: ld (weak)",
    "A: ld.relaxed.cta", "A: ld.acquire.cta", "A: ld.volatile after fence.proxy.async.shared::cta",
    "A: atom.or.b32 of 0 on each half (the old bytes)", "A: pending_count of the returned state",
    "B: ld.volatile right after inval, no fence", "B: ld.volatile after membar.cta",
    "B: the never-initialised neighbour in the block", "C: an invalid neighbour, overwritten by a store, after "
    "the other slot's inval", "C: the other slot after its inval", "D: the state arrive returns after a store of "
    "init(7)'s state into the live barrier", "D: test_wait.parity 0 after that arrive", "D: the stored bytes",
    "D: the bytes after inval",
)
WORD_PROBE_PAT = 0x0123456789ABCDE0  # the 8 slots hold WORD_PROBE_PAT + i before any init
MANY_BARRIERS = 1024  # mbar_many_probe: mbarriers per CTA


def word_probe_reference(pat: int = WORD_PROBE_PAT) -> np.ndarray:
    """mbar_word_probe's outputs under flashsim.smem.mbarrier's rules: loads, atomics and stores see and change
    only the bytes, which only an inval writes (with the states of the valid barriers of its 16-byte block)."""
    m64 = (1 << 64) - 1
    s3 = int(mb.init_word(3))
    a3 = int(mb.arrive(s3, 1)[0])  # init 3, one arrival
    a4 = int(mb.arrive(mb.init_word(4), 1)[0])
    tok = int(mb.state_token(s3))
    out = [tok, pat, pat, pat, pat, pat, pat, int(mb.pending_count(tok)),  # A
           a3, a3, (pat + 1) & m64,  # B
           pat ^ 0x5555555555555555, a4,  # C
           tok, int(mb.phase_done(a3, 0)), int(mb.init_word(7)), a3]  # D
    assert len(out) == len(WORD_PROBE_OUTPUTS)
    return np.array(out, np.uint64)


def word_run(pat: int = WORD_PROBE_PAT, b: Build | None = None) -> ProbeRun:
    out = np.zeros(len(WORD_PROBE_OUTPUTS), np.uint64)
    return ProbeRun(b or build(PROBE_FILE), "mbar_word_probe", 1, 32, [], [out],
                    (np.uint64(pat), np.uint64(int(mb.init_word(7))), "o"))


def many_reference(n: int, ctas: int) -> np.ndarray:
    """mbar_many_probe's outputs (ctas, 2, n): the bytes (0) after init and one arrive on each of n barriers,
    then each one's state after its inval (no finite store of states that writes back what it evicts)."""
    j = np.arange(n)
    after = mb.arrive(mb.init_word(2 + j % 7), 1)[0]
    one = np.stack([np.zeros(n, np.uint64), after])
    return np.broadcast_to(one, (ctas, 2, n)).reshape(-1).copy()


def many_run(n: int, ctas: int, b: Build | None = None) -> ProbeRun:
    if not (0 < n <= MANY_BARRIERS and n % 32 == 0):
        from flashsim.errors import bad_argument

        raise bad_argument("n", n, f"expected a multiple of 32 in 32 .. {MANY_BARRIERS}")
    return ProbeRun(b or build(PROBE_FILE), "mbar_many_probe", ctas, 32, [], [np.zeros(ctas * 2 * n, np.uint64)],
                    (np.int32(n), "o"))


# ================================================================================================ other probes
def elect_cases(seed: int, cases: int) -> np.ndarray:
    """Lane sets for elect_probe: the full warp, single lanes, ranges, random sets."""
    rng = np.random.default_rng([seed, 2])
    fixed = [0xFFFFFFFF, 1, 0x80000000, 0xFFFF0000, 0x0000FFFF, 0xAAAAAAAA, 0x55555555, 0x00F00000]
    rand = [int(x) | (1 << int(rng.integers(32))) for x in rng.integers(0, 1 << 32, max(0, cases - len(fixed)),
                                                                         dtype=np.uint64)]
    return np.array((fixed + rand)[:cases], np.uint32)


def elect_reference(masks: np.ndarray) -> np.ndarray:
    """elect_probe's output: 0x10000 | leader << 8 | (lane is the leader) for the lanes of the mask."""
    out = np.zeros((len(masks), 32), np.uint32)
    for c, m in enumerate(int(x) for x in masks):
        leader = (m & -m).bit_length() - 1
        for ln in range(32):
            if (m >> ln) & 1:
                out[c, ln] = 0x10000 | (leader << 8) | (1 if ln == leader else 0)
    return out.reshape(-1)


def namedbar_inputs(seed: int, ctas: int):
    rng = np.random.default_rng([seed, 3])
    x = rng.integers(0, 1 << 32, (ctas, 32), dtype=np.uint64).astype(np.uint32)
    ids = np.array([1, *rng.choice(np.arange(2, 16), 2, replace=False)], np.uint32)
    return x, ids


def namedbar_reference(x: np.ndarray) -> np.ndarray:
    """namedbar_probe's output (ctas, 4, 32): what each warp read through the chain of named barriers."""
    with np.errstate(over="ignore"):
        w0 = (x * np.uint32(3) + np.uint32(1)).astype(np.uint32)
        w1 = np.roll(w0, -1, axis=1) ^ np.uint32(0x5A5A5A5A)
        w2 = (np.roll(w1, -7, axis=1) + np.uint32(0x01000193)).astype(np.uint32)
        w3 = (w2[:, ::-1] * np.uint32(0x9E3779B9)).astype(np.uint32)
    return np.stack([w0, w1, w2, w3], axis=1).reshape(-1)


def setmaxnreg_inputs(seed: int, ctas: int) -> np.ndarray:
    rng = np.random.default_rng([seed, 4])
    return rng.integers(0, 1 << 32, (ctas, 384), dtype=np.uint64).astype(np.uint32)


def setmaxnreg_reference(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        wg0 = x[:, :128] ^ np.uint32(0xA5A5A5A5)
        s = (x[:, :128] * np.uint32(5) + np.uint32(3)).astype(np.uint32)
        wg1 = (s[:, ::-1] + x[:, 128:256]).astype(np.uint32)
        wg2 = (x[:, 256:] * x[:, 256:] + np.uint32(7)).astype(np.uint32)
    return np.concatenate([wg0, wg1, wg2], axis=1).reshape(-1)


def pipeline_inputs(seed: int, ctas: int = PIPE_CTAS, tiles: int = PIPE_TILES) -> np.ndarray:
    """ws_pipeline's input (ctas, tiles, 64) f32: normal numbers in +-[2^-8, 2^8) (no subnormal can arise:
    the kernel's FFMA flushes them, cupy builds with -ftz=true)."""
    rng = np.random.default_rng([seed, 5])
    mag = np.exp2(rng.uniform(-8, 8, (ctas, tiles, PIPE_TILE)))
    return (mag * rng.choice([-1.0, 1.0], mag.shape)).astype(np.float32)


def pipeline_reference(x: np.ndarray) -> np.ndarray:
    """out[t][i] = 2 * in[t][i] + in[t][(i + 1) % 64]: one FFMA, the correctly rounded f32 sum."""
    return (np.float32(2) * x + np.roll(x, -1, axis=2)).astype(np.float32)


# ================================================================================================ running
@dataclass
class ProbeRun:
    """One probe launch: the kernel, grid, block, input arrays, output templates, and the kernel's argument
    list ``sig``: "i" (the next input), "o" (the next output) or a numpy scalar."""

    build: Build
    kernel: str
    grid: int
    block: int
    ins: list
    outs: list
    sig: tuple = ()

    def args(self, d_in, d_out):
        it_in, it_out = iter(d_in), iter(d_out)
        sig = self.sig or ("i",) * len(d_in) + ("o",) * len(d_out)
        return tuple(next(it_in) if t == "i" else next(it_out) if t == "o" else t
                     for t in sig if not isinstance(t, str) or t in "io")


def run_probe(run: ProbeRun, where: str, exec_options=None) -> list[np.ndarray]:
    """Run on "gpu" (cupy, the build's cubin bytes) or in the "interp"reter; returns the output arrays."""
    if where == "interp":
        import flashsim.cuda as fc

        f = run.build.module.get_function(run.kernel)
        d_in = [fc.asarray(np.ascontiguousarray(a)) for a in run.ins]
        d_out = [fc.asarray(np.ascontiguousarray(a).copy()) for a in run.outs]
        f((run.grid,), (run.block,), run.args(d_in, d_out), exec_options=exec_options)
        return [d.get() for d in d_out]
    from flashsim.gpu import runtime

    cupy = runtime.require_gpu()
    f = runtime.load_cubin(run.build.cubin).get_function(run.kernel)
    d_in = [cupy.asarray(np.ascontiguousarray(a)) for a in run.ins]
    d_out = [cupy.asarray(np.ascontiguousarray(a).copy()) for a in run.outs]
    runtime.launch(f, (run.grid,), (run.block,), run.args(d_in, d_out))
    return [cupy.asnumpy(d) for d in d_out]


def script_run(ops, args, masks, src, b: Build | None = None) -> ProbeRun:
    C, S = ops.shape
    return ProbeRun(b or build(PROBE_FILE), "mbar_script", C, 32, [ops, args, masks, src],
                    [np.zeros(C * S * 4, np.uint64), np.zeros(C * S * 32, np.uint64), np.zeros(C * 64, np.uint32)],
                    ("i", "i", "i", "i", np.int32(S), "o", "o", "o"))


def elect_run(masks, b: Build | None = None) -> ProbeRun:
    return ProbeRun(b or build(PROBE_FILE), "elect_probe", len(masks), 32, [masks],
                    [np.zeros(len(masks) * 32, np.uint32)])


def namedbar_run(x, ids, b: Build | None = None) -> ProbeRun:
    return ProbeRun(b or build(PROBE_FILE), "namedbar_probe", len(x), 128, [x, ids],
                    [np.zeros(len(x) * 128, np.uint32)], ("i", "i", np.uint32(64), "o"))


def setmaxnreg_run(x, b: Build | None = None) -> ProbeRun:
    return ProbeRun(b or build(PROBE_FILE), "setmaxnreg_probe", len(x), 384, [x], [np.zeros(x.size, np.uint32)])


def pipeline_run(x, stages: int, b: Build | None = None) -> ProbeRun:
    ctas, tiles, _ = x.shape
    return ProbeRun(b or pipeline_build(stages), "ws_pipeline", ctas, 96, [x.reshape(-1)],
                    [np.zeros(x.size, np.float32)], ("i", "o", np.int32(tiles)))


# ================================================================================================ comparing
def _diff_words(got: np.ndarray, want: np.ndarray) -> dict:
    """Which bits of 64-bit words differ (a histogram over bit positions) and the fields of the first pair."""
    g, w = got.astype(np.uint64), want.astype(np.uint64)
    bad = np.nonzero(g != w)[0]
    hist = {}
    if len(bad):
        x = g[bad] ^ w[bad]
        for bit in range(64):
            n = int(((x >> np.uint64(bit)) & np.uint64(1)).sum())
            if n:
                hist[bit] = n
    return {"count": int(len(bad)), "bits": hist}


def compare_script(ops, args, masks, got: list[np.ndarray], want: list[np.ndarray], label: str) -> list[str]:
    """Mismatches of mbar_script outputs, each naming the case, step, op and (for words) the fields."""
    C, S = ops.shape
    gw, gr, gb = (np.asarray(a) for a in got)
    ww, wr, wb = (np.asarray(a) for a in want)
    gw, ww = gw.reshape(C, S, 4), ww.reshape(C, S, 4)
    gr, wr = gr.reshape(C, S, 32), wr.reshape(C, S, 32)
    gb, wb = gb.reshape(C, 64), wb.reshape(C, 64)
    msgs = []
    for c in range(C):
        for i in range(S):
            if (gw[c, i] != ww[c, i]).any() or (gr[c, i] != wr[c, i]).any():
                op = int(ops[c, i])
                b = (op >> 5) & 3
                lanes = [ln for ln in range(32) if gr[c, i, ln] != wr[c, i, ln]]
                words = [k for k in range(4) if gw[c, i, k] != ww[c, i, k]]
                detail = "; ".join(f"word {k}: {int(gw[c, i, k]):#018x} vs {label} {int(ww[c, i, k]):#018x} "
                                   f"[{mb.describe(gw[c, i, k])}] vs [{mb.describe(ww[c, i, k])}]" for k in words)
                if lanes:
                    ln = lanes[0]
                    detail += (f"{'; ' if detail else ''}{len(lanes)} lanes' results differ, the first "
                               f"({location(lane=ln)}): "
                               f"{int(gr[c, i, ln]):#x} vs {label} {int(wr[c, i, ln]):#x}")
                msgs.append(f"case {c} step {i} ({OP_NAMES.get(op & 31, op & 31)} on barrier {b}, arg "
                            f"{int(args[c, i]):#x}, lanes {int(masks[c, i]):#010x}): {detail}")
                break  # the first differing step of a case; later steps follow from it
    if (gb != wb).any():
        bad = np.nonzero(gb != wb)
        msgs.append(f"bulk-copy destination differs in {len(bad[0])} words (first: case {int(bad[0][0])}, word "
                    f"{int(bad[1][0])})")
    return msgs


def _forms(b: Build, kernel: str) -> dict[str, int]:
    return dict(b.module.get_function(kernel)._prog().executed_forms())


def _forms_delta(before: dict, after: dict) -> dict[str, int]:
    return {f: c - before.get(f, 0) for f, c in after.items() if c > before.get(f, 0)}


# ================================================================================================ the run
def _attempt(fn, *a, **kw):
    """(result, seconds, error): an exception is reported with the probe, the others still run."""
    t = time.time()
    try:
        return fn(*a, **kw), round(time.time() - t, 3), None
    except Exception as exc:  # noqa: BLE001 - a probe's failure is data for the report
        return None, round(time.time() - t, 3), f"{type(exc).__name__}: {str(exc)[:3000]}"


def validate(out: Path, *, cases: int, seed: int, seeds: int, record: bool, gpu: bool = True,
             log=print) -> dict:
    """Run everything (see the module docstring) and return the report. The report is rewritten to ``out``
    after every probe, so a run cut short still leaves what it found; the set of scripts whose try_waits
    time out on the GPU runs after the others, then the two probes of what generic accesses do."""
    from flashsim.sass.machine import ExecOptions
    from flashsim.sass.toolchain import versions

    if record and not gpu:
        from flashsim.errors import bad_argument

        raise bad_argument("record", record, "a record holds the GPU's outputs: it needs the GPU")
    out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                              "command": "python -m flashsim.gpu.validate_mbarrier " + " ".join(sys.argv[1:]),
                              "seed": seed, "toolchain": versions(), "arch": ARCH, "probes": {}}
    if gpu:
        from flashsim.gpu import runtime

        runtime.require_gpu()
        report["device"] = runtime.device_info()
    arrays: dict[str, np.ndarray] = {}
    pb = build(PROBE_FILE)
    arrays["cubin/probe"] = np.frombuffer(pb.cubin, np.uint8)
    report["cubins"] = {"probe": pb.sha256}
    against = "GPU" if gpu else "reference"

    def entry(name, n_cases, elements, msgs, forms, seconds, extra=None):
        e = {"cases": n_cases, "elements": elements, "equal": not msgs, "mismatches": msgs[:20],
             "mismatch_count": len(msgs), "forms": forms, "seconds": seconds}
        e.update(extra or {})
        report["probes"][name] = e
        _write(out, report)
        log(f"{name:28s} {n_cases:4d} cases {elements:8d} elements  {'ok' if not msgs else 'DIFFERS'}  ({seconds}s)")
        for msg in msgs[:5]:
            log("    " + msg)

    def script_set(sname: str, timeouts: bool) -> None:
        ops, args, masks, src = make_scripts(seed, cases, STEPS, timeouts)
        run = script_run(ops, args, masks, src, pb)
        before = _forms(pb, "mbar_script")
        interp, t_i, ierr = _attempt(run_probe, run, "interp")
        forms = _forms_delta(before, _forms(pb, "mbar_script"))
        ref = list(script_reference(ops, args, masks, src))
        alt = list(script_reference(ops, args, masks, src, combine=False))
        dev, t_g, gerr = _attempt(run_probe, run, "gpu") if gpu else (ref, 0, None)
        msgs = [f"interpreter: {ierr}"] if ierr else []
        msgs += [f"GPU: {gerr}"] if gerr else []
        if interp is not None and dev is not None:
            msgs += compare_script(ops, args, masks, interp, dev, against)
        extra = {"interp_seconds": t_i, "ops": {OP_NAMES[k]: int(((ops & 31) == k).sum()) for k in OP_NAMES}}
        if gpu and dev is not None:
            extra["reference_vs_gpu"] = len(compare_script(ops, args, masks, dev, ref, "reference"))
            extra["per_lane_tokens_vs_gpu"] = len(compare_script(ops, args, masks, dev, alt, "per-lane tokens"))
            extra["reference_mismatches"] = compare_script(ops, args, masks, dev, ref, "reference")[:10]
            if interp is not None:
                extra["word_bits_gpu_vs_interpreter"] = _diff_words(dev[0], interp[0])
            for k, a in zip(("words", "res", "buf"), dev):
                arrays[f"mbar_script/{sname}/gpu_{k}"] = a
        for k, a in (("ops", ops), ("args", args), ("masks", masks), ("src", src)):
            arrays[f"mbar_script/{sname}/{k}"] = a
        entry(f"mbar_script/{sname}", cases, int(ops.size), msgs, forms, t_g, extra)

    def simple(name: str, run: ProbeRun, ref: np.ndarray, ins: dict, label=None) -> None:
        before = _forms(pb, name)
        interp, t_i, ierr = _attempt(run_probe, run, "interp")
        forms = _forms_delta(before, _forms(pb, name))
        dev, t_g, gerr = _attempt(run_probe, run, "gpu") if gpu else ([ref], 0, None)
        msgs = [f"interpreter: {ierr}"] if ierr else []
        msgs += [f"GPU: {gerr}"] if gerr else []
        if interp is not None and dev is not None and (interp[0] != dev[0]).any():
            bad = np.nonzero(interp[0] != dev[0])[0]
            msgs.append(f"{len(bad)} of {dev[0].size} elements differ; the first, [{int(bad[0])}]"
                        f"{f' ({label(int(bad[0]))})' if label else ''}: interpreter "
                        f"{int(interp[0][bad[0]]):#x}, {against} {int(dev[0][bad[0]]):#x}")
        extra = {"interp_seconds": t_i}
        if gpu and dev is not None:
            extra["reference_vs_gpu"] = int((dev[0] != ref).sum())
            if label:
                extra["reference_mismatches"] = [f"[{i}] {label(int(i))}: GPU {int(dev[0][i]):#x}, reference "
                                                 f"{int(ref[i]):#x}" for i in np.nonzero(dev[0] != ref)[0][:20]]
            arrays[f"{name}/gpu_out"] = dev[0]
        for k, a in ins.items():
            arrays[f"{name}/{k}"] = a
        entry(name, run.grid, int(ref.size), msgs, forms, t_g, extra)

    def pipeline(stages: int) -> None:
        b = pipeline_build(stages)
        arrays[f"cubin/ws_pipeline_{stages}"] = np.frombuffer(b.cubin, np.uint8)
        report["cubins"][f"ws_pipeline_{stages}"] = b.sha256
        xin = pipeline_inputs(seed + stages)
        run = pipeline_run(xin, stages, b)
        ref = pipeline_reference(xin).reshape(-1)
        before = _forms(b, "ws_pipeline")
        dev, t_g, gerr = _attempt(run_probe, run, "gpu") if gpu else ([ref], 0, None)
        msgs = [f"GPU: {gerr}"] if gerr else []
        want = dev[0] if dev is not None else ref
        per_seed = {}
        for sd in [None, *range(seeds)]:
            got, _, ierr = _attempt(run_probe, run, "interp", ExecOptions(schedule_seed=sd))
            label = "default" if sd is None else str(sd)
            if ierr:
                per_seed[label] = ierr[:200]
                msgs.append(f"schedule {label}: interpreter {ierr}")
                continue
            bad = int((got[0].view(np.uint32) != want.view(np.uint32)).sum())
            per_seed[label] = bad
            if bad:
                msgs.append(f"schedule {label}: {bad} of {want.size} outputs differ from the "
                            f"{'GPU' if dev is not None else 'reference'}")
        forms = _forms_delta(before, _forms(b, "ws_pipeline"))
        extra = {"schedules": per_seed}
        if gpu and dev is not None:
            extra["reference_vs_gpu"] = int((dev[0].view(np.uint32) != ref.view(np.uint32)).sum())
            arrays[f"ws_pipeline_{stages}/gpu_out"] = dev[0]
        arrays[f"ws_pipeline_{stages}/x"] = xin
        entry(f"ws_pipeline/stages={stages}", xin.shape[0], int(ref.size), msgs, forms, t_g, extra)

    script_set("basic", False)
    em = elect_cases(seed, max(cases, 64))
    simple("elect_probe", elect_run(em, pb), elect_reference(em), {"masks": em})
    x, ids = namedbar_inputs(seed, 16)
    simple("namedbar_probe", namedbar_run(x, ids, pb), namedbar_reference(x), {"x": x, "ids": ids})
    xs = setmaxnreg_inputs(seed, 8)
    simple("setmaxnreg_probe", setmaxnreg_run(xs, pb), setmaxnreg_reference(xs), {"x": xs})
    for stages in (2, 4):
        pipeline(stages)
    script_set("timeouts", True)
    # last: generic stores into a live mbarrier are undefined in the PTX ISA, so a fault here spoils nothing else
    simple("mbar_word_probe", word_run(b=pb), word_probe_reference(), {"pat": np.array([WORD_PROBE_PAT], np.uint64)},
           WORD_PROBE_OUTPUTS.__getitem__)
    many = np.array([MANY_BARRIERS, 4 * cases], np.int64)  # barriers per CTA, CTAs (several per SM)
    simple("mbar_many_probe", many_run(*map(int, many), pb), many_reference(*map(int, many)), {"n_ctas": many},
           lambda i: f"{location(cta=i // (2 * int(many[0])))}, {'after inval' if i // int(many[0]) % 2 else 'live'}, "
                     f"barrier {i % int(many[0])}")

    forms_all: dict[str, dict] = {}
    for name, e in report["probes"].items():
        for f, n in e["forms"].items():
            r = forms_all.setdefault(f, {"probes": 0, "cases": 0, "executions": 0, "equal": 0})
            r["probes"] += 1
            r["cases"] += e["cases"]
            r["executions"] += n
            r["equal"] += e["cases"] if e["equal"] else 0
    report["opcodes"] = dict(sorted(forms_all.items()))
    report["equal"] = all(e["equal"] for e in report["probes"].values())
    _write(out, report)
    if record:
        np.savez_compressed(out / "mbarrier_probes.npz", **arrays)
        rec = {k: report[k] for k in ("date", "command", "seed", "toolchain", "arch", "cubins", "equal")}
        rec["device"] = report.get("device")
        rec["steps_per_script"] = STEPS
        rec["probes"] = {n: {k: e[k] for k in ("cases", "elements", "equal", "mismatch_count")}
                         for n, e in report["probes"].items()}
        rec["opcodes"] = report["opcodes"]
        (out / "mbarrier_probes.json").write_text(json.dumps(rec, indent=1, default=_json) + "\n")
        log(f"recorded {out / 'mbarrier_probes.json'} and {out / 'mbarrier_probes.npz'}: copy both to traces/sass/")
    return report


def _write(out: Path, report: dict) -> None:
    (out / "mbarrier_report.json").write_text(json.dumps(report, indent=1, default=_json) + "\n")
    (out / "mbarrier_report.md").write_text(_markdown(report))


def _json(x):
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, np.ndarray):
        return x.tolist()
    return str(x)


def _markdown(rep: dict) -> str:
    lines = [f"# mbarrier probes ({rep.get('device', {}).get('name', 'no GPU')}, {rep['date']})", "",
             f"Command: `{rep['command']}`; arch {rep['arch']}; toolchain {rep['toolchain']}", "",
             "| probe | cases | elements | bit-identical | notes |", "|---|---|---|---|---|"]
    for name, e in rep["probes"].items():
        note = "; ".join(e["mismatches"][:2]).replace("|", "/")[:300]
        lines.append(f"| {name} | {e['cases']} | {e['elements']} | {'yes' if e['equal'] else 'NO'} | {note} |")
    lines += ["", "| instruction form | probes | cases | executions |", "|---|---|---|---|"]
    for f, r in rep.get("opcodes", {}).items():
        lines.append(f"| {f} | {r['probes']} | {r['cases']} | {r['executions']} |")
    return "\n".join(lines) + "\n"


# ================================================================================================ replay
def replay(path: Path = TRACE_NPZ) -> dict:
    """The recorded arrays (``mbarrier_probes.npz``: the cubins, the inputs, the GPU outputs), by name."""
    data = np.load(path)
    return {k: data[k] for k in data.files}


def recorded_builds(rec: dict) -> dict[str, Build]:
    """The recorded cubins as interpreter builds (the bytes the GPU ran)."""
    out = {"probe": build(PROBE_FILE, (), bytes(rec["cubin/probe"]))}
    for stages in (2, 4):
        k = f"cubin/ws_pipeline_{stages}"
        if k in rec:
            out[f"ws_pipeline_{stages}"] = pipeline_build(stages, 0, bytes(rec[k]))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flashsim.gpu.validate_mbarrier", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="directory for the report (and the record with --record)")
    ap.add_argument("--record", action="store_true", help="also write mbarrier_probes.json/.npz for traces/sass/")
    ap.add_argument("--cases", type=int, default=64, help="cases per mbar_script set (default 64)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seeds", type=int, default=8, help="seeded schedules of the pipeline in the interpreter")
    ap.add_argument("--no-gpu", action="store_true", help="interpreter against the references only (no GPU)")
    a = ap.parse_args(argv)
    t = time.time()
    rep = validate(Path(a.out), cases=a.cases, seed=a.seed, seeds=a.seeds, record=a.record, gpu=not a.no_gpu,
                   log=functools.partial(print, flush=True))
    n = len(rep["probes"])
    good = sum(e["equal"] for e in rep["probes"].values())
    print(f"{good} of {n} probes bit-identical ({'GPU' if not a.no_gpu else 'reference'} vs interpreter) in "
          f"{time.time() - t:.1f}s; report in {a.out}/mbarrier_report.md")
    return 0 if rep["equal"] else 1


if __name__ == "__main__":
    sys.exit(main())
