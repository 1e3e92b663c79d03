"""Section "ops", part 1: elementwise base ops, copy, fill and cast against the
numpy oracle (devicekit.testing.oracle) with its tolerance table.

Shape classes: 0-d, empty, size 1, odd sizes, large (level full), broadcast,
non-contiguous views (transpose "T", step slice "step"), and "edge": NaN,
+-Inf, +-0, subnormals, +-max, integer limits (every pair of them for binary ops).
"""

import functools

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
          "T": (7, 13), "step": (7, 13), "edge": None}


def check_unary(ctx, op, dtype, shape):
    if shape == "edge":  # (rsqrt(-0.0) is left open: the spec fixes only rsqrt(+0))
        a = edges(dtype)
        a = a[~((a == 0) & np.signbit(a.astype(np.float64)))] if op == "rsqrt" else a
    else:
        a = sample(ctx, dtype, SHAPES[shape], DOMAIN.get(op, "normal"))
    t = tensor(ctx, a, shape if shape in ("T", "step") else "dense")
    got = run(ctx, op, lambda: getattr(ops, op)(t))
    O.assert_close(got, O.unary(op, a), dtype, op=op, case=f"{shape} seed={ctx.seed}")


BINARY = ["add", "sub", "mul", "div", "pow", "maximum", "minimum"]
BIN_SHAPES = {"0d": ((), ()), "empty": ((0, 5), (0, 5)), "odd": ((7, 13), (7, 13)),
              "large": ((257, 129), (257, 129)), "bcast": ((7, 1), (1, 13)),
              "bcast_rank": ((257, 129), (129,)), "scalar": ((), (7, 13)),
              "T": ((7, 13), (7, 13)), "step": ((7, 13), (7, 13)), "edge": None}


def binary_inputs(ctx, op, dtype, shape):
    """((device a, device b), (host a, host b)) for a binary op's shape class."""
    if shape == "edge":  # every pair of edge values, via broadcasting
        e = edges(dtype)
        return (tensor(ctx, e[:, None]), tensor(ctx, e[None, :])), (e[:, None], e[None, :])
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
COPY_SHAPES = {"T": "T", "step": "step", "bcast": None}


def check_copy(ctx, op, dtype, shape):
    if shape == "bcast":
        a = np.broadcast_to(sample(ctx, dtype, (1, 13)), (7, 13))
        view = tensor(ctx, np.ascontiguousarray(a[:1])).expand(7, 13)
    else:
        a = np.concatenate([edges(dtype), sample(ctx, dtype, (7 * 13 - len(edges(dtype)),))])
        a = a[:7 * 13].reshape(7, 13)
        view = tensor(ctx, a, COPY_SHAPES[shape])
    got = run(ctx, "copy", lambda: view.contiguous(), check=not view.is_contiguous())
    O.assert_close(got, np.ascontiguousarray(a), dtype, op="copy", case=f"{shape} seed={ctx.seed}",
                   signed_zeros=True)


FILL = {"0d": (), "empty": (0, 5), "one": (1,), "odd": (7, 13), "large": (257, 129)}


def check_fill(ctx, op, dtype, shape):
    value = True if dtype == "bool" else (-2.5 if dtype in FLOATS else 7)
    got = run(ctx, "fill", lambda: dk.full(FILL[shape], value, dtype=dtype, device=ctx.device))
    O.assert_close(got, O.fill(FILL[shape], value, dtype), dtype, op="fill", case=shape)


def cast_input(ctx, src, dst):
    """Values whose cast is specified: floats -> ints only in range (NaN and
    overflow are unspecified there), everything else with its edge values."""
    if src in FLOATS and dst not in FLOATS and dst != "bool":
        lim = 100 if dst in ("int8", "uint8") else (1e4 if src == "float16" else 1e6)
        lo = 0 if dst == "uint8" else -lim
        x = np.clip(sample(ctx, "float64", (7, 13), "wide") * lim / 4, lo, lim)
        return x.astype(O.np_dtype(src))
    return np.concatenate([edges(src).reshape(-1), sample(ctx, src, (64,))])


def check_cast(ctx, op, src, shape):
    dst = shape[len("to_"):]
    x = cast_input(ctx, src, dst)
    t = tensor(ctx, x)
    got = run(ctx, "cast", lambda: t.to(getattr(dk, dst if dst != "bool" else "bool_")))
    O.assert_close(got, O.cast(x, dst), dst, op="cast", case=f"{src}->{dst} seed={ctx.seed}",
                   signed_zeros=dst in FLOATS and src in FLOATS)


def _make(check):
    return lambda op, dtype, shape: functools.partial(check, op=op, dtype=dtype, shape=shape)


def _cast_make(op, dtype, shape):
    return functools.partial(check_cast, op=op, src=dtype, shape=shape)


def cases(target):
    out = []
    for op in UNARY:
        out += op_cases(target, "ops", op, list(SHAPES), _make(check_unary), _level)
    for op in BINARY:
        out += op_cases(target, "ops", op, list(BIN_SHAPES), _make(check_binary), _level)
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
