"""``bb_flip``, ``coord_flip``, ``coord_transform`` and ``bbox_paste``: per-sample box/point maths
(``bb_flip`` also flips a whole batch at once, with the per-sample arithmetic)."""

from __future__ import annotations

import numpy as np

from stoker.errors import arg_error
from stoker.operators.base import Operator
from stoker.operators.per_frame import frame_args
from stoker.operators.schema import Arg, Schema, register
from stoker.tensors import batch_of_arrays, batch_of_segments, segments_of


def _float_values(op, name, value):
    """A per-sample or static numeric argument as a flat float64 array."""
    try:
        return np.asarray(value, np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise arg_error(op, name, f"expected numbers, got {value!r}") from None



def saturate(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Whole-valued floats as integers of ``dtype``, saturated at its range and NaN as 0 (as DALI's
    conversions; compared in float64, where the 32-bit bounds are exact: clipping in float32 made
    2^31 - 1 round up to 2^31 and overflow)."""
    info = np.iinfo(dtype)
    v = np.asarray(values, np.float64)
    v = np.where(np.isnan(v), 0.0, v)
    high, low = v >= float(info.max), v <= float(info.min)
    out = np.where(high | low, 0.0, v).astype(dtype)
    out[high] = info.max
    out[low] = info.min
    return out

@register
class BbFlip(Operator):
    """Mirrors bounding boxes given in relative coordinates."""

    schema = Schema(
        name="bb_flip",
        legacy_name="BbFlip",
        doc="Flips 2D bounding boxes (relative coordinates, [0, 1]) horizontally and/or vertically. Boxes are "
            "[x, y, w, h] or, with ltrb=True, [l, t, r, b]; any input shape whose size is a multiple of 4 is "
            "read as consecutive boxes and keeps its shape.",
        args=[Arg("ltrb", "bool", False, doc="boxes are [left, top, right, bottom] rather than [x, y, w, h]"),
              Arg("horizontal", "int", 1, tensor=True, doc="1 mirrors left-right"),
              Arg("vertical", "int", 0, tensor=True, doc="1 mirrors top-bottom")],
        devices=("cpu",),
    )

    def flips(self, shape: tuple, args: dict) -> tuple[bool, bool]:
        """Whether one sample's boxes (an array of ``shape``) flip horizontally and vertically,
        from its static or per-sample flags; a size that is not a multiple of 4 raises. Shared
        by the CPU and GPU implementations."""
        if int(np.prod(shape, dtype=np.int64)) % 4:
            raise self.error(f"bb_flip: expected boxes of 4 coordinates, got shape {tuple(shape)}")
        return bool(int(args.get("horizontal") or 0)), bool(int(args.get("vertical") or 0))

    def run_sample(self, inputs, args, ctx):
        src = np.asarray(inputs[0])
        flips = self.flips(src.shape, args)
        b = src.reshape(-1, 4).astype(np.float32)
        ltrb = self.args["ltrb"]
        lo = b[:, :2].copy()
        hi = b[:, 2:] if ltrb else lo + b[:, 2:]  # [x, y, w, h] goes through corners, as DALI does
        for d, flip in enumerate(flips):
            if flip:
                lo[:, d], hi[:, d] = 1.0 - hi[:, d], 1.0 - lo[:, d]
        return np.concatenate([lo, hi if ltrb else hi - lo], 1).reshape(src.shape)

    def run_batch(self, batch, inputs, arg_inputs):
        """run_sample for every sample at once (the boxes of all in one array), or None where only
        the per-sample path applies."""
        # (per sample it is ~10 us of Python, with the GIL held)
        n = len(inputs[0])
        seg = segments_of(inputs[0], (4,))  # (N_i, 4) samples: their boxes in one array, in one step
        rows = seg is not None
        if rows:
            b, counts = seg
        else:
            src = inputs[0].samples()
            shapes = [s.shape for s in src]
            counts = np.array([s.size for s in src], np.int64)
        if (not rows and np.any(counts % 4)) or set(arg_inputs) - {"horizontal", "vertical"}:
            return None
        flags = []
        for name in ("horizontal", "vertical"):
            if name in arg_inputs:  # per sample: one whole number (as Arg.sample_value checks it)
                v = np.asarray(arg_inputs[name])
                if v.dtype.kind not in "biuf" or v.size != n or v.shape[:1] != (n,):
                    return None
                v = v.reshape(n)
                if v.dtype.kind == "f" and not np.all(np.mod(v, 1) == 0):
                    return None
                flags.append(v != 0)
            else:
                flags.append(np.full(n, bool(int(self.args.get(name) or 0))))
        if rows:  # (N, 4) samples: no reshapes
            b = b.astype(np.float32, copy=False)
        else:
            counts //= 4
            b = np.concatenate([s.reshape(-1) for s in src]).reshape(-1, 4).astype(np.float32, copy=False)
        ltrb = self.args["ltrb"]
        lo = b[:, :2].copy()
        hi = b[:, 2:].copy() if ltrb else lo + b[:, 2:]
        for d, flip in enumerate(flags):
            if flip.any():
                f = np.repeat(flip, counts)
                lo[:, d], hi[:, d] = np.where(f, 1.0 - hi[:, d], lo[:, d]), np.where(f, 1.0 - lo[:, d], hi[:, d])
        out = np.concatenate([lo, hi if ltrb else hi - lo], 1)
        layout = self.output_layouts([t.layout() for t in inputs])[0]
        sources = list(batch.sources[:n]) + [""] * (n - len(batch.sources)) if batch.sources else None
        if rows:  # (float32 samples of the input's shapes, in one array)
            return [batch_of_segments(out, counts, layout, sources)]
        ends = np.cumsum(counts).tolist()
        parts = [x.reshape(shape) for x, shape in zip([out[a:e] for a, e in zip([0] + ends[:-1], ends)], shapes)]
        return [batch_of_arrays(parts, layout, sources)]


@register
class CoordFlip(Operator):
    """Mirrors point coordinates around a center."""

    schema = Schema(
        name="coord_flip",
        legacy_name="CoordFlip",
        doc="Flips coordinates (N, ndim) around a center: x -> 2*center_x - x for each flipped dimension.",
        args=[Arg("layout", "layout", None, doc="order of the coordinates: 'x', 'xy', 'xyz' (default by ndim)"),
              Arg("flip_x", "int", 1, tensor=True, doc="1 flips the x coordinate"),
              Arg("flip_y", "int", 0, tensor=True, doc="1 flips the y coordinate"),
              Arg("flip_z", "int", 0, tensor=True, doc="1 flips the z coordinate"),
              Arg("center_x", "float", 0.5, tensor=True, doc="flip center along x"),
              Arg("center_y", "float", 0.5, tensor=True, doc="flip center along y"),
              Arg("center_z", "float", 0.5, tensor=True, doc="flip center along z")],
        devices=("cpu",),
    )

    def setup(self):
        lay = self.args["layout"] or ""
        if lay and (len(set(lay)) != len(lay) or set(lay) - set("xyz") or len(lay) > 3):
            raise arg_error("coord_flip", "layout", f"expected a permutation of 'x', 'xy' or 'xyz', got {lay!r}")

    def columns(self, shape: tuple, args: dict) -> list[np.float32 | None]:
        """For one sample of ``shape`` (N, ndim): per coordinate column, the float32 value it is
        mirrored by (``2 * center - x``), or None where that column does not flip. A shape or
        layout that does not fit raises. Shared by the CPU and GPU implementations."""
        if len(shape) != 2 or not 1 <= shape[1] <= 3:
            raise self.error(f"coord_flip: expected coordinates of shape (N, 1..3), got {tuple(shape)}")
        lay = self.args["layout"] or "xyz"[:shape[1]]
        if len(lay) != shape[1]:
            raise self.error(f"coord_flip: layout {lay!r} does not match {shape[1]} coordinates per point")
        return [np.float32(2.0 * float(args[f"center_{axis}"])) if int(args.get(f"flip_{axis}") or 0) else None
                for axis in lay]

    def run_sample(self, inputs, args, ctx):
        c = np.asarray(inputs[0])
        columns = self.columns(c.shape, args)
        out = c.astype(np.float32, copy=True)
        for k, twice_center in enumerate(columns):
            if twice_center is not None:
                out[:, k] = twice_center - out[:, k]
        return out


@register
@frame_args("M", "T", "MT", expand=True)
class CoordTransform(Operator):
    """Applies an affine map to points: out = M @ x + T."""

    schema = Schema(
        name="coord_transform",
        legacy_name="CoordTransform",
        doc="Transforms points (N, in_dim) by out = M x + T. M is a scalar (a uniform scale), or out_dim*in_dim "
            "values (row-major); T a scalar or out_dim values; MT gives both as out_dim x (in_dim + 1). M, T "
            "and MT may be per frame (fn.per_frame): each frame of a sequence of points (layout starting "
            "with 'F') uses its own; points that are not a sequence are transformed by every frame's "
            "matrix, giving a sequence (F, ..., out_dim).",
        args=[Arg("M", "float_list", None, tensor=True, doc="linear part (scalar or out_dim*in_dim values)"),
              Arg("T", "float_list", None, tensor=True, doc="translation (scalar or out_dim values)"),
              Arg("MT", "float_list", None, tensor=True, doc="M and T together: out_dim x (in_dim + 1)"),
              Arg("dtype", "dtype", np.float32, doc="output type: float32 or the input's type (integers are rounded)")],
        devices=("cpu",),
    )

    def setup(self):
        a = self.args
        if a.get("MT") is not None and (a.get("M") is not None or a.get("T") is not None):
            raise arg_error("coord_transform", "MT", "give either MT or M/T, not both")
        dt = np.dtype(a["dtype"] or np.float32)
        if dt.kind not in "fiu":
            raise arg_error("coord_transform", "dtype", f"expected a numeric type, got {dt}")
        self.out_dtype = dt

    def matrix(self, args, in_dim):
        """The (out_dim, in_dim + 1) affine matrix of one sample."""
        op = "coord_transform"
        if args.get("MT") is not None:
            mt = _float_values(op, "MT", args["MT"])
            if mt.size == 1:
                m = np.eye(in_dim) * mt[0]
                return np.concatenate([m, np.zeros((in_dim, 1))], 1)
            if mt.size % (in_dim + 1):
                raise arg_error(op, "MT", f"{mt.size} values do not make rows of {in_dim + 1} "
                                          f"(in_dim {in_dim} + 1)")
            return mt.reshape(-1, in_dim + 1)
        if args.get("M") is None:
            m = np.eye(in_dim)
        else:
            mv = _float_values(op, "M", args["M"])
            if mv.size == 1:
                m = np.eye(in_dim) * mv[0]
            elif mv.size % in_dim:
                raise arg_error(op, "M", f"{mv.size} values do not make rows of in_dim={in_dim}")
            else:
                m = mv.reshape(-1, in_dim)
        out_dim = m.shape[0]
        t = np.zeros(out_dim) if args.get("T") is None else _float_values(op, "T", args["T"])
        if t.size == 1:
            t = np.full(out_dim, t[0])
        elif t.size != out_dim:
            if args.get("M") is None and t.size != in_dim:
                raise arg_error(op, "T", f"{t.size} values do not match out_dim {out_dim}")
            if args.get("M") is not None:
                raise arg_error(op, "T", f"{t.size} values do not match out_dim {out_dim}")
        return np.concatenate([m, t.reshape(-1, 1)], 1)

    def run_sample(self, inputs, args, ctx):
        x = np.asarray(inputs[0])
        if x.ndim == 0:
            raise self.error("coord_transform: expected points of shape (..., in_dim)")
        if x.ndim == 1:
            x = x.reshape(-1, 1)
        if self.out_dtype != np.float32 and self.out_dtype != x.dtype:
            raise self.error(f"coord_transform: argument 'dtype' must be float32 or the input's type ({x.dtype}), "
                             f"got {self.out_dtype}")
        in_dim = x.shape[-1]
        mt = self.matrix(args, in_dim)
        pts = x.reshape(-1, in_dim).astype(np.float32)
        m32 = mt.astype(np.float32)
        out = pts[:, :1] * m32[:, 0]
        for j in range(1, in_dim):  # term by term in float32, the order DALI rounds in
            out += pts[:, j:j + 1] * m32[:, j]
        out += m32[:, in_dim]
        out = out.reshape(*x.shape[:-1], mt.shape[0])
        if self.out_dtype.kind in "iu":
            return saturate(np.sign(out) * np.floor(np.abs(out) + 0.5), self.out_dtype)  # halves away from 0
        return out.astype(self.out_dtype)


@register
class BboxPaste(Operator):
    """Re-expresses boxes after the image is pasted into a larger canvas (see ``paste``)."""

    schema = Schema(
        name="bbox_paste",
        legacy_name="BBoxPaste",
        doc="Maps relative boxes of an image onto a canvas ``ratio`` times larger into which the image was "
            "pasted at relative position (paste_x, paste_y), as ``paste`` does.",
        args=[Arg("ratio", "float", None, tensor=True, doc="canvas size / image size (>= 1); required"),
              Arg("paste_x", "float", 0.5, tensor=True, doc="horizontal paste position in [0, 1]"),
              Arg("paste_y", "float", 0.5, tensor=True, doc="vertical paste position in [0, 1]"),
              Arg("ltrb", "bool", False, doc="boxes are [l, t, r, b] rather than [x, y, w, h]")],
        devices=("cpu",),
    )

    def run_sample(self, inputs, args, ctx):
        if args.get("ratio") is None:
            raise arg_error("bbox_paste", "ratio", "is required")
        ratio = float(args["ratio"])
        if not ratio >= 1.0:
            raise self.error(f"bbox_paste: argument 'ratio' must be >= 1, got {ratio}")
        px, py = float(args["paste_x"]), float(args["paste_y"])
        for name, v in (("paste_x", px), ("paste_y", py)):
            if not 0.0 <= v <= 1.0:
                raise self.error(f"bbox_paste: argument '{name}' must be in [0, 1], got {v}")
        src = np.asarray(inputs[0])
        if src.size % 4:
            raise self.error(f"bbox_paste: expected boxes of 4 coordinates, got shape {src.shape}")
        b = src.reshape(-1, 4).astype(np.float32)  # any shape: consecutive 4-value boxes, as DALI reads it
        scale = np.float32(1.0 / ratio)
        margin = np.array([px, py], np.float32) * (np.float32(1.0) - scale)
        out = b * scale
        out[:, :2] += margin
        if self.args["ltrb"]:
            out[:, 2:] += margin
        return out.reshape(src.shape)
