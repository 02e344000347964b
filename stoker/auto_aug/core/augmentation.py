"""``Augmentation``: an image transformation with a magnitude, and the ``@augmentation`` decorator.

An augmentation is a function ``op(data, parameter, **extra)``. Its magnitude
range is split into ``num_magnitude_bins`` equally spaced magnitudes; calling it
with ``magnitude_bin=k`` computes ``parameter = mag_to_param(magnitudes[k] * sign)``
where ``sign`` is -1 for samples whose random sign is 1 (only if ``randomly_negate``).
Parameters for every bin are computed once, at definition time, into a table; a
per-sample bin (a DataNode) picks its row, so nothing is recomputed per iteration.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import numpy as np

from stoker import types
from stoker.pipeline.data_node import DataNode, constant_node

_UNSET = object()


class MissingArgError(TypeError):
    """An augmentation needs a keyword argument (such as ``shape``) that the call did not give."""

    def __init__(self, message: str, augmentation: Augmentation, missing: list[str]):
        super().__init__(message)
        self.augmentation = augmentation
        self.missing_args = missing


class SignedBin:
    """A magnitude bin together with a random sign (0 keeps, 1 negates the magnitude).

    ``signed_index`` is ``2 * bin + sign``: the row in a table that holds, for each bin,
    the parameter of the magnitude and then of its negation. Index it (``sb[k]``) when
    ``bin`` and ``random_sign`` hold several values per sample (one per policy stage).
    """

    def __init__(self, bin, random_sign: DataNode):
        self.bin = bin
        self.random_sign = random_sign
        self.signed_index = 2 * bin + random_sign

    def __getitem__(self, k: int) -> SignedBin:
        return SignedBin(self.bin[k], self.random_sign[k])


def signed_bin(magnitude_bin, random_sign: DataNode | None = None, seed: int | None = None,
               shape=None) -> SignedBin:
    """``magnitude_bin`` (an int or a per-sample DataNode) with a random sign per sample.

    Draw the sign once, before a batch is split among augmentations, so that the split
    does not repeat the draw. ``random_sign`` may be given instead of ``seed``/``shape``.
    """
    from stoker import fn

    if random_sign is not None and (seed is not None or shape is not None):
        raise ValueError("signed_bin: give either random_sign or seed/shape, not both")
    if random_sign is None:
        kw = {} if seed is None else {"seed": seed}
        if shape is not None:
            kw["shape"] = shape
        random_sign = fn.random.uniform(values=[0, 1], dtype=types.INT32, **kw)
    return SignedBin(magnitude_bin, random_sign)


def _extra_params(op: Callable) -> list[inspect.Parameter]:
    """The op's parameters after (data, parameter)."""
    params = list(inspect.signature(op).parameters.values())
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) < 2:
        raise TypeError(f"an augmentation takes (data, parameter, ...); {op.__name__} takes {len(positional)} "
                        "positional arguments")
    return params[2:]


class Augmentation:
    """An augmentation made by :func:`augmentation`; call it as ``aug(data, magnitude_bin=...,
    num_magnitude_bins=..., **extra)``. Extra keyword arguments the op does not take are ignored,
    so one set (``fill_value``, ``interp_type``, ``shape``) can be passed to every op of a suite."""

    def __init__(self, op: Callable, mag_range=None, randomly_negate: bool = False,
                 mag_to_param: Callable | None = None, param_device: str = "cpu", name: str | None = None):
        self._op = op
        self._mag_range = mag_range
        self._randomly_negate = bool(randomly_negate)
        self._mag_to_param = mag_to_param
        self._param_device = param_device
        self._name = name or op.__name__
        if param_device not in ("cpu", "gpu", "auto"):
            raise ValueError(f"augmentation {self._name}: param_device must be 'cpu', 'gpu' or 'auto'")
        self._extra = _extra_params(op)

    @property
    def op(self) -> Callable:
        return self._op

    @property
    def mag_range(self):
        return self._mag_range

    @property
    def randomly_negate(self) -> bool:
        return self._randomly_negate

    @property
    def mag_to_param(self) -> Callable | None:
        return self._mag_to_param

    @property
    def param_device(self) -> str:
        return self._param_device

    @property
    def name(self) -> str:
        return self._name

    def __repr__(self) -> str:
        parts = [repr(self._op)]
        if self._mag_range is not None:
            parts += [f"mag_range={self._mag_range}", f"randomly_negate={self._randomly_negate}"]
        if self._mag_to_param is not None:
            parts.append(f"mag_to_param={self._mag_to_param.__name__}")
        return f"Augmentation({', '.join(parts)}, name={self._name!r})"

    def augmentation(self, mag_range=_UNSET, randomly_negate=_UNSET, mag_to_param=_UNSET, param_device=_UNSET,
                     name=_UNSET) -> Augmentation:
        """A copy with some settings changed (``shear_x.augmentation(mag_range=(0, 0.5))``)."""
        def pick(new, old):
            return old if new is _UNSET else new
        return Augmentation(self._op, pick(mag_range, self._mag_range), pick(randomly_negate, self._randomly_negate),
                            pick(mag_to_param, self._mag_to_param), pick(param_device, self._param_device),
                            pick(name, self._name))

    # --- magnitudes and parameters ------------------------------------------------
    def magnitudes(self, num_magnitude_bins: int | None) -> np.ndarray | None:
        """The magnitude of each bin (None for augmentations without one)."""
        if self._mag_range is None:
            return None
        if isinstance(self._mag_range, np.ndarray):
            if num_magnitude_bins is not None and len(self._mag_range) != num_magnitude_bins:
                raise ValueError(f"augmentation {self._name}: mag_range lists {len(self._mag_range)} magnitudes "
                                 f"but num_magnitude_bins is {num_magnitude_bins}")
            return self._mag_range
        if num_magnitude_bins is None:
            raise ValueError(f"augmentation {self._name}: num_magnitude_bins is required with a magnitude_bin")
        lo, hi = self._mag_range
        return np.linspace(lo, hi, num_magnitude_bins, dtype=np.float32)

    def param_of(self, magnitude) -> np.ndarray:
        """The op's parameter for one (signed) magnitude."""
        param = magnitude if self._mag_to_param is None else self._mag_to_param(magnitude)
        if isinstance(param, DataNode):
            raise TypeError(f"augmentation {self._name}: mag_to_param must return NumPy values, not a DataNode "
                            "(parameters are precomputed for every bin)")
        return np.asarray(param)

    def param_table(self, magnitudes) -> np.ndarray:
        params = [self.param_of(m) for m in magnitudes]
        first = params[0]
        for m, p in zip(magnitudes, params):
            if p.shape != first.shape or p.dtype != first.dtype:
                raise ValueError(f"augmentation {self._name}: mag_to_param gave {first.dtype}{list(first.shape)} for "
                                 f"magnitude {magnitudes[0]} but {p.dtype}{list(p.shape)} for {m}")
        return np.stack(params)

    def _param(self, magnitude_bin, num_magnitude_bins):
        mags = self.magnitudes(num_magnitude_bins)
        if mags is None:
            return None
        if magnitude_bin is None:
            raise ValueError(f"augmentation {self._name} has a magnitude range: pass magnitude_bin")
        if self._randomly_negate:
            if not isinstance(magnitude_bin, SignedBin):
                magnitude_bin = signed_bin(magnitude_bin)
            if isinstance(magnitude_bin.bin, (int, np.integer)):
                m = mags[int(magnitude_bin.bin)]
                return constant_node(self.param_table([m, -m]))[magnitude_bin.random_sign]
            signed = np.stack([mags, -mags], axis=1).reshape(-1)  # bin k: row 2k, its negation 2k+1
            return constant_node(self.param_table(signed))[magnitude_bin.signed_index]
        k = magnitude_bin.bin if isinstance(magnitude_bin, SignedBin) else magnitude_bin
        if isinstance(k, (int, np.integer)):
            if not 0 <= int(k) < len(mags):
                raise ValueError(f"augmentation {self._name}: magnitude_bin {k} is outside [0, {len(mags) - 1}]")
            return constant_node(self.param_of(mags[int(k)]))
        return constant_node(self.param_table(mags))[k]

    def __call__(self, data, *, magnitude_bin=None, num_magnitude_bins: int | None = None, **kwargs):
        """Apply to ``data``: ``op(data, param, **accepted kwargs)``."""
        names = {p.name for p in self._extra}
        missing = [p.name for p in self._extra
                   if p.default is inspect.Parameter.empty and p.kind != p.VAR_KEYWORD and p.name not in kwargs]
        if missing:
            hint = (" (the image shape in HWC layout, e.g. from fn.peek_image_shape; or use the suite without "
                    "shape, whose translations are in pixels)") if "shape" in missing else ""
            raise MissingArgError(f"augmentation {self._name} needs the keyword argument(s) {missing}{hint}",
                                  self, missing)
        takes_all = any(p.kind == p.VAR_KEYWORD for p in self._extra)
        extra = {k: v for k, v in kwargs.items() if takes_all or k in names}
        return self._op(data, self._param(magnitude_bin, num_magnitude_bins), **extra)


def augmentation(function: Callable | None = None, *, mag_range=None, randomly_negate: bool | None = None,
                 mag_to_param: Callable | None = None, param_device: str | None = None, name: str | None = None):
    """Decorator: make ``function(data, parameter, **extra)`` an :class:`Augmentation`.

    ``mag_range`` (lo, hi) or an array of magnitudes; ``randomly_negate`` negates the
    magnitude for a random half of the samples; ``mag_to_param`` maps a magnitude to the
    op's parameter (NumPy); ``param_device`` is accepted for DALI compatibility (stoker
    keeps parameters on the CPU). Decorating an Augmentation again changes its settings.
    """
    settings = {k: v for k, v in (("mag_range", mag_range), ("randomly_negate", randomly_negate),
                                  ("mag_to_param", mag_to_param), ("param_device", param_device),
                                  ("name", name)) if v is not None}

    def decorate(f):
        if isinstance(f, Augmentation):
            return f.augmentation(**settings)
        return Augmentation(f, **settings)

    return decorate(function) if function is not None else decorate
