"""``flashsim trace html``: one self-contained static page to browse a trace.

The page shows, when a second trace is given, a summary of the diff at the top (the first divergence, the
divergences per tag, the full report folded away); the run's metadata folded in a ``<details>``; then one
row per recorded warp: its events in order as boxes coloured by tag and labelled with a short name (the
legend spells them out; the tooltip gives the tag, occurrence and sequence number), divergent events
outlined in red, the first divergence also in black. Clicking an event shows its lane x register table,
numbers or hex, decoded in the browser from the embedded bits; divergent cells are highlighted. No server
and no external files: the data is embedded as JSON.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

from flashsim.outputs import write_text
from flashsim.trace import spec
from flashsim.trace.diff import diff
from flashsim.trace.runs import load

_COLORS = ["#9e9e9e", "#bcaaa4", "#90caf9", "#80deea", "#a5d6a7", "#c5e1a5", "#ffcc80", "#ffe082", "#f48fb1",
           "#ce93d8", "#b39ddb", "#e6ee9c", "#ffab91", "#80cbc4", "#fff59d"]

#: the label drawn inside an event's box (the full tag is its tooltip and in the legend)
SHORT = {"empty": "\u00b7", "init_ml": "in", "load_q": "Q", "load_k": "K", "load_v": "V", "load_kv": "KV",
         "mma_qk": "QK", "store_s": "S", "mask": "mk", "softmax": "sm", "mma_pv": "PV", "store_o": "sO",
         "update_o": "uO", "next_ml": "ml", "normalize": "nz"}


def short(tag: str) -> str:
    """The box label of ``tag``."""
    return SHORT.get(tag, tag[:2])


_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>flashsim trace: __TITLE__</title>
<style>
body{font:13px system-ui,sans-serif;margin:16px;color:#222}
h1{font-size:18px} details.meta pre{white-space:pre-wrap;font:12px monospace;background:#f6f6f6;padding:8px}
details summary{cursor:pointer}
.summary{border:1px solid #ccc;border-left:6px solid #2a2;padding:6px 10px;margin:8px 0}
.summary.bad{border-left-color:#d00} .summary .head{font-weight:bold} .summary .warn{color:#a40}
.summary pre{font:12px monospace;white-space:pre-wrap}
.row{display:flex;align-items:flex-start;margin:2px 0} .lab{flex:0 0 120px;font:12px monospace}
.evs{display:flex;flex-wrap:wrap}
.ev{min-width:22px;height:18px;margin:0 1px 1px 0;padding:0 2px;cursor:pointer;border:2px solid transparent;
 box-sizing:border-box;font:9px/14px monospace;text-align:center}
.ev.div{border-color:#d00} .ev.first{border-color:#d00;outline:2px solid #000}
.ev.sel{outline:2px solid #06c}
table{border-collapse:collapse;font:11px monospace;margin-top:8px} td,th{border:1px solid #ddd;padding:1px 4px;text-align:right}
td.bad{background:#fbb} .legend span{display:inline-block;padding:1px 6px;margin:2px;font:11px monospace}
</style></head><body>
<h1>flashsim trace: __TITLE__</h1>
__SUMMARY__
<details class="meta"><summary>__METASUM__</summary><pre>__META__</pre></details>
<div class="legend">__LEGEND__</div>
<div id="rows">
__ROWS__
</div>
<p><label><input type="checkbox" id="hex"> hex</label></p>
<div id="detail">click an event to see its registers</div>
<script>
const D = __DATA__;
function f32(b){const v=new DataView(new ArrayBuffer(4));v.setUint32(0,b>>>0);return v.getFloat32(0);}
function f16(h){const s=(h>>15)&1,e=(h>>10)&31,m=h&1023;let v;
  if(e===0)v=m*Math.pow(2,-24);else if(e===31)v=m?NaN:Infinity;else v=(1+m/1024)*Math.pow(2,e-15);return s?-v:v;}
function bf16(h){return f32((h<<16)>>>0);}
function num(b,fmt){const g=x=>Number.isFinite(x)?x.toPrecision(7):String(x);
  if(fmt==='f32')return g(f32(b)); const lo=b&0xffff,hi=(b>>>16)&0xffff;
  if(fmt==='f16')return g(f16(lo)); const h=fmt.startsWith('bf16')?bf16:f16; return g(h(lo))+', '+g(h(hi));}
let sel=null;
function show(w,i){
  const ev=D.warps[w].events[i]; const names=D.regs[ev.t]; const hex=document.getElementById('hex').checked;
  if(sel)sel.classList.remove('sel'); sel=document.getElementById('e'+w+'_'+i); sel.classList.add('sel');
  let h='<b>CTA '+D.warps[w].cta+' warp '+D.warps[w].warp+' seq '+ev.s+' '+ev.t+' #'+ev.o+'</b>';
  if(!names.length){document.getElementById('detail').innerHTML=h+': no registers';return;}
  const bad=new Set((ev.d||[]).map(c=>c[0]*4096+c[1]));
  h+='<table><tr><th>lane</th>'+names.map(n=>'<th>'+n+'</th>').join('')+'</tr>';
  for(let l=0;l<32;l++){h+='<tr><th>'+l+'</th>';
    for(let r=0;r<names.length;r++){const b=ev.r[l*names.length+r];const k=l*4096+r;
      let txt=hex?'0x'+(b>>>0).toString(16).padStart(8,'0'):num(b,D.fmts[ev.t][r]);
      if(bad.has(k)){const o=(ev.d.find(c=>c[0]===l&&c[1]===r))[2];
        txt+=' / '+(hex?'0x'+(o>>>0).toString(16).padStart(8,'0'):num(o,D.fmts[ev.t][r]));}
      h+='<td'+(bad.has(k)?' class="bad"':'')+'>'+txt+'</td>';}
    h+='</tr>';}
  document.getElementById('detail').innerHTML=h+'</table>'+(bad.size?'<p>red: this trace / the other</p>':'');
}
document.getElementById('rows').addEventListener('click',e=>{const b=e.target.closest('.ev');
  if(b)show(Number(b.dataset.w),Number(b.dataset.i));});
document.getElementById('hex').onchange=()=>{if(sel){const [w,i]=sel.id.slice(1).split('_').map(Number);show(w,i);}};
</script></body></html>
"""


def _meta_summary(meta: dict) -> str:
    """One line naming the run: kernel, problem, backend (the full metadata is folded below it)."""
    p = meta.get("params", {})
    bits = [f"kernel {meta.get('kernel')}", f"headdim {meta.get('instance_headdim')}", f"{p.get('dtype', '?')}",
            f"backend {meta.get('backend')}", f"CTAs {meta.get('ctas')}", f"warps {meta.get('warps') or 'all'}"]
    return "metadata: " + ", ".join(str(b) for b in bits) + " (click to show all)"


def _diff_summary(d, meta, other_meta, path, against, k, hd, dt) -> str:
    """The block at the top of a page made against another trace: a headline, the per-tag table, warnings
    (different inputs or kernels), and the full diff report folded away."""
    esc = html.escape
    warn = []
    for key in ("kernel", "instance_headdim"):
        if meta.get(key) != other_meta.get(key):
            warn.append(f"the traces differ in {key} ({meta.get(key)} vs {other_meta.get(key)}): "
                        "the comparison is not meaningful")
    ha, hb = meta.get("inputs_sha256"), other_meta.get("inputs_sha256")
    if ha and hb and ha != hb:
        warn.append(f"the two runs had different inputs (sha256 {ha[:16]} vs {hb[:16]}): differences are expected, "
                    "not a divergence of one computation")
    kinds = [x.kind for x in d.divergences]
    only_b, only_a = kinds.count("missing in A"), kinds.count("missing in B")
    differ = len(kinds) - only_a - only_b
    names = f"A = {Path(path).name} (this page), B = {Path(against).name}"
    if d.clean:
        head = [f"no divergence: {d.compared} events compared, every register bit-identical", names]
    else:
        f = d.first
        counts = f"{differ} of the {d.compared} events in both traces differ"
        for c, w in ((only_a, "A"), (only_b, "B")):
            counts += f"; {c} event{'s' if c != 1 else ''} only in {w}" if c else ""
        head = [counts, f"first divergence: cta={f.cta} warp={f.warp} {f.tag} #{f.occurrence} (seq {f.seq}): {f.kind}"
                f"{f' ({f.n_cells} lane-registers)' if f.kind == 'registers' else ''}", names]
    out = [f'<div class="summary{"" if d.clean else " bad"}" id="summary">', f'<div class="head">{esc(head[0])}</div>']
    out += [f"<div>{esc(line)}</div>" for line in head[1:]]
    out += [f'<div class="warn">{esc(w)}</div>' for w in warn]
    if not d.clean:
        out.append("<table><tr><th>tag</th><th>events</th><th>lane-registers</th><th>max ulp</th></tr>")
        for tag, s in sorted(d.per_tag.items(), key=lambda kv: spec.TAG_ID.get(kv[0], 99)):
            cells = "".join(f"<td>{s[key]}</td>" for key in ("events", "cells", "max_ulp"))
            out.append(f"<tr><th>{esc(tag)}</th>{cells}</tr>")
        out.append("</table><p>divergent events are outlined in red below; the first also in black</p>")
    out.append(f"<details><summary>full diff report</summary><pre>{esc(d.format(k, hd, dt))}</pre></details></div>")
    return "\n".join(out)


def _rows(warps: list[dict], colors: dict) -> str:
    """The event boxes, one row per warp: coloured by tag, labelled with its short name, the full name and
    position in the tooltip."""
    out = []
    for wi, w in enumerate(warps):
        boxes = []
        for i, ev in enumerate(w["events"]):
            cls = "ev" + (" div" if "d" in ev else "") + (" first" if "f" in ev else "")
            tip = f"seq {ev['s']}: {ev['t']} #{ev['o']}" + (" (differs)" if "d" in ev else "")
            boxes.append(f'<span class="{cls}" id="e{wi}_{i}" data-w="{wi}" data-i="{i}" '
                         f'style="background:{colors.get(ev["t"], "#eee")}" title="{html.escape(tip)}">'
                         f'{html.escape(short(ev["t"]))}</span>')
        out.append(f'<div class="row"><span class="lab">cta={w["cta"]} warp={w["warp"]}</span>'
                   f'<div class="evs">{"".join(boxes)}</div></div>')
    return "\n".join(out)


def write_html(path, out, *, against=None) -> Path:
    """Write the page for trace ``path`` (diffed against trace ``against`` if given) to ``out`` atomically."""
    run = load(path)
    meta = run.meta
    k, hd, dt = meta["kernel"], meta["instance_headdim"], meta["params"]["dtype"]
    marks, first = {}, None
    summary = "<p>single trace (pass --against to highlight divergences)</p>"
    if against is not None:
        other = load(against)
        d = diff(run.events, other.events, kernel=k, headdim=hd, dtype=dt, a_name=str(path), b_name=str(against))
        for x in d.divergences:
            marks[(x.cta, x.warp, x.seq)] = x.table[[0, 1, 3]].T.tolist() or [[-1, -1, 0]]
        if d.first is not None:
            first = (d.first.cta, d.first.warp, d.first.seq)
        summary = _diff_summary(d, meta, other.meta, path, against, k, hd, dt)
    warps, occ = [], {}
    by = {}
    for e in sorted(run.events, key=lambda e: (e.cta, e.warp, e.seq)):
        by.setdefault((e.cta, e.warp), []).append(e)
    for (cta, warp), evs in sorted(by.items()):
        items = []
        for e in evs:
            o = occ.get((cta, warp, e.tag), 0)
            occ[(cta, warp, e.tag)] = o + 1
            item = {"s": e.seq, "t": e.tag, "o": o, "r": e.regs.reshape(-1).tolist()}
            if (cta, warp, e.seq) in marks:
                item["d"] = marks[(cta, warp, e.seq)]
            if first == (cta, warp, e.seq):
                item["f"] = 1
            items.append(item)
        warps.append({"cta": cta, "warp": warp, "events": items})
    regs = {t: spec.registers(k, t, hd) for t in spec.TAGS}
    data = {"warps": warps, "regs": regs,
            "fmts": {t: [spec.register_format(k, t, n, dt) for n in regs[t]] for t in spec.TAGS},
            "colors": dict(zip(spec.TAGS, _COLORS))}
    legend = "".join(f'<span style="background:{c}"><b>{html.escape(short(t))}</b> {t}</span>'
                     for t, c in zip(spec.TAGS, _COLORS))
    page = (_PAGE.replace("__TITLE__", html.escape(f"{Path(path).name}"))
            .replace("__METASUM__", html.escape(_meta_summary(meta)))
            .replace("__META__", html.escape(json.dumps(meta, indent=1, default=str)))
            .replace("__LEGEND__", legend).replace("__SUMMARY__", summary)
            .replace("__ROWS__", _rows(warps, data["colors"]))
            .replace("__DATA__", json.dumps(data, separators=(",", ":"))))
    out = write_text(out, page, option="-o")
    return out
