// devicekit.trace's C++ side (_core._trace_*): start/stop the recorder of
// trace.h and hand its records to Python, with device times from the trace's
// timing events.
#include <map>

#include "bindings.h"
#include "trace.h"

namespace dk {

namespace {
const char* kind_name(trace::Kind k) {
  switch (k) {
    case trace::kLaunch: return "launch";
    case trace::kFused: return "fused";
    case trace::kCopy: return "copy";
    case trace::kSync: return "sync";
    case trace::kAlloc: return "alloc";
    case trace::kFree: return "free";
    case trace::kGraph: return "graph";
  }
  return "unknown";
}

// Milliseconds from `a` to `b`, or a negative number when the plugin cannot say.
bool elapsed_ms(Device& dev, DK_Event* a, DK_Event* b, double* ms) {
  auto e = DK_ARGS(DK_Event_ElapsedTime_Args);
  e.start = a;
  e.end = b;
  if (DK_Error* err = dev.api()->Event_ElapsedTime(&e)) {
    try {
      dev.check(err, "Event_ElapsedTime");
    } catch (...) {}
    return false;
  }
  *ms = e.milliseconds;
  return true;
}

// Device timing of each timed record: the first timed launch of a stream is
// placed at its host enqueue time and every later one at that plus the
// elapsed time between their events (a device clock is not the host clock;
// only differences on one stream are measured). trace.py's to_chrome then
// shifts each stream so that no launch starts before its host enqueue.
py::list to_python(std::vector<trace::Record>& recs) {
  std::map<Device*, bool> synced;
  for (auto& r : recs) {
    if (r.e0 && !synced.count(r.dev)) {
      try {
        r.dev->synchronize();
        synced[r.dev] = true;
      } catch (...) {
        synced[r.dev] = false;  // a failed kernel: its device has no device times
      }
    }
  }
  std::map<DK_Stream*, const trace::Record*> origin;
  std::map<DK_Stream*, int> stream_number;
  py::list out;
  for (auto& r : recs) {
    py::dict d;
    d["kind"] = kind_name(r.kind);
    d["name"] = r.name;
    d["device"] = r.dev->name();
    d["tid"] = r.tid;
    d["t0"] = r.t0;
    d["t1"] = r.t1 ? r.t1 : r.t0;
    d["bytes"] = r.kind == trace::kGraph ? 0 : r.bytes;
    if (r.kind == trace::kGraph) d["calls"] = r.bytes;
    d["in_use"] = r.in_use;
    d["scope"] = r.scope;
    if (r.stream) {
      auto it = stream_number.find(r.stream);
      if (it == stream_number.end()) {
        it = stream_number.emplace(r.stream, int(stream_number.size())).first;
      }
      d["stream"] = it->second;
    }
    if (r.e0 && r.e1 && synced[r.dev]) {
      const trace::Record*& o = origin[r.stream];
      if (o == nullptr) o = &r;
      double a = 0, b = 0;
      if (elapsed_ms(*r.dev, o->e0, r.e0, &a) && elapsed_ms(*r.dev, o->e0, r.e1, &b)) {
        d["dev_t0"] = double(o->t0) + a * 1e6;
        d["dev_t1"] = double(o->t0) + b * 1e6;
      }
    }
    out.append(d);
  }
  for (auto& r : recs) {
    trace::destroy_event(*r.dev, r.e0);
    trace::destroy_event(*r.dev, r.e1);
  }
  return out;
}
}  // namespace

void bind_trace(py::module_& m) {
  m.def("_trace_start", &trace::start, "Start recording (clears earlier records).");
  m.def(
      "_trace_stop",
      [] {
        auto recs = trace::stop();
        return to_python(recs);
      },
      "Stop recording; the records as dicts (times in steady-clock ns).");
  m.def("_trace_on", [] { return trace::on(); });
  m.def("_trace_now_ns", &trace::now_ns, "The recorder's clock (steady clock, ns).");
  m.def("_trace_push", &trace::push_scope, "Name the cause of the next launches (this thread).");
  m.def("_trace_pop", &trace::pop_scope);
}

}  // namespace dk
