"""``slice``: a box of each sample given by anchor/shape inputs or by start/end arguments.

Where the box comes from (one value per selected axis, in the order of ``axes``
or ``axis_names``; DALI's default is ``axis_names="WH"``, so x comes first):

* positional inputs ``anchor`` and ``shape`` (normalized to [0, 1] unless
  ``normalized_anchor`` / ``normalized_shape`` are False);
* or arguments: ``rel_start`` / ``start`` for the beginning, and ``rel_end`` /
  ``end`` / ``rel_shape`` / ``shape`` for the end (defaults: 0 and the extent).

Box edges round halves away from zero, in the precision DALI uses for each form
(measured against DALI 2.4: float32 products for the relative arguments, double
otherwise), so that boxes match it pixel for pixel.
"""

from __future__ import annotations

import numpy as np

from stoker.errors import arg_error
from stoker.operators.image.crop import OOB_POLICIES, LayoutAware
from stoker.operators.image.geometry import round_half_away
from stoker.operators.image.geometry_batch import PerSample, sample_rows
from stoker.operators.image.geometry_batch import round_half_away as round_all
from stoker.operators.schema import Arg, Schema, register
from stoker.operators.tensor._axes import resolve_axes
from stoker.operators.tensor.basic import convert

F32 = np.float32


@register
class Slice(LayoutAware):
    """Extracts a box (with optional padding outside the sample)."""

    schema = Schema(
        name="slice",
        legacy_name="Slice",
        doc="Cuts a box out of each sample. The box is given by positional inputs ``anchor`` and "
            "``shape`` (normalized unless normalized_anchor/normalized_shape=False) or by the "
            "arguments rel_start/start and rel_end/end/rel_shape/shape, one value per axis in "
            "``axes`` / ``axis_names`` order (default 'WH': x first). Outside the sample, "
            "``out_of_bounds_policy`` decides: 'error', 'pad' (with ``fill_values``, one or one per "
            "channel) or 'trim_to_shape'.",
        args=[Arg("rel_start", "float_list", None, tensor=True, doc="normalized start per axis"),
              Arg("start", "float_list", None, tensor=True, doc="absolute start per axis"),
              Arg("rel_end", "float_list", None, tensor=True, doc="normalized end per axis"),
              Arg("end", "float_list", None, tensor=True, doc="absolute end per axis"),
              Arg("rel_shape", "float_list", None, tensor=True, doc="normalized extent per axis"),
              Arg("shape", "float_list", None, tensor=True, doc="absolute extent per axis"),
              Arg("normalized_anchor", "bool", True, doc="the anchor input is in [0, 1]"),
              Arg("normalized_shape", "bool", True, doc="the shape input is in [0, 1]"),
              Arg("axes", "int_list", None, tensor=True, doc="axes the box values refer to (default [1, 0])"),
              Arg("axis_names", "layout", None, doc="layout letters the values refer to (default 'WH')"),
              Arg("out_of_bounds_policy", "str", "error", doc="'error', 'pad' or 'trim_to_shape'"),
              Arg("fill_values", "float_list", [0.0], doc="padding value(s) for 'pad'"),
              Arg("dtype", "dtype", None, doc="output type (default: the input's)"),
              Arg("output_dtype", "dtype", None, doc="deprecated name of dtype"),
              Arg("image_type", "image_type", None, doc="accepted for compatibility; ignored")],
        inputs=(1, 3),
        devices=("cpu",),
    )

    def setup(self):
        a = self.args
        if a["out_of_bounds_policy"] not in OOB_POLICIES:
            raise arg_error("slice", "out_of_bounds_policy",
                            f"must be one of {', '.join(OOB_POLICIES)}, got {a['out_of_bounds_policy']!r}")
        for group in (("rel_start", "start"), ("rel_end", "end", "rel_shape", "shape")):
            given = [g for g in group if a.get(g) is not None]
            if len(given) > 1:
                raise arg_error("slice", given[1], f"cannot be combined with {given[0]}")
        self.dtype = a["dtype"] if a["dtype"] is not None else a["output_dtype"]

    def run_sample(self, inputs, args, ctx):
        x = inputs[0]
        layout = self.layout_of(args)
        axes, begin, end = self.box(x.shape, inputs[1:], args, layout)
        out = cut_box(x, axes, begin, end, self.args["out_of_bounds_policy"], self.args["fill_values"],
                      layout, "slice")
        if self.dtype is not None and out.dtype != self.dtype:
            return convert(out, self.dtype)
        return out

    def box(self, shape, box_inputs, args: dict, layout: str) -> tuple[list[int], list[int], list[int]]:
        """(axes, begin, end) of one sample's box: ``shape`` is the sample's, ``box_inputs`` its
        anchor and shape inputs (empty when the box comes from arguments), ``args`` its arguments.
        The GPU slice calls this too, so both devices cut the same boxes. Raises on bad values."""
        axes = self._axes(args, layout, len(shape))
        ext = [shape[ax] for ax in axes]
        if len(box_inputs) == 2:
            begin, end = self._from_inputs(box_inputs[0], box_inputs[1], ext)
        elif len(box_inputs) == 1:
            raise self.error("slice: give both the anchor and the shape inputs (or neither)")
        else:
            begin, end = self._from_args(args, ext)
        return axes, begin, end

    def _axes(self, args, layout: str, ndim: int) -> list[int]:
        axes = args.get("axes")
        names = self.args["axis_names"]
        if axes is not None:  # explicit axes win over the default axis names
            return resolve_axes("slice", np.asarray(axes).reshape(-1).tolist(), None, layout, ndim)
        if names:
            return resolve_axes("slice", None, names, layout, ndim)
        if layout and "W" in layout and "H" in layout:
            return resolve_axes("slice", None, "WH", layout, ndim)
        return resolve_axes("slice", [1, 0], None, layout, ndim)

    def _values(self, name: str, v, n: int) -> np.ndarray:
        arr = np.asarray(v, np.float64).reshape(-1)
        if arr.size != n:
            raise ValueError(f"slice: argument '{name}' has {arr.size} values for {n} sliced axes")
        return arr

    def _from_inputs(self, anchor, shape, ext):
        n = len(ext)
        e = np.asarray(ext, np.float64)
        a = self._values("anchor", anchor, n)
        s = self._values("shape", shape, n)
        a = a * e if self.args["normalized_anchor"] else a
        s = s * e if self.args["normalized_shape"] else s
        if np.any(s < 0):
            raise ValueError(f"slice: the shape input must be non-negative, got {s.tolist()}")
        return [round_half_away(v) for v in a], [round_half_away(v) for v in a + s]

    def _from_args(self, args, ext):
        n = len(ext)
        e32 = np.asarray(ext, F32)
        e64 = np.asarray(ext, np.float64)
        if args.get("rel_start") is not None:
            rs = self._values("rel_start", args["rel_start"], n).astype(F32)
            begin_f = (rs * e32).astype(np.float64)  # float32 product, as DALI
            begin_d = rs.astype(np.float64) * e64
        elif args.get("start") is not None:
            begin_f = begin_d = self._values("start", args["start"], n).astype(F32).astype(np.float64)
        else:
            begin_f = begin_d = np.zeros(n)
        if args.get("rel_end") is not None:
            end_f = (self._values("rel_end", args["rel_end"], n).astype(F32) * e32).astype(np.float64)
        elif args.get("end") is not None:
            end_f = self._values("end", args["end"], n).astype(F32).astype(np.float64)
        elif args.get("rel_shape") is not None:
            end_f = begin_d + self._values("rel_shape", args["rel_shape"], n).astype(F32).astype(np.float64) * e64
        elif args.get("shape") is not None:
            end_f = begin_d + self._values("shape", args["shape"], n).astype(F32).astype(np.float64)
        else:
            end_f = e64
        begin = [round_half_away(v) for v in begin_f]
        end = [round_half_away(v) for v in end_f]
        for b, en in zip(begin, end):
            if en < b:
                raise ValueError(f"slice: the box ends ({en}) before it starts ({b}); check the end/shape "
                                 "arguments")
        return begin, end


    # --- the whole batch at once (the GPU slice's planner) -----------------------------------

    def boxes(self, shapes, box_inputs, arg_inputs: dict, layout: str) -> tuple[list[int], np.ndarray, np.ndarray]:
        """:meth:`box` for every sample at once: ``(axes, begin, end)`` with ``begin``/``end``
        (N, len(axes)) int64, for samples of ``shapes`` (N, ndim); ``box_inputs``: the anchor and
        shape inputs as lists of per-sample arrays (or none), ``arg_inputs`` the argument inputs.
        The numbers box gives sample by sample (the same float32/float64 steps, elementwise).
        Raises ``geometry_batch.PerSample`` where the per-sample rule must read the values
        (per-sample axes, ragged or per-frame values) and ValueError where some sample's values
        are refused (``gpu_registry.plan_batch`` then runs box per sample to name it)."""
        shapes = np.asarray(shapes, np.int64)
        n, ndim = shapes.shape
        if "axes" in arg_inputs:  # axes that differ per sample: no common column layout
            raise PerSample("axes")
        axes = self._axes(self.args, layout, ndim)
        ext = shapes[:, axes]
        if len(box_inputs) == 2:
            return axes, *self._from_input_rows(box_inputs, ext)
        if len(box_inputs) == 1:
            raise self.error("slice: give both the anchor and the shape inputs (or neither)")
        return axes, *self._from_arg_rows(arg_inputs, ext)

    def _from_input_rows(self, box_inputs, ext: np.ndarray):
        """:meth:`_from_inputs` for every sample: ``ext`` (N, k) extents of the sliced axes."""
        n, k = ext.shape
        rows = []
        for name, values in zip(("anchor", "shape"), box_inputs):
            try:  # one C-level step when every sample holds as many numbers
                r = np.asarray(values, np.float64).reshape(n, -1)
            except (ValueError, TypeError):
                raise PerSample(name) from None
            if r.shape[1] != k:
                raise ValueError(f"slice: argument '{name}' has {r.shape[1]} values for {k} sliced axes")
            rows.append(r)
        e = ext.astype(np.float64)
        a = rows[0] * e if self.args["normalized_anchor"] else rows[0]
        s = rows[1] * e if self.args["normalized_shape"] else rows[1]
        if (s < 0).any():
            raise ValueError("slice: the shape input must be non-negative")
        return whole_numbers(a), whole_numbers(a + s)

    def _from_arg_rows(self, arg_inputs: dict, ext: np.ndarray):
        """:meth:`_from_args` for every sample: ``ext`` (N, k) extents of the sliced axes."""
        n, k = ext.shape

        def rows(name):
            r = sample_rows(self, arg_inputs, name, n)
            if r is not None and r.shape[1] != k:
                raise ValueError(f"slice: argument '{name}' has {r.shape[1]} values for {k} sliced axes")
            return r

        e32, e64 = ext.astype(F32), ext.astype(np.float64)
        rs, st = rows("rel_start"), rows("start")
        if rs is not None:
            rs = rs.astype(F32)
            begin_f = (rs * e32).astype(np.float64)  # float32 product, as DALI
            begin_d = rs.astype(np.float64) * e64
        elif st is not None:
            begin_f = begin_d = st.astype(F32).astype(np.float64)
        else:
            begin_f = begin_d = np.zeros((n, k))
        re, en, rsh, sh = rows("rel_end"), rows("end"), rows("rel_shape"), rows("shape")
        if re is not None:
            end_f = (re.astype(F32) * e32).astype(np.float64)
        elif en is not None:
            end_f = en.astype(F32).astype(np.float64)
        elif rsh is not None:
            end_f = begin_d + rsh.astype(F32).astype(np.float64) * e64
        elif sh is not None:
            end_f = begin_d + sh.astype(F32).astype(np.float64)
        else:
            end_f = e64
        begin, end = whole_numbers(begin_f), whole_numbers(end_f)
        if (end < begin).any():
            raise ValueError("slice: the box ends before it starts; check the end/shape arguments")
        return begin, end


def whole_numbers(v: np.ndarray) -> np.ndarray:
    """``round_half_away`` of every value as int64 (``geometry_batch.round_half_away``); ValueError
    where the per-sample rule's Python int would fail (NaN, infinity) or not fit a kernel table."""
    if not (np.abs(v) < 2.0 ** 62).all():  # NaN fails this too
        raise ValueError("slice: box edges must be finite numbers")
    return round_all(v)


def box_windows(shapes, axes: list[int], begin: np.ndarray, end: np.ndarray, policy: str,
                op: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`box_window` for every sample at once: ``(output shapes, starts, padded)`` as (N, ndim),
    (N, ndim) int64 and (N,) bool arrays for samples of ``shapes`` (N, ndim) and boxes ``begin``/
    ``end`` (N, len(axes)). Raises ValueError where a box leaves its sample under 'error' (the
    per-sample rule then names the sample)."""
    shapes = np.asarray(shapes, np.int64)
    n = shapes.shape[0]
    inside = ((begin >= 0) & (end <= shapes[:, axes])).all(axis=1) if axes else np.ones(n, bool)
    if policy == "error" and not inside.all():
        raise ValueError(f"{op}: a box leaves its sample; use out_of_bounds_policy='pad' or 'trim_to_shape'")
    out = shapes.copy()
    start = np.zeros_like(shapes)
    clip = inside | (policy == "trim_to_shape")
    for j, ax in enumerate(axes):  # in order: a repeated axis takes its last box, as box_window
        b, e, ext = begin[:, j], end[:, j], shapes[:, ax]
        lo, hi = np.minimum(np.maximum(b, 0), ext), np.maximum(np.minimum(e, ext), 0)
        out[:, ax] = np.where(clip, np.maximum(hi - lo, 0), e - b)
        start[:, ax] = np.where(clip, lo, b)
    return out, start, ~clip


def box_fill_rows(fill: list[float], shapes, out_shapes, padded, layout: str, dtype,
                  op: str) -> tuple[np.ndarray, int | None]:
    """The fill values of a batch's padded samples (:func:`box_fill` for all of them): ``(values,
    axis)`` with ``values`` (1, k) in ``dtype`` (C cast) and ``axis`` the one the k > 1 values run
    along (None for one value). Raises ValueError where a padded sample cannot take them (the
    per-sample rule then names it)."""
    vals = np.asarray(fill, np.float64).reshape(-1)
    k = vals.size
    shapes = np.asarray(shapes, np.int64)
    ndim = shapes.shape[1]
    padded = np.asarray(padded, bool)
    axis = None
    if padded.any() and k != 1:
        if k == 0 or ndim == 0:
            raise ValueError(f"{op}: argument 'fill_values' has {k} values for samples of {ndim} dimensions")
        axis = layout.index("C") if layout and "C" in layout else ndim - 1
        if (shapes[padded, axis] != k).any() or (out_shapes[padded, axis] != k).any():
            raise ValueError(f"{op}: argument 'fill_values' has one value per channel ({k}), which some "
                             "padded sample does not keep")
    return c_cast_array(vals, dtype).reshape(1, k), axis


def box_window(shape, axes: list[int], begin: list[int], end: list[int], policy: str,
               op: str) -> tuple[list[int], list[int], bool]:
    """Where the box ``[begin, end)`` on ``axes`` of a sample of ``shape`` puts the output:
    (output shape, input index of the output's first element on every axis, whether some output
    elements lie outside the sample and take fill values). Output element ``j`` is input element
    ``j + start`` where that is inside the sample. 'error' raises when the box leaves the sample,
    'trim_to_shape' clips the box to it, 'pad' keeps it (its start may then be negative or past
    the end)."""
    inside = all(0 <= b and e <= shape[ax] for b, e, ax in zip(begin, end, axes))
    if not inside and policy == "error":
        box = ", ".join(f"[{b}, {e})" for b, e in zip(begin, end))
        raise ValueError(f"{op}: the box {box} on axes {list(axes)} leaves the sample of shape {tuple(shape)}; "
                         "use out_of_bounds_policy='pad' or 'trim_to_shape'")
    out = list(shape)
    start = [0] * len(shape)
    clip = inside or policy == "trim_to_shape"
    for b, e, ax in zip(begin, end, axes):
        if clip:
            lo, hi = min(max(b, 0), shape[ax]), max(min(e, shape[ax]), 0)
            out[ax], start[ax] = max(hi - lo, 0), lo
        else:
            out[ax], start[ax] = e - b, b
    return out, start, not clip


def cut_box(x: np.ndarray, axes: list[int], begin: list[int], end: list[int], policy: str,
            fill: list[float], layout: str, op: str) -> np.ndarray:
    """``x[begin:end]`` on ``axes``; outside the sample: raise ('error'), fill ('pad') or clip
    ('trim_to_shape'). Returns a new array."""
    shape, start, padded = box_window(x.shape, axes, begin, end, policy, op)
    if not padded:
        return x[tuple(slice(s, s + n) for s, n in zip(start, shape))].copy()
    out = np.empty(shape, x.dtype)
    out[...] = box_fill(fill, x, shape, layout, op)
    src, dst = [], []
    for s, n, ext in zip(start, shape, x.shape):
        lo = max(s, 0)  # the part of the sample the output covers on this axis: [lo, hi)
        hi = max(min(s + n, ext), lo)
        src.append(slice(lo, hi))
        dst.append(slice(lo - s, hi - s))
    out[tuple(dst)] = x[tuple(src)]
    return out


def box_fill(fill: list[float], x: np.ndarray, shape, layout: str, op: str) -> np.ndarray:
    """``fill_for`` of an output of ``shape`` cut from ``x``: values per channel need the output
    to keep every channel."""
    vals = fill_for(fill, x, layout, op)
    if any(v != 1 and v != n for v, n in zip(vals.shape, shape)):
        raise ValueError(f"{op}: argument 'fill_values' has one value per channel ({vals.size}) but the box "
                         f"keeps {shape[int(np.argmax(vals.shape))]} of them; give one fill value, or keep "
                         "every channel")
    return vals


def fill_for(fill: list[float], x: np.ndarray, layout: str, op: str) -> np.ndarray:
    """Fill values that broadcast over ``x``: one value, or one per channel (the layout's C axis,
    else the last axis)."""
    vals = np.asarray(fill, np.float64)
    if vals.size > 1:
        ch = layout.index("C") if layout and "C" in layout else x.ndim - 1
        if x.ndim == 0 or x.shape[ch] != vals.size:
            raise ValueError(f"{op}: argument 'fill_values' has {vals.size} values; the sample (shape "
                             f"{x.shape}) has {x.shape[ch] if x.ndim else 0} channels")
        bshape = [1] * x.ndim
        bshape[ch] = vals.size
        vals = vals.reshape(bshape)
    else:
        vals = vals.reshape(())
    return c_cast_array(vals, x.dtype)


def c_cast_array(vals: np.ndarray, dtype) -> np.ndarray:
    """Float fill values in ``dtype`` as a C cast gives them (truncated, then wrapped for
    integers: 300.7 -> 44 in uint8), which is what DALI does with fill values."""
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        return np.trunc(vals).astype(np.int64).astype(dtype)
    return vals.astype(dtype)
