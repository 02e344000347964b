"""help(fn.NAME) tells the devices an operator really runs on, GPU placements included (they are
added when the GPU modules load, after the operator registered its schema)."""

import stoker.fn as fn
from stoker.operators import gpu_registry
from stoker.operators.schema import registered


def _devices_line(doc: str) -> str:
    return next(line for line in doc.splitlines() if line.startswith("Devices:"))


def test_help_lists_gpu_placements():
    assert _devices_line(fn.resize.__doc__) == "Devices: cpu, gpu."
    assert _devices_line(fn.decoders.image.__doc__) == "Devices: cpu, mixed."
    assert _devices_line(fn.readers.file.__doc__) == "Devices: cpu."


def test_every_docstring_matches_its_schema():
    gpu_registry.load_gpu_impls()
    for name, cls in registered().items():
        assert _devices_line(cls.__doc__) == f"Devices: {', '.join(cls.schema.devices)}.", name
