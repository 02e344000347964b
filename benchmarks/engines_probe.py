"""Probe: do the hardware JPEG engines or nvJPEG's host side set the decode rate?

    python benchmarks/engines_probe.py DATA_DIR [--lanes 1,2,4] [--busy none,gil,spin12,decode12] [--pad 1,0]
        [--pinned 0,1] [--wait 0,1]

Decodes the benchmark set's engine-eligible JPEGs (random-crop windows, batches
of 256) through :class:`stoker.backend.nvjpeg.HardwareDecoder`, with each batch
split over ``L`` decoders called at the same time from ``L`` threads (each its
own nvJPEG handle, state and stream), padded or not, beside a host load
(``--busy``: none, a busy Python thread, N spinning processes, N processes
decoding JPEGs as the pipeline's helpers do), with the encoded bytes in ordinary
(pageable) host memory or in pinned memory (``--pinned``; the decoder itself stages a call's
bytes in pinned memory unless STOKER_NVJPEG_PINNED=0, so compare under that setting), with or
without a host wait for the lane's stream before each call (``--wait``: what the engines'
disregard of stream order asks of a caller, see HardwareDecoder.run). Prints one JSON line per
case: images/s, wall milliseconds per batch, and the CPU milliseconds the
calling threads spent per batch. Each call is staged (arguments built) on the
main thread and run on the lane's thread, as in the pipeline.
"""

from __future__ import annotations

import argparse
import glob
import json
import multiprocessing as mp
import os
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np


def _spin(stop) -> None:
    x = 0
    while not stop.is_set():
        for i in range(10000):
            x += i


def _decode_loop(stop, paths) -> None:
    """Decode JPEGs with OpenCV in a loop: a host load with memory traffic, like the helpers'."""
    import cv2

    blobs = [np.fromfile(p, np.uint8) for p in paths]
    k = 0
    while not stop.is_set():
        cv2.imdecode(blobs[k % len(blobs)], cv2.IMREAD_COLOR)
        k += 1


def start_load(kind: str, root: str):
    """Start a host load: "none", "gil" (a busy Python thread in this process), "spinN" (N
    processes spinning in Python) or "decodeN" (N processes decoding JPEGs). Returns stop()."""
    import threading

    stop_thread = threading.Event()
    stop_procs = mp.Event()
    workers: list = []
    if kind == "gil":
        workers.append(threading.Thread(target=_spin, args=(stop_thread,), daemon=True))
    elif kind.startswith("spin"):
        workers += [mp.Process(target=_spin, args=(stop_procs,), daemon=True) for _ in range(int(kind[4:]))]
    elif kind.startswith("decode"):
        paths = sorted(glob.glob(os.path.join(root, "*", "*.jpg")))[:64]
        workers += [mp.Process(target=_decode_loop, args=(stop_procs, paths), daemon=True)
                    for _ in range(int(kind[6:]))]
    for w in workers:
        w.start()

    def stop():
        stop_thread.set()
        stop_procs.set()
        for w in workers:
            w.join()

    return stop


def load(root: str, batch: int):
    from stoker.backend.nvjpeg import hardware_eligible
    from stoker.operators.random.crop_window import sample_crop_window

    rng = np.random.default_rng(0)
    datas, wins = [], []
    for path in sorted(glob.glob(os.path.join(root, "*", "*.jpg"))):
        a = np.fromfile(path, np.uint8)
        size = hardware_eligible(a)
        if size is not None:
            datas.append(a)
            wins.append(sample_crop_window(rng, size[0], size[1]))
    usable = len(datas) - len(datas) % batch
    return datas[:usable], np.asarray(wins[:usable], np.int64)


def pinned_copies(cp, datas: list) -> tuple[list, object]:
    """``datas`` copied into one pinned host block: (views of it, the block to keep alive)."""
    total = sum(d.size for d in datas)
    mem = cp.cuda.alloc_pinned_memory(max(total, 1))
    block = np.frombuffer(mem, np.uint8, total)
    views, pos = [], 0
    for d in datas:
        views.append(block[pos:pos + d.size])
        views[-1][:] = d
        pos += d.size
    return views, mem


def run_case(cp, datas, wins, batch: int, lanes: int, seconds: float, pad: int, wait: bool = False) -> dict:
    from stoker.backend.nvjpeg import HardwareDecoder

    decoders = [HardwareDecoder(0) for _ in range(lanes)]
    streams = [cp.cuda.Stream(non_blocking=True) for _ in range(lanes)]
    nbytes = wins[:, 2] * wins[:, 3] * 3
    buf = cp.empty(int(nbytes.max()) * batch * 2, cp.uint8)
    cpu_s = [0.0] * lanes
    pool = ThreadPoolExecutor(lanes)

    def job(lane, call, lo, hi):
        t = time.thread_time()
        start = lo - lo % batch  # the batch's first image: lanes write to disjoint slots
        offs = np.concatenate([[0], np.cumsum(nbytes[start:hi])[:-1]])[lo - start:]
        if wait:
            streams[lane].synchronize()
        decoders[lane].run(call, buf.data.ptr + offs, streams[lane])
        cpu_s[lane] += time.thread_time() - t

    nb = len(datas) // batch
    bounds = np.linspace(0, batch, lanes + 1).astype(int)
    done, t0 = 0, None
    k = 0
    while True:
        if k == 2:  # two warm-up batches
            for s in streams:
                s.synchronize()
            t0, cpu_s[:] = time.perf_counter(), [0.0] * lanes
        base = (k % nb) * batch
        futures = []
        for j in range(lanes):  # staged here (the pipeline's CPU stage), run on the lane's thread
            lo, hi = base + bounds[j], base + bounds[j + 1]
            call = decoders[j].stage(datas[lo:hi], wins[lo:hi], fixed_batch=-(-batch // lanes) + pad)
            futures.append(pool.submit(job, j, call, lo, hi))
        for f in futures:
            f.result()
        k += 1
        if t0 is not None:
            done += batch
            if time.perf_counter() - t0 > seconds:
                break
    for s in streams:
        s.synchronize()
    dt = time.perf_counter() - t0
    batches = done / batch
    pool.shutdown()
    for d in decoders:
        d.close()
    return {"img_s": round(done / dt), "wall_ms_per_batch": round(dt / batches * 1e3, 2),
            "call_cpu_ms_per_batch": round(sum(cpu_s) / batches * 1e3, 2)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--lanes", default="1,2,3,4")
    ap.add_argument("--busy", default="none,gil,spin12,decode12")
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--pad", default="1,0", help="images of padding per call (0: none)")
    ap.add_argument("--pinned", default="0", help="encoded bytes in pinned host memory: 0, 1 or 0,1")
    ap.add_argument("--wait", default="0", help="host wait for the stream before each call: 0, 1 or 0,1")
    a = ap.parse_args()
    import cupy as cp

    from stoker.backend.nvjpeg import NvjpegUnavailable
    from stoker.pipeline.gil import shorten_switch_interval

    shorten_switch_interval()  # as the mixed decoders set it in a pipeline
    datas, wins = load(a.root, a.batch)
    pinned, _keep = pinned_copies(cp, datas)
    for busy in a.busy.split(","):
        stop = start_load(busy, a.root)
        for lanes in [int(x) for x in a.lanes.split(",")]:
            for pad in [int(p) for p in a.pad.split(",")]:
                for pin, wait in [(int(p), int(w)) for p in a.pinned.split(",") for w in a.wait.split(",")]:
                    try:
                        res = run_case(cp, pinned if pin else datas, wins, a.batch, lanes, a.seconds, pad, bool(wait))
                    except NvjpegUnavailable as e:
                        res = {"error": str(e)}
                    print(json.dumps({"lanes": lanes, "padded_by": pad, "pinned": bool(pin), "host_wait": bool(wait),
                                      "host_load": busy, "images": len(datas), **res}), flush=True)
        stop()


if __name__ == "__main__":
    main()
