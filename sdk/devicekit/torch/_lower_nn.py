"""Lowerings of torch's neural-network ops onto DeviceKit's composites, so a
plugin's fused kernels are chosen exactly as for native DeviceKit models:
layer norm, softmax, GELU and scaled dot-product attention forward go through
``devicekit.nn.functional`` (``_fused.dispatch``: the first fused kernel
whose ``supports`` accepts, else the decomposition); their backwards first
offer the call to the plugin's fused backward kernel
(``devicekit.bridge.try_fused``) and otherwise run the decomposition's
gradient in base ops. Every choice is counted in
``devicekit.composite_stats()``.

Also here: losses, embeddings, padding, and the random ops, which draw from
the device's Philox stream (``_device.rng``; ``torch.manual_seed`` seeds it).
"""

import math

import torch

from .. import bridge
from .. import autograd as dk_autograd
from .. import dtypes as _dt
from .. import ops
from ..nn import functional as F
from . import _device
from ._table import COMPOSITE, RANDOM, lowers
from ._lower_ops import _in_float32, _zero_d

aten = torch.ops.aten
META = "meta"


def _fused_backward(op, inputs, attrs, want):
    """The plugin's fused kernel for backward op ``op``: its outputs, or None
    (counted as decomposed, with the reason) when none accepts."""
    if not bridge.fused_kernels_enabled():
        bridge.count_composite(op, why="fused_kernels(False)")
        return None
    hit = bridge.try_fused(op, inputs, attrs, want)
    if isinstance(hit, str):
        bridge.count_composite(op, why=hit)
        return None
    outs, kernel = hit
    bridge.count_composite(op, kernel)
    return outs


def _compute(x):
    return bridge.cast(x, _dt.float32.id) if x.dtype in (_dt.float16, _dt.bfloat16) else x


def _axis(dim, x):
    return dim + x.ndim if dim < 0 else dim


# ---- layer norm ---------------------------------------------------------------------

def _flat(x, k):
    """x as [..., prod(last k dims)] (the SDK's norms work on the last dim)."""
    lead = list(x.shape[:x.ndim - k])
    return x.reshape(*lead, math.prod(x.shape[x.ndim - k:]))


def _layer_norm_output(x, normalized_shape, weight, bias, eps):
    """(layer norm of ``x`` over its last len(normalized_shape) dims, ``x``
    flattened to 2-d there)."""
    x2 = _flat(x, len(normalized_shape))
    w2 = weight.reshape(-1) if weight is not None else None
    b2 = bias.reshape(-1) if bias is not None else None
    return F.layer_norm(x2, w2, b2, eps).reshape(*x.shape), x2


def native_layer_norm_without_statistics(x, normalized_shape, weight, bias, eps):
    """``native_layer_norm`` where nothing reads the statistics (a compiled
    inference graph, which uses only output 0: ``_compile`` picks this one
    then): the output alone, one fused launch instead of nine."""
    return _layer_norm_output(x, normalized_shape, weight, bias, eps)[0], None, None


@lowers("native_layer_norm.default", kind=COMPOSITE)
def native_layer_norm(x, normalized_shape, weight, bias, eps):
    k = len(normalized_shape)
    out, x2 = _layer_norm_output(x, normalized_shape, weight, bias, eps)
    # torch returns the statistics too (its backward may use them); the fused
    # kernel gives only `out`, so they are two reductions here.
    xf = _compute(x2)
    mean = ops.mean(xf, -1, keepdims=True)
    d = ops.sub(xf, mean)
    rstd = ops.rsqrt(ops.add(ops.mean(ops.mul(d, d), -1, keepdims=True), float(eps)))
    stat_shape = list(x.shape[:x.ndim - k]) + [1] * k
    mean, rstd = mean.reshape(*stat_shape), rstd.reshape(*stat_shape)
    rstd._dk_eps = float(eps)  # lets the backward offer the call to a fused kernel
    return out, mean, rstd


@lowers("native_layer_norm_backward.default", kind=COMPOSITE)
def native_layer_norm_backward(g, x, normalized_shape, mean, rstd, weight, bias, output_mask):
    k = len(normalized_shape)
    g2, x2 = _flat(g, k).contiguous(), _flat(x, k)
    w2 = weight.reshape(-1) if weight is not None else None
    want = [bool(output_mask[0]), bool(output_mask[1]) and weight is not None,
            bool(output_mask[2]) and bias is not None]
    eps = getattr(rstd, "_dk_eps", None)
    outs = None
    if eps is not None:
        outs = _fused_backward("layer_norm_backward", (g2, x2, w2), {"eps": eps}, want)
    else:
        bridge.count_composite("layer_norm_backward", why="statistics not from devicekit's forward")
    if outs is None:
        outs = _layer_norm_backward(g2, x2, w2, _flat(mean, k), _flat(rstd, k), want)
    dx, dw, db = outs
    shape = list(normalized_shape)
    return (dx.reshape(*x.shape) if dx is not None and want[0] else None,
            dw.reshape(*shape) if dw is not None and want[1] else None,
            db.reshape(*shape) if db is not None and want[2] else None)


def _layer_norm_backward(g, x, w, mean, rstd, want):
    """The layer norm gradient in base ops, from torch's saved statistics."""
    gf, xf = _compute(g), _compute(x)
    xhat = ops.mul(ops.sub(xf, mean), rstd)
    lead = list(range(x.ndim - 1))
    dx = dw = db = None
    if want[0]:
        wg = ops.mul(gf, _compute(w)) if w is not None else gf
        inner = ops.add(ops.mean(wg, -1, keepdims=True),
                        ops.mul(xhat, ops.mean(ops.mul(wg, xhat), -1, keepdims=True)))
        dx = bridge.cast(ops.mul(ops.sub(wg, inner), rstd), bridge.dtype_id(x))
    if want[1]:
        dw = bridge.cast(ops.sum(ops.mul(gf, xhat), lead), bridge.dtype_id(w))
    if want[2]:
        db = bridge.cast(ops.sum(gf, lead), bridge.dtype_id(g))
    return dx, dw, db


# ---- softmax family ------------------------------------------------------------------

@lowers("_softmax.default", kind=COMPOSITE)
@_zero_d
def softmax(x, dim, half_to_float=False):
    return F.softmax(bridge.cast(x, _dt.float32.id) if half_to_float else x, _axis(dim, x))


@lowers("_safe_softmax.default", kind=COMPOSITE)
@_zero_d
def safe_softmax(x, dim, dtype=None):
    if dtype is not None:
        x = bridge.cast(x, _device.dk_dtype(dtype).id)
    d = _axis(dim, x)
    out = F.softmax(x, d)
    masked = ops.eq(ops.amax(x, d, keepdims=True), -math.inf)  # a row with nothing to attend
    return ops.where(masked, 0.0, out)


@lowers("_softmax_backward_data.default", kind=COMPOSITE)
@_in_float32
@_zero_d
def softmax_backward(g, out, dim, input_dtype):
    d = _axis(dim, out)
    hit = _fused_backward("softmax_backward", (g.contiguous(), out), {"axis": d}, [True])
    if hit is not None:
        return hit[0]
    return ops.mul(out, ops.sub(g, ops.sum(ops.mul(g, out), d, keepdims=True)))


@lowers("_log_softmax.default", kind=COMPOSITE)
@_zero_d
def log_softmax(x, dim, half_to_float=False):
    return F.log_softmax(bridge.cast(x, _dt.float32.id) if half_to_float else x, _axis(dim, x))


@lowers("_log_softmax_backward_data.default")
@_in_float32
@_zero_d
def log_softmax_backward(g, out, dim, input_dtype):
    d = _axis(dim, out)
    return ops.sub(g, ops.mul(ops.exp(out), ops.sum(g, d, keepdims=True)))


# ---- GELU -------------------------------------------------------------------------------

@lowers("gelu.default", kind=COMPOSITE)
def gelu(x, *, approximate="none"):
    return F.gelu(x, approximate)


@lowers("gelu_backward.default", kind=COMPOSITE)
def gelu_backward(g, x, *, approximate="none"):
    hit = _fused_backward("gelu_backward", (g.contiguous(), x), {"approximate": approximate == "tanh"},
                          [True])
    if hit is not None:
        return hit[0]
    xf, gf = _compute(x), _compute(g)
    if approximate == "tanh":
        k, c = math.sqrt(2.0 / math.pi), 0.044715
        t = ops.tanh(ops.mul(ops.add(xf, ops.mul(ops.mul(ops.mul(xf, xf), xf), c)), k))
        left = ops.mul(ops.add(t, 1.0), 0.5)
        dt = ops.mul(ops.sub(1.0, ops.mul(t, t)), ops.add(ops.mul(ops.mul(xf, xf), 3 * c * k), k))
        d = ops.add(left, ops.mul(ops.mul(xf, 0.5), dt))
    else:
        cdf = ops.mul(ops.add(ops.erf(ops.mul(xf, 1.0 / math.sqrt(2.0))), 1.0), 0.5)
        pdf = ops.mul(ops.exp(ops.mul(ops.mul(xf, xf), -0.5)), 1.0 / math.sqrt(2.0 * math.pi))
        d = ops.add(cdf, ops.mul(xf, pdf))
    return bridge.cast(ops.mul(gf, d), bridge.dtype_id(x))


# ---- scaled dot-product attention --------------------------------------------------------

@lowers("_fused_sdp_choice.default", kind=META)
def sdp_choice(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None,
               enable_gqa=False):
    """torch asks the device which SDPA implementation to use: DeviceKit's
    (torch's "overrideable" slot) unless dropout is asked for, which its SDPA
    op has not; then torch's math decomposition."""
    from torch.nn.attention import SDPBackend
    if dropout_p > 0.0 or (attn_mask is not None and is_causal):
        return int(SDPBackend.MATH)
    return int(SDPBackend.OVERRIDEABLE)


def _sdpa_attrs(q, is_causal, scale):
    return {"scale": 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale),
            "is_causal": bool(is_causal)}


@lowers("_scaled_dot_product_fused_attention_overrideable.default", kind=COMPOSITE)
def sdpa(q, k, v, attn_bias=None, dropout_p=0.0, is_causal=False, return_debug_mask=False, *,
         scale=None):
    if dropout_p > 0.0:
        raise NotImplementedError("DeviceKit's scaled_dot_product_attention has no dropout; "
                                  "torch picks its math path for dropout_p > 0")
    out = F.scaled_dot_product_attention(q, k, v, attn_bias, bool(is_causal), scale)
    nothing = bridge.empty(q.device, [0], _dt.float32.id)  # logsumexp, seeds: not produced
    return (out, nothing, nothing, nothing, q.shape[-2], k.shape[-2], nothing, nothing, nothing)


@lowers("_scaled_dot_product_fused_attention_overrideable_backward.default", kind=COMPOSITE)
def sdpa_backward(g, q, k, v, attn_bias, grad_input_mask, out, logsumexp, cum_seq_q, cum_seq_k,
                  max_q, max_k, dropout_p, is_causal, philox_seed, philox_offset, *, scale=None):
    attrs = _sdpa_attrs(q, is_causal, scale)
    mask_grad = bool(grad_input_mask[3]) and attn_bias is not None
    hit = None
    if not mask_grad:
        hit = _fused_backward("scaled_dot_product_attention_backward",
                              (g.contiguous(), q, k, v, out, attn_bias), attrs, [True] * 3)
    if hit is not None:
        return (*hit, None)
    grads = _vjp(lambda q, k, v, m: F.scaled_dot_product_attention(
        q, k, v, m, attrs["is_causal"], attrs["scale"]), (q, k, v, attn_bias),
        [True, True, True, mask_grad], g)
    return tuple(grads)


class _Attention(torch.autograd.Function):
    """torch's scaled_dot_product_attention on dk: DeviceKit's SDPA forward and
    backward through torch's "overrideable" fused-attention ops (lowered
    above), so a plugin's fused SDPA kernels run as for native models."""

    @staticmethod
    def forward(ctx, q, k, v, mask, is_causal, scale):
        out = aten._scaled_dot_product_fused_attention_overrideable(
            q, k, v, mask, 0.0, is_causal, False, scale=scale)[0]
        ctx.save_for_backward(q, k, v, out, mask)
        ctx.is_causal, ctx.scale = is_causal, scale
        return out

    @staticmethod
    def backward(ctx, g):
        q, k, v, out, mask = ctx.saved_tensors
        want = [ctx.needs_input_grad[0], ctx.needs_input_grad[1], ctx.needs_input_grad[2],
                mask is not None and ctx.needs_input_grad[3]]
        empty = q.new_empty([0])
        dq, dk, dv, dmask = aten._scaled_dot_product_fused_attention_overrideable_backward(
            g, q, k, v, mask, want, out, empty, empty, empty, q.shape[-2], k.shape[-2], 0.0,
            ctx.is_causal, empty, empty, scale=ctx.scale)
        return dq, dk, dv, dmask, None, None


def _attention_kernel(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                      enable_gqa=False):
    """``aten::scaled_dot_product_attention`` for dk tensors, at torch's autograd
    level (the op is a CompositeImplicitAutograd decomposition in torch, which
    would otherwise never reach the device as one op). A mask together with
    is_causal applies both, as torch's CPU and CUDA kernels do (its math
    decomposition refuses the pair): the causal triangle is folded into the
    mask. Dropout takes torch's math decomposition. That one adds the mask to
    the scores as it is: torch's own ``scaled_dot_product_attention`` (which
    this kernel replaces on dk) first turns a boolean mask into 0 where True
    and -inf where False (``convert_boolean_attn_mask``), so this does too
    (else a boolean mask would add 1 and 0: what HF's GPT-2 passes under
    torch.compile, with attention dropout)."""
    if attn_mask is not None and is_causal:
        keep = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
        attn_mask = (attn_mask & keep if attn_mask.dtype == torch.bool
                     else attn_mask.masked_fill(keep.logical_not(), float("-inf")))
        is_causal = False
    if dropout_p > 0.0:
        if attn_mask is not None and attn_mask.dtype == torch.bool:
            attn_mask = torch.zeros_like(attn_mask, dtype=q.dtype).masked_fill(
                attn_mask.logical_not(), float("-inf"))
        return aten._scaled_dot_product_attention_math(
            q, k, v, attn_mask, dropout_p, is_causal, None, scale=scale, enable_gqa=enable_gqa)[0]
    return _Attention.apply(q, k, v, attn_mask, bool(is_causal), scale)


def register_attention(lib):
    lib.impl("scaled_dot_product_attention", _attention_kernel, "AutogradPrivateUse1")


@lowers("scaled_dot_product_attention.default", kind=COMPOSITE, raw=True)
def sdpa_below_autograd(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None,
                        enable_gqa=False):
    """The same op where torch's autograd keys are off (``torch.inference_mode``,
    which text generation uses): the kernel above never runs then, and torch's
    composite would take its math path (it asks no device which kernel to use),
    so a plugin's fused SDPA would never run at inference."""
    return _attention_kernel(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)


def _vjp(fn, inputs, needs, g):
    """Gradients of ``fn`` at ``inputs`` (DeviceKit's autograd over its decomposition)."""
    leaves = [t.detach().requires_grad_(True) if t is not None and n else t
              for t, n in zip(inputs, needs)]
    with dk_autograd.enable_grad():
        out = fn(*leaves)
    out.backward(g)
    return [t.grad if n and t is not None else None for t, n in zip(leaves, needs)]


# ---- losses, embedding, padding -----------------------------------------------------------

_NONE, _MEAN, _SUM = 0, 1, 2


def _nll_parts(x, target, weight, ignore_index):
    t = bridge.cast(target, _dt.int64.id)
    valid = ops.ne(t, ignore_index)
    safe = ops.where(valid, t, 0)
    w = ops.gather(weight, 0, safe.reshape(-1)).reshape(*t.shape) if weight is not None else None
    coef = bridge.cast(ops.where(valid, w if w is not None else 1.0, 0.0), bridge.dtype_id(x))
    return safe, coef


@lowers("nll_loss_forward.default")
def nll_loss_forward(x, target, weight, reduction, ignore_index):
    x2 = x.reshape(1, x.shape[0]) if x.ndim == 1 else x
    t2 = target.reshape(1) if x.ndim == 1 else target
    safe, coef = _nll_parts(x2, t2, weight, ignore_index)
    picked = ops.gather(x2, 1, safe.reshape(-1, 1)).reshape(*t2.shape)
    loss = ops.neg(ops.mul(picked, coef))
    total = ops.sum(coef)
    if reduction == _NONE:
        return (loss.reshape(*target.shape), total)
    loss = ops.sum(loss)
    return (ops.div(loss, total) if reduction == _MEAN else loss, total)


@lowers("nll_loss_backward.default")
def nll_loss_backward(g, x, target, weight, reduction, ignore_index, total_weight):
    x2 = x.reshape(1, x.shape[0]) if x.ndim == 1 else x
    t2 = target.reshape(1) if x.ndim == 1 else target
    safe, coef = _nll_parts(x2, t2, weight, ignore_index)
    if reduction == _MEAN:
        coef = ops.div(coef, total_weight)
    src = ops.neg(ops.mul(coef, g.reshape(*t2.shape) if reduction == _NONE else g))
    out = bridge.full(x.device, list(x2.shape), bridge.dtype_id(x), 0)
    out = ops.scatter_add(out, 1, safe.reshape(-1, 1), bridge.cast(src.reshape(-1, 1), bridge.dtype_id(x)))
    return out.reshape(*x.shape)


@lowers("embedding.default")
def embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    n, dim = indices.numel(), weight.shape[1]
    idx = bridge.cast(indices.reshape(n, 1), _dt.int64.id).expand(n, dim)
    return ops.gather(weight, 0, idx).reshape(*indices.shape, dim)


@lowers("embedding_dense_backward.default")
def embedding_dense_backward(g, indices, num_weights, padding_idx, scale_grad_by_freq):
    n, dim = indices.numel(), g.shape[-1]
    idx = bridge.cast(indices.reshape(n, 1), _dt.int64.id)
    g2 = g.reshape(n, dim)
    if padding_idx >= 0:
        g2 = ops.where(ops.ne(idx, padding_idx), g2, 0.0)
    if scale_grad_by_freq:
        count = ops.scatter_add(bridge.full(g.device, [num_weights, 1], bridge.dtype_id(g), 0), 0, idx,
                                bridge.full(g.device, [n, 1], bridge.dtype_id(g), 1))
        g2 = ops.div(g2, ops.gather(count, 0, idx).expand(n, dim))
    out = bridge.full(g.device, [num_weights, dim], bridge.dtype_id(g), 0)
    return ops.scatter_add(out, 0, idx.expand(n, dim), g2.contiguous())


@lowers("constant_pad_nd.default")
def constant_pad_nd(x, pad, value=0):
    shape, src = list(x.shape), x
    starts = [0] * x.ndim
    for i in range(len(pad) // 2):
        d = x.ndim - 1 - i
        lo, hi = int(pad[2 * i]), int(pad[2 * i + 1])
        cut_lo, cut_hi = max(-lo, 0), max(-hi, 0)
        if cut_lo or cut_hi:
            src = src.narrow(d, cut_lo, src.shape[d] - cut_lo - cut_hi)
        shape[d] = x.shape[d] + lo + hi
        starts[d] = max(lo, 0)
    out = bridge.full(x.device, shape, bridge.dtype_id(x), value)
    if src.numel():
        offset = bridge.storage_offset(out) + sum(s * st for s, st in zip(starts, out.strides))
        bridge.copy_into(bridge.view(out, list(src.shape), list(out.strides), offset), src)
    return out


# ---- random ops: the device's Philox stream -----------------------------------------------

def _no_generator(generator, op):
    if generator is not None:
        raise NotImplementedError(f"aten.{op}: a torch.Generator cannot drive a dk device; "
                                  f"DeviceKit's Philox stream is seeded by torch.manual_seed")


def _uniform(t, dtype=_dt.float32):
    seed, offset = _device.rng(t.device).take(t.numel())
    return ops.rand(list(t.shape), seed, offset, dtype=dtype, device=t.device)


@lowers("bernoulli_.float", kind=RANDOM, raw=True)
def bernoulli_(self, p=0.5, *, generator=None):
    _no_generator(generator, "bernoulli_")
    bridge.copy_into(self._dk, ops.lt(_uniform(self._dk), float(p)))
    return self


@lowers("bernoulli.p", kind=RANDOM)
def bernoulli_p(x, p=0.5, *, generator=None):
    _no_generator(generator, "bernoulli")
    return bridge.cast(ops.lt(_uniform(x), float(p)), bridge.dtype_id(x))


@lowers("bernoulli.default", kind=RANDOM)
def bernoulli(x, *, generator=None):
    _no_generator(generator, "bernoulli")
    return bridge.cast(ops.lt(_uniform(x), x), bridge.dtype_id(x))


@lowers("native_dropout.default", kind=RANDOM)
def native_dropout(x, p, train):
    if not train or p == 0:
        return (ops.clone(x), bridge.full(x.device, list(x.shape), _dt.bool_.id, True))
    keep = ops.ge(_uniform(x), float(p))
    scale = 1.0 / (1.0 - p) if p < 1 else 0.0
    return (bridge.cast(ops.where(keep, ops.mul(x, scale), 0.0), bridge.dtype_id(x)), keep)


@lowers("native_dropout_backward.default")
def native_dropout_backward(g, mask, scale):
    return bridge.cast(ops.where(mask, ops.mul(g, scale), 0.0), bridge.dtype_id(g))


@lowers("uniform_.default", kind=RANDOM, raw=True)
def uniform_(self, from_=0.0, to=1.0, *, generator=None):
    _no_generator(generator, "uniform_")
    u = _uniform(self._dk, _dt.float64 if self.dtype == torch.float64 else _dt.float32)
    bridge.copy_into(self._dk, ops.add(ops.mul(u, float(to - from_)), float(from_)))
    return self


@lowers("normal_.default", kind=RANDOM, raw=True)
def normal_(self, mean=0.0, std=1.0, *, generator=None):
    _no_generator(generator, "normal_")
    t = self._dk
    seed, offset = _device.rng(t.device).take(2 * t.numel())
    z = ops.randn(list(t.shape), seed, offset, device=t.device)
    bridge.copy_into(t, ops.add(ops.mul(z, float(std)), float(mean)))
    return self


@lowers("random_.from", kind=RANDOM, raw=True)
def random_from(self, from_, to=None, *, generator=None):
    _no_generator(generator, "random_")
    t = self._dk
    if to is None:
        raise NotImplementedError("aten.random_.from with to=None (the dtype's whole range) is "
                                  "not lowered")
    seed, offset = _device.rng(t.device).take(t.numel())
    bridge.copy_into(t, ops.randint(int(from_), int(to), list(t.shape), seed, offset,
                                   device=t.device))
    return self


@lowers("random_.to", kind=RANDOM, raw=True)
def random_to(self, to, *, generator=None):
    return random_from(self, 0, to, generator=generator)


# The *_like draws: a new tensor (torch.empty_like's arguments) filled by the
# in-place draw above, as torch.rand(..., device=dk) is made. torch's
# exponential_, geometric_, log_normal_ and cauchy_ decompose into them.

def _like(x, dtype, device, memory_format):
    # (device= a CPU device: empty_like's lowering refuses it, naming it)
    return torch.empty_like(x, dtype=dtype, device=device, memory_format=memory_format)


@lowers("rand_like.default", kind=RANDOM, raw=True)
def rand_like(x, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return uniform_(_like(x, dtype, device, memory_format))


@lowers("randn_like.default", kind=RANDOM, raw=True)
def randn_like(x, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return normal_(_like(x, dtype, device, memory_format))


@lowers("randint_like.default", kind=RANDOM, raw=True)
def randint_like(x, high, *, dtype=None, layout=None, device=None, pin_memory=None,
                 memory_format=None):
    return random_from(_like(x, dtype, device, memory_format), 0, high)


@lowers("randint_like.low_dtype", kind=RANDOM, raw=True)
def randint_like_low(x, low, high, *, dtype=None, layout=None, device=None, pin_memory=None,
                     memory_format=None):
    return random_from(_like(x, dtype, device, memory_format), low, high)

