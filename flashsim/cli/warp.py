"""``flashsim fragment | ldmatrix | banks``: debug a fragment mapping, an ldmatrix address expression or
the banks of a plain ld/st/cp.async, without a GPU. ``add_parsers(subparsers)`` registers the three
subcommands on the main parser (flashsim/cli/__init__.py); each handler returns the exit status.
"""

from __future__ import annotations

import argparse

import numpy as np

from flashsim.errors import bad_argument
from flashsim.options import positive_int
from flashsim.outputs import write_text
from flashsim.smem import PHASES, MODELS, SharedMemory, bank_table, cp_async_table, wavefronts
from flashsim.swizzle import parse_swizzle
from flashsim.viz.banks import bank_map_svg
from flashsim.viz.fragments import fragment_svg
from flashsim.warp.expr import evaluate, parse_defines
from flashsim.warp.fragments import INSTRUCTIONS, fragment
from flashsim.warp.matrix import ldmatrix, ldmatrix_op

__all__ = ["add_parsers", "cmd_banks", "cmd_fragment", "cmd_ldmatrix", "lane_addresses"]


# ------------------------------------------------------------------------------------------ helpers


def _table(rows, headers) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)]
    line = lambda r: "  ".join(str(x).rjust(w) for x, w in zip(r, widths)).rstrip()  # noqa: E731
    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in rows])


def lane_addresses(expr: str, defines: list[str] | None, swizzle: str | None, elem_bytes: int, base: int):
    """(logical offsets, physical byte addresses, description) of an address expression."""
    if not isinstance(elem_bytes, int) or elem_bytes not in (1, 2, 4, 8, 16):
        raise bad_argument("--elem-bytes", elem_bytes, "expected 1, 2, 4, 8 or 16")
    consts = parse_defines(defines)
    logical = evaluate(expr, consts)
    spec = parse_swizzle(swizzle) if swizzle else None
    if spec is not None and logical.min() < 0:
        raise bad_argument("EXPR", expr, "a swizzle needs offsets >= 0")
    phys_elems = spec(logical) if spec is not None else logical
    phys = base + np.asarray(phys_elems, dtype=np.int64) * elem_bytes
    desc = f"addr = {expr}"
    if consts:
        desc += " with " + ", ".join(f"{k}={v}" for k, v in consts.items())
    if spec is not None:
        desc += f", through {spec}"
    desc += f"; units of {elem_bytes} byte{'s' if elem_bytes > 1 else ''}"
    if base:
        desc += f", base {base:#x}"
    return logical, phys, desc


def _smem_for(phys: np.ndarray, width: int) -> SharedMemory:
    top = int(max(phys.max(), 0)) + width
    size = max(16, -(-top // 16) * 16)
    size = min(size, 228 * 1024)
    return SharedMemory(1, size, races=False)


def _bank_report(table: list[dict], wf: int, ideal: int, phases: bool = True) -> list[str]:
    out = []
    for p in table:
        conflicts = [(b, []) for b in range(32)]
        for k, bank, word, lanes in p["cells"]:
            conflicts[bank][1].append((k, word, lanes))
        worst = max(len(c[1]) for c in conflicts)
        lanes = p["lanes"]
        if phases:
            out.append(f"phase {p['phase']} (lanes {lanes[0]}..{lanes[-1]}): {p['wavefronts']} wavefront"
                       f"{'s' if p['wavefronts'] > 1 else ''}" + (f" ({worst}-way bank conflict)" if worst > 1 else ""))
        else:  # one table of every lane (cp.async): which wavefront writes which bank
            out.append(f"lanes {lanes[0]}..{lanes[-1]}: {p['wavefronts']} wavefront"
                       f"{'s' if p['wavefronts'] > 1 else ''}")
        header = "  bank " + "".join(f"{b:>5}" for b in range(32))
        out.append(header)
        for k in range(p["wavefronts"]):
            cells = ["    ."] * 32
            for kk, bank, word, ls in p["cells"]:
                if kk == k:
                    txt = f"T{ls[0]}" + (f"+{len(ls) - 1}" if len(ls) > 1 else "")
                    cells[bank] = f"{txt:>5}"
            out.append(f"  wf{k:<3}" + "".join(cells))
    out.append(f"total: {wf} wavefronts, ideal {ideal}, {wf - ideal} bank conflict{'s' if wf - ideal != 1 else ''}")
    return out


def _write_svg(path: str, text: str) -> None:
    print(f"wrote {write_text(path, text, option='--svg')}")


# ------------------------------------------------------------------------------------------ fragment


def cmd_fragment(args) -> int:
    frag = fragment(args.instruction, args.operand, args.dtype)
    print(f"{frag.name}: {frag.regs} register{'s' if frag.regs > 1 else ''} x {frag.elems} "
          f"element{'s' if frag.elems > 1 else ''} per lane; {frag.ptx}")
    print("T = lane, V = value index = elems*reg + half (half 0 = bits 0-15); g = lane>>2, t = lane%4\n")
    rows = [[f"r{r}"] + [f"T{int(frag.owner_lane[r, c])}V{int(frag.owner_value[r, c])}" for c in range(frag.cols)]
            for r in range(frag.rows)]
    print(_table(rows, [""] + [f"c{c}" for c in range(frag.cols)]))
    print("\ninverse: lane -> (row, col) of each value")
    nv = frag.regs * frag.elems
    inv = [[f"T{t}"] + [f"({frag.coords(t, v // frag.elems, v % frag.elems)[0]},"
                         f"{frag.coords(t, v // frag.elems, v % frag.elems)[1]})" for v in range(nv)] for t in range(32)]
    print(_table(inv, ["lane"] + [f"V{v}" for v in range(nv)]))
    if args.svg:
        _write_svg(args.svg, fragment_svg(frag))
    return 0


# ------------------------------------------------------------------------------------------ ldmatrix


def cmd_ldmatrix(args) -> int:
    num = args.num
    logical, phys, desc = lane_addresses(args.addr, args.define, args.swizzle, args.elem_bytes, args.base)
    op = ldmatrix_op(num, args.trans)
    smem = _smem_for(phys[: 8 * num], 16)
    ldmatrix(smem, np.where(np.arange(32) < 8 * num, phys, 0), num=num, trans=args.trans, tag="cli")  # faults as the device
    print(op)
    print(desc + "\n")
    used = 8 * num
    rows = [(lane, int(logical[lane]), f"{int(phys[lane]):#x}", int(phys[lane]) // 4 % 32, f"m{lane // 8} row{lane % 8}")
            for lane in range(used)]
    print(_table(rows, ("lane", "EXPR", "byte addr", "bank", "supplies")))
    if used < 32:
        print(f"(lanes {used}..31: addresses ignored by .x{num})")
    # what each lane receives: element (matrix row, column) -> byte address, and logical coordinates
    eb = 2  # .b16
    recv = np.empty((32, num, 2), np.int64)
    lrecv = np.empty((32, num, 2), np.int64)
    m8n8 = fragment("ldmatrix.m8n8")  # lane l's register holds (row, col) of its matrix; .trans swaps the two
    for h in range(2):
        row, col = m8n8.row[:, 0, h].astype(np.int64), m8n8.col[:, 0, h].astype(np.int64)
        if args.trans:
            row, col = col, row
        for j in range(num):
            recv[:, j, h] = phys[8 * j + row] + eb * col
            lrecv[:, j, h] = logical[8 * j + row] * args.elem_bytes // eb + col if args.elem_bytes <= eb else -1
    print("\nwhat each lane receives (register rJ = matrix J; lo = bits 0-15, hi = bits 16-31):")
    if args.row_stride:
        def show(v):
            return f"({v // args.row_stride},{v % args.row_stride})"
        print(f"as logical (row, col) with row stride {args.row_stride} elements")
        cells = [[f"T{t}"] + [f"{show(int(lrecv[t, j, 0]))} {show(int(lrecv[t, j, 1]))}" for j in range(num)]
                 for t in range(32)]
    else:
        print("as byte addresses (pass --row-stride N for (row, col) of the EXPR's matrix)")
        cells = [[f"T{t}"] + [f"{int(recv[t, j, 0]):#x} {int(recv[t, j, 1]):#x}" for j in range(num)] for t in range(32)]
    print(_table(cells, ["lane"] + [f"r{j} (lo hi)" for j in range(num)]))
    act = np.arange(32) < used
    wf, ideal = wavefronts(phys, op="ldsm", num=num, active=act)
    table = bank_table(phys, op="ldsm", num=num)
    print("\nbanks (one phase per 8x8 matrix):")
    print("\n".join(_bank_report(table, int(wf), int(ideal))))
    if args.svg:
        _write_svg(args.svg, bank_map_svg(table, title=f"{op}: bank map", caption=desc, wavefronts=int(wf),
                                          ideal=int(ideal)))
    return 0


# ------------------------------------------------------------------------------------------ banks


_OPS = {"ld": ("ld", "ld.shared"), "st": ("st", "st.shared"), "cp.async": ("ldgsts", "cp.async.ca (LDGSTS)"),
        "cp.async.cg": ("ldgsts", "cp.async.cg (LDGSTS.BYPASS)")}


def cmd_banks(args) -> int:
    width = args.width // 8
    kind, name = _OPS[args.op]
    if kind == "ldgsts" and width not in (4, 8, 16):
        raise bad_argument("--width", args.width, "cp.async copies 32, 64 or 128 bits (4, 8, 16 bytes)")
    if args.op == "cp.async.cg" and width != 16:
        raise bad_argument("--width", args.width, "cp.async.cg copies 128 bits")
    if args.src and kind != "ldgsts":
        raise bad_argument("--src", args.src, "a global source belongs to --op cp.async / cp.async.cg")
    logical, phys, desc = lane_addresses(args.addr, args.define, args.swizzle, args.elem_bytes, args.base)
    if args.active:
        act = evaluate(args.active, parse_defines(args.define)) != 0
    else:
        act = np.ones(32, bool)
    smem = _smem_for(np.where(act, phys, 0), width)
    smem.check_access(phys.reshape(1, 1, 32), width, act.reshape(1, 1, 32), f"{name}.b{args.width}")
    model = MODELS[args.model]
    copy = {}
    if kind == "ldgsts" and model.cp_async:
        # the rule of flashsim.smem.cp_async_wavefronts: it needs the global source of every lane
        src = evaluate(args.src, parse_defines(args.define)) if args.src else 16 * np.arange(32, dtype=np.int64)
        copy = {"src": src, "bypass": args.op == "cp.async.cg"}
    wf, ideal = wavefronts(phys, width=width, op=kind, active=act, model=model, **copy)
    print(f"{name} {args.width}-bit ({width} bytes per lane), counted as op '{kind}', model '{model.name}'")
    print(desc + "\n")
    if copy:
        print(f"global source: {'SRC = ' + args.src if args.src else '16 * lane (the default)'} (byte offsets)\n")
    rows = [(lane, int(logical[lane]), f"{int(phys[lane]):#x}", f"{int(phys[lane]) // 4 % 32}" +
             (f"-{(int(phys[lane]) // 4 + width // 4 - 1) % 32}" if width > 4 else ""), "" if act[lane] else "inactive")
            for lane in range(32)]
    print(_table(rows, ("lane", "EXPR", "byte addr", "bank(s)", "")))
    print()
    if copy:
        table = cp_async_table(phys, width=width, active=act, **copy)
        lines = _bank_report(table, int(wf), int(ideal), phases=False)
        base_wf, _ = wavefronts(phys, width=width, op=kind, active=act, model=PHASES)
        lines[:0] = [f"cp.async as Nsight Compute counts it on sm_90 (flashsim.smem.cp_async_wavefronts; as a plain "
                     f"store: {int(base_wf)} wavefronts):",
                     "  " + ("per (destination line, source line): 1 for the sectors moved whole, 1 per distance "
                             "(destination - source) / 16 mod 8 of the other lanes; lanes on one chunk count once"
                             if copy["bypass"] else
                             "store phases; the lanes of a phase's j-th source line from its j-th wavefront; lanes "
                             "on one word or on one source bank not merged")]
    else:
        table = bank_table(phys, width=width, op=kind, active=act)
        lines = _bank_report(table, int(wf), int(ideal))
    if model is not PHASES and not copy:
        base_wf, _ = wavefronts(phys, width=width, op=kind, active=act, model=PHASES)
        if int(base_wf) != int(wf):
            lines[-1] += (f" (the pair-broadcast rule packs this load: plain phases {int(base_wf)} -> {int(wf)} "
                          "wavefronts)")
    print("\n".join(lines))
    if args.svg:
        _write_svg(args.svg, bank_map_svg(table, title=f"{name} {args.width}-bit: bank map", caption=desc,
                                          wavefronts=int(wf), ideal=int(ideal)))
    return 0


# ------------------------------------------------------------------------------------------ parsers


def _add_addr_options(p: argparse.ArgumentParser, elem_default: int) -> None:
    p.add_argument("--addr", required=True, metavar="EXPR",
                   help="Python expression in lane (0..31) and -D constants, giving each lane's offset; "
                        "operators + - * // %% << >> & | ^ ~, 'a if c else b', calls cute_swizzle/seed_swizzle/min/max")
    p.add_argument("-D", "--define", action="append", default=[], metavar="NAME=INT",
                   help="a named constant for EXPR, e.g. -D d=128; repeatable (default: none)")
    p.add_argument("--swizzle", metavar="SPEC",
                   help="apply a swizzle to the EXPR offsets: 'Sw<B,M,S>' / 'cute:B,M,S' (CuTe Swizzle) or "
                        "'swizzle<B,M,S>' / 'seed:B,M,S' (seed 001's helper) (default: none)")
    p.add_argument("--elem-bytes", type=positive_int, default=elem_default,
                   help="bytes per unit of EXPR: byte address = BASE + swizzle(EXPR) * ELEM_BYTES "
                        "(default: %(default)s)")
    p.add_argument("--base", type=lambda s: int(s, 0), default=0,
                   help="byte address added after scaling (default: %(default)s)")
    p.add_argument("--svg", metavar="PATH", help="also write the bank map as an SVG picture (default: none)")


def add_parsers(subparsers) -> None:
    """Register ``fragment``, ``ldmatrix`` and ``banks`` on an argparse subparsers object."""
    fr = subparsers.add_parser("fragment", help="which lane/register/half owns every element of an mma or ldmatrix fragment",
                               description="Print which lane, register and half of a register owns every element of "
                                           "an mma or ldmatrix fragment, and the inverse map.")
    fr.add_argument("instruction", choices=list(INSTRUCTIONS) + ["movmatrix.m8n8", "stmatrix.m8n8"],
                    help="the instruction, e.g. mma.m16n8k16 (one of %(choices)s)")
    fr.add_argument("--operand", default="A", choices=["A", "B", "C", "D"], help="operand (default: %(default)s)")
    fr.add_argument("--dtype", default=None, choices=["f16", "bf16", "f32"],
                    help="element type: f16 or bf16 for A/B (one layout for both), f32 or f16 for C/D "
                         "(default: f32 for C/D, unchecked for A/B)")
    fr.add_argument("--svg", metavar="PATH", help="also write the T#/V# picture as SVG (default: none)")
    fr.set_defaults(func=cmd_fragment)

    ld = subparsers.add_parser("ldmatrix", help="what each lane receives from an ldmatrix address expression, and its banks",
                               description="Evaluate an address expression for the 32 lanes of ldmatrix.sync.m8n8 "
                                           ".b16 and print the row address each lane supplies, what each lane "
                                           "receives, and the shared-memory banks: one phase per 8x8 matrix, its "
                                           "wavefronts, and the bank conflicts (wavefronts beyond the one a phase "
                                           "needs, when rows of a phase hit the same banks at different addresses). "
                                           "EXPR counts units of --elem-bytes bytes (2 by default: f16/bf16 elements).")
    g = ld.add_mutually_exclusive_group()
    g.add_argument("--x1", dest="num", action="store_const", const=1, help=".x1: one 8x8 matrix (lanes 0-7 give rows)")
    g.add_argument("--x2", dest="num", action="store_const", const=2, help=".x2: two matrices (lanes 0-15)")
    g.add_argument("--x4", dest="num", action="store_const", const=4,
                   help=".x4: four matrices (all lanes); the default")
    ld.set_defaults(num=4)
    ld.add_argument("--trans", action="store_true", help=".trans: each lane receives the transpose")
    _add_addr_options(ld, elem_default=2)
    ld.add_argument("--row-stride", type=positive_int, default=None, metavar="N",
                    help="show received elements as (row, col) of a row-major matrix with N elements per row "
                         "(default: as byte addresses)")
    ld.set_defaults(func=cmd_ldmatrix)

    bk = subparsers.add_parser("banks", help="wavefronts and bank conflicts of one ld/st.shared or cp.async warp instruction",
                               description="Evaluate an address expression for the 32 lanes of one ld.shared, "
                                           "st.shared or cp.async instruction and print each lane's banks, the "
                                           "wavefronts the instruction takes and its bank conflicts (wavefronts "
                                           "beyond the ideal). EXPR counts units of --elem-bytes bytes (1 by "
                                           "default: byte addresses).")
    bk.add_argument("--width", type=int, default=32, choices=[8, 16, 32, 64, 128],
                    help="bits per lane (default: %(default)s)")
    bk.add_argument("--op", default="ld", choices=list(_OPS),
                    help="ld, st, cp.async (.ca) or cp.async.cg (default: %(default)s)")
    bk.add_argument("--active", metavar="EXPR", help="EXPR in lane: nonzero = lane active (default: all lanes)")
    bk.add_argument("--src", metavar="EXPR",
                    help="cp.async: EXPR in lane and -D constants giving each lane's global source byte offset "
                         "(its count depends on it; default: 16 * lane)")
    bk.add_argument("--model", default="sm_90", choices=sorted(MODELS),
                    help="counting rule; sm_90 is what Nsight Compute counts on the H100/H200 (default: %(default)s)")
    _add_addr_options(bk, elem_default=1)
    bk.set_defaults(func=cmd_banks)

