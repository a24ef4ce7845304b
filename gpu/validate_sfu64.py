"""Measure MUFU.RCP64H and MUFU.RSQ64H (rcp.approx.ftz.f64, rsqrt.approx.ftz.f64) on a GPU over all 2^32 high words.

    python -m flashsim.gpu.validate_sfu64 --out DIR [--ops rcp64h rsq64h]

Each instruction reads the high word of a double and writes the high word of the result (ptxas zeroes the
low word; the SASS of gpu/kernels/probe_sfu64.cu loads only the high word, which :func:`check_sass` checks).
The sweep runs every high word on the GPU, in chunks of whole binades (one sign and exponent field: 2^20
mantissa fields), and describes the function compactly against one structural law per instruction:

- RCP64H: rcp(+-2^e * 1.m) = +-2^-e * R[m], R the outputs of the binade [1, 2);
- RSQ64H: rsq(2^(2k+j) * 1.m) = 2^-k * Q_j[m], Q_0 / Q_1 the outputs of [1, 2) and [2, 4); positive only.

Every binade is then one of: the law holds on all of it; one constant output (zeros, infinities, NaNs);
the law with a few exceptions (kept as (input, output) pairs); or kept whole (``explicit``: where the law
does not apply, e.g. results in the subnormal range). With the law tables this determines the output for
every input; :func:`reconstruct` rebuilds it, and a second pass over all 2^32 inputs on the GPU checks the
reconstruction element by element (``verified``). Also recorded: some binades of both signs whole, every
exponent for a few mantissa fields, the special values, 64-bit checksums of all outputs per block of 2^22
inputs, whether the source's low word changes anything (sampled with several low words) and whether the
result's low word is ever nonzero. Tables are delta-encoded (flashsim.numerics.sfu.encode_table).

Writes DIR/sfu64_tables.npz (:func:`flashsim.numerics.sfu64.load` reads it) and DIR/sfu64_report.json. The
interpreter's model (flashsim.numerics.sfu64) reads the H200's record installed as flashsim/data/sfu64_tables.npz.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from flashsim.numerics.sfu64 import (BINADE, CONSTANT, EXCEPTIONS, EXPLICIT, KINDS, LAW, NBINADES, OPS, UNSWEPT, load,
                                     predict, reconstruct)

KERNEL_FILE = "probe_sfu64.cu"
CHECK_BLOCK = 1 << 22
#: the binades the laws are read from
TABLE_BINADES = {"rcp64h": ((0, 1023),), "rsq64h": ((0, 1023), (0, 1024))}
#: binades kept whole as evidence whatever the law says: both signs at and around 1, the smallest normal, the
#: subnormal inputs, the largest finite and the Inf/NaN field
EVIDENCE_BINADES = tuple((s, e) for s in (0, 1) for e in (0, 1, 1022, 1023, 1024, 2046, 2047))
ROW_MANTISSAS = (0, 1, 2, 0x40000, 0x7FFFF, 0x80000, 0x80001, 0xAAAAA, 0xFFFFE, 0xFFFFF)
LOW_WORDS = (1, 0x80000000, 0xFFFFFFFF, 0x9E3779B9)
MAX_EXCEPTIONS_PER_BINADE = 1 << 12
MAX_EXPLICIT = 128


def binade_id(sign: int, field: int) -> int:
    return (sign << 11) | field


def binade_inputs(b: int) -> np.ndarray:
    """The 2^20 high words of binade ``b`` (sign << 11 | exponent field), in order."""
    return (np.uint32(b) << np.uint32(20)) | np.arange(BINADE, dtype=np.uint32)


def row_inputs(mant: int) -> np.ndarray:
    """The high words with mantissa field ``mant`` in every binade (4096, binade order)."""
    return (np.arange(NBINADES, dtype=np.uint32) << np.uint32(20)) | np.uint32(mant)


def special_inputs() -> np.ndarray:
    """High words of the special doubles, both signs: zeros, the subnormal range's ends, the smallest normal
    and its neighbour, 1 and 2 and their neighbours, 0.5, the largest finite, Inf, quiet and signalling NaNs."""
    pos = [0x00000000, 0x00000001, 0x0007FFFF, 0x00080000, 0x000FFFFF, 0x00100000, 0x00100001, 0x001FFFFF,
           0x3FEFFFFF, 0x3FF00000, 0x3FF00001, 0x3FFFFFFF, 0x40000000, 0x40000001, 0x3FE00000, 0x7FE00000,
           0x7FEFFFFF, 0x7FF00000, 0x7FF00001, 0x7FF40000, 0x7FF80000, 0x7FFFFFFF, 0x5FE00000, 0x1FF00000,
           0x20000000, 0x7FD00000, 0x00200000]
    return np.array(sorted(set(pos) | {p | 0x80000000 for p in pos}), np.uint32)


def checksum(out, start: int, xp=np) -> int:
    """A 64-bit position-weighted sum (wrapping), the same with numpy and cupy (validate_sfu's)."""
    idx = xp.arange(out.size, dtype=xp.uint64) + xp.uint64(start)
    w = idx * xp.uint64(0x9E3779B97F4A7C15) + xp.uint64(0x632BE59BD9B4E019)
    return int((out.astype(xp.uint64) * w).sum())


# ------------------------------------------------------------------------------------------------ the laws


# ------------------------------------------------------------------------------------------------ devices
class GpuDevice:
    """The sweep and array kernels of gpu/kernels/probe_sfu64.cu on the GPU (cupy), from flashsim's own
    NVRTC build of the file (the cubin whose SASS check_sass reads)."""

    def __init__(self):
        from flashsim.gpu import runtime

        self.cupy = runtime.require_gpu()
        self.xp = self.cupy
        self.mod = runtime.load_cubin(bytes(module().cubin))
        self._launch = runtime.launch

    def hi(self, op: str, start: int, n: int, lo: int = 0):
        """The result high words of high words start .. start + n - 1 (low word ``lo``), on the device."""
        out = self.cupy.empty(n, self.cupy.uint32)
        k = self.mod.get_function(f"sweep_{op}")
        self._launch(k, ((n + 255) // 256,), (256,), (np.uint32(start & 0xFFFFFFFF), np.uint32(lo), out, np.uint64(n)))
        return out

    def full(self, op: str, x: np.ndarray) -> np.ndarray:
        """Whole doubles (uint64 bits) in and out."""
        d = self.cupy.asarray(np.ascontiguousarray(x, np.uint64))
        out = self.cupy.empty(d.size, self.cupy.uint64)
        k = self.mod.get_function(f"array_{op}")
        self._launch(k, ((d.size + 255) // 256,), (256,), (d, out, np.uint64(d.size)))
        return self.cupy.asnumpy(out)

    def host(self, a) -> np.ndarray:
        return self.cupy.asnumpy(a)


def module():
    """gpu/kernels/probe_sfu64.cu built by flashsim's NVRTC 13.0 (no GPU needed)."""
    from flashsim.kernels.sources import interpreted_module

    return interpreted_module(KERNEL_FILE)


def check_sass() -> dict[str, list[str]]:
    """Problems with the SASS of each kernel (empty lists: each is what the sweep assumes): exactly one MUFU
    of the expected kind and no other floating-point instruction; the array kernels load only the source's
    high word (a 32-bit load at offset 4)."""
    from flashsim.sass.toolchain import disassemble

    doc = disassemble(module().cubin)
    out: dict[str, list[str]] = {}
    for fn in doc[1]:
        name = fn["function-name"]
        op = name.split("_", 1)[1]
        want = OPS[op][1]
        recs = fn["sass-instructions"]
        names = [r["opcode"] for r in recs]
        problems = []
        if names.count(want) != 1:
            problems.append(f"{names.count(want)} {want}")
        fp_ops = ("DADD", "DMUL", "DFMA", "DSETP", "FADD", "FMUL", "FFMA", "FSETP", "F2F", "FRND")
        floats = [n for n in names if n.split(".")[0] in fp_ops or (n.startswith("MUFU") and n != want)]
        if floats:
            problems.append(f"other floating-point instructions {floats}")
        if name.startswith("array_"):
            loads = [(r["opcode"], r.get("operands", "")) for r in recs if r["opcode"].startswith("LDG")]
            if len(loads) != 1 or ".64" in loads[0][0] or "+0x4]" not in loads[0][1]:
                problems.append(f"the source is not read as its high word alone: {loads}")
        out[name] = problems
    return out


# ------------------------------------------------------------------------------------------------ the sweep


def analyse(dev, op: str, *, binades: Sequence[int] | None = None, chunk_binades: int = 64,
            log: Callable[[str], None] = print) -> dict:
    """Sweep ``binades`` (default all 4096) of ``op`` and classify each against the law. Returns the
    record of one instruction: tables, per-binade kind / constant / count of law misses, exceptions, the
    binades kept whole, checksums per block of 2^22 inputs (of swept blocks), evidence rows and specials."""
    xp = dev.xp
    t0 = time.time()
    tables = {f"e{k}": dev.host(dev.hi(op, binade_id(s, e) << 20, BINADE))
              for k, (s, e) in enumerate(TABLE_BINADES[op])}
    xtables = {k: xp.asarray(v) for k, v in tables.items()}
    order = sorted(set(range(NBINADES) if binades is None else (int(b) for b in binades)))
    kind = np.full(NBINADES, UNSWEPT, np.int64)
    const = np.full(NBINADES, -1, np.int64)
    misses = np.full(NBINADES, -1, np.int64)
    exc_in, exc_out, explicit, checks, complete = [], [], {}, {}, True
    evidence = {b: None for b in (binade_id(s, e) for s, e in EVIDENCE_BINADES)}
    # runs of consecutive binades, at most chunk_binades each
    runs, cur = [], []
    for b in order:
        if cur and (b != cur[-1] + 1 or len(cur) == chunk_binades):
            runs.append(cur)
            cur = []
        cur.append(b)
    if cur:
        runs.append(cur)
    for run in runs:
        start, nb = run[0] << 20, len(run)
        out = dev.hi(op, start, nb * BINADE)
        hi = xp.arange(nb * BINADE, dtype=xp.uint64).astype(xp.uint32) + xp.uint32(start)
        pred, valid = predict(op, hi, xtables, xp)
        good = valid & (pred == out)
        o2, g2, v2 = out.reshape(nb, BINADE), good.reshape(nb, BINADE), valid.reshape(nb, BINADE)
        mn, mx = dev.host(o2.min(axis=1)), dev.host(o2.max(axis=1))
        nbad = dev.host((~g2).sum(axis=1))
        allvalid = dev.host(v2.all(axis=1))
        for q in range(0, nb * BINADE, CHECK_BLOCK):
            if q + CHECK_BLOCK <= nb * BINADE and (start + q) % CHECK_BLOCK == 0:
                checks[(start + q) // CHECK_BLOCK] = checksum(out[q:q + CHECK_BLOCK], start + q, xp)
        for j, b in enumerate(run):
            misses[b] = int(nbad[j])
            if b in evidence:
                evidence[b] = dev.host(o2[j])
            if mn[j] == mx[j]:
                kind[b], const[b] = CONSTANT, int(mn[j])
            elif nbad[j] == 0:
                kind[b] = LAW
            elif allvalid[j] and nbad[j] <= MAX_EXCEPTIONS_PER_BINADE:
                kind[b] = EXCEPTIONS
                bad = xp.nonzero(~g2[j])[0]
                exc_in.append(dev.host(hi.reshape(nb, BINADE)[j][bad]))
                exc_out.append(dev.host(o2[j][bad]))
            elif len(explicit) < MAX_EXPLICIT:
                kind[b] = EXPLICIT
                explicit[b] = dev.host(o2[j])
            else:
                kind[b], complete = EXPLICIT, False  # over the cap: not kept, the record is incomplete
        del out, hi, pred, valid, good
    rows = {m: dev.host(_gather(dev, op, row_inputs(m))) for m in ROW_MANTISSAS}
    spec = special_inputs()
    ei = np.concatenate(exc_in) if exc_in else np.zeros(0, np.uint32)
    eo = np.concatenate(exc_out) if exc_out else np.zeros(0, np.uint32)
    srt = np.argsort(ei, kind="stable")
    rec = {"op": op, "tables": tables, "kind": kind, "const": const, "misses": misses,
           "exceptions_in": ei[srt], "exceptions_out": eo[srt], "explicit": explicit,
           "evidence": {b: v for b, v in evidence.items() if v is not None}, "rows": rows,
           "specials_in": spec, "specials_out": dev.host(_gather(dev, op, spec)),
           "checksums": checks, "complete": complete, "seconds": round(time.time() - t0, 1)}
    counts = {KINDS[k]: int(np.sum(kind == k)) for k in KINDS}
    log(f"{OPS[op][1]}: {len(order)} binades swept in {rec['seconds']} s: {counts}, {ei.size} exceptions"
        f"{'' if complete else ' (INCOMPLETE: more binades without a law than kept)'}")
    return rec


def _gather(dev, op: str, his: np.ndarray):
    """Result high words of arbitrary high words (through the array kernel, low word 0)."""
    x = his.astype(np.uint64) << np.uint64(32)
    return (dev.full(op, x) >> np.uint64(32)).astype(np.uint32)


def low_word_check(dev, op: str, rng, n: int = 1 << 22) -> dict:
    """Does the source's low word change the result (``n`` sampled high words plus the specials, each low
    word of LOW_WORDS against 0), and is the result's low word ever nonzero?"""
    his = np.concatenate([special_inputs(), rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)])
    base = dev.full(op, his.astype(np.uint64) << np.uint64(32))
    res = {"inputs": int(his.size), "result_low_word_nonzero": int(np.sum((base & np.uint64(0xFFFFFFFF)) != 0)),
           "differ_with_low_word": {}}
    for lo in LOW_WORDS:
        got = dev.full(op, (his.astype(np.uint64) << np.uint64(32)) | np.uint64(lo))
        res["differ_with_low_word"][hex(lo)] = int(np.sum(got != base))
    return res


# ------------------------------------------------------------------------------------------------ the model


def verify(dev, rec: dict, *, chunk_binades: int = 64) -> dict:
    """Sweep every swept binade again and compare the reconstruction with the device, element by element."""
    xp = dev.xp
    swept = [int(b) for b in np.nonzero(np.asarray(rec["kind"]) != UNSWEPT)[0]]
    bad, examples = 0, []
    for i in range(0, len(swept), chunk_binades):
        group = swept[i:i + chunk_binades]
        runs, cur = [], [group[0]]
        for b in group[1:]:
            if b == cur[-1] + 1:
                cur.append(b)
            else:
                runs.append(cur)
                cur = [b]
        runs.append(cur)
        for run in runs:
            start, n = run[0] << 20, len(run) * BINADE
            out = dev.hi(rec["op"], start, n)
            hi = xp.arange(n, dtype=xp.uint64).astype(xp.uint32) + xp.uint32(start)
            diff = xp.nonzero(reconstruct(rec, hi, xp) != out)[0]
            bad += int(diff.size)
            if diff.size and len(examples) < 20:
                k = dev.host(diff[:5])
                examples += [[hex(int(start + j)), hex(int(dev.host(out[j:j + 1])[0]))] for j in k]
    return {"inputs": len(swept) * BINADE, "mismatches": bad, "examples": examples}


# ------------------------------------------------------------------------------------------------ files
def arrays_of(rec: dict) -> dict:
    """npz arrays of one instruction's record, tables delta-encoded (flashsim.numerics.sfu.table_arrays)."""
    from flashsim.numerics.sfu import table_arrays

    op = rec["op"]
    named = {f"{op}/{k}": v for k, v in rec["tables"].items()}
    named.update({f"{op}/explicit/{b}": v for b, v in rec["explicit"].items()})
    named.update({f"{op}/evidence/{b}": v for b, v in rec["evidence"].items()})
    named.update({f"{op}/row/{m}": v for m, v in rec["rows"].items()})
    out = table_arrays(named)
    out[f"{op}/exceptions_in"] = rec["exceptions_in"]
    out[f"{op}/exceptions_out"] = rec["exceptions_out"]
    out[f"{op}/kind"] = rec["kind"].astype(np.int8)
    out[f"{op}/const"] = rec["const"]
    out[f"{op}/misses"] = rec["misses"]
    out[f"{op}/specials_in"] = rec["specials_in"]
    out[f"{op}/specials_out"] = rec["specials_out"]
    blocks = np.array(sorted(rec["checksums"]), np.int64)
    out[f"{op}/checksum_blocks"] = blocks
    out[f"{op}/checksums"] = np.array([rec["checksums"][int(k)] for k in blocks], np.uint64)
    out[f"{op}/complete"] = np.array(rec["complete"])
    return out


def save(path: Path, recs: Sequence[dict], provenance: dict) -> None:
    arrays: dict[str, np.ndarray] = {"provenance": np.array(json.dumps(provenance, sort_keys=True))}
    for rec in recs:
        arrays.update(arrays_of(rec))
    np.savez_compressed(path, **arrays)




def summary(rec: dict) -> dict:
    kind = np.asarray(rec["kind"])
    return {"instruction": OPS[rec["op"]][1], "ptx": OPS[rec["op"]][0],
            "binades": {KINDS[k]: int(np.sum(kind == k)) for k in KINDS},
            "constant_binades": {hex(int(b)): hex(int(rec["const"][b])) for b in np.nonzero(kind == CONSTANT)[0][:64]},
            "explicit_binades": [hex(int(b)) for b in sorted(rec["explicit"])],
            "exceptions": int(rec["exceptions_in"].size), "complete": bool(rec["complete"]),
            "specials": {hex(int(i)): hex(int(o)) for i, o in zip(rec["specials_in"], rec["specials_out"])},
            "seconds": rec.get("seconds")}


def parse_binades(spec: str | None) -> list[int] | None:
    """'0x3fe-0x401,0x7ff' -> binade ids (sign << 11 | exponent field); None: all 4096."""
    if not spec:
        return None
    out: set[int] = set()
    for part in spec.split(","):
        lo, _, hi = part.strip().partition("-")
        a, b = int(lo, 0), int(hi or lo, 0)
        if not 0 <= a <= b < NBINADES:
            raise ValueError(f"binade range {part!r} outside 0 .. {NBINADES - 1}")
        out.update(range(a, b + 1))
    return sorted(out)


def main(argv: Sequence[str] | None = None, device=None) -> int:
    """``device``: a stand-in for the GPU (tests); by default the GPU through cupy."""
    ap = argparse.ArgumentParser(prog="python -m flashsim.gpu.validate_sfu64", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--ops", nargs="*", choices=sorted(OPS), default=sorted(OPS))
    ap.add_argument("--seed", type=int, default=20261201)
    ap.add_argument("--binades", default=None,
                    help="only these binades (sign << 11 | exponent field), e.g. 0x3fe-0x401,0xbff (default: all)")
    ap.add_argument("--no-verify", action="store_true", help="skip the second pass that checks the reconstruction")
    args = ap.parse_args(argv)
    binades = parse_binades(args.binades)
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "sfu64_validate.log", "a") as logf:
        def log(msg):
            print(msg, flush=True)
            logf.write(msg + "\n")
            logf.flush()

        return _run(args, binades, device, log)


def _run(args, binades, device, log) -> int:
    from flashsim.sass.toolchain import versions

    sass = check_sass()
    log(f"SASS check: {sass}")
    dev = GpuDevice() if device is None else device
    if device is None:
        from flashsim.gpu import runtime

        where = runtime.device_info()
    else:
        where = {"name": f"a stand-in ({type(device).__name__})"}
    prov = {"device": where, "toolchain": versions(), "cubin_sha256": module().sha256, "source": KERNEL_FILE,
            "seed": args.seed, "binades": args.binades or "all", "date": time.strftime("%Y-%m-%d")}
    log(json.dumps(prov))
    rng = np.random.default_rng(args.seed)
    recs, report = [], {"provenance": prov, "sass": sass, "results": []}
    for op in args.ops:
        rec = analyse(dev, op, binades=binades, log=log)
        res = summary(rec)
        res["low_word"] = low_word_check(dev, op, rng)
        log(f"{OPS[op][1]}: low word {res['low_word']}")
        if not args.no_verify:
            res["verified"] = verify(dev, rec)
            log(f"{OPS[op][1]}: the reconstruction against the device on all swept inputs: {res['verified']}")
        recs.append(rec)
        report["results"].append(res)
    save(args.out / "sfu64_tables.npz", recs, prov)
    again = load(args.out / "sfu64_tables.npz")
    for rec in recs:  # the file holds what was measured
        back = again[rec["op"]]
        probe = np.concatenate([special_inputs()] + [row_inputs(m) for m in ROW_MANTISSAS])
        if not np.array_equal(reconstruct(back, probe), reconstruct(rec, probe)):
            raise RuntimeError(f"{rec['op']}: sfu64_tables.npz does not read back as recorded")
    (args.out / "sfu64_report.json").write_text(json.dumps(report, indent=1) + "\n")
    bad = any(v for v in sass.values()) or any(r.get("verified", {}).get("mismatches") for r in report["results"]) or \
        not all(r["complete"] for r in report["results"])
    verdicts = [(r["instruction"], r["binades"], r.get("verified", {}).get("mismatches")) for r in report["results"]]
    log(f"SUMMARY: {verdicts}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
