"""Fixtures of the audio tests: real audio files written with soundfile (libsndfile) into a
temporary folder: sine sweeps plus noise at several sample rates, mono and stereo, PCM and float
WAV, FLAC and Ogg/Vorbis. Nothing is downloaded."""

import numpy as np
import pytest

sf = pytest.importorskip("soundfile")

# (name, sample rate, channels, seconds, soundfile format, subtype)
FILES = [
    ("mono16.wav", 16000, 1, 0.6, "WAV", "PCM_16"),
    ("stereo16.wav", 22050, 2, 0.5, "WAV", "PCM_16"),
    ("stereo_float.wav", 44100, 2, 0.3, "WAV", "FLOAT"),
    ("mono_u8.wav", 8000, 1, 0.5, "WAV", "PCM_U8"),
    ("stereo32.wav", 48000, 2, 0.25, "WAV", "PCM_32"),
    ("stereo24.flac", 44100, 2, 0.3, "FLAC", "PCM_24"),
    ("mono16.flac", 16000, 1, 0.4, "FLAC", "PCM_16"),
    ("stereo.ogg", 16000, 2, 0.5, "OGG", "VORBIS"),
]


def sweep(rate: int, seconds: float, channels: int, seed: int = 0) -> np.ndarray:
    """A (T, C) float64 sine sweep (100 Hz to 0.4 x Nyquist) plus noise, a different mix per channel."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(rate * seconds)) / rate
    f1 = 0.4 * rate / 2
    phase = 2 * np.pi * (100 * t + (f1 - 100) * t * t / (2 * seconds))
    out = [0.5 / (c + 1) * np.sin(phase * (1 + 0.1 * c)) + 0.02 * rng.standard_normal(t.size) for c in range(channels)]
    return np.stack(out, 1)


@pytest.fixture(scope="session")
def audio_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("audio")
    for i, (name, rate, ch, secs, fmt, subtype) in enumerate(FILES):
        sf.write(str(d / name), sweep(rate, secs, ch, i), rate, format=fmt, subtype=subtype)
    return d


@pytest.fixture(scope="session")
def encoded(audio_dir):
    """{name: 1D uint8 array of the file's bytes}."""
    return {name: np.fromfile(str(audio_dir / name), np.uint8) for name, *_ in FILES}


@pytest.fixture(scope="session")
def waves():
    """Float32 signals of different lengths: a batch of 1D speech-like audio."""
    return [sweep(16000, s, 1, i)[:, 0].astype(np.float32) for i, s in enumerate((0.5, 0.23, 1.1))]
