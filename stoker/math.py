"""Element-wise math on DataNodes (DALI's ``nvidia.dali.math``): ``math.sqrt(x)``, ``math.clamp(x, 0, 1)``."""

from __future__ import annotations

from stoker.pipeline.data_node import DataNode, arithmetic, invoke


def _unary(expr):
    def f(x: DataNode) -> DataNode:
        return invoke("_arithmetic", [x], {"expr": expr}, device=x.device)

    f.__name__ = expr
    f.__doc__ = f"Element-wise {expr} of a DataNode (integers give float32 where the result is fractional)."
    return f


abs = _unary("abs")  # noqa: A001 - DALI's name
fabs = _unary("fabs")
floor = _unary("floor")
ceil = _unary("ceil")
sqrt = _unary("sqrt")
rsqrt = _unary("rsqrt")
cbrt = _unary("cbrt")
exp = _unary("exp")
log = _unary("log")
log2 = _unary("log2")
log10 = _unary("log10")
sin = _unary("sin")
cos = _unary("cos")
tan = _unary("tan")
asin = _unary("asin")
acos = _unary("acos")
atan = _unary("atan")
sinh = _unary("sinh")
cosh = _unary("cosh")
tanh = _unary("tanh")
asinh = _unary("asinh")
acosh = _unary("acosh")
atanh = _unary("atanh")


def min(a, b):  # noqa: A001
    """Element-wise minimum."""
    return arithmetic("min", a, b)


def max(a, b):  # noqa: A001
    """Element-wise maximum."""
    return arithmetic("max", a, b)


def pow(a, b):  # noqa: A001
    """Element-wise power."""
    return arithmetic("pow", a, b)


def fpow(a, b):
    """Element-wise power computed in floating point."""
    return arithmetic("fpow", a, b)


def atan2(a, b):
    """Element-wise arctangent of a / b."""
    return arithmetic("atan2", a, b)


def clamp(x, lo, hi):
    """Element-wise clamp of x to [lo, hi]."""
    if isinstance(lo, DataNode) or isinstance(hi, DataNode):
        return invoke("_arithmetic", [x, lo, hi], {"expr": "clamp"}, device=x.device)
    return invoke("_arithmetic", [x], {"expr": "clamp", "lo": lo, "hi": hi}, device=x.device)
