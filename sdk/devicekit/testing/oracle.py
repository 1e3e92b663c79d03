"""An independent numpy implementation of every DeviceKit base op, the
tolerance table, and :func:`assert_close`.

Each function takes numpy arrays in the op's dtype (bfloat16 as
``ml_dtypes.bfloat16``) and returns what the base op (docs/base_ops.md) must
produce, in its output dtype. It never calls devicekit: it is what a backend
is checked *against*.

How results are formed:

- Floating ops compute in float64 from the (exact) input values and round the
  float64 result once to the output dtype, to nearest even (:func:`round_to`).
  float16/bfloat16 reductions, cumsum and matmul therefore model "accumulate
  in float32" as "accumulate exactly", which is what the tolerance measures.
- Integer ops compute in int64 and wrap to the output dtype like C two's
  complement (sums, products and matmul are exact mod 2**bits, so int64
  wrap-around then truncation equals wrapping at the narrow width).
- Reductions keep the reduced dimensions with size 1 (``keepdims=True``), as
  the base ops do; the SDK's ``keepdims=False`` is a reshape on top.
"""

import math

import numpy as np

from . import bounds as _bounds
from . import philox
from ._dtypes import FLOATS, _name, np_dtype, round_to  # noqa: F401  (public here)

__all__ = [
    "TOLERANCES", "TRANSCENDENTAL", "ACCUMULATING", "EXACT", "tolerance", "assert_close",
    "round_to", "np_dtype", "unary", "binary", "compare", "logical", "where", "reduce_sum",
    "reduce_max", "reduce_min", "argmax", "cumsum", "iota", "gather", "scatter_add", "matmul",
    "cast", "fill", "random_bits", "random_uniform",
]

# --------------------------------------------------------------------------
# Tolerances
# --------------------------------------------------------------------------

#: (rtol, atol) per output dtype. float32/float16/bfloat16 are the defaults of
#: torch.testing.assert_close: about 11, 1 and 2 ulp (eps = 2**-23,
#: 2**-10, 2**-7). float64 is ours: 1e-12 is ~4500 ulp, far above libm-vs-numpy
#: differences (1-2 ulp), but it still fails a float64 kernel that computes in
#: float32 (error ~6e-8), which the customary 1e-7 would let through.
#: Integers and bool are always compared exactly.
TOLERANCES = {
    "float32": (1.3e-6, 1e-5),
    "float16": (1e-3, 1e-5),
    "bfloat16": (1.6e-2, 1e-5),
    "float64": (1e-12, 1e-12),
}

#: Transcendental overrides. The oracle is correctly rounded (float64 math on
#: exact inputs, one rounding), while real kernels use polynomial
#: approximations whose documented max error is 1-4 ulp (CUDA's expf/sinf/
#: tanhf/erff 2 ulp, powf 4 ulp, rsqrtf 2 ulp), or build pow as
#: exp2(b * log2(a)), whose float32 error grows with |b log2 a|. float32:
#: 4e-6 (~34 ulp: 4 ulp of approximation with headroom for pow with results up
#: to ~2**30). float16: 2e-3 (2 ulp: one for the float32 computation, one for
#: the rounding). bfloat16 and float64 keep the default (already 2 ulp for
#: bfloat16; float64 kernels call libm).
TRANSCENDENTAL = {"exp", "log", "sin", "cos", "tanh", "erf", "pow", "rsqrt"}
_TRANSCENDENTAL_TOL = {"float32": (4e-6, 1e-5), "float16": (2e-3, 1e-5)}

#: Ops whose result is a sum of n terms. Their tolerance grows with n:
#:     |actual - expected| <= atol*sqrt(n) + rtol*(sqrt(n)*|expected| + scale)
#: where scale (optional) is the sum of |terms| behind each element (e.g.
#: reduce_sum(|x|), |a| @ |b|). sqrt(n) is the usual growth of rounding errors
#: of random sign over n additions (pairwise or blocked summation does better,
#: naive sequential summation about this); the scale term bounds the error of a
#: sum that cancels (forward error of summation is proportional to sum|x_i|,
#: not to |sum x_i|). Dropping or doubling one term of typical size is still
#: caught: for 33k terms uniform in [-1, 1], rtol*sum|x| ~ 0.02 in float32.
#: n is the reduced length, the scanned length, K, or the largest number of
#: contributions to one element (scatter_add).
ACCUMULATING = {"reduce_sum", "cumsum", "matmul", "scatter_add"}

#: Ops that only select, move or sign-flip values (no rounding): compared
#: exactly, subnormals included.
EXACT = {"neg", "abs", "floor", "sign", "maximum", "minimum", "reduce_max", "reduce_min",
         "argmax", "where", "gather", "copy", "fill", "random_bits", "random_uniform"}

#: Ops whose spec fixes the sign of a zero result (abs(-0.0) = +0.0,
#: sqrt(-0.0) = -0.0, -(+0.0) = -0.0, sign(-0.0) = +0.0, maximum/minimum order
#: -0.0 < +0.0) or that only move values (copy, where, gather): signs of zeros
#: are compared for them.
SIGNED_ZEROS = {"neg", "abs", "sqrt", "sign", "maximum", "minimum", "copy", "where", "gather",
                "reduce_max", "reduce_min", "fill"}


def tolerance(dtype, op=None, n=None):
    """(rtol, atol) for ``op`` on ``dtype`` before the ``scale`` term; n scales
    the accumulating ops. Integers and bool, and the EXACT ops: (0, 0)."""
    name = _name(dtype)
    if name not in TOLERANCES or op in EXACT:
        return 0.0, 0.0
    rtol, atol = TOLERANCES[name]
    if op in TRANSCENDENTAL:
        rtol, atol = _TRANSCENDENTAL_TOL.get(name, (rtol, atol))
    if op in ACCUMULATING and n:
        f = math.sqrt(max(int(n), 1))
        rtol, atol = rtol * f, atol * f
    return rtol, atol


def _fmt(v):
    return np.array2string(np.asarray(v), threshold=200, edgeitems=4, max_line_width=110)


def assert_close(actual, expected, dtype, op=None, n=None, case="", scale=None,
                 signed_zeros=None, tol=None):
    """Asserts ``actual`` (a numpy array from the device) matches the oracle's
    ``expected`` for an op whose output dtype is ``dtype``.

    Same dtype and shape; NaN at exactly the same places; infinities equal
    including sign; zero signs equal where ``signed_zeros`` (default: the op
    is in SIGNED_ZEROS); bool outputs stored as bytes 0/1; everything else
    within the base op's spec bound (:mod:`devicekit.testing.bounds`: exact,
    ulps, or the accumulated bound with ``n`` terms summing to ``scale``), or,
    for ops without one, :func:`tolerance`. On failure the message has the
    case, both arrays, the max abs and rel error and the worst index.
    ``tol``: an explicit (rtol, atol) replacing both (for checks of
    composites, whose caller documents its own override).
    """
    want = np_dtype(dtype)
    actual, expected = np.asarray(actual), np.asarray(expected)
    head = f"{op or 'op'} [{case}] dtype={want}"
    if actual.dtype != want or expected.dtype != want:
        raise AssertionError(f"{head}: dtype mismatch: actual {actual.dtype}, "
                             f"expected {expected.dtype}, want {want}")
    if actual.shape != expected.shape:
        raise AssertionError(f"{head}: shape mismatch: actual {actual.shape}, "
                             f"expected {expected.shape}")
    rtol, atol = tolerance(want, op, n) if tol is None else tol
    # The accumulated bound needs sum|terms| (scale); callers without it (checks
    # of composites that borrow an op's name) keep the n-scaled rtol/atol.
    accumulated = (_bounds.bound_of(op) or {}).get("kind") == "accumulated"
    spec_bound = None if tol is not None or op is None or (accumulated and scale is None) else \
        _bounds.bound(op, _name(want), expected, n=n, scale=scale)
    if want == np.bool_ and not _bounds.bool_bytes_ok(actual):
        raise AssertionError(f"{head}: bool output holds bytes other than 0/1: "
                             f"{sorted(set(np.ascontiguousarray(actual).view(np.uint8).ravel().tolist()))[:8]}")
    if want.kind in "biu":
        a, e = actual.astype(np.int64), expected.astype(np.int64)
        bad = a != e
        err = np.abs(a.astype(np.float64) - e.astype(np.float64))
        rel = err / np.maximum(np.abs(e.astype(np.float64)), 1)
        ratio = err
    else:
        a, e = actual.astype(np.float64), expected.astype(np.float64)
        with np.errstate(all="ignore"):
            err = np.abs(a - e)
            rel = np.where(err == 0, 0.0, err / np.abs(e))
            mag = np.abs(e)
            if op in ACCUMULATING and n:
                mag = mag + (0 if scale is None else np.abs(scale) / math.sqrt(max(n, 1)))
            bound = atol + rtol * mag if spec_bound is None else spec_bound
            bad = ~(err <= bound)  # NaN/Inf positions are judged below
            nan_a, nan_e = np.isnan(a), np.isnan(e)
            special = nan_a | nan_e | np.isinf(a) | np.isinf(e)
            bad = np.where(special, (nan_a != nan_e) | (~nan_e & (a != e)), bad)
            if signed_zeros if signed_zeros is not None else op in SIGNED_ZEROS:
                bad |= (e == 0) & (a == 0) & (np.signbit(a) != np.signbit(e))
            ratio = np.where(special | ~np.isfinite(bound), np.inf,
                             err / np.where(bound > 0, bound, np.finfo(np.float64).tiny))
            err = np.where(special, np.nan, err)
            rel = np.where(special, np.nan, rel)
    if not bad.any():
        return
    worst = np.unravel_index(np.argmax(np.where(bad, ratio, -1.0)), bad.shape) if bad.ndim else ()
    finite_err = err[~np.isnan(err)] if err.size else err
    finite_rel = rel[~np.isnan(rel)] if rel.size else rel
    rule = (f"bound: {_bounds.describe(op)}" if spec_bound is not None
            else f"rtol={rtol:.3g}, atol={atol:.3g}")
    raise AssertionError(
        f"{head}: {int(bad.sum())} of {bad.size} elements differ "
        f"({rule}{', n=%d' % n if n else ''})\n"
        f"  worst index {tuple(int(i) for i in worst)}: actual {actual[worst]!r}, "
        f"expected {expected[worst]!r}\n"
        f"  max abs error {np.max(finite_err) if finite_err.size else 0:.6g}, "
        f"max rel error {np.max(finite_rel) if finite_rel.size else 0:.6g} "
        f"(over elements that are finite on both sides)\n"
        f"  first mismatches at: {[tuple(int(i) for i in w) for w in np.argwhere(bad)[:8]]}\n"
        f"  actual:\n{_fmt(actual)}\n  expected:\n{_fmt(expected)}")


# --------------------------------------------------------------------------
# Rounding and casts
# --------------------------------------------------------------------------

def _wide(x):
    """Exact wide copy: float64 for floating dtypes, int64 otherwise."""
    x = np.asarray(x)
    return x.astype(np.float64 if _name(x.dtype) in FLOATS else np.int64)


def cast(x, dtype):
    return round_to(_wide(x), dtype)


def fill(shape, value, dtype):
    return round_to(np.full(shape, value, dtype=np.float64 if isinstance(value, float)
                            else np.int64), dtype)


# --------------------------------------------------------------------------
# Elementwise
# --------------------------------------------------------------------------

_erf = np.frompyfunc(math.erf, 1, 1)
_FLOAT_UNARY = {
    "neg": np.negative, "abs": np.abs, "exp": np.exp, "log": np.log, "sqrt": np.sqrt,
    "rsqrt": lambda v: 1.0 / np.sqrt(v), "reciprocal": lambda v: 1.0 / v, "sin": np.sin,
    "cos": np.cos, "tanh": np.tanh, "erf": lambda v: np.asarray(_erf(v), dtype=np.float64),
    "floor": np.floor, "sign": lambda v: np.where(np.isnan(v), v, np.sign(v)),
}
_INT_UNARY = {"neg": np.negative, "abs": np.abs, "floor": lambda v: v, "sign": np.sign}


def unary(op, x):
    """neg, abs, exp, log, sqrt, rsqrt, reciprocal, sin, cos, tanh, erf,
    floor, sign on ``x``; output dtype = x's dtype."""
    x = np.asarray(x)
    if _name(x.dtype) not in FLOATS and op not in _INT_UNARY:
        raise TypeError(f"{op} is floating-only in the base op set, got {x.dtype}")
    with np.errstate(all="ignore"):
        fn = _FLOAT_UNARY[op] if _name(x.dtype) in FLOATS else _INT_UNARY[op]
        return round_to(fn(_wide(x)), x.dtype)


_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide,
           "pow": np.power, "maximum": np.maximum, "minimum": np.minimum}


def binary(op, a, b):
    """add, sub, mul, div, pow, maximum, minimum with numpy broadcasting; a
    and b share a dtype, which is the output dtype. pow is C pow (pow(x, 0) =
    1 for NaN x, pow(1, NaN) = 1), maximum/minimum propagate NaN; integers
    wrap; bool add is or and bool mul is and (x != 0 of the int sum/product)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype:
        raise TypeError(f"{op}: base ops take one dtype, got {a.dtype} and {b.dtype}")
    if op in ("div", "pow") and _name(a.dtype) not in FLOATS:
        raise TypeError(f"{op} is floating-only in the base op set, got {a.dtype}")
    with np.errstate(all="ignore"):
        wa, wb = _wide(a), _wide(b)
        out = _BINARY[op](wa, wb)
        if op in ("maximum", "minimum") and out.dtype.kind == "f":
            # IEEE 754-2019 maximum/minimum order -0.0 < +0.0; numpy returns
            # whichever zero came first.
            both = (wa == 0) & (wb == 0)
            neg = np.signbit(wa) & np.signbit(wb) if op == "maximum" else \
                np.signbit(wa) | np.signbit(wb)
            out = np.where(both, np.where(neg, -0.0, 0.0), out)
        return round_to(out, a.dtype)


_COMPARE = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
            "gt": np.greater, "ge": np.greater_equal}


def compare(op, a, b):
    """eq, ne, lt, le (and gt, ge) -> bool, IEEE: NaN compares unequal to
    everything, -0.0 == +0.0. Exact in float64/int64 for every input dtype."""
    a, b = np.asarray(a), np.asarray(b)
    with np.errstate(all="ignore"):
        return _COMPARE[op](_wide(a), _wide(b))


def logical(op, a, b=None):
    """logical_and/or/xor(a, b), logical_not(a): inputs are x != 0, out bool."""
    a = np.asarray(a) != 0
    if op == "logical_not":
        return ~a
    b = np.asarray(b) != 0
    return {"logical_and": a & b, "logical_or": a | b, "logical_xor": a ^ b}[op]


def where(cond, a, b):
    a, b = np.asarray(a), np.asarray(b)
    return np.where(np.asarray(cond) != 0, a, b).astype(a.dtype)


# --------------------------------------------------------------------------
# Reductions and scans
# --------------------------------------------------------------------------

def _axes(x, axes):
    nd = np.ndim(x)
    axes = tuple(range(nd)) if axes is None else (axes,) if np.isscalar(axes) else tuple(axes)
    return tuple(sorted(a % nd for a in axes)) if nd else ()


def reduce_sum(x, axes=None, keepdims=True):
    """Sum over ``axes`` (None: all); empty sums are 0; integers wrap."""
    x = np.asarray(x)
    if x.dtype == np.bool_:
        raise TypeError("reduce_sum of bool is not a base op (the SDK sums bool as int64)")
    return round_to(np.sum(_wide(x), axis=_axes(x, axes), keepdims=keepdims), x.dtype)


def _select(fn, x, axes, keepdims):
    x = np.asarray(x)
    ax = _axes(x, axes)
    if any(x.shape[a] == 0 for a in ax) or (x.size == 0 and not ax):
        raise ValueError("an empty max/min reduction has no value (the SDK rejects it)")
    with np.errstate(all="ignore"):
        return round_to(fn(_wide(x), axis=ax, keepdims=keepdims), x.dtype)  # NaN propagates


def reduce_max(x, axes=None, keepdims=True):
    return _select(np.max, x, axes, keepdims)


def reduce_min(x, axes=None, keepdims=True):
    return _select(np.min, x, axes, keepdims)


def argmax(x, axis=None, keepdims=True):
    """int64 index of the maximum along ``axis``: the first on ties, and the
    first NaN if there is one. ``axis=None``: index into the flattened x."""
    x = _wide(x)
    if axis is None:
        flat = argmax(x.reshape(-1), 0, keepdims=False)
        return flat.reshape((1,) * x.ndim) if keepdims else flat
    if x.ndim == 0:
        return np.array(0, dtype=np.int64)
    axis %= x.ndim
    if x.shape[axis] == 0:
        raise ValueError("argmax over an empty dimension")
    # Written out rather than np.argmax, whose NaN and tie rules are what the
    # spec says only by documentation: the first NaN if the row has one, else
    # the first index holding the maximum (-0.0 and +0.0 tie).
    first = lambda mask: np.argmax(mask, axis=axis)  # noqa: E731  (first True)
    if x.dtype.kind == "f":
        nan = np.isnan(x)
        best = np.max(np.where(nan, -np.inf, x), axis=axis, keepdims=True)
        out = np.where(nan.any(axis=axis), first(nan), first(~nan & (x == best)))
    else:
        out = first(x == np.max(x, axis=axis, keepdims=True))
    out = np.asarray(out, dtype=np.int64)
    return np.expand_dims(out, axis) if keepdims else out


def cumsum(x, axis):
    x = np.asarray(x)
    return round_to(np.cumsum(_wide(x), axis=axis), x.dtype)


def iota(shape, axis, start, step, dtype):
    """out[i0..ik] = start + i_axis * step, by the rules of cast."""
    shape = tuple(shape)
    exact_int = isinstance(start, (int, np.integer)) and isinstance(step, (int, np.integer))
    i = np.arange(shape[axis], dtype=np.int64 if exact_int else np.float64)
    v = np.int64(start) + i * np.int64(step) if exact_int else float(start) + i * float(step)
    v = v.reshape([-1 if d == axis else 1 for d in range(len(shape))])
    return round_to(np.broadcast_to(v, shape), dtype)


# --------------------------------------------------------------------------
# Indexing, matmul, random
# --------------------------------------------------------------------------

def _positions(axis, index, limit):
    index = np.asarray(index)
    if index.dtype != np.int64:
        raise TypeError(f"index must be int64, got {index.dtype}")
    if index.size and (index.min() < 0 or index.max() >= limit):
        raise IndexError(f"index out of range [0, {limit}) along axis {axis}")
    grid = list(np.indices(index.shape, sparse=True))
    grid[axis] = index
    return tuple(grid)


def gather(x, axis, index):
    """torch.gather: out[i][j][k] = x[index[i][j][k]][j][k] (axis 0)."""
    x = np.asarray(x)
    axis %= x.ndim
    return x[_positions(axis, index, x.shape[axis])].astype(x.dtype)


def scatter_add(x, axis, index, src):
    """torch.scatter_add: out = x; out[index[i][j][k]][j][k] += src[i][j][k]."""
    x, src, index = np.asarray(x), np.asarray(src), np.asarray(index)
    axis %= x.ndim
    out = _wide(x).copy()
    used = tuple(slice(0, s) for s in index.shape)
    np.add.at(out, _positions(axis, index, x.shape[axis]), _wide(src)[used])
    return round_to(out, x.dtype)


def scatter_count(x_shape, axis, index):
    """Largest number of terms (x included) summed into one element of
    scatter_add's output: the ``n`` of its tolerance."""
    count = np.ones(x_shape, dtype=np.int64)
    np.add.at(count, _positions(axis % len(x_shape), index, x_shape[axis]), 1)
    return int(count.max()) if count.size else 1


def matmul(a, b):
    """numpy matmul semantics (1-D operands, broadcast batch dims); floats in
    float64 then one rounding; integers wrap."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype:
        raise TypeError(f"matmul: base ops take one dtype, got {a.dtype} and {b.dtype}")
    return round_to(np.matmul(_wide(a), _wide(b)), a.dtype)


def random_bits(shape, seed, offset=0):
    return philox.random_bits(shape, seed, offset)


def random_uniform(shape, seed, offset=0, dtype=np.float32):
    return philox.random_uniform(shape, seed, offset, np_dtype(dtype))
