// Plugin_Initialize (the environment this plugin reads, the memory budget)
// and Plugin_GetInfo. The error object and Error_* are plugin_helpers.h's; the
// version check, exceptions as errors and the argument checks are
// <devicekit/plugin_runtime.hpp>'s.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <unistd.h>

#include "api.h"
#include "internal.h"
#include "parallel.h"

namespace dkcpu {
namespace {

// Parses a whole-string unsigned integer; false on junk, sign or overflow.
bool parse_u64(const char* s, uint64_t* out) {
  if (s == nullptr || *s < '0' || *s > '9') return false;
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(s, &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *out = v;
  return true;
}

uint64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : 0;
}

// The first unsigned number in `path` after `key` (the whole file when key is
// ""), times `scale`; 0 when the file or the key is missing or says "max".
uint64_t read_number(const char* path, const char* key, uint64_t scale) {
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return 0;
  char line[256];
  uint64_t v = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    const size_t k = std::strlen(key);
    if (std::strncmp(line, key, k) != 0) continue;
    unsigned long long x = 0;
    if (std::sscanf(line + k, " %llu", &x) == 1) v = uint64_t(x) * scale;
    break;
  }
  std::fclose(f);
  return v;
}

// Memory this process can actually get now: MemAvailable, lowered by a
// cgroup v2 limit when there is one. Physical RAM would be a promise the
// host cannot keep (the kernel's OOM killer, not an OutOfMemoryError).
uint64_t available_memory_bytes() {
  uint64_t avail = read_number("/proc/meminfo", "MemAvailable:", 1024);
  if (avail == 0) avail = physical_memory_bytes();
  const uint64_t limit = read_number("/sys/fs/cgroup/memory.max", "", 1);
  const uint64_t used = read_number("/sys/fs/cgroup/memory.current", "", 1);
  if (limit > 0 && limit > used && limit - used < avail) avail = limit - used;
  return avail;
}

// Default budget: this fraction of the available memory, split over the devices.
constexpr uint64_t kBudgetPercent = 50;

constexpr int32_t kMaxDevices = 64;  // plenty for multi-device tests; catches typos

}  // namespace

// Deliberately leaked: worker threads of streams the SDK never destroyed may
// still run while static destructors do, and must find their state intact.
Plugin& plugin() {
  static Plugin* const instance = new Plugin();
  return *instance;
}

}  // namespace dkcpu

using namespace dkcpu;

extern "C" {

DK_Error* dk_cpu_Plugin_Initialize(DK_Plugin_Initialize_Args* args) {
  static const char* const kCall = "cpu.Plugin_Initialize";
  return guarded(kCall, [&]() -> DK_Error* {
    Plugin& p = plugin();
    // Strict: the header says "called once". Devices are fixed after the
    // first call, so a second one is an SDK bug worth hearing about.
    if (DK_Error* e =
            dkh_check_initialize(kCall, args, p.initialized.load(), DK_API_MAJOR, DK_API_MINOR))
      return e;

    uint64_t devices = 1;
    const char* env = std::getenv("DEVICEKIT_CPU_DEVICES");
    if (env != nullptr && (!parse_u64(env, &devices) || devices < 1 || devices > kMaxDevices)) {
      return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                       "%s: DEVICEKIT_CPU_DEVICES='%s'; expected an integer from 1 to %d. "
                       "Hint: unset it for one device.",
                       kCall, env, kMaxDevices);
    }
    // parallel.cpp reads DEVICEKIT_CPU_THREADS when the pool starts; a value
    // it cannot use is refused here, at load, instead of silently ignored.
    uint64_t threads = 0;
    env = std::getenv("DEVICEKIT_CPU_THREADS");
    if (env != nullptr && (!parse_u64(env, &threads) || threads < 1 || threads > 1024)) {
      return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                       "%s: DEVICEKIT_CPU_THREADS='%s'; expected an integer from 1 to 1024. "
                       "Hint: unset it to use every core.",
                       kCall, env);
    }
    // fast/fast.h's cpu_isa reads DEVICEKIT_CPU_ISA at the first fast launch.
    env = std::getenv("DEVICEKIT_CPU_ISA");
    if (env != nullptr && std::strcmp(env, "base") != 0 && std::strcmp(env, "avx2") != 0 &&
        std::strcmp(env, "avx512") != 0) {
      return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                       "%s: DEVICEKIT_CPU_ISA='%s'; expected base, avx2 or avx512 (the highest "
                       "instruction set level the fast paths may use). Hint: unset it to use "
                       "what the CPU has.",
                       kCall, env);
    }
    uint64_t memory = available_memory_bytes() / 100 * kBudgetPercent / devices;
    env = std::getenv("DEVICEKIT_CPU_MEMORY_BYTES");
    if (env != nullptr && (!parse_u64(env, &memory) || memory == 0)) {
      return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                       "%s: DEVICEKIT_CPU_MEMORY_BYTES='%s'; expected a positive integer "
                       "number of bytes. Hint: unset it for half the available memory.",
                       kCall, env);
    }
    if (memory == 0) {
      return dkh_error(DK_ERROR_UNAVAILABLE,
                       "%s: cannot read this machine's physical memory size. Hint: set "
                       "DEVICEKIT_CPU_MEMORY_BYTES.",
                       kCall);
    }

    p.num_devices = int32_t(devices);
    p.total_memory = memory;
    p.devices.reset(new Device[devices]);
    p.attributes = "threads=" + std::to_string(parallel_threads()) +
                   "\nstreams=worker-thread\ndevices=" + std::to_string(devices);
    p.initialized.store(true, std::memory_order_release);
    return nullptr;
  });
}

DK_Error* dk_cpu_Plugin_GetInfo(DK_Plugin_GetInfo_Args* args) {
  static const char* const kCall = "cpu.Plugin_GetInfo";
  DKCPU_CHECK_ARGS(kCall, args, DK_Plugin_GetInfo_Args);
  args->name = "cpu";
  args->vendor = "DeviceKit reference";
  args->version = "0.1.0";
  args->attributes = plugin().attributes.c_str();  // lives as long as the library
  return nullptr;
}

}  // extern "C"
