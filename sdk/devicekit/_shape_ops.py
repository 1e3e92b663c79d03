"""Joining, splitting and reshaping tensors with PyTorch's names: ``cat``,
``stack``, ``split``, ``chunk``, ``narrow``, ``squeeze``, ``unsqueeze``,
``flatten``, ``view`` and ``clone``.

No new base op: views (``squeeze``, ``unsqueeze``, ``narrow`` and so the
pieces of ``split``/``chunk``) are strided metadata over the same storage,
``flatten``/``view`` are ``reshape``, ``cat`` writes each piece into a
``-0.0``-filled tensor with ``scatter_add`` (``-0.0`` is the exact additive
identity, so every value, ``-0.0``, inf and NaN included, keeps its bits) and
``clone`` is a ``where`` that selects every element. All are differentiable:
views record the ``reshape`` or ``narrow`` rule, ``cat`` its own (slices of
the gradient), see ``_grad_rules``. They are re-exported by ``devicekit.ops``,
which also makes them Tensor methods.
"""

import numbers

from . import _core
from . import dtypes as _dt
from .autograd import track as _track
from .errors import DTypeError, DuplicateArgumentError, InvalidArgumentError
from .tensor import Tensor, _dim, _raw_contiguous, _shape_arg

_UNSET = object()


def pick(call, axis, dim, keepdims=False, keepdim=_UNSET, axis_default=None):
    """(axis, keepdims) from numpy's ``axis=``/``keepdims=`` or PyTorch's
    ``dim=``/``keepdim=``; giving both spellings of one argument is an error."""
    if dim is not _UNSET:
        if axis is not axis_default:
            raise _both(call, "axis", axis, "dim", dim)
        axis = dim
    if keepdim is not _UNSET:
        if keepdims is not False:
            raise _both(call, "keepdims", keepdims, "keepdim", keepdim)
        keepdims = keepdim
    return axis, bool(keepdims)


def _both(call, a, va, b, vb):
    return DuplicateArgumentError(
        f"{call}() got both {a}={va!r} and {b}={vb!r}: they are the same argument "
        f"(numpy's and PyTorch's spelling); pass one")


def _one_dim(call, x, axis, dim, default=_UNSET):
    axis, _ = pick(call, axis, dim, axis_default=default)
    if axis is _UNSET:
        raise InvalidArgumentError(f"{call}() needs dim= (or axis=)")
    if isinstance(axis, bool) or not isinstance(axis, numbers.Integral):
        raise InvalidArgumentError(f"{call}(): dim must be an int, got {axis!r}")
    return int(axis)


def _check_tensors(call, tensors):
    if isinstance(tensors, Tensor) or not isinstance(tensors, (list, tuple)):
        raise InvalidArgumentError(f"{call}() takes a list or tuple of tensors, got "
                                   f"{type(tensors).__name__}")
    if not tensors:
        raise InvalidArgumentError(f"{call}() needs at least one tensor, got an empty sequence")
    for i, t in enumerate(tensors):
        if not isinstance(t, Tensor):
            raise InvalidArgumentError(f"{call}(): item {i} is a {type(t).__name__}, not a Tensor")
        if t.device != tensors[0].device:
            raise InvalidArgumentError(f"{call}(): tensor {i} is on {t.device.name}, tensor 0 on "
                                       f"{tensors[0].device.name}")
    return list(tensors)


def cat(tensors, dim=_UNSET, *, axis=_UNSET):
    """Joins tensors along an existing ``dim`` (default 0), like ``torch.cat``:
    every other dim must match; dtypes promote as in arithmetic."""
    call = "cat"
    tensors = _check_tensors(call, tensors)
    d = 0 if dim is _UNSET and axis is _UNSET else _one_dim(call, tensors[0], axis, dim)
    first = tensors[0]
    d = _dim(d, first.ndim, call)
    if first.ndim == 0:
        raise InvalidArgumentError(f"{call}(): zero-dimensional tensors cannot be concatenated "
                                   f"(use stack)")
    for i, t in enumerate(tensors):
        same = t.ndim == first.ndim and all(
            a == b for k, (a, b) in enumerate(zip(t.shape, first.shape)) if k != d)
        if not same:
            raise InvalidArgumentError(
                f"{call}(): tensor {i} has shape {list(t.shape)}, tensor 0 {list(first.shape)}: "
                f"all dims but dim {d} must match")
    dtype_id = first._dtype_id
    for t in tensors[1:]:
        dtype_id = _core.promote_types(dtype_id, t._dtype_id)
    dtype = _dt.from_id(dtype_id)
    sizes = [t.shape[d] for t in tensors]
    # One copy launch per piece into its slice of the result: bit-exact.
    pieces = [t._cast(dtype.id) if t._dtype_id != dtype.id else t for t in tensors]
    out = _core.cat(pieces, d)
    return _track("cat", out, tuple(tensors), dim=d, sizes=sizes)


def stack(tensors, dim=_UNSET, *, axis=_UNSET):
    """Joins same-shape tensors along a new ``dim`` (default 0), like ``torch.stack``."""
    call = "stack"
    tensors = _check_tensors(call, tensors)
    d = 0 if dim is _UNSET and axis is _UNSET else _one_dim(call, tensors[0], axis, dim)
    for i, t in enumerate(tensors):
        if list(t.shape) != list(tensors[0].shape):
            raise InvalidArgumentError(f"{call}(): tensor {i} has shape {list(t.shape)}, tensor 0 "
                                       f"{list(tensors[0].shape)}: stack needs equal shapes")
    d = _dim(d, tensors[0].ndim + 1, call)
    return cat([unsqueeze(t, d) for t in tensors], d)


def narrow(x, dim, start, length):
    """The view ``x[..., start:start+length, ...]`` along ``dim`` (``torch.narrow``)."""
    d = _dim(int(dim), x.ndim, "narrow")
    size = x.shape[d]
    start = int(start) + size if start < 0 else int(start)
    if not (0 <= start <= size and 0 <= length <= size - start):
        raise InvalidArgumentError(f"narrow(): start {start} and length {length} do not fit dim "
                                   f"{d} of size {size} (shape {list(x.shape)})")
    shape = list(x.shape)
    shape[d] = int(length)
    offset = x._offset + (start * x.strides[d] if length else 0)
    out = x._view(shape, list(x.strides), offset)
    return _track("narrow", out, (x,), dim=d, start=start)


def split(x, split_size_or_sections, dim=_UNSET, *, axis=_UNSET):
    """Views of ``x`` along ``dim`` (default 0), like ``torch.split``: an int
    gives pieces of that size (the last may be smaller); a list gives pieces
    of those sizes, which must sum to the dim's size."""
    call = "split"
    d = 0 if dim is _UNSET and axis is _UNSET else _one_dim(call, x, axis, dim)
    d = _dim(d, x.ndim, call)
    size = x.shape[d]
    s = split_size_or_sections
    if isinstance(s, numbers.Integral) and not isinstance(s, bool):
        if s <= 0 and not (s == 0 and size == 0):
            raise InvalidArgumentError(f"{call}(): split size must be positive, got {s}")
        sizes = [min(s, size - i) for i in range(0, size, s)] if size else [0]
    elif isinstance(s, (list, tuple)):
        sizes = [int(n) for n in s]
        if any(n < 0 for n in sizes) or sum(sizes) != size:
            raise InvalidArgumentError(
                f"{call}(): sections {list(s)} must be non-negative and sum to the size {size} of "
                f"dim {d} (shape {list(x.shape)})")
    else:
        raise InvalidArgumentError(f"{call}(): split_size_or_sections must be an int or a list "
                                   f"of ints, got {s!r}")
    out, start = [], 0
    for n in sizes:
        out.append(narrow(x, d, start, n))
        start += n
    return tuple(out)


def chunk(x, chunks, dim=_UNSET, *, axis=_UNSET):
    """At most ``chunks`` views along ``dim`` (default 0) of size
    ceil(size / chunks), like ``torch.chunk`` (so there may be fewer)."""
    call = "chunk"
    if isinstance(chunks, bool) or not isinstance(chunks, numbers.Integral) or chunks <= 0:
        raise InvalidArgumentError(f"{call}(): chunks must be a positive int, got {chunks!r}")
    d = 0 if dim is _UNSET and axis is _UNSET else _one_dim(call, x, axis, dim)
    d = _dim(d, x.ndim, call)
    size = x.shape[d]
    return split(x, max(-(-size // chunks), 1) if size else 0, d)


def _same_order_view(call, x, shape, strides):
    """A view that keeps x's elements in the same row-major order (so the
    gradient is ``g.reshape(x.shape)``)."""
    return _track("reshape", x._view(shape, strides, x._offset), (x,))


def squeeze(x, dim=_UNSET, *, axis=_UNSET):
    """``x`` without size-1 dims (all, or the ones in ``dim``: an int or a
    tuple; a named dim whose size is not 1 is kept, as in PyTorch). A view."""
    call = "squeeze"
    if dim is _UNSET and axis is _UNSET:
        drop = {i for i, s in enumerate(x.shape) if s == 1}
    else:
        dims, _ = pick(call, None if axis is _UNSET else axis, dim)
        dims = [dims] if isinstance(dims, numbers.Integral) else list(dims)
        drop = {_dim(int(a), x.ndim, call) for a in dims if x.ndim}
        drop = {i for i in drop if x.shape[i] == 1}
    keep = [i for i in range(x.ndim) if i not in drop]
    return _same_order_view(call, x, [x.shape[i] for i in keep], [x.strides[i] for i in keep])


def unsqueeze(x, dim=_UNSET, *, axis=_UNSET):
    """``x`` with a new size-1 dim at ``dim`` (in [-ndim-1, ndim]). A view."""
    call = "unsqueeze"
    d = _dim(_one_dim(call, x, axis, dim), x.ndim + 1, call)
    shape, strides = list(x.shape), list(x.strides)
    shape.insert(d, 1)
    strides.insert(d, strides[d] * shape[d + 1] if d < x.ndim else 1)
    return _same_order_view(call, x, shape, strides)


def flatten(x, start_dim=0, end_dim=-1):
    """Dims ``start_dim..end_dim`` merged into one (a 0-d tensor becomes
    shape [1]), like ``torch.flatten``; a view when the layout allows, else a copy."""
    if x.ndim == 0:
        return x.reshape(1)
    s, e = _dim(int(start_dim), x.ndim, "flatten"), _dim(int(end_dim), x.ndim, "flatten")
    if s > e:
        raise InvalidArgumentError(f"flatten(): start_dim {start_dim} comes after end_dim "
                                   f"{end_dim} for shape {list(x.shape)}")
    merged = 1
    for n in x.shape[s:e + 1]:
        merged *= n
    return x.reshape(*x.shape[:s], merged, *x.shape[e + 1:])


def view(x, *shape):
    """``x`` with a new shape over the same storage, like ``Tensor.view``:
    the tensor must be contiguous (``reshape`` also gives a view of a strided
    tensor when its layout allows one, and copies otherwise; a view never
    copies). ``view(dtype)`` (reinterpreting bits) is not supported."""
    if len(shape) == 1 and isinstance(shape[0], (str, _dt.dtype)):
        raise DTypeError(f"view({shape[0]!r}): reinterpreting a tensor's bits as another dtype "
                         f"is not supported; use .to(dtype) to convert values")
    if not x.is_contiguous():
        raise InvalidArgumentError(
            f"view({', '.join(map(str, _shape_arg(shape)))}): the tensor of shape {list(x.shape)} "
            f"and strides {list(x.strides)} is not contiguous, so no view has that shape; use "
            f".reshape(...) (which copies when it must) or .contiguous().view(...)")
    return x.reshape(*shape)


def clone(x):
    """A new tensor with ``x``'s values (every bit) in its own storage;
    differentiable (the gradient passes through unchanged)."""
    take = _core.full(x.device, [], _dt.bool_.id, 1)
    out = _raw_contiguous(_core.where(take, x, x))
    return _track("contiguous", out, (x,))


__all__ = ["cat", "chunk", "clone", "flatten", "narrow", "split", "squeeze", "stack",
           "unsqueeze", "view"]
