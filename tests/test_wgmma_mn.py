"""MN-major wgmma operands (imm-trans-a / imm-trans-b 1): the H100's record (traces/wgmma/wgmma_mn.npz, made by
gpu/validate_wgmma_mn.py) against flashsim.warp.matrix_desc, and the interpreter on the recorded cubin against
the GPU's D, bit for bit."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from flashsim.errors import ArgumentError
from flashsim.gpu import validate_wgmma_mn as V
from flashsim.gpu.validate_mbarrier import build, run_probe
from flashsim.warp.matrix_desc import MatrixDescriptor, element_address, load_operand

RECORD = V.TRACE_DIR / "wgmma_mn.npz"


@pytest.fixture(scope="module")
def record():
    with np.load(RECORD) as z:
        return {k: z[k] for k in z.files}


def test_the_record_covers_every_kernel_and_swizzle(record):
    meta = json.loads((V.TRACE_DIR / "wgmma_mn.json").read_text())
    assert meta["device"]["name"].startswith("NVIDIA H100") and meta["mismatches"] == 0
    assert meta["repeats_disagreeing"] == 0 and meta["shared_bases"] == [1024]
    assert meta["cases"] == 144 and meta["elements"] == 196608
    for kernel, _, _ in V.KERNELS:
        assert set(meta["kernels"][kernel]["swizzles"]) == {"none", "32B", "64B", "128B"}, kernel
    assert hashlib.sha256(record["cubin"].tobytes()).hexdigest() == meta["cubin_sha256"]


def test_the_h100_read_every_element_where_the_model_says(record):
    """196,608 addresses of MN-major elements the H100 read, under random descriptors (every swizzle; leading and
    stride byte offsets anywhere, self-overlapping layouts included), against element_address(major="MN")."""
    cases = V.plan(int(record["seed"]), int(record["cases"]))
    assert np.array_equal(record["descriptors"], np.array([c.descriptors() for c in cases], np.uint64))
    n = 0
    for kernel, _, _ in V.KERNELS:
        got = record[f"maps/{kernel}"]
        mine = [c for c in cases if c.kernel == kernel]
        for c, g in zip(mine, got):
            assert np.array_equal(g, V.model_addresses(c.probed, c.rows)), (kernel, hex(c.probed.encode()))
            n += g.size
    assert n == 196608
    # the K-major reading of the same descriptors differs: the record does tell the two apart
    c = next(c for c in cases if c.trans == "b" and c.probed.swizzle == "128B")
    mn, k = np.meshgrid(np.arange(c.rows), np.arange(16), indexing="ij")
    assert not np.array_equal(V.model_addresses(c.probed, c.rows), element_address(c.probed, mn, 2 * k))


def test_the_interpreter_gives_the_gpus_d_on_the_recorded_cubin(record):
    """Every case and pass of the record in the interpreter (HGMMA .tnspA / .tnspB), D's sha256 equal to the
    H100's."""
    b = build(V.PROBE_FILE, cubin=record["cubin"].tobytes())
    cases = V.plan(int(record["seed"]), int(record["cases"]))
    sha = record["d_sha"]
    for kernel, (i, p), run in V.probe_runs(b, cases):
        d, info = run_probe(run, "interp")
        assert int(info[0]) == 1024
        assert hashlib.sha256(d.tobytes()).digest() == sha[i, p].tobytes(), (kernel, i, p)


def test_mn_major_layouts_by_hand():
    # no swizzle: core matrix (8 M/N elements x 8 K rows) at start + (mn // 8) * SBO + (k // 8) * LBO
    d = MatrixDescriptor(0x400, 0x100, 0x80)
    assert element_address(d, 0, 0, major="MN") == 0x400
    assert element_address(d, 7, 1, major="MN") == 0x400 + 14 + 1
    assert element_address(d, 8, 0, major="MN") == 0x480
    assert element_address(d, 0, 2 * 9, major="MN") == 0x400 + 0x100 + 16
    # 128B swizzle: 64 elements of M/N per 128-byte row, K rows 128 bytes apart, the 8-row atoms of K at SBO,
    # the next 64 of M/N at LBO; then the address swizzle
    d = MatrixDescriptor(0x800, 0x2000, 0x400, "128B")
    assert element_address(d, 64, 0, major="MN") == 0x800 + 0x2000
    assert element_address(d, 0, 2 * 8, major="MN") == 0x800 + 0x400
    assert element_address(d, 0, 2 * 1, major="MN") == 0x800 + 128 + 16  # row 1 of the atom: chunk 0 ^ 1
    with pytest.raises(ArgumentError, match="major"):
        element_address(d, 0, 0, major="T")
    with pytest.raises(ArgumentError, match="2-byte elements"):
        load_operand(np.zeros(1 << 16, np.uint8), d, 64, 1, major="MN")


@pytest.mark.gpu
def test_fresh_descriptors_on_the_gpu(tmp_path):
    """A fresh seed's random MN-major descriptors on the GPU: every address the model's, every repeat agreeing."""
    rep = V.validate(tmp_path, cases=8, seed=7, record=False, dry_run=False, log=lambda *a: None)
    assert rep["mismatches"] == 0 and rep["repeats_disagreeing"] == 0 and rep["elements"] == 8 * 8192, rep["first"]


@pytest.mark.parametrize("argv, says", [(["--cases", "0"], "--cases=0: expected at least 1 case per kernel"),
                                        (["--record", "--dry-run"], "--record with --dry-run")])
def test_the_cli_names_bad_arguments(argv, says, capsys):
    with pytest.raises(SystemExit) as exc:
        V.main(["--out", "unused", *argv])
    assert exc.value.code == 2 and says in capsys.readouterr().err
