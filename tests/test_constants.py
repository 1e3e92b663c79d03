"""Python scalar operands become cached device constants: the same
scalar in the same dtype on the same device costs one ``fill`` launch, not
one per op; the values, dtypes and signs stay exactly what they were."""

import numpy as np
import pytest

import devicekit as dk
from devicekit import ops


def fills():
    dk.synchronize()
    return dk.dispatch_stats().get("fill", {}).get("kernel", 0)


def test_a_repeated_scalar_is_filled_once(cpu):
    x = dk.tensor(np.arange(5, dtype=np.float32), device=cpu)
    dk.empty_cache(cpu)  # drops the constants earlier tests made
    dk.reset_dispatch_stats()
    first = x * 0.3711
    assert fills() == 1
    for _ in range(3):
        again = x * 0.3711
    later = 0.3711 + x, ops.where(x > 2.0, x, 0.3711)
    assert fills() == 1 + 1  # only the comparison's 2.0 is new
    want = np.arange(5, dtype=np.float32) * np.float32(0.3711)
    assert first.numpy().tolist() == want.tolist() == again.numpy().tolist()
    assert later[0].numpy().tolist() == (np.float32(0.3711) + np.arange(5, dtype=np.float32)).tolist()


@pytest.mark.parametrize("dtype", ["float64", "int32", "int64", "float16"])
def test_constants_are_keyed_by_dtype_and_value_bits(cpu, dtype):
    base = np.arange(-2, 3).astype(dtype)
    x = dk.tensor(base, device=cpu)
    f32 = dk.tensor(np.arange(-2, 3, dtype=np.float32), device=cpu)
    _ = f32 * 3, f32 * 0.0  # the float32 constants exist first
    r = x * 3
    assert str(r.dtype) == dtype and r.numpy().tolist() == (base * 3).tolist()
    q = x * 2.5  # a float scalar: float32 for an int tensor, as in PyTorch
    assert q.numpy().tolist() == (base.astype(np.float32 if "int" in dtype else dtype) * 2.5).tolist()
    if "float" in dtype:  # -0.0 is not 0.0: the sign of the product tells
        assert np.signbit((x * -0.0).numpy()).tolist() == np.signbit(base * -0.0).tolist()
        assert np.signbit((x * 0.0).numpy()).tolist() == np.signbit(base * 0.0).tolist()


def test_a_constant_filled_in_a_failed_epoch_is_made_again(cpu):
    x = dk.tensor([1.0, 2.0, 3.0], device=cpu)
    index = dk.tensor([0, 7], dtype=dk.int64, device=cpu)  # its copy ends an epoch
    tainted = x * 0.8123  # its constant is filled in the epoch that fails below
    bad = ops.gather(x, 0, index)
    with pytest.raises(dk.DeviceError):
        bad.numpy()
    with pytest.raises(dk.DeviceError):
        tainted.numpy()
    # The cached 0.8123 is undefined now; a new op must not inherit the error.
    assert (x * 0.8123).numpy().tolist() == (np.float32([1, 2, 3]) * np.float32(0.8123)).tolist()


def test_empty_cache_releases_the_constants(cpu):
    dk.synchronize(cpu)
    dk.empty_cache(cpu)
    base = cpu.memory_stats()["allocated_bytes"]
    x = dk.tensor(np.ones(3, np.float32), device=cpu)
    del x
    dk.synchronize(cpu)
    without = cpu.memory_stats()["allocated_bytes"]
    y = dk.tensor(np.ones(3, np.float32), device=cpu)
    _ = (y * 0.6173).numpy()
    del y, _
    dk.synchronize(cpu)
    assert cpu.memory_stats()["allocated_bytes"] > without  # the constant is held
    dk.empty_cache(cpu)
    assert cpu.memory_stats()["allocated_bytes"] == base
