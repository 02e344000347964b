"""benchmarks/gpu_op_table.py's parts that run without a GPU: the --variant parser (a setting's A/B
as a library of its own) and the table with such a library beside DALI."""

import importlib.util
import os

import pytest

_PATH = os.path.join(os.path.dirname(__file__), "..", "benchmarks", "gpu_op_table.py")
_spec = importlib.util.spec_from_file_location("gpu_op_table", _PATH)
gpu_op_table = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpu_op_table)


def test_variant_parses_name_and_environment():
    name, env = gpu_op_table.parse_variant("si05:STOKER_SWITCH_INTERVAL=0.00005,STOKER_FUSE=0")
    assert name == "si05" and env == {"STOKER_SWITCH_INTERVAL": "0.00005", "STOKER_FUSE": "0"}
    assert gpu_op_table.is_stoker("si05") and gpu_op_table.is_stoker("stoker-old")
    assert not gpu_op_table.is_stoker("dali")


@pytest.mark.parametrize("bad", ["si05", "dali:X=1", "stoker:X=1", ":X=1", "v:X", "v:=1"])
def test_bad_variants_are_refused(bad):
    with pytest.raises(ValueError, match="--variant"):
        gpu_op_table.parse_variant(bad)


def test_table_puts_a_variant_beside_stoker_and_dali():
    rows = [{"lib": lib, "case": case, "img_s": v, "gpu_mem_mib": 500}
            for lib, case, v in [("stoker", "baseline", 2000), ("si05", "baseline", 2200),
                                 ("dali", "baseline", 1000), ("stoker", "pipeline:ssd", 1000),
                                 ("si05", "pipeline:ssd", 1100), ("dali", "pipeline:ssd", 1000),
                                 ("si05", "pipeline:ssd", 1300)]]
    table = gpu_op_table._table(rows, 256)
    head, _, base, ssd = table.splitlines()
    assert "si05 img/s" in head and "| si05 / dali |" in head
    assert ssd.endswith("1.00x | 1.30x |")  # the better of si05's two rounds
    assert base.endswith("2.00x | 2.20x |")


def test_baselines_repeat_after_every_k_operators():
    order = gpu_op_table.case_order(["a", "b", "c", "d", "e"], ["ssd"], 2)
    assert order == ["baseline", "a", "b", "baseline", "c", "d", "baseline", "e", "baseline", "pipeline:ssd"]
    assert gpu_op_table.case_order(["a", "b"], [], 0) == ["baseline", "a", "b"]


def test_an_operator_is_measured_against_the_baselines_around_it():
    # the machine slows down over the round: baselines 2000, then 1000 img/s
    rows = [{"lib": "stoker", "case": c, "img_s": v, "round": 0, "seq": q}
            for q, (c, v) in enumerate([("baseline", 2000), ("a", 2000), ("baseline", 1000), ("b", 1000),
                                        ("baseline", 1000)])]
    cost = gpu_op_table.added_costs(rows, 1000)
    assert cost[("a", "stoker")] == pytest.approx(1e6 / 2000 - 1e6 / 1500)  # mean of 2000 and 1000
    assert cost[("b", "stoker")] == pytest.approx(0.0)
    # rows without a place in a round (older output): against the best baseline
    old = [{"lib": "dali", "case": "baseline", "img_s": 1000}, {"lib": "dali", "case": "a", "img_s": 500}]
    assert gpu_op_table.added_costs(old, 1000)[("a", "dali")] == pytest.approx(1000.0)
    table = gpu_op_table._table(rows, 1000)
    assert "| b | 1,000 | +0.00 |" in table
