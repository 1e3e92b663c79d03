"""Operators. ``add`` is the C++ binding itself: no Python frame per call.

Only the base operators of device API 1.0 exist so far (copy, fill, cast,
add); each raises NotImplementedByPlugin when a device lacks the kernel.
"""

from . import _core
from . import dtypes as _dt
from .tensor import full

add = _core.add


def cast(x, dtype):
    """``x`` converted to ``dtype`` (round to nearest even between floats)."""
    return x._cast(_dt.as_dtype(dtype).id)


def contiguous(x):
    """``x`` itself when dense row-major, else a dense copy (the ``copy`` op)."""
    return x.contiguous()


__all__ = ["add", "cast", "contiguous", "full"]
