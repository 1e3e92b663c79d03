/* Passes every version check, then Plugin_Initialize reports that its driver
 * is missing, as a real vendor plugin does on a machine without the hardware.
 * Expected: PluginLoadError carrying this message verbatim. */
#define BP_PLUGIN_NAME "bad_init_fails"
#include "bad_plugin_common.h"

static DK_Error* init_fails_initialize(DK_Plugin_Initialize_Args* args) {
  (void)args;
  return dkh_error(DK_ERROR_UNAVAILABLE, "acme driver 3.2 not found; install acme-driver>=3.2");
}

static const DK_Api kApi =
    BP_API(DK_Api_STRUCT_SIZE, DK_API_MAJOR, DK_API_MINOR, init_fails_initialize,
           bp_memory_allocate, &bp_empty_kernel_table);

DK_EXPORT const DK_Api* DK_GetApi(void) { return &kApi; }
