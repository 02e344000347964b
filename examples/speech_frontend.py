"""A speech front end on stoker: NeMo manifest -> decode (resampled to 16 kHz) -> preemphasis ->
spectrogram -> mel filter bank -> decibels -> normalize over time.

Writes a few seconds of generated audio (sine sweeps plus noise, WAV and FLAC, mono and stereo,
several sample rates) and a NeMo manifest into a temporary folder, runs the pipeline, and prints
the shapes of the first batch and the throughput. Needs ``soundfile`` (``pip install soundfile``).

    python examples/speech_frontend.py [--files 64] [--batch 16] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import numpy as np

from stoker import fn, pipeline_def, types


def write_dataset(folder: str, count: int) -> str:
    """``count`` audio files and their manifest in ``folder``; returns the manifest's path."""
    import soundfile as sf

    rng = np.random.default_rng(0)
    lines = []
    for i in range(count):
        rate = (16000, 22050, 44100, 8000)[i % 4]
        channels = 1 + i % 2
        seconds = float(rng.uniform(1.0, 3.0))
        t = np.arange(int(rate * seconds)) / rate
        wave = 0.4 * np.sin(2 * np.pi * (150 + 900 * t) * t) + 0.02 * rng.standard_normal(t.size)
        audio = np.stack([wave * (1.0 - 0.3 * c) for c in range(channels)], 1)
        name = f"utt{i:04d}." + ("flac" if i % 3 == 0 else "wav")
        sf.write(os.path.join(folder, name), audio, rate)
        lines.append(json.dumps({"audio_filepath": os.path.join(folder, name), "duration": seconds,
                                 "text": f"utterance number {i}"}))
    path = os.path.join(folder, "manifest.json")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def build(manifest: str, batch: int, threads: int):
    """The front-end pipeline over ``manifest``: (features "ft", file rate, transcript bytes)."""
    @pipeline_def(batch_size=batch, num_threads=threads, device_id=None, seed=1)
    def speech():
        audio, rate, text = fn.readers.nemo_asr(manifest_filepaths=[manifest], sample_rate=16000.0,
                                                dtype=types.FLOAT, downmix=True, name="Reader")
        audio = fn.preemphasis_filter(audio, preemph_coeff=0.97)
        spec = fn.spectrogram(audio, nfft=512, window_length=400, window_step=160)
        mel = fn.mel_filter_bank(spec, sample_rate=16000.0, nfilter=80)
        feats = fn.normalize(fn.to_decibels(mel, multiplier=10.0, cutoff_db=-80.0), axes=[1])
        return feats, rate, text

    pipe = speech()
    pipe.build()
    return pipe


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        manifest = write_dataset(folder, args.files)
        pipe = build(manifest, args.batch, args.threads)
        feats, rate, text = pipe.run()
        for i in range(min(3, len(feats))):
            print(f"sample {i}: features {np.array(feats.at(i)).shape} ({feats.layout()}), "
                  f"file rate {float(np.array(rate.at(i))):.0f} Hz, text {bytes(np.array(text.at(i))).decode()!r}")
        iterations = max(1, args.files // args.batch)
        start = time.perf_counter()
        for _ in range(iterations):
            pipe.run()
        elapsed = time.perf_counter() - start
        print(f"{iterations * args.batch / elapsed:.1f} utterances/s "
              f"({iterations} batches of {args.batch}, {args.threads} threads)")


if __name__ == "__main__":
    main()
