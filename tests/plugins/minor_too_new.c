/* Claims a MINOR newer than the SDK's (e.g. 1.1 against an SDK for 1.0). Such a
 * plugin may rely on SDK behaviour this SDK lacks, so it is refused (header,
 * versioning rule 3). Expected: PluginVersionError naming both versions. */
#define BP_PLUGIN_NAME "bad_minor_too_new"
#include "bad_plugin_common.h"

static const DK_Api kApi = BP_API_DEFAULT(DK_Api_STRUCT_SIZE_1_0, DK_API_MAJOR, DK_API_MINOR + 1);

DK_EXPORT const DK_Api* DK_GetApi(void) { return &kApi; }
