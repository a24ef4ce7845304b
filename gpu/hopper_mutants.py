"""The warp-specialised Hopper kernels of gpu/kernels (tma_pipeline.cu, wgmma_gemm.cu), their problems and
the catalogue of their planted bugs, as data: what each bug is, which build and problem show it, and what a
simulator should report where.

Nothing here needs cupy or a GPU. The kernels' sources describe each bug in their headers (as first
planned: for gg1 and gg7 what the interpreter shows is the catalogue's entry below, not the header's; the
headers stay as the recorded cubins were built from them); the ``// MUTANT n``
comment marks the line each bug changes and ``// @name`` the lines a report points at, so a test finds the
source line of an expected report with :func:`report_lines` (tests/test_hopper_kernels.py checks that every
marker exists exactly once and matches this catalogue). The runs, references and tensor maps are in
gpu/validate_hopper_kernels.py.

Report kinds: ``deadlock`` (every remaining thread waits on something no thread can provide: the report
names the parked threads, their wait and the barrier's state), ``race`` (two accesses to the same shared
memory, at least one a write, not ordered by a completed mbarrier phase, a barrier, a wgmma.wait_group /
cp.async.bulk.wait_group or a proxy fence; the generic and the async proxy counted as different agents),
``fault`` (an access outside any allocation), ``none`` (the SASS holds no bug: the report must be empty).
"""

from __future__ import annotations

import functools
import re
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["CATEGORIES", "KERNELS", "MUTANTS", "PROBLEMS", "HopperKernel", "Mutant", "Problem", "anchor_lines",
           "gemm_geometry", "kernel_of", "marker_lines", "mutant", "report_lines"]

_KERNELS_DIR = Path(__file__).resolve().parent / "kernels"


# ================================================================================================ kernels
@dataclass(frozen=True)
class HopperKernel:
    """One kernel: its source in gpu/kernels, entry point, the macro that plants bugs, the build macros
    with their allowed values and defaults."""

    name: str
    source: str
    function: str
    mutant_macro: str
    config: tuple[tuple[str, tuple[int, ...], int], ...]  # (macro, allowed values, default)
    anchor_prefix: str
    dims: tuple[tuple[str, int, int], ...]  # a problem's dims: (name, multiple of, minimum), in order
    roles_of: Any = None  # (build config) -> {role: warps of a CTA}: the adversarial schedules favour and delay them

    def roles(self, config: dict[str, int]) -> dict[str, tuple[int, ...]]:
        """The warps of each role in a CTA of a build (the source's header)."""
        return dict(self.roles_of({m: config.get(m, d) for m, _, d in self.config}))

    def __post_init__(self):
        for macro, allowed, default in self.config:
            if default not in allowed:
                raise ValueError(f"{self.name}: default {macro}={default!r} is not among {allowed}")

    def check_dims(self, dims: tuple[int, ...]) -> str | None:
        """Why ``dims`` is not a problem of this kernel, or None."""
        if len(dims) != len(self.dims):
            return f"expected {len(self.dims)} dims ({', '.join(d for d, _, _ in self.dims)}), got {dims}"
        for v, (name, mult, low) in zip(dims, self.dims):
            if v < low or v % mult:
                return f"{name}={v}: expected a multiple of {mult}, at least {low}"
        return None

    def defines(self, mutant: int = 0, **config: int) -> tuple[str, ...]:
        """The -D defines of a build (every config macro spelt out, then the mutant macro)."""
        names = {m for m, _, _ in self.config}
        unknown = set(config) - names
        if unknown:
            raise ValueError(f"{self.name}: unknown build macros {sorted(unknown)} (known: {sorted(names)})")
        out = []
        for macro, allowed, default in self.config:
            v = int(config.get(macro, default))
            if v not in allowed:
                raise ValueError(f"{self.name}: {macro}={v} is not among {allowed}")
            out.append(f"{macro}={v}")
        return (*out, f"{self.mutant_macro}={int(mutant)}")

    @property
    def path(self) -> Path:
        return _KERNELS_DIR / self.source

    def text(self) -> str:
        return self.path.read_text(encoding="utf-8")


KERNELS = types.MappingProxyType({k.name: k for k in (
    # rows a multiple of the tile's 16 rows, cols of its 32 columns
    HopperKernel("tma_pipeline", "tma_pipeline.cu", "tma_pipeline", "TP_MUTANT", (("TP_STAGES", (2, 3, 4), 4),),
                 "tp_", (("rows", 16, 16), ("cols", 32, 32)),
                 lambda cfg: {"producer": (0,), "consumer": (1, 2)}),
    # M a multiple of both builds' GG_BM (64, 128), N of GG_BN, K of GG_BK (K = 0 allowed)
    HopperKernel("wgmma_gemm", "wgmma_gemm.cu", "wgmma_gemm", "GG_MUTANT",
                 (("GG_CONSUMERS", (1, 2), 2), ("GG_STAGES", (2, 3, 4), 4)), "gg_",
                 (("M", 128, 128), ("N", 128, 128), ("K", 64, 0)),
                 lambda cfg: {"producer": (0, 1, 2, 3), "consumer": tuple(range(4, 4 + 4 * cfg["GG_CONSUMERS"]))}),
)})


def kernel_of(name: str) -> HopperKernel:
    try:
        return KERNELS[name]
    except KeyError:
        raise ValueError(f"no Hopper kernel {name!r} (kernels: {', '.join(KERNELS)})") from None


def gemm_geometry(consumers: int, stages: int) -> dict[str, int]:
    """wgmma_gemm's tile and launch sizes for a build (the macros GG_BM ... GG_SMEM_BYTES of the source)."""
    bm, bn, bk = 64 * consumers, 128, 64
    a_bytes, b_bytes = bm * bk * 2, bn * bk * 2
    return {"bm": bm, "bn": bn, "bk": bk, "a_bytes": a_bytes, "b_bytes": b_bytes, "threads": 128 * (consumers + 1),
            "smem": stages * (a_bytes + b_bytes) + 16 * stages + 1024}


#: tma_pipeline's tile (TP_BR rows x TP_BC f32 columns) and block
PIPE_BR, PIPE_BC, PIPE_THREADS = 16, 32, 96


# ================================================================================================ problems
@dataclass(frozen=True)
class Problem:
    """A seeded problem: tma_pipeline dims (rows, cols); wgmma_gemm dims (M, N, K)."""

    name: str
    kernel: str
    dims: tuple[int, ...]
    seed: int

    def __post_init__(self):
        why = kernel_of(self.kernel).check_dims(tuple(self.dims))
        if why:
            raise ValueError(f"problem {self.name}: {why}")


PROBLEMS = types.MappingProxyType({p.name: p for p in (
    # tma_pipeline: 8 tiles per CTA (rounds 0..3 with 2 stages), 2 CTAs
    Problem("tp_tiny", "tma_pipeline", (128, 64), 101),
    Problem("tp_small", "tma_pipeline", (144, 64), 102),
    Problem("tp_wide", "tma_pipeline", (384, 256), 103),
    # wgmma_gemm
    Problem("gg_tiny", "wgmma_gemm", (128, 128, 640), 201),  # one CTA, 10 K tiles (> 2 rounds of 4 stages)
    Problem("gg_one", "wgmma_gemm", (128, 128, 64), 202),
    Problem("gg_256", "wgmma_gemm", (256, 256, 256), 203),
    Problem("gg_rect", "wgmma_gemm", (384, 384, 640), 204),
    Problem("gg_1024", "wgmma_gemm", (1024, 1024, 1024), 205),
    Problem("gg_k0", "wgmma_gemm", (256, 256, 0), 206),  # zero-work CTAs: C = +0
)})


# ================================================================================================ the catalogue
#: the bug classes the mutants cover
CATEGORIES = types.MappingProxyType({
    "wrong_parity": "a wait on the wrong phase parity",
    "missing_arrive": "a consumer that never arrives on the empty barrier",
    "expect_tx": "mbarrier.expect_tx announcing the wrong number of bytes",
    "early_release": "a stage released before the wgmma reading it retired",
    "proxy_fence": "no fence.proxy.async between generic writes and the TMA store reading them",
    "wgmma_wait": "accumulators read without the wgmma.wait_group that retires their writer",
    "stage_advance": "a pipeline state (stage, phase) advanced wrongly",
    "arrival_count": "an mbarrier's init count unlike the number of arrivals",
    "out_of_bounds_copy": "a bulk copy reading past its allocation (no bounds check, no fill)",
    "zero_work": "a zero-work CTA skipping a handshake the other side relies on",
    "read_before_wait": "a stage read before waiting on its full barrier",
    "no_empty_wait": "a producer refilling a stage without waiting for its release",
    "bulk_group_wait": "shared memory reused before cp.async.bulk.wait_group.read retired its reader",
    "register_budget": "setmaxnreg asking for more registers than the CTA's pool holds",
})

KINDS = ("deadlock", "race", "fault", "none")


@dataclass(frozen=True)
class Mutant:
    """One planted bug: ``value`` of the kernel's mutant macro in the build ``config``, run on ``problem``.

    kind: what a simulator should report (KINDS); detail: the report's content (race kind, parked threads,
    barrier state); report_at: where, as source markers ("marker": the line of ``// MUTANT n``; "@name":
    the line of ``// @name``); gpu: what the GPU is expected to do ("hang", "wrong", "ok", or "any")."""

    id: str
    kernel: str
    value: int
    category: str
    summary: str
    kind: str
    detail: str
    report_at: tuple[str, ...]
    problem: str
    gpu: str
    config: tuple[tuple[str, int], ...] = field(default=())
    says: tuple[str, ...] = field(default=())  # phrases the simulator's report must contain

    def __post_init__(self):
        k = kernel_of(self.kernel)
        if self.category not in CATEGORIES:
            raise ValueError(f"{self.id}: unknown category {self.category!r}")
        if self.kind not in KINDS:
            raise ValueError(f"{self.id}: kind {self.kind!r} is not one of {KINDS}")
        if self.value < 1:
            raise ValueError(f"{self.id}: mutant values start at 1 (0 is the correct kernel)")
        if PROBLEMS[self.problem].kernel != self.kernel:
            raise ValueError(f"{self.id}: problem {self.problem!r} is not a {self.kernel} problem")
        k.defines(self.value, **dict(self.config))  # validates the config
        for where in self.report_at:
            if where != "marker" and not where.startswith("@" + k.anchor_prefix):
                raise ValueError(f"{self.id}: report_at {where!r} is neither 'marker' nor a @{k.anchor_prefix}* anchor")

    @property
    def defines(self) -> tuple[str, ...]:
        return kernel_of(self.kernel).defines(self.value, **dict(self.config))

    @property
    def build_config(self) -> dict[str, int]:
        return dict(self.config)


_TP3 = (("TP_STAGES", 3),)
_GG2 = (("GG_CONSUMERS", 2), ("GG_STAGES", 4))

MUTANTS: tuple[Mutant, ...] = (
    # ------------------------------------------------------------------------------ tma_pipeline.cu
    Mutant("tp1", "tma_pipeline", 1, "wrong_parity",
           "producer waits on empty[stage] with parity phase instead of phase ^ 1",
           "deadlock", "producer lane parked in mbarrier.try_wait.parity on empty[0] (phase 0 never completes: the "
           "consumers wait for tile 0 on full[0]); consumers parked at @tp_wait_full, tile 0",
           ("marker", "@tp_wait_full"), "tp_tiny", "hang", _TP3),
    Mutant("tp2", "tma_pipeline", 2, "missing_arrive",
           "consumer warp 2 never arrives on empty[stage]",
           "deadlock", "round 1: producer parked at @tp_wait_empty on empty[0] (1 of 2 arrivals, pending count 1); "
           "consumers parked at @tp_wait_full",
           ("@tp_wait_empty", "marker"), "tp_tiny", "hang", _TP3, ("arrivals 1 of 2",)),
    Mutant("tp3", "tma_pipeline", 3, "expect_tx",
           "arrive.expect_tx announces 2 tiles + halo: full[0] keeps 2048 bytes pending",
           "deadlock", "consumers parked at @tp_wait_full on full[0], tx-count 2048 pending, tile 0; producer at "
           "@tp_wait_empty in round 1",
           ("@tp_wait_full", "marker"), "tp_tiny", "hang", _TP3, ("tx-count 2048 bytes pending",)),
    Mutant("tp4", "tma_pipeline", 4, "proxy_fence",
           "__threadfence_block() (generic proxy only) instead of fence.proxy.async.shared::cta before the TMA store",
           "race", "cross-proxy RAW on ybuf: st.shared (generic proxy) at @tp_ybuf_write, TMA store read (async "
           "proxy) at @tp_tma_store, no fence.proxy.async between them",
           ("@tp_tma_store", "@tp_ybuf_write"), "tp_tiny", "any", _TP3, ("RAW (no fence.proxy.async)",)),
    Mutant("tp5", "tma_pipeline", 5, "stage_advance",
           "producer advances (stage, phase) twice per tile",
           "deadlock", "consumers parked at @tp_wait_full on full[1] (tile 1 went to another stage); producer "
           "parked at @tp_wait_empty",
           ("@tp_wait_full", "@tp_wait_empty"), "tp_tiny", "hang", _TP3),
    Mutant("tp6", "tma_pipeline", 6, "arrival_count",
           "empty[s] initialised with count 3 while 2 consumer warps arrive",
           "deadlock", "round 1: producer parked at @tp_wait_empty on empty[0] (2 of 3 arrivals, pending count 1)",
           ("@tp_wait_empty",), "tp_tiny", "hang", _TP3, ("arrivals 2 of 3", "initialised with count 3")),
    Mutant("tp7", "tma_pipeline", 7, "out_of_bounds_copy",
           "halo row (t + 1) * TP_BR without the wrap: the last tile's cp.async.bulk reads row `rows`, past x",
           "fault", "global read out of bounds by the cp.async.bulk at @tp_bulk_halo (128 bytes from x + rows * "
           "cols + col0, its source computed at MUTANT 7; the last tile of every CTA): a plain bulk copy has no "
           "tensor bounds and no zero fill",
           ("@tp_bulk_halo",), "tp_tiny", "any", _TP3, ("out-of-bounds global address",)),
    Mutant("tp8", "tma_pipeline", 8, "read_before_wait",
           "the consumer's first read of a stage hoisted above its wait on full[stage]",
           "race", "RAW on the stage: TMA write (async proxy) at @tp_tma_load, ld.shared at MUTANT 8 not ordered "
           "after the full[stage] phase that completes that write",
           ("marker", "@tp_tma_load"), "tp_tiny", "wrong", _TP3),
    Mutant("tp9", "tma_pipeline", 9, "bulk_group_wait",
           "cp.async.bulk.wait_group.read 1 instead of 0 before ybuf (one staging buffer) is rewritten",
           "race", "WAR on ybuf: TMA store of tile t-1 reads it (async proxy, @tp_tma_store, its bulk group not "
           "retired), st.shared of tile t at @tp_ybuf_write",
           ("@tp_ybuf_write", "@tp_tma_store", "marker"), "tp_tiny", "any", _TP3),
    # ------------------------------------------------------------------------------ wgmma_gemm.cu
    Mutant("gg1", "wgmma_gemm", 1, "wrong_parity",
           "consumer's in-loop wait on full[stage] uses parity phase ^ 1: it returns at once",
           "deadlock", "consumers parked at MUTANT 1 on full[1]: its phase 0 completed before they got there, so "
           "parity phase ^ 1 = 1 is the current phase's and the wait blocks; the producer waits on empty[0] for "
           "the release that comes only after that wait (the GPU hangs). Where a consumer overtakes the TMA the "
           "wait returns at once instead: RAW between the TMA write (@gg_tma_a / @gg_tma_b) and the wgmma read",
           ("marker",), "gg_tiny", "hang", _GG2),
    Mutant("gg2", "wgmma_gemm", 2, "early_release",
           "thread 0 arrives on empty[prev] before wgmma.wait_group 1 (the two lines swapped)",
           "race", "WAR on a stage: wgmma read at @gg_mma still in flight (retired only by the wait after "
           "MUTANT 2), TMA refill at @gg_tma_a / @gg_tma_b ordered only after the release",
           ("@gg_mma", "@gg_mma_first", "@gg_tma_a", "@gg_tma_b", "marker"), "gg_tiny", "any", _GG2),
    Mutant("gg3", "wgmma_gemm", 3, "wgmma_wait",
           "the last wgmma.wait_group is 1, not 0: the epilogue reads accumulators of a pending wgmma-group",
           "none", "ptxas repairs it: it injects WARPGROUP.DEPBAR.LE gsb0, 0x0 before the first read of the "
           "accumulators (NVRTC log: C7517 'warpgroup.wait is injected'), so the SASS reads them after the wait "
           "and the GPU computes the right C; what remains is the last stage's release (@gg_release_last) "
           "before that wait, which no later load reuses. A PTX-level checker would report a register hazard "
           "at @gg_epilogue; a SASS-level one must not",
           ("@gg_epilogue", "marker"), "gg_tiny", "ok", _GG2),
    Mutant("gg4", "wgmma_gemm", 4, "arrival_count",
           "empty[s] initialised with count 1 while GG_CONSUMERS = 2 warpgroups arrive",
           "race", "WAR on a stage: the other warpgroup's wgmma read at @gg_mma, TMA refill at @gg_tma_a / "
           "@gg_tma_b after a phase completed by one warpgroup's release; a deadlock may follow (phase drift)",
           ("@gg_mma", "@gg_mma_first", "@gg_tma_a", "@gg_tma_b"), "gg_tiny", "any", _GG2),
    Mutant("gg5", "wgmma_gemm", 5, "zero_work",
           "peeled first K tile guarded by k_tiles >= 0: with K = 0 the consumers wait for a tile never loaded",
           "deadlock", "K = 0: every consumer warp parked at @gg_wait_first on full[0] (phase 0, no arrival will "
           "come: the producer's loop is empty and its warps have exited)",
           ("@gg_wait_first",), "gg_k0", "hang", _GG2),
    Mutant("gg6", "wgmma_gemm", 6, "no_empty_wait",
           "producer calls try_wait.parity on empty[stage] once and ignores the result",
           "race", "WAR on a stage: wgmma read at @gg_mma, TMA refill at @gg_tma_a / @gg_tma_b not ordered after "
           "the release; possibly first an mbarrier misuse (arrive.expect_tx on full[stage] while the phase's "
           "bytes are still pending)",
           ("@gg_tma_a", "@gg_tma_b", "@gg_mma", "@gg_mma_first", "marker"), "gg_tiny", "any", _GG2),
    Mutant("gg7", "wgmma_gemm", 7, "register_budget",
           "consumers setmaxnreg.inc 240 while the producer's dec to 40 frees only enough for 232",
           "deadlock", "a consumer warp parked at MUTANT 7 (setmaxnreg.inc: after the producer's dec and the other "
           "increases the CTA's pool lacks the 32 x 72 registers it asks for); where the other warps stop depends "
           "on how the GPU grants a warpgroup's registers (per warp in flashsim: the warpgroup's other warps go on)",
           ("marker",), "gg_tiny", "hang", _GG2),
    Mutant("gg8", "wgmma_gemm", 8, "expect_tx",
           "arrive.expect_tx counts only the A tile (GG_A_BYTES), the B bytes forgotten",
           "race", "RAW on a stage: TMA write of B (or A) at @gg_tma_b / @gg_tma_a lands after the full phase "
           "completed, wgmma read at @gg_mma; the surplus complete_tx drives later tx-counts negative and a "
           "phase of round 2 never completes: deadlock follows (consumers at @gg_wait_full)",
           ("@gg_mma", "@gg_mma_first", "@gg_tma_a", "@gg_tma_b"), "gg_tiny", "hang", _GG2,
           ("announced fewer bytes than its copies bring",)),
)

_BY_ID = {m.id: m for m in MUTANTS}


def mutant(mid: str) -> Mutant:
    try:
        return _BY_ID[mid]
    except KeyError:
        raise ValueError(f"no mutant {mid!r} (mutants: {', '.join(_BY_ID)})") from None


# ================================================================================================ markers
_MARKER_RE = re.compile(r"//\s*MUTANT (\d+)\b")
_ANCHOR_RE = re.compile(r"//\s*(@[a-z][a-z0-9_]*)")


@functools.lru_cache(maxsize=None)
def _scan(text: str) -> tuple[dict[int, list[int]], dict[str, list[int]]]:
    markers: dict[int, list[int]] = {}
    anchors: dict[str, list[int]] = {}
    for i, line in enumerate(text.splitlines(), 1):
        code = line.split("//", 1)
        if len(code) < 2 or not code[0].strip():
            continue  # markers and anchors sit on code lines, not in the header's prose
        for m in _MARKER_RE.finditer(line):
            markers.setdefault(int(m.group(1)), []).append(i)
        for m in _ANCHOR_RE.finditer(line):
            anchors.setdefault(m.group(1), []).append(i)
    return markers, anchors


def marker_lines(kernel: str, text: str | None = None) -> dict[int, list[int]]:
    """{n: [lines of ``// MUTANT n``]} of a kernel's source (1-based; code lines only)."""
    return _scan(kernel_of(kernel).text() if text is None else text)[0]


def anchor_lines(kernel: str, text: str | None = None) -> dict[str, list[int]]:
    """{"@name": [lines of ``// @name``]} of a kernel's source (1-based; code lines only)."""
    return _scan(kernel_of(kernel).text() if text is None else text)[1]


def report_lines(m: Mutant) -> dict[str, int]:
    """Where the mutant's report should point: {"marker" or "@name": line of the source file}."""
    markers, anchors = marker_lines(m.kernel), anchor_lines(m.kernel)
    out = {}
    for where in m.report_at:
        lines = markers.get(m.value, []) if where == "marker" else anchors.get(where, [])
        if len(lines) != 1:
            raise ValueError(f"{m.id}: {where} is on {len(lines)} lines of {kernel_of(m.kernel).source} (expected 1)")
        out[where] = lines[0]
    return out
