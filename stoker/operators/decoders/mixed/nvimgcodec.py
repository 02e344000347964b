"""The mixed decoders' path through nvImageCodec, where the hardware engines are not used.

Headers are parsed as ``CodeStream`` s, windows cut as ROI code streams, and the GPU's JPEGs
decoded in one batched ``decode`` on the legacy stream; the CPU share and the formats it cannot
take decode on the pool (:func:`stoker.operators.decoders.mixed.common.cpu_one`).
"""
from __future__ import annotations

import dataclasses
import time

import numpy as np

from stoker.backend.nvjpeg import has_end_marker
from stoker.operators.decoders.mixed.common import (
    check_cpu_failures,
    clip,
    cpu_one,
    cupy_mod,
    header,
    nv,
    raises_on_error,
    strict_sound,
    window,
)

_GPU_CODECS = {"jpeg"}


@dataclasses.dataclass
class CodecBatch:
    """The host half's result for one batch on the nvImageCodec path (``batch.prepared``)."""

    n: int
    """Samples in the batch."""
    enc: list
    """The batch's encoded samples."""
    heads: list
    """Each sample's (code stream or None, codec, h, w)."""
    wins: list
    """Each GPU sample's window (y0, x0, h, w) or None (the whole image); None for the others."""
    gray: bool
    """Whether the output is one channel."""
    subs: list
    """The GPU samples' code streams, cut to their windows."""
    gpu_idx: list
    """Samples for nvImageCodec."""
    cpu_idx: list
    """Samples for the host: the formats nvImageCodec is not given, then the CPU share."""
    futures: list | None
    """The pool's futures of ``cpu_idx`` (None: decoded in the GPU stage)."""
    sources: list
    """The samples' sources (file names)."""
    imgs: list | None = None
    """nvImageCodec's images (None where it failed), when decoded in the CPU stage already."""
    retry: dict = dataclasses.field(default_factory=dict)
    """{sample: future of its host image} for those nvImageCodec failed in the CPU stage."""


def prepare_codec(op, kind, batch, enc, arg_inputs, st, gray: bool, on_gpu: bool, hints) -> CodecBatch:
    """Host half: parse headers, draw windows, cut ROI code streams, split the batch between
    nvImageCodec and the CPU, and start the CPU share on the pool."""
    codec = nv()
    n = len(enc)
    heads = [header(np.asarray(d)) for d in enc]
    wins: list = [None] * n
    # Images over the pixel or aspect limits go to the CPU decoder, which refuses them from the
    # header. So do JPEGs without an end marker: a GPU decoder may return a truncated one half-grey,
    # where the CPU decoder reports it (and on_error can skip it in the CPU stage).
    from stoker.operators.decoders.image import over_limits

    over = over_limits(op, [hd[2] for hd in heads], [hd[3] for hd in heads]).tolist() if heads else []
    gpu_idx = [i for i, hd in enumerate(heads) if hd[1] in _GPU_CODECS and has_end_marker(enc[i])
               and not over[i]] if on_gpu else []
    # (only readers.file's I/O process sends the check's flag: no bulk scan here for it)
    gpu_idx = strict_sound(op, enc, gpu_idx, hints, batch)
    n_cpu_jpeg = int(round(len(gpu_idx) * st.cpu_share))
    cpu_idx = sorted(set(range(n)) - set(gpu_idx)) + gpu_idx[len(gpu_idx) - n_cpu_jpeg:]
    gpu_idx = gpu_idx[:len(gpu_idx) - n_cpu_jpeg]
    subs = []
    for i in gpu_idx:
        cs, _, h, w = heads[i]
        wins[i] = window(op, kind, op.sample_args(arg_inputs, i), i, batch, h, w)
        if wins[i] is not None:
            y0, x0, wh, ww = clip(wins[i], h, w)
            cs = cs.get_sub_code_stream(region=codec.Region(y0, x0, y0 + wh, x0 + ww))
        subs.append(cs)
    args = (op, kind, batch, enc, heads, wins, arg_inputs, gray)
    if cpu_idx and batch.pool is not None:
        futures = [batch.pool.submit(cpu_one, *args, i) for i in cpu_idx]
        check_cpu_failures(op, batch, cpu_idx, futures)
    else:
        futures = None
    prep = CodecBatch(n=n, enc=enc, heads=heads, wins=wins, gray=gray, subs=subs, gpu_idx=gpu_idx,
                      cpu_idx=cpu_idx, futures=futures, sources=list(batch.sources))
    if gpu_idx and batch.pool is not None and not raises_on_error(op, batch):
        # Under skip/substitute the GPU decode runs here, in the CPU stage: a file nvImageCodec
        # cannot decode (bad entropy data behind good headers) is retried on the CPU now, and if
        # that fails too it is dropped and refilled before the GPU stage, where nothing can be.
        from stoker.backend import cuda

        prep.imgs = codec_call(st, prep, cuda.current_stream(batch))
        retry = [i for i, img in zip(gpu_idx, prep.imgs) if img is None]
        prep.retry = {i: batch.pool.submit(cpu_one, *args, i) for i in retry}
        check_cpu_failures(op, batch, retry, list(prep.retry.values()))
    return prep


def codec_call(st, prep: CodecBatch, stream) -> list:
    """nvImageCodec's decode of ``prep.subs``: its images (None where it failed), ordered
    before later work on ``stream``."""
    cp = cupy_mod()
    # nvImageCodec runs fastest on the legacy default stream (measured); the pipeline's stream
    # then waits for it through an event.
    t0 = time.perf_counter()
    with st.lock:
        st.retire(stream)
        imgs = st.decoder.decode(prep.subs, params=st.params[prep.gray], cuda_stream=0)
        st.in_use.append([imgs, None])
    st.stats.since("decode_call_s", t0)
    st.stats.add("batches", 1)
    ev = cp.cuda.Event(disable_timing=True)
    ev.record(cp.cuda.Stream.null)
    stream.wait_event(ev)
    return imgs


def finish_codec(op, kind, batch, prep: CodecBatch, arg_inputs, st, stream, t_start):
    """Device half: nvImageCodec's images (decoded now unless the CPU stage did), the failed
    ones retried on the host, and the host's images uploaded: a list ``TensorListGPU``."""
    from stoker.operators.transfer import device_views, pinned_ring
    from stoker.tensors_gpu import TensorListGPU

    cp = cupy_mod()
    n, gray, gpu_idx = prep.n, prep.gray, prep.gpu_idx
    cpu_idx, futures = list(prep.cpu_idx), prep.futures
    results: list = [None] * n
    pool = batch.pool

    def one(i):
        return cpu_one(op, kind, batch, prep.enc, prep.heads, prep.wins, arg_inputs, gray, i)

    if gpu_idx:
        imgs = prep.imgs if prep.imgs is not None else codec_call(st, prep, stream)
        retry = _place_images(cp, prep, imgs, results, batch.device_id or 0)
        if retry:
            cpu_idx += retry
            early = prep.retry  # started in the CPU stage (see prepare_codec)
            if futures is not None or early:
                futures = (futures or []) + [early[i] if i in early else pool.submit(one, i) for i in retry]
    if cpu_idx:
        host = [f.result() for f in futures] if futures is not None else [one(i) for i in cpu_idx]
        buf, offsets = pinned_ring(batch).upload_many(host, stream)
        for i, view in zip(cpu_idx, device_views(buf, offsets, host)):
            results[i] = view  # (a 16-bit PNG under ANY_DATA stays uint16)
    out = TensorListGPU(results, "HWC", prep.sources[:n] or None)
    st.stats.since("total_s", t_start)
    return [out]


def _place_images(cp, prep: CodecBatch, imgs, results: list, device_id: int) -> list:
    """Put nvImageCodec's images into ``results`` as CuPy views; returns the samples it failed."""
    retry = []
    for i, img in zip(prep.gpu_idx, imgs):
        if img is None:
            retry.append(i)
            continue
        a = wrap_image(cp, img, device_id)
        a = a if a.ndim == 3 else a[..., None]
        win = prep.wins[i]
        if win is not None:
            y0, x0, wh, ww = clip(win, prep.heads[i][2], prep.heads[i][3])
            if a.shape[0] != wh or a.shape[1] != ww:
                # a backend that ignored the ROI returned the whole image: crop a view
                a = a[y0:y0 + wh, x0:x0 + ww]
        results[i] = a
    return retry


def wrap_image(cp, img, device_id: int):
    """A CuPy view of a decoded nvImageCodec image, keeping the image alive.

    Built from the raw pointer rather than ``cp.asarray``: the image's
    ``__cuda_array_interface__`` names a stream, which would make CuPy
    synchronize on every sample; ordering is already handled by an event.
    """
    cai = img.__cuda_array_interface__
    shape = tuple(cai["shape"])
    strides = cai.get("strides")
    ptr = cai["data"][0]
    itemsize = np.dtype(cai["typestr"]).itemsize
    if strides is None:
        size = int(np.prod(shape)) * itemsize
    else:
        size = sum((n - 1) * st for n, st in zip(shape, strides)) + itemsize
    mem = cp.cuda.UnownedMemory(ptr, size, img, device_id)
    return cp.ndarray(shape, np.dtype(cai["typestr"]), cp.cuda.MemoryPointer(mem, 0), strides=strides)
