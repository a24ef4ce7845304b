"""A protocol model of seed 004's sm100 (Blackwell) FlashAttention-4 forward kernel (upstream flash-attention
``flash_attn/cute/flash_fwd_sm100.py`` at e724e258): its warps' mbarrier, TMA, tcgen05 and TMEM steps, without
arithmetic, replayed under the interpreter's schedules, checked for deadlocks, hazards and stale data.

NOT VERIFIED ON HARDWARE: no sm100 GPU is available here. Nothing in this module was run on, or compared with,
a Blackwell GPU; it restates the seed's protocol as the article and the upstream code describe it. The kernel of
this project that is verified on hardware is the sm_90 one, gpu/kernels/fa4h.cu (flashsim.kernels.fa4h).

One CTA: q_stage 2 (two 128-row Q tiles per work tile), kv_stage 3, m_block = n_block = 128, 16-bit inputs,
head dims qk 192 / v 128 (the uneven K/V stages of :mod:`flashsim.attention.ws_plan`, stage 1 moving by 8 KiB with
the round's parity, the extra wait on kv_empty[1] before K into stage 0, sO overlapping sQ) or 128 / 128 (even
stages, sO of its own). The roles are the seed's warps:

    warps 0-3   softmax0    S0 -> P0 (one agent for the warpgroup)     warp 12   mma        tcgen05.mma, commits
    warps 4-7   softmax1    S1 -> P1 (one agent)                       warp 13   load       TMA loads of Q, K, V
    warps 8-11  correction  rescale O, final O -> sO (one agent)       warp 14   epilogue   TMA store of sO
                                                                       warp 15   empty      (no protocol step)

Each role is a program (a generator) of protocol steps: mbarrier wait (parity), arrive, arrive.expect_tx, TMA
load (lands later in 16 KiB boxes, each a complete_tx on its full barrier), tcgen05.mma (runs asynchronously on
the tensor core, in issue order), tcgen05.commit (arrives once every MMA issued before it has completed),
tcgen05.ld / tcgen05.st of TMEM columns (a store completes asynchronously; tcgen05.wait::st orders it before a
later arrive), st.shared / ld.shared, fence.proxy.async, TMA store of sO (a bulk group;
cp.async.bulk.wait_group.read), tcgen05.alloc / dealloc. The mbarrier states are the words of
:mod:`flashsim.smem.mbarrier`, the same the interpreter keeps.

Scheduling mirrors the interpreter's (``flashsim.sass.machine.Machine._pick``) over agents instead of PCs: the
default schedule steps the runnable role with the lowest warp index; ``ExecOptions.schedule_seed`` picks a
runnable role at random; a ``SchedulePolicy`` favours (``first``) or holds back (``delay`` for ``delay_steps``)
the roles of its warps; a runnable role passed over more than ``starve_steps`` steps runs next. Asynchronous
operations (TMA boxes, MMAs, tcgen05.st, TMA stores) complete ``ASYNC_DELAY`` steps after their issue, after a
random 0 .. 4 * ASYNC_DELAY under a seed, after ``policy.copy_delay`` when given, and all at once when nothing
else can run (MMAs and commits always in issue order). :func:`launch` gives the ``launch(options)`` that
``flashsim.sass.schedules.explore(launch, schedules=N, seed=S, roles=ROLES)`` drives.

Checks:

- deadlock: no role can run and nothing is in flight: :class:`flashsim.sass.machine.BarrierDeadlock`, naming
  every blocked role, the barrier it waits on (the seed's names: kv_full[1], P_full_O_rescaled[0], ...) with
  the parity, the barrier's state, and the model step (its label and line in this module).
- hazards: happens-before from the protocol only (vector clocks: one column per role and for the tensor core,
  one bit per asynchronous TMA box, TMA store and tcgen05.st, which complete out of order). An arrive releases,
  a wait that passes acquires the phase; a complete_tx releases its box; a commit releases what the tensor
  core completed; tcgen05.wait::st and wait_group.read acquire the issuer's completed operations. Two accesses
  to overlapping SMEM bytes or TMEM columns, one a write, unordered: a RAW / WAR / WAW hazard with both sides.
  A generic-proxy write (st.shared of sO) read by the async proxy (the TMA store) also needs a
  fence.proxy.async between the write and the release that orders it.
- data flow: each write tags its region with what it holds (K[n=3] tile 0, S0[n=3] tile 0, O1[n>=0] tile 2,
  ...), each read states what it expects; another tag is a stale read (a wrong stage-1 offset shows here even
  when the ordering holds).

:data:`MUTANTS` are planted one-line protocol bugs (from the seed's list of bugs); each is found as its
catalogue says (tests/test_sm100_protocol.py). ``flashsim pipeline --sm100-model --sweep --schedules 1000``
explores every configuration of :data:`PROBLEMS` and judges every planted bug.

Modelling choices and simplifications (each also where it is made):

- A softmax or correction warpgroup is one agent: its four warps run the same steps on their lane quarters, so
  one arrive of 128 stands for 128 thread arrivals, and a TMEM access covers lanes 0..127 (TMEM regions are
  columns; every access in this kernel spans all 128 lanes). The s0/s1 ordering barrier's per-warp barriers
  s0_s1_sequence[w + 4 s] are waited on and arrived at for w = 0..3 by the warpgroup's agent.
- A TMA load lands in 16 KiB boxes (128 rows x 64 16-bit columns, one 128-byte-swizzle atom column), each
  writing its bytes and completing 16384 bytes of tx on the full barrier; a K/V/Q tile's boxes are taken as
  contiguous 16 KiB pieces of its range.
- An MMA reads its operands and writes its accumulator at one instant (its completion). Q.K^T is one MMA; P.V is
  two: the k-steps before the in-asm P_full_2 wait (6 of 8, P columns 0-47 of 64) and the rest. Each P.V part
  reads the whole V tile (the bytes of V's k-steps are not split).
- The correction warpgroup always rescales O (upstream skips it when no row's scale is below 1): the accesses of
  the skipped path are a subset, its synchronisation the same.
- The exp2 pass, row max / row sum, masking, LSE to global memory and the global-memory writes of the TMA store
  are not modelled (no arithmetic); sScale (acc_scale, row_sum, row_max) is, as SMEM.
- Zero-work tiles (n_block_min >= n_block_max) are skipped by every role, as in e724e258 (a later upstream
  change processes them without split-KV); so, unlike fa4h.cu and ws_plan's plan, no Q is loaded for them.
- Work tiles: the m-blocks of 256 query rows (two Q tiles) per head and batch, m-block fastest; causal with
  bottom-right alignment, walked longest first (the LPT scheduler, its L2 grouping of heads left out). With
  qk 192 (sO overlapping sQ) or causal the seed's scheduler is not persistent: each work tile is a CTA of its
  own, with fresh barriers. Otherwise one persistent CTA walks every work tile (a grid of one CTA), so phases
  and K/V rounds carry over from tile to tile; ``persistent=True`` makes one CTA walk every tile in any
  configuration (beyond the seed's scheduler for causal; for qk 192 it is the seed's reason to turn
  persistence off, planted bug 21).
- The s0/s1 ordering barrier is off, as e724e258 hard-codes it; ``s0_s1_barrier=True`` models it. Named
  barriers are not used by this version of the kernel. tcgen05.ld is synchronous (the copy waits for it).
- The end-of-kernel state of the barriers is not checked: P_full_O_rescaled ends half-arrived by design (the
  correction warpgroup's arrival for a next tile that does not come).
- CTAs that are not persistent run one after another, each with fresh barriers and memories (they share
  nothing). tcgen05.alloc is a write of all 512 columns by the MMA warp (the other roles assume base 0, as the
  seed does); relinquish_alloc_permit, tmem_holding_buf, setmaxnreg and the idle warp are not modelled.
- Not modelled at all: split-KV, paged KV, varlen, local windows, score_mod, the learnable sink, q_stage 1,
  kv_stage 4 (8-bit inputs), head dims other than 192 / 128 and 128 / 128, the epilogue's vectorised-copy path.
- A hazard or stale read is reported once per pair of step labels (``Finding.count`` counts the repeats).
"""

from __future__ import annotations

import bisect
import re
import hashlib
import heapq
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from flashsim.attention.ws_plan import KV_STAGES, Q_STAGES, KVLayout, cta_plan, load_diffs, occupancy
from flashsim.errors import bad_argument, location
from flashsim.sass.asyncstate import ASYNC_DELAY
from flashsim.sass.machine import BarrierDeadlock, ExecOptions, StepBudgetExceeded
from flashsim.sass.schedules import describe, explore, same_bits, schedule_options
from flashsim.smem import mbarrier as mb

__all__ = ["BANNER", "BARRIERS", "MUTANTS", "PROBLEMS", "ROLES", "Finding", "ModelRun", "Mutant", "Problem",
           "Sm100Config", "WorkTile", "explore_model", "format_exploration", "format_findings", "format_loads",
           "format_tmem_plan",
           "format_tmem_steps", "judge", "launch", "load_occupancy", "run_model", "work_tiles"]

BANNER = ("protocol model of seed 004's sm100 FlashAttention-4 forward kernel (flash_fwd_sm100.py at e724e258): "
          "NOT verified on hardware (no sm100 GPU available); the kernel verified on hardware is the sm_90 one, "
          "gpu/kernels/fa4h.cu")

M_BLOCK = 128
N_BLOCK = 128
ESIZE = 2  # bytes per element: 16-bit Q, K, V, O
TMEM_COLUMNS = 512  # SM100_TMEM_CAPACITY_COLUMNS
TMA_BOX = 16384  # bytes a TMA box brings: 128 rows x 64 16-bit columns
P_CHUNK = 16  # TMEM columns per tcgen05.st of P (St32x32b, repetition 16)
K_STEP = 16  # k of one tcgen05.mma kind::f16
SMEM_ALIGN = 1024  # buffer_align_bytes (AMBIGUOUS in the article, "1024b = 128B": upstream aligns to 1024 bytes)

#: the seed's warp roles: name -> (warps, what the role does); "empty" has no protocol step
ROLE_WARPS = {"softmax0": (0, 1, 2, 3), "softmax1": (4, 5, 6, 7), "correction": (8, 9, 10, 11), "mma": (12,),
              "load": (13,), "epilogue": (14,), "empty": (15,)}
#: the roles with protocol steps and their warps, for flashsim.sass.schedules.explore / adversarial
ROLES = {name: list(w) for name, w in ROLE_WARPS.items() if name != "empty"}
_AGENTS = tuple(ROLES)  # the program agents, by lowest warp: the default schedule's order
_TC = len(_AGENTS)  # the tensor core's column in the vector clocks

#: the mbarriers (upstream's layout, index order): name, how many, init count (AMBIGUOUS in the article, "15 * 8B":
#: upstream e724e258 has these 35)
BARRIERS = (("q_full", 2, 1), ("q_empty", 2, 1), ("kv_full", 3, 1), ("kv_empty", 3, 1),
            ("P_full_O_rescaled", 2, 256), ("S_full", 2, 1), ("O_full", 2, 1), ("softmax_corr_full", 2, 128),
            ("softmax_corr_empty", 2, 128), ("corr_epi_full", 2, 128), ("corr_epi_empty", 2, 32),
            ("s0_s1_sequence", 8, 32), ("tmem_dealloc", 1, 384), ("P_full_2", 2, 128))
_BAR_FIRST: dict[str, int] = {}
_BAR_NAMES: list[str] = []
_BAR_COUNTS: list[int] = []
for _name, _n, _count in BARRIERS:
    _BAR_FIRST[_name] = len(_BAR_NAMES)
    _BAR_NAMES.extend(f"{_name}[{i}]" if _n > 1 else _name for i in range(_n))
    _BAR_COUNTS.extend([_count] * _n)


def _bar(name: str, i: int = 0) -> int:
    return _BAR_FIRST[name] + i


# ------------------------------------------------------------------------------------------------ mbarrier words
# flashsim.smem.mbarrier works on uint64 arrays; the model's words are Python ints, the results cached (a
# protocol revisits the same few states)

@lru_cache(maxsize=1 << 16)
def _init(count: int) -> int:
    return int(mb.init_word(count))


@lru_cache(maxsize=1 << 16)
def _arrive(word: int, count: int, tx: int) -> tuple[int, bool, int]:
    new, done, misuse = mb.arrive(np.uint64(word), count, tx)
    return int(new), bool(done), int(misuse)


@lru_cache(maxsize=1 << 16)
def _complete_tx(word: int, nbytes: int) -> tuple[int, bool, int]:
    new, done, misuse = mb.complete_tx(np.uint64(word), nbytes)
    return int(new), bool(done), int(misuse)


@lru_cache(maxsize=1 << 16)
def _phase_done(word: int, parity: int) -> bool:
    return bool(mb.phase_done(np.uint64(word), parity))


def _parity(word: int) -> int:
    return int(mb.fields(np.uint64(word))["phase"])


# ------------------------------------------------------------------------------------------------ configuration

@dataclass(frozen=True)
class Sm100Config:
    """One CTA of the seed's kernel: head dims (192 / 128 or 128 / 128), whether the s0/s1 ordering barrier is
    on (False in e724e258), and the scheduling (None: the seed's choice, see :attr:`is_persistent`)."""

    hdim_qk: int = 192
    hdim_v: int = 128
    # AMBIGUOUS in the article (it quotes the barrier's code): e724e258 hard-codes s0_s1_barrier = False
    s0_s1_barrier: bool = False
    persistent: bool | None = None

    def __post_init__(self):
        if (self.hdim_qk, self.hdim_v) not in ((192, 128), (128, 128)):
            raise bad_argument("hdim_qk", (self.hdim_qk, self.hdim_v),
                               "the sm100 protocol model takes head dims (qk, v) = (192, 128) or (128, 128)")
        if self.persistent not in (None, True, False):
            raise bad_argument("persistent", self.persistent, "expected None (the seed's choice), True or False")
        if self.tmem_total > TMEM_COLUMNS:  # upstream asserts tmem_total <= SM100_TMEM_CAPACITY_COLUMNS
            raise bad_argument("hdim_v", self.hdim_v, f"TMEM needs {self.tmem_total} columns of {TMEM_COLUMNS}")

    @property
    def layout(self) -> KVLayout:
        return KVLayout(self.hdim_qk, self.hdim_v, N_BLOCK, ESIZE)

    @property
    def uneven(self) -> bool:
        """uneven_kv_smem: qk 192 / v 128 (with the three K/V stages)."""
        return self.layout.uneven

    @property
    def overlap_sO_sQ(self) -> bool:
        """sO lives in sQ's bytes (upstream: hdim 192 and hdim_v >= 64, or split-KV, not modelled)."""
        return self.hdim_qk == 192 and self.hdim_v >= 64

    def is_persistent(self, causal: bool = False) -> bool:
        """Whether one CTA walks several work tiles: the seed's StaticPersistentTileScheduler, off with sO
        overlapping sQ and for causal (the single-tile LPT scheduler); or ``persistent`` when given."""
        if self.persistent is not None:
            return self.persistent
        return not self.overlap_sO_sQ and not causal

    @property
    def q_bytes(self) -> int:
        return M_BLOCK * self.hdim_qk * ESIZE

    @property
    def o_bytes(self) -> int:
        return M_BLOCK * self.hdim_v * ESIZE

    # shared memory, upstream's SharedStorage in order: mbarriers, tmem_holding_buf, sScale, sO, sQ, sK
    @property
    def smem(self) -> dict[str, tuple[int, int]]:
        """name -> (start, size) in bytes."""
        # AMBIGUOUS in the article: sScale is 2 * 128 * 2 fp32 = 2048 bytes (not 512); sO has size 0 because it
        # aliases sQ (overlap_sO_sQ), not because O lives in TMEM
        out, at = {}, 0
        for name, size, align in (("mbar", 8 * len(_BAR_NAMES), 8), ("tmem_holding_buf", 4, 4),
                                  ("sScale", 4 * Q_STAGES * M_BLOCK * 2, 4),
                                  ("sO", 0 if self.overlap_sO_sQ else 2 * self.o_bytes, SMEM_ALIGN),
                                  ("sQ", Q_STAGES * max(self.q_bytes, self.o_bytes) if self.overlap_sO_sQ
                                   else Q_STAGES * self.q_bytes, SMEM_ALIGN),
                                  ("sK", self.layout.total_bytes, SMEM_ALIGN)):
            at = -(-at // align) * align
            out[name] = (at, size)
            at += size
        return out

    @property
    def smem_bytes(self) -> int:
        start, size = self.smem["sK"]
        return start + size

    # TMEM columns (fp32, 128 lanes each): S0, S1, then O0, O1; P_i in the upper half of S_i
    @property
    def tmem_s(self) -> tuple[int, int]:
        return (0, N_BLOCK)

    @property
    def tmem_o(self) -> tuple[int, int]:
        return tuple(self.tmem_s[-1] + N_BLOCK + i * self.hdim_v for i in range(2))

    @property
    def tmem_p(self) -> tuple[int, int]:
        # tmem_s_to_p_offset = n_block / 2: 64 and 192 (AMBIGUOUS in the article, whose comment says "0, 128"; its
        # formula and upstream give 64, 192)
        return tuple(s + N_BLOCK // 2 for s in self.tmem_s)

    @property
    def p_columns(self) -> int:
        """TMEM columns of P: 128 16-bit values per row, two per 32-bit column."""
        return N_BLOCK * ESIZE // 4

    @property
    def tmem_total(self) -> int:
        return self.tmem_o[-1] + self.hdim_v

    def describe(self) -> str:
        return (f"head dims qk {self.hdim_qk} / v {self.hdim_v}: "
                + ("uneven K/V stages, sO overlapping sQ" if self.uneven else "even K/V stages, sO of its own")
                + (", s0/s1 ordering barrier on" if self.s0_s1_barrier else ""))


@dataclass(frozen=True)
class WorkTile:
    """One work tile: 256 query rows (Q tiles 2 m + 0 and 2 m + 1) of a head and batch, KV blocks
    n_block_min .. n_block_max - 1 (walked right to left)."""

    index: int
    m_block: int
    head: int
    batch: int
    n_block_min: int
    n_block_max: int

    @property
    def n(self) -> int:
        return max(self.n_block_max - self.n_block_min, 0)

    def __str__(self):
        return (f"tile {self.index} (m_block {self.m_block}, head {self.head}, batch {self.batch}, "
                f"{self.n} KV block{'s' if self.n != 1 else ''})")


def work_tiles(seqlen_q: int, seqlen_k: int, heads: int = 1, batch: int = 1, causal: bool = False) -> list[WorkTile]:
    """The work tiles in the scheduler's order: m-blocks of 256 rows fastest, then heads, then batches; causal
    (bottom-right aligned, upstream's get_n_block_min_max with tile_m 256) walks each head's m-blocks longest
    first (the LPT scheduler)."""
    for name, v in (("seqlen_q", seqlen_q), ("seqlen_k", seqlen_k), ("heads", heads), ("batch", batch)):
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
            raise bad_argument(name, v, "expected a positive int")
    tile_m = Q_STAGES * M_BLOCK  # a CTA takes two 128-row Q tiles (AMBIGUOUS in the article, "one m_block (128)")
    m_blocks = -(-seqlen_q // tile_m)
    out = []
    for b in range(batch):
        for h in range(heads):
            order = range(m_blocks - 1, -1, -1) if causal else range(m_blocks)
            for m in order:
                hi = -(-seqlen_k // N_BLOCK)
                if causal:
                    hi = min(hi, -(-((m + 1) * tile_m + seqlen_k - seqlen_q) // N_BLOCK))
                out.append(WorkTile(len(out), m, h, b, 0, hi))
    return out


@dataclass(frozen=True)
class Problem:
    """An attention problem the model runs: its configuration and work tiles."""

    name: str
    hdim_qk: int
    seqlen_q: int
    seqlen_k: int
    heads: int = 1
    batch: int = 1
    causal: bool = False
    persistent: bool | None = None
    s0_s1_barrier: bool = False

    @property
    def config(self) -> Sm100Config:
        return Sm100Config(self.hdim_qk, 128, self.s0_s1_barrier, self.persistent)

    @property
    def tiles(self) -> list[WorkTile]:
        return work_tiles(self.seqlen_q, self.seqlen_k, self.heads, self.batch, self.causal)

    def ctas(self) -> list[list[WorkTile]]:
        """The work tiles of each CTA: one CTA walking them all when persistent, else one per CTA."""
        tiles = self.tiles
        return [tiles] if self.config.is_persistent(self.causal) else [[t] for t in tiles]

    def describe(self) -> str:
        ctas = self.ctas()
        return (f"qk {self.hdim_qk} / v 128, seqlen_q {self.seqlen_q}, seqlen_k {self.seqlen_k}, {self.heads} "
                f"head(s), batch {self.batch}{', causal' if self.causal else ''}: {len(self.tiles)} work tile(s) "
                f"with KV blocks {[t.n for t in self.tiles]}, "
                + ("one persistent CTA" if len(ctas) == 1 and len(self.tiles) > 1 else f"{len(ctas)} CTA(s)"))


#: the configurations :func:`main` and the tests explore (uneven: the seed's own case; the causal ones have work
#: tiles with different block counts, one block and none)
PROBLEMS = {
    "uneven_causal": Problem("uneven_causal", 192, 512, 512, causal=True),
    "uneven_one_block": Problem("uneven_one_block", 192, 256, 128),
    "even_persistent": Problem("even_persistent", 128, 768, 384),
    "even_causal_persistent": Problem("even_causal_persistent", 128, 768, 384, heads=2, causal=True,
                                      persistent=True),
    "even_s0_s1": Problem("even_s0_s1", 128, 512, 384, s0_s1_barrier=True),
}


# ------------------------------------------------------------------------------------------------ regions

@dataclass(frozen=True)
class Region:
    """SMEM bytes [lo, hi) (absolute, in the CTA's shared memory) or TMEM columns [lo, hi) x lanes 0..127."""

    space: str  # "smem" or "tmem"
    lo: int
    hi: int
    name: str

    def __str__(self):
        if self.space == "smem":
            return f"{self.name} (smem {self.lo:#07x}..{self.hi:#07x})"
        return f"{self.name} (TMEM cols {self.lo}..{self.hi - 1} x lanes 0..127)"

    def span(self, lo: int, hi: int) -> str:
        """The part [lo, hi) of this region, in words."""
        if self.space == "smem":
            return f"smem {lo:#07x}..{hi:#07x} ({self.name})"
        return f"TMEM cols {lo}..{hi - 1} x lanes 0..127 ({self.name})"


# ------------------------------------------------------------------------------------------------ happens-before

class _VC:
    """A vector clock: one column per role and for the tensor core (sequential agents), one bit per asynchronous
    TMA box, TMA store and tcgen05.st (they complete out of order, so a later one does not cover an earlier
    one, which one column per issuer, as flashsim.smem.clocks numbers its bulk copies, would imply)."""

    __slots__ = ("c", "ops")

    def __init__(self, c=None, ops: int = 0):
        self.c = [0] * (_TC + 1) if c is None else c
        self.ops = ops

    def copy(self) -> "_VC":
        return _VC(self.c[:], self.ops)

    def join(self, other: "_VC | None") -> None:
        if other is not None:
            self.c = [a if a >= b else b for a, b in zip(self.c, other.c)]
            self.ops |= other.ops


def _hb(rec, vc: _VC) -> bool:
    """Is the access ``rec`` ordered before an access with clock ``vc``?"""
    i = rec[0]
    return vc.c[i] >= rec[1] if i >= 0 else bool((vc.ops >> rec[1]) & 1)


class _Shadow:
    """One memory space's cells (split at every region boundary met): per cell [last write, reads since, tag]."""

    def __init__(self, hi: int):
        self.bounds = [0, hi]
        self.cells = [[None, [], None]]

    def _cut(self, x: int) -> None:
        i = bisect.bisect_left(self.bounds, x)
        if i < len(self.bounds) and self.bounds[i] == x:
            return
        old = self.cells[i - 1]
        self.bounds.insert(i, x)
        self.cells.insert(i, [old[0], old[1][:], old[2]])

    def span(self, lo: int, hi: int) -> range:
        self._cut(lo)
        self._cut(hi)
        return range(bisect.bisect_left(self.bounds, lo), bisect.bisect_left(self.bounds, hi))


# ------------------------------------------------------------------------------------------------ results

@dataclass
class Finding:
    """What a run found: ``kind`` deadlock, hazard, stale or misuse; ``sub`` RAW / WAR / WAW / RAW (no
    fence.proxy.async) for hazards; ``place`` the region or barrier; ``text`` the whole report."""

    kind: str
    sub: str
    place: str
    text: str
    step: int
    cta: int
    count: int = 1

    def __str__(self):
        return self.text + (f" [{self.count} times]" if self.count > 1 else "")


@dataclass
class ModelRun:
    """One run of the model: per CTA its work tiles, the findings, the load warp's loads (:func:`format_loads`),
    the step trace (step, cta, role, op, barrier, phase: the parity of a wait or the barrier's
    phase an arrival counts toward, region, step label, (tile, block), tag written) and the digest of the outcome
    (the multiset of (reader, step, tags read), the barriers' final words and the memories' final tags: equal
    across schedules when the protocol is race-free)."""

    config: Sm100Config
    ctas: list[list[WorkTile]]
    mutant: int
    schedule: object
    findings: list[Finding] = field(default_factory=list)
    loads: list[dict] = field(default_factory=list)
    trace: list[tuple] = field(default_factory=list)
    steps: int = 0
    digest: bytes = b""

    @property
    def outcome(self) -> np.ndarray:
        """The digest as bytes, for flashsim.sass.schedules.same_bits."""
        return np.frombuffer(self.digest, np.uint8)

    def kinds(self) -> list[str]:
        return sorted({f.kind for f in self.findings})

    @property
    def clean(self) -> bool:
        return not self.findings


# ------------------------------------------------------------------------------------------------ ops

class _Op:
    """One protocol step of a role program."""

    __slots__ = ("kind", "label", "bar", "parity", "count", "tx", "region", "tag", "expect", "reads", "writes",
                 "n", "at", "info")

    def __init__(self, kind, label, at, *, bar=-1, parity=0, count=0, tx=0, region=None, tag=None, expect=None,
                 reads=(), writes=(), n=0, info=None):
        self.kind, self.label, self.at = kind, label, at
        self.bar, self.parity, self.count, self.tx = bar, parity, count, tx
        self.region, self.tag, self.expect = region, tag, expect
        self.reads, self.writes, self.n, self.info = reads, writes, n, info


def _tag_q(s, t):
    return f"Q{s} tile {t}"


def _tag_kv(kv, b, t):
    return f"{kv}[n={b}] tile {t}"


def _tag_s(s, b, t):
    return f"S{s}[n={b}] tile {t}"


def _tag_p(s, b, t):
    return f"P{s}[n={b}] tile {t}"


def _tag_o(s, b, t, part=""):
    """O_s accumulated over KV blocks n_block_max - 1 down to ``b``."""
    return f"O{s}[n>={b}] tile {t}{part}"


# ------------------------------------------------------------------------------------------------ the programs

class _Programs:
    """The role programs of one CTA over its work tiles (upstream e724e258's load / mma / softmax_loop /
    correction_loop / epilogue_s2g), with the planted bug ``bug`` ('' for none)."""

    def __init__(self, cfg: Sm100Config, tiles: list[WorkTile], bug: str):
        self.cfg, self.tiles, self.bug = cfg, tiles, bug
        smem = cfg.smem
        self.sq = smem["sQ"][0]
        self.sk = smem["sK"][0]
        self.so = smem["sQ"][0] if cfg.overlap_sO_sQ else smem["sO"][0]
        self.sscale = smem["sScale"][0]
        self.ksteps = N_BLOCK // K_STEP  # k-steps of P.V (K = n_block)
        self.split = self.ksteps // 4 * 3  # issued before the P_full_2 wait: the "3/4 early P start"

    # regions -----------------------------------------------------------------------------------------
    def q_region(self, s: int) -> Region:
        qb = self.cfg.q_bytes
        return Region("smem", self.sq + s * qb, self.sq + (s + 1) * qb, f"sQ stage {s}")

    def kv_region(self, stage: int, parity: int, is_k: bool, sign: int = 1) -> Region:
        lo, hi = self.cfg.layout.region(stage, parity, is_k, sign)
        return Region("smem", self.sk + lo, self.sk + hi, f"sK stage {stage} bytes {lo}..{hi}")

    def o_smem(self, s: int) -> Region:
        ob = self.cfg.o_bytes
        where = "sO stage {} (in sQ's bytes)" if self.cfg.overlap_sO_sQ else "sO stage {}"
        return Region("smem", self.so + s * ob, self.so + (s + 1) * ob, where.format(s))

    def scale(self, s: int, slot: int) -> Region:
        """sScale[tid + 128 s] (slot 0: acc_scale / row_sum) or [tid + 128 s + 256] (slot 1: row_max)."""
        lo = self.sscale + 4 * (s * M_BLOCK + slot * Q_STAGES * M_BLOCK)
        return Region("smem", lo, lo + 4 * M_BLOCK, f"sScale[{s}] {'row_max' if slot else 'acc_scale/row_sum'}")

    def tmem_s(self, s: int) -> Region:
        c = self.cfg.tmem_s[s]
        return Region("tmem", c, c + N_BLOCK, f"S{s}")

    def tmem_p(self, s: int, lo: int, hi: int) -> Region:
        c = self.cfg.tmem_p[s]
        return Region("tmem", c + lo, c + hi, f"P{s} cols {lo}..{hi - 1}")

    def tmem_o(self, s: int) -> Region:
        c = self.cfg.tmem_o[s]
        return Region("tmem", c, c + self.cfg.hdim_v, f"O{s}")

    # op builders --------------------------------------------------------------------------------------
    @staticmethod
    def wait(name, i, parity, label, at):
        return _Op("wait", label, at, bar=_bar(name, i), parity=parity & 1)

    @staticmethod
    def arrive(name, i, count, label, at, tx=0):
        return _Op("arrive", label, at, bar=_bar(name, i), count=count, tx=tx)

    @staticmethod
    def commit(name, i, label, at):
        return _Op("commit", label, at, bar=_bar(name, i))

    # load warp ---------------------------------------------------------------------------------------
    def load(self):
        """Per work tile: Q0, K of block n_block_max - 1, Q1, V of it, then K, V of each block leftwards."""
        q_phase = 1  # the producer's phases start at 1: the first waits on empty barriers pass at once
        j = 0  # K/V loads so far: stage j % 3, round j // 3
        for t in self.tiles:
            # AMBIGUOUS in the article (its load code has no guard, its MMA code has one): in e724e258 every role
            # skips a tile without work
            if t.n == 0 and self.bug != "load_zero_work":
                continue
            first = t.n_block_max - 1
            yield from self.load_q(t, 0, q_phase)
            yield from self.load_kv(t, True, first, j, 0)
            j += 1
            yield from self.load_q(t, 1, q_phase)
            if self.bug != "q_phase_stuck":
                q_phase ^= 1
            yield from self.load_kv(t, False, first, j, 0)
            j += 1
            for i in range(t.n_block_max - 1 - t.n_block_min):
                b = t.n_block_max - 2 - i
                yield from self.load_kv(t, True, b, j, i + 1)
                j += 1
                yield from self.load_kv(t, False, b, j, i + 1)
                j += 1

    def load_q(self, t: WorkTile, s: int, phase: int):
        at = (t.index, None)
        yield self.wait("q_empty", s, phase, f"wait q_empty[{s}] before loading Q{s}", at)
        yield self.arrive("q_full", s, 1, f"arrive.expect_tx q_full[{s}] {self.cfg.q_bytes} B (Q{s})", at,
                          tx=self.cfg.q_bytes)
        yield _Op("tma_load", f"TMA load Q{s} into sQ stage {s}", at, bar=_bar("q_full", s),
                  region=self.q_region(s), tag=_tag_q(s, t.index),
                  info={"tile": t, "name": f"Q{s}", "buffer": "q", "stage": s, "pair": s, "phase": phase})

    def load_kv(self, t: WorkTile, is_k: bool, b: int, j: int, pair: int):
        cfg, bug = self.cfg, self.bug
        kv = "K" if is_k else "V"
        stage, r = j % KV_STAGES, j // KV_STAGES
        phase = 1 ^ (r & 1)  # the producer state's phase: 1 in round 0
        at = (t.index, b)
        yield self.wait("kv_empty", stage, phase, f"wait kv_empty[{stage}] before loading {kv}[n={b}]", at)
        if is_k and cfg.uneven and stage == 0 and bug != "no_extra_wait":
            # stage 0 last held V (small); K (large) also covers the bytes stage 1 held in the round before
            yield self.wait("kv_empty", 1, phase ^ (bug == "extra_wait_parity"),
                            f"extra wait kv_empty[1] before loading K[n={b}] into stage 0", at)
        nbytes = cfg.layout.k_bytes if is_k else cfg.layout.v_bytes
        if bug == "expect_k_for_v" and not is_k:
            nbytes = cfg.layout.k_bytes
        if bug == "expect_v_for_k" and is_k:
            nbytes = cfg.layout.v_bytes
        yield self.arrive("kv_full", stage, 1, f"arrive.expect_tx kv_full[{stage}] {nbytes} B ({kv}[n={b}])", at,
                          tx=nbytes)
        # the offset of stage 1 takes the round's parity: the producer's phase ^ 1 (it starts at 1); ws_plan's
        # KVLayout.region moves it by block_n * (qk - v) / 2 = 4096 elements = 8 KiB (AMBIGUOUS in the article,
        # "shift 32": 32 head-dim columns of 128 rows)
        parity = phase if bug == "offset_no_xor" else phase ^ 1
        region = self.kv_region(stage, parity, is_k, -1 if bug == "offset_sign" else 1)
        yield _Op("tma_load", f"TMA load {kv}[n={b}] into kv stage {stage}", at, bar=_bar("kv_full", stage),
                  region=region, tag=_tag_kv(kv, b, t.index),
                  info={"tile": t, "name": kv, "block": b, "buffer": "kv", "stage": stage, "pair": pair,
                        "phase": phase})

    # MMA warp ----------------------------------------------------------------------------------------
    def mma(self):
        """S_s = Q_s K^T and O_s += P_s V issued by one thread, asynchronous on the tensor core; releases by
        tcgen05.commit. Per tile: S0, S1 on the first K; per further block P0 V, S0, P1 V, S1; then the last
        P0 V, P1 V each committing O_full."""
        bug = self.bug
        all_cols = Region("tmem", 0, TMEM_COLUMNS, "TMEM (all 512 columns)")
        yield _Op("tmem_alloc", "tcgen05.alloc 512 columns", (None, None), region=all_cols, tag="allocated")
        q_cons, j, pfor = 0, 0, 0  # mma_q_consumer_phase, K/V consumer index, P_full_O_rescaled_phase

        def full(j, what, at):
            return self.wait("kv_full", j % KV_STAGES, (j // KV_STAGES) & 1,
                             f"wait kv_full[{j % KV_STAGES}] for {what}", at)

        for t in self.tiles:
            if t.n == 0:
                continue
            bk = t.n_block_max - 1
            for s in range(Q_STAGES):
                at = (t.index, bk)
                yield self.wait("q_full", s, q_cons, f"wait q_full[{s}] for Q{s}", at)
                if s == 0:
                    yield full(j, f"K[n={bk}]", at)
                yield from self.qk(t, s, j, bk)
            q_cons ^= 1
            if bug == "early_q_release":
                yield from self.release_q(t)
            yield self.release(j, f"K[n={bk}]", (t.index, bk))
            j += 1
            acc = False
            for i in range(t.n - 1):
                bv, bk = t.n_block_max - 1 - i, t.n_block_max - 2 - i
                at = (t.index, bv)
                yield full(j, f"V[n={bv}]", at)
                vj = j
                for s in range(Q_STAGES):
                    if s == 0 and bug == "s_before_pv":  # S0 of the next block issued before P0 V
                        j += 1
                        yield full(j, f"K[n={bk}]", (t.index, bk))
                        yield from self.qk(t, 0, j, bk)
                        yield from self.pv(t, 0, vj, bv, acc, pfor)
                        continue
                    yield from self.pv(t, s, vj, bv, acc, pfor)
                    if s == 1 - (bug == "early_v_release"):
                        yield self.release(vj, f"V[n={bv}]", at)
                    if s == 0:
                        j += 1
                        yield full(j, f"K[n={bk}]", (t.index, bk))
                    yield from self.qk(t, s, j, bk)
                    if s == 0 and bug == "early_k_release":
                        yield self.release(j, f"K[n={bk}]", (t.index, bk))
                if bug != "early_k_release":
                    yield self.release(j, f"K[n={bk}]", (t.index, bk))
                j += 1
                if bug != "pfor_phase_stuck":
                    pfor ^= 1
                acc = True
            if bug != "early_q_release":
                yield from self.release_q(t)  # after the last Q K^T: the load warp may refill sQ
            bv = t.n_block_min
            at = (t.index, bv)
            yield full(j, f"V[n={bv}]", at)
            for s in range(Q_STAGES):
                yield from self.pv(t, s, j, bv, acc, pfor)
                if bug != "no_o_full_commit":
                    yield self.commit("O_full", s, f"tcgen05.commit O_full[{s}] after the last P{s} V", at)
            if bug != "pfor_phase_stuck":
                pfor ^= 1
            yield self.release(j, f"V[n={bv}]", at)
            j += 1
        if bug != "early_dealloc":
            yield self.wait("tmem_dealloc", 0, 0, "wait tmem_dealloc (softmax and correction done)", (None, None))
        yield _Op("tmem_dealloc", "tcgen05.dealloc 512 columns", (None, None), region=all_cols, tag="deallocated")

    def release(self, j: int, what: str, at):
        """consumer_release of a K/V stage: tcgen05.commit on kv_empty (PipelineTmaUmma's consumer)."""
        stage = j % KV_STAGES
        if self.bug == "arrive_not_commit":
            return self.arrive("kv_empty", stage, 1, f"mbarrier.arrive kv_empty[{stage}] releasing {what}", at)
        return self.commit("kv_empty", stage, f"tcgen05.commit kv_empty[{stage}] releasing {what}", at)

    def release_q(self, t: WorkTile):
        for s in range(Q_STAGES):
            yield self.commit("q_empty", s, f"tcgen05.commit q_empty[{s}] releasing Q{s}", (t.index, None))

    def qk(self, t: WorkTile, s: int, j: int, b: int):
        stage, parity = j % KV_STAGES, (j // KV_STAGES) & 1
        at = (t.index, b)
        yield _Op("mma", f"S{s} = Q{s} K[n={b}]^T", at,
                  reads=((self.q_region(s), _tag_q(s, t.index)),
                         (self.kv_region(stage, parity, True), _tag_kv("K", b, t.index))),
                  writes=((self.tmem_s(s), _tag_s(s, b, t.index)),))
        yield self.commit("S_full", s, f"tcgen05.commit S_full[{s}] after S{s}", at)

    def pv(self, t: WorkTile, s: int, j: int, b: int, acc: bool, pfor: int):
        """O_s (+)= P_s V: the k-steps before the in-asm wait on P_full_2[s], the wait, the rest."""
        yield self.wait("P_full_O_rescaled", s, pfor, f"wait P_full_O_rescaled[{s}] (P{s} 3/4, O{s} rescaled)",
                        (t.index, b))
        stage, parity = j % KV_STAGES, (j // KV_STAGES) & 1
        at = (t.index, b)
        v = (self.kv_region(stage, parity, False), _tag_kv("V", b, t.index))
        cols = self.split * K_STEP * ESIZE // 4  # P columns the first k-steps read
        o_in = _tag_o(s, b + 1, t.index, "*scale") if acc else None
        head = _tag_o(s, b, t.index, f" (k-steps 0-{self.split - 1})")
        yield _Op("mma", f"O{s} {'+' if acc else ''}= P{s} V[n={b}], k-steps 0-{self.split - 1}", at,
                  reads=((self.tmem_p(s, 0, cols), _tag_p(s, b, t.index)), v)
                  + (((self.tmem_o(s), o_in),) if acc else ()),
                  writes=((self.tmem_o(s), head),))
        if self.bug != "no_p_full_2":
            yield self.wait("P_full_2", s, pfor, f"wait P_full_2[{s}] (the last quarter of P{s}) inside the P V",
                            at)
        yield _Op("mma", f"O{s} += P{s} V[n={b}], k-steps {self.split}-{self.ksteps - 1}", at,
                  reads=((self.tmem_p(s, cols, self.cfg.p_columns), _tag_p(s, b, t.index)), v,
                         (self.tmem_o(s), head)),
                  writes=((self.tmem_o(s), _tag_o(s, b, t.index)),))

    # softmax warpgroups ------------------------------------------------------------------------------
    def softmax(self, s: int):
        """softmax_loop / softmax_step of warpgroup s (one agent for its 4 warps)."""
        cfg, bug = self.cfg, self.bug
        si, corr, seq = 0, 1, 1 if s == 0 else 0  # S_full, softmax_corr_empty, s0_s1_sequence phases
        chunks = cfg.p_columns // P_CHUNK
        early = chunks // 4 * 3 if bug != "half_split" else chunks // 2  # chunks stored before the first signal
        for t in self.tiles:
            if t.n == 0:
                continue
            at = (t.index, None)
            yield self.wait("softmax_corr_empty", s, corr, f"wait softmax_corr_empty[{s}] at the tile's start", at)
            corr ^= 1
            for k in range(t.n):
                b = t.n_block_max - 1 - k
                at = (t.index, b)
                yield self.wait("S_full", s, si, f"wait S_full[{s}] for S{s}[n={b}]", at)
                yield _Op("tmem_ld", f"tcgen05.ld S{s}[n={b}]", at, region=self.tmem_s(s),
                          expect=_tag_s(s, b, t.index))
                if k:
                    yield _Op("st_shared", f"st.shared acc_scale to sScale[{s}]", at, region=self.scale(s, 0),
                              tag=f"acc_scale{s}[n={b}] tile {t.index}")
                yield self.arrive("softmax_corr_full", s, M_BLOCK, f"arrive softmax_corr_full[{s}] (row max)", at)
                if cfg.s0_s1_barrier:
                    for w in range(4):
                        yield self.wait("s0_s1_sequence", w + 4 * s, seq,
                                        f"wait s0_s1_sequence[{w + 4 * s}] before exp2 (warp_idx_in_wg {w})", at)
                    if not (bug == "s0s1_skip_arrive" and s == 1):
                        for w in range(4):
                            yield self.arrive("s0_s1_sequence", w + 4 * (1 - s), 32,
                                              f"arrive s0_s1_sequence[{w + 4 * (1 - s)}] after exp2", at)
                for c in range(chunks):
                    if c == early:
                        yield from self.p_signal(s, "P_full_O_rescaled", "the first 3/4 of P", at,
                                                 fence=bug != "no_wait_st")
                    yield _Op("tmem_st", f"tcgen05.st P{s}[n={b}] chunk {c}", at,
                              region=self.tmem_p(s, c * P_CHUNK, (c + 1) * P_CHUNK), tag=_tag_p(s, b, t.index))
                yield from self.p_signal(s, "P_full_2", "the last quarter of P", at)
                yield self.wait("softmax_corr_empty", s, corr, f"wait softmax_corr_empty[{s}] before the row sum",
                                at)
                si ^= 1
                corr ^= 1
                seq ^= 1
            at = (t.index, None)
            yield _Op("st_shared", f"st.shared row_sum to sScale[{s}]", at, region=self.scale(s, 0),
                      tag=f"row_sum{s} tile {t.index}")
            yield _Op("st_shared", f"st.shared row_max to sScale[{s}] + 256", at, region=self.scale(s, 1),
                      tag=f"row_max{s} tile {t.index}")
            yield self.arrive("softmax_corr_full", s, M_BLOCK, f"arrive softmax_corr_full[{s}] (row sum)", at)
        yield self.arrive("tmem_dealloc", 0, M_BLOCK, "arrive tmem_dealloc", (None, None))

    def p_signal(self, s: int, name: str, what: str, at, fence: bool = True):
        if fence:
            yield _Op("wait_st", "tcgen05.wait::st (fence_view_async_tmem_store)", at)
        yield self.arrive(name, s, M_BLOCK, f"arrive {name}[{s}] ({what} stored)", at)

    # correction warpgroup ----------------------------------------------------------------------------
    def correction(self):
        """correction_loop: rescale O_s after each softmax step, then O_s / row_sum into sO[s]."""
        bug = self.bug
        if bug != "no_initial_pfor":  # the first P V needs no correction
            for s in range(Q_STAGES):
                yield self.arrive("P_full_O_rescaled", s, M_BLOCK, f"arrive P_full_O_rescaled[{s}] at the start",
                                  (None, None))
        c, o, epi = 0, 0, 1  # softmax_corr_consumer, o_corr_consumer, corr_epi_producer phases
        for t in self.tiles:
            if t.n == 0:
                continue
            at = (t.index, t.n_block_max - 1)
            yield self.wait("softmax_corr_full", 0, c, "wait softmax_corr_full[0] (step 0: no rescale)", at)
            yield self.arrive("softmax_corr_empty", 0, M_BLOCK, "arrive softmax_corr_empty[0]", at)
            yield self.wait("softmax_corr_full", 1, c, "wait softmax_corr_full[1] (step 0: no rescale)", at)
            c ^= 1
            for i in range(t.n - 1):
                b = t.n_block_max - 2 - i  # the softmax step's block; O_s holds P V down to b + 1
                at = (t.index, b)
                for s in range(Q_STAGES):
                    yield self.wait("softmax_corr_full", s, c, f"wait softmax_corr_full[{s}] (acc_scale)", at)
                    yield _Op("ld_shared", f"ld.shared acc_scale from sScale[{s}]", at, region=self.scale(s, 0),
                              expect=f"acc_scale{s}[n={b}] tile {t.index}")
                    # always rescaled here (upstream skips it when no row's scale is < 1: a subset of accesses)
                    yield _Op("tmem_ld", f"tcgen05.ld O{s} to rescale", at, region=self.tmem_o(s),
                              expect=_tag_o(s, b + 1, t.index))
                    yield _Op("tmem_st", f"tcgen05.st O{s} rescaled", at, region=self.tmem_o(s),
                              tag=_tag_o(s, b + 1, t.index, "*scale"))
                    yield _Op("wait_st", "tcgen05.wait::st after the rescale", at)
                    yield self.arrive("P_full_O_rescaled", s, M_BLOCK, f"arrive P_full_O_rescaled[{s}] (O{s} "
                                      "rescaled)", at)
                    yield self.arrive("softmax_corr_empty", 1 - s, M_BLOCK, f"arrive softmax_corr_empty[{1 - s}]",
                                      at)
                c ^= 1
            at = (t.index, t.n_block_min)
            yield self.arrive("softmax_corr_empty", 1, M_BLOCK, "arrive softmax_corr_empty[1] after the loop", at)
            for s in range(Q_STAGES):
                yield self.wait("softmax_corr_full", s, c, f"wait softmax_corr_full[{s}] (row sum)", at)
                yield _Op("ld_shared", f"ld.shared row_sum from sScale[{s}]", at, region=self.scale(s, 0),
                          expect=f"row_sum{s} tile {t.index}")
                yield _Op("ld_shared", f"ld.shared row_max from sScale[{s}] + 256", at, region=self.scale(s, 1),
                          expect=f"row_max{s} tile {t.index}")
                yield self.arrive("softmax_corr_empty", s, M_BLOCK, f"arrive softmax_corr_empty[{s}]", at)
                if bug != "no_o_full_wait":
                    yield self.wait("O_full", s, o, f"wait O_full[{s}] (the last P{s} V done)", at)
                yield self.wait("corr_epi_empty", s, epi, f"wait corr_epi_empty[{s}] (sO[{s}] free)", at)
                yield _Op("tmem_ld", f"tcgen05.ld O{s} (final)", at, region=self.tmem_o(s),
                          expect=_tag_o(s, t.n_block_min, t.index))
                yield _Op("st_shared", f"st.shared O{s} / row_sum to sO[{s}]", at, region=self.o_smem(s),
                          tag=f"O{s} tile {t.index}")
                if bug != "no_proxy_fence":
                    yield _Op("fence_proxy", "fence.proxy.async.shared::cta", at)
                yield self.arrive("corr_epi_full", s, M_BLOCK, f"arrive corr_epi_full[{s}] (sO[{s}] written)", at)
                yield self.arrive("P_full_O_rescaled", s, M_BLOCK, f"arrive P_full_O_rescaled[{s}] (O{s} read: the "
                                  "next tile may overwrite it)", at)
            o ^= 1
            c ^= 1
            epi ^= 1
        yield self.arrive("tmem_dealloc", 0, M_BLOCK, "arrive tmem_dealloc", (None, None))

    # epilogue warp -----------------------------------------------------------------------------------
    def epilogue(self):
        """epilogue_s2g, TMA path: store sO[0], sO[1] in two bulk groups, release each once read."""
        phase = 0
        for t in self.tiles:
            if t.n == 0:
                continue
            at = (t.index, None)
            for s in range(Q_STAGES):
                yield self.wait("corr_epi_full", s, phase, f"wait corr_epi_full[{s}] (sO[{s}] written)", at)
                yield _Op("tma_store", f"TMA store sO[{s}] to O", at, region=self.o_smem(s),
                          expect=f"O{s} tile {t.index}")
                yield _Op("commit_group", "cp.async.bulk.commit_group", at)
            for s in range(Q_STAGES):
                if self.bug != "no_wait_group":
                    yield _Op("wait_group", f"cp.async.bulk.wait_group.read {1 - s}", at, n=1 - s)
                yield self.arrive("corr_epi_empty", s, 32, f"arrive corr_epi_empty[{s}] (sO[{s}] read)", at)
            phase ^= 1


# ------------------------------------------------------------------------------------------------ the engine

class _Agent:
    __slots__ = ("name", "idx", "warps", "gen", "op", "line", "vc", "done", "waited", "first", "delayed",
                 "st_open", "st_done", "groups", "open_group", "fences", "passed")

    def __init__(self, name, idx, gen):
        self.name, self.idx, self.warps, self.gen = name, idx, ROLE_WARPS[name], gen
        self.op, self.line, self.done, self.waited = None, 0, False, 0
        self.vc = _VC()
        self.vc.c[idx] = 1
        self.first = self.delayed = False
        self.st_open, self.st_done = set(), 0  # tcgen05.st in flight (bits), landed and not yet waited (bits)
        self.groups, self.open_group = [], []  # bulk groups of TMA stores: lists of [bit, landed]
        self.fences = []  # own clock values of its fence.proxy.async
        self.passed = []  # waits passed since the last TMA load (the load warp's table)

    @property
    def who(self) -> str:
        w = self.warps
        return f"{self.name} (warps={w[0]}-{w[-1]})" if len(w) > 1 else f"{self.name} ({location(warp=w[0])})"

    def advance(self) -> None:
        try:
            self.op = next(self.gen)
        except StopIteration:
            self.op, self.done = None, True
            return
        g = self.gen
        while g.gi_yieldfrom is not None and hasattr(g.gi_yieldfrom, "gi_frame"):
            g = g.gi_yieldfrom
        self.line = g.gi_frame.f_lineno if g.gi_frame is not None else 0


class _Async:
    """An asynchronous operation in flight."""

    __slots__ = ("kind", "due", "seq", "agent", "bit", "vc", "op", "region", "tag", "bar", "nbytes", "slot",
                 "step")

    def __init__(self, kind, due, seq, agent, op, step):
        self.kind, self.due, self.seq, self.agent, self.op, self.step = kind, due, seq, agent, op, step
        self.bit, self.vc, self.region, self.tag, self.bar, self.nbytes, self.slot = -1, None, None, None, -1, 0, None

    def __lt__(self, other):
        return (self.due, self.seq) < (other.due, other.seq)


_MUTANT_KEYS: dict[int, str] = {}  # filled from MUTANTS below


class _Cta:
    """One CTA's run of the model."""

    def __init__(self, run: ModelRun, cta: int, tiles: list[WorkTile], options: ExecOptions, rngs, bug: str,
                 trace: bool, reads: Counter):
        self.run, self.cta, self.tiles, self.options, self.bug = run, cta, tiles, options, bug
        self.rng, self.delay_rng = rngs
        self.trace_on, self.reads = trace, reads
        cfg = run.config
        self.words = [_init(c) for c in _BAR_COUNTS]
        self.phases = [0] * len(_BAR_NAMES)
        self.pending: list[_VC | None] = [None] * len(_BAR_NAMES)
        self.done_vc: list[list] = [[None, None] for _ in _BAR_NAMES]
        self.smem = _Shadow(cfg.smem_bytes)
        self.tmem = _Shadow(TMEM_COLUMNS)
        self.step = 0
        self.seq = 0
        self.bits = 0
        self.heap: list[_Async] = []
        self.tc: deque[_Async] = deque()
        self.tc_due = 0
        self.tc_vc = _VC()
        self.seen: dict[tuple, Finding] = {}
        self.last_tx: dict[int, int] = {}  # per barrier: the bytes of its latest expect_tx (the load table)
        progs = _Programs(cfg, tiles, bug)
        gens = {"softmax0": progs.softmax(0), "softmax1": progs.softmax(1), "correction": progs.correction(),
                "mma": progs.mma(), "load": progs.load(), "epilogue": progs.epilogue()}
        self.agents = [_Agent(name, i, gens[name]) for i, name in enumerate(_AGENTS)]
        pol = options.schedule_policy
        for a in self.agents:
            if pol is not None:
                a.first = any(w in pol.first for w in a.warps)
                a.delayed = any(w in pol.delay for w in a.warps)
            a.advance()

    # ---------------------------------------------------------------------------------------------- loop
    def go(self) -> None:
        pol = self.options.schedule_policy
        budget = self.options.max_steps
        while True:
            runnable = [a for a in self.agents if not a.done and self.ready(a)]
            if not runnable:
                if self.heap or self.tc:
                    self.land(None)  # nothing else can run: every operation in flight completes
                    continue
                if all(a.done for a in self.agents):
                    return
                self.deadlock()
            pick = runnable
            if pol is not None:
                fav = [a for a in pick if a.first]
                if fav:
                    pick = fav
                if pol.delay_steps and self.step < pol.delay_steps:
                    free = [a for a in pick if not a.delayed]
                    if free:
                        pick = free
            worst = max(runnable, key=lambda a: a.waited)
            if worst.waited > self.options.starve_steps:
                agent = worst  # forward progress: a role passed over this long runs next
            elif self.rng is None:
                agent = pick[0]  # the lowest warp index
            else:
                agent = pick[int(self.rng.integers(len(pick)))]
            for a in runnable:
                a.waited += 1
            agent.waited = 0
            self.step += 1
            if self.step > budget:
                raise StepBudgetExceeded(f"the sm100 protocol model ran more than {budget} scheduling steps "
                                         f"({location(cta=self.cta)})")
            self.land(self.step)
            if self.ready(agent):  # (a completion may have moved a wait's phase on twice; then it waits again)
                self.execute(agent)

    def ready(self, a: _Agent) -> bool:
        op = a.op
        k = op.kind
        if k == "wait":
            return _phase_done(self.words[op.bar], op.parity)
        if k == "wait_st":
            return not a.st_open
        if k == "wait_group":
            return all(landed for g in a.groups[:max(len(a.groups) - op.n, 0)] for _, landed in g)
        return True

    def delay(self) -> int:
        pol = self.options.schedule_policy
        if pol is not None and pol.copy_delay is not None:
            return pol.copy_delay
        if self.delay_rng is None:
            return ASYNC_DELAY
        return int(self.delay_rng.integers(0, 4 * ASYNC_DELAY + 1))

    def new_async(self, kind, agent: _Agent, op: _Op, due: int) -> _Async:
        self.seq += 1
        return _Async(kind, due, self.seq, agent, op, self.step)

    def new_bit(self, agent: _Agent) -> tuple[int, _VC]:
        """An asynchronous operation's bit and clock: after what its issuer did so far, before only who acquires
        it. The issuer's own clock moves on (what it does next is not covered by the operation)."""
        bit = self.bits
        self.bits += 1
        vc = agent.vc.copy()
        vc.ops |= 1 << bit
        agent.vc.c[agent.idx] += 1
        return bit, vc

    # ---------------------------------------------------------------------------------------------- events
    def log(self, who: str, op: _Op, bar: int = -1, region=None, kind=None, tag=None) -> None:
        """A trace event; its phase: for a wait the parity waited for, else the barrier's phase (completed
        phases so far) that the arrival, commit or complete_tx counts toward."""
        if self.trace_on:
            kind = kind or op.kind
            phase = -1 if bar < 0 else op.parity if kind == "wait" else self.phases[bar]
            self.run.trace.append((self.step, self.cta, who, kind, _BAR_NAMES[bar] if bar >= 0 else "", phase,
                                   region, op.label, op.at, tag))

    def execute(self, a: _Agent) -> None:
        op = a.op
        k = op.kind
        if k == "wait":
            a.vc.join(self.done_vc[op.bar][op.parity])
            if a.name == "load":
                a.passed.append((_BAR_NAMES[op.bar], op.parity))
            self.log(a.name, op, op.bar)
        elif k == "arrive":
            vc = a.vc.copy()
            a.vc.c[a.idx] += 1
            self.log(a.name, op, op.bar)
            self.arrive_on(op.bar, op.count, op.tx, vc, a.who, op)
        elif k == "tma_load":
            self.issue_load(a, op)
        elif k in ("mma", "commit"):
            self.seq += 1
            x = _Async(k, 0, self.seq, a, op, self.step)
            x.vc = a.vc.copy()
            a.vc.c[a.idx] += 1
            # MMAs complete in issue order; a commit arrives once every MMA before it has completed
            self.tc_due = max(self.tc_due, self.step + (self.delay() if k == "mma" else 0))
            x.due = self.tc_due
            self.tc.append(x)
            self.log(a.name, op, op.bar)
        elif k == "tmem_ld" or k == "ld_shared":
            self.access(a.idx, a.vc.c[a.idx], a.vc, a.who, op, op.region, False, "generic", op.expect)
            self.log(a.name, op, region=op.region)
        elif k == "st_shared" or k == "tmem_alloc" or k == "tmem_dealloc":
            self.access(a.idx, a.vc.c[a.idx], a.vc, a.who, op, op.region, True, "generic", op.tag)
            self.log(a.name, op, region=op.region)
        elif k == "tmem_st":
            bit, vc = self.new_bit(a)
            x = self.new_async(k, a, op, self.step + self.delay())
            x.bit, x.vc, x.region, x.tag = bit, vc, op.region, op.tag
            a.st_open.add(bit)
            heapq.heappush(self.heap, x)
            self.log(a.name, op, region=op.region)
        elif k == "wait_st":
            a.vc.ops |= a.st_done
            a.st_done = 0
            self.log(a.name, op)
        elif k == "fence_proxy":
            a.vc.c[a.idx] += 1
            a.fences.append(a.vc.c[a.idx])
            self.log(a.name, op)
        elif k == "tma_store":
            bit, vc = self.new_bit(a)
            x = self.new_async(k, a, op, self.step + self.delay())
            x.bit, x.vc, x.region, x.tag = bit, vc, op.region, op.expect
            x.slot = [bit, False]
            a.open_group.append(x.slot)
            heapq.heappush(self.heap, x)
            self.log(a.name, op, region=op.region)
        elif k == "commit_group":
            a.groups.append(a.open_group)
            a.open_group = []
            self.log(a.name, op)
        elif k == "wait_group":
            keep = len(a.groups) - op.n
            for g in a.groups[:keep]:
                for bit, _ in g:
                    a.vc.ops |= 1 << bit
            a.groups = a.groups[keep:]
            self.log(a.name, op)
        else:  # pragma: no cover - every op kind is handled above
            raise NotImplementedError(f"sm100 protocol model: op kind {k!r}")
        a.advance()

    def issue_load(self, a: _Agent, op: _Op) -> None:
        """A TMA load: its 16 KiB boxes land separately, each writing its bytes, then complete_tx."""
        r = op.region
        self.run.loads.append(dict(op.info, step=self.step, cta=self.cta, region=r, bar=_BAR_NAMES[op.bar],
                                   expect_tx=self.last_tx.get(op.bar), waits=tuple(a.passed),
                                   fill=self.phases[op.bar]))
        a.passed = []
        self.log(a.name, op, op.bar, r)
        for lo in range(r.lo, r.hi, TMA_BOX):
            hi = min(lo + TMA_BOX, r.hi)
            bit, vc = self.new_bit(a)
            x = self.new_async("tma_box", a, op, self.step + self.delay())
            x.bit, x.vc, x.bar, x.nbytes, x.tag = bit, vc, op.bar, hi - lo, op.tag
            x.region = Region("smem", lo, hi, r.name)
            heapq.heappush(self.heap, x)

    def arrive_on(self, bar: int, count: int, tx: int, vc: _VC, who: str, op: _Op) -> None:
        if tx:
            self.last_tx[bar] = tx
        self.release(bar, vc)
        self.update(bar, _arrive(self.words[bar], count, tx), who, op)

    def release(self, bar: int, vc: _VC) -> None:
        """An arrival or a complete_tx releases ``vc`` into the barrier's current phase."""
        pend = self.pending[bar]
        if pend is None:
            self.pending[bar] = vc.copy()
        else:
            pend.join(vc)

    def update(self, bar: int, res, who: str, op: _Op) -> None:
        """The barrier's new word (flashsim.smem.mbarrier's result ``res``); a completed phase keeps the clock of
        its arrivals for the waits on its parity."""
        word, done, misuse = res
        if misuse:
            self.finding("misuse", "", _BAR_NAMES[bar],
                         f"mbarrier misuse on {_BAR_NAMES[bar]} by {who} at '{op.label}' ({self.where(op.at)}): "
                         f"{mb.MISUSE[misuse]}")
        old = self.words[bar]
        self.words[bar] = word
        if done:
            self.done_vc[bar][_parity(old)] = self.pending[bar] or _VC()
            self.pending[bar] = None
            self.phases[bar] += 1

    # ---------------------------------------------------------------------------------------------- completions
    def land(self, limit: int | None) -> None:
        """Complete the operations due by step ``limit`` (None: all in flight), in due order; the tensor core's
        in issue order."""
        while True:
            h = self.heap[0] if self.heap else None
            c = self.tc[0] if self.tc else None
            x = h if c is None or (h is not None and h < c) else c
            if x is None or (limit is not None and x.due > limit):
                return
            if x is h:
                heapq.heappop(self.heap)
            else:
                self.tc.popleft()
            self.complete(x)

    def complete(self, x: _Async) -> None:
        a, op = x.agent, x.op
        if x.kind == "tma_box":
            who = f"TMA load issued by {a.name}"
            self.access(-1, x.bit, x.vc, who, op, x.region, True, "async", x.tag)
            self.log("tma", op, x.bar, x.region, "tma_box_landed")
            self.release(x.bar, x.vc)
            self.update(x.bar, _complete_tx(self.words[x.bar], x.nbytes), who, op)
        elif x.kind == "tmem_st":
            self.access(-1, x.bit, x.vc, f"tcgen05.st of {a.name}", op, x.region, True, "generic", x.tag)
            a.st_open.discard(x.bit)
            a.st_done |= 1 << x.bit
            self.log(a.name, op, region=x.region, kind="tmem_st_done", tag=x.tag)
        elif x.kind == "tma_store":
            self.access(-1, x.bit, x.vc, f"TMA store issued by {a.name}", op, x.region, False, "async", x.tag)
            x.slot[1] = True
            self.log("tma", op, region=x.region, kind="tma_store_read")
        elif x.kind == "mma":
            tc = self.tc_vc
            tc.join(x.vc)
            tc.c[_TC] += 1
            for region, expect in op.reads:
                self.access(_TC, tc.c[_TC], tc, "tensor core", op, region, False, "async", expect)
            for region, tag in op.writes:
                self.access(_TC, tc.c[_TC], tc, "tensor core", op, region, True, "async", tag)
            self.log("tensor core", op, region=op.writes[0][0], kind="mma_done", tag=op.writes[0][1])
        else:  # commit: arrives with what the tensor core has completed
            tc = self.tc_vc
            tc.join(x.vc)
            tc.c[_TC] += 1
            self.log("tensor core", op, op.bar, kind="commit_arrive")
            vc = tc.copy()
            tc.c[_TC] += 1
            self.arrive_on(op.bar, 1, 0, vc, "tensor core (tcgen05.commit)", op)

    # ---------------------------------------------------------------------------------------------- checks
    def where(self, at) -> str:
        t, b = at
        if t is None:
            return location(cta=self.cta)
        return f"{location(cta=self.cta)}, tile {t}" + (f", block {b}" if b is not None else "")

    def access(self, idx: int, epoch: int, vc: _VC, who: str, op: _Op, region: Region, write: bool, proxy: str,
               tag) -> None:
        """One access: hazards against the last write and the reads since, fence.proxy.async for a generic write
        read by the async proxy, and the tags it sees (a read) or leaves (a write)."""
        sh = self.smem if region.space == "smem" else self.tmem
        me = (idx, epoch, who, op, region, proxy, self.step, write)
        seen = set()
        agents = self.agents
        for i in sh.span(region.lo, region.hi):
            cell = sh.cells[i]
            w = cell[0]
            lo, hi = sh.bounds[i], sh.bounds[i + 1]
            if w is not None:
                if not _hb(w, vc):
                    self.hazard("WAW" if write else "RAW", w, me, lo, hi)
                elif (w[5] == "generic" and proxy == "async" and w[0] >= 0 and w[4].space == "smem"
                      and not any(w[1] < f <= vc.c[w[0]] for f in agents[w[0]].fences)):
                    self.hazard("RAW (no fence.proxy.async)" if not write else "WAW (no fence.proxy.async)", w, me,
                                lo, hi)
            if write:
                for r in cell[1]:
                    if not _hb(r, vc):
                        self.hazard("WAR", r, me, lo, hi)
                cell[0], cell[1], cell[2] = me, [], tag
            else:
                reads = cell[1]
                if idx >= 0:  # a role's later read covers its earlier ones
                    reads[:] = [r for r in reads if r[0] != idx]
                reads.append(me)
                seen.add(cell[2])
                if tag is not None and cell[2] != tag:
                    self.stale(me, tag, cell[2], lo, hi)
        if not write:
            self.reads[(who, op.label, self.where(op.at), tuple(sorted(map(str, seen))))] += 1

    def hazard(self, sub: str, first, second, lo: int, hi: int) -> None:
        key = ("hazard", sub, first[2], first[3].label, second[2], second[3].label)
        # named after the narrower of the two regions (a tile's stage rather than all of TMEM)
        narrow = min(first[4], second[4], key=lambda r: r.hi - r.lo)
        place = narrow.span(lo, hi)
        self.finding("hazard", sub, place,
                     f"{sub} hazard on {place}: {self.side(first)}, then {self.side(second)}: not ordered by the "
                     "protocol's synchronisation", key)

    def side(self, rec) -> str:
        idx, _, who, op, region, proxy, step, write = rec
        what = "write" if write else "read"
        return f"{who} {what}s {region.name} at '{op.label}' ({self.where(op.at)}, step {step})"

    def stale(self, me, want: str, got, lo: int, hi: int) -> None:
        idx, _, who, op, region, _, step, _ = me
        key = ("stale", who, op.label, op.at, want, got)
        self.finding("stale", "", region.span(lo, hi),
                     f"stale read: {who} reads {region.span(lo, hi)} at '{op.label}' ({self.where(op.at)}, step "
                     f"{step}): expects {want}, finds {got or 'nothing written'}", key)

    def finding(self, kind: str, sub: str, place: str, text: str, key=None) -> None:
        key = key or (kind, text)
        f = self.seen.get(key)
        if f is not None:
            f.count += 1
            return
        f = Finding(kind, sub, place, text, self.step, self.cta)
        self.seen[key] = f
        self.run.findings.append(f)

    # ---------------------------------------------------------------------------------------------- deadlock
    def deadlock(self) -> None:
        lines = []
        graph = []
        for a in self.agents:
            if a.done:
                continue
            op = a.op
            bar = op.bar
            waits = (f"waits on {_BAR_NAMES[bar]} for the phase of parity {op.parity} to complete; "
                     f"{_BAR_NAMES[bar]}: {mb.describe(np.uint64(self.words[bar]))}, {self.phases[bar]} phase(s) "
                     f"completed (init count {_BAR_COUNTS[bar]})")
            lines.append(f"{a.who} at '{op.label}' ({self.where(op.at)}; flashsim/kernels/sm100_protocol.py:"
                         f"{a.line}): {waits}")
            graph.append({"cta": self.cta, "warp": a.warps[0], "role": a.name, "pcs": [], "where": op.label,
                          "waits": [waits], "barrier": _BAR_NAMES[bar], "parity": op.parity, "line": a.line})
        done = [a.name for a in self.agents if a.done]
        msg = (f"sm100 protocol model (not verified on hardware): deadlock at step {self.step}, "
               f"{location(cta=self.cta)}: no role can run and nothing is in flight.\n  " + "\n  ".join(lines)
               + (f"\n  finished: {', '.join(done)}" if done else ""))
        self.finding("deadlock", "", ", ".join(g["barrier"] for g in graph), msg)
        exc = BarrierDeadlock(msg)
        exc.graph = graph
        raise exc


# ------------------------------------------------------------------------------------------------ running

def _mutant_key(mutant: int) -> str:
    if mutant == 0:
        return ""
    if not isinstance(mutant, (int, np.integer)) or isinstance(mutant, bool) or int(mutant) not in _MUTANT_KEYS:
        raise bad_argument("mutant", mutant, f"expected 0 (the seed's protocol) or a planted bug 1..{len(MUTANTS)}")
    return _MUTANT_KEYS[int(mutant)]


def run_model(config: Sm100Config, ctas: list[list[WorkTile]], options: ExecOptions | None = None, *,
              mutant: int = 0, trace: bool = True, raise_deadlock: bool = True) -> ModelRun:
    """Run the model once: every CTA of ``ctas`` (each a list of work tiles) in turn, under ``options`` (the
    interpreter's ExecOptions: schedule seed, policy, starve_steps, max_steps), with planted bug ``mutant`` (0:
    none), recording the step trace unless ``trace`` is False. A deadlock raises BarrierDeadlock (its ``run``
    attribute holds the run so far) unless ``raise_deadlock`` is False (then it is a finding of the returned
    run)."""
    if not isinstance(config, Sm100Config):
        raise bad_argument("config", config, "expected an Sm100Config")
    if not isinstance(ctas, (list, tuple)) or not all(isinstance(c, (list, tuple)) and
                                                      all(isinstance(t, WorkTile) for t in c) for c in ctas):
        raise bad_argument("ctas", ctas, "expected a list of CTAs, each a list of WorkTile")
    bug = _mutant_key(mutant)
    options = options or ExecOptions()
    if bug == "persistent_overlap":
        ctas = [[t for c in ctas for t in c]]
    run = ModelRun(config, [list(c) for c in ctas], int(mutant), options.schedule_policy or options.schedule_seed)
    seed = options.schedule_seed
    rngs = (None, None) if seed is None else (np.random.default_rng(seed), np.random.default_rng([int(seed), 0x5EED]))
    reads: Counter = Counter()
    finals = []
    for i, tiles in enumerate(run.ctas):
        cta = _Cta(run, i, tiles, options, rngs, bug, trace, reads)
        try:
            cta.go()
        except BarrierDeadlock as exc:
            run.steps += cta.step
            exc.run = run
            if raise_deadlock:
                raise
            return run
        run.steps += cta.step
        finals.append((cta.words, [[c[2] for c in sh.cells] + sh.bounds for sh in (cta.smem, cta.tmem)]))
    h = hashlib.sha256(repr(sorted(reads.items())).encode())
    h.update(repr(finals).encode())
    run.digest = h.digest()
    return run


def launch(problem: Problem, *, mutant: int = 0, trace: bool = True, catch_deadlock: bool = False):
    """``launch(options) -> ModelRun`` for flashsim.sass.schedules.explore: the model on ``problem``'s CTAs;
    ``catch_deadlock`` returns a deadlocked run (a finding) instead of raising."""
    cfg, ctas = problem.config, problem.ctas()

    def go(options: ExecOptions) -> ModelRun:
        return run_model(cfg, ctas, options, mutant=mutant, trace=trace, raise_deadlock=not catch_deadlock)

    return go


def explore_model(problem: Problem, *, schedules: int = 100, seed: int = 0) -> dict:
    """The correct model on ``problem`` under the default schedule, the adversarial schedules of :data:`ROLES`
    and ``schedules`` seeded ones (flashsim.sass.schedules.explore; a deadlock raises with the schedule's
    name): runs, clean runs, the first findings, whether every run had the same outcome, seconds."""
    t0 = time.perf_counter()
    runs = explore(launch(problem), schedules=schedules, seed=seed, roles=ROLES)
    bad = [(describe(label), r.findings) for label, r in runs if r.findings]
    return {"problem": problem.name, "runs": len(runs), "clean": len(runs) - len(bad), "findings": bad[:5],
            "findings_total": sum(len(f) for _, f in bad),
            "same_outcome": same_bits([(label, r.outcome) for label, r in runs]),
            "steps": sum(r.steps for _, r in runs), "seconds": time.perf_counter() - t0}


# ------------------------------------------------------------------------------------------------ mutants

@dataclass(frozen=True)
class Mutant:
    """A planted one-line protocol bug: ``key`` (the program's switch), what it is, the problem that shows it, the
    finding kind expected and regular expressions
    every one of which its report must match (the place and both sides)."""

    n: int
    key: str
    what: str
    problem: str
    kind: str
    place: tuple[str, ...]


#: problems of the mutants (one CTA each): the uneven layout over more than two rounds of the three K/V stages;
#: two uneven tiles in one CTA; a persistent CTA of three even tiles; causal tiles with no work in between;
#: the s0/s1 ordering barrier on
MUTANT_PROBLEMS = {
    "uneven": Problem("uneven", 192, 256, 512),
    "uneven_two": Problem("uneven_two", 192, 512, 512),
    "persistent": Problem("persistent", 128, 768, 384),
    "zero_work": Problem("zero_work", 128, 768, 384, heads=2, causal=True, persistent=True),
    "s0_s1": Problem("s0_s1", 128, 256, 384, s0_s1_barrier=True),
}

MUTANTS = (
    Mutant(1, "offset_no_xor", "the load warp's stage-1 offset takes the producer phase without ^ 1", "uneven",
           "stale", (r"tensor core reads smem \S+ \(sK stage 1 ", r"expects V\[n=3\] tile 0, finds nothing written")),
    Mutant(2, "offset_sign", "stage 1's offset with the wrong sign in the load warp", "uneven", "stale",
           (r"tensor core reads smem \S+ \(sK stage 1 ", r"expects V\[n=3\] tile 0")),
    Mutant(3, "no_extra_wait", "no extra wait on kv_empty[1] before K into stage 0", "uneven", "hazard",
           (r"hazard on smem 0x20c00\.\.0x24c00 ", r"tensor core reads sK stage 1 bytes 32768\.\.81920 at 'S1 = Q1 K",
            r"TMA load issued by load writes sK stage 0 bytes 0\.\.49152 at 'TMA load K\[n=0\]")),
    Mutant(4, "extra_wait_parity", "the extra wait on kv_empty[1] with parity phase ^ 1", "uneven", "deadlock",
           (r"load \(warp=13\) at 'extra wait kv_empty\[1\] before loading K\[n=3\] into stage 0'",
            r"waits on kv_empty\[1\] for the phase of parity 0 to complete; kv_empty\[1\]: phase 0, 0 of 1 arrivals")),
    Mutant(5, "expect_k_for_v", "expect_tx of K's bytes (49152) announced for V", "uneven", "deadlock",
           (r"mma \(warp=12\) at 'wait kv_full\[1\] for V\[n=3\]'",
            r"kv_full\[1\]: phase 0, 1 of 1 arrivals \(pending 0\), tx-count 16384 bytes")),
    Mutant(6, "expect_v_for_k", "expect_tx of V's bytes (32768) announced for K: the phase completes early",
           "uneven", "hazard", (r"RAW hazard on smem \S+ \(sK stage 0 ",
                                r"TMA load issued by load writes sK stage 0 bytes 0\.\.49152 at 'TMA load K\[n=3\]",
                                r"then tensor core reads sK stage 0 bytes 0\.\.49152 at 'S[01] = Q[01] K\[n=3\]")),
    Mutant(7, "q_phase_stuck", "q_producer_phase not flipped per work tile", "persistent", "hazard",
           (r"hazard on smem \S+ \(sQ stage 0\)", r"TMA load issued by load writes sQ stage 0 at 'TMA load Q0 into sQ "
            r"stage 0' \(cta=0, tile 1", r"tensor core reads sQ stage 0 at 'S0 = Q0 K\[n=0\]\^T' \(cta=0, tile 0")),
    Mutant(8, "pfor_phase_stuck", "P_full_O_rescaled_phase never flipped in the MMA warp", "persistent",
           "hazard", (r"hazard on TMEM cols \S+ x lanes 0\.\.127 \(P0 cols ",
                      r"tensor core reads P0 cols \S+ at 'O0 \+?= P0 V\[n=\d\]",
                      r"tcgen05\.st of softmax0 writes P0 cols \S+ at 'tcgen05\.st P0\[n=\d\]")),
    Mutant(9, "early_v_release", "V released after P0 V, before P1 V is issued", "uneven", "hazard",
           (r"WAR hazard on smem ", r"tensor core reads sK stage \d bytes \S+ at 'O1 \+?= P1 V\[n=3\]",
            r"then TMA load issued by load writes sK stage")),
    Mutant(10, "early_k_release", "K released after S0 = Q0 K^T, before S1 = Q1 K^T is issued", "uneven",
           "hazard", (r"WAR hazard on smem ", r"tensor core reads sK stage \d bytes \S+ at 'S1 = Q1 K\[n=2\]",
                      r"then TMA load issued by load writes sK stage")),
    Mutant(11, "early_q_release", "q_empty committed before the KV loop (before the last Q K^T)",
           "persistent", "hazard", (r"hazard on smem \S+ \(sQ stage [01]\)",
                                    r"TMA load issued by load writes sQ stage [01] at 'TMA load Q[01] into sQ stage "
                                    r"[01]' \(cta=0, tile 1", r"tensor core reads sQ stage [01] at 'S[01] = Q[01] K"
                                    r"\[n=0\]\^T' \(cta=0, tile 0")),
    Mutant(12, "arrive_not_commit", "kv_empty released by a plain mbarrier.arrive instead of tcgen05.commit",
           "uneven", "hazard", (r"(WAR|RAW) hazard on smem \S+ \(sK stage 0 ",
                                r"tensor core reads sK stage 0 bytes 0\.\.49152 at 'S[01] = Q[01] K\[n=3\]",
                                r"TMA load issued by load writes sK stage 0 bytes 0\.\.32768 at 'TMA load V\[n=2\]")),
    Mutant(13, "no_wait_st", "P_full_O_rescaled arrived before tcgen05.wait::st", "uneven", "hazard",
           (r"hazard on TMEM cols \S+ x lanes 0\.\.127 \(P[01] cols (0|16|32)\.\.", r"tcgen05\.st of softmax[01] "
            r"writes P[01] cols", r"tensor core reads P[01] cols 0\.\.47 at 'O[01] \+?= P[01] V")),
    Mutant(14, "half_split", "softmax signals after 1/2 of P instead of 3/4", "uneven", "hazard",
           (r"hazard on TMEM cols (96|224)\.\.(111|239) ", r"tcgen05\.st of softmax[01] writes P[01] cols 32\.\.47",
            r"tensor core reads P[01] cols 0\.\.47 at 'O[01] \+?= P[01] V")),
    Mutant(15, "no_p_full_2", "the in-asm wait on P_full_2 left out", "uneven", "hazard",
           (r"hazard on TMEM cols (112|240)\.\.(127|255) ", r"tcgen05\.st of softmax[01] writes P[01] cols 48\.\.63",
            r"tensor core reads P[01] cols 48\.\.63 at 'O[01] \+= P[01] V\[n=\d\], k-steps 6-7'")),
    Mutant(16, "no_o_full_commit", "no O_full commit after the last P V", "uneven", "deadlock",
           (r"correction \(warps=8-11\) at 'wait O_full\[0\] \(the last P0 V done\)'",
            r"waits on O_full\[0\] for the phase of parity 0 to complete; O_full\[0\]: phase 0, 0 of 1 arrivals")),
    Mutant(17, "no_o_full_wait", "the correction warpgroup reads O without waiting on O_full", "uneven",
           "hazard", (r"hazard on TMEM cols \S+ x lanes 0\.\.127 \(O[01]\)", r"tensor core writes O[01] at 'O[01] \+= "
                      r"P[01] V\[n=0\]", r"correction \(warps=8-11\) reads O[01] at 'tcgen05\.ld O[01] \(final\)'")),
    Mutant(18, "no_initial_pfor", "no P_full_O_rescaled arrive by the correction warpgroup at kernel start",
           "uneven", "deadlock", (r"mma \(warp=12\) at 'wait P_full_O_rescaled\[0\]",
                                  r"P_full_O_rescaled\[0\]: phase 0, 128 of 256 arrivals")),
    Mutant(19, "no_proxy_fence", "no fence.proxy.async after writing sO, before corr_epi_full", "uneven",
           "hazard", (r"RAW \(no fence\.proxy\.async\) hazard on smem \S+ \(sO stage 0 \(in sQ's bytes\)\)",
                      r"correction \(warps=8-11\) writes sO stage 0", r"then TMA store issued by epilogue reads sO "
                      r"stage 0")),
    Mutant(20, "no_wait_group", "corr_epi_empty arrived right after commit_group, no wait_group.read",
           "persistent", "hazard", (r"WAR hazard on smem \S+ \(sO stage [01]\)", r"TMA store issued by epilogue reads "
                                    r"sO stage [01] at 'TMA store sO\[[01]\] to O' \(cta=0, tile 0",
                                    r"then correction \(warps=8-11\) writes sO stage [01] .*tile 1")),
    Mutant(21, "persistent_overlap", "persistent scheduling with sO overlapping sQ (qk 192)", "uneven_two",
           "hazard", (r"hazard on smem \S+ \(s[QO] stage [01]", r"TMA load issued by load writes sQ stage [01] at "
                      r"'TMA load Q[01] into sQ stage [01]' \(cta=0, tile 1", r"sO stage [01] \(in sQ's bytes\) at "
                      r"'(st\.shared O[01]|TMA store sO)")),
    Mutant(22, "s0s1_skip_arrive", "softmax warpgroup 1 skips its s0_s1_sequence arrive", "s0_s1", "deadlock",
           (r"softmax0 \(warps=0-3\) at 'wait s0_s1_sequence\[0\] before exp2",
            r"s0_s1_sequence\[0\]: phase 0, 0 of 32 arrivals")),
    Mutant(23, "load_zero_work", "the load warp lacks the zero-work guard the other roles have", "zero_work",
           "stale", (r"stale read: tensor core reads ", r"expects K\[n=\d\] tile \d, finds K\[n=-\d\] tile \d")),
    Mutant(24, "s_before_pv", "S0 of the next block issued before P0 V of the previous one: S_full[0] completes "
           "twice before softmax0 waits (under some schedules a hazard on S0 / P0 instead)", "uneven", "deadlock",
           (r"softmax0 \(warps=0-3\) at 'wait S_full\[0\] for S0\[n=3\]'",
            r"S_full\[0\]: phase 0, 0 of 1 arrivals \(pending 1\), tx-count 0 bytes, 2 phase\(s\) completed")),
    Mutant(25, "early_dealloc", "tcgen05.dealloc without waiting on tmem_dealloc", "uneven", "hazard",
           (r"hazard on TMEM cols ", r"then mma \(warp=12\) writes TMEM \(all 512 columns\) at 'tcgen05\.dealloc")),
)
_MUTANT_KEYS.update({m.n: m.key for m in MUTANTS})


def judge(m: Mutant | int, *, schedules: int = 8, seed: int = 0) -> dict:
    """Run mutant ``m`` on its problem under the default schedule, then seeds ``seed`` .. ``seed + schedules -
    1``, until a finding of its kind matches its place: {mutant, found, kind, schedule, finding, kinds seen,
    schedules tried, seconds}."""
    if not isinstance(m, Mutant):
        if not _mutant_key(m):
            raise bad_argument("mutant", m, f"expected a planted bug 1..{len(MUTANTS)}")
        m = MUTANTS[int(m) - 1]
    prob = MUTANT_PROBLEMS[m.problem]
    go = launch(prob, mutant=m.n, catch_deadlock=True)
    t0 = time.perf_counter()
    kinds: set[str] = set()
    tried = 0
    for label in [None, *range(seed, seed + schedules)]:
        run = go(schedule_options(label))
        tried += 1
        kinds |= {f.kind for f in run.findings}
        for f in run.findings:
            if f.kind == m.kind and all(re.search(p, f.text, re.S) for p in m.place):
                return {"mutant": m.n, "found": True, "kind": f.kind, "schedule": describe(label), "finding": f,
                        "kinds": sorted(kinds), "tried": tried, "seconds": time.perf_counter() - t0}
    return {"mutant": m.n, "found": False, "kind": None, "schedule": None, "finding": None, "kinds": sorted(kinds),
            "tried": tried, "seconds": time.perf_counter() - t0}


# ------------------------------------------------------------------------------------------------ printing

def _load_name(ld: dict) -> str:
    """The seed's naming: Q0 / Q1, K and V numbered in load order within the tile (K0: the first loaded, the
    rightmost block)."""
    return ld["name"] if ld["buffer"] == "q" else f"{ld['name']}{ld['pair']}"


def load_occupancy(run: ModelRun, cta: int = 0) -> list[list[str]]:
    """After each load of CTA ``cta``: the tiles in [Q stage 0, Q stage 1, KV stage 0, KV stage 1, KV stage 2]
    ('-' empty), named as the seed's table names them."""
    return occupancy((ld["buffer"], ld["stage"], _load_name(ld)) for ld in run.loads if ld["cta"] == cta)


def check_loads(run: ModelRun, cta: int = 0) -> list[str]:
    """Compare CTA ``cta``'s loads with flashsim.attention.ws_plan's plan of its work tiles (tiles without work
    left out: this kernel loads nothing for them); returns the differences (empty: as planned)."""
    cfg = run.config
    plan = [ld for _, ld in cta_plan([t.n for t in run.ctas[cta] if t.n], cfg.layout, q_rows=M_BLOCK)]
    mine = [ld for ld in run.loads if ld["cta"] == cta]
    msgs = [] if len(mine) == len(plan) else [f"the model issued {len(mine)} loads, the plan has {len(plan)}"]
    smem = cfg.smem
    for i, (ld, want) in enumerate(zip(mine, plan), 1):
        base = smem["sQ" if ld["buffer"] == "q" else "sK"][0]
        why = load_diffs(want, stage=ld["stage"], expect_tx=ld["expect_tx"],
                         region=(ld["region"].lo - base, ld["region"].hi - base), phase=ld["phase"],
                         fill=ld["fill"], waits=ld["waits"])
        ld["plan_ok"] = not why
        if why:
            msgs.append(f"load {i} ({_load_name(ld)}, tile {ld['tile'].index}): " + "; ".join(why))
    return msgs


def format_loads(run: ModelRun, cta: int = 0) -> str:
    """CTA ``cta``'s TMA loads as the seed's table: per load its work tile, name (K0 = the first K of the tile,
    block index after it), full barrier and the phase it fills, the producer's phase, bytes relative to the
    buffer (sQ or the K/V region) and absolute, expect_tx, the empty-barrier waits passed since the load before,
    whether it is as ws_plan plans it, and the occupancy of [Q0, Q1, KV0, KV1, KV2] after it."""
    smem = run.config.smem
    occ = load_occupancy(run, cta)
    rows = [f"{'step':>4} {'tile':>4}  {'load':<9} {'barrier':<11} {'fill':>4} {'phase':>5}  {'bytes':<13} "
            f"{'smem':<17} {'expect_tx':>9}  {'waits passed':<30} {'plan':<4} occupancy"]
    mine = [ld for ld in run.loads if ld["cta"] == cta]
    for i, (ld, o) in enumerate(zip(mine, occ), 1):
        base = smem["sQ" if ld["buffer"] == "q" else "sK"][0]
        r = ld["region"]
        name = _load_name(ld) + (f" n={ld['block']}" if ld["buffer"] == "kv" else "")
        waits = ", ".join(f"{n}@{p}" for n, p in ld["waits"])
        ok = {None: "", True: "ok", False: "DIFF"}[ld.get("plan_ok")]
        rows.append(f"{i:>4} {ld['tile'].index:>4}  {name:<9} {ld['bar']:<11} {ld['fill']:>4} {ld['phase']:>5}  "
                    f"{f'{r.lo - base}..{r.hi - base}':<13} {f'{r.lo:#07x}..{r.hi:#07x}':<17} "
                    f"{ld['expect_tx']:>9}  {waits:<30} {ok:<4} [{', '.join(o)}]")
    return "\n".join(rows)


_TMEM_GROUPS = ("S0 low", "S0 high / P0", "S1 low", "S1 high / P1", "O0", "O1")


def _tmem_groups(cfg: Sm100Config) -> list[tuple[str, int, int]]:
    s, p, o = cfg.tmem_s, cfg.tmem_p, cfg.tmem_o
    return [(_TMEM_GROUPS[0], s[0], p[0]), (_TMEM_GROUPS[1], p[0], s[0] + N_BLOCK),
            (_TMEM_GROUPS[2], s[1], p[1]), (_TMEM_GROUPS[3], p[1], s[1] + N_BLOCK),
            (_TMEM_GROUPS[4], o[0], o[0] + cfg.hdim_v), (_TMEM_GROUPS[5], o[1], o[1] + cfg.hdim_v)]


def format_tmem_plan(cfg: Sm100Config) -> str:
    """The TMEM column plan (upstream's tmem_s_offset, tmem_p_offset, tmem_o_offset)."""
    rows = [f"TMEM: 128 lanes (lane = query row of the 128-row Q tile) x {TMEM_COLUMNS} columns of 32 bits; "
            f"{cfg.tmem_total} columns used",
            f"  {'columns':<10} holds"]
    what = {"S0 low": "S0 = Q0 K^T (fp32), columns 0-63",
            "S0 high / P0": f"S0 columns 64-127; P0 (bf16, two per column, {cfg.p_columns // P_CHUNK} chunks of "
                            f"{P_CHUNK} columns) over them",
            "S1 low": "S1 = Q1 K^T (fp32), columns 0-63", "S1 high / P1": "S1 columns 64-127; P1 over them",
            "O0": "O0 = sum P0 V (fp32)", "O1": "O1 = sum P1 V (fp32)"}
    for name, lo, hi in _tmem_groups(cfg):
        rows.append(f"  {f'{lo}..{hi - 1}':<10} {what[name]}")
    return "\n".join(rows)


def _short(tag: str) -> str:
    """A TMEM tag shortened for the step table: 'O0[n>=2] tile 1 (k-steps 0-5)' -> 'O0 t1 n>=2 k0-5'."""
    m = re.match(r"([SPO]\d)\[n(=|>=)(-?\d+)\] tile (\d+)(.*)", tag)
    if not m:
        return tag
    rest = m.group(5).replace(" (k-steps ", " k").replace(")", "").replace("*scale", " *s")
    return f"{m.group(1)} t{m.group(4)} n{m.group(2)}{m.group(3)}{rest}"


def format_tmem_steps(run: ModelRun, cta: int = 0, limit: int | None = None) -> str:
    """From a run's trace: the steps of the MMA warp, the tensor core, the softmax and correction
    warpgroups in CTA ``cta`` (waits and arrives with barrier@parity, MMA issue and completion, tcgen05.ld,
    tcgen05.st and its completion), with what each TMEM column group holds after the step."""
    groups = _tmem_groups(run.config)
    held = ["-"] * len(groups)
    w = 15
    rows = [f"{'step':>5}  {'role':<11} {'op':<10} {'barrier@parity / #phase':<24} {'step label':<40} "
            + " ".join(f"{g[0]:<{w}}" for g in groups)]
    roles = ("mma", "tensor core", "softmax0", "softmax1", "correction")
    ops = {"wait": "wait", "arrive": "arrive", "commit": "commit", "commit_arrive": "commit do", "mma": "mma",
           "mma_done": "mma done", "tmem_ld": "tcgen05.ld", "tmem_st": "tcgen05.st", "tmem_st_done": "st landed",
           "wait_st": "wait::st", "st_shared": "st.shared", "ld_shared": "ld.shared", "tmem_alloc": "alloc",
           "tmem_dealloc": "dealloc"}
    for step, c, who, kind, bar, phase, region, label, at, tag in run.trace:
        if c != cta or who not in roles or kind not in ops:
            continue
        if tag is not None and region is not None and region.space == "tmem":
            for i, (_, lo, hi) in enumerate(groups):
                if region.lo < hi and lo < region.hi:
                    held[i] = _short(tag)
        barrier = f"{bar}@{phase}" if kind == "wait" else f"{bar} #{phase}" if bar else ""
        rows.append(f"{step:>5}  {who:<11} {ops[kind]:<10} {barrier:<24} {label[:40]:<40} "
                    + " ".join(f"{h[:w]:<{w}}" for h in held))
        if limit is not None and len(rows) > limit:
            rows.append("...")
            break
    return "\n".join(rows)


def format_exploration(r: dict, schedules: int, seed: int) -> str:
    """One :func:`explore_model` result in words: runs of each kind, clean ones, findings, same outcome, time."""
    adv = r["runs"] - 1 - schedules
    out = [f"{r['runs']} schedules (the default, {adv} adversarial, {schedules} seeded from seed {seed}): "
           f"{r['clean']} clean, {r['findings_total']} findings; the same outcome under every schedule: "
           f"{'yes' if r['same_outcome'] else 'NO'} ({r['steps']} scheduling steps in {r['seconds']:.1f} s, "
           f"{1000 * r['seconds'] / r['runs']:.1f} ms per run)"]
    out += [f"  under {label}: {fs[0]}" for label, fs in r["findings"]]
    return "\n".join(out)


def format_findings(run: ModelRun, limit: int = 10) -> str:
    if not run.findings:
        return "no deadlock, no hazard, no stale read"
    by = Counter(f.kind for f in run.findings)
    out = [", ".join(f"{n} {k}{'s' if n > 1 else ''}" for k, n in sorted(by.items())) + ":"]
    out += [f"  {f}" for f in run.findings[:limit]]
    if len(run.findings) > limit:
        out.append(f"  ... {len(run.findings) - limit} more")
    return "\n".join(out)
