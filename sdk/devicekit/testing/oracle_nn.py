"""An independent numpy float64 implementation of DeviceKit's composite ops
(``devicekit.nn.functional``), written from the math, never calling devicekit.

Every function takes numpy arrays (any float dtype; computed in float64) and
returns float64 results with the semantics documented in
``devicekit.nn.functional``; round with ``oracle.round_to`` to compare in a
narrower dtype.

Functions: softmax, log_softmax, logsumexp, mean, var, layer_norm, rms_norm,
relu, sigmoid, silu, gelu, swiglu, linear, embedding, rotary_embedding,
cross_entropy, dropout, scaled_dot_product_attention, conv2d, max_pool2d,
avg_pool2d, adamw_step.
"""

import math

import numpy as np

from . import philox

__all__ = ["adamw_step", "avg_pool2d", "conv2d", "cross_entropy", "dropout", "embedding", "gelu",
           "layer_norm", "linear", "log_softmax", "logsumexp", "max_pool2d", "mean", "relu",
           "rms_norm", "rotary_embedding", "scaled_dot_product_attention", "sigmoid", "silu",
           "softmax", "swiglu", "var"]


def _f(x):
    return np.asarray(x, dtype=np.float64)


def logsumexp(x, axis, keepdims=False):
    """-inf for an all -inf (or empty) row, +inf for a row containing +inf."""
    x = _f(x)
    with np.errstate(all="ignore"):
        m = np.max(x, axis=axis, keepdims=True, initial=-np.inf)
        m = np.where(np.isinf(m), 0.0, m)
        out = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis=axis)


def softmax(x, axis=-1):
    x = _f(x)
    with np.errstate(all="ignore"):
        e = np.exp(x - np.max(x, axis=axis, keepdims=True, initial=-np.inf))
        return e / np.sum(e, axis=axis, keepdims=True)


def log_softmax(x, axis=-1):
    x = _f(x)
    with np.errstate(all="ignore"):
        return x - logsumexp(x, axis, keepdims=True)


def mean(x, axis=None, keepdims=False):
    return np.mean(_f(x), axis=axis, keepdims=keepdims)


def var(x, axis=None, keepdims=False, correction=1):
    x = _f(x)
    n = x.size if axis is None else np.prod([x.shape[a] for a in np.atleast_1d(axis)])
    d = x - np.mean(x, axis=axis, keepdims=True)
    with np.errstate(all="ignore"):
        return np.sum(d * d, axis=axis, keepdims=keepdims) / max(n - correction, 0)


def layer_norm(x, weight=None, bias=None, eps=1e-5):
    x = _f(x)
    mu = x.mean(-1, keepdims=True)
    y = (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps)
    y = y * _f(weight) if weight is not None else y
    return y + _f(bias) if bias is not None else y


def rms_norm(x, weight=None, eps=1e-6):
    x = _f(x)
    y = x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
    return y * _f(weight) if weight is not None else y


def relu(x):
    x = _f(x)
    return np.where(x <= 0, 0.0, x)


def sigmoid(x):
    x = _f(x)
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


def silu(x):
    return _f(x) * sigmoid(x)


def gelu(x, approximate="none"):
    x = _f(x)
    if approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    erf = np.vectorize(math.erf, otypes=[np.float64])
    return 0.5 * x * (1 + erf(x / math.sqrt(2))) if x.size else x


def swiglu(x):
    x = _f(x)
    a, b = np.split(x, 2, axis=-1)
    return silu(a) * b


def linear(x, weight, bias=None):
    y = _f(x) @ _f(weight).T
    return y + _f(bias) if bias is not None else y


def embedding(ids, table):
    return _f(table)[np.asarray(ids)]


def rotary_embedding(x, cos, sin):
    x = _f(x)
    x1, x2 = np.split(x, 2, axis=-1)
    return x * _f(cos) + np.concatenate([-x2, x1], axis=-1) * _f(sin)


def cross_entropy(logits, target, ignore_index=-100, reduction="mean"):
    logits, target = _f(logits), np.asarray(target)
    if logits.ndim == 1:
        logits, target = logits[None], target[None]
        squeeze = True
    else:
        logits = np.moveaxis(logits, 1, -1)
        squeeze = False
    lsm = log_softmax(logits, -1)
    valid = target != ignore_index
    picked = np.take_along_axis(lsm, np.where(valid, target, 0)[..., None], -1)[..., 0]
    loss = np.where(valid, -picked, 0.0)
    if reduction == "sum":
        return loss.sum()
    if reduction == "mean":
        with np.errstate(invalid="ignore"):
            return loss.sum() / valid.sum()  # all ignored: 0/0 = NaN
    return loss[0] if squeeze else loss


def dropout(x, p, seed, training=True):
    x = _f(x)
    if not training or p == 0:
        return x
    u = philox.random_uniform(x.shape, seed, 0, np.float32) if x.size else np.zeros(x.shape)
    return np.where(u >= np.float32(p), x * (1 / (1 - p) if p < 1 else 0.0), 0.0)


def scaled_dot_product_attention(q, k, v, attn_mask=None, is_causal=False, scale=None):
    """Fully masked query rows give 0."""
    q, k, v = _f(q), _f(k), _f(v)
    groups = q.shape[-3] // k.shape[-3]
    k, v = np.repeat(k, groups, axis=-3), np.repeat(v, groups, axis=-3)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = (q * scale) @ np.swapaxes(k, -1, -2)
    lq, lk = q.shape[-2], k.shape[-2]
    visible = np.ones(s.shape, dtype=bool)
    if is_causal:
        visible = np.broadcast_to(np.arange(lk)[None, :] <= np.arange(lq)[:, None], s.shape)
    elif attn_mask is not None and np.asarray(attn_mask).dtype == np.bool_:
        visible = np.broadcast_to(attn_mask, s.shape)
    elif attn_mask is not None:
        s = s + _f(attn_mask)
    s = np.where(visible, s, -np.inf)
    out = np.zeros(s.shape[:-1] + (v.shape[-1],))
    for idx in np.ndindex(*s.shape[:-1]):  # row by row: a row with no visible key stays 0
        row = s[idx]
        if row.size == 0 or np.all(row == -np.inf):
            continue
        p = np.exp(row - row.max())
        out[idx] = (p / p.sum()) @ v[idx[:-1]]
    return out


def _windows(x, kernel, stride, padding, fill):
    """[N, C, OH, OW, kh, kw] windows of x padded with fill."""
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, padding
    xp = np.pad(_f(x), ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=fill)
    oh, ow = (xp.shape[2] - kh) // sh + 1, (xp.shape[3] - kw) // sw + 1
    out = np.empty(x.shape[:2] + (oh, ow, kh, kw))
    for i in range(oh):
        for j in range(ow):
            out[:, :, i, j] = xp[:, :, i * sh:i * sh + kh, j * sw:j * sw + kw]
    return out


def _pair(v):
    return (v, v) if np.isscalar(v) else tuple(v)


def conv2d(x, weight, bias=None, stride=1, padding=0):
    w = _f(weight)
    win = _windows(x, w.shape[2:], _pair(stride), _pair(padding), 0.0)
    y = np.einsum("ncijkl,ockl->noij", win, w)
    return y + _f(bias)[None, :, None, None] if bias is not None else y


def max_pool2d(x, kernel_size, stride=None, padding=0):
    k = _pair(kernel_size)
    return _windows(x, k, _pair(stride or kernel_size), _pair(padding), -np.inf).max(axis=(-1, -2))


def avg_pool2d(x, kernel_size, stride=None, padding=0):
    k = _pair(kernel_size)
    return _windows(x, k, _pair(stride or kernel_size), _pair(padding), 0.0).mean(axis=(-1, -2))


def adamw_step(param, grad, m, v, step, lr, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01):
    """torch.optim.AdamW's update, written as in its documentation."""
    p, g = _f(param), _f(grad)
    p = p - lr * weight_decay * p
    m = beta1 * _f(m) + (1 - beta1) * g
    v = beta2 * _f(v) + (1 - beta2) * g * g
    m_hat, v_hat = m / (1 - beta1 ** step), v / (1 - beta2 ** step)
    return p - lr * m_hat / (np.sqrt(v_hat) + eps), m, v
