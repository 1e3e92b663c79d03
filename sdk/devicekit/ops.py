"""Operators over the base-op set, with numpy/PyTorch names and semantics.

Every function here ends in one C++ call per base op: type promotion,
broadcasting, and casts around a kernel that lacks a dtype happen in the SDK
core, once, not in each plugin (see ``devicekit.dispatch_stats()``). An op
the device's plugin does not implement raises ``NotImplementedByPlugin``.

Differentiable ops report their result to ``autograd.track`` (their gradient
rules are in ``_grad_rules.py``); comparisons, logical ops, argmax, floor,
sign and random ops are not differentiable and their results never require
grad. Gradient tie rules: ``maximum``/``minimum`` split the gradient half and
half between equal operands; ``max``/``min`` reductions split it evenly among
all elements equal to the result.

Every op that takes numpy's ``axis=``/``keepdims=`` also takes PyTorch's
``dim=``/``keepdim=`` (giving both is a ``DuplicateArgumentError``). The
functions are numpy-like: ``ops.max(x, 1)`` is the reduction (``np.max``,
``torch.amax``); the Tensor *method* ``x.max(1)`` is PyTorch's and returns
``(values, indices)``. Joining, splitting and reshaping ops (``cat``,
``split``, ``squeeze``, ...) live in ``_shape_ops`` and are re-exported here.
"""

import builtins as _builtins  # sum, max, min, abs and pow are shadowed below
import math
import numbers

import numpy as np

from . import _core
from . import dtypes as _dt
from ._plugins.registry import device as _device
from .autograd import track as _track
from collections import namedtuple

from ._shape_ops import (_UNSET, cat, chunk, clone, flatten, narrow, pick, split, squeeze, stack,
                         unsqueeze, view)
from .errors import (DTypeError, DuplicateArgumentError, InputOverflowError,
                     InvalidArgumentError)
from .tensor import Tensor, _contiguous_strides, _view_strides, full

from . import _op_facts as _facts  # arity and differentiability, generated from the spec

_ID = {name: i for i, name in enumerate(_core.OP_NAMES)}

add = _core.add  # the C++ binding itself: no Python frame per call


def _elementwise(name):
    """The elementwise base op ``name``: unary or binary by its number of
    inputs in the spec, reported to autograd when the spec marks it
    differentiable (``_op_facts``, generated from device_api/spec/base_ops.json)."""
    op = _ID[name]
    arity = _facts.NUM_INPUTS[name]
    if arity == 1:
        def fn(x):
            return _core.unary(op, x)

        def tracked(x):
            return _track(name, _core.unary(op, x), (x,))
        doc = f"Elementwise base op ``{name}`` (see docs/base_ops.md)."
    elif arity == 2:
        def fn(a, b):
            return _core.binary(op, a, b)

        def tracked(a, b):
            return _track(name, _core.binary(op, a, b), (a, b))
        doc = f"Elementwise base op ``{name}`` with broadcasting and type promotion."
    else:
        raise InvalidArgumentError(f"base op {name!r} has {arity} inputs in the spec; "
                                   f"ops._elementwise makes unary and binary ops only")
    fn = tracked if name in _facts.DIFFERENTIABLE else fn
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc
    return fn


# Not differentiable (the spec says which): floor, sign, the comparisons and
# the logical ops; their results never require grad.
(neg, abs, exp, log, sqrt, rsqrt, reciprocal, sin, cos, tanh, erf, floor, sign, logical_not) = (
    _elementwise(n) for n in ("neg", "abs", "exp", "log", "sqrt", "rsqrt", "reciprocal", "sin",
                              "cos", "tanh", "erf", "floor", "sign", "logical_not"))
(sub, mul, div, pow, maximum, minimum, eq, ne, lt, le, logical_and, logical_or, logical_xor) = (
    _elementwise(n) for n in ("sub", "mul", "div", "pow", "maximum", "minimum", "eq", "ne", "lt",
                              "le", "logical_and", "logical_or", "logical_xor"))


def gt(a, b):
    """``a > b``, as ``b < a`` (the base set has lt and le only)."""
    return lt(b, a)


def ge(a, b):
    """``a >= b``, as ``b <= a``."""
    return le(b, a)


def where(cond, a, b):
    """``a`` where ``cond`` is true, else ``b`` (broadcast; cond taken as ``!= 0``)."""
    return _track("where", _core.where(cond, a, b), (cond, a, b))


def _axes(x, axis):
    """``axis`` (None, an int or a sequence) as a list of axes of ``x``: the
    core's rule and errors (``_core.normalize_axes``), as every SDK op uses."""
    return _core.normalize_axes(axis, x.ndim)


def _squeeze(t, axes, keepdims):
    if keepdims or not axes:
        return t
    shape = [s for i, s in enumerate(t.shape) if i not in axes]
    return t.reshape(shape)


def _reduction(name):
    op = _ID["reduce_" + name]

    def fn(x, axis=None, keepdims=False, *, dim=_UNSET, keepdim=_UNSET):
        axis, keepdims = pick(name, axis, dim, keepdims, keepdim)
        axes = _axes(x, axis)
        mask = 0
        for a in axes:
            mask |= 1 << a
        out = _track("reduce_" + name, _core.reduce(op, x, mask), (x,), axes=axes)
        return _squeeze(out, axes, keepdims)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = (f"{name} over ``axis`` (int, tuple or None for all), like numpy; integer and "
                  f"bool sums are int64." if name == "sum" else f"{name} over ``axis``, like numpy.")
    return fn


sum, max, min = _reduction("sum"), _reduction("max"), _reduction("min")
amax, amin = max, min  # PyTorch's names for the reductions


def mean(x, axis=None, keepdims=False, *, dim=_UNSET, keepdim=_UNSET):
    """Arithmetic mean (integers give float32, like PyTorch requires a float input)."""
    axis, keepdims = pick("mean", axis, dim, keepdims, keepdim)
    n = math.prod(x.shape[a] for a in _axes(x, axis))
    s = sum(x if x.dtype.is_floating_point else x.to(_dt.float32), axis, keepdims)
    return div(s, float(n))


def argmax(x, axis=None, keepdims=False, *, dim=_UNSET, keepdim=_UNSET):
    """Index of the maximum (first on ties, first NaN wins), int64. ``axis=None``
    indexes the flattened tensor."""
    axis, keepdims = pick("argmax", axis, dim, keepdims, keepdim)
    if axis is None:
        out = _core.argmax(x.reshape(-1), 0) if x.ndim else _core.argmax(x, 0)
        return out.reshape([1] * x.ndim) if keepdims else out.reshape([])
    a = _axes(x, axis)
    return _squeeze(_core.argmax(x, a[0]), a, keepdims)


def argmin(x, axis=None, keepdims=False, *, dim=_UNSET, keepdim=_UNSET):
    """Index of the minimum (first on ties, first NaN wins), int64: ``argmax``
    of an order-reversing map of ``x`` that is exact for every dtype (``-x``
    for floats, ``max + min - x`` for integers, ``not x`` for bool)."""
    axis, keepdims = pick("argmin", axis, dim, keepdims, keepdim)
    if x.dtype.is_floating_point:
        flipped = _core.unary(_ID["neg"], x)
    elif x.dtype == _dt.bool_:
        flipped = _core.unary(_ID["logical_not"], x)
    else:
        lo, hi = _int_range(x.dtype)
        flipped = _core.binary(_ID["sub"], hi + lo, x)
    return argmax(flipped, axis, keepdims)


ValuesIndices = namedtuple("ValuesIndices", ["values", "indices"])
ValuesIndices.__doc__ = "What ``x.max(dim)``/``x.min(dim)`` return, like ``torch.return_types.max``."


def _extremum_method(name, reduce, arg):
    """PyTorch's ``Tensor.max``/``Tensor.min``: no dim gives the 0-d extremum;
    a dim gives ``(values, indices)`` (indices of the first extremum, the
    gradient goes to that element only, as in PyTorch); a tensor gives the
    elementwise ``maximum``/``minimum``."""
    def method(self, dim=None, keepdim=False, *, axis=_UNSET, keepdims=_UNSET):
        if isinstance(dim, Tensor):
            return (maximum if name == "max" else minimum)(self, dim)
        # dim/keepdim are this method's own names; axis/keepdims the aliases
        if axis is not _UNSET:
            if dim is not None:
                raise DuplicateArgumentError(f"{name}() got both dim={dim!r} and axis={axis!r}: "
                                             f"they are the same argument; pass one")
            dim = axis
        if keepdims is not _UNSET:
            if keepdim is not False:
                raise DuplicateArgumentError(f"{name}() got both keepdim={keepdim!r} and "
                                             f"keepdims={keepdims!r}: they are the same argument; "
                                             f"pass one")
            keepdim = bool(keepdims)
        if dim is None:
            return reduce(self)
        if not isinstance(dim, numbers.Integral):
            raise InvalidArgumentError(
                f"Tensor.{name}(dim={dim!r}): dim must be one int (this returns values and "
                f"indices, as in PyTorch); for the {name} over several dims use "
                f"x.a{name}({dim!r}) or ops.{name}(x, {dim!r})")
        indices = arg(self, dim, keepdims=True)
        values = gather(self, dim, indices)
        if not keepdim:
            values, indices = squeeze(values, dim), squeeze(indices, dim)
        return ValuesIndices(values, indices)
    method.__name__ = method.__qualname__ = name
    return method


def cumsum(x, axis=_UNSET, *, dim=_UNSET):
    """Running sum along ``axis``; integer and bool inputs give int64."""
    axis = _need_axis("cumsum", axis, dim)
    return _track("cumsum", _core.cumsum(x, axis), (x,), axis=axis)


def arange(start, stop=None, step=1, dtype=None, device="cpu:0"):
    """``start, start+step, ...`` below ``stop``, like numpy/PyTorch, via the iota op."""
    if stop is None:
        start, stop = 0, start
    if step == 0:
        raise InvalidArgumentError("arange: step must not be 0")
    ints = all(isinstance(v, numbers.Integral) for v in (start, stop, step))
    if ints:
        start, stop, step = int(start), int(stop), int(step)
        n = _builtins.max(0, -((start - stop) // step))  # exact: no float rounding
    else:
        n = _builtins.max(0, math.ceil((stop - start) / step))
    dtype = _dt.as_dtype(dtype if dtype is not None else (_dt.int64 if ints else _dt.float32))
    if n > 2**63 - 1:
        raise InputOverflowError(f"arange({start}, {stop}, {step}): {n} elements do not fit in int64")
    if ints and n:
        # Every value must fit the dtype, never wrap (nor start/step the int64 attrs).
        last = start + (n - 1) * step
        lo, hi = _int_range(dtype)
        for what, v in (("start", start), ("step", step), ("last value", last)):
            if not lo <= v <= hi:
                raise InputOverflowError(
                    f"arange({start}, {stop}, {step}): {what} {v} does not fit {dtype.name} "
                    f"([{lo}, {hi}])")
    return _core.iota(_device(device), [n], dtype.id, 0, start, step)


def _int_range(dtype):
    """The values an iota's int64 attributes and a dtype can both hold."""
    if dtype.is_floating_point or dtype == _dt.bool_:
        return -2**63, 2**63 - 1
    info = np.iinfo(dtype.numpy)
    return int(info.min), int(info.max)


def _seed(name, value, call):
    """A Philox seed or offset: an int in [0, 2**64), never truncated or wrapped."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InvalidArgumentError(f"{call}: {name} must be an int in [0, 2**64), got {value!r}")
    if not 0 <= int(value) < 2**64:
        raise InputOverflowError(f"{call}: {name} {int(value)} is outside [0, 2**64)")
    return int(value)


def _need_axis(call, axis, dim):
    axis, _ = pick(call, axis, dim, axis_default=_UNSET)
    if axis is _UNSET:
        raise InvalidArgumentError(f"{call}() needs dim= (or axis=)")
    return axis


def gather(x, axis=_UNSET, index=None, *, dim=_UNSET):
    """``out[i][j] = x[index[i][j]][j]`` for axis 0 (``torch.gather``)."""
    axis = _need_axis("gather", axis, dim)
    return _track("gather", _core.gather(x, axis, index), (x, index), axis=axis)


def scatter_add(x, axis=_UNSET, index=None, src=None, *, dim=_UNSET):
    """``x`` with ``src`` added at ``index`` along ``axis`` (``torch.scatter_add``)."""
    axis = _need_axis("scatter_add", axis, dim)
    return _track("scatter_add", _core.scatter_add(x, axis, index, src), (x, index, src), axis=axis)


def matmul(a, b):
    """Matrix product with numpy semantics: 1-D operands, broadcast batch dims."""
    if a.ndim == 0 or b.ndim == 0:
        raise InvalidArgumentError("matmul: both operands need at least one dimension")
    if a.ndim == 2 and b.ndim == 2:  # the common case, with nothing to broadcast or reshape
        return _track("matmul", _core.matmul(a, b), (a, b))
    va, vb = a.ndim == 1, b.ndim == 1
    flat, flat_strides = None, None
    if a.ndim > 2 and b.ndim == 2 and a.shape[-1] > 0:
        flat = [a.numel() // a.shape[-1], a.shape[-1]]
        flat_strides = _view_strides(list(a.shape), list(a.strides), flat)
    if flat_strides is not None:
        # [..., M, K] @ [K, N] as one [(...)*M, K] @ [K, N] product (as
        # torch.matmul folds): a batched product would broadcast b by expand
        # and repack it per batch row, and under autograd b's gradient would
        # be one small product per batch row plus a reduce_sum. Each output
        # element is the same K-long dot product either way. The views are
        # untracked: the tape records one matmul of a and b, whose rule
        # (_grad_rules._matmul) folds the same way.
        out = _core.matmul(a._view(flat, flat_strides, a._offset), b)
        shape = [*a.shape[:-1], b.shape[1]]
        return _track("matmul", out._view(shape, _contiguous_strides(shape), out._offset), (a, b))
    if va:
        a = a.reshape(1, a.shape[0])
    if vb:
        b = b.reshape(b.shape[0], 1)
    batch = _core.broadcast_shapes(list(a.shape[:-2]), list(b.shape[:-2]))
    if list(a.shape[:-2]) != batch:
        a = a.expand(*batch, *a.shape[-2:])
    if list(b.shape[:-2]) != batch:
        b = b.expand(*batch, *b.shape[-2:])
    out = _track("matmul", _core.matmul(a, b), (a, b))
    shape = list(out.shape)
    if vb:
        shape.pop(-1)
    if va:
        shape.pop(-2 if not vb else -1)
    return out.reshape(shape) if (va or vb) else out


def random_bits(shape, seed, offset=0, device="cpu:0"):
    """Philox4x32-10 bits as int32 (identical on every conformant backend)."""
    return _core.random(_ID["random_bits"], _device(device), _shape(shape), _dt.int32.id,
                        _seed("seed", seed, "random_bits"), _seed("offset", offset, "random_bits"))


def rand(shape, seed, offset=0, dtype=_dt.float32, device="cpu:0"):
    """Uniform [0, 1) from the same Philox stream as random_bits."""
    return _core.random(_ID["random_uniform"], _device(device), _shape(shape),
                        _dt.as_dtype(dtype).id, _seed("seed", seed, "rand"),
                        _seed("offset", offset, "rand"))


def randn(shape, seed, offset=0, dtype=_dt.float32, device="cpu:0"):
    """Standard normals by Box-Muller from the ``rand`` stream:
    ``u = rand([2, *shape], seed, offset)``, ``z = sqrt(-2 log(1 - u[0])) *
    cos(2 pi u[1])``, computed in float32 (float64 for a float64 result). The
    call consumes the Philox counters ``offset .. offset + ceil(2 n / 4)``."""
    dtype = _dt.as_dtype(dtype)
    if not dtype.is_floating_point:
        raise DTypeError(f"randn: dtype must be floating point, got {dtype}")
    shape = _shape(shape)
    u = rand([2, *shape], seed, offset, device=device)
    if dtype == _dt.float64:
        u = u._cast(dtype.id)
    r = sqrt(mul(log(sub(1.0, u[0])), -2.0))
    z = mul(r, cos(mul(u[1], 2.0 * math.pi)))
    return z if z.dtype == dtype else z._cast(dtype.id)


def randint(low, high, shape, seed, offset=0, dtype=_dt.int64, device="cpu:0"):
    """Integers uniform in [low, high): ``low + floor(u * (high - low))`` with
    ``u = rand(shape, seed, offset)`` and the product rounded to float32
    (clamped below ``high``); ``high - low`` must be in [1, 2**24] so that
    every value can come out."""
    dtype = _dt.as_dtype(dtype)
    if dtype.is_floating_point or dtype == _dt.bool_:
        raise DTypeError(f"randint: dtype must be an integer type, got {dtype}")
    for name, v in (("low", low), ("high", high)):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise InvalidArgumentError(f"randint: {name} must be an int, got {v!r}")
    span = int(high) - int(low)
    if not 1 <= span <= 2**24:
        raise InvalidArgumentError(f"randint({low}, {high}): high - low must be in [1, 2**24], "
                                   f"got {span}")
    lo, hi = _int_range(dtype)
    if not (lo <= low and high - 1 <= hi):
        raise InputOverflowError(f"randint({low}, {high}): values do not fit {dtype.name} "
                                 f"([{lo}, {hi}])")
    u = rand(_shape(shape), seed, offset, device=device)
    k = minimum(floor(mul(u, float(span))), float(span - 1))
    return add(k._cast(_dt.int64.id), int(low))._cast(dtype.id)


def zeros_like(x, dtype=None, device=None, requires_grad=False):
    """Zeros with ``x``'s shape, and its dtype and device unless given."""
    return full(list(x.shape), 0, dtype=x.dtype if dtype is None else dtype,
                device=x.device if device is None else device, requires_grad=requires_grad)


def ones_like(x, dtype=None, device=None, requires_grad=False):
    """Ones with ``x``'s shape, and its dtype and device unless given."""
    return full(list(x.shape), 1, dtype=x.dtype if dtype is None else dtype,
                device=x.device if device is None else device, requires_grad=requires_grad)


def clamp(x, min=None, max=None):
    """``x`` limited to [min, max] (scalars or broadcastable tensors), like
    ``torch.clamp``: ``min`` applies first, so min > max gives max; NaN stays
    NaN; the gradient passes where min <= x <= max (bounds included) and goes to
    the bound where it was taken from a tensor bound."""
    if min is None and max is None:
        raise InvalidArgumentError("clamp: give min, max or both")
    out = x
    if min is not None:
        out = where(lt(out, min), min, out)
    if max is not None:
        out = where(lt(max, out), max, out)
    if out.dtype != x.dtype:
        raise DTypeError(f"clamp: bounds {min!r}, {max!r} would change {x.dtype} to {out.dtype}")
    return out


clip = clamp


def masked_fill(x, mask, value):
    """``x`` with ``value`` where the bool ``mask`` (broadcastable to x) is
    true, like ``torch.Tensor.masked_fill``; x keeps its shape and dtype."""
    if mask.dtype != _dt.bool_:
        raise DTypeError(f"masked_fill: mask must be a bool tensor, got {mask.dtype}"
                         f"{list(mask.shape)}")
    try:
        ok = _core.broadcast_shapes(list(mask.shape), list(x.shape)) == list(x.shape)
    except InvalidArgumentError:
        ok = False
    if not ok:
        raise InvalidArgumentError(f"masked_fill: mask {list(mask.shape)} does not broadcast to "
                                   f"x {list(x.shape)}")
    if isinstance(value, Tensor) and value.ndim != 0:
        raise InvalidArgumentError(f"masked_fill: value must be a scalar or 0-d tensor, got "
                                   f"shape {list(value.shape)}")
    if isinstance(value, float) and not x.dtype.is_floating_point:
        raise DTypeError(f"masked_fill: float value {value} for a {x.dtype} tensor")
    out = where(mask, value, x)
    return out if out.dtype == x.dtype else cast(out, x.dtype)


def _triangle(name, keep):
    def fn(x, diagonal=0):
        if x.ndim < 2:
            raise InvalidArgumentError(f"{name}: x must have at least 2 dims, got shape "
                                       f"{list(x.shape)}")
        if isinstance(diagonal, bool) or not isinstance(diagonal, numbers.Integral):
            raise InvalidArgumentError(f"{name}: diagonal must be an int, got {diagonal!r}")
        rows, cols = x.shape[-2:]
        offset = sub(arange(cols, device=x.device).reshape(1, cols),
                     arange(rows, device=x.device).reshape(rows, 1))  # col - row
        return where(keep(offset, int(diagonal)), x, False if x.dtype == _dt.bool_ else 0)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = (f"``x`` with the elements {'above' if name == 'tril' else 'below'} diagonal "
                  f"``diagonal`` of the last two dims zeroed, like ``torch.{name}``.")
    return fn


tril = _triangle("tril", lambda offset, d: le(offset, d))
triu = _triangle("triu", lambda offset, d: le(d, offset))


def cast(x, dtype):
    """``x`` converted to ``dtype`` (round to nearest even between floats)."""
    return _track("cast", x._cast(_dt.as_dtype(dtype).id), (x,))


def contiguous(x):
    """``x`` itself when dense row-major, else a dense copy (the ``copy`` op)."""
    return x.contiguous()


# PyTorch's Tensor.max/Tensor.min, bound as methods by tensor.py (the Tensor surface)
_max_method = _extremum_method("max", max, argmax)
_min_method = _extremum_method("min", min, argmin)


def _shape(shape):
    return [int(shape)] if isinstance(shape, numbers.Integral) else [int(s) for s in shape]


__all__ = ["ValuesIndices", "abs", "add", "amax", "amin", "arange", "argmax", "argmin", "cast", "cat",
           "chunk", "clamp", "clip", "clone", "contiguous", "cos", "cumsum", "div", "eq", "erf",
           "exp", "flatten", "floor", "full", "gather", "ge", "gt", "le", "log", "logical_and",
           "logical_not", "logical_or", "logical_xor", "lt", "masked_fill", "matmul", "max",
           "maximum", "mean", "min", "minimum", "mul", "narrow", "ne", "neg", "ones_like", "pow",
           "rand", "randint", "randn", "random_bits", "reciprocal", "rsqrt", "scatter_add", "sign",
           "sin", "split", "sqrt", "squeeze", "stack", "sub", "sum", "tanh", "tril", "triu",
           "unsqueeze", "view", "where", "zeros_like"]
