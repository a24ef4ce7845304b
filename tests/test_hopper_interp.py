"""The warp-specialised Hopper kernels (gpu/kernels/tma_pipeline.cu, wgmma_gemm.cu) in the interpreter
(gpu/hopper_interp.py): the cubins the H100 ran, bit-identical outputs (the digests of
traces/hopper/hopper_kernels.json, made by ``python -m flashsim.gpu.validate_hopper_kernels --out DIR --record``),
the driver's tensor-map bytes, explored and adversarial schedules, every planted bug reported with its kind and
place, the end-of-kernel protocol checks and the warpgroup-collective wgmma.

The 1000-schedule sweep is ``python -m flashsim.gpu.hopper_interp sweep --schedules 1000`` (its result:
traces/hopper/schedule_sweep.json, checked here); the tests run a few schedules of each."""

from __future__ import annotations

import json

import numpy as np
import pytest

import flashsim.cuda as fc
from flashsim.gpu import hopper_interp as H
from flashsim.gpu import hopper_mutants as HM
from flashsim.gpu import validate_hopper_kernels as V
from flashsim.sass.machine import BarrierDeadlock, SchedulePolicy
from flashsim.sass.schedules import adversarial, explore, schedule_options

REC = json.loads(H.RECORD.read_text())
SWEEP = H.RECORD.parent / "schedule_sweep.json"

#: (build key, problem) of every correct run the H100 recorded; the 1024^3 GEMM runs once (it takes seconds)
RUNS = [(key, p) for key, probs in REC["correct"].items() for p in probs
        if p != "gg_1024" or key == "wgmma_gemm_c2_s4_m0"]


def _args(key: str) -> tuple[str, int, dict]:
    kernel = next(k for k in HM.KERNELS if key.startswith(k))
    b = REC["builds"][key]
    return kernel, b["mutant"], {d.split("=")[0]: int(d.split("=")[1]) for d in b["defines"] if "MUTANT" not in d}


def _build(key: str) -> V.Build:
    kernel, mutant, cfg = _args(key)
    return H.recorded_build(kernel, mutant, **cfg)


def _sections(cubin: bytes) -> dict[str, bytes]:
    import io

    from elftools.elf.elffile import ELFFile

    return {s.name: s.data() for s in ELFFile(io.BytesIO(cubin)).iter_sections()}


def test_the_record_is_the_h100s():
    assert REC["device"]["name"].startswith("NVIDIA H100") and REC["equal"] is True
    assert len(RUNS) >= 20 and REC["record"]


@pytest.mark.parametrize("key", sorted(REC["builds"]))
def test_the_recorded_cubins_are_the_h100s_and_todays_builds(key):
    """hopper_cubins.npz holds the bytes the H100 ran; NVRTC builds them again from today's sources, but for
    the line table (.debug_line and its relocations: it records the sources' file times and paths)."""
    rec = _build(key)
    assert rec.sha256 == REC["builds"][key]["sha256"]
    kernel, mutant, cfg = _args(key)
    fresh, mine = _sections(V.build(kernel, mutant, **cfg).cubin), _sections(rec.cubin)
    assert fresh.keys() == mine.keys()
    assert [n for n in fresh if fresh[n] != mine[n] and not n.endswith(".debug_line")] == []


def test_tensor_maps_encode_as_the_h100_driver_did():
    n = 0
    for key, probs in REC["correct"].items():
        b = _build(key)
        for pname, e in probs.items():
            p = HM.PROBLEMS[pname]
            host = V.host_of(b.kernel)
            addrs = {host_arr: e["tensor_maps"][name]["address"] for name, host_arr in host.map_targets}
            got = H.encode_maps(b.kernel, b.config, p, addrs)
            for name, raw in got.items():
                assert raw.hex() == e["tensor_maps"][name]["bytes"], (key, pname, name)
                n += 1
    assert n == 2 * len([1 for probs in REC["correct"].values() for _ in probs])


@pytest.mark.parametrize("key,problem", RUNS)
def test_interpreter_is_bit_identical_to_the_h100(key, problem):
    o = H.run(_build(key), problem)
    assert o.error is None, o.error
    assert o.report.race_count == 0 and not o.report.protocol, o.report.text()
    assert o.digests == H.gpu_digests(key, problem)


@pytest.mark.parametrize("kernel,config,problem", [H.SWEEP_RUNS[1], H.SWEEP_RUNS[4]])
def test_adversarial_and_seeded_schedules_leave_the_h100_bits(kernel, config, problem):
    r = H.sweep_build(kernel, dict(config), problem, schedules=2, seed=11)
    assert r["runs"] == len(adversarial(H.roles(kernel, dict(config)))) + 3
    assert r["runs"] == r["ended"] == r["clean"] == r["h100_bits"], r["failures"]


def test_the_committed_sweep_covers_1000_schedules_of_every_build():
    rec = json.loads(SWEEP.read_text())
    builds = {V.build_key(k, 0, **dict(c)) for k, c, _ in H.SWEEP_RUNS}
    per_kernel: dict[str, int] = {}
    for r in rec["sweeps"]:
        kernel = "tma_pipeline" if r["build"].startswith("tma") else "wgmma_gemm"
        per_kernel[kernel] = per_kernel.get(kernel, 0) + r["runs"]
        assert r["runs"] >= 1 + len(adversarial(H.roles(kernel, {}))) + 1000  # default, adversarial, 1000 seeds
        assert r["runs"] == r["ended"] == r["clean"] == r["h100_bits"] and r["h100_record"], r["failures"]
        assert r["cubin_sha256"] == REC["builds"][r["build"]]["sha256"]
    assert {r["build"] for r in rec["sweeps"]} == builds
    assert min(per_kernel.values()) >= 1000 and set(per_kernel) == set(HM.KERNELS)


# ---------------------------------------------------------------------------------------------- planted bugs
@pytest.mark.parametrize("m", HM.MUTANTS, ids=lambda m: m.id)
def test_each_planted_bug_is_reported_with_its_kind_and_place(m):
    v = H.judge(m, schedules=4)
    assert v.matches, (v.why, v.kinds, v.lines, v.expected_lines, v.text[:3000])
    if m.kind != "none":
        assert m.kind in v.kinds


def test_the_missing_expect_tx_bytes_are_a_protocol_finding():
    o = H.run(H.recorded_build("wgmma_gemm", 8, GG_CONSUMERS=2, GG_STAGES=4), "gg_tiny")
    assert isinstance(o.error, BarrierDeadlock)
    late = [p for p in o.report.protocol if p.kind == "expect_tx"]
    assert late and "announced fewer bytes than its copies bring" in late[0].message
    tma = set(HM.anchor_lines("wgmma_gemm")["@gg_tma_a"] + HM.anchor_lines("wgmma_gemm")["@gg_tma_b"])
    assert any(n in tma for p in late for _, n in p.lines)


def test_a_warp_missing_from_its_warpgroup_holds_the_others_at_the_wgmma():
    # gg7: warp 11 cannot get its registers; warps 8..10 reach the first wgmma and wait for it there
    with pytest.raises(BarrierDeadlock) as info:
        m = HM.mutant("gg7")
        o = H.run(H.recorded_build(m.kernel, m.value, **m.build_config), m.problem)
        raise o.error
    msg = str(info.value)
    assert "warpgroup-collective" in msg and "warps 8..11 must reach" in msg
    line = HM.report_lines(HM.mutant("gg7"))["marker"]
    assert f"wgmma_gemm.cu:{line}" in msg and "setmaxnreg.inc from 168 to 240" in msg


# ---------------------------------------------------------------------------------------------- protocol at exit
_EXIT_SRC = r'''
#include "mbarrier.cuh"
extern "C" __global__ void leftover(const float* src, int mode) {
    __shared__ __align__(8) unsigned long long bar;
    __shared__ __align__(128) float buf[32];
    if (threadIdx.x == 0) { mbar::init(mbar::smem(&bar), 2); mbar::fence_init(); }
    __syncthreads();
    if (threadIdx.x == 0) {
        if (mode == 0) mbar::arrive(mbar::smem(&bar));                       // 1 of the 2 arrivals
        if (mode == 1) mbar::arrive_expect_tx(mbar::smem(&bar), 256);         // announces 256, brings 128
        if (mode >= 1) mbar::bulk_g2s(mbar::smem(&buf[0]), src, 128, mbar::smem(&bar));
    }
}
'''


@pytest.mark.parametrize("mode,kinds", [(0, {"arrival_count"}), (1, {"arrival_count", "expect_tx", "copy_in_flight"}),
                                        (2, {"copy_in_flight"})])
def test_end_of_kernel_protocol_checks(mode, kinds):
    from flashsim.kernels.sources import BASE_OPTIONS, KERNELS_DIR

    k = fc.RawKernel(_EXIT_SRC, "leftover", options=(*BASE_OPTIONS, f"--include-path={KERNELS_DIR}"))
    src = fc.asarray(np.arange(32, dtype=np.float32))
    with fc.checking(races=True) as rep:
        k((1,), (32,), (src, np.int32(mode)))
    got = {p.kind for p in rep.protocol}
    assert kinds <= got, [str(p) for p in rep.protocol]
    assert not rep.clean
    assert "mbarrier protocol:" in rep.text()


# ---------------------------------------------------------------------------------------------- schedules
def test_adversarial_schedules_are_named_and_change_the_order():
    pols = adversarial({"producer": (0,), "consumer": (1, 2)})
    names = [p.name for p in pols]
    assert names[:2] == ["producer first", "consumer first"] and "copies land last" in names
    assert "consumer delayed by 1024 steps" in names
    with pytest.raises(ValueError, match="warp indices"):
        SchedulePolicy("bad", first=(-1,))
    b = H.recorded_build("tma_pipeline", 0, TP_STAGES=3)
    orders = {}
    for pol in pols[:2]:
        o = H.run(b, "tp_tiny", options=schedule_options(pol), timeline=True)
        assert o.error is None and o.digests == H.gpu_digests(b.key, "tp_tiny")
        orders[pol.name] = [(e.warp, e.kind) for e in o.report.events if e.cta == 0][:40]
    assert orders["producer first"] != orders["consumer first"]


def test_explore_labels_every_schedule():
    b = H.recorded_build("tma_pipeline", 0, TP_STAGES=2)
    runs = explore(lambda opts: H.run(b, "tp_tiny", options=opts).digests["y"], schedules=1, seed=5,
                   roles=H.roles("tma_pipeline", {}))
    labels = [lab for lab, _ in runs]
    assert labels[0] is None and labels[-1] == 5 and any(isinstance(x, SchedulePolicy) for x in labels)
    assert len({d for _, d in runs}) == 1


@pytest.mark.parametrize("argv,message", [(["sweep", "--builds", "tma_pipeline_s9_m0"], "--builds: unknown"),
                                          (["mutants", "--only", "tp1,zz9"], "--only: unknown mutants ['zz9']")])
def test_the_command_names_an_unknown_build_or_mutant(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        H.main(argv)
    assert exc.value.code == 2 and message in capsys.readouterr().err
