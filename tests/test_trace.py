"""Per-warp traces of the FlashAttention kernels: the tag table, the twins' recording, diff (planted
differences), forcing, record/replay through files, the golden GPU traces and the CLI; with --gpu, traced
GPU runs against traced twin runs."""

import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flashsim.errors import TraceError
from flashsim.kernels.problems import make_case
from flashsim import session
from flashsim.trace import spec
from flashsim.trace.record import Recorder, RegEvent

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "traces" / "warp"

SMALL = {  # one small problem per kernel (2 CTAs where the kernel's grid allows)
    "fa2": dict(kernel="fa2", seed=3, heads=2, heads_k=1, seqlen_q=130, seqlen_k=70, headdim=72, causal=True,
                softcap=5.0),
    "kernel1": dict(kernel="kernel1", seed=4, seqlen_q=128, headdim=128, dtype="bfloat16"),
    "v5": dict(kernel="v5", seed=5, seqlen_q=128, seqlen_k=32, headdim=32),
    "v6": dict(kernel="v6", seed=6, seqlen_q=64, seqlen_k=48, headdim=48),
}


@pytest.fixture(scope="module")
def runs():
    out = {}
    for k, p in SMALL.items():
        case = make_case(session.make_params(**p))
        ctas = [0, 1] if k != "v6" else [0]
        out[k] = session.run_case(case, backend="sim", ctas=ctas)
    return out


def test_tag_enum_matches_trace_header():
    text = (ROOT / "gpu" / "kernels" / "trace.cuh").read_text()
    enum = {name: int(v) for name, v in re.findall(r"FS_TAG_(\w+) = (\d+)", text)}
    assert enum == spec.TAG_ID


@pytest.mark.parametrize("kernel", ["fa2", "kernel1", "fa_v5"])
def test_every_traced_step_of_the_cuda_source_records_what_spec_lists(kernel):
    """Each FS_TRACE(tag, nregs, ...) in the .cu file names a tag of the table; the tags the source traces are
    the tags of the kernel's program (spec.program)."""
    text = (ROOT / "gpu" / "kernels" / f"{kernel}.cu").read_text()
    tags = set(re.findall(r"FS_TRACE\((\w+),", text))
    name = "v5" if kernel == "fa_v5" else kernel
    prog = set(spec.program(name, 64 if name != "kernel1" else 128, 2)) | ({"empty"} if name == "fa2" else set())
    assert tags == prog


@pytest.mark.parametrize("kernel", sorted(SMALL))
def test_recording_does_not_change_the_twin(kernel, runs):
    from flashsim.kernels import run_twin

    case = make_case(session.make_params(**SMALL[kernel]))
    out, lse = run_twin(kernel, case.q, case.k, case.v, **case.kwargs)
    assert np.array_equal(np.ascontiguousarray(out).view(np.uint16), runs[kernel].arrays["out"])


@pytest.mark.parametrize("kernel", sorted(SMALL))
def test_twin_events_follow_the_program(kernel, runs):
    run = runs[kernel]
    hd, steps = run.meta["instance_headdim"], run.meta["kv_steps"]
    for cta in run.meta["ctas"]:
        for w in range(4):
            evs = sorted((e for e in run.events if e.cta == cta and e.warp == w), key=lambda e: e.seq)
            assert [e.seq for e in evs] == list(range(len(evs)))
            tags = [e.tag for e in evs]
            if tags == ["empty"]:
                continue
            if kernel != "fa2":
                assert tags == spec.program(kernel, hd, steps)
            for e in evs:
                assert e.regs.shape == (32, len(spec.registers(kernel, e.tag, hd)))
                assert e.regs.dtype == np.uint32


def test_fa2_accumulator_registers_are_the_fragment_layout(runs):
    """Lane l of warp w holds acc_o[m][n][e] = O row 16 w + 64 m + row, column 8 n + col, where (row, col) is
    register e of lane l in the mma C table (flashsim.warp.fragments): after normalize, narrowing the recorded
    registers gives the kernel's output rows."""
    from flashsim.kernels.common import narrow
    from flashsim.warp.fragments import fragment

    c_frag = fragment("mma.m16n8k16", "C", "f32")

    run = runs["fa2"]
    p = run.meta["params"]
    out = run.arrays["out"].reshape(p["batch"], p["seqlen_q"], p["heads"], p["headdim"])
    ev = next(e for e in run.events if e.cta == 0 and e.warp == 1 and e.tag == "normalize")
    acc = ev.regs[:, 4:]                                    # after the 4 lse registers
    dt = 72 // 8 + 1                                        # instance 128: 16 n-tiles; headdim 72 uses 9
    for lane in (0, 5, 31):
        for n in range(dt):
            for e in range(4):
                row, col = c_frag.coords(lane, e)
                col += 8 * n
                if col >= p["headdim"]:
                    continue
                row += 16 * 1 + 64                          # warp 1, m = 1 (rows 80..95: none masked)
                r = (1 * 16 + n) * 4 + e
                got = narrow(acc[lane, r:r + 1], p["dtype"])[0]
                assert got == out[0, row, 0, col]


@pytest.mark.parametrize("kernel", sorted(SMALL))
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_diff_finds_a_planted_bit_flip(kernel, runs, data):
    """Flip one bit of one lane's register at a chosen event: that event, lane and register is the first
    divergence, with the flipped bits; nothing else differs."""
    run = runs[kernel]
    with_regs = [e for e in run.events if e.regs.shape[1]]
    target = data.draw(st.sampled_from(with_regs), label="event")
    lane = data.draw(st.integers(0, 31), label="lane")
    reg = data.draw(st.integers(0, target.regs.shape[1] - 1), label="register")
    bit = data.draw(st.integers(0, 31), label="bit")
    regs = target.regs.copy()
    regs[lane, reg] ^= np.uint32(1 << bit)
    planted = [RegEvent(e.cta, e.warp, e.seq, e.tag, regs) if e is target else e for e in run.events]
    d = session.diff_runs(session.Run(run.meta, planted, {}), run)
    first = d.first
    assert (first.cta, first.warp, first.seq, first.tag) == (target.cta, target.warp, target.seq, target.tag)
    assert [(c[0], c[1]) for c in first.cells] == [(lane, reg)]
    assert first.cells[0][2] ^ first.cells[0][3] == 1 << bit
    assert len(d.divergences) == 1
    text = d.format(kernel, run.meta["instance_headdim"], run.meta["params"]["dtype"])
    name = spec.registers(kernel, target.tag, run.meta["instance_headdim"])[reg]
    assert re.search(rf"^  lane={lane} +{re.escape(name)} +A 0x", text, re.M), text


def test_diff_reports_missing_events_and_summary(runs):
    run = runs["kernel1"]
    dropped = [e for e in run.events if not (e.cta == 1 and e.warp == 3 and e.tag == "mma_pv")]
    d = session.diff_runs(run, session.Run(run.meta, dropped, {}))
    assert d.first.kind == "missing in B" and d.first.tag == "mma_pv" and (d.first.cta, d.first.warp) == (1, 3)
    assert d.per_tag["mma_pv"]["events"] == run.meta["kv_steps"]


@pytest.mark.parametrize("kernel", sorted(SMALL))
def test_forcing_a_consistent_recording_changes_nothing(kernel, runs):
    run = runs[kernel]
    d, forced = session.force(run, None)
    assert d.clean and forced == len(run.events)


def test_forcing_bisects_to_the_step_that_introduces_a_difference(runs):
    """A recording whose mma_qk of step 1 differs (as if the GPU's mma had a different result): forced with
    the recorded state before every event, only that event and the next event that reads the changed value
    differ from the twin's step."""
    run = runs["fa2"]
    target = [e for e in run.events if e.cta == 1 and e.warp == 0 and e.tag == "mma_qk"][1]
    regs = target.regs.copy()
    regs[7, 2] ^= np.uint32(1 << 20)
    planted = session.Run(run.meta, [RegEvent(e.cta, e.warp, e.seq, e.tag, regs) if e is target else e
                                     for e in run.events], run.arrays)
    d, _ = session.force(planted, None)
    assert d.first.seq == target.seq and d.first.tag == "mma_qk"
    assert {(x.cta, x.warp) for x in d.divergences} == {(1, 0)}
    # resumed from the recording through the planted event: everything after it follows the planted state
    d2, n = session.force(planted, target.seq)
    assert d2.first.seq == target.seq and n == sum(1 for e in run.events if e.seq <= target.seq)


def test_record_replay_through_a_file(tmp_path, runs):
    path = session.write(runs["v5"], tmp_path / "v5.fstrace")
    back = session.load(path)
    assert back.meta["kernel"] == "v5" and len(back.events) == len(runs["v5"].events)
    r = session.replay(back)
    assert r.clean and r.diff.compared == len(back.events)
    with pytest.raises(Exception, match="force"):
        session.write(runs["v5"], path)
    session.write(runs["v5"], path, force=True)


def test_replay_refuses_inputs_that_do_not_match_their_hash(runs):
    run = runs["kernel1"]
    q = run.arrays["q"].copy()
    q.reshape(-1)[0] ^= 1
    bad = session.Run(run.meta, run.events, {**run.arrays, "q": q})
    with pytest.raises(ValueError, match="sha256"):
        session.replay(bad)


def test_recorder_argument_errors():
    from flashsim import ArgumentError

    with pytest.raises(ArgumentError, match="kernel"):
        Recorder("fa3")
    with pytest.raises(ArgumentError, match=r"^warps=32: a CTA of this kernel has warps 0..31"):
        Recorder("fa2", warps=[32])  # the warps of the twin's CTA are checked when it starts (Recorder.bind)
    case = make_case(session.make_params(**SMALL["v5"]))
    with pytest.raises(ArgumentError, match="ctas=7"):
        session.run_case(case, backend="sim", ctas=[7])
    with pytest.raises(ArgumentError, match="backend"):
        session.run_case(case, backend="tpu")


#: fa2 at head dim 192 without dropout: flash-attn's 8-warp traits (128 x 64), two m-blocks
WIDE = dict(kernel="fa2", seed=7, heads=2, heads_k=1, seqlen_q=200, seqlen_k=100, headdim=160, causal=True)


def test_an_8_warp_instance_records_each_warp_as_its_cubin_does():
    """The recorder's register maps follow the instance's warps: all 8 warps of fa2's hdim-192 CTA are recorded,
    and the twin's events equal those of the traced cubin in the SASS interpreter."""
    from flashsim import ArgumentError

    case = make_case(session.make_params(**WIDE))
    s = session.run_case(case, backend="sim", ctas=[0, 1])
    assert s.meta["warps"] == list(range(8)) and {e.warp for e in s.events} == set(range(8))
    ev = next(e for e in s.events if e.cta == 1 and e.warp == 7 and e.tag == "normalize")
    assert ev.regs.shape == (32, len(spec.registers("fa2", "normalize", 192)))
    i = session.run_case(case, backend="interp", ctas=[0, 1])
    d = session.diff_runs(i, s, "interpreter", "twin")
    assert d.clean, d.format("fa2", 192, "float16")
    assert d.compared == len(s.events)
    with pytest.raises(ArgumentError, match=r"^warps=8: a CTA of this kernel has warps 0..7"):
        session.run_case(case, backend="sim", warps=[8])
    rec = Recorder("fa2", warps=[5])
    with pytest.raises(ArgumentError, match=r"^warps=5: a CTA of this kernel has warps 0..3"):
        rec.bind(4)


def test_gpu_buffer_size_follows_the_program():
    # fa2 hdim 128, one step: 2 counters + load_q, load_k (2 words each) + the step's six events + epilogue
    words = spec.warp_words("fa2", 128, 1)
    step = sum(2 + 32 * len(spec.registers("fa2", t, 128)) for t in ("load_v", "mma_qk", "mask", "load_k",
                                                                         "softmax", "mma_pv"))
    assert words == 2 + 2 + 2 + step + (2 + 32 * 132) + 2
    assert len(spec.registers("fa2", "softmax", 128)) == 4 + 4 + 32 + 128


# --------------------------------------------------------------------------------------------------
# golden traces recorded on the H100 (python -m flashsim.gpu.record_traces / pytest --gpu --update-traces)
# --------------------------------------------------------------------------------------------------

def _golden():
    return sorted(GOLDEN.glob("*.fstrace"))


def test_golden_traces_cover_every_kernel():
    from flashsim.gpu.record_traces import CASES

    names = {p.stem for p in _golden()}
    assert names == set(CASES), "record them with python -m flashsim.gpu.record_traces on a GPU"
    kernels = {session.load(p).meta["kernel"] for p in _golden()}
    assert kernels == set(spec.KERNELS)


@pytest.mark.parametrize("path", _golden(), ids=lambda p: p.stem)
def test_golden_trace_replays_bit_for_bit(path):
    run = session.load(path)
    assert run.meta["backend"] == "gpu" and run.meta["device"]["compute_capability"] == "9.0"
    r = session.replay(run, path.name)
    assert r.clean, r.diff.format(run.meta["kernel"], run.meta["instance_headdim"], run.meta["params"]["dtype"])


# --------------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------------

def test_cli_record_show_diff_replay_html(tmp_path, capsys):
    from flashsim.cli import main

    a = tmp_path / "a.fstrace"
    assert main(["trace", "record", "--kernel", "v5", "--seqlen", "64", "--seqlen-k", "32", "--headdim", "16",
                 "--backend", "sim", "--warp", "0,2", "-o", str(a)]) == 0
    assert "wrote" in capsys.readouterr().out
    assert main(["trace", "record", "--kernel", "v5", "--seqlen", "64", "--backend", "sim", "-o", str(a)]) == 2
    assert "force" in capsys.readouterr().err
    assert main(["trace", "show", str(a)]) == 0
    assert "cta=0 warp=2: init_ml x1" in capsys.readouterr().out
    assert main(["trace", "show", str(a), "--cta", "0", "--warp", "2", "--tag", "next_ml", "--occurrence", "1"]) == 0
    text = capsys.readouterr().out
    assert "new_m" in text and "seq" in text and text.count("\n") > 32
    assert main(["trace", "diff", str(a), str(a)]) == 0
    assert "no divergence" in capsys.readouterr().out
    assert main(["trace", "replay", str(a)]) == 0
    assert "out: bit-identical" in capsys.readouterr().out
    assert main(["trace", "replay", str(a), "--bisect"]) == 0
    # a second trace with another seed differs from the first event with registers
    b = tmp_path / "b.fstrace"
    assert main(["trace", "record", "--kernel", "v5", "--seqlen", "64", "--seqlen-k", "32", "--headdim", "16",
                 "--backend", "sim", "--warp", "0,2", "--seed", "1", "-o", str(b)]) == 0
    capsys.readouterr()
    assert main(["trace", "diff", str(a), str(b)]) == 1
    text = capsys.readouterr().out
    assert text.startswith("the two runs had different inputs (sha256 ")  # said first, before the details
    assert "first divergence: cta=0 warp=0 mma_qk #0 (seq 3)" in text and "ulp" in text
    assert re.search(r"^  lane=\d+ +\S+ +A 0x[0-9a-f]{8} ", text, re.M)
    h = tmp_path / "a.html"
    assert main(["trace", "html", str(a), "--against", str(b), "-o", str(h)]) == 0
    page = h.read_text()
    assert "flashsim trace" in page and '"f":1' in page and "mma_qk" in page
    assert main(["trace", "html", str(a), "-o", str(h)]) == 2


# --------------------------------------------------------------------------------------------------
# GPU: traced CUDA runs against traced twin runs
# --------------------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("kernel", sorted(SMALL))
def test_gpu_trace_diffs_clean_against_the_twin(kernel, runs):
    from flashsim.gpu import fa_kernels

    case = make_case(session.make_params(**SMALL[kernel]))
    g = session.run_case(case, backend="gpu", ctas=runs[kernel].meta["ctas"])
    d = session.diff_runs(g, runs[kernel], "GPU", "twin")
    assert d.clean, d.format(kernel, g.meta["instance_headdim"], g.meta["params"]["dtype"])
    assert d.compared == len(runs[kernel].events)
    # the traced build computes what the untraced one does
    out, lse = fa_kernels.run_kernel(kernel, case.q, case.k, case.v, **case.kwargs)
    assert np.array_equal(np.ascontiguousarray(out).view(np.uint16), g.arrays["out"])


@pytest.mark.gpu
def test_gpu_trace_of_an_8_warp_instance_diffs_clean_against_the_twin():
    case = make_case(session.make_params(**WIDE))
    g = session.run_case(case, backend="gpu", ctas=[0, 3])
    s = session.run_case(case, backend="sim", ctas=[0, 3])
    d = session.diff_runs(g, s, "GPU", "twin")
    assert d.clean, d.format("fa2", 192, "float16")
    assert d.compared == len(s.events) and {e.warp for e in g.events} == set(range(8))


@pytest.mark.gpu
@settings(max_examples=6, deadline=None)
@given(data=st.data())
def test_gpu_trace_of_random_problems_diffs_clean(data):
    from flashsim.kernels.problems import draw_params

    kernel = data.draw(st.sampled_from(spec.KERNELS), label="kernel")
    params = draw_params(lambda name, options: data.draw(st.sampled_from(list(options)), label=name), kernel)
    case = make_case(params)
    headdim, steps, n_ctas, _ = spec.instance(kernel, session._args(case))
    ctas = sorted({0, n_ctas - 1})
    g = session.run_case(case, backend="gpu", ctas=ctas)
    s = session.run_case(case, backend="sim", ctas=ctas)
    d = session.diff_runs(g, s, "GPU", "twin")
    assert d.clean, case.describe() + "\n" + d.format(kernel, headdim, params["dtype"])


@pytest.mark.gpu
def test_gpu_trace_overflow_is_an_error():
    from flashsim.gpu import trace_gpu

    case = make_case(session.make_params(**SMALL["kernel1"]))
    with pytest.raises(trace_gpu.TraceOverflow, match="cta=0 warp=0 dropped"):
        trace_gpu.record("kernel1", case.q, case.k, case.v, ctas=[0], cap_words=2 + 2 + 32 * 32 + 100)


@pytest.mark.gpu
def test_update_traces(run_options, tmp_path):
    """`pytest --gpu --update-traces` re-records traces/warp (each file replayed by the twin first)."""
    if not run_options.update_traces:
        pytest.skip("re-records traces/warp only under --update-traces")
    from flashsim.gpu import record_traces

    assert record_traces.main(["--force"]) == 0


def _encode(events, cap):
    """The words trace.cuh writes for one warp's events (header, then register r of lane l at 32 r + l)."""
    words = [2, 0]
    for e in events:
        nregs = e.regs.shape[1]
        words += [spec.TAG_ID[e.tag] | (nregs << 16), e.seq] + list(e.regs.T.reshape(-1))
    words[0] = len(words)
    return np.array(words + [0] * (cap - len(words)), np.uint32)


def test_gpu_buffer_decoding(runs):
    pytest.importorskip("flashsim.gpu.trace_gpu")
    from flashsim.gpu.trace_gpu import decode

    run = runs["fa2"]
    evs = sorted((e for e in run.events if e.cta == 1 and e.warp == 2), key=lambda e: e.seq)
    words = _encode(evs, 200_000)
    got, dropped = decode(words, 1, 2, "fa2", run.meta["instance_headdim"])
    assert dropped == 0 and [(e.seq, e.tag) for e in got] == [(e.seq, e.tag) for e in evs]
    assert all(np.array_equal(a.regs, b.regs) for a, b in zip(got, evs))
    bad = words.copy()
    bad[2] = 99 | (bad[2] & 0xFFFF0000)
    with pytest.raises(TraceError, match="^cta=1 warp=2: unknown tag id 99"):
        decode(bad, 1, 2, "fa2", run.meta["instance_headdim"])
    bad = words.copy()
    bad[0] = 10**7
    with pytest.raises(TraceError, match="^trace buffer of cta=1 warp=2 is corrupt"):
        decode(bad, 1, 2, "fa2", run.meta["instance_headdim"])


def test_ulp_distance():
    from flashsim.trace.diff import ulp_distance

    one = int(np.float32(1).view(np.uint32))
    assert ulp_distance(one, one + 1, "f32") == 1
    assert ulp_distance(0x80000000, 0, "f32") == 0                       # -0 and +0
    assert ulp_distance(0x80000001, 0x00000001, "f32") == 2              # across zero
    assert ulp_distance(0x7FC00000, one, "f32") == -1                    # NaN: no distance
    assert ulp_distance(0x7F800000, 0x7F7FFFFF, "f32") == 1              # inf is one past the largest
    h1 = int(np.float16(1).view(np.uint16))
    assert ulp_distance(h1 | (h1 << 16), (h1 + 3) | (h1 << 16), "f16x2") == 3
    assert ulp_distance(h1 | (0x7E00 << 16), h1 | (h1 << 16), "f16x2") == -1
    assert ulp_distance(0xABCD0000 | h1, h1 + 2, "f16") == 2              # low half only
    b1 = int(np.float32(1).view(np.uint32)) >> 16
    assert ulp_distance(b1 | (b1 << 16), b1 | ((b1 + 5) << 16), "bf16x2") == 5
    got = ulp_distance(np.array([one, 0x80000000]), np.array([one + 7, 0]), "f32")
    assert got.tolist() == [7, 0]


def test_bad_filters_and_parameters_are_named(capsys):
    from flashsim import ArgumentError
    from flashsim.cli import main

    for bad in ("x", "3-1", ","):
        assert main(["trace", "record", "--kernel", "v5", "--seqlen", "64", "--backend", "sim", "--cta", bad,
                     "-o", "/nonexistent/x.fstrace"]) == 2
        assert "--cta" in capsys.readouterr().err
    assert main(["trace", "record", "--kernel", "v5", "--seqlen", "64", "--backend", "sim", "--warp", "0-7",
                 "-o", "/nonexistent/x.fstrace"]) == 2
    assert "warps=4" in capsys.readouterr().err
    with pytest.raises(ArgumentError, match="kind"):
        session.make_params("fa2", kind="huge")
    with pytest.raises(ArgumentError, match="tag"):
        spec.registers("fa2", "nope")
    with pytest.raises(ArgumentError, match="headdim"):
        spec.registers("fa2", "mma_qk", 96)


def test_gpu_trace_arguments_are_checked_before_the_gpu():
    pytest.importorskip("flashsim.gpu.trace_gpu")
    from flashsim import ArgumentError
    from flashsim.gpu import trace_gpu

    case = make_case(session.make_params(**SMALL["kernel1"]))       # 2 CTAs
    for kw, name in ((dict(ctas=[2]), "ctas=2"), (dict(ctas=[-1]), "ctas=-1"), (dict(warps=[4]), "warps=4"),
                     (dict(cap_words=1), "cap_words=1"), (dict(cap_words=2.5), "cap_words=2.5")):
        with pytest.raises(ArgumentError, match=name):
            trace_gpu.arm("kernel1", case.q, case.k, case.v, **kw)


def test_cli_diff_refuses_traces_of_different_kernels(tmp_path, runs, capsys):
    from flashsim.cli import main

    a, b = session.write(runs["v5"], tmp_path / "a.fstrace"), session.write(runs["kernel1"], tmp_path / "b.fstrace")
    assert main(["trace", "diff", str(a), str(b)]) == 2
    assert "differ in kernel" in capsys.readouterr().err
