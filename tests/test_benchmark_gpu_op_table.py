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
