"""``laplacian``: the sum of second derivatives along every spatial axis.

The partial derivative along axis i convolves a second-derivative window of
``window_size[i]`` taps along i (``[1, -2, 1]`` widened by binomial smoothing,
as OpenCV's Sobel kernels) with binomial smoothing windows along the other
axes: of ``smoothing_size[j]`` taps along axis j when given, else of
``window_size[i]`` taps. Each partial is multiplied by ``scale[i]``, or with
``normalized_kernel`` by ``2 ** (-s + n + 2)`` (s: the sum of its window
sizes, n: the number of spatial axes). float32 arithmetic, borders mirror
(BORDER_REFLECT_101), then rounded (half up) and saturated to ``dtype``
(the input's, or FLOAT).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from stoker import types
from stoker.errors import arg_error
from stoker.operators.color._common import spatial_layout, to_dtype
from stoker.operators.filters._separable import as_filter_input, per_axis, separable_filter
from stoker.operators.image.crop import LayoutAware
from stoker.operators.per_frame import frame_args
from stoker.operators.schema import Arg, Schema, register


@lru_cache(maxsize=64)
def smoothing_window(size: int) -> np.ndarray:
    """Binomial coefficients of ``size`` taps (1 tap: no smoothing)."""
    k = np.ones(1)
    for _ in range(size - 1):
        k = np.convolve(k, [1.0, 1.0])
    return k.astype(np.float32)


@lru_cache(maxsize=64)
def derivative_window(size: int) -> np.ndarray:
    """Second-derivative window of ``size`` taps: [1, -2, 1] convolved with binomial smoothing."""
    return np.convolve([1.0, -2.0, 1.0], smoothing_window(size - 2)).astype(np.float32)


@register
@frame_args("scale", "smoothing_size", "window_size")
class Laplacian(LayoutAware):
    """Laplacian of images, volumes or sequences (sum of smoothed second derivatives)."""

    prefers_worker_processes = True  # (15-17 % faster in chain workers at 2 threads: base.Operator says why)

    schema = Schema(
        name="laplacian",
        doc="Sum over spatial axes of second derivatives, each computed with a derivative window along "
            "its axis and smoothing windows along the others. Output dtype: the input's or FLOAT.",
        args=[Arg("window_size", "int_list", [3], tensor=True,
                  doc="derivative window, odd in [3, 23]; one value or one per spatial axis"),
              Arg("smoothing_size", "int_list", None, tensor=True,
                  doc="smoothing window, odd in [1, 23]; one value or one per axis (default: window_size)"),
              Arg("scale", "float_list", None, tensor=True,
                  doc="factor of each partial derivative (one value or one per axis; default 1.0)"),
              Arg("normalized_kernel", "bool", False,
                  doc="scale each partial by 2^(-s + n + 2), s the sum of its window sizes; excludes scale"),
              Arg("dtype", "dtype", None, doc="output type: the input's (default) or FLOAT")],
    )

    def setup(self):
        dtype = self.args.get("dtype")
        if dtype is not None and np.dtype(dtype) != np.float32:
            raise arg_error("laplacian", "dtype", f"must be types.FLOAT or unset, got {types.to_dali_type(dtype)}")
        if self.args.get("normalized_kernel") and self.args.get("scale") is not None:
            raise arg_error("laplacian", "scale", "cannot be given together with normalized_kernel=True")
        for name, lo in (("window_size", 3), ("smoothing_size", 1)):
            bad = self._bad_sizes(self.args.get(name), lo)
            if bad:
                raise arg_error("laplacian", name, bad)

    @staticmethod
    def _bad_sizes(values, lo):
        if values is None:
            return ""
        v = np.asarray(values, np.float64).reshape(-1)
        if np.any(v % 2 == 0) or np.any(v < lo) or np.any(v > 23):
            return f"must be odd and in [{lo}, 23], got {v.astype(int).tolist()}"
        return ""

    def run_sample(self, inputs, args, ctx):
        img = np.asarray(inputs[0])
        if img.dtype.kind not in "iuf":
            raise self.error(f"expects numeric input, got {img.dtype}")
        spatial, channel, windows = self.windows(args, self.layout_of(args), img.shape)
        out_dtype = np.dtype(self.args.get("dtype") or img.dtype)
        if img.size == 0:  # nothing to filter (OpenCV refuses an empty image)
            return np.zeros(img.shape, out_dtype)
        x = as_filter_input(img)
        total = None
        for kernels in windows:
            part = separable_filter(x, spatial, channel, kernels)
            total = part if total is None else np.add(total, part, out=total)
        return to_dtype(total, out_dtype)

    def windows(self, args: dict, layout: str, shape) -> tuple[list[int], int | None, list[list[np.ndarray]]]:
        """(spatial axes, channel axis, windows) of one sample of ``shape``: ``windows[i][j]`` is the
        float32 window of partial derivative ``i`` along spatial axis ``j`` (its scale folded into the
        derivative window). Raises the sample's argument errors; shared with the GPU laplacian."""
        spatial, channel = spatial_layout(layout, len(shape))
        n = len(spatial)
        if n == 0:
            raise self.error(f"has no spatial axes in a sample of shape {tuple(shape)}")
        if args is not self.args:
            for name, lo in (("window_size", 3), ("smoothing_size", 1)):
                bad = self._bad_sizes(args.get(name), lo)
                if bad:
                    raise self.error(f"argument '{name}' {bad}")
        windows = [int(w) for w in per_axis(self, args.get("window_size"), n, "window_size")]
        smooth = args.get("smoothing_size")
        smooth = [int(s) for s in per_axis(self, smooth, n, "smoothing_size")] if smooth is not None else None
        scale = args.get("scale")
        scales = per_axis(self, scale, n, "scale") if scale is not None else [1.0] * n
        out = []
        for i in range(n):
            sizes = [windows[i] if smooth is None else smooth[j] for j in range(n)]
            sizes[i] = windows[i]
            kernels = [derivative_window(sz) if j == i else smoothing_window(sz) for j, sz in enumerate(sizes)]
            if self.args.get("normalized_kernel"):
                kernels[i] = kernels[i] * np.float32(2.0 ** (-sum(sizes) + n + 2))
            elif scales[i] != 1.0:
                kernels[i] = kernels[i] * np.float32(scales[i])
            out.append(kernels)
        return spatial, channel, out
