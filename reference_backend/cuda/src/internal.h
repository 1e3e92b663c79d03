// What the plugin's DK-ABI files (plugin.cpp, runtime.cpp, stream.cpp) share:
// argument checks, the per-device state and the DK_Stream / DK_Event objects,
// over the runtime glue every plugin shares (<devicekit/plugin_runtime.hpp>).
// The same in both builds; the device itself is behind gpu.h.
#pragma once

#include <devicekit/device_api.h>
#include <devicekit/plugin_runtime.hpp>

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

// The opaque handles of the header, defined here for the plugin's files.
struct DK_Event;

struct DK_Stream {
  DK_Stream(int32_t dev, dkcuda::gpu::Stream* s) : device(dev), gpu(s) {}
  std::atomic<uint32_t> magic{dkh::kLiveStream};  // best-effort use-after-destroy check
  const int32_t device;
  dkcuda::gpu::Stream* const gpu;
  // The open capture's bookkeeping (graphs.cpp), under capture_mu. The
  // recording itself is the device layer's (gpu::capture_begin).
  std::mutex capture_mu;
  std::atomic<bool> capturing{false};
  DK_Error* capture_invalid = nullptr;  // the first forbidden call's error
  std::vector<DK_Event*> captured_records, captured_waits;  // Event_Record / Stream_WaitEvent
};

struct DK_Event {
  DK_Event(int32_t dev, dkcuda::gpu::Event* e) : device(dev), gpu(e) {}
  std::atomic<uint32_t> magic{dkh::kLiveEvent};
  const int32_t device;
  dkcuda::gpu::Event* const gpu;
  std::atomic<bool> recorded{false};  // CUDA treats a never-recorded event as reached
  // The stream whose open capture recorded it (graphs.cpp): Event_Synchronize
  // of it then is host synchronisation inside the capture (forbidden).
  std::atomic<DK_Stream*> captured_on{nullptr};
};

namespace dkcuda {

// ---- Errors -----------------------------------------------------------------

// "<call>: <the runtime's text>" with the Status's code (INTERNAL when 0).
DK_Error* error_from_status(const char* call, const gpu::Status& s);

// ---- Plugin and device state ----------------------------------------------------

// A device: its properties, over <devicekit/plugin_runtime.hpp>'s allocation
// table (exact statistics) and live-stream list.
struct Device : dkh::DeviceState<DK_Stream> { gpu::Properties props; };

struct Plugin : dkh::PluginState<Device> {
  Plugin() : PluginState(DKCUDA_NAME) {}
};

Plugin& plugin();  // the one instance, never destroyed (see plugin.cpp)

// ---- Argument checks --------------------------------------------------------

#define DKCUDA_CHECK_ARGS(call, args, Type)                                           \
  do {                                                                                \
    if (DK_Error* e_ = ::dkh::check_initialized(::dkcuda::plugin(), call)) return e_; \
    DKH_CHECK_STRUCT(call, args, Type);                                               \
  } while (0)

inline DK_Error* check_initialized(const char* call) {  // DK_ERROR_FAILED_PRECONDITION
  return dkh::check_initialized(plugin(), call);
}

inline DK_Error* check_device(const char* call, int32_t device) {  // DK_ERROR_OUT_OF_RANGE
  return dkh::check_device(plugin(), call, device);
}

// [p, p + bytes) must lie inside one live allocation of `device`: a host
// pointer, a freed buffer or a view running past its buffer fails at the
// call that passed it, not later as a fault on the device.
inline DK_Error* check_device_memory(const char* call, const char* what, int32_t device,
                                     const void* p, uint64_t bytes) {
  return dkh::check_device_memory(plugin(), call, what, device, p, bytes);
}

// NULL, destroyed, or not on `device` (-1: any) -> an error naming `call`.
inline DK_Error* check_stream(const char* call, const DK_Stream* stream, int32_t device) {
  return dkh::check_stream(plugin(), call, stream, device);
}

// ---- Graphs: capture hooks (graphs.cpp) -------------------------------------

// A call the header forbids while `stream` captures (a host synchronisation,
// a host copy): NULL when `stream` does not capture; otherwise the capture is
// now invalid (its end returns the error) and the error to return.
DK_Error* capture_forbidden(const char* call, DK_Stream* stream);

// Event_Record (wait = false) or Stream_WaitEvent (wait = true) on a
// capturing stream: remembered with the capture, so that Graph_Launch can
// check the event is still alive and mark it recorded. The device layer
// records the call itself (gpu::event_record / gpu::stream_wait_event).
void capture_note_event(DK_Stream* stream, DK_Event* event, bool wait);

// Stream_Destroy of a capturing stream: the open capture is dropped.
void capture_abandon(DK_Stream* stream);

}  // namespace dkcuda
