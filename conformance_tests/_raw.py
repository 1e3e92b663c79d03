"""Direct kernel calls for the plugin-level section (not a section itself).

:func:`call` allocates every operand straight from the plugin
(``Device.alloc``), each output inside a guard band (CANARY bytes before and
after), calls the kernel through ``devicekit._core.raw_kernel_call`` (no SDK
checks, promotions or materialisation), and returns the launch and
synchronize outcomes, the outputs, and whether the guard bands survived.
Attribute structs are built with ctypes from the header's layout.
"""

import ctypes

import numpy as np

import devicekit as dk
from devicekit import _core
from devicekit.testing import oracle as O

DTYPE_IDS = {name: i for i, (name, _) in enumerate(_core.DTYPES)}
OP_IDS = None  # filled lazily from the spec order
INVALID_ARGUMENT = 1
CODES = {"DK_ERROR_INVALID_ARGUMENT": INVALID_ARGUMENT, "DK_ERROR_OUT_OF_RANGE": 6}
GUARD = 256  # bytes of canary on each side of every output (a multiple of any alignment)
CANARY = 0xA5


def op_id(op):
    global OP_IDS
    if OP_IDS is None:
        from devicekit.conformance.registry import spec
        OP_IDS = {o["name"]: i for i, o in enumerate(spec()["ops"])}
    return OP_IDS[op]


class _Value(ctypes.Union):
    _fields_ = [("f", ctypes.c_double), ("i", ctypes.c_int64)]


class Scalar(ctypes.Structure):
    _fields_ = [("dtype", ctypes.c_int32), ("value", _Value)]


def scalar(v):
    if isinstance(v, (bool, np.bool_)):
        return Scalar(DTYPE_IDS["bool"], _Value(i=int(v)))
    if isinstance(v, (int, np.integer)):
        return Scalar(DTYPE_IDS["int64"], _Value(i=int(v)))
    return Scalar(DTYPE_IDS["float64"], _Value(f=float(v)))


def _struct(name, fields):
    return type(name, (ctypes.Structure,), {"_fields_": [("struct_size", ctypes.c_size_t)] + fields})


ATTRS = {
    "DK_FillAttrs": _struct("DK_FillAttrs", [("value", Scalar)]),
    "DK_ReduceAttrs": _struct("DK_ReduceAttrs", [("axes", ctypes.c_uint32)]),
    "DK_AxisAttrs": _struct("DK_AxisAttrs", [("axis", ctypes.c_int32)]),
    "DK_IotaAttrs": _struct("DK_IotaAttrs", [("axis", ctypes.c_int32), ("start", Scalar),
                                             ("step", Scalar)]),
    "DK_RandomAttrs": _struct("DK_RandomAttrs", [("seed", ctypes.c_uint64),
                                                 ("offset", ctypes.c_uint64)]),
}


def attrs(type_name, struct_size=None, **fields):
    """Bytes of attribute struct ``type_name``; struct_size is the offset+size of
    its last field (the header's DK_DEFINE_STRUCT_SIZE) unless given."""
    cls = ATTRS[type_name]
    last = cls._fields_[-1][0]
    size = getattr(cls, last).offset + getattr(cls, last).size
    s = cls(struct_size=size if struct_size is None else struct_size, **fields)
    return bytes(s)


def _strides(shape):
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return list(reversed(out))


MAX_RANK = 8  # DK_MAX_RANK


def contiguous(shape, strides):
    """DK_TensorView's rule (plugin_helpers.h's dkh_is_contiguous): no element,
    or dense row-major where size-1 dims may have any stride."""
    if any(d == 0 for d in shape):
        return True
    expected = 1
    for d, s in zip(reversed(shape), reversed(strides)):
        if d != 1 and s != expected:
            return False
        expected *= d
    return True


class Operand:
    """One device allocation holding a dense array, inside guard bands when ``guard``.

    ``lead`` / ``tail``: bytes of the allocation before and after the array
    (default: GUARD with ``guard``, else 0). A negative ``tail`` makes the
    allocation end before the array does (its last bytes are not stored): a
    view that runs past its allocation, for the memory-bound rules."""

    def __init__(self, device, arr, dtype, guard, lead=None, tail=None):
        self.dtype, self.shape = dtype, tuple(arr.shape)
        self.arr = np.ascontiguousarray(arr)
        self.nbytes = self.arr.nbytes
        self.guard = (GUARD if guard else 0) if lead is None else lead
        self.tail = (GUARD if guard else 0) if tail is None else tail
        size = self.guard + self.nbytes + self.tail
        self.buf = device.alloc(size)
        host = np.full(self.guard + self.nbytes + max(self.tail, 0), CANARY, np.uint8)
        host[self.guard:self.guard + self.nbytes] = self.arr.reshape(-1).view(np.uint8)
        device.copy_h2d(self.buf, host[:size])
        self.device = device

    def view(self, shape=None, strides=None, dtype=None):
        shape = list(self.shape if shape is None else shape)
        return (self.buf.ptr + self.guard, DTYPE_IDS[dtype or self.dtype], shape,
                _strides(shape) if strides is None else list(strides))

    def fetch(self):
        """(array, guard bands intact?)"""
        host = np.empty(self.guard + self.nbytes + self.tail, np.uint8)
        self.device.copy_d2h(host, self.buf)
        body = host[self.guard:self.guard + self.nbytes].copy()
        arr = body.view(O.np_dtype(self.dtype)).reshape(self.shape)
        bands = np.concatenate([host[:self.guard], host[self.guard + self.nbytes:]])
        return arr, bool((bands == CANARY).all())

    def free(self):
        self.buf.free()


def operand(device, arr, dtype, guard=False, lead=None, tail=None):
    return Operand(device, arr, dtype, guard, lead, tail)


def output(device, shape, dtype):
    """An output pre-filled with canary bytes (so a kernel that writes nothing is seen)."""
    arr = np.full(int(np.prod(shape, dtype=np.int64)) * O.np_dtype(dtype).itemsize, CANARY,
                  np.uint8).view(O.np_dtype(dtype)).reshape(shape)
    return Operand(device, arr, dtype, guard=True)


def call(device, op, inputs, outputs, attr_bytes=None, **malformed):
    """Calls ``op``'s kernel with the views ``inputs``/``outputs`` (tuples from
    Operand.view). ``malformed``: op_field / args_struct_size overrides of
    DK_Kernel_Args. Returns (launch code, launch message, sync code, sync message)."""
    return _core.raw_kernel_call(device, op_id(op), inputs, outputs, attr_bytes, **malformed)


def supports_malformed_args():
    return "op_field" in (_core.raw_kernel_call.__doc__ or "")


def supports_malformed_views():
    """device_field, stream_null, null_view and view_struct_size (DeviceKit 0.4)."""
    return "stream_null" in (_core.raw_kernel_call.__doc__ or "")


def available():
    return hasattr(_core, "raw_kernel_call")


__all__ = ["call", "operand", "output", "attrs", "scalar", "op_id", "available", "dk",
           "INVALID_ARGUMENT"]
