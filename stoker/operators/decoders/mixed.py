"""The "mixed" image decoders: encoded bytes on the host in, decoded HWC uint8 on the GPU out.

Implements ``decoders.image``, ``decoders.image_random_crop``,
``decoders.image_crop`` and ``decoders.image_slice`` with ``device="mixed"``.

Per batch:

1. parse each header (nvImageCodec ``CodeStream``) for the image size;
2. choose the window (random crop windows from
   :func:`stoker.operators.random.crop_window.sample_crop_window` with the
   sample's own random stream, so the window does not depend on the device);
3. split the batch: a share of the JPEGs (``STOKER_CPU_DECODE_SHARE``,
   default 0.25) and every image nvImageCodec cannot take go to stoker's
   thread pool (OpenCV decode + crop, then one pinned upload); the rest go
   to one batched nvImageCodec ``decode`` with ROI on the pipeline's stream
   (hardware JPEG engine and hybrid CPU/GPU backends). Both halves run at once.

Samples that nvImageCodec fails on are retried on the CPU; a sample that
fails there too raises an error naming the file.
"""

from __future__ import annotations

import os
import threading

import cv2
import numpy as np

from stoker.operators.base import SampleContext
from stoker.operators.gpu_registry import register_gpu
from stoker.operators.random.crop_window import sample_crop_window

_GPU_CODECS = {"jpeg"}


def _nv():
    from nvidia import nvimgcodec

    return nvimgcodec


def _pair(v, default):
    if v is None:
        return default
    a = [float(x) for x in np.asarray(v, dtype=np.float64).reshape(-1)]
    return (a[0], a[-1]) if a else default


def _first(v, default=None):
    if v is None:
        return default
    a = np.asarray(v).reshape(-1)
    return a[0].item() if a.size else default


class _State:
    """Decoder instance and settings kept on the operator between batches."""

    def __init__(self, device_id: int):
        nv = _nv()
        threads = int(os.environ.get("STOKER_NVIMGCODEC_THREADS", "0")) or os.cpu_count() or 4
        self.decoder = nv.Decoder(device_id=device_id, max_num_cpu_threads=threads)
        self.params = {gray: nv.DecodeParams(color_spec=nv.ColorSpec.GRAY if gray else nv.ColorSpec.SRGB,
                                             apply_exif_orientation=True, allow_any_depth=False)
                       for gray in (False, True)}
        self.lock = threading.Lock()
        self.cpu_share = float(os.environ.get("STOKER_CPU_DECODE_SHARE", "0.25"))


def _state(op, batch):
    st = getattr(op, "_mixed_state", None)
    if st is None:
        st = op._mixed_state = _State(batch.device_id or 0)
    return st


def _header(data: np.ndarray):
    """(code stream or None, codec name, height, width) of one encoded sample."""
    nv = _nv()
    try:
        cs = nv.CodeStream(data)
        return cs, (cs.codec_name or "").lower(), int(cs.height), int(cs.width)
    except Exception:  # noqa: BLE001 - unknown formats go to the CPU, which reports real errors
        return None, "", 0, 0


def _window(op, kind, args, i, batch, h, w):
    """(y0, x0, wh, ww) of sample i, or None for the whole image."""
    if kind == "image":
        return None
    if kind == "image_random_crop":
        ctx = SampleContext(i, batch.iteration, op.op_seed, batch.source(i))
        area = getattr(op, "area", None) or _pair(args.get("random_area"), (0.08, 1.0))
        aspect = getattr(op, "aspect", None) or _pair(args.get("random_aspect_ratio"), (3 / 4, 4 / 3))
        return sample_crop_window(ctx.rng, h, w, area, aspect, int(_first(args.get("num_attempts"), 10)))
    if kind == "image_crop":
        crop = args.get("crop")
        ch = cw = 0
        if crop is not None:
            c = np.asarray(crop, dtype=np.float64).reshape(-1)
            ch, cw = (c[0], c[0]) if c.size == 1 else (c[-2], c[-1])
        ch = int(_first(args.get("crop_h"), 0) or ch) or h
        cw = int(_first(args.get("crop_w"), 0) or cw) or w
        py, px = float(_first(args.get("crop_pos_y"), 0.5)), float(_first(args.get("crop_pos_x"), 0.5))
        y0 = int(np.floor(py * (h - ch) + 0.5))
        x0 = int(np.floor(px * (w - cw) + 0.5))
        return y0, x0, ch, cw
    # image_slice: anchor and shape as further inputs are not supported on this path yet.
    raise NotImplementedError(f"decoders.{kind} with device='mixed' is not implemented yet")


def _clip(win, h, w):
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
        y0, x0, h, w = _clip(win, img.shape[0], img.shape[1])
        img = img[y0:y0 + h, x0:x0 + w]
    if gray:
        return np.ascontiguousarray(img)[..., None]
    return cv2.cvtColor(img, cv2.COLOR_BGR2RGB)


def mixed_decode(op, kind, batch, inputs, arg_inputs):
    """Decode a batch of encoded samples to a ragged ``TensorListGPU`` of HWC uint8 images."""
    from stoker.backend import cuda
    from stoker.errors import OperatorError
    from stoker.operators.transfer import _ring
    from stoker.tensors_gpu import TensorListGPU

    cp = cuda._cupy()
    nv = _nv()
    st = _state(op, batch)
    stream = cuda.current_stream(batch)
    enc = inputs[0].samples()
    n = len(enc)
    out_type = op.args.get("output_type")
    gray = out_type is not None and getattr(out_type, "name", str(out_type)).endswith("GRAY")
    heads = [_header(np.asarray(d)) for d in enc]
    wins = []
    for i, (_, _, h, w) in enumerate(heads):
        args = op.sample_args(arg_inputs, i)
        wins.append(_window(op, kind, args, i, batch, h, w) if h > 0 else None)
    dtype = op.args.get("dtype")
    on_gpu = (gray or out_type is None or getattr(out_type, "name", "") == "RGB") and \
        (dtype is None or np.dtype(dtype) == np.uint8)
    gpu_idx = [i for i, hd in enumerate(heads) if hd[1] in _GPU_CODECS] if on_gpu else []
    n_cpu_jpeg = int(round(len(gpu_idx) * st.cpu_share))
    cpu_idx = sorted(set(range(n)) - set(gpu_idx)) + gpu_idx[len(gpu_idx) - n_cpu_jpeg:]
    gpu_idx = gpu_idx[:len(gpu_idx) - n_cpu_jpeg]

    def cpu_one(i):
        if hasattr(op, "run_sample") and hasattr(op, "decode"):
            ctx = SampleContext(i, batch.iteration, op.op_seed, batch.source(i))
            try:
                out = op.run_sample((enc[i],), op.sample_args(arg_inputs, i), ctx)
            except OperatorError:
                raise
            except Exception as e:  # noqa: BLE001
                raise OperatorError(str(e), operator=op.instance_name, origin=op.origin, source=batch.source(i),
                                    sample_index=i) from e
            return np.ascontiguousarray(out)
        win = wins[i]
        if win is None and kind != "image":
            if heads[i][2] == 0:  # header unknown to nvImageCodec: decode first, then choose the window
                probe = cv2.imdecode(np.asarray(enc[i], np.uint8), cv2.IMREAD_UNCHANGED)
                if probe is None:
                    raise ValueError("the image could not be decoded (unknown or corrupt format)")
                win = _window(op, kind, op.sample_args(arg_inputs, i), i, batch, probe.shape[0], probe.shape[1])
        try:
            return cpu_decode(enc[i], gray, win)
        except Exception as e:  # noqa: BLE001
            raise OperatorError(str(e), operator=op.instance_name, origin=op.origin, source=batch.source(i),
                                sample_index=i) from e

    futures = None
    if cpu_idx and batch.pool is not None:
        futures = [batch.pool.submit(cpu_one, i) for i in cpu_idx]
    results: list = [None] * n
    if gpu_idx:
        subs = []
        for i in gpu_idx:
            cs, _, h, w = heads[i]
            if wins[i] is not None:
                y0, x0, wh, ww = _clip(wins[i], h, w)
                cs = cs.get_sub_code_stream(region=nv.Region(y0, x0, y0 + wh, x0 + ww))
            subs.append(cs)
        with st.lock:
            imgs = st.decoder.decode(subs, params=st.params[gray], cuda_stream=stream.ptr)
        retry = []
        for i, img in zip(gpu_idx, imgs):
            if img is None:
                retry.append(i)
            else:
                a = cp.asarray(img)  # zero copy; the array keeps the nvImageCodec image alive
                results[i] = a if a.ndim == 3 else a[..., None]
        if retry:
            extra = [batch.pool.submit(cpu_one, i) for i in retry] if batch.pool is not None else None
            cpu_idx = cpu_idx + retry
            futures = (futures or []) + extra if extra is not None else futures
    if cpu_idx:
        host = [f.result() for f in futures] if futures is not None else [cpu_one(i) for i in cpu_idx]
        buf, offsets = _ring(batch).upload_many(host, stream)
        for i, arr, off in zip(cpu_idx, host, offsets):
            results[i] = buf[off:off + arr.nbytes].reshape(arr.shape)
    return [TensorListGPU(results, "HWC", list(batch.sources)[:n] or None)]


def _impl(kind):
    def run(op, batch, inputs, arg_inputs):
        return mixed_decode(op, kind, batch, inputs, arg_inputs)

    run.__name__ = f"mixed_{kind}"
    run.__doc__ = f"``fn.decoders.{kind}(device='mixed')``: nvImageCodec plus CPU threads."
    return run


for _kind in ("image", "image_random_crop", "image_crop", "image_slice"):
    register_gpu(f"decoders.{_kind}", devices=("mixed",))(_impl(_kind))
