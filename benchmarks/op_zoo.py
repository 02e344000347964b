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
    "pad": lambda fn, types, x: fn.pad(x, fill_value=0, shape=(300, 300), axis_names="HW"),
    "slice": lambda fn, types, x: fn.slice(x, fn.random.uniform(range=(0.0, 0.1), shape=(2,)), (0.9, 0.9),
                                           axis_names="HW", normalized_anchor=True, normalized_shape=True),
    "color_space_conversion": lambda fn, types, x: fn.color_space_conversion(x, image_type=types.RGB,
                                                                             output_type=types.BGR),
    "warp_perspective": lambda fn, types, x: fn.experimental.warp_perspective(
        x, matrix=[1.0, 0.1, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0001, 1.0], fill_value=0),
    "crop_mirror_normalize": lambda fn, types, x: fn.crop_mirror_normalize(
        x, crop=(224, 224), dtype=types.FLOAT, output_layout="HWC", mean=[0.485 * 255, 0.456 * 255, 0.406 * 255],
        std=[0.229 * 255, 0.224 * 255, 0.225 * 255], mirror=fn.random.coin_flip()),
}


def decode_resize(fn, types, root: str, shuffle: bool = True):
    """The head every operator case sits behind: reader, mixed decode with random crop, resize 256."""
    jpegs, labels = fn.readers.file(file_root=root, random_shuffle=shuffle, name="r")
    images = fn.decoders.image_random_crop(jpegs, device="mixed", output_type=types.RGB)
    return fn.resize(images, resize_x=256, resize_y=256), labels


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


PIPELINES = {"augmented": augmented_classification, "detection": detection_style,
             "rand_augment": rand_augment_pipeline, "trivial_augment": trivial_augment_pipeline}
# Pipelines whose functions need @pipeline_def(enable_conditionals=True).
CONDITIONAL = {"rand_augment", "trivial_augment"}
