/* The two tables a vendor fills in, and the one exported symbol.
 *
 * Written in C for its designated initializers: each slot is named, so a
 * missing or misplaced entry is obvious at a glance (C++17 has no such thing).
 * The same file serves both builds (real CUDA and the emulator): only
 * Plugin_GetInfo's name differs. */
#include "api.h"

#include <devicekit/plugin_helpers.h> /* dkh_Error_*: the error object's three calls */

/* The kernel table is three arrays indexed by DK_OpId. Their rows live in
 * ops_*.def, one line per op, so an op's kernel, dtypes and capability bits
 * sit side by side; each array below picks one column. A slot without a row
 * is NULL: "not implemented", which the SDK reports (or decomposes), never
 * silently falls back from. */
static DK_KernelFn* const kKernels[DK_OP_COUNT] = {
#define DKCUDA_OP(id, fn, dtypes, caps) [DK_OP_##id] = fn,
#include "ops_1_0.def"
#include "ops_1_1.def"
#undef DKCUDA_OP
};

static const uint64_t kDtypes[DK_OP_COUNT] = {
#define DKCUDA_OP(id, fn, dtypes, caps) [DK_OP_##id] = (dtypes),
#include "ops_1_0.def"
#include "ops_1_1.def"
#undef DKCUDA_OP
};

static const uint32_t kCaps[DK_OP_COUNT] = {
#define DKCUDA_OP(id, fn, dtypes, caps) [DK_OP_##id] = (caps),
#include "ops_1_0.def"
#include "ops_1_1.def"
#undef DKCUDA_OP
};

const DK_KernelTable dk_cuda_kernel_table = {
    .struct_size = DK_KernelTable_STRUCT_SIZE,
    .num_ops = DK_OP_COUNT,
    .kernels = kKernels,
    .dtypes = kDtypes,
    .caps = kCaps,
};

/* The fused-kernel registry: one DK_FusedKernel per row of fused.def, and the
 * array of pointers to them that the table holds. */
#define DKCUDA_FUSED(id, kname, supports_fn, launch_fn) \
  static const DK_FusedKernel kFused_##launch_fn = {    \
      .struct_size = DK_FusedKernel_STRUCT_SIZE,        \
      .op = DK_FUSED_##id,                              \
      .name = kname,                                    \
      .supports = supports_fn,                          \
      .launch = launch_fn,                              \
  };
#include "fused.def"
#undef DKCUDA_FUSED

/* C has no empty arrays: a NULL ends the list and is not counted, so
 * fused.def may have no rows. */
static const DK_FusedKernel* const kFusedKernels[] = {
#define DKCUDA_FUSED(id, kname, supports_fn, launch_fn) &kFused_##launch_fn,
#include "fused.def"
#undef DKCUDA_FUSED
    NULL,
};

static const DK_FusedKernelTable kFusedKernelTable = {
    .struct_size = DK_FusedKernelTable_STRUCT_SIZE,
    .num_kernels = (int32_t)(sizeof(kFusedKernels) / sizeof(kFusedKernels[0]) - 1),
    .kernels = kFusedKernels,
};

static const DK_Api kApi = {
    .struct_size = DK_Api_STRUCT_SIZE_1_2,
    .extension_start = NULL,
    .api_major = DK_API_MAJOR,
    .api_minor = DK_API_MINOR,

    .Error_Destroy = dkh_Error_Destroy,
    .Error_Message = dkh_Error_Message,
    .Error_GetCode = dkh_Error_GetCode,

    .Plugin_Initialize = dk_cuda_Plugin_Initialize,
    .Plugin_GetInfo = dk_cuda_Plugin_GetInfo,

    .Device_Count = dk_cuda_Device_Count,
    .Device_GetProperties = dk_cuda_Device_GetProperties,
    .Device_MemoryStats = dk_cuda_Device_MemoryStats,
    .Device_Synchronize = dk_cuda_Device_Synchronize,

    .Memory_Allocate = dk_cuda_Memory_Allocate,
    .Memory_Free = dk_cuda_Memory_Free,

    .Memcpy = dk_cuda_Memcpy,

    .Stream_Create = dk_cuda_Stream_Create,
    .Stream_Destroy = dk_cuda_Stream_Destroy,
    .Stream_Synchronize = dk_cuda_Stream_Synchronize,
    .Stream_Query = dk_cuda_Stream_Query,
    .Stream_WaitEvent = dk_cuda_Stream_WaitEvent,

    .Event_Create = dk_cuda_Event_Create,
    .Event_Destroy = dk_cuda_Event_Destroy,
    .Event_Record = dk_cuda_Event_Record,
    .Event_Query = dk_cuda_Event_Query,
    .Event_Synchronize = dk_cuda_Event_Synchronize,
    .Event_ElapsedTime = dk_cuda_Event_ElapsedTime,

    .kernels = &dk_cuda_kernel_table,
    .fused_kernels = &kFusedKernelTable,
};

/* The only exported symbol (exports.map). Does no work, as the header
 * requires: the SDK checks the version fields before calling anything. */
DK_EXPORT const DK_Api* DK_GetApi(void) { return &kApi; }
