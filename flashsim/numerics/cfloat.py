"""CUDA C ``float`` arithmetic on f32 bit patterns, as nvcc compiles it under given flags, written as C is.

A :class:`Float` is an array of f32 bit patterns (uint32) with the compile mode it was built under
(:class:`FloatMode`: ``-ftz=true`` and/or ``--use_fast_math``). Its operators are the instructions nvcc emits
for the C operators, so a twin reads like its .cu file::

    F = FloatMode(ftz=True, fast_math=True)                 # fa2.cu: --use_fast_math
    p = exp2f(F(s) * scale_log2 - max_scaled[..., None])    # FFMA.FTZ t, s, scale, -max ; MUFU.EX2

- ``a + b``, ``a - b``: FADD{.FTZ} (``a - b`` is FADD a, -b).
- ``a * b``: FMUL{.FTZ}, unless the product is first consumed by a ``+`` or ``-``: then the two are one
  FFMA{.FTZ} (nvcc contracts a product whose one use is an add, ``-fmad=true``, its default). A product whose
  value was used first (as an operand of anything else: a max, a function, a multiply, a comparison,
  ``.bits``) is rounded once and stays rounded. Where the kernel's SASS keeps a multiply and an add apart,
  say so with :func:`fmul_rn` (CUDA's ``__fmul_rn``, never contracted). With two unrounded products,
  ``a * b + c * d`` contracts the left one: ``FMUL t, c, d ; FFMA r, a, b, t``, as nvcc 13.0 emits it.
- ``-a``: a sign flip (an operand modifier of the FADD/FFMA that reads it: exact).
- ``1.0 / a``: the reciprocal ``1.0f / x`` compiles to (``cuda_math.reciprocal``: MUFU.RCP under fast
  math, IEEE rcp.rn{.ftz} otherwise); other divisions are not modelled.
- ``==``, ``!=``, ``<``, ``>``, ``<=``, ``>=``: FSETP{.FTZ} (ordered, ``!=`` unordered as C's), giving
  numpy bool arrays; under ftz a subnormal operand compares as a zero.
- ``x[idx]``: numpy indexing of the lanes' values (a shuffle partner, a register).
- Operands broadcast as numpy arrays do; a Python or numpy float is a ``float`` constant (rounded to f32),
  a uint32 array or scalar is already a bit pattern.

The library calls (:func:`exp2f`, :func:`__expf`, :func:`expf`, :func:`__logf`, :func:`fmaxf`,
:func:`tanh_approx`) are ``flashsim.numerics.cuda_math`` / ``sfu`` under the operand's mode. Every value is
computed by ``fp32`` / ``sfu`` on the bit patterns: this module only decides which instruction runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from flashsim.errors import bad_argument
from flashsim.numerics import cuda_math, fp32, sfu

__all__ = ["FAST_MATH", "FTZ", "Float", "FloatMode", "__expf", "__logf", "exp2f", "expf", "fmaxf", "fmul_rn",
           "tanh_approx", "where"]

_SIGN = np.uint32(0x80000000)
_EXP = np.uint32(0x7F800000)


@dataclass(frozen=True)
class FloatMode:
    """The flags a kernel's f32 code was compiled with: ``ftz`` (``-ftz=true``: every FADD/FMUL/FFMA/FSETP
    .FTZ, approx instructions .ftz) and ``fast_math`` (``--use_fast_math``: the intrinsic forms of the
    library calls). ``mode(bits)`` wraps f32 bit patterns as a :class:`Float`."""

    ftz: bool
    fast_math: bool = False

    def __post_init__(self):
        for name in ("ftz", "fast_math"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise bad_argument(name, getattr(self, name), "expected True or False")

    def __call__(self, x) -> Float:
        return Float(_bits(x), self)

    def full(self, shape, value) -> Float:
        """A Float of ``shape`` holding the float constant ``value`` (or a uint32 bit pattern) everywhere."""
        return Float(np.full(shape, _bits(value), np.uint32), self)

    def __str__(self) -> str:
        return "--use_fast_math" if self.fast_math and self.ftz else \
            " ".join(x for x in ("--use_fast_math" if self.fast_math else "", f"-ftz={str(self.ftz).lower()}") if x)


#: ``--use_fast_math`` (which implies ``-ftz=true``): FlashAttention-2's build
FAST_MATH = FloatMode(ftz=True, fast_math=True)
#: ``-ftz=true`` alone: what cupy's NVRTC adds to every build
FTZ = FloatMode(ftz=True, fast_math=False)


def _bits(x) -> np.ndarray:
    """An operand as f32 bit patterns: a Float's, a uint32 array/scalar as is, a float constant rounded to f32."""
    if isinstance(x, Float):
        return x.bits
    if isinstance(x, (bool, np.bool_)):
        raise bad_argument("operand", x, "a bool is not a float")
    if isinstance(x, (int, float, np.floating)):
        return np.asarray(np.float32(x).view(np.uint32))
    arr = np.asarray(x)
    if arr.dtype != np.uint32:
        raise bad_argument("operand", arr.dtype, "expected f32 bit patterns (uint32), a Float or a float constant")
    return arr


def _same(*arrays):
    """The operands broadcast to one shape (views: fp32 takes operands of one shape)."""
    shape = np.broadcast_shapes(*(a.shape for a in arrays))
    return [a if a.shape == shape else np.broadcast_to(a, shape) for a in arrays]


def _mode(*xs) -> FloatMode:
    modes = {x.mode for x in xs if isinstance(x, Float)}
    if len(modes) != 1:
        if not modes:
            raise bad_argument("operands", xs, "expected at least one Float (the compile mode comes from it)")
        raise bad_argument("operands", sorted(map(str, modes)), "Floats of different compile modes")
    return modes.pop()


def _fsetp(op):
    """A comparison operator: FSETP with ``op`` (numpy's comparisons are IEEE's: NaN is unordered)."""
    def compare(self, o):
        return self._cmp(o, op)
    compare.__name__ = f"__{op.__name__}__"
    return compare


class Float:
    """f32 bit patterns (``bits``, uint32) under a :class:`FloatMode`; see the module docstring."""

    __slots__ = ("_bits", "_a", "_b", "mode")
    __array_ufunc__ = None  # numpy operands defer to the reflected operators here
    __hash__ = None

    def __init__(self, bits, mode: FloatMode, _factors=None):
        if not isinstance(mode, FloatMode):
            raise bad_argument("mode", mode, "expected a FloatMode")
        self.mode = mode
        if _factors is None:
            self._bits = _bits(bits)
            self._a = self._b = None
        else:  # an unrounded product a * b
            self._bits = None
            self._a, self._b = _factors

    # -- values ----------------------------------------------------------------------------------------
    @property
    def bits(self) -> np.ndarray:
        """The f32 bit patterns (a product not consumed by an add is rounded here: FMUL)."""
        if self._bits is None:
            self._bits = fp32.mul(*_same(self._a, self._b), ftz=self.mode.ftz)
            self._a = self._b = None
        return self._bits

    @property
    def shape(self) -> tuple:
        return self.bits.shape if self._bits is not None else np.broadcast_shapes(self._a.shape, self._b.shape)

    def __getitem__(self, idx) -> Float:
        return Float(self.bits[idx], self.mode)

    def __repr__(self) -> str:
        what = "product" if self._bits is None else f"shape={self._bits.shape}"
        return f"Float({what}, {self.mode})"

    def _wrap(self, bits) -> Float:
        return Float(np.asarray(bits, np.uint32), self.mode)

    # -- arithmetic ------------------------------------------------------------------------------------
    def __neg__(self) -> Float:
        if self._bits is None:
            return Float(None, self.mode, (self._a ^ _SIGN, self._b))
        return self._wrap(self._bits ^ _SIGN)

    def __add__(self, o) -> Float:
        return _add(self, o, self.mode)

    def __radd__(self, o) -> Float:
        return _add(o, self, self.mode)

    def __sub__(self, o) -> Float:
        return _add(self, -o if isinstance(o, Float) else Float(_bits(o) ^ _SIGN, self.mode), self.mode)

    def __rsub__(self, o) -> Float:
        return _add(o, -self, self.mode)

    def __mul__(self, o) -> Float:
        return Float(None, _mode(self, o), (self.bits, _bits(o)))

    def __rmul__(self, o) -> Float:
        return Float(None, _mode(self, o), (_bits(o), self.bits))

    def __rtruediv__(self, o) -> Float:
        if isinstance(o, Float) or float(o) != 1.0:
            raise NotImplementedError("a / b: only the reciprocal 1.0f / x is modelled")
        m = self.mode
        return self._wrap(cuda_math.reciprocal(self.bits, fast_math=m.fast_math, ftz=m.ftz))

    def __truediv__(self, o):
        raise NotImplementedError("a / b: only the reciprocal 1.0f / x is modelled")

    # -- FSETP -----------------------------------------------------------------------------------------
    def _cmp(self, o, op):
        a, b = _same(self.bits, _bits(o))
        a, b = _value(a, self.mode.ftz), _value(b, self.mode.ftz)
        with np.errstate(invalid="ignore"):
            return op(a, b)

    __eq__, __ne__ = _fsetp(np.equal), _fsetp(np.not_equal)
    __lt__, __le__ = _fsetp(np.less), _fsetp(np.less_equal)
    __gt__, __ge__ = _fsetp(np.greater), _fsetp(np.greater_equal)

    def __bool__(self):
        raise TypeError("a Float is an array: compare it, then use .any() / .all() on the result")


def _value(bits: np.ndarray, ftz: bool) -> np.ndarray:
    """Bits as float32 values the way FSETP{.FTZ} reads them (ftz: a subnormal is a zero of its sign)."""
    if ftz:
        bits = np.where((bits & _EXP) == 0, bits & _SIGN, bits).astype(np.uint32)
    return bits.view(np.float32)


def _add(x, y, mode: FloatMode) -> Float:
    """x + y: FFMA when one side is an unrounded product (the left one if both are), else FADD."""
    for p, c in ((x, y), (y, x)):
        if isinstance(p, Float) and p._bits is None:
            a, b, c = _same(p._a, p._b, _bits(c))
            return Float(fp32.fma(a, b, c, ftz=mode.ftz), mode)
    a, b = _same(_bits(x), _bits(y))
    return Float(fp32.add(a, b, ftz=mode.ftz), mode)


def fmul_rn(a, b) -> Float:
    """``__fmul_rn(a, b)``: a multiply that is never contracted into an add (FMUL{.FTZ})."""
    m = _mode(a, b)
    return Float(fp32.mul(*_same(_bits(a), _bits(b)), ftz=m.ftz), m)


def fmaxf(a, b) -> Float:
    """``fmaxf(a, b)``: FMNMX{.FTZ} (a NaN operand is ignored; -0 < +0)."""
    m = _mode(a, b)
    return Float(fp32.fmax(*_same(_bits(a), _bits(b)), ftz=m.ftz), m)


def where(cond, a, b) -> Float:
    """``cond ? a : b`` per element (FSEL): no arithmetic, the bits of a or b."""
    m = _mode(a, b)
    return Float(np.where(cond, _bits(a), _bits(b)).astype(np.uint32), m)


def _call(fn, x: Float) -> Float:
    if not isinstance(x, Float):
        raise bad_argument("x", type(x).__name__, "expected a Float (its mode says how the call compiled)")
    return Float(fn(x.bits, fast_math=x.mode.fast_math, ftz=x.mode.ftz), x.mode)


def exp2f(x: Float) -> Float:
    """``exp2f(x)``: ex2.approx{.ftz}.f32 (``cuda_math.exp2f``)."""
    return _call(cuda_math.exp2f, x)


def __expf(x: Float) -> Float:
    """``__expf(x)``: FMUL by log2(e), then exp2f's sequence (``cuda_math.__expf``)."""
    return _call(cuda_math.__expf, x)


def expf(x: Float) -> Float:
    """``expf(x)``: the accurate sequence, or ``__expf``'s under fast math (``cuda_math.expf``)."""
    return _call(cuda_math.expf, x)


def __logf(x: Float) -> Float:
    """``__logf(x)``: lg2.approx{.ftz}.f32 then FMUL by ln 2 (``cuda_math.__logf``)."""
    return _call(cuda_math.__logf, x)


def tanh_approx(x: Float) -> Float:
    """``tanh.approx.f32`` (inline PTX; one MUFU.TANH whatever the flags)."""
    if not isinstance(x, Float):
        raise bad_argument("x", type(x).__name__, "expected a Float")
    return Float(sfu.tanh_approx_f32(x.bits), x.mode)
