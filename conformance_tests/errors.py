"""Section "errors": errors cross the boundary intact.

- A kernel's error (an index out of range, found while the kernel runs) reaches
  the user as a DeviceError carrying the plugin's code and message, and the
  device stays usable afterwards.
- Invalid arguments are rejected by the SDK with InvalidArgumentError *before*
  any kernel is launched (no kernel call is recorded): one case per
  ``sdk_cases`` name of the argument rules (``arg_rules.json``, ``_rules``),
  each made by its entry in :data:`INVALID`.
"""

import functools

import numpy as np

import devicekit as dk
from devicekit import ops
from devicekit.conformance.case import Case, Section

from . import _rules

SECTION = Section("errors", "Errors reach the user; bad arguments never reach the plugin",
                  order=40, min_cases=lambda target: 4 + len(sdk_case_names()))


def sdk_case_names():
    """The SDK-level invalid-argument cases the argument rules name, in rule order."""
    return [n for r in _rules.rules() for n in r.get("sdk_cases", ())]


def kernel_error(ctx, op, bad=9):
    dev = ctx.device
    x = dk.tensor(np.zeros((4, 5), np.float32), device=dev)
    index = np.zeros((2, 5), np.int64)
    index[1, 3] = bad  # out of range for dim 0 (size 4); 4: off by one
    args = (x, 0, dk.tensor(index, device=dev))
    if op == "scatter_add":
        args += (dk.tensor(np.ones((2, 5), np.float32), device=dev),)
    try:  # raised by the call or, asynchronously, by the next synchronize
        getattr(ops, op)(*args).numpy()
        dev.synchronize()
    except dk.NotImplementedByPlugin:
        raise
    except dk.DeviceError as e:
        assert e.code, f"{op}: DeviceError without the plugin's error code: {e}"
        assert op in str(e) or "index" in str(e).lower() or "range" in str(e).lower(), \
            f"{op}: the message does not say what went wrong: {e}"
    except dk.DeviceKitError as e:
        raise AssertionError(f"{op}: expected the plugin's DeviceError, got "
                             f"{type(e).__name__}: {e}") from e
    else:
        raise AssertionError(f"{op} with index {bad} into a dimension of size 4 reported no error")
    dev.synchronize()  # reported once; the device works again
    y = ops.add(x, x).numpy()
    assert y.shape == (4, 5) and not y.any(), "the device did not recover after a kernel error"


def _t(ctx, shape, dtype=np.float32):
    return dk.tensor(np.zeros(shape, dtype), device=ctx.device)


# How each SDK-level case breaks its rule (the names and the rules are arg_rules.json's).
INVALID = {
    "add_shapes_do_not_broadcast": lambda ctx: ops.add(_t(ctx, (3, 4)), _t(ctx, (5,))),
    "matmul_inner_dims_differ": lambda ctx: ops.matmul(_t(ctx, (3, 4)), _t(ctx, (5, 2))),
    "reduce_axis_out_of_range": lambda ctx: ops.sum(_t(ctx, (3, 4)), axis=2),
    "max_of_empty": lambda ctx: ops.max(_t(ctx, (0, 4)), axis=0),
    "min_of_empty": lambda ctx: ops.min(_t(ctx, (4, 0)), axis=1),
    "argmax_of_empty": lambda ctx: ops.argmax(_t(ctx, (0, 4)), axis=0),
    "reshape_wrong_size": lambda ctx: _t(ctx, (3, 4)).reshape(5, 3),
    "copy_h2d_out_of_bounds": lambda ctx: ctx.device.copy_h2d(ctx.device.alloc(16),
                                                               np.zeros(17, np.uint8)),
    "copy_d2h_offset_past_end": lambda ctx: ctx.device.copy_d2h(
        np.empty(8, np.uint8), ctx.device.alloc(16), src_offset=9),
}


def rejected_before_plugin(ctx, name):
    dk.synchronize(ctx.device)
    dk.reset_dispatch_stats()
    try:
        out = INVALID[name](ctx)
        if hasattr(out, "numpy"):
            out.numpy()
    except dk.InvalidArgumentError:
        pass
    else:
        raise AssertionError(f"{name}: accepted instead of raising InvalidArgumentError")
    launched = {op: s["kernel"] for op, s in dk.dispatch_stats().items()
                if s["kernel"] and op not in ("copy", "fill")}  # (fill: the inputs' zeros)
    assert not launched, f"{name}: kernels ran before the argument was rejected: {launched}"


def cases(target):
    out = [Case(id=f"errors/kernel_error_reaches_user/{op}", section="errors", op=None,
                fn=functools.partial(kernel_error, op=op)) for op in ("gather", "scatter_add")]
    out += [Case(id=f"errors/kernel_error_reaches_user/{op}/index_equals_size", section="errors",
                 fn=functools.partial(kernel_error, op=op, bad=4)) for op in ("gather", "scatter_add")]
    out += [Case(id=f"errors/invalid_argument/{name}", section="errors",
                 fn=functools.partial(rejected_before_plugin, name=name))
            for name in sdk_case_names()]
    return out
