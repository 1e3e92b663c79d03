"""Lowerings that move no data or move it between places: views, copies,
transfers, conversions, factories, and the write-through of in-place ops.

Views are DeviceKit views (``bridge.view``: shape, strides, offset over the
same storage), so a view and its base share memory as in torch. Every
in-place op ends in ``bridge.copy_into(dst, value)``: one strided copy into
the destination view (the ``copy`` base op, which every plugin has), so a
write to a view is seen through its base and every other view.
"""

import math

import torch

from .. import bridge
from .. import ops as dk_ops
from . import _device
from ._device import DKTensor, dk_dtype, from_host, to_host, wrap
from ._table import (FACTORY, KERNEL, TRANSFER, VIEW, HostOperandError, derives, lowers, resolve,
                     unwrap, unwrap_kwargs)


def _dim(d, n):
    n = max(n, 1)
    if not -n <= d < n:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], "
                         f"but got {d})")
    return d + n if d < 0 else d


def _view(t, shape, strides, offset=None):
    return bridge.view(t, list(shape), list(strides), bridge.storage_offset(t) if offset is None else offset)


def _infer(shape, n):
    shape = [int(s) for s in shape]
    if -1 in shape:
        known = math.prod(s for s in shape if s != -1)
        shape[shape.index(-1)] = n // known if known else 0
    if math.prod(shape) != n:
        raise RuntimeError(f"shape '{shape}' is invalid for input of size {n}")
    return shape


# ---- views ------------------------------------------------------------------------

@lowers("view.default", kind=VIEW)
def view(t, size):
    shape = _infer(size, t.numel())
    strides = bridge.view_strides(list(t.shape), list(t.strides), shape)
    if strides is None:
        raise RuntimeError("view size is not compatible with input tensor's size and stride (at "
                           "least one dimension spans across two contiguous subspaces). Use "
                           ".reshape(...) instead.")
    return _view(t, shape, strides)


@lowers("_unsafe_view.default", "_reshape_alias.default", kind=VIEW)
def unsafe_view(t, size, stride=None):
    shape = _infer(size, t.numel())
    strides = bridge.view_strides(list(t.shape), list(t.strides), shape)
    if strides is None:  # a fresh result (its producer's): copy when it cannot be a view
        t, strides = t.contiguous(), bridge.contiguous_strides(shape)
    return _view(t, shape, strides)


@lowers("as_strided.default", kind=VIEW)
def as_strided(t, size, stride, storage_offset=None):
    return _view(t, size, stride, storage_offset)


@lowers("alias.default", "detach.default", kind=VIEW)
def alias(t):
    return t  # the same DeviceKit view: a new torch tensor over the same memory


@lowers("lift_fresh.default", kind=VIEW, raw=True)
def lift_fresh(t):
    """``torch.tensor(data, device="dk:N")``'s last step. torch builds the
    tensor on the device with every torch dispatch mode off, then lifts it;
    a fake mode (Dynamo's, AOTAutograd's) declines to lift a tensor subclass,
    so the lift lands here. Under such a mode the real dk tensor would leak
    into the fake trace (and meet fake tensors in the next op): the values
    are lifted from the host instead and moved to dk under the modes, as
    torch does for a device it may not touch while faking. Otherwise the
    same tensor, as ``alias``."""
    if torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE) is not None:
        host = torch.ops.aten.lift_fresh.default(to_host(t._dk))
        # copied into a fresh dk tensor, not host.to(dk): the fake mode would
        # run _to_copy of the constant for real and fakify its dk result
        out = torch.empty_strided(tuple(t.shape), t.stride(), dtype=t.dtype, device=t.device)
        return out.copy_(host)
    return wrap(t._dk)


@lowers("lift_fresh_copy.default", kind=TRANSFER, raw=True)
def lift_fresh_copy(t):
    """A compiled graph's copy of a ``torch.tensor`` constant: the constant
    is a CPU tensor in the graph (see ``lift_fresh``), copied as it is."""
    if isinstance(t, DKTensor):
        return wrap(clone(t._dk))
    return t.clone()


@lowers("t.default", kind=VIEW)
def t_(t):
    return t if t.ndim < 2 else transpose(t, 0, 1)


@lowers("transpose.int", kind=VIEW)
def transpose(t, dim0, dim1):
    n = t.ndim
    a, b = _dim(dim0, n), _dim(dim1, n)
    shape, strides = list(t.shape), list(t.strides)
    if n:
        shape[a], shape[b] = shape[b], shape[a]
        strides[a], strides[b] = strides[b], strides[a]
    return _view(t, shape, strides)


@lowers("permute.default", kind=VIEW)
def permute(t, dims):
    dims = [_dim(d, t.ndim) for d in dims]
    return _view(t, [t.shape[d] for d in dims], [t.strides[d] for d in dims])


@lowers("expand.default", kind=VIEW)
def expand(t, size, implicit=False):
    lead = len(size) - t.ndim
    shape = [t.shape[i - lead] if s == -1 and i >= lead else int(s) for i, s in enumerate(size)]
    return bridge.expand(t, shape)


@lowers("slice.Tensor", kind=VIEW)
def slice_(t, dim=0, start=None, end=None, step=1):
    d = _dim(dim, t.ndim)
    size = t.shape[d]
    start, end, step = slice(start, end, step).indices(size)
    count = max(0, (end - start + step - 1) // step)
    shape, strides = list(t.shape), list(t.strides)
    shape[d], strides[d] = count, strides[d] * step
    return _view(t, shape, strides, bridge.storage_offset(t) + (start * t.strides[d] if count else 0))


@lowers("select.int", kind=VIEW)
def select(t, dim, index):
    d = _dim(dim, t.ndim)
    size = t.shape[d]
    i = index + size if index < 0 else index
    if not 0 <= i < size:
        raise IndexError(f"select(): index {index} out of range for tensor of size "
                         f"{list(t.shape)} at dimension {dim}")
    shape, strides = list(t.shape), list(t.strides)
    del shape[d], strides[d]
    return _view(t, shape, strides, bridge.storage_offset(t) + i * t.strides[d])


@lowers("unsqueeze.default", kind=VIEW)
def unsqueeze(t, dim):
    d = _dim(dim, t.ndim + 1)
    shape, strides = list(t.shape), list(t.strides)
    stride = strides[d] * shape[d] if d < t.ndim else 1
    shape.insert(d, 1)
    strides.insert(d, stride)
    return _view(t, shape, strides)


@lowers("squeeze.default", "squeeze.dim", "squeeze.dims", kind=VIEW)
def squeeze(t, dim=None):
    if dim is None:
        dims = range(t.ndim)
    else:
        dims = [_dim(d, t.ndim) for d in (dim if isinstance(dim, (list, tuple)) else [dim])]
    keep = [i for i in range(t.ndim) if not (i in dims and t.shape[i] == 1)]
    return _view(t, [t.shape[i] for i in keep], [t.strides[i] for i in keep])


@lowers("split.Tensor", kind=VIEW)
def split(t, split_size, dim=0):
    d = _dim(dim, t.ndim)
    size = t.shape[d]
    sizes = [min(split_size, size - s) for s in range(0, size, split_size)] if split_size else []
    return split_with_sizes(t, sizes or [size], d)


@lowers("split_with_sizes.default", kind=VIEW)
def split_with_sizes(t, split_sizes, dim=0):
    d = _dim(dim, t.ndim)
    out, start = [], 0
    for s in split_sizes:
        out.append(slice_(t, d, start, start + s))
        start += s
    return out


@lowers("unbind.int", kind=VIEW)
def unbind(t, dim=0):
    d = _dim(dim, t.ndim)
    return [select(t, d, i) for i in range(t.shape[d])]


# ---- copies, transfers and conversions ---------------------------------------------

def _value_on(dev, src):
    """``src`` (a DKTensor, CPU tensor or Python scalar) as a DeviceKit operand on ``dev``."""
    if isinstance(src, DKTensor):
        return src._dk
    if isinstance(src, torch.Tensor):
        return from_host(src, dev)
    return src


@lowers("copy_.default", kind=TRANSFER, raw=True)
def copy_(dst, src, non_blocking=False):
    if isinstance(dst, DKTensor):
        value = _value_on(dst._dk.device, src)
        if isinstance(src, DKTensor) and src._dk.device is not dst._dk.device:
            value = bridge.to_device(value, dst._dk.device)
        bridge.copy_into(dst._dk, value)
        return dst
    dst.copy_(to_host(src._dk))  # device -> host into an existing CPU tensor
    return dst


@lowers("copy.default", kind=TRANSFER, raw=True)
def copy(dst, src, non_blocking=False):
    """The functional ``copy_`` (compiled graphs): a new tensor of ``dst``'s
    shape and dtype holding ``src``."""
    if not isinstance(dst, DKTensor):
        return dst.clone().copy_(to_host(src._dk) if isinstance(src, DKTensor) else src)
    out = wrap(bridge.empty(dst._dk.device, list(dst.shape), bridge.dtype_id(dst._dk)))
    return copy_(out, src, non_blocking)


@lowers("_to_copy.default", kind=TRANSFER, raw=True)
def to_copy(t, *, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False,
            memory_format=None):
    device = torch.device(device) if device is not None else t.device
    x = t._dk
    if device.type == "cpu":
        host = to_host(x)
        return host.to(dtype) if dtype is not None else host
    if device.type != _device.BACKEND:  # (torch copies to any device: "meta", another backend)
        raise NotImplementedError(f"a copy from {t.device} to {device}: devicekit.torch moves "
                                  f"data between dk devices and the CPU only")
    target = _device.dk_device(device)
    if target is not x.device:
        x = bridge.to_device(x, target)
    if dtype is not None:
        x = bridge.cast(x, dk_dtype(dtype).id)
    if x is t._dk:  # _to_copy always copies
        x = clone(x)
    return wrap(x)


@lowers("clone.default", kind=TRANSFER)
def clone(t, memory_format=None):
    out = bridge.empty(t.device, list(t.shape), bridge.dtype_id(t))
    bridge.copy_into(out, t)
    return out


# ---- scatters into a view, and the backward of slicing and selecting ------------------
# torch's decompositions of these gather every element through index tensors
# (arange, floor_divide, a masked index, where: a dozen launches and as many
# temporaries); here each is a fill or a copy and one strided copy into the view
# (``logits[:, :-1]``'s backward in every language-model loss)

def _write(view, src, op):
    if tuple(src.shape) != tuple(view.shape):
        raise RuntimeError(f"{op}: expected src to have a size equal to the slice of self. src "
                           f"size = {list(src.shape)}, slice size = {list(view.shape)}")
    if bridge.dtype_id(src) != bridge.dtype_id(view):
        src = bridge.cast(src, bridge.dtype_id(view))
    bridge.copy_into(view, src)


def _zeros(like, sizes):
    return bridge.full(like.device, [int(s) for s in sizes], bridge.dtype_id(like), 0)


@lowers("slice_scatter.default")
def slice_scatter(x, src, dim=0, start=None, end=None, step=1):
    out = clone(x)
    _write(slice_(out, dim, start, end, step), src, "slice_scatter")
    return out


@lowers("select_scatter.default")
def select_scatter(x, src, dim, index):
    out = clone(x)
    _write(select(out, dim, index), src, "select_scatter")
    return out


@lowers("slice_backward.default")
def slice_backward(g, input_sizes, dim, start, end, step):
    out = _zeros(g, input_sizes)
    _write(slice_(out, dim, start, end, step), g, "slice_backward")
    return out


@lowers("select_backward.default")
def select_backward(g, input_sizes, dim, index):
    out = _zeros(g, input_sizes)
    _write(select(out, dim, index), g, "select_backward")
    return out


@lowers("_local_scalar_dense.default", kind=TRANSFER)
def local_scalar_dense(t):
    if t.numel() != 1:
        raise RuntimeError(f"a Tensor with {t.numel()} elements cannot be converted to Scalar")
    return to_host(t).reshape(()).item()


def _cast_allowed(value, dst):
    """torch's rule for writing a result into a tensor of another dtype: a
    floating result never into an integer or bool tensor."""
    if (isinstance(value, bridge.Tensor) and bridge.dtype_id(value) != bridge.dtype_id(dst._dk)
            and value.dtype.is_floating_point and not dst._dk.dtype.is_floating_point):
        raise RuntimeError(f"result type {_device.torch_dtype(value)} can't be cast to the "
                           f"desired output type {dst.dtype}")


@derives("in_place")
def write_through(lowering, args, kwargs):
    """An in-place op: its out-of-place lowering's result written into ``self``."""
    dst = args[0]
    value = lowering.fn(*unwrap(args), **unwrap_kwargs(kwargs))
    _cast_allowed(value, dst)
    bridge.copy_into(dst._dk, value)
    return dst


@derives("out")
def write_out(compute, names, args, kwargs):
    """An ``out=`` op (``exp.out``, ``sum.IntList_out``, ``max.dim_max``): its
    functional lowering's results (``compute(args, kwargs)``, wrapped) written
    into the tensors named ``names``, which it returns. torch resizes an out
    tensor of another shape; a dk tensor's sizes are fixed, so that call is
    not covered (NotImplementedError: its decomposition is tried next)."""
    outs = [kwargs[n] for n in names]
    results = compute(args, {k: v for k, v in kwargs.items() if k not in names})
    results = results if isinstance(results, (tuple, list)) else (results,)
    for name, dst, value in zip(names, outs, results):
        if not isinstance(dst, DKTensor):
            raise HostOperandError(f"expected all tensors on the same device, got a "
                                   f"{dst.device} tensor as {name}= of a dk op")
        if tuple(value.shape) != tuple(dst.shape):
            raise NotImplementedError(f"{name}= has shape {list(dst.shape)}, the result "
                                      f"{list(value.shape)}, and devicekit.torch does not "
                                      f"resize a dk tensor")
        _cast_allowed(value._dk, dst)
        bridge.copy_into(dst._dk, value._dk)
    return outs[0] if len(outs) == 1 else tuple(outs)


# ---- factories (reached through torch.library kernels on the PrivateUse1 key) ----------

def _dev(device):
    return _device.dk_device(torch.device(device) if device is not None else "dk:0")


def _dtype_id(dtype, default=None):
    return dk_dtype(dtype if dtype is not None else (default or torch.get_default_dtype())).id


@lowers("empty.memory_format", kind=FACTORY)
def empty(size, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return bridge.empty(_dev(device), [int(s) for s in size], _dtype_id(dtype))


@lowers("empty_strided.default", kind=FACTORY)
def empty_strided(size, stride, *, dtype=None, layout=None, device=None, pin_memory=None):
    size, stride = [int(s) for s in size], [int(s) for s in stride]
    span = 1 + sum((s - 1) * st for s, st in zip(size, stride)) if all(size) else 0
    base = bridge.empty(_dev(device), [span], _dtype_id(dtype))
    return bridge.view(base, size, stride, 0)


@lowers("full.default", kind=FACTORY)
def full(size, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None):
    if dtype is None:
        dtype = (torch.bool if isinstance(fill_value, bool) else torch.int64
                 if isinstance(fill_value, int) else torch.get_default_dtype())
    return bridge.full(_dev(device), [int(s) for s in size], _dtype_id(dtype), fill_value)


@lowers("zeros.default", kind=FACTORY)
def zeros(size, *, dtype=None, layout=None, device=None, pin_memory=None):
    return bridge.full(_dev(device), [int(s) for s in size], _dtype_id(dtype), 0)


@lowers("ones.default", kind=FACTORY)
def ones(size, *, dtype=None, layout=None, device=None, pin_memory=None):
    return bridge.full(_dev(device), [int(s) for s in size], _dtype_id(dtype), 1)


@lowers("scalar_tensor.default", kind=FACTORY)
def scalar_tensor(s, *, dtype=None, layout=None, device=None, pin_memory=None):
    return bridge.full(_dev(device), [], _dtype_id(dtype), s)


@lowers("arange.start_step", kind=FACTORY)
def arange(start, end, step=1, *, dtype=None, layout=None, device=None, pin_memory=None):
    ints = all(isinstance(v, int) for v in (start, end, step))
    if dtype is None:
        dtype = torch.int64 if ints else torch.get_default_dtype()
    return dk_ops.arange(start, end, step, dtype=dk_dtype(dtype), device=_dev(device))


@lowers("arange.default", kind=FACTORY)
def arange_end(end, *, dtype=None, layout=None, device=None, pin_memory=None):
    return arange(0, end, 1, dtype=dtype, device=device)


@lowers("arange.start", kind=FACTORY)
def arange_start(start, end, *, dtype=None, layout=None, device=None, pin_memory=None):
    return arange(start, end, 1, dtype=dtype, device=device)


def _like(t, dtype, device, fill):
    dev = _device.dk_device(torch.device(device)) if device is not None else t.device
    dt = dk_dtype(dtype).id if dtype is not None else bridge.dtype_id(t)
    if fill is None:
        return bridge.empty(dev, list(t.shape), dt)
    return bridge.full(dev, list(t.shape), dt, fill)


@lowers("empty_like.default", kind=FACTORY)
def empty_like(t, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return _like(t, dtype, device, None)


@lowers("zeros_like.default", kind=FACTORY)
def zeros_like(t, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return _like(t, dtype, device, 0)


@lowers("ones_like.default", kind=FACTORY)
def ones_like(t, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return _like(t, dtype, device, 1)


@lowers("full_like.default", kind=FACTORY)
def full_like(t, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None,
              memory_format=None):
    return _like(t, dtype, device, fill_value)


def _new(t, size, dtype, device, fill):
    dev = _device.dk_device(torch.device(device)) if device is not None else t.device
    dt = dk_dtype(dtype).id if dtype is not None else bridge.dtype_id(t)
    size = [int(s) for s in size]
    return bridge.empty(dev, size, dt) if fill is None else bridge.full(dev, size, dt, fill)


@lowers("new_empty.default", kind=FACTORY)
def new_empty(t, size, *, dtype=None, layout=None, device=None, pin_memory=None):
    return _new(t, size, dtype, device, None)


@lowers("new_empty_strided.default", kind=FACTORY)
def new_empty_strided(t, size, stride, *, dtype=None, layout=None, device=None, pin_memory=None):
    return bridge.view(_new(t, size, dtype, device, None), [int(s) for s in size],
                       bridge.contiguous_strides(list(size)), 0)


@lowers("new_zeros.default", kind=FACTORY)
def new_zeros(t, size, *, dtype=None, layout=None, device=None, pin_memory=None):
    return _new(t, size, dtype, device, 0)


@lowers("new_ones.default", kind=FACTORY)
def new_ones(t, size, *, dtype=None, layout=None, device=None, pin_memory=None):
    return _new(t, size, dtype, device, 1)


@lowers("new_full.default", kind=FACTORY)
def new_full(t, size, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None):
    return _new(t, size, dtype, device, fill_value)


@lowers("fill_.Scalar", "fill_.Tensor", kind=KERNEL, raw=True)
def fill_(t, value):
    if isinstance(value, torch.Tensor):
        value = unwrap(value)
        if isinstance(value, bridge.Tensor):
            bridge.copy_into(t._dk, value)
            return t
    bridge.copy_into(t._dk, bridge.full(t._dk.device, [], bridge.dtype_id(t._dk), value))
    return t


@lowers("zero_.default", raw=True)
def zero_(t):
    return fill_(t, 0)


# The factories a torch call can reach with no tensor argument (device="dk:N"):
# torch.library kernels on PrivateUse1 route them to the same dispatch.
FACTORY_OPS = ("empty.memory_format", "empty_strided.default", "full.default", "zeros.default",
               "ones.default", "scalar_tensor.default", "arange.start_step", "arange.default",
               "arange.start", "eye.default", "eye.m", "hann_window.default",
               "hann_window.periodic", "hamming_window.default", "hamming_window.periodic",
               "hamming_window.periodic_alpha", "hamming_window.periodic_alpha_beta",
               "bartlett_window.default", "bartlett_window.periodic", "blackman_window.default",
               "blackman_window.periodic")


def register_factories(lib, dispatch):
    """Registers ``aten::_copy_from`` (where torch's own ``copy_`` lands for a
    dk tensor when the Python key is off: ``torch.tensor(data, device="dk:0")``
    builds its result that way) and the factories above as PrivateUse1
    kernels that hand the call to ``dispatch`` (``_dispatch.dispatch``, passed
    in by the package's ``__init__``: it sits above this module)."""
    def copy_from(src, dst, non_blocking=False):
        return dispatch(torch.ops.aten.copy_.default, (dst, src, non_blocking), {})

    lib.impl("_copy_from", copy_from, "PrivateUse1")
    for name in FACTORY_OPS:
        op = resolve(name)
        if op is None:
            continue
        lib.impl(name[:-len(".default")] if name.endswith(".default") else name,
                 _factory_kernel(op, dispatch), "PrivateUse1")


def _factory_kernel(op, dispatch):
    def kernel(*args, **kwargs):
        return dispatch(op, args, kwargs)
    return kernel


@lowers("eye.m", kind=FACTORY)
def eye_m(n, m, *, dtype=None, layout=None, device=None, pin_memory=None):
    """``torch.eye(n, m, device="dk")``: row index == column index, cast to
    the dtype (torch's own decomposition goes through ``eye.m_out`` and a
    ``resize_`` of its output, which a dk tensor does not do)."""
    for name, size in (("n", int(n)), ("m", int(m))):
        if size < 0:  # (torch's check; an arange of a negative count is empty)
            raise RuntimeError(f"{name} must be greater or equal to 0, got {size}")
    dev = _dev(device)
    rows = dk_ops.arange(0, int(n), 1, dtype=dk_dtype(torch.int64), device=dev).reshape([int(n), 1])
    cols = dk_ops.arange(0, int(m), 1, dtype=dk_dtype(torch.int64), device=dev).reshape([1, int(m)])
    return dk_ops.cast(dk_ops.eq(rows, cols), dk_dtype(dtype or torch.get_default_dtype()))


@lowers("eye.default", kind=FACTORY)
def eye(n, *, dtype=None, layout=None, device=None, pin_memory=None):
    return eye_m(n, n, dtype=dtype, device=device)


# ---- window functions (torch.stft's): torch makes them through an arange into an
# empty out= (a resize_, which a dk tensor does not do); here torch's formulas on
# an iota, in the dtype (float32 for 16-bit dtypes, cast once)

def _window(name, n, periodic, dtype, device, formula):
    n = int(n)
    dtype = dtype or torch.get_default_dtype()
    if n < 0:
        raise RuntimeError(f"{name} requires non-negative window_length, got "
                           f"window_length={n}")
    if not dtype.is_floating_point:
        raise RuntimeError(f"{name} expects floating point dtypes, got: {dtype}")
    dev, dt = _dev(device), dk_dtype(dtype)
    if n <= 1:
        return bridge.full(dev, [n], dt.id, 1)
    work = dk_dtype(torch.float32) if dtype.itemsize == 2 else dt
    m = n + 1 if periodic else n  # periodic: the first n of n + 1
    w = formula(dk_ops.arange(0, n, 1, dtype=work, device=dev), m)
    return dk_ops.cast(w, dt) if work.id != dt.id else w


def _hamming(alpha, beta):
    return lambda k, m: dk_ops.add(dk_ops.mul(dk_ops.cos(dk_ops.mul(k, 2.0 * math.pi / (m - 1))),
                                              -beta), alpha)


def _bartlett(k, m):
    x = dk_ops.mul(k, 2.0 / (m - 1))
    return dk_ops.where(dk_ops.lt(k, ((m - 1) >> 1) + 1), x, dk_ops.sub(2.0, x))


def _blackman(k, m):
    x = dk_ops.mul(k, math.pi / (m - 1))
    return dk_ops.add(dk_ops.sub(dk_ops.mul(dk_ops.cos(dk_ops.mul(x, 4.0)), 0.08),
                                 dk_ops.mul(dk_ops.cos(dk_ops.mul(x, 2.0)), 0.5)), 0.42)


@lowers("hann_window.default", "hann_window.periodic", kind=FACTORY)
def hann_window(n, periodic=True, *, dtype=None, layout=None, device=None, pin_memory=None):
    return _window("hann_window", n, periodic, dtype, device, _hamming(0.5, 0.5))


@lowers("hamming_window.default", "hamming_window.periodic", "hamming_window.periodic_alpha",
        "hamming_window.periodic_alpha_beta", kind=FACTORY)
def hamming_window(n, periodic=True, alpha=0.54, beta=0.46, *, dtype=None, layout=None,
                   device=None, pin_memory=None):
    return _window("hamming_window", n, periodic, dtype, device, _hamming(alpha, beta))


@lowers("bartlett_window.default", "bartlett_window.periodic", kind=FACTORY)
def bartlett_window(n, periodic=True, *, dtype=None, layout=None, device=None, pin_memory=None):
    return _window("bartlett_window", n, periodic, dtype, device, _bartlett)


@lowers("blackman_window.default", "blackman_window.periodic", kind=FACTORY)
def blackman_window(n, periodic=True, *, dtype=None, layout=None, device=None, pin_memory=None):
    return _window("blackman_window", n, periodic, dtype, device, _blackman)
