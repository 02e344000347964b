"""Where operators may run on the GPU, and how: found from the code, checked against two short lists.

* Every GPU or mixed placement an operator has is backed by a kernel (a function registered by a
  discovered ``gpu_*.py`` module), by the operator's own ``run_gpu``, or by an entry of
  HOST_COPY_PLACEMENTS (those copy each batch to the host and back: the list says why).
* Every operator DALI registers for the GPU has a GPU or mixed placement in stoker, or an entry of
  NOT_ON_GPU_YET, which says what a ported pipeline meets there.

An entry that no longer applies fails the test, so both lists only shrink.
"""

from __future__ import annotations

import importlib
import pathlib

import pytest

from stoker.operators import gpu_registry
from stoker.operators.base import Operator
from stoker.operators.schema import registered

# Placements served by the host path (gpu_registry.host_fallback): the batch goes down, through
# the CPU operator, and back up.
HOST_COPY_PLACEMENTS = {
    "readers.video_resize": "decodes with PyAV on the CPU and uploads (the NVDEC path is readers.video)",
    "experimental.inputs.video": "mixed: decodes fed videos with PyAV on the CPU and uploads, as the "
                                 "README says",
}

_REFUSED = "a GPU placement is refused at build, naming the operator and the devices it has"
# Operators DALI runs on the GPU (or as mixed) that stoker runs on the CPU only.
NOT_ON_GPU_YET = {
    "clahe": _REFUSED,
    "decoders.video": _REFUSED + "; readers.video(device='gpu') decodes with NVDEC",
    "experimental.decoders.video": _REFUSED + " (DALI's deprecated alias of decoders.video)",
}


@pytest.fixture(scope="module")
def loaded():
    gpu_registry.load_gpu_impls()
    return registered()


def _backing(name: str, cls) -> str | None:
    if name in gpu_registry._GPU_IMPLS:
        return "kernel"
    if cls.run_gpu is not Operator.run_gpu:
        return "own run_gpu"
    return None


def test_gpu_modules_are_found_not_listed():
    root = pathlib.Path(gpu_registry.__file__).resolve().parents[1]
    on_disk = {".".join(("stoker", *p.relative_to(root).with_suffix("").parts)) for p in root.rglob("gpu_*.py")}
    assert on_disk - {"stoker.operators.gpu_registry"} <= set(gpu_registry.GPU_MODULES)
    for mod in gpu_registry.GPU_MODULES:
        importlib.import_module(mod)  # (each imports without CuPy or a GPU)


def test_every_gpu_placement_has_a_kernel_or_says_why_not(loaded):
    unbacked = {name for name, cls in loaded.items()
                if set(cls.schema.devices) & {"gpu", "mixed"} and _backing(name, cls) is None}
    assert unbacked == set(HOST_COPY_PLACEMENTS), (
        f"without a kernel: {sorted(unbacked - set(HOST_COPY_PLACEMENTS))}; "
        f"listed but backed now: {sorted(set(HOST_COPY_PLACEMENTS) - unbacked)}")
    assert not gpu_registry.HOST_FALLBACK_ON_GPU or set(gpu_registry.HOST_FALLBACK_ON_GPU) <= unbacked


def test_every_operator_dali_runs_on_the_gpu_runs_there(loaded):
    dali_backend = pytest.importorskip("nvidia.dali.backend")
    from test_schema_vs_dali import _dali_schema_name

    dali_gpu = set(dali_backend.RegisteredGPUOps()) | set(dali_backend.RegisteredMixedOps())
    missing = set()
    for name, cls in loaded.items():
        dali_name = _dali_schema_name(name) if not name.startswith("_") else None
        if dali_name in dali_gpu and not set(cls.schema.devices) & {"gpu", "mixed"}:
            missing.add(name)
    assert missing == set(NOT_ON_GPU_YET), (
        f"DALI runs these on the GPU, stoker does not: {sorted(missing - set(NOT_ON_GPU_YET))}; "
        f"listed but placed now: {sorted(set(NOT_ON_GPU_YET) - missing)}")
