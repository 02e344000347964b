"""Fast mode (setting ``reduced_size_decode``, off by default): decode a JPEG at a reduced size when
the resize after it shrinks the image anyway.

libjpeg-turbo can decode straight to M/8 of a JPEG's size (DCT scaling: each 8x8 block of
coefficients becomes an M x M block of pixels), which skips most of the inverse DCT, upsampling and
colour conversion, and leaves the resize a smaller image to filter. The pixels differ from the
exact path's (the DCT scaling is a different low-pass filter than the resize's antialiasing), so
this is opt-in; docs/performance.md gives the quality (PSNR against the exact path) and speed.

Where it applies: a fused CPU chain (:mod:`stoker.pipeline.fusion`) that starts with
``decoders.image`` or ``decoders.image_random_crop`` whose only reader is a ``resize`` right after it
(no ``roi_start``/``roi_end``, no ``save_attrs``). Per sample, only for colour 8-bit JPEGs (not CMYK,
not gray) without an EXIF rotation to apply, RGB or BGR output:

1. the crop window is drawn exactly as the decoder draws it (the same random stream), in the
   coordinates of the full-size image;
2. the resize plan (output size and source region) is computed from the window's full size, so
   the output shape is the exact path's;
3. the scale is the smallest in :data:`EIGHTHS` that keeps the source region at least as large as
   the output in both dimensions (never enlarging what the exact path shrinks); none: the exact
   path;
4. the window is decoded at that scale (the window scaled, cut to whole pixels) and resampled
   over the scaled source region with the resize's own filters.

Anything else (another format, a file the scaled decode refuses, a corrupt one) takes the exact
path for that sample, which reports errors as usual (naming the file). The decoder's own output
(the intermediate value) is not kept in this mode: nothing else reads it.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from stoker import settings, types
from stoker.operators.decoders import cpu, formats, turbo
from stoker.operators.decoders.formats import ImageFormatError
from stoker.operators.image.geometry import resize_plan
from stoker.operators.image.resample import resample
from stoker.operators.image.resize import resize_filters
from stoker.operators.random.crop_window import sample_crop_window

__all__ = ["ReducedDecode", "plan_for", "run_pair"]

# Scales tried, in eighths, smallest first. 5/8 to 7/8 decode no faster than the full size
# (libjpeg-turbo has no SIMD inverse DCT for those block sizes) but leave the resize less to do:
# decode + resize per image, one thread, 400 sample JPEGs of ~450x400 (2-core box): validation
# (resize_shorter=256) 3.33 ms exact, 2.75 ms with 1/8-1/2 only, 2.39 ms with 1/8-7/8; training
# (random crop, 224x224) 1.90, 1.83, 1.68 ms. PSNR against the exact path stayed ~49 dB either way.
EIGHTHS = (1, 2, 3, 4, 5, 6, 7)

_DECODERS = ("decoders.image", "decoders.image_random_crop")


@dataclasses.dataclass(frozen=True)
class ReducedDecode:
    """A fused chain's fast-mode plan: its first two members (decoder, resize) run as one step."""

    random_crop: bool  # the decoder is image_random_crop (draws a window) rather than image


def plan_for(chain: list, graph) -> ReducedDecode | None:
    """The plan for a fused ``chain`` (OpNodes) of ``graph``, or None where fast mode is off or the
    chain does not qualify (see the module docstring)."""
    if not settings.get().reduced_size_decode or len(chain) < 2:
        return None
    head, nxt = chain[0], chain[1]
    if head.op_name not in _DECODERS or nxt.op_name != "resize" or head.device != "cpu":
        return None
    dec, rsz = graph.instances[head.id], graph.instances[nxt.id]
    if dec.output_type not in (types.RGB, types.BGR) or rsz.args.get("save_attrs"):
        return None
    if nxt.inputs[0].index != 0 or any(rsz.args.get(k) is not None or k in nxt.arg_inputs
                                       for k in ("roi_start", "roi_end")):
        return None
    if not resize_reads_alone(graph, head, nxt):  # (its value is not kept)
        return None
    return ReducedDecode(random_crop=head.op_name == "decoders.image_random_crop")


def resize_reads_alone(graph, head, nxt) -> bool:
    """Whether the decoder node ``head``'s output has no reader but the resize ``nxt``'s first input
    (no other node, argument, control input or pipeline output): the fused paths then need not
    keep, or can reshape, the decoded image."""
    for node in graph.nodes:
        for j, x in enumerate([*node.inputs, *node.arg_inputs.values(), *node.control_inputs]):
            if x.source is head and (node is not nxt or j >= len(node.inputs)):
                return False
    return not any(o.source is head for o in graph.outputs)


def run_pair(plan: ReducedDecode, dec, rsz, data, dec_args: dict, dec_ctx, rsz_args: dict):
    """Decode one sample at a reduced size and resize it: ``(decoded, resized)``, or None where the
    exact path must compute it (fast mode does not apply to this sample, or it failed). ``dec`` and
    ``rsz`` are the operator instances, with their sample arguments and the decoder's
    SampleContext (whose random stream is left untouched)."""
    found = colour_jpeg_window(plan.random_crop, dec, data, dec_args, dec_ctx)
    if found is None:
        return None  # (not fast mode's sample: the exact path decodes it, or reports it)
    buf, (H, W), (wy, wx, wh, ww) = found
    rplan = resize_plan_for(rsz, rsz_args, (wh, ww))
    if rplan is None:
        return None
    out_h, out_w = rplan.out_size
    m = _eighths(abs(rplan.hi[0] - rplan.lo[0]), abs(rplan.hi[1] - rplan.lo[1]), out_h, out_w)
    if m is None:
        return None
    s = m / 8
    sh, sw = turbo.scaled_size(H, m), turbo.scaled_size(W, m)
    # The window in the scaled image, widened to whole pixels: taps past it repeat its edge pixels,
    # as they repeat the window's edge in the exact path.
    ty, tx = math.floor(wy * s), math.floor(wx * s)
    th, tw = min(sh, math.ceil((wy + wh) * s)) - ty, min(sw, math.ceil((wx + ww) * s)) - tx
    got = turbo.decode_scaled(buf, (ty, tx, th, tw), m, bgr=dec.output_type == types.BGR)
    if got is None:
        return None  # corrupt data or an unusual layout: the exact path decodes or refuses it
    img, (top, left) = got
    img = img[ty - top:ty - top + th, tx - left:tx - left + tw]
    if not img.flags.c_contiguous:
        img = np.ascontiguousarray(img)
    img = cpu.convert_dtype(img, dec.out_dtype)
    lo = [(wy + rplan.lo[0]) * s - ty, (wx + rplan.lo[1]) * s - tx]
    hi = [(wy + rplan.hi[0]) * s - ty, (wx + rplan.hi[1]) * s - tx]
    mn, mg = resize_filters(rsz_args)
    out = resample(img, (0, 1), rplan.out_size, lo, hi, min_filter=mn, mag_filter=mg,
                   antialias=rsz.args["antialias"], dtype=rsz.args["dtype"])
    return img, out


def colour_jpeg_window(random_crop: bool, dec, data, dec_args: dict, dec_ctx):
    """For the fused decode + resize paths (this module and :mod:`.padded_decode`): ``(encoded
    bytes as uint8, (H, W), (y, x, h, w) window)`` of a sample that is an 8-bit colour JPEG (not
    CMYK) within the decoder's limits and with no EXIF rotation to apply; the window is the
    decoder's own (image_random_crop's draw from a fresh stream of the sample, so the usual path,
    should it take over, draws the same one; else the whole image). None for any other sample:
    the usual path decodes it, or refuses it with its own error."""
    buf = cpu.as_uint8(data)
    try:
        if formats.detect_format(buf[:16].tobytes()) != formats.JPEG:
            return None
        info = formats.read_info(memoryview(buf))
        if info.channels != 3 or info.cmyk or info.bit_depth != 8:
            return None
        cpu.check_size(buf, info, dec.max_pixels, dec.max_aspect_ratio)
    except (ImageFormatError, cpu.ImageDecodeError):
        return None
    if info.orientation != 1 and dec_args["adjust_orientation"]:
        return None
    H, W = info.height, info.width
    if random_crop:
        rng = dataclasses.replace(dec_ctx, _rng=None).rng
        win = sample_crop_window(rng, H, W, dec.area, dec.aspect, int(dec.args["num_attempts"] or 10))
    else:
        win = (0, 0, H, W)
    wy, wx, wh, ww = (int(v) for v in win)
    if wh < 1 or ww < 1 or wy < 0 or wx < 0 or wy + wh > H or wx + ww > W:
        return None
    return buf, (H, W), (wy, wx, wh, ww)


def _eighths(src_h: float, src_w: float, out_h: int, out_w: int) -> int | None:
    """The smallest scale (eighths) that keeps a ``src_h`` x ``src_w`` source region at least as
    large as the output in both dimensions; None where only the full size does."""
    for m in EIGHTHS:
        if src_h * m >= out_h * 8 and src_w * m >= out_w * 8:
            return m
    return None


def resize_plan_for(rsz, args: dict, in_size: tuple[int, int]):
    """The resize's plan for an input of ``in_size`` (as Resize.run_sample computes it), or None
    where the exact path must run: a size argument it refuses, or an output over its pixel limit
    (the exact path raises the error that names them)."""
    try:
        requested = rsz.requested(args, 2)
        plan = resize_plan(in_size, requested, mode=rsz.args["mode"], max_size=rsz.args["max_size"],
                           resize_shorter=float(args.get("resize_shorter") or 0),
                           resize_longer=float(args.get("resize_longer") or 0), roi_start=None, roi_end=None,
                           roi_relative=rsz.args["roi_relative"], subpixel_scale=rsz.args["subpixel_scale"])
    except (ValueError, ArithmeticError):
        return None
    if rsz.max_output_pixels and math.prod(plan.out_size) > rsz.max_output_pixels:
        return None
    return plan
