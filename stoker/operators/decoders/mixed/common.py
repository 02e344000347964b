"""Helpers shared by every part of the mixed decode path: windows, host decodes, checks.

Nothing here knows which path (engines or nvImageCodec) a sample takes; the path modules
(:mod:`.hardware`, :mod:`.nvimgcodec`, :mod:`.engines`, :mod:`.host_share`) import from here,
never from each other's private names.
"""
from __future__ import annotations

import cv2
import numpy as np

from stoker.operators.base import SAMPLE_ERRORS, SampleContext
from stoker.operators.image.geometry import crop_anchor
from stoker.operators.random.crop_window import sample_crop_window


def cupy_mod():
    """CuPy, imported on first use (:func:`stoker.backend.cuda._cupy`)."""
    from stoker.backend.cuda import _cupy

    return _cupy()


def nv():
    """The ``nvidia.nvimgcodec`` module (imported on first use: it takes about a second)."""
    from nvidia import nvimgcodec

    return nvimgcodec


def pair(v, default):
    """A (lo, hi) argument as two floats; ``default`` when absent."""
    if v is None:
        return default
    a = [float(x) for x in np.asarray(v, dtype=np.float64).reshape(-1)]
    return (a[0], a[-1]) if a else default


def first(v, default=None):
    """The first value of a scalar or per-sample argument; ``default`` when absent."""
    if v is None:
        return default
    a = np.asarray(v).reshape(-1)
    return a[0].item() if a.size else default


def raises_on_error(op, batch) -> bool:
    """Whether a failing sample raises (``on_error="raise"``) rather than being skipped or
    substituted: then nothing waits in the CPU stage for the host decodes to find failures."""
    return (op.args.get("on_error") or batch.on_error) == "raise"


def header(data: np.ndarray):
    """(code stream or None, codec name, height, width) of one encoded sample (nvImageCodec)."""
    codec = nv()
    try:
        cs = codec.CodeStream(data)
        return cs, (cs.codec_name or "").lower(), int(cs.height), int(cs.width)
    except Exception:  # noqa: BLE001 - unknown formats go to the CPU, which reports real errors
        return None, "", 0, 0


def window(op, kind, args, i, batch, h, w):
    """(y0, x0, wh, ww) of sample i, or None for the whole image."""
    if kind == "image":
        return None
    if kind == "image_random_crop":
        ctx = SampleContext(batch.sample_index(i), batch.iteration, op.op_seed, batch.source(i))
        area = getattr(op, "area", None) or pair(args.get("random_area"), (0.08, 1.0))
        aspect = getattr(op, "aspect", None) or pair(args.get("random_aspect_ratio"), (3 / 4, 4 / 3))
        return sample_crop_window(ctx.rng, h, w, area, aspect, int(first(args.get("num_attempts"), 10)))
    if kind == "image_crop":
        crop = args.get("crop")
        ch = cw = 0
        if crop is not None:
            c = np.asarray(crop, dtype=np.float64).reshape(-1)
            ch, cw = (c[0], c[0]) if c.size == 1 else (c[-2], c[-1])
        ch = int(first(args.get("crop_h"), 0) or ch) or h
        cw = int(first(args.get("crop_w"), 0) or cw) or w
        py, px = float(first(args.get("crop_pos_y"), 0.5)), float(first(args.get("crop_pos_x"), 0.5))
        # the CPU decoder's anchor rule, so both devices cut the same window
        return crop_anchor(h, ch, py), crop_anchor(w, cw, px), ch, cw
    if kind == "image_slice":  # (its anchor and shape inputs arrive as arguments, see slice_inputs)
        return op.window_rule(args, args.get(op.ANCHOR_INPUT), args.get(op.SHAPE_INPUT))(h, w)
    raise NotImplementedError(f"decoders.{kind} with device='mixed' is not implemented yet")


def clip(win, h, w):
    """``win`` (y0, x0, wh, ww) cut to an image of ``h`` x ``w``."""
    y0, x0, wh, ww = win
    y1, x1 = min(h, y0 + wh), min(w, x0 + ww)
    y0, x0 = max(0, y0), max(0, x0)
    return y0, x0, max(0, y1 - y0), max(0, x1 - x0)


def cpu_decode(data: np.ndarray, gray: bool, win):
    """OpenCV decode of one sample, cropped to ``win`` (y0, x0, h, w), as RGB (or gray) HWC uint8."""
    img = cv2.imdecode(np.asarray(data, np.uint8), cv2.IMREAD_GRAYSCALE if gray else cv2.IMREAD_COLOR)
    if img is None:
        raise ValueError("the image could not be decoded (unknown or corrupt format)")
    if win is not None:
        y0, x0, h, w = clip(win, img.shape[0], img.shape[1])
        img = img[y0:y0 + h, x0:x0 + w]
    if gray:
        return np.ascontiguousarray(img)[..., None]
    return cv2.cvtColor(img, cv2.COLOR_BGR2RGB)


def cpu_one(op, kind, batch, enc, heads, wins, arg_inputs, gray, i):
    """Decode sample ``i`` on the host: the operator's own CPU implementation when it has one."""
    from stoker.errors import OperatorError

    try:
        if hasattr(op, "run_sample") and hasattr(op, "decode"):
            ctx = SampleContext(batch.sample_index(i), batch.iteration, op.op_seed, batch.source(i))
            return np.ascontiguousarray(op.run_sample((enc[i],), op.sample_args(arg_inputs, i), ctx))
        win = wins[i]
        if win is None and kind != "image":
            h, w = heads[i][2], heads[i][3]
            if h == 0:  # header unknown to nvImageCodec: decode first, then choose the window
                probe = cv2.imdecode(np.asarray(enc[i], np.uint8), cv2.IMREAD_UNCHANGED)
                if probe is None:
                    raise ValueError("the image could not be decoded (unknown or corrupt format)")
                h, w = probe.shape[:2]
            win = window(op, kind, op.sample_args(arg_inputs, i), i, batch, h, w)
        return cpu_decode(enc[i], gray, win)
    except OperatorError:
        raise
    except (*SAMPLE_ERRORS, cv2.error) as e:  # the data's fault: this sample's error
        raise OperatorError(str(e), operator=op.instance_name, origin=op.origin, source=batch.source(i),
                            sample_index=i) from e
    except Exception as e:  # noqa: BLE001 - a bug (OperatorBugError), raised whatever on_error says
        raise op.sample_failure(e, batch, i) from e


def strict_sound(op, arrays, idx: list, hints=None, batch=None) -> list:
    """The samples of ``idx`` that may decode on the GPU as far as ``strict`` is concerned: all of
    them when the decoder's ``strict`` is off; else those whose JPEG structure passes
    :func:`stoker.backend.jpeg_scan_check.scan_problem` and, where the entropy check runs, whose
    Huffman data libjpeg reads without a warning (:mod:`stoker.backend.jpeg_entropy_check`). Why:
    the GPU decoders turn damaged entropy-coded data into garbage pixels without a word, so a
    flagged file goes to the CPU decoder, which (strict) fails it with its name, as on device='cpu'.
    ``hints``: the batch's frame hints; readers.file's I/O process adds the structure check's result
    as a seventh column, so that the pipeline's process spends nothing on it. The entropy check runs
    on ``batch.pool`` (its library call releases the GIL), on the files the structure check passed."""
    from stoker.backend.jpeg_entropy_check import entropy_check_wanted
    from stoker.backend.jpeg_scan_check import structure_check_wanted

    strict, on_error = getattr(op, "strict", False), getattr(batch, "on_error", None)
    if idx and structure_check_wanted(strict, on_error):
        if hints is not None and np.ndim(hints) == 2 and np.shape(hints)[1] > 6 and len(hints) == len(arrays):
            bad = np.asarray(hints)[idx, 6] != 0
        else:
            from stoker.backend.jpeg_scan_check import damaged

            bad = damaged(arrays, idx)
        idx = [i for i, b in zip(idx, bad.tolist()) if not b]
    if idx and entropy_check_wanted(strict, on_error):
        from stoker.backend.jpeg_entropy_check import damaged as entropy_damaged

        bad = entropy_damaged(arrays, idx, getattr(batch, "pool", None))
        idx = [i for i, b in zip(idx, bad.tolist()) if not b]
    return idx


def frame_hints(data):
    """The batch's JPEG frame hints, when its reader gave them (readers.file's I/O process scans
    them) or its samples lie in one buffer (the container readers: scanned here in bulk, see
    :mod:`stoker.backend.jpeg_header_bulk`); None otherwise (the decoder scans each sample)."""
    read = data.read_hints
    if read is None:
        return None
    hints, base = read.frame_hints, read.base
    if hints is None and base is not None and read.located is not None:
        from stoker.backend.jpeg_header_bulk import frame_hints as bulk_frame_hints

        addrs, sizes = read.located
        hints = bulk_frame_hints(base, (addrs - np.uint64(base.ctypes.data)).astype(np.int64),
                                 sizes.astype(np.int64))
    return hints


def check_cpu_failures(op, batch, cpu_idx, futures) -> None:
    """Under ``on_error="skip"``/``"substitute"``, wait here (in the CPU stage) for the samples
    decoded on the host and record the ones that failed in ``batch.failures``: the executor then
    drops and refills them before the GPU stage, as for a CPU operator. Under "raise" nothing
    waits; the error surfaces in the GPU stage."""
    from stoker.errors import OperatorBugError, OperatorError, detached

    if raises_on_error(op, batch):
        return
    for i, future in zip(cpu_idx, futures):
        try:
            future.result()
        except OperatorBugError:
            raise
        except OperatorError as e:
            batch.failures[i] = detached(e)  # its frames would hold the batch's device buffer
