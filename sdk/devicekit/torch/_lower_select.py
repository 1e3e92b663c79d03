"""Lowerings for selection and generation: integer bitwise ops, ``sort``,
``argsort``, ``topk``, ``multinomial``, ``scatter``, ``index_put``, ``roll``,
``fmod``/``remainder`` -- what Hugging Face ``generate()`` (greedy, top-k,
top-p) calls, in DeviceKit base ops only (no base op was added for them).

How each is exact:

* **Bitwise ops** on integers: DeviceKit's base ops have logical ops on bool
  only, and integer ``mul`` wraps (spec). So ``x * 2**(63-k)`` (int64,
  wrapping) moves bit ``k`` to the sign bit: one broadcast ``mul`` and ``lt 0``
  give all 64 bits as bools, the logical op combines them, and a sum of
  ``where(bit, weight, 0)`` (weights ``2**k``, the sign bit ``-2**63``) puts
  them back without overflow. Narrower integers go through int64 (a
  sign- or zero-extension, exact) and come back in range. ``not`` is
  ``-1 - x`` (``255 - x`` for uint8).
* **sort/argsort/topk**: a bitonic network over the last dim padded to a
  power of two, on (class, value, original index) triples, so it is stable
  (ties keep their order) and NaN sorts as the largest value, as in torch.
  The partner index and direction of each of the ``log2(n)(log2(n)+1)/2``
  stages are host constants uploaded once per size; each stage is three
  gathers, comparisons and ``where``.
* **multinomial** draws its uniforms from the device's Philox stream
  (``_device.rng``, seeded by ``torch.manual_seed``): with replacement (or one
  sample), sample = the number of cumulative probabilities ``<= u * total``
  (zero-probability categories are never drawn); without replacement, the
  exponential race ``-log(u) / p`` and the ``k`` smallest keys. The same seed
  gives the same tokens on every conformant plugin (Philox is bit-exact); they
  are not torch CPU's tokens (torch's own generator differs).
"""

import math

import torch

from .. import bridge
from .. import dtypes as _dt
from .. import ops
from . import _device
from ._lower_nn import _no_generator
from ._lower_ops import _in_float32, _int64, _zero_d
from ._table import RANDOM, lowers

_INTS = {_dt.int8.id: (8, True), _dt.int32.id: (32, True), _dt.int64.id: (64, True),
         _dt.uint8.id: (8, False)}

_consts = {}  # (device name, key) -> DeviceKit tensor: host constants uploaded once


def _const(dev, key, make):
    k = (dev.name, key)
    t = _consts.get(k)
    if t is None:
        t = _consts[k] = _device.from_host(make(), dev)
    return t


def _wrap64(v):
    """Python int -> its int64 two's-complement value."""
    v &= (1 << 64) - 1
    return v - (1 << 64) if v >> 63 else v


# ---- integer bitwise ops ------------------------------------------------------------------

def _bits(x):
    """int64 x -> bool [..., 64], bit k at [..., k] (see the module docstring)."""
    shl = _const(x.device, "shl", lambda: torch.tensor([_wrap64(1 << (63 - k)) for k in range(64)],
                                                       dtype=torch.int64))
    return ops.lt(ops.mul(x.reshape(*x.shape, 1), shl), 0)


def _compose(bits, key="w64", weights=None):
    """bool [..., 64] -> int64 sum of bit_k * weights[k] (no overflow for
    two's-complement weights: the positive part stays below 2**63)."""
    if weights is None:
        weights = [1 << k for k in range(63)] + [-(1 << 63)]
    w = _const(bits.device, key, lambda: torch.tensor(weights, dtype=torch.int64))
    return ops.sum(ops.where(bits, w, 0), -1)


def _result_dtype(a, b):
    ta = [x.dtype.id for x in (a, b) if isinstance(x, bridge.Tensor)]
    if len(ta) == 2:
        return bridge.promote_types(*ta)
    other = b if isinstance(a, bridge.Tensor) else a
    if ta[0] == _dt.bool_.id and not isinstance(other, bool):
        return _dt.int64.id  # torch: bool tensor & int scalar is int64
    return ta[0]


def _as64(x, dev, dt):
    if isinstance(x, bridge.Tensor):
        return x if x.dtype.id == _dt.int64.id else bridge.cast(x, _dt.int64.id)
    return bridge.full(dev, [], _dt.int64.id, int(x))


def _bitwise(name, logical):
    def lowered(a, b):
        dt = _result_dtype(a, b)
        dev = (a if isinstance(a, bridge.Tensor) else b).device
        if dt == _dt.bool_.id:
            return logical(a, b)
        if dt not in _INTS:
            raise NotImplementedError(f"aten.{name} on a floating-point tensor: torch defines it "
                                      f"for integers and bool only")
        out = _compose(logical(_bits(_as64(a, dev, dt)), _bits(_as64(b, dev, dt))))
        return out if dt == _dt.int64.id else bridge.cast(out, dt)
    return lowered


lowers("bitwise_and.Tensor", "bitwise_and.Scalar", "__and__.Tensor", "__and__.Scalar")(
    _bitwise("bitwise_and", ops.logical_and))
lowers("bitwise_or.Tensor", "bitwise_or.Scalar", "__or__.Tensor", "__or__.Scalar")(
    _bitwise("bitwise_or", ops.logical_or))
lowers("bitwise_xor.Tensor", "bitwise_xor.Scalar", "__xor__.Tensor", "__xor__.Scalar")(
    _bitwise("bitwise_xor", ops.logical_xor))


@lowers("bitwise_not.default")
def bitwise_not(x):
    if x.dtype == _dt.bool_:
        return ops.logical_not(x)
    if x.dtype.id not in _INTS:
        raise NotImplementedError(f"aten.bitwise_not on {x.dtype}: integers and bool only")
    return ops.sub(255 if x.dtype == _dt.uint8 else -1, x)  # (exact: ~x = -1 - x; wraps)


def _shift_operands(name, x, s):
    """(x as int64, its dtype id, the shift as an int64 tensor broadcast to x's shape)."""
    tensors = [t for t in (x, s) if isinstance(t, bridge.Tensor)]
    if any(t.dtype.id not in _INTS for t in tensors):
        raise NotImplementedError(f"aten.{name} on {[str(t.dtype) for t in tensors]}: integers only")
    dt = _result_dtype(x, s)
    dev = tensors[0].device
    x64, s64 = _as64(x, dev, dt), _as64(s, dev, dt)
    shape = list(bridge.broadcast_shapes(list(x64.shape), list(s64.shape)))
    return x64.expand(*shape).contiguous(), dt, s64.expand(*shape).contiguous()


def _iota64(dev):
    return _const(dev, ("iota", 64), lambda: torch.arange(64))


@lowers("bitwise_left_shift.Tensor", "bitwise_left_shift.Tensor_Scalar",
        "bitwise_left_shift.Scalar_Tensor", "__lshift__.Scalar", "__lshift__.Tensor")
def left_shift(x, s):
    """x * 2**s with integer mul's wrap, 2**s composed from a one-hot of s (a
    shift by the width or more gives 0, as torch), then wrapped to x's width."""
    x64, dt, s64 = _shift_operands("bitwise_left_shift", x, s)
    onehot = ops.eq(s64.reshape(*s64.shape, 1), _iota64(x64.device))
    return _narrow_to(ops.mul(x64, _compose(onehot)), dt)


def _narrow_to(r64, dt):
    """int64 r -> dtype dt with torch's wrap to dt's width (bits above it dropped)."""
    if dt == _dt.int64.id:
        return r64
    width, signed = _INTS[dt]
    weights = [1 << k if k < width else 0 for k in range(64)]
    if signed:
        weights[width - 1] = -(1 << (width - 1))
    return bridge.cast(_compose(_bits(r64), f"wrap{dt}", weights), dt)


@lowers("bitwise_right_shift.Tensor", "bitwise_right_shift.Tensor_Scalar",
        "bitwise_right_shift.Scalar_Tensor", "__rshift__.Scalar", "__rshift__.Tensor")
def right_shift(x, s):
    """Arithmetic (floor) shift, as torch: bit j of the result is bit
    min(j + s, 63) of x (a gather over the 64 bits: the sign bit fills in),
    for any s >= 0. Narrower integers shift sign- or zero-extended in int64."""
    x64, dt, s64 = _shift_operands("bitwise_right_shift", x, s)
    src = ops.minimum(ops.add(s64.reshape(*s64.shape, 1), _iota64(x64.device)), 63)
    out = _compose(ops.gather(_bits(x64), x64.ndim, src))
    return out if dt == _dt.int64.id else bridge.cast(out, dt)


# ---- fmod / remainder -----------------------------------------------------------------------

def _ints(a, b):
    return not any(isinstance(t, bridge.Tensor) and (t.dtype.is_floating_point or t.dtype == _dt.bool_)
                   for t in (a, b)) and not any(isinstance(t, float) for t in (a, b))


def _int_remainder(a, b):
    """Integer a mod b with b's sign (torch's remainder), exact for |a|, |b| <
    2**53: DeviceKit has no integer division base op, so the quotient is
    floor(float64(a) / float64(b)) (off by at most one there), the remainder
    a - q*b in int64 (exact, wrapping), then corrected by one b."""
    dt = _result_dtype(a, b)
    dev = (a if isinstance(a, bridge.Tensor) else b).device
    a64, b64 = _as64(a, dev, dt), _as64(b, dev, dt)
    q = ops.floor(ops.div(bridge.cast(a64, _dt.float64.id), bridge.cast(b64, _dt.float64.id)))
    q = bridge.cast(q, _dt.int64.id)
    r = ops.sub(a64, ops.mul(q, b64))
    wrong_sign = ops.logical_and(ops.ne(r, 0), ops.ne(ops.lt(r, 0), ops.lt(b64, 0)))
    r, q = ops.where(wrong_sign, ops.add(r, b64), r), ops.where(wrong_sign, ops.sub(q, 1), q)
    too_big = ops.ge(ops.abs(r), ops.abs(b64))  # (same sign as b here)
    r, q = ops.where(too_big, ops.sub(r, b64), r), ops.where(too_big, ops.add(q, 1), q)
    return r, a64, b64, dt, q


def int_div(a, b, rounding_mode):
    """Integer ``div`` with rounding_mode "floor" or "trunc" (``_lower_ops``
    sends integer operands here), exact for |a|, |b| < 2**53 as above."""
    r, a64, b64, dt, q = _int_remainder(a, b)
    if rounding_mode == "trunc":  # floor and trunc differ by one where signs differ and r != 0
        fix = ops.logical_and(ops.ne(r, 0), ops.ne(ops.lt(a64, 0), ops.lt(b64, 0)))
        q = ops.where(fix, ops.add(q, 1), q)
    return q if dt == _dt.int64.id else bridge.cast(q, dt)


@lowers("remainder.Tensor", "remainder.Scalar")
def remainder(a, b):
    """a - floor(a / b) * b, as torch (the sign of b)."""
    if _ints(a, b):
        r, _, _, dt, _ = _int_remainder(a, b)
        return r if dt == _dt.int64.id else bridge.cast(r, dt)
    return _float_remainder(a, b)


@_in_float32
def _float_remainder(a, b):
    return ops.sub(a, ops.mul(ops.floor(ops.div(a, b)), b))


@lowers("fmod.Tensor", "fmod.Scalar")
def fmod(a, b):
    """a - trunc(a / b) * b, as torch (the sign of a)."""
    if _ints(a, b):
        r, a64, b64, dt, _ = _int_remainder(a, b)
        # from b's sign to a's: subtract b where they differ and r != 0
        fix = ops.logical_and(ops.ne(r, 0), ops.ne(ops.lt(a64, 0), ops.lt(b64, 0)))
        r = ops.where(fix, ops.sub(r, b64), r)
        return r if dt == _dt.int64.id else bridge.cast(r, dt)
    return _float_fmod(a, b)


@_in_float32
def _float_fmod(a, b):
    q = ops.div(a, b)
    q = ops.mul(ops.sign(q), ops.floor(ops.abs(q)))
    return ops.sub(a, ops.mul(q, b))


# ---- roll -----------------------------------------------------------------------------------

@lowers("roll.default")
def roll(x, shifts, dims=()):
    shifts, dims = list(shifts), list(dims)
    if not dims:  # torch: roll the flattened tensor
        return roll(x.reshape(x.numel()), shifts, [0]).reshape(*x.shape)
    for s, d in zip(shifts, dims):
        d = d + x.ndim if d < 0 else d
        n = x.shape[d]
        s = s % n if n else 0
        if s:
            x = bridge.cat([x.narrow(d, n - s, s), x.narrow(d, 0, n - s)], d)
    return x if shifts and any(shifts) else ops.clone(x)


# ---- sort / argsort / topk: a stable bitonic network ------------------------------------------

def _stages(dev, n2):
    """[(partner index int64 [n2], take-min bool [n2])] per bitonic stage for size n2."""
    key = ("bitonic", n2)
    hit = _consts.get((dev.name, key))
    if hit is None:
        i = torch.arange(n2)
        hit = []
        k = 2
        while k <= n2:
            j = k // 2
            while j >= 1:
                partner = i ^ j
                ascending = (i & k) == 0
                hit.append((_device.from_host(partner, dev),
                            _device.from_host((i < partner) == ascending, dev)))
                j //= 2
            k *= 2
        _consts[(dev.name, key)] = hit
    return hit


def _sort_last(x, descending):
    """(values, int64 indices) of x [R, n] sorted along the last dim, stably."""
    R, n = x.shape
    dev = x.device
    n2 = 1 << max(0, (n - 1).bit_length())
    floating = x.dtype.is_floating_point
    v = x if x.dtype != _dt.bool_ else bridge.cast(x, _dt.uint8.id)
    # class: NaN sorts as the largest value (first when descending), padding last
    if floating:
        nan = ops.ne(v, v)
        cls = bridge.cast(ops.where(nan, 0 if descending else 1, 1 if descending else 0), _dt.int32.id)
        v = ops.where(nan, 0, v)
    else:
        cls = bridge.full(dev, [R, n], _dt.int32.id, 0)
    idx = _const(dev, ("iota", n2), lambda: torch.arange(n2)).reshape(1, n2).expand(R, n2)
    if n2 > n:
        cls = bridge.cat([cls, bridge.full(dev, [R, n2 - n], _dt.int32.id, 2)], 1)
        v = bridge.cat([v, bridge.full(dev, [R, n2 - n], v.dtype.id, 0)], 1)
    idx = ops.mul(idx, 1)  # own memory
    vless = ops.gt if descending else ops.lt
    for partner, take_min in _stages(dev, n2):
        p = partner.reshape(1, n2).expand(R, n2)
        pc, pv, pi = ops.gather(cls, 1, p), ops.gather(v, 1, p), ops.gather(idx, 1, p)
        # the partner goes first: (class, value, index) lexicographically smaller
        same_c, same_v = ops.eq(pc, cls), ops.eq(pv, v)
        first = ops.logical_or(ops.lt(pc, cls), ops.logical_and(same_c, ops.logical_or(
            vless(pv, v), ops.logical_and(same_v, ops.lt(pi, idx)))))
        swap = ops.eq(take_min.reshape(1, n2), first)
        cls, v, idx = ops.where(swap, pc, cls), ops.where(swap, pv, v), ops.where(swap, pi, idx)
    idx = idx.narrow(1, 0, n) if n2 > n else idx
    return ops.gather(x, 1, idx), idx


def _sort(x, dim, descending):
    """(values, indices) of x sorted along dim (any rank; 0-d as one element)."""
    if x.ndim == 0:
        return ops.clone(x), bridge.full(x.device, [], _dt.int64.id, 0)
    d = dim + x.ndim if dim < 0 else dim
    if x.shape[d] == 0 or x.numel() == 0:
        return ops.clone(x), bridge.full(x.device, list(x.shape), _dt.int64.id, 0)
    xt = x.transpose(d, x.ndim - 1) if d != x.ndim - 1 else x
    shape = list(xt.shape)
    vals, idx = _sort_last(xt.contiguous().reshape(math.prod(shape[:-1]), shape[-1]), descending)
    vals, idx = vals.reshape(*shape), idx.reshape(*shape)
    if d != x.ndim - 1:
        vals, idx = vals.transpose(d, x.ndim - 1).contiguous(), idx.transpose(d, x.ndim - 1).contiguous()
    return vals, idx


@lowers("sort.default")
def sort(x, dim=-1, descending=False):
    return _sort(x, dim, descending)


@lowers("sort.stable")
def sort_stable(x, *, stable=None, dim=-1, descending=False):
    return _sort(x, dim, descending)


@lowers("argsort.default")
def argsort(x, dim=-1, descending=False):
    return _sort(x, dim, descending)[1]


@lowers("argsort.stable")
def argsort_stable(x, *, stable=False, dim=-1, descending=False):
    return _sort(x, dim, descending)[1]


@lowers("topk.default")
def topk(x, k, dim=-1, largest=True, sorted=True):
    """The first k of a stable sort: among equal values the lower index comes
    first (torch leaves the order of ties unspecified). A small k is picked
    one by one (HF's default top_k=50 over a 50257 vocabulary: 50 picks
    rather than 136 sort stages)."""
    if x.ndim == 0:
        return _sort(x, 0, largest)
    d = dim + x.ndim if dim < 0 else dim
    if not 0 <= k <= x.shape[d]:
        raise RuntimeError(f"topk: k={k} is out of range for dimension {d} of size {x.shape[d]}")
    n = x.shape[d]
    lg = max(1, (n - 1).bit_length())
    if k > lg * (lg + 1) // 2 or n == 0:  # more picks than the sort's stages: sort
        vals, idx = _sort(x, d, largest)
        return vals.narrow(d, 0, k).contiguous(), idx.narrow(d, 0, k).contiguous()
    xt = x.transpose(d, x.ndim - 1) if d != x.ndim - 1 else x
    shape = list(xt.shape)
    vals, idx = _topk_picks(xt.contiguous().reshape(math.prod(shape[:-1]), n), k, largest)
    vals, idx = vals.reshape(*shape[:-1], k), idx.reshape(*shape[:-1], k)
    if d != x.ndim - 1:
        vals, idx = vals.transpose(d, x.ndim - 1).contiguous(), idx.transpose(d, x.ndim - 1).contiguous()
    return vals, idx


_EXTREME = {_dt.int8.id: (-128, 127), _dt.uint8.id: (0, 255), _dt.int32.id: (-2**31, 2**31 - 1),
            _dt.int64.id: (-2**63, 2**63 - 1)}


def _topk_picks(x, k, largest):
    """topk of x [R, n] as k picks (for small k: a few ops per pick against the
    sort's ~15 per stage): each pick is the first remaining index holding the
    remaining extreme, NaN counting as the largest, so the order is the
    stable sort's."""
    R, n = x.shape
    dev = x.device
    v = x if x.dtype != _dt.bool_ else bridge.cast(x, _dt.uint8.id)
    floating = v.dtype.is_floating_point
    if floating:
        fill = -math.inf if largest else math.inf
    else:
        fill = _EXTREME[v.dtype.id][0 if largest else 1]
    ext = ops.amax if largest else ops.amin
    iota = _const(dev, ("iota", n), lambda: torch.arange(n)).reshape(1, n)
    remaining = bridge.full(dev, [R, n], _dt.bool_.id, True)
    nan = ops.ne(v, v) if floating else None
    picks = []
    for _ in range(k):
        live = remaining if nan is None else ops.logical_and(remaining, ops.logical_not(nan))
        m = ext(ops.where(live, v, fill), 1, keepdims=True)
        cand = ops.logical_and(live, ops.eq(v, m))
        if nan is not None:  # NaN first when largest, last when smallest (torch's order)
            live_nan = ops.logical_and(remaining, nan)
            pick_nan = live_nan if largest else cand
            has = ops.gt(ops.amax(bridge.cast(pick_nan, _dt.int32.id), 1, keepdims=True), 0)
            cand = ops.where(has, live_nan, cand) if largest else ops.where(has, cand, live_nan)
        idx = ops.argmax(bridge.cast(cand, _dt.int32.id), 1, keepdims=True)  # the first one
        picks.append(idx)
        remaining = ops.logical_and(remaining, ops.ne(iota, idx))
    idx = bridge.cat(picks, 1) if k else bridge.full(dev, [R, 0], _dt.int64.id, 0)
    return ops.gather(x, 1, idx), idx


# ---- scatter / index_put --------------------------------------------------------------------

def _scatter(x, dim, index, src):
    """x with x[..index..] = src along dim. Where an index repeats along dim,
    torch writes one of the values (which one is unspecified): here the last
    in row-major order, as torch's CPU. Finding repeats costs one read-back of
    the largest hit count; only then are the writes sorted to pick the last."""
    index = _int64(index)
    if not isinstance(src, bridge.Tensor):
        src = bridge.full(x.device, list(index.shape), x.dtype.id, src)
    elif list(src.shape) != list(index.shape):
        src = src.narrow(0, 0, index.shape[0]) if src.ndim else src
        for d in range(1, index.ndim):
            src = src.narrow(d, 0, index.shape[d])
    src = bridge.cast(src, x.dtype.id) if src.dtype != x.dtype else src
    zero = bridge.full(x.device, list(x.shape), x.dtype.id, 0)
    hit = ops.scatter_add(bridge.full(x.device, list(x.shape), _dt.int32.id, 0), dim, index,
                          bridge.full(x.device, list(index.shape), _dt.int32.id, 1))
    src = src.contiguous()
    if int(ops.amax(hit).item()) > 1:  # a repeated index: keep only each slot's last write
        win = _last_writes(_scatter_targets(x, dim, index)).reshape(*index.shape)
        src = ops.where(win, src, ops.mul(src, 0))
    return ops.where(ops.gt(hit, 0), ops.scatter_add(zero, dim, index, src), x)


def _scatter_targets(x, dim, index):
    """int64 [index.numel()]: the flat position in x each element of a
    scatter along dim writes to (row-major over index)."""
    shape, ishape = list(x.shape), list(index.shape)
    flat = None
    for d in range(len(ishape)):
        if d == dim:
            coord = index
        else:
            view = [1] * len(ishape)
            view[d] = ishape[d]
            coord = _const(x.device, ("iota", ishape[d]),
                           lambda size=ishape[d]: torch.arange(size)).reshape(*view)
        flat = coord if flat is None else ops.add(ops.mul(flat, shape[d]), coord)
    return flat.expand(*ishape).contiguous().reshape(index.numel())


@lowers("scatter.src", "scatter.value")
@_zero_d
def scatter(x, dim, index, src):
    if index.numel() == 0:
        return ops.clone(x)
    return _scatter(x, dim + x.ndim if dim < 0 else dim, index, src)


@lowers("nonzero.default")
def nonzero(mask):
    """[count, ndim] int64 coordinates of the non-zero elements, row-major.
    The count is a data-dependent size, so it is read back to the host (one
    sync, as torch's own nonzero on an accelerator); each coordinate column is
    a scatter of that dim's index to the element's position among the hits."""
    hit = ops.ne(mask, 0) if mask.dtype != _dt.bool_ else mask
    shape = list(mask.shape) or [1]
    hit = hit.reshape(*shape)
    n = int(ops.sum(bridge.cast(hit, _dt.int64.id)).item())
    flat = hit.reshape(hit.numel())
    pos = ops.where(flat, _mask_positions(flat), n)  # misses go to a spare slot n
    cols = []
    for d, size in enumerate(shape):
        view = [1] * len(shape)
        view[d] = size
        coord = _const(mask.device, ("iota", size), lambda size=size: torch.arange(size))
        coord = coord.reshape(*view).expand(*shape).contiguous().reshape(hit.numel())
        col = ops.scatter_add(bridge.full(mask.device, [n + 1], _dt.int64.id, 0), 0, pos, coord)
        cols.append(col.narrow(0, 0, n).reshape(n, 1))
    out = bridge.cat(cols, 1) if cols else bridge.full(mask.device, [n, 0], _dt.int64.id, 0)
    return out if mask.ndim else out.narrow(1, 0, 0).contiguous()


def _mask_positions(mask):
    """int64 position of each True among the Trues (row-major), for a flattened mask."""
    flat = bridge.cast(mask.reshape(mask.numel()), _dt.int64.id)
    return ops.sub(ops.cumsum(flat, 0), 1)


@lowers("index.Tensor")
def index_tensor(x, indices):
    """``x[..., i, j, ...]`` with integer index tensors on adjacent dims (the
    common case: ``table[ids]``, ``cos[position_ids]``), as one gather: the
    indexed dims are merged into one, the index made flat over it. A bool
    mask (``x[mask]``) stands for its nonzero coordinates."""
    if any(i is not None and i.dtype in (_dt.bool_, _dt.uint8) for i in indices):
        indices = mask_to_indices(indices)
    dims = [d for d, i in enumerate(indices) if i is not None]
    if not dims:
        return x
    if dims != list(range(dims[0], dims[-1] + 1)):
        # torch's rule: the index dims first, then the others in order
        x, indices, _ = _indexed_first(x, indices, dims)
        return index_tensor(x, indices)
    d0, k = dims[0], len(dims)
    shape = list(x.shape)
    flat = _flat_index(indices, dims, shape)
    merged = shape[:d0] + [math.prod(shape[d0:d0 + k])] + shape[d0 + k:]
    xm = x.reshape(*merged)
    out_idx = list(flat.shape)
    n = flat.numel()
    view = [1] * len(merged)
    view[d0] = n
    full = list(merged)
    full[d0] = n
    idx = flat.reshape(*view).expand(*full)
    return ops.gather(xm, d0, idx).reshape(*shape[:d0], *out_idx, *shape[d0 + k:])


def _permuted(x, order):
    """x's dims in ``order`` (a view)."""
    return bridge.view(x, [x.shape[d] for d in order], [x.strides[d] for d in order],
                       bridge.storage_offset(x))


def _indexed_first(x, indices, dims):
    """Index tensors on non-adjacent dims: (x with the indexed dims moved first,
    contiguous; the indices for it; the order of x's dims). torch puts the
    broadcast index dims first in the result of such an index."""
    order = dims + [d for d in range(x.ndim) if d not in dims]
    return (_permuted(x, order).contiguous(), [indices[d] for d in dims],
            order)


def _flat_index(indices, dims, shape):
    """int64: the row-major position within the merged dims ``dims`` of x
    (``shape``) that the index tensors name, negatives wrapped."""
    flat = None
    for d in dims:
        i = bridge.cast(indices[d], _dt.int64.id)
        i = ops.where(ops.lt(i, 0), ops.add(i, shape[d]), i)
        flat = i if flat is None else ops.add(ops.mul(flat, shape[d]), i)
    return flat


@lowers("index_put.default")
def index_put(x, indices, values, accumulate=False):
    """``x[indices] = values`` (or ``+=``). A bool mask over x's leading dims
    (``x[mask] = v``) picks the values in order by a cumulative sum; integer
    index tensors on adjacent dims become one flat scatter. A host value (a
    number, or a 0-d CPU tensor, which ``unwrap`` makes a number) is x's dtype
    on x's device, as torch casts it."""
    if not isinstance(values, bridge.Tensor):
        values = ops.full([], values, dtype=x.dtype, device=x.device)
    dims = [d for d, i in enumerate(indices) if i is not None]
    if not dims:
        return ops.add(x, values) if accumulate else bridge.cast(
            ops.add(ops.mul(x, 0), values), x.dtype.id)
    if len(dims) == 1 and indices[dims[0]].dtype == _dt.bool_ and dims[0] == 0:
        mask = indices[0]
        k = mask.ndim
        rest = list(x.shape[k:])
        mfull = mask.reshape(*mask.shape, *[1] * len(rest)).expand(*x.shape)
        if values.numel() == 1 or list(values.shape) == rest or values.ndim == 0:
            new = values  # one value (or one row) for every selected position: broadcast
        else:
            pos = ops.maximum(_mask_positions(mask), 0)  # index into the selected rows
            rows = values.reshape(values.shape[0] if values.ndim else 1, math.prod(rest) or 1)
            g = ops.gather(rows, 0, pos.reshape(mask.numel(), 1).expand(mask.numel(), rows.shape[1]))
            new = g.reshape(*x.shape)
        if accumulate:
            return ops.where(mfull, ops.add(x, new), x)
        return bridge.cast(ops.where(mfull, new, x), x.dtype.id)
    if any(indices[d].dtype in (_dt.bool_, _dt.uint8) for d in dims):
        # a mask elsewhere (x[:, m] = v, or beside index tensors): its nonzero
        # coordinates, as x[...] reads them
        return index_put(x, mask_to_indices(indices), values, accumulate)
    if dims != list(range(dims[0], dims[-1] + 1)):
        # as x[indices] reads them (the index dims first), written back in x's order
        xp, idx, order = _indexed_first(x, indices, dims)
        out = index_put(xp, idx, values, accumulate)
        back = [order.index(d) for d in range(x.ndim)]
        return _permuted(out, back).contiguous()
    d0, k = dims[0], len(dims)
    shape = list(x.shape)
    flat = _flat_index(indices, dims, shape)
    ishape = list(indices[dims[0]].shape)
    for d in dims[1:]:
        ishape = list(bridge.broadcast_shapes(ishape, list(indices[d].shape)))
    flat = flat.expand(*ishape).contiguous().reshape(math.prod(ishape))
    n = flat.numel()
    merged = shape[:d0] + [math.prod(shape[d0:d0 + k])] + shape[d0 + k:]
    xm = x.reshape(*merged)
    vshape = shape[:d0] + ishape + shape[d0 + k:]
    v = values if list(values.shape) == vshape else values.expand(*vshape)
    v = v.contiguous().reshape(*shape[:d0], n, *shape[d0 + k:])
    v = bridge.cast(v, x.dtype.id) if v.dtype != x.dtype else v
    if accumulate:  # the index of every element of v
        view = [1] * len(merged)
        view[d0] = n
        full = list(merged)
        full[d0] = n
        out = ops.scatter_add(xm, d0, flat.reshape(*view).expand(*full).contiguous(), v)
    elif n == 0:  # nothing written: x's values, in a tensor of its own
        out = bridge.cast(ops.mul(xm, 1), x.dtype.id)
    else:
        out = _put_slices(xm, d0, flat, v)
    return out.reshape(*shape)


def _put_slices(xm, d0, flat, v):
    """``xm`` with slice ``flat[j]`` along dim ``d0`` replaced by slice ``j``
    of ``v`` (each index names a whole slice; a repeated index: the last
    write wins, as torch's CPU). Which row of ``v`` lands at each position of
    dim ``d0`` (0: none, else row + 1) is a scatter over that dim alone; then
    one gather and one select over x. (A static KV cache's ``index_copy_``:
    two passes over the cache, where scattering over it took six.)"""
    n, m = flat.numel(), xm.shape[d0]
    rows = _const(xm.device, ("iota", n), lambda: torch.arange(n))
    rows = ops.mul(ops.add(rows, 1), bridge.cast(_last_writes(flat), _dt.int64.id))
    src = ops.scatter_add(bridge.full(xm.device, [m], _dt.int64.id, 0), 0, flat, rows)
    view = [1] * xm.ndim
    view[d0] = m
    pick = ops.maximum(ops.sub(src, 1), 0).reshape(*view).expand(*xm.shape)
    return ops.where(ops.gt(src, 0).reshape(*view), ops.gather(v, d0, pick), xm)


def _last_writes(flat):
    """bool [n]: True where flat[i] is the last occurrence of its value (a
    stable sort puts repeats side by side in order; the last of each run wins)."""
    n = flat.numel()
    svals, perm = _sort_last(flat.reshape(1, n), False)
    last = bridge.full(flat.device, [1, 1], _dt.bool_.id, True)
    if n > 1:
        last = bridge.cat([ops.ne(svals.narrow(1, 0, n - 1), svals.narrow(1, 1, n - 1)), last], 1)
    win = ops.scatter_add(bridge.full(flat.device, [1, n], _dt.int32.id, 0), 1, perm,
                          bridge.cast(last, _dt.int32.id))
    return ops.gt(win, 0).reshape(n)


# ---- multinomial: the device's Philox stream ----------------------------------------------------

@lowers("multinomial.default", kind=RANDOM)
def multinomial(p, num_samples, replacement=False, *, generator=None):
    _no_generator(generator, "multinomial")
    rows = p.reshape(1, p.shape[0]) if p.ndim == 1 else p
    R, n = rows.shape
    if not replacement and num_samples > n:
        raise RuntimeError(f"multinomial: cannot draw {num_samples} samples without replacement "
                           f"from {n} categories")
    pf = bridge.cast(rows, _dt.float64.id if rows.dtype == _dt.float64 else _dt.float32.id)
    dev = p.device
    if replacement or num_samples == 1:
        cdf = ops.cumsum(pf, 1)
        total = cdf.narrow(1, n - 1, 1)
        seed, offset = _device.rng(dev).take(R * num_samples)
        u = ops.rand([R, num_samples], seed, offset, dtype=pf.dtype, device=dev)
        target = ops.mul(u, total)  # [R, S]
        below = ops.le(cdf.reshape(R, 1, n), target.reshape(R, num_samples, 1))
        out = ops.minimum(ops.sum(bridge.cast(below, _dt.int64.id), -1), n - 1)
    else:
        seed, offset = _device.rng(dev).take(R * n)
        u = ops.rand([R, n], seed, offset, dtype=pf.dtype, device=dev)
        # the exponential race: the k smallest of -log(u)/p (p = 0: never drawn)
        key = ops.where(ops.gt(pf, 0), ops.div(ops.neg(ops.log(u)), pf), math.inf)
        out = _sort_last(key, False)[1].narrow(1, 0, num_samples).contiguous()
    return out.reshape(num_samples) if p.ndim == 1 else out


def mask_to_indices(indices):
    """torch's rule for ``x[mask]``: a bool (or uint8) mask over k dims stands for
    k integer index tensors, the columns of its ``nonzero``."""
    out = []
    for i in indices:
        if i is not None and i.dtype in (_dt.bool_, _dt.uint8):
            nz = nonzero(i)
            out.extend(nz.narrow(1, d, 1).reshape(nz.shape[0]) for d in range(i.ndim))
        else:
            out.append(i)
    return out
