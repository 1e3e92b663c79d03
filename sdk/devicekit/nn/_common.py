"""Helpers shared by the composite ops: argument checks and the float16/
bfloat16 compute policy."""

import numbers

from .. import _core
from .. import dtypes as _dt
from ..errors import DTypeError, IndexOutOfRangeError, InvalidArgumentError

_HALF = ("float16", "bfloat16")


def fail(op, message):
    raise InvalidArgumentError(f"{op}: {message}")


def shape_of(t):
    return list(t.shape)


def check_float(op, name, t):
    if not t.dtype.is_floating_point:
        raise DTypeError(f"{op}: {name} must be a floating-point tensor, got {t.dtype}{shape_of(t)}")


def check_int(op, name, t):
    if t.dtype not in ("int32", "int64"):
        raise DTypeError(f"{op}: {name} must be an int32 or int64 tensor, got {t.dtype}{shape_of(t)}")


def check_rank(op, name, t, low, high=None):
    if t.ndim < low or (high is not None and t.ndim > high):
        want = f"rank {low}" if high == low else f"rank >= {low}" if high is None else f"rank {low}..{high}"
        fail(op, f"{name} must have {want}, got shape {shape_of(t)}")


def check_vector(op, name, t, size):
    """``t`` is None or a 1-D tensor of ``size`` elements (a per-feature weight or bias)."""
    if t is not None and shape_of(t) != [size]:
        fail(op, f"{name} must have shape [{size}], got {shape_of(t)}")


def broadcasts_to(t, target):
    """Whether ``t`` broadcasts to ``target`` without changing it."""
    try:
        return _core.broadcast_shapes(shape_of(t), list(target)) == list(target)
    except InvalidArgumentError:  # the shapes do not broadcast at all
        return False


def norm_axis(op, t, axis):
    """One int axis of ``t``, by the core's rule (``_core.normalize_axes``)
    with PyTorch's dim wrapping: a 0-d tensor takes axis 0 or -1."""
    if not isinstance(axis, numbers.Integral):
        fail(op, f"axis must be an int, got {axis!r}")
    try:
        return _core.normalize_axes(axis, t.ndim, scalar_as_1d=True)[0]
    except IndexOutOfRangeError:
        pass  # worded below, naming the op and the shape, outside the except
    fail(op, f"axis {axis} is out of range for shape {shape_of(t)}")


def compute(t):
    """float16/bfloat16 are computed in float32 (fp32 accumulation); others as they are."""
    return t if t is None or str(t.dtype) not in _HALF else t.to(_dt.float32)


def result(y, dtype):
    """``y`` in the op's output dtype (the input's dtype)."""
    return y if y.dtype == dtype else y.to(dtype)
