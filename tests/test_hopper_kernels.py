"""CPU tests of the warp-specialised Hopper kernels (gpu/kernels/tma_pipeline.cu, wgmma_gemm.cu), their
planted-bug copies and the GPU script that records them (gpu/validate_hopper_kernels.py): every build compiles
for sm_90a with flashsim's NVRTC, every ``// MUTANT n`` marker is where the catalogue (gpu/hopper_mutants.py)
says, each mutant's SASS differs from its correct build, the references and the GEMM's shared-memory data path
hold on the CPU, and the dry run works. The GPU runs themselves are ``python -m
flashsim.gpu.validate_hopper_kernels --out DIR``."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest

from flashsim.errors import ArgumentError
from flashsim.gpu import hopper_mutants as HM
from flashsim.gpu import validate_hopper_kernels as V
from flashsim.sass.cubin import Cubin
from flashsim.sass.toolchain import compile_cuda, disassemble


def _sass(cubin: bytes) -> list[str]:
    return [f"{r.get('predicate', '') or ''} {r['opcode']} {r.get('operands', '')}".strip()
            for fn in disassemble(cubin)[1] for r in fn["sass-instructions"]]


def _opcodes(cubin: bytes) -> set[str]:
    return {r["opcode"] for fn in disassemble(cubin)[1] for r in fn["sass-instructions"]}


@pytest.fixture(scope="module")
def builds():
    return V.all_builds()


# ---------------------------------------------------------------------------------------------- builds
def test_every_kernel_and_mutant_compiles_for_sm90a(builds):
    want = {V.build_key(k, 0, **dict(c)) for k, c, _ in V.CORRECT_RUNS}
    want |= {V.build_key(m.kernel, m.value, **m.build_config) for m in HM.MUTANTS}
    assert want <= set(builds)
    for key, b in builds.items():
        assert b.cubin[:4] == b"\x7fELF", key
        info = Cubin(b.cubin).kernels[HM.kernel_of(b.kernel).function]
        assert [p.size for p in info.params[:2]] == [128, 128], key  # the two CUtensorMap parameters, by value


@pytest.mark.parametrize("kernel", sorted(HM.KERNELS))
def test_kernels_compile_for_plain_sm90_too(kernel):
    """The compile check of every .cu builds for sm_90: the sm_90a-only instructions are guarded."""
    k = HM.kernel_of(kernel)
    from flashsim.kernels.sources import BASE_OPTIONS, KERNELS_DIR

    cubin, _, _ = compile_cuda(k.text(), name=k.source, options=(*BASE_OPTIONS, f"--include-path={KERNELS_DIR}"),
                               arch="sm_90")
    ops = _opcodes(cubin)
    assert "HGMMA.64x128x16.F32.BF16" not in ops and "USETMAXREG.DEALLOC.CTAPOOL" not in ops
    if kernel == "wgmma_gemm":
        assert "BPT.TRAP" in ops or any(o.startswith("BPT") for o in ops), sorted(ops)


def test_the_kernels_compile_to_the_hopper_instructions_they_are_for(builds):
    tp = _opcodes(builds[V.build_key("tma_pipeline", 0, TP_STAGES=3)].cubin)
    assert {"UTMALDG.2D", "UTMASTG.2D", "UBLKCP.S.G", "UTMACMDFLUSH", "DEPBAR.LE", "FENCE.VIEW.ASYNC.S",
            "SYNCS.ARRIVE.TRANS64", "SYNCS.ARRIVE.TRANS64.A1T0", "SYNCS.PHASECHK.TRANS64.TRYWAIT", "ELECT",
            "SYNCS.EXCH.64", "BAR.SYNC.DEFER_BLOCKING"} <= tp, sorted(tp)
    for c in (1, 2):
        gg = _opcodes(builds[V.build_key("wgmma_gemm", 0, GG_CONSUMERS=c, GG_STAGES=4)].cubin)
        assert {"UTMALDG.2D", "HGMMA.64x128x16.F32.BF16", "WARPGROUP.ARRIVE", "WARPGROUP.DEPBAR.LE",
                "SYNCS.ARRIVE.TRANS64", "SYNCS.PHASECHK.TRANS64.TRYWAIT"} <= gg, sorted(gg)
        assert ({"USETMAXREG.DEALLOC.CTAPOOL", "USETMAXREG.TRY_ALLOC.CTAPOOL"} <= gg) == (c == 2)


def test_setmaxnreg_arithmetic_holds_for_the_registers_ptxas_allocates(builds):
    # 384 threads at 168 registers: dec to 40 frees 128 x 128, two inc to 232 take 2 x 128 x 64 (mutant 7: 72)
    b = builds[V.build_key("wgmma_gemm", 0, GG_CONSUMERS=2, GG_STAGES=4)]
    info = Cubin(b.cubin).kernels["wgmma_gemm"]
    assert info.regcount == 168
    assert 40 + 2 * 232 == 3 * info.regcount
    assert 2 * (240 - info.regcount) > info.regcount - 40


def test_the_main_loop_is_pipelined_not_serialised(builds):
    """ptxas keeps the one-tile lag: waits only at wgmma.wait_group (DEPBAR.LE gsb0, 0x1 in the loop, 0x0
    after it), never one after every HGMMA (its "wgmma serialized" fallback)."""
    s = _sass(builds[V.build_key("wgmma_gemm", 0, GG_CONSUMERS=2, GG_STAGES=4)].cubin)
    n_mma = sum("HGMMA" in x for x in s)
    waits = [x for x in s if "WARPGROUP.DEPBAR" in x]
    assert n_mma >= 8 and len(waits) < n_mma // 4 + 2, (n_mma, waits)
    assert any(x.endswith("gsb0,0x1") for x in waits) and any(x.endswith("gsb0,0x0") for x in waits)


# ---------------------------------------------------------------------------------------------- the catalogue
@pytest.mark.parametrize("kernel", sorted(HM.KERNELS))
def test_every_marker_exists_once_and_matches_the_catalogue(kernel):
    markers = HM.marker_lines(kernel)
    values = sorted(m.value for m in HM.MUTANTS if m.kernel == kernel)
    assert sorted(markers) == values == list(range(1, len(values) + 1))
    assert all(len(v) == 1 for v in markers.values()), markers
    anchors = HM.anchor_lines(kernel)
    assert all(len(v) == 1 for v in anchors.values()), anchors
    for m in HM.MUTANTS:
        if m.kernel == kernel:
            lines = HM.report_lines(m)  # raises unless every place exists exactly once
            assert set(lines) == set(m.report_at)


@pytest.mark.parametrize("kernel", sorted(HM.KERNELS))
def test_each_marker_sits_in_its_own_mutant_branch(kernel):
    """The line that carries ``// MUTANT n`` is compiled only when the macro is n (it is the changed line)."""
    k = HM.kernel_of(kernel)
    text = k.text().splitlines()
    stack: list[str] = []
    where: dict[int, list[str]] = {}
    for i, line in enumerate(text, 1):
        s = line.strip()
        if s.startswith("#if"):
            stack.append(s)
        elif s.startswith("#else"):
            stack[-1] = "!" + stack[-1]
        elif s.startswith("#endif"):
            stack.pop()
        where[i] = list(stack)
    for n, (line,) in HM.marker_lines(kernel).items():
        conds = [c for c in where[line] if k.mutant_macro in c]
        assert conds == [f"#if {k.mutant_macro} == {n}"], (n, line, where[line])


def test_the_catalogue_covers_every_bug_class():
    assert {m.category for m in HM.MUTANTS} == set(HM.CATEGORIES)
    real = [m for m in HM.MUTANTS if m.kind != "none"]
    assert len(real) >= 12
    assert {m.kind for m in real} == {"deadlock", "race", "fault"}
    assert len({m.id for m in HM.MUTANTS}) == len(HM.MUTANTS)
    with pytest.raises(ValueError, match="no mutant"):
        HM.mutant("tp99")


@pytest.mark.parametrize("m", HM.MUTANTS, ids=lambda m: m.id)
def test_mutant_sass_differs_from_the_correct_build(m, builds):
    good = builds[V.build_key(m.kernel, 0, **m.build_config)]
    bad = builds[V.build_key(m.kernel, m.value, **m.build_config)]
    assert bad.sha256 != good.sha256
    assert _sass(bad.cubin) != _sass(good.cubin)


def test_mutants_change_the_instruction_their_header_names(builds):
    """The SASS facts behind four catalogue entries (what an interpreter has to tell apart)."""
    tp, tpm = (builds[V.build_key("tma_pipeline", m, TP_STAGES=3)].cubin for m in (0, 4))
    assert _sass(tp).count("FENCE.VIEW.ASYNC.S") == _sass(tpm).count("FENCE.VIEW.ASYNC.S") + 1  # proxy fence gone
    assert "DEPBAR.LE SB0,0x1" in _sass(builds[V.build_key("tma_pipeline", 9, TP_STAGES=3)].cubin)
    assert "DEPBAR.LE SB0,0x1" not in _sass(tp)
    gg, gg2, gg7 = (_sass(builds[V.build_key("wgmma_gemm", m, GG_CONSUMERS=2, GG_STAGES=4)].cubin) for m in (0, 2, 7))

    def pairs(s, first, then):
        return sum(first in a and then in b for a, b in zip(s, s[1:]))

    arrive, wait1 = "SYNCS.ARRIVE.TRANS64.A1T0", "WARPGROUP.DEPBAR.LE gsb0,0x1"
    assert pairs(gg, wait1, arrive) >= 1 and pairs(gg, arrive, wait1) == 0  # release after the retirement
    assert pairs(gg2, arrive, wait1) >= 1 and pairs(gg2, wait1, arrive) == 0  # release before it (early)
    assert "USETMAXREG.TRY_ALLOC.CTAPOOL UP0,0xe8" in gg and "USETMAXREG.TRY_ALLOC.CTAPOOL UP0,0xf0" in gg7


def test_ptxas_repairs_the_missing_accumulator_wait(builds):
    """gg3 (wait_group 1 before the epilogue): ptxas injects the wait itself (C7517), so the SASS reads the
    accumulators after WARPGROUP.DEPBAR.LE gsb0, 0x0 and the catalogue expects no report."""
    good = builds[V.build_key("wgmma_gemm", 0, GG_CONSUMERS=2, GG_STAGES=4)]
    bad = builds[V.build_key("wgmma_gemm", 3, GG_CONSUMERS=2, GG_STAGES=4)]

    def waits(b):  # the warpgroup waits between the last wgmma and the first store of C
        s = _sass(b.cubin)
        last_mma = max(i for i, x in enumerate(s) if "HGMMA" in x)
        first_store = min(i for i, x in enumerate(s) if x.split(" ")[0].startswith("STG") and i > last_mma)
        return [x.split()[-1] for x in s[last_mma:first_store] if "WARPGROUP.DEPBAR" in x]

    # the correct build: the loop's wait_group 1, then wait_group 0; gg3: its own wait_group 1 where the 0 was,
    # then the wait 0 ptxas injected before the epilogue's first accumulator read
    assert waits(good) == ["gsb0,0x1", "gsb0,0x0"]
    assert waits(bad) == ["gsb0,0x1", "gsb0,0x1", "gsb0,0x0"]
    # ptxas says so (C7517) in NVRTC's log, where it prints its info lines: the NVRTC of the H100 machine's
    # toolkit prints them the first time a program is compiled only (a second process's log was empty)
    assert "C7517" not in good.log and ("C7517" in bad.log or not bad.log)
    assert HM.mutant("gg3").kind == "none"


def test_gemm_geometry_is_the_sources_macros():
    text = HM.kernel_of("wgmma_gemm").text()
    defs = dict(re.findall(r"^#define (GG_[A-Z_]+) (\(.*\)|\d+)\s*$", text, re.MULTILINE))
    for macro in ("GG_CONSUMERS", "GG_STAGES", "GG_MUTANT"):  # the build's choices, not derived sizes
        defs.pop(macro, None)
    for c in (1, 2):
        for s in (2, 3, 4):
            env = {"GG_CONSUMERS": c, "GG_STAGES": s}

            def ev(name):
                expr = defs[name]
                for other in sorted(defs, key=len, reverse=True):
                    if other in expr:
                        expr = expr.replace(other, str(ev(other)))
                for k_, v_ in env.items():
                    expr = expr.replace(k_, str(v_))
                return eval(expr)  # noqa: S307 - integer arithmetic of the source's own macros

            g = HM.gemm_geometry(c, s)
            assert (g["bm"], g["bn"], g["bk"], g["threads"], g["smem"]) == \
                (ev("GG_BM"), ev("GG_BN"), ev("GG_BK"), ev("GG_THREADS"), ev("GG_SMEM_BYTES"))


def test_problems_and_configs_are_validated():
    with pytest.raises(ValueError, match="multiple"):
        HM.Problem("bad", "wgmma_gemm", (100, 128, 64), 0)
    with pytest.raises(ValueError, match="multiple"):
        HM.Problem("bad", "tma_pipeline", (17, 32), 0)
    with pytest.raises(ValueError, match="GG_STAGES=5"):
        HM.kernel_of("wgmma_gemm").defines(0, GG_STAGES=5)
    with pytest.raises(ValueError, match="unknown build macros"):
        HM.kernel_of("tma_pipeline").defines(0, GG_STAGES=3)


# ---------------------------------------------------------------------------------------------- tensor maps
def test_tensor_map_specs_follow_the_drivers_rules():
    for name, p in HM.PROBLEMS.items():
        cfgs = [{"TP_STAGES": 3}] if p.kernel == "tma_pipeline" else \
            [{"GG_CONSUMERS": c, "GG_STAGES": 4} for c in (1, 2)]
        for cfg in cfgs:
            specs = V.tensor_map_specs(p.kernel, cfg, p)
            geo = V.launch_geometry(p.kernel, cfg, p)
            if p.kernel == "wgmma_gemm":
                g = HM.gemm_geometry(cfg["GG_CONSUMERS"], 4)
                assert [s.box_bytes for s in specs] == [g["a_bytes"], g["b_bytes"]]  # what expect_tx announces
                assert all(s.swizzle == "128B" and s.box[0] * 2 == 128 for s in specs)
                assert geo["grid"][0] * 128 == p.dims[1] and geo["grid"][1] * g["bm"] == p.dims[0]
            else:
                assert [s.box_bytes for s in specs] == [2048, 2048]
            d = specs[0].as_dict()
            assert d["dtype_enum"] in (7, 9) and d["interleave"] == d["l2_promotion"] == d["oob_fill"] == 0
    with pytest.raises(ArgumentError, match="swizzle span"):
        V.TensorMapSpec("t", "bf16", (128, 64), (256,), (128, 64), "128B")
    with pytest.raises(ArgumentError, match="multiples of 16"):
        V.TensorMapSpec("t", "f32", (30, 64), (120,), (32, 16))
    with pytest.raises(ArgumentError, match="1..256"):
        V.TensorMapSpec("t", "f32", (32, 1024), (128,), (32, 512))


def test_a_tensor_map_travels_as_one_128_byte_argument():
    raw = bytes(range(128))
    arg = V.tensor_map_arg(raw)
    assert arg.size == 1 and arg.nbytes == 128 and arg.tobytes() == raw


# ---------------------------------------------------------------------------------------------- references
def test_pipeline_reference_is_the_stencil_the_header_describes():
    x = V.pipeline_inputs(3, 48, 64)
    assert np.isfinite(x).all() and (np.abs(x) >= 2.0 ** -8).all() and (np.abs(x) < 2.0 ** 8).all()
    out, y = V.pipeline_reference(x)
    rows, cols = x.shape
    for i in (0, 17, rows - 1):
        for j in (0, 31, 32, 63):
            strip = (j // 32) * 32
            assert out[i, j] == np.float32(np.float32(2) * x[i, j] + x[i, strip + (j + 1) % 32])
            assert y[i, j] == np.float32(np.float32(2) * x[i, j] + x[(i + 1) % rows, j])
    got = {"out": out.view(np.uint32).copy(), "y": y.view(np.uint32).copy()}
    assert V.check_pipeline(x, got)["equal"]
    got["y"][5, 7] = V.SENTINEL
    r = V.check_pipeline(x, got)
    assert not r["equal"] and r["y_mismatches"] == 1 and r["y_unwritten"] == 1


def test_gemm_inputs_are_moderate_bf16_bit_patterns():
    a, b = V.gemm_inputs(1, 128, 256, 192)
    assert a.shape == (128, 192) and b.shape == (256, 192) and a.dtype == np.uint16
    e = (a >> 7) & 0xFF
    assert e.min() == 123 and e.max() == 131
    a0, _ = V.gemm_inputs(1, 128, 128, 0)
    assert a0.shape == (128, 64)  # K = 0: the maps still cover 64 columns


def test_gemm_model_agrees_with_float64_and_the_checks():
    a, b = V.gemm_inputs(4, 128, 256, 256)
    model = V.gemm_model(a, b, 256)
    r = V.check_gemm(a, b, 256, model.copy(), model)
    assert r["equal"] and r["model_mismatches"] == 0 and r["over_bound"] == 0
    assert r["max_error_over_bound"] < 0.05  # the bound is loose: the model is far inside it
    bad = model.copy()
    bad[3, 4] ^= 1
    bad[5, 6] = V.SENTINEL
    r = V.check_gemm(a, b, 256, bad, model)
    assert r["model_mismatches"] == 2 and r["unwritten"] == 1 and r["over_bound"] == 1 and not r["equal"]
    z = V.check_gemm(*V.gemm_inputs(5, 128, 128, 0), 0, np.zeros((128, 128), np.uint32))
    assert z["equal"] and z["nonzero_bits"] == 0


@pytest.mark.parametrize("consumers", [1, 2])
def test_the_gemm_data_path_tma_swizzle_then_wgmma_descriptors(consumers):
    """The kernel's shared-memory data path on the CPU: the TMA's 128B swizzle places box row r, byte c of a
    tile at swizzle128(tile + 128 r + c) (address bits [4,7) ^= [7,10)); each consumer warpgroup reads its
    A rows (tile + 8192 ci) and B through the descriptors wg::tile_desc gives (start + 32 j, SBO 1024); its
    wgmma chain over the K tiles must be flashsim's model of the whole GEMM, bit for bit."""
    from flashsim.numerics.wgmma import wgmma
    from flashsim.warp.matrix_desc import CanonicalTile, load_operand, swizzle_address

    m, n, k = 64 * consumers * 2, 256, 192
    a, b = V.gemm_inputs(9, m, n, k)
    g = HM.gemm_geometry(consumers, 4)
    base = 0x400  # the first byte after the CTA's reserved 1 KB: 1024-aligned, as the kernel aligns
    smem = np.zeros(base + g["smem"], np.uint8)
    c = np.zeros((m, n), np.uint32)

    def tma_box(dst: int, tile: np.ndarray) -> None:
        rows = tile.shape[0]
        r, cb = np.meshgrid(np.arange(rows), np.arange(128), indexing="ij")
        smem[swizzle_address(dst + 128 * r + cb, "128B")] = tile.view(np.uint8).reshape(rows, 128)

    for mt in range(m // g["bm"]):
        for nt in range(n // 128):
            d = [np.zeros((64, 128), np.uint32) for _ in range(consumers)]
            for kt in range(k // 64):
                stage = kt % 4
                a_tile, b_tile = base + stage * g["a_bytes"], base + 4 * g["a_bytes"] + stage * g["b_bytes"]
                tma_box(a_tile, np.ascontiguousarray(a[mt * g["bm"]:(mt + 1) * g["bm"], kt * 64:(kt + 1) * 64]))
                tma_box(b_tile, np.ascontiguousarray(b[nt * 128:(nt + 1) * 128, kt * 64:(kt + 1) * 64]))
                for ci in range(consumers):
                    for j in range(4):
                        a_rows = a_tile + 8192 * ci
                        da = CanonicalTile(rows=64, kbytes=128, arrangement="128B", base=a_rows).descriptor(j)
                        db = CanonicalTile(rows=128, kbytes=128, arrangement="128B", base=b_tile).descriptor(j)
                        assert (da.start_address, da.stride_byte_offset) == (a_tile + 8192 * ci + 32 * j, 1024)
                        av = load_operand(smem, da, 64, 2)
                        bv = load_operand(smem, db, 128, 2)
                        d[ci] = wgmma(av, bv.T, d[ci], n=128, atype="bf16", ctype="f32",
                                      scale_d=0 if kt == 0 and j == 0 else 1)
            for ci in range(consumers):
                r0 = mt * g["bm"] + 64 * ci
                c[r0:r0 + 64, nt * 128:(nt + 1) * 128] = d[ci]
    assert (c == V.gemm_model(a, b, k)).all()


# ---------------------------------------------------------------------------------------------- the runner
def test_tool_output_parsing():
    race = """========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at tma_pipeline+0x3f0 in tma_pipeline.cu:221
=========     and Read access at tma_pipeline+0x5a0 in tma_pipeline.cu:230 [128 hazards]
=========
========= RACECHECK SUMMARY: 2 hazards displayed (2 errors, 0 warnings)
"""
    r = V.parse_tool_output("racecheck", race)
    assert r["verdict"] == "report" and r["hazards"] == 2 and len(r["summary"]) == 1
    assert r["headlines"] and "Race reported" in r["headlines"][0]
    clean = "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n"
    assert V.parse_tool_output("synccheck", clean)["verdict"] == "clean"
    sync = ("========= Barrier error detected. Divergent thread(s) in warp\n=========     at wgmma_gemm+0x90\n"
            "========= ERROR SUMMARY: 3 errors\n")
    r = V.parse_tool_output("synccheck", sync)
    assert r["verdict"] == "report" and r["errors"] == 3 and "Barrier error" in r["headlines"][0]
    assert V.parse_tool_output("memcheck", "killed\n")["verdict"] == "no verdict"
    # past --print-limit the tool adds a second summary line: the count is the first one's
    many = ("========= ERROR SUMMARY: 24 errors\n"
            "========= ERROR SUMMARY: 4 errors were not printed. Use --print-limit option to adjust the number\n")
    r = V.parse_tool_output("synccheck", many)
    assert r["errors"] == 24 and len(r["summary"]) == 2


def test_a_hanging_child_is_killed_and_reported(tmp_path, monkeypatch):
    """The parent's side of a run (process group, timeout, HOPPER_PROBLEM lines) with stand-in children."""
    b = V.build("tma_pipeline", 1, TP_STAGES=3)
    loaded = f'print("{V.RESULT_MARK} " + json.dumps({{"problem": None, "status": "loaded"}}), flush=True)'
    scripts = {
        "hang": f"import json, time\n{loaded}\ntime.sleep(60)",
        "done": f'import json\n{loaded}\nprint("{V.RESULT_MARK} " + json.dumps({{"problem": "tp_tiny", '
                f'"status": "done", "seconds": 0.1}}), flush=True)',
        "self": f'import json\n{loaded}\nprint("{V.RESULT_MARK} " + json.dumps({{"problem": "tp_tiny", '
                f'"status": "hang"}}), flush=True)',
    }
    for what, script in scripts.items():
        monkeypatch.setattr(V, "_child_command", lambda job, cubin, san, s=script: [sys.executable, "-c", s])
        job = V.Job(f"t_{what}", b, ("tp_tiny",), None, 3.0, 1.0)
        res = V.run_job(job, tmp_path / "x.cubin", "", tmp_path)
        want = {"hang": "hang (killed at the timeout)", "done": "done", "self": "hang"}[what]
        assert res["status"] == want, res
        assert (tmp_path / f"t_{what}.txt").is_file()
    assert res["seconds"] < 10


def test_child_command_runs_the_module_under_the_tool(tmp_path):
    b = V.build("wgmma_gemm", 5, GG_CONSUMERS=2, GG_STAGES=4)
    job = V.Job("x", b, ("gg_k0",), "racecheck", 30, 15)
    cmd = V._child_command(job, tmp_path / "c.cubin", "/opt/cs")
    assert cmd[:3] == ["/opt/cs", "--tool", "racecheck"]
    i = cmd.index("--run-one")
    assert cmd[i + 1:i + 3] == ["wgmma_gemm", "5"]
    assert cmd[cmd.index("--config") + 1] == "GG_CONSUMERS=2,GG_STAGES=4"
    assert cmd[cmd.index("--problems") + 1] == "gg_k0"


def test_dry_run_builds_everything_and_writes_the_catalogue(tmp_path):
    assert V.main(["--out", str(tmp_path), "--dry-run"]) == 0
    rep = json.loads((tmp_path / "hopper_kernels.json").read_text())
    assert rep["dry_run"] and len(rep["mutants"]) == len(HM.MUTANTS)
    assert set(rep["builds"]) == set(V.all_builds())
    for key, b in rep["builds"].items():
        assert (tmp_path / "cubins" / f"{key}.cubin").read_bytes()[:4] == b"\x7fELF"
    e = rep["mutants"]["tp1"]["catalogue"]
    assert e["macro"] == "TP_MUTANT=1" and e["report_at"]["marker"] == HM.marker_lines("tma_pipeline")[1][0]
    table = (tmp_path / "sanitizer_table.md").read_text()
    assert all(f"| {m.id} (" in table for m in HM.MUTANTS)


def test_the_module_runs_as_a_script_without_cupy(tmp_path):
    """The dry run imports neither cupy nor a GPU library: it works on this machine as a command."""
    code = ("import sys; import flashsim.gpu.validate_hopper_kernels as V; "
            f"rc = V.main(['--out', {str(tmp_path)!r}, '--dry-run']); "
            "assert 'cupy' not in sys.modules; sys.exit(rc)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
