"""dtype names, numpy dtypes and correct rounding from float64 to each dtype:
the leaf both the oracle (``oracle.round_to``, ``oracle.np_dtype``) and the
Philox oracle (``philox.random_uniform``'s bfloat16) stand on."""

import ml_dtypes
import numpy as np

_NP = {"float32": np.dtype(np.float32), "float16": np.dtype(np.float16),
       "bfloat16": np.dtype(ml_dtypes.bfloat16), "float64": np.dtype(np.float64),
       "int8": np.dtype(np.int8), "int32": np.dtype(np.int32), "int64": np.dtype(np.int64),
       "uint8": np.dtype(np.uint8), "bool": np.dtype(np.bool_), "bool_": np.dtype(np.bool_)}
FLOATS = ("float32", "float16", "bfloat16", "float64")


def np_dtype(dtype):
    """numpy dtype of a dtype given by name, numpy dtype or devicekit dtype
    (anything whose str() is the DeviceKit name)."""
    return _NP[str(dtype)] if str(dtype) in _NP else np.dtype(dtype)


def _name(dtype):
    return str(np_dtype(dtype))


def _round_bits(x, p, emin):
    """Rounds float64 ``x`` to p significant bits, nearest even, with gradual
    underflow below 2**(emin-1) (frexp convention). Overflow is left to the
    final astype (the rounded value is then >= 2**emax, which becomes inf)."""
    m, e = np.frexp(x)
    bits = p - np.maximum(emin - e, 0)
    return np.ldexp(np.rint(np.ldexp(m, bits)), e - bits)


def round_to(x, dtype):
    """float64 (or int64) values -> ``dtype`` by the rules of cast: floats round
    to nearest even, ints truncate toward zero and wrap, bool is x != 0.

    bfloat16 is rounded here rather than by ml_dtypes, whose float64 ->
    bfloat16 goes through float32 and double-rounds (1 + 2**-8 + 2**-40 ->
    1.0 instead of 1 + 2**-7). numpy's float64 -> float16 is direct and correct.
    """
    dt = np_dtype(dtype)
    x = np.asarray(x)
    with np.errstate(all="ignore"):
        if dt == np.bool_:
            return x != 0
        if dt.kind in "iu":
            if x.dtype.kind == "f":
                x = np.trunc(x).astype(np.int64)  # NaN/out of range: unspecified
            return x.astype(np.int64).astype(dt)  # two's complement wrap
        if x.dtype.kind in "iub" and dt == np.float32:
            return x.astype(np.float32)  # direct int64 -> float32, one rounding
        x = x.astype(np.float64)
        if _name(dt) == "bfloat16":
            x = _round_bits(x, 8, -125)
        return x.astype(dt)
