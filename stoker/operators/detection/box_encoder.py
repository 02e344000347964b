"""``box_encoder``: SSD-style matching of ground-truth boxes to a fixed set of anchors.

``run_cpu`` matches and encodes the whole batch in a few NumPy steps (the boxes of every sample in
one array, the IoU with the anchors computed a few hundred boxes at a time; only the IoUs above
``criteria`` are kept, sorted to find each anchor's best box), with run_sample's float32 arithmetic
element for element, so the outputs are the same to the bit; anything unusual or invalid goes
through the per-sample path, which raises naming the sample.
"""

from __future__ import annotations

import numpy as np

from stoker.errors import arg_error
from stoker.operators.base import Operator
from stoker.operators.schema import Arg, Schema, register
from stoker.tensors import batch_of_rows, segments_of

_OP = "box_encoder"
# The batch path's IoU is computed in pieces of about this many (anchor, box) pairs (that stay in
# cache), of at least _IOU_MIN_BOXES boxes.
_IOU_ELEMENTS, _IOU_MIN_BOXES = 1 << 17, 16


def iou_matrix(a, b):
    """(len(a), len(b)) IoU of ltrb boxes, in float32 (the precision DALI compares in)."""
    # One coordinate at a time, in place: the same operations element for element as on
    # (len(a), len(b), 2) stacks, but NumPy's inner loops run over len(b) rather than 2, and
    # fewer large temporaries (several times faster for a batch's boxes at once).
    inter = np.minimum(a[:, 2:3], b[None, :, 2])
    tmp = np.maximum(a[:, 0:1], b[None, :, 0])
    inter -= tmp
    np.clip(inter, 0, None, out=inter)
    h = np.minimum(a[:, 3:4], b[None, :, 3])
    h -= np.maximum(a[:, 1:2], b[None, :, 1], out=tmp)
    np.clip(h, 0, None, out=h)
    inter *= h
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    union = np.add(area_a[:, None], area_b[None, :], out=h)
    union -= inter
    return np.divide(inter, union, out=np.zeros_like(inter), where=union > 0).astype(np.float32, copy=False)


def _center_form(b):
    """ltrb -> (cx, cy, w, h), float32."""
    half = np.float32(0.5)
    return np.stack([(b[:, 0] + b[:, 2]) * half, (b[:, 1] + b[:, 3]) * half,
                     b[:, 2] - b[:, 0], b[:, 3] - b[:, 1]], 1)


@register
class BoxEncoder(Operator):
    """Assigns each anchor a ground-truth box (or none) and encodes it."""

    offload_cpu = True  # batch-wide NumPy on small arrays, mostly Python time (batch_offload)

    schema = Schema(
        name="box_encoder",
        legacy_name="BoxEncoder",
        doc="Matches boxes (N, 4) ltrb and labels (N,) to the anchors: each anchor takes the box it overlaps "
            "most if that IoU exceeds ``criteria``, and each box claims its best anchor. Outputs per anchor: "
            "the box in (cx, cy, w, h) form (unmatched anchors: the anchor itself) or, with ``offset``, "
            "((c - c_anchor) / wh_anchor - mean) / std and (log(wh / wh_anchor) - mean) / std (unmatched: 0); "
            "and the label (0 when unmatched).",
        args=[Arg("anchors", "float_list", None, doc="anchors, 4 values each, ltrb (relative); required"),
              Arg("criteria", "float", 0.5, doc="IoU an anchor's best box must exceed to match"),
              Arg("offset", "bool", False, doc="output offsets from the anchors rather than boxes"),
              Arg("scale", "float", 1.0, doc="boxes and anchors are scaled by this before offsets"),
              Arg("stds", "float_list", [1.0, 1.0, 1.0, 1.0], doc="divisors of the offsets"),
              Arg("means", "float_list", [0.0, 0.0, 0.0, 0.0], doc="subtracted from the offsets")],
        inputs=(2, 2),
        num_outputs=2,
    )

    def setup(self):
        a = self.args
        anchors = a["anchors"]
        if not anchors or len(anchors) % 4:
            raise arg_error(_OP, "anchors", f"expected 4 values per anchor, got {len(anchors or [])} values")
        if not 0.0 <= a["criteria"] <= 1.0:
            raise arg_error(_OP, "criteria", f"must be in [0, 1], got {a['criteria']}")
        for name in ("stds", "means"):
            if len(a[name]) != 4:
                raise arg_error(_OP, name, f"expected 4 values, got {len(a[name])}")
        if any(s == 0 for s in a["stds"]):
            raise arg_error(_OP, "stds", "values must be non-zero")
        self.anchors = np.asarray(anchors, np.float32).reshape(-1, 4)
        scale = np.float32(a["scale"])
        self.anchors_center = _center_form(self.anchors) * scale  # center form first, then scaled (as DALI)
        self.means = np.asarray(a["means"], np.float32)
        self.anchors_cf = _center_form(self.anchors)
        # the batch path's IoU: anchors reversed, one contiguous row per coordinate
        rev = self.anchors[::-1]
        left, top, right, bottom = (np.ascontiguousarray(rev[:, i]) for i in range(4))
        self._area_rev = ((right - left) * (bottom - top))[:, None]  # as iou_matrix's area_b
        self._x_extents, self._y_extents = _extents(left, right), _extents(top, bottom)
        self.anchors_plain = bool(np.all(right >= left) and np.all(bottom >= top) and np.all(self._area_rev > 0)
                                  and np.all(np.isfinite(self._area_rev)))
        self.stds = np.asarray(a["stds"], np.float32)

    def output_layouts(self, input_layouts):
        return ["", ""]

    def run_sample(self, inputs, args, ctx):
        boxes = np.asarray(inputs[0], np.float32)
        labels = np.asarray(inputs[1])
        if boxes.size == 0:
            boxes = boxes.reshape(0, 4)
        if boxes.ndim != 2 or boxes.shape[1] != 4:
            raise self.error(f"{_OP}: expected boxes of shape (N, 4), got {boxes.shape}")
        labels = labels.reshape(labels.shape[0], *labels.shape[1:]) if labels.ndim else labels.reshape(1)
        if labels.shape[0] != boxes.shape[0]:
            raise self.error(f"{_OP}: {boxes.shape[0]} boxes but {labels.shape[0]} labels")
        m = self.anchors.shape[0]
        match = np.full(m, -1, np.int64)
        if boxes.shape[0]:
            iou = iou_matrix(boxes, self.anchors)                      # (N, M)
            n = boxes.shape[0]
            best_box = n - 1 - np.argmax(iou[::-1], 0)                 # last maximum per anchor, as DALI
            good = iou[best_box, np.arange(m)] > np.float32(self.args["criteria"])
            match[good] = best_box[good]
            # each box claims its best anchor; for an anchor claimed twice the later box wins
            best_anchor = m - 1 - np.argmax(iou[:, ::-1], 1)  # last maximum, as DALI
            rev = best_anchor[::-1]
            uniq, first = np.unique(rev, return_index=True)
            match[uniq] = n - 1 - first
        matched = match >= 0
        out_labels = np.zeros((m, *labels.shape[1:]), labels.dtype)
        out_labels[matched] = labels[match[matched]]
        if not self.args["offset"]:
            out = _center_form(self.anchors)
            out[matched] = _center_form(boxes[match[matched]])
            return out, out_labels
        out = np.zeros((m, 4), np.float32)
        if matched.any():
            b = _center_form(boxes[match[matched]]) * np.float32(self.args["scale"])
            a = self.anchors_center[matched]
            xy = ((b[:, :2] - a[:, :2]) / a[:, 2:] - self.means[:2]) / self.stds[:2]
            # float32 ratio, log correctly rounded (NumPy's float32 log can be an ulp off libm's)
            log_wh = np.log((b[:, 2:] / a[:, 2:]).astype(np.float64)).astype(np.float32)
            wh = (log_wh - self.means[2:]) / self.stds[2:]
            out[matched] = np.concatenate([xy, wh], 1)
        return out, out_labels

    # --- the whole batch at once ------------------------------------------------------------

    def run_batch(self, batch, inputs, arg_inputs):
        """The outputs of run_cpu, or None where only the per-sample path applies."""
        # (run_sample costs ~0.12 ms of Python per sample; the GIL keeps threads from helping)
        if len(inputs) != 2:
            return None
        n, m = len(inputs[0]), self.anchors.shape[0]
        if not n or len(inputs[1]) != n:
            return None
        # (N_i, 4) boxes and (N_i, ...) labels in one array each, in one step where the batches are
        # one buffer (random_bbox_crop's and bb_flip's outputs)
        box_seg, label_seg = segments_of(inputs[0], (4,)), segments_of(inputs[1])
        if box_seg is not None and label_seg is not None and (box_seg[1] == label_seg[1]).all():
            (boxes, counts), flat_labels = box_seg, label_seg[0]
            label_row = flat_labels.shape[1:]
        else:
            samples, labels = inputs[0].samples(), inputs[1].samples()
            if labels[0].ndim == 0:
                return None
            counts = _batch_counts(samples, labels)
            if counts is None:
                return None
            if counts.size == n:  # every sample (N, 4)
                boxes = np.concatenate(samples)
            else:
                counts = counts[:n]
                boxes = np.concatenate([b.reshape(-1, 4) for b in samples])
            flat_labels, label_row = np.concatenate(labels), labels[0].shape[1:]
        boxes = boxes.astype(np.float32, copy=False)
        if not np.isfinite(boxes).all():
            return None
        starts = np.cumsum(counts) - counts
        if boxes.shape[0]:
            match = self._match(boxes, counts, starts)
        else:
            match = np.full((n, m), -1, np.int32)
        at = np.flatnonzero(match >= 0)
        si, ai = np.divmod(at, m)
        src = starts[si] + match.reshape(-1)[at]  # the matched boxes, in the flat arrays
        ai = m - 1 - ai  # (match has the anchors in reverse order)
        out_labels = np.zeros((n, m, *label_row), flat_labels.dtype)
        out_labels[si, ai] = flat_labels[src]
        if not self.args["offset"]:
            out = np.empty((n, m, 4), np.float32)
            out[...] = self.anchors_cf
            out[si, ai] = _center_form(boxes[src])
        else:
            out = np.zeros((n, m, 4), np.float32)
            b = _center_form(boxes[src]) * np.float32(self.args["scale"])
            a = self.anchors_center[ai]
            xy = ((b[:, :2] - a[:, :2]) / a[:, 2:] - self.means[:2]) / self.stds[:2]
            log_wh = np.log((b[:, 2:] / a[:, 2:]).astype(np.float64)).astype(np.float32)  # as run_sample
            wh = (log_wh - self.means[2:]) / self.stds[2:]
            out[si, ai] = np.concatenate([xy, wh], 1)
        sources = None
        if batch.sources:
            sources = list(batch.sources[:n]) + [""] * (n - len(batch.sources))
        return [batch_of_rows(out, "", sources), batch_of_rows(out_labels, "", sources)]

    def _match(self, boxes, counts, starts):
        """(n, anchors) int32, anchors in reverse order: each sample's matched box per anchor (its
        index in the sample; -1: none), as run_sample matches. The IoU is computed (anchors, boxes),
        a few hundred boxes at a time, with run_sample's float32 arithmetic; the anchors reversed so
        that argmax (the first maximum) finds the last maximum, as DALI's rule wants."""
        n, m = counts.size, self.anchors.shape[0]
        crit = np.float32(self.args["criteria"])
        sid = np.repeat(np.arange(n, dtype=np.int64), counts)
        local = (np.arange(sid.size) - starts[sid]).astype(np.int32)
        bt = np.ascontiguousarray(boxes.T)  # (4, boxes): contiguous per coordinate
        area = (bt[2] - bt[0]) * (bt[3] - bt[1])  # as iou_matrix computes area_a
        # union > 0 everywhere (so the division needs no mask) when every anchor has a positive
        # finite area and no box is inverted or of non-finite area (see _iou_t)
        plain = self.anchors_plain and bool((bt[2] >= bt[0]).all() and (bt[3] >= bt[1]).all()
                                            and np.isfinite(area).all())
        step = max(_IOU_MIN_BOXES, _IOU_ELEMENTS // m)
        best_anchor, hits = [], []
        for c in range(0, sid.size, step):
            iou = self._iou_t(bt[:, c:c + step], area[c:c + step], plain)  # (m, boxes), anchors reversed
            best_anchor.append(iou.argmax(0))
            at = np.flatnonzero(iou > crit)  # the only IoUs that can match an anchor to its best box
            a, b = np.divmod(at, iou.shape[1])
            hits.append((a, b + c, iou.reshape(-1)[at]))
        # each anchor's best box (its last maximum) where that IoU exceeds criteria: the IoUs are
        # positive, so their bits order them; within a (sample, anchor) the entries come in box
        # order and a stable sort keeps it, so the last of a run is the last maximum
        a, b, v = (np.concatenate(x) for x in zip(*hits))
        match = np.full(n * m, -1, np.int32)
        if a.size:
            group = sid[b] * m + a
            key = np.argsort((group << 31) | v.view(np.int32), kind="stable")
            group = group[key]
            last = np.ones(key.size, bool)
            np.not_equal(group[1:], group[:-1], out=last[:-1])
            match[group[last]] = local[b[key[last]]]
        # each box claims its best anchor; for an anchor claimed twice the later box wins
        group = sid * m + np.concatenate(best_anchor)
        key = np.argsort(group, kind="stable")
        group = group[key]
        last = np.ones(key.size, bool)
        np.not_equal(group[1:], group[:-1], out=last[:-1])
        match[group[last]] = local[key[last]]
        return match.reshape(n, m)

    def _iou_t(self, bt, area, plain):
        """iou_matrix(boxes, anchors).T for boxes ``bt`` (4, k) with areas ``area``, anchors in
        reverse order. Where anchors share an x (y) extent, the extents' overlap is computed
        once per distinct extent and gathered (row copies: cheap in this layout)."""
        ul, ur, xi = self._x_extents
        w = np.minimum(ur, bt[2])
        w -= np.maximum(ul, bt[0])
        np.maximum(w, 0, out=w)  # (as np.clip(x, 0, None); a -0.0 left is only ever compared)
        ut, ub, yi = self._y_extents
        h = np.minimum(ub, bt[3])
        h -= np.maximum(ut, bt[1])
        np.maximum(h, 0, out=h)
        inter = w[xi] if xi is not None else w
        h = h[yi] if yi is not None else h
        inter *= h
        union = np.add(self._area_rev, area, out=h)
        union -= inter
        if plain:
            return np.divide(inter, union, out=inter)
        return np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)


def _extents(lo, hi):
    """The distinct (lo, hi) pairs (bit for bit) as columns (k, 1) and each anchor's index among
    them, or all of them and None where few are shared."""
    pairs = np.stack([lo, hi], 1).view(np.uint64).reshape(-1)
    uniq, idx = np.unique(pairs, return_inverse=True)
    if uniq.size * 2 > lo.size:
        return lo[:, None].copy(), hi[:, None].copy(), None
    u = uniq.view(np.float32).reshape(-1, 2)
    return u[:, :1].copy(), u[:, 1:].copy(), idx.reshape(-1).astype(np.intp)


def _batch_counts(samples, labels):
    """Boxes per sample, or None where the per-sample path must judge (or raise). Where a sample is
    not (N, 4) (an empty one of another shape) the array has one more element, a 0."""
    n = len(samples)
    try:  # (an array of all the shapes at once: ragged numbers of dimensions raise)
        shapes = np.array([b.shape for b in samples], np.int64)
    except ValueError:
        shapes = None
    if shapes is not None and shapes.shape == (n, 2) and (shapes[:, 1] == 4).all():
        counts = shapes[:, 0]
    elif all(b.size == 0 or (b.ndim == 2 and b.shape[1] == 4) for b in samples):
        counts = np.array([b.size // 4 for b in samples] + [0], np.int64)
    else:
        return None
    try:
        lshapes = np.array([x.shape for x in labels], np.int64)
    except ValueError:
        return None
    if lshapes.ndim != 2 or not (lshapes[:, 0] == counts[:n]).all() or not (lshapes[:, 1:] == lshapes[0, 1:]).all():
        return None
    return counts
