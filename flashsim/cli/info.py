"""``flashsim info`` (what is modelled and how each part was shown on hardware) and ``flashsim verify`` (the
committed GPU golden data replayed on the CPU simulator)."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

from flashsim import __version__, golden, validation
from flashsim.kernels import TWINS
from flashsim.sass import evidence, opcodes

__all__ = ["add_parsers", "cmd_info", "cmd_verify", "families"]


#: the width ``flashsim info`` keeps its tables to
WIDTH = 120


class _PathWrapper(textwrap.TextWrapper):
    """Wraps at spaces and after a path's '/', never inside a date's or a name's '-'."""
    wordsep_re = re.compile(r"(\s+|[^\s/]*/(?=[^\s/]))")

    def __init__(self, width: int, **kw):
        super().__init__(width, break_on_hyphens=True, **kw)


def _table(rows, headers, width: int = WIDTH) -> str:
    """Columns two spaces apart, at most ``width`` wide: the columns with the most room to give are narrowed and
    their cells wrapped; a row's further lines are indented, so only a row's first line starts at the left
    margin."""
    rows = [[str(x) for x in r] for r in rows]
    cols = list(zip(headers, *rows))
    widths = [max(len(str(x)) for x in col) for col in cols]
    # a column narrows to 16; the first (a row's name) keeps up to 42 characters whole, and never breaks a word
    # (an instruction's name stays whole)
    first = max(min(widths[0], 42), max(len(t) for x in cols[0] for t in str(x).split() or [""]))
    floor = [max(16, first)] + [16] * (len(cols) - 1)
    floor = [min(f, w) for f, w in zip(floor, widths)]
    while sum(widths) + 2 * (len(widths) - 1) > width:
        k = max(range(len(widths)), key=lambda i: widths[i] - floor[i])
        if widths[k] <= floor[k]:
            break
        widths[k] -= 1

    def lines(r) -> list[str]:
        cells = [_PathWrapper(w, subsequent_indent="  " if i == 0 else "").wrap(c) or [""]
                 for i, (c, w) in enumerate(zip(r, widths))]  # the first column's further lines indented
        return ["  ".join((cell[j] if j < len(cell) else "").ljust(w) for cell, w in zip(cells, widths)).rstrip()
                for j in range(max(len(c) for c in cells))]
    out = [*lines(headers), "  ".join("-" * w for w in widths)]
    for r in rows:
        out.extend(lines(r))
    return "\n".join(out)


# ----------------------------------------------------------------------------------------------------
# flashsim info
# ----------------------------------------------------------------------------------------------------


def _traces_dir() -> Path | None:
    """The GPU evidence: ./traces when it holds it, else the repository's copy beside the package."""
    for d in (Path("traces"), Path(__file__).resolve().parents[2] / "traces"):
        if (d / "fa").is_dir() or (d / "warp").is_dir():
            return d
    return None


def _read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _where(pairs) -> str:
    """'GPU, date' pairs as one text: 'NVIDIA H100 80GB HBM3, 2026-11-22 and 2026-11-24'."""
    by_gpu: dict[str, list[str]] = {}
    for gpu, date in pairs:
        if date and date not in by_gpu.setdefault(gpu, []):
            by_gpu[gpu].append(date)
    return "; ".join(f"{gpu}, {' and '.join(sorted(dates))}" if dates else gpu for gpu, dates in by_gpu.items()) or "-"


def _numeric_family(ptx: str) -> str:
    if ptx.startswith("mma."):
        return "mma.sync m16n8k16 / m16n8k8 (HMMA)"
    if ptx.startswith("cvt."):
        return "cvt f32 <-> f16 / bf16 (F2FP, F2F, HADD2)"
    if ptx.startswith("cuda_math."):
        return "CUDA math: expf, exp2f, logf, tanhf, ..."
    if ptx.split(".")[0] in ("fma", "add", "mul", "max", "min"):
        return "f32 FFMA / FADD / FMUL / FMNMX"
    return "MUFU ex2/lg2/rcp/rsqrt/sqrt/tanh, div.rn"


def _numeric_families(rows) -> list[tuple[str, str, str, str]]:
    """One row per family of the numeric instructions, from the validation records (flashsim/data)."""
    recs = {(r["instruction"], r["arch"]): r for r in validation.records()}
    fams: dict[str, list] = {}
    for ptx, arch, _sass, _status in rows:
        if arch == "sm_90":
            fams.setdefault(_numeric_family(ptx), []).append(recs.get((ptx, arch)))
    out = []
    for fam, found in fams.items():
        got = [r for r in found if r]
        if len(got) < len(found) or not got:
            where, what = "-", f"{len(found) - len(got)} of {len(found)} forms NOT VERIFIED on hardware"
        else:
            bad = sum(r["mismatches"] for r in got)
            cases = sorted(r["cases"] for r in got)
            span = f"{cases[0]:,}" if cases[0] == cases[-1] else f"{cases[0]:,} to {cases[-1]:,}"
            where = _where((r["gpu"], r["date"]) for r in got)
            reports = sorted({r.get("report", "") for r in got} - {""})
            what = (f"{'bit-exact' if not bad else f'{bad} MISMATCHES'}: {len(got)} forms, {span} cases each"
                    + (f" ({', '.join(reports)})" if reports else ""))
        out.append((fam, "flashsim.numerics", where, what))
    return out


def _sass_forms(ops: tuple[str, ...]) -> tuple[int, int]:
    """(kernel problems, probe lanes) in which the H100 comparisons of the SASS interpreter ran these opcodes."""
    forms = [r for f, r in evidence.load().get("forms", {}).items() if f.split(".")[0] in ops]
    return max((r["problems"] for r in forms), default=0), sum(r["probe_cases"] for r in forms)


def _warp_log(traces: Path | None) -> tuple[str, str] | None:
    """(GPU, date) of the committed ``pytest --gpu`` run that compared flashsim.warp with the hardware."""
    if traces is None:
        return None
    try:
        head = (traces / "warp" / "pytest_gpu.log").read_text(encoding="utf-8").split("\n", 1)[0]
    except OSError:
        return None
    m = re.search(r" on one (.+?) \(sm_90.*\), (\d{4}-\d{2}-\d{2})", head)
    return (m.group(1), m.group(2)) if m else None


def _warp_families(traces: Path | None) -> list[tuple[str, str, str, str]]:
    prov = evidence.load().get("provenance", {})
    sass_where = f"{prov.get('gpu', 'GPU')}, {prov.get('date', '')}".rstrip(", ")
    log = _warp_log(traces)
    test = ("pytest --gpu of tests/test_warp_gpu.py bit for bit (traces/warp/pytest_gpu.log)" if log else
            "pytest --gpu of tests/test_warp_gpu.py (its log lives in the repository's traces/)")
    rows = []
    for fam, ops in (("ldmatrix .x1/.x2/.x4, .trans (LDSM)", ("LDSM",)),
                     ("stmatrix .x1/.x2/.x4, .trans (STSM)", ("STSM",)),
                     ("movmatrix (MOVM)", ("MOVM",)),
                     ("shfl.sync idx / up / down / bfly (SHFL)", ("SHFL",)),
                     ("cp.async commit/wait (LDGSTS, DEPBAR)", ("LDGSTS", "LDGDEPBAR", "DEPBAR"))):
        problems, lanes = _sass_forms(ops)
        what = [test]
        if problems or lanes:
            parts = [f"{problems} kernel problems"] if problems else []
            parts += [f"{lanes:,} probe lanes"] if lanes else []
            what.append(f"its SASS ran bit-exact in the interpreter's comparisons ({' and '.join(parts)}, "
                        f"{sass_where})")
        rows.append((fam, "flashsim.warp", f"{log[0]}, {log[1]}" if log else "-", "; ".join(what)))
    return rows


def _smem_families(traces: Path | None) -> list[tuple[str, str, str, str]]:
    banks = _read_json(traces / "banks" / "banks.json") if traces else None
    if banks:
        meta = banks.get("meta", {})
        where = f"{meta.get('gpu', 'GPU')}, {str(meta.get('date', ''))[:10]}"
        what = (f"Nsight Compute's counters on {len(banks.get('rows', []))} access patterns (traces/banks/banks.md); "
                "the FA kernels' launches per op class (traces/banks/fa)")
    else:
        where, what = "-", "Nsight Compute comparisons in the repository's traces/banks"
    rows = [("shared-memory bank wavefronts, conflicts", "flashsim.smem", where, what)]
    where, what = "-", "compute-sanitizer comparisons in the repository's traces/races and traces/diagnostics"
    if traces is not None:
        try:
            text = (traces / "diagnostics" / "README.md").read_text(encoding="utf-8")
        except OSError:
            text = ""
        m = re.search(r"on (\d{4}-\d{2}-\d{2}), (NVIDIA [^(]+?) \(", text)
        r = re.search(r"Result: (\d+) of (\d+) required cases agree", text)
        if m:
            where = f"{m.group(2)}, {m.group(1)}"
            what = ("compute-sanitizer racecheck / memcheck / initcheck on planted bugs"
                    + (f": {r.group(1)} of {r.group(2)} cases agree" if r else "") + " (traces/diagnostics)")
    rows.append(("shared-memory races, faults, uninit. reads", "flashsim.smem, flashsim.cuda",
                 where, what))
    # synccheck: the planted cases of gpu/synccheck_cases.py, once run on a GPU and their JSON kept under the traces
    sync = _read_json(traces / "synccheck" / "synccheck_cases.json") if traces else None
    where, what = "-", "not yet run on a GPU under compute-sanitizer synccheck (gpu/synccheck_cases.py)"
    if sync:
        head = " ".join(sync.get("header", []))
        g, d = re.search(r"GPU: (NVIDIA [^(]+?) \(", head), re.search(r"date: (\d{4}-\d{2}-\d{2})", head)
        where = f"{g.group(1) if g else 'GPU'}, {d.group(1) if d else ''}"
        rows_ = sync.get("cases", [])
        what = f"{len(rows_)} planted cases, against compute-sanitizer's verdicts (traces/synccheck)"
    rows.append(("barrier misuse (synccheck)", "flashsim.sass.synccheck", where, what))
    return rows


def _kernel_families(traces: Path | None) -> list[tuple[str, str, str, str]]:
    fa = _read_json(traces / "fa" / "fa_report.json") if traces else None
    sass = _read_json(traces / "sass" / "sass_report.json") if traces else None
    ev = evidence.load()
    prov = ev.get("provenance", {})
    rows = []
    for k in TWINS:
        what, where = [], []
        if fa and k in fa.get("summary", {}):
            s, p = fa["summary"][k], fa.get("provenance", {})
            lse = f", LSE {s['lse_identical']}/{s['with_lse']}" if s.get("with_lse") else ""
            what.append(f"twin == CUDA kernel: out {s['out_identical']}/{s['cases']} problems bit-identical{lse} "
                        "(traces/fa/fa_report.md)")
            where.append((p.get("name", "GPU"), p.get("date", "")))
        if sass and k in sass.get("results", {}):
            res, p = sass["results"][k], sass.get("provenance", {})
            same = sum(1 for r in res if r.get("gpu_interp"))
            what.append(f"its cubin in the SASS interpreter == GPU: {same}/{len(res)} problems (traces/sass)")
            where.append((p.get("name", "GPU"), p.get("date", "")))
        if not what:  # no traces/ here: the package's own record of the interpreter's comparisons
            n = max((r["kernels"].get(k, 0) for r in ev.get("forms", {}).values()), default=0)
            if n:
                what.append(f"its cubin in the SASS interpreter == GPU on {n} problems")
                where.append((prov.get("gpu", "GPU"), prov.get("date", "")))
        rows.append((f"FlashAttention kernel {k}", "flashsim.kernels", _where(where) if where else "-",
                     "; ".join(what) or "no recorded GPU comparison found"))
    return rows


def families() -> list[tuple[str, str, str, str]]:
    """(family, module, GPU and date it was shown on, evidence) of every modelled instruction family and kernel."""
    traces = _traces_dir()
    prov = evidence.load().get("provenance", {})
    n_ops = len(opcodes.table())
    shown = sum(1 for r in evidence.rows() if r[2].startswith("bit-exact"))
    return (_numeric_families(validation.status_table()) + _warp_families(traces) + _smem_families(traces)
            + _kernel_families(traces)
            + [(f"SASS opcodes ({n_ops} with a semantic)", "flashsim.sass, flashsim.cuda",
                f"{prov.get('gpu', 'GPU')}, {prov.get('date', '')}",
                f"{shown} of {n_ops} ran bit-exact in whole kernels or per-opcode probes (table below)")])


def cmd_info(args) -> int:
    rows = validation.status_table()
    if args.arch:
        rows = [r for r in rows if r[1] == args.arch]
    print(f"flashsim {__version__}: what is modelled and how it was shown on hardware\n")
    if args.arch in (None, "sm_90"):
        print("Instruction families and kernels (sm_90), with the GPU and date each was shown on\n")
        print(_table(families(), ("family", "modelled in", "shown on", "evidence")))
        print()
    print("Numeric instructions: every form, its SASS and its verification\n")
    print(_table(rows, ("instruction", "arch", "SASS", "verification")))
    if args.arch in (None, "sm_90"):
        print("\nSASS interpreter (flashsim.cuda): every opcode with a semantic, and what the H100 showed of "
              "each instruction form\n")
        print(_table(evidence.rows(), ("opcode", "family", "evidence")))
    return 0


def cmd_verify(args) -> int:
    if args.golden is None:
        args.golden = golden.default_dir()
    results = golden.replay_all(args.golden)
    rows = [(r.instruction, f"{r.cases:,}", r.mismatches, Path(r.source).name) for r in results]
    print(f"Replaying GPU golden data from {args.golden} on the CPU simulator\n")
    print(_table(rows, ("instruction", "cases", "mismatches", "file")))
    bad = [r for r in results if r.mismatches]
    for r in bad:
        print(f"\n{r.instruction}: {r.mismatches} of {r.cases} differ; first ones:")
        for ex in r.examples:
            print("   ", ex)
    total = sum(r.cases for r in results)
    print(f"\n{len(results)} instructions, {total:,} recorded outputs, "
          f"{sum(r.mismatches for r in results)} mismatches")
    return 1 if bad else 0


def add_parsers(sub) -> None:
    """Register ``info`` and ``verify`` on the top-level subparsers object."""
    info = sub.add_parser("info", help="list what is modelled (instruction families, every instruction form, the "
                                       "FA kernels, SASS opcodes) and how each was verified on hardware",
                          description="List every modelled instruction family and FlashAttention kernel with the "
                                      "GPU and date it was shown on, then every numeric instruction form with its "
                                      "SASS and verification record, then every SASS opcode the interpreter models "
                                      "with what the H100 showed of it. Reads flashsim/data and, in a checkout, "
                                      "traces/.")
    info.add_argument("--arch", choices=["sm_90", "sm_80"],
                      help="only this architecture's instructions (default: both)")
    info.set_defaults(func=cmd_info)
    ver = sub.add_parser("verify", help="replay the committed GPU golden data on the CPU simulator, bit for bit",
                         description="Replay the golden data an sm_90 GPU recorded (traces/numerics: mma, f32, cvt, "
                                     "MUFU) through the simulator and report every bit that differs. Exit status 0 "
                                     "when every recorded output matches, 1 otherwise, 2 on bad input.")
    ver.add_argument("--golden", type=Path, default=None, metavar="DIR",
                     help="folder of golden .npz files (default: ./traces/numerics, else the repository's)")
    ver.set_defaults(func=cmd_verify)
