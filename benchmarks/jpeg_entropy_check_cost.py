"""What the mixed decoders' entropy check (stoker.backend.jpeg_entropy_check) costs, per JPEG.

    python benchmarks/jpeg_entropy_check_cost.py [--data /tmp/rfdata] [--files 1024] [--repeats 3]
        [--threads 2] [--damaged 300]

Data: every ``*.jpg`` under ``--data`` (an ImageNet-like folder: 1,024 files of about 500x375,
60 KB), or, without it, JPEGs made as benchmarks/strict_decode_cost.py makes them.

1. CPU time per file on one thread (the process pinned to one core), best round's mean, the
   methods alternating each round: the structure check (``scan_problem``), the entropy check
   (a 1/8-scale decode, ``turbo.entropy_problem``), the candidates it was chosen over (TurboJPEG's
   lossless transform with no output, which reads every coefficient; a 1/8 decode cropped to the
   last row, whose skipped rows are Huffman-decoded only), and the full decodes it saves the GPU
   path from (strict TurboJPEG, OpenCV).
2. Files a second through ``jpeg_entropy_check.damaged`` on thread pools of 1, 2, 4... up to
   ``--threads`` threads: its library call releases the GIL, so the rate should grow with the threads.
3. Exactness: ``--damaged`` files with 16 bytes XORed in the middle of their scan data (no 0xFF
   made or touched: the structure check passes them); the check must flag exactly those the
   strict full decode refuses.
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import os
import platform
import time
from concurrent.futures import ThreadPoolExecutor

import cv2
import numpy as np

from stoker.backend.jpeg_entropy_check import damaged
from stoker.backend.jpeg_scan_check import scan_problem
from stoker.operators.decoders import turbo


def load(data: str, count: int) -> list[np.ndarray]:
    paths = sorted(glob.glob(os.path.join(data, "**", "*.jpg"), recursive=True))[:count]
    if paths:
        return [np.fromfile(p, np.uint8) for p in paths]
    from strict_decode_cost import encode  # (this folder is on sys.path when run as a script)

    return [np.frombuffer(encode(i, "JPEG"), np.uint8) for i in range(count)]


class _Transform(ctypes.Structure):  # TurboJPEG's tjtransform
    _fields_ = [("r", turbo._Region), ("op", ctypes.c_int), ("options", ctypes.c_int),
                ("data", ctypes.c_void_p), ("filter", ctypes.c_void_p)]


def candidates() -> dict:
    """name -> a function of one file (the rejected candidates call TurboJPEG directly)."""
    lib, quick = turbo._state["lib"], turbo._state["quick"]
    lib.tj3Transform.restype = ctypes.c_int
    lib.tj3Transform.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                 ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    xform = _Transform(turbo._Region(0, 0, 0, 0), 0, 1 << 4, None, None)  # TJXOP_NONE, TJXOPT_NOOUTPUT
    dst, dst_size = (ctypes.c_void_p * 1)(), (ctypes.c_size_t * 1)()
    handle = [lib.tj3Init(2)]  # TJINIT_TRANSFORM
    lib.tj3Set(handle[0], 0, 1)  # TJPARAM_STOPONWARNING
    out = np.empty(1 << 16, np.uint8)

    def transform(buf):
        if lib.tj3Transform(handle[0], buf.ctypes.data, buf.size, 1, ctypes.addressof(dst),
                            ctypes.addressof(dst_size), ctypes.addressof(xform)) != 0:
            lib.tj3Destroy(handle[0])  # (a warning leaves the handle mid-file)
            handle[0] = lib.tj3Init(2)
            lib.tj3Set(handle[0], 0, 1)

    def last_row(buf):
        h = turbo._handle()
        quick.tj3DecompressHeader(h, buf.ctypes.data, buf.size)
        quick.tj3SetScalingFactor(h, turbo._EIGHTH)
        rows = -(-quick.tj3Get(h, turbo._TJPARAM_JPEGHEIGHT) // 8)
        quick.tj3SetCroppingRegion(h, turbo._Region(0, rows - 1, 0, 1))
        if lib.tj3Decompress8(h, buf.ctypes.data, buf.size, out.ctypes.data, 0, turbo._TJPF_GRAY) != 0:
            turbo._local.handle = None

    return {"structure check": scan_problem, "entropy check (1/8 decode)": turbo.entropy_problem,
            "transform, no output": transform, "1/8 decode, last row": last_row,
            "full decode, strict TurboJPEG": lambda b: turbo.decode_full(b, "rgb"),
            "full decode, OpenCV": lambda b: cv2.imdecode(b, cv2.IMREAD_COLOR)}


def one_thread(files, repeats: int) -> dict[str, float]:
    methods = candidates()
    best = dict.fromkeys(methods, float("inf"))
    for _ in range(repeats):
        for name, fn in methods.items():
            t0 = time.perf_counter()
            for f in files:
                fn(f)
            best[name] = min(best[name], (time.perf_counter() - t0) / len(files) * 1e6)
    return best


def on_pool(files, threads: int, repeats: int) -> float:
    """Files a second through the routing's batch mask on a pool of ``threads``."""
    idx = list(range(len(files)))
    best = float("inf")
    with ThreadPoolExecutor(threads) as pool:
        for _ in range(repeats):
            t0 = time.perf_counter()
            damaged(files, idx, pool)
            best = min(best, time.perf_counter() - t0)
    return len(files) / best


def damage(buf: np.ndarray, seed: int) -> np.ndarray:
    data = bytearray(buf.tobytes())
    sos = data.find(b"\xff\xda")
    start = sos + 2 + int.from_bytes(data[sos + 2:sos + 4], "big")
    rng = np.random.default_rng(seed)
    at, done = start + int((len(data) - start) * rng.uniform(0.3, 0.7)), 0
    while done < 16:
        value = data[at] ^ int(rng.integers(1, 256))
        if 0xFF not in (data[at - 1], data[at], data[at + 1], value):
            data[at] = value
            done += 1
        at += 1
    return np.frombuffer(bytes(data), np.uint8)


def exactness(files, count: int) -> tuple[int, int, int]:
    """(files damaged, refused by the strict full decode, flagged by the check); asserts they agree."""
    refused = flagged = 0
    for i, f in enumerate(files[:count]):
        bad = damage(f, i)
        assert scan_problem(bad) is None
        try:
            turbo.decode_full(bad, "rgb")
            full = False
        except turbo.JPEGDataError:
            full = True
        check = turbo.entropy_problem(bad) is not None
        assert check == full, f"file {i}: the full decode {'refuses' if full else 'accepts'} it, the check not"
        refused += full
        flagged += check
    return min(count, len(files)), refused, flagged


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="/tmp/rfdata")
    ap.add_argument("--files", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--damaged", type=int, default=300)
    a = ap.parse_args()
    if not turbo.available():
        raise SystemExit("needs TurboJPEG 3 (pip install stoker[jpeg])")
    files = load(a.data, a.files)
    for f in files:
        assert turbo.entropy_problem(f) is None, "a good file flagged"
    kb = np.mean([f.size for f in files]) / 1e3
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores; {len(files)} JPEGs, "
          f"mean {kb:.0f} KB; {turbo.library_path()}")
    cores = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cores)})  # one core: the figure is CPU time, not a share of several
    try:
        best = one_thread(files, a.repeats)
    finally:
        os.sched_setaffinity(0, cores)
    full = best["full decode, strict TurboJPEG"]
    for name, us in best.items():
        print(f"  {name:32s} {us:8.1f} us/file  ({us / full * 100:5.1f} % of a strict full decode)")
    for k in sorted({t for t in (1, 2, 4, 8, 16, 32) if t < a.threads} | {a.threads}):
        print(f"  entropy check on a pool of {k}: {on_pool(files, k, a.repeats):7.0f} files/s")
    n, refused, flagged = exactness(files, a.damaged)
    print(f"  {n} damaged files (structure intact): strict full decode refuses {refused}, the check flags {flagged}, "
          "the same files")


if __name__ == "__main__":
    main()
