"""Where wgmma.mma_async reads MN-major operands (imm-trans-a / imm-trans-b = 1) on the H100, for random
descriptors, against flashsim.warp.matrix_desc (``element_address(..., major="MN")``) and the interpreter.

    python -m flashsim.gpu.validate_wgmma_mn --out DIR [--record] [--cases 24] [--seed 0] [--dry-run]

gpu/kernels/probe_wgmma_mn.cu is built once for sm_90a by NVRTC (validate_mbarrier.build) and the GPU runs
those bytes. Each case is a whole 48 KiB shared-memory image and two descriptors; the kernel runs one
m64nNk16.f32.f16.f16 wgmma with scale-d false (N = 64, 128; A M-major, B N-major, or both). The operand
probed (A for kernels ``_a_``, B otherwise) is described by a random descriptor (every swizzle, start,
leading and stride byte offsets anywhere in 0..16 KiB, layouts overlapping themselves included) over the
first 32 KiB, whose 2-byte slot j holds the f16 integer j % 2048 (pass 0) or j // 2048 (pass 1); the other
operand is a one-hot selector in the last 16 KiB (K-major, or M-major for ``_ab_``: laid out by the model
itself), so D[m][n] is the slot of B(k = m % 16, n), or of A(m, k = n % 16). The address of every element the
wgmma read is thus measured, not inferred, and compared with the model's; the rows (columns) D repeats are
checked to agree. ``--dry-run`` runs the kernels in the interpreter instead (no GPU).

Writes DIR/wgmma_mn_report.json; with ``--record`` also DIR/wgmma_mn.npz (the cubin, each case's
descriptors, the measured addresses and the sha256 of every D) and DIR/wgmma_mn.json (provenance, counts),
which belong in traces/wgmma/ (tests/test_wgmma_mn.py: the record against the model, and the interpreter on
the recorded cubin against the GPU's D, bit for bit). Exit status 1 when any address differs from the model.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from flashsim.gpu.validate_mbarrier import Build, ProbeRun, build, run_probe
from flashsim.warp.matrix_desc import CanonicalTile, MatrixDescriptor, WIDTH, element_address

__all__ = ["KERNELS", "PROBE_FILE", "TRACE_DIR", "Case", "case_image", "decode", "main", "model_addresses",
           "plan", "probe_runs", "validate"]

PROBE_FILE = "probe_wgmma_mn.cu"
TRACE_DIR = Path(__file__).resolve().parent.parent / "traces" / "wgmma"
IMG_BYTES = 48 * 1024  # MN_IMG_WORDS * 4 of the probe
PROBED_BYTES = 32 * 1024  # the probed operand's slots; the selector lives above
SEL_OFF = PROBED_BYTES
ONE = 0x3C00  # f16 1.0
#: (kernel, which operands are MN-major, N)
KERNELS = tuple((f"wgmma_mn_{t}_n{n}", t, n) for n in (64, 128) for t in ("a", "b", "ab"))
SWIZZLES = ("none", "32B", "64B", "128B")


class Case:
    """One case: the probed operand's descriptor and the selector's (start addresses relative to the image)."""

    def __init__(self, kernel: str, trans: str, n: int, probed: MatrixDescriptor, selector: MatrixDescriptor):
        self.kernel, self.trans, self.n = kernel, trans, n
        self.probed, self.selector = probed, selector

    @property
    def probes_a(self) -> bool:
        return self.trans == "a"

    @property
    def rows(self) -> int:
        """Rows (M/N extent) of the probed operand."""
        return 64 if self.probes_a else self.n

    def descriptors(self) -> tuple[int, int]:
        """(da, db) as the kernel takes them (relative starts)."""
        if self.probes_a:
            return self.probed.encode(), self.selector.encode()
        return self.selector.encode(), self.probed.encode()


def model_addresses(desc: MatrixDescriptor, rows: int) -> np.ndarray:
    """(rows, 16) byte addresses (relative) of the MN-major elements (mn, k) per flashsim.warp.matrix_desc."""
    mn, k = np.meshgrid(np.arange(rows), np.arange(16), indexing="ij")
    return np.asarray(element_address(desc, mn, 2 * k, major="MN"), np.int64)


def _random_desc(rng, rows: int) -> MatrixDescriptor:
    while True:
        sw = str(rng.choice(SWIZZLES))
        big = rng.random() < 0.3
        lbo = 16 * int(rng.integers(0, 1024 if big else 96))
        sbo = 16 * int(rng.integers(0, 1024 if big else 96))
        if sw != "none" and rng.random() < 0.6:  # canonical-looking strides for the swizzle
            w = WIDTH[sw]
            lbo, sbo = (8 * w * int(rng.integers(1, 4)), 8 * w * int(rng.integers(1, rows // (w // 2) + 2)))
            if rng.random() < 0.5:
                lbo, sbo = sbo, lbo
        align = 16 if rng.random() < 0.3 else (1024 if sw != "none" else 128)
        start = align * int(rng.integers(0, PROBED_BYTES // align))
        d = MatrixDescriptor(start, lbo, sbo, sw)
        a = model_addresses(d, rows)
        if a.min() >= 0 and a.max() + 2 <= PROBED_BYTES:
            return d


def _selector_desc(rng, trans: str) -> MatrixDescriptor:
    """The selector's descriptor: K-major "none" tile (A: 64 rows, B: N rows) or, for ``ab``, an M-major A."""
    if trans != "ab":
        return MatrixDescriptor(SEL_OFF, 128, 256)  # CanonicalTile(rows, 32, "none", SEL_OFF).descriptor(0)
    sw = str(rng.choice(SWIZZLES))
    if sw == "none":
        return MatrixDescriptor(SEL_OFF, 128, 256)  # core matrices: k-groups 128 B apart, mn-groups 256 B
    w = WIDTH[sw]
    return MatrixDescriptor(SEL_OFF, 8 * w, 8 * w * (64 // (w // 2)), sw)


def plan(seed: int, cases: int = 24) -> list[Case]:
    """``cases`` cases per kernel of KERNELS (deterministic in ``seed``)."""
    rng = np.random.default_rng([seed, 23])
    out = []
    for kernel, trans, n in KERNELS:
        for _ in range(cases):
            rows = 64 if trans == "a" else n
            out.append(Case(kernel, trans, n, _random_desc(rng, rows), _selector_desc(rng, trans)))
    return out


def case_image(c: Case, p: int) -> np.ndarray:
    """The 48 KiB shared-memory image of pass ``p`` (0: slot j holds j % 2048, 1: j // 2048) as uint32 words."""
    img = np.zeros(IMG_BYTES // 2, np.uint16)
    j = np.arange(PROBED_BYTES // 2)
    img[:PROBED_BYTES // 2] = (j % 2048 if p == 0 else j // 2048).astype(np.float16).view(np.uint16)
    mem = img.view(np.uint8)
    if c.trans == "ab":  # A (64 x 16) one-hot at k = m % 16, M-major through the selector's descriptor
        a = model_addresses(c.selector, 64)
        m = np.arange(64)
        mem[a[m, m % 16]], mem[a[m, m % 16] + 1] = ONE & 0xFF, ONE >> 8
    else:  # K-major selector: A[m][k] = 1 at k = m % 16 (rows 64), or B[k][n] = 1 at k = n % 16 (rows N)
        rows = c.n if c.probes_a else 64
        tile = CanonicalTile(rows, 32, "none", SEL_OFF)
        sel = np.zeros((rows, 16), np.uint16)
        sel[np.arange(rows), np.arange(rows) % 16] = ONE
        tile.store(mem, sel)
    return img.view(np.uint32)


def decode(c: Case, d_lo: np.ndarray, d_hi: np.ndarray) -> tuple[np.ndarray, int]:
    """(rows, 16) measured byte addresses of the probed operand from the two passes' D (64 x N f32 bits), and
    how many repeated D entries disagree with the first copy."""
    slot = np.rint(d_lo.view(np.float32)).astype(np.int64) + 2048 * np.rint(d_hi.view(np.float32)).astype(np.int64)
    slot = slot.reshape(64, c.n)
    if c.probes_a:  # D[m][n] = A[m][n % 16]
        first = slot[:, :16]
        rep = slot.reshape(64, c.n // 16, 16)
        bad = int((rep != first[:, None, :]).sum())
        return 2 * first, bad
    first = slot[:16, :].T  # D[m][n] = B[m % 16][n]: (n, k)
    rep = slot.reshape(4, 16, c.n)
    bad = int((rep != slot[None, :16, :]).sum())
    return 2 * first, bad


def probe_runs(b: Build, cases: list[Case]) -> list[tuple[str, list[int], ProbeRun]]:
    """One launch per kernel and pass: (kernel, case indices, run)."""
    out = []
    for kernel, _, n in KERNELS:
        idx = [i for i, c in enumerate(cases) if c.kernel == kernel]
        if not idx:
            continue
        for p in (0, 1):
            for i in idx:  # the descriptors are kernel arguments: one single-CTA launch per case and pass
                da, db = cases[i].descriptors()
                run = ProbeRun(b, kernel, 1, 128, [case_image(cases[i], p)],
                               [np.zeros(64 * n, np.uint32), np.zeros(4, np.uint32)],
                               ("i", np.uint64(da), np.uint64(db), "o", "o"))
                out.append((kernel, [i, p], run))
    return out


def validate(out: Path, *, cases: int, seed: int, record: bool, dry_run: bool, log=print) -> dict:
    from flashsim.sass.toolchain import versions

    t0 = time.time()
    out.mkdir(parents=True, exist_ok=True)
    b = build(PROBE_FILE)
    cs = plan(seed, cases)
    where = "interp" if dry_run else "gpu"
    d = {}
    bases = set()
    for kernel, (i, p), run in probe_runs(b, cs):
        dd, info = run_probe(run, where)
        d[(i, p)] = dd
        bases.add(int(info[0]))
    per_kernel: dict[str, dict] = {}
    maps, bad_rep, mism = [], 0, 0
    first = []
    for i, c in enumerate(cs):
        got, rep = decode(c, d[(i, 0)], d[(i, 1)])
        want = model_addresses(c.probed, c.rows)
        diff = int((got != want).sum())
        e = per_kernel.setdefault(c.kernel, {"cases": 0, "elements": 0, "mismatches": 0, "swizzles": {}})
        e["cases"] += 1
        e["elements"] += int(want.size)
        e["mismatches"] += diff
        e["swizzles"][c.probed.swizzle] = e["swizzles"].get(c.probed.swizzle, 0) + 1
        mism += diff
        bad_rep += rep
        if diff and len(first) < 20:
            k = np.argwhere(got != want)[0]
            first.append({"case": i, "kernel": c.kernel, "descriptor": hex(c.probed.encode()),
                          "element": [int(k[0]), int(k[1])], "measured": int(got[tuple(k)]),
                          "model": int(want[tuple(k)])})
        maps.append(got)
    report = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "command": "python -m flashsim.gpu.validate_wgmma_mn " + " ".join(sys.argv[1:]), "seed": seed,
              "where": where, "toolchain": versions(), "cubin_sha256": b.sha256, "shared_bases": sorted(bases),
              "cases": len(cs), "elements": int(sum(m.size for m in maps)), "mismatches": mism,
              "repeats_disagreeing": bad_rep, "kernels": per_kernel, "first": first,
              "seconds": round(time.time() - t0, 2)}
    if not dry_run:
        from flashsim.gpu import runtime

        report["device"] = runtime.device_info()
    (out / "wgmma_mn_report.json").write_text(json.dumps(report, indent=1) + "\n")
    if record:
        arrays = {"cubin": np.frombuffer(b.cubin, np.uint8), "seed": np.array(seed), "cases": np.array(cases),
                  "descriptors": np.array([c.descriptors() for c in cs], np.uint64),
                  "d_sha": np.array([[np.frombuffer(hashlib.sha256(d[(i, p)].tobytes()).digest(), np.uint8)
                                      for p in (0, 1)] for i in range(len(cs))], np.uint8)}
        for kernel, _, _ in KERNELS:
            idx = [i for i, c in enumerate(cs) if c.kernel == kernel]
            arrays[f"maps/{kernel}"] = np.stack([maps[i] for i in idx]).astype(np.int32)
        np.savez_compressed(out / "wgmma_mn.npz", **arrays)
        rec = {k: report[k] for k in ("date", "command", "seed", "toolchain", "cubin_sha256", "shared_bases",
                                      "cases", "elements", "mismatches", "repeats_disagreeing", "kernels")}
        rec["device"] = report.get("device")
        (out / "wgmma_mn.json").write_text(json.dumps(rec, indent=1) + "\n")
    log(f"{len(cs)} cases, {report['elements']} addresses: {mism} differ from the model, {bad_rep} repeats "
        f"disagree; shared base {sorted(bases)}; {report['seconds']} s")
    return report


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flashsim.gpu.validate_wgmma_mn", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="directory for the report (and the record with --record)")
    ap.add_argument("--record", action="store_true", help="also write wgmma_mn.json/.npz for traces/wgmma/")
    ap.add_argument("--dry-run", action="store_true", help="run the kernels in the interpreter (no GPU)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cases", type=int, default=24, help="cases per kernel (default 24)")
    a = ap.parse_args(argv)
    if a.record and a.dry_run:
        ap.error("--record with --dry-run: a record holds the GPU's outputs")
    if a.cases < 1:
        ap.error(f"--cases={a.cases}: expected at least 1 case per kernel")
    rep = validate(Path(a.out), cases=a.cases, seed=a.seed, record=a.record, dry_run=a.dry_run)
    return 1 if rep["mismatches"] or rep["repeats_disagreeing"] else 0


if __name__ == "__main__":
    sys.exit(main())
