"""``gaussian_blur``: convolution with a separable Gaussian kernel along the spatial axes.

With only ``sigma`` the window is ``2 * ceil(3 * sigma) + 1``; with only
``window_size`` the sigma is ``0.3 * ((window_size - 1) / 2 - 1) + 0.8``
(OpenCV's rule). Both may be one value or one per spatial axis (outermost
first: (sigma_y, sigma_x) for HWC). Frames and channels are not blurred
across; borders mirror (BORDER_REFLECT_101). float32 arithmetic, then rounded
(half up) and saturated to ``dtype`` (the input's, or FLOAT).
"""

from __future__ import annotations

import math

import numpy as np

from stoker import types
from stoker.errors import arg_error
from stoker.operators.color._common import spatial_layout, to_dtype
from stoker.operators.filters._separable import as_filter_input, per_axis, separable_filter
from stoker.operators.image.crop import LayoutAware
from stoker.operators.per_frame import frame_args
from stoker.operators.schema import Arg, Schema, register


def gaussian_kernel(sigma: float, window: int) -> np.ndarray:
    """Normalized 1D Gaussian of ``window`` taps (odd) and standard deviation ``sigma``."""
    r = (window - 1) // 2
    t = np.arange(-r, r + 1, dtype=np.float64)
    k = np.exp(-(t * t) / (2.0 * sigma * sigma)) if sigma > 0 else (t == 0).astype(np.float64)
    return (k / k.sum()).astype(np.float32)


def kernel_params(sigma: float, window: int) -> tuple[float, int]:
    """Fills in the missing one of (sigma, window) as described in the module docstring."""
    if window <= 0:
        window = 2 * math.ceil(3.0 * sigma) + 1
    if sigma <= 0:
        sigma = ((window - 1) / 2.0 - 1.0) * 0.3 + 0.8
    return sigma, window


@register
@frame_args("sigma", "window_size")
class GaussianBlur(LayoutAware):
    """Blurs images, volumes or sequences with a Gaussian kernel."""

    schema = Schema(
        name="gaussian_blur",
        doc="Blurs along the spatial axes with a Gaussian kernel given by sigma and/or window_size "
            "(one value or one per spatial axis). Output dtype: the input's or FLOAT.",
        args=[Arg("sigma", "float_list", [0.0], tensor=True, doc="standard deviation (0: from window_size)"),
              Arg("window_size", "int_list", [0], tensor=True, doc="odd kernel diameter (0: from sigma)"),
              Arg("dtype", "dtype", None, doc="output type: the input's (default) or FLOAT")],
    )

    def setup(self):
        dtype = self.args.get("dtype")
        if dtype is not None and np.dtype(dtype) != np.float32:
            raise arg_error("gaussian_blur", "dtype", f"must be types.FLOAT or unset, got {types.to_dali_type(dtype)}")
        if "sigma" in self.args and "window_size" in self.args:  # absent: a per-sample tensor
            self._check(self.args["sigma"], self.args["window_size"], arg_error_mode=True)

    def _check(self, sigma, window, arg_error_mode=False):
        def fail(name, msg):
            if arg_error_mode:
                raise arg_error("gaussian_blur", name, msg)
            raise self.error(f"argument '{name}' {msg}")

        s = np.asarray(sigma if sigma is not None else [0.0], np.float64).reshape(-1)
        w = np.asarray(window if window is not None else [0], np.float64).reshape(-1)
        if np.any(s < 0):
            fail("sigma", f"must not be negative, got {s.tolist()}")
        if np.any(w < 0) or np.any((w > 0) & (w % 2 == 0)):
            fail("window_size", f"must be odd and positive (or 0 to derive it from sigma), got {w.tolist()}")
        if np.all(s == 0) and np.all(w == 0):
            fail("sigma", "must be positive when window_size is 0 (give sigma, window_size or both)")

    def kernels(self, args: dict, n_spatial: int) -> list[np.ndarray]:
        """One float32 1-D kernel per spatial axis (outermost first) for a sample with arguments
        ``args`` (checked); shared with the GPU blur."""
        if args is not self.args:
            self._check(args.get("sigma"), args.get("window_size"))
        sigmas = per_axis(self, args.get("sigma"), n_spatial, "sigma")
        windows = per_axis(self, args.get("window_size"), n_spatial, "window_size")
        kernels = []
        for s, w in zip(sigmas, windows):
            if s == 0 and w == 0:
                raise self.error("argument 'sigma' or 'window_size' must be non-zero for every axis")
            kernels.append(gaussian_kernel(*kernel_params(s, int(w))))
        return kernels

    def run_sample(self, inputs, args, ctx):
        img = np.asarray(inputs[0])
        if img.dtype.kind not in "iuf":
            raise self.error(f"expects numeric input, got {img.dtype}")
        spatial, channel = spatial_layout(self.layout_of(args), img.ndim)
        if not spatial:
            raise self.error(f"has no spatial axes to blur in a sample of shape {img.shape}")
        kernels = self.kernels(args, len(spatial))
        out = separable_filter(as_filter_input(img), spatial, channel, kernels)
        return to_dtype(out, np.dtype(self.args.get("dtype") or img.dtype))
