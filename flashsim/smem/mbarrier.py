"""The mbarrier object: the 64-bit word in shared memory that Hopper's SYNCS instructions update, its fields,
and the operations on it (PTX ISA 8.x, 9.7.13.15 "Parallel Synchronization and Communication Instructions:
mbarrier"), vectorised over numpy arrays of words.

PTX ISA, "Contents of the mbarrier object": the object keeps the current phase, the count of pending
arrivals of the current phase, the expected arrival count of the next phases, and the tx-count (pending
asynchronous transactions, in bytes for the bulk copies). Valid ranges: expected 1 .. 2^20 - 1, pending
0 .. 2^20 - 1, tx-count -(2^20 - 1) .. 2^20 - 1. "Phase Completion of the mbarrier object": the current phase
completes when the pending count has reached zero and the tx-count has reached zero; atomically the object
moves to the next phase and the pending count is reinitialised to the expected count. "Arrive-on
operation": the pending count decreases by ``count`` (default 1); "expect-tx operation": the tx-count
increases by ``expectCount``; "complete-tx operation": it decreases by ``completeCount``. An
``arrive.expect_tx`` is an expect-tx followed by an arrive-on; an ``arrive_drop`` also lowers the
expected count for the following phases.

The word, low bit first (sm_90)::

     0        always 0 here                                                   hypothesis (H100 probe)
     1 .. 20  E = (2^20 - expected arrival count) mod 2^20                    ptxas
    21 .. 42  T = tx-count, 22-bit two's complement                           hypothesis (H100 probe)
    43 .. 62  P = (2^20 - pending arrival count) mod 2^20                     ptxas
    63        the current phase's parity                                      ptxas

What "ptxas" marks is ptxas's own code (NVRTC 13.0, sm_90): ``mbarrier.init.shared.b64 [a], n`` becomes
``UIADD3 x = 0x100000 - n; SYNCS.EXCH.64 [a], {x << 1, x << 11}`` (the word ((2^20 - n) << 43) |
((2^20 - n) << 1)); ``mbarrier.pending_count.b64 c, state`` becomes c = 0x100000 - ((state >> 43) &
0xFFFFF); ``mbarrier.test_wait.b64 p, [a], state`` hands SYNCS.PHASECHK the state's high word and
``try_wait.parity p, [a], q`` hands it q << 31, so the phase is bit 63. The tx-count field and bit 0 are
this module's hypothesis; ``gpu/validate_mbarrier.py`` reads the word after every operation on the H100
and the record it writes settles them (tests/test_mbarrier.py replays it).

Every function takes and returns uint64 arrays (any shape, broadcast together); ``misuse`` results are
codes (:data:`MISUSE`) for what the PTX ISA leaves undefined, which the interpreter reports as faults.
"""

from __future__ import annotations

import numpy as np

__all__ = ["COUNT_MAX", "MISUSE", "TX_MAX", "arrive", "complete_tx", "fields", "init_word", "make_word",
           "phase_done", "describe"]

U64 = np.uint64
COUNT_MAX = (1 << 20) - 1  # expected / pending arrival counts, and |tx-count|
TX_MAX = (1 << 20) - 1
_M20 = U64(0xFFFFF)
_M22 = U64(0x3FFFFF)
_E_SHIFT, _T_SHIFT, _P_SHIFT, _PHASE_SHIFT = U64(1), U64(21), U64(43), U64(63)

#: misuse codes (0: none): undefined behaviour in the PTX ISA that the interpreter reports
MISUSE = {
    1: "more arrivals than the phase has pending (the arrive-on count exceeds the pending arrival count)",
    2: "tx-count outside -(2^20-1) .. 2^20-1",
    3: "arrive_drop lowers the expected arrival count below 1",
    4: "init with an arrival count outside 1 .. 2^20-1",
}


def _u64(x) -> np.ndarray:
    return np.asarray(x).astype(np.uint64)


def _i64(x) -> np.ndarray:
    return np.asarray(x).astype(np.int64)


def fields(word) -> dict[str, np.ndarray]:
    """The fields of words: ``phase`` (0/1), ``pending``, ``expected`` (counts), ``tx`` (signed bytes)."""
    w = _u64(word)
    t = ((w >> _T_SHIFT) & _M22).astype(np.int64)
    return {
        "phase": ((w >> _PHASE_SHIFT) & U64(1)).astype(np.int64),
        "pending": ((U64(1 << 20) - ((w >> _P_SHIFT) & _M20)) & _M20).astype(np.int64),
        "expected": ((U64(1 << 20) - ((w >> _E_SHIFT) & _M20)) & _M20).astype(np.int64),
        "tx": np.where(t >= (1 << 21), t - (1 << 22), t),
    }


def make_word(phase, pending, expected, tx) -> np.ndarray:
    """The word holding these fields (counts taken mod 2^20, tx mod 2^22)."""
    ph, pe, ex, tx = (_i64(v) for v in (phase, pending, expected, tx))
    p_field = ((1 << 20) - pe) & 0xFFFFF
    e_field = ((1 << 20) - ex) & 0xFFFFF
    t_field = tx & 0x3FFFFF
    return ((_u64(ph & 1) << _PHASE_SHIFT) | (_u64(p_field) << _P_SHIFT) | (_u64(t_field) << _T_SHIFT)
            | (_u64(e_field) << _E_SHIFT))


def init_word(count) -> np.ndarray:
    """mbarrier.init with ``count`` expected arrivals: phase 0, pending = expected = count, tx-count 0 (the word
    ptxas computes itself and stores with SYNCS.EXCH.64)."""
    c = _u64(count) & U64(0xFFFFFFFF)
    x = (U64(0x100000) - c) & U64(0xFFFFFFFF)  # UIADD3 x = -count + 0x100000 (32-bit)
    lo = (x << U64(1)) & U64(0xFFFFFFFF)
    hi = (x << U64(11)) & U64(0xFFFFFFFF)
    return lo | (hi << U64(32))


def _settle(ph, pe, ex, tx):
    """Phase completion: where pending and tx-count are both zero, the phase flips and pending reloads."""
    done = (pe == 0) & (tx == 0)
    return np.where(done, ph ^ 1, ph), np.where(done, ex, pe), done


def arrive(word, count, tx_add=0, drop=False):
    """An arrive-on of ``count`` arrivals, preceded by an expect-tx of ``tx_add`` bytes (``arrive.expect_tx``;
    0 for a plain arrive; an expect_tx alone is ``count`` 0), with ``drop`` also lowering the expected count
    (``arrive_drop``). Returns (new words, phase completed (bool), misuse code)."""
    f = fields(word)
    ph, pe, ex, tx = f["phase"], f["pending"], f["expected"], f["tx"]
    cnt = _i64(count)
    tx = tx + _i64(tx_add)
    drop = np.asarray(drop, bool)
    ex = np.where(drop, ex - cnt, ex)
    misuse = np.zeros(np.broadcast(ph, cnt, tx, drop).shape, np.int64)
    misuse = np.where(np.abs(tx) > TX_MAX, 2, misuse)
    misuse = np.where(drop & (ex < 1) & (cnt > 0), 3, misuse)
    misuse = np.where(cnt > pe, 1, misuse)
    pe = pe - cnt
    ph2, pe2, done = _settle(ph, pe, ex, tx)
    return make_word(ph2, pe2, ex, tx), done & (misuse == 0), misuse


def complete_tx(word, nbytes):
    """A complete-tx of ``nbytes`` (a bulk copy's bytes arrived, or ``mbarrier.complete_tx``): the tx-count
    decreases, and the phase completes if nothing is pending. Returns (new words, completed, misuse)."""
    f = fields(word)
    tx = f["tx"] - _i64(nbytes)
    misuse = np.where(np.abs(tx) > TX_MAX, 2, 0)
    ph2, pe2, done = _settle(f["phase"], f["pending"], f["expected"], tx)
    return make_word(ph2, pe2, f["expected"], tx), done & (misuse == 0), misuse


def phase_done(word, parity) -> np.ndarray:
    """test_wait / try_wait.parity: has the phase of this parity completed? True when the current phase's
    parity differs from ``parity`` (the phase waited for is the immediately preceding one). A wait for the
    parity of the current phase is false until the current phase completes: a lane waiting on a phase two
    phases back waits for the next completion (PTX ISA: the parity names the current or the immediately
    preceding phase)."""
    return ((_u64(word) >> _PHASE_SHIFT) & U64(1)).astype(np.int64) != (_i64(parity) & 1)


def describe(word) -> str:
    """One mbarrier word in words: phase, arrivals, tx-count."""
    f = {k: int(np.asarray(v).reshape(-1)[0]) for k, v in fields(word).items()}
    arrived = f["expected"] - f["pending"]
    return (f"phase {f['phase']}, {arrived} of {f['expected']} arrivals (pending {f['pending']}), "
            f"tx-count {f['tx']} bytes")
