"""``cat`` and ``stack``: join the samples of several inputs, sample by sample.

``plan`` gives one sample's axis and output shape (and its error); ``plan_rows`` the same for a
whole batch at once with NumPy, for the GPU operator (which then runs ``plan`` sample by sample
only to name the sample that fails)."""

from __future__ import annotations

import numpy as np

from stoker.errors import arg_error
from stoker.operators.image.crop import LayoutAware
from stoker.operators.schema import Arg, Schema, register

JOIN_ARGS = [Arg("axis", "int", 0, doc="axis to join along (negative counts from the end)"),
             Arg("axis_name", "layout", None, doc="join along this layout letter instead of ``axis``")]


def _common_layout(layouts: list[str]) -> str:
    named = [lay for lay in layouts if lay]
    return named[0] if named and all(lay == named[0] for lay in named) else (named[0] if named else "")


class _Join(LayoutAware):
    def _check_inputs(self, shapes: list[tuple], dtypes: list) -> None:
        for k in range(1, len(shapes)):
            if dtypes[k] != dtypes[0]:
                raise self.error(f"{self.schema.name}: input {k} has type {np.dtype(dtypes[k]).name}, input 0 "
                                 f"has {np.dtype(dtypes[0]).name}; all inputs must have the same type")
            if len(shapes[k]) != len(shapes[0]):
                raise self.error(f"{self.schema.name}: input {k} has {len(shapes[k])} dimensions, input 0 has "
                                 f"{len(shapes[0])}; all inputs must have the same rank")

    def plan(self, shapes: list[tuple], dtypes: list, layout: str) -> tuple[int, tuple]:
        """``(axis, output shape)`` for one sample of each input (their ``shapes`` and ``dtypes``;
        ``layout``, the first input's); raises the sample's error. Shared with the GPU operator,
        which needs no data for it."""
        raise NotImplementedError

    def plan_rows(self, tables: list[np.ndarray], dtypes: list, layout: str) -> tuple[int, np.ndarray]:
        """``plan`` for every sample at once: ``tables`` holds one ``(N, ndim)`` int64 array of
        sample shapes per input; returns ``(axis, (N, ndim_out) int64 output shapes)``. Raises
        where ``plan`` would raise for some sample (without saying which: ``plan`` tells)."""
        raise NotImplementedError

    def _check_tables(self, tables: list[np.ndarray], dtypes: list) -> list[np.ndarray]:
        tables = [np.asarray(t, np.int64).reshape(len(t), -1) for t in tables]
        # the dtypes and ranks are the batches', the same for every sample: sample 0's check
        self._check_inputs([t[0] for t in tables], dtypes)
        if any(len(t) != len(tables[0]) for t in tables):
            raise self.error(f"{self.schema.name}: the inputs hold different numbers of samples")
        return tables

    def run_sample(self, inputs, args, ctx):
        axis, _ = self.plan([x.shape for x in inputs], [x.dtype for x in inputs], self.layout_of(args))
        return self.join(inputs, axis)


@register
class Cat(_Join):
    """Concatenates the inputs' samples along an existing axis."""

    schema = Schema(
        name="cat",
        doc="Joins the i-th samples of all inputs along an existing axis (``axis`` or "
            "``axis_name``); the other extents must match. Keeps the layout.",
        args=JOIN_ARGS,
        inputs=(1, 999),
        devices=("cpu",),
    )

    join = staticmethod(np.concatenate)

    def plan(self, shapes, dtypes, layout):
        shapes = [tuple(s) for s in shapes]
        self._check_inputs(shapes, dtypes)
        axis = self._axis(len(shapes[0]), layout)
        rest = [s[:axis] + s[axis + 1:] for s in shapes]
        # (an axis_name letter beyond the samples' rank fails as NumPy's concatenate failed)
        if axis >= len(shapes[0]) or any(r != rest[0] for r in rest):
            raise self.error(f"cat: the inputs' shapes {shapes} differ outside the joined axis {axis}")
        return axis, (*shapes[0][:axis], sum(s[axis] for s in shapes), *shapes[0][axis + 1:])

    def plan_rows(self, tables, dtypes, layout):
        tables = self._check_tables(tables, dtypes)
        ndim = tables[0].shape[1]
        axis = self._axis(ndim, layout)
        if axis >= ndim:
            raise self.error(f"cat: the joined axis {axis} is past the samples' rank {ndim}")
        rest = np.delete(np.stack(tables), axis, axis=2)  # (inputs, N, ndim - 1)
        if (rest != rest[0]).any():
            raise self.error(f"cat: the inputs' shapes differ outside the joined axis {axis}")
        out = tables[0].copy()
        out[:, axis] = np.stack(tables)[:, :, axis].sum(axis=0)
        return axis, out

    def _axis(self, ndim: int, layout: str) -> int:
        name = self.args["axis_name"]
        if name:
            if name not in layout:
                raise ValueError(f"cat: argument 'axis_name': {name!r} is not in the layout {layout!r}")
            return layout.index(name)
        axis = self.args["axis"]
        if not -ndim <= axis < ndim:
            raise ValueError(f"cat: argument 'axis': {axis} is out of range for {ndim}D samples")
        return axis % ndim

    def output_layouts(self, input_layouts):
        return [_common_layout(input_layouts)]


@register
class Stack(_Join):
    """Stacks the inputs' samples along a new axis."""

    schema = Schema(
        name="stack",
        doc="Joins the i-th samples of all inputs along a new axis inserted at ``axis`` (0 ... ndim); "
            "the shapes must be equal. ``axis_name`` names the new axis in the layout.",
        args=JOIN_ARGS,
        inputs=(1, 999),
        devices=("cpu",),
    )

    def setup(self):
        name = self.args["axis_name"]
        if name is not None and len(name) != 1:
            raise arg_error("stack", "axis_name", f"must be a single letter, got {name!r}")

    join = staticmethod(np.stack)

    def plan(self, shapes, dtypes, layout):
        shapes = [tuple(s) for s in shapes]
        self._check_inputs(shapes, dtypes)
        ndim = len(shapes[0])
        axis = self.args["axis"]
        if not -(ndim + 1) <= axis <= ndim:
            raise self.error(f"stack: argument 'axis': {axis} is out of range for {ndim}D samples "
                             f"(0 ... {ndim})")
        if any(s != shapes[0] for s in shapes):
            raise self.error(f"stack: the inputs' shapes differ: {shapes}")
        axis %= ndim + 1
        return axis, (*shapes[0][:axis], len(shapes), *shapes[0][axis:])

    def plan_rows(self, tables, dtypes, layout):
        tables = self._check_tables(tables, dtypes)
        ndim = tables[0].shape[1]
        axis = self.args["axis"]
        if not -(ndim + 1) <= axis <= ndim:
            raise self.error(f"stack: argument 'axis': {axis} is out of range for {ndim}D samples")
        if any(not np.array_equal(t, tables[0]) for t in tables):
            raise self.error("stack: the inputs' shapes differ")
        axis %= ndim + 1
        return axis, np.insert(tables[0], axis, len(tables), axis=1)

    def output_layouts(self, input_layouts):
        lay = _common_layout(input_layouts)
        name = self.args["axis_name"]
        if not lay or not name:
            return [""]
        axis = self.args["axis"] % (len(lay) + 1)
        return [lay[:axis] + name + lay[axis:]]
