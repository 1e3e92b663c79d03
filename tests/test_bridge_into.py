"""``devicekit.bridge.binary_into``: an add / sub / mul / div written into an
existing view, as a framework bridge's in-place ops need (needs no torch).

From the SDK's launch counters: where the plugin's kernel declares
DK_KERNEL_CAP_INPLACE (the reference CPU plugin's add, sub, mul, div) and the
destination is dense and overlaps no input but input 0 exactly, one launch of
the op and no copy; otherwise the op and one copy. The values are the
out-of-place op's in both cases.
"""

import numpy as np

import devicekit
from devicekit import bridge, ops


def _kernels(fn):
    devicekit.synchronize()
    devicekit.reset_dispatch_stats()
    fn()
    devicekit.synchronize()
    return {k: v["kernel"] for k, v in devicekit.dispatch_stats().items() if v["kernel"]}


def test_into_self_is_one_launch_and_the_out_of_place_bits(cpu):
    rng = np.random.default_rng(11)
    a = rng.standard_normal((6, 7)).astype(np.float32)
    b = (rng.standard_normal((1, 7)) + 3).astype(np.float32)  # broadcast along rows
    for op in ("add", "sub", "mul", "div"):
        x, y = devicekit.tensor(a, device=cpu), devicekit.tensor(b, device=cpu)
        want = getattr(ops, op)(x, y).numpy()
        assert _kernels(lambda op=op, x=x, y=y: bridge.binary_into(op, x, x, y)) == {op: 1}, op
        assert x.numpy().tobytes() == want.tobytes(), op
    x, scratch = devicekit.tensor(a, device=cpu), devicekit.tensor(a, device=cpu)
    bridge.binary_into("mul", scratch, scratch, 0.5)  # fills the cached 0.5 constant once
    assert _kernels(lambda: bridge.binary_into("mul", x, x, 0.5)) == {"mul": 1}
    np.testing.assert_array_equal(x.numpy(), a * np.float32(0.5))


def test_into_falls_back_to_one_copy_with_the_same_values(cpu):
    rng = np.random.default_rng(12)
    a = rng.standard_normal((5, 5)).astype(np.float32)
    x = devicekit.tensor(a, device=cpu)
    xt = bridge.view(x, [5, 5], [1, 5], 0)  # a transposed view: not dense
    seen = _kernels(lambda: bridge.binary_into("add", xt, xt, xt))
    assert seen.get("copy", 0) >= 1 and seen["add"] == 1, seen
    np.testing.assert_array_equal(x.numpy(), a + a)  # x + x, seen through the view
    y = devicekit.tensor(a, device=cpu)
    seen = _kernels(lambda: bridge.binary_into("mul", y, y, y))  # input 1 is the output
    assert seen.get("copy", 0) == 1 and seen["mul"] == 1, seen
    np.testing.assert_array_equal(y.numpy(), a * a)
