"""pytest plugin (entry point ``flashsim``): ``--gpu``, ``--update-golden``, the ``gpu`` marker, profiles.

Installed, it changes nothing for a project that does not ask for it: the entry point adds only its
namespaced flags (``--flashsim-gpu``, ``--flashsim-update-golden``, ``--flashsim-update-traces``), the
``flashsim_gpu`` marker and the ``flashsim_gpu_marker`` ini key, so another ``--gpu`` option, another
project's ``gpu`` marker and ``--strict-markers`` stay as they were. A project opts in with
``flashsim_gpu_marker = gpu`` in its pytest ini (or by loading the plugin itself: ``pytest_plugins =
["flashsim.pytest_plugin"]`` or ``-p flashsim.pytest_plugin``): then ``--gpu`` / ``--update-golden`` are the
plugin's too (unless another plugin or the project's conftest took them) and that marker is flashsim's.

Without ``--gpu``, tests marked ``flashsim_gpu`` (and, opted in, the chosen marker) are skipped with a
reason that names the flag. With it, a missing cupy or CUDA device stops the session at start with a usage
error (never a silent skip), and the report header shows the GPU and the versions that golden data records
as provenance. Under the plugin's own ``--gpu`` hypothesis' ``flashsim-gpu`` profile applies. This module
imports neither cupy nor numba (nor hypothesis) when it loads: they are imported inside the hooks that need
them.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest

from flashsim import device, testing
from flashsim.errors import ArgumentError, GpuUnavailable
from flashsim.options import GPU, RunOptions, add_options

GPU_MARKER = "gpu"
OWN_MARKER = "flashsim_gpu"
PREFIX = "flashsim-"
INI = "flashsim_gpu_marker"
HYPOTHESIS_PROFILES = ("dev", "ci", "gpu")

_RUN_OPTIONS = pytest.StashKey[RunOptions]()
_DEVICE_INFO = pytest.StashKey[dict]()
_MARKER = pytest.StashKey[str]()  # the opted-in marker ("" when not opted in)


class _State:
    explicit = False  # loaded by the project itself (conftest pytest_plugins, -p), not by the entry point
    short = False  # --gpu / --update-golden / --update-traces are this plugin's
    group = None


def _add_short(group) -> bool:
    try:
        add_options(group.addoption)
    except ValueError:  # another plugin or the project's conftest has one of them
        return False
    return True


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    group = parser.getgroup("flashsim", "flashsim: GPU differential tests")
    add_options(group.addoption, prefix=PREFIX)
    parser.addini(INI, "the marker of the tests that need flashsim's --gpu (opts the project in to --gpu and "
                       "--update-golden); empty: only flashsim_gpu and the --flashsim-* flags", default="")
    _State.group = group
    _State.explicit = pluginmanager.get_name(sys.modules[__name__]) != "flashsim"
    if _State.explicit:
        _State.short = _add_short(group)


@pytest.hookimpl(hookwrapper=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]):
    yield
    # after the project's own conftests: the short flags, for a project that opted in through its ini
    if not _State.explicit and not _State.short and early_config.getini(INI) and _State.group is not None:
        _State.short = _add_short(_State.group)


def _flag(config: pytest.Config) -> str:
    return GPU.flag() if _State.short else GPU.flag(PREFIX)


def skip_reason(config: pytest.Config) -> str:
    return f"needs a GPU: run pytest {_flag(config)}"


def _options(config: pytest.Config) -> RunOptions:
    long = RunOptions.from_getoption(config.getoption, prefix=PREFIX)
    if not _State.short:
        return long
    short = RunOptions.from_getoption(config.getoption)
    return RunOptions(**{f: getattr(long, f) or getattr(short, f) for f in long.__dataclass_fields__})


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
    marker = (config.getini(INI) or (GPU_MARKER if _State.explicit else "")).strip()
    config.stash[_MARKER] = marker
    config.addinivalue_line("markers", f"{OWN_MARKER}: runs a real CUDA kernel; only under pytest {_flag(config)}")
    if marker and marker != OWN_MARKER:
        config.addinivalue_line("markers", f"{marker}: runs a real CUDA kernel; only under pytest {_flag(config)}")
    try:
        run = _options(config)
    except ArgumentError as exc:
        msg = str(exc)
        raise pytest.UsageError(msg if _State.short else msg.replace("--", f"--{PREFIX}")) from None
    config.stash[_RUN_OPTIONS] = run
    testing.configure(gpu=run.gpu, update_golden=run.update_golden, golden_dir=None, in_pytest=True)
    if run.gpu:
        _gpu_hypothesis_profile(config)
    if run.gpu:
        try:
            config.stash[_DEVICE_INFO] = device.device_info()
        except GpuUnavailable as exc:
            raise pytest.UsageError(f"{_flag(config)} was given but no GPU can be used: {exc}") from None


def pytest_runtest_setup(item: pytest.Item) -> None:
    # stored GPU results live beside the test file (flashsim.testing), whatever the working directory
    testing.set_test_file(getattr(item, "path", None))


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
    skip = pytest.mark.skip(reason=skip_reason(config))
    marks = {OWN_MARKER, config.stash.get(_MARKER, "")} - {""}
    for item in items:
        if any(item.get_closest_marker(m) is not None for m in marks):
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
        pytest.skip(skip_reason(request.config))
    return info
