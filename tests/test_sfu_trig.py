"""MUFU.SIN / MUFU.COS and sin.approx / cos.approx: the H200's golden outputs replayed, the laws the model is
built on, the probe cubin whose FMUL is rewritten, and kernels with __sinf / __cosf / __sincosf in the
interpreter. The law and the table were checked on the GPU on all 2^32 inputs of both MUFU functions
(``python -m flashsim.gpu.sfu_trig --table``; traces/sfu_trig/trig_table.json)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import flashsim.cuda as fc
from flashsim.numerics import sfu

TRACES = Path(__file__).resolve().parent.parent / "traces" / "sfu_trig"
FORMS = {"mufu_sin": sfu.mufu_sin, "mufu_cos": sfu.mufu_cos, "sin_approx_f32": sfu.sin_approx_f32,
         "sin_approx_ftz_f32": lambda x: sfu.sin_approx_f32(x, ftz=True), "cos_approx_f32": sfu.cos_approx_f32,
         "cos_approx_ftz_f32": lambda x: sfu.cos_approx_f32(x, ftz=True)}
f32 = lambda v: np.asarray(v, np.float32).view(np.uint32)  # noqa: E731


@pytest.fixture(scope="module")
def golden():
    with np.load(TRACES / "trig_golden.npz") as z:
        return {k: z[k] for k in z.files}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_golden_outputs_of_the_h200_replay_exactly(golden, form):
    x = golden["x"]
    got, want = FORMS[form](x), golden[form]
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, [(hex(int(x[i])), hex(int(want[i])), hex(int(got[i]))) for i in bad[:5]]
    assert x.size == 1 << 18


def test_the_gpu_law_check_covered_every_input_with_no_mismatch():
    rep = json.loads((TRACES / "trig_table.json").read_text())
    assert rep["law_mismatch_sin"] == 0 and rep["law_mismatch_cos"] == 0
    import hashlib
    t = sfu.tables()["sin_half"]
    assert t.size == 1 << 24 and hashlib.sha256(t.astype("<u4").tobytes()).hexdigest() == rep["table_sha256"]


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_sin_is_odd_cos_even_and_cos_is_sin_a_quarter_turn_on(b):
    x = np.array([b], np.uint32)
    s, c = sfu.mufu_sin(x), sfu.mufu_cos(x)
    xn = x ^ np.uint32(0x80000000)
    finite = (b & 0x7F800000) != 0x7F800000
    if finite:
        assert sfu.mufu_sin(xn)[0] == s[0] ^ 0x80000000
        assert sfu.mufu_cos(xn)[0] == c[0]
        k = sfu.trig_index(x)[0]
        q = np.array([(int(k) + (1 << 23)) % (1 << 25)], np.float64) * 2.0 ** -25
        assert sfu.mufu_sin(q.astype(np.float32).view(np.uint32))[0] == c[0] or int(k) + (1 << 23) >= (1 << 24)
    else:
        assert s[0] == c[0] == 0x7FFFFFFF


def test_only_the_fraction_of_a_turn_truncated_to_25_bits_is_read():
    y = np.float32(0.3017578125)  # a multiple of 2^-25
    for n in (1.0, 7.0, 1000.0, 2.0**20):
        x = np.float32(n) + y
        assert sfu.mufu_sin(f32([x]))[0] == sfu.mufu_sin(f32([np.float32(x) - np.float32(n)]))[0]
    lo = f32([0.0751953125])[0]  # in [2^-4, 2^-3), where four floats share each k
    assert (sfu.mufu_sin(np.arange(lo, lo + 4, dtype=np.uint32)) == sfu.mufu_sin(np.array([lo], np.uint32))).all()
    # whole turns and tiny arguments
    big = f32([2.0**23, 2.0**24 + 2, 3e38, -2.0**30])
    assert list(sfu.mufu_sin(big)) == [0, 0, 0, 0x80000000]
    assert (sfu.mufu_cos(big) == 0x3F800000).all()
    tiny = f32([2.0**-26, -2.0**-30, 1e-40, -1e-45])
    assert list(sfu.mufu_sin(tiny)) == [0, 0x80000000, 0, 0x80000000]
    assert (sfu.mufu_cos(tiny) == 0x3F800000).all()
    assert list(sfu.mufu_sin(f32([0.25, 0.5, 0.75]))) == [0x3F800000, 0x80000000, 0xBF800000]


def test_the_probe_cubin_feeds_the_unit_its_input_unchanged():
    from flashsim.gpu import sfu_trig

    mod = fc.RawModule(cubin=sfu_trig.raw_cubin())
    texts = [i.text for k in sfu_trig.RAW_KERNELS for i in mod.get_function(k)._prog().instructions.values()]
    fmuls = [re.fullmatch(r"FMUL\.RZ R\d+, R\d+, (\S+)", t).group(1) for t in texts if t.startswith("FMUL")]
    assert fmuls == ["1"] * 4, fmuls
    assert sum(t.startswith(("MUFU.SIN ", "MUFU.COS ")) for t in texts) == 4
    rng = np.random.default_rng(5)
    x = rng.integers(0, 2**32, 2048, dtype=np.uint64).astype(np.uint32)
    x[:8] = f32([0.0, -0.0, 1e-40, 0.25, 0.7, 12345.678, np.inf, np.nan])
    for fn, model in (("sin", sfu.mufu_sin), ("cos", sfu.mufu_cos)):
        out = fc.zeros((x.size,), np.uint32)
        mod.get_function(f"raw_array_{fn}")((x.size // 256,), (256,), (fc.asarray(x), out, np.uint64(x.size)))
        np.testing.assert_array_equal(out.get(), model(x), err_msg=fn)


FAST_TRIG = r"""
extern "C" __global__ void trig(const float* x, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float s, c;
  __sincosf(x[i], &s, &c);
  out[i] = __sinf(x[i]);
  out[n + i] = __cosf(x[i]);
  out[2 * n + i] = s;
  out[3 * n + i] = c;
  if ((threadIdx.x & 3) == 1) out[4 * n + i] = __sinf(x[i] * 3.0f) + __cosf(x[i] - 1.0f);  // a divergent use
}
"""


def trig_inputs(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(512) * 10.0 ** rng.integers(-8, 8, 512)).astype(np.float32)
    x[:12] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-39, 3e38, np.pi, -np.pi / 2, 1e7, 6.2831855]
    return x


def test_fast_math_trig_intrinsics_in_the_interpreter_follow_the_model():
    mod = fc.RawModule(code=FAST_TRIG)
    texts = [i.text for i in mod.get_function("trig")._prog().instructions.values()]
    assert any("MUFU.SIN" in t for t in texts) and any("MUFU.COS" in t for t in texts)
    for seed in range(2):
        x = trig_inputs(seed)
        n = x.size
        out = fc.zeros((5 * n,), np.float32)
        mod.get_function("trig")((n // 128,), (128,), (fc.asarray(x), out, np.int32(n)))
        got = out.get().view(np.uint32)
        xb = x.view(np.uint32)
        s, c = sfu.sin_approx_f32(xb), sfu.cos_approx_f32(xb)
        for k, want in enumerate((s, c, s, c)):
            np.testing.assert_array_equal(got[k * n:(k + 1) * n], want, err_msg=f"output {k}")
        lanes = (np.arange(n) % 128 & 3) == 1
        assert (got[4 * n:][~lanes] == 0).all()
