"""What the H100 showed about each SASS opcode the interpreter models, as ``flashsim info`` prints it: read
from package data (flashsim/data/sass_evidence.json), so it works from any directory.

For every instruction form (opcode with its modifiers, as nvdisasm prints it) the record says in how many
H100-compared problems (bit-identical on the GPU, per kernel) the interpreter executed it, how many
per-opcode probe cases ran it, and how many of the differential fuzzer's compared programs (traces/fuzz).
``python -m flashsim.gpu.sass_evidence`` builds the file from the committed reports under traces/sass (it
re-runs the FlashAttention kernels, so it lives above them, with the harness that writes those reports);
``--fuzz-only`` re-merges only the fuzzer's counts.
"""

from __future__ import annotations

import json
from importlib import resources

__all__ = ["DATA", "load", "rows"]

DATA = "sass_evidence.json"


def load() -> dict:
    try:
        text = resources.files("flashsim.data").joinpath(DATA).read_text(encoding="utf-8")
    except (FileNotFoundError, ModuleNotFoundError):
        return {"provenance": {}, "forms": {}}
    return json.loads(text)


def rows() -> list[tuple[str, str, str]]:
    """(opcode, family, evidence) for every opcode with a semantic, sorted by family and opcode."""
    from flashsim.sass import opcodes

    ev = load()
    prov = ev.get("provenance", {})
    base_where = f"{prov.get('gpu', 'GPU')}, {prov.get('date', '')}".rstrip(", ")
    other_where = prov.get("compilers", "")
    fuzz_where = prov.get("fuzz", "")
    out = []
    for op, fam in sorted(opcodes.table(), key=lambda t: (t[1], t[0])):
        seen = sorted((f, r) for f, r in ev.get("forms", {}).items()
                      if f.split(".")[0] == op and (r["problems"] or r["probe_cases"] or r.get("fuzz_programs")))
        if not seen:
            out.append((op, fam, "modelled; no recorded H100 comparison executed it yet"))
            continue
        parts = []
        sources = set()
        for form, r in seen:
            own = {k for k in r["kernels"] if k.startswith(("triton:", "numba:"))}
            if own or r.get("form_probe_lanes"):
                sources.add(other_where)
            if set(r["kernels"]) - own or r["probe_cases"] - r.get("form_probe_lanes", 0):
                sources.add(base_where)
            if r.get("fuzz_programs"):
                sources.add(fuzz_where)
            bits = []
            if r["problems"]:
                bits.append(f"ran in {r['problems']} kernel problems ({', '.join(sorted(r['kernels']))})")
            if r["probe_cases"]:
                bits.append(f"{r['probe_cases']:,} probe lanes")
            if r.get("fuzz_programs"):
                bits.append(f"{r['fuzz_programs']:,} fuzzed programs")
            parts.append(f"{form}: {'; '.join(bits)}")
        where = "; ".join(sorted(w for w in sources if w)) or base_where
        out.append((op, fam, f"bit-exact on {where}: " + " | ".join(parts)))
    return out
