"""What flashsim models and how each model was verified on hardware (the records ``flashsim info`` shows).

Records live in ``flashsim/data/validation.json``; ``python -m flashsim.gpu.validate`` writes them on a GPU.
An instruction without a record is modelled but not verified, and says so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources

from flashsim.errors import TraceError
from flashsim.numerics import cvt, fp32


@dataclass(frozen=True)
class Modelled:
    """One modelled instruction: its PTX spelling, the arch it models, the SASS it becomes, and a note."""

    ptx: str
    arch: str
    sass: str
    note: str = ""


_HMMA = {"m16n8k16": "HMMA.16816", "m16n8k8": "HMMA.1688"}


def cvt_sass(op: str) -> str:
    """The SASS ptxas (CUDA 13.0, sm_90) emits for a cvt form, as read with cuobjdump -sass."""
    dst, src, rnd, mods = cvt.parse(op)
    if src == "f16":
        return "HADD2.F32"
    if src == "bf16":
        return "IMAD.U32 (<< 16)"
    t = "BF16" if dst.startswith("bf16") else "F16"
    if rnd in ("rm", "rp"):
        return f"F2F{'.FTZ' if 'ftz' in mods and t == 'BF16' else ''}.{t}.F32.{rnd.upper()}"
    if "ftz" in mods and t == "BF16":
        return f"F2F.FTZ.BF16.F32{'.RZ' if rnd == 'rz' else ''}"
    flags = "".join(f".{m.upper()}" for m in ("satfinite", "relu") if m in mods)
    form = "MERGE_C" if flags and not dst.endswith("x2") else "PACK_AB"
    return f"F2FP{flags}.{t}.F32.{form}{'.RZ' if rnd == 'rz' else ''}"


def modelled() -> list[Modelled]:
    """Every instruction flashsim models, in a stable order."""
    out = []
    for shape, atype, ctype in (("m16n8k16", "f16", "f32"), ("m16n8k16", "bf16", "f32"), ("m16n8k16", "f16", "f16"),
                                ("m16n8k8", "f16", "f32"), ("m16n8k8", "bf16", "f32")):
        ptx = f"mma.sync.aligned.{shape}.row.col.{ctype}.{atype}.{atype}.{ctype}"
        sass = f"{_HMMA[shape]}.{ctype.upper()}" + (".BF16" if atype == "bf16" else "")
        out.append(Modelled(ptx, "sm_90", sass))
        out.append(Modelled(ptx, "sm_80", sass, "published A100 model; no sm_80 GPU to check it on"))
    for name, (ptx, _, _) in fp32.OPS.items():
        base = {"ffma": "FFMA", "fadd": "FADD", "fmul": "FMUL"}.get(name[:4], "FMNMX")
        out.append(Modelled(ptx, "sm_90", base + (".FTZ" if "ftz" in name else ".NAN" if "nan" in name else "")))
    for op in cvt.MODELLED_OPS:
        out.append(Modelled(op, "sm_90", cvt_sass(op)))
    from flashsim.numerics import cuda_math, sfu  # numba: imported on first use

    sfu_sass = {"ex2.approx.ftz.f32": "MUFU.EX2", "ex2.approx.f32": "FSETP+FMUL+MUFU.EX2+FMUL",
                "lg2.approx.ftz.f32": "MUFU.LG2", "lg2.approx.f32": "FSETP+FMUL+MUFU.LG2+FADD",
                "rcp.approx.ftz.f32": "MUFU.RCP", "rcp.approx.f32": "FSETP+FSEL+FMUL+MUFU.RCP+FMUL",
                "tanh.approx.f32": "MUFU.TANH", "rcp.rn.f32": "MUFU.RCP+FFMA (IEEE)",
                "rsqrt.approx.ftz.f32": "MUFU.RSQ", "rsqrt.approx.f32": "FSETP+FMUL+MUFU.RSQ+FMUL",
                "sqrt.approx.ftz.f32": "MUFU.SQRT", "sqrt.approx.f32": "FSETP+FMUL+MUFU.SQRT+FMUL",
                "sin.approx.ftz.f32": "FMUL.RZ+MUFU.SIN", "sin.approx.f32": "FMUL.RZ+MUFU.SIN",
                "cos.approx.ftz.f32": "FMUL.RZ+MUFU.COS", "cos.approx.f32": "FMUL.RZ+MUFU.COS"}
    for ptx, _ in sfu.SWEPT.values():
        out.append(Modelled(ptx, "sm_90", sfu_sass[ptx]))
    out.append(Modelled("MUFU.SIN", "sm_90", "MUFU.SIN"))
    out.append(Modelled("MUFU.COS", "sm_90", "MUFU.COS"))
    out.append(Modelled("ex2.approx.f16x2", "sm_90", "MUFU.EX2.F16 x2"))
    out.append(Modelled("ex2.approx.ftz.bf16x2", "sm_90", "MUFU.EX2.BF16 x2"))
    out.append(Modelled("div.rn.f32", "sm_90", "MUFU.RCP+FFMA+FCHK (IEEE)"))
    for name in cuda_math.FUNCTIONS:
        for fast in ("", " --use_fast_math"):
            out.append(Modelled(f"cuda_math.{name}{fast}", "sm_90", "nvcc 13.0 sequence"))
    return out


def records() -> list[dict]:
    """The committed verification records (empty when none were recorded)."""
    try:
        text = resources.files("flashsim").joinpath("data/validation.json").read_text()
    except FileNotFoundError:
        return []
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise TraceError(f"flashsim/data/validation.json: not JSON ({e})") from e
    if not isinstance(data, list):
        raise TraceError("flashsim/data/validation.json: expected a list of records")
    return data


def status_table() -> list[tuple[str, str, str, str]]:
    """(instruction, arch, SASS, verification status) rows for every modelled instruction."""
    recs = {}
    for r in records():
        recs.setdefault((r["instruction"], r["arch"]), []).append(r)
    rows = []
    for m in modelled():
        found = recs.get((m.ptx, m.arch))
        if not found:
            status = "NOT VERIFIED on hardware" + (f" ({m.note})" if m.note else "")
        else:
            r = max(found, key=lambda r: r["date"])
            verdict = "bit-exact" if r["mismatches"] == 0 else f"{r['mismatches']} MISMATCHES"
            status = f"{verdict} on {r['gpu']} (cc {r['cc']}): {r['cases']:,} cases, {r['date']}"
        rows.append((m.ptx, m.arch, m.sass, status))
    return rows
