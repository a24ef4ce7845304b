"""CPU tests of gpu.runtime: every kernel builds for sm_90 with nvcc, compile errors carry the log,
sources hash with their headers, and nothing imports cupy or numba before it is needed."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from flashsim.errors import ArgumentError, FlashsimError
from flashsim.gpu import fa_kernels, probes, runtime
from flashsim.gpu.runtime import CompileError, GpuUnavailable
from flashsim.warp.fragments import fragment

REPO = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"
KERNEL_FILES = sorted(runtime.KERNELS_DIR.glob("*.cu"))

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH (CUDA toolkit)")
needs_cuobjdump = pytest.mark.skipif(
    shutil.which("cuobjdump") is None or shutil.which("nvcc") is None,
    reason="cuobjdump and nvcc are not both on PATH (CUDA toolkit)",
)


# ------------------------------------------------------------------------------ nvcc compile checks


@needs_nvcc
@pytest.mark.parametrize("path", KERNEL_FILES, ids=lambda p: p.name)
def test_every_kernel_compiles_for_sm90_with_nvcc(path):
    cubin = runtime.check_compiles_nvcc(path, arch="sm_90")
    assert cubin[:4] == b"\x7fELF"


@needs_nvcc
@pytest.mark.parametrize("kernel", ["fa2", "kernel1", "v5"])
def test_traced_builds_compile_for_sm90_with_nvcc(kernel):
    """The FA kernels with -DFS_TRACE_BUILD (gpu/kernels/trace.cuh): the traced build has the same entry
    points and the device global the host fills."""
    spec = fa_kernels.FA_KERNELS[kernel]
    cubin = runtime.check_compiles_nvcc(runtime.kernel_path(spec.source), options=fa_kernels.build_options(kernel, True))
    symbols = _kernel_symbols(cubin)
    assert "fs_trace_params" in symbols
    assert set(fa_kernels.function_names(kernel)) <= symbols
    assert "fs_trace_params" not in _kernel_symbols(runtime.check_compiles_nvcc(runtime.kernel_path(spec.source)))


def test_kernel_folder_holds_the_probes():
    names = {p.name for p in KERNEL_FILES}
    assert {"probe_mma.cu", "probe_f32.cu", "probe_cvt.cu"} <= names
    assert (runtime.KERNELS_DIR / "fragments.cuh").is_file()


def _kernel_symbols(cubin: bytes) -> set[str]:
    """Names in the cubin's string tables (an ELF file; kernel entry points are plain C names)."""
    return {m.decode() for m in re.findall(rb"[A-Za-z_][A-Za-z0-9_]{2,}", cubin)}


@needs_nvcc
@pytest.mark.parametrize(
    ("file", "kernels"),
    [
        ("probe_mma.cu", sorted(probes.MMA_KERNELS.values())),
        ("probe_f32.cu", [probes.f32_kernel_name(op) for op in probes.F32_OPS]),
        ("probe_cvt.cu", [probes.cvt_kernel_name(op) for op in probes.CVT_OPS]),
        ("fa_v5.cu", fa_kernels.function_names("v5") + fa_kernels.function_names("v6")),
        ("kernel1.cu", fa_kernels.function_names("kernel1")),
        ("fa2.cu", fa_kernels.function_names("fa2")),
    ],
)
def test_every_host_wrapper_kernel_exists_in_the_cubin(file, kernels):
    symbols = _kernel_symbols(runtime.check_compiles_nvcc(runtime.kernel_path(file)))
    missing = [k for k in kernels if k not in symbols]
    assert not missing, f"{file} lacks kernels the host wrappers use: {missing}"


@needs_nvcc
def test_broken_kernel_raises_compile_error_with_file_name_and_nvcc_log():
    path = DATA / "broken_kernel.cu"
    with pytest.raises(CompileError, match=r"broken_kernel\.cu") as info:
        runtime.check_compiles_nvcc(path)
    err = info.value
    assert isinstance(err, FlashsimError)
    assert err.filename == str(path)
    assert err.compiler == "nvcc"
    # nvcc's own diagnostic, with the line, is in both the log and the message
    assert 'identifier "flashsim_undeclared_identifier" is undefined' in err.log
    assert "broken_kernel.cu(3): error" in str(err)


def test_check_compiles_nvcc_rejects_bad_arguments(tmp_path):
    with pytest.raises(ArgumentError, match=r"path=.*no such file"):
        runtime.check_compiles_nvcc(tmp_path / "nope.cu")
    with pytest.raises(ArgumentError, match=r"arch='90'"):
        runtime.check_compiles_nvcc(DATA / "broken_kernel.cu", arch="90")
    with pytest.raises(ArgumentError, match=r"options=.*set by gpu.runtime"):
        runtime.check_compiles_nvcc(DATA / "broken_kernel.cu", options=("-arch=sm_80",))


def test_check_compiles_nvcc_without_nvcc_raises_gpu_unavailable(monkeypatch):
    monkeypatch.setenv("PATH", "")
    with pytest.raises(GpuUnavailable, match="nvcc is not on PATH"):
        runtime.check_compiles_nvcc(DATA / "broken_kernel.cu")


# The fragment index functions of fragments.cuh, run on the host (they are __host__ __device__) and
# compared with flashsim.warp.fragments, the one home of the PTX ISA's tables; h = which half of a register.
FRAGMENT_DUMP = r"""
#include <cstdio>
#include "fragments.cuh"
int main() {
    for (int lane = 0; lane < 32; ++lane) {
        for (int r = 0; r < 4; ++r) for (int h = 0; h < 2; ++h)
            std::printf("A16 %d %d %d %d %d\n", lane, r, h, frag::a_m16k16_row(lane, r), frag::a_m16k16_col(lane, r, h));
        for (int r = 0; r < 2; ++r) for (int h = 0; h < 2; ++h)
            std::printf("A8 %d %d %d %d %d\n", lane, r, h, frag::a_m16k8_row(lane, r), frag::a_m16k8_col(lane, r, h));
        for (int r = 0; r < 2; ++r) for (int h = 0; h < 2; ++h)
            std::printf("B16 %d %d %d %d %d\n", lane, r, h, frag::b_k16n8_k(lane, r, h), frag::b_k16n8_n(lane));
        for (int h = 0; h < 2; ++h)
            std::printf("B8 %d 0 %d %d %d\n", lane, h, frag::b_k8n8_k(lane, h), frag::b_k8n8_n(lane));
        for (int i = 0; i < 4; ++i)
            std::printf("CF32 %d %d 0 %d %d\n", lane, i, frag::c_f32_row(lane, i), frag::c_f32_col(lane, i));
        for (int r = 0; r < 2; ++r) for (int h = 0; h < 2; ++h)
            std::printf("CF16 %d %d %d %d %d\n", lane, r, h, frag::c_f16_row(lane, r), frag::c_f16_col(lane, r, h));
    }
}
"""

#: the dump's names -> the fragments.py table each reproduces (B's row is k, col is n)
FRAGMENTS_PY = {
    "A16": ("mma.m16n8k16", "A", "f16"), "A8": ("mma.m16n8k8", "A", "f16"),
    "B16": ("mma.m16n8k16", "B", "f16"), "B8": ("mma.m16n8k8", "B", "f16"),
    "CF32": ("mma.m16n8k16", "C", "f32"), "CF16": ("mma.m16n8k16", "C", "f16"),
}


@pytest.fixture(scope="module")
def fragment_dump(tmp_path_factory):
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH (CUDA toolkit)")
    tmp = tmp_path_factory.mktemp("frag")
    src, exe = tmp / "dump.cu", tmp / "dump"
    src.write_text(FRAGMENT_DUMP)
    subprocess.run(["nvcc", "-std=c++17", f"-I{runtime.KERNELS_DIR}", "-o", str(exe), str(src)],
                   check=True, capture_output=True, text=True)
    rows: dict[str, list[tuple[int, ...]]] = {k: [] for k in FRAGMENTS_PY}
    for line in subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.splitlines():
        name, *nums = line.split()
        rows[name].append(tuple(int(n) for n in nums))
    return rows


@pytest.mark.parametrize("name", sorted(FRAGMENTS_PY))
def test_fragments_cuh_index_functions_are_the_fragments_py_tables(fragment_dump, name):
    frag = fragment(*FRAGMENTS_PY[name])
    dumped = fragment_dump[name]
    assert len(dumped) == 32 * frag.regs * frag.elems  # every (lane, register, half) once
    for lane, reg, half, row, col in dumped:
        assert (row, col) == frag.coords(lane, reg, half), (name, lane, reg, half)


# SASS each probe kernel must contain (cuobjdump -sass of the nvcc cubin), checked where the toolkit
# ships cuobjdump. These are what ptxas of CUDA 13.0 emitted for sm_90 when the probes were written.
EXPECTED_SASS = {
    "mma_m16n8k16_f32_f16_f16_f32": "HMMA.16816.F32 ",
    "mma_m16n8k16_f32_bf16_bf16_f32": "HMMA.16816.F32.BF16 ",
    "mma_m16n8k16_f16_f16_f16_f16": "HMMA.16816.F16 ",
    "mma_m16n8k8_f32_f16_f16_f32": "HMMA.1688.F32 ",
    "mma_m16n8k8_f32_bf16_bf16_f32": "HMMA.1688.F32.BF16 ",
    "probe_ffma_rn": "FFMA ",
    "probe_ffma_rn_ftz": "FFMA.FTZ ",
    "probe_fadd_rn": "FADD ",
    "probe_fadd_rn_ftz": "FADD.FTZ ",
    "probe_fmul_rn": "FMUL ",
    "probe_fmul_rn_ftz": "FMUL.FTZ ",
    "probe_fmax": "FMNMX ",
    "probe_fmin": "FMNMX ",
    "probe_fmax_ftz": "FMNMX.FTZ ",
    "probe_fmin_ftz": "FMNMX.FTZ ",
    "probe_fmax_nan": "FMNMX.NAN ",
    "probe_fmin_nan": "FMNMX.NAN ",
    "probe_cvt_f32_f16": "HADD2.F32 ",
}


def _sass_by_function(cubin: bytes, tmp_path: Path) -> dict[str, str]:
    f = tmp_path / "k.cubin"
    f.write_bytes(cubin)
    text = subprocess.run(["cuobjdump", "-sass", str(f)], capture_output=True, text=True, check=True).stdout
    out: dict[str, str] = {}
    for chunk in re.split(r"\n\s*Function : ", text)[1:]:
        name, _, body = chunk.partition("\n")
        out[name.strip()] = body
    return out


@needs_cuobjdump
@pytest.mark.parametrize("file", ["probe_mma.cu", "probe_f32.cu", "probe_cvt.cu"])
def test_probe_kernels_compile_to_the_expected_sass(file, tmp_path):
    sass = _sass_by_function(runtime.check_compiles_nvcc(runtime.kernel_path(file)), tmp_path)
    for kernel, body in sass.items():
        if kernel in EXPECTED_SASS:
            assert EXPECTED_SASS[kernel] in body, f"{kernel}: expected {EXPECTED_SASS[kernel]!r}"
        elif kernel.startswith("probe_cvt_") and kernel != "probe_cvt_f32_bf16":
            assert re.search(r"\bF2FP?\.", body), f"{kernel}: expected an F2F or F2FP conversion"


# ------------------------------------------------------------------------------ sources and hashes


def test_kernel_source_reads_the_file_unexpanded():
    text = runtime.kernel_source("probe_mma.cu")
    assert '#include "fragments.cuh"' in text
    assert text == (runtime.KERNELS_DIR / "probe_mma.cu").read_text()


@pytest.mark.parametrize("name", ["../runtime.py", "probe_mma", "/etc/passwd", "nope.cu", 3])
def test_kernel_source_rejects_bad_names(name):
    with pytest.raises(ArgumentError, match=r"^name="):
        runtime.kernel_source(name)


def test_source_hash_covers_local_headers(tmp_path, monkeypatch):
    from flashsim.kernels import sources

    monkeypatch.setattr(sources, "KERNELS_DIR", tmp_path)
    (tmp_path / "k.cu").write_text('#include "a.cuh"\nextern "C" __global__ void k() {}\n')
    (tmp_path / "a.cuh").write_text('#pragma once\n#include "b.cuh"\n')
    (tmp_path / "b.cuh").write_text("// b v1\n")
    h1 = runtime.source_hash("k.cu")
    assert [p.name for p in runtime.local_includes(tmp_path / "k.cu")] == ["a.cuh", "b.cuh"]
    assert runtime.source_hash("k.cu") == h1  # deterministic
    (tmp_path / "b.cuh").write_text("// b v2\n")  # a header two levels down changes
    h2 = runtime.source_hash("k.cu")
    assert h2 != h1
    (tmp_path / "k.cu").write_text('#include "a.cuh"\nextern "C" __global__ void k() { }\n')
    assert runtime.source_hash("k.cu") != h2


def test_source_hash_of_the_mma_probe_includes_fragments():
    assert [p.name for p in runtime.local_includes(runtime.kernel_path("probe_mma.cu"))] == ["fragments.cuh"]
    assert re.fullmatch(r"[0-9a-f]{64}", runtime.source_hash("probe_mma.cu"))


# ------------------------------------------------------------------------------ without cupy


def _imports_after(statement: str) -> set[str]:
    code = f"import sys\n{statement}\nprint(','.join(m for m in ('cupy', 'numba') if m in sys.modules))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO, check=True)
    return {m for m in out.stdout.strip().split(",") if m}


@pytest.mark.parametrize("statement", ["import flashsim.pytest_plugin", "import flashsim.gpu.runtime", "import flashsim.gpu.probes"])
def test_import_does_not_import_cupy_or_numba(statement):
    assert _imports_after(statement) == set()


def test_without_cupy_gpu_calls_raise_gpu_unavailable(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # makes `import cupy` fail, as on a machine without it
    with pytest.raises(GpuUnavailable, match=r"cupy is not importable.*pip install"):
        runtime.device_info()
    with pytest.raises(GpuUnavailable, match="cupy"):
        runtime.load_module("probe_mma.cu")
    with pytest.raises(GpuUnavailable, match="cupy"):
        probes.run_f32("fadd_rn", np.ones(4, np.uint32), np.ones(4, np.uint32))


def test_compile_error_message_names_file_and_log():
    err = CompileError("gpu/kernels/x.cu", "x.cu(3): error: boom\n")
    assert err.filename == "gpu/kernels/x.cu" and err.log == "x.cu(3): error: boom\n"
    assert str(err) == "nvrtc failed to compile gpu/kernels/x.cu:\nx.cu(3): error: boom"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(grid=0, block=256), r"^grid=0"),
        (dict(grid=(1, 2, 3, 4), block=256), r"^grid="),
        (dict(grid=1, block=2048), r"^block=2048: at most 1024"),
        (dict(grid=1, block=(32, 0)), r"^block="),
        (dict(grid=1, block=32, shared_mem=-1), r"^shared_mem=-1"),
    ],
)
def test_launch_validates_its_arguments_before_touching_cupy(kwargs, match):
    with pytest.raises(ArgumentError, match=match):
        runtime.launch(object(), args=(), **kwargs)


def test_load_module_validates_options_and_arch_before_touching_cupy():
    with pytest.raises(ArgumentError, match=r"^options="):
        runtime.load_module("probe_mma.cu", options="-G")
    with pytest.raises(ArgumentError, match=r"^options=.*set by gpu.runtime"):
        runtime.load_module("probe_mma.cu", options=("-std=c++20",))
    with pytest.raises(ArgumentError, match=r"^arch='compute_90'"):
        runtime.load_module("probe_mma.cu", arch="compute_90")
