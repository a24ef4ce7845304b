"""wgmma.mma_async on the GPU against flashsim's model: the arithmetic, the fragments, the descriptors.

    python -m flashsim.gpu.validate_wgmma --out DIR [--cases 4] [--seed 20261124] [--forms NAME,...] [--ns 8,64]

Builds gpu/kernels/probe_wgmma.cu for sm_90a (nvcc; else cupy's NVRTC) and runs, for every form of
``FORMS`` (A from shared memory or from registers; f16/bf16 -> f32, f16 -> f16, e4m3/e5m2 -> f32, e4m3 ->
f16, e4m3 x e5m2 -> f32) and every N of ``NS``, seeded input sets (random, exponent spreads,
cancellation, subnormals, specials, zeros, directed truncation tests that count the fraction bits kept,
an index-coded set that shows where a misplaced element went), ``--cases`` cases (CTAs) each, in these
configurations (``plan``):

  base     one instruction, scale-d 1, tiles without swizzle and with the 128B swizzle, every input set;
  layouts  two chained instructions in the other shared-memory arrangements (MN-adjacent core matrices,
           32B and 64B swizzles);
  chains   2 and 4 instructions along K accumulating in the same registers;
  scale_d  scale-d 0 with C full of NaNs (the device must ignore C), one and two instructions;
  mma_sets (f16/bf16 forms, N = 8) the mma.sync validation sets of gpu/cases.py, one m16n8k16 tile repeated
           over each case: the edge cases settled for mma.sync, asked again of wgmma.

On the CPU every case is computed under the default hypothesis and, on the runs with N <= ALT_MAX_N, under
every other hypothesis of ``hypotheses(form)`` (f16/bf16: the mma.sync sm_90 rule and its variants;
e4m3/e5m2: 13 fraction bits (the default), the f16/bf16 rule's 25, 13 bits with C added exactly, exact,
and variants; chains also in reversed order), and the mismatching D elements are counted per form,
hypothesis, input set and configuration. Writes DIR/wgmma_report.json, DIR/wgmma_report.md and
DIR/wgmma_samples.npz (inputs and GPU outputs of the first case of every run with N <= 16 and of
mismatching cases, with provenance, replayable without a GPU by ``replay_samples``). Exit status 1 when
the default hypothesis of some form mismatches (the report says which hypothesis fits instead).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from flashsim.errors import bad_argument
from flashsim.numerics import wgmma as W
from flashsim.numerics.formats import BF16, E4M3, E5M2, F16, F32, FloatFormat
from flashsim.warp.matrix_desc import ARRANGEMENTS

PROBE_FILE = "probe_wgmma.cu"
NS = (8, 16, 64, 128, 256)
MAX_STEPS = 4  # WG_MAX_STEPS of probe_wgmma.cu
#: the competing hypotheses are scored on the runs with N <= this (the arithmetic of an element does not
#: depend on N); the default hypothesis on every run
ALT_MAX_N = 64
_FMT = {"f16": F16, "bf16": BF16, "e4m3": E4M3, "e5m2": E5M2, "f32": F32}


@dataclass(frozen=True)
class Form:
    """One wgmma form the probe offers: where A comes from and the types (PTX: .dtype.atype.btype)."""

    a_src: str  # "ss": A from shared memory (descriptor), "rs": A from registers
    atype: str
    btype: str
    ctype: str

    def __post_init__(self):
        if self.a_src not in ("ss", "rs"):
            raise bad_argument("a_src", self.a_src, "expected 'ss' (A in shared memory) or 'rs' (A in registers)")
        W.check_types(8, self.atype, self.btype, self.ctype)

    @property
    def k(self) -> int:
        return W.K_OF[self.atype]

    @property
    def esize(self) -> int:
        return 32 // self.k

    @property
    def name(self) -> str:
        return f"{self.a_src}.{self.ctype}.{self.atype}.{self.btype}"

    def ptx(self, n: int | str = "N") -> str:
        return (f"wgmma.mma_async.sync.aligned.m64n{n}k{self.k}.{self.ctype}.{self.atype}.{self.btype} "
                f"(A from {'shared memory' if self.a_src == 'ss' else 'registers'})")

    def kernel(self, n: int) -> str:
        return f"wgmma_{self.a_src}_m64n{n}k{self.k}_{self.ctype}_{self.atype}_{self.btype}"


#: every form of probe_wgmma.cu (its kernels are Form.kernel(n) for n in NS)
FORMS = (
    Form("ss", "f16", "f16", "f32"), Form("ss", "bf16", "bf16", "f32"), Form("ss", "f16", "f16", "f16"),
    Form("ss", "e4m3", "e4m3", "f32"), Form("ss", "e5m2", "e5m2", "f32"), Form("ss", "e4m3", "e4m3", "f16"),
    Form("ss", "e4m3", "e5m2", "f32"), Form("ss", "e5m2", "e5m2", "f16"), Form("ss", "e4m3", "e5m2", "f16"),
    Form("ss", "e5m2", "e4m3", "f32"), Form("ss", "e5m2", "e4m3", "f16"),
    Form("rs", "f16", "f16", "f32"), Form("rs", "bf16", "bf16", "f32"), Form("rs", "f16", "f16", "f16"),
    Form("rs", "e4m3", "e4m3", "f32"),
)
FORMS_BY_NAME = {f.name: f for f in FORMS}


# ---- hypotheses ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Hypothesis:
    """A candidate semantics: a rule for one instruction (an MmaModel, a ProductsThenC or EXACT) and the issue
    order of a chain."""

    rule: object
    reversed_order: bool = False
    note: str = ""


def hypotheses(form: Form) -> dict[str, Hypothesis]:
    """The candidates a form is checked against; "default" is what flashsim.numerics.wgmma uses."""
    from flashsim.gpu.validate import candidate_models
    from flashsim.numerics import mma

    if form.k == 16:
        base = W.WGMMA_K16_MODEL
        out = {"default": Hypothesis(base, note="the mma.sync sm_90 rule: 25 fraction bits, one step per k16")}
        for name, m in candidate_models(mma).items():
            if name != "default":
                out[name] = Hypothesis(m, note="mma.sync edge-case alternative")
        out["products_per_step=8"] = Hypothesis(dataclasses.replace(base, products_per_step=8),
                                                note="two chained k8 halves (the A100 way)")
        out["order=reversed"] = Hypothesis(base, reversed_order=True, note="chains issued in reversed K order")
        return out
    base = W.FP8_HYPOTHESES[W.FP8_DEFAULT]
    if form.ctype == "f32":
        return {
            "default": Hypothesis(W.FP8_F32, note="the 1-8-13 accumulator: fp8_13's step, then the 10 low fraction "
                                                  "bits of the f32 result cleared"),
            "fp8_13": Hypothesis(base, note="13 fraction bits, one step per k32, RZ to f32"),
            "acc_bits=14": Hypothesis(dataclasses.replace(W.FP8_F32, acc_bits=14)),
            "acc_bits=23": Hypothesis(dataclasses.replace(W.FP8_F32, acc_bits=23), note="the sum kept to f32's bits"),
            "frac_bits=14": Hypothesis(dataclasses.replace(W.FP8_F32, model=dataclasses.replace(base, frac_bits=14))),
            "fp8_25": Hypothesis(W.FP8_HYPOTHESES["fp8_25"], note="the f16/bf16 rule: 25 fraction bits"),
            "exact": Hypothesis(W.EXACT, note="the exact sum, rounded once"),
            "order=reversed": Hypothesis(W.FP8_F32, reversed_order=True, note="chains issued in reversed K order"),
        }
    return {
        "default": Hypothesis(base, note=f"{W.FP8_DEFAULT}: 13 fraction bits, one step per k32"),
        "fp8_25": Hypothesis(W.FP8_HYPOTHESES["fp8_25"], note="the f16/bf16 rule: 25 fraction bits"),
        "fp8_13_c_exact": Hypothesis(W.FP8_HYPOTHESES["fp8_13_c_exact"],
                                     note="the products with 13 fraction bits, then C added exactly (C not truncated)"),
        "exact": Hypothesis(W.EXACT, note="the exact sum, rounded once"),
        "frac_bits=12": Hypothesis(dataclasses.replace(base, frac_bits=12)),
        "frac_bits=14": Hypothesis(dataclasses.replace(base, frac_bits=14)),
        "frac_bits=24": Hypothesis(dataclasses.replace(base, frac_bits=24)),
        "products_per_step=16": Hypothesis(dataclasses.replace(base, products_per_step=16),
                                           note="13 bits, two chained k16 halves"),
        "e_floor=None": Hypothesis(dataclasses.replace(base, e_floor=None), note="13 bits, no lower clamp of E"),
        "zero_policy=exponent_field": Hypothesis(dataclasses.replace(base, zero_policy="exponent_field"),
                                                 note="13 bits, zero products take part in E"),
        "zero_sign=ieee": Hypothesis(dataclasses.replace(base, zero_sign="ieee"), note="13 bits, IEEE zero signs"),
        "underflow_sign=keep": Hypothesis(dataclasses.replace(base, underflow_sign="keep"),
                                          note="13 bits, a sum rounded to zero keeps its sign"),
        "order=reversed": Hypothesis(base, reversed_order=True, note="chains issued in reversed K order"),
    }


def model_d(form: Form, hyp: Hypothesis, a, b, c, n: int, scale_d: int) -> np.ndarray:
    """D of a run under one hypothesis (a (cases, 64, K), b (cases, K, n), c (cases, 64, n))."""
    steps = a.shape[-1] // form.k
    order = list(range(steps))[::-1] if hyp.reversed_order else None
    return W.wgmma_chain(a, b, c, n=n, atype=form.atype, btype=form.btype, ctype=form.ctype, scale_d=scale_d,
                         model=hyp.rule, order=order)


# ---- inputs -------------------------------------------------------------------------------------

def finite_bits(rng, fmt: FloatFormat, shape, elo: int, ehi: int, sub_frac: float = 0.0) -> np.ndarray:
    """Random finite values with unbiased exponents in [elo, ehi] (clamped to the format), random sign and
    fraction; a fraction ``sub_frac`` of them subnormal. e4m3's NaN pattern is never drawn."""
    e = rng.integers(max(elo, fmt.emin), min(ehi, fmt.emax) + 1, shape)
    field = (e + fmt.bias).astype(np.int64)
    top = (1 << fmt.mbits) - (2 if fmt.nan_only else 1)
    frac = rng.integers(0, (1 << fmt.mbits), shape)
    frac = np.where(field == fmt.exp_mask, np.minimum(frac, top), frac)  # e4m3: S.1111.111 is the NaN
    sign = rng.integers(0, 2, shape)
    bits = (sign << (fmt.nbits - 1)) | (field << fmt.mbits) | frac
    if sub_frac:
        sub = rng.random(shape) < sub_frac
        bits = np.where(sub, (sign << (fmt.nbits - 1)) | rng.integers(1, 1 << fmt.mbits, shape), bits)
    return bits.astype(fmt.dtype)


def _specials(fmt: FloatFormat) -> np.ndarray:
    """Zeros, NaNs, Inf (where the format has them), the largest and smallest values."""
    vals = [0, fmt.sign_bit, fmt.canonical_nan, fmt.canonical_nan | fmt.sign_bit, fmt.max_finite,
            fmt.max_finite | fmt.sign_bit, 1, fmt.sign_bit | 1, 1 << fmt.mbits]
    if not fmt.nan_only:
        vals += [fmt.inf, fmt.inf | fmt.sign_bit, fmt.inf | 1]
    return np.array(vals, np.int64)


def sprinkle(rng, bits: np.ndarray, fmt: FloatFormat, p: float) -> np.ndarray:
    """Replace a fraction p of the elements with special values."""
    sp = _specials(fmt)
    pick = rng.random(bits.shape) < p
    return np.where(pick, sp[rng.integers(0, len(sp), bits.shape)], bits).astype(fmt.dtype)


def _bits_of(fmt: FloatFormat, x: float) -> int:
    """Bits of a value exactly representable in ``fmt`` (16/32-bit formats and fp8)."""
    import ml_dtypes

    dt = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32, "e4m3": ml_dtypes.float8_e4m3fn,
          "e5m2": ml_dtypes.float8_e5m2}[fmt.name]
    v = np.array([x], np.float64).astype(dt)
    if float(v[0]) != x:
        raise ValueError(f"{x} is not exact in {fmt.name}")
    return int(v.view(fmt.dtype)[0])


def _pow2(fmt: FloatFormat, e: np.ndarray, sign: np.ndarray | int = 0, mant: float = 1.0) -> np.ndarray:
    """Bits of (-1)^sign * mant * 2^e (exact; e within the format's range, subnormals included)."""
    e = np.asarray(e)
    out = np.empty(e.shape, np.int64)
    for idx, ev in np.ndenumerate(e):
        out[idx] = _bits_of(fmt, mant * 2.0 ** int(ev))
    return (out | (np.asarray(sign, np.int64) << (fmt.nbits - 1))).astype(fmt.dtype)


def _lowest_exp(fmt: FloatFormat) -> int:
    return fmt.emin - fmt.mbits  # the smallest subnormal


SET_NAMES = ("random", "wide", "spread4", "spread16", "cancel", "large_c", "tiny_c", "subnormal", "specials",
             "zeros", "c_only", "trunc_prod", "trunc_c", "layout", "zero_product", "negative_zero", "exact_cancel",
             "inf_nan")
#: the mma.sync validation sets (gpu/cases.py mma_sets, k16), one m16n8 tile per case repeated over the 64 x N
#: of a wgmma: the edge cases settled for mma.sync, asked again of wgmma (f16/bf16 forms)
MMA_SET_NAMES = ("wide", "spread0", "spread3", "spread12", "spread24", "spread40", "cancel", "large_c", "tiny_c",
                 "subnormal", "specials", "zeros", "tiny_products", "tiny_products_c0", "overflow", "below_floor",
                 "zero_product", "zero_c", "negative_zero", "exact_cancel", "truncation_bits", "floor_sweep",
                 "inf_nan")
MMA_SET_TILES = 32  # cases per mma set (floor_sweep asks 32 questions, one per tile)
ALL_SETS = SET_NAMES + tuple("mma:" + s for s in MMA_SET_NAMES)


def input_set(name: str, rng, form: Form, n: int, steps: int, cases: int):
    """(a, b, c) of input set ``name``: a (cases, 64, K), b (cases, K, n), c (cases, 64, n) bit patterns."""
    af, bf, cf = _FMT[form.atype], _FMT[form.btype], _FMT[form.ctype]
    kk = form.k * steps
    sa, sb, sc = (cases, 64, kk), (cases, kk, n), (cases, 64, n)
    fp8 = form.k == 32
    if name == "random":
        return finite_bits(rng, af, sa, -4, 4), finite_bits(rng, bf, sb, -4, 4), finite_bits(rng, cf, sc, -4, 8)
    if name == "wide":
        return (finite_bits(rng, af, sa, af.emin, af.emax), finite_bits(rng, bf, sb, bf.emin, bf.emax),
                finite_bits(rng, cf, sc, -40 if cf is F32 else cf.emin, 40 if cf is F32 else cf.emax))
    if name.startswith("spread"):
        s = int(name[6:])
        lo_a, lo_b = max(af.emin, -s // 2 - 2), max(bf.emin, -s // 2 - 2)
        return (finite_bits(rng, af, sa, lo_a, lo_a + s), finite_bits(rng, bf, sb, lo_b, lo_b + s),
                finite_bits(rng, cf, sc, -s, s))
    if name == "cancel":
        # products in +/- pairs along K (they cancel exactly) and one small term: the large terms vanish
        a = finite_bits(rng, af, sa, -3, 3)
        b = finite_bits(rng, bf, sb, -3, 3)
        a[:, :, 1::2] = a[:, :, 0::2] ^ np.asarray(af.sign_bit, af.dtype)
        b[:, 1::2, :] = b[:, 0::2, :]
        a[:, :, -1] = finite_bits(rng, af, (cases, 64), af.emin, af.emin + 3)
        return a, b, finite_bits(rng, cf, sc, -12, 2)
    if name == "large_c":
        return finite_bits(rng, af, sa, -3, 3), finite_bits(rng, bf, sb, -3, 3), finite_bits(rng, cf, sc, 8, 14)
    if name == "tiny_c":
        return (finite_bits(rng, af, sa, -3, 3), finite_bits(rng, bf, sb, -3, 3),
                finite_bits(rng, cf, sc, cf.emin, cf.emin + 4, sub_frac=0.5))
    if name == "subnormal":
        return (finite_bits(rng, af, sa, af.emin, af.emin + 2, sub_frac=0.6),
                finite_bits(rng, bf, sb, -2, 3, sub_frac=0.3), finite_bits(rng, cf, sc, -24, -8, sub_frac=0.1))
    if name == "specials":
        return (sprinkle(rng, finite_bits(rng, af, sa, -3, 3), af, 0.01),
                sprinkle(rng, finite_bits(rng, bf, sb, -3, 3), bf, 0.01),
                sprinkle(rng, finite_bits(rng, cf, sc, -3, 3), cf, 0.02))
    if name == "zeros":
        a = finite_bits(rng, af, sa, -4, 4)
        a[rng.random(sa) < 0.4] = 0
        a[rng.random(sa) < 0.1] = af.sign_bit
        c = finite_bits(rng, cf, sc, -6, 6)
        c[rng.random(sc) < 0.3] = 0
        return a, finite_bits(rng, bf, sb, -4, 4), c
    if name == "c_only":
        # every product zero: D = C after the alignment alone (13 kept fraction bits truncate C; 25 do not)
        return (np.zeros(sa, af.dtype), finite_bits(rng, bf, sb, -4, 4),
                finite_bits(rng, cf, sc, -10, 10) | np.asarray((1 << min(cf.mbits, 16)) - 1, cf.dtype))
    if name == "trunc_prod":
        return _trunc_prod(rng, af, bf, cf, sa, sb, sc, fp8)
    if name == "trunc_c":
        return _trunc_c(rng, af, bf, cf, sa, sb, sc)
    if name == "layout":
        return _layout(af, bf, cf, sa, sb, sc)
    if name in ("zero_product", "negative_zero", "exact_cancel", "inf_nan"):
        return _directed(name, rng, af, bf, cf, sa, sb, sc)
    if name.startswith("mma:"):
        return _mma_set(name[4:], rng, form, n, steps, cases)
    raise bad_argument("name", name, f"expected one of {SET_NAMES} or mma:<one of {MMA_SET_NAMES}>")


def _mma_set(name, rng, form, n, steps, cases):
    """One mma.sync validation set: tile t (16 x 16, 16 x 8, 16 x 8) repeated over the 4 x N/8 tiles of case t."""
    from flashsim.gpu import cases as mma_cases

    if form.k != 16 or steps != 1:
        raise bad_argument("name", f"mma:{name}", "the mma.sync sets are for one k16 instruction")
    sets = mma_cases.mma_sets(rng, form.atype, form.ctype, 16, cases)
    if name not in sets:
        raise bad_argument("name", f"mma:{name}", f"gpu/cases.py has no such set for {form.atype} -> {form.ctype}")
    a, b, c = (x[:cases] for x in sets[name])
    return (np.ascontiguousarray(np.tile(a, (1, 4, 1))), np.ascontiguousarray(np.tile(b, (1, 1, n // 8))),
            np.ascontiguousarray(np.tile(c, (1, 4, n // 8))))


def _directed(name, rng, af, bf, cf, sa, sb, sc):
    """Edge cases of the fused rule, asked of every form (the mma.sync ones in wgmma shapes)."""
    cases, _, kk = sa
    a = np.zeros(sa, af.dtype)
    b = np.zeros(sb, bf.dtype)
    c = np.zeros(sc, cf.dtype)
    big = {"f16": 2.0 ** 12, "bf16": 2.0 ** 60, "e4m3": 256.0, "e5m2": 2.0 ** 14}
    if name == "zero_product":
        # a zero times a large value next to small products: does the zero product's exponent take part in E?
        a[:] = finite_bits(rng, af, sa, af.emin, af.emin + 2)
        b[:] = finite_bits(rng, bf, sb, bf.emin, bf.emin + 2)
        for t in range(cases):
            k0 = t % kk
            a[t, :, k0] = af.sign_bit if t % 2 else 0
            b[t, k0, :] = _bits_of(bf, big[bf.name])
    elif name == "negative_zero":
        # every term zero, mixed signs: +0 or IEEE signs?
        for t in range(cases):
            a[t] = af.sign_bit if t % 2 else 0
            b[t] = _bits_of(bf, 1.0) if t % 3 else 0
            c[t] = cf.sign_bit if t % 4 < 2 else 0
    elif name == "exact_cancel":
        # A[:, 0] * 1 = -C exactly: the sign of an exact zero
        x = finite_bits(rng, af, (cases, 64), -3, 3)
        a[:, :, 0] = x
        b[:, 0, :] = _bits_of(bf, 1.0)
        vals = _to_float(x, af)
        c[:] = np.array([[_bits_of(cf, -v) for v in row] for row in vals], np.int64)[:, :, None].astype(cf.dtype)
    elif name == "inf_nan":
        a[:] = finite_bits(rng, af, sa, -2, 2)
        b[:] = finite_bits(rng, bf, sb, -2, 2)
        one = _bits_of(bf, 1.0)
        for t in range(cases):
            kind = t % 4
            if kind == 0 and not af.nan_only:  # Inf - Inf
                a[t, :, 0], a[t, :, 1] = af.inf, af.inf | af.sign_bit
                b[t, 0, :], b[t, 1, :] = one, one
            elif kind == 1 and not af.nan_only:  # Inf * 0
                a[t, :, 0] = af.inf
                b[t, 0, :] = 0
            elif kind == 2 or af.nan_only:  # a NaN in (e4m3 has no Inf)
                a[t, ::3, 0] = af.canonical_nan
            else:  # Inf in C, finite products
                c[t] = cf.inf | (cf.sign_bit if t % 8 > 3 else 0)
    return a, b, c


def _to_float(bits, fmt):
    import ml_dtypes

    dt = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "e4m3": ml_dtypes.float8_e4m3fn,
          "e5m2": ml_dtypes.float8_e5m2}[fmt.name]
    return bits.view(dt).astype(np.float64)


def _trunc_prod(rng, af, bf, cf, sa, sb, sc, fp8):
    """C = +-1 and one product +-2^-s (s by row and column): the product survives the alignment only if
    s <= the kept fraction bits (negative ones show it even under RZ). s spans 8..18 (fp8) or 20..30."""
    cases, _, kk = sa
    n = sc[-1]
    lo, hi = (8, 18) if fp8 else (20, 30)
    lo = min(lo, -(_lowest_exp(af) + _lowest_exp(bf)))
    hi = min(hi, -(_lowest_exp(af) + _lowest_exp(bf)))
    i = np.arange(64)[:, None]
    j = np.arange(n)[None, :]
    a = np.zeros(sa, af.dtype)
    b = np.zeros(sb, bf.dtype)
    c = np.zeros(sc, cf.dtype)
    # row i of A: +-2^-ea at k = 0, column j of B: 2^-eb at k = 0; s = ea + eb covers lo..hi
    half = (hi - lo) // 2 + 1
    ea = np.minimum(lo // 2 + np.arange(64) % half, -_lowest_exp(af))
    eb = np.minimum(lo - lo // 2 + np.arange(n) % (hi - lo - half + 2), -_lowest_exp(bf))
    for t in range(cases):
        sgn_a = ((t + np.arange(64)) % 3 != 0).astype(np.int64)  # mostly negative: seen under RZ
        a[t, :, 0] = _pow2(af, -ea, sign=sgn_a)
        b[t, 0, :] = _pow2(bf, -eb)
        csgn = ((i + j + t) % 5 == 0).astype(np.int64)
        c[t] = (np.asarray(_bits_of(cf, 1.0), np.int64) | (csgn << (cf.nbits - 1))).astype(cf.dtype)
        # a second small product, 1.5 * 2^-s' of either sign: the rounding of a kept remainder
        a[t, :, 1] = _pow2(af, -np.minimum(ea + 1, -_lowest_exp(af)))
        b[t, 1, :] = _pow2(bf, -np.minimum(eb, -_lowest_exp(bf) - 1), sign=np.arange(n) % 2, mant=1.5)
    return a, b, c


def _trunc_c(rng, af, bf, cf, sa, sb, sc):
    """One product = 1 and C = -+2^-s, s = 1..(f32: 40, f16: 24) by element: is C truncated like a product?"""
    cases, _, _ = sa
    n = sc[-1]
    a = np.zeros(sa, af.dtype)
    b = np.zeros(sb, bf.dtype)
    a[:, :, 0] = _bits_of(af, 1.0)
    b[:, 0, :] = _bits_of(bf, 1.0)
    top = 40 if cf is F32 else 22  # 1.5 * 2^-s stays exact
    s = 1 + (np.arange(64)[:, None] + 7 * np.arange(n)[None, :]) % top
    c = np.empty(sc, cf.dtype)
    for t in range(cases):
        sign = ((np.arange(64)[:, None] + np.arange(n)[None, :] + t) % 4 != 0).astype(np.int64)
        c[t] = _pow2(cf, -s, sign=sign, mant=1.5 if t % 2 else 1.0)
    return a, b, c


def _layout(af, bf, cf, sa, sb, sc):
    """Index-coded: D[i, j] = (i + 1) + 128 (j + 1) (exact for an f32 D and 16-bit inputs): a value that lands
    in the wrong element tells where it came from (decode_layout)."""
    a = np.zeros(sa, af.dtype)
    b = np.zeros(sb, bf.dtype)
    c = np.zeros(sc, cf.dtype)
    if af.nbits == 16:
        a[:, :, 0] = np.array([_bits_of(af, i + 1.0) for i in range(64)], af.dtype)
        a[:, :, 1] = _bits_of(af, 1.0)
        b[:, 0, :] = _bits_of(bf, 1.0)
        b[:, 1, :] = np.array([_bits_of(bf, 128.0 * (j + 1)) for j in range(sb[-1])], bf.dtype)
    else:
        # fp8: rows by two exact terms, (i % 8 + 1) + 8 (i // 8 + 1), columns by a third
        a[:, :, 0] = np.array([_bits_of(af, float(i % 8 + 1)) for i in range(64)], af.dtype)
        a[:, :, 1] = np.array([_bits_of(af, float(8 * (i // 8 + 1))) for i in range(64)], af.dtype)
        a[:, :, 2] = _bits_of(af, 1.0)
        b[:, 0, :] = _bits_of(bf, 1.0)
        b[:, 1, :] = _bits_of(bf, 1.0)
        b[:, 2, :] = np.array([_bits_of(bf, 16.0 * (1 + j % 3) * 2.0 ** (j // 3 % 4)) for j in range(sb[-1])],
                              bf.dtype)
    return a, b, c


def decode_layout(d_gpu: np.ndarray, form: Form, limit: int = 8) -> list[dict]:
    """For the index-coded set with an f32 D and 16-bit inputs: the elements whose GPU value belongs to another
    (row, col), as {"element": [i, j], "gpu_value_of": [i', j']} (or the raw value when it decodes to nothing)."""
    if form.ctype != "f32" or form.k != 16:
        return []
    v = d_gpu.view(np.float32).astype(np.float64)
    out = []
    rows, cols = np.meshgrid(np.arange(64), np.arange(v.shape[-1]), indexing="ij")
    want = (rows + 1) + 128.0 * (cols + 1)
    for t in range(v.shape[0]):
        bad = np.argwhere(v[t] != want)
        for i, j in bad[:limit - len(out)]:
            x = v[t, i, j]
            if np.isfinite(x) and x == int(x) and x > 128:
                src = [int(x) % 128 - 1, int(x) // 128 - 1]
                out.append({"case": t, "element": [int(i), int(j)], "gpu_value_of": src})
            else:
                out.append({"case": t, "element": [int(i), int(j)], "gpu_value": float(x)})
        if len(out) >= limit:
            break
    return out


# ---- the plan -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Run:
    """One launch: a form, N, a configuration and an input set."""

    config: str  # base / layouts / chains / scale_d
    form: Form
    n: int
    steps: int
    arr_a: str
    arr_b: str
    scale_d: int
    set_name: str


def plan(forms=FORMS, ns=NS) -> list[Run]:
    runs = []
    for f in forms:
        arrs = ("none", "128B")
        for n in ns:
            for arr in arrs:
                for s in SET_NAMES:
                    runs.append(Run("base", f, n, 1, arr, arr, 1, s))
            for arr in ("none_mn", "32B", "64B"):
                runs.append(Run("layouts", f, n, 2, arr, arr, 1, "random"))
            for steps in (2, 4):
                arr = "none" if steps == 2 else "128B"
                for s in ("random", "cancel", "spread16", "trunc_prod"):
                    runs.append(Run("chains", f, n, steps, arr, arr, 1, s))
            for steps in (1, 2):
                runs.append(Run("scale_d", f, n, steps, "128B", "none" if steps == 1 else "64B", 0, "random"))
        if f.k == 16 and 8 in ns:
            for s in MMA_SET_NAMES:
                if s in _mma_sets_of(f):
                    runs.append(Run("mma_sets", f, 8, 1, "none", "none", 1, "mma:" + s))
    return runs


def _mma_sets_of(form: Form) -> set[str]:
    names = set(MMA_SET_NAMES)
    if form.atype != "bf16":
        names -= {"tiny_products", "tiny_products_c0"}
    return names


def run_inputs(run: Run, rng, cases: int):
    if run.config == "mma_sets":
        cases = MMA_SET_TILES
    a, b, c = input_set(run.set_name, rng, run.form, run.n, run.steps, cases)
    if run.scale_d == 0:
        # the device must ignore C: fill it with NaNs
        c = np.full(c.shape, _FMT[run.form.ctype].canonical_nan, c.dtype)
    return a, b, c


# ---- the GPU ------------------------------------------------------------------------------------

class Device:
    """probe_wgmma.cu built for sm_90a and run through cupy: ``run(run, a, b, c) -> d``."""

    def __init__(self, log=print):
        from flashsim.gpu import runtime

        self.runtime = runtime
        self.cupy = runtime.require_gpu()
        arch = runtime.current_arch()
        if arch != "sm_90":
            raise runtime.GpuUnavailable(f"wgmma needs an sm_90 device (H100/H200); this one is {arch}")
        path = runtime.kernel_path(PROBE_FILE)
        t0 = time.time()
        try:
            cubin = runtime.check_compiles_nvcc(path, arch="sm_90a")
            self.module = runtime.load_cubin(cubin)
            self.build = {"compiler": "nvcc", "arch": "sm_90a", "nvcc": _nvcc_version()}
        except runtime.GpuUnavailable:
            # no nvcc: cupy's NVRTC with -arch=sm_90a (a build for plain sm_90 traps at the first launch)
            self.module = runtime.load_module(PROBE_FILE, arch="sm_90a")
            self.build = {"compiler": "nvrtc (cupy)", "arch": "sm_90a"}
        self.build["seconds"] = round(time.time() - t0, 1)
        log(f"built {PROBE_FILE}: {self.build}")

    def info(self) -> dict:
        return self.runtime.device_info()

    def run(self, run: Run, a, b, c) -> np.ndarray:
        cp = self.cupy
        kernel = self.module.get_function(run.form.kernel(run.n))
        d_a, d_b, d_c = cp.asarray(a), cp.asarray(b), cp.asarray(c)
        d_d = cp.empty_like(d_c)
        err = cp.zeros(1, cp.uint32)
        arrs = {name: i for i, name in enumerate(ARRANGEMENTS)}
        args = (d_a, d_b, d_c, d_d, np.int32(run.steps), np.int32(arrs[run.arr_a]), np.int32(arrs[run.arr_b]),
                np.int32(run.scale_d), err)
        self.runtime.launch(kernel, a.shape[0], 128, args)
        e = int(err.get()[0])
        if e:
            raise self.runtime.LaunchError(run.form.kernel(run.n), f"the probe reported error bits {e:#x} (1: a tile "
                                           "not on a 1024-byte boundary, 2: bad steps or arrangement)")
        return cp.asnumpy(d_d)


def _nvcc_version() -> str:
    import shutil
    import subprocess

    exe = shutil.which("nvcc")
    if exe is None:
        return "none"
    out = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout.strip().splitlines()
    return out[-1] if out else "?"


# ---- the comparison -----------------------------------------------------------------------------

def validate(device, runs: list[Run], *, cases: int, seed: int, keep_n: int = 16, keep_bad: int = 64,
             log=print) -> tuple[dict, dict]:
    """Run every Run on ``device`` and under every hypothesis; (report body, golden samples).

    Samples: the first case of every run with N <= ``keep_n``, and the first mismatching case (default
    hypothesis) of every run, up to ``keep_bad`` per form."""
    totals: dict = {}
    samples: dict = defaultdict(lambda: defaultdict(list))
    layout_diag: dict = defaultdict(list)
    t_gpu = t_cpu = 0.0
    hyps_of = {}
    kept_bad: dict = defaultdict(int)
    for ri, run in enumerate(runs):
        f = run.form
        if f.name not in hyps_of:
            hyps_of[f.name] = hypotheses(f)
        hyps = hyps_of[f.name]
        rng = np.random.default_rng([seed, ri])
        a, b, c = run_inputs(run, rng, cases)
        t0 = time.time()
        d_gpu = device.run(run, a, b, c)
        t1 = time.time()
        entry = totals.setdefault(f.name, {"form": f.name, "instruction": f.ptx(), "outputs": 0, "cases": 0,
                                           "scored_outputs": 0, "hypotheses": {h: 0 for h in hyps},
                                           "notes": {h: x.note for h, x in hyps.items()},
                                           "by": defaultdict(lambda: defaultdict(lambda: [0, 0])),
                                           "examples": []})
        entry["outputs"] += d_gpu.size
        entry["cases"] += d_gpu.shape[0]
        scored = run.n <= ALT_MAX_N
        entry["scored_outputs"] += d_gpu.size if scored else 0
        bad_default = None
        for hname, hyp in hyps.items():  # "default" comes first
            if hname != "default" and not scored:
                continue
            if hyp.reversed_order and run.steps == 1:
                bad = bad_default  # one instruction: the same as the default
            else:
                d_sim = model_d(f, hyp, a, b, c, run.n, run.scale_d)
                bad = d_sim != d_gpu
            mism = int(bad.sum())
            if scored:
                entry["hypotheses"][hname] += mism
            if hname == "default":
                entry["mismatches"] = entry.get("mismatches", 0) + mism
                bad_default = bad
                for key in (f"config={run.config}", f"set={run.set_name}", f"n={run.n}", f"steps={run.steps}",
                            f"arr={run.arr_a}/{run.arr_b}", f"scale_d={run.scale_d}"):
                    entry["by"][key]["default"][0] += mism
                    entry["by"][key]["default"][1] += d_gpu.size
                if mism and len(entry["examples"]) < 12:
                    t, i, j = (int(x) for x in np.argwhere(bad)[0])
                    entry["examples"].append({"run": dataclasses.asdict(run) | {"form": f.name}, "case": t,
                                              "element": [i, j], "gpu": hex(int(d_gpu[t, i, j])),
                                              "sim": hex(int(d_sim[t, i, j]))})
            entry["by"][f"set={run.set_name}"][hname][0] += mism
            entry["by"][f"set={run.set_name}"][hname][1] += d_gpu.size
        t_cpu += time.time() - t1
        t_gpu += t1 - t0
        if run.set_name == "layout" and bad_default.any():
            layout_diag[f.name] += decode_layout(d_gpu, f, limit=8)
        # samples: the first case of a small run, the first mismatching case of any run
        idx = [0] if run.n <= keep_n else []
        bad_cases = np.nonzero(bad_default.reshape(d_gpu.shape[0], -1).any(axis=1))[0]
        if bad_cases.size and kept_bad[f.name] < keep_bad:
            idx.append(int(bad_cases[0]))
            kept_bad[f.name] += 1
        _keep(samples[f"{f.name}/n{run.n}/s{run.steps}"], run, sorted(set(idx)), a, b, c, d_gpu)
        if (ri + 1) % 200 == 0:
            log(f"{ri + 1}/{len(runs)} runs (gpu {t_gpu:.1f} s, model {t_cpu:.1f} s)")
    forms = []
    for name, e in totals.items():
        e["by"] = {k: {h: {"mismatches": v[0], "outputs": v[1]} for h, v in d.items()}
                   for k, d in sorted(e["by"].items())}
        best = min(e["hypotheses"].values())
        e["best"] = sorted(h for h, v in e["hypotheses"].items() if v == best)
        e["layout_misplaced"] = layout_diag.get(name, [])
        forms.append(e)
    golden = {}
    for key, group in samples.items():
        for field, parts in group.items():
            golden[f"{key}/{field}"] = np.concatenate(parts)
    golden["set_names"] = np.array(ALL_SETS)
    golden["arrangements"] = np.array(ARRANGEMENTS)
    body = {"forms": forms, "seconds": {"gpu": round(t_gpu, 1), "model": round(t_cpu, 1)},
            "decisions": decisions(forms)}
    return body, golden


def _keep(group: dict, run: Run, idx: list[int], a, b, c, d) -> None:
    if not idx:
        return
    for name, arr in (("a", a), ("b", b), ("c", c), ("d", d)):
        group[name].append(arr[idx])
    for name, v in (("arr_a", ARRANGEMENTS.index(run.arr_a)), ("arr_b", ARRANGEMENTS.index(run.arr_b)),
                    ("scale_d", run.scale_d), ("set", ALL_SETS.index(run.set_name))):
        group[name].append(np.full(len(idx), v, np.int16))


def decisions(forms: list[dict]) -> list[str]:
    """What the run settles, one sentence per question of the model."""
    out = []
    k16 = [f for f in forms if W.K_OF[FORMS_BY_NAME[f["form"]].atype] == 16]
    fp8 = [f for f in forms if W.K_OF[FORMS_BY_NAME[f["form"]].atype] == 32]
    if k16:
        bad = [f["form"] for f in k16 if f["mismatches"]]
        out.append("f16/bf16 wgmma follows the mma.sync sm_90 rule (25 fraction bits, one fused step per k16): "
                   + ("yes, 0 mismatches on every form" if not bad else f"NO: mismatches on {bad}"))
    if fp8:
        tally = defaultdict(int)
        for f in fp8:
            for h, v in f["hypotheses"].items():
                tally[h] += v
        best = min(tally.values())
        winners = sorted(h for h, v in tally.items() if v == best)
        out.append(f"e4m3/e5m2 wgmma: mismatches per hypothesis over every fp8 form: {dict(tally)}; "
                   f"fits best: {winners}" + (" (exactly)" if best == 0 else f" ({best} mismatches left)"))
    for f in forms:
        by = f["by"]
        chain = {k: v for k, v in by.items() if k.startswith("steps=") and k != "steps=1"}
        chains_fit = chain and all(v["default"]["mismatches"] == 0 for v in chain.values())
        if chains_fit and f["hypotheses"].get("order=reversed", 0):
            out.append(f"{f['form']}: chains along K match the program (issue) order; reversed order gives "
                       f"{f['hypotheses']['order=reversed']} mismatches")
        arr_bad = {k: v["default"]["mismatches"] for k, v in by.items()
                   if k.startswith("arr=") and v["default"]["mismatches"]}
        if arr_bad:
            out.append(f"{f['form']}: mismatches by shared-memory arrangement {arr_bad}: check the descriptor model")
        sd = by.get("scale_d=0", {}).get("default")
        if sd is not None and sd["mismatches"]:
            out.append(f"{f['form']}: scale-d 0 runs mismatch ({sd['mismatches']}): C is not simply ignored")
        if f["layout_misplaced"]:
            out.append(f"{f['form']}: index-coded elements misplaced, e.g. {f['layout_misplaced'][:3]}")
    return out


# ---- report ---------------------------------------------------------------------------------------

def write_markdown(path: Path, report: dict) -> None:
    prov = report["provenance"]
    lines = ["# wgmma.mma_async on the GPU against flashsim's model", "",
             f"Device: {prov.get('name', '?')} (cc {prov.get('compute_capability', '?')}), driver "
             f"{prov.get('driver_release', '?')}, CUDA runtime {prov.get('cuda_runtime_version', '?')}, build "
             f"{prov.get('build', {})}, date {prov.get('date', '?')}, seed {prov.get('seed', '?')}. "
             f"Command: `{report['command']}`.", "",
             "## What the run decides", ""]
    lines += [f"- {d}" for d in report["decisions"]] + [""]
    lines += ["## Mismatching D elements per form and hypothesis", "",
              f"The default hypothesis is checked on every D element; the competing ones on the runs with "
              f"N <= {ALT_MAX_N} (\"scored\"), the default among them.", ""]
    for f in report["forms"]:
        lines += [f"### {f['instruction']}", "",
                  f"{f['cases']} cases, {f['outputs']} D elements, default hypothesis: {f['mismatches']} mismatches; "
                  f"{f['scored_outputs']} scored elements, fits best: {', '.join(f['best'])}.", "",
                  "| hypothesis | mismatches (scored) | what it is |", "| --- | --- | --- |"]
        for h, v in f["hypotheses"].items():
            lines.append(f"| {h} | {v} | {f['notes'].get(h, '')} |")
        lines += ["", "Default hypothesis by configuration, input set, N, steps, arrangement, scale-d:", "",
                  "| slice | mismatches / outputs |", "| --- | --- |"]
        for k, d in f["by"].items():
            if "default" in d:
                lines.append(f"| {k} | {d['default']['mismatches']} / {d['default']['outputs']} |")
        if f["examples"]:
            lines += ["", "First mismatches (default hypothesis):", ""]
            lines += [f"- {json.dumps(x)}" for x in f["examples"][:6]]
        lines.append("")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def save_samples(path: Path, golden: dict, prov: dict) -> None:
    np.savez_compressed(path, provenance=np.array(json.dumps(prov, sort_keys=True, default=str)), **golden)


def replay_samples(path, hypothesis: str = "default") -> dict[str, tuple[int, int]]:
    """Recompute the GPU outputs stored in a samples file with the model (no GPU): {group: (mismatches,
    outputs)}, group = "<form>/n<N>/s<steps>"."""
    from flashsim.golden import load

    arrays, _ = load(path)
    set_names = [str(s) for s in arrays["set_names"]]
    del set_names
    out = {}
    for key in sorted({k.rsplit("/", 1)[0] for k in arrays if k.endswith("/d")}):
        form_name, n_s, s_s = key.split("/")
        form = FORMS_BY_NAME[form_name]
        n = int(n_s[1:])
        hyp = hypotheses(form)[hypothesis]
        a, b, c, d = (arrays[f"{key}/{x}"] for x in "abcd")
        scale = arrays[f"{key}/scale_d"]
        mism = 0
        for sd in np.unique(scale):
            sel = scale == sd
            mism += int(np.sum(model_d(form, hyp, a[sel], b[sel], c[sel], n, int(sd)) != d[sel]))
        out[key] = (mism, int(d.size))
    return out


def _provenance(seed: int, device) -> dict:
    """validate.provenance's record (GPU, driver, CUDA, versions, date, seed, source hashes) plus the build of
    the probe; a stand-in device (the CPU tests') describes itself instead of the GPU."""
    import datetime

    from flashsim import __version__
    from flashsim.gpu import validate

    if isinstance(device, Device):
        prov = validate.provenance(seed)
    else:
        prov = {**device.info(), "date": datetime.date.today().isoformat(), "flashsim": __version__, "seed": seed,
                "sources": validate.source_hashes(), "python": sys.version.split()[0], "numpy": np.__version__}
    prov["build"] = dict(device.build)
    prov["kernel_file"] = PROBE_FILE
    return prov


def main(argv=None, device=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--cases", type=int, default=4, help="cases (CTAs) per input set and configuration (default 4)")
    ap.add_argument("--seed", type=int, default=20261124)
    ap.add_argument("--forms", default="", help=f"comma-separated subset of {', '.join(FORMS_BY_NAME)}")
    ap.add_argument("--ns", default="", help=f"comma-separated subset of N in {NS}")
    args = ap.parse_args(argv)
    if args.cases < 1:
        ap.error("--cases must be >= 1")
    forms = FORMS
    if args.forms:
        names = [x for x in args.forms.split(",") if x]
        unknown = [x for x in names if x not in FORMS_BY_NAME]
        if unknown:
            ap.error(f"--forms: unknown {unknown}; expected {list(FORMS_BY_NAME)}")
        forms = tuple(FORMS_BY_NAME[x] for x in names)
    ns = NS
    if args.ns:
        ns = tuple(int(x) for x in args.ns.split(",") if x)
        if any(n not in NS for n in ns):
            ap.error(f"--ns: the probe has N in {NS}")
    args.out.mkdir(parents=True, exist_ok=True)
    command = "python -m flashsim.gpu.validate_wgmma " + " ".join(argv if argv is not None else sys.argv[1:])
    with open(args.out / "wgmma_validate.log", "a", encoding="utf-8") as logf:
        def log(msg):
            print(msg, flush=True)
            logf.write(msg + "\n")
            logf.flush()

        return _run(args, forms, ns, device, command, log)


def _run(args, forms, ns, device, command: str, log) -> int:
    t0 = time.time()
    if device is None:
        device = Device(log)
    prov = _provenance(args.seed, device)
    runs = plan(forms, ns)
    log(f"{len(runs)} runs x {args.cases} cases over {len(forms)} forms, N in {ns}")
    body, golden = validate(device, runs, cases=args.cases, seed=args.seed, log=log)
    report = {"command": command, "provenance": prov, **body}
    report["seconds"]["total"] = round(time.time() - t0, 1)
    (args.out / "wgmma_report.json").write_text(json.dumps(report, indent=1, default=str) + "\n", encoding="utf-8")
    write_markdown(args.out / "wgmma_report.md", report)
    save_samples(args.out / "wgmma_samples.npz", golden, prov)
    for d in report["decisions"]:
        log(d)
    bad = [f["form"] for f in report["forms"] if f["mismatches"]]
    log(f"SUMMARY: {len(report['forms'])} forms, default hypothesis mismatches on {bad or 'none'}; "
        f"{report['seconds']}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
