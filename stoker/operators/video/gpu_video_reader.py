"""``readers.video(device="gpu")``: frames decoded by NVDEC through PyNvVideoCodec.

Written without a GPU at hand: listed in ``gpu_registry.PENDING_GPU_MODULES``
until tests/gpu/test_video_gpu.py passes on one. Until then (or without
PyNvVideoCodec) a GPU video reader decodes on the CPU and copies the frames up
(``gpu_registry.host_fallback``).

The listing, windows, padding and the small outputs (label, frame numbers,
timestamps) are the CPU reader's (:class:`stoker.operators.readers.video.VideoReader`);
only the frames differ: each sample asks one ``SimpleDecoder`` for the frames
of its window (``get_batch_frames_by_index``: the decoder seeks to the key frame
before them itself), converted to interleaved RGB on the device, and copies
them into the sample's FHWC buffer on the pipeline's stream. Decoders are
kept per reader and re-pointed at the next clip (``reconfigure_decoder``), as
creating an NVDEC session costs milliseconds. Samples are decoded one after
the other: a decoder is not shared between threads.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from stoker.operators.gpu_registry import host_fallback, register_gpu


def _nvc():
    try:
        import PyNvVideoCodec as nvc
    except ImportError:
        return None
    return nvc


class _Decoders:
    """One PyNvVideoCodec SimpleDecoder per reader, re-pointed from clip to clip."""

    def __init__(self, nvc, stream_ptr: int, context: int, device_id: int):
        self.nvc = nvc
        self.stream_ptr = stream_ptr
        self.context = context
        self.device_id = device_id
        self.dec = None
        self.path = None

    def get(self, path: str):
        if self.dec is None:
            self.dec = self.nvc.SimpleDecoder(path, gpu_id=self.device_id, cuda_context=self.context,
                                              cuda_stream=self.stream_ptr, use_device_memory=True,
                                              output_color_type=self.nvc.OutputColorType.RGB)
        elif path != self.path:
            self.dec.reconfigure_decoder(path)
        self.path = path
        return self.dec


def _decoders(op, batch):
    from stoker.backend import cuda

    cp = cuda._cupy()
    stream = cuda.current_stream(batch)
    d = op.__dict__.get("_nvdec")
    if d is None or d.stream_ptr != stream.ptr:
        d = op.__dict__["_nvdec"] = _Decoders(_nvc(), stream.ptr, int(cp.cuda.driver.ctxGetCurrent()),
                                              batch.device_id or 0)
    return d


def _frame_array(cp, frame, h: int, w: int):
    """A decoded RGB frame as an (H, W, 3) CuPy view (no copy)."""
    try:
        arr = cp.from_dlpack(frame)
    except (TypeError, AttributeError, ValueError, RuntimeError):
        arr = cp.asarray(frame)
    return arr.reshape(h, w, 3)


def _decode_sample(op, decs, cp, ref):
    """One sample on the device: (FHWC frames, *host extras)."""
    clip, idx = op.window(ref)
    want = sorted({int(k) for k in idx if k >= 0})
    try:
        dec = decs.get(clip.path)
        frames = dec.get_batch_frames_by_index(want)
    except Exception as e:  # noqa: BLE001 - PyNvVideoCodec raises plain RuntimeError/Exception for bad streams
        raise OSError(f"cannot decode video {clip.path!r} with NVDEC: {e}") from None
    if len(frames) != len(want):
        raise OSError(f"cannot decode video {clip.path!r} with NVDEC: {len(frames)} of {len(want)} frames came out")
    h, w = clip.info.height, clip.info.width
    out = cp.zeros((idx.size, h, w, 3), cp.uint8)
    got = {k: _frame_array(cp, f, h, w) for k, f in zip(want, frames)}
    for j, k in enumerate(idx):
        if k >= 0:
            out[j] = got[int(k)]
    if op._dtype == np.float32:
        out = out.astype(cp.float32)
        if op.args["normalized"]:
            out *= cp.float32(1 / 255)
    return (out, *op.extras(clip, idx))


@register_gpu("readers.video", devices=("gpu",))
def run_gpu(op, batch, inputs, arg_inputs):
    """Decode the batch's windows with NVDEC; every output lands on the device."""
    from stoker.backend import cuda
    from stoker.tensors_gpu import TensorListGPU

    nvc = _nvc()
    if nvc is None:
        return host_fallback(op, batch, inputs, arg_inputs)
    cp = cuda._cupy()
    refs = batch.prepared
    sources = [op.sample_source(r) for r in refs]
    batch.sources = sources
    decs = _decoders(op, batch)
    serial = dataclasses.replace(batch, pool=None)  # same failures dict: on_error still applies
    results = op.map_samples(serial, len(refs), lambda k: _decode_sample(op, decs, cp, refs[k]))
    batch.failures.update(serial.failures)
    kept = [k for k in range(len(refs)) if results[k] is not None]
    layouts = op.output_layouts([])
    outs = []
    with cuda.current_stream(batch):
        for j in range(op.num_outputs):
            samples = [results[k][j] if j == 0 else cp.asarray(results[k][j]) for k in kept]
            outs.append(TensorListGPU(samples, layouts[j], [sources[k] for k in kept]))
    return outs

