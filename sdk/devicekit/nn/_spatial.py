"""conv2d and 2-D pooling over NCHW tensors, via im2col: a gather of every
kernel window into columns, then one matmul (conv) or one reduction (pool).

Padding is not a copy into a bigger tensor (the base set has no pad op): the
im2col index points padded positions at element 0 and a mask then replaces
them with the fill value (0 for conv and avg pooling, -inf for max pooling).
Gradients flow through gather (its rule is a scatter_add) and where.
"""

import numbers
import threading

import numpy as np

from .. import ops
from ..tensor import tensor
from ._common import check_float, check_rank, check_vector, compute, fail, result, shape_of

_cache_lock = threading.Lock()
_cache = {}  # (device name, geometry) -> (index, valid, oh, ow); index tensors are per shape


def _pair(op, name, v):
    if isinstance(v, numbers.Integral):
        return int(v), int(v)
    if isinstance(v, (tuple, list)) and len(v) == 2 and all(isinstance(i, numbers.Integral) for i in v):
        return int(v[0]), int(v[1])
    fail(op, f"{name} must be an int or a pair of ints, got {v!r}")


def _window_index(device, h, w, kernel, stride, padding):
    """Flat input position of every (ky, kx, oy, ox) window element, and
    whether it lies inside the unpadded input. Built once per geometry."""
    key = (device.name, h, w, kernel, stride, padding)
    with _cache_lock:
        hit = _cache.get(key)
    if hit is not None:
        return hit
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, padding
    oh, ow = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
    rows = (np.arange(oh) * sh - ph)[None, None, :, None] + np.arange(kh)[:, None, None, None]
    cols = (np.arange(ow) * sw - pw)[None, None, None, :] + np.arange(kw)[None, :, None, None]
    valid = (rows >= 0) & (rows < h) & (cols >= 0) & (cols < w)
    flat = np.where(valid, rows * w + cols, 0).astype(np.int64)
    hit = (tensor(flat.reshape(-1), device=device), tensor(valid.reshape(-1), device=device), oh, ow)
    with _cache_lock:
        _cache[key] = hit
    return hit


def _windows(op, x, kernel, stride, padding, fill):
    """x [N, C, H, W] -> [N, C, kh*kw, OH*OW] columns, padded positions = fill."""
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, padding
    if min(kh, kw, sh, sw) < 1 or min(ph, pw) < 0:
        fail(op, f"kernel {kernel} and stride {stride} must be >= 1, padding {padding} >= 0")
    if h + 2 * ph < kh or w + 2 * pw < kw:
        fail(op, f"kernel {kernel} is larger than the padded input {[h + 2 * ph, w + 2 * pw]} "
                 f"(x {shape_of(x)}, padding {padding})")
    index, valid, oh, ow = _window_index(x.device, h, w, kernel, stride, padding)
    k = index.shape[0]
    cols = ops.gather(x.reshape(n, c, h * w), 2, index.reshape(1, 1, k).expand(n, c, k))
    if ph or pw:
        cols = ops.where(valid.reshape(1, 1, k), cols, fill)
    return cols.reshape(n, c, kh * kw, oh * ow), oh, ow


def conv2d(x, weight, bias=None, stride=1, padding=0):
    """2-D cross-correlation (``torch.nn.functional.conv2d``, groups=1,
    dilation=1): x [N, C, H, W], weight [O, C, kh, kw], bias [O]; zero padding."""
    op = "conv2d"
    check_rank(op, "x", x, 4, 4)
    check_rank(op, "weight", weight, 4, 4)
    check_float(op, "x", x)
    if x.shape[1] != weight.shape[1]:
        fail(op, f"x {shape_of(x)} has {x.shape[1]} channels, weight {shape_of(weight)} expects "
                 f"{weight.shape[1]}")
    check_vector(op, "bias", bias, weight.shape[0])
    o, c, kh, kw = weight.shape
    cols, oh, ow = _windows(op, compute(x), (kh, kw), _pair(op, "stride", stride),
                            _pair(op, "padding", padding), 0.0)
    n = x.shape[0]
    y = ops.matmul(compute(weight).reshape(o, c * kh * kw), cols.reshape(n, c * kh * kw, oh * ow))
    if bias is not None:
        y = y + compute(bias).reshape(o, 1)
    return result(y.reshape(n, o, oh, ow), x.dtype)


def _pool(op, x, kernel_size, stride, padding, fill, reduce):
    check_rank(op, "x", x, 4, 4)
    check_float(op, "x", x)
    kernel = _pair(op, "kernel_size", kernel_size)
    stride = kernel if stride is None else _pair(op, "stride", stride)
    padding = _pair(op, "padding", padding)
    if padding[0] * 2 > kernel[0] or padding[1] * 2 > kernel[1]:
        fail(op, f"padding {padding} must be at most half the kernel {kernel}")
    cols, oh, ow = _windows(op, compute(x), kernel, stride, padding, fill)
    return result(reduce(cols, 2).reshape(*x.shape[:2], oh, ow), x.dtype)


def max_pool2d(x, kernel_size, stride=None, padding=0):
    """Max over each window (``torch.nn.functional.max_pool2d``; stride defaults
    to kernel_size; padding counts as -inf). The gradient of a window whose
    maximum is tied is split evenly among the tied elements (PyTorch gives it
    to one of them)."""
    return _pool("max_pool2d", x, kernel_size, stride, padding, -np.inf, ops.max)


def avg_pool2d(x, kernel_size, stride=None, padding=0):
    """Mean over each window (``torch.nn.functional.avg_pool2d`` with its
    default count_include_pad=True: padding counts as 0 in the kh*kw mean)."""
    return _pool("avg_pool2d", x, kernel_size, stride, padding, 0.0, ops.mean)
