"""The speech front end, stoker beside DALI and torchaudio, in seconds of audio per second.

    python benchmarks/audio_frontend.py [--dir FOLDER] [--files 64] [--batch 16] [--threads 2]
        [--seconds 20] [--engines stoker-cpu,dali-cpu,stoker-gpu,dali-gpu,torchaudio-cpu,torchaudio-gpu]

Front end (a QuartzNet/Jasper-style one): decode (downmixed, resampled to 16 kHz) -> preemphasis
0.97 -> spectrogram (25 ms windows every 10 ms, nfft 512, power) -> 64 mel bands -> decibels ->
normalize over time. Input: ``--files`` generated 16 kHz utterances of 2 to 20 s (speech-like:
a wandering tone with harmonics, noise and pauses), written as 16-bit WAV with soundfile into a
temporary folder, or the audio files already in ``--dir`` (written there first when it is empty).
``--rates 16000,22050,44100`` mixes sample rates so that decoding resamples.

Engines, each in its own subprocess so that none warms another's caches or threads:
  stoker-cpu / dali-cpu   the whole chain on the CPU, ``--threads`` threads
  stoker-gpu / dali-gpu   decode on the CPU, the rest with device="gpu" (only where a GPU is);
                          each batch of features is copied to the host (ragged: no other way to
                          wait for it), the same for both
  torchaudio-cpu / -gpu   soundfile decode and torchaudio.functional resampling, then torchaudio's
                          preemphasis, MelSpectrogram, AmplitudeToDB and a per-band normalization,
                          one utterance at a time (the way a Dataset's __getitem__ runs it)
Each prints one JSON line: audio seconds per second over the timed batches (after two warm-up
batches; whole passes over the files until ``--seconds`` have passed), utterances per second,
the CPU seconds the process spent per audio second, and the cores it kept busy (CPU seconds per
second: with ``--threads 2`` on 2 cores, what falls short of 2 went to waiting, e.g. for the GIL).
A last line gives every engine's rate divided by dali-cpu's (and by dali-gpu's for the GPU engines).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

RATE = 16000
NFFT, WINDOW, STEP, NMEL = 512, 400, 160, 64
ENGINES = ("stoker-cpu", "dali-cpu", "stoker-gpu", "dali-gpu", "torchaudio-cpu", "torchaudio-gpu")


def write_utterances(folder: str, count: int, rates: list[int], seed: int = 0) -> None:
    """``count`` mono 16-bit WAV files of 2 to 20 s in ``folder``."""
    import soundfile as sf

    rng = np.random.default_rng(seed)
    for i in range(count):
        rate = rates[i % len(rates)]
        seconds = float(rng.uniform(2.0, 20.0))
        t = np.arange(int(rate * seconds)) / rate
        pitch = 120 + 40 * np.sin(2 * np.pi * 0.7 * t + rng.uniform(0, 6))  # a voice-like wandering pitch
        phase = 2 * np.pi * np.cumsum(pitch) / rate
        voiced = sum(np.sin(k * phase) / k for k in range(1, 8))
        envelope = (np.sin(2 * np.pi * 2.5 * t + rng.uniform(0, 6)) > -0.3).astype(np.float64)  # pauses
        wave = 0.25 * voiced * envelope + 0.01 * rng.standard_normal(t.size)
        sf.write(os.path.join(folder, f"utt{i:05d}.wav"), wave, rate, subtype="PCM_16")


def audio_files(folder: str) -> list[str]:
    names = sorted(f for f in os.listdir(folder) if f.lower().endswith((".wav", ".flac", ".ogg")))
    return [os.path.join(folder, f) for f in names]


def total_seconds(files: list[str]) -> list[float]:
    import soundfile as sf

    return [sf.info(f).duration for f in files]


def dali_style(engine: str, files: list[str], batch: int, threads: int):
    """The front end as a stoker or DALI pipeline (both speak the same API)."""
    lib, device = engine.split("-")
    if lib == "stoker":
        import stoker.fn as fn
        import stoker.types as types
        from stoker import pipeline_def
    else:
        import nvidia.dali.fn as fn
        import nvidia.dali.types as types
        from nvidia.dali import pipeline_def

    @pipeline_def(batch_size=batch, num_threads=threads, device_id=0 if device == "gpu" else None, seed=1,
                  prefetch_queue_depth=2)
    def front_end():
        data, _ = fn.readers.file(files=files, name="r", pad_last_batch=True)
        audio, _ = fn.decoders.audio(data, dtype=types.FLOAT, downmix=True, sample_rate=float(RATE))
        if device == "gpu":
            audio = audio.gpu()
        audio = fn.preemphasis_filter(audio, preemph_coeff=0.97)
        spec = fn.spectrogram(audio, nfft=NFFT, window_length=WINDOW, window_step=STEP)
        mel = fn.mel_filter_bank(spec, sample_rate=float(RATE), nfilter=NMEL)
        db = fn.to_decibels(mel, multiplier=10.0, reference=1.0, cutoff_db=-80.0)
        return fn.normalize(db, axes=[1])

    pipe = front_end()
    pipe.build()

    def step():
        (out,) = pipe.run()
        if device == "gpu":
            out.as_cpu()  # waits until the batch is complete, not only queued
        return len(out)

    return step


def torchaudio_style(engine: str, files: list[str], batch: int, threads: int):
    """The same front end with soundfile and torchaudio, one utterance at a time."""
    import soundfile as sf
    import torch
    import torchaudio

    torch.set_num_threads(threads)
    dev = "cuda" if engine.endswith("gpu") else "cpu"
    mel = torchaudio.transforms.MelSpectrogram(sample_rate=RATE, n_fft=NFFT, win_length=WINDOW, hop_length=STEP,
                                               n_mels=NMEL, norm="slaney", mel_scale="slaney").to(dev)
    to_db = torchaudio.transforms.AmplitudeToDB(stype="power", top_db=None).to(dev)
    position = [0]

    def one(path):
        wave, rate = sf.read(path, dtype="float32", always_2d=True)
        x = torch.from_numpy(wave.mean(axis=1)).to(dev)
        if rate != RATE:
            x = torchaudio.functional.resample(x, rate, RATE)
        x = torchaudio.functional.preemphasis(x, 0.97)
        f = to_db(mel(x)).clamp_min(-80.0)
        return (f - f.mean(dim=1, keepdim=True)) / (f.std(dim=1, keepdim=True) + 1e-8)

    def step():
        outs = []
        for _ in range(batch):
            outs.append(one(files[position[0] % len(files)]))
            position[0] += 1
        if dev == "cuda":
            torch.cuda.synchronize()
        return len(outs)

    return step


def measure(engine: str, files: list[str], durations: list[float], batch: int, threads: int,
            seconds: float) -> dict:
    """One engine's rates (run inside its own subprocess)."""
    make = torchaudio_style if engine.startswith("torchaudio") else dali_style
    step = make(engine, files, batch, threads)
    per_batch = len(files) / batch
    mean_s = float(np.mean(durations))
    for _ in range(2):
        step()
    done = 0
    cpu0, t0 = time.process_time(), time.perf_counter()
    # whole passes over the files, so that the mix of lengths is the data set's
    while True:
        done += step()
        elapsed = time.perf_counter() - t0
        if elapsed >= seconds and done >= len(files) and done % max(1, round(per_batch) * batch) == 0:
            break
        if elapsed >= 3 * seconds:
            break
    cpu = time.process_time() - cpu0
    audio_s = done * mean_s
    return {"engine": engine, "audio_s_per_s": audio_s / elapsed, "utterances_per_s": done / elapsed,
            "cpu_s_per_audio_s": cpu / audio_s, "cores": cpu / elapsed, "utterances": done, "wall_s": elapsed,
            "batch": batch, "threads": threads}


def gpu_present() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001 - no CuPy, no driver, no device: all mean no GPU
        return False


def available(engine: str) -> str | None:
    """Why ``engine`` cannot run here, or None."""
    import importlib.util

    lib, device = engine.split("-")
    module = {"stoker": "stoker", "dali": "nvidia.dali", "torchaudio": "torchaudio"}[lib]
    try:
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed"
    except ModuleNotFoundError:
        return f"{module} is not installed"
    if device == "gpu" and not gpu_present():
        return "no GPU"
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", help="folder of audio files (generated there when it holds none)")
    parser.add_argument("--files", type=int, default=64)
    parser.add_argument("--rates", default=str(RATE), help="sample rates of generated files, comma-separated")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=20.0, help="timed seconds per engine (at least)")
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--only", help=argparse.SUPPRESS)  # the subprocess's engine
    args = parser.parse_args()

    if args.only:
        files = audio_files(args.dir)
        print(json.dumps(measure(args.only, files, total_seconds(files), args.batch, args.threads, args.seconds)))
        return

    with tempfile.TemporaryDirectory() as tmp:
        folder = args.dir or tmp
        os.makedirs(folder, exist_ok=True)
        if not audio_files(folder):
            write_utterances(folder, args.files, [int(r) for r in args.rates.split(",")])
        files = audio_files(folder)
        durations = total_seconds(files)
        print(json.dumps({"files": len(files), "audio_s": round(sum(durations), 1),
                          "mean_s": round(float(np.mean(durations)), 2), "batch": args.batch,
                          "threads": args.threads, "cpus": os.cpu_count()}), flush=True)
        rates = {}
        for engine in args.engines.split(","):
            why = available(engine)
            if why:
                print(json.dumps({"engine": engine, "skipped": why}), flush=True)
                continue
            cmd = [sys.executable, os.path.abspath(__file__), "--only", engine, "--dir", folder,
                   "--batch", str(args.batch), "--threads", str(args.threads), "--seconds", str(args.seconds)]
            done = subprocess.run(cmd, capture_output=True, text=True)
            lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
            if not lines:
                # a signal leaves stderr empty: the exit status says which (negative: -11 is SIGSEGV)
                print(json.dumps({"engine": engine, "failed": done.stderr[-1500:], "exit_status": done.returncode,
                                  "stdout": done.stdout[-500:]}), flush=True)
                continue
            result = json.loads(lines[-1])
            if done.returncode:  # measured, then failed while exiting: keep the figures, say so
                result["exit_status"] = done.returncode
            rates[engine] = result["audio_s_per_s"]
            print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in result.items()}), flush=True)
        ratios = {}
        for engine, rate in rates.items():
            for base in ("dali-cpu", "dali-gpu"):
                if base in rates and engine != base and (base == "dali-cpu" or engine.endswith("gpu")):
                    ratios[f"{engine}/{base}"] = round(rate / rates[base], 3)
        print(json.dumps({"ratios": ratios}), flush=True)


if __name__ == "__main__":
    main()
