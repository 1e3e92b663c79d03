/* A loadable plugin (one device "errplug:0", host memory) whose calls fail on
 * purpose, to check that plugin errors reach the user with their code and
 * message intact:
 * - Memory_Allocate refuses any request of ERRORS_PLUGIN_OOM_LIMIT bytes or
 *   more with OUT_OF_MEMORY. Smaller requests succeed, because the add kernel
 *   below can only be reached with tensors that exist.
 * - the add kernel (every dtype) returns INVALID_ARGUMENT from validation.
 * - one fused kernel, for rms_norm, accepts every call and whose launch
 *   returns INVALID_ARGUMENT.
 * No other kernel is implemented. */
#define BP_PLUGIN_NAME "errplug"
#include "bad_plugin_common.h"

#define ERRORS_PLUGIN_OOM_LIMIT ((size_t)1 << 30)

/* Keep these two strings in sync with tests/test_loader.py. */
#define ERRORS_PLUGIN_OOM_MESSAGE                                                              \
  "errors_plugin.Memory_Allocate: deliberate out-of-memory (requests of 1 GiB or more always " \
  "fail)"
#define ERRORS_PLUGIN_ADD_MESSAGE "errors_plugin.add: deliberate failure"
#define ERRORS_PLUGIN_FUSED_MESSAGE "errors_plugin.rms_norm: deliberate failure"

static DK_Error* errors_plugin_allocate(DK_Memory_Allocate_Args* args) {
  BP_REQUIRE_ARGS(args, DK_Memory_Allocate_Args);
  if (args->size >= ERRORS_PLUGIN_OOM_LIMIT) {
    args->ptr = NULL;
    return dkh_error(DK_ERROR_OUT_OF_MEMORY, ERRORS_PLUGIN_OOM_MESSAGE);
  }
  return bp_memory_allocate(args);
}

static DK_Error* errors_plugin_add(const DK_Kernel_Args* args) {
  (void)args;
  return dkh_error(DK_ERROR_INVALID_ARGUMENT, ERRORS_PLUGIN_ADD_MESSAGE);
}

static DK_KernelFn* const kKernels[DK_OP_COUNT_1_0] = {[DK_OP_ADD] = errors_plugin_add};
static const uint64_t kKernelDtypes[DK_OP_COUNT_1_0] = {[DK_OP_ADD] = DK_DTYPE_MASK_ALL_1_0};
static const DK_KernelTable kKernelTable = {
    .struct_size = DK_KernelTable_STRUCT_SIZE,
    .num_ops = DK_OP_COUNT_1_0,
    .kernels = kKernels,
    .dtypes = kKernelDtypes,
    .caps = NULL,
};

static int32_t errors_plugin_accept_all(const DK_Kernel_Args* args) {
  (void)args;
  return 1;
}

static DK_Error* errors_plugin_rms_norm(const DK_Kernel_Args* args) {
  (void)args;
  return dkh_error(DK_ERROR_INVALID_ARGUMENT, ERRORS_PLUGIN_FUSED_MESSAGE);
}

static const DK_FusedKernel kRmsNorm = {DK_FusedKernel_STRUCT_SIZE, DK_FUSED_RMS_NORM,
                                        "errplug.rms_norm_fails", errors_plugin_accept_all,
                                        errors_plugin_rms_norm};
static const DK_FusedKernel* const kFused[] = {&kRmsNorm};
static const DK_FusedKernelTable kFusedTable = {DK_FusedKernelTable_STRUCT_SIZE, 1, kFused};

static const DK_Api kApi = {
    BP_API_FIELDS(DK_Api_STRUCT_SIZE, DK_API_MAJOR, DK_API_MINOR, bp_plugin_initialize,
                  errors_plugin_allocate, &kKernelTable),
    .fused_kernels = &kFusedTable,
};

DK_EXPORT const DK_Api* DK_GetApi(void) { return &kApi; }
