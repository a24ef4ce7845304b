"""The arithmetic twin of the v5/v6 kernels: accuracy on the CPU, bit-exact against the GPU under --gpu."""

import numpy as np
import pytest
from fa_problems import random_problem

from flashsim import ArgumentError
from flashsim.attention import attention_lowp, attention_reference, check_args, passes_flash_attn_rule
from flashsim.kernels import fa_v5


@pytest.mark.parametrize("seed", range(3))
def test_twin_passes_flash_attn_rule(seed):
    q, k, v = random_problem(seed)
    args = check_args(q, k, v)
    ref, _ = attention_reference(q, k, v, args)
    lowp, _ = attention_lowp(q, k, v, args, acc="f16")
    r = passes_flash_attn_rule(fa_v5.run(q, k, v), ref, lowp)
    assert r, r


def test_twin_preconditions():
    q = np.zeros((1, 32, 1, 16), np.float16)
    with pytest.raises(ArgumentError, match=r"seqlen_q % 64"):
        fa_v5.run(q, q, q)
    with pytest.raises(ArgumentError, match="float16"):
        x = np.zeros((1, 64, 1, 16), np.float32)
        fa_v5.run(x, x, x)


@pytest.mark.gpu
@pytest.mark.parametrize("seed", range(24))
def test_twin_is_bit_exact_against_the_gpu(seed):
    from flashsim.gpu.fa_kernels import run_fa

    q, k, v = random_problem(seed)
    twin = fa_v5.run(q, k, v).view(np.uint16)
    for kernel in ("v5", "v6"):
        gpu = run_fa(kernel, q, k, v).view(np.uint16)
        bad = np.argwhere(gpu != twin)
        assert bad.size == 0, (kernel, len(bad), [(tuple(i), hex(gpu[tuple(i)]), hex(twin[tuple(i)])) for i in bad[:5]])


@pytest.mark.gpu
def test_twin_is_bit_exact_with_nan_and_large_logits():
    from flashsim.gpu.fa_kernels import run_fa

    rng = np.random.default_rng(11)
    q = (rng.standard_normal((1, 128, 2, 32)) * 8).astype(np.float16)
    k = (rng.standard_normal((1, 64, 2, 32)) * 8).astype(np.float16)
    v = rng.standard_normal((1, 64, 2, 32)).astype(np.float16)
    q[0, 5, 1, 3] = np.nan
    assert np.array_equal(run_fa("v5", q, k, v).view(np.uint16), fa_v5.run(q, k, v).view(np.uint16))


def test_twin_replays_the_recorded_gpu_outputs_bit_for_bit():
    """traces/fa/fa_v5.npz: v5 and v6 outputs recorded on an sm_90 GPU (gpu/record_fa_golden.py)."""
    from pathlib import Path

    from flashsim.golden import load

    arrays, prov = load(Path(__file__).resolve().parent.parent / "traces" / "fa" / "fa_v5.npz")
    assert prov["compute_capability"].startswith("9.0")
    n = len({k.split("/")[0] for k in arrays})
    assert n >= 5
    for i in range(n):
        q, k, v = (arrays[f"{i}/{x}"].view(np.float16) for x in "qkv")
        twin = fa_v5.run(q, k, v).view(np.uint16)
        for kernel in ("v5", "v6"):
            gpu = arrays[f"{i}/out_{kernel}"]
            assert np.array_equal(gpu, twin), (i, kernel, int(np.sum(gpu != twin)))
