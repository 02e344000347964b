"""``grid_mask``: zero a rotated, shifted grid of squares (GridMask, Chen et al., 2020).

Pixel (x, y) maps to grid coordinates u = (x cos a - y sin a - shift_x) / tile and
v = (x sin a + y cos a - shift_y) / tile; it is zeroed when the fractional parts of both are
below ``ratio``. Evaluated in float32 with the terms scaled by 1 / tile and summed in the order
DALI's CPU operator gives, so pixels that fall exactly on a square's edge go the same way.
"""

from __future__ import annotations

import numpy as np

from stoker.errors import arg_error
from stoker.operators.base import Operator
from stoker.operators.schema import Arg, Schema, register


def grid_mask_params(tile: int, ratio: float, angle: float, shift_x: float, shift_y: float) -> np.ndarray:
    """The grid's float32 constants ``[ca, sa, sx, sy, r]``: cos and sin of ``angle`` and the
    shifts, each pre-scaled by 1 / tile, and ``ratio``. Both devices test pixels with these."""
    inv = np.float32(1.0 / tile)
    ca, sa = np.float32(np.cos(angle)) * inv, np.float32(np.sin(angle)) * inv
    return np.array([ca, sa, np.float32(shift_x) * inv, np.float32(shift_y) * inv, np.float32(ratio)], np.float32)


def grid_mask_black(h: int, w: int, tile: int, ratio: float, angle: float, shift_x: float,
                    shift_y: float) -> np.ndarray:
    """Boolean (H, W) mask of the pixels the grid zeroes."""
    ca, sa, sx, sy, r = grid_mask_params(tile, ratio, angle, shift_x, shift_y)
    x = np.arange(w, dtype=np.float32)[None, :]
    y = np.arange(h, dtype=np.float32)[:, None]
    # every product and sum rounded to float32 on its own, the row's offset first, then the
    # column's term (kernels/grid_mask_paste.cu repeats this order)
    u = x * ca + (-y * sa - sx)
    v = x * sa + (y * ca - sy)
    return ((u - np.floor(u)) < r) & ((v - np.floor(v)) < r)


@register
class GridMask(Operator):
    """Zeroes pixels in a grid of squares."""

    schema = Schema(
        name="grid_mask",
        legacy_name="GridMask",
        doc="GridMask augmentation: zeroes squares of side ``ratio * tile`` repeating every ``tile`` pixels "
            "in x and y, with the grid rotated by ``angle`` (radians) around the origin and then shifted by "
            "(``shift_x``, ``shift_y``). Works on HW and HWC images of any type.",
        args=[Arg("tile", "int", 100, tensor=True, doc="grid period in pixels (square plus spacing)"),
              Arg("ratio", "float", 0.5, tensor=True, doc="side of the black square as a fraction of tile"),
              Arg("angle", "float", 0.0, tensor=True, doc="rotation of the grid in radians"),
              Arg("shift_x", "float", 0.0, tensor=True, doc="x translation, applied after the rotation"),
              Arg("shift_y", "float", 0.0, tensor=True, doc="y translation, applied after the rotation")],
        devices=("cpu",),
    )

    def setup(self):
        a = self.args
        if a.get("tile") is not None and a["tile"] <= 0:
            raise arg_error("grid_mask", "tile", f"must be positive, got {a['tile']}")
        if a.get("ratio") is not None and not 0.0 <= a["ratio"] <= 1.0:
            raise arg_error("grid_mask", "ratio", f"must be in [0, 1], got {a['ratio']}")

    def output_layouts(self, input_layouts):
        return [input_layouts[0]]

    def grid(self, shape: tuple, args: dict) -> tuple:
        """One sample's checked grid: ``(tile, ratio, angle, shift_x, shift_y)`` for an image of
        ``shape`` (HW or HWC), from its static or per-sample arguments; raises for a bad shape,
        tile or ratio. Shared by the CPU and GPU implementations."""
        if len(shape) not in (2, 3):
            raise ValueError(f"grid_mask: expects HW or HWC images, got shape {tuple(shape)}")
        tile, ratio = int(args["tile"]), float(args["ratio"])
        if tile <= 0:
            raise ValueError(f"grid_mask: argument 'tile' must be positive, got {tile}")
        if not 0.0 <= ratio <= 1.0:
            raise ValueError(f"grid_mask: argument 'ratio' must be in [0, 1], got {ratio}")
        return tile, ratio, float(args["angle"]), float(args["shift_x"]), float(args["shift_y"])

    def run_sample(self, inputs, args, ctx):
        img = inputs[0]
        black = grid_mask_black(img.shape[0], img.shape[1], *self.grid(img.shape, args))
        out = img.copy()
        out[black] = 0
        return out
