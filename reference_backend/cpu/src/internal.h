// What the plugin's C++ files share: the error helpers, the argument checks,
// the per-device state, and the one way to put work on a stream.
#ifndef DEVICEKIT_CPU_INTERNAL_H_
#define DEVICEKIT_CPU_INTERNAL_H_

#include <devicekit/device_api.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

// The error object behind the opaque DK_Error*. Owned by whoever received it.
struct DK_Error {
  DK_ErrorCode code;
  std::string message;
};

namespace dkcpu {

// ---- Errors ---------------------------------------------------------------

// printf-style; the message starts with the call ("cpu.Memory_Free: ...").
// Never throws: if even the error cannot be allocated, returns a static
// out-of-memory error that Error_Destroy knows not to free.
DK_Error* make_error(DK_ErrorCode code, const char* fmt, ...) noexcept
    __attribute__((format(printf, 2, 3)));

DK_Error* error_from_exception(const char* call) noexcept;  // inside a catch block

// Runs an API call's body so that no exception ever crosses the C boundary.
template <class Body>
DK_Error* guarded(const char* call, Body&& body) noexcept {
  try {
    return body();
  } catch (...) {
    return error_from_exception(call);
  }
}

// ---- Argument checks (one helper each, used by every call) ----------------

// Plugin initialised, args not NULL, args->struct_size at least the 1.0 size.
// A larger struct_size is a newer caller and is fine: we read only 1.0 fields.
DK_Error* check_args(const char* call, const void* args, size_t given, size_t needed,
                     const char* type);
#define DKCPU_CHECK_ARGS(call, args, Type)                                          \
  do {                                                                              \
    if (DK_Error* e_ = ::dkcpu::check_args(call, args, (args) ? (args)->struct_size : 0, \
                                           Type##_STRUCT_SIZE, #Type))              \
      return e_;                                                                    \
  } while (0)

DK_Error* check_device(const char* call, int32_t device);  // DK_ERROR_OUT_OF_RANGE

// [p, p + bytes) must lie inside one live allocation of `device`: the strict
// simulation that catches host pointers, freed buffers, wrong devices and
// views running past their buffer when the SDK passes them, not later.
DK_Error* check_device_memory(const char* call, const char* what, int32_t device,
                              const void* p, uint64_t bytes);

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

template <class Payload>
void enqueue(DK_Stream* stream, WorkFn fn, const Payload& payload) {
  static_assert(std::is_trivially_copyable<Payload>::value, "payload is copied bytewise");
  static_assert(sizeof(Payload) <= kMaxPayloadBytes, "raise kMaxPayloadBytes");
  static_assert(alignof(Payload) <= 16, "queue slots are 16-byte aligned");
  enqueue_raw(stream, fn, &payload, sizeof(Payload));
}

}  // namespace dkcpu

#endif  // DEVICEKIT_CPU_INTERNAL_H_
