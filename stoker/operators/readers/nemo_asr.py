"""``fn.readers.nemo_asr``: speech samples (audio, sample rate, transcript, index) from NVIDIA NeMo
manifests.

A manifest has one JSON object per line: ``audio_filepath`` (required), ``duration`` and
``offset`` (seconds) and ``text``. Entries are listed in manifest order, manifest after manifest;
``min_duration`` / ``max_duration`` (when positive) drop the entries whose ``duration`` lies
outside. A relative ``audio_filepath`` is taken from the working directory, as DALI takes it, or,
where no such file exists there, from the manifest's folder (NeMo's convention).

Outputs, in DALI's order, each present as its flag asks:
audio (float32 by default; (T,) with ``downmix``, the default, else (T, C)), the file's sample
rate (float32 scalar: the file's, even when ``sample_rate`` resamples the audio), the transcript
(uint8 UTF-8 bytes, no terminator) and the entry's index among the listed ones (int64, shape
(1,)). ``offset`` and ``duration`` select the part of the file that is decoded.
"""

from __future__ import annotations

import json
import os

import numpy as np

from stoker import types
from stoker.operators.audio.decoder import check_decode_args, decode_audio
from stoker.operators.readers import storage
from stoker.operators.readers._indexed import IndexedReader
from stoker.operators.readers._listing import ListingError
from stoker.operators.readers.file import READER_ARGS
from stoker.operators.schema import REQUIRED, Arg, Schema, register


def _num_outputs(args: dict) -> int:
    return 1 + bool(args.get("read_sample_rate", True)) + bool(args.get("read_text", True)) \
        + bool(args.get("read_idxs", False))


def parse_manifest(path: str, text: str) -> list[dict]:
    """The entries of one manifest's ``text``; raises ListingError naming the file and line."""
    entries = []
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as e:
            raise ListingError("manifest_filepaths", f"{path}:{lineno}: not a JSON object ({e.msg})") from None
        if not isinstance(entry, dict) or not isinstance(entry.get("audio_filepath"), str):
            raise ListingError("manifest_filepaths", f"{path}:{lineno}: the entry has no 'audio_filepath' string")
        for key in ("duration", "offset"):
            if key in entry and not isinstance(entry[key], (int, float)):
                raise ListingError("manifest_filepaths", f"{path}:{lineno}: '{key}' must be a number, "
                                                         f"got {entry[key]!r}")
        entries.append(entry)
    return entries


@register
class NemoAsrReader(IndexedReader):
    """Reads audio and transcripts listed in NeMo ASR manifests."""

    schema = Schema(
        name="readers.nemo_asr",
        legacy_name="NemoAsrReader",
        doc="Reads (audio, sample rate, transcript, index) from NeMo ASR manifests (JSON lines with "
            "audio_filepath, duration, offset, text).",
        args=[
            Arg("manifest_filepaths", "str_list", REQUIRED, doc="paths of NeMo manifest files"),
            Arg("read_sample_rate", "bool", True, doc="output each file's sample rate"),
            Arg("read_text", "bool", True, doc="output the transcripts (uint8 UTF-8)"),
            Arg("read_idxs", "bool", False, doc="output each entry's index among the listed ones (int64)"),
            Arg("min_duration", "float", 0.0, doc="if positive, drop entries shorter than this (seconds)"),
            Arg("max_duration", "float", 0.0, doc="if positive, drop entries longer than this (seconds)"),
            Arg("sample_rate", "float", -1.0, doc="if positive, resample the audio to this rate (Hz)"),
            Arg("downmix", "bool", True, doc="average the channels into one (1D audio)"),
            Arg("dtype", "dtype", types.FLOAT, doc="audio type: INT16, INT32 or FLOAT"),
            Arg("quality", "float", 50.0, doc="resampling quality in [0, 100]"),
            Arg("normalize_text", "bool", None, doc="deprecated in DALI; ignored"),
            *READER_ARGS,
        ],
        inputs=(0, 0),
        num_outputs=_num_outputs,
    )

    def setup(self):
        super().setup()
        a = self.args
        self.dtype = check_decode_args(self.schema.name, a)
        if not a["manifest_filepaths"]:
            raise self._arg_error("manifest_filepaths", "needs at least one manifest")
        if a["max_duration"] > 0 and a["min_duration"] > a["max_duration"]:
            raise self._arg_error("min_duration", f"{a['min_duration']} exceeds max_duration {a['max_duration']}")
        self._entries: list[dict] = []

    def output_layouts(self, input_layouts):
        return [""] * self.num_outputs

    def list_samples(self) -> int:
        a = self.args
        entries = []
        for manifest in a["manifest_filepaths"]:
            try:
                text = storage.read_bytes(manifest).decode("utf-8")
            except OSError as e:
                raise ListingError("manifest_filepaths", str(e)) from None
            except UnicodeDecodeError:
                raise ListingError("manifest_filepaths", f"{manifest}: not UTF-8 text") from None
            folder = os.path.dirname(manifest)
            for entry in parse_manifest(manifest, text):
                duration = float(entry.get("duration", 0.0) or 0.0)
                if a["min_duration"] > 0 and duration < a["min_duration"]:
                    continue
                if a["max_duration"] > 0 and duration > a["max_duration"]:
                    continue
                path = entry["audio_filepath"]
                if not os.path.isabs(path) and "://" not in path and not storage.exists(path):
                    beside = storage.join(folder, path)
                    if storage.exists(beside):
                        path = beside
                entries.append({"path": path, "offset": float(entry.get("offset", 0.0) or 0.0),
                                "duration": duration, "text": str(entry.get("text", "") or "")})
        self._entries = entries
        return len(entries)

    def sample_source(self, i: int) -> str:
        return self._entries[i]["path"]

    def listing_digest(self, digest) -> None:
        for e in self._entries:
            key = f"{e['path']}\0{e['offset']}\0{e['duration']}\0{e['text']}\0"
            digest.update(key.encode("utf-8", "surrogateescape"))

    def load_sample(self, i: int) -> tuple:
        a, e = self.args, self._entries[i]
        with storage.open_binary(e["path"]) as f:
            try:
                # the rate output is the file's, also when the audio is resampled (as in DALI)
                audio, rate = decode_audio(f, self.dtype, a["downmix"], max(a["sample_rate"], 0.0), a["quality"],
                                           e["offset"], e["duration"])
            except ValueError as err:
                raise ValueError(f"{e['path']}: {err}") from None
        outs = [audio]
        if a["read_sample_rate"]:
            outs.append(np.float32(rate))
        if a["read_text"]:
            outs.append(np.frombuffer(e["text"].encode("utf-8"), np.uint8).copy())
        if a["read_idxs"]:
            outs.append(np.array([i], np.int64))
        return tuple(outs)

