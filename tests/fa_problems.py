"""Seeded random FlashAttention problems in the v5/v6 kernels' domain, shared by the kernel and twin tests:
flashsim.kernels.problems' generator (the one every kernel's problems come from) with N(0, 1) values."""

import numpy as np

from flashsim.kernels.problems import draw_params, make_case, rng_pick


def random_problem(seed):
    """(q, k, v) float16 (batch, seqlen, heads, d) in v5's domain (flashsim.kernels.spec), normal values."""
    case = make_case(dict(draw_params(rng_pick(np.random.default_rng(seed)), "v5"), kind="normal"))
    return case.q, case.k, case.v
