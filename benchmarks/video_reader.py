"""Video reading throughput: 16-frame clips resized to 224x224 from 720p H.264 and HEVC files, stoker
beside DALI and plain PyAV.

    python benchmarks/video_reader.py [DATA_DIR] [--work DIR] [--codecs h264,hevc] [--clips 8]
        [--clip-seconds 10] [--gop 30] [--seconds 8] [--batch 8] [--threads N] [--device cpu|gpu]
        [--libs stoker,dali,pyav] [--rounds 1] [--sequence-length 16]

DATA_DIR holds one sub-folder per codec (``h264/``, ``hevc/``) of video files. Without it the clips
are written with PyAV under ``--work`` (kept for later runs): ``--clips`` clips of ``--clip-seconds``
seconds per codec, 1280x720 at 30 fps, a key frame every ``--gop`` frames, libx264 / libx265 with
preset "veryfast" (a codec whose encoder the PyAV wheel lacks is skipped with a note). The
picture is a textured background that pans, with a moving box, so that motion search has work.

A sample is ``--sequence-length`` consecutive frames (windows one after the other, in file order,
no shuffling) resized to 224x224 (bilinear), uint8 FHWC. Cases, each library and case in its own
subprocess (libraries interleaved per round), each printing one JSON line:

* stoker ``video_resize``: ``readers.video_resize`` (``--device cpu``: PyAV; ``gpu``: device="gpu");
* stoker ``video+resize`` (``--device gpu``): ``readers.video(device="gpu")`` then ``fn.resize``;
  stoker's GPU video reader decodes with NVDEC through PyNvVideoCodec: without that package the
  GPU cases are skipped with a note (they would time a CPU decode and a copy). ``nvdec`` in the
  row says whether the case's reader had an NVDEC implementation registered;
* dali ``video_resize`` / ``video+resize`` (``--device gpu`` only): DALI's ``readers.video_resize``
  and ``readers.video`` + ``fn.resize`` (NVDEC); DALI's CPU video readers decode neither H.264
  nor HEVC (DALI 2.4), so with ``--device cpu`` DALI is skipped with a note;
* pyav ``decode+cv2``: the baseline, always on the CPU: ``--threads`` threads, each decoding
  whole clips straight through with PyAV (``to_ndarray(format="rgb24")``: swscale's fast 4:2:0
  to RGB, chroma per 2x2 block, where stoker converts with the accurate, full-chroma flags of DALI's
  CPU decoder and resizes in swscale after that conversion) and resizing each frame with
  ``cv2.resize(INTER_AREA)`` (antialiased, as stoker's and DALI's resize are by default),
  grouped into windows as the readers do.

Figures: frames/s (frames delivered in samples, over ``--seconds`` after warm-up), clips/s,
CPU time per frame (the process and its children), time to the first batch, load average. A
table of ratios ends the run: stoker/dali per case, stoker/pyav for stoker's best case.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
CODECS = {"h264": "libx264", "hevc": "libx265"}
LIBS = ("stoker", "dali", "pyav")
SIDE = 224
VIDEO_EXT = (".mp4", ".mkv", ".mov", ".avi", ".webm")


# --- the clips ---------------------------------------------------------------------------------
def has_encoder(name: str) -> bool:
    import av

    try:
        av.codec.Codec(name, "w")
        return True
    except Exception:  # noqa: BLE001 - any failure means the wheel lacks it
        return False


def write_clip(path: str, encoder: str, seconds: float, gop: int, w: int = 1280, h: int = 720,
               fps: int = 30, seed: int = 0) -> None:
    """One clip: a smooth random texture panning 3 px right and 2 px down a frame, a box moving
    across it; written to ``path`` + ".part" and renamed when complete."""
    import av

    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, ((h + 64) // 16 + 1, (w + 64) // 16 + 1, 3), dtype=np.uint8)
    texture = np.repeat(np.repeat(small, 16, 0), 16, 1)[:h + 64, :w + 64]  # blocky: cheap to make
    texture = (texture.astype(np.uint16) + rng.integers(0, 24, texture.shape, dtype=np.uint16)).clip(0, 255)
    texture = texture.astype(np.uint8)
    tmp = path + ".part"
    with av.open(tmp, "w", format="mp4") as c:
        options = {"preset": "veryfast"}
        if encoder == "libx265":
            options["x265-params"] = "log-level=error"
        s = c.add_stream(encoder, rate=fps, options=options)
        s.width, s.height, s.pix_fmt = w, h, "yuv420p"
        s.codec_context.gop_size = gop
        for i in range(int(seconds * fps)):
            dy, dx = (2 * i) % 64, (3 * i) % 64
            img = np.ascontiguousarray(texture[dy:dy + h, dx:dx + w])
            x0, y0 = (i * 11) % (w - 160), (i * 5) % (h - 120)
            img[y0:y0 + 120, x0:x0 + 160] = (255 - (i * 7) % 256, (i * 3) % 256, 40)
            for p in s.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                c.mux(p)
        for p in s.encode():
            c.mux(p)
    os.replace(tmp, path)


def make_clips(work: str, codecs: list[str], clips: int, seconds: float, gop: int) -> dict[str, list[str]]:
    """{codec: [paths]}, written under ``work`` where missing; codecs without an encoder left out."""
    out = {}
    for codec in codecs:
        if not has_encoder(CODECS[codec]):
            print(f"{codec}: skipped, this PyAV wheel has no {CODECS[codec]} encoder", flush=True)
            continue
        folder = os.path.join(work, f"{codec}_{clips}x{seconds:g}s_gop{gop}")
        os.makedirs(folder, exist_ok=True)
        paths = [os.path.join(folder, f"clip_{k:03d}.mp4") for k in range(clips)]
        todo = [(k, p) for k, p in enumerate(paths) if not os.path.exists(p)]
        if todo:
            t0 = time.perf_counter()
            for k, p in todo:
                write_clip(p, CODECS[codec], seconds, gop, seed=k)
            print(f"{codec}: wrote {len(todo)} clip(s) in {time.perf_counter() - t0:.1f} s into {folder}", flush=True)
        out[codec] = paths
    return out


def list_clips(data_dir: str, codecs: list[str]) -> dict[str, list[str]]:
    out = {}
    for codec in codecs:
        folder = os.path.join(data_dir, codec)
        files = sorted(os.path.join(folder, n) for n in os.listdir(folder)
                       if n.lower().endswith(VIDEO_EXT)) if os.path.isdir(folder) else []
        if files:
            out[codec] = files
        else:
            print(f"{codec}: skipped, no video files in {folder}", flush=True)
    return out


# --- the cases ---------------------------------------------------------------------------------
def cases(device: str, libs: list[str]) -> list[tuple[str, str]]:
    """(lib, case) pairs for ``device``, in the order they run within a round."""
    out = []
    for lib in libs:
        if lib == "pyav":
            out.append((lib, "decode+cv2"))
        elif device == "cpu":
            if lib == "stoker":
                out.append((lib, "video_resize"))
        else:
            out += [(lib, "video_resize"), (lib, "video+resize")]
    return out


def skip_reason(lib: str, device: str) -> str | None:
    """Why ``lib`` has no case on ``device`` here, or None."""
    if lib == "dali" and device == "cpu":
        return "DALI's CPU video readers decode neither H.264 nor HEVC: DALI runs with --device gpu only"
    if lib == "dali":
        try:
            import nvidia.dali  # noqa: F401
        except ImportError:
            return "nvidia.dali is not installed"
    if lib == "stoker" and device == "gpu":
        try:
            import PyNvVideoCodec  # noqa: F401
        except ImportError:
            return ("PyNvVideoCodec is not installed: stoker's GPU video reader would decode on the CPU and copy "
                    "the frames up (pip install PyNvVideoCodec)")
    if device == "gpu" and lib != "pyav":
        try:
            import cupy

            if cupy.cuda.runtime.getDeviceCount() < 1:
                return "no GPU"
        except Exception as e:  # noqa: BLE001 - no CUDA, no driver...
            return f"no GPU ({type(e).__name__})"
    return None


def build(lib: str, case: str, paths: list[str], a):
    """The built pipeline of (lib, case): (frames,) per iteration, uint8 FHWC 224x224."""
    if lib == "stoker":
        import stoker.fn as fn
        from stoker import pipeline_def
    else:
        import nvidia.dali.fn as fn
        from nvidia.dali import pipeline_def
    dev = a.device
    common = dict(filenames=paths, sequence_length=a.sequence_length, random_shuffle=False, name="r")

    @pipeline_def(batch_size=a.batch, num_threads=a.threads, device_id=0 if dev == "gpu" else None, seed=1)
    def pipe():
        if case == "video_resize":
            return fn.readers.video_resize(**common, device=dev, resize_x=SIDE, resize_y=SIDE)
        frames = fn.readers.video(**common, device=dev)
        return fn.resize(frames, resize_x=SIDE, resize_y=SIDE)

    p = pipe()
    p.build()
    return p


def nvdec_registered(case: str) -> bool | None:
    """stoker: whether the case's reader has a GPU implementation registered (NVDEC)."""
    try:
        from stoker.operators import gpu_registry

        gpu_registry.load_gpu_impls()
        return gpu_registry.lookup("readers.video_resize" if case == "video_resize" else "readers.video") is not None
    except Exception:  # noqa: BLE001
        return None


def child_pipeline(lib: str, case: str, codec: str, paths: list[str], a) -> dict:
    from cpu_pipeline import cpu_seconds

    t0 = time.perf_counter()
    pipe = build(lib, case, paths, a)
    (out,) = pipe.run()
    first = time.perf_counter() - t0
    shape = list(np.asarray(out.as_cpu()[0] if hasattr(out, "as_cpu") else out[0]).shape)
    for _ in range(2):
        pipe.run()
    n, t1, c1 = 0, time.perf_counter(), cpu_seconds()
    while time.perf_counter() - t1 < a.seconds:
        (out,) = pipe.run()
        n += len(out)
    if hasattr(out, "as_cpu"):
        out.as_cpu()  # wait for the last batch on the device
    dt = time.perf_counter() - t1
    row = row_of(lib, case, codec, a, n, dt, cpu_seconds() - c1, first)
    row["sample_shape"] = shape
    if lib == "stoker" and a.device == "gpu":
        row["nvdec"] = nvdec_registered(case)
    return row


def row_of(lib, case, codec, a, samples, dt, cpu, first) -> dict:
    frames = samples * a.sequence_length
    return {"lib": lib, "case": case, "codec": codec, "device": "cpu" if lib == "pyav" else a.device,
            "threads": a.threads, "batch": a.batch, "fps": round(frames / dt, 1), "clips_s": round(samples / dt, 2),
            "cpu_ms_per_frame": round(cpu / max(frames, 1) * 1e3, 3), "first_batch_s": round(first, 2),
            "load_avg_1min": round(os.getloadavg()[0], 2)}


def pyav_windows(path: str, length: int):
    """Plain PyAV: the clip decoded straight through, each frame RGB and resized with cv2; yields
    windows of ``length`` frames (uint8 FHWC), as the readers cut them (an incomplete tail dropped)."""
    import av
    import cv2

    window = []
    with av.open(path) as c:
        for frame in c.decode(video=0):
            rgb = frame.to_ndarray(format="rgb24")
            window.append(cv2.resize(rgb, (SIDE, SIDE), interpolation=cv2.INTER_AREA))
            if len(window) == length:
                yield np.stack(window)
                window = []


def child_pyav(codec: str, paths: list[str], a) -> dict:
    """``--threads`` threads decode clips (each the next of the list, cycled) until the time is up."""
    import cv2
    from cpu_pipeline import cpu_seconds

    cv2.setNumThreads(1)
    order = itertools.cycle(paths)
    lock = threading.Lock()
    state = {"first": None, "samples": 0, "measuring": False, "start": time.perf_counter()}
    deadline = [float("inf")]

    def worker():
        while time.perf_counter() < deadline[0]:
            with lock:
                path = next(order)
            for _ in pyav_windows(path, a.sequence_length):
                now = time.perf_counter()
                if now >= deadline[0]:
                    return
                with lock:
                    if state["first"] is None:
                        state["first"] = now - state["start"]
                    if state["measuring"]:
                        state["samples"] += 1

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(a.threads)]
    for t in threads:
        t.start()
    while state["first"] is None and any(t.is_alive() for t in threads):
        time.sleep(0.01)
    time.sleep(min(1.0, a.seconds / 4))  # warm-up
    with lock:
        state["measuring"], t1 = True, time.perf_counter()
    c1 = cpu_seconds()
    deadline[0] = t1 + a.seconds
    for t in threads:
        t.join()
    return row_of("pyav", "decode+cv2", codec, a, state["samples"], a.seconds, cpu_seconds() - c1,
                  state["first"] or 0.0)


# --- the parent ---------------------------------------------------------------------------------
def run_child(lib: str, case: str, codec: str, paths: list[str], a) -> dict:
    cmd = [sys.executable, __file__, "--child", lib, case, codec, json.dumps(paths), json.dumps(vars(a))]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=300 + 4 * a.seconds)
    except subprocess.TimeoutExpired:
        return {"lib": lib, "case": case, "codec": codec, "error": "timed out"}
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    return json.loads(lines[-1]) if lines else {"lib": lib, "case": case, "codec": codec,
                                                "error": p.stderr.strip()[-600:]}


def ratio_table(rows: list[dict]) -> str:
    """Per codec and round: stoker/dali per case and stoker (best case)/pyav, in frames/s."""
    lines = ["| codec | round | case | stoker fps | dali fps | pyav fps | stoker/dali | stoker/pyav |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    ok = [r for r in rows if "fps" in r]
    for codec in dict.fromkeys(r["codec"] for r in ok):
        for rnd in sorted({r["round"] for r in ok if r["codec"] == codec}):
            here = [r for r in ok if r["codec"] == codec and r["round"] == rnd]
            pyav = next((r["fps"] for r in here if r["lib"] == "pyav"), None)
            for case in dict.fromkeys(r["case"] for r in here if r["lib"] != "pyav"):
                st = next((r["fps"] for r in here if r["lib"] == "stoker" and r["case"] == case), None)
                da = next((r["fps"] for r in here if r["lib"] == "dali" and r["case"] == case), None)
                cells = [f"{v:,.0f}" if v else "-" for v in (st, da, pyav)]
                cells.append(f"{st / da:.2f}x" if st and da else "-")
                cells.append(f"{st / pyav:.2f}x" if st and pyav else "-")
                lines.append(f"| {codec} | {rnd} | {case} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data_dir", nargs="?", help="folder with h264/ and hevc/ sub-folders of clips "
                    "(default: clips written under --work)")
    ap.add_argument("--work", help="where generated clips are kept (default: a folder in the temp dir)")
    ap.add_argument("--codecs", default="h264,hevc")
    ap.add_argument("--clips", type=int, default=8, help="clips per codec to write")
    ap.add_argument("--clip-seconds", type=float, default=10.0)
    ap.add_argument("--gop", type=int, default=30, help="frames between key frames of written clips")
    ap.add_argument("--seconds", type=float, default=8.0, help="measured time per case")
    ap.add_argument("--batch", type=int, default=8, help="samples (clips of --sequence-length frames) per batch")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    ap.add_argument("--libs", default=",".join(LIBS))
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--sequence-length", type=int, default=16)
    return ap.parse_args(argv)


def main(argv=None) -> list[dict]:
    a = parse_args(argv)
    codecs = [c for c in a.codecs.split(",") if c]
    unknown = set(codecs) - set(CODECS)
    if unknown:
        sys.exit(f"unknown codecs {sorted(unknown)}; choose from {','.join(CODECS)}")
    libs = [lb for lb in a.libs.split(",") if lb]
    if set(libs) - set(LIBS):
        sys.exit(f"unknown libs {sorted(set(libs) - set(LIBS))}; choose from {','.join(LIBS)}")
    if a.data_dir:
        clips = list_clips(os.path.abspath(a.data_dir), codecs)
    else:
        a.work = os.path.abspath(a.work or os.path.join(tempfile.gettempdir(), "stoker_video_reader"))
        clips = make_clips(a.work, codecs, a.clips, a.clip_seconds, a.gop)
    runnable = []
    for lib in libs:
        why = skip_reason(lib, a.device)
        if why:
            print(f"{lib}: skipped, {why}", flush=True)
        else:
            runnable.append(lib)
    rows = []
    for rnd in range(1, a.rounds + 1):
        for codec, paths in clips.items():
            for lib, case in cases(a.device, runnable):
                row = run_child(lib, case, codec, paths, a)
                row["round"] = rnd
                rows.append(row)
                print(json.dumps(row), flush=True)
    print("\n" + ratio_table(rows), flush=True)
    return rows


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        lib, case, codec, paths, ns = sys.argv[2:]
        sys.path.insert(0, HERE)
        args = argparse.Namespace(**json.loads(ns))
        paths = json.loads(paths)
        row = child_pyav(codec, paths, args) if lib == "pyav" else child_pipeline(lib, case, codec, paths, args)
        print(json.dumps(row), flush=True)
        os._exit(0)  # skip slow teardown of worker pools
    main()
