"""The opt-in CPU fallback for ATen ops DeviceKit does not lower.

Off by default: an unlowered op raises ``UnloweredOpError``. With
``devicekit.torch.fallback("cpu")`` such an op runs on the CPU: its dk
operands are copied to the host, torch's CPU kernel runs, and its results are
copied to the op's device. Each call is counted per op, with the bytes copied
each way (``fallback_stats()``). Four kinds are refused even then, because
the copy would break what they promise:

- views: the result must alias its base's device memory;
- in-place and ``out=`` ops: the write must land in device memory that views share;
- factories: nothing to copy back from; they must allocate on the device;
- random ops: the device's Philox stream is the one ``torch.manual_seed`` seeds.
"""

import contextlib
import threading

import torch

from .. import _graph_state
from ..errors import InvalidArgumentError
from . import _device
from ._device import DKTensor, from_host, to_host, wrap

_lock = threading.Lock()
_policy = None
_stats = {}  # op name -> {"calls", "bytes_to_host", "bytes_to_device"}

POLICIES = ("cpu",)


def policy():
    return _policy


class _Restore(contextlib.AbstractContextManager):
    def __init__(self, previous):
        self.previous = previous

    def __exit__(self, *exc):
        global _policy
        _policy = self.previous
        return False


def fallback(where="cpu"):
    """Turn the CPU fallback on (``"cpu"``) or off (``None``) for the process.
    Returns a context manager that restores the previous setting on exit::

        with devicekit.torch.fallback("cpu"):
            model(x)                         # unlowered ops run on the CPU, counted
        devicekit.torch.fallback_stats()     # {"aten.foo.default": {"calls": 3, ...}}
    """
    global _policy
    if where not in (None, *POLICIES):
        raise ValueError(f"fallback({where!r}): the policies are {POLICIES} and None (off)")
    previous, _policy = _policy, where
    return _Restore(previous)


def fallback_stats():
    """Per ATen op run on the CPU: ``calls``, ``bytes_to_host``, ``bytes_to_device``."""
    with _lock:
        return {op: dict(s) for op, s in _stats.items()}


def reset_fallback_stats():
    with _lock:
        _stats.clear()


def _has_dk(args):
    return any(isinstance(a, DKTensor) or (isinstance(a, (list, tuple)) and _has_dk(a))
               for a in args)


def refusal(func, args, kwargs):
    """Why ``func`` may not fall back (None: it may)."""
    schema = func._schema
    if getattr(func, "is_view", False) or any(
            r.alias_info is not None and not r.alias_info.is_write for r in schema.returns):
        return "it is a view (its result must alias device memory)"
    if schema.is_mutable or any(a.alias_info is not None and a.alias_info.is_write
                                for a in schema.arguments):
        return "it writes in place or into out= (the write must land in device memory)"
    if torch.Tag.nondeterministic_seeded in func.tags:
        return "it draws random numbers (they must come from the device's Philox stream)"
    if not _has_dk(args) and not _has_dk(tuple(kwargs.values())):
        return "it is a factory (it must allocate on the device)"
    return None


def _refuse_in_capture(func, args, kwargs):
    """A device capturing a graph records device work only: the fallback's
    copies to and from the host cannot be recorded."""
    if not _graph_state.capturing:
        return
    for a in (*args, *kwargs.values()):
        for t in (a if isinstance(a, (list, tuple)) else (a,)):
            if isinstance(t, DKTensor) and t._dk.device.name in _graph_state.capturing:
                raise InvalidArgumentError(
                    f"devicekit.torch: {func} would run on the CPU fallback (fallback('cpu') is "
                    f"on and DeviceKit lowers no such op), which copies its operands to the "
                    f"host, but {t.device} (DeviceKit {t._dk.device.name}) is capturing a graph, "
                    f"which records device work only")


def run(func, args, kwargs):
    """``func`` on the CPU, its dk operands copied there and its results back."""
    moved = [0, 0]
    device = [None]

    def down(x):
        if isinstance(x, DKTensor):
            device[0] = device[0] or x._dk.device
            host = to_host(x._dk)
            moved[0] += host.numel() * host.element_size()
            return host
        if isinstance(x, (list, tuple)):
            return type(x)(down(v) for v in x)
        if isinstance(x, dict):  # kwargs
            return {k: down(v) for k, v in x.items()}
        if isinstance(x, torch.device) and x.type == _device.BACKEND:
            return torch.device("cpu")
        return x

    def up(x):
        if isinstance(x, torch.Tensor) and x.device.type == "cpu":  # (x.to("meta") stays meta)
            moved[1] += x.numel() * x.element_size()
            return wrap(from_host(x, device[0]))
        if isinstance(x, (list, tuple)):
            return type(x)(up(v) for v in x)
        return x

    _refuse_in_capture(func, args, kwargs)
    out = func(*down(args), **down(kwargs))
    out = up(out)
    name = str(func)
    with _lock:
        s = _stats.setdefault(name, {"calls": 0, "bytes_to_host": 0, "bytes_to_device": 0})
        s["calls"] += 1
        s["bytes_to_host"] += moved[0]
        s["bytes_to_device"] += moved[1]
    return out
