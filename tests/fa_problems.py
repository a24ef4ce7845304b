"""Seeded random FlashAttention problems in the v5/v6 kernels' domain, shared by the kernel and twin tests."""

import numpy as np


def random_problem(seed):
    """(q, k, v) float16 (batch, seqlen, heads, d): batch 1-2, heads 1-2, seqlens multiples of 64, d 16/32/64."""
    rng = np.random.default_rng(seed)
    batch, heads = rng.integers(1, 3, 2)
    seqlen_q, seqlen_k = 64 * rng.integers(1, 5, 2)
    d = int(rng.choice([16, 32, 64]))
    q = rng.standard_normal((batch, seqlen_q, heads, d)).astype(np.float16)
    k = rng.standard_normal((batch, seqlen_k, heads, d)).astype(np.float16)
    v = rng.standard_normal((batch, seqlen_k, heads, d)).astype(np.float16)
    return q, k, v
