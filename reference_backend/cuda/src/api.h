/* Every function the plugin puts in its two tables (src/api.c), and where it
 * lives. C-compatible so the tables can be written in C with designated
 * initializers. All of these are hidden; only DK_GetApi is exported. */
#ifndef DEVICEKIT_CUDA_API_H_
#define DEVICEKIT_CUDA_API_H_

#include <devicekit/device_api.h>
#include <devicekit/plugin_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The runtime calls, dk_cuda_Plugin_Initialize .. dk_cuda_Event_ElapsedTime
 * (<devicekit/plugin_runtime.h> names them): src/plugin.cpp (Plugin_*), src/runtime.cpp (Device_Count,
 * Device_GetProperties, Device_MemoryStats, Memory_*, Memcpy), src/stream.cpp
 * (streams, events, Device_Synchronize, over src/gpu.h).
 * The Error_* entries are <devicekit/plugin_helpers.h>'s dkh_Error_*. */
DKH_DECLARE_RUNTIME_CALLS(dk_cuda);

/* The optional parts (device API 1.5), linked from DK_Api.extension_start:
 * graphs (src/graphs.cpp). No collectives. */
extern const DK_Graphs dk_cuda_graphs;
#define DKH_TABLES_EXTENSION_START (&dk_cuda_graphs.base)

/* The kernels and fused kernels, one row each in the .def files
 * (ops_all.def and fused.def list them), declared here; api.c defines the
 * kernel table dk_cuda_kernel_table (also read by the kernels' own
 * validation, so what they accept can never drift from what they declare),
 * the fused-kernel registry, the DK_Api table and DK_GetApi from the same
 * rows: <devicekit/plugin_tables.h>. */
#define DKCUDA_OP(id, fn, dtypes, caps) DKH_OP(id, fn, dtypes, caps)
#define DKCUDA_FUSED(id, name, supports, launch) DKH_FUSED(id, name, supports, launch)
#define DKH_TABLES_PREFIX dk_cuda
#define DKH_TABLES_OPS_DEF "ops_all.def"
#define DKH_TABLES_FUSED_DEF "fused.def"
#include <devicekit/plugin_tables.h>
#undef DKCUDA_OP
#undef DKCUDA_FUSED

#ifdef __cplusplus
}
#endif

#endif /* DEVICEKIT_CUDA_API_H_ */
