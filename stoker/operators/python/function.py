"""``python_function``, ``torch_python_function`` and ``dl_tensor_python_function``: the user's
Python callable as an operator.

Per sample (``batch_processing=False``) the function is called once for every sample, on the
pipeline's thread pool, so several samples run at once (DALI calls it on one thread). A
function that keeps state must therefore be thread-safe; NumPy, OpenCV and torch release the
GIL in their heavy calls, so such functions scale with ``num_threads``. With
``batch_processing=True`` it is called once per batch with a list of samples per input.

An exception raised by the function becomes an error naming the operator, where it was
created, the line of the function that failed and (per sample) the sample's source. DALI stops
the pipeline on any of them; stoker's ``on_error="skip"``/``"substitute"`` (which DALI does not
have) skip a sample only for the data errors of ``stoker.operators.base.SAMPLE_ERRORS`` that the
function raises (ValueError, OSError...); a TypeError, KeyError, AssertionError... in the
function is a bug in it, raised whatever ``on_error`` says, as a bug in an operator is.
"""

from __future__ import annotations

import os
import traceback

import numpy as np

from stoker.errors import OperatorBugError, OperatorError, SampleError, arg_error
from stoker.operators.base import SAMPLE_ERRORS, Operator
from stoker.operators.schema import REQUIRED, Arg, Schema, register
from stoker.tensors import TensorListCPU

_STOKER_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_MAX_INPUTS = 256


def _args(batch_default: bool) -> list[Arg]:
    return [Arg("function", "any", REQUIRED, doc="the Python callable"),
            Arg("num_outputs", "int", 1, doc="how many outputs the function returns (a tuple when > 1)"),
            Arg("batch_processing", "bool", batch_default,
                doc="call once per batch with lists of samples instead of once per sample"),
            Arg("output_layouts", "any", None, doc="layout of every output (a string) or of each (a list)"),
            Arg("synchronize_stream", "bool", True, doc="accepted for compatibility (no GPU stream on the CPU)")]


def user_line(exc: BaseException) -> str:
    """``file:line`` of the innermost traceback frame outside stoker (the user's code)."""
    frames = traceback.extract_tb(exc.__traceback__)
    for fr in reversed(frames):
        if not os.path.abspath(fr.filename).startswith(_STOKER_DIR + os.sep):
            return f"{fr.filename}:{fr.lineno} in {fr.name}"
    return ""


class _PythonFunctionBase(Operator):
    """Calls ``function``; subclasses convert inputs to the function's types and results back."""

    def setup(self):
        a = self.args
        name = self.schema.name
        if not callable(a["function"]):
            raise arg_error(name, "function", f"must be callable, got {type(a['function']).__name__}")
        if a["num_outputs"] < 0:
            raise arg_error(name, "num_outputs", f"must be >= 0, got {a['num_outputs']}")
        lay = a["output_layouts"]
        if lay is None:
            self.layouts = [""] * a["num_outputs"]
        elif isinstance(lay, str):
            self.layouts = [lay] * a["num_outputs"]
        elif isinstance(lay, (list, tuple)) and all(isinstance(x, str) for x in lay):
            if len(lay) != a["num_outputs"]:
                raise arg_error(name, "output_layouts", f"gives {len(lay)} layouts for {a['num_outputs']} outputs")
            self.layouts = list(lay)
        else:
            raise arg_error(name, "output_layouts", f"must be a string or a list of strings, got {lay!r}")
        fn = a["function"]
        self.fn_name = getattr(fn, "__qualname__", None) or type(fn).__name__

    # --- conversions, overridden by the torch and DLPack variants ---
    def to_user(self, arr: np.ndarray):
        return arr

    def from_user(self, obj) -> np.ndarray:
        return np.asarray(obj)

    def output_layouts(self, input_layouts):
        return self.layouts

    def _call(self, args):
        """Call the user's function; its exception becomes a SampleError naming the failing line,
        or an OperatorBugError where it is no data error (see the module docstring)."""
        try:
            return self.args["function"](*args)
        except Exception as e:  # the user's code may raise anything
            where = user_line(e)
            msg = f"function {self.fn_name} raised {type(e).__name__}: {e}" + (f" (at {where})" if where else "")
            raise (SampleError if isinstance(e, SAMPLE_ERRORS) else OperatorBugError)(msg) from e

    def _split(self, out) -> tuple:
        k = self.args["num_outputs"]
        if k == 0:
            return ()
        if k == 1:
            return (out,)
        if not isinstance(out, (tuple, list)) or len(out) != k:
            got = f"{len(out)} values" if isinstance(out, (tuple, list)) else type(out).__name__
            raise SampleError(f"function {self.fn_name} must return {k} outputs (num_outputs), got {got}")
        return tuple(out)

    def _array(self, obj) -> np.ndarray:
        arr = self.from_user(obj)
        if arr.dtype == object:
            raise SampleError(f"function {self.fn_name} returned {type(obj).__name__}, not an array")
        return np.ascontiguousarray(arr)

    def run_cpu(self, batch, inputs, arg_inputs):
        k = self.args["num_outputs"]
        if self.args["batch_processing"]:
            return self._run_batch(batch, inputs, k)
        n = len(inputs[0]) if inputs else batch.batch_size
        samples = [t.samples() for t in inputs]

        def one(i):
            out = self._split(self._call([self.to_user(s[i]) for s in samples]))
            return tuple(self._array(o) for o in out)

        results = self.map_samples(batch, n, one)
        kept = [i for i in range(n) if results[i] is not None]
        sources = [batch.source(i) for i in kept] if batch.sources else None
        return [TensorListCPU([results[i][j] for i in kept], self.layouts[j], sources) for j in range(k)]

    def _run_batch(self, batch, inputs, k):
        n = len(inputs[0]) if inputs else batch.batch_size
        try:
            if inputs:
                out = self._call([[self.to_user(a) for a in t.samples()] for t in inputs])
            else:  # no inputs: called with no arguments, returns a list of batch_size samples
                out = self._call([])
            outs = self._split(out)
            lists = []
            for j, o in enumerate(outs):
                if not isinstance(o, (list, tuple)):
                    o = list(self.from_user(o))  # a dense batch: the first dimension is the sample
                if len(o) != n:
                    raise SampleError(f"function {self.fn_name} returned {len(o)} samples in output {j}, "
                                      f"the batch has {n}")
                lists.append([self._array(s) for s in o])
        except (SampleError, OperatorBugError) as e:
            kind = OperatorError if isinstance(e, SampleError) else OperatorBugError
            raise kind(str(e), operator=self.instance_name, origin=self.origin) from e.__cause__
        sources = list(batch.sources) if batch.sources else None
        return [TensorListCPU(lists[j], self.layouts[j], sources) for j in range(k)]


_INPUTS = (0, _MAX_INPUTS)


@register
class PythonFunction(_PythonFunctionBase):
    """Runs a Python function on NumPy arrays."""

    schema = Schema(
        name="python_function",
        legacy_name="PythonFunction",
        doc="Runs ``function`` on the inputs (NumPy arrays) and returns its results as outputs. Per "
            "sample by default (in parallel on the pipeline's threads, unlike DALI, so the function must be "
            "thread-safe); with ``batch_processing=True`` once per batch with a list per input.",
        args=_args(False),
        inputs=_INPUTS,
        devices=("cpu",),
        num_outputs=lambda a: a["num_outputs"],
    )


@register
class TorchPythonFunction(_PythonFunctionBase):
    """Runs a Python function on torch tensors (CPU tensors sharing the samples' memory)."""

    schema = Schema(
        name="torch_python_function",
        legacy_name="TorchPythonFunction",
        doc="Like ``python_function`` but the function receives ``torch.Tensor`` inputs (made with "
            "``torch.from_numpy``) and may return tensors, which are converted back to NumPy arrays.",
        args=_args(False),
        inputs=_INPUTS,
        devices=("cpu",),
        num_outputs=lambda a: a["num_outputs"],
    )

    def setup(self):
        super().setup()
        import torch  # only when the operator is used

        self.torch = torch

    def to_user(self, arr):
        if not arr.flags.writeable:  # torch tensors are always writable: hand it a copy
            arr = arr.copy()
        return self.torch.from_numpy(arr)

    def from_user(self, obj):
        if isinstance(obj, self.torch.Tensor):
            return obj.detach().cpu().numpy()
        return np.asarray(obj)


class _Capsule:
    """Wraps a bare DLPack capsule so that ``np.from_dlpack`` accepts it (CPU memory)."""

    def __init__(self, capsule):
        self.capsule = capsule

    def __dlpack__(self, stream=None, **kwargs):
        return self.capsule

    def __dlpack_device__(self):
        return (1, 0)  # kDLCPU


@register
class DLTensorPythonFunction(_PythonFunctionBase):
    """Runs a Python function on DLPack capsules."""

    schema = Schema(
        name="dl_tensor_python_function",
        legacy_name="DLTensorPythonFunction",
        doc="Like ``python_function`` but the inputs are DLPack capsules; the function returns DLPack "
            "capsules or objects with ``__dlpack__`` (NumPy arrays, torch tensors). Per batch by default.",
        args=_args(True),
        inputs=_INPUTS,
        devices=("cpu",),
        num_outputs=lambda a: a["num_outputs"],
    )

    def to_user(self, arr):
        if not arr.flags.writeable:  # DLPack cannot signal read-only memory
            arr = arr.copy()
        return np.ascontiguousarray(arr).__dlpack__()

    def from_user(self, obj):
        if hasattr(obj, "__dlpack__"):
            return np.from_dlpack(obj)
        if type(obj).__name__ == "PyCapsule":
            return np.from_dlpack(_Capsule(obj))
        raise SampleError(f"function {self.fn_name} must return DLPack capsules or objects with __dlpack__, "
                          f"got {type(obj).__name__}")
