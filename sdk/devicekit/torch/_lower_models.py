"""Lowerings that particular model families need: the weight norm of
Wav2Vec2/HuBERT's position convolution (``_weight_norm_interface`` and its
backward), ``histc`` and ``_grouped_mm`` (transformers' default
grouped-experts path of Mixtral and other mixtures of experts), and the CTC
loss with its backward (speech models' CTC heads).

All of it is base ops. 16-bit inputs compute in float32 and round once, as
torch's kernels do. ``histc`` with ``min == max``, ``_grouped_mm``'s group
offsets and the CTC lengths given as tensors read a few values back to the
host (data-dependent bounds and sizes, one sync each, as torch's own kernels
on an accelerator do).
"""

import math

import numpy as np
import torch

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



# ---- CTC loss ------------------------------------------------------------------------

_NEG_INF = float("-inf")


def _lse3(a, b, c):
    """log(exp a + exp b + exp c) elementwise; -inf where all three are."""
    m = ops.maximum(ops.maximum(a, b), c)
    m = ops.where(ops.eq(m, _NEG_INF), 0.0, m)
    s = ops.add(ops.add(ops.exp(ops.sub(a, m)), ops.exp(ops.sub(b, m))), ops.exp(ops.sub(c, m)))
    return ops.add(ops.log(s), m)


def _lengths(v):
    if isinstance(v, bridge.Tensor):
        return [int(e) for e in _device.to_host(v).reshape(-1).tolist()]
    return [int(e) for e in v]


class _CTC:
    """One CTC call's extended labels (blank, t1, blank, t2, ..., blank) as
    [N, L] on the device, L = 2 * max target length + 1, with the host-known
    lengths; ``lp`` [T, N, L] the log-probabilities of each extended label."""

    def __init__(self, log_probs, targets, input_lengths, target_lengths, blank):
        if log_probs.dtype not in (_dt.float32, _dt.float64):
            raise NotImplementedError(f"DeviceKit's CTC loss takes float32 or float64 "
                                      f"log-probabilities, not {log_probs.dtype} (as torch's CPU "
                                      f"kernel)")
        self.unbatched = log_probs.ndim == 2
        lp = log_probs.reshape(log_probs.shape[0], 1, log_probs.shape[1]) if self.unbatched \
            else log_probs
        self.t_max, self.n, self.c = lp.shape
        self.tl, self.il = _lengths(target_lengths), _lengths(input_lengths)
        self.blank = int(blank)
        s_max = max(self.tl, default=0)
        self.L = L = 2 * s_max + 1
        dev = log_probs.device
        # the position in targets of each label: padded [N, S] or concatenated 1-D
        pos = np.zeros((self.n, max(s_max, 1)), np.int64)
        tflat = targets.reshape(-1)
        if targets.ndim == 2 and not self.unbatched:
            width = targets.shape[1]
            for i, k in enumerate(self.tl):
                pos[i, :k] = i * width + np.arange(k)
        else:
            start = 0
            for i, k in enumerate(self.tl):
                pos[i, :k] = start + np.arange(k)
                start += k
        if tflat.numel():
            labels = ops.gather(bridge.cast(tflat, _dt.int64.id), 0,
                                _device.from_host(torch.from_numpy(pos.reshape(-1)), dev))
        else:  # every target empty (targets [N, 0]): no label to read, all blank
            labels = bridge.full(dev, [pos.size], _dt.int64.id, self.blank)
        labels = labels.reshape(self.n, pos.shape[1])
        s = np.arange(L)
        odd = (s % 2 == 1)
        label_at = np.minimum((s - 1) // 2, pos.shape[1] - 1).clip(0)
        idx = _device.from_host(torch.from_numpy(np.broadcast_to(label_at, (self.n, L)).copy()),
                                dev)
        ext = ops.gather(labels, 1, idx)
        self.ext = ops.where(_device.from_host(torch.from_numpy(odd), dev).reshape(1, L), ext,
                             self.blank)
        lengths = np.array([2 * k + 1 for k in self.tl])
        self.valid = _device.from_host(torch.from_numpy(s[None, :] < lengths[:, None]), dev)
        # a skip from s - 2 to s: s odd, s >= 3, and a label other than at s - 2
        skip = np.zeros(L, bool)
        skip[3::2] = True
        if L > 2:
            differs = ops.ne(self.ext.narrow(1, 2, L - 2), self.ext.narrow(1, 0, L - 2))
            pad = bridge.full(dev, [self.n, 2], _dt.bool_.id, 0)
            self.skip = ops.logical_and(bridge.cat([pad, differs], 1),
                                        _device.from_host(torch.from_numpy(skip), dev).reshape(1, L))
        else:
            self.skip = bridge.full(dev, [self.n, L], _dt.bool_.id, 0)
        self.log_probs = lp
        ext_t = self.ext.reshape(1, self.n, L).expand(self.t_max, self.n, L).contiguous()
        self.ext_t = ext_t
        self.lp = ops.gather(lp, 2, ext_t)  # [T, N, L]
        self.np = np
        self.lengths = lengths

    def host_mask(self, rows):
        """A [N, L] bool device tensor from a host array."""
        return _device.from_host(torch.from_numpy(self.np.ascontiguousarray(rows)),
                                 self.lp.device)

    def shifted(self, x, k, mask=None, left=True):
        """x [N, L] moved k places right (left=True: x[s - k] at s) or left, -inf filled."""
        n, L = x.shape
        fill = bridge.full(x.device, [n, k], bridge.dtype_id(x), _NEG_INF)
        if k >= L:
            out = bridge.full(x.device, [n, L], bridge.dtype_id(x), _NEG_INF)
        elif left:
            out = bridge.cat([fill, x.narrow(1, 0, L - k)], 1)
        else:
            out = bridge.cat([x.narrow(1, k, L - k), fill], 1)
        return out if mask is None else ops.where(mask, out, _NEG_INF)

    def alphas(self):
        """[T, N, L] log alpha (values past a sample's input length are not used)."""
        np, L = self.np, self.L
        start = np.zeros((self.n, L), bool)
        start[:, 0] = True
        start[:, 1:2] = (self.lengths > 1)[:, None] if L > 1 else start[:, 1:2]
        alpha = ops.where(self.host_mask(start), self.lp.narrow(0, 0, 1).reshape(self.n, L),
                          _NEG_INF)
        out = [alpha]
        for t in range(1, self.t_max):
            a = _lse3(alpha, self.shifted(alpha, 1), self.shifted(alpha, 2, self.skip))
            alpha = ops.where(self.valid, ops.add(self.lp.narrow(0, t, 1).reshape(self.n, L), a),
                              _NEG_INF)
            out.append(alpha)
        return ops.stack(out, 0)

    def nll(self, log_alpha_ntl):
        """-log p(target | input) per sample, from log alpha [N, T, L]."""
        np, L, T = self.np, self.L, self.t_max
        last = np.array([max(t - 1, 0) * L for t in self.il])
        i1 = last + self.lengths - 1
        i2 = last + np.maximum(self.lengths - 2, 0)
        idx = self.host_mask(np.stack([i1, i2], 1).astype(np.int64))
        ends = ops.gather(log_alpha_ntl.reshape(self.n, T * L), 1, idx)
        two = self.host_mask(np.stack([np.ones(self.n, bool), self.lengths > 1], 1))
        ends = ops.where(two, ends, _NEG_INF)
        e0, e1 = ends.narrow(1, 0, 1), ends.narrow(1, 1, 1)
        neg = bridge.full(ends.device, [self.n, 1], bridge.dtype_id(ends), _NEG_INF)
        nll = ops.neg(_lse3(e0, e1, neg)).reshape(self.n)
        none = self.host_mask(np.array([t == 0 for t in self.il]))  # no input: p = 0 ...
        empty = self.host_mask(np.array([t == 0 and k == 0 for t, k in zip(self.il, self.tl)]))
        nll = ops.where(none, float("inf"), nll)
        return ops.where(empty, 0.0, nll)  # ... unless the target is empty too


def _ctc_forward(log_probs, targets, input_lengths, target_lengths, blank, zero_infinity):
    ctc = _CTC(log_probs, targets, input_lengths, target_lengths, blank)
    log_alpha = ops.contiguous(ctc.alphas().transpose(0, 1))  # [N, T, L], as torch saves it
    nll = ctc.nll(log_alpha)  # (zero_infinity: ctc_loss zeroes it above this op)
    return (nll.reshape(()) if ctc.unbatched else nll), log_alpha


@lowers("_ctc_loss.default", "_ctc_loss.Tensor", kind=COMPOSITE)
def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, zero_infinity=False):
    """(negative log-likelihood per sample, log alpha [N, T, 2S+1]): the CTC
    forward recursion in log space, one step of base ops per time step; the
    lengths are host values (the ``.Tensor`` form reads them back)."""
    return _ctc_forward(log_probs, targets, input_lengths, target_lengths, blank, zero_infinity)


def _ctc_loss_kernel(log_probs, targets, input_lengths, target_lengths, blank=0, reduction=1,
                     zero_infinity=False):
    """``aten::ctc_loss.Tensor`` (CompositeImplicitAutograd in torch) for dk
    tensors, at torch's autograd level: the lengths read on the host and the
    ``int[]`` form run, as torch's own kernel does for a tensor that is not a
    subclass (LossCTC.cpp), so length tensors on the CPU beside dk
    log-probabilities work as beside a CUDA tensor. (torch's path for a
    subclass passes them on as tensors: ``_ctc_loss.Tensor``, then, for
    reduction="mean", a division of the dk loss by the CPU lengths, both
    refused as host operands.)"""
    lengths = []
    for name, v in (("input_lengths", input_lengths), ("target_lengths", target_lengths)):
        if v.dtype.is_floating_point or v.dtype.is_complex or v.dtype == torch.bool:
            raise RuntimeError(f"ctc_loss: {name} must be integral, not {v.dtype}")
        lengths.append(v.to("cpu", torch.int64).reshape(-1).tolist())
    return torch.ops.aten.ctc_loss.IntList(log_probs, targets, *lengths, blank, reduction,
                                           zero_infinity)


def register_autograd(lib):
    lib.impl("ctc_loss.Tensor", _ctc_loss_kernel, "AutogradPrivateUse1")


@lowers("_ctc_loss_backward.default", "_ctc_loss_backward.Tensor", kind=COMPOSITE)
def ctc_loss_backward(grad, log_probs, targets, input_lengths, target_lengths, nll, log_alpha,
                      blank, zero_infinity=False):
    """torch's gradient: per time step and class, exp(lp) - exp(log sum over the
    extended labels of that class of alpha * beta + nll - lp), times the
    sample's grad; zero past a sample's input length (and for an infinite
    loss under zero_infinity). Beta runs the recursion backwards; the sum
    over labels is a scatter_add of exp(alpha + beta - max) per step."""
    ctc = _CTC(log_probs, targets, input_lengths, target_lengths, blank)
    np, n, L, T, C = ctc.np, ctc.n, ctc.L, ctc.t_max, ctc.c
    la = log_alpha.reshape(n, T, L) if log_alpha.ndim == 3 else log_alpha
    ends = np.zeros((n, L), bool)
    for i, k in enumerate(ctc.lengths):
        ends[i, k - 1] = True
        if k > 1:
            ends[i, k - 2] = True
    ends = ctc.host_mask(ends)
    il = np.array(ctc.il)
    skip_b = ctc.shifted(bridge.cast(ctc.skip, _dt.float32.id), 2, left=False)
    skip_b = ops.eq(skip_b, 1.0)  # skip[s + 2]: a skip back from s + 2 to s
    beta = bridge.full(la.device, [n, L], bridge.dtype_id(la), _NEG_INF)
    ab = [None] * T
    for t in range(T - 1, -1, -1):
        lp_t = ctc.lp.narrow(0, t, 1).reshape(n, L)
        rec = ops.add(lp_t, _lse3(beta, ctc.shifted(beta, 1, left=False),
                                  ctc.shifted(beta, 2, skip_b, left=False)))
        at_end = ctc.host_mask((il - 1 == t)[:, None].repeat(L, 1))
        inside = ctc.host_mask((t < il - 1)[:, None].repeat(L, 1))
        beta = ops.where(at_end, ops.where(ends, lp_t, _NEG_INF),
                         ops.where(inside, rec, _NEG_INF))
        beta = ops.where(ctc.valid, beta, _NEG_INF)
        ab[t] = ops.add(la.narrow(1, t, 1).reshape(n, L), beta)
    ab = ops.stack(ab, 0)  # [T, N, L]
    m = ops.amax(ab, 2, keepdims=True)
    m = ops.where(ops.eq(m, _NEG_INF), 0.0, m)
    e = ops.exp(ops.sub(ab, m))
    sums = bridge.full(ab.device, [T, n, C], bridge.dtype_id(ab), 0)
    sums = ops.scatter_add(sums, 2, ctc.ext_t, ops.contiguous(e))
    lcab = ops.add(ops.log(sums), m)
    lp = ctc.log_probs
    nll3 = nll.reshape(1, n, 1)
    g = ops.sub(ops.exp(lp), ops.exp(ops.sub(ops.add(lcab, nll3), lp)))
    g = ops.mul(g, grad.reshape(1, n, 1))
    live = ctc.host_mask((np.arange(T)[:, None] < il[None, :])[:, :, None])
    g = ops.where(live, g, 0.0)
    if zero_infinity:
        g = ops.where(ops.eq(nll3, float("inf")), 0.0, g)
    return g.reshape(T, C) if ctc.unbatched else g
