"""The differential fuzzer (flashsim.fuzz, flashsim.gpu.fuzz): its programs compile with both compilers and
are defined (the interpreter, which refuses undefined shuffles, runs them), a planted interpreter bug is
found and shrunk to a small program, and the H100 campaigns' corpora (traces/fuzz) replay bit-identically:
a sample of every campaign's programs and every shrunk regression. Under --gpu a fresh campaign runs."""

from __future__ import annotations

import importlib.util
import json
import lzma
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from flashsim import fuzz as fz

TRACES = Path(__file__).resolve().parents[1] / "traces" / "fuzz"
HAVE_TRITON = importlib.util.find_spec("triton") is not None
BUILDS = [b for b in fz.BUILDS if b != "ptxas128" or HAVE_TRITON]


@pytest.fixture(scope="module")
def programs():
    return fz.draw_programs(24, 20261202)


def test_programs_are_drawn_deterministically(programs):
    again = fz.draw_programs(24, 20261202)
    assert again == programs and len(programs) == 24
    assert len({json.dumps(p, sort_keys=True) for p in programs}) == len(programs)
    kinds = {s[0] for p in programs for s in p["body"]}
    assert {"set", "if", "warp"} <= kinds


@pytest.mark.parametrize("which", BUILDS)
def test_programs_compile_and_run_defined(programs, which):
    batch = fz.compile_batch(programs, which)
    outs = fz.run_interp(batch)
    ran = [o for o in outs if o.out is not None]
    errors = [o.error for o in outs if o.error]
    assert not errors, errors[:3]  # an undefined shuffle or a fault would be the generator's bug
    assert len(ran) >= len(programs) // 4
    for o, p in zip(outs, programs):
        if o.out is not None:
            n = p["grid"] * p["block"] * fz.NV
            assert not (o.out[:n] == fz.SENTINEL).all(), "every thread writes its values"


def test_masks_follow_the_executing_lanes():
    # a data-dependent branch: the collectives inside use the ballot of the branch, the else side its complement
    prog = {"v": fz.GENERATOR_VERSION, "block": 64, "grid": 1, "s": [5, 9], "seed": 3,
            "body": [["if", "data", ["v", 0], [["warp", "redux_add", 1, ["k", 1], ["k", 0], 0, 32]],
                      [["warp", "ballot", 2, ["k", 1], ["k", 0], 0, 32]]],
                     ["ret", ["v", 3]],
                     ["warp", "shfl_xor", 4, ["lane"], ["k", 0], 1, 32]]}
    src = fz.render(prog)
    assert "__ballot_sync(m0, c" in src and "__reduce_add_sync(t" in src and "(m0 & ~t" in src
    assert "m0 = __ballot_sync(m0, !r" in src
    # after an early return the lanes are no longer known statically: xor becomes a pick among the survivors
    assert "__shfl_xor_sync" not in src and "__fns(m0" in src
    batch = fz.compile_batch([prog], "nvrtc13")
    (o,) = fz.run_interp(batch)
    table, _, _ = fz.inputs(prog)
    out = o.out[:64 * fz.NV].reshape(64, fz.NV)
    for w in range(2):
        lanes = np.arange(32 * w, 32 * w + 32)
        taken = (table[lanes * fz.NV] & 1) != 0
        ballot = sum(1 << int(k) for k in np.flatnonzero(~taken))
        # taken lanes add their warp's count of taken lanes; the others xor the ballot of the not-taken lanes
        assert np.array_equal(out[lanes[taken], 1], table[lanes[taken] * fz.NV + 1] ^ np.uint32(taken.sum()))
        assert np.array_equal(out[lanes[~taken], 2], table[lanes[~taken] * fz.NV + 2] ^ np.uint32(ballot))


def test_static_masks_prove_shuffles():
    full = 0xFFFFFFFF
    assert fz._shfl_ok("xor", 1, 32, full)
    assert not fz._shfl_ok("xor", 1, 32, 0x55555555)  # odd lanes are not in the set
    assert fz._shfl_ok("xor", 4, 32, 0x33333333) and not fz._shfl_ok("xor", 2, 32, 0x33333333)
    assert fz._shfl_ok("up", 3, 8, 0x0000FFFF)  # lanes below delta in a segment keep their own value
    assert not fz._shfl_ok("down", 1, 32, 0x0000FFFF)  # lane 15 reads lane 16
    assert fz._shfl_ok("down", 1, 16, 0x0000FFFF)


def test_bad_programs_are_refused():
    with pytest.raises(ValueError, match="block"):
        fz.render({"block": 33, "grid": 1, "body": []})
    with pytest.raises(ValueError, match="statement"):
        fz.render({"block": 32, "grid": 1, "s": [0, 0], "seed": 0, "body": [["jump"]]})
    with pytest.raises(ValueError, match="which"):
        fz.build("", "clang")


@contextmanager
def _planted_brev_bug():
    """BREV's top bit flipped for inputs with bit 0 set, in this process only (the workers stay correct)."""
    from flashsim.sass import opcodes  # noqa: F401 - registers the semantics
    from flashsim.sass.program import SEMANTICS

    factory, family = SEMANTICS["BREV"]

    def planted(ctx):
        run = factory(ctx)
        src = ctx.raw(1)
        wd = ctx.dst(0)

        def wrong(m, ex):
            a = np.asarray(src(m), np.uint32).copy()
            run(m, ex)
            bad = (a & np.uint32(1)) == 1
            if bad.any():
                cur = np.asarray(m.R[ctx.ops[0].index]).copy()
                wd(m, np.where(bad, cur ^ np.uint32(0x80000000), cur).astype(np.uint32), ex)
        return wrong

    SEMANTICS["BREV"] = (planted, family)
    try:
        yield
    finally:
        SEMANTICS["BREV"] = (factory, family)


def _fake_gpu(cubin, progs, names):
    with _planted_brev_bug():
        outs = fz.run_interp(fz.Batch(list(progs), "planted", cubin))
    # a planted bug may also send a shuffle to a lane outside its mask: the "GPU" then gives zeros
    return [[o.out, o.out.copy()] if o.out is not None else [np.zeros(1, np.uint32)] * 2 for o in outs]


def test_a_planted_bug_is_found_and_shrunk(tmp_path):
    from flashsim.gpu import fuzz as gf

    rep = gf.campaign(60, 11, builds=["nvrtc13"], workers=2, per=30, gpu=_fake_gpu, shrink_seconds=300,
                      shrink_budget=250, corpus=tmp_path / "c.jsonl.xz", log=lambda *_: None)
    assert rep["differences"], "programs with __brev of odd values must differ"
    s = rep["shrunk"][0]
    assert s["first"] is not None  # the shrunk program still differs
    assert fz._size(s["prog"]["body"]) < fz._size(rep["differences"][0]["prog"]["body"])
    assert any(f in s["source"] for f in ("__brev", "__fns", "__ffs"))  # __fns and __ffs compile to BREV, FLO
    gf.write_report({**rep, "provenance": {"name": "test"}}, tmp_path)
    assert (tmp_path / "fuzz_report.md").read_text().count("```cuda") == len(rep["shrunk"])
    with lzma.open(tmp_path / "c.jsonl.xz", "rt") as fh:
        rows = [json.loads(line) for line in fh]
    assert len([r for r in rows if "nvrtc13" in r["gpu"]]) == rep["stats"]["nvrtc13"]["compared"]
    n_sample, n_only = gf.write_samples(tmp_path / "c.jsonl.xz", rep, tmp_path, every=1)
    assert n_sample == rep["stats"]["nvrtc13"]["compared"] - len([d for d in rep["differences"]
                                                                 if d["build"] == "nvrtc13"])
    assert n_only == len([r for r in rows if r["gpu_only"]])


# ---------------------------------------------------------------------------------------------- record, replay
def _interp_gpu(cubin, progs, names):
    """A "GPU" that is the interpreter: a record of it replays without a difference."""
    outs = fz.run_interp(fz.Batch(list(progs), "gpu", cubin))
    return [[o.out, o.out.copy()] if o.out is not None else [np.zeros(1, np.uint32)] * 2 for o in outs]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    from flashsim.gpu import fuzz as gf

    out = tmp_path_factory.mktemp("record")
    meta = gf.record(12, 5, out, builds=BUILDS, workers=2, per=4, gpu=_interp_gpu, provenance={"name": "fake GPU"},
                     log=lambda *_: None)
    return out, meta


def _run(*argv):
    from flashsim.gpu import fuzz as gf

    return gf.main([str(a) for a in argv])


def _report(d):
    return json.loads((d / "fuzz_report.json").read_text())


def _rows(path):
    with lzma.open(path, "rt") as fh:
        return [json.loads(line) for line in fh]


@pytest.fixture(scope="module")
def replayed(recorded, tmp_path_factory):
    rec, _ = recorded
    out = tmp_path_factory.mktemp("replay")
    assert _run("--replay", rec, "--out", out, "--workers", 2) == 0
    return out


def test_a_record_keeps_digests_not_programs(recorded):
    rec, meta = recorded
    assert meta["chunks_done"] == 3 and meta["programs"] == 12 and meta["per_chunk"] == 4 and meta["seed"] == 5
    assert json.loads((rec / "record_meta.json").read_text()) == json.loads(json.dumps(meta))
    rows = _rows(rec / "record.jsonl.xz")
    assert [r["chunk"] for r in rows] == [0, 1, 2]
    for r in rows:
        assert set(r["builds"]) == set(BUILDS)
        for b in r["builds"].values():
            assert set(b) == {"sha256", "gpu", "compile_errors"} and len(b["sha256"]) == 64
            assert len(b["gpu"]) == 4 and all(len(d) == 32 for d in b["gpu"])
    assert sum(s["recorded"] for s in meta["stats"].values()) == 12 * len(BUILDS)


def test_a_replay_of_a_record_finds_no_difference(recorded, replayed):
    rec, meta = recorded
    rep = _report(replayed)
    # the record names its generator even where the caller's provenance does not (a replay draws with it)
    assert rep["provenance"] == {"name": "fake GPU", "generator_version": fz.GENERATOR_VERSION}
    assert rep["replay"]["record"] == str(rec)
    assert rep["replay"]["chunks"] == [[0, 3]] and rep["replay"]["build_differs"] == []
    assert "flashsim" in rep["replay"]["host"]
    assert not rep["differences"] and not rep["shrunk"] and rep["programs"] == 12
    for w, st in rep["stats"].items():
        assert st["equal"] == st["compared"] > 0 and st["build_differs"] == 0
        assert st["compared"] + st["refused"] + st["interp_errors"] == meta["stats"][w]["recorded"]
    assert "a replay of its record" in (replayed / "fuzz_report.md").read_text()
    for name in ("corpus.jsonl.xz", "sample.jsonl.xz", "gpu_only.jsonl.xz", "regressions.json"):
        assert (replayed / name).is_file(), name
    corpus = _rows(replayed / "corpus.jsonl.xz")
    assert sum(len(r["gpu"]) for r in corpus) == sum(st["compared"] for st in rep["stats"].values())


@pytest.fixture(scope="module")
def split(recorded, tmp_path_factory):
    rec, _ = recorded
    parts = [tmp_path_factory.mktemp("part0"), tmp_path_factory.mktemp("part1")]
    assert _run("--replay", rec, "--out", parts[0], "--workers", 2, "--chunks", "0:1") == 0
    assert _run("--replay", rec, "--out", parts[1], "--workers", 2, "--chunks", "1:") == 0
    return parts


def test_split_replays_merge_into_the_whole(replayed, split, tmp_path):
    assert _report(split[0])["replay"]["chunks"] == [[0, 1]] and _report(split[1])["replay"]["chunks"] == [[1, 3]]
    assert _run("--merge", split[1], split[0], "--out", tmp_path / "m") == 0
    whole, merged = _report(replayed), _report(tmp_path / "m")
    for key in ("programs", "chunks_done", "stats", "forms", "refusals", "error_counts", "differences", "errors"):
        assert merged[key] == whole[key], key
    assert merged["replay"]["chunks"] == [[0, 3]] and merged["provenance"] == whole["provenance"]
    assert merged["replay"]["merged_from"] == [str(split[0]), str(split[1])]
    for name in ("corpus.jsonl.xz", "sample.jsonl.xz", "gpu_only.jsonl.xz"):
        assert _rows(tmp_path / "m" / name) == _rows(replayed / name), name
    # a chunk in two reports is refused
    with pytest.raises(ValueError, match="chunk 0 is also in"):
        from flashsim.gpu import fuzz as gf
        gf.merge([split[0], split[0]], tmp_path / "m2", log=lambda *_: None)


def test_a_tampered_record_gives_one_difference_and_a_build_that_differs(recorded, split, tmp_path):
    from flashsim.gpu import fuzz as gf

    rec, _ = recorded
    part = _report(split[1])  # chunks 1 and 2, untampered
    corpus = _rows(split[1] / "corpus.jsonl.xz")
    (chunk, i, which), = [(r["chunk"], r["i"], w) for r in corpus if r["chunk"] == 1 for w in r["gpu"]][:1]
    other = BUILDS[-1]
    rows = _rows(rec / "record.jsonl.xz")
    rows[chunk]["builds"][which]["gpu"][i] = "0" * 32
    rows[2]["builds"][other]["sha256"] = "f" * 64
    (tmp_path / "rec").mkdir()
    (tmp_path / "rec" / "record_meta.json").write_text((rec / "record_meta.json").read_text())
    with lzma.open(tmp_path / "rec" / "record.jsonl.xz", "wt") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)
    logs = []
    rep = gf.replay(tmp_path / "rec", chunks=(1, None), workers=2, log=logs.append)
    assert [(d["chunk"], d["i"], d["build"]) for d in rep["differences"]] == [(chunk, i, which)]
    assert rep["differences"][0]["first"]["gpu"] == "0" * 32
    assert any(f"DIFFERENCE chunk {chunk} program {i} ({which})" in m for m in logs), logs
    assert [(d["chunk"], d["build"]) for d in rep["replay"]["build_differs"]] == [(2, other)]
    assert any(f"BUILD DIFFERS chunk 2 ({other})" in m for m in logs), logs
    st, was = rep["stats"][other], part["stats"][other]
    chunk2 = sum(1 for r in corpus if r["chunk"] == 2 and other in r["gpu"])
    assert st["build_differs"] == 4 and st["compared"] == was["compared"] - chunk2
    assert rep["stats"][which]["equal"] == part["stats"][which]["equal"] - 1 - (chunk2 if which == other else 0)


def test_a_record_cut_short_keeps_its_whole_streams(tmp_path):
    from flashsim.gpu import fuzz as gf

    (tmp_path / "record_meta.json").write_text(json.dumps({"record": 1, "chunks_done": 2}))
    with lzma.open(tmp_path / "record.jsonl.xz", "wt") as fh:
        fh.write(json.dumps({"chunk": 0, "builds": {}}) + "\n")
    first = (tmp_path / "record.jsonl.xz").stat().st_size
    with lzma.open(tmp_path / "record.jsonl.xz", "at") as fh:  # the next rows: one more xz stream
        fh.write(json.dumps({"chunk": 1, "builds": {}}) + "\n" + json.dumps({"chunk": 2, "builds": {}}) + "\n")
    data = (tmp_path / "record.jsonl.xz").read_bytes()
    assert sorted(gf.read_record(tmp_path)[1]) == [0, 1, 2]
    (tmp_path / "record.jsonl.xz").write_bytes(data[:first + 16])  # killed while writing the second stream
    assert sorted(gf.read_record(tmp_path)[1]) == [0]


@pytest.mark.parametrize("argv, words", [
    (["--record", "--replay", "{rec}"], ["--replay", "not allowed with", "--record"]),
    (["--replay", "{tmp}"], ["--replay", "record.jsonl.xz"]),
    (["--replay", "{rec}", "--chunks", "1-2"], ["--chunks", "'1-2'"]),
    (["--replay", "{rec}", "--chunks", "2:1"], ["--chunks", "A < B"]),
    (["--replay", "{rec}", "--chunks", "5:9"], ["--chunks", "no chunk", "0:3"]),
    (["--replay", "{rec}", "--seed", "3"], ["--seed", "--replay"]),
    (["--replay", "{rec}", "--builds", "clang"], ["--builds", "clang"]),
    (["--chunks", "0:1"], ["--chunks", "a campaign"]),
    (["--record", "--shrink-seconds", "5"], ["--shrink-seconds", "--record"]),
    (["--merge", "{tmp}"], ["--merge", "fuzz_report.json"]),
    (["--merge", "{rec}", "--workers", "2"], ["--workers", "--merge"]),
])
def test_the_cli_refuses_bad_combinations(recorded, tmp_path, capsys, argv, words):
    rec, _ = recorded
    argv = [a.format(rec=rec, tmp=tmp_path) for a in argv] + ["--out", str(tmp_path / "out")]
    with pytest.raises(SystemExit) as e:
        _run(*argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert all(w in err for w in words), err
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------------- the H100
def _campaigns():
    return sorted(p for p in TRACES.rglob("fuzz_report.json"))  # a campaign, or the replays of its record


def test_the_h100_campaigns_found_no_difference():
    reps = _campaigns()
    if not reps:
        pytest.skip("no H100 campaign recorded under traces/fuzz yet (python -m flashsim.gpu.fuzz)")
    for path in reps:
        rep = json.loads(path.read_text())
        assert rep["provenance"]["compute_capability"] == "9.0", path
        campaign = path.relative_to(TRACES).parts[0]
        listed = {(o["campaign"], o["chunk"], o["i"], b) for o in _open_differences() for b in o["builds"]}
        open_diffs = [d for d in rep["differences"] if not d.get("fixed_by")
                      and (campaign, d["chunk"], d["i"], d["build"]) not in listed]
        assert not open_diffs, (path, open_diffs[:2])


def _open_differences() -> list[dict]:
    """The differences found by a replay (no GPU at hand to shrink them) and not explained yet."""
    path = TRACES / "open_differences.json"
    return json.loads(path.read_text()) if path.exists() else []


def _digests(prog: dict, which: str) -> str:
    (o,) = fz.run_interp(fz.compile_batch([prog], which))
    assert o.out is not None, o.refused or o.error
    return fz.digest(o.out)


@pytest.mark.parametrize("which", BUILDS)
def test_open_differences_still_give_the_interpreters_recorded_answer(which):
    # an open difference stays listed until it is explained: when the interpreter's answer changes (a fix,
    # or another bug), this fails, and the entry goes (fixed_by in its report) or is looked at again
    from flashsim.gpu import fuzz as gf

    opened = [o for o in _open_differences() if which in o["builds"]]
    if not opened:
        pytest.skip("no open difference recorded")
    for o in opened:
        prog = gf.chunk_programs(o["seed"], o["chunk"], version=o["version"])[o["i"]]
        b, where = o["builds"][which], (o["campaign"], o["chunk"], o["i"])
        (run,) = fz.run_interp(fz.compile_batch([prog], which))
        if o["kind"] == "interpreter error":  # the GPU answered; the interpreter stops (the generator's bug or its)
            assert run.error and run.error.startswith(b["error"]), (where, run.error or "it runs now")
            continue
        assert run.out is not None, (where, run.refused or run.error)
        got = fz.digest(run.out)
        assert got != b["gpu"], f"{where} now gives the GPU's bits: fixed"
        assert got == b["interp"], (where, got)


@pytest.mark.parametrize("which", BUILDS)
def test_fixed_differences_give_the_gpus_digest(which):
    fixed = [(p, d) for p in _campaigns() for d in json.loads(p.read_text())["differences"]
             if d.get("fixed_by") and d["build"] == which]
    if not fixed:
        pytest.skip("no fixed difference recorded")
    for path, d in fixed:
        assert _digests(d["prog"], which) == d["first"]["gpu"], (path, d["chunk"], d["i"], d["fixed_by"])


def _sample_rows():
    rows = []
    for path in sorted(TRACES.rglob("sample.jsonl.xz")):
        with lzma.open(path, "rt") as fh:
            rows += [json.loads(line) for line in fh]
    return rows


@pytest.mark.parametrize("which", BUILDS)
def test_recorded_programs_replay_bit_identically(which):
    rows = [r for r in _sample_rows() if which in r["gpu"]]
    if not rows:
        pytest.skip("no recorded sample for this build under traces/fuzz")
    bad = []
    for part in _batches(rows):
        outs = fz.run_interp(fz.compile_batch([r["prog"] for r in part], which))
        for r, o in zip(part, outs):
            if o.out is None or fz.digest(o.out) != r["gpu"][which]:
                bad.append((r["chunk"], r["i"], o.refused or o.error))
    assert not bad, bad[:5]


def _batches(rows, size: int = 40):
    """Rows in modules of up to ``size`` programs of one generator version (each version its own helpers)."""
    by_version: dict[int, list] = {}
    for r in rows:
        by_version.setdefault(int(r["prog"].get("v", 1)), []).append(r)
    for part in by_version.values():
        for k in range(0, len(part), size):
            yield part[k:k + size]


@pytest.mark.parametrize("which", BUILDS)
def test_programs_the_gpu_answered_alone_match_once_they_run(which):
    # the H200's outputs of programs the interpreter refused (or failed on) when the campaign ran: a form
    # modelled since then must reproduce them; one still refused is counted, not failed
    opened = {(o["campaign"], o["chunk"], o["i"]) for o in _open_differences() if o["kind"] == "interpreter error"}
    rows = []
    for path in sorted(TRACES.rglob("gpu_only.jsonl.xz")):
        campaign = path.relative_to(TRACES).parts[0]
        with lzma.open(path, "rt") as fh:  # (the open ones: test_open_differences_still_...)
            rows += [r for r in map(json.loads, fh)
                     if which in r["gpu_only"] and (campaign, r["chunk"], r["i"]) not in opened]
    if not rows:
        pytest.skip("no program answered by the GPU alone is recorded under traces/fuzz")
    bad = []
    for part in _batches(rows):
        for r, o in zip(part, fz.run_interp(fz.compile_batch([r["prog"] for r in part], which))):
            if o.refused:
                continue
            if o.out is None or fz.digest(o.out) != r["gpu_only"][which]:
                bad.append((r["chunk"], r["i"], o.error or "differs"))
    assert not bad, bad[:5]


# programs of campaign h200_seed3 whose WARPSYNC.EXCLUSIVE is not followed by straight-line code up to a BSYNC
# (a BSSY and a slow-path call, a BRA, a BRA.DIV): refused when the campaign ran, the H200's digests recorded
EXCLUSIVE_HOLDS = [(18, 15), (28, 12), (28, 14), (41, 15), (45, 16)]


def _gpu_only(keys):
    with lzma.open(TRACES / "h200_seed3" / "gpu_only.jsonl.xz", "rt") as fh:
        rows = {(r["chunk"], r["i"]): r for r in map(json.loads, fh)}
    return [rows[k] for k in keys]


@pytest.mark.parametrize("which", BUILDS)
def test_an_exclusive_warpsync_holding_its_warp_gives_the_gpus_bits(which):
    rows = _gpu_only(EXCLUSIVE_HOLDS)
    for part in _batches(rows):
        for r, o in zip(part, fz.run_interp(fz.compile_batch([r["prog"] for r in part], which))):
            assert o.out is not None, (r["chunk"], r["i"], o.refused or o.error)
            assert fz.digest(o.out) == r["gpu_only"][which], (r["chunk"], r["i"])
            assert any(f.startswith("WARPSYNC.EXCLUSIVE") for f in o.forms), o.forms


def test_an_exclusive_hold_past_its_limit_is_refused(monkeypatch):
    from flashsim.sass import machine

    monkeypatch.setattr(machine, "EXCLUSIVE_STEPS", 2)
    (o,) = fz.run_interp(fz.compile_batch([_gpu_only([(28, 12)])[0]["prog"]], "nvrtc13"))
    assert o.out is None and o.refused, o.error
    assert "alone in their warp after" in o.refused and "WARPSYNC.EXCLUSIVE" in o.refused, o.refused
    assert "cta=0 warp=" in o.refused and "is not modelled" in o.refused, o.refused


def test_shrunk_regressions_replay():
    regs = []
    for path in sorted(TRACES.glob("*/regressions.json")):
        regs += json.loads(path.read_text())
    if not regs:
        pytest.skip("no shrunk regression recorded under traces/fuzz")
    for r in regs:
        if r["build"] not in BUILDS:
            continue
        (o,) = fz.run_interp(fz.compile_batch([r["prog"]], r["build"]))
        assert o.out is not None, o.refused or o.error
        assert [int(x) for x in o.out] == r["gpu_out"], r["source"]


@pytest.mark.gpu
def test_a_fresh_campaign_on_the_gpu(tmp_path):
    import os
    import time

    from flashsim.gpu import fuzz as gf

    seed = int(time.time()) % 100_000
    rep = gf.campaign(80, seed, builds=BUILDS, workers=min(4, os.cpu_count() or 1), per=20,
                      corpus=tmp_path / "c.jsonl.xz", log=lambda *_: None)
    assert sum(s["compared"] for s in rep["stats"].values()) > 0
    assert not rep["differences"], (seed, rep["shrunk"][:1])
    assert not rep["errors"], (seed, rep["errors"][:1])


@pytest.mark.gpu
def test_a_gpu_record_replays_without_a_difference(tmp_path):
    import os
    import time

    from flashsim.gpu import fuzz as gf

    seed = int(time.time()) % 100_000
    meta = gf.record(40, seed, tmp_path / "rec", builds=BUILDS, workers=min(4, os.cpu_count() or 1), per=20,
                     log=lambda *_: None)
    assert meta["chunks_done"] == 2
    rep = gf.replay(tmp_path / "rec", workers=min(4, os.cpu_count() or 1), log=lambda *_: None)
    assert sum(s["compared"] for s in rep["stats"].values()) > 0 and not rep["replay"]["build_differs"]
    assert not rep["differences"], (seed, rep["differences"][:1])


def test_an_indexed_constant_load_faults_only_where_it_executes():
    # found by the fuzzer: lanes that left the loop held unmasked indices, and LDC c[0x3][R] faulted on them
    prog = {"v": 1, "block": 32, "grid": 1, "s": [54, 9], "seed": 13083,
            "body": [["loop", 1, ["v", 1], [["warp", "shfl_down", 4, ["ldc", ["v", 2]], ["k", 0], 3, 32]]]]}
    (o,) = fz.run_interp(fz.compile_batch([prog], "nvrtc13"))
    assert o.error is None and o.refused is None and o.out is not None
    assert "LDC" in o.forms


def test_programs_whose_outputs_the_program_leaves_open_are_told_apart():
    """Two H200 record rows of campaign seed 4 (generator version 2) that differed from the interpreter in both
    builds: one leaves the order of atomicMin and atomicAdd on one global word open (shrunk on the H200 to a
    program where only that word differs), the other's SASS reads the high half of a pointer register (ptxas's
    PRMT before VIMNMX.U16x2), so its outputs move with the arrays' addresses."""
    from flashsim.gpu import fuzz as gf

    mixed = gf.chunk_programs(4, 120, version=2)[19]
    assert "atomicAdd, atomicMin" in fz.order_dependent(mixed)
    assert fz.order_dependent({**mixed, "v": 3}) is None
    src = fz.render({**mixed, "v": 3}, "x")
    assert "atomicMin(&out[gacc + 12u + (" in src and "atomicAdd(&out[gacc + 0u + (" in src
    moves = gf.chunk_programs(4, 182, version=2)[8]
    assert fz.order_dependent(moves) is None
    assert fz.address_dependent(moves, "nvrtc13")
    assert not fz.address_dependent(gf.chunk_programs(4, 182, version=2)[3], "nvrtc13")
    assert all(p["v"] == fz.GENERATOR_VERSION for p in gf.chunk_programs(4, 0, per=2))


def _seed4_regression(build: str) -> dict:
    regs = json.loads((TRACES / "h200_seed4" / "regressions.json").read_text())
    return next(r for r in regs if r["build"] == build)


@pytest.mark.parametrize("which", BUILDS)
def test_a_diverged_warp_keeps_its_path_through_straight_line_code(which, monkeypatch):
    # campaign seed 4, chunk 406, program 16 (shrunk on the H200): on one path ULDC UR4 then FRND R15, UR4,
    # on the other REDUX.MIN UR4. Another path of the warp runs only after control flow, a barrier or a wait,
    # so the uniform register holds, under every schedule seed; switching paths in between (as the scheduler
    # did when a lane waited too long) gives 0 where the H200 gives the canonical NaN
    import flashsim.cuda as fc
    from flashsim.sass import program as sp

    r = _seed4_regression(which)
    batch = fz.compile_batch([r["prog"]], which)
    table, out0, (s0, s1) = fz.inputs(r["prog"])

    def run(**opts):
        f = fc.RawModule(cubin=batch.cubin).get_function(batch.names[0])
        d_out = fc.asarray(out0)
        f((int(r["prog"]["grid"]),), (int(r["prog"]["block"]),), (fc.asarray(table), d_out, np.uint32(s0),
          np.uint32(s1)), exec_options=fc.ExecOptions(**opts))
        return [int(x) for x in d_out.get()]

    for opts in ({}, {"schedule_seed": 1}, {"schedule_seed": 2}, {"starve_steps": 1}):
        assert run(**opts) == r["gpu_out"], opts
    # a switch allowed after every instruction, any group first: a lane that waited a step runs next
    from flashsim.sass import machine as M

    monkeypatch.setattr(sp, "straight_line", lambda ins: False)
    monkeypatch.setattr(M.Machine, "_fewest_gate", lambda self, run: run)
    assert run(starve_steps=1) != r["gpu_out"]


def test_an_operand_selector_no_semantic_reads_is_refused(monkeypatch):
    # seed 6, chunk 253, program 18: R2P PR, R0.B1, 0x11. A semantic that ignores the byte selector (R2P as it
    # was) is refused with the instruction's PC, SASS and line, instead of reading the plain register
    from flashsim.gpu import fuzz as gf
    from flashsim.sass import opcodes  # noqa: F401  (registers every semantic)
    from flashsim.sass import program as sp
    from flashsim.sass.machine import lanes_of

    family = sp.SEMANTICS["R2P"][1]

    def r2p_without_selector(ctx):
        ops = ctx.ops
        mask, ra = ops[2].value & 0x7F, ctx.u32(1)

        def run(m, ex):
            a = np.broadcast_to(np.asarray(ra(m), np.uint32), m.st.shape)
            for i in range(7):
                if (mask >> i) & 1:
                    np.copyto(m.P[i], ((a >> np.uint32(i)) & np.uint32(1)) != 0, where=lanes_of(m, ex))
        return run

    monkeypatch.setitem(sp.SEMANTICS, "R2P", (r2p_without_selector, family))
    (o,) = fz.run_interp(fz.compile_batch([gf.chunk_programs(6, 253)[18]], "nvrtc13"))
    assert o.out is None and o.refused, o.error
    assert "the operand selector R0.B1 of R2P is not modelled" in o.refused and "pc=0x" in o.refused, o.refused
