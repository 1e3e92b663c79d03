// The trace recorder behind devicekit.trace: host spans of every kernel
// launch, fused launch, copy and synchronize, allocation and free events with
// the bytes in use, and device-timing events around each launch on devices
// that declare DK_DEVICE_CAP_TIMING_EVENTS. Off by default; then every hook
// is one relaxed load of `g_on` (a plain load on x86 and ARM) and a branch.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "devicekit/device_api.h"

namespace dk {
class Device;
namespace trace {

// Written only by start()/stop(); read with a relaxed load on the hot path:
// a launch racing with start/stop is simply traced or not.
extern std::atomic<bool> g_on;
inline bool on() { return g_on.load(std::memory_order_relaxed); }

// kGraph: one graph replay (`bytes` holds the number of calls it issues).
enum Kind : uint8_t { kLaunch, kFused, kCopy, kSync, kAlloc, kFree, kGraph };

// A host span around one plugin call. With a non-null `stream` on a device
// with timing events, Event_Record before and after the call gives the
// span's device time as well. `name` must outlive the trace (a static string).
class Span {
 public:
  Span(Kind kind, Device& dev, DK_Stream* stream, const char* name, uint64_t bytes = 0);
  ~Span();
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  size_t index_;
  Device& dev_;
  DK_Stream* stream_;
};

// One allocation (+bytes) or free (-bytes); `in_use` is the device's
// allocated bytes after it.
void memory(Device& dev, int64_t delta, uint64_t in_use);

// What start()..stop() recorded, in order. Times are steady-clock ns; `e0`/`e1`
// are this trace's own events (destroy_event them), null without device timing.
struct Record {
  Kind kind = kLaunch;
  const char* name = "";
  Device* dev = nullptr;
  DK_Stream* stream = nullptr;
  uint32_t tid = 0;
  uint64_t t0 = 0, t1 = 0;
  int64_t bytes = 0;    // copies: bytes moved; alloc/free: +/- block bytes
  uint64_t in_use = 0;  // alloc/free: the device's allocated bytes after it
  std::string scope;    // the caller's scopes, outermost first, " > "-joined
  DK_Event* e0 = nullptr;
  DK_Event* e1 = nullptr;
};

uint64_t now_ns();
void start();
std::vector<Record> stop();
void destroy_event(Device& dev, DK_Event* ev);
// Scopes name who caused the next launches (an ATen op, an SDK composite);
// per thread. Set from Python only while tracing.
void push_scope(std::string name);
void pop_scope();

}  // namespace trace
}  // namespace dk
