"""``flashsim run``: a user's kernel on generated inputs, on the CPU: --arg parsing, the bank, race, fault and
initcheck reports, exit codes, the output files and --gpu's comparison."""

from __future__ import annotations

import io
import json
import re
import shlex
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from flashsim.cli import main
from flashsim.errors import ArgumentError
from flashsim.cli.launchargs import compare_bits, make_value, parse_arg, parse_args_list

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "tests" / "data" / "run_example.cu"
ARGS = ["--grid", "4", "--block", "64", "--arg", "in=f32[4,32,32]:normal", "--arg", "out=f32[128]:zeros",
        "--arg", "scale=f32:0.5"]


def line_of(marker: str) -> int:
    """The 1-based line of the example kernel that holds ``marker``."""
    (n,) = [i for i, t in enumerate(EXAMPLE.read_text().splitlines(), 1) if marker in t]
    return n


CONFLICT, RACE_W, RACE_R = line_of("bank conflict:"), line_of("race: warp 0 writes"), line_of("warp 1 reads them")


def run(capsys, *argv):
    rc = main([*map(str, argv)])
    out, err = capsys.readouterr()
    return rc, out, err


# ----------------------------------------------------------------------------------------------------
# --arg
# ----------------------------------------------------------------------------------------------------


def test_good_arg_specs_parse():
    s = parse_arg("q=f16[1,4096,128]:normal")
    assert (s.name, s.dtype, s.shape, s.init, s.params, s.is_array) == ("q", "f16", (1, 4096, 128), "normal",
                                                                         (0.0, 1.0), True)
    assert parse_arg("x=f16[8]:normal(0,0.5)").params == (0.0, 0.5)
    assert parse_arg("x=f32[8]:uniform(-1,1)").params == (-1.0, 1.0)
    assert parse_arg("x=u8[8]:uniform(0,256)").params == (0, 256)
    assert parse_arg("x=f32[3]:values(1,2.5,-3)").params == (1.0, 2.5, -3.0)
    assert parse_arg("o=f32[4096]:empty").init == "empty"
    for text, value in (("n=i32:4096", 4096), ("scale=f32:0.125", 0.125), ("p=u64:0", 0),
                        ("m=u32:0xffffffff", 2**32 - 1)):
        s = parse_arg(text)
        assert not s.is_array and s.value == value
    assert [s.name for s in parse_args_list(["a=i32:1", "b=f32[2]:zeros"])] == ["a", "b"]


@pytest.mark.parametrize("spec, why", [
    ("q", "expected NAME=DTYPE[SHAPE]:INIT"),
    ("2q=f32[4]:zeros", "is not an identifier"),
    ("q=f99[4]:zeros", "unknown dtype 'f99'"),
    ("q=f32[4]:gauss", "unknown INIT 'gauss'"),
    ("q=f32[4]", "missing ':'"),
    ("q=f32[4,0]:zeros", "must be positive integers"),
    ("q=f32[]:zeros", "must be positive integers"),
    ("q=f32[a]:zeros", "must be positive integers"),
    ("q=f32[4]:zeros(1)", "zeros takes 0 parameters"),
    ("q=f32[4]:normal(1)", "normal takes 0 or 2 parameters"),
    ("q=i32[4]:normal", "normal needs a floating dtype"),
    ("q=f32[4]:normal(0,-1)", "STD >= 0"),
    ("q=f32[4]:uniform(1,1)", "LO < HI"),
    ("q=i32[4]:uniform", "needs bounds"),
    ("q=i8[4]:uniform(0,300)", "HI <= 128"),
    ("q=f32[3]:values(1,2)", "gives 2 values for 3 elements"),
    ("q=i8[2]:values(1,200)", "outside the range of i8"),
    ("q=f32[2]:values(1,x)", "'x' is not a number"),
    ("q=f32[2]:file(/nonexistent/x.npy)", "no such file"),
    ("n=i32:", "a scalar needs a value"),
    ("n=i32:1.5", "'1.5' is not an integer"),
    ("n=u8:256", "outside the range of u8"),
    ("x=f32:abc", "'abc' is not a number"),
])
def test_bad_arg_specs_are_refused_naming_the_arg(spec, why, capsys):
    rc, out, err = run(capsys, "run", EXAMPLE, "--grid", "1", "--block", "64", "--arg", spec)
    assert rc == 2 and not out
    assert err.startswith(f"flashsim: error: --arg={spec!r}: ") and why in err, err
    with pytest.raises(ArgumentError, match=re.escape(why)):
        parse_arg(spec)


def test_a_name_used_twice_is_refused(capsys):
    rc, _, err = run(capsys, "run", EXAMPLE, "--grid", "1", "--block", "64", "--arg", "a=f32[4]:zeros",
                     "--arg", "a=i32:1")
    assert rc == 2 and "--arg='a=i32:1': the name 'a' is already used by --arg 'a=f32[4]:zeros'" in err


@pytest.mark.parametrize("args, why", [
    (ARGS[:-2], "--arg: kernel 'row_sums' takes 3 parameters (#0: 8 bytes, #1: 8 bytes, #2: 4 bytes; an array is "
                "an 8-byte pointer), 2 given ('in=f32[4,32,32]:normal', 'out=f32[128]:zeros')"),
    (ARGS + ["--arg", "x=i32:1"], "takes 3 parameters"),
    (ARGS[:-1] + ["scale=f64:0.5"], "--arg='scale=f64:0.5': f64 is 8 bytes, but parameter #2 of 'row_sums' has 4 "
                                    "(use a 4-byte dtype: f32, i32, u32"),
    (ARGS[:-1] + ["scale=f32[1]:zeros"], "--arg='scale=f32[1]:zeros': an array is passed as an 8-byte pointer, but "
                                         "parameter #2"),
    (["--grid", "4", "--block", "64", "--arg", "in=i64:0", "--arg", "out=f32[128]:zeros", "--arg", "s=f32:1",
      "--kernel", "nope"], "--kernel='nope': no such kernel in"),
])
def test_arguments_are_matched_with_the_kernels_parameters(args, why, capsys):
    rc, out, err = run(capsys, "run", EXAMPLE, *args)
    assert rc == 2 and why in err, err
    assert "ran:" not in out  # refused before the launch


@pytest.mark.parametrize("argv, message", [
    (["--grid", "0", "--block", "64"], "argument --grid: grid dimension x = 0 is outside"),
    (["--grid", "4,70000", "--block", "64"], "argument --grid: grid dimension y = 70000 is outside 1..65535"),
    (["--grid", "4", "--block", "64,32"], "argument --block: 2048 threads per block"),
    (["--grid", "4", "--block", "x"], "argument --block: expected X[,Y[,Z]]"),
    (["--grid", "4", "--block", "64", "--top", "0"], "argument --top: expected a positive integer, got 0"),
    (["--grid", "4", "--block", "64", "--seed", "-1"], "argument --seed: expected a non-negative integer"),
    (["--grid", "4", "--block", "64", "--shared-mem", "-4"], "argument --shared-mem: expected a non-negative"),
])
def test_launch_options_are_validated_by_the_parser(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["run", str(EXAMPLE), *argv])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_inputs_are_reproducible_and_typed(tmp_path):
    spec = parse_arg("x=bf16[64]:normal(0,0.5)")
    a, b = make_value(spec, np.random.default_rng(0)), make_value(spec, np.random.default_rng(0))
    assert a.dtype == ml_dtypes.bfloat16 and a.shape == (64,) and np.array_equal(a.view(np.uint16), b.view(np.uint16))
    assert not np.array_equal(a.view(np.uint16), make_value(spec, np.random.default_rng(1)).view(np.uint16))
    assert np.array_equal(make_value(parse_arg("i=i32[2,3]:arange"), None), np.arange(6, dtype=np.int32).reshape(2, 3))
    u = make_value(parse_arg("u=u8[4000]:uniform(250,256)"), np.random.default_rng(0))
    assert u.dtype == np.uint8 and u.min() == 250 and u.max() == 255
    bits = make_value(parse_arg("b=u32[1024]:bits"), np.random.default_rng(0))
    assert bits.dtype == np.uint32 and bits.max() > 2**31
    assert make_value(parse_arg("x=f32[3]:values(1,2.5,-3)"), None).tolist() == [1.0, 2.5, -3.0]
    s = make_value(parse_arg("scale=f16:0.1"), None)
    assert isinstance(s, np.float16) and s == np.float16(0.1)
    np.save(tmp_path / "x.npy", np.arange(16, dtype=np.float32).reshape(4, 4))
    assert make_value(parse_arg(f"x=f32[4,4]:file({tmp_path / 'x.npy'})"), None)[3, 3] == 15
    np.savez(tmp_path / "y.npz", a=np.array([0x3F80, 0x4000], np.uint16), b=np.zeros(2))
    y = make_value(parse_arg(f"y=bf16[2]:file({tmp_path / 'y.npz'}:a)"), None)  # bit patterns
    assert y.dtype == ml_dtypes.bfloat16 and y.astype(np.float32).tolist() == [1.0, 2.0]
    for spec, why in ((f"x=f32[2,8]:file({tmp_path / 'x.npy'})", "holds shape [4, 4]"),
                      (f"x=f64[4,4]:file({tmp_path / 'x.npy'})", "holds float32, the --arg says f64"),
                      (f"y=bf16[2]:file({tmp_path / 'y.npz'})", "holds 2 arrays"),
                      (f"y=bf16[2]:file({tmp_path / 'y.npz'}:c)", "has no array 'c'")):
        with pytest.raises(ArgumentError, match=re.escape(why)):
            make_value(parse_arg(spec), None)


# ----------------------------------------------------------------------------------------------------
# What a run shows
# ----------------------------------------------------------------------------------------------------


def test_the_example_shows_its_bank_conflict_and_its_race(capsys):
    rc, out, err = run(capsys, "run", EXAMPLE, *ARGS)
    assert rc == 1, out + err
    assert "kernel row_sums, grid (4, 1, 1), block (64, 1, 1)" in out
    banks = out.split("shared-memory banks per source line (worst first):\n")[1].splitlines()
    worst = banks[1].split()  # the first row after the header: the conflicting line, with its text
    assert worst[:5] == [f"run_example.cu:{CONFLICT}", "32", "1024", "128", "896"] and "s += tile[t][c];" in banks[1]
    assert all(r.split()[4] == "0" for r in banks[2:5])  # every other line is conflict-free
    assert "total row_sums: 168 shared-memory instructions executed, 1160 wavefronts, 264 ideal, 896 conflicts" in out
    races = out.split("races: ")[1]
    assert races.startswith("128 hazards") and "1 instruction pair:" in races
    assert re.search(rf"first : write run_example.cu:{RACE_W}  pc=0x[0-9a-f]+ `STS", races)
    assert re.search(rf"second: read  run_example.cu:{RACE_R}  pc=0x[0-9a-f]+ `LDS", races)
    assert "sums[t] = s;" in races and "ctas 0-3, warps 0, lanes 0-31" in races and "warps 1, lanes 0-31" in races
    assert "uninitialised reads: none" in out
    assert "executed warp instructions per source line" in out and "tile[i / 32][i % 32] = src[i];" in out
    assert out.rstrip().endswith("found: 1 racing instruction pair(s)")
    assert not err  # one batch of CTAs: no progress lines


def test_another_interleaving_finds_the_same_race(capsys):
    rc, out, _ = run(capsys, "run", EXAMPLE, *ARGS, "--schedule-seed", "3", "--no-banks", "--no-initcheck")
    assert rc == 1 and "schedule: seed 3" in out and "shared-memory banks: not counted (--no-banks)" in out
    lines = {int(x) for x in re.findall(r"(?:write|read) +run_example.cu:(\d+)", out)}
    assert lines == {RACE_W, RACE_R}
    assert "uninitialised reads: not checked (--no-initcheck)" in out


def test_exit_status_is_0_when_nothing_is_found(capsys):
    rc, out, _ = run(capsys, "run", EXAMPLE, *ARGS, "--no-races")
    assert rc == 0 and "races: not checked (--no-races)" in out
    assert out.rstrip().endswith("clean: no fault, no uninitialised reads")


def test_a_fault_is_a_finding_with_its_pc_and_line(capsys):
    args = ARGS[:]
    args[args.index("out=f32[128]:zeros")] = "out=f32[100]:zeros"
    rc, out, err = run(capsys, "run", EXAMPLE, *args, "--ctas-per-batch", "1")
    assert rc == 1 and not err.startswith("flashsim: error")
    assert re.search(rf"FAULT: out-of-bounds global address at pc=0x[0-9a-f]+ `STG[^`]*`, run_example.cu:{RACE_R}", out)
    assert "cta=3 warp=1 lane=4" in out and "0 bytes past the end of out (f32[100], 400 bytes)" in out
    assert "(the report below covers the CTAs run until then)" in out
    assert f"run_example.cu:{CONFLICT}" in out  # the partial report is kept
    assert "found: a fault, 1 racing instruction pair(s)" in out


def test_reads_of_an_empty_array_are_reported(capsys):
    args = ARGS[:]
    args[args.index("in=f32[4,32,32]:normal")] = "in=f32[4,32,32]:empty"
    rc, out, _ = run(capsys, "run", EXAMPLE, *args, "--no-races")
    assert rc == 1
    assert "uninitialised reads: 4096 lane accesses, the first 1000 listed:" in out
    assert "read of global memory of in (e.g. in[0, 0, 0]), never written" in out
    assert f"at run_example.cu:{line_of('= src[i];')}  pc=0x" in out
    assert "found: 4096 uninitialised read(s)" in out


UNINIT_SMEM = r"""
extern "C" __global__ void copy_smem(float* out) {
    __shared__ float s[64];
    if (threadIdx.x < 32) s[threadIdx.x] = 1.0f;
    __syncthreads();
    out[threadIdx.x] = s[threadIdx.x];   // threads 32..63 read what nobody wrote
}
extern "C" __global__ void twice(float* out) { out[threadIdx.x] *= 2.0f; }
"""


def test_a_clean_kernel_and_shared_memory_initcheck(tmp_path, capsys):
    src = tmp_path / "k.cu"
    src.write_text(UNINIT_SMEM)
    rc, _, err = run(capsys, "run", src, "--grid", "1", "--block", "64", "--arg", "o=f32[64]:zeros")
    assert rc == 2 and "--kernel=None: " in err and "has 2 kernels (copy_smem, twice): name one" in err
    rc, out, _ = run(capsys, "run", src, "--kernel", "twice", "--grid", "1", "--block", "64", "--arg",
                     "o=f32[64]:arange")
    assert rc == 0 and out.rstrip().endswith("clean: no fault, no races, no uninitialised reads")
    assert "shared-memory banks: no shared-memory instruction executed" in out
    rc, out, _ = run(capsys, "run", src, "--kernel", "copy_smem", "--grid", "1", "--block", "64", "--arg",
                     "o=f32[64]:empty")
    assert rc == 1 and "32x read of shared memory at 0x" in out and "k.cu:6" in out and "lanes 0-31" in out


def test_a_cubin_runs_without_compiling(tmp_path, capsys):
    from flashsim.sass.toolchain import compile_cuda

    cubin, _, _ = compile_cuda(EXAMPLE.read_text(), name=str(EXAMPLE))
    path = tmp_path / "k.cubin"
    path.write_bytes(cubin)
    rc, out, _ = run(capsys, "run", path, *ARGS, "--no-races")
    assert rc == 0 and f"run_example.cu:{CONFLICT}" in out and "s += tile[t][c];" in out
    rc, _, err = run(capsys, "run", path, *ARGS, "-O=-std=c++17")
    assert rc == 2 and "a .cubin is not compiled" in err
    rc, _, err = run(capsys, "run", tmp_path / "missing.cu", *ARGS)
    assert rc == 2 and "KERNEL=" in err and "no such file" in err


def test_nvrtc_options_reach_the_compiler(capsys):
    rc, out, _ = run(capsys, "run", EXAMPLE, *ARGS, "-O=-DUNUSED=1", "--nvrtc-option=-std=c++17", "--no-races")
    assert rc == 0
    rc, _, err = run(capsys, "run", EXAMPLE, *ARGS, "-O=--no-such-nvrtc-option")
    assert rc == 2 and "nvrtc failed to compile" in err


# ----------------------------------------------------------------------------------------------------
# Output files
# ----------------------------------------------------------------------------------------------------


def test_json_html_svg_are_written_and_not_overwritten_without_force(tmp_path, capsys):
    j, h, s = tmp_path / "r.json", tmp_path / "r.html", tmp_path / "r.svg"
    outs = ["--json", j, "--html", h, "--svg", s]
    rc, out, _ = run(capsys, "run", EXAMPLE, *ARGS, *outs)
    assert rc == 1 and all(f"wrote {p}" in out for p in (j, h, s))
    doc = json.loads(j.read_text())
    assert doc["run"]["kernel"] == "row_sums" and doc["run"]["grid"] == [4, 1, 1] and doc["run"]["exit_status"] == 1
    assert [a["spec"] for a in doc["run"]["args"]] == ["in=f32[4,32,32]:normal", "out=f32[128]:zeros", "scale=f32:0.5"]
    assert doc["banks_by_line"][0]["line"] == CONFLICT and doc["banks_by_line"][0]["conflicts"] == 896
    assert doc["race_count"] == 128 and {doc["races"][0]["first"]["line"], doc["races"][0]["second"]["line"]} == {
        RACE_W, RACE_R}
    page = h.read_text()
    assert "<h2>Source: " in page and "s += tile[t][c];" in page
    # the 128 hazards are one instruction pair: one bullet, as the CLI prints one group
    assert "<h2>Races: 128 hazards, 1 instruction pair</h2>" in page and page.count("<li>RAW at shared addr") == 1
    assert f"<tr class=hot><td class=xs>{CONFLICT}<" in page  # the conflicting line is marked
    svg = ET.fromstring(s.read_text())
    texts = "".join(svg.itertext())
    # every label fits left of the bars, every note inside the page (11 px monospace: 6.7 px a character)
    ns = "{http://www.w3.org/2000/svg}"
    bars = [float(r.get("x")) for r in svg.iter(f"{ns}rect") if r.get("fill") == "#27ae60" and float(r.get("x")) > 100]
    for t in svg.iter(f"{ns}text"):
        n = len("".join(t.itertext()))
        if float(t.get("x")) < min(bars):
            assert float(t.get("x")) + 6.7 * n <= min(bars), "".join(t.itertext())
        assert float(t.get("x")) + 6.7 * n <= float(svg.get("width")), "".join(t.itertext())
    assert f"run_example.cu:{CONFLICT}" in texts and "896 conflicts" in texts and f"run_example.cu:{RACE_W}" in texts
    before = {p: p.read_text() for p in (j, h, s)}
    for flag, p in (("--json", j), ("--html", h), ("--svg", s)):
        rc, out, err = run(capsys, "run", EXAMPLE, *ARGS, flag, p)
        assert rc == 2 and not out  # refused before anything ran
        assert f"flashsim: error: {flag}='{p}': exists (pass --force to overwrite)" in err
    assert {p: p.read_text() for p in (j, h, s)} == before
    rc, out, _ = run(capsys, "run", EXAMPLE, *ARGS, *outs, "--force", "--no-races")
    assert rc == 0 and json.loads(j.read_text())["run"]["exit_status"] == 0
    rc, _, err = run(capsys, "run", EXAMPLE, *ARGS, "--json", tmp_path / "nope" / "r.json")
    assert rc == 2 and "the folder" in err and "does not exist" in err
    x = tmp_path / "x"
    rc, out, err = run(capsys, "run", EXAMPLE, *ARGS, "--html", x, "--json", x)
    assert rc == 2 and not out and f"--json='{x}': is also --html's file: give each output its own" in err


def test_an_unwritable_output_folder_is_refused_before_anything_runs(tmp_path, capsys, monkeypatch):
    import os

    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if Path(p) == tmp_path else real(p, mode, **kw))
    rc, out, err = run(capsys, "run", EXAMPLE, *ARGS, "--html", tmp_path / "r.html")
    assert rc == 2 and not out and f"the folder {tmp_path} is not writable" in err


def test_outputs_can_be_saved(tmp_path, capsys):
    d = tmp_path / "outs"
    rc, out, _ = run(capsys, "run", EXAMPLE, *ARGS, "--save-outputs", d, "--no-races")
    assert rc == 0 and f"wrote {d / 'sim.npz'}" in out
    saved = np.load(d / "sim.npz")
    x = np.random.default_rng(0).normal(0, 1, (4, 32, 32)).astype(np.float32)
    assert np.array_equal(saved["in"], x)
    rows = x.reshape(128, 32)
    sums = np.zeros(128, np.float32)
    for c in range(32):  # the kernel's order of float32 additions
        sums = (sums + rows[:, c]).astype(np.float32)
    assert np.array_equal(saved["out"], np.float32(0.5) * sums)
    rc, _, err = run(capsys, "run", EXAMPLE, *ARGS, "--save-outputs", d)
    assert rc == 2 and "sim.npz exists there (pass --force to overwrite)" in err


# ----------------------------------------------------------------------------------------------------
# Progress and Ctrl-C
# ----------------------------------------------------------------------------------------------------


def test_progress_is_plain_lines_off_a_terminal(capsys):
    rc, _, err = run(capsys, "run", EXAMPLE, *ARGS, "--ctas-per-batch", "1", "--no-races")
    assert rc == 0
    lines = err.splitlines()
    assert [ln.split(" CTAs")[0] for ln in lines] == [f"row_sums: {i}/4" for i in (1, 2, 3, 4)]
    assert "(100%)" in lines[-1] and "ETA" in lines[-1]


def test_progress_is_a_bar_on_a_terminal(monkeypatch, capsys):
    class Tty(io.StringIO):
        def isatty(self):
            return True

    tty = Tty()
    monkeypatch.setattr(sys, "stderr", tty)
    assert main(["run", str(EXAMPLE), *ARGS, "--ctas-per-batch", "2", "--no-races"]) == 0
    assert "row_sums:" in tty.getvalue() and "CTA" in tty.getvalue() and "/4" in tty.getvalue()


def test_ctrl_c_stops_the_launch(monkeypatch, capsys):
    from flashsim.progress import Progress

    calls = []

    def interrupt(self, done, total):
        calls.append(done)
        raise KeyboardInterrupt

    monkeypatch.setattr(Progress, "__call__", interrupt)
    rc, out, err = run(capsys, "run", EXAMPLE, *ARGS, "--ctas-per-batch", "1")
    assert rc == 130 and err.strip().splitlines()[-1] == "interrupted" and calls == [1]
    assert "races:" not in out


# ----------------------------------------------------------------------------------------------------
# --gpu
# ----------------------------------------------------------------------------------------------------


def test_gpu_without_cupy_fails_before_simulating(monkeypatch, capsys):
    import flashsim.gpu.runtime
    import flashsim.run as fr

    def no_gpu():
        raise flashsim.gpu.runtime.GpuUnavailable("no CUDA device (test)")

    def no_simulation(path, nvrtc_options=()):
        raise AssertionError("simulated before checking the GPU")

    monkeypatch.setattr(flashsim.gpu.runtime, "require_gpu", no_gpu)
    monkeypatch.setattr(fr, "load_module", no_simulation)
    rc, out, err = run(capsys, "run", EXAMPLE, *ARGS, "--gpu")
    assert rc == 2 and not out and err.strip() == "flashsim: error: no CUDA device (test)"


def test_compare_bits_names_the_first_differing_element():
    a = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    b = a.copy()
    assert compare_bits("o", a, b) == (True, "o: 4 elements bit-identical")
    b.view(np.uint32)[1, 0] += 1
    b.view(np.uint32)[1, 1] ^= 0x80000000
    same, text = compare_bits("o", a, b)
    assert not same
    assert text == ("o: 2 of 4 elements differ; first at [1, 0]: simulator 3.0 (0x40400000), "
                    "GPU 3.0000002 (0x40400001)")
    h = np.array([1, 2], ml_dtypes.bfloat16)
    same, text = compare_bits("h", h, np.array([1, 3], ml_dtypes.bfloat16))
    assert text.endswith("first at [1]: simulator 2.0 (0x4000), GPU 3.0 (0x4040)")
    same, text = compare_bits("i", np.array([-1], np.int8), np.array([1], np.int8))
    assert text.endswith("simulator -1 (0xff), GPU 1 (0x01)")


@pytest.mark.parametrize("flip", [False, True])
def test_gpu_comparison_plumbing_with_a_stand_in_device(flip, monkeypatch, tmp_path, capsys):
    """The GPU path (bit-pattern transfers, scalars by width, the comparison) against a stand-in for cupy that
    runs the cubin in the interpreter; ``flip`` changes one output bit as a differing GPU would."""
    import flashsim.gpu.runtime
    import flashsim.cuda as fc

    class FakeCupy:
        class cuda:
            class runtime:
                getDevice = staticmethod(lambda: 0)
                getDeviceProperties = staticmethod(lambda d: {"name": b"stand-in"})

        asarray = staticmethod(lambda x: np.array(x))
        asnumpy = staticmethod(lambda x: np.array(x))

    class FakeModule:
        def __init__(self, cubin):
            self.mod = fc.RawModule(cubin=cubin)

        def get_function(self, name):
            return self.mod.get_function(name)

    def fake_launch(kern, grid, block, args, shared_mem=0):
        dev = [fc.asarray(a) if isinstance(a, np.ndarray) else a for a in args]
        assert all(isinstance(a, (np.ndarray, np.unsignedinteger)) for a in args)  # bits only, as cupy gets them
        kern(grid, block, tuple(dev), shared_mem=shared_mem)
        for a, d in zip(args, dev):
            if isinstance(a, np.ndarray):
                a[...] = d.get()
        if flip:
            args[1].reshape(-1)[5] ^= 1

    monkeypatch.setattr(flashsim.gpu.runtime, "require_gpu", lambda: FakeCupy)
    monkeypatch.setattr(flashsim.gpu.runtime, "load_cubin", FakeModule)
    monkeypatch.setattr(flashsim.gpu.runtime, "launch", fake_launch)
    rc, out, _ = run(capsys, "run", EXAMPLE, *ARGS, "--gpu", "--no-races", "--save-outputs", tmp_path)
    assert "GPU (stand-in): the same cubin, the same inputs" in out
    assert "in: 4096 elements bit-identical" in out
    if flip:
        assert rc == 1 and re.search(r"out: 1 of 128 elements differ; first at \[5\]: simulator \S+ \(0x[0-9a-f]{8}\), "
                                     r"GPU \S+ \(0x[0-9a-f]{8}\)", out)
        assert "found: 1 array(s) differing from the GPU" in out
    else:
        assert rc == 0 and "out: 128 elements bit-identical" in out
    assert np.array_equal(np.load(tmp_path / "gpu.npz")["in"], np.load(tmp_path / "sim.npz")["in"])


# ----------------------------------------------------------------------------------------------------
# The README's section
# ----------------------------------------------------------------------------------------------------


def _readme_section() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return text.split("## Bring your own kernel", 1)[1].split("\n## ", 1)[0]


def test_the_readme_commands_run_and_print_what_it_shows(tmp_path, monkeypatch, capsys):
    blocks = re.findall(r"```\n(.*?)```", _readme_section(), flags=re.S)
    commands = [c for c in blocks[0].replace("\\\n", " ").splitlines() if c.startswith("flashsim run")]
    assert len(commands) == 2
    monkeypatch.chdir(tmp_path)
    outputs = []
    for c in commands:
        argv = [str(EXAMPLE) if a == "tests/data/run_example.cu" else a for a in shlex.split(c)[1:]]
        rc, out, _ = run(capsys, *argv)
        assert rc == 1, out
        outputs.append(out)
    assert all((tmp_path / f).is_file() for f in ("run.html", "banks.svg", "run.json"))
    shown = [ln for ln in blocks[1].splitlines() if ln.strip()]
    got = outputs[0].splitlines()
    for ln in shown:  # each line the README shows is printed (a line cut with '...' by its start)
        assert ln in got if not ln.endswith("...") else any(g.startswith(ln[:-3]) for g in got), ln


def test_trace_at_a_source_line(tmp_path, capsys):
    from flashsim.cli import main
    from flashsim.trace.container import TraceReader

    out = tmp_path / "t.fstrace"
    base = [str(EXAMPLE), "--grid", "4", "--block", "64", "--arg", "in=f32[4,32,32]:normal",
            "--arg", "out=f32[128]:zeros", "--arg", "scale=f32:0.5"]
    assert main(["run", *base, "--trace", str(out), "--at", "run_example.cu:16", "--regs", "R0-R3",
                 "--trace-ctas", "0", "--no-races"]) == 0
    with TraceReader(out) as r:
        tags = [t for t in r.meta["tag_info"] if ":16 " in t]
        assert tags and r.meta["spec"]["ctas"] == [0]
    capsys.readouterr()
    assert main(["run", *base, "--at", "run_example.cu:16"]) == 2
    assert "needs --trace" in capsys.readouterr().err
    assert main(["run", *base, "--trace", str(out), "--at", "run_example.cu:16"]) == 2  # exists, no --force
    assert "exists" in capsys.readouterr().err


def test_a_huge_grid_is_refused_before_anything_runs_with_the_estimate(capsys):
    args = [a for a in ARGS]
    i = args.index("--grid")
    args[i + 1] = "2147483647"
    rc, out, err = run(capsys, "run", EXAMPLE, *args)
    assert rc == 2 and not out
    assert "2147483647 CTAs of 2 warps are 4,294,967,294 warps" in err and "more than --max-warps 10,000,000" in err and "pass --max-warps N" in err
