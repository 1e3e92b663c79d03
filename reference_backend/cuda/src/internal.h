// What the plugin's DK-ABI files (plugin.cpp, runtime.cpp, stream.cpp) share:
// argument checks, the per-device state and the DK_Stream / DK_Event objects.
// The same in both builds; the device itself is behind gpu.h.
#pragma once

#include <devicekit/device_api.h>
#include <devicekit/plugin_helpers.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gpu.h"

// The plugin's name: "cuda" for the real build, "cuda_sim" for the emulated
// one (CMakeLists.txt defines it), so both can be installed side by side in
// development and a report never mixes them up.
#ifndef DKCUDA_NAME
#error "DKCUDA_NAME must be defined by the build (\"cuda\" or \"cuda_sim\")"
#endif

namespace dkcuda {

// ---- Errors -----------------------------------------------------------------

// "<call>: <the runtime's text>" with the Status's code (INTERNAL when 0).
DK_Error* error_from_status(const char* call, const gpu::Status& s);

// ---- Argument checks --------------------------------------------------------

DK_Error* check_initialized(const char* call);  // DK_ERROR_FAILED_PRECONDITION

#define DKCUDA_CHECK_ARGS(call, args, Type)                          \
  do {                                                               \
    if (DK_Error* e_ = ::dkcuda::check_initialized(call)) return e_; \
    DKH_CHECK_STRUCT(call, args, Type);                              \
  } while (0)

DK_Error* check_device(const char* call, int32_t device);  // DK_ERROR_OUT_OF_RANGE

// [p, p + bytes) must lie inside one live allocation of `device`: a host
// pointer, a freed buffer or a view running past its buffer fails at the
// call that passed it, not later as a fault on the device.
DK_Error* check_device_memory(const char* call, const char* what, int32_t device, const void* p,
                              uint64_t bytes);

// NULL, destroyed, or not on `device` (-1: any) -> an error naming `call`.
DK_Error* check_stream(const char* call, const DK_Stream* stream, int32_t device);

// ---- Plugin and device state ----------------------------------------------------

struct Device {
  gpu::Properties props;
  std::mutex mem_mu;                        // guards the three fields below
  std::map<uintptr_t, size_t> allocations;  // base address -> requested bytes
  uint64_t bytes_in_use = 0;
  uint64_t peak_bytes_in_use = 0;

  std::mutex streams_mu;                            // guards `streams`
  std::vector<std::shared_ptr<DK_Stream>> streams;  // live ones, for Device_Synchronize
};

struct Plugin {
  std::atomic<bool> initialized{false};
  int32_t num_devices = 0;  // fixed by Plugin_Initialize
  std::string attributes;   // Plugin_GetInfo's, built once
  std::unique_ptr<Device[]> devices;
};

Plugin& plugin();  // the one instance, never destroyed (see plugin.cpp)

}  // namespace dkcuda

// The opaque handles of the header, defined here for the plugin's files.
struct DK_Stream {
  DK_Stream(int32_t dev, dkcuda::gpu::Stream* s) : device(dev), gpu(s) {}
  std::atomic<uint32_t> magic{0x5354524d};  // best-effort use-after-destroy check
  const int32_t device;
  dkcuda::gpu::Stream* const gpu;
};

struct DK_Event {
  DK_Event(int32_t dev, dkcuda::gpu::Event* e) : device(dev), gpu(e) {}
  std::atomic<uint32_t> magic{0x45564e54};
  const int32_t device;
  dkcuda::gpu::Event* const gpu;
  std::atomic<bool> recorded{false};  // CUDA treats a never-recorded event as reached
};
