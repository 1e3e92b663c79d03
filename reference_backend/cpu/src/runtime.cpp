// Devices, device memory (with exact statistics) and copies: what is the
// CPU's own (committing host memory, the copy itself) over the shared
// bookkeeping and checks of <devicekit/plugin_runtime.hpp>.
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
  dkh::memory_stats(plugin().devices[args->device], args);
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
    dkh::add_allocation(d, p, args->size, [&](void* q) { release(q, args->size); });
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
      if (const size_t size = dkh::remove_allocation(d, args->ptr)) {
        release(args->ptr, size);
        return nullptr;
      }
    }
    return dkh::not_an_allocation(plugin(), kCall, args->ptr, args->device);
  });
}

DK_Error* dk_cpu_Memcpy(DK_Memcpy_Args* args) {
  static const char* const kCall = "cpu.Memcpy";
  DKCPU_CHECK_ARGS(kCall, args, DK_Memcpy_Args);
  if (DK_Error* e = check_device(kCall, args->device)) return e;
  return guarded(kCall, [&]() -> DK_Error* {
    if (DK_Error* e = dkh::check_memcpy(plugin(), kCall, args, check_stream)) return e;
    if (args->size == 0) return nullptr;
    const CopyPayload copy{args->dst, args->src, args->size};
    if (args->stream == nullptr) return run_copy(&copy);
    if (args->kind != DK_COPY_DEVICE_TO_DEVICE) {
      if (DK_Error* e = capture_forbidden(kCall, args->stream)) return e;
    }
    enqueue(args->stream, run_copy, copy);
    return nullptr;
  });
}

}  // extern "C"
