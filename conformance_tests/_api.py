"""The loaded plugin's C API table, called with ctypes (not a section itself).

For the promises the SDK never lets through to a plugin (it refuses a bad
device ordinal first, never frees NULL, refuses host work on a capturing
stream itself): the case calls the plugin's own function and judges its
answer. :func:`of` opens the library the device under test was loaded from
(``Device.plugin.path``; dlopen returns the SDK's own handle, so this is the
same initialised plugin, and Plugin_Initialize is not called again) and
reads its DK_Api through ``DK_GetApi``. Argument structs are laid out as
device_api.h writes them; every call sets ``struct_size`` to the struct's
size.
"""

import ctypes
from ctypes import c_char_p, c_int32, c_size_t, c_uint64, c_void_p

# DK_ErrorCode
INVALID_ARGUMENT, OUT_OF_MEMORY, UNIMPLEMENTED, INTERNAL = 1, 2, 3, 4
UNAVAILABLE, OUT_OF_RANGE, FAILED_PRECONDITION = 5, 6, 7
CODE_NAMES = {
    0: "success",
    1: "DK_ERROR_INVALID_ARGUMENT",
    2: "DK_ERROR_OUT_OF_MEMORY",
    3: "DK_ERROR_UNIMPLEMENTED",
    4: "DK_ERROR_INTERNAL",
    5: "DK_ERROR_UNAVAILABLE",
    6: "DK_ERROR_OUT_OF_RANGE",
    7: "DK_ERROR_FAILED_PRECONDITION",
}
H2D, D2H, D2D = 0, 1, 2  # DK_CopyKind
EXTENSION_GRAPHS = 2

_FN = ctypes.CFUNCTYPE(c_void_p, c_void_p)  # DK_Error* f(Args*)
_VFN = ctypes.CFUNCTYPE(None, c_void_p)  # void f(Args*) (Error_Destroy)
_API_FNS = (
    "Error_Destroy Error_Message Error_GetCode Plugin_Initialize Plugin_GetInfo Device_Count "
    "Device_GetProperties Device_MemoryStats Device_Synchronize Memory_Allocate Memory_Free "
    "Memcpy Stream_Create Stream_Destroy Stream_Synchronize Stream_Query Stream_WaitEvent "
    "Event_Create Event_Destroy Event_Record Event_Query Event_Synchronize Event_ElapsedTime"
).split()


class _Table(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("extension_start", c_void_p),
        ("api_major", c_int32),
        ("api_minor", c_int32),
    ] + [(name, c_void_p) for name in _API_FNS]


class _ExtBase(ctypes.Structure):
    _fields_ = [("struct_size", c_size_t), ("type", c_int32), ("next", c_void_p)]


class _GraphsTable(ctypes.Structure):
    _fields_ = [
        ("base", _ExtBase),
        ("Graph_Capture", c_void_p),
        ("Graph_Launch", c_void_p),
        ("Graph_Destroy", c_void_p),
    ]


def args(*fields):
    """An argument struct type: struct_size first, then ``fields``."""
    return type("Args", (ctypes.Structure,), {"_fields_": [("struct_size", c_size_t), *fields]})


ErrorMessage = args(("error", c_void_p), ("message", c_char_p), ("message_size", c_size_t))
ErrorCode = args(("error", c_void_p), ("code", c_int32))
ErrorDestroy = args(("error", c_void_p))
Properties = args(
    ("device", c_int32),
    ("name", c_char_p),
    ("total_memory", c_uint64),
    ("capabilities", c_uint64),
    ("dtypes", c_uint64),
    ("alignment", c_size_t),
)
Stats = args(
    ("device", c_int32), ("bytes_in_use", c_uint64), ("peak_bytes_in_use", c_uint64), ("num_allocs", c_uint64)
)
Device = args(("device", c_int32))
Info = args(("name", c_char_p), ("vendor", c_char_p), ("version", c_char_p), ("attributes", c_char_p))
Count = args(("count", c_int32))
Alloc = args(("device", c_int32), ("size", c_size_t), ("ptr", c_void_p))
Free = args(("device", c_int32), ("ptr", c_void_p))
Memcpy = args(
    ("device", c_int32),
    ("kind", c_int32),
    ("dst", c_void_p),
    ("src", c_void_p),
    ("size", c_size_t),
    ("stream", c_void_p),
)
StreamCreate = args(("device", c_int32), ("stream", c_void_p))
Stream = args(("stream", c_void_p))
StreamQuery = args(("stream", c_void_p), ("idle", c_int32))
EventCreate = args(("device", c_int32), ("event", c_void_p))
Event = args(("event", c_void_p))
EventRecord = args(("event", c_void_p), ("stream", c_void_p))
WaitEvent = args(("stream", c_void_p), ("event", c_void_p))
GraphCapture = args(("stream", c_void_p), ("end", c_int32), ("graph", c_void_p))
GraphLaunch = args(("graph", c_void_p), ("stream", c_void_p))
GraphDestroy = args(("graph", c_void_p))


class Api:
    """The DK_Api of one loaded plugin. :meth:`call` returns (code, message),
    0 and "" for success: a case judges the error value itself."""

    def __init__(self, path):
        self.path = path
        self.lib = ctypes.CDLL(path)
        get = self.lib.DK_GetApi
        get.restype = ctypes.POINTER(_Table)
        self.table = get().contents
        self.fn = {n: (_VFN if n.startswith("Error_") else _FN)(getattr(self.table, n)) for n in _API_FNS}

    def _outcome(self, err):
        if not err:
            return 0, ""
        m = ErrorMessage(error=err)
        m.struct_size = ctypes.sizeof(m)
        self.fn["Error_Message"](ctypes.addressof(m))
        msg = (m.message or b"").decode("utf-8", "replace")
        c = ErrorCode(error=err)
        c.struct_size = ctypes.sizeof(c)
        self.fn["Error_GetCode"](ctypes.addressof(c))
        d = ErrorDestroy(error=err)
        d.struct_size = ctypes.sizeof(d)
        self.fn["Error_Destroy"](ctypes.addressof(d))
        return c.code, msg

    def call(self, name, struct, fn=None):
        """Calls API function ``name`` (or ``fn``) with ``struct``: (code, message)."""
        struct.struct_size = ctypes.sizeof(struct)
        return self._outcome((fn or self.fn[name])(ctypes.addressof(struct)))

    def ok(self, name, struct, fn=None):
        """Like :meth:`call`, for a call that must succeed; returns ``struct``."""
        code, msg = self.call(name, struct, fn)
        assert code == 0, f"{name} failed ({CODE_NAMES.get(code, code)}): {msg}"
        return struct

    # -- the few helpers the cases share
    def stream(self, device):
        return self.ok("Stream_Create", StreamCreate(device=device)).stream

    def stream_destroy(self, stream):
        return self.call("Stream_Destroy", Stream(stream=stream))

    def alloc(self, device, size):
        return self.ok("Memory_Allocate", Alloc(device=device, size=size)).ptr

    def free(self, device, ptr):
        return self.call("Memory_Free", Free(device=device, ptr=ptr))

    def graphs(self):
        """{Graph_Capture, Graph_Launch, Graph_Destroy} function pointers, or None."""
        p = self.table.extension_start
        while p:
            base = _ExtBase.from_address(p)
            if base.type == EXTENSION_GRAPHS:
                t = _GraphsTable.from_address(p)
                return {n: _FN(getattr(t, n)) for n in ("Graph_Capture", "Graph_Launch", "Graph_Destroy")}
            p = base.next
        return None


_OPEN = {}


def of(device):
    """The Api of the plugin ``device`` (an SDK Device) was loaded from."""
    path = device.plugin.path
    if path not in _OPEN:
        _OPEN[path] = Api(path)
    return _OPEN[path]


def describe(outcome):
    code, msg = outcome
    return CODE_NAMES.get(code, f"code {code}") + (f" ({msg})" if msg else "")
