"""The Tensor Memory Accelerator: tensor maps as cuTensorMapEncodeTiled checks them, where the elements of a box
go (flashsim/sass/tensormap.py), the interpreter's UTMALDG / UTMASTG / UTMAREDG / UTMAPF / UTMACCTL
(flashsim/sass/ops_tma.py), the parameter window, and the host side of the H100 recording script
(gpu/validate_tma.py, gpu/kernels/probe_tma.cu).

The maps' 128 bytes are the driver's (flashsim.sass.cutensormap, derived from the H100 record and checked
on every recorded call by tests/test_cutensormap.py). The replay of the recorded copies through the
interpreter needs a record made by probe version 2.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from flashsim.errors import ArgumentError, SimulatedFault
from flashsim.gpu import validate_tma as V
from flashsim.sass import tensormap as T
from flashsim.sass.launch import PARAM_WINDOW
from flashsim.sass.tensormap import DataType as DT
from flashsim.sass.tensormap import Interleave as IL
from flashsim.sass.tensormap import OobFill, TensorMap
from flashsim.sass.tensormap import Swizzle as SW
from flashsim.swizzle import cute_swizzle

GADDR = 0x7F00_0000_1000


def tmap(dtype=DT.FLOAT16, rank=2, dims=(64, 16), strides=None, box=(32, 4), est=None, il=IL.NONE, sw=SW.NONE,
         oob=OobFill.NONE, addr=GADDR) -> TensorMap:
    es = T.element_size(dtype)
    if strides is None:
        strides, prev = [], None
        for i in range(1, rank):
            prev = -(-(dims[0] * es if i == 1 else prev * dims[i - 1]) // 16) * 16
            strides.append(prev)
    return TensorMap.encode_tiled(dtype, rank, addr, dims, strides, box, est or (1,) * rank, il, sw, 0, oob)


# ------------------------------------------------------------------------------------------------ the map
def test_encode_tiled_takes_the_driver_arguments_in_order():
    tm = TensorMap.encode_tiled(DT.BFLOAT16, 3, GADDR, (64, 5, 7, 99, 99), (128, 640, 16), (64, 2, 3, 9, 9),
                                (1, 2, 1, 9, 9), IL.NONE, SW.B128, T.L2Promotion.L2_256B, OobFill.NAN_REQUEST_ZERO_FMA)
    assert (tm.rank, tm.global_dim, tm.global_strides, tm.box_dim, tm.element_strides) == \
        (3, (64, 5, 7), (128, 640), (64, 2, 3), (1, 2, 1))
    assert tm.elements_per_dim == (64, 1, 3) and tm.box_bytes == 64 * 3 * 2
    assert tm.swizzle is SW.B128 and tm.oob_fill is OobFill.NAN_REQUEST_ZERO_FMA


@pytest.mark.parametrize(("change", "match"), [
    ({"strides": (136,)}, r"globalStrides\[0\] = 136 is not a multiple of 16"),
    ({"strides": (1 << 40,)}, r"globalStrides\[0\] = 1099511627776 is not below 2\^40"),
    ({"box": (32, 257)}, r"boxDim\[1\] = 257 exceeds 256"),
    ({"box": (32, 0)}, r"boxDim\[1\] = 0 is zero"),
    ({"box": (4, 4)}, r"boxDim\[0\] = 4 x 2 bytes .* = 8\) is not a multiple of 16"),
    ({"box": (48, 4), "sw": SW.B64}, r"boxDim\[0\] = 48 .* = 96\) exceeds the 64B swizzle span"),
    ({"addr": GADDR + 8}, r"globalAddress = 0x7f0000001008 is not a multiple of 16"),
    ({"dims": (64, 0)}, r"globalDim\[1\] = 0 is zero"),
    ({"dims": (64, (1 << 32) + 1)}, r"globalDim\[1\] = 4294967297 exceeds 2\^32"),
    ({"est": (1, 9)}, r"elementStrides\[1\] = 9 exceeds 8"),
    ({"est": (0, 1)}, r"elementStrides\[0\] = 0 is zero"),
    ({"il": IL.B16}, r"interleave = 1 \(B16\) needs tensorRank >= 3, not 2"),
    ({"dtype": DT.INT32, "box": (8, 4), "oob": OobFill.NAN_REQUEST_ZERO_FMA}, r"oobFill = 1 \(NAN_REQUEST_ZERO_FMA\) needs a floating-point tensorDataType"),
    ({"sw": 9}, r"swizzle=9: not a Swizzle value"),
    ({"dtype": 16}, r"tensorDataType=16"),
])
def test_invalid_maps_name_the_parameter(change, match):
    with pytest.raises(ArgumentError, match=match):
        tmap(**change)


def test_interleave_32b_rules_name_the_parameter():
    ok = tmap(rank=3, dims=(16, 4, 4), box=(16, 4, 2), il=IL.B32, sw=SW.B32, addr=GADDR)
    assert ok.elements_per_dim == (16, 1, 2)  # 32-byte chunks; dimension rank - 2 is not traversed
    with pytest.raises(ArgumentError, match=r"globalAddress = 0x7f0000001010 is not a multiple of 32"):
        tmap(rank=3, dims=(16, 4, 4), box=(16, 4, 2), il=IL.B32, sw=SW.B32, addr=GADDR + 16)
    # the H100's driver accepts interleave 32B with another swizzle (the documentation asks for 32B)
    assert tmap(rank=3, dims=(16, 4, 4), box=(16, 4, 2), il=IL.B32, sw=SW.B64).swizzle is SW.B64
    with pytest.raises(ArgumentError, match=r"globalStrides\[0\] = 48 is not a multiple of 32"):
        tmap(rank=3, dims=(16, 4, 4), strides=(48, 192), box=(16, 4, 2), il=IL.B32, sw=SW.B32)
    with pytest.raises(ArgumentError, match=r"tensorRank=6"):
        TensorMap.encode_tiled(DT.UINT8, 6, GADDR, (16,) * 6, (16,) * 5, (16,) * 6, (1,) * 6)


def test_newer_modes_are_not_modelled_and_the_bytes_round_trip():
    from flashsim.sass.cutensormap import BadTensorMapBytes

    with pytest.raises(NotImplementedError, match="128B swizzles with 32- and 64-byte atoms"):
        tmap(sw=SW.B128_ATOM_32B)
    with pytest.raises(NotImplementedError, match="packed 4- and 6-bit types"):
        tmap(dtype=DT.U4x16_ALIGN16B)
    tm = tmap(rank=3, dims=(64, 5, 7), box=(32, 2, 3), est=(1, 2, 1), sw=SW.B64, oob=OobFill.NAN_REQUEST_ZERO_FMA)
    b = tm.to_bytes()
    assert len(b) == 128 and int.from_bytes(b[:8], "little") == GADDR
    assert TensorMap.from_bytes(b) == tm
    with pytest.raises(BadTensorMapBytes, match="word 9"):
        TensorMap.from_bytes(bytes(128))


# ------------------------------------------------------------------------------------------------ swizzles
def test_swizzle_patterns_are_cutes_sw32_sw64_sw128_on_absolute_addresses():
    x = np.arange(0, 1 << 14)
    for sw, b in ((SW.B32, 1), (SW.B64, 2), (SW.B128, 3)):
        got = T.swizzle_address(x, sw)
        assert (got == cute_swizzle(x, b, 4, 3)).all()
        assert (T.swizzle_address(got, sw) == x).all()  # an involution
        period = 128 << b
        assert (got[period:] - got[:-period] == period).all()  # repeats after 256 / 512 / 1024 bytes
    assert (T.swizzle_address(x, SW.NONE) == x).all()
    # the Programming Guide's 128B table: 16-byte chunk x of 128-byte row y goes to chunk y % 8 ^ x
    assert [int(T.swizzle_address(128 * 3 + 16 * k, SW.B128)) - 384 for k in range(8)] == \
        [16 * (k ^ 3) for k in range(8)]
    # a box starting at a 128-byte (not 1024-byte) boundary starts inside the pattern: row offset 5
    assert int(T.swizzle_address(1024 + 5 * 128, SW.B128)) == 1024 + 5 * 128 + 16 * 5


# ------------------------------------------------------------------------------------------------ boxes
def test_a_plain_box_is_packed_row_by_row_from_its_start():
    tm = tmap(DT.FLOAT32, 2, dims=(10, 6), box=(4, 2))  # rows of 4 f32 (16 bytes), global stride 48 bytes
    b = T.box_layout(tm, (1, 2), 2048)
    assert b.coords.tolist() == [[1, 2], [2, 2], [3, 2], [4, 2], [1, 3], [2, 3], [3, 3], [4, 3]]
    assert (b.shared_addr - 2048).tolist() == [0, 4, 8, 12, 16, 20, 24, 28]
    assert (b.global_addr - GADDR).tolist() == [4 + 96, 8 + 96, 12 + 96, 16 + 96, 4 + 144, 8 + 144, 12 + 144,
                                                16 + 144]
    assert b.inside.all() and b.row_pitch == 16 and b.shared_extent == 32


def test_element_strides_skip_along_outer_dimensions_not_the_inner_one():
    tm = tmap(DT.UINT8, 2, dims=(64, 9), box=(16, 5), est=(4, 2))
    assert tm.elements_per_dim == (16, 3)  # elementStrides[0] is ignored without interleave
    b = T.box_layout(tm, (0, 1), 1024)
    assert sorted({int(c) for c in b.coords[:, 1]}) == [1, 3, 5]
    assert b.coords[:16, 0].tolist() == list(range(16))
    assert (b.shared_addr[16:32] - 1024).tolist() == list(range(16, 32))


def test_interleaved_rows_take_their_chunk_and_honour_the_inner_element_stride():
    # measured (tma_interleaved.npz): dimension 0 counts 16-byte chunks whatever the type, elementStrides[0]
    # steps over chunks, dimension rank - 2 is not traversed, rows are packed
    tm = tmap(DT.FLOAT16, 3, dims=(8, 4, 2), box=(8, 2, 1), est=(2, 1, 1), il=IL.B16)
    assert tm.unit_size == 16 and tm.elements_per_dim == (4, 1, 1) and tm.box_bytes == 64
    b = T.box_layout(tm, (0, 1, 1), 1024)
    assert b.coords[:, 0].tolist() == [0, 2, 4, 6] and (b.coords[:, 1:] == (1, 1)).all()
    assert b.row_pitch == 64
    assert (b.shared_addr - 1024).tolist() == [0, 16, 32, 48]
    assert (b.global_addr - np.uint64(tm.global_address)).tolist() == [s + tm.global_strides[0] + tm.global_strides[1]
                                                                       for s in (0, 32, 64, 96)]


def test_a_128b_swizzled_box_moves_chunks_by_row():
    tm = tmap(DT.FLOAT16, 2, dims=(64, 16), box=(64, 8), sw=SW.B128)
    b = T.box_layout(tm, (0, 0), 1024)
    chunk = ((b.shared_addr - 1024) % 128) // 16
    row = (b.shared_addr - 1024) // 128
    elem_chunk = (b.coords[:, 0] * 2) // 16
    assert (row == b.coords[:, 1]).all()
    assert (chunk == elem_chunk ^ (b.coords[:, 1] % 8)).all()


def test_rows_narrower_than_the_swizzle_span_take_the_whole_span():
    # HYPOTHESIS (T.PAD_ROWS_TO_SPAN), to be settled by the H100 record: 32-byte rows under the 64B swizzle
    tm = tmap(DT.FLOAT16, 2, dims=(64, 16), box=(16, 4), sw=SW.B64)
    b = T.box_layout(tm, (0, 0), 4096)
    assert b.row_pitch == 64 and b.shared_extent == 256
    plain = 4096 + (b.coords[:, 1] * 64) + b.coords[:, 0] * 2
    assert (b.shared_addr == T.swizzle_address(plain, SW.B64)).all()


@pytest.mark.parametrize("oob", [OobFill.NONE, OobFill.NAN_REQUEST_ZERO_FMA])
def test_out_of_bound_elements_read_as_the_fill_and_are_not_stored(oob):
    tm = tmap(DT.FLOAT16, 2, dims=(8, 2), box=(8, 2), oob=oob)
    mem = {GADDR + 2 * i + 16 * j: 0x3C00 + 8 * j + i for j in range(2) for i in range(8)}

    def read(addrs):
        return np.array([list(int(mem[int(a)]).to_bytes(2, "little")) for a in addrs], np.uint8)

    addrs, data = T.load_box(tm, (-3, 1), 1024, read)
    vals = data.view(np.uint16).reshape(2, 8)
    fill = 0x7FF7 if oob == OobFill.NAN_REQUEST_ZERO_FMA else 0  # the NaN the H100 writes (T.NAN_FILL)
    assert vals[0].tolist() == [fill, fill, fill, 0x3C08, 0x3C09, 0x3C0A, 0x3C0B, 0x3C0C]
    assert vals[1].tolist() == [fill] * 8  # row 2 lies past the tensor's 2 rows
    assert (addrs - 1024).tolist() == list(range(32))
    smem = np.arange(2048, dtype=np.uint32).astype(np.uint8)
    ga, elems = T.store_box(tm, (-3, 1), 1024, smem)
    assert (ga - GADDR).tolist() == [16 + 2 * i for i in range(5)]  # only the 5 elements inside
    assert elems.reshape(-1).tolist() == list(range(6, 16))


def test_stores_write_dimension_0_in_16_byte_chunks():
    # measured on the H100 (T.STORE_CHUNK): u8 rows of 13 elements, a box of 16: elements 13..15 share the
    # tensor's last 16-byte chunk and are written; rows past the tensor's 6 are not
    tm = tmap(DT.UINT8, 2, dims=(13, 6), strides=(16,), box=(16, 5))
    smem = np.arange(2048, dtype=np.uint32).astype(np.uint8)
    ga, elems = T.store_box(tm, (0, 3), 1024, smem)
    assert (ga - GADDR).tolist() == [16 * r + i for r in (3, 4, 5) for i in range(16)]
    assert T.store_mask(tm, T.box_layout(tm, (0, 3), 1024)).sum() == 48
    # a load fills the same elements as out of bounds
    _, data = T.load_box(tm, (0, 3), 1024, lambda a: np.full((len(a), 1), 7, np.uint8))
    assert data.reshape(5, 16)[0].tolist() == [7] * 13 + [0] * 3


def test_the_starts_the_h100_stops():
    f32 = tmap(DT.FLOAT32, 2, dims=(64, 8), box=(16, 4))
    assert T.illegal_start(f32, (4, 0), False) is None and T.illegal_start(f32, (-4, -2), False) is None
    assert "not 16-byte aligned" in T.illegal_start(f32, (2, 0), False)
    assert "negative tensor coordinate 1 = -2" in T.illegal_start(f32, (4, -2), True)


def test_box_coordinates_are_int32():
    with pytest.raises(ArgumentError, match=r"start\[1\]=2147483648: tensor coordinates are signed 32-bit"):
        T.box_layout(tmap(), (0, 1 << 31), 1024)
    b = T.box_layout(tmap(), (-(1 << 31), (1 << 31) - 1), 1024)
    assert not b.inside.any()


# ------------------------------------------------------------------------------------------------ reductions
def _b(values, dt):
    return np.ascontiguousarray(np.asarray(values, dt)).view(np.uint8).reshape(len(values), -1)


def test_reductions():
    f32 = T.reduce_elements("add", DT.FLOAT32, _b([1.0, 3.0, np.inf], np.float32),
                            _b([2.0 ** -24, 2.0 ** -23, -np.inf], np.float32)).view(np.uint32)[:, 0]
    assert f32.tolist() == [0x3F800000, 0x40400000, 0x7FFFFFFF]  # ties to even; Inf - Inf: the canonical NaN
    sub = np.array([1], np.uint32).view(np.float32)
    assert T.reduce_elements("add", DT.FLOAT32, _b(sub, np.float32), _b(sub, np.float32)).view(np.uint32)[0, 0] == 2
    assert T.reduce_elements("add", DT.FLOAT32_FTZ, _b(sub, np.float32), _b(sub, np.float32)).view(np.uint32)[0, 0] == 0
    h = T.reduce_elements("add", DT.FLOAT16, _b([0x3C00], np.uint16), _b([0x1000], np.uint16)).view(np.uint16)
    assert h[0, 0] == 0x3C00  # 1 + 2^-11 rounds to 1 (ties to even)
    bf = T.reduce_elements("add", DT.BFLOAT16, _b([0x3F80], np.uint16), _b([0x3F80], np.uint16)).view(np.uint16)
    assert bf[0, 0] == 0x4000
    u = T.reduce_elements("add", DT.UINT32, _b([0xFFFFFFFF], np.uint32), _b([2], np.uint32)).view(np.uint32)
    assert u[0, 0] == 1
    mn = T.reduce_elements("min", DT.INT32, _b([-5, 7], np.int32), _b([3, -9], np.int32)).view(np.int32)[:, 0]
    assert mn.tolist() == [-5, -9]
    mx = T.reduce_elements("max", DT.UINT32, _b([0xFFFFFFFB], np.uint32), _b([3], np.uint32)).view(np.uint32)
    assert mx[0, 0] == 0xFFFFFFFB
    inc = T.reduce_elements("inc", DT.UINT32, _b([5, 9], np.uint32), _b([9, 9], np.uint32)).view(np.uint32)[:, 0]
    assert inc.tolist() == [6, 0]
    dec = T.reduce_elements("dec", DT.UINT32, _b([0, 5, 12], np.uint32), _b([9, 9, 9], np.uint32)).view(np.uint32)
    assert dec[:, 0].tolist() == [9, 4, 9]
    x = T.reduce_elements("xor", DT.UINT64, _b([0xF0F0], np.uint64), _b([0xFF00], np.uint64)).view(np.uint64)
    assert x[0, 0] == 0x0FF0
    hm = T.reduce_elements("max", DT.FLOAT16, _b([0x8000, 0x7E00, 0x3C00], np.uint16),
                           _b([0x0000, 0x4000, 0x7E00], np.uint16)).view(np.uint16)[:, 0]
    assert hm.tolist() == [0x0000, 0x4000, 0x3C00]  # -0 < +0; a NaN operand is ignored
    with pytest.raises(NotImplementedError, match=r"\.min on FLOAT32"):
        T.reduce_elements("min", DT.FLOAT32, _b([1.0], np.float32), _b([2.0], np.float32))
    with pytest.raises(ArgumentError, match="op='mul'"):
        T.reduce_elements("mul", DT.UINT32, _b([1], np.uint32), _b([2], np.uint32))


# ------------------------------------------------------------------------------------------------ the interpreter
@pytest.fixture(scope="module")
def probe():
    return V.build()


def _cases():
    main = V.make_cases(0, 60)
    return main, V.reduce_cases(0)


def test_interpreter_runs_the_probe_kernels_as_the_model_says(probe):
    """tma_load / tma_store of probe_tma.cu (UTMALDG / UTMASTG / UTMAREDG / UTMAPF / UTMACCTL.PF, the map in the
    parameter window or in global memory) in the interpreter, byte for byte against flashsim.sass.tensormap."""
    main, red = _cases()
    seen = set()
    for c in main + red:
        if c.interleave:  # drawn by the documentation's reading of interleave: see the next test
            _interleaved_outcome(c, probe)
            seen.add(("interleave",))
            continue
        rec = V.run_case(0, c, probe)
        assert not rec.get("error"), rec.get("error")
        base = int(rec["load_info"][0, 3]) if c.op == "store" else int(rec["store_info"][0, 2])
        assert base == 0x400
        msgs = V.compare_case(rec, V.expected_case(0, c, int(rec["gaddr"]), base), "interpreter")
        assert not msgs, (c, msgs)
        if c.op == "store":
            assert (rec["load_info"][:, 0] == 1).all()  # the bounded wait saw the phase complete
            written = np.unpackbits(rec["load_same"])[:c.region].sum()
            assert written == c.tx  # exactly the box's bytes (rows not padded here: no gaps written)
        seen.add((c.rank, c.swizzle, c.interleave, max(c.estr) > 1, c.oob, bool(c.flags & V.F_GLOBAL_MAP), c.op))
    assert ("interleave",) in seen
    seen.discard(("interleave",))
    assert {s[0] for s in seen} == {1, 2, 3, 4, 5} and {s[1] for s in seen} == {0, 1, 2, 3}
    assert any(s[3] for s in seen) and any(s[4] for s in seen) and any(s[5] for s in seen)
    assert {s[6] for s in seen} == {"store", *T.REDUCE_OPS}


def _overruns(c) -> bool:
    """Whether a case's copies reach past its shared region (a load: its whole box; a store or reduction: the
    units it writes) or past its global buffer."""
    tm = c.tensor_map(0x7F00_0000_0000)
    for co, load in ((c.coords, True), (c.store_coords, False)):
        if load and c.op != "store":
            continue
        b = T.box_layout(tm, co[:c.rank], c.dst_off)
        keep = b.inside if load else T.store_mask(tm, b)
        sb = b.shared_bytes().reshape(len(keep), -1)[slice(None) if load else keep]
        if sb.size and sb.max() >= c.region:
            return True
        if keep.any() and int((b.global_addr[keep] - np.uint64(0x7F00_0000_0000)).max()) + tm.unit_size > c.buf_bytes:
            return True
    return False


def _interleaved_outcome(c, probe) -> str:
    """A case drawn by the documentation's reading of interleave (dimension 0 in elements, one chunk per row) in
    the interpreter, as the H100 ran such cases (traces/tma/tma_interleaved.npz): a box that overruns the shared
    allocation or the global buffer faults (the H100: an illegal address), a load whose expect-tx is not the box's bytes hangs (the
    H100's bounded wait timed out or, with more bytes than announced, sometimes completed), the rest match
    the model."""
    from flashsim.sass.machine import BarrierDeadlock

    tm = c.tensor_map(0x7F00_0000_0000)
    if _overruns(c):
        with pytest.raises(SimulatedFault, match=r"out-of-bounds (shared|global) address: "):
            V.run_case(0, c, probe)
        return "overrun"
    if c.op == "store" and c.tx != tm.box_bytes:
        more = c.tx < tm.box_bytes
        with pytest.raises(BarrierDeadlock, match=r"copies brought \d+ bytes more than expect_tx" if more else
                           r"tx-count \d+ bytes pending"):
            V.run_case(0, c, probe)
        return "hang"
    rec = V.run_case(0, c, probe)
    base = int(rec["load_info"][0, 3]) if c.op == "store" else int(rec["store_info"][0, 2])
    assert not V.compare_case(rec, V.expected_case(0, c, int(rec["gaddr"]), base), "interpreter"), c
    return "ran"


def test_interpreter_runs_interleaved_maps_as_the_model_says(probe):
    """Interleaved maps drawn by the measured model (V.interleave_cases: chunks along dimension 0, dimension
    rank - 2 not traversed, overlapping rows, reductions): every load completes its expect-tx of the model's box
    bytes, and loads, stores and reductions match flashsim.sass.tensormap byte for byte."""
    cases = V.interleave_cases(0)
    kinds = set()
    for c in cases:
        rec = V.run_case(0, c, probe)
        assert not rec.get("error"), rec.get("error")
        base = int(rec["load_info"][0, 3]) if c.op == "store" else int(rec["store_info"][0, 2])
        assert not V.compare_case(rec, V.expected_case(0, c, int(rec["gaddr"]), base), "interpreter"), c
        if c.op == "store":
            assert (rec["load_info"][:, 0] == 1).all(), c
        kinds.add((c.rank, c.interleave, c.swizzle, c.op == "store"))
    assert {k[0] for k in kinds} == {3, 4, 5} and {k[2] for k in kinds} == {0, 1, 2, 3} and {k[3] for k in kinds} == {
        True, False}


def test_interleaved_rows_overlap_and_reduce_in_box_order():
    """Rows narrower in global memory than in shared memory overlap: a store's later row wins, a reduction
    applies the rows in box order (T.in_order)."""
    tm = TensorMap.encode_tiled(DT.FLOAT16, 3, 0x10000, (8, 4, 2), (16, 256), (8, 4, 1), (1, 1, 1), IL.B16)
    assert tm.unit_size == 16 and tm.elements_per_dim == (8, 1, 1)  # dimension 1 (rank - 2) is not traversed
    tm = TensorMap.encode_tiled(DT.FLOAT16, 4, 0x10000, (8, 4, 2, 2), (16, 256, 512), (8, 4, 5, 2), (1, 1, 1, 1),
                                IL.B16)
    assert tm.elements_per_dim == (8, 4, 1, 2) and tm.box_bytes == 8 * 4 * 2 * 16
    b = T.box_layout(tm, (0, 0, 0, 0), 0)
    ga = (b.global_addr - np.uint64(0x10000)).astype(np.int64)
    assert list(ga[:9]) == [0, 16, 32, 48, 64, 80, 96, 112, 16]  # row 1 starts one chunk (stride 16) further
    layers = T.in_order(ga)
    assert len(layers) == 4  # the address 48 is in rows 0..3 of each dimension-3 index
    seen = np.zeros(len(ga), int)
    for j, lay in enumerate(layers):
        assert len(set(ga[lay])) == len(lay)  # an address at most once per layer
        seen[lay] += 1
        for i in lay:  # the j-th occurrence of its address
            assert (ga[:i] == ga[i]).sum() == j
    assert (seen == 1).all()


def test_interpreter_faults_name_the_field(probe):
    risky = {c.note: c for c in V.risky_cases(0)}
    with pytest.raises(SimulatedFault, match=r"misaligned shared address: cta=0 warp=0 lane=0 addr=0x810 \(the "
                                             r"shared destination of a tensor copy must be 128-byte aligned"):
        V.run_case(0, risky["shared box 16-aligned, not 128"], probe)
    with pytest.raises(NotImplementedError, match=r"\.min on FLOAT32.*pc=0x"):
        V.run_case(0, risky["reduce min on FLOAT32 (not a documented type)"], probe)
    with pytest.raises(SimulatedFault, match=r"illegal instruction: .*tensor coordinate 0 = 1 \(4 bytes\) is not "
                                             r"16-byte aligned"):
        V.run_case(0, risky["dimension 0 starting off a 16-byte boundary"], probe)
    with pytest.raises(SimulatedFault, match=r"illegal instruction: .*a store or reduction at negative tensor "
                                             r"coordinate 1 = -1"):
        V.run_case(0, risky["a store at a negative coordinate"], probe)

    c = next(c for c in V.make_cases(0, 40) if c.note == "inside" and c.rank == 2)

    class FarDriver(V.InterpDriver):  # the map addresses memory 1 MiB past its buffer
        def encode_tiled(self, ec):
            ec.addr += 1 << 20
            return super().encode_tiled(ec)

    with pytest.raises(SimulatedFault, match=r"out-of-bounds global address: .*tensor load's element at tensor "
                                             r"coordinates"):
        V.run_case(0, c, probe, driver=FarDriver())

    class Misaligned(V.InterpLauncher):  # the map in global memory, 16 bytes off its 64-byte alignment
        def launch(self, kernel, grid, block, shared, values):
            values = dict(values, gtm=int(values["gtm"].data.ptr) + 16, flags=values["flags"] | V.F_GLOBAL_MAP)
            super().launch(kernel, grid, block, shared, values)

    with pytest.raises(SimulatedFault, match=r"misaligned tensor map address: .*64-byte aligned"):
        V.run_case(0, c, probe, launcher=Misaligned(probe))

    class WrongRank(V.InterpLauncher):
        def launch(self, kernel, grid, block, shared, values):
            super().launch(kernel, grid, block, shared, dict(values, rank_bit=values["rank_bit"] << 1))

    with pytest.raises(SimulatedFault, match=r"tensor map misuse: .*a 3D instruction with a tensor map of rank 2"):
        V.run_case(0, c, probe, launcher=WrongRank(probe))


def test_generic_loads_read_grid_constant_parameters_through_the_parameter_window(probe):
    import flashsim.cuda as fc

    tm = bytes(range(128))
    tm2 = bytes((7 * i + 3) & 0xFF for i in range(128))
    out = fc.zeros(80, np.uint64)
    V.InterpLauncher(probe).launch("param_probe", 2, 32, 0, {"tm": tm, "x": 0x1234567, "tm2": tm2, "off": 0,
                                                             "out": out})
    o = out.get().reshape(2, 40)
    assert int(o[0, 0]) == PARAM_WINDOW + 0x210 + 0x30  # c[0x0][0x198] + (0x240 - 0x210)
    assert int(o[0, 1]) == PARAM_WINDOW + 0x210 + 0xF0
    assert o[0, 2:18].tobytes() == tm and o[0, 18:34].tobytes() == tm2
    assert (o[1, :34] == o[0, :34]).all() and int(o[0, 37]) == 0x1234567
    # past the parameters: a fault naming the window
    with pytest.raises(SimulatedFault, match="out-of-bounds parameter address"):
        V.InterpLauncher(probe).launch("param_probe", 1, 32, 0, {"tm": tm, "x": 1, "tm2": tm2, "off": 4096,
                                                                 "out": out})


def test_unmodelled_forms_raise_when_executed():
    import flashsim.cuda as fc

    src = r"""
    struct __align__(64) fs_tensor_map { unsigned long long opaque[16]; };
    extern "C" __global__ void im2col(const __grid_constant__ fs_tensor_map tm, int x, unsigned o) {
        __shared__ __align__(1024) unsigned char s[4096];
        __shared__ __align__(8) unsigned long long bar;
        unsigned sa = (unsigned)__cvta_generic_to_shared(s), ba = (unsigned)__cvta_generic_to_shared(&bar);
        asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes "
                     "[%0], [%1, {%2, %2, %2}], [%3], {%4};"
                     :: "r"(sa), "l"(&tm), "r"(x), "r"(ba), "h"((unsigned short)(o >> 3)) : "memory");
    }
    """
    k = fc.RawModule(code=src, options=("-std=c++17",)).get_function("im2col")
    with pytest.raises(NotImplementedError, match=r"UTMALDG.3D.IM2COL: the modifier .IM2COL of UTMALDG is not modelled: "
                                                  r"pc=0x[0-9a-f]{4}"):
        k((1,), (32,), (np.zeros(1, np.dtype([("o", "<u8", (16,))], align=True))[0], np.int32(0), np.uint32(0)))


def test_the_tensormap_proxy_fence_runs():
    """fence.proxy.tensormap: ptxas's DEPBAR on every scoreboard, then UTMACCTL.IV; both compared with the H100
    in traces/triton (the form probes, and the Triton suite's device tensor descriptors)."""
    import flashsim.cuda as fc

    src = r"""
    struct __align__(64) fs_tensor_map { unsigned long long opaque[16]; };
    extern "C" __global__ void fence_map(const __grid_constant__ fs_tensor_map tm, int* out) {
        asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;" :: "l"(&tm) : "memory");
        out[threadIdx.x] = threadIdx.x;
    }
    """
    mod = fc.RawModule(code=src, options=("-std=c++17",))
    f = mod.get_function("fence_map")
    names = {ins.text.split(" ")[0] for ins in f._prog().instructions.values()}
    assert {"DEPBAR", "UTMACCTL.IV"} <= names
    out = fc.zeros(32, np.int32)
    f((1,), (32,), (np.zeros(1, np.dtype([("o", "<u8", (16,))], align=True))[0], out))
    assert list(out.get()) == list(range(32))


def test_the_opcode_table_lists_the_tma_instructions():
    from flashsim.sass import opcodes

    names = {op for op, _ in opcodes.table()}
    assert {"UTMALDG", "UTMASTG", "UTMAREDG", "UTMAPF", "UTMACCTL", "UTMACMDFLUSH"} <= names


# ------------------------------------------------------------------------------------------------ the recording script
def test_the_probe_kernels_take_the_parameters_the_host_passes(probe):
    layout = V._check_cubin(probe)
    assert layout["tma_load"]["params"][0] == ("tm", 128, 0x30)  # 64-byte aligned in the bank: 0x210 + 0x30
    assert layout["param_probe"]["params"][2] == ("tm2", 128, 0xF0)


def test_the_encode_sweep_covers_what_the_driver_documents():
    cases = V.encode_cases(0)
    groups = {g: [c for c in cases if c.group == g] for g in ("base", "sweep", "random", "invalid")}
    assert len(groups["base"]) == 10 and {c.rank for c in groups["base"]} == {1, 2, 3, 4, 5}
    assert len(groups["random"]) >= 3000 and all(V.doc_verdict(c)[0] for c in groups["random"])
    assert len(groups["invalid"]) >= 500
    labels = {c.label for c in groups["invalid"]}
    assert labels == set(V._MUTATIONS)
    # every invalid call breaks a documented rule, except the probe of a stride shorter than its row, which
    # the documentation leaves open
    assert all(not V.doc_verdict(c)[0] for c in groups["invalid"] if c.label != "stride smaller than the row")
    swept = {c.label.split("[")[0] for c in groups["sweep"]}
    assert {"dtype", "addr bit 0", "addr bit 63", "dims", "strides", "box", "estr", "interleave", "swizzle", "l2",
            "oob", "tensorMap misaligned"} <= swept
    arrays = V.encode_arrays(groups["invalid"][:30])
    assert arrays["dims"].shape == (30, 7) and arrays["doc_reason"].dtype.kind == "U"


def test_fill_pattern_is_the_kernels_sentinel():
    p = V.fill_pattern(4, 12345)
    x = (np.arange(4, dtype=np.uint64) * 0x9E3779B1 + 12345) & 0xFFFFFFFF
    x ^= x >> 15
    x = (x * 0x85EBCA77) & 0xFFFFFFFF
    x ^= x >> 13
    assert p.tolist() == x.tolist() and (V.fill_pattern(4, 12345, True) == ~p).all()


def test_dry_run_builds_everything_without_a_gpu(tmp_path):
    rep = V.validate(tmp_path, seed=0, cases=400, record=False, dry_run=True, budget=60, log=lambda *a: None)
    assert rep["planned"]["load"] == 400 and rep["planned"]["encode"] > 14000
    assert rep["phases"]["encode"]["groups"]["random"] == 3000
    assert json.loads((tmp_path / "tma_report.json").read_text())["cubin_sha256"] == V.build().sha256
    with pytest.raises(ArgumentError, match="record"):
        V.main(["--out", str(tmp_path), "--dry-run", "--record"])


def test_the_run_survives_children_that_die(tmp_path):
    """The orchestration with a stand-in for the GPU (--fake): cases 2 and 5 kill their child process; the run
    records them as errors and goes on in fresh children."""
    env = dict(os.environ, FLASHSIM_TMA_FAKE_CRASH="2,5")
    p = subprocess.run([sys.executable, "-m", "flashsim.gpu.validate_tma", "--out", str(tmp_path), "--fake",
                        "--record", "--cases", "8", "--n-random", "20", "--n-invalid", "30"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    rep = json.loads((tmp_path / "tma_report.json").read_text())
    load = rep["phases"]["load"]
    assert load["cases"] == 8 and load["errors"] == 2 and load["notes"] == ["case 2: child exited 7",
                                                                            "case 5: child exited 7"]
    rec = V.load_record(tmp_path / "tma_probes.npz")
    assert rec["load/count"] == 8 and rec["load/error"][2].startswith("child exited 7")
    assert rec["load/rc"][2] == -1 and rec["load/rc"][3] == 0
    # the record keeps per-case inputs and outputs as sha256 (the inputs regenerate from the seed)
    assert "load/input" not in rec and rec["load/input_sha"].shape == (8, 32)
    c3 = V.case_from_record(V.record_case(rec, "load", 3), 3)
    assert np.array_equal(rec["load/input_sha"][3], V.sha_bytes(V._case_inputs(0, c3)[0]))
    assert not rec["load/input_sha"][2].any()  # a case whose child died has no input
    inter = V.load_record(tmp_path / "tma_interleaved.npz")  # interleaved cases, bytes and all
    flags = [int(inter[k]) for k in inter if k.endswith("/interleave")]
    assert flags and all(flags) and any(k.endswith("/store_out") for k in inter)
    assert rec["encode/bytes"].shape[1] == 128 and "cubin/probe" in rec


# ------------------------------------------------------------------------------------------------ the H100 record
NO_RECORD = pytest.mark.skipif(not V.TRACE_NPZ.exists(), reason="no H100 record yet: traces/tma/tma_probes.npz is "
                               "written by python -m flashsim.gpu.validate_tma --out DIR --record on the GPU (then "
                               "copied to traces/tma/)")


def _record_version(rec) -> int:
    return int(rec["probe_version"]) if "probe_version" in rec else 1


@NO_RECORD
def test_the_h100_record_agrees_with_the_box_model():
    """Every recorded case that ran, against flashsim.sass.tensormap alone (no interpreter): loads (both sentinel
    runs), stores and reductions bit for bit, interleaved maps included; the starts the H100 stopped are the ones
    illegal_start names (but the INT64 .xor of run 1), and the interleaved cases it stopped with an illegal
    address are those whose box overruns the shared allocation."""
    rec = V.load_record()
    for phase in ("load", "reduce", "risky"):
        n = int(rec[f"{phase}/count"])
        for i in range(n):
            got = V.record_case(rec, phase, i)
            err = str(got.get("error", ""))
            if err == "not run" or "cuTensorMapEncodeTiled" in err:
                continue
            c = V.case_from_record(got, i)
            tm = c.tensor_map(0x7F00_0000_0000)
            if err and c.interleave:
                assert "an illegal memory access" in err and _overruns(c), (phase, i, err)
                continue
            if err:
                if "misaligned address" in err:  # run 3: a shared box 16- or 64-aligned, not 128 (the model faults)
                    assert c.dst_off % T.SHARED_ALIGN, (phase, i, err)
                    continue
                load_stop = c.op == "store" and T.illegal_start(tm, c.coords[:c.rank], False)
                store_stop = T.illegal_start(tm, c.store_coords[:c.rank], True)
                unsupported = c.op != "store" and c.dtype not in {int(d) for d in T.REDUCE_TYPES[c.op]}
                assert "illegal instruction" in err and (load_stop or store_stop or unsupported), (phase, i, err)
                continue
            base = int(got["load_info"][0, 3]) if c.op == "store" else int(got["store_info"][0, 2])
            if "store_out_sha" in got:  # the record keeps the GPU's bytes as digests
                want = V.expected_digests(0, c, int(got["gaddr"]), base)
                bad = [k for k, v in want.items() if not np.array_equal(got[k], v)]
                assert want and not bad, (phase, i, c, bad)
            else:
                msgs = V.compare_case(got, V.expected_case(0, c, int(got["gaddr"]), base))
                assert not msgs, (phase, i, c, msgs)


#: the non-interleaved load/store and reduction cases of the probe-version-2 record that ran on the H100
REPLAYED_CASES = 400


@NO_RECORD
def test_replay_of_the_h100_record():
    """The recorded cubin's kernels in the interpreter on the recorded inputs, against the GPU's outputs; the
    recorded encodings against flashsim's checks (and, once derived, TensorMap.from_bytes)."""
    rec = V.load_record()
    if _record_version(rec) < V.PROBE_VERSION:
        pytest.skip(f"the record was made by probe version {_record_version(rec)} (switch dispatch compiled to a "
                    f"jump table in constant bank 2, which the interpreter does not load; other kernel arguments): "
                    f"record it again with version {V.PROBE_VERSION}")
    seed = int(json.loads(V.TRACE_JSON.read_text())["seed"]) if V.TRACE_JSON.exists() else 0
    b = V.build(bytes(rec["cubin/probe"]))
    # the encodings (flashsim.sass.cutensormap against every driver call) are tests/test_cutensormap.py's
    assert rec["encode/rc"].size == 14670
    # data movement: the GPU's map bytes mean the case's fields (TensorMap.from_bytes); the interpreter's
    # buffer has its own address, so the map is re-encoded there
    replayed = prefetched = map_prefetched = 0
    for phase in ("load", "reduce"):
        n = int(rec[f"{phase}/count"])
        for i in range(n):
            got = V.record_case(rec, phase, i)
            if int(got.get("rc", -1)) != 0 or str(got.get("error", "")):
                continue
            c = V.case_from_record(got, i)
            if c.interleave and c.op == "store" and c.tx != c.tensor_map(0x7F00_0000_0000).box_bytes:
                continue  # the interpreter reports a hang (tests/test_tma.py: _interleaved_outcome)
            tm = TensorMap.from_bytes(bytes(got["map"]))
            assert tm == c.tensor_map(int(got["gaddr"])), f"{phase} case {i}: the GPU's map bytes give {tm}"

            class Relocating(V.InterpDriver):
                def encode_tiled(self, ec, tm=tm):
                    return 0, tm.replace(global_address=ec.addr).to_bytes()

            mine = V.run_case(seed, c, b, driver=Relocating())
            if "store_out_sha" in got:  # digests: bit for bit without the bytes
                for k, v in V.digest_case(mine).items():
                    if k in ("input_sha", "store_src_sha"):
                        assert np.array_equal(v, got[k]), f"{phase} case {i}: {k}: the inputs did not regenerate"
                    elif k in got:
                        assert np.array_equal(v, got[k]), f"{phase} case {i} ({c.note}): {k[:-4]} differs from the H100"
            else:
                for k in ("load_dump", "load_same", "store_out", "store_same"):
                    if k in got:
                        assert np.array_equal(mine[k], got[k]), f"{phase} case {i} ({c.note}): {k} differs from the H100"
            replayed += 1
            prefetched += bool(c.flags & V.F_PREFETCH)
            map_prefetched += bool(c.flags & V.F_PREFETCH_MAP)
    assert replayed >= REPLAYED_CASES, replayed
    # UTMAPF (cp.async.bulk.prefetch.tensor) and UTMACCTL.PF (prefetch.tensormap) before the copy
    assert (prefetched, map_prefetched) == (34, 36)


#: the interleaved cases of run 4 (traces/tma/tma_interleaved.npz, bytes and all): how many ran on the H100,
#: how many of those the box model gets wrong (21 before interleave was modelled), and what the interpreter
#: makes of all of them (the H100's 12 illegal addresses are boxes overrunning the allocation; a load whose
#: expect-tx is not the box's bytes hangs)
INTERLEAVED = {"cases": 34, "ran": 22, "model_differs": 0, "overrun": 12, "hang": 16, "interpreter_ran": 6}


def test_the_interleaved_cases_are_kept_for_a_model_of_interleave(probe):
    inter = V.load_record(V.TRACE_DIR / "tma_interleaved.npz")
    main = V.load_record()
    seed = int(json.loads(V.TRACE_JSON.read_text())["seed"])
    cases = sorted({k.rsplit("/", 1)[0] for k in inter})
    ran = differs = 0
    outcomes = {"overrun": 0, "hang": 0, "ran": 0}
    for key in cases:
        phase, i = key.split("/")
        got = {k.rsplit("/", 1)[1]: inter[k] for k in inter if k.startswith(key + "/")}
        c = V.case_from_record(got, int(i))
        assert c.interleave and V.case_from_record(V.record_case(main, phase, int(i)), int(i)) == c  # run 3's case
        outcomes[_interleaved_outcome(c, probe)] += 1
        if int(got.get("rc", -1)) != 0 or str(got.get("error", "")):
            assert "an illegal memory access" in str(got["error"]) and _overruns(c), key
            continue
        ran += 1
        got["input"], got["store_src"] = V._case_inputs(seed, c)
        base = int(got["load_info"][0, 3]) if c.op == "store" else int(got["store_info"][0, 2])
        differs += bool(V.compare_case(got, V.expected_case(seed, c, int(got["gaddr"]), base)))
    got = {"cases": len(cases), "ran": ran, "model_differs": differs, "overrun": outcomes["overrun"],
           "hang": outcomes["hang"], "interpreter_ran": outcomes["ran"]}
    assert got == INTERLEAVED, got


#: run 5 (traces/tma/tma_interleave_run5.npz): V.interleave_cases(0), drawn by the model after it was read off
#: runs 3 and 4, on the H100; every output kept as sha256
RUN5 = {"cases": 160, "loads": 122, "reductions": 38}


@NO_RECORD
def test_the_held_out_interleave_record_matches_the_model_and_the_interpreter():
    """Run 5, held out from the model's derivation: every case's GPU outputs equal the model's (digests) and the
    interpreter's on the same cubin, and every load completed its expect-tx of the model's box bytes."""
    rec = V.load_record(V.TRACE_DIR / "tma_interleave_run5.npz")
    meta = json.loads((V.TRACE_DIR / "tma_interleave_run5.json").read_text())
    assert meta["seed"] == 0 and meta["phases"]["interleave"]["model"]["differ"] == 0
    probe = V.build(bytes(V.load_record()["cubin/probe"]))  # the cubin of run 3, which run 5 ran too
    assert meta["cubin_sha256"] == probe.sha256
    planned = V.interleave_cases(0)
    loads = reductions = 0
    for i, c in enumerate(planned):
        got = {k.rsplit("/", 1)[1]: rec[k] for k in rec if k.startswith(f"interleave/{i}/")}
        assert V.case_from_record(got, i) == c, i
        assert int(got["rc"]) == 0 and not str(got.get("error", ""))
        base = int(got["load_info"][0, 3]) if c.op == "store" else int(got["store_info"][0, 2])
        want = V.expected_digests(0, c, int(got["gaddr"]), base)
        assert want and all(np.array_equal(got[k], v) for k, v in want.items()), (i, c)
        mine = V.digest_case(V.run_case(0, c, probe))
        assert all(np.array_equal(got[k], v) for k, v in mine.items() if k in got), (i, c)
        if c.op == "store":
            assert (got["load_info"][:, 0] == 1).all(), i
            loads += 1
        else:
            reductions += 1
    assert {"cases": len(planned), "loads": loads, "reductions": reductions} == RUN5


@pytest.mark.gpu
def test_fresh_interleaved_maps_on_the_gpu(tmp_path):
    """A fresh seed's interleaved maps (V.interleave_cases) on the GPU against the model: all equal, every load
    completes its expect-tx of the model's box bytes."""
    rep = V.validate(tmp_path, seed=11, cases=1, record=False, dry_run=False, budget=240, phases=("interleave",),
                     log=lambda *a: None)
    e = rep["phases"]["interleave"]
    assert e["errors"] == 0 and e["model"]["differ"] == 0 and e["model"]["equal"] == e["cases"] == 160, e
    loads = sum(1 for c in V.interleave_cases(11) if c.op == "store")
    assert e["model"]["loads_completed"] == loads


def test_the_cli_names_a_bad_phase(capsys):
    with pytest.raises(SystemExit) as exc:
        V.main(["--out", "unused", "--phases", "load,intreleave"])
    assert exc.value.code == 2
    assert "--phases='load,intreleave': unknown phase 'intreleave'; the phases are encode" in capsys.readouterr().err
