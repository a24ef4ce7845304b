"""The order in which a diverged warp runs its paths, on the GPU and in the interpreter (gpu/kernels/probe_paths.cu,
flashsim.divergence).

    python -m flashsim.gpu.path_probes --out DIR [--no-interp]

Builds probe_paths.cu in both of the fuzzer's builds, launches every case of flashsim.divergence.CASES on the GPU
three times (a log that changes from launch to launch is recorded as such), and writes DIR/path_probes.json.xz: the
provenance, each build's cubin (base64, with its sha256) and per case the GPU's ``out`` per build. Unless
``--no-interp``, the interpreter runs every case on the same cubins and DIR/path_probes.md lists the cases whose
logs differ (with both logs, lane by lane). Exit status 0 when every case agrees, 1 otherwise.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import hashlib
import sys
from pathlib import Path

import numpy as np

from flashsim import divergence as dv
from flashsim import fuzz as fz

REPEATS = 3


def run_gpu(cubin: bytes, cases) -> list[list[int] | None]:
    """Each case on the GPU, REPEATS times: its out, or None where the launches disagree."""
    from flashsim.gpu import runtime

    cp = runtime.require_gpu()
    mod = runtime.load_cubin(cubin)
    res = []
    for case in cases:
        f = mod.get_function(case.kernel)
        runs = []
        for _ in range(REPEATS):
            d = cp.zeros((dv.OUT_WORDS,), np.uint32)
            f((1,), (32,), (d, np.uint32(case.a), np.uint32(case.b)))
            runs.append(cp.asnumpy(d))
        res.append([int(x) for x in runs[0]] if all(np.array_equal(r, runs[0]) for r in runs) else None)
    cp.cuda.Device().synchronize()
    return res


def _log_text(out) -> str:
    return "; ".join(f"{lane}:{','.join(map(str, marks))}" for lane, marks in enumerate(dv.decode_log(out)))


def main(argv=None) -> int:
    from flashsim.gpu import runtime

    ap = argparse.ArgumentParser(prog="python -m flashsim.gpu.path_probes", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder for path_probes.json.xz and path_probes.md")
    ap.add_argument("--no-interp", action="store_true", help="record the GPU's logs only")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rec = {"provenance": {**runtime.device_info(), "date": datetime.date.today().isoformat(),
                          "command": "python -m flashsim.gpu.path_probes " + " ".join(argv or sys.argv[1:]),
                          "source": "gpu/kernels/" + dv.FILE,
                          "source_sha256": hashlib.sha256(dv.source().encode()).hexdigest(),
                          "repeats": REPEATS},
           "builds": {}, "cases": [{"kernel": c.kernel, "a": c.a, "b": c.b, "gpu": {}} for c in dv.CASES]}
    for which in fz.BUILDS:
        cubin = dv.build(which)
        rec["builds"][which] = {"sha256": hashlib.sha256(cubin).hexdigest(),
                                "cubin": base64.b64encode(cubin).decode()}
        for c, g in zip(rec["cases"], run_gpu(cubin, dv.CASES)):
            c["gpu"][which] = g
    dv.write_record(rec, out)
    unstable = sum(g is None for c in rec["cases"] for g in c["gpu"].values())
    print(f"{len(dv.CASES)} cases x {len(fz.BUILDS)} builds on the GPU, {unstable} whose launches disagree")
    if args.no_interp:
        return 0
    rows = dv.compare(dv.load_record(out))
    bad = [r for r in rows if not r["equal"]]
    lines = [f"# Path-order probes: {len(rows) - len(bad)} of {len(rows)} launches give the GPU's log", ""]
    for r in bad:
        lines.append(f"- {r['build']} {r['case']}: " + (r.get("error") or ""))
        if "gpu" in r:
            lines += [f"  - GPU: {_log_text(r['gpu'])}", f"  - interpreter: {_log_text(r['interp'])}"]
    (out / "path_probes.md").write_text("\n".join(lines) + "\n")
    print(lines[0])
    return 0 if not bad else 1


if __name__ == "__main__":
    raise SystemExit(main())
