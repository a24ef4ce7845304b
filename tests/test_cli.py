"""The command line: `flashsim info` lists every modelled instruction with its verification status."""

import subprocess
import sys

from flashsim.cli import main
from flashsim.validation import modelled, records, status_table


def _numeric_rows(out: str) -> str:
    from tests.test_cli_help import table_rows

    block = out.split("Numeric instructions", 1)[1].split("SASS interpreter", 1)[0]
    return "\n".join(table_rows(block.split("\n", 1)[1]))


def test_info_lists_every_modelled_instruction(capsys):
    assert main(["info"]) == 0
    out = _numeric_rows(capsys.readouterr().out)
    for m in modelled():
        assert m.ptx in out
    assert "sm_80" in out and "NOT VERIFIED" in out


def test_every_sm90_instruction_has_a_clean_hardware_record():
    rows = [r for r in status_table() if r[1] == "sm_90"]
    unverified = [r for r in rows if not r[3].startswith("bit-exact")]
    assert not unverified, unverified
    for r in records():
        assert r["mismatches"] == 0 and r["cases"] > 0 and r["gpu"]


def test_console_script_runs():
    out = subprocess.run([sys.executable, "-m", "flashsim", "info", "--arch", "sm_80"],
                         capture_output=True, text=True, check=True).stdout
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in _numeric_rows(out)
    assert "sm_90" not in out.split("\n", 3)[3]


def test_verify_reports_a_missing_folder(tmp_path, capsys):
    assert main(["verify", "--golden", str(tmp_path / "nope")]) == 2
    assert "no golden numerics files" in capsys.readouterr().err


def test_check_runs_every_kernel_and_reports_rule_and_banks(capsys):
    from flashsim.cli import main

    rc = main(["check", "--seqlen", "64", "--headdim", "128", "--heads", "1"])
    out = capsys.readouterr().out
    assert rc == 0, out
    for kernel in ("fa2", "kernel1", "v5", "v6", "fa4h"):
        assert f"== {kernel}" in out
    assert out.count("vs float64: passes") == 5
    assert out.count("executed in the SASS interpreter") == 5 and "kernel1.cu:" in out and "fa4h.cu:" in out
    assert "5 of 5 kernels passed" in out


def test_check_skips_kernels_outside_their_domain(capsys):
    from flashsim.cli import main

    rc = main(["check", "--seqlen", "40", "--headdim", "64", "--causal", "--dtype", "bfloat16"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "2 of 2 kernels passed" in out and "skipped (outside their domain): ['kernel1', 'v5', 'v6']" in out


def test_check_names_a_bad_kernel(capsys):
    from flashsim.cli import main

    assert main(["check", "--kernel", "fa3"]) == 2
    assert "--kernel='fa3'" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------------
# flashsim check: labelled output, JIT warm-up apart, progress, estimates and refusals
# ----------------------------------------------------------------------------------------------------


def test_check_labels_every_number_and_times_the_warm_up_apart(capsys):
    from flashsim.cli import main

    rc = main(["check", "--kernel", "fa2,v5", "--seqlen", "64", "--seqlen-k", "48", "--headdim", "32", "--heads", "2",
               "--heads-k", "1", "--bank-lines", "2"])
    out = capsys.readouterr().out
    assert rc == 0, out
    head = out.split("\n== ", 1)[0]
    # the problem: q and kv heads and seqlens named, the softmax scale and where it came from
    assert "heads 2 query, 1 key/value" in head and "seqlen 64 query (seqlen_q), 48 key/value (seqlen_k)" in head
    assert "softmax scale 0.176777 (headdim^-0.5)" in head
    assert "tile-steps (CTAs x KV blocks" in head and "of arrays" in head
    # how to read the results: the rule's terms, which kernels have LSE, what the bank counts count
    for words in ("out_lowp the same attention computed plainly at the kernel's precisions", "atol 1e-05",
                  "only the\n      kernels that write it", "executions = shared-memory warp instructions",
                  "wavefronts = passes through the 32 banks", "ideal = the fewest passes",
                  "conflicts = wavefronts - ideal"):
        assert words in head, words
    # the one-off compilation on its own line, before any kernel
    assert sum(1 for ln in head.splitlines() if ln.strip().startswith("JIT warm-up (numba and NVRTC")) == 1
    fa2, v5 = out.split("\n== fa2\n", 1)[1].split("\n== v5\n")
    assert "simulator: " in fa2 and "(the twin, after the warm-up)" in fa2
    assert "out vs float64: passes: max|out - ref| = " in fa2 and "2 * max|out_lowp - ref| (" in fa2
    assert "+ atol (1e-05)" in fa2 and "LSE vs float64" in fa2 and "LSE" not in v5.split("2 of 2")[0]
    assert "executions (warp instructions)" in fa2 and "wavefronts" in fa2 and "conflicts" in fa2


def test_check_warm_up_takes_the_jit_out_of_the_first_kernel(monkeypatch, capsys):
    """The twins' first calls compile (numba); after the warm-up the first kernel's time is its own."""
    import flashsim.check as check
    from flashsim.cli import main

    seen = []
    real = check.warm_up

    def spy(kernels, q, k, v, kw, *, banks, gpu=False, progress=None):
        seen.append((tuple(kernels), q.shape, banks, gpu))
        assert progress is not None  # the warm-up shows how far it is
        return real(kernels, q, k, v, kw, banks=banks, gpu=gpu, progress=progress)

    monkeypatch.setattr(check, "warm_up", spy)
    assert main(["check", "--kernel", "fa2,kernel1", "--seqlen", "64", "--no-banks"]) == 0
    assert seen == [(("fa2", "kernel1"), (1, 64, 2, 128), False, False)]
    out = capsys.readouterr().out
    assert out.index("JIT warm-up") < out.index("== fa2")


def _tty():
    import io

    class Tty(io.StringIO):
        def isatty(self):
            return True
    return Tty()


def test_check_progress_is_plain_lines_off_a_terminal(monkeypatch, capsys):
    import flashsim.cli.check as check
    from flashsim.cli import main

    monkeypatch.setattr(check, "PROGRESS_DELAY", 0.0)
    monkeypatch.setenv("FLASHSIM_THREADS", "2")
    assert main(["check", "--kernel", "fa2,v5", "--seqlen", "512", "--seqlen-k", "64", "--headdim", "32",
                 "--heads", "1"]) == 0
    err = capsys.readouterr().err
    assert "\r" not in err
    lines = err.splitlines()
    fa2 = [ln for ln in lines if ln.startswith("fa2 twin: ")]
    assert fa2 and fa2[-1].startswith("fa2 twin: 4/4 CTAs (100%)") and "ETA" in fa2[-1]
    v5 = [ln for ln in lines if ln.startswith("v5 twin: ")]
    assert v5 and v5[-1].startswith("v5 twin: 4/4 KV tiles (100%)")
    banks = [ln for ln in lines if ln.startswith("v5 cubin in the SASS interpreter: ")]
    assert banks and banks[-1].startswith("v5 cubin in the SASS interpreter: 8/8 CTAs (100%)")


def test_check_progress_is_a_bar_on_a_terminal(monkeypatch, capsys):
    import sys

    import flashsim.cli.check as check
    from flashsim.cli import main

    monkeypatch.setattr(check, "PROGRESS_DELAY", 0.0)
    tty = _tty()
    monkeypatch.setattr(sys, "stderr", tty)
    assert main(["check", "--kernel", "fa2", "--seqlen", "512", "--headdim", "64", "--heads", "1", "--no-banks"]) == 0
    text = tty.getvalue()
    assert "fa2 twin:" in text and "CTAs [" in text and "%|" in text


def test_progress_moves_within_a_batch_of_long_ctas():
    """A hook at every KV step reports the finished part of the batches in flight, not only whole batches."""
    import numpy as np

    from flashsim.kernels.common import StepHook, run_batches

    hook, seen = StepHook(), []

    def fn(idx):
        for step in range(4):
            hook(idx, step, 4)

    run_batches(fn, np.arange(8), 8, threads=1, progress=lambda d, t: seen.append((d, t)), hook=hook)
    assert seen[:4] == [(0.0, 8), (2.0, 8), (4.0, 8), (6.0, 8)] and seen[-1] == (8, 8)


def test_progress_helper_prints_every_ten_percent_with_an_eta():
    import io

    from flashsim.progress import Progress

    f = io.StringIO()
    p = Progress("job", 20, unit="thing", file=f)
    for i in range(1, 21):
        p(i, 20)
    lines = f.getvalue().splitlines()
    assert len(lines) == 10 and lines[0].startswith("job: 2/20 things (10%)") and "ETA" in lines[0]
    f = io.StringIO()
    p = Progress("quiet", 5, file=f, delay=60)
    for i in range(1, 6):
        p(i, 5)
    assert f.getvalue() == ""  # finished before the delay: nothing shown


def test_estimates_count_ctas_times_kv_blocks():
    from flashsim.attention import check_args
    from flashsim.check import estimate, fake_inputs, tile_steps

    q, k, v = fake_inputs(2, 4, 2, 1000, 3000, 128, "float16")
    a = check_args(q, k, v)
    assert tile_steps("fa2", a) == 8 * 4 * 2 * (3000 // 32 + 1)       # 8 m_blocks x heads x batch, 94 KV blocks
    c = check_args(q, k, v, causal=True)
    assert tile_steps("fa2", c) < tile_steps("fa2", a)
    q, k, v = fake_inputs(1, 2, 2, 256, 256, 128, "float16")
    a = check_args(q, k, v)
    assert (tile_steps("kernel1", a), tile_steps("v5", a)) == (4 * 2 * 4, 4 * 2 * 16)
    est = estimate(["fa2", "kernel1", "v5", "v6"], q, k, v, {}, banks=True)
    assert est.work == {"fa2 twin": 32, "fa2 cubin": 32, "kernel1 twin": 32, "kernel1 cubin": 32, "v5 twin": 128,
                        "v5 cubin": 128, "v6 twin": 128, "v6 cubin": 128}
    assert 1 << 20 < est.nbytes < 1 << 30
    # outside a kernel's domain: no work counted for it (it is skipped)
    q, k, v = fake_inputs(1, 2, 2, 40, 40, 64, "bfloat16")
    assert list(estimate(["fa2", "kernel1", "v5"], q, k, v, {}, banks=False).work) == ["fa2 twin"]


def test_physical_memory_is_known_here():
    from flashsim.progress import physical_memory

    assert physical_memory() > 1 << 28
