/* Errors, argument checks, Plugin_Initialize, Plugin_GetInfo and devices. */
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plugin.h"

uint64_t plugin_total_memory;
static atomic_int initialized;

/* ---- Errors ------------------------------------------------------------------ */

/* Handed out when even the error cannot be allocated. */
static struct {
  int32_t code;
  char message[64];
} out_of_memory_error = {DK_ERROR_OUT_OF_MEMORY, PLUGIN_NAME ": out of host memory"};
#define OUT_OF_MEMORY_ERROR ((DK_Error*)&out_of_memory_error)

DK_Error* plugin_error(DK_ErrorCode code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  const int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  DK_Error* e = malloc(sizeof(DK_Error) + (n > 0 ? (size_t)n : 0) + 1);
  if (e == NULL) return OUT_OF_MEMORY_ERROR;
  e->code = code;
  va_start(ap, fmt);
  vsnprintf(e->message, (n > 0 ? (size_t)n : 0) + 1, fmt, ap);
  va_end(ap);
  return e;
}

void plugin_Error_Destroy(DK_Error_Destroy_Args* args) {
  if (args == NULL || args->struct_size < DK_Error_Destroy_Args_STRUCT_SIZE) return;
  if (args->error != OUT_OF_MEMORY_ERROR) free(args->error);
}

void plugin_Error_Message(DK_Error_Message_Args* args) {
  if (args == NULL || args->struct_size < DK_Error_Message_Args_STRUCT_SIZE ||
      args->error == NULL)
    return;
  args->message = args->error->message;
  args->message_size = strlen(args->error->message);
}

void plugin_Error_GetCode(DK_Error_GetCode_Args* args) {
  if (args == NULL || args->struct_size < DK_Error_GetCode_Args_STRUCT_SIZE ||
      args->error == NULL)
    return;
  args->code = args->error->code;
}

/* ---- Argument checks --------------------------------------------------------- */

DK_Error* plugin_check_args(const char* call, const void* args, size_t given, size_t needed,
                            const char* type) {
  if (!atomic_load(&initialized))
    return plugin_error(DK_ERROR_FAILED_PRECONDITION,
                        "%s: called before Plugin_Initialize. Hint: the SDK calls "
                        "Plugin_Initialize once, right after checking the version.", call);
  if (args == NULL)
    return plugin_error(DK_ERROR_INVALID_ARGUMENT, "%s: args is NULL; expected a %s*", call,
                        type);
  if (given < needed)
    return plugin_error(DK_ERROR_INVALID_ARGUMENT,
                        "%s: %s.struct_size is %zu, expected at least %zu. Hint: set it "
                        "with %s_STRUCT_SIZE.", call, type, given, needed, type);
  return NULL;
}

DK_Error* plugin_check_device(const char* call, int32_t device) {
  if (device < 0 || device >= PLUGIN_NUM_DEVICES)
    return plugin_error(DK_ERROR_OUT_OF_RANGE,
                        "%s: device ordinal %d is out of range; this plugin has %d device(s), "
                        PLUGIN_NAME ":0.." PLUGIN_NAME ":%d", call, device, PLUGIN_NUM_DEVICES,
                        PLUGIN_NUM_DEVICES - 1);
  return NULL;
}

/* ---- Plugin ------------------------------------------------------------------ */

DK_Error* plugin_Plugin_Initialize(DK_Plugin_Initialize_Args* args) {
  static const char* const kCall = PLUGIN_NAME ".Plugin_Initialize";
  if (args == NULL || args->struct_size < DK_Plugin_Initialize_Args_STRUCT_SIZE)
    return plugin_error(DK_ERROR_INVALID_ARGUMENT, "%s: args is NULL or struct_size too "
                        "small. Hint: set it with DK_Plugin_Initialize_Args_STRUCT_SIZE.", kCall);
  if (atomic_load(&initialized))
    return plugin_error(DK_ERROR_FAILED_PRECONDITION, "%s: called a second time; expected "
                        "exactly once per process", kCall);
  if (args->sdk_api_major != DK_API_MAJOR)
    return plugin_error(DK_ERROR_FAILED_PRECONDITION,
                        "%s: the SDK speaks device API %d.%d, this plugin was built for %d.%d; "
                        "majors must match. Hint: install a devicekit release for API %d.x.",
                        kCall, args->sdk_api_major, args->sdk_api_minor, DK_API_MAJOR,
                        DK_API_MINOR, DK_API_MAJOR);

  /* A real plugin opens its driver here and returns DK_ERROR_UNAVAILABLE with
   * the driver's own message when there is none: `devicekit devices` shows it. */
  plugin_total_memory = PLUGIN_DEFAULT_MEMORY;
  const char* env = getenv(PLUGIN_MEMORY_ENV);
  if (env != NULL) {
    char* end = NULL;
    errno = 0;
    const unsigned long long v = strtoull(env, &end, 10);
    if (errno != 0 || end == env || *end != '\0' || v == 0 || env[0] == '-')
      return plugin_error(DK_ERROR_INVALID_ARGUMENT, "%s: %s='%s'; expected a positive number "
                          "of bytes. Hint: unset it for the default.", kCall, PLUGIN_MEMORY_ENV,
                          env);
    plugin_total_memory = v;
  }
  atomic_store(&initialized, 1);
  return NULL;
}

DK_Error* plugin_Plugin_GetInfo(DK_Plugin_GetInfo_Args* args) {
  PLUGIN_CHECK_ARGS(PLUGIN_NAME ".Plugin_GetInfo", args, DK_Plugin_GetInfo_Args);
  args->name = PLUGIN_NAME;
  args->vendor = PLUGIN_VENDOR;
  args->version = PLUGIN_VERSION; /* from pyproject.toml, via CMakeLists.txt */
  args->attributes = "memory=host\nstreams=synchronous";
  return NULL;
}

/* ---- Devices ----------------------------------------------------------------- */

DK_Error* plugin_Device_Count(DK_Device_Count_Args* args) {
  PLUGIN_CHECK_ARGS(PLUGIN_NAME ".Device_Count", args, DK_Device_Count_Args);
  args->count = PLUGIN_NUM_DEVICES;
  return NULL;
}

DK_Error* plugin_Device_GetProperties(DK_Device_GetProperties_Args* args) {
  static const char* const kCall = PLUGIN_NAME ".Device_GetProperties";
  PLUGIN_CHECK_ARGS(kCall, args, DK_Device_GetProperties_Args);
  DK_Error* e = plugin_check_device(kCall, args->device);
  if (e != NULL) return e;
  args->name = PLUGIN_NAME " device (simulated in host memory)";
  args->total_memory = plugin_total_memory;
  /* Not DK_DEVICE_CAP_ASYNC_COPY: copies run synchronously (stream.c). */
  args->capabilities = DK_DEVICE_CAP_HOST_MEMORY | DK_DEVICE_CAP_TIMING_EVENTS;
  /* The dtypes the device can store (copy/fill work on them); what each kernel
   * computes is declared per op in ops.def. */
  args->dtypes = DK_DTYPE_MASK_ALL_1_0;
  args->alignment = PLUGIN_ALIGNMENT;
  return NULL;
}
