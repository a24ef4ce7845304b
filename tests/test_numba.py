"""flashsim.numba: numba-cuda kernels compiled for cc 9.0 with no GPU and run in the interpreter with numba's
argument ABI. The H100 record (traces/numba: the cubins built here, loaded by the GPU, and the GPU's outputs)
replays bit for bit; under --gpu the suite runs again from today's build."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("numba.cuda")

import flashsim.cuda as fc  # noqa: E402
import flashsim.numba as fnb  # noqa: E402
from flashsim.gpu import numba_suite as N  # noqa: E402


@pytest.fixture(scope="module")
def record():
    return N.load_record()


@pytest.fixture(scope="module")
def compiles():
    """numba-cuda can compile here (on a machine whose numba-cuda predates its numpy it cannot: skip, saying so)."""
    from flashsim.gpu import numba_kernels as K

    try:
        fnb.compile_kernel(K.axpy, N._types(N.case("axpy"), N.inputs(N.case("axpy"), 0)))
    except fnb.NumbaUnavailable as exc:
        pytest.skip(str(exc))


def test_the_h100_record_covers_the_suite():
    rep = json.loads((N.TRACE / "numba_suite.json").read_text())
    assert set(rep["cases"]) == {c.name for c in N.CASES}
    for name, e in rep["cases"].items():
        assert "error" not in e, (name, e["error"])
        assert e["driver_jit_equal"], f"{name}: the driver's JIT of the PTX gave other outputs than the cubin"


@pytest.mark.parametrize("c", N.CASES, ids=lambda c: c.name)
def test_the_interpreter_gives_the_h100s_bits(c, record):
    msgs = N.replay_case(c, record[c.name])
    assert not msgs, "\n".join(msgs)


@pytest.mark.parametrize("c", N.CASES, ids=lambda c: c.name)
def test_todays_build_is_the_recorded_cubin(c, record, compiles):
    ins = N.inputs(c, 0)
    comp = fnb.compile_kernel(c.kernel_fn(), N._types(c, ins))
    assert comp.cubin == bytes(record[c.name]["cubin"]) or N.replay_case(c, {**record[c.name], "cubin": comp.cubin}) == []


def test_numpy_and_flashsim_arrays_and_scalars(compiles):
    from flashsim.gpu import numba_kernels as K

    x = np.arange(100, dtype=np.float32)
    y = np.ones(100, np.float32)
    out = np.zeros(100, np.float32)
    fnb.kernel(K.axpy)[1, 128](np.float32(3), x, y, out)
    assert np.array_equal(out, np.float32(3) * x + 1)
    dout = fc.zeros(100, np.float32)
    fnb.kernel(K.axpy)[1, 128](np.float32(3), fc.asarray(x), fc.asarray(y), dout)
    assert np.array_equal(dout.get(), out)


def test_a_python_float_is_a_float64_parameter_and_computes_in_double(compiles):
    from flashsim.gpu import numba_kernels as K

    from fractions import Fraction

    x = np.arange(1, 33, dtype=np.float32) * np.float32(1.37)
    y, out = np.linspace(-3, 3, 32, dtype=np.float32), np.zeros(32, np.float32)
    import numba

    comp = fnb.compile_kernel(K.axpy, [numba.float64, *(numba.typeof(a) for a in (x, y, out))])
    assert ".param .f64" in comp.ptx  # numba types 0.1 as float64, as it does for a GPU launch
    fnb.kernel(K.axpy)[1, 32](0.1, x, y, out)  # x widened (F2F.F64.F32), 0.1 * x + y in double, rounded to f32
    xd, yd = x.astype(np.float64), y.astype(np.float64)
    if "fma.rn.f64" in comp.ptx:  # NVVM fused the multiply and the add: one rounding to double
        want = np.array([float(Fraction(0.1) * Fraction(float(a)) + Fraction(float(b))) for a, b in zip(xd, yd)])
    else:
        want = 0.1 * xd + yd
    assert np.array_equal(out, want.astype(np.float32))
    assert (out != np.float32(0.1) * x + y).any()  # f32 arithmetic differs somewhere: the double path ran


def test_bad_launch_configurations_and_arguments():
    from flashsim.gpu import numba_kernels as K

    with pytest.raises(ValueError, match="launch configuration"):
        fnb.kernel(K.axpy)[1]
    with pytest.raises(ValueError, match="argument 1"):
        fnb.kernel(K.axpy)[1, 32](np.float32(1), "x", np.zeros(4, np.float32), np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="kernel="):
        fnb.kernel(42)


@pytest.mark.gpu
@pytest.mark.parametrize("c", N.CASES, ids=lambda c: c.name)
def test_gpu_runs_todays_cubin_as_the_interpreter(c, compiles):
    from flashsim.gpu import runtime

    ins = N.inputs(c, 20261202)
    comp = fnb.compile_kernel(c.kernel_fn(), N._types(c, ins))
    args = [ins[a[1]].copy() if isinstance(a, tuple) else a for a in c.args]
    N._launch_gpu(c, runtime.load_cubin(comp.cubin).get_function(comp.name), args, c.shared)
    gpu = {a[1]: args[i] for i, a in enumerate(c.args) if isinstance(a, tuple)}
    sim = N.run_sim(c, ins)
    for k in c.outputs:
        assert np.array_equal(N.bits(sim[k]), N.bits(gpu[k])), k
