"""Safe evaluation of a per-lane address expression such as ``(lane % 16) * d + (lane // 16) * 8``.

The expression is parsed with :mod:`ast` and walked here; nothing is passed to ``eval``. Allowed:
integer literals, the name ``lane`` (numpy int64 array 0..31), named integer constants (``-D d=128``),
``+ - * // % << >> & | ^ ~``, unary minus, parentheses, comparisons and ``a if cond else b`` (element-wise),
and the calls ``cute_swizzle(x, B, M, S)``, ``seed_swizzle(x, B, M, S)``, ``min(a, b)``, ``max(a, b)``.
The result must be 32 integers (one per lane), else :class:`ArgumentError` says what it was.
"""

from __future__ import annotations

import ast
import operator
import re
from typing import Any

import numpy as np

from flashsim.errors import bad_argument
from flashsim.swizzle import cute_swizzle, seed_swizzle

__all__ = ["evaluate", "parse_defines"]

_BINOPS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod, ast.LShift: operator.lshift, ast.RShift: operator.rshift, ast.BitAnd: operator.and_,
    ast.BitOr: operator.or_, ast.BitXor: operator.xor,
}
_CMPOPS = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
           ast.Eq: operator.eq, ast.NotEq: operator.ne}
_FUNCS = {"cute_swizzle": (cute_swizzle, 4), "seed_swizzle": (seed_swizzle, 4),
          "min": (np.minimum, 2), "max": (np.maximum, 2)}
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_MAX_MAG = 1 << 48


def parse_defines(items: list[str] | None) -> dict[str, int]:
    """``['d=128', 'k=0x40']`` -> ``{'d': 128, 'k': 64}``; names must be identifiers other than lane."""
    out: dict[str, int] = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or not _NAME_RE.match(name) or name == "lane" or name in _FUNCS:
            raise bad_argument("-D", item, "expected NAME=INTEGER with NAME an identifier other than 'lane'")
        try:
            out[name] = int(value.strip(), 0)
        except ValueError:
            raise bad_argument("-D", item, "the value must be an integer (e.g. d=128 or d=0x80)") from None
    return out


def _ev(node: ast.AST, env: dict[str, Any], text: str):
    if isinstance(node, ast.Expression):
        return _ev(node.body, env, text)
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, int):
            raise bad_argument("EXPR", text, f"only integer literals are allowed, not {node.value!r}")
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in env:
            known = ", ".join(sorted(env)) or "lane"
            raise bad_argument("EXPR", text, f"unknown name {node.id!r} (known: {known}; define constants with -D {node.id}=...)")
        return env[node.id]
    if isinstance(node, ast.BinOp):
        if isinstance(node.op, ast.Div):
            raise bad_argument("EXPR", text, "'/' gives fractions: use '//' for integer division")
        if isinstance(node.op, ast.Pow):
            raise bad_argument("EXPR", text, "'**' is not allowed (use '<<' for powers of two)")
        fn = _BINOPS.get(type(node.op))
        if fn is None:
            raise bad_argument("EXPR", text, f"operator {type(node.op).__name__} is not allowed")
        left, right = _ev(node.left, env, text), _ev(node.right, env, text)
        if isinstance(node.op, (ast.FloorDiv, ast.Mod)) and np.any(np.asarray(right) == 0):
            raise bad_argument("EXPR", text, "division by zero")
        if isinstance(node.op, (ast.LShift, ast.RShift)) and (np.any(np.asarray(right) < 0) or np.any(np.asarray(right) > 48)):
            raise bad_argument("EXPR", text, "shift counts must lie in 0..48")
        return fn(left, right)  # lane is an object array of Python ints: no overflow
    if isinstance(node, ast.UnaryOp):
        v = _ev(node.operand, env, text)
        if isinstance(node.op, ast.USub):
            return -v
        if isinstance(node.op, ast.UAdd):
            return v
        if isinstance(node.op, ast.Invert):
            return ~v
        raise bad_argument("EXPR", text, f"operator {type(node.op).__name__} is not allowed")
    if isinstance(node, ast.Compare):
        if len(node.ops) != 1:
            raise bad_argument("EXPR", text, "chained comparisons are not allowed")
        fn = _CMPOPS.get(type(node.ops[0]))
        if fn is None:
            raise bad_argument("EXPR", text, f"comparison {type(node.ops[0]).__name__} is not allowed")
        out = fn(_ev(node.left, env, text), _ev(node.comparators[0], env, text))
        return np.asarray(out).astype(np.int64).astype(object) if np.ndim(out) else int(bool(out))
    if isinstance(node, ast.IfExp):
        test = np.asarray(_ev(node.test, env, text), dtype=object) != 0
        return np.where(test, np.asarray(_ev(node.body, env, text), dtype=object),
                        np.asarray(_ev(node.orelse, env, text), dtype=object))
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCS or node.keywords:
            raise bad_argument("EXPR", text, f"only the calls {', '.join(sorted(_FUNCS))} are allowed")
        fn, nargs = _FUNCS[node.func.id]
        if len(node.args) != nargs:
            raise bad_argument("EXPR", text, f"{node.func.id} takes {nargs} arguments")
        args = [_ev(a, env, text) for a in node.args]
        if node.func.id.endswith("swizzle"):
            for a in args[1:]:
                if not isinstance(a, (int, np.integer)):
                    raise bad_argument("EXPR", text, f"{node.func.id}: B, M, S must be integer constants")
            x = np.asarray(args[0], dtype=object)
            if x.size and (min(x.flat) < 0 or max(x.flat) >= _MAX_MAG):
                raise bad_argument("EXPR", text, f"{node.func.id}: offsets must lie in 0..2^48")
            out = fn(np.asarray(x, dtype=np.int64), *args[1:])
            return np.asarray(out).astype(object) if np.ndim(out) else int(out)
        return fn(*args)
    raise bad_argument("EXPR", text, f"{type(node).__name__} is not allowed in an address expression")


def evaluate(text: str, defines: dict[str, int] | None = None) -> np.ndarray:
    """Evaluate ``text`` for lanes 0..31; returns 32 int64 values."""
    if not isinstance(text, str) or not text.strip():
        raise bad_argument("EXPR", text, "expected a Python expression in lane, e.g. '(lane % 16) * 128'")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise bad_argument("EXPR", text, f"not a Python expression ({exc.msg})") from None
    env: dict[str, Any] = {"lane": np.arange(32).astype(object)}
    env.update(defines or {})
    value = _ev(tree, env, text)
    arr = np.asarray(value)
    if arr.shape != (32,):
        what = "one integer (it does not use lane)" if arr.ndim == 0 else f"an array of shape {arr.shape}"
        raise bad_argument("EXPR", text, f"must give 32 integers (one per lane), got {what}; "
                                         "write e.g. '0*lane + 64' for the same address in every lane")
    if not all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) for v in arr.flat):
        raise bad_argument("EXPR", text, "must give 32 integers")
    if any(abs(int(v)) >= _MAX_MAG for v in arr.flat):
        raise bad_argument("EXPR", text, "a lane's value exceeds 2^48: not a shared-memory address")
    return np.array([int(v) for v in arr.flat], dtype=np.int64)
