"""CPU training and validation pipelines, side by side on the same data and thread count.

    python benchmarks/cpu_pipeline.py DATA_DIR [--threads 2] [--batch 64] [--seconds 15] [--libs ...]
    python benchmarks/cpu_pipeline.py DATA_DIR --fast [--libs stoker,dali]   # adds stoker-fast and PSNR
    python benchmarks/cpu_pipeline.py DATA_DIR --libs stoker,stoker-old,dali --old-tree PATH

Pipelines (same augmentations everywhere):
  train: read file, decode with random crop (area 0.08-1, aspect 3/4-4/3), resize to 224x224,
         random horizontal mirror, normalize to float CHW.
  val:   read file, decode, resize shorter side to 256, centre crop 224, normalize to float CHW.
  augmented, detection: benchmarks/op_zoo.py's pipelines of those names, decoded on the CPU.
  rand_augment, trivial_augment: decode with random crop, resize 256x256, RandAugment (n=2, m=9) or
         TrivialAugment Wide (each library's auto_aug module), random mirror, crop 224, float CHW.

Libraries: ``stoker`` (its DALI-style API), ``stoker-unfused`` (the same with ``STOKER_FUSE=0``:
every CPU operator over the whole batch on its own, no operator fusion), ``stoker-fast`` (the same with
``STOKER_REDUCED_SIZE_DECODE=1``: JPEGs decoded at a reduced size where the resize shrinks them; ``--fast``
adds it to ``--libs`` and, before the timings, prints the PSNR of its outputs against stoker's exact
path over one pass of the data, per pipeline), ``stoker-old`` (another checkout of stoker, the folder
holding its ``stoker`` package given by ``--old-tree``: before and after a change in one run),
``dali`` (NVIDIA DALI's CPU pipeline, when installed), ``torchvision`` (torch DataLoader with
``--threads`` worker processes, PIL decode, transforms v2).
Each runs in its own subprocess; prints one JSON line per (library, pipeline) with images/s, the CPU
time per image (the process and its worker processes: comparable even when other work shares the
machine) and the 1-minute load average at the end, then the ratios per round.
Throughput is measured after the first three batches and, for stoker with chain worker processes
(8+ threads on 8+ cores), once those have started (``measured_after_s``): before that stoker computes
batches in its own process, as torchvision's loader does not run before its workers have started.
``first_batch_s`` is the time to the first batch either way.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]
STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]


ZOO_KINDS = ("augmented", "detection", "rand_augment", "trivial_augment")  # op_zoo's, decoded on the CPU


def cpu_graph(fn, types, root: str, kind: str):
    """The train or val pipeline's graph (images, labels) with ``fn`` / ``types`` of either library
    (also benchmarks/auto_tuning.py's CPU pipelines)."""
    if kind == "train":
        jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True, name="r")
        imgs = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB)
        imgs = fn.resize(imgs, resize_x=224, resize_y=224)
        return fn.crop_mirror_normalize(imgs, dtype=types.FLOAT, output_layout="CHW", mean=MEAN, std=STD,
                                        mirror=fn.random.coin_flip()), labels
    if kind in ZOO_KINDS:
        return _zoo_graph(fn, types, root, kind)
    jpegs, labels = fn.readers.file(file_root=root, name="r")
    imgs = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
    imgs = fn.resize(imgs, resize_shorter=256)
    return fn.crop_mirror_normalize(imgs, crop=(224, 224), dtype=types.FLOAT, output_layout="CHW",
                                    mean=MEAN, std=STD), labels


def _zoo_graph(fn, types, root: str, kind: str):
    """benchmarks/op_zoo.py's augmented classification and detection-style pipelines, decoded on
    the CPU: issue 16's GPU pipelines as a CPU-only host runs them."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import op_zoo

    jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True, name="r")
    if kind in ("rand_augment", "trivial_augment"):  # (the pipeline needs enable_conditionals)
        x = fn.resize(fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB),
                      resize_x=256, resize_y=256)
        aug = op_zoo._auto_aug(fn, kind)
        x = aug.rand_augment(x, n=2, m=9) if kind == "rand_augment" else aug.trivial_augment_wide(x)
        return fn.crop_mirror_normalize(x, crop=(224, 224), dtype=types.FLOAT, output_layout="CHW", mean=MEAN,
                                        std=STD, mirror=fn.random.coin_flip()), labels
    if kind == "augmented":
        x = fn.resize(fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB),
                      resize_x=256, resize_y=256)
        for step in (op_zoo._rotate, op_zoo._color_twist, op_zoo.OPS["hsv"], op_zoo.OPS["gaussian_blur"],
                     op_zoo._warp_shear):
            x = step(fn, types, x)
        return fn.crop_mirror_normalize(x, crop=(224, 224), dtype=types.FLOAT, output_layout="CHW", mean=MEAN,
                                        std=STD, mirror=fn.random.coin_flip()), labels
    x = fn.resize(fn.decoders.image(jpegs, device="cpu", output_type=types.RGB), resize_shorter=320)
    x = op_zoo.OPS["flip"](fn, types, op_zoo.OPS["paste"](fn, types, x))
    x = fn.crop(x, crop=(384, 384), out_of_bounds_policy="pad", fill_values=0)
    return fn.cast(x, dtype=types.FLOAT) / 255.0, labels


def dali_style(lib: str, root: str, kind: str, batch: int, threads: int):
    if lib.startswith("stoker"):
        if lib == "stoker-unfused":
            os.environ["STOKER_FUSE"] = "0"
        if lib == "stoker-fast":
            os.environ["STOKER_REDUCED_SIZE_DECODE"] = "1"
        import stoker.fn as fn
        import stoker.types as types
        from stoker import pipeline_def
    else:
        import nvidia.dali.fn as fn
        import nvidia.dali.types as types
        from nvidia.dali import pipeline_def

    @pipeline_def(batch_size=batch, num_threads=threads, device_id=None, seed=1,
                  enable_conditionals=kind in ("rand_augment", "trivial_augment"))
    def pipe_fn():
        return cpu_graph(fn, types, root, kind)

    pipe = pipe_fn()
    pipe.build()
    return pipe.run


def torchvision_loader(root: str, kind: str, batch: int, threads: int):
    import torch
    import torchvision
    from torchvision.transforms import v2

    norm = [v2.ToImage(), v2.ToDtype(torch.float32, scale=False), v2.Normalize(MEAN, STD)]
    if kind == "train":
        tf = v2.Compose([v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip(), *norm])
    elif kind in ("rand_augment", "trivial_augment"):
        aug = v2.RandAugment(num_ops=2, magnitude=9) if kind == "rand_augment" else v2.TrivialAugmentWide()
        tf = v2.Compose([v2.RandomResizedCrop(256, antialias=True), aug, v2.RandomHorizontalFlip(),
                         v2.CenterCrop(224), *norm])
    elif kind in ZOO_KINDS:
        raise SystemExit(f"torchvision: no loader written for the {kind!r} pipeline")
    else:
        tf = v2.Compose([v2.Resize(256, antialias=True), v2.CenterCrop(224), *norm])
    ds = torchvision.datasets.ImageFolder(root, transform=tf)
    loader = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=kind == "train", num_workers=threads,
                                         persistent_workers=True, drop_last=True, prefetch_factor=4)
    state = {"it": iter(loader)}

    def step():
        try:
            return next(state["it"])
        except StopIteration:
            state["it"] = iter(loader)
            return next(state["it"])

    return step


def quality(root: str, kind: str, batch: int, threads: int) -> dict:
    """PSNR of stoker-fast's outputs against stoker's exact path over one pass of ``root`` (the
    normalized outputs mapped back to 0-255): over all values, and the worst single image."""
    import numpy as np

    import stoker.fn as fn
    import stoker.types as types
    from stoker import pipeline_def, settings

    def build(fast: bool):
        with settings.override(reduced_size_decode=fast):
            @pipeline_def(batch_size=batch, num_threads=threads, device_id=None, seed=1)
            def pipe_fn():
                return cpu_graph(fn, types, root, kind)

            pipe = pipe_fn()
            pipe.build()
        return pipe

    exact, fast = build(False), build(True)
    std = np.asarray(STD, np.float64).reshape(3, 1, 1)
    sq, count, worst, images = 0.0, 0, float("inf"), 0
    files = exact.epoch_size("r")
    while images < files:
        a, b = exact.run()[0].samples(), fast.run()[0].samples()
        for x, y in zip(a, b):
            d = (np.asarray(x, np.float64) - np.asarray(y, np.float64)) * std  # back to 0-255 levels
            mse = float(np.mean(d * d))
            sq, count = sq + mse * d.size, count + d.size
            worst = min(worst, 10 * np.log10(255 ** 2 / mse) if mse else float("inf"))
        images += len(a)
    psnr = 10 * np.log10(255 ** 2 / (sq / count)) if sq else float("inf")
    return {"lib": "stoker-fast vs stoker", "pipeline": kind, "images": images, "psnr_db": round(psnr, 2),
            "worst_image_psnr_db": round(worst, 2)}


def cpu_seconds() -> float:
    """CPU time (user + system) of this process and its live children (DataLoader workers), so that
    the cost per image can be compared even when other work shares the machine."""
    own = os.times()
    total = own.user + own.system
    tick = os.sysconf("SC_CLK_TCK")
    me = str(os.getpid())
    for pid in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == me:  # fields[1] is the parent pid; [11], [12] are utime, stime in ticks
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def workers_ready(step) -> bool | None:
    """For a stoker pipeline with chain worker processes: whether they have all started; None
    when there are none (or for other libraries)."""
    executor = getattr(getattr(step, "__self__", None), "_executor", None)
    workers = getattr(executor, "_chain_workers", None)
    return None if workers is None else workers.ready()


def child(lib: str, root: str, kind: str, batch: int, threads: int, seconds: float) -> None:
    t0 = time.perf_counter()
    step = torchvision_loader(root, kind, batch, threads) if lib == "torchvision" else \
        dali_style(lib, root, kind, batch, threads)
    step()
    first = time.perf_counter() - t0
    for _ in range(2):
        step()
    # stoker computes its first batches in process while its chain workers start (many cores);
    # the throughput is measured once they run, as torchvision's once its DataLoader workers do
    ready = workers_ready(step)
    while ready is False and time.perf_counter() - t0 < 90:
        step()
        ready = workers_ready(step)
    warm = time.perf_counter() - t0
    n, t1, c1 = 0, time.perf_counter(), cpu_seconds()
    while time.perf_counter() - t1 < seconds:
        step()
        n += batch
    rate = n / (time.perf_counter() - t1)
    cpu_ms = (cpu_seconds() - c1) / n * 1e3
    print(json.dumps({"lib": lib, "pipeline": kind, "threads": threads, "batch": batch, "img_s": round(rate, 1),
                      "cpu_ms_per_img": round(cpu_ms, 3), "first_batch_s": round(first, 2),
                      "measured_after_s": round(warm, 2),
                      "load_avg_1min": round(os.getloadavg()[0], 2)}), flush=True)
    os._exit(0)  # skip slow teardown of worker pools


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _, _, lib, root, kind, batch, threads, seconds = sys.argv
        child(lib, root, kind, int(batch), int(threads), float(seconds))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root")
    ap.add_argument("--libs", default="stoker,dali,torchvision")
    ap.add_argument("--pipelines", default="train,val")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--old-tree", default=None, help="a checkout of stoker to run as the library 'stoker-old'")
    ap.add_argument("--fast", action="store_true",
                    help="also run stoker-fast (reduced-size JPEG decode) and print its PSNR against stoker")
    a = ap.parse_args()
    if a.fast:
        if "stoker-fast" not in a.libs.split(","):
            a.libs += ",stoker-fast"
        for kind in a.pipelines.split(","):
            print(json.dumps(quality(a.root, kind, a.batch, a.threads)), flush=True)
    old_env = None
    if a.old_tree:  # the other checkout first on the path: its stoker is the one imported
        old_env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.abspath(a.old_tree),
                                                               os.environ.get("PYTHONPATH", "")]))
    elif "stoker-old" in a.libs.split(","):
        raise SystemExit("--libs names stoker-old: give --old-tree")
    results = []
    for rnd in range(a.rounds):
        for kind in a.pipelines.split(","):
            for lib in a.libs.split(","):
                cmd = [sys.executable, __file__, "--child", lib, a.root, kind, str(a.batch), str(a.threads),
                       str(a.seconds)]
                env = old_env if lib == "stoker-old" else None
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
                lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
                res = json.loads(lines[-1]) if lines else {"lib": lib, "pipeline": kind,
                                                           "error": p.stderr.strip()[-400:]}
                res["round"] = rnd + 1
                results.append(res)
                print(json.dumps(res), flush=True)
    for kind in a.pipelines.split(","):
        for rnd in range(1, a.rounds + 1):
            done = [r for r in results if r.get("pipeline") == kind and r["round"] == rnd and "img_s" in r]
            rates = {r["lib"]: r["img_s"] for r in done}
            cpu = {r["lib"]: r["cpu_ms_per_img"] for r in done}
            if "stoker" in rates:
                ratios = ", ".join(f"stoker/{k} = {rates['stoker'] / v:.2f}x (CPU time per image: "
                                   f"{cpu[k] / cpu['stoker']:.2f}x less)"
                                   for k, v in rates.items() if k != "stoker")
                print(f"{kind}, round {rnd}: {ratios}")
            if "stoker-fast" in rates:
                print(f"{kind}, round {rnd}: " + ", ".join(f"stoker-fast/{k} = {rates['stoker-fast'] / v:.2f}x"
                                                           for k, v in rates.items() if k != "stoker-fast"))


if __name__ == "__main__":
    main()
