/* A 1.2 plugin whose fused-kernel table is malformed in exactly one way: its
 * second entry names op 99, which is no DK_FusedOpId. Expected: PluginLoadError
 * naming the plugin's path, the entry (index and name) and the bad op, at
 * load time rather than a crash at the first composite call. */
#define BP_PLUGIN_NAME "bad_fused_op"
#include "bad_plugin_common.h"

static int32_t accept_all(const DK_Kernel_Args* args) {
  (void)args;
  return 1;
}

static DK_Error* never_called(const DK_Kernel_Args* args) {
  (void)args;
  return dkh_error(DK_ERROR_INTERNAL, BP_PLUGIN_NAME ": this kernel must never run");
}

static const DK_FusedKernel kGood = {DK_FusedKernel_STRUCT_SIZE, DK_FUSED_SOFTMAX,
                                     "bad_fused_op.softmax", accept_all, never_called};
static const DK_FusedKernel kBadOp = {DK_FusedKernel_STRUCT_SIZE, 99, "bad_fused_op.op99",
                                      accept_all, never_called};
static const DK_FusedKernel* const kFused[] = {&kGood, &kBadOp};
static const DK_FusedKernelTable kTable = {DK_FusedKernelTable_STRUCT_SIZE, 2, kFused};

static const DK_Api kApi = {
    BP_API_FIELDS(DK_Api_STRUCT_SIZE_1_2, 1, 2, bp_plugin_initialize, bp_memory_allocate,
                  &bp_empty_kernel_table),
    .fused_kernels = &kTable,
};

DK_EXPORT const DK_Api* DK_GetApi(void) { return &kApi; }
