"""Reverse-mode automatic differentiation over the base ops.

Every differentiable base op (and view) reports its result to :func:`track`.
When grad mode is on and an input requires grad, the result gets a
``grad_fn`` node naming the op, its inputs and what the rule needs; the tape is
the graph of these nodes. ``loss.backward()`` walks it once in reverse
topological order; each node's rule turns the output gradient into input
gradients *written in base ops*, so training runs on any conformant plugin.
The rules live in ``devicekit._grad_rules``, which registers them here
(:func:`register_rule`) when the package is imported: the engine imports
nothing above ``_core``. The engine then sums each input gradient back to the
input's shape (broadcasting), casts it to the input's dtype (type promotion)
and accumulates it; leaves accumulate into ``.grad``.

Semantics (as PyTorch where not said otherwise):

- Only floating-point tensors can require grad (``DTypeError`` otherwise).
  Results of comparisons, logical ops, argmax, floor, sign, integer casts and
  random ops never require grad.
- ``backward()`` needs a one-element output unless ``gradient=`` is given.
  It runs under ``no_grad`` (no higher-order gradients) and keeps the graph,
  so a second ``backward()`` accumulates again.
- The ``requires_grad`` flag also lives in C++ (``TensorImpl::requires_grad``)
  so that ``a + b`` stays on its fast path unless an operand is tracked.
"""

import contextlib
import threading

from . import _core
from .errors import DTypeError, InvalidArgumentError

Tensor = _core.Tensor
_state = threading.local()
_ADD = _core.OP_NAMES.index("add")
_REDUCE_SUM = _core.OP_NAMES.index("reduce_sum")
_RULES = {}  # op name (Node.name) -> gradient rule; filled by register_rule


def register_rule(name, rule):
    """Makes ``rule(node, g, needs)`` the gradient rule of the nodes named
    ``name`` (see ``_grad_rules`` for the contract). Returns ``rule``."""
    if name in _RULES:
        raise InvalidArgumentError(f"register_rule: op {name!r} already has a gradient rule")
    _RULES[name] = rule
    return rule


def rule_names():
    """The op and view names that have a gradient rule, sorted."""
    return sorted(_RULES)


def is_grad_enabled():
    return getattr(_state, "enabled", True)


@contextlib.contextmanager
def no_grad():
    """Operations inside record nothing for backward."""
    previous = is_grad_enabled()
    _state.enabled = False
    try:
        yield
    finally:
        _state.enabled = previous


@contextlib.contextmanager
def enable_grad():
    previous = is_grad_enabled()
    _state.enabled = True
    try:
        yield
    finally:
        _state.enabled = previous


class Node:
    """The ``grad_fn`` of one recorded result: op name, inputs (tensors or
    Python scalars, as passed), attributes the rule needs, and an alias of the
    output. The alias is a separate view of the same storage, so the output
    and its node do not form a reference cycle."""

    __slots__ = ("name", "inputs", "saved", "out")

    def __init__(self, name, inputs, saved, out):
        self.name, self.inputs, self.saved, self.out = name, inputs, saved, out

    def __repr__(self):
        return f"<{self.name}Backward>"


def _is_tracked(t):
    return type(t) is Tensor and t._requires_grad


def track(name, out, inputs, **saved):
    """Records ``out = name(*inputs)`` on the tape when grad mode is on and an
    input requires grad; returns ``out``. The cheap checks come first: this
    runs on every op call."""
    for t in inputs:
        if type(t) is Tensor and t._requires_grad:
            break
    else:
        return out
    if not is_grad_enabled() or not out.dtype.is_floating_point:
        return out
    if any(t is out for t in inputs):  # an op that returned its input (a no-op cast)
        return out
    out._requires_grad = True
    out.grad_fn = Node(name, tuple(inputs), saved, _alias(out))
    return out


def _alias(t):
    return t._view(list(t.shape), list(t.strides), t._offset)


def _add(a, b):
    """``a + b`` when an operand is tracked (called from C++; see tensor_py.cpp)."""
    return track("add", _core.binary(_ADD, a, b), (a, b))


# ---- backward ---------------------------------------------------------------

def _topological(root):
    """Nodes reachable from ``root``, each before the nodes of its inputs
    (iterative DFS post-order, reversed: deep graphs do not hit the recursion limit)."""
    def children(node):
        return (t.grad_fn for t in node.inputs if type(t) is Tensor and t.grad_fn is not None)
    order, seen, stack = [], {root}, [(root, children(root))]
    while stack:
        node, pending = stack[-1]
        for child in pending:
            if child not in seen:
                seen.add(child)
                stack.append((child, children(child)))
                break
        else:
            stack.pop()
            order.append(node)
    return reversed(order)


def _sum_to(g, shape):
    """``g`` summed over the dimensions broadcasting added or stretched
    (untracked: the engine runs under no_grad)."""
    lead = g.ndim - len(shape)
    axes = list(range(lead)) + [lead + i for i, s in enumerate(shape)
                                if s == 1 and g.shape[lead + i] != 1]
    if axes:
        g = _core.reduce(_REDUCE_SUM, g, sum(1 << a for a in axes))  # keeps dims
    return g.reshape(shape) if tuple(g.shape) != tuple(shape) else g


def _fit(g, t):
    if tuple(g.shape) != tuple(t.shape):
        g = _sum_to(g, t.shape)
    if g._dtype_id != t._dtype_id:
        g = g._cast(t._dtype_id)
    return g


def _accumulate(store, key, g):
    store[key] = g if key not in store else store[key] + g


def backward(tensor, gradient=None):
    """Accumulates d(tensor)/d(leaf) into ``leaf.grad`` for every leaf that
    requires grad. ``gradient`` (same shape as ``tensor``) is the vector of the
    vector-Jacobian product; implied as 1 for a one-element tensor."""
    if not _is_tracked(tensor):
        raise InvalidArgumentError(
            f"backward: tensor {tensor.dtype}{list(tensor.shape)} does not require grad: no input "
            f"of the ops that made it has requires_grad=True, or it was computed under no_grad()")
    if gradient is None:
        if tensor.numel() != 1:
            raise InvalidArgumentError(
                f"backward: a gradient can be implied only for a one-element output; this one has "
                f"shape {list(tensor.shape)}: pass gradient= of that shape")
        gradient = _core.full(tensor.device, list(tensor.shape), tensor._dtype_id, 1)
    elif tuple(gradient.shape) != tuple(tensor.shape):
        raise InvalidArgumentError(
            f"backward: gradient has shape {list(gradient.shape)}, the output has shape "
            f"{list(tensor.shape)}")
    with no_grad():
        gradient = _fit(gradient, tensor)
        if tensor.grad_fn is None:
            _accumulate_leaf(tensor, gradient)
            return
        pending = {tensor.grad_fn: gradient}
        for node in _topological(tensor.grad_fn):
            g = pending.pop(node, None)
            if g is None:
                continue
            needs = [_is_tracked(t) for t in node.inputs]
            for t, need, gi in zip(node.inputs, needs, _RULES[node.name](node, g, needs)):
                if not need or gi is None:
                    continue
                gi = _fit(gi, t)
                if t.grad_fn is None:
                    _accumulate_leaf(t, gi)
                else:
                    _accumulate(pending, t.grad_fn, gi)


def _accumulate_leaf(t, g):
    t.grad = g if t.grad is None else t.grad + g


# ---- Tensor attributes (bound on Tensor by tensor.py, the Tensor surface) ----

def _get_requires_grad(self):
    return self._requires_grad


def _set_requires_grad(self, value):
    value = bool(value)
    if self.grad_fn is not None:
        raise InvalidArgumentError(
            f"requires_grad can only be changed on leaf tensors; this one was made by "
            f"{self.grad_fn.name} (use .detach() for an untracked copy)")
    if value and not self.dtype.is_floating_point:
        raise DTypeError(f"only floating-point tensors can require grad, got {self.dtype}"
                         f"{list(self.shape)}")
    self._requires_grad = value


def _requires_grad_(self, requires_grad=True):
    _set_requires_grad(self, requires_grad)
    return self


def _is_leaf(self):
    return self.grad_fn is None


def _detach(self):
    """A view of the same storage that is not tracked (no grad_fn, no requires_grad)."""
    return _alias(self)


_core._set_autograd_add_hook(_add)
