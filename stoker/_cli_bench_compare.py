"""``stoker bench --compare``: the same work done by DALI or by a torchvision DataLoader.

Both run in a subprocess, so that the other library's threads, CUDA context and imports do not
share this process with stoker's, and each prints one JSON line that the parent reads.

* ``dali``: the pipeline file itself, with its ``stoker`` imports renamed to ``nvidia.dali`` (the
  port, undone: :func:`to_dali_source`), run with the same batch size, threads and device.
* ``torchvision``: an ``ImageFolder`` + ``DataLoader`` with ``RandomResizedCrop``,
  ``RandomHorizontalFlip`` and normalisation, only for the standard training pipeline shape
  (:func:`training_shape` checks it); ``num_workers`` is the pipeline's thread count.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile

from stoker._cli_pipeline import CLIError, load_pipeline, walk

# A child that hangs (a driver problem, a deadlock) must not hang the command.
_CHILD_GRACE_S = 120

_DALI_CHILD = r'''
import importlib.util, json, sys, time
a = json.loads(sys.argv[1])
sys.path.insert(0, a["folder"])
spec = importlib.util.spec_from_file_location("_stoker_bench_dali_user", a["file"])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
kw = {"device_id": a["device_id"]}
kw.update({k: v for k, v in (("batch_size", a["batch"]), ("num_threads", a["threads"])) if v})
pipe = getattr(module, a["function"])(*a["args"], **kw)
t0 = time.perf_counter()
pipe.build()
pipe.run()
first = time.perf_counter() - t0
t1 = time.perf_counter()
k = 0
while k < 2 or time.perf_counter() - t1 < a["warmup"]:
    pipe.run()
    k += 1
n = samples = 0
start = time.perf_counter()
while time.perf_counter() - start < a["seconds"]:
    outs = pipe.run()
    n += 1
    samples += len(outs[0])
wall = time.perf_counter() - start
print(json.dumps({"rate": samples / wall, "first_batch_s": first, "batches": n}))
'''

_TORCHVISION_CHILD = r'''
import json, sys, time
import torch, torchvision
from torchvision.transforms import v2
a = json.loads(sys.argv[1])
norm = [v2.ToImage(), v2.ToDtype(torch.float32, scale=False), v2.Normalize(a["mean"], a["std"])]
tf = v2.Compose([v2.RandomResizedCrop(a["size"], antialias=True), v2.RandomHorizontalFlip(), *norm])
ds = torchvision.datasets.ImageFolder(a["root"], transform=tf)
loader = torch.utils.data.DataLoader(ds, batch_size=a["batch"], shuffle=True, num_workers=a["threads"],
                                     persistent_workers=a["threads"] > 0, drop_last=False)
state = {"it": iter(loader)}
def step():
    try:
        return next(state["it"])
    except StopIteration:
        state["it"] = iter(loader)
        return next(state["it"])
t0 = time.perf_counter()
step()
first = time.perf_counter() - t0
t1 = time.perf_counter()
k = 0
while k < 2 or time.perf_counter() - t1 < a["warmup"]:
    step()
    k += 1
n = samples = 0
start = time.perf_counter()
while time.perf_counter() - start < a["seconds"]:
    images, labels = step()
    n += 1
    samples += len(labels)
wall = time.perf_counter() - start
print(json.dumps({"rate": samples / wall, "first_batch_s": first, "batches": n}))
'''


def to_dali_source(source: str) -> str:
    """The pipeline file as a DALI script: ``stoker`` imports renamed to ``nvidia.dali`` (the
    rename a port makes, reversed). ``import stoker`` binds the name ``stoker`` to DALI's package,
    so ``stoker.fn.resize`` in the body still resolves."""
    def one(line: str) -> str:
        m = re.match(r"^(\s*)import stoker(\.[\w.]+)?(\s+as\s+\w+)?\s*$", line)
        if m:
            indent, sub, alias = m.group(1), m.group(2) or "", m.group(3) or ""
            if alias:
                return f"{indent}import nvidia.dali{sub}{alias}"
            extra = f"; import nvidia.dali{sub}" if sub else ""
            return f"{indent}import nvidia.dali as stoker{extra}"
        return re.sub(r"^(\s*)from stoker(?=[.\s])", r"\1from nvidia.dali", line)

    return "\n".join(one(line) for line in source.split("\n"))


def _child(code: str, args: dict, seconds: float, what: str) -> dict:
    try:
        r = subprocess.run([sys.executable, "-c", code, json.dumps(args)], capture_output=True, text=True,
                           timeout=seconds * 2 + _CHILD_GRACE_S)
    except subprocess.TimeoutExpired:
        raise CLIError(f"--compare {what}: the run did not finish in time") from None
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if r.returncode != 0 or not lines:
        tail = [ln for ln in r.stderr.strip().splitlines() if ln.strip()][-1:] or ["no output"]
        raise CLIError(f"--compare {what}: the run failed: {tail[0]}")
    return json.loads(lines[-1])


def training_shape(path: str, function: str | None, data: str | None) -> dict | None:
    """The standard training pipeline's parameters (file root, output size, mean, std) when the
    file's pipeline is that shape: ``readers.file`` -> ``decoders.image_random_crop`` (or
    ``decoders.image`` -> ``random_resized_crop``) -> ``resize`` to a square -> ``crop_mirror_normalize``
    with ``mirror``; else None."""
    pipe = load_pipeline(path, function, data, device_id=None).pipe
    nodes = walk(pipe)
    names = [n.op_name for n in nodes if not n.op_name.startswith("random.")]
    by = {n.op_name: n for n in nodes}
    shapes = (["readers.file", "decoders.image_random_crop", "resize", "crop_mirror_normalize"],
              ["readers.file", "decoders.image", "random_resized_crop", "crop_mirror_normalize"])
    if names not in [list(s) for s in shapes]:
        return None
    sized = by.get("resize") or by["random_resized_crop"]
    size = sized.args.get("size") or [sized.args.get("resize_y"), sized.args.get("resize_x")]
    size = [size] * 2 if isinstance(size, (int, float)) else list(size)
    cmn_node = by["crop_mirror_normalize"]
    cmn = cmn_node.args
    root = by["readers.file"].args.get("file_root")
    if None in size or size[0] != size[1] or not root or "mirror" not in {**cmn, **cmn_node.arg_inputs}:
        return None
    return {"root": root, "size": int(size[0]), "mean": list(cmn.get("mean", [0.0])),
            "std": list(cmn.get("std", [1.0]))}


def compare(kind: str, path: str, m, data: str | None, seconds: float, function: str | None,
            batch: int | None, threads: int | None) -> str:
    """Run the ``kind`` ("dali" or "torchvision") equivalent of the benched pipeline ``m`` and
    return lines with its figures and stoker's ratio to it."""
    warmup = min(3.0, seconds / 5)
    if kind == "dali":
        if importlib.util.find_spec("nvidia") is None or importlib.util.find_spec("nvidia.dali") is None:
            return "DALI comparison: nvidia.dali is not installed here (pip install nvidia-dali-cuda120)."
        with open(path) as f:
            source = to_dali_source(f.read())
        with tempfile.TemporaryDirectory(prefix="stoker-bench-") as tmp:
            dali_file = os.path.join(tmp, "dali_" + os.path.basename(path))
            with open(dali_file, "w") as f:
                f.write(source)
            args = {"folder": os.path.dirname(os.path.abspath(path)), "file": dali_file, "function": m.function,
                    "args": [data] if data else [], "device_id": 0 if m.device == "gpu" else None,
                    "batch": batch, "threads": threads, "seconds": seconds, "warmup": warmup}
            other = _child(_DALI_CHILD, args, seconds, "dali")
        name = "DALI (the same file, imports renamed)"
    else:
        if importlib.util.find_spec("torchvision") is None:
            return "torchvision comparison: torchvision is not installed here (pip install torchvision)."
        shape = training_shape(path, function, data)
        if shape is None:
            return ("torchvision comparison: only the standard training pipeline has a DataLoader equivalent "
                    "(readers.file -> decoders.image_random_crop -> resize to a square -> crop_mirror_normalize "
                    "with mirror); this pipeline is another shape.")
        args = {**shape, "batch": m.batch_size, "threads": m.num_threads, "seconds": seconds, "warmup": warmup}
        other = _child(_TORCHVISION_CHILD, args, seconds, "torchvision")
        name = f"torchvision DataLoader ({m.num_threads} workers, PIL decode, transforms v2)"
    ratio = m.rate / other["rate"] if other["rate"] else float("inf")
    return (f"Compared with {name}:\n"
            f"  throughput     {other['rate']:,.1f} samples/s, first batch {other['first_batch_s']:.2f} s\n"
            f"  stoker / {kind:<11} {ratio:.2f}x")
