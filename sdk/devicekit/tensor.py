"""Tensor: its creation functions and its whole surface.

``Tensor`` is the C++ class ``devicekit._core.Tensor``; the per-call paths
(``+``, ``ops.add``, casts, copies) are bound in C++. Every method, operator
and property a Tensor has is listed at the end of this file ("The Tensor
surface"), with the module that implements it: the C++ binding, this module
(conversions, and views that parse Python-level arguments such as shapes and
indices into one C++ view call), ``autograd``, ``ops`` or ``nn.functional``.
Views, ``contiguous`` and ``to`` report to ``autograd.track`` so gradients
flow through them.
"""

import math
import numbers

import numpy as np

from . import _core
from . import _graph_state
from . import dtypes as _dt
from ._plugins.registry import device as _device
from .autograd import track as _track
from .errors import (DTypeError, DeviceNotFoundError, IndexOutOfRangeError, InputOverflowError,
                     InvalidArgumentError)

_INT64_MIN, _INT64_MAX = -2**63, 2**63 - 1

Tensor = _core.Tensor
_raw_contiguous = Tensor.contiguous  # the C++ method; install_surface binds the tracked one

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


def _refuse_in_capture(self, call):
    name = self.device.name
    if name in _graph_state.capturing:
        _graph_state.refuse_host(call, name)


def _numpy(self, _call="Tensor.numpy()"):
    if _graph_state.capturing:
        _refuse_in_capture(self, _call)
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


def _view_strides(shape, strides, new):
    """Strides that show ``new`` over the elements of a (shape, strides) view
    without moving them, or None when no view can (then reshape copies).

    Dims that step through memory as one block (each stride the next one's
    times its size: a "chunk") may be regrouped freely; a reshape is a view
    when every chunk of the old shape is the product of whole dims of the
    new one. A piece of ``qkv.split(d, dim=-1)`` reshaped to heads is one;
    a transposed matrix flattened is not."""
    if math.prod(shape) == 0 or not shape:  # nothing to move, or one element (0-d)
        return _contiguous_strides(new)
    out = [0] * len(new)
    view_d = len(new) - 1
    base = strides[-1] if strides else 1  # the chunk's innermost stride
    old_n = new_n = 1
    for d in range(len(shape) - 1, -1, -1):
        old_n *= shape[d]
        chunk_ends = d == 0 or (shape[d - 1] != 1 and strides[d - 1] != old_n * base)
        if not chunk_ends:
            continue
        while view_d >= 0 and (new_n < old_n or new[view_d] == 1):
            out[view_d] = new_n * base
            new_n *= new[view_d]
            view_d -= 1
        if new_n != old_n:
            return None
        if d > 0:
            base, old_n, new_n = strides[d - 1], 1, 1
    return out if view_d == -1 else None


def _reshape(self, *shape):
    shape = _shape_arg(shape)
    n = self.numel()
    if shape.count(-1) > 1:
        raise InvalidArgumentError(f"reshape: only one dimension can be -1, got {shape}")
    if -1 in shape:
        known = math.prod(s for s in shape if s != -1)
        if known == 0 or n % known:
            raise InvalidArgumentError(f"reshape: cannot infer -1 in {shape} for {n} elements")
        shape[shape.index(-1)] = n // known
    if math.prod(shape) != n:
        raise InvalidArgumentError(
            f"reshape: shape {tuple(shape)} has {math.prod(shape)} elements, tensor of shape "
            f"{self.shape} has {n}")
    # A view when the layout allows one (as torch.reshape), else a dense copy.
    strides = _view_strides(list(self.shape), list(self.strides), shape)
    src = self if strides is not None else _raw_contiguous(self)
    if strides is None:
        strides = _contiguous_strides(shape)
    return _track("reshape", src._view(shape, strides, src._offset), (self,))


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
    # permute's view and tape record, built directly (every linear transposes its weight)
    nd = self.ndim
    dim0, dim1 = _dim(int(dim0), nd, "transpose"), _dim(int(dim1), nd, "transpose")
    order = list(range(nd))
    order[dim0], order[dim1] = dim1, dim0
    shape, strides = list(self.shape), list(self.strides)
    shape[dim0], shape[dim1] = shape[dim1], shape[dim0]
    strides[dim0], strides[dim1] = strides[dim1], strides[dim0]
    return _track("permute", self._view(shape, strides, self._offset), (self,), dims=order)


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
    body = np.array2string(_numpy(self, "repr(Tensor)"), separator=", ", prefix="tensor(")
    return f"tensor({body}, dtype={self.dtype}, device='{self.device.name}')"


def _len(self):
    if self.ndim == 0:
        raise TypeError("len() of a 0-d tensor")
    return self.shape[0]


def _item(self):
    if self.numel() != 1:
        raise InvalidArgumentError(f"item() needs exactly one element, tensor has {self.numel()}")
    return _numpy(self, "Tensor.item()").reshape(()).item()


def _bool(self):
    if self.numel() != 1:
        raise InvalidArgumentError(f"the truth value of a tensor with {self.numel()} elements is "
                                   f"ambiguous; use ops.sum/ops.max or .item()")
    return bool(_numpy(self, "bool(Tensor)").reshape(()).item())


def _tolist(self):
    return _numpy(self, "Tensor.tolist()").tolist()


def _t(self):
    return _permute(self, *reversed(range(self.ndim)))


def _contiguous(self):
    return _track("contiguous", _raw_contiguous(self), (self,))


def _array(self, dtype=None, copy=None):
    a = _numpy(self, "numpy.asarray(Tensor)")
    return a.astype(dtype) if dtype is not None else a


# ---- The Tensor surface -----------------------------------------------------
#
# Every attribute a Tensor has is named in this section, once: the names the
# C++ binding defines (``_CPP_ATTRIBUTES``) and the table ``_surface()`` that
# ``install_surface()`` binds, which says for each name the module that
# implements it. No other module adds attributes to Tensor; the package's
# ``__init__`` calls ``install_surface()`` once, after importing the modules
# the table names (tests/test_tensor_surface.py checks both).
#
# Functions are bound as they are, never wrapped: ``a * b`` calls ``ops.mul``
# with no extra Python frame, and ``a + b`` stays the C++ ``__add__``.

_CPP_ATTRIBUTES = (  # sdk/csrc/tensor_py.cpp
    "shape", "strides", "device", "ndim",                  # read-only properties
    "numel", "dim", "is_contiguous",                       # methods
    "__add__", "__radd__",  # the fast path: Python (autograd._add) only for a tracked operand
    # internals the Python side builds on
    "_dtype_id", "_offset", "_storage_id", "_requires_grad", "_view", "_expand", "_cast",
    "_to_device", "_copy_to_host",
)
# ("contiguous" is also a C++ method; the table replaces it with a tracked one.)


def _rev(fn):
    return lambda self, other: fn(other, self)


def _surface():
    """name -> what ``install_surface`` binds on Tensor."""
    # These modules import this one (for Tensor and full) at module level, so
    # this one reaches them at call time: install_surface runs once, after the
    # package has loaded them.
    from . import autograd, ops
    from .nn import functional as F
    return {
        # -- data, conversion and Python protocols (this module)
        "dtype": property(_dtype), "numpy": _numpy, "item": _item, "tolist": _tolist,
        "to": _to, "__array__": _array, "__repr__": _repr, "__len__": _len, "__bool__": _bool,
        "__hash__": object.__hash__,  # __eq__ is elementwise; hash tensors by identity
        # -- views and layout (this module; reported to autograd.track)
        "reshape": _reshape, "permute": _permute, "transpose": _transpose, "expand": _expand,
        "T": property(_t), "__getitem__": _getitem, "contiguous": _contiguous,
        # -- autograd (autograd.py); grad and grad_fn are class defaults that
        #    instances set in their own __dict__
        "grad": None, "grad_fn": None,
        "requires_grad": property(autograd._get_requires_grad, autograd._set_requires_grad),
        "is_leaf": property(autograd._is_leaf), "requires_grad_": autograd._requires_grad_,
        "detach": autograd._detach, "backward": autograd.backward,
        # -- arithmetic operators (ops.py; __add__/__radd__ are C++, above)
        "__sub__": ops.sub, "__rsub__": _rev(ops.sub), "__mul__": ops.mul, "__rmul__": ops.mul,
        "__truediv__": ops.div, "__rtruediv__": _rev(ops.div), "__pow__": ops.pow,
        "__rpow__": _rev(ops.pow), "__matmul__": ops.matmul, "__rmatmul__": _rev(ops.matmul),
        "__neg__": ops.neg, "__abs__": ops.abs,
        # -- comparison and logical operators (ops.py; elementwise, not differentiable)
        "__eq__": ops.eq, "__ne__": ops.ne, "__lt__": ops.lt, "__le__": ops.le, "__gt__": ops.gt,
        "__ge__": ops.ge, "__and__": ops.logical_and, "__or__": ops.logical_or,
        "__xor__": ops.logical_xor, "__invert__": ops.logical_not,
        # -- elementwise (ops.py)
        "exp": ops.exp, "log": ops.log, "sqrt": ops.sqrt, "rsqrt": ops.rsqrt,
        "reciprocal": ops.reciprocal, "sin": ops.sin, "cos": ops.cos, "tanh": ops.tanh,
        "erf": ops.erf, "floor": ops.floor, "sign": ops.sign, "abs": ops.abs, "neg": ops.neg,
        "maximum": ops.maximum, "minimum": ops.minimum, "clamp": ops.clamp, "clip": ops.clamp,
        "masked_fill": ops.masked_fill, "tril": ops.tril, "triu": ops.triu,
        # -- reductions and indexing (ops.py); max/min are PyTorch's (values, indices)
        "sum": ops.sum, "mean": ops.mean, "amax": ops.amax, "amin": ops.amin,
        "max": ops._max_method, "min": ops._min_method, "argmax": ops.argmax,
        "argmin": ops.argmin, "cumsum": ops.cumsum, "gather": ops.gather, "matmul": ops.matmul,
        # -- shape ops (_shape_ops.py, re-exported by ops); cat and stack take a
        #    list, so they are functions only, as in PyTorch
        "split": ops.split, "chunk": ops.chunk, "narrow": ops.narrow, "squeeze": ops.squeeze,
        "unsqueeze": ops.unsqueeze, "flatten": ops.flatten, "view": ops.view,
        "clone": ops.clone,
        # -- composites PyTorch also has as methods (nn/functional.py)
        "softmax": F.softmax, "log_softmax": F.log_softmax, "relu": F.relu,
        "sigmoid": F.sigmoid, "var": F.var, "logsumexp": F.logsumexp,
    }


_installed = {}  # what install_surface bound: name -> the very object (the surface test reads it)


def install_surface():
    """Binds the table of ``_surface()`` on Tensor (once, from ``devicekit/__init__``)."""
    table = _surface()
    for name, value in table.items():
        setattr(Tensor, name, value)
    _installed.clear()
    _installed.update(table)
