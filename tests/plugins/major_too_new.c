/* Claims the next MAJOR of the device API (e.g. 2.0 against an SDK for 1.x).
 * Expected: PluginVersionError naming both versions, saying the plugin is
 * newer and which devicekit to install. */
#define BP_PLUGIN_NAME "bad_major_too_new"
#include "bad_plugin_common.h"

static const DK_Api kApi = BP_API_DEFAULT(DK_Api_STRUCT_SIZE_1_0, DK_API_MAJOR + 1, DK_API_MINOR);

DK_EXPORT const DK_Api* DK_GetApi(void) { return &kApi; }
