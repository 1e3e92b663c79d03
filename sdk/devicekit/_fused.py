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
- ``decompose``: the decomposition, a callable taking ``inputs`` as its
  positional arguments (so that it can be re-run on other tensors).

While autograd is recording and an input requires grad, the fused kernel runs
only when the plugin also registers a kernel for the op's backward
(``<op>_backward``, device API 1.3; ``_op_facts.FUSED_BACKWARD``). The result
then gets one autograd node whose gradient rule offers the backward call to
those kernels; when none accepts it, the rule recomputes the decomposition
on detached copies of the inputs and differentiates that (counted under the
backward op's ``why_decomposed``). Without a backward kernel the
decomposition runs and records itself, as before; every choice is counted.

A decomposed call is counted with its reason (``composite_stats()[op]
["why_decomposed"]``): autograd recording, ``fused_kernels(False)``, no kernel
registered, operands that do not fit, or which kernels declined operands of
which dtype and layout (a permuted q/k/v view shows as ``strided``).
"""

import contextlib
import threading

from . import _core, _op_facts, autograd
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
    outs, kernel = hit
    return outs[0], kernel


def _needs_grad(inputs):
    return is_grad_enabled() and any(
        t is not None and getattr(t, "requires_grad", False) for t in inputs)


def _why_not_trainable(op, inputs):
    """Why the fused forward may not run while autograd records (None: it may)."""
    backward = _op_facts.FUSED_BACKWARD.get(op)
    if backward is None:
        return "autograd is recording (no fused backward op in the device API)"
    if not _core.has_fused_kernel(backward, inputs[0]):
        return f"autograd is recording (no {backward} kernel registered)"
    if op == "scaled_dot_product_attention" and getattr(inputs[3], "requires_grad", False):
        return "autograd is recording (the mask requires grad; the fused backward gives none)"
    return None


def dispatch(op, inputs, attrs, decompose):
    grad = False
    if not _enabled():
        why = "fused_kernels(False)"
    else:
        grad = _needs_grad(inputs)
        why = _why_not_trainable(op, inputs) if grad else None
    if why is None:
        _state.declined = "no fused kernel accepted the call"
        hit = _try_fused(op, inputs, attrs)
        if hit is not None:
            out, kernel = hit
            _count(op, kernel)
            if grad:
                autograd.track(_NODE + op, out, inputs, attrs=attrs, decompose=decompose)
            return out
        why = _state.declined
    _count(op, why=why)
    return decompose(*inputs)


# ---- the gradient of a fused call ---------------------------------------------

_NODE = "fused:"  # autograd node names: fused:<op>


def _dense(t):
    return t if t.is_contiguous() else t.contiguous()


def _backward_call(op, node, g, needs):
    """(inputs, want flags, forward input index per output) of ``op``'s backward."""
    ins = node.inputs
    if op in ("rms_norm", "layer_norm"):  # dout, x, weight? -> dx, dweight?[, dbias?]
        want = [True] + [bool(n) for n in needs[1:]]
        return (g, ins[0], ins[1]), want, range(len(ins))
    if op == "softmax":  # dout, out -> dx
        return (g, node.out), [True], (0,)
    if op == "gelu":  # dout, x -> dx
        return (g, ins[0]), [True], (0,)
    # scaled_dot_product_attention: dout, q, k, v, out, mask? -> dq, dk, dv
    return (g, ins[0], ins[1], ins[2], node.out, ins[3]), [True] * 3, (0, 1, 2)


def _fused_rule(node, g, needs):
    """The gradient rule of ``fused:<op>`` nodes: the plugin's backward kernel,
    else the decomposition recomputed and differentiated."""
    op = node.name[len(_NODE):]
    backward = _op_facts.FUSED_BACKWARD[op]
    inputs, want, positions = _backward_call(op, node, _dense(g), needs)
    hit = _core.try_fused(backward, inputs, node.saved["attrs"], want)
    if isinstance(hit, str):
        _count(backward, why=hit)
        return _recompute(node, g, needs)
    outs, kernel = hit
    _count(backward, kernel)
    grads = [None] * len(node.inputs)
    for out, pos in zip(outs, positions):
        grads[pos] = out
    return grads


def _recompute(node, g, needs):
    """The decomposition's gradients: rerun it on detached copies of the inputs
    (the ones that need a gradient requiring it) and differentiate that."""
    leaves = [t.detach().requires_grad_(bool(n)) if isinstance(t, _core.Tensor) else t
              for t, n in zip(node.inputs, needs)]
    with autograd.enable_grad():
        out = node.saved["decompose"](*leaves)
    out.backward(g)
    return [t.grad if n else None for t, n in zip(leaves, needs)]


for _op in _op_facts.FUSED_BACKWARD:
    autograd.register_rule(_NODE + _op, _fused_rule)
