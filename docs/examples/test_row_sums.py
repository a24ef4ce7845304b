"""A differential test of tests/data/run_example.cu with both bugs fixed (docs/examples/row_sums_fixed.cu).

Under `pytest --gpu` the cubin runs on the GPU and in flashsim's interpreter and every array must be
bit-identical (`--update-golden` also stores the GPU's results under traces/golden/). Without a GPU the
interpreter's results must equal those stored results.
"""
from pathlib import Path

import numpy as np

import flashsim.cuda as fc
from flashsim.testing import assert_matches_gpu

SRC = Path(__file__).with_name("row_sums_fixed.cu")


def test_row_sums_matches_the_gpu():
    mod = fc.RawModule(code=SRC.read_text(), name=SRC.name)
    tiles = np.random.default_rng(0).standard_normal((4, 32, 32), dtype=np.float32)
    out = np.zeros(128, np.float32)
    assert_matches_gpu(mod, "row_sums", (4,), (64,), (tiles, out, np.float32(0.5)))
