/* Plugin_Initialize, Plugin_GetInfo and devices. Error objects and the generic
 * argument checks are <devicekit/plugin_helpers.h>'s, the version check
 * <devicekit/plugin_runtime.h>'s (dkh_*). */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "plugin.h"

#ifdef PLUGIN_COVERAGE
/* A coverage build (CMakeLists.txt): counters written when a worker is stopped */
#include <devicekit/plugin_coverage.h>
#endif

uint64_t plugin_total_memory;
static atomic_int initialized;

/* ---- Argument checks --------------------------------------------------------- */

DK_Error* plugin_check_initialized(const char* call) {
  return atomic_load(&initialized) ? NULL : dkh_not_initialized(call);
}

/* ---- Plugin ------------------------------------------------------------------ */

DK_Error* plugin_Plugin_Initialize(DK_Plugin_Initialize_Args* args) {
  static const char* const kCall = PLUGIN_NAME ".Plugin_Initialize";
  /* args, called once, the SDK's API major against the targeted one */
  DK_Error* e = dkh_check_initialize(kCall, args, atomic_load(&initialized), PLUGIN_API_MAJOR,
                                     PLUGIN_API_MINOR);
  if (e != NULL) return e;

  /* A real plugin opens its driver here and returns DK_ERROR_UNAVAILABLE with
   * the driver's own message when there is none: `devicekit devices` shows it. */
  plugin_total_memory = PLUGIN_DEFAULT_MEMORY;
  const char* env = getenv(PLUGIN_MEMORY_ENV);
  if (env != NULL) {
    char* end = NULL;
    errno = 0;
    const unsigned long long v = strtoull(env, &end, 10);
    if (errno != 0 || end == env || *end != '\0' || v == 0 || env[0] == '-')
      return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                       "%s: %s='%s'; expected a positive number "
                       "of bytes. Hint: unset it for the default.",
                       kCall, PLUGIN_MEMORY_ENV, env);
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
