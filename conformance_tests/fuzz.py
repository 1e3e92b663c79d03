"""Section "fuzz": seeded random cases for every base op (this file) and every
fused composite op (``fuzz_nn.py``), level full only.

``fuzz/<op>/<dtype>/s<seed>``: one call of base op ``op`` on ``dtype`` whose
shapes, broadcast pattern, axes, attributes, values and operand layouts are
drawn from the seed (``_fuzz``: ranks 0-5, sizes at the kernels' thresholds,
views in every operand position, edge values), judged by the float64 oracle
with the op's spec bound exactly as the ``ops`` section judges its hand-picked
cases. :func:`draw` gives a case's inputs without a device, so the same id
always means the same inputs. The seed set is this release's (``_fuzz.seeds``);
``--fuzz-seed S`` / ``--fuzz-cases N`` explore further, and a failure replays
with ``--case`` alone. Cases exist for the (op, dtype) pairs the plugin
declares (the ``ops`` section reports the rest as not implemented).

Where the spec leaves a result open, the draw stays out of it (that is part
of each family's drawing): float -> integer casts only in range, no
rsqrt(-0.0), sums and products whose terms cannot overflow in any order,
sin/cos arguments up to 1e4 (as the ops section's "range" class), the zero
sign of a max/min reduction over a row holding both zeros.
"""

import functools
import math
import types
from dataclasses import dataclass, field

import numpy as np

from devicekit import ops
from devicekit.conformance.case import Case, Section
from devicekit.conformance.registry import spec_dtypes
from devicekit.testing import philox

from . import _fuzz as F
from ._common import FLOATS, O, dk, run
from .ops_elementwise import BINARY, COMPARE, LOGICAL, UNARY, cast_ties
from .ops_structured import judge_cumsum, judge_index, judge_matmul, judge_reduction


def _floor(target):
    """The fuzz cases per declared (op, dtype) pair of the base ops (level full)."""
    if target.level != "full":
        return None
    n = len(F.seeds())
    return n * sum(1 for op in FAMILY for dt in spec_dtypes(op)[0] if dt in target.declared.get(op, ()))


SECTION = Section("fuzz", "Seeded random cases per op", order=70, min_cases=_floor)


@dataclass
class Draw:
    """A case's inputs: operands by name, attributes, and what the check needs."""

    inputs: dict
    attrs: dict = field(default_factory=dict)

    def note(self):
        parts = [f"{k}={v}" for k, v in self.inputs.items()]
        parts += [f"{k}={v!r}" for k, v in self.attrs.items()]
        return "; ".join(parts)


def _v(d, name):
    return d.inputs[name].value


def _terms(rng, dtype, shape, fill):
    """An operand whose values are summed (reduce_sum, cumsum, scatter_add,
    matmul): float64 ones are never expanded. The oracle sums float64 in
    float64 (numpy, sequentially along outer axes), so for one value repeated
    along the sum its own error grows with n and exceeds the bound it judges."""
    return F.operand(rng, shape, fill, expand=dtype != "float64")


# ---- elementwise ----------------------------------------------------------------------

def _unary_values(rng, op, dtype):
    def fill(shape):
        x = F.values(rng, dtype, shape)
        if dtype not in FLOATS:
            return x
        if op in ("log", "sqrt", "rsqrt") and rng.random() < 0.8:
            x = np.abs(x)
        if op == "rsqrt":  # rsqrt(-0.0) is left open by the spec
            x = np.where((x == 0) & np.signbit(x.astype(np.float64)), np.zeros_like(x), x)
        if op in ("sin", "cos"):
            x = F.clip_finite(x, 1e4)
        return x
    return fill


def draw_unary(rng, op, dtype):
    return Draw({"x": F.operand(rng, F.shape(rng), _unary_values(rng, op, dtype))})


def check_unary(ctx, op, dtype, d):
    t = F.place(ctx.device, d.inputs["x"])
    got = run(ctx, op, lambda: getattr(ops, op)(t))
    O.assert_close(got, O.unary(op, _v(d, "x")), dtype, op=op, case=d.note())


def _binary_fill(rng, op, dtype, which):
    def fill(shape):
        if op == "pow" and dtype in FLOATS:  # |results| < 2**11, plus edge values (C pow)
            if which == "a":
                with np.errstate(over="ignore"):  # (edge values: max * 2 is inf, then clipped)
                    return F.clip_finite(np.abs(F.values(rng, dtype, shape, ("normal",))) * 2, 4)
            return F.values(rng, dtype, shape, ("small",))
        kinds = ("small",) if op in COMPARE and rng.random() < 0.5 else None  # ties
        return F.values(rng, dtype, shape, kinds)
    return fill


def draw_binary(rng, op, dtype):
    full = F.shape(rng)
    names = ("x",) if op == "logical_not" else ("cond", "a", "b") if op == "where" else ("a", "b")
    out = {}
    for name in names:
        sh = F.broadcast_from(rng, full) if len(names) > 1 else full
        if name == "cond":
            fill = lambda s: F.values(rng, "bool", s)  # noqa: E731
        else:
            fill = _binary_fill(rng, op, dtype, name)
        out[name] = F.operand(rng, sh, fill)
    return Draw(out)


def check_binary(ctx, op, dtype, d):
    dev = ctx.device
    ts = {k: F.place(dev, v) for k, v in d.inputs.items()}
    vs = {k: v.value for k, v in d.inputs.items()}
    if op == "where":
        got, want, out_dt = run(ctx, op, lambda: ops.where(ts["cond"], ts["a"], ts["b"])), \
            O.where(vs["cond"], vs["a"], vs["b"]), dtype
    elif op == "logical_not":
        got, want, out_dt = run(ctx, op, lambda: ops.logical_not(ts["x"])), O.logical(op, vs["x"]), "bool"
    else:
        got = run(ctx, op, lambda: getattr(ops, op)(ts["a"], ts["b"]))
        if op in COMPARE:
            want, out_dt = O.compare(op, vs["a"], vs["b"]), "bool"
        elif op in LOGICAL:
            want, out_dt = O.logical(op, vs["a"], vs["b"]), "bool"
        else:
            want, out_dt = O.binary(op, vs["a"], vs["b"]), dtype
    O.assert_close(got, want, out_dt, op=op, case=d.note())


# ---- copy, fill, cast -----------------------------------------------------------------

def draw_copy(rng, op, dtype):
    sh = F.shape(rng, min_rank=1)
    return Draw({"x": F.operand(rng, sh, lambda s: F.values(rng, dtype, s), p_view=1.0)})


def check_copy(ctx, op, dtype, d):
    t = F.place(ctx.device, d.inputs["x"])
    got = run(ctx, "copy", lambda: t.contiguous(), check=not t.is_contiguous())
    O.assert_close(got, _v(d, "x"), dtype, op="copy", signed_zeros=True, case=d.note())


def draw_fill(rng, op, dtype):
    sh = F.shape(rng)
    if dtype == "bool":
        value = bool(rng.random() < 0.5) if rng.random() < 0.7 else int(rng.integers(-9, 9))
    elif dtype in FLOATS:
        pool = [float(v) for v in F.values(rng, "float64", (8,))] + [0.1, -0.0, 1 / 3]
        pool += [float(v) for v in F.edges(dtype).astype(np.float64)]
        value = float(rng.choice(pool))
    else:
        value = int(rng.choice(F.values(rng, dtype, (8,))))
    return Draw({}, {"shape": sh, "value": value})


def check_fill(ctx, op, dtype, d):
    sh, value = d.attrs["shape"], d.attrs["value"]
    got = run(ctx, "fill", lambda: dk.full(sh, value, dtype=dtype, device=ctx.device))
    O.assert_close(got, O.fill(sh, value, dtype), dtype, op="fill", case=d.note())


ALL_DTYPES = ("float32", "float16", "bfloat16", "float64", "int8", "int32", "int64", "uint8", "bool")


def draw_cast(rng, op, dtype, stored=ALL_DTYPES):
    dst = str(rng.choice([t for t in stored if t != dtype]))

    def fill(shape):
        x = F.values(rng, dtype, shape)
        if x.size and rng.random() < 0.3:  # rounding ties, overflow and subnormal results
            ties = cast_ties(types.SimpleNamespace(rng=lambda: rng), dtype, dst)
            if ties.size:
                flat = x.reshape(-1)
                flat[:min(flat.size, ties.size)] = ties[:flat.size]
        if dtype in FLOATS and dst not in FLOATS and dst != "bool":  # in range only
            i, v = np.iinfo(O.np_dtype(dst)), x.astype(np.float64)
            with np.errstate(invalid="ignore"):
                ok = (v > i.min - 1) & (v < i.max + 1)
            x = np.where(ok, x, np.zeros_like(x))
        return x
    return Draw({"x": F.operand(rng, F.shape(rng), fill)}, {"to": dst})


def check_cast(ctx, op, dtype, d):
    dst, x = d.attrs["to"], _v(d, "x")
    t = F.place(ctx.device, d.inputs["x"])
    got = run(ctx, "cast", lambda: t.to(getattr(dk, dst if dst != "bool" else "bool_")))
    O.assert_close(got, O.cast(x, dst), dst, op="cast", case=d.note(),
                   signed_zeros=dst in FLOATS and dtype in FLOATS)


# ---- reductions and scans -------------------------------------------------------------

SDK_RED = {"reduce_sum": "sum", "reduce_max": "max", "reduce_min": "min"}


def _axes(rng, nd):
    if nd == 0 or rng.random() < 0.2:
        return None
    picked = [a for a in range(nd) if rng.random() < 0.5] or [int(rng.integers(0, nd))]
    return tuple(int(a) - nd if rng.random() < 0.3 else int(a) for a in rng.permutation(picked))


def draw_reduce(rng, op, dtype):
    sh = F.shape(rng, cap=1 << 18)
    axes = _axes(rng, len(sh))
    if op != "reduce_sum":  # an empty max/min is refused by the SDK: not this case's subject
        sh = tuple(max(s, 1) for s in sh)
    n = math.prod(sh[a] for a in O._axes(np.empty(sh, np.int8), axes)) if sh else 1

    def fill(shape):
        x = F.values(rng, dtype, shape)
        lim = F.sum_limit(dtype, n) if op == "reduce_sum" else None
        return F.clip_finite(x, lim) if lim else x
    x = _terms(rng, dtype, sh, fill) if op == "reduce_sum" else F.operand(rng, sh, fill)
    return Draw({"x": x}, {"axes": axes, "keepdims": bool(rng.random() < 0.5)})


def check_reduce(ctx, op, dtype, d):
    t = F.place(ctx.device, d.inputs["x"])
    axes, keep = d.attrs["axes"], d.attrs["keepdims"]
    # (zero signs are open: a sum's, and a max/min's over both zeros)
    judge_reduction(ctx, op, dtype, _v(d, "x"), lambda: getattr(ops, SDK_RED[op])(
        t, axis=axes, keepdims=keep), axes, keep, d.note(), signed_zeros=False)


def draw_argmax(rng, op, dtype):
    sh = tuple(max(s, 1) for s in F.shape(rng, cap=1 << 18))
    axis = None if not sh or rng.random() < 0.2 else int(rng.integers(-len(sh), len(sh)))
    fill = lambda s: F.values(rng, dtype, s, ("small", "normal"))  # noqa: E731  (ties)
    return Draw({"x": F.operand(rng, sh, fill)}, {"axis": axis, "keepdims": bool(rng.random() < 0.5)})


def check_argmax(ctx, op, dtype, d):
    x, axis, keep = _v(d, "x"), d.attrs["axis"], d.attrs["keepdims"]
    t = F.place(ctx.device, d.inputs["x"])
    got = run(ctx, "argmax", lambda: ops.argmax(t, axis=axis, keepdims=keep), check=bool(x.ndim))
    O.assert_close(got, O.argmax(x, axis, keepdims=keep), "int64", op="argmax", case=d.note())


def draw_cumsum(rng, op, dtype):
    sh = F.shape(rng, min_rank=1, cap=1 << 18)
    axis = int(rng.integers(-len(sh), len(sh)))
    lim = F.sum_limit(dtype, sh[axis])
    fill = lambda s: F.clip_finite(F.values(rng, dtype, s), lim) if lim else F.values(rng, dtype, s)  # noqa
    return Draw({"x": _terms(rng, dtype, sh, fill)}, {"axis": axis})


def check_cumsum(ctx, op, dtype, d):
    t, axis = F.place(ctx.device, d.inputs["x"]), d.attrs["axis"]
    judge_cumsum(ctx, dtype, _v(d, "x"), lambda: ops.cumsum(t, axis), axis, d.note())


def draw_iota(rng, op, dtype):
    n = F.size(rng) if rng.random() < 0.8 else int(rng.choice([65537, 262145, 1 << 20]))
    if dtype in FLOATS and rng.random() < 0.5:  # a float start and step
        start = float(rng.standard_normal() * 2.0 ** int(rng.integers(-4, 12)))
        step = float(rng.choice([0.25, -0.375, 1 / 3, 0.1, -2.5, 1e-3]))
        return Draw({}, {"start": start, "stop": start + n * step, "step": step})
    # integers: every value fits the dtype (int64 for float outputs); often at its ends
    info = np.iinfo(np.int64 if dtype in FLOATS else O.np_dtype(dtype))
    lo, hi = int(info.min), int(info.max)
    step = int(rng.choice([s for s in (1, 1, -1, 2, 3, -7, 1000) if lo <= s <= hi]))
    n = min(n, (hi - lo) // abs(step))
    first, last = (lo, hi - step * n) if step > 0 else (lo - step * n, hi)
    start = int(rng.choice([first, last])) if rng.random() < 0.5 else \
        int(rng.integers(first, last, endpoint=True))
    return Draw({}, {"start": start, "stop": start + step * n, "step": step})


def check_iota(ctx, op, dtype, d):
    start, stop, step = d.attrs["start"], d.attrs["stop"], d.attrs["step"]
    n = max(0, -((start - stop) // step)) if isinstance(step, int) and isinstance(start, int) \
        else max(0, math.ceil((stop - start) / step))
    got = run(ctx, "iota", lambda: ops.arange(start, stop, step, dtype=dtype, device=ctx.device))
    O.assert_close(got, O.iota((n,), 0, start, step, dtype), dtype, op="iota", case=d.note())


# ---- gather, scatter_add, matmul ------------------------------------------------------

def draw_index(rng, op, dtype):
    xs = F.shape(rng, min_rank=1, max_rank=4, cap=1 << 16)
    axis = int(rng.integers(0, len(xs)))
    if xs[axis] == 0:
        xs = xs[:axis] + (F.size(rng, 64) or 1,) + xs[axis + 1:]
    isz = tuple(F.size(rng, 300) if a == axis else int(rng.integers(min(s, 1), s + 1))
                if rng.random() < 0.5 else s for a, s in enumerate(xs))
    n = max(1, math.prod(isz))
    lim = F.sum_limit(dtype, n) if op == "scatter_add" else None
    vals = lambda s: F.clip_finite(F.values(rng, dtype, s), lim) if lim else F.values(rng, dtype, s)  # noqa
    inputs = {"x": _terms(rng, dtype, xs, vals),
              "index": F.operand(rng, isz, lambda s: rng.integers(0, xs[axis], s).astype(np.int64))}
    if op == "scatter_add":
        inputs["src"] = _terms(rng, dtype, isz, vals)
    return Draw(inputs, {"axis": axis - len(xs) if rng.random() < 0.3 else axis})


def check_index(ctx, op, dtype, d):
    dev, axis = ctx.device, d.attrs["axis"]
    tx, ti = F.place(dev, d.inputs["x"]), F.place(dev, d.inputs["index"])
    if op == "gather":
        call, src = (lambda: ops.gather(tx, axis, ti)), None
    else:
        ts, src = F.place(dev, d.inputs["src"]), _v(d, "src")
        call = lambda: ops.scatter_add(tx, axis, ti, ts)  # noqa: E731
    judge_index(ctx, op, dtype, _v(d, "x"), _v(d, "index"), call, axis, d.note(), src=src)


# M and N past every GEMM tile a plugin is likely to use, together, with ragged tails
BIG_MN = (257, 263, 289, 301, 317, 331, 383, 401, 419)


def draw_matmul(rng, op, dtype):
    ints = dtype not in FLOATS
    if rng.random() < 0.3:  # both output dims large at once
        m, n = int(rng.choice(BIG_MN)), int(rng.choice(BIG_MN))
        k = F.size(rng, 200 if ints else 600)
    else:
        m, n, k = F.size(rng, 300), F.size(rng, 300), F.size(rng, 600)
    if rng.random() < 0.1:
        k = 0  # a contraction over nothing: zeros
    work = max(1, m * n * k, m * k + k * n + m * n)  # per batch entry: products, elements
    batch = F.shape(rng, max_rank=2, cap=max(1, 4_000_000 // work))
    sa, sb = F.broadcast_from(rng, batch) + (m, k), F.broadcast_from(rng, batch) + (k, n)
    if rng.random() < 0.1:
        sa = (k,)  # vector @ matrix
    elif rng.random() < 0.1:
        sb = (k,)  # matrix @ vector
    lim = F.sum_limit(dtype, k)
    # Products below the smallest normal of the accumulation are rounded to an
    # absolute grid the spec's bound (relative to sum|terms|) does not allow
    # for, so no value is that small: none below sqrt(2 * smallest normal).
    tiny = float(F.finfo("float64" if dtype == "float64" else "float32").tiny) if lim else 0

    def fill(shape):
        x = F.values(rng, dtype, shape, None if ints else ("normal", "small", "scales"),
                     p_edges=0.15)
        if not lim:
            return x
        small = np.abs(x.astype(np.float64)) < math.sqrt(2 * tiny)
        return F.clip_finite(np.where(small, np.zeros_like(x), x), math.sqrt(lim))
    return Draw({"a": _terms(rng, dtype, sa, fill), "b": _terms(rng, dtype, sb, fill)}, {"k": k})


def check_matmul(ctx, op, dtype, d):
    ta, tb = F.place(ctx.device, d.inputs["a"]), F.place(ctx.device, d.inputs["b"])
    judge_matmul(ctx, dtype, _v(d, "a"), _v(d, "b"), lambda: ops.matmul(ta, tb), d.note())


# ---- random ----------------------------------------------------------------------------

def draw_random(rng, op, dtype):
    seed = [0, 2**64 - 1, int(rng.integers(0, 2**63)) * 2 + 1][int(rng.integers(0, 3))]
    wrap = [2**32 - int(rng.integers(1, 9)), 2**64 - int(rng.integers(1, 9))]  # counters wrap
    offset = wrap[int(rng.integers(0, 2))] if rng.random() < 0.5 else int(rng.integers(0, 2**40))
    return Draw({}, {"shape": F.shape(rng, cap=1 << 16), "seed": seed, "offset": offset})


def check_random(ctx, op, dtype, d):
    sh, seed, offset = d.attrs["shape"], d.attrs["seed"], d.attrs["offset"]
    if op == "random_bits":
        got = run(ctx, op, lambda: ops.random_bits(sh, seed, offset, device=ctx.device))
        want = philox.random_bits(sh, seed, offset)
    else:
        got = run(ctx, op, lambda: ops.rand(sh, seed, offset, dtype=dtype, device=ctx.device))
        want = philox.random_uniform(sh, seed, offset, O.np_dtype(dtype))
    O.assert_close(got, want, dtype, op=op, case=d.note())


# ---- the table: op -> (draw, check) ----------------------------------------------------

FAMILY = {op: (draw_unary, check_unary) for op in UNARY}
FAMILY.update({op: (draw_binary, check_binary) for op in BINARY + COMPARE + LOGICAL + ["where"]})
FAMILY.update({"copy": (draw_copy, check_copy), "fill": (draw_fill, check_fill),
               "cast": (draw_cast, check_cast), "argmax": (draw_argmax, check_argmax),
               "cumsum": (draw_cumsum, check_cumsum), "iota": (draw_iota, check_iota),
               "gather": (draw_index, check_index), "scatter_add": (draw_index, check_index),
               "matmul": (draw_matmul, check_matmul), "random_bits": (draw_random, check_random),
               "random_uniform": (draw_random, check_random)})
FAMILY.update({op: (draw_reduce, check_reduce) for op in SDK_RED})


def draw(op, dtype, seed, stored=ALL_DTYPES):
    """The inputs of case ``fuzz/<op>/<dtype>/s<seed>`` (no device needed);
    ``stored``: the device's dtypes (cast draws its target among them)."""
    rng = F.generator(op, dtype, seed)
    fn = FAMILY[op][0]
    return fn(rng, op, dtype, stored) if op == "cast" else fn(rng, op, dtype)


def check(ctx, op, dtype, seed):
    d = draw(op, dtype, seed, tuple(ctx.target.dtypes))
    try:
        FAMILY[op][1](ctx, op, dtype, d)
    except AssertionError as e:
        raise AssertionError(f"{e}\nfuzz case {op}/{dtype}/s{seed}: {d.note()[:2000]}") from None


def cases(target):
    if target.level != "full":
        return []
    out = []
    seeds = F.seeds()
    for op in FAMILY:
        allowed, required = spec_dtypes(op)
        for dtype in allowed:
            if dtype not in target.declared.get(op, ()):
                continue  # (the ops section reports it as not implemented)
            out += [Case(id=f"fuzz/{op}/{dtype}/s{s}", section="fuzz", op=op, dtype=dtype,
                         required=dtype in required, level="full",
                         fn=functools.partial(check, op=op, dtype=dtype, seed=s)) for s in seeds]
    return out
