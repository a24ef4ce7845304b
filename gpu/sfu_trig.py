"""MUFU.SIN and MUFU.COS on every input: the structure the unit shows, read off the GPU.

    python -m flashsim.gpu.sfu_trig --out DIR

No PTX reaches every MUFU.SIN / MUFU.COS input (sin.approx.f32 is FMUL.RZ by 1/2pi, then the MUFU), so the
probe kernels (gpu/kernels/probe_sfu_trig.cu) are built with NVRTC and their FMUL's immediate is rewritten to
1.0 (:func:`raw_cubin`): the unit then sees the swept bit pattern itself (a NaN input reaches it as the FMUL's
canonical NaN).

The survey (hardware against hardware, every binade of both signs, 2^23 inputs each) counts, per binade:
how many low significand bits can be cleared (or rounded away) without changing any output, whether sin is
odd and cos even, whether only the fraction of |x| >= 1 matters (x - trunc(x), x - floor(x)), and whether
doubling a small input doubles sin's output; it also keeps outputs for fitting: the fixed-point grid
k * 2^-23 on [0, 1), samples of every binade from 2^-40 up, and whole binades [0.125, 0.5), each as the
difference in bits from the correctly rounded value of sin(2 pi x) / cos(2 pi x). Writes DIR/trig_survey.json
and DIR/trig_dumps_{grid,binades,whole_sin,whole_cos}.tar (members: NAME.in.u32.xz inputs, NAME.res.i16.xz residuals, NAME.exc.xz the
exceptions as (index, output) uint32 pairs where the residual does not fit).
"""

from __future__ import annotations

import argparse
import io
import json
import lzma
import tarfile
import time
from pathlib import Path

import numpy as np

FMUL_INV_2PI = bytes.fromhex("83f9223e")  # 0x3E22F983 = 0.15915494f, little-endian, as the FMUL.RZ immediate
ONE = bytes.fromhex("0000803f")  # 1.0f
RAW_KERNELS = ("raw_sweep_sin", "raw_sweep_cos", "raw_array_sin", "raw_array_cos")


def raw_cubin() -> bytes:
    """probe_sfu_trig.cu built with NVRTC, each kernel's FMUL.RZ by 1/2pi turned into FMUL.RZ by 1.0."""
    from flashsim.gpu.runtime import kernel_path
    from flashsim.sass.toolchain import compile_cuda

    path = kernel_path("probe_sfu_trig.cu")
    cubin, _, _ = compile_cuda(path.read_text(), name=path.name, options=(f"--include-path={path.parent}",),
                               key_options=("--include-path=gpu/kernels",))
    n = cubin.count(FMUL_INV_2PI)
    if n != len(RAW_KERNELS):
        raise RuntimeError(f"expected one FMUL.RZ by 1/2pi per kernel of {path.name} ({len(RAW_KERNELS)}), found "
                           f"the immediate {n} times: the compiler's code for sin.approx changed")
    return cubin.replace(FMUL_INV_2PI, ONE)


class Unit:
    """The raw MUFU.SIN / MUFU.COS on the GPU."""

    def __init__(self):
        import cupy as cp

        from flashsim.gpu.runtime import load_cubin

        self.cp = cp
        mod = load_cubin(raw_cubin())
        self.k = {n: mod.get_function(n) for n in RAW_KERNELS}

    def sweep(self, fn: str, start: int, n: int):
        cp = self.cp
        out = cp.empty(n, cp.uint32)
        self.k[f"raw_sweep_{fn}"](((n + 255) // 256,), (256,), (np.uint32(start), out, np.uint64(n)))
        return out

    def array(self, fn: str, x):
        cp = self.cp
        x = cp.ascontiguousarray(x, dtype=cp.uint32)
        out = cp.empty(x.size, cp.uint32)
        self.k[f"raw_array_{fn}"](((x.size + 255) // 256,), (256,), (x, out, np.uint64(x.size)))
        return out


def reference_bits(cp, fn: str, x):
    """RN_f32(sin(2 pi x)) / RN_f32(cos(2 pi x)) of f32 bit patterns x, through float64 (the residual's base)."""
    v = x.view(cp.float32).astype(cp.float64) * (2 * np.pi)
    r = cp.sin(v) if fn == "sin" else cp.cos(v)
    return r.astype(cp.float32).view(cp.uint32)


def residuals(cp, got, ref):
    """(int16 residual in bits, exceptions as (index, output) pairs where it does not fit)."""
    d = got.astype(cp.int64) - ref.astype(cp.int64)
    bad = cp.abs(d) > 32000
    idx = cp.flatnonzero(bad)
    exc = cp.stack([idx.astype(cp.uint32), got[idx]], axis=1) if idx.size else cp.zeros((0, 2), cp.uint32)
    d = cp.where(bad, 32767, d).astype(cp.int16)
    return cp.asnumpy(d), cp.asnumpy(exc)


def binade_stats(u: Unit, fn: str, sign: int, biased: int) -> dict:
    cp = u.cp
    base = (sign << 31) | (biased << 23)
    n = 1 << 23
    y = u.sweep(fn, base, n)
    x = cp.arange(n, dtype=cp.uint32) + cp.uint32(base)
    st: dict = {"e": biased - 127, "sign": sign}
    yu = cp.unique(y)
    st["distinct"] = int(yu.size)
    st["zeros"] = int(((y & 0x7FFFFFFF) == 0).sum())
    st["nans"] = int(((y & 0x7FFFFFFF) > 0x7F800000).sum())
    st["first"], st["last"] = f"{int(y[0]):#010x}", f"{int(y[-1]):#010x}"
    if biased == 255:
        return st
    trunc, rnd = [], []
    for p in range(1, 24):
        m = cp.uint32((1 << p) - 1)
        trunc.append(int((u.array(fn, x & ~m) != y).sum()))
        r = (x + cp.uint32(1 << (p - 1))) & ~m
        rnd.append(int((u.array(fn, r) != y).sum()))
    st["trunc_mismatch"], st["round_mismatch"] = trunc, rnd
    st["trunc_bits_free"] = next((p for p in range(23, 0, -1) if trunc[p - 1] == 0), 0)
    neg = u.array(fn, x ^ cp.uint32(0x80000000))
    isnan = (y & 0x7FFFFFFF) > 0x7F800000
    want = y if fn == "cos" else cp.where(isnan, y, y ^ cp.uint32(0x80000000))
    st["symmetry_mismatch"] = int((neg != want).sum())
    xf = x.view(cp.float32)
    if biased >= 127:
        fr = (xf - cp.trunc(xf)).view(cp.uint32)
        st["frac_trunc_mismatch"] = int((u.array(fn, fr) != y).sum())
        fl = (xf - cp.floor(xf)).view(cp.uint32)
        st["frac_floor_mismatch"] = int((u.array(fn, fl) != y).sum())
    if 1 <= biased <= 125:
        y2 = u.array(fn, x + cp.uint32(1 << 23))
        ye = (y >> 23) & 0xFF
        ok = (ye >= 1) & (ye <= 253)
        st["double_checked"] = int(ok.sum())
        st["double_mismatch"] = int(((y2 != y + cp.uint32(1 << 23)) & ok).sum())
        # outputs as multiples of the input: x * k for the ratio at the binade's start
    ref = reference_bits(cp, fn, x)
    d = y.astype(cp.int64) - ref.astype(cp.int64)
    fin = ~isnan
    st["res_min"], st["res_max"] = int(d[fin].min()), int(d[fin].max())
    return st


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    blob = lzma.compress(data, preset=6)
    info = tarfile.TarInfo(name)
    info.size = len(blob)
    tar.addfile(info, io.BytesIO(blob))


def dump(u: Unit, tar: tarfile.TarFile, name: str, fn: str, x) -> None:
    cp = u.cp
    got = u.array(fn, x)
    res, exc = residuals(cp, got, reference_bits(cp, fn, x))
    _add(tar, f"{name}.in.u32.xz", cp.asnumpy(x).astype("<u4").tobytes())
    _add(tar, f"{name}.res.i16.xz", res.astype("<i2").tobytes())
    _add(tar, f"{name}.exc.xz", exc.astype("<u4").tobytes())


def survey(out: Path, log=print, unit: Unit | None = None, biased=range(256), sampled=range(-40, 0),
           whole=(-2, -3), grid_bits: int = 23) -> dict:
    """The survey above (``unit``, ``biased``, ``sampled``, ``whole`` and ``grid_bits`` narrow it for tests)."""
    u = unit or Unit()
    cp = u.cp
    t0 = time.time()
    rep: dict = {"binades": {}}
    for fn in ("sin", "cos"):
        rows = []
        for sign in (0, 1):
            for b in biased:
                rows.append(binade_stats(u, fn, sign, b))
        rep["binades"][fn] = rows
        log(f"{fn}: binades surveyed, {time.time() - t0:.0f} s")
    specials = np.array([0, 0x80000000, 1, 0x807FFFFF, 0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001,
                         0x3F800000, 0x3F000000, 0x3E800000, 0x3F400000, 0x4B000000, 0x4B7FFFFF, 0x5F000000], np.uint32)
    rep["specials"] = {fn: {f"{int(s):#010x}": f"{int(v):#010x}" for s, v in zip(specials, cp.asnumpy(u.array(fn, cp.asarray(specials))))}
                       for fn in ("sin", "cos")}
    grid = (cp.arange(1 << grid_bits, dtype=cp.float32) * cp.float32(2.0 ** -grid_bits)).view(cp.uint32)
    with tarfile.open(out / "trig_dumps_grid.tar", "w") as tar:
        for fn in ("sin", "cos"):
            dump(u, tar, f"grid{grid_bits}_{fn}", fn, grid)
    m = cp.concatenate([cp.arange(4096, dtype=cp.uint32), cp.arange(4096, 1 << 23, 64, dtype=cp.uint32)])
    with tarfile.open(out / "trig_dumps_binades.tar", "w") as tar:
        for fn in ("sin", "cos"):
            for e in sampled:
                dump(u, tar, f"b{e}_{fn}", fn, m | cp.uint32((e + 127) << 23))
    for fn in ("sin", "cos"):
        with tarfile.open(out / f"trig_dumps_whole_{fn}.tar", "w") as tar:
            for e in whole:
                dump(u, tar, f"full{e}_{fn}", fn, cp.arange(1 << 23, dtype=cp.uint32) | cp.uint32((e + 127) << 23))
    rep["seconds"] = round(time.time() - t0, 1)
    (out / "trig_survey.json").write_text(json.dumps(rep, indent=1) + "\n")
    return rep


HALF = 1 << 24  # MUFU.SIN's table: the unit's sin(2 pi k / 2^25) for k < 2^24, sin(k + 2^24) = -sin(k)
PTX_FORMS = ("sin_approx_f32", "sin_approx_ftz_f32", "cos_approx_f32", "cos_approx_ftz_f32")


def predicted(cp, table, x):
    """The law read off the survey, on the GPU: k = trunc(frac(|x|) * 2^25), sin = sign(x) * g(k) with g the
    half-period table and g(k + 2^24) = -g(k); cos = g(k + 2^23 mod 2^25); Inf and NaN give 0x7FFFFFFF."""
    a = (x & cp.uint32(0x7FFFFFFF)).view(cp.float32)
    k = ((a - cp.trunc(a)) * cp.float32(2.0 ** 25)).astype(cp.uint32)

    def g(j):
        j = j & cp.uint32((1 << 25) - 1)
        return table[j & cp.uint32(HALF - 1)] ^ ((j >> 24) << 31).astype(cp.uint32)
    special = (x & cp.uint32(0x7F800000)) == cp.uint32(0x7F800000)
    s = g(k) ^ (x & cp.uint32(0x80000000))
    c = g(k + cp.uint32(1 << 23))
    nan = cp.uint32(0x7FFFFFFF)
    return cp.where(special, nan, s), cp.where(special, nan, c)


def record_table(out: Path, log=print, seed: int = 20261203) -> dict:
    """The half-period table read off the GPU, the law checked against the unit on all 2^32 inputs of MUFU.SIN
    and MUFU.COS, and a golden sample (raw MUFU and the four PTX forms). Writes DIR/trig_table.npz,
    DIR/trig_golden.npz and DIR/trig_table.json."""
    import hashlib

    from flashsim.gpu.validate_sfu import array_op
    from flashsim.numerics import sfu

    u = Unit()
    cp = u.cp
    t0 = time.time()
    # k * 2^-25 is a float for every k < 2^25, but float32 k is exact only up to 2^24: build it in float64
    kx = (cp.arange(1 << 25, dtype=cp.float64) * 2.0 ** -25).astype(cp.float32).view(cp.uint32)
    full = u.array("sin", kx)
    table = full[:HALF].copy()
    # the second half turn at the inputs a float reaches there (even k): the negated first half
    even = cp.arange(0, HALF, 2)
    rep: dict = {"anti_mismatch": int((full[HALF:][even] != (table[even] ^ cp.uint32(0x80000000))).sum()),
                 "table_sha256": hashlib.sha256(cp.asnumpy(table).astype("<u4").tobytes()).hexdigest()}
    log(f"table: g(k + 2^24) == -g(k) fails at {rep['anti_mismatch']} of the 2^23 even k < 2^24")
    chunk = 1 << 27
    for fn in ("sin", "cos"):
        bad, examples = 0, []
        for start in range(0, 1 << 32, chunk):
            hw = u.sweep(fn, start, chunk)
            x = cp.arange(chunk, dtype=cp.uint32) + cp.uint32(start)
            ps, pc = predicted(cp, table, x)
            miss = cp.flatnonzero(hw != (ps if fn == "sin" else pc))
            bad += int(miss.size)
            for i in cp.asnumpy(miss[:5]):
                if len(examples) < 40:
                    examples.append([f"{int(x[i]):#010x}", f"{int(hw[i]):#010x}",
                                     f"{int((ps if fn == 'sin' else pc)[i]):#010x}"])
        rep[f"law_mismatch_{fn}"], rep[f"law_examples_{fn}"] = bad, examples
        log(f"MUFU.{fn.upper()}: law against the unit on all 2^32 inputs: {bad} mismatches {examples[:3]}")
    np.savez_compressed(out / "trig_table.npz", **sfu.table_arrays({"sin_half": cp.asnumpy(table)}))
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 1 << 32, 1 << 18, dtype=np.uint64).astype(np.uint32)
    x[:4096] = (rng.integers(0, 1 << 25, 4096).astype(np.float64) * 2.0 ** -25).astype(np.float32).view(np.uint32)
    lo = rng.integers(0x30000000, 0x4B800000, 1 << 16, dtype=np.uint64).astype(np.uint32)  # |x| in [2^-31, 2^24)
    x[4096:4096 + lo.size] = lo | (rng.integers(0, 2, lo.size, dtype=np.uint32) << np.uint32(31))
    spec = np.array([0, 0x80000000, 1, 0x80000001, 0x007FFFFF, 0x00800000, 0x7F800000, 0xFF800000, 0x7FC00000,
                     0xFFC00001, 0x7F800001, 0x3E800000, 0x3F000000, 0x3F400000, 0x3F800000, 0x4B000000,
                     0x4AFFFFFF, 0x4B7FFFFF, 0x33000000, 0x33FFFFFF, 0x34000000], np.uint32)
    x[-spec.size:] = spec
    gold = {"x": x, "mufu_sin": cp.asnumpy(u.array("sin", cp.asarray(x))),
            "mufu_cos": cp.asnumpy(u.array("cos", cp.asarray(x)))}
    for name in PTX_FORMS:
        gold[name] = array_op(name, x)
    np.savez_compressed(out / "trig_golden.npz", **gold)
    rep["seconds"] = round(time.time() - t0, 1)
    (out / "trig_table.json").write_text(json.dumps(rep, indent=1) + "\n")
    return rep


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flashsim.gpu.sfu_trig", description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--table", action="store_true", help="record the table and check the law on all 2^32 inputs")
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    if a.table:
        rep = record_table(a.out)
        print(f"table done in {rep['seconds']} s")
        return 0 if rep["anti_mismatch"] == 0 and rep["law_mismatch_sin"] == 0 and rep["law_mismatch_cos"] == 0 else 1
    rep = survey(a.out)
    print(f"survey done in {rep['seconds']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
