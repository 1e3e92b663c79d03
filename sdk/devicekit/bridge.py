"""The SDK below autograd, for framework bridges.

A framework bridge (``devicekit.torch``; a JAX or other one the same way)
runs its framework's autograd above DeviceKit, so it calls the SDK's
untracked paths: no autograd record, no Python-level argument parsing. This
module names what such a bridge needs, so it never reaches into the private
core (``devicekit._core``, ``devicekit._fused``). Tensors are
``devicekit.Tensor``, devices ``devicekit.Device``; a dtype is given by its
id (``devicekit.float32.id``).

Creating and writing
  ``empty(device, shape, dtype_id)``, ``full(device, shape, dtype_id, value)``:
  a new tensor. ``from_host(device, dtype_id, array)``: a C-contiguous numpy
  array's bytes (reinterpreted as the dtype) copied to a new tensor.
  ``copy_into(dst, src)``: ``src`` (cast to ``dst``'s dtype, broadcast to its
  shape) written into the existing, possibly strided view ``dst``: one copy
  launch, seen through every view of ``dst``'s storage (in-place ops, ``copy_``).
  ``binary_into(op, dst, a, b)``: ``dst = a <op> b`` (``op``: ``"add"``,
  ``"sub"``, ``"mul"`` or ``"div"``; ``b`` a tensor or a number) written into
  the existing view ``dst``. The kernel writes ``dst`` itself (one launch, no
  temporary, no copy) when ``a``, ``b`` and ``dst`` share a floating dtype the
  kernel takes, ``dst`` is dense with the broadcast shape, and ``dst``
  overlaps no input except by being ``a`` on a kernel that declares
  ``DK_KERNEL_CAP_INPLACE``; otherwise the op and one copy, as ``copy_into``.

Views, raw strides and dtypes (strides in elements, as the device API's)
  ``view(t, shape, strides, offset)``: a view of ``t``'s storage.
  ``expand(t, shape)``: a broadcast view. ``storage_offset(t)``: the offset of
  ``t`` in its storage. ``contiguous_strides(shape)``: row-major strides.
  ``view_strides(shape, strides, new_shape)``: the strides that view
  ``shape``/``strides`` as ``new_shape`` without a copy, or None when only a
  copy can. ``dtype_id(t)``; ``cast(t, dtype_id)``; ``to_device(t, device)``.

Kernels and rules without autograd
  ``matmul(a, b)``, ``cat(tensors, dim)`` (bit-exact), ``promote_types(id_a,
  id_b)`` (the result dtype id), ``broadcast_shapes(shape_a, shape_b)``.

Fused kernels and the composite counters (``devicekit.composite_stats()``)
  ``fused_kernels_enabled()``: False inside ``devicekit.fused_kernels(False)``.
  ``try_fused(op, inputs, attrs, want)``: the first registered fused kernel
  that accepts the call: ``((outputs...), kernel name)``, or a str saying why
  none ran. ``count_composite(op, kernel=None, why=None)``: counts one call of
  composite ``op`` as served by fused ``kernel``, or as decomposed (``why``),
  in ``devicekit.composite_stats()``, as the SDK's own composites are.
"""

import operator

from . import _core, _fused
from .tensor import _contiguous_strides, _view_strides

Tensor = _core.Tensor
Device = _core.Device

# Creating and writing (C++ bindings; each has its signature in its __doc__).
empty = _core.empty
full = _core.full
from_host = _core.from_host
copy_into = _core.copy_into
_OP_ID = {name: i for i, name in enumerate(_core.OP_NAMES)}


def binary_into(op, dst, a, b):
    _core.binary_into(_OP_ID[op], dst, a, b)


# Views, raw strides and dtypes: the C++ methods, callable as functions.
view = _core.Tensor._view
expand = _core.Tensor._expand
cast = _core.Tensor._cast
to_device = _core.Tensor._to_device
storage_offset = operator.attrgetter("_offset")  # attrgetter: as fast as the attribute
dtype_id = operator.attrgetter("_dtype_id")
contiguous_strides = _contiguous_strides
view_strides = _view_strides

# Kernels and rules without autograd.
matmul = _core.matmul
cat = _core.cat
promote_types = _core.promote_types
broadcast_shapes = _core.broadcast_shapes

# Fused kernels.
try_fused = _core.try_fused


def fused_kernels_enabled():
    """False inside ``devicekit.fused_kernels(False)`` (this thread)."""
    return _fused._enabled()


def count_composite(op, kernel=None, why=None):
    """Count one call of composite ``op`` in ``devicekit.composite_stats()``:
    served by the fused ``kernel`` (its name), or decomposed because ``why``."""
    _fused._count(op, kernel, why)


__all__ = [
    "Device", "Tensor", "binary_into", "broadcast_shapes", "cast", "cat", "contiguous_strides",
    "copy_into",
    "count_composite", "dtype_id", "empty", "expand", "from_host", "full", "fused_kernels_enabled",
    "matmul", "promote_types", "storage_offset", "to_device", "try_fused", "view", "view_strides",
]
