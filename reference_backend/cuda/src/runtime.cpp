// Devices, device memory (exact statistics, every device pointer checked)
// and copies, over gpu.h.
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

namespace dkcuda {
namespace {

// The allocation of `d` containing p, or end(). Caller holds mem_mu.
std::map<uintptr_t, size_t>::const_iterator find_allocation(const Device& d, uintptr_t p) {
  auto it = d.allocations.upper_bound(p);
  if (it == d.allocations.begin()) return d.allocations.end();
  --it;
  return p < it->first + it->second ? it : d.allocations.end();  // sizes are never 0
}

int32_t owning_device(const void* p) {
  Plugin& pl = plugin();
  for (int32_t i = 0; i < pl.num_devices; ++i) {
    std::lock_guard<std::mutex> lock(pl.devices[i].mem_mu);
    if (find_allocation(pl.devices[i], uintptr_t(p)) != pl.devices[i].allocations.end()) return i;
  }
  return -1;
}

std::string pointer_hint(const void* p, int32_t device) {
  const int32_t owner = owning_device(p);
  const std::string name = DKCUDA_NAME ":";
  if (owner >= 0 && owner != device) {
    return "it belongs to " + name + std::to_string(owner) + ", not " + name +
           std::to_string(device);
  }
  return "it is not device memory of " + name + std::to_string(device) +
         " (a host pointer, a freed buffer, or garbage?)";
}

bool is_device_memory(int32_t device, const void* p) {
  Device& d = plugin().devices[device];
  std::lock_guard<std::mutex> lock(d.mem_mu);
  return find_allocation(d, uintptr_t(p)) != d.allocations.end();
}

}  // namespace

DK_Error* check_device_memory(const char* call, const char* what, int32_t device, const void* p,
                              uint64_t bytes) {
  Device& d = plugin().devices[device];
  uintptr_t base = 0;
  size_t size = 0;
  {
    std::lock_guard<std::mutex> lock(d.mem_mu);
    auto it = find_allocation(d, uintptr_t(p));
    if (it != d.allocations.end()) {
      base = it->first;
      size = it->second;
    }
  }
  if (size == 0) {
    return dkh_error(DK_ERROR_INVALID_ARGUMENT, "%s: %s at %p is not inside a live allocation: %s",
                     call, what, p, pointer_hint(p, device).c_str());
  }
  const uint64_t offset = uintptr_t(p) - base;
  if (bytes > size - offset) {
    return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                     "%s: %s spans %llu bytes from offset %llu of a %zu-byte allocation at %p; "
                     "expected at most %llu. Hint: check the view's shape, strides and dtype.",
                     call, what, (unsigned long long)bytes, (unsigned long long)offset, size,
                     reinterpret_cast<void*>(base), (unsigned long long)(size - offset));
  }
  return nullptr;
}

}  // namespace dkcuda

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
  Device& d = plugin().devices[args->device];
  std::lock_guard<std::mutex> lock(d.mem_mu);  // one consistent snapshot
  args->bytes_in_use = d.bytes_in_use;
  args->peak_bytes_in_use = d.peak_bytes_in_use;
  args->num_allocs = d.allocations.size();
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
    try {
      d.allocations.emplace(uintptr_t(p), args->size);
    } catch (...) {
      gpu::free(args->device, p, args->size);
      throw;
    }
    d.bytes_in_use += args->size;
    d.peak_bytes_in_use = std::max(d.peak_bytes_in_use, d.bytes_in_use);
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
      auto it = d.allocations.find(uintptr_t(args->ptr));
      if (it != d.allocations.end()) {
        bytes = it->second;
        d.bytes_in_use -= bytes;
        d.allocations.erase(it);
      }
    }
    if (bytes == 0) {
      return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                       "%s: %p is not a live allocation of %s:%d; expected exactly a pointer "
                       "Memory_Allocate returned and not yet freed: %s. Hint: look for a double "
                       "free or a freed view offset into a buffer.",
                       kCall, args->ptr, DKCUDA_NAME, args->device,
                       pointer_hint(args->ptr, args->device).c_str());
    }
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
    const int kind = int(args->kind);
    if (kind < DK_COPY_HOST_TO_DEVICE || kind > DK_COPY_DEVICE_TO_DEVICE) {
      return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                       "%s: kind is %d; expected DK_COPY_HOST_TO_DEVICE (0), "
                       "DK_COPY_DEVICE_TO_HOST (1) or DK_COPY_DEVICE_TO_DEVICE (2)",
                       kCall, kind);
    }
    if (args->stream != nullptr) {
      if (DK_Error* e = check_stream(kCall, args->stream, args->device)) return e;
    }
    if (args->size == 0) return nullptr;
    if (args->dst == nullptr || args->src == nullptr) {
      return dkh_error(DK_ERROR_INVALID_ARGUMENT, "%s: %s is NULL with size %zu; expected a %s",
                       kCall, args->dst == nullptr ? "dst" : "src", args->size,
                       "valid pointer (NULL is allowed only when size is 0)");
    }
    const bool dst_dev = kind != DK_COPY_DEVICE_TO_HOST, src_dev = kind != DK_COPY_HOST_TO_DEVICE;
    if (dst_dev) {
      if (DK_Error* e = check_device_memory(kCall, "dst", args->device, args->dst, args->size))
        return e;
    } else if (is_device_memory(args->device, args->dst)) {
      return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                       "%s: kind is DEVICE_TO_HOST but dst %p is device memory of %s:%d. "
                       "Hint: use DK_COPY_DEVICE_TO_DEVICE.",
                       kCall, args->dst, DKCUDA_NAME, args->device);
    }
    if (src_dev) {
      if (DK_Error* e = check_device_memory(kCall, "src", args->device, args->src, args->size))
        return e;
    } else if (is_device_memory(args->device, args->src)) {
      return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                       "%s: kind is HOST_TO_DEVICE but src %p is device memory of %s:%d. "
                       "Hint: use DK_COPY_DEVICE_TO_DEVICE.",
                       kCall, args->src, DKCUDA_NAME, args->device);
    }
    const auto d = uintptr_t(args->dst), s = uintptr_t(args->src);
    if (d < s + args->size && s < d + args->size) {
      return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                       "%s: dst %p and src %p overlap (%zu bytes each); expected disjoint "
                       "ranges. Hint: copy through a temporary buffer.",
                       kCall, args->dst, args->src, args->size);
    }
    const gpu::Status st =
        gpu::memcpy(args->device, args->dst, args->src, args->size, gpu::CopyKind(kind),
                    args->stream != nullptr ? args->stream->gpu : nullptr);
    return st.ok() ? nullptr : error_from_status(kCall, st);
  });
}

}  // extern "C"
