"""Debugging aid: the functions whose calls grow with the batch in ``benchmarks/op_zoo.py`` cases,
on the null device (external source and upload calls grow too: they are the baseline's).

    .venv/bin/python tests/operators/show_host_growth.py rotate,flip [ragged]
"""

import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(here), here]

import null_device  # noqa: E402
import test_gpu_host_cost  # noqa: E402

if __name__ == "__main__":
    with null_device.installed():
        for name in sys.argv[1].split(","):
            print(name, test_gpu_host_cost.growing_functions(name, ragged=len(sys.argv) > 2)[:15])
