"""benchmarks/cpu_op_table.py: the table (best round per library, DALI's ms over stoker's, errors
shown) and one child run in stoker."""

import importlib.util
import os
import sys

_DIR = os.path.join(os.path.dirname(__file__), "..", "benchmarks")
sys.path.insert(0, _DIR)
_spec = importlib.util.spec_from_file_location("cpu_op_table", os.path.join(_DIR, "cpu_op_table.py"))
cpu_op_table = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cpu_op_table)


def test_table_takes_each_librarys_best_round_and_gives_dali_over_stoker():
    rows = [{"lib": "stoker", "case": "hsv", "ms_per_image": 0.4},
            {"lib": "dali", "case": "hsv", "ms_per_image": 1.2},
            {"lib": "stoker", "case": "hsv", "ms_per_image": 0.3},
            {"lib": "stoker", "case": "jitter", "ms_per_image": 0.9},
            {"lib": "dali", "case": "jitter", "error": "GPU only"}]
    head, _, hsv, jitter = cpu_op_table.table(rows).splitlines()
    assert "dali / stoker" in head
    assert hsv == "| hsv | 0.300 | 1.200 | 4.00x |"
    assert jitter == "| jitter | 0.900 | error | |"


def test_a_child_measures_an_operator_in_stoker():
    row = cpu_op_table.child("stoker", "flip", 32, 4, 1, 2)
    assert row["lib"] == "stoker" and row["case"] == "flip"
    assert row["baseline_ms"] > 0 and isinstance(row["ms_per_image"], float)
