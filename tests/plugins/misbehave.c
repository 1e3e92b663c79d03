/* One plugin, many ways to misbehave: built once per way with -DMISBEHAVE=N
 * (the numbers are the MB_* below; tests/test_load_isolation.py and
 * tests/test_boundary.py name them). Without MISBEHAVE it is a well-behaved
 * plugin named "misbehave" (BP_PLUGIN_NAME may be overridden with -D), which
 * counts its Plugin_Initialize calls and error objects in exported variables
 * that the tests read through ctypes. Each misbehaviour is one the SDK must
 * survive: a crash, hang or exit while loading becomes a load error; a value
 * the header forbids becomes an error naming the rule. */
#ifndef BP_PLUGIN_NAME
#define BP_PLUGIN_NAME "misbehave"
#endif
#include "bad_plugin_common.h"

#include <limits.h>
#include <stdint.h>
#include <unistd.h>

#define MB_NONE 0
#define MB_SEGV_GETAPI 1     /* DK_GetApi dereferences NULL */
#define MB_ABORT_INIT 2      /* Plugin_Initialize calls abort() */
#define MB_CTOR_ABORT 3      /* a library constructor calls abort() (during dlopen) */
#define MB_HANG_INIT 4       /* Plugin_Initialize never returns */
#define MB_EXIT_INIT 5       /* Plugin_Initialize calls exit(0) */
#define MB_COUNT_NEG 6       /* Device_Count: -1 */
#define MB_COUNT_MAX 7       /* Device_Count: INT32_MAX */
#define MB_ALIGN_0 8         /* alignment 0 */
#define MB_ALIGN_48 9        /* alignment 48 (not a power of two) */
#define MB_ALLOC_NULL 10     /* Memory_Allocate: success with ptr NULL */
#define MB_ALLOC_MISALIGNED 11 /* Memory_Allocate: success with ptr 8 bytes off */
#define MB_STREAM_NULL 12    /* Stream_Create / Event_Create: success with NULL */
#define MB_NAME_EMPTY 13     /* Plugin_GetInfo name "" */
#define MB_NAME_BAD 14       /* name "Bad-Name" */
#define MB_NAME_NOT_UTF8 15  /* name "\xff\xfe" */
#define MB_TEXT_NOT_UTF8 16  /* vendor and device name are not UTF-8 */
#define MB_MSG_HUGE 17       /* Error_Message: message_size = 2^40 */
#define MB_MSG_LONG 18       /* a 100 KiB error message */
#define MB_UNKNOWN_CODE 19   /* an error with code 1234 */
#define MB_PROPS_ERROR 20    /* two devices; GetProperties of device 1 fails */
#define MB_COUNT_FAILS 21    /* Device_Count returns an error */

#ifndef MISBEHAVE
#define MISBEHAVE MB_NONE
#endif

/* The failing Memory_Allocate of the error modes fires at this size and up. */
#define MB_FAIL_SIZE ((size_t)1 << 30)
#define MB_LONG_MESSAGE_BYTES (100 * 1024)

DK_EXPORT int misbehave_initialize_calls = 0;
DK_EXPORT long misbehave_errors_created = 0;
DK_EXPORT long misbehave_errors_destroyed = 0;

#if MISBEHAVE == MB_CTOR_ABORT
__attribute__((constructor)) static void mb_constructor(void) { abort(); }
#endif

BP_STATIC DK_Error* mb_error(DK_ErrorCode code, const char* message) {
  ++misbehave_errors_created;
  return dkh_error(code, "%s", message);
}

static void mb_error_destroy(DK_Error_Destroy_Args* a) {
  ++misbehave_errors_destroyed;
  dkh_Error_Destroy(a);
}

static void mb_error_message(DK_Error_Message_Args* a) {
  dkh_Error_Message(a);
#if MISBEHAVE == MB_MSG_HUGE
  a->message_size = (size_t)1 << 40; /* far past the real end of the string */
#endif
}

static DK_Error* mb_initialize(DK_Plugin_Initialize_Args* a) {
  ++misbehave_initialize_calls;
#if MISBEHAVE == MB_ABORT_INIT
  abort();
#elif MISBEHAVE == MB_HANG_INIT
  for (;;) pause();
#elif MISBEHAVE == MB_EXIT_INIT
  exit(0);
#endif
  return bp_plugin_initialize(a);
}

static DK_Error* mb_get_info(DK_Plugin_GetInfo_Args* a) {
  DK_Error* e = bp_plugin_get_info(a);
#if MISBEHAVE == MB_NAME_EMPTY
  a->name = "";
#elif MISBEHAVE == MB_NAME_BAD
  a->name = "Bad-Name";
#elif MISBEHAVE == MB_NAME_NOT_UTF8
  a->name = "\xff\xfe";
#elif MISBEHAVE == MB_TEXT_NOT_UTF8
  a->vendor = "Acme \xff Corp";
#endif
  return e;
}

static DK_Error* mb_device_count(DK_Device_Count_Args* a) {
  DK_Error* e = bp_device_count(a);
#if MISBEHAVE == MB_COUNT_NEG
  a->count = -1;
#elif MISBEHAVE == MB_COUNT_MAX
  a->count = INT32_MAX;
#elif MISBEHAVE == MB_PROPS_ERROR
  a->count = 2;
#elif MISBEHAVE == MB_COUNT_FAILS
  (void)e;
  return mb_error(DK_ERROR_UNAVAILABLE, "misbehave.Device_Count: deliberate failure");
#endif
  return e;
}

static DK_Error* mb_get_properties(DK_Device_GetProperties_Args* a) {
#if MISBEHAVE == MB_PROPS_ERROR
  if (a->device == 1)
    return mb_error(DK_ERROR_INTERNAL, "misbehave.Device_GetProperties: device 1 is broken");
  int32_t device = a->device;
  a->device = 0; /* the shared helper knows one device; device 0 answers for both */
  DK_Error* e = bp_device_get_properties(a);
  a->device = device;
#else
  DK_Error* e = bp_device_get_properties(a);
#endif
#if MISBEHAVE == MB_ALIGN_0
  a->alignment = 0;
#elif MISBEHAVE == MB_ALIGN_48
  a->alignment = 48;
#elif MISBEHAVE == MB_TEXT_NOT_UTF8
  a->name = "X1 \xc3( rev \xed\xa0\x80";
#endif
  return e;
}

static DK_Error* mb_allocate(DK_Memory_Allocate_Args* a) {
#if MISBEHAVE == MB_MSG_HUGE || MISBEHAVE == MB_MSG_LONG || MISBEHAVE == MB_UNKNOWN_CODE
  if (a->size >= MB_FAIL_SIZE) {
    a->ptr = NULL;
#if MISBEHAVE == MB_MSG_HUGE
    return mb_error(DK_ERROR_OUT_OF_MEMORY, "misbehave.Memory_Allocate: message_size lies");
#elif MISBEHAVE == MB_UNKNOWN_CODE
    return mb_error((DK_ErrorCode)1234, "misbehave.Memory_Allocate: a code from the future");
#else
    static char long_message[MB_LONG_MESSAGE_BYTES + 1];
    memset(long_message, 'x', MB_LONG_MESSAGE_BYTES);
    long_message[MB_LONG_MESSAGE_BYTES] = '\0';
    return mb_error(DK_ERROR_OUT_OF_MEMORY, long_message);
#endif
  }
#endif
  DK_Error* e = bp_memory_allocate(a);
#if MISBEHAVE == MB_ALLOC_NULL
  if (e == NULL && a->ptr != NULL) {
    DK_Memory_Free_Args f = {DK_Memory_Free_Args_STRUCT_SIZE, a->device, a->ptr};
    bp_memory_free(&f);
    a->ptr = NULL;
  }
#elif MISBEHAVE == MB_ALLOC_MISALIGNED
  if (e == NULL && a->ptr != NULL) a->ptr = (unsigned char*)a->ptr + 8;
#endif
  return e;
}

static DK_Error* mb_free(DK_Memory_Free_Args* a) {
#if MISBEHAVE == MB_ALLOC_MISALIGNED
  if (a->ptr != NULL) a->ptr = (unsigned char*)a->ptr - 8; /* undo the offset */
#endif
  return bp_memory_free(a);
}

static DK_Error* mb_stream_create(DK_Stream_Create_Args* a) {
  DK_Error* e = bp_stream_create(a);
#if MISBEHAVE == MB_STREAM_NULL
  free(a->stream);
  a->stream = NULL;
#endif
  return e;
}

static DK_Error* mb_event_create(DK_Event_Create_Args* a) {
  DK_Error* e = bp_event_create(a);
#if MISBEHAVE == MB_STREAM_NULL
  free(a->event);
  a->event = NULL;
#endif
  return e;
}

DK_EXPORT const DK_Api* DK_GetApi(void) {
#if MISBEHAVE == MB_SEGV_GETAPI
  volatile int* volatile nowhere = NULL;
  *nowhere = 1;
#endif
  static DK_Api api;
  static const DK_Api base = BP_API(DK_Api_STRUCT_SIZE, DK_API_MAJOR, DK_API_MINOR, mb_initialize,
                                    mb_allocate, &bp_empty_kernel_table);
  api = base;
  api.Error_Destroy = mb_error_destroy;
  api.Error_Message = mb_error_message;
  api.Plugin_GetInfo = mb_get_info;
  api.Device_Count = mb_device_count;
  api.Device_GetProperties = mb_get_properties;
  api.Memory_Free = mb_free;
  api.Stream_Create = mb_stream_create;
  api.Event_Create = mb_event_create;
  return &api;
}
