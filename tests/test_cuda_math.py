"""flashsim.numerics.cuda_math under the four compiler settings (fast math on/off x ftz on/off).

The settings where ``ftz == fast_math`` are checked against the GPU by gpu/validate_sfu.py (1,000,000
inputs per function, traces/numerics/sfu_report.json). Here, on the CPU: the defaults, the flush rule on
subnormal inputs and outputs, recorded H100 outputs of ``1.0f / x`` and ``__fdividef`` under -ftz=true
(the SASS probes), and every function in every setting against the SASS interpreter running NVRTC's own
code for gpu/kernels/cuda_math.cu.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest

from flashsim import ArgumentError
from flashsim.numerics import cuda_math

ROOT = Path(__file__).resolve().parent.parent
SIGN = np.uint32(0x80000000)
SETTINGS = [(False, False), (False, True), (True, True), (True, False)]  # (fast_math, ftz)


def f32(v) -> np.ndarray:
    return np.asarray(v, np.float32).view(np.uint32)


def val(b) -> np.ndarray:
    return b.view(np.float32).astype(np.float64)


def is_subnormal(b) -> np.ndarray:
    return ((b & np.uint32(0x7F800000)) == 0) & ((b & np.uint32(0x7FFFFF)) != 0)


def operands(name: str, x: np.ndarray) -> list[np.ndarray]:
    """The operands of one function: x first, the others drawn from x (so they hold subnormals too)."""
    arity = cuda_math.FUNCTIONS[name][0]
    if name == "scaled_exp2":
        return [x, np.full(x.shape, f32(0.1275174), np.uint32), np.roll(x, 7)]
    return [x, np.roll(x, 3)[::-1].copy()][:arity]


def inputs(seed: int = 7) -> np.ndarray:
    rng = np.random.default_rng(seed)
    parts = [
        np.array([0, 1, 2, 0x400000, 0x7FFFFF, 0x800000, 0x800001, 0x7F7FFFFF, 0x7F800000, 0x7FC00000, 0x7F800001,
                  0x3F800000, 0x7E800000, 0x7E800001], np.uint32),
        rng.integers(1, 1 << 23, 600).astype(np.uint32),                        # subnormals
        (np.arange(-300, 300) + 0x00800000).astype(np.uint32),                  # around 2^-126
        (np.arange(-300, 300) + 0x7E800000).astype(np.uint32),                  # around 2^126
        f32(np.linspace(-160, 130, 1200)), f32(-rng.uniform(80, 110, 600)),   # exp: subnormal results
        f32(rng.uniform(-12, 12, 600)),
        rng.integers(0, 1 << 32, 2000, dtype=np.uint64).astype(np.uint32),
    ]
    x = np.concatenate(parts)
    return np.concatenate([x, x ^ SIGN])


# ---- defaults and arguments -----------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(cuda_math.FUNCTIONS))
def test_default_ftz_is_what_fast_math_implies(name):
    model = cuda_math.FUNCTIONS[name][1]
    ins = operands(name, inputs())
    for fast in (False, True):
        default = model(*ins, fast_math=fast)
        assert np.array_equal(default, model(*ins, fast_math=fast, ftz=None))
        assert np.array_equal(default, model(*ins, fast_math=fast, ftz=fast))


@pytest.mark.parametrize("name", sorted(cuda_math.FUNCTIONS))
def test_ftz_must_be_a_bool_or_none(name):
    model = cuda_math.FUNCTIONS[name][1]
    ins = operands(name, f32([1.0, 2.0]))
    for bad in ("yes", 1, 0.0):
        with pytest.raises(ArgumentError, match=r"^ftz="):
            model(*ins, ftz=bad)
    assert np.array_equal(model(*ins, ftz=np.bool_(True)), model(*ins, ftz=True))


# ---- the flush rule --------------------------------------------------------------------------------------

@pytest.mark.parametrize("fast", [False, True])
@pytest.mark.parametrize("name", sorted(cuda_math.FUNCTIONS))
def test_ftz_reads_subnormal_inputs_as_signed_zeros_and_never_returns_a_subnormal(name, fast):
    model = cuda_math.FUNCTIONS[name][1]
    ins = operands(name, inputs())
    flushed = [np.where(is_subnormal(a), a & SIGN, a).astype(np.uint32) for a in ins]
    assert any(is_subnormal(a).any() for a in ins)
    out = model(*ins, fast_math=fast, ftz=True)
    if name == "tanhf" and fast:
        # MUFU.TANH (tanh.approx.f32, no .ftz form) returns subnormal inputs unchanged under ftz as well
        sub = is_subnormal(ins[0])
        assert np.array_equal(out[sub], ins[0][sub])
        return
    assert np.array_equal(out, model(*flushed, fast_math=fast, ftz=True))
    assert not is_subnormal(out).any()


@pytest.mark.parametrize("fast", [False, True])
@pytest.mark.parametrize("name", sorted(cuda_math.FUNCTIONS))
def test_without_ftz_subnormals_take_part(name, fast):
    """The switch changes results: without ftz some subnormal input or output differs from the ftz result."""
    model = cuda_math.FUNCTIONS[name][1]
    ins = operands(name, inputs())
    plain, ftz = model(*ins, fast_math=fast, ftz=False), model(*ins, fast_math=fast, ftz=True)
    differ = plain != ftz
    if name == "tanhf" and fast:
        assert not differ.any()  # one MUFU.TANH either way
        return
    assert differ.any()
    # ... and only there: every difference has a subnormal operand or a subnormal result without ftz
    assert np.all(is_subnormal(plain[differ]) | np.any([is_subnormal(a[differ]) for a in ins], axis=0))


def test_exp_family_subnormal_results():
    x2, xe = f32([-140.0]), f32([-100.0, -87.0])
    one, zero = f32([1.0]), f32([0.0])
    for fast in (False, True):
        e2 = cuda_math.exp2f(x2, fast_math=fast, ftz=False)
        assert is_subnormal(e2).all() and val(e2)[0] == pytest.approx(2.0**-140, rel=1e-6)
        assert cuda_math.exp2f(x2, fast_math=fast, ftz=True)[0] == 0
        assert np.array_equal(cuda_math.scaled_exp2(x2, one, zero, fast_math=fast, ftz=False), e2)
        assert cuda_math.scaled_exp2(x2, one, zero, fast_math=fast, ftz=True)[0] == 0
        for fn in (cuda_math.__expf, cuda_math.expf):
            keep, flush = fn(xe, fast_math=fast, ftz=False), fn(xe, fast_math=fast, ftz=True)
            assert is_subnormal(keep[0]) and flush[0] == 0
            assert val(keep)[0] == pytest.approx(np.exp(-100.0), rel=0.05)  # 27 subnormal steps: coarse
            assert keep[1] == flush[1] and val(keep)[1] == pytest.approx(np.exp(-87.0), rel=1e-5)
    # a subnormal input is exp(0) = 1 either way
    sub = np.array([1, 0x80000001], np.uint32)
    for fn in (cuda_math.exp2f, cuda_math.__expf, cuda_math.expf):
        for ftz in (False, True):
            assert np.all(val(fn(sub, ftz=ftz)) == 1.0)


def test_log_family_subnormal_inputs():
    x = np.array([0x00400000, 0x80400000], np.uint32)  # +-2^-127
    for fn in (cuda_math.logf, cuda_math.__logf):
        for fast in (False, True):
            keep = val(fn(x, fast_math=fast, ftz=False))
            assert keep[0] == pytest.approx(-127 * np.log(2.0), rel=1e-6) and np.isnan(keep[1])
            assert np.all(fn(x, fast_math=fast, ftz=True) == 0xFF800000)  # read as +-0: -Inf


def test_reciprocal_and_fdividef_flush():
    x = f32([2.0**-127, -(2.0**-127), 2.0**127, -(2.0**127)])
    for fast in (False, True):
        keep = cuda_math.reciprocal(x, fast_math=fast, ftz=False)
        assert val(keep)[:2] == pytest.approx([2.0**127, -(2.0**127)], rel=1e-6)
        assert is_subnormal(keep[2:]).all() and val(keep)[2] == pytest.approx(2.0**-127, rel=1e-6)
        assert list(cuda_math.reciprocal(x, fast_math=fast, ftz=True)) == [0x7F800000, 0xFF800000, 0, 0x80000000]
        a, b = f32([2.0**-130, 1.0]), f32([1.0, 2.0**-127])
        keep = cuda_math.__fdividef(a, b, fast_math=fast, ftz=False)
        assert keep[0] == a[0] and val(keep)[1] == pytest.approx(2.0**127, rel=1e-6)
        assert list(cuda_math.__fdividef(a, b, fast_math=fast, ftz=True)) == [0, 0x7F800000]


def test_tanhf_subnormal_inputs():
    x = np.array([1, 0x7FFFFF, 0x80000001, 0x807FFFFF], np.uint32)
    assert np.array_equal(cuda_math.tanhf(x, ftz=False), x)
    assert list(cuda_math.tanhf(x, ftz=True)) == [0, 0, 0x80000000, 0x80000000]
    for ftz in (False, True):
        assert np.array_equal(cuda_math.tanhf(x, fast_math=True, ftz=ftz), x)  # MUFU.TANH keeps them


# ---- recorded GPU outputs --------------------------------------------------------------------------------

def test_ftz_reciprocal_and_fdividef_match_recorded_h100_outputs():
    """``1.0f / x`` (rcp.rn.ftz.f32) and ``__fdividef`` compiled by NVRTC with -ftz=true (probe_frcp, probe_fdiv
    of gpu/kernels/sass_probes.cu, run on an H100: traces/sass/probes.npz)."""
    z = np.load(ROOT / "traces" / "sass" / "probes.npz")
    n_sub = 0
    for s in range(4):
        x, out = z[f"probe_frcp/{s}/in0"], z[f"probe_frcp/{s}/out0"][0::2]
        n_sub += int(is_subnormal(x).sum())
        assert np.array_equal(cuda_math.reciprocal(x, ftz=True), out)
        assert not np.array_equal(cuda_math.reciprocal(x, ftz=False), out)
        a, b, out = z[f"probe_fdiv/{s}/in0"], z[f"probe_fdiv/{s}/in1"], z[f"probe_fdiv/{s}/out0"][1::2]
        assert np.array_equal(cuda_math.__fdividef(a, b, ftz=True), out)
        assert not np.array_equal(cuda_math.__fdividef(a, b, ftz=False), out)
    assert n_sub > 1000


# ---- the compiler's code in the SASS interpreter -----------------------------------------------------------

_OPTIONS = {(False, False): ["-ftz=false"], (False, True): ["-ftz=true"], (True, True): ["--use_fast_math"],
            (True, False): ["--use_fast_math", "-ftz=false"]}


_COMPILE = r"""
import ctypes, sys
from flashsim.sass import toolchain
lib = toolchain._nvrtc()
with open(sys.argv[1]) as f:
    src = f.read()
prog = ctypes.c_void_p()
assert lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"cuda_math.cu", 0, None, None) == 0
opts = [o.encode() for o in sys.argv[3:]]
assert lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts)) == 0
with open(sys.argv[2], "wb") as f:
    f.write(toolchain._get(lib, prog, "nvrtcGetCUBINSize", "nvrtcGetCUBIN"))
"""


@functools.lru_cache(maxsize=None)
def _cubin(fast: bool, ftz: bool) -> bytes:
    """gpu/kernels/cuda_math.cu compiled by NVRTC 13.0 for sm_90 with exactly these options (cupy's
    options would force -ftz=true), each setting in a process of its own: one NVRTC library on the H100
    machine kept the first compile's ftz setting for the next compiles of the same process."""
    import subprocess
    import sys
    import tempfile

    toolchain = pytest.importorskip("flashsim.sass.toolchain")
    try:
        toolchain._nvrtc()
    except toolchain.ToolchainError as e:
        pytest.skip(str(e))
    with tempfile.TemporaryDirectory() as d:
        out = f"{d}/cuda_math.cubin"
        subprocess.run([sys.executable, "-c", _COMPILE, str(ROOT / "gpu" / "kernels" / "cuda_math.cu"), out,
                        *_OPTIONS[(fast, ftz)], "-arch=sm_90", "-std=c++17"], check=True, capture_output=True)
        cubin = Path(out).read_bytes()
    _require_setting_as_asked(cubin, fast, ftz)
    return cubin


def _require_setting_as_asked(cubin: bytes, fast: bool, ftz: bool) -> None:
    """The premise of the tests below: the compiler made the code of the setting asked for. One NVRTC
    13.0 on the H100 machine returned, from run to run, .FTZ code for -ftz=false (and the reverse) and
    --use_fast_math code without that option (and the reverse); there the setting is skipped (the GPU
    checks of the model are gpu/validate_sfu.py's, nvcc-built: traces/numerics/cuda_math_ftz_report.json)."""
    from flashsim.sass import toolchain

    doc = toolchain.disassemble(cubin)
    for fn in doc[1]:
        ops = [i["opcode"] for i in fn["sass-instructions"] if i["opcode"].split(".")[0] in _F32_OPS]
        if fn["function-name"] == "cm_expf" and any(op.startswith("FFMA") for op in ops) == fast:
            pytest.skip(f"this NVRTC did not honour the fast-math setting asked for (fast_math={fast}): cm_expf "
                        f"has {ops}")
        if fn["function-name"] == "cm_reciprocal":  # its IEEE refinement uses FADD.FTZ in both settings
            continue
        if any(("FTZ" in op.split(".")) != ftz for op in ops):
            pytest.skip(f"this NVRTC did not honour the ftz setting asked for (ftz={ftz}): "
                        f"{fn['function-name']} has {ops}")


_F32_OPS = ("FFMA", "FADD", "FMUL", "FSETP")


@pytest.mark.parametrize("fast,ftz", SETTINGS)
def test_every_setting_matches_the_compilers_code_in_the_interpreter(fast, ftz):
    fc = pytest.importorskip("flashsim.cuda")
    mod = fc.RawModule(cubin=_cubin(fast, ftz))
    x = inputs(seed=11)
    for name, (_, model) in cuda_math.FUNCTIONS.items():
        ins = operands(name, x)
        out = fc.zeros(x.size, np.uint32)
        mod.get_function(f"cm_{name}")(((x.size + 255) // 256,), (256,),
                                       (*[fc.asarray(a) for a in ins], out, np.uint64(x.size)))
        got, want = out.get(), model(*ins, fast_math=fast, ftz=ftz)
        bad = np.nonzero(got != want)[0]
        assert bad.size == 0, (name, [(hex(int(x[i])), hex(int(got[i])), hex(int(want[i]))) for i in bad[:4]])


@pytest.mark.parametrize("fast,ftz", SETTINGS)
def test_ftz_setting_is_what_the_f32_instructions_show(fast, ftz):
    """Under -ftz=true every FFMA/FADD/FMUL/FSETP of these sequences is .FTZ, without it none is
    (reciprocal's IEEE refinement uses FADD.FTZ in both, so it is left out)."""
    from flashsim.sass import toolchain

    doc = toolchain.disassemble(_cubin(fast, ftz))
    for fn in doc[1]:
        if fn["function-name"] == "cm_reciprocal":
            continue
        ops = [i["opcode"] for i in fn["sass-instructions"] if i["opcode"].split(".")[0] in ("FFMA", "FADD", "FMUL",
                                                                                             "FSETP")]
        assert all(("FTZ" in op.split(".")) == ftz for op in ops), (fn["function-name"], ops)
