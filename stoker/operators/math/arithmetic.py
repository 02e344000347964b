"""Arithmetic on DataNodes (``a + b``, ``-a``, ``a < b``) and ``stoker.math`` functions.

Type rules follow DALI: a Python int constant is int32, a float constant is
float32; integer with integer promotes as NumPy does; integer with floating
point gives the floating type; ``/`` of integers gives float32; comparisons
give bool; ``//`` of floating-point values divides exactly (as DALI does).
"""

from __future__ import annotations

import numpy as np

from stoker.operators.base import Operator
from stoker.operators.schema import Arg, Schema, register

_BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "pow": np.power, "mod": None,
    "bitand": np.bitwise_and, "bitor": np.bitwise_or, "bitxor": np.bitwise_xor,
    "eq": np.equal, "neq": np.not_equal, "lt": np.less, "leq": np.less_equal,
    "gt": np.greater, "geq": np.greater_equal, "min": np.minimum, "max": np.maximum,
    "fdiv": None, "div": None, "atan2": np.arctan2, "fpow": np.power,
}
_UNARY_FLOAT = {
    "sqrt": np.sqrt, "rsqrt": lambda x: 1.0 / np.sqrt(x), "cbrt": np.cbrt, "exp": np.exp, "log": np.log,
    "log2": np.log2, "log10": np.log10, "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin,
    "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh,
    "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
}
_UNARY_SAME = {"neg": np.negative, "abs": np.abs, "fabs": np.abs, "floor": np.floor, "ceil": np.ceil,
               "bitnot": np.invert, "round": np.rint}
_COMPARE = {"eq", "neq", "lt", "leq", "gt", "geq"}


def _const_dtype(v) -> np.dtype:
    if isinstance(v, (bool, np.bool_)):
        return np.dtype(np.bool_)
    if isinstance(v, (int, np.integer)):
        return np.dtype(np.int32) if not isinstance(v, np.integer) else v.dtype
    return np.dtype(np.float32) if not isinstance(v, np.floating) else v.dtype


def result_type(a: np.dtype, b: np.dtype) -> np.dtype:
    """DALI's promotion of two element types."""
    fa, fb = a.kind == "f", b.kind == "f"
    if fa and fb:
        return np.promote_types(a, b)
    if fa:
        return a
    if fb:
        return b
    if a.kind == "b" and b.kind == "b":
        return a
    if a.kind == "b":
        return b
    if b.kind == "b":
        return a
    return np.promote_types(a, b)


def binary(expr: str, x, y, tx: np.dtype, ty: np.dtype):
    """Apply a binary expression to arrays (or scalars) with DALI's result types."""
    out_t = result_type(tx, ty)
    if expr == "fdiv":
        ft = out_t if out_t.kind == "f" else np.dtype(np.float32)
        return np.true_divide(np.asarray(x, ft), np.asarray(y, ft)).astype(ft, copy=False)
    if expr == "div":
        if out_t.kind == "f":
            return np.true_divide(np.asarray(x, out_t), np.asarray(y, out_t)).astype(out_t, copy=False)
        xx, yy = np.asarray(x, out_t), np.asarray(y, out_t)
        # C-style integer division truncates toward zero (DALI's semantics)
        with np.errstate(divide="ignore"):
            q = np.where(yy != 0, np.trunc(np.true_divide(xx, np.where(yy == 0, 1, yy))), 0)
        return q.astype(out_t)
    if expr == "mod":
        xx, yy = np.asarray(x, out_t), np.asarray(y, out_t)
        return np.fmod(xx, yy).astype(out_t, copy=False)
    fn = _BINARY[expr]
    res = fn(np.asarray(x, out_t), np.asarray(y, out_t))
    if expr in _COMPARE:
        return res.astype(np.bool_, copy=False)
    return res.astype(out_t, copy=False)


def unary(expr: str, x):
    x = np.asarray(x)
    if expr in _UNARY_SAME:
        return _UNARY_SAME[expr](x).astype(x.dtype, copy=False)
    ft = x.dtype if x.dtype.kind == "f" else np.dtype(np.float32)
    return _UNARY_FLOAT[expr](x.astype(ft, copy=False)).astype(ft, copy=False)


@register
class Arithmetic(Operator):
    """Element-wise arithmetic of DataNodes and constants (created by Python operators on DataNodes)."""

    schema = Schema(
        name="_arithmetic",
        doc="Element-wise expression; created by operators on DataNodes and by stoker.math.",
        args=[Arg("expr", "str", "add"), Arg("lhs", "any", None), Arg("rhs", "any", None),
              Arg("lo", "any", None), Arg("hi", "any", None)],
        inputs=(1, 3),
        devices=("cpu", "gpu"),
    )

    def run_sample(self, inputs, args, ctx):
        expr = self.args["expr"]
        if expr in _UNARY_SAME or expr in _UNARY_FLOAT:
            return unary(expr, inputs[0])
        if expr == "clamp":
            x = inputs[0]
            lo = inputs[1] if len(inputs) > 1 else self.args["lo"]
            hi = inputs[2] if len(inputs) > 2 else self.args["hi"]
            return np.clip(x, lo, hi).astype(x.dtype, copy=False)
        it = iter(inputs)
        lhs, rhs = self.args["lhs"], self.args["rhs"]
        x = next(it) if lhs is None else lhs
        y = next(it) if rhs is None else rhs
        tx = x.dtype if lhs is None else _const_dtype(lhs)
        ty = y.dtype if rhs is None else _const_dtype(rhs)
        return binary(expr, x, y, tx, ty)

    def output_layouts(self, input_layouts):
        layouts = [lay for lay in input_layouts if lay]
        return [layouts[0] if layouts else ""]
