"""Fused-kernel selection for composite ops (the SDPA "kernel picker", generalised).

A composite op (``rms_norm``, ``softmax``, ``scaled_dot_product_attention`` ...)
is always defined by its decomposition into base ops. A plugin may register
fused kernels for it; ``dispatch`` takes the first one whose ``supports``
predicate accepts the call, else runs the decomposition. Which path each call
took is counted (``devicekit.composite_stats()``) and never silent.

Contract used by the composites in ``devicekit.nn.functional``::

    dispatch(op, inputs, attrs, decompose)

- ``op``: the composite's name, e.g. ``"rms_norm"``.
- ``inputs``: a tuple of Tensor or None (an absent optional input).
- ``attrs``: a dict of the op's attributes (floats, ints, bools).
- ``decompose``: a zero-argument callable running the decomposition.

While autograd is recording and an input requires grad, the decomposition
runs (its gradient is the composite's gradient), unless the kernel brings a
fused backward; that choice is counted like any other.

A decomposed call is counted with its reason (``composite_stats()[op]
["why_decomposed"]``): autograd recording, ``fused_kernels(False)``, no kernel
registered, operands that do not fit, or which kernels declined operands of
which dtype and layout (a permuted q/k/v view shows as ``strided``).
"""

import contextlib
import threading

from . import _core
from .autograd import is_grad_enabled

_state = threading.local()
_stats_lock = threading.Lock()
_stats = {}  # op -> {"decomposed": n, "fused": {kernel name: n}}


def _enabled():
    return getattr(_state, "enabled", True)


@contextlib.contextmanager
def fused_kernels(enabled=True):
    """``with devicekit.fused_kernels(False):`` forces every composite op in this
    thread onto its decomposition (for testing and benchmarks)."""
    previous = _enabled()
    _state.enabled = bool(enabled)
    try:
        yield
    finally:
        _state.enabled = previous


def _count(op, kernel=None, why=None):
    with _stats_lock:
        entry = _stats.setdefault(op, {"decomposed": 0, "fused": {}, "why_decomposed": {}})
        if kernel is None:
            entry["decomposed"] += 1
            entry["why_decomposed"][why] = entry["why_decomposed"].get(why, 0) + 1
        else:
            entry["fused"][kernel] = entry["fused"].get(kernel, 0) + 1


def composite_stats():
    """Per composite op: ``decomposed`` calls, ``fused`` calls per kernel name,
    and ``why_decomposed``: the decomposed calls per reason."""
    with _stats_lock:
        return {op: {"decomposed": e["decomposed"], "fused": dict(e["fused"]),
                     "why_decomposed": dict(e["why_decomposed"])}
                for op, e in _stats.items()}


def reset_composite_stats():
    with _stats_lock:
        _stats.clear()


def _try_fused(op, inputs, attrs):
    """Run the first registered fused kernel that accepts the call.

    Returns ``(output, kernel_name)`` or ``None`` (the reason left in
    ``_state.declined``) when no kernel accepts, when
    the operands do not fit the op's signature (then the decomposition reports
    or broadcasts as usual), or when ``op`` is not a fused op of the device API
    (``_core.FUSED_OP_NAMES``). The kernels of the device of ``inputs[0]`` are
    asked in their plugin's table order (``Plugin.fused_kernels()``); the
    selection, the output allocation and the launch all happen in C++
    (sdk/csrc/fused.cpp). A failing launch raises ``DeviceError`` naming the
    kernel, the op, the operands, the device and the plugin.
    """
    hit = _core.try_fused(op, inputs, attrs)
    if isinstance(hit, str):
        _state.declined = hit
        return None
    return hit


def _needs_grad(inputs):
    return is_grad_enabled() and any(
        t is not None and getattr(t, "requires_grad", False) for t in inputs)


def dispatch(op, inputs, attrs, decompose):
    if not _enabled():
        why = "fused_kernels(False)"
    elif _needs_grad(inputs):
        why = "autograd is recording (no fused backward)"
    else:
        _state.declined = "no fused kernel accepted the call"
        hit = _try_fused(op, inputs, attrs)
        if hit is not None:
            out, kernel = hit
            _count(op, kernel)
            return out
        why = _state.declined
    _count(op, why=why)
    return decompose()
