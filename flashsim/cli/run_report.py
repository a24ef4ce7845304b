"""What ``flashsim run`` prints and draws from a checking report: banks per source line with the line's
text, races, a fault, uninitialised reads named by argument, barrier misuse (synccheck), executed instructions
per line; the GPU comparison; the HTML page and the per-line bank map (SVG).
"""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np

from flashsim import device
from flashsim.errors import SimulatedFault, ranges as _ranges
from flashsim.cli.launchargs import _UINT, compare_bits


class _Sources:
    """Source lines by file, read on demand (a file that is not on disk has no text)."""

    def __init__(self):
        self._files: dict[str, list[str] | None] = {}

    def lines(self, file: str) -> list[str] | None:
        if file not in self._files:
            try:
                self._files[file] = Path(file).read_text(encoding="utf-8", errors="replace").splitlines() \
                    if file and Path(file).is_file() else None
            except OSError:
                self._files[file] = None
        return self._files[file]

    def text(self, file: str, line: int | None) -> str:
        ls = self.lines(file)
        if ls is None or line is None or not 1 <= line <= len(ls):
            return ""
        return ls[line - 1].strip()


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


def _loc(file: str, line) -> str:
    return f"{Path(file).name}:{line}" if line is not None and file else "(no line info)"


def _clip(text: str, n: int = 70) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."


def _where_in_args(addr: int, arrays: list) -> str:
    """Which array argument (and element) a device address falls in or next to."""
    best = None
    for a in arrays:
        start, n = a.device.data.ptr, a.device.nbytes
        if start <= addr < start + n:
            i = (addr - start) // a.spec.np_dtype.itemsize
            idx = np.unravel_index(i, a.spec.shape)
            return f"{a.name}[{', '.join(map(str, idx))}]"
        if addr >= start + n and (best is None or start > best[1]):
            best = (a, start, addr - start - n)
    if best is not None and best[2] < 1 << 20:
        a, _, past = best
        return f"{past} bytes past the end of {a.name} ({a.spec.dtype}{list(a.spec.shape)}, {a.device.nbytes} bytes)"
    return ""


# ----------------------------------------------------------------------------------------------------
# Printing
# ----------------------------------------------------------------------------------------------------


def _print_fault(exc, src: _Sources, arrays) -> None:
    if exc is None:
        return
    print()
    line = getattr(exc, "line", None)
    pc = getattr(exc, "pc", None)
    if isinstance(exc, SimulatedFault):
        head = f"FAULT: {exc.kind}"
        if pc is not None:
            head += f" at pc={pc:#06x} `{exc.sass}`"
        if line:
            head += f", {_loc(*line)}"
        print(head)
        if line and src.text(*line):
            print(f"    {src.text(*line)}")
        print(f"  cta={exc.cta} warp={exc.warp} lane={exc.lane} addr={exc.addr:#x}" +
              (f" ({exc.detail})" if exc.detail else ""))
        near = _where_in_args(exc.addr, arrays)
        if near:
            print(f"  the address: {near}")
    else:
        print(f"LAUNCH STOPPED: {type(exc).__name__}: {exc}")
    print("  (the report below covers the CTAs run until then)")


def _print_banks(report, src: _Sources, top: int) -> None:
    print()
    if not report.banks:
        print("shared-memory banks: not counted (--no-banks)")
        return
    rows = report.banks_by_line()
    if not rows:
        print("shared-memory banks: no shared-memory instruction executed")
        return
    print("shared-memory banks per source line (worst first):")
    w = max(len(_loc(d["file"], d["line"])) for d in rows[:top])
    w = max(w, 4)
    print(f"  {'line':<{w}} {'exec':>8} {'wavefronts':>10} {'ideal':>8} {'conflicts':>9}  source")
    for d in rows[:top]:
        print(f"  {_loc(d['file'], d['line']):<{w}} {d['executions']:>8} {d['wavefronts']:>10} {d['ideal']:>8} "
              f"{d['conflicts']:>9}  {_clip(src.text(d['file'], d['line']))}".rstrip())
    if len(rows) > top:
        print(f"  ... {len(rows) - top} more line{'' if len(rows) - top == 1 else 's'} (--top)")
    for k, d in report.bank_totals().items():
        ratio = f" ({d['wavefronts'] / d['ideal']:.2f}x ideal)" if d["ideal"] else ""
        print(f"  total {k}: {d['executions']} shared-memory instructions executed, {d['wavefronts']} wavefronts, "
              f"{d['ideal']} ideal, {d['conflicts']} conflicts{ratio}")


def _side(accesses, src: _Sources, label: str) -> list[str]:
    a = accesses[0]
    out = [f"    {label}: {a.op:<5} {_loc(a.file, a.line)}  pc={a.pc:#06x} `{a.sass}`"]
    t = src.text(a.file, a.line)
    if t:
        out.append(f"           {_clip(t, 90)}")
    out.append(f"           ctas {_ranges(x.cta for x in accesses)}, warps {_ranges(x.warp for x in accesses)}, "
               f"lanes {_ranges(x.lane for x in accesses)}")
    return out


def _print_races(report, src: _Sources) -> None:
    print()
    if not report.races:
        print("races: not checked (--no-races)")
        return
    if not report.race_count:
        print("races: none")
        return
    groups = report.race_groups()
    listed = "" if report.race_count == len(report.race_sites) else f", the first {len(report.race_sites)} listed"
    print(f"races: {report.race_count} hazards (per word and instruction pair{listed}), "
          f"{len(groups)} instruction pair{'' if len(groups) == 1 else 's'}:")
    for rs in groups:
        kind = rs[0].kind
        addrs = [r.addr for r in rs]
        span = f"{min(addrs):#x}" if min(addrs) == max(addrs) else f"{min(addrs):#x}..{max(addrs):#x}"
        print(f"  {kind} at shared addr {span} ({len(rs)}x): no barrier orders these two accesses")
        for line in _side([r.first for r in rs], src, "first ") + _side([r.second for r in rs], src, "second"):
            print(line)


def _print_uninit(report, src: _Sources, arrays) -> None:
    print()
    if not report.initcheck:
        print("uninitialised reads: not checked (--no-initcheck)")
        return
    if not report.uninit_count:
        print("uninitialised reads: none")
        return
    groups: dict = {}
    for u in report.uninitialized:
        a = u.access
        groups.setdefault((u.space, a.kernel, a.file, a.line), []).append(u)
    n = len(report.uninitialized)
    listed = "" if report.uninit_count == n else f", the first {n} listed"
    print(f"uninitialised reads: {report.uninit_count} lane accesses{listed}:")
    for (space, _, file, line), us in groups.items():
        what = f"{space} memory"
        if space == "global":
            names = sorted({_where_in_args(u.addr, arrays).split("[")[0] for u in us} - {""})
            if names:
                what += f" of {', '.join(names)} (e.g. {_where_in_args(us[0].addr, arrays)})"
        else:
            addrs = [u.addr for u in us]
            what += f" at {min(addrs):#x}" + (f"..{max(addrs):#x}" if max(addrs) != min(addrs) else "")
        pcs = sorted({u.access.pc for u in us})
        sass = us[0].access.sass
        print(f"  {len(us)}x read of {what}, never written")
        print(f"    at {_loc(file, line)}  pc={', '.join(f'{p:#06x}' for p in pcs[:4])}{' ...' if len(pcs) > 4 else ''}"
              f" `{sass}`{' ...' if len(pcs) > 1 else ''}")
        t = src.text(file, line)
        if t:
            print(f"       {_clip(t, 90)}")
        print(f"       ctas {_ranges(u.access.cta for u in us)}, warps {_ranges(u.access.warp for u in us)}, "
              f"lanes {_ranges(u.access.lane for u in us)}")


def _print_synccheck(report, src: _Sources) -> None:
    print()
    if not report.synccheck:
        print("barriers (synccheck): not checked (--no-synccheck)")
        return
    if not report.sync_count:
        print("barriers (synccheck): no misuse")
        return
    groups = report.sync_groups()
    listed = "" if report.sync_count == len(report.sync_findings) else f", the first {len(report.sync_findings)} listed"
    pcs = len({(fs[0].access.kernel, fs[0].access.pc) for fs in groups})
    print(f"barriers (synccheck): {report.sync_count} finding{'' if report.sync_count == 1 else 's'}{listed}, at "
          f"{pcs} instruction{'' if pcs == 1 else 's'}:")
    for fs in groups:
        f = fs[0]
        a = f.access
        loc = _loc(a.file, a.line) + "".join(f" inlined at {_loc(f_, n)}" for f_, n in a.inlined)
        print(f"  {f.kind} ({f.reason}), {len(fs)}x: {loc}  pc={a.pc:#06x} `{a.sass}`")
        t = src.text(*a.lines[-1]) if a.lines else ""  # the kernel's own line (the outermost call site)
        if t:
            print(f"       {_clip(t, 90)}")
        for ln in dict.fromkeys(x.lines[-1] if x.lines else None for x in f.sites):  # the other sites, by line
            if ln is not None and ln != (a.lines[-1] if a.lines else None):
                print(f"       with {_loc(*ln)}  {_clip(src.text(*ln), 80)}".rstrip())
        print(f"       ctas {_ranges(x.access.cta for x in fs)}, warps {_ranges(x.access.warp for x in fs)}, "
              f"lanes {_ranges(lane for x in fs for lane in x.lanes)}")
        print(f"       {f.message}")


def _print_executed(report, src: _Sources, top: int) -> None:
    rows = report.executed_by_line()
    print()
    if not rows:
        print("executed instructions: none")
        return
    total = sum(d["executions"] for d in rows)
    print(f"executed warp instructions per source line (top {min(top, len(rows))} of {len(rows)}; {total} in all):")
    w = max(4, max(len(_loc(d["file"], d["line"])) for d in rows[:top]))
    print(f"  {'line':<{w}} {'warp instr':>10} {'share':>6} {'SASS':>5}  source")
    for d in rows[:top]:
        print(f"  {_loc(d['file'], d['line']):<{w}} {d['executions']:>10} {100 * d['executions'] / total:>5.1f}% "
              f"{d['instructions']:>5}  {_clip(src.text(d['file'], d['line']))}".rstrip())


def _print_summary(report, stopped, gpu_result) -> list[str]:
    findings = []
    if stopped is not None:
        findings.append("a fault" if isinstance(stopped, SimulatedFault) else f"a {type(stopped).__name__}")
    if report.races and report.race_count:
        findings.append(f"{len(report.race_pairs())} racing instruction pair(s)")
    if report.initcheck and report.uninit_count:
        findings.append(f"{report.uninit_count} uninitialised read(s)")
    if report.synccheck and report.sync_count:
        findings.append(f"{report.sync_count} barrier misuse finding(s)")
    if gpu_result is not None and gpu_result.get("differ"):
        findings.append(f"{len(gpu_result['differ'])} array(s) differing from the GPU")
    print()
    if findings:
        print("found: " + ", ".join(findings))
    else:
        checked = [n for n, on in (("races", report.races), ("uninitialised reads", report.initcheck)) if on]
        print("clean: no fault" + "".join(f", no {c}" for c in checked))
    return findings


# ----------------------------------------------------------------------------------------------------
# The GPU (--gpu)
# ----------------------------------------------------------------------------------------------------


def _run_gpu(cupy, mod, name, grid, block, shared_mem, values, stopped) -> dict:
    """Run the same cubin on the GPU with the same inputs; compare every array argument bit for bit."""
    print()
    if stopped is not None:
        print("GPU: not run (the simulated launch stopped; the GPU would fault too or hang)")
        return {"run": False}
    kern = device.load_cubin(mod.cubin).get_function(name)
    if shared_mem > 48 * 1024:
        kern.max_dynamic_shared_size_bytes = shared_mem
    gargs, garrays = [], []
    for a in values:
        if a.spec.is_array:
            u = _UINT[a.spec.np_dtype.itemsize]
            g = cupy.asarray(np.ascontiguousarray(a.host).view(u))  # bit patterns: cupy has no bf16
            garrays.append((a, g))
            gargs.append(g)
        else:
            u = _UINT[a.spec.np_dtype.itemsize]
            gargs.append(np.frombuffer(a.host.tobytes(), u)[0])
    device.launch(kern, grid, block, gargs, shared_mem=shared_mem)
    print(f"GPU ({cupy.cuda.runtime.getDeviceProperties(cupy.cuda.runtime.getDevice())['name'].decode()}): "
          "the same cubin, the same inputs (`:empty` arrays start as zeros there too)")
    differ, lines, out = [], [], {}
    for a, g in garrays:
        got = cupy.asnumpy(g).view(a.spec.np_dtype).reshape(a.spec.shape)
        out[a.name] = got
        same, text = compare_bits(a.name, a.device.get(), got)
        print(f"  {text}")
        lines.append(text)
        if not same:
            differ.append(a.name)
    return {"run": True, "differ": differ, "lines": lines, "arrays": out}


# ----------------------------------------------------------------------------------------------------
# --html and --svg
# ----------------------------------------------------------------------------------------------------


def _per_line(report) -> tuple[dict, dict]:
    banks = {(d["file"], d["line"]): d for d in report.banks_by_line()} if report.banks else {}
    execd = {(d["file"], d["line"]): d for d in report.executed_by_line()}
    return banks, execd


def _html_page(report, src: _Sources, args, name: str, launch: dict, stopped) -> str:
    esc = html.escape
    parts = [report.html(title=f"flashsim run: {name} ({args.kernel_file.name})")]
    parts.append("<style>pre.src{margin:0}table.src td{border:0;padding:0 6px;white-space:pre}"
                 "table.src tr.hot{background:#fdf2f0}.xs{color:#888}</style>")
    parts.append("<h2>Launch</h2><ul>")
    parts.append(f"<li>{esc(str(args.kernel_file))}: kernel <b>{esc(name)}</b>, grid {tuple(args.grid)}, block "
                 f"{tuple(args.block)}, shared_mem {args.shared_mem}</li>")
    parts.extend(f"<li>#{a['ordinal']} {esc(a['spec'])}</li>" for a in launch["args"])
    parts.append(f"<li>inputs from numpy.random.default_rng({args.seed}); exit status "
                 f"{launch['exit_status']}</li></ul>")
    if stopped is not None:
        parts.append(f"<h2 style='color:#c0392b'>Fault</h2><p>{esc(str(stopped))}</p>")
    if launch["gpu"] is not None and launch["gpu"].get("lines"):
        parts.append("<h2>GPU comparison</h2><ul>" + "".join(f"<li>{esc(t)}</li>" for t in launch["gpu"]["lines"])
                     + "</ul>")
    banks, execd = _per_line(report)
    files = [str(args.kernel_file.resolve())] if args.kernel_file.suffix != ".cubin" else []
    by_exec: dict = {}
    for (f, _), d in execd.items():
        by_exec[f] = by_exec.get(f, 0) + d["executions"]
    for f in sorted(by_exec, key=lambda f: -by_exec[f]):
        if f not in files and src.lines(f) is not None:
            files.append(f)
    worst = max([d["wavefronts"] for d in banks.values()] + [1])
    most = max([d["executions"] for d in execd.values()] + [1])
    for i, f in enumerate(files):
        lines = src.lines(f)
        if lines is None:
            continue
        full = i == 0 or len(lines) <= 400
        parts.append(f"<h2>Source: {esc(f)}</h2><p class=xs>per line: shared-memory wavefronts (green: ideal, red: "
                     "excess from bank conflicts), warp instructions executed"
                     + ("" if full else "; only lines that ran") + "</p>")
        parts.append("<table class=src><tr><th>line</th><th>wavefronts</th><th>ideal</th><th>conflicts</th><th></th>"
                     "<th>warp instr</th><th></th><th style='text-align:left'>source</th></tr>")
        for n, text in enumerate(lines, 1):
            b, e = banks.get((f, n)), execd.get((f, n))
            if not full and b is None and e is None:
                continue
            bar = ex = ""
            cells = "<td></td><td></td><td></td>"
            if b is not None:
                bar = (f"<span class='bar ok' style='width:{int(160 * b['ideal'] / worst)}px'></span>"
                       f"<span class=bar style='width:{int(160 * b['conflicts'] / worst)}px'></span>")
                cells = f"<td>{b['wavefronts']}</td><td>{b['ideal']}</td><td>{b['conflicts']}</td>"
            if e is not None:
                ex = (f"<span class=bar style='background:#2980b9;width:{max(1, int(80 * e['executions'] / most))}px'>"
                      "</span>")
            hot = " class=hot" if b is not None and b["conflicts"] else ""
            parts.append(f"<tr{hot}><td class=xs>{n}</td>{cells}<td class=l>{bar}</td>"
                         f"<td>{e['executions'] if e else ''}</td><td class=l>{ex}</td>"
                         f"<td class=l>{esc(text)}</td></tr>")
        parts.append("</table>")
    return "\n".join(parts) + "\n"


def _bank_svg(report, src: _Sources, name: str) -> str:
    esc = html.escape
    rows = [d for d in report.banks_by_line()] if report.banks else []
    rows.sort(key=lambda d: (d["file"], d["line"] or 0))
    labels = [(_loc(d["file"], d["line"]), _clip(src.text(d["file"], d["line"]), 34)) for d in rows]
    notes = [f'{d["wavefronts"]} ({d["ideal"]} ideal, {d["conflicts"]} conflicts; {d["executions"]} exec)' for d in rows]
    char_w = 6.7  # an 11 px monospace character (0.6 em), so that no label runs into the bars or off the page
    bar_w, row_h, top = 520, 22, 64
    label_w = int(24 + char_w * max([len(a) + 1 + len(b) for a, b in labels] + [40]))
    h = top + max(1, len(rows)) * row_h + 40
    w = int(label_w + bar_w + 18 + char_w * max([len(n) for n in notes] + [30]))
    worst = max([d["wavefronts"] for d in rows] + [1])
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
           'font-family="monospace">', f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="12" y="22" font-size="14" font-weight="bold">{esc(name)}: shared-memory wavefronts per '
           'source line</text>',
           '<rect x="12" y="34" width="12" height="10" fill="#27ae60"/>'
           '<text x="28" y="43" font-size="11">ideal</text>'
           '<rect x="80" y="34" width="12" height="10" fill="#c0392b"/>'
           '<text x="96" y="43" font-size="11">excess (bank conflicts)</text>']
    if not rows:
        out.append(f'<text x="12" y="{top + 14}" font-size="12">no shared-memory instruction executed</text>')
    for i, (d, (label, text), note) in enumerate(zip(rows, labels, notes)):
        y = top + i * row_h
        out.append(f'<text x="12" y="{y + 14}" font-size="11"><tspan font-weight="bold">{esc(label)}</tspan>'
                   f'<tspan fill="#555"> {esc(text)}</tspan></text>')
        w_ok = bar_w * d["ideal"] / worst
        w_bad = bar_w * d["conflicts"] / worst
        out.append(f'<rect x="{label_w}" y="{y + 3}" width="{w_ok:.1f}" height="{row_h - 8}" fill="#27ae60"/>')
        if d["conflicts"]:
            out.append(f'<rect x="{label_w + w_ok:.1f}" y="{y + 3}" width="{w_bad:.1f}" height="{row_h - 8}" '
                       'fill="#c0392b"/>')
        out.append(f'<text x="{label_w + w_ok + w_bad + 6:.1f}" y="{y + 14}" font-size="11">{esc(note)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
