"""The SDK's runtime on the reference CPU plugin ("cpu:0"): host<->device round
trips of every dtype and view, raw buffers, streams and events, the caching
allocator, and ops.add.

Needs: the reference CPU plugin (the ``cpu`` fixture).
"""

from __future__ import annotations

import gc
import math

import ml_dtypes
import numpy as np
import pytest

import devicekit
from devicekit import InvalidArgumentError

# devicekit dtype attribute name -> the numpy dtype its numpy() returns.
NP_DTYPES = {name: np.dtype(t) for name, t in [
    ("float32", np.float32), ("float16", np.float16), ("bfloat16", ml_dtypes.bfloat16),
    ("float64", np.float64), ("int8", np.int8), ("int32", np.int32), ("int64", np.int64),
    ("uint8", np.uint8), ("bool_", np.bool_)]}
FLOATS = ("float32", "float16", "bfloat16", "float64")
SPECIALS = [0.0, -0.0, 1.0, -2.5, np.inf, -np.inf, np.nan, 65504.0, 6e-8]


def sample(name, n=64, seed=0):
    """``n`` values of dtype ``name``: random, plus the extremes and (floats)
    NaN, +-Inf and -0.0."""
    dt, rng = NP_DTYPES[name], np.random.default_rng(seed)
    if name == "bool_":
        return rng.integers(0, 2, n).astype(dt)
    if name in FLOATS:
        values = np.concatenate([np.array(SPECIALS, np.float64), rng.standard_normal(n) * 100])
        return values.astype(dt)[:n]
    info = np.iinfo(dt)
    values = rng.integers(info.min, info.max, n, dtype=dt, endpoint=True)
    values[:4] = [info.min, info.max, 0, 1][:n]
    return values


def assert_same_bits(actual, expected):
    """Equal dtype, shape and bytes (so NaN payloads and -0.0 count)."""
    assert isinstance(actual, np.ndarray)
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    np.testing.assert_array_equal(np.ascontiguousarray(actual).view(np.uint8),
                                  np.ascontiguousarray(expected).view(np.uint8))


def assert_same_values(actual, expected):
    """Equal dtype, shape and values; NaN matches NaN and the sign of zero counts.
    (numpy's assert_array_equal cannot match NaN in bfloat16 arrays.)"""
    assert isinstance(actual, np.ndarray)
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    if expected.dtype.kind in "iub":
        np.testing.assert_array_equal(actual, expected)
        return
    a, e = actual.astype(np.float64), expected.astype(np.float64)  # exact widening
    np.testing.assert_array_equal(np.isnan(a), np.isnan(e), err_msg="NaN positions")
    keep = ~np.isnan(e)
    np.testing.assert_array_equal(a[keep], e[keep])
    np.testing.assert_array_equal(np.signbit(a[keep]), np.signbit(e[keep]), err_msg="signs")


def to_device(array, cpu):
    return devicekit.tensor(array, device=cpu)


# --------------------------------------------------------------------------
# Tensors: round trips and views
# --------------------------------------------------------------------------

@pytest.mark.parametrize("name", NP_DTYPES)
def test_round_trip_every_dtype_bit_exact(cpu, name):
    host = sample(name).reshape(4, 16)
    t = to_device(host, cpu)
    assert t.dtype == getattr(devicekit, name)
    assert t.shape == (4, 16) and t.ndim == 2 and t.numel() == 64
    assert t.device.name == "cpu:0"
    assert_same_bits(t.numpy(), host)
    assert_same_bits(t.to("cpu:0").numpy(), host)


@pytest.mark.parametrize("shape", [(0,), (2, 0, 3), (1,), (1, 1, 1), ()], ids=str)
@pytest.mark.parametrize("name", ["float32", "bfloat16", "int64", "bool_"])
def test_round_trip_empty_single_and_scalar(cpu, name, shape):
    host = sample(name, n=max(1, math.prod(shape)))[:math.prod(shape)].reshape(shape)
    t = to_device(host, cpu)
    assert t.shape == shape and t.ndim == len(shape) and t.numel() == math.prod(shape)
    assert_same_bits(t.numpy(), host)


def test_numpy_returns_a_new_array(cpu):
    t = to_device(np.arange(6, dtype=np.int32), cpu)
    first = t.numpy()
    first[:] = -1
    np.testing.assert_array_equal(t.numpy(), np.arange(6, dtype=np.int32))
    assert not np.shares_memory(t.numpy(), t.numpy())


@pytest.mark.parametrize("dtype, expected", [
    ("int32", np.int32), (np.float16, np.float16), (devicekit.bfloat16, ml_dtypes.bfloat16),
    ("float64", np.float64), (devicekit.bool_, np.bool_)])
def test_tensor_dtype_argument(cpu, dtype, expected):
    values = [0, 1, 2, 3]
    t = devicekit.tensor(values, device="cpu:0", dtype=dtype)
    assert_same_bits(t.numpy(), np.array(values).astype(expected))


@pytest.mark.parametrize("src, dst", [("float32", "float16"), ("float32", "bfloat16"),
                                      ("float32", "int32"), ("float64", "float32"),
                                      ("float32", "bool_"), ("bool_", "float32"),
                                      ("int64", "int32"), ("int32", "float32")])
def test_to_dtype_matches_numpy_cast(cpu, src, dst):
    host = np.array([0.0, -0.0, 1.0, -2.7, 2.7, 1 / 3, 100.25, -7.5, 1e5],
                    np.float64).astype(NP_DTYPES[src])
    t = to_device(host, cpu).to(getattr(devicekit, dst))
    assert t.dtype == getattr(devicekit, dst)
    with np.errstate(over="ignore"):  # 1e5 -> float16 is inf, as on the device
        expected = host.astype(NP_DTYPES[dst])
    assert_same_bits(t.numpy(), expected)


# (view on the tensor, the same view on the numpy array)
VIEWS = {
    "transpose": (lambda t: t.transpose(0, 2), lambda a: a.swapaxes(0, 2)),
    "permute": (lambda t: t.permute(3, 1, 0, 2), lambda a: a.transpose(3, 1, 0, 2)),
    "step_slices": (lambda t: t[:, ::2, 1:, ::3], lambda a: a[:, ::2, 1:, ::3]),
    "int_index": (lambda t: t[1, :, 2], lambda a: a[1, :, 2]),
    "negative_int": (lambda t: t[-1, 1:3], lambda a: a[-1, 1:3]),
    "ellipsis_none": (lambda t: t[..., None, 1], lambda a: a[..., None, 1]),
    "expand": (lambda t: t[:, :1, :, None, 2].expand(2, 3, 4, 5),
               lambda a: np.broadcast_to(a[:, :1, :, None, 2], (2, 3, 4, 5))),
    "slice_of_transpose": (lambda t: t.transpose(1, 3)[:, 1:, ::2],
                           lambda a: a.swapaxes(1, 3)[:, 1:, ::2]),
    "reshape": (lambda t: t.reshape(6, 20), lambda a: a.reshape(6, 20)),
    "reshape_of_transpose": (lambda t: t.transpose(0, 1).reshape(3, 40),
                             lambda a: a.swapaxes(0, 1).reshape(3, 40)),
}


@pytest.mark.parametrize("view", VIEWS)
@pytest.mark.parametrize("name", ["float32", "bfloat16", "int64", "uint8", "bool_"])
def test_views_match_numpy(cpu, name, view):
    base = (np.arange(120) % 97).reshape(2, 3, 4, 5).astype(NP_DTYPES[name])
    tensor_view, numpy_view = VIEWS[view]
    t, expected = tensor_view(to_device(base, cpu)), numpy_view(base)
    assert t.shape == expected.shape
    assert_same_bits(t.numpy(), np.ascontiguousarray(expected))
    assert t.is_contiguous() == expected.flags.c_contiguous
    if view not in ("reshape_of_transpose",):  # may copy: strides are the SDK's choice
        # Strides of size-1 dims are arbitrary (numpy and torch differ there).
        itemsize = expected.itemsize
        assert [s for s, n in zip(t.strides, t.shape) if n > 1] == \
            [s // itemsize for s, n in zip(expected.strides, expected.shape) if n > 1]
    dense = t.contiguous()
    assert dense.is_contiguous()
    assert_same_bits(dense.numpy(), np.ascontiguousarray(expected))


def test_contiguous_strides_are_row_major(cpu):
    t = to_device(np.zeros((2, 3, 4, 5), np.float16), cpu)
    assert t.strides == (60, 20, 5, 1) and t.is_contiguous()
    assert t.transpose(0, 3).strides == (1, 20, 5, 60)


# --------------------------------------------------------------------------
# Raw buffers, streams and events
# --------------------------------------------------------------------------

def read_buffer(cpu, buf, nbytes=None, offset=0):
    out = np.empty(buf.nbytes - offset if nbytes is None else nbytes, np.uint8)
    cpu.copy_d2h(out, buf, src_offset=offset)
    return out


def test_buffer_alignment_and_round_trip_odd_size(cpu):
    buf = cpu.alloc(1001)
    assert buf.nbytes == 1001
    assert buf.ptr % cpu.properties["alignment"] == 0
    host = np.random.default_rng(1).integers(0, 256, 1001, dtype=np.uint8)
    cpu.copy_h2d(buf, host)
    assert_same_bits(read_buffer(cpu, buf), host)


@pytest.mark.parametrize("dst_offset, src_offset, nbytes", [(7, 3, 333), (1, 0, 1), (0, 13, 986),
                                                             (999, 5, 2), (500, 500, 0)])
def test_buffer_copies_at_unaligned_offsets(cpu, dst_offset, src_offset, nbytes):
    rng = np.random.default_rng(dst_offset * 1000 + nbytes)
    src_host = rng.integers(0, 256, 1001, dtype=np.uint8)
    src, dst = cpu.alloc(1001), cpu.alloc(1001)
    cpu.copy_h2d(src, src_host)
    cpu.copy_h2d(dst, np.full(1001, 0xAB, np.uint8))
    cpu.copy_d2d(dst, src, nbytes, dst_offset=dst_offset, src_offset=src_offset)
    expected = np.full(1001, 0xAB, np.uint8)
    expected[dst_offset:dst_offset + nbytes] = src_host[src_offset:src_offset + nbytes]
    assert_same_bits(read_buffer(cpu, dst), expected)  # nothing written outside
    # h2d and d2h at offsets too.
    cpu.copy_h2d(dst, src_host[:nbytes], dst_offset=dst_offset)
    assert_same_bits(read_buffer(cpu, dst, nbytes, dst_offset), src_host[:nbytes])


def test_zero_byte_buffer(cpu):
    buf = cpu.alloc(0)
    assert buf.nbytes == 0
    cpu.copy_h2d(buf, np.empty(0, np.uint8))
    assert read_buffer(cpu, buf).size == 0


def test_copy_rejects_out_of_bounds_and_non_contiguous(cpu):
    buf = cpu.alloc(16)
    with pytest.raises(InvalidArgumentError) as excinfo:
        cpu.copy_h2d(buf, np.zeros(17, np.uint8))
    assert "17" in str(excinfo.value) and "16" in str(excinfo.value)
    with pytest.raises(InvalidArgumentError):
        cpu.copy_d2h(np.empty(8, np.uint8), buf, src_offset=9)
    with pytest.raises(InvalidArgumentError) as excinfo:
        cpu.copy_h2d(buf, np.zeros(32, np.uint8)[::2])
    assert "contiguous" in str(excinfo.value)


def test_async_copies_ordered_by_events_across_streams(cpu):
    n = 32 << 20
    producer, consumer = cpu.stream(), cpu.stream()
    src, dst = cpu.alloc(n), cpu.alloc(n)
    rng = np.random.default_rng(7)
    for round_ in range(3):
        host = rng.integers(0, 256, n, dtype=np.uint8)
        expected = host.copy()
        out = np.empty(n, np.uint8)
        cpu.copy_h2d(src, host, stream=producer)
        del host  # the SDK keeps the source alive until the stream passes the copy
        gc.collect()
        uploaded = cpu.event()
        uploaded.record(producer)
        consumer.wait_event(uploaded)
        cpu.copy_d2d(dst, src, n, stream=consumer)
        cpu.copy_d2h(out, dst, stream=consumer)
        consumer.synchronize()
        assert consumer.query() and uploaded.query()
        assert np.array_equal(out, expected), f"round {round_}: stale or torn data"
    producer.synchronize()
    assert producer.query()


def test_event_timing_of_ordered_events(cpu):
    stream = cpu.stream()
    buf = cpu.alloc(8 << 20)
    start, end = cpu.event(), cpu.event()
    start.record(stream)
    cpu.copy_h2d(buf, np.ones(8 << 20, np.uint8), stream=stream)
    end.record(stream)
    end.synchronize()
    assert start.query() and end.query()
    elapsed = start.elapsed_ms(end)
    assert isinstance(elapsed, float) and math.isfinite(elapsed) and elapsed >= 0.0
    cpu.synchronize()
    assert cpu.event().query()  # never recorded: counts as reached (device API)


# --------------------------------------------------------------------------
# Memory statistics and the caching allocator
# --------------------------------------------------------------------------

def settle(cpu):
    gc.collect()
    devicekit.synchronize(cpu)


def test_memory_stats_keys_and_invariants(cpu):
    stats = cpu.memory_stats()
    assert {"allocated_bytes", "reserved_bytes", "bytes_in_use", "peak_bytes_in_use",
            "num_allocs"} <= set(stats)
    assert all(isinstance(v, int) and v >= 0 for v in stats.values())
    assert stats["peak_bytes_in_use"] >= stats["bytes_in_use"]


def test_memory_returns_to_baseline(cpu):
    settle(cpu)
    devicekit.empty_cache(cpu)
    devicekit.synchronize(cpu)
    base = cpu.memory_stats()
    tensors = [to_device(np.ones((256, 256), np.float32), cpu) for _ in range(4)]
    during = cpu.memory_stats()
    assert during["allocated_bytes"] >= base["allocated_bytes"] + 4 * 256 * 256 * 4
    assert during["bytes_in_use"] >= base["bytes_in_use"] + 4 * 256 * 256 * 4
    del tensors
    settle(cpu)
    assert cpu.memory_stats()["allocated_bytes"] == base["allocated_bytes"]
    devicekit.empty_cache(cpu)
    devicekit.synchronize(cpu)
    after = cpu.memory_stats()
    assert after["bytes_in_use"] == base["bytes_in_use"]
    assert after["num_allocs"] == base["num_allocs"]


def test_freed_tensor_memory_is_cached_and_reused(cpu):
    host = np.ones(4096, np.float32)
    t = to_device(host, cpu)
    settle(cpu)
    held = cpu.memory_stats()
    del t
    settle(cpu)
    cached = cpu.memory_stats()
    assert cached["allocated_bytes"] <= held["allocated_bytes"] - host.nbytes
    # Back to the SDK's cache, not to the plugin.
    assert cached["bytes_in_use"] == held["bytes_in_use"]
    assert cached["num_allocs"] == held["num_allocs"]
    t = to_device(host, cpu)  # same size again: served from the cache
    reused = cpu.memory_stats()
    assert reused["num_allocs"] == held["num_allocs"]
    assert reused["bytes_in_use"] == held["bytes_in_use"]
    del t


def test_steady_state_add_loop_allocates_nothing_new(cpu):
    a = to_device(np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32), cpu)
    b = to_device(np.ones((64, 64), np.float32), cpu)
    for _ in range(5):  # warm the cache
        c = a + b
    del c
    settle(cpu)
    warm = cpu.memory_stats()
    for _ in range(200):
        c = devicekit.ops.add(a, b)
    del c
    settle(cpu)
    steady = cpu.memory_stats()
    assert steady["num_allocs"] == warm["num_allocs"]
    assert steady["bytes_in_use"] == warm["bytes_in_use"]
    assert steady["peak_bytes_in_use"] == warm["peak_bytes_in_use"]


# --------------------------------------------------------------------------
# ops.add
# --------------------------------------------------------------------------

def reference_add(a, b, dt):
    """numpy's answer; float16/bfloat16 computed in float32, then rounded."""
    with np.errstate(over="ignore", invalid="ignore"):  # inf, NaN and wrapping expected
        if dt in (NP_DTYPES["float16"], NP_DTYPES["bfloat16"]):
            return (a.astype(np.float32) + b.astype(np.float32)).astype(dt)
        return np.add(a, b)  # integers wrap, bool is logical or


@pytest.mark.parametrize("name", NP_DTYPES)
def test_add_every_dtype(cpu, name):
    a, b = sample(name, seed=1), sample(name, seed=2)[::-1].copy()
    if name in FLOATS:
        a[0] = b[0] = -0.0  # -0.0 + -0.0 is -0.0
        a[1], b[1] = np.inf, -np.inf  # NaN
    if name in ("float16", "bfloat16"):
        b[2] = a[2] = 60000.0  # overflows float16 to inf once rounded
    result = devicekit.ops.add(to_device(a, cpu), to_device(b, cpu))
    assert result.dtype == getattr(devicekit, name) and result.device.name == "cpu:0"
    assert_same_values(result.numpy(), reference_add(a, b, NP_DTYPES[name]))


@pytest.mark.parametrize("shape_a, shape_b", [((3, 1, 5), (4, 1)), ((), (2, 3)), ((2, 3), ()),
                                              ((0, 3), (1, 3)), ((1,), (7,)), ((2, 1), (1, 2))])
@pytest.mark.parametrize("name", ["float32", "int32"])
def test_add_broadcasts(cpu, name, shape_a, shape_b):
    rng = np.random.default_rng(3)
    a = np.asarray(rng.integers(-50, 50, shape_a)).astype(NP_DTYPES[name])
    b = np.asarray(rng.integers(-50, 50, shape_b)).astype(NP_DTYPES[name])
    result = devicekit.ops.add(to_device(a, cpu), to_device(b, cpu))
    assert result.shape == np.broadcast_shapes(shape_a, shape_b)
    assert_same_bits(result.numpy(), np.asarray(a + b))


def test_add_non_contiguous_inputs(cpu):
    a = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    b = np.arange(12, dtype=np.float32).reshape(3, 4)
    ta, tb = to_device(a, cpu), to_device(b, cpu)
    # (5, 2, 3) + (2, 3): strided and broadcast at once.
    result = devicekit.ops.add(ta.transpose(0, 2)[:, ::2], tb.transpose(0, 1)[::2])
    expected = a.swapaxes(0, 2)[:, ::2] + b.T[::2]
    assert_same_bits(result.numpy(), np.ascontiguousarray(expected))


# Pairs where numpy and PyTorch promotion agree (the SDK's rules are its own).
@pytest.mark.parametrize("left, right, promoted", [
    ("int8", "int32", "int32"), ("int32", "int64", "int64"), ("uint8", "int32", "int32"),
    ("float16", "float32", "float32"), ("float32", "float64", "float64"),
    ("bool_", "int32", "int32"), ("bool_", "float16", "float16"),
    ("bfloat16", "float32", "float32")])
def test_add_promotes_types(cpu, left, right, promoted):
    a, b = sample(left, n=16, seed=4), sample(right, n=16, seed=5)
    result = devicekit.ops.add(to_device(a, cpu), to_device(b, cpu))
    assert result.dtype == getattr(devicekit, promoted)
    dt = NP_DTYPES[promoted]
    assert_same_values(result.numpy(), reference_add(a.astype(dt), b.astype(dt), dt))


def test_add_scalar_keeps_tensor_dtype(cpu):
    h = np.array([0.5, -1.0, 1000.0, np.inf], np.float16)
    result = to_device(h, cpu) + 1.5
    assert result.dtype == devicekit.float16
    assert_same_values(result.numpy(), (h.astype(np.float32) + np.float32(1.5)).astype(np.float16))
    i = np.array([np.iinfo(np.int32).max, -3, 0], np.int32)
    result = to_device(i, cpu) + 2
    assert result.dtype == devicekit.int32
    assert_same_values(result.numpy(), i + np.int32(2))  # wraps


def test_unknown_device_lists_available(cpu):
    for name in ("nosuch:0", "cpu:99"):
        with pytest.raises(devicekit.DeviceNotFoundError) as excinfo:
            devicekit.device(name)
        assert isinstance(excinfo.value, LookupError)
        assert name in str(excinfo.value) and "cpu:0" in str(excinfo.value)
