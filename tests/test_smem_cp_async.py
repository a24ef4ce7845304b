"""The cp.async (LDGSTS) counting rule of flashsim.smem against what Nsight Compute's per-instruction counters
gave on the H100 for the patterns of gpu/kernels/probe_ldgsts.cu (traces/sass/ncu_source/raw/probe_ldgsts*.csv.gz;
the whole record is replayed through the interpreter by tests/test_ncu_source.py), and its invariants."""

from __future__ import annotations

import numpy as np
import pytest

from flashsim.errors import ArgumentError
from flashsim.smem import PHASES, SM90, SharedMemory, cp_async_table, cp_async_wavefronts, wavefronts
from flashsim.warp import cp_async

L = np.arange(32, dtype=np.int64)
S16 = 16 * L  # the source every probe used: 16 bytes per lane, consecutive lanes adjacent

# (probe, width, cg, destination, source, lanes on, lanes reading, zfill) -> (wavefronts, ideal) on the H100
MEASURED = [
    ("cg16_stride16", 16, True, L * 16, S16, None, None, False, (4, 4)),
    ("cg16_stride32", 16, True, L * 32, S16, None, None, False, (32, 4)),
    ("cg16_stride64", 16, True, L * 64, S16, None, None, False, (32, 4)),
    ("cg16_one_dst", 16, True, 0 * L, S16, None, None, False, (1, 1)),
    ("cg16_pairs", 16, True, (L // 2) * 16, S16, None, None, False, (16, 2)),
    ("cg16_pairs_across_quarters", 16, True, (L % 8) * 16 + (L // 16) * 128, S16, None, None, False, (2, 2)),
    ("cg16_lane1_on_lane0", 16, True, np.where(L == 1, 0, L * 16), S16, None, None, False, (5, 4)),
    ("cg16_lane1_on_lane8", 16, True, np.where(L == 1, 128, L * 16), S16, None, None, False, (7, 4)),
    ("cg16_lane7_on_lane6", 16, True, np.where(L == 7, 96, L * 16), S16, None, None, False, (5, 4)),
    ("cg16_shift64", 16, True, 64 + L * 16, S16, None, None, False, (8, 4)),
    ("cg16_reversed", 16, True, (31 - L) * 16, S16, None, None, False, (4, 4)),
    ("cg16_xor_swizzle", 16, True, (L // 8) * 128 + ((L % 8) ^ (L // 8)) * 16, S16, None, None, False, (4, 4)),
    ("cg16_lines_interleaved", 16, True, (L % 4) * 128 + (L // 4) * 16, S16, None, None, False, (32, 4)),
    ("cg16_halves_interleaved", 16, True, (L % 16) * 32 + (L // 16) * 16, S16, None, None, False, (32, 4)),
    ("cg16_two_sectors_per_line", 16, True, (L // 4) * 128 + (L % 4) * 16, S16, None, None, False, (8, 4)),
    ("cg16_one_sector_per_line", 16, True, (L // 2) * 128 + (L % 2) * 16, S16, None, None, False, (16, 4)),
    ("cg16_stride16_src_stride128", 16, True, L * 16, L * 128, None, None, False, (32, 4)),
    ("cg16_stride16_src_one", 16, True, L * 16, 0 * L, None, None, False, (32, 4)),
    ("cg16_stride16_src_reversed", 16, True, L * 16, (31 - L) * 16, None, None, False, (4, 4)),
    ("cg16_stride16_guard_odd", 16, True, L * 16, S16, L % 2 == 1, None, False, (4, 2)),
    ("cg16_stride16_guard_not_lane7", 16, True, L * 16, S16, L != 7, None, False, (5, 4)),
    ("cg16_stride32_guard_odd", 16, True, L * 32, S16, L % 2 == 1, None, False, (16, 2)),
    ("cg16_stride32_guard_every4th", 16, True, L * 32, S16, L % 4 == 0, None, False, (8, 1)),
    ("cg16_stride16_ign_all", 16, True, L * 16, S16, None, L < 0, False, (4, 4)),
    ("cg16_one_dst_sz0_all", 16, True, 0 * L, S16, None, L < 0, True, (32, 4)),
    ("cg16_stride16_sz0_lanes16to31", 16, True, L * 16, S16, None, L < 16, True, (6, 6)),
    ("cg16_stride16_sz0_odd", 16, True, L * 16, S16, None, L % 2 == 0, True, (8, 6)),
    ("cg16_stride32_sz0_lanes16to31", 16, True, L * 32, S16, None, L < 16, True, (24, 6)),
    ("cg16_stride16_sz16_all", 16, True, L * 16, S16, None, None, True, (8, 8)),
    ("cg16_stride32_sz8_all", 16, True, L * 32, S16, None, None, True, (40, 8)),
    ("cg16_stride16_ign_lanes0to7", 16, True, L * 16, S16, None, L >= 8, False, (7, 7)),
    ("cg16_stride32_guard_lanes0to15_ign_odd", 16, True, L * 32, S16, L < 16, L % 2 == 0, False, (12, 3)),
    ("ca16_stride32", 16, False, L * 32, S16, None, None, False, (8, 4)),
    ("ca16_one_dst", 16, False, 0 * L, S16, None, None, False, (32, 4)),
    ("ca16_pairs", 16, False, (L // 2) * 16, S16, None, None, False, (8, 4)),
    ("ca16_lane1_on_lane8", 16, False, np.where(L == 1, 128, L * 16), S16, None, None, False, (5, 4)),
    ("ca16_stride32_src_one", 16, False, L * 32, 0 * L, None, None, False, (32, 4)),
    ("ca16_stride16_guard_odd", 16, False, L * 16, S16, L % 2 == 1, None, False, (4, 2)),
    ("ca16_stride16_ign_lanes16to31", 16, False, L * 16, S16, None, L < 16, False, (4, 4)),
    ("ca8_stride16", 8, False, L * 16, S16, None, None, False, (4, 2)),
    ("ca8_pairs", 8, False, (L // 2) * 8, S16, None, None, False, (6, 2)),
    ("ca8_lines_interleaved", 8, False, (L % 4) * 128 + (L // 4) * 8, S16, None, None, False, (10, 2)),
    ("ca8_one_dst", 8, False, 0 * L, S16, None, None, False, (32, 2)),
    ("ca8_stride8_sz0_all", 8, False, L * 8, S16, None, L < 0, True, (2, 2)),
    ("ca8_stride8_sz0_lanes16to31", 8, False, L * 8, S16, None, L < 16, True, (3, 2)),
    ("ca4_stride4", 4, False, L * 4, S16, None, None, False, (4, 1)),
    ("ca4_stride32", 4, False, L * 32, S16, None, None, False, (8, 1)),
    ("ca4_pairs", 4, False, (L // 2) * 4, S16, None, None, False, (5, 1)),
    ("ca4_lines_interleaved", 4, False, (L % 4) * 128 + (L // 4) * 4, S16, None, None, False, (7, 1)),
    ("ca4_stride4_src_one", 4, False, L * 4, 0 * L, None, None, False, (32, 1)),
    ("ca4_stride4_ign_all", 4, False, L * 4, S16, None, L < 0, False, (1, 1)),
    ("ca4_stride4_ign_lanes16to31", 4, False, L * 4, S16, None, L < 16, False, (2, 1)),
    ("ca4_one_dst_sz0_all", 4, False, 0 * L, S16, None, L < 0, True, (32, 1)),
]


@pytest.mark.parametrize("case", MEASURED, ids=[c[0] for c in MEASURED])
def test_the_rule_gives_what_the_h100_measured(case):
    name, width, cg, dst, src, on, reads, zfill, want = case
    base = 1024  # the probes' buffer: 1024-byte aligned shared memory
    wf, ideal = cp_async_wavefronts(base + dst, width=width, src=0x7F0000000000 + src, active=on, reads=reads,
                                    bypass=cg, zfill=zfill)
    assert (int(wf), int(ideal)) == want, name
    got = wavefronts(base + dst, width=width, op="ldgsts", active=on, src=0x7F0000000000 + src, reads=reads,
                     bypass=cg, zfill=zfill)
    assert (int(got[0]), int(got[1])) == want  # the same rule through wavefronts(op='ldgsts')


#: drawn .ca patterns of probe_ldgsts_random (seed 2026) that the H100 counts below the rule's first form
#: (a lane of the j-th source line no earlier than wavefront j): (probe index, width, (wavefronts, ideal))
DRAWN_CA = [(2, 8, (12, 2)), (7, 16, (10, 4)), (9, 4, (2, 1)), (14, 8, (5, 2)), (27, 4, (2, 1)),
            (37, 16, (12, 4)), (39, 4, (3, 1))]


@pytest.mark.parametrize("case", DRAWN_CA, ids=[f"r{c[0]:02d}" for c in DRAWN_CA])
def test_ca_lanes_wait_only_for_earlier_lanes_they_conflict_with(case):
    from flashsim.gpu.ncu_source import RANDOM_LDGSTS_PROBES as N, random_ldgsts_tables

    i, width, want = case
    t = random_ldgsts_tables(2026)[:4 * N * 32 * 4].view(np.uint32).reshape(4, N, 32).astype(np.int64)
    wf, ideal = cp_async_wavefronts(1024 + t[0, i], width=width, src=0x7F0000006000 + t[1, i], active=t[2, i] != 0)
    assert (int(wf), int(ideal)) == want
    # r39: 14 lanes from 12 source lines into one destination line, at most 3 lanes on one source bank
    if i == 39:
        _, _, lane_wf = cp_async_wavefronts(1024 + t[0, i], width=4, src=t[1, i], active=t[2, i] != 0, lanes=True)
        assert sorted(set(lane_wf.tolist()) - {-1}) == [0, 1, 2]


def test_without_a_source_the_probes_source_is_taken_and_phases_keeps_the_plain_store():
    assert tuple(int(v) for v in wavefronts(L * 4, width=4, op="ldgsts")) == (4, 1)  # src 16 * lane
    assert tuple(int(v) for v in wavefronts(L * 4, width=4, op="ldgsts", src=L * 4)) == (1, 1)  # one source line
    assert tuple(int(v) for v in wavefronts(0 * L, width=16, op="ldgsts", model=PHASES)) == (4, 4)  # merged, plain
    assert SM90.cp_async and SM90.cp_async_p0 and not PHASES.cp_async


def test_each_lanes_wavefront_adds_up_and_batches_equal_single_rows():
    rng = np.random.default_rng(7)
    rows = []
    for trial in range(400):
        width = int(rng.choice([4, 8, 16]))
        cg = width == 16 and bool(trial % 2)
        span = int(rng.choice([128, 512, 4096]))
        dst = rng.integers(0, span // width, 32) * width
        src = rng.integers(0, int(rng.choice([8, 64, 1024])), 32) * 16
        if trial % 3 == 0:
            dst = np.repeat(dst[::2], 2)
        on = rng.random(32) < (0.7 if trial % 4 else 1.0)
        reads = rng.random(32) < (0.6 if trial % 5 == 0 else 1.0)
        zfill = cg and trial % 7 == 0
        wf, ideal, lanes = cp_async_wavefronts(dst, width=width, src=src, active=on, reads=reads, bypass=cg,
                                               zfill=zfill, lanes=True)
        assert ((lanes >= 0) == on).all()
        assert int(wf) == (int(lanes.max()) + 1 if on.any() else 0)
        assert int(ideal) <= int(wf)
        table = cp_async_table(dst, width=width, src=src, active=on, reads=reads, bypass=cg, zfill=zfill)
        assert sum(p["wavefronts"] for p in table) == int(wf)
        for k, bank, word, who in (table[0]["cells"] if table else []):  # one word per bank per wavefront
            assert len({w for kk, b, w, _ in table[0]["cells"] if kk == k and b == bank}) == 1
        if width == 16:
            rows.append((dst, src, on, reads, cg, zfill, int(wf), int(ideal)))
    for cg in (False, True):
        for zf in (False, True):
            sel = [r for r in rows if r[4] == cg and r[5] == zf]
            if not sel:
                continue
            wf, ideal = cp_async_wavefronts(np.stack([r[0] for r in sel]).reshape(len(sel), 1, 32), width=16,
                                            src=np.stack([r[1] for r in sel]).reshape(len(sel), 1, 32),
                                            active=np.stack([r[2] for r in sel]).reshape(len(sel), 1, 32),
                                            reads=np.stack([r[3] for r in sel]).reshape(len(sel), 1, 32),
                                            bypass=cg, zfill=zf)
            assert wf.shape == (len(sel), 1)
            assert wf[:, 0].tolist() == [r[6] for r in sel] and ideal[:, 0].tolist() == [r[7] for r in sel]


def test_the_global_source_as_64_bit_patterns():
    # garbage high words (registers a guarded-off warp never set) count by their low bits and lines only
    src = (np.uint64(0xC20) << np.uint64(32)) + np.uint64(0x3000) + (16 * L).astype(np.uint64)
    assert tuple(int(v) for v in cp_async_wavefronts(L * 16, src=src, bypass=True)) == (4, 4)
    high = src | (np.uint64(1) << np.uint64(63))
    assert tuple(int(v) for v in cp_async_wavefronts(L * 16, src=high, bypass=True)) == (4, 4)


def test_the_warp_level_cp_async_counts_by_the_same_rule():
    sm = SharedMemory(1, 8192, races=False)
    g = np.zeros(8192, np.uint8)
    cp_async(sm, g, L * 32, S16, cache="cg", tag="cg stride 32")
    cp_async(sm, g, L * 16, S16, cache="cg", src_size=np.where(L < 16, 16, 0), tag="cg half zero")
    cp_async(sm, g, L * 16, S16, cache="cg", src_size=8, tag="cg zfill 8")
    cp_async(sm, g, (L % 4) * 128 + (L // 4) * 4, S16, cp_size=4, tag="ca4 lines")
    rows = {r.tag: (r.wavefronts, r.ideal) for r in sm.ledger.report()}
    assert rows == {"cg stride 32": (32, 4), "cg half zero": (6, 6), "cg zfill 8": (8, 8), "ca4 lines": (7, 1)}


@pytest.mark.parametrize(("kw", "match"), [
    (dict(width=2), "cp.async copies 4, 8 or 16"),
    (dict(width=8, bypass=True), "copies 16 bytes"),
    (dict(src=np.zeros(16, np.int64)), "broadcasts to"),
    (dict(src=np.zeros(32)), "integer byte addresses"),
    (dict(active=np.ones(32)), "bool array"),
    (dict(reads=np.ones(31, bool)), "broadcasts to"),
])
def test_bad_arguments(kw, match):
    with pytest.raises(ArgumentError, match=match):
        cp_async_wavefronts(L * 16, **kw)
    with pytest.raises(ArgumentError, match="op='ldgsts'"):
        wavefronts(L * 16, width=16, op="st", src=S16)


def test_the_banks_command_counts_cp_async_by_the_rule(capsys):
    from flashsim.cli import main

    assert main(["banks", "--width", "128", "--op", "cp.async.cg", "--addr", "lane * 32"]) == 0
    out = capsys.readouterr().out
    assert "cp.async.cg (LDGSTS.BYPASS)" in out and "as a plain store: 8 wavefronts" in out
    assert "total: 32 wavefronts, ideal 4, 28 bank conflicts" in out
    assert main(["banks", "--width", "32", "--op", "cp.async", "--addr", "lane * 4", "--src", "0 * lane"]) == 0
    out = capsys.readouterr().out
    assert "SRC = 0 * lane" in out and "total: 32 wavefronts, ideal 1" in out
    assert main(["banks", "--width", "32", "--op", "cp.async", "--addr", "(lane % 4) * 128 + (lane // 4) * 4"]) == 0
    assert "total: 7 wavefronts, ideal 1" in capsys.readouterr().out
    assert main(["banks", "--width", "128", "--op", "cp.async.cg", "--addr", "lane * 32", "--model", "phases"]) == 0
    assert "total: 8 wavefronts, ideal 4" in capsys.readouterr().out  # the plain store rule
    assert main(["banks", "--width", "64", "--op", "cp.async.cg", "--addr", "lane * 8"]) == 2
    assert "cp.async.cg copies 128 bits" in capsys.readouterr().err
    assert main(["banks", "--addr", "lane * 4", "--src", "lane"]) == 2
    assert "--op cp.async" in capsys.readouterr().err


def test_cg_zero_pass_conflicts_on_the_source_and_whole_sectors_count_per_destination_line():
    import numpy as np
    from flashsim.smem import cp_async_wavefronts
    lane = np.arange(32, dtype=np.int64)
    # .ZFILL, every lane reading one source address at a 16-byte destination stride: 32 read + 32 zero
    assert cp_async_wavefronts(16 * lane, src=np.zeros(32, np.int64), bypass=True, zfill=True)[0] == 64
    # every lane zero: the destination banks alone (4), whatever the source
    assert cp_async_wavefronts(16 * lane, src=np.zeros(32, np.int64), bypass=True,
                               reads=np.zeros(32, bool))[0] == 4
    # one source line copied whole to 4 destination lines: 1 wavefront each
    assert tuple(cp_async_wavefronts(16 * lane, src=16 * (lane % 8), bypass=True)) == (4, 4)
