"""``erase``: fill one or more boxes of each sample with a value."""

from __future__ import annotations

import math

import numpy as np

from stoker.errors import arg_error
from stoker.operators.image.crop import LayoutAware
from stoker.operators.image.slice import c_cast_array, fill_for
from stoker.operators.schema import Arg, Schema, register
from stoker.operators.tensor._axes import resolve_axes

F32 = np.float32


@register
class Erase(LayoutAware):
    """Erases boxes of each sample."""

    schema = Schema(
        name="erase",
        legacy_name="Erase",
        doc="Fills boxes with ``fill_value`` (one value, or one per channel). ``anchor`` and ``shape`` "
            "hold one value per selected axis for each box, boxes one after another (``axis_names`` "
            "default 'HW': y first). Coordinates may be normalized (``normalized``, "
            "``normalized_anchor``, ``normalized_shape``) and, with ``centered_anchor``, give the "
            "box's centre. A box covers [floor(start), floor(start + extent)); parts outside the "
            "sample are ignored.",
        args=[Arg("anchor", "float_list", [], tensor=True, doc="box starts, per axis, box after box"),
              Arg("shape", "float_list", [], tensor=True, doc="box extents, per axis, box after box"),
              Arg("axes", "int_list", None, doc="axes the values refer to (default [1, 0])"),
              Arg("axis_names", "layout", None, doc="layout letters the values refer to (default 'HW')"),
              Arg("fill_value", "float_list", [0.0], tensor=True, doc="value(s) written into the boxes"),
              Arg("normalized", "bool", False, doc="anchor and shape are in [0, 1]"),
              Arg("normalized_anchor", "bool", False, doc="anchor is in [0, 1]"),
              Arg("normalized_shape", "bool", False, doc="shape is in [0, 1]"),
              Arg("centered_anchor", "bool", False, doc="anchor is the centre of the box")],
        devices=("cpu",),
    )

    def setup(self):
        a = self.args
        if a["normalized"] and (a["normalized_anchor"] or a["normalized_shape"]):
            raise arg_error("erase", "normalized", "cannot be combined with normalized_anchor/normalized_shape")
        self.norm_anchor = a["normalized"] or a["normalized_anchor"]
        self.norm_shape = a["normalized"] or a["normalized_shape"]

    def _axes(self, layout: str, ndim: int) -> list[int]:
        if self.args["axes"] is not None:
            return resolve_axes("erase", self.args["axes"], None, layout, ndim)
        names = self.args["axis_names"]
        if names or (layout and "H" in layout and "W" in layout):
            return resolve_axes("erase", None, names or "HW", layout, ndim)
        return resolve_axes("erase", [1, 0], None, layout, ndim)

    def run_sample(self, inputs, args, ctx):
        x = inputs[0]
        fill, boxes = self.boxes(x.shape, x.dtype, args)
        out = x.copy()
        for box in boxes:
            out[tuple(slice(lo, hi) for lo, hi in box)] = fill
        return out

    def boxes(self, shape: tuple[int, ...], dtype, args: dict) -> tuple[np.ndarray | None, list]:
        """The boxes one sample's arguments erase, and what fills them (the GPU implementation
        builds its tables from this too).

        ``shape`` and ``dtype`` are the sample's, ``args`` its arguments (with ``__layout``).
        Returns ``(fill, boxes)``: ``fill`` in ``dtype``, a 0-d array or one value per channel
        shaped to broadcast over the sample; each box one ``(start, stop)`` per axis of the
        sample, clipped to it (the whole extent on the axes the box does not name). Without boxes
        the fill is None (and fill_value goes unchecked)."""
        shape = tuple(int(e) for e in shape)
        layout = self.layout_of(args)
        axes = self._axes(layout, len(shape))
        anchor = np.asarray(args.get("anchor", []), F32).reshape(-1)
        extent = np.asarray(args.get("shape", []), F32).reshape(-1)
        n = len(axes)
        if anchor.size != extent.size or anchor.size % n:
            raise ValueError(f"erase: arguments 'anchor' ({anchor.size} values) and 'shape' ({extent.size}) "
                             f"must hold the same number of boxes, {n} values per box (axes {axes})")
        if anchor.size == 0:
            return None, []
        # fill_for reads only the shape, ndim and dtype of the sample: a zero-strided stand-in will do
        stand_in = np.broadcast_to(np.zeros((), dtype), shape)
        fill = fill_for(np.asarray(args.get("fill_value", [0.0])).reshape(-1).tolist(), stand_in, layout, "erase")
        ext = np.asarray([shape[a] for a in axes], F32)
        boxes = []
        for a, s in zip(anchor.reshape(-1, n), extent.reshape(-1, n)):
            a = a * ext if self.norm_anchor else a  # float32 products, as DALI
            s = s * ext if self.norm_shape else s
            if np.any(s < 0):
                raise ValueError(f"erase: argument 'shape' must be non-negative, got {s.tolist()}")
            if self.args["centered_anchor"]:
                a = a - s * F32(0.5)
            box = [(0, e) for e in shape]
            for ax, lo, ex in zip(axes, a, s):
                start = math.floor(float(lo))
                stop = math.floor(float(F32(lo + ex)))
                box[ax] = (min(max(start, 0), shape[ax]), min(max(stop, 0), shape[ax]))
            boxes.append(tuple(box))
        return fill, boxes

    def boxes_batch(self, shapes: np.ndarray, dtype, layout: str, anchor: np.ndarray, extent: np.ndarray,
                    fill: np.ndarray):
        """:meth:`boxes` for every sample at once, the same numbers (the GPU implementation's plan).

        ``shapes`` is (N, ndim); ``anchor`` and ``extent`` (N, k) float32 and ``fill`` (N, f)
        float64 hold each sample's values (every sample as many). Returns ``(fills, channel, lo,
        hi)``: ``fills`` (N, f) in ``dtype`` (None without boxes), ``channel`` the axis a fill of
        several values runs along (-1 for one value), ``lo`` / ``hi`` (N, boxes, ndim) int64 each
        box's clipped start and stop per axis. Raises ValueError where some sample's
        :meth:`boxes` raises (the per-sample rule then names the sample)."""
        n, ndim = shapes.shape
        axes = self._axes(layout, ndim)
        m = len(axes)
        if anchor.shape[1] != extent.shape[1] or anchor.shape[1] % m:
            raise ValueError("erase: arguments 'anchor' and 'shape' must hold the same number of boxes")
        nbox = anchor.shape[1] // m
        lo = np.zeros((n, nbox, ndim), np.int64)
        hi = np.broadcast_to(shapes[:, None, :], (n, nbox, ndim)).copy()
        if nbox == 0:
            return None, -1, lo, hi
        channel = -1
        if fill.shape[1] > 1:  # fill_for: one value per channel (the layout's C, else the last axis)
            channel = layout.index("C") if layout and "C" in layout else ndim - 1
            if ndim == 0 or (shapes[:, channel] != fill.shape[1]).any():
                raise ValueError("erase: argument 'fill_values' does not hold one value per channel")
        elif fill.shape[1] == 0:
            raise ValueError("erase: argument 'fill_value' holds no value")
        ext = shapes[:, axes].astype(F32)[:, None, :]
        a = anchor.reshape(n, nbox, m)
        s = extent.reshape(n, nbox, m)
        a = a * ext if self.norm_anchor else a  # float32 products, as boxes()
        s = s * ext if self.norm_shape else s
        if (s < 0).any():
            raise ValueError("erase: argument 'shape' must be non-negative")
        if self.args["centered_anchor"]:
            a = a - s * F32(0.5)
        start = np.floor(a.astype(np.float64))
        stop = np.floor((a + s).astype(np.float64))  # the float32 sum, as boxes()
        if not (np.isfinite(start).all() and np.isfinite(stop).all()):
            raise ValueError("erase: box coordinates must be finite")  # math.floor refuses them
        for j, ax in enumerate(axes):  # in order: a repeated axis takes its last box, as boxes()
            limit = shapes[:, ax][:, None].astype(np.float64)
            lo[:, :, ax] = np.clip(start[:, :, j], 0.0, limit)
            hi[:, :, ax] = np.clip(stop[:, :, j], 0.0, limit)
        return c_cast_array(fill, dtype), channel, lo, hi
