// DeviceKit plugin runtime, C++ part: the runtime glue every C++ plugin
// restates, once (the C part, the version check and the DK_Api slots, is
// plugin_runtime.h, which this includes).
//
// A plugin's runtime files then say only what differs for its device: how
// memory is committed and released, how a stream runs work, how an event is
// timed. What they share lives here, written only on the public header:
//   - errors: an exception caught at the C boundary as a DK_Error
//     (error_from_exception, guarded);
//   - plugin and device state: PluginState (initialised flag, the devices,
//     GetInfo's attributes), DeviceState (the table of live allocations with
//     exact statistics, the live streams for Device_Synchronize);
//   - argument checks with the header's messages: check_device,
//     check_device_memory (every device pointer the SDK passes lies inside a
//     live allocation of that device, the strict simulation that catches a
//     host pointer, a freed buffer or a view past its buffer at the call that
//     passed it), check_memcpy, check_stream, check_event;
//   - the bookkeeping of Memory_Allocate / Memory_Free / Device_MemoryStats
//     and of Stream_Create / Stream_Destroy / Device_Synchronize.
//
// Optional and header-only: everything is inline or a template in namespace
// dkh; nothing crosses the plugin boundary. Needs C++17 and the standard
// library. Thread-safety is stated per item: the state types carry their own
// mutexes, and every helper that reads shared state takes the right one
// unless it says "caller holds".
#ifndef DEVICEKIT_PLUGIN_RUNTIME_HPP_
#define DEVICEKIT_PLUGIN_RUNTIME_HPP_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <system_error>
#include <vector>

#include "plugin_runtime.h"

namespace dkh {

// ---- Errors ------------------------------------------------------------------

// The exception being handled (call it inside a catch block only) as a
// DK_Error naming `call` and the plugin: bad_alloc -> OUT_OF_MEMORY,
// system_error (a thread that could not start) -> UNAVAILABLE, anything else
// -> INTERNAL with its what(). Never throws.
inline DK_Error* error_from_exception(const char* call, const char* plugin) noexcept {
  try {
    throw;
  } catch (const std::bad_alloc&) {
    return dkh_error(DK_ERROR_OUT_OF_MEMORY,
                     "%s: out of host memory. Hint: free tensors or lower the batch size.", call);
  } catch (const std::system_error& e) {  // e.g. std::thread could not start a worker
    return dkh_error(DK_ERROR_UNAVAILABLE, "%s: the system refused: %s", call, e.what());
  } catch (const std::exception& e) {
    return dkh_error(DK_ERROR_INTERNAL, "%s: internal error in the %s plugin: %s", call, plugin,
                     e.what());
  } catch (...) {
    return dkh_error(DK_ERROR_INTERNAL, "%s: internal error in the %s plugin", call, plugin);
  }
}

// Runs an API call's body so that no exception ever crosses the C boundary.
template <class Body>
DK_Error* guarded(const char* call, const char* plugin, Body&& body) noexcept {
  try {
    return body();
  } catch (...) { return error_from_exception(call, plugin); }
}

// Frees an error the plugin will not report (the header reports the first
// asynchronous error only). NULL is fine.
inline void destroy_error(DK_Error* err) {
  if (err == nullptr) return;
  DK_Error_Destroy_Args destroy = {DK_Error_Destroy_Args_STRUCT_SIZE, err};
  dkh_Error_Destroy(&destroy);  // malloc'd by dkh_error: never `delete`
}

// ---- Plugin and device state -------------------------------------------------

// One device's memory bookkeeping. mem_mu guards the three fields below it.
struct DeviceMemory {
  std::mutex mem_mu;
  std::map<uintptr_t, size_t> allocations;  // base address -> requested bytes (never 0)
  uint64_t bytes_in_use = 0;
  uint64_t peak_bytes_in_use = 0;
};

// A device: its memory, and its live streams (shared: a Device_Synchronize
// in flight keeps a stream alive while Stream_Destroy runs). `Stream` is the
// plugin's DK_Stream.
template <class Stream> struct DeviceState : DeviceMemory {
  std::mutex streams_mu;                        // guards `streams`
  std::vector<std::shared_ptr<Stream>> streams;  // in creation order
};

// The plugin: fixed by Plugin_Initialize, read by every call after it
// (`initialized` is stored with release order after the rest is written).
// `name` is the device type ("cpu"), used in every message. A plugin keeps one
// instance for the life of the process (deliberately leaked: stream workers
// may still run while static destructors do).
template <class Device> struct PluginState {
  explicit PluginState(const char* plugin_name) : name(plugin_name) {}
  const char* const name;
  std::atomic<bool> initialized{false};
  int32_t num_devices = 0;
  std::string attributes;  // Plugin_GetInfo's, built once
  std::unique_ptr<Device[]> devices;
};

// ---- Argument checks -----------------------------------------------------------

// DK_ERROR_FAILED_PRECONDITION before Plugin_Initialize, else NULL.
template <class P> DK_Error* check_initialized(const P& p, const char* call) {
  return p.initialized.load(std::memory_order_acquire) ? nullptr : dkh_not_initialized(call);
}

// A device ordinal in [0, num_devices): DK_ERROR_OUT_OF_RANGE otherwise,
// `hint` (e.g. ". Hint: set ACME_DEVICES for more.") appended to the message.
template <class P>
DK_Error* check_device(const P& p, const char* call, int32_t device, const char* hint = "") {
  const int32_t n = p.num_devices;
  if (device >= 0 && device < n) return nullptr;
  return dkh_error(DK_ERROR_OUT_OF_RANGE,
                   "%s: device ordinal %d is out of range; this plugin has %d device(s), "
                   "%s:0..%s:%d%s",
                   call, (int)device, (int)n, p.name, p.name, (int)n - 1, hint);
}

// The allocation of `d` containing p, or end(). Caller holds d.mem_mu.
inline std::map<uintptr_t, size_t>::const_iterator find_allocation(const DeviceMemory& d,
                                                                   uintptr_t p) {
  auto it = d.allocations.upper_bound(p);
  if (it == d.allocations.begin()) return d.allocations.end();
  --it;
  return p < it->first + it->second ? it : d.allocations.end();  // sizes are never 0
}

// Whether p lies inside a live allocation of `d`. Takes d.mem_mu.
inline bool is_device_memory(DeviceMemory& d, const void* p) {
  std::lock_guard<std::mutex> lock(d.mem_mu);
  return find_allocation(d, uintptr_t(p)) != d.allocations.end();
}

// Why p is not device memory of `device`, for a message: it belongs to
// another device, or to none. Takes each device's mem_mu in turn.
template <class P> std::string pointer_hint(P& p, const void* ptr, int32_t device) {
  int32_t owner = -1;
  for (int32_t i = 0; i < p.num_devices && owner < 0; ++i) {
    if (is_device_memory(p.devices[i], ptr)) owner = i;
  }
  const std::string name = std::string(p.name) + ":";
  if (owner >= 0 && owner != device) {
    return "it belongs to " + name + std::to_string(owner) + ", not " + name +
           std::to_string(device);
  }
  return "it is not device memory of " + name + std::to_string(device) +
         " (a host pointer, a freed buffer, or garbage?)";
}

// [ptr, ptr + bytes) must lie inside one live allocation of `device` (a valid
// ordinal): DK_ERROR_INVALID_ARGUMENT naming `what` and the allocation
// otherwise. Takes the device's mem_mu.
template <class P> DK_Error* check_device_memory(P& p, const char* call, const char* what,
                                                 int32_t device, const void* ptr, uint64_t bytes) {
  DeviceMemory& d = p.devices[device];
  uintptr_t base = 0;
  size_t size = 0;
  {
    std::lock_guard<std::mutex> lock(d.mem_mu);
    auto it = find_allocation(d, uintptr_t(ptr));
    if (it != d.allocations.end()) {
      base = it->first;
      size = it->second;
    }
  }
  if (size == 0) {
    return dkh_error(DK_ERROR_INVALID_ARGUMENT, "%s: %s at %p is not inside a live allocation: %s",
                     call, what, ptr, pointer_hint(p, ptr, device).c_str());
  }
  const uint64_t offset = uintptr_t(ptr) - base;
  if (bytes > size - offset) {
    return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                     "%s: %s spans %llu bytes from offset %llu of a %zu-byte allocation at %p; "
                     "expected at most %llu. Hint: check the view's shape, strides and dtype.",
                     call, what, (unsigned long long)bytes, (unsigned long long)offset, size,
                     reinterpret_cast<void*>(base), (unsigned long long)(size - offset));
  }
  return nullptr;
}

// Every rule of a Memcpy the header states, for a valid args->device: the
// kind, the stream (the plugin's `check_stream(call, stream, device)`, called
// only when args->stream is not NULL), then, for a non-empty copy, dst and src
// not NULL, each inside a live allocation when its side is the device and not
// device memory when it is the host, and not overlapping. NULL when the copy
// may run (an empty one is a no-op the caller returns NULL for).
template <class P, class S>
DK_Error* check_memcpy(P& p, const char* call, const DK_Memcpy_Args* args,
                       DK_Error* (*check_stream)(const char*, const S*, int32_t)) {
  const int kind = int(args->kind);
  if (kind < DK_COPY_HOST_TO_DEVICE || kind > DK_COPY_DEVICE_TO_DEVICE) {
    return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                     "%s: kind is %d; expected DK_COPY_HOST_TO_DEVICE (0), "
                     "DK_COPY_DEVICE_TO_HOST (1) or DK_COPY_DEVICE_TO_DEVICE (2)",
                     call, kind);
  }
  if (args->stream != nullptr) {
    if (DK_Error* e = check_stream(call, args->stream, args->device)) return e;
  }
  if (args->size == 0) return nullptr;
  if (args->dst == nullptr || args->src == nullptr) {
    return dkh_error(DK_ERROR_INVALID_ARGUMENT, "%s: %s is NULL with size %zu; expected a %s", call,
                     args->dst == nullptr ? "dst" : "src", args->size,
                     "valid pointer (NULL is allowed only when size is 0)");
  }
  const int32_t device = args->device;
  struct Side {
    const char* what;
    const void* ptr;
    bool on_device;
    const char* kind;  // the copy kind under which this side is the host
  };
  const Side dst = {"dst", args->dst, kind != DK_COPY_DEVICE_TO_HOST, "DEVICE_TO_HOST"};
  const Side src = {"src", args->src, kind != DK_COPY_HOST_TO_DEVICE, "HOST_TO_DEVICE"};
  for (const Side& side : {dst, src}) {
    if (side.on_device) {
      if (DK_Error* e = check_device_memory(p, call, side.what, device, side.ptr, args->size))
        return e;
    } else if (is_device_memory(p.devices[device], side.ptr)) {
      return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                       "%s: kind is %s but %s %p is device memory of %s:%d. "
                       "Hint: use DK_COPY_DEVICE_TO_DEVICE.",
                       call, side.kind, side.what, side.ptr, p.name, (int)device);
    }
  }
  const auto d = uintptr_t(args->dst), s = uintptr_t(args->src);
  if (d < s + args->size && s < d + args->size) {
    return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                     "%s: dst %p and src %p overlap (%zu bytes each); expected disjoint "
                     "ranges. Hint: copy through a temporary buffer.",
                     call, args->dst, args->src, args->size);
  }
  return nullptr;
}

// ---- Memory bookkeeping ----------------------------------------------------------

// Records a new allocation [ptr, ptr + size) in `d`. Caller holds d.mem_mu.
// If the table cannot grow, calls release(ptr) and rethrows (bad_alloc):
// the allocation never leaks and the statistics never count it.
template <class Release>
void add_allocation(DeviceMemory& d, void* ptr, size_t size, Release release) {
  try {
    d.allocations.emplace(uintptr_t(ptr), size);
  } catch (...) {
    release(ptr);
    throw;
  }
  d.bytes_in_use += size;
  d.peak_bytes_in_use = std::max(d.peak_bytes_in_use, d.bytes_in_use);
}

// Removes the allocation that starts exactly at ptr from `d` and returns its
// size; 0 (nothing changed) when ptr is not one. Caller holds d.mem_mu.
inline size_t remove_allocation(DeviceMemory& d, const void* ptr) {
  auto it = d.allocations.find(uintptr_t(ptr));
  if (it == d.allocations.end()) return 0;
  const size_t size = it->second;
  d.bytes_in_use -= size;
  d.allocations.erase(it);
  return size;
}

// Memory_Free's error for a pointer that is not a live allocation's base.
template <class P>
DK_Error* not_an_allocation(P& p, const char* call, const void* ptr, int32_t device) {
  return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                   "%s: %p is not a live allocation of %s:%d; expected exactly a pointer "
                   "Memory_Allocate returned and not yet freed: %s. Hint: look for a double "
                   "free or a freed view offset into a buffer.",
                   call, ptr, p.name, (int)device, pointer_hint(p, ptr, device).c_str());
}

// Device_MemoryStats: one consistent snapshot. Takes d.mem_mu.
inline void memory_stats(DeviceMemory& d, DK_Device_MemoryStats_Args* args) {
  std::lock_guard<std::mutex> lock(d.mem_mu);
  args->bytes_in_use = d.bytes_in_use;
  args->peak_bytes_in_use = d.peak_bytes_in_use;
  args->num_allocs = d.allocations.size();
}

// ---- Streams and events: handles and the live-stream list ------------------------

// The `magic` word of a DK_Stream / DK_Event: a best-effort use-after-destroy
// check (set to kDead before the object is freed).
constexpr uint32_t kLiveStream = 0x5354524d, kLiveEvent = 0x45564e54, kDead = 0;

// A stream handle: not NULL, live (magic == kLiveStream) and, when device >= 0,
// on that device. `S` has `magic` (atomic) and `device`.
template <class P, class S>
DK_Error* check_stream(const P& p, const char* call, const S* s, int32_t device) {
  if (s == nullptr) {
    return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                     "%s: stream is NULL; expected a stream from Stream_Create", call);
  }
  if (s->magic.load() != kLiveStream) {
    return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                     "%s: stream %p is not a live stream. Hint: was it already passed to "
                     "Stream_Destroy?",
                     call, static_cast<const void*>(s));
  }
  if (device >= 0 && s->device != device) {
    return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                     "%s: stream %p belongs to %s:%d; expected a stream of %s:%d", call,
                     static_cast<const void*>(s), p.name, (int)s->device, p.name, (int)device);
  }
  return nullptr;
}

// An event handle (`what`: "event", "start", "end"): not NULL and live.
template <class E> DK_Error* check_event(const char* call, const char* what, const E* e) {
  if (e == nullptr) {
    return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                     "%s: %s is NULL; expected an event from Event_Create", call, what);
  }
  if (e->magic.load() != kLiveEvent) {
    return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                     "%s: %s %p is not a live event. Hint: was it already passed to "
                     "Event_Destroy?",
                     call, what, static_cast<const void*>(e));
  }
  return nullptr;
}

// The `magic` word of a DK_Graph (the optional graphs part, since 1.5).
constexpr uint32_t kLiveGraph = 0x47524150;  // "GRAP"

// A graph handle: not NULL and live (magic == kLiveGraph). `G` has `magic` (atomic).
template <class G> DK_Error* check_graph(const char* call, const G* g) {
  if (g == nullptr) return dkh_error(DK_ERROR_INVALID_ARGUMENT, "%s: graph is NULL", call);
  if (g->magic.load() != kLiveGraph) {
    return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                     "%s: graph %p is not a live graph of this plugin (destroyed already?)", call,
                     static_cast<const void*>(g));
  }
  return nullptr;
}

// Event_ElapsedTime's error for an event not recorded, or recorded but not
// reached yet (`which`: "start" or "end").
inline DK_Error* event_not_reached(const char* call, const char* which, bool recorded) {
  return dkh_error(DK_ERROR_FAILED_PRECONDITION,
                   "%s: event '%s' is %s; expected both events recorded and reached. "
                   "Hint: Event_Synchronize both events first.",
                   call, which, recorded ? "recorded but not reached yet" : "not recorded");
}

// Adds a new stream to its device's live list. Takes streams_mu; may throw.
template <class S> void add_stream(DeviceState<S>& d, std::shared_ptr<S> s) {
  std::lock_guard<std::mutex> lock(d.streams_mu);
  d.streams.push_back(std::move(s));
}

// Takes a stream off its device's live list; the returned share keeps it
// alive until the caller is done (a concurrent Device_Synchronize may hold
// another). Takes streams_mu.
template <class S> std::shared_ptr<S> remove_stream(DeviceState<S>& d, const S* s) {
  std::lock_guard<std::mutex> lock(d.streams_mu);
  for (auto it = d.streams.begin(); it != d.streams.end(); ++it) {
    if (it->get() == s) {
      std::shared_ptr<S> keep = std::move(*it);
      d.streams.erase(it);
      return keep;
    }
  }
  return nullptr;
}

// The device's live streams, in creation order, for Device_Synchronize: a
// snapshot, so the synchronisation runs outside the lock and Stream_Create /
// Stream_Destroy stay free meanwhile. Takes streams_mu.
template <class S> std::vector<std::shared_ptr<S>> live_streams(DeviceState<S>& d) {
  std::lock_guard<std::mutex> lock(d.streams_mu);
  return d.streams;
}

}  // namespace dkh

#endif  // DEVICEKIT_PLUGIN_RUNTIME_HPP_
