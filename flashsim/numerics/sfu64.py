"""MUFU.RCP64H and MUFU.RSQ64H (rcp.approx.ftz.f64, rsqrt.approx.ftz.f64): the high word of the result from
the high word of the source, as the H200 gives it on all 2^32 inputs (gpu/validate_sfu64.py measured it).

The record (flashsim/data/sfu64_tables.npz, traces/double/README.md) describes each instruction by one law
and its exceptions: RCP64H: rcp(+-2^e * 1.m) = +-2^-e * R[m]; RSQ64H: rsq(2^(2k+j) * 1.m) = 2^-k * Q_j[m]
(positive inputs), R and Q_j the outputs of the binades [1, 2) and [2, 4); each binade (sign and exponent
field) follows the law, or is one constant, or the law with exceptions, or is kept whole. :func:`reconstruct`
rebuilds every output from it; the GPU checked that reconstruction on all 2^32 inputs with 0 mismatches.
The source's low word never changes the result, and the result's low word is zero.
"""

from __future__ import annotations

import functools
import re
from importlib import resources
from pathlib import Path

import numpy as np

__all__ = ["BINADE", "NBINADES", "OPS", "load", "mufu64h", "predict", "reconstruct"]

OPS = {"rcp64h": ("rcp.approx.ftz.f64", "MUFU.RCP64H"), "rsq64h": ("rsqrt.approx.ftz.f64", "MUFU.RSQ64H")}
BINADE = 1 << 20  # mantissa fields per binade
NBINADES = 1 << 12  # (sign, exponent field) pairs: a high word's top 12 bits
# binade kinds
LAW, CONSTANT, EXCEPTIONS, EXPLICIT, UNSWEPT = 0, 1, 2, 3, -1
KINDS = {LAW: "law", CONSTANT: "constant", EXCEPTIONS: "law with exceptions", EXPLICIT: "explicit",
         UNSWEPT: "not swept"}
DATA = "sfu64_tables.npz"


def predict(op: str, hi, tables: dict, xp=np):
    """The law's output for high words ``hi`` (uint32) and where the law applies (the input and the result
    in the normal range; RSQ64H: positive inputs). ``tables``: {"e0": R} or {"e0": Q_0, "e1": Q_1}, uint32
    arrays of 2^20 as xp arrays."""
    hi = hi.astype(xp.uint32)
    s = (hi >> xp.uint32(31)).astype(xp.int64)
    e = ((hi >> xp.uint32(20)) & xp.uint32(0x7FF)).astype(xp.int64)
    m = (hi & xp.uint32(0xFFFFF)).astype(xp.int64)
    if op == "rcp64h":
        t = tables["e0"][m]
        shift = e - 1023
        sign_ok = xp.ones(hi.shape, bool)
    elif op == "rsq64h":
        u = e - 1023
        j = u & 1  # the binade's parity (two's complement: odd negative exponents too)
        shift = (u - j) >> 1
        t = xp.where(j == 1, tables["e1"][m], tables["e0"][m])
        sign_ok = s == 0
    else:
        raise KeyError(op)
    tf = ((t >> xp.uint32(20)) & xp.uint32(0x7FF)).astype(xp.int64)
    f = tf - shift
    valid = sign_ok & (e >= 1) & (e <= 2046) & (tf >= 1) & (tf <= 2046) & (f >= 1) & (f <= 2046)
    fc = xp.clip(f, 0, 2047).astype(xp.uint32)
    sign = (s.astype(xp.uint32) << xp.uint32(31)) if op == "rcp64h" else xp.zeros(hi.shape, xp.uint32)
    pred = (t & xp.uint32(0x800FFFFF)) ^ sign | (fc << xp.uint32(20))
    return pred.astype(xp.uint32), valid


def _decode_all(encoded: dict) -> dict:
    from flashsim.numerics.sfu import decode_table

    out = {}
    for k in encoded:
        name, dtype, part = k.rsplit(":", 2)
        if part == "first":
            out[name] = decode_table(encoded[k], encoded[f"{name}:{dtype}:steps"], np.dtype(dtype))
    return out


def reconstruct(rec: dict, hi, xp=np):
    """The outputs the record says for high words ``hi``: the law, then constant binades, binades kept whole
    and exceptions (binades not swept give 0)."""
    hi = xp.asarray(hi).astype(xp.uint32)
    tables = {k: xp.asarray(v) for k, v in rec["tables"].items()}
    pred, _ = predict(rec["op"], hi, tables, xp)
    b = (hi >> xp.uint32(20)).astype(xp.int64)
    kind = xp.asarray(rec["kind"])[b]
    out = xp.where(kind == UNSWEPT, xp.uint32(0), pred)
    const = xp.asarray(rec["const"])
    out = xp.where(kind == CONSTANT, const[b].astype(xp.uint32), out)
    if rec["explicit"]:
        ids = sorted(rec["explicit"])
        slot = np.full(NBINADES, -1, np.int64)
        slot[ids] = np.arange(len(ids))
        stack = xp.asarray(np.stack([rec["explicit"][i] for i in ids]))
        sl = xp.asarray(slot)[b]
        m = (hi & xp.uint32(0xFFFFF)).astype(xp.int64)
        out = xp.where(sl >= 0, stack[xp.maximum(sl, 0), m], out)
    ei = xp.asarray(rec["exceptions_in"])
    if ei.size:
        pos = xp.clip(xp.searchsorted(ei, hi), 0, ei.size - 1)
        hit = ei[pos] == hi
        out = xp.where(hit, xp.asarray(rec["exceptions_out"])[pos], out)
    return out.astype(xp.uint32)


def load(path: Path) -> dict[str, dict]:
    """{op: record} of a sfu64_tables.npz, in analyse()'s form (reconstruct() takes it)."""
    with np.load(path, allow_pickle=False) as z:
        raw = {k: z[k] for k in z.files}
    tables = _decode_all({k: v for k, v in raw.items() if k.endswith(":first") or k.endswith(":steps")})
    recs = {}
    for op in OPS:
        if f"{op}/kind" not in raw:
            continue
        pick = lambda part: {int(k.rsplit("/", 1)[1]): v for k, v in tables.items()  # noqa: E731
                             if k.startswith(f"{op}/{part}/")}
        blocks = raw[f"{op}/checksum_blocks"]
        recs[op] = {
            "op": op, "tables": {k.split("/", 1)[1]: v for k, v in tables.items() if re.fullmatch(rf"{op}/e\d+", k)},
            "kind": raw[f"{op}/kind"].astype(np.int64), "const": raw[f"{op}/const"], "misses": raw[f"{op}/misses"],
            "exceptions_in": raw[f"{op}/exceptions_in"].astype(np.uint32),
            "exceptions_out": raw[f"{op}/exceptions_out"], "explicit": pick("explicit"), "evidence": pick("evidence"),
            "rows": pick("row"), "specials_in": raw[f"{op}/specials_in"], "specials_out": raw[f"{op}/specials_out"],
            "checksums": {int(b): int(c) for b, c in zip(blocks, raw[f"{op}/checksums"])},
            "complete": bool(raw[f"{op}/complete"]),
        }
    return recs


@functools.lru_cache(maxsize=None)
def _records() -> dict[str, dict]:
    with resources.as_file(resources.files("flashsim.data").joinpath(DATA)) as path:
        recs = load(Path(path))
    for op in OPS:
        if op not in recs or not recs[op]["complete"]:
            raise NotImplementedError(f"MUFU.{OPS[op][1].split('.')[1]}: flashsim/data/{DATA} holds no complete "
                                      "record of it")
    return recs


def mufu64h(op: str, hi) -> np.ndarray:
    """MUFU.RCP64H (``op`` "rcp64h") or MUFU.RSQ64H ("rsq64h") of the source high words ``hi`` (uint32): the
    result's high words, bit for bit the H200's."""
    if op not in OPS:
        raise KeyError(op)
    return reconstruct(_records()[op], np.asarray(hi, np.uint32))
