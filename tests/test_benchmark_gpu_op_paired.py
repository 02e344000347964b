"""benchmarks/gpu_op_paired.py's parts that run without a GPU: the ABBA slice order, the paired
cost (a drift common to both pipelines cancels) and the table."""

import importlib.util
import os
import sys

import pytest

_DIR = os.path.join(os.path.dirname(__file__), "..", "benchmarks")
sys.path.insert(0, _DIR)
_spec = importlib.util.spec_from_file_location("gpu_op_paired", os.path.join(_DIR, "gpu_op_paired.py"))
gpu_op_paired = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpu_op_paired)


def test_slices_alternate_which_pipeline_goes_first():
    assert gpu_op_paired.slice_order(3) == [(0, "base"), (0, "op"), (1, "op"), (1, "base"), (2, "base"), (2, "op")]


def test_a_drift_common_to_both_pipelines_cancels_in_the_pairs():
    # the machine slows from 12 to 15 ms a batch over the run; the operator adds 0.4 ms throughout
    base = [12.0 + 0.6 * k for k in range(6)]
    op = [b + 0.4 for b in base]
    got = gpu_op_paired.paired_cost(base, op)
    assert got["added_ms"] == pytest.approx(0.4)
    assert got["iqr_ms"] == pytest.approx(0.0)
    # one disturbed slice (another process woke up) moves neither the median nor the IQR
    op[2] += 5.0
    assert gpu_op_paired.paired_cost(base, op)["added_ms"] == pytest.approx(0.4)
    op[4] += 3.0  # a second one widens the IQR
    got = gpu_op_paired.paired_cost(base, op)
    assert got["added_ms"] == pytest.approx(0.4) and got["iqr_ms"] > 1.0


def test_paired_cost_needs_pairs():
    with pytest.raises(ValueError, match="as many"):
        gpu_op_paired.paired_cost([1.0, 2.0], [1.0])
    assert gpu_op_paired.paired_cost([10.0], [10.5])["added_ms"] == pytest.approx(0.5)


def test_table_gives_stoker_minus_dali():
    rows = [{"lib": "stoker", "case": "hsv", "added_ms": 0.9, "iqr_ms": 0.2, "img_s": 19000},
            {"lib": "dali", "case": "hsv", "added_ms": 0.3, "iqr_ms": 0.1, "img_s": 16000},
            {"lib": "stoker", "case": "rotate", "error": "boom"},
            {"lib": "dali", "case": "rotate", "added_ms": 0.1, "iqr_ms": 0.1, "img_s": 16000}]
    head, _, hsv, rotate = gpu_op_paired.table(rows).splitlines()
    assert "stoker - dali ms" in head
    assert hsv == "| hsv | +0.90 (0.20) | 19,000 | +0.30 (0.10) | 16,000 | +0.60 |"
    assert rotate.startswith("| rotate | error |") and rotate.endswith(" |")
