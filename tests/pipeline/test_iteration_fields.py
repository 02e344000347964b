"""An iteration's values hold batches only, keyed (node id, output); what sources and GPU host
halves prepared for the batch ahead of their run lives in its declared ``prepared`` field (issue
18: no "prepared" entry hidden among the batches)."""

import stoker.fn as fn
from stoker import pipeline_def
from stoker.pipeline import executor as ex


def test_values_hold_batches_and_prepared_is_its_own_field(sample_jpeg_dir, monkeypatch):
    seen = []
    real = ex.Executor.run_node

    def run_node(self, node, it, gpu):
        real(self, node, it, gpu)
        seen.append((node.op_name, dict(it.values), dict(it.prepared)))

    monkeypatch.setattr(ex.Executor, "run_node", run_node)

    @pipeline_def(batch_size=4, num_threads=1, device_id=None, seed=1)
    def pipe():
        jpegs, labels = fn.readers.file(file_root=sample_jpeg_dir, name="r")
        return fn.decoders.image(jpegs), labels

    p = pipe()
    p.build()
    p.run()
    p.close()
    assert seen
    for _, values, _ in seen:
        assert values and all(isinstance(k, tuple) and len(k) == 2 for k in values)
        assert all(len(v) == 4 for v in values.values())
    reader_runs = [prepared for name, _, prepared in seen if name == "readers.file"]
    assert reader_runs and all(len(p) == 1 for p in reader_runs)  # (the reader's advance(), by node id)
    (refs,) = reader_runs[0].values()
    assert len(refs) == 4  # the four samples it was to read
