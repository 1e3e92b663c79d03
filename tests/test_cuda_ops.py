"""The CUDA plugin's 1.1 base-op kernels (reference_backend/cuda/src/kernels_
elementwise.cu, _reduce.cu, _index.cu, _matmul.cu, _random.cu), run in its
emulated build under the SIMT emulator's checks, against the CPU plugin.

What the kernels claim beyond "within the conformance bound", each tested
here on the same data on cpu:0 and cuda_sim:0:
- the exact ops (neg, abs, sqrt, reciprocal, floor, sign, sub, mul, div,
  maximum, minimum, the comparisons, where) give the CPU plugin's bits on
  every dtype they declare, special values (NaN, +-0, +-inf) included, on
  broadcast and strided (permuted, sliced) inputs read in place;
- scatter_add, cumsum, iota, gather, random_bits and random_uniform give the
  CPU plugin's bits (same summation order and accumulator: float32 in
  double, float16 / bfloat16 in float32);
- reduce_max / reduce_min / argmax give its bits (NaN propagates; argmax
  takes the first index on ties and the first NaN) on strided inputs, and
  reduce_sum is bit-reproducible from run to run;
- integer matmul and sums wrap like the CPU plugin's; float matmul on
  transposed and broadcast-batch operands matches it within the bound;
- an out-of-range gather or scatter_add index is reported at the next
  synchronize, naming the op.

Needs: the cuda_sim plugin (installed, DEVICEKIT_CUDA_SIM_LIBRARY, or built for the
session by conftest.py with cmake and a C++ compiler) and the CPU
plugin.
"""

import numpy as np
import pytest

import devicekit as dk
from devicekit import ops

DEV, CPU = "cuda_sim:0", "cpu:0"
FLOATS = ["float32", "float16", "bfloat16", "float64"]
INTS = ["int8", "int32", "int64", "uint8"]


# The installed cuda_sim, or one built and loaded for the session (conftest.py).
pytestmark = pytest.mark.usefixtures("cuda_sim_device")

SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, 1e-3, -7.25, 100.0, np.inf, -np.inf, np.nan]


def _data(dtype, shape, seed):
    """Values of `dtype` (a name), the special ones first where they fit."""
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    if dtype in FLOATS:
        x = np.concatenate([SPECIAL, rng.standard_normal(n) * 4])[:n]
    elif dtype == "bool":
        x = rng.random(n) < 0.5
    else:
        lo, hi = (0, 255) if dtype == "uint8" else (-128, 127)
        x = np.concatenate([[lo, hi, 0, -1 if lo < 0 else 1], rng.integers(lo, hi + 1, n)])[:n]
        x = x.astype(np.int16)  # (not int64: _both keeps int64 arrays as indices)
    return x.reshape(shape)


def _both(fn, *arrays, dtype=None):
    """fn's result on cpu:0 and on cuda_sim:0, as numpy arrays. Arrays become
    `dtype` but bool and int64 ones (conditions, indices)."""
    out = []
    for dev in (CPU, DEV):
        ts = [dk.tensor(a, device=dev,
                        dtype=None if np.asarray(a).dtype in (bool, np.int64) else dtype)
              for a in arrays]
        out.append(fn(*ts).numpy())
    return out


def _same_bits(a, b):
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


UNARY_EXACT = {"neg": INTS + FLOATS, "abs": INTS + FLOATS, "sqrt": FLOATS,
               "reciprocal": FLOATS, "floor": INTS + FLOATS, "sign": INTS + FLOATS}
BINARY_EXACT = {"sub": INTS + FLOATS, "mul": INTS + FLOATS + ["bool"], "div": FLOATS,
                "maximum": INTS + FLOATS, "minimum": INTS + FLOATS, "eq": INTS + FLOATS,
                "ne": INTS + FLOATS, "lt": INTS + FLOATS, "le": INTS + FLOATS}


@pytest.mark.parametrize("op", sorted(UNARY_EXACT))
def test_exact_unary_ops_give_the_cpu_plugins_bits(op):
    for dt in UNARY_EXACT[op]:
        x = _data(dt, (6, 5, 7), 1)
        fn = getattr(ops, op)
        a, b = _both(lambda t, fn=fn: fn(t.permute(2, 0, 1)), x, dtype=dt)  # strided, read in place
        assert _same_bits(a, b), (op, dt, a, b)


@pytest.mark.parametrize("op", sorted(BINARY_EXACT))
def test_exact_binary_ops_give_the_cpu_plugins_bits(op):
    fn = getattr(ops, op)
    for dt in BINARY_EXACT[op]:
        x, y = _data(dt, (4, 13, 6), 2), _data(dt, (13, 1), 3)
        for f in (lambda p, q: fn(p, q),                       # broadcast
                  lambda p, q: fn(p[:, ::2, 1:], q[::2]),       # sliced and broadcast
                  lambda p, q: fn(p.permute(1, 0, 2), q.view(13, 1, 1))):  # permuted
            a, b = _both(f, x, y, dtype=dt)
            assert _same_bits(a, b), (op, dt, a, b)


def test_where_gives_the_cpu_plugins_bits_on_every_dtype():
    for dt in INTS + FLOATS + ["bool"]:
        c = _data("bool", (5, 1, 9), 4)
        a, b = _both(lambda k, p, q: ops.where(k, p, q), c, _data(dt, (3, 9), 5),
                     _data(dt, (5, 3, 1), 6), dtype=dt)
        assert _same_bits(a, b), dt


@pytest.mark.parametrize("dt", INTS + FLOATS)
def test_scatter_add_cumsum_and_gather_give_the_cpu_plugins_bits(dt):
    rng = np.random.default_rng(7)
    x, src = _data(dt, (6, 40), 8), _data(dt, (9, 40), 9)
    index = rng.integers(0, 6, (9, 40))
    a, b = _both(lambda p, i, s: ops.scatter_add(p, 0, i, s), x, index, src, dtype=dt)
    assert _same_bits(a, b), "scatter_add"
    a, b = _both(lambda p, i: ops.gather(p, 0, i), x, index % 6, dtype=dt)
    assert _same_bits(a, b), "gather"
    if dt in FLOATS:  # cumsum of finite values (a NaN would hide the summation order)
        x = np.random.default_rng(10).standard_normal((3, 700, 4))
    for axis in (0, 1, 2):
        data = x if dt in FLOATS else _data(dt, (3, 70, 4), 11)
        a, b = _both(lambda p, axis=axis: ops.cumsum(p, axis), data, dtype=dt)
        assert _same_bits(a, b), ("cumsum", axis)


def test_random_and_iota_give_the_cpu_plugins_bits():
    for dt in FLOATS:
        a, b = (ops.rand((5, 1003), seed=2**40 + 3, offset=2**33 - 7, dtype=dt,
                         device=d).numpy() for d in (CPU, DEV))
        assert _same_bits(a, b), dt
    a, b = (ops.random_bits((7, 9), seed=11, offset=5, device=d).numpy() for d in (CPU, DEV))
    assert _same_bits(a, b)
    for dt in INTS + FLOATS:
        a, b = (ops.arange(1, 120, 3, dtype=dt, device=d).numpy() for d in (CPU, DEV))
        assert _same_bits(a, b), dt
    for dt in FLOATS:  # a float step: start + i * step in double, rounded once
        a, b = (ops.arange(-3.3, 90.0, 0.7, dtype=dt, device=d).numpy() for d in (CPU, DEV))
        assert _same_bits(a, b), dt


@pytest.mark.parametrize("dt", INTS + FLOATS)
def test_max_min_argmax_give_the_cpu_plugins_bits_and_sums_are_reproducible(dt):
    x = _data(dt, (9, 70, 6), 12)
    if dt in FLOATS:
        x[2, 5:, :] = 1.0   # ties: the first index
        x[3, 10, 2] = x[3, 20, 2] = np.nan  # the first NaN wins
    for axis in (0, 1, 2, (0, 2), (1, 2)):
        for name in ("max", "min"):
            fn = getattr(ops, name)
            a, b = _both(lambda t, fn=fn, axis=axis: fn(t.permute(1, 0, 2), axis=axis), x,
                         dtype=dt)
            assert _same_bits(a, b), (name, axis)
    for axis in (0, 1, 2):
        a, b = _both(lambda t, axis=axis: ops.argmax(t, axis=axis), x, dtype=dt)
        assert _same_bits(a, b), ("argmax", axis)
    t = dk.tensor(x, device=DEV, dtype=dt).permute(2, 1, 0)
    runs = [ops.sum(t, axis=(1, 2)).numpy() for _ in range(2)]
    assert _same_bits(*runs)
    if dt in INTS:  # wrapping sums: exact
        a, b = _both(lambda p: ops.sum(p, axis=(0, 1)), x, dtype=dt)
        assert _same_bits(a, b)


def test_matmul_reads_transposed_and_broadcast_operands():
    rng = np.random.default_rng(13)
    for dt in INTS:
        a, b = _data(dt, (3, 70, 33), 14), _data(dt, (33, 65), 15)
        p, q = _both(lambda x, y: ops.matmul(x, y), a, b, dtype=dt)  # batch-broadcast b
        assert _same_bits(p, q), dt
    for dt in FLOATS:
        a, b = rng.standard_normal((2, 67, 40)), rng.standard_normal((2, 70, 40))
        p, q = _both(lambda x, y: ops.matmul(x, y.transpose(1, 2)), a, b, dtype=dt)
        tol = {"float32": 1e-5, "float64": 1e-12, "float16": 4e-3, "bfloat16": 3e-2}[dt]
        np.testing.assert_allclose(q.astype(np.float64), p.astype(np.float64),
                                   rtol=tol, atol=tol * 8)


@pytest.mark.parametrize("op", ["gather", "scatter_add"])
def test_an_out_of_range_index_is_reported_naming_the_op(op):
    x = dk.tensor(np.zeros((4, 3), np.float32), device=DEV)
    index = dk.tensor(np.array([[0, 1, 2], [3, 4, 0]]), device=DEV)
    with pytest.raises(dk.errors.DeviceKitError) as e:
        if op == "gather":
            ops.gather(x, 0, index).numpy()
        else:
            ops.scatter_add(x, 0, index, dk.tensor(np.ones((2, 3), np.float32),
                                                   device=DEV)).numpy()
    assert op in str(e.value) and "4" in str(e.value), str(e.value)
