"""The colour operators' whole-batch GPU plans (issue 16) give exactly the per-sample rules' tables.

hsv, hue, saturation and color_twist plan every sample's matrix with ``affine_batch`` and the
brightness/contrast family its float32 constants with one NumPy step; each keeps its per-sample
rule (the CPU operator's ``affine``, the same constants sample by sample), which also finds and
names a sample whose arguments are refused. Here both are compared to the bit over random
arguments, and the tables ``gpu_color`` uploads are checked on the null device
(tests/null_device.py: no GPU needed).
"""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import null_device  # noqa: E402

import stoker.types as types  # noqa: E402
from stoker.errors import OperatorError  # noqa: E402
from stoker.operators.base import BatchContext  # noqa: E402
from stoker.operators.color import _common  # noqa: E402
from stoker.operators.color import gpu_color as gc  # noqa: E402
from stoker.operators.schema import get_operator  # noqa: E402

N = 200
RANGES = {"hue": (-720.0, 720.0), "saturation": (0.0, 3.0), "value": (0.0, 3.0), "brightness": (0.0, 2.0),
          "contrast": (0.0, 2.0), "brightness_shift": (-0.5, 0.5), "contrast_center": (-10.0, 300.0)}
OPS = {"hsv": ("hue", "saturation", "value"), "hue": ("hue",), "saturation": ("saturation",),
       "color_twist": ("brightness", "contrast", "hue", "saturation"),
       "brightness": ("brightness", "brightness_shift"), "contrast": ("contrast", "contrast_center"),
       "brightness_contrast": ("brightness", "brightness_shift", "contrast", "contrast_center")}
MATRIX = ("hsv", "hue", "saturation", "color_twist")
EDGE_HUES = [0.0, 90.0, 180.0, -90.0, 360.0, 45.0, -180.0, 1e-12]


def _op(name, **kw):
    cls = get_operator(name)
    static, _ = cls.schema.bind(kw, lambda v: False)
    return cls(static, "gpu")


def _arg_inputs(rng, name, n, per_sample, dtype=np.float32):
    """Random arguments of ``name``: the names in ``per_sample`` as argument inputs (one array
    per sample, as random generators give them), the others static (one random value)."""
    arg_inputs, static = {}, {}
    for arg in OPS[name]:
        values = rng.uniform(*RANGES[arg], n)
        if arg == "hue":
            values[:len(EDGE_HUES)] = EDGE_HUES
        if arg in per_sample:
            arg_inputs[arg] = [np.asarray(v, dtype) for v in values]
        else:
            static[arg] = float(values[0])
    return arg_inputs, static


def _reference_table(op, arg_inputs, n, in_type, out_type):
    """The (n, 12) float32 parameters the per-sample rule gives (the code before issue 16)."""
    ftab = np.zeros((n, 12), np.float32)
    for i in range(n):
        args = op.sample_args(arg_inputs, i)
        if op.schema.name in MATRIX:
            matrix, offset = op.affine(args, in_type)
            ftab[i, :9] = np.asarray(matrix, np.float64).reshape(9)
            ftab[i, 9:] = np.asarray(offset, np.float64).reshape(3)
        else:
            ftab[i, :4] = gc._constants(op, args, in_type, _common.type_range(out_type))
    return ftab


def _table(op, arg_inputs, n, in_type, out_type):
    batch = BatchContext(batch_size=n)
    if op.schema.name in MATRIX:
        return gc.affine_table(op, batch, arg_inputs, n, in_type)
    return gc.brightness_contrast_table(op, batch, arg_inputs, n, in_type, out_type)


def test_hsv_matrices_match_hsv_matrix():
    rng = np.random.default_rng(0)
    hue = np.concatenate([EDGE_HUES, rng.uniform(-1000, 1000, 500)])
    sat, val = rng.uniform(0, 3, hue.size), rng.uniform(0, 3, hue.size)
    for bgr in (False, True):
        got = _common.hsv_matrices(hue, sat, val, bgr=bgr)
        want = np.stack([_common.hsv_matrix(float(h), float(s), float(v), bgr=bgr) for h, s, v in zip(hue, sat, val)])
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("in_type", [np.uint8, np.float32], ids=["u8", "f32"])
@pytest.mark.parametrize("how", ["per_sample", "static", "mixed"])
@pytest.mark.parametrize("name", sorted(OPS))
def test_batch_tables_match_per_sample_rule(name, how, in_type):
    rng = np.random.default_rng(len(name) * 7 + len(how))
    names = OPS[name]
    per = set(names) if how == "per_sample" else set() if how == "static" else set(names[::2])
    arg_inputs, static = _arg_inputs(rng, name, N, per)
    kw = dict(static)
    if name in ("hue", "saturation", "color_twist") and how == "mixed":
        kw["image_type"] = types.BGR
    op = _op(name, **kw)
    in_type = np.dtype(in_type)
    out_type = np.dtype(np.float32)
    got = _table(op, arg_inputs, N, in_type, out_type)
    np.testing.assert_array_equal(got, _reference_table(op, arg_inputs, N, in_type, out_type))
    if name not in MATRIX:  # the batch step ran (not the per-sample rule)
        add = _common.type_range(out_type)
        assert gc._constants_batch(op, arg_inputs, N, in_type, add) is not None
    else:  # also before the float32 rounding
        m, off = op.affine_batch(lambda k, d: _common.scalar_column(op, arg_inputs, k, N, d), in_type)
        for i in range(0, N, 17):
            want_m, want_off = op.affine(op.sample_args(arg_inputs, i), in_type)
            np.testing.assert_array_equal(m[i], want_m)
            np.testing.assert_array_equal(off[i], np.broadcast_to(want_off, (3,)))


def test_argument_values_of_other_types_and_shapes():
    """float64, int and bool values, and (1,)-shaped samples, read as the per-sample rule reads them."""
    rng = np.random.default_rng(3)
    op = _op("color_twist")
    for conv in (lambda v: np.float64(v), lambda v: np.int32(round(v)), lambda v: np.array([v], np.float32),
                 lambda v: np.array(v > 1.0)):
        arg_inputs = {k: [np.asarray(conv(v)) for v in rng.uniform(0.0, 2.0, 20)]
                      for k in ("brightness", "contrast", "saturation")}
        got = gc.affine_table(op, BatchContext(batch_size=20), arg_inputs, 20, np.dtype(np.uint8))
        np.testing.assert_array_equal(got, _reference_table(op, arg_inputs, 20, np.uint8, np.uint8))


def test_ragged_and_per_frame_argument_inputs_take_the_per_sample_rule():
    from stoker.operators.per_frame import FrameArray

    rng = np.random.default_rng(4)
    op = _op("hsv")
    mixed = {"hue": [np.float32(v) if i % 2 else np.array([v], np.float32)
                     for i, v in enumerate(rng.uniform(-90, 90, 9))]}
    framed = {"hue": [np.array([v], np.float32).view(FrameArray) for v in rng.uniform(-90, 90, 9)]}
    for arg_inputs in (mixed, framed):
        assert _common.scalar_column(op, arg_inputs, "hue", 9, 0.0) is None
        got = gc.affine_table(op, BatchContext(batch_size=9), arg_inputs, 9, np.dtype(np.uint8))
        np.testing.assert_array_equal(got, _reference_table(op, arg_inputs, 9, np.uint8, np.uint8))


# --- the GPU functions on the null device: their uploaded tables -----------------------------

@pytest.fixture
def tables(monkeypatch):
    """The host tables gpu_color uploads, in order (the null device runs no kernel)."""
    with null_device.recording_uploads(monkeypatch, (gc,)) as got:
        yield got


def _batch(images, layout="HWC", dense=False):
    """A TensorListGPU of ``images`` on the null device and its batch context."""
    return null_device.device_batch(images, layout, dense)


def _images(rng, n, dense=False, dtype=np.uint8):
    hw = np.full((n, 2), 17) if dense else rng.integers(1, 40, (n, 2))
    return [rng.integers(0, 255, (int(h), int(w), 3)).astype(dtype) for h, w in hw]


@pytest.mark.parametrize("dense", [False, True], ids=["ragged", "dense"])
@pytest.mark.parametrize("name", sorted(OPS))
def test_gpu_functions_upload_the_per_sample_tables(tables, name, dense):
    rng = np.random.default_rng(5)
    images = _images(rng, 11, dense)
    x, batch = _batch(images, dense=dense)
    arg_inputs, static = _arg_inputs(rng, name, 11, set(OPS[name]))
    op = _op(name, **({"dtype": types.FLOAT} if name != "hsv" else {}))
    (out,) = op.run_gpu(batch, [x], arg_inputs)
    itab, ftab = tables
    in_type, out_type = np.dtype(np.uint8), np.dtype(np.uint8 if name == "hsv" else np.float32)
    np.testing.assert_array_equal(ftab, _reference_table(op, arg_inputs, 11, in_type, out_type))
    ptrs, _, shapes = x.geometry()
    sizes = np.array([im.size for im in images])
    np.testing.assert_array_equal(itab[:, 0], ptrs)
    np.testing.assert_array_equal(itab[:, 2], sizes // 3 if name in MATRIX else sizes)
    buf, offsets, out_shapes = out.flat_parts()
    np.testing.assert_array_equal(itab[:, 1], buf.data.ptr + offsets * out_type.itemsize)
    assert out.shape() == [im.shape for im in images] and buf.dtype == out_type


# --- bad per-sample arguments ---------------------------------------------------------------

BAD = {
    "saturation": ({"saturation": [1.0, 0.5, -0.1, 2.0]}, "must not be negative"),
    "color_twist": ({"contrast": [1.0, 0.5, -3.0, 2.0]}, "must not be negative"),
    "hue": ({"hue": [np.float32(1), np.float32(2), np.array([1, 2], np.float32), np.float32(3)]}, "one value"),
    "hsv": ({"value": [np.float32(1), np.float32(2), np.array([], np.float32), np.float32(3)]}, "one value"),
    "brightness_contrast": ({"brightness": [np.float32(1), np.float32(2), np.array([1, 2], np.float32),
                                            np.float32(3)]}, "one value"),
    "brightness": ({"brightness_shift": [np.float32(1), np.float32(2), np.array("x"), np.float32(3)]}, "numbers"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_per_sample_argument_names_the_operator_and_the_sample(tables, name):
    bad, words = BAD[name]
    rng = np.random.default_rng(11)
    x, batch = _batch(_images(rng, 4))
    arg_inputs = {k: [np.asarray(v, np.float32) if np.ndim(v) == 0 and not isinstance(v, np.ndarray) else v
                      for v in vals] for k, vals in bad.items()}
    with pytest.raises(OperatorError, match=words) as e:
        _op(name).run_gpu(batch, [x], arg_inputs)
    assert e.value.operator == name and e.value.sample_index == 2 and e.value.source == "img2.jpg"


def test_a_bad_static_argument_fails_as_before(tables):
    x, batch = _batch(_images(np.random.default_rng(12), 3))
    with pytest.raises(OperatorError, match="must not be negative") as e:
        _op("saturation", saturation=-1.0).run_gpu(batch, [x], {})
    assert e.value.sample_index == 0
