"""Probe: nvJPEG's batched decode called through ctypes, which drops the GIL for the whole call.

    python benchmarks/nvjpeg_probe.py DATA_DIR [--batch 256] [--batches 12]

Question it answers: if stoker calls nvJPEG directly (one C call per batch,
no Python object per image), how fast is GPU decoding of the benchmark set, with
and without ROI (random-crop windows), on the hardware engines and on the
hybrid backend, and does a busy Python thread beside it still slow it down (as
it slows nvImageCodec's Python binding 4x)? Prints one JSON line per case.
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import json
import os
import sys
import threading
import time

import numpy as np

BACKEND_DEFAULT, BACKEND_HYBRID, BACKEND_GPU_HYBRID, BACKEND_HARDWARE = 0, 1, 2, 3
OUTPUT_RGBI = 5


class NvjpegImage(ctypes.Structure):
    _fields_ = [("channel", ctypes.c_void_p * 4), ("pitch", ctypes.c_size_t * 4)]


def _declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    """Argument types, so that size_t and pointers are passed at full width."""
    vp, i, sz, pvp, pi = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p), \
        ctypes.POINTER(ctypes.c_int)
    sigs = {
        "nvjpegCreateEx": (i, vp, vp, ctypes.c_uint, pvp),
        "nvjpegJpegStateCreate": (vp, pvp),
        "nvjpegDecodeBatchedInitialize": (vp, vp, i, i, i),
        "nvjpegJpegStreamCreate": (vp, pvp),
        "nvjpegGetImageInfo": (vp, ctypes.c_char_p, sz, pi, pi, pi, pi),
        "nvjpegJpegStreamParse": (vp, ctypes.c_char_p, sz, i, i, vp),
        "nvjpegDecodeBatchedSupported": (vp, vp, pi),
        "nvjpegDecodeParamsCreate": (vp, pvp),
        "nvjpegDecodeParamsSetOutputFormat": (vp, i),
        "nvjpegDecodeParamsSetROI": (vp, i, i, i, i),
        "nvjpegDecodeBatched": (vp, vp, ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(sz),
                                ctypes.POINTER(NvjpegImage), vp),
        "nvjpegDecodeBatchedEx": (vp, vp, ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(sz),
                                  ctypes.POINTER(NvjpegImage), pvp, vp),
    }
    for name, args in sigs.items():
        fn = getattr(lib, name)
        fn.argtypes = list(args)
        fn.restype = ctypes.c_int
    return lib


def load_library() -> ctypes.CDLL:
    patterns = []
    for base in sys.path:
        patterns += [os.path.join(base, "nvidia", "*", "lib", "libnvjpeg.so*"),
                     os.path.join(base, "nvidia", "*", "*", "lib", "libnvjpeg.so*")]
    for pat in patterns + ["/usr/local/cuda/lib64/libnvjpeg.so*"]:
        for path in sorted(glob.glob(pat)):
            try:
                return _declare(ctypes.CDLL(path))
            except OSError:
                continue
    raise RuntimeError("libnvjpeg not found")


class Nvjpeg:
    """The few nvJPEG entry points the probe needs, checked."""

    def __init__(self, lib: ctypes.CDLL, backend: int, batch: int, threads: int):
        self.lib = lib
        self.handle = ctypes.c_void_p()
        self.check(lib.nvjpegCreateEx(backend, None, None, 0, ctypes.byref(self.handle)), "nvjpegCreateEx")
        self.state = ctypes.c_void_p()
        self.check(lib.nvjpegJpegStateCreate(self.handle, ctypes.byref(self.state)), "nvjpegJpegStateCreate")
        self.check(lib.nvjpegDecodeBatchedInitialize(self.handle, self.state, batch, threads, OUTPUT_RGBI),
                   "nvjpegDecodeBatchedInitialize")
        self.stream_h = ctypes.c_void_p()
        self.check(lib.nvjpegJpegStreamCreate(self.handle, ctypes.byref(self.stream_h)), "nvjpegJpegStreamCreate")
        self.params: list[ctypes.c_void_p] = []

    @staticmethod
    def check(status: int, what: str) -> None:
        if status != 0:
            raise RuntimeError(f"{what} failed with nvjpegStatus {status}")

    def info(self, data: bytes) -> tuple[int, int, int]:
        n = ctypes.c_int()
        sub = ctypes.c_int()
        w = (ctypes.c_int * 4)()
        h = (ctypes.c_int * 4)()
        self.check(self.lib.nvjpegGetImageInfo(self.handle, data, len(data), ctypes.byref(n), ctypes.byref(sub), w, h),
                   "nvjpegGetImageInfo")
        return h[0], w[0], n.value

    def supported(self, data: bytes) -> bool:
        if self.lib.nvjpegJpegStreamParse(self.handle, data, len(data), 0, 0, self.stream_h) != 0:
            return False
        flag = ctypes.c_int(1)
        status = self.lib.nvjpegDecodeBatchedSupported(self.handle, self.stream_h, ctypes.byref(flag))
        return status == 0 and flag.value == 0

    def roi_params(self, count: int) -> list[ctypes.c_void_p]:
        while len(self.params) < count:
            p = ctypes.c_void_p()
            self.check(self.lib.nvjpegDecodeParamsCreate(self.handle, ctypes.byref(p)), "nvjpegDecodeParamsCreate")
            self.check(self.lib.nvjpegDecodeParamsSetOutputFormat(p, OUTPUT_RGBI), "SetOutputFormat")
            self.params.append(p)
        return self.params[:count]

    def decode(self, datas: list[bytes], outs: list[tuple[int, int]], stream: int, rois=None) -> None:
        n = len(datas)
        ptrs = (ctypes.c_char_p * n)(*datas)
        lens = (ctypes.c_size_t * n)(*[len(d) for d in datas])
        images = (NvjpegImage * n)()
        for i, (ptr, pitch) in enumerate(outs):
            images[i].channel[0] = ptr
            images[i].pitch[0] = pitch
        if rois is None:
            status = self.lib.nvjpegDecodeBatched(self.handle, self.state, ptrs, lens, images, ctypes.c_void_p(stream))
            self.check(status, "nvjpegDecodeBatched")
            return
        params = self.roi_params(n)
        for p, (y, x, h, w) in zip(params, rois):
            self.check(self.lib.nvjpegDecodeParamsSetROI(p, x, y, w, h), "nvjpegDecodeParamsSetROI")
        arr = (ctypes.c_void_p * n)(*[p.value for p in params])
        status = self.lib.nvjpegDecodeBatchedEx(self.handle, self.state, ptrs, lens, images, arr,
                                                ctypes.c_void_p(stream))
        self.check(status, "nvjpegDecodeBatchedEx")


def busy_python(stop: threading.Event) -> None:
    x = 0
    while not stop.is_set():
        for i in range(1000):
            x += i


def run_case(nv, cp, batches, roi: bool, busy: bool, rng) -> dict:
    from stoker.operators.random.crop_window import sample_crop_window

    stream = cp.cuda.Stream(non_blocking=True)
    stop = threading.Event()
    thread = threading.Thread(target=busy_python, args=(stop,), daemon=True) if busy else None
    if thread:
        thread.start()
    shapes = [[nv.info(d) for d in b] for b in batches]
    # untimed warm-up
    done, t0, host_s = 0, None, 0.0
    for rep in range(len(batches) + 2):
        b = batches[rep % len(batches)]
        if rep == 2:
            stream.synchronize()
            t0 = time.perf_counter()
        th = time.perf_counter()
        hw = shapes[rep % len(batches)]
        rois = [sample_crop_window(rng, h, w) for h, w, _ in hw] if roi else None
        sizes = [(r[2], r[3]) for r in rois] if roi else [(h, w) for h, w, _ in hw]
        total = sum(h * w * 3 for h, w in sizes)
        buf = cp.empty(total, dtype=cp.uint8)
        outs, off = [], 0
        for h, w in sizes:
            outs.append((buf.data.ptr + off, w * 3))
            off += h * w * 3
        host_s += time.perf_counter() - th if rep >= 2 else 0.0
        nv.decode(b, outs, stream.ptr, rois)
        if rep >= 2:
            done += len(b)
    stream.synchronize()
    dt = time.perf_counter() - t0
    stop.set()
    return {"img_s": round(done / dt), "host_prep_ms_per_batch": round(host_s / (len(batches)) * 1e3, 2)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--batches", type=int, default=12)
    a = ap.parse_args()
    import cupy as cp

    files = sorted(glob.glob(os.path.join(a.root, "*", "*.jpg")))[: a.batch * a.batches]
    datas = []
    for f in files:
        with open(f, "rb") as fh:
            datas.append(fh.read())
    lib = load_library()
    rng = np.random.default_rng(0)
    for name, backend in [("hardware", BACKEND_HARDWARE), ("gpu_hybrid", BACKEND_GPU_HYBRID),
                          ("default", BACKEND_DEFAULT)]:
        try:
            nv = Nvjpeg(lib, backend, a.batch, os.cpu_count() or 8)
        except RuntimeError as e:
            print(json.dumps({"backend": name, "error": str(e)}), flush=True)
            continue
        t = time.perf_counter()
        ok = [d for d in datas if nv.supported(d)]
        check_us = (time.perf_counter() - t) / len(datas) * 1e6
        batches = [ok[i:i + a.batch] for i in range(0, len(ok) - a.batch + 1, a.batch)]
        for roi in (False, True):
            for busy in (False, True):
                try:
                    res = run_case(nv, cp, batches, roi, busy, rng)
                except RuntimeError as e:
                    res = {"error": str(e)}
                print(json.dumps({"backend": name, "roi": roi, "busy_python_thread": busy,
                                  "supported_fraction": round(len(ok) / len(datas), 3),
                                  "support_check_us_per_image": round(check_us, 1), **res}), flush=True)


if __name__ == "__main__":
    main()
