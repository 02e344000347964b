"""Expressions: arithmetic, comparisons, bitwise operators and math functions on DataNodes.

The port of DALI's "arithmetic operators" tutorial (import renamed). Two external sources give
small integer and float tensors; the pipeline combines them with Python operators, which become
element-wise operators in the graph, with DALI's type promotion (uint8 + float32 -> float32,
int32 / int32 -> float32, // keeps integers).

    python examples/expressions.py [--cpu]
"""

from __future__ import annotations

import argparse

import numpy as np

from stoker import fn, math, pipeline_def, types
from stoker.backend.cuda import cuda_available

BATCH = 3


def ints(sample_info=None):
    """Integer samples of different sizes (a batch callback: a list of arrays)."""
    return [np.arange(1, 6 + 2 * i, dtype=np.int32) * (i + 1) for i in range(BATCH)]


def floats(sample_info=None):
    return [np.linspace(-2.0, 2.0, 5 + 2 * i, dtype=np.float32) for i in range(BATCH)]


EXPRESSIONS = ("a + b", "a * 2 - 1", "a / 3", "a // 3", "a % 3", "-b", "b ** 2", "a > 4", "(a > 2) & (a < 8)",
               "a | 1", "a ^ 3", "math.sqrt(a)", "math.clamp(b, -1, 1)", "math.abs(b) + math.max(a, 4)",
               "fn.cast(a, dtype=types.UINT8) + 250")


def build(gpu: bool):
    @pipeline_def(batch_size=BATCH, num_threads=1, device_id=0 if gpu else None)
    def arithmetic():
        a = fn.external_source(source=ints, batch=True, dtype=types.INT32)
        b = fn.external_source(source=floats, batch=True, dtype=types.FLOAT)
        if gpu:
            a, b = a.gpu(), b.gpu()
        scope = {"a": a, "b": b, "math": math, "fn": fn, "types": types}
        return tuple(eval(e, scope) for e in EXPRESSIONS)  # noqa: S307 - the expressions above, for printing

    pipe = arithmetic()
    pipe.build()
    return pipe


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu", action="store_true", help="stay on the CPU even where a GPU is found")
    args = parser.parse_args(argv)
    gpu = cuda_available() and not args.cpu
    outputs = build(gpu).run()
    sums = []
    for expr, out in zip(EXPRESSIONS, outputs):
        out = out.as_cpu() if gpu else out
        last = np.asarray(out.at(BATCH - 1))
        sums.append(float(sum(np.asarray(out.at(i), np.float64).sum() for i in range(BATCH))))
        print(f"{expr:>30} -> {str(last.dtype):>7} {np.array2string(last[:5], precision=3)}")
    print("result:", " ".join(f"{s:.4f}" for s in sums))


if __name__ == "__main__":
    main()
