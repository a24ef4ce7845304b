"""The launch arguments of ``flashsim run`` written as text: ``NAME=DTYPE[SHAPE]:INIT`` arrays and
``NAME=DTYPE:VALUE`` scalars (the syntax is documented in :mod:`flashsim.cli.run`), the inputs they make, and
the bit-for-bit comparison of an array from two runs.
"""

from __future__ import annotations

import argparse
import math
import re
from dataclasses import dataclass
from pathlib import Path

import ml_dtypes
import numpy as np

from flashsim.errors import ArgumentError, bad_argument

__all__ = ["ArgSpec", "DTYPES", "INITS", "compare_bits", "make_value", "match_params", "parse_arg", "parse_args_list",
           "parse_dim3"]

#: the DTYPE names --arg accepts
DTYPES: dict[str, np.dtype] = {
    "f16": np.dtype(np.float16), "bf16": np.dtype(ml_dtypes.bfloat16), "f32": np.dtype(np.float32),
    "f64": np.dtype(np.float64), "i8": np.dtype(np.int8), "u8": np.dtype(np.uint8), "i16": np.dtype(np.int16),
    "u16": np.dtype(np.uint16), "i32": np.dtype(np.int32), "u32": np.dtype(np.uint32), "i64": np.dtype(np.int64),
    "u64": np.dtype(np.uint64),
}
_FLOATS = ("f16", "bf16", "f32", "f64")
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}

#: array initialisers: name -> (allowed parameter counts, what it does)
INITS = {
    "zeros": ((0,), "all zero"),
    "ones": ((0,), "all one"),
    "empty": ((0,), "never written (zeros here; initcheck reports reads of it)"),
    "arange": ((0,), "0, 1, 2, ... in C order (wrapping in small integer types)"),
    "bits": ((0,), "uniform random bit patterns (NaNs and infinities included for floats)"),
    "normal": ((0, 2), "normal(MEAN,STD), default (0,1); floating dtypes"),
    "uniform": ((0, 2), "uniform(LO,HI): floats in [LO,HI), default (0,1); integers LO <= x < HI (bounds needed)"),
    "file": ((1,), "file(PATH.npy) or file(PATH.npz:KEY): same shape and dtype (or unsigned ints of the "
                   "same width, taken as bit patterns)"),
    "values": ((None,), "values(V0,V1,...): one value per element"),
}

GRID_LIMITS = (2**31 - 1, 65535, 65535)
BLOCK_LIMITS = (1024, 1024, 64)

_SPEC = re.compile(r"^(?P<name>[^=]*)=(?P<dtype>[^\[:]*)(?:\[(?P<shape>[^\]]*)\])?(?P<colon>:?)(?P<rest>.*)$", re.S)
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_INIT = re.compile(r"^(?P<fn>[A-Za-z_]+)(?:\((?P<params>.*)\))?$", re.S)


# ----------------------------------------------------------------------------------------------------
# --arg, --grid and --block
# ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ArgSpec:
    """One parsed ``--arg``: an array (``shape`` not None: ``init`` and its ``params``) or a scalar (``value``)."""

    text: str
    name: str
    dtype: str
    shape: tuple | None = None
    init: str = ""
    params: tuple = ()
    value: object = None

    @property
    def is_array(self) -> bool:
        return self.shape is not None

    @property
    def np_dtype(self) -> np.dtype:
        return DTYPES[self.dtype]

    @property
    def nbytes(self) -> int:
        return (math.prod(self.shape) if self.is_array else 1) * self.np_dtype.itemsize

    def describe(self) -> str:
        if self.is_array:
            return f"{self.name}={self.dtype}[{','.join(map(str, self.shape))}]:{self.init}" + (
                f"({','.join(map(str, self.params))})" if self.params else "")
        return f"{self.name}={self.dtype}:{self.value}"


def _bad(text: str, why: str) -> ArgumentError:
    return bad_argument("--arg", text, why)


def _plain_int(text: str, spec: str, what: str) -> int:
    try:
        return int(text.strip(), 0)
    except ValueError:
        raise _bad(spec, f"{what} {text.strip()!r} is not an integer") from None


def _int_in(text: str, spec: str, dtype: str, what: str) -> int:
    v = _plain_int(text, spec, what)
    info = np.iinfo(DTYPES[dtype])
    if not info.min <= v <= info.max:
        raise _bad(spec, f"{what} {v} is outside the range of {dtype} ({info.min} to {info.max})")
    return v


def _float(text: str, spec: str, what: str) -> float:
    try:
        return float(text.strip())
    except ValueError:
        raise _bad(spec, f"{what} {text.strip()!r} is not a number") from None


def parse_arg(text: str) -> ArgSpec:
    """Parse one ``--arg`` (syntax only: the kernel's parameters are matched later); errors name it."""
    if not isinstance(text, str):
        raise _bad(text, "expected a string")
    m = _SPEC.match(text)
    if m is None:
        raise _bad(text, "expected NAME=DTYPE[SHAPE]:INIT for an array (e.g. q=f16[4,128]:normal) or "
                         "NAME=DTYPE:VALUE for a scalar (e.g. n=i32:4096)")
    name, dtype, shape_text, rest = m["name"], m["dtype"].strip(), m["shape"], m["rest"]
    if not _NAME.match(name):
        raise _bad(text, f"the name {name!r} is not an identifier (letters, digits, _; e.g. q=f16[8]:normal)")
    if dtype not in DTYPES:
        raise _bad(text, f"unknown dtype {dtype!r} (expected one of {', '.join(DTYPES)})")
    if not m["colon"]:
        what = "INIT (e.g. :zeros)" if shape_text is not None else "a VALUE (e.g. :4096) or [SHAPE]:INIT"
        raise _bad(text, f"missing ':' and {what}")
    if shape_text is None:  # a scalar
        if not rest.strip():
            raise _bad(text, "a scalar needs a value after ':' (e.g. n=i32:4096)")
        value = _float(rest, text, "the value") if dtype in _FLOATS else _int_in(rest, text, dtype, "the value")
        return ArgSpec(text, name, dtype, value=value)
    dims = [d.strip() for d in shape_text.split(",")]
    if not shape_text.strip() or any(not re.fullmatch(r"[0-9]+", d) or int(d) < 1 for d in dims):
        raise _bad(text, f"the shape [{shape_text}] must be positive integers separated by commas, e.g. [4,128]")
    shape = tuple(int(d) for d in dims)
    if len(shape) > 8:
        raise _bad(text, f"the shape has {len(shape)} dimensions (at most 8)")
    size = math.prod(shape)
    if size * DTYPES[dtype].itemsize > 1 << 34:
        raise _bad(text, f"{size} elements of {dtype} exceed 16 GiB")
    mi = _INIT.match(rest.strip())
    if mi is None or mi["fn"] not in INITS:
        got = rest.strip().split("(")[0]
        raise _bad(text, f"unknown INIT {got!r} (expected one of {', '.join(INITS)})")
    fn, ptext = mi["fn"], mi["params"]
    counts = INITS[fn][0]
    if fn == "file":
        if not ptext or not ptext.strip():
            raise _bad(text, "file() needs a path: file(x.npy) or file(x.npz:KEY)")
        ref = ptext.strip()
        path = ref.split(".npz:", 1)[0] + ".npz" if ".npz:" in ref else ref
        if not Path(path).is_file():
            raise _bad(text, f"no such file {path!r}")
        return ArgSpec(text, name, dtype, shape, fn, (ptext.strip(),))
    params = [] if ptext is None or not ptext.strip() else [p.strip() for p in ptext.split(",")]
    if None not in counts and len(params) not in counts:
        allowed = " or ".join(str(c) for c in counts)
        raise _bad(text, f"{fn} takes {allowed} parameters, got {len(params)} ({INITS[fn][1]})")
    floating = dtype in _FLOATS
    if fn == "normal":
        if not floating:
            raise _bad(text, f"normal needs a floating dtype ({', '.join(_FLOATS)}); for integers use "
                             "uniform(LO,HI) or bits")
        vals = tuple(_float(p, text, "the parameter") for p in params) or (0.0, 1.0)
        if not (math.isfinite(vals[0]) and math.isfinite(vals[1]) and vals[1] >= 0):
            raise _bad(text, "normal(MEAN,STD) needs a finite MEAN and a finite STD >= 0")
        return ArgSpec(text, name, dtype, shape, fn, vals)
    if fn == "uniform":
        if floating:
            vals = tuple(_float(p, text, "the bound") for p in params) or (0.0, 1.0)
            if not (math.isfinite(vals[0]) and math.isfinite(vals[1]) and vals[0] < vals[1]):
                raise _bad(text, "uniform(LO,HI) needs finite bounds with LO < HI")
            return ArgSpec(text, name, dtype, shape, fn, vals)
        if not params:
            raise _bad(text, f"uniform for {dtype} needs bounds: uniform(LO,HI) draws integers LO <= x < HI")
        info = np.iinfo(DTYPES[dtype])
        lo, hi = (_plain_int(q, text, "the bound") for q in params)
        if not (info.min <= lo and hi <= info.max + 1):
            raise _bad(text, f"uniform(LO,HI) draws LO <= x < HI: {dtype} needs {info.min} <= LO and "
                             f"HI <= {info.max + 1}")
        if lo >= hi:
            raise _bad(text, f"uniform(LO,HI) needs LO < HI, got ({lo},{hi})")
        return ArgSpec(text, name, dtype, shape, fn, (lo, hi))
    if fn == "values":
        if len(params) != size:
            raise _bad(text, f"values() gives {len(params)} values for {size} elements")
        vals = tuple(_float(p, text, "the value") if floating else _int_in(p, text, dtype, "the value") for p in params)
        return ArgSpec(text, name, dtype, shape, fn, vals)
    return ArgSpec(text, name, dtype, shape, fn)


def parse_args_list(texts) -> list[ArgSpec]:
    """Parse every ``--arg``; a name used twice is refused."""
    specs, seen = [], {}
    for t in texts or ():
        s = parse_arg(t)
        if s.name in seen:
            raise _bad(t, f"the name {s.name!r} is already used by --arg {seen[s.name]!r}")
        seen[s.name] = t
        specs.append(s)
    return specs


def _dim3_type(what: str, limits):
    def parse(text: str) -> tuple[int, int, int]:
        parts = text.split(",")
        if not 1 <= len(parts) <= 3 or not all(re.fullmatch(r"\s*[0-9]+\s*", p) for p in parts):
            raise argparse.ArgumentTypeError(f"expected X[,Y[,Z]] with positive integers, got {text!r}")
        dims = [int(p) for p in parts] + [1] * (3 - len(parts))
        for axis, (d, lim) in enumerate(zip(dims, limits)):
            if not 1 <= d <= lim:
                raise argparse.ArgumentTypeError(f"{what} dimension {'xyz'[axis]} = {d} is outside 1..{lim} (sm_90)")
        if what == "block" and math.prod(dims) > 1024:
            raise argparse.ArgumentTypeError(f"{math.prod(dims)} threads per block; sm_90 allows at most 1024")
        return tuple(dims)
    parse.__name__ = f"{what} X[,Y[,Z]]"
    return parse


#: argparse ``type=`` of --grid and --block
parse_dim3 = {"grid": _dim3_type("grid", GRID_LIMITS), "block": _dim3_type("block", BLOCK_LIMITS)}


# ----------------------------------------------------------------------------------------------------
# Values
# ----------------------------------------------------------------------------------------------------


def _load_file(spec: ArgSpec) -> np.ndarray:
    ref = spec.params[0]
    path, key = ref, None
    if ".npz:" in ref:
        path, key = ref.split(".npz:", 1)
        path += ".npz"
    p = Path(path)
    if not p.is_file():
        raise _bad(spec.text, f"no such file {path!r}")
    try:
        data = np.load(p, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise _bad(spec.text, f"cannot read {path} as .npy/.npz ({exc})") from None
    if isinstance(data, np.lib.npyio.NpzFile):
        with data:
            keys = list(data.keys())
            if key is None:
                if len(keys) != 1:
                    raise _bad(spec.text, f"{path} holds {len(keys)} arrays {keys}: say which, file({path}:KEY)")
                key = keys[0]
            if key not in keys:
                raise _bad(spec.text, f"{path} has no array {key!r} (it has {keys})")
            arr = data[key]
    else:
        if key is not None:
            raise _bad(spec.text, f"{path} is a .npy file: no :KEY")
        arr = data
    want = spec.np_dtype
    if arr.shape != spec.shape:
        raise _bad(spec.text, f"{path} holds shape {list(arr.shape)}, the --arg says {list(spec.shape)}")
    if arr.dtype != want:
        if arr.dtype.itemsize == want.itemsize and arr.dtype.kind in "uV":
            arr = np.ascontiguousarray(arr).view(want)
        else:
            raise _bad(spec.text, f"{path} holds {arr.dtype}, the --arg says {spec.dtype} (convert it, or store "
                                  f"the bit patterns as uint{8 * want.itemsize})")
    return np.ascontiguousarray(arr)


def make_value(spec: ArgSpec, rng: np.random.Generator):
    """The host value of one ``--arg``: a C-contiguous numpy array, or a numpy scalar of the dtype."""
    dt = spec.np_dtype
    if not spec.is_array:
        return np.array(spec.value).astype(dt)[()]
    shape, fn, p = spec.shape, spec.init, spec.params
    size = math.prod(shape)
    if fn in ("zeros", "empty"):
        out = np.zeros(shape, dt)
    elif fn == "ones":
        out = np.ones(shape, dt)
    elif fn == "arange":
        a = np.arange(size, dtype=np.int64)
        out = (a.astype(np.float64).astype(dt) if spec.dtype in _FLOATS else a.astype(dt)).reshape(shape)
    elif fn == "bits":
        u = _UINT[dt.itemsize]
        out = rng.integers(0, np.iinfo(u).max, size=shape, dtype=u, endpoint=True).view(dt)
    elif fn == "normal":
        out = rng.normal(p[0], p[1], size=shape).astype(np.float32 if dt != np.float64 else np.float64).astype(dt)
    elif fn == "uniform":
        if spec.dtype in _FLOATS:
            out = rng.uniform(p[0], p[1], size=shape).astype(np.float32 if dt != np.float64 else np.float64).astype(dt)
        else:
            out = rng.integers(p[0], p[1], size=shape, dtype=dt)
    elif fn == "file":
        out = _load_file(spec)
    elif fn == "values":
        out = np.array(p, np.float64 if spec.dtype in _FLOATS else object).astype(dt).reshape(shape)
    else:  # pragma: no cover - parse_arg refuses it
        raise _bad(spec.text, f"unknown INIT {fn!r}")
    return np.ascontiguousarray(out)


def _params_text(params) -> str:
    return ", ".join(f"#{p.ordinal}: {p.size} bytes" for p in params) or "none"


def match_params(specs: list[ArgSpec], fn, kernel: str) -> None:
    """Check the --arg list against the kernel's parameters (count, and each one's size)."""
    params = sorted(fn.info.params, key=lambda p: p.ordinal)
    if len(specs) != len(params):
        given = ", ".join(repr(s.text) for s in specs) or "none"
        raise ArgumentError(f"--arg: kernel {kernel!r} takes {len(params)} parameters ({_params_text(params)}; "
                            f"an array is an 8-byte pointer), {len(specs)} given ({given})")
    for p, s in zip(params, specs):
        if s.is_array and p.size != 8:
            raise _bad(s.text, f"an array is passed as an 8-byte pointer, but parameter #{p.ordinal} of {kernel!r} "
                               f"has {p.size} bytes (parameters: {_params_text(params)})")
        if not s.is_array and s.np_dtype.itemsize != p.size:
            fits = [k for k, d in DTYPES.items() if d.itemsize == p.size]
            hint = f"a {p.size}-byte dtype: {', '.join(fits)}" if fits else \
                "a struct passed by value, which --arg cannot give (use flashsim.cuda from Python)"
            raise _bad(s.text, f"{s.dtype} is {s.np_dtype.itemsize} bytes, but parameter #{p.ordinal} of {kernel!r} "
                               f"has {p.size} (use {hint}; parameters: {_params_text(params)})")


# ----------------------------------------------------------------------------------------------------
# Comparing bits (--gpu)
# ----------------------------------------------------------------------------------------------------


def _number(x, dt: np.dtype) -> str:
    if dt.kind in "iu":
        return str(int(x))
    if dt == DTYPES["bf16"]:
        return repr(float(x))  # exact
    return str(x)  # the shortest text that reads back to the same value of the dtype


def compare_bits(name: str, sim: np.ndarray, gpu: np.ndarray) -> tuple[bool, str]:
    """Compare two arrays of the same dtype and shape bit for bit: (identical, one-line description)."""
    dt = sim.dtype
    u = _UINT[dt.itemsize]
    a, b = np.ascontiguousarray(sim).view(u).reshape(-1), np.ascontiguousarray(gpu).view(u).reshape(-1)
    diff = np.nonzero(a != b)[0]
    if not diff.size:
        return True, f"{name}: {a.size} elements bit-identical"
    i = int(diff[0])
    idx = np.unravel_index(i, sim.shape)
    w = 2 * dt.itemsize
    x, y = sim.reshape(-1)[i], gpu.reshape(-1)[i]
    return False, (f"{name}: {diff.size} of {a.size} elements differ; first at [{', '.join(map(str, idx))}]: "
                   f"simulator {_number(x, dt)} (0x{int(a[i]):0{w}x}), GPU {_number(y, dt)} (0x{int(b[i]):0{w}x})")
