"""The trace container (flashsim.trace.container): round trips, index lookups, streaming, and every way a file
can be damaged (each must be a TraceError naming the file, never wrong data)."""

from __future__ import annotations

import json
import os
import struct
import zlib

import numpy as np
import pytest

import flashsim
from flashsim.trace import (
    FORMAT_VERSION, SMEM_DTYPE, Event, TraceArgumentError, TraceError, TraceReader, TraceWriter, open_trace,
)
from flashsim.trace.container import fileformat as C

TAGS = ["load_q", "mma_qk", "softmax", "mma_pv", "normalize"]
META = {"gpu": "NVIDIA H100 80GB HBM3", "driver": "580.00", "kernel": "fa2", "source_sha256": "ab" * 32,
        "options": ["-O3", "-arch=sm_90a"], "seed": np.int64(7), "shapes": {"q": (1, 128, 4, 64)}}


def _smem(rng, n):
    s = np.zeros(n, SMEM_DTYPE)
    s["lane"] = rng.integers(0, 32, n)
    s["addr"] = rng.integers(0, 2**32, n, dtype=np.uint32)
    s["nbytes"] = rng.choice([4, 8, 16], n)
    s["store"] = rng.integers(0, 2, n)
    s["wavefront"] = rng.integers(0, 65536, n)
    return s


def _events(seed=0, ctas=3, warps=2, steps=30):
    """Events like a traced run: per step one event for every (cta, warp); float bit patterns, nregs 0..40,
    smem absent, empty or present."""
    rng = np.random.default_rng(seed)
    out = []
    for step in range(steps):
        tag = TAGS[step % len(TAGS)]
        for cta in range(ctas):
            for warp in range(warps):
                k = int(rng.choice([0, 1, 4, 17, 40]))
                regs = rng.normal(0, 2, (32, k)).astype(np.float32).view(np.uint32)
                which = rng.integers(0, 3)
                smem = None if which == 0 else _smem(rng, 0 if which == 1 else int(rng.integers(1, 40)))
                out.append(Event(cta, warp, step, tag, regs, smem))
    return out


def _write(path, events, arrays=(), **kw):
    with TraceWriter(path, META, TAGS, **kw) as w:
        for e in events:
            w.add_event(e.cta, e.warp, e.seq, e.tag, e.regs, e.smem)
        for name, a in arrays:
            w.add_array(name, a)
    return path


def _sorted(events):
    return sorted(events, key=lambda e: (e.cta, e.warp, e.seq))


@pytest.fixture(scope="module")
def events():
    return _events()


@pytest.fixture
def trace(tmp_path, events):
    return _write(tmp_path / "t.fstrace", events, chunk_bytes=8 << 10, threads=0)


# ------------------------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("compress, threads", [("zlib", 0), ("zlib", 2), ("none", 0), ("none", 2)])
@pytest.mark.parametrize("level", [1, 6])
def test_round_trip_events(tmp_path, events, compress, threads, level):
    path = _write(tmp_path / "t.fstrace", events, compress=compress, threads=threads, level=level,
                  chunk_bytes=4 << 10)
    with open_trace(path) as r:
        got = list(r.events())
        assert got == _sorted(events)
        assert r.keys() == sorted({(e.cta, e.warp) for e in events})
        assert r.tags == TAGS
        assert r.n_events == len(events) == r.count()
        assert r.meta["gpu"] == META["gpu"] and r.meta["seed"] == 7 and r.meta["shapes"]["q"] == [1, 128, 4, 64]
        assert r.writer["flashsim"] == flashsim.__version__
        assert r.bytes_in == sum(e.regs.nbytes + (0 if e.smem is None else e.smem.nbytes) for e in events)
        r.verify()
    for e in got:
        assert e.regs.dtype == np.uint32 and e.regs.shape[0] == 32
        assert e.smem is None or e.smem.dtype == SMEM_DTYPE


def test_smem_absent_and_empty_are_different(tmp_path):
    regs = np.zeros((32, 2), np.uint32)
    with TraceWriter(tmp_path / "t", {}, TAGS) as w:
        w.add_event(0, 0, 0, "load_q", regs)
        w.add_event(0, 0, 1, "load_q", regs, np.zeros(0, SMEM_DTYPE))
    a, b = open_trace(tmp_path / "t").events()
    assert a.smem is None and b.smem is not None and len(b.smem) == 0


def test_add_events_many_of_one_warp(tmp_path):
    rng = np.random.default_rng(1)
    block = rng.integers(0, 2**32, (50, 32, 8), dtype=np.uint32)
    with TraceWriter(tmp_path / "t", {}, TAGS, chunk_bytes=4096) as w:
        w.add_events(2, 1, range(50), "mma_qk", block)
        w.add_events(2, 0, [5, 6], ["softmax", 3], [block[0][:, :3], block[1][:, :0]],
                     [None, np.zeros(2, SMEM_DTYPE)])
        with pytest.raises(TraceArgumentError, match="tags"):
            w.add_events(2, 0, [7, 8], ["softmax"], [block[0], block[1]])
        with pytest.raises(ValueError, match=r"regs_list\[1\]"):
            w.add_events(2, 0, [7, 8], "softmax", [block[0], block[1].astype(np.int32)])
    with open_trace(tmp_path / "t") as r:
        got = list(r.events(cta=2, warp=1))
        assert [e.seq for e in got] == list(range(50)) and all(e.tag == "mma_qk" for e in got)
        assert all(np.array_equal(e.regs, block[i]) for i, e in enumerate(got))
        assert [(e.seq, e.tag, e.regs.shape) for e in r.events(cta=2, warp=0)] == [
            (5, "softmax", (32, 3)), (6, "mma_pv", (32, 0))]
        assert r.n_chunks > 5


def test_tags_by_id_and_non_contiguous_regs(tmp_path):
    regs = np.arange(32 * 6, dtype=np.uint32).reshape(6, 32).T   # F-order view
    with TraceWriter(tmp_path / "t", {}, TAGS) as w:
        w.add_event(0, 0, 0, 4, regs)
    (e,) = open_trace(tmp_path / "t").events()
    assert e.tag == "normalize" and np.array_equal(e.regs, regs)


def test_round_trip_arrays(tmp_path):
    rng = np.random.default_rng(2)
    arrays = {
        "q": rng.normal(0, 1, (2, 64, 4, 16)).astype(np.float16).view(np.uint16),
        "lse": rng.normal(0, 1, (2, 4, 64)).astype(np.float32).view(np.uint32),
        "out": rng.normal(0, 1, (3, 1000)).astype(np.float32),               # 12 kB: 3 chunks of 4 kB
        "big": rng.integers(0, 2**31, 50_000).astype(np.int64),             # 400 kB: 98 chunks
        "f64_fortran": np.asfortranarray(rng.normal(0, 1, (7, 5))),
        "scalar": np.array(3.5, np.float32),
        "empty": np.zeros((0, 4), np.uint16),
        "bytes": np.frombuffer(b"hello trace", np.uint8),
        "smem": _smem(rng, 33),
        "be": np.arange(10, dtype=">u4"),
    }
    for compress in ("zlib", "none"):
        path = tmp_path / f"a_{compress}"
        with TraceWriter(path, {}, TAGS, chunk_bytes=4096, compress=compress) as w:
            for k, a in arrays.items():
                w.add_array(k, a)
        with open_trace(path) as r:
            assert r.array_names() == list(arrays)
            for k, a in arrays.items():
                got = r.array(k)
                assert got.dtype == a.dtype and got.shape == a.shape and np.array_equal(got, a), k
            assert r.keys() == [] and r.count() == 0 and list(r.events()) == []
            assert r.n_chunks > 100
            got = r.array("out")
            got[0, 0] = 1.0                                      # a fresh, writeable array
            r.verify()
            with pytest.raises(TraceError, match="no such array.*'q'"):
                r.array("nope")


def test_add_array_checks(tmp_path):
    with TraceWriter(tmp_path / "t", {}, TAGS) as w:
        w.add_array("a", np.zeros(3))
        with pytest.raises(TraceArgumentError, match="already added"):
            w.add_array("a", np.zeros(3))
        with pytest.raises(TraceArgumentError, match="object"):
            w.add_array("o", np.array([object()]))


# --------------------------------------------------------------------------------------- index lookups


def test_filters(trace, events):
    with open_trace(trace) as r:
        everything = _sorted(events)
        cases = [
            dict(cta=1), dict(warp=0), dict(cta=2, warp=1), dict(tags="softmax"), dict(tags=["load_q", 3]),
            dict(seq_range=(5, 12)), dict(seq_range=(None, 3)), dict(seq_range=(27, None)),
            dict(cta=0, warp=1, tags=["mma_qk", "mma_pv"], seq_range=(4, 20)), dict(cta=9), dict(seq_range=(9, 9)),
        ]
        for kw in cases:
            cta, warp, tags, sr = kw.get("cta"), kw.get("warp"), kw.get("tags"), kw.get("seq_range")
            names = None if tags is None else {TAGS[t] if isinstance(t, int) else t
                                               for t in ([tags] if isinstance(tags, str) else tags)}
            want = [e for e in everything
                    if (cta is None or e.cta == cta) and (warp is None or e.warp == warp)
                    and (names is None or e.tag in names)
                    and (sr is None or ((sr[0] is None or e.seq >= sr[0]) and (sr[1] is None or e.seq < sr[1])))]
            assert list(r.events(**kw)) == want, kw
            if sr is None:
                before = r.chunks_read
                assert r.count(cta, warp, tags) == len(want), kw
                assert r.chunks_read == before                    # count() reads no chunk
        with pytest.raises(TraceError, match="unknown tag name"):
            list(r.events(tags="nope"))
        with pytest.raises(ValueError, match="unknown tag id"):
            r.count(tags=[99])


def test_lookup_reads_only_matching_chunks(trace):
    with open_trace(trace) as r:
        total = r.n_chunks
        assert r.chunks_read == 0                                # opening reads the index only
        n = len(list(r.events(cta=1, warp=0)))
        own = int(((r._rows["cta"] == 1) & (r._rows["warp"] == 0)).sum())
        assert n == 30 and r.chunks_read == own < total / 4
        before = r.chunks_read
        list(r.events(cta=1, warp=0, seq_range=(29, 30)))
        assert r.chunks_read - before == 1                       # only the last chunk holds seq 29
        before = r.chunks_read
        list(r.events(tags="normalize", cta=0))
        with_tag = {int(c) for c in r._entry_chunk[r._tag_ids == TAGS.index("normalize")]}
        want = sum(1 for c in with_tag if r._rows["cta"][c] == 0)
        assert r.chunks_read - before == want < (r._rows["cta"] == 0).sum()   # chunks without the tag: skipped


def test_out_of_order_seqs_come_back_sorted(tmp_path):
    rng = np.random.default_rng(3)
    seqs = rng.permutation(200).tolist() + [50, 50]              # duplicates keep the order they were added in
    evs = [Event(0, 0, s, TAGS[i % 5], np.full((32, 3), i, np.uint32)) for i, s in enumerate(seqs)]
    _write(tmp_path / "t", evs, chunk_bytes=2000, threads=0)
    with open_trace(tmp_path / "t") as r:
        got = list(r.events())
        assert r.n_chunks > 10
    assert [e.seq for e in got] == sorted(seqs)
    assert got == sorted(evs, key=lambda e: e.seq)               # stable: equal seqs in the order added
    assert [e for e in got if 40 <= e.seq < 60] == list(open_trace(tmp_path / "t").events(seq_range=(40, 60)))


# ------------------------------------------------------------------------------------------- streaming


def test_streaming_writes_chunks_as_buffers_fill(tmp_path):
    rng = np.random.default_rng(4)
    regs = rng.integers(0, 2**32, (32, 32), dtype=np.uint32)    # 4 kB per event
    path = tmp_path / "t"
    with TraceWriter(path, {}, TAGS, chunk_bytes=64 << 10, max_buffer_bytes=256 << 10, threads=2) as w:
        peak = 0
        for step in range(100):
            for key in range(16):
                w.add_event(key, 0, step, "mma_qk", regs)
                peak = max(peak, w.buffered_bytes)
        assert w.bytes_in == 100 * 16 * regs.nbytes                # 6.5 MB accepted ...
        assert peak <= (256 << 10) + regs.nbytes + 100            # ... never more than the cap held at once
        on_disk = os.path.getsize(w._tmp)
        assert on_disk > w.bytes_in / 2                           # already written before close()
        assert not path.exists()                                  # published only by close()
    with open_trace(path) as r:
        assert r.count() == 1600 and r.n_chunks >= 100
        assert all(np.array_equal(e.regs, regs) for e in r.events(cta=7))


def test_big_events_each_become_a_chunk(tmp_path):
    regs = np.ones((32, 300), np.uint32)
    with TraceWriter(tmp_path / "t", {}, TAGS, chunk_bytes=1000, threads=0) as w:
        for s in range(5):
            w.add_event(0, 0, s, "mma_pv", regs)
            assert w.buffered_bytes == 0
    assert open_trace(tmp_path / "t").n_chunks == 5


def test_empty_trace(tmp_path):
    with TraceWriter(tmp_path / "t", {"x": 1}, []):
        pass
    with open_trace(tmp_path / "t") as r:
        assert isinstance(r, TraceReader)
        assert (r.keys(), r.count(), list(r.events()), r.array_names(), r.meta) == ([], 0, [], [], {"x": 1})
        r.verify()


# ----------------------------------------------------------------------------------------- reliability


def _patched(path, offset, new: bytes):
    data = bytearray(path.read_bytes())
    data[offset:offset + len(new)] = new
    path.write_bytes(bytes(data))


def _fix_checksums(path):
    """Recompute every checksum of a (deliberately edited) trace, so that only the edit itself is wrong."""
    data = bytearray(path.read_bytes())
    foot = C._FOOT.unpack_from(data, len(data) - C._FOOT.size)
    index_offset, index_len = foot[0], foot[1]
    (jlen,) = C._U32LE.unpack_from(data, index_offset)
    n = json.loads(bytes(data[index_offset + 4:index_offset + 4 + jlen]))["chunks"]
    rows_at = index_offset + 4 + jlen
    rows = np.frombuffer(bytes(data[rows_at:rows_at + n * C.INDEX_DTYPE.itemsize]), C.INDEX_DTYPE).copy()
    for row in rows:
        row["crc"] = zlib.crc32(data[int(row["offset"]):int(row["offset"]) + int(row["stored"])])
    data[rows_at:rows_at + rows.nbytes] = rows.tobytes()
    index = bytes(data[index_offset:index_offset + index_len])
    body = C._FOOT_BODY.pack(index_offset, index_len, len(data), zlib.crc32(index), FORMAT_VERSION)
    data[len(data) - C._FOOT.size:] = body + struct.pack("<I", zlib.crc32(body)) + C.END_MAGIC
    path.write_bytes(bytes(data))


def _error(path, match, *, read=False) -> str:
    with pytest.raises(TraceError, match=match) as info:
        with open_trace(path) as r:
            if read:
                r.verify()
    msg = str(info.value)
    assert msg.startswith(str(path)), msg
    return msg


def test_truncated_files(trace):
    data = trace.read_bytes()
    with open_trace(trace) as r:
        first_chunk, index_at = int(r._rows["offset"][0]), int(r._rows["offset"][-1] + r._rows["stored"][-1])
    for cut in (0, 5, 19, 100, first_chunk + 10, len(data) // 2, index_at + 3, len(data) - 30, len(data) - 1):
        trace.write_bytes(data[:cut])
        _error(trace, "empty file" if cut == 0 else "truncated")


def test_truncated_file_says_it_was_cut_or_not_closed(trace):
    data = trace.read_bytes()
    trace.write_bytes(data[:len(data) // 2])
    msg = _error(trace, "truncated or unfinished")
    assert "did not close" in msg


def test_flipped_byte_in_a_chunk(trace, events):
    with open_trace(trace) as r:
        i = int(np.flatnonzero((r._rows["cta"] == 1) & (r._rows["warp"] == 1))[1])
        row = r._rows[i]
    _patched(trace, int(row["offset"] + row["stored"] // 2), bytes([trace.read_bytes()[int(row["offset"] +
                                                                                            row["stored"] // 2)] ^ 4]))
    with open_trace(trace) as r:                                 # the index is intact: opening works ...
        assert list(r.events(cta=0)) == [e for e in _sorted(events) if e.cta == 0]   # ... other warps read fine
        with pytest.raises(TraceError, match=rf"chunk #{i} \(cta=1 warp=1\).*checksum mismatch") as info:
            list(r.events(cta=1, warp=1))
        assert str(info.value).startswith(str(trace))
        with pytest.raises(TraceError, match=rf"chunk #{i} .*checksum"):
            r.verify()


def test_flipped_byte_in_header_index_or_footer(trace):
    data = trace.read_bytes()
    with open_trace(trace) as r:
        index_at = int(r._rows["offset"][-1] + r._rows["stored"][-1])
    for at, match in ((30, "header checksum"), (index_at + 50, "index checksum"), (len(data) - 20, "footer checksum")):
        trace.write_bytes(data[:at] + bytes([data[at] ^ 1]) + data[at + 1:])
        _error(trace, match)


def test_missing_chunk(trace):
    data = trace.read_bytes()
    with open_trace(trace) as r:
        off, n = int(r._rows["offset"][3]), int(r._rows["stored"][3])
    trace.write_bytes(data[:off] + data[off + n:])
    _error(trace, r"\d+ bytes are missing")
    trace.write_bytes(data + b"junk")
    _error(trace, "4 bytes after the end of the trace")


def test_missing_chunk_with_consistent_footer(trace):
    """Cut a chunk out and fix the footer's length and checksum: the index's chunk offsets no longer add up."""
    data = trace.read_bytes()
    with open_trace(trace) as r:
        off, n = int(r._rows["offset"][3]), int(r._rows["stored"][3])
        index_offset = int(r._rows["offset"][-1] + r._rows["stored"][-1])
    cut = bytearray(data[:off] + data[off + n:])
    foot = C._FOOT.unpack_from(cut, len(cut) - C._FOOT.size)
    body = C._FOOT_BODY.pack(index_offset - n, foot[1], len(cut), foot[3], FORMAT_VERSION)
    cut[len(cut) - C._FOOT.size:] = body + struct.pack("<I", zlib.crc32(body)) + C.END_MAGIC
    trace.write_bytes(bytes(cut))
    _error(trace, rf"the index says the chunks end at byte {index_offset} but it starts at byte "
                  rf"{index_offset - n}: {n} bytes of chunk data are missing")


def test_index_pointing_past_the_end(trace):
    data = bytearray(trace.read_bytes())
    foot = list(C._FOOT.unpack_from(data, len(data) - C._FOOT.size))
    foot[0] += 1000                                              # index offset
    body = C._FOOT_BODY.pack(*foot[:5])
    data[len(data) - C._FOOT.size:] = body + struct.pack("<I", zlib.crc32(body)) + C.END_MAGIC
    trace.write_bytes(bytes(data))
    _error(trace, r"footer points the index at bytes \d+\.\.\d+, outside the file's \d+ bytes")


def test_unfinished_file(tmp_path):
    w = TraceWriter(tmp_path / "t", {}, TAGS, chunk_bytes=1024, threads=0)
    for s in range(20):
        w.add_event(0, 0, s, "load_q", np.ones((32, 8), np.uint32))
    _error(w._tmp, "truncated or unfinished.*writer did not close it")
    w.close()
    with open_trace(tmp_path / "t") as r:
        assert r.count() == 20
    with pytest.raises(TraceError, match="reader is closed"):
        list(r.events())
    with pytest.raises(TraceError, match="seq_range"):
        open_trace(tmp_path / "t").events(seq_range=5)


def test_newer_format_version(trace):
    _patched(trace, 8, struct.pack("<I", 2))
    _error(trace, r"format version 2, this flashsim reads up to 1")


def test_not_a_trace(tmp_path, trace):
    (tmp_path / "x.npz").write_bytes(b"PK\x03\x04" + bytes(100))
    _error(tmp_path / "x.npz", "not a flashsim trace file")
    _patched(trace, 0, b"\x89FSTRX")
    _error(trace, "not a flashsim trace file")
    with pytest.raises(TraceError, match="no such file"):
        open_trace(tmp_path / "missing")
    with pytest.raises(TraceError, match="cannot open"):
        open_trace(tmp_path)


def test_unknown_tag_id_in_the_index(trace):
    with open_trace(trace) as r:
        index_at = int(r._rows["offset"][-1] + r._rows["stored"][-1])
        n = r.n_chunks
    data = trace.read_bytes()
    (jlen,) = C._U32LE.unpack_from(data, index_at)
    _patched(trace, index_at + 4 + jlen + n * C.INDEX_DTYPE.itemsize, struct.pack("<I", 99))   # first tag id
    _fix_checksums(trace)
    _error(trace, r"unknown tag id 99 in the index entry of chunk #0 \(cta=0 warp=0\); the tag table has 5 tags")


def test_unknown_tag_id_in_a_chunk(tmp_path, events):
    path = _write(tmp_path / "t", events, compress="none", chunk_bytes=8 << 10, threads=0)
    with open_trace(path) as r:
        row = r._rows[2]
    at = int(row["offset"]) + C._CHUNK_HEAD.size + int(row["nsections"]) * C._SECTION.size + 8 * int(row["nevents"])
    _patched(path, at, struct.pack("<I", 77))                    # tag id of the chunk's first event
    _fix_checksums(path)
    with open_trace(path) as r:
        cta, warp = int(row["cta"]), int(row["warp"])
        with pytest.raises(TraceError, match=rf"chunk #2 \(cta={cta} warp={warp}\): unknown tag id 77"):
            list(r.events(cta=cta, warp=warp))


def test_damaged_chunk_contents_with_valid_crc(tmp_path, events):
    path = _write(tmp_path / "t", events, compress="none", chunk_bytes=8 << 10, threads=0)
    with open_trace(path) as r:
        row = r._rows[1]
    _patched(path, int(row["offset"]) + C._CHUNK_HEAD.size + int(row["nsections"]) * C._SECTION.size,
             struct.pack("<q", -5))                              # seq of the first event
    _fix_checksums(path)
    _error(path, r"chunk #1 .*seq range", read=True)


# -------------------------------------------------------------------------------------- writer checks


def test_bad_event_arguments(tmp_path):
    ok = np.zeros((32, 4), np.uint32)
    with TraceWriter(tmp_path / "t", {}, TAGS) as w:
        bad = [
            (dict(regs=np.zeros((32, 4), np.float32)), r"regs=.*uint32.*view\(np.uint32\)"),
            (dict(regs=np.zeros((16, 4), np.uint32)), r"regs=.*shape \(32, nregs\).*\(16, 4\)"),
            (dict(regs=np.zeros(32, np.uint32)), r"regs=.*shape"),
            (dict(regs=[[0] * 4] * 32), r"regs=.*uint32"),
            (dict(tag="nope"), r"tag='nope': unknown tag name"),
            (dict(tag=5), r"tag=5: unknown tag id"),
            (dict(cta=-1), r"cta=-1"),
            (dict(seq=1.5), r"seq=1.5: expected an integer"),
            (dict(smem=np.zeros(3, np.uint32)), r"smem=.*dtype"),
        ]
        for kw, match in bad:
            args = dict(cta=0, warp=0, seq=0, tag="load_q", regs=ok) | kw
            with pytest.raises(ValueError, match=match) as info:
                w.add_event(**args)
            assert isinstance(info.value, TraceError) and str(info.value).startswith(str(tmp_path / "t"))
        w.add_event(0, 0, 0, "load_q", ok)                        # the writer is still usable
        aligned = np.dtype({"names": SMEM_DTYPE.names, "formats": [SMEM_DTYPE.fields[f][0] for f in SMEM_DTYPE.names],
                            "aligned": True})
        w.add_event(0, 0, 1, "load_q", ok, np.ones(2, aligned))   # other padding, same fields: accepted
    assert open_trace(tmp_path / "t").count() == 2


def test_bad_writer_arguments(tmp_path):
    for kw, match in ((dict(meta=[1]), "meta"), (dict(meta={"x": object()}), "not JSON-able"),
                      (dict(tags=["a", "a"]), "unique"), (dict(compress="lz4"), "compress"),
                      (dict(level=0), "level"), (dict(chunk_bytes=0), "chunk_bytes")):
        args = dict(meta={}, tags=TAGS) | kw
        with pytest.raises(ValueError, match=match):
            TraceWriter(tmp_path / "t", args.pop("meta"), args.pop("tags"), **args)
    assert os.listdir(tmp_path) == []
    with pytest.raises(TraceError, match="does not exist"):
        TraceWriter(tmp_path / "no" / "t", {}, TAGS)


def test_refuses_to_overwrite_without_force(tmp_path, events):
    path = _write(tmp_path / "t", events[:10])
    before = path.read_bytes()
    with pytest.raises(TraceError, match=r"already exists; pass force=True \(--force"):
        TraceWriter(path, {}, TAGS)
    assert path.read_bytes() == before
    # the file appears while the writer is open: still refused at close, and nothing is left behind
    path.unlink()
    w = TraceWriter(path, {}, TAGS)
    w.add_event(0, 0, 0, "load_q", np.zeros((32, 1), np.uint32))
    path.write_bytes(before)
    with pytest.raises(TraceError, match="already exists"):
        w.close()
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["t"]


def test_force_overwrites(tmp_path, events):
    path = _write(tmp_path / "t", events[:10])
    _write(path, events[:3], force=True)
    assert open_trace(path).count() == 3 and os.listdir(tmp_path) == ["t"]


def test_exception_inside_with_leaves_nothing(tmp_path, events):
    for threads in (0, 2):
        with pytest.raises(RuntimeError, match="boom"):
            with TraceWriter(tmp_path / "t", {}, TAGS, chunk_bytes=1024, threads=threads) as w:
                for e in events:
                    w.add_event(e.cta, e.warp, e.seq, e.tag, e.regs, e.smem)
                assert len(os.listdir(tmp_path)) == 1            # the temporary file, already holding chunks
                raise RuntimeError("boom")
        assert os.listdir(tmp_path) == []


def test_closed_writer(tmp_path):
    w = TraceWriter(tmp_path / "t", {}, TAGS)
    w.close()
    w.close()                                                    # closing twice is harmless
    with pytest.raises(TraceError, match="closed"):
        w.add_event(0, 0, 0, "load_q", np.zeros((32, 0), np.uint32))
    w = TraceWriter(tmp_path / "u", {}, TAGS)
    w.abort()
    assert sorted(os.listdir(tmp_path)) == ["t"]


def test_event_value_semantics():
    a = Event(0, 1, 2, "x", np.arange(64, dtype=np.uint32).reshape(32, 2))
    b = Event(0, 1, 2, "x", np.arange(64, dtype=np.uint32).reshape(32, 2))
    assert a == b and a != Event(0, 1, 2, "x", b.regs + 1) and a != Event(0, 1, 2, "x", b.regs, np.zeros(0, SMEM_DTYPE))
    assert "regs=<uint32(32, 2)>" in repr(a)
    with pytest.raises(AttributeError):
        a.seq = 3
    assert TraceError is flashsim.TraceError and issubclass(TraceArgumentError, ValueError)
