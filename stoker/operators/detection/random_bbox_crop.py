"""``random_bbox_crop``: the SSD-style crop-window sampler that keeps bounding boxes consistent.

Per sample: pick a threshold (or, with ``allow_no_crop``, "no crop"), draw up to
``num_attempts`` candidate windows at once (vectorised), keep the first whose
overlap with the boxes meets the threshold and that keeps at least one box;
otherwise pick another threshold. Outputs: anchor, shape, the surviving boxes in
window coordinates, their labels (with a labels input) and their indices
(``output_bbox_indices``).

``run_cpu`` computes the whole batch with NumPy (``_bbox_crop_search.BatchSearch``), reading each
sample's draws where ``run_sample`` reads them, with the same arithmetic: the same results, to the
bit. Anything unusual or invalid takes the per-sample path, which raises naming the sample (or
skips it).
"""

from __future__ import annotations

import numpy as np

from stoker.errors import arg_error
from stoker.operators.base import Operator, SampleContext
from stoker.operators.detection._bbox_crop_search import SAFETY_LIMIT, BatchSearch
from stoker.operators.schema import Arg, Schema, register
from stoker.random_state import batch_keys
from stoker.tensors import TensorListCPU, batch_of_arrays, batch_of_rows, batch_of_segments, segments_of

_OP = "random_bbox_crop"


def _num_outputs(args):
    return 3 + int((args.get("_num_inputs") or 1) > 1) + int(bool(args.get("output_bbox_indices")))


def parse_box_layout(layout: str, ndim: int):
    """(start index per dim, end-or-size index per dim, True where it is a size) for a box layout."""
    starts, ends, sizes = "xyz"[:ndim], "XYZ"[:ndim], "WHD"[:ndim]
    if len(layout) != 2 * ndim or set(layout) - set(starts + ends + sizes):
        raise ValueError(f"layout {layout!r} does not describe {ndim}D boxes")
    s_idx, e_idx, is_size = [], [], []
    for d in range(ndim):
        if starts[d] not in layout or (ends[d] in layout) == (sizes[d] in layout):
            raise ValueError(f"layout {layout!r} needs {starts[d]!r} and one of {ends[d]!r}/{sizes[d]!r}")
        s_idx.append(layout.index(starts[d]))
        e_idx.append(layout.index(ends[d] if ends[d] in layout else sizes[d]))
        is_size.append(sizes[d] in layout)
    return np.array(s_idx), np.array(e_idx), np.array(is_size)


@register
class RandomBBoxCrop(Operator):
    """Random crop windows constrained by their overlap with the bounding boxes."""

    offload_cpu = True  # its batch search is mostly Python between small NumPy steps (batch_offload)

    schema = Schema(
        name="random_bbox_crop",
        legacy_name="RandomBBoxCrop",
        doc="Draws a crop window whose overlap (IoU, or the covered fraction of each box) with the boxes "
            "meets a randomly chosen threshold, and maps the boxes into it. Inputs: boxes (N, 4|6) relative "
            "coordinates and optional labels (N,). Outputs: anchor, shape ([x, y(, z)] / [w, h(, d)]), boxes, "
            "(labels), (bbox indices).",
        args=[Arg("aspect_ratio", "float_list", [1.0, 1.0], doc="range of window aspect ratios (x/y); 3D: 2 or 6"),
              Arg("thresholds", "float_list", [0.0], doc="minimum overlap values; one is drawn per sample"),
              Arg("scaling", "float_list", [1.0, 1.0], doc="range of window size relative to the image"),
              Arg("threshold_type", "str", "iou", doc="'iou' or 'overlap' (fraction of the box in the window)"),
              Arg("num_attempts", "int", 1, doc="candidates per chosen threshold"),
              Arg("total_num_attempts", "int", -1, doc="total candidates before the best one is taken (-1: none)"),
              Arg("allow_no_crop", "bool", True, doc="'no crop' is one more outcome to choose from"),
              Arg("all_boxes_above_threshold", "bool", True, doc="every box (else: at least one) must meet it"),
              Arg("bbox_layout", "layout", None, doc="box coordinates, e.g. 'xyXY' (default) or 'xyWH'"),
              Arg("ltrb", "bool", None, doc="deprecated (default True): False means bbox_layout='xyWH'"),
              Arg("bbox_prune_threshold", "float", None,
                  doc="keep boxes with at least this fraction of their area inside (default: centroid inside)"),
              Arg("output_bbox_indices", "bool", False, doc="add an output with the kept boxes' indices"),
              Arg("input_shape", "int_list", None, tensor=True, doc="image shape (W, H(, D)): absolute aspect"),
              Arg("crop_shape", "int_list", None, tensor=True, doc="fixed window shape (needs input_shape)"),
              Arg("shape_layout", "layout", None, doc="order of input_shape/crop_shape (default 'WH'/'WHD')"),
              Arg("quiet", "bool", False, doc="accepted for compatibility"),
              Arg("_num_inputs", "int", 1, doc="(internal) number of positional inputs")],
        inputs=(1, 2),
        input_count_arg="_num_inputs",
        num_outputs=_num_outputs,
        random=True,
    )

    def setup(self):
        a = self.args
        def bad(name, msg):
            return arg_error(_OP, name, msg)
        if a["threshold_type"] not in ("iou", "overlap"):
            raise bad("threshold_type", f"expected 'iou' or 'overlap', got {a['threshold_type']!r}")
        th = a["thresholds"]
        if not th or any(not 0.0 <= t <= 1.0 for t in th):
            raise bad("thresholds", f"values must be in [0, 1], got {th}")
        sc = a["scaling"]
        if len(sc) != 2 or not 0.0 <= sc[0] <= sc[1]:
            raise bad("scaling", f"expected [min, max] with 0 <= min <= max, got {sc}")
        ar = a["aspect_ratio"]
        if len(ar) not in (2, 6) or any(v <= 0 for v in ar) or any(ar[i] > ar[i + 1] for i in range(0, len(ar), 2)):
            raise bad("aspect_ratio", f"expected [min, max] pairs with 0 < min <= max, got {ar}")
        if a["num_attempts"] < 1:
            raise bad("num_attempts", f"must be positive, got {a['num_attempts']}")
        p = a["bbox_prune_threshold"]
        if p is not None and not 0.0 <= p <= 1.0:
            raise bad("bbox_prune_threshold", f"must be in [0, 1], got {p}")
        if a["bbox_layout"] and a["ltrb"] is not None:
            raise bad("ltrb", "is deprecated and cannot be combined with 'bbox_layout'")
        if a["bbox_layout"]:
            nd = len(a["bbox_layout"]) // 2
            try:
                parse_box_layout(a["bbox_layout"], nd)
            except ValueError as e:
                raise bad("bbox_layout", str(e)) from None

    def output_layouts(self, input_layouts):
        return [""] * self.num_outputs

    def _layout(self, ndim):
        corners = self.args["ltrb"] in (None, True)
        lay = self.args["bbox_layout"] or (("xyXY", "xyzXYZ") if corners else ("xyWH", "xyzWHD"))[ndim - 2]
        if len(lay) != 2 * ndim:
            raise self.error(f"{_OP}: argument 'bbox_layout' {lay!r} does not fit {2 * ndim} coordinates per box")
        return parse_box_layout(lay, ndim)

    def _shape_arg(self, args, name, ndim):
        v = args.get(name)
        if v is None:
            return None
        v = np.asarray(v, np.float64).reshape(-1)
        lay = self.args["shape_layout"] or "WHD"[:ndim]
        if v.size != ndim or len(lay) != ndim or set(lay) != set("WHD"[:ndim]):
            raise self.error(f"{_OP}: argument '{name}' needs {ndim} values in layout {lay!r}, got {v.tolist()}")
        return v[["WHD".index(c) for c in lay]] if lay != "WHD"[:ndim] else v  # reorder to x, y, z

    def _candidates(self, rng, k, ndim, in_shape, crop_shape):
        """k candidate windows (anchors, shapes), relative; windows failing the aspect check have NaN."""
        if crop_shape is not None:  # a fixed window at a whole-pixel position
            shape = np.broadcast_to(crop_shape / in_shape, (k, ndim)).copy()
            span = (in_shape - crop_shape + 1).astype(np.int64)
            anchor = np.minimum(np.floor(rng.random((k, ndim)) * span), span - 1) / in_shape
            return anchor, shape
        smin, smax = self.args["scaling"]
        ar = np.asarray(self.args["aspect_ratio"]).reshape(-1, 2)
        if ndim == 3 and ar.shape[0] == 1:
            ar = np.repeat(ar, 3, 0)
        first = rng.uniform(smin, smax, k)
        rel = np.ones(ndim) if in_shape is None else in_shape
        shape = np.empty((k, ndim))
        shape[:, 0] = first
        # Derive the other extents from x/y (and x/z) aspect ratios: the window is square (in the image's
        # aspect without input_shape) when the range is [1, 1].
        for d in range(1, ndim):
            r = rng.uniform(ar[d - 1, 0], ar[d - 1, 1], k)
            shape[:, d] = first * rel[0] / (r * rel[d])
        # DALI keeps every relative extent within `scaling`, but with input_shape (absolute aspect) only the
        # first one: the derived extents just have to fit the image.
        ok = np.all(shape <= 1.0, 1)
        if in_shape is None:
            ok &= np.all((shape >= smin - 1e-7) & (shape <= smax + 1e-7), 1)
        if ndim == 3:
            yz = (shape[:, 1] * rel[1]) / (shape[:, 2] * rel[2])
            ok &= (yz >= ar[2, 0] * (1 - 1e-6)) & (yz <= ar[2, 1] * (1 + 1e-6))
        shape[~ok] = np.nan
        anchor = rng.uniform(0.0, 1.0, (k, ndim)) * (1.0 - shape)
        return anchor, shape

    def _metrics(self, lo, hi, anchor, shape):
        """(K, N) overlap metric and covered fraction of each box with each window."""
        a0, a1 = anchor[:, None, :], (anchor + shape)[:, None, :]
        inter = np.prod(np.clip(np.minimum(hi[None], a1) - np.maximum(lo[None], a0), 0, None), -1)
        box_area = np.prod(hi - lo, -1)[None]
        frac = np.divide(inter, box_area, out=(inter > 0).astype(np.float64), where=box_area > 0)
        if self.args["threshold_type"] == "overlap":
            return frac, frac
        union = box_area + np.prod(shape, -1)[:, None] - inter
        return np.divide(inter, union, out=np.zeros_like(inter), where=union > 0), frac

    def _kept(self, lo, hi, anchor, shape, frac):
        """(K, N) mask of boxes that stay in each window."""
        p = self.args["bbox_prune_threshold"]
        if p is not None:
            return (frac >= p) & (frac > 0)
        c = ((lo + hi) * 0.5)[None]
        return np.all((c >= anchor[:, None, :]) & (c <= (anchor + shape)[:, None, :]), -1)

    def run_sample(self, inputs, args, ctx):
        a = self.args
        boxes = np.asarray(inputs[0], np.float32)
        if boxes.ndim == 1 and boxes.size == 0:
            boxes = boxes.reshape(0, 4)
        if boxes.ndim != 2 or boxes.shape[1] not in (4, 6):
            raise self.error(f"{_OP}: expected boxes of shape (N, 4) or (N, 6), got {boxes.shape}")
        ndim = boxes.shape[1] // 2
        s_idx, e_idx, is_size = self._layout(ndim)
        lo = boxes[:, s_idx].astype(np.float64)
        hi = np.where(is_size, lo + boxes[:, e_idx], boxes[:, e_idx]).astype(np.float64)
        if np.any(lo < 0) or np.any(hi > 1) or np.any(hi < lo):
            raise self.error(f"{_OP}: boxes must lie within [0, 1] with start <= end")
        labels = np.asarray(inputs[1]) if len(inputs) > 1 else None
        if labels is not None and (labels.ndim == 0 or labels.shape[0] != boxes.shape[0]):
            raise self.error(f"{_OP}: {boxes.shape[0]} boxes but labels of shape {labels.shape}")
        in_shape = self._shape_arg(args, "input_shape", ndim)
        crop_shape = self._shape_arg(args, "crop_shape", ndim)
        if crop_shape is not None and in_shape is None:
            raise arg_error(_OP, "crop_shape", "needs input_shape too")
        if crop_shape is not None and np.any(crop_shape > in_shape):
            raise self.error(f"{_OP}: argument 'crop_shape' {crop_shape.tolist()} exceeds input_shape "
                             f"{in_shape.tolist()}")
        anchor, shape, keep = self._search(ctx.rng, lo, hi, ndim, in_shape, crop_shape)
        out = self._map_boxes(lo[keep], hi[keep], anchor, shape, boxes.shape[1], s_idx, e_idx, is_size)
        if crop_shape is not None:  # a fixed window is given in absolute units
            anchor, shape = anchor * in_shape, crop_shape
        res = [anchor.astype(np.float32), np.asarray(shape, np.float32), out]
        if labels is not None:
            res.append(labels[keep])
        if a["output_bbox_indices"]:
            res.append(np.flatnonzero(keep).astype(np.int32))
        return tuple(res)

    def _search(self, rng, lo, hi, ndim, in_shape, crop_shape):
        """(anchor, shape, kept-box mask) of the chosen window."""
        a = self.args
        options = list(a["thresholds"]) + ([None] if a["allow_no_crop"] else [])
        n_att, total_limit = a["num_attempts"], a["total_num_attempts"]
        no_crop = (np.zeros(ndim), np.ones(ndim), np.ones(lo.shape[0], bool))
        best, best_score, used = None, -np.inf, 0
        while True:
            thr = options[rng.integers(len(options))]
            if thr is None:
                return no_crop
            k = n_att if total_limit <= 0 else max(0, min(n_att, total_limit - used))
            anchors, shapes = self._candidates(rng, k, ndim, in_shape, crop_shape)
            used += k
            metric, frac = self._metrics(lo, hi, anchors, shapes)
            kept = self._kept(lo, hi, anchors, shapes, frac)
            meets = metric >= thr
            valid = ~np.isnan(shapes[:, 0])
            if lo.shape[0]:
                valid &= (meets.all(1) if a["all_boxes_above_threshold"] else meets.any(1)) & kept.any(1)
            hit = np.flatnonzero(valid)
            if hit.size:
                j = hit[0]
                return anchors[j], shapes[j], kept[j]
            if k and lo.shape[0]:
                score = np.where(np.isnan(shapes[:, 0]), -np.inf, metric.min(1))
                j = int(np.argmax(score))
                if score[j] > best_score:
                    best, best_score = (anchors[j], shapes[j], kept[j]), score[j]
            if (total_limit > 0 and used >= total_limit) or used >= SAFETY_LIMIT:
                if total_limit <= 0:
                    raise self.error(f"{_OP}: no valid crop window in {used} attempts; set argument "
                                     f"'total_num_attempts' or loosen 'thresholds'/'scaling'/'aspect_ratio'")
                return best if best is not None else no_crop

    @staticmethod
    def _map_boxes(lo, hi, anchor, shape, ncoord, s_idx, e_idx, is_size):
        """Boxes clipped to the window, in window-relative coordinates and the input's layout."""
        nlo = np.clip((lo - anchor) / shape, 0.0, 1.0)
        nhi = np.clip((hi - anchor) / shape, 0.0, 1.0)
        out = np.empty((lo.shape[0], ncoord), np.float32)
        out[:, s_idx] = nlo
        out[:, e_idx] = np.where(is_size, nhi - nlo, nhi)
        return out

    # --- the whole batch at once ------------------------------------------------------------

    def run_batch(self, batch, inputs, arg_inputs):
        """The outputs of run_cpu, or None where only the per-sample path applies."""
        # (run_sample costs ~0.7 ms of Python per sample, most of an SSD pipeline's CPU stage, and
        # the GIL keeps threads from helping; this takes a few NumPy steps per round of attempts)
        n = len(inputs[0])
        seg = segments_of(inputs[0])  # (N_i, 4 or 6) samples: in one array, in one step where it is one
        if seg is not None and seg[0].ndim == 2 and seg[0].shape[1] in (4, 6):
            flat, counts = seg[0].astype(np.float32, copy=False), seg[1]
        else:
            try:  # (all the shapes in one array: ragged numbers of dimensions raise)
                shapes = np.array([b.shape for b in inputs[0].samples()], np.int64)
            except ValueError:
                return None
            if shapes.shape == (n, 1) and not shapes.any():  # empty 1D arrays: no boxes
                flat, counts = np.zeros((0, 4), np.float32), np.zeros(n, np.int64)
            else:
                return None
        ncoord = flat.shape[1]
        nd = ncoord // 2
        s_idx, e_idx, is_size = self._layout(nd)
        lo = flat[:, s_idx].astype(np.float64)
        hi = np.where(is_size, lo + flat[:, e_idx], flat[:, e_idx]).astype(np.float64)
        if not (np.all(lo >= 0) and np.all(hi <= 1) and np.all(hi >= lo)):  # (NaN too)
            return None
        labels = None
        if len(inputs) > 1:
            lseg = segments_of(inputs[1]) if len(inputs[1]) == n else None
            if lseg is not None and np.array_equal(lseg[1], counts):
                labels = lseg[0]
            else:
                labs = inputs[1].samples()
                if len(labs) != n or not np.array_equal([lab.shape[0] if lab.ndim else -1 for lab in labs], counts):
                    return None
                labels = np.concatenate(labs)
        in_shape, crop_shape = self._batch_shape_args(arg_inputs, n, nd)
        real = np.arange(int(counts.max(initial=0)))[None, :] < counts[:, None]  # (n, most boxes)
        lo_p = np.zeros((nd, *real.shape))  # padded, per dimension
        hi_p = np.zeros((nd, *real.shape))
        lo_p[:, real], hi_p[:, real] = lo.T, hi.T
        keys = batch_keys(self.op_seed, batch.iteration, batch.sample_indices(n))
        search = BatchSearch(self, keys, lo_p, hi_p, real, counts, in_shape, crop_shape)
        anchor, shape, keep, todo = search.run()
        # every sample's kept boxes in one array, then split into samples
        sid = np.repeat(np.arange(n), counts)
        kf = keep[real]
        out = self._map_boxes(lo[kf], hi[kf], anchor[sid[kf]], shape[sid[kf]], ncoord, s_idx, e_idx, is_size)
        kept_counts = keep.sum(1)
        sources = list(batch.sources[:n]) + [""] * (n - len(batch.sources)) if batch.sources else None
        ends = np.cumsum(kept_counts).tolist()
        cuts = list(zip([0] + ends[:-1], ends))

        def split(x):  # (one array of segments, unless some samples' results come from run_sample)
            return batch_of_segments(x, kept_counts, "", sources) if not todo else [x[a:b] for a, b in cuts]
        res = [None, None, split(out)]
        if labels is not None:
            res.append(split(labels[kf]))
        if self.args["output_bbox_indices"]:
            starts = np.cumsum(counts) - counts
            res.append(split((np.arange(sid.size) - starts[sid])[kf].astype(np.int32)))
        if crop_shape is not None:  # a fixed window is given in absolute units
            anchor, shape = anchor * in_shape, crop_shape
        res[0], res[1] = anchor.astype(np.float32), np.asarray(shape, np.float32)
        for i in todo:  # rare: still searching after the batch path's rounds
            one = self.run_sample(tuple(t.samples()[i] for t in inputs), self.sample_args(arg_inputs, i),
                                  SampleContext(batch.sample_index(i), batch.iteration, self.op_seed,
                                                batch.source(i)))
            res[0][i], res[1][i] = one[0], one[1]
            for k in range(2, len(res)):
                res[k][i] = one[k]
        # (the box, label and index samples: slices of one array each, or run_sample's of the same kinds)
        return [batch_of_rows(res[0], "", sources), batch_of_rows(res[1], "", sources)] + \
            [x if isinstance(x, TensorListCPU) else batch_of_arrays(x, "", sources) for x in res[2:]]

    def _batch_shape_args(self, arg_inputs, n, nd):
        """(input_shape, crop_shape), each (n, nd) in x, y(, z) order or None; raises where the
        per-sample path has an error to raise."""
        if set(arg_inputs) - {"input_shape", "crop_shape"}:
            raise ValueError("unknown argument inputs")
        got = []
        for name in ("input_shape", "crop_shape"):
            if name in arg_inputs:
                v = np.stack([self._shape_arg(self.sample_args(arg_inputs, i), name, nd) for i in range(n)])
            else:
                v = self._shape_arg(self.args, name, nd)
                v = None if v is None else np.broadcast_to(v, (n, nd))
            got.append(v)
        in_shape, crop_shape = got
        if (in_shape is not None and not np.all(in_shape > 0)) or \
                (crop_shape is not None and (in_shape is None or np.any(crop_shape > in_shape))):
            raise ValueError("bad input_shape/crop_shape")
        return in_shape, crop_shape
