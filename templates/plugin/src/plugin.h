/* What the plugin's files share: argument checks, the per-device limits, and
 * every function that goes into the DK_Api table.
 *
 * Errors, argument-check messages, view helpers and dtype sizes come from
 * <devicekit/plugin_helpers.h>, the Plugin_Initialize version check and the
 * DK_Api slots from <devicekit/plugin_runtime.h> (optional, header-only,
 * shipped with the device API in include/devicekit/); this file adds only
 * what is plugin-specific.
 *
 * Everything here is hidden (CMakeLists.txt: -fvisibility=hidden and
 * exports.map); DK_GetApi in api.c is the only exported symbol. */
#ifndef PLUGIN_H_
#define PLUGIN_H_

#include <stdint.h>

#include <devicekit/device_api.h>
#include <devicekit/plugin_helpers.h>
#include <devicekit/plugin_runtime.h>

#include "plugin_info.h"

/* ---- Devices ----------------------------------------------------------------
 * This template simulates devices in host memory. Replace these with queries
 * to your driver in Plugin_Initialize. */
#define PLUGIN_NUM_DEVICES 1
#define PLUGIN_ALIGNMENT 64 /* bytes; a power of two >= 16 (header) */
#define PLUGIN_DEFAULT_MEMORY ((uint64_t)2 << 30) /* 2 GiB unless PLUGIN_MEMORY_ENV */

/* Bytes each device may allocate; fixed by Plugin_Initialize. */
extern uint64_t plugin_total_memory;

/* ---- Argument checks, shared by every call ----------------------------------- */

/* Plugin_Initialize has run (FAILED_PRECONDITION otherwise). */
DK_Error* plugin_check_initialized(const char* call);

/* Initialised, args not NULL, struct_size at least what this header defines
 * (dkh_check_struct: a larger struct_size is a newer SDK and fine). */
#define PLUGIN_CHECK_ARGS(call, args, Type)             \
  do {                                                  \
    DK_Error* init_e_ = plugin_check_initialized(call); \
    if (init_e_ != NULL) return init_e_;                \
    DKH_CHECK_STRUCT(call, args, Type);                 \
  } while (0)

/* OUT_OF_RANGE unless 0 <= device < PLUGIN_NUM_DEVICES. */
#define plugin_check_device(call, device) \
  dkh_check_device(call, PLUGIN_NAME, device, PLUGIN_NUM_DEVICES)
/* NULL, destroyed, or (device >= 0) on another device -> INVALID_ARGUMENT. */
DK_Error* plugin_check_stream(const char* call, const DK_Stream* stream, int32_t device);

/* Everything a kernel checks before it enqueues: initialised, struct_size,
 * device, stream, and every argument rule of the op (dkh_check_call: operand
 * counts, dtypes, shapes, strides, NULL data, aliasing, attributes) against
 * the dtype mask and capability bits its ops.def row declares (kernels.c). */
DK_Error* plugin_check_kernel(const char* call, const DK_Kernel_Args* args, DK_OpId op);

/* ---- The functions in the DK_Api table (api.c) ------------------------------- */

/* The runtime calls, plugin_Plugin_Initialize .. plugin_Event_ElapsedTime
 * (<devicekit/plugin_runtime.h> names them once): plugin.c has Plugin_* and
 * Device_Count / Device_GetProperties, memory.c Device_MemoryStats, Memory_*
 * and Memcpy, stream.c the streams, events and Device_Synchronize. Error_*
 * come from plugin_helpers.h (dkh_Error_Destroy, ...). */
DKH_DECLARE_RUNTIME_CALLS(plugin);

/* The kernels: declared here from their ops.def rows, so a new kernel needs
 * its function (kernels.c) and its row, and no prototype anywhere. */
#define PLUGIN_OP(id, fn, dtypes, caps) DK_KernelFn fn;
#define PLUGIN_NO_KERNEL(id)
#include "ops.def"
#undef PLUGIN_OP
#undef PLUGIN_NO_KERNEL

/* api.c: the kernel table, also read by plugin_check_kernel so what a kernel
 * accepts can never drift from what its row declares. */
extern const DK_KernelTable plugin_kernel_table;

/* The entry point; the header gives its type (DK_GetApi_Fn) but no prototype. */
DK_EXPORT const DK_Api* DK_GetApi(void);

#endif /* PLUGIN_H_ */
