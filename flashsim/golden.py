"""Golden numerics data recorded on a GPU (``traces/numerics/*.npz``): load it and replay it on the models.

Each file holds the inputs, the GPU's outputs and a JSON provenance record (GPU, driver, CUDA,
cupy, source hashes, seed, date). Replaying re-computes every output with the simulator and counts
the elements whose bits differ; CI runs this without a GPU.
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from flashsim.errors import TraceError
from flashsim.numerics import cvt, fp32

DEFAULT_DIR = Path("traces") / "numerics"
#: the copy a wheel installs inside the package (pyproject.toml maps traces/numerics to flashsim.golden_data)
INSTALLED_DIR = Path(__file__).resolve().parent / "golden_data"
#: the repository's copy, beside the package (an editable install or a checkout run from anywhere)
REPOSITORY_DIR = Path(__file__).resolve().parents[1] / "traces" / "numerics"


def default_dir() -> Path:
    """Where the golden numerics data are: ./traces/numerics if present, else the copy installed with the
    package (a wheel), else the repository's (an editable install)."""
    for d in (DEFAULT_DIR, INSTALLED_DIR):
        if d.is_dir():
            return d
    return REPOSITORY_DIR


@dataclass(frozen=True)
class ReplayResult:
    """Outcome of replaying one instruction's golden outputs."""

    instruction: str
    cases: int
    mismatches: int
    source: str
    examples: list = field(default_factory=list)  # first mismatches: index, gpu and sim bits, inputs


def load(path) -> tuple[dict, dict]:
    """Arrays and provenance of one golden file; a damaged file is a TraceError naming it."""
    path = Path(path)
    try:
        # the file is opened here so that it is closed even when numpy fails on a damaged one
        with open(path, "rb") as fh, np.load(fh, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        raise TraceError(f"{path}: not a readable golden-data file ({e})") from e
    if "provenance" not in arrays:
        raise TraceError(f"{path}: no provenance record; golden data must say which GPU produced it")
    try:
        prov = json.loads(str(arrays.pop("provenance")))
    except json.JSONDecodeError as e:
        raise TraceError(f"{path}: provenance is not JSON ({e})") from e
    return arrays, prov


def _need(arrays, key, path):
    if key not in arrays:
        raise TraceError(f"{path}: missing array {key!r}")
    return arrays[key]


def compare(instruction: str, gpu, sim, source: str, inputs: dict) -> ReplayResult:
    """Count differing elements of ``gpu`` and ``sim`` and describe the first few."""
    gpu, sim = np.asarray(gpu), np.asarray(sim)
    if gpu.shape != sim.shape or gpu.dtype != sim.dtype:
        raise TraceError(f"{source}: {instruction}: recorded {gpu.dtype}{gpu.shape} but the model gave {sim.dtype}{sim.shape}")
    bad = np.argwhere(gpu != sim)
    examples = []
    for idx in bad[:5]:
        t = tuple(int(i) for i in idx)
        row = {"index": t, "gpu": hex(int(gpu[t])), "sim": hex(int(sim[t]))}
        for name, v in inputs.items():
            row[name] = hex(int(v[t])) if v.shape == gpu.shape else f"tile {t[0]}"
        examples.append(row)
    return ReplayResult(instruction, int(gpu.size), int(len(bad)), source, examples)


def replay_mma(path) -> list[ReplayResult]:
    from flashsim.numerics import mma  # numba: imported on first use

    arrays, _ = load(path)
    out = []
    for key in sorted(k[:-2] for k in arrays if k.endswith("/d")):
        # key spells the PTX instruction: mma.sync.aligned.<shape>.row.col.<dtype>.<atype>.<btype>.<ctype>
        parts = key.split(".")
        if len(parts) != 10 or parts[3] not in ("m16n8k16", "m16n8k8"):
            raise TraceError(f"{path}: unknown instruction {key!r}")
        shape, ctype, atype = parts[3], parts[6], parts[7]
        fn = mma.mma_m16n8k16 if shape == "m16n8k16" else mma.mma_m16n8k8
        a, b, c, d = (_need(arrays, f"{key}/{n}", path) for n in "abcd")
        out.append(compare(key, d, fn(a, b, c, atype=atype, ctype=ctype), str(path), {"a": a, "b": b, "c": c}))
    return out


def replay_f32(path) -> list[ReplayResult]:
    arrays, _ = load(path)
    operands = {n: _need(arrays, n, path) for n in "abc"}
    out = []
    for name, (ptx, args, model) in fp32.OPS.items():
        gpu = _need(arrays, f"out:{name}", path)
        sim = model(*(operands[n] for n in args))
        out.append(compare(ptx, gpu, sim, str(path), {n: operands[n] for n in args}))
    return out


def replay_cvt(path) -> list[ReplayResult]:
    arrays, _ = load(path)
    out = []
    for key in sorted(k for k in arrays if k.startswith("out:")):
        op = key[4:]
        dst, src, _, _ = cvt.parse(op)
        if src == "f32":
            x = _need(arrays, "x", path)
            y = _need(arrays, "y", path) if dst.endswith("x2") else None
            sim = cvt.cvt(op, x, y)
            inputs = {"a": x} if y is None else {"a": x, "b": y}
        else:
            x = _need(arrays, "x16", path)
            sim, inputs = cvt.cvt(op, x), {"a": x}
        out.append(compare(op, arrays[key], sim, str(path), inputs))
    return out


def replay_sfu(path) -> list[ReplayResult]:
    """The special-function golden files: f32 ops on ``x`` (or ``x_small``), 16-bit ex2 on ``x16``, div.rn."""
    from flashsim.numerics import sfu  # numba: imported on first use

    arrays, _ = load(path)
    inputs = dict(arrays)
    partner = Path(path).with_name("sfu_golden_a.npz")
    if Path(path).name != partner.name:  # the shared full-size inputs live in the _a file
        inputs.setdefault("x", load(partner)[0]["x"])
    out = []
    models = {name: (ptx, fn) for name, (ptx, fn) in sfu.SWEPT.items()}
    models["ex2_approx_f16x2"] = ("ex2.approx.f16x2", sfu.ex2_approx_f16x2)
    models["ex2_approx_ftz_bf16x2"] = ("ex2.approx.ftz.bf16x2", sfu.ex2_approx_ftz_bf16x2)
    for key in sorted(k for k in arrays if k.startswith("out:")):
        name = key[4:]
        if name == "div_rn_f32":
            a, b = _need(arrays, "div_a", path), _need(arrays, "div_b", path)
            out.append(compare("div.rn.f32", arrays[key], sfu.div_rn_f32(a, b), str(path), {"a": a, "b": b}))
            continue
        if name not in models:
            raise TraceError(f"{path}: unknown instruction {name!r}")
        ptx, fn = models[name]
        gpu = arrays[key]
        candidates = [k for k in ("x", "x_small", "x16") if k in inputs and inputs[k].shape == gpu.shape]
        if not candidates:
            raise TraceError(f"{path}: no input array matches {key!r} of shape {gpu.shape}")
        x = inputs[candidates[0]]
        out.append(compare(ptx, gpu, fn(x), str(path), {"x": x}))
    return out


REPLAYERS = {"mma_k16.npz": replay_mma, "mma_k8.npz": replay_mma, "f32.npz": replay_f32, "cvt.npz": replay_cvt,
             "sfu_golden_a.npz": replay_sfu, "sfu_golden_b.npz": replay_sfu}


def replay_all(directory=DEFAULT_DIR) -> list[ReplayResult]:
    """Replay every known golden file in ``directory``; a directory without any is an error."""
    directory = Path(directory)
    found = [directory / n for n in REPLAYERS if (directory / n).exists()]
    if not found:
        raise TraceError(f"{directory}: no golden numerics files ({', '.join(REPLAYERS)}); they live in the "
                         "repository's traces/numerics and install as flashsim/golden_data: pass --golden DIR")
    results = []
    for path in found:
        results += REPLAYERS[path.name](path)
    return results
