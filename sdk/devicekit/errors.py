"""DeviceKit's exceptions: one root, one class per kind of failure.

Every error raised by DeviceKit derives from :class:`DeviceKitError`. Classes
that correspond to a familiar built-in also derive from it (``MemoryError``,
``NotImplementedError``, ``ValueError``, ``TypeError``, ``LookupError``,
``OverflowError``, ``IndexError``, ``RuntimeError``) so generic handlers keep
working. Messages carry the real cause: the dlerror
text, the plugin's own error message, both sides of a version mismatch.
"""

__all__ = [
    "DeviceKitError", "PluginLoadError", "PluginVersionError", "DeviceError",
    "PluginContractError", "OutOfMemoryError", "NotImplementedByPlugin", "InvalidArgumentError",
    "DTypeError", "DeviceNotFoundError", "InputOverflowError", "IndexOutOfRangeError",
    "ForkedProcessError", "DuplicateArgumentError", "InputFileError", "UnloweredOpError",
]


class DeviceKitError(Exception):
    """Root of every DeviceKit error. ``code`` is the device API error code
    name (e.g. ``"INVALID_ARGUMENT"``) when a plugin call produced the error,
    else ``None``."""

    def __init__(self, message, code=None):
        super().__init__(message)
        self.code = code


class PluginLoadError(DeviceKitError):
    """A plugin library could not be loaded: missing file, dlopen failure,
    missing entry symbol, its Plugin_Initialize returned an error, it returned
    something the device API forbids while loading, or it crashed, hung or
    exited the process that probed it (see devicekit._plugins.probe)."""


class PluginVersionError(PluginLoadError):
    """A plugin was built for an incompatible device API version, or its
    tables' struct_size do not match the version it claims."""


class DeviceError(DeviceKitError):
    """A plugin call returned an error; the plugin's message is included verbatim."""


class PluginContractError(DeviceError):
    """A plugin call reported success but returned something the device API
    forbids (a NULL or misaligned allocation, a NULL stream, an alignment that
    is not a power of two, ...). The message names the plugin, the call, the
    field, the value and the header's rule."""


class OutOfMemoryError(DeviceError, MemoryError):
    """The device could not satisfy an allocation."""


class NotImplementedByPlugin(DeviceKitError, NotImplementedError):
    """The plugin has no kernel (or no kernel for this dtype) for an op and the
    SDK has nothing to run instead. Never a silent fallback."""


class InvalidArgumentError(DeviceKitError, ValueError):
    """Bad input caught by the SDK before it reached a plugin: shapes that do
    not broadcast, tensors on different devices, out-of-bounds views, ..."""


class DuplicateArgumentError(InvalidArgumentError, TypeError):
    """One argument given under both of its names: numpy's ``axis=``/``keepdims=``
    and PyTorch's ``dim=``/``keepdim=`` (Python's own "got multiple values")."""


class UnloweredOpError(DeviceKitError, NotImplementedError):
    """A framework op (``devicekit.torch``: an ATen op overload) that DeviceKit
    cannot run on the device: no lowering and no decomposition, or a lowering
    whose base op the plugin lacks. Never a silent fallback. ``op`` names the
    op (``"aten.tanh.default"``); ``missing_base_ops`` the plugin's missing base
    ops, when that is the cause."""

    def __init__(self, message, op=None, missing_base_ops=()):
        super().__init__(message)
        self.op, self.missing_base_ops = op, tuple(missing_base_ops)


class DTypeError(DeviceKitError, TypeError):
    """An unknown or unsupported dtype."""


class DeviceNotFoundError(DeviceKitError, LookupError):
    """No loaded plugin provides the requested device."""


class InputOverflowError(DeviceKitError, OverflowError):
    """A shape whose element count or byte size does not fit in int64, a Python
    int that does not fit the dtype it would be stored in (never wrapped), or
    an ``arange``/seed past its type's range. Refused before anything is
    allocated or launched."""


class IndexOutOfRangeError(InvalidArgumentError, IndexError):
    """A dimension or index outside a tensor's range (``transpose(5, 0)`` on a
    2-d tensor, ``x[7]`` on 3 rows, scatter indices into an empty tensor)."""


class ForkedProcessError(DeviceKitError, RuntimeError):
    """A device the parent process had used is used in a child made by
    ``fork()``: the plugin's threads did not survive the fork. Use the
    ``'spawn'`` multiprocessing start method."""


class InputFileError(DeviceKitError):
    """A file a command was given cannot be used (missing, truncated, of the
    wrong kind): one line naming the file and the problem. Each command's
    subclasses set ``exit_code``, the exit status its CLI returns for that
    kind (``devicekit gate``: docs/gate.md; ``devicekit report merge``:
    docs/scale.md)."""

    exit_code = 2

    def __init__(self, path, problem):
        self.path, self.problem = str(path), " ".join(str(problem).split())
        super().__init__(f"{self.path}: {self.problem}")
