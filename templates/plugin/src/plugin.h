/* What the plugin's files share: the error object, argument checks, the
 * per-device limits, and every function that goes into the DK_Api table.
 *
 * Everything here is hidden (CMakeLists.txt: -fvisibility=hidden and
 * exports.map); DK_GetApi in api.c is the only exported symbol. */
#ifndef PLUGIN_H_
#define PLUGIN_H_

#include <stdint.h>

#include <devicekit/device_api.h>

#include "plugin_info.h"

/* ---- Devices ----------------------------------------------------------------
 * This template simulates devices in host memory. Replace these with queries
 * to your driver in Plugin_Initialize. */
#define PLUGIN_NUM_DEVICES 1
#define PLUGIN_ALIGNMENT 64 /* bytes; a power of two >= 16 (header) */
#define PLUGIN_DEFAULT_MEMORY ((uint64_t)2 << 30) /* 2 GiB unless PLUGIN_MEMORY_ENV */

/* Bytes each device may allocate; fixed by Plugin_Initialize. */
extern uint64_t plugin_total_memory;

/* ---- Errors -------------------------------------------------------------------
 * The object behind the opaque DK_Error*. Owned by whoever received it, freed
 * with Error_Destroy. */
struct DK_Error {
  int32_t code;   /* a DK_ErrorCode */
  char message[]; /* NUL-terminated; "NAME.Call: what was expected, what was found. Hint: ..." */
};

/* printf-style. Never fails: without memory it returns a static error that
 * Error_Destroy knows not to free. */
DK_Error* plugin_error(DK_ErrorCode code, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ---- Argument checks, shared by every call ----------------------------------- */

/* Initialised, args not NULL, struct_size at least what this header defines.
 * A larger struct_size is a newer SDK and fine: we read only our fields. */
DK_Error* plugin_check_args(const char* call, const void* args, size_t given, size_t needed,
                            const char* type);
#define PLUGIN_CHECK_ARGS(call, args, Type)                                              \
  do {                                                                                   \
    DK_Error* e_ = plugin_check_args(call, args, (args) ? (args)->struct_size : 0,       \
                                     Type##_STRUCT_SIZE, #Type);                         \
    if (e_ != NULL) return e_;                                                           \
  } while (0)

DK_Error* plugin_check_device(const char* call, int32_t device); /* OUT_OF_RANGE */
/* NULL, destroyed, or (device >= 0) on another device -> INVALID_ARGUMENT. */
DK_Error* plugin_check_stream(const char* call, const DK_Stream* stream, int32_t device);

/* ---- The functions in the DK_Api table (api.c) ------------------------------- */

/* plugin.c */
void plugin_Error_Destroy(DK_Error_Destroy_Args* args);
void plugin_Error_Message(DK_Error_Message_Args* args);
void plugin_Error_GetCode(DK_Error_GetCode_Args* args);
DK_Error* plugin_Plugin_Initialize(DK_Plugin_Initialize_Args* args);
DK_Error* plugin_Plugin_GetInfo(DK_Plugin_GetInfo_Args* args);
DK_Error* plugin_Device_Count(DK_Device_Count_Args* args);
DK_Error* plugin_Device_GetProperties(DK_Device_GetProperties_Args* args);

/* memory.c */
DK_Error* plugin_Device_MemoryStats(DK_Device_MemoryStats_Args* args);
DK_Error* plugin_Memory_Allocate(DK_Memory_Allocate_Args* args);
DK_Error* plugin_Memory_Free(DK_Memory_Free_Args* args);
DK_Error* plugin_Memcpy(DK_Memcpy_Args* args);

/* stream.c */
DK_Error* plugin_Device_Synchronize(DK_Device_Synchronize_Args* args);
DK_Error* plugin_Stream_Create(DK_Stream_Create_Args* args);
DK_Error* plugin_Stream_Destroy(DK_Stream_Destroy_Args* args);
DK_Error* plugin_Stream_Synchronize(DK_Stream_Synchronize_Args* args);
DK_Error* plugin_Stream_Query(DK_Stream_Query_Args* args);
DK_Error* plugin_Stream_WaitEvent(DK_Stream_WaitEvent_Args* args);
DK_Error* plugin_Event_Create(DK_Event_Create_Args* args);
DK_Error* plugin_Event_Destroy(DK_Event_Destroy_Args* args);
DK_Error* plugin_Event_Record(DK_Event_Record_Args* args);
DK_Error* plugin_Event_Query(DK_Event_Query_Args* args);
DK_Error* plugin_Event_Synchronize(DK_Event_Synchronize_Args* args);
DK_Error* plugin_Event_ElapsedTime(DK_Event_ElapsedTime_Args* args);

/* kernels.c: one function per implemented row of ops.def */
DK_Error* plugin_kernel_add(const DK_Kernel_Args* args);

/* The entry point; the header gives its type (DK_GetApi_Fn) but no prototype. */
DK_EXPORT const DK_Api* DK_GetApi(void);

#endif /* PLUGIN_H_ */
