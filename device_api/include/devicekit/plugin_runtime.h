/*
 * DeviceKit plugin runtime: what every plugin's runtime glue restates, once.
 *
 * The C part (C11 or C++; the scaffold template uses it): the check
 * Plugin_Initialize makes before anything else (struct, called once, the
 * API major), and two macros that name a plugin's runtime calls, so the
 * DK_Api table and the calls' declarations are written once for every plugin
 * instead of 22 lines each. The C++ part, the memory, stream and error
 * helpers a C++ plugin's runtime is written over, is plugin_runtime.hpp.
 *
 * Optional and header-only, like plugin_helpers.h (which it includes): every
 * function is `static inline`, thread-safe and keeps no state; nothing crosses
 * the plugin boundary. Identifiers start with dkh_ / DKH_.
 */
#ifndef DEVICEKIT_PLUGIN_RUNTIME_H_
#define DEVICEKIT_PLUGIN_RUNTIME_H_

#include "plugin_helpers.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ========================================================================== */
/*  Plugin_Initialize: the version check                                      */
/* ========================================================================== */

/* What Plugin_Initialize checks before it touches a device: args not NULL
 * and its struct_size at least this header's; not initialised already
 * (`initialized`: the plugin's own flag; the header says "called once", so a
 * second call is an SDK bug worth hearing about); the SDK's device API major
 * equal to the one the plugin was built for (`major`.`minor`: usually
 * DK_API_MAJOR and DK_API_MINOR). NULL, or the error to return, naming
 * `call`. Reads only *args. */
static inline DK_Error* dkh_check_initialize(const char* call,
                                             const DK_Plugin_Initialize_Args* args, int initialized,
                                             int32_t major, int32_t minor) {
  if (args == NULL || args->struct_size < DK_Plugin_Initialize_Args_STRUCT_SIZE)
    return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                     "%s: args is NULL or struct_size %zu < %zu. Hint: set it with "
                     "DK_Plugin_Initialize_Args_STRUCT_SIZE.",
                     call, args ? args->struct_size : (size_t)0,
                     (size_t)DK_Plugin_Initialize_Args_STRUCT_SIZE);
  if (initialized)
    return dkh_error(DK_ERROR_FAILED_PRECONDITION,
                     "%s: called a second time in this process; expected exactly once. "
                     "Hint: load each plugin once per process and reuse it.",
                     call);
  if (args->sdk_api_major != major)
    return dkh_error(DK_ERROR_FAILED_PRECONDITION,
                     "%s: the SDK speaks device API %d.%d, this plugin was built for %d.%d; "
                     "majors must match. Hint: install a devicekit %d.x release.",
                     call, (int)args->sdk_api_major, (int)args->sdk_api_minor, (int)major,
                     (int)minor, (int)major);
  return NULL;
}

/* The error a call made before Plugin_Initialize returns
 * (DK_ERROR_FAILED_PRECONDITION), naming `call`. */
static inline DK_Error* dkh_not_initialized(const char* call) {
  return dkh_error(DK_ERROR_FAILED_PRECONDITION,
                   "%s: called before Plugin_Initialize. Hint: the SDK must call "
                   "Plugin_Initialize once, right after checking the version.",
                   call);
}

/* ========================================================================== */
/*  The runtime calls, named once                                             */
/* ========================================================================== */

/* Declares a plugin's 22 runtime calls, <prefix>_Plugin_Initialize to
 * <prefix>_Event_ElapsedTime (everything in DK_Api but Error_* and the
 * tables). Use it in the plugin's own header, inside extern "C". */
#define DKH_DECLARE_RUNTIME_CALLS(prefix)                                      \
  DK_Error* prefix##_Plugin_Initialize(DK_Plugin_Initialize_Args* args);       \
  DK_Error* prefix##_Plugin_GetInfo(DK_Plugin_GetInfo_Args* args);             \
  DK_Error* prefix##_Device_Count(DK_Device_Count_Args* args);                 \
  DK_Error* prefix##_Device_GetProperties(DK_Device_GetProperties_Args* args); \
  DK_Error* prefix##_Device_MemoryStats(DK_Device_MemoryStats_Args* args);     \
  DK_Error* prefix##_Device_Synchronize(DK_Device_Synchronize_Args* args);     \
  DK_Error* prefix##_Memory_Allocate(DK_Memory_Allocate_Args* args);           \
  DK_Error* prefix##_Memory_Free(DK_Memory_Free_Args* args);                   \
  DK_Error* prefix##_Memcpy(DK_Memcpy_Args* args);                             \
  DK_Error* prefix##_Stream_Create(DK_Stream_Create_Args* args);               \
  DK_Error* prefix##_Stream_Destroy(DK_Stream_Destroy_Args* args);             \
  DK_Error* prefix##_Stream_Synchronize(DK_Stream_Synchronize_Args* args);     \
  DK_Error* prefix##_Stream_Query(DK_Stream_Query_Args* args);                 \
  DK_Error* prefix##_Stream_WaitEvent(DK_Stream_WaitEvent_Args* args);         \
  DK_Error* prefix##_Event_Create(DK_Event_Create_Args* args);                 \
  DK_Error* prefix##_Event_Destroy(DK_Event_Destroy_Args* args);               \
  DK_Error* prefix##_Event_Record(DK_Event_Record_Args* args);                 \
  DK_Error* prefix##_Event_Query(DK_Event_Query_Args* args);                   \
  DK_Error* prefix##_Event_Synchronize(DK_Event_Synchronize_Args* args);       \
  DK_Error* prefix##_Event_ElapsedTime(DK_Event_ElapsedTime_Args* args)

/* The DK_Api slots of the error object (plugin_helpers.h's dkh_Error_*) and
 * of the 22 runtime calls, as designated initializers (C): put it inside the
 * plugin's `static const DK_Api kApi = { ... }` after the version fields. */
#define DKH_RUNTIME_API_ENTRIES(prefix)                                                           \
  .Error_Destroy = dkh_Error_Destroy, .Error_Message = dkh_Error_Message,                         \
  .Error_GetCode = dkh_Error_GetCode, .Plugin_Initialize = prefix##_Plugin_Initialize,            \
  .Plugin_GetInfo = prefix##_Plugin_GetInfo, .Device_Count = prefix##_Device_Count,               \
  .Device_GetProperties = prefix##_Device_GetProperties,                                          \
  .Device_MemoryStats = prefix##_Device_MemoryStats,                                              \
  .Device_Synchronize = prefix##_Device_Synchronize, .Memory_Allocate = prefix##_Memory_Allocate, \
  .Memory_Free = prefix##_Memory_Free, .Memcpy = prefix##_Memcpy,                                 \
  .Stream_Create = prefix##_Stream_Create, .Stream_Destroy = prefix##_Stream_Destroy,             \
  .Stream_Synchronize = prefix##_Stream_Synchronize, .Stream_Query = prefix##_Stream_Query,       \
  .Stream_WaitEvent = prefix##_Stream_WaitEvent, .Event_Create = prefix##_Event_Create,           \
  .Event_Destroy = prefix##_Event_Destroy, .Event_Record = prefix##_Event_Record,                 \
  .Event_Query = prefix##_Event_Query, .Event_Synchronize = prefix##_Event_Synchronize,           \
  .Event_ElapsedTime = prefix##_Event_ElapsedTime

#ifdef __cplusplus
}
#endif

#endif /* DEVICEKIT_PLUGIN_RUNTIME_H_ */
