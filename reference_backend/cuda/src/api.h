/* Every function the plugin puts in its two tables (src/api.c), and where it
 * lives. C-compatible so the tables can be written in C with designated
 * initializers. All of these are hidden; only DK_GetApi is exported. */
#ifndef DEVICEKIT_CUDA_API_H_
#define DEVICEKIT_CUDA_API_H_

#include <devicekit/device_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* src/plugin.cpp: initialisation, plugin information. (The Error_* entries
 * are <devicekit/plugin_helpers.h>'s dkh_Error_*.) */
DK_Error* dk_cuda_Plugin_Initialize(DK_Plugin_Initialize_Args* args);
DK_Error* dk_cuda_Plugin_GetInfo(DK_Plugin_GetInfo_Args* args);

/* src/runtime.cpp: devices, memory, copies. */
DK_Error* dk_cuda_Device_Count(DK_Device_Count_Args* args);
DK_Error* dk_cuda_Device_GetProperties(DK_Device_GetProperties_Args* args);
DK_Error* dk_cuda_Device_MemoryStats(DK_Device_MemoryStats_Args* args);
DK_Error* dk_cuda_Memory_Allocate(DK_Memory_Allocate_Args* args);
DK_Error* dk_cuda_Memory_Free(DK_Memory_Free_Args* args);
DK_Error* dk_cuda_Memcpy(DK_Memcpy_Args* args);

/* src/stream.cpp: streams, events, device sync (over src/gpu.h). */
DK_Error* dk_cuda_Device_Synchronize(DK_Device_Synchronize_Args* args);
DK_Error* dk_cuda_Stream_Create(DK_Stream_Create_Args* args);
DK_Error* dk_cuda_Stream_Destroy(DK_Stream_Destroy_Args* args);
DK_Error* dk_cuda_Stream_Synchronize(DK_Stream_Synchronize_Args* args);
DK_Error* dk_cuda_Stream_Query(DK_Stream_Query_Args* args);
DK_Error* dk_cuda_Stream_WaitEvent(DK_Stream_WaitEvent_Args* args);
DK_Error* dk_cuda_Event_Create(DK_Event_Create_Args* args);
DK_Error* dk_cuda_Event_Destroy(DK_Event_Destroy_Args* args);
DK_Error* dk_cuda_Event_Record(DK_Event_Record_Args* args);
DK_Error* dk_cuda_Event_Query(DK_Event_Query_Args* args);
DK_Error* dk_cuda_Event_Synchronize(DK_Event_Synchronize_Args* args);
DK_Error* dk_cuda_Event_ElapsedTime(DK_Event_ElapsedTime_Args* args);

/* The base-operator kernels, one per row of ops_*.def. */
#define DKCUDA_OP(id, fn, dtypes, caps) DK_Error* fn(const DK_Kernel_Args* args);
#include "ops_1_0.def"
#include "ops_1_1.def"
#undef DKCUDA_OP

/* The fused kernels (supports predicate + launch), one pair per row of fused.def. */
#define DKCUDA_FUSED(id, name, supports, launch) \
  int32_t supports(const DK_Kernel_Args* args);  \
  DK_Error* launch(const DK_Kernel_Args* args);
#include "fused.def"
#undef DKCUDA_FUSED

/* src/api.c: the kernel table, also read by the kernels' own validation
 * (dkcuda::begin), so what they accept can never drift from what they declare. */
extern const DK_KernelTable dk_cuda_kernel_table;

/* The entry point; the header gives its type (DK_GetApi_Fn) but no prototype. */
DK_EXPORT const DK_Api* DK_GetApi(void);

#ifdef __cplusplus
}
#endif

#endif /* DEVICEKIT_CUDA_API_H_ */
