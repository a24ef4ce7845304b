"""When a diverged warp runs which of its paths: the directed probe of gpu/kernels/probe_paths.cu.

Every kernel of probe_paths.cu runs in one warp and logs, at each mark, the value of a shared step counter it then
increments, so the log of a launch is the order in which the warp's paths ran (see the file). :data:`CASES` are the
launches; :func:`build` compiles the file in each of the fuzzer's builds (:data:`flashsim.fuzz.BUILDS`: NVRTC 13
and NVRTC's PTX through Triton's bundled ptxas 12.8, so two compilers' SASS); :func:`interpret` runs the cases in
the SASS interpreter. ``python -m flashsim.gpu.path_probes --out DIR`` runs them on the GPU too and writes
DIR/path_probes.json.xz (the cubins and the GPU's logs); :func:`compare` replays a record in the interpreter, case by
case, so a CPU test holds the interpreter's scheduling rules to the GPU's logs.
"""

from __future__ import annotations

import base64
import hashlib
import json
import lzma
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from flashsim.errors import FlashsimError, bad_argument

__all__ = ["CASES", "Case", "MARKS", "OUT_WORDS", "RECORD_NAME", "build", "compare", "decode_log", "interpret",
           "load_record", "source", "write_record"]

FILE = "probe_paths.cu"
MARKS = 32  # probe_paths.cu's MARKS
OUT_WORDS = MARKS * 32 + 1

# lane masks: even splits, one lane or all but one or two, and uneven ones (13 to 24 lanes set) on either side
_HALVES = (0x0000FFFF, 0xFFFF0000, 0x55555555, 0xAAAAAAAA, 0x00000001, 0x80000000, 0x7FFFFFFE, 0x0F0F00F1,
           0xDEADBEEF, 0x00000000, 0xFFFFFFFF, 0x00007FFF, 0x0001FFFF, 0x0003FFFF, 0x000FFFFF, 0x007FFFFF,
           0xFFFFFFFE, 0xFFFEFFFF, 0x3FFFC000, 0x12345678)


@dataclass(frozen=True)
class Case:
    """One launch of ``kernel`` (one CTA of 32 threads) with its two unsigned arguments after ``out``."""

    kernel: str
    a: int
    b: int

    @property
    def name(self) -> str:
        return f"{self.kernel}(a=0x{self.a:08x}, b=0x{self.b:08x})"


def _cases() -> tuple[Case, ...]:
    out = []
    for a in _HALVES:
        for b in (0x00, 0x01, 0x02, 0x33, 0x51, 0x62):
            out.append(Case("paths_ifelse", a, b))
        for b in (0, 1):
            out.append(Case("paths_ifonly", a, b))
        for b in (0x00, 0x21, 0x12, 0x33, 0x70, 0x05):
            out.append(Case("paths_loops", a, b))
        for b in (0x00, 0x21, 0x12, 0x53, 0x07):
            out.append(Case("paths_divloop", a, b))
        for b in (0x0000FFFF, 0x33333333, 0x0F0F0F0F, 0xFFFFFFFF, 0x00000000, 0x80000001):
            out.append(Case("paths_nested", a, b))
        for b in (0x0000FFFF, 0x33333333, 0xFFFFFFFF):
            out.append(Case("paths_exit", a, b))
        for b in (1, 3, 7):
            out.append(Case("paths_break", a, b))
        for b in (0x00000000, 0x00000001, 0x00F00000, 0x0F0F0301, 0xFFFFFF00):
            out.append(Case("paths_ballot_loop", a, b))
        for b in (0, 1):
            out.append(Case("paths_syncwarp", a, b))
        for b in (1, 3):
            out.append(Case("paths_break_marks", a, b))
        for b in (0x0000FFFF, 0x33333333):
            out.append(Case("paths_activemask", a, b))
    return tuple(out)


#: every launch the probe makes
CASES: tuple[Case, ...] = _cases()


def source() -> str:
    from flashsim.kernels.sources import kernel_path

    return kernel_path(FILE).read_text(encoding="utf-8")


def build(which: str) -> bytes:
    """probe_paths.cu's cubin in one of the fuzzer's builds (``nvrtc13`` / ``ptxas128``)."""
    from flashsim import fuzz

    return fuzz.build(source(), which, name=FILE)


def interpret(cubin: bytes, cases: Sequence[Case] = CASES, **exec_options) -> list[np.ndarray | str]:
    """Each case in the SASS interpreter: its ``out`` (OUT_WORDS uint32), or the error it stopped with."""
    import flashsim.cuda as fc

    mod = fc.RawModule(cubin=cubin)
    opts = fc.ExecOptions(**exec_options) if exec_options else None
    res: list[np.ndarray | str] = []
    for case in cases:
        d = fc.zeros((OUT_WORDS,), np.uint32)
        try:
            f = mod.get_function(case.kernel)
            args = (d, np.uint32(case.a), np.uint32(case.b))
            if opts is None:
                f((1,), (32,), args)
            else:
                f((1,), (32,), args, exec_options=opts)
            res.append(d.get())
        except (NotImplementedError, FlashsimError) as e:
            res.append(f"{type(e).__name__}: {e}")
    return res


def decode_log(out: np.ndarray) -> list[list[int]]:
    """Per lane, the counter values it saw at its marks, in order."""
    o = np.asarray(out, np.uint32)[:MARKS * 32].reshape(MARKS, 32)
    return [[int(v) for v in o[:, lane] if v != 0xFFFFFFFF] for lane in range(32)]


RECORD_NAME = "path_probes.json.xz"


def write_record(rec: dict, folder: str | Path) -> Path:
    """Write a record (xz-compressed JSON) into ``folder``; returns its path."""
    p = Path(folder) / RECORD_NAME
    with lzma.open(p, "wt", encoding="utf-8") as fh:
        json.dump(rec, fh)
    return p


def load_record(path: str | Path) -> dict:
    """A record written by ``python -m flashsim.gpu.path_probes`` (the file, or the folder holding it)."""
    p = Path(path)
    if p.is_dir():
        p = p / RECORD_NAME
    if not p.is_file():
        raise bad_argument("path", str(path), f"expected {RECORD_NAME} or the folder that holds it")
    with lzma.open(p, "rt", encoding="utf-8") as fh:
        rec = json.load(fh)
    for which, b in rec["builds"].items():
        cubin = base64.b64decode(b["cubin"])
        if hashlib.sha256(cubin).hexdigest() != b["sha256"]:
            raise bad_argument("path", str(p), f"the {which} cubin does not match its sha256")
        b["cubin_bytes"] = cubin
    return rec


def compare(rec: dict, builds: Sequence[str] | None = None, **exec_options) -> list[dict]:
    """Every case of a record in the interpreter, on the cubin the GPU ran: per case and build, whether its out
    equals the GPU's (``equal``), with the interpreter's error where it stopped."""
    rows = []
    for which, b in rec["builds"].items():
        if builds is not None and which not in builds:
            continue
        cases = [Case(c["kernel"], c["a"], c["b"]) for c in rec["cases"]]
        got = interpret(b["cubin_bytes"], cases, **exec_options)
        for c, g in zip(rec["cases"], got):
            gpu = np.array(c["gpu"][which], np.uint32)
            row = {"build": which, "case": Case(c["kernel"], c["a"], c["b"]).name}
            if isinstance(g, str):
                row.update(equal=False, error=g)
            else:
                row.update(equal=bool(np.array_equal(g, gpu)), interp=g, gpu=gpu)
            rows.append(row)
    return rows
