"""Neural-network building blocks over the base ops.

``devicekit.nn.functional`` (``import devicekit.nn.functional as F``) holds the
composite ops, named and called like ``torch.nn.functional``; each is a
decomposition into base ops (so it is differentiable through the tape), and
the ones a plugin may fuse go through the fused-kernel dispatcher.
``Module``, ``Parameter`` and ``ParameterDict`` (``devicekit.nn.module``) hold
parameters for ``devicekit.optim``.
"""

from . import functional
from .module import Module, Parameter, ParameterDict

__all__ = ["Module", "Parameter", "ParameterDict", "functional"]
