"""The first-divergence locator on the GPU: instrumented builds log the same register writes on the H100
and in the interpreter, and a planted interpreter bug is found at its line.

    python -m flashsim.gpu.locate_check --out DIR [--cpu] [--no-fa2]

1. For each kernel of CASES (row_sums of tests/data/run_example.cu, the fixed row_sums of
   docs/examples/row_sums_fixed.cu, half_mix and mma_tile of gpu/kernels/locate_probes.cu: f16/f16x2
   math, ldmatrix and mma.sync) and fa2_hdim64_f16 of gpu/kernels/fa2.cu (unless ``--no-fa2``), the
   instrumented build (flashsim.sass.ptxlog, linked by nvJitLink) runs on the GPU and in the interpreter
   for each chosen thread; the logs must agree entry for entry (values that are addresses compared as
   offsets into their arrays or windows), and so must the outputs.
2. The interpreter's FFMA is made to flip the low bit of its result in one lane (:func:`planted`);
   :func:`flashsim.locate.locate` of ``poly`` (GPU against that interpreter) must name the FFMA of the line
   marked LOCATE:horner, in that lane, with values one bit apart.
3. The same planted bug through ``flashsim.testing.assert_matches_gpu`` as ``pytest --gpu`` runs it: the
   KernelMismatch must carry the located divergence.

Writes ``DIR/locate_check.json`` and ``DIR/locate_check.md``; exit status 0 when every check passes, 1
when one fails, 2 without a usable GPU (cupy missing, no device).
``--cpu``: the GPU's place is taken by a second (unplanted) interpreter (the CPU tests use it; it shows
that the check itself works, not that the GPU agrees); that one lays the array arguments out back to back
as the GPU's allocator does (:class:`PackedRunner`), so the two sides place the arrays differently.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

import flashsim.cuda as fc
import flashsim.locate as loc
from flashsim import testing
from flashsim.cuda.memory import device_memory
from flashsim.errors import GpuUnavailable, location
from flashsim.gpu import runtime
from flashsim.gpu.runtime import KERNELS_DIR
from flashsim.kernels.spec import get
from flashsim.sass import opcodes  # noqa: F401  (registers every semantic)
from flashsim.sass.program import SEMANTICS
from flashsim.sass.toolchain import nvjitlink_version, nvrtc_version

__all__ = ["CASES", "Case", "FA2", "PACK_ALIGN", "PLANT_LANE", "POLY", "PackedRunner", "PlantedRunner", "check_logs",
           "check_planted", "check_testing", "main", "planted", "run_checks"]

REPO = Path(__file__).resolve().parents[1]
#: the lane whose FFMA results the planted bug changes
PLANT_LANE = 7


@dataclass(frozen=True)
class Case:
    """One kernel launch for the log comparison: the source file (repository-relative, or in gpu/kernels),
    the kernel, the launch, the arguments (from a seed) and the threads to log as (ctaid, tid)."""

    label: str
    path: str
    kernel: str
    grid: tuple
    block: tuple
    make_args: Callable[[np.random.Generator], list]
    threads: tuple
    outputs_deterministic: bool = True  # False: a racy kernel, whose outputs may differ run to run
    shared_mem: int = 0
    module: Callable[[], object] | None = None  # builds the module itself (gpu/kernels sources with headers)

    def build(self):
        """The flashsim.cuda.RawModule of the case (compiled here, so its source is known)."""
        if self.module is not None:
            return self.module()
        src, name = self.source()
        return fc.RawModule(code=src, name=name)

    def source(self) -> tuple[str, str]:
        for base in (REPO, Path.cwd(), KERNELS_DIR.parent.parent):
            p = base / self.path
            if p.is_file():
                return p.read_text(encoding="utf-8"), p.name
        p = KERNELS_DIR / Path(self.path).name
        if p.is_file():
            return p.read_text(encoding="utf-8"), p.name
        raise FileNotFoundError(f"{self.path} (run from the repository root)")


def _row_sums_args(rng):
    return [rng.standard_normal(2 * 1024).astype(np.float32), np.zeros(64, np.float32), np.float32(0.5)]


def _half_args(rng, n=100):
    x = (rng.standard_normal(n) * 2).astype(np.float16)
    x2 = (rng.standard_normal(2 * n) * 2).astype(np.float16)
    return [np.zeros(n, np.float16), np.zeros(2 * n, np.float16), x, x2, np.zeros(n, np.int32), np.int32(n)]


def _mma_args(rng):
    return [np.zeros(128, np.float32), rng.standard_normal(256).astype(np.float16),
            rng.standard_normal(128).astype(np.float16), np.float32(0.75), np.float32(0.125)]


#: fa2's source file and build options, as the kernel registry gives them
_FA2_SPEC = get("fa2")


def _fa2_module():
    return runtime.interpreted_module(_FA2_SPEC.source, options=_FA2_SPEC.build_options())


def _fa2_args(rng):
    """fa2_hdim64_f16 on batch 1, seqlen 128, 1 head (the launch gpu/fa_kernels.py makes, host arrays)."""
    from flashsim.gpu import fa_kernels

    q, k, v = (rng.standard_normal((1, 128, 1, 64)).astype(np.float16) for _ in range(3))
    p = fa_kernels.prepare("fa2", q, k, v, backend="interp")
    return [np.asarray(a.get()) if hasattr(a, "get") else a for a in p.params]


def _poly_args(rng, n=100):
    return [np.zeros(n, np.float32), rng.standard_normal(n).astype(np.float32),
            np.array([0.5, -1.25, 0.75, 2.0], np.float32), np.int32(n)]


CASES = (
    # run_example.cu races (warp 1 reads sums[] without a barrier): only warp 0's threads are compared
    Case("run_example row_sums", "tests/data/run_example.cu", "row_sums", (2,), (64,), _row_sums_args,
         (((1, 0, 0), (5, 0, 0)),), outputs_deterministic=False),
    Case("row_sums_fixed", "docs/examples/row_sums_fixed.cu", "row_sums", (2,), (64,), _row_sums_args,
         (((0, 0, 0), (3, 0, 0)), ((1, 0, 0), (37, 0, 0)))),
    Case("half_mix", "gpu/kernels/locate_probes.cu", "half_mix", (2,), (64,), _half_args,
         (((0, 0, 0), (3, 0, 0)), ((1, 0, 0), (30, 0, 0)))),
    Case("mma_tile", "gpu/kernels/locate_probes.cu", "mma_tile", (1,), (32,), _mma_args,
         (((0, 0, 0), (0, 0, 0)), ((0, 0, 0), (13, 0, 0)))),
)
#: a whole FlashAttention-2 kernel (fast math, cp.async, ldmatrix, mma, shuffles): slower, so the device
#: check runs it and the CPU tests leave it out
FA2 = Case("fa2_hdim64_f16", f"gpu/kernels/{_FA2_SPEC.source}", "fa2_hdim64_f16", (1, 1, 1), (128,), _fa2_args,
           (((0, 0, 0), (37, 0, 0)), ((0, 0, 0), (126, 0, 0))), shared_mem=32768, module=_fa2_module)
POLY = Case("poly", "gpu/kernels/locate_probes.cu", "poly", (2,), (64,), _poly_args, ())


@contextlib.contextmanager
def planted(opcode: str = "FFMA", lane: int = PLANT_LANE, xor: int = 1, nth: int | None = None):
    """Inside the block, the interpreter's ``opcode`` XORs ``xor`` into the value it writes in ``lane`` of
    every warp (programs compiled inside the block: a new RawModule's); with ``nth``, only at the nth
    execution of each such instruction (1-based, counting executions of the warp batch)."""
    factory, family = SEMANTICS[opcode]

    def wrong(ctx):
        dst = ctx.dst

        def dst_wrong(i):
            write = dst(i)
            count = [0]

            def w(m, v, ex):
                count[0] += 1
                if nth is None or count[0] == nth:
                    v = np.array(np.broadcast_to(v, m.R.shape[1:]), np.uint32, copy=True)
                    v[..., lane] ^= np.uint32(xor)
                write(m, v, ex)
            return w
        ctx.dst = dst_wrong
        return factory(ctx)

    SEMANTICS[opcode] = (wrong, family)
    try:
        yield
    finally:
        SEMANTICS[opcode] = (factory, family)


class PlantedRunner:
    """A runner that runs another one inside :func:`planted` (``module``: the inner runner's last module)."""

    def __init__(self, inner, **plant):
        self.inner, self.plant = inner, plant

    def __call__(self, cubin, args):
        with planted(**self.plant):
            return self.inner(cubin, args)

    @property
    def module(self):
        return getattr(self.inner, "module", None)


#: the boundary consecutive allocations of cupy's memory pool start on
PACK_ALIGN = 512


class PackedRunner:
    """A runner that places the array arguments back to back in one device allocation of the interpreter,
    each on a :data:`PACK_ALIGN` boundary (as consecutive allocations of cupy's memory pool lie on the
    GPU), and runs another interpreter runner on them. A pointer that runs past the end of one array then
    points into the next one, as on the GPU, where the interpreter's own allocator leaves unmapped space
    between arrays. ``module``: the inner runner's last module."""

    def __init__(self, inner, align: int = PACK_ALIGN):
        self.inner, self.align = inner, int(align)
        self.addresses: list[int | None] = []  # the last run's argument addresses (None: not an array)

    def __call__(self, cubin, args):
        host = [np.ascontiguousarray(a) if _is_array(a) else a for a in args]
        offsets, end = [], 0
        for a in host:
            offsets.append(end if _is_array(a) else None)
            if _is_array(a):
                end += -(-max(a.nbytes, 1) // self.align) * self.align
        base = device_memory().alloc(max(end, 1), name="packed arguments")
        dev = []
        for a, off in zip(host, offsets):
            if off is None:
                dev.append(a)
                continue
            d = fc.ndarray(a.shape, a.dtype, _addr=base + off)
            d.set(a)
            dev.append(d)
        self.addresses = [None if off is None else base + off for off in offsets]
        out = self.inner(cubin, dev)  # the inner runner passes device arrays through as they are
        return [d.get() if _is_array(a) else o for a, d, o in zip(host, dev, out)]

    @property
    def module(self):
        return getattr(self.inner, "module", None)


def _is_array(a) -> bool:
    return isinstance(a, np.ndarray) and a.dtype.names is None


def _runners(cpu: bool, kernel, grid, block, plant: bool = False, shared_mem: int = 0):
    first = (PackedRunner(loc.interpreter_runner(kernel, grid, block, shared_mem)) if cpu
             else loc.gpu_runner(kernel, grid, block, shared_mem))
    second = loc.interpreter_runner(kernel, grid, block, shared_mem)
    if plant:
        second = PlantedRunner(second)
    names = ("interpreter (as the GPU)" if cpu else "GPU", "interpreter" + (" (planted)" if plant else ""))
    return (first, second), names


def check_logs(case: Case, *, cpu: bool = False, seed: int = 0, capacity: int = 1 << 16) -> dict:
    """Part 1 for one case: per thread, entries logged, entries that differ, outputs equal."""
    mod = case.build()
    build = mod.build
    args = case.make_args(np.random.default_rng(seed))
    rows = []
    for ctaid, tid in case.threads:
        runners, names = _runners(cpu, case.kernel, case.grid, case.block, shared_mem=case.shared_mem)
        thread = loc.Thread(tuple(ctaid), tuple(tid), tuple(case.grid) + (1,) * (3 - len(case.grid)),
                            tuple(case.block) + (1,) * (3 - len(case.block)))
        d = loc.locate_first_divergence(build, case.kernel, case.grid, case.block, args, thread=thread,
                                        runners=runners, names=names, capacity=capacity,
                                        shared_mem=case.shared_mem)
        la, lb = d.logs
        ok = (d.index is None and d.differing == 0 and not (la.overflowed or lb.overflowed) and len(la) > 0
              and not (d.outputs_differ and case.outputs_deterministic))
        rows.append({"thread": str(thread), "entries": [len(la), len(lb)], "produced": [la.produced, lb.produced],
                     "differing": d.differing, "outputs_differ": bool(d.outputs_differ), "ok": bool(ok),
                     "first": None if d.index is None else d.summary(),
                     "raw_bit_differences": int(np.count_nonzero(la.values[:min(len(la), len(lb))]
                                                                 != lb.values[:min(len(la), len(lb))])),
                     "sites": len(d.sites)})
    return {"case": case.label, "kernel": case.kernel, "source": case.path, "threads": rows,
            "ok": all(r["ok"] for r in rows)}


def _horner_line() -> int:
    src, _ = POLY.source()
    return next(i + 1 for i, s in enumerate(src.splitlines()) if "LOCATE:horner" in s)


def check_planted(*, cpu: bool = False, seed: int = 0) -> dict:
    """Part 2: the locator (GPU against the planted interpreter) names the planted FFMA."""
    src, name = POLY.source()
    mod = fc.RawModule(code=src, name=name)
    args = POLY.make_args(np.random.default_rng(seed))
    runners, names = _runners(cpu, POLY.kernel, POLY.grid, POLY.block, plant=True)
    d = loc.locate(mod, POLY.kernel, POLY.grid, POLY.block, args, runners=runners, names=names)
    line = _horner_line()
    if d is None:
        return {"ok": False, "why": "the outputs agree: the planted bug changed nothing", "line": line}
    s = d.site
    va, vb = d.values
    checks = {
        "site is an fma": bool(s is not None and s.text.startswith("fma.")),
        f"site line is {line}": bool(s is not None and s.line == line),
        f"thread is {location(lane=PLANT_LANE)}": d.thread.lane == PLANT_LANE,
        "values one bit apart": va is not None and vb is not None and (va ^ vb) == 1,
        "occurrence is 1": d.occurrence == 1,
    }
    return {"ok": all(checks.values()), "checks": checks, "summary": d.summary(), "line": line,
            "divergence": d.to_dict()}


def check_testing(*, cpu: bool = False, seed: int = 0) -> dict:
    """Part 3: assert_matches_gpu under --gpu reports the located divergence of the planted bug."""
    src, name = POLY.source()
    mod = fc.RawModule(code=src, name=name)
    args = POLY.make_args(np.random.default_rng(seed))
    s = testing._SESSION
    saved = (s.gpu, s.update_golden, s.golden_dir)
    patches = contextlib.ExitStack()
    if cpu:  # the GPU's place: an unplanted, packed interpreter, for the plain and the instrumented run alike
        sound = SEMANTICS["FFMA"]

        def unplanted(runner):
            def run(cubin, a):
                planted_entry = SEMANTICS["FFMA"]
                SEMANTICS["FFMA"] = sound
                try:
                    return runner(cubin, list(a))
                finally:
                    SEMANTICS["FFMA"] = planted_entry
            return run

        def fake_gpu(cubin, kernel, grid, block, a, shared_mem):
            return unplanted(PackedRunner(loc.interpreter_runner(kernel, grid, block, shared_mem)))(cubin, a)

        def fake_gpu_runner(kernel, grid, block, shared_mem=0):
            return unplanted(PackedRunner(loc.interpreter_runner(kernel, grid, block, shared_mem)))
        saved_fns = (testing._run_gpu, loc.gpu_runner)
        testing._run_gpu, loc.gpu_runner = fake_gpu, fake_gpu_runner
        patches.callback(lambda: (setattr(testing, "_run_gpu", saved_fns[0]), setattr(loc, "gpu_runner", saved_fns[1])))
    testing.configure(gpu=True, update_golden=False)
    patches.callback(lambda: testing.configure(gpu=saved[0], update_golden=saved[1], golden_dir=saved[2]))
    message, divergence = None, None
    with patches, planted():
        try:
            testing.assert_matches_gpu(mod, POLY.kernel, POLY.grid, POLY.block, args)
        except testing.KernelMismatch as exc:
            message, divergence = str(exc), exc.divergence
    line = _horner_line()
    ok = (message is not None and divergence is not None and divergence.site is not None
          and divergence.site.line == line and f":{line}" in message and "first divergence" in message)
    return {"ok": bool(ok), "message": message, "line": line}


def run_checks(*, cpu: bool = False, fa2: bool = True) -> dict:
    report = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "mode": "cpu (interpreter as the GPU)" if cpu else "gpu",
              "nvrtc": nvrtc_version(), "nvjitlink": nvjitlink_version(), "cases": []}
    if not cpu:
        report["device"] = runtime.device_info()
    for case in CASES + ((FA2,) if fa2 else ()):
        try:
            report["cases"].append(check_logs(case, cpu=cpu))
        except Exception as exc:  # one case's failure is reported, the others still run
            report["cases"].append({"case": case.label, "ok": False, "error": f"{type(exc).__name__}: {exc}"})
    for key, fn in (("planted", check_planted), ("testing", check_testing)):
        try:
            report[key] = fn(cpu=cpu)
        except Exception as exc:
            report[key] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    report["ok"] = all(c["ok"] for c in report["cases"]) and report["planted"]["ok"] and report["testing"]["ok"]
    return report


def _markdown(rep: dict) -> str:
    lines = ["# First-divergence locator: instrumented builds on both sides", "",
             f"- date: {rep['date']}; mode: {rep['mode']}; NVRTC {rep['nvrtc']}, nvJitLink {rep['nvjitlink']}"]
    if "device" in rep:
        d = rep["device"]
        lines.append(f"- device: {d.get('name')} ({d.get('arch')}), driver {d.get('driver_release')}, "
                     f"CUDA runtime {d.get('cuda_runtime_version')}, cupy {d.get('cupy_version')}")
    lines += ["", "## Register-write logs, GPU against interpreter", "",
              "| case | thread | entries | differing | outputs differ | ok |", "| --- | --- | --- | --- | --- | --- |"]
    for c in rep["cases"]:
        if "error" in c:
            lines.append(f"| {c['case']} | - | - | - | - | error: {c['error']} |")
            continue
        for t in c["threads"]:
            lines.append(f"| {c['case']} | {t['thread']} | {t['entries'][0]} / {t['entries'][1]} | {t['differing']} | "
                         f"{t['outputs_differ']} | {'yes' if t['ok'] else 'NO'} |")
            if t["first"]:
                lines.extend(f"    {x}" for x in t["first"])
    p = rep["planted"]
    lines += ["", f"## Planted interpreter bug (FFMA, low bit, {location(lane=PLANT_LANE)})", "",
              f"- ok: {p['ok']}"]
    if "error" in p:
        lines.append(f"- error: {p['error']}")
    for k, v in p.get("checks", {}).items():
        lines.append(f"- {k}: {v}")
    lines += [f"    {x}" for x in p.get("summary", [])]
    t = rep["testing"]
    lines += ["", "## assert_matches_gpu with the planted bug", "", f"- ok: {t['ok']}"]
    if "error" in t:
        lines.append(f"- error: {t['error']}")
    if t.get("message"):
        lines += ["", "```", t["message"], "```"]
    lines += ["", f"overall: {'PASS' if rep['ok'] else 'FAIL'}", ""]
    return "\n".join(lines)


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.bool_,)):
        return bool(x)
    return x


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="output folder")
    ap.add_argument("--cpu", action="store_true", help="a second interpreter in the GPU's place (no GPU)")
    ap.add_argument("--no-fa2", action="store_true", help="leave out the FlashAttention-2 kernel (the slow case)")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        rep = run_checks(cpu=args.cpu, fa2=not args.no_fa2)
    except GpuUnavailable as exc:
        print(f"locate_check: no GPU: {exc} (--cpu runs the check with a second interpreter)", file=sys.stderr)
        return 2
    (args.out / "locate_check.json").write_text(json.dumps(_jsonable(rep), indent=1))
    (args.out / "locate_check.md").write_text(_markdown(rep))
    for c in rep["cases"]:
        print(f"{c['case']:<24} {'ok' if c['ok'] else 'FAIL'}"
              + (f"  {c['error']}" if "error" in c else
                 "  " + ", ".join(f"{t['entries'][0]} entries, {t['differing']} differ" for t in c["threads"])))
    print(f"planted FFMA bug located: {rep['planted']['ok']}; in assert_matches_gpu: {rep['testing']['ok']}")
    print(f"locate_check: {'PASS' if rep['ok'] else 'FAIL'} ({args.out / 'locate_check.md'})")
    return 0 if rep["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
