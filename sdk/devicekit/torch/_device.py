"""The torch device ``dk``: device indices, dtypes, the tensor class, RNG state.

``dk:N`` is ``devicekit.devices()[N]`` (the order of the first call in this
process). A ``DKTensor`` is a torch wrapper tensor
(``torch.Tensor._make_wrapper_subclass``) whose sizes, strides and storage
offset are those of the DeviceKit tensor it holds in ``_dk``: torch sees the
metadata, DeviceKit owns the memory, and a view made on either side is a view
of the same DeviceKit storage. Every ATen call on a DKTensor reaches
``DKTensor.__torch_dispatch__`` (below autograd, so torch's autograd records
and differentiates as for any device) and goes to ``_dispatch.dispatch`` (hooked in by the package).

The registration (``install``) uses torch's out-of-tree backend slot,
PrivateUse1, renamed to ``dk``; see ``docs/torch.md`` for which of these torch
APIs are public and which are experimental.
"""

import collections
import math
import os
import threading
import weakref

import numpy as np
import torch

from .. import bridge
from .. import dtypes as _dt
from .. import devices as _dk_devices
from ..errors import DeviceNotFoundError, DTypeError, InputOverflowError, InvalidArgumentError

BACKEND = "dk"

# torch dtype <-> DeviceKit dtype: the dtypes both have.
_TO_DK = {
    torch.float32: _dt.float32, torch.float16: _dt.float16, torch.bfloat16: _dt.bfloat16,
    torch.float64: _dt.float64, torch.int8: _dt.int8, torch.int32: _dt.int32,
    torch.int64: _dt.int64, torch.uint8: _dt.uint8, torch.bool: _dt.bool_,
}
_TO_TORCH = {d.id: t for t, d in _TO_DK.items()}


def dk_dtype(dtype):
    """The DeviceKit dtype of a torch dtype (DTypeError naming both sides when
    DeviceKit has none)."""
    try:
        return _TO_DK[dtype]
    except KeyError:
        raise DTypeError(f"torch dtype {dtype} has no DeviceKit dtype (DeviceKit has: "
                         f"{', '.join(str(t).replace('torch.', '') for t in _TO_DK)})") from None


def torch_dtype(t):
    """The torch dtype of a DeviceKit tensor."""
    return _TO_TORCH[bridge.dtype_id(t)]


# ---- devices -----------------------------------------------------------------

_lock = threading.Lock()
_devices = None  # the DeviceKit devices, in dk:N order, fixed at first use

#: DeviceKit device names (comma-separated) numbered first, dk:0 onwards; the
#: others follow in devicekit.devices() order. Read once, when the devices are
#: first numbered in a process (its children inherit it).
ORDER_ENV = "DEVICEKIT_TORCH_DEVICES"


def _all():
    global _devices
    with _lock:
        if _devices is None:
            devs = list(_dk_devices())
            names = [n.strip() for n in os.environ.get(ORDER_ENV, "").split(",") if n.strip()]
            front = [d for n in names for d in devs if d.name == n]
            _devices = front + [d for d in devs if all(d is not f for f in front)]
        return _devices


def prefer(name):
    """Makes the DeviceKit device ``name`` ``dk:0`` when nothing in this process
    has numbered the devices yet, and returns its torch device (whatever its
    index). Why it matters: torch's Python device guard, which this backend
    registers, reports one device (``deviceCount()`` is 1 in
    torch/csrc/acc/Module.cpp), so torch's autograd engine keeps a ready queue
    for ``dk:0`` only and a backward on ``dk:1`` stops in an INTERNAL ASSERT.
    The conformance section and the hf models call this for the device under
    test; a script does the same, or sets DEVICEKIT_TORCH_DEVICES."""
    with _lock:
        if _devices is None:
            os.environ[ORDER_ENV] = name
    return device(name)


def dk_device(device):
    """The DeviceKit device of a torch device ``dk:N`` (or of N)."""
    if isinstance(device, str):
        device = torch.device(device)
    index = device if isinstance(device, int) else device.index
    if not isinstance(device, int) and device.type != BACKEND:
        raise DeviceNotFoundError(f"{device} is not a DeviceKit torch device (expected '{BACKEND}:N')")
    devs = _all()
    index = 0 if index is None else index
    if not 0 <= index < len(devs):
        raise DeviceNotFoundError(
            f"torch device '{BACKEND}:{index}' does not exist: DeviceKit has {len(devs)} device(s) "
            f"({', '.join(d.name for d in devs) or 'none'}); see 'devicekit devices'")
    return devs[index]


def device(name):
    """The torch device for a DeviceKit device name: ``device("cpu:0")`` ->
    ``torch.device("dk:0")``. Several plugins share torch's one out-of-tree
    device type this way: each DeviceKit device is one index of ``dk``."""
    devs = _all()
    for i, d in enumerate(devs):
        if d.name == name:
            return torch.device(BACKEND, i)
    raise DeviceNotFoundError(f"no DeviceKit device named {name!r} (have: "
                              f"{', '.join(d.name for d in devs) or 'none'}); see 'devicekit devices'")


_torch_devices = {}  # DeviceKit device name -> torch.device (wrap runs on every op)
_torch_devices_by_obj = {}  # DeviceKit device object -> torch.device: wrap's cache


def torch_device_of(dev):
    """``torch.device('dk', N)`` of a DeviceKit device."""
    hit = _torch_devices.get(dev.name)
    if hit is not None:
        return hit
    for i, d in enumerate(_all()):
        if d is dev or d.name == dev.name:
            _torch_devices[dev.name] = torch.device(BACKEND, i)
            return _torch_devices[dev.name]
    raise DeviceNotFoundError(f"DeviceKit device {dev.name} was not among devicekit.devices() when "
                              f"devicekit.torch numbered them")


# ---- the tensor --------------------------------------------------------------

# Where DKTensor hands every ATen call: ``_dispatch.dispatch``, which sits
# above this module (it lowers through the table the lowering modules fill),
# so the package's ``__init__`` hooks it in (``hook_dispatch``).
_dispatch = None


def hook_dispatch(fn):
    global _dispatch
    _dispatch = fn


class _Held:
    """The DeviceKit tensor in ``DKTensor.__tensor_flatten__``'s context:
    copied by reference and equal to any other (Dynamo deep-copies and
    compares the context to guard a compiled graph)."""

    __slots__ = ("tensor",)

    def __init__(self, tensor):
        self.tensor = tensor

    def __deepcopy__(self, memo):
        return self

    def __eq__(self, other):
        return isinstance(other, _Held)

    __hash__ = object.__hash__


class _outside_backward:
    """A method that does not exist (AttributeError) while torch's autograd
    engine runs a backward node: see ``DKTensor.__tensor_flatten__``."""

    def __init__(self, fn):
        self.fn = fn

    def __get__(self, obj, cls=None):
        if torch._C._current_autograd_node() is not None:
            raise AttributeError(self.fn.__name__)
        return self.fn.__get__(obj, cls)


class DKTensor(torch.Tensor):
    """A torch tensor on ``dk:N`` whose data is the DeviceKit tensor ``_dk``.

    Views share ``_dk``'s storage; ``repr`` shows the values read back to the
    host, as torch prints any device's tensor."""

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return _dispatch(func, args, kwargs or {})

    # A "traceable wrapper subclass" to torch (it has these two), so that
    # Module.to("dk:0") swaps each parameter's contents in place
    # (torch.utils.swap_tensors) instead of making new Parameters: parameters
    # shared by two modules (tied embeddings) stay one object, as on CUDA.
    # No inner torch tensors: the data is the DeviceKit tensor in the context.
    #
    # torch.compile (backend "devicekit", ``_compile``) sees a dk tensor as a
    # plain tensor on device dk: fakified (under a fake mode), it becomes a
    # plain FakeTensor on dk, so Dynamo and AOTAutograd trace ATen ops on dk
    # and the compiled graph gets the DKTensors themselves at run time. Inside
    # a backward pass the protocol is hidden (``_outside_backward``), so that
    # AOTAutograd takes a dk gradient for the plain tensor it traced.
    @_outside_backward
    def __tensor_flatten__(self):
        return [], (_Held(self._dk),)

    @staticmethod
    def __tensor_unflatten__(inner_tensors, ctx, outer_size, outer_stride):
        t = ctx[0].tensor
        fake_mode = torch._guards.detect_fake_mode()
        if fake_mode is not None:
            with fake_mode:
                return torch.empty_strided(outer_size, outer_stride, dtype=torch_dtype(t),
                                           device=torch_device_of(t.device))
        return wrap(t)

    @classmethod
    def __metadata_guard__(cls, orig, other):
        # Dynamo guards sizes, strides, dtype and device itself; which
        # DeviceKit tensor holds the data is no reason to recompile.
        return True

    def __coerce_same_metadata_as_tangent__(self, expected_metadata, expected_type=None):
        return self  # the plain dk tensor the compiled backward was traced with

    def untyped_storage(self):
        """The tensor's storage as torch code outside ATen uses it (FSDP2 sizes
        and resizes the storage of its all-gather buffers): see ``DKStorage``."""
        return DKStorage(self)

    def _typed_storage(self):  # what Tensor.storage() and is_shared() wrap: torch's own
        return torch.TypedStorage(wrap_storage=torch.Tensor.untyped_storage(self),
                                  dtype=self.dtype, _internal=True)

    def __reduce_ex__(self, proto):
        # Pickled (torch.save) as torch pickles any storage-less device tensor:
        # its values on the CPU, rebuilt with .to("dk:N") on load. The Python
        # state (the DeviceKit tensor in _dk) is not pickled; the rebuild
        # makes a new one. A parameter is rebuilt as a parameter.
        if getattr(self, "_is_param", False):
            return (torch._utils._rebuild_parameter,
                    (self.detach(), self.requires_grad, collections.OrderedDict()))
        return (torch._utils._rebuild_device_tensor_from_cpu_tensor,
                (to_host(self._dk), self.dtype, str(self.device), self.requires_grad))

    def __repr__(self, *, tensor_contents=None):
        host = self.detach().to("cpu")
        text = repr(host)
        # torch's suffix order: device, dtype, then grad_fn / requires_grad
        body, suffix = text[:-1], ""
        if ", dtype=" in body:
            body, dtype_part = body.split(", dtype=", 1)
            suffix = ", dtype=" + dtype_part
        out = f"{body}, device='{self.device}'{suffix}"
        if self.grad_fn is not None:
            out += f", grad_fn=<{type(self.grad_fn).__name__}>"
        elif self.requires_grad:
            out += ", requires_grad=True"
        out += ")"
        return "Parameter containing:\n" + out if getattr(self, "_is_param", False) else out


# storage id -> the byte size ``DKStorage.resize_`` set (absent: the full size)
_resized = {}


class DKStorage:
    """``untyped_storage()`` of a dk tensor. torch's own storage object for a
    wrapper tensor holds no data (its ``resize_`` and ``data_ptr`` raise); the
    memory is the DeviceKit storage of ``_dk``, shared by every view.

    ``size``/``nbytes``: the byte size torch's metadata gives the storage, or
    the size a ``resize_`` set. ``resize_(n)`` records n for every view of the
    storage, for n up to that size; it does NOT release or reallocate device
    memory (DeviceKit's core has no storage resize), so FSDP2's
    ``resize_(0)``/``resize_(n)`` cycle keeps the unsharded parameters
    allocated: correct, without FSDP2's memory saving. Growing past the size
    raises. ``data_ptr``: an identity of the DeviceKit storage (equal for views
    of one storage, never dereferenced). Anything else is torch's storage
    object's."""

    def __init__(self, tensor):
        self._tensor = tensor
        self._torch = torch.Tensor.untyped_storage(tensor)

    def _full(self):
        return self._torch.nbytes()

    def size(self):
        return _resized.get(self._tensor._dk._storage_id, self._full())

    nbytes = size

    def __len__(self):
        return self.size()

    def resize_(self, size):
        dk = self._tensor._dk
        sid = dk._storage_id
        size = int(size)
        if not 0 <= size <= self._full():
            raise InvalidArgumentError(
                f"devicekit.torch: untyped_storage().resize_({size}) on {self._tensor.device}: "
                f"a DeviceKit storage cannot grow past its {self._full()} bytes")
        if size == self._full():
            _resized.pop(sid, None)
        else:
            if sid not in _resized:
                weakref.finalize(dk, _resized.pop, sid, None)
            _resized[sid] = size
        return self

    def data_ptr(self):
        return self._tensor._dk._storage_id

    @property
    def device(self):
        return self._tensor.device

    def __getattr__(self, name):
        return getattr(self._torch, name)


def wrap(t, requires_grad=False):
    """A DKTensor over the DeviceKit tensor ``t``."""
    dev = t.device
    tdev = _torch_devices_by_obj.get(dev)  # (runs on every op: one dict hit, no name read)
    if tdev is None:
        tdev = _torch_devices_by_obj[dev] = torch_device_of(dev)
    out = torch.Tensor._make_wrapper_subclass(
        DKTensor, t.shape, strides=t.strides, storage_offset=bridge.storage_offset(t),
        dtype=_TO_TORCH[bridge.dtype_id(t)], device=tdev, requires_grad=requires_grad)
    out._dk = t
    return out


# ---- host transfers ------------------------------------------------------------

def to_host(t):
    """A CPU torch tensor holding the values of DeviceKit tensor ``t``."""
    arr = t.numpy()
    if bridge.dtype_id(t) == _dt.bfloat16.id:  # numpy has no bfloat16: move the bits
        return torch.from_numpy(arr.view(np.uint16).copy()).view(torch.bfloat16)
    # (np.ascontiguousarray makes a 0-d array 1-d: keep the shape)
    return torch.from_numpy(np.ascontiguousarray(arr).reshape(arr.shape))


def from_host(x, dev):
    """A DeviceKit tensor on ``dev`` with the values of CPU torch tensor ``x``."""
    dt = dk_dtype(x.dtype)
    x = x.detach().contiguous()
    if x.dtype == torch.bfloat16:
        arr = x.view(torch.uint16).numpy().view(_dt.bfloat16.numpy)
    else:
        arr = x.numpy()
    return bridge.from_host(dev, dt.id, arr.reshape(x.shape).view(
        {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[arr.dtype.itemsize]))


# ---- random numbers: one Philox stream per device --------------------------------

class _Rng:
    """(seed, offset) of a device's Philox stream. Each random op takes the
    next counters: ``ceil(n / 4)`` for n uniforms (one Philox block gives four
    32-bit words), twice that for n normals (Box-Muller)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.seed, self.offset = torch.initial_seed() % 2**64, 0

    def take(self, n_words):
        with self.lock:
            seed, offset = self.seed, self.offset
            self.offset += max(1, math.ceil(n_words / 4))
            return seed, offset

    # A device graph draws as CUDA graphs do: the capture consumes nothing
    # (its ops took counters from ``origin``; they are given back), and each
    # replay takes the capture's whole consumption at once, one host step.
    def captured(self, origin):
        """End of a capture begun at offset ``origin``: the counters it used,
        given back to the stream."""
        with self.lock:
            used, self.offset = self.offset - origin, origin
            return used

    def replay_patch(self, origin, used):
        """(seed, offset_shift) for ``Graph.replay`` of a capture begun at
        ``origin`` that used ``used`` counters, advancing the stream by them:
        the replay draws what an eager run from the stream's state would."""
        with self.lock:
            base = self.offset
            if base + used > 2**64:
                raise InputOverflowError(f"the Philox offset {base} + {used} of a graph replay is "
                                    f"outside [0, 2**64); reseed with torch.manual_seed")
            self.offset += used
            return self.seed, (base - origin) % 2**64


_rngs = {}


def rng(dev):
    with _lock:
        return _rngs.setdefault(dev.name, _Rng())


class Event:
    """``torch.dk.Event``. DeviceKit runs a device's ops on one stream, in the
    order they are issued, so an event recorded on any dk stream is passed by
    every op issued after it: ``wait`` has nothing to order, ``query`` is true,
    and ``synchronize`` waits for the device (host-side waits need it)."""

    def __init__(self, enable_timing=False, blocking=False, interprocess=False):
        self.device = None

    def record(self, stream=None):
        self.device = (stream or Stream.current()).device

    def wait(self, stream=None):
        pass

    def query(self):
        return True

    def synchronize(self):
        if self.device is not None:
            dk_device(self.device).synchronize()


class Stream:
    """``torch.dk.Stream``: a name for the device's one DeviceKit stream
    (see ``Event``). Stream-ordered code written for CUDA (FSDP2's all-gather
    and reduce-scatter streams) runs correctly on it, without overlap."""

    _current = None

    def __init__(self, device=None, priority=0):
        self.device = torch.device(BACKEND, 0) if device is None else torch.device(device)

    @classmethod
    def current(cls, device=None):
        if cls._current is None:
            cls._current = cls(device)
        return cls._current

    def wait_stream(self, stream):
        pass

    def wait_event(self, event):
        pass

    def record_event(self, event=None):
        event = event or Event()
        event.record(self)
        return event

    def query(self):
        return True

    def synchronize(self):
        dk_device(self.device).synchronize()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class BackendModule:
    """``torch.dk``: what torch asks of an out-of-tree device's Python module
    (device count, seeding: ``torch.manual_seed`` calls ``manual_seed_all``;
    streams and events, which FSDP2 uses: ``Stream``, ``Event``)."""

    Stream, Event = Stream, Event

    @staticmethod
    def current_stream(device=None):
        return Stream.current(device)

    @staticmethod
    def stream(stream):
        return stream if stream is not None else Stream.current()

    @staticmethod
    def synchronize(device=None):
        dk_device(device if device is not None else 0).synchronize()

    @staticmethod
    def is_available():
        return bool(_all())

    @staticmethod
    def is_initialized():
        return True

    @staticmethod
    def device_count():
        return len(_all())

    @staticmethod
    def current_device():
        return 0

    @staticmethod
    def _is_in_bad_fork():
        return False

    @staticmethod
    def manual_seed_all(seed):
        for d in _all():
            BackendModule.manual_seed(seed, d)

    @staticmethod
    def manual_seed(seed, device=None):
        dev = _all()[0] if device is None else (
            device if isinstance(device, bridge.Device) else dk_device(device))
        r = rng(dev)
        with r.lock:
            r.seed, r.offset = int(seed) % 2**64, 0

    @staticmethod
    def get_rng_state(device="dk"):
        """The device's (seed, offset) as 16 bytes in a CPU uint8 tensor."""
        r = rng(dk_device(device))
        with r.lock:
            words = np.array([r.seed, r.offset], dtype=np.uint64)
        return torch.from_numpy(words.view(np.uint8).copy())

    @staticmethod
    def set_rng_state(state, device="dk"):
        words = state.detach().cpu().numpy().astype(np.uint8).view(np.uint64)
        r = rng(dk_device(device))
        with r.lock:
            r.seed, r.offset = int(words[0]), int(words[1])


_installed = False


def install():
    """Registers ``dk`` with torch, once per process."""
    global _installed
    if _installed:
        return
    name = torch._C._get_privateuse1_backend_name()
    if name not in ("privateuseone", BACKEND):
        raise RuntimeError(f"devicekit.torch: torch's out-of-tree device slot is already taken by "
                           f"'{name}' in this process; one process can hold one such backend")
    if name != BACKEND:
        # Renames PrivateUse1 to "dk", adds Tensor.dk()/Module.dk(), registers
        # torch.dk (BackendModule) and torch's Python device guard and hooks.
        from torch.utils.backend_registration import _setup_privateuseone_for_python_backend
        _setup_privateuseone_for_python_backend(rename=BACKEND, backend_module=BackendModule())
    _foreach_by_default()
    _installed = True


def _foreach_by_default():
    """torch.optim runs an optimizer's ``foreach`` path (one ``_foreach_*``
    call per list of tensors instead of one call per tensor) by default where
    every parameter's type is in its ``_foreach_supported_types`` and its
    device supports foreach kernels, as dk does (torch names the
    PrivateUse1 backend among them). A dk parameter is a DKTensor, which that
    list does not name: without this, every optimizer on dk took the
    per-parameter path unless asked for ``foreach=True``, unlike on CUDA. The
    list is torch's, not public API: where this torch has none, the default
    stays per parameter."""
    import torch.optim.optimizer as optimizer
    types = getattr(optimizer, "_foreach_supported_types", None)
    if isinstance(types, list) and DKTensor not in types:
        types.append(DKTensor)

