"""The Tensor Memory Accelerator on the H100, recorded for flashsim: what cuTensorMapEncodeTiled writes and
returns, and where cp.async.bulk.tensor loads, stores and reductions put every byte.

    python -m flashsim.gpu.validate_tma --out DIR [--record] [--seed 0] [--cases 400]
    python -m flashsim.gpu.validate_tma --out DIR --dry-run     (no GPU: builds and checks everything else)

What runs (each phase in a child process of its own, so that a CUDA error that poisons a context, or a hang,
costs one case and not the run; a case whose child dies is recorded with the error and the run goes on):

  encode   cuTensorMapEncodeTiled through ctypes (libcuda.so.1): two base configurations per rank 1..5, sweeps
           of every field from each base (global address bits, each dimension, stride, box dimension, element
           stride, every enum), >= 3000 random configurations valid by the driver's documentation and >= 500
           invalid ones (one rule broken each, labelled), and a few cuTensorMapEncodeIm2col calls: the fields,
           the return code and the 128 bytes written (the output starts as 0xCD bytes), beside flashsim's
           verdict (flashsim.sass.tensormap.TensorMap) for each.
  param    the generic addresses of __grid_constant__ parameters and generic loads through them
           (param_probe), next to the address of a __device__ variable the host knows.
  load     ~400 random tensor maps (ranks 1..5; 1-, 2-, 4- and 8-byte types; padded strides; element strides
           1..8; swizzle none / 32B / 64B / 128B; interleave 16B / 32B; OOB fill zero or NaN; coordinates
           inside, partly outside and wholly outside the tensor, dimension 0 starting on a 16-byte boundary):
           tma_load twice with complementary sentinel fills (a byte equal in both dumps was written by the
           copy), then tma_store twice into global buffers pre-filled with the input and its complement, at
           the load's start with negative coordinates raised to 0 (the H100 stops stores that start below 0).
  reduce   cp.reduce.async.bulk.tensor (.add on f32 / f16 / bf16 / u32 / s32 / u64, .min / .max, .inc / .dec,
           .and / .or / .xor) on a few maps.
  risky    cases that may fault or that the documentation leaves open: shared addresses aligned to 16 but not
           128 bytes, a swizzled map on a 16-byte-aligned global address, coordinates at the int32 limits,
           an mbarrier expecting fewer or more bytes than the box, a start off a 16-byte boundary, a store
           below 0, reductions on types the H100 stopped or the PTX ISA does not list.
  interleave  ~160 interleaved maps drawn by flashsim's model of interleave (interleave_cases: chunks along
           dimension 0, dimension rank - 2 not traversed, overlapping rows, every swizzle, a quarter reductions),
           each expecting the model's box bytes: a held-out test of that model.

``--phases load,interleave`` runs only the phases named (default: all).

Every case's kernel runs from the cubin flashsim's NVRTC builds (gpu/kernels/probe_tma.cu, sm_90a); the
bytes are saved with the record so that the interpreter replays the very code the GPU ran
(tests/test_tma.py). Kernels that take the tensor map by value are launched through cupy when it passes a
128-byte struct argument intact (checked with param_probe), else through the driver's cuLaunchKernel.

Writes DIR/tma_report.json (counts, timings, errors, provenance: device, driver, date, command); with
``--record`` also DIR/tma_probes.npz (cubin, encodings, each case's fields and map bytes, its inputs and the
GPU's outputs as sha256: the inputs regenerate from the seed, and the replay compares digests bit for bit),
DIR/tma_interleaved.npz (the cases with interleaved maps, bytes and all: what a model of interleave needs) and
DIR/tma_probes.json (provenance), which belong in traces/tma/. The whole run takes about a minute
(``--budget`` seconds at most, 170 by default). The report also compares every case that ran with
flashsim's model of the box (flashsim.sass.tensormap: phases/<phase>/model).
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import datetime
import functools
import hashlib
import json
import math
import os
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from flashsim.sass.tensormap import TensorMap

__all__ = ["ARCH", "DTYPE_SIZES", "EncodeCase", "InterpDriver", "InterpLauncher", "PROBE_FILE", "PROBE_VERSION",
           "TRACE_NPZ", "TmaCase", "build", "case_from_record", "case_slice", "compare_case", "digest_case",
           "digest_cases", "digest_record", "doc_verdict", "expected_digests", "sha_bytes",
           "encode_cases", "expected_case", "fill_pattern", "fill_seed", "load_record", "main", "make_cases",
           "model_summary", "record_case", "reduce_cases", "risky_cases", "run_case"]

ARCH = "sm_90a"
PROBE_FILE = "probe_tma.cu"
_ROOT = Path(__file__).resolve().parent.parent
TRACE_DIR = _ROOT / "traces" / "tma"
TRACE_NPZ = TRACE_DIR / "tma_probes.npz"
TRACE_JSON = TRACE_DIR / "tma_probes.json"

#: bytes per element of CUtensorMapDataType 0..12 (the driver's enum comments)
DTYPE_SIZES = {0: 1, 1: 2, 2: 4, 3: 4, 4: 8, 5: 8, 6: 2, 7: 4, 8: 8, 9: 2, 10: 4, 11: 4, 12: 4}
FLOAT_TYPES = {6, 7, 8, 9, 10, 11, 12}
CUDA_SUCCESS = 0
FILL_BYTE = 0xCD  # what the 128 output bytes hold before cuTensorMapEncodeTiled runs
MAX_REGION = 48 * 1024  # dynamic shared memory a case may use (no opt-in attribute needed)
TIMEOUT_CYCLES = 2_000_000  # tma_load's bounded wait (~1 ms at 1.98 GHz)
BLOCK = 128
F_INVERT, F_GLOBAL_MAP, F_PREFETCH, F_PREFETCH_MAP = 1, 2, 4, 8
REDUCE_OPS = {"store": 0, "add": 1, "min": 2, "max": 3, "inc": 4, "dec": 5, "and": 6, "or": 7, "xor": 8}
KIND = {"main": 0, "reduce": 1, "risky": 2, "interleave": 3}
BASE_ADDRESS = 0x7F3A_1234_5600  # the global address of the encode sweeps' base maps (256-byte aligned)
#: the probe's interface and case rules: 1 = the first H100 run (switch dispatch, unaligned and negative
#: starts); 2 = one-hot rank/op selectors, dimension-0 starts 16-byte aligned, stores at non-negative starts
PROBE_VERSION = 2


# ================================================================================================ the build
@dataclass(frozen=True)
class Build:
    """The sm_90a cubin of gpu/kernels/probe_tma.cu."""

    cubin: bytes

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.cubin).hexdigest()

    @functools.cached_property
    def module(self):
        """The interpreter's module of these bytes."""
        import flashsim.cuda as fc

        return fc.RawModule(cubin=self.cubin)


@functools.lru_cache(maxsize=None)
def build(cubin: bytes | None = None) -> Build:
    """``gpu/kernels/probe_tma.cu`` for sm_90a, as flashsim.kernels.sources builds (repository-relative #line
    name); ``cubin``: use these recorded bytes instead."""
    if cubin is None:
        from flashsim.kernels.sources import BASE_OPTIONS, kernel_path, source_hash
        from flashsim.sass.toolchain import compile_cuda

        path = kernel_path(PROBE_FILE)
        code = f'#line 1 "gpu/kernels/{path.name}"\n' + path.read_text(encoding="utf-8")
        opts = (*BASE_OPTIONS, f"-DFLASHSIM_SOURCE_HASH=0x{source_hash(PROBE_FILE)[:16]}")
        cubin, _, _ = compile_cuda(code, name=path.name, options=opts, arch=ARCH)
    return Build(bytes(cubin))


#: each kernel's parameters as the host passes them: (name, size in bytes)
KERNEL_PARAMS = {
    "tma_load": [("tm", 128), ("gtm", 8), ("rank_bit", 4), ("c0", 4), ("c1", 4), ("c2", 4), ("c3", 4), ("c4", 4),
                 ("dst_off", 4), ("tx_bytes", 4), ("region_words", 4), ("seed", 4), ("flags", 4), ("timeout", 8),
                 ("dump", 8), ("info", 8)],
    "tma_store": [("tm", 128), ("gtm", 8), ("rank_bit", 4), ("c0", 4), ("c1", 4), ("c2", 4), ("c3", 4), ("c4", 4),
                  ("src_off", 4), ("region_words", 4), ("op_bit", 4), ("flags", 4), ("src", 8), ("info", 8)],
    "param_probe": [("tm", 128), ("x", 4), ("tm2", 128), ("off", 8), ("out", 8)],
    "const_probe": [("out", 8)],
}


def fill_pattern(words: int, seed: int, invert: bool = False) -> np.ndarray:
    """tma_load's sentinel: word i of the shared region before the copy (probe_tma.cu, tma_fill)."""
    with np.errstate(over="ignore"):
        x = np.arange(words, dtype=np.uint32) * np.uint32(0x9E3779B1) + np.uint32(seed & 0xFFFFFFFF)
        x ^= x >> np.uint32(15)
        x *= np.uint32(0x85EBCA77)
        x ^= x >> np.uint32(13)
    return ~x if invert else x


# ================================================================================================ encodings
@dataclass
class EncodeCase:
    """One cuTensorMapEncodeTiled call: its arguments (arrays padded to 7 / 6 entries: rank-7 calls) and why it was
    made."""

    group: str  # base, sweep, random, invalid
    label: str  # the field swept or the rule broken
    dtype: int
    rank: int
    addr: int
    dims: tuple
    strides: tuple
    box: tuple
    estr: tuple
    interleave: int = 0
    swizzle: int = 0
    l2: int = 0
    oob: int = 0
    misalign: int = 0  # the output pointer's offset from a 64-byte boundary

    def padded(self):
        pad = lambda v, n: tuple(int(x) for x in v)[:n] + (0,) * (n - len(tuple(v)[:n]))  # noqa: E731
        return pad(self.dims, 7), pad(self.strides, 6), pad(self.box, 7), pad(self.estr, 7)


def doc_verdict(c: EncodeCase) -> tuple[bool, str]:
    """(valid, the rule broken) by the driver's documentation, as flashsim.sass.tensormap checks it."""
    try:
        TensorMap.encode_tiled(c.dtype, c.rank, c.addr, c.dims, c.strides, c.box, c.estr, c.interleave, c.swizzle,
                               c.l2, c.oob)
    except NotImplementedError as exc:
        return False, f"not modelled: {exc}"
    except Exception as exc:  # noqa: BLE001 - the message is the verdict
        return False, str(exc)
    if c.misalign:
        return False, "tensorMap address must be aligned to 64 bytes"
    return True, ""


def _strides_for(dims, esize: int, rng=None, pad_max: int = 0, unit: int = 16) -> tuple:
    out, prev = [], None
    for i in range(1, len(dims)):
        base = dims[0] * esize if i == 1 else prev * dims[i - 1]
        s = -(-base // unit) * unit
        if rng is not None and pad_max:
            s += unit * int(rng.integers(0, pad_max + 1))
        out.append(s)
        prev = s
    return tuple(out)


def base_configs() -> list[EncodeCase]:
    """Two base maps per rank: FLOAT32 without swizzle, and BFLOAT16 with the 128B swizzle, L2 256B, NaN fill."""
    out = []
    dims5 = (64, 48, 5, 3, 2)
    for r in range(1, 6):
        d = dims5[:r]
        out.append(EncodeCase("base", f"plain rank {r}", 7, r, BASE_ADDRESS, d, _strides_for(d, 4),
                              (32, 16, 2, 2, 1)[:r], (1,) * r, 0, 0, 0, 0))
        out.append(EncodeCase("base", f"swizzled rank {r}", 9, r, BASE_ADDRESS, d, _strides_for(d, 2),
                              (64, 8, 2, 1, 2)[:r], (1, 2, 1, 3, 1)[:r], 0, 3, 3, 1))
    return out


_DIM_VALUES = (0, 1, 2, 3, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256, 257, 1000, 4095, 4096,
               4097, 65535, 65536, 65537, 1 << 20, (1 << 24) - 1, 1 << 24, (1 << 31) - 1, 1 << 31, (1 << 32) - 2,
               (1 << 32) - 1, 1 << 32, (1 << 32) + 1, 1 << 33)
_STRIDE_VALUES = (0, 8, 16, 24, 32, 48, 64, 80, 96, 112, 128, 144, 160, 192, 256, 272, 384, 512, 1024, 4096, 65536,
                  (1 << 32) - 16, 1 << 32, (1 << 32) + 16, (1 << 39), (1 << 40) - 32, (1 << 40) - 16, 1 << 40,
                  (1 << 40) + 16, 1 << 41, 40, 4104)


def sweep_configs(bases: Sequence[EncodeCase]) -> list[EncodeCase]:
    """One field at a time moved away from each base, over values on both sides of every documented limit."""
    out = []
    rep = dataclasses.replace

    def setv(t, i, v):
        t = list(t)
        t[i] = v
        return tuple(t)

    for b in bases:
        for v in list(range(0, 17)) + [255, 1 << 31]:
            out.append(rep(b, group="sweep", label="dtype", dtype=v))
        for bit in range(64):
            out.append(rep(b, group="sweep", label=f"addr bit {bit}", addr=b.addr ^ (1 << bit)))
        for a in (0, 16, 32, 48, 64, 96, 128, 256, 1 << 47, (1 << 48) - 16, (1 << 57) - 16, (1 << 64) - 16):
            out.append(rep(b, group="sweep", label="addr", addr=a))
        for i in range(b.rank):
            for v in _DIM_VALUES:
                out.append(rep(b, group="sweep", label=f"dims[{i}]", dims=setv(b.dims, i, v)))
            for v in list(range(0, 258)):
                out.append(rep(b, group="sweep", label=f"box[{i}]", box=setv(b.box, i, v)))
            for v in list(range(0, 10)) + [16, 255]:
                out.append(rep(b, group="sweep", label=f"estr[{i}]", estr=setv(b.estr, i, v)))
        for i in range(b.rank - 1):
            for v in _STRIDE_VALUES:
                out.append(rep(b, group="sweep", label=f"strides[{i}]", strides=setv(b.strides, i, v)))
        for v in range(0, 4):
            out.append(rep(b, group="sweep", label="interleave", interleave=v))
        for v in range(0, 8):
            out.append(rep(b, group="sweep", label="swizzle", swizzle=v))
        for v in range(0, 5):
            out.append(rep(b, group="sweep", label="l2", l2=v))
        for v in range(0, 3):
            out.append(rep(b, group="sweep", label="oob", oob=v))
        for v in (8, 16, 32):
            out.append(rep(b, group="sweep", label="tensorMap misaligned", misalign=v))
    return out


def random_valid(rng, n: int) -> list[EncodeCase]:
    """``n`` random configurations that the documentation allows (drawn, then kept if doc_verdict agrees)."""
    out = []
    while len(out) < n:
        c = _random_config(rng)
        if doc_verdict(c)[0]:
            out.append(c)
    return out


def _random_config(rng) -> EncodeCase:
    r = int(rng.integers(1, 6))
    dt = int(rng.choice(list(DTYPE_SIZES)))
    es = DTYPE_SIZES[dt]
    il = int(rng.choice([0, 0, 0, 0, 0, 0, 1, 2])) if r >= 3 else 0
    sw = 1 if il == 2 else int(rng.integers(0, 4))
    span = (0, 32, 64, 128)[sw]
    unit = 32 if il == 2 else 16
    if rng.random() < 0.3:
        dims = tuple(int(rng.integers(1, 1 << int(rng.integers(1, 33)))) for _ in range(r))
    else:
        dims = tuple(int(rng.integers(1, 300)) for _ in range(r))
    strides, prev = [], None
    for i in range(1, r):
        base = dims[0] * es if i == 1 else prev * dims[i - 1]
        s = -(-base // unit) * unit + unit * int(rng.integers(0, 4))
        if s >= 1 << 40 or rng.random() < 0.1:
            s = unit * int(rng.integers(1, 1 << 20))
        strides.append(s)
        prev = s
    box = []
    for i in range(r):
        if i == 0 and il == 0:
            limit = min(256, (span or 256 * es) // es)
            choices = [b for b in range(1, limit + 1) if (b * es) % 16 == 0]
            box.append(int(rng.choice(choices)) if choices else 16)
        else:
            box.append(int(rng.integers(1, 257)))
    estr = tuple(int(rng.integers(1, 9)) if rng.random() < 0.3 else 1 for _ in range(r))
    oob = int(rng.integers(0, 2)) if dt in FLOAT_TYPES else 0
    addr = int(rng.integers(1, 1 << 44)) * (32 if il == 2 else 16)
    if rng.random() < 0.1:
        addr = int(rng.integers(0, 1 << 60)) // 32 * 32
    return EncodeCase("random", "valid by the documentation", dt, r, addr, dims, tuple(strides), tuple(box), estr, il,
                      sw, int(rng.integers(0, 4)), oob)


_MUTATIONS = ("stride not a multiple of 16", "stride 0", "stride >= 2^40", "stride not a multiple of 32 (interleave "
              "32B)", "box 0", "box > 256", "inner box bytes not a multiple of 16", "inner box beyond the swizzle "
              "span", "address not 16-aligned", "address not 32-aligned (interleave 32B)", "rank 0", "rank 6",
              "rank 7", "dim 0", "dim > 2^32", "element stride 0", "element stride > 8", "interleave with rank < 3",
              "interleave 32B without swizzle 32B", "NaN fill on an integer type", "dtype out of range",
              "interleave out of range", "swizzle out of range", "l2 out of range", "oob out of range",
              "stride smaller than the row", "tensorMap not 64-aligned")


def invalid_configs(rng, n: int) -> list[EncodeCase]:
    """``n`` configurations each breaking one documented rule (cycling through _MUTATIONS)."""
    out = []
    i = 0
    while len(out) < n:
        kind = _MUTATIONS[i % len(_MUTATIONS)]
        i += 1
        c = _mutate(rng, kind)
        if c is not None:
            out.append(c)
    return out


def _mutate(rng, kind: str) -> EncodeCase | None:
    for _ in range(50):
        c = _random_config(rng)
        c.group, c.label = "invalid", kind
        r, es = c.rank, DTYPE_SIZES[c.dtype]
        st, bx, dm, esr = list(c.strides), list(c.box), list(c.dims), list(c.estr)
        if kind.startswith("stride") and r < 2:
            continue
        j = int(rng.integers(0, max(1, r - 1)))
        k = int(rng.integers(0, r))
        if kind == "stride not a multiple of 16":
            st[j] += int(rng.choice([1, 2, 4, 8, 12]))
        elif kind == "stride 0":
            st[j] = 0
        elif kind == "stride >= 2^40":
            st[j] = (1 << 40) + 16 * int(rng.integers(0, 3))
        elif kind.startswith("stride not a multiple of 32"):
            if c.interleave != 2:
                continue
            st[j] = st[j] // 32 * 32 + 16
        elif kind == "stride smaller than the row":
            if r < 2 or dm[0] * es <= 16:
                continue
            st[0] = max(16, (dm[0] * es) // 16 * 16 - 16)
        elif kind == "box 0":
            bx[k] = 0
        elif kind == "box > 256":
            bx[k] = int(rng.integers(257, 1025))
        elif kind == "inner box bytes not a multiple of 16":
            if c.interleave or es >= 16:
                continue
            bx[0] = max(1, 16 // es) + 1 if c.swizzle == 0 else max(1, 16 // es - 1)
            if (bx[0] * es) % 16 == 0:
                continue
        elif kind == "inner box beyond the swizzle span":
            if c.swizzle == 0 or c.interleave:
                continue
            span = (0, 32, 64, 128)[c.swizzle]
            bx[0] = span // es + 16 // es
            if bx[0] > 256:
                continue
        elif kind == "address not 16-aligned":
            c.addr += int(rng.choice([1, 2, 4, 8]))
        elif kind.startswith("address not 32-aligned"):
            if c.interleave != 2:
                continue
            c.addr += 16
        elif kind.startswith("rank "):
            c.rank = int(kind.split()[1])
            dm, st, bx, esr = (dm + [4] * 7)[:7], (st + [4096] * 6)[:6], (bx + [4] * 7)[:7], (esr + [1] * 7)[:7]
        elif kind == "dim 0":
            dm[k] = 0
        elif kind == "dim > 2^32":
            dm[k] = (1 << 32) + int(rng.integers(1, 1 << 20))
        elif kind == "element stride 0":
            esr[k] = 0
        elif kind == "element stride > 8":
            esr[k] = int(rng.integers(9, 20))
        elif kind == "interleave with rank < 3":
            if r >= 3:
                continue
            c.interleave = int(rng.integers(1, 3))
        elif kind == "interleave 32B without swizzle 32B":
            if r < 3:
                continue
            c.interleave, c.swizzle = 2, int(rng.choice([0, 2, 3]))
            c.addr = c.addr // 32 * 32
            st = [s // 32 * 32 or 32 for s in st]
        elif kind == "NaN fill on an integer type":
            c.dtype = int(rng.choice([0, 1, 2, 3, 4, 5]))
            c.oob = 1
            es2 = DTYPE_SIZES[c.dtype]
            if c.interleave == 0 and (bx[0] * es2 % 16 or (c.swizzle and bx[0] * es2 > (0, 32, 64, 128)[c.swizzle])):
                bx[0] = 16 // es2 if 16 % es2 == 0 else 16
        elif kind == "dtype out of range":
            c.dtype = int(rng.choice([16, 17, 100, -1 & 0xFFFFFFFF]))
        elif kind == "interleave out of range":
            c.interleave = int(rng.choice([3, 4, 255]))
        elif kind == "swizzle out of range":
            c.swizzle = int(rng.choice([7, 8, 255]))
        elif kind == "l2 out of range":
            c.l2 = int(rng.choice([4, 5, 255]))
        elif kind == "oob out of range":
            c.oob = int(rng.choice([2, 3, 255]))
        elif kind == "tensorMap not 64-aligned":
            c.misalign = int(rng.choice([8, 16, 32, 48]))
        c.strides, c.box, c.dims, c.estr = tuple(st), tuple(bx), tuple(dm), tuple(esr)
        if kind.startswith("rank ") or not doc_verdict(c)[0] or kind.endswith("out of range") or kind == \
                "stride smaller than the row":
            return c
    return None


def encode_cases(seed: int, n_random: int = 3000, n_invalid: int = 600) -> list[EncodeCase]:
    """Every cuTensorMapEncodeTiled call of the encode phase, in order."""
    rng = np.random.default_rng([seed, 11])
    bases = base_configs()
    return bases + sweep_configs(bases) + random_valid(rng, n_random) + invalid_configs(rng, n_invalid)


def im2col_cases() -> list[dict]:
    """A few cuTensorMapEncodeIm2col calls (ranks 3..5, f16, NHWC-like tensors)."""
    out = []
    for r in (3, 4, 5):
        nsp = r - 2
        for k, (lo, hi) in enumerate([(-1, 1), (0, 0), (-2, -1), (0, 3)]):
            dims = (64, 9, 7, 5, 3)[:r]
            out.append({"dtype": 6, "rank": r, "addr": BASE_ADDRESS, "dims": dims, "strides": _strides_for(dims, 2),
                        "lower": (lo,) * nsp, "upper": (hi,) * nsp, "channels": 64, "pixels": 32 + 16 * k,
                        "estr": (1,) * r, "interleave": 0, "swizzle": 3, "l2": 2, "oob": 0})
    return out


# ================================================================================================ data cases
@dataclass
class TmaCase:
    """One tensor map with one coordinate tuple: a load and a store (kind main / risky) or a reduction."""

    index: int
    kind: str
    dtype: int
    rank: int
    dims: tuple
    strides: tuple
    box: tuple
    estr: tuple
    interleave: int
    swizzle: int
    l2: int
    oob: int
    coords: tuple
    addr_off: int  # the tensor's global address minus the buffer's
    buf_bytes: int
    dst_off: int  # the box's offset in the shared region
    region: int  # bytes of the shared region (dumped whole)
    tx: int  # bytes the mbarrier expects
    flags: int = 0
    op: str = "store"
    note: str = ""
    store_coords: tuple | None = None  # the store's start (default: coords); the H100 stops stores below zero

    def __post_init__(self):
        if self.store_coords is None:
            self.store_coords = tuple(max(0, int(x)) for x in self.coords)

    def tensor_map(self, gaddr: int) -> TensorMap:
        return TensorMap.encode_tiled(self.dtype, self.rank, gaddr + self.addr_off, self.dims, self.strides, self.box,
                                      self.estr, self.interleave, self.swizzle, self.l2, self.oob)


def _elements(box, estr, interleave) -> list[int]:
    return [b if (i == 0 and interleave == 0) else -(-b // e) for i, (b, e) in enumerate(zip(box, estr))]


def _footprint(dims, strides, es) -> int:
    return dims[0] * es + sum((d - 1) * s for d, s in zip(dims[1:], strides))


def _shared_bytes(box, estr, interleave, swizzle, es) -> int:
    """An upper bound of the shared bytes a box covers: rows padded to the swizzle span and to the interleave
    chunk (16 or 32 bytes)."""
    n = _elements(box, estr, interleave)
    row = max(n[0] * es, (0, 32, 64, 128)[swizzle], (0, 16, 32)[interleave])
    return row * math.prod(n[1:])


def _coords(rng, dims, box, mode: str) -> tuple:
    out = []
    for d, b in zip(dims, box):
        m = mode if mode != "mixed" else str(rng.choice(["inside", "partial", "outside"]))
        if m == "inside":
            out.append(int(rng.integers(0, max(1, d - b + 1))))
        elif m == "partial" and b > 1:
            # the box straddles the start (c in -b+1..-1) or the end (c in d-b+1..d-1) of the dimension
            lo = int(rng.integers(-b + 1, 0))
            hi = int(rng.integers(max(1, d - b + 1), max(2, d)))
            out.append(lo if rng.random() < 0.5 else hi)
        elif m == "partial":
            out.append(int(rng.integers(0, d)))
        else:
            out.append(int(rng.choice([d + int(rng.integers(0, 8)), -b - int(rng.integers(0, 8))])))
    return tuple(out)


def _random_case(rng, index: int, kind: str = "main", dtypes=None) -> TmaCase:
    while True:
        dt = int(rng.choice(dtypes or [0, 0, 1, 6, 6, 9, 9, 7, 7, 3, 8, 2, 5]))
        es = DTYPE_SIZES[dt]
        r = int(rng.choice([1, 2, 2, 2, 3, 3, 4, 5]))
        il = int(rng.choice([0] * 10 + [1, 1, 2, 2])) if r >= 3 else 0
        sw = 1 if il == 2 else int(rng.choice([0, 0, 1, 2, 3]))
        span = (0, 32, 64, 128)[sw]
        if il:
            chunk = 16 if il == 1 else 32
            if chunk % es:
                continue
            d0 = chunk // es
            b0 = d0 if rng.random() < 0.8 else max(1, d0 // 2)
        else:
            limit = min(256, (span or 256 * es) // es)
            choices = [b for b in range(1, limit + 1) if (b * es) % 16 == 0]
            b0 = int(rng.choice(choices))
            d0 = int(rng.integers(max(1, b0 // 2), 3 * b0 + 6))
        box = [b0] + [int(rng.choice([1, 2, 3, 4, 5, 8, 16, 17, 32])) for _ in range(r - 1)]
        estr = [1] * r
        if rng.random() < 0.25:
            estr = [int(rng.integers(1, 9)) for _ in range(r)]
        dims = [d0] + [int(rng.integers(1, 3 * b + 4)) for b in box[1:]]
        unit = 32 if il == 2 else 16
        strides = list(_strides_for(dims, es, rng, 3, unit))
        if _shared_bytes(box, estr, il, sw, es) > 16 * 1024 or _footprint(dims, strides, es) > 48 * 1024:
            continue
        oob = int(rng.random() < 0.35) if dt in FLOAT_TYPES else 0
        mode = str(rng.choice(["inside"] * 8 + ["partial"] * 7 + ["outside"] * 2 + ["mixed"] * 3))
        coords = _coords(rng, dims, [b for b in box], mode)
        if not il:  # dimension 0 starts on a 16-byte boundary (else the H100 stops the copy: illegal_start)
            u = 16 // es
            coords = (coords[0] // u * u,) + coords[1:]
        elif rng.random() < 0.7:
            coords = (0,) + coords[1:]
        align = 128 if sw else unit
        addr_off = align * int(rng.integers(0, 4))
        dst_off = 1024 if not (sw and rng.random() < 0.15) else 1024 + 128 * int(rng.integers(1, 8))
        sh = _shared_bytes(box, estr, il, sw, es)
        region = -(-(dst_off + sh + 1024) // 16) * 16
        tx = math.prod(_elements(box, estr, il)) * es
        flags = 0
        if rng.random() < 0.1:
            flags |= F_GLOBAL_MAP
        if rng.random() < 0.1:
            flags |= F_PREFETCH
        if rng.random() < 0.05:
            flags |= F_PREFETCH_MAP
        c = TmaCase(index, kind, dt, r, tuple(dims), tuple(strides), tuple(box), tuple(estr), il, sw,
                    int(rng.integers(0, 4)), oob, coords + (0,) * (5 - r), addr_off,
                    addr_off + _footprint(dims, strides, es) + 256, dst_off, region, tx, flags, "store", mode)
        try:
            c.tensor_map(0x7F00_0000_0000)
        except (ValueError, NotImplementedError):
            continue
        return c


def make_cases(seed: int, n: int = 400) -> list[TmaCase]:
    """The load/store cases of the record: ``n`` random maps and coordinates (deterministic in ``seed``)."""
    rng = np.random.default_rng([seed, 7])
    return [_random_case(rng, i) for i in range(n)]


#: (op, tensor types) of the reductions recorded (PTX ISA, cp.reduce.async.bulk.tensor: the types each
#: operation supports)
REDUCE_PLAN = (("add", (7, 6, 9, 7, 6, 9, 2, 3, 4)), ("min", (2, 3, 6, 9)), ("max", (2, 3, 6, 9)),
               ("inc", (2,)), ("dec", (2,)), ("and", (2, 4)), ("or", (3,)), ("xor", (2, 4)))


def reduce_cases(seed: int) -> list[TmaCase]:
    """Reductions: each (op, type) of REDUCE_PLAN twice, random maps."""
    rng = np.random.default_rng([seed, 9])
    out = []
    for op, types in REDUCE_PLAN:
        for dt in types:
            for _ in range(2):
                c = _random_case(rng, len(out), "reduce", [dt])
                c.op = op
                c.flags &= F_GLOBAL_MAP
                out.append(c)
    return out


def risky_cases(seed: int) -> list[TmaCase]:
    """Cases that may fault or that the documentation leaves open (each may cost its child process)."""
    rng = np.random.default_rng([seed, 13])
    out = []

    def case(note, dtypes=(6,), **changes):
        while True:
            c = _random_case(rng, len(out), "risky", list(dtypes))
            want_sw = changes.pop("_swizzle", None)
            if want_sw is not None and c.swizzle != want_sw:
                changes["_swizzle"] = want_sw
                continue
            break
        for k, v in changes.items():
            setattr(c, k, v)
        if "store_coords" not in changes:
            c.store_coords = tuple(max(0, int(x)) for x in c.coords)
        c.note = note
        c.region = -(-(c.dst_off + _shared_bytes(c.box, c.estr, c.interleave, c.swizzle, DTYPE_SIZES[c.dtype]) +
                       1024) // 16) * 16
        out.append(c)

    case("shared box 16-aligned, not 128", dst_off=1024 + 16, _swizzle=0)
    case("shared box 64-aligned, not 128", dst_off=1024 + 64, _swizzle=0)
    case("shared box 16-aligned, swizzle 128B", dst_off=1024 + 16, _swizzle=3)
    case("swizzle 128B on a 16-aligned global address", addr_off=16, _swizzle=3)
    case("swizzle 64B on a 48-aligned global address", addr_off=48, _swizzle=2)
    case("coordinates at the int32 limits", coords=(-(1 << 31), (1 << 31) - 1, 0, 0, 0),
         store_coords=(-(1 << 31), (1 << 31) - 1, 0, 0, 0))
    case("coordinates at the int32 limits", coords=((1 << 31) - 16, (1 << 31) - 1, 0, 0, 0))
    case("dimension 0 starting off a 16-byte boundary", dtypes=(7,), coords=(1, 0, 0, 0, 0),
         store_coords=(1, 0, 0, 0, 0))
    case("a store at a negative coordinate", dtypes=(7,), coords=(0, -1, 0, 0, 0), store_coords=(0, -1, 0, 0, 0))
    c = _random_case(rng, len(out), "risky", [7])
    c.tx, c.note = max(16, c.tx - 16), "expect_tx 16 bytes short of the box"
    out.append(c)
    c = _random_case(rng, len(out), "risky", [7])
    c.tx, c.note = c.tx + 16, "expect_tx 16 bytes beyond the box"
    out.append(c)
    c = _random_case(rng, len(out), "risky", [7])
    c.op, c.note = "min", "reduce min on FLOAT32 (not a documented type)"
    c.coords = c.store_coords = (0, 0, 0, 0, 0)
    out.append(c)
    c = _random_case(rng, len(out), "risky", [5])
    c.op, c.note = "xor", "reduce xor on INT64 (stopped the H100 in run 1)"
    c.coords = c.store_coords = (0, 0, 0, 0, 0)
    out.append(c)
    return out


def interleave_cases(seed: int, n: int = 160) -> list[TmaCase]:
    """Interleaved maps laid out as flashsim.sass.tensormap models them (INTERLEAVE_CHUNK: dimension 0 in 16- or
    32-byte chunks, dimension rank - 2 not traversed, rows packed): ranks 3..5, 1..8-byte types, every swizzle,
    element strides, strides narrower than a row (rows overlapping in global memory), boxes along dimension
    rank - 2 of 1..17, starts inside, across and outside the tensor; the expect-tx is the model's box bytes and
    the shared region holds the model's box. A quarter are reductions (an operation the type takes). Drawn
    without the model's bytes in view: a record of them is a held-out test of the model."""
    rng = np.random.default_rng([seed, 19])
    ops = {dt: [op for op, types in REDUCE_PLAN if dt in types] for dt in DTYPE_SIZES}
    out: list[TmaCase] = []
    while len(out) < n:
        dt = int(rng.choice([0, 1, 6, 6, 9, 9, 7, 7, 3, 8, 2, 5, 4]))
        es = DTYPE_SIZES[dt]
        r = int(rng.choice([3, 3, 4, 4, 5]))
        il = int(rng.choice([1, 2]))
        chunk = 16 if il == 1 else 32
        sw = int(rng.choice([0, 1, 2, 3]))
        b0 = int(rng.choice([b for b in range(1, 33) if (b * es) % 16 == 0]))  # the driver: boxDim[0]*es % 16
        box = [b0] + [int(rng.choice([1, 2, 3, 4, 5, 8, 16, 17])) for _ in range(r - 1)]
        estr = [1] * r if rng.random() < 0.7 else [int(rng.integers(1, 5)) for _ in range(r)]
        dims = [int(rng.integers(1, 2 * b0 + 4))] + [int(rng.integers(1, 2 * b + 4)) for b in box[1:]]
        strides, prev = [], dims[0] * chunk
        for i in range(1, r):
            if i == 1 and rng.random() < 0.25:
                s_ = chunk * int(rng.integers(1, max(2, dims[0])))  # narrower than a row: rows overlap
            else:
                s_ = -(-prev // chunk) * chunk + chunk * int(rng.integers(0, 3))
            strides.append(s_)
            prev = s_ * dims[i]
        foot = dims[0] * chunk + sum((d - 1) * s_ for d, s_ in zip(dims[1:], strides))
        if foot > 48 * 1024:
            continue
        align = 128 if sw else chunk
        addr_off = align * int(rng.integers(0, 4))
        mode = str(rng.choice(["inside"] * 8 + ["partial"] * 7 + ["outside"] * 2 + ["mixed"] * 3))
        coords = _coords(rng, dims, box, mode)
        if rng.random() < 0.5:
            coords = (0,) + coords[1:]
        dst_off = 1024 if not (sw and rng.random() < 0.15) else 1024 + 128 * int(rng.integers(1, 8))
        c = TmaCase(len(out), "interleave", dt, r, tuple(dims), tuple(strides), tuple(box), tuple(estr), il, sw,
                    int(rng.integers(0, 4)), int(rng.random() < 0.35) if dt in FLOAT_TYPES else 0,
                    coords + (0,) * (5 - r), addr_off, addr_off + foot + 256, dst_off, 0, 0, 0, "store", mode)
        try:
            tm = c.tensor_map(0x7F00_0000_0000)
        except (ValueError, NotImplementedError):
            continue
        n_units = tm.elements_per_dim
        pitch = n_units[0] * chunk
        extent = math.prod(n_units[1:]) * pitch
        if extent > 16 * 1024:
            continue
        c.region = -(-(dst_off + extent + 1024) // 16) * 16
        c.tx = tm.box_bytes
        if ops[dt] and rng.random() < 0.25:
            c.op = str(rng.choice(ops[dt]))
            c.store_coords = tuple(max(0, int(x)) for x in c.coords)
        out.append(c)
    return out


# ================================================================================================ the driver
class Driver:
    """The CUDA driver through ctypes: tensor-map encodings, module loading and launches (a context must be
    current: cupy's, made current by the first cupy call of the process)."""

    def __init__(self):
        self.lib = ctypes.CDLL("libcuda.so.1")
        L = self.lib
        u64p, u32p = ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint32)
        L.cuTensorMapEncodeTiled.restype = ctypes.c_int
        L.cuTensorMapEncodeTiled.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p, u64p,
                                             u64p, u32p, u32p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
        self.has_im2col = hasattr(L, "cuTensorMapEncodeIm2col")
        if self.has_im2col:
            L.cuTensorMapEncodeIm2col.restype = ctypes.c_int
            L.cuTensorMapEncodeIm2col.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p,
                                                  u64p, u64p, ctypes.POINTER(ctypes.c_int),
                                                  ctypes.POINTER(ctypes.c_int), ctypes.c_uint32, ctypes.c_uint32, u32p,
                                                  ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
        self._out = ctypes.create_string_buffer(256)
        self._mods: dict[str, Any] = {}

    def _outptr(self, misalign: int = 0) -> int:
        base = ctypes.addressof(self._out)
        return (base + 63) // 64 * 64 + misalign

    def encode_tiled(self, c: EncodeCase) -> tuple[int, bytes]:
        dims, strides, box, estr = c.padded()
        p = self._outptr(c.misalign)
        ctypes.memset(p, FILL_BYTE, 128)
        rc = self.lib.cuTensorMapEncodeTiled(
            p, c.dtype & 0xFFFFFFFF if c.dtype >= 0 else c.dtype, c.rank & 0xFFFFFFFF, ctypes.c_void_p(c.addr or None),
            (ctypes.c_uint64 * 8)(*dims), (ctypes.c_uint64 * 8)(*strides), (ctypes.c_uint32 * 8)(*box),
            (ctypes.c_uint32 * 8)(*estr), c.interleave, c.swizzle, c.l2, c.oob)  # 8 entries: rank 6 and 7 calls
        return int(rc), ctypes.string_at(p, 128)

    def encode_im2col(self, d: dict) -> tuple[int, bytes]:
        r = d["rank"]
        p = self._outptr()
        ctypes.memset(p, FILL_BYTE, 128)
        pad = lambda v, n: list(v) + [0] * (n - len(v))  # noqa: E731
        rc = self.lib.cuTensorMapEncodeIm2col(
            p, d["dtype"], r, ctypes.c_void_p(d["addr"]), (ctypes.c_uint64 * 6)(*pad(d["dims"], 6)),
            (ctypes.c_uint64 * 5)(*pad(d["strides"], 5)), (ctypes.c_int * 3)(*pad(d["lower"], 3)),
            (ctypes.c_int * 3)(*pad(d["upper"], 3)), d["channels"], d["pixels"],
            (ctypes.c_uint32 * 6)(*pad(d["estr"], 6)), d["interleave"], d["swizzle"], d["l2"], d["oob"])
        return int(rc), ctypes.string_at(p, 128)

    def error_name(self, rc: int) -> str:
        s = ctypes.c_char_p()
        try:
            self.lib.cuGetErrorName(rc, ctypes.byref(s))
            return (s.value or b"?").decode()
        except Exception:  # noqa: BLE001
            return f"CUresult {rc}"

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            raise RuntimeError(f"{what} failed: {self.error_name(rc)} ({rc})")

    def function(self, cubin: bytes, name: str):
        key = hashlib.sha256(cubin).hexdigest()
        mod = self._mods.get(key)
        if mod is None:
            mod = ctypes.c_void_p()
            self._keep = ctypes.create_string_buffer(cubin, len(cubin))
            self._check(self.lib.cuModuleLoadData(ctypes.byref(mod), self._keep), "cuModuleLoadData")
            self._mods[key] = mod
        fn = ctypes.c_void_p()
        self._check(self.lib.cuModuleGetFunction(ctypes.byref(fn), mod, name.encode()), f"cuModuleGetFunction({name})")
        return fn

    def global_address(self, cubin: bytes, name: str) -> int:
        """The device address of a module global of the driver's module of ``cubin``."""
        self.function(cubin, "const_probe")
        mod = self._mods[hashlib.sha256(cubin).hexdigest()]
        ptr, size = ctypes.c_uint64(), ctypes.c_size_t()
        self._check(self.lib.cuModuleGetGlobal_v2(ctypes.byref(ptr), ctypes.byref(size), mod, name.encode()),
                    f"cuModuleGetGlobal({name})")
        return int(ptr.value)

    def launch(self, fn, grid: int, block: int, shared: int, params: list[bytes]) -> None:
        bufs = [ctypes.create_string_buffer(p, len(p)) for p in params]
        arr = (ctypes.c_void_p * len(bufs))(*[ctypes.addressof(b) for b in bufs])
        self._check(self.lib.cuLaunchKernel(fn, grid, 1, 1, block, 1, 1, shared, None, arr, None), "cuLaunchKernel")
        self._check(self.lib.cuCtxSynchronize(), "cuCtxSynchronize")


def _kernel_args(kernel: str, values: dict) -> tuple:
    """A probe kernel's arguments in parameter order, as cupy and flashsim.cuda take them: a tensor map (bytes)
    as a 128-byte struct by value, a device array as itself, a number as the parameter's unsigned width."""
    struct = np.dtype([("opaque", "<u8", (16,))], align=True)
    args = []
    for name, size in KERNEL_PARAMS[kernel]:
        v = values[name]
        if isinstance(v, (bytes, bytearray)):
            args.append(np.frombuffer(bytes(v), struct)[0])
        elif hasattr(v, "data") and hasattr(v.data, "ptr"):
            args.append(v)
        else:
            args.append({4: np.uint32, 8: np.uint64}[size](int(v) & ((1 << (8 * size)) - 1)))
    return tuple(args)


def _param_bytes(kernel: str, values: dict) -> list[bytes]:
    out = []
    for name, size in KERNEL_PARAMS[kernel]:
        v = values[name]
        if isinstance(v, (bytes, bytearray)):
            if len(v) != size:
                raise ValueError(f"{kernel}.{name}: {len(v)} bytes for a {size}-byte parameter")
            out.append(bytes(v))
        else:
            out.append(int(v & ((1 << (8 * size)) - 1)).to_bytes(size, "little"))
    return out


class Launcher:
    """Runs probe_tma.cu's kernels on the GPU: through cupy (runtime.load_cubin, the tensor map passed as a numpy
    struct) when param_probe shows that path passes 128-byte parameters intact, else through cuLaunchKernel."""

    def __init__(self, b: Build, driver: Driver, path: str = "check"):
        from flashsim.gpu import runtime

        self.cp = runtime.require_gpu()
        self.cp.zeros(1, self.cp.uint8)  # the context, current on this thread
        self.b, self.drv = b, driver
        self.runtime = runtime
        self.path = "driver"
        self.path_note = ""
        if path == "driver":
            return
        try:
            self._cupy_mod = runtime.load_cubin(b.cubin)
            if path == "cupy" or self._check_cupy():
                self.path = "cupy"
        except Exception as exc:  # noqa: BLE001 - the driver path is used instead
            self.path_note = f"cupy path unusable: {type(exc).__name__}: {exc}"[:300]

    def _check_cupy(self) -> bool:
        tm = bytes(range(128))
        tm2 = bytes((i * 7 + 3) & 0xFF for i in range(128))
        out = self.cp.zeros(80, self.cp.uint64)
        self._launch_cupy("param_probe", 1, 32, 0, {"tm": tm, "x": 0x1234567, "tm2": tm2, "off": 0, "out": out})
        o = out.get()
        ok = (o[2:18].tobytes() == tm and o[18:34].tobytes() == tm2 and int(o[37]) == 0x1234567)
        if not ok:
            self.path_note = "cupy passed the 128-byte parameter differently: the driver path is used"
        return ok

    def _launch_cupy(self, kernel, grid, block, shared, values):
        args = _kernel_args(kernel, values)
        f = self._cupy_mod.get_function(kernel)
        self.runtime.launch(f, (grid,), (block,), args, shared_mem=shared)

    def launch(self, kernel: str, grid: int, block: int, shared: int, values: dict) -> None:
        if self.path == "cupy":
            self._launch_cupy(kernel, grid, block, shared, values)
            return
        vals = {k: (int(v.data.ptr) if hasattr(v, "data") and hasattr(v.data, "ptr") else v) for k, v in values.items()}
        self.drv.launch(self.drv.function(self.b.cubin, kernel), grid, block, shared, _param_bytes(kernel, vals))


# ================================================================================================ a GPU stand-in
class _FakeArray:
    """A host array shaped like the bits of cupy's that the phases use (``--fake``: the orchestration tested on
    a machine without a GPU; the kernels do not run, the outputs keep their initial bytes)."""

    _next = [0x7F00_0000_0000]

    def __init__(self, a):
        self.a = np.array(a)
        self.data = type("P", (), {"ptr": _FakeArray._next[0]})()
        _FakeArray._next[0] += (self.a.nbytes + 1023) // 512 * 512 + 4096

    def get(self):
        return self.a.copy()

    def set(self, v):
        self.a[...] = v


class _FakeCupy:
    uint8, uint32, uint64 = np.uint8, np.uint32, np.uint64

    @staticmethod
    def asarray(a):
        return _FakeArray(a)

    @staticmethod
    def zeros(n, dt):
        return _FakeArray(np.zeros(n, dt))


class _FakeDriver:
    """cuTensorMapEncodeTiled as the documentation has it (return code 1 for an invalid call), no bytes."""

    has_im2col = False

    def encode_tiled(self, c: EncodeCase):
        return (0 if doc_verdict(c)[0] else 1), bytes(128)

    def error_name(self, rc: int) -> str:
        return {0: "CUDA_SUCCESS", 1: "CUDA_ERROR_INVALID_VALUE"}.get(rc, str(rc))


class _FakeLauncher:
    path, path_note = "fake", "no GPU: kernels are not run"
    cp = _FakeCupy()

    def launch(self, kernel, grid, block, shared, values):
        _param_bytes(kernel, {k: (v.data.ptr if isinstance(v, _FakeArray) else v) for k, v in values.items()})
        crash = os.environ.get("FLASHSIM_TMA_FAKE_CRASH", "")
        if crash and values.get("c4", None) is not None and _FAKE_CASE[0] in {int(x) for x in crash.split(",")}:
            os._exit(7)  # a child that dies (as after a fault that kills the process)


_FAKE_CASE = [-1]


# ================================================================================================ the interpreter
class _InterpCupy:
    """flashsim.cuda's arrays under the names of cupy's that the phases use."""

    uint8, uint32, uint64 = np.uint8, np.uint32, np.uint64

    @staticmethod
    def asarray(a):
        import flashsim.cuda as fc

        return fc.asarray(np.ascontiguousarray(a))

    @staticmethod
    def zeros(n, dt):
        import flashsim.cuda as fc

        return fc.zeros(n, dt)


class InterpDriver:
    """cuTensorMapEncodeTiled for the interpreter: flashsim's checks, then ``TensorMap.to_bytes``."""

    has_im2col = False

    def encode_tiled(self, c: EncodeCase):
        from flashsim.errors import ArgumentError

        try:
            tm = TensorMap.encode_tiled(c.dtype, c.rank, c.addr, c.dims, c.strides, c.box, c.estr, c.interleave,
                                        c.swizzle, c.l2, c.oob)
        except ArgumentError:
            return 1, bytes([FILL_BYTE]) * 128
        return 0, tm.to_bytes()

    def error_name(self, rc: int) -> str:
        return {0: "CUDA_SUCCESS", 1: "CUDA_ERROR_INVALID_VALUE"}.get(rc, str(rc))


class InterpLauncher:
    """probe_tma.cu's kernels in flashsim's interpreter, from the same cubin bytes."""

    path, path_note = "interpreter", ""
    cp = _InterpCupy()

    def __init__(self, b: Build, exec_options=None):
        self.b = b
        self.exec_options = exec_options

    def launch(self, kernel: str, grid: int, block: int, shared: int, values: dict) -> None:
        args = _kernel_args(kernel, values)
        f = self.b.module.get_function(kernel)
        f((grid,), (block,), args, shared_mem=shared, exec_options=self.exec_options)


def run_case(seed: int, c: TmaCase, b: Build | None = None, launcher=None, driver=None) -> dict:
    """One case in the interpreter (default) or with the given launcher and driver: the record entry that
    the GPU run makes for it (the same kernels, arguments and inputs)."""
    b = b or build()
    return _run_case(launcher or InterpLauncher(b), driver or InterpDriver(), seed, c)


# ================================================================================================ phases (children)
def _phase_encode(seed: int, n_random: int, n_invalid: int, fake: bool = False) -> dict:
    if fake:
        drv = _FakeDriver()
    else:
        from flashsim.gpu import runtime

        cp = runtime.require_gpu()
        cp.zeros(1, cp.uint8)
        drv = Driver()
    cases = encode_cases(seed, n_random, n_invalid)
    res = [drv.encode_tiled(c) for c in cases]
    arrays = encode_arrays(cases)
    arrays["rc"] = np.array([r for r, _ in res], np.int32)
    arrays["bytes"] = np.frombuffer(b"".join(b for _, b in res), np.uint8).reshape(-1, 128)
    arrays["names"] = np.array(sorted({drv.error_name(r) + f"={r}" for r, _ in res}))
    if drv.has_im2col:
        im = im2col_cases()
        r2 = [drv.encode_im2col(d) for d in im]
        arrays["im2col_rc"] = np.array([r for r, _ in r2], np.int32)
        arrays["im2col_bytes"] = np.frombuffer(b"".join(b for _, b in r2), np.uint8).reshape(-1, 128)
        arrays["im2col_args"] = np.array([json.dumps(d) for d in im])
    return arrays


def encode_arrays(cases: Sequence[EncodeCase]) -> dict:
    """The arguments of the encode cases as arrays (dims, strides, box, estr padded to 7, 6, 7, 7)."""
    pads = [c.padded() for c in cases]
    verdicts = [doc_verdict(c) for c in cases]
    return {
        "group": np.array([c.group for c in cases]), "label": np.array([c.label for c in cases]),
        "dtype": np.array([c.dtype for c in cases], np.int64), "rank": np.array([c.rank for c in cases], np.int64),
        "addr": np.array([c.addr for c in cases], np.uint64),
        "dims": np.array([p[0] for p in pads], np.uint64), "strides": np.array([p[1] for p in pads], np.uint64),
        "box": np.array([p[2] for p in pads], np.uint64), "estr": np.array([p[3] for p in pads], np.uint64),
        "interleave": np.array([c.interleave for c in cases], np.int64),
        "swizzle": np.array([c.swizzle for c in cases], np.int64), "l2": np.array([c.l2 for c in cases], np.int64),
        "oob": np.array([c.oob for c in cases], np.int64), "misalign": np.array([c.misalign for c in cases], np.int64),
        "doc_valid": np.array([v for v, _ in verdicts]), "doc_reason": np.array([w[:160] for _, w in verdicts]),
    }


def _launch_path(parts: Path) -> str:
    """The launch path the launchcheck child found to work ("driver" when it did not finish)."""
    p = parts / "launch_path.txt"
    return p.read_text().split()[0] if p.exists() and p.read_text().strip() else "driver"


def _phase_param(b: Build, fake: bool = False, path: str = "driver") -> dict:
    drv = _FakeDriver() if fake else Driver()
    L = _FakeLauncher() if fake else Launcher(b, drv, path)
    cp = L.cp
    rng = np.random.default_rng(5)
    out: dict[str, Any] = {"launch_path": np.array(L.path), "launch_note": np.array(L.path_note)}
    outs, maps, xs = [], [], []
    for k in range(3):
        tm = rng.integers(0, 256, 128, dtype=np.uint8).tobytes()
        tm2 = rng.integers(0, 256, 128, dtype=np.uint8).tobytes()
        x = int(rng.integers(0, 1 << 31))
        o = cp.zeros(2 * 40, cp.uint64)
        L.launch("param_probe", 2, 32, 0, {"tm": tm, "x": x, "tm2": tm2, "off": 0, "out": o})
        outs.append(o.get())
        maps.append(np.frombuffer(tm + tm2, np.uint8))
        xs.append(x)
    out["out"] = np.stack(outs)
    out["maps"] = np.stack(maps)
    out["x"] = np.array(xs, np.int64)
    # the host's view of the __device__ marker (the driver's module of the same cubin; cupy's when used)
    try:
        if L.path == "cupy":
            out["marker_host"] = np.array([int(L._cupy_mod.get_global("fs_tma_marker").data.ptr)], np.uint64)
        elif L.path == "driver":
            out["marker_host"] = np.array([drv.global_address(b.cubin, "fs_tma_marker")], np.uint64)
    except Exception as exc:  # noqa: BLE001
        out["marker_note"] = np.array(str(exc)[:200])
    try:
        o = cp.zeros(2, cp.uint64)
        L.launch("const_probe", 1, 1, 0, {"out": o})
        out["const_out"] = o.get()
    except Exception as exc:  # noqa: BLE001
        out["const_note"] = np.array(str(exc)[:200])
    return out


def _case_fields(c: TmaCase) -> dict:
    pad = lambda v, n: np.array(list(v)[:n] + [0] * (n - len(v)), np.int64)  # noqa: E731
    return {"dtype": c.dtype, "rank": c.rank, "dims": pad(c.dims, 5), "strides": pad(c.strides, 4),
            "box": pad(c.box, 5), "estr": pad(c.estr, 5), "interleave": c.interleave, "swizzle": c.swizzle,
            "l2": c.l2, "oob": c.oob, "coords": pad(c.coords, 5), "store_coords": pad(c.store_coords, 5),
            "addr_off": c.addr_off, "buf_bytes": c.buf_bytes,
            "dst_off": c.dst_off, "region": c.region, "tx": c.tx, "flags": c.flags, "op": REDUCE_OPS[c.op],
            "kind": KIND[c.kind], "note": c.note}


def _case_inputs(seed: int, c: TmaCase):
    """The global buffer and the shared source of a case (deterministic in the seed, the kind and the index)."""
    rng = np.random.default_rng([seed, 17, KIND[c.kind], c.index])
    buf = rng.integers(0, 256, c.buf_bytes, dtype=np.uint8)
    src = rng.integers(0, 256, c.region, dtype=np.uint8)
    if c.kind == "reduce" and c.dtype in (6, 7, 9):
        buf = _float_bytes(rng, c.dtype, c.buf_bytes)
        src = _float_bytes(rng, c.dtype, c.region)
    return buf, src


def _float_bytes(rng, dtype: int, nbytes: int) -> np.ndarray:
    """Random finite values of the type, exponents spread over +-2^12, with a few specials (NaN, Inf, -0,
    subnormals) where nbytes allows."""
    if dtype == 7:
        v = (rng.uniform(-1, 1, nbytes // 4) * np.exp2(rng.integers(-12, 13, nbytes // 4))).astype(np.float32)
        bits = v.view(np.uint32)
        special = np.array([0x7FC00000, 0xFF800000, 0x7F800000, 0x80000000, 0x00000001, 0x807FFFFF, 0x7F7FFFFF],
                           np.uint32)
    else:
        import ml_dtypes

        f = np.float16 if dtype == 6 else ml_dtypes.bfloat16
        v = (rng.uniform(-1, 1, nbytes // 2) * np.exp2(rng.integers(-8, 9, nbytes // 2))).astype(f)
        bits = v.view(np.uint16)
        special = np.array([0x7E00, 0xFC00, 0x7C00, 0x8000, 0x0001, 0x83FF, 0x7BFF] if dtype == 6 else
                           [0x7FC0, 0xFF80, 0x7F80, 0x8000, 0x0001, 0x807F, 0x7F7F], np.uint16)
    k = min(len(special), len(bits) // 64)
    if k:
        pos = rng.choice(len(bits), k, replace=False)
        bits[pos] = special[:k]
    out = np.zeros(nbytes, np.uint8)
    raw = bits.view(np.uint8)
    out[:len(raw)] = raw
    return out


def fill_seed(seed: int, c: TmaCase) -> int:
    """The sentinel seed of a case's tma_load runs."""
    return (seed * 7919 + KIND[c.kind] * 100003 + c.index) & 0xFFFFFFFF


def _run_case(L: Launcher, drv: Driver, seed: int, c: TmaCase) -> dict:
    """Encode the case's map on its buffer, then load (twice) and store (twice), or reduce once."""
    cp = L.cp
    rec = _case_fields(c)
    buf, src = _case_inputs(seed, c)
    d_buf = cp.asarray(buf)
    gaddr = int(d_buf.data.ptr)
    ec = EncodeCase("case", "", c.dtype, c.rank, gaddr + c.addr_off, c.dims, c.strides, c.box, c.estr, c.interleave,
                    c.swizzle, c.l2, c.oob)
    rc, tm = drv.encode_tiled(ec)
    rec.update(rc=rc, map=np.frombuffer(tm, np.uint8).copy(), gaddr=gaddr, input=buf, fill_seed=fill_seed(seed, c))
    if rc != CUDA_SUCCESS:
        rec["error"] = f"cuTensorMapEncodeTiled returned {drv.error_name(rc)} ({rc})"
        return rec
    d_tm = cp.asarray(np.frombuffer(tm, np.uint8))
    co = list(c.coords) + [0] * (5 - len(c.coords))
    common = {"tm": tm, "gtm": d_tm, "rank_bit": 1 << (c.rank - 1), "c0": co[0], "c1": co[1], "c2": co[2],
              "c3": co[3], "c4": co[4]}
    words = c.region // 4
    if c.op == "store":
        dumps, infos = [], []
        for inv in (0, 1):
            dump = cp.zeros(words, cp.uint32)
            info = cp.zeros(5, cp.uint64)
            L.launch("tma_load", 1, BLOCK, c.region, {**common, "dst_off": c.dst_off, "tx_bytes": c.tx,
                                                      "region_words": words, "seed": fill_seed(seed, c),
                                                      "flags": c.flags | (F_INVERT if inv else 0),
                                                      "timeout": TIMEOUT_CYCLES, "dump": dump, "info": info})
            dumps.append(dump.get().view(np.uint8))
            infos.append(info.get())
        rec["load_dump"] = dumps[0]
        rec["load_same"] = np.packbits(dumps[0] == dumps[1])
        rec["load_info"] = np.stack(infos)
    outs, sinfo = [], []
    d_src = cp.asarray(src.view(np.uint32))
    sc = list(c.store_coords) + [0] * (5 - len(c.store_coords))
    common = {**common, "c0": sc[0], "c1": sc[1], "c2": sc[2], "c3": sc[3], "c4": sc[4]}
    for inv in ((0, 1) if c.op == "store" else (0,)):
        d_buf.set(~buf if inv else buf)  # the tensor the map addresses, pre-filled
        info = cp.zeros(4, cp.uint64)
        L.launch("tma_store", 1, BLOCK, c.region, {**common, "src_off": c.dst_off, "region_words": words,
                                                   "op_bit": 1 << REDUCE_OPS[c.op], "flags": c.flags & F_GLOBAL_MAP,
                                                   "src": d_src, "info": info})
        outs.append(d_buf.get())
        sinfo.append(info.get())
    rec["store_src"] = src
    rec["store_out"] = outs[0]
    if len(outs) == 2:
        rec["store_same"] = np.packbits(outs[0] == outs[1])
    rec["store_info"] = np.stack(sinfo)
    return rec


def _phase_cases(b: Build, seed: int, cases: Sequence[TmaCase], out_dir: Path, start: int, fake: bool = False,
                 path: str = "driver") -> None:
    """Run cases[start:] in order, one npz per case in out_dir (case_NNNNN.npz); stops at the first error."""
    drv = _FakeDriver() if fake else Driver()
    L = _FakeLauncher() if fake else Launcher(b, drv, path)
    (out_dir / "launch_path.txt").write_text(L.path + "\n" + L.path_note)
    for c in cases[start:]:
        (out_dir / "current.txt").write_text(str(c.index))
        _FAKE_CASE[0] = c.index
        try:
            rec = _run_case(L, drv, seed, c)
        except Exception as exc:  # noqa: BLE001 - recorded; the parent starts a fresh process after it
            rec = _case_fields(c)
            rec["error"] = f"{type(exc).__name__}: {exc}"[:2000]
            _save_case(out_dir, c.index, rec)
            sys.exit(3)
        _save_case(out_dir, c.index, rec)


def _save_case(out_dir: Path, index: int, rec: dict) -> None:
    tmp = out_dir / f"case_{index:05d}.tmp.npz"
    np.savez(tmp, **{k: np.asarray(v) for k, v in rec.items()})
    tmp.rename(out_dir / f"case_{index:05d}.npz")


# ================================================================================================ the parent
#: per-case arrays whose length varies: concatenated in the record, with offsets
VAR_KEYS = ("input", "load_dump", "load_same", "store_src", "store_out", "store_same")


def _merge_cases(recs: list[dict], n_expected: int) -> dict:
    """Per-case dicts (in index order) -> arrays: scalars and fixed arrays stacked, VAR_KEYS concatenated with
    offsets ``<key>_off`` (n + 1 entries; an absent value is empty)."""
    out: dict[str, np.ndarray] = {}
    keys = set().union(*[r.keys() for r in recs]) if recs else set()
    for k in sorted(keys):
        if k in VAR_KEYS:
            parts = [np.asarray(r.get(k, np.zeros(0, np.uint8)), np.uint8).reshape(-1) for r in recs]
            out[k] = np.concatenate(parts) if parts else np.zeros(0, np.uint8)
            out[k + "_off"] = np.concatenate([[0], np.cumsum([len(p) for p in parts])]).astype(np.int64)
        elif k in ("error", "note"):
            out[k] = np.array([str(r.get(k, "")) for r in recs])
        elif k in ("load_info", "store_info"):
            shape = (2, 5) if k == "load_info" else (2, 4)
            arr = np.zeros((len(recs),) + shape, np.uint64)
            for i, r in enumerate(recs):
                if k in r:
                    v = np.asarray(r[k], np.uint64)
                    arr[i, :v.shape[0], :v.shape[1]] = v
            out[k] = arr
        else:
            vals = [r.get(k) for r in recs]
            proto = next(v for v in vals if v is not None)
            proto = np.asarray(proto)
            fill = np.full(proto.shape, -1 if k == "rc" else 0, proto.dtype)
            out[k] = np.stack([np.asarray(v) if v is not None else fill for v in vals])
    out["count"] = np.array(n_expected)
    return out


def _child_cmd(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "flashsim.gpu.validate_tma", *args]


def _run_child(args: list[str], timeout: float, log) -> tuple[int, str]:
    t = time.time()
    try:
        p = subprocess.run(_child_cmd(args), capture_output=True, text=True, timeout=max(5.0, timeout))
        rc, text = p.returncode, (p.stdout + p.stderr)[-3000:]
    except subprocess.TimeoutExpired as exc:
        rc, text = -9, f"timed out after {timeout:.0f}s: {(exc.stderr or b'')[-2000:]!r}"
    log(f"  child {' '.join(args[:2])} exited {rc} after {time.time() - t:.1f}s")
    return rc, text


def _case_phase(name: str, cases: list[TmaCase], dirs: Path, common: list[str], deadline: float, log) -> dict:
    """Run a case phase in children, restarting after a child that dies; returns the merged arrays and notes."""
    d = dirs / name
    d.mkdir(parents=True, exist_ok=True)
    notes, restarts = [], 0
    done = lambda: {int(p.stem.split("_")[1]) for p in d.glob("case_*.npz") if ".tmp" not in p.name}  # noqa: E731
    while True:
        have = done()
        todo = [c.index for c in cases if c.index not in have]
        if not todo:
            break
        left = deadline - time.time()
        if left < 5 or restarts > 40:
            notes.append(f"stopped with {len(todo)} cases left (time budget or restarts)")
            break
        start = todo[0]
        rc, text = _run_child(["--child", name, "--start", str(start), *common], left, log)
        if rc != 0:
            restarts += 1
            cur = d / "current.txt"
            culprit = int(cur.read_text()) if cur.exists() else start
            if culprit not in done():
                _save_case(d, culprit, {**_case_fields(cases[culprit]), "error": f"child exited {rc}: {text}"[-2000:]})
            notes.append(f"case {culprit}: child exited {rc}")
    recs = []
    for c in cases:
        p = d / f"case_{c.index:05d}.npz"
        if p.exists():
            with np.load(p) as z:
                recs.append({k: z[k] for k in z.files})
        else:
            recs.append({**_case_fields(c), "error": "not run"})
    path = (d / "launch_path.txt").read_text() if (d / "launch_path.txt").exists() else ""
    return {"arrays": _merge_cases(recs, len(cases)), "notes": notes, "launch_path": path}


def _summary_cases(a: dict) -> dict:
    err = a.get("error", np.array([]))
    rc = a.get("rc", np.zeros(0))
    out = {"cases": int(a["count"]), "encoded": int((rc == 0).sum()) if len(rc) else 0,
           "errors": int(sum(1 for e in err if e)), "first_errors": [str(e)[:300] for e in err if e][:5]}
    if "load_info" in a:
        li = a["load_info"]
        out["loads_completed"] = int((li[:, 0, 0] == 1).sum())
        written = []
        for i in range(len(li)):
            s, e = a["load_same_off"][i], a["load_same_off"][i + 1]
            bits = np.unpackbits(a["load_same"][s:e])[:int(a["region"][i])]
            written.append(int(bits.sum()))
        out["load_bytes_written_equals_tx"] = int(sum(1 for i, w in enumerate(written) if w == int(a["tx"][i])))
    return out


def _summary_encode(a: dict) -> dict:
    rc, dv = a["rc"], a["doc_valid"]
    out = {"calls": int(len(rc)), "return_codes": {str(k): int(v) for k, v in zip(*np.unique(rc, return_counts=True))},
           "doc_valid_driver_ok": int(((rc == 0) & dv).sum()), "doc_valid_driver_rejects": int(((rc != 0) & dv).sum()),
           "doc_invalid_driver_accepts": int(((rc == 0) & ~dv).sum()), "doc_invalid_driver_rejects":
           int(((rc != 0) & ~dv).sum()), "groups": {g: int((a["group"] == g).sum()) for g in np.unique(a["group"])}}
    disagree = np.nonzero((rc == 0) != dv)[0]
    out["disagreements"] = [f"{a['group'][i]} {a['label'][i]}: driver {int(rc[i])}, docs "
                            f"{'valid' if dv[i] else a['doc_reason'][i]}" for i in disagree[:40]]
    by_label = {}
    for i in disagree:
        k = f"{a['group'][i]}/{a['label'][i]}"
        by_label[k] = by_label.get(k, 0) + 1
    out["disagreements_by_label"] = by_label
    if "names" in a:
        out["error_names"] = [str(x) for x in a["names"]]
    return out


PHASES = ("encode", "param", "load", "reduce", "risky", "interleave")


def validate(out: Path, *, seed: int, cases: int, record: bool, dry_run: bool, budget: float, log=print,
             n_random: int = 3000, n_invalid: int = 600, fake: bool = False, phases: Sequence[str] = PHASES) -> dict:
    """Run the ``phases`` (see the module docstring; all by default); returns the report (also written to
    out/tma_report.json)."""
    from flashsim.sass.toolchain import versions

    t0 = time.time()
    deadline = t0 + budget
    out.mkdir(parents=True, exist_ok=True)
    b = build()
    cubin_path = out / "probe_tma.cubin"
    cubin_path.write_bytes(b.cubin)
    report: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": "python -m flashsim.gpu.validate_tma " + " ".join(sys.argv[1:]), "seed": seed, "arch": ARCH,
        "toolchain": versions(), "cubin_sha256": b.sha256, "probe_version": PROBE_VERSION, "phases": {},
        "dry_run": dry_run}
    main_cases = make_cases(seed, cases)
    red, risky, inter = reduce_cases(seed), risky_cases(seed), interleave_cases(seed)
    enc = encode_cases(seed, n_random, n_invalid)
    report["planned"] = {"encode": len(enc), "im2col": len(im2col_cases()), "load": len(main_cases),
                         "reduce": len(red), "risky": len(risky), "interleave": len(inter)}
    report["phases_run"] = list(phases)
    report["kernels"] = _check_cubin(b)
    arrays: dict[str, np.ndarray] = {"cubin/probe": np.frombuffer(b.cubin, np.uint8)}
    if dry_run:
        ea = encode_arrays(enc)
        report["phases"]["encode"] = {"doc_valid": int(ea["doc_valid"].sum()),
                                      "doc_invalid": int((~ea["doc_valid"]).sum()),
                                      "groups": {g: int((ea["group"] == g).sum()) for g in np.unique(ea["group"])}}
        report["phases"]["load"] = {"cases": len(main_cases), "bytes_moved": int(sum(c.tx for c in main_cases)),
                                    "swizzles": {str(s): sum(1 for c in main_cases if c.swizzle == s)
                                                 for s in range(4)},
                                    "interleaved": sum(1 for c in main_cases if c.interleave),
                                    "element_strides": sum(1 for c in main_cases if max(c.estr) > 1)}
        report["seconds"] = round(time.time() - t0, 2)
        _write(out, report)
        return report
    fk = ["--fake"] if fake else []
    rc, text = _run_child(["--child", "device", "--out", str(out), *fk], 60, log)
    if rc == 0 and (out / "parts" / "device.json").exists():
        report["device"] = json.loads((out / "parts" / "device.json").read_text())
    else:
        report["device"] = {"error": text[-1000:]}
    common = ["--out", str(out), "--seed", str(seed), "--cases", str(cases), *fk]
    rc, text = _run_child(["--child", "launchcheck", *common], 60, log)
    report["launch_path"] = (out / "parts" / "launch_path.txt").read_text() if (out / "parts" /
                                                                                 "launch_path.txt").exists() else text
    for phase in [p for p in ("encode", "param") if p in phases]:
        ts = time.time()
        rc, text = _run_child(["--child", phase, *common, "--n-random", str(n_random), "--n-invalid", str(n_invalid)],
                              deadline - time.time(), log)
        p = out / "parts" / f"{phase}.npz"
        entry: dict[str, Any] = {"seconds": round(time.time() - ts, 2), "exit": rc}
        if p.exists():
            with np.load(p) as z:
                part = {k: z[k] for k in z.files}
            arrays.update({f"{phase}/{k}": v for k, v in part.items()})
            entry.update(_summary_encode(part) if phase == "encode" else _summary_param(part))
        else:
            entry["error"] = text[-2000:]
        report["phases"][phase] = entry
        _write(out, report)
        log(f"{phase}: {json.dumps({k: v for k, v in entry.items() if not isinstance(v, (list, dict))})}")
    for phase, cs in (("load", main_cases), ("reduce", red), ("risky", risky), ("interleave", inter)):
        if phase not in phases:
            continue
        ts = time.time()
        got = _case_phase(phase, cs, out / "parts", common, deadline, log)
        arrays.update({f"{phase}/{k}": v for k, v in got["arrays"].items()})
        entry = {"seconds": round(time.time() - ts, 2), "notes": got["notes"][:40], "launch_path": got["launch_path"]}
        entry.update(_summary_cases(got["arrays"]))
        if not fake:
            try:  # the GPU against flashsim's model of the box (flashsim.sass.tensormap)
                entry["model"] = model_summary(got["arrays"], seed)
                if phase == "interleave":  # also: which expect-tx completed (the model's box bytes, every case)
                    info = got["arrays"].get("load_info")
                    if info is not None and len(info):
                        entry["model"]["loads_completed"] = int((np.asarray(info)[:, 0, 0] == 1).sum())
            except Exception as exc:  # noqa: BLE001 - the record matters more than the comparison
                entry["model"] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
        report["phases"][phase] = entry
        _write(out, report)
        log(f"{phase}: {json.dumps({k: v for k, v in entry.items() if not isinstance(v, (list, dict))})}")
    report["seconds"] = round(time.time() - t0, 2)
    _write(out, report)
    if record:
        arrays["probe_version"] = np.array(PROBE_VERSION)
        np.savez_compressed(out / "tma_probes.npz", **digest_record(arrays))
        np.savez_compressed(out / "tma_interleaved.npz", **interleaved_cases(arrays))
        rec = {k: report[k] for k in ("date", "command", "seed", "arch", "toolchain", "cubin_sha256", "planned",
                                      "probe_version")}
        rec["device"] = report.get("device")
        rec["phases"] = {k: {kk: vv for kk, vv in v.items() if kk not in ("disagreements", "first_errors", "notes")}
                         for k, v in report["phases"].items()}
        (out / "tma_probes.json").write_text(json.dumps(rec, indent=1, default=_json) + "\n")
        log(f"recorded {out / 'tma_probes.json'} and {out / 'tma_probes.npz'}: copy both to traces/tma/")
    return report


def _summary_param(a: dict) -> dict:
    o = a["out"]  # (launches, 2 * 40)
    maps = a["maps"]
    out = {"launch_path": str(a.get("launch_path", "")), "launch_note": str(a.get("launch_note", ""))}
    tm_addr = [int(x) for x in o[:, 0]]
    out["tm_generic_addresses"] = [hex(x) for x in tm_addr]
    out["tm2_minus_tm"] = [int(o[i, 1]) - int(o[i, 0]) for i in range(len(o))]
    out["cta1_same_addresses"] = bool((o[:, 0] == o[:, 40]).all())
    out["generic_loads_read_the_params"] = bool(all(o[i, 2:18].tobytes() == maps[i, :128].tobytes() and
                                                    o[i, 18:34].tobytes() == maps[i, 128:].tobytes()
                                                    for i in range(len(o))))
    out["device_marker"] = hex(int(o[0, 34]))
    if "marker_host" in a:
        out["marker_host"] = hex(int(a["marker_host"][0]))
        out["tm_minus_marker"] = [int(x) - int(a["marker_host"][0]) for x in tm_addr]
    out["shared_generic"] = hex(int(o[0, 36]))
    if "const_out" in a:
        out["constant_generic"] = hex(int(a["const_out"][0]))
    return out


def _check_cubin(b: Build) -> dict:
    """The kernels' parameter layouts in the cubin against KERNEL_PARAMS (sizes, in order)."""
    from flashsim.sass.cubin import Cubin

    c = Cubin(b.cubin, name=PROBE_FILE)
    out = {}
    for k, params in KERNEL_PARAMS.items():
        info = c.kernels.get(k)
        if info is None:
            raise RuntimeError(f"kernel {k} is missing from the cubin of {PROBE_FILE}")
        sizes = [p.size for p in info.params]
        if sizes != [s for _, s in params]:
            raise RuntimeError(f"{k}: the cubin's parameter sizes {sizes} differ from the host's "
                               f"{[s for _, s in params]}")
        out[k] = {"params": [(n, s, p.offset) for (n, s), p in zip(params, info.params)], "param_base": info.param_base}
    return out


def _write(out: Path, report: dict) -> None:
    (out / "tma_report.json").write_text(json.dumps(report, indent=1, default=_json) + "\n")


def _json(x):
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.bool_):
        return bool(x)
    if isinstance(x, np.ndarray):
        return x.tolist()
    return str(x)


def _child(a) -> int:
    """One phase in this (child) process; its results go under OUT/parts."""
    out = Path(a.out)
    parts = out / "parts"
    parts.mkdir(parents=True, exist_ok=True)
    if a.child == "device":
        if a.fake:
            (parts / "device.json").write_text(json.dumps({"name": "none (--fake)"}))
            return 0
        from flashsim.gpu import runtime

        info = runtime.device_info()
        try:
            d = Driver()
            v = ctypes.c_int()
            d.lib.cuDriverGetVersion(ctypes.byref(v))
            info["cuDriverGetVersion"] = int(v.value)
        except Exception as exc:  # noqa: BLE001
            info["driver_note"] = str(exc)
        (parts / "device.json").write_text(json.dumps(info, indent=1))
        return 0
    b = build((out / "probe_tma.cubin").read_bytes())
    if a.child == "launchcheck":
        # whether cupy passes the 128-byte struct intact (else cuLaunchKernel); written before anything else
        (parts / "launch_path.txt").write_text("driver\nlaunchcheck did not finish")
        L = _FakeLauncher() if a.fake else Launcher(b, Driver(), "check")
        (parts / "launch_path.txt").write_text(f"{L.path}\n{L.path_note}")
        return 0
    path = _launch_path(parts)
    if a.child == "encode":
        arrays = _phase_encode(a.seed, a.n_random, a.n_invalid, a.fake)
    elif a.child == "param":
        arrays = _phase_param(b, a.fake, path)
    else:
        cases = {"load": lambda: make_cases(a.seed, a.cases), "reduce": lambda: reduce_cases(a.seed),
                 "risky": lambda: risky_cases(a.seed), "interleave": lambda: interleave_cases(a.seed)}[a.child]()
        d = parts / a.child
        d.mkdir(exist_ok=True)
        _phase_cases(b, a.seed, cases, d, a.start, a.fake, path)
        return 0
    np.savez(parts / f"{a.child}.tmp.npz", **arrays)
    (parts / f"{a.child}.tmp.npz").rename(parts / f"{a.child}.npz")
    return 0


# ================================================================================================ the model
def case_tensor_map(c: TmaCase, gaddr: int) -> TensorMap:
    """The case's map on a buffer at ``gaddr``."""
    return c.tensor_map(gaddr)


def expected_case(seed: int, c: TmaCase, gaddr: int, base: int = 0x400) -> dict:
    """What flashsim.sass.tensormap says a case's kernels leave behind (the shared region's base address
    ``base``, the buffer at ``gaddr``): load_dump (A and B runs: region bytes), store_out (A and B, or the
    reduction's one)."""
    from flashsim.sass import tensormap as tmod

    tm = c.tensor_map(gaddr)
    buf, src = _case_inputs(seed, c)
    words = c.region // 4
    co = tuple(c.coords[:c.rank])
    out: dict[str, list] = {"load_dump": [], "store_out": []}

    def read(addrs):
        off = (np.asarray(addrs, np.uint64) - np.uint64(gaddr)).astype(np.int64)
        return buf[off[:, None] + np.arange(tm.unit_size)]

    if c.op == "store":
        sb, data = tmod.load_box(tm, co, base + c.dst_off, read)
        for inv in (False, True):
            d = fill_pattern(words, fill_seed(seed, c), inv).view(np.uint8).copy()
            d[sb - base] = data
            out["load_dump"].append(d)
    smem = np.zeros(base + c.region, np.uint8)
    smem[base:] = src
    ga, elems = tmod.store_box(tm, tuple(c.store_coords[:c.rank]), base + c.dst_off, smem)
    off = (ga - np.uint64(gaddr)).astype(np.int64)[:, None] + np.arange(tm.unit_size)
    for inv in ((False, True) if c.op == "store" else (False,)):
        o = (~buf if inv else buf).copy()
        if c.op == "store":
            o[off] = elems  # repeated addresses: the later unit wins
        else:
            for lay in tmod.in_order(off[:, 0]):  # overlapping units reduce in box order
                o[off[lay]] = tmod.reduce_elements(c.op, c.dtype, o[off[lay]], elems[lay])
        out["store_out"].append(o)
    return out


def compare_case(rec: dict, exp: dict, label: str = "GPU") -> list[str]:
    """Differences between a case's record entry and :func:`expected_case` (or another record entry's
    arrays), each naming the array, the first differing byte and the count."""
    msgs = []
    got_load = [rec.get("load_dump")]
    if "load_same" in rec and rec.get("load_dump") is not None:
        same = np.unpackbits(np.asarray(rec["load_same"]))[:len(rec["load_dump"])].astype(bool)
        got_load.append(np.where(same, rec["load_dump"], ~np.asarray(rec["load_dump"])))
    for name, got in (("load_dump", got_load), ("store_out", [rec.get("store_out")])):
        for k, (g, e) in enumerate(zip(got, exp.get(name, []))):
            if g is None:
                continue
            g, e = np.asarray(g, np.uint8), np.asarray(e, np.uint8)
            if g.shape != e.shape:
                msgs.append(f"{name}[{'AB'[k]}]: {g.shape} bytes vs {e.shape}")
                continue
            bad = np.nonzero(g != e)[0]
            if len(bad):
                msgs.append(f"{name}[{'AB'[k]}]: {len(bad)} bytes differ, the first at {int(bad[0])}: {label} "
                            f"{int(g[bad[0]]):#04x}, model {int(e[bad[0]]):#04x}")
    return msgs


# ================================================================================================ the record
#: per-case arrays the record keeps as sha256 only (``<key>_sha``, (n, 32) bytes, zeros where absent): the GPU's
#: outputs, and the inputs, which regenerate from the seed (_case_inputs); the replay compares digests, bit for bit
DIGEST_KEYS = VAR_KEYS


def sha_bytes(a) -> np.ndarray:
    """The sha256 of an array's bytes as 32 uint8."""
    return np.frombuffer(hashlib.sha256(np.ascontiguousarray(np.asarray(a, np.uint8)).tobytes()).digest(), np.uint8)


def digest_record(arrays: dict) -> dict:
    """The record as kept in traces/tma: every per-case array of DIGEST_KEYS replaced by its sha256."""
    out = {}
    for k, v in arrays.items():
        phase, _, name = k.rpartition("/")
        if name.endswith("_off") and name[:-4] in DIGEST_KEYS:
            continue
        if name in DIGEST_KEYS and phase:
            off = arrays[f"{phase}/{name}_off"]
            sha = np.zeros((len(off) - 1, 32), np.uint8)
            for i in range(len(off) - 1):
                if off[i + 1] > off[i]:
                    sha[i] = sha_bytes(v[off[i]:off[i + 1]])
            out[f"{phase}/{name}_sha"] = sha
            continue
        out[k] = v
    return out


def interleaved_cases(arrays: dict) -> dict:
    """Every case with an interleaved map, bytes and all (``<phase>/<index>/<key>``): the record keeps the other
    cases' bytes as digests, these are what a model of interleave needs."""
    out = {}
    for phase in ("load", "reduce", "risky", "interleave"):
        if f"{phase}/count" not in arrays:
            continue
        for i in range(int(arrays[f"{phase}/count"])):
            rec = record_case(arrays, phase, i)
            if int(rec.get("interleave", 0)):  # the inputs regenerate from the seed (_case_inputs)
                out.update({f"{phase}/{i}/{k}": np.asarray(v) for k, v in rec.items() if k not in ("input", "store_src")})
    return out


def digest_cases(cases: dict) -> dict:
    """Per-case arrays (``<phase>/<index>/<key>``, as :func:`interleaved_cases` writes them) with every array of
    DIGEST_KEYS replaced by its sha256 (``<key>_sha``): the compact form of a record of such cases."""
    out = {}
    for k, v in cases.items():
        case, _, name = k.rpartition("/")
        if name in DIGEST_KEYS:
            out[f"{case}/{name}_sha"] = sha_bytes(v)
        else:
            out[k] = v
    return out


def digest_case(rec: dict) -> dict:
    """A case's arrays of DIGEST_KEYS as the record keeps them (``<key>_sha``; absent keys left out)."""
    return {f"{k}_sha": sha_bytes(rec[k]) for k in DIGEST_KEYS if k in rec and np.asarray(rec[k]).size}


def expected_digests(seed: int, c: TmaCase, gaddr: int, base: int = 0x400) -> dict:
    """:func:`expected_case` as the GPU's arrays would be recorded: load_dump (run A), load_same (where the A
    and B runs agree, packed), store_out (run A) and store_same, as ``<key>_sha``."""
    exp = expected_case(seed, c, gaddr, base)
    rec = {}
    if exp["load_dump"]:
        a, b = exp["load_dump"]
        rec["load_dump"], rec["load_same"] = a, np.packbits(a == b)
    if exp["store_out"]:
        rec["store_out"] = exp["store_out"][0]
        if len(exp["store_out"]) == 2:
            rec["store_same"] = np.packbits(exp["store_out"][0] == exp["store_out"][1])
    return digest_case(rec)


def load_record(path: Path = TRACE_NPZ) -> dict:
    """The recorded arrays (``tma_probes.npz``) by name."""
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def record_case(rec: dict, phase: str, i: int) -> dict:
    """Case ``i`` of ``phase`` in a record (or in merged arrays, phase "" with keys unprefixed) as the dict
    :func:`_run_case` made for it."""
    pre = f"{phase}/" if phase else ""
    out = {}
    for k, v in rec.items():
        if not k.startswith(pre) or k == pre + "count":
            continue
        name = k[len(pre):]
        if name.endswith("_off") and name[:-4] in VAR_KEYS:
            continue
        if "/" in name:
            continue
        if name in VAR_KEYS:
            off = rec[k + "_off"]
            if off[i + 1] > off[i]:
                out[name] = v[off[i]:off[i + 1]]
        else:
            out[name] = v[i]
    return out


def case_from_record(c: dict, index: int) -> TmaCase:
    """The TmaCase of a record entry (its fields)."""
    r = int(c["rank"])
    kind = {v: k for k, v in KIND.items()}[int(c["kind"])]
    op = {v: k for k, v in REDUCE_OPS.items()}[int(c["op"])]
    return TmaCase(index, kind, int(c["dtype"]), r, tuple(int(x) for x in c["dims"][:r]),
                   tuple(int(x) for x in c["strides"][:r - 1]), tuple(int(x) for x in c["box"][:r]),
                   tuple(int(x) for x in c["estr"][:r]), int(c["interleave"]), int(c["swizzle"]), int(c["l2"]),
                   int(c["oob"]), tuple(int(x) for x in c["coords"]), int(c["addr_off"]), int(c["buf_bytes"]),
                   int(c["dst_off"]), int(c["region"]), int(c["tx"]), int(c["flags"]), op, str(c.get("note", "")),
                   tuple(int(x) for x in c["store_coords"]) if "store_coords" in c else tuple(int(x) for x in
                                                                                              c["coords"]))


def model_summary(arrays: dict, seed: int, phase: str = "") -> dict:
    """Every encoded case of merged phase arrays against :func:`expected_case`: counts and the first
    differences (each naming the case's map)."""
    n = int(arrays[f"{phase + '/' if phase else ''}count"])
    out = {"equal": 0, "differ": 0, "not_modelled": 0, "skipped": 0, "first": []}
    for i in range(n):
        rec = record_case(arrays, phase, i)
        if int(rec.get("rc", -1)) != 0 or str(rec.get("error", "")):
            out["skipped"] += 1
            continue
        c = case_from_record(rec, i)
        try:
            base = int(rec["load_info"][0, 3]) if c.op == "store" else int(rec["store_info"][0, 2])
            msgs = compare_case(rec, expected_case(seed, c, int(rec["gaddr"]), base))
        except NotImplementedError as exc:
            out["not_modelled"] += 1
            if len(out["first"]) < 20:
                out["first"].append(f"case {i}: {exc}"[:300])
            continue
        if msgs:
            out["differ"] += 1
            if len(out["first"]) < 20:
                out["first"].append(f"case {i} ({c.note}; dtype {c.dtype} rank {c.rank} box {c.box} estr {c.estr} "
                                    f"swizzle {c.swizzle} interleave {c.interleave} oob {c.oob}): {msgs[0]}"[:400])
        else:
            out["equal"] += 1
    return out


def case_slice(rec: dict, phase: str, key: str, i: int) -> np.ndarray:
    """Case ``i``'s variable-length array ``key`` (one of VAR_KEYS) of ``phase`` in a record."""
    off = rec[f"{phase}/{key}_off"]
    return rec[f"{phase}/{key}"][off[i]:off[i + 1]]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flashsim.gpu.validate_tma", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="directory for the report (and the record with --record)")
    ap.add_argument("--record", action="store_true", help="also write tma_probes.json/.npz for traces/tma/")
    ap.add_argument("--dry-run", action="store_true", help="build and check everything that needs no GPU")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cases", type=int, default=400, help="load/store cases (default 400)")
    ap.add_argument("--phases", default=",".join(PHASES), help=f"comma-separated phases to run (default all: "
                                                               f"{','.join(PHASES)})")
    ap.add_argument("--budget", type=float, default=170.0, help="seconds for the whole run (default 170)")
    ap.add_argument("--n-random", type=int, default=3000, help=argparse.SUPPRESS)
    ap.add_argument("--n-invalid", type=int, default=600, help=argparse.SUPPRESS)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--fake", action="store_true", help=argparse.SUPPRESS)  # no GPU: the orchestration only
    a = ap.parse_args(argv)
    if a.child:
        try:
            return _child(a)
        except Exception:  # noqa: BLE001 - the parent shows the child's output
            traceback.print_exc()
            return 2
    if a.record and a.dry_run:
        from flashsim.errors import bad_argument

        raise bad_argument("record", True, "a record holds the GPU's outputs: it cannot be made with --dry-run")
    t = time.time()
    phases = [p for p in a.phases.split(",") if p]
    unknown = [p for p in phases if p not in PHASES]
    if unknown or not phases:
        why = f"unknown phase {unknown[0]!r}" if unknown else "no phase named"
        ap.error(f"--phases={a.phases!r}: {why}; the phases are {', '.join(PHASES)}")
    rep = validate(Path(a.out), seed=a.seed, cases=a.cases, record=a.record, dry_run=a.dry_run, budget=a.budget,
                   log=functools.partial(print, flush=True), n_random=a.n_random, n_invalid=a.n_invalid, fake=a.fake,
                   phases=phases)
    print(f"done in {time.time() - t:.1f}s; report in {a.out}/tma_report.json")
    errors = [p for p, e in rep["phases"].items() if e.get("error")]
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
