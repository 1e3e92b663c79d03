"""Lowerings that particular model families need: the weight norm of
Wav2Vec2/HuBERT's position convolution (``_weight_norm_interface`` and its
backward), ``histc`` and ``_grouped_mm`` (transformers' default
grouped-experts path of Mixtral and other mixtures of experts).

All of it is base ops. 16-bit inputs compute in float32 and round once, as
torch's kernels do. ``histc`` with ``min == max`` and ``_grouped_mm``'s
group offsets read a few values back to the host (data-dependent bounds and
sizes, one sync each, as torch's own kernels on an accelerator do).
"""

import math

from .. import bridge
from .. import dtypes as _dt
from .. import ops
from . import _device
from ._table import COMPOSITE, lowers

_HALF = (_dt.float16, _dt.bfloat16)


def _f32(x):
    return bridge.cast(x, _dt.float32.id) if x.dtype in _HALF else x


def _as(x, dtype_id):
    return bridge.cast(x, dtype_id) if bridge.dtype_id(x) != dtype_id else x


# ---- weight norm ---------------------------------------------------------------------

def _other_axes(v, dim):
    d = dim % v.ndim if v.ndim else 0
    return [a for a in range(v.ndim) if a != d]


@lowers("_weight_norm_interface.default", kind=COMPOSITE)
def weight_norm_interface(v, g, dim=0):
    """(w, norms): w = v * g / ||v||, the norm over every dim but ``dim``
    (kept as size 1: g's shape). The norms are float32 for a 16-bit v, as torch
    saves them."""
    vf, gf = _f32(v), _f32(g)
    norms = ops.sqrt(ops.sum(ops.mul(vf, vf), _other_axes(v, dim), keepdims=True))
    w = ops.mul(vf, ops.div(gf, norms))
    norm_dtype = _dt.float32.id if v.dtype in _HALF else bridge.dtype_id(v)
    return _as(w, bridge.dtype_id(v)), _as(norms, norm_dtype)


@lowers("_weight_norm_interface_backward.default", kind=COMPOSITE)
def weight_norm_interface_backward(grad_w, saved_v, saved_g, saved_norms, dim):
    """torch's formula: grad_g = sum(grad_w * v) / ||v|| over the other dims,
    grad_v = g / ||v|| * (grad_w - v * grad_g / ||v||)."""
    gw, v, g, n = _f32(grad_w), _f32(saved_v), _f32(saved_g), _f32(saved_norms)
    grad_g = ops.div(ops.sum(ops.mul(gw, v), _other_axes(saved_v, dim), keepdims=True), n)
    grad_v = ops.mul(ops.div(g, n), ops.sub(gw, ops.mul(v, ops.div(grad_g, n))))
    return _as(grad_v, bridge.dtype_id(saved_v)), _as(grad_g, bridge.dtype_id(saved_g))


# ---- histc -------------------------------------------------------------------------------

@lowers("histc.default")
def histc(x, bins=100, min=0, max=0):  # noqa: A002  (torch's argument names)
    """Counts of x in ``bins`` equal bins over [min, max] (both ends in; x ==
    max in the last bin); elements outside, and NaN, are not counted. min ==
    max: the data's own minimum and maximum (read back), widened by 1 each way
    if equal, as torch does. The bin is floor((x - min) * bins / (max - min))
    in x's dtype (float32 for 16-bit and integer x: torch's CUDA kernel counts
    integers, which transformers' grouped experts pass there), torch's formula;
    the counts have x's dtype."""
    bins = int(bins)
    if bins <= 0:
        raise RuntimeError(f"DeviceKit's histc: bins must be > 0, got {bins}")
    floating = x.dtype in (_dt.float16, _dt.bfloat16, _dt.float32, _dt.float64)
    xf = (_f32(x) if floating else bridge.cast(x, _dt.float32.id)).reshape(x.numel())
    lo, hi = float(min), float(max)
    if lo == hi and x.numel():
        lo, hi = float(ops.min(xf).item()), float(ops.max(xf).item())
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise RuntimeError(f"DeviceKit's histc: range of [{lo}, {hi}] is not finite")
    if lo == hi:
        lo, hi = lo - 1.0, hi + 1.0
    if lo > hi:
        raise RuntimeError(f"DeviceKit's histc: max ({hi}) must be larger than min ({lo})")
    inside = ops.logical_and(ops.ge(xf, lo), ops.le(xf, hi))
    pos = ops.floor(ops.div(ops.mul(ops.sub(xf, lo), float(bins)), hi - lo))
    pos = ops.minimum(bridge.cast(ops.where(inside, pos, 0.0), _dt.int64.id), bins - 1)
    pos = ops.where(inside, pos, bins)  # outside: a spare bin, dropped
    counts = bridge.full(x.device, [bins + 1], bridge.dtype_id(xf), 0)
    ones = bridge.full(x.device, [x.numel()], bridge.dtype_id(xf), 1)
    counts = ops.scatter_add(counts, 0, pos, ones)
    return _as(counts.narrow(0, 0, bins).contiguous(), bridge.dtype_id(x))


# ---- grouped matrix multiply -------------------------------------------------------

def _ends(offs, groups):
    """The group offsets on the host: cumulative ends, one per group."""
    ends = [int(e) for e in _device.to_host(offs).tolist()]
    if len(ends) != groups:
        raise RuntimeError(f"DeviceKit's _grouped_mm: offs has {len(ends)} entries for "
                           f"{groups} groups")
    if any(b < a for a, b in zip([0] + ends, ends)):
        raise RuntimeError(f"DeviceKit's _grouped_mm: offs must be non-decreasing, got {ends}")
    return list(zip([0] + ends[:-1], ends))


def _mm(a, b):
    return ops.matmul(_f32(a), _f32(b))


@lowers("_grouped_mm.default")
def grouped_mm(a, b, offs=None, bias=None, out_dtype=None):
    """torch's four forms, groups read from the cumulative ``offs`` (int32):
    2-D x 3-D (rows of a by group, out [M, N]), 3-D x 2-D (columns of b by
    group, out [M, N]), 2-D x 2-D (the shared dim by group, out [G, M, N]:
    what the weight gradient of the first form is) and 3-D x 3-D (a batched
    matmul, no offs). Rows (columns) past the last offset are zero. Each group
    is one matmul, in float32 for 16-bit inputs, rounded once."""
    if bias is not None:
        raise NotImplementedError("DeviceKit's _grouped_mm takes no bias (torch's kernels "
                                  "refuse it too)")
    out_id = (_device.dk_dtype(out_dtype).id if out_dtype is not None
              else bridge.dtype_id(a))
    if a.ndim == 3 and b.ndim == 3:
        if offs is not None:
            raise RuntimeError("DeviceKit's _grouped_mm: 3-D x 3-D takes no offs")
        return _as(_mm(a, b), out_id)
    if offs is None:
        raise RuntimeError(f"DeviceKit's _grouped_mm: {a.ndim}-D x {b.ndim}-D needs offs")
    f32 = _dt.float32.id
    parts = []
    if a.ndim == 2 and b.ndim == 3:
        m, n = a.shape[0], b.shape[2]
        for i, (s, e) in enumerate(_ends(offs, b.shape[0])):
            if e > s:
                parts.append(_mm(a.narrow(0, s, e - s), b.narrow(0, i, 1).reshape(*b.shape[1:])))
        used = sum(p.shape[0] for p in parts)
        if used < m:
            parts.append(bridge.full(a.device, [m - used, n], f32, 0))
        return _as(bridge.cat(parts, 0), out_id)
    if a.ndim == 3 and b.ndim == 2:
        m, n = a.shape[1], b.shape[1]
        for i, (s, e) in enumerate(_ends(offs, a.shape[0])):
            if e > s:
                parts.append(_mm(a.narrow(0, i, 1).reshape(*a.shape[1:]), b.narrow(1, s, e - s)))
        used = sum(p.shape[1] for p in parts)
        if used < n:
            parts.append(bridge.full(a.device, [m, n - used], f32, 0))
        return _as(bridge.cat(parts, 1), out_id)
    if a.ndim == 2 and b.ndim == 2:
        m, n = a.shape[0], b.shape[1]
        for s, e in _ends(offs, offs.shape[0]):
            if e > s:
                y = _mm(a.narrow(1, s, e - s), b.narrow(0, s, e - s))
            else:
                y = bridge.full(a.device, [m, n], f32, 0)
            parts.append(y.reshape(1, m, n))
        return _as(bridge.cat(parts, 0), out_id)
    raise RuntimeError(f"DeviceKit's _grouped_mm takes 2-D or 3-D operands, got {a.ndim}-D x "
                       f"{b.ndim}-D")

