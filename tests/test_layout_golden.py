"""Golden CuTe prints (tests/data/cute_golden.json): expression -> what CuTe prints, with the source of each."""

import json
import re
from pathlib import Path

import pytest

from flashsim.layout import (
    COPY_OPS, Copy_Atom, Layout, S, Swizzle, composition, make_layout, make_tensor, make_tiled_copy,
    print_layout, rank, size, stride, tile_to_shape,
)
from flashsim.layout.expr import cute_str, evaluate_expression

GOLDEN = json.loads((Path(__file__).parent / "data" / "cute_golden.json").read_text())["cases"]


def _values(s):  # the numbers only: drop CuTe's static marker
    return re.sub(r"_(-?\d)", r"\1", s)


def _dsl(s):  # CuTe DSL's static print: static integers bare, dynamic ones '?'
    return re.sub(r"(?<![_\d])\d+", "?", s).replace("_", "")


@pytest.mark.parametrize("case", GOLDEN, ids=[f"{i}" for i in range(len(GOLDEN))])
def test_golden_print(case):
    got = cute_str(evaluate_expression(case["expr"]))
    exp, match = case["expect"], case["match"]
    if match == "exact":
        assert got == exp, case["source"]
    elif match == "rstrip_lines":
        assert [ln.rstrip() for ln in got.split("\n")] == [ln.rstrip() for ln in exp.split("\n")], case["source"]
    elif match == "dsl":
        assert _dsl(got) == exp, case["source"]
    elif match == "values":
        assert _values(got) == _values(exp), case["source"]
    else:
        pytest.fail(f"unknown match kind {match!r}")


def test_golden_set_is_large_and_sourced():
    exact = [c for c in GOLDEN if c["match"] in ("exact", "rstrip_lines")]
    assert len(exact) >= 50
    assert all(c["source"] for c in GOLDEN)
    assert len({c["source"].split(":")[-1].split(" ")[0] for c in GOLDEN}) >= 8


# The three outputs of seed 000 (FlashAttention-2 read through CuTe), built with the Python API directly.

def test_seed_sQ_swizzled_tile_to_shape():
    atom = composition(Swizzle(3, 3, 3), Layout((S(8), S(64)), (S(64), S(1))))
    sQ = tile_to_shape(atom, (S(128), S(128)))
    assert str(sQ) == "Sw<3,3,3> o _0 o ((_8,_16),(_64,_2)):((_64,_512),(_1,_8192))"


def test_seed_gQ_column_major():
    assert str(make_layout((128, 128), (S(1), 128))) == "(128,128):(_1,128)"


def test_seed_thread10_partitions():
    tc = make_tiled_copy(Copy_Atom(COPY_OPS["SM80_CP_ASYNC_CACHEGLOBAL"]("uint128_t"), "half_t"),
                         Layout((S(16), S(8)), (S(8), S(1))), Layout((S(1), S(8))))
    thr = tc.get_thread_slice(10)
    gQ = make_tensor(Layout((128, 128), (S(1), 128)))
    sQ = make_tensor(tile_to_shape(composition(Swizzle(3, 3, 3), Layout((S(8), S(64)), (S(64), S(1)))), (S(128), S(128))))
    tQgQ, tQsQ = thr.partition_S(gQ), thr.partition_D(sQ)
    assert str(tQgQ.layout()) == "((_8,_1),8,2):((128,_0),_16,8192)"
    assert str(tQsQ.layout()) == "((_8,_1),_8,_2):((_1,_0),_1024,_8192)"
    assert cute_str(stride(tQsQ)) == "((_1,_0),_1024,_8192)"
    assert (cute_str(size(tQgQ)), cute_str(size(tQsQ)), cute_str(rank(tQgQ))) == ("128", "_128", "_3")
    # thread 10 copies row 1, columns 16..23 of the tile: element offset 80, 88 after Sw<3,3,3>
    assert int(tQgQ.data.offset) == 1 + 16 * 128 and int(tQsQ.data.offset) == 88


def test_print_layout_is_cutes_table_byte_for_byte():
    out = print_layout(Layout((S(2), S(3)), (S(3), S(1))))
    assert out == ("(_2,_3):(_3,_1)\n"
                   "      0   1   2 \n"
                   "    +---+---+---+\n"
                   " 0  | 0 | 1 | 2 |\n"
                   "    +---+---+---+\n"
                   " 1  | 3 | 4 | 5 |\n"
                   "    +---+---+---+\n")
