"""Pixel-wise masks of ``readers.coco`` (``pixelwise_masks=True``), rasterized with pycocotools.

``pycocotools`` (``pip install pycocotools``) is an optional dependency, needed only here.

A sample's mask is an (H, W, 1) int32 image of labels, 0 where no object is. It is
built the way DALI builds it, so that the two agree pixel for pixel:

* each label's shape is the union of the polygons of its objects (rasterized as COCO
  does); a label without polygons takes the run-length mask of its *last* object that
  has one; a label with neither has no shape;
* labels are painted in increasing order. Where a label falls on pixels an earlier one
  already holds, the later one wins, except in the image's last run: the stretch after
  the last place where either mask (in COCO's column-major pixel order) changes, where
  the earlier one stays. If the smallest label has no shape, the mask is all 0.
"""

from __future__ import annotations

import numpy as np


def require_pycocotools(who: str):
    """pycocotools' ``_mask`` module, or an ImportError naming the reader and the package."""
    try:
        from pycocotools import _mask
    except ImportError:
        raise ImportError(f"{who}: pixelwise_masks=True rasterizes masks with the 'pycocotools' package, which "
                          "is not installed: pip install pycocotools") from None
    return _mask


def compress_counts(h: int, w: int, counts: list) -> bytes:
    """pycocotools' compressed string of an uncompressed run-length mask (a list of counts)."""
    mask_api = require_pycocotools("readers.coco")
    counts = [int(c) for c in counts]
    if sum(counts) != h * w or min(counts) < 0:
        raise ValueError(f"run-length counts sum to {sum(counts)}, not to the mask's {h}x{w} = {h * w} pixels")
    return mask_api.frUncompressedRLE([{"size": [h, w], "counts": counts}], h, w)[0]["counts"]


def _counts(compressed: bytes) -> list[int]:
    """The run lengths of pycocotools' compressed string: 5-bit groups offset by 48, 0x20 marks
    a continued group, 0x10 in the last group a negative value; from the third run on each
    value is stored as its difference to the run two before."""
    counts: list[int] = []
    p, end = 0, len(compressed)
    while p < end:
        x = k = 0
        more = True
        while more:
            if p >= end:
                raise ValueError("a compressed run-length mask ends in the middle of a number")
            c = compressed[p] - 48
            x |= (c & 0x1F) << (5 * k)
            more = bool(c & 0x20)
            p += 1
            k += 1
            if not more and c & 0x10:
                x |= -1 << (5 * k)
        if len(counts) > 2:
            x += counts[-2]
        counts.append(x)
    return counts


def _shape(mask_api, rles: list, size: int) -> tuple[np.ndarray, int]:
    """The union of ``rles`` as a flat bool array in column-major order, and where its last run starts."""
    merged = mask_api.merge(rles, 0) if len(rles) > 1 else rles[0]
    counts = _counts(merged["counts"])
    if sum(counts) != size or min(counts, default=0) < 0:
        raise ValueError(f"a run-length mask covers {sum(counts)} pixels, not {size}")
    flat = np.repeat(np.arange(len(counts)) % 2 == 1, counts)
    return flat, size - counts[-1] if counts else 0


def pixelwise_mask(h: int, w: int, labels: np.ndarray, polygons: np.ndarray, vertices: np.ndarray,
                   rle_object: np.ndarray, rle_size: np.ndarray, rle_counts: list, where: str) -> np.ndarray:
    """The (h, w, 1) int32 label mask of one sample (see the module's docstring).

    ``polygons`` rows are (object, first vertex, end vertex) into ``vertices`` (x, y);
    ``rle_object[k]`` is the object of the run-length mask ``rle_counts[k]`` of size ``rle_size[k]``.
    """
    out = np.zeros(h * w, np.int32)
    if labels.size == 0 or h * w == 0:
        return out.reshape(h, w, 1)
    mask_api = require_pycocotools("readers.coco")
    shapes: dict = {}  # label -> list of pycocotools RLEs
    from_polygons: set = set()
    for obj, start, end in polygons:
        if end > start:
            xy = vertices[start:end].astype(np.float64).reshape(-1)
            rle = mask_api.frPoly([xy], h, w)[0]
            label = int(labels[obj])
            if label not in from_polygons:
                from_polygons.add(label)
                shapes[label] = []
            shapes[label].append(rle)
    for obj, (mh, mw), counts in zip(rle_object, rle_size, rle_counts):
        label = int(labels[obj])
        if label in from_polygons:
            continue
        if (mh, mw) != (h, w):
            raise ValueError(f"{where}: a run-length mask of {mh}x{mw} pixels on an image of {h}x{w}")
        shapes[label] = [{"size": [h, w], "counts": bytes(counts)}]  # the last one wins
    order = sorted(set(labels.tolist()))
    if order[0] not in shapes:
        return out.reshape(h, w, 1)
    first, last = _shape(mask_api, shapes[order[0]], h * w)
    out[first] = order[0]
    index = np.arange(h * w)
    for label in order[1:]:
        if label not in shapes:
            continue
        shape, last_run = _shape(mask_api, shapes[label], h * w)
        last = max(last, last_run)
        out[shape & ((out == 0) | (index < last))] = label
    return out.reshape(w, h).T.reshape(h, w, 1).copy()
