/* The two tables the SDK reads, and the one exported symbol.
 *
 * Designated initializers name every slot, so a missing or misplaced entry is
 * obvious at a glance. */
#include "plugin.h"

/* The kernel table is three arrays indexed by DK_OpId. Their rows live in
 * ops.def, one line per base op, so an op's kernel, dtypes and capability
 * bits sit side by side; each array below picks one column. */
#define PLUGIN_NO_KERNEL(id) PLUGIN_OP(id, NULL, 0, 0)
static DK_KernelFn* const kKernels[] = {
#define PLUGIN_OP(id, fn, dtypes, caps) [DK_OP_##id] = fn,
#include "ops.def"
#undef PLUGIN_OP
};

static const uint64_t kDtypes[] = {
#define PLUGIN_OP(id, fn, dtypes, caps) [DK_OP_##id] = (dtypes),
#include "ops.def"
#undef PLUGIN_OP
};

static const uint32_t kCaps[] = {
#define PLUGIN_OP(id, fn, dtypes, caps) [DK_OP_##id] = (caps),
#include "ops.def"
#undef PLUGIN_OP
};
#undef PLUGIN_NO_KERNEL

/* ops.def lists every op of the API this plugin was generated for. */
_Static_assert(sizeof(kKernels) / sizeof(kKernels[0]) == PLUGIN_NUM_OPS,
               "ops.def must have one row per base op");

const DK_KernelTable plugin_kernel_table = {
    .struct_size = DK_KernelTable_STRUCT_SIZE,
    .num_ops = PLUGIN_NUM_OPS,
    .kernels = kKernels,
    .dtypes = kDtypes,
    .caps = kCaps,
};

/* The version this plugin claims is the one it targets (plugin_info.h), not
 * the header's DK_API_MINOR: the header may be newer, never older. */
_Static_assert(PLUGIN_API_MAJOR == DK_API_MAJOR && PLUGIN_API_MINOR <= DK_API_MINOR,
               "include/devicekit/device_api.h is older than PLUGIN_API_MINOR: "
               "run devicekit upgrade-api");
/* DK_Api_STRUCT_SIZE_<major>_<minor> of the targeted version (header rule 4). */
#define PLUGIN_API_SIZE_(major, minor) DK_Api_STRUCT_SIZE_##major##_##minor
#define PLUGIN_API_SIZE(major, minor) PLUGIN_API_SIZE_(major, minor)

static const DK_Api kApi = {
    .struct_size = PLUGIN_API_SIZE(PLUGIN_API_MAJOR, PLUGIN_API_MINOR),
    .extension_start = NULL,
    .api_major = PLUGIN_API_MAJOR,
    .api_minor = PLUGIN_API_MINOR,

    /* Error_* (<devicekit/plugin_helpers.h>'s dkh_Error_*) and the 22 runtime
     * calls (plugin.h), slot by slot: <devicekit/plugin_runtime.h>. */
    DKH_RUNTIME_API_ENTRIES(plugin),

    .kernels = &plugin_kernel_table,
};

/* The only exported symbol (exports.map). Does no work, as the header
 * requires: the SDK checks the version fields before calling anything. */
DK_EXPORT const DK_Api* DK_GetApi(void) { return &kApi; }
