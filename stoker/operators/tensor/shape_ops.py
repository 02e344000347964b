"""Shape and type views: ``squeeze``, ``expand_dims``, ``reinterpret`` and ``cast_like``.

None of them touches the values (``cast_like`` converts them); they change the
shape, the element type seen through the same bytes, or the layout string.
"""

from __future__ import annotations

import numpy as np

from stoker.errors import arg_error
from stoker.operators.image.crop import LayoutAware
from stoker.operators.schema import Arg, Schema, register
from stoker.operators.tensor._axes import drop_layout, resolve_axes
from stoker.operators.tensor.basic import convert
from stoker.tensors import TensorListCPU


@register
class Squeeze(LayoutAware):
    """Removes axes of extent 1."""

    schema = Schema(
        name="squeeze",
        doc="Removes the given axes, each of which must have extent 1. Select them with ``axes`` "
            "(indices) or ``axis_names`` (layout letters); their letters leave the layout.",
        args=[Arg("axes", "int_list", None, tensor=True, doc="indices of the axes to remove"),
              Arg("axis_names", "layout", None, doc="layout letters of the axes to remove")],
        devices=("cpu",),
    )

    def setup(self):
        if self.args.get("axes") is None and "axes" in self.args and not self.args["axis_names"]:
            raise arg_error("squeeze", "axes", "give axes or axis_names")

    def output_shape(self, shape: tuple, args: dict, layout: str) -> tuple:
        """The squeezed shape of a sample of ``shape`` (its per-sample ``args``, the batch's
        ``layout``); raises the sample's error. Shared with the GPU operator (no data needed)."""
        axes = args.get("axes")
        axes = None if axes is None else np.asarray(axes).reshape(-1).tolist()
        sel = resolve_axes("squeeze", axes, self.args["axis_names"], layout, len(shape))
        for a in sel:
            if shape[a] != 1:
                raise self.error(f"squeeze: argument 'axes': axis {a} has extent {shape[a]}, not 1 "
                                 f"(sample shape {shape})")
        return tuple(s for i, s in enumerate(shape) if i not in set(sel))

    def run_sample(self, inputs, args, ctx):
        x = inputs[0]
        return x.reshape(self.output_shape(x.shape, args, self.layout_of(args)))

    def output_layouts(self, input_layouts):
        lay = input_layouts[0] if input_layouts else ""
        if not lay:
            return [""]
        try:
            sel = resolve_axes("squeeze", self.args.get("axes"), self.args["axis_names"], lay, len(lay))
        except ValueError:
            return [""]
        return [drop_layout(lay, sel)]


@register
class ExpandDims(LayoutAware):
    """Inserts axes of extent 1."""

    schema = Schema(
        name="expand_dims",
        doc="Inserts axes of extent 1 at ``axes`` (indices in the output). ``new_axis_names`` gives "
            "their layout letters, paired with ``axes`` in order; without it the output has no layout.",
        args=[Arg("axes", "int_list", None, doc="positions of the new axes in the output"),
              Arg("new_axis_names", "layout", "", doc="layout letters of the new axes")],
        devices=("cpu",),
    )

    def setup(self):
        axes, names = self.args["axes"], self.args["new_axis_names"]
        if axes is None:
            raise arg_error("expand_dims", "axes", "is required")
        if len(set(axes)) != len(axes) or any(a < 0 for a in axes):
            raise arg_error("expand_dims", "axes", f"must be distinct non-negative indices, got {axes}")
        if names and len(names) != len(axes):
            raise arg_error("expand_dims", "new_axis_names",
                            f"has {len(names)} letters for {len(axes)} axes")

    def output_shape(self, shape: tuple) -> tuple:
        """The shape of a sample of ``shape`` with the new axes (as ``np.expand_dims``); raises the
        sample's error. Shared with the GPU operator (no data needed)."""
        axes = self.args["axes"]
        ndim = len(shape) + len(axes)
        if max(axes) >= ndim:
            raise self.error(f"expand_dims: argument 'axes': {max(axes)} is out of range for a "
                             f"{len(shape)}D sample ({ndim} dimensions after expansion)")
        new, rest = set(axes), iter(shape)
        return tuple(1 if d in new else next(rest) for d in range(ndim))

    def run_sample(self, inputs, args, ctx):
        x = inputs[0]
        return x.reshape(self.output_shape(x.shape))

    def output_layouts(self, input_layouts):
        lay = input_layouts[0] if input_layouts else ""
        names = self.args["new_axis_names"]
        if not names or (not lay and len(names) != len(self.args["axes"])):
            return [""]
        out = list(lay)
        for a, n in sorted(zip(self.args["axes"], names)):
            out.insert(a, n)
        return ["".join(out)]


@register
class Reinterpret(LayoutAware):
    """Views the same bytes with another element type, shape or layout."""

    schema = Schema(
        name="reinterpret",
        doc="Reinterprets each sample's bytes as ``dtype`` (no conversion) and/or gives it a new "
            "``shape`` (as an argument or a second input), ``rel_shape`` (multipliers of the input "
            "extents; -1 infers one) or ``src_dims``; the byte size must match. ``layout`` sets the "
            "output layout.",
        args=[Arg("dtype", "dtype", None, doc="element type to view the bytes as"),
              Arg("shape", "int_list", None, tensor=True, doc="new shape; -1 infers one extent"),
              Arg("rel_shape", "float_list", None, tensor=True, doc="new shape relative to the input's"),
              Arg("src_dims", "int_list", None, tensor=True, doc="input axes to keep, -1 inserts a 1"),
              Arg("layout", "layout", None, doc="output layout")],
        inputs=(1, 2),
        devices=("cpu",),
    )

    def setup(self):
        given = [k for k in ("shape", "rel_shape", "src_dims") if self.args.get(k) is not None]
        if len(given) > 1:
            raise arg_error("reinterpret", given[1], f"cannot be given together with {given[0]}")

    def output_shape(self, in_shape: tuple, in_dtype, args: dict, shape_input=None) -> tuple:
        """``(element type, shape)`` of the output for a C-contiguous sample of ``in_shape`` and
        ``in_dtype`` (its per-sample ``args``; ``shape_input``, the second input's sample, if
        any). Raises the sample's error. The output is always the sample's bytes read as that
        type and shape, so the GPU operator makes it from this without touching the data."""
        in_shape = tuple(int(s) for s in in_shape)
        in_dtype = np.dtype(in_dtype)
        out_dtype, view_shape = in_dtype, in_shape
        dtype = self.args["dtype"]
        if dtype is not None and dtype != in_dtype:
            # The shape NumPy's view gives: the last extent rescaled where its bytes divide evenly,
            # else the whole sample flattened.
            item, new = in_dtype.itemsize, np.dtype(dtype).itemsize
            nbytes = int(np.prod(in_shape, dtype=np.int64)) * item
            if in_shape and (in_shape[-1] * item) % new == 0:
                view_shape = (*in_shape[:-1], in_shape[-1] * item // new)
            elif nbytes % new == 0:
                view_shape = (nbytes // new,)
            else:
                raise self.error(f"reinterpret: argument 'dtype': {nbytes} bytes are not a whole number "
                                 f"of {np.dtype(dtype).name} elements")
            out_dtype = np.dtype(dtype)
        shape = None
        if shape_input is not None:
            shape = [int(v) for v in np.asarray(shape_input).reshape(-1)]
        elif args.get("shape") is not None:
            shape = [int(v) for v in np.asarray(args["shape"]).reshape(-1)]
        elif args.get("rel_shape") is not None:
            shape = [-1 if r < 0 else int(round(r * s))
                     for r, s in zip(np.asarray(args["rel_shape"]).reshape(-1), in_shape)]
        elif args.get("src_dims") is not None:
            shape = [in_shape[d] if d >= 0 else 1 for d in np.asarray(args["src_dims"]).reshape(-1)]
        if shape is None:
            return out_dtype, view_shape
        size = int(np.prod(view_shape, dtype=np.int64))
        out_shape = reshaped(size, shape)
        if out_shape is None:
            raise self.error(f"reinterpret: argument 'shape': cannot view {size} {out_dtype.name} elements "
                             f"(shape {view_shape}) as shape {shape}")
        return out_dtype, out_shape

    def run_sample(self, inputs, args, ctx):
        x = inputs[0] if inputs[0].flags.c_contiguous else inputs[0].copy()
        dtype, shape = self.output_shape(x.shape, x.dtype, args, inputs[1] if len(inputs) > 1 else None)
        return x.reshape(-1).view(dtype).reshape(shape)

    def output_layout(self, in_layout: str, num_samples: int, ndim: int) -> str:
        """The output layout for a batch of ``num_samples`` samples of ``ndim`` dimensions;
        raises when the ``layout`` argument does not fit. Shared with the GPU operator."""
        layout = self.args["layout"]
        if layout is None:  # the input's layout survives when the rank does, as in DALI
            layout = in_layout if num_samples and len(in_layout) == ndim else ""
        if layout and num_samples and len(layout) != ndim:
            raise arg_error("reinterpret", "layout", f"{layout!r} does not fit {ndim}D output samples")
        return layout

    def run_cpu(self, batch, inputs, arg_inputs):
        out, = super().run_cpu(batch, inputs, arg_inputs)
        layout = self.output_layout(inputs[0].layout(), len(out), out.ndim)
        return [TensorListCPU(out.samples(), layout, out.source_info())]


def reshaped(size: int, shape: list[int]) -> tuple | None:
    """``shape`` for ``size`` elements with its unknown extent worked out, as NumPy's reshape
    does it (any negative value is the unknown one, -1 by convention); None where NumPy refuses
    (two unknown extents, a count that does not match, or an unknown beside a zero extent)."""
    known, unknown = 1, None
    for i, s in enumerate(shape):
        if s < 0:
            if unknown is not None:
                return None
            unknown = i
        else:
            known *= s
    if unknown is None:
        return tuple(shape) if known == size else None
    if known == 0 or size % known:
        return None
    return tuple(size // known if i == unknown else s for i, s in enumerate(shape))


@register
class CastLike(LayoutAware):
    """Converts the first input to the element type of the second."""

    schema = Schema(
        name="cast_like",
        doc="Converts the first input's elements to the type of the second input (rounding to "
            "nearest and saturating for integer results, as ``cast``).",
        inputs=(2, 2),
        devices=("cpu",),
    )

    def run_sample(self, inputs, args, ctx):
        return convert(inputs[0], inputs[1].dtype)
