"""``Tensor`` (one sample) and ``Batch`` (samples of one type, shapes may differ) for eager mode.

Both wrap stoker's own containers (NumPy arrays on the host, a GPU list when
the GPU backend is present) without copying, and convert to NumPy
(``__array__``), DLPack (``__dlpack__``) and torch (``.torch()``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from stoker import types
from stoker.tensors import TensorCPU, TensorListCPU, is_gpu_array, to_numpy

__all__ = ["Tensor", "Batch", "as_tensor", "as_batch", "tensor", "batch"]


def _gpu_unavailable(what: str) -> RuntimeError:
    from stoker.backend import cuda

    reason = cuda.unavailable_reason(0) or "stoker's GPU tensors are not available in this build"
    return RuntimeError(f"{what}: no GPU can be used here ({reason}); keep the data on the CPU (.cpu()).")


def _gpu_list_class():
    from stoker.backend import cuda

    if cuda.unavailable_reason(0):
        raise _gpu_unavailable(".gpu()")
    try:
        from stoker.tensors_gpu import TensorListGPU
    except ImportError:
        raise _gpu_unavailable(".gpu()") from None
    return TensorListGPU




def _to_torch(arr):
    import torch

    if is_gpu_array(arr):
        return torch.from_dlpack(arr)
    arr = np.asarray(arr)
    if not arr.flags.writeable:
        arr = arr.copy()  # torch warns on read-only memory
    return torch.from_numpy(np.ascontiguousarray(arr))


class Tensor:
    """One sample: an array with a layout ("HWC") on the CPU (or the GPU).

    ``shape`` (a tuple), ``dtype`` (a ``types.DALIDataType``), ``layout``, ``ndim``; ``.cpu()``,
    ``.gpu()``, ``.torch()``, ``np.asarray(t)``, ``torch.from_dlpack(t)``; arithmetic with
    other tensors and numbers runs stoker's arithmetic operator.
    """

    __array_priority__ = 1000  # NumPy defers to our operators (np.float32(2) * t)

    def __init__(self, data, layout: str | None = None):
        if isinstance(data, Tensor):
            self._data = data._data
            layout = data._layout if layout is None else layout
        elif isinstance(data, TensorCPU):
            self._data = data.as_array()
            layout = data.layout() if layout is None else layout
        elif is_gpu_array(data):
            # stoker's TensorGPU keeps DALI's shape() method; hold the CuPy array underneath.
            self._data = data.as_array() if hasattr(data, "as_array") else data
        else:
            self._data = to_numpy(data)
        self._layout = layout or ""
        if self._layout and len(self._layout) != self.ndim:
            raise ValueError(f"Tensor: layout '{self._layout}' has {len(self._layout)} letters but the data has "
                             f"{self.ndim} dimensions")

    # --- properties ----------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(int(s) for s in self._data.shape)

    @property
    def ndim(self) -> int:
        return len(self._data.shape)

    @property
    def dtype(self) -> types.DALIDataType:
        return types.to_dali_type(np.dtype(str(self._data.dtype)))

    @property
    def layout(self) -> str:
        return self._layout

    @property
    def device(self) -> str:
        return "gpu" if is_gpu_array(self._data) else "cpu"

    def item(self):
        """The value of a one-element tensor as a Python number."""
        return np.asarray(self.cpu()._data).item()

    # --- placement and conversion -------------------------------------------------
    def cpu(self) -> Tensor:
        if self.device == "cpu":
            return self
        return Tensor(to_numpy(self._data), self._layout)

    def gpu(self, index: int | None = None) -> Tensor:
        if self.device == "gpu":
            return self
        gpu_list = _gpu_list_class()(TensorListCPU([self._data], self._layout))
        return Tensor(gpu_list[0], self._layout)

    def numpy(self) -> np.ndarray:
        return np.asarray(self.cpu()._data)

    def torch(self, copy: bool = False):
        """This tensor as a ``torch.Tensor`` (shares memory unless ``copy``)."""
        t = _to_torch(self._data)
        return t.clone() if copy else t

    def __array__(self, dtype=None, copy=None):
        arr = np.asarray(self.cpu()._data)
        return arr if dtype is None else arr.astype(dtype)

    def __dlpack__(self, *args, **kwargs):
        if self.device == "cpu":
            return np.ascontiguousarray(self._data).__dlpack__()
        return self._data.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return (1, 0) if self.device == "cpu" else self._data.__dlpack_device__()

    @property
    def __cuda_array_interface__(self):
        if self.device != "gpu":
            raise AttributeError("__cuda_array_interface__: the tensor is on the CPU")
        return self._data.__cuda_array_interface__

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-D tensor")
        return self.shape[0]

    def __getitem__(self, key) -> Tensor:
        return Tensor(np.ascontiguousarray(self.numpy()[key]))

    def __repr__(self) -> str:
        body = np.array2string(self.numpy(), threshold=32, edgeitems=2).replace("\n", "\n       ")
        return f"Tensor({body}, dtype={self.dtype.name}, layout={self._layout!r}, device={self.device!r})"

    def __bool__(self) -> bool:
        return bool(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __float__(self) -> float:
        return float(self.item())


class Batch:
    """Samples that share element type, number of dimensions and layout (shapes may differ).

    ``tensors`` (the samples as :class:`Tensor`), ``batch_size`` / ``len()``, ``shape`` (a list of
    tuples), ``dtype``, ``layout``; ``.cpu()``, ``.gpu()``, ``.torch(pad=False)``, ``as_tensor()``
    (samples of equal shape stacked), ``np.asarray(b)``.
    """

    __array_priority__ = 1000

    def __init__(self, data, layout: str | None = None):
        if isinstance(data, Batch):
            self._tl = data._tl
        elif isinstance(data, TensorListCPU) or is_gpu_array(data) and hasattr(data, "as_cpu"):
            self._tl = data
        elif isinstance(data, (list, tuple)):
            lay = layout if layout is not None else _common_layout(data)
            samples = [_sample_array(x) for x in data]
            if any(is_gpu_array(x) for x in samples):
                self._tl = _gpu_list_class()(samples, lay)
            else:
                self._tl = TensorListCPU(samples, lay)
        else:
            # A dense array: the first axis is the batch.
            self._tl = TensorListCPU(to_numpy(data) if not is_gpu_array(data) else data)
        if layout is not None and layout != self._tl.layout():
            self._tl = _relayout(self._tl, layout)

    # --- properties ----------------------------------------------------------
    @property
    def tensors(self) -> list[Tensor]:
        return [Tensor(self._tl[i], self._tl.layout()) for i in range(len(self._tl))]

    @property
    def batch_size(self) -> int:
        return len(self._tl)

    def __len__(self) -> int:
        return len(self._tl)

    def __iter__(self):
        return iter(self.tensors)

    def select(self, index) -> Tensor | Batch:
        """Sample ``index`` (a Tensor), or a Batch of the samples picked by a slice or a list of indices."""
        if isinstance(index, (int, np.integer)):
            return self.tensors[int(index)]
        picked = range(len(self))[index] if isinstance(index, slice) else list(index)
        return Batch([self.tensors[i] for i in picked], self.layout)

    @property
    def shape(self) -> list[tuple[int, ...]]:
        return [tuple(int(d) for d in s) for s in self._tl.shape()]

    @property
    def dtype(self) -> types.DALIDataType:
        return self._tl.dtype

    @property
    def layout(self) -> str:
        return self._tl.layout()

    @property
    def ndim(self) -> int:
        return self._tl.ndim

    @property
    def device(self) -> str:
        return "cpu" if isinstance(self._tl, TensorListCPU) else "gpu"

    def source_info(self, i: int | None = None):
        """Where the samples came from (file paths for reader outputs)."""
        return self._tl.source_info(i)

    # --- placement and conversion -------------------------------------------------
    def cpu(self) -> Batch:
        return self if self.device == "cpu" else Batch(self._tl.as_cpu())

    def gpu(self, index: int | None = None) -> Batch:
        if self.device == "gpu":
            return self
        return Batch(_gpu_list_class()(self._tl))

    def as_tensor(self) -> Tensor:
        """The samples stacked into one tensor (they must have the same shape)."""
        t = self._tl.as_tensor()
        return Tensor(t.as_array() if isinstance(t, TensorCPU) else t, t.layout() if hasattr(t, "layout") else "")

    def to_tensor_list(self):
        """The underlying stoker batch (``TensorListCPU`` on the host), as ``Pipeline.run`` returns."""
        return self._tl

    def torch(self, copy: bool = False, pad: bool = False):
        """The batch as one ``torch.Tensor`` (leading batch axis); ``pad`` zero-pads unequal shapes."""
        if pad and not self._tl.is_dense_tensor():
            arrays = [np.asarray(t) for t in self.cpu().tensors]
            extent = np.max([a.shape for a in arrays], axis=0)
            out = np.zeros((len(arrays), *extent), dtype=arrays[0].dtype)
            for i, a in enumerate(arrays):
                out[(i, *[slice(0, s) for s in a.shape])] = a
            t = _to_torch(out)
            return t.cuda() if self.device == "gpu" else t
        if not self._tl.is_dense_tensor():
            raise ValueError(f"Batch.torch(): the samples differ in shape ({self.shape[:4]}...); "
                             "pass pad=True or convert the samples one by one (batch.tensors)")
        t = self.as_tensor().torch()
        return t.clone() if copy else t

    def __array__(self, dtype=None, copy=None):
        arr = np.asarray(self.cpu()._tl.as_array())
        return arr if dtype is None else arr.astype(dtype)

    def __dlpack__(self, *args, **kwargs):
        return self.as_tensor().__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return (1, 0) if self.device == "cpu" else self.as_tensor().__dlpack_device__()

    def __repr__(self) -> str:
        return f"Batch(batch_size={len(self)}, dtype={self.dtype.name}, layout={self.layout!r}, " \
               f"shape={self.shape[:4]}{'...' if len(self) > 4 else ''}, device={self.device!r})"


def _sample_array(x):
    if isinstance(x, Tensor):
        return x.numpy() if x.device == "cpu" else x._data
    if isinstance(x, TensorCPU):
        return x.as_array()
    return to_numpy(x)


def _common_layout(items: Sequence) -> str:
    layouts = {x.layout if isinstance(x, Tensor) else x.layout() for x in items if isinstance(x, (Tensor, TensorCPU))}
    layouts.discard("")
    if len(layouts) > 1:
        raise ValueError(f"Batch: the samples have different layouts {sorted(layouts)}")
    return layouts.pop() if layouts else ""


def _relayout(tl, layout: str):
    if tl.ndim and layout and len(layout) != tl.ndim:
        raise ValueError(f"Batch: layout '{layout}' has {len(layout)} letters but the samples have {tl.ndim} "
                         "dimensions")
    if isinstance(tl, TensorListCPU):
        return TensorListCPU(tl.samples(), layout, tl.source_info())
    return type(tl)(tl, layout)


def _is_sample_like(x) -> bool:
    """Array-like objects that count as one sample inside a list (not Python numbers)."""
    return isinstance(x, (np.ndarray, Tensor, TensorCPU)) or (
        not isinstance(x, (list, tuple, str, bytes, int, float, bool, np.generic))
        and (hasattr(x, "__array__") or hasattr(x, "__dlpack__") or hasattr(x, "__cuda_array_interface__")))


def is_batch_like(x) -> bool:
    """Batches, stoker tensor lists and lists of arrays (as opposed to one tensor)."""
    if isinstance(x, (Batch, TensorListCPU)):
        return True
    if is_gpu_array(x) and hasattr(x, "as_cpu") and hasattr(x, "__len__") and hasattr(x, "at"):
        return True  # a stoker TensorListGPU
    return isinstance(x, (list, tuple)) and len(x) > 0 and all(_is_sample_like(v) for v in x)


def as_tensor(data, layout: str | None = None, dtype=None) -> Tensor:
    """``data`` (NumPy, torch, DLPack, nested lists, a stoker tensor) as a :class:`Tensor`, without copying
    when possible. ``dtype`` converts (a ``types`` constant or a NumPy type)."""
    if isinstance(data, Batch):
        t = data.as_tensor()
    elif isinstance(data, TensorListCPU):
        t = Batch(data).as_tensor()
    elif isinstance(data, Tensor):
        t = data
    else:
        t = Tensor(data)
    if dtype is not None:
        t = Tensor(t.numpy().astype(types.dtype_from_arg(dtype), copy=False), t.layout)
    return Tensor(t, layout) if layout is not None else t


def tensor(data, layout: str | None = None, dtype=None) -> Tensor:
    """Like :func:`as_tensor`, but always copies."""
    t = as_tensor(data, layout, dtype)
    return Tensor(np.array(t.numpy(), copy=True), t.layout) if t.device == "cpu" else t


def as_batch(data, layout: str | None = None, dtype=None) -> Batch:
    """``data`` as a :class:`Batch`: a list of samples, a stoker ``TensorListCPU``, a Batch, or a dense
    array / Tensor whose first axis is the batch."""
    if isinstance(data, Tensor):
        data = data.numpy() if data.device == "cpu" else data._data
    b = Batch(data, layout)
    if dtype is not None:
        np_type = types.dtype_from_arg(dtype)
        b = Batch([t.numpy().astype(np_type, copy=False) for t in b.cpu().tensors], b.layout)
    return b


def batch(data, layout: str | None = None, dtype=None) -> Batch:
    """Like :func:`as_batch`, but always copies the samples."""
    b = as_batch(data, layout, dtype)
    return Batch([np.array(t.numpy(), copy=True) for t in b.cpu().tensors], b.layout)


# --- arithmetic: runs stoker's arithmetic operator, as ``a + b`` on DataNodes does in a pipeline ---

def _arith(expr: str, a, b):
    from stoker.dynamic._invoke import call

    inputs, args = [], {"expr": expr}
    for slot, x in (("lhs", a), ("rhs", b)):
        if isinstance(x, (bool, int, float, np.bool_, np.integer, np.floating)):
            args[slot] = x
        else:
            inputs.append(x)
            args[slot] = None
    return call("_arithmetic", inputs, args)


def _unary(expr: str, a):
    from stoker.dynamic._invoke import call

    return call("_arithmetic", [a], {"expr": expr})


_BINARY_DUNDERS = {"add": "add", "sub": "sub", "mul": "mul", "truediv": "fdiv", "floordiv": "div",
                   "mod": "mod", "pow": "pow", "and": "bitand", "or": "bitor", "xor": "bitxor"}
_COMPARE_DUNDERS = {"eq": "eq", "ne": "neq", "lt": "lt", "le": "leq", "gt": "gt", "ge": "geq"}


def _install_arithmetic(cls):
    for dunder, expr in _BINARY_DUNDERS.items():
        setattr(cls, f"__{dunder}__", lambda self, o, _e=expr: _arith(_e, self, o))
        setattr(cls, f"__r{dunder}__", lambda self, o, _e=expr: _arith(_e, o, self))
    for dunder, expr in _COMPARE_DUNDERS.items():
        setattr(cls, f"__{dunder}__", lambda self, o, _e=expr: _arith(_e, self, o))
    cls.__neg__ = lambda self: _unary("neg", self)
    cls.__abs__ = lambda self: _unary("abs", self)
    cls.__invert__ = lambda self: _unary("bitnot", self)
    cls.__pos__ = lambda self: self
    cls.__hash__ = object.__hash__


_install_arithmetic(Tensor)
_install_arithmetic(Batch)
