"""``flashsim trace html``: one self-contained static page to browse a trace.

The page shows one row per recorded warp: its events in order as boxes coloured by tag (divergent events,
when a second trace is given, outlined in red, with the first divergence marked). Clicking an event shows
its lane x register table, numbers or hex, decoded in the browser from the embedded bits; divergent
cells are highlighted. No server and no external files: the data is embedded as JSON.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

from flashsim.trace import spec

_COLORS = ["#9e9e9e", "#bcaaa4", "#90caf9", "#80deea", "#a5d6a7", "#c5e1a5", "#ffcc80", "#ffe082", "#f48fb1",
           "#ce93d8", "#b39ddb", "#e6ee9c", "#ffab91", "#80cbc4", "#fff59d"]

_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>flashsim trace: __TITLE__</title>
<style>
body{font:13px system-ui,sans-serif;margin:16px;color:#222}
h1{font-size:18px} .meta{white-space:pre-wrap;font:12px monospace;background:#f6f6f6;padding:8px}
.row{display:flex;align-items:center;margin:2px 0} .lab{width:120px;font:12px monospace}
.ev{width:14px;height:18px;margin-right:1px;cursor:pointer;border:2px solid transparent;box-sizing:border-box}
.ev.div{border-color:#d00} .ev.first{border-color:#d00;outline:2px solid #000}
.ev.sel{outline:2px solid #06c}
table{border-collapse:collapse;font:11px monospace;margin-top:8px} td,th{border:1px solid #ddd;padding:1px 4px;text-align:right}
td.bad{background:#fbb} .legend span{display:inline-block;padding:1px 6px;margin:2px;font:11px monospace}
</style></head><body>
<h1>flashsim trace: __TITLE__</h1>
<div class="meta">__META__</div>
<div class="legend">__LEGEND__</div>
<p>__SUMMARY__</p>
<div id="rows"></div>
<p><label><input type="checkbox" id="hex"> hex</label></p>
<div id="detail">click an event to see its registers</div>
<script>
const D = __DATA__;
const rows = document.getElementById('rows');
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
D.warps.forEach((w,wi)=>{const row=document.createElement('div');row.className='row';
  row.innerHTML='<span class="lab">CTA '+w.cta+' warp '+w.warp+'</span>';
  w.events.forEach((ev,i)=>{const b=document.createElement('span');b.className='ev'+(ev.d?' div':'')+(ev.f?' first':'');
    b.id='e'+wi+'_'+i;b.style.background=D.colors[ev.t];b.title='seq '+ev.s+' '+ev.t+' #'+ev.o+(ev.d?' (differs)':'');
    b.onclick=()=>show(wi,i);row.appendChild(b);});
  rows.appendChild(row);});
document.getElementById('hex').onchange=()=>{if(sel){const [w,i]=sel.id.slice(1).split('_').map(Number);show(w,i);}};
</script></body></html>
"""


def write_html(path, out, *, against=None) -> Path:
    """Write the page for trace ``path`` (diffed against trace ``against`` if given) to ``out`` atomically."""
    from flashsim.trace import session
    from flashsim.trace.diff import diff

    run = session.load(path)
    meta = run.meta
    k, hd, dt = meta["kernel"], meta["instance_headdim"], meta["params"]["dtype"]
    marks, first = {}, None
    summary = "single trace (pass --against to highlight divergences)"
    if against is not None:
        other = session.load(against)
        d = diff(run.events, other.events, kernel=k, headdim=hd, dtype=dt, a_name=str(path), b_name=str(against))
        for x in d.divergences:
            marks[(x.cta, x.warp, x.seq)] = x.table[[0, 1, 3]].T.tolist() or [[-1, -1, 0]]
        if d.first is not None:
            first = (d.first.cta, d.first.warp, d.first.seq)
        summary = html.escape(d.format(k, hd, dt).replace("\n", " | "))
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
    legend = "".join(f'<span style="background:{c}">{t}</span>' for t, c in zip(spec.TAGS, _COLORS))
    page = (_PAGE.replace("__TITLE__", html.escape(f"{Path(path).name}"))
            .replace("__META__", html.escape(json.dumps(meta, indent=1, default=str)))
            .replace("__LEGEND__", legend).replace("__SUMMARY__", summary)
            .replace("__DATA__", json.dumps(data, separators=(",", ":"))))
    from flashsim.outputs import write_text

    out = write_text(out, page, option="-o")
    return out
