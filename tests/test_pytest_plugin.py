"""The flashsim pytest plugin, run in child pytest processes (pytester): gpu marker, --gpu, profiles."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

GPU_TEST = """
import pytest

@pytest.mark.gpu
def test_on_gpu():
    pass

def test_on_cpu():
    pass
"""

# A conftest that replaces device_info with a fake GPU, so --gpu can be exercised without one.
FAKE_GPU_CONFTEST = """
import flashsim.gpu.runtime

def fake_device_info(device=None):
    return {
        "device": "0", "name": "Fake GPU 80GB", "compute_capability": "9.0", "arch": "sm_90",
        "driver_version": "13.0", "driver_release": "580.00.01", "cuda_runtime_version": "13.0",
        "nvrtc_version": "13.0", "cupy_version": "14.2.0",
    }

flashsim.gpu.runtime.device_info = fake_device_info
"""


@pytest.fixture
def run(pytester, monkeypatch):
    """Run pytest in a child process with exactly the flashsim plugin (no auto-loaded plugins)."""
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.delenv("CI", raising=False)

    def _run(*args: str):
        return pytester.runpytest_subprocess("-p", "flashsim.pytest_plugin", "-p", "no:cacheprovider", *args)

    return _run


def test_gpu_tests_are_skipped_without_gpu_flag_with_a_reason_naming_it(pytester, run):
    pytester.makepyfile(test_x=GPU_TEST)
    result = run("-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED *test_x.py*needs a GPU: run pytest --gpu"])


def test_gpu_flag_without_cupy_fails_the_session_loudly(pytester, run):
    pytester.makeconftest("import sys\nsys.modules['cupy'] = None  # `import cupy` now fails\n")
    pytester.makepyfile(test_x=GPU_TEST)
    result = run("--gpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--gpu was given but no GPU can be used: cupy is not importable*"])
    result.stdout.no_fnmatch_line("*skipped*")
    result.stdout.no_fnmatch_line("*passed*")


def test_gpu_flag_without_a_device_fails_the_session_loudly(pytester, run):
    pytester.makeconftest(
        "import flashsim.gpu.runtime\n"
        "def no_device(device=None):\n"
        "    raise flashsim.gpu.runtime.GpuUnavailable('no usable CUDA device (CUDARuntimeError: cudaErrorNoDevice)')\n"
        "flashsim.gpu.runtime.device_info = no_device\n"
    )
    pytester.makepyfile(test_x=GPU_TEST)
    result = run("--gpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--gpu was given but no GPU can be used: no usable CUDA device*"])


def test_gpu_flag_runs_gpu_tests_and_reports_the_device_in_the_header(pytester, run):
    pytester.makeconftest(FAKE_GPU_CONFTEST)
    pytester.makepyfile(test_x=GPU_TEST)
    result = run("--gpu")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "flashsim gpu: Fake GPU 80GB (compute capability 9.0, sm_90)",
            "flashsim gpu: driver 580.00.01 (CUDA 13.0), CUDA runtime 13.0, NVRTC 13.0, cupy 14.2.0",
        ]
    )


def test_no_gpu_header_without_gpu_flag(pytester, run):
    pytester.makepyfile(test_x=GPU_TEST)
    run().stdout.no_fnmatch_line("flashsim gpu:*")


def test_update_golden_needs_gpu(pytester, run):
    pytester.makepyfile(test_x=GPU_TEST)
    result = run("--update-golden")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--update-golden needs --gpu*"])


def test_update_traces_needs_gpu(pytester, run):
    pytester.makepyfile(test_x=GPU_TEST)
    result = run("--update-traces")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--update-traces needs --gpu*"])


def test_run_options_fixture(pytester, run):
    pytester.makeconftest(FAKE_GPU_CONFTEST)
    pytester.makepyfile(
        test_x="""
        from flashsim.options import RunOptions

        def test_opts(run_options, gpu_device_info):
            assert run_options == RunOptions(gpu=True, update_golden=True, update_traces=False)
            assert gpu_device_info["arch"] == "sm_90"
        """
    )
    run("--gpu", "--update-golden").assert_outcomes(passed=1)


def test_gpu_marker_is_registered(pytester, run):
    pytester.makepyfile(test_x=GPU_TEST)
    run("--strict-markers").assert_outcomes(passed=1, skipped=1)
    run("--markers").stdout.fnmatch_lines(["@pytest.mark.gpu: *--gpu*"])


PROFILE_TEST = """
from hypothesis import settings

def test_profile():
    s = settings.default
    print("PROFILE", s.max_examples, s.derandomize, s.deadline)
"""


@pytest.mark.parametrize(
    ("env_ci", "args", "expected"),
    [
        (None, (), "PROFILE 100 False 0:00:00.200000"),  # hypothesis' defaults: the plugin changes nothing
        ("true", (), "PROFILE 100 True None"),  # hypothesis' own ci profile, not the plugin's doing
        ("1", ("--gpu",), "PROFILE 1000 False None"),  # under its own option the plugin loads flashsim-gpu
    ],
)
def test_hypothesis_profile_selection(pytester, run, monkeypatch, env_ci, args, expected):
    pytest.importorskip("hypothesis")
    if env_ci is not None:
        monkeypatch.setenv("CI", env_ci)
    pytester.makeconftest(FAKE_GPU_CONFTEST)
    pytester.makepyfile(test_p=PROFILE_TEST)
    result = run("-s", *args)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"*{expected}"])


OWN_PROFILE_CONFTEST = FAKE_GPU_CONFTEST + """
from hypothesis import settings
settings.register_profile("mine", max_examples=7)
settings.load_profile("mine")
"""


def test_another_projects_hypothesis_profile_is_left_alone(pytester, run):
    pytest.importorskip("hypothesis")
    pytester.makeconftest(OWN_PROFILE_CONFTEST)
    pytester.makepyfile(test_p=PROFILE_TEST)
    result = run("-s")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*PROFILE 7 *"])


# ------------------------------------------------------------------ installed, in projects that never use it
@pytest.fixture
def auto(pytester, monkeypatch):
    """Run pytest in a child process as a project that does not use flashsim sees it: every installed plugin
    auto-loaded, flashsim's entry point among them (skipped where the package is not installed)."""
    from importlib.metadata import entry_points

    if not any(ep.value == "flashsim.pytest_plugin" for ep in entry_points(group="pytest11")):
        pytest.skip("flashsim is not installed (its pytest11 entry point is what these tests are about)")
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    monkeypatch.delenv("CI", raising=False)

    def _run(*args: str):
        return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)

    return _run


def test_a_project_with_its_own_gpu_option_and_marker_is_left_alone(pytester, auto):
    pytester.makeconftest(
        "def pytest_addoption(parser):\n"
        "    parser.addoption('--gpu', action='store_true', help='this project\\'s own')\n"
        "def pytest_configure(config):\n"
        "    config.addinivalue_line('markers', 'gpu: this project\\'s own')\n")
    pytester.makepyfile(test_x=GPU_TEST)
    result = auto("--strict-markers")
    result.assert_outcomes(passed=2)  # its gpu test is not skipped
    auto("--gpu").assert_outcomes(passed=2)  # and its --gpu is its own


def test_strict_markers_still_catches_an_unregistered_gpu_marker(pytester, auto):
    pytester.makepyfile(test_x=GPU_TEST)
    result = auto("--strict-markers")
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*'gpu' not found in `markers` configuration option*"])


def test_a_project_with_a_registered_gpu_marker_runs_its_gpu_tests(pytester, auto):
    pytester.makeini("[pytest]\nmarkers =\n    gpu: needs a GPU (this project runs them everywhere)\n")
    pytester.makepyfile(test_x=GPU_TEST)
    auto("--strict-markers").assert_outcomes(passed=2)
    result = auto("--gpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR  # flashsim adds no --gpu it did not ask for
    result.stderr.fnmatch_lines(["*unrecognized arguments: --gpu*"])


def test_a_project_opts_in_through_its_ini(pytester, auto):
    pytester.makeini("[pytest]\nflashsim_gpu_marker = gpu\n")
    pytester.makepyfile(test_x=GPU_TEST)
    result = auto("--strict-markers", "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED *test_x.py*needs a GPU: run pytest --gpu"])


def test_the_namespaced_marker_and_flag_work_without_opting_in(pytester, auto):
    pytester.makepyfile(test_x="import pytest\n\n@pytest.mark.flashsim_gpu\ndef test_on_gpu():\n    pass\n")
    result = auto("--strict-markers", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED *needs a GPU: run pytest --flashsim-gpu"])


AXPB_TEST = '''
import numpy as np
import flashsim.cuda as fc
from flashsim.testing import assert_matches_gpu

def test_axpb():
    mod = fc.RawModule(code='extern "C" __global__ void axpb(float* y) { y[threadIdx.x] = 2.f * y[threadIdx.x]; }')
    assert_matches_gpu(mod, "axpb", (1,), (32,), (np.arange(32, dtype=np.float32),))
'''


def test_a_missing_stored_result_skips_with_the_command_and_results_are_found_beside_the_test(pytester, auto):
    pytester.makeini("[pytest]\nflashsim_gpu_marker = gpu\n")
    sub = pytester.mkpydir("deep")
    (sub / "test_k.py").write_text(AXPB_TEST)
    result = auto("-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED *no stored GPU result*deep*traces*golden*pytest --gpu --update-golden*"])
    # a result stored beside the test is found from any working directory
    import numpy as np

    import flashsim.cuda as fc
    from flashsim import testing

    mod = fc.RawModule(code='extern "C" __global__ void axpb(float* y) { y[threadIdx.x] = 2.f * y[threadIdx.x]; }')
    x = np.arange(32, dtype=np.float32)
    key = testing.launch_key(testing.code_digest(mod, "axpb"), "axpb", (1, 1, 1), (32, 1, 1), 0, [x])
    gold = sub / "traces" / "golden"
    gold.mkdir(parents=True)
    np.savez(gold / f"axpb-{key[:16]}.npz", provenance=np.array('{"kernel": "axpb"}'), out0=2 * x)
    auto(str(sub)).assert_outcomes(passed=1)
    other = pytester.mkdir("elsewhere")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(other)
        auto(str(sub / "test_k.py"), "--rootdir", str(other)).assert_outcomes(passed=1)
