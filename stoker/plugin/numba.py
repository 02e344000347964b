"""``numba_function``: an operator whose work is a Numba-compiled Python function (DALI's
``nvidia.dali.plugin.numba``; port by renaming the import)::

    from stoker.plugin.numba.fn.experimental import numba_function

    def setup(outs, ins):                    # once per batch: the output shapes from the inputs'
        for i in range(len(outs[0])):
            outs[0][i][0] = ins[0][i][1]
            outs[0][i][1] = ins[0][i][0]

    def transpose(out0, in0):                # per sample: fill the preallocated output
        for y in range(in0.shape[0]):
            for x in range(in0.shape[1]):
                out0[x, y] = in0[y, x]

    flipped = numba_function(images, run_fn=transpose, setup_fn=setup, out_types=[types.UINT8],
                             in_types=[types.UINT8], outs_ndim=[2], ins_ndim=[2])

CPU: ``run_fn(out0, ..., in0, ...)`` is compiled with ``numba.njit(nogil=True)`` and called per
sample on the pipeline's threads, which run at once because the compiled code drops the GIL
(DALI calls it on one thread); ``batch_processing=True`` calls it once with a list of arrays per
output and input. Outputs are allocated (zero-filled) with the shapes ``setup_fn(outs, ins)``
writes into ``outs[k][sample]``, or each input's shape without one. Where Numba is not
installed, ``run_fn`` and ``setup_fn`` run as plain Python, which is slower but gives the same
numbers.

GPU (``device="gpu"``): ``run_fn`` is a CUDA kernel body compiled by ``numba.cuda.jit`` and
launched once per sample with ``blocks`` x ``threads_per_block`` on the pipeline's stream, on
CuPy arrays, as DALI does (no batch processing on the GPU). Needs ``numba-cuda`` and CuPy.

The operator is registered as ``experimental.numba_function`` when this module is imported, so it
is also ``stoker.fn.experimental.numba_function``, ``stoker.ops.experimental.NumbaFunction`` and
``stoker.dynamic.experimental.numba_function``.
"""

from __future__ import annotations

import sys
import types as _pytypes

import numpy as np

from stoker import types
from stoker.errors import OperatorError, arg_error
from stoker.operators.base import Operator
from stoker.operators.schema import REQUIRED, Arg, Schema, register
from stoker.tensors import TensorListCPU

__all__ = ["NumbaFunction", "numba_function"]

_OP = "experimental.numba_function"
_MAX_IO = 6  # as DALI: at most six inputs and six outputs


def _as_list(v) -> list:
    return list(v) if isinstance(v, (list, tuple)) else [v]


def _count_outputs(args: dict) -> int:
    return len(_as_list(args.get("out_types")))


def _numba():
    try:
        import numba
    except ImportError:
        return None
    return numba


class _NumbaOperator(Operator):
    """Runs a Numba-compiled (or plain Python) function over preallocated output arrays."""

    schema = Schema(
        name=_OP,
        doc="Calls ``run_fn(out0, ..., in0, ...)`` to fill outputs whose shapes ``setup_fn(outs, ins)`` sets "
            "(the inputs' shapes without it); compiled by Numba where it is installed. Per sample on the "
            "pipeline's threads, or once per batch with ``batch_processing=True``. On the GPU ``run_fn`` is "
            "a numba.cuda kernel launched per sample with ``blocks`` and ``threads_per_block``.",
        args=[
            Arg("run_fn", "any", REQUIRED, doc="fills the outputs: run_fn(out0.., in0..)"),
            Arg("out_types", "any", REQUIRED, doc="element type of each output (types.UINT8 ...)"),
            Arg("in_types", "any", REQUIRED, doc="element type of each input"),
            Arg("outs_ndim", "any", REQUIRED, doc="number of dimensions of each output"),
            Arg("ins_ndim", "any", REQUIRED, doc="number of dimensions of each input"),
            Arg("setup_fn", "any", None, doc="setup_fn(outs, ins): writes each output sample's shape"),
            Arg("batch_processing", "bool", False, doc="call run_fn once per batch with lists of samples"),
            Arg("blocks", "int_list", None, doc="GPU: the grid of each launch (3 numbers)"),
            Arg("threads_per_block", "int_list", None, doc="GPU: the block of each launch (3 numbers)"),
        ],
        inputs=(1, _MAX_IO),
        devices=("cpu", "gpu"),
        num_outputs=_count_outputs,
    )

    def setup(self):
        a, name = self.args, _OP
        self.out_types = [self._dtype("out_types", t) for t in _as_list(a["out_types"])]
        self.in_types = [self._dtype("in_types", t) for t in _as_list(a["in_types"])]
        self.outs_ndim = self._ndims("outs_ndim", len(self.out_types), "out_types")
        self.ins_ndim = self._ndims("ins_ndim", len(self.in_types), "in_types")
        for key, values in (("out_types", self.out_types), ("in_types", self.in_types)):
            if not 1 <= len(values) <= _MAX_IO:
                raise arg_error(name, key, f"takes 1 to {_MAX_IO} types, got {len(values)}")
        for key in ("run_fn", "setup_fn"):
            if a[key] is not None and not callable(a[key]):
                raise arg_error(name, key, f"must be a function, got {type(a[key]).__name__}")
        if self.device == "gpu":
            if a["batch_processing"]:
                raise arg_error(name, "batch_processing", "is not supported on the GPU (as in DALI)")
            for key in ("blocks", "threads_per_block"):
                v = a[key]
                if v is None or len(v) != 3 or min(v) <= 0:
                    raise arg_error(name, key, f"needs 3 positive numbers on the GPU, got {v!r}")
            self.run = _cuda_kernel(a["run_fn"])
        else:
            self.run = _jit(a["run_fn"])
        self.shape_fn = _jit(a["setup_fn"]) if a["setup_fn"] is not None else None

    def _dtype(self, key: str, value) -> np.dtype:
        try:
            return types.dtype_from_arg(value)
        except (TypeError, ValueError):
            raise arg_error(_OP, key, f"expected data types such as types.UINT8, got {value!r}") from None

    def _ndims(self, key: str, count: int, types_key: str) -> list[int]:
        values = _as_list(self.args[key])
        if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 0 for v in values):
            raise arg_error(_OP, key, f"takes non-negative ints, got {self.args[key]!r}")
        if len(values) != count:
            raise arg_error(_OP, key, f"gives {len(values)} numbers of dimensions for {count} {types_key}")
        return [int(v) for v in values]

    def output_layouts(self, input_layouts):
        return [""] * self.num_outputs  # (DALI's outputs have no layout either)

    # --- shapes -------------------------------------------------------------------------------
    def _check_inputs(self, shapes: list[list[tuple]], dtypes: list[np.dtype]) -> None:
        if len(shapes) != len(self.in_types):
            raise self._fail(f"has {len(shapes)} inputs but in_types names {len(self.in_types)}")
        for k, (dt, want_dt, want_nd) in enumerate(zip(dtypes, self.in_types, self.ins_ndim)):
            if np.dtype(dt) != want_dt:
                raise self._fail(f"input {k} holds {np.dtype(dt)} but in_types[{k}] is {want_dt}")
            bad = [s for s in shapes[k] if len(s) != want_nd]
            if bad:
                raise self._fail(f"input {k} has {len(bad[0])} dimensions but ins_ndim[{k}] is {want_nd}")

    def _fail(self, message: str) -> OperatorError:
        return OperatorError(message, operator=self.instance_name, origin=self.origin)

    def output_shapes(self, in_shapes: list[list[tuple]], n: int) -> list[list[tuple]]:
        """Each output sample's shape: from ``setup_fn``, else input k's shape for output k."""
        if self.shape_fn is None:
            for k, nd in enumerate(self.outs_ndim):
                src = self.ins_ndim[min(k, len(self.ins_ndim) - 1)]
                if nd != src:
                    raise self._fail(f"without setup_fn output {k} takes its input's shape, but outs_ndim[{k}] "
                                     f"is {nd} and the input has {src} dimensions")
            return [list(in_shapes[min(k, len(in_shapes) - 1)]) for k in range(len(self.out_types))]
        outs = [np.zeros((n, nd), np.int64) for nd in self.outs_ndim]
        ins = [np.asarray(s, np.int64).reshape(n, nd) for s, nd in zip(in_shapes, self.ins_ndim)]
        try:
            self.shape_fn(_typed_list(outs), _typed_list(ins))
        except Exception as e:  # the user's function may raise anything
            raise OperatorError(f"setup_fn raised {type(e).__name__}: {e}", operator=self.instance_name,
                                origin=self.origin) from e
        if any((o < 0).any() for o in outs):
            raise self._fail("setup_fn gave a negative output size")
        return [[tuple(int(d) for d in row) for row in o] for o in outs]

    # --- CPU ----------------------------------------------------------------------------------
    def run_cpu(self, batch, inputs, arg_inputs):
        n = len(inputs[0])
        samples = [[np.ascontiguousarray(s) for s in t.samples()] for t in inputs]
        # (an empty batch has no samples to tell the type: it is taken to be the declared one)
        self._check_inputs([[s.shape for s in col] for col in samples],
                           [col[0].dtype if col else dt for col, dt in zip(samples, self.in_types)])
        shapes = self.output_shapes([[s.shape for s in col] for col in samples], n)
        outs = [[np.zeros(shapes[k][i], dt) for i in range(n)] for k, dt in enumerate(self.out_types)]
        if self.args["batch_processing"]:
            try:
                self.run(*[_typed_list(o) for o in outs], *[_typed_list(s) for s in samples])
            except Exception as e:  # the user's function may raise anything
                raise OperatorError(f"run_fn raised {type(e).__name__}: {e}", operator=self.instance_name,
                                    origin=self.origin) from e
        else:
            def one(i):
                self.run(*[o[i] for o in outs], *[s[i] for s in samples])
                return ()

            self.map_samples(batch, n, one)
        sources = list(batch.sources) if batch.sources else None
        return [TensorListCPU(o, "", sources) for o in outs]

    # --- GPU ----------------------------------------------------------------------------------
    def run_gpu(self, batch, inputs, arg_inputs):
        """Launch the kernel once per sample on the pipeline's stream (DALI's scheme)."""
        from numba import cuda as nb_cuda

        from stoker.backend import cuda
        from stoker.tensors_gpu import TensorListGPU

        cp = cuda.cupy()
        lists = [x if isinstance(x, TensorListGPU) else TensorListGPU(x) for x in inputs]
        n = len(lists[0])
        in_shapes = [[tuple(s) for s in x.shape()] for x in lists]
        self._check_inputs(in_shapes, [x.element_dtype() if n else dt for x, dt in zip(lists, self.in_types)])
        shapes = self.output_shapes(in_shapes, n)
        stream = cuda.current_stream(batch)
        nb_stream = nb_cuda.external_stream(stream.ptr)
        grid, block = tuple(self.args["blocks"]), tuple(self.args["threads_per_block"])
        ins = [x.samples() for x in lists]
        with stream:
            outs = [[cp.zeros(shapes[k][i], dt) for i in range(n)] for k, dt in enumerate(self.out_types)]
        for i in range(n):
            # sync=False: CuPy's arrays name their stream, and Numba would otherwise wait for it here.
            views = [nb_cuda.as_cuda_array(o[i], sync=False) for o in outs]
            views += [nb_cuda.as_cuda_array(s[i], sync=False) for s in ins]
            self.run[grid, block, nb_stream](*views)
        sources = [batch.source(i) for i in range(n)]
        return [TensorListGPU(o, "", sources) for o in outs]


_NumbaOperator.schema.outputs_as_list = lambda args: _count_outputs(args) > 1  # DALI gives a list then


def _typed_list(arrays: list):
    """A list Numba-compiled code takes without the reflected-list deprecation (a plain list where
    Numba is missing or the list is empty)."""
    numba = _numba()
    if numba is None or not arrays:
        return arrays
    out = numba.typed.List()
    for a in arrays:
        out.append(a)
    return out


def _jit(fn):
    """``fn`` compiled for the CPU without the GIL, so samples run in parallel; as it is without Numba."""
    numba = _numba()
    if numba is None:
        return fn
    py = getattr(fn, "py_func", fn)  # an @njit function is compiled again with nogil=True
    return numba.njit(nogil=True)(py)


def _cuda_kernel(fn):
    try:
        from numba import cuda as nb_cuda
    except ImportError:
        raise arg_error(_OP, "device", "'gpu' needs Numba's CUDA target: pip install numba-cuda") from None
    if hasattr(fn, "configure") or hasattr(fn, "specialize"):  # already a CUDA kernel
        return fn
    return nb_cuda.jit(getattr(fn, "py_func", fn))


def _install() -> None:
    from stoker.operators.schema import registered

    if _OP not in registered():
        register(_NumbaOperator)


_install()

from stoker import ops as _ops  # noqa: E402  (after the registration, which gives ops its class)
from stoker.fn._factory import make_fn  # noqa: E402

numba_function = make_fn(_OP)


class NumbaFunction(_ops.LegacyOperator):
    """The legacy ``ops`` form: ``NumbaFunction(run_fn, out_types, in_types, outs_ndim, ins_ndim,
    setup_fn=None, device="cpu", batch_processing=False, blocks=None, threads_per_block=None)``."""

    _op_name = _OP

    def __init__(self, run_fn, out_types, in_types, outs_ndim, ins_ndim, setup_fn=None, device="cpu",
                 batch_processing=False, blocks=None, threads_per_block=None, **kwargs):
        super().__init__(run_fn=run_fn, out_types=out_types, in_types=in_types, outs_ndim=outs_ndim,
                         ins_ndim=ins_ndim, setup_fn=setup_fn, device=device, batch_processing=batch_processing,
                         blocks=blocks, threads_per_block=threads_per_block, **kwargs)


# DALI's import paths: nvidia.dali.plugin.numba.fn.experimental.numba_function and
# nvidia.dali.plugin.numba.experimental.NumbaFunction. This is one module, so the two sub-modules
# are made here and put in sys.modules, where the import system finds them.
def _submodule(name: str, **attrs) -> _pytypes.ModuleType:
    mod = _pytypes.ModuleType(f"{__name__}.{name}")
    mod.__dict__.update(attrs)
    sys.modules[mod.__name__] = mod
    return mod


experimental = _submodule("experimental", NumbaFunction=NumbaFunction, __all__=["NumbaFunction"])
fn = _submodule("fn", numba_function=numba_function)
fn.experimental = _submodule("fn.experimental", numba_function=numba_function, __all__=["numba_function"])
__path__: list[str] = []  # a package to the import system, so that the sub-modules above import
