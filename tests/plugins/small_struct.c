/* Claims the current version but a DK_Api.struct_size that stops after
 * Plugin_GetInfo: a corrupt (or mis-built) table, not an old one, since 1.0 is
 * the first version. The full table is still there, so an SDK that read past
 * struct_size would not crash, only be wrong. Expected: PluginVersionError
 * naming both byte sizes, which this library also exports for the test. */
#define BP_PLUGIN_NAME "bad_small_struct"
#include "bad_plugin_common.h"

#define SMALL_SIZE DK_STRUCT_SIZE(DK_Api, Plugin_GetInfo)

static const DK_Api kApi = BP_API_DEFAULT(SMALL_SIZE, DK_API_MAJOR, DK_API_MINOR);

DK_EXPORT const DK_Api* DK_GetApi(void) { return &kApi; }

/* Read by tests/test_loader.py through ctypes, so the expected message does
 * not hard-code this platform's pointer size. */
DK_EXPORT const size_t small_struct_claimed_size = SMALL_SIZE;
DK_EXPORT const size_t small_struct_expected_size = DK_Api_STRUCT_SIZE;
