"""The example scripts the README points to run as written and print what they promise."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "docs" / "examples"


def _run(name: str) -> str:
    proc = subprocess.run([sys.executable, str(EXAMPLES / name)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_triton_example():
    pytest.importorskip("triton")
    out = _run("triton_softmax.py")
    assert "4 warps;" in out and "row sums:" in out and "LaunchRecord(kernel='softmax'" in out


def test_numba_example():
    pytest.importorskip("numba.cuda")
    import flashsim.numba as fnb
    from flashsim.gpu import numba_kernels as K
    from flashsim.gpu import numba_suite as N

    try:
        fnb.compile_kernel(K.axpy, N._types(N.case("axpy"), N.inputs(N.case("axpy"), 0)))
    except fnb.NumbaUnavailable as exc:
        pytest.skip(str(exc))
    assert _run("numba_axpy.py").strip().endswith("True")
