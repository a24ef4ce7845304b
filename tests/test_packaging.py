"""Packaging: what `pip install` puts in a user's environment.

The GPU harness lives in the repository's ``gpu/`` folder but installs as ``flashsim.gpu``; flashsim claims
no other top-level import name, and every package directory of the tree is listed in pyproject.toml (a
directory left out would be missing from a wheel while the editable install still finds it).
"""
import subprocess
import sys

import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _config():
    tomllib = pytest.importorskip("tomllib")
    with open(REPO / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["tool"]["setuptools"]


def test_every_package_directory_is_listed():
    cfg = _config()
    listed = set(cfg["packages"])
    assert cfg["package-dir"] == {"flashsim.gpu": "gpu", "flashsim.golden_data": "traces/numerics"}
    listed.discard("flashsim.golden_data")  # data only: checked in the wheel below
    on_disk = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "flashsim").rglob("__init__.py")}
    on_disk |= {"flashsim.gpu" + "".join("." + q for q in p.parent.relative_to(REPO / "gpu").parts)
                for p in (REPO / "gpu").rglob("__init__.py")}
    assert listed == on_disk
    # a directory of Python modules with no __init__.py would be a namespace package, left out of a wheel
    for d in (REPO / "flashsim").rglob("*.py"):
        assert (d.parent / "__init__.py").exists(), f"{d.parent} holds modules but no __init__.py"


def test_gpu_harness_is_flashsim_gpu():
    import flashsim.gpu.runtime as runtime
    assert Path(runtime.__file__).resolve().parent == REPO / "gpu"
    for py in list((REPO / "flashsim").rglob("*.py")) + list((REPO / "gpu").rglob("*.py")):
        for n, line in enumerate(py.read_text().splitlines(), 1):
            s = line.strip()
            assert not (s.startswith("from gpu") or s.startswith("import gpu")), f"{py}:{n}: {s}"



def test_wheel_holds_flashsim_only(tmp_path):
    """Build the wheel (no network: setuptools from this environment) and list its top-level names."""
    pytest.importorskip("setuptools")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                        "-w", str(tmp_path), str(REPO)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.fail(f"pip wheel failed:\n{r.stdout}\n{r.stderr}")
    (wheel,) = tmp_path.glob("flashsim-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert tops == {"flashsim"}
    for needed in ("flashsim/gpu/runtime.py", "flashsim/gpu/kernels/fa2.cu", "flashsim/gpu/kernels/fragments.cuh",
                   "flashsim/sass/machine.py", "flashsim/data/sass_evidence.json"):
        assert needed in names, needed
    from flashsim.golden import REPLAYERS
    for golden in REPLAYERS:  # `flashsim verify` from any directory
        assert f"flashsim/golden_data/{golden}" in names, golden
    assert not [n for n in names if n.endswith(".log")]


def test_verify_finds_its_data_from_any_directory(tmp_path, monkeypatch):
    from flashsim.golden import REPLAYERS, default_dir
    monkeypatch.chdir(tmp_path)
    d = default_dir()
    assert d.is_absolute() and all((d / n).is_file() for n in REPLAYERS)


def test_ci_installs_the_torch_extra_as_the_readme_says():
    """torch is optional ([torch]); CI installs it with the README's command, so the torch tests run there."""
    import re

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    cmd = re.search(r'`(pip install -e "\.\[torch\]")`', readme).group(1)
    assert cmd in (REPO / ".ci" / "run").read_text().splitlines()
    tomllib = pytest.importorskip("tomllib")
    with open(REPO / "pyproject.toml", "rb") as f:
        extras = tomllib.load(f)["project"]["optional-dependencies"]
    assert any(d.startswith("torch") for d in extras["torch"])
