"""The annotations of ``readers.coco``: a COCO JSON file parsed into flat per-sample arrays,
and stoker's own file of them (``save_preprocessed_annotations`` / ``preprocessed_annotations``).

Parsing follows DALI's reader, so that the same file gives the same samples:

* samples are the images sorted by id, or the ``images`` list in its order (copies for
  repeated names; names not in the file are left out); with ``skip_empty`` images
  without objects are left out;
* an image's objects are its annotations in file order, less the crowd ones when
  ``include_iscrowd`` is off and those whose box width or height is below
  ``size_threshold``;
* labels are the categories' ranks in the file's ``categories`` list, from 1 (an id not
  listed gives 0), or the ids themselves with ``avoid_class_remapping``;
* boxes and polygon vertices are float32; ``ltrb`` adds x/y to width/height, then
  ``ratio`` divides by the image's width and height, all in float32 as DALI does.

A polygon is (object index in the sample, first vertex, end vertex) over the sample's
vertices. A run-length mask (a "segmentation" object) is kept only when ``keep_rle``
(pixel-wise masks), as pycocotools' compressed string with its (height, width).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import numpy as np

from stoker.operators.readers import storage
from stoker.operators.readers._listing import ListingError

DUMP_NAME = "stoker_coco_annotations.npz"  # the one file in a save_preprocessed_annotations_dir


@dataclass
class CocoIndex:
    """Per-sample annotations: sample ``i`` has objects ``obj[i]:obj[i+1]`` of ``boxes``/``labels``,
    polygons ``poly[i]:poly[i+1]``, vertices ``vert[i]:vert[i+1]`` and masks ``rle[i]:rle[i+1]``."""

    filenames: list
    image_ids: np.ndarray
    heights: np.ndarray
    widths: np.ndarray
    obj: np.ndarray
    boxes: np.ndarray
    labels: np.ndarray
    has_segmentation: bool = False
    has_rle: bool = False
    poly: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int64))
    polygons: np.ndarray = field(default_factory=lambda: np.zeros((0, 3), np.int32))
    vert: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int64))
    vertices: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.float32))
    rle: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int64))
    rle_object: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    rle_size: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.int32))
    rle_counts: list = field(default_factory=list)  # compressed counts (bytes), one per mask
    missing_images: int = 0  # names of the ``images`` argument that the file does not list (left out)

    def __len__(self) -> int:
        return len(self.filenames)


def _int(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
        raise ValueError(f"{what} must be an integer, got {value!r}")
    return int(value)


def _rle_of(segm: dict, where: str) -> tuple[int, int, bytes]:
    """(height, width, compressed counts) of a run-length "segmentation" object."""
    size = segm.get("size")
    if not isinstance(size, (list, tuple)) or len(size) < 2:
        raise ValueError(f"{where}: a run-length mask needs 'size': [height, width]")
    h, w = _int(size[0], f"{where}: mask height"), _int(size[1], f"{where}: mask width")
    if h <= 0 or w <= 0:
        raise ValueError(f"{where}: mask size {h}x{w} is empty")
    counts = segm.get("counts")
    if isinstance(counts, str) and counts:
        return h, w, counts.encode("ascii")
    if isinstance(counts, list) and counts:
        from stoker.operators.readers._coco_masks import compress_counts

        return h, w, compress_counts(h, w, counts)
    raise ValueError(f"{where}: a run-length mask needs non-empty 'counts'")


def parse_json(path: str, *, images: list | None, ltrb: bool, ratio: bool, skip_empty: bool, size_threshold: float,
               include_iscrowd: bool, remap_classes: bool, keep_segmentation: bool, keep_rle: bool) -> CocoIndex:
    """Parse a COCO annotations file (see the module's docstring). Raises ListingError naming
    ``annotations_file`` and the annotation at fault."""
    try:
        doc = json.loads(storage.read_bytes(path))
    except OSError as e:
        raise ListingError("annotations_file", str(e)) from None
    except ValueError as e:
        raise ListingError("annotations_file", f"{path!r} is not valid JSON: {e}") from None
    if not isinstance(doc, dict):
        raise ListingError("annotations_file", f"{path!r}: the top level is not an object")
    try:
        return _build(doc, images, ltrb, ratio, skip_empty, np.float32(size_threshold), include_iscrowd, remap_classes,
                      keep_segmentation, keep_rle)
    except (ValueError, TypeError, KeyError) as e:
        raise ListingError("annotations_file", f"{path!r}: {e}") from None


def _build(doc, images, ltrb, ratio, skip_empty, threshold, include_iscrowd, remap, keep_segm, keep_rle) -> CocoIndex:
    infos = [im for im in doc.get("images") or [] if isinstance(im, dict)]
    by_name: dict = {}
    for im in infos:
        by_name[im.get("file_name")] = im  # a repeated name: the last entry wins, as in DALI
    rank: dict = {}
    for k, cat in enumerate(c for c in doc.get("categories") or [] if isinstance(c, dict)):
        if "id" not in cat:
            raise ValueError(f"category {k} has no 'id'")
        rank.setdefault(_int(cat["id"], f"category {k} id"), k + 1)
    if images is None:
        order = sorted(range(len(infos)), key=lambda k: _int(infos[k].get("id"), f"image {k} id"))
        selected = [infos[k].get("file_name") for k in order]
    else:
        selected = list(images)
    wanted_ids = {_int(by_name[n]["id"], f"image {n!r} id") for n in selected if n in by_name}
    objects: dict = {i: [] for i in wanted_ids}
    for k, ann in enumerate(doc.get("annotations") or []):
        if isinstance(ann, dict) and _int(ann.get("image_id", -1), f"annotation {k} image_id") in objects:
            obj = _object(ann, k, threshold, include_iscrowd, keep_segm, keep_rle)
            if obj is not None:
                objects[_int(ann["image_id"], "")].append(obj)

    names, ids, hs, ws, obj_ends, boxes, labels = [], [], [], [], [0], [], []
    poly_ends, polys, vert_ends, verts, rle_ends, rle_obj, rle_size, rle_counts = [0], [], [0], [], [0], [], [], []
    for name in selected:
        info = by_name.get(name)
        if info is None:
            continue
        image_id = _int(info.get("id"), f"image {name!r} id")
        objs = objects[image_id]
        if skip_empty and not objs:
            continue
        h = _int(info.get("height", 0), f"image {name!r} height")
        w = _int(info.get("width", 0), f"image {name!r} width")
        scale = np.array([w, h, w, h], np.float32)
        n_verts = 0
        for j, (cat, box, polygons, rle) in enumerate(objs):
            labels.append(rank.get(cat, 0) if remap else cat)
            if ltrb:
                box = box + np.array([0, 0, box[0], box[1]], np.float32)
            boxes.append(box / scale if ratio else box)
            for coords in polygons:
                polys.append((j, n_verts, n_verts + len(coords) // 2))
                xy = coords.reshape(-1, 2)
                verts.append(xy / np.array([w, h], np.float32) if ratio else xy)
                n_verts += len(xy)
            if rle is not None:
                rle_obj.append(j)
                rle_size.append(rle[:2])
                rle_counts.append(rle[2])
        names.append(name)
        ids.append(image_id)
        hs.append(h)
        ws.append(w)
        obj_ends.append(len(boxes))
        poly_ends.append(len(polys))
        vert_ends.append(vert_ends[-1] + n_verts)
        rle_ends.append(len(rle_obj))
    return CocoIndex(
        filenames=names, image_ids=np.asarray(ids, np.int32), heights=np.asarray(hs, np.int32),
        widths=np.asarray(ws, np.int32), obj=np.asarray(obj_ends, np.int64),
        boxes=np.asarray(boxes, np.float32).reshape(-1, 4), labels=np.asarray(labels, np.int32),
        has_segmentation=keep_segm, has_rle=keep_rle, poly=np.asarray(poly_ends, np.int64),
        polygons=np.asarray(polys, np.int32).reshape(-1, 3), vert=np.asarray(vert_ends, np.int64),
        vertices=(np.concatenate(verts) if verts else np.zeros((0, 2))).astype(np.float32),
        rle=np.asarray(rle_ends, np.int64), rle_object=np.asarray(rle_obj, np.int32),
        rle_size=np.asarray(rle_size, np.int32).reshape(-1, 2), rle_counts=rle_counts,
        missing_images=sum(name not in by_name for name in selected))


def _object(ann: dict, k: int, threshold, include_iscrowd: bool, keep_segm: bool, keep_rle: bool):
    """(category, box, polygons, rle) of annotation ``k``, or None when it is filtered out."""
    where = f"annotation {k} (id {ann.get('id')})"
    if not include_iscrowd and _int(ann.get("iscrowd", 0), f"{where} iscrowd") != 0:
        return None
    bbox = ann.get("bbox")
    if not isinstance(bbox, list) or len(bbox) != 4:
        raise ValueError(f"{where}: 'bbox' must be a list of 4 numbers, got {bbox!r}")
    box = np.asarray(bbox, dtype=np.float32)
    if not (box[2] >= threshold and box[3] >= threshold):
        return None
    category = _int(ann.get("category_id"), f"{where} category_id")
    polygons, rle = [], None
    segm = ann.get("segmentation") if keep_segm else None
    if isinstance(segm, dict) and keep_rle:
        rle = _rle_of(segm, where)
    elif isinstance(segm, list):
        for p in segm:
            coords = np.asarray(p, dtype=np.float32).reshape(-1)
            if coords.size % 2:
                raise ValueError(f"{where}: a polygon has an odd number ({coords.size}) of coordinates")
            polygons.append(coords)
    return category, box, polygons, rle


# --- stoker's file of parsed annotations ---------------------------------------------------------

_ARRAYS = ("image_ids", "heights", "widths", "obj", "boxes", "labels", "poly", "polygons", "vert", "vertices",
           "rle", "rle_object", "rle_size")


def save(index: CocoIndex, folder: str) -> str:
    """Write ``index`` as one ``.npz`` file in ``folder`` (created if needed); returns its path."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, DUMP_NAME)
    counts = index.rle_counts
    arrays = {name: getattr(index, name) for name in _ARRAYS}
    arrays["filenames"] = np.asarray(index.filenames, dtype=np.str_)
    arrays["flags"] = np.array([index.has_segmentation, index.has_rle])
    arrays["rle_counts_ends"] = np.cumsum([0] + [len(c) for c in counts]).astype(np.int64)
    arrays["rle_counts"] = np.frombuffer(b"".join(counts), dtype=np.uint8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        np.savez(f, **arrays)
    os.replace(tmp, path)  # a reader never sees half a file
    return path


def load(folder: str) -> CocoIndex:
    """Read the file :func:`save` wrote in ``folder``."""
    path = storage.join(folder, DUMP_NAME)
    import io

    try:
        with np.load(io.BytesIO(storage.read_bytes(path)), allow_pickle=False) as z:
            arrays = {name: z[name] for name in (*_ARRAYS, "filenames", "flags", "rle_counts_ends", "rle_counts")}
    except OSError as e:
        raise ListingError("preprocessed_annotations", f"{e} (it is written by save_preprocessed_annotations)") \
            from None
    except (ValueError, KeyError) as e:
        raise ListingError("preprocessed_annotations", f"{path!r} is not a stoker COCO annotations file: {e}") \
            from None
    ends, blob = arrays.pop("rle_counts_ends"), arrays.pop("rle_counts").tobytes()
    has_segm, has_rle = (bool(x) for x in arrays.pop("flags"))
    return CocoIndex(filenames=arrays.pop("filenames").tolist(), has_segmentation=has_segm, has_rle=has_rle,
                     rle_counts=[blob[ends[k]:ends[k + 1]] for k in range(len(ends) - 1)], **arrays)
