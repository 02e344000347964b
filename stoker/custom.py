"""Your own operators, registered from your own package: DALI's "add your own operator", in Python.

One decorator describes the operator (name, arguments, inputs, outputs) and gives its CPU
function; a GPU function over the whole batch is optional. Once registered the operator is in
``stoker.fn``, ``stoker.ops`` and ``stoker.dynamic`` like a built-in one, with the same argument
checking, and errors that name the operator, the argument and the failing sample's source::

    import numpy as np
    import stoker.custom as custom

    @custom.operator(
        name="mylib.posterize",                     # fn.mylib.posterize, ops.mylib.Posterize
        doc="Keeps the top `bits` bits of every pixel.",
        args=[custom.Arg("bits", "int", 4, tensor=True, doc="bits to keep, 1..8")],
    )
    def posterize(image, *, bits):                  # one sample (NumPy), on the pipeline's threads
        return image & np.uint8((0xFF << (8 - bits)) & 0xFF)

    @posterize.gpu                                  # optional: the whole batch, CuPy arrays
    def posterize_gpu(images, *, bits):             # bits: one value per sample
        return [x & ((0xFF << (8 - b)) & 0xFF) for x, b in zip(images, bits)]

Forms of the CPU side (the decorator takes a function or a class):

* a function of one sample: ``f(*inputs, **args)`` returns an array, or a tuple of them for
  several outputs; add a parameter named ``ctx`` to get the sample's
  :class:`~stoker.operators.base.SampleContext` (``ctx.rng`` for random draws, ``ctx.source``);
* ``batch=True``: a function of the whole batch, each input a list of arrays and each
  per-sample argument a list of values; it returns a list of arrays (or an array whose first
  axis is the sample) per output; ``ctx`` is then a :class:`BatchCall`;
* a class with methods ``cpu`` (one sample) or ``cpu_batch`` (the batch), optionally ``gpu`` and
  ``setup(**args)`` (called once per operator instance with the constant arguments, to check them
  or to precompute; raise :class:`ArgError` to reject one). One object is made per operator
  instance, so it may hold precomputed state, but its methods run on several threads at once.

The GPU function (``gpu=`` in the decorator, ``@op.gpu`` afterwards, or a class's ``gpu``)
receives each input as a list of CuPy arrays (one per sample, on the device), per-sample
arguments as lists of host values, and runs with the pipeline's CUDA stream current, so CuPy
calls, ``cupy.RawKernel`` launches and :func:`kernel` (a kernel from a CUDA source string,
compiled by NVRTC once per device) all go on that stream.
"""

from __future__ import annotations

import inspect
import keyword
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from stoker.errors import ArgumentError, OperatorBugError, OperatorError, SampleError, arg_error
from stoker.operators.base import SAMPLE_ERRORS, BatchContext, Operator
from stoker.operators.schema import COMMON_ARGS, CONVERTERS, REQUIRED, Arg, Schema, register
from stoker.tensors import TensorListCPU

__all__ = ["Arg", "ArgError", "BatchCall", "KINDS", "REQUIRED", "kernel", "operator", "unregister"]

#: The argument kinds an :class:`Arg` may have (how a value is checked and converted).
KINDS = tuple(CONVERTERS)

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*(\.[A-Za-z][A-Za-z0-9_]*)*\Z")
_COMMON = {a.name for a in COMMON_ARGS}


class ArgError(ValueError):
    """Raise from a class's ``setup`` to reject argument ``arg``; the pipeline build then fails
    with an error naming the operator and the argument."""

    def __init__(self, arg: str, message: str):
        super().__init__(message)
        self.arg = arg
        self.message = message


@dataclass
class BatchCall:
    """What a batch function (``batch=True``, ``cpu_batch``, ``gpu``) with a ``ctx`` parameter
    learns about the batch: its size, the iteration, each sample's source, the CUDA stream (GPU
    functions) and ``rng``, a NumPy Generator keyed by the operator's seed and the iteration."""

    batch_size: int
    iteration: int
    sources: Sequence[str]
    stream: Any
    rng: np.random.Generator


def operator(name: str, *, args: Sequence[Arg] = (), inputs: int | tuple[int, int] = 1,
             outputs: int | Callable[[dict], int] = 1, doc: str | None = None,
             layouts: str | Sequence[str] | None = None, batch: bool = False, gpu: Callable | None = None,
             random: bool = False, legacy_name: str | None = None, replace: bool = False):
    """Decorator: register a function or class as operator ``name``; returns the operator class.

    Args:
        name: the dotted ``fn`` name ("blur3", "mylib.posterize"); ``ops`` gets the CamelCase class.
        args: the keyword arguments, as :class:`Arg` (name, kind from :data:`KINDS`, default or
            :data:`REQUIRED`, ``tensor=True`` where a per-sample DataNode may be given, doc).
        inputs: the number of positional inputs, or a (min, max) range.
        outputs: the number of outputs, or a function of the checked arguments giving it.
        doc: what the operator does (default: the function's or class's docstring).
        layouts: each output's layout (one string for all, or one per output); by default every
            output has the first input's layout.
        batch: the function takes the whole batch (lists) instead of one sample.
        gpu: the GPU function (whole batch; see the module docstring); ``@op.gpu`` adds it later.
        random: the operator draws random values (``ctx.rng``), so its ``seed`` matters.
        legacy_name: an extra top-level ``ops`` class name.
        replace: register again over an earlier custom operator of that name (a notebook cell
            run twice); built-in operators are never replaced.
    """
    lo_hi = _check_inputs(name, inputs)
    arg_list = _check_args(name, args)
    if not (callable(outputs) or (isinstance(outputs, int) and outputs >= 0)):
        raise ArgumentError(f"custom operator {name!r}: outputs must be an int >= 0 or a function of the arguments")
    out_layouts = _check_layouts(name, layouts, outputs)

    def decorate(target):
        impl = _Impl.of(name, target, batch, gpu, [a.name for a in arg_list])
        text = doc or inspect.getdoc(target) or f"Custom operator {name}."
        devices = ("cpu",) if impl.has_cpu else ()
        if impl.gpu is not None:
            devices += ("gpu",)
        if not devices:
            raise ArgumentError(f"custom operator {name!r}: {impl.label} has no CPU or GPU function")
        schema = Schema(name=name, doc=text, args=arg_list, inputs=lo_hi, devices=devices,
                        num_outputs=outputs, random=random, legacy_name=legacy_name)
        base = _BatchOperator if impl.batch else _SampleOperator
        cls = type(_class_name(name), (base,), {
            "schema": schema, "_impl": impl, "_layouts": out_layouts,
            "__doc__": f"Custom operator ``{name}`` ({impl.label}).",
            "__module__": getattr(target, "__module__", __name__),
        })
        _register(cls, replace)
        return cls

    return decorate


def unregister(name: str) -> None:
    """Remove custom operator ``name`` from ``fn``, ``ops`` and ``stoker.dynamic`` (tests, notebooks)."""
    from stoker.operators.schema import find_operator
    from stoker.operators.schema import unregister as drop

    cls = find_operator(name)
    if cls is None:
        raise KeyError(f"no operator {name!r} is registered")
    if not getattr(cls, "_stoker_custom", False):
        raise ArgumentError(f"{name!r} is a built-in operator; only custom operators can be unregistered")
    drop(name)


_kernels: dict = {}


def kernel(source: str, name: str, options: Sequence[str] = ("-std=c++17",)):
    """The CUDA kernel ``name`` from CUDA C++ ``source`` (a string), compiled by NVRTC on first use
    on each device and cached: a ``cupy.RawKernel``-like callable, ``k(grid, block, args)``,
    launched on the current stream (the pipeline's, inside a GPU function)."""
    from stoker.backend import cuda

    cp = cuda.cupy()
    key = (source, name, tuple(options), cp.cuda.Device().id)
    fn = _kernels.get(key)
    if fn is None:
        fn = _kernels[key] = cp.RawModule(code=source, options=tuple(options)).get_function(name)
    return fn


# --- registration checks -------------------------------------------------------------------

def _check_inputs(name: str, inputs) -> tuple[int, int]:
    if not isinstance(name, str) or not _NAME.match(name) or any(keyword.iskeyword(p) for p in name.split(".")):
        raise ArgumentError(f"custom operator name {name!r}: use dotted Python identifiers, e.g. 'mylib.blur'")
    if isinstance(inputs, int) and not isinstance(inputs, bool):
        inputs = (inputs, inputs)
    if (not isinstance(inputs, (tuple, list)) or len(inputs) != 2
            or not all(isinstance(x, int) and x >= 0 for x in inputs) or inputs[0] > inputs[1]):
        raise ArgumentError(f"custom operator {name!r}: inputs must be an int or a (min, max) pair, got {inputs!r}")
    return int(inputs[0]), int(inputs[1])


def _check_args(name: str, args: Sequence[Arg]) -> list[Arg]:
    out, seen = [], set()
    for a in args:
        if not isinstance(a, Arg):
            raise ArgumentError(f"custom operator {name!r}: args must be stoker.custom.Arg values, got {a!r}")
        where = f"custom operator {name!r}, argument {a.name!r}"
        if not a.name.isidentifier() or keyword.iskeyword(a.name) or a.name == "ctx":
            raise ArgumentError(f"{where}: not a usable keyword name")
        if a.name in _COMMON or a.name in seen:
            raise ArgumentError(f"{where}: the name is taken (every operator has {sorted(_COMMON)})")
        if a.kind not in CONVERTERS:
            raise ArgumentError(f"{where}: unknown kind {a.kind!r}; kinds: {', '.join(KINDS)}")
        if a.default is not REQUIRED:
            a.convert(name, a.default)  # a default its own kind refuses is caught here, not at first use
        seen.add(a.name)
        out.append(a)
    return out


def _check_layouts(name: str, layouts, outputs) -> str | list[str] | None:
    if layouts is None or isinstance(layouts, str):
        return layouts
    layouts = list(layouts)
    if not all(isinstance(x, str) for x in layouts) or (isinstance(outputs, int) and len(layouts) != outputs):
        raise ArgumentError(f"custom operator {name!r}: layouts must be a string or one string per output")
    return layouts


def _register(cls, replace: bool) -> None:
    from stoker.operators.schema import registered
    from stoker.operators.schema import unregister as drop

    name = cls.schema.name
    ops = registered()  # built-ins first: a clash with one is found now, not when they load
    old = ops.get(name)
    if old is not None:
        if not getattr(old, "_stoker_custom", False):
            raise ArgumentError(f"custom operator {name!r}: stoker has a built-in operator of that name")
        if not replace:
            raise ArgumentError(f"custom operator {name!r} is registered already (pass replace=True to "
                                "register it again)")
        drop(name)
    parts = name.split(".")
    for i in range(1, len(parts)):
        if ".".join(parts[:i]) in ops:
            raise ArgumentError(f"custom operator {name!r}: {'.'.join(parts[:i])!r} is an operator, not a namespace")
    if any(k.startswith(name + ".") for k in ops):
        raise ArgumentError(f"custom operator {name!r}: that name is a namespace of other operators")
    cls._stoker_custom = True
    register(cls)


def _class_name(name: str) -> str:
    return "".join(p[:1].upper() + p[1:] for p in re.split(r"[._]", name))


def _takes(fn: Callable, param: str) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # builtins, some C callables: assume the plain form
        return False
    return param in params


@dataclass
class _Impl:
    """The user's functions, found once at registration."""

    label: str
    factory: Callable | None  # the user's class (one object per operator instance), or None
    cpu: Callable | None  # a function, or the name of the class's method
    batch: bool
    gpu: Callable | None
    cpu_ctx: bool = False
    gpu_ctx: bool = False

    @property
    def has_cpu(self) -> bool:
        return self.cpu is not None

    @classmethod
    def of(cls, name: str, target, batch: bool, gpu, arg_names: list[str]) -> _Impl:
        if inspect.isclass(target):
            cpu = getattr(target, "cpu_batch", None) or getattr(target, "cpu", None)
            is_batch = hasattr(target, "cpu_batch") or batch
            impl = cls(f"class {target.__qualname__}", target, cpu, is_batch, gpu or getattr(target, "gpu", None))
        elif callable(target):
            impl = cls(f"function {getattr(target, '__qualname__', target)!r}", None, target, batch, gpu)
        else:
            raise ArgumentError(f"custom operator {name!r}: decorate a function or a class, "
                                f"not {type(target).__name__}")
        for fn in (impl.cpu, impl.gpu):
            if fn is None:
                continue
            try:
                params = inspect.signature(fn).parameters
            except (TypeError, ValueError):
                continue
            if any(p.kind is p.VAR_KEYWORD for p in params.values()):
                continue
            missing = [a for a in arg_names if a not in params]
            if missing:
                raise ArgumentError(f"custom operator {name!r}: {getattr(fn, '__qualname__', fn)} does not take "
                                    f"the argument(s) {missing} declared in args")
        impl.cpu_ctx = impl.cpu is not None and _takes(impl.cpu, "ctx")
        impl.gpu_ctx = impl.gpu is not None and _takes(impl.gpu, "ctx")
        return impl


# --- the operator classes the decorator makes --------------------------------------------------

class _CustomOperator(Operator):
    """What the decorator's classes share: the user's object, arguments, layouts, GPU path."""

    _impl: _Impl
    _layouts: str | list[str] | None = None
    _stoker_custom = True

    def setup(self):
        names = [a.name for a in self.schema.args]
        self.user_args = {k: self.args.get(k) for k in names}  # (a per-sample one is absent here)
        impl = self._impl
        self.obj = impl.factory() if impl.factory is not None else None
        user_setup = getattr(self.obj, "setup", None)
        if user_setup is not None:
            try:
                user_setup(**self.user_args)
            except ArgError as e:
                raise arg_error(self.schema.name, e.arg, e.message) from None
            except (ValueError, TypeError) as e:
                raise ArgumentError(f"{self.schema.name}: {e}") from None
        self.cpu_fn = self._bound(impl.cpu)

    def _bound(self, fn):
        # A class's methods are called on this instance's object; plain functions as they are.
        if fn is None or self.obj is None or getattr(type(self.obj), fn.__name__, None) is not fn:
            return fn
        return getattr(self.obj, fn.__name__)

    def output_layouts(self, input_layouts):
        if isinstance(self._layouts, str):
            return [self._layouts] * self.num_outputs
        if self._layouts is not None:
            return list(self._layouts)
        return super().output_layouts(input_layouts)

    def _call(self, fn, positional, kwargs):
        """Call the user's function; its exceptions become SampleError (data errors, which
        on_error may skip) or OperatorBugError (a bug), naming the user's failing line."""
        from stoker.operators.python.function import user_line

        try:
            return fn(*positional, **kwargs)
        except Exception as e:  # the user's code may raise anything
            where = user_line(e)
            msg = f"{type(e).__name__}: {e}" + (f" (at {where})" if where else "")
            raise (SampleError if isinstance(e, SAMPLE_ERRORS) else OperatorBugError)(msg) from e

    def _batch_args(self, arg_inputs: dict, n: int) -> dict:
        """Each declared argument for the batch: a list of per-sample values where the argument
        may be per-sample (a constant repeated when given as one), else the constant."""
        out = dict(self.user_args)
        for a in self.schema.args:
            if a.name in arg_inputs:
                out[a.name] = [a.sample_value(v) for v in arg_inputs[a.name]]
            elif a.tensor:
                out[a.name] = [self.user_args[a.name]] * n
        return out

    def _batch_call(self, batch: BatchContext, n: int) -> BatchCall:
        return BatchCall(n, batch.iteration, [batch.source(i) for i in range(n)], batch.stream,
                         self.batch_rng(batch))

    def _split(self, out, what: str) -> tuple:
        k = self.num_outputs
        if k == 1:
            return (out,)
        if not isinstance(out, (tuple, list)) or len(out) != k:
            got = f"{len(out)} values" if isinstance(out, (tuple, list)) else type(out).__name__
            raise OperatorBugError(f"{what} must return {k} outputs, got {got}")
        return tuple(out)

    def run_gpu(self, batch, inputs, arg_inputs):
        """The user's GPU function on the batch, with the pipeline's stream current."""
        from stoker.backend import cuda
        from stoker.tensors_gpu import TensorListGPU

        cp = cuda.cupy()
        n = len(inputs[0]) if inputs else batch.batch_size
        lists = [list(x.samples()) if isinstance(x, TensorListGPU) else [cp.asarray(s) for s in x.samples()]
                 for x in inputs]
        kwargs = self._batch_args(arg_inputs, n)
        if self._impl.gpu_ctx:
            kwargs["ctx"] = self._batch_call(batch, n)
        try:
            with cuda.current_stream(batch):
                # (looked up now: @op.gpu may have come after this instance was made)
                outs = self._split(self._call(self._bound(self._impl.gpu), lists, kwargs), "the GPU function")
        except (SampleError, OperatorBugError) as e:
            kind = OperatorError if isinstance(e, SampleError) else OperatorBugError
            raise kind(str(e), operator=self.instance_name, origin=self.origin) from e.__cause__
        layouts = self.output_layouts([x.layout() for x in inputs])
        sources = [batch.source(i) for i in range(n)]
        result = []
        for j, o in enumerate(outs):
            if isinstance(o, cp.ndarray):
                o = list(o) if o.ndim and len(o) == n else None
            if not isinstance(o, (list, tuple)) or len(o) != n:
                raise OperatorBugError(f"output {j} of the GPU function must hold {n} samples (a list of CuPy "
                                       "arrays or an array whose first axis is the sample)",
                                       operator=self.instance_name, origin=self.origin)
            result.append(TensorListGPU([cp.asarray(s) for s in o], layouts[j], sources))
        return result


def _array(obj, what: str) -> np.ndarray:
    arr = np.asarray(obj)
    if arr.dtype == object:
        raise OperatorBugError(f"{what} returned {type(obj).__name__}, not an array of numbers")
    # (not np.ascontiguousarray: it makes a 0-d result 1-d)
    return arr if arr.flags.c_contiguous else arr.copy(order="C")


class _SampleOperator(_CustomOperator):
    """A custom operator computed one sample at a time (on the pipeline's threads; fusable)."""

    def run_sample(self, inputs, args, ctx):
        kwargs = {k: args[k] for k in self.user_args}
        if self._impl.cpu_ctx:
            kwargs["ctx"] = ctx
        outs = self._split(self._call(self.cpu_fn, inputs, kwargs), "the CPU function")
        return tuple(_array(o, "the CPU function") for o in outs)


class _BatchOperator(_CustomOperator):
    """A custom operator whose CPU function takes the whole batch."""

    def run_cpu(self, batch, inputs, arg_inputs):
        n = len(inputs[0]) if inputs else batch.batch_size
        kwargs = self._batch_args(arg_inputs, n)
        if self._impl.cpu_ctx:
            kwargs["ctx"] = self._batch_call(batch, n)
        try:
            outs = self._split(self._call(self.cpu_fn, [list(t.samples()) for t in inputs], kwargs),
                               "the batch function")
            lists = []
            for j, o in enumerate(outs):
                if isinstance(o, np.ndarray) and o.ndim and len(o) == n:
                    o = list(o)  # a dense batch: the first axis is the sample
                if not isinstance(o, (list, tuple)) or len(o) != n:
                    raise OperatorBugError(f"output {j} of the batch function must hold {n} samples, "
                                           f"got {type(o).__name__}")
                lists.append([_array(s, "the batch function") for s in o])
        except (SampleError, OperatorBugError) as e:
            kind = OperatorError if isinstance(e, SampleError) else OperatorBugError
            raise kind(str(e), operator=self.instance_name, origin=self.origin) from e.__cause__
        layouts = self.output_layouts([t.layout() for t in inputs])
        sources = list(batch.sources) if batch.sources else None
        return [TensorListCPU(lists[j], layouts[j], sources) for j in range(self.num_outputs)]


def _add_gpu(cls, fn: Callable) -> Callable:
    """``@MyOp.gpu``: give a registered custom operator its GPU function."""
    from stoker.operators.schema import refresh_doc

    impl = cls._impl
    impl.gpu = fn
    impl.gpu_ctx = _takes(fn, "ctx")
    if "gpu" not in cls.schema.devices:
        cls.schema.devices = tuple(cls.schema.devices) + ("gpu",)
        refresh_doc(cls)
    return fn


_CustomOperator.gpu = classmethod(_add_gpu)
