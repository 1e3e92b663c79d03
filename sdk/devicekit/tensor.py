"""Tensor creation and the Python-side Tensor methods.

``Tensor`` is the C++ class ``devicekit._core.Tensor``; the per-call paths
(``+``, ``ops.add``, casts, copies) are bound in C++. The methods added here
parse Python-level arguments (shapes, indices) into one C++ view call.
Views, ``contiguous`` and ``to`` report to ``autograd.track`` so gradients
flow through them.
"""

import numbers

import numpy as np

from . import _core
from . import dtypes as _dt
from ._registry import device as _device
from .autograd import track as _track
from .errors import (DTypeError, DeviceNotFoundError, IndexOutOfRangeError, InputOverflowError,
                     InvalidArgumentError)

_INT64_MIN, _INT64_MAX = -2**63, 2**63 - 1

Tensor = _core.Tensor
_raw_contiguous = Tensor.contiguous  # the C++ method; the tracked one replaces it below

# Same-size unsigned views let bytes cross the C++ boundary for every dtype,
# bfloat16 included, without depending on buffer-protocol format codes.
_RAW = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _raw(arr):
    return arr.view(_RAW[arr.dtype.itemsize])


def tensor(data, device="cpu:0", dtype=None, requires_grad=False):
    """Copy ``data`` (array-like or Tensor) to a new tensor on ``device``.

    Without ``dtype``: numpy arrays keep their dtype; Python floats become
    float32, ints int64 and bools bool (as in PyTorch). The result is a new
    autograd leaf (a Tensor ``data`` is copied, not tracked through).
    """
    out = _tensor(data, device, dtype)
    _leaf(out, requires_grad)
    return out


def _tensor(data, device, dtype):
    dev = _device(device)
    if isinstance(data, Tensor):
        out = data._to_device(dev)
        out = out._cast(_dt.as_dtype(dtype).id) if dtype is not None else out
        return out.detach() if out is data else out
    if dtype is not None:
        dt = _dt.as_dtype(dtype)
        arr = np.asarray(data)
        if arr.dtype != dt.numpy:
            arr = arr.astype(dt.numpy)  # numpy/ml_dtypes round to nearest even
    else:
        arr = np.asarray(data)
        from_python = not isinstance(data, (np.ndarray, np.generic))
        if from_python and arr.dtype == np.float64:
            arr = arr.astype(np.float32)
        dt = _dt.as_dtype(arr.dtype)
    if not arr.flags.c_contiguous:  # (np.ascontiguousarray would turn 0-d into 1-d)
        arr = arr.copy(order="C")
    return _core.from_host(dev, dt.id, _raw(arr))


def _leaf(t, requires_grad):
    if requires_grad:
        t.requires_grad = True  # validates the dtype
    return t


def empty(*shape, dtype=_dt.float32, device="cpu:0", requires_grad=False):
    return _leaf(_core.empty(_device(device), _shape_arg(shape), _dt.as_dtype(dtype).id),
                 requires_grad)


def full(shape, fill_value, dtype=_dt.float32, device="cpu:0", requires_grad=False):
    return _leaf(_core.full(_device(device), _shape_arg((shape,)), _dt.as_dtype(dtype).id,
                            fill_value), requires_grad)


def zeros(*shape, dtype=_dt.float32, device="cpu:0", requires_grad=False):
    return full(_shape_arg(shape), 0, dtype=dtype, device=device, requires_grad=requires_grad)


def ones(*shape, dtype=_dt.float32, device="cpu:0", requires_grad=False):
    return full(_shape_arg(shape), 1, dtype=dtype, device=device, requires_grad=requires_grad)


def _shape_arg(shape):
    if len(shape) == 1 and not isinstance(shape[0], numbers.Integral):
        shape = tuple(shape[0])
    out = [int(s) for s in shape]
    for s in out:
        if not _INT64_MIN <= s <= _INT64_MAX:
            raise InputOverflowError(f"shape {tuple(out)}: dimension {s} does not fit in int64")
    return out


# ---- Tensor methods ---------------------------------------------------------

def _dtype(self):
    return _dt.from_id(self._dtype_id)


def _numpy(self):
    out = np.empty(self.shape, dtype=self.dtype.numpy)
    self._copy_to_host(_raw(out))
    return out


def _to(self, target=None, dtype=None):
    """``t.to("cpu:0")``, ``t.to(devicekit.float16)``, ``t.to(device, dtype)``."""
    out = self
    device = None
    if target is not None:
        try:
            dtype_target = _dt.as_dtype(target)
        except DTypeError as e:
            dtype_target, dtype_error = None, e
        if dtype_target is not None and not isinstance(target, _core.Device):
            dtype = dtype if dtype is not None else dtype_target
        elif isinstance(target, str) and ":" not in target:
            # "complex64" is more likely a dtype DeviceKit lacks than a device
            # type: say both, as a dtype error.
            try:
                device = _device(target)
            except DeviceNotFoundError as e:
                raise DTypeError(f"to({target!r}): {dtype_error}; nor is it a device ({e})") from None
        else:
            device = _device(target)
    if device is not None:
        out = _track("to_device", out._to_device(device), (out,))
    if dtype is not None:
        out = _track("cast", out._cast(_dt.as_dtype(dtype).id), (out,))
    return out


def _contiguous_strides(shape):
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= max(s, 1)
    return list(reversed(strides))


def _reshape(self, *shape):
    shape = _shape_arg(shape)
    n = self.numel()
    if shape.count(-1) > 1:
        raise InvalidArgumentError(f"reshape: only one dimension can be -1, got {shape}")
    if -1 in shape:
        known = int(np.prod([s for s in shape if s != -1]))
        if known == 0 or n % known:
            raise InvalidArgumentError(f"reshape: cannot infer -1 in {shape} for {n} elements")
        shape[shape.index(-1)] = n // known
    if int(np.prod(shape)) != n:
        raise InvalidArgumentError(
            f"reshape: shape {tuple(shape)} has {int(np.prod(shape))} elements, tensor of shape "
            f"{self.shape} has {n}")
    src = _raw_contiguous(self)  # a copy only when the layout demands it
    return _track("reshape", src._view(shape, _contiguous_strides(shape), src._offset), (self,))


def _dim(dim, nd, call):
    """``dim`` normalised into [0, nd), or IndexOutOfRangeError like torch's."""
    if not -nd <= dim < max(nd, 1):
        raise IndexOutOfRangeError(f"{call}: dimension {dim} is out of range for a tensor of "
                                   f"rank {nd} (expected [{-nd}, {nd - 1}])")
    return dim + nd if dim < 0 else dim


def _permute(self, *dims):
    dims = _shape_arg(dims)
    nd = self.ndim
    norm = [_dim(d, nd, "permute") for d in dims]
    if sorted(norm) != list(range(nd)):
        raise InvalidArgumentError(f"permute: {tuple(dims)} is not a permutation of {nd} dims")
    out = self._view([self.shape[d] for d in norm], [self.strides[d] for d in norm], self._offset)
    return _track("permute", out, (self,), dims=norm)


def _transpose(self, dim0, dim1):
    order = list(range(self.ndim))
    dim0, dim1 = (_dim(int(d), self.ndim, "transpose") for d in (dim0, dim1))
    order[dim0], order[dim1] = order[dim1], order[dim0]
    return _permute(self, *order)


def _expand(self, *shape):
    shape = _shape_arg(shape)
    lead = len(shape) - self.ndim
    shape = [self.shape[i - lead] if s == -1 and i >= lead else s for i, s in enumerate(shape)]
    return _track("expand", self._expand(shape), (self,))


def _getitem(self, index):
    if not isinstance(index, tuple):
        index = (index,)
    return _track("getitem", _basic_view(self, index), (self,), index=index)


def _basic_view(self, index):
    if any(isinstance(i, (Tensor, list, np.ndarray)) for i in index):
        raise NotImplementedError("advanced (tensor/list) indexing is not supported yet; "
                                  "use ints, slices, None and ...")
    n_real = sum(1 for i in index if i is not None and i is not Ellipsis)
    if n_real > self.ndim:
        raise IndexOutOfRangeError(f"too many indices ({n_real}) for tensor of dimension {self.ndim}")
    if Ellipsis in index:
        at = index.index(Ellipsis)
        index = index[:at] + (slice(None),) * (self.ndim - n_real) + index[at + 1:]
    else:
        index = index + (slice(None),) * (self.ndim - n_real)
    shape, strides, offset, dim = [], [], self._offset, 0
    for i in index:
        if i is None:
            shape.append(1)
            strides.append(0)
            continue
        size, stride = self.shape[dim], self.strides[dim]
        if isinstance(i, slice):
            start, stop, step = i.indices(size)
            if step <= 0:
                raise InvalidArgumentError("slices with a negative or zero step are not supported")
            count = max(0, (stop - start + step - 1) // step)
            if count:
                offset += start * stride
            shape.append(count)
            strides.append(stride * step)
        elif isinstance(i, numbers.Integral):
            j = int(i) + size if i < 0 else int(i)
            if not 0 <= j < size:
                raise IndexOutOfRangeError(
                    f"index {i} is out of bounds for dimension {dim} with size {size}")
            offset += j * stride
        else:
            raise TypeError(f"unsupported index {i!r}")
        dim += 1
    return self._view(shape, strides, offset)


def _repr(self):
    body = np.array2string(self.numpy(), separator=", ", prefix="tensor(")
    return f"tensor({body}, dtype={self.dtype}, device='{self.device.name}')"


def _len(self):
    if self.ndim == 0:
        raise TypeError("len() of a 0-d tensor")
    return self.shape[0]


def _item(self):
    if self.numel() != 1:
        raise InvalidArgumentError(f"item() needs exactly one element, tensor has {self.numel()}")
    return self.numpy().reshape(()).item()


def _bool(self):
    if self.numel() != 1:
        raise InvalidArgumentError(f"the truth value of a tensor with {self.numel()} elements is "
                                   f"ambiguous; use ops.sum/ops.max or .item()")
    return bool(self.item())


def _array(self, dtype=None, copy=None):
    a = self.numpy()
    return a.astype(dtype) if dtype is not None else a


for _name, _fn in {
    "numpy": _numpy, "to": _to, "reshape": _reshape, "permute": _permute,
    "transpose": _transpose, "expand": _expand, "__getitem__": _getitem,
    "__repr__": _repr, "__len__": _len, "item": _item, "tolist": lambda self: self.numpy().tolist(),
    "__array__": _array, "__bool__": _bool,
    "contiguous": lambda self: _track("contiguous", _raw_contiguous(self), (self,)),
}.items():
    setattr(Tensor, _name, _fn)
Tensor.dtype = property(_dtype)
Tensor.T = property(lambda self: _permute(self, *reversed(range(self.ndim))))
