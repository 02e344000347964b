"""GPU ``crop`` and ``crop_mirror_normalize`` apply ``out_of_bounds_policy`` as the CPU does.

The GPU kernels copy a window and pad whatever lies outside the image with one value. Before,
they did that whatever the policy: a window leaving the image under ``"error"`` (DALI's default)
came back zero-padded where the CPU raises, ``"trim_to_shape"`` came back padded to the full
window, and ``fill_values`` other than one value were ignored. Here, on the null device
(tests/null_device.py), the GPU functions raise the CPU's sample error, plan the trimmed windows
the CPU cuts, and hand the per-channel fills to the host path (whose pixels are the CPU's).
"""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import null_device  # noqa: E402

from stoker.errors import OperatorError  # noqa: E402
from stoker.operators.base import BatchContext  # noqa: E402
from stoker.operators.image import geometry_batch  # noqa: E402
from stoker.operators.schema import get_operator  # noqa: E402
from stoker.tensors import TensorListCPU  # noqa: E402


def _op(name, device="gpu", **kw):
    cls = get_operator(name)
    static, _ = cls.schema.bind(kw, lambda v: False)
    return cls(static, device)


def _images():
    rng = np.random.default_rng(0)
    return [rng.integers(0, 255, (h, w, 3), dtype=np.uint8) for h, w in ((40, 50), (20, 30), (64, 64))]


def _cpu(name, images, **kw):
    op = _op(name, "cpu", **kw)
    ctx = BatchContext(batch_size=len(images), sources=[f"img{i}.jpg" for i in range(len(images))])
    return op.run_cpu(ctx, [TensorListCPU(images, "HWC")], {})[0].samples()


@pytest.mark.parametrize("name", ["crop", "crop_mirror_normalize"])
def test_a_window_leaving_the_image_raises_the_cpu_error_under_the_default_policy(name):
    images = _images()
    with pytest.raises(OperatorError) as cpu_err:
        _cpu(name, images, crop=(32, 32))
    with null_device.installed():
        x, ctx = null_device.device_batch(images)
        with pytest.raises(OperatorError) as gpu_err:
            _op(name, crop=(32, 32)).run_gpu(ctx, [x], {})
    assert "img1.jpg" in str(gpu_err.value) and "out_of_bounds_policy" in str(gpu_err.value)
    assert gpu_err.value.source == cpu_err.value.source == "img1.jpg"
    assert gpu_err.value.reason == cpu_err.value.reason


def test_trim_to_shape_gives_the_cpu_shapes():
    images = _images()
    want = _cpu("crop", images, crop=(32, 32), out_of_bounds_policy="trim_to_shape", crop_pos_x=0.9)
    with null_device.installed():
        x, ctx = null_device.device_batch(images)
        out, = _op("crop", crop=(32, 32), out_of_bounds_policy="trim_to_shape", crop_pos_x=0.9).run_gpu(ctx, [x], {})
        assert out.shape() == [w.shape for w in want]


@pytest.mark.parametrize("name", ["crop", "crop_mirror_normalize"])
def test_per_channel_fill_values_take_the_host_path_with_the_cpu_pixels(name):
    images = _images()
    args = dict(crop=(48, 48), out_of_bounds_policy="pad", fill_values=[10.0, 20.0, 30.0])
    if name == "crop_mirror_normalize":
        args.update(mean=[0.0, 0.0, 0.0], std=[1.0, 1.0, 1.0], output_layout="HWC")
    want = _cpu(name, images, **args)
    with null_device.installed():
        x, ctx = null_device.device_batch(images)
        out, = _op(name, **args).run_gpu(ctx, [x], {})
        got = [np.asarray(s.get()) for s in out.samples()]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_out_of_bounds_keeps_windows_inside_and_pads_as_asked():
    class Op:
        args = {"out_of_bounds_policy": "pad"}

    windows = np.array([[0, 0, 10, 10], [-2, 3, 10, 10], [5, 5, 10, 10]])
    shapes = np.array([[10, 10, 3], [10, 10, 3], [12, 20, 3]])
    same, outside = geometry_batch.out_of_bounds(Op(), None, windows, shapes, "crop")
    assert outside.tolist() == [False, True, True]
    np.testing.assert_array_equal(same, windows)
    Op.args = {"out_of_bounds_policy": "trim_to_shape"}
    trimmed, _ = geometry_batch.out_of_bounds(Op(), None, windows, shapes, "crop")
    assert trimmed.tolist() == [[0, 0, 10, 10], [0, 3, 8, 7], [5, 5, 7, 10]]
