"""Data loading from Python: ``external_source`` fed by a generator, by a per-sample callback and
by a callback run in worker processes (``parallel=True``).

The port of DALI's external-source tutorials (import renamed). Three sources side by side:

* a generator function yielding whole batches (images and labels), read in this process;
* a per-sample callable taking ``SampleInfo`` (its index in the epoch), the form that can be
  resumed and sharded, because each sample is a function of its index;
* the same callable in ``py_num_workers`` worker processes (``parallel=True``): the callable
  must be picklable (a module-level class or function), and the samples come back in order.

    python examples/data_loading.py [--cpu] [--workers 2]
"""

from __future__ import annotations

import argparse

import numpy as np

from stoker import fn, pipeline_def, types
from stoker.backend.cuda import cuda_available

BATCH = 4
EPOCH = 12


def batches():
    """A generator of (images, labels) batches: it stops after one epoch, which ends the pipeline's epoch."""
    rng = np.random.default_rng(0)
    for start in range(0, EPOCH, BATCH):
        images = [rng.integers(0, 255, (8 + i, 10, 3), dtype=np.uint8) for i in range(BATCH)]
        labels = [np.array([start + i], np.int64) for i in range(BATCH)]
        yield images, labels


class Samples:
    """One sample per call, a pure function of its index (picklable, so it may run in workers)."""

    def __call__(self, info):
        if info.idx_in_epoch >= EPOCH:
            raise StopIteration
        rng = np.random.default_rng(info.idx_in_epoch)
        return rng.normal(size=(6, 6)).astype(np.float32), np.array([info.idx_in_epoch], np.int32)


def build(gpu: bool, workers: int):
    @pipeline_def(batch_size=BATCH, num_threads=2, device_id=0 if gpu else None, py_num_workers=workers,
                  py_start_method="spawn")
    def loading():
        images, labels = fn.external_source(source=batches, num_outputs=2, layout=["HWC", ""],
                                            dtype=[types.UINT8, types.INT64])
        values, index = fn.external_source(source=Samples(), num_outputs=2, batch=False, dtype=[types.FLOAT,
                                                                                                  types.INT32])
        pvalues, pindex = fn.external_source(source=Samples(), num_outputs=2, batch=False, parallel=True,
                                             dtype=[types.FLOAT, types.INT32])
        if gpu:
            images = images.gpu()
        return fn.cast(images, dtype=types.FLOAT) / 255.0, labels, values, index, pvalues, pindex

    pipe = loading()
    pipe.build()
    return pipe


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu", action="store_true", help="stay on the CPU even where a GPU is found")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    gpu = cuda_available() and not args.cpu
    pipe = build(gpu, args.workers)
    totals = np.zeros(3)
    batches_read = 0
    while True:
        try:
            images, labels, values, index, pvalues, pindex = pipe.run()
        except StopIteration:
            break
        images = images.as_cpu() if gpu else images
        batches_read += 1
        same = all(np.array_equal(np.asarray(values.at(i)), np.asarray(pvalues.at(i))) for i in range(BATCH))
        print(f"batch {batches_read}: labels {[int(np.asarray(labels.at(i))[0]) for i in range(BATCH)]}, "
              f"indices {[int(np.asarray(index.at(i))[0]) for i in range(BATCH)]}, parallel == serial: {same}")
        totals += [sum(float(np.asarray(images.at(i)).sum()) for i in range(BATCH)),
                   sum(float(np.asarray(values.at(i)).sum()) for i in range(BATCH)),
                   sum(float(np.asarray(pvalues.at(i)).sum()) for i in range(BATCH))]
    print(f"read {batches_read} batches (one epoch of {EPOCH} samples)")
    print("result:", " ".join(f"{t:.4f}" for t in totals))


if __name__ == "__main__":
    main()
