"""Input that overflows, and other input that must fail with a DeviceKit error
rather than a wrong answer or a foreign exception. Each case asserts the
correct answer: the numpy/PyTorch result, or the error class and its text."""

import numpy as np
import pytest

from conftest import HUNG_S

import devicekit as dk
from devicekit import ops


# --------------------------------------------------------------------------
# Sizes: checked for 64-bit overflow before anything is allocated
# --------------------------------------------------------------------------

@pytest.mark.parametrize("make", [dk.zeros, dk.empty, dk.ones])
def test_element_count_past_int64_is_refused(cpu, make):
    before = cpu.memory_stats()["plugin_alloc_calls"]
    with pytest.raises(dk.InputOverflowError, match=r"int64") as e:
        make(2**31, 2**31, 4, 2, device=cpu)
    assert isinstance(e.value, OverflowError) and isinstance(e.value, dk.DeviceKitError)
    assert "[2147483648, 2147483648, 4, 2]" in str(e.value)
    assert cpu.memory_stats()["plugin_alloc_calls"] == before  # nothing was allocated


def test_byte_size_past_int64_is_refused(cpu):
    # 2**61 elements fit int64; 2**61 * 8 bytes do not.
    with pytest.raises(dk.InputOverflowError, match="bytes"):
        dk.empty(2**61, dtype=dk.int64, device=cpu)


def test_dimension_past_int64_is_refused(cpu):
    with pytest.raises(dk.InputOverflowError):
        dk.zeros(2**64, device=cpu)


def test_expand_to_an_overflowing_shape_is_refused(cpu):
    with pytest.raises(dk.InputOverflowError):
        dk.ones(1, device=cpu).expand(2**40, 2**40)


def test_empty_tensor_with_huge_dimensions(cpu):
    # As in numpy: a 0 makes the tensor empty, but the other dims still must
    # fit (size-0 dims count as 1), so no stride computed from them can overflow.
    t = dk.zeros(0, 2**40, device=cpu)
    assert t.numel() == 0 and t.shape == (0, 2**40)
    for shape in ((0, 2**62), (2**62, 2**62, 0)):
        with pytest.raises(dk.InputOverflowError):
            dk.zeros(*shape, device=cpu)


# --------------------------------------------------------------------------
# Python scalars: numpy/PyTorch promotion, never a silent wrap
# --------------------------------------------------------------------------

def test_true_division_of_uint8_by_negative_int(cpu):
    x = dk.tensor(np.array([4, 254], np.uint8), device=cpu)
    out = x / -2
    assert out.dtype == dk.float32
    assert out.numpy().tolist() == [-2.0, -127.0]  # numpy 1.x and PyTorch
    assert (-508 / x).numpy().tolist() == [-127.0, -2.0]


def test_uint8_to_a_negative_power_is_a_float_power(cpu):
    # pow always computes in floating point (numpy's float_power): 4 ** -1 is
    # 0.25, never 4 ** 255 (= inf) from wrapping -1 into uint8.
    x = dk.tensor(np.array([4, 2], np.uint8), device=cpu)
    out = x ** -1
    assert out.dtype == dk.float32
    np.testing.assert_array_equal(out.numpy(), np.float_power([4, 2], -1).astype(np.float32))
    assert np.isfinite(out.numpy()).all()


@pytest.mark.parametrize("op, value", [
    (lambda x, v: x + v, 300), (lambda x, v: x * v, -1), (lambda x, v: v - x, 256),
    (ops.maximum, 1000),
])
def test_int_scalar_out_of_the_tensors_range_is_refused(cpu, op, value):
    # numpy 2: "Python integer 300 out of bounds for uint8"; never wrapped.
    x = dk.tensor(np.array([1, 2], np.uint8), device=cpu)
    with pytest.raises(dk.InputOverflowError, match=rf"{value} is out of range for uint8"):
        op(x, value)


def test_int_scalar_in_range_keeps_the_tensor_dtype(cpu):
    x = dk.tensor(np.array([1, 2], np.uint8), device=cpu)
    out = x + 253
    assert out.dtype == dk.uint8 and out.numpy().tolist() == [254, 255]
    y = dk.tensor(np.array([1, 2], np.int8), device=cpu)
    assert (y * -128).dtype == dk.int8


def test_comparison_with_an_out_of_range_int_is_exact(cpu):
    x = dk.tensor(np.array([0, 255], np.uint8), device=cpu)
    assert (x < 300).numpy().tolist() == [True, True]
    assert (x == -1).numpy().tolist() == [False, False]
    assert (x > -1).numpy().tolist() == [True, True]


def test_int_past_int64_is_an_overflow_error(cpu):
    x = dk.tensor([1, 2], device=cpu)
    for attempt in (lambda: x + 2**70, lambda: ops.mul(x, -2**64), lambda: dk.full([2], 2**64)):
        with pytest.raises(dk.InputOverflowError, match="does not fit in int64"):
            attempt()


def test_numpy_scalars_work_like_python_scalars(cpu):
    x = dk.tensor([1, 2], dtype=dk.int32, device=cpu)
    for s in (np.int64(3), np.int8(3), np.uint64(3)):
        out = x + s
        assert out.dtype == dk.int32 and out.numpy().tolist() == [4, 5]
    f = x * np.float32(0.5)
    assert f.dtype == dk.float32 and f.numpy().tolist() == [0.5, 1.0]
    assert (x > np.bool_(True)).numpy().tolist() == [False, True]
    with pytest.raises(TypeError):
        x + np.complex64(1)


def test_bool_minus_bool_is_refused(cpu):
    a = dk.tensor([True, False], device=cpu)
    with pytest.raises(dk.DTypeError, match="logical_xor"):
        a - a
    with pytest.raises(dk.DTypeError):
        a - True
    assert (a + a).dtype == dk.bool_  # still allowed, as in numpy/PyTorch


# --------------------------------------------------------------------------
# arange, empty reductions, scatter_add into nothing
# --------------------------------------------------------------------------

def test_arange_past_int64_is_refused(cpu):
    with pytest.raises(dk.InputOverflowError):
        ops.arange(2**63 - 2, 2**63 + 2, device=cpu)
    with pytest.raises(dk.InputOverflowError):
        ops.arange(0, 2**63 + 10, 2**62, device=cpu)
    with pytest.raises(dk.InputOverflowError, match="int32"):
        ops.arange(2**31 - 2, 2**31 + 1, dtype=dk.int32, device=cpu)
    # At the edge it is exact (no float rounding of the count).
    edge = ops.arange(2**63 - 3, 2**63 - 1, device=cpu)
    assert edge.numpy().tolist() == [2**63 - 3, 2**63 - 2]


@pytest.mark.parametrize("shape, axis, expected", [
    ((3, 0), 1, np.zeros(3)), ((0, 3), 0, np.zeros(3)), ((0, 3), 1, np.zeros(0)),
    ((2, 0, 4), (1, 2), np.zeros(2)), ((3, 0), None, np.float32(0)),
])
def test_empty_sum_is_the_identity_on_every_axis(cpu, shape, axis, expected):
    out = ops.sum(dk.zeros(*shape, device=cpu), axis=axis)
    np.testing.assert_array_equal(out.numpy(), np.sum(np.zeros(shape, np.float32), axis=axis))
    np.testing.assert_array_equal(out.numpy(), expected)


def test_empty_integer_sum_is_int64_zero(cpu):
    out = ops.sum(dk.zeros(3, 0, dtype=dk.int32, device=cpu), axis=1)
    assert out.dtype == dk.int64 and out.numpy().tolist() == [0, 0, 0]


def test_empty_tensor_strides_follow_the_header_rule(cpu):
    # device_api.h: a size-0 dim counts as size 1 in the row-major strides.
    assert dk.zeros(3, 0, 2, device=cpu).strides == (2, 2, 1)


def test_max_of_an_empty_axis_has_no_identity(cpu):
    with pytest.raises(dk.InvalidArgumentError, match="no identity"):
        ops.max(dk.zeros(3, 0, device=cpu), axis=1)


def test_scatter_add_into_an_empty_output_checks_indices(cpu):
    x = dk.zeros(0, device=cpu)
    index = dk.tensor([5, 9], dtype=dk.int64, device=cpu)
    src = dk.ones(2, device=cpu)
    with pytest.raises(dk.IndexOutOfRangeError, match="out of range"):
        ops.scatter_add(x, 0, index, src)
    empty_index = dk.zeros(0, dtype=dk.int64, device=cpu)
    assert ops.scatter_add(x, 0, empty_index, dk.zeros(0, device=cpu)).shape == (0,)


# --------------------------------------------------------------------------
# Clear DeviceKit errors instead of foreign ones
# --------------------------------------------------------------------------

@pytest.mark.parametrize("seed, error", [
    (float("nan"), dk.InvalidArgumentError), (None, dk.InvalidArgumentError),
    (1.5, dk.InvalidArgumentError), (True, dk.InvalidArgumentError),
    (-1, dk.InputOverflowError), (2**64, dk.InputOverflowError),
])
def test_bad_seeds_are_devicekit_errors(cpu, seed, error):
    for fn in (ops.rand, ops.random_bits):
        with pytest.raises(error, match="seed") as e:
            fn([4], seed, device=cpu)
        assert "incompatible function arguments" not in str(e.value)
    with pytest.raises(error, match="offset"):
        ops.rand([4], 0, offset=seed, device=cpu)


def test_largest_seed_is_accepted(cpu):
    assert ops.random_bits([4], 2**64 - 1, offset=np.uint64(7), device=cpu).shape == (4,)


def test_transpose_out_of_range_is_an_index_error(cpu):
    t = dk.zeros(2, 3, device=cpu)
    with pytest.raises(dk.IndexOutOfRangeError, match=r"dimension 5 is out of range.*rank 2") as e:
        t.transpose(5, 0)
    assert isinstance(e.value, IndexError) and isinstance(e.value, dk.DeviceKitError)
    with pytest.raises(dk.IndexOutOfRangeError):
        t.permute(0, 2)
    with pytest.raises(dk.IndexOutOfRangeError):
        t[2]
    assert t.transpose(-1, 0).shape == (3, 2)


def test_to_an_unknown_dtype_says_dtype(cpu):
    t = dk.zeros(2, device=cpu)
    with pytest.raises(dk.DTypeError, match=r"unsupported dtype 'complex64'.*float32") as e:
        t.to("complex64")
    assert "nor is it a device" in str(e.value)
    with pytest.raises(dk.DeviceNotFoundError):
        t.to("acme:0")  # has a ':': a device name


# --------------------------------------------------------------------------
# None where a tensor belongs: a TypeError, never a crashed process
# --------------------------------------------------------------------------

NONE_FOR_A_TENSOR = {  # call: the exception it raises today
    "gather": ("ops.gather(x, 0, None)", "TypeError"),
    "scatter_add without src": ("ops.scatter_add(x, 0, idx)", "TypeError"),
    "scatter_add, None index": ("ops.scatter_add(x, 0, None, x)", "TypeError"),
    "exp": ("ops.exp(None)", "TypeError"),
    "where": ("ops.where(None, x, x)", "TypeError"),
    # These Python front-ends read x.ndim before the core sees the argument.
    "matmul": ("ops.matmul(x, None)", "AttributeError"),
    "sum": ("ops.sum(None)", "AttributeError"),
}


@pytest.mark.parametrize("call,raises", NONE_FOR_A_TENSOR.values(), ids=list(NONE_FOR_A_TENSOR))
def test_none_for_a_tensor_is_refused_without_a_crash(call, raises):
    # In a child process: before the core's Tensor arguments refused None,
    # the core calls dereferenced an empty pointer and killed the interpreter.
    import subprocess
    import sys
    code = ("import numpy as np, devicekit as dk\nfrom devicekit import ops\n"
            "x = dk.tensor(np.ones((2, 3), np.float32))\n"
            "idx = dk.tensor(np.zeros((2, 3), np.int64))\n"
            f"try:\n    {call}\nexcept Exception as e:\n"
            "    print('refused', type(e).__name__)\nelse:\n    print('accepted')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=HUNG_S)
    assert proc.returncode == 0, f"{call} ended the process (exit {proc.returncode}): {proc.stderr[-400:]}"
    assert proc.stdout.strip() == f"refused {raises}", proc.stdout + proc.stderr
