"""Section "ops", part 1: elementwise base ops, copy, fill and cast against the
numpy oracle (devicekit.testing.oracle) with each op's spec error bound
(devicekit.testing.bounds: bit-exact, or ulps from the correctly rounded result).

Shape classes: 0-d, empty, size 1, odd sizes, large (level full), sizes around
the 64K and 1M elements where kernels split work across threads ("64k", "1m":
level full), broadcast in every position of a rank-3 result, non-contiguous
views (transpose "T", step slice "step"), "edge": NaN, +-Inf, +-0, subnormals,
+-max, integer limits (every pair of them for binary ops), "specials": NaN,
+-Inf and -0 at the first, last, middle and vector-boundary positions of a
64K+1 array, and "range": values where cheap approximations lose accuracy
(tiny |x| for erf/tanh/sin, exp near overflow, log near 1, large sin/cos
arguments). Casts get rounding ties, overflow to inf, NaN and subnormal results.
"""

import functools

import ml_dtypes
import numpy as np

from devicekit import ops
from devicekit.conformance.case import Section
from devicekit.conformance.registry import op_cases
from devicekit.testing.inputs import edges, rand

from ._common import FLOATS, O, dk, run, sample, tensor

SECTION = Section("ops", "Base ops against the float64 oracle", order=20)


def _level(shape):
    return "full" if "large" in shape else "core"


UNARY = ["neg", "abs", "exp", "log", "sqrt", "rsqrt", "reciprocal", "sin", "cos", "tanh",
         "erf", "floor", "sign"]
DOMAIN = {"log": "positive", "sqrt": "positive", "rsqrt": "positive", "exp": "wide"}
SHAPES = {"0d": (), "empty": (0, 5), "one": (1,), "odd": (7, 13), "large": (257, 129),
          "large_64k": (65537,), "large_1m": (1048577,), "T": (7, 13), "step": (7, 13),
          "edge": None, "large_specials": None, "range": None}


def specials(ctx, dtype, n=65537, kind="normal"):
    """n values with NaN, +-Inf, -0 (floats) or the integer limits at the first,
    last, middle and 64/128-element boundary positions."""
    a = sample(ctx, dtype, (n,), kind).copy()
    e = edges(dtype)
    pos = [0, n - 1, n // 2, 63, 64, 127, 128, n - 2, n - 65]
    for i, p in enumerate(pos):
        a[p] = e[i % len(e)]
    return a


def value_range(op, dtype):
    """Inputs where a cheap approximation loses relative accuracy."""
    tiny = np.array([1e-8, 3e-6, 1e-4, 2e-3, 0.01, 0.1]).astype(np.float64)
    r = {"erf": np.concatenate([tiny, -tiny, np.linspace(-4, 4, 801)]),
         "tanh": np.concatenate([tiny, -tiny, np.linspace(-12, 12, 801)]),
         "sin": np.concatenate([tiny, -tiny, np.arange(-20, 21) * np.pi / 2,
                                np.linspace(-1e4, 1e4, 401)]),
         "cos": np.concatenate([tiny, np.arange(-20, 21) * np.pi / 2 + 1e-3,
                                np.linspace(-1e4, 1e4, 401)]),
         "exp": np.concatenate([tiny, -tiny, np.linspace(-100, 88, 801),
                                np.linspace(-745, 709, 101)]),
         "log": np.concatenate([1 + tiny, 1 - tiny, np.geomspace(1e-30, 1e30, 401)]),
         "sqrt": np.geomspace(1e-30, 1e30, 401), "rsqrt": np.geomspace(1e-30, 1e30, 401),
         "reciprocal": np.concatenate([np.geomspace(1e-30, 1e30, 401), -np.geomspace(1e-3, 1e3, 51)]),
         "floor": np.concatenate([np.linspace(-3, 3, 97), [-0.5, 0.5, -1e-30, 2**23 + 0.5,
                                                            -2**23 - 0.5, 4e9 + 0.5]])}
    x = O.round_to(r.get(op, np.linspace(-5, 5, 801)), dtype)
    return x[np.isfinite(x.astype(np.float64))]


def check_unary(ctx, op, dtype, shape):
    if shape == "edge":  # (rsqrt(-0.0) is left open: the spec fixes only rsqrt(+0))
        a = edges(dtype)
        a = a[~((a == 0) & np.signbit(a.astype(np.float64)))] if op == "rsqrt" else a
    elif shape == "large_specials":
        a = specials(ctx, dtype, kind=DOMAIN.get(op, "normal"))
        if op == "rsqrt":
            a[(a == 0) & np.signbit(a.astype(np.float64))] = 1
    elif shape == "range":
        if dtype not in FLOATS:
            a = edges(dtype)
        else:
            a = value_range(op, dtype)
    else:
        a = sample(ctx, dtype, SHAPES[shape], DOMAIN.get(op, "normal"))
    t = tensor(ctx, a, shape if shape in ("T", "step") else "dense")
    got = run(ctx, op, lambda: getattr(ops, op)(t))
    O.assert_close(got, O.unary(op, a), dtype, op=op, case=f"{shape} seed={ctx.seed}")


BINARY = ["add", "sub", "mul", "div", "pow", "maximum", "minimum"]
BIN_SHAPES = {"0d": ((), ()), "empty": ((0, 5), (0, 5)), "odd": ((7, 13), (7, 13)),
              "large": ((257, 129), (257, 129)), "bcast": ((7, 1), (1, 13)),
              "bcast_rank": ((257, 129), (129,)), "scalar": ((), (7, 13)),
              "large_64k": ((65537,), (65537,)), "large_1m": ((1048577,), (1048577,)),
              "bcast_lead": ((1, 6, 7), (5, 6, 7)), "bcast_mid": ((5, 6, 7), (5, 1, 7)),
              "bcast_last": ((5, 6, 1), (5, 6, 7)), "bcast_both": ((5, 1, 7), (1, 6, 1)),
              "bcast_scalar_rhs": ((5, 6, 7), ()), "bcast_large": ((33, 1, 1031), (1, 9, 1)),
              "T": ((7, 13), (7, 13)), "step": ((7, 13), (7, 13)), "edge": None,
              "large_specials": None}


def binary_inputs(ctx, op, dtype, shape):
    """((device a, device b), (host a, host b)) for a binary op's shape class."""
    if shape == "edge":  # every pair of edge values, via broadcasting
        e = edges(dtype)
        return (tensor(ctx, e[:, None]), tensor(ctx, e[None, :])), (e[:, None], e[None, :])
    if shape == "large_specials":  # specials against random values and each other
        a = specials(ctx, dtype, kind="positive" if op == "pow" else "normal")
        b = np.roll(specials(ctx, dtype, kind="small" if op == "pow" else "normal"), 1)
        return (tensor(ctx, a), tensor(ctx, b)), (a, b)
    sa, sb = BIN_SHAPES[shape]
    kind_a, kind_b = ("positive", "small") if op == "pow" else ("normal", "normal")
    rng = ctx.rng()
    a, b = rand(dtype, sa, rng, kind_a), rand(dtype, sb, rng, kind_b)
    if op == "pow" and dtype in FLOATS:  # |results| < 2**11: no overflow edge
        a = np.minimum(a.astype(np.float64), 4).astype(a.dtype)
    if shape in ("T", "step"):
        return (tensor(ctx, a, shape), tensor(ctx, b, "step" if shape == "T" else "T")), (a, b)
    return (tensor(ctx, a), tensor(ctx, b)), (a, b)


def check_binary(ctx, op, dtype, shape):
    (ta, tb), (a, b) = binary_inputs(ctx, op, dtype, shape)
    got = run(ctx, op, lambda: getattr(ops, op)(ta, tb))
    O.assert_close(got, O.binary(op, a, b), dtype, op=op, case=f"{shape} seed={ctx.seed}")


COMPARE = ["eq", "ne", "lt", "le"]
CMP_SHAPES = ["0d", "empty", "odd", "bcast", "T", "edge"]


def check_compare(ctx, op, dtype, shape):
    (ta, tb), (a, b) = binary_inputs(ctx, "eq", dtype, shape)
    if shape != "edge":  # plant ties, or eq would almost never be true
        rng = np.random.default_rng(ctx.seed + 1)
        b = np.where(rng.random(np.broadcast_shapes(a.shape, b.shape)) < 0.3, a, b).astype(a.dtype)
        tb = tensor(ctx, b)
    got = run(ctx, op, lambda: getattr(ops, op)(ta, tb))
    O.assert_close(got, O.compare(op, a, b), "bool", op=op, case=f"{shape} seed={ctx.seed}")


LOGICAL = ["logical_and", "logical_or", "logical_xor", "logical_not"]
LOGICAL_SHAPES = ["0d", "empty", "odd", "bcast", "T", "edge"]


def check_logical(ctx, op, dtype, shape):
    (ta, tb), (a, b) = binary_inputs(ctx, op, dtype, shape)
    if op == "logical_not":
        got, want = run(ctx, op, lambda: ops.logical_not(ta)), O.logical(op, a)
    else:
        got, want = run(ctx, op, lambda: getattr(ops, op)(ta, tb)), O.logical(op, a, b)
    O.assert_close(got, want, "bool", op=op, case=f"{shape} seed={ctx.seed}")


def check_where(ctx, op, dtype, shape):
    (ta, tb), (a, b) = binary_inputs(ctx, "add", dtype, shape)
    full = np.broadcast_shapes(np.shape(a), np.shape(b))
    cond = np.random.default_rng(ctx.seed + 2).random(full[:1] + (1,) if shape == "bcast"
                                                      else np.shape(a)) < 0.5
    got = run(ctx, "where", lambda: ops.where(tensor(ctx, cond), ta, tb))
    O.assert_close(got, O.where(cond, a, b), dtype, op="where", case=f"{shape} seed={ctx.seed}")


# copy is the SDK's materialiser: a dense copy of a view (exact, every bit).
COPY_SHAPES = {"T": "T", "step": "step", "bcast": None, "perm3": (2, 0, 1), "perm4": (3, 1, 0, 2),
               "bcast3": None, "large_perm3": (1, 2, 0)}
PERM_SHAPES = {"perm3": (5, 6, 7), "perm4": (3, 4, 5, 6), "large_perm3": (33, 65, 31)}


def check_copy(ctx, op, dtype, shape):
    if shape in PERM_SHAPES:  # a permuted rank-3/4 view: every dim has its own stride
        base = sample(ctx, dtype, PERM_SHAPES[shape])
        view = tensor(ctx, base).permute(*COPY_SHAPES[shape])
        a = np.transpose(base, COPY_SHAPES[shape])
    elif shape == "bcast3":  # stride 0 in the middle dim of a rank-3 view
        b = sample(ctx, dtype, (5, 1, 7))
        view = tensor(ctx, b).expand(5, 6, 7)
        a = np.broadcast_to(b, (5, 6, 7))
    elif shape == "bcast":
        a = np.broadcast_to(sample(ctx, dtype, (1, 13)), (7, 13))
        view = tensor(ctx, np.ascontiguousarray(a[:1])).expand(7, 13)
    else:
        a = np.concatenate([edges(dtype), sample(ctx, dtype, (7 * 13 - len(edges(dtype)),))])
        a = a[:7 * 13].reshape(7, 13)
        view = tensor(ctx, a, COPY_SHAPES[shape])
    if shape in PERM_SHAPES or shape == "bcast3":
        got = run(ctx, "copy", lambda: view.contiguous())
        O.assert_close(got, np.ascontiguousarray(a), dtype, op="copy", signed_zeros=True,
                       case=f"{shape} seed={ctx.seed}")
        return
    got = run(ctx, "copy", lambda: view.contiguous(), check=not view.is_contiguous())
    O.assert_close(got, np.ascontiguousarray(a), dtype, op="copy", case=f"{shape} seed={ctx.seed}",
                   signed_zeros=True)


FILL = {"0d": (), "empty": (0, 5), "one": (1,), "odd": (7, 13), "large": (257, 129),
        "large_64k": (65537,), "inexact": (7, 13), "neg_zero": (3, 5), "tie": (5,),
        "big": (7,)}


def fill_value(dtype, shape):
    """The value of a fill case: one the dtype holds exactly, one that needs
    rounding (0.1: not representable in float32, so a float64 fill that goes
    through float32 is seen), -0.0, a rounding tie of the dtype, a large one."""
    if dtype == "bool":
        return {"inexact": 2, "big": -7}.get(shape, True)  # anything != 0 is true
    if dtype not in FLOATS:
        i = np.iinfo(O.np_dtype(dtype))
        # big: max - 1 (int64: 2**63 - 2, which a fill through float64 turns into max)
        return {"big": int(i.max) - 1, "inexact": int(i.min), "tie": -1 if i.min < 0 else 200,
                "neg_zero": 0}.get(shape, 7)
    p = _P[dtype]
    return {"inexact": 0.1, "neg_zero": -0.0, "tie": 1.0 + 2.0 ** -p,
            "big": float(ml_dtypes.finfo(O.np_dtype(dtype)).max)}.get(shape, -2.5)


def check_fill(ctx, op, dtype, shape):
    value = fill_value(dtype, shape)
    got = run(ctx, "fill", lambda: dk.full(FILL[shape], value, dtype=dtype, device=ctx.device))
    O.assert_close(got, O.fill(FILL[shape], value, dtype), dtype, op="fill", case=shape)


_P = {"float32": 24, "float16": 11, "bfloat16": 8, "float64": 53}


def cast_ties(ctx, src, dst):
    """Values of ``src`` that land exactly halfway between two ``dst`` values
    (round to nearest *even* decides), just around dst's overflow threshold
    and its subnormal range: the inputs where a truncating or round-half-away
    cast differs from the spec's."""
    rng = ctx.rng()
    if dst in _P:
        p = _P[dst]
        base = rng.uniform(1, 2, 64)
        k = np.floor(np.ldexp(base, p - 1))
        mids = np.ldexp(k + 0.5, 1 - p)  # halfway between two dst values in [1, 2)
        exps = rng.integers(-8, 9, 64)
        v = np.concatenate([np.ldexp(mids, exps), -np.ldexp(mids, exps),
                            [np.ldexp(2 * 2**p - 1, -p), 2.0**-25, 3 * 2.0**-26, 2.0**-24 * 1.5,
                             2.0**-133, 2.0**-134 * 3, 2.0**-149, 2.0**-150, 3 * 2.0**-150,
                             65504.0, 65519.0, 65520.0, 65536.0, -65520.0,
                             3.3895313892515355e38, 3.3961775292304e38, 3.4028234663852886e38,
                             2**24 + 1.0, 2**24 + 3.0, 2049.0, 2051.0, 257.0, 259.0, 1e300]])
    else:
        i = np.iinfo(O.np_dtype(dst)) if dst != "bool" else None
        v = np.array([-2.5, -1.5, -0.5, -0.9, 0.5, 1.5, 2.5, 2.9999, 127.9, -128.9, 255.9, 0.0,
                      -0.0, 1e-30, -1e-30, 2.0**31 - 0.5, -2.0**31 + 0.25])
        if i is not None:
            v = v[(v > i.min - 1) & (v < i.max + 1)]
    if src in _P:
        if dst in _P and _P[src] > _P[dst] + 1:  # just off the ties: double rounding shows
            off = np.ldexp(1.0, -min(_P[src] - 2, 40))
            v = np.concatenate([v, v * (1 + off), v * (1 - off)])
        x = O.round_to(v, src)
        x = x[x.astype(np.float64) == v]  # exactly representable in src only
        if dst in ("bfloat16", "float16") and src in ("float32", "float64"):
            x = np.concatenate([x, _signaling_nans(src)])
    else:
        vi = np.trunc(v[np.isfinite(v) & (np.abs(v) < 2**62)]).astype(np.int64)
        info = np.iinfo(O.np_dtype(src)) if src != "bool" else None
        x = vi[(vi >= info.min) & (vi <= info.max)] if info else vi != 0
        x = x.astype(O.np_dtype(src))
    if src in FLOATS and dst not in FLOATS and dst != "bool":  # in range only (rest unspecified)
        i = np.iinfo(O.np_dtype(dst))
        xv = x.astype(np.float64)
        x = x[(xv > i.min - 1) & (xv < i.max + 1)]
    return x


def _signaling_nans(src):
    """NaNs whose payload is only in the low bits (signaling): a narrowing cast
    that truncates them gives Inf; the spec says NaN stays NaN."""
    if src == "float32":
        return np.array([0x7F800001, 0xFF800001, 0x7F800100], np.uint32).view(np.float32)
    return np.array([0x7FF0000000000001, 0x7FF0000000001000], np.uint64).view(np.float64)


def cast_input(ctx, src, dst):
    """Values whose cast is specified: floats -> ints only in range (NaN and
    overflow are unspecified there), everything else with its edge values;
    plus rounding ties, overflow and subnormal results (:func:`cast_ties`)."""
    if src in FLOATS and dst not in FLOATS and dst != "bool":
        lim = 100 if dst in ("int8", "uint8") else (1e4 if src == "float16" else 1e6)
        lo = 0 if dst == "uint8" else -lim
        x = np.clip(sample(ctx, "float64", (7, 13), "wide") * lim / 4, lo, lim)
        return np.concatenate([x.astype(O.np_dtype(src)).reshape(-1), cast_ties(ctx, src, dst)])
    return np.concatenate([edges(src).reshape(-1), sample(ctx, src, (64,)),
                           cast_ties(ctx, src, dst)])


def check_cast(ctx, op, src, shape):
    dst = shape[len("to_"):]
    x = cast_input(ctx, src, dst)
    t = tensor(ctx, x)
    got = run(ctx, "cast", lambda: t.to(getattr(dk, dst if dst != "bool" else "bool_")))
    O.assert_close(got, O.cast(x, dst), dst, op="cast", case=f"{src}->{dst} seed={ctx.seed}",
                   signed_zeros=dst in FLOATS and src in FLOATS)


def _sizes(classes):
    """Shape classes per dtype: the 1M-element class only for float32 (the
    thread split does not depend on the dtype; 64K+1 runs for every dtype)."""
    return lambda dtype: [c for c in classes if c != "large_1m" or dtype == "float32"]


def _make(check):
    return lambda op, dtype, shape: functools.partial(check, op=op, dtype=dtype, shape=shape)


def _cast_make(op, dtype, shape):
    return functools.partial(check_cast, op=op, src=dtype, shape=shape)


def cases(target):
    out = []
    for op in UNARY:
        out += op_cases(target, "ops", op, _sizes(SHAPES), _make(check_unary), _level)
    for op in BINARY:
        out += op_cases(target, "ops", op, _sizes(BIN_SHAPES), _make(check_binary), _level)
    for op in COMPARE:
        out += op_cases(target, "ops", op, CMP_SHAPES, _make(check_compare), _level)
    for op in LOGICAL:
        out += op_cases(target, "ops", op, LOGICAL_SHAPES, _make(check_logical), _level)
    out += op_cases(target, "ops", "where", CMP_SHAPES, _make(check_where), _level)
    out += op_cases(target, "ops", "copy", list(COPY_SHAPES), _make(check_copy), _level)
    out += op_cases(target, "ops", "fill", list(FILL), _make(check_fill), _level)
    every = target.dtypes  # cast: every output dtype the device stores
    out += op_cases(target, "ops", "cast",
                    lambda src: [f"to_{d}" for d in every if d != src], _cast_make)
    return out
