"""What packing a batch of host arrays costs a thread while another thread runs Python (no GPU).

    python benchmarks/host_copy_contention.py [--repeats 20] [--interval 0.0002]

Three packings the pipeline's process makes per batch, each done two ways:

* **large**: 16 arrays of ~0.7 MB (a batch of decoded utterances) into one buffer, as ``_to_gpu``
  stages a ragged batch in pinned memory: NumPy slice assignment (lets go of the GIL around each
  copy) against ``stoker.tensors.pack_holding_gil`` (memoryview assignment, keeps it);
* **small**: 256 arrays of 1-8 boxes into one flat array, as a batch goes to the batch-operator
  helper (``TensorListCPU.__reduce__``): ``np.concatenate(axis=None)`` against
  ``stoker.tensors.pack_samples`` (one bytes join);
* **dense**: 64 images of 224x224x3 of one shape into pinned staging, as ``.gpu()`` uploads a host
  batch: ``np.stack`` and a copy of the stack against ``pack_holding_gil``.

Each is timed alone and beside one thread spinning in Python, at the switch interval stoker sets
(0.2 ms). Prints one JSON line per case and a table.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time

import numpy as np


def _cases():
    from stoker.tensors import pack_holding_gil, pack_samples

    rng = np.random.default_rng(0)
    large = [rng.random(int(n)).astype(np.float32) for n in rng.integers(120_000, 240_000, 16)]
    offsets, total = [], 0
    for a in large:
        offsets.append(total)
        total += -(-a.nbytes // 256) * 256
    buf = np.empty(total, np.uint8)

    def numpy_slices():
        for a, off in zip(large, offsets):
            buf[off:off + a.nbytes] = a.reshape(-1).view(np.uint8)

    small = [rng.random((int(k), 4)).astype(np.float32) for k in rng.integers(1, 9, 256)]
    images = [rng.integers(0, 255, (224, 224, 3), dtype=np.uint8) for _ in range(64)]
    image_offsets = [k * images[0].nbytes for k in range(len(images))]
    image_buf = np.empty(len(images) * images[0].nbytes, np.uint8)

    def stack_then_copy():
        image_buf[:] = np.stack(images).reshape(-1)

    return [("large: numpy slice copies", numpy_slices),
            ("large: pack_holding_gil", lambda: pack_holding_gil(buf, large, offsets)),
            ("small: np.concatenate", lambda: np.concatenate(small, axis=None)),
            ("small: pack_samples", lambda: pack_samples(small)),
            ("dense: np.stack, then a copy", stack_then_copy),
            ("dense: pack_holding_gil", lambda: pack_holding_gil(image_buf, images, image_offsets))]


def _spin(stop: threading.Event) -> None:
    x = 0
    while not stop.is_set():
        x += 1


def _time(fn, repeats: int) -> float:
    for _ in range(3):
        fn()
    t = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - t) / repeats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--interval", type=float, default=0.0002)
    a = ap.parse_args()
    sys.setswitchinterval(a.interval)
    rows = []
    for name, fn in _cases():
        alone = _time(fn, a.repeats)
        stop = threading.Event()
        spinner = threading.Thread(target=_spin, args=(stop,), daemon=True)
        spinner.start()
        time.sleep(0.05)
        try:
            busy = _time(fn, a.repeats)
        finally:
            stop.set()
            spinner.join()
        row = {"case": name, "alone_ms": round(alone * 1e3, 3), "beside_spinner_ms": round(busy * 1e3, 3)}
        print(json.dumps(row), flush=True)
        rows.append(row)
    print("| case | alone ms | beside a Python thread ms |")
    print("| --- | --- | --- |")
    for r in rows:
        print(f"| {r['case']} | {r['alone_ms']:.3f} | {r['beside_spinner_ms']:.3f} |")


if __name__ == "__main__":
    main()
