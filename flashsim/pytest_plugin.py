"""pytest plugin (entry point ``flashsim``): the ``gpu`` marker, ``--gpu``, ``--update-golden``, profiles.

Without ``--gpu``, tests marked ``gpu`` are skipped with a reason that names ``--gpu``. With ``--gpu``,
a missing cupy or CUDA device stops the session at start with a usage error (never a silent skip), and
the report header shows the GPU and the versions that golden data records as provenance.
Hypothesis profiles ``dev`` (default), ``ci`` (env CI set) and ``gpu`` (under ``--gpu``) are registered
here. This module imports neither cupy nor numba (nor hypothesis) when it loads: they are imported
inside the hooks that need them.
"""

from __future__ import annotations

from typing import Any

import pytest

from flashsim import device, testing
from flashsim.errors import ArgumentError, GpuUnavailable
from flashsim.options import GPU, RunOptions, add_options

GPU_MARKER = "gpu"
SKIP_REASON = f"needs a GPU: run pytest {GPU.flag()}"
HYPOTHESIS_PROFILES = ("dev", "ci", "gpu")

_RUN_OPTIONS = pytest.StashKey[RunOptions]()
_DEVICE_INFO = pytest.StashKey[dict]()


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser.getgroup("flashsim", "flashsim: GPU differential tests").addoption)


def _gpu_hypothesis_profile(config: pytest.Config) -> None:
    """Under --gpu only (the plugin's own option): hypothesis' flashsim-gpu profile, more examples and no
    deadline (a GPU launch is slow to start), unless --hypothesis-profile chose another. Without --gpu the
    plugin leaves hypothesis alone, so other projects' profiles stay theirs."""
    try:
        from hypothesis import settings
    except ImportError:
        return
    try:
        chosen = config.getoption("hypothesis_profile")  # hypothesis' own flag wins when given
    except ValueError:  # hypothesis' pytest plugin not loaded
        chosen = None
    if chosen:
        return
    settings.register_profile("flashsim-gpu", parent=settings.get_profile("default"), max_examples=1000, deadline=None)
    settings.load_profile("flashsim-gpu")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{GPU_MARKER}: runs a real CUDA kernel; only under pytest {GPU.flag()}")
    try:
        run = RunOptions.from_getoption(config.getoption)
    except ArgumentError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[_RUN_OPTIONS] = run
    testing.configure(gpu=run.gpu, update_golden=run.update_golden,
                      golden_dir=config.rootpath / "traces" / "golden")
    if run.gpu:
        _gpu_hypothesis_profile(config)
    if run.gpu:
        try:
            config.stash[_DEVICE_INFO] = device.device_info()
        except GpuUnavailable as exc:
            raise pytest.UsageError(f"{GPU.flag()} was given but no GPU can be used: {exc}") from None


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    info = config.stash.get(_DEVICE_INFO, None)
    if info is None:
        return None
    return [
        f"flashsim gpu: {info['name']} (compute capability {info['compute_capability']}, {info['arch']})",
        f"flashsim gpu: driver {info['driver_release']} (CUDA {info['driver_version']}), "
        f"CUDA runtime {info['cuda_runtime_version']}, NVRTC {info['nvrtc_version']}, cupy {info['cupy_version']}",
    ]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    run = config.stash.get(_RUN_OPTIONS, None)
    if run is not None and run.gpu:
        return
    skip = pytest.mark.skip(reason=SKIP_REASON)
    for item in items:
        if item.get_closest_marker(GPU_MARKER) is not None:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def run_options(request: pytest.FixtureRequest) -> RunOptions:
    """The session's RunOptions (``--gpu``, ``--update-golden``)."""
    return request.config.stash[_RUN_OPTIONS]


@pytest.fixture(scope="session")
def gpu_device_info(request: pytest.FixtureRequest) -> dict[str, Any]:
    """device_info() of the GPU under ``--gpu`` (for provenance of golden data); skips otherwise."""
    info = request.config.stash.get(_DEVICE_INFO, None)
    if info is None:
        pytest.skip(SKIP_REASON)
    return info
