"""Rules the SDK keeps in one place (sdk/README.md): axis normalisation, dtype
kinds, the cross-device check. Every caller must get the same answers and
the same errors, with the words each caller has always used."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from conftest import HUNG_S


@pytest.fixture
def core():
    from devicekit import _core

    return _core


@pytest.mark.parametrize("axis, ndim, want", [
    (None, 3, [0, 1, 2]), (None, 0, []), (1, 3, [1]), (-1, 3, [2]), ((0, -1), 3, [0, 2]),
    ([2, 0], 3, [2, 0]), ((), 2, []), (np.int64(-2), 2, [0]), (True, 2, [1]), (0, 0, [0]),
    (range(2), 2, [0, 1]),
])
def test_normalize_axes(core, axis, ndim, want):
    got = core.normalize_axes(axis, ndim)
    assert got == want and all(type(a) is int for a in got)


@pytest.mark.parametrize("axis, ndim, word", [
    (3, 3, "3"), (-4, 3, "-4"), (-1, 0, "-1"), ((0, 5), 2, "5"), (10**30, 2, str(10**30)),
])
def test_normalize_axes_out_of_range(core, axis, ndim, word):
    from devicekit import IndexOutOfRangeError

    with pytest.raises(IndexOutOfRangeError) as e:
        core.normalize_axes(axis, ndim)
    assert str(e.value) == f"axis {word} is out of range for a tensor of rank {ndim}"


def test_normalize_axes_repeated_and_not_integers(core):
    from devicekit import IndexOutOfRangeError, InvalidArgumentError

    with pytest.raises(InvalidArgumentError) as e:
        core.normalize_axes((0, -2), 2)
    assert str(e.value) == "repeated axis in (0, -2)"
    assert not isinstance(e.value, IndexOutOfRangeError)
    with pytest.raises(TypeError):
        core.normalize_axes(1.5, 2)
    with pytest.raises(TypeError):
        core.normalize_axes((1.0,), 2)


def test_scalar_as_1d_lets_minus_one_name_a_0d_tensors_axis(core):
    from devicekit import IndexOutOfRangeError

    assert core.normalize_axes(-1, 0, scalar_as_1d=True) == [0]
    assert core.normalize_axes(-2, 3, scalar_as_1d=True) == [1]
    with pytest.raises(IndexOutOfRangeError):
        core.normalize_axes(-2, 0, scalar_as_1d=True)


def test_ops_nn_and_front_ends_word_axis_errors_their_own_way(cpu):
    import devicekit as dk
    import devicekit.nn.functional as F
    from devicekit import IndexOutOfRangeError, InvalidArgumentError, ops

    x = dk.tensor(np.ones((2, 3), np.float32))
    with pytest.raises(IndexOutOfRangeError, match=r"^axis 2 is out of range for a tensor of rank 2$"):
        ops.sum(x, 2)
    msg = r"^softmax: axis 2 is out of range for shape \[2, 3\]$"
    with pytest.raises(InvalidArgumentError, match=msg) as e:
        F.softmax(x, 2)
    assert not isinstance(e.value, IndexOutOfRangeError)
    with pytest.raises(InvalidArgumentError, match=r"^softmax: axis must be an int, got \(0,\)$"):
        F.softmax(x, (0,))
    with pytest.raises(InvalidArgumentError, match=r"^cumsum: axis -3 is out of range for rank 2$"):
        ops.cumsum(x, -3)
    # PyTorch's wrapping in nn, numpy's in ops: a 0-d tensor's axis -1.
    s = dk.tensor(np.float32(2.0))
    assert F.softmax(s, -1).numpy() == np.float32(1.0)
    with pytest.raises(IndexOutOfRangeError):
        ops.sum(s, -1)


def test_is_floating_point_comes_from_the_core_table(core):
    import devicekit as dk

    assert [d for d, _ in core.DTYPES] == [dk.dtypes.from_id(i).name for i in range(len(core.DTYPES))]
    for i, (name, _) in enumerate(core.DTYPES):
        d = dk.dtypes.from_id(i)
        assert d.is_floating_point is core.DTYPE_IS_FLOAT[i]
        assert d.is_floating_point == (name in ("float32", "float16", "bfloat16", "float64")), name


def test_operands_on_two_devices_get_one_message_before_any_launch():
    code = textwrap.dedent("""
        import devicekit as dk
        a = dk.tensor([1.0, 2.0], device="cpu:0")
        b = dk.tensor([1, 2], device="cpu:1")
        c = a > 0
        dk.reset_dispatch_stats()
        try:
            dk.ops.where(c, a, b)
        except dk.InvalidArgumentError as e:
            print(e)
        print(sum(s["kernel"] for s in dk.dispatch_stats().values()))
    """)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("DEVICEKIT_") or k == "DEVICEKIT_PROBE_CACHE"}
    env["DEVICEKIT_CPU_DEVICES"] = "2"
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                            text=True, timeout=HUNG_S)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "where: operands are on different devices (bool[2] on cpu:0, float32[2] on cpu:0, "
        "int64[2] on cpu:1); move them with .to(device) first",
        "0",  # refused before any cast or kernel ran
    ]
