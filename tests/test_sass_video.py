"""The packed SIMD integer forms (VIADD.16x2; VIMNMX, VIMNMX3 and VIADDMNMX in .U16x2 / .S16x2 / .RELU; VABSDIFF4.U8
and .ACC), UIMAD.X, the bf16x2 arithmetic (HFMA2 / HADD2 / HMUL2 .BF16_V2) and BRA.CONV, in kernels of every CUDA
SIMD intrinsic, of the sm_90 DPX min/max functions, of bf16x2 arithmetic and of 64-bit products of uniform
values, each compiled by NVRTC 13.0 and by Triton's ptxas 12.8 (flashsim.fuzz.build). The interpreter's outputs
on edge-case words, over full and partial warps (48-thread blocks, a tail of lanes past n), must equal bit for
bit the results the CUDA Math API defines, computed here from Python integers and, for bf16, exact Fractions.

The intrinsics that compile to PRMT / LOP3 / IADD3 sequences (__vadd4, __vcmpgeu2, __vavgs4, ...) are here too:
the same definitions check those sequences. Where a definition leaves something open it is said so below: the
NaN bf16 arithmetic returns (0x7FFF, flashsim's assumption, PTX leaves it unspecified) and __vset*'s "returns 1"
(1 in each lane whose comparison holds, as the PTX vset2 / vset4 the intrinsics stand for define it).
"""

from __future__ import annotations

import functools
from fractions import Fraction

import numpy as np
import pytest

import flashsim.cuda as fc
from flashsim import fuzz
from flashsim.numerics import half
from flashsim.sass import isa
from flashsim.sass.program import Program

N = 1000  # elements: 21 blocks of 48 threads (a full and a 16-lane warp each), the last 8 threads past N
BLOCK = 48


# ---------------------------------------------------------------------------------------------- lanes
def lanes(x, width: int, signed: bool) -> list[np.ndarray]:
    """Lane values of uint32 words (lane 0 in the low bits), as int64."""
    x = np.asarray(x, np.uint32).astype(np.int64)
    out = []
    for k in range(32 // width):
        v = (x >> (width * k)) & ((1 << width) - 1)
        if signed:
            v = np.where(v >= 1 << (width - 1), v - (1 << width), v)
        out.append(v)
    return out


def pack(parts, width: int) -> np.ndarray:
    word = np.zeros(np.shape(parts[0]), np.int64)
    for k, v in enumerate(parts):
        word |= (np.asarray(v, np.int64) % (1 << width)) << (width * k)
    return word.astype(np.uint32)


def lanewise(width: int, signed: bool, f):
    """The word function applying ``f`` lane by lane (to the lane values of every argument)."""
    def g(*words):
        per = [lanes(w, width, signed) for w in words]
        return pack([f(*vals) for vals in zip(*per)], width)
    return g


def _smin(w):
    return -(1 << (w - 1))


def _smax(w):
    return (1 << (w - 1)) - 1


def _umax(w):
    return (1 << w) - 1


_CMP = {"eq": np.equal, "ne": np.not_equal, "ge": np.greater_equal, "gt": np.greater, "le": np.less_equal,
        "lt": np.less}


def on(width: int, signed: bool, f, *operands):
    """The reference applying ``f`` lane by lane to ``operands``: 'A', 'B', 'C', 'S' or a constant word."""
    g = lanewise(width, signed, f)

    def ref(A, B, C, S):
        env = {"A": A, "B": B, "C": C, "S": S}
        return g(*(env[o] if isinstance(o, str) else np.uint32(o) for o in operands))
    return ref


def _sad(width: int, signed: bool, *pairs):
    """The 32-bit sum of |x - y| over the lanes of each pair of operands (names as in :func:`on`)."""
    def ref(A, B, C, S):
        env = {"A": A, "B": B, "C": C, "S": S}
        total = np.zeros(len(A), np.int64)
        for p, q in pairs:
            total += sum(np.abs(x - y) for x, y in zip(lanes(env[p], width, signed), lanes(env[q], width, signed)))
        return (total % (1 << 32)).astype(np.uint32)
    return ref


def _wrap(width: int, signed: bool):
    """A lane sum taken modulo 2^width (two's complement for signed lanes)."""
    if signed:
        return lambda x: ((x + (1 << (width - 1))) % (1 << width)) - (1 << (width - 1))
    return lambda x: x % (1 << width)


def _simd_cases() -> dict[str, tuple[str, object]]:
    """kernel name -> (C expression over A, B, C and the uniform S, the reference of (A, B, C, S))."""
    cases: dict[str, tuple[str, object]] = {}
    mx, mn = np.maximum, np.minimum

    def add(name, expr, ref):
        cases[name] = (expr, ref)

    def width(n: int, w: int) -> None:  # one scope per width: the lambdas below keep its lo / hi / um
        lo, hi, um = _smin(w), _smax(w), _umax(w)
        # CUDA Math API, SIMD Intrinsics: "Performs per-halfword (per-byte) ..."
        add(f"vadd{n}", f"__vadd{n}(A, B)", on(w, False, lambda a, b: a + b, "A", "B"))  # with wrap-around
        add(f"vsub{n}", f"__vsub{n}(A, B)", on(w, False, lambda a, b: a - b, "A", "B"))
        add(f"vaddss{n}", f"__vaddss{n}(A, B)", on(w, True, lambda a, b: np.clip(a + b, lo, hi), "A", "B"))
        add(f"vaddus{n}", f"__vaddus{n}(A, B)", on(w, False, lambda a, b: np.clip(a + b, 0, um), "A", "B"))
        add(f"vsubss{n}", f"__vsubss{n}(A, B)", on(w, True, lambda a, b: np.clip(a - b, lo, hi), "A", "B"))
        add(f"vsubus{n}", f"__vsubus{n}(A, B)", on(w, False, lambda a, b: np.clip(a - b, 0, um), "A", "B"))
        # rounded averages: PTX vavrg2 / vavrg4, (a + b + 1) >> 1 for a non-negative sum, (a + b) >> 1 otherwise
        add(f"vavgs{n}", f"__vavgs{n}(A, B)",
            on(w, True, lambda a, b: np.where(a + b >= 0, (a + b + 1) >> 1, (a + b) >> 1), "A", "B"))
        add(f"vavgu{n}", f"__vavgu{n}(A, B)", on(w, False, lambda a, b: (a + b + 1) >> 1, "A", "B"))
        add(f"vhaddu{n}", f"__vhaddu{n}(A, B)", on(w, False, lambda a, b: (a + b) >> 1, "A", "B"))  # no rounding
        for cmp, f in _CMP.items():
            for k in (("",) if cmp in ("eq", "ne") else ("s", "u")):
                add(f"vcmp{cmp}{k}{n}", f"__vcmp{cmp}{k}{n}(A, B)",
                    on(w, k == "s", lambda a, b, f=f: np.where(f(a, b), um, 0), "A", "B"))
                add(f"vset{cmp}{k}{n}", f"__vset{cmp}{k}{n}(A, B)",
                    on(w, k == "s", lambda a, b, f=f: np.where(f(a, b), 1, 0), "A", "B"))
        add(f"vabsdiffs{n}", f"__vabsdiffs{n}(A, B)", on(w, True, lambda a, b: np.abs(a - b), "A", "B"))
        add(f"vabsdiffu{n}", f"__vabsdiffu{n}(A, B)", on(w, False, lambda a, b: np.abs(a - b), "A", "B"))
        add(f"vmaxs{n}", f"__vmaxs{n}(A, B)", on(w, True, mx, "A", "B"))
        add(f"vmaxu{n}", f"__vmaxu{n}(A, B)", on(w, False, mx, "A", "B"))
        add(f"vmins{n}", f"__vmins{n}(A, B)", on(w, True, mn, "A", "B"))
        add(f"vminu{n}", f"__vminu{n}(A, B)", on(w, False, mn, "A", "B"))
        add(f"vsads{n}", f"__vsads{n}(A, B)", _sad(w, True, ("A", "B")))  # one 32-bit sum over the lanes
        add(f"vsadu{n}", f"__vsadu{n}(A, B)", _sad(w, False, ("A", "B")))
        add(f"vabs{n}", f"__vabs{n}(A)", on(w, True, np.abs, "A"))  # |-2^(w-1)| wraps to itself
        add(f"vabsss{n}", f"__vabsss{n}(A)", on(w, True, lambda a: mn(np.abs(a), hi), "A"))
        add(f"vneg{n}", f"__vneg{n}(A)", on(w, True, lambda a: -a, "A"))
        add(f"vnegss{n}", f"__vnegss{n}(A)", on(w, True, lambda a: np.clip(-a, lo, hi), "A"))

    width(2, 16)
    width(4, 8)

    # operands of other kinds, and the fused forms ptxas builds from nested intrinsics (as the fuzzer nests them)
    w16 = _wrap(16, True)
    add("vadd2_imm", "__vadd2(A, 0xf55f4208u)", on(16, False, lambda a, k: a + k, "A", 0xF55F4208))
    add("vsub2_imm", "__vsub2(A, 0x00010001u)", on(16, False, lambda a, k: a - k, "A", 0x00010001))
    add("vsub2_from_imm", "__vsub2(0x12345678u, A)", on(16, False, lambda k, a: k - a, 0x12345678, "A"))
    add("vsub2_from_zero", "__vsub2(0u, A)", on(16, False, lambda a: -a, "A"))
    add("vadd2_param", "__vadd2(A, S)", on(16, False, lambda a, s: a + s, "A", "S"))
    add("vsub2_param", "__vsub2(S, A)", on(16, False, lambda s, a: s - a, "S", "A"))
    add("vmaxu2_imm", "__vmaxu2(A, 0xf55f4208u)", on(16, False, mx, "A", 0xF55F4208))
    add("vmins2_param", "__vmins2(A, S)", on(16, True, mn, "A", "S"))
    add("vmaxu2_3", "__vmaxu2(__vmaxu2(A, B), C)", on(16, False, lambda a, b, c: mx(mx(a, b), c), "A", "B", "C"))
    add("vminu2_3", "__vminu2(__vminu2(A, B), C)", on(16, False, lambda a, b, c: mn(mn(a, b), c), "A", "B", "C"))
    add("vmaxs2_3", "__vmaxs2(__vmaxs2(A, B), C)", on(16, True, lambda a, b, c: mx(mx(a, b), c), "A", "B", "C"))
    add("vmins2_3", "__vmins2(__vmins2(A, B), C)", on(16, True, lambda a, b, c: mn(mn(a, b), c), "A", "B", "C"))
    add("vmaxu2_3imm", "__vmaxu2(__vmaxu2(A, S), 0x00070007u)", on(16, False, lambda a, s: mx(mx(a, s), 7), "A", "S"))
    add("vmaxu2_add", "__vmaxu2(__vadd2(A, B), C)",
        on(16, False, lambda a, b, c: mx((a + b) & 0xFFFF, c), "A", "B", "C"))
    add("vminu2_add", "__vminu2(__vadd2(A, B), C)",
        on(16, False, lambda a, b, c: mn((a + b) & 0xFFFF, c), "A", "B", "C"))
    add("vmaxu2_sub", "__vmaxu2(__vsub2(A, B), C)",
        on(16, False, lambda a, b, c: mx((a - b) & 0xFFFF, c), "A", "B", "C"))
    add("vmaxs2_add", "__vmaxs2(__vadd2(A, B), C)", on(16, True, lambda a, b, c: mx(w16(a + b), c), "A", "B", "C"))
    add("vmins2_negsub", "__vmins2(__vsub2(0u, A), B)", on(16, True, lambda a, b: mn(w16(-a), b), "A", "B"))
    add("vmaxu2_addimm", "__vmaxu2(__vadd2(A, S), 0x00070007u)",
        on(16, False, lambda a, s: mx((a + s) & 0xFFFF, 7), "A", "S"))
    add("vneg2_sub", "__vneg2(__vsub2(A, B))", on(16, False, lambda a, b: b - a, "A", "B"))
    add("vabsdiffu4_imm", "__vabsdiffu4(A, 0x01020304u)", on(8, False, lambda a, k: np.abs(a - k), "A", 0x01020304))
    add("vabsdiffu4_param", "(__vabsdiffu4(S, 0x80ff7f01u) + A)",
        lambda A, B, C, S: on(8, False, lambda s, k: np.abs(s - k), "S", 0x80FF7F01)(A, B, C, S) + A)
    add("vsadu4_acc", "(__vsadu4(A, B) + C)", lambda A, B, C, S: _sad(8, False, ("A", "B"))(A, B, C, S) + C)
    add("vsadu4_two", "(__vsadu4(A, B) + __vsadu4(C, A))", _sad(8, False, ("A", "B"), ("C", "A")))

    # sm_90 DPX functions (CUDA Math API: "Computes max(max(a, b), c)", "max(a + b, c)", "max(max(a, b), 0)",
    # ...; a + b wraps in the lane, two's complement), and min() / max() nested on 32-bit ints
    for t in ("s32", "u32", "s16x2", "u16x2"):
        w, sg = (32 if t.endswith("32") else 16), t.startswith("s")
        wrap = _wrap(w, sg)
        cast = "(int)" if t == "s32" else ""
        a2, a3 = f"{cast}A, {cast}B", f"{cast}A, {cast}B, {cast}C"
        add(f"vimax3_{t}", f"(unsigned)__vimax3_{t}({a3})", on(w, sg, lambda a, b, c: mx(mx(a, b), c), "A", "B", "C"))
        add(f"vimin3_{t}", f"(unsigned)__vimin3_{t}({a3})", on(w, sg, lambda a, b, c: mn(mn(a, b), c), "A", "B", "C"))
        add(f"viaddmax_{t}", f"(unsigned)__viaddmax_{t}({a3})",
            on(w, sg, lambda a, b, c, wrap=wrap: mx(wrap(a + b), c), "A", "B", "C"))
        add(f"viaddmin_{t}", f"(unsigned)__viaddmin_{t}({a3})",
            on(w, sg, lambda a, b, c, wrap=wrap: mn(wrap(a + b), c), "A", "B", "C"))
        if sg:
            add(f"vimax_{t}_relu", f"(unsigned)__vimax_{t}_relu({a2})",
                on(w, sg, lambda a, b: mx(mx(a, b), 0), "A", "B"))
            add(f"vimin_{t}_relu", f"(unsigned)__vimin_{t}_relu({a2})",
                on(w, sg, lambda a, b: mx(mn(a, b), 0), "A", "B"))
            add(f"vimax3_{t}_relu", f"(unsigned)__vimax3_{t}_relu({a3})",
                on(w, sg, lambda a, b, c: mx(mx(mx(a, b), c), 0), "A", "B", "C"))
            add(f"vimin3_{t}_relu", f"(unsigned)__vimin3_{t}_relu({a3})",
                on(w, sg, lambda a, b, c: mx(mn(mn(a, b), c), 0), "A", "B", "C"))
            add(f"viaddmax_{t}_relu", f"(unsigned)__viaddmax_{t}_relu({a3})",
                on(w, sg, lambda a, b, c, wrap=wrap: mx(mx(wrap(a + b), c), 0), "A", "B", "C"))
            add(f"viaddmin_{t}_relu", f"(unsigned)__viaddmin_{t}_relu({a3})",
                on(w, sg, lambda a, b, c, wrap=wrap: mx(mn(wrap(a + b), c), 0), "A", "B", "C"))
    add("min3_s32", "(unsigned)min(min((int)A, (int)B), (int)C)",
        on(32, True, lambda a, b, c: mn(mn(a, b), c), "A", "B", "C"))
    add("max3_u32", "max(max(A, B), C)", on(32, False, lambda a, b, c: mx(mx(a, b), c), "A", "B", "C"))
    return cases


SIMD = _simd_cases()
SIMD_S = np.uint32(0x8001FFFF)  # the uniform operand S


def _kernel_src(name: str, expr: str) -> str:
    return (f'extern "C" __global__ void k_{name}(const unsigned* __restrict__ a, const unsigned* __restrict__ b, '
            f"const unsigned* __restrict__ c, unsigned* __restrict__ o, int n, unsigned S) {{\n"
            f"  const int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
            f"  if (i < n) {{ const unsigned A = a[i], B = b[i], C = c[i]; o[i] = {expr}; }}\n}}\n")


@functools.lru_cache(maxsize=None)
def _module(kind: str, which: str) -> fc.RawModule:
    if kind == "simd":
        src = "".join(_kernel_src(k, e) for k, (e, _) in SIMD.items())
    elif kind == "bf16":
        src = fuzz.PRELUDE + "".join(_bf16_src(k, e) for k, (e, *_) in BF16.items())
    elif kind == "uimad":
        src = UIMAD_SRC
    else:
        src = CONV_SRC
    return fc.RawModule(cubin=fuzz.build(src, which, name=f"video_{kind}.cu"))


def _words() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A, B, C: every ordered pair of 16 edge halves in each half of (A, B), every pair of 12 edge bytes in
    bytes 0 and 1, words of the fuzzer's pool, random words; C mixes the same edges in another order."""
    h = [0, 1, 2, 0x7F, 0x80, 0xFF, 0x100, 0x7FFE, 0x7FFF, 0x8000, 0x8001, 0xFFFE, 0xFFFF, 0x5555, 0xAAAA, 0x1234]
    a16 = [h[i] | h[j] << 16 for i in range(16) for j in range(16)]
    b16 = [h[j] | h[i] << 16 for i in range(16) for j in range(16)]
    c16 = [h[(i * 7 + j) % 16] | h[(j * 3 + i + 5) % 16] << 16 for i in range(16) for j in range(16)]
    e = [0, 1, 2, 0x7E, 0x7F, 0x80, 0x81, 0xFE, 0xFF, 0x40, 0xC0, 0x55]
    ne = len(e)
    a8 = [e[i] | e[j] << 8 | e[(i + j) % ne] << 16 | e[(5 * i + j) % ne] << 24 for i in range(ne) for j in range(ne)]
    b8 = [e[j] | e[i] << 8 | e[(7 * i + 3 * j) % ne] << 16 | e[(j + 1) % ne] << 24
          for i in range(ne) for j in range(ne)]
    c8 = [e[(i + 2 * j) % ne] * 0x01010101 for i in range(ne) for j in range(ne)]
    rng = np.random.default_rng(20250)
    rest = N - len(a16) - len(a8)
    pool = np.asarray(fuzz.POOL, np.uint32)
    extra = [rng.choice(pool, rest), rng.integers(0, 2**32, rest, dtype=np.uint64).astype(np.uint32),
             rng.choice(pool, rest)]
    perm = rng.permutation(rest)
    a = np.concatenate([np.array(a16 + a8, np.uint32), extra[0]])
    b = np.concatenate([np.array(b16 + b8, np.uint32), extra[1]])
    c = np.concatenate([np.array(c16 + c8, np.uint32), np.where(perm % 2 == 0, extra[2], extra[1][perm])])
    return a, b, c.astype(np.uint32)


def _run(fn, args, n: int = N, block: int = BLOCK):
    fn(((n + 7 + block - 1) // block,), (block,), args)


def _launch_words(fn, a, b, c, s):
    out = fc.asarray(np.full(N + 8, 0xCDCDCDCD, np.uint32))
    _run(fn, (fc.asarray(a), fc.asarray(b), fc.asarray(c), out, np.int32(N), np.uint32(s)))
    got = out.get()
    assert (got[N:] == 0xCDCDCDCD).all()  # the lanes past n stored nothing
    return got[:N]


def _forms(mod: fc.RawModule, names) -> set[str]:
    """The instruction forms of the kernels ``names`` (straight-line code: every one runs)."""
    return {ins.name for k in names for ins in mod.get_function(k)._prog().instructions.values()}


@pytest.mark.parametrize("which", fuzz.BUILDS)
@pytest.mark.parametrize("name", sorted(SIMD))
def test_simd_intrinsic_matches_its_definition(which, name):
    a, b, c = _words()
    expr, ref = SIMD[name]
    got = _launch_words(_module("simd", which).get_function(f"k_{name}"), a, b, c, SIMD_S)
    want = np.asarray(ref(a, b, c, SIMD_S), np.uint32)
    bad = np.nonzero(got != want)[0]
    bad = bad[0] if bad.size else None
    assert bad is None, (f"{expr} ({which}): first difference at {int(bad)}: A={a[bad]:#010x} B={b[bad]:#010x} "
                         f"C={c[bad]:#010x}: got {got[bad]:#010x}, want {want[bad]:#010x}")


#: the forms the SIMD kernels must contain (and run), in each build
SIMD_FORMS = {"VIADD.16x2", "VIMNMX.U16x2", "VIMNMX.S16x2", "VIMNMX.S16x2.RELU", "VIMNMX.RELU", "VIMNMX3",
              "VIMNMX3.U32", "VIMNMX3.U16x2", "VIMNMX3.S16x2", "VIMNMX3.RELU", "VIMNMX3.S16x2.RELU",
              "VIADDMNMX.U16x2", "VIADDMNMX.S16x2", "VIADDMNMX.RELU", "VIADDMNMX.S16x2.RELU", "VIADDMNMX",
              "VIADDMNMX.U32", "VABSDIFF4.U8", "VABSDIFF4.U8.ACC"}


@pytest.mark.parametrize("which", fuzz.BUILDS)
def test_simd_kernels_cover_the_packed_forms(which):
    mod = _module("simd", which)
    missing = SIMD_FORMS - _forms(mod, [f"k_{k}" for k in SIMD])
    assert not missing, f"{which}: no kernel ran {sorted(missing)}"
    # VIADD.16x2 with a negated operand (__vsub2) and VIADDMNMX.U16x2 with one (__vmaxu2(__vsub2(a, b), c))
    texts = {ins.text for k in ("vsub2", "vmaxu2_sub")
             for ins in mod.get_function(f"k_{k}")._prog().instructions.values()}
    assert any(t.startswith("VIADD.16x2") and ", -R" in t for t in texts), texts
    assert any(t.startswith("VIADDMNMX.U16x2") and ", -R" in t for t in texts), texts


# ---------------------------------------------------------------------------------------------- refused forms
def _program_of(records):
    mod = fc.RawModule(code='extern "C" __global__ void k(int* p) { p[threadIdx.x] = 1; }')
    prog = mod.get_function("k")._prog()
    instrs = [isa.parse_instruction(16 * i, rec) for i, rec in enumerate(records)]
    return Program(prog.kernel, instrs, {}, None)


@pytest.mark.parametrize("opcode,operands,why", [
    ("VABSDIFF4.U8", "R1, R2, R3, R4", "a third operand other than RZ"),  # merge or add: not established
    ("VABSDIFF4.S8", "R1, R2, R3, RZ", r"\.S8 of VABSDIFF4"),
    ("VABSDIFF4", "R1, R2, R3, RZ", "VABSDIFF4 is not modelled"),
    ("VIADD.16x2", "R1, -R2, R3", "operand '-R2'"),  # a '-' where ptxas has not put one
    ("VIMNMX.U16x2", "R1, R2, -R3, PT", "operand '-R3'"),
    ("VIMNMX.U16x2.RELU", "R1, R2, R3, PT", "VIMNMX.U16x2.RELU"),  # relu of an unsigned lane
    ("VIMNMX.U16x2", "R9, P0, P1, R0, R7, PT", "predicate outputs"),  # __vibmax_u16x2: predicates not established
    ("VIMNMX.U16x2.S16x2", "R1, R2, R3, PT", "VIMNMX.U16x2.S16x2"),
    ("VIADDMNMX.U16x2", "R1, R2, R3, -R4, PT", "operand '-R4'"),
    ("VIADD.16x2", "R1, R2, R3.H1_H1", "operand 'R3.H1_H1'"),
    ("HADD2.F32.BF16_V2", "R1, -RZ, R2.H0_H0", "HADD2.F32.BF16_V2"),
    ("HFMA2.MMA.BF16_V2", "R5, R0, R5, 1.00000001, 1", "packed immediate '1.00000001'"),  # not a bf16 value
    ("HFMA2.BF16_V2.RELU", "R9, R0, R5, R6", r"\.RELU of HFMA2"),
])
def test_forms_whose_meaning_is_not_established_are_refused(opcode, operands, why):
    pred, op = (opcode.split(" ") if " " in opcode else (None, opcode))
    rec = {"opcode": op, "operands": operands}
    if pred:
        rec["predicate"] = pred
    prog = _program_of([rec, {"opcode": "EXIT", "operands": ""}, {"opcode": "EXIT", "operands": ""}])
    with pytest.raises(NotImplementedError, match=why):
        prog.compiled[0](None, None)


# ---------------------------------------------------------------------------------------------- UIMAD.X
UIMAD_SRC = r"""
extern "C" __global__ void umulhi(unsigned* o, unsigned s0, unsigned s1) {
    o[threadIdx.x] = (unsigned)__umul64hi(((unsigned long long)s0 << 32) | s1, 0x9E3779B97F4A7C15ull) + threadIdx.x;
}
extern "C" __global__ void mulhi(unsigned* o, unsigned s0, unsigned s1) {
    const long long x = (long long)(((unsigned long long)s1 << 32) | s0);
    o[threadIdx.x] = (unsigned)((unsigned long long)__mul64hi(x, (long long)0xC3A5C85C97CB3127ull) >> 7) ^ threadIdx.x;
}
"""
UIMAD_VALUES = (0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0xFFFFFFFE, 0x9E3779B9, 0x12345678, 0x00010000)


def _umulhi(s0: int, s1: int) -> int:
    return ((((s0 << 32) | s1) * 0x9E3779B97F4A7C15) >> 64) & 0xFFFFFFFF


def _mulhi(s0: int, s1: int) -> int:
    x = (s1 << 32) | s0
    x -= (1 << 64) if x >> 63 else 0
    k = 0xC3A5C85C97CB3127 - (1 << 64)
    return (((x * k) >> 64) % (1 << 64)) >> 7 & 0xFFFFFFFF


@pytest.mark.parametrize("which", fuzz.BUILDS)
def test_uniform_64bit_products_with_uimad_x(which):
    mod = _module("uimad", which)
    for name, ref in (("umulhi", _umulhi), ("mulhi", _mulhi)):
        fn = mod.get_function(name)
        for s0 in UIMAD_VALUES:
            for s1 in UIMAD_VALUES[::-1]:
                out = fc.asarray(np.zeros(40, np.uint32))
                fn((1,), (40,), (out, np.uint32(s0), np.uint32(s1)))  # a full and a partial warp
                t = np.arange(40, dtype=np.uint64)
                h = ref(s0, s1)
                want = ((h + t) & 0xFFFFFFFF) if name == "umulhi" else (h ^ t)
                np.testing.assert_array_equal(out.get(), want.astype(np.uint32), err_msg=f"{name}({s0:#x}, {s1:#x})")
    assert "UIMAD.X" in mod.get_function("umulhi")._prog().executed_forms()


# ---------------------------------------------------------------------------------------------- bf16x2
def _bf16_src(name: str, expr: str) -> str:
    return (f'extern "C" __global__ void b_{name}(const unsigned* __restrict__ a, const unsigned* __restrict__ b, '
            f"const unsigned* __restrict__ c, unsigned* __restrict__ o, int n) {{\n"
            f"  const int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
            f"  if (i < n) o[i] = B2U({expr});\n}}\n")


_NAN = 0x7FFF  # flashsim's bf16 NaN result (the PTX ISA: "an unspecified NaN"); the GPU fuzz campaign decides it


def _dec(h: int):
    """A bf16 pattern as ('nan',), ('inf', sign) or ('fin', sign, exact magnitude)."""
    s, e, f = h >> 15, (h >> 7) & 0xFF, h & 0x7F
    if e == 0xFF:
        return ("nan",) if f else ("inf", s)
    mag = Fraction(f, 128) * Fraction(2) ** -126 if e == 0 else (1 + Fraction(f, 128)) * Fraction(2) ** (e - 127)
    return ("fin", s, mag)


def _enc(s: int, x: Fraction) -> int:
    """bf16 of (-1)^s * x (x >= 0), rounded to nearest even: subnormals kept, overflow to infinity."""
    if x == 0:
        return s << 15
    e = x.numerator.bit_length() - x.denominator.bit_length()
    while Fraction(2) ** e > x:
        e -= 1
    while Fraction(2) ** (e + 1) <= x:
        e += 1
    q = max(e, -126) - 7  # the exponent of the last kept bit
    t = x / Fraction(2) ** q
    r = t.numerator // t.denominator
    rem = t - r
    if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and r % 2):
        r += 1
    if r == 256:
        r, q = 128, q + 1
    if r < 128:  # subnormal (q == -133)
        return (s << 15) | r
    field = q + 7 + 127
    return (s << 15) | 0x7F80 if field >= 255 else (s << 15) | (field << 7) | (r - 128)


def _signed(d) -> Fraction:
    return -d[2] if d[1] else d[2]


def ref_add(x: int, y: int) -> int:
    """IEEE 754 addition: inf - inf is NaN; an exact zero sum is -0 only for (-0) + (-0)."""
    a, b = _dec(x), _dec(y)
    if a[0] == "nan" or b[0] == "nan" or (a[0] == b[0] == "inf" and a[1] != b[1]):
        return _NAN
    if a[0] == "inf" or b[0] == "inf":
        return 0x7F80 | ((a if a[0] == "inf" else b)[1] << 15)
    total = _signed(a) + _signed(b)
    if total == 0:
        return 0x8000 if (a[2] == 0 and b[2] == 0 and a[1] and b[1]) else 0
    return _enc(int(total < 0), abs(total))


def ref_mul(x: int, y: int) -> int:
    """IEEE 754 multiplication: 0 * inf is NaN; the sign is the XOR of the signs (zeros included)."""
    a, b = _dec(x), _dec(y)
    if a[0] == "nan" or b[0] == "nan":
        return _NAN
    s = a[1] ^ b[1]
    if a[0] == "inf" or b[0] == "inf":
        other = b if a[0] == "inf" else a
        return _NAN if other[0] == "fin" and other[2] == 0 else 0x7F80 | (s << 15)
    return _enc(s, a[2] * b[2])


def ref_fma(x: int, y: int, z: int) -> int:
    """IEEE 754 fusedMultiplyAdd: x * y + z exact, rounded once."""
    a, b, c = _dec(x), _dec(y), _dec(z)
    if "nan" in (a[0], b[0], c[0]):
        return _NAN
    sp = a[1] ^ b[1]
    if a[0] == "inf" or b[0] == "inf":
        other = b if a[0] == "inf" else a
        if other[0] == "fin" and other[2] == 0:
            return _NAN
        if c[0] == "inf" and c[1] != sp:
            return _NAN
        return 0x7F80 | (sp << 15)
    if c[0] == "inf":
        return 0x7F80 | (c[1] << 15)
    p = a[2] * b[2]
    total = (-p if sp else p) + _signed(c)
    if total == 0:
        return 0x8000 if (p == 0 and c[2] == 0 and sp and c[1]) else 0
    return _enc(int(total < 0), abs(total))


def ref_neg(x: int) -> int:
    return _NAN if _dec(x)[0] == "nan" else x ^ 0x8000


def ref_abs(x: int) -> int:
    return _NAN if _dec(x)[0] == "nan" else x & 0x7FFF


def _halves2(f):
    def g(A, B, C):
        out = np.empty(len(A), np.uint32)
        for i, (x, y, z) in enumerate(zip(A.tolist(), B.tolist(), C.tolist())):
            lo = f(x & 0xFFFF, y & 0xFFFF, z & 0xFFFF)
            hi = f(x >> 16, y >> 16, z >> 16)
            out[i] = lo | (hi << 16)
        return out
    return g


#: kernel name -> (bf16x2 expression, the reference of one half (x, y, z), constant pairs (b, c) or None): a
#: kernel's constant replaces the operand it stands for (y or z; the kernels with a constant b read their c from
#: b[i]). nvdisasm prints constants as bf16 values (3, 0.5; the largest finite and the smallest normal; the
#: smallest subnormal), NaN halves as +QNAN without payload.
BF16 = {
    "fma": ("__hfma2(U2B(a[i]), U2B(b[i]), U2B(c[i]))", ref_fma, None, None),
    "add": ("__hadd2(U2B(a[i]), U2B(b[i]))", lambda x, y, z: ref_add(x, y), None, None),
    "add_rn": ("__hadd2_rn(U2B(a[i]), U2B(b[i]))", lambda x, y, z: ref_add(x, y), None, None),
    "sub": ("__hsub2(U2B(a[i]), U2B(b[i]))", lambda x, y, z: ref_add(x, y ^ 0x8000), None, None),
    "mul": ("__hmul2(U2B(a[i]), U2B(b[i]))", lambda x, y, z: ref_mul(x, y), None, None),
    "mul_rn": ("__hmul2_rn(U2B(a[i]), U2B(b[i]))", lambda x, y, z: ref_mul(x, y), None, None),
    "neg": ("__hneg2(U2B(a[i]))", lambda x, y, z: ref_neg(x), None, None),
    "abs": ("__habs2(U2B(a[i]))", lambda x, y, z: ref_abs(x), None, None),
    "mul_imm": ("__hmul2(U2B(a[i]), U2B(0x40403F00u))", lambda x, y, z: ref_mul(x, y), 0x40403F00, None),
    "mul_imm2": ("__hmul2(U2B(a[i]), U2B(0x7F7F0080u))", lambda x, y, z: ref_mul(x, y), 0x7F7F0080, None),
    "fma_imm": ("__hfma2(U2B(a[i]), U2B(0x00017F7Fu), U2B(b[i]))", ref_fma, 0x00017F7F, None),
    "fma_imm2": ("__hfma2(U2B(a[i]), U2B(0x3F813F7Fu), U2B(b[i]))", ref_fma, 0x3F813F7F, None),
    "add_imm": ("__hadd2(U2B(a[i]), U2B(0x3DCD3E4Du))", lambda x, y, z: ref_add(x, y), 0x3DCD3E4D, None),
    "add_nan_imm": ("__hadd2(U2B(a[i]), U2B(0x7FC0FF80u))", lambda x, y, z: ref_add(x, y), 0x7FC0FF80, None),
    "fma_nan_imm": ("__hfma2(U2B(a[i]), U2B(b[i]), U2B(0xFF807FA0u))", ref_fma, None, 0xFF807FA0),
}

#: bf16 edge cases: zeros, the smallest and largest subnormals, the smallest normal, 1 and its neighbours,
#: the largest finite, infinities, quiet and signalling NaNs, halves of an ulp at 1 and at the largest finite
#: (ties to even, overflow by a tie), and values whose products underflow or overflow
BF16_EDGES = (0x0000, 0x8000, 0x0001, 0x8001, 0x007F, 0x0080, 0x8080, 0x3F80, 0xBF80, 0x3F81, 0x3F7F, 0x4000,
              0xC040, 0x7F7F, 0xFF7F, 0x7F80, 0xFF80, 0x7FC0, 0x7FA0, 0x3B80, 0xBB80, 0x7B00, 0x1F80, 0x5F80,
              0x2000, 0x0040)


def _bf16_words() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every (x, y) of the edges in the low halves with z cycling; the high halves a permutation of the
    triples; then random patterns (rounding in both directions, ties)."""
    e = BF16_EDGES
    ne = len(e)
    idx = [(i, j) for i in range(ne) for j in range(ne)]
    lo = [(e[i], e[j], e[(i * 5 + j * 3) % ne]) for i, j in idx]
    rng = np.random.default_rng(7)
    hi = [lo[k] for k in rng.permutation(len(lo))]
    hi = [(y, z, x) for x, y, z in hi]
    a = [x | (p[0] << 16) for (x, _, _), p in zip(lo, hi)]
    b = [y | (p[1] << 16) for (_, y, _), p in zip(lo, hi)]
    c = [z | (p[2] << 16) for (_, _, z), p in zip(lo, hi)]
    rest = N - len(a)
    # random finite patterns of nearby exponents, so that sums round and cancel
    def rnd():
        s = rng.integers(0, 2, rest) << 15
        ex = rng.integers(110, 140, rest) << 7
        return (s | ex | rng.integers(0, 128, rest)).astype(np.uint32)
    words = [np.concatenate([np.array(v, np.uint32), rnd() | (rnd() << 16)]) for v in (a, b, c)]
    return words[0], words[1], words[2]


@pytest.mark.parametrize("which", fuzz.BUILDS)
@pytest.mark.parametrize("name", sorted(BF16))
def test_bf16x2_arithmetic_matches_ieee_fractions(which, name):
    a, b, c = _bf16_words()
    fn = _module("bf16", which).get_function(f"b_{name}")
    out = fc.asarray(np.full(N + 8, 0xCDCDCDCD, np.uint32))
    _run(fn, (fc.asarray(a), fc.asarray(b), fc.asarray(c), out, np.int32(N)))
    got = out.get()
    assert (got[N:] == 0xCDCDCDCD).all()
    got = got[:N]
    expr, f, kb, kc = BF16[name]
    y = b if kb is None else np.full(N, kb, np.uint32)
    z = (b if kb is not None else c) if kc is None else np.full(N, kc, np.uint32)
    want = _halves2(f)(a, y, z)
    bad = np.nonzero(got != want)[0]
    assert not bad.size, (f"{BF16[name][0]} ({which}): {bad.size} of {N} differ, first at {int(bad[0])}: "
                          f"a={a[bad[0]]:#010x} b={b[bad[0]]:#010x} c={c[bad[0]]:#010x}: got {got[bad[0]]:#010x}, "
                          f"want {want[bad[0]]:#010x}")


@pytest.mark.parametrize("which", fuzz.BUILDS)
def test_bf16x2_kernels_run_the_bf16_forms(which):
    mod = _module("bf16", which)
    forms = _forms(mod, [f"b_{k}" for k in BF16])
    assert {"HFMA2.MMA.BF16_V2", "HFMA2.BF16_V2", "HADD2.BF16_V2"} <= forms, sorted(forms)
    texts = {ins.text for k in ("add_nan_imm", "fma_nan_imm")
             for ins in mod.get_function(f"b_{k}")._prog().instructions.values()}
    assert sum("NAN" in t and "BF16_V2" in t for t in texts) == 2, texts  # +QNAN, +SNAN: the NaN immediates are read


def test_the_bf16_model_against_fractions_over_edge_triples():
    # flashsim.numerics.half directly: every triple of the edge cases, and random patterns of every kind
    e = np.array(BF16_EDGES, np.uint16)
    x, y, z = (g.ravel() for g in np.meshgrid(e, e, e, indexing="ij"))
    rng = np.random.default_rng(11)
    r = rng.integers(0, 1 << 16, (3, 20000)).astype(np.uint16)
    x, y, z = (np.concatenate([u, v]) for u, v in zip((x, y, z), r))
    got_fma = half.fma(x, y, z, fmt="bf16")
    got_add, got_mul = half.add(x, y, fmt="bf16"), half.mul(x, y, fmt="bf16")
    for i in range(len(x)):
        xi, yi, zi = int(x[i]), int(y[i]), int(z[i])
        assert got_fma[i] == ref_fma(xi, yi, zi), (hex(xi), hex(yi), hex(zi), hex(int(got_fma[i])))
        assert got_add[i] == ref_add(xi, yi), (hex(xi), hex(yi), hex(int(got_add[i])))
        assert got_mul[i] == ref_mul(xi, yi), (hex(xi), hex(yi), hex(int(got_mul[i])))


def test_relu_keeps_the_canonical_nan():
    # PTX ISA, fma: ".relu clamps the result to 0 if negative. NaN result is converted to canonical NaN"
    v = np.array([0x7FC0, 0xBF80, 0x3F80, 0x7F80], np.uint16)
    one = np.full(4, 0x3F80, np.uint16)
    zero = np.zeros(4, np.uint16)
    out = half.fma(v, one, zero, fmt="bf16", relu=True)
    assert [hex(int(h)) for h in out] == ["0x7fff", "0x0", "0x3f80", "0x7f80"]


# ---------------------------------------------------------------------------------------------- BRA.CONV
# ptxas's pattern of flashsim.fuzz programs: a __ballot_sync whose result is unused, under a mask held in a
# register (R2UR), after code it could not prove converged: BRA.CONV Umask, end jumps over a WARPSYNC.COLLECTIVE
# region that votes. `extra` widens the ballot's mask by lanes that have exited: the warp is then not converged
# on it and the region runs (the mask's live lanes meet there).
CONV_SRC = r"""
extern "C" __global__ void conv(const unsigned* in, unsigned* out, unsigned k, unsigned extra) {
  const unsigned tid = blockIdx.x * blockDim.x + threadIdx.x, lane = threadIdx.x & 31u;
  unsigned a = in[tid], b = in[tid + 256], c = 0u;
  unsigned m = 0xffffffffu;
  const bool p = (a & 1u) != 0u;
  const unsigned t = __ballot_sync(m, p);
  if (p) { b = 0u; } else { int q; c ^= __match_all_sync(m & ~t, a & k, &q); c += (unsigned)q; }
  const bool r = (a % 7u) == 3u;
  m = __ballot_sync(m, !r);
  if (r) { out[tid] = a; out[tid + 256] = b; out[tid + 512] = c; return; }
  if ((lane & 2u) == 0u) { c ^= __reduce_max_sync(m & 0x33333333u, a); }
  else { const bool s = (b & 1u) != 0u; const unsigned u = __ballot_sync((m | extra) & 0xccccccccu, s); if (s) { } }
  out[tid] = a; out[tid + 256] = b; out[tid + 512] = c;
}
"""


def _conv_ref(a: np.ndarray, b: np.ndarray, k: int):
    a, b = a.astype(np.int64), b.astype(np.int64).copy()
    c = np.zeros(256, np.int64)
    for w in range(8):
        sl = slice(32 * w, 32 * w + 32)
        aw, bw, cw = a[sl], b[sl], c[sl]
        p = (aw & 1) != 0
        vals = (aw & k)[~p]
        same = vals.size and (vals == vals[0]).all()
        mask_bits = sum(1 << int(i) for i in np.nonzero(~p)[0])
        cw[~p] = (mask_bits if same else 0) + (1 if same else 0)
        bw[p] = 0
        r = (aw % 7) == 3
        lane = np.arange(32)
        low = ((lane & 2) == 0) & ~r
        if low.any():
            cw[low] ^= aw[low].max()  # __reduce_max_sync over the live lanes of the 0x33333333 half
    return np.concatenate([a, b, c]).astype(np.uint32)


@pytest.mark.parametrize("which", fuzz.BUILDS)
def test_bra_conv_takes_the_fast_path_only_when_converged(which):
    mod = _module("conv", which)
    fn = mod.get_function("conv")
    prog = fn._prog()
    convs = [ins for ins in prog.instructions.values() if ins.name == "BRA.CONV"]
    assert len(convs) == 1, [i.text for i in prog.instructions.values()]
    pc = convs[0].pc
    rng = np.random.default_rng(5)
    a = rng.integers(0, 2**32, 512, dtype=np.uint64).astype(np.uint32)
    a[:64] = np.arange(64, dtype=np.uint32) * 7  # two warps no lane leaves (a % 7 != 3): converged either way
    for k, extra in ((0x3, 0), (0x3, 0xFFFFFFFF), (0, 0), (0, 0xFFFFFFFF)):
        before = prog.hits.copy()
        out = fc.asarray(np.full(768, 0xCDCDCDCD, np.uint32))
        fn((4,), (64,), (fc.asarray(a), out, np.uint32(k), np.uint32(extra)))
        np.testing.assert_array_equal(out.get(), _conv_ref(a[:256], a[256:], k), err_msg=f"k={k} extra={extra:#x}")
        hits = prog.hits - before
        assert hits[pc >> 4] > 0
        fallthrough = int(hits[(pc >> 4) + 1])  # BSSY of the WARPSYNC.COLLECTIVE region
        if extra == 0:
            assert fallthrough == 0  # every lane of the mask is at BRA.CONV: it jumps, in every warp
        else:
            assert fallthrough > 0  # exited lanes in the mask: not converged, the region runs
