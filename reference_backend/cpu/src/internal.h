// What the plugin's C++ files share: the plugin's own argument checks, the
// per-device state, and the one way to put work on a stream. The error object
// (dkh_error, DK_Error) and the generic checks are <devicekit/plugin_helpers.h>'s.
#ifndef DEVICEKIT_CPU_INTERNAL_H_
#define DEVICEKIT_CPU_INTERNAL_H_

#include <devicekit/device_api.h>
#include <devicekit/plugin_helpers.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

namespace dkcpu {

// ---- Errors ---------------------------------------------------------------

// Errors are dkh_error(code, "cpu.Memory_Free: ...", ...): printf-style, the
// message starting with the call; never NULL, never throws.

DK_Error* error_from_exception(const char* call) noexcept;  // inside a catch block

// Runs an API call's body so that no exception ever crosses the C boundary.
template <class Body> DK_Error* guarded(const char* call, Body&& body) noexcept {
  try {
    return body();
  } catch (...) { return error_from_exception(call); }
}

// ---- Argument checks (one helper each, used by every call) ----------------

// DK_ERROR_FAILED_PRECONDITION before Plugin_Initialize.
DK_Error* check_initialized(const char* call);

// Plugin initialised, then DKH_CHECK_STRUCT: args not NULL, struct_size at
// least the size this plugin was built with (a larger one is a newer caller
// and is fine: we read only our fields).
#define DKCPU_CHECK_ARGS(call, args, Type)                          \
  do {                                                              \
    if (DK_Error* e_ = ::dkcpu::check_initialized(call)) return e_; \
    DKH_CHECK_STRUCT(call, args, Type);                             \
  } while (0)

DK_Error* check_device(const char* call, int32_t device);  // DK_ERROR_OUT_OF_RANGE

// [p, p + bytes) must lie inside one live allocation of `device`: the strict
// simulation that catches host pointers, freed buffers, wrong devices and
// views running past their buffer when the SDK passes them, not later.
DK_Error* check_device_memory(const char* call, const char* what, int32_t device, const void* p,
                              uint64_t bytes);

// ---- Plugin and device state ----------------------------------------------

struct Device {
  std::mutex mem_mu;                         // guards the three fields below
  std::map<uintptr_t, size_t> allocations;   // base address -> requested bytes
  uint64_t bytes_in_use = 0;
  uint64_t peak_bytes_in_use = 0;

  std::mutex streams_mu;                           // guards `streams`
  std::vector<std::shared_ptr<DK_Stream>> streams;  // live ones, for Device_Synchronize
};

struct Plugin {
  std::atomic<bool> initialized{false};
  int32_t num_devices = 0;     // fixed by Plugin_Initialize
  uint64_t total_memory = 0;   // per device, bytes
  std::string attributes;      // Plugin_GetInfo's, built once
  std::unique_ptr<Device[]> devices;
};

Plugin& plugin();  // the one instance, never destroyed (see plugin.cpp)

// ---- Streams: the only way work is enqueued ---------------------------------

// A unit of stream work: runs on the stream's worker with the payload that
// was copied in at enqueue time. Returns NULL or an asynchronous error, which
// the next Stream_/Device_Synchronize reports.
using WorkFn = DK_Error* (*)(const void* payload);
constexpr size_t kMaxPayloadBytes = 512;

// NULL, destroyed, or not on `device` (-1: any device) -> an error naming `call`.
DK_Error* check_stream(const char* call, const DK_Stream* stream, int32_t device);

// Copies `bytes` of payload into the stream's fixed-size queue slot: no heap
// allocation and, in steady state, no system call.
void enqueue_raw(DK_Stream* stream, WorkFn fn, const void* payload, size_t bytes);

template <class Payload> void enqueue(DK_Stream* stream, WorkFn fn, const Payload& payload) {
  static_assert(std::is_trivially_copyable<Payload>::value, "payload is copied bytewise");
  static_assert(sizeof(Payload) <= kMaxPayloadBytes, "raise kMaxPayloadBytes");
  static_assert(alignof(Payload) <= 16, "queue slots are 16-byte aligned");
  enqueue_raw(stream, fn, &payload, sizeof(Payload));
}

}  // namespace dkcpu

#endif  // DEVICEKIT_CPU_INTERNAL_H_
