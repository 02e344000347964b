"""Per-sample (tensor) arguments: every operator reads the sample's own value, and a value of
the wrong shape or type is an error that names the operator and the argument.

The property: feeding values ``[v0, v1]`` per sample gives, for sample i, exactly what the
constant ``arg=v_i`` gives; and ``v0``, ``v1`` give different results, so the argument is not
silently ignored. DALI holds the same property; tests/operators/test_schema_vs_dali.py checks
that the set of per-sample arguments is DALI's.
"""

from __future__ import annotations

import numpy as np
import pytest
from generated_images import smooth
from oracle import run_graph

from stoker.errors import StokerError

RNG = np.random.default_rng(3)
IMG = smooth(RNG, 24, 32, 3)
BOXES = np.array([[0.1, 0.2, 0.5, 0.6], [0.3, 0.1, 0.9, 0.4]], np.float32)
POINTS = np.array([[0.1, 0.2], [0.7, 0.4]], np.float32)
CHW = np.ascontiguousarray(IMG.transpose(2, 0, 1))
SIGNAL = RNG.standard_normal(200).astype(np.float32)
F32 = RNG.random((6, 5), dtype=np.float32)


def f(*v):
    return np.array(v if len(v) > 1 else v[0], np.float32)


def i(*v):
    return np.array(v if len(v) > 1 else v[0], np.int32)


# (operator, input, input layout, constant arguments, argument, value for sample 0, value for sample 1)
CASES = [
    ("preemphasis_filter", SIGNAL, "", {}, "preemph_coeff", f(0.5), f(0.97)),
    ("flip", IMG, "HWC", {}, "horizontal", i(0), i(1)),
    ("flip", IMG, "HWC", {}, "vertical", i(0), i(1)),
    ("brightness", IMG, "HWC", {}, "brightness", f(0.5), f(1.5)),
    ("brightness", IMG, "HWC", {}, "brightness_shift", f(0.0), f(0.2)),
    ("contrast", IMG, "HWC", {}, "contrast", f(0.5), f(1.5)),
    ("contrast", IMG, "HWC", {"contrast": 2.0}, "contrast_center", f(50), f(200)),
    ("brightness_contrast", IMG, "HWC", {}, "contrast", f(0.5), f(1.5)),
    ("hue", IMG, "HWC", {}, "hue", f(10), f(90)),
    ("saturation", IMG, "HWC", {}, "saturation", f(0.2), f(1.5)),
    ("hsv", IMG, "HWC", {}, "value", f(0.5), f(1.2)),
    ("hsv", IMG, "HWC", {}, "saturation", f(0.5), f(1.2)),
    ("color_twist", IMG, "HWC", {}, "hue", f(10), f(60)),
    ("crop", IMG, "HWC", {"crop": (8, 8)}, "crop_pos_x", f(0.0), f(1.0)),
    ("crop", IMG, "HWC", {"crop": (8, 8)}, "crop_pos_y", f(0.0), f(1.0)),
    ("crop", IMG, "HWC", {}, "crop", f(8, 8), f(10, 6)),
    ("crop", IMG, "HWC", {"crop_w": 5}, "crop_h", f(5), f(9)),
    ("rotate", IMG, "HWC", {}, "angle", f(10), f(-35)),
    ("rotate", IMG, "HWC", {"angle": 20.0}, "size", f(20, 20), f(30, 16)),
    ("warp_affine", IMG, "HWC", {}, "matrix", f(1, 0, 2, 0, 1, 3), f(0.8, 0.1, 0, -0.1, 0.9, 1)),
    ("warp_perspective", IMG, "HWC", {}, "matrix", f(1, 0, 2, 0, 1, 3, 0, 0, 1),
     f(1, 0.1, 0, 0, 1, 0, 0.001, 0, 1)),
    ("grid_mask", IMG, "HWC", {}, "tile", i(8), i(13)),
    ("grid_mask", IMG, "HWC", {"tile": 10}, "ratio", f(0.3), f(0.7)),
    ("grid_mask", IMG, "HWC", {"tile": 10}, "angle", f(0.0), f(0.5)),
    ("grid_mask", IMG, "HWC", {"tile": 10}, "shift_x", f(0.0), f(3.0)),
    ("erase", IMG, "HWC", {"shape": [4.0, 4.0]}, "anchor", f(2, 2), f(10, 20)),
    ("erase", IMG, "HWC", {"anchor": [2.0, 2.0]}, "shape", f(4, 4), f(9, 3)),
    ("erase", IMG, "HWC", {"anchor": [2.0, 2.0], "shape": [5.0, 5.0]}, "fill_value", f(0), f(200)),
    ("gaussian_blur", IMG, "HWC", {}, "sigma", f(0.7), f(2.0)),
    ("gaussian_blur", IMG, "HWC", {"sigma": 1.0}, "window_size", i(3), i(7)),
    ("laplacian", IMG, "HWC", {"dtype": "float"}, "window_size", i(3), i(5)),
    ("laplacian", IMG, "HWC", {"dtype": "float"}, "scale", f(1.0), f(0.25)),
    ("jpeg_compression_distortion", IMG, "HWC", {}, "quality", i(5), i(90)),
    ("paste", IMG, "HWC", {"fill_value": [0.0, 0.0, 0.0]}, "ratio", f(1.5), f(2.0)),
    ("paste", IMG, "HWC", {"fill_value": [0.0, 0.0, 0.0], "ratio": 2.0}, "paste_x", f(0.0), f(1.0)),
    ("slice", IMG, "HWC", {"rel_shape": [0.5, 0.5]}, "rel_start", f(0.0, 0.0), f(0.5, 0.25)),
    ("slice", IMG, "HWC", {}, "shape", f(5, 6), f(7, 9)),
    ("pad", F32, "", {"axes": [0]}, "shape", i(8), i(11)),
    ("pad", F32, "", {"shape": [9, 9]}, "fill_value", f(0), f(-3)),
    ("normalize", F32, "", {"axes": [0, 1]}, "mean", f(0.1), f(0.7)),
    ("normalize", F32, "", {"axes": [0, 1]}, "stddev", f(0.5), f(2.0)),
    ("noise.gaussian", IMG, "HWC", {"seed": 9}, "stddev", f(1.0), f(20.0)),
    ("noise.shot", IMG, "HWC", {"seed": 9}, "factor", f(1.0), f(30.0)),
    ("noise.salt_and_pepper", IMG, "HWC", {"seed": 9}, "prob", f(0.05), f(0.5)),
    ("water", IMG, "HWC", {}, "mask", i(0), i(1)),
    ("sphere", IMG, "HWC", {}, "mask", i(0), i(1)),
    ("bb_flip", BOXES, "", {}, "horizontal", i(0), i(1)),
    ("bbox_paste", BOXES, "", {}, "ratio", f(1.0), f(2.0)),
    ("coord_flip", POINTS, "", {}, "flip_y", i(0), i(1)),
    ("coord_flip", POINTS, "", {}, "center_x", f(0.5), f(0.2)),
    ("coord_transform", POINTS, "", {}, "M", f(1, 0, 0, 1), f(2, 0, 1, 1)),
    ("coord_transform", POINTS, "", {}, "T", f(0, 0), f(1, 2)),
    ("reshape", F32, "", {}, "shape", i(30, 1), i(5, 6)),
    ("reshape", F32, "", {}, "rel_shape", f(1, 1), f(0.5, 2)),
    ("full", f(7), "", {}, "shape", i(2), i(3)),
    ("ones", None, "", {}, "shape", i(2), i(3)),
    ("zeros", None, "", {}, "shape", i(2, 2), i(3, 1)),
    ("jitter", IMG, "HWC", {"seed": 9}, "mask", i(0), i(1)),
    ("experimental.warp_perspective", IMG, "HWC", {"matrix": [1.0, 0, 0, 0, 1, 0, 0, 0, 1]}, "size", f(20, 20),
     f(12, 30)),
    ("random.uniform", None, "", {"seed": 4}, "range", f(0, 1), f(5, 9)),
    ("random.normal", None, "", {"seed": 4}, "mean", f(0), f(50)),
    ("random.coin_flip", None, "", {"seed": 4, "shape": [16]}, "probability", f(0.1), f(0.9)),
    ("random.uniform", None, "", {"seed": 4}, "shape", i(2), i(3)),
    ("transforms.translation", None, "", {}, "offset", f(1, 2), f(-3, 4)),
    ("transforms.scale", None, "", {}, "scale", f(1, 2), f(3, 4)),
    ("transforms.rotation", None, "", {}, "angle", f(10), f(80)),
    ("transforms.shear", None, "", {}, "shear", f(0.1, 0.2), f(0.5, 0)),
    ("transforms.crop", None, "", {}, "to_end", f(1, 1), f(2, 3)),
]


def _op(fn, name):
    for part in name.split("."):
        fn = getattr(fn, part)
    return fn


def _run(name, data, layout, kwargs, arg, values, per_sample=True):
    """Outputs of the operator on a batch of two copies of ``data``, with ``values`` (one per
    sample) fed as a tensor argument, or with the constant ``arg=values``."""
    batches, layouts = [], []
    if data is not None:
        batches.append([data, data])
        layouts.append(layout or None)
    if per_sample:
        batches.append(values)
        layouts.append(None)

    def build(fn, types, *xs):
        kw = dict(kwargs)
        if "dtype" in kw and isinstance(kw["dtype"], str):
            kw["dtype"] = getattr(types, kw["dtype"].upper())
        xs = list(xs)
        if per_sample:
            kw[arg] = xs.pop()
        else:
            kw[arg] = values
        return _op(fn, name)(*xs, **kw)

    (out, _), *_ = run_graph("stoker", build, *batches, batch_size=2)
    return out


def _static(v):
    return v.tolist()


@pytest.mark.parametrize("name,data,layout,kwargs,arg,v0,v1", CASES,
                         ids=[f"{c[0]}-{c[4]}" for c in CASES])
def test_each_sample_uses_its_own_value(name, data, layout, kwargs, arg, v0, v1):
    per_sample = _run(name, data, layout, kwargs, arg, [v0, v1])
    const0 = _run(name, data, layout, kwargs, arg, _static(v0), per_sample=False)
    const1 = _run(name, data, layout, kwargs, arg, _static(v1), per_sample=False)
    for k, want in enumerate([const0[0], const1[1]]):
        assert per_sample[k].shape == want.shape and per_sample[k].dtype == want.dtype, f"{name} sample {k}"
        np.testing.assert_array_equal(per_sample[k], want, err_msg=f"{name}: sample {k} with per-sample {arg}")
    assert const0[0].shape != const1[0].shape or not np.array_equal(const0[0], const1[0]), \
        f"{name}: {arg}={_static(v0)} and {_static(v1)} give the same output; the case does not test anything"


def test_every_tensor_argument_family_is_covered():
    """Operators with per-sample arguments that this module does not exercise, kept explicit."""
    from stoker.operators.schema import registered

    covered = {c[0] for c in CASES}
    elsewhere = {
        # owned by other folders' tests (decoders, resize, crop_mirror_normalize are reworked there)
        "crop_mirror_normalize": "tests/operators/image/test_crop.py (per-sample mirror, mean, std)",
        "decoders.image_crop": "tests/operators/decoders", "decoders.image_slice": "tests/operators/decoders",
        "resize": "tests/operators/image/test_resize.py", "random_resized_crop": "test_resize.py",
        # per-sample behaviour tested in the operator's own module
        "random_bbox_crop": "test_random_bbox_crop.py", "random_crop_generator": "random/test_extra.py",
        "permute_batch": "tensor/test_batch.py", "reinterpret": "tensor/test_shape_ops.py",
        "squeeze": "tensor/test_shape_ops.py", "random.choice": "random/test_generators.py",
        # draws all samples from one batch stream, so a sample's values depend on the other samples'
        # alpha/beta: per-sample and constant runs differ by design (values, not distributions)
        "random.beta": "random/test_extra.py",
        "decoders.audio": "audio/test_decoder.py", "audio_resample": "audio/test_resample.py",
        "readers.numpy": "readers/test_numpy_reader.py (per-sample ROIs against DALI)",
        # per-sample sizes are refused for now, with an error that points to fn.resize (tested there)
        "readers.video_resize": "video/test_video_resize.py",
        "decoders.video": "video/test_video_decoder.py", "experimental.decoders.video": "video/test_video_decoder.py",
    }
    with_tensor_args = {n for n, cls in registered().items()
                        if any(a.tensor for a in cls.schema.args) and not n.startswith("_")}  # "_": internal
    uncovered = with_tensor_args - covered - set(elsewhere)
    assert not uncovered, f"operators with per-sample arguments that no test feeds per sample: {sorted(uncovered)}; " \
                          "add a case to CASES (or name the test that does it in `elsewhere`)"


@pytest.mark.parametrize("name,arg,value,match", [
    ("flip", "horizontal", i(1, 0), "takes one value per sample"),
    ("rotate", "angle", f(10, 20), "takes one value per sample"),
    ("crop", "crop_pos_x", f(0.1, 0.2), "takes one value per sample"),
    ("flip", "horizontal", f(0.5), "takes whole numbers"),
    ("gaussian_blur", "window_size", f(3.5), "takes whole numbers"),
    ("rotate", "angle", f(float("nan")), "must be a finite"),
    ("rotate", "size", f(-3, 4), "must hold non-negative"),
    ("crop", "crop_pos_y", f(1.5), r"must be in \[0, 1\]"),
    ("random.uniform", "range", f(3, 1), "must be"),
    ("random.uniform", "shape", i(-2), "must not hold negative"),
    ("random.coin_flip", "probability", f(1.5), r"must be in \[0, 1\]"),
    ("gaussian_blur", "sigma", f(-1), "must not be negative"),
    ("paste", "ratio", f(0.5), "must be at least 1"),
    ("grid_mask", "tile", i(0), "must be positive"),
    ("warp_affine", "matrix", f(1, 2, 3), "needs 6 values"),
])
def test_wrong_per_sample_value_names_operator_and_argument(name, arg, value, match):
    kwargs = {"crop": {"crop": (4, 4)}, "paste": {"fill_value": [0.0]}}.get(name, {})
    if arg == "size":
        kwargs = {"angle": 10.0}
    data = None if name.startswith("random.") else IMG
    with pytest.raises(StokerError, match=rf"{name}.*argument '{arg}' {match}"):
        _run(name, data, "HWC", kwargs, arg, [value, value])


@pytest.mark.oracle
@pytest.mark.parametrize("shape", [(1,), (1, 1)])
@pytest.mark.parametrize("lib", ["stoker", "dali"])
def test_scalar_argument_takes_any_single_element_shape_like_dali(lib, shape):
    def rotated(shape):
        angles = [np.full(shape, 30.0, np.float32), np.full(shape, -50.0, np.float32)]
        (out, _), = run_graph(lib, lambda fn, t, x, a: fn.rotate(x, angle=a), [IMG, IMG], angles,
                              layouts=["HWC", None])
        return out

    for got, want in zip(rotated(shape), rotated(())):
        np.testing.assert_array_equal(got, want)
