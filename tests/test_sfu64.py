"""gpu/validate_sfu64.py's CPU side (it runs on the GPU machine): the SASS it sweeps is one MUFU.RCP64H / MUFU.RSQ64H
on the high word alone; inputs; the laws; the classification of binades, the record's file round trip and the
reconstruction of every swept output from it, against a numpy stand-in device with known exceptions; the
low-word check; the interpreter running both from the H200's record (flashsim.numerics.sfu64)."""

from __future__ import annotations

import numpy as np
import pytest

from flashsim.gpu import validate_sfu64 as V


class FakeDevice:
    """A numpy stand-in for the GPU: rcp / rsqrt of the high word's double in float64, the result's high word
    truncated, subnormal inputs and results flushed, NaN -> 0x7FFFFFFF; ``broken`` inputs answer one bit off;
    with ``lo_matters`` the source's low word takes part."""

    xp = np

    def __init__(self, broken=(), lo_matters=False):
        self.broken = np.array(sorted(broken), np.uint32)
        self.lo_matters = lo_matters
        self.calls = 0

    def _f(self, op, hi, lo):
        x = hi.astype(np.uint64) << np.uint64(32)
        if self.lo_matters:
            x = x | lo.astype(np.uint64)
        d = x.view(np.float64)
        d = np.where(((hi >> 20) & 0x7FF) == 0, np.copysign(0.0, d), d)
        with np.errstate(all="ignore"):
            r = 1.0 / d if op == "rcp64h" else 1.0 / np.sqrt(d)
        out = (r.view(np.uint64) >> np.uint64(32)).astype(np.uint32)
        out = np.where(((out >> 20) & 0x7FF) == 0, out & np.uint32(0x80000000), out)
        out = np.where(np.isnan(r), np.uint32(0x7FFFFFFF), out)
        return np.where(np.isin(hi, self.broken), out ^ np.uint32(1), out).astype(np.uint32)

    def hi(self, op, start, n, lo=0):
        self.calls += 1
        h = (np.arange(n, dtype=np.uint64) + np.uint64(start)).astype(np.uint32)
        return self._f(op, h, np.full(n, lo, np.uint32))

    def full(self, op, x):
        x = np.asarray(x, np.uint64)
        out = self._f(op, (x >> np.uint64(32)).astype(np.uint32), (x & np.uint64(0xFFFFFFFF)).astype(np.uint32))
        return out.astype(np.uint64) << np.uint64(32)

    def host(self, a):
        return np.asarray(a)


BINADES = [V.binade_id(s, e) for s in (0, 1) for e in (0, 1, 2, 1020, 1021, 1022, 1023, 1024, 1025, 2045, 2046, 2047)]
BROKEN = [V.binade_id(0, 1021) << 20 | 5, V.binade_id(0, 1022) << 20 | 0xFFFFF, V.binade_id(1, 1025) << 20 | 0x777]


def test_the_sweep_kernels_are_one_mufu_on_the_high_word():
    assert V.check_sass() == {k: [] for k in ("sweep_rcp64h", "sweep_rsq64h", "array_rcp64h", "array_rsq64h")}


def test_inputs():
    b = V.binade_id(1, 1023)
    h = V.binade_inputs(b)
    assert h.size == V.BINADE and h[0] == 0xBFF00000 and h[-1] == 0xBFFFFFFF and np.all(np.diff(h) == 1)
    r = V.row_inputs(0x80000)
    assert r.size == V.NBINADES and np.all((r & 0xFFFFF) == 0x80000) and np.array_equal(r >> 20, np.arange(4096))
    s = V.special_inputs()
    assert {0, 0x80000000, 0x7FF00000, 0xFFF00000, 0x7FF80000, 0x3FF00000, 0x000FFFFF} <= set(map(int, s))
    assert np.all(np.diff(s.astype(np.int64)) > 0)


@pytest.mark.parametrize("op", sorted(V.OPS))
def test_the_law_predicts_a_lawful_function(op):
    dev = FakeDevice()
    tables = {f"e{k}": dev.hi(op, V.binade_id(s, e) << 20, V.BINADE) for k, (s, e) in enumerate(V.TABLE_BINADES[op])}
    rng = np.random.default_rng(0)
    hi = rng.integers(0, 1 << 32, 200_000, dtype=np.uint64).astype(np.uint32)
    pred, valid = V.predict(op, hi, tables)
    out = dev._f(op, hi, np.zeros_like(hi))
    assert valid.mean() > 0.4
    assert np.array_equal(pred[valid], out[valid])
    # and a function off the law by one bit somewhere is caught there
    bad = FakeDevice(broken=hi[:50])._f(op, hi, np.zeros_like(hi))
    assert np.sum(valid & (pred != bad)) == np.sum(valid[:50]) > 0


@pytest.mark.parametrize("op", sorted(V.OPS))
def test_record_classify_save_load_reconstruct(op, tmp_path):
    dev = FakeDevice(broken=BROKEN)
    logs = []
    rec = V.analyse(dev, op, binades=BINADES, chunk_binades=4, log=logs.append)
    kind = rec["kind"]
    assert np.sum(kind != V.UNSWEPT) == len(BINADES) and logs and rec["complete"]
    # subnormal inputs are flushed: rcp gives +-Inf, rsq +Inf / -Inf; negative rsq inputs give the NaN
    z = V.binade_id(0, 0)
    assert kind[z] == V.CONSTANT and rec["const"][z] == 0x7FF00000
    if op == "rcp64h":
        assert kind[V.binade_id(1, 0)] == V.CONSTANT and rec["const"][V.binade_id(1, 0)] == 0xFFF00000
        assert kind[V.binade_id(0, 1023)] == V.LAW and kind[V.binade_id(1, 1022)] == V.LAW
        assert kind[V.binade_id(0, 2045)] == V.EXPLICIT  # results below the normal range
    else:
        assert kind[V.binade_id(1, 1023)] == V.CONSTANT and rec["const"][V.binade_id(1, 1023)] == 0x7FFFFFFF
        assert kind[V.binade_id(0, 2)] == V.LAW and kind[V.binade_id(0, 2045)] == V.LAW
    # the broken inputs are found as exceptions of lawful binades or in binades kept whole
    for h in BROKEN:
        b = h >> 20
        assert kind[b] in (V.EXCEPTIONS, V.EXPLICIT, V.CONSTANT) or rec["misses"][b] == 0
        if kind[b] == V.EXCEPTIONS:
            assert h in set(map(int, rec["exceptions_in"]))
    assert V.verify(dev, rec, chunk_binades=3)["mismatches"] == 0
    # the file holds it all
    V.save(tmp_path / "t.npz", [rec], {"test": True})
    back = V.load(tmp_path / "t.npz")[op]
    every = np.concatenate([V.binade_inputs(b) for b in BINADES])
    want = dev._f(op, every, np.zeros_like(every))
    assert np.array_equal(V.reconstruct(back, every), want)
    # checksums of the whole aligned blocks of 2^22 inputs swept: binades 1020-1023 of each sign
    assert back["checksums"] == rec["checksums"] and sorted(rec["checksums"]) == [255, 767]
    for blk in (255, 767):
        assert rec["checksums"][blk] == V.checksum(dev.hi(op, blk * V.CHECK_BLOCK, V.CHECK_BLOCK), blk * V.CHECK_BLOCK)
    assert set(back["evidence"]) == {V.binade_id(s, e) for s, e in V.EVIDENCE_BINADES}
    for m, row in back["rows"].items():
        r = V.row_inputs(m)
        assert np.array_equal(row, dev._f(op, r, np.zeros_like(r)))
    # a reconstruction that ignores the exceptions is caught by verify
    bare = dict(rec, exceptions_in=np.zeros(0, np.uint32), exceptions_out=np.zeros(0, np.uint32))
    n_exc = rec["exceptions_in"].size
    assert V.verify(dev, bare, chunk_binades=3)["mismatches"] == n_exc
    assert n_exc >= (1 if op == "rsq64h" else 2)


def test_the_checksum_is_position_weighted():
    a = np.arange(100, dtype=np.uint32)
    assert V.checksum(a, 0) != V.checksum(a[::-1].copy(), 0) and V.checksum(a, 0) != V.checksum(a, 1)
    assert V.checksum(a, 0) == V.checksum(a.copy(), 0)


@pytest.mark.parametrize("op", sorted(V.OPS))
def test_the_low_word_check(op):
    rng = np.random.default_rng(1)
    clean = V.low_word_check(FakeDevice(), op, rng, n=2000)
    assert clean["inputs"] == 2000 + V.special_inputs().size and clean["result_low_word_nonzero"] == 0
    assert set(clean["differ_with_low_word"].values()) == {0}
    dirty = V.low_word_check(FakeDevice(lo_matters=True), op, np.random.default_rng(1), n=2000)
    assert sum(dirty["differ_with_low_word"].values()) > 0


def test_the_interpreter_runs_both_from_the_h200_record():
    import flashsim.cuda as fc
    from flashsim.numerics import sfu64

    mod = V.module()
    hi = np.concatenate([V.special_inputs(), np.random.default_rng(3).integers(0, 2**32, 4000, dtype=np.uint64)
                         .astype(np.uint32)])
    n = hi.size
    for op in V.OPS:
        x = fc.asarray((hi.astype(np.uint64) << np.uint64(32)) | np.uint64(0x9E3779B9))  # the low word ignored
        out = fc.zeros(n, np.uint64)
        mod.get_function(f"array_{op}")(((n + 127) // 128,), (128,), (x, out, np.uint64(n)))
        got = out.get()
        np.testing.assert_array_equal((got >> np.uint64(32)).astype(np.uint32), sfu64.mufu64h(op, hi))
        assert not (got & np.uint64(0xFFFFFFFF)).any()


def test_the_command_end_to_end_on_a_stand_in(tmp_path):
    import json

    dev = FakeDevice(broken=BROKEN)
    spec = "0x3fc-0x401,0xbfe-0xc01,0x0-0x1,0x7fe-0x7ff"
    assert V.main(["--out", str(tmp_path), "--binades", spec], device=dev) == 0
    rep = json.loads((tmp_path / "sfu64_report.json").read_text())
    assert [r["instruction"] for r in rep["results"]] == ["MUFU.RCP64H", "MUFU.RSQ64H"]
    for r in rep["results"]:
        assert r["verified"]["mismatches"] == 0 and r["complete"]
        assert r["verified"]["inputs"] == len(V.parse_binades(spec)) * V.BINADE
        assert set(r["low_word"]["differ_with_low_word"].values()) == {0}
    recs = V.load(tmp_path / "sfu64_tables.npz")
    every = np.concatenate([V.binade_inputs(b) for b in V.parse_binades(spec)])
    for op, rec in recs.items():
        assert np.array_equal(V.reconstruct(rec, every), dev._f(op, every, np.zeros_like(every)))
    with pytest.raises(ValueError):
        V.parse_binades("0xfff-0x1000")
