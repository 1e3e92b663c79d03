"""DeviceKit: bring a new AI accelerator to deep learning through one small C API.

Quick start::

    import devicekit as dk
    a = dk.tensor([1.0, 2.0, 3.0], device="cpu:0")
    print((a + a).numpy())
    print(dk.devices())
"""

from . import _core
from ._version import __version__  # noqa: F401  (devicekit.__version__ is public)
from .errors import *  # noqa: F401,F403  (the exception classes are public API)
from .errors import __all__ as _errors_all
from .dtypes import (bfloat16, bool_, dtype, float16, float32, float64, int8, int32,
                     int64, uint8)
from ._plugins.registry import PluginRecord, device, devices, load_plugin, plugins, reload_plugins
from ._plugins.registry import device as _resolve_device
from .tensor import Tensor, empty, full, ones, tensor, zeros
from .tensor import install_surface as _install_tensor_surface
from . import ops
from . import autograd  # noqa: F401  (devicekit.autograd is public)
from . import _grad_rules  # noqa: F401  (importing it registers the gradient rules with autograd)
from . import nn
from . import optim
from . import distributed  # noqa: F401  (devicekit.distributed is public)
from . import trace  # noqa: F401  (devicekit.trace is public)
from . import graphs  # noqa: F401  (devicekit.graphs is public)
from .autograd import enable_grad, is_grad_enabled, no_grad
from ._fused import composite_stats, fused_kernels, reset_composite_stats

_install_tensor_surface()  # every Tensor method, bound once (the table is in tensor.py)

API_VERSION = f"{_core.API_MAJOR}.{_core.API_MINOR}"
Device = _core.Device
Plugin = _core.Plugin


def dispatch_stats():
    """Per base op: ``kernel`` launches, and ``cast_inserted`` calls in which the SDK
    converted operands because the plugin did not declare the dtype."""
    return _core.dispatch_stats()


reset_dispatch_stats = _core.reset_dispatch_stats


def _targets(device_):
    return devices() if device_ is None else [_resolve_device(device_)]


def synchronize(device=None):
    """Wait for all work on ``device`` (every device when None); raises the
    first asynchronous error a kernel reported."""
    for d in _targets(device):
        d.synchronize()


def empty_cache(device=None):
    """Return the SDK's cached device blocks to the plugin. Safe while other
    threads run ops: the blocks are taken out of the cache first and freed only
    after a synchronize, so no queued kernel still uses one."""
    for d in _targets(device):
        d.empty_cache()


def memory_stats(device=None):
    """``device.memory_stats()`` of one device (the first device when None)."""
    return _resolve_device(device).memory_stats()


__all__ = [
    "API_VERSION", "Device", "Plugin", "PluginRecord", "Tensor", "bfloat16", "bool_", "device",
    "composite_stats", "devices", "dispatch_stats", "distributed", "dtype", "graphs", "enable_grad",
    "fused_kernels",
    "is_grad_enabled", "no_grad", "reset_composite_stats", "empty", "empty_cache", "float16",
    "float32", "float64", "full", "int8",
    "int32", "int64", "load_plugin", "memory_stats", "nn", "ones", "ops", "optim", "plugins",
    "reload_plugins",
    "reset_dispatch_stats", "synchronize", "tensor", "trace", "uint8", "zeros", *_errors_all,
]
