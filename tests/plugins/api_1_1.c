/* A correct device API 1.1 plugin, built with today's header: it claims 1.1
 * and its DK_Api ends at DK_Api_STRUCT_SIZE_1_1, before fused_kernels. It must
 * keep loading (promise 1). The bytes past its struct_size hold a pointer that
 * is not a table, so an SDK that read fused_kernels from a 1.1 plugin would
 * crash or refuse it instead of silently passing. */
#define BP_PLUGIN_NAME "api_one_one"
#include "bad_plugin_common.h"

static const DK_Api kApi = {
    BP_API_FIELDS(DK_Api_STRUCT_SIZE_1_1, 1, 1, bp_plugin_initialize, bp_memory_allocate,
                  &bp_empty_kernel_table),
    .fused_kernels = (const DK_FusedKernelTable*)(uintptr_t)0x10, /* not there in 1.1 */
};

DK_EXPORT const DK_Api* DK_GetApi(void) { return &kApi; }
