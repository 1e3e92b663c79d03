"""Test inputs shared by the SDK's own tests and the conformance suite:
edge values per dtype, seeded random arrays, per-case seeds, and device
tensors laid out as dense, transposed or step-sliced views.

Only :func:`place` touches devicekit (imported lazily), so the numpy helpers
stay usable where the SDK does not import.
"""

import zlib

import ml_dtypes
import numpy as np

import devicekit as dk

from .oracle import np_dtype

__all__ = ["edges", "rand", "seed_of", "place"]


def seed_of(*parts):
    """A stable seed from a case's name parts (crc32: same on every platform
    and Python, unlike hash())."""
    return zlib.crc32("-".join(map(str, parts)).encode()) % 10_000


def edges(dtype):
    """Edge values: NaN, +-Inf, +-0, subnormals, tiny, +-max, moderate values;
    integers: min, max and their neighbours."""
    d = np_dtype(dtype)
    if d == np.bool_:
        return np.array([False, True])
    if d.kind in "iu":
        i = np.iinfo(d)
        return np.array(sorted({int(i.min), int(i.min) + 1, 0, 1, 2, int(i.max) - 1, int(i.max)}
                               | ({-1, -7} if d.kind == "i" else set())), d)
    f = ml_dtypes.finfo(d)
    v = [np.nan, np.inf, -np.inf, 0.0, -0.0, float(f.smallest_subnormal),
         -float(f.smallest_subnormal), float(f.tiny), float(f.max), -float(f.max),
         1.0, -1.0, 0.5, -2.5, 3.0, 100.0, -1000.0]
    return np.array(v).astype(d)


def rand(dtype, shape, rng, kind="normal"):
    """Seeded values of ``dtype``: "normal", "positive" (> 0), "small"
    (integral values in [-3, 3], so ties are common) or "wide" (3x normal)."""
    d = np_dtype(dtype)
    if d == np.bool_:
        return rng.random(shape) < 0.5
    if d.kind in "iu":
        i = np.iinfo(d)
        lo, hi = (int(i.min), int(i.max)) if kind != "small" else (max(int(i.min), -3), 3)
        return rng.integers(lo, hi, size=shape, endpoint=True).astype(d)
    x = rng.standard_normal(shape)
    return {"normal": x, "positive": np.abs(x) * 4 + 1e-3, "small": np.round(x),
            "wide": x * 3}[kind].astype(d)


def place(arr, layout="dense", device="cpu:0"):
    """A device tensor equal to ``arr``: dense, a transpose ("T", 2-d) or a
    step slice ("step", 2-d) of a larger tensor."""
    if layout == "T":
        return dk.tensor(np.ascontiguousarray(arr.T), device=device).T
    if layout == "step":
        big = np.zeros((arr.shape[0] * 2 + 1, arr.shape[1] * 3), arr.dtype)
        big[1::2, ::3] = arr
        return dk.tensor(big, device=device)[1::2, ::3]
    return dk.tensor(arr, device=device)
