// Devices, device memory (with exact statistics) and copies.
//
// "Device memory" is ordinary host memory, but every device pointer the SDK
// hands back is checked against the live allocations of that device (see
// check_device_memory): a host pointer, a freed buffer or an out-of-bounds
// view fails at the call that passed it, as it would crash on a real device.
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <sys/mman.h>
#include <unistd.h>

#include "api.h"
#include "internal.h"

namespace dkcpu {
namespace {

constexpr size_t kAlignment = 64;  // a cache line: no false sharing between buffers
constexpr uint64_t kCapabilities =
    DK_DEVICE_CAP_ASYNC_COPY | DK_DEVICE_CAP_HOST_MEMORY | DK_DEVICE_CAP_TIMING_EVENTS;

// The allocation of `device` containing p, or end(). Caller holds mem_mu.
std::map<uintptr_t, size_t>::const_iterator find_allocation(const Device& d, uintptr_t p) {
  auto it = d.allocations.upper_bound(p);
  if (it == d.allocations.begin()) return d.allocations.end();
  --it;
  return p < it->first + it->second ? it : d.allocations.end();  // sizes are never 0
}

// Which device's allocation holds p, for a hint in an error message; -1: none.
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
  if (owner >= 0 && owner != device) {
    return "it belongs to cpu:" + std::to_string(owner) + ", not cpu:" + std::to_string(device);
  }
  return "it is not device memory of cpu:" + std::to_string(device) +
         " (a host pointer, a freed buffer, or garbage?)";
}

bool is_device_memory(int32_t device, const void* p) {
  Device& d = plugin().devices[device];
  std::lock_guard<std::mutex> lock(d.mem_mu);
  return find_allocation(d, uintptr_t(p)) != d.allocations.end();
}

// Committed memory: an allocation that succeeds is backed by real pages now,
// so running out shows as OUT_OF_MEMORY here and never as the kernel's OOM
// killer in the middle of a later kernel. Large blocks are mmap'ed and
// prefaulted with MADV_POPULATE_WRITE, which fails cleanly (ENOMEM) when the
// host cannot supply them; small ones come from malloc and are touched page by
// page (their total is bounded by the budget, see Plugin_Initialize).
constexpr size_t kMapThreshold = size_t(256) << 10;

void touch_pages(void* p, size_t n) {
  const size_t page = size_t(sysconf(_SC_PAGE_SIZE));
  auto* c = static_cast<volatile char*>(p);
  for (size_t i = 0; i < n; i += page) c[i] = 0;
  if (n > 0) c[n - 1] = 0;
}

void* commit(size_t n) {
  if (n < kMapThreshold) {
    // aligned_alloc wants a multiple of the alignment; stats count what was asked.
    void* p = std::aligned_alloc(kAlignment, (n + kAlignment - 1) / kAlignment * kAlignment);
    if (p != nullptr) touch_pages(p, n);
    return p;
  }
  void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
#ifdef MADV_POPULATE_WRITE
  if (madvise(p, n, MADV_POPULATE_WRITE) == 0) return p;
  if (errno != EINVAL) {  // EINVAL: a kernel older than 5.14; anything else: no memory
    munmap(p, n);
    return nullptr;
  }
#endif
  touch_pages(p, n);
  return p;
}

void release(void* p, size_t n) {
  if (n < kMapThreshold) {
    std::free(p);
  } else {
    munmap(p, n);
  }
}

struct CopyPayload {
  void* dst;
  const void* src;
  size_t size;
};

DK_Error* run_copy(const void* payload) {
  const auto* c = static_cast<const CopyPayload*>(payload);
  std::memcpy(c->dst, c->src, c->size);
  return nullptr;
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

}  // namespace dkcpu

using namespace dkcpu;

extern "C" {

DK_Error* dk_cpu_Device_Count(DK_Device_Count_Args* args) {
  DKCPU_CHECK_ARGS("cpu.Device_Count", args, DK_Device_Count_Args);
  args->count = plugin().num_devices;
  return nullptr;
}

DK_Error* dk_cpu_Device_GetProperties(DK_Device_GetProperties_Args* args) {
  static const char* const kCall = "cpu.Device_GetProperties";
  DKCPU_CHECK_ARGS(kCall, args, DK_Device_GetProperties_Args);
  if (DK_Error* e = check_device(kCall, args->device)) return e;
  args->name = "DeviceKit reference CPU";
  args->total_memory = plugin().total_memory;
  args->capabilities = kCapabilities;
  args->dtypes = DK_DTYPE_MASK_ALL_1_0;
  args->alignment = kAlignment;
  return nullptr;
}

DK_Error* dk_cpu_Device_MemoryStats(DK_Device_MemoryStats_Args* args) {
  static const char* const kCall = "cpu.Device_MemoryStats";
  DKCPU_CHECK_ARGS(kCall, args, DK_Device_MemoryStats_Args);
  if (DK_Error* e = check_device(kCall, args->device)) return e;
  Device& d = plugin().devices[args->device];
  std::lock_guard<std::mutex> lock(d.mem_mu);  // one consistent snapshot
  args->bytes_in_use = d.bytes_in_use;
  args->peak_bytes_in_use = d.peak_bytes_in_use;
  args->num_allocs = d.allocations.size();
  return nullptr;
}

DK_Error* dk_cpu_Memory_Allocate(DK_Memory_Allocate_Args* args) {
  static const char* const kCall = "cpu.Memory_Allocate";
  DKCPU_CHECK_ARGS(kCall, args, DK_Memory_Allocate_Args);
  args->ptr = nullptr;
  if (DK_Error* e = check_device(kCall, args->device)) return e;
  if (args->size == 0) return nullptr;
  return guarded(kCall, [&]() -> DK_Error* {
    Device& d = plugin().devices[args->device];
    const uint64_t total = plugin().total_memory;
    std::lock_guard<std::mutex> lock(d.mem_mu);
    const uint64_t available = total > d.bytes_in_use ? total - d.bytes_in_use : 0;
    void* p = args->size <= available ? commit(args->size) : nullptr;
    if (p == nullptr) {
      return dkh_error(DK_ERROR_OUT_OF_MEMORY,
                       "%s: cannot allocate %zu bytes on cpu:%d; %llu bytes available "
                       "(%llu of %llu in use in %zu allocations)%s. Hint: free tensors, "
                       "empty the SDK's caching allocator, or raise DEVICEKIT_CPU_MEMORY_BYTES.",
                       kCall, args->size, args->device, (unsigned long long)available,
                       (unsigned long long)d.bytes_in_use, (unsigned long long)total,
                       d.allocations.size(),
                       args->size <= available ? "; the host could not commit that much" : "");
    }
    try {
      d.allocations.emplace(uintptr_t(p), args->size);
    } catch (...) {
      release(p, args->size);
      throw;
    }
    d.bytes_in_use += args->size;
    d.peak_bytes_in_use = std::max(d.peak_bytes_in_use, d.bytes_in_use);
    args->ptr = p;
    return nullptr;
  });
}

DK_Error* dk_cpu_Memory_Free(DK_Memory_Free_Args* args) {
  static const char* const kCall = "cpu.Memory_Free";
  DKCPU_CHECK_ARGS(kCall, args, DK_Memory_Free_Args);
  if (DK_Error* e = check_device(kCall, args->device)) return e;
  if (args->ptr == nullptr) return nullptr;
  return guarded(kCall, [&]() -> DK_Error* {
    Device& d = plugin().devices[args->device];
    {
      std::lock_guard<std::mutex> lock(d.mem_mu);
      auto it = d.allocations.find(uintptr_t(args->ptr));
      if (it != d.allocations.end()) {
        d.bytes_in_use -= it->second;
        release(args->ptr, it->second);
        d.allocations.erase(it);
        return nullptr;
      }
    }
    return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                     "%s: %p is not a live allocation of cpu:%d; expected exactly a pointer "
                     "Memory_Allocate returned and not yet freed: %s. Hint: look for a double "
                     "free or a freed view offset into a buffer.",
                     kCall, args->ptr, args->device, pointer_hint(args->ptr, args->device).c_str());
  });
}

DK_Error* dk_cpu_Memcpy(DK_Memcpy_Args* args) {
  static const char* const kCall = "cpu.Memcpy";
  DKCPU_CHECK_ARGS(kCall, args, DK_Memcpy_Args);
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
                       "%s: kind is DEVICE_TO_HOST but dst %p is device memory of cpu:%d. "
                       "Hint: use DK_COPY_DEVICE_TO_DEVICE.",
                       kCall, args->dst, args->device);
    }
    if (src_dev) {
      if (DK_Error* e = check_device_memory(kCall, "src", args->device, args->src, args->size))
        return e;
    } else if (is_device_memory(args->device, args->src)) {
      return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                       "%s: kind is HOST_TO_DEVICE but src %p is device memory of cpu:%d. "
                       "Hint: use DK_COPY_DEVICE_TO_DEVICE.",
                       kCall, args->src, args->device);
    }
    const auto d = uintptr_t(args->dst), s = uintptr_t(args->src);
    if (d < s + args->size && s < d + args->size) {
      return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                       "%s: dst %p and src %p overlap (%zu bytes each); expected disjoint "
                       "ranges. Hint: copy through a temporary buffer.",
                       kCall, args->dst, args->src, args->size);
    }
    const CopyPayload copy{args->dst, args->src, args->size};
    if (args->stream == nullptr) return run_copy(&copy);
    enqueue(args->stream, run_copy, copy);
    return nullptr;
  });
}

}  // extern "C"
