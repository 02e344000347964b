"""The GPU crop_mirror_normalize's whole-batch window table (host-side math, no GPU needed)
equals the windows the CPU operator cuts, for both rounding modes and sub-pixel extents."""

import numpy as np
import pytest

from stoker.operators.image.crop import requested_window
from stoker.operators.image.geometry import crop_window as cpu_crop_window
from stoker.operators.image.gpu_crop_mirror_normalize import batch_windows, crop_window


class _Op:
    def __init__(self, **args):
        self.args = {"crop": None, "crop_h": 0.0, "crop_w": 0.0, "crop_pos_x": 0.5, "crop_pos_y": 0.5,
                     "mirror": 0, "rounding": "round", **args}


class _Batch:
    """Stands in for a TensorListGPU: its length and geometry() shapes."""

    def __init__(self, shapes):
        self.shapes = np.asarray(shapes, np.int64)

    def __len__(self):
        return len(self.shapes)

    def geometry(self):
        return None, None, self.shapes


def _cpu_windows(args, shapes):
    out = []
    for h, w, _ in shapes:
        ext, pos = requested_window(args, 2)
        ext = [h, w] if ext is None else ext
        ext = [e if int(e) >= 1 else n for e, n in zip(ext, (h, w))]
        (y0, x0), (ch, cw) = cpu_crop_window([h, w], ext, pos, args["rounding"])
        out.append([y0, x0, ch, cw])
    return out


@pytest.mark.parametrize("rounding", ["round", "truncate"])
@pytest.mark.parametrize("crop", [(11, 10), (40, 60), (0.5, 10), (0, 0), (7.9, 3.2)])
def test_batch_windows_equal_cpu_windows(rounding, crop):
    rng = np.random.default_rng(5)
    shapes = np.column_stack([rng.integers(5, 40, 12), rng.integers(5, 40, 12), np.full(12, 3)])
    px = rng.random(12).astype(np.float32)
    py = rng.random(12).astype(np.float32)
    px[:2] = py[:2] = 0.5
    op = _Op(crop=list(crop), rounding=rounding)
    windows, mirror = batch_windows(op, _Batch(shapes), {"crop_pos_x": list(px), "crop_pos_y": list(py)})
    expected = [_cpu_windows({**op.args, "crop_pos_x": float(x), "crop_pos_y": float(y)}, [s])[0]
                for s, x, y in zip(shapes, px, py)]
    assert windows.tolist() == expected
    single = [list(crop_window({**op.args, "crop_pos_x": float(x), "crop_pos_y": float(y)}, int(s[0]), int(s[1])))
              for s, x, y in zip(shapes, px, py)]
    assert single == expected
    assert not mirror.any()


@pytest.mark.parametrize("crop", [None, [9.0, 7.0]])
def test_crop_wins_over_crop_h_and_crop_w_as_on_the_cpu(crop):
    shapes = np.array([[20, 30, 3], [25, 16, 3], [12, 12, 3]])
    crop_h, crop_w = [5.0, 0.0, 8.0], [6.0, 4.0, 0.0]
    op = _Op(crop=crop)
    windows, _ = batch_windows(op, _Batch(shapes), {"crop_h": crop_h, "crop_w": crop_w})
    expected = [_cpu_windows({**op.args, "crop_h": h, "crop_w": w}, [s])[0]
                for s, h, w in zip(shapes, crop_h, crop_w)]
    assert windows.tolist() == expected
    single = [list(crop_window({**op.args, "crop_h": h, "crop_w": w}, int(s[0]), int(s[1])))
              for s, h, w in zip(shapes, crop_h, crop_w)]
    assert single == expected
