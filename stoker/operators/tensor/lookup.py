"""Value mapping: ``lookup_table``, ``one_hot`` and ``element_extract``."""

from __future__ import annotations

import numpy as np

from stoker import types
from stoker.errors import arg_error
from stoker.operators.base import Operator
from stoker.operators.schema import Arg, Schema, register
from stoker.operators.tensor.basic import convert


@register
class LookupTable(Operator):
    """Maps integer keys to values through a table."""

    schema = Schema(
        name="lookup_table",
        doc="Replaces each integer element by the value paired with it in ``keys``/``values``; "
            "elements that are not keys get ``default_value``. The output type is ``dtype`` "
            "(default float32).",
        args=[Arg("keys", "int_list", [], doc="integer keys (0 ... 65535)"),
              Arg("values", "float_list", [], doc="one value per key"),
              Arg("default_value", "float", 0.0, doc="value of elements that are not keys"),
              Arg("dtype", "dtype", types.FLOAT, doc="output type"),
              Arg("output_dtype", "dtype", None, doc="deprecated name of dtype")],
        devices=("cpu",),
    )

    def setup(self):
        a = self.args
        keys, values = a["keys"], a["values"]
        if len(keys) != len(values):
            raise arg_error("lookup_table", "values", f"has {len(values)} entries for {len(keys)} keys")
        if any(k < 0 or k > 0xFFFF for k in keys):
            raise arg_error("lookup_table", "keys", "must be in [0, 65535]")
        dtype = np.dtype(a["output_dtype"] if a["output_dtype"] is not None else a["dtype"])
        size = max(keys) + 1 if keys else 1
        table = np.full(size, a["default_value"], np.float64)
        table[np.asarray(keys, np.int64)] = values
        self.table = convert(table, dtype)
        self.default = convert(np.asarray(a["default_value"], np.float64), dtype)

    def run_sample(self, inputs, args, ctx):
        x = inputs[0]
        if x.dtype.kind not in "iu":
            raise self.error(f"lookup_table: the input must hold integers, got {x.dtype.name}")
        inside = (x >= 0) & (x < len(self.table))
        out = np.full(x.shape, self.default, self.table.dtype)
        out[inside] = self.table[x[inside]]
        return out


@register
class OneHot(Operator):
    """One-hot encodes integer class indices."""

    schema = Schema(
        name="one_hot",
        doc="Encodes each index as ``num_classes`` values: ``on_value`` at the index, ``off_value`` "
            "elsewhere (indices outside [0, num_classes) are all ``off_value``). The new axis goes at "
            "``axis`` (-1: last); a scalar or one-element sample gives a 1D output.",
        args=[Arg("num_classes", "int", 0, doc="number of classes (required)"),
              Arg("axis", "int", -1, doc="position of the new axis (-1: last)"),
              Arg("axis_name", "layout", None, doc="layout letter of the new axis"),
              Arg("dtype", "dtype", types.FLOAT, doc="output type"),
              Arg("on_value", "float", 1.0, doc="value at the index"),
              Arg("off_value", "float", 0.0, doc="value elsewhere")],
        devices=("cpu",),
    )

    def setup(self):
        if self.args["num_classes"] <= 0:
            raise arg_error("one_hot", "num_classes", "must be a positive number of classes")
        name = self.args["axis_name"]
        if name is not None and len(name) != 1:
            raise arg_error("one_hot", "axis_name", f"must be a single letter, got {name!r}")
        dtype = self.args["dtype"]
        self.on = c_cast(self.args["on_value"], dtype)
        self.off = c_cast(self.args["off_value"], dtype)

    def run_sample(self, inputs, args, ctx):
        x = inputs[0]
        if x.size == 1:
            x = x.reshape(())
        n = self.args["num_classes"]
        axis = self.args["axis"]
        if not -1 <= axis <= x.ndim:
            raise self.error(f"one_hot: argument 'axis': {axis} is out of range for {x.ndim}D samples")
        hot = x.astype(np.int64)[..., None] == np.arange(n)
        out = np.where(hot, self.on, self.off).astype(self.on.dtype)
        if axis != -1 and axis != x.ndim:
            out = np.moveaxis(out, -1, axis)
        return np.ascontiguousarray(out)

    def output_layouts(self, input_layouts):
        lay = input_layouts[0] if input_layouts else ""
        name = self.args["axis_name"]
        if not name:
            return [""]
        axis = self.args["axis"]
        axis = len(lay) if axis == -1 else axis
        return [lay[:axis] + name + lay[axis:]]


@register
class ElementExtract(Operator):
    """Picks elements of the outermost axis (frames of a sequence) as separate outputs."""

    schema = Schema(
        name="element_extract",
        doc="Returns, for each index in ``element_map``, that element of the outermost axis (such "
            "as a frame of an F... sequence) as a separate output; the outermost layout letter goes.",
        args=[Arg("element_map", "int_list", None, doc="indices along the outermost axis")],
        devices=("cpu",),
        num_outputs=lambda a: len(a["element_map"] or [1]),
    )

    def setup(self):
        if not self.args["element_map"]:
            raise arg_error("element_extract", "element_map", "is required (a list of indices)")

    def run_sample(self, inputs, args, ctx):
        x = inputs[0]
        if x.ndim < 1:
            raise self.error("element_extract: the input must have an outer axis")
        outs = []
        for e in self.args["element_map"]:
            if not 0 <= e < x.shape[0]:
                raise self.error(f"element_extract: argument 'element_map': index {e} is out of range "
                                 f"for {x.shape[0]} elements")
            outs.append(x[e].copy())
        return tuple(outs)

    def output_layouts(self, input_layouts):
        lay = input_layouts[0] if input_layouts else ""
        return [lay[1:]] * self.num_outputs


def c_cast(value: float, dtype) -> np.ndarray:
    """A float argument in an integer type as a C cast gives it (truncated, then wrapped), as DALI
    applies on_value/off_value."""
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        return np.asarray(int(np.trunc(value))).astype(np.int64).astype(dtype)
    return np.asarray(value, dtype)
