"""Small tensor operators: constant, shapes, cast, copy, reshape, transpose,
subscript (``node[...]``) and get_property."""

from __future__ import annotations

import numpy as np

from stoker import types
from stoker.errors import PipelineBuildError, arg_error
from stoker.operators.base import Operator
from stoker.operators.schema import REQUIRED, Arg, Schema, register
from stoker.tensors import TensorListCPU, batch_of_rows, stacked_small


@register
class Constant(Operator):
    """The same tensor for every sample (``fn.constant`` / ``types.Constant``)."""

    schema = Schema(
        name="constant",
        doc="Produces the same tensor for every sample of the batch.",
        args=[Arg("fdata", "float_list", None, doc="floating-point values"),
              Arg("idata", "int_list", None, doc="integer values"),
              Arg("value", "any", None, doc="(internal) a NumPy value"),
              Arg("shape", "int_list", None, doc="shape; default: a 1D tensor of the values"),
              Arg("dtype", "dtype", None, doc="output type; default int32 for idata, float32 for fdata"),
              Arg("layout", "layout", None)],
        inputs=(0, 0),
        devices=("cpu", "gpu"),
    )

    def setup(self):
        a = self.args
        if a["value"] is not None:
            val = np.asarray(a["value"])
            if val.dtype == np.float64:
                val = val.astype(np.float32)
            elif val.dtype == np.int64:
                val = val.astype(np.int32)
        elif a["fdata"] is not None:
            val = np.asarray(a["fdata"], np.float32)
        elif a["idata"] is not None:
            val = np.asarray(a["idata"], np.int32)
        else:
            raise arg_error("constant", "fdata", "give fdata or idata")
        if a["dtype"] is not None:
            val = val.astype(a["dtype"])
        if a["shape"] is not None:
            try:
                if val.size == int(np.prod(a["shape"])):
                    val = val.reshape(a["shape"])
                else:
                    val = np.broadcast_to(val.reshape(-1) if val.size != 1 else val.reshape(()),
                                          a["shape"]).copy()
            except ValueError:
                raise arg_error("constant", "shape", f"{a['shape']} does not fit {val.size} values") from None
        val.setflags(write=False)
        self.value = val

    def run_cpu(self, batch, inputs, arg_inputs):
        # one broadcast array (its per-sample views are made only if asked for: a per-sample
        # conversion cost a Python call per sample in the CPU stage); Subscript and the argument
        # readers see the one value through it
        v = self.value
        return [batch_of_rows(np.broadcast_to(v, (batch.batch_size, *v.shape)), self.args["layout"] or "")]


@register
class Shapes(Operator):
    """The shape of each sample, as a 1D tensor."""

    schema = Schema(name="shapes", doc="Returns the shape of each input sample as a 1D tensor.",
                    args=[Arg("dtype", "dtype", types.INT64, doc="output type"),
                          Arg("type", "dtype", None, doc="deprecated name of dtype")],
                    devices=("cpu",))

    def setup(self):
        self.dtype = self.args["dtype"] if self.args.get("type") is None else self.args["type"]

    def run_sample(self, inputs, args, ctx):
        return np.asarray(inputs[0].shape, dtype=self.dtype)

    def output_layouts(self, input_layouts):
        return [""]


@register
class Cast(Operator):
    """Converts element type (saturating for integers, as DALI)."""

    schema = Schema(name="cast", doc="Converts the element type; integer results saturate.",
                    args=[Arg("dtype", "dtype", None, doc="output type (required)")],
                    devices=("cpu", "gpu"), legacy_name="Cast")

    def setup(self):
        if self.args["dtype"] is None:
            raise arg_error("cast", "dtype", "is required")

    def run_sample(self, inputs, args, ctx):
        return convert(inputs[0], self.args["dtype"])


def convert(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Cast as DALI does: float to integer rounds halves away from zero (2.5 -> 3,
    -0.5 -> -1) and saturates; integer to a narrower integer saturates."""
    dtype = np.dtype(dtype)
    if dtype.kind in "iu" and x.dtype.kind == "f":
        info = np.iinfo(dtype)
        x64 = x.astype(np.float64)  # exact for float16/32, so adding the half cannot round up
        return np.clip(np.trunc(x64 + np.copysign(0.5, x64)), info.min, info.max).astype(dtype)
    if dtype.kind in "iu" and x.dtype.kind in "iu":
        info = np.iinfo(dtype)
        if np.can_cast(x.dtype, dtype):
            return x.astype(dtype)
        return np.clip(x, info.min, info.max).astype(dtype)
    return x.astype(dtype)


@register
class Copy(Operator):
    """Copies its input."""

    schema = Schema(name="copy", doc="Returns a copy of the input.", devices=("cpu", "gpu"))

    def run_sample(self, inputs, args, ctx):
        return inputs[0].copy()


def _inferred(in_shapes: np.ndarray, requested: np.ndarray) -> np.ndarray | None:
    """NumPy's reshape rule for every row: ``requested`` (N, k) with at most one -1, inferred from
    the element count of ``in_shapes`` (N, d); None when any row does not fit."""
    sizes = np.prod(in_shapes, axis=1, dtype=np.int64)
    out = np.array(requested, np.int64, copy=True)
    free = out == -1
    if (free.sum(axis=1) > 1).any() or (out[~free] < 0).any():
        return None
    rows = free.any(axis=1)
    if rows.any():
        known = np.prod(np.where(free, 1, out), axis=1, dtype=np.int64)
        if (known[rows] == 0).any() or (sizes[rows] % known[rows]).any():
            return None
        out[free] = (sizes // np.where(known == 0, 1, known))[rows]
    if (np.prod(out, axis=1, dtype=np.int64) != sizes).any():
        return None
    return out


@register
class Reshape(Operator):
    """Gives samples a new shape with the same number of elements."""

    schema = Schema(
        name="reshape",
        doc="Reshapes each sample; -1 in ``shape`` infers that extent. ``rel_shape`` scales input extents.",
        args=[Arg("shape", "int_list", None, tensor=True), Arg("rel_shape", "float_list", None, tensor=True),
              Arg("layout", "layout", None), Arg("src_dims", "int_list", None, tensor=True)],
        devices=("cpu", "gpu"), inputs=(1, 2))

    def run_sample(self, inputs, args, ctx):
        x = inputs[0]
        shape = self.requested_shape(x.shape, args, inputs[1] if len(inputs) > 1 else None)
        if shape is None:
            return x
        try:
            return x.reshape(shape)
        except ValueError:
            raise self.error(f"cannot reshape a sample of shape {x.shape} to {shape}") from None

    def requested_shape(self, in_shape, args, shape_input=None) -> list | None:
        """The shape a sample of ``in_shape`` is given (-1 still to infer), or None to keep it."""
        if shape_input is not None:
            return [int(v) for v in np.asarray(shape_input).reshape(-1)]
        if args.get("shape") is not None:
            return [int(v) for v in np.asarray(args["shape"]).reshape(-1)]
        if args.get("rel_shape") is not None:
            return [int(round(r * s)) for r, s in zip(np.asarray(args["rel_shape"]).reshape(-1), in_shape)]
        if args.get("src_dims") is not None:
            return [in_shape[d] if d >= 0 else 1 for d in args["src_dims"]]
        return None

    def output_shape(self, in_shape, args, shape_input=None) -> tuple:
        """The shape of the reshaped sample (NumPy's rules, -1 inferred); ValueError if none fits."""
        shape = self.requested_shape(in_shape, args, shape_input)
        if shape is None:
            return tuple(int(v) for v in in_shape)
        out = _inferred(np.asarray([in_shape], np.int64).reshape(1, -1), np.asarray([shape], np.int64))
        if out is None:
            raise ValueError(f"cannot reshape a sample of shape {tuple(in_shape)} to {shape}")
        return tuple(out[0].tolist())

    def output_shapes(self, in_shapes: np.ndarray, arg_inputs: dict) -> np.ndarray | None:
        """:meth:`output_shape` of every sample at once, ``(N, k)`` int64, for static arguments;
        None where the per-sample rule must run (per-sample arguments, or a sample that does not
        fit, which the per-sample rule names)."""
        if arg_inputs:
            return None
        a = self.args
        n = len(in_shapes)
        if a.get("shape") is not None:
            req = np.broadcast_to(np.asarray(a["shape"], np.int64).reshape(1, -1), (n, len(a["shape"])))
        elif a.get("rel_shape") is not None:
            rel = np.asarray(a["rel_shape"], np.float64).reshape(-1)
            m = min(rel.size, in_shapes.shape[1])
            req = np.rint(rel[:m] * in_shapes[:, :m]).astype(np.int64)  # round(): halves to even
        elif a.get("src_dims") is not None:
            dims = list(a["src_dims"])
            req = np.stack([in_shapes[:, d] if d >= 0 else np.ones(n, np.int64) for d in dims], 1) if dims \
                else np.zeros((n, 0), np.int64)
        else:
            return np.asarray(in_shapes, np.int64)
        return _inferred(np.asarray(in_shapes, np.int64), req)

    def output_layouts(self, input_layouts):
        return [self.args["layout"] if self.args["layout"] is not None else ""]


@register
class Transpose(Operator):
    """Permutes the dimensions of each sample."""

    schema = Schema(name="transpose", doc="Permutes dimensions by ``perm``.",
                    args=[Arg("perm", "int_list", None), Arg("output_layout", "layout", None),
                          Arg("transpose_layout", "bool", True)],
                    devices=("cpu", "gpu"))

    def setup(self):
        if self.args["perm"] is None:
            raise arg_error("transpose", "perm", "is required")

    def run_sample(self, inputs, args, ctx):
        return np.ascontiguousarray(np.transpose(inputs[0], self.args["perm"]))

    def output_layouts(self, input_layouts):
        if self.args["output_layout"]:
            return [self.args["output_layout"]]
        lay = input_layouts[0] if input_layouts else ""
        if not self.args["transpose_layout"]:
            return [lay]  # the layout string is kept as it was, as DALI does
        if lay and len(lay) == len(self.args["perm"]):
            return ["".join(lay[p] for p in self.args["perm"])]
        return [""]


@register
class Subscript(Operator):
    """``node[index, start:stop:step, ...]`` per sample; indices may be per-sample DataNodes."""

    schema = Schema(name="_subscript", doc="Tensor indexing and slicing.", args=[Arg("spec", "any", ())],
                    devices=("cpu", "gpu"), allow_unknown_args=True)

    def run_batch(self, batch, inputs, arg_inputs):
        shared = self._shared_rows(inputs[0], arg_inputs)
        if shared is not None:
            return [batch_of_rows(shared, self.output_layouts([inputs[0].layout()])[0], inputs[0].source_info())]
        # Indices into small samples of one shape (shapes, magnitudes, a table row per sample):
        # the whole batch in one NumPy step (the batch axis first), not one Python call per sample.
        stacked = stacked_small(inputs[:1])
        key = None if stacked is None else self._batch_key(arg_inputs, len(inputs[0]))
        if key is None:
            return None
        out = np.ascontiguousarray(stacked[0][key])
        return [batch_of_rows(out, self.output_layouts([inputs[0].layout()])[0], inputs[0].source_info())]

    def _shared_rows(self, x, arg_inputs: dict):
        """Per-sample indices into one array that every sample shares (a constant table, as
        auto_aug's magnitude tables are): ``table[indices]`` for the whole batch at once, with no
        stack of N copies of the table. None where this does not apply, or where an index is out of
        range (the per-sample path then names the sample)."""
        n = len(x)
        spec = self.args["spec"]
        if not n or not arg_inputs or any(item[0] != "index" for item in spec):
            return None
        dense = getattr(x, "_dense", None)
        if dense is not None and dense.strides[0] == 0:  # a constant's batch: one value broadcast
            table, shared = dense[0], True
        else:
            samples = x.samples()
            table = samples[0]
            # Samples that are views of one array, each over all of it with one shape and strides,
            # are the same data.
            base = table.base
            shared = all(s is table for s in samples) or (
                isinstance(base, np.ndarray) and table.size == base.size
                and all(s.base is base and s.shape == table.shape and s.strides == table.strides
                        for s in samples))
        if len(spec) > table.ndim or not shared:
            return None
        key = []
        for axis, item in enumerate(spec):
            if not isinstance(item[1], str):
                key.append(int(item[1]))
                continue
            vals = np.asarray(arg_inputs[item[1]])
            if vals.dtype.kind not in "biuf" or vals.size != n:
                return None
            vals = vals.reshape(n)
            if vals.dtype.kind == "f" and not np.isfinite(vals).all():
                return None
            vals = vals.astype(np.int64)  # int(): towards zero, as the per-sample path
            if ((vals < -table.shape[axis]) | (vals >= table.shape[axis])).any():
                return None
            key.append(vals)
        if not any(isinstance(k, np.ndarray) for k in key):
            return None
        return np.ascontiguousarray(np.broadcast_to(table[tuple(key)], (n, *table.shape[len(spec):])))

    def _batch_key(self, arg_inputs: dict, n: int):
        """The index of the whole ``(N, ...)`` batch, or None where only the per-sample path
        can say: static indices and slices behind the batch axis, or only indices (static or per
        sample, e.g. a random sign picking a row of a table) as integer arrays."""
        if not arg_inputs:
            return (slice(None), *self._key({}))
        spec = self.args["spec"]
        if any(item[0] != "index" for item in spec):
            return None
        key = [np.arange(n)]
        for item in spec:
            if not isinstance(item[1], str):
                key.append(int(item[1]))
                continue
            vals = np.asarray(arg_inputs[item[1]])
            if vals.dtype.kind not in "biuf" or vals.size != n:
                return None
            vals = vals.reshape(n)
            if vals.dtype.kind == "f" and not np.isfinite(vals).all():
                return None
            key.append(vals.astype(np.int64))  # int(): towards zero, as the per-sample path
        return tuple(key)

    def _key(self, args) -> list:
        """The index of one sample: the spec with its per-sample parts taken from ``args``."""
        key = []
        for item in self.args["spec"]:
            kind = item[0]
            if kind == "ellipsis":
                key.append(Ellipsis)
            elif kind == "newaxis":
                key.append(None)
            elif kind == "index":
                v = args[item[1]] if isinstance(item[1], str) else item[1]
                key.append(int(v))
            else:
                parts = [args[p] if isinstance(p, str) else p for p in item[1:]]
                key.append(slice(*[None if p is None else int(p) for p in parts]))
        return key

    def run_sample(self, inputs, args, ctx):
        key = self._key(args)
        try:
            out = inputs[0][tuple(key)]
            if np.ndim(out) == 0:  # a full index gives a 0-d sample, as in DALI
                return np.array(out)
            return np.ascontiguousarray(out)
        except IndexError as e:
            raise self.error(f"index out of range for a sample of shape {inputs[0].shape}: {e}") from None

    def output_layouts(self, input_layouts):
        lay = input_layouts[0] if input_layouts else ""
        if not lay:
            return [""]
        out, dim = [], 0
        for item in self.args["spec"]:
            if item[0] == "ellipsis":
                rest = sum(1 for i in self.args["spec"] if i[0] in ("index", "slice"))
                n = len(lay) - rest
                out.extend(lay[dim:dim + n])
                dim += n
            elif item[0] == "newaxis":
                out.append("")
            elif item[0] == "index":
                dim += 1
            else:
                out.append(lay[dim])
                dim += 1
        out.extend(lay[dim:])
        return ["".join(out) if "" not in out else ""]


@register
class GetProperty(Operator):
    """A per-sample property: ``source_info`` (the sample's origin, as UTF-8 bytes) or ``layout``."""

    schema = Schema(name="get_property", doc="Per-sample metadata: key 'source_info' or 'layout'.",
                    args=[Arg("key", "str", REQUIRED, doc="'source_info' or 'layout' (required, as in DALI)")],
                    devices=("cpu",))

    def setup(self):
        if self.args["key"] not in ("source_info", "layout"):
            raise PipelineBuildError(f"get_property: argument 'key' must be 'source_info' or 'layout', "
                                     f"got {self.args['key']!r}")

    def run_cpu(self, batch, inputs, arg_inputs):
        tl = inputs[0]
        if self.args["key"] == "layout":
            vals = [tl.layout()] * len(tl)
        else:
            vals = list(tl.source_info())
        return [TensorListCPU([np.frombuffer(v.encode(), np.uint8).copy() for v in vals])]

    def output_layouts(self, input_layouts):
        return [""]
