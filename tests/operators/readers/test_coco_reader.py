"""fn.readers.coco: a generated COCO data set (pycocotools' structure, its mask utilities for the
run-length masks) read by stoker and by DALI's CPU reader, for every argument that changes
the outputs; sharding, shuffling, stoker's preprocessed-annotations file and errors."""

import json
import os

import numpy as np
import pytest
from record_oracle import (
    check_against_dali,
    check_random_shuffle_covers_shards,
    check_shards_against_dali,
    make_pipe,
    read,
)

from stoker.errors import OperatorError, PipelineBuildError

mask_utils = pytest.importorskip("pycocotools.mask")
N = 11  # images in the annotations (one of them without objects)
CATEGORIES = [90, 5, 7, 1]  # listed out of order: labels are ranks in this list unless avoid_class_remapping


def _polygon(rng, w, h):
    k = int(rng.integers(3, 7))
    return [round(float(v), 2) for xy in zip(rng.uniform(-0.5, w + 0.5, k), rng.uniform(-0.5, h + 0.5, k))
            for v in xy]


def _rle(rng, w, h, as_list):
    mask = np.zeros((h, w), np.uint8)
    y0, x0 = int(rng.integers(0, h)), int(rng.integers(0, w))
    mask[y0:y0 + int(rng.integers(1, h)), x0:x0 + int(rng.integers(1, w))] = 1
    if as_list:  # uncompressed counts, as COCO writes some crowd masks
        flat = mask.ravel(order="F")
        change = np.flatnonzero(np.diff(flat)) + 1
        bounds = np.concatenate([[0], change, [flat.size]])
        counts = np.diff(bounds).tolist()
        return {"size": [h, w], "counts": ([0] + counts) if flat[0] else counts}
    rle = mask_utils.encode(np.asfortranarray(mask))
    return {"size": rle["size"], "counts": rle["counts"].decode()}


def write_coco(root, seed=5):
    """Images with ids out of order, boxes of every size (some under the default 0.1 threshold),
    crowd objects with run-length masks (compressed and as lists), polygons overlapping each other
    and the image's last pixel, and one image without objects."""
    rng = np.random.default_rng(seed)
    os.makedirs(os.path.join(root, "images"), exist_ok=True)
    images, annotations = [], []
    ids = rng.permutation(np.arange(100, 100 + 3 * N, 3)).tolist()
    for k, image_id in enumerate(ids):
        w, h = int(rng.integers(5, 14)), int(rng.integers(4, 12))
        name = f"images/{k:03d}.jpg"
        with open(os.path.join(root, name), "wb") as f:
            f.write(bytes([k, 0xEE]) + bytes(range(k)))
        images.append({"id": image_id, "file_name": name, "width": w, "height": h, "license": 1})
        count = 0 if k == 3 else int(rng.integers(1, 5))
        for j in range(count):
            crowd = j == 1 and k % 2 == 0
            box = [round(float(rng.uniform(0, w / 2)), 2), round(float(rng.uniform(0, h / 2)), 2),
                   [0.05, 1.5, 3.0, float(w) / 2][int(rng.integers(0, 4))], round(float(rng.uniform(0.5, h)), 2)]
            if crowd:
                segm = _rle(rng, w, h, as_list=k % 4 == 0)
            elif j == 0 and k % 3 == 0:  # covers the whole image, its last pixel included
                segm = [[0, 0, w, 0, w, h, 0, h], _polygon(rng, w, h)]
            else:
                segm = [_polygon(rng, w, h) for _ in range(int(rng.integers(1, 3)))]
            annotations.append({"id": len(annotations) + 1, "image_id": image_id, "iscrowd": int(crowd),
                                "category_id": CATEGORIES[int(rng.integers(0, len(CATEGORIES)))],
                                "bbox": box, "area": box[2] * box[3], "segmentation": segm})
    rng.shuffle(annotations)
    doc = {"info": {}, "images": images, "annotations": annotations,
           "categories": [{"id": c, "name": f"c{c}", "supercategory": "x"} for c in CATEGORIES]}
    path = os.path.join(root, "instances.json")
    with open(path, "w") as f:
        json.dump(doc, f)
    return path


@pytest.fixture
def coco(tmp_path):
    root = str(tmp_path / "coco")
    return dict(file_root=root, annotations_file=write_coco(root))


@pytest.mark.oracle
@pytest.mark.parametrize("bs", [1, 4])
def test_default_outputs_and_epochs_match_dali(coco, bs):
    batches = check_against_dali("readers.coco", bs, 3 * -(-N // bs) + 1, **coco)
    _, (image, boxes, labels) = batches[0][0]
    assert image.dtype == np.uint8 and boxes.dtype == np.float32 and labels.dtype == np.int32


VARIANTS = {
    "ltrb": dict(ltrb=True),
    "ratio": dict(ratio=True),
    "ltrb_ratio_ids": dict(ltrb=True, ratio=True, image_ids=True),
    "skip_empty": dict(skip_empty=True),
    "size_threshold": dict(size_threshold=2.0),
    "no_crowd": dict(include_iscrowd=False),
    "class_ids": dict(avoid_class_remapping=True),
    "polygon_masks": dict(polygon_masks=True),
    "polygon_masks_ratio": dict(polygon_masks=True, ratio=True, ltrb=True),
    "legacy_masks": dict(masks=True, skip_empty=True),
    "pixelwise_masks": dict(pixelwise_masks=True, image_ids=True),
    "pixelwise_no_crowd": dict(pixelwise_masks=True, include_iscrowd=False, size_threshold=1.0),
    "images": dict(images=["images/004.jpg", "images/000.jpg", "images/004.jpg", "images/003.jpg"]),
}


@pytest.mark.oracle
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_arguments_match_dali(coco, variant):
    args = VARIANTS[variant]
    n = len(args.get("images", [])) or N
    batches = check_against_dali("readers.coco", 3, -(-n // 3) + 1, **coco, **args)
    if variant.startswith("pixelwise"):
        masks = [outs[3] for b in batches for _, outs in b]
        assert all(m.dtype == np.int32 and m.ndim == 3 and m.shape[2] == 1 for m in masks)
        assert sum(len(np.unique(m)) > 2 for m in masks) >= 2  # objects of several labels, overlapping


@pytest.mark.oracle
def test_overlapping_labels_in_pixelwise_masks_match_dali(tmp_path):
    """DALI paints labels in increasing order, the later winning, except over the image's last
    run, where the earlier stays; a smallest label without any shape leaves the mask empty."""
    root = tmp_path / "overlap"
    (root / "i").mkdir(parents=True)
    w, h = 9, 7
    full = [[0, 0, w, 0, w, h, 0, h]]
    corner = [[4, 3, w, 3, w, h, 4, h]]
    middle = [[2, 1, 6, 1, 6, 5, 2, 5]]
    cases = [[(1, full), (3, corner)], [(1, corner), (3, full), (2, middle)], [(3, full), (1, [])],
             [(1, middle), (2, []), (3, corner)]]
    images, anns = [], []
    for k, objects in enumerate(cases):
        (root / "i" / f"{k}.jpg").write_bytes(bytes([k]))
        images.append({"id": k + 1, "file_name": f"i/{k}.jpg", "width": w, "height": h})
        for cat, segm in objects:
            anns.append({"id": len(anns) + 1, "image_id": k + 1, "category_id": cat, "iscrowd": 0,
                         "bbox": [0, 0, 2, 2], "segmentation": segm})
    doc = {"images": images, "annotations": anns, "categories": [{"id": c} for c in (1, 2, 3)]}
    (root / "a.json").write_text(json.dumps(doc))
    batches = check_against_dali("readers.coco", len(cases), 1, file_root=str(root),
                                 annotations_file=str(root / "a.json"), pixelwise_masks=True)
    masks = [outs[3][:, :, 0] for _, outs in batches[0]]
    assert masks[0][h - 1, w - 1] == 1 and masks[0][3, 4] == 3  # the last run keeps the earlier label
    assert not masks[2].any()


@pytest.mark.oracle
def test_deprecated_aliases_match_dali(coco):
    check_against_dali("readers.coco", 4, 2, save_img_ids=True, **coco)


@pytest.mark.oracle
def test_shards_match_dali(coco):
    check_shards_against_dali("readers.coco", N, **coco)


def test_random_shuffle_covers_each_shard_once(coco):
    check_random_shuffle_covers_shards("readers.coco", N, **coco)


def test_outputs_follow_the_annotations(coco):
    with open(coco["annotations_file"]) as f:
        doc = json.load(f)
    pipe = make_pipe("stoker", "readers.coco", N, image_ids=True, avoid_class_remapping=True, **coco)
    (batch,) = read(pipe, 1)
    ids = [outs[3][0] for _, outs in batch]
    assert ids == sorted(im["id"] for im in doc["images"])
    for source, (image, boxes, labels, image_id) in batch:
        anns = [a for a in doc["annotations"] if a["image_id"] == image_id[0] and min(a["bbox"][2:]) >= 0.1]
        assert len(anns) == len(boxes) == len(labels)
        assert sorted(labels.tolist()) == sorted(a["category_id"] for a in anns)
        with open(os.path.join(coco["file_root"], source), "rb") as f:
            assert bytes(image) == f.read()
    pipe.close()


@pytest.mark.parametrize("masks", [{}, dict(polygon_masks=True, image_ids=True), dict(pixelwise_masks=True)])
def test_preprocessed_annotations_round_trip(coco, tmp_path, masks):
    saved = str(tmp_path / "parsed")
    direct = read(make_pipe("stoker", "readers.coco", 4, save_preprocessed_annotations=True,
                            save_preprocessed_annotations_dir=saved, ratio=True, skip_empty=True, **coco, **masks), 3)
    again = read(make_pipe("stoker", "readers.coco", 4, file_root=coco["file_root"], preprocessed_annotations=saved,
                           **masks), 3)
    for x, y in zip(direct, again):
        assert [s for s, _ in x] == [s for s, _ in y]
        for (_, xs), (_, ys) in zip(x, y):
            for a, b in zip(xs, ys):
                np.testing.assert_array_equal(a, b)


def test_preprocessed_annotations_without_masks_are_refused(coco, tmp_path):
    saved = str(tmp_path / "parsed")
    make_pipe("stoker", "readers.coco", 2, save_preprocessed_annotations=True,
              save_preprocessed_annotations_dir=saved, **coco)
    with pytest.raises(PipelineBuildError, match="polygon_masks"):
        make_pipe("stoker", "readers.coco", 2, file_root=coco["file_root"], preprocessed_annotations=saved,
                  polygon_masks=True)


def test_unreadable_image_is_skipped_and_reported(coco):
    bad = os.path.join(coco["file_root"], "images/001.jpg")
    pipe = make_pipe("stoker", "readers.coco", N - 1, on_error="skip", **coco)
    os.remove(bad)
    (batch,) = read(pipe, 1)
    assert "images/001.jpg" not in [s for s, _ in batch] and len(batch) == N - 1
    assert {r["source"] for r in pipe.error_report()} == {"images/001.jpg"}
    pipe.close()


def test_unreadable_image_raises_naming_its_path(coco):
    bad = os.path.join(coco["file_root"], "images/002.jpg")
    pipe = make_pipe("stoker", "readers.coco", N, **coco)
    os.remove(bad)
    with pytest.raises(OperatorError) as e:
        pipe.run()
    assert bad in str(e.value) and "R" in str(e.value)
    pipe.close()


def test_malformed_annotation_names_the_file_and_annotation(coco):
    with open(coco["annotations_file"]) as f:
        doc = json.load(f)
    doc["annotations"][2]["bbox"] = [1, 2, 3]
    with open(coco["annotations_file"], "w") as f:
        json.dump(doc, f)
    with pytest.raises(PipelineBuildError) as e:
        make_pipe("stoker", "readers.coco", 2, **coco)
    msg = str(e.value)
    assert "argument 'annotations_file'" in msg and f"id {doc['annotations'][2]['id']}" in msg and "bbox" in msg


@pytest.mark.parametrize("args,arg", [
    (dict(polygon_masks=True, pixelwise_masks=True), "pixelwise_masks"),
    (dict(preprocessed_annotations="x", ltrb=True), "ltrb"),
    (dict(save_preprocessed_annotations=True), "save_preprocessed_annotations"),
    (dict(save_img_ids=True, image_ids=True), "save_img_ids"),
])
def test_argument_errors(coco, args, arg):
    if "preprocessed_annotations" in args:
        coco = dict(file_root=coco["file_root"])
    with pytest.raises(PipelineBuildError) as e:
        make_pipe("stoker", "readers.coco", 2, **coco, **args)
    assert "readers.coco 'R'" in str(e.value) and f"argument '{arg}'" in str(e.value)


def test_missing_annotations_file_is_required(coco):
    with pytest.raises(PipelineBuildError, match="argument 'annotations_file'"):
        make_pipe("stoker", "readers.coco", 2, file_root=coco["file_root"])


def test_pixelwise_masks_without_pycocotools_name_the_package(coco, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "pycocotools", None)
    monkeypatch.setitem(sys.modules, "pycocotools._mask", None)
    with pytest.raises(ImportError, match="pip install pycocotools"):
        make_pipe("stoker", "readers.coco", 2, pixelwise_masks=True, **coco)
    make_pipe("stoker", "readers.coco", 2, polygon_masks=True, **coco).close()  # polygons need no package


def test_legacy_ops_name(coco):
    from stoker import ops

    assert ops.COCOReader is not None and ops.MXNetReader is not None
