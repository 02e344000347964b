"""decoders.audio against DALI's CPU decoder on real files of every supported kind."""

import numpy as np
import pytest
from conftest import FILES
from oracle import run_graph

from stoker import fn, pipeline_def, types
from stoker.errors import OperatorError

pytestmark = pytest.mark.oracle

NAMES = [name for name, *_ in FILES]


def _decode(lib, batch, **kw):
    return run_graph(lib, lambda fn, types, x: fn.decoders.audio(x, **{k: _t(types, v) for k, v in kw.items()}),
                     batch)


def _t(types, v):
    return getattr(types, v) if isinstance(v, str) and v in ("INT16", "INT32", "FLOAT") else v


@pytest.mark.parametrize("kw, tol", [
    ({}, 1e-6),  # Vorbis decoding differs in the last float bits between libsndfile builds
    (dict(downmix=True), 1e-6),
    (dict(dtype="INT16"), 0),
    (dict(dtype="INT32"), 0),
    (dict(dtype="INT16", downmix=True), 1),
    (dict(sample_rate=12000.0), 1e-5),
    (dict(sample_rate=16000.0, downmix=True, quality=90.0), 1e-5),
    (dict(sample_rate=8000.0, dtype="INT32", downmix=True), 2e3),  # int32 steps are 4.7e-10 apart
])
def test_decoder_matches_dali(encoded, kw, tol):
    batch = [encoded[n] for n in NAMES if n != "stereo.ogg" or tol]  # Vorbis only with a tolerance
    ours, theirs = _decode("stoker", batch, **kw), _decode("dali", batch, **kw)
    for k in range(2):
        assert ours[k][1] == theirs[k][1] == ""
        for i, (a, b) in enumerate(zip(ours[k][0], theirs[k][0])):
            assert a.shape == b.shape and a.dtype == b.dtype, (kw, k, i, a.shape, b.shape)
            np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), rtol=0, atol=tol,
                                       err_msg=f"{kw} output {k} sample {i}")


def test_layouts_and_shapes(encoded):
    (audio, _), (rates, _) = _decode("stoker", [encoded["mono16.wav"], encoded["stereo16.wav"]])
    assert audio[0].shape == (9600, 1) and audio[1].shape == (11025, 2)
    assert rates[0].shape == () and rates[0].dtype == np.float32 and float(rates[1]) == 22050.0


def test_corrupt_file_names_operator_and_file(audio_dir, tmp_path):
    bad = tmp_path / "cls" / "broken.wav"
    bad.parent.mkdir()
    bad.write_bytes(b"RIFF\x10\x00\x00\x00WAVEjunkjunk")
    good = tmp_path / "cls" / "good.wav"
    good.write_bytes((audio_dir / "mono16.wav").read_bytes())

    def make(**kw):
        @pipeline_def(batch_size=2, num_threads=1, device_id=None, **kw)
        def p():
            data, _ = fn.readers.file(file_root=str(tmp_path))
            audio, _ = fn.decoders.audio(data)
            return audio
        pipe = p()
        pipe.build()
        return pipe

    with pytest.raises(OperatorError) as e:
        make().run()
    assert "decoders.audio" in str(e.value) and "broken.wav" in str(e.value)
    out, = make(on_error="skip").run()
    assert all(np.array(out.at(i)).shape == (9600, 1) for i in range(len(out)))


def test_bad_arguments():
    from stoker.errors import StokerError

    @pipeline_def(batch_size=1, num_threads=1, device_id=None)
    def p():
        return fn.decoders.audio(fn.external_source(source=lambda: [np.zeros(4, np.uint8)], batch=True),
                                 dtype=types.UINT8)[0]

    with pytest.raises(StokerError, match="dtype"):
        p().build()


def test_per_sample_rate_is_each_samples_own(encoded):
    """sample_rate fed per sample gives each file what the constant rate gives it."""
    batch = [encoded["mono16.wav"], encoded["stereo16.wav"]]
    rates = [np.float32(8000.0), np.float32(16000.0)]
    fed = run_graph("stoker", lambda fn, types, x, r: fn.decoders.audio(x, sample_rate=r), batch, rates)
    for i, rate in enumerate(rates):
        alone = _decode("stoker", [batch[i]], sample_rate=float(rate))
        np.testing.assert_array_equal(fed[0][0][i], alone[0][0][0])
    assert fed[0][0][0].shape[0] != _decode("stoker", [batch[0]], sample_rate=16000.0)[0][0][0].shape[0]
