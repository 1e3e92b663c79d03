/* The two tables the SDK reads, and the one exported symbol.
 *
 * Designated initializers name every slot, so a missing or misplaced entry is
 * obvious at a glance. */
#include "plugin.h"

/* The kernel table is three arrays indexed by DK_OpId. Their rows live in
 * ops.def, one line per base op, so an op's kernel, dtypes and capability
 * bits sit side by side; each array below picks one column. */
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

/* ops.def lists every op of the API this plugin was generated for. */
_Static_assert(sizeof(kKernels) / sizeof(kKernels[0]) == PLUGIN_NUM_OPS,
               "ops.def must have one row per base op");

static const DK_KernelTable kKernelTable = {
    .struct_size = DK_KernelTable_STRUCT_SIZE,
    .num_ops = PLUGIN_NUM_OPS,
    .kernels = kKernels,
    .dtypes = kDtypes,
    .caps = kCaps,
};

static const DK_Api kApi = {
    .struct_size = DK_Api_STRUCT_SIZE,
    .extension_start = NULL,
    .api_major = DK_API_MAJOR, /* the header's version: what this binary speaks */
    .api_minor = DK_API_MINOR,

    .Error_Destroy = plugin_Error_Destroy,
    .Error_Message = plugin_Error_Message,
    .Error_GetCode = plugin_Error_GetCode,

    .Plugin_Initialize = plugin_Plugin_Initialize,
    .Plugin_GetInfo = plugin_Plugin_GetInfo,

    .Device_Count = plugin_Device_Count,
    .Device_GetProperties = plugin_Device_GetProperties,
    .Device_MemoryStats = plugin_Device_MemoryStats,
    .Device_Synchronize = plugin_Device_Synchronize,

    .Memory_Allocate = plugin_Memory_Allocate,
    .Memory_Free = plugin_Memory_Free,

    .Memcpy = plugin_Memcpy,

    .Stream_Create = plugin_Stream_Create,
    .Stream_Destroy = plugin_Stream_Destroy,
    .Stream_Synchronize = plugin_Stream_Synchronize,
    .Stream_Query = plugin_Stream_Query,
    .Stream_WaitEvent = plugin_Stream_WaitEvent,

    .Event_Create = plugin_Event_Create,
    .Event_Destroy = plugin_Event_Destroy,
    .Event_Record = plugin_Event_Record,
    .Event_Query = plugin_Event_Query,
    .Event_Synchronize = plugin_Event_Synchronize,
    .Event_ElapsedTime = plugin_Event_ElapsedTime,

    .kernels = &kKernelTable,
};

/* The only exported symbol (exports.map). Does no work, as the header
 * requires: the SDK checks the version fields before calling anything. */
DK_EXPORT const DK_Api* DK_GetApi(void) { return &kApi; }
