"""Section "ops", part 2: reductions, argmax, cumsum, iota, gather,
scatter_add and matmul against the numpy oracle. Accumulating ops use their
spec bound (ulps of the result plus lambda*sqrt(n)*u*sum|terms|), and "exact"
classes whose every partial sum is representable (small integers: any
summation order gives the exact result) are compared bit for bit, which
catches a dropped, doubled or low-precision term however long the sum.

Shapes cross the thresholds where kernels change path: reductions over every
axis subset of a rank-4 input and over 64K+1 / 1M+1 elements, matmul with
M/N/K above the CPU's 144/256 blocks and not multiples of 8 or 16, batched and
broadcast batches, argmax ties and NaN across parallel chunks, long scans.
"""

import functools

import numpy as np

from devicekit import ops
from devicekit.conformance.case import Section
from devicekit.conformance.registry import op_cases
from devicekit.testing.inputs import edges

from ._common import FLOATS, O, dk, float_scale, run, sample, tensor

SECTION = Section("ops", "Base ops against the float64 oracle", order=21)


def _level(shape):
    return "full" if "large" in shape else "core"


RED_CASES = {"all": ((7, 13), None, False), "ax0": ((7, 13), 0, False),
             "ax-1_keep": ((7, 13), -1, True), "ax02": ((5, 6, 7), (0, 2), False),
             "ax20_keep": ((5, 6, 7), (2, 0), True), "large_all": ((257, 129), None, False),
             "large_ax0": ((257, 129), 0, True), "T_ax1": ((7, 13), 1, False),
             "0d": ((), None, False), "one": ((1,), 0, True), "empty_ax0": ((0, 5), 0, False),
             "edge": ((17,), 0, False), "large_64k": ((65537,), 0, False),
             "large_1m_exact": ((1048577,), 0, False), "large_rows_exact": ((3, 70001), 1, True),
             "large_cols_exact": ((4099, 33), 0, False), "specials": ((9, 300), 1, False)}
# every non-empty axis subset of a rank-4 input
RED_CASES.update({f"r4_{''.join(map(str, ax))}": ((3, 4, 5, 6), ax, len(ax) % 2 == 0)
                  for ax in [tuple(d for d in range(4) if m >> d & 1) for m in range(1, 16)]})
SDK_RED = {"reduce_sum": "sum", "reduce_max": "max", "reduce_min": "min"}
EXACT = (0.0, 0.0)  # (rtol, atol) of the "exact" classes: bit for bit


def exact_terms(ctx, dtype, shape):
    """Small integers (|x| <= 3; uint8 0..3): every partial sum of up to 2**22
    of them is exact in float32 and in every integer dtype's wrap-around, so
    the exact sum is the only right answer."""
    rng = ctx.rng()
    if dtype == "uint8":
        return rng.integers(0, 4, size=shape).astype(np.uint8)
    return rng.integers(-3, 4, size=shape).astype(O.np_dtype(dtype))


def specials_rows(ctx, dtype, sh):
    """Rows with NaN/Inf/-0 (floats) or integer limits at the first, last and a
    middle position; one row each, the rest random."""
    x = sample(ctx, dtype, sh).copy()
    e = edges(dtype)
    for r in range(min(sh[0], len(e))):
        for p in (0, sh[1] - 1, sh[1] // 2):
            x[r, p] = e[(r + p) % len(e)]
    return x


def check_reduction(ctx, op, dtype, shape):
    sh, axis, keep = RED_CASES[shape]
    if shape == "edge":
        x = edges(dtype)
    elif "exact" in shape:
        x = exact_terms(ctx, dtype, sh)
    elif shape == "specials":
        x = specials_rows(ctx, dtype, sh)
        if op == "reduce_sum" and dtype in FLOATS:  # sums: finite specials only
            xv = x.astype(np.float64)
            x = np.where(np.isfinite(xv) & (np.abs(xv) < 1e4), x, 0).astype(x.dtype)
    else:
        x = sample(ctx, dtype, sh)
    if shape == "edge" and op == "reduce_sum" and dtype in FLOATS:  # finite, no overflow
        x = x[np.isfinite(x.astype(np.float64)) & (np.abs(x.astype(np.float64)) < 1e4)]
    t = tensor(ctx, x, "T" if shape == "T_ax1" else "dense")
    call = lambda: getattr(ops, SDK_RED[op])(t, axis=axis, keepdims=keep)  # noqa: E731
    if op != "reduce_sum" and x.size == 0:  # an empty max/min has no value: rejected
        try:
            call().numpy()
        except dk.InvalidArgumentError:
            return
        raise AssertionError(f"{op} of an empty dimension returned instead of raising")
    judge_reduction(ctx, op, dtype, x, call, axis, keep, f"{shape} seed={ctx.seed}",
                    tol=EXACT if "exact" in shape else None)


# The judges: run a call and check it against the oracle with the op's bound
# (n, and sum|terms| for the accumulating ops). The fuzz section judges its
# random calls with them too.

def judge_reduction(ctx, op, dtype, x, call, axis, keep, case, tol=None, signed_zeros=None):
    """``call()`` reduces host ``x`` (``op``, ``axis``, ``keep``) on the device."""
    out_dt = dtype if dtype in FLOATS or op != "reduce_sum" else "int64"  # like torch.sum
    want = getattr(O, op)(x if out_dt == dtype else x.astype(np.int64), axis, keepdims=keep)
    n = int(np.prod([x.shape[a] for a in O._axes(x, axis)]))
    scale = float_scale(dtype, lambda v: O.reduce_sum(v, axis, keepdims=keep), x)
    got = run(ctx, op, call, check=bool(x.ndim), ran=out_dt)
    O.assert_close(got, want, out_dt, op=op, n=n, scale=scale, case=case, tol=tol,
                   signed_zeros=signed_zeros)


def judge_cumsum(ctx, dtype, x, call, axis, case, tol=None):
    out_dt = dtype if dtype in FLOATS else "int64"
    got = run(ctx, "cumsum", call, ran=out_dt)
    scale = float_scale(dtype, lambda v: O.cumsum(v, axis), x)
    O.assert_close(got, O.cumsum(x if out_dt == dtype else x.astype(np.int64), axis), out_dt,
                   op="cumsum", n=x.shape[axis], scale=scale, case=case, tol=tol)


def judge_index(ctx, op, dtype, x, index, call, axis, case, src=None):
    """gather (``src`` None) or scatter_add of host ``x``, ``index``, ``src``."""
    got = run(ctx, op, call)
    if op == "gather":
        O.assert_close(got, O.gather(x, axis, index), dtype, op=op, case=case)
        return
    scale = float_scale(dtype, lambda a, s: O.scatter_add(a, axis, index, s), x, src)
    O.assert_close(got, O.scatter_add(x, axis, index, src), dtype, op=op, case=case,
                   n=O.scatter_count(x.shape, axis, index), scale=scale)


def judge_matmul(ctx, dtype, a, b, call, case, tol=None):
    k = a.shape[-1]
    got = run(ctx, "matmul", call, check=k > 0)  # K=0: the SDK fills, no kernel runs
    scale = float_scale(dtype, O.matmul, a, b)
    O.assert_close(got, O.matmul(a, b), dtype, op="matmul", n=k, scale=scale, case=case, tol=tol)


ARGMAX_CASES = {"all": ((7, 13), None, False), "ax0": ((7, 13), 0, False),
                "ax-1_keep": ((7, 13), -1, True), "large_ax1": ((257, 129), 1, False),
                "T_ax0": ((7, 13), 0, True), "0d": ((), None, False),
                "nan_rows": ((6, 5), 1, False), "ties": ((9, 11), 0, False),
                "large_ties_row": ((3, 70001), 1, False), "large_ties_all": ((1048577,), None, False),
                "ties_ax1_3d": ((4, 300, 5), 1, True), "specials": ((9, 300), 1, False),
                "ties_ax0_wide": ((33, 130), 0, False)}


def _plant_ties(ctx, x):
    """The maximum of each row appears twice or more, far apart (the first must win)."""
    x = x.copy()
    flat = x.reshape(-1, x.shape[-1]) if x.ndim > 1 else x.reshape(1, -1)
    rng = ctx.rng()
    top = np.max(flat.astype(np.float64)) if flat.size else 0
    for row in flat:
        for p in sorted(rng.choice(row.size, size=3, replace=False)):
            row[p] = top
    return flat.reshape(x.shape)


def check_argmax(ctx, op, dtype, shape):
    sh, axis, keep = ARGMAX_CASES[shape]
    if shape == "specials":
        x = specials_rows(ctx, dtype, sh)
    else:
        x = sample(ctx, dtype, sh, "small" if "ties" in shape else "normal")
    if shape.startswith("large_ties"):
        x = _plant_ties(ctx, x)
    if shape == "nan_rows" and dtype in FLOATS:  # row 0: two NaNs; row 1: -inf only; row 2: +-0
        x = x.astype(np.float64)
        x[0, [1, 3]] = np.nan
        x[1, :] = -np.inf
        x[2, :] = [-0.0, 0.0, -0.0, -1.0, 0.0]
        x[3, 4] = np.inf
        x = x.astype(O.np_dtype(dtype))
    t = tensor(ctx, x, "T" if shape.startswith("T") else "dense")
    got = run(ctx, "argmax", lambda: ops.argmax(t, axis=axis, keepdims=keep), check=bool(x.ndim))
    O.assert_close(got, O.argmax(x, axis, keepdims=keep), "int64", op="argmax",
                   case=f"{shape} seed={ctx.seed}")


CUMSUM_CASES = {"1d": ((7,), 0), "ax0": ((7, 13), 0), "ax1": ((7, 13), 1), "ax-1": ((7, 13), -1),
                "large_ax0": ((257, 129), 0), "T_ax1": ((7, 13), 1), "empty": ((0, 5), 0),
                "one": ((1,), 0), "large_1d_exact": ((65537,), 0),
                "large_rows_exact": ((3, 70001), 1), "ax1_3d_exact": ((4, 300, 5), 1),
                "ax0_3d": ((33, 4, 5), 0), "ax0_wide_exact": ((40, 150), 0)}


def check_cumsum(ctx, op, dtype, shape):
    sh, axis = CUMSUM_CASES[shape]
    x = exact_terms(ctx, dtype, sh) if "exact" in shape else sample(ctx, dtype, sh)
    t = tensor(ctx, x, "T" if shape.startswith("T") else "dense")
    judge_cumsum(ctx, dtype, x, lambda: ops.cumsum(t, axis), axis, f"{shape} seed={ctx.seed}",
                 tol=EXACT if "exact" in shape else None)


ARANGE = {"stop": (13,), "start_stop_step": (2, 40, 3), "negative_step": (10, -7, -2),
          "empty": (5, 5), "float": (0.5, 3.0, 0.25), "neg_float": (1.0, -2.0, -0.375),
          "large": (-1000, 1000), "inexact": (0.1, 70.0, 1.0 / 3.0),
          "large_64k": (-3.3, 65537 * 0.7 - 3.3, 0.7), "big_int": (2**40, 2**40 + 70, 7)}


def arange_classes(dtype):
    """The ranges ``dtype`` can hold (float -> int conversion is cast's job)."""
    if dtype in FLOATS:
        return list(ARANGE)
    i = np.iinfo(O.np_dtype(dtype))
    return [c for c, args in ARANGE.items()
            if all(isinstance(v, int) and i.min <= v <= i.max + 1 for v in args)]


def check_iota(ctx, op, dtype, shape):
    args = ARANGE[shape]
    start, stop, step = (0, args[0], 1) if len(args) == 1 else (*args, 1)[:3]
    n = max(0, int(np.ceil((stop - start) / step)))
    got = run(ctx, "iota", lambda: ops.arange(*args, dtype=dtype, device=ctx.device))
    O.assert_close(got, O.iota((n,), 0, start, step, dtype), dtype, op="iota", case=shape)


GATHER = {"ax0": ((4, 5), 0, (3, 5)), "ax1": ((4, 5), 1, (4, 9)),
          "ax-1_3d": ((3, 4, 5), -1, (3, 4, 2)), "ax1_3d": ((3, 4, 5), 1, (3, 6, 5)),
          "smaller": ((4, 5), 0, (2, 3)), "1d": ((7,), 0, (11,)), "empty": ((4, 5), 0, (0, 5)),
          "T_ax0": ((5, 4), 0, (6, 4)), "rows": ((7, 5), 0, (6, 5)), "T_index": ((5, 6), 1, (4, 3)),
          "step_all": ((4, 5), 1, (4, 3)), "rows_3d": ((2, 9, 4), 1, (2, 6, 4))}
# Layouts of (x, index, src) where not dense: a plugin declaring
# DK_KERNEL_CAP_STRIDED gets these views as they are. "rows" is an embedding's
# index: one id per row, expanded along it (stride 0).
GATHER_LAYOUTS = {"T_ax0": ("T", "dense", "dense"), "rows": ("dense", "rows", "step"),
                  "T_index": ("dense", "T", "T"), "step_all": ("step", "step", "step"),
                  "rows_3d": ("dense", "rows", "dense")}


def check_gather_scatter(ctx, op, dtype, shape):
    rng = ctx.rng()
    xs, axis, isz = GATHER[shape]
    lx, li, ls = GATHER_LAYOUTS.get(shape, ("dense", "dense", "dense"))
    x = sample(ctx, dtype, xs)
    if li == "rows":  # constant along the last dim, passed as an expanded [..., 1]
        row_ids = rng.integers(0, xs[axis], size=(*isz[:-1], 1)).astype(np.int64)
        index = np.broadcast_to(row_ids, isz)
        ti = tensor(ctx, row_ids).expand(*isz)
    else:
        index = rng.integers(0, xs[axis], size=isz).astype(np.int64)
        ti = tensor(ctx, index, li)
    tx, case = tensor(ctx, x, lx), f"{shape} seed={ctx.seed}"
    if op == "gather":
        judge_index(ctx, op, dtype, x, index, lambda: ops.gather(tx, axis, ti), axis, case)
        return
    src = sample(ctx, dtype, isz)
    ts = tensor(ctx, src, ls)
    judge_index(ctx, op, dtype, x, index, lambda: ops.scatter_add(tx, axis, ti, ts), axis, case,
                src=src)


MATMUL = {"odd": ((7, 13), (13, 5)), "one": ((1, 1), (1, 1)), "k0": ((3, 0), (0, 4)),
          "vec_vec": ((13,), (13,)), "vec_mat": ((13,), (13, 5)), "mat_vec": ((7, 13), (13,)),
          "batch_bcast": ((2, 1, 3, 4), (5, 4, 2)), "large": ((65, 129), (129, 33)),
          "T": ((7, 13), (13, 5)), "step": ((7, 13), (13, 5)), "T_both": ((65, 129), (129, 33)),
          "even_k": ((6, 16), (16, 4)),
          "large_blocks": ((301, 517), (517, 263)), "large_k_exact": ((17, 1031), (1031, 19)),
          "large_mn": ((289, 40), (40, 4111)), "large_batch": ((3, 145, 257), (3, 257, 37)),
          "large_bcast_batch": ((2, 1, 150, 300), (3, 300, 49)), "tall_skinny": ((4099, 7), (7, 3)),
          "large_exact": ((145, 600), (600, 97))}


def check_matmul(ctx, op, dtype, shape):
    sa, sb = MATMUL[shape]
    if "exact" in shape:
        a, b = exact_terms(ctx, dtype, sa), exact_terms(ctx, dtype, sb)
    else:
        a, b = sample(ctx, dtype, sa), sample(ctx, dtype, sb)
    # Layouts of a and b: a plugin declaring DK_KERNEL_CAP_STRIDED gets these views as they are.
    la, lb = {"T": ("dense", "T"), "step": ("step", "step"), "T_both": ("T", "T")}.get(
        shape, ("dense", "dense"))
    ta, tb = tensor(ctx, a, la), tensor(ctx, b, lb)
    judge_matmul(ctx, dtype, a, b, lambda: ops.matmul(ta, tb), f"{shape} seed={ctx.seed}",
                 tol=EXACT if "exact" in shape else None)


def _make(check):
    return lambda op, dtype, shape: functools.partial(check, op=op, dtype=dtype, shape=shape)


def cases(target):
    out = []
    for op in SDK_RED:
        out += op_cases(target, "ops", op, list(RED_CASES), _make(check_reduction), _level)
    out += op_cases(target, "ops", "argmax", list(ARGMAX_CASES), _make(check_argmax), _level)
    out += op_cases(target, "ops", "cumsum", list(CUMSUM_CASES), _make(check_cumsum), _level)
    out += op_cases(target, "ops", "iota", arange_classes, _make(check_iota), _level)
    for op in ("gather", "scatter_add"):
        out += op_cases(target, "ops", op, list(GATHER), _make(check_gather_scatter), _level)
    out += op_cases(target, "ops", "matmul", list(MATMUL), _make(check_matmul), _level)
    return out
