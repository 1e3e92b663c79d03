"""A small ctypes layer over a plugin's C device API (DK_GetApi), for tests that
talk to a plugin library directly, without the SDK: the runtime calls the
collectives tests need and the DK_Collectives extension (device API 1.5),
with the argument structs laid out as device_api.h writes them.

    lib = Plugin(devicekit_cpu.library_path())
    coll = lib.collectives()          # None when the plugin has no such part
    comm = coll.comm_init(uid, nranks, rank, device=0, timeout_ms=2000)
"""

from __future__ import annotations

import ctypes
from ctypes import POINTER, c_char, c_int32, c_int64, c_uint64, c_void_p

# The device API's constants and argument structs, as the shipped conformance
# suite's ctypes layer lays them out (one copy of device_api.h's layouts).
from devicekit.conformance_tests._api import (  # noqa: F401
    _API_FNS,
    _FN,
    _VFN,
    D2D,
    D2H,
    FAILED_PRECONDITION,
    H2D,
    INTERNAL,
    INVALID_ARGUMENT,
    OUT_OF_MEMORY,
    OUT_OF_RANGE,
    UNAVAILABLE,
    UNIMPLEMENTED,
    Alloc as _Alloc,
    ErrorCode as _ErrorCode,
    ErrorDestroy as _ErrorDestroy,
    ErrorMessage as _ErrorMessage,
    Free as _Free,
    Memcpy as _Memcpy,
    Stream as _Stream,
    StreamCreate as _StreamCreate,
    _ExtBase,
    _Table as _Api,
)
from devicekit.conformance_tests._api import args as _args

# DK_DType
FLOAT32, FLOAT16, BFLOAT16, FLOAT64, INT8, INT32, INT64, UINT8, BOOL = range(9)
# DK_CollectiveId, DK_CollReduceOp
ALL_REDUCE, BROADCAST, REDUCE, ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL, SEND, RECV = range(8)
SUM, PROD, MAX, MIN, AVG = range(5)
EXTENSION_COLLECTIVES = 1
UNIQUE_ID_BYTES = 128


class _Collectives(ctypes.Structure):
    _fields_ = [("base", _ExtBase), ("collectives", c_uint64), ("dtypes", c_uint64),
                ("reduce_ops", c_uint64)] + [
        (name, c_void_p) for name in
        ("Comm_GetUniqueId", "Comm_Init", "Comm_Destroy", "Comm_Abort", "Coll_Run", "Coll_Group")]


_Init = _args(("sdk_api_major", c_int32), ("sdk_api_minor", c_int32))
UniqueId = c_char * UNIQUE_ID_BYTES
_GetUniqueId = _args(("device", c_int32), ("id", UniqueId))
_CommInit = _args(("id", POINTER(UniqueId)), ("nranks", c_int32), ("rank", c_int32),
                  ("device", c_int32), ("timeout_ms", c_int64), ("comm", c_void_p))
_Comm = _args(("comm", c_void_p))
_CollRun = _args(("comm", c_void_p), ("stream", c_void_p), ("collective", c_int32),
                 ("send", c_void_p), ("recv", c_void_p), ("count", c_int64), ("dtype", c_int32),
                 ("op", c_int32), ("root", c_int32), ("peer", c_int32))
_CollGroup = _args(("end", c_int32))


class DKError(Exception):
    """An error a plugin call returned: its DK_ErrorCode and message."""

    def __init__(self, code: int, message: str):
        super().__init__(f"[code {code}] {message}")
        self.code = code
        self.message = message


def _call(fn, struct):
    struct.struct_size = ctypes.sizeof(struct)
    return fn(ctypes.addressof(struct))


class Plugin:
    """One plugin library, loaded with ctypes and initialised."""

    def __init__(self, path: str):
        self.lib = ctypes.CDLL(path)
        get = self.lib.DK_GetApi
        get.restype = POINTER(_Api)
        self.api = get().contents
        self.fn = {name: (_VFN if name.startswith("Error_") else _FN)(getattr(self.api, name))
                   for name in _API_FNS}
        self.check(_call(self.fn["Plugin_Initialize"], _Init(sdk_api_major=1, sdk_api_minor=5)))

    def check(self, err) -> None:
        """Raises DKError for a non-NULL DK_Error* (and frees it)."""
        if not err:
            return
        m = _ErrorMessage(error=err)
        _call(self.fn["Error_Message"], m)
        msg = m.message.decode("utf-8", "replace")
        c = _ErrorCode(error=err)
        _call(self.fn["Error_GetCode"], c)
        _call(self.fn["Error_Destroy"], _ErrorDestroy(error=err))
        raise DKError(c.code, msg)

    def extension(self, ext_type: int):
        """The address of the first extension of `ext_type`, or None."""
        p = self.api.extension_start
        while p:
            base = _ExtBase.from_address(p)
            if base.type == ext_type:
                return p
            p = base.next
        return None

    def collectives(self) -> Collectives | None:
        p = self.extension(EXTENSION_COLLECTIVES)
        return None if p is None else Collectives(self, _Collectives.from_address(p))

    # ---- memory and streams
    def alloc(self, size: int, device: int = 0) -> int:
        a = _Alloc(device=device, size=size)
        self.check(_call(self.fn["Memory_Allocate"], a))
        return a.ptr or 0

    def free(self, ptr: int, device: int = 0) -> None:
        self.check(_call(self.fn["Memory_Free"], _Free(device=device, ptr=ptr)))

    def memcpy(self, dst, src, size: int, kind: int, stream=None, device: int = 0) -> None:
        self.check(_call(self.fn["Memcpy"], _Memcpy(device=device, kind=kind, dst=dst, src=src,
                                                    size=size, stream=stream)))

    def stream_create(self, device: int = 0) -> int:
        a = _StreamCreate(device=device)
        self.check(_call(self.fn["Stream_Create"], a))
        return a.stream

    def stream_sync(self, stream: int) -> None:
        self.check(_call(self.fn["Stream_Synchronize"], _Stream(stream=stream)))

    def stream_destroy(self, stream: int) -> None:
        self.check(_call(self.fn["Stream_Destroy"], _Stream(stream=stream)))


class Collectives:
    """The DK_Collectives part of a plugin."""

    def __init__(self, plugin: Plugin, table: _Collectives):
        self.plugin = plugin
        self.table = table
        self.mask_collectives = table.collectives
        self.mask_dtypes = table.dtypes
        self.mask_reduce_ops = table.reduce_ops
        self.fn = {name: _FN(getattr(table, name)) for name, _ in _Collectives._fields_[4:]}

    def unique_id(self, device: int = 0) -> bytes:
        a = _GetUniqueId(device=device)
        self.plugin.check(_call(self.fn["Comm_GetUniqueId"], a))
        # (reading the field a.id would stop at the first NUL byte)
        return ctypes.string_at(ctypes.addressof(a) + _GetUniqueId.id.offset, UNIQUE_ID_BYTES)

    def comm_init(self, uid: bytes, nranks: int, rank: int, device: int = 0,
                  timeout_ms: int = 0) -> int:
        buf = UniqueId.from_buffer_copy(uid)
        a = _CommInit(id=ctypes.pointer(buf), nranks=nranks, rank=rank, device=device,
                      timeout_ms=timeout_ms)
        self.plugin.check(_call(self.fn["Comm_Init"], a))
        return a.comm

    def comm_destroy(self, comm) -> None:
        self.plugin.check(_call(self.fn["Comm_Destroy"], _Comm(comm=comm)))

    def comm_abort(self, comm) -> None:
        self.plugin.check(_call(self.fn["Comm_Abort"], _Comm(comm=comm)))

    def run(self, comm, collective: int, send, recv, count: int, dtype: int, op: int = 0,
            root: int = 0, peer: int = 0, stream=None) -> None:
        a = _CollRun(comm=comm, stream=stream, collective=collective, send=send, recv=recv,
                     count=count, dtype=dtype, op=op, root=root, peer=peer)
        self.plugin.check(_call(self.fn["Coll_Run"], a))

    def group(self, end: bool) -> None:
        self.plugin.check(_call(self.fn["Coll_Group"], _CollGroup(end=int(end))))
