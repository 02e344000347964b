"""``readers.video(device="gpu")``: frames decoded by NVDEC through PyNvVideoCodec.

Without PyNvVideoCodec a GPU video reader decodes on the CPU and copies the
frames up (``gpu_registry.host_fallback``).

Two halves, as the executor stages GPU operators:

* host half (:func:`prepare`, CPU stage): each sample's window (clip and frame
  indices, the CPU reader's :meth:`VideoReader.window`) and its clip's colour
  plan (:func:`color_plan`, from the stream's parameters, read once per clip).
  A clip that could not be listed or opened fails here, where ``on_error``
  skips or substitutes it as the CPU reader does; the GPU stage cannot.
* device half (:func:`run_gpu`, GPU stage): each sample asks one
  ``SimpleDecoder`` for the frames of its window in NVDEC's native NV12
  (``get_batch_frames_by_index``: the decoder seeks to the key frame before
  them itself), and one launch of ``video_color.cu``'s ``nv12_to_rgb`` per
  window converts them into the sample's FHWC buffer on the pipeline's stream.

Colours: NVDEC's own RGB conversion is not swscale's (frames were 3 levels
off the CPU reader's on average, tens at colour edges), so stoker converts:
the kernel repeats the CPU reader's swscale arithmetic step for step (matrix
and range of the stream, bilinear chroma at the codec's chroma siting, the
same integer rounding), and the frames equal the CPU reader's; the NumPy twin
in tests/operators/video/nv12_reference.py pins that down against PyAV.
Streams the kernel does not cover (not 8-bit 4:2:0, an unusual matrix) and
``image_type`` YCbCr or GRAY are decoded on the host for that sample and
copied up.

Decoders are kept per reader and re-pointed (``reconfigure_decoder``) at each
window's clip, as creating an NVDEC session costs milliseconds;
samples are decoded one after the other (a decoder is not shared between
threads), on the pipeline's stream, so that a decoder reusing its output
surfaces writes them only after the kernel has read them.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict

import numpy as np

from stoker import types
from stoker.operators.gpu_registry import grid_for, host_fallback, register_gpu, upload_table

# ff_yuv2rgb_coeffs (libswscale/yuv2rgb.c): crv, cbu, cgu, cgv by AVColorSpace. The CPU reader's
# swscale call reads the frame's colorspace; unspecified is BT.601 whatever the frame size.
_MATRICES = {
    1: (117489, 138438, 13975, 34925),  # BT.709
    2: (104597, 132201, 25675, 53279),  # unspecified -> BT.601
    3: (104597, 132201, 25675, 53279),  # reserved -> BT.601
    4: (104448, 132798, 24759, 53109),  # FCC
    5: (104597, 132201, 25675, 53279),  # BT.470BG
    6: (104597, 132201, 25675, 53279),  # SMPTE 170M
    7: (117579, 136230, 16907, 35559),  # SMPTE 240M
    9: (110013, 140363, 12277, 42626),  # BT.2020 non-constant
    10: (110013, 140363, 12277, 42626),  # BT.2020 constant (swscale's matrix is the same)
}
# Chroma siting: where a chroma sample sits after its first luma sample, in 1/256 of a luma pixel
# (av_chroma_location_enum_to_pos). FFmpeg's H.264/HEVC/MPEG-2/MPEG-4 decoders report "left"
# (co-sited with even luma columns) unless the stream says otherwise; VP8/VP9/AV1/MJPEG/MPEG-1 leave
# it to swscale's default, centred. Vertically every one of them is centred between two luma rows.
# (Measured against PyAV: tests/operators/video/test_nv12_color.py.)
_LEFT, _CENTER = 0, 128
_SITING = {"h264": _LEFT, "hevc": _LEFT, "mpeg2video": _LEFT, "mpeg4": _LEFT,
           "vp8": _CENTER, "vp9": _CENTER, "av1": _CENTER, "libdav1d": _CENTER, "mjpeg": _CENTER,
           "mpeg1video": _CENTER}
_NV12_SOURCES = ("yuv420p", "yuvj420p", "nv12")


@dataclasses.dataclass(frozen=True)
class ColorPlan:
    """How one clip's NV12 frames become the CPU reader's RGB: swscale's six yuv2rgb coefficients
    (y_offset, y_coeff, v2r, v2g, u2g, u2b) and the chroma siting (0 left or top, 128 centre)."""

    coef: tuple[int, int, int, int, int, int]
    h_siting: int
    v_siting: int = 128


def _r16(v: int) -> int:
    """libswscale's roundToInt16."""
    return max(-0x8000, min(0x7FFF, (v + (1 << 15)) >> 16))


def _cdiv(a: int, b: int) -> int:
    """C's integer division (towards zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def yuv2rgb_coefficients(colorspace: int, full_range: bool) -> tuple[int, int, int, int, int, int] | None:
    """swscale's full-chroma coefficients (``ff_yuv2rgb_c_init_tables``, no brightness, contrast or
    saturation change) for an AVColorSpace and range; None for a matrix this path leaves to the host."""
    m = _MATRICES.get(int(colorspace))
    if m is None:
        return None
    crv, cbu, cgu, cgv = m[0], m[1], -m[2], -m[3]
    cy, oy = 1 << 16, 0
    if full_range:
        crv, cbu, cgu, cgv = (_cdiv(c * 224, 255) for c in (crv, cbu, cgu, cgv))
    else:
        cy, oy = _cdiv(cy * 255, 219), 16 << 16
    return (_r16(oy << 9), _r16(cy << 13), _r16(crv << 13), _r16(cgv << 13), _r16(cgu << 13), _r16(cbu << 13))


def color_plan(codec: str, pix_fmt: str | None, colorspace: int, color_range: int) -> ColorPlan | None:
    """The kernel's plan for a stream (PyAV's codec name, pixel format, AVColorSpace and
    AVColorRange: 2 is full, else limited), or None where the kernel does not reproduce the CPU
    reader (decode that clip on the host): not 8-bit 4:2:0, or an unknown codec or matrix."""
    siting = _SITING.get(codec)
    if siting is None or pix_fmt not in _NV12_SOURCES:
        return None
    coef = yuv2rgb_coefficients(colorspace, color_range == 2 or pix_fmt == "yuvj420p")
    return None if coef is None else ColorPlan(coef, siting)


def chroma_taps(n_src: int, n_dst: int, siting: int, one: int) -> np.ndarray:
    """swscale's 2-tap bilinear upsampling filter from ``n_src`` chroma samples to ``n_dst`` pixels
    (``initFilter`` with SWS_BILINEAR): int32 (4, n_dst) rows: first sample, second sample (indices
    clamped to the edge), their integer weights summing to ``one`` (rounded with swscale's error
    diffusion). ``siting``: the chroma sample's offset from its first luma sample in 1/256 of a pixel."""
    inc = ((n_src << 16) + (n_dst >> 1)) // n_dst
    src_pos = (siting + 128) >> 1  # swscale's get_local_pos for 2x subsampling; the RGB side is 128
    pos = ((128 * inc) >> 8) - ((src_pos * 0x8000) >> 7) + np.arange(n_dst, dtype=np.int64) * inc
    first, frac = pos >> 16, pos & 0xFFFF
    fone = np.int64(1) << 54
    c0 = np.maximum(fone - frac * (fone >> 16), 0)
    c1 = np.maximum(fone - ((1 << 16) - frac) * (fone >> 16), 0)
    s = np.maximum((c0 + c1 + one // 2) // one, 1)
    w0 = (c0 + s // 2) // s
    rest = c1 + (c0 - w0 * s)
    w1 = np.where(rest >= 0, (rest + s // 2) // s, -((-rest + s // 2) // s))
    out = np.stack([np.clip(first, 0, n_src - 1), np.clip(first + 1, 0, n_src - 1), w0, w1])
    return out.astype(np.int32)


# --- host half ------------------------------------------------------------------------------------

@dataclasses.dataclass
class _Plan:
    """The host half's result for one batch (``batch.prepared`` in the GPU stage)."""

    refs: list
    windows: list  # (clip, frame indices) per sample
    colors: list  # ColorPlan, or None: decode that sample on the host
    sources: list


def _stream_color(op, clip) -> ColorPlan | None:
    """``clip``'s colour plan, read from its stream's parameters once per reader."""
    cache = op.__dict__.setdefault("_nv12_colors", {})
    if clip.path not in cache:
        from stoker.operators.video import pyav

        av = pyav.require_av()
        try:
            with av.open(clip.path) as c:
                cc = c.streams.video[0].codec_context
                fmt = cc.format.name if cc.format is not None else None
                cache[clip.path] = color_plan(cc.name, fmt, int(cc.colorspace), int(cc.color_range))
        except (av.FFmpegError, IndexError, ValueError) as e:
            raise OSError(f"cannot read video {clip.path!r}: {e}") from None
    return cache[clip.path]


def _sample_plan(op, ref):
    clip, idx = op.window(ref)  # raises OSError for a clip that could not be listed
    color = _stream_color(op, clip) if op.args["image_type"] in (types.RGB, types.BGR) else None
    return clip, idx, color


def _build(op, ctx, refs: list) -> _Plan:
    ctx.sources = [op.sample_source(r) for r in refs]
    got = op.map_samples(ctx, len(refs), lambda k: _sample_plan(op, refs[k]))
    ok = [g for g in got if g is not None]
    return _Plan(list(refs), [(c, i) for c, i, _ in ok], [p for _, _, p in ok], list(ctx.sources))


def prepare(op, ctx, inputs, arg_inputs):
    """Host half: every sample's window and colour plan; a sample that fails is recorded for the
    executor (which skips and refills, or substitutes, and prepares the batch again)."""
    from stoker.operators.readers.gpu_numpy import batch_refs, record_failures

    op.__dict__.setdefault("_gpu_refs", defaultdict(list))
    refs = batch_refs(op, ctx)
    plan = _build(op, ctx, refs)
    if ctx.failures:
        return record_failures(op, ctx, refs, op.args.get("on_error") or ctx.on_error)
    return plan


# --- device half ----------------------------------------------------------------------------------

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
                                              output_color_type=self.nvc.OutputColorType.NATIVE)
        else:
            # Re-pointed for every window, the same clip's included: a decoder asked to go on where
            # its last window stopped can hand back a frame it decoded ahead in place of the first
            # one asked (PyNvVideoCodec 2.2.4, H.264 with B-frames a few frames before a key frame:
            # frame 12 for 5, 23 for 18 at GOP 10, whatever decoder_cache_size). A re-pointed
            # decoder seeks to the key frame and decodes from there, which is always right.
            self.path = None  # (a reconfigure that raises leaves no clip to continue from)
            self.dec.reconfigure_decoder(path)
        self.path = path
        return self.dec

    def drop(self) -> None:
        """Forget the decoder after it failed: the next sample starts a fresh session."""
        self.dec = self.path = None


def _decoders(op, batch):
    from stoker.backend import cuda

    cp = cuda.cupy()
    stream = cuda.current_stream(batch)
    d = op.__dict__.get("_nvdec")
    if d is None or d.stream_ptr != stream.ptr:
        d = op.__dict__["_nvdec"] = _Decoders(_nvc(), stream.ptr, int(cp.cuda.driver.ctxGetCurrent()),
                                              batch.device_id or 0)
    return d


def nv12_planes(cp, frame, h: int) -> tuple[int, int, int, int]:
    """``(y_ptr, y_pitch, uv_ptr, uv_pitch)`` of a decoded NV12 frame: its planes' CUDA array
    interfaces (``frame.cuda()``) where it has them, else its DLPack view, (H * 3 / 2, W) rows of
    luma then interleaved chroma."""
    views = frame.cuda() if callable(getattr(frame, "cuda", None)) else None
    if views is not None and len(views) >= 2:
        out = []
        for v in views[:2]:
            cai = v.__cuda_array_interface__
            shape, strides = cai["shape"], cai.get("strides")
            row = strides[0] if strides else int(np.prod(shape[1:], dtype=np.int64))
            out += [int(cai["data"][0]), int(row)]
        return tuple(out)
    arr = cp.from_dlpack(frame)
    ptr, pitch = int(arr.data.ptr), int(arr.strides[0])
    return ptr, pitch, ptr + h * pitch, pitch


def _decode_nv12(op, decs, cp, plan: _Plan, k: int, batch, keep: list):
    """Sample ``k`` on the device: (FHWC frames, *host extras), converted by one kernel launch."""
    from stoker.backend import cuda

    clip, idx = plan.windows[k]
    color = plan.colors[k]
    want = sorted({int(i) for i in idx if i >= 0})
    try:
        frames = decs.get(clip.path).get_batch_frames_by_index(want)
    except Exception as e:  # noqa: BLE001 - PyNvVideoCodec raises plain RuntimeError/Exception for bad streams
        decs.drop()
        raise OSError(f"cannot decode video {clip.path!r} with NVDEC: {e}") from None
    if len(frames) != len(want):
        raise OSError(f"cannot decode video {clip.path!r} with NVDEC: {len(frames)} of {len(want)} frames came out")
    keep.append(frames)  # (the kernel reads them after this returns: held until it has run)
    h, w = clip.info.height, clip.info.width
    dtype = cp.float32 if op._dtype == np.float32 else cp.uint8
    out = cp.zeros((idx.size, h, w, 3), dtype)
    got = {i: nv12_planes(cp, f, h) for i, f in zip(want, frames)}
    real = [j for j in range(idx.size) if idx[j] >= 0]
    itab = np.empty((len(real), 5), np.int64)
    per = h * w * 3 * out.itemsize
    for r, j in enumerate(real):
        itab[r, :4] = got[int(idx[j])]
        itab[r, 4] = out.data.ptr + j * per
    taps = _taps(op, cp, h, w, color)
    kind = (1 if op.args["image_type"] == types.BGR else 0) | (2 if dtype == cp.float32 else 0)
    kind |= 4 if dtype == cp.float32 and op.args["normalized"] else 0
    if not real:
        return (out, *op.extras(clip, idx))
    grid, block = grid_for(h * w, len(real))
    cuda.load_kernel("video_color", "nv12_to_rgb")(
        grid, block, (upload_table(itab, batch), taps[0], taps[1], np.int32(h), np.int32(w), taps[2],
                      np.int32(kind), np.float32(1 / 255)))
    return (out, *op.extras(clip, idx))


def _taps(op, cp, h: int, w: int, color: ColorPlan):
    """Device tables (columns, rows, coefficients) for one frame size and colour plan, kept per reader."""
    cache = op.__dict__.setdefault("_nv12_taps", {})
    key = (h, w, color)
    if key not in cache:
        ch, cw = (h + 1) // 2, (w + 1) // 2
        cache[key] = (cp.asarray(chroma_taps(cw, w, color.h_siting, 1 << 14)),
                      cp.asarray(chroma_taps(ch, h, color.v_siting, 1 << 12)),
                      cp.asarray(np.asarray(color.coef, np.int32)))
    return cache[key]


def _decode_on_host(op, cp, plan: _Plan, k: int):
    """Sample ``k`` decoded by the CPU reader, its frames copied up (streams the kernel does not cover)."""
    out = op.load_sample(plan.refs[k])
    return (cp.asarray(out[0]), *out[1:])


@register_gpu("readers.video", devices=("gpu",), prepare=prepare)
def run_gpu(op, batch, inputs, arg_inputs):
    """Decode the batch's windows with NVDEC; every output lands on the device."""
    from stoker.backend import cuda
    from stoker.tensors_gpu import TensorListGPU

    plan = batch.prepared if isinstance(batch.prepared, _Plan) else None
    if plan is not None:
        op.__dict__.get("_gpu_refs", {}).pop(batch.iteration, None)
    nvc = _nvc()
    if nvc is None:
        if plan is not None:
            batch.prepared = plan.refs  # (what run_cpu reads)
        return host_fallback(op, batch, inputs, arg_inputs)
    cp = cuda.cupy()
    if plan is None:  # (no host half ran: a bad clip raises here)
        plan = _build(op, dataclasses.replace(batch, pool=None), list(batch.prepared))
    batch.sources = plan.sources
    decs = _decoders(op, batch)
    keep: list = []
    serial = dataclasses.replace(batch, pool=None)  # same failures dict: on_error still applies

    def one(k):
        if plan.colors[k] is None:
            return _decode_on_host(op, cp, plan, k)
        return _decode_nv12(op, decs, cp, plan, k, batch, keep)

    held = op.__dict__.pop("_nvdec_held", None)
    if held is not None:  # the last batch's frames, read by kernels that have long finished
        held[0].synchronize()
    results = op.map_samples(serial, len(plan.refs), one)
    if keep:
        ev = cp.cuda.Event(disable_timing=True)
        ev.record(cuda.current_stream(batch))
        op.__dict__["_nvdec_held"] = (ev, keep)
    batch.failures.update(serial.failures)
    kept = [k for k in range(len(plan.refs)) if results[k] is not None]
    layouts = op.output_layouts([])
    outs = []
    with cuda.current_stream(batch):
        for j in range(op.num_outputs):
            samples = [results[k][j] if j == 0 else cp.asarray(results[k][j]) for k in kept]
            outs.append(TensorListGPU(samples, layouts[j], [plan.sources[k] for k in kept]))
    return outs
