"""Composite ops with ``torch.nn.functional`` names, decomposed into base ops.

Use as ``import devicekit.nn.functional as F``. Every op here is built from
differentiable base ops, so gradients flow through the autograd tape with no
extra rules. ``softmax``, ``layer_norm``, ``rms_norm``, ``gelu`` and
``scaled_dot_product_attention`` go through ``_fused.dispatch`` so a plugin's
fused kernel runs when it accepts the call (while autograd records, only with
the plugin's fused backward kernel for the op beside it).

Numerics: float16/bfloat16 inputs are computed in float32 and returned in the
input dtype. Stable formulations: max-subtracted softmax/log_softmax/
logsumexp, two-pass variance, ``sigmoid`` without overflow, attention scale
applied to q before QK^T. Bad arguments raise ``InvalidArgumentError`` or
``DTypeError`` naming the op and the shapes, before anything runs.
"""

import math

from .. import _fused
from .. import ops
from .._shape_ops import _UNSET, pick
from ..autograd import no_grad
from ..tensor import full
from ._common import (broadcasts_to, check_float, check_int, check_rank, check_vector, compute, fail,
                      norm_axis, result, shape_of)
from ._spatial import avg_pool2d, conv2d, max_pool2d

mean = ops.mean
_INF = math.inf


def _not_inf(m):
    """``m`` with +-inf replaced by 0: the shift of a max-subtracted exp that
    keeps all -inf rows at exp(-inf) = 0 instead of NaN."""
    return ops.where(ops.eq(ops.abs(m), _INF), 0.0, m)


# ---- softmax family ---------------------------------------------------------

def softmax(x, axis=-1, *, dim=_UNSET):
    """exp(x - max) / sum(exp(x - max)) along ``axis`` (or ``dim``). A row of
    all -inf gives NaN (0/0), as PyTorch."""
    axis, _ = pick("softmax", axis, dim, axis_default=-1)
    ax = norm_axis("softmax", x, axis)
    check_float("softmax", "x", x)
    return _fused.dispatch("softmax", (x,), {"axis": ax}, lambda x: _softmax(x, ax))


def _softmax(x, axis):
    xf = compute(x)
    if xf.numel() == 0:
        return result(xf * 1.0, x.dtype)
    # The max is a constant shift (softmax is shift-invariant): detached, so
    # its tie-splitting gradient never enters the tape.
    e = ops.exp(xf - ops.max(xf.detach(), axis, keepdims=True))
    return result(e / ops.sum(e, axis, keepdims=True), x.dtype)


def log_softmax(x, axis=-1, *, dim=_UNSET):
    """x - logsumexp(x) along ``axis`` (or ``dim``; max-subtracted)."""
    axis, _ = pick("log_softmax", axis, dim, axis_default=-1)
    ax = norm_axis("log_softmax", x, axis)
    check_float("log_softmax", "x", x)
    xf = compute(x)
    return result(xf - logsumexp(xf, ax, keepdims=True), x.dtype)


def logsumexp(x, axis=_UNSET, keepdims=False, *, dim=_UNSET, keepdim=_UNSET):
    """log(sum(exp(x))) along ``axis`` computed as m + log(sum(exp(x - m))) with
    m the (finite) row max. A row of all -inf gives -inf (not NaN); a row
    containing +inf gives +inf; an empty row gives -inf."""
    axis, keepdims = pick("logsumexp", axis, dim, keepdims, keepdim, axis_default=_UNSET)
    if axis is _UNSET:
        fail("logsumexp", "needs dim= (or axis=)")
    ax = norm_axis("logsumexp", x, axis)
    check_float("logsumexp", "x", x)
    xf = compute(x)
    if xf.shape[ax] == 0:
        shape = [1 if i == ax else s for i, s in enumerate(xf.shape)]
        out = full(shape, -_INF, dtype=x.dtype, device=x.device)
        return out if keepdims else out.reshape([s for i, s in enumerate(shape) if i != ax])
    m = _not_inf(ops.max(xf.detach(), ax, keepdims=True))
    out = ops.log(ops.sum(ops.exp(xf - m), ax, keepdims=True)) + m
    return result(out if keepdims else out.reshape([s for i, s in enumerate(out.shape) if i != ax]),
                  x.dtype)


def var(x, axis=None, keepdims=False, correction=1, *, dim=_UNSET, keepdim=_UNSET):
    """Variance, two-pass: sum((x - mean)^2) / (n - correction), like
    ``torch.var``. n - correction <= 0 divides by zero (inf/NaN, as PyTorch)."""
    axis, keepdims = pick("var", axis, dim, keepdims, keepdim)
    check_float("var", "x", x)
    xf = compute(x)
    axes = ops._axes(xf, axis)
    n = math.prod(xf.shape[a] for a in axes)
    d = xf - ops.mean(xf, axes, keepdims=True)
    return result(ops.sum(d * d, axes, keepdims) / float(max(n - correction, 0)), x.dtype)


# ---- normalisation ----------------------------------------------------------

def layer_norm(x, weight=None, bias=None, eps=1e-5):
    """(x - mean) / sqrt(var + eps) * weight + bias over the last dim, with the
    biased variance (as ``torch.nn.functional.layer_norm`` with
    ``normalized_shape=x.shape[-1:]``)."""
    check_rank("layer_norm", "x", x, 1)
    check_float("layer_norm", "x", x)
    check_vector("layer_norm", "weight", weight, x.shape[-1])
    check_vector("layer_norm", "bias", bias, x.shape[-1])
    return _fused.dispatch("layer_norm", (x, weight, bias), {"eps": float(eps)},
                           lambda x, w, b: _layer_norm(x, w, b, float(eps)))


def _layer_norm(x, weight, bias, eps):
    xf = compute(x)
    d = xf - ops.mean(xf, -1, keepdims=True)
    y = d * ops.rsqrt(ops.mean(d * d, -1, keepdims=True) + eps)
    if weight is not None:
        y = y * compute(weight)
    if bias is not None:
        y = y + compute(bias)
    return result(y, x.dtype)


def rms_norm(x, weight=None, eps=1e-6):
    """x / sqrt(mean(x^2) + eps) * weight over the last dim."""
    check_rank("rms_norm", "x", x, 1)
    check_float("rms_norm", "x", x)
    check_vector("rms_norm", "weight", weight, x.shape[-1])
    return _fused.dispatch("rms_norm", (x, weight), {"eps": float(eps)},
                           lambda x, w: _rms_norm(x, w, float(eps)))


def _rms_norm(x, weight, eps):
    xf = compute(x)
    y = xf * ops.rsqrt(ops.mean(xf * xf, -1, keepdims=True) + eps)
    if weight is not None:
        y = y * compute(weight)
    return result(y, x.dtype)


# ---- activations ------------------------------------------------------------

def relu(x):
    """max(x, 0); NaN stays NaN; the gradient at 0 is 0 (as PyTorch)."""
    return ops.where(ops.le(x, 0), 0.0, x)


def sigmoid(x):
    """1 / (1 + exp(-x)) without overflow: exp is only taken of -|x|."""
    check_float("sigmoid", "x", x)
    xf = compute(x)
    positive = ops.ge(xf, 0)
    e = ops.exp(ops.where(positive, ops.neg(xf), xf))  # in (0, 1]
    return result(ops.where(positive, 1.0 / (e + 1.0), e / (e + 1.0)), x.dtype)


def silu(x):
    """x * sigmoid(x)."""
    check_float("silu", "x", x)
    xf = compute(x)
    return result(xf * sigmoid(xf), x.dtype)


def gelu(x, approximate="none"):
    """x * Phi(x): ``"none"`` uses erf, ``"tanh"`` the tanh approximation
    (as ``torch.nn.functional.gelu``)."""
    check_float("gelu", "x", x)
    if approximate not in ("none", "tanh"):
        fail("gelu", f"approximate must be 'none' or 'tanh', got {approximate!r}")
    return _fused.dispatch("gelu", (x,), {"approximate": approximate == "tanh"},
                           lambda x: _gelu(x, approximate))


def _gelu(x, approximate):
    xf = compute(x)
    if approximate == "none":
        y = xf * 0.5 * (ops.erf(xf * (1.0 / math.sqrt(2.0))) + 1.0)
    else:
        inner = (xf + xf * xf * xf * 0.044715) * math.sqrt(2.0 / math.pi)
        y = xf * 0.5 * (ops.tanh(inner) + 1.0)
    return result(y, x.dtype)


def swiglu(x):
    """silu(a) * b where a, b are the first and second halves of the last dim
    (``a, b = x.chunk(2, -1)``: the gate is the FIRST half). The last dim must
    be even; the output's last dim is half of it."""
    check_rank("swiglu", "x", x, 1)
    if x.shape[-1] % 2:
        fail("swiglu", f"the last dim of x must be even, got shape {shape_of(x)}")
    gate, value = _halves(x)
    return silu(gate) * value


# ---- layers -----------------------------------------------------------------

def linear(x, weight, bias=None):
    """x @ weight^T + bias, weight [out, in] (as PyTorch)."""
    check_rank("linear", "x", x, 1)
    check_rank("linear", "weight", weight, 2, 2)
    if x.shape[-1] != weight.shape[1]:
        fail("linear", f"x {shape_of(x)} and weight {shape_of(weight)}: x's last dim must equal "
                       f"weight's dim 1 (weight is [out, in])")
    check_vector("linear", "bias", bias, weight.shape[0])
    xc, wt = compute(x), compute(weight).transpose(0, 1)
    y = ops.matmul(xc, wt)  # [..., in] @ [in, out] folds into one 2-D product
    if bias is not None:
        y = y + compute(bias)
    return result(y, x.dtype)


def embedding(ids, table):
    """``table[ids]``: rows of table [num, dim] picked by integer ids of any shape.
    An id outside [0, num) is an error the gather kernel reports."""
    check_int("embedding", "ids", ids)
    check_rank("embedding", "table", table, 2, 2)
    n, dim = ids.numel(), table.shape[1]
    index = ids.reshape(n, 1).to("int64").expand(n, dim)
    return ops.gather(table, 0, index).reshape(*ids.shape, dim)


def _halves(x):
    h = x.shape[-1] // 2
    return x[..., :h], x[..., h:]


def _concat_halves(a, b):
    """[a, b] along the last dim, from base ops only: select between a and b
    on a new size-2 axis, then merge it into the last dim."""
    first = ops.eq(ops.arange(2, device=a.device).reshape(2, 1), 0)
    both = ops.where(first, a[..., None, :], b[..., None, :])
    return both.reshape(*both.shape[:-2], 2 * a.shape[-1])


def rotary_embedding(x, cos, sin):
    """x * cos + rotate_half(x) * sin with rotate_half(x) = [-x2, x1] for the
    halves x1, x2 of the last dim (the Llama / Hugging Face "rotate half"
    convention, not interleaved pairs). cos and sin have x's full last dim
    (HF builds them as cat(freqs, freqs).cos()) and broadcast to x."""
    check_rank("rotary_embedding", "x", x, 1)
    if x.shape[-1] % 2:
        fail("rotary_embedding", f"the last dim of x must be even, got shape {shape_of(x)}")
    for name, t in (("cos", cos), ("sin", sin)):
        if not broadcasts_to(t, shape_of(x)):
            fail("rotary_embedding", f"{name} {shape_of(t)} does not broadcast to x {shape_of(x)}")
    xf = compute(x)
    x1, x2 = _halves(xf)
    return result(xf * compute(cos) + _concat_halves(ops.neg(x2), x1) * compute(sin), x.dtype)


# ---- losses and regularisation ---------------------------------------------

def cross_entropy(logits, target, ignore_index=-100, reduction="mean"):
    """Softmax cross-entropy with integer class targets (as PyTorch).

    logits [N, C] with target [N], logits [N, C, d1, ...] with target
    [N, d1, ...], or logits [C] with a 0-d target. Targets equal to
    ``ignore_index`` contribute 0 and are left out of the mean. ``reduction``:
    ``"mean"`` (over non-ignored targets; when ALL are ignored the result is
    NaN, 0/0, exactly as PyTorch), ``"sum"`` or ``"none"``.
    """
    check_float("cross_entropy", "logits", logits)
    check_int("cross_entropy", "target", target)
    check_rank("cross_entropy", "logits", logits, 1)
    if reduction not in ("mean", "sum", "none"):
        fail("cross_entropy", f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    want = [] if logits.ndim == 1 else [logits.shape[0], *logits.shape[2:]]
    if shape_of(target) != want:
        fail("cross_entropy", f"target {shape_of(target)} does not match logits "
                              f"{shape_of(logits)}: expected target shape {want}")
    if logits.ndim > 2:  # classes last
        logits = logits.permute(0, *range(2, logits.ndim), 1)
    lsm = log_softmax(compute(logits), -1)
    target = target.to("int64")
    valid = ops.ne(target, ignore_index)
    picked = ops.gather(lsm, -1, ops.where(valid, target, 0)[..., None])
    loss = ops.where(valid, ops.neg(picked.reshape(want)), 0.0)
    if reduction == "sum":
        loss = ops.sum(loss)
    elif reduction == "mean":
        loss = ops.sum(loss) / ops.sum(valid).to(loss.dtype)
    return result(loss, logits.dtype)


def dropout(x, p, seed, training=True):
    """Zeroes each element with probability ``p`` and scales the rest by
    1/(1-p). Element i is kept iff ``ops.rand(x.shape, seed)[i] >= p`` (the
    float32 Philox stream, offset 0), so the mask is the same on every
    backend. p=0 or training=False returns x; p=1 returns zeros."""
    if not 0.0 <= p <= 1.0:
        fail("dropout", f"p must be in [0, 1], got {p} (x {shape_of(x)})")
    check_float("dropout", "x", x)
    if not training or p == 0:
        return x
    keep = ops.ge(ops.rand(shape_of(x), seed, device=x.device), float(p))
    return ops.where(keep, x * (1.0 / (1.0 - p) if p < 1 else 0.0), 0.0)


# ---- attention --------------------------------------------------------------

def _check_attention(q, k, v, mask, is_causal):
    op = "scaled_dot_product_attention"
    shapes = f"q {shape_of(q)}, k {shape_of(k)}, v {shape_of(v)}"
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_rank(op, name, t, 3)
        check_float(op, name, t)
    if not (q.ndim == k.ndim == v.ndim):
        fail(op, f"q, k and v must have the same rank: {shapes}")
    if q.shape[:-3] != k.shape[:-3] or k.shape[:-3] != v.shape[:-3]:
        fail(op, f"batch dims differ: {shapes}")
    if k.shape[-3] != v.shape[-3] or k.shape[-2] != v.shape[-2]:
        fail(op, f"k and v need the same heads and length: {shapes}")
    if q.shape[-1] != k.shape[-1]:
        fail(op, f"q and k need the same head dim: {shapes}")
    if k.shape[-3] == 0 or q.shape[-3] % k.shape[-3]:
        fail(op, f"q heads must be a multiple of k/v heads (grouped-query attention): {shapes}")
    if mask is not None:
        if is_causal:
            fail(op, "pass attn_mask or is_causal=True, not both")
        if not (mask.dtype == "bool" or mask.dtype.is_floating_point):
            fail(op, f"attn_mask must be bool or floating, got {mask.dtype}")
        target = [*q.shape[:-1], k.shape[-2]]
        if not broadcasts_to(mask, target):
            fail(op, f"attn_mask {shape_of(mask)} does not broadcast to {target} ({shapes})")


def scaled_dot_product_attention(q, k, v, attn_mask=None, is_causal=False, scale=None):
    """softmax(q*scale @ k^T + mask) @ v, as ``torch.nn.functional.
    scaled_dot_product_attention``.

    Layout q [..., Hq, Lq, D], k [..., Hkv, Lk, D], v [..., Hkv, Lk, Dv]; Hq a
    multiple of Hkv (grouped-query: q head h uses k/v head h // (Hq/Hkv)).
    ``attn_mask``: bool (True = attend) or float (added to the scores),
    broadcastable to [..., Hq, Lq, Lk]. ``is_causal``: key j is visible to
    query i iff j <= i (top-left aligned, also when Lq != Lk). ``scale``
    defaults to 1/sqrt(D) and multiplies q BEFORE QK^T. float16/bfloat16 are
    computed in float32.

    A FULLY MASKED query row (no visible key, or all -inf float mask) gives
    output 0 and zero gradient, not NaN.
    """
    _check_attention(q, k, v, attn_mask, is_causal)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    return _fused.dispatch(
        "scaled_dot_product_attention", (q, k, v, attn_mask),
        {"scale": scale, "is_causal": bool(is_causal)},
        lambda q, k, v, m: _attention(q, k, v, m, bool(is_causal), scale))


def _repeat_heads(t, groups):
    """[..., H, L, D] -> [..., H*groups, L, D], each head repeated ``groups`` times in place."""
    if groups == 1:
        return t
    *lead, h, n, d = t.shape
    return t[..., None, :, :].expand(*lead, h, groups, n, d).reshape(*lead, h * groups, n, d)


def _attention(q, k, v, mask, is_causal, scale):
    groups = q.shape[-3] // k.shape[-3]
    qf, kf, vf = compute(q), _repeat_heads(compute(k), groups), _repeat_heads(compute(v), groups)
    scores = ops.matmul(qf * scale, kf.transpose(-1, -2))
    lq, lk = q.shape[-2], k.shape[-2]
    visible = None
    if is_causal:
        visible = ops.le(ops.arange(lk, device=q.device).reshape(1, lk),
                         ops.arange(lq, device=q.device).reshape(lq, 1))
    elif mask is not None and mask.dtype == "bool":
        visible = mask
    elif mask is not None:
        scores = scores + compute(mask)
    if visible is not None:
        scores = ops.where(visible, scores, -_INF)
    if scores.numel() and lk:
        # Max-subtracted softmax whose all -inf rows give 0: shift by 0 there,
        # exp gives 0s, and the row sum (0) is replaced by 1.
        e = ops.exp(scores - _not_inf(ops.max(scores.detach(), -1, keepdims=True)))
        s = ops.sum(e, -1, keepdims=True)
        scores = e / ops.where(ops.eq(s, 0), 1.0, s)
    return result(ops.matmul(scores, vf), q.dtype)


# ---- optimiser --------------------------------------------------------------

def adamw_step(param, grad, m, v, step, lr, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01):
    """One ``torch.optim.AdamW`` step (amsgrad=False, maximize=False); returns
    new ``(param, m, v)`` and records nothing on the tape. ``step`` is the
    1-based count of this update (bias corrections 1 - beta**step):

        param *= 1 - lr * weight_decay
        m = beta1 * m + (1 - beta1) * grad;  v = beta2 * v + (1 - beta2) * grad^2
        param -= lr / (1 - beta1**step) * m / (sqrt(v) / sqrt(1 - beta2**step) + eps)
    """
    for name, t in (("grad", grad), ("m", m), ("v", v)):
        if shape_of(t) != shape_of(param):
            fail("adamw_step", f"{name} {shape_of(t)} must have param's shape {shape_of(param)}")
    if step < 1:
        fail("adamw_step", f"step must be >= 1 (the 1-based count of this update), got {step}")
    with no_grad():
        p, g = compute(param.detach()), compute(grad)
        m_new = compute(m) * beta1 + g * (1.0 - beta1)
        v_new = compute(v) * beta2 + g * g * (1.0 - beta2)
        denom = ops.sqrt(v_new) / math.sqrt(1.0 - beta2 ** step) + eps
        p = p * (1.0 - lr * weight_decay) - m_new / denom * (lr / (1.0 - beta1 ** step))
        return result(p, param.dtype), result(m_new, m.dtype), result(v_new, v.dtype)


__all__ = ["adamw_step", "avg_pool2d", "conv2d", "cross_entropy", "dropout", "embedding", "gelu",
           "layer_norm", "linear", "log_softmax", "logsumexp", "max_pool2d", "mean", "relu",
           "rms_norm", "rotary_embedding", "scaled_dot_product_attention", "sigmoid", "silu",
           "softmax", "swiglu", "var"]
