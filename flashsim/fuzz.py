"""Differential fuzzing of the SASS interpreter: random CUDA C programs, their SASS from two compilers, and
the interpreter's outputs, bit for bit against what the GPU computed for the same cubin.

A program is plain data (JSON-able lists, :func:`programs` draws them with hypothesis) that
:func:`render` turns into one ``__global__`` function. Every thread holds ``NV`` 32-bit values, loaded from
``in``, and runs a random body over them: integer, float (every rounding-mode intrinsic), half and bf16,
conversion and memory expressions on edge-case operands; data-dependent ``if``/``else`` and loops that
lanes leave at different iterations (``break``), uniform branches and loops (kernel parameters,
``blockIdx``: the compiler's uniform datapath), lane-pattern branches, early ``return`` of some lanes;
votes, ballots, ``__match_*_sync``, ``__reduce_*_sync``, shuffles (every mode and width), ``__syncwarp``,
``__activemask``; shared-memory exchanges, shared and global atomics, local arrays, ``__constant__``
tables, indexed and narrow global loads. At the end (or at its early ``return``) every thread writes its
values to ``out``: the whole state of every lane is compared.

Programs are defined by construction, so a difference is a bug of the interpreter, not of the program, with
two exceptions the H200 showed, which are told apart and not compared: a generator version 2 program with two
atomic operations on one global accumulator word (:func:`order_dependent`; version 3 cannot make one), and a
program whose SASS reads bits of a pointer that the source never asked for (:func:`address_dependent`: its
outputs change in the interpreter when its arrays move). Every collective's member mask is exactly the set of lanes that execute it (kept by the renderer
as a ballot taken at each data-dependent branch, or as a constant where the set is known statically);
shuffles read only lanes of that set (xor/up/down/width forms only where the renderer proves it, otherwise
a leader broadcast or a lane picked with ``__fns``); shared memory is exchanged between ``__syncwarp``
(or ``__syncthreads`` where every thread of the CTA is present); atomics whose result depends on the
order of arrival are not read; shifts are taken mod 32, divisors are odd or positive.

:func:`build` compiles a batch of programs into one module (NVRTC 13.0, or NVRTC's PTX through a second
ptxas: Triton's bundled 12.8), :func:`run_interp` runs each in the interpreter, :func:`shrink` reduces a
program whose outputs differ to a minimal one that still differs. The GPU side (``python -m
flashsim.gpu.fuzz``) runs the same cubins on an H100; its corpora replay here (:func:`replay`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from flashsim.errors import FlashsimError, bad_argument

__all__ = ["BUILDS", "NV", "Batch", "Outcome", "build", "digest", "draw_program", "draw_programs", "inputs",
           "address_dependent", "order_dependent", "program_forms",
           "programs", "render", "render_module", "run_interp", "shrink", "GENERATOR_VERSION"]

#: bump when the generator or the renderer changes what a program means (recorded in every corpus). Version 3
#: gives each global accumulator word one atomic operation (version 2's atomicMin and atomicAdd could meet on a
#: word, whose final value then depends on the order the CTAs' atomics arrive: :func:`order_dependent`) and
#: stops emitting shared atomics past the per-warp slots instead of sharing a slot between two sites.
GENERATOR_VERSION = 3
G_ATOMS = ("atomicAdd", "atomicOr", "atomicXor", "atomicMax", "atomicMin")
G_WORDS = 3  # global accumulator words per operation (version 3)
NV = 6  # 32-bit values per thread
NIN = 1024  # words of the input table every thread may index
NSITE = 8  # shared atomic accumulators per warp
NGACC = 16  # global atomic accumulators (after the per-thread values in ``out``)
SENTINEL = 0xCDCDCDCD  # what ``out`` holds before the launch
#: the builds of a program: NVRTC 13.0 (the project's compiler) and NVRTC's PTX through Triton's ptxas 12.8
BUILDS = ("nvrtc13", "ptxas128")

# ---------------------------------------------------------------------------------------------- operands
#: 32-bit edge cases: integer boundaries, shift widths, and float specials (zeros, subnormals, the normal
#: range's ends, infinities, quiet and signalling NaNs, integers at rounding boundaries, f16 halves)
POOL = (
    0, 1, 2, 3, 7, 8, 15, 16, 31, 32, 33, 63, 64, 255, 256, 0xFFFF, 0x10000, 0x7FFFFFFF, 0x80000000, 0x80000001,
    0xFFFFFFFF, 0xFFFFFFFE, 0xAAAAAAAA, 0x55555555, 0x0F0F0F0F, 0x01234567, 0x89ABCDEF,
    0x3F800000, 0xBF800000, 0x3F000000, 0x3FC00000, 0x40200000, 0x40000000, 0x4B000000, 0x4B000001, 0x4F000000,
    0xCF000000, 0x5F000000, 0x5F800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x00800000, 0x80800000, 0x007FFFFF, 0x00000001,
    0x80000001, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7FA00000, 0x7F800001, 0x33800000, 0x34000000,
    0x3EAAAAAB, 0x3F7FFFFF, 0x3F800001, 0x477FE000, 0x477FF000, 0x38800000, 0x33000000, 0x3C003C00, 0x7C00FC00,
    0x7E007E00, 0x00010001, 0x3F803F80, 0x7F807F80, 0x80008000,
)


@dataclass(frozen=True)
class Op:
    """One expression operator: C template over its operands ({0}, {1}, ...)."""

    name: str
    arity: int
    template: str
    family: str


def _ops() -> dict[str, Op]:
    t: list[tuple[str, int, str, str]] = []
    add = t.append
    # integer
    for name, c in (("add", "+"), ("sub", "-"), ("mul", "*"), ("xor", "^"), ("and", "&"), ("or", "|")):
        add((name, 2, f"({{0}} {c} {{1}})", "int"))
    add(("not", 1, "(~{0})", "int"))
    add(("neg", 1, "(0u - {0})", "int"))
    add(("shl", 2, "({0} << ({1} & 31u))", "int"))
    add(("shr", 2, "({0} >> ({1} & 31u))", "int"))
    add(("sar", 2, "((unsigned)((int){0} >> ({1} & 31u)))", "int"))
    add(("umin", 2, "min({0}, {1})", "int"))
    add(("umax", 2, "max({0}, {1})", "int"))
    add(("smin", 2, "((unsigned)min((int){0}, (int){1}))", "int"))
    add(("smax", 2, "((unsigned)max((int){0}, (int){1}))", "int"))
    add(("sabs", 1, "((unsigned)abs((int){0}))", "int"))
    add(("umulhi", 2, "__umulhi({0}, {1})", "int"))
    add(("mulhi", 2, "((unsigned)__mulhi((int){0}, (int){1}))", "int"))
    add(("umul24", 2, "__umul24({0}, {1})", "int"))
    add(("mul24", 2, "((unsigned)__mul24((int){0}, (int){1}))", "int"))
    add(("usad", 3, "__usad({0}, {1}, {2})", "int"))
    add(("sad", 3, "((unsigned)__sad((int){0}, (int){1}, {2}))", "int"))
    add(("popc", 1, "((unsigned)__popc({0}))", "int"))
    add(("clz", 1, "((unsigned)__clz((int){0}))", "int"))
    add(("ffs", 1, "((unsigned)__ffs((int){0}))", "int"))
    add(("brev", 1, "__brev({0})", "int"))
    add(("perm", 3, "__byte_perm({0}, {1}, {2})", "int"))
    add(("fshl", 3, "__funnelshift_l({0}, {1}, {2})", "int"))
    add(("fshr", 3, "__funnelshift_r({0}, {1}, {2})", "int"))
    add(("fshlc", 3, "__funnelshift_lc({0}, {1}, {2})", "int"))
    add(("fshrc", 3, "__funnelshift_rc({0}, {1}, {2})", "int"))
    add(("udiv", 2, "({0} / ({1} | 1u))", "int"))
    add(("urem", 2, "({0} % ({1} | 1u))", "int"))
    add(("sdiv", 2, "((unsigned)((int){0} / (int)(({1} & 0x7fffffffu) | 1u)))", "int"))
    add(("srem", 2, "((unsigned)((int){0} % (int)(({1} & 0x7fffffffu) | 1u)))", "int"))
    add(("udiv7", 1, "({0} / 7u)", "int"))
    add(("sdiv10", 1, "((unsigned)((int){0} / -10))", "int"))
    add(("ult", 2, "((unsigned)({0} < {1}))", "int"))
    add(("slt", 2, "((unsigned)((int){0} < (int){1}))", "int"))
    add(("eq", 2, "((unsigned)({0} == {1}))", "int"))
    add(("sge", 2, "((unsigned)((int){0} >= (int){1}))", "int"))
    add(("sel", 3, "(({0} & 1u) ? {1} : {2})", "int"))
    add(("land", 2, "((unsigned)(({0} != 0u) && ({1} > 7u)))", "int"))
    add(("mul64hi", 2, "((unsigned)(((unsigned long long){0} * {1}) >> 32))", "int64"))
    add(("mad64", 3, "((unsigned)((((unsigned long long){0} << 32) | {1}) * (unsigned long long){2} >> 29))",
         "int64"))
    add(("add64", 3, "((unsigned)(((((unsigned long long){0} << 32) | {1}) + ((unsigned long long){2} << 7)) >> 32))",
         "int64"))
    add(("shr64", 3, "((unsigned)((((unsigned long long){0} << 32) | {1}) >> ({2} & 63u)))", "int64"))
    add(("sar64", 3, "((unsigned)(((long long)(((unsigned long long){0} << 32) | {1})) >> ({2} & 63u)))", "int64"))
    add(("slt64", 3, "((unsigned)((long long)(((unsigned long long){0} << 32) | {1}) < (long long){2}))",
         "int64"))
    add(("udiv64", 3, "((unsigned)((((unsigned long long){0} << 32) | {1}) / ((unsigned long long){2} | 1u)))",
         "int64"))
    add(("umul64hi", 2, "((unsigned)__umul64hi(((unsigned long long){0} << 32) | {1}, 0x9E3779B97F4A7C15ull))",
         "int64"))
    add(("vadd2", 2, "__vadd2({0}, {1})", "simd"))
    add(("vsub4", 2, "__vsub4({0}, {1})", "simd"))
    add(("vabsdiff4", 2, "__vabsdiffu4({0}, {1})", "simd"))
    add(("vmaxu2", 2, "__vmaxu2({0}, {1})", "simd"))
    add(("vcmpeq4", 2, "__vcmpeq4({0}, {1})", "simd"))
    # f32 (operands reinterpreted)
    add(("fadd", 2, "U(F({0}) + F({1}))", "f32"))
    add(("fsub", 2, "U(F({0}) - F({1}))", "f32"))
    add(("fmul", 2, "U(F({0}) * F({1}))", "f32"))
    add(("ffma", 3, "U(fmaf(F({0}), F({1}), F({2})))", "f32"))
    for r in ("rn", "rz", "rd", "ru"):
        add((f"fadd_{r}", 2, f"U(__fadd_{r}(F({{0}}), F({{1}})))", "f32"))
        add((f"fmul_{r}", 2, f"U(__fmul_{r}(F({{0}}), F({{1}})))", "f32"))
        add((f"ffma_{r}", 3, f"U(__fmaf_{r}(F({{0}}), F({{1}}), F({{2}})))", "f32"))
        add((f"f2i_{r}", 1, f"((unsigned)__float2int_{r}(F({{0}})))", "cvt"))
        add((f"f2u_{r}", 1, f"__float2uint_{r}(F({{0}}))", "cvt"))
        add((f"f2ll_{r}", 1, f"((unsigned)(__float2ll_{r}(F({{0}})) >> 17))", "cvt"))
        add((f"f2ull_{r}", 1, f"((unsigned)(__float2ull_{r}(F({{0}})) >> 32))", "cvt"))
        add((f"i2f_{r}", 1, f"U(__int2float_{r}((int){{0}}))", "cvt"))
        add((f"u2f_{r}", 1, f"U(__uint2float_{r}({{0}}))", "cvt"))
        add((f"ll2f_{r}", 2, f"U(__ll2float_{r}((long long)(((unsigned long long){{0}} << 32) | {{1}})))", "cvt"))
        add((f"f2h_{r}", 1, f"((unsigned)__half_as_ushort(__float2half_{r}(F({{0}}))))", "half"))
    add(("fdiv", 2, "U(F({0}) / F({1}))", "f32"))
    add(("fdiv_fast", 2, "U(__fdividef(F({0}), F({1})))", "f32"))
    add(("frcp", 1, "U(__frcp_rn(F({0})))", "f32"))
    add(("fsqrt", 1, "U(sqrtf(F({0})))", "f32"))
    add(("frsqrt", 1, "U(rsqrtf(F({0})))", "f32"))
    add(("fexp", 1, "U(__expf(F({0})))", "sfu"))
    add(("fexp2", 1, "U(exp2f(F({0})))", "sfu"))
    add(("flog2", 1, "U(__log2f(F({0})))", "sfu"))
    add(("fmin", 2, "U(fminf(F({0}), F({1})))", "f32"))
    add(("fmax", 2, "U(fmaxf(F({0}), F({1})))", "f32"))
    add(("fabs", 1, "U(fabsf(F({0})))", "f32"))
    add(("fneg", 1, "U(-F({0}))", "f32"))
    add(("fsat", 1, "U(__saturatef(F({0})))", "f32"))
    add(("frint", 1, "U(rintf(F({0})))", "f32"))
    add(("ffloor", 1, "U(floorf(F({0})))", "f32"))
    add(("fceil", 1, "U(ceilf(F({0})))", "f32"))
    add(("ftrunc", 1, "U(truncf(F({0})))", "f32"))
    add(("flt", 2, "((unsigned)(F({0}) < F({1})))", "f32"))
    add(("fgeu", 2, "((unsigned)!(F({0}) < F({1})))", "f32"))
    add(("feq", 2, "((unsigned)(F({0}) == F({1})))", "f32"))
    add(("fnan", 1, "((unsigned)isnan(F({0})))", "f32"))
    add(("fsel", 3, "(F({0}) > F({1}) ? {2} : {0})", "f32"))
    # 16-bit floats
    add(("h2f", 1, "U(__half2float(__ushort_as_half((unsigned short){0})))", "half"))
    add(("f2h2", 2, "H2U(__floats2half2_rn(F({0}), F({1})))", "half"))
    add(("hadd2", 2, "H2U(__hadd2(U2H({0}), U2H({1})))", "half"))
    add(("hmul2", 2, "H2U(__hmul2(U2H({0}), U2H({1})))", "half"))
    add(("hfma2", 3, "H2U(__hfma2(U2H({0}), U2H({1}), U2H({2})))", "half"))
    add(("f2bf", 1, "((unsigned)__bfloat16_as_ushort(__float2bfloat16_rn(F({0}))))", "half"))
    add(("bf2f", 1, "U(__bfloat162float(__ushort_as_bfloat16((unsigned short){0})))", "half"))
    add(("f2bf2", 2, "B2U(__floats2bfloat162_rn(F({0}), F({1})))", "half"))
    add(("bfadd2", 2, "B2U(__hadd2(U2B({0}), U2B({1})))", "half"))
    add(("bffma2", 3, "B2U(__hfma2(U2B({0}), U2B({1}), U2B({2})))", "half"))
    # memory: the input table (indexed, narrow, vector, read-only path) and the program's constant table
    add(("ld", 1, "in[{0} & 1023u]", "mem"))
    add(("ldg", 1, "__ldg(&in[{0} & 1023u])", "mem"))
    add(("ldu8", 1, "((unsigned)((const unsigned char*)in)[{0} & 4095u])", "mem"))
    add(("lds8", 1, "((unsigned)(int)((const signed char*)in)[{0} & 4095u])", "mem"))
    add(("ldu16", 1, "((unsigned)((const unsigned short*)in)[{0} & 2047u])", "mem"))
    add(("ld64", 1, "((const uint2*)in)[{0} & 511u].y", "mem"))
    add(("ld128", 1, "((const uint4*)in)[{0} & 255u].z", "mem"))
    add(("ldc", 1, "CTAB[{0} & 63u]", "mem"))
    return {name: Op(name, arity, template, fam) for name, arity, template, fam in t}


OPS = _ops()
OP_NAMES = tuple(sorted(OPS))
LEAVES = ("var", "var", "var", "var", "const", "lane", "tid", "cta", "s0", "s1", "iter")

WARP_KINDS = ("ballot", "any", "all", "active", "match_any", "match_all", "match64", "redux_add", "redux_min",
              "redux_max", "redux_smin", "redux_smax", "redux_and", "redux_or", "redux_xor", "shfl_leader",
              "shfl_pick", "shfl_xor", "shfl_up", "shfl_down", "shfl_idx", "syncwarp", "sh_xchg", "sh_atom",
              "sh_atom_ret", "g_atom", "local", "cross")
STMT_KINDS = ("set", "set", "set", "set", "set", "if_data", "if_data", "if_lane", "if_uniform", "loop", "uloop",
              "ret", "warp", "warp", "warp")


# ---------------------------------------------------------------------------------------------- hypothesis
def programs(max_stmts: int = 28, max_depth: int = 3):
    """A hypothesis strategy of programs (dicts of lists and ints)."""
    from hypothesis import strategies as st

    consts = st.one_of(st.sampled_from(POOL), st.integers(0, 0xFFFFFFFF), st.integers(0, 64))

    @st.composite
    def expr(draw, depth):
        if depth <= 0 or draw(st.integers(0, 9)) < 3:
            leaf = draw(st.sampled_from(LEAVES))
            if leaf == "var":
                return ["v", draw(st.integers(0, NV - 1))]
            if leaf == "const":
                return ["k", draw(consts)]
            return [leaf]
        name = draw(st.sampled_from(OP_NAMES))
        return [name] + [draw(expr(depth - 1)) for _ in range(OPS[name].arity)]

    @st.composite
    def block(draw, depth, budget, top):
        out = []
        n = draw(st.integers(1, 6 if depth else 10))
        for _ in range(n):
            if budget[0] <= 0:
                break
            budget[0] -= 1
            kind = draw(st.sampled_from(STMT_KINDS))
            if kind.startswith(("if", "loop", "uloop")) and depth >= max_depth:
                kind = "set"
            if kind == "set":
                out.append(["set", draw(st.integers(0, NV - 1)), draw(expr(3))])
            elif kind == "if_data":
                out.append(["if", "data", draw(expr(2)), draw(block(depth + 1, budget, False)),
                            draw(block(depth + 1, budget, False)) if draw(st.booleans()) else []])
            elif kind == "if_lane":
                k = draw(st.sampled_from((1, 2, 3, 4, 8, 16, 24, 31, 0x11)))
                c = draw(st.integers(0, 31)) & k
                out.append(["if", "lane", [k, c], draw(block(depth + 1, budget, False)),
                            draw(block(depth + 1, budget, False)) if draw(st.booleans()) else []])
            elif kind == "if_uniform":
                out.append(["if", "uniform", draw(st.sampled_from(("s0", "s1", "cta"))), [draw(st.integers(0, 31))],
                            draw(block(depth + 1, budget, False)), draw(block(depth + 1, budget, False))])
            elif kind == "loop":
                out.append(["loop", draw(st.integers(1, 5)), draw(expr(2)), draw(block(depth + 1, budget, False))])
            elif kind == "uloop":
                out.append(["uloop", draw(st.sampled_from(("s0", "s1"))), draw(block(depth + 1, budget, False))])
            elif kind == "ret":
                out.append(["ret", draw(expr(2))])
            else:
                w = draw(st.sampled_from(WARP_KINDS))
                out.append(["warp", w, draw(st.integers(0, NV - 1)), draw(expr(2)), draw(expr(1)),
                            draw(st.integers(0, 31)), draw(st.sampled_from((32, 32, 16, 8, 4, 2)))])
        return out

    @st.composite
    def program(draw):
        budget = [draw(st.integers(3, max_stmts))]
        return {"v": GENERATOR_VERSION,
                "block": draw(st.sampled_from((32, 64, 64, 96, 48))),
                "grid": draw(st.sampled_from((1, 2))),
                "s": [draw(consts), draw(consts)],
                "seed": draw(st.integers(0, 2**31 - 1)),
                "body": draw(block(0, budget, True))}

    return program()


def _provider():
    """hypothesis' own choice provider, without the literal constants it harvests from the modules imported
    so far (they would make a program depend on what else the process has imported)."""
    from hypothesis.internal.conjecture.providers import Constants, HypothesisProvider

    class Provider(HypothesisProvider):
        _local_constants = Constants()

    return Provider


def draw_program(seed: int, **kw) -> dict:
    """One program of :func:`programs`, drawn from a ``random.Random(seed)`` choice stream: the same
    program for the same seed and hypothesis release, in any process."""
    import random

    from hypothesis.internal.conjecture.data import ConjectureData

    data = ConjectureData(random=random.Random(seed), provider=_provider(), max_choices=200_000)
    return data.draw(programs(**kw))


def draw_programs(n: int, seed: int, **kw) -> list[dict]:
    """``n`` programs (:func:`draw_program` of seeds derived from ``seed``)."""
    if not isinstance(n, int) or n < 0:
        raise bad_argument("n", n, "expected a count >= 0")
    return [draw_program(seed * 1_000_003 + k, **kw) for k in range(n)]


# ---------------------------------------------------------------------------------------------- rendering
_HEAD = r"""#include <cuda_fp16.h>
#include <cuda_bf16.h>
static __device__ __forceinline__ float F(unsigned x) { return __uint_as_float(x); }
static __device__ __forceinline__ unsigned U(float x) { return __float_as_uint(x); }
"""
#: the helpers of each generator version. Version 1 moved 16-bit pairs through a reinterpret_cast, which
#: breaks C++'s aliasing rule: ptxas then kept stale high halves (two H200 differences of campaign seed 2
#: were the program's, not the interpreter's); version 2 builds and splits pairs with the intrinsics.
PRELUDES = {
    1: _HEAD + r"""static __device__ __forceinline__ __half2 U2H(unsigned x) { __half2 h; *reinterpret_cast<unsigned*>(&h) = x; return h; }
static __device__ __forceinline__ unsigned H2U(__half2 h) { return *reinterpret_cast<unsigned*>(&h); }
static __device__ __forceinline__ __nv_bfloat162 U2B(unsigned x) { __nv_bfloat162 h; *reinterpret_cast<unsigned*>(&h) = x; return h; }
static __device__ __forceinline__ unsigned B2U(__nv_bfloat162 h) { return *reinterpret_cast<unsigned*>(&h); }
""",
    2: _HEAD + r"""static __device__ __forceinline__ __half2 U2H(unsigned x) {
  return __halves2half2(__ushort_as_half((unsigned short)x), __ushort_as_half((unsigned short)(x >> 16))); }
static __device__ __forceinline__ unsigned H2U(__half2 h) {
  return (unsigned)__half_as_ushort(__low2half(h)) | ((unsigned)__half_as_ushort(__high2half(h)) << 16); }
static __device__ __forceinline__ __nv_bfloat162 U2B(unsigned x) {
  return __halves2bfloat162(__ushort_as_bfloat16((unsigned short)x), __ushort_as_bfloat16((unsigned short)(x >> 16))); }
static __device__ __forceinline__ unsigned B2U(__nv_bfloat162 h) {
  return (unsigned)__bfloat16_as_ushort(__low2bfloat16(h)) | ((unsigned)__bfloat16_as_ushort(__high2bfloat16(h)) << 16); }
""",
}
PRELUDES[3] = PRELUDES[2]  # version 3 changed the atomics' words, not the helpers
PRELUDE = PRELUDES[GENERATOR_VERSION]


def _warp_stmts(node: Any) -> Iterable[list]:
    """Every ``["warp", kind, ...]`` statement of a program's body, nested ones included."""
    if isinstance(node, list):
        if len(node) == 7 and node[0] == "warp":
            yield node
        for x in node:
            yield from _warp_stmts(x)


def order_dependent(prog: dict) -> str | None:
    """Why a program's outputs depend on the order atomics arrive in, which the program does not fix (None:
    they do not). Only programs of generator version 2 or older can: two global atomic operations on one
    accumulator word (atomicMin and atomicAdd in any order give different values), or shared atomic sites
    past the per-warp slots, whose reads then see another site's arrivals. Such a program is not compared."""
    if int(prog.get("v", GENERATOR_VERSION)) >= 3:
        return None
    stmts = list(_warp_stmts(prog.get("body", [])))
    ops = sorted({G_ATOMS[(int(s[5]) & 31) % len(G_ATOMS)] for s in stmts if s[1] == "g_atom"})
    if len(ops) > 1:
        return f"global atomics of {len(ops)} operations ({', '.join(ops)}) share the accumulator words"
    sites = sum(1 for s in stmts if s[1] == "sh_atom")
    if sites > NSITE:
        return f"{sites} shared atomic sites share {NSITE} slots"
    return None


def _shfl_ok(mode: str, delta: int, width: int, lanes: int) -> bool:
    """Whether __shfl_<mode>_sync(mask, ., delta, width) executed by exactly the static set ``lanes`` (the
    mask) is defined: every lane reads its own value or a lane of the set (flashsim.warp.shfl, the PTX ISA's
    rule, with c packed as CUDA's headers pack it)."""
    from flashsim.warp.shfl import shfl_c, shfl_sync
    from flashsim.warp.state import UndefinedResult

    ptx = "bfly" if mode == "xor" else mode
    active = ((lanes >> np.arange(32)) & 1).astype(bool)
    try:
        shfl_sync(ptx, np.zeros(32, np.uint32), delta & 31, shfl_c(width, ptx), lanes, active=active)
    except UndefinedResult:
        return False
    return True


@dataclass
class _Scope:
    mask: str  # C expression of the executing set
    static: int | None  # the set as a constant where known
    top: bool
    loop: str | None  # innermost loop counter


@dataclass
class _Render:
    prog: dict
    name: str
    lines: list = field(default_factory=list)
    fresh: int = 0
    exited: bool = False
    uses_local: bool = False
    sites: int = 0

    @property
    def version(self) -> int:
        return int(self.prog.get("v", GENERATOR_VERSION))

    def new(self, base: str) -> str:
        self.fresh += 1
        return f"{base}{self.fresh}"

    def emit(self, depth: int, text: str) -> None:
        self.lines.append("  " * (depth + 1) + text)

    def expr(self, e: list, sc: _Scope) -> str:
        head = e[0]
        if head == "v":
            return f"v{int(e[1]) % NV}"
        if head == "k":
            return f"{int(e[1]) & 0xFFFFFFFF:#x}u"
        if head in ("lane", "tid", "cta", "s0", "s1"):
            return head
        if head == "iter":
            return sc.loop or "0u"
        op = OPS.get(head)
        if op is None:
            raise bad_argument("program", head, f"unknown operator (expected one of {', '.join(OP_NAMES)})")
        args = [self.expr(a, sc) for a in e[1:1 + op.arity]]
        while len(args) < op.arity:
            args.append("0u")
        return op.template.format(*args)

    def dump(self, depth: int) -> None:
        for i in range(NV):
            self.emit(depth, f"out[gt * {NV}u + {i}u] = v{i};")

    def block(self, stmts: list, sc: _Scope, depth: int) -> None:
        for s in stmts:
            self.stmt(s, sc, depth)

    def stmt(self, s: list, sc: _Scope, depth: int) -> None:
        kind = s[0]
        if kind == "set":
            self.emit(depth, f"v{int(s[1]) % NV} = {self.expr(s[2], sc)};")
        elif kind == "if":
            self.branch(s, sc, depth)
        elif kind == "loop":
            bound, cond, body = int(s[1]), s[2], s[3]
            ml, it = self.new("ml"), self.new("i")
            self.emit(depth, f"{{ unsigned {ml} = {sc.mask};")
            self.emit(depth, f"  for (unsigned {it} = 0u; {it} < {max(1, min(bound, 6))}u; ++{it}) {{")
            go = self.new("go")
            self.emit(depth + 1, f"  const bool {go} = ((({self.expr(cond, _Scope(sc.mask, sc.static, False, it))})"
                                 f" >> ({it} & 31u)) & 1u) == 0u;")
            self.emit(depth + 1, f"  {ml} = __ballot_sync({ml}, {go});")
            self.emit(depth + 1, f"  if (!{go}) break;")
            self.block(body, _Scope(ml, None, False, it), depth + 2)
            self.emit(depth, "  }")
            self.emit(depth, "}")
        elif kind == "uloop":
            param, body = s[1], s[2]
            it = self.new("u")
            self.emit(depth, f"for (unsigned {it} = 0u; {it} < ({param} & 3u); ++{it}) {{")
            self.block(body, _Scope(sc.mask, sc.static, False, it), depth + 1)
            self.emit(depth, "}")
        elif kind == "ret":
            if not sc.top:
                return  # an early return only at the top level, where the survivors' mask is kept
            r = self.new("r")
            self.emit(depth, f"{{ const bool {r} = (({self.expr(s[1], sc)}) & 3u) == 1u;")
            self.emit(depth, f"  m0 = __ballot_sync(m0, !{r});")
            self.emit(depth, f"  if ({r}) {{")
            self.dump(depth + 1)
            self.emit(depth, "    return;")
            self.emit(depth, "  } }")
            sc.static = None
            self.exited = True
        elif kind == "warp":
            self.warp(s, sc, depth)
        else:
            raise bad_argument("program", kind, "unknown statement")

    def branch(self, s: list, sc: _Scope, depth: int) -> None:
        how = s[1]
        if how == "data":
            cond, then, other = s[2], s[3], s[4]
            c, t = self.new("c"), self.new("t")
            self.emit(depth, f"{{ const bool {c} = (({self.expr(cond, sc)}) & 1u) != 0u;")
            self.emit(depth, f"  const unsigned {t} = __ballot_sync({sc.mask}, {c});")
            self.emit(depth, f"  if ({c}) {{")
            self.block(then, _Scope(t, None, False, sc.loop), depth + 2)
            if other:
                self.emit(depth, "  } else {")
                self.block(other, _Scope(f"({sc.mask} & ~{t})", None, False, sc.loop), depth + 2)
            self.emit(depth, "  } }")
        elif how == "lane":
            k, cval = int(s[2][0]) & 31, int(s[2][1]) & 31 & int(s[2][0])
            lanes = sum(1 << lane for lane in range(32) if (lane & k) == cval)
            then, other = s[3], s[4]
            for body, pattern, neg in ((then, lanes, False), (other, ~lanes & 0xFFFFFFFF, True)):
                if neg and not other:
                    break
                if not neg:
                    self.emit(depth, f"if ((lane & {k}u) == {cval}u) {{")
                else:
                    self.emit(depth, "} else {")
                if sc.static is not None:
                    st_ = sc.static & pattern
                    mask = f"{st_:#x}u"
                else:
                    st_ = None
                    mask = f"({sc.mask} & {pattern:#x}u)"
                self.block(body, _Scope(mask, st_, False, sc.loop), depth + 1)
            self.emit(depth, "}")
        elif how == "uniform":
            param, (bit,), then, other = s[2], s[3], s[4], s[5]
            self.emit(depth, f"if (({param} >> {int(bit) & 31}u) & 1u) {{")
            self.block(then, _Scope(sc.mask, sc.static, False, sc.loop), depth + 1)
            if other:
                self.emit(depth, "} else {")
                self.block(other, _Scope(sc.mask, sc.static, False, sc.loop), depth + 1)
            self.emit(depth, "}")
        else:
            raise bad_argument("program", how, "unknown branch kind")

    def pick(self, sel: str, sc: _Scope) -> str:
        """A source lane of the executing set, chosen per lane by ``sel``."""
        return f"__fns({sc.mask}, 0u, ({sel}) % (unsigned)__popc({sc.mask}) + 1)"

    def warp(self, s: list, sc: _Scope, depth: int) -> None:
        _, kind, dst, e1, e2, k, width = s
        d = f"v{int(dst) % NV}"
        a, b = self.expr(e1, sc), self.expr(e2, sc)
        m = sc.mask
        k = int(k) & 31
        width = int(width) if int(width) in (2, 4, 8, 16, 32) else 32
        if kind == "ballot":
            self.emit(depth, f"{d} ^= __ballot_sync({m}, (({a}) & 1u) != 0u);")
        elif kind == "any":
            self.emit(depth, f"{d} += (unsigned)__any_sync({m}, ({a}) > ({b}));")
        elif kind == "all":
            self.emit(depth, f"{d} += 2u * (unsigned)__all_sync({m}, ({a}) >= ({b}));")
        elif kind == "active":
            self.emit(depth, f"{d} ^= __activemask();")
        elif kind == "match_any":
            self.emit(depth, f"{d} ^= __match_any_sync({m}, ({a}) & 7u);")
        elif kind == "match_all":
            p = self.new("p")
            self.emit(depth, f"{{ int {p}; {d} ^= __match_all_sync({m}, ({a}) & 1u, &{p}); {d} += (unsigned){p}; }}")
        elif kind == "match64":
            self.emit(depth, f"{d} ^= __match_any_sync({m}, ((unsigned long long)(({a}) & 3u) << 32) | (({b}) & 1u));")
        elif kind.startswith("redux_"):
            op = kind[6:]
            if op in ("smin", "smax"):
                self.emit(depth, f"{d} ^= (unsigned)__reduce_{op[1:]}_sync({m}, (int)({a}));")
            else:
                self.emit(depth, f"{d} ^= __reduce_{op}_sync({m}, {a});")
        elif kind == "shfl_leader":
            self.emit(depth, f"{d} = __shfl_sync({m}, {a}, __ffs({m}) - 1);")
        elif kind in ("shfl_xor", "shfl_up", "shfl_down", "shfl_idx"):
            mode = kind[5:]
            if sc.static is not None and _shfl_ok(mode, k, width, sc.static):
                fn = {"xor": "__shfl_xor_sync", "up": "__shfl_up_sync", "down": "__shfl_down_sync",
                      "idx": "__shfl_sync"}[mode]
                self.emit(depth, f"{d} = {fn}({m}, {a}, {k}, {width});")
            else:
                self.emit(depth, f"{d} = __shfl_sync({m}, {a}, {self.pick(b, sc)});")
        elif kind == "shfl_pick":
            self.emit(depth, f"{d} = __shfl_sync({m}, {a}, {self.pick(b, sc)});")
        elif kind == "syncwarp":
            self.emit(depth, f"__syncwarp({m});")
        elif kind == "sh_xchg":
            self.emit(depth, f"sh[tid] = {a};")
            self.emit(depth, f"__syncwarp({m});")
            self.emit(depth, f"{d} ^= sh[(tid & ~31u) + {self.pick(b, sc)}];")
            self.emit(depth, f"__syncwarp({m});")
        elif kind == "sh_atom":
            if self.sites >= NSITE and self.version >= 3:
                return  # every slot taken: a second site on one slot could read the other's arrivals
            site = self.sites % NSITE
            self.sites += 1
            fn = ("atomicAdd", "atomicOr", "atomicXor", "atomicAnd", "atomicMax", "atomicMin")[k % 6]
            slot = f"sacc[(tid >> 5) * {NSITE}u + {site}u]"
            self.emit(depth, f"{fn}(&{slot}, {a});")
            self.emit(depth, f"__syncwarp({m});")
            self.emit(depth, f"{d} += {slot};")
            self.emit(depth, f"__syncwarp({m});")
        elif kind == "sh_atom_ret":
            which = k % 5
            slot = "sat[tid]"
            call = (f"atomicAdd(&{slot}, {a})", f"atomicExch(&{slot}, {a})", f"atomicCAS(&{slot}, {b}, {a})",
                    f"atomicInc(&{slot}, {b})", f"atomicMax(&{slot}, {a})")[which]
            self.emit(depth, f"{d} ^= {call};")
        elif kind == "g_atom":
            fn = G_ATOMS[k % len(G_ATOMS)]
            if self.version >= 3:  # words of their own per operation: arrivals in any order give one value
                self.emit(depth, f"{fn}(&out[gacc + {(k % len(G_ATOMS)) * G_WORDS}u + (({b}) % {G_WORDS}u)], {a});")
            else:
                self.emit(depth, f"{fn}(&out[gacc + (({b}) & {NGACC - 1}u)], {a});")
        elif kind == "local":
            self.uses_local = True
            self.emit(depth, f"loc[({b}) & 7u] = {a};")
            self.emit(depth, f"{d} ^= loc[({a}) & 7u];")
        elif kind == "cross":
            if not sc.top or self.exited:
                return  # a CTA barrier only where every thread of the CTA is present
            self.emit(depth, f"sh[tid] = {a};")
            self.emit(depth, "__syncthreads();")
            self.emit(depth, f"{d} ^= sh[(tid + {k + 1}u) % {int(self.prog['block'])}u];")
            self.emit(depth, "__syncthreads();")
        else:
            raise bad_argument("program", kind, "unknown warp statement")


def _check_program(prog: Any) -> None:
    if not isinstance(prog, dict) or not isinstance(prog.get("body"), list):
        raise bad_argument("program", type(prog).__name__, "expected a program dict with a 'body' list")
    if int(prog.get("block", 0)) not in (32, 48, 64, 96):
        raise bad_argument("program['block']", prog.get("block"), "expected 32, 48, 64 or 96 threads")
    if int(prog.get("grid", 0)) not in (1, 2):
        raise bad_argument("program['grid']", prog.get("grid"), "expected 1 or 2 CTAs")


def render(prog: dict, name: str = "fz") -> str:
    """The ``__global__`` function of one program (without :data:`PRELUDE`), and its ``__constant__`` table."""
    _check_program(prog)
    r = _Render(prog, name)
    block = int(prog["block"])
    full = block % 32 == 0
    r.block(prog["body"], _Scope("m0", 0xFFFFFFFF if full else None, True, None), 0)
    body = r.lines
    ctab = f"CT_{name}"
    rng = np.random.default_rng(int(prog["seed"]) ^ 0x5EED)
    table = ", ".join(f"{int(x):#x}u" for x in _values(rng, 64))
    head = [f"__constant__ unsigned {ctab}[64] = {{{table}}};",
            f'extern "C" __global__ void __launch_bounds__({block}) {name}(const unsigned* __restrict__ in, '
            "unsigned* __restrict__ out, unsigned s0, unsigned s1) {",
            f"#define CTAB {ctab}",
            f"  __shared__ unsigned sh[{block}];",
            f"  __shared__ unsigned sacc[{(block + 31) // 32 * NSITE}];",
            f"  __shared__ unsigned sat[{block}];",
            "  const unsigned tid = threadIdx.x, lane = tid & 31u, cta = blockIdx.x;",
            f"  const unsigned gt = cta * {block}u + tid, gacc = gridDim.x * {block * NV}u;",
            *(f"  unsigned v{i} = in[(gt * {NV}u + {i}u) & 1023u];" for i in range(NV))]
    if r.uses_local:
        head.append("  unsigned loc[8];")
        head.append("  for (unsigned q = 0u; q < 8u; ++q) loc[q] = in[(gt * 8u + q * 3u) & 1023u];")
    head += [f"  for (unsigned q = tid; q < {(block + 31) // 32 * NSITE}u; q += {block}u) sacc[q] = 0u;",
             "  sat[tid] = v5;",
             "  __syncthreads();",
             f"  unsigned m0 = {'0xffffffffu' if full else '__activemask()'};"]
    tail = []
    for i in range(NV):
        tail.append(f"  out[gt * {NV}u + {i}u] = v{i};")
    return "\n".join(head + body + tail + ["#undef CTAB", "}"]) + "\n"


def render_module(progs: Sequence[dict], names: Sequence[str] | None = None) -> str:
    names = list(names) if names is not None else [f"fz{i}" for i in range(len(progs))]
    versions = {int(p.get("v", GENERATOR_VERSION)) for p in progs} or {GENERATOR_VERSION}
    if len(versions) != 1 or not versions <= set(PRELUDES):
        raise bad_argument("progs", sorted(versions), f"expected programs of one generator version of {sorted(PRELUDES)}")
    return PRELUDES[versions.pop()] + "\n".join(render(p, n) for p, n in zip(progs, names))


# ---------------------------------------------------------------------------------------------- inputs
def _values(rng: np.random.Generator, n: int) -> np.ndarray:
    """Edge cases and random words: the pool, uniform bits, floats of every magnitude, small integers."""
    kind = rng.integers(0, 10, n)
    pool = np.asarray(POOL, np.uint64)[rng.integers(0, len(POOL), n)]
    bits = rng.integers(0, 2**32, n, dtype=np.uint64)
    mant = rng.integers(0, 1 << 23, n, dtype=np.uint64)
    expo = rng.integers(96, 160, n, dtype=np.uint64)
    sign = rng.integers(0, 2, n, dtype=np.uint64) << np.uint64(31)
    floats = sign | (expo << np.uint64(23)) | mant
    small = rng.integers(0, 40, n, dtype=np.uint64)
    halves = rng.integers(0, 1 << 16, n, dtype=np.uint64) | (rng.integers(0, 1 << 16, n, dtype=np.uint64) << 16)
    out = np.select([kind < 3, kind < 5, kind < 8, kind < 9], [pool, bits, floats, small], halves)
    return out.astype(np.uint32)


def inputs(prog: dict) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
    """(in table, out before the launch, (s0, s1)) of a program, from its seed."""
    _check_program(prog)
    rng = np.random.default_rng(int(prog["seed"]))
    table = _values(rng, NIN)
    n = int(prog["grid"]) * int(prog["block"]) * NV
    out = np.full(n + NGACC, SENTINEL, np.uint32)
    out[n:] = rng.integers(0, 4, NGACC, dtype=np.uint32)
    s0, s1 = (int(x) & 0xFFFFFFFF for x in prog["s"])
    return table, out, (s0, s1)


def digest(out: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(out, np.uint32).tobytes()).hexdigest()[:32]


# ---------------------------------------------------------------------------------------------- builds
def build(source: str, which: str, name: str = "fuzz.cu") -> bytes:
    """The cubin of a module source in one of :data:`BUILDS`."""
    from flashsim.sass.toolchain import assemble_ptx, compile_cuda, compile_cuda_ptx

    if which == "nvrtc13":
        return compile_cuda(source, name=name, options=("-std=c++17",))[0]
    if which == "ptxas128":
        ptx, _, _ = compile_cuda_ptx(source, name=name, options=("-std=c++17",))
        import flashsim.triton as ft

        return assemble_ptx(ft.ptx_for_bundled_ptxas(ptx), name=name, ptxas=ft.bundled_ptxas())
    raise bad_argument("which", which, f"expected one of {', '.join(BUILDS)}")


# ---------------------------------------------------------------------------------------------- running
@dataclass
class Outcome:
    """One program's run in the interpreter: its outputs, or why it did not run (refused / error)."""

    out: np.ndarray | None
    refused: str | None = None  # NotImplementedError: a form not modelled
    error: str | None = None  # anything else: a bug of the generator or of the interpreter
    forms: dict = field(default_factory=dict)  # instruction form -> warp-level executions


@dataclass
class Batch:
    """Programs compiled into one module."""

    progs: list
    which: str
    cubin: bytes

    @property
    def names(self) -> list[str]:
        return [f"fz{i}" for i in range(len(self.progs))]


def compile_batch(progs: Sequence[dict], which: str) -> Batch:
    return Batch(list(progs), which, build(render_module(progs), which))


def program_forms(fn) -> dict[str, int]:
    return dict(fn._prog().executed_forms())


def run_interp(batch: Batch, pad: int = 0) -> list[Outcome]:
    """Run every program of a batch in the interpreter (one module load); ``pad`` bytes of device memory are
    allocated before each program's arrays, which moves them (:func:`address_dependent`)."""
    import flashsim.cuda as fc

    mod = fc.RawModule(cubin=batch.cubin)
    res = []
    for prog, name in zip(batch.progs, batch.names):
        table, out0, (s0, s1) = inputs(prog)
        try:
            fn = mod.get_function(name)
            moved = fc.zeros((pad // 4,), np.uint32) if pad else None  # noqa: F841 (held while it runs)
            d_in, d_out = fc.asarray(table), fc.asarray(out0)
            fn((int(prog["grid"]),), (int(prog["block"]),), (d_in, d_out, np.uint32(s0), np.uint32(s1)))
            res.append(Outcome(d_out.get(), forms=program_forms(fn)))
        except NotImplementedError as e:
            res.append(Outcome(None, refused=str(e)))
        except FlashsimError as e:
            res.append(Outcome(None, error=f"{type(e).__name__}: {e}"))
    return res


#: how far :func:`address_dependent` moves a program's arrays: bits 16 and up of their addresses change
ADDRESS_SHIFT = 0x1230000


def address_dependent(prog: dict, which: str) -> bool:
    """Whether the program's outputs in the interpreter change when its arrays sit at other device addresses:
    then they depend on where the GPU put them, which a comparison cannot reproduce. ptxas can make a defined
    program so: both ptxas 13.0 and 12.8 build ``__vmaxu2(0, (unsigned)bf16_bits)`` as a PRMT that takes the
    high half from a dead register holding the low word of a pointer, then VIMNMX.U16x2 (campaign seed 4)."""
    batch = compile_batch([prog], which)
    (a,), (b,) = run_interp(batch), run_interp(batch, pad=ADDRESS_SHIFT)
    return a.out is not None and b.out is not None and not np.array_equal(a.out, b.out)


# ---------------------------------------------------------------------------------------------- shrinking
def _expr_variants(e: list) -> Iterable[list]:
    if e[0] in ("v", "k") or e[0] in LEAVES:
        if e != ["k", 0]:
            yield ["k", 0]
        if e[0] == "k" and int(e[1]) not in (0, 1):
            yield ["k", 1]
        return
    for a in e[1:]:
        yield a
    for i, a in enumerate(e[1:], start=1):
        for v in _expr_variants(a):
            yield e[:i] + [v] + e[i + 1:]


def _stmt_variants(s: list) -> Iterable[list | None]:
    """Replacements of one statement: None (delete), its bodies inlined, smaller parts."""
    kind = s[0]
    if kind == "if":
        bodies = (s[3], s[4]) if s[1] in ("data", "lane") else (s[4], s[5])
        for b in bodies:
            yield ["__inline__", b]
        if s[1] in ("data", "lane"):
            for i in (3, 4):
                for v in _block_variants(s[i]):
                    yield s[:i] + [v] + s[i + 1:]
            if s[1] == "data":
                for v in _expr_variants(s[2]):
                    yield s[:2] + [v] + s[3:]
        else:
            for i in (4, 5):
                for v in _block_variants(s[i]):
                    yield s[:i] + [v] + s[i + 1:]
    elif kind == "loop":
        yield ["__inline__", s[3]]
        if int(s[1]) > 1:
            yield ["loop", 1, s[2], s[3]]
        for v in _block_variants(s[3]):
            yield ["loop", s[1], s[2], v]
        for v in _expr_variants(s[2]):
            yield ["loop", s[1], v, s[3]]
    elif kind == "uloop":
        yield ["__inline__", s[2]]
        for v in _block_variants(s[2]):
            yield ["uloop", s[1], v]
    elif kind == "set":
        for v in _expr_variants(s[2]):
            yield ["set", s[1], v]
    elif kind == "ret":
        for v in _expr_variants(s[1]):
            yield ["ret", v]
    elif kind == "warp":
        for i in (3, 4):
            for v in _expr_variants(s[i]):
                yield s[:i] + [v] + s[i + 1:]
        if int(s[6]) != 32:
            yield s[:6] + [32]


def _block_variants(b: list) -> Iterable[list]:
    n = len(b)
    # halves and single statements out first (ddmin-like), then each statement made smaller
    size = n // 2
    while size >= 1:
        for i in range(0, n, size):
            yield b[:i] + b[i + size:]
        size //= 2
    for i, s in enumerate(b):
        for v in _stmt_variants(s):
            if v is None:
                yield b[:i] + b[i + 1:]
            elif v[0] == "__inline__":
                yield b[:i] + list(v[1]) + b[i + 1:]
            else:
                yield b[:i] + [v] + b[i + 1:]


def _size(node: Any) -> int:
    return 1 + sum(_size(x) for x in node) if isinstance(node, list) else 0


def shrink(prog: dict, still_fails: Callable[[dict], bool], *, budget: int = 400) -> tuple[dict, int]:
    """Greedy reduction of ``prog`` to a smaller program for which ``still_fails`` holds: statements
    deleted, branches and loops inlined, expressions replaced by an operand or a constant, launch made
    smaller; repeated until no variant fails or ``budget`` candidates were tried. Returns (program, tries)."""
    best = json.loads(json.dumps(prog))
    tries = 0
    improved = True
    while improved and tries < budget:
        improved = False
        candidates = []
        if best["grid"] != 1:
            candidates.append({**best, "grid": 1})
        if best["block"] != 32:
            candidates.append({**best, "block": 32})
        candidates += [{**best, "body": b} for b in _block_variants(best["body"])]
        for cand in candidates:
            if tries >= budget:
                break
            if _size(cand["body"]) > _size(best["body"]) or cand == best:
                continue
            tries += 1
            if still_fails(cand):
                best = cand
                improved = True
                break
    return best, tries
