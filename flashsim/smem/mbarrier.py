"""The mbarrier object: the 64-bit state that Hopper's SYNCS instructions update, its fields, the operations
on it (PTX ISA 8.x, 9.7.13.15 "Parallel Synchronization and Communication Instructions: mbarrier"), what an
arrive returns, and what a plain shared-memory load of its address reads; vectorised over numpy arrays.

PTX ISA, "Contents of the mbarrier object": the (opaque) object keeps the current phase, the count of pending
arrivals of the current phase, the expected arrival count of the next phases, and the tx-count (pending
asynchronous transactions, in bytes for the bulk copies). Valid ranges: expected 1 .. 2^20 - 1, pending
0 .. 2^20 - 1, tx-count -(2^20 - 1) .. 2^20 - 1. "Phase Completion of the mbarrier object": the current phase
completes when the pending count has reached zero and the tx-count has reached zero; atomically the object
moves to the next phase and the pending count is reinitialised to the expected count. "Arrive-on
operation": the pending count decreases by ``count`` (default 1); "expect-tx operation": the tx-count
increases by ``expectCount``; "complete-tx operation": it decreases by ``completeCount``. An
``arrive.expect_tx`` is an expect-tx followed by an arrive-on; an ``arrive_drop`` also lowers the
expected count for the following phases.

The state, low bit first (sm_90)::

     0        0
     1 .. 20  E = (2^20 - expected arrival count) mod 2^20      (arrive_drop adds to it)
    21 .. 41  T = (-tx-count) mod 2^21                          (expect-tx lowers it, complete-tx raises it)
    42        0
    43 .. 62  P = (2^20 - pending arrival count) mod 2^20       (each arrival adds 1)
    63        the current phase's parity

Every count is held negated, so each event adds to its field. ptxas's own code (NVRTC 13.0, sm_90) shows
E, P and the phase: ``mbarrier.init.shared.b64 [a], n`` becomes ``UIADD3 x = 0x100000 - n; SYNCS.EXCH.64
[a], {x << 1, x << 11}`` (the state ((2^20 - n) << 43) | ((2^20 - n) << 1)); ``mbarrier.pending_count.b64 c,
state`` becomes c = 0x100000 - ((state >> 43) & 0xFFFFF); ``test_wait`` hands SYNCS.PHASECHK the state's
high word and ``try_wait.parity`` q << 31, so the phase is bit 63.

Where the state lives, and what a generic load reads. The H100 record (traces/sass/mbarrier_probes.npz,
``mbar_script``: 128 scripts of 48 steps on 4 mbarriers at shared 0x400..0x41f, each step followed by a
membar.cta and ``ld.volatile.shared.b64`` of the 4 words; sets "basic" / "timeouts") shows:

* The SYNCS instructions do not keep the state in the shared-memory bytes at the barrier's address. A
  load of an initialised barrier whose 16-byte block no ``mbarrier.inval`` has touched read the bytes the
  kernel stored there before the init (0) in all 5,408 / 5,730 such reads (basic / timeouts), though E
  is never 0: init, arrivals, expect-tx, complete-tx, bulk copies and phase completions leave the bytes
  as they are (127 / 128 inits over bytes an earlier inval had written left them unchanged too).
* ``mbarrier.inval`` (SYNCS.CCTL.IV) writes the state, in the layout above, to the shared-memory bytes of
  every valid mbarrier (initialised and not invalidated since) in the aligned 16-byte block that holds the
  invalidated one: itself (72 / 77 writebacks) and its neighbour in the block when that one is valid
  (44 / 52). A barrier never initialised keeps its bytes (28 / 25 invals next to one; they were 0 in the
  record, so "not written" and "written with 0" are not told apart). The rule "memory = the state at the
  last inval in its 16-byte block, else the bytes stored before" gives all 12,288 / 12,288 recorded words;
  writing back only the invalidated barrier misses 625 / 904 of them, writing all 4 of the 32-byte block
  602 / 1,143.
* The 245 written-back states fix the layout: bit 0 and bit 42 are 0 in all; T holds the negated
  tx-count in 21 bits (tx-count > 0 in 73 of them, < 0 in 38; a positive tx-count field misses 111, a
  22-bit negated one the 73 with tx-count > 0), and phase 1 shows as bit 63 (68).

The state an arrive returns (``mbarrier.arrive{.expect_tx,_drop} s, [a]``: SYNCS.ARRIVE.TRANS64 Rs) is
the high 32 bits of the state before the arrive, with 0 in the low 32 bits: 7,382 of 7,382 recorded lane
results (3,693 / 3,689); 2,322 of them were taken with a tx-count other than 0 and show the negated
tx-count's bits 11..20 in bits 32..41. The lanes of one warp instruction on one barrier act as one update
and all get the same state (one state per lane in lane order would give 5,987 other tokens).
``pending_count`` and ``test_wait`` read only bits 43..63 of it (1,216 pending counts, 1,787 waits on a
returned state and 5,496 on a made-up one agree). In the recorded cubin the destination's low register held
0 before every arrive, so "writes 0" and "leaves the register" are not told apart; this module writes 0.

Nothing in the record depends on timing: the rules above give every recorded word and lane result (24,576
words, 196,608 lane results; in the "timeouts" set 3,666 try_wait results were false at the time limit). An ``mbarrier.init`` on a valid barrier (undefined in the PTX ISA; 148 / 139 in the scripts)
acted as a fresh init. Open, and asked by the probes ``mbar_word_probe`` / ``mbar_many_probe`` of
gpu/kernels/probe_mbarrier.cu for the next record: whether ld.relaxed / ld.acquire / atomics or a
fence.proxy.async see more than ld.volatile; whether a load right after an inval, with no fence, already
sees its write; whether an inval writes an invalid neighbour whose bytes a store overwrote; whether a
store into a live barrier reaches its state (here: no); whether states reach the bytes without an inval
when a CTA holds 1,024 barriers and many CTAs share an SM (here: no).

In the interpreter the states live in ``AsyncState.state`` (flashsim.sass.asyncstate), apart from the
shared-memory bytes; SYNCS.CCTL.IV copies them (flashsim.sass.ops_sync).

Every function takes and returns uint64 arrays (any shape, broadcast together); ``misuse`` results are
codes (:data:`MISUSE`) for what the PTX ISA leaves undefined, which the interpreter reports as faults.
"""

from __future__ import annotations

import numpy as np

__all__ = ["COUNT_MAX", "INVAL_BLOCK", "MISUSE", "TX_MAX", "arrive", "complete_tx", "describe", "fields",
           "init_word", "inval_block", "make_word", "pending_count", "phase_done", "state_token"]

U64 = np.uint64
COUNT_MAX = (1 << 20) - 1  # expected / pending arrival counts, and |tx-count|
TX_MAX = (1 << 20) - 1
INVAL_BLOCK = 16  # bytes: mbarrier.inval writes back the valid mbarriers of the aligned block holding it
_M20 = U64(0xFFFFF)
_M21 = U64(0x1FFFFF)
_E_SHIFT, _T_SHIFT, _P_SHIFT, _PHASE_SHIFT = U64(1), U64(21), U64(43), U64(63)
_HIGH = U64(0xFFFFFFFF00000000)

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
    """The fields of states: ``phase`` (0/1), ``pending``, ``expected`` (counts), ``tx`` (signed bytes)."""
    w = _u64(word)
    t = ((w >> _T_SHIFT) & _M21).astype(np.int64)  # -tx-count, 21-bit two's complement
    return {
        "phase": ((w >> _PHASE_SHIFT) & U64(1)).astype(np.int64),
        "pending": ((U64(1 << 20) - ((w >> _P_SHIFT) & _M20)) & _M20).astype(np.int64),
        "expected": ((U64(1 << 20) - ((w >> _E_SHIFT) & _M20)) & _M20).astype(np.int64),
        "tx": -np.where(t >= (1 << 20), t - (1 << 21), t),
    }


def make_word(phase, pending, expected, tx) -> np.ndarray:
    """The state holding these fields (counts taken mod 2^20, -tx mod 2^21)::

        63    62 .. 43     42   41 .. 21      20 .. 1           0
        phase 2^20-pending  0   -tx mod 2^21  2^20-expected     0
    """
    ph, pe, ex, tx = (_i64(v) for v in (phase, pending, expected, tx))
    p_field = ((1 << 20) - pe) & 0xFFFFF
    e_field = ((1 << 20) - ex) & 0xFFFFF
    t_field = (-tx) & 0x1FFFFF
    return ((_u64(ph & 1) << _PHASE_SHIFT) | (_u64(p_field) << _P_SHIFT) | (_u64(t_field) << _T_SHIFT)
            | (_u64(e_field) << _E_SHIFT))


def init_word(count) -> np.ndarray:
    """mbarrier.init with ``count`` expected arrivals: phase 0, pending = expected = count, tx-count 0 (the state
    ptxas computes itself and hands to SYNCS.EXCH.64)."""
    c = _u64(count) & U64(0xFFFFFFFF)
    x = (U64(0x100000) - c) & U64(0xFFFFFFFF)  # UIADD3 x = -count + 0x100000 (32-bit)
    lo = (x << U64(1)) & U64(0xFFFFFFFF)
    hi = (x << U64(11)) & U64(0xFFFFFFFF)
    return lo | (hi << U64(32))


def state_token(word) -> np.ndarray:
    """The state ``mbarrier.arrive`` returns for the state ``word`` before it: its high 32 bits (phase, P, the top
    10 bits of T), low 32 bits 0 (H100 record: 7,382 of 7,382 arrive results). In SASS only the high register
    of the destination pair is written: the low one keeps its value (H100: mbar_word_probe, 2 of 2 arrives into
    registers that held other values), which these scripts' registers, all 0, do not show."""
    return _u64(word) & _HIGH


def pending_count(state) -> np.ndarray:
    """``mbarrier.pending_count.b64 c, state``: ptxas's ALU code, c = (0x100000 - ((state >> 43) & 0xFFFFF))
    mod 2^32."""
    return ((U64(0x100000) - ((_u64(state) >> _P_SHIFT) & _M20)) & U64(0xFFFFFFFF)).astype(np.int64)


def inval_block(addr) -> tuple[np.ndarray, np.ndarray]:
    """The byte addresses of the two 8-byte slots of the aligned :data:`INVAL_BLOCK`-byte block that holds the
    mbarrier at ``addr``: an ``mbarrier.inval`` writes the state of each valid mbarrier among them to its
    shared-memory bytes (H100 record: all 12,288 + 12,288 words read back)."""
    lo = _i64(addr) & ~np.int64(INVAL_BLOCK - 1)
    return lo, lo + 8


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
    """One mbarrier state in words: phase, arrivals, tx-count."""
    f = {k: int(np.asarray(v).reshape(-1)[0]) for k, v in fields(word).items()}
    arrived = f["expected"] - f["pending"]
    return (f"phase {f['phase']}, {arrived} of {f['expected']} arrivals (pending {f['pending']}), "
            f"tx-count {f['tx']} bytes")
