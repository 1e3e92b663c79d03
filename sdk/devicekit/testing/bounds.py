"""Per-op error bounds of the base ops, read from the spec (``error_bound`` of
each op in device_api/spec/base_ops.json, shipped as devicekit/data/base_ops.json;
docs/base_ops.md prints them next to each op's semantics).

Kinds (the spec's ``about_error_bound`` is the normative text):

- ``exact``: bit for bit: every finite value equal, NaN at the same places,
  infinities and (where the semantics fix them) zero signs equal.
- ``ulp``: ``|actual - expected| <= ulps * ulp(expected)`` in the output dtype,
  the oracle being the exact result rounded once (optionally with an absolute
  floor of ``abs_floor_ulps_of_one`` ulps of 1.0, near the zeros of sin/cos).
- ``accumulated`` (sums of n terms): ``ulps * ulp(expected) + lambda * sqrt(n)
  * u * sum|terms|`` with u the unit roundoff of the accumulation dtype (float32
  for float32/float16/bfloat16, float64 for float64): Higham and Mary's
  probabilistic gamma_n bound ("A new approach to probabilistic rounding error
  analysis", SISC 2019), which grows with the accumulation length and, unlike a
  flat percentage, does not let a float16 kernel accumulate in float16.

Like the oracle, this module never imports the rest of devicekit: the spec is
read as a file next to this package.
"""

import functools
import json
import math
import os

import ml_dtypes
import numpy as np

_SPEC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data",
                     "base_ops.json")

#: (significand bits p, frexp exponent of the smallest normal) per float dtype:
#: ulp(x) = 2**(max(frexp_exp(x), emin) - p).
_FORMAT = {"float32": (24, -125), "float16": (11, -13), "bfloat16": (8, -125),
           "float64": (53, -1021)}
#: unit roundoff of the accumulation each output dtype prescribes.
ACCUMULATION_U = {"float32": 2.0 ** -24, "float16": 2.0 ** -24, "bfloat16": 2.0 ** -24,
                  "float64": 2.0 ** -53}


@functools.lru_cache(maxsize=None)
def _spec():
    with open(_SPEC) as f:
        return json.load(f)


@functools.lru_cache(maxsize=None)
def bound_of(op):
    """The spec's ``error_bound`` dict of base op ``op``, or None (not a base op)."""
    for o in _spec()["ops"]:
        if o["name"] == op:
            return o.get("error_bound")
    return None


def ulp(x, dtype):
    """Spacing of ``dtype`` at |x| (x float64 array): the unit in the last
    place of the output dtype at the expected value; the smallest subnormal at 0."""
    p, emin = _FORMAT[dtype]
    _, e = np.frexp(np.abs(np.asarray(x, np.float64)))
    return np.ldexp(1.0, np.maximum(e, emin) - p)


def bound(op, dtype, expected, n=None, scale=None):
    """The allowed |actual - expected| per element (float64 array) for base op
    ``op`` with output ``dtype`` (a float dtype name), or None when ``op`` has
    no spec bound. ``n``/``scale``: accumulation length and sum of |terms| per
    element (accumulated ops; scale defaults to |expected|)."""
    b = bound_of(op)
    if b is None or dtype not in _FORMAT:
        return None
    e = np.asarray(expected, np.float64)
    if b["kind"] == "exact":
        return np.zeros(e.shape)
    with np.errstate(all="ignore"):
        out = b["ulps"][dtype] * ulp(e, dtype)
        if b.get("abs_floor_ulps_of_one"):
            out = np.maximum(out, b["abs_floor_ulps_of_one"] * float(ulp(1.0, dtype)))
        if b["kind"] == "accumulated":
            s = np.abs(e) if scale is None else np.abs(np.asarray(scale, np.float64))
            out = out + b["lambda"] * math.sqrt(max(int(n or 1), 1)) * ACCUMULATION_U[dtype] * s
    return out


def describe(op):
    """One line for a failure message and the docs: the bound of ``op``."""
    b = bound_of(op)
    if b is None:
        return "no spec bound"
    if b["kind"] == "exact":
        return "exact (bit for bit)"
    ulps = ", ".join(f"{d} {k}" for d, k in b["ulps"].items())
    if b["kind"] == "ulp":
        floor = (f"; or {b['abs_floor_ulps_of_one']} ulp of 1.0" if b.get("abs_floor_ulps_of_one")
                 else "")
        return f"ulps from the correctly rounded result: {ulps}{floor}"
    return (f"accumulated: ulps(out) {ulps} + {b['lambda']}*sqrt(n)*u*sum|terms| "
            f"(u = 2^-24, float64 2^-53)")


def bool_bytes_ok(actual):
    """A bool output's bytes are all 0 or 1 (a kernel that stores 0xFF or 2 for
    true passes numpy's truthiness and breaks every consumer that adds bytes)."""
    a = np.ascontiguousarray(actual)
    return bool(a.size == 0 or a.view(np.uint8).max() <= 1)


def bits_equal(actual, expected):
    """Bitwise equality of two float arrays of one dtype (NaN payloads aside)."""
    dt = np.dtype(actual.dtype)
    if dt == np.dtype(ml_dtypes.bfloat16) or dt.itemsize == 2:
        view = np.uint16
    else:
        view = np.uint32 if dt.itemsize == 4 else np.uint64
    return np.ascontiguousarray(actual).view(view) == np.ascontiguousarray(expected).view(view)
