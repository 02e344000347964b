"""``ssd_random_crop``: DALI's legacy SSD crop (image, boxes and labels in one operator).

Per sample, one of seven outcomes is drawn uniformly: keep the whole image, require every box's IoU
with the window to be at least 0.1, 0.3, 0.5, 0.7 or 0.9, or no IoU constraint at all. For a
constrained outcome, ``num_attempts`` windows are drawn (relative width and height in [0.3, 1] with
a width/height ratio in [0.5, 2], placed uniformly inside the image); the first one that meets the
IoU constraint and contains the centre of at least one box wins. When none does, another outcome
is drawn. Boxes whose centres lie outside the window are dropped with their labels; the others are
clipped to the window and expressed in its coordinates. The image is cut at the nearest whole pixels.

The modern replacement is ``random_bbox_crop`` followed by ``slice``; the box mapping is shared.
"""

from __future__ import annotations

import numpy as np

from stoker.errors import arg_error
from stoker.operators.base import Operator
from stoker.operators.detection.random_bbox_crop import RandomBBoxCrop
from stoker.operators.schema import Arg, Schema, register

_OP = "ssd_random_crop"
# Minimum IoU per constrained outcome; None is "keep the whole image", -inf is "no constraint".
_OPTIONS = (None, 0.1, 0.3, 0.5, 0.7, 0.9, -np.inf)
_SCALE = (0.3, 1.0)
_ASPECT = (0.5, 2.0)
# The whole-image outcome has probability 1/7 per round, so this is never reached in practice;
# it only bounds the loop.
_SAFETY_ROUNDS = 10_000
_LTRB = (np.array([0, 1]), np.array([2, 3]), np.array([False, False]))


@register
class SSDRandomCrop(Operator):
    """SSD-style random crop of an image together with its boxes and labels."""

    schema = Schema(
        name="ssd_random_crop",
        legacy_name="SSDRandomCrop",
        doc="Crops an HWC image to a random window chosen as in the SSD paper (minimum IoU with every box "
            "drawn from {0.1, 0.3, 0.5, 0.7, 0.9}, no constraint, or no crop) and maps the boxes into it. "
            "Inputs: image (H, W, C), boxes (N, 4) relative [l, t, r, b], labels (N,). Outputs: cropped "
            "image, the boxes whose centres are inside the window (clipped, window-relative), their labels.",
        args=[Arg("num_attempts", "int", 1, doc="windows tried per drawn outcome before another is drawn")],
        inputs=(3, 3),
        num_outputs=3,
        random=True,
    )

    def setup(self):
        if self.args["num_attempts"] < 1:
            raise arg_error(_OP, "num_attempts", f"must be positive, got {self.args['num_attempts']}")

    def output_layouts(self, input_layouts):
        return [input_layouts[0] if input_layouts else "HWC", "", ""]

    def run_sample(self, inputs, args, ctx):
        image, boxes, labels = (np.asarray(x) for x in inputs)
        if image.ndim != 3:
            raise self.error(f"{_OP}: expected an HWC image (3 dimensions), got shape {image.shape}")
        if boxes.ndim == 1 and boxes.size == 0:
            boxes = boxes.reshape(0, 4)
        if boxes.ndim != 2 or boxes.shape[1] != 4:
            raise self.error(f"{_OP}: expected boxes of shape (N, 4) as [l, t, r, b], got {boxes.shape}")
        if labels.ndim == 0 or labels.shape[0] != boxes.shape[0]:
            raise self.error(f"{_OP}: {boxes.shape[0]} boxes but labels of shape {labels.shape}")
        lo = boxes[:, :2].astype(np.float64)
        hi = boxes[:, 2:].astype(np.float64)
        if np.any(lo < 0) or np.any(hi > 1) or np.any(hi < lo):
            raise self.error(f"{_OP}: boxes must be relative [l, t, r, b] within [0, 1] with l <= r, t <= b")
        window = self._search(ctx.rng, lo, hi)
        if window is None:
            return image, boxes.astype(np.float32), labels
        anchor, shape, keep = window
        out_boxes = RandomBBoxCrop._map_boxes(lo[keep], hi[keep], anchor, shape, 4, *_LTRB)
        h, w = image.shape[:2]
        # Both edges go to the nearest whole pixel, as DALI does (at least one pixel so tiny images stay valid).
        size = np.array([w, h], np.float64)
        p0 = np.floor(anchor * size + 0.5).astype(np.int64)
        p1 = np.minimum(np.maximum(np.floor((anchor + shape) * size + 0.5).astype(np.int64), p0 + 1), size)
        (x0, y0), (x1, y1) = p0.tolist(), p1.astype(np.int64).tolist()
        return np.ascontiguousarray(image[y0:y1, x0:x1]), out_boxes, labels[keep]

    def _search(self, rng, lo, hi):
        """(anchor, shape, kept-box mask) of the chosen window, or None for the whole image."""
        k = self.args["num_attempts"]
        for _ in range(_SAFETY_ROUNDS):
            min_iou = _OPTIONS[int(rng.integers(len(_OPTIONS)))]
            if min_iou is None:
                return None
            shape = rng.uniform(_SCALE[0], _SCALE[1], (k, 2))
            anchor = rng.uniform(0.0, 1.0, (k, 2)) * (1.0 - shape)
            ratio = shape[:, 0] / shape[:, 1]
            ok = (ratio >= _ASPECT[0]) & (ratio <= _ASPECT[1])
            a0, a1 = anchor[:, None, :], (anchor + shape)[:, None, :]
            inter = np.prod(np.clip(np.minimum(hi[None], a1) - np.maximum(lo[None], a0), 0, None), -1)
            union = np.prod(hi - lo, -1)[None] + np.prod(shape, -1)[:, None] - inter
            iou = np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)
            ok &= np.all(iou >= min_iou, 1)
            # A box stays when its centre is strictly inside the window.
            c = ((lo + hi) * 0.5)[None]
            kept = np.all((c > a0) & (c < a1), -1)
            ok &= kept.any(1)
            hit = np.flatnonzero(ok)
            if hit.size:
                j = hit[0]
                return anchor[j], shape[j], kept[j]
        return None
