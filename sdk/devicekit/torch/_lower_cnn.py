"""Lowerings of what convolutional networks use: batch norm (train and eval,
running statistics updated in place as torch updates them), group norm,
and their backwards; max/avg/adaptive pooling and their backwards; and
``convolution`` in the forms torch's op takes (1-D, 2-D and 3-D, groups incl.
depthwise, stride, padding, dilation, transposed) forward and backward; 3-D
max/avg/adaptive pooling (with indices) and their backwards.

All of it is base ops (no fused kernel yet): pooling and convolution gather
every kernel window through an index table built once per geometry in numpy
(im2col, as ``devicekit.nn._spatial`` does, here with dilation, ceil_mode and
groups); the backwards scatter_add through the same table. 1-D inputs run as
2-D with a height of 1 (torch's 1-D pooling already reaches the 2-D ops).
16-bit inputs compute in float32 and round once, as torch's kernels do.
"""

import threading

import numpy as np

import torch

from .. import bridge
from .. import dtypes as _dt
from .. import ops
from ..tensor import tensor
from ._table import COMPOSITE, lowers

aten = torch.ops.aten


def _compute(x):
    return bridge.cast(x, _dt.float32.id) if x.dtype in (_dt.float16, _dt.bfloat16) else x


def _as(x, like):
    return bridge.cast(x, bridge.dtype_id(like))


# ---- batch norm -----------------------------------------------------------------------

def _bn_axes(x):
    return [0] + list(range(2, x.ndim))


def _per_channel(t, x):
    """A [C] statistic shaped to broadcast against x [N, C, ...]."""
    return t.reshape(1, x.shape[1], *([1] * (x.ndim - 2)))


def _stat_dtype(x, param):
    """torch saves norm statistics in the input's dtype, or in float32 for a
    16-bit input with float32 parameters (mixed precision)."""
    return _dt.float32.id if param is not None and param.dtype == _dt.float32 else bridge.dtype_id(x)


def _bn_forward(x, weight, bias, running_mean, running_var, training, momentum, eps):
    xf = _compute(x)
    axes = _bn_axes(x)
    if training:
        mean = ops.mean(xf, axes)
        d = ops.sub(xf, _per_channel(mean, x))
        var = ops.mean(ops.mul(d, d), axes)
        invstd = ops.rsqrt(ops.add(var, float(eps)))
        n = x.numel() // x.shape[1]
        if running_mean is not None:
            m = float(momentum)
            new = ops.add(ops.mul(_compute(running_mean), 1.0 - m), ops.mul(mean, m))
            bridge.copy_into(running_mean, _as(new, running_mean))
        if running_var is not None:
            m = float(momentum)
            unbiased = ops.mul(var, n / (n - 1)) if n > 1 else var
            new = ops.add(ops.mul(_compute(running_var), 1.0 - m), ops.mul(unbiased, m))
            bridge.copy_into(running_var, _as(new, running_var))
    else:
        if running_mean is None or running_var is None:
            raise NotImplementedError("DeviceKit's batch norm in eval mode needs running_mean "
                                      "and running_var")
        mean = _compute(running_mean)
        invstd = ops.rsqrt(ops.add(_compute(running_var), float(eps)))
        d = ops.sub(xf, _per_channel(mean, x))
    out = ops.mul(d, _per_channel(invstd, x))
    if weight is not None:
        out = ops.mul(out, _per_channel(_compute(weight), x))
    if bias is not None:
        out = ops.add(out, _per_channel(_compute(bias), x))
    out = _as(out, x)
    stat = _stat_dtype(x, running_mean if running_mean is not None else weight)
    if training:
        return out, bridge.cast(mean, stat), bridge.cast(invstd, stat)
    nothing = bridge.empty(x.device, [0], stat)  # torch saves no statistics in eval
    return out, nothing, nothing


@lowers("native_batch_norm.default", "_native_batch_norm_legit.default", kind=COMPOSITE)
def native_batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps):
    return _bn_forward(x, weight, bias, running_mean, running_var, training, momentum, eps)


@lowers("_native_batch_norm_legit.no_stats", kind=COMPOSITE)
def native_batch_norm_no_stats(x, weight, bias, training, momentum, eps):
    return _bn_forward(x, weight, bias, None, None, training, momentum, eps)


@lowers("_native_batch_norm_legit_no_training.default", kind=COMPOSITE)
def native_batch_norm_no_training(x, weight, bias, running_mean, running_var, momentum, eps):
    return _bn_forward(x, weight, bias, running_mean, running_var, False, momentum, eps)


def _bn_backward(g, x, weight, running_mean, running_var, save_mean, save_invstd, train, eps,
                 output_mask):
    gf, xf = _compute(g), _compute(x)
    axes = _bn_axes(x)
    if train:
        mean, invstd = _compute(save_mean), _compute(save_invstd)
    else:
        mean = _compute(running_mean)
        invstd = ops.rsqrt(ops.add(_compute(running_var), float(eps)))
    xhat = ops.mul(ops.sub(xf, _per_channel(mean, x)), _per_channel(invstd, x))
    dx = dw = db = None
    if output_mask[0]:
        scale = _per_channel(invstd, x)
        if weight is not None:
            scale = ops.mul(scale, _per_channel(_compute(weight), x))
        if train:
            inner = ops.add(ops.mean(gf, axes, keepdims=True),
                            ops.mul(xhat, ops.mean(ops.mul(gf, xhat), axes, keepdims=True)))
            dx = ops.mul(ops.sub(gf, inner), scale)
        else:
            dx = ops.mul(gf, scale)
        dx = _as(dx, x)
    like = weight if weight is not None else x
    if output_mask[1]:
        dw = _as(ops.sum(ops.mul(gf, xhat), axes), like)
    if output_mask[2]:
        db = _as(ops.sum(gf, axes), like)
    return dx, dw, db


@lowers("native_batch_norm_backward.default", kind=COMPOSITE)
def native_batch_norm_backward(g, x, weight, running_mean, running_var, save_mean, save_invstd,
                               train, eps, output_mask):
    return _bn_backward(g, x, weight, running_mean, running_var, save_mean, save_invstd, train,
                        eps, output_mask)


@lowers("batch_norm_backward.default", kind=COMPOSITE)
def batch_norm_backward(g, x, weight, running_mean, running_var, save_mean, save_var, update, eps,
                        output_mask, reserve):
    # torch's newer op: save_var holds the saved inverse std, as in native_batch_norm_backward
    return _bn_backward(g, x, weight, running_mean, running_var, save_mean, save_var, update,
                        eps, output_mask)


# ---- group norm ----------------------------------------------------------------------

@lowers("native_group_norm.default", kind=COMPOSITE)
def native_group_norm(x, weight, bias, n, c, hw, group, eps):
    x3 = _compute(x).reshape(n, group, -1)
    mean = ops.mean(x3, 2, keepdims=True)
    d = ops.sub(x3, mean)
    rstd = ops.rsqrt(ops.add(ops.mean(ops.mul(d, d), 2, keepdims=True), float(eps)))
    out = ops.mul(d, rstd).reshape(n, c, -1)
    if weight is not None:
        out = ops.mul(out, _compute(weight).reshape(1, c, 1))
    if bias is not None:
        out = ops.add(out, _compute(bias).reshape(1, c, 1))
    stat = _stat_dtype(x, weight)
    return (_as(out.reshape(*x.shape), x), bridge.cast(mean.reshape(n, group), stat),
            bridge.cast(rstd.reshape(n, group), stat))


@lowers("native_group_norm_backward.default", kind=COMPOSITE)
def native_group_norm_backward(g, x, mean, rstd, weight, n, c, hw, group, output_mask):
    mean3, rstd3 = _compute(mean).reshape(n, group, 1), _compute(rstd).reshape(n, group, 1)
    xhat = ops.mul(ops.sub(_compute(x).reshape(n, group, -1), mean3), rstd3).reshape(n, c, -1)
    gf = _compute(g).reshape(n, c, -1)
    dx = dw = db = None
    if output_mask[0]:
        wg = ops.mul(gf, _compute(weight).reshape(1, c, 1)) if weight is not None else gf
        wg3, xhat3 = wg.reshape(n, group, -1), xhat.reshape(n, group, -1)
        inner = ops.add(ops.mean(wg3, 2, keepdims=True),
                        ops.mul(xhat3, ops.mean(ops.mul(wg3, xhat3), 2, keepdims=True)))
        dx = _as(ops.mul(ops.sub(wg3, inner), rstd3).reshape(*x.shape), x)
    like = weight if weight is not None else x
    if output_mask[1]:
        dw = _as(ops.sum(ops.mul(gf, xhat), [0, 2]), like)
    if output_mask[2]:
        db = _as(ops.sum(gf, [0, 2]), like)
    return dx, dw, db


class _GroupNorm(torch.autograd.Function):
    """torch's native_group_norm on dk at the autograd level. torch's own
    formula, when mean or rstd get a gradient (or under create_graph), runs
    infinitely_differentiable_native_group_norm_backward, whose in-place
    unsqueeze_ a dk tensor cannot take (its sizes are fixed when it is
    made). Here the gradients reaching mean and rstd are added analytically
    to native_group_norm_backward's (first-order only)."""

    @staticmethod
    def forward(ctx, x, weight, bias, n, c, hw, group, eps):
        with torch._C._AutoDispatchBelowAutograd():  # to the lowering, not back here
            out, mean, rstd = aten.native_group_norm(x, weight, bias, n, c, hw, group, eps)
        ctx.save_for_backward(x, weight, mean, rstd)
        ctx.shape = (n, c, hw, group)
        ctx.mark_non_differentiable()
        return out, mean, rstd

    @staticmethod
    def backward(ctx, g, g_mean, g_rstd):
        x, weight, mean, rstd = ctx.saved_tensors
        n, c, hw, group = ctx.shape
        need = ctx.needs_input_grad
        mask = [need[0], need[1] and weight is not None, need[2]]
        if g is None:
            g = torch.zeros_like(x)
        dx, dw, db = aten.native_group_norm_backward(g, x, mean, rstd, weight, n, c, hw, group,
                                                     mask)
        if need[0] and (g_mean is not None or g_rstd is not None):
            x3 = x.reshape(n, group, -1)
            d = x3.shape[-1]
            extra = torch.zeros_like(x3)
            if g_mean is not None:  # d mean / dx = 1/D
                extra = extra + (g_mean / d).reshape(n, group, 1)
            if g_rstd is not None:  # d rstd / dx = -rstd^3 (x - mean) / D
                r = rstd.reshape(n, group, 1)
                extra = extra - (g_rstd.reshape(n, group, 1) * r * r * r / d) * (
                    x3 - mean.reshape(n, group, 1))
            dx = dx + extra.reshape(x.shape)
        return (dx if need[0] else None, dw if mask[1] else None, db if need[2] else None,
                None, None, None, None, None)


def _group_norm_kernel(x, weight, bias, n, c, hw, group, eps):
    return _GroupNorm.apply(x, weight, bias, n, c, hw, group, eps)


def register_autograd(lib):
    lib.impl("native_group_norm", _group_norm_kernel, "AutogradPrivateUse1")



# ---- window index tables (pooling, convolution) ---------------------------------------

_cache_lock = threading.Lock()
_cache = {}  # (device name, geometry) -> (index [K*O] int64, valid [K*O] bool or None, oh, ow)


def _pair(v, fill=None):
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    if not v:
        return fill
    return (int(v[0]), int(v[0])) if len(v) == 1 else (int(v[0]), int(v[1]))


def _out_size(size, k, s, p, d, ceil):
    span = size + 2 * p - d * (k - 1) - 1
    if span < 0:
        raise NotImplementedError(f"DeviceKit's window ops: kernel {k} (dilation {d}) is larger "
                                  f"than the padded input {size + 2 * p}")
    out = (span + (s - 1 if ceil else 0)) // s + 1
    if ceil and (out - 1) * s >= size + p:  # the last window must start inside the input
        out -= 1
    return out


def _geometry(h, w, kernel, stride, padding, dilation, ceil=False, out=None):
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, stride, padding, dilation
    oh, ow = out or (_out_size(h, kh, sh, ph, dh, ceil), _out_size(w, kw, sw, pw, dw, ceil))
    rows = (np.arange(oh) * sh - ph)[None, None, :, None] + (np.arange(kh) * dh)[:, None, None, None]
    cols = (np.arange(ow) * sw - pw)[None, None, None, :] + (np.arange(kw) * dw)[None, :, None, None]
    valid = (rows >= 0) & (rows < h) & (cols >= 0) & (cols < w)
    flat = np.where(valid, rows * w + cols, 0).astype(np.int64)
    return flat.reshape(-1), valid.reshape(-1), oh, ow


def _windows_index(device, h, w, kernel, stride, padding, dilation, ceil=False, out=None):
    """Flat input position of every (ky, kx, oy, ox) window element and
    whether it lies inside the unpadded input (None: all do); built once per
    geometry and device. ``out``: the number of windows (oh, ow) when the
    caller knows it (a transposed convolution's input size)."""
    key = (device.name, h, w, kernel, stride, padding, dilation, ceil, out)
    with _cache_lock:
        hit = _cache.get(key)
    if hit is not None:
        return hit
    flat, valid, oh, ow = _geometry(h, w, kernel, stride, padding, dilation, ceil, out)
    hit = (tensor(flat, device=device),
           None if valid.all() else tensor(valid, device=device), oh, ow)
    with _cache_lock:
        _cache[key] = hit
    return hit


def _geometry_nd(sizes, kernel, stride, padding, dilation, ceil=False, out=None):
    """:func:`_geometry` in any number of spatial dims: flat input position of
    every (k_0, .., k_n, o_0, .., o_n) window element, whether it is inside the
    input, and the output sizes."""
    nd = len(sizes)
    outs = tuple(out) if out else tuple(
        _out_size(sizes[i], kernel[i], stride[i], padding[i], dilation[i], ceil) for i in range(nd))
    flat, valid = np.zeros([1] * (2 * nd), np.int64), np.ones([1] * (2 * nd), bool)
    for i in range(nd):
        ks, os_ = [1] * (2 * nd), [1] * (2 * nd)
        ks[i], os_[nd + i] = kernel[i], outs[i]
        pos = ((np.arange(outs[i]) * stride[i] - padding[i]).reshape(os_)
               + (np.arange(kernel[i]) * dilation[i]).reshape(ks))
        valid = valid & (pos >= 0) & (pos < sizes[i])
        flat = flat * sizes[i] + pos
    flat = np.broadcast_to(np.where(valid, flat, 0), tuple(kernel) + outs)
    valid = np.broadcast_to(valid, flat.shape)
    return flat.reshape(-1).astype(np.int64), valid.reshape(-1), outs


def _windows_index_nd(device, sizes, kernel, stride, padding, dilation, ceil=False, out=None):
    """:func:`_windows_index` in any number of spatial dims: (index, valid or
    None, output sizes), cached per geometry and device."""
    key = ("nd", device.name, tuple(sizes), tuple(kernel), tuple(stride), tuple(padding),
           tuple(dilation), ceil, None if out is None else tuple(out))
    with _cache_lock:
        hit = _cache.get(key)
    if hit is not None:
        return hit
    flat, valid, outs = _geometry_nd(sizes, kernel, stride, padding, dilation, ceil, out)
    hit = (tensor(flat, device=device), None if valid.all() else tensor(valid, device=device),
           outs)
    with _cache_lock:
        _cache[key] = hit
    return hit


def _gather(x, index, valid, fill):
    """x [N, C, *spatial] -> [N, C, K*O]: every window element, fill where padded."""
    n, c = x.shape[:2]
    k = index.shape[0]
    cols = ops.gather(x.reshape(n, c, int(np.prod(x.shape[2:]))), 2,
                      index.reshape(1, 1, k).expand(n, c, k))
    if valid is not None:
        cols = ops.where(valid.reshape(1, 1, k), cols, fill)
    return cols


def _scatter(src, index, valid, shape):
    """The adjoint of ``_gather``: src [N, C, K*O] summed into zeros of ``shape``."""
    n, c = shape[:2]
    k = index.shape[0]
    if valid is not None:
        src = ops.where(valid.reshape(1, 1, k), src, 0.0)
    out = bridge.full(src.device, [n, c, int(np.prod(shape[2:]))], bridge.dtype_id(src), 0)
    out = ops.scatter_add(out, 2, index.reshape(1, 1, k).expand(n, c, k), src.contiguous())
    return out.reshape(*shape)


def _batched(fn, nd=2):
    """Pooling lowerings take [N, C, *spatial] or unbatched [C, *spatial]."""
    def lowered(*args):
        if args[0].ndim == nd + 2:
            return fn(*args)
        up = [a.reshape(1, *a.shape) if isinstance(a, bridge.Tensor) and a.ndim == nd + 1 else a
              for a in args]
        out = fn(*up)
        down = lambda t: t.reshape(*t.shape[1:]) if isinstance(t, bridge.Tensor) else t  # noqa: E731
        return tuple(down(t) for t in out) if isinstance(out, tuple) else down(out)
    lowered.__name__ = fn.__name__
    return lowered


# ---- pooling -----------------------------------------------------------------------------

def _pool_args(kernel_size, stride, padding, dilation=1):
    kernel = _pair(kernel_size)
    return kernel, _pair(stride, kernel), _pair(padding), _pair(dilation)


@lowers("max_pool2d_with_indices.default", kind=COMPOSITE)
@_batched
def max_pool2d_with_indices(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    kernel, stride, padding, dilation = _pool_args(kernel_size, stride, padding, dilation)
    n, c, h, w = x.shape
    index, valid, oh, ow = _windows_index(x.device, h, w, kernel, stride, padding, dilation,
                                          bool(ceil_mode))
    k = kernel[0] * kernel[1]
    cols = _gather(x, index, valid, -np.inf).reshape(n, c, k, oh * ow)
    out = ops.max(cols, 2)
    which = ops.argmax(cols, 2)  # the first maximum of each window, as torch picks
    table = index.reshape(1, 1, k, oh * ow).expand(n, c, k, oh * ow)
    idx = ops.gather(table, 2, which.reshape(n, c, 1, oh * ow))
    return out.reshape(n, c, oh, ow), idx.reshape(n, c, oh, ow)


@lowers("max_pool2d_with_indices_backward.default", kind=COMPOSITE)
@_batched
def max_pool2d_with_indices_backward(g, x, kernel_size, stride, padding, dilation, ceil_mode,
                                     indices):
    return _index_scatter(g, x, indices)


def _index_scatter(g, x, indices):
    """Each output's gradient summed into the input element its flat index names."""
    n, c = x.shape[:2]
    out = bridge.full(g.device, [n, c, int(np.prod(x.shape[2:]))], bridge.dtype_id(g), 0)
    o = int(np.prod(g.shape[2:]))
    src = _compute(g).reshape(n, c, o).contiguous()
    out = ops.scatter_add(bridge.cast(out, bridge.dtype_id(src)), 2,
                          indices.reshape(n, c, o).contiguous(), src)
    return _as(out, g).reshape(*x.shape)


def _avg_divisor(h, w, kernel, stride, padding, ceil, count_include_pad, divisor_override,
                 oh, ow):
    """[O] divisor per output position, as torch's avg_pool2d counts it."""
    if divisor_override:
        return np.full(oh * ow, float(divisor_override), np.float32)
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, padding

    def span(o, k, s, p, size):
        start = np.arange(o) * s - p
        end = np.minimum(start + k, size + p)
        whole = end - start
        return whole, np.minimum(end, size) - np.maximum(start, 0)
    hw, hv = span(oh, kh, sh, ph, h)
    ww, wv = span(ow, kw, sw, pw, w)
    count = np.outer(hw, ww) if count_include_pad else np.outer(hv, wv)
    return count.reshape(-1).astype(np.float32)


def _avg_setup(x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    kernel, stride, padding, _ = _pool_args(kernel_size, stride, padding)
    n, c, h, w = x.shape
    index, valid, oh, ow = _windows_index(x.device, h, w, kernel, stride, padding, (1, 1),
                                          bool(ceil_mode))
    div = _avg_divisor(h, w, kernel, stride, padding, bool(ceil_mode), bool(count_include_pad),
                       divisor_override, oh, ow)
    return index, valid, oh, ow, kernel[0] * kernel[1], tensor(div, device=x.device)


@lowers("avg_pool2d.default", kind=COMPOSITE)
@_batched
def avg_pool2d(x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    n, c = x.shape[:2]
    index, valid, oh, ow, k, div = _avg_setup(x, kernel_size, stride, padding, ceil_mode,
                                              count_include_pad, divisor_override)
    cols = _gather(_compute(x), index, valid, 0.0).reshape(n, c, k, oh * ow)
    out = ops.div(ops.sum(cols, 2), div.reshape(1, 1, oh * ow))
    return _as(out, x).reshape(n, c, oh, ow)


@lowers("avg_pool2d_backward.default", kind=COMPOSITE)
@_batched
def avg_pool2d_backward(g, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                        divisor_override):
    n, c = x.shape[:2]
    index, valid, oh, ow, k, div = _avg_setup(x, kernel_size, stride, padding, ceil_mode,
                                              count_include_pad, divisor_override)
    share = ops.div(_compute(g).reshape(n, c, 1, oh * ow), div.reshape(1, 1, 1, oh * ow))
    src = share.expand(n, c, k, oh * ow).reshape(n, c, k * oh * ow)
    return _as(_scatter(src, index, valid, x.shape), x)


def _adaptive_index(device, h, w, oh, ow):
    """Adaptive average pooling as windows of the largest size, padded
    entries invalid; [K*O] index and valid, and [O] counts."""
    key = ("adaptive", device.name, h, w, oh, ow)
    with _cache_lock:
        hit = _cache.get(key)
    if hit is not None:
        return hit

    def bounds(o, size):
        i = np.arange(o)
        start, end = (i * size) // o, -((-(i + 1) * size) // o)
        return start, end
    hs, he = bounds(oh, h)
    ws, we = bounds(ow, w)
    kh, kw = int((he - hs).max()), int((we - ws).max())
    rows = hs[None, None, :, None] + np.arange(kh)[:, None, None, None]
    cols = ws[None, None, None, :] + np.arange(kw)[None, :, None, None]
    valid = (rows < he[None, None, :, None]) & (cols < we[None, None, None, :])
    flat = np.where(valid, rows * w + cols, 0).astype(np.int64).reshape(-1)
    count = np.outer(he - hs, we - ws).reshape(-1).astype(np.float32)
    hit = (tensor(flat, device=device), tensor(valid.reshape(-1), device=device),
           tensor(count, device=device), kh * kw)
    with _cache_lock:
        _cache[key] = hit
    return hit


@lowers("_adaptive_avg_pool2d.default", kind=COMPOSITE)
@_batched
def adaptive_avg_pool2d(x, output_size):
    n, c, h, w = x.shape
    oh, ow = _pair(output_size)
    index, valid, count, k = _adaptive_index(x.device, h, w, oh, ow)
    cols = _gather(_compute(x), index, valid, 0.0).reshape(n, c, k, oh * ow)
    out = ops.div(ops.sum(cols, 2), count.reshape(1, 1, oh * ow))
    return _as(out, x).reshape(n, c, oh, ow)


@lowers("_adaptive_avg_pool2d_backward.default", kind=COMPOSITE)
@_batched
def adaptive_avg_pool2d_backward(g, x):
    n, c, h, w = x.shape
    oh, ow = g.shape[2:]
    index, valid, count, k = _adaptive_index(x.device, h, w, oh, ow)
    share = ops.div(_compute(g).reshape(n, c, 1, oh * ow), count.reshape(1, 1, 1, oh * ow))
    src = share.expand(n, c, k, oh * ow).reshape(n, c, k * oh * ow)
    return _as(_scatter(src, index, valid, x.shape), x)


@lowers("adaptive_max_pool2d.default", kind=COMPOSITE)
@_batched
def adaptive_max_pool2d(x, output_size):
    n, c, h, w = x.shape
    oh, ow = _pair(output_size)
    index, valid, _, k = _adaptive_index(x.device, h, w, oh, ow)
    cols = _gather(x, index, valid, -np.inf).reshape(n, c, k, oh * ow)
    which = ops.argmax(cols, 2)  # the first maximum of each window, as torch picks
    table = index.reshape(1, 1, k, oh * ow).expand(n, c, k, oh * ow)
    idx = ops.gather(table, 2, which.reshape(n, c, 1, oh * ow))
    return ops.max(cols, 2).reshape(n, c, oh, ow), idx.reshape(n, c, oh, ow)


@lowers("adaptive_max_pool2d_backward.default", kind=COMPOSITE)
@_batched
def adaptive_max_pool2d_backward(g, x, indices):
    return _index_scatter(g, x, indices)


# ---- 3-D pooling ------------------------------------------------------------------------

def _triple(v, fill=None):
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    if not v:
        return fill
    return tuple(int(v[0]) for _ in range(3)) if len(v) == 1 else tuple(int(e) for e in v)


def _batched3(fn):
    return _batched(fn, nd=3)


def _max_windows(x, index, valid, k, outs):
    """The maximum of each window and its flat input index (the first maximum)."""
    n, c = x.shape[:2]
    o = int(np.prod(outs))
    cols = _gather(x, index, valid, -np.inf).reshape(n, c, k, o)
    which = ops.argmax(cols, 2)  # the first maximum of each window, as torch picks
    table = index.reshape(1, 1, k, o).expand(n, c, k, o)
    idx = ops.gather(table, 2, which.reshape(n, c, 1, o))
    return ops.max(cols, 2).reshape(n, c, *outs), idx.reshape(n, c, *outs)


@lowers("max_pool3d_with_indices.default", kind=COMPOSITE)
@_batched3
def max_pool3d_with_indices(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    kernel = _triple(kernel_size)
    stride, padding, dilation = _triple(stride, kernel), _triple(padding), _triple(dilation)
    index, valid, outs = _windows_index_nd(x.device, tuple(x.shape[2:]), kernel, stride, padding,
                                           dilation, bool(ceil_mode))
    return _max_windows(x, index, valid, int(np.prod(kernel)), outs)


@lowers("max_pool3d_with_indices_backward.default", kind=COMPOSITE)
@_batched3
def max_pool3d_with_indices_backward(g, x, kernel_size, stride, padding, dilation, ceil_mode,
                                     indices):
    return _index_scatter(g, x, indices)


def _avg3_setup(x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    """(index, valid, output sizes, K, [O] divisor) as torch's avg_pool3d counts it."""
    kernel = _triple(kernel_size)
    stride, padding = _triple(stride, kernel), _triple(padding)
    sizes = tuple(x.shape[2:])
    index, valid, outs = _windows_index_nd(x.device, sizes, kernel, stride, padding, (1, 1, 1),
                                           bool(ceil_mode))
    if divisor_override:
        div = np.full(int(np.prod(outs)), float(divisor_override), np.float32)
    else:
        count = np.ones(())
        for i in range(3):
            start = np.arange(outs[i]) * stride[i] - padding[i]
            end = np.minimum(start + kernel[i], sizes[i] + padding[i])
            inside = np.minimum(end, sizes[i]) - np.maximum(start, 0)
            count = np.multiply.outer(count, end - start if count_include_pad else inside)
        div = count.reshape(-1).astype(np.float32)
    return index, valid, outs, int(np.prod(kernel)), tensor(div, device=x.device)


def _mean_windows(x, index, valid, k, outs, div):
    """The mean of each of x's pooling windows (``index``/``valid``: k taps per
    output position, as the 3-D index tables give them) over ``div`` per output."""
    n, c = x.shape[:2]
    o = int(np.prod(outs))
    cols = _gather(_compute(x), index, valid, 0.0).reshape(n, c, k, o)
    out = ops.div(ops.sum(cols, 2), div.reshape(1, 1, o))
    return _as(out, x).reshape(n, c, *outs)


def _mean_windows_backward(g, x, index, valid, k, outs, div):
    """:func:`_mean_windows`' gradient: each output's share scattered to its taps."""
    n, c = x.shape[:2]
    o = int(np.prod(outs))
    share = ops.div(_compute(g).reshape(n, c, 1, o), div.reshape(1, 1, 1, o))
    src = share.expand(n, c, k, o).reshape(n, c, k * o)
    return _as(_scatter(src, index, valid, list(x.shape)), x)


@lowers("avg_pool3d.default", kind=COMPOSITE)
@_batched3
def avg_pool3d(x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    index, valid, outs, k, div = _avg3_setup(x, kernel_size, stride, padding, ceil_mode,
                                             count_include_pad, divisor_override)
    return _mean_windows(x, index, valid, k, outs, div)


@lowers("avg_pool3d_backward.default", kind=COMPOSITE)
@_batched3
def avg_pool3d_backward(g, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                        divisor_override):
    index, valid, outs, k, div = _avg3_setup(x, kernel_size, stride, padding, ceil_mode,
                                             count_include_pad, divisor_override)
    return _mean_windows_backward(g, x, index, valid, k, outs, div)


def _adaptive_index_nd(device, sizes, outs):
    """:func:`_adaptive_index` in any number of spatial dims."""
    key = ("adaptive-nd", device.name, tuple(sizes), tuple(outs))
    with _cache_lock:
        hit = _cache.get(key)
    if hit is not None:
        return hit
    nd = len(sizes)
    flat, valid = np.zeros([1] * (2 * nd), np.int64), np.ones([1] * (2 * nd), bool)
    count, kernel = np.ones(()), []
    for i in range(nd):
        j = np.arange(outs[i])
        start, end = (j * sizes[i]) // outs[i], -((-(j + 1) * sizes[i]) // outs[i])
        kernel.append(int((end - start).max()))
        ks, os_ = [1] * (2 * nd), [1] * (2 * nd)
        ks[i], os_[nd + i] = kernel[i], outs[i]
        pos = start.reshape(os_) + np.arange(kernel[i]).reshape(ks)
        valid = valid & (pos < end.reshape(os_))
        flat = flat * sizes[i] + pos
        count = np.multiply.outer(count, end - start)
    flat = np.broadcast_to(np.where(valid, flat, 0), tuple(kernel) + tuple(outs))
    valid = np.broadcast_to(valid, flat.shape)
    hit = (tensor(flat.reshape(-1).astype(np.int64), device=device),
           tensor(valid.reshape(-1), device=device),
           tensor(count.reshape(-1).astype(np.float32), device=device), int(np.prod(kernel)))
    with _cache_lock:
        _cache[key] = hit
    return hit


@lowers("_adaptive_avg_pool3d.default", kind=COMPOSITE)
@_batched3
def adaptive_avg_pool3d(x, output_size):
    outs = _triple(output_size)
    index, valid, count, k = _adaptive_index_nd(x.device, tuple(x.shape[2:]), outs)
    return _mean_windows(x, index, valid, k, outs, count)


@lowers("_adaptive_avg_pool3d_backward.default", kind=COMPOSITE)
@_batched3
def adaptive_avg_pool3d_backward(g, x):
    outs = tuple(g.shape[2:])
    index, valid, count, k = _adaptive_index_nd(x.device, tuple(x.shape[2:]), outs)
    return _mean_windows_backward(g, x, index, valid, k, outs, count)


@lowers("adaptive_max_pool3d.default", kind=COMPOSITE)
@_batched3
def adaptive_max_pool3d(x, output_size):
    outs = _triple(output_size)
    index, valid, _, k = _adaptive_index_nd(x.device, tuple(x.shape[2:]), outs)
    return _max_windows(x, index, valid, k, outs)


@lowers("adaptive_max_pool3d_backward.default", kind=COMPOSITE)
@_batched3
def adaptive_max_pool3d_backward(g, x, indices):
    return _index_scatter(g, x, indices)


# ---- convolution -------------------------------------------------------------------------

class _Conv:
    """One convolution's geometry in 2 or 3 spatial dims (a 1-D one runs as
    2-D with height 1): the forward conv maps ``inp`` [N, C, *S] to ``out``
    [N, O, *OS] with weight [O, C/groups, *K]. A transposed convolution is this
    map's adjoint (its input is ``out``-shaped), so it reuses the same three
    products."""

    def __init__(self, x, weight, stride, padding, dilation, transposed, output_padding, groups):
        nd = x.ndim - 2
        if nd not in (1, 2, 3):
            raise NotImplementedError(f"DeviceKit lowers 1-D, 2-D and 3-D convolution, not "
                                      f"{nd}-D (input shape {list(x.shape)})")
        self.one_d = nd == 1
        self.nd = max(nd, 2)

        def lift(v, f):
            v = [int(e) for e in v]
            if self.one_d:
                return (f, v[0])
            return tuple(v) if len(v) == self.nd else tuple(v[:1] * self.nd)
        self.stride, self.padding = lift(list(stride), 1), lift(list(padding), 0)
        self.dilation = lift(list(dilation), 1)
        self.groups = int(groups)
        self.transposed = bool(transposed)
        wl = self.lift(weight)
        self.kernel = tuple(wl.shape[2:])
        xs = tuple(self.lift(x).shape[2:])
        if self.transposed:
            op = lift(list(output_padding), 0)
            # the forward conv this is the adjoint of runs from the big tensor to x
            self.inp_sizes = tuple((xs[i] - 1) * self.stride[i] - 2 * self.padding[i]
                                   + self.dilation[i] * (self.kernel[i] - 1) + op[i] + 1
                                   for i in range(self.nd))
            # output_padding can leave room for one more window than x has:
            # the windows are x's positions, the extra rows only receive zeros
            out = xs
        else:
            self.inp_sizes, out = xs, None
        self.index, self.valid, self.outs = _windows_index_nd(
            x.device, self.inp_sizes, self.kernel, self.stride, self.padding, self.dilation,
            out=out)
        self.npos = int(np.prod(self.outs))

    def lift(self, t):
        return t.reshape(t.shape[0], t.shape[1], 1, t.shape[2]) if self.one_d else t

    def drop(self, t):
        return t.reshape(t.shape[0], t.shape[1], t.shape[3]) if self.one_d else t

    def cols(self, inp):
        """inp [N, C, *S] -> [N, g, C/g*K, O] im2col columns."""
        n, c = inp.shape[:2]
        k = int(np.prod(self.kernel))
        cols = _gather(inp, self.index, self.valid, 0.0)
        return cols.reshape(n, self.groups, c // self.groups * k, self.npos)

    def _wmat(self, wl):
        o = wl.shape[0]
        return wl.reshape(1, self.groups, o // self.groups, -1)

    def forward(self, inp, wl):
        """conv(inp, w): [N, O, *OS]."""
        y = ops.matmul(self._wmat(wl), self.cols(inp))  # [N, g, O/g, prod(OS)]
        return y.reshape(inp.shape[0], wl.shape[0], *self.outs)

    def input_grad(self, g, wl, inp_shape):
        """The adjoint of forward in inp: g [N, O, *OS] -> [N, C, *S]."""
        n, o = g.shape[:2]
        g3 = g.reshape(n, self.groups, o // self.groups, self.npos)
        dcols = ops.matmul(self._wmat(wl).transpose(2, 3), g3)  # [N, g, C/g*K, O]
        return _scatter(dcols.reshape(n, inp_shape[1], -1), self.index, self.valid, inp_shape)

    def weight_grad(self, g, inp, w_shape):
        n, o = g.shape[:2]
        g3 = g.reshape(n, self.groups, o // self.groups, self.npos)
        dw = ops.sum(ops.matmul(g3, self.cols(inp).transpose(2, 3)), 0)  # [g, O/g, C/g*K]
        return dw.reshape(*w_shape)


@lowers("convolution.default", kind=COMPOSITE)
def convolution(x, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    conv = _Conv(x, weight, stride, padding, dilation, transposed, output_padding, groups)
    xf, wl = conv.lift(_compute(x)), conv.lift(_compute(weight))
    if conv.transposed:
        n = x.shape[0]
        shape = [n, wl.shape[1] * conv.groups, *conv.inp_sizes]
        y = conv.input_grad(xf, wl, shape)
    else:
        y = conv.forward(xf, wl)
    if bias is not None:
        y = ops.add(y, _compute(bias).reshape(1, -1, *([1] * conv.nd)))
    return _as(conv.drop(y), x)


@lowers("convolution_backward.default", kind=COMPOSITE)
def convolution_backward(g, x, weight, bias_sizes, stride, padding, dilation, transposed,
                         output_padding, groups, output_mask):
    conv = _Conv(x, weight, stride, padding, dilation, transposed, output_padding, groups)
    gf, xf, wl = conv.lift(_compute(g)), conv.lift(_compute(x)), conv.lift(_compute(weight))
    dx = dw = db = None
    if conv.transposed:  # y = forward-conv adjoint of x: dx = forward(g), dw from (x, g) swapped
        if output_mask[0]:
            dx = conv.drop(conv.forward(gf, wl))
        if output_mask[1]:
            dw = conv.weight_grad(xf, gf, list(wl.shape))
    else:
        if output_mask[0]:
            dx = conv.drop(conv.input_grad(gf, wl, list(xf.shape)))
        if output_mask[1]:
            dw = conv.weight_grad(gf, xf, list(wl.shape))
    if dx is not None:
        dx = _as(dx, x)
    if dw is not None:
        dw = _as(dw.reshape(*weight.shape), weight)
    if output_mask[2] and bias_sizes is not None:
        db = _as(ops.sum(gf, [0] + list(range(2, 2 + conv.nd))), g)
    return dx, dw, db
