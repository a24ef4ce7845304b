"""pytest --gpu: every FlashAttention CUDA kernel against its twin on hypothesis-drawn problems (shapes, GQA
ratios, masks, softcap, dtypes, value kinds), bit for bit, and against float64 with flash-attn's rule.

``FLASHSIM_FA_EXAMPLES`` sets the examples per kernel (default 25; gpu/validate_fa.py runs 200 per kernel
with a seeded generator over the same domain and writes the report)."""

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flashsim.kernels import problems
from flashsim.strategies import fa_cases

EXAMPLES = int(os.environ.get("FLASHSIM_FA_EXAMPLES", "25"))


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", problems.KERNELS)
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_twin_is_bit_identical_to_the_gpu(kernel, data):
    from flashsim.gpu.fa_kernels import run_kernel
    from flashsim.gpu.validate_fa import check_case

    res, _ = check_case(data.draw(fa_cases(kernel)), run_kernel)
    assert res["out_diff"] is None, f"{res['case']}: out differs {res['out_diff']}"
    assert res["lse_diff"] is None, f"{res['case']}: lse differs {res['lse_diff']}"
    assert res["rule"] is not False, f"{res['case']}: {res['rule_detail']}"  # None: non-finite inputs
