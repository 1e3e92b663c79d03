"""A small parameter container: ``Parameter``, ``Module`` and ``ParameterDict``.

As in PyTorch, a ``Module`` registers the parameters and sub-modules assigned
to its attributes, and ``parameters()``/``named_parameters()`` walk them
(each parameter once, so tied weights are not updated twice). What differs:
DeviceKit tensors have no in-place ops, so an optimizer cannot write new
values into a parameter's storage. A parameter therefore remembers the
modules that hold it (``_dk_owners``) and :meth:`Module._replace` swaps in
the updated tensor everywhere it is held; ``devicekit.optim`` does that in
``step()``. A tensor held only in a plain list cannot be updated this way and
optimizers refuse it with an error saying so.

A parameter remembers its modules by weak reference (``weakref.ref``): the
module holds the parameter, so a strong reference back would be a cycle,
and a dropped model would keep its device memory until Python's cyclic
garbage collector happened to run (a device running out of memory does not
make it run). With weak references ``del model`` frees the parameters at
once, by reference counting; :func:`owners` skips the modules that are gone
(an optimizer still updates such a parameter in its own ``params``).
"""

import weakref
from collections import OrderedDict

from ..errors import InvalidArgumentError
from ..tensor import Tensor, tensor


def Parameter(data, requires_grad=True):
    """A leaf tensor with ``data``'s values that a ``Module`` registers when it
    is assigned to one of its attributes (``torch.nn.Parameter``). ``data`` is
    a Tensor (copied into a new leaf, not tracked through) or anything
    ``devicekit.tensor`` accepts."""
    t = data.detach() if isinstance(data, Tensor) else tensor(data)
    if requires_grad:
        t.requires_grad = True  # validates the dtype (only floats can)
    t._dk_owners = []  # (weakref.ref(module), attribute name) per holder
    return t


def is_parameter(t):
    return isinstance(t, Tensor) and hasattr(t, "_dk_owners")


def owners(p):
    """The (module, name) pairs of the modules that hold parameter ``p`` and
    still exist."""
    return [(m, name) for m, name in ((ref(), name) for ref, name in p._dk_owners)
            if m is not None]


class Module:
    """Base of parameter containers: assign ``Parameter``s and ``Module``s to
    attributes, implement ``forward``, call the module. Kept small: no hooks,
    no buffers, no ``state_dict``."""

    def __init__(self):
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "training", True)

    def __setattr__(self, name, value):
        if "_parameters" not in self.__dict__:
            raise InvalidArgumentError(f"{type(self).__name__}: call super().__init__() before "
                                       f"assigning attributes (here {name!r})")
        old = self._parameters.get(name)
        if old is not None:  # no longer held here: an optimizer must not put it back
            old._dk_owners[:] = [(r, n) for r, n in old._dk_owners
                                 if not (r() is self and n == name)]
        self._modules.pop(name, None)
        if is_parameter(value):
            self._register(name, value)  # keeps the name's place, as PyTorch
        else:
            self._parameters.pop(name, None)
            if isinstance(value, Module):
                self._modules[name] = value
        object.__setattr__(self, name, value)

    def _register(self, name, p):
        self._parameters[name] = p
        if not any(m is self and n == name for m, n in owners(p)):
            # The entries of modules that no longer exist go here, so that a
            # parameter put in many short-lived modules does not collect them;
            # in place: an optimizer's update shares the list.
            p._dk_owners[:] = [(r, n) for r, n in p._dk_owners if r() is not None]
            p._dk_owners.append((weakref.ref(self), name))

    def _replace(self, name, new):
        """Puts ``new`` where parameter ``name`` was (an optimizer's update)."""
        self._parameters[name] = new
        object.__setattr__(self, name, new)

    def named_parameters(self, prefix=""):
        """(dotted name, parameter) pairs, each parameter once."""
        seen = set()
        for name, p in self._walk(prefix):
            if id(p) not in seen:
                seen.add(id(p))
                yield name, p

    def _walk(self, prefix):
        for name, p in self._parameters.items():
            yield prefix + name, p
        for name, m in self._modules.items():
            yield from m._walk(f"{prefix}{name}.")

    def parameters(self):
        return [p for _, p in self.named_parameters()]

    def children(self):
        return list(self._modules.values())

    def zero_grad(self):
        """Sets every parameter's ``.grad`` to None."""
        for p in self.parameters():
            p.grad = None

    def train(self, mode=True):
        object.__setattr__(self, "training", bool(mode))
        for m in self._modules.values():
            m.train(mode)
        return self

    def eval(self):
        return self.train(False)

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} does not implement forward()")

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def __repr__(self):
        n = sum(p.numel() for p in self.parameters())
        return f"{type(self).__name__}({len(self.parameters())} parameters, {n} values)"


class ParameterDict(Module):
    """Parameters under string keys (dots allowed, e.g. ``"block0.attn.wq"``),
    like ``torch.nn.ParameterDict``; a value that is not yet a Parameter is
    wrapped into one."""

    def __init__(self, parameters=None):
        super().__init__()
        for k, v in (parameters or {}).items():
            self[k] = v

    def __setitem__(self, key, value):
        if not isinstance(key, str):
            raise InvalidArgumentError(f"ParameterDict keys are strings, got {key!r}")
        self._register(key, value if is_parameter(value) else Parameter(value))

    def _replace(self, name, new):
        self._parameters[name] = new

    def __getitem__(self, key):
        return self._parameters[key]

    def __contains__(self, key):
        return key in self._parameters

    def __iter__(self):
        return iter(self._parameters)

    def __len__(self):
        return len(self._parameters)

    def keys(self):
        return self._parameters.keys()

    def items(self):
        return self._parameters.items()

    def values(self):
        return self._parameters.values()


__all__ = ["Module", "Parameter", "ParameterDict"]
