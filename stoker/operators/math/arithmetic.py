"""Arithmetic on DataNodes (``a + b``, ``-a``, ``a < b``) and ``stoker.math`` functions.

Type rules follow DALI: a Python int constant is int32, a float constant is
float32; integer with integer promotes as NumPy does; integer with floating
point gives the floating type; ``/`` of integers gives float32; comparisons
give bool; ``//`` of floating-point values divides exactly (as DALI does).
"""

from __future__ import annotations

import numpy as np

from stoker import settings
from stoker.operators.base import Operator
from stoker.operators.schema import Arg, Schema, register
from stoker.tensors import batch_of_rows, stacked_small

# expression -> function name, the same in NumPy and CuPy (the GPU path passes xp=cupy)
_BINARY = {
    "add": "add", "sub": "subtract", "mul": "multiply", "pow": "power", "mod": None,
    "bitand": "bitwise_and", "bitor": "bitwise_or", "bitxor": "bitwise_xor",
    "eq": "equal", "neq": "not_equal", "lt": "less", "leq": "less_equal",
    "gt": "greater", "geq": "greater_equal", "min": "minimum", "max": "maximum",
    "fdiv": None, "div": None, "atan2": "arctan2", "fpow": "power",
}
_UNARY_FLOAT = {
    "sqrt": "sqrt", "rsqrt": None, "cbrt": "cbrt", "exp": "exp", "log": "log", "log2": "log2", "log10": "log10",
    "sin": "sin", "cos": "cos", "tan": "tan", "asin": "arcsin", "acos": "arccos", "atan": "arctan",
    "sinh": "sinh", "cosh": "cosh", "tanh": "tanh", "asinh": "arcsinh", "acosh": "arccosh", "atanh": "arctanh",
}
_UNARY_SAME = {"neg": "negative", "abs": "abs", "fabs": "abs", "floor": "floor", "ceil": "ceil",
               "bitnot": "invert", "round": "rint"}
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


def _into(out, dtype: np.dtype, *operands):
    """``out`` when the result (of ``dtype``, the operands' broadcast shape) can be written into
    it, else None (the result is then a new array)."""
    if out is None or out.dtype != dtype:
        return None
    try:
        shape = np.broadcast_shapes(*(tuple(getattr(v, "shape", ())) for v in operands))
    except ValueError:
        return None
    return out if tuple(shape) == tuple(out.shape) else None


def binary(expr: str, x, y, tx: np.dtype, ty: np.dtype, xp=np, out=None):
    """Apply a binary expression to arrays (or scalars) with DALI's result types; ``xp`` is the
    array module (NumPy, or CuPy for device arrays). ``out``: an array the result may be written
    into (an input whose memory is free to reuse); used where the result has its type and shape."""
    out_t = result_type(tx, ty)
    if expr == "fdiv":
        ft = out_t if out_t.kind == "f" else np.dtype(np.float32)
        xx, yy = xp.asarray(x, ft), xp.asarray(y, ft)
        return xp.true_divide(xx, yy, out=_into(out, ft, xx, yy)).astype(ft, copy=False)
    if expr == "div":
        if out_t.kind == "f":
            xx, yy = xp.asarray(x, out_t), xp.asarray(y, out_t)
            return xp.true_divide(xx, yy, out=_into(out, out_t, xx, yy)).astype(out_t, copy=False)
        xx, yy = xp.asarray(x, out_t), xp.asarray(y, out_t)
        # C-style integer division truncates toward zero (DALI's semantics); a zero divisor gives 0
        # (divided by 1, then multiplied by 0: no division by zero to silence, and no where()).
        q = xp.trunc(xp.true_divide(xx, yy + (yy == 0))) * (yy != 0)
        return q.astype(out_t)
    if expr == "mod":
        xx, yy = xp.asarray(x, out_t), xp.asarray(y, out_t)
        return xp.fmod(xx, yy).astype(out_t, copy=False)
    xx, yy = xp.asarray(x, out_t), xp.asarray(y, out_t)
    res = getattr(xp, _BINARY[expr])(xx, yy, out=None if expr in _COMPARE else _into(out, out_t, xx, yy))
    if expr in _COMPARE:
        return res.astype(np.bool_, copy=False)
    return res.astype(out_t, copy=False)


def unary(expr: str, x, xp=np):
    """Apply a unary expression: ``_UNARY_SAME`` keep the type, the others compute in floating point."""
    x = xp.asarray(x)
    if expr in _UNARY_SAME:
        return getattr(xp, _UNARY_SAME[expr])(x).astype(x.dtype, copy=False)
    ft = x.dtype if x.dtype.kind == "f" else np.dtype(np.float32)
    x = x.astype(ft, copy=False)
    res = 1.0 / xp.sqrt(x) if expr == "rsqrt" else getattr(xp, _UNARY_FLOAT[expr])(x)
    return res.astype(ft, copy=False)


def evaluate(args: dict, inputs: list, xp=np, out=None):
    """One sample's (or one flat buffer's) result of the ``_arithmetic`` operator with arguments
    ``args`` (expr, lhs/rhs constants, lo/hi) on ``inputs``; binary expressions may write it into
    ``out`` (see :func:`binary`)."""
    expr = args["expr"]
    if expr in _UNARY_SAME or expr in _UNARY_FLOAT:
        return unary(expr, inputs[0], xp)
    if expr == "clamp":
        x = inputs[0]
        lo = inputs[1] if len(inputs) > 1 else args["lo"]
        hi = inputs[2] if len(inputs) > 2 else args["hi"]
        return xp.clip(x, lo, hi).astype(x.dtype, copy=False)
    it = iter(inputs)
    lhs, rhs = args["lhs"], args["rhs"]
    x = next(it) if lhs is None else lhs
    y = next(it) if rhs is None else rhs
    tx = x.dtype if lhs is None else _const_dtype(lhs)
    ty = y.dtype if rhs is None else _const_dtype(rhs)
    return binary(expr, x, y, tx, ty, xp, out=out)


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
    gpu_writes_in_place = True  # a float x / 255 after a cast reuses the cast's buffer

    def bind_pipeline(self, pipe) -> None:
        if self.device == "gpu" and settings.get().preload_cupyx is not False:
            # (CuPy's first arithmetic imports cupyx: do it now, beside the build)
            from stoker.backend.cuda import preload_cupyx

            preload_cupyx()

    def run_sample(self, inputs, args, ctx):
        return evaluate(self.args, inputs)

    def run_batch(self, batch, inputs, arg_inputs):
        # Batches of small samples of one shape (per-sample scalars: magnitudes, flags, the
        # arithmetic of auto_aug's parameters) in one NumPy step, not one Python call per sample.
        stacked = stacked_small(inputs)
        if stacked is None:
            return None
        with np.errstate(all="ignore"):
            result = np.asarray(evaluate(self.args, stacked))
        return [batch_of_rows(result, self.output_layouts([t.layout() for t in inputs])[0],
                              inputs[0].source_info())]

    def output_layouts(self, input_layouts):
        layouts = [lay for lay in input_layouts if lay]
        return [layouts[0] if layouts else ""]
