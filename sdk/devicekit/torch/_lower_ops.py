"""Lowerings onto DeviceKit base ops: elementwise, reductions, matmul, joins,
indexing, and the ``_foreach_*`` lists.

Each function gets DeviceKit tensors (``devicekit.Tensor``) and Python
scalars and calls ``devicekit.ops``: type promotion, broadcasting and the
casts around a kernel that lacks a dtype happen in the SDK core, once, as
for native DeviceKit code. The in-place forms (``add_``, ``mul_``, ...) need
no entry: ``_dispatch`` runs the functional lowering and writes through.
"""

import math

import torch

from .. import bridge
from .. import dtypes as _dt
from .. import ops
from ..nn import functional as F
from . import _coverage
from ._device import DKTensor, dk_dtype, torch_dtype
from ._table import DERIVERS, LOWERINGS, derives, lowers, resolve, unwrap, unwrap_kwargs

aten = torch.ops.aten


def _scaled(b, alpha):
    if alpha == 1:
        return b
    # add.Scalar(x, 2, alpha=3): the other operand is a host number, which
    # ops.mul refuses (it needs a tensor operand); torch scales it on the host
    return b * alpha if isinstance(b, (bool, int, float)) else ops.mul(b, alpha)


_HALF = (_dt.float16.id, _dt.bfloat16.id)


def _in_float32(fn):
    """A lowering of several base ops run in float32 for float16/bfloat16
    operands and rounded once at the end, as torch computes these ops (its
    CPU and CUDA kernels use float32 math for 16-bit inputs): rounding each
    step to 16 bits is several ulps off (addcmul, lerp), overflows where the
    result does not (x**6 in a vector norm) or floors the wrong quotient."""
    def lowered(*args, **kwargs):
        ids = [bridge.dtype_id(a) for a in args if isinstance(a, bridge.Tensor)]
        if not any(i in _HALF for i in ids):
            return fn(*args, **kwargs)
        out_id = ids[0]
        for i in ids[1:]:
            out_id = bridge.promote_types(out_id, i)
        up = [bridge.cast(a, _dt.float32.id) if isinstance(a, bridge.Tensor) and bridge.dtype_id(a) in _HALF
              else a for a in args]
        out = fn(*up, **kwargs)
        if bridge.dtype_id(out) != _dt.float32.id:  # (an explicit dtype= asked for another)
            return out
        return bridge.cast(out, out_id) if out_id in _HALF else out
    lowered.__name__ = fn.__name__
    return lowered


def _zero_d(fn):
    """torch lets a dim-taking op treat a 0-d tensor as one element along dim
    0 (or -1); DeviceKit's ops want a real axis. So the 0-d tensor operands
    run as shape [1] and the results come back 0-d."""
    def lowered(x, *args, **kwargs):
        if not (isinstance(x, bridge.Tensor) and x.ndim == 0):
            return fn(x, *args, **kwargs)
        one = lambda t: t.reshape([1]) if isinstance(t, bridge.Tensor) and t.ndim == 0 else t  # noqa: E731
        out = fn(one(x), *[one(a) for a in args], **{k: one(v) for k, v in kwargs.items()})
        zero = lambda t: t.reshape([]) if isinstance(t, bridge.Tensor) and t.ndim == 1 else t  # noqa: E731
        return tuple(zero(t) for t in out) if isinstance(out, tuple) else zero(out)
    lowered.__name__ = fn.__name__
    return lowered


# ---- elementwise -------------------------------------------------------------------

_UNARY = {"abs": ops.abs, "neg": ops.neg, "exp": ops.exp, "log": ops.log, "sqrt": ops.sqrt,
          "rsqrt": ops.rsqrt, "reciprocal": ops.reciprocal, "sin": ops.sin, "cos": ops.cos,
          "tanh": ops.tanh, "erf": ops.erf, "floor": ops.floor, "sign": ops.sign,
          "logical_not": ops.logical_not, "sigmoid": F.sigmoid, "relu": F.relu,
          "silu": F.silu}
for _name, _fn in _UNARY.items():
    lowers(f"{_name}.default")(lambda x, _fn=_fn: _fn(x))

_BINARY = {"mul": ops.mul, "div": ops.div, "maximum": ops.maximum, "minimum": ops.minimum,
           "eq": ops.eq, "ne": ops.ne, "lt": ops.lt, "le": ops.le, "gt": ops.gt, "ge": ops.ge,
           "logical_and": ops.logical_and, "logical_or": ops.logical_or,
           "logical_xor": ops.logical_xor}
for _name, _fn in _BINARY.items():
    # (eq.default, mul.default, ... are TorchScript's scalar-scalar ops, not these)
    overloads = (("default",) if _name in ("maximum", "minimum") or _name.startswith("logical")
                 else ("Tensor", "Scalar"))
    lowers(*(f"{_name}.{o}" for o in overloads))(lambda a, b, _fn=_fn: _fn(a, b))
lowers("max.other")(ops.maximum)


# ---- elementwise ops composed of the base set --------------------------------------------
# torch._decomp sends these to prims ops nothing lowers. ceil, trunc and frac
# are torch's own definitions (bit-exact); log2 and log10 round once more than
# log; log1p and expm1 carry Goldberg's and Kahan's corrections, which keep a
# small argument to a few ulp where log(1 + x) and exp(x) - 1 lose all of it.
# 16-bit floats are computed in float32 and rounded once, as torch does.

def _floating(x):
    return x if x.dtype.is_floating_point else bridge.cast(x, _dt.float32.id)


@lowers("ceil.default")
def ceil(x):
    return ops.neg(ops.floor(ops.neg(x)))


@lowers("trunc.default")
def trunc(x):
    return ops.where(ops.lt(x, 0), ceil(x), ops.floor(x))


@lowers("frac.default")
def frac(x):
    return ops.sub(x, trunc(x))


@lowers("log2.default")
@_in_float32
def log2(x):
    return ops.mul(ops.log(_floating(x)), 1.0 / math.log(2.0))


@lowers("log10.default")
@_in_float32
def log10(x):
    return ops.mul(ops.log(_floating(x)), 1.0 / math.log(10.0))


@lowers("log1p.default")
@_in_float32
def log1p(x):
    x = _floating(x)
    u = ops.add(x, 1.0)
    d = ops.sub(u, 1.0)
    # where 1 + x rounds to 1, log1p(x) is x; where it is inf, x is
    exact = ops.logical_or(ops.eq(d, 0.0), ops.eq(u, math.inf))
    return ops.where(exact, x, ops.div(ops.mul(ops.log(u), x), d))


@lowers("expm1.default")
@_in_float32
def expm1(x):
    x = _floating(x)
    u = ops.exp(x)
    um1 = ops.sub(u, 1.0)
    kahan = ops.div(ops.mul(um1, x), ops.log(u))
    # where e^x rounds to 1, expm1(x) is x; where e^x - 1 rounds to -1 (x far below 0,
    # e^x at most subnormal, its log inexact) it is -1; inf stays inf
    return ops.where(ops.eq(u, 1.0), x,
                     ops.where(ops.logical_or(ops.eq(um1, -1.0), ops.eq(u, math.inf)), um1, kahan))


@lowers("fmax.default")
def fmax(a, b):
    """maximum, but a NaN loses to a number (torch.fmax)."""
    return ops.where(ops.ne(b, b), a, ops.where(ops.ne(a, a), b, ops.maximum(a, b)))


@lowers("fmin.default")
def fmin(a, b):
    return ops.where(ops.ne(b, b), a, ops.where(ops.ne(a, a), b, ops.minimum(a, b)))


@lowers("isnan.default")
def isnan(x):
    """x != x (torch's own decomposition goes to prims.ne, which nothing
    lowers: the backward of ``vector_norm(x, -inf)`` reached it)."""
    if not x.dtype.is_floating_point:
        return bridge.full(x.device, list(x.shape), _dt.bool_.id, False)
    return ops.ne(x, x)


@lowers("mul.out", raw=True)
def mul_out(a, b, *, out):
    """``torch.mul(a, b, out=out)`` with ``out`` of the result's shape: DDP's
    reducer scales each gradient into its bucket this way (``mul_out(bucket
    view, grad, 1 / world size)``)."""
    value = ops.mul(unwrap(a), unwrap(b))
    if tuple(value.shape) != tuple(out.shape):  # (torch resizes out, with a warning)
        raise NotImplementedError(f"out has shape {list(out.shape)}, the result "
                                  f"{list(value.shape)}, and devicekit.torch does not resize "
                                  f"a dk tensor")
    bridge.copy_into(out._dk, value)
    return out
lowers("min.other")(ops.minimum)


# (bitwise_and/or/xor/not, on bool and integers: _lower_select)


@lowers("add.Tensor", "add.Scalar")
def add(a, b, alpha=1):
    return ops.add(a, _scaled(b, alpha))


@lowers("sub.Tensor", "sub.Scalar")
def sub(a, b, alpha=1):
    return ops.sub(a, _scaled(b, alpha))


@lowers("rsub.Tensor", "rsub.Scalar")
def rsub(a, b, alpha=1):
    return ops.sub(b, _scaled(a, alpha))


@lowers("div.Tensor_mode", "div.Scalar_mode")
@_in_float32
def div_mode(a, b, rounding_mode=None):
    ints = [x.dtype for x in (a, b) if isinstance(x, bridge.Tensor)]
    if rounding_mode is not None and not any(d.is_floating_point or d == _dt.bool_ for d in ints) \
            and not any(isinstance(x, float) for x in (a, b)):
        from ._lower_select import int_div  # exact: a float32 quotient is not above 2**24
        return int_div(a, b, rounding_mode)
    q = ops.div(a, b)
    if rounding_mode is None:
        return q
    if rounding_mode == "floor":
        q = ops.floor(q)
    else:  # trunc
        q = ops.mul(ops.sign(q), ops.floor(ops.abs(q)))
    ints = [x.dtype for x in (a, b) if isinstance(x, bridge.Tensor)]
    # integer tensors keep an integer dtype; with a Python float the result is
    # floating, as torch's (div(int tensor, 2.5, rounding_mode="floor") is float32)
    if ints and not any(d.is_floating_point for d in ints) \
            and not any(isinstance(x, float) for x in (a, b)):
        q = bridge.cast(q, bridge.promote_types(*(d.id for d in ints)) if len(ints) == 2 else ints[0].id)
    return q


@lowers("pow.Tensor_Scalar", "pow.Tensor_Tensor", "pow.Scalar")
def pow_(a, b):
    # Squares and float32/float64 cubes as products, as torch's CPU kernel
    # computes them (base * base, (base * base) * base): the same bits, and a
    # general pow kernel (std::pow per element in the reference plugin) is
    # many times slower than two products; HF's tanh-GELU cubes every MLP
    # activation. A 16-bit cube keeps the kernel (its one rounding).
    if isinstance(b, (int, float)) and isinstance(a, bridge.Tensor):
        if b == 2:
            return ops.mul(a, a)
        if b == 3 and bridge.dtype_id(a) in (_dt.float32.id, _dt.float64.id):
            return ops.mul(ops.mul(a, a), a)
    return ops.pow(a, b)


@lowers("where.self", "where.ScalarSelf", "where.ScalarOther", "where.Scalar")
def where(cond, a, b):
    return ops.where(cond, a, b)


def _category(v):
    """bool < integer < floating, of a DeviceKit tensor's dtype or a host number."""
    if isinstance(v, bridge.Tensor):
        return 2 if v.dtype.is_floating_point else 0 if v.dtype == _dt.bool_ else 1
    return 0 if type(v) is bool else 1 if type(v) is int else 2


def _bound(x, b):
    """torch's promotion for a clamp bound: a 0-d tensor of x's category
    (bool, integer or floating) does not widen x (a float16 x clamped by 0-d
    float32 bounds, as T5 does, stays float16), so such a bound takes x's dtype."""
    if (isinstance(b, bridge.Tensor) and b.ndim == 0 and b.dtype != x.dtype
            and _category(b) == _category(x)):
        return ops.cast(b, x.dtype)  # tracked: a bound's gradient still flows
    return b


def _clamp_dtype(x, lo, hi):
    """The dtype torch gives ``clamp(x, lo, hi)`` where it is not x's (an
    integer x with a float bound is float; a bound tensor of a wider dtype
    widens x), else None. DeviceKit's ``ops.clamp`` keeps x's dtype and
    refuses a bound that would change it, so the lowering casts x first. The
    rule is torch's own, asked of empty CPU tensors of the same dtypes and
    ranks (0-d or not), only when a bound could change the dtype."""
    cat = _category(x)
    if all(b is None or (isinstance(b, bridge.Tensor) and b.dtype == x.dtype)
           or (not isinstance(b, bridge.Tensor) and _category(b) <= cat) for b in (lo, hi)):
        return None

    def probe(v):
        if isinstance(v, bridge.Tensor):
            return torch.empty((0,) if v.ndim else (), dtype=torch_dtype(v))
        return v
    try:
        want = dk_dtype(torch.clamp(probe(x), probe(lo), probe(hi)).dtype)
    except (RuntimeError, TypeError):  # a form torch refuses too: ops.clamp says why
        return None
    return None if want == x.dtype else want


def _clamp(x, lo, hi):
    lo, hi = _bound(x, lo), _bound(x, hi)
    want = _clamp_dtype(x, lo, hi)
    return ops.clamp(x if want is None else ops.cast(x, want), lo, hi)


@lowers("clamp.default", "clamp.Tensor")
def clamp(x, min=None, max=None):
    return _clamp(x, min, max)


@lowers("clamp_min.default", "clamp_min.Tensor")
def clamp_min(x, min):
    return _clamp(x, min, None)


@lowers("clamp_max.default", "clamp_max.Tensor")
def clamp_max(x, max):
    return _clamp(x, None, max)


@lowers("lerp.Scalar", "lerp.Tensor")
@_in_float32
def lerp(a, end, weight):
    return ops.add(a, ops.mul(ops.sub(end, a), weight))


@lowers("addcmul.default")
@_in_float32
def addcmul(x, t1, t2, value=1):
    return ops.add(x, _scaled(ops.mul(t1, t2), value))


@lowers("addcdiv.default")
@_in_float32
def addcdiv(x, t1, t2, value=1):
    return ops.add(x, _scaled(ops.div(t1, t2), value))


# ---- in place: the last kernel writes self ---------------------------------------------------
# torch.optim's AdamW updates each parameter and its state with mul_, lerp_,
# addcmul_, addcdiv_ and add_. Derived from the functional lowering (see
# _dispatch), each would compute a new tensor and copy it into self: a launch
# and a temporary per call. These run the last add / sub / mul / div with self
# as its output (bridge.binary_into: the kernel writes self where the plugin
# declares DK_KERNEL_CAP_INPLACE, else the op and one copy), same arithmetic,
# same bits. Half-precision self (computed in float32 and rounded once, see
# _in_float32) and a self whose dtype differs from an operand's (torch's cast
# check) take the derived path.

def _into_ok(self, *others):
    if bridge.dtype_id(self) not in (_dt.float32.id, _dt.float64.id):
        return False
    return all(bridge.dtype_id(o) == bridge.dtype_id(self) for o in others
               if isinstance(o, bridge.Tensor))


_IN_PLACE = {}  # in-place OpOverload -> its compute (for _foreach_'s lists, below)


def _in_place(name, functional, compute):
    """Registers the in-place overload ``name``: ``compute(self, *args,
    **kwargs)`` gives (base op, the operand b) of ``self = self <op> b``."""
    def lowered(self, *args, **kwargs):
        if type(self) is DKTensor and _into(self._dk, compute, unwrap(args), unwrap_kwargs(kwargs)):
            return self
        # the derived path (_lower_views.write_through, registered in the table)
        return DERIVERS["in_place"](LOWERINGS[resolve(functional)], (self, *args), kwargs)
    lowers(name, raw=True)(lowered)
    _IN_PLACE[resolve(name)] = compute


def _into(d, compute, a, k):
    """``d = d <op> b`` by ``bridge.binary_into`` when ``_into_ok``; whether it ran."""
    if not _into_ok(d, *a, *k.values()):
        return False
    op, b = compute(d, *a, **k)
    bridge.binary_into(op, d, d, b)
    return True


for _o in ("Tensor", "Scalar"):
    _in_place(f"add_.{_o}", f"add.{_o}", lambda d, b, alpha=1: ("add", _scaled(b, alpha)))
    _in_place(f"sub_.{_o}", f"sub.{_o}", lambda d, b, alpha=1: ("sub", _scaled(b, alpha)))
    _in_place(f"mul_.{_o}", f"mul.{_o}", lambda d, b: ("mul", b))
    _in_place(f"div_.{_o}", f"div.{_o}", lambda d, b: ("div", b))
    _in_place(f"lerp_.{_o}", f"lerp.{_o}",
              lambda d, end, weight: ("add", ops.mul(ops.sub(end, d), weight)))
_in_place("addcmul_.default", "addcmul.default",
          lambda d, t1, t2, value=1: ("add", _scaled(ops.mul(t1, t2), value)))
_in_place("addcdiv_.default", "addcdiv.default",
          lambda d, t1, t2, value=1: ("add", _scaled(ops.div(t1, t2), value)))


@lowers("masked_fill.Scalar", "masked_fill.Tensor")
def masked_fill(x, mask, value):
    shape = bridge.broadcast_shapes(list(x.shape), list(mask.shape))
    if list(shape) != list(x.shape):  # torch's out-of-place form broadcasts x to the mask too
        x = x.expand(*shape)
    return ops.masked_fill(x, mask, value)


@lowers("tril.default")
def tril(x, diagonal=0):
    return ops.tril(x, diagonal)


@lowers("triu.default")
def triu(x, diagonal=0):
    return ops.triu(x, diagonal)


@lowers("tanh_backward.default")
def tanh_backward(g, out):
    return ops.mul(g, ops.sub(1.0, ops.mul(out, out)))


@lowers("sigmoid_backward.default")
def sigmoid_backward(g, out):
    return ops.mul(g, ops.mul(out, ops.sub(1.0, out)))


@lowers("threshold_backward.default")
def threshold_backward(g, x, threshold):
    return ops.where(ops.le(x, threshold), 0.0, g)


@lowers("silu_backward.default")
def silu_backward(g, x):
    s = F.sigmoid(x)
    return ops.mul(g, ops.mul(s, ops.add(ops.mul(x, ops.sub(1.0, s)), 1.0)))


# ---- reductions ---------------------------------------------------------------------

def _dims(x, dim):
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return None
    return list(dim) if isinstance(dim, (list, tuple)) else [dim]


def _as(x, dtype):
    return x if dtype is None else bridge.cast(x, dk_dtype(dtype).id)


@lowers("sum.dim_IntList", "sum.default")
@_zero_d
def sum_(x, dim=None, keepdim=False, *, dtype=None):
    return ops.sum(_as(x, dtype), _dims(x, dim), keepdim)


@lowers("mean.dim", "mean.default")
@_zero_d
def mean(x, dim=None, keepdim=False, *, dtype=None):
    return ops.mean(_as(x, dtype), _dims(x, dim), keepdim)


@lowers("amax.default")
@_zero_d
def amax(x, dim=(), keepdim=False):
    return ops.amax(x, _dims(x, dim), keepdim)


@lowers("amin.default")
@_zero_d
def amin(x, dim=(), keepdim=False):
    return ops.amin(x, _dims(x, dim), keepdim)


@lowers("max.default")
def max_all(x):
    return ops.amax(x)


@lowers("min.default")
def min_all(x):
    return ops.amin(x)


@lowers("max.dim")
@_zero_d
def max_dim(x, dim, keepdim=False):
    return tuple(x.max(dim, keepdim))


@lowers("min.dim")
@_zero_d
def min_dim(x, dim, keepdim=False):
    return tuple(x.min(dim, keepdim))


@lowers("argmax.default")
@_zero_d
def argmax(x, dim=None, keepdim=False):
    return ops.argmax(x, dim, keepdim)


@lowers("argmin.default")
@_zero_d
def argmin(x, dim=None, keepdim=False):
    return ops.argmin(x, dim, keepdim)


@lowers("cumsum.default")
@_zero_d
def cumsum(x, dim, *, dtype=None):
    return ops.cumsum(_as(x, dtype), dim)


@lowers("any.default", "any.dim", "any.dims")
@_zero_d
def any_(x, dim=None, keepdim=False):
    return ops.ne(ops.sum(ops.ne(x, 0), _dims(x, dim), keepdim), 0)


@lowers("all.default", "all.dim", "all.dims")
@_zero_d
def all_(x, dim=None, keepdim=False):
    return ops.eq(ops.sum(ops.eq(x, 0), _dims(x, dim), keepdim), 0)


@lowers("var.correction")
@_zero_d
def var(x, dim=None, *, correction=None, keepdim=False):
    return F.var(x, _dims(x, dim), keepdim, 1 if correction is None else correction)


@lowers("linalg_vector_norm.default")
@_in_float32
@_zero_d
def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):
    x = ops.abs(_as(x, dtype))
    axes = _dims(x, dim)
    if ord == float("inf"):
        return ops.amax(x, axes, keepdim)
    if ord == 2:
        return ops.sqrt(ops.sum(ops.mul(x, x), axes, keepdim))
    if ord == 1:
        return ops.sum(x, axes, keepdim)
    if ord == 0:  # the number of non-zero elements
        return ops.sum(bridge.cast(ops.ne(x, 0), bridge.dtype_id(x)), axes, keepdim)
    if ord == float("-inf"):
        return ops.amin(x, axes, keepdim)
    return ops.pow(ops.sum(ops.pow(x, float(ord)), axes, keepdim), 1.0 / ord)


# ---- matmul ---------------------------------------------------------------------------

@lowers("mm.default", "bmm.default")
def mm(a, b):
    return bridge.matmul(a, b)


@lowers("addmm.default")
def addmm(bias, a, b, *, beta=1, alpha=1):
    return ops.add(_scaled(bridge.matmul(a, b), alpha), _scaled(bias, beta))


@lowers("baddbmm.default")
def baddbmm(x, a, b, *, beta=1, alpha=1):
    return ops.add(_scaled(bridge.matmul(a, b), alpha), _scaled(x, beta))


# ---- joins and indexing -------------------------------------------------------------------

@lowers("cat.default")
def cat(tensors, dim=0):
    # torch's legacy rule: 1-D empty tensors are skipped whatever the rank
    kept = [t for t in tensors if not (t.ndim == 1 and t.shape[0] == 0)] or list(tensors[:1])
    dt = bridge.dtype_id(kept[0])
    for t in kept[1:]:
        dt = bridge.promote_types(dt, bridge.dtype_id(t))
    kept = [t if bridge.dtype_id(t) == dt else bridge.cast(t, dt) for t in kept]
    d = dim + kept[0].ndim if dim < 0 else dim
    return bridge.cat(kept, d)


@lowers("stack.default")
def stack(tensors, dim=0):
    return ops.stack(list(tensors), dim)


@lowers("gather.default")
def gather(x, dim, index, *, sparse_grad=False):
    if index.numel() == 0:  # torch: an empty index of any rank gives an empty result
        return bridge.full(x.device, list(index.shape), bridge.dtype_id(x), 0)
    if x.ndim == 0 or index.ndim == 0:  # the result has the index's shape, 0-d or not
        one = lambda t: t.reshape([1]) if t.ndim == 0 else t  # noqa: E731
        return ops.gather(one(x), 0, _int64(one(index))).reshape(list(index.shape))
    return ops.gather(x, dim, _int64(index))


def _int64(index):
    """torch's gather and scatter take int32 (and, empty, uint8) indices; DeviceKit's int64."""
    return index if index.dtype == _dt.int64 else bridge.cast(index, _dt.int64.id)


@lowers("scatter_add.default")
@_zero_d
def scatter_add(x, dim, index, src):
    if index.numel() == 0:  # nothing to add (torch allows an empty index of any rank)
        return ops.mul(x, 1)
    return ops.scatter_add(x, dim, _int64(index), src)


@lowers("index_select.default")
@_zero_d
def index_select(x, dim, index):
    d = dim + x.ndim if dim < 0 else dim
    shape = [1] * x.ndim
    shape[d] = index.numel()
    full = list(x.shape)
    full[d] = index.numel()
    idx = bridge.cast(index.reshape(shape), _dt.int64.id).expand(*full)
    return ops.gather(x, d, idx)


# ---- _foreach_*: one op per list element ---------------------------------------------------

# the per-element overload of a _foreach_ overload, by name: a list of
# tensors is one tensor, a list of scalars one scalar
_ELEMENT_OVERLOAD = {"List": "Tensor", "ScalarList": "Scalar", "Scalar": "Scalar",
                     "Tensor": "Tensor", "default": "default"}
_elements = {}  # _foreach_ overload -> _element_op's tuple (the packet, the element overload or None, ...)


def _element_op(func):
    hit = _elements.get(func)
    if hit is not None:
        return hit
    name = func._schema.name.split("::")[1][len("_foreach_"):]
    in_place = name.endswith("_")
    packet = getattr(aten, name, None)
    into = packet is None and in_place
    if into:
        packet = getattr(aten, name[:-1])
    # The overload torch would pick for one element, where the foreach
    # overload's name says it and its argument types agree (pow.Scalar is
    # pow(Scalar self, Tensor exponent), not _foreach_pow.Scalar's element);
    # else None, and each element goes through torch's dispatcher, which picks
    # it. Calling the lowering directly skips two trips through torch's
    # dispatcher and __torch_dispatch__ per element.
    types = [t[5:-1] if t.startswith("List[") else t
             for t in (str(a.type) for a in func._schema.arguments if not a.kwarg_only)]
    element = None
    for overload in dict.fromkeys((_ELEMENT_OVERLOAD.get(func._overloadname), "default")):
        if overload in packet.overloads() and _takes(getattr(packet, overload), types):
            element = getattr(packet, overload)
            break
    schema = (element or getattr(packet, packet.overloads()[0]))._schema
    positional = [a.name for a in schema.arguments if not a.kwarg_only]
    keyword = [a.name for a in schema.arguments if a.kwarg_only]
    _elements[func] = hit = (packet, element, positional, keyword, into, in_place)
    return hit


def _takes(op, types):
    """Whether ``op`` takes one element's arguments, of these types: its
    positional arguments first (those past the given ones must have
    defaults: add_.Scalar's alpha), the rest by its keyword arguments in
    order (how ``foreach`` passes them)."""
    args = op._schema.arguments
    pos = [a for a in args if not a.kwarg_only]
    kw = [str(a.type) for a in args if a.kwarg_only]
    return (types[:len(pos)] == [str(a.type) for a in pos[:len(types)]]
            and all(a.has_default_value() for a in pos[len(types):])
            and types[len(pos):] == kw[:max(0, len(types) - len(pos))])


@derives("foreach")
def foreach(func, args, kwargs):
    """``_foreach_<op>[_](lists..., scalars...)`` as ``<op>[_]`` on each element
    (each a lowered call of its own, counted as that op; where the foreach
    overload's name does not say which overload of ``<op>`` an element
    takes, through torch's dispatcher, which picks it). Arguments a foreach
    op takes positionally that ``<op>`` takes by keyword
    (``_foreach_addcmul_(s, t1, t2, value)``) are passed by that keyword. An
    in-place foreach op whose per-element op has no in-place form in ATen
    (``_foreach_maximum_``: there is ``maximum``, no ``maximum_``; AdamW's
    ``amsgrad`` with ``foreach=True`` calls it) runs the functional op and
    copies each result into its list element. torch.optim's optimizers run
    their ``foreach`` path on dk by default, as on CUDA (``_device.install``)."""
    from ._dispatch import _dispatch
    packet, element, positional, keyword, into, in_place = _element_op(func)
    # (the first list: ``_foreach_pow.ScalarAndTensor`` starts with its scalar base)
    n = next(len(a) for a in args if isinstance(a, (list, tuple)))
    npos = len(positional)
    # An optimizer's update (add_, mul_, lerp_, addcmul_, addcdiv_ ...):
    # each element straight to _in_place's kernel, as the element's own
    # lowering would run it, without its dispatch; not in a coverage run,
    # which counts each element's call.
    compute = _IN_PLACE.get(element) if _coverage._active is None else None
    out = []
    for i in range(n):
        per = [a[i] if isinstance(a, (list, tuple)) and len(a) == n else a for a in args]
        extra = dict(zip(keyword, per[npos:]))
        if kwargs:
            extra.update(kwargs)
        if (compute is not None and type(per[0]) is DKTensor
                and _into(per[0]._dk, compute, unwrap(per[1:npos]), unwrap_kwargs(extra))):
            continue
        if element is not None:
            r = _dispatch(element, per[:npos], extra)
        else:
            r = packet(*per[:npos], **extra)
        if into:
            r = _dispatch(aten.copy_.default, (per[0], r), {})
        out.append(r)
    return None if in_place else out
