"""GPU pipeline benchmark: stoker's standard training / validation pipelines, stage by stage.

python benchmarks/gpu_pipeline.py DATA_DIR [--seconds 8] [--threads 16] [--batch 256]
        [--shares auto,0,0.25] [--stages decode,decode_resize,train,val] [--on-error raise,skip]

Each measurement runs in its own process (so GPU memory is per pipeline).
Prints one JSON line per run: pipeline, CPU-decode share, images/s, first
batch time, GPU memory taken (cudaMemGetInfo difference), host fallbacks.
``--on-error skip`` shows what the skip policy costs on good data (the mixed decoder
then waits for the engines' call in the CPU stage).
The data set comes from shared/bench/make_imagenet_like.py.
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


def make_pipeline(stage, root, batch, threads, on_error="raise"):
    import stoker.fn as fn
    import stoker.types as types
    from stoker import pipeline_def

    @pipeline_def(batch_size=batch, num_threads=threads, device_id=0, seed=1, on_error=on_error)
    def pipe():
        jpegs, labels = fn.readers.file(file_root=root, random_shuffle=stage != "val", name="r")
        if stage == "val":
            imgs = fn.decoders.image(jpegs, device="mixed", output_type=types.RGB)
            imgs = fn.resize(imgs, resize_shorter=256)
            imgs = fn.crop_mirror_normalize(imgs, crop=(224, 224), dtype=types.FLOAT, output_layout="CHW",
                                            mean=MEAN, std=STD)
            return imgs, labels.gpu()
        imgs = fn.decoders.image_random_crop(jpegs, device="mixed", output_type=types.RGB)
        if stage == "decode":
            return imgs, labels.gpu()
        imgs = fn.resize(imgs, resize_x=224, resize_y=224)
        if stage == "decode_resize":
            return imgs, labels.gpu()
        imgs = fn.crop_mirror_normalize(imgs, dtype=types.FLOAT, output_layout="CHW", mean=MEAN, std=STD,
                                        mirror=fn.random.coin_flip())
        return imgs, labels.gpu()

    return pipe()


def child(stage, root, seconds, threads, batch, on_error):
    import cupy as cp

    from stoker.operators import gpu_registry

    cp.cuda.Device(0).use()
    free0, _ = cp.cuda.runtime.memGetInfo()
    t0 = time.perf_counter()
    pipe = make_pipeline(stage, root, batch, threads, on_error)
    pipe.build()
    out = pipe.run()
    out[0].as_cpu()
    first = time.perf_counter() - t0
    for _ in range(3):
        pipe.run()
    n, t1 = 0, time.perf_counter()
    while time.perf_counter() - t1 < seconds:
        pipe.run()
        n += batch
    out = pipe.run()
    out[0].as_cpu()  # wait for the last batch's GPU work
    n += batch
    rate = n / (time.perf_counter() - t1)
    free1, _ = cp.cuda.runtime.memGetInfo()
    share = os.environ.get("STOKER_CPU_DECODE_SHARE", "auto")
    print(json.dumps({"pipeline": stage, "on_error": on_error, "cpu_share": share,
                      "threads": threads, "img_s": round(rate), "first_batch_s": round(first, 2),
                      "gpu_mem_mib": round((free0 - free1) / 2**20),
                      "switch_interval_s": sys.getswitchinterval(),
                      "nvimgcodec_threads": os.environ.get("STOKER_NVIMGCODEC_THREADS", "all"),
                      "host_fallbacks": dict(gpu_registry.FALLBACKS)}), flush=True)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _, _, stage, root, seconds, threads, batch, on_error = sys.argv
        child(stage, root, float(seconds), int(threads), int(batch), on_error)
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--seconds", default="8")
    ap.add_argument("--threads", default="16")
    ap.add_argument("--batch", default="256")
    ap.add_argument("--shares", default="auto,0")
    ap.add_argument("--stages", default="decode,decode_resize,train,val")
    ap.add_argument("--on-error", default="raise", help="on_error policies to run, comma-separated")
    a = ap.parse_args()
    runs = [(share, stage, on_error) for share in a.shares.split(",") for stage in a.stages.split(",")
            for on_error in a.on_error.split(",")]
    for share, stage, on_error in runs:
        env = dict(os.environ, STOKER_CPU_DECODE_SHARE=share)
        p = subprocess.run([sys.executable, __file__, "--child", stage, a.root, a.seconds, a.threads, a.batch,
                            on_error], capture_output=True, text=True, timeout=300, env=env)
        lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
        print(lines[-1] if lines else json.dumps({"pipeline": stage, "cpu_share": share,
                                                  "error": p.stderr[-600:]}), flush=True)

if __name__ == "__main__":
    main()
