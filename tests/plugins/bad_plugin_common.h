/*
 * Shared scaffolding for the purpose-built bad plugins in tests/plugins.
 *
 * Each bad plugin is wrong in exactly one way; everything else about it is a
 * valid device API 1.0 plugin, so the SDK has no second reason to refuse it.
 * This header supplies that "everything else": a tiny, fully synchronous
 * host-memory runtime (one device; every copy and kernel has finished when the
 * call returns, so streams and events are trivially ordered). The error object
 * and the argument checks are <devicekit/plugin_helpers.h>'s, as a vendor
 * plugin's would be. Built only against the public headers.
 *
 * Usage, in a plugin source:
 *   #define BP_PLUGIN_NAME "badthing"   // Plugin_GetInfo name, [a-z][a-z0-9_]*
 *   #include "bad_plugin_common.h"
 *   static const DK_Api kApi = BP_API(size, major, minor, init, alloc, kernels);
 *   DK_EXPORT const DK_Api* DK_GetApi(void) { return &kApi; }
 */
#ifndef DEVICEKIT_TESTS_BAD_PLUGIN_COMMON_H_
#define DEVICEKIT_TESTS_BAD_PLUGIN_COMMON_H_

/* -std=c11 hides POSIX; clock_gettime needs it. Must precede system headers. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <devicekit/device_api.h>
#ifndef BP_HELPERS_PROVIDED /* tests/fixtures/device_api_1_0/glue_1_0.h: 1.0 predates them */
#include <devicekit/plugin_helpers.h>
#endif

#ifndef BP_PLUGIN_NAME
#error "define BP_PLUGIN_NAME before including bad_plugin_common.h"
#endif

/* Every helper is static (nothing but DK_GetApi is exported) and may go unused
 * in a plugin that overrides it, hence the attribute (GCC/Clang). */
#define BP_STATIC static __attribute__((unused))

#define BP_ALIGNMENT 64
/* fictional; the test plugins only ever hold a few KiB */
#define BP_TOTAL_MEMORY ((uint64_t)1 << 40)

/* ---- errors and argument checks: plugin_helpers.h's ---------------------- */

/* Refuse NULL args or a struct older than the one this plugin was built with. */
#define BP_REQUIRE_ARGS(args, type) DKH_CHECK_STRUCT(BP_PLUGIN_NAME, args, type)

/* One device: ordinal 0. */
#define BP_REQUIRE_DEVICE(args)                                                            \
  do {                                                                                     \
    DK_Error* bp_e_ = dkh_check_device(BP_PLUGIN_NAME, BP_PLUGIN_NAME, (args)->device, 1); \
    if (bp_e_ != NULL) return bp_e_;                                                       \
  } while (0)

/* ---- plugin and device --------------------------------------------------- */

BP_STATIC DK_Error* bp_plugin_initialize(DK_Plugin_Initialize_Args* a) {
  BP_REQUIRE_ARGS(a, DK_Plugin_Initialize_Args);
  return NULL;
}

BP_STATIC DK_Error* bp_plugin_get_info(DK_Plugin_GetInfo_Args* a) {
  BP_REQUIRE_ARGS(a, DK_Plugin_GetInfo_Args);
  a->name = BP_PLUGIN_NAME;
  a->vendor = "DeviceKit tests";
  a->version = "0.0.1";
  a->attributes = "purpose=deliberately broken test plugin";
  return NULL;
}

BP_STATIC DK_Error* bp_device_count(DK_Device_Count_Args* a) {
  BP_REQUIRE_ARGS(a, DK_Device_Count_Args);
  a->count = 1;
  return NULL;
}

BP_STATIC DK_Error* bp_device_get_properties(DK_Device_GetProperties_Args* a) {
  BP_REQUIRE_ARGS(a, DK_Device_GetProperties_Args);
  BP_REQUIRE_DEVICE(a);
  a->name = BP_PLUGIN_NAME " test device (host memory)";
  a->total_memory = BP_TOTAL_MEMORY;
  a->capabilities = DK_DEVICE_CAP_HOST_MEMORY | DK_DEVICE_CAP_TIMING_EVENTS;
  a->dtypes = DK_DTYPE_MASK_ALL_1_0;
  a->alignment = BP_ALIGNMENT;
  return NULL;
}

static _Atomic uint64_t bp_bytes_in_use, bp_peak_bytes_in_use, bp_num_allocs;

BP_STATIC DK_Error* bp_device_memory_stats(DK_Device_MemoryStats_Args* a) {
  BP_REQUIRE_ARGS(a, DK_Device_MemoryStats_Args);
  BP_REQUIRE_DEVICE(a);
  a->bytes_in_use = atomic_load(&bp_bytes_in_use);
  a->peak_bytes_in_use = atomic_load(&bp_peak_bytes_in_use);
  a->num_allocs = atomic_load(&bp_num_allocs);
  return NULL;
}

BP_STATIC DK_Error* bp_device_synchronize(DK_Device_Synchronize_Args* a) {
  BP_REQUIRE_ARGS(a, DK_Device_Synchronize_Args);
  BP_REQUIRE_DEVICE(a);
  return NULL; /* all work is synchronous */
}

/* ---- memory: host memory, the requested size kept in a prefix ------------ */

BP_STATIC DK_Error* bp_memory_allocate(DK_Memory_Allocate_Args* a) {
  BP_REQUIRE_ARGS(a, DK_Memory_Allocate_Args);
  BP_REQUIRE_DEVICE(a);
  a->ptr = NULL;
  if (a->size == 0) return NULL;
  if (a->size > BP_TOTAL_MEMORY)
    return dkh_error(DK_ERROR_OUT_OF_MEMORY,
                     BP_PLUGIN_NAME ".Memory_Allocate: request exceeds total_memory");
  size_t body = (a->size + BP_ALIGNMENT - 1) / BP_ALIGNMENT * BP_ALIGNMENT;
  unsigned char* base = aligned_alloc(BP_ALIGNMENT, BP_ALIGNMENT + body);
  if (base == NULL)
    return dkh_error(DK_ERROR_OUT_OF_MEMORY,
                     BP_PLUGIN_NAME ".Memory_Allocate: host aligned_alloc failed");
  memcpy(base, &a->size, sizeof(a->size));
  uint64_t now = atomic_fetch_add(&bp_bytes_in_use, a->size) + a->size;
  uint64_t peak = atomic_load(&bp_peak_bytes_in_use);
  while (now > peak && !atomic_compare_exchange_weak(&bp_peak_bytes_in_use, &peak, now)) {}
  atomic_fetch_add(&bp_num_allocs, 1);
  a->ptr = base + BP_ALIGNMENT;
  return NULL;
}

BP_STATIC DK_Error* bp_memory_free(DK_Memory_Free_Args* a) {
  BP_REQUIRE_ARGS(a, DK_Memory_Free_Args);
  BP_REQUIRE_DEVICE(a);
  if (a->ptr == NULL) return NULL;
  unsigned char* base = (unsigned char*)a->ptr - BP_ALIGNMENT;
  size_t size;
  memcpy(&size, base, sizeof(size));
  atomic_fetch_sub(&bp_bytes_in_use, size);
  atomic_fetch_sub(&bp_num_allocs, 1);
  free(base);
  return NULL;
}

BP_STATIC DK_Error* bp_memcpy(DK_Memcpy_Args* a) {
  BP_REQUIRE_ARGS(a, DK_Memcpy_Args);
  BP_REQUIRE_DEVICE(a);
  if (a->size != 0) memcpy(a->dst, a->src, a->size); /* synchronous, any stream */
  return NULL;
}

/* ---- streams and events: nothing is ever pending ------------------------- */

struct DK_Stream { int unused; };
struct DK_Event {
  int recorded;
  struct timespec when;
};

BP_STATIC DK_Error* bp_stream_create(DK_Stream_Create_Args* a) {
  BP_REQUIRE_ARGS(a, DK_Stream_Create_Args);
  BP_REQUIRE_DEVICE(a);
  a->stream = calloc(1, sizeof(DK_Stream));
  return a->stream
             ? NULL
             : dkh_error(DK_ERROR_OUT_OF_MEMORY, BP_PLUGIN_NAME ".Stream_Create: calloc failed");
}

BP_STATIC DK_Error* bp_stream_destroy(DK_Stream_Destroy_Args* a) {
  BP_REQUIRE_ARGS(a, DK_Stream_Destroy_Args);
  free(a->stream);
  return NULL;
}

BP_STATIC DK_Error* bp_stream_synchronize(DK_Stream_Synchronize_Args* a) {
  BP_REQUIRE_ARGS(a, DK_Stream_Synchronize_Args);
  return NULL;
}

BP_STATIC DK_Error* bp_stream_query(DK_Stream_Query_Args* a) {
  BP_REQUIRE_ARGS(a, DK_Stream_Query_Args);
  a->idle = 1;
  return NULL;
}

BP_STATIC DK_Error* bp_stream_wait_event(DK_Stream_WaitEvent_Args* a) {
  BP_REQUIRE_ARGS(a, DK_Stream_WaitEvent_Args);
  return NULL;
}

BP_STATIC DK_Error* bp_event_create(DK_Event_Create_Args* a) {
  BP_REQUIRE_ARGS(a, DK_Event_Create_Args);
  BP_REQUIRE_DEVICE(a);
  a->event = calloc(1, sizeof(DK_Event));
  return a->event
             ? NULL
             : dkh_error(DK_ERROR_OUT_OF_MEMORY, BP_PLUGIN_NAME ".Event_Create: calloc failed");
}

BP_STATIC DK_Error* bp_event_destroy(DK_Event_Destroy_Args* a) {
  BP_REQUIRE_ARGS(a, DK_Event_Destroy_Args);
  free(a->event);
  return NULL;
}

BP_STATIC DK_Error* bp_event_record(DK_Event_Record_Args* a) {
  BP_REQUIRE_ARGS(a, DK_Event_Record_Args);
  a->event->recorded = 1;
  clock_gettime(CLOCK_MONOTONIC, &a->event->when);
  return NULL;
}

BP_STATIC DK_Error* bp_event_query(DK_Event_Query_Args* a) {
  BP_REQUIRE_ARGS(a, DK_Event_Query_Args);
  a->reached = 1;
  return NULL;
}

BP_STATIC DK_Error* bp_event_synchronize(DK_Event_Synchronize_Args* a) {
  BP_REQUIRE_ARGS(a, DK_Event_Synchronize_Args);
  return NULL;
}

BP_STATIC DK_Error* bp_event_elapsed_time(DK_Event_ElapsedTime_Args* a) {
  BP_REQUIRE_ARGS(a, DK_Event_ElapsedTime_Args);
  if (!a->start->recorded || !a->end->recorded)
    return dkh_error(DK_ERROR_FAILED_PRECONDITION,
                     BP_PLUGIN_NAME ".Event_ElapsedTime: both events must be recorded");
  a->milliseconds = (double)(a->end->when.tv_sec - a->start->when.tv_sec) * 1e3 +
                    (double)(a->end->when.tv_nsec - a->start->when.tv_nsec) / 1e6;
  return NULL;
}

/* ---- kernels: none by default (a NULL entry means "not implemented") ----- */

BP_STATIC DK_KernelFn* const bp_no_kernels[DK_OP_COUNT_1_0] = {NULL};
BP_STATIC const uint64_t bp_no_kernel_dtypes[DK_OP_COUNT_1_0] = {0};
BP_STATIC const DK_KernelTable bp_empty_kernel_table = {
    .struct_size = DK_KernelTable_STRUCT_SIZE,
    .num_ops = DK_OP_COUNT_1_0,
    .kernels = bp_no_kernels,
    .dtypes = bp_no_kernel_dtypes,
    .caps = NULL,
};

/* ---- the table ------------------------------------------------------------ */

/* The fields of a complete DK_Api initializer; the arguments are the knobs
 * the bad plugins turn. Every other entry is a valid function from this
 * header, and fused_kernels is NULL. A plugin that needs another field (a
 * fused-kernel table) writes `{BP_API_FIELDS(...), .fused_kernels = ...}`. */
#define BP_API_FIELDS(size, major, minor, initialize, allocate, kernel_table)                     \
  .struct_size = (size), .extension_start = NULL, .api_major = (major), .api_minor = (minor),     \
  .Error_Destroy = dkh_Error_Destroy, .Error_Message = dkh_Error_Message,                         \
  .Error_GetCode = dkh_Error_GetCode, .Plugin_Initialize = (initialize),                          \
  .Plugin_GetInfo = bp_plugin_get_info, .Device_Count = bp_device_count,                          \
  .Device_GetProperties = bp_device_get_properties, .Device_MemoryStats = bp_device_memory_stats, \
  .Device_Synchronize = bp_device_synchronize, .Memory_Allocate = (allocate),                     \
  .Memory_Free = bp_memory_free, .Memcpy = bp_memcpy, .Stream_Create = bp_stream_create,          \
  .Stream_Destroy = bp_stream_destroy, .Stream_Synchronize = bp_stream_synchronize,               \
  .Stream_Query = bp_stream_query, .Stream_WaitEvent = bp_stream_wait_event,                      \
  .Event_Create = bp_event_create, .Event_Destroy = bp_event_destroy,                             \
  .Event_Record = bp_event_record, .Event_Query = bp_event_query,                                 \
  .Event_Synchronize = bp_event_synchronize, .Event_ElapsedTime = bp_event_elapsed_time,          \
  .kernels = (kernel_table)

/* A complete DK_Api initializer (see BP_API_FIELDS). */
#define BP_API(size, major, minor, initialize, allocate, kernel_table) \
  {BP_API_FIELDS(size, major, minor, initialize, allocate, kernel_table)}

/* The usual case: a correct 1.0 table with the default pieces. */
#define BP_API_DEFAULT(size, major, minor) \
  BP_API(size, major, minor, bp_plugin_initialize, bp_memory_allocate, &bp_empty_kernel_table)

#endif /* DEVICEKIT_TESTS_BAD_PLUGIN_COMMON_H_ */
