"""``pad``: grow samples at the end of chosen axes to a common, requested or aligned extent."""

from __future__ import annotations

import numpy as np

from stoker.errors import OperatorError
from stoker.operators.base import Operator
from stoker.operators.image.geometry_batch import PerSample, sample_rows, sample_scalars
from stoker.operators.image.slice import c_cast_array
from stoker.operators.schema import Arg, Schema, register
from stoker.operators.tensor._axes import resolve_axes
from stoker.tensors import TensorListCPU


@register
class Pad(Operator):
    """Pads samples at the end of the selected axes."""

    schema = Schema(
        name="pad",
        legacy_name="Pad",
        doc="Pads each sample at the end of the selected axes (``axes`` / ``axis_names``; default: "
            "all) with ``fill_value``. Without ``shape``, an axis grows to the largest extent in the "
            "batch; ``shape`` asks for extents (-1: the batch's largest; never shrinks a sample); "
            "``align`` then rounds each extent up to a multiple (one value for all axes or one per "
            "axis). Keeps layout and type.",
        args=[Arg("axes", "int_list", None, tensor=True, doc="axes to pad (default: all)"),
              Arg("axis_names", "layout", None, doc="layout letters of the axes to pad"),
              Arg("shape", "int_list", None, tensor=True, doc="requested extents, -1: batch maximum"),
              Arg("align", "int_list", None, tensor=True, doc="extents round up to multiples of these"),
              Arg("fill_value", "float", 0.0, tensor=True, doc="value of the padding (C cast to the type)")],
        devices=("cpu",),
    )

    def run_cpu(self, batch, inputs, arg_inputs):
        tl = inputs[0]
        samples = tl.samples()
        if not samples:
            return [tl]
        targets = self.output_shapes([s.shape for s in samples], tl.layout(), arg_inputs)

        def one(i):
            x = samples[i]
            shape = targets[i]
            if tuple(shape) == x.shape:
                return x.copy()
            out = np.empty(shape, x.dtype)
            out[...] = self.fill(self.sample_args(arg_inputs, i), x.dtype)
            out[tuple(slice(0, s) for s in x.shape)] = x
            return out

        results = self.map_samples(batch, len(samples), one)
        kept = [i for i in range(len(samples)) if results[i] is not None]
        return [TensorListCPU([results[i] for i in kept], tl.layout(), [tl.source_info(i) for i in kept])]

    def output_shapes(self, shapes, layout: str, arg_inputs) -> list[list[int]]:
        """Output shape of every sample of a non-empty batch whose samples have ``shapes`` (the
        GPU pad calls this too). A bad argument fails the whole batch: an OperatorError."""
        try:
            return self._targets(shapes, layout, len(shapes[0]), arg_inputs)
        except ValueError as e:
            raise OperatorError(str(e), operator=self.instance_name, origin=self.origin) from None

    def output_shapes_batch(self, shapes, layout: str, arg_inputs) -> np.ndarray:
        """:meth:`output_shapes` as one (N, ndim) int64 array, computed for the whole batch with
        NumPy (:meth:`_targets_batch`); where that cannot read the arguments at once or some
        value is refused, the per-sample rule decides (and raises its error)."""
        shapes = np.asarray(shapes, np.int64)
        try:
            return self._targets_batch(shapes, layout, arg_inputs)
        except (PerSample, ValueError):
            return np.asarray(self.output_shapes([tuple(s) for s in shapes.tolist()], layout, arg_inputs),
                              np.int64).reshape(shapes.shape)

    def _targets_batch(self, shapes: np.ndarray, layout: str, arg_inputs) -> np.ndarray:
        """:meth:`_targets` for every sample at once (no step per sample): the same extents.
        Raises PerSample for per-sample ``axes`` or values NumPy cannot take at once, ValueError
        for values :meth:`_targets` refuses."""
        n, ndim = shapes.shape
        if "axes" in arg_inputs:  # axes that differ per sample: no common column layout
            raise PerSample("axes")
        static_axes = self.args.get("axes")
        axes_v = None if static_axes is None else np.asarray(static_axes).reshape(-1).tolist()
        axes = resolve_axes("pad", axes_v, self.args["axis_names"], layout, ndim)
        batch_max = shapes.max(axis=0) if ndim else np.zeros(0, np.int64)
        out = shapes.copy()
        req = _whole_rows(self, arg_inputs, "shape", n)
        if req is not None and req.shape[1] != len(axes):
            raise ValueError(f"pad: argument 'shape' has {req.shape[1]} values for {len(axes)} padded axes")
        for k, ax in enumerate(axes):  # in order: a repeated axis takes its last value, as _targets
            want = np.full(n, batch_max[ax]) if req is None else np.where(req[:, k] < 0, batch_max[ax], req[:, k])
            out[:, ax] = np.maximum(want, shapes[:, ax])
        align = _whole_rows(self, arg_inputs, "align", n)
        if align is not None:
            if align.shape[1] == 1:
                align = np.repeat(align, len(axes), axis=1)
            if align.shape[1] != len(axes) or (align < 1).any():
                raise ValueError(f"pad: argument 'align' needs 1 or {len(axes)} positive values")
            for k, ax in enumerate(axes):
                out[:, ax] = -(-out[:, ax] // align[:, k]) * align[:, k]
        return out

    def fill_values(self, arg_inputs, n: int, dtype) -> np.ndarray:
        """:meth:`fill` of every sample at once: (n,) values in ``dtype``. Raises PerSample
        where a sample's value is not one number (the per-sample rule then raises its error)."""
        if "fill_value" not in arg_inputs and self.args.get("fill_value") is None:
            raise PerSample("fill_value")  # the per-sample rule's error (float(None))
        values = sample_scalars(self, arg_inputs, "fill_value", n, 0.0)
        return c_cast_array(values, dtype)

    @staticmethod
    def fill(args: dict, dtype) -> np.ndarray:
        """The padding value of a sample with arguments ``args``, C cast to ``dtype`` (0D array)."""
        return c_cast_array(np.asarray(float(args.get("fill_value", 0.0))), dtype)

    def _targets(self, shapes, layout, ndim, arg_inputs) -> list[list[int]]:
        """Output shape of every sample (the batch maxima need all samples, hence batch level)."""
        static_axes = self.args.get("axes")
        batch_max = np.max(shapes, axis=0) if ndim else np.zeros(0, int)
        out = []
        for i, in_shape in enumerate(shapes):
            args = self.sample_args(arg_inputs, i)
            axes_v = args.get("axes", static_axes)
            axes_v = None if axes_v is None else np.asarray(axes_v).reshape(-1).tolist()
            axes = resolve_axes("pad", axes_v, self.args["axis_names"], layout, ndim)
            shape = list(in_shape)
            req = args.get("shape")
            req = None if req is None else [int(v) for v in np.asarray(req).reshape(-1)]
            if req is not None and len(req) != len(axes):
                raise ValueError(f"pad: argument 'shape' has {len(req)} values for {len(axes)} padded axes")
            for k, ax in enumerate(axes):
                want = batch_max[ax] if req is None or req[k] < 0 else req[k]
                shape[ax] = max(int(want), in_shape[ax])
            align = args.get("align")
            if align is not None:
                al = [int(v) for v in np.asarray(align).reshape(-1)]
                if len(al) == 1:
                    al = al * len(axes)
                if len(al) != len(axes) or any(a < 1 for a in al):
                    raise ValueError(f"pad: argument 'align' needs 1 or {len(axes)} positive values, got {al}")
                for a, ax in zip(al, axes):
                    shape[ax] = -(-shape[ax] // a) * a
            out.append(shape)
        return out


def _whole_rows(op, arg_inputs, name: str, n: int) -> np.ndarray | None:
    """Integer list argument ``name`` of every sample as (n, k) int64 (``int(v)`` of each value,
    as :meth:`Pad._targets`), None when not given; PerSample where NumPy cannot take the values
    at once or float64 may not hold them exactly."""
    rows = sample_rows(op, arg_inputs, name, n)
    if rows is None:
        return None
    if not (np.abs(rows) < 2.0 ** 53).all():  # NaN fails this too
        raise PerSample(name)
    return np.trunc(rows).astype(np.int64)
