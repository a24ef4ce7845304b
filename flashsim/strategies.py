"""Public hypothesis strategies: f16/bf16/f32 bit patterns, mma tiles with a controlled exponent spread, shapes.

Draw bit patterns, not floats, so -0, NaN payloads, Inf and subnormals appear often. Importing this
module needs hypothesis (the ``test`` extra).
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from flashsim.errors import bad_argument
from flashsim.numerics.formats import FloatFormat, format_named


def special_values(fmt: FloatFormat) -> list[int]:
    """Bit patterns worth trying in every test: zeros, limits of each range, Inf, NaNs."""
    fmt = format_named(fmt)
    m, s = fmt.mbits, fmt.sign_bit
    frac_all = (1 << m) - 1
    pos = [
        0,                              # +0
        1,                              # smallest subnormal
        frac_all,                       # largest subnormal
        1 << m,                         # smallest normal
        (1 << m) | 1,
        fmt.bias << m,                  # 1.0
        (fmt.bias << m) | 1,            # 1 + ulp
        ((fmt.bias - 1) << m) | frac_all,  # 1 - ulp/2
        fmt.max_finite,
        fmt.max_finite - 1,
        fmt.inf,
        fmt.inf | 1,                    # signalling-looking NaN, smallest payload
        fmt.canonical_nan,              # canonical NaN
        fmt.inf | (1 << (m - 1)),       # quiet NaN, no payload
    ]
    return sorted(set(pos + [p | s for p in pos]))


def float_bits(fmt, *, special_weight: float = 0.25, subnormal_weight: float = 0.15,
               exp_range: tuple[int, int] | None = None) -> st.SearchStrategy[int]:
    """One bit pattern of ``fmt`` (as a Python int), weighted toward specials, subnormals, powers of two.

    ``exp_range=(lo, hi)`` restricts the finite draws to unbiased exponents lo..hi.
    """
    fmt = format_named(fmt)
    m = fmt.mbits
    sign = st.sampled_from([0, fmt.sign_bit])
    if exp_range is None:
        field = st.integers(0, fmt.exp_mask)
    else:
        lo, hi = exp_range
        field = st.integers(max(lo + fmt.bias, 1), min(hi + fmt.bias, fmt.exp_mask - 1))
    any_bits = st.integers(0, (1 << fmt.nbits) - 1)
    normal = st.builds(lambda s, e, f: s | (e << m) | f, sign, field, st.integers(0, (1 << m) - 1))
    pow2 = st.builds(lambda s, e: s | (e << m), sign, field)
    sub = st.builds(lambda s, f: s | f, sign, st.integers(1, (1 << m) - 1))
    specials = st.sampled_from(special_values(fmt))
    rest = max(0.0, 1.0 - special_weight - subnormal_weight)
    choices = [(special_weight, specials), (subnormal_weight, sub), (rest * 0.5, normal),
               (rest * 0.2, pow2), (rest * 0.3, normal if exp_range else any_bits)]
    # hypothesis has no weighted one_of; draw a selector with the requested weights
    weights = np.array([w for w, _ in choices], float)
    cuts = np.cumsum(weights / weights.sum())

    @st.composite
    def pick(draw):
        u = draw(st.floats(0, 1, exclude_max=True))
        idx = int(np.searchsorted(cuts, u, side="right"))
        return draw(choices[min(idx, len(choices) - 1)][1])

    return pick()


def bit_arrays(fmt, shape, **kwargs) -> st.SearchStrategy[np.ndarray]:
    """An array of ``fmt`` bit patterns with the given shape (elements from ``float_bits``)."""
    fmt = format_named(fmt)
    return hnp.arrays(np.dtype(fmt.dtype), shape, elements=float_bits(fmt, **kwargs))


_KERNEL_FLOATS = {"float16": "f16", "bfloat16": "bf16", "float32": "f32"}


def kernel_arrays(dtype, shape, *, bits: bool = True, **kwargs) -> st.SearchStrategy[np.ndarray]:
    """Inputs for a kernel argument: an array of ``dtype`` (numpy or ml_dtypes bfloat16; floats of 16/32
    bits, or any integer type) and ``shape`` (a tuple or a strategy of tuples, e.g. ``shapes()``).

    Floats are drawn as bit patterns (``float_bits``: -0, NaN payloads, Inf, subnormals often), viewed as
    ``dtype``; with ``bits=False`` as finite values of moderate size instead (for kernels whose result is
    only meaningful on them). Integers cover their whole range. ``kwargs`` go to ``float_bits``."""
    dt = np.dtype(dtype)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return hnp.arrays(dt, shape, elements=st.integers(int(info.min), int(info.max)))
    name = _KERNEL_FLOATS.get(dt.name)
    if name is None:
        raise bad_argument("dtype", dt.name, "expected float16, bfloat16, float32 or an integer type")
    if not bits:
        return hnp.arrays(np.float32, shape, elements=st.floats(-8, 8, width=32)).map(lambda a: a.astype(dt))
    fmt = format_named(name)
    raw = hnp.arrays(np.dtype(fmt.dtype), shape, elements=float_bits(fmt, **kwargs))
    return raw.map(lambda a: a.view(dt))


def shapes(max_batch_dims: int = 2, max_side: int = 4) -> st.SearchStrategy[tuple[int, ...]]:
    """Batch shapes (leading axes) for batched instruction inputs."""
    return hnp.array_shapes(min_dims=0, max_dims=max_batch_dims, min_side=1, max_side=max_side)


@st.composite
def mma_tiles(draw, atype: str = "f16", ctype: str = "f32", k: int = 16, *, spread: int | None = None,
              batch: int = 1, specials: bool = True):
    """(a, b, c) bit arrays for one batch of mma tiles.

    ``spread`` bounds the exponents of A, B and C to a window of that many binades (0 = all terms
    of one binade), placed at a drawn centre; ``None`` draws from the whole format.
    """
    af, cf = format_named(atype, "atype"), format_named(ctype, "ctype")
    if spread is None:
        a_kw = c_kw = {}
    else:
        centre = draw(st.integers(-6, 6))
        # the window holds every finite draw: no subnormals outside it
        a_kw = {"exp_range": (centre - spread // 2, centre - spread // 2 + spread), "subnormal_weight": 0.0}
        c_kw = {"exp_range": (2 * centre - spread, 2 * centre + spread), "subnormal_weight": 0.0}
    if not specials:
        a_kw = dict(a_kw, special_weight=0.0)
        c_kw = dict(c_kw, special_weight=0.0)
    a = draw(bit_arrays(af, (batch, 16, k), **a_kw))
    b = draw(bit_arrays(af, (batch, k, 8), **a_kw))
    c = draw(bit_arrays(cf, (batch, 16, 8), **c_kw))
    return a, b, c


def fa_cases(kernel: str, force: dict | None = None):
    """Random FlashAttention problems in ``kernel``'s domain (``flashsim.kernels.problems``): every parameter
    is drawn by hypothesis, so a failing problem shrinks toward small shapes, no masks and normal values.
    ``force`` maps a parameter to the options it is drawn from instead (a feature forced on)."""
    from flashsim.kernels.problems import draw_params, make_case

    @st.composite
    def _case(draw):
        return make_case(draw_params(lambda name, options: draw(st.sampled_from(list(options))), kernel, force))

    return _case()


def extra_cases(kernel: str, **fixed):
    """Random problems for the interpreter's extra kernels (``flashsim.kernels.extra``: attn_regs, attn_spill,
    attn_varlen), drawn through the same ``pick`` interface as :func:`fa_cases`, so a failing one shrinks
    toward few, short sequences; ``fixed`` (max_seqlen, dtype, headdim, causal) as ``extra.draw_params``."""
    from flashsim.kernels.extra import draw_params, make_problem

    @st.composite
    def _case(draw):
        params = draw_params(lambda name, options: draw(st.sampled_from(list(options)), label=name), kernel, **fixed)
        return make_problem(kernel, draw(st.integers(0, 2**16 - 1), label="seed"), **params)

    return _case()
