// What the plugin's C++ files share: the plugin's own argument checks, the
// per-device state, and the one way to put work on a stream. The error object
// (dkh_error, DK_Error) and the generic checks are <devicekit/plugin_helpers.h>'s;
// the runtime glue every plugin shares is <devicekit/plugin_runtime.hpp>'s.
#ifndef DEVICEKIT_CPU_INTERNAL_H_
#define DEVICEKIT_CPU_INTERNAL_H_

#include <devicekit/device_api.h>
#include <devicekit/plugin_runtime.hpp>

#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>

namespace dkcpu {

// ---- Errors ---------------------------------------------------------------

// Errors are dkh_error(code, "cpu.Memory_Free: ...", ...): printf-style, the
// message starting with the call; never NULL, never throws.

// Inside a catch block: <devicekit/plugin_runtime.hpp>'s, naming this plugin.
inline DK_Error* error_from_exception(const char* call) noexcept {
  return dkh::error_from_exception(call, "cpu");
}

// Runs an API call's body so that no exception ever crosses the C boundary.
template <class Body> DK_Error* guarded(const char* call, Body&& body) noexcept {
  return dkh::guarded(call, "cpu", std::forward<Body>(body));
}

// ---- Plugin and device state ----------------------------------------------

// A device: <devicekit/plugin_runtime.hpp>'s allocation table (exact
// statistics) and live-stream list; nothing of its own.
struct Device : dkh::DeviceState<DK_Stream> {};

struct Plugin : dkh::PluginState<Device> {
  Plugin() : PluginState("cpu") {}
  uint64_t total_memory = 0;  // per device, bytes: the budget Memory_Allocate keeps to
};

Plugin& plugin();  // the one instance, never destroyed (see plugin.cpp)

// ---- Argument checks (one helper each, used by every call) ----------------

// Plugin initialised, then DKH_CHECK_STRUCT: args not NULL, struct_size at
// least the size this plugin was built with (a larger one is a newer caller
// and is fine: we read only our fields).
#define DKCPU_CHECK_ARGS(call, args, Type)                                           \
  do {                                                                               \
    if (DK_Error* e_ = ::dkh::check_initialized(::dkcpu::plugin(), call)) return e_; \
    DKH_CHECK_STRUCT(call, args, Type);                                              \
  } while (0)

inline DK_Error* check_initialized(const char* call) {  // DK_ERROR_FAILED_PRECONDITION
  return dkh::check_initialized(plugin(), call);
}

inline DK_Error* check_device(const char* call, int32_t device) {  // DK_ERROR_OUT_OF_RANGE
  return dkh::check_device(plugin(), call, device, ". Hint: set DEVICEKIT_CPU_DEVICES for more.");
}

// [p, p + bytes) must lie inside one live allocation of `device`: the strict
// simulation that catches host pointers, freed buffers, wrong devices and
// views running past their buffer when the SDK passes them, not later.
inline DK_Error* check_device_memory(const char* call, const char* what, int32_t device,
                                     const void* p, uint64_t bytes) {
  return dkh::check_device_memory(plugin(), call, what, device, p, bytes);
}

// ---- Streams: the only way work is enqueued ---------------------------------

// A unit of stream work: runs on the stream's worker with the payload that
// was copied in at enqueue time. Returns NULL or an asynchronous error, which
// the next Stream_/Device_Synchronize reports.
using WorkFn = DK_Error* (*)(const void* payload);
constexpr size_t kMaxPayloadBytes = 512;

// NULL, destroyed, or not on `device` (-1: any device) -> an error naming `call`.
DK_Error* check_stream(const char* call, const DK_Stream* stream, int32_t device);  // stream.cpp

// Copies `bytes` of payload into the stream's fixed-size queue slot: no heap
// allocation and, in steady state, no system call.
void enqueue_raw(DK_Stream* stream, WorkFn fn, const void* payload, size_t bytes);

// ---- Graphs: capture hooks (graphs.cpp, stream.cpp) -------------------------

// The recording a capturing stream appends to instead of running (graphs.cpp).
struct Capture;

// Appends one unit of work to `capture`; enqueue_raw calls it, under the
// stream's enqueue lock, while the stream captures.
void capture_record(Capture* capture, WorkFn fn, const void* payload, size_t bytes);
void capture_delete(Capture* capture);  // a stream destroyed while capturing

// A call the header forbids while `stream` captures (a host synchronisation,
// a host copy): if `stream` captures, invalidates the capture and returns
// DK_ERROR_FAILED_PRECONDITION naming `call`; otherwise NULL.
DK_Error* capture_forbidden(const char* call, DK_Stream* stream);

// The capture `stream` records into, or NULL (stream.cpp). Swapped only by
// Graph_Capture, compare-and-swap so two begins cannot both win.
Capture* stream_capture(const DK_Stream* stream);
int32_t stream_device(const DK_Stream* stream);
bool stream_swap_capture(DK_Stream* stream, Capture* expected, Capture* desired);

// Event_Record / Stream_WaitEvent on a capturing stream are recorded as graph
// nodes (`wait` 0: a record, 1: a wait) in the capture's order, under the
// stream's enqueue lock (graphs.cpp).
void capture_event(Capture* capture, int wait, DK_Event* event);
// Events in a launched graph (stream.cpp). At Graph_Launch, in node order: a
// recorded Event_Record makes a new point the event's latest record (so a
// host or stream waiting after the launch waits for the replay to reach it),
// a recorded Stream_WaitEvent takes the event's latest point then (NULL when
// it has none or it is reached). The worker reaches or waits for them.
using EventPointRef = std::shared_ptr<void>;
EventPointRef event_new_point(DK_Event* event);
EventPointRef event_pending_point(DK_Event* event);
void event_point_reach(const EventPointRef& point);
void event_point_wait(const EventPointRef& point);
// NULL, destroyed: an error naming `call` (stream.cpp).
DK_Error* check_live_event(const char* call, const DK_Event* event);

// Enqueues bypassing any capture (a graph's own launch item).
void enqueue_uncaptured(DK_Stream* stream, WorkFn fn, const void* payload, size_t bytes);

template <class Payload> void enqueue(DK_Stream* stream, WorkFn fn, const Payload& payload) {
  static_assert(std::is_trivially_copyable<Payload>::value, "payload is copied bytewise");
  static_assert(sizeof(Payload) <= kMaxPayloadBytes, "raise kMaxPayloadBytes");
  static_assert(alignof(Payload) <= 16, "queue slots are 16-byte aligned");
  enqueue_raw(stream, fn, &payload, sizeof(Payload));
}

}  // namespace dkcpu

#endif  // DEVICEKIT_CPU_INTERNAL_H_
