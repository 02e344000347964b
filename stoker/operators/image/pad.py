"""``pad``: grow samples at the end of chosen axes to a common, requested or aligned extent."""

from __future__ import annotations

import numpy as np

from stoker.errors import OperatorError
from stoker.operators.base import Operator
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
