// Devices, device memory (exact statistics, every device pointer checked)
// and copies, over gpu.h and the shared bookkeeping and checks of
// <devicekit/plugin_runtime.hpp>.
//
// The plugin keeps its own table of live allocations per device: the
// statistics are exact (what was asked, not what the allocator rounded to),
// and every pointer the SDK passes is checked against it, so a host pointer,
// a freed buffer or an out-of-bounds view fails at the call that passed it
// instead of as an illegal-address fault that poisons the CUDA context.
#include <algorithm>

#include "api.h"
#include "internal.h"
#include "launch.h"

using namespace dkcuda;

extern "C" {

DK_Error* dk_cuda_Device_Count(DK_Device_Count_Args* args) {
  DKCUDA_CHECK_ARGS(DKCUDA_NAME ".Device_Count", args, DK_Device_Count_Args);
  args->count = plugin().num_devices;
  return nullptr;
}

DK_Error* dk_cuda_Device_GetProperties(DK_Device_GetProperties_Args* args) {
  static const char* const kCall = DKCUDA_NAME ".Device_GetProperties";
  DKCUDA_CHECK_ARGS(kCall, args, DK_Device_GetProperties_Args);
  if (DK_Error* e = check_device(kCall, args->device)) return e;
  const gpu::Properties& p = plugin().devices[args->device].props;
  args->name = p.name.c_str();  // fixed after Initialize
  args->total_memory = p.total_memory;
  args->capabilities =
      DK_DEVICE_CAP_TIMING_EVENTS | (p.async_copy ? DK_DEVICE_CAP_ASYNC_COPY : uint64_t(0));
  args->dtypes = DK_DTYPE_MASK_ALL_1_0;
  args->alignment = p.alignment;
  return nullptr;
}

DK_Error* dk_cuda_Device_MemoryStats(DK_Device_MemoryStats_Args* args) {
  static const char* const kCall = DKCUDA_NAME ".Device_MemoryStats";
  DKCUDA_CHECK_ARGS(kCall, args, DK_Device_MemoryStats_Args);
  if (DK_Error* e = check_device(kCall, args->device)) return e;
  dkh::memory_stats(plugin().devices[args->device], args);
  return nullptr;
}

DK_Error* dk_cuda_Memory_Allocate(DK_Memory_Allocate_Args* args) {
  static const char* const kCall = DKCUDA_NAME ".Memory_Allocate";
  DKCUDA_CHECK_ARGS(kCall, args, DK_Memory_Allocate_Args);
  args->ptr = nullptr;
  if (DK_Error* e = check_device(kCall, args->device)) return e;
  if (args->size == 0) return nullptr;
  return guarded(kCall, [&]() -> DK_Error* {
    Device& d = plugin().devices[args->device];
    void* p = nullptr;
    const gpu::Status s = gpu::malloc(args->device, args->size, &p);
    if (!s.ok()) {
      std::lock_guard<std::mutex> lock(d.mem_mu);
      return dkh_error(s.code,
                       "%s: cannot allocate %zu bytes on %s:%d (%llu bytes in use in %zu "
                       "allocations): %s. Hint: free tensors or empty the SDK's caching "
                       "allocator.",
                       kCall, args->size, DKCUDA_NAME, args->device,
                       (unsigned long long)d.bytes_in_use, d.allocations.size(), s.message.c_str());
    }
    std::lock_guard<std::mutex> lock(d.mem_mu);
    dkh::add_allocation(d, p, args->size, [&](void* q) { gpu::free(args->device, q, args->size); });
    args->ptr = p;
    return nullptr;
  });
}

DK_Error* dk_cuda_Memory_Free(DK_Memory_Free_Args* args) {
  static const char* const kCall = DKCUDA_NAME ".Memory_Free";
  DKCUDA_CHECK_ARGS(kCall, args, DK_Memory_Free_Args);
  if (DK_Error* e = check_device(kCall, args->device)) return e;
  if (args->ptr == nullptr) return nullptr;
  return guarded(kCall, [&]() -> DK_Error* {
    Device& d = plugin().devices[args->device];
    size_t bytes = 0;
    {
      std::lock_guard<std::mutex> lock(d.mem_mu);
      bytes = dkh::remove_allocation(d, args->ptr);
    }
    if (bytes == 0) return dkh::not_an_allocation(plugin(), kCall, args->ptr, args->device);
    // cudaFree synchronises the device first; the header has the SDK order
    // frees after the work using the memory anyway.
    const gpu::Status s = gpu::free(args->device, args->ptr, bytes);
    return s.ok() ? nullptr : error_from_status(kCall, s);
  });
}

DK_Error* dk_cuda_Memcpy(DK_Memcpy_Args* args) {
  static const char* const kCall = DKCUDA_NAME ".Memcpy";
  DKCUDA_CHECK_ARGS(kCall, args, DK_Memcpy_Args);
  if (DK_Error* e = check_device(kCall, args->device)) return e;
  return guarded(kCall, [&]() -> DK_Error* {
    if (DK_Error* e = dkh::check_memcpy(plugin(), kCall, args, check_stream)) return e;
    if (args->size == 0) return nullptr;
    if (args->stream != nullptr && args->kind != DK_COPY_DEVICE_TO_DEVICE) {
      if (DK_Error* e = capture_forbidden(kCall, args->stream)) return e;
    }
    const gpu::Status st =
        gpu::memcpy(args->device, args->dst, args->src, args->size, gpu::CopyKind(args->kind),
                    args->stream != nullptr ? args->stream->gpu : nullptr);
    return st.ok() ? nullptr : error_from_status(kCall, st);
  });
}

}  // extern "C"
