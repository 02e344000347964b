"""``transforms.*``: affine matrices (ndim, ndim + 1), float32, optionally composed with an input one.

Each operator builds its own transform from (per-sample) arguments. With an
input transform the result is ``own @ input`` (the input applies first) or,
with ``reverse_order=True``, ``input @ own``.

Sequences, as DALI makes them: the arguments DALI marks per-frame may be given through
``fn.per_frame`` (see :mod:`stoker.operators.per_frame`, ``expand``), and the input may be a
sequence of matrices (layout ``F**``); the output is then one matrix per frame, (F, ndim,
ndim + 1) with layout ``F**``. A non-sequence input applies to every frame.
"""

from __future__ import annotations

import numpy as np

from stoker.errors import arg_error
from stoker.operators.base import Operator
from stoker.operators.per_frame import frame_args, frame_tagged
from stoker.operators.schema import Arg, Schema, register
from stoker.tensors import TensorListCPU

_REVERSE = Arg("reverse_order", "bool", False,
               doc="False: the input transform is applied first; True: this one is applied first")
_SEQ_DOC = (" Arguments may be per frame (fn.per_frame), and the input a sequence of matrices (F**): the "
            "output is then one matrix per frame (F, ndim, ndim + 1), layout F**.")


def _per_frame(*names):
    """:func:`frame_args` as the transforms take it: per-frame ``names`` make a sequence of
    matrices; a sequence input (F**) is composed frame by frame."""
    return frame_args(*names, split_sequences=True, expand=True)


def _vals(op, name, value):
    if value is None:
        return None
    try:
        return np.asarray(value, np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise arg_error(op, name, f"expected numbers, got {value!r}") from None


def _homog(m):
    """(n, n+1) affine matrix -> (n+1, n+1) homogeneous one (same dtype)."""
    n = m.shape[0]
    out = np.eye(n + 1, dtype=m.dtype)
    out[:n] = m
    return out


def _compose(a, b):
    """a @ b for float32 homogeneous matrices, summed term by term in float32 (DALI's rounding)."""
    out = a[:, :1] * b[:1, :]
    for k in range(1, a.shape[1]):
        out = out + a[:, k:k + 1] * b[k:k + 1, :]
    return out


def _as_affine(op, x, what="input"):
    a = np.asarray(x, np.float64)
    if a.ndim != 2 or a.shape[1] != a.shape[0] + 1:
        raise arg_error(op, what, f"expected an affine matrix of shape (ndim, ndim + 1), got {a.shape}")
    return a


def _centered(lin, center):
    """Affine matrix of ``lin`` applied around ``center``: x -> lin (x - c) + c (float32, as DALI rounds)."""
    n = lin.shape[0]
    lin = lin.astype(np.float32)
    if center is None:
        t = np.zeros(n, np.float32)
    else:
        c = center.astype(np.float32)
        t = c - _compose(lin, c.reshape(n, 1)).reshape(n)
    return np.concatenate([lin, t.reshape(n, 1)], 1)


def _compose_batch(a, b):
    """:func:`_compose` for stacks (n, k, k): the same float32 terms summed in the same order."""
    out = a[:, :, :1] * b[:, :1, :]
    for k in range(1, a.shape[2]):
        out = out + a[:, :, k:k + 1] * b[:, k:k + 1, :]
    return out


def _homog_batch(m):
    """:func:`_homog` for a stack (n, d, d + 1)."""
    n, d = m.shape[0], m.shape[1]
    out = np.zeros((n, d + 1, d + 1), m.dtype)
    out[:, :d] = m
    out[:, d, d] = 1
    return out


def _centered_batch(lin, center):
    """:func:`_centered` for a stack of linear parts (n, d, d) and centres (n, d) or None."""
    n, d = lin.shape[0], lin.shape[1]
    lin = lin.astype(np.float32)
    if center is None:
        t = np.zeros((n, d), np.float32)
    else:
        c = center.astype(np.float32)
        t = c - _compose_batch(lin, c.reshape(n, d, 1)).reshape(n, d)
    return np.concatenate([lin, t.reshape(n, d, 1)], 2)


def _rows(op, arg_inputs, name, n):
    """Argument ``name`` of every sample as (n, k) float64 rows (``_vals`` of each), None when not
    given; PerSample where the samples differ in size (the per-sample path then runs)."""
    from stoker.operators.image.geometry_batch import sample_rows

    return sample_rows(op, arg_inputs, name, n)


def _batch_outputs(batch, n, mats, layout):
    """The batch's output: sample views of the (n, d, d + 1) float32 stack, made without
    per-sample conversion (``tensors.batch_of_rows``; the stack is kept for a copy to the GPU)."""
    from stoker.tensors import batch_of_rows

    out = batch_of_rows(mats, layout)
    if batch.sources:  # (as the per-sample path names them)
        out._source_info = list(batch.sources[:n]) + [""] * max(0, n - len(batch.sources))
    return [out]


class _Transform(Operator):
    """Common part: compose the sample's own matrix with an optional input transform."""

    def own(self, args) -> np.ndarray:
        raise NotImplementedError

    def own_batch(self, arg_inputs, n: int):
        """Every sample's :meth:`own` at once: an (n, d, d + 1) stack with the per-sample values to
        the bit, or None where only the per-sample path applies. It may raise anything: the
        per-sample path then runs and raises (or skips) as it always did."""
        return None

    def run_batch(self, batch, inputs, arg_inputs):
        # The whole batch in a few NumPy steps (a matrix per sample feeding a GPU operator
        # should cost about as much as a constant one, issue 16); anything unusual or wrong
        # goes through the per-sample path, which gives the same matrices and the errors.
        n = len(inputs[0]) if inputs else batch.batch_size
        m = self.own_batch(arg_inputs, n) if n else None
        if m is None or m.ndim != 3 or m.shape[1] < 1:
            return None
        m = m.astype(np.float32)
        if inputs:
            prev = np.asarray(inputs[0].samples(), np.float64)
            if prev.shape != m.shape:  # (ragged or mismatched inputs: the per-sample path's errors)
                return None
            own, prev = _homog_batch(m), _homog_batch(prev.astype(np.float32))
            a, b = (prev, own) if self.args["reverse_order"] else (own, prev)
            m = _compose_batch(a, b)[:, :m.shape[1]]
        layouts = self.output_layouts([t.layout() for t in inputs])
        return _batch_outputs(batch, n, np.ascontiguousarray(m), layouts[0])

    def run_sample(self, inputs, args, ctx):
        m = self.own(args)
        if inputs:
            prev = _as_affine(self.schema.name, inputs[0])
            if prev.shape != m.shape:
                raise self.error(f"{self.schema.name}: input transform {prev.shape} does not match "
                                 f"the {m.shape[0]}D transform from the arguments")
            own, prev = _homog(m.astype(np.float32)), _homog(prev.astype(np.float32))
            a, b = (prev, own) if self.args["reverse_order"] else (own, prev)
            return _compose(a, b)[:m.shape[0]]
        return m.astype(np.float32)

    def output_layouts(self, input_layouts):
        return ["**"]  # as DALI: a matrix with no named axes

    def _center(self, args, n):
        c = _vals(self.schema.name, "center", args.get("center"))
        if c is None:
            return None
        if c.size == 1:
            c = np.full(n, c[0])
        if c.size != n:
            raise arg_error(self.schema.name, "center", f"{c.size} values for a {n}D transform")
        return c


def _broadcast_rows(v, d):
    """Rows of one value spread to ``d`` (as ``np.full(n, v[0])`` per sample); others must hold ``d``."""
    if v.shape[1] == 1:
        return np.repeat(v, d, axis=1)
    if v.shape[1] != d:
        raise ValueError(f"{v.shape[1]} values for a {d}D transform")
    return v


def _center_rows(op, arg_inputs, n, d):
    """:meth:`_Transform._center` of every sample: (n, d) rows or None."""
    c = _rows(op, arg_inputs, "center", n)
    return None if c is None else _broadcast_rows(c, d)


@register
@_per_frame("offset")
class Translation(_Transform):
    """Translation by ``offset``."""

    schema = Schema(
        name="transforms.translation",
        doc="Produces a translation matrix (ndim, ndim + 1) moving points by ``offset``." + _SEQ_DOC,
        args=[Arg("offset", "float_list", None, tensor=True, doc="translation vector (its length is ndim)"),
              _REVERSE],
        inputs=(0, 1),
    )

    def own(self, args):
        off = _vals(self.schema.name, "offset", args.get("offset"))
        if off is None:
            raise arg_error(self.schema.name, "offset", "is required")
        return np.concatenate([np.eye(off.size), off.reshape(-1, 1)], 1)

    def own_batch(self, arg_inputs, n):
        off = _rows(self, arg_inputs, "offset", n)
        d = off.shape[1]
        return np.concatenate([np.broadcast_to(np.eye(d), (n, d, d)), off.reshape(n, d, 1)], 2)


@register
@_per_frame("scale", "center")
class Scale(_Transform):
    """Scaling by ``scale`` around ``center``."""

    schema = Schema(
        name="transforms.scale",
        doc="Produces a scaling matrix (ndim, ndim + 1); ``center`` stays in place." + _SEQ_DOC,
        args=[Arg("scale", "float_list", None, tensor=True, doc="scale factor per dimension"),
              Arg("center", "float_list", None, tensor=True, doc="point that stays fixed (default origin)"),
              Arg("ndim", "int", None, doc="dimensionality, needed when scale and center are scalars"),
              _REVERSE],
        inputs=(0, 1),
    )

    def own(self, args):
        op = self.schema.name
        s = _vals(op, "scale", args.get("scale"))
        if s is None:
            raise arg_error(op, "scale", "is required")
        c = _vals(op, "center", args.get("center"))
        if self.args["ndim"] is not None:
            n = self.args["ndim"]
            if n < 1:
                raise arg_error(op, "ndim", f"must be positive, got {n}")
        elif s.size > 1 or c is None:
            n = s.size
        else:
            n = c.size
        if s.size == 1:
            s = np.full(n, s[0])
        if s.size != n:
            raise arg_error(op, "scale", f"{s.size} values for a {n}D transform")
        c = self._center(args, n)
        s = s.astype(np.float32)
        t = np.zeros(n, np.float32) if c is None else c.astype(np.float32) * (np.float32(1) - s)
        return np.concatenate([np.diag(s), t.reshape(n, 1)], 1)

    def own_batch(self, arg_inputs, n):
        s = _rows(self, arg_inputs, "scale", n)
        c = _rows(self, arg_inputs, "center", n)
        if self.args["ndim"] is not None:
            d = self.args["ndim"]
            if d < 1:
                return None
        elif s.shape[1] > 1 or c is None:
            d = s.shape[1]
        else:
            d = c.shape[1]
        s = _broadcast_rows(s, d)
        c = None if c is None else _broadcast_rows(c, d)
        s = s.astype(np.float32)
        t = np.zeros((n, d), np.float32) if c is None else c.astype(np.float32) * (np.float32(1) - s)
        lin = np.zeros((n, d, d), np.float32)
        lin[:, np.arange(d), np.arange(d)] = s
        return np.concatenate([lin, t.reshape(n, d, 1)], 2)


def _rotation_3d(axis, rad):
    """Rotation by ``rad`` around the unit ``axis`` (right-hand rule)."""
    x, y, z = axis
    c, s = np.cos(rad), np.sin(rad)
    k = np.array([[0, -z, y], [z, 0, -x], [-y, x, 0]])
    return c * np.eye(3) + s * k + (1 - c) * np.outer(axis, axis)


@register
@_per_frame("angle", "axis", "center")
class Rotation(_Transform):
    """Rotation by ``angle`` degrees (around ``axis`` in 3D)."""

    schema = Schema(
        name="transforms.rotation",
        doc="Produces a rotation matrix: 2D without ``axis``, 3D around ``axis``; ``angle`` in degrees, "
            "counter-clockwise; ``center`` stays in place." + _SEQ_DOC,
        args=[Arg("angle", "float", None, tensor=True, doc="angle in degrees"),
              Arg("axis", "float_list", None, tensor=True, doc="3D rotation axis (3 values)"),
              Arg("center", "float_list", None, tensor=True, doc="point that stays fixed (default origin)"),
              _REVERSE],
        inputs=(0, 1),
    )

    def own(self, args):
        op = self.schema.name
        if args.get("angle") is None:
            raise arg_error(op, "angle", "is required")
        rad = np.deg2rad(float(np.asarray(args["angle"]).reshape(-1)[0]))
        axis = _vals(op, "axis", args.get("axis"))
        if axis is None:
            lin = np.array([[np.cos(rad), -np.sin(rad)], [np.sin(rad), np.cos(rad)]])
        else:
            norm = np.linalg.norm(axis) if axis.size == 3 else 0.0
            if axis.size != 3 or norm == 0:
                raise arg_error(op, "axis", f"expected 3 values, not all zero, got {axis.tolist()}")
            lin = _rotation_3d(axis / norm, rad)
        return _centered(lin, self._center(args, lin.shape[0]))

    def own_batch(self, arg_inputs, n):
        from stoker.operators.image.geometry_batch import sample_scalars

        if "axis" in arg_inputs or self.args.get("axis") is not None:
            return None  # 3D: the per-sample path
        rad = np.deg2rad(sample_scalars(self, arg_inputs, "angle", n))
        c, s = np.cos(rad), np.sin(rad)
        lin = np.stack([np.stack([c, -s], 1), np.stack([s, c], 1)], 1)
        return _centered_batch(lin, _center_rows(self, arg_inputs, n, 2))


@register
@_per_frame("shear", "angles", "center")
class Shear(_Transform):
    """Shear by factors or angles."""

    schema = Schema(
        name="transforms.shear",
        doc="Produces a shear matrix. 2D: shear = [s_xy, s_yx]; 3D: [s_xy, s_xz, s_yx, s_yz, s_zx, s_zy], "
            "where s_ab moves coordinate a by s_ab * b. ``angles`` (degrees) give s = tan(angle)." + _SEQ_DOC,
        args=[Arg("shear", "float_list", None, tensor=True, doc="shear factors (2 or 6 values)"),
              Arg("angles", "float_list", None, tensor=True, doc="shear angles in degrees (2 or 6 values)"),
              Arg("center", "float_list", None, tensor=True, doc="point that stays fixed (default origin)"),
              _REVERSE],
        inputs=(0, 1),
    )

    def own(self, args):
        op = self.schema.name
        s = _vals(op, "shear", args.get("shear"))
        ang = _vals(op, "angles", args.get("angles"))
        if (s is None) == (ang is None):
            raise arg_error(op, "shear", "give exactly one of 'shear' and 'angles'")
        name = "shear" if s is not None else "angles"
        if ang is not None:
            if np.any(np.abs(ang) >= 90):
                raise arg_error(op, "angles", f"must be in (-90, 90) degrees, got {ang.tolist()}")
            s = np.tan(np.deg2rad(ang))
        if s.size == 2:
            lin = np.array([[1.0, s[0]], [s[1], 1.0]])
        elif s.size == 6:
            lin = np.array([[1.0, s[0], s[1]], [s[2], 1.0, s[3]], [s[4], s[5], 1.0]])
        else:
            raise arg_error(op, name, f"expected 2 (2D) or 6 (3D) values, got {s.size}")
        return _centered(lin, self._center(args, lin.shape[0]))

    def own_batch(self, arg_inputs, n):
        s = _rows(self, arg_inputs, "shear", n)
        ang = _rows(self, arg_inputs, "angles", n)
        if (s is None) == (ang is None) or (ang is not None and np.any(np.abs(ang) >= 90)):
            return None
        if ang is not None:
            s = np.tan(np.deg2rad(ang))
        d = {2: 2, 6: 3}[s.shape[1]]
        lin = np.ones((n, d, d))
        lin[:, ~np.eye(d, dtype=bool)] = s  # the off-diagonal terms, row by row, as own() places them
        return _centered_batch(lin, _center_rows(self, arg_inputs, n, d))


@register
@_per_frame("from_start", "from_end", "to_start", "to_end")
class CropTransform(_Transform):
    """Maps one box onto another."""

    schema = Schema(
        name="transforms.crop",
        doc="Produces the affine map of the box [from_start, from_end] onto [to_start, to_end] (per dimension)."
            + _SEQ_DOC,
        args=[Arg("from_start", "float_list", None, tensor=True, doc="source box start (default 0)"),
              Arg("from_end", "float_list", None, tensor=True, doc="source box end (default 1)"),
              Arg("to_start", "float_list", None, tensor=True, doc="destination box start (default 0)"),
              Arg("to_end", "float_list", None, tensor=True, doc="destination box end (default 1)"),
              Arg("absolute", "bool", False, doc="swap start and end where start > end"),
              _REVERSE],
        inputs=(0, 1),
    )

    def own(self, args):
        op = self.schema.name
        names = ("from_start", "from_end", "to_start", "to_end")
        defaults = (0.0, 1.0, 0.0, 1.0)
        vals = [_vals(op, k, args.get(k)) for k in names]
        n = max([v.size for v in vals if v is not None] or [1])
        full = []
        for k, v, d in zip(names, vals, defaults):
            v = np.full(n, d) if v is None else v
            if v.size == 1:
                v = np.full(n, v[0])
            if v.size != n:
                raise arg_error(op, k, f"{v.size} values where the other box arguments give {n}")
            full.append(v)
        fs, fe, ts, te = full
        if self.args["absolute"]:
            fs, fe = np.minimum(fs, fe), np.maximum(fs, fe)
            ts, te = np.minimum(ts, te), np.maximum(ts, te)
        fs, fe, ts, te = (v.astype(np.float32) for v in (fs, fe, ts, te))  # float32, as DALI rounds
        span = fe - fs
        if np.any(span == 0):
            raise arg_error(op, "from_end", "the source box has zero extent")
        scale = (te - ts) / span
        return np.concatenate([np.diag(scale), (ts - scale * fs).reshape(-1, 1)], 1)

    def own_batch(self, arg_inputs, n):
        names = ("from_start", "from_end", "to_start", "to_end")
        vals = [_rows(self, arg_inputs, k, n) for k in names]
        d = max([v.shape[1] for v in vals if v is not None] or [1])
        fs, fe, ts, te = (np.full((n, d), dv) if v is None else _broadcast_rows(v, d)
                          for v, dv in zip(vals, (0.0, 1.0, 0.0, 1.0)))
        if self.args["absolute"]:
            fs, fe = np.minimum(fs, fe), np.maximum(fs, fe)
            ts, te = np.minimum(ts, te), np.maximum(ts, te)
        fs, fe, ts, te = (v.astype(np.float32) for v in (fs, fe, ts, te))
        span = fe - fs
        if np.any(span == 0):
            return None
        scale = (te - ts) / span
        lin = np.zeros((n, d, d), np.float32)
        lin[:, np.arange(d), np.arange(d)] = scale
        return np.concatenate([lin, (ts - scale * fs).reshape(n, d, 1)], 2)


@register
class Combine(Operator):
    """Composes several affine transforms into one."""

    schema = Schema(
        name="transforms.combine",
        doc="Combines two or more affine transforms (ndim, ndim + 1): applying the result equals applying the "
            "inputs in the order given (reverse_order=True: the opposite order). Inputs may be sequences of "
            "matrices (F**, e.g. from per-frame arguments): the sequences must have the same frame count, the "
            "other inputs apply to every frame, and the output is a sequence (F**).",
        args=[_REVERSE],
        inputs=(2, 99),  # DALI's limit
    )

    def run_sample(self, inputs, args, ctx):
        mats = [_as_affine(self.schema.name, x, f"input {k}") for k, x in enumerate(inputs)]
        if len({m.shape for m in mats}) != 1:
            raise self.error(f"transforms.combine: the inputs' shapes differ: {[m.shape for m in mats]}")
        n = mats[0].shape[0]
        out = _homog(mats[0].astype(np.float32))
        for m in mats[1:]:  # accumulate from the first, as DALI rounds
            h = _homog(m.astype(np.float32))
            out = _compose(out, h) if self.args["reverse_order"] else _compose(h, out)
        return out[:n]

    def run_cpu(self, batch, inputs, arg_inputs):
        """:meth:`Operator.run_cpu`, or frame by frame where any input is a sequence (F**)."""
        seq = [t.layout().startswith("F") for t in inputs]
        if not any(seq):
            return super().run_cpu(batch, inputs, arg_inputs)
        samples = [t.samples() for t in inputs]
        n = len(samples[0])
        results = self.map_samples(batch, n, lambda i: self._frames([s[i] for s in samples], seq))
        kept = [i for i in range(n) if results[i] is not None]
        sources = [batch.source(i) for i in kept] if batch.sources else None
        return [frame_tagged(TensorListCPU([results[i] for i in kept], "F**", sources))]

    def _frames(self, mats, seq):
        """One sample whose inputs include sequences: combined frame by frame (DALI's rule: the
        sequences' frame counts must agree; the other inputs apply to every frame)."""
        counts = [(k, np.shape(m)[0]) for k, (m, s) in enumerate(zip(mats, seq)) if s]
        (k0, n0) = counts[0]
        for k, c in counts[1:]:
            if c != n0:
                raise self.error(f"input {k0} has {n0} frames, but input {k} has {c}; "
                                 "sequences combined must have the same number of frames")
        if n0 == 0:
            raise self.error(f"input {k0} is a sequence without frames")
        outs = [self.run_sample(tuple(m[f] if s else m for m, s in zip(mats, seq)), self.args, None)
                for f in range(n0)]
        return np.stack(outs)

    def run_batch(self, batch, inputs, arg_inputs):
        # As _Transform.run_batch: the whole batch at once where the inputs stack.
        if not inputs or any(t.layout().startswith("F") for t in inputs):
            return None
        mats = [np.asarray(x.samples(), np.float64) for x in inputs]
        n, d = mats[0].shape[0], mats[0].shape[1]
        if any(m.shape != (n, d, d + 1) for m in mats):
            return None
        out = _homog_batch(mats[0].astype(np.float32))
        for m in mats[1:]:  # accumulate from the first, as run_sample
            h = _homog_batch(m.astype(np.float32))
            out = _compose_batch(out, h) if self.args["reverse_order"] else _compose_batch(h, out)
        layout = self.output_layouts([t.layout() for t in inputs])[0]
        return _batch_outputs(batch, n, np.ascontiguousarray(out[:, :d]), layout)

    def output_layouts(self, input_layouts):
        return ["**"]  # as DALI: a matrix with no named axes
