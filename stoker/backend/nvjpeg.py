"""nvJPEG's hardware JPEG engines, called through ctypes: one C call decodes a whole batch.

Why not only nvImageCodec: its Python binding creates a Python object per image
and hands the GIL back and forth for each, so a batch decode beside stoker's
other threads runs 4x slower than alone. Here the batch is one foreign call
(``ctypes.CDLL`` drops the GIL for it) and the per-image set-up calls go through
``ctypes.PyDLL`` (they keep the GIL: microseconds each, with no hand-over to wait
for). benchmarks/nvjpeg_probe.py measures it (figures in benchmarks/RESULTS.md).

The hardware engines take baseline (sequential Huffman) colour and grayscale JPEGs;
:func:`hardware_eligible` picks those, the rest go to nvImageCodec or the CPU.

The mixed decoders use it by default on GPUs that have the engines
(``STOKER_NVJPEG_HW=0`` turns it off); see stoker/operators/decoders/mixed/ (README.md there).
"""

from __future__ import annotations

import ctypes
import glob
import os
import sys
import threading
import time

import numpy as np

from stoker import settings
from stoker.backend.jpeg_header import has_end_marker, jpeg_frame

_BACKEND_GPU_HYBRID = 2
_BACKEND_HARDWARE = 3
_OUTPUT_RGBI = 5


class NvjpegUnavailable(RuntimeError):
    """nvJPEG or its hardware decoder cannot be used here."""


class _Image(ctypes.Structure):
    _fields_ = [("channel", ctypes.c_void_p * 4), ("pitch", ctypes.c_size_t * 4)]


_VP, _INT, _PVP = ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p)
_SIGNATURES = {
    "nvjpegCreateEx": (_INT, _VP, _VP, ctypes.c_uint, _PVP),
    "nvjpegJpegStateCreate": (_VP, _PVP),
    "nvjpegJpegStateDestroy": (_VP,),
    "nvjpegDestroy": (_VP,),
    "nvjpegDecodeBatchedInitialize": (_VP, _VP, _INT, _INT, _INT),
    "nvjpegDecodeParamsCreate": (_VP, _PVP),
    "nvjpegDecodeParamsDestroy": (_VP,),
    "nvjpegDecodeParamsSetOutputFormat": (_VP, _INT),
    "nvjpegDecodeParamsSetROI": (_VP, _INT, _INT, _INT, _INT),
    "nvjpegDecodeBatchedEx": (_VP, _VP, _PVP, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(_Image), _PVP, _VP),
    "nvjpegDecodeBatched": (_VP, _VP, _PVP, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(_Image), _VP),
}


def _library_path() -> str:
    for base in sys.path:
        for pattern in ("nvidia/*/lib/libnvjpeg.so*", "nvidia/*/*/lib/libnvjpeg.so*"):
            found = sorted(glob.glob(os.path.join(base, pattern)))
            if found:
                return found[0]
    for path in sorted(glob.glob("/usr/local/cuda*/lib64/libnvjpeg.so*")):
        return path
    raise NvjpegUnavailable("libnvjpeg was not found (pip install nvidia-nvjpeg)")


_libs: tuple | None = None
_libs_lock = threading.Lock()


def _load():
    """(releasing, holding): the library with calls that drop the GIL, and with calls that keep it."""
    global _libs
    with _libs_lock:
        if _libs is None:
            path = _library_path()
            pair = []
            for loader in (ctypes.CDLL, ctypes.PyDLL):
                lib = loader(path)
                for name, args in _SIGNATURES.items():
                    fn = getattr(lib, name)
                    fn.argtypes = list(args)
                    fn.restype = ctypes.c_int
                pair.append(lib)
            _libs = tuple(pair)
    return _libs


def _check(status: int, what: str) -> None:
    if status != 0:
        raise NvjpegUnavailable(f"{what} failed (nvjpegStatus {status})")


def hardware_eligible(data: np.ndarray) -> tuple[int, int] | None:
    """(height, width) when the JPEG suits the hardware engines: baseline or extended sequential
    Huffman, 3 components or 1 (grayscale), 8-bit, no EXIF (orientation is applied elsewhere),
    ending with an end-of-image marker (the engines may not report a truncated stream).
    Otherwise None.

    Grayscale: the engines write it as RGB with the three channels equal, as the CPU decoders do
    (identical to OpenCV's decode on an H100: tests/operators/decoders/test_mixed_decode_gpu.py). About
    3 % of the benchmark set is grayscale; those used to take helper-process time instead."""
    if not has_end_marker(data):
        return None  # truncated: left to the CPU decoder, which reports it
    frame = jpeg_frame(data)
    if frame is None:
        return None
    marker, precision, h, w, comps = frame
    return (h, w) if marker in _ENGINE_MARKERS and precision == 8 and comps in _ENGINE_COMPONENTS and h and w \
        else None


# The engines' rule (hardware_eligible and hardware_eligible_hints): baseline or extended
# sequential Huffman frames of 1 or 3 components.
_ENGINE_MARKERS = (0xC0, 0xC1)
_ENGINE_COMPONENTS = (1, 3)


def hardware_eligible_hints(hints) -> np.ndarray:
    """:func:`hardware_eligible` for a whole batch from its frame hints (an (N, 6) array of
    :func:`stoker.backend.jpeg_header.frame_hint` rows, as the file reader's I/O process
    sends them): a boolean mask, with the same rule and no Python step per sample."""
    h = np.asarray(hints, np.int64)
    h = h.reshape(-1, h.shape[-1] if h.ndim > 1 else 6)  # (6 columns, or 7 with the structure flag)
    return (np.isin(h[:, 0], _ENGINE_MARKERS) & (h[:, 1] == 8) & np.isin(h[:, 4], _ENGINE_COMPONENTS)
            & (h[:, 2] > 0) & (h[:, 3] > 0) & (h[:, 5] == 1))


_pad: list = []


def _pad_jpeg() -> np.ndarray | None:
    """An 8x8 baseline colour JPEG (4:2:0, made once with OpenCV) to fill a batched call's unused
    slots; None where OpenCV cannot encode one."""
    if not _pad:
        try:
            import cv2

            ok, enc = cv2.imencode(".jpg", np.full((8, 8, 3), 128, np.uint8), [cv2.IMWRITE_JPEG_QUALITY, 50])
            _pad.append(np.ascontiguousarray(enc.reshape(-1)) if ok and hardware_eligible(enc.reshape(-1)) else None)
        except Exception:  # noqa: BLE001 - any failure: pad with the batch's first image instead
            _pad.append(None)
    return _pad[0]


def _root_buffer(a: np.ndarray):
    """The object that owns ``a``'s memory (an array's base chain followed to its end)."""
    while isinstance(a, np.ndarray) and a.base is not None:
        a = a.base
    return a


class StagedCall:
    """The argument arrays of one batched call, built ahead of it by :meth:`HardwareDecoder.stage`
    so that the thread feeding the engines runs almost no Python between calls."""

    __slots__ = ("n", "real", "image_table", "args", "param_set", "keep", "pinned", "copied")


class PinnedStaging:
    """Pinned host blocks that a call's encoded bytes are copied into when it is staged.

    Why: from ordinary (pageable) memory nvJPEG's batched call copies the bitstreams itself, on
    the thread that feeds the engines, which is the decode path's bottleneck. From pinned memory
    the call costs that thread less CPU and the engines run faster (benchmarks/engines_probe.py
    --pinned; figures in benchmarks/RESULTS.md). :meth:`HardwareDecoder.stage`
    starts the copy on the decoder's copy thread. A block is reused once an event recorded after
    its call has completed (``STOKER_NVJPEG_PINNED=0``: no staging)."""

    _GRAIN = 1 << 22  # block sizes are multiples of 4 MiB

    def __init__(self, cp):
        self.cp = cp
        self.lock = threading.Lock()
        self.free: list = []  # (size, memory)
        self.busy: list = []  # (event or None while its call has not run, size, memory)
        self.size = 0  # every new block's size: the largest request so far, rounded up
        self.allocations = 0  # blocks made (for benchmarks: steady once every block is large)

    def take(self, nbytes: int):
        """A block of at least ``nbytes`` for a call being staged: (size, pinned memory), busy
        until :meth:`release`. Blocks are made as large as the largest call so far (pinning
        memory is slow and stalls the device), and kept: there are only as many as calls staged
        or running at once."""
        with self.lock:
            still = []
            for ev, size, mem in self.busy:
                if ev is not None and ev.done:
                    self.free.append((size, mem))
                else:
                    still.append((ev, size, mem))
            self.busy = still
            self.size = max(self.size, -(-nbytes // self._GRAIN) * self._GRAIN)
            self.free = [b for b in self.free if b[0] >= self.size]  # outgrown: back to CuPy's pool
            if self.free:
                block = self.free.pop()
            else:
                self.allocations += 1
                block = self.size, self.cp.cuda.alloc_pinned_memory(self.size)
            self.busy.append((None, *block))  # staged, its call not yet run
        return block

    def release(self, block, event) -> None:
        """``block``'s call has been issued (``event`` recorded after it) or dropped (None)."""
        with self.lock:
            self.busy = [b for b in self.busy if b[2] is not block[1]]
            if event is None:
                self.free.append(block)
            else:
                self.busy.append((event, *block))


class HardwareDecoder:
    """Batched ROI decoding to interleaved RGB on one GPU's hardware JPEG engines.

    A call is built in two steps: :meth:`stage` (any thread, ahead of time: pointers, lengths,
    per-image ROI parameters, padding) and :meth:`run` (the thread that owns the decoder: the
    output pointers, then the one GIL-free nvJPEG call). Why: with the per-image set-up on the
    calling thread, a Python thread beside the calls halved the engines' rate
    (benchmarks/engines_probe.py), because that thread waits for the GIL before and after each
    call while the engines idle."""

    backend = _BACKEND_HARDWARE

    def __init__(self, device_id: int, share_handle: HardwareDecoder | None = None):
        """``share_handle``: another decoder of the same backend and GPU whose nvJPEG handle this
        one uses (with a state of its own, which is what nvJPEG asks of threads decoding at once);
        that decoder must be closed after this one."""
        self.releasing, self.holding = _load()
        # nvjpegDecodeParamsSetROI runs once per image per batch, so it skips ctypes' argument
        # conversion (argtypes): the handle is passed as a c_void_p, the four ints as C ints.
        self._set_roi = ctypes.PyDLL(self.holding._name).nvjpegDecodeParamsSetROI
        self._set_roi.restype = ctypes.c_int
        from stoker.backend.cuda import cupy

        self.cp = cupy()
        self.device_id = device_id
        self._owns_handle = share_handle is None
        with self.cp.cuda.Device(device_id):
            if share_handle is not None:
                self.handle = share_handle.handle
            else:
                self.handle = ctypes.c_void_p()
                # (the GIL is let go: starting the hardware backend takes about half a second)
                _check(self.releasing.nvjpegCreateEx(self.backend, None, None, 0, ctypes.byref(self.handle)),
                       f"nvjpegCreateEx(backend {self.backend})")
            self.state = ctypes.c_void_p()
            _check(self.holding.nvjpegJpegStateCreate(self.handle, ctypes.byref(self.state)), "nvjpegJpegStateCreate")
        # Sets of per-image decode parameters (ROI): one per staged call not yet run.
        self._free_params: list[list[ctypes.c_void_p]] = []
        self._all_params: list[ctypes.c_void_p] = []
        self._params_lock = threading.Lock()
        self._staging = PinnedStaging(self.cp) if settings.get().nvjpeg_pinned else None
        self._copier = None  # the thread that copies staged bitstreams into pinned blocks
        self._pad_out = None  # device scratch the padding images decode into (their pixels unused)
        self._pad_retired: list = []  # smaller scratch buffers replaced while calls may use them
        self.batch = 0
        self.last_run = (0.0, 0.0, 0.0)  # the last call's waits (staging copy, stream) and nvJPEG time
        # Host threads nvJPEG may use to parse a batch (one per core: what the probe measured best).
        self.threads = settings.get().nvjpeg_threads or os.cpu_count() or 4

    def _ensure(self, n: int) -> None:
        """Ready the state for a call of ``n`` images, from the calling thread."""
        # nvJPEG allocates in the calling thread's current context, which a thread that has made no
        # CUDA runtime call yet lacks (CuPy's Device() does not bind it when the device number
        # already matches): the call then fails with status 5 (allocator failure). Seen when a
        # batch needed no padding (no CuPy allocation on that thread before the call).
        self.cp.cuda.runtime.setDevice(self.device_id)
        if n != self.batch:
            _check(self.releasing.nvjpegDecodeBatchedInitialize(self.handle, self.state, n, self.threads,
                                                                _OUTPUT_RGBI),
                   "nvjpegDecodeBatchedInitialize")
            self.batch = n

    def _param_set(self, n: int) -> list[ctypes.c_void_p]:
        with self._params_lock:
            for k, params in enumerate(self._free_params):
                if len(params) >= n:
                    return self._free_params.pop(k)
        params = []
        for _ in range(n):
            p = ctypes.c_void_p()
            _check(self.holding.nvjpegDecodeParamsCreate(self.handle, ctypes.byref(p)), "nvjpegDecodeParamsCreate")
            _check(self.holding.nvjpegDecodeParamsSetOutputFormat(p, _OUTPUT_RGBI), "SetOutputFormat")
            params.append(p)
        with self._params_lock:
            self._all_params += params
        return params

    def _give_back(self, call: StagedCall) -> None:
        if call.param_set is not None:
            with self._params_lock:
                self._free_params.append(call.param_set)
            call.param_set = None

    def stage(self, datas: list[np.ndarray], windows, fixed_batch: int = 0, located=None) -> StagedCall:
        """Build the arguments of a call that decodes ``datas[i]`` cropped to ``windows[i]`` =
        (y, x, h, w); :meth:`run` makes it. Safe from any thread, also while a call runs.

        ``located``: (addresses, byte sizes) of ``datas`` as two arrays, when the caller knows
        they all lie in one buffer (a file reader's batch): that spares a Python step per image,
        which waits for the GIL in a busy pipeline.

        ``fixed_batch``: pad the call to this many images so that nvJPEG's batched state is
        initialized once, not for every batch size. The padding is a tiny 8x8 JPEG
        (:func:`_pad_jpeg`) decoded into scratch memory: the engines decode every bitstream whole
        (a window only limits what is written), so padding with a real image cost as much as
        decoding one (a 256-slot call took 15.5-16.7 ms on an H100 for 165-235 real images).
        """
        real = len(datas)
        windows = np.asarray(windows, dtype=np.int64).reshape(real, 4)
        n = max(real, fixed_batch) if real else 0
        pad = n - real
        datas = list(datas)
        if pad:
            filler = _pad_jpeg()
            if filler is None:  # no encoder: the first image, decoded to an 8x8 corner
                filler = datas[0]
                ph, pw = int(min(8, windows[0, 0] + windows[0, 2])), int(min(8, windows[0, 1] + windows[0, 3]))
            else:
                ph = pw = 8
            if self._pad_out is None or self._pad_out.size < pad * 192:
                # Calls staged or running may still write into the old scratch (on their own
                # streams, not the one it was allocated on): it is kept, never handed back.
                if self._pad_out is not None:
                    self._pad_retired.append(self._pad_out)
                with self.cp.cuda.Device(self.device_id):
                    self._pad_out = self.cp.empty(max(pad, fixed_batch) * 192, dtype=self.cp.uint8)
            datas += [filler] * pad
            windows = np.concatenate([windows, np.tile([0, 0, ph, pw], (pad, 1))])
        call = StagedCall()
        call.n, call.real, call.keep, call.pinned, call.copied = n, real, datas, None, None
        # The argument arrays are NumPy arrays seen through ctypes (no per-image ctypes assignment).
        if located is not None:
            sizes = np.concatenate([np.asarray(located[1], np.uint64).reshape(real),
                                    np.full(pad, datas[-1].nbytes if pad else 0, np.uint64)])
            data_ptrs = np.concatenate([np.asarray(located[0], np.uint64).reshape(real),
                                        np.full(pad, datas[-1].ctypes.data if pad else 0, np.uint64)])
            groups = [np.arange(real), np.arange(real, n)]  # the buffer, and the padding
        else:
            sizes = np.fromiter((d.nbytes for d in datas), np.uint64, n)
            data_ptrs = np.fromiter((d.ctypes.data for d in datas), np.uint64, n)
            groups = None
        if self._staging is not None and n:
            data_ptrs = self._stage_bytes(call, datas, data_ptrs, sizes, groups)
        call.image_table = np.zeros((n, 8), np.uint64)  # nvjpegImage_t: channel[4], pitch[4]
        call.image_table[:, 4] = windows[:, 3] * 3
        if pad:  # the padding's pixels land in scratch, 192 bytes apart
            call.image_table[real:, 0] = self._pad_out.data.ptr + np.arange(pad, dtype=np.uint64) * 192
        call.param_set = self._param_set(n)
        set_roi = self._set_roi
        for p, (y, x, h, w) in zip(call.param_set, windows.tolist()):
            if set_roi(p, x, y, w, h) != 0:
                self._give_back(call)
                _check(1, "nvjpegDecodeParamsSetROI")
        param_ptrs = np.fromiter((p.value for p in call.param_set[:n]), np.uint64, n)
        call.args = ((ctypes.c_void_p * n).from_buffer(data_ptrs), (ctypes.c_size_t * n).from_buffer(sizes),
                     (_Image * n).from_buffer(call.image_table), (ctypes.c_void_p * n).from_buffer(param_ptrs))
        return call

    def _stage_bytes(self, call: StagedCall, datas: list, ptrs: np.ndarray, sizes: np.ndarray,
                     groups: list | None = None) -> np.ndarray:
        """Start copying the call's bitstreams into a pinned block; returns their pointers there
        (``call.copied`` is the copy's future: :meth:`run` waits for it).

        Samples that are views of one buffer (a reader's batch: one shared mapping) are copied as
        the one span that covers them, in a single GIL-free ``memmove``: copying them one by one
        gave the GIL up and back per sample, and the training pipeline lost 10 % on an H100.
        The copy runs on a thread of its own: on the CPU stage's thread it took
        about 4 ms of the stage's 16.7 per batch, and the CPU stage set the training pipeline's
        pace (benchmarks/gpu_stage_profile.py on an H100)."""
        if groups is None:  # (``groups``: sample positions by buffer, when the caller knows them)
            by_root: dict = {}
            for i, d in enumerate(datas):
                by_root.setdefault(id(_root_buffer(d)), []).append(i)
            groups = list(by_root.values())
        spans = []  # (source start, length, sample indices)
        for idx in groups:
            idx = np.asarray(idx, np.int64)
            if not idx.size:
                continue
            lo, hi = int(ptrs[idx].min()), int((ptrs[idx] + sizes[idx]).max())
            if hi - lo <= 2 * int(sizes[idx].sum()) + (1 << 16):  # close together: one copy
                spans.append((lo, hi - lo, idx))
            else:
                spans += [(int(ptrs[i]), int(sizes[i]), idx[k:k + 1]) for k, i in enumerate(idx)]
        call.pinned = self._staging.take(sum(length for _, length, _ in spans))
        dst = ctypes.addressof(ctypes.c_char.from_buffer(call.pinned[1]))
        out = np.empty_like(ptrs)
        copies, pos = [], 0
        for lo, length, idx in spans:
            copies.append((dst + pos, lo, length))
            out[idx] = dst + pos + (ptrs[idx] - lo)
            pos += length

        def copy():
            for to, src, length in copies:
                ctypes.memmove(to, src, length)

        if getattr(self, "_copier", None) is None:
            from concurrent.futures import ThreadPoolExecutor

            self._copier = ThreadPoolExecutor(1, thread_name_prefix="stoker-nvjpeg-copy")
        call.copied = self._copier.submit(copy)  # call.keep holds the sources until it is done
        return out

    def run(self, call: StagedCall, dst_ptrs, stream, ready=None) -> None:
        """Make a staged call, its ``i``-th image written to the device memory at ``dst_ptrs[i]``
        (rows of ``w * 3`` bytes), in stream order on ``stream``. Raises NvjpegUnavailable when
        nvJPEG refuses the batch (the caller decodes those images another way). The decoder's GPU
        stays the calling thread's current device afterwards (switching back could create a
        context on another GPU): call from a thread that works on that GPU.

        The hardware engines write their output when the call is made, whatever is still queued
        on ``stream`` (nvJPEG's hardware backend disregards stream order for its writes:
        tests/backend/test_nvjpeg_order_gpu.py; torchcodec's pull request 1634 found the same). So the
        host first waits for ``ready`` (a CuPy event after which the destination is free) or,
        without one, for ``stream``. Work queued on ``stream`` after the call sees the output."""
        try:
            if call.n == 0:
                return
            call.image_table[:call.real, 0] = np.asarray(dst_ptrs, dtype=np.int64).reshape(call.real)
            self._ensure(call.n)
            t0 = time.perf_counter()
            if call.copied is not None:
                call.copied.result()
            t1 = time.perf_counter()
            # STOKER_NVJPEG_HOST_WAIT=0 drops this wait only to measure what it costs: without
            # it the engines may overwrite memory that earlier work on the stream still reads.
            if self.backend == _BACKEND_HARDWARE and settings.get().nvjpeg_host_wait:
                (ready if ready is not None else stream).synchronize()
            t2 = time.perf_counter()
            status = self.releasing.nvjpegDecodeBatchedEx(self.handle, self.state, *call.args,
                                                          ctypes.c_void_p(stream.ptr))
            self.last_run = (t1 - t0, t2 - t1, time.perf_counter() - t2)  # for benchmarks
        finally:
            self._give_back(call)
            call.keep = None
            if call.pinned is not None:  # reusable once the call's copies have run
                if call.copied is not None:
                    call.copied.exception()  # (the staging copy has ended)
                done = self.cp.cuda.Event(disable_timing=True, block=False)
                done.record(stream)
                self._staging.release(call.pinned, done)
                call.pinned = None
        _check(status, "nvjpegDecodeBatchedEx")

    def discard(self, call: StagedCall) -> None:
        """A staged call that will not run (its batch was dropped)."""
        self._give_back(call)
        if call.pinned is not None:
            if call.copied is not None:
                call.copied.exception()  # the block is free once the staging copy has ended
            self._staging.release(call.pinned, None)
            call.pinned = None
        call.keep = None

    def decode_into(self, datas: list[np.ndarray], windows, dst_ptrs, stream, fixed_batch: int = 0) -> None:
        """:meth:`stage` and :meth:`run` in one: decode ``datas[i]`` cropped to ``windows[i]``
        into ``dst_ptrs[i]`` on ``stream``."""
        self.run(self.stage(datas, windows, fixed_batch), dst_ptrs, stream)

    def decode(self, datas: list[np.ndarray], windows, stream, fixed_batch: int = 0) -> list:
        """:meth:`decode_into` a new buffer; returns HWC uint8 CuPy views of it, one per image."""
        windows = np.asarray(windows, dtype=np.int64).reshape(len(datas), 4)
        sizes = windows[:, 2] * windows[:, 3] * 3
        offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64) if len(datas) else sizes
        with self.cp.cuda.Device(self.device_id), stream:
            buf = self.cp.empty(max(int(sizes.sum()), 1), dtype=self.cp.uint8)
        self.decode_into(datas, windows, buf.data.ptr + offsets, stream, fixed_batch)
        return [buf[o:o + s].reshape(int(h), int(w), 3)
                for o, s, (_, _, h, w) in zip(offsets.tolist(), sizes.tolist(), windows.tolist())]

    def close(self) -> None:
        if getattr(self, "_copier", None) is not None:
            self._copier.shutdown(wait=True)
            self._copier = None
        with self._params_lock:
            params, self._all_params, self._free_params = self._all_params, [], []
        for p in params:
            self.holding.nvjpegDecodeParamsDestroy(p)
        if getattr(self, "state", None):
            self.holding.nvjpegJpegStateDestroy(self.state)
            self.state = None
        if getattr(self, "handle", None):
            if self._owns_handle:
                self.holding.nvjpegDestroy(self.handle)
            self.handle = None


class HybridDecoder(HardwareDecoder):
    """nvJPEG's GPU-hybrid backend: Huffman decoding on nvJPEG's own CPU threads (no GIL), the
    rest on the GPU. It takes no region of interest (nvJPEG answers status 9), so images decode
    whole; the caller crops. Used beside the engines for a share of each batch, as DALI does."""

    backend = _BACKEND_GPU_HYBRID

    def decode_full_into(self, datas: list[np.ndarray], shapes, dst_ptrs, stream, fixed_batch: int = 0) -> None:
        """Decode whole images (``shapes[i]`` = (h, w)) as interleaved RGB to ``dst_ptrs[i]``.

        ``fixed_batch`` pads with repeats of the first image decoded into scratch memory.
        Raises NvjpegUnavailable when nvJPEG refuses the batch."""
        real = len(datas)
        shapes = np.asarray(shapes, dtype=np.int64).reshape(real, 2)
        dst_ptrs = np.asarray(dst_ptrs, dtype=np.int64).reshape(real)
        scratch = None
        if fixed_batch > real > 0:
            pad = fixed_batch - real
            size = int(shapes[0, 0] * shapes[0, 1] * 3)
            with self.cp.cuda.Device(self.device_id), stream:
                scratch = self.cp.empty(size * pad, dtype=self.cp.uint8)
            datas = list(datas) + [datas[0]] * pad
            shapes = np.concatenate([shapes, np.tile(shapes[:1], (pad, 1))])
            dst_ptrs = np.concatenate([dst_ptrs, scratch.data.ptr + np.arange(pad, dtype=np.int64) * size])
        n = len(datas)
        self._ensure(n)
        data_ptrs = np.fromiter((d.ctypes.data for d in datas), np.uint64, n)
        sizes = np.fromiter((d.nbytes for d in datas), np.uint64, n)
        image_table = np.zeros((n, 8), np.uint64)
        image_table[:, 0] = dst_ptrs
        image_table[:, 4] = shapes[:, 1] * 3
        _check(self.releasing.nvjpegDecodeBatched(
            self.handle, self.state, (ctypes.c_void_p * n).from_buffer(data_ptrs),
            (ctypes.c_size_t * n).from_buffer(sizes), (_Image * n).from_buffer(image_table),
            ctypes.c_void_p(stream.ptr)), "nvjpegDecodeBatched(hybrid)")
        if scratch is not None:
            self._scratch = scratch

