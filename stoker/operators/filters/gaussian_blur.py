"""``gaussian_blur``: convolution with a separable Gaussian kernel along the spatial axes.

With only ``sigma`` the window is ``2 * ceil(3 * sigma) + 1``; with only
``window_size`` the sigma is ``0.3 * ((window_size - 1) / 2 - 1) + 0.8``
(OpenCV's rule). Both may be one value or one per spatial axis (outermost
first: (sigma_y, sigma_x) for HWC). Frames and channels are not blurred
across; borders mirror (BORDER_REFLECT_101). float32 arithmetic, then rounded
(half up) and saturated to ``dtype`` (the input's, or FLOAT).

The GPU blur builds every sample's kernels at once (``GaussianBlur.batch_kernels``,
``gaussian_kernels``): the same float32 taps as the per-sample ``kernels``, bit for bit.
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

_MAX_WINDOW = 2**31 - 2  # batch_kernels refuses longer (derived) windows: the GPU kernel counts taps in int


def gaussian_kernel(sigma: float, window: int) -> np.ndarray:
    """Normalized 1D Gaussian of ``window`` taps (odd) and standard deviation ``sigma``."""
    r = (window - 1) // 2
    t = np.arange(-r, r + 1, dtype=np.float64)
    k = np.exp(-(t * t) / (2.0 * sigma * sigma)) if sigma > 0 else (t == 0).astype(np.float64)
    return (k / k.sum()).astype(np.float32)


def gaussian_kernels(sigmas, windows) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``gaussian_kernel(*kernel_params(s, w))`` for many (sigma, window) pairs at once (windows
    whole numbers >= 0; checked as ``GaussianBlur.kernels`` checks them). Returns ``(taps, lengths,
    index)``: float32 ``(u, L)`` rows, one per pair, zero-padded to the longest, int64
    ``(u,)`` their windows, and int64 ``index`` giving each input pair's row (one row when every
    pair is the same).

    Equal to the per-pair function to the bit: the same float64 operations element by element,
    and each row's sum is NumPy's sum over exactly that window's taps (rows of one window are
    summed along their own axis; a padded row would be summed in another order). So the Python
    steps grow with the number of distinct windows, not of samples."""
    s = np.asarray(sigmas, np.float64).reshape(-1)
    w = np.asarray(windows, np.float64).reshape(-1)
    # kernel_params: the window from sigma where none is given, then sigma from the window (its
    # tests as written there: a NaN sigma stays NaN)
    with np.errstate(invalid="ignore", over="ignore"):
        w = np.where(w <= 0, 2.0 * np.ceil(3.0 * s) + 1.0, w)
    s = np.where(s <= 0, ((w - 1.0) / 2.0 - 1.0) * 0.3 + 0.8, s)
    pairs = np.stack([s, w], axis=1)
    # one row for a batch of one (sigma, window), else a row per pair: np.unique over rows (a sort
    # of a structured view) cost more than the few thousand exp() it saved with random sigmas
    if len(pairs) and (pairs == pairs[0]).all():
        pairs, index = pairs[:1], np.zeros(len(pairs), np.int64)
    else:
        index = np.arange(len(pairs), dtype=np.int64)
    sig, lengths = pairs[:, 0], pairs[:, 1].astype(np.int64)
    taps = np.zeros((len(pairs), int(lengths.max()) if len(pairs) else 0), np.float32)
    for length in sorted(set(lengths.tolist())):  # a few distinct windows, whatever the batch size
        rows = np.flatnonzero(lengths == length)
        r = (length - 1) // 2
        t = np.arange(-r, r + 1, dtype=np.float64)
        k = np.empty((rows.size, length), np.float64)
        sr = sig[rows]
        pos = sr > 0  # else (NaN with a window): the identity kernel, as gaussian_kernel gives it
        k[pos] = np.exp(-(t * t) / ((2.0 * sr[pos]) * sr[pos])[:, None])
        k[~pos] = (t == 0).astype(np.float64)
        taps[rows, :length] = (k / k.sum(axis=1, keepdims=True)).astype(np.float32)
    return taps, lengths, index.reshape(-1).astype(np.int64)


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

    prefers_worker_processes = True  # (7 % faster in chain workers at 2 threads: base.Operator says why)

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

    def batch_kernels(self, arg_inputs: dict, n: int, n_spatial: int):
        """The 1-D kernels of ``n`` samples at once: ``(taps, lengths, index)`` as
        :func:`gaussian_kernels` gives them, ``index`` shaped ``(n, n_spatial)`` (outermost axis
        first): sample i's kernel along axis a is ``taps[j, :lengths[j]]``, j = ``index[i, a]``,
        equal to ``kernels(sample_args(arg_inputs, i), n_spatial)[a]``. Raises ValueError (naming
        no sample) when any sample's arguments are bad; ``gpu_registry.plan_batch`` then runs
        :meth:`kernels` sample by sample to raise that sample's own error."""
        from stoker.operators.gpu_registry import batch_rows

        for name in ("sigma", "window_size"):
            if name not in arg_inputs and self.args.get(name) is None:
                raise ValueError(f"argument '{name}' is missing")  # per_axis refuses it
        sig = batch_rows(self, arg_inputs, "sigma", n, n_spatial, 0.0)
        win = batch_rows(self, arg_inputs, "window_size", n, n_spatial, 0.0)
        # the checks of _check, per_axis, kernels and kernel_params, for every sample and axis
        if not (np.isfinite(win) & (win == np.floor(win))).all():
            raise ValueError("argument 'window_size' takes whole numbers")
        if (sig < 0).any() or (win < 0).any() or ((win > 0) & (win % 2 == 0)).any():
            raise ValueError("argument 'sigma' or 'window_size' is out of range")
        derived = win == 0
        if (derived & (sig == 0)).any() or (derived & ~np.isfinite(sig)).any():
            raise ValueError("argument 'sigma' or 'window_size' must be non-zero for every axis")
        with np.errstate(over="ignore"):
            too_long = np.where(derived, 2.0 * np.ceil(3.0 * np.where(derived, sig, 0.0)) + 1.0, win) > _MAX_WINDOW
        if too_long.any():
            raise ValueError(f"a Gaussian window of more than {_MAX_WINDOW} taps")
        taps, lengths, index = gaussian_kernels(sig, win)
        return taps, lengths, index.reshape(n, n_spatial)

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
