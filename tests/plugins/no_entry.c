/* A valid shared library that exports no DK_GetApi. The table is complete;
 * only the entry symbol is misspelt (DK_GetAPI), the kind of slip that makes
 * dlsym fail. Expected: PluginLoadError naming DK_GetApi. */
#define BP_PLUGIN_NAME "bad_no_entry"
#include "bad_plugin_common.h"

static const DK_Api kApi = BP_API_DEFAULT(DK_Api_STRUCT_SIZE_1_0, DK_API_MAJOR, DK_API_MINOR);

DK_EXPORT const DK_Api* DK_GetAPI(void) { return &kApi; }
