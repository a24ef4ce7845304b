"""Evaluate a CuTe-style layout expression safely: a restricted namespace, no Python eval.

Both spellings work::

    composition(Swizzle(3,3,3), Layout((_8,_64),(_64,_1)))
    tile_to_shape(composition(Swizzle<3,3,3>{}, Layout<Shape<_8,_64>,Stride<_64,_1>>{}), Shape<_128,_128>{})
    size<0>(x)   take<1,3>(x)   get<1,0>(x)   upcast<2>(x)

Integers written ``_8``, ``S(8)`` or ``Int<8>`` are static; plain ``8`` is dynamic. The expression is parsed
with ``ast`` and walked node by node: only calls of the names below, tuples, integer literals and simple
integer arithmetic are allowed; anything else is an error that names the expression and the position.
"""

from __future__ import annotations

import ast
import re

from flashsim.errors import ArgumentError
from flashsim.layout import atoms as A
from flashsim.layout import inttuple as it
from flashsim.layout import layout as L
from flashsim.layout import tensor as T
from flashsim.layout import tiled as TL
from flashsim.layout.composed import ComposedLayout, Swizzle, make_swizzle
from flashsim.layout.inttuple import C, _, fmt


class ExpressionError(ArgumentError):
    """A layout expression that cannot be evaluated (malformed, or uses something not allowed)."""


def _lift(fn):
    """Apply a layout function to a tensor's layout, keeping its iterator (CuTe's tensor overloads)."""
    def g(x, *args, **kw):
        if isinstance(x, T.Tensor):
            return T.Tensor(x.data, fn(x.layout(), *args, **kw))
        return fn(x, *args, **kw)
    g.__name__ = fn.__name__
    g.__doc__ = fn.__doc__
    return g


class _TemplateFn:
    """A function that also takes C++ template arguments: ``size<0>(x)`` is ``size.t(0)(x)``."""

    def __init__(self, fn, bind):
        self.fn, self.bind = fn, bind

    def __call__(self, *a, **kw):
        return self.fn(*a, **kw)

    def t(self, *targs):
        return lambda *a, **kw: self.bind(self.fn, targs, a, kw)


def _idx_last(fn, targs, a, kw):
    return fn(*a, *targs, **kw)


def _n_first(fn, targs, a, kw):
    return fn(*targs, *a, **kw)


def _ns():
    lift = {n: _lift(getattr(L, n)) for n in (
        "composition", "coalesce", "logical_divide", "zipped_divide", "tiled_divide", "flat_divide",
        "logical_product", "zipped_product", "tiled_product", "flat_product", "flatten", "group",
        "filter_zeros")}
    ns = {
        # integers, tuples and tags
        "Int": C, "S": C, "C": C, "_": _, "X": _, "Underscore": _,
        "Shape": lambda *a: tuple(a), "Stride": lambda *a: tuple(a), "Step": lambda *a: tuple(a),
        "Coord": lambda *a: tuple(a), "Tile": lambda *a: tuple(a),
        "make_shape": L.make_shape, "make_stride": L.make_stride, "make_coord": L.make_coord,
        "make_tile": L.make_tile, "make_step": L.make_step,
        "LayoutLeft": L.LayoutLeft, "LayoutRight": L.LayoutRight, "GenColMajor": L.GenColMajor,
        "GenRowMajor": L.GenRowMajor, "E": it.E,
        # layouts
        "Layout": L.Layout, "make_layout": L.make_layout, "Swizzle": Swizzle, "ComposedLayout": ComposedLayout,
        "make_ordered_layout": L.make_ordered_layout, "make_identity_layout": L.make_identity_layout,
        "make_layout_like": L.make_layout_like, "make_fragment_like": _frag_like,
        "complement": L.complement, "right_inverse": L.right_inverse, "left_inverse": L.left_inverse,
        "blocked_product": L.blocked_product, "raked_product": L.raked_product, "tile_to_shape": L.tile_to_shape,
        "filter": L.filter_layout, "zip": L.zip_layout, "dice": L.dice, "slice": L.slice_,
        "max_common_layout": L.max_common_layout, "max_common_vector": L.max_common_vector,
        "nullspace": L.nullspace, "prepend": L.prepend, "replace": L.replace,
        "crd2idx": L.crd2idx, "idx2crd": it.idx2crd, "crd2crd": it.crd2crd,
        "compact_col_major": it.compact_col_major, "compact_row_major": it.compact_row_major,
        "compact_order": it.compact_order, "ceil_div": it.ceil_div, "shape_div": it.shape_div,
        "product": it.product, "product_each": it.product_each,
        "print_layout": L.print_layout,
        # tensors
        "make_tensor": T.make_tensor, "make_identity_tensor": T.make_identity_tensor,
        "make_gmem_ptr": T.make_gmem_ptr, "make_smem_ptr": T.make_smem_ptr, "make_rmem_ptr": T.make_rmem_ptr,
        "local_tile": T.local_tile, "local_partition": T.local_partition,
        "make_tensor_like": T.make_tensor_like, "make_fragment_like_tensor": T.make_fragment_like_tensor,
        # atoms and tiled operations
        "make_mma_atom": A.make_mma_atom, "make_inttuple_iter": lambda *a: T.ArithTuple(it.as_arithmetic_tuple(
            a[0] if len(a) == 1 and isinstance(a[0], tuple) else tuple(a))),
        "Copy_Atom": A.Copy_Atom, "MMA_Atom": A.MMA_Atom, "make_tiled_copy": TL.make_tiled_copy,
        "make_tiled_copy_A": TL.make_tiled_copy_A, "make_tiled_copy_B": TL.make_tiled_copy_B,
        "make_tiled_copy_C": TL.make_tiled_copy_C, "make_tiled_mma": TL.make_tiled_mma, "TiledMMA": TL.TiledMMA,
        "partition_shape_A": TL.partition_shape_A, "partition_shape_B": TL.partition_shape_B,
        "partition_shape_C": TL.partition_shape_C, "partition_fragment_C": TL.partition_fragment_C,
    }
    ns.update(lift)
    ns.update(A.COPY_OPS)
    ns.update(A.MMA_OPS)
    ns["UniversalFMA"] = lambda *a: A.UniversalFMA_F32
    for name, d in A.DTYPES.items():
        ns[name] = d
    ns["cutlass::half_t"] = A.DTYPES["half_t"]
    # functions that also take template arguments
    ns["size"] = _TemplateFn(L.size, _idx_last)
    ns["rank"] = _TemplateFn(L.rank, _idx_last)
    ns["depth"] = _TemplateFn(L.depth, _idx_last)
    ns["cosize"] = _TemplateFn(L.cosize, _idx_last)
    ns["shape"] = _TemplateFn(L.shape, _idx_last)
    ns["stride"] = _TemplateFn(L.stride, _idx_last)
    ns["get"] = _TemplateFn(_lift(L.get), _idx_last)
    ns["layout"] = _TemplateFn(L.get, _idx_last)
    ns["select"] = _TemplateFn(L.select, _idx_last)
    ns["take"] = _TemplateFn(L.take, _idx_last)
    ns["group"] = _TemplateFn(_lift(L.group), _idx_last)
    ns["append"] = _TemplateFn(L.append, lambda f, t, a, kw: f(*a, n=t[0], **kw))
    ns["replace"] = _TemplateFn(L.replace, lambda f, t, a, kw: f(a[0], t[0], *a[1:], **kw))
    ns["upcast"] = _TemplateFn(L.upcast, _n_first)
    ns["downcast"] = _TemplateFn(L.downcast, _n_first)
    ns["tile_size"] = _TemplateFn(TL.tile_size, _idx_last)
    ns["make_swizzle"] = _TemplateFn(make_swizzle, lambda f, t, a, kw: f(*t))
    return ns


def _frag_like(x):
    if isinstance(x, T.Tensor):
        return T.make_fragment_like_tensor(x)
    return L.make_fragment_like(x)


NAMESPACE = _ns()
TYPE_TEMPLATES = {"E", "Layout", "Shape", "Stride", "Step", "Coord", "Tile", "Swizzle", "Int", "Copy_Atom",
                  "MMA_Atom", "UniversalFMA"} | set(A.COPY_OPS)
FN_TEMPLATES = {k for k, v in NAMESPACE.items() if isinstance(v, _TemplateFn)}

# Attributes that may be used in an expression (methods and CuTe member accessors).
ATTRIBUTES = {
    "layout", "shape", "stride", "size", "compose", "with_shape", "tile", "data",
    "get_thread_slice", "get_slice", "partition_S", "partition_D", "retile_S", "retile_D", "retile",
    "partition_A", "partition_B", "partition_C", "partition_fragment_A", "partition_fragment_B",
    "partition_fragment_C", "get_layoutA_TV", "get_layoutB_TV", "get_layoutC_TV", "get_layoutS_TV",
    "get_layoutD_TV", "layout_a", "layout_b", "offset", "get_hier_coord", "get_flat_coord", "get_1d_coord",
    "tidfrg_S", "tidfrg_D", "layout_tv", "tiler_mn", "thr_layout_vmnk", "thrfrg_A", "thrfrg_B", "thrfrg_C",
    "t",
}

_STATIC_NAME = re.compile(r"^_(m?)(\d+)$")


def _rewrite_templates(src: str) -> str:
    """C++ template syntax to calls: ``Name<a,b>{}`` -> ``Name(a,b)``, ``fn<I>(x)`` -> ``fn.t(I)(x)``."""
    src = src.replace("cute::", "").replace("cutlass::", "")
    src = re.sub(r"\{\s*\}", "", src)
    out, stack, i, n = [], [], 0, len(src)
    while i < n:
        ch = src[i]
        m = re.match(r"[A-Za-z_]\w*", src[i:])
        if m:
            name = m.group(0)
            j = i + len(name)
            k = j
            while k < n and src[k] == " ":
                k += 1
            if k < n and src[k] == "<" and (name in TYPE_TEMPLATES or name in FN_TEMPLATES):
                out.append(name + (".t(" if name in FN_TEMPLATES else "("))
                stack.append("<")
                i = k + 1
                continue
            out.append(name)
            i = j
            continue
        if ch == "(":
            stack.append("(")
        elif ch == ")":
            if stack and stack[-1] == "(":
                stack.pop()
        elif ch == ">" and stack and stack[-1] == "<":
            stack.pop()
            out.append(")")
            i += 1
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def evaluate_expression(expr: str):
    """Evaluate a layout expression and return the object (Layout, Tensor, TiledCopy, tuple, int, ...)."""
    if not isinstance(expr, str) or not expr.strip():
        raise ExpressionError(f"EXPR={expr!r}: expected a layout expression such as 'Layout((_8,_64),(_64,_1))'")
    src = _rewrite_templates(expr.strip())
    try:
        tree = ast.parse(src, mode="eval")
    except SyntaxError as e:
        raise ExpressionError(f"EXPR={expr!r}: malformed expression ({e.msg} at column {e.offset})") from None
    return _Eval(expr).visit(tree.body)


class _Eval:
    def __init__(self, expr):
        self.expr = expr

    def fail(self, node, why):
        col = getattr(node, "col_offset", None)
        where = f" at column {col + 1}" if col is not None else ""
        raise ExpressionError(f"EXPR={self.expr!r}: {why}{where}")

    def visit(self, node):
        meth = getattr(self, "v_" + type(node).__name__, None)
        if meth is None:
            self.fail(node, f"{type(node).__name__} is not allowed in a layout expression")
        return meth(node)

    def v_Constant(self, node):
        if isinstance(node.value, bool) or not isinstance(node.value, int):
            self.fail(node, f"only integer literals are allowed, not {node.value!r}")
        if abs(node.value) >= 1 << 63:
            self.fail(node, "integer literal overflows 64 bits")
        return int(node.value)

    def v_Name(self, node):
        m = _STATIC_NAME.match(node.id)
        if m:
            v = int(m.group(2))
            return C(-v if m.group(1) else v)
        if node.id in NAMESPACE:
            return NAMESPACE[node.id]
        self.fail(node, f"unknown name {node.id!r}")

    def v_Tuple(self, node):
        return tuple(self.visit(e) for e in node.elts)

    v_List = v_Tuple

    def v_UnaryOp(self, node):
        v = self.visit(node.operand)
        if not it.is_int(v):
            self.fail(node, "unary operators apply to integers only")
        if isinstance(node.op, ast.USub):
            return -v
        if isinstance(node.op, ast.UAdd):
            return v
        self.fail(node, f"operator {type(node.op).__name__} is not allowed")

    _BIN = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
            ast.FloorDiv: it.div, ast.Div: it.div, ast.Mod: it.mod, ast.LShift: lambda a, b: a << b,
            ast.RShift: lambda a, b: a >> b, ast.BitAnd: lambda a, b: a & b, ast.BitOr: lambda a, b: a | b,
            ast.BitXor: lambda a, b: a ^ b}

    def v_BinOp(self, node):
        a, b = self.visit(node.left), self.visit(node.right)
        f = self._BIN.get(type(node.op))
        if f is None:
            self.fail(node, f"operator {type(node.op).__name__} is not allowed")
        if not (it.is_int(a) and it.is_int(b)):
            self.fail(node, f"arithmetic applies to integers only, not {fmt(a)} and {fmt(b)}")
        if isinstance(node.op, (ast.LShift, ast.RShift)) and not 0 <= int(b) < 64:
            self.fail(node, f"shift by {int(b)} is outside 0..63")
        r = f(a, b)
        if abs(int(r)) >= 1 << 63:
            self.fail(node, "integer overflows 64 bits")
        return r

    def v_Attribute(self, node):
        obj = self.visit(node.value)
        if node.attr not in ATTRIBUTES or node.attr.startswith("_"):
            self.fail(node, f"attribute {node.attr!r} is not allowed")
        if not hasattr(obj, node.attr):
            self.fail(node, f"{_short(obj)} has no {node.attr!r}")
        return getattr(obj, node.attr)

    def v_Call(self, node):
        fn = self.visit(node.func)
        args = []
        for a in node.args:
            if isinstance(a, ast.Starred):
                self.fail(a, "*args is not allowed")
            args.append(self.visit(a))
        kwargs = {}
        for k in node.keywords:
            if k.arg is None:
                self.fail(node, "**kwargs is not allowed")
            kwargs[k.arg] = self.visit(k.value)
        if not callable(fn):
            if not args and not kwargs:  # C++ accessor spelled as a call: t.shape(), x.offset()
                return fn
            self.fail(node, f"{_short(fn)} is not a function")
        try:
            return fn(*args, **kwargs)
        except TypeError as e:
            self.fail(node, f"wrong arguments: {e}")


def _short(x):
    s = str(x).split("\n")[0]
    return s if len(s) < 80 else s[:77] + "..."


def cute_str(x) -> str:
    """What ``cute::print`` writes for x (tuples without spaces, static integers as ``_v``)."""
    if isinstance(x, (tuple, int)) and not isinstance(x, bool):
        return fmt(x)
    if isinstance(x, bool):
        return "true" if x else "false"
    return str(x)


__all__ = ["ExpressionError", "NAMESPACE", "cute_str", "evaluate_expression"]
