"""Section "autograd": gradients computed through the plugin against
reference gradients that never touch it.

- ``autograd/<op>/<dtype>/grad``: every base op with a gradient rule
  (``devicekit._grad_rules.RULES``) that the spec defines. Not in the
  plugin's kernel table: not-implemented.
- ``autograd/<composite>/<dtype>/<class>``: every differentiable composite
  (``_nn.CALLS``, minus ``adamw_step``, which records no tape) on its call
  classes, fused kernels off (a fused kernel's backward is the decomposition's
  unless it brings its own; the fused section covers forward).

The loss is sum(out * w) for a seeded w; the plugin's gradient (backward on
the tape) is compared with central differences of the same loss on the numpy
float64 oracle (``devicekit.testing.gradcheck.numeric_gradient``), or with the
oracle's analytic gradient where differences are meaningless (cast).

dtype: float64 where the plugin declares it for the op (composites: for
``matmul``, the widest user), compared at (rtol 1e-5, atol 1e-6), the
finite-difference error with headroom; otherwise float32 against the float64
reference with float32 tolerances: ``_nn.tolerance`` x 4 (the backward chains
about as many roundings again as the forward). Classes whose forward result is
NaN/inf (all targets ignored, -inf rows) are left to the composites section.
"""

import functools

import numpy as np

from devicekit import _grad_rules, ops
from devicekit.conformance.case import Case, Section
from devicekit.conformance.registry import spec
from devicekit.testing import oracle_nn
from devicekit.testing.gradcheck import numeric_gradient

from . import _nn
from ._common import O, dk
from ._nn import _u

NO_GRADIENT = {"adamw_step"}  # updates parameters outside the tape
NOT_DIFFERENTIABLE_CLASSES = {"all_ignored", "neg_inf", "neg_inf_row"}
# Forward-only classes: lengths that cross kernel tiles (composites and fused
# check them); the float64 gradient check of a 300-key attention takes minutes.
# (The fused section compares fused and decomposed gradients on them.)
FORWARD_ONLY_CLASSES = {"large_tiles", "large_causal", "large_causal_lq_ne_lk", "large_scores",
                        "long_rows", "large", "tanh_large", "large_bool_mask", "large_float_mask"}
FLOAT64_TOL = (1e-5, 1e-6)
FLOAT32_FACTOR = 4


def _signed(rng, *shape):  # |x| >= 0.2: away from abs's kink
    return rng.uniform(0.2, 2.0, shape) * rng.choice([-1.0, 1.0], shape)


_IDX = np.array([[0, 2, 2], [1, 0, 0]])  # repeated indices: gradients accumulate
_COND = np.array([[True], [False], [True]])

# op -> (rng -> float64 inputs, SDK call on tensors, oracle on numpy, n)
UNARY_DOMAIN = {"log": "pos", "sqrt": "pos", "rsqrt": "pos", "reciprocal": "pos", "abs": "signed"}


def _unary(op):
    def inputs(r):
        dom = UNARY_DOMAIN.get(op)
        return [_u(r, 2, 5, low=0.3) if dom == "pos" else _signed(r, 2, 5) if dom == "signed"
                else _u(r, 2, 5)]
    return inputs, getattr(ops, op), lambda x: O.unary(op, x), 1


def _binary(op):
    def inputs(r):
        a, b = _u(r, 3, 1, 4), _u(r, 2, 4)  # broadcast: gradients are summed back
        if op in ("div",):
            b = _u(r, 2, 4, low=0.5)
        if op == "pow":
            a = _u(r, 3, 1, 4, low=0.5)
        return [a, b]
    return inputs, getattr(ops, op), lambda a, b: O.binary(op, a, b), 3


BASE = {op: _unary(op) for op in ("neg", "abs", "exp", "log", "sqrt", "rsqrt", "reciprocal",
                                 "sin", "cos", "tanh", "erf")}
BASE.update({op: _binary(op) for op in ("add", "sub", "mul", "div", "pow", "maximum", "minimum")})
BASE.update({
    "where": (lambda r: [_u(r, 1, 4), _u(r, 3, 4)],
              lambda a, b: ops.where(dk.tensor(_COND, device=a.device), a, b),
              lambda a, b: np.where(_COND, a, b), 1),
    "reduce_sum": (lambda r: [_u(r, 3, 5)], lambda x: ops.sum(x, 1),
                   lambda x: O.reduce_sum(x, 1, keepdims=False), 5),
    "reduce_max": (lambda r: [_u(r, 3, 5)], lambda x: ops.max(x, 1),
                   lambda x: np.max(x, 1), 1),
    "reduce_min": (lambda r: [_u(r, 3, 5)], lambda x: ops.min(x, 0, keepdims=True),
                   lambda x: np.min(x, 0, keepdims=True), 1),
    "cumsum": (lambda r: [_u(r, 3, 5)], lambda x: ops.cumsum(x, 1),
               lambda x: O.cumsum(x, 1), 5),
    "gather": (lambda r: [_u(r, 2, 4)],
               lambda x: ops.gather(x, 1, dk.tensor(_IDX, device=x.device)),
               lambda x: O.gather(x, 1, _IDX), 2),
    "scatter_add": (lambda r: [_u(r, 2, 4), _u(r, 2, 3)],
                    lambda x, s: ops.scatter_add(x, 1, dk.tensor(_IDX, device=x.device), s),
                    lambda x, s: O.scatter_add(x, 1, _IDX, s), 3),
    "matmul": (lambda r: [_u(r, 2, 3, 5), _u(r, 5, 4)], ops.matmul, O.matmul, 5),
    # d cast / dx is the identity: an analytic oracle (differences of a
    # float32 rounding would measure the rounding, not the rule).
    "cast": (lambda r: [_u(r, 2, 5)], lambda x: ops.cast(x, dk.float32).to(x.dtype),
             None, 1),
})


def _tol(name, dtype, n):
    if dtype == "float64":
        return FLOAT64_TOL
    rtol, atol = _nn.tolerance(name, dtype, n)
    return rtol * FLOAT32_FACTOR, atol * FLOAT32_FACTOR


def _device_grads(ctx, fn, args, kwargs, wrt, w):
    dev = ctx.device
    tensors = [_nn.to_device(a, dev, requires_grad=i in wrt) for i, a in enumerate(args)]
    with dk.fused_kernels(False):
        out = fn(*tensors, **{k: _nn.to_device(v, dev) for k, v in kwargs.items()})
        ops.sum(out * dk.tensor(w.astype(O.np_dtype(out.dtype)), device=dev)).backward()
    stray = [i for i, t in enumerate(tensors) if i not in wrt and getattr(t, "grad", None) is not None]
    assert not stray, f"inputs {stray} got a gradient though only inputs {wrt} require grad"
    return [tensors[i].grad.numpy() if tensors[i].grad is not None
            else np.zeros(args[i].shape, args[i].dtype) for i in wrt]


def _check(ctx, name, fn, ref, args, kwargs, dtype, n, note, analytic=None, wrt=None):
    """Plugin gradients of sum(fn(args) * w) wrt the floating args (or the
    inputs ``wrt``, the others not requiring grad) vs the oracle's."""
    args = [O.round_to(a, dtype) if _nn.is_float(a) else a for a in args]
    if wrt is None:
        wrt = [i for i, a in enumerate(args)
               if isinstance(a, np.ndarray) and a.dtype == O.np_dtype(dtype)]
    exact = [a.astype(np.float64) if i in wrt else a for i, a in enumerate(args)]
    shape = np.shape(ref(*exact, **kwargs)) if ref else args[0].shape
    w = ctx.rng().standard_normal(shape)
    got = _device_grads(ctx, fn, args, kwargs, wrt, w)

    def loss(*arrays):
        return float(np.sum(np.asarray(ref(*arrays, **kwargs), np.float64) * w))

    for g, i in zip(got, wrt):
        want = analytic(w) if analytic else numeric_gradient(loss, exact, i)
        O.assert_close(g, O.round_to(want, dtype), dtype, op=name, tol=_tol(name, dtype, n),
                       case=f"{note}: gradient of input {i} {args[i].shape} seed={ctx.seed}")


def check_base(ctx, op, dtype):
    make, fn, ref, n = BASE[op]
    args = make(ctx.rng())
    analytic = (lambda w: w) if ref is None else None
    _check(ctx, op, fn, ref or (lambda x: x), args, {}, dtype, n, op, analytic)


def check_composite(ctx, name, dtype, shape, wrt=None):
    call = _nn.CALLS[name][shape](ctx.rng())
    args, kwargs = _nn.rounded(call, dtype)
    _check(ctx, name, _nn.function(name), _nn.oracle(name), args, kwargs, dtype, call.n,
           f"{name} {shape}", wrt=wrt)


def _base_ops_with_rules():
    return [o["name"] for o in spec()["ops"] if o["name"] in _grad_rules.RULES]


def _composites_with_gradients():
    return [n for n in oracle_nn.__all__ if n not in NO_GRADIENT]


def _floor(target):
    """One executed case per differentiable base op the plugin implements and
    per differentiable composite (counted from the gradient rules and the
    oracle, not from the generator)."""
    return (sum(1 for op in _base_ops_with_rules() if op in target.declared)
            + len(_composites_with_gradients()))


SECTION = Section("autograd", "Gradients through the plugin vs the float64 oracle", order=60,
                  min_cases=_floor)


def _dtype(target, op):
    return "float64" if "float64" in target.declared.get(op, ()) else "float32"


def cases(target):
    out = []
    for op in _base_ops_with_rules():
        have = target.declared.get(op)
        dtype = _dtype(target, op)
        why = None if have is not None else f"the plugin's kernel table has NULL for '{op}'"
        if op not in BASE:
            fn = functools.partial(_no_case, op=op)
        else:
            fn = functools.partial(check_base, op=op, dtype=dtype)
        out.append(Case(id=f"autograd/{op}/{dtype}/grad", section="autograd", op=op, dtype=dtype,
                        fn=fn, not_implemented=why))
    dtype = _dtype(target, "matmul")
    for name in sorted(_nn.CALLS):
        if name in NO_GRADIENT:
            continue
        for shape in _nn.CALLS[name]:
            if shape in NOT_DIFFERENTIABLE_CLASSES or shape in FORWARD_ONLY_CLASSES:
                continue
            out.append(Case(id=f"autograd/{name}/{dtype}/{shape}", section="autograd", op=name,
                            dtype=dtype, fn=functools.partial(check_composite, name=name,
                                                              dtype=dtype, shape=shape)))
            if not shape.startswith("opt_"):
                continue
            # each other subset of the inputs requiring grad (the case above: all of them)
            for label, wrt in _nn.grad_subsets(name, shape)[1:]:
                out.append(Case(id=f"autograd/{name}/{dtype}/{shape}/{label}",
                                section="autograd", op=name, dtype=dtype,
                                fn=functools.partial(check_composite, name=name, dtype=dtype,
                                                     shape=shape, wrt=wrt)))
    return out


def _no_case(ctx, op):
    raise RuntimeError(f"base op '{op}' has a gradient rule but the autograd section has no "
                       f"inputs for it: add it to conformance_tests/autograd.py BASE")
