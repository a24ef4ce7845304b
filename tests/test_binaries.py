"""Loading code from every compiler: cubins of both ELF header layouts (ptxas 12.x and 13.x), a cubin short of
its trailing NUL, PTX (JIT-compiled by ptxas 13.0), fatbins and host shared libraries built by nvcc (the
nvidia-cuda-nvcc wheel's), and the refusals of binaries that hold no sm_90 code."""

from __future__ import annotations

import os
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

import flashsim.cuda as fc
from flashsim.errors import ArgumentError
from flashsim.sass import binaries
from flashsim.sass.cubin import Cubin, CubinError, elf_sm
from flashsim.sass.toolchain import CompileError, _nvidia_file, assemble_ptx, compile_cuda, compile_cuda_ptx

SRC = r'''
extern "C" __global__ void scale(float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * a + 1.0f;
}'''
SRC2 = r'''
extern "C" __global__ void addone(int* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] += 1; }'''


def _run_scale(mod) -> np.ndarray:
    x = fc.asarray(np.arange(40, dtype=np.float32))
    mod.get_function("scale")((2,), (32,), (x, np.float32(3), np.int32(40)))
    return x.get()


WANT = np.arange(40, dtype=np.float32) * np.float32(3) + np.float32(1)


# ---------------------------------------------------------------------------------------------- ELF headers
def test_both_header_layouts_give_sm_90():
    assert elf_sm(8, 0x09005A04) == 90  # ptxas 13.x (NVRTC 13.0): the SM in bits 8..15
    assert elf_sm(7, 0x005A0D5A) == 90  # ptxas 12.8 (Triton 3.6): the SM in bits 0..7, the virtual SM in 16..23
    assert elf_sm(7, 0x00500550) == 80
    with pytest.raises(CubinError, match="ABI version 6"):
        elf_sm(6, 0x5A)


def _with_header(cubin: bytes, abi: int, flags: int) -> bytes:
    b = bytearray(cubin)
    b[8] = abi
    b[48:52] = struct.pack("<I", flags)
    return bytes(b)


def test_a_cubin_of_ptxas_12_8_loads_and_runs():
    """Triton's bundled ptxas (12.8) writes the ABI-7 header: EI_OSABI 0x33, the SM in the low byte."""
    pytest.importorskip("triton")
    import flashsim.triton as ft

    ptx, _, _ = compile_cuda_ptx(SRC)
    old = assemble_ptx(ft.ptx_for_bundled_ptxas(ptx), ptxas=ft.bundled_ptxas())
    assert old[7] == 0x33 and old[8] == 7 and old[48] == 0x5A
    assert Cubin(old).sm == 90 and Cubin(old).abi_version == 7
    assert np.array_equal(_run_scale(fc.RawModule(cubin=old)), WANT)


def test_another_sm_is_refused_in_either_layout():
    cubin, _, _ = compile_cuda(SRC)
    with pytest.raises(CubinError, match="a cubin for sm_80"):
        fc.RawModule(cubin=_with_header(cubin, 7, 0x00500550))
    with pytest.raises(CubinError, match="a cubin for sm_100"):
        fc.RawModule(cubin=_with_header(cubin, 8, 0x06006402))


def test_a_cubin_short_of_its_trailing_nul_runs():
    cubin, _, _ = compile_cuda(SRC)
    assert cubin.endswith(b"\0") and binaries.elf_extent(cubin) == len(cubin)
    mod = fc.RawModule(cubin=cubin[:-1])  # the bytes cupy hands the driver
    assert "padded with 1 zero byte" in mod.loaded.note
    assert np.array_equal(_run_scale(mod), WANT)


def test_a_truncated_cubin_is_refused():
    cubin, _, _ = compile_cuda(SRC)
    with pytest.raises(CubinError, match="truncated cubin"):
        fc.RawModule(cubin=cubin[:-200])


# ---------------------------------------------------------------------------------------------- PTX
def test_ptx_is_jit_compiled_by_ptxas_13_and_runs():
    ptx, _, _ = compile_cuda_ptx(SRC)
    mod = fc.RawModule(cubin=ptx.encode())
    assert mod.loaded.source == "ptx" and "ptxas release 13.0" in mod.loaded.compiled_by
    assert np.array_equal(_run_scale(mod), WANT)


def test_a_ptx_file_loads_by_path(tmp_path):
    ptx, _, _ = compile_cuda_ptx(SRC)
    p = tmp_path / "k.ptx"
    p.write_text(ptx)
    assert np.array_equal(_run_scale(fc.RawModule(path=str(p))), WANT)


def test_ptx_for_a_newer_target_is_refused():
    ptx, _, _ = compile_cuda_ptx(SRC)
    newer = ptx.replace(".target sm_90", ".target sm_100a")
    with pytest.raises(CubinError, match="PTX for sm_100a, which an sm_90 device cannot run"):
        fc.RawModule(cubin=newer.encode())


def test_ptx_that_ptxas_rejects_names_the_error():
    with pytest.raises(CompileError, match="broken.ptx"):
        assemble_ptx(".version 9.0\n.target sm_90\n.address_size 64\n.visible .entry k() { bogus; }", name="broken.ptx")


# ---------------------------------------------------------------------------------------------- nvcc's binaries
def _nvcc() -> str:
    import shutil

    exe = _nvidia_file("bin/nvcc") or shutil.which("nvcc")
    if exe is None:
        pytest.skip("nvcc is not installed (the nvidia-cuda-nvcc wheel)")
    return str(exe)


def _build(tmp_path: Path, out: str, *args: str) -> Path:
    nvcc = _nvcc()
    (tmp_path / "a.cu").write_text(SRC)
    (tmp_path / "b.cu").write_text(SRC2)
    env = dict(os.environ, PATH=f"{Path(nvcc).parent}:{os.environ.get('PATH', '')}")
    proc = subprocess.run([nvcc, *args, "-o", str(tmp_path / out)], cwd=tmp_path, capture_output=True, text=True,
                          env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return tmp_path / out


def test_a_fatbin_with_sm_90_sass(tmp_path):
    fat = _build(tmp_path, "k.fatbin", "-fatbin", "-gencode", "arch=compute_90,code=sm_90",
                 "-gencode", "arch=compute_80,code=sm_80", "a.cu")
    mod = fc.RawModule(path=str(fat))
    assert mod.loaded.source == "fatbin" and mod.loaded.member.endswith(".sm_90.cubin")
    assert np.array_equal(_run_scale(mod), WANT)


def test_a_fatbin_with_only_ptx_is_jit_compiled(tmp_path):
    fat = _build(tmp_path, "p.fatbin", "-fatbin", "-gencode", "arch=compute_90,code=compute_90", "a.cu")
    mod = fc.RawModule(path=str(fat))
    assert mod.loaded.member.endswith(".ptx") and "13.0" in mod.loaded.compiled_by
    assert np.array_equal(_run_scale(mod), WANT)


def test_a_fatbin_for_other_gpus_only_is_refused_with_what_it_holds(tmp_path):
    fat = _build(tmp_path, "o.fatbin", "-fatbin", "-gencode", "arch=compute_80,code=sm_80", "a.cu")
    with pytest.raises(CubinError, match=r"no code an sm_90 device runs: it holds ELF for sm_80"):
        fc.RawModule(path=str(fat))


def test_a_shared_library_with_two_translation_units(tmp_path):
    so = _build(tmp_path, "libext.so", "-shared", "-Xcompiler", "-fPIC", "-cudart", "none",
                "-gencode", "arch=compute_90,code=sm_90", "-gencode", "arch=compute_90,code=compute_90", "a.cu", "b.cu")
    with pytest.raises(ArgumentError, match=r"holds 2 sm_90 cubins with kernels .*scale.*addone|addone.*scale"):
        fc.RawModule(path=str(so))
    members = binaries.contents(so)
    named = {m.name: binaries._kernel_names(m.data) for m in members if m.kind == "elf" and m.arch == 90}
    scale = next(n for n, ks in named.items() if ks == ["scale"])
    mod = fc.RawModule(path=str(so), member=scale)
    assert mod.loaded.source == "host binary"
    assert np.array_equal(_run_scale(mod), WANT)
    with pytest.raises(ArgumentError, match="member='nope'"):
        fc.RawModule(path=str(so), member="nope")


def test_a_host_library_without_device_code_is_refused(tmp_path):
    lib = tmp_path / "libplain.so"
    (tmp_path / "p.c").write_text("int f(void) { return 1; }\n")
    proc = subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib), str(tmp_path / "p.c")], capture_output=True)
    if proc.returncode:
        pytest.skip("no host C compiler")
    with pytest.raises(CubinError, match="it holds no device code"):
        fc.RawModule(path=str(lib))


def test_bytes_of_no_known_kind_are_refused():
    with pytest.raises(CubinError, match="not a CUDA binary"):
        fc.RawModule(cubin=b"hello world, not a binary at all")
