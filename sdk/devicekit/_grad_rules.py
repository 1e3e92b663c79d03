"""Gradient rules of the differentiable base ops and views, written in base ops.

``RULES[name](node, g, needs)`` returns one gradient per entry of
``node.inputs`` (``None`` where ``needs`` says the input is not tracked).
``node.out`` is the op's output, ``node.saved`` its attributes. The engine
(``autograd.backward``) sums each gradient back to its input's shape and casts
it to its dtype, so a rule may return a broadcast-shaped or promoted result.
Importing this module registers every rule with the engine
(``autograd.register_rule``); the package's ``__init__`` does so once.

Tie rules (also in docs of ``ops.maximum``/``ops.max``):

- ``maximum``/``minimum``: equal operands share the gradient half and half
  (as PyTorch); a NaN in ``a`` takes all of it.
- ``max``/``min`` reductions: the gradient is split evenly among all elements
  equal to the result (as ``torch.amax``); a NaN result gives its gradient to
  the NaN elements.
"""

import math

from . import _core, ops
from .autograd import register_rule
from .tensor import Tensor, full


def _zeros(shape, like):
    return full(list(shape), 0, dtype=like.dtype, device=like.device)


def _unary(fn):
    """Rule of a unary op from ``fn(x, out, g) -> grad of x``."""
    return lambda node, g, needs: (fn(node.inputs[0], node.out, g),)


def _only(i, n, fn):
    """Rule whose gradient flows to input ``i`` of ``n`` only."""
    def rule(node, g, needs):
        grads = [None] * n
        grads[i] = fn(node, g)
        return grads
    return rule


def _div(node, g, needs):
    a, b = node.inputs
    return (g / b if needs[0] else None,
            ops.neg(g) * a / (b * b) if needs[1] else None)


def _pow(node, g, needs):
    a, b = node.inputs
    ga = gb = None
    if needs[0]:  # d/da a**b = b * a**(b-1), taken as 0 where b == 0 (0 * 0**-1 is not NaN)
        if isinstance(b, Tensor):
            ga = ops.where(ops.eq(b, 0), 0.0, g * b * ops.pow(a, b - 1))
        else:
            ga = g * 0.0 if b == 0 else g * b * ops.pow(a, b - 1)
    if needs[1]:  # d/db a**b = a**b * log(a), taken as 0 where a == 0
        if isinstance(a, Tensor):
            gb = ops.where(ops.eq(a, 0), 0.0, g * node.out * ops.log(a))
        else:
            gb = g * 0.0 if a == 0 else g * node.out * (math.log(a) if a > 0 else math.nan)
    return ga, gb


def _extremum(a_wins):
    def rule(node, g, needs):
        a, b = node.inputs
        wins = a_wins(a, b)
        if isinstance(a, Tensor):
            wins = ops.logical_or(wins, ops.ne(a, a))
        ga = ops.where(ops.eq(a, b), g * 0.5, ops.where(wins, g, 0.0))
        return ga, g - ga
    return rule


def _reduce_extremum(node, g, needs):
    x, y = node.inputs[0], node.out
    hit = ops.logical_or(ops.eq(x, y), ops.logical_and(ops.ne(x, x), ops.ne(y, y)))
    count = ops.cast(ops.sum(hit, node.saved["axes"], keepdims=True), g.dtype)
    return (ops.where(hit, g / count, 0.0),)


def _cumsum(node, g):
    # Reverse cumulative sum: grad_i = sum_{j >= i} g_j = total - cumsum_i + g_i.
    axis = node.saved["axis"]
    return ops.sum(g, axis, keepdims=True) - ops.cumsum(g, axis) + g


def _gather(node, g):
    x, index = node.inputs[0], node.inputs[1]
    return ops.scatter_add(_zeros(x.shape, g), node.saved["axis"], index, g)


def _transposed(x):
    """Whether ``x`` is stored transposed: its last two dims swapped make it
    contiguous (``w.transpose(0, 1)`` of a contiguous ``w``, as ``linear``'s
    weight). Its gradient is then computed in that layout too."""
    return x.ndim >= 2 and not x.is_contiguous() and x.transpose(-1, -2).is_contiguous()


def _matmul(node, g, needs):
    # A gradient comes out in its input's layout (PyTorch's rule for .grad):
    # for an input stored transposed the product is taken the other way round
    # and transposed back, the same GEMM at the same cost, so linear's weight
    # gets a contiguous [out, in] .grad, not a strided view that every
    # per-parameter consumer (an optimizer step, clipping) reads column-wise.
    a, b = node.inputs
    if a.ndim > 2 and b.ndim == 2:  # folded by ops.matmul: b's gradient sums over every row
        k, n = b.shape
        m = a.numel() // k  # k > 0: ops.matmul folds only then
        a2, g2 = a.reshape(m, k), g.reshape(m, n)
        gb = None
        if needs[1]:
            gb = (ops.matmul(g2.transpose(0, 1), a2).transpose(0, 1) if _transposed(b)
                  else ops.matmul(a2.transpose(0, 1), g2))
        return (ops.matmul(g, b.transpose(0, 1)) if needs[0] else None), gb
    ga = gb = None
    flip = a.ndim >= 2 and b.ndim >= 2  # a 1-D operand has no layout to keep
    if needs[0]:
        ga = (ops.matmul(b, g.transpose(-1, -2)).transpose(-1, -2) if flip and _transposed(a)
              else ops.matmul(g, b.transpose(-1, -2)))
    if needs[1]:
        gb = (ops.matmul(g.transpose(-1, -2), a).transpose(-1, -2) if flip and _transposed(b)
              else ops.matmul(a.transpose(-1, -2), g))
    return ga, gb


def _permute(node, g):
    dims = node.saved["dims"]
    inverse = sorted(range(len(dims)), key=dims.__getitem__)
    return g.permute(*inverse)


def _getitem(node, g):
    # Scatter g back to the positions the view selected: the same index applied
    # to the flat positions 0..n-1 of the input names them.
    x = node.inputs[0]
    n = x.numel()
    positions = ops.arange(n, device=x.device).reshape(x.shape)[node.saved["index"]]
    flat = ops.scatter_add(_zeros([n], g), 0, positions.reshape(-1), g.reshape(-1))
    return flat.reshape(x.shape)


def _narrow(node, g):
    # g copied into the positions of the slice, -0.0 elsewhere (exact: -0.0 +
    # g == g when the engine sums the pieces of a split): one fill, one copy.
    x = node.inputs[0]
    return _core.narrow_into(g, list(x.shape), node.saved["dim"], node.saved["start"], -0.0)


def _cat(node, g, needs):
    d, grads, start = node.saved["dim"], [], 0
    for n, need in zip(node.saved["sizes"], needs):
        grads.append(ops.narrow(g, d, start, n) if need else None)
        start += n
    return grads


def _identity(node, g):
    return g


_SQRT_PI_2 = 2.0 / math.sqrt(math.pi)

RULES = {
    "add": lambda node, g, needs: (g, g),
    "sub": lambda node, g, needs: (g, ops.neg(g)),
    "mul": lambda node, g, needs: (g * node.inputs[1] if needs[0] else None,
                                   g * node.inputs[0] if needs[1] else None),
    "div": _div,
    "pow": _pow,
    "maximum": _extremum(lambda a, b: ops.lt(b, a)),
    "minimum": _extremum(lambda a, b: ops.lt(a, b)),
    "where": lambda node, g, needs: (None, ops.where(node.inputs[0], g, 0.0),
                                     ops.where(node.inputs[0], 0.0, g)),
    "neg": _unary(lambda x, y, g: ops.neg(g)),
    "abs": _unary(lambda x, y, g: g * ops.sign(x)),  # 0 at x == 0, as PyTorch
    "exp": _unary(lambda x, y, g: g * y),
    "log": _unary(lambda x, y, g: g / x),
    "sqrt": _unary(lambda x, y, g: g / (y * 2.0)),
    "rsqrt": _unary(lambda x, y, g: g * y * y * y * -0.5),
    "reciprocal": _unary(lambda x, y, g: ops.neg(g * y * y)),
    "sin": _unary(lambda x, y, g: g * ops.cos(x)),
    "cos": _unary(lambda x, y, g: ops.neg(g * ops.sin(x))),
    "tanh": _unary(lambda x, y, g: g * (1.0 - y * y)),
    "erf": _unary(lambda x, y, g: g * ops.exp(ops.neg(x * x)) * _SQRT_PI_2),
    "reduce_sum": _only(0, 1, lambda node, g: g.expand(*node.inputs[0].shape)),
    "reduce_max": _reduce_extremum,
    "reduce_min": _reduce_extremum,
    "cumsum": _only(0, 1, _cumsum),
    "gather": _only(0, 2, _gather),
    "scatter_add": lambda node, g, needs: (
        g, None, ops.gather(g, node.saved["axis"], node.inputs[1]) if needs[2] else None),
    "matmul": _matmul,
    # Views and copies: the engine casts/sums the gradient to the input.
    "cast": _only(0, 1, _identity),
    "contiguous": _only(0, 1, _identity),
    "expand": _only(0, 1, _identity),
    "reshape": _only(0, 1, lambda node, g: g.reshape(node.inputs[0].shape)),
    "permute": _only(0, 1, _permute),
    "getitem": _only(0, 1, _getitem),
    "narrow": _only(0, 1, _narrow),
    "cat": _cat,
    "to_device": _only(0, 1, lambda node, g: g.to(node.inputs[0].device)),
}

for _name, _rule in RULES.items():
    register_rule(_name, _rule)
