/*
 * DeviceKit device API — the one C interface a hardware vendor implements.
 *
 * A plugin is a shared library that exports exactly one symbol, DK_GetApi
 * (see the end of this file), returning a pointer to a constant function
 * table, DK_Api. Everything the SDK needs from a device goes through that
 * table: plugin information, devices, memory, copies, streams, events, the
 * base-operator kernel table, (since 1.2) the fused-kernel registry and
 * (since 1.5) the optional collectives and graphs parts, found through the
 * extension chain. Everything above the base operators (tensors,
 * views, broadcasting, type promotion, composite ops, autograd) belongs to the
 * SDK and is not part of this contract.
 *
 * Conventions used throughout
 * ---------------------------
 * - Pure C99. No C++ types cross this boundary, no exceptions, no setjmp.
 * - Every call takes one `DK_<Object>_<Verb>_Args*` whose first field is
 *   `struct_size`; fields whose comment begins with `out:` are written by
 *   the callee. The caller sets struct_size with the matching
 *   DK_<name>_STRUCT_SIZE macro. A callee must read only the fields that fit
 *   within the struct_size it was given, and write only `out:` fields that
 *   fit within it, so that an older caller and a newer callee (or the
 *   reverse) still talk.
 * - Every call returns `DK_Error*`: NULL means success; anything else is an
 *   error object owned by the caller, who frees it with DK_Api.Error_Destroy.
 * - Pointers: every pointer field says who owns it, how long it lives,
 *   whether it may be NULL, and what threads may touch it.
 * - Enumerations cross the boundary as int32_t fields (an enum's size is the
 *   compiler's choice, and an out-of-range enum value is undefined behaviour
 *   in C++); the enum types below only name the values. A callee rejects
 *   values it does not know with DK_ERROR_INVALID_ARGUMENT.
 * - Thread-safety: unless a call says otherwise, every call may be made from
 *   any host thread concurrently with any other call; a plugin that needs
 *   locks takes them itself.
 * - Device memory is addressed by `void*` device pointers. The SDK never
 *   dereferences one on the host; only the plugin (in copies and kernels)
 *   does. The SDK does form interior pointers by adding byte offsets to a
 *   pointer from Memory_Allocate (views into one allocation), so a plugin's
 *   device pointers must be plain byte addresses within an allocation.
 */
#ifndef DEVICEKIT_DEVICE_API_H_
#define DEVICEKIT_DEVICE_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ========================================================================== */
/*  Versioning                                                                */
/* ========================================================================== */
/*
 * The device API is versioned MAJOR.MINOR.
 *
 * Rules (every change to this file follows them; CHANGELOG.md records each bump):
 * 1. A MINOR bump only appends: new fields at the end of a struct, new
 *    entries at the end of DK_Api, new DK_OpId values at the end of the op
 *    list, new enum values at the end of an enum. Nothing is removed,
 *    reordered, renamed or re-typed, and no existing behaviour changes.
 * 2. Anything else is a MAJOR bump: a plugin built for major N does not load
 *    into an SDK for major M != N.
 * 3. The SDK loads a plugin whose MAJOR equals its own and whose MINOR is
 *    less than or equal to its own. Fields the older plugin does not have
 *    (beyond its struct_size) are treated as absent: NULL function pointers,
 *    "not implemented" kernels. A plugin that claims a newer MINOR than the
 *    SDK is refused, because it may rely on SDK behaviour the SDK lacks: the
 *    error names both versions and the devicekit release to install.
 * 4. Every versioned struct records, per MINOR, the struct_size it had then
 *    (DK_Api_STRUCT_SIZE_1_0, ...), so the SDK can tell a genuinely old
 *    plugin from a corrupt one.
 *
 * Operators and versions live in spec/base_ops.json, the only place an op
 * or version fact is written by hand; tools/gen_ops.py generates from it
 * device_api_ops.h (included below), the DK_API_MINOR line just below (the
 * last entry of the spec's "versions"), the per-minor DK_Api sizes
 * DK_Api_STRUCT_SIZE_1_<minor> (rule 4; in device_api_ops.h), the docs and
 * the SDK's tables (op tables, the loader's kApiSizeByMinor, FIRST_DEVICEKIT).
 * A MINOR bump is:
 * (a) edit the spec: append the new ops with "since": "1.<new minor>" and
 *     the version's entry to "versions" (api_struct_ends_at: DK_Api's last
 *     field at that minor; first_devicekit: the DeviceKit release that ships
 *     it), after appending any new DK_Api field to the struct below;
 * (b) run python device_api/tools/gen_ops.py;
 * (c) add the CHANGELOG.md line.
 * Nothing else changes by hand: the version, counts (DK_OP_COUNT is the
 * latest), struct sizes, dtype masks, the SDK's tables and devicekit new's
 * op list follow the spec, and the generator refuses an op whose minor has
 * no "versions" entry.
 */
#define DK_API_MAJOR 1
/* Written by tools/gen_ops.py from spec/base_ops.json's "versions"; edit the spec. */
#define DK_API_MINOR 5

/* Size of a struct up to and including `last_field`. Used instead of sizeof so
 * trailing padding never counts and appending a field changes the value. */
#define DK_STRUCT_SIZE(type, last_field) \
  (offsetof(type, last_field) + sizeof(((type*)0)->last_field))

/* Defines DK_<type>_STRUCT_SIZE and breaks the build if someone appends a
 * field to `type` and forgets to move the macro to the new last field. */
#if defined(__cplusplus)
#define DK_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#else
#define DK_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif
#define DK_DEFINE_STRUCT_SIZE(type, last_field)                   \
  enum { type##_STRUCT_SIZE = DK_STRUCT_SIZE(type, last_field) }; \
  DK_STATIC_ASSERT(sizeof(type) - type##_STRUCT_SIZE < 8,         \
                   #type " gained a field: update DK_DEFINE_STRUCT_SIZE")
/* (A field appended into existing tail padding is not caught by sizeof; the
 * frozen-layout test in tests/ compares every field's offset with 1.0's.) */

/* ========================================================================== */
/*  Errors                                                                    */
/* ========================================================================== */

/* A small, fixed set of error codes. Append-only. */
typedef enum DK_ErrorCode {
  DK_ERROR_INVALID_ARGUMENT = 1, /* caller passed something malformed       */
  DK_ERROR_OUT_OF_MEMORY = 2,    /* allocation could not be satisfied       */
  DK_ERROR_UNIMPLEMENTED = 3,    /* the plugin does not provide this        */
  DK_ERROR_INTERNAL = 4,         /* a bug or unexpected state in the plugin */
  DK_ERROR_UNAVAILABLE = 5,      /* device lost, busy, or not present       */
  DK_ERROR_OUT_OF_RANGE = 6,     /* index, ordinal or size out of range     */
  DK_ERROR_FAILED_PRECONDITION = 7 /* call made in the wrong state          */
} DK_ErrorCode;
/* A code outside this list keeps its number: the SDK reports it as
 * "unknown error code N", never as another code. */

/* Opaque error object, created by the plugin. Owned by whoever received it
 * (the caller of the call that returned it), who frees it exactly once with
 * Error_Destroy. Not shared between threads without external locking. */
typedef struct DK_Error DK_Error;

typedef struct DK_Error_Destroy_Args {
  size_t struct_size;
  DK_Error* error; /* owned by the caller; invalid after this call. Not NULL. */
} DK_Error_Destroy_Args;
DK_DEFINE_STRUCT_SIZE(DK_Error_Destroy_Args, error);
/* Frees `error`. Cannot fail. */
typedef void DK_Error_Destroy(DK_Error_Destroy_Args* args);

typedef struct DK_Error_Message_Args {
  size_t struct_size;
  const DK_Error* error; /* borrowed; not NULL */
  const char* message;   /* out: NUL-terminated UTF-8, owned by `error`, valid
                            until `error` is destroyed. Never NULL. A message
                            names the call, what was expected and what was
                            found, and a hint where one exists. */
  size_t message_size;   /* out: strlen(message). The SDK never reads past the
                            terminating NUL whatever this says, and keeps at
                            most 64 KiB of a message (the rest is cut). */
} DK_Error_Message_Args;
DK_DEFINE_STRUCT_SIZE(DK_Error_Message_Args, message_size);
typedef void DK_Error_Message(DK_Error_Message_Args* args);

typedef struct DK_Error_GetCode_Args {
  size_t struct_size;
  const DK_Error* error; /* borrowed; not NULL */
  int32_t code;          /* out: a DK_ErrorCode */
} DK_Error_GetCode_Args;
DK_DEFINE_STRUCT_SIZE(DK_Error_GetCode_Args, code);
typedef void DK_Error_GetCode(DK_Error_GetCode_Args* args);

/* ========================================================================== */
/*  Data types                                                                */
/* ========================================================================== */

/* Element types. Append-only; the value is the bit index used in dtype masks. */
typedef enum DK_DType {
  DK_DTYPE_FLOAT32 = 0,
  DK_DTYPE_FLOAT16 = 1,  /* IEEE 754 binary16 */
  DK_DTYPE_BFLOAT16 = 2, /* upper 16 bits of a float32 */
  DK_DTYPE_FLOAT64 = 3,
  DK_DTYPE_INT8 = 4,
  DK_DTYPE_INT32 = 5,
  DK_DTYPE_INT64 = 6,
  DK_DTYPE_UINT8 = 7,
  DK_DTYPE_BOOL = 8,     /* one byte, 0 or 1 */
  DK_DTYPE_COUNT_1_0 = 9 /* number of dtypes defined in API 1.0 */
} DK_DType;

#define DK_DTYPE_BIT(dt) ((uint64_t)1 << (dt))
#define DK_DTYPE_MASK_ALL_1_0 ((DK_DTYPE_BIT(DK_DTYPE_COUNT_1_0)) - 1)

/* ========================================================================== */
/*  Plugin                                                                    */
/* ========================================================================== */

typedef struct DK_Plugin_Initialize_Args {
  size_t struct_size;
  int32_t sdk_api_major; /* the device API version the SDK was built with */
  int32_t sdk_api_minor;
} DK_Plugin_Initialize_Args;
DK_DEFINE_STRUCT_SIZE(DK_Plugin_Initialize_Args, sdk_api_minor);
/* Called once per loaded library and process, after the SDK accepted the
 * version, before any other call except Error_*; never again for that
 * library, whatever path names it (a symlink or hard link is the same
 * library) and also after devicekit.reload_plugins(). Not thread-safe with
 * any other call. A plugin that cannot run on this machine (no driver, no
 * device) returns an error here; the SDK reports it as the plugin's load
 * error.
 * Probing: before a library enters a user's process, the SDK loads it in a
 * short-lived probe process (dlopen, DK_GetApi, Plugin_Initialize,
 * Plugin_GetInfo, Device_Count, Device_GetProperties of every device), which
 * then ends with _exit (no library destructors run). So Initialize also runs
 * once in that process, the first time the SDK sees a given library file. A
 * crash, a hang or an exit() there becomes the plugin's load error. */
typedef DK_Error* DK_Plugin_Initialize(DK_Plugin_Initialize_Args* args);

typedef struct DK_Plugin_GetInfo_Args {
  size_t struct_size;
  /* All strings below: out, NUL-terminated UTF-8, owned by the plugin, valid
   * until the library is unloaded. Never NULL (empty string when unknown).
   * The SDK reads at most 64 KiB of each and decodes invalid UTF-8 in the
   * free-text ones (vendor, version, attributes) with replacement (U+FFFD). */
  const char* name;    /* out: short device-type name, [a-z][a-z0-9_]*, e.g.
                          "acme"; devices are addressed as "acme:0". Not
                          empty; anything else is a load error. */
  const char* vendor;  /* out: e.g. "Acme Silicon Inc." */
  const char* version; /* out: the plugin's own version, e.g. "0.3.1" */
  /* out: free-form "key=value" lines, e.g. "driver=12.4\nfirmware=7" */
  const char* attributes;
} DK_Plugin_GetInfo_Args;
DK_DEFINE_STRUCT_SIZE(DK_Plugin_GetInfo_Args, attributes);
typedef DK_Error* DK_Plugin_GetInfo(DK_Plugin_GetInfo_Args* args);

/* ========================================================================== */
/*  Devices                                                                   */
/* ========================================================================== */

/* Devices are addressed by ordinal, 0 .. count-1, fixed after Initialize. */

typedef struct DK_Device_Count_Args {
  size_t struct_size;
  int32_t count; /* out: 0 <= count <= 4096; a larger or negative count is a
                    load error */
} DK_Device_Count_Args;
DK_DEFINE_STRUCT_SIZE(DK_Device_Count_Args, count);
typedef DK_Error* DK_Device_Count(DK_Device_Count_Args* args);

/* Device capability flags (DK_Device_GetProperties_Args.capabilities). */
#define DK_DEVICE_CAP_ASYNC_COPY ((uint64_t)1 << 0)  /* copies overlap kernels */
/* Device memory is host-addressable (still never touched by the SDK). */
#define DK_DEVICE_CAP_HOST_MEMORY ((uint64_t)1 << 1)
#define DK_DEVICE_CAP_TIMING_EVENTS ((uint64_t)1 << 2) /* Event_ElapsedTime works */

typedef struct DK_Device_GetProperties_Args {
  size_t struct_size;
  int32_t device;          /* ordinal; DK_ERROR_OUT_OF_RANGE when invalid */
  const char* name;        /* out: owned by the plugin, valid until unload,
                              never NULL; UTF-8 (invalid bytes are decoded
                              with replacement); e.g. "Acme X1 (rev b)" */
  uint64_t total_memory;   /* out: bytes of device memory */
  uint64_t capabilities;   /* out: DK_DEVICE_CAP_* */
  uint64_t dtypes;         /* out: mask of DK_DTYPE_BIT(dt) the device stores */
  size_t alignment;        /* out: alignment of Memory_Allocate results, a
                              power of two >= 16 */
} DK_Device_GetProperties_Args;
DK_DEFINE_STRUCT_SIZE(DK_Device_GetProperties_Args, alignment);
typedef DK_Error* DK_Device_GetProperties(DK_Device_GetProperties_Args* args);

typedef struct DK_Device_MemoryStats_Args {
  size_t struct_size;
  int32_t device;
  uint64_t bytes_in_use;  /* out: exact bytes currently allocated through
                             Memory_Allocate and not yet freed */
  uint64_t peak_bytes_in_use; /* out: maximum of bytes_in_use since Initialize */
  uint64_t num_allocs;    /* out: number of live allocations */
} DK_Device_MemoryStats_Args;
DK_DEFINE_STRUCT_SIZE(DK_Device_MemoryStats_Args, num_allocs);
typedef DK_Error* DK_Device_MemoryStats(DK_Device_MemoryStats_Args* args);

typedef struct DK_Device_Synchronize_Args {
  size_t struct_size;
  int32_t device;
} DK_Device_Synchronize_Args;
DK_DEFINE_STRUCT_SIZE(DK_Device_Synchronize_Args, device);
/* Blocks until all work enqueued on every stream of `device` has finished.
 * Returns the asynchronous error of the earliest-created stream that has one
 * (and clears it); other streams keep theirs for their own synchronize. */
typedef DK_Error* DK_Device_Synchronize(DK_Device_Synchronize_Args* args);

/* ========================================================================== */
/*  Memory                                                                    */
/* ========================================================================== */

typedef struct DK_Memory_Allocate_Args {
  size_t struct_size;
  int32_t device;
  size_t size;     /* bytes; 0 is valid and yields ptr == NULL */
  void* ptr;       /* out: device pointer, aligned to the device alignment;
                      not NULL when the call succeeds with size > 0 (the SDK
                      refuses a NULL or misaligned success, freeing a
                      misaligned block with Memory_Free first).
                      Owned by the caller until passed to Memory_Free. */
} DK_Memory_Allocate_Args;
DK_DEFINE_STRUCT_SIZE(DK_Memory_Allocate_Args, ptr);
/* A request that cannot be satisfied returns DK_ERROR_OUT_OF_MEMORY, leaves
 * `ptr` NULL and changes no memory statistic. Synchronous. */
typedef DK_Error* DK_Memory_Allocate(DK_Memory_Allocate_Args* args);

typedef struct DK_Memory_Free_Args {
  size_t struct_size;
  int32_t device;
  void* ptr;   /* from Memory_Allocate on the same device, or NULL (no-op) */
} DK_Memory_Free_Args;
DK_DEFINE_STRUCT_SIZE(DK_Memory_Free_Args, ptr);
/* Frees immediately. The caller guarantees no enqueued work still uses `ptr`
 * (the SDK synchronises or orders frees on the stream that last used it). */
typedef DK_Error* DK_Memory_Free(DK_Memory_Free_Args* args);

/* ========================================================================== */
/*  Streams                                                                   */
/* ========================================================================== */

/* Opaque, created by the plugin. Work enqueued on one stream runs in order;
 * work on different streams may run concurrently unless ordered by events.
 * Any thread may enqueue on any stream; the order of two enqueues from two
 * threads is the order in which the calls took the stream's lock. */
typedef struct DK_Stream DK_Stream;

typedef struct DK_Stream_Create_Args {
  size_t struct_size;
  int32_t device;
  DK_Stream* stream; /* out: owned by the caller until Stream_Destroy; not NULL
                        when the call succeeds (NULL means "no stream,
                        synchronous" to Memcpy, so the SDK refuses it) */
} DK_Stream_Create_Args;
DK_DEFINE_STRUCT_SIZE(DK_Stream_Create_Args, stream);
typedef DK_Error* DK_Stream_Create(DK_Stream_Create_Args* args);

typedef struct DK_Stream_Destroy_Args {
  size_t struct_size;
  DK_Stream* stream; /* not NULL; invalid after this call */
} DK_Stream_Destroy_Args;
DK_DEFINE_STRUCT_SIZE(DK_Stream_Destroy_Args, stream);
/* Waits for the stream's pending work, then frees it. Returns the stream's
 * pending asynchronous error, if any; the stream is destroyed either way. */
typedef DK_Error* DK_Stream_Destroy(DK_Stream_Destroy_Args* args);

typedef struct DK_Stream_Synchronize_Args {
  size_t struct_size;
  DK_Stream* stream; /* not NULL */
} DK_Stream_Synchronize_Args;
DK_DEFINE_STRUCT_SIZE(DK_Stream_Synchronize_Args, stream);
/* Blocks until all work enqueued on `stream` has finished; returns (and
 * clears) the first asynchronous error raised by that work. */
typedef DK_Error* DK_Stream_Synchronize(DK_Stream_Synchronize_Args* args);

typedef struct DK_Stream_Query_Args {
  size_t struct_size;
  DK_Stream* stream; /* not NULL */
  int32_t idle;      /* out: 1 when all enqueued work has finished, else 0 */
} DK_Stream_Query_Args;
DK_DEFINE_STRUCT_SIZE(DK_Stream_Query_Args, idle);
typedef DK_Error* DK_Stream_Query(DK_Stream_Query_Args* args);

/* ========================================================================== */
/*  Events                                                                    */
/* ========================================================================== */

/* Opaque marker in a stream's timeline. */
typedef struct DK_Event DK_Event;

typedef struct DK_Event_Create_Args {
  size_t struct_size;
  int32_t device;
  DK_Event* event; /* out: owned by the caller until Event_Destroy; not NULL
                      when the call succeeds */
} DK_Event_Create_Args;
DK_DEFINE_STRUCT_SIZE(DK_Event_Create_Args, event);
typedef DK_Error* DK_Event_Create(DK_Event_Create_Args* args);

typedef struct DK_Event_Destroy_Args {
  size_t struct_size;
  DK_Event* event; /* not NULL; invalid after this call. Destroying an event
                      that is recorded but not yet reached is allowed: streams
                      waiting on it still wait for the recorded point. */
} DK_Event_Destroy_Args;
DK_DEFINE_STRUCT_SIZE(DK_Event_Destroy_Args, event);
typedef DK_Error* DK_Event_Destroy(DK_Event_Destroy_Args* args);

typedef struct DK_Event_Record_Args {
  size_t struct_size;
  DK_Event* event;   /* not NULL */
  DK_Stream* stream; /* not NULL; same device as the event */
} DK_Event_Record_Args;
DK_DEFINE_STRUCT_SIZE(DK_Event_Record_Args, stream);
/* Captures the point after all work enqueued on `stream` so far. Recording
 * again moves the event to the new point. */
typedef DK_Error* DK_Event_Record(DK_Event_Record_Args* args);

typedef struct DK_Event_Query_Args {
  size_t struct_size;
  DK_Event* event; /* not NULL */
  int32_t reached; /* out: 1 when the recorded point has been reached (or the
                      event was never recorded), else 0 */
} DK_Event_Query_Args;
DK_DEFINE_STRUCT_SIZE(DK_Event_Query_Args, reached);
typedef DK_Error* DK_Event_Query(DK_Event_Query_Args* args);

typedef struct DK_Event_Synchronize_Args {
  size_t struct_size;
  DK_Event* event; /* not NULL */
} DK_Event_Synchronize_Args;
DK_DEFINE_STRUCT_SIZE(DK_Event_Synchronize_Args, event);
/* Blocks the calling host thread until the recorded point is reached. Does
 * not report asynchronous errors of the recording stream (its synchronize
 * does). */
typedef DK_Error* DK_Event_Synchronize(DK_Event_Synchronize_Args* args);

typedef struct DK_Event_ElapsedTime_Args {
  size_t struct_size;
  DK_Event* start; /* not NULL; recorded and reached */
  DK_Event* end;   /* not NULL; recorded and reached */
  double milliseconds; /* out: time from start to end; may be negative when
                          `end` was reached first */
} DK_Event_ElapsedTime_Args;
DK_DEFINE_STRUCT_SIZE(DK_Event_ElapsedTime_Args, milliseconds);
/* DK_ERROR_FAILED_PRECONDITION when either event is not yet reached. */
typedef DK_Error* DK_Event_ElapsedTime(DK_Event_ElapsedTime_Args* args);

typedef struct DK_Stream_WaitEvent_Args {
  size_t struct_size;
  DK_Stream* stream; /* not NULL */
  DK_Event* event;   /* not NULL; may belong to another stream, also of
                        another device of the same plugin */
} DK_Stream_WaitEvent_Args;
DK_DEFINE_STRUCT_SIZE(DK_Stream_WaitEvent_Args, event);
/* Work enqueued on `stream` after this call does not start before the point
 * `event` recorded (at the time of this call) is reached. Does not block the
 * host. Waiting on a never-recorded event is a no-op. */
typedef DK_Error* DK_Stream_WaitEvent(DK_Stream_WaitEvent_Args* args);

/* ========================================================================== */
/*  Copies                                                                    */
/* ========================================================================== */

typedef enum DK_CopyKind {
  DK_COPY_HOST_TO_DEVICE = 0,
  DK_COPY_DEVICE_TO_HOST = 1,
  DK_COPY_DEVICE_TO_DEVICE = 2 /* same device */
} DK_CopyKind;

typedef struct DK_Memcpy_Args {
  size_t struct_size;
  int32_t device;
  int32_t kind;     /* a DK_CopyKind */
  void* dst;        /* device or host pointer per `kind`; borrowed */
  const void* src;  /* device or host pointer per `kind`; borrowed */
  size_t size;      /* bytes; 0 is a no-op. dst/src need no alignment. */
  DK_Stream* stream; /* NULL: synchronous — the copy has finished when the call
                        returns; it is not ordered with any stream, so the
                        caller makes sure no stream uses dst/src meanwhile.
                        Otherwise: enqueued on `stream` and ordered with its
                        other work; host buffers must stay valid and unchanged
                        until the stream passes the copy. */
} DK_Memcpy_Args;
DK_DEFINE_STRUCT_SIZE(DK_Memcpy_Args, stream);
typedef DK_Error* DK_Memcpy(DK_Memcpy_Args* args);

/* ========================================================================== */
/*  Kernels                                                                   */
/* ========================================================================== */
/*
 * A kernel computes one base operator on tensor views, asynchronously on a
 * stream. Which base operators exist is fixed by DK_OpId below (append-only);
 * a plugin fills a DK_KernelTable with one entry per op it implements.
 *
 * Tensors cross as views. The SDK hands a kernel only views that satisfy the
 * capabilities the plugin declared for that op: with no capability bits, every
 * input and output is dense row-major contiguous, inputs already have the
 * output's shape (broadcasting materialised) and no output aliases an input.
 */

/* A tensor view. Owned by the SDK; valid only for the duration of the kernel
 * call (copy shape/strides if the work runs later). The memory `data` points
 * at must be used only by work enqueued on the kernel's stream.
 *
 * Strides of empty views (one rule for the SDK and every plugin): a view with
 * a dimension of size 0 has no element to address, so its strides carry no
 * meaning. The SDK gives a new tensor the row-major strides in which a size-0
 * dimension counts as size 1 (shape [3, 0] -> strides [1, 1]), and a plugin
 * must treat every view with zero elements as dense row-major contiguous
 * whatever its strides. The SDK launches no kernel whose outputs are all
 * empty; it does pass empty inputs to a kernel with a non-empty output (a
 * reduce_sum over an empty axis, which writes the identity, 0). Element
 * counts and byte sizes of every view fit in int64: the SDK refuses larger
 * shapes before anything is allocated. */
typedef struct DK_TensorView {
  size_t struct_size;
  void* data;             /* device pointer to element [0, ..., 0]; may be
                             NULL only when the view has zero elements */
  int32_t dtype;          /* a DK_DType */
  int32_t rank;           /* 0 .. DK_MAX_RANK; rank 0 is a scalar */
  const int64_t* shape;   /* [rank], every size >= 0; NULL when rank == 0 */
  const int64_t* strides; /* [rank], in elements, may be 0 (broadcast) but
                             never negative; NULL when rank == 0 */
} DK_TensorView;
DK_DEFINE_STRUCT_SIZE(DK_TensorView, strides);

#define DK_MAX_RANK 8

/* A scalar value carried in attributes. */
typedef struct DK_Scalar {
  int32_t dtype;         /* a DK_DType saying which member below is meaningful:
                            FLOAT64 for f, INT64 for i, BOOL for i in {0,1} */
  union {
    double f;
    int64_t i;
  } value;
} DK_Scalar;

/* The operators: DK_OpId (the base operators, with each op's signature,
 * attributes and semantics), DK_FusedOpId (the composite ops a plugin may
 * register fused kernels for), their counts per minor (DK_OP_COUNT_1_1, ...)
 * and the latest ones (DK_OP_COUNT, DK_FUSED_OP_COUNT), each base op's spec
 * dtype mask (DK_OP_DTYPES_<OP>) and the attribute structs. They are
 * generated from spec/base_ops.json by tools/gen_ops.py into a header of
 * their own, included here: read it as this part of this file. */
#include "device_api_ops.h"
#if DK_OPS_API_MINOR > DK_API_MINOR
/* spec/base_ops.json has ops of a newer minor than DK_API_MINOR. */
#error "the spec is newer than DK_API_MINOR: run tools/gen_ops.py (see Versioning above)"
#endif

typedef struct DK_Kernel_Args {
  size_t struct_size;
  int32_t device;
  DK_Stream* stream;  /* not NULL; the kernel is enqueued on this stream */
  int32_t op;         /* a DK_OpId */
  int32_t num_inputs;
  const DK_TensorView* const* inputs;  /* [num_inputs]; borrowed, call only */
  int32_t num_outputs;
  const DK_TensorView* const* outputs; /* [num_outputs]; borrowed, call only */
  const void* attrs;  /* op's attribute struct (begins with struct_size), or
                         NULL for ops without attributes; call only */
} DK_Kernel_Args;
DK_DEFINE_STRUCT_SIZE(DK_Kernel_Args, attrs);
/* Validates synchronously (bad arguments are returned here, before anything is
 * enqueued) and enqueues the computation on args->stream. Errors raised while
 * the work runs are reported by the next synchronize of that stream/device.
 * Must not write outside the output views' elements. Thread-safe.
 * The argument rules (spec/arg_rules.json lists them, one per rule stated in
 * this header and its op part) are checked here: a call that breaks one
 * returns DK_ERROR_INVALID_ARGUMENT and enqueues nothing. Views lie inside
 * live allocations of args->device (the SDK's promise); a plugin need not
 * check that, but one that does counts the view's byte offset into its
 * allocation. */
typedef DK_Error* DK_KernelFn(const DK_Kernel_Args* args);

/* Per-op capability bits (DK_KernelTable.caps). The SDK materialises (with
 * DK_OP_COPY) whatever a kernel did not declare it can take. */
/* inputs may be any non-negative strides (outputs stay dense row-major: only
 * copy writes strided outputs, whatever its bits) */
#define DK_KERNEL_CAP_STRIDED ((uint32_t)1 << 0)
/* inputs may have size-1 or missing leading dims to be broadcast to out's shape */
#define DK_KERNEL_CAP_BROADCAST ((uint32_t)1 << 1)
/* out[0] may alias in[0] exactly */
#define DK_KERNEL_CAP_INPLACE ((uint32_t)1 << 2)

typedef struct DK_KernelTable {
  size_t struct_size;
  /* Length of each array below. Ops with id >= num_ops are not implemented.
   * A plugin built against an older minor simply has a smaller num_ops. */
  int32_t num_ops;
  /* [num_ops], indexed by DK_OpId; a NULL entry means "not implemented".
   * Owned by the plugin, constant, valid until unload. */
  DK_KernelFn* const* kernels;
  /* [num_ops]: mask of DK_DTYPE_BIT(dt) the kernel accepts (for cast: input
   * dtypes; any output dtype the device stores is accepted). */
  const uint64_t* dtypes;
  /* [num_ops]: DK_KERNEL_CAP_* bits; NULL means all zero. */
  const uint32_t* caps;
} DK_KernelTable;
DK_DEFINE_STRUCT_SIZE(DK_KernelTable, caps);

/* ========================================================================== */
/*  Fused kernels (since 1.2)                                                 */
/* ========================================================================== */
/*
 * A composite op (DK_FusedOpId) is always defined by the SDK's decomposition
 * into base ops; a plugin may register fused kernels that compute it in one
 * launch. For each call the SDK offers, it asks the op's kernels in table
 * order and runs the first whose `supports` accepts; when none does, it runs
 * the decomposition. Which path ran is counted, never silent.
 *
 * The SDK offers a call only when the operands fit the op's signature in
 * DK_FusedOpId (ranks, matching sizes, same device); `supports` judges the
 * rest: dtypes, layouts, attribute values, sizes the kernel handles. There are
 * no capability bits here: a kernel that wants contiguous inputs says so in
 * `supports`, and the SDK takes the decomposition instead of copying.
 *
 * Both functions take a DK_Kernel_Args whose `op` is a DK_FusedOpId, whose
 * inputs are the op's inputs in order (an absent optional input is a NULL
 * entry) and whose attrs is the op's attribute struct (never NULL). The
 * outputs are allocated by the SDK: dense row-major, the shapes and dtypes
 * DK_FusedOpId gives, never aliasing an input.
 *
 * Backward ops (since 1.3). A fused op named <op>_backward computes the
 * gradients of <op>'s inputs from the gradient of its output (dout, always
 * input 0) and what it needs of the forward call; its definition is the
 * gradient of <op>'s decomposition, and conformance checks a kernel against
 * the gradients autograd computes through that decomposition. The SDK runs
 * <op>'s fused forward kernel while autograd records only when the plugin
 * registers a kernel for <op>_backward too, and asks that kernel's `supports`
 * when the gradient is needed; when it declines, the SDK recomputes the
 * decomposition and differentiates it. An output marked ? in DK_FusedOpId is
 * optional: its entry in DK_Kernel_Args.outputs is NULL when the SDK does
 * not want that gradient, and the kernel must then not compute it.
 */

/* What input 3 of scaled_dot_product_attention is (DK_SdpaAttrs.mask_kind). */
typedef enum DK_SdpaMaskKind {
  DK_SDPA_MASK_NONE = 0,     /* no mask: inputs[3] is NULL */
  DK_SDPA_MASK_BOOL = 1,     /* bool, true = attend */
  DK_SDPA_MASK_ADDITIVE = 2  /* floating, added to the scaled scores */
} DK_SdpaMaskKind;

/* "Can you run this call?" Called by the SDK before every launch it may make,
 * with output views that carry shape, dtype and strides but whose `data` is
 * NULL (nothing is allocated yet; input data pointers are real but must not
 * be dereferenced). Returns 1 to accept, 0 to decline; declining is not an
 * error. Must be pure (the same args give the same answer), fast (it runs on
 * every call), thread-safe and allocation-free; it may not enqueue anything. */
typedef int32_t DK_FusedSupportsFn(const DK_Kernel_Args* args);

typedef struct DK_FusedKernel {
  size_t struct_size;
  int32_t op;        /* a DK_FusedOpId below DK_FUSED_OP_COUNT of the plugin's
                        minor; the SDK refuses the plugin at load otherwise */
  const char* name;  /* NUL-terminated, [a-z0-9_.]+, unique within the plugin,
                        e.g. "cpu.sdpa_flash_f32"; shown in dispatch counters
                        and errors. Owned by the plugin, valid until unload.
                        Not NULL. */
  DK_FusedSupportsFn* supports; /* not NULL; see DK_FusedSupportsFn */
  /* Not NULL. Called only with args `supports` accepted, now with real output
   * data. Same contract as a base-op DK_KernelFn: validates synchronously,
   * enqueues on args->stream, reports run-time errors at the next
   * synchronize, thread-safe. */
  DK_KernelFn* launch;
} DK_FusedKernel;
DK_DEFINE_STRUCT_SIZE(DK_FusedKernel, launch);

typedef struct DK_FusedKernelTable {
  size_t struct_size;
  int32_t num_kernels; /* >= 0 */
  /* [num_kernels] pointers to kernels, each not NULL; any order, several per
   * op allowed (asked in this order). An array of pointers rather than of
   * structs so that a DK_FusedKernel grown in a later minor never changes the
   * array's stride: each entry's own struct_size says how much of it exists.
   * Owned by the plugin (array and entries), constant, valid until unload.
   * NULL only when num_kernels == 0. */
  const DK_FusedKernel* const* kernels;
} DK_FusedKernelTable;
DK_DEFINE_STRUCT_SIZE(DK_FusedKernelTable, kernels);

/* ========================================================================== */
/*  Extensions                                                                */
/* ========================================================================== */

/* A function-pointer field of DK_Api or of an extension table. */
#define DK_API_FN(name) DK_##name* name

/* Optional extensions (collectives, profiling, ...) form a singly linked list
 * from DK_Api.extension_start. Each begins with this header; the SDK skips
 * types it does not know. Owned by the plugin, constant, valid until unload. */
typedef struct DK_Extension_Base {
  size_t struct_size;
  int32_t type;                          /* DK_EXTENSION_* */
  const struct DK_Extension_Base* next;  /* NULL ends the list */
} DK_Extension_Base;
DK_DEFINE_STRUCT_SIZE(DK_Extension_Base, next);

/* Extension types (DK_Extension_Base.type). Append-only. A plugin lists at
 * most one extension of each type; the SDK reads an extension only from a
 * plugin whose api_minor is at least the type's "since", checks its
 * struct_size like DK_Api's, and reports a part that is absent (or that an
 * older plugin cannot have) as "not implemented", never as an error. */
#define DK_EXTENSION_COLLECTIVES 1 /* DK_Collectives, since 1.5 */
#define DK_EXTENSION_GRAPHS 2      /* DK_Graphs, since 1.5 */

/* -------------------------------------------------------------------------- */
/*  Collectives (optional, since 1.5)                                         */
/* -------------------------------------------------------------------------- */
/*
 * NCCL-shaped, stream-ordered collectives between the ranks of a
 * communicator, one device per rank (the ranks may live in different
 * processes). The collectives and reduce ops are data: DK_CollectiveId and
 * DK_CollReduceOp (device_api_ops.h, from spec/collectives.json, which also
 * states each call's buffer sizes and semantics).
 *
 * Numeric contract (spec/collectives.json "numeric_contract"): every rank
 * receives the same bits (one fixed reduction order, whatever the rank,
 * run, chunking or timing); integer results are exact; a float sum is within
 * nranks * eps * sum|x_r| of the exact sum; float16 / bfloat16 reductions
 * accumulate in float32 and round once.
 *
 * Never a hang: every call that waits for other ranks (Comm_Init and every
 * collective) gives up after the communicator's timeout and fails with
 * DK_ERROR_UNAVAILABLE, with a message naming the collective, the
 * communicator (its rank and nranks) and the ranks that did not arrive. A
 * mismatch between ranks (count, dtype, collective, op or root differ) is
 * reported as DK_ERROR_INVALID_ARGUMENT on every rank that can see it, and
 * as a timeout on the others. A collective enqueued on a stream reports
 * such an error at that stream's next synchronize (the stream's error path);
 * the communicator is then unusable (every later call fails with
 * DK_ERROR_FAILED_PRECONDITION) and is destroyed with Comm_Destroy; the
 * plugin can make new communicators afterwards.
 */
#define DK_COLL_UNIQUE_ID_BYTES 128
/* Default of DK_Comm_Init_Args.timeout_ms (used when it is 0): 5 minutes. */
#define DK_COLL_DEFAULT_TIMEOUT_MS 300000

/* Made by one rank (Comm_GetUniqueId), passed by the caller to every rank by
 * any means (DeviceKit's SDK uses torch's Store), plain bytes. */
typedef struct DK_CollUniqueId { char bytes[DK_COLL_UNIQUE_ID_BYTES]; } DK_CollUniqueId;

/* Opaque, created by the plugin: one rank's end of a communicator. */
typedef struct DK_Comm DK_Comm;

typedef struct DK_Comm_GetUniqueId_Args {
  size_t struct_size;
  int32_t device;
  DK_CollUniqueId id; /* out: identifies one communicator; never reused by
                         the plugin for another */
} DK_Comm_GetUniqueId_Args;
DK_DEFINE_STRUCT_SIZE(DK_Comm_GetUniqueId_Args, id);
typedef DK_Error* DK_Comm_GetUniqueId(DK_Comm_GetUniqueId_Args* args);

typedef struct DK_Comm_Init_Args {
  size_t struct_size;
  const DK_CollUniqueId* id; /* borrowed for the call; not NULL */
  int32_t nranks;            /* >= 1 */
  int32_t rank;              /* 0 <= rank < nranks; each rank once */
  int32_t device;            /* this rank's device ordinal */
  int64_t timeout_ms;        /* > 0, or 0 for DK_COLL_DEFAULT_TIMEOUT_MS */
  DK_Comm* comm;             /* out: owned by the caller until Comm_Destroy;
                                not NULL on success */
} DK_Comm_Init_Args;
DK_DEFINE_STRUCT_SIZE(DK_Comm_Init_Args, comm);
/* Blocks until all nranks ranks have called it with the same id and nranks,
 * or the timeout passes (DK_ERROR_UNAVAILABLE naming the missing ranks). */
typedef DK_Error* DK_Comm_Init(DK_Comm_Init_Args* args);

typedef struct DK_Comm_Destroy_Args {
  size_t struct_size;
  DK_Comm* comm; /* owned by the caller; invalid after this call; NULL: no-op */
} DK_Comm_Destroy_Args;
DK_DEFINE_STRUCT_SIZE(DK_Comm_Destroy_Args, comm);
/* Local: waits (within the timeout) for the comm's queued work, then frees
 * it and every resource it holds (shared memory included). Not collective. */
typedef DK_Error* DK_Comm_Destroy(DK_Comm_Destroy_Args* args);

typedef struct DK_Comm_Abort_Args {
  size_t struct_size;
  DK_Comm* comm; /* borrowed; not NULL */
} DK_Comm_Abort_Args;
DK_DEFINE_STRUCT_SIZE(DK_Comm_Abort_Args, comm);
/* May be called from any thread while other calls on `comm` are blocked or
 * queued: each of them ends promptly with DK_ERROR_UNAVAILABLE ("aborted"),
 * and so does every later call except Comm_Destroy. Idempotent. Never
 * concurrently with Comm_Destroy of the same comm: the caller orders the two
 * (abort, then destroy). */
typedef DK_Error* DK_Comm_Abort(DK_Comm_Abort_Args* args);

typedef struct DK_Coll_Run_Args {
  size_t struct_size;
  DK_Comm* comm;       /* borrowed; not NULL */
  DK_Stream* stream;   /* the comm's device; NULL: synchronous (returns when
                          this rank's part is done, errors returned here) */
  int32_t collective;  /* a DK_CollectiveId */
  const void* send;    /* device memory of send_count elements (spec); may
                          be NULL where the collective does not read it */
  void* recv;          /* device memory of recv_count elements (spec); may
                          equal send (or the offset the spec names) for
                          in-place calls; otherwise the two never overlap */
  int64_t count;       /* >= 0; 0 still synchronises the ranks */
  int32_t dtype;       /* a DK_DType the device stores */
  int32_t op;          /* a DK_CollReduceOp, for collectives with "reduce" */
  int32_t root;        /* for collectives with "root": 0 <= root < nranks */
  int32_t peer;        /* for send / recv: 0 <= peer < nranks, != rank */
} DK_Coll_Run_Args;
DK_DEFINE_STRUCT_SIZE(DK_Coll_Run_Args, peer);
/* Enqueues one collective on `stream`: it starts after the work queued
 * before it on that stream and the work queued after it waits for it. All
 * ranks call the same collectives in the same order, with the same count,
 * dtype, op and root. Arguments that break a rule of the spec or of this
 * struct return DK_ERROR_INVALID_ARGUMENT at once, enqueuing nothing. */
typedef DK_Error* DK_Coll_Run(DK_Coll_Run_Args* args);

typedef struct DK_Coll_Group_Args {
  size_t struct_size;
  int32_t end; /* 0: group start; 1: group end */
} DK_Coll_Group_Args;
DK_DEFINE_STRUCT_SIZE(DK_Coll_Group_Args, end);
/* Groups nest (a count per calling thread). Collectives and sends / recvs
 * run between a start and its end on the calling thread are issued together
 * at the outermost end, so matched sends and recvs in a group never
 * deadlock whatever their order on each rank. Errors of the grouped calls
 * are returned by (or reported after) the outermost end. */
typedef DK_Error* DK_Coll_Group(DK_Coll_Group_Args* args);

typedef struct DK_Collectives {
  DK_Extension_Base base; /* base.type == DK_EXTENSION_COLLECTIVES */
  /* Collectives the plugin implements: bit DK_CollectiveId; and the dtypes
   * (DK_DTYPE_BIT) and reduce ops (bit DK_CollReduceOp) it takes. A
   * collective, dtype or op outside them returns DK_ERROR_UNIMPLEMENTED. */
  uint64_t collectives;
  uint64_t dtypes;
  uint64_t reduce_ops;
  DK_API_FN(Comm_GetUniqueId);
  DK_API_FN(Comm_Init);
  DK_API_FN(Comm_Destroy);
  DK_API_FN(Comm_Abort);
  DK_API_FN(Coll_Run);
  DK_API_FN(Coll_Group);
} DK_Collectives;
DK_DEFINE_STRUCT_SIZE(DK_Collectives, Coll_Group);

/* -------------------------------------------------------------------------- */
/*  Graphs (optional, since 1.5)                                              */
/* -------------------------------------------------------------------------- */
/*
 * Capture the work enqueued on one stream, then launch it again and again
 * with no host work per captured call (CUDA graphs' shape). Between
 * Graph_Capture(stream, end = 0) ("begin capture") and Graph_Capture(stream,
 * end = 1) ("end capture"), kernel launches,
 * fused-kernel launches, device-to-device Memcpy and Stream_WaitEvent /
 * Event_Record on that stream are recorded, not run; their arguments
 * (views with their data pointers, shapes, strides and attribute structs)
 * are copied at the call, so the caller's argument structs need not live.
 * Rules while a stream captures:
 * - No host synchronisation: Stream_Synchronize, Stream_Query,
 *   Event_Synchronize of an event recorded in the capture, Device_Synchronize
 *   of its device, and a Memcpy to or from host memory on it return
 *   DK_ERROR_FAILED_PRECONDITION and invalidate the capture (its end
 *   capture then returns that error and no graph).
 * - No allocation inside the graph: Memory_Allocate / Memory_Free are host
 *   calls and are not captured. Every buffer a captured call touches is
 *   allocated before capture (DeviceKit's SDK gives each graph a private
 *   memory pool) and must stay allocated until the graph is destroyed.
 * - Capture does not nest: a begin capture on a capturing stream returns
 *   DK_ERROR_FAILED_PRECONDITION (the capture goes on).
 * Graph_Launch enqueues the whole recorded sequence on any stream of the
 * graph's device, in the recorded order, as if each call were enqueued
 * there again with the recorded arguments (so it reads the buffers' current
 * contents); results are bitwise those of running the calls eagerly.
 */
typedef struct DK_Graph DK_Graph; /* opaque, created by the plugin */

typedef struct DK_Graph_Capture_Args {
  size_t struct_size;
  DK_Stream* stream; /* borrowed; not NULL */
  int32_t end;       /* 0: begin capture; 1: end capture */
  DK_Graph* graph;   /* out (end only): owned by the caller until
                        Graph_Destroy; not NULL on success */
} DK_Graph_Capture_Args;
DK_DEFINE_STRUCT_SIZE(DK_Graph_Capture_Args, graph);
typedef DK_Error* DK_Graph_Capture(DK_Graph_Capture_Args* args);

typedef struct DK_Graph_Launch_Args {
  size_t struct_size;
  DK_Graph* graph;   /* borrowed; not NULL */
  DK_Stream* stream; /* borrowed; a stream of the graph's device; not NULL */
} DK_Graph_Launch_Args;
DK_DEFINE_STRUCT_SIZE(DK_Graph_Launch_Args, stream);
/* Run-time errors of the recorded calls are reported at the stream's next
 * synchronize, as for eager launches. */
typedef DK_Error* DK_Graph_Launch(DK_Graph_Launch_Args* args);

typedef struct DK_Graph_Destroy_Args {
  size_t struct_size;
  DK_Graph* graph; /* owned by the caller; invalid after this call; NULL: no-op */
} DK_Graph_Destroy_Args;
DK_DEFINE_STRUCT_SIZE(DK_Graph_Destroy_Args, graph);
/* May be called while launches of the graph are queued: they still run, and
 * the plugin frees the graph after the last of them. */
typedef DK_Error* DK_Graph_Destroy(DK_Graph_Destroy_Args* args);

typedef struct DK_Graphs {
  DK_Extension_Base base; /* base.type == DK_EXTENSION_GRAPHS */
  DK_API_FN(Graph_Capture);
  DK_API_FN(Graph_Launch);
  DK_API_FN(Graph_Destroy);
} DK_Graphs;
DK_DEFINE_STRUCT_SIZE(DK_Graphs, Graph_Destroy);

/* ========================================================================== */
/*  The function table                                                        */
/* ========================================================================== */

typedef struct DK_Api {
  size_t struct_size; /* DK_Api_STRUCT_SIZE_<major>_<minor> of the plugin's header */
  const DK_Extension_Base* extension_start; /* NULL when none */
  int32_t api_major;  /* DK_API_MAJOR the plugin was built with */
  int32_t api_minor;  /* DK_API_MINOR the plugin was built with */

  DK_API_FN(Error_Destroy);
  DK_API_FN(Error_Message);
  DK_API_FN(Error_GetCode);

  DK_API_FN(Plugin_Initialize);
  DK_API_FN(Plugin_GetInfo);

  DK_API_FN(Device_Count);
  DK_API_FN(Device_GetProperties);
  DK_API_FN(Device_MemoryStats);
  DK_API_FN(Device_Synchronize);

  DK_API_FN(Memory_Allocate);
  DK_API_FN(Memory_Free);

  DK_API_FN(Memcpy);

  DK_API_FN(Stream_Create);
  DK_API_FN(Stream_Destroy);
  DK_API_FN(Stream_Synchronize);
  DK_API_FN(Stream_Query);
  DK_API_FN(Stream_WaitEvent);

  DK_API_FN(Event_Create);
  DK_API_FN(Event_Destroy);
  DK_API_FN(Event_Record);
  DK_API_FN(Event_Query);
  DK_API_FN(Event_Synchronize);
  DK_API_FN(Event_ElapsedTime);

  /* Owned by the plugin, constant, valid until unload. Never NULL. */
  const DK_KernelTable* kernels;

  /* Since 1.2. The fused-kernel registry; NULL when the plugin has none.
   * Owned by the plugin, constant, valid until unload; read by the SDK only
   * when api_minor >= 2 (an older plugin's table ends before this field). */
  const DK_FusedKernelTable* fused_kernels;
} DK_Api;
DK_DEFINE_STRUCT_SIZE(DK_Api, fused_kernels);

/* The size DK_Api had at each minor of this major (rule 4 above),
 * DK_Api_STRUCT_SIZE_1_0 .. DK_Api_STRUCT_SIZE_1_<DK_API_MINOR>, are defined
 * in device_api_ops.h from the spec's "versions" (api_struct_ends_at), named
 * by the last field of that minor so the value never moves when fields are
 * appended. */
DK_STATIC_ASSERT(DK_Api_STRUCT_SIZE_LATEST == DK_Api_STRUCT_SIZE,
                 "DK_Api's last field is not the newest spec version's api_struct_ends_at");

/* ========================================================================== */
/*  Entry point                                                               */
/* ========================================================================== */

/* The one symbol a plugin exports. Returns a pointer to a constant table that
 * lives until the library is unloaded; never NULL. Must do no work beyond
 * returning the table (initialisation happens in Plugin_Initialize), so the
 * SDK can check versions before anything runs. */
#define DK_ENTRY_SYMBOL "DK_GetApi"

#if defined(_WIN32)
#define DK_EXPORT __declspec(dllexport)
#else
#define DK_EXPORT __attribute__((visibility("default")))
#endif

typedef const DK_Api* DK_GetApi_Fn(void);

#ifdef __cplusplus
}
#endif

#endif /* DEVICEKIT_DEVICE_API_H_ */
