"""Probes of the SASS forms other compilers emit: gpu/kernels/probe_forms.cu built by NVRTC 13.0 and by
Triton's ptxas 12.8 (NVRTC's PTX, its ``.version`` lowered to what 12.8 reads), run on the GPU and in the
interpreter from the same cubin bytes, every output bit compared; the same PTX also JIT-compiled by the
driver (its outputs, and cuLink's SASS, against ptxas 13.0's); and what %dynamic_smem_size reads.

The probe table, inputs and comparison are gpu/sass_probes.py's (:class:`Probe`, :func:`make_case`,
:func:`compare`); the references here are the PTX ISA's pseudo-code of each instruction.

``python -m flashsim.gpu.form_probes --out DIR`` records ``form_probes.npz`` / ``.json`` (traces/triton);
tests/test_form_probes.py replays them.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import re
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from flashsim.gpu import sass_probes as sp
from flashsim.gpu.sass_probes import I, O, P, Probe

__all__ = ["BUILDS", "PROBES", "TRACE", "build", "main", "record", "replay", "run_gpu", "run_interp"]

KERNEL_FILE = "probe_forms.cu"
TRACE = Path(__file__).resolve().parent.parent / "traces" / "triton" / "form_probes.npz"
M32 = 0xFFFFFFFF
#: the builds of the probe file: NVRTC 13.0 (the project's compiler), NVRTC's PTX assembled by ptxas 13.0 as
#: flashsim JIT-compiles PTX (the GPU also JIT-compiles that PTX itself, its outputs compared), and Triton's
#: bundled ptxas 12.8
BUILDS = ("nvrtc13", "ptxas130", "ptxas128")


# ------------------------------------------------------------------------------------------------ references
def szext(a, b, clamp: bool, signed: bool) -> np.ndarray:
    """PTX ISA szext.{clamp,wrap}.{s32,u32}: b1 = b & 31; a clamp b >= 32 leaves a; else the low b1 bits
    sign- or zero-extended (b1 = 0 gives 0)."""
    a = np.asarray(a, np.uint64)
    b = np.broadcast_to(np.asarray(b, np.uint64), a.shape)
    b1 = b & np.uint64(31)
    big = (b >= np.uint64(32)) & clamp
    mask = np.where(big, np.uint64(0), (np.uint64(M32) << b1) & np.uint64(M32))
    sbit = ((a >> ((b1 - np.uint64(1)) & np.uint64(31))) & np.uint64(1)) == 1
    sign = signed & (b1 != 0) & ~big & sbit
    return ((a & ~mask & np.uint64(M32)) | np.where(sign, mask, np.uint64(0))).astype(np.uint32)


def bfe(a, pos, length, signed: bool) -> np.ndarray:
    """PTX ISA bfe.{u32,s32}: bits pos .. pos+len-1 of a (pos, len taken mod 256), sign-filled from the
    field's top bit (bit 31 when the field runs past it) for .s32, 0-filled for .u32; len 0 gives 0."""
    a = np.asarray(a, np.uint64)
    pos = np.broadcast_to(np.asarray(pos, np.uint64) & np.uint64(255), a.shape)
    ln = np.broadcast_to(np.asarray(length, np.uint64) & np.uint64(255), a.shape)
    out = np.zeros(a.shape, np.uint64)
    top = np.minimum(pos + ln - np.uint64(1), np.uint64(31)).astype(np.int64)
    sbit = np.where((ln == 0) | ~np.bool_(signed), 0, (a >> top.astype(np.uint64)) & np.uint64(1)).astype(np.uint64)
    for i in range(32):
        src = pos + np.uint64(i)
        inside = (np.uint64(i) < ln) & (src <= np.uint64(31))
        bit = np.where(inside, (a >> np.minimum(src, np.uint64(31))) & np.uint64(1), sbit)
        out |= bit << np.uint64(i)
    return out.astype(np.uint32)


def bmsk(a, b, clamp: bool) -> np.ndarray:
    """PTX ISA bmsk.{clamp,wrap}.b32: b ones from bit a (positions mod 32; with clamp, a >= 32 gives 0 and
    b >= 32 runs to bit 31; a + b >= 32 runs to bit 31; b mod 32 = 0 gives 0)."""
    a = np.asarray(a, np.uint64)
    b = np.broadcast_to(np.asarray(b, np.uint64), a.shape)
    a1, b1 = a & np.uint64(31), b & np.uint64(31)
    total = a1 + b1
    mask0 = (np.uint64(M32) << a1) & np.uint64(M32)
    over = total >= np.uint64(32)
    if clamp:
        mask0 = np.where(a >= np.uint64(32), np.uint64(0), mask0)
        over = over | (a >= np.uint64(32)) | (b >= np.uint64(32))
    mask1 = np.where(over, np.uint64(0), np.where(b1 == 0, np.uint64(M32),
                                                  (np.uint64(M32) << np.minimum(total, np.uint64(31))) & np.uint64(M32)))
    return (mask0 & ~mask1 & np.uint64(M32)).astype(np.uint32)


def _r_szext(c):
    x, k = c.inputs
    return [sp._cols(szext(x, k, True, False), szext(x, k, False, False), szext(x, k, True, True),
                     szext(x, k, False, True), szext(x, 5, True, False), szext(x, 7, False, True),
                     szext(x, 31, True, True), bfe(x, 3, k & 31, False), bfe(x, k & 31, 5, True), bfe(x, 0, k, False))]


def _r_bmsk(c):
    x, k = c.inputs
    x6 = x & np.uint32(63)
    return [sp._cols(bmsk(x6, k, True), bmsk(x6, k, False), bmsk(x, k, True), bmsk(np.full_like(k, 3), k, False))]


def _r_f32_noftz(c):
    x, y, z = c.inputs
    r = sp._fcmp(x, y, False)
    gt = sp._fcmp(x, z, False)["gt"]
    lt = sp._fcmp(z, x, False)["lt"]
    add, sub = sp._vec(sp.f32_add, x, y), sp._vec(sp.f32_add, x, z ^ np.uint32(0x80000000))
    mul, fma = sp._vec(sp.f32_mul, x, y), sp._vec(sp.f32_fma, x, y, z)
    cols = [add, sub, mul, fma, (r["eq"] | gt).astype(np.uint32), (r["eq"] & lt).astype(np.uint32)]
    # a NaN result's payload is the hardware's (the canonical NaN): compared with the GPU, not with C
    defined = np.stack([~np.isnan(np.asarray(col, np.uint32).view(np.float32)) if j < 4 else np.ones(len(x), bool)
                        for j, col in enumerate(cols)], axis=-1).ravel()
    return [(sp._cols(*cols), defined)]


def _r_vote_partial(c):
    p, q = (int(v) for v in c.params)
    pr = c.probe
    out = []
    for blk in range(pr.grid):
        u = (p >> (blk & 31)) & 1
        anyv = (q >> (blk & 31)) & 1
        vote = (q >> (blk & 7)) & 1
        for t in range(pr.block):
            lane = t % 32
            inside = lane < (p & 31) + 1
            ballot = ((1 << ((p & 31) + 1)) - 1) if vote else 0
            out.append((u, anyv, u if inside else 7, (ballot & M32) if inside else 7))
    return [np.array(out, np.uint32).ravel()]


def _r_depbar(c):
    src = c.inputs[0]
    n, blk = c.n, c.probe.block
    out = np.zeros((n, 5), np.uint32)
    for i in range(n):
        b, t = divmod(i, blk)
        base = b * blk * 5
        out[i, 0] = src[base + ((t + 5) & 127)]
        out[i, 1:] = src[base + 128 + 4 * ((t + 3) & 127) + np.arange(4)]
    return [out.ravel(), None]


def _r_i2f_sub(c):
    x = c.inputs[0].astype(np.int64)
    s8 = np.where((x & 0xFF) >= 128, (x & 0xFF) - 256, x & 0xFF)
    s16 = np.where((x & 0xFFFF) >= 32768, (x & 0xFFFF) - 65536, x & 0xFFFF)
    f = lambda v: np.asarray(v, np.float64).astype(np.float32).view(np.uint32)  # noqa: E731 - exact in f32
    return [sp._cols(f(s8), f(x & 0xFF), f(s16), f(x & 0xFFFF))]


PROBES: tuple[Probe, ...] = (
    Probe("probe_szext", ("SGXT", "SGXT.W", "SGXT.U32", "SGXT.W.U32"), (I(), I("u32", "shift"), O(per=10)), _r_szext),
    Probe("probe_bmsk", ("BMSK", "BMSK.W"), (I(), I("u32", "shift"), O(per=4)), _r_bmsk),
    Probe("probe_f32_noftz", ("FADD", "FMUL", "FFMA", "FSETP.GT.OR", "FSETP.LT.AND"),
          (I("u32", "f32"), I("u32", "f32"), I("u32", "f32"), O(per=6)), _r_f32_noftz),
    Probe("probe_vote_partial", ("VOTE.ALL", "VOTE.ANY"), (O(per=4), P(), P()), _r_vote_partial, uniform=True,
          grid=40, block=64),
    Probe("probe_i2f_sub", ("I2F.S8", "I2F.U8", "I2F.S16", "I2F.U16"), (I(), O(per=4)), _r_i2f_sub),
    Probe("probe_depbar_set", ("DEPBAR|^\\{", "UTMACCTL.IV", "LDGSTS.E", "LDGSTS.E.BYPASS.128"),
          (I(per=640, scope="block"), I(scope="fixed", per=32, draw="zeros"), O(per=5)), _r_depbar, block=128,
          n=1024),
)


def probe(name: str) -> Probe:
    for p in PROBES:
        if p.name == name:
            return p
    raise KeyError(f"no probe {name!r} in {KERNEL_FILE}")


# ------------------------------------------------------------------------------------------------ the builds
def triton_ptxas() -> str:
    """Triton's bundled ptxas (12.8 with Triton 3.6.0)."""
    import flashsim.triton as ft

    triton = ft.require()
    path = Path(triton.__file__).resolve().parent / "backends" / "nvidia" / "bin" / "ptxas"
    if not path.is_file():
        raise FileNotFoundError(f"Triton {triton.__version__} ships no ptxas at {path}")
    return str(path)


def _ptx_for_128(ptx: str) -> str:
    """NVRTC 13.0's PTX (ISA 9.0) as ptxas 12.8 reads it (ISA 8.7): the probes use nothing newer."""
    return re.sub(r"^\.version 9\.0$", ".version 8.7", ptx, count=1, flags=re.M)


@functools.lru_cache(maxsize=1)
def ptx_text() -> str:
    """NVRTC 13.0's PTX of the probe file (the compilation nvrtc13's cubin comes from)."""
    from flashsim.kernels.sources import kernel_path
    from flashsim.sass.toolchain import compile_cuda_ptx

    src = '#line 1 "gpu/kernels/probe_forms.cu"\n' + kernel_path(KERNEL_FILE).read_text(encoding="utf-8")
    ptx, _, _ = compile_cuda_ptx(src, name=KERNEL_FILE, options=("-std=c++17",))
    return ptx


@functools.lru_cache(maxsize=None)
def build(which: str):
    """The probe file's cubin of one build as a flashsim.cuda module."""
    import flashsim.cuda as fc
    from flashsim.kernels.sources import interpreted_module, kernel_path
    from flashsim.sass.toolchain import assemble_ptx, compile_cuda_ptx

    if which == "nvrtc13":
        return interpreted_module(KERNEL_FILE)
    if which == "ptxas128":
        return fc.RawModule(cubin=assemble_ptx(_ptx_for_128(ptx_text()), name=KERNEL_FILE, ptxas=triton_ptxas()))
    if which == "ptxas130":
        return fc.RawModule(cubin=bytes(ptx_text(), "utf-8"))  # flashsim.sass.binaries: JIT by ptxas 13.0
    raise KeyError(f"no build {which!r} (builds: {BUILDS})")


def forms(which: str, kernel: str) -> list[tuple[str, tuple[str, ...], str]]:
    """(opcode, modifiers, operands) of every instruction of ``kernel`` in build ``which``."""
    from flashsim.sass.toolchain import disassemble

    doc = disassemble(build(which).cubin)
    fn = next(f for f in doc[1] if f.get("function-name") == kernel)
    out = []
    for rec in fn["sass-instructions"]:
        op, *mods = rec["opcode"].split(".")
        out.append((op, tuple(mods), rec.get("operands", "")))
    return out


def missing_forms(which: str, pr: Probe) -> list[str]:
    names = forms(which, pr.name)
    return [p for p in pr.sass if not any(sp._matches(p, ins) for ins in names)]


def _args(case, dev_in, dev_out):
    return case.args(dev_in, dev_out)


def run_interp(case, which: str, module=None) -> list[np.ndarray]:
    import flashsim.cuda as fc

    pr = case.probe
    f = (module or build(which)).get_function(pr.name)
    d_in = [fc.asarray(np.ascontiguousarray(a)) for a in case.inputs]
    d_out = [fc.asarray(np.ascontiguousarray(a).copy()) for a in case.outs0]
    f((case.grid,), (pr.block,), _args(case, d_in, d_out))
    return [d.get() for d in d_out]


def _driver_ptx_module():
    """NVRTC's PTX loaded as PTX by cupy: the driver JIT-compiles it."""
    import tempfile

    from flashsim.gpu import runtime

    cupy = runtime.require_gpu()
    d = Path(tempfile.mkdtemp(prefix="flashsim-ptx-"))
    (d / "probe_forms.ptx").write_text(ptx_text())
    return cupy.RawModule(path=str(d / "probe_forms.ptx"))


def run_gpu(case, which: str, cubin: bytes | None = None) -> list[np.ndarray]:
    from flashsim.gpu import runtime

    cupy = runtime.require_gpu()
    pr = case.probe
    if which == "driver-jit":
        f = _driver_ptx_module().get_function(pr.name)
    else:
        data = bytes(cubin if cubin is not None else build(which).cubin)
        f = runtime.load_cubin(data).get_function(pr.name)
    d_in = [cupy.asarray(np.ascontiguousarray(a)) for a in case.inputs]
    d_out = [cupy.asarray(np.ascontiguousarray(a).copy()) for a in case.outs0]
    f((case.grid,), (pr.block,), _args(case, d_in, d_out))
    cupy.cuda.Device().synchronize()
    return [cupy.asnumpy(d) for d in d_out]


# ------------------------------------------------------------------------------------------------ cuLink
def culink_text_check() -> dict:
    """The driver's JIT output for the probe PTX (cuLinkCreate / cuLinkAddData / cuLinkComplete) against
    ptxas 13.0's (flashsim's JIT): are their .text sections the same bytes?"""
    import ctypes

    try:
        lib = ctypes.CDLL("libcuda.so.1")
        from flashsim.gpu import runtime

        runtime.require_gpu().zeros(1)  # a current context
        state = ctypes.c_void_p()
        lib.cuLinkCreate_v2.argtypes = [ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
        rc = lib.cuLinkCreate_v2(0, None, None, ctypes.byref(state))
        if rc:
            return {"error": f"cuLinkCreate {rc}"}
        data = ptx_text().encode() + b"\0"
        lib.cuLinkAddData_v2.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t,
                                         ctypes.c_char_p, ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p]
        rc = lib.cuLinkAddData_v2(state, 1, data, len(data), b"probe_forms.ptx", 0, None, None)  # CU_JIT_INPUT_PTX
        if rc:
            return {"error": f"cuLinkAddData {rc}"}
        out, size = ctypes.c_void_p(), ctypes.c_size_t()
        lib.cuLinkComplete.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t)]
        rc = lib.cuLinkComplete(state, ctypes.byref(out), ctypes.byref(size))
        if rc:
            return {"error": f"cuLinkComplete {rc}"}
        cubin = ctypes.string_at(out, size.value)
        lib.cuLinkDestroy(state)
        from flashsim.gpu.triton_suite import text_digests

        drv, ours = text_digests(cubin), text_digests(build("ptxas130").cubin)
        return {"same_text": drv == ours, "differ": sorted(k for k in ours if drv.get(k) != ours[k]),
                "driver_cubin_sha256": hashlib.sha256(cubin).hexdigest()}
    except Exception as exc:  # recorded, not fatal: the outputs comparison is the evidence
        return {"error": f"{type(exc).__name__}: {exc}"}


# ------------------------------------------------------------------------------------------------ smem size
SMEM_SIZES = (0, 4, 100, 4096, 48 * 1024, 100_000)


def smem_sizes(which: str, gpu: bool) -> list[int]:
    """What probe_smem_size reads as %dynamic_smem_size in launches with each of SMEM_SIZES bytes."""
    out = []
    for size in SMEM_SIZES:
        if gpu:
            from flashsim.gpu import runtime

            cupy = runtime.require_gpu()
            f = runtime.load_cubin(bytes(build(which).cubin)).get_function("probe_smem_size")
            f.max_dynamic_shared_size_bytes = max(size, 0)
            d = cupy.zeros(64, cupy.uint32)
            f((1,), (64,), (d,), shared_mem=size)
            cupy.cuda.Device().synchronize()
            got = cupy.asnumpy(d)
        else:
            import flashsim.cuda as fc

            f = build(which).get_function("probe_smem_size")
            f.max_dynamic_shared_size_bytes = max(size, 48 * 1024)
            d = fc.zeros(64, np.uint32)
            f((1,), (64,), (d,), shared_mem=size)
            got = d.get()
        vals = sorted(set(int(v) for v in got))
        out.append(vals[0] if len(vals) == 1 else -1)
    return out


# ------------------------------------------------------------------------------------------------ record
def _key(which: str, pr: Probe, k: int, what: str) -> str:
    return f"{which}/{pr.name}/{k}/{what}"


def record(out_dir: Path, *, cases: int = 4, seed: int = 0) -> dict:
    from flashsim.gpu import runtime
    from flashsim.sass.toolchain import ptxas_version, versions

    out_dir.mkdir(parents=True, exist_ok=True)
    arrays: dict[str, np.ndarray] = {}
    report: dict[str, Any] = {"device": runtime.device_info(), "toolchain": versions(),
                              "ptxas128": ptxas_version(triton_ptxas()), "ptxas130": ptxas_version(),
                              "builds": {}, "culink": culink_text_check()}
    for which in BUILDS:
        mod = build(which)
        arrays[f"{which}/__cubin__"] = np.frombuffer(mod.cubin, np.uint8)
        rep: dict[str, Any] = {"cubin_sha256": mod.sha256, "probes": {}}
        for pr in PROBES:
            prog = mod.get_function(pr.name)._prog()
            before = prog.executed_forms()
            entry: dict[str, Any] = {"forms_missing": missing_forms(which, pr), "cases": 0, "equal": True,
                                     "mismatches": [], "interp_error": None, "reference_mismatches": []}
            for k in range(cases):
                case = sp.make_case(pr, sp._seed(pr, k, seed))
                gpu_out = run_gpu(case, which)
                for j, a in enumerate(case.inputs):
                    arrays[_key(which, pr, k, f"in{j}")] = a
                for j, a in enumerate(case.outs0):
                    arrays[_key(which, pr, k, f"init{j}")] = a
                for j, a in enumerate(gpu_out):
                    arrays[_key(which, pr, k, f"out{j}")] = a
                arrays[_key(which, pr, k, "params")] = np.array([int(p) for p in case.params], np.uint64)
                arrays[_key(which, pr, k, "n")] = np.array(case.n, np.int64)
                entry["cases"] += 1
                if which == "ptxas130":  # the same PTX JIT-compiled by the driver: the same outputs?
                    jit = run_gpu(case, "driver-jit")
                    entry.setdefault("driver_jit_mismatches", [])
                    entry["driver_jit_mismatches"] += sp.compare(case, jit, gpu_out, "the driver's JIT of the PTX")
                entry["reference_mismatches"] += sp.compare(case, gpu_out, sp.reference(case), "the PTX reference")
                try:
                    msgs = sp.compare(case, run_interp(case, which), gpu_out, "the GPU")
                except Exception as exc:
                    entry["interp_error"] = f"{type(exc).__name__}: {exc}"
                    entry["equal"] = False
                    continue
                if msgs:
                    entry["equal"] = False
                    entry["mismatches"] += msgs
            after = prog.executed_forms()
            entry["executed"] = {f: c - before.get(f, 0) for f, c in after.items() if c > before.get(f, 0)}
            rep["probes"][pr.name] = entry
        report["builds"][which] = rep
    report["smem_sizes"] = {w: {"launched": list(SMEM_SIZES), "read": smem_sizes(w, gpu=True)} for w in BUILDS}
    np.savez_compressed(out_dir / "form_probes.npz", **arrays)
    (out_dir / "form_probes.json").write_text(json.dumps(report, indent=1) + "\n")
    return report


def replay(path: Path = TRACE):
    """{build: (cubin, [(case, gpu outputs)])} of a record."""
    data = np.load(path)
    out = {}
    for which in BUILDS:
        if f"{which}/__cubin__" not in data:
            continue
        cubin = bytes(data[f"{which}/__cubin__"])
        items = []
        for pr in PROBES:
            k = 0
            while _key(which, pr, k, "n") in data:
                case = sp.Case(pr, [data[_key(which, pr, k, f"in{j}")] for j in range(len(pr.ins))],
                               [data[_key(which, pr, k, f"init{j}")] for j in range(len(pr.outs))],
                               [sp._param(a, int(v)) for a, v in zip(pr.params, data[_key(which, pr, k, "params")])],
                               int(data[_key(which, pr, k, "n")]))
                items.append((case, [data[_key(which, pr, k, f"out{j}")] for j in range(len(pr.outs))]))
                k += 1
        out[which] = (cubin, items)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flashsim.gpu.form_probes", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--cases", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    rep = record(a.out, cases=a.cases, seed=a.seed)
    bad = 0
    for which, r in rep["builds"].items():
        for name, e in r["probes"].items():
            ok = e["equal"] and not e["forms_missing"]
            bad += not ok
            print(f"{which:9s} {name:18s} {'ok' if ok else 'DIFFERS'} missing={e['forms_missing']} "
                  f"err={e['interp_error']} ref={len(e['reference_mismatches'])}")
            for m in e["mismatches"][:2] + e["reference_mismatches"][:2]:
                print("    " + m[:300])
    for w, e in rep["smem_sizes"].items():
        print(f"smem_size {w}: launched {e['launched']} read {e['read']}")
    print(f"cuLink (the driver's JIT) against ptxas 13.0: {rep['culink']}")
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
