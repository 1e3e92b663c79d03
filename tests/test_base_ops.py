"""Every base op through the SDK, against the independent numpy oracle.

Needs: the reference CPU plugin (cpu:0). One table-driven test per op class;
each case id names op, dtype, shape class and the numpy seed, so a failure
replays with ``pytest -k``. The dtypes of an op are those base_ops.json
declares for it, intersected with what the plugin declares, plus the op's
required dtypes (so an op the plugin lacks fails instead of vanishing). A
NotImplementedByPlugin is a failure, never a skip. Tolerances: see
devicekit.testing.oracle (TOLERANCES and the per-op rules).
"""

import json
import re
import zlib
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import devicekit as dk
from devicekit import ops
from devicekit.testing import oracle as O
from devicekit.testing import philox

SPEC = json.loads((Path(__file__).resolve().parents[1] / "device_api/spec/base_ops.json").read_text())
ALL = SPEC["dtype_groups"]["all"]
FLOATS = ("float32", "float16", "bfloat16", "float64")


try:
    DECLARED = {k["op"]: set(k["dtypes"]) for k in dk.device("cpu:0").plugin.kernels()
                if k["implemented"]}
except dk.DeviceKitError:  # no cpu:0: the cpu fixture's tests say why; here test everything
    DECLARED = {}
ALIAS = {"gt": "lt", "ge": "le"}  # the SDK runs gt/ge as lt/le with swapped operands


def dtypes_of(op):
    op = ALIAS.get(op, op)
    spec = next(o for o in SPEC["ops"] if o["name"] == op)
    listed = ALL if spec["dtypes"] == "all" else spec["dtypes"]
    required = ALL if spec["required_dtypes"] == "all" else spec["required_dtypes"]
    have = DECLARED.get(op, set(listed)) if DECLARED else set(listed)
    return [d for d in listed if d in have or d in required]


def seed_of(*parts):
    return zlib.crc32("-".join(map(str, parts)).encode()) % 10_000


def cases(ops_, shapes, dtypes=None):
    """pytest params (op, dtype, shape class, seed) with readable ids."""
    out = []
    for op in ops_:
        for dt in (dtypes or dtypes_of(op)):
            for sh in shapes:
                s = seed_of(op, dt, sh)
                out.append(pytest.param(op, dt, sh, s, id=f"{op}-{dt}-{sh}-seed{s}"))
    return out


# -- inputs -----------------------------------------------------------------

def edges(dtype):
    """Edge values: NaN, +-Inf, +-0, subnormals, tiny, +-max, moderate values;
    integers: min, max and their neighbours."""
    d = O.np_dtype(dtype)
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
    d = O.np_dtype(dtype)
    if d == np.bool_:
        return rng.random(shape) < 0.5
    if d.kind in "iu":
        i = np.iinfo(d)
        lo, hi = (int(i.min), int(i.max)) if kind != "small" else (max(int(i.min), -3), 3)
        return rng.integers(lo, hi, size=shape, endpoint=True).astype(d)
    x = rng.standard_normal(shape)
    return {"normal": x, "positive": np.abs(x) * 4 + 1e-3, "small": np.round(x),
            "wide": x * 3}[kind].astype(d)


def place(arr, layout="dense"):
    """A device tensor equal to ``arr``: dense, a transpose ("T", 2-d) or a
    step slice ("step", 2-d) of a larger tensor."""
    if layout == "T":
        return dk.tensor(np.ascontiguousarray(arr.T)).T
    if layout == "step":
        big = np.zeros((arr.shape[0] * 2 + 1, arr.shape[1] * 3), arr.dtype)
        big[1::2, ::3] = arr
        return dk.tensor(big)[1::2, ::3]
    return dk.tensor(arr)


def run(op, fn, dtype, check=True):
    """Calls fn(), fetches the result, and checks that the SDK ran ``op``'s
    kernel, without a cast when the plugin declares ``dtype`` for it."""
    dk.reset_dispatch_stats()
    out = fn().numpy()
    if check and out.size:
        st = dk.dispatch_stats().get(op, {})
        assert st.get("kernel", 0) >= 1, f"no {op} kernel call recorded: {dk.dispatch_stats()}"
        if str(dtype) in DECLARED.get(op, ()):
            assert st.get("cast_inserted", 0) == 0, \
                f"{op} declares {dtype} but the SDK inserted a cast: {dk.dispatch_stats()}"
    return out


# -- elementwise ------------------------------------------------------------

UNARY = ["neg", "abs", "exp", "log", "sqrt", "rsqrt", "reciprocal", "sin", "cos", "tanh",
         "erf", "floor", "sign"]
DOMAIN = {"log": "positive", "sqrt": "positive", "rsqrt": "positive", "exp": "wide"}
SHAPES = {"0d": (), "empty": (0, 5), "one": (1,), "odd": (7, 13), "large": (257, 129),
          "T": (7, 13), "step": (7, 13), "edge": None}


@pytest.mark.parametrize("op,dtype,shape,seed", cases(UNARY, list(SHAPES)))
def test_unary(op, dtype, shape, seed):
    if shape == "edge":  # (rsqrt(-0.0) is left open: the spec fixes only rsqrt(+0))
        a = edges(dtype)
        a = a[~((a == 0) & np.signbit(a.astype(np.float64)))] if op == "rsqrt" else a
    else:
        a = rand(dtype, SHAPES[shape], np.random.default_rng(seed), DOMAIN.get(op, "normal"))
    t = place(a, shape if shape in ("T", "step") else "dense")
    got = run(op, lambda: getattr(ops, op)(t), dtype)
    O.assert_close(got, O.unary(op, a), dtype, op=op, case=f"{shape} seed={seed}")


BINARY = ["add", "sub", "mul", "div", "pow", "maximum", "minimum"]
BIN_SHAPES = {"0d": ((), ()), "empty": ((0, 5), (0, 5)), "odd": ((7, 13), (7, 13)),
              "large": ((257, 129), (257, 129)), "bcast": ((7, 1), (1, 13)),
              "bcast_rank": ((257, 129), (129,)), "scalar": ((), (7, 13)),
              "T": ((7, 13), (7, 13)), "step": ((7, 13), (7, 13)), "edge": None}


def binary_inputs(op, dtype, shape, rng):
    if shape == "edge":  # every pair of edge values, via broadcasting
        e = edges(dtype)
        return (dk.tensor(e[:, None]), dk.tensor(e[None, :])), (e[:, None], e[None, :])
    sa, sb = BIN_SHAPES[shape]
    kind_a, kind_b = ("positive", "small") if op == "pow" else ("normal", "normal")
    a, b = rand(dtype, sa, rng, kind_a), rand(dtype, sb, rng, kind_b)
    if op == "pow" and O.np_dtype(dtype).kind == "f":  # |results| < 2**11: no overflow edge
        a = np.minimum(a.astype(np.float64), 4).astype(a.dtype)
    if shape in ("T", "step"):
        return (place(a, shape), place(b, "step" if shape == "T" else "T")), (a, b)
    return (dk.tensor(a), dk.tensor(b)), (a, b)


@pytest.mark.parametrize("op,dtype,shape,seed", cases(BINARY, list(BIN_SHAPES)))
def test_binary(op, dtype, shape, seed):
    (ta, tb), (a, b) = binary_inputs(op, dtype, shape, np.random.default_rng(seed))
    got = run(op, lambda: getattr(ops, op)(ta, tb), dtype)
    O.assert_close(got, O.binary(op, a, b), dtype, op=op, case=f"{shape} seed={seed}")


COMPARE = ["eq", "ne", "lt", "le", "gt", "ge"]


@pytest.mark.parametrize("op,dtype,shape,seed",
                         cases(COMPARE, ["0d", "empty", "odd", "bcast", "T", "edge"]))
def test_compare(op, dtype, shape, seed):
    rng = np.random.default_rng(seed)
    (ta, tb), (a, b) = binary_inputs("eq", dtype, shape, rng)
    if shape != "edge":  # plant ties, or eq would almost never be true
        b = np.where(rng.random(np.broadcast_shapes(a.shape, b.shape)) < 0.3, a, b).astype(a.dtype)
        tb = dk.tensor(b)
    got = run(ALIAS.get(op, op), lambda: getattr(ops, op)(ta, tb), dtype)
    O.assert_close(got, O.compare(op, a, b), "bool", op=op, case=f"{shape} seed={seed}")


LOGICAL = ["logical_and", "logical_or", "logical_xor", "logical_not"]


@pytest.mark.parametrize("op,dtype,shape,seed",
                         cases(LOGICAL, ["0d", "empty", "odd", "bcast", "T"], ["bool"])
                         + cases(LOGICAL, ["edge"], ["bool", "float32", "int8"]))
def test_logical(op, dtype, shape, seed):
    (ta, tb), (a, b) = binary_inputs(op, dtype, shape, np.random.default_rng(seed))
    if op == "logical_not":
        got, want = run(op, lambda: ops.logical_not(ta), dtype), O.logical(op, a)
    else:
        got, want = run(op, lambda: getattr(ops, op)(ta, tb), dtype), O.logical(op, a, b)
    O.assert_close(got, want, "bool", op=op, case=f"{shape} seed={seed} (x != 0)")


@pytest.mark.parametrize("op,dtype,shape,seed",
                         cases(["where"], ["0d", "empty", "odd", "bcast", "T", "edge"]))
def test_where(op, dtype, shape, seed):
    rng = np.random.default_rng(seed)
    (ta, tb), (a, b) = binary_inputs("add", dtype, shape, rng)
    cond = rng.random(np.broadcast_shapes(np.shape(a), np.shape(b))[:1] + (1,)
                      if shape == "bcast" else np.shape(a)) < 0.5
    got = run("where", lambda: ops.where(dk.tensor(cond), ta, tb), dtype)
    O.assert_close(got, O.where(cond, a, b), dtype, op="where", case=f"{shape} seed={seed}")


# -- reductions and scans ---------------------------------------------------

RED_CASES = {"all": ((7, 13), None, False), "ax0": ((7, 13), 0, False),
             "ax-1_keep": ((7, 13), -1, True), "ax02": ((5, 6, 7), (0, 2), False),
             "ax20_keep": ((5, 6, 7), (2, 0), True), "large_all": ((257, 129), None, False),
             "large_ax0": ((257, 129), 0, True), "T_ax1": ((7, 13), 1, False),
             "0d": ((), None, False), "one": ((1,), 0, True), "empty_ax0": ((0, 5), 0, False),
             "edge": ((17,), 0, False)}
SDK_RED = {"reduce_sum": "sum", "reduce_max": "max", "reduce_min": "min"}


@pytest.mark.parametrize("op,dtype,shape,seed",
                         cases(SDK_RED, list(RED_CASES))
                         + cases(["reduce_sum"], ["ax0", "edge", "empty_ax0"], ["bool"]))
def test_reduction(op, dtype, shape, seed):
    rng = np.random.default_rng(seed)
    sh, axis, keep = RED_CASES[shape]
    x = edges(dtype) if shape == "edge" else rand(dtype, sh, rng)
    if shape == "edge" and op == "reduce_sum" and dtype in FLOATS:
        x = x[np.isfinite(x.astype(np.float64)) & (np.abs(x.astype(np.float64)) < 1e4)]
    t = place(x, "T" if shape == "T_ax1" else "dense")
    call = lambda: getattr(ops, SDK_RED[op])(t, axis=axis, keepdims=keep)  # noqa: E731
    if op != "reduce_sum" and x.size == 0:
        with pytest.raises(dk.InvalidArgumentError):
            call().numpy()
        return
    out_dt = dtype if dtype in FLOATS or op != "reduce_sum" else "int64"  # like torch.sum
    wide = x if out_dt == dtype else x.astype(np.int64)
    want = getattr(O, op)(wide, axis, keepdims=keep)
    n = int(np.prod([x.shape[a] for a in O._axes(x, axis)]))
    scale = O.reduce_sum(np.abs(x.astype(np.float64)), axis, keepdims=keep) \
        if dtype in FLOATS else None
    got = run(op, call, dtype, check=bool(x.ndim) and dtype != "bool")
    O.assert_close(got, want, out_dt, op=op, n=n, scale=scale, case=f"{shape} seed={seed}")


ARGMAX_CASES = {"all": ((7, 13), None, False), "ax0": ((7, 13), 0, False),
                "ax-1_keep": ((7, 13), -1, True), "large_ax1": ((257, 129), 1, False),
                "T_ax0": ((7, 13), 0, True), "0d": ((), None, False),
                "nan_rows": ((6, 5), 1, False), "ties": ((9, 11), 0, False)}


@pytest.mark.parametrize("op,dtype,shape,seed", cases(["argmax"], list(ARGMAX_CASES)))
def test_argmax(op, dtype, shape, seed):
    rng = np.random.default_rng(seed)
    sh, axis, keep = ARGMAX_CASES[shape]
    x = rand(dtype, sh, rng, "small" if shape == "ties" else "normal")
    if shape == "nan_rows" and dtype in FLOATS:  # row 0: two NaNs; row 1: -inf only; row 2: +-0
        x = x.astype(np.float64)
        x[0, [1, 3]] = np.nan
        x[1, :] = -np.inf
        x[2, :] = [-0.0, 0.0, -0.0, -1.0, 0.0]
        x[3, 4] = np.inf
        x = x.astype(O.np_dtype(dtype))
    t = place(x, "T" if shape.startswith("T") else "dense")
    got = run("argmax", lambda: ops.argmax(t, axis=axis, keepdims=keep), dtype, check=bool(x.ndim))
    O.assert_close(got, O.argmax(x, axis, keepdims=keep), "int64", op="argmax",
                   case=f"{shape} seed={seed}")


CUMSUM_CASES = {"1d": ((7,), 0), "ax0": ((7, 13), 0), "ax1": ((7, 13), 1), "ax-1": ((7, 13), -1),
                "large_ax0": ((257, 129), 0), "T_ax1": ((7, 13), 1), "empty": ((0, 5), 0),
                "one": ((1,), 0)}


@pytest.mark.parametrize("op,dtype,shape,seed",
                         cases(["cumsum"], list(CUMSUM_CASES)) + cases(["cumsum"], ["ax1"], ["bool"]))
def test_cumsum(op, dtype, shape, seed):
    sh, axis = CUMSUM_CASES[shape]
    x = rand(dtype, sh, np.random.default_rng(seed))
    out_dt = dtype if dtype in FLOATS else "int64"
    wide = x if out_dt == dtype else x.astype(np.int64)
    got = run("cumsum", lambda: ops.cumsum(place(x, "T" if shape.startswith("T") else "dense"),
                                           axis), dtype, check=dtype != "bool")
    scale = O.cumsum(np.abs(x.astype(np.float64)), axis) if dtype in FLOATS else None
    O.assert_close(got, O.cumsum(wide, axis), out_dt, op="cumsum", n=sh[axis], scale=scale,
                   case=f"{shape} seed={seed}")


# -- generators, indexing, matmul, random -----------------------------------

ARANGE = {"stop": (13,), "start_stop_step": (2, 40, 3), "negative_step": (10, -7, -2),
          "empty": (5, 5), "float": (0.5, 3.0, 0.25), "neg_float": (1.0, -2.0, -0.375),
          "large": (-1000, 1000)}


def _fits(args, dtype):
    """Integer dtypes get integer ranges they can hold (float -> int is cast's job)."""
    if dtype is None or dtype in FLOATS:
        return True
    i = np.iinfo(O.np_dtype(dtype))
    return all(isinstance(v, int) and i.min <= v <= i.max + 1 for v in args)


@pytest.mark.parametrize("case,dtype", [(c, d) for d in [None] + dtypes_of("iota")
                                        for c in ARANGE if _fits(ARANGE[c], d)])
def test_arange(case, dtype):
    args = ARANGE[case]
    start, stop, step = (0, args[0], 1) if len(args) == 1 else (*args, 1)[:3]
    out_dt = dtype or ("int64" if all(isinstance(v, int) for v in args) else "float32")
    n = max(0, -(-(stop - start) // step)) if isinstance(start + stop + step, int) \
        else max(0, int(np.ceil((stop - start) / step)))
    got = run("iota", lambda: ops.arange(*args, dtype=dtype), out_dt)
    O.assert_close(got, O.iota((n,), 0, start, step, out_dt), out_dt, op="iota", case=case)


GATHER = {"ax0": ((4, 5), 0, (3, 5)), "ax1": ((4, 5), 1, (4, 9)), "ax-1_3d": ((3, 4, 5), -1, (3, 4, 2)),
          "ax1_3d": ((3, 4, 5), 1, (3, 6, 5)), "smaller": ((4, 5), 0, (2, 3)), "1d": ((7,), 0, (11,)),
          "empty": ((4, 5), 0, (0, 5)), "T_ax0": ((5, 4), 0, (6, 4))}


@pytest.mark.parametrize("op,dtype,shape,seed",
                         cases(["gather", "scatter_add"], list(GATHER)))
def test_gather_scatter_add(op, dtype, shape, seed):
    rng = np.random.default_rng(seed)
    xs, axis, isz = GATHER[shape]
    x = rand(dtype, xs, rng)
    index = rng.integers(0, xs[axis], size=isz).astype(np.int64)
    tx, ti = place(x, "T" if shape.startswith("T") else "dense"), dk.tensor(index)
    if op == "gather":
        got = run(op, lambda: ops.gather(tx, axis, ti), dtype)
        O.assert_close(got, O.gather(x, axis, index), dtype, op=op, case=f"{shape} seed={seed}")
        return
    src = rand(dtype, isz, rng)
    got = run(op, lambda: ops.scatter_add(tx, axis, ti, dk.tensor(src)), dtype)
    scale = O.scatter_add(np.abs(x.astype(np.float64)), axis, index,
                          np.abs(src.astype(np.float64))) if dtype in FLOATS else None
    O.assert_close(got, O.scatter_add(x, axis, index, src), dtype, op=op, case=f"{shape} seed={seed}",
                   n=O.scatter_count(xs, axis, index), scale=scale)


@pytest.mark.parametrize("op", ["gather", "scatter_add"])
@pytest.mark.parametrize("bad", [4, -1])
def test_gather_scatter_add_out_of_range(op, bad):
    x, index = dk.tensor(np.zeros((4, 5), np.float32)), np.zeros((2, 5), np.int64)
    index[1, 3] = bad
    with pytest.raises(dk.DeviceKitError) as info:  # raised by the call or, asynchronously, by now
        args = (x, 0, dk.tensor(index)) + ((dk.tensor(np.ones((2, 5), np.float32)),)
                                          if op == "scatter_add" else ())
        getattr(ops, op)(*args).numpy()
        dk.synchronize()
    assert not isinstance(info.value, dk.NotImplementedByPlugin), info.value
    dk.synchronize()  # the error was reported once; the device is usable again


MATMUL = {"odd": ((7, 13), (13, 5)), "one": ((1, 1), (1, 1)), "k0": ((3, 0), (0, 4)),
          "vec_vec": ((13,), (13,)), "vec_mat": ((13,), (13, 5)), "mat_vec": ((7, 13), (13,)),
          "batch_bcast": ((2, 1, 3, 4), (5, 4, 2)), "large": ((65, 129), (129, 33)),
          "T": ((7, 13), (13, 5))}


@pytest.mark.parametrize("op,dtype,shape,seed", cases(["matmul"], list(MATMUL)))
def test_matmul(op, dtype, shape, seed):
    rng = np.random.default_rng(seed)
    sa, sb = MATMUL[shape]
    a, b = rand(dtype, sa, rng), rand(dtype, sb, rng)
    ta, tb = dk.tensor(a), place(b, "T" if shape == "T" else "dense")
    got = run("matmul", lambda: ta @ tb if shape == "odd" else ops.matmul(ta, tb), dtype,
              check=shape != "k0")  # K = 0 may be a plain zero fill
    scale = O.matmul(np.abs(a.astype(np.float64)), np.abs(b.astype(np.float64))) \
        if dtype in FLOATS else None
    O.assert_close(got, O.matmul(a, b), dtype, op="matmul", n=sa[-1], scale=scale,
                   case=f"{shape} seed={seed}")


def test_philox_known_answers():
    """The numpy Philox4x32-10 against Random123's KAT vectors, bit-exact."""
    vectors = philox.kat_vectors()
    assert len(vectors) >= 3
    for counter, key, want in vectors:
        got = philox.philox4x32_10(counter, key)
        assert (got == want).all(), f"counter {counter} key {key}: got {got}, want {want}"


def test_philox_element_to_counter_mapping():
    """Element n is word n % 4 of the block at counter offset + n // 4 (mod
    2**64), key = the seed's two halves; uniform = (w >> 8) * 2**-24."""
    seed, offset = 0x0123456789ABCDEF, 2**64 - 2
    words = philox.random_bits((3, 3), seed, offset).reshape(-1).view(np.uint32)
    for n, w in enumerate(words):
        c = (offset + n // 4) % 2**64
        block = philox.philox4x32_10([c & 0xFFFFFFFF, c >> 32, 0, 0], [seed & 0xFFFFFFFF, seed >> 32])
        assert w == block[n % 4], f"element {n}: {w:#x} != word {n % 4} of {block}"
    u = philox.random_uniform((3, 3), seed, offset, np.float32).reshape(-1)
    assert (u == (words >> 8) * 2.0**-24).all()


RANDOM = [((), 0, 0), ((0,), 1, 0), ((5,), 2**64 - 1, 0), ((3, 7), 0x243F6A8885A308D3, 5),
          ((257, 129), 42, 2**64 - 3), ((1, 2, 3), 7, 2**32 - 1)]


@pytest.mark.parametrize("dtype", ["int32"] + dtypes_of("random_uniform"))
@pytest.mark.parametrize("shape,seed,offset", RANDOM, ids=lambda v: str(v).replace(" ", ""))
def test_random(dtype, shape, seed, offset):
    if dtype == "int32":
        got = run("random_bits", lambda: ops.random_bits(shape, seed, offset), dtype)
        O.assert_close(got, philox.random_bits(shape, seed, offset), "int32", op="random_bits",
                       case=f"shape={shape} seed={seed} offset={offset}")
    else:
        got = run("random_uniform", lambda: ops.rand(shape, seed, offset, dtype=getattr(dk, dtype)), dtype)
        O.assert_close(got, philox.random_uniform(shape, seed, offset, O.np_dtype(dtype)), dtype,
                       op="random_uniform", case=f"shape={shape} seed={seed} offset={offset}")


@pytest.mark.parametrize("dtype", dtypes_of("random_uniform"))
def test_uniform_is_below_one_and_exact_in_every_float_dtype(dtype):
    # 2^16 samples hit words near 2^32, where rounding a 24-bit fraction to
    # float16/bfloat16 would give exactly 1.0.
    u = ops.rand((1 << 16,), seed=3, dtype=getattr(dk, dtype)).numpy().astype(np.float64)
    assert u.min() >= 0.0 and u.max() < 1.0, (u.min(), u.max())
    assert len(np.unique(u)) > 100


# -- the SDK surface on top: promotion, operators, errors --------------------

PROMOTE = [("int8", "uint8", "add", "int32"), ("float16", "bfloat16", "mul", "float32"),
           ("int32", "float16", "sub", "float16"), ("bool", "int8", "add", "int8"),
           ("int64", "float32", "maximum", "float32"), ("float32", "float64", "add", "float64"),
           ("uint8", "int64", "mul", "int64"), ("int32", "int32", "div", "float32"),
           ("int8", "int8", "pow", "float32"), ("bool", "bool", "add", "bool"),
           ("int8", 3, "add", "int8"), ("int8", 1.5, "mul", "float32"),
           ("float16", 2.5, "mul", "float16"), ("bool", 1.5, "add", "float32")]


@pytest.mark.parametrize("da,db,op,want", PROMOTE, ids=lambda v: str(v))
def test_type_promotion(da, db, op, want):
    rng = np.random.default_rng(seed_of(da, db, op))
    a = rand(da, (7, 13), rng, "small")
    b = rand(db, (7, 13), rng, "small") if isinstance(db, str) else db
    tb = dk.tensor(b) if isinstance(db, str) else db
    got = getattr(ops, op)(dk.tensor(a), tb).numpy()
    bw = O.cast(b, want) if isinstance(db, str) else O.cast(np.array(db), want)
    O.assert_close(got, O.binary(op, O.cast(a, want), bw), want, op=op, case=f"{da} {op} {db}")


def test_float_only_unary_on_integers_computes_in_float32():
    x = np.arange(-3, 9, dtype=np.int32)
    for op in ("exp", "sqrt", "sin"):
        got = getattr(ops, op)(dk.tensor(x)).numpy()
        O.assert_close(got, O.unary(op, x.astype(np.float32)), "float32", op=op, case="int32 input")


def test_tensor_methods_and_operators_match_ops():
    rng = np.random.default_rng(11)
    a, b = rand("float32", (7, 13), rng), rand("float32", (7, 13), rng, "positive")
    ta, tb = dk.tensor(a), dk.tensor(b)
    pairs = {"+": (ta + tb, ops.add(ta, tb)), "-": (ta - tb, ops.sub(ta, tb)),
             "*": (ta * tb, ops.mul(ta, tb)), "/": (ta / tb, ops.div(ta, tb)),
             "**": (tb ** ta, ops.pow(tb, ta)), "@": (ta @ tb.T, ops.matmul(ta, tb.T)),
             "neg": (-ta, ops.neg(ta)), "abs": (abs(ta), ops.abs(ta)), "==": (ta == tb, ops.eq(ta, tb)),
             "!=": (ta != tb, ops.ne(ta, tb)), "<": (ta < tb, ops.lt(ta, tb)),
             "<=": (ta <= tb, ops.le(ta, tb)), ">": (ta > tb, ops.gt(ta, tb)),
             ">=": (ta >= tb, ops.ge(ta, tb)), "sum": (ta.sum(1, True), ops.sum(ta, 1, True)),
             "max": (ta.max(0), ops.max(ta, 0)), "min": (ta.min(), ops.min(ta)),
             "argmax": (ta.argmax(1), ops.argmax(ta, 1)), "exp": (ta.exp(), ops.exp(ta)),
             "tanh": (ta.tanh(), ops.tanh(ta))}
    for name, (method, fn) in pairs.items():
        m, f = method.numpy(), fn.numpy()
        assert m.dtype == f.dtype and m.shape == f.shape and np.array_equal(m, f, equal_nan=True), name


def test_shape_mismatch_names_both_shapes():
    with pytest.raises(dk.InvalidArgumentError) as info:
        ops.add(dk.tensor(np.zeros((3, 4), np.float32)), dk.tensor(np.zeros((5,), np.float32)))
    msg = str(info.value)
    assert re.search(r"3, 4", msg) and re.search(r"\b5\b", msg), msg
