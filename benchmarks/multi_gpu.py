"""Multi-GPU figures (issue 23): the standard training pipeline on 1, 2 (and 4) GPUs of one host,
stoker against DALI in one run.

The pipeline is shared/bench/gpu_bench.py's ``train``: readers.file (shuffled, sharded
``shard_id=rank, num_shards=world``), decoders.image_random_crop on ``device="mixed"``, resize to
224x224, crop_mirror_normalize with a coin-flip mirror, labels.gpu(); ``device_id=rank``, batch 256,
``cores // world`` CPU threads per rank. For each (library, world size) the parent starts ``world``
child processes, one per GPU. Each builds its pipeline, warms up (first batch + 3), reports
"ready" and keeps running until the parent hands every rank the same absolute start time (a few
seconds after the slowest is ready); then each counts the images it gets in the same wall-clock
window of ``--seconds`` and prints one JSON line {lib, world, rank, img_s, first_batch_s,
gpu_mem_mib, gpu_util, ...}. The parent sums the ranks and prints a table: images/s summed over
the GPUs, scaling against the same library on 1 GPU, the ratio to DALI at each size, and the
issue's targets (>= 1.95x one GPU on 2 GPUs, >= 3.8x on 4, >= 1.15x DALI at each size).

``--train-step``: after each batch, one ResNet-50 step (torchvision, random init, channels_last,
bf16 autocast, SGD; forward + backward) on that batch, fed by each library's
``plugin.pytorch.DALIGenericIterator``. ``--libs synthetic`` runs the same step on random tensors
already on the GPU (no loader): the GPU-bound ceiling. The ranks train independently (no gradient
all-reduce), because the question is whether the loader keeps each GPU busy, not NCCL's speed.
GPU utilisation is NVML's (``pynvml``, else ``nvidia-smi``) sampled every 200 ms over the window,
mean per rank; ``gpu_mem_mib`` is the memory in use on the rank's GPU at the window's end (the
whole device: a larger figure on GPU 0 would mean another rank made a context there).

On the GPU machine (data from shared/bench/make_imagenet_like.py in /tmp/data; DALI installed as
shared/bench/DALI_ON_DEVICE.md says, ``export PYTHONPATH=/tmp/site``)::

    python benchmarks/multi_gpu.py --data /tmp/data --gpus 1,2 --libs stoker,dali --seconds 8
    python benchmarks/multi_gpu.py --data /tmp/data --gpus 1,2 --libs stoker,dali,synthetic \\
        --seconds 8 --train-step

(``--gpus 1,2,4`` on a 4-GPU machine; the default is 1 and each power of two up to the GPUs
seen.) A case costs its build (often 10-40 s) plus ``--lead`` and ``--seconds``: six cases fit
in a 10-minute command. ``--cpu`` runs the same code with CPU decoding and no NVML, to test the
mechanics without a GPU::

    python -m stoker.sample_data /tmp/mg_samples 64 --classes 4
    python benchmarks/multi_gpu.py --cpu --data /tmp/mg_samples --gpus 1,2 --seconds 2 --batch 8
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time

MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]
STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]
LIB_MODULES = {"stoker": "stoker", "dali": "nvidia.dali", "nvidia.dali": "nvidia.dali"}
TARGET_SCALING = {2: 1.95, 4: 3.8}
TARGET_VS_DALI = 1.15
WARMUP_BATCHES = 3


# ---------------------------------------------------------------- child: one rank of one case

def make_pipeline(cfg):
    """gpu_bench.py's train pipeline for one rank; ``--cpu`` changes only the device strings."""
    base = LIB_MODULES[cfg["lib"]]
    lib = importlib.import_module(base)
    fn = importlib.import_module(base + ".fn")
    types = importlib.import_module(base + ".types")
    gpu = not cfg["cpu"]

    @lib.pipeline_def(batch_size=cfg["batch"], num_threads=cfg["threads"],
                      device_id=cfg["rank"] if gpu else None, seed=1 + cfg["rank"])
    def train():
        jpegs, labels = fn.readers.file(file_root=cfg["data"], random_shuffle=True, shard_id=cfg["rank"],
                                        num_shards=cfg["world"], name="r")
        imgs = fn.decoders.image_random_crop(jpegs, device="mixed" if gpu else "cpu", output_type=types.RGB)
        imgs = fn.resize(imgs, resize_x=224, resize_y=224)
        imgs = fn.crop_mirror_normalize(imgs, dtype=types.FLOAT, output_layout="CHW", mean=MEAN, std=STD,
                                        mirror=fn.random.coin_flip())
        return imgs, (labels.gpu() if gpu else labels)

    return train()


def loader_steps(cfg):
    """(step, sync, first_batch_s) for the loader alone: a step is one ``pipe.run()``."""
    t0 = time.perf_counter()
    pipe = make_pipeline(cfg)
    pipe.build()
    last = [pipe.run()]
    # as_cpu() waits for the batch's GPU work (a copy on the pipeline's stream); on a CPU list it
    # is free, so both modes take the same path.
    last[0][0].as_cpu()
    first = time.perf_counter() - t0

    def step():
        last[0] = pipe.run()
        return len(last[0][0])

    def sync():
        last[0][0].as_cpu()

    return step, sync, first


def _iterator_batches(cfg):
    """(data, label) torch batches from the library's DALIGenericIterator, epoch after epoch."""
    plugin = importlib.import_module(LIB_MODULES[cfg["lib"]] + ".plugin.pytorch")
    it = plugin.DALIGenericIterator([make_pipeline(cfg)], ["data", "label"], reader_name="r", auto_reset=True)
    while True:
        # auto_reset: StopIteration at an epoch's end rewinds the iterator for the next ``for``.
        for out in it:
            yield out[0]["data"], out[0]["label"]


def _synthetic_batches(cfg, torch, dev):
    """The no-loader ceiling: one random batch, already on the device, every step."""
    x = torch.randn(cfg["batch"], 3, 224, 224, device=dev)
    y = torch.randint(0, 1000, (cfg["batch"], 1), device=dev, dtype=torch.int32)
    while True:
        yield x, y


def train_steps(cfg):
    """(step, sync, first_batch_s) with one ResNet-50 training step on each batch."""
    import torch
    import torch.nn.functional as F
    import torchvision

    gpu = not cfg["cpu"]
    dev = torch.device(f"cuda:{cfg['rank']}" if gpu else "cpu")
    if gpu:
        # before anything touches CUDA, so this rank makes no context on GPU 0
        torch.cuda.set_device(dev)
    torch.set_num_threads(cfg["threads"])  # each rank's share of the cores, as the loader gets
    torch.backends.cudnn.benchmark = True  # fixed shapes: let cuDNN pick its kernels in the warm-up
    model = torchvision.models.resnet50().to(dev, memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    t0 = time.perf_counter()
    batches = _synthetic_batches(cfg, torch, dev) if cfg["lib"] == "synthetic" else _iterator_batches(cfg)
    next(batches)
    first = time.perf_counter() - t0

    def step():
        x, y = next(batches)
        x = x.contiguous(memory_format=torch.channels_last)
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y.reshape(-1).long())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return x.shape[0]

    def sync():
        if gpu:
            torch.cuda.synchronize(dev)

    return step, sync, first


def nvml_index(rank, visible=None):
    """NVML's index of CUDA device ``rank``: the children run with CUDA_DEVICE_ORDER=PCI_BUS_ID
    (NVML's order), and CUDA_VISIBLE_DEVICES, if set, renumbers; None where it names UUIDs."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    if not visible:
        return rank
    entry = visible.split(",")[rank].strip()
    return int(entry) if entry.isdigit() else None


def parse_smi(text):
    """(utilisation %, memory used MiB) from one line of nvidia-smi's csv,noheader,nounits."""
    util, mem = (float(v) for v in text.strip().splitlines()[0].split(","))
    return util, mem


def gpu_reader(index):
    """A callable giving (utilisation %, memory used MiB) of GPU ``index``; None without one."""
    if index is None:
        return None
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        return lambda: (float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu),
                        pynvml.nvmlDeviceGetMemoryInfo(handle).used / 2**20)
    except Exception as e:  # noqa: BLE001 - no pynvml or no NVML library: nvidia-smi reads the same
        print(f"multi_gpu: NVML through pynvml unavailable ({e!r}); using nvidia-smi", file=sys.stderr)
    cmd = ["nvidia-smi", "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits", "-i",
           str(index)]
    return lambda: parse_smi(subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=True).stdout)


class GpuSampler:
    """Samples ``read()`` every ``period`` s in a thread between start() and stop().

    A failed read is skipped (and counted), never raised: the images/s figure must survive a
    utilisation reader that breaks."""

    def __init__(self, read, period=0.2):
        self.read, self.period = read, period
        self.samples, self.failures = [], 0
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _sample(self):
        try:
            self.samples.append(self.read())
        except Exception as e:  # noqa: BLE001 - see the class docstring
            self.failures += 1
            if self.failures == 1:
                print(f"multi_gpu: GPU utilisation read failed: {e!r}", file=sys.stderr)

    def _loop(self):
        while not self._halt.is_set():
            self._sample()
            self._halt.wait(self.period)

    def start(self):
        if self.read is not None:
            self._thread.start()

    def stop(self):
        """(mean utilisation %, last memory MiB), or (None, None) without a reader or samples."""
        if self.read is None:
            return None, None
        self._halt.set()
        self._thread.join(timeout=15)
        self._sample()  # memory at the window's end
        if not self.samples:
            return None, None
        utils = [u for u, _ in self.samples]
        return round(sum(utils) / len(utils), 1), round(self.samples[-1][1])


def _start_time_box():
    """The parent's start time, read from stdin in a thread so the main loop keeps stepping."""
    box = {}

    def read():
        line = sys.stdin.readline()
        box["t"] = float(line) if line.strip() else None  # "" = the parent closed stdin: give up

    threading.Thread(target=read, daemon=True).start()
    return box


def measure(step, sync, cfg, sampler):
    """Warm up, say ready, run on to the common start time, then count images in the window.

    The loop never pauses while the other ranks get ready, so the window starts with the loader
    in its steady state (an idle pipeline would fill its prefetch queue and flatter the rate)."""
    for _ in range(WARMUP_BATCHES):
        step()
    sync()
    box = _start_time_box()
    print(json.dumps({"ready": cfg["rank"]}), flush=True)
    give_up = time.time() + cfg["wait_s"]
    # Until the start time comes, step on to give_up; once it comes, to it; on None, stop.
    while box.get("t", 0) is not None and time.time() < box.get("t", give_up):
        step()
    if box.get("t") is None:
        raise SystemExit(f"rank {cfg['rank']}: no start time from the parent")
    sync()  # the window counts only work done inside it
    t_first = time.time()
    sampler.start()
    n, end = 0, box["t"] + cfg["seconds"]
    while n == 0 or time.time() < end:  # at least one step, should the last before the window overrun it
        n += step()
    sync()
    t_last = time.time()
    util, mem = sampler.stop()
    return {"images": n, "img_s": round(n / (t_last - t_first), 1), "t_first": t_first, "t_last": t_last,
            "gpu_util": util, "gpu_mem_mib": mem}


def child(cfg):
    steps = train_steps if cfg["train_step"] else loader_steps
    step, sync, first = steps(cfg)
    sampler = GpuSampler(None if cfg["cpu"] else gpu_reader(nvml_index(cfg["rank"])))
    row = measure(step, sync, cfg, sampler)
    out = {k: cfg[k] for k in ("lib", "world", "rank", "threads", "batch", "train_step")}
    out.update(row, first_batch_s=round(first, 2), mode="cpu" if cfg["cpu"] else "gpu")
    print(json.dumps(out), flush=True)


# ---------------------------------------------------------------- parent: cases and the table

class CaseFailed(Exception):
    pass


def _pump(rank, stream, lines):
    """Each JSON line a child prints goes on ``lines``; (rank, None) marks its stdout closing."""
    for text in stream:
        if text.startswith("{"):
            try:
                lines.put((rank, json.loads(text)))
            except json.JSONDecodeError:
                pass  # a library's own output that happens to start with "{"
    lines.put((rank, None))


def _collect(lines, key, world, deadline):
    """One message holding ``key`` from each rank, before ``deadline``."""
    got = {}
    while len(got) < world:
        try:
            rank, msg = lines.get(timeout=max(0.0, deadline - time.time()))
        except queue.Empty:
            missing = sorted(set(range(world)) - set(got))
            raise CaseFailed(f"timed out waiting for {key!r} from ranks {missing}") from None
        if msg is None and rank not in got:
            raise CaseFailed(f"rank {rank} exited before its {key!r}")
        if msg is not None and key in msg:
            got[rank] = msg
    return [got[r] for r in range(world)]


def _stderr_tail(err, chars=2500):
    err.seek(0)
    return err.read()[-chars:]


def child_config(args, lib, world, rank):
    return {"lib": lib, "world": world, "rank": rank, "data": args.data, "batch": args.batch,
            "threads": args.threads or max(1, cpu_count() // world), "seconds": args.seconds,
            "cpu": args.cpu, "train_step": args.train_step, "wait_s": args.build_timeout + args.lead + 60}


def run_case(args, lib, world):
    """The per-rank rows of one (library, world size) case; None (stderr shown) if it failed."""
    # PCI_BUS_ID: CUDA numbers the GPUs as NVML does, so rank r samples the GPU it runs on.
    env = dict(os.environ, CUDA_DEVICE_ORDER="PCI_BUS_ID", PYTHONUNBUFFERED="1")
    lines, procs = queue.Queue(), []
    try:
        for rank in range(world):
            err = tempfile.TemporaryFile(mode="w+")
            cfg = json.dumps(child_config(args, lib, world, rank))
            p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child", cfg], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=err, text=True, env=env)
            procs.append((p, err))
            threading.Thread(target=_pump, args=(rank, p.stdout, lines), daemon=True).start()
        _collect(lines, "ready", world, time.time() + args.build_timeout)
        start = time.time() + args.lead
        for p, _ in procs:
            p.stdin.write(f"{start!r}\n")
            p.stdin.flush()
        return _collect(lines, "img_s", world, start + args.seconds + args.end_timeout)
    except (CaseFailed, OSError) as e:
        print(f"# {lib} on {world} GPU(s): FAILED: {e}", flush=True)
        for p, _ in procs:
            if p.poll() is None:
                p.kill()  # the others would wait for a start time that never comes; _finish shows stderr
        return None
    finally:
        _finish(procs)


def _finish(procs):
    """Let each child exit (pipelines tear down), killing any that take over 60 s."""
    for rank, (p, err) in enumerate(procs):
        try:
            p.stdin.close()
        except OSError:
            pass
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        if p.returncode:  # its row (if any) stands, but a crash in teardown is worth seeing
            print(f"# rank {rank} exit {p.returncode}, stderr tail:\n{_stderr_tail(err)}", flush=True)
        err.close()


def summarize(rows):
    """Per (lib, world): the ranks' rates summed in each round, then the mean over rounds."""
    cases = {}
    for r in rows:
        cases.setdefault((r["lib"], r["world"]), {}).setdefault(r["round"], []).append(r)
    out = {}
    for (lib, world), rounds in cases.items():
        ranks = [r for rs in rounds.values() for r in rs]
        utils = [r["gpu_util"] for r in ranks if r["gpu_util"] is not None]
        mems = [r["gpu_mem_mib"] for r in ranks if r["gpu_mem_mib"] is not None]
        starts = [max(r["t_first"] for r in rs) - min(r["t_first"] for r in rs) for rs in rounds.values()]
        out[(lib, world)] = {
            "lib": lib, "world": world, "rounds": len(rounds),
            "img_s": sum(sum(r["img_s"] for r in rs) for rs in rounds.values()) / len(rounds),
            "gpu_util": round(sum(utils) / len(utils), 1) if utils else None,
            "gpu_mem_mib": max(mems) if mems else None,
            "first_batch_s": max(r["first_batch_s"] for r in ranks),
            "start_skew_s": round(max(starts), 3)}
    for (lib, world), s in out.items():
        one, dali, syn = out.get((lib, 1)), out.get(("dali", world)), out.get(("synthetic", world))
        s["scaling"] = s["img_s"] / one["img_s"] if one and one["img_s"] else None
        s["vs_dali"] = s["img_s"] / dali["img_s"] if dali and dali["img_s"] else None
        s["vs_synthetic"] = s["img_s"] / syn["img_s"] if syn and syn["img_s"] else None
    return [out[k] for k in sorted(out, key=lambda k: (k[1], k[0]))]


def _x(v):
    return "-" if v is None else f"{v:.2f}x"


def table(summary):
    head = ("| lib | GPUs | img/s (sum) | img/s per GPU | vs same lib, 1 GPU | vs DALI | vs synthetic "
            "| GPU util % | GPU MiB (max) | first batch s (max) | start skew s |")
    lines = [head, "|" + " --- |" * (head.count("|") - 1)]
    for s in summary:
        util = "-" if s["gpu_util"] is None else f"{s['gpu_util']:.0f}"
        mem = "-" if s["gpu_mem_mib"] is None else str(s["gpu_mem_mib"])
        lines.append(f"| {s['lib']} | {s['world']} | {s['img_s']:.0f} | {s['img_s'] / s['world']:.0f} "
                     f"| {_x(s['scaling'])} | {_x(s['vs_dali'])} | {_x(s['vs_synthetic'])} | {util} | {mem} "
                     f"| {s['first_batch_s']:.2f} | {s['start_skew_s']:.3f} |")
    return "\n".join(lines)


def target_lines(summary):
    """The issue's targets, for each library other than DALI and the synthetic ceiling."""
    out = []
    for s in summary:
        if s["lib"] in ("dali", "nvidia.dali", "synthetic"):
            continue
        checks = []
        if s["world"] in TARGET_SCALING and s["scaling"] is not None:
            want = TARGET_SCALING[s["world"]]
            checks.append(f"scaling {s['scaling']:.2f}x (target {want}x) {'ok' if s['scaling'] >= want else 'MISS'}")
        if s["vs_dali"] is not None:
            checks.append(f"vs DALI {s['vs_dali']:.2f}x (target {TARGET_VS_DALI}x) "
                          f"{'ok' if s['vs_dali'] >= TARGET_VS_DALI else 'MISS'}")
        if checks:
            out.append(f"# {s['lib']} on {s['world']} GPU(s): " + "; ".join(checks))
    return out


def cpu_count():
    """The cores this process may use (a container's share, not the host's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def visible_gpus():
    """How many GPUs the children will see, without importing a CUDA library here."""
    if os.environ.get("CUDA_VISIBLE_DEVICES") is not None:
        return len([d for d in os.environ["CUDA_VISIBLE_DEVICES"].split(",") if d.strip()])
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


def default_sizes(gpus):
    sizes, n = [], 1
    while n <= max(1, gpus):
        sizes.append(n)
        n *= 2
    return sizes


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="a folder of class sub-folders of JPEGs")
    ap.add_argument("--libs", default="stoker,dali", help="stoker, dali (nvidia.dali), synthetic (--train-step)")
    ap.add_argument("--gpus", default=None, help="world sizes, e.g. 1,2,4 (default: 1 and powers of two up to "
                                                 "the GPUs seen; 1,2 with --cpu)")
    ap.add_argument("--seconds", type=float, default=8.0, help="the measuring window")
    ap.add_argument("--rounds", type=int, default=1, help="repeat every case; libraries interleave in a round")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--threads", type=int, default=0, help="CPU threads per rank (default cores // world)")
    ap.add_argument("--train-step", action="store_true", help="a ResNet-50 step per batch")
    ap.add_argument("--cpu", action="store_true", help="CPU decoding, no NVML: tests the mechanics here")
    ap.add_argument("--lead", type=float, default=3.0, help="seconds from the last 'ready' to the window")
    ap.add_argument("--build-timeout", type=float, default=300.0, help="seconds for all ranks to be ready")
    ap.add_argument("--end-timeout", type=float, default=120.0, help="seconds after the window for results")
    ap.add_argument("--json", default=None, help="also write every rank's row and the summary here")
    a = ap.parse_args(argv)
    a.libs = [lib.strip() for lib in a.libs.split(",") if lib.strip()]
    for lib in a.libs:
        if lib not in LIB_MODULES and lib != "synthetic":
            ap.error(f"unknown library {lib!r}")
    if "synthetic" in a.libs and not a.train_step:
        ap.error("synthetic (no loader) only means something with --train-step")
    a.libs = ["dali" if lib == "nvidia.dali" else lib for lib in a.libs]
    if a.gpus is None:
        a.sizes = [1, 2] if a.cpu else default_sizes(visible_gpus())
    else:
        a.sizes = [int(n) for n in a.gpus.split(",")]
    return a


def main(argv=None):
    a = parse_args(argv)
    gpus = None if a.cpu else visible_gpus()
    seen = "cpu mode (ranks stand for GPUs)" if a.cpu else f"gpu mode, {gpus} GPUs seen"
    print(f"# multi_gpu: {seen}, {cpu_count()} cores, sizes {a.sizes}, "
          f"libs {a.libs}, batch {a.batch}, {a.seconds} s window, train_step={a.train_step}", flush=True)
    rows = []
    for rnd in range(a.rounds):
        for world in a.sizes:
            if gpus is not None and world > gpus:
                print(f"# skipping {world} GPUs: only {gpus} seen", flush=True)
                continue
            for lib in a.libs:
                for row in run_case(a, lib, world) or []:
                    row["round"] = rnd
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    summary = summarize(rows)
    print(table(summary))
    for line in target_lines(summary):
        print(line)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows, "summary": summary}, f, indent=1)
    return 0 if rows else 1


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        child(json.loads(sys.argv[2]))
    else:
        sys.exit(main())
