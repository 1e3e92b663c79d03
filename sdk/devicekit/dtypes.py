"""DeviceKit dtypes and their numpy counterparts.

A :class:`dtype` compares equal to its name and to the matching numpy dtype,
so ``t.dtype == "float32"`` and ``t.dtype == np.float32`` both work.
"""

import numpy as np

from . import _core
from .errors import DTypeError

try:  # numpy has no bfloat16; ml_dtypes is the de-facto standard that adds it
    import ml_dtypes
    _BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - ml_dtypes is a declared dependency
    _BFLOAT16 = None

__all__ = ["dtype", "float32", "float16", "bfloat16", "float64", "int8", "int32",
           "int64", "uint8", "bool_", "as_dtype"]


class dtype:
    """A DeviceKit element type (the DK_DType of the device API)."""

    __slots__ = ("name", "itemsize", "id", "numpy", "_is_float")

    def __init__(self, name, itemsize, id_, np_dtype, is_float):
        self.name, self.itemsize, self.id, self.numpy = name, itemsize, id_, np_dtype
        self._is_float = is_float

    @property
    def is_floating_point(self):
        """Whether this is a floating-point dtype, as the core's dtype table says."""
        return self._is_float

    def __repr__(self):
        return f"devicekit.{self.name if self.name != 'bool' else 'bool_'}"

    def __str__(self):
        return self.name

    def __hash__(self):
        return hash(self.name)

    def __eq__(self, other):
        if isinstance(other, dtype):
            return self.id == other.id
        try:
            return as_dtype(other).id == self.id
        except DTypeError:
            return NotImplemented


_NUMPY = {
    "float32": np.dtype(np.float32), "float16": np.dtype(np.float16),
    "bfloat16": _BFLOAT16, "float64": np.dtype(np.float64), "int8": np.dtype(np.int8),
    "int32": np.dtype(np.int32), "int64": np.dtype(np.int64), "uint8": np.dtype(np.uint8),
    "bool": np.dtype(np.bool_),
}

# Built from the core's table so the ids and kinds always match the C header.
_BY_ID = [dtype(name, size, i, _NUMPY[name], _core.DTYPE_IS_FLOAT[i])
          for i, (name, size) in enumerate(_core.DTYPES)]
_BY_NAME = {d.name: d for d in _BY_ID}
_BY_NAME["bool_"] = _BY_NAME["bool"]

float32, float16, bfloat16, float64 = (_BY_NAME[n] for n in ("float32", "float16", "bfloat16", "float64"))
int8, int32, int64, uint8, bool_ = (_BY_NAME[n] for n in ("int8", "int32", "int64", "uint8", "bool"))


def as_dtype(x):
    """Accept a devicekit dtype, its name, a numpy dtype or a numpy scalar type."""
    if isinstance(x, dtype):
        return x
    if isinstance(x, str):
        if x in _BY_NAME:
            return _BY_NAME[x]
    else:
        try:
            npd = np.dtype(x)
        except TypeError:
            npd = None
        if npd is not None:
            for d in _BY_ID:
                if d.numpy == npd:
                    return d
    supported = ", ".join(d.name for d in _BY_ID)
    raise DTypeError(f"unsupported dtype {x!r}; DeviceKit supports {supported}")


def from_id(i):
    return _BY_ID[i]
