"""The warp-specialised Hopper kernels (gpu/kernels/tma_pipeline.cu, wgmma_gemm.cu) and their planted bugs on
the GPU: correct runs checked and recorded for replay in the interpreter, every mutant run on the GPU and
under compute-sanitizer.

    python -m flashsim.gpu.validate_hopper_kernels --out DIR [--record] [--jobs 8] [--timeout 20]
                                                   [--tools racecheck,synccheck,memcheck] [--sanitizer PATH]
                                                   [--mutants tp1,gg5,...]
    python -m flashsim.gpu.validate_hopper_kernels --out DIR --dry-run        (builds only; no GPU, no cupy)
    python -m flashsim.gpu.validate_hopper_kernels --run-one KERNEL MUTANT --cubin FILE --problems P[,P]
                                                   [--config MACRO=V,...] [--outputs DIR] [--hang-after S]

1. Builds: every configuration and every mutant (gpu/hopper_mutants.py: KERNELS, MUTANTS) is compiled once
   by flashsim's NVRTC (the pinned 13.0 wheel) for sm_90a, as gpu/validate_mbarrier.py builds, and written to
   DIR/cubins/; the GPU loads those very bytes (gpu.runtime.load_cubin), the bytes the interpreter runs.
2. Correct runs: tma_pipeline with TP_STAGES 2, 3, 4 and wgmma_gemm with (GG_CONSUMERS, GG_STAGES) (1, 4),
   (2, 4), (2, 3) on the seeded problems of hopper_mutants.PROBLEMS (GEMM: M = N = K = 256 and 1024, a
   rectangular one, one tile, K = 0). Inputs: tma_pipeline normal f32 in +-[2^-8, 2^8); wgmma_gemm random bf16
   bit patterns with exponents in [-4, 4]. Checks: tma_pipeline bit for bit against numpy (both outputs are one
   correctly rounded FFMA); wgmma_gemm against float64 within a bound of the accumulation error, and bit for
   bit against flashsim's wgmma model (flashsim.numerics.wgmma.wgmma_chain, the k-steps in program order;
   reported, not an exit criterion: that model is checked against the H100 by validate_wgmma). Tensor maps
   are encoded on the device's own allocations by the driver's cuTensorMapEncodeTiled (ctypes, libcuda.so.1;
   enum values of cuda.h: CU_TENSOR_MAP_DATA_TYPE_FLOAT32 = 7, _BFLOAT16 = 9, CU_TENSOR_MAP_SWIZZLE_NONE = 0,
   _128B = 3, interleave / L2 promotion / OOB fill NONE = 0) and passed by value (128 bytes) as the
   kernels' __grid_constant__ parameters.
3. Mutants: each on its tiny problem, on the GPU (a hang is expected of most: the child reports "hang" when
   the kernel has not finished after --hang-after seconds and exits; the parent kills it at --timeout) and
   under ``compute-sanitizer --tool racecheck``, ``synccheck`` (and ``memcheck``), each in its own process
   group with a timeout; the tool's summary lines and report headlines are kept. The correct builds run under
   the tools too (controls: what the tools say about bug-free TMA/wgmma code).
4. Every GPU launch happens in a child process (``--run-one``), at most --jobs at a time, so a hang never
   stops the script; the whole run takes about 3 minutes on an H100 (budget: 6).

Writes DIR/hopper_kernels.json (provenance: device, driver, toolchain, date, command; builds with sha256 and
NVRTC logs; every check; every mutant with its catalogue entry, source lines, GPU outcome and tool verdicts),
DIR/sanitizer_table.md (mutant x {GPU outcome, racecheck, synccheck, memcheck}), DIR/cubins/, DIR/logs/
(each child's output). With --record the JSON also holds the sha256 of every output of every correct run
(the inputs regenerate from their seeds; the tensor maps' bytes and the cubins' digests are there anyway), and
DIR/hopper_cubins.npz the cubins the GPU ran (NVRTC writes the sources' file times and paths into the line
table, so a build elsewhere differs there): both belong in traces/hopper/, where the interpreter's replay
(tests/test_hopper_interp.py) runs those cubins and compares the digests of its outputs with the GPU's.
Exit status 1 when a correct run differs from its reference, hangs or faults; the mutants' outcomes are data.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import functools
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from flashsim.errors import bad_argument
from flashsim.gpu import hopper_mutants as HM
from flashsim.gpu.hopper_mutants import MUTANTS, PROBLEMS, Mutant, Problem, gemm_geometry, kernel_of

__all__ = ["ARCH", "CORRECT_RUNS", "SENTINEL", "TOOLS", "Build", "TensorMapSpec", "all_builds",
           "build", "build_key", "check_gemm", "check_pipeline", "encode_tiled", "gemm_inputs", "gemm_model",
           "gemm_reference", "launch_geometry", "main", "parse_tool_output", "pipeline_inputs",
           "pipeline_reference", "problem_inputs", "tensor_map_specs"]

ARCH = "sm_90a"
REPO = Path(__file__).resolve().parent.parent
#: the bit pattern the outputs are filled with before a launch (a NaN no kernel computes): unwritten elements show
SENTINEL = 0x7FBADBAD
#: arrays up to this many elements go into the record; bigger ones are recorded as sha256 (inputs regenerate)
TOOLS = ("racecheck", "synccheck", "memcheck")
DEFAULT_SANITIZER = "/usr/local/cuda/bin/compute-sanitizer"
TOOL_ARGS = {"racecheck": ("--racecheck-report", "all"), "synccheck": (), "memcheck": ()}
COMMON_TOOL_ARGS = ("--show-backtrace", "no", "--print-limit", "20")
RESULT_MARK = "HOPPER_PROBLEM"
HANG_EXIT = 3

_GG_ALL = ("gg_one", "gg_256", "gg_rect", "gg_1024", "gg_k0", "gg_tiny")
#: the correct builds and the problems each one runs (and records)
CORRECT_RUNS: tuple[tuple[str, tuple[tuple[str, int], ...], tuple[str, ...]], ...] = (
    ("tma_pipeline", (("TP_STAGES", 2),), ("tp_tiny", "tp_small", "tp_wide")),
    ("tma_pipeline", (("TP_STAGES", 3),), ("tp_tiny", "tp_small", "tp_wide")),
    ("tma_pipeline", (("TP_STAGES", 4),), ("tp_tiny", "tp_small", "tp_wide")),
    ("wgmma_gemm", (("GG_CONSUMERS", 1), ("GG_STAGES", 4)), _GG_ALL),
    ("wgmma_gemm", (("GG_CONSUMERS", 2), ("GG_STAGES", 4)), _GG_ALL),
    ("wgmma_gemm", (("GG_CONSUMERS", 2), ("GG_STAGES", 3)), ("gg_256", "gg_rect", "gg_k0", "gg_tiny")),
)
#: the correct builds that also run under the tools (controls), on these problems
TOOL_CONTROLS: tuple[tuple[str, tuple[tuple[str, int], ...], str], ...] = (
    ("tma_pipeline", (("TP_STAGES", 3),), "tp_tiny"),
    ("wgmma_gemm", (("GG_CONSUMERS", 2), ("GG_STAGES", 4)), "gg_tiny"),
)


# ================================================================================================ builds
@dataclass(frozen=True)
class Build:
    """One sm_90a build: kernel, -D defines, cubin bytes and NVRTC's log."""

    key: str
    kernel: str
    mutant: int
    defines: tuple[str, ...]
    cubin: bytes = field(repr=False)
    log: str = ""

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.cubin).hexdigest()

    @property
    def config(self) -> dict[str, int]:
        return {d.split("=")[0]: int(d.split("=")[1]) for d in self.defines if not d.endswith(f"_MUTANT={self.mutant}")}


def build_key(kernel: str, mutant: int = 0, **config: int) -> str:
    """A file-safe name of a build: tma_pipeline_s3_m0, wgmma_gemm_c2_s4_m5."""
    k = kernel_of(kernel)
    parts = [kernel]
    for d in k.defines(mutant, **config)[:-1]:
        macro, v = d.split("=")
        parts.append(("c" if macro.endswith("CONSUMERS") else "s") + v)
    return "_".join(parts + [f"m{mutant}"])


@functools.lru_cache(maxsize=None)
def _build(kernel: str, mutant: int, config: tuple[tuple[str, int], ...]) -> Build:
    from flashsim.kernels.sources import BASE_OPTIONS, KERNELS_DIR, kernel_path, source_hash
    from flashsim.sass.toolchain import compile_cuda

    k = kernel_of(kernel)
    defines = k.defines(mutant, **dict(config))
    path = kernel_path(k.source)
    code = f'#line 1 "gpu/kernels/{path.name}"\n' + path.read_text(encoding="utf-8")
    common = (*BASE_OPTIONS, f"-DFLASHSIM_SOURCE_HASH=0x{source_hash(k.source)[:16]}", *(f"-D{d}" for d in defines))
    cubin, log, _ = compile_cuda(code, name=path.name, options=(*common, f"--include-path={KERNELS_DIR}"),
                                 key_options=(*common, "--include-path=gpu/kernels"), arch=ARCH)
    return Build(build_key(kernel, mutant, **dict(config)), kernel, mutant, defines, bytes(cubin), log.strip())


def build(kernel: str, mutant: int = 0, **config: int) -> Build:
    """``gpu/kernels/<kernel>.cu`` with the mutant macro and the config macros (others at their defaults),
    built for sm_90a as validate_mbarrier builds (repository-relative #line name and cache key)."""
    k = kernel_of(kernel)
    full = tuple((d.split("=")[0], int(d.split("=")[1])) for d in k.defines(mutant, **config)[:-1])
    return _build(kernel, int(mutant), full)


def interpreter_module(b: Build) -> Any:
    """The build's cubin as a flashsim.cuda module (the interpreter runs the GPU's bytes)."""
    import flashsim.cuda as fc

    return fc.RawModule(cubin=b.cubin)


def all_builds() -> dict[str, Build]:
    """Every build the validation uses: the correct configurations, then the mutants."""
    out: dict[str, Build] = {}
    for kernel, config, _ in CORRECT_RUNS:
        b = build(kernel, 0, **dict(config))
        out[b.key] = b
    for m in MUTANTS:
        b = build(m.kernel, 0, **m.build_config)
        out.setdefault(b.key, b)
        b = build(m.kernel, m.value, **m.build_config)
        out[b.key] = b
    return out


# ================================================================================================ tensor maps
#: cuda.h, "CUtensorMapDataType_enum" / "CUtensorMapSwizzle_enum" (the driver API's enums)
TMAP_DTYPES = {"f32": (7, 4), "bf16": (9, 2)}  # CU_TENSOR_MAP_DATA_TYPE_FLOAT32, _BFLOAT16: (enum, bytes)
TMAP_SWIZZLES = {"none": (0, 0), "32B": (1, 32), "64B": (2, 64), "128B": (3, 128)}  # (enum, span bytes)
TMAP_INTERLEAVE_NONE = 0
TMAP_L2_PROMOTION_NONE = 0
TMAP_OOB_FILL_NONE = 0  # out-of-bounds elements of a box read as zeros


@dataclass(frozen=True)
class TensorMapSpec:
    """The arguments of one cuTensorMapEncodeTiled call but the address: dims and box innermost first
    (elements), strides in bytes of dims 1.. (rank - 1 of them), element strides all 1."""

    name: str
    dtype: str
    dims: tuple[int, ...]
    strides: tuple[int, ...]
    box: tuple[int, ...]
    swizzle: str = "none"

    def __post_init__(self):
        # the requirements cuda.h lists for cuTensorMapEncodeTiled
        if self.dtype not in TMAP_DTYPES:
            raise bad_argument("dtype", self.dtype, f"expected one of {sorted(TMAP_DTYPES)}")
        if self.swizzle not in TMAP_SWIZZLES:
            raise bad_argument("swizzle", self.swizzle, f"expected one of {sorted(TMAP_SWIZZLES)}")
        rank = len(self.dims)
        if not 1 <= rank <= 5 or len(self.box) != rank or len(self.strides) != rank - 1:
            raise bad_argument("dims", (self.dims, self.strides, self.box),
                               "rank 1..5, a box of the same rank, rank - 1 strides")
        if any(not 0 < d <= 1 << 32 for d in self.dims):
            raise bad_argument("dims", self.dims, "every dim in 1..2^32")
        if any(s % 16 or s >= 1 << 40 for s in self.strides):
            raise bad_argument("strides", self.strides, "multiples of 16 bytes below 2^40")
        if any(not 0 < b <= 256 for b in self.box):
            raise bad_argument("box", self.box, "every box dim in 1..256")
        esize = TMAP_DTYPES[self.dtype][1]
        if (self.box[0] * esize) % 16:
            raise bad_argument("box", self.box, "the inner box extent must be a multiple of 16 bytes")
        span = TMAP_SWIZZLES[self.swizzle][1]
        if span and self.box[0] * esize > span:
            raise bad_argument("box", self.box, f"the inner box extent must not exceed the {self.swizzle} swizzle span")

    @property
    def box_bytes(self) -> int:
        return int(np.prod(self.box)) * TMAP_DTYPES[self.dtype][1]

    def encode_args(self, address: int) -> tuple:
        """cuTensorMapEncodeTiled's arguments after the output pointer, for a tensor at ``address``."""
        rank = len(self.dims)
        return (TMAP_DTYPES[self.dtype][0], rank, address, self.dims, self.strides, self.box, (1,) * rank,
                TMAP_INTERLEAVE_NONE, TMAP_SWIZZLES[self.swizzle][0], TMAP_L2_PROMOTION_NONE, TMAP_OOB_FILL_NONE)

    def as_dict(self) -> dict:
        d = asdict(self)
        d["dtype_enum"], d["swizzle_enum"] = TMAP_DTYPES[self.dtype][0], TMAP_SWIZZLES[self.swizzle][0]
        d.update(element_strides=[1] * len(self.dims), interleave=TMAP_INTERLEAVE_NONE,
                 l2_promotion=TMAP_L2_PROMOTION_NONE, oob_fill=TMAP_OOB_FILL_NONE)
        return d


def encode_tiled(spec: TensorMapSpec, address: int) -> bytes:
    """The 128 bytes of the CUtensorMap the driver encodes for ``spec`` at device ``address`` (needs a current
    context: call after cupy has touched the device)."""
    from flashsim.gpu import runtime

    dtype, rank, _, dims, strides, box, estr, *enums = spec.encode_args(address)
    return runtime.encode_tensor_map((dtype, rank, dims, strides, box, estr, *enums), address, spec.name,
                                     spec.as_dict())


def tensor_map_arg(raw: bytes) -> np.ndarray:
    """A 128-byte CUtensorMap as a cupy kernel argument passed by value (a numpy array of one element)."""
    return np.frombuffer(bytes(raw), dtype=np.dtype((np.void, 128))).copy()


# ================================================================================================ inputs, references
def pipeline_inputs(seed: int, rows: int, cols: int) -> np.ndarray:
    """tma_pipeline's x (rows, cols) f32: normal numbers in +-[2^-8, 2^8) (no subnormal can arise in 2x + n)."""
    rng = np.random.default_rng([seed, 31])
    mag = np.exp2(rng.uniform(-8, 8, (rows, cols)))
    return (mag * rng.choice([-1.0, 1.0], mag.shape)).astype(np.float32)


def pipeline_reference(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(out, y): out[i][j] = 2 x[i][j] + x[i][strip + (j + 1) % 32] and y[i][j] = 2 x[i][j] + x[(i + 1) % rows][j],
    each one correctly rounded f32 operation (2x is exact), as the kernel's FFMA."""
    rows, cols = x.shape
    strips = x.reshape(rows, cols // HM.PIPE_BC, HM.PIPE_BC)
    right = np.roll(strips, -1, axis=2).reshape(rows, cols)
    below = np.roll(x, -1, axis=0)
    two = np.float32(2)
    return (two * x + right).astype(np.float32), (two * x + below).astype(np.float32)


def gemm_inputs(seed: int, m: int, n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """wgmma_gemm's A (m, max(k, 64)) and B (n, max(k, 64)) bf16 bit patterns (uint16): random signs and
    mantissas, exponents in [-4, 4] (|x| in [2^-4, 2^5)). With K = 0 the 64 columns are never read."""
    rng = np.random.default_rng([seed, 32])
    ka = max(k, 64)

    def draw(rows):
        e = rng.integers(127 - 4, 127 + 5, (rows, ka))
        mant = rng.integers(0, 128, (rows, ka))
        s = rng.integers(0, 2, (rows, ka))
        return ((s << 15) | (e << 7) | mant).astype(np.uint16)

    return draw(m), draw(n)


def _bf16_to_f64(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def gemm_reference(a: np.ndarray, b: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(C in float64, an error bound per element): C = A[:, :k] B[:, :k]^T. The bound: k/16 chained wgmma,
    each truncating its 17 terms to 25 fraction bits below the largest and rounding toward zero, so at most
    (k/16 + 1) * 34 * 2^-24 * sum_k |a||b| (an overestimate; the bit-exact check is gemm_model)."""
    af, bf = _bf16_to_f64(a[:, :k]), _bf16_to_f64(b[:, :k])
    ref = af @ bf.T
    bound = (k / 16 + 1) * 34 * 2.0 ** -24 * (np.abs(af) @ np.abs(bf).T)
    return ref, bound


def gemm_model(a: np.ndarray, b: np.ndarray, k: int) -> np.ndarray:
    """C (M, N) as f32 bits from flashsim's wgmma model: per 64 x 128 tile the k/16 wgmma m64n128k16 in program
    order (the first with scale-d 0), exactly what a consumer warpgroup issues. K = 0: +0."""
    m, n = a.shape[0], b.shape[0]
    if k == 0:
        return np.zeros((m, n), np.uint32)
    from flashsim.numerics.wgmma import wgmma_chain

    mb, nb = m // 64, n // 128
    a_t = np.broadcast_to(a[:, :k].reshape(mb, 1, 64, k), (mb, nb, 64, k))
    b_t = np.broadcast_to(b[:, :k].reshape(1, nb, 128, k).transpose(0, 1, 3, 2), (mb, nb, k, 128))  # K x N tiles
    c0 = np.zeros((mb, nb, 64, 128), np.uint32)
    d = wgmma_chain(np.ascontiguousarray(a_t), np.ascontiguousarray(b_t), c0, n=128, atype="bf16", ctype="f32",
                    scale_d=0)
    return np.ascontiguousarray(d.transpose(0, 2, 1, 3).reshape(m, n)).astype(np.uint32)


def check_pipeline(x: np.ndarray, got: dict[str, np.ndarray]) -> dict[str, Any]:
    """Bit-for-bit comparison of out and y with the reference (and how many elements were never written)."""
    want = dict(zip(("out", "y"), pipeline_reference(x)))
    res: dict[str, Any] = {"elements": int(x.size) * 2}
    bad_total = 0
    for k in ("out", "y"):
        g = got[k].view(np.uint32).reshape(x.shape)
        w = want[k].view(np.uint32)
        bad = np.nonzero(g != w)
        res[f"{k}_mismatches"] = int(len(bad[0]))
        res[f"{k}_unwritten"] = int((g == SENTINEL).sum())
        if len(bad[0]):
            i, j = int(bad[0][0]), int(bad[1][0])
            res[f"{k}_first"] = f"[{i}][{j}]: GPU {int(g[i, j]):#010x}, reference {int(w[i, j]):#010x}"
        bad_total += len(bad[0])
    res["mismatches"] = int(bad_total)
    res["equal"] = bad_total == 0
    return res


def check_gemm(a: np.ndarray, b: np.ndarray, k: int, c_bits: np.ndarray, model: np.ndarray | None = None) -> dict:
    """C against float64 (within gemm_reference's bound) and against the wgmma model bit for bit."""
    ref, bound = gemm_reference(a, b, k)
    c_bits = c_bits.view(np.uint32).reshape(ref.shape)
    with np.errstate(invalid="ignore"):  # the sentinel and a wrong kernel's output may be NaN
        c = c_bits.view(np.float32).astype(np.float64)
        err = np.abs(c - ref)
        over = ~(err <= bound)  # NaN (unwritten) counts as over
    model = gemm_model(a, b, k) if model is None else model
    mism = c_bits != model
    with np.errstate(invalid="ignore", divide="ignore"):
        finite = np.isfinite(err)
        ratio = np.where(bound > 0, err / np.where(bound > 0, bound, 1), err)
        res = {"elements": int(c.size), "unwritten": int((c_bits == SENTINEL).sum()), "over_bound": int(over.sum()),
               "nonfinite": int((~finite).sum()),
               "max_abs_error": float(err[finite].max()) if finite.any() else 0.0,
               "max_error_over_bound": float(ratio[finite].max()) if finite.any() else 0.0,
               "model_mismatches": int(mism.sum()), "equal": bool(not over.any())}
    if k == 0:
        res["nonzero_bits"] = int((c_bits != 0).sum())  # K = 0: C must be +0 everywhere
        res["equal"] = res["equal"] and res["nonzero_bits"] == 0
    if mism.any():
        i, j = (int(v[0]) for v in np.nonzero(mism))
        res["model_first"] = f"[{i}][{j}]: GPU {int(c_bits[i, j]):#010x}, model {int(model[i, j]):#010x}"
    res["mismatches"] = res["model_mismatches"]
    return res


# ================================================================================================ per kernel
@dataclass(frozen=True)
class HostSide:
    """What the host does for one kernel (registered once in HOST, read by every step): its inputs, its
    outputs (uint32 arrays filled with SENTINEL), its tensor maps (and the array each one addresses), the
    launch geometry, the kernel's argument list, the reference precomputed once per problem, the check."""

    inputs: Any  # (problem) -> {name: array}
    outputs: Any  # (problem) -> {name: shape}
    tensor_maps: Any  # (config, problem) -> [TensorMapSpec], in parameter order
    map_targets: tuple[tuple[str, str], ...]  # (tensor map, the input or output array it addresses)
    geometry: Any  # (config, problem) -> {"grid", "block", "shared_mem"}
    args: Any  # (maps {name: argument}, arrays {name: device array}, problem) -> kernel arguments
    precompute: Any  # (inputs, problem) -> what check needs besides them (None: nothing)
    check: Any  # (inputs, outputs {name: array}, problem, precomputed) -> {"equal", "mismatches", ...}


def _pipeline_maps(config: dict[str, int], problem: Problem) -> list[TensorMapSpec]:
    rows, cols = problem.dims
    return [TensorMapSpec(n, "f32", (cols, rows), (cols * 4,), (HM.PIPE_BC, HM.PIPE_BR)) for n in ("tm_x", "tm_y")]


def _gemm_maps(config: dict[str, int], problem: Problem) -> list[TensorMapSpec]:
    m, n, k = problem.dims
    ka = max(k, 64)  # K = 0: the maps cover a 64-wide allocation the kernel never reads (dims must be > 0)
    g = gemm_geometry(config["GG_CONSUMERS"], config["GG_STAGES"])
    return [TensorMapSpec("tm_a", "bf16", (ka, m), (ka * 2,), (64, g["bm"]), "128B"),
            TensorMapSpec("tm_b", "bf16", (ka, n), (ka * 2,), (64, g["bn"]), "128B")]


def _pipeline_geometry(config: dict[str, int], problem: Problem) -> dict[str, Any]:
    rows, cols = problem.dims
    return {"grid": (cols // HM.PIPE_BC, 1, 1), "block": (HM.PIPE_THREADS, 1, 1), "shared_mem": 0}


def _gemm_geometry(config: dict[str, int], problem: Problem) -> dict[str, Any]:
    m, n, _ = problem.dims
    g = gemm_geometry(config["GG_CONSUMERS"], config["GG_STAGES"])
    return {"grid": (n // g["bn"], m // g["bm"], 1), "block": (g["threads"], 1, 1), "shared_mem": g["smem"]}


HOST = {
    "tma_pipeline": HostSide(
        inputs=lambda p: {"x": pipeline_inputs(p.seed, *p.dims)},
        outputs=lambda p: {"out": p.dims, "y": p.dims},
        tensor_maps=_pipeline_maps, map_targets=(("tm_x", "x"), ("tm_y", "y")), geometry=_pipeline_geometry,
        args=lambda maps, d, p: (maps["tm_x"], maps["tm_y"], d["x"], d["out"], np.int32(p.dims[0]),
                                 np.int32(p.dims[1])),
        precompute=lambda ins, p: None,
        check=lambda ins, got, p, pre: check_pipeline(ins["x"], got)),
    "wgmma_gemm": HostSide(
        inputs=lambda p: dict(zip(("a", "b"), gemm_inputs(p.seed, *p.dims))),
        outputs=lambda p: {"c": p.dims[:2]},
        tensor_maps=_gemm_maps, map_targets=(("tm_a", "a"), ("tm_b", "b")), geometry=_gemm_geometry,
        args=lambda maps, d, p: (maps["tm_a"], maps["tm_b"], d["c"], np.int32(p.dims[1]), np.int32(p.dims[2])),
        precompute=lambda ins, p: gemm_model(ins["a"], ins["b"], p.dims[2]),
        check=lambda ins, got, p, pre: check_gemm(ins["a"], ins["b"], p.dims[2], got["c"], pre)),
}
assert set(HOST) == set(HM.KERNELS)


def host_of(kernel: str) -> HostSide:
    kernel_of(kernel)  # a clear error for an unknown name
    return HOST[kernel]


def problem_inputs(problem: Problem) -> dict[str, np.ndarray]:
    return host_of(problem.kernel).inputs(problem)


def tensor_map_specs(kernel: str, config: dict[str, int], problem: Problem) -> list[TensorMapSpec]:
    """The kernel's tensor-map parameters, in parameter order, for a problem."""
    return host_of(kernel).tensor_maps(config, problem)


def launch_geometry(kernel: str, config: dict[str, int], problem: Problem) -> dict[str, Any]:
    """grid, block, dynamic shared memory bytes of a launch."""
    return host_of(kernel).geometry(config, problem)


def _sha(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


# ================================================================================================ the child (GPU)
def _parse_config(text: str | None) -> dict[str, int]:
    out = {}
    for part in (text or "").split(","):
        if part.strip():
            k, _, v = part.partition("=")
            out[k.strip()] = int(v)
    return out


def _emit(rec: dict) -> None:
    print(f"{RESULT_MARK} {json.dumps(rec, default=_json)}", flush=True)


def run_one(kernel: str, mutant: int, cubin_path: str, problems: Sequence[str], config: dict[str, int],
            outputs: str | None, hang_after: float) -> int:
    """The child: load the cubin, run each problem once, print one HOPPER_PROBLEM line per problem (status
    done / hang / fault / error, tensor maps, timings) and save its outputs to OUTPUTS/<problem>.npz. A kernel
    still running after ``hang_after`` seconds is reported as a hang and the process ends at once (os._exit:
    no clean-up that would wait for the kernel)."""
    from flashsim.gpu import runtime

    k = kernel_of(kernel)
    full_cfg = {d.split("=")[0]: int(d.split("=")[1]) for d in k.defines(mutant, **config)[:-1]}
    cupy = runtime.require_gpu()
    cupy.cuda.set_allocator(None)  # every array its own cudaMalloc: exact bounds for memcheck
    cubin = Path(cubin_path).read_bytes()
    fn = runtime.load_cubin(cubin).get_function(k.function)
    _emit({"problem": None, "status": "loaded", "device": runtime.device_info(),
           "cubin_sha256": hashlib.sha256(cubin).hexdigest()})
    out_dir = Path(outputs) if outputs else None
    if out_dir:
        out_dir.mkdir(parents=True, exist_ok=True)
    for name in problems:
        p = PROBLEMS[name]
        rec: dict[str, Any] = {"problem": name, "kernel": kernel, "mutant": mutant, "config": full_cfg}
        try:
            host = host_of(kernel)
            ins = host.inputs(p)
            geo = host.geometry(full_cfg, p)
            specs = host.tensor_maps(full_cfg, p)
            outs = {o: cupy.asarray(np.full(shape, SENTINEL, np.uint32)) for o, shape in host.outputs(p).items()}
            d = {**{i: cupy.asarray(a) for i, a in ins.items()}, **outs}
            targets = dict(host.map_targets)
            bases = {sp.name: int(d[targets[sp.name]].data.ptr) for sp in specs}
            cupy.cuda.runtime.deviceSynchronize()
            maps = {sp.name: encode_tiled(sp, bases[sp.name]) for sp in specs}
            args = host.args({t: tensor_map_arg(raw) for t, raw in maps.items()}, d, p)
            if geo["shared_mem"]:
                try:
                    fn.max_dynamic_shared_size_bytes = geo["shared_mem"]
                except AttributeError:  # a bare cupy.cuda.Function: set the attribute through the driver
                    ptr = getattr(fn, "ptr", None) or fn.kernel.ptr
                    cupy.cuda.driver.funcSetAttribute(ptr, 8, geo["shared_mem"])  # ..._MAX_DYNAMIC_SHARED_SIZE_BYTES
            rec.update(grid=geo["grid"], block=geo["block"], shared_mem=geo["shared_mem"],
                       tensor_maps={s.name: {**s.as_dict(), "address": bases[s.name],
                                             "bytes": maps[s.name].hex()} for s in specs},
                       input_sha256={kk_: _sha(v) for kk_, v in ins.items()})
        except Exception as exc:  # noqa: BLE001 - reported to the parent
            rec.update(status="error", message=f"{type(exc).__name__}: {str(exc)[:2000]}")
            _emit(rec)
            return 2
        seconds = launch_watched(cupy, lambda: fn(geo["grid"], geo["block"], args, shared_mem=geo["shared_mem"]),
                                 rec, hang_after, _emit)
        rec.update(status="done", seconds=round(seconds, 4))
        if out_dir:
            arrays = {kk_: cupy.asnumpy(v) for kk_, v in outs.items()}
            arrays.update({f"tmap/{kk_}": np.frombuffer(v, np.uint8) for kk_, v in maps.items()})
            np.savez(out_dir / f"{name}.npz", **arrays)
        _emit(rec)
    return 0


def launch_watched(cupy, launch, rec: dict, hang_after: float, emit) -> float:
    """(In a child) ``launch()`` a kernel and poll until it ends: its seconds. A kernel still running after
    ``hang_after`` seconds: ``emit(rec)`` with status "hang" and the process ends at once (os._exit(HANG_EXIT): no
    clean-up that would wait for the kernel); a fault (illegal address, ...) ends the context: status "fault"
    and exit 4."""
    ev = cupy.cuda.Event()
    t0 = time.time()
    try:
        launch()
        ev.record()
        while not ev.done:
            if time.time() - t0 > hang_after:
                rec.update(status="hang", seconds=round(time.time() - t0, 3))
                emit(rec)
                os._exit(HANG_EXIT)
            time.sleep(0.002)
        cupy.cuda.runtime.deviceSynchronize()
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        rec.update(status="fault", message=f"{type(exc).__name__}: {str(exc)[:2000]}", seconds=round(time.time() - t0, 3))
        emit(rec)
        os._exit(4)
    return time.time() - t0


# ================================================================================================ the parent
@dataclass
class Job:
    """One child process: a build on some problems, on the GPU or under a tool."""

    id: str
    build: Build
    problems: tuple[str, ...]
    tool: str | None
    timeout: float
    hang_after: float
    outputs: Path | None = None
    result: dict = field(default_factory=dict)


def _child_command(job: Job, cubin: Path, sanitizer: str) -> list[str]:
    cfg = ",".join(f"{k}={v}" for k, v in job.build.config.items())
    child = [sys.executable, "-m", "flashsim.gpu.validate_hopper_kernels", "--run-one", job.build.kernel,
             str(job.build.mutant), "--cubin", str(cubin), "--problems", ",".join(job.problems), "--config", cfg,
             "--hang-after", f"{job.hang_after:g}"]
    if job.outputs is not None:
        child += ["--outputs", str(job.outputs)]
    if job.tool is None:
        return child
    return [sanitizer, "--tool", job.tool, *TOOL_ARGS[job.tool], *COMMON_TOOL_ARGS, *child]


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def run_child(cmd: Sequence[str], timeout: float, log: Path) -> tuple[str, int | None, bool, float]:
    """Run ``cmd`` in its own process group from the repository root (the repository first on PYTHONPATH), kill
    the group at ``timeout`` seconds: (its output, exit status, killed at the timeout, seconds). The command and
    its output go to ``log``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    t0 = time.time()
    timed_out = False
    try:
        proc = subprocess.Popen(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                cwd=str(REPO), env=env, start_new_session=True)
    except OSError as exc:
        log.write_text(f"$ {' '.join(cmd)}\n(not run: {type(exc).__name__}: {exc})\n")
        return f"not run: {type(exc).__name__}: {exc}", None, False, 0.0
    try:
        text, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        try:
            text, _ = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:  # something outside the group holds the pipe: give up on its output
            text = ""
        timed_out = True
    seconds = round(time.time() - t0, 2)
    log.write_text(f"$ {' '.join(cmd)}\n(exit {proc.returncode}, {seconds} s"
                   f"{', killed at the timeout' if timed_out else ''})\n{text or ''}")
    return text or "", proc.returncode, timed_out, seconds


def marked_records(text: str, mark: str = RESULT_MARK) -> tuple[dict | None, dict[str, dict]]:
    """The JSON records a child printed after ``mark``: (the record without a problem: the load line; the
    records by problem)."""
    problems, loaded = {}, None
    for line in text.splitlines():
        idx = line.find(mark + " ")
        if idx < 0:
            continue
        try:
            rec = json.loads(line[idx + len(mark) + 1:])
        except json.JSONDecodeError:
            continue
        if rec.get("problem") is None:
            loaded = rec
        else:
            problems[rec["problem"]] = rec
    return loaded, problems


def run_job(job: Job, cubin: Path, sanitizer: str, logs: Path) -> dict:
    """Run the job's child (in its own process group), kill it at the timeout; parse its problem lines and,
    under a tool, the tool's verdict. The full output goes to logs/<job id>.txt."""
    cmd = _child_command(job, cubin, sanitizer)
    text, rc, timed_out, seconds = run_child(cmd, job.timeout, logs / f"{job.id}.txt")
    if rc is None and not timed_out:
        return {"status": "not run", "message": text, "seconds": 0.0}
    loaded, problems = marked_records(text)
    status = job_status(job.problems, problems, timed_out, rc, text)
    out = {"status": status, "exit": rc, "timed_out": timed_out, "seconds": seconds,
           "problems": problems, "device": (loaded or {}).get("device"), "command": " ".join(cmd)}
    if job.tool is not None:
        out["tool"] = parse_tool_output(job.tool, text)
    return out


def job_status(names: Sequence[str], problems: dict, timed_out: bool, rc: int | None, text: str) -> str:
    """'done' (every problem of ``names`` finished), 'hang', 'fault: ...', 'error: ...' or 'killed' (no
    verdict), from a child's records by problem."""
    for name in names:
        rec = problems.get(name)
        if rec is None:
            if timed_out:
                launched = "\"status\": \"loaded\"" in text
                return "hang (killed at the timeout)" if launched else "killed at the timeout before the launch"
            tail = " | ".join(text.strip().splitlines()[-2:])[:300]
            return f"error: child exited {rc} before {name}: {tail}"
        if rec["status"] == "hang":
            return "hang"
        if rec["status"] == "fault":
            return f"fault: {rec.get('message', '')[:200]}"
        if rec["status"] == "error":
            return f"error: {rec.get('message', '')[:200]}"
    return "done"


_SUMMARY_RES = (re.compile(r"RACECHECK SUMMARY:\s*(\d+)\s+hazards?\s+displayed", re.IGNORECASE),
                re.compile(r"ERROR SUMMARY:\s*(\d+)\s+errors?", re.IGNORECASE))
_HEADLINE_RE = re.compile(r"(race reported|potential (raw|war|waw)|hazard|barrier error|invalid|illegal|"
                          r"misaligned|out[- ]of[- ]range|error:|uninitiali[sz]ed|detected|warning:)", re.IGNORECASE)


def parse_tool_output(tool: str, text: str) -> dict[str, Any]:
    """The verdict of a compute-sanitizer run: {"verdict": "report" | "clean" | "no verdict", "errors": n,
    "hazards": n, "summary": [summary lines], "headlines": [distinct report headlines, at most 8]}."""
    summary, heads, errors, hazards = [], [], None, None
    for raw in text.splitlines():
        if not raw.startswith("=") and "SUMMARY" not in raw:
            continue
        line = re.sub(r"^=+ ?", "", raw).strip()
        if not line:
            continue
        m = _SUMMARY_RES[0].search(line)
        if m:
            hazards = int(m.group(1))
            summary.append(line)
            continue
        m = _SUMMARY_RES[1].search(line)
        if m:
            if "not printed" not in line:  # "ERROR SUMMARY: 4 errors were not printed" follows the count
                errors = int(m.group(1))
            summary.append(line)
            continue
        if _HEADLINE_RE.search(line) and not line.lower().startswith(("at ", "by thread", "saved host backtrace")):
            key = re.sub(r"0x[0-9a-f]+|\d+", "#", line.lower())
            if key not in {re.sub(r"0x[0-9a-f]+|\d+", "#", h.lower()) for h in heads} and len(heads) < 8:
                heads.append(line[:300])
    if hazards is None and errors is None:
        verdict = "no verdict"
    elif (hazards or 0) > 0 or (errors or 0) > 0:
        verdict = "report"
    else:
        verdict = "clean"
    return {"tool": tool, "verdict": verdict, "errors": errors, "hazards": hazards, "summary": summary,
            "headlines": heads}


def find_sanitizer(given: str | None) -> str | None:
    if given:
        return shutil.which(given) or (given if Path(given).is_file() else None)
    return shutil.which("compute-sanitizer") or (DEFAULT_SANITIZER if Path(DEFAULT_SANITIZER).is_file() else None)


def _tool_version(sanitizer: str | None) -> str:
    if sanitizer is None:
        return "not found"
    try:
        p = subprocess.run([sanitizer, "--version"], capture_output=True, text=True, timeout=15)
        return " ".join((p.stdout + p.stderr).split())[:300]
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unavailable ({exc})"


# ================================================================================================ validate
def _json(x):
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, np.floating):
        return float(x)
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, (bytes, bytearray)):
        return x.hex()
    return str(x)


def _catalogue_entry(m: Mutant) -> dict:
    k = kernel_of(m.kernel)
    return {"id": m.id, "kernel": m.kernel, "source": f"gpu/kernels/{k.source}", "macro": f"{k.mutant_macro}={m.value}",
            "defines": list(m.defines), "category": m.category, "summary": m.summary, "kind": m.kind,
            "detail": m.detail, "report_at": {w: ln for w, ln in HM.report_lines(m).items()}, "problem": m.problem,
            "gpu_expected": m.gpu}


def _gpu_outcome(job_res: dict, check: dict | None) -> str:
    st = job_res.get("status", "not run")
    if st != "done":
        return st
    if check is None:
        return "done (no outputs)"
    if check.get("equal") and check.get("mismatches", 0) == 0:
        return "ok"
    extra = f", {check['over_bound']} over the float64 bound" if check.get("over_bound") else ""
    return f"wrong ({check.get('mismatches', '?')} of {check['elements']} elements differ{extra})"


def _as_expected(outcome: str, expected: str) -> bool:
    if expected == "any":
        return not outcome.startswith(("error", "not run", "killed"))
    if expected == "hang":
        return outcome.startswith("hang")
    return outcome.split(" ")[0].rstrip(":") == expected


def _tool_cell(res: dict | None) -> str:
    if res is None:
        return "-"
    t = res.get("tool")
    if t is None:
        return res.get("status", "-")
    hang = " (kernel hung)" if res.get("status", "").startswith(("hang", "killed")) else ""
    if t["verdict"] == "report":
        parts = []
        if t.get("hazards") is not None:
            parts.append(f"{t['hazards']} hazards")
        if t.get("errors") is not None:
            parts.append(f"{t['errors']} errors")
        head = t["headlines"][0] if t["headlines"] else ""
        return f"REPORT: {', '.join(parts)}{hang}" + (f"; {head[:120]}" if head else "")
    if t["verdict"] == "clean":
        return "no report (kernel hung)" if hang else "clean"
    return f"no verdict{hang}: {res.get('status', '')[:80]}"


def _md(s: str) -> str:
    return s.replace("|", "/").replace("\n", " ")


def write_table(out: Path, report: dict) -> None:
    tools = report.get("tools", list(TOOLS))
    head = ["mutant", "bug", "simulator should report", "GPU expected", "GPU outcome", *tools]
    device = report.get("device", {}).get("name", "no GPU")
    lines = [f"# Hopper kernels' planted bugs: GPU and compute-sanitizer ({device}, {report['date']})", "",
             f"Command: `{report['command']}`; sanitizer: {report.get('sanitizer', {}).get('version', '-')}", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for mid, e in report["mutants"].items():
        c = e["catalogue"]
        where = ", ".join(f"{w} (line {ln})" for w, ln in c["report_at"].items())
        row = [f"{mid} ({c['macro']})", _md(c["summary"]), f"{c['kind']} at {where}", c["gpu_expected"],
               _md(e.get("gpu_outcome", "not run")), *(_md(_tool_cell(e.get(t))) for t in tools)]
        lines.append("| " + " | ".join(row) + " |")
    for key, e in report.get("controls", {}).items():
        row = [f"control {key}", "correct build", "none", "ok", _md(e.get("gpu_outcome", "-")),
               *(_md(_tool_cell(e.get(t))) for t in tools)]
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", "Correct runs:", "", "| build | problem | status | check |", "|---|---|---|---|"]
    for bkey, probs in report.get("correct", {}).items():
        for pname, r in probs.items():
            chk = r.get("check", {})
            note = "bit-identical" if chk.get("equal") and not chk.get("model_mismatches") else \
                "; ".join(f"{k}={v}" for k, v in chk.items() if k not in ("elements",))[:200]
            lines.append(f"| {bkey} | {pname} | {r.get('status', '-')} | {_md(note)} |")
    (out / "sanitizer_table.md").write_text("\n".join(lines) + "\n")


def _write(out: Path, report: dict) -> None:
    (out / "hopper_kernels.json").write_text(json.dumps(report, indent=1, default=_json) + "\n")
    write_table(out, report)


def validate(out: Path, *, dry_run: bool, record: bool, jobs: int, timeout: float, tools: Sequence[str],
             sanitizer: str | None, mutants: Sequence[str] | None = None, log=print) -> dict:
    """Everything the module docstring lists; returns the report (also written to ``out``)."""
    from flashsim.sass.toolchain import versions

    t_start = time.time()
    out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": "python -m flashsim.gpu.validate_hopper_kernels " + " ".join(sys.argv[1:]),
        "arch": ARCH, "toolchain": versions(), "dry_run": dry_run, "tools": list(tools),
        "builds": {}, "correct": {}, "mutants": {}, "controls": {}}
    builds = all_builds()
    cub_dir = out / "cubins"
    cub_dir.mkdir(exist_ok=True)
    for key, b in builds.items():
        (cub_dir / f"{key}.cubin").write_bytes(b.cubin)
        report["builds"][key] = {"kernel": b.kernel, "mutant": b.mutant, "defines": list(b.defines),
                                 "sha256": b.sha256, "bytes": len(b.cubin), "nvrtc_log": b.log}
    log(f"{len(builds)} builds for {ARCH} in {time.time() - t_start:.1f}s -> {cub_dir}")
    for m in MUTANTS:
        report["mutants"][m.id] = {"catalogue": _catalogue_entry(m),
                                   "build": build(m.kernel, m.value, **m.build_config).key}
    if dry_run:
        report["seconds"] = round(time.time() - t_start, 1)
        _write(out, report)
        return report

    sanitizer = find_sanitizer(sanitizer) if tools else None
    report["sanitizer"] = {"path": sanitizer, "version": _tool_version(sanitizer)}
    logs = out / "logs"
    logs.mkdir(exist_ok=True)
    outs_dir = out / "outputs"
    tool_timeout = timeout * 1.5
    job_list: list[Job] = []
    for kernel, config, probs in CORRECT_RUNS:
        b = build(kernel, 0, **dict(config))
        job_list.append(Job(f"correct_{b.key}", b, probs, None, timeout * 3, max(5.0, timeout / 2),
                            outs_dir / b.key))
    for m in MUTANTS:
        if mutants is not None and m.id not in mutants:
            continue
        b = build(m.kernel, m.value, **m.build_config)
        job_list.append(Job(f"gpu_{m.id}", b, (m.problem,), None, timeout, min(5.0, timeout / 3), outs_dir / b.key))
        for t in (tools if sanitizer else ()):
            job_list.append(Job(f"{t}_{m.id}", b, (m.problem,), t, tool_timeout, timeout / 2))
    for kernel, config, prob in TOOL_CONTROLS:
        b = build(kernel, 0, **dict(config))
        for t in (tools if sanitizer else ()):
            job_list.append(Job(f"{t}_control_{b.key}", b, (prob,), t, tool_timeout, timeout / 2))
    # the jobs expected to hang first: they overlap with the rest
    expected_hang = {m.id for m in MUTANTS if m.gpu == "hang"}
    job_list.sort(key=lambda j: (0 if any(j.id.endswith("_" + h) for h in expected_hang) else 1))
    log(f"{len(job_list)} GPU jobs, {jobs} at a time (timeout {timeout:g}s, tools {tool_timeout:g}s)")

    # references while the children run
    refs: dict[str, dict] = {}

    def one(job: Job) -> Job:
        try:
            job.result = run_job(job, cub_dir / f"{job.build.key}.cubin", sanitizer or "", logs)
        except Exception as exc:  # noqa: BLE001 - one job's failure is data; the others still run
            job.result = {"status": f"error: {type(exc).__name__}: {exc}", "seconds": 0.0, "problems": {}}
        return job

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = [pool.submit(one, j) for j in job_list]
        for p in PROBLEMS.values():
            ins = problem_inputs(p)
            refs[p.name] = {"inputs": ins, "pre": host_of(p.kernel).precompute(ins, p)}
        for fut in concurrent.futures.as_completed(futures):
            j = fut.result()
            log(f"  {j.id:44s} {j.result.get('status', '?')[:60]:60s} {j.result.get('seconds', 0):6.1f}s"
                + (f"  {j.result['tool']['verdict']}" if 'tool' in j.result else ""))

    def check(b: Build, pname: str) -> dict | None:
        f = outs_dir / b.key / f"{pname}.npz"
        if not f.is_file():
            return None
        got = dict(np.load(f))
        return host_of(b.kernel).check(refs[pname]["inputs"], got, PROBLEMS[pname], refs[pname]["pre"])

    ok = True
    for j in job_list:
        if j.id.startswith("correct_"):
            b = j.build
            if j.result.get("device") and "device" not in report:
                report["device"] = j.result["device"]
            entry = {}
            for pname in j.problems:
                rec = j.result.get("problems", {}).get(pname, {"status": "not run"})
                chk = check(b, pname) if rec.get("status") == "done" else None
                good = bool(chk and chk["equal"])
                ok = ok and good
                e = {"status": rec.get("status"), "check": chk, "seconds": rec.get("seconds"),
                     "grid": rec.get("grid"), "block": rec.get("block"), "shared_mem": rec.get("shared_mem"),
                     "tensor_maps": rec.get("tensor_maps"), "input_sha256": rec.get("input_sha256"),
                     "seed": PROBLEMS[pname].seed, "dims": PROBLEMS[pname].dims}
                if rec.get("message"):
                    e["message"] = rec["message"]
                if rec.get("input_sha256"):
                    want = {k: _sha(v) for k, v in refs[pname]["inputs"].items()}
                    e["inputs_match_parent"] = want == rec["input_sha256"]
                    ok = ok and e["inputs_match_parent"]
                f = outs_dir / b.key / f"{pname}.npz"
                if record and f.is_file():
                    # the GPU's outputs and the driver's tensor-map bytes as sha256 (the interpreter's replay
                    # compares its own outputs' digests: bit for bit); the inputs regenerate from the seed
                    e["record"] = {n_: {"sha256": _sha(a_), "shape": list(a_.shape), "dtype": str(a_.dtype)}
                                   for n_, a_ in dict(np.load(f)).items() if not n_.startswith("tmap/")}
                entry[pname] = e
            report["correct"][b.key] = entry
        elif j.id.startswith("gpu_"):
            m = HM.mutant(j.id[4:])
            chk = check(j.build, m.problem) if j.result.get("status") == "done" else None
            e = report["mutants"][m.id]
            e["gpu"] = j.result
            e["gpu_check"] = chk
            e["gpu_outcome"] = _gpu_outcome(j.result, chk)
            e["gpu_as_expected"] = _as_expected(e["gpu_outcome"], m.gpu)
        else:
            tool, _, rest = j.id.partition("_")
            if rest.startswith("control_"):
                report["controls"].setdefault(rest[len("control_"):], {})[tool] = j.result
            else:
                report["mutants"][rest][tool] = j.result
    for key, e in report["controls"].items():
        e["gpu_outcome"] = "ok" if all(v.get("status") == "done" for v in report["correct"].get(key, {}).values()) \
            else "see correct runs"
    report["equal"] = ok
    report["seconds"] = round(time.time() - t_start, 1)
    if record:
        report["record"] = {"what": "sha256 of every output of the correct runs (correct.<build>.<problem>.record), "
                                    "the driver's tensor-map bytes (tensor_maps.*.bytes), the cubins' sha256 (builds); "
                                    "the cubins themselves in hopper_cubins.npz"}
        np.savez_compressed(out / "hopper_cubins.npz", **{k: np.frombuffer(b.cubin, np.uint8) for k, b in builds.items()})
        log(f"recorded the outputs' digests in {out / 'hopper_kernels.json'} and the cubins in "
            f"{out / 'hopper_cubins.npz'}: copy both to traces/hopper/")
    _write(out, report)
    return report


# ================================================================================================ main
def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flashsim.gpu.validate_hopper_kernels",
                                 description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--out", help="directory for the report, the table, the cubins and the logs")
    ap.add_argument("--record", action="store_true", help="also keep the digests of the correct runs' outputs (for traces/hopper/)")
    ap.add_argument("--dry-run", action="store_true", help="build every cubin and write the catalogue; no GPU")
    ap.add_argument("--jobs", type=int, default=8, help="child processes at a time (default 8)")
    ap.add_argument("--timeout", type=float, default=20.0,
                    help="seconds before a mutant's GPU run is killed (tools: 1.5x; default 20)")
    ap.add_argument("--tools", default=",".join(TOOLS), help=f"compute-sanitizer tools (default {','.join(TOOLS)}; "
                                                               "'' for none)")
    ap.add_argument("--sanitizer", default=None, help=f"compute-sanitizer binary (default: PATH, {DEFAULT_SANITIZER})")
    ap.add_argument("--mutants", default=None, help="only these mutants (comma-separated ids, e.g. tp1,gg5)")
    ap.add_argument("--run-one", nargs=2, metavar=("KERNEL", "MUTANT"), help="(child) run one build on --problems")
    ap.add_argument("--cubin", help="(child) the cubin file")
    ap.add_argument("--problems", help="(child) comma-separated problem names")
    ap.add_argument("--config", default="", help="(child) build macros MACRO=V,...")
    ap.add_argument("--outputs", help="(child) folder for <problem>.npz")
    ap.add_argument("--hang-after", type=float, default=5.0, help="(child) seconds before a running kernel is a hang")
    a = ap.parse_args(argv)
    if a.run_one:
        kernel, mutant = a.run_one[0], int(a.run_one[1])
        if not a.cubin or not a.problems:
            ap.error("--run-one needs --cubin and --problems")
        return run_one(kernel, mutant, a.cubin, [p for p in a.problems.split(",") if p], _parse_config(a.config),
                       a.outputs, a.hang_after)
    if not a.out:
        ap.error("--out is required")
    tools = tuple(t for t in a.tools.split(",") if t.strip())
    for t in tools:
        if t not in TOOL_ARGS:
            ap.error(f"--tools: unknown tool {t!r} (known: {', '.join(TOOL_ARGS)})")
    t = time.time()
    only = None
    if a.mutants is not None:
        only = [x for x in a.mutants.split(",") if x]
        for x in only:
            try:
                HM.mutant(x)
            except ValueError as exc:
                ap.error(f"--mutants: {exc}")
    rep = validate(Path(a.out), dry_run=a.dry_run, record=a.record, jobs=a.jobs, timeout=a.timeout, tools=tools,
                   sanitizer=a.sanitizer, mutants=only, log=functools.partial(print, flush=True))
    if a.dry_run:
        print(f"dry run: {len(rep['builds'])} cubins, {len(rep['mutants'])} mutants catalogued in "
              f"{time.time() - t:.1f}s; {a.out}/hopper_kernels.json")
        return 0
    ran = [e for e in rep["mutants"].values() if "gpu" in e]
    n_ok = sum(1 for e in ran if e.get("gpu_as_expected"))
    print(f"correct runs {'all pass' if rep['equal'] else 'FAIL'}; mutants as expected on the GPU: {n_ok} of "
          f"{len(ran)}; {time.time() - t:.0f}s; {a.out}/sanitizer_table.md")
    return 0 if rep["equal"] else 1


if __name__ == "__main__":
    sys.exit(main())
