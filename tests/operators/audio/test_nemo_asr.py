"""readers.nemo_asr against DALI's reader: outputs and their order, offset/duration, duration
filters, resampling (the rate output stays the file's), text bytes, indices, reader_meta."""

import json

import numpy as np
import pytest
from conftest import sweep
from oracle import libs, to_dali

from stoker import types

sf = pytest.importorskip("soundfile")
pytestmark = pytest.mark.oracle


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    d = tmp_path_factory.mktemp("nemo")
    (d / "sub").mkdir()
    specs = [(16000, 1, 0.5), (22050, 2, 0.5), (16000, 1, 2.0), (8000, 2, 0.5)]
    for i, (rate, ch, secs) in enumerate(specs):
        sf.write(str(d / "sub" / f"a{i}.wav"), sweep(rate, secs, ch, i), rate, subtype="PCM_16")
    lines = [dict(audio_filepath="sub/a0.wav", duration=0.5, text="hello world"),
             dict(audio_filepath="sub/a1.wav", duration=0.5, text="zweite Äußerung"),
             dict(audio_filepath="sub/a2.wav", duration=1.2, offset=0.5, text="offset one"),
             dict(audio_filepath=str(d / "sub" / "a3.wav"), duration=0.5)]
    (d / "m.json").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return d


def _run(lib, folder, **kw):
    fn, pipeline_def, _ = libs(lib)
    if lib == "dali":
        kw = {k: to_dali(v) for k, v in kw.items()}

    @pipeline_def(batch_size=4, num_threads=1, device_id=None)
    def p():
        r = fn.readers.nemo_asr(manifest_filepaths=[str(folder / "m.json")], **kw)
        return tuple(r) if isinstance(r, (list, tuple)) else r

    pipe = p()
    pipe.build()
    outs = pipe.run()
    return [([np.array(o.at(i)) for i in range(len(o))], o.layout()) for o in outs], pipe.reader_meta()


@pytest.mark.parametrize("kw, tol", [
    (dict(read_idxs=True), 0), (dict(max_duration=1.0, read_text=False), 0),
    (dict(min_duration=1.0, read_sample_rate=False, read_idxs=True), 0),
    (dict(sample_rate=8000.0, downmix=False, dtype=types.INT16), 1), (dict(sample_rate=12000.0), 3e-6),
    (dict(dtype=types.INT32, downmix=False), 0)])
def test_matches_dali(manifest, monkeypatch, kw, tol):
    monkeypatch.chdir(manifest)  # DALI opens relative paths from the working directory
    ours, our_meta = _run("stoker", manifest, **kw)
    theirs, their_meta = _run("dali", manifest, **kw)
    assert len(ours) == len(theirs)
    assert list(our_meta.values())[0]["epoch_size"] == list(their_meta.values())[0]["epoch_size"]
    for (a, la), (b, lb) in zip(ours, theirs):
        assert la == lb == ""
        for x, y in zip(a, b):
            assert x.shape == y.shape and x.dtype == y.dtype
            if x.size:
                assert np.abs(x.astype(np.float64) - y).max() <= tol


def test_relative_paths_beside_the_manifest(manifest, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # not where sub/ is: stoker looks beside the manifest
    (outs, _) = _run("stoker", manifest, read_text=True)
    audio, rate, text = (o[0] for o in outs)
    assert audio[0].shape == (8000,) and float(rate[0]) == 16000.0
    assert bytes(text[1]).decode("utf-8") == "zweite Äußerung"


def test_bad_manifest_line_names_file_and_line(manifest, tmp_path):
    from stoker.errors import StokerError

    bad = tmp_path / "bad.json"
    bad.write_text('{"audio_filepath": "x.wav"}\n{not json}\n')
    fn, pipeline_def, _ = libs("stoker")

    @pipeline_def(batch_size=1, num_threads=1, device_id=None)
    def p():
        return fn.readers.nemo_asr(manifest_filepaths=[str(bad)])[0]

    with pytest.raises(StokerError, match=r"bad\.json:2"):
        p().build()
