"""The fused decode + resize of 8-bit colour JPEGs, exact: the decoder writes its pixels where the
resize reads them.

The CPU resize of an 8-bit RGB image with the linear filter is Pillow's resampler
(:mod:`stoker.operators.image.resample`) over the image plus a few edge rows and columns
repeated around it, in Pillow's own layout (4 bytes a pixel). Unfused, that is one more pass over
the decoded image: copied into a new buffer with room for the margins, 3 bytes to 4 per pixel
(0.25 ms an image of the validation pipeline on the 2-core box, a twelfth of its CPU time). Here
libjpeg-turbo decodes straight into such a buffer (4 bytes a pixel, the margins left free), the
margins are filled and Pillow reads the buffer as it is. Same pixels (the same decode: only the
pixel format is wider; the same resampler on the same source and box), so this is not a setting.

Where it applies: a fused CPU chain (:mod:`stoker.pipeline.fusion`) that starts with
``decoders.image`` or ``decoders.image_random_crop`` (RGB or BGR, uint8, strict) whose only reader is
a ``resize`` right after it (no ``roi_start``/``roi_end``, no ``save_attrs``), when the fast mode
of :mod:`stoker.pipeline.reduced_decode` does not. Per sample: a colour 8-bit JPEG (not CMYK,
not gray) without an EXIF rotation to apply, whose resize takes that Pillow path over the whole
(decoded) window (:func:`stoker.operators.image.resample.padded_rgb_plan`). Anything else, and
any file the decode refuses or warns about, takes the usual path for that sample, which reports
errors as before. The decoder's output is then a view of the buffer (its pixels, with a 4-byte
pixel stride): nothing else reads it.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from stoker import types
from stoker.operators.base import arg_key
from stoker.operators.decoders import cpu, turbo
from stoker.operators.image import resample_torch
from stoker.operators.image.resample import padded_rgb_plan, resample_padded
from stoker.operators.image.resize import resize_filters
from stoker.pipeline.reduced_decode import colour_jpeg_window, resize_plan_for, resize_reads_alone

__all__ = ["PaddedDecode", "plan_for", "run_pair"]

_DECODERS = ("decoders.image", "decoders.image_random_crop")
_LINEAR = (int(types.INTERP_LINEAR), int(types.INTERP_TRIANGULAR))


@dataclasses.dataclass(frozen=True)
class PaddedDecode:
    """A fused chain's plan: its first two members (decoder, resize) run as one step."""

    random_crop: bool  # the decoder is image_random_crop (draws a window) rather than image


def plan_for(chain: list, graph) -> PaddedDecode | None:
    """The plan for a fused ``chain`` (OpNodes) of ``graph``, or None where it does not qualify (see
    the module docstring)."""
    if len(chain) < 2:
        return None
    head, nxt = chain[0], chain[1]
    if head.op_name not in _DECODERS or nxt.op_name != "resize" or head.device != "cpu":
        return None
    dec, rsz = graph.instances[head.id], graph.instances[nxt.id]
    if dec.output_type not in (types.RGB, types.BGR) or dec.out_dtype.name != "uint8" or not dec.strict:
        return None
    if rsz.args.get("save_attrs") or nxt.inputs[0].index != 0 or \
            any(rsz.args.get(k) is not None or k in nxt.arg_inputs for k in ("roi_start", "roi_end")):
        return None
    # Where no sample could take the Pillow path (see resample.padded_rgb_plan), none tries: each
    # would read its header twice for nothing.
    dtype = rsz.args.get("dtype")
    if not turbo.available() or resample_torch.available() or (dtype is not None and np.dtype(dtype) != np.uint8):
        return None
    for k in ("interp_type", "min_filter", "mag_filter"):
        v = rsz.args.get(k)
        if k not in nxt.arg_inputs and v is not None and int(v) not in _LINEAR:
            return None
    if not resize_reads_alone(graph, head, nxt):  # (the decoded image becomes a strided view)
        return None
    return PaddedDecode(random_crop=head.op_name == "decoders.image_random_crop")


def run_pair(plan: PaddedDecode, dec, rsz, data, dec_args: dict, dec_ctx, rsz_args: dict):
    """Decode one sample into a padded buffer and resize it there: ``(decoded, resized)``, or None
    where the usual path must compute it (this does not apply to the sample, or it failed).
    ``dec`` and ``rsz`` are the operator instances, with their sample arguments and the decoder's
    SampleContext (whose random stream is left untouched)."""
    cpu.tune_allocator_once()  # (as the decoder's first decode_cpu call does)
    found = colour_jpeg_window(plan.random_crop, dec, data, dec_args, dec_ctx)
    if found is None:
        return None  # (not this path's sample: the usual path decodes it, or reports it)
    buf, (H, W), (wy, wx, wh, ww) = found
    how = _geometry(rsz, rsz_args, (wh, ww))
    if how is None:
        return None
    out_size, pads, box = how
    got = turbo.decode_padded(buf, (wy, wx, wh, ww), (*pads[0], *pads[1]), bgr=dec.output_type == types.BGR,
                              expect=(H, W))
    if got is None:
        return None  # corrupt data or an unusual layout: the usual path decodes or refuses it
    padded, (r, c) = got
    out = resample_padded(padded, (r, c), (wh, ww), pads, box, out_size)
    if out is None:
        return None
    return padded[r:r + wh, c:c + ww, :3], out


_NO_PLAN = object()


def _geometry(rsz, args: dict, in_size: tuple[int, int]):
    """``(out_size, pads, box)`` of the resize of an ``in_size`` window through the padded path
    (resample.padded_rgb_plan), or None where the usual path must run. Cached per resize instance
    and input size with the sample's size and filter arguments, as Resize.run_sample caches its
    plans (training data has few distinct sizes): this is pure Python on every sample otherwise."""
    key = (in_size, arg_key(args.get("size")), float(args.get("resize_x") or 0), float(args.get("resize_y") or 0),
           float(args.get("resize_shorter") or 0), float(args.get("resize_longer") or 0),
           arg_key(args.get("interp_type")), arg_key(args.get("min_filter")), arg_key(args.get("mag_filter")))
    cache = rsz.__dict__.setdefault("_padded_plans", {})
    got = cache.get(key, _NO_PLAN)
    if got is _NO_PLAN:
        got = None
        rplan = resize_plan_for(rsz, args, in_size)
        if rplan is not None:
            mn, mg = resize_filters(args)
            how = padded_rgb_plan(in_size, rplan.out_size, rplan.lo, rplan.hi, min_filter=mn, mag_filter=mg,
                                  antialias=rsz.args["antialias"], dtype=rsz.args["dtype"])
            if how is not None:
                got = (tuple(rplan.out_size), *how)
        if len(cache) >= 8192:
            cache.clear()
        cache[key] = got
    return got
