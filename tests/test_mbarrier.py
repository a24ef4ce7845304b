"""Hopper's mbarrier machinery in the interpreter: the mbarrier word (flashsim.smem.mbarrier), the SASS it
compiles to (SYNCS.*, UBLKCP, ELECT, USETMAXREG, BAR with register operands; flashsim.sass.ops_sync),
parked lanes, bulk copies in flight and deadlock reports (flashsim.sass.asyncstate), schedule exploration.

The probes are gpu/kernels/probe_mbarrier.cu and gpu/kernels/ws_pipeline.cu (host side and references:
gpu/validate_mbarrier.py). The interpreter is checked against the references built from the PTX ISA and the
rules of flashsim.smem.mbarrier, and the H100 record (mbarrier_probes.npz in traces/sass, written by ``python
-m flashsim.gpu.validate_mbarrier --out DIR --record``) is replayed bit for bit. The planted-bug copies of the
pipeline (WS_MUTANT 1..3) would hang a GPU: their deadlock reports are checked here only.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

import flashsim.cuda as fc
from flashsim.errors import SimulatedFault
from flashsim.gpu import validate_mbarrier as V
from flashsim.sass.schedules import explore, same_bits
from flashsim.sass.toolchain import disassemble
from flashsim.smem import mbarrier as mb

gpu = pytest.mark.gpu
HAVE_RECORD = V.TRACE_NPZ.exists()
M32 = 0xFFFFFFFF


# ---------------------------------------------------------------------------------------------- the word
@pytest.mark.parametrize("n", [1, 2, 3, 32, 100, 65535, (1 << 20) - 1])
def test_init_word_is_the_word_ptxas_computes(n):
    # mbarrier.init: UIADD3 x = -n + 0x100000; USHF.L x << 11 (high word), x << 1 (low word); SYNCS.EXCH.64
    x = (0x100000 - n) & M32
    word = int(mb.init_word(n))
    assert word == ((x << 1) & M32) | (((x << 11) & M32) << 32)
    assert {k: int(v) for k, v in mb.fields(word).items()} == {"phase": 0, "pending": n, "expected": n, "tx": 0}
    # mbarrier.pending_count(state) = 0x100000 - ((state >> 43) & 0xfffff) (ptxas's ALU code)
    assert (0x100000 - ((word >> 43) & 0xFFFFF)) & M32 == n


def test_the_state_holds_every_count_negated():
    # bits 1..20: 2^20 - expected; 21..41: -tx-count mod 2^21; 43..62: 2^20 - pending; 63: phase; 0 and 42: 0
    for tx in (0, 1, 16, 256, 100000, (1 << 20) - 1, -1, -64, -((1 << 20) - 1)):
        w = int(mb.make_word(1, 5, 9, tx))
        assert (w >> 21) & 0x1FFFFF == (-tx) % (1 << 21) and not w & 1 and not (w >> 42) & 1
        assert {k: int(v) for k, v in mb.fields(w).items()} == {"phase": 1, "pending": 5, "expected": 9, "tx": tx}
        assert w >> 43 == (1 << 20) | ((1 << 20) - 5) and (w >> 1) & 0xFFFFF == (1 << 20) - 9
    # an expect-tx of 100000 bytes on init(4): the high word the H100 returns from the next arrive
    w, _, _ = mb.arrive(mb.init_word(4), 0, tx_add=100000)
    assert int(mb.state_token(w)) == 0x7FFFE3CF00000000


def test_the_state_an_arrive_returns_is_the_high_half():
    w = mb.make_word(1, 3, 7, 4096)
    tok = int(mb.state_token(w))
    assert tok == int(w) & 0xFFFFFFFF00000000 and tok & 0xFFFFFFFF == 0
    assert int(mb.pending_count(tok)) == 3 and bool(mb.phase_done(w, 0)) == bool(mb.phase_done(tok, 0))


def test_inval_writes_back_the_aligned_16_byte_block():
    lo, hi = mb.inval_block(np.array([0x400, 0x408, 0x410, 0x418]))
    assert lo.tolist() == [0x400, 0x400, 0x410, 0x410] and hi.tolist() == [0x408, 0x408, 0x418, 0x418]


def test_arrivals_complete_a_phase_and_reload_the_pending_count():
    w = mb.init_word(3)
    w, done, mis = mb.arrive(w, 2)
    assert not done and not mis and int(mb.fields(w)["pending"]) == 1
    w, done, mis = mb.arrive(w, 1)
    f = {k: int(v) for k, v in mb.fields(w).items()}
    assert done and f == {"phase": 1, "pending": 3, "expected": 3, "tx": 0}


def test_pending_transactions_hold_the_phase_until_complete_tx():
    w = mb.init_word(1)
    w, done, _ = mb.arrive(w, 1, tx_add=256)  # arrive.expect_tx: expect-tx, then the arrival
    assert not done and int(mb.fields(w)["pending"]) == 0 and int(mb.fields(w)["tx"]) == 256
    w, done, _ = mb.complete_tx(w, 128)
    assert not done and int(mb.fields(w)["tx"]) == 128
    w, done, _ = mb.complete_tx(w, 128)
    assert done and int(mb.fields(w)["phase"]) == 1 and int(mb.fields(w)["pending"]) == 1
    # complete-tx may come first: the tx-count goes negative, the phase waits for the expect-tx
    w, done, _ = mb.complete_tx(w, 64)
    assert not done and int(mb.fields(w)["tx"]) == -64
    w, done, _ = mb.arrive(w, 1, tx_add=64)
    assert done and int(mb.fields(w)["phase"]) == 0


def test_arrive_drop_lowers_the_expected_count_of_later_phases():
    w = mb.init_word(4)
    w, done, _ = mb.arrive(w, 1, drop=True)
    assert int(mb.fields(w)["expected"]) == 3 and int(mb.fields(w)["pending"]) == 3
    w, done, _ = mb.arrive(w, 3)
    assert done and int(mb.fields(w)["pending"]) == 3


def test_misuse_is_reported_not_modelled():
    w = mb.init_word(2)
    assert int(mb.arrive(w, 3)[2]) == 1  # more arrivals than pending
    assert int(mb.arrive(w, 0, tx_add=1 << 20)[2]) == 2  # tx-count out of range
    assert int(mb.arrive(w, 2, drop=True)[2]) in (1, 3)  # expected count would reach 0


def test_parity_waits_name_the_current_or_the_preceding_phase():
    w = mb.init_word(1)
    assert bool(mb.phase_done(w, 1))  # the phase "before" phase 0 counts as completed (producer start state)
    assert not bool(mb.phase_done(w, 0))
    w, _, _ = mb.arrive(w, 1)
    assert bool(mb.phase_done(w, 0)) and not bool(mb.phase_done(w, 1))
    w, _, _ = mb.arrive(w, 1)  # two phases on: a wait for parity 0 waits for the next completion again
    assert not bool(mb.phase_done(w, 0))


# ---------------------------------------------------------------------------------------------- the SASS
PROMISED = (
    "SYNCS.EXCH.64", "SYNCS.ARRIVE.TRANS64.A1T0", "SYNCS.ARRIVE.TRANS64.ART0", "SYNCS.ARRIVE.TRANS64",
    "SYNCS.ARRIVE.TRANS64.RED.A0TR", "SYNCS.ARRIVE.TRANS64.RED.A0TX", "SYNCS.ARRIVE.TRANS64.OPTOUT.A1T0",
    "SYNCS.ARRIVE.TRANS64.OPTOUT.ART0", "SYNCS.ARRIVE.TRANS64.RED", "SYNCS.ARRIVE.TRANS64.RED.A1T0",
    "SYNCS.PHASECHK.TRANS64", "SYNCS.PHASECHK.TRANS64.TRYWAIT", "SYNCS.CCTL.IV", "UBLKCP.S.G", "ELECT",
    "FENCE.VIEW.ASYNC.S", "CGAERRBAR", "NANOSLEEP.SYNCS", "USETMAXREG.TRY_ALLOC.CTAPOOL",
    "USETMAXREG.DEALLOC.CTAPOOL", "R2UR.OR", "BRA.U.ANY", "BAR.ARV", "BAR.SYNC.DEFER_BLOCKING",
)


def _forms(cubin: bytes) -> set[str]:
    return {rec["opcode"] for fn in disassemble(cubin)[1] for rec in fn["sass-instructions"]}


def test_probes_compile_to_the_hopper_sass_they_promise():
    forms = _forms(V.build(V.PROBE_FILE).cubin) | _forms(V.pipeline_build(4).cubin)
    missing = [f for f in PROMISED if f not in forms]
    assert not missing, f"no instruction {missing}; the probes have {sorted(forms)}"
    # bar.sync / bar.arrive with id and count in registers: ptxas packs both into one register
    text = {f"{rec['opcode']} {rec.get('operands', '')}" for fn in disassemble(V.build(V.PROBE_FILE).cubin)[1]
            for rec in fn["sass-instructions"]}
    assert any(re.match(r"BAR\.(SYNC\.DEFER_BLOCKING|ARV) (R\d+),\2$", t) for t in text), sorted(text)


# ---------------------------------------------------------------------------------------------- probes vs references
@pytest.mark.parametrize("timeouts", [False, True], ids=["basic", "timeouts"])
def test_mbar_script_matches_the_ptx_reference(timeouts):
    # until the H100 record exists this is the reference of the PTX ISA and the hypothesised word layout
    ops, args, masks, src = V.make_scripts(seed=7, cases=24, timeouts=timeouts)
    got = V.run_probe(V.script_run(ops, args, masks, src), "interp")
    want = V.script_reference(ops, args, masks, src)
    assert V.compare_script(ops, args, masks, got, list(want), "reference") == []
    # the scripts tell the two token hypotheses apart (lanes of one arrive combined, or one after another)
    alt = V.script_reference(ops, args, masks, src, combine=False)
    assert V.compare_script(ops, args, masks, got, list(alt), "alt")


def test_scripts_exercise_every_operation():
    ops, *_ = V.make_scripts(seed=7, cases=24)
    seen = {V.OP_NAMES[int(o) & 31] for o in ops.reshape(-1)}
    assert seen == set(V.OPS), set(V.OPS) - seen


def test_generic_accesses_see_only_the_bytes_an_inval_writes():
    got = V.run_probe(V.word_run(), "interp")[0]
    want = V.word_probe_reference()
    # the arrive tokens (outputs 0 and 13): only their high register is written, the low one keeps what the
    # compiled code left there (the replay of the H100 record compares those bits too)
    high = np.array([0xFFFFFFFF00000000 if n.endswith("arrive returns (init 3)") or "state arrive returns after" in n
                     else 0xFFFFFFFFFFFFFFFF for n in V.WORD_PROBE_OUTPUTS], np.uint64)
    assert int((high != 0xFFFFFFFFFFFFFFFF).sum()) == 2
    assert [n for n, g, w, k in zip(V.WORD_PROBE_OUTPUTS, got, want, high) if g & k != w & k] == []
    assert int(want[1]) == V.WORD_PROBE_PAT and int(want[8]) == int(mb.arrive(mb.init_word(3), 1)[0])
    got = V.run_probe(V.many_run(64, 3), "interp")[0]
    assert (got == V.many_reference(64, 3)).all()


def test_elect_namedbar_and_setmaxnreg_probes_match_their_references():
    m = V.elect_cases(3, 48)
    assert (V.run_probe(V.elect_run(m), "interp")[0] == V.elect_reference(m)).all()
    x, ids = V.namedbar_inputs(3, 6)
    assert (V.run_probe(V.namedbar_run(x, ids), "interp")[0] == V.namedbar_reference(x)).all()
    xs = V.setmaxnreg_inputs(3, 3)
    assert (V.run_probe(V.setmaxnreg_run(xs), "interp")[0] == V.setmaxnreg_reference(xs)).all()


def _replay(rec: dict) -> dict[str, tuple[int, int]]:
    """Run the recorded cubins on the recorded inputs in the interpreter; every output must equal the
    recorded GPU output bit for bit (the pipeline under the default and seeded schedules). Returns, per
    script set, how many words and per-lane results agree (all of them)."""
    builds = V.recorded_builds(rec)
    pb = builds["probe"]
    agree = {}
    for sname in ("basic", "timeouts"):
        k = f"mbar_script/{sname}/"
        ops, args, masks, src = (rec[k + n] for n in ("ops", "args", "masks", "src"))
        got = V.run_probe(V.script_run(ops, args, masks, src, pb), "interp")
        gpu_out = [rec[k + n] for n in ("gpu_words", "gpu_res", "gpu_buf")]
        assert V.compare_script(ops, args, masks, got, gpu_out, "H100") == [], sname
        # the reference of the rules (flashsim.smem.mbarrier) gives the record too, without the interpreter
        assert V.compare_script(ops, args, masks, gpu_out, list(V.script_reference(ops, args, masks, src)),
                                "reference") == [], sname
        agree[sname] = tuple(int((np.asarray(a).reshape(-1) == b.reshape(-1)).sum())
                             for a, b in zip(got[:2], gpu_out[:2]))
    if "mbar_word_probe/gpu_out" in rec:
        # the probes of what the record of 2026-11-24 left open (flashsim.smem.mbarrier): the model's answers
        pat = int(rec["mbar_word_probe/pat"][0])
        got = V.run_probe(V.word_run(pat, pb), "interp")[0]
        dev = rec["mbar_word_probe/gpu_out"]
        assert [f"{n}: H100 {int(d):#x}, interpreter {int(g):#x}" for n, g, d in zip(V.WORD_PROBE_OUTPUTS, got, dev)
                if g != d] == []
    if "mbar_many_probe/gpu_out" in rec:
        n, ctas = (int(v) for v in rec["mbar_many_probe/n_ctas"])
        got = V.run_probe(V.many_run(n, ctas, pb), "interp")[0].reshape(ctas, 2, n)
        dev = rec["mbar_many_probe/gpu_out"].reshape(ctas, 2, n)
        ref = V.many_reference(n, ctas).reshape(ctas, 2, n)
        # after inval: the bytes hold the state, as modelled. Live: NOT MODELLED. With 1,024 barriers per CTA
        # (several CTAs per SM) the H100 shows a live barrier's state in its bytes (none are 0; 98.4% equal the
        # state after the probe's arrive), where the model keeps states apart until an inval (as the scripts'
        # 4 barriers per CTA show on every read): the hardware keeps only so many states off memory
        assert (got[:, 1] == dev[:, 1]).all()
        live = {"differ": int((got[:, 0] != dev[:, 0]).sum()), "zero": int((dev[:, 0] == 0).sum()),
                "state": int((dev[:, 0] == ref[:, 1]).sum())}
        assert live["differ"] == 0 or live == MANY_LIVE_NOT_MODELLED, live  # (0: a record the interpreter made)
    assert (V.run_probe(V.elect_run(rec["elect_probe/masks"], pb), "interp")[0] == rec["elect_probe/gpu_out"]).all()
    x, ids = rec["namedbar_probe/x"], rec["namedbar_probe/ids"]
    assert (V.run_probe(V.namedbar_run(x, ids, pb), "interp")[0] == rec["namedbar_probe/gpu_out"]).all()
    assert (V.run_probe(V.setmaxnreg_run(rec["setmaxnreg_probe/x"], pb), "interp")[0]
            == rec["setmaxnreg_probe/gpu_out"]).all()
    for stages in (2, 4):
        x = rec[f"ws_pipeline_{stages}/x"]
        b = builds[f"ws_pipeline_{stages}"]
        runs = explore(lambda o: V.run_probe(V.pipeline_run(x, stages, b), "interp", o)[0], schedules=4, seed=0)
        for _, out in runs:
            assert (out.view(np.uint32) == rec[f"ws_pipeline_{stages}/gpu_out"].view(np.uint32)).all()
    return agree


#: mbar_many_probe's live words (262,144) in the H100 record: all differ from the model's 0, none is 0, 257,920
#: equal the barrier's state (flashsim.smem.mbarrier does not model states reaching the bytes without an inval)
MANY_LIVE_NOT_MODELLED = {"differ": 262144, "zero": 0, "state": 257920}

#: The H100 record of 2026-11-24 (traces/sass/mbarrier_probes.npz): every output agrees bit for bit. For the
#: scripted mbarrier sequences: (words read back with ld.shared, per-lane results) that agree, of 12,288 and
#: 98,304 per set: all of them. The words are the barriers' shared-memory bytes, 0 until an mbarrier.inval
#: writes the states of its 16-byte block there (86% / 81% of the reads are 0); the arrive results are the
#: high half of the state (flashsim.smem.mbarrier gives the counts behind each rule).
SCRIPT_AGREEMENT = {"basic": (12288, 98304), "timeouts": (12288, 98304)}


@pytest.mark.skipif(not HAVE_RECORD, reason="no H100 record yet (traces/sass/mbarrier_probes.npz): run "
                                            "python -m flashsim.gpu.validate_mbarrier --out DIR --record on the GPU")
def test_recorded_h100_probes_replay_bit_for_bit():
    rec = V.replay()
    assert _replay(rec) == SCRIPT_AGREEMENT
    assert all(rec[f"mbar_script/{s}/gpu_words"].size == 12288 and rec[f"mbar_script/{s}/gpu_res"].size == 98304
               for s in SCRIPT_AGREEMENT)


def test_the_recorded_words_are_zero_until_an_inval_writes_the_state():
    # the rule behind the words, counted on the record alone: a word is the bytes stored before the first init
    # (0) until an inval in its 16-byte block finds the barrier valid and writes its state (never 0: bits 1..20
    # hold 2^20 - expected) there
    if not HAVE_RECORD:
        pytest.skip("no H100 record")
    rec = V.replay()
    counts = {}
    for sname in ("basic", "timeouts"):
        k = f"mbar_script/{sname}/"
        ops, gw = rec[k + "ops"], rec[k + "gpu_words"].reshape(*rec[k + "ops"].shape, 4)
        written = np.zeros(gw.shape, bool)  # an inval wrote the state (by this step)
        for c in range(ops.shape[0]):
            valid, done = np.zeros(4, bool), np.zeros(4, bool)
            for i in range(ops.shape[1]):
                code, b = int(ops[c, i]) & 31, (int(ops[c, i]) >> 5) & 3
                if code == V.OPS["init"]:
                    valid[b] = True
                elif code == V.OPS["inval"]:
                    for j in (b & ~1, b | 1):
                        done[j] |= valid[j]
                    valid[b] = False
                written[c, i] = done
        assert (gw[~written] == 0).all() and (gw[written] != 0).all()
        counts[sname] = (int((gw == 0).sum()), int(gw.size))
    assert counts == {"basic": (10544, 12288), "timeouts": (9989, 12288)}


def test_the_device_script_records_what_the_replay_reads(tmp_path, monkeypatch):
    # the GPU side played by the interpreter: the script's record path (files, keys, counts) without a GPU
    from flashsim.gpu import runtime

    real = V.run_probe
    monkeypatch.setattr(V, "run_probe", lambda run, where, opts=None: real(run, "interp", opts))
    monkeypatch.setattr(runtime, "require_gpu", lambda: None)
    monkeypatch.setattr(runtime, "device_info", lambda: {"name": "the interpreter"})
    rep = V.validate(tmp_path, cases=6, seed=2, seeds=1, record=True, log=lambda *a: None)
    assert rep["equal"], {n: e["mismatches"][:2] for n, e in rep["probes"].items()}
    # the reference leaves the low halves of mbar_word_probe's 2 arrive tokens 0; the code leaves other values there
    assert {n: e["reference_vs_gpu"] for n, e in rep["probes"].items() if e["reference_vs_gpu"]} == {"mbar_word_probe": 2}
    assert rep["probes"]["mbar_script/basic"]["per_lane_tokens_vs_gpu"] > 0
    saved = json.loads((tmp_path / "mbarrier_probes.json").read_text())
    assert saved["device"] == {"name": "the interpreter"} and saved["probes"]["mbar_script/timeouts"]["cases"] == 6
    assert saved["opcodes"]["SYNCS.EXCH.64"]["equal"] > 0
    _replay(V.replay(tmp_path / "mbarrier_probes.npz"))


# ---------------------------------------------------------------------------------------------- the pipeline
@pytest.mark.parametrize("stages", [2, 4])
def test_pipeline_is_bit_identical_under_every_schedule(stages):
    x = V.pipeline_inputs(5, ctas=3, tiles=9)
    runs = explore(lambda o: V.run_probe(V.pipeline_run(x, stages), "interp", o)[0], schedules=16, seed=100)
    assert len(runs) == 17 and same_bits(runs)
    want = V.pipeline_reference(x).reshape(-1)
    assert (runs[0][1].view(np.uint32) == want.view(np.uint32)).all()


def test_pipeline_reads_no_race_and_leaves_the_same_bits_with_the_race_shadow_on():
    x = V.pipeline_inputs(6, ctas=2, tiles=6)
    b = V.pipeline_build(4)
    f = b.module.get_function("ws_pipeline")
    out = fc.zeros((x.size,), np.float32)
    with fc.checking(races=True) as report:
        f((2,), (96,), (fc.asarray(x.reshape(-1)), out, np.int32(6)))
    assert (out.get().view(np.uint32) == V.pipeline_reference(x).reshape(-1).view(np.uint32)).all()
    assert report.race_count == 0, report.race_sites[:3]


# ---------------------------------------------------------------------------------------------- planted bugs
def _line(pattern: str) -> int:
    """The line of ws_pipeline.cu that the pattern matches (the planted bug's line)."""
    from flashsim.kernels.sources import kernel_path

    lines = kernel_path(V.PIPE_FILE).read_text().splitlines()
    hits = [i + 1 for i, t in enumerate(lines) if re.search(pattern, t)]
    assert len(hits) == 1, (pattern, hits)
    return hits[0]


def _deadlock(mutant: int, seed=None) -> fc.BarrierDeadlock:
    x = V.pipeline_inputs(1, ctas=2, tiles=10)
    with pytest.raises(fc.BarrierDeadlock) as info:
        V.run_probe(V.pipeline_run(x, 4, V.pipeline_build(4, mutant)), "interp", fc.ExecOptions(schedule_seed=seed))
    return info.value


@pytest.mark.parametrize("seed", [None, 3])
def test_wrong_parity_is_a_deadlock_at_the_producers_wait(seed):
    exc = _deadlock(1, seed)
    msg = str(exc)
    line = _line(r"mbar::wait\(mbar::smem\(&empty\[s\]\), round & 1u\);")
    warp0 = next(g for g in exc.graph if g["cta"] == 0 and g["warp"] == 0)
    text = "\n".join([warp0["where"], *warp0["waits"]])
    # the producer waits for phase 0 of empty[0], which nobody arrives on before the first tile exists
    assert f"ws_pipeline.cu:{line}" in text, msg
    assert "(stage 0 of the 4 at" in text and "waits for the phase of parity 0 to complete (phase #0" in text
    assert "arrivals 0 of 2" in text and "never arrived on it: 0, 1, 2" in text
    # the consumers wait on full[0] (expected 1), likewise in phase 0
    for w in (1, 2):
        g = next(g for g in exc.graph if g["cta"] == 0 and g["warp"] == w)
        assert "arrivals 0 of 1" in "\n".join(g["waits"])
    assert "ctas 1: blocked exactly as cta=0" in msg


def test_missing_arrive_is_a_deadlock_with_one_of_two_arrivals():
    exc = _deadlock(2)
    prod = next(g for g in exc.graph if g["cta"] == 0 and g["warp"] == 0)
    text = "\n".join([prod["where"], *prod["waits"]])
    assert prod["role"] == "producer"
    line = _line(r"mbar::wait\(mbar::smem\(&empty\[s\]\), \(round & 1u\) \^ 1u\);")
    assert f"ws_pipeline.cu:{line}" in text
    assert re.search(r"arrivals 1 of 2 \(pending 1; this phase: warp=1 x1 at \S*ws_pipeline.cu:\d+\)", text), text
    assert "never arrived on it: 0, 2" in text  # consumer warp 2 is the one that forgot
    for w in (1, 2):
        g = next(g for g in exc.graph if g["cta"] == 0 and g["warp"] == w)
        assert g["role"] == "consumer"
        assert "parity 1" in "\n".join(g["waits"]) and "could still arrive: warp=0 (blocked at" in "\n".join(g["waits"])


def test_expect_tx_off_by_a_tile_is_a_deadlock_with_bytes_pending():
    exc = _deadlock(3)
    line = _line(r"mbar::wait\(mbar::smem\(&full\[s\]\), round & 1u\);")
    for w in (1, 2):
        g = next(g for g in exc.graph if g["cta"] == 0 and g["warp"] == w)
        text = "\n".join([g["where"], *g["waits"]])
        assert g["role"] == "consumer"
        assert re.search(r"arrivals 1 of 1 \(pending 0; this phase: warp=0 x1 at \S*ws_pipeline.cu:\d+\); tx-count 256 "
                         r"bytes pending \(this phase's expect_tx: \d+ bytes at \S*ws_pipeline.cu:\d+\)", text), text
        assert f"ws_pipeline.cu:{line}" in text


def test_exploring_schedules_reports_the_seed_of_a_deadlock():
    x = V.pipeline_inputs(1, ctas=1, tiles=6)
    b = V.pipeline_build(4, 3)
    with pytest.raises(fc.BarrierDeadlock, match=r"^under the default schedule: barrier can never complete"):
        explore(lambda o: V.run_probe(V.pipeline_run(x, 4, b), "interp", o), schedules=2)


# ---------------------------------------------------------------------------------------------- errors
_ERRS = r'''
#include "mbarrier.cuh"
extern "C" __global__ void no_init(int* out) {
    __shared__ __align__(8) unsigned long long bar;
    out[threadIdx.x] = (int)mbar::arrive(mbar::smem(&bar));
}
extern "C" __global__ void over_arrive(int* out) {
    __shared__ __align__(8) unsigned long long bar;
    if (threadIdx.x == 0) mbar::init(mbar::smem(&bar), 1);
    __syncthreads();
    out[threadIdx.x] = (int)mbar::arrive(mbar::smem(&bar));
}
extern "C" __global__ void lone_wait(int* out) {
    __shared__ __align__(8) unsigned long long bar;
    if (threadIdx.x == 0) mbar::init(mbar::smem(&bar), 2);
    __syncthreads();
    if (threadIdx.x == 0) mbar::arrive(mbar::smem(&bar));
    out[threadIdx.x] = (int)mbar::try_parity(mbar::smem(&bar), 0);  // one try: false at the time limit
    mbar::wait(mbar::smem(&bar), 0);                                 // a loop: never completes
}
extern "C" __global__ void __cluster_dims__(2, 1, 1) clustered(int* out) { out[threadIdx.x] = 1; }
'''


@pytest.fixture(scope="module")
def errs():
    from flashsim.kernels.sources import KERNELS_DIR

    return fc.RawModule(code=_ERRS, options=(f"--include-path={KERNELS_DIR}",), name="errs.cu")


def test_an_mbarrier_used_before_init_is_a_fault(errs):
    with pytest.raises(SimulatedFault, match=r"mbarrier used before mbarrier.init: cta=0 warp=0 lane=0 .*"
                                             r"mbarrier.arrive on shared 0x"):
        errs.get_function("no_init")((1,), (32,), (fc.zeros((32,), np.int32),))


def test_more_arrivals_than_pending_is_reported(errs):
    with pytest.raises(SimulatedFault, match=r"mbarrier misuse: .*more arrivals than the phase has pending.*"
                                             r"32 arrivals, tx \+0 on an mbarrier in phase 0, 0 of 1 arrivals"):
        errs.get_function("over_arrive")((1,), (32,), (fc.zeros((32,), np.int32),))


def test_a_single_try_wait_times_out_and_a_wait_loop_deadlocks(errs):
    out = fc.zeros((32,), np.int32)
    with pytest.raises(fc.BarrierDeadlock) as info:
        errs.get_function("lone_wait")((1,), (32,), (out,))
    assert (out.get() == 0).all()  # every lane's single try_wait returned false
    msg = str(info.value)
    assert re.search(r"arrivals 1 of 2 \(pending 1; this phase: warp=0 x1 at \S*errs.cu:\d+\)", msg), msg


def test_clusters_of_more_than_one_cta_are_not_modelled(errs):
    with pytest.raises(NotImplementedError, match=r"clusters of 2x1x1 CTAs .*not modelled"):
        errs.get_function("clustered")((2,), (32,), (fc.zeros((64,), np.int32),))


def test_setmaxnreg_inc_with_nothing_released_is_a_deadlock():
    from flashsim.sass.toolchain import compile_cuda

    src = r'''extern "C" __global__ void __launch_bounds__(384, 1) greedy(int* o) {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;" ::: "memory");
        o[threadIdx.x] = 1;
    }'''
    cubin, _, _ = compile_cuda(src, name="greedy.cu", arch="sm_90a")
    f = fc.RawModule(cubin=cubin).get_function("greedy")
    assert f.num_regs == 168  # what ptxas allocates for 384 threads of a kernel using setmaxnreg
    with pytest.raises(fc.BarrierDeadlock, match=r"USETMAXREG.TRY_ALLOC.CTAPOOL UP0, 0xe8.*\n.*setmaxnreg.inc from "
                                                 r"168 to 232 registers per thread: the warp needs 2048 from the "
                                                 r"CTA's pool, which holds 0"):
        f((1,), (384,), (fc.zeros((384,), np.int32),))


def test_explore_checks_its_arguments():
    with pytest.raises(ValueError, match=r"schedules=-1"):
        explore(lambda o: 0, schedules=-1)


# ---------------------------------------------------------------------------------------------- GPU
@gpu
def test_probes_and_pipeline_on_the_gpu(tmp_path):
    rep = V.validate(tmp_path, cases=16, seed=1, seeds=2, record=False, log=lambda *a: None)
    # mbar_word_probe and mbar_many_probe ask what the record of 2026-11-24 left open (generic stores into a
    # live barrier, an inval next to an invalid neighbour, more barriers than any cache of states could hold):
    # a difference there names the rule of flashsim.smem.mbarrier to change. Known, not modelled
    # (MANY_LIVE_NOT_MODELLED): with 1,024 barriers per CTA every live barrier's state is in its bytes on the
    # H100, so exactly the live half of mbar_many_probe's words differs
    many = rep["probes"]["mbar_many_probe"]
    assert many["equal"] or many["mismatches"][0].startswith(f"{many['elements'] // 2} of {many['elements']} "
                                                             "elements differ"), many["mismatches"]
    bad = {n: e["mismatches"][:3] + e.get("reference_mismatches", [])[:5] for n, e in rep["probes"].items()
           if not e["equal"] and n != "mbar_many_probe"}
    assert not bad, bad
