"""Section "kernels": every kernel called directly, below the SDK.

The SDK is careful (it sums integers as int64, never passes mismatched
dtypes, pads allocations), so some plugin bugs are unreachable through it.
Here each kernel is called through ``devicekit._core.raw_kernel_call`` with
views the case builds itself (``_raw``):

- ``kernels/<op>/<dtype>/direct``: every (op, dtype) the spec allows, in
  exactly that dtype (int8 ``reduce_sum`` wraps in int8, ``cumsum`` of uint8
  in uint8 ...); outputs sit between guard bands of canary bytes, checked after
  the kernel, and start as canaries, so an element never written is seen too;
  the result is checked against the oracle with the op's spec bound.
- ``kernels/cast/<dtype>/ladder``: cast from dtype to every declared dtype at
  every length of :data:`LADDER` (short lengths with different tails, then a
  geometric ladder to a budget of 2**17 + 1 elements), each its own call, on
  values every dtype holds exactly, judged exactly.
- ``kernels/<op>/<dtype>/layouts`` (the elementwise ops): every operand
  layout the kernel declared it takes (dense; with DK_KERNEL_CAP_BROADCAST
  each set of inputs broadcast along the last dim, one along the middle or the
  first; with DK_KERNEL_CAP_STRIDED one input transposed, every other element,
  at an offset), at a small rank-3 shape and, for the layout that keeps three
  dims apart, past 2**17 elements, so that work split over threads lands
  inside rows; judged as ``direct``.
- ``kernels/<op>/<dtype>/axes`` (reduce_sum/max/min: every non-empty set of
  axes; argmax, cumsum, iota: every axis; iota with int and float start and
  step) at each of :data:`AXES_SHAPES` (inner
  dims with every 8- and 16-wide tail, reduced extents to 257, about 2**17
  elements at most, dims of 1) and :data:`AXES_EMPTY`, with a few NaNs among
  float max/min/argmax inputs (an empty max/min/argmax only where its output
  is empty too); iota also with float64 start and step in integer dtypes.
- ``kernels/matmul/<dtype>/layouts``: matmul at (M, K, N) with tails past
  every common register tile and K block (:data:`MATMUL_SMALL`) in every
  operand layout the kernel declared (a and / or b transposed, every other
  column, at an offset, a batch read through stride 0), at
  :data:`MATMUL_LARGE` (rows past 2**12 and 2**14 columns, one row over 2**21
  multiply-adds) dense and with a or b transposed; judged as ``direct``
  (integers exactly).
  ``kernels/matmul/<float16|bfloat16>/widened``: an operand past 2**22
  elements (:data:`MATMUL_WIDENED`).
- ``kernels/<op>/<dtype>/axes`` for gather, scatter_add: every axis of each
  :data:`INDEX_SHAPES` x, a dense index and (with DK_KERNEL_CAP_STRIDED) an
  embedding's index, one id per row with stride 0 along it, from a dense x and
  from an x whose rows are every other element (stride 2 along the last dim).
- ``kernels/cast/<float dtype>/out_of_range``: cast to every declared
  integer dtype of NaN, infinities and values past the target's range (the
  header leaves their results unspecified) among values it holds: the call
  succeeds, writes only its output, and the values held truncate exactly.
- ``kernels/fill/<dtype>/scalars``: fill with a value of each DK_Scalar kind
  (int64, float64, bool), converted by cast's rules, exactly.
- ``kernels/<op>/<dtype>/empty`` (every op whose operands all have the
  output's shape, and those without inputs; one dtype per op): the call
  with every operand of EMPTY_SHAPE (a dim of 0), with the SDK's strides
  and with a stride 0 before the empty dim, succeeds, writes nothing and
  leaves the stream healthy.
- ``kernels/<op>/<dtype>/index_bounds`` (gather, scatter_add): an index
  smaller than x in the dims but axis and (gather) rows of one element whose
  index and output have strides 0 and 7 along them (valid, judged), and
  index values out of range (negative, equal to the size, into an x empty
  along the axis, and in every row of a large index in the dtype of the
  invalid calls): reported from the call or the synchronize, once, nothing
  written outside the output.
- ``kernels/<op>/<dtype>/inplace``: for every kernel that declares
  DK_KERNEL_CAP_INPLACE ("out[0] may alias in[0] exactly"), each declared
  dtype whose output has input 0's dtype: the call made with output 0 being
  input 0's memory (between guard bands) gives bit for bit what the same call
  gives out of place; elementwise ops at LAYOUT_SMALL, LAYOUT_LARGE (work
  split over threads, every vector tail) and LAYOUT_UNIT_DIM (a dim of size
  1), dense and, with DK_KERNEL_CAP_BROADCAST, the other inputs broadcast
  along the last dim; other ops at their ``direct`` call. A plugin that declares the capability
  for no kernel gets one case, ``kernels/inplace``, skipped with that reason
  (not applicable; never a pass).
- ``kernels/<op>/invalid/<case>``: one call per argument rule the header
  states (``device_api/spec/arg_rules.json``: operand counts, dtypes, shapes
  with batch dims, strides, NULL data, aliasing, views past their allocation,
  attributes, index values), for every op it applies to, each breaking that
  one rule (``_invalid``): a call the header forbids must return
  DK_ERROR_INVALID_ARGUMENT from the kernel call itself, write nothing, and
  leave the stream healthy; a bad index must be reported, from the call or
  the synchronize. :func:`rule_coverage` counts the (rule, op) pairs that got
  their cases (the status line shows it; tests/test_arg_rules.py requires
  all of them).
"""

import functools

import numpy as np

from devicekit.conformance.case import Case, Section, Skip
from devicekit.conformance.registry import op_cases, spec, spec_dtypes
from devicekit.testing import oracle as O
from devicekit.testing.inputs import rand

from . import _invalid, _raw, _rules

SECTION = Section("kernels", "Kernels called directly: declared dtypes, guard bands, invalid "
                             "calls", order=25,
                  available=lambda t: None if _raw.available() else
                  "this DeviceKit's core has no raw_kernel_call")

FLOATS = ("float32", "float16", "bfloat16", "float64")
UNARY = {"neg", "abs", "exp", "log", "sqrt", "rsqrt", "reciprocal", "sin", "cos", "tanh", "erf",
         "floor", "sign"}
BINARY = {"add", "sub", "mul", "div", "pow", "maximum", "minimum"}
COMPARE = {"eq", "ne", "lt", "le"}
LOGICAL = {"logical_and", "logical_or", "logical_xor"}
SHAPE = (5, 7, 3)  # odd sizes, rank 3: no power-of-two path, no inner dim of 1


def _sample(rng, op, dtype, shape, kind="normal"):
    if op in ("log", "sqrt", "rsqrt") or (op == "pow" and kind == "base"):
        kind = "positive"
    x = rand(dtype, shape, rng, kind)
    if op == "pow" and kind == "positive" and dtype in FLOATS:
        x = np.minimum(x.astype(np.float64), 4).astype(x.dtype)
    return x


def plan(op, dtype, rng):
    """(inputs [(array, dtype)], out shape, out dtype, attrs bytes, expected, n, scale)."""
    s, n, scale = SHAPE, None, None
    if op in UNARY or op == "copy":
        x = _sample(rng, op, dtype, s)
        want = x.copy() if op == "copy" else O.unary(op, x)
        return [(x, dtype)], s, dtype, None, want, n, scale
    if op in BINARY or op in COMPARE or op in LOGICAL:
        a = _sample(rng, op, dtype, s, "base" if op == "pow" else "normal")
        b = _sample(rng, op, dtype, s, "small" if op == "pow" else "normal")
        if op in COMPARE:
            b = np.where(rng.random(s) < 0.3, a, b).astype(a.dtype)
            return [(a, dtype), (b, dtype)], s, "bool", None, O.compare(op, a, b), n, scale
        if op in LOGICAL:
            return [(a, dtype), (b, dtype)], s, "bool", None, O.logical(op, a, b), n, scale
        return [(a, dtype), (b, dtype)], s, dtype, None, O.binary(op, a, b), n, scale
    if op == "logical_not":
        x = rand(dtype, s, rng)
        return [(x, dtype)], s, "bool", None, O.logical(op, x), n, scale
    if op == "where":
        c, a, b = rng.random(s) < 0.5, rand(dtype, s, rng), rand(dtype, s, rng)
        return [(c, "bool"), (a, dtype), (b, dtype)], s, dtype, None, O.where(c, a, b), n, scale
    if op == "fill":
        v = 1.0 / 3.0 if dtype in FLOATS else (True if dtype == "bool" else 77)
        return [], s, dtype, _raw.attrs("DK_FillAttrs", value=_raw.scalar(v)), \
            O.fill(s, v, dtype), n, scale
    if op == "cast":
        x = np.concatenate([rand(dtype, (40,), rng), rand(dtype, (40,), rng, "small")])
        x = x.reshape(2, 5, 8)  # rank 3 like every plan: the invalid calls break each dim
        dst = "float32" if dtype != "float32" else "int32"
        return [(x, dtype)], x.shape, dst, None, O.cast(x, dst), n, scale
    if op in ("reduce_sum", "reduce_max", "reduce_min"):
        x = rand(dtype, s, rng)
        want = getattr(O, op)(x, (0, 2), keepdims=True)
        if op == "reduce_sum":
            n, scale = 15, O.reduce_sum(np.abs(x.astype(np.float64)), (0, 2)) \
                if dtype in FLOATS else None
        return [(x, dtype)], want.shape, dtype, _raw.attrs("DK_ReduceAttrs", axes=0b101), \
            want, n, scale
    if op == "argmax":
        x = rand(dtype, s, rng, "small")
        want = O.argmax(x, 1, keepdims=True)
        return [(x, dtype)], want.shape, "int64", _raw.attrs("DK_AxisAttrs", axis=1), want, n, scale
    if op == "cumsum":
        x = rand(dtype, s, rng)
        scale = O.cumsum(np.abs(x.astype(np.float64)), 1) if dtype in FLOATS else None
        return [(x, dtype)], s, dtype, _raw.attrs("DK_AxisAttrs", axis=1), O.cumsum(x, 1), 7, scale
    if op == "iota":
        start, step = (-3, 2) if dtype not in FLOATS else (0.1, 0.3)
        if dtype == "uint8":
            start = 3
        return [], s, dtype, _raw.attrs("DK_IotaAttrs", axis=1, start=_raw.scalar(start),
                                        step=_raw.scalar(step)), O.iota(s, 1, start, step, dtype), \
            n, scale
    if op in ("gather", "scatter_add"):
        x = rand(dtype, s, rng)
        idx = rng.integers(0, s[1], size=(5, 9, 3)).astype(np.int64)
        if op == "gather":
            return [(x, dtype), (idx, "int64")], idx.shape, dtype, \
                _raw.attrs("DK_AxisAttrs", axis=1), O.gather(x, 1, idx), n, scale
        src = rand(dtype, idx.shape, rng)
        n = O.scatter_count(s, 1, idx)
        scale = O.scatter_add(np.abs(x.astype(np.float64)), 1, idx,
                              np.abs(src.astype(np.float64))) if dtype in FLOATS else None
        return [(x, dtype), (idx, "int64"), (src, dtype)], s, dtype, \
            _raw.attrs("DK_AxisAttrs", axis=1), O.scatter_add(x, 1, idx, src), n, scale
    if op == "matmul":
        a, b = rand(dtype, (3, 5, 9), rng), rand(dtype, (3, 9, 4), rng)
        scale = O.matmul(np.abs(a.astype(np.float64)), np.abs(b.astype(np.float64))) \
            if dtype in FLOATS else None
        return [(a, dtype), (b, dtype)], (3, 5, 4), dtype, None, O.matmul(a, b), 9, scale
    if op in ("random_bits", "random_uniform"):
        seed, offset = 0x9E3779B97F4A7C15, 2**32 - 1
        want = O.random_bits(s, seed, offset) if op == "random_bits" else \
            O.random_uniform(s, seed, offset, dtype)
        return [], s, dtype, _raw.attrs("DK_RandomAttrs", seed=seed, offset=offset), want, n, scale
    raise KeyError(op)


def check_direct(ctx, op, dtype, shape):
    ins, out_shape, out_dtype, attr, want, n, scale = plan(op, dtype, ctx.rng())
    call = _invalid.Call(list(ins), tuple(out_shape), out_dtype, attr)
    (lc, lmsg, sc, smsg), [(got, bands_ok)] = _invalid.launch(ctx.device, op, call)
    assert lc == 0, f"{op} {dtype}: the kernel rejected a valid call [{lc}]: {lmsg}"
    assert sc == 0, f"{op} {dtype}: the stream reported an error [{sc}]: {smsg}"
    assert bands_ok, f"{op} {dtype}: the kernel wrote outside its output (guard bands changed)"
    ctx.ran.add((op, dtype))
    O.assert_close(got, want, call.out_dtype, op=op, n=n, scale=scale,
                   signed_zeros=op in O.SIGNED_ZEROS, case=f"direct {dtype} seed={ctx.seed}")


#: Lengths of the cast ladder, each its own call: short ones whose tails
#: differ for 4-, 8-, 16- and 32-wide vectors, then a geometric ladder (x8)
#: to the budget of 2**17 + 1 elements per call: past every common vector
#: width and unroll, and past any size at which a kernel might split its work
#: over threads, without knowing where a plugin puts that. Per call cost
#: dominates, so the ladder is short: 81 dtype pairs x 9 lengths.
LADDER = (1, 7, 17, 33, 127, 2**10 + 1, 2**13 + 3, 2**16 - 1, 2**17 + 1)


def _in_every_range(x):
    """x moved into [0, 100] (quarters for floats): exactly representable in
    every dtype, so each cast has one right answer."""
    if x.dtype == np.bool_:
        return x
    v = np.clip(x.astype(np.float64), -100, 100)
    v = np.abs(np.round(v * 4) / 4) if x.dtype.kind == "f" or "float" in str(x.dtype) \
        else np.abs(np.round(v))
    return v.astype(x.dtype)


def check_cast_ladder(ctx, op, dtype, shape):
    """cast from dtype to every declared dtype at every LADDER length, each
    its own call (a tail is a per-call property), exact as the spec says."""
    rng = ctx.rng()
    dsts = [d for d in spec_dtypes("cast")[0] if d in ctx.target.declared.get("cast", ())]
    pool = _in_every_range(rand(dtype, (LADDER[-1],), rng))
    for dst in dsts:
        for n in LADDER:
            x = pool[:n].copy()
            call = _invalid.Call([(x, dtype)], (n,), dst, None)
            (lc, lmsg, sc, smsg), [(got, bands_ok)] = _invalid.launch(ctx.device, "cast", call)
            assert lc == 0 and sc == 0, f"cast {dtype}->{dst} n={n}: [{lc}] {lmsg} [{sc}] {smsg}"
            assert bands_ok, f"cast {dtype}->{dst} n={n}: wrote outside its output"
            O.assert_close(got, O.cast(x, dst), dst, op="cast",
                           case=f"ladder {dtype}->{dst} n={n} seed={ctx.seed}")
    ctx.ran.add(("cast", dtype))


#: The elementwise ops whose kernels take broadcast and strided inputs.
ELEMENTWISE = UNARY | BINARY | COMPARE | LOGICAL | {"logical_not", "where"}
#: Output shapes of the layouts case: a small rank-3 shape (odd sizes, no dim
#: of 1) for every layout, and a large one, past 2**17 elements (the budget
#: the cast ladder uses), for the layout that keeps three dims apart: there
#: a row is shorter than the work a thread may get, so whatever size a plugin
#: splits work at, some split lands inside a row and some chunk holds several.
LAYOUT_SMALL, LAYOUT_LARGE = (3, 5, 7), (9, 17, 1025)
#: The in-place case's third shape: a dim of size 1 between two others (a
#: kernel comparing input 0's view with output 0's may compare that dim's
#: stride, which names no other element).
LAYOUT_UNIT_DIM = (3, 1, 7)


def _arity(op):
    return 1 if op in UNARY or op == "logical_not" else 3 if op == "where" else 2


def _elementwise_inputs(op, dtype, shapes, rng):
    """Logical input arrays of ``op`` with the given shapes (domains as plan's)."""
    if op == "where":
        return [(rng.random(shapes[0]) < 0.5, "bool"), (rand(dtype, shapes[1], rng), dtype),
                (rand(dtype, shapes[2], rng), dtype)]
    if op == "logical_not" or op in LOGICAL:
        return [(rand(dtype, s, rng), dtype) for s in shapes]
    if op in UNARY:
        return [(_sample(rng, op, dtype, shapes[0]), dtype)]
    a = _sample(rng, op, dtype, shapes[0], "base" if op == "pow" else "normal")
    b = _sample(rng, op, dtype, shapes[1], "small" if op == "pow" else "normal")
    if op in ("maximum", "minimum") and dtype in FLOATS:  # zeros of both signs, NaNs
        for x in (a, b):
            pick = rng.random(x.shape)
            x[pick < 0.2] = np.where(rng.random(x.shape) < 0.5, -0.0, 0.0)[pick < 0.2]
            x[pick > 0.97] = np.nan
    if op in COMPARE:  # some equal pairs
        eq = np.broadcast_to(a, np.broadcast_shapes(a.shape, b.shape))
        eq = eq[tuple(slice(0, d) for d in b.shape)]
        b = np.where(rng.random(b.shape) < 0.3, eq, b).astype(b.dtype)
    return [(a, dtype), (b, dtype)]


def _elementwise_want(op, xs):
    if op in UNARY:
        return O.unary(op, xs[0])
    if op in COMPARE:
        return O.compare(op, *xs)
    if op in LOGICAL or op == "logical_not":
        return O.logical(op, *xs)
    if op == "where":
        return O.where(*xs)
    return O.binary(op, *xs)


def _layouts(arity, caps, shape):
    """[(name, [per input: (shape, view kind)])] for an output of ``shape``.
    Broadcast layouts (a dim of 1 the kernel steps over with stride 0) need
    DK_KERNEL_CAP_BROADCAST; the others (transposed, every other element, a
    view at an offset into its allocation) DK_KERNEL_CAP_STRIDED."""
    a, b, c = shape
    dense = [(shape, "dense")] * arity
    out = [("dense", dense)]
    if caps & _rules.CAPS["BROADCAST"]:
        for mask in range(1, 2 ** arity):  # these inputs broadcast along the last dim
            out.append((f"inner{mask}", [((a, b, 1) if mask >> k & 1 else shape, "dense")
                                         for k in range(arity)]))
        out.append(("middle", [((a, 1, c), "dense")] + dense[1:]))
        out.append(("outer", dense[:-1] + [((1, b, c), "dense")]))
    if caps & _rules.CAPS["STRIDED"]:
        for kind in ("transposed", "every_other", "offset"):
            out.append((kind, [(shape, kind)] + dense[1:]))
    return out


def _view_of(x, kind):
    """(array to allocate, view strides in elements, offset in elements) whose
    view reads exactly ``x``."""
    a, b, c = x.shape
    if kind == "transposed":  # dims 1 and 2 swapped in memory
        return np.ascontiguousarray(x.transpose(0, 2, 1)), [b * c, 1, b], 0
    if kind == "every_other":
        base = np.repeat(x, 2, axis=2)
        return base, [b * 2 * c, 2 * c, 2], 0
    if kind == "offset":
        flat = np.concatenate([x.reshape(-1)[:3][::-1], x.reshape(-1)])
        return flat, _raw._strides([a, b, c]), 3
    return x, None, 0


def _mangle_views(views):
    """A mangle giving input k the shape, strides and element offset views[k]."""
    def mangle(in_views, out_views, operands):
        out = []
        for (addr, dt, _, _), (vshape, vstrides, off), o in zip(
                in_views, views, operands["in"]):
            out.append((addr + off * o.arr.itemsize, dt, list(vshape),
                        _raw._strides(list(vshape)) if vstrides is None else list(vstrides)))
        return out, out_views
    return mangle


def check_layouts(ctx, op, dtype, shape):
    """An elementwise op at every operand layout its kernel declared it takes
    (dense; each set of inputs broadcast along the last dim; one input
    broadcast along the middle or first dim; with DK_KERNEL_CAP_STRIDED one
    input transposed, every other element, or at an offset), at
    LAYOUT_SMALL, and the middle layout again at LAYOUT_LARGE: a kernel may
    pick its loop per layout, per dtype and per size."""
    rng = ctx.rng()
    caps = _rules.caps_of(ctx.target, op)
    arity = _arity(op)
    runs = [(n, s, LAYOUT_SMALL) for n, s in _layouts(arity, caps, LAYOUT_SMALL)]
    runs += [(n, s, LAYOUT_LARGE) for n, s in _layouts(arity, caps, LAYOUT_LARGE)
             if n == ("middle" if caps & _rules.CAPS["BROADCAST"] else "dense")]
    for name, spec_, out_shape in runs:
        xs = _elementwise_inputs(op, dtype, [s for s, _ in spec_], rng)
        ins, views = [], []
        for (x, d), (s, kind) in zip(xs, spec_):
            base, strides, off = _view_of(x, kind)
            ins.append((base, d))
            views.append((s, strides, off))
        out_dtype = "bool" if op in COMPARE or op in LOGICAL or op == "logical_not" else dtype
        call = _invalid.Call(ins, tuple(out_shape), out_dtype, None, mangle=_mangle_views(views))
        (lc, lmsg, sc, smsg), [(got, bands_ok)] = _invalid.launch(ctx.device, op, call)
        what = f"{op} {dtype} {name} {out_shape}"
        assert lc == 0 and sc == 0, f"{what}: [{lc}] {lmsg} [{sc}] {smsg}"
        assert bands_ok, f"{what}: the kernel wrote outside its output"
        want = np.broadcast_to(_elementwise_want(op, [x for x, _ in xs]), out_shape)
        O.assert_close(got, want, out_dtype, op=op, signed_zeros=op in O.SIGNED_ZEROS,
                       case=f"layouts {what} seed={ctx.seed}")
    ctx.ran.add((op, dtype))


#: Input shapes of the axes case, a geometric ladder to about 2**17
#: elements: inner dims with every tail for 8- and 16-wide loops (7, 33, 65,
#: 257), extents along an axis from 5 to 8197 (x8 steps: below and past any
#: pairwise, blocked or per-thread split), then dims of 1 (dropped) and of 0
#: (empty inputs and outputs), each of the three dims empty in turn (an empty
#: innermost dim is the one a kernel reducing contiguous runs sees as runs
#: of length 0).
AXES_SHAPES = ((3, 5, 7), (5, 17, 33), (9, 129, 65), (65, 9, 257), (3, 8197, 5), (3, 1, 33),
               (1, 17, 1))
AXES_EMPTY = ((0, 5, 7), (3, 0, 7), (3, 5, 0), (0, 0, 7))
REDUCE = ("reduce_sum", "reduce_max", "reduce_min")


def _axes_input(op, dtype, shape, rng):
    x = rand(dtype, shape, rng, "small" if op == "argmax" else "normal")
    if dtype in FLOATS and op != "reduce_sum" and x.size:  # a few NaNs, where they land
        flat = x.reshape(-1)
        flat[rng.integers(0, x.size, size=max(1, x.size // 997))] = np.nan
    return x


def _axes_calls(op, dtype, rng):
    """[(input, attrs, want, n, scale)] of the axes case."""
    out = []
    for shape in AXES_SHAPES + AXES_EMPTY:
        x = _axes_input(op, dtype, shape, rng)
        wide = np.abs(x.astype(np.float64)) if dtype in FLOATS else None
        if op in REDUCE:
            for mask in range(1, 8):
                axes = tuple(d for d in range(3) if mask >> d & 1)
                n = int(np.prod([shape[d] for d in axes]))
                kept = tuple(1 if d in axes else shape[d] for d in range(3))
                if n == 0 and op != "reduce_sum":
                    if np.prod(kept) > 0:
                        continue  # a max/min of nothing: an invalid call, not this case's
                    want = np.empty(kept, x.dtype)  # nothing to reduce into: no output
                else:
                    want = getattr(O, op)(x, axes, keepdims=True)
                scale = O.reduce_sum(wide, axes) if op == "reduce_sum" and wide is not None \
                    else None
                out.append((x, _raw.attrs("DK_ReduceAttrs", axes=mask), want,
                            n if op == "reduce_sum" else None, scale))
        else:
            for axis in range(3):
                if op == "argmax":
                    kept = tuple(1 if d == axis else shape[d] for d in range(3))
                    if shape[axis] == 0 and np.prod(kept) > 0:
                        continue  # the argmax of nothing: an invalid call
                    want = O.argmax(x, axis, keepdims=True) if shape[axis] else \
                        np.empty(kept, np.int64)
                    n, scale = None, None
                else:
                    want, n = O.cumsum(x, axis), shape[axis]
                    scale = O.cumsum(wide, axis) if wide is not None else None
                out.append((x, _raw.attrs("DK_AxisAttrs", axis=axis), want, n, scale))
    return out


def check_axes(ctx, op, dtype, shape):
    """A reduction (every set of axes of a rank-3 input) or argmax / cumsum
    (every axis) at every AXES_SHAPES and AXES_EMPTY shape, NaNs among float
    max/min/argmax inputs: a kernel may pick its loop per axes, size and
    dtype. Judged with the spec's bounds (sums: n and the sum of |x|)."""
    rng = ctx.rng()
    out_dtype = "int64" if op == "argmax" else dtype
    for x, attr, want, n, scale in _axes_calls(op, dtype, rng):
        call = _invalid.Call([(x, dtype)], tuple(want.shape), out_dtype, attr)
        (lc, lmsg, sc, smsg), [(got, bands_ok)] = _invalid.launch(ctx.device, op, call)
        what = f"{op} {dtype} {x.shape} attrs={attr.hex()}"
        assert lc == 0 and sc == 0, f"{what}: [{lc}] {lmsg} [{sc}] {smsg}"
        assert bands_ok, f"{what}: the kernel wrote outside its output"
        O.assert_close(got, want, out_dtype, op=op, n=n, scale=scale,
                       case=f"axes {what} seed={ctx.seed}")
    ctx.ran.add((op, dtype))


#: Shapes (M, K, N) of the matmul layouts case: M and N past every common
#: register tile with a tail (7, 13, 33, 65), K past common K blocks with one
#: (259, 513); each in every layout the kernel declared. MATMUL_LARGE: a row
#: past 2**12 and one past 2**14 columns (dense and with a transposed, so
#: packed, a). MATMUL_WIDENED, the case ``widened`` of the 16-bit dtypes
#: (the ones a plugin widens): an operand past 2**22 elements, the size up to
#: which it might keep the widened copy in a reused buffer; its own case, as
#: it costs about 7 s on the emulated CUDA plugin. Work split over threads is
#: reached by ops/matmul's large classes (up to 5 * 2**23 multiply-adds);
#: these stay small because the emulated CUDA plugin runs them too (about
#: half a microsecond per multiply-add there).
MATMUL_SMALL = ((1, 1, 1), (2, 37, 19), (7, 9, 13), (13, 33, 17), (13, 259, 33), (65, 513, 7))
#: (3, 17, 4101) and (2, 3, 16411): few rows, wide; (1, 1025, 2049): one row over
#: 2**21 multiply-adds (a kernel may split its columns over threads)
MATMUL_LARGE = ((3, 17, 4101), (2, 3, 16411), (1, 1025, 2049))
MATMUL_WIDENED = (2049, 2049, 1)
#: (name, view kind of a, view kind of b): a kind of _view_of, or "bcast" (a
#: batch of 2 that reads one matrix twice, batch stride 0).
MATMUL_LAYOUTS = (("dense", "dense", "dense"), ("a_T", "transposed", "dense"),
                  ("b_T", "dense", "transposed"), ("both_T", "transposed", "transposed"),
                  ("every_other", "every_other", "every_other"), ("offset", "offset", "offset"),
                  ("bcast_b", "dense", "bcast"), ("bcast_a_T", "bcast", "transposed"))


def _matmul_view(x, kind):
    """(array to allocate, view strides, offset) of a [B, rows, cols] operand;
    "bcast" allocates x[0] alone (x's batch entries are all equal)."""
    if kind == "bcast":
        return np.ascontiguousarray(x[:1]), [0] + _raw._strides(list(x.shape[1:])), 0
    if kind == "offset":  # 3 elements before the view, however small it is
        flat = x.reshape(-1)
        return np.concatenate([np.resize(flat[::-1], 3), flat]), _raw._strides(list(x.shape)), 3
    return _view_of(x, kind)


def _matmul_operand(dtype, shape, rng):
    """rand(dtype, shape) drawn whole up to 2**16 elements; a larger one
    repeats a draw of 65537 (a prime count: the repeats do not line up with
    rows or tiles), as converting millions of doubles to float16 costs more
    than the call."""
    size = int(np.prod(shape))
    if size <= 2**16:
        return rand(dtype, shape, rng)
    return np.resize(rand(dtype, (65537,), rng), size).reshape(shape)


def _matmul_calls(dtype, caps, rng, shape):
    """[(layout name, a, b, a kind, b kind)] of the matmul case ``shape``
    (layouts or widened)."""
    strided = caps & _rules.CAPS["STRIDED"]
    runs = [(MATMUL_SMALL, None), (MATMUL_LARGE, ("dense", "a_T", "b_T"))] if shape == "layouts" \
        else [((MATMUL_WIDENED,), ("dense",))]
    out = []
    for shapes, names in runs:
        for m, k, n in shapes:
            for name, ka, kb in MATMUL_LAYOUTS:
                if (names and name not in names) or (name != "dense" and not strided):
                    continue
                batch = 2 if "bcast" in name else 1
                a, b = _matmul_operand(dtype, (batch, m, k), rng), rand(dtype, (batch, k, n), rng)
                if ka == "bcast":
                    a = np.repeat(a[:1], batch, axis=0)
                if kb == "bcast":
                    b = np.repeat(b[:1], batch, axis=0)
                out.append((name, a, b, ka, kb))
    return out


def check_matmul_layouts(ctx, op, dtype, shape):
    """matmul at every MATMUL_SMALL shape in every operand layout its kernel
    declared it takes (dense; with DK_KERNEL_CAP_STRIDED a and / or b
    transposed, every other column, at an offset, a batch read through
    stride 0), and at MATMUL_LARGE dense and with a or b transposed; with
    ``shape`` "widened", MATMUL_WIDENED dense: a kernel may pick its blocking
    per layout, per dtype and per size. Judged against the
    float64 oracle with the spec's bound (K terms summing to |a| @ |b|);
    integers exactly."""
    rng = ctx.rng()
    caps = _rules.caps_of(ctx.target, op)
    for name, a, b, ka, kb in _matmul_calls(dtype, caps, rng, shape):
        ins, views = [], []
        for x, kind in ((a, ka), (b, kb)):
            base, strides, off = _matmul_view(x, kind)
            ins.append((base, dtype))
            views.append((x.shape, strides, off))
        out_shape = (a.shape[0], a.shape[1], b.shape[2])
        call = _invalid.Call(ins, out_shape, dtype, None, mangle=_mangle_views(views))
        (lc, lmsg, sc, smsg), [(got, bands_ok)] = _invalid.launch(ctx.device, op, call)
        what = f"matmul {dtype} {name} [{a.shape[1]}, {a.shape[2]}] @ [{b.shape[1]}, {b.shape[2]}]"
        if a.shape[0] > 1:
            what += f" batch {a.shape[0]}"
        assert lc == 0 and sc == 0, f"{what}: [{lc}] {lmsg} [{sc}] {smsg}"
        assert bands_ok, f"{what}: the kernel wrote outside its output"
        scale = O.matmul(np.abs(a.astype(np.float64)), np.abs(b.astype(np.float64))) \
            if dtype in FLOATS else None
        O.assert_close(got, O.matmul(a, b), dtype, op=op, n=a.shape[2], scale=scale,
                       case=f"{shape} {what} seed={ctx.seed}")
    ctx.ran.add((op, dtype))


def _iota_scalars(dtype, length):
    """(start, step) pairs of every scalar kind (int64 / float64) the values
    of which ``dtype`` holds along ``length``."""
    if dtype == "bool":
        return [(0, 1), (0.0, 1.0)]
    if dtype in FLOATS:
        return [(3, 2), (0.25, 0.5), (1, 0.5), (0.5, 2)]
    hi = int(np.iinfo(O.np_dtype(dtype)).max)
    return [(3, 1 if 3 + length <= hi else 0), (3, -1 if dtype != "uint8" and length < 100 else 0),
            (2.5, 1.0 if 3 + length <= hi else 0.0)]  # float64 scalars: 2.5 + i truncates


def check_iota_axes(ctx, op, dtype, shape):
    """iota along every axis of every AXES_SHAPES and AXES_EMPTY shape, with
    int and float start and step, judged as the spec says (cast's rules)."""
    for out_shape in AXES_SHAPES + AXES_EMPTY:
        for axis in range(3):
            for start, step in _iota_scalars(dtype, out_shape[axis]):
                attr = _raw.attrs("DK_IotaAttrs", axis=axis, start=_raw.scalar(start),
                                  step=_raw.scalar(step))
                call = _invalid.Call([], tuple(out_shape), dtype, attr)
                (lc, lmsg, sc, smsg), [(got, bands_ok)] = _invalid.launch(ctx.device, op, call)
                what = f"iota {dtype} {out_shape} axis={axis} start={start!r} step={step!r}"
                assert lc == 0 and sc == 0, f"{what}: [{lc}] {lmsg} [{sc}] {smsg}"
                assert bands_ok, f"{what}: the kernel wrote outside its output"
                O.assert_close(got, O.iota(out_shape, axis, start, step, dtype), dtype, op=op,
                               case=f"axes {what}")
    ctx.ran.add((op, dtype))


#: x shapes of the index ops' axes case: small, about 2**17 elements (rows
#: past any per-thread split), and an empty last dim.
INDEX_SHAPES = ((3, 5, 7), (65, 9, 257), (3, 4, 0))


def _index_calls(op, dtype, rng, strided):
    """[(axis, layout, ins, views, out shape, want, n, scale)] of the index ops' axes case."""
    out = []
    for xs in INDEX_SHAPES:
        for axis in range(3):
            isz = tuple(d + 2 if k == axis else d for k, d in enumerate(xs))
            rows = strided and axis != 2 and xs[2] > 0  # one index per row, stride 0 along it
            for layout in ("dense", "rows", "rows_strided_x") if rows else ("dense",):
                x = rand(dtype, xs, rng)
                x_in, x_view = x, (xs, None, 0)
                if layout == "rows_strided_x":  # a table whose rows are every other element
                    x_in = rand(dtype, xs[:2] + (2 * xs[2],), rng)
                    x, x_view = x_in[..., ::2], (xs, [xs[1] * 2 * xs[2], 2 * xs[2], 2], 0)
                hi = max(xs[axis], 1)
                if layout != "dense":
                    ids = rng.integers(0, hi, size=isz[:2] + (1,)).astype(np.int64)
                    idx, idx_view = np.broadcast_to(ids, isz), (isz, [isz[1], 1, 0], 0)
                else:
                    ids = idx = rng.integers(0, hi, size=isz).astype(np.int64)
                    idx_view = (isz, None, 0)
                if xs[axis] == 0 and idx.size:
                    continue  # every index out of range: an invalid call
                views = [x_view, idx_view]
                ins = [(x_in, dtype), (ids, "int64")]
                if op == "gather":
                    want, n, scale = O.gather(x, axis, idx), None, None
                    out.append((axis, layout, ins, views, isz, want, n, scale))
                    continue
                src = rand(dtype, isz, rng)
                ins.append((src, dtype))
                views.append((isz, None, 0))
                n = O.scatter_count(xs, axis, idx)
                scale = O.scatter_add(np.abs(x.astype(np.float64)), axis, idx,
                                      np.abs(src.astype(np.float64))) if dtype in FLOATS else None
                out.append((axis, layout, ins, views, xs, O.scatter_add(x, axis, idx, src), n,
                            scale))
    return out


def check_index_axes(ctx, op, dtype, shape):
    """gather / scatter_add along every axis of each INDEX_SHAPES x (the index
    2 longer along it), with a dense index and, with DK_KERNEL_CAP_STRIDED,
    an embedding's index (one id per row, stride 0 along the last dim), from
    a dense x and from one with stride 2 along its last dim."""
    strided = bool(_rules.caps_of(ctx.target, op) & _rules.CAPS["STRIDED"])
    for axis, layout, ins, views, out_shape, want, n, scale in _index_calls(
            op, dtype, ctx.rng(), strided):
        call = _invalid.Call(ins, tuple(out_shape), dtype, _raw.attrs("DK_AxisAttrs", axis=axis),
                             mangle=_mangle_views(views))
        (lc, lmsg, sc, smsg), [(got, bands_ok)] = _invalid.launch(ctx.device, op, call)
        what = f"{op} {dtype} x={views[0][0]} index={views[1][0]} axis={axis} {layout}"
        assert lc == 0 and sc == 0, f"{what}: [{lc}] {lmsg} [{sc}] {smsg}"
        assert bands_ok, f"{what}: the kernel wrote outside its output"
        O.assert_close(got, want, dtype, op=op, n=n, scale=scale, case=f"axes {what}")
    ctx.ran.add((op, dtype))


#: The empty case's shape: no element, a dim of 0 between non-empty ones.
EMPTY_SHAPE = (3, 0, 5)


def empty_applies(op):
    """Ops whose every operand has the output's shape (or that have no input):
    the empty case empties them all."""
    return _rules.op_spec(op)["out_shape"] in ("same", "any")


def check_empty(ctx, op, dtype, shape):
    """``op``'s ``direct`` call with the output and every input emptied
    (EMPTY_SHAPE), with the SDK's strides for it (a size-0 dim counted as 1)
    and with the plain row-major products (a stride 0 before the empty dim):
    the header has every view without elements treated as dense whatever its
    strides. Accepted, nothing written (guard bands intact), stream healthy."""
    ins, _, out_dtype, attr, _, _, _ = plan(op, dtype, ctx.rng())
    ins = [(np.zeros(EMPTY_SHAPE, a.dtype), d) for a, d in ins]
    sdk = [int(np.prod([max(n, 1) for n in EMPTY_SHAPE[d + 1:]])) for d in range(3)]
    for strides in (sdk, _raw._strides(list(EMPTY_SHAPE))):
        def mangle(in_views, out_views, operands, strides=strides):
            def fix(vs):
                return [(addr, dt, list(EMPTY_SHAPE), list(strides)) for addr, dt, _, _ in vs]
            return fix(in_views), fix(out_views)
        call = _invalid.Call(ins, EMPTY_SHAPE, out_dtype, attr, guard_inputs=True, mangle=mangle)
        (lc, lmsg, sc, smsg), [(got, bands_ok)] = _invalid.launch(ctx.device, op, call)
        what = f"{op} {dtype} of shape {EMPTY_SHAPE}, strides {strides}"
        assert lc == 0, f"{what}: the kernel rejected a valid empty call [{lc}]: {lmsg}"
        assert sc == 0, f"{what}: the stream reported an error [{sc}]: {smsg}"
        assert bands_ok and got.size == 0, f"{what}: the kernel wrote outside its (empty) output"
    ctx.ran.add((op, dtype))


def _fill_values(dtype):
    """fill's values per DK_Scalar kind (int64, float64, bool), each exact in
    ``dtype`` by cast's rules (float to integer truncates toward zero)."""
    if dtype == "bool":
        return [0, 5, 0.5, -0.0, True, False]
    if dtype in FLOATS:
        return [-3, 0.25, True]
    return [77, 2.75 if dtype == "uint8" else -2.75, True]


def check_fill_scalars(ctx, op, dtype, shape):
    """fill with a value of every DK_Scalar kind, converted by cast's rules."""
    for v in _fill_values(dtype):
        attr = _raw.attrs("DK_FillAttrs", value=_raw.scalar(v))
        call = _invalid.Call([], SHAPE, dtype, attr)
        (lc, lmsg, sc, smsg), [(got, bands_ok)] = _invalid.launch(ctx.device, op, call)
        what = f"fill {dtype} with {type(v).__name__} {v!r}"
        assert lc == 0 and sc == 0, f"{what}: [{lc}] {lmsg} [{sc}] {smsg}"
        assert bands_ok, f"{what}: the kernel wrote outside its output"
        O.assert_close(got, O.fill(SHAPE, v, dtype), dtype, op="fill", case=f"scalars {what}")
    ctx.ran.add((op, dtype))


def _out_of_range_inputs(dtype):
    """Values of float ``dtype`` of which some truncate outside every integer
    dtype's range (NaN, infinities, the largest finite values, 2**31, 2**63),
    among values near the integer dtypes' limits and in every range."""
    big = float(np.finfo(O.np_dtype(dtype)).max) if dtype != "bfloat16" else 3.3e38
    v = [np.nan, -np.inf, np.inf, -big, big, 2.0**63, -2.0**63, 2.0**31, -2.0**31 - 4096,
         1e10, -1e10, 3e4, -3e4, 300.5, -300.5, 255.75, 256.0, 127.5, 128.0, -128.75, -129.0,
         -0.75, 0.75, -0.0, 0.0, 1.0, -1.0, 42.25, -7.5, 100.0, 2.0**31 - 65536, -2.0**31]
    return O.round_to(np.array(v, np.float64), dtype)


def check_cast_out_of_range(ctx, op, dtype, shape):
    """cast from a float dtype to every declared integer dtype of values the
    target cannot hold (NaN, infinities, past its range) among values it can:
    those are unspecified by the header, the others truncate toward zero
    exactly, and the call must neither fail nor write outside its output."""
    x = _out_of_range_inputs(dtype)
    ints = [d for d in spec_dtypes("cast")[0] if d in ctx.target.declared.get("cast", ())
            and d not in FLOATS and d != "bool"]
    with np.errstate(invalid="ignore"):
        t = np.trunc(x.astype(np.float64))
    for dst in ints:
        info = np.iinfo(O.np_dtype(dst))
        with np.errstate(invalid="ignore"):
            held = np.isfinite(t) & (t >= float(info.min)) & (t < float(info.max) + 1)  # exact
        call = _invalid.Call([(x, dtype)], x.shape, dst, None)
        (lc, lmsg, sc, smsg), [(got, bands_ok)] = _invalid.launch(ctx.device, "cast", call)
        what = f"cast {dtype}->{dst} of out-of-range values"
        assert lc == 0 and sc == 0, f"{what}: [{lc}] {lmsg} [{sc}] {smsg}"
        assert bands_ok, f"{what}: the kernel wrote outside its output"
        O.assert_close(got[held], O.cast(x[held], dst), dst, op="cast",
                       case=f"{what} (the {int(held.sum())} it holds) seed={ctx.seed}")
    ctx.ran.add(("cast", dtype))


def _index_bound_calls(op, dtype, rng, large):
    """[(what, ins, out shape, attrs, want or None)] of the index_bounds case:
    want None where the call holds an out-of-range index (to be reported)."""
    out = []
    ax1 = _raw.attrs("DK_AxisAttrs", axis=1)

    def call(what, x, idx, axis_attr, axis, want_ok, mangle=None):
        src = rand(dtype, idx.shape, rng)
        ins = [(x, dtype), (idx, "int64")] + ([(src, dtype)] if op == "scatter_add" else [])
        out_shape = x.shape if op == "scatter_add" else idx.shape
        want = None
        if want_ok:
            want = O.gather(x, axis, idx) if op == "gather" else O.scatter_add(x, axis, idx, src)
        out.append((what, ins, out_shape, axis_attr, want,
                    O.scatter_count(x.shape, axis, idx) if op == "scatter_add" and want_ok
                    else None, src, mangle))

    x = rand(dtype, (5, 7, 3), rng)
    # an index smaller than x in the dims but axis: valid, x's rest untouched by scatter_add
    call("index (4, 9, 2) into x (5, 7, 3)", x, rng.integers(0, 7, (4, 9, 2)).astype(np.int64),
         ax1, 1, True)
    if op == "gather":  # rows of one element: the index's stride 0 and out's 7 along them
        def size1_strides(in_views, out_views, operands):  # (any stride on a dim of size 1)
            ins_ = list(in_views)
            ins_[1] = ins_[1][:3] + ([9, 1, 0],)
            return ins_, [out_views[0][:3] + ([9, 1, 7],)]
        call("rows of one element, out's last stride 7", rand(dtype, (5, 7, 1), rng),
             rng.integers(0, 7, (5, 9, 1)).astype(np.int64), ax1, 1, True, size1_strides)
    for bad in (-1, 7):
        idx = rng.integers(0, 7, (5, 9, 3)).astype(np.int64)
        idx[4, 8, 2], idx[1, 3, 1] = bad, bad  # the last element and an inner one
        call(f"index value {bad} along an axis of 7", x, idx, ax1, 1, False)
    # x empty along the axis, the index not: every index out of range
    call("x (3, 4, 0) and an index (3, 4, 2) along axis 2", rand(dtype, (3, 4, 0), rng),
         np.zeros((3, 4, 2), np.int64), _raw.attrs("DK_AxisAttrs", axis=2), 2, False)
    if large:  # a bad index in every row, rows past any per-thread split
        xl = rand(dtype, (17, 9, 257), rng)
        idx = rng.integers(0, 9, (17, 11, 257)).astype(np.int64)
        idx[:, :, 5] = 9
        call("index (17, 11, 257) with a bad value in every row", xl, idx, ax1, 1, False)
    return out


def check_index_bounds(ctx, op, dtype, shape):
    """gather / scatter_add with an index smaller than x in the dims but axis
    (valid, judged), and with index values out of range (negative, equal to
    the size, into an x empty along the axis, in every row of a large index):
    reported from the call or the synchronize of its stream, once, with
    nothing written outside the output."""
    large = dtype == invalid_dtype(ctx.target, op)
    for what, ins, out_shape, attr, want, n, src, mangle in _index_bound_calls(op, dtype, ctx.rng(),
                                                                               large):
        call = _invalid.Call(ins, tuple(out_shape), dtype, attr, guard_inputs=True, mangle=mangle)
        (lc, lmsg, sc, smsg), [(got, bands_ok)] = _invalid.launch(ctx.device, op, call)
        what = f"{op} {dtype}: {what}"
        assert bands_ok, f"{what}: the kernel wrote outside its output"
        if want is None:
            assert lc != 0 or sc != 0, (f"{what}: neither the call nor the synchronize of its "
                                        f"stream reported the out-of-range index")
            ctx.device.synchronize()  # reported once: the device is clean again
            continue
        assert lc == 0 and sc == 0, f"{what}: [{lc}] {lmsg} [{sc}] {smsg}"
        scale = None
        if op == "scatter_add" and dtype in FLOATS:
            x, idx = ins[0][0], ins[1][0]
            scale = O.scatter_add(np.abs(x.astype(np.float64)), 1, idx,
                                  np.abs(src.astype(np.float64)))
        O.assert_close(got, want, dtype, op=op, n=n, scale=scale, case=f"index_bounds {what}")
    ctx.ran.add((op, dtype))


def _inplace_runs(op, dtype, caps, rng):
    """[(name, ins [(array, dtype)], out shape, out dtype, attrs)] of the in-place
    case: only calls whose input 0 has the output's shape and dtype (an exact
    alias needs both)."""
    if op in ELEMENTWISE:
        arity = _arity(op)
        out_dtype = "bool" if op in COMPARE or op in LOGICAL or op == "logical_not" else dtype
        runs = []
        for shape in (LAYOUT_SMALL, LAYOUT_LARGE, LAYOUT_UNIT_DIM):
            layouts = [("dense", [shape] * arity)]
            if arity > 1 and caps & _rules.CAPS["BROADCAST"]:
                layouts.append(("others_bcast", [shape] + [shape[:-1] + (1,)] * (arity - 1)))
            for name, shapes in layouts:
                xs = _elementwise_inputs(op, dtype, shapes, rng)
                runs.append((f"{name} {shape}", xs, shape, out_dtype, None))
    else:
        ins, out_shape, out_dtype, attr, _, _, _ = plan(op, dtype, rng)
        runs = [("direct", list(ins), tuple(out_shape), out_dtype, attr)]
    return [r for r in runs if r[1] and r[1][0][1] == r[3] and tuple(r[1][0][0].shape) == r[2]]


def _inplace_applies(op, dtype, caps, rng):
    """Whether ``_inplace_runs`` gives a call (elementwise ops: decided by the
    dtypes alone, without making the large inputs)."""
    if op in ELEMENTWISE:
        out_dtype = "bool" if op in COMPARE or op in LOGICAL or op == "logical_not" else dtype
        return ("bool" if op == "where" else dtype) == out_dtype
    return bool(_inplace_runs(op, dtype, caps, rng))


def check_inplace(ctx, op, dtype, shape):
    """DK_KERNEL_CAP_INPLACE: output 0 aliasing input 0 exactly gives the
    out-of-place call's bits."""
    dev = ctx.device
    runs = _inplace_runs(op, dtype, _rules.caps_of(ctx.target, op), ctx.rng())
    assert runs, f"{op} {dtype}: no call whose input 0 can be its output (a stale case list)"
    for name, ins, out_shape, out_dtype, attr in runs:
        what = f"{op} {dtype} {name}"
        (lc, lmsg, sc, smsg), [(want, ok)] = _invalid.launch(
            dev, op, _invalid.Call(list(ins), out_shape, out_dtype, attr))
        assert lc == 0 and sc == 0, f"{what} out of place: [{lc}] {lmsg} [{sc}] {smsg}"
        operands = [_raw.operand(dev, a, d, guard=(k == 0)) for k, (a, d) in enumerate(ins)]
        try:
            views = [o.view() for o in operands]
            lc, lmsg, sc, smsg = _raw.call(dev, op, views, [views[0]], attr)
            got, bands_ok = operands[0].fetch()
        finally:
            for o in operands:
                o.free()
        assert lc == 0, (f"{what}: the kernel declares DK_KERNEL_CAP_INPLACE but rejected output "
                         f"0 aliasing input 0 exactly [{lc}]: {lmsg}")
        assert sc == 0, f"{what} in place: the stream reported an error [{sc}]: {smsg}"
        assert bands_ok, f"{what} in place: the kernel wrote outside input 0 / output 0"
        bad = np.flatnonzero(got.reshape(-1).view(np.uint8) != want.reshape(-1).view(np.uint8))
        if bad.size:
            i = int(bad[0]) // got.itemsize
            raise AssertionError(
                f"{what}: with output 0 aliasing input 0 (DK_KERNEL_CAP_INPLACE) the result "
                f"differs from the out-of-place call at {int(np.sum(got.reshape(-1) != want.reshape(-1)))} "
                f"of {got.size} elements; first at flat index {i}: in place {got.reshape(-1)[i]!r}, "
                f"out of place {want.reshape(-1)[i]!r} (input 0 was {ins[0][0].reshape(-1)[i]!r}) "
                f"seed={ctx.seed}")
    ctx.ran.add((op, dtype))


def inplace_cases(target):
    """kernels/<op>/<dtype>/inplace for each kernel declaring DK_KERNEL_CAP_INPLACE
    (and dtype whose output is input 0's dtype); one skipped case when none does."""
    out = []
    rng = np.random.default_rng(0)
    declaring = [o["name"] for o in spec()["ops"]
                 if o["name"] in target.declared
                 and _rules.caps_of(target, o["name"]) & _rules.CAPS["INPLACE"]]
    for op in declaring:
        caps = _rules.caps_of(target, op)
        for dtype in spec_dtypes(op)[0]:
            if dtype in target.declared[op] and _inplace_applies(op, dtype, caps, rng):
                out.append(Case(id=f"kernels/{op}/{dtype}/inplace", section="kernels", op=op,
                                dtype=dtype, fn=functools.partial(check_inplace, op=op,
                                                                  dtype=dtype, shape="inplace")))
    if not declaring:
        name = getattr(getattr(target.device, "plugin", None), "name", "?")  # (a stand-in target)
        why = (f"not applicable: no kernel of plugin '{name}' declares "
               f"DK_KERNEL_CAP_INPLACE, so no call may alias an output to an input")

        def none_declared(ctx):
            raise Skip(why)
        out.append(Case(id="kernels/inplace", section="kernels", fn=none_declared,
                        required=False))
    return out


def _make_direct(op, dtype, shape):
    return functools.partial(check_direct, op=op, dtype=dtype, shape=shape)


def invalid_dtype(target, op):
    """The dtype an op's invalid calls are made in: float32 where declared."""
    dts = [d for d in spec_dtypes(op)[0] if d in target.declared.get(op, ())]
    return ("float32" if "float32" in dts else dts[0]) if dts else None


def invalid_cases(target, op):
    """[(rule, case name)] of ``op``'s invalid calls, and {rule id: why not}
    for the rules that apply to it but cannot be built for this plugin."""
    dtype = invalid_dtype(target, op)
    if dtype is None:
        return [], {}
    call = _invalid.base_call(plan, op, dtype, np.random.default_rng(0))
    made, why_not = [], {}
    for r in _rules.pairs_of(target, op):
        for name, params in _rules.case_names(r).items():
            broken = _invalid.broken_call(target, r, op, dtype, call, params)
            if isinstance(broken, str):
                why_not[r["id"]] = broken
                break
            if broken is not None:
                made.append((r, name))
    return made, why_not


def rule_coverage(target, cases):
    """The (rule, op) pairs of the argument rules (``_rules.pairs_of`` each
    op the plugin implements) and how many have their cases in ``cases``:
    {rules, pairs, covered, uncovered: [rule/op], not_applicable: [rule/op:
    why], sdk_cases, sdk_missing}. A pair whose case cannot be built for this
    plugin (it declares every dtype there is, so none is undeclared; an older
    core that cannot malform the call) is not applicable and says why; every
    other pair must be covered by all the rule's case names."""
    ids = {c.id for c in cases}
    covered, uncovered, not_applicable = 0, [], []
    for op in sorted(target.declared):
        if op not in _rules.spec_ops():
            continue
        _, why_not = invalid_cases(target, op)
        for r in _rules.pairs_of(target, op):
            if all(f"kernels/{op}/invalid/{n}" in ids for n in _rules.case_names(r)):
                covered += 1
            elif r["id"] in why_not:
                not_applicable.append(f"{r['id']}/{op}: {why_not[r['id']]}")
            else:
                uncovered.append(f"{r['id']}/{op}")
    sdk = [n for r in _rules.rules() for n in r.get("sdk_cases", ())]
    sdk_missing = [n for n in sdk if f"errors/invalid_argument/{n}" not in ids]
    return {"rules": len(_rules.rules()), "pairs": covered + len(uncovered), "covered": covered,
            "uncovered": uncovered, "not_applicable": not_applicable,
            "sdk_cases": len(sdk) - len(sdk_missing), "sdk_missing": sdk_missing}


def status(target):
    """The rule coverage for the status line and the report's implementation
    entry (registry.implementation_status): the counts, what is uncovered, and
    one line."""
    from . import errors

    cov = rule_coverage(target, cases(target) + errors.cases(target))
    return {"arg_rules": cov["rules"], "rule_pairs": cov["pairs"],
            "rule_pairs_covered": cov["covered"], "rule_pairs_uncovered": cov["uncovered"],
            "rule_pairs_not_applicable": cov["not_applicable"], "line": _rules.coverage_line(cov)}


def _family(check):
    """op_cases' maker for a family's checker: CHECK(ctx, op=, dtype=, shape=)."""
    return lambda o, d, s: functools.partial(check, op=o, dtype=d, shape=s)


#: The kernels families past ``direct``, in case order: (the ops it applies to,
#: its classes, or a function of the dtype giving them, its checker).
FAMILIES = (
    (lambda op: op == "cast", ["ladder"], check_cast_ladder),
    (lambda op: op in REDUCE or op in ("argmax", "cumsum"), ["axes"], check_axes),
    (lambda op: op in ("gather", "scatter_add"), ["axes"], check_index_axes),
    (lambda op: op == "iota", ["axes"], check_iota_axes),
    (lambda op: op in ("gather", "scatter_add"), ["index_bounds"], check_index_bounds),
    (lambda op: op == "fill", ["scalars"], check_fill_scalars),
    (lambda op: op == "cast", lambda d: ["out_of_range"] if d in FLOATS else [],
     check_cast_out_of_range),
    (lambda op: op in ELEMENTWISE, ["layouts"], check_layouts),
    (lambda op: op == "matmul",
     lambda d: ["layouts"] + (["widened"] if d in ("float16", "bfloat16") else []),
     check_matmul_layouts),
)


def cases(target):
    out = []
    for o in spec()["ops"]:
        op = o["name"]
        out += op_cases(target, "kernels", op, ["direct"], _make_direct)
        for applies, classes, check in FAMILIES:
            if applies(op):
                out += op_cases(target, "kernels", op, classes, _family(check))
        dtype = invalid_dtype(target, op)
        if dtype is not None and empty_applies(op):
            out.append(Case(id=f"kernels/{op}/{dtype}/empty", section="kernels", op=op,
                            dtype=dtype, fn=functools.partial(check_empty, op=op, dtype=dtype,
                                                              shape="empty")))
        for r, name in invalid_cases(target, op)[0]:
            out.append(Case(id=f"kernels/{op}/invalid/{name}", section="kernels", op=op,
                            dtype=dtype, fn=functools.partial(
                                _invalid.check, op=op, dtype=dtype, rule_id=r["id"], case=name,
                                plan=plan)))
    return out + inplace_cases(target)
