"""``box_encoder``: SSD-style matching of ground-truth boxes to a fixed set of anchors.

``run_cpu`` matches and encodes the whole batch in a few NumPy steps (the boxes of every sample in
one array, padded per sample where a per-sample maximum is needed), with run_sample's float32
arithmetic element for element, so the outputs are the same to the bit; anything unusual or
invalid goes through the per-sample path, which raises naming the sample.
"""

from __future__ import annotations

import numpy as np

from stoker.errors import arg_error
from stoker.operators.base import Operator
from stoker.operators.schema import Arg, Schema, register
from stoker.tensors import batch_of_rows

_OP = "box_encoder"


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
        samples, labels = inputs[0].samples(), inputs[1].samples()
        n, m = len(samples), self.anchors.shape[0]
        if len(labels) != n or labels[0].ndim == 0:
            return None
        if not all(b.size == 0 or (b.ndim == 2 and b.shape[1] == 4) for b in samples):
            return None
        counts = np.array([b.size // 4 for b in samples], np.int64)
        if any(lab.shape[0] != c or lab.shape[1:] != labels[0].shape[1:] for lab, c in zip(labels, counts.tolist())):
            return None
        boxes = np.concatenate([b.reshape(-1, 4) for b in samples]).astype(np.float32, copy=False)
        if not np.all(np.isfinite(boxes)):
            return None
        flat_labels = np.concatenate(labels)
        starts = np.cumsum(counts) - counts
        sid = np.repeat(np.arange(n), counts)
        local = np.arange(sid.size) - starts[sid]
        match = np.full((n, m), -1, np.int64)
        if boxes.shape[0]:
            iou = np.empty((boxes.shape[0], m), np.float32)  # in [0, 1]
            for c in range(0, boxes.shape[0], 128):  # (pieces that stay in cache: ~1.7x faster)
                iou[c:c + 128] = iou_matrix(boxes[c:c + 128], self.anchors)
            most = int(counts.max())
            padded = np.full((n, most, m), -1.0, np.float32)  # padding below any IoU
            padded.reshape(n * most, m)[sid * most + local] = iou
            top = padded.max(1)
            best_box = np.zeros((n, m), np.int64)  # the last maximum per anchor, as DALI
            for j in range(most):
                best_box[padded[:, j] == top] = j
            good = (top > np.float32(self.args["criteria"])) & (counts > 0)[:, None]
            match[good] = best_box[good]
            # each box claims its best anchor; for an anchor claimed twice the later box wins
            best_anchor = m - 1 - np.argmax(iou[:, ::-1], 1)
            claim = np.full((n, m), -1, np.int64)
            np.maximum.at(claim, (sid, best_anchor), local)
            match = np.where(claim >= 0, claim, match)
        matched = match >= 0
        src = (starts[:, None] + match)[matched]  # the matched boxes, in the flat arrays
        out_labels = np.zeros((n, m, *labels[0].shape[1:]), flat_labels.dtype)
        out_labels[matched] = flat_labels[src]
        if not self.args["offset"]:
            out = np.broadcast_to(_center_form(self.anchors), (n, m, 4)).copy()
            out[matched] = _center_form(boxes[src])
        else:
            out = np.zeros((n, m, 4), np.float32)
            b = _center_form(boxes[src]) * np.float32(self.args["scale"])
            a = self.anchors_center[np.nonzero(matched)[1]]
            xy = ((b[:, :2] - a[:, :2]) / a[:, 2:] - self.means[:2]) / self.stds[:2]
            log_wh = np.log((b[:, 2:] / a[:, 2:]).astype(np.float64)).astype(np.float32)  # as run_sample
            wh = (log_wh - self.means[2:]) / self.stds[2:]
            out[matched] = np.concatenate([xy, wh], 1)
        results = [batch_of_rows(out), batch_of_rows(out_labels)]
        if batch.sources:
            for r in results:
                r._source_info = [batch.source(i) for i in range(n)]
        return results
