/*
 * DeviceKit plugin runtime: a plugin's two tables and its one exported
 * symbol, written from its .def rows, once for every plugin.
 *
 * A plugin lists its kernels one row per op, so an op's kernel, dtypes and
 * capability bits sit side by side, and its fused kernels one row per kernel:
 *   DKH_OP(OP_SUFFIX, kernel function, accepted dtype mask, capability bits)
 *   DKH_FUSED(FUSED_OP_SUFFIX, "plugin.name", supports predicate, launch)
 * (a plugin whose rows use its own macro names defines them as these). Before
 * including this header it defines:
 *   DKH_TABLES_PREFIX     its runtime calls' prefix (plugin_runtime.h), e.g. dk_acme
 *   DKH_TABLES_OPS_DEF    the file of DKH_OP rows, e.g. "ops.def"
 *   DKH_TABLES_FUSED_DEF  the file of DKH_FUSED rows (optional; may be empty)
 * The .def files are found on the include path (the plugin's src/ folder).
 *
 * Included anywhere (C or C++, inside extern "C" in C++), it declares every
 * kernel function, every fused supports/launch pair, <prefix>_kernel_table
 * and DK_GetApi. Included once more in C with DKH_TABLES_DEFINE defined (the
 * plugin's api.c), it also defines them: the kernel table (three arrays
 * indexed by DK_OpId; a slot without a row is NULL, "not implemented", which
 * the SDK reports or decomposes, never silently falls back from), the
 * fused-kernel registry in row order, the DK_Api table (version DK_API_MAJOR.
 * DK_API_MINOR: the plugin claims the header it was built with; Error_* and
 * the runtime calls from plugin_runtime.h's DKH_RUNTIME_API_ENTRIES) and
 * DK_GetApi, which does no work, as the header requires.
 *
 * Optional, like every plugin_*.h header; the tables are constant data,
 * so reading them is thread-safe.
 */
#ifndef DEVICEKIT_PLUGIN_TABLES_H_
#define DEVICEKIT_PLUGIN_TABLES_H_

#include "plugin_runtime.h"

#if !defined(DKH_TABLES_PREFIX) || !defined(DKH_TABLES_OPS_DEF)
#error "define DKH_TABLES_PREFIX and DKH_TABLES_OPS_DEF before including plugin_tables.h"
#endif

#define DKH_TABLES_PASTE_(a, b) a##b
#define DKH_TABLES_PASTE(a, b) DKH_TABLES_PASTE_(a, b)
#define DKH_TABLES_KERNEL_TABLE DKH_TABLES_PASTE(DKH_TABLES_PREFIX, _kernel_table)
/* Expands the prefix before DKH_RUNTIME_API_ENTRIES pastes it. */
#define DKH_TABLES_API_ENTRIES(prefix) DKH_RUNTIME_API_ENTRIES(prefix)

/* ---- Declarations ----------------------------------------------------------- */

#define DKH_OP(id, fn, dtypes, caps) DK_Error* fn(const DK_Kernel_Args* args);
#include DKH_TABLES_OPS_DEF
#undef DKH_OP

#ifdef DKH_TABLES_FUSED_DEF
#define DKH_FUSED(id, name, supports, launch)   \
  int32_t supports(const DK_Kernel_Args* args); \
  DK_Error* launch(const DK_Kernel_Args* args);
#include DKH_TABLES_FUSED_DEF
#undef DKH_FUSED
#endif

/* The kernel table, also read by the kernels' own validation (dkh_check_call)
 * so what they accept can never drift from what they declare. */
extern const DK_KernelTable DKH_TABLES_KERNEL_TABLE;

/* The entry point; the header gives its type (DK_GetApi_Fn) but no prototype. */
DK_EXPORT const DK_Api* DK_GetApi(void);

#endif /* DEVICEKIT_PLUGIN_TABLES_H_ */

/* ---- Definitions (once, in C: designated initializers) ----------------------- */

#if defined(DKH_TABLES_DEFINE) && !defined(DEVICEKIT_PLUGIN_TABLES_DEFINED_)
#define DEVICEKIT_PLUGIN_TABLES_DEFINED_

/* DK_Api.extension_start: a plugin with optional parts (collectives, ...)
 * defines DKH_TABLES_EXTENSION_START as the address of its first extension's
 * DK_Extension_Base (an address constant); without it there are none. */
#ifndef DKH_TABLES_EXTENSION_START
#define DKH_TABLES_EXTENSION_START NULL
#endif

static DK_KernelFn* const dkh_kernels_[DK_OP_COUNT] = {
#define DKH_OP(id, fn, dtypes, caps) [DK_OP_##id] = fn,
#include DKH_TABLES_OPS_DEF
#undef DKH_OP
};

static const uint64_t dkh_dtypes_[DK_OP_COUNT] = {
#define DKH_OP(id, fn, dtypes, caps) [DK_OP_##id] = (dtypes),
#include DKH_TABLES_OPS_DEF
#undef DKH_OP
};

static const uint32_t dkh_caps_[DK_OP_COUNT] = {
#define DKH_OP(id, fn, dtypes, caps) [DK_OP_##id] = (caps),
#include DKH_TABLES_OPS_DEF
#undef DKH_OP
};

const DK_KernelTable DKH_TABLES_KERNEL_TABLE = {
    .struct_size = DK_KernelTable_STRUCT_SIZE,
    .num_ops = DK_OP_COUNT,
    .kernels = dkh_kernels_,
    .dtypes = dkh_dtypes_,
    .caps = dkh_caps_,
};

/* One DK_FusedKernel per row, and the array of pointers to them, in row order.
 * C has no empty arrays: a NULL ends the list and is not counted, so the
 * fused .def may have no rows (or be left out). */
#ifdef DKH_TABLES_FUSED_DEF
#define DKH_FUSED(id, kname, supports_fn, launch_fn)    \
  static const DK_FusedKernel dkh_fused_##launch_fn = { \
      .struct_size = DK_FusedKernel_STRUCT_SIZE,        \
      .op = DK_FUSED_##id,                              \
      .name = kname,                                    \
      .supports = supports_fn,                          \
      .launch = launch_fn,                              \
  };
#include DKH_TABLES_FUSED_DEF
#undef DKH_FUSED
#endif

static const DK_FusedKernel* const dkh_fused_kernels_[] = {
#ifdef DKH_TABLES_FUSED_DEF
#define DKH_FUSED(id, kname, supports_fn, launch_fn) &dkh_fused_##launch_fn,
#include DKH_TABLES_FUSED_DEF
#undef DKH_FUSED
#endif
    NULL,
};

static const DK_FusedKernelTable dkh_fused_kernel_table_ = {
    .struct_size = DK_FusedKernelTable_STRUCT_SIZE,
    .num_kernels = (int32_t)(sizeof(dkh_fused_kernels_) / sizeof(dkh_fused_kernels_[0]) - 1),
    .kernels = dkh_fused_kernels_,
};

static const DK_Api dkh_api_ = {
    .struct_size = DK_Api_STRUCT_SIZE_1_2,
    .extension_start = DKH_TABLES_EXTENSION_START,
    .api_major = DK_API_MAJOR,
    .api_minor = DK_API_MINOR,

    /* Error_* (plugin_helpers.h's) and the 22 runtime calls */
    DKH_TABLES_API_ENTRIES(DKH_TABLES_PREFIX),

    .kernels = &DKH_TABLES_KERNEL_TABLE,
    .fused_kernels = &dkh_fused_kernel_table_,
};

/* The only exported symbol (the plugin's exports.map). Does no work, as the
 * header requires: the SDK checks the version fields before calling anything. */
DK_EXPORT const DK_Api* DK_GetApi(void) { return &dkh_api_; }

#endif /* DKH_TABLES_DEFINE */
