"""The load side of seed 004's warp-specialised attention pipeline, as a plan: which tile each TMA load brings,
into which shared-memory stage and bytes, under which barrier phase, and which earlier tiles it overwrites.

Seed 004 (FA4's sm100 forward) loads, per work tile, Q in 2 stages (one per softmax warpgroup) and K / V in 3
stages: Q0, K of the rightmost KV block, Q1, V of that block, then K and V of each block leftwards. With
head dims qk 192 / v 128 a K tile is larger than a V tile, and the K/V region is laid out unevenly: three stages
of (K bytes + V bytes) / 2 each, stages 0 and 2 fixed, stage 1 moved right by ``block_n * (qk - v) / 2``
elements in even rounds of the three stages and left by as much in odd rounds (round r = load index // 3;
loads alternate K, V, K, ...). So the three stages hold [K, V, K] ("large, small, large") in even rounds and
[V, K, V] ("small, large, small") in odd ones. A K tile loaded into stage 0 in an even round reaches into the
bytes stage 1 held in the round before, so its producer also waits for stage 1's release (the empty barrier of
stage 1, same phase). With equal head dims (128 / 128) the stages are even and nothing moves.

The producer's phase starts at 1 and flips once per round (its wait on an empty barrier passes at once in the
first round); the offset of stage 1 is taken with the round's parity (the producer's phase XOR 1). Q's stages
go round once per work tile. A work tile with no KV block (causal/local, empty range) still loads Q0 and Q1:
its consumers wait for them and release them (fa4h.cu).

:func:`load_plan` lists the loads of one work tile; :func:`overwrites` names, for every load, the earlier
tiles whose bytes it covers, and :func:`check_plan` that each is released (by a wait of that load) before
it lands: the check the uneven layout needs. :func:`format_plan` prints the plan as a table (the occupancy of
[Q stage 0, Q stage 1, KV stage 0, KV stage 1, KV stage 2] after every load). The sm_90 kernel built on this
plan is checked against it from its simulated run; this module alone is the plan, not a measurement.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence

from flashsim.errors import bad_argument

__all__ = ["KVLayout", "Load", "check_plan", "cta_plan", "format_plan", "load_diffs", "load_plan", "occupancy",
           "overwrites"]

Q_STAGES = 2
KV_STAGES = 3


@dataclass(frozen=True)
class KVLayout:
    """The K/V stages of one CTA: ``block_n`` rows per tile, head dims ``hdim_qk`` (K) and ``hdim_v`` (V),
    ``esize`` bytes per element; byte offsets relative to the K/V region's start."""

    hdim_qk: int
    hdim_v: int
    block_n: int = 128
    esize: int = 2

    def __post_init__(self):
        for name in ("hdim_qk", "hdim_v", "block_n", "esize"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise bad_argument(name, v, "expected a positive int")
        if self.hdim_qk < self.hdim_v:
            raise bad_argument("hdim_v", self.hdim_v, f"the plan needs hdim_v <= hdim_qk ({self.hdim_qk})")
        if (self.hdim_qk - self.hdim_v) % 2:
            raise bad_argument("hdim_v", self.hdim_v, "hdim_qk - hdim_v must be even (stage 1 moves by half of it)")

    @property
    def k_bytes(self) -> int:
        return self.block_n * self.hdim_qk * self.esize

    @property
    def v_bytes(self) -> int:
        return self.block_n * self.hdim_v * self.esize

    @property
    def uneven(self) -> bool:
        return self.hdim_qk != self.hdim_v

    @property
    def stage_bytes(self) -> int:
        """Stride from one stage to the next: (K + V) / 2 when uneven, else one tile."""
        return (self.k_bytes + self.v_bytes) // 2 if self.uneven else self.k_bytes

    @property
    def shift(self) -> int:
        """Bytes stage 1 moves (right in even rounds, left in odd ones): block_n * (qk - v) / 2 elements."""
        return self.block_n * (self.hdim_qk - self.hdim_v) // 2 * self.esize

    @property
    def total_bytes(self) -> int:
        """Bytes of the K/V region: three stages, the last one holding a K tile in even rounds."""
        return 2 * self.stage_bytes + self.k_bytes

    def region(self, stage: int, parity: int, is_k: bool, sign: int = 1) -> tuple[int, int]:
        """[start, end) of the tile (K if ``is_k``) loaded into ``stage`` in a round of ``parity``; ``sign`` -1
        moves stage 1 the wrong way (what a flipped sign in the offset does)."""
        if stage not in range(KV_STAGES):
            raise bad_argument("stage", stage, f"expected 0..{KV_STAGES - 1}")
        if sign not in (1, -1):
            raise bad_argument("sign", sign, "expected 1 or -1")
        start = stage * self.stage_bytes
        if stage == 1 and self.uneven:
            start += sign * self.shift * (1 - 2 * (parity & 1))
        return start, start + (self.k_bytes if is_k else self.v_bytes)


@dataclass(frozen=True)
class Load:
    """One TMA load of the plan."""

    step: int
    tile: str  # "Q0", "Q1", "K3", "V3" (K / V with the KV block index)
    buffer: str  # "q" or "kv"
    stage: int
    pair: int  # K / V: the how-many-th block loaded (0: the rightmost, loaded first); Q: its stage
    phase: int  # the producer's phase: the parity its empty-barrier wait passes with
    region: tuple[int, int]  # bytes, relative to the buffer's region
    expect_tx: int  # bytes the load's full barrier expects
    waits: tuple[tuple[str, int], ...] = field(default=())  # (barrier, parity) waited before the load
    fill: int = 0  # the phase of its full barrier the load completes (q_full: the work tile; kv_full: its round)


def load_plan(n_blocks: int, layout: KVLayout, *, q_rows: int = 128, rounds_before: int = 0, tiles_before: int = 0,
              stage1_sign: int = 1) -> list[Load]:
    """The loads of one work tile with ``n_blocks`` KV blocks, in issue order: Q0, K and Q1, V of the last block,
    then K, V of each block leftwards (a tile with no block: Q0, Q1). ``rounds_before`` is the number of K/V
    loads and ``tiles_before`` the number of work tiles the CTA issued before (stages and phases carry over
    between work tiles); ``stage1_sign`` -1 plans the loads of a kernel whose stage-1 offset has the wrong
    sign."""
    for name, val in (("n_blocks", n_blocks), ("rounds_before", rounds_before), ("tiles_before", tiles_before)):
        if not isinstance(val, int) or isinstance(val, bool) or val < 0:
            raise bad_argument(name, val, "expected an int >= 0")
    q_bytes = q_rows * layout.hdim_qk * layout.esize
    out: list[Load] = []
    j = rounds_before  # K/V load index
    q_phase = 1 ^ (tiles_before & 1)  # one flip per work tile; the first tile's waits pass at once

    def kv(tile: str, is_k: bool, pair: int):
        nonlocal j
        stage, r = j % KV_STAGES, j // KV_STAGES
        phase = 1 ^ (r & 1)
        waits = [(f"kv_empty[{stage}]", phase)]
        if is_k and stage == 0 and layout.uneven:
            waits.append(("kv_empty[1]", phase))  # K into stage 0 covers the bytes stage 1 held last round
        out.append(Load(len(out) + 1, tile, "kv", stage, pair, phase, layout.region(stage, r & 1, is_k, stage1_sign),
                        layout.k_bytes if is_k else layout.v_bytes, tuple(waits), r))
        j += 1

    def q(s: int):
        out.append(Load(len(out) + 1, f"Q{s}", "q", s, s, q_phase, (s * q_bytes, (s + 1) * q_bytes), q_bytes,
                        ((f"q_empty[{s}]", q_phase),), tiles_before))

    if n_blocks == 0:
        q(0)
        q(1)
        return out
    last = n_blocks - 1
    q(0)
    kv(f"K{last}", True, 0)
    q(1)
    kv(f"V{last}", False, 0)
    for b in range(last - 1, -1, -1):
        kv(f"K{b}", True, last - b)
        kv(f"V{b}", False, last - b)
    return out


def cta_plan(n_blocks: Sequence[int], layout: KVLayout, *, q_rows: int = 128) -> list[tuple[int, Load]]:
    """The loads of one CTA that walks work tiles with these KV block counts in turn (the K/V rounds and Q's
    phase carry over from tile to tile): (the tile's index in ``n_blocks``, the Load), in issue order."""
    out: list[tuple[int, Load]] = []
    kv_before = 0
    for i, n in enumerate(n_blocks):
        out += [(i, ld) for ld in load_plan(n, layout, q_rows=q_rows, rounds_before=kv_before, tiles_before=i)]
        kv_before += 2 * n
    return out


def load_diffs(want: Load, **got) -> list[str]:
    """How a load differs from the plan's: 'field value (plan: planned)' for each of ``got`` (Load's field names:
    buffer, stage, phase, region, expect_tx, waits, fill) that differs from ``want``'s (waits in any order)."""
    out = []
    for name, value in got.items():
        planned = getattr(want, name)
        if name == "waits":
            value, planned = sorted(value), sorted(planned)
        if value != planned:
            out.append(f"{name} {value} (plan: {planned})")
    return out


def occupancy(loads: Iterable[tuple[str, int, str]]) -> list[list[str]]:
    """After each load (buffer "q" or "kv", stage, the name it is shown by): what [Q stage 0, Q stage 1, KV stage
    0, KV stage 1, KV stage 2] hold ('-': nothing yet)."""
    occ = ["-"] * (Q_STAGES + KV_STAGES)
    out = []
    for buffer, stage, name in loads:
        occ[stage if buffer == "q" else Q_STAGES + stage] = name
        out.append(list(occ))
    return out


def overwrites(plan: list[Load]) -> dict[int, list[Load]]:
    """For each K/V load (by step), the earlier K/V loads whose bytes it covers while they still hold some of
    them (no load in between took all of the overlap)."""
    kv = [ld for ld in plan if ld.buffer == "kv"]
    out: dict[int, list[Load]] = {}
    for i, ld in enumerate(kv):
        hit = []
        for k, old in enumerate(kv[:i]):
            lo, hi = max(ld.region[0], old.region[0]), min(ld.region[1], old.region[1])
            if lo < hi and not any(x.region[0] <= lo and hi <= x.region[1] for x in kv[k + 1:i]):
                hit.append(old)
        out[ld.step] = hit
    return out


def check_plan(plan: list[Load]) -> list[str]:
    """What in the plan lets a load overwrite a tile before that tile's stage was released: for every K/V load,
    every earlier tile it covers must be one of a stage whose empty barrier the load waits on. Returns one
    message per violation (empty: the plan is safe given in-order loads)."""
    msgs = []
    for step, olds in overwrites(plan).items():
        ld = plan[step - 1]
        waited = {name for name, _ in ld.waits}
        for old in olds:
            if f"kv_empty[{old.stage}]" not in waited and not _released_before(plan, ld, old):
                msgs.append(f"step {step} ({ld.tile} into kv stage {ld.stage}, bytes {ld.region[0]}.."
                            f"{ld.region[1]}) overwrites {old.tile} (kv stage {old.stage}, step {old.step}) "
                            f"without waiting for kv_empty[{old.stage}]")
    return msgs


def _released_before(plan: list[Load], ld: Load, old: Load) -> bool:
    """An earlier load (between ``old`` and ``ld``) waited for ``old``'s stage to be released: loads are issued
    in order, so that wait covers ``ld`` too."""
    return any(x.buffer == "kv" and old.step < x.step < ld.step and x.stage == old.stage for x in plan)


def format_plan(plan: list[Load], names: str = "block") -> str:
    """The plan as a table: per load its step, tile, buffer and stage, phase, bytes and waits, and the occupancy
    of [Q stage 0, Q stage 1, KV stage 0, KV stage 1, KV stage 2] after it. ``names`` "block": K / V tiles
    named by KV block index; "order": by load order (K0 = the first K loaded, the seed's naming)."""
    if names not in ("block", "order"):
        raise bad_argument("names", names, "expected 'block' or 'order'")
    shown = [ld.tile if names == "block" or ld.buffer == "q" else f"{ld.tile[0]}{ld.pair}" for ld in plan]
    rows = [f"{'step':>4}  {'load':<5} {'stage':<6} {'phase':>5}  {'bytes':<15} {'waits':<28} occupancy"]
    for ld, name, occ in zip(plan, shown, occupancy((ld.buffer, ld.stage, n) for ld, n in zip(plan, shown))):
        waits = ", ".join(f"{n}@{p}" for n, p in ld.waits)
        rows.append(f"{ld.step:>4}  {name:<5} {ld.buffer + str(ld.stage):<6} {ld.phase:>5}  "
                    f"{f'{ld.region[0]}..{ld.region[1]}':<15} {waits:<28} [{', '.join(occ)}]")
    return "\n".join(rows)
