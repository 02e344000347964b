"""The GPU operators and pipelines that issue 16 measures, written once against DALI's API.

Each operator case is ``build(fn, types, x) -> node``: ``x`` is a GPU batch of HWC uint8 images
(decoded, resized to 256), and the case inserts one operator the way a user's augmentation
pipeline would, random arguments included. ``fn`` / ``types`` are stoker's or DALI's modules, so
``benchmarks/gpu_op_table.py`` runs the same code on both, and
``tests/operators/test_gpu_host_cost.py`` checks on a null device that each case's GPU host work
does not grow with the batch.
"""

from __future__ import annotations


def _rotate(fn, types, x):
    return fn.rotate(x, angle=fn.random.uniform(range=(-30.0, 30.0)), fill_value=0, keep_size=True)


def _color_twist(fn, types, x):
    return fn.color_twist(x, brightness=fn.random.uniform(range=(0.8, 1.2)),
                          contrast=fn.random.uniform(range=(0.8, 1.2)),
                          saturation=fn.random.uniform(range=(0.8, 1.2)),
                          hue=fn.random.uniform(range=(-20.0, 20.0)))


def _warp_shear(fn, types, x):
    m = fn.transforms.shear(shear=fn.random.uniform(range=(-0.2, 0.2), shape=(2,)), center=(128.0, 128.0))
    return fn.warp_affine(x, matrix=m, fill_value=0, inverse_map=False)


def _crop_pad(fn, types, x):
    return fn.crop(x, crop=(300, 300), out_of_bounds_policy="pad", fill_values=0,
                   crop_pos_x=fn.random.uniform(range=(0.0, 1.0)), crop_pos_y=fn.random.uniform(range=(0.0, 1.0)))


def _cast_scale(fn, types, x):
    return fn.cast(x, dtype=types.FLOAT) / 255.0


OPS = {
    "rotate": _rotate,
    "color_twist": _color_twist,
    "hsv": lambda fn, types, x: fn.hsv(x, hue=fn.random.uniform(range=(-20.0, 20.0)),
                                       saturation=fn.random.uniform(range=(0.8, 1.2)),
                                       value=fn.random.uniform(range=(0.8, 1.2))),
    "gaussian_blur": lambda fn, types, x: fn.gaussian_blur(x, sigma=fn.random.uniform(range=(0.5, 1.5)), window_size=5),
    "warp_affine": lambda fn, types, x: fn.warp_affine(x, matrix=[1.0, 0.1, -10.0, 0.05, 1.0, 5.0], fill_value=0),
    "warp_affine_shear": _warp_shear,
    "paste": lambda fn, types, x: fn.paste(x, ratio=1.25, fill_value=(0, 0, 0),
                                           paste_x=fn.random.uniform(range=(0.0, 1.0)),
                                           paste_y=fn.random.uniform(range=(0.0, 1.0))),
    "crop_pad": _crop_pad,
    "flip": lambda fn, types, x: fn.flip(x, horizontal=fn.random.coin_flip()),
    "brightness_contrast": lambda fn, types, x: fn.brightness_contrast(
        x, brightness=fn.random.uniform(range=(0.8, 1.2)), contrast=fn.random.uniform(range=(0.8, 1.2))),
    "saturation": lambda fn, types, x: fn.saturation(x, saturation=fn.random.uniform(range=(0.5, 1.5))),
    "hue": lambda fn, types, x: fn.hue(x, hue=fn.random.uniform(range=(-30.0, 30.0))),
    "jitter": lambda fn, types, x: fn.jitter(x, nDegree=2),
    "sphere": lambda fn, types, x: fn.sphere(x),
    "erase": lambda fn, types, x: fn.erase(x, anchor=(40.0, 40.0), shape=(60.0, 60.0), axis_names="HW",
                                           fill_value=0),
    "normalize": lambda fn, types, x: fn.normalize(fn.cast(x, dtype=types.FLOAT), mean=128.0, stddev=50.0),
    "water": lambda fn, types, x: fn.water(x),
    "cast_scale": _cast_scale,
    "random_resized_crop": lambda fn, types, x: fn.random_resized_crop(x, size=(224, 224)),
    "noise_gaussian": lambda fn, types, x: fn.noise.gaussian(x, stddev=fn.random.uniform(range=(5.0, 15.0))),
    "noise_salt_and_pepper": lambda fn, types, x: fn.noise.salt_and_pepper(x, prob=0.05),
    "laplacian": lambda fn, types, x: fn.laplacian(x, window_size=3),
    "noise_shot": lambda fn, types, x: fn.noise.shot(x, factor=fn.random.uniform(range=(0.5, 2.0))),
    "jpeg_compression_distortion": lambda fn, types, x: fn.jpeg_compression_distortion(
        x, quality=fn.random.uniform(range=(30.0, 90.0), dtype=types.INT32)),
    "pad": lambda fn, types, x: fn.pad(x, fill_value=0, shape=(300, 300), axis_names="HW"),
    "slice": lambda fn, types, x: fn.slice(x, fn.random.uniform(range=(0.0, 0.1), shape=(2,)), (0.9, 0.9),
                                           axis_names="HW", normalized_anchor=True, normalized_shape=True),
    "color_space_conversion": lambda fn, types, x: fn.color_space_conversion(x, image_type=types.RGB,
                                                                             output_type=types.BGR),
    "warp_perspective": lambda fn, types, x: fn.experimental.warp_perspective(
        x, matrix=[1.0, 0.1, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0001, 1.0], fill_value=0),
    # (out_of_bounds_policy="pad": the 256-pixel batch never leaves the window, but the host-cost
    # test runs the cases on 48-pixel images, where the default "error" would refuse it)
    "crop_mirror_normalize": lambda fn, types, x: fn.crop_mirror_normalize(
        x, crop=(224, 224), dtype=types.FLOAT, output_layout="HWC", mean=[0.485 * 255, 0.456 * 255, 0.406 * 255],
        std=[0.229 * 255, 0.224 * 255, 0.225 * 255], mirror=fn.random.coin_flip(), out_of_bounds_policy="pad"),
}


def decode_resize(fn, types, root: str, shuffle: bool = True):
    """The head every operator case sits behind: reader, mixed decode with random crop, resize 256."""
    jpegs, labels = fn.readers.file(file_root=root, random_shuffle=shuffle, name="r")
    images = fn.decoders.image_random_crop(jpegs, device="mixed", output_type=types.RGB)
    return fn.resize(images, resize_x=256, resize_y=256), labels


_MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]
_STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]


def standard_train(fn, types, root: str):
    """The standard training pipeline (shared/bench/gpu_bench.py's): random-crop decode, resize 224,
    crop_mirror_normalize with a random mirror."""
    jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True, name="r")
    x = fn.decoders.image_random_crop(jpegs, device="mixed", output_type=types.RGB)
    x = fn.resize(x, resize_x=224, resize_y=224)
    return fn.crop_mirror_normalize(x, dtype=types.FLOAT, output_layout="CHW", mean=_MEAN, std=_STD,
                                    mirror=fn.random.coin_flip()), labels


def standard_val(fn, types, root: str):
    """The standard validation pipeline: decode, resize shorter 256, crop_mirror_normalize 224."""
    jpegs, labels = fn.readers.file(file_root=root, name="r")
    x = fn.decoders.image(jpegs, device="mixed", output_type=types.RGB)
    x = fn.resize(x, resize_shorter=256)
    return fn.crop_mirror_normalize(x, crop=(224, 224), dtype=types.FLOAT, output_layout="CHW", mean=_MEAN,
                                    std=_STD), labels


def augmented_classification(fn, types, root: str):
    """Classification training with the usual augmentations (issue 16's whole pipeline)."""
    x, labels = decode_resize(fn, types, root)
    x = _rotate(fn, types, x)
    x = _color_twist(fn, types, x)
    x = OPS["hsv"](fn, types, x)
    x = OPS["gaussian_blur"](fn, types, x)
    x = _warp_shear(fn, types, x)
    x = fn.crop_mirror_normalize(x, crop=(224, 224), dtype=types.FLOAT, output_layout="CHW",
                                 mean=[0.485 * 255, 0.456 * 255, 0.406 * 255],
                                 std=[0.229 * 255, 0.224 * 255, 0.225 * 255], mirror=fn.random.coin_flip())
    return x, labels


def detection_style(fn, types, root: str):
    """Decode, resize shorter 320, paste, flip, crop with padding, cast / 255 (issue 16)."""
    jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True, name="r")
    x = fn.decoders.image(jpegs, device="mixed", output_type=types.RGB)
    x = fn.resize(x, resize_shorter=320)
    x = OPS["paste"](fn, types, x)
    x = OPS["flip"](fn, types, x)
    x = fn.crop(x, crop=(384, 384), out_of_bounds_policy="pad", fill_values=0)
    return _cast_scale(fn, types, x), labels


def _auto_aug(fn, name: str):
    import importlib

    prefix = "stoker" if fn.__name__.startswith("stoker") else "nvidia.dali"
    return importlib.import_module(f"{prefix}.auto_aug.{name}")


def rand_augment_pipeline(fn, types, root: str):
    """Decode, resize 256, RandAugment (n=2, m=9) on the GPU batch, crop_mirror_normalize 224."""
    x, labels = decode_resize(fn, types, root)
    x = _auto_aug(fn, "rand_augment").rand_augment(x, n=2, m=9)
    return fn.crop_mirror_normalize(x, crop=(224, 224), dtype=types.FLOAT, output_layout="CHW"), labels


def trivial_augment_pipeline(fn, types, root: str):
    """Decode, resize 256, TrivialAugment Wide on the GPU batch, crop_mirror_normalize 224."""
    x, labels = decode_resize(fn, types, root)
    x = _auto_aug(fn, "trivial_augment").trivial_augment_wide(x)
    return fn.crop_mirror_normalize(x, crop=(224, 224), dtype=types.FLOAT, output_layout="CHW"), labels


def _boxes_source(count: int = 512, seed: int = 0):
    """Per-sample sources of 1-8 random boxes (ltrb in [0, 1]) and their labels, for the detection
    pipeline (the image folder has no annotations): ``source(sample_info)`` as DALI's
    ``external_source(batch=False)`` calls it."""
    import numpy as np

    rng = np.random.default_rng(seed)
    boxes, labels = [], []
    for _ in range(count):
        k = int(rng.integers(1, 9))
        lt = rng.uniform(0.0, 0.7, (k, 2))
        wh = rng.uniform(0.1, 0.3, (k, 2))
        boxes.append(np.concatenate([lt, np.minimum(lt + wh, 1.0)], 1).astype(np.float32))
        labels.append(rng.integers(1, 80, (k, 1)).astype(np.int32))
    return (lambda info: boxes[info.idx_in_epoch % count]), (lambda info: labels[info.idx_in_epoch % count])


def _anchors() -> list:
    """SSD-like default boxes on 10x10 and 5x5 grids, two shapes each (250 anchors, ltrb)."""
    out = []
    for cells in (10, 5):
        for i in range(cells):
            for j in range(cells):
                cx, cy = (j + 0.5) / cells, (i + 0.5) / cells
                for w, h in ((1.5 / cells, 1.5 / cells), (2.0 / cells, 1.0 / cells)):
                    out += [max(cx - w / 2, 0.0), max(cy - h / 2, 0.0), min(cx + w / 2, 1.0), min(cy + h / 2, 1.0)]
    return out


def ssd_style(fn, types, root: str):
    """SSD training: random_bbox_crop, decode of the crop, flip of image and boxes, resize 300,
    colour jitter, crop_mirror_normalize, box_encoder (boxes from an external source)."""
    jpegs, boxes, labels = _ssd_sources(fn, root)
    anchor, shape, boxes, labels = fn.random_bbox_crop(
        boxes, labels, aspect_ratio=[0.5, 2.0], thresholds=[0.0, 0.1, 0.3, 0.5, 0.7, 0.9], scaling=[0.3, 1.0],
        bbox_layout="xyXY", allow_no_crop=True, num_attempts=50)
    return _ssd_rest(fn, types, jpegs, anchor, shape, boxes, labels)


def ssd_without_bbox_crop(fn, types, root: str):
    """The SSD pipeline with random_bbox_crop's window drawn by fn.random.uniform instead (probe:
    how fast the rest of it runs; the boxes are not cropped)."""
    jpegs, boxes, labels = _ssd_sources(fn, root)
    shape = fn.random.uniform(range=(0.3, 0.7), shape=(2,))  # (anchor + shape stays within the image)
    anchor = fn.random.uniform(range=(0.0, 0.3), shape=(2,))
    return _ssd_rest(fn, types, jpegs, anchor, shape, boxes, labels)


def _ssd_sources(fn, root: str):
    """The SSD pipelines' files, and their boxes and labels from external sources."""
    jpegs, _ = fn.readers.file(file_root=root, random_shuffle=True, name="r")
    boxes_of, labels_of = _boxes_source()
    return (jpegs, fn.external_source(source=boxes_of, batch=False),
            fn.external_source(source=labels_of, batch=False))


def _ssd_rest(fn, types, jpegs, anchor, shape, boxes, labels):
    """Everything of the SSD pipelines after the crop window: decode of the window, flip of image
    and boxes, resize 300, colour jitter, crop_mirror_normalize, box_encoder."""
    images = fn.decoders.image_slice(jpegs, anchor, shape, device="mixed", output_type=types.RGB)
    flip = fn.random.coin_flip(probability=0.5)
    boxes = fn.bb_flip(boxes, ltrb=True, horizontal=flip)
    images = fn.resize(images, resize_x=300, resize_y=300)
    images = fn.brightness_contrast(images, brightness=fn.random.uniform(range=(0.875, 1.125)),
                                    contrast=fn.random.uniform(range=(0.5, 1.5)))
    images = fn.hsv(images, hue=fn.random.uniform(range=(-18.0, 18.0)), saturation=fn.random.uniform(range=(0.5, 1.5)))
    images = fn.crop_mirror_normalize(images, crop=(300, 300), mean=[0.485 * 255, 0.456 * 255, 0.406 * 255],
                                      std=[0.229 * 255, 0.224 * 255, 0.225 * 255], mirror=flip,
                                      dtype=types.FLOAT, output_layout="CHW")
    boxes, labels = fn.box_encoder(boxes, labels, criteria=0.5, anchors=_anchors())
    return images, boxes, labels


def segmentation_style(fn, types, root: str):
    """An image and its mask (here the image's grey level, quantised) through the same random
    rotation matrix (warp_affine: linear for the image, nearest for the mask) and the same flip."""
    x, labels = decode_resize(fn, types, root)
    mask = fn.cast(fn.color_space_conversion(x, image_type=types.RGB, output_type=types.GRAY) // 64,
                   dtype=types.UINT8)  # (// of uint8 by a Python int gives int32, as in DALI)
    m = fn.transforms.rotation(angle=fn.random.uniform(range=(-15.0, 15.0)), center=(128.0, 128.0))
    x = fn.warp_affine(x, matrix=m, fill_value=0, inverse_map=False)
    mask = fn.warp_affine(mask, matrix=m, fill_value=0, inverse_map=False, interp_type=types.INTERP_NN)
    flip = fn.random.coin_flip()
    x = fn.flip(x, horizontal=flip)
    mask = fn.flip(mask, horizontal=flip)
    x = fn.crop_mirror_normalize(x, crop=(224, 224), dtype=types.FLOAT, output_layout="CHW")
    return x, fn.crop(mask, crop=(224, 224))


def detection_decode(fn, types, root: str):
    """The detection pipeline's fixed part alone (probe): full decode, resize shorter 320, padded
    crop 384, cast / 255."""
    jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True, name="r")
    x = fn.decoders.image(jpegs, device="mixed", output_type=types.RGB)
    x = fn.resize(x, resize_shorter=320)
    x = fn.crop(x, crop=(384, 384), out_of_bounds_policy="pad", fill_values=0)
    return _cast_scale(fn, types, x), labels


def decode_only(fn, types, root: str):
    """Full-size decode alone (probe), with a trivial crop so the output is one shape."""
    jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True, name="r")
    x = fn.decoders.image(jpegs, device="mixed", output_type=types.RGB)
    return fn.crop(x, crop=(64, 64)), labels


PIPELINES = {"train": standard_train, "val": standard_val, "augmented": augmented_classification,
             "detection": detection_style, "ssd": ssd_style,
             "segmentation": segmentation_style,
             "rand_augment": rand_augment_pipeline, "trivial_augment": trivial_augment_pipeline}
# Partial pipelines that tell where a zoo pipeline's time goes (``--pipelines`` takes their names too).
PROBES = {"detection_decode": detection_decode, "decode_only": decode_only,
          "ssd_without_bbox_crop": ssd_without_bbox_crop}
# Pipelines whose functions need @pipeline_def(enable_conditionals=True).
CONDITIONAL = {"rand_augment", "trivial_augment"}


def case_builder(case: str):
    """``build(fn, types, root) -> outputs`` of a case as the zoo scripts name it: "baseline" or an
    operator of ``OPS`` (decode_resize, the operator, crop 224), "pipeline:NAME" or a bare name of
    ``PIPELINES`` / ``PROBES``."""
    name = case.split(":", 1)[1] if case.startswith("pipeline:") else case
    whole = {**PIPELINES, **PROBES}
    if name in whole and (case.startswith("pipeline:") or name not in OPS):
        return whole[name]

    def build(fn, types, root):
        x, labels = decode_resize(fn, types, root)
        if case != "baseline":
            x = OPS[case](fn, types, x)
        return fn.crop(x, crop=(224, 224)), labels

    return build


def run_child(cmd: list, lib: str, case: str, timeout: float, env=None) -> dict:
    """Run one case in a child process (``cmd``) and return the JSON row it prints last, or a row
    with ``error`` (its stderr's end, or "timed out"): the scripts that run the zoo case by case,
    one process each, share this."""
    import json
    import subprocess

    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"lib": lib, "case": case, "error": "timed out"}
    out = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    return json.loads(out[-1]) if out else {"lib": lib, "case": case, "error": p.stderr[-400:]}
