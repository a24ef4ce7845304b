"""fa2's dropout, ALiBi, returned probabilities and head dims above 128 (fa2.cu's kExt build and its 192/256
instances): the Philox4x32-10 generator and flash-attn's dropout layout, the interpreter against the twin on
every instance and build, the replay of the H100's outputs (traces/fa2x, recorded by
``python -m flashsim.gpu.validate_fa2_features --install``) and, under ``pytest --gpu``, hypothesis-drawn
problems of each feature on the GPU against the twin."""

import json
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from golden_npz import load, problem_keys

from flashsim.attention import check_args
from flashsim.gpu.validate_fa2_features import NAMES
from flashsim.kernels import problems, run_twin
from flashsim.kernels.spec import get
from flashsim.numerics.philox import dropout_scalars, keep_mask, keep_threshold, keep_tiles, philox4x32_10

TRACES = Path(__file__).resolve().parents[1] / "traces" / "fa2x"
GOLDEN, REPORT = TRACES / "golden_fa2_features.npz", TRACES / "fa2_features.json"
EXAMPLES = int(os.environ.get("FLASHSIM_FA_EXAMPLES", "25"))


def _sha(*arrays):
    from flashsim.gpu.validate_fa2_features import outputs_sha256

    return outputs_sha256(*arrays)


# ------------------------------------------------------------------------------------------------ philox

def test_philox_gives_the_random123_known_answers():
    # Random123's kat_vectors for philox4x32_10: (counter, key) -> output
    assert philox4x32_10(0, 0, 0).tolist() == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
    assert philox4x32_10(2**64 - 1, 2**64 - 1, 2**64 - 1).tolist() == [0x408F276D, 0x41C83B0E, 0xA20BC7C6,
                                                                        0x6D5451FD]
    assert philox4x32_10(0x299F31D0A4093822, 0x0370734413198A2E, 0x85A308D3243F6A88).tolist() == [
        0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]


def test_keep_tiles_follow_flash_attns_layout_element_by_element():
    seed, offset, thr, heads = 0x1234_5678_9ABC, 40, keep_threshold(0.3), 3
    m = keep_mask(seed, offset, thr, 2, heads, 70, 100)
    rng = np.random.default_rng(1)
    for _ in range(300):
        b, h, r, c = (int(rng.integers(n)) for n in (2, heads, 70, 100))
        lane = 4 * (r % 8) + (c % 8) // 2                       # the lane holding (r, c) in the mma C fragment
        word = philox4x32_10(seed, (r // 16) | ((c // 32) << 32), offset + (b * heads + h) * 32 + lane)[(c // 8) % 4]
        e = 2 * ((r % 16) // 8) + c % 2                          # its element: byte e of the n-tile's word
        assert m[b, h, r, c] == (((int(word) >> (8 * e)) & 0xFF) <= thr)
    # a tile anywhere on the 16 x 32 grid is the same pattern as the whole call's
    t = keep_tiles(seed, offset, thr, heads, [1], [2], [32], [64], 32, 32)[0]
    assert np.array_equal(t, m[1, 2, 32:64, 64:96])


@pytest.mark.parametrize("p", [0.1, 0.17, 0.5, 0.9])
def test_flash_attns_scalars_and_the_kept_fraction(p):
    keep, u8, rp = dropout_scalars(p)
    assert keep == np.float32(1) - np.float32(p) and u8 == int(np.floor(np.float64(keep) * 255.0))
    assert rp == np.float32(1) / keep
    m = keep_mask(7, 0, u8, 4, 9, 256, 256)
    # a byte <= u8 keeps: (u8 + 1) / 256 of them, within flash-attn's tolerance of 1 - p
    assert abs(m.mean() - (u8 + 1) / 256) < 0.003 and abs((1 - m.mean()) - p) <= 0.01


@pytest.mark.parametrize("bad", [dict(threshold=256), dict(nrows=8), dict(row0=[8])])
def test_keep_tiles_refuse_bad_arguments(bad):
    kw = dict(seed=1, offset=0, threshold=200, heads=1, batch_idx=[0], head_idx=[0], row0=[0], col0=[0], nrows=16,
              ncols=32)
    with pytest.raises(ValueError):
        keep_tiles(**{**kw, **bad})


# ------------------------------------------------------------------------------------------------ interpreter

@pytest.mark.parametrize("d", [64, 128, 192, 256])
@pytest.mark.parametrize("ext", [False, True])
def test_the_interpreter_runs_each_build_bit_for_bit_as_the_twin(d, ext):
    """Several KV steps (the online rescale), GQA, a partial last block; the ext build with dropout, the
    probabilities and ALiBi (causal at 128 and 256, the row-dependent bias otherwise)."""
    from flashsim.kernels.launch import run_kernel

    p = dict(kernel="fa2", seed=d + ext, kind="normal", batch=1, heads=2, heads_k=1, seqlen_q=70, seqlen_k=150,
             headdim=d - 8 * ext, dtype="bfloat16" if ext else "float16", causal=ext and d % 128 == 0,
             window_size=(-1, -1), softcap=0.0, softmax_scale=None)
    if ext:
        p.update(dropout_p=0.17, return_attn_probs=True, alibi="heads")
    case = problems.make_case(p)
    tw = run_twin("fa2", case.q, case.k, case.v, **case.kwargs)
    it = run_kernel("fa2", case.q, case.k, case.v, backend="interp", **case.kwargs)
    assert len(tw) == len(it) == (3 if ext else 2)
    assert _sha(*tw) == _sha(*it), case.describe()


def test_probabilities_hold_the_visited_tiles_only():
    case = problems.make_case(dict(kernel="fa2", seed=3, kind="normal", batch=1, heads=1, heads_k=1, seqlen_q=130,
                                   seqlen_k=100, headdim=64, dtype="float16", causal=True, window_size=(-1, -1),
                                   softcap=0.0, softmax_scale=None, dropout_p=0.5, return_attn_probs=True))
    out, lse, probs = run_twin("fa2", case.q, case.k, case.v, **case.kwargs)
    args = check_args(case.q, case.k, case.v, **case.kwargs)
    assert probs.shape == args.s_dmask_shape == (1, 1, 256, 128)
    p = probs.view(np.uint16)
    assert not p[..., 128:].any()  # columns past the last KV block: no CTA writes them
    attended = args.key_mask()
    keep = args.keep_mask()[0, 0]
    sign = (p[0, 0, :130, :100] & 0x8000) == 0
    assert np.array_equal(sign[attended], keep[attended])
    # masked keys have P = +0 (kept) or -0 (dropped)
    assert np.all((p[0, 0, :130, :100][~attended] & 0x7FFF) == 0)


# ------------------------------------------------------------------------------------------------ the H100's record

@pytest.fixture(scope="module")
def golden():
    return load(GOLDEN, "python -m flashsim.gpu.validate_fa2_features --install")


def _golden_keys():
    return problem_keys(GOLDEN)


@pytest.mark.parametrize("key", _golden_keys())
def test_twin_reproduces_the_h100(golden, key):
    params = json.loads(str(golden[f"{key}/params"]))
    params["window_size"] = tuple(params["window_size"])
    case = problems.make_case(params)
    assert problems.inputs_digest(case) == str(golden[f"{key}/inputs_sha256"])
    got = run_twin(params["kernel"], case.q, case.k, case.v, **case.kwargs)
    for name, x in zip(NAMES[len(got)], got):
        want = golden[f"{key}/{name}"]
        assert np.array_equal(np.ascontiguousarray(x).view(want.dtype), want), f"{case.describe()}: {name}"


def test_the_h100_report_covers_each_feature():
    rep = json.loads(REPORT.read_text())
    assert rep["ok"] and rep["provenance"]["compute_capability"] == "9.0"
    assert rep["philox"]["equal"] == rep["philox"]["triples"] >= 4096
    assert set(rep["summary"]) == {"dropout", "probs", "alibi", "hdim", "varlen", "splitkv", "kvcache", "hdim192"}
    for f, s in rep["summary"].items():
        assert s["problems"] >= 200 and s["gpu_eq_twin"] == s["problems"] and s["errors"] == 0, f
        assert s["rule"] + s["rule_na"] == s["problems"] and s["interp_eq_twin"] == s["interp_runs"], f
    # hdim192: each problem ran flash-attn's 8-warp traits (128 x 64), the plain build or the ext build (ALiBi or
    # packed sequences)
    builds = set()
    for r in rep["features"]["hdim192"]:
        params = {**r["params"], "window_size": tuple(r["params"]["window_size"])}
        case = problems.make_case(params)
        args = check_args(case.q, case.k, case.v, **case.kwargs)
        inst = get("fa2").instance_for(args)
        assert (inst.headdim, inst.block_m, inst.block_n, inst.warps) == (192, 128, 64, 8), case.describe()
        builds.add(inst.function(args.dtype, args))
    assert {"fa2_hdim192_f16", "fa2_ext_hdim192_f16", "fa2_hdim192_bf16", "fa2_ext_hdim192_bf16"} <= builds
    for r in rep["dropout_statistics"]:
        assert r["sign_bits_equal_numpy_on_attended"] and r["fraction_ok"] and r["same_state_same_bytes"]
        assert r["next_offset_other_pattern"]
    # the golden problems are some of the report's, with the GPU's bytes
    keys = _golden_keys()
    assert len(keys) >= 24
    assert {json.loads(str(load(GOLDEN, "")[f"{k}/params"]))["kernel"] for k in keys} == {"fa2", "fa2_splitkv",
                                                                                          "fa2_splitkv1"}


# ------------------------------------------------------------------------------------------------ on the GPU

@pytest.mark.gpu
@pytest.mark.parametrize("feature", ["dropout", "probs", "alibi", "hdim", "varlen", "splitkv", "kvcache", "hdim192"])
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_each_feature_on_the_gpu_is_the_twin(feature, data):
    from flashsim.gpu.validate_fa2_features import FEATURE_KERNEL, FEATURES
    from flashsim.kernels.launch import run_kernel
    from flashsim.strategies import fa_cases

    kernel = FEATURE_KERNEL.get(feature, "fa2")
    case = data.draw(fa_cases(kernel, FEATURES[feature]))
    kernel = case.params["kernel"]  # a KV cache's: the configuration flash-attn runs for it
    g = run_kernel(kernel, case.q, case.k, case.v, **case.kwargs)
    t = run_twin(kernel, case.q, case.k, case.v, **case.kwargs)
    assert _sha(*g) == _sha(*t), case.describe()


def test_a_launch_takes_one_philox_state_from_its_generator():
    """run_kernel checks its arguments, then prepares the launch: the generator advances once, and the launch
    uses the state the first check took."""
    from flashsim.attention import PhiloxGenerator
    from flashsim.kernels.launch import run_kernel

    case = problems.make_case(dict(kernel="fa2", seed=5, kind="normal", batch=1, heads=2, heads_k=2, seqlen_q=20,
                                   seqlen_k=40, headdim=64, dtype="float16", causal=False, window_size=(-1, -1),
                                   softcap=0.0, softmax_scale=None))
    g = PhiloxGenerator(seed=9, offset=8)
    got = run_kernel("fa2", case.q, case.k, case.v, backend="interp", dropout_p=0.4, generator=g,
                     return_attn_probs=True)
    assert g.offset == 8 + 1 * 2 * 32
    want = run_twin("fa2", case.q, case.k, case.v, dropout_p=0.4, rng_state=(9, 8), return_attn_probs=True)
    assert _sha(*got) == _sha(*want)


def test_a_refused_call_leaves_the_generator_alone():
    from flashsim.attention import PhiloxGenerator

    g = PhiloxGenerator(seed=1)
    q = np.zeros((1, 8, 2, 64), np.float16)
    with pytest.raises(ValueError, match="^dropout_p=0.2: softcap does not support dropout"):
        check_args(q, q, q, dropout_p=0.2, softcap=5.0, generator=g)
    assert g.offset == 0


def test_the_keep_mask_of_some_rows_is_those_rows_of_the_whole():
    m = keep_mask(3, 4, 200, 2, 3, 77, 50)
    for rows in (slice(0, 77), slice(5, 40), slice(17, 18), slice(70, 77), slice(76, 90)):
        assert np.array_equal(keep_mask(3, 4, 200, 2, 3, 77, 50, rows), m[:, :, rows]), rows
    with pytest.raises(ValueError, match="^rows=.*consecutive rows"):
        keep_mask(3, 4, 200, 2, 3, 77, 50, slice(0, 10, 2))


@pytest.mark.parametrize("argv, match", [
    (["--features", "rotary"], "--features: unknown feature 'rotary'"),
    (["--examples", "0"], "--examples and --jobs must be >= 1 and --deadline > 0"),
    (["--deadline", "-1"], "--deadline > 0"),
])
def test_the_validator_refuses_bad_options_with_usage_errors(argv, match, tmp_path, capsys):
    from flashsim.gpu.validate_fa2_features import main

    with pytest.raises(SystemExit) as exc:
        main(["--out", str(tmp_path), *argv])
    assert exc.value.code == 2 and match in capsys.readouterr().err
