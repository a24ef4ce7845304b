"""The warp-level mma: fragments in and out around flashsim.numerics, for every modelled variant."""

from __future__ import annotations

import numpy as np
import pytest

from flashsim.errors import ArgumentError
from flashsim.numerics.mma import mma as mma_tiles
from flashsim.warp import fragment, mma, pack, unpack

VARIANTS = [("m16n8k16", "f16", "f32"), ("m16n8k16", "bf16", "f32"), ("m16n8k16", "f16", "f16"),
            ("m16n8k8", "f16", "f32"), ("m16n8k8", "bf16", "f32")]


@pytest.mark.parametrize(("shape", "atype", "ctype"), VARIANTS)
def test_warp_mma_equals_the_tile_model_on_random_bits(shape, atype, ctype):
    k = 16 if shape == "m16n8k16" else 8
    rng = np.random.default_rng(7)
    a = rng.integers(0, 1 << 16, (2, 3, 16, k), dtype=np.uint64).astype(np.uint16)
    b = rng.integers(0, 1 << 16, (2, 3, k, 8), dtype=np.uint64).astype(np.uint16)
    cdt = np.uint32 if ctype == "f32" else np.uint16
    c = rng.integers(0, 1 << (32 if ctype == "f32" else 16), (2, 3, 16, 8), dtype=np.uint64).astype(cdt)
    inst = f"mma.{shape}"
    fa, fb, fc = fragment(inst, "A", atype), fragment(inst, "B", atype), fragment(inst, "C", ctype)
    d, ev = mma(pack(fa, a), pack(fb, b), pack(fc, c), shape=shape, atype=atype, ctype=ctype)
    assert d.shape == (2, 3, 32, fc.regs)
    np.testing.assert_array_equal(unpack(fc, d), mma_tiles(a, b, c, k=k, atype=atype, ctype=ctype))
    assert ev.op == f"mma.sync.aligned.{shape}.row.col.{ctype}.{atype}.{atype}.{ctype}"


def test_bad_fragments():
    a, b, c = np.zeros((32, 4), np.uint32), np.zeros((32, 2), np.uint32), np.zeros((32, 4), np.uint32)
    with pytest.raises(ArgumentError, match=r"b=.*expected shape \(32, 2\)"):
        mma(a, np.zeros((32, 1), np.uint32), c)
    with pytest.raises(ArgumentError, match=r"c=.*uint32.*float32"):
        mma(a, b, np.zeros((32, 4), np.float32))
    with pytest.raises(ArgumentError, match="lane axis has 16 entries"):
        mma(np.zeros((16, 4), np.uint32), b, c)
    with pytest.raises(ArgumentError, match="shape='m16n8k32'"):
        mma(a, b, c, shape="m16n8k32")
    with pytest.raises(NotImplementedError, match="not modelled"):
        mma(np.zeros((32, 2), np.uint32), np.zeros((32, 1), np.uint32), np.zeros((32, 2), np.uint32),
            shape="m16n8k8", ctype="f16")
