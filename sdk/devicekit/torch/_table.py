"""The bridge's one table: ATen overload -> DeviceKit lowering, and the
wrap/unwrap helpers every lowering shares. A leaf of the bridge (of the
bridge's modules it imports only ``_device``): the lowering modules fill the
table through ``lowers`` and ``derives``, ``_dispatch`` reads it, and nothing
here imports back.
"""

import torch

from .. import bridge
from ._device import DKTensor, wrap

aten = torch.ops.aten

VIEW, KERNEL, COMPOSITE, FACTORY, RANDOM, TRANSFER = (
    "view", "kernel", "composite", "factory", "random", "transfer")


class Lowering:
    __slots__ = ("fn", "kind", "raw")

    def __init__(self, fn, kind, raw):
        self.fn, self.kind, self.raw = fn, kind, raw


LOWERINGS = {}  # OpOverload -> Lowering: the one table
_ABSENT = []    # names a lowering module gave that this torch release does not have


def resolve(name):
    """``"add.Tensor"`` -> ``torch.ops.aten.add.Tensor`` (None if this torch lacks it)."""
    packet, _, overload = name.partition(".")
    try:
        return getattr(getattr(aten, packet), overload or "default")
    except AttributeError:
        return None


def lowers(*names, kind=KERNEL, raw=False):
    """Registers the decorated function as the lowering of the ATen overloads
    ``names``. It gets the call's arguments with every DKTensor replaced by its
    DeviceKit tensor (``raw=True``: the arguments as they are) and returns
    DeviceKit tensors (wrapped for torch here) or plain values."""
    def deco(fn):
        for name in names:
            op = resolve(name)
            if op is None:
                _ABSENT.append(name)
                continue
            if op in LOWERINGS:
                raise RuntimeError(f"aten.{name} is lowered twice")
            LOWERINGS[op] = Lowering(fn, kind, raw)
        return fn
    return deco


DERIVERS = {}  # "in_place" / "foreach" -> the function _dispatch derives such ops with


def derives(what):
    """Registers the decorated function as the way ``_dispatch`` derives a
    family of overloads no lowering names: ``"in_place"`` (``add_`` from
    ``add``: the function gets the functional lowering, args and kwargs) and
    ``"foreach"`` (``_foreach_add`` and kin: it gets the overload, args and
    kwargs)."""
    def deco(fn):
        DERIVERS[what] = fn
        return fn
    return deco


# ---- unwrap / wrap -----------------------------------------------------------------

class HostOperandError(RuntimeError):
    """A CPU tensor (not 0-d) among a dk op's operands: torch's "expected all
    tensors on the same device", except where torch accepts it (the index
    tensors of ``x[i]`` and ``x[i] = v``, which ``_dispatch`` then copies over)."""


def unwrap(x):
    t = type(x)
    if t is DKTensor:
        return x._dk
    if t is list or t is tuple:
        return t([unwrap(v) for v in x]) if x else x
    if t in (int, float, bool, str) or x is None:
        return x
    if isinstance(x, DKTensor):
        return x._dk
    if isinstance(x, torch.Tensor):
        if x.dim() == 0 and x.device.type == "cpu":
            return x.item()  # a CPU 0-d tensor is a scalar operand, as torch allows
        raise HostOperandError(f"expected all tensors on the same device, got a {x.device} tensor "
                           f"of shape {list(x.shape)} beside dk tensors")
    return x


def unwrap_kwargs(kwargs):
    return {k: unwrap(v) for k, v in kwargs.items()} if kwargs else kwargs


def rewrap(x):
    t = type(x)
    if t is bridge.Tensor:
        return wrap(x)
    if t is list or t is tuple:
        return t([rewrap(v) for v in x])
    return x
