"""Double precision (gpu/kernels/probe_double.cu, table in gpu/double_probes.py) in every build (NVRTC 13.0, ptxas
13.0, Triton's ptxas 12.8): the SASS holds the forms each probe promises, the interpreter equals the exact
references bit for bit on seeded and hypothesis-drawn cases, the recorder's format round-trips, the H200's
record (``double_probes.TRACE``) replays bit for bit (NaN payloads, division and square roots included), and
under --gpu the GPU agrees with the interpreter."""

from __future__ import annotations

import hashlib
import importlib.util
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import flashsim.cuda as fc
from flashsim.gpu import double_probes as D
from flashsim.gpu import sass_probes as sp
from flashsim.numerics import fp64

BUILDS = D.available_builds()
RUNNABLE = [p for p in D.PROBES if not p.pending]
PAIRS = [(b, p) for b in BUILDS for p in D.PROBES]


def _ids(x):
    return f"{x[0]}-{x[1].name}" if isinstance(x, tuple) else x.name


def test_the_probe_files_compile_for_sm90():
    from flashsim.gpu import validate_sfu64 as V
    from flashsim.kernels.sources import interpreted_module

    mod = interpreted_module(D.KERNEL_FILE)
    assert sorted(mod.kernels) == sorted(p.name for p in D.PROBES)
    assert sorted(V.module().kernels) == sorted(f"{k}_{op}" for k in ("sweep", "array") for op in V.OPS)


@pytest.mark.parametrize("pair", PAIRS, ids=_ids)
def test_each_build_contains_the_forms_it_probes(pair):
    which, pr = pair
    assert not D.missing_forms(which, pr), D.missing_forms(which, pr)


def test_every_double_form_the_semantics_read_is_probed():
    """Each rounding mode of DADD / DMUL / DFMA, every compare and combination of DSETP (and its MIN / MAX),
    and every .F64 conversion form appears in some probe's SASS."""
    from flashsim.gpu import form_probes as fp
    from flashsim.sass import modifiers

    seen = {(op, frozenset(m)) for pr in D.PROBES for op, m, _ in fp.forms("nvrtc13", pr.name, D.KERNEL_FILE)}
    mods = lambda op: set().union(*(m for o, m in seen if o == op))  # noqa: E731
    for op in ("DADD", "DMUL", "DFMA"):
        assert mods(op) == set(modifiers.MODIFIERS[op]) and (op, frozenset()) in seen
    assert mods("DSETP") == set(modifiers.MODIFIERS["DSETP"]) - {"T", "F"}
    for form in ("F2F.F32.F64", "F2F.F32.F64.RZ", "F2F.F32.F64.RM", "F2F.F32.F64.RP", "F2F.F64.F32", "FRND.F64",
                 "FRND.F64.TRUNC", "FRND.F64.FLOOR", "FRND.F64.CEIL"):
        op, *m = form.split(".")
        assert (op, frozenset(m)) in seen, form
    for dst in ({"U32"}, {"S64"}, {"U64"}, set()):
        for r in ({"TRUNC"}, {"FLOOR"}, {"CEIL"}, set()):
            assert ("F2I", frozenset({"F64"} | dst | r)) in seen, (dst, r)
    for src in ({"S64"}, {"U64"}):
        for r in ({"RZ"}, {"RM"}, {"RP"}, set()):
            assert ("I2F", frozenset({"F64"} | src | r)) in seen, (src, r)
    for src in (set(), {"U32"}, {"S16"}, {"U16"}):
        assert ("I2F", frozenset({"F64"} | src)) in seen, src


def test_triton_builds_are_probed_where_triton_is_installed():
    assert ("ptxas128" in BUILDS) == (importlib.util.find_spec("triton") is not None)


def _interp(case, which="nvrtc13", **kw):
    """The interpreter's outputs on ``case`` (NaN results included: ops_double.nan_result, the H200's rule)."""
    return case, D.run_interp(case, which, **kw)


@pytest.mark.parametrize("pair", [(b, p) for b in BUILDS for p in RUNNABLE], ids=_ids)
@pytest.mark.parametrize("seed", [12345, 777])
def test_the_interpreter_equals_the_exact_reference(pair, seed):
    which, pr = pair
    case, got = _interp(sp.make_case(pr, seed), which)
    ref = sp.reference(case)
    # (sqrt: half its columns are approximations, and a negative input gives an undefined NaN payload)
    assert all(r is None or r[1].sum() > r[1].size // 8 for r in ref), "most outputs must be defined"
    msgs = sp.compare(case, got, ref)
    assert not msgs, "\n".join(msgs)


@pytest.mark.parametrize("pr", RUNNABLE, ids=_ids)
@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_the_interpreter_equals_the_exact_reference_on_hypothesis_cases(pr, data):
    case, got = _interp(data.draw(D.case_strategy(pr), label="case"))
    msgs = sp.compare(case, got, sp.reference(case))
    assert not msgs, "\n".join(msgs)


@pytest.mark.parametrize("expr,mufu", [("a[i] / b[i]", "MUFU.RCP64H"), ("sqrt(a[i])", "MUFU.RSQ64H"),
                                       ("rsqrt(a[i]) + b[i]", "MUFU.RSQ64H")])
def test_a_kernel_with_double_division_or_sqrt_runs(expr, mufu):
    # the bits against the H200 are probe_ddiv / probe_dsqrt's replay; here: the MUFU runs, and a / b and
    # sqrt (correctly rounded in CUDA) equal IEEE
    code = ('extern "C" __global__ void k(const double* a, const double* b, double* o) '
            f'{{ int i = threadIdx.x; o[i] = {expr}; }}')
    f = fc.RawModule(code=code).get_function("k")
    x, y = np.linspace(1, 2, 32), np.linspace(3, 4, 32)
    o = fc.zeros(32, np.float64)
    f((1,), (32,), (fc.asarray(x), fc.asarray(y), o))
    assert f._prog().executed_forms().get(mufu)
    want = {"a[i] / b[i]": x / y, "sqrt(a[i])": np.sqrt(x)}.get(expr)
    if want is not None:
        np.testing.assert_array_equal(o.get().view(np.uint64), want.view(np.uint64))


def test_plain_double_code_runs():
    """The doubles of ordinary C code, end to end: a kernel parameter, loads and stores, arithmetic,
    compares, a conversion each way."""
    code = r'''extern "C" __global__ void k(const double* a, double s, double* o, int* c, float* f) {
        int i = threadIdx.x; double x = a[i];
        o[i] = fma(x, s, -x * x) + (x < s ? 1.0 : -0.5);
        c[i] = __double2int_rn(x * 1e6); f[i] = (float)(x / 4.0 + (double)c[i]); }'''
    mod = fc.RawModule(code=code)
    x = np.random.default_rng(0).standard_normal(64)
    a, o, c, f = fc.asarray(x), fc.zeros(64, np.float64), fc.zeros(64, np.int32), fc.zeros(64, np.float32)
    mod.get_function("k")((1,), (64,), (a, np.float64(0.3), o, c, f))
    want_c = np.rint(x * 1e6).astype(np.int32)
    assert np.array_equal(c.get(), want_c)
    import math

    fma = getattr(math, "fma", None)
    want = np.array([(fma(v, 0.3, -(v * v)) if fma else v * 0.3 - v * v) + (1.0 if v < 0.3 else -0.5) for v in x])
    if fma is not None:
        assert np.array_equal(o.get(), want)
    else:
        np.testing.assert_allclose(o.get(), want, rtol=1e-15)
    assert np.array_equal(f.get(), (x / 4.0 + want_c).astype(np.float32))


def test_the_references_know_ieee():
    """Spot checks of the exact reference on cases whose answer IEEE 754 fixes (halfway, subnormal, overflow)."""
    one, half_ulp = D._b(1.0), D._b(2.0**-53)
    assert [D.add64(one, half_ulp, m) for m in ("rn", "rz", "rm", "rp")] == [one, one, one, one + 1]
    assert D.add64(D._b(3.0), D._b(-3.0), "rm") == 1 << 63 and D.add64(D._b(3.0), D._b(-3.0)) == 0
    assert D.mul64(1, D._b(0.5), "rp") == 1 and D.mul64(1, D._b(0.5)) == 0
    assert D.fma64(D._b(2.0**1023), D._b(2.0), D._b(-(2.0**1023)), "rz") == D._b(2.0**1023)
    assert D.d2i(D._b(2.5), "rn", -(1 << 31), (1 << 31) - 1, False) == 2
    assert D.d2i(D._b(-0.5), "rp", 0, 0xFFFFFFFF, False) == 0
    assert D.d2i(D._b(2.0**40), "rz", 0, 0xFFFFFFFF, False) == 0xFFFFFFFF
    assert D.d2f(D._b(2.0**-150), "rn", False) == 0 and D.d2f(D._b(2.0**-150), "rp", False) == 1
    assert D.d2f(D._b(2.0**-149), "rn", True) == 0 and D.d2f(D._b(2.0**-126 - 2.0**-151), "rn", True) is None
    assert D.rnd64(D._b(-0.5), "rp") == 1 << 63 and D.rnd64(D._b(2.5), "rna") == D._b(3.0)
    assert D.sqrt64(D._b(2.0)) == D._b(float(np.sqrt(2.0))) and D.div64(D._b(1.0), D._b(3.0)) == D._b(1 / 3)


def test_the_partners_reach_the_hard_cases():
    """The drawn inputs are what the probes are for: sums at a tie, exact cancellation, products at a tie,
    fma addends that cancel the product, conversions at integer boundaries."""
    def frac(pr, pred):
        case = sp.make_case(D.probe(pr), 99, 4096)
        return np.mean([pred(*(int(a[i]) for a in case.inputs)) for i in range(case.n)])

    def tie(q):  # an exact value halfway between two neighbouring doubles
        return q != 0 and sp._round_sig(q, 54, "rz", -1075) == q and sp._round_sig(q, 53, "rz", -1074) != q

    def exact(op):
        def f(x, y):
            X, Y = D.dec(x), D.dec(y)
            return X[0] == Y[0] == "num" and tie(X[2] + Y[2] if op == "+" else X[2] * Y[2])
        return f

    assert frac("probe_dadd", exact("+")) > 0.05
    assert frac("probe_dadd", lambda x, y: x == y ^ (1 << 63) and D.dec(x)[0] == "num") > 0.05
    assert frac("probe_dmul", exact("*")) > 0.05
    assert frac("probe_dfma", lambda x, y, z: D.mul64(x, y) is not None and D.mul64(x, y) == z ^ (1 << 63)) > 0.1
    def near(x):  # within 2^12 of +-2^31, 2^32, 2^63 or 2^64
        return D.dec(x)[0] == "num" and min(abs(abs(D.dec(x)[2]) - 2**k) for k in (31, 32, 63, 64)) <= 2**12

    assert frac("probe_d2i", near) > 0.05


def test_the_nan_census_names_the_rule_the_outputs_follow():
    """The census on outputs made by each candidate rule: that rule (in the right operand order) reproduces
    every NaN, and the others do not."""
    pr = D.probe("probe_dnan")
    items = []
    rule = fp64.CANDIDATE_RULES["canonical 0x7FFFFFFFFFFFFFFF"]
    for k in range(2):
        case = sp.make_case(pr, 50 + k, 1024)
        x, y, z = case.inputs
        cols = [f(x, y, z, rule) for f in (m[1][next(iter(m[1]))] for m in D._census_models().values())]
        out = np.zeros((case.n, pr.outs[0].per), np.uint64)
        out[:, :len(cols)] = np.stack(cols, axis=1)
        out[:, 12] = 0x7FFFFFFF
        items.append((case, [out.ravel()]))
    census = D.nan_census(items)
    add = census["0 add.rn.f64"]
    assert add["gpu_nans"] > 100
    assert add["rules"]["canonical 0x7FFFFFFFFFFFFFFF (x, y)"] == add["gpu_nans"]
    assert add["rules"]["propagate, default 0xFFF8000000000000 (x, y)"] < add["gpu_nans"]
    assert census["12 cvt.rn.f32.f64"]["rules"]["canonical 0x7FFFFFFF"] == census["12 cvt.rn.f32.f64"]["gpu_nans"]


def test_the_recorder_writes_what_replay_reads(tmp_path, monkeypatch):
    """The record's format round trip, with the interpreter standing in for the GPU."""
    chosen = [D.probe(n) for n in ("probe_dsetp", "probe_i2d", "probe_ddiv")]

    def stand_in(case, which="nvrtc13", cubin=None):
        if case.probe.pending:
            return [np.zeros_like(o) for o in case.outs0]
        return D.run_interp(case, "ptxas130" if which == "driver-jit" else which)

    monkeypatch.setattr(D, "run_gpu", stand_in)
    rep = D.record(tmp_path, cases=1, builds=("nvrtc13", "ptxas130"), probes=chosen)
    doc = json.loads((tmp_path / "double_probes.json").read_text())
    for which in ("nvrtc13", "ptxas130"):
        for name, form in (("probe_dsetp", "DSETP"), ("probe_i2d", "I2F.F64")):
            e = doc["builds"][which]["probes"][name]
            assert e["equal"] and not e["forms_missing"] and not e["reference_mismatches"], e
            assert any(f.startswith(form) for f in e["executed"])
        e = doc["builds"][which]["probes"]["probe_ddiv"]
        assert e["equal"] and not e["interp_error"] and "MUFU.RCP64H" in e["executed"], e
    assert "nan_census" in doc and rep["nan_rule"]["propagate"] == fp64.NAN_RULE.propagate
    got = D.replay(tmp_path / "double_probes.npz")
    assert set(got) == {"nvrtc13", "ptxas130"}
    for which, (cubin, items) in got.items():
        mod = fc.RawModule(cubin=cubin)
        assert [c.probe.name for c, _ in items] == [p.name for p in D.PROBES if p in chosen]
        for case, out in items:
            if not case.probe.pending:
                assert not sp.compare(case, D.run_interp(case, which, module=mod), out)


def _trace():
    if not D.TRACE.exists():
        pytest.skip(f"{D.TRACE.relative_to(D.TRACE.parents[2])} is not recorded yet: run "
                    "`python -m flashsim.gpu.double_probes --out traces/double` on the GPU machine")
    return D.replay(D.TRACE)


def test_the_h100_record():
    _trace()
    rep = json.loads(D.TRACE.with_suffix(".json").read_text())
    for which, r in rep["builds"].items():
        for name, e in r["probes"].items():
            assert not e["forms_missing"], (which, name)
            assert not e.get("driver_jit_mismatches"), (which, name)




def _case_key(case) -> str:
    h = hashlib.sha256(case.probe.name.encode())
    for a in (*case.inputs, *case.outs0):
        h.update(np.ascontiguousarray(a).tobytes())
    h.update(repr((case.params, case.n)).encode())
    return h.hexdigest()


def test_the_recorded_cubins_replay_in_the_interpreter():
    failures = []
    refs: dict[str, list] = {}  # the exact reference (pure Python, the slow part) once per distinct case
    for which, (cubin, items) in _trace().items():
        mod = fc.RawModule(cubin=cubin)
        assert items
        for case, gpu_out in items:
            # the GPU's outputs against the exact reference, where C and the PTX ISA define them
            key = _case_key(case)
            if key not in refs:
                refs[key] = sp.reference(case)
            failures += sp.compare(case, gpu_out, refs[key], f"the reference ({which} GPU outputs)")
            assert not case.probe.pending, case.probe.name  # every probe runs: NaNs, division, sqrt
            got = D.run_interp(case, which, module=mod)
            failures += sp.compare(case, got, gpu_out, f"the H200 ({which})")
    assert not failures, "\n".join(failures[:10])


@pytest.mark.gpu
@pytest.mark.parametrize("pair", PAIRS, ids=_ids)
def test_gpu_and_interpreter_agree(pair):
    which, pr = pair
    for k in range(2):
        case = sp.make_case(pr, 4242 + k)
        gpu = D.run_gpu(case, which)
        msgs = sp.compare(case, gpu, sp.reference(case), "the exact reference (GPU outputs)")
        if pr.pending:
            assert not msgs, "\n".join(msgs)
            pytest.xfail(pr.pending)
        msgs += sp.compare(case, D.run_interp(case, which), gpu, "the GPU")
        if which == "ptxas130":
            msgs += sp.compare(case, D.run_gpu(case, "driver-jit"), gpu, "the driver's JIT")
        assert not msgs, "\n".join(msgs[:6])
