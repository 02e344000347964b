"""``fn.readers.caffe2``: records of Caffe2 LMDB databases (``TensorProtos`` values).

A record is a list of tensors, read in this order, each giving one output:

1. the image, when ``image_available``: a STRING tensor holds the encoded file (1D uint8);
   a BYTE tensor with dims (H, W[, C]) holds raw pixels (HWC uint8);
2. the label, unless ``label_type`` is 4 (none); its values are FLOAT or INT32 and
   the output keeps that type:

   * 0, single label: the tensor's one value, shape (1,);
   * 1, sparse multi-label: the tensor lists the active class indices; the output is a
     vector of ``num_labels`` with 1 at those indices and 0 elsewhere;
   * 2, dense: the tensor's values as they are;
   * 3, weighted sparse: class indices, and the *next* tensor their float weights; the
     output is a float32 vector of ``num_labels`` with the weights at the indices;
3. ``additional_inputs`` more tensors (FLOAT, INT32 or INT64), each as a 1D output;
4. the bounding box, when ``bbox``: an INT32 tensor of 4 values.

DALI 2.4's parser fails on label types 1 and 3 and, with ``bbox=False``, on a record
with one tensor more than it reads; stoker reads such records as laid out above (Caffe2's
own layout) and ignores tensors past the ones it reads.

The databases are opened with the optional ``lmdb`` package (see :mod:`.caffe`).
"""

from __future__ import annotations

import numpy as np

from stoker.operators.readers._proto import (
    ProtoError,
    all_bytes,
    fields,
    last_bytes,
    last_int,
    messages,
    repeated_float,
    repeated_int32,
    repeated_int64,
    repeated_varints,
    to_int64,
)
from stoker.operators.readers.caffe import LMDB_READER_ARGS, LMDBReader
from stoker.operators.schema import REQUIRED, Arg, Schema, register

SINGLE_LABEL, MULTI_LABEL_SPARSE, MULTI_LABEL_DENSE, MULTI_LABEL_WEIGHTED_SPARSE, NO_LABEL = range(5)
# caffe2.TensorProto.DataType values the reader understands
_FLOAT, _INT32, _BYTE, _STRING, _INT64 = 1, 2, 3, 4, 10
_TYPE_NAMES = {0: "UNDEFINED", 1: "FLOAT", 2: "INT32", 3: "BYTE", 4: "STRING", 5: "BOOL", 6: "UINT8", 7: "INT8",
               8: "UINT16", 9: "INT16", 10: "INT64", 12: "FLOAT16", 13: "DOUBLE"}


def _caffe2_outputs(args: dict) -> int:
    return (int(bool(args.get("image_available", True))) + int(args.get("label_type", 0) != NO_LABEL)
            + max(0, int(args.get("additional_inputs", 0) or 0)) + int(bool(args.get("bbox", False))))


def _data_type(t: dict) -> int:
    return last_int(t, 2, _FLOAT)  # proto2 default of TensorProto.data_type is FLOAT


def _values(t: dict, want: str) -> np.ndarray:
    """The tensor's numbers: FLOAT -> float32, INT32 -> int32, INT64 -> int64."""
    dt = _data_type(t)
    if dt == _FLOAT:
        return repeated_float(t, 3)
    if dt == _INT32:
        return repeated_int32(t, 4)
    if dt == _INT64 and want == "any":
        return repeated_int64(t, 10)
    allowed = "FLOAT or INT32" if want == "label" else "FLOAT, INT32 or INT64"
    raise ValueError(f"has data type {_TYPE_NAMES.get(dt, dt)}; expected {allowed}")


@register
class Caffe2Reader(LMDBReader):
    """Reads Caffe2 ``TensorProtos`` records (``fn.readers.caffe2`` / ``ops.readers.Caffe2`` /
    ``ops.Caffe2Reader``)."""

    schema = Schema(
        name="readers.caffe2",
        doc="Reads records of Caffe2 LMDB databases (TensorProtos). Outputs, in order: the image (encoded "
            "bytes, or HWC uint8 pixels) when ``image_available``; the label unless ``label_type`` is 4; "
            "``additional_inputs`` more tensors; the int32 bounding box (4,) when ``bbox``. Needs the "
            "'lmdb' package.",
        args=[
            Arg("path", "str_list", REQUIRED, doc="paths of the LMDB databases (folders or files)"),
            Arg("image_available", "bool", True, doc="the records start with an image tensor"),
            Arg("label_type", "int", 0,
                doc="0 single label, 1 sparse multi-label (active indices -> 0/1 vector of num_labels), "
                    "2 dense label vector, 3 weighted sparse (indices and weights -> float vector), 4 none"),
            Arg("num_labels", "int", 1, doc="number of classes: the length of the label vector of types 1 and 3"),
            Arg("additional_inputs", "int", 0, doc="number of extra tensors after the label, one output each"),
            Arg("bbox", "bool", False, doc="the record ends with an int32 bounding box of 4 values"),
            *LMDB_READER_ARGS,
        ],
        inputs=(0, 0),
        num_outputs=_caffe2_outputs,
        legacy_name="Caffe2Reader",
    )

    def setup(self) -> None:
        super().setup()
        a = self.args
        if not 0 <= a["label_type"] <= NO_LABEL:
            raise self._arg_error("label_type", f"must be 0 to 4, got {a['label_type']}")
        if a["label_type"] in (MULTI_LABEL_SPARSE, MULTI_LABEL_WEIGHTED_SPARSE) and a["num_labels"] < 1:
            raise self._arg_error("num_labels", f"must be at least 1 for sparse labels, got {a['num_labels']}")
        if a["additional_inputs"] < 0:
            raise self._arg_error("additional_inputs", f"must be 0 or more, got {a['additional_inputs']}")
        if self.num_outputs == 0:
            raise self._arg_error("image_available", "with label_type=4 and nothing else, there is nothing to read")

    def parse_sample(self, i: int, raw) -> tuple:
        """The outputs of a ``TensorProtos`` record (``raw``: its bytes, or a uint8 view of them)."""
        where = self.sample_source(i)
        try:
            tensors = messages(fields(raw), 1)
        except ProtoError as e:
            raise ValueError(f"{where} is not a Caffe2 TensorProtos ({len(raw)} bytes): {e}") from None
        a = self.args
        needed = self.num_outputs + int(a["label_type"] == MULTI_LABEL_WEIGHTED_SPARSE)
        if len(tensors) < needed:
            raise ValueError(f"{where}: the record holds {len(tensors)} tensors; the arguments (image_available, "
                             f"label_type, additional_inputs, bbox) read {needed}")
        out, k = [], 0
        try:
            if a["image_available"]:
                what = "image"
                out.append(self._image(tensors[k]))
                k += 1
            if a["label_type"] != NO_LABEL:
                what = "label"
                label, used = self._label_of(tensors, k)
                out.append(label)
                k += used
            for j in range(a["additional_inputs"]):
                what = f"additional input {j}"
                out.append(_values(tensors[k], "any"))
                k += 1
            if a["bbox"]:
                what = "bbox"
                box = _values(tensors[k], "label")
                if _data_type(tensors[k]) != _INT32 or box.size != 4:
                    raise ValueError(f"should be INT32 with 4 values, has {box.size} {box.dtype} values")
                out.append(box)
        except (ValueError, IndexError) as e:
            raise ValueError(f"{where}: tensor {k} ({what}): {e}") from None
        return tuple(out)

    @staticmethod
    def _image(t: dict) -> np.ndarray:
        dt = _data_type(t)
        if dt == _STRING:
            strings = all_bytes(t, 6)
            if not strings:
                raise ValueError("a STRING image tensor without string_data")
            return np.frombuffer(strings[0], dtype=np.uint8)
        if dt == _BYTE:
            dims = [to_int64(d) for d in repeated_varints(t, 1)]
            if len(dims) not in (2, 3):
                raise ValueError(f"a BYTE image needs dims (H, W[, C]), has {dims}")
            shape = (dims[0], dims[1], dims[2] if len(dims) == 3 else 1)
            pixels = np.frombuffer(last_bytes(t, 5) or b"", dtype=np.uint8)
            if min(shape) < 0 or int(np.prod(shape)) != pixels.size:
                raise ValueError(f"dims {dims} do not fit the {pixels.size} bytes of byte_data")
            return pixels.reshape(shape)
        raise ValueError(f"an image must be a STRING (encoded) or BYTE (raw) tensor, this one is "
                         f"{_TYPE_NAMES.get(dt, dt)}")

    def _label_of(self, tensors: list, k: int) -> tuple[np.ndarray, int]:
        """The label output and the number of tensors it took."""
        kind, n = self.args["label_type"], self.args["num_labels"]
        values = _values(tensors[k], "label")
        if kind == SINGLE_LABEL:
            if values.size != 1:
                raise ValueError(f"a single label must hold one value, has {values.size}")
            return values, 1
        if kind == MULTI_LABEL_DENSE:
            return values, 1
        index = values.astype(np.int64)
        if index.size and (index.min() < 0 or index.max() >= n or np.any(index != values)):
            raise ValueError(f"class indices {values.tolist()} are not all whole numbers in [0, num_labels={n})")
        if kind == MULTI_LABEL_SPARSE:
            hot = np.zeros(n, dtype=values.dtype)
            hot[index] = 1
            return hot, 1
        weights = _values(tensors[k + 1], "label").astype(np.float32)
        if weights.size != index.size:
            raise ValueError(f"{index.size} class indices but {weights.size} weights in the next tensor")
        weighted = np.zeros(n, dtype=np.float32)
        weighted[index] = weights
        return weighted, 2

    def output_layouts(self, input_layouts):
        return [""] * self.num_outputs
