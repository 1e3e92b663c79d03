// The trace recorder: see trace.h. Its Python face is trace_py.cpp.
#include "trace.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <mutex>
#include <thread>

#include "device.h"

namespace dk {
namespace trace {

std::atomic<bool> g_on{false};

namespace {
std::mutex g_mu;
void drop(Device& dev, DK_Error* e) {
  try {
    dev.check(e, "trace event");
  } catch (...) {}
}
std::vector<Record> g_records;
thread_local std::vector<std::string> t_scope;  // innermost last

// The OS thread id, as Python's threading.get_native_id() gives it, so that
// the SDK's spans and Python's land on one host track per thread.
uint32_t thread_number() {
  thread_local uint32_t mine = uint32_t(syscall(SYS_gettid));
  return mine;
}

std::string scope_path() {
  std::string s;
  for (const auto& part : t_scope) s += (s.empty() ? "" : " > ") + part;
  return s;
}

// Event calls on the trace's own events: an error is dropped (the span then
// has no device time), never raised into the op that is being traced.
DK_Event* record_event(Device& dev, DK_Stream* stream) {
  auto c = DK_ARGS(DK_Event_Create_Args);
  c.device = dev.index();
  if (DK_Error* e = dev.api()->Event_Create(&c)) {
    drop(dev, e);
    return nullptr;
  }
  auto r = DK_ARGS(DK_Event_Record_Args);
  r.event = c.event;
  r.stream = stream;
  if (DK_Error* e = dev.api()->Event_Record(&r)) {
    drop(dev, e);
    destroy_event(dev, c.event);
    return nullptr;
  }
  return c.event;
}
}  // namespace

uint64_t now_ns() {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count());
}

void destroy_event(Device& dev, DK_Event* ev) {
  if (ev == nullptr) return;
  auto a = DK_ARGS(DK_Event_Destroy_Args);
  a.event = ev;
  if (DK_Error* e = dev.api()->Event_Destroy(&a)) drop(dev, e);
}

Span::Span(Kind kind, Device& dev, DK_Stream* stream, const char* name, uint64_t bytes)
    : dev_(dev), stream_(stream) {
  // Not while the device captures a graph: a plugin records Event_Record on a
  // capturing stream into the graph, which would then hold the trace's events.
  const bool timed = stream != nullptr && !dev.capturing() &&
                     (dev.properties().capabilities & DK_DEVICE_CAP_TIMING_EVENTS);
  Record r;
  r.kind = kind;
  r.name = name;
  r.dev = &dev;
  r.stream = stream;
  r.tid = thread_number();
  r.bytes = int64_t(bytes);
  r.scope = scope_path();
  if (!timed) stream_ = nullptr;
  r.t0 = now_ns();
  if (timed) r.e0 = record_event(dev, stream);
  std::lock_guard<std::mutex> lock(g_mu);
  index_ = g_records.size();
  g_records.push_back(std::move(r));
}

Span::~Span() {
  DK_Event* e1 = stream_ ? record_event(dev_, stream_) : nullptr;
  const uint64_t t1 = now_ns();
  std::lock_guard<std::mutex> lock(g_mu);
  if (index_ < g_records.size()) {  // stop() may have taken the records meanwhile
    g_records[index_].t1 = t1;
    g_records[index_].e1 = e1;
  } else {
    destroy_event(dev_, e1);
  }
}

void memory(Device& dev, int64_t delta, uint64_t in_use) {
  Record r;
  r.kind = delta >= 0 ? kAlloc : kFree;
  r.name = delta >= 0 ? "alloc" : "free";
  r.dev = &dev;
  r.tid = thread_number();
  r.bytes = delta;
  r.in_use = in_use;
  r.scope = scope_path();
  r.t0 = r.t1 = now_ns();
  std::lock_guard<std::mutex> lock(g_mu);
  g_records.push_back(std::move(r));
}

void push_scope(std::string name) { t_scope.push_back(std::move(name)); }
void pop_scope() {
  if (!t_scope.empty()) t_scope.pop_back();
}

void start() {
  std::lock_guard<std::mutex> lock(g_mu);
  g_records.clear();
  g_on = true;
}

std::vector<Record> stop() {
  std::vector<Record> out;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_on = false;
    out.swap(g_records);
  }
  t_scope.clear();
  return out;
}

}  // namespace trace
}  // namespace dk
