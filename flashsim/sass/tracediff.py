"""Diff of two traces of interpreted instructions (:mod:`flashsim.sass.tracing`): ``flashsim trace diff A B``.

:func:`diff_traces` (``flashsim trace diff A B``) aligns two such traces and reports the first event where
they differ (CTA, warp, instruction with PC, line and SASS, register, lane, both values in hex, as an
unsigned integer and as an f32) and the differing events per site.

- Same code on both sides (the kernel's code sha256 equal, e.g. one build before and after a change of
  inputs): events are aligned by (CTA, warp, PC, occurrence) and every register both traced is compared,
  and the shared-memory records one by one.
- Different code (another build, a changed kernel): the two instruction listings are aligned (register
  numbers, reuse hints and branch targets masked); instructions in stretches that align correspond, and
  their events are compared in the registers the instruction reads and writes, operand by operand. Events
  at instructions that do not correspond are matched by source line and occurrence order, which the report
  says: a warp's consecutive events at one line count as one visit, compared in the destination registers
  of its last instruction (``after`` traces; the sources of its first for ``before``). Where two builds
  schedule a line's unrolled instructions in another order, occurrence order pairs other values: a line
  whose instructions wrote, per warp and lane, the same values on both sides is reported as reordered, not
  as a divergence. Shared-memory accesses are compared per warp and line as a whole (the events that only
  carry them are not aligned one by one).
"""

from __future__ import annotations

import difflib
import os
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import numpy as np

from flashsim.errors import TraceError
from flashsim.sass.tracing import KIND, LANES_COLUMN, _NO_WAVEFRONT
from flashsim.trace.container import Event, TraceReader

__all__ = ["SassDiff", "SassDivergence", "diff_traces", "load_trace"]


_BRANCHY = re.compile(r"^(BRA|BRX|BSSY|CALL|JMP|JMX|RET|BREAK|BPT|SSY|PBK|PCNT|CAL|JCAL|WARPSYNC)\b")


_REGNUM = re.compile(r"\b(U?R|U?P|B|SB)\d+\b")


def _norm(text: str) -> str:
    """An instruction's text with what register allocation and code placement change masked: register
    numbers, reuse hints and branch targets (immediates and constant offsets stay)."""
    t = _REGNUM.sub(lambda m: m.group(1) + "?", text.replace(".reuse", ""))
    if _BRANCHY.match(re.sub(r"^@!?U?P\S*\s+", "", t)):
        t = re.sub(r"0x[0-9a-fA-F]+", "0x?", t)
    return t


def _pc_map(pa: dict, pb: dict) -> tuple[dict, bool]:
    """{pc in A: pc in B} for the instructions that correspond, and whether the code is the same."""
    if pa["code_sha256"] == pb["code_sha256"]:
        return {row[0]: row[0] for row in pa["code"]}, True
    ca, cb = pa["code"], pb["code"]
    sm = difflib.SequenceMatcher(None, [_norm(r[1]) for r in ca], [_norm(r[1]) for r in cb], autojunk=False)
    out = {}
    for i, j, n in sm.get_matching_blocks():
        for k in range(n):
            out[ca[i + k][0]] = cb[j + k][0]
    return out, False


@dataclass
class _Side:
    name: str
    meta: dict
    events: list

    @property
    def info(self) -> dict:
        return self.meta["tag_info"]


@dataclass
class SassDivergence:
    """One aligned site where two traces differ; ``kind``: 'registers', 'shared memory', 'missing in A',
    'missing in B'. ``cells``: (lane, register, A bits, B bits) of every differing register cell."""

    cta: int
    warp: int
    site: str
    occurrence: int
    matched: str  # 'pc' (corresponding instructions) or 'line' (by source line and occurrence)
    kind: str
    a: object = None  # the events (None where missing)
    b: object = None
    cells: list = field(default_factory=list)
    smem: tuple | None = None  # first differing shared-memory records (A, B)
    before: list = field(default_factory=list)

    @property
    def seq(self) -> int:
        return (self.a or self.b).seq


@dataclass
class SassDiff:
    a_name: str
    b_name: str
    compared: int
    divergences: list
    notes: list
    per_site: dict
    a_info: dict
    b_info: dict

    @property
    def clean(self) -> bool:
        return not self.divergences

    @property
    def first(self) -> SassDivergence | None:
        return self.divergences[0] if self.divergences else None

    def _where(self, info: dict, ev) -> str:
        t = info[ev.tag]
        loc = f" {os.path.basename(t['file'])}:{t['line']}" if t["file"] else ""
        return f"pc={t['pc']:#06x}{loc} `{t['sass']}`"

    def format(self, cells: int = 8) -> str:
        lines = [f"compared {self.compared} events of {self.a_name} (A) and {self.b_name} (B)"]
        lines += self.notes
        if self.clean:
            lines.append("no divergence: every register and shared-memory access of every event is identical")
            return "\n".join(lines)
        d = self.first
        seqs = ", ".join(f"{n} seq {e.seq}" for n, e in (("A", d.a), ("B", d.b)) if e is not None)
        lines.append(f"first divergence: cta={d.cta} warp={d.warp} at {d.site} #{d.occurrence} ({seqs}): {d.kind}")
        if d.a is not None:
            lines.append(f"  A: {self._where(self.a_info, d.a)}")
        if d.b is not None:
            lines.append(f"  B: {self._where(self.b_info, d.b)}")
        if d.matched == "line":
            lines.append("  (matched by source line and occurrence: the instructions do not correspond)")
        if d.before:
            lines.append("  events before it in this warp (A): " + "; ".join(f"{s}: {t}" for s, t in d.before))
        for lane, reg, a, b in d.cells[:cells]:
            lines.append(f"  lane={lane:2d} {reg:<6} A {_value(a)}  B {_value(b)}")
        if len(d.cells) > cells:
            lines.append(f"  ... {len(d.cells) - cells} more lane/register cells differ in this event")
        if d.smem is not None:
            ra, rb = d.smem
            lines.append(f"  shared memory: A {record_text(ra)}; B {record_text(rb)}")
        lines.append(f"{len(self.divergences)} differing events; per site:")
        for site, s in sorted(self.per_site.items(), key=lambda kv: kv[1]["first"]):
            lines.append(f"  {site:<48} {s['events']:6d} events  {s['cells']:8d} lane-registers")
        return "\n".join(lines)


def _value(x: int) -> str:
    """A register's bits in hex, as an unsigned integer and as an f32."""
    return f"0x{x:08x} (u32 {x}, f32 {str(np.array(x, np.uint32).view(np.float32)[()])})"


def record_text(r) -> str:
    if r is None:
        return "none"
    if isinstance(r, str):
        return r
    st = ("load", "store", "atomic")[int(r["store"])] if int(r["store"]) < 3 else str(int(r["store"]))
    wf = "-" if int(r["wavefront"]) == _NO_WAVEFRONT else str(int(r["wavefront"]))
    return f"lane={int(r['lane'])} {st} of {int(r['nbytes'])} bytes at {int(r['addr']):#x} (wavefront {wf})"


def load_trace(path) -> _Side:
    """A trace of interpreted instructions: its name, meta (the tag table in ``.info``) and events."""
    with TraceReader(path) as r:
        if r.meta.get("kind") != KIND:
            raise TraceError(f"{path}: not a trace of interpreted instructions (its kind is "
                             f"{r.meta.get('kind')!r}; expected {KIND!r})")
        return _Side(str(path), dict(r.meta), list(r.events()))


def diff_traces(a, b, *, context: int = 3) -> SassDiff:
    """Align two traces of interpreted instructions (paths) and compare them (see the module docstring)."""
    A, B = load_trace(a), load_trace(b)
    notes: list[str] = []
    pa, pb = A.meta["programs"], B.meta["programs"]
    # programs paired by kernel name (a single program on each side pairs whatever its name)
    pairs: dict[int, int] = {}
    if len(pa) == 1 and len(pb) == 1:
        pairs[0] = 0
        if pa[0]["kernel"] != pb[0]["kernel"]:
            notes.append(f"kernel {pa[0]['kernel']} (A) is compared with kernel {pb[0]['kernel']} (B)")
    else:
        by_name = {p["kernel"]: i for i, p in enumerate(pb)}
        for i, p in enumerate(pa):
            if p["kernel"] in by_name:
                pairs[i] = by_name[p["kernel"]]
        for name in sorted({p["kernel"] for p in pa} ^ {p["kernel"] for p in pb}):
            notes.append(f"kernel {name} is traced in only one of the two: its events are reported missing")
    maps: dict[int, dict] = {}
    same: dict[int, bool] = {}
    for i, j in pairs.items():
        m, same[i] = _pc_map(pa[i], pb[j])
        maps[i] = m
        if not same[i]:
            sa, sb = pa[i]["cubin_sha256"] or pa[i]["code_sha256"], pb[j]["cubin_sha256"] or pb[j]["code_sha256"]
            traced = [t for t in A.info.values() if t["program"] == i and t["traced"]]
            b_pcs = {t["pc"] for t in B.info.values() if t["program"] == j}
            ok = sum(1 for t in traced if m.get(t["pc"]) in b_pcs)
            notes.append(f"kernel {pa[i]['kernel']}: different code (sha256 {sa[:12]} in A, {sb[:12]} in B); "
                         f"{ok} of {len(traced)} instructions traced in A correspond to instructions traced in B "
                         "(the same instruction up to register numbers, in stretches of code that align; compared "
                         "in the registers they read and write, by position), events at the others are matched by "
                         "source line and occurrence (compared in the destination registers of the line's "
                         f"{'last' if A.meta['spec'].get('when', 'after') == 'after' else 'first'} instruction, "
                         f"{'destination' if A.meta['spec'].get('when', 'after') == 'after' else 'source'} by "
                         "position)")
    inv = {i: {v: k for k, v in m.items()} for i, m in maps.items()}
    a_pcs = {(t["program"], t["pc"]) for t in A.info.values()}
    b_pcs = {(t["program"], t["pc"]) for t in B.info.values()}

    def site_a(t):
        i = t["program"]
        pb_ = maps.get(i, {}).get(t["pc"])
        if pb_ is not None and (pairs[i], pb_) in b_pcs:
            return ("pc", i, t["pc"])
        return ("line", i, os.path.basename(t["file"] or "?"), t["line"])

    inv_pairs = {j: i for i, j in pairs.items()}

    def site_b(t):
        j = t["program"]
        i = inv_pairs.get(j)
        if i is None:
            return ("only-b", j, t["pc"])
        pa_ = inv[i].get(t["pc"])
        if pa_ is not None and (i, pa_) in a_pcs:
            return ("pc", i, pa_)
        return ("line", i, os.path.basename(t["file"] or "?"), t["line"])

    when_after = (A.meta["spec"].get("when", "after") == "after")
    # with different code, events that only carry shared-memory records are not aligned one by one (the two
    # builds may issue a line's accesses in another order, from other instructions): their records are
    # compared per warp and source line as a whole, below
    differs_a = {i for i in pairs if not same[i]} | {i for i in range(len(pa)) if i not in pairs}
    differs_b = {pairs[i] for i in differs_a if i in pairs} | {j for j in range(len(pb)) if j not in inv_pairs}

    def use_a(t):
        return t["traced"] or t["program"] not in differs_a

    def use_b(t):
        return t["traced"] or t["program"] not in differs_b

    ka = _aligned(A, site_a, when_after, use_a)
    kb = _aligned(B, site_b, B.meta["spec"].get("when", "after") == "after", use_b)
    history = defaultdict(list)
    for e in sorted(A.events, key=lambda e: (e.cta, e.warp, e.seq)):
        history[(e.cta, e.warp)].append((e.seq, e.tag))
    divs, per_site = [], {}
    compared = 0
    for key in sorted(set(ka) | set(kb), key=lambda k: ((ka.get(k) or kb.get(k)).seq, k[0], k[1])):
        cta, warp, site, occ = key
        ea, eb = ka.get(key), kb.get(key)
        name = _site_name(site, ea, eb, A.info, B.info)
        matched = "pc" if site[0] == "pc" else "line"
        d = None
        if ea is None or eb is None:
            d = SassDivergence(cta, warp, name, occ, matched, "missing in A" if ea is None else "missing in B", ea, eb)
        else:
            compared += 1
            mode = "all" if same.get(site[1]) else matched
            labels, ia, ib = _columns(A.info[ea.tag], B.info[eb.tag], mode, when_after)
            va, vb = ea.regs[:, ia], eb.regs[:, ib]
            lanes, cols = np.nonzero(va != vb)
            cells = [(int(l), labels[c], int(va[l, c]), int(vb[l, c])) for l, c in zip(lanes, cols)]
            smem = _smem_diff(ea.smem, eb.smem) if same.get(site[1]) else None
            if cells:
                d = SassDivergence(cta, warp, name, occ, matched, "registers", ea, eb, cells, smem)
            elif smem is not None:
                d = SassDivergence(cta, warp, name, occ, matched, "shared memory", ea, eb, [], smem)
        if d is None:
            continue
        ref = ea or eb
        d.before = [x for x in history.get((cta, warp), []) if x[0] < ref.seq][-context:] if ea is not None else []
        divs.append(d)
    if differs_a:
        # different code that schedules a line's (unrolled) instructions in another order pairs other values
        # by occurrence: a warp's line whose instructions wrote the same values per lane, in another order, is
        # a reordering, not a divergence
        va = _line_values(A, lambda i: i, differs_a, when_after)
        vb = _line_values(B, lambda j: inv_pairs.get(j), differs_a, when_after)
        moved: dict = defaultdict(int)
        kept = []
        for d in divs:
            e = d.a if d.a is not None else d.b
            info = A.info if d.a is not None else B.info
            t = info[e.tag]
            prog = t["program"] if d.a is not None else inv_pairs.get(t["program"])
            key = (d.cta, d.warp, prog, os.path.basename(t["file"] or "?"), t["line"])
            if prog in differs_a and d.kind in ("registers", "missing in A", "missing in B") and key in va \
                    and va.get(key) == vb.get(key):
                moved[key[3:]] += 1
                continue
            kept.append(d)
        divs = kept
        if moved:
            notes.append(f"{sum(moved.values())} aligned events at {len(moved)} lines ("
                         + ", ".join(f"{f}:{ln}" for f, ln in sorted(moved)[:6]) + (" ..." if len(moved) > 6 else "")
                         + f") differ only in order: per warp and lane those lines' instructions "
                         f"{'wrote' if when_after else 'read'} the same values in A and B (code scheduled "
                         "differently); they are not counted as divergences")
    divs += _smem_by_line(A, B, pairs, differs_a, history, context)
    divs.sort(key=lambda d: (d.seq, d.cta, d.warp))
    for d in divs:
        s = per_site.setdefault(d.site + (" (by line)" if d.matched == "line" else ""),
                                {"events": 0, "cells": 0, "first": len(per_site)})
        s["events"] += 1
        s["cells"] += len(d.cells)
    return SassDiff(A.name, B.name, compared, divs, notes, per_site, A.info, B.info)


def _line_values(side: _Side, prog_of, differs: set, after: bool) -> dict:
    """Per (CTA, warp, program, file, line): the multiset of (lane, value) the traced instructions of the line
    wrote (``after``: their destinations after them) or read (their sources before them)."""
    out = defaultdict(Counter)
    for e in side.events:
        t = side.info[e.tag]
        i = prog_of(t["program"])
        if i is None or i not in differs or not t["traced"]:
            continue
        names = t["registers"]
        cols = [names.index(n) for n in (t["dst"] if after else t["src"]) if n in names]
        lanes = np.flatnonzero(e.regs[:, -1] & 1)
        c = out[(e.cta, e.warp, i, os.path.basename(t["file"] or "?"), t["line"])]
        if not cols:
            c.update([(-1, 0)])  # an instruction with nothing to compare still counts
            continue
        c.update(zip(np.repeat(lanes, len(cols)).tolist(), e.regs[lanes][:, cols].reshape(-1).tolist()))
    return out


def _smem_by_line(A: _Side, B: _Side, pairs: dict, differs: set, history, context: int) -> list:
    """For programs whose code differs: per (CTA, warp, source line), the multiset of shared-memory accesses
    (lane, address, bytes, load/store) of A against B's; each line that differs is one divergence, at its
    first event."""
    def totals(side: _Side, prog_of):
        out, first = defaultdict(Counter), {}
        for e in side.events:
            t = side.info[e.tag]
            i = prog_of(t["program"])
            if i is None or i not in differs or e.smem is None:
                continue
            key = (e.cta, e.warp, i, os.path.basename(t["file"] or "?"), t["line"])
            out[key].update(zip(e.smem["lane"].tolist(), e.smem["addr"].tolist(), e.smem["nbytes"].tolist(),
                                e.smem["store"].tolist()))
            if key not in first or e.seq < first[key].seq:
                first[key] = e
        return out, first

    inv = {j: i for i, j in pairs.items()}
    ta, fa = totals(A, lambda i: i)
    tb, fb = totals(B, lambda j: inv.get(j))
    out = []
    for key in sorted(set(ta) | set(tb)):
        ca, cb = ta.get(key, Counter()), tb.get(key, Counter())
        if ca == cb:
            continue
        cta, warp, _, f, line = key
        only_a, only_b = sorted((ca - cb).elements()), sorted((cb - ca).elements())

        def rec(x):
            if not x:
                return "none"
            lane, addr, nb, st = x[0]
            return f"lane={lane} {('load', 'store', 'atomic')[st]} of {nb} bytes at {addr:#x}"
        ea, eb = fa.get(key), fb.get(key)
        d = SassDivergence(cta, warp, f"{f}:{line}", 0, "line", "shared memory (the line's accesses)", ea, eb,
                           smem=(f"{len(only_a)} accesses only in A, e.g. {rec(only_a)}",
                                 f"{len(only_b)} only in B, e.g. {rec(only_b)}"))
        ref = ea or eb
        d.before = [x for x in history.get((cta, warp), []) if x[0] < ref.seq][-context:] if ea is not None else []
        out.append(d)
    return out


def _columns(ta: dict, tb: dict, mode: str, after: bool) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(labels, columns of A, columns of B) to compare for two aligned events: 'all' (same code): every
    register both traced; 'pc' (corresponding instructions of different code): the registers the
    instruction reads and writes; 'line': the destinations (after) or sources (before) by position.
    The lanes column is always compared."""
    na, nb = ta["registers"], tb["registers"]
    if mode == "all":
        pairs = [(n, n) for n in na if n in nb]
    elif mode == "pc":  # the same instruction up to register allocation: its operands by position
        pairs = [(x, y) for k in ("dst", "src") for x, y in zip(ta.get(k, []), tb.get(k, [])) if x in na and y in nb]
    else:
        key = "dst" if after else "src"
        da = [n for n in ta.get(key, []) if n in na]
        db = [n for n in tb.get(key, []) if n in nb]
        pairs = list(zip(da, db))
    if LANES_COLUMN in na and LANES_COLUMN in nb and (LANES_COLUMN, LANES_COLUMN) not in pairs:
        pairs.append((LANES_COLUMN, LANES_COLUMN))
    labels = [x if x == y else f"{x}/{y}" for x, y in pairs]
    return (labels, np.array([na.index(x) for x, _ in pairs], np.int64),
            np.array([nb.index(y) for _, y in pairs], np.int64))


def _site_name(site, ea, eb, ia, ib) -> str:
    if site[0] == "line":
        return f"{site[2]}:{site[3]}"
    e, info = (ea, ia) if ea is not None else (eb, ib)
    t = info[e.tag]
    loc = f" {os.path.basename(t['file'])}:{t['line']}" if t["file"] else ""
    return f"pc={t['pc']:#06x}{loc}"


def _aligned(side: _Side, site_of, after: bool, use) -> dict:
    """{(cta, warp, site, occurrence): event}: events at corresponding instructions one by one, those matched
    by line one per visit (a run of consecutive events of the warp at the line); events whose tag ``use``
    refuses are left out."""
    out, occ = {}, defaultdict(int)
    by_warp = defaultdict(list)
    for e in side.events:
        if use(side.info[e.tag]):
            by_warp[(e.cta, e.warp)].append(e)
    for (cta, warp), evs in sorted(by_warp.items()):
        evs.sort(key=lambda e: e.seq)
        prev_site = None
        for e in evs:
            site = site_of(side.info[e.tag])
            if site[0] == "line" and site == prev_site:
                k = (cta, warp, site, occ[(cta, warp, site)] - 1)
                if after:
                    out[k] = _visit(out[k], e)
                else:
                    out[k] = _visit(e, out[k], first=True)
                continue
            k = (cta, warp, site, occ[(cta, warp, site)])
            occ[(cta, warp, site)] += 1
            out[k] = e
            prev_site = site
    return out


def _visit(keep, other, first: bool = False):
    """An event of a line visit standing for it: ``keep``'s registers, every event's shared-memory records."""
    parts = [s for s in ((other.smem, keep.smem) if first else (keep.smem, other.smem)) if s is not None]
    smem = np.concatenate(parts) if parts else None
    if smem is not None:
        smem = smem[np.lexsort((smem["addr"], smem["lane"]))]
    return Event(keep.cta, keep.warp, keep.seq, keep.tag, keep.regs, smem)


def _smem_diff(sa, sb):
    """None when the shared-memory records agree; else the first differing pair (records or 'none')."""
    if sa is None or sb is None:
        return None
    if len(sa) == len(sb) and np.array_equal(sa, sb):
        return None
    n = min(len(sa), len(sb))
    for i in range(n):
        if sa[i] != sb[i]:
            return sa[i], sb[i]
    return (sa[n] if n < len(sa) else f"no record #{n}"), (sb[n] if n < len(sb) else f"no record #{n}")
