// The graphs part (device API 1.5): capture the work enqueued on a stream,
// then launch it again and again.
//
// Every kernel, fused kernel and device-to-device copy reaches a stream as one
// WorkFn plus a payload copied at the call (internal.h, enqueue). While a
// stream captures, enqueue_raw hands that pair to capture_record instead of
// the queue: the payload already is "a copy of the arguments, pointers as they
// are", so recording costs one copy and replaying is a loop of calls. A launch
// is ONE queue item whose worker runs the recorded calls in order, so the host
// pays one enqueue per graph, not one per captured call.
//
// Event_Record / Stream_WaitEvent on a capturing stream are recorded as event
// nodes: each Graph_Launch makes a fresh point for every recorded record (the
// event's latest record from then on) and takes the point every recorded wait
// waits for, in node order, and the launch's worker reaches or waits for them
// where they were recorded. A recorded event must outlive the graph.
//
// Not recorded (refused): collectives on a capturing stream
// (DK_ERROR_UNIMPLEMENTED, the capture goes on), and a Graph_Launch into a
// capturing stream. Forbidden by the header (they
// invalidate the capture): host synchronisation and host copies (stream.cpp,
// runtime.cpp call capture_forbidden).
#include <cstring>
#include <mutex>
#include <vector>

#include "api.h"
#include "internal.h"

namespace dkcpu {

struct GraphNode {
  enum Kind { kRun, kRecord, kWait } kind = kRun;
  WorkFn fn = nullptr;         // kRun
  DK_Event* event = nullptr;   // kRecord, kWait: borrowed, must outlive the graph
  alignas(16) unsigned char payload[kMaxPayloadBytes];
};

struct Capture {
  explicit Capture(int32_t dev) : device(dev) {}
  const int32_t device;
  std::vector<GraphNode> nodes;  // appended under the stream's enqueue lock
  std::mutex mu;
  DK_Error* invalid = nullptr;  // under mu: the first forbidden call's error
};

}  // namespace dkcpu

using namespace dkcpu;

struct DK_Graph {
  std::atomic<uint32_t> magic{dkh::kLiveGraph};  // best-effort use-after-destroy check
  int32_t device = 0;
  std::vector<GraphNode> nodes;
  size_t event_nodes = 0;  // kRecord and kWait nodes
  // One share for the caller (dropped by Graph_Destroy) and one per queued
  // launch (dropped by its worker once it ran): destroying a graph whose
  // launches are still queued is safe, the last of them frees it.
  std::atomic<int64_t> refs{1};
};

namespace dkcpu {
namespace {

void release(DK_Graph* g) {
  if (g->refs.fetch_sub(1) == 1) delete g;
}

// `points`: the launch's event points, one per event node in node order
// (heap, owned by the launch item; NULL when the graph has no event nodes).
struct LaunchPayload {
  DK_Graph* graph;
  std::vector<EventPointRef>* points;
};

// One launch of a graph, on the stream's worker: every recorded call in the
// recorded order. Like eager work, an error does not stop the calls after it;
// the first error is the one the stream reports.
DK_Error* run_graph(const void* payload) {
  const auto* lp = static_cast<const LaunchPayload*>(payload);
  DK_Graph* g = lp->graph;
  std::unique_ptr<std::vector<EventPointRef>> points(lp->points);
  size_t next_point = 0;
  DK_Error* first = nullptr;
  for (const GraphNode& n : g->nodes) {
    if (n.kind != GraphNode::kRun) {
      const EventPointRef& p = (*points)[next_point++];
      if (n.kind == GraphNode::kRecord) {
        event_point_reach(p);
      } else {
        event_point_wait(p);
      }
      continue;
    }
    DK_Error* e = guarded("cpu.Graph_Launch (replayed call)", [&] { return n.fn(n.payload); });
    if (e == nullptr) continue;
    if (first == nullptr) {
      first = e;
    } else {
      DK_Error_Destroy_Args destroy = {DK_Error_Destroy_Args_STRUCT_SIZE, e};
      dkh_Error_Destroy(&destroy);
    }
  }
  release(g);
  return first;
}

}  // namespace

void capture_record(Capture* c, WorkFn fn, const void* payload, size_t bytes) {
  c->nodes.emplace_back();
  GraphNode& n = c->nodes.back();
  n.fn = fn;
  std::memcpy(n.payload, payload, bytes);
}

void capture_event(Capture* c, int wait, DK_Event* event) {
  c->nodes.emplace_back();
  GraphNode& n = c->nodes.back();
  n.kind = wait ? GraphNode::kWait : GraphNode::kRecord;
  n.event = event;
}

void capture_delete(Capture* c) {
  if (c != nullptr && c->invalid != nullptr) {
    DK_Error_Destroy_Args destroy = {DK_Error_Destroy_Args_STRUCT_SIZE, c->invalid};
    dkh_Error_Destroy(&destroy);
  }
  delete c;
}

DK_Error* capture_forbidden(const char* call, DK_Stream* stream) {
  Capture* c = stream_capture(stream);
  if (c == nullptr) return nullptr;
  auto make = [&] {
    return dkh_error(DK_ERROR_FAILED_PRECONDITION,
                     "%s: the stream is capturing a graph, and a capture may not synchronise "
                     "with the host or copy to or from host memory; the capture is now invalid "
                     "(Graph_Capture(end) returns this error). Hint: move host work out of "
                     "the captured region.",
                     call);
  };
  std::lock_guard<std::mutex> lock(c->mu);
  if (c->invalid == nullptr) c->invalid = make();
  return make();
}

}  // namespace dkcpu

extern "C" {

static DK_Error* dk_cpu_Graph_Capture(DK_Graph_Capture_Args* args) {
  static const char* const kCall = "cpu.Graph_Capture";
  DKCPU_CHECK_ARGS(kCall, args, DK_Graph_Capture_Args);
  if (DK_Error* e = check_stream(kCall, args->stream, -1)) return e;
  if (args->end != 0 && args->end != 1) {
    return dkh_error(DK_ERROR_INVALID_ARGUMENT, "%s: end is %d; expected 0 (begin) or 1 (end)",
                     kCall, int(args->end));
  }
  return guarded(kCall, [&]() -> DK_Error* {
    DK_Stream* s = args->stream;
    if (args->end == 0) {
      auto c = std::make_unique<Capture>(stream_device(s));
      if (!stream_swap_capture(s, nullptr, c.get())) {
        return dkh_error(DK_ERROR_FAILED_PRECONDITION,
                         "%s(begin): the stream is already capturing; captures do not nest "
                         "(the running capture goes on)",
                         kCall);
      }
      c.release();  // owned by the stream until Graph_Capture(end)
      return nullptr;
    }
    Capture* c = stream_capture(s);
    if (c == nullptr || !stream_swap_capture(s, c, nullptr)) {
      return dkh_error(DK_ERROR_FAILED_PRECONDITION,
                       "%s(end): the stream is not capturing. Hint: call Graph_Capture with "
                       "end=0 first.",
                       kCall);
    }
    std::unique_ptr<Capture> owned(c);
    if (owned->invalid != nullptr) return owned->invalid;  // handed to the caller
    auto g = std::make_unique<DK_Graph>();
    g->device = owned->device;
    g->nodes = std::move(owned->nodes);
    for (const GraphNode& n : g->nodes) g->event_nodes += n.kind != GraphNode::kRun;
    args->graph = g.release();
    return nullptr;
  });
}

static DK_Error* dk_cpu_Graph_Launch(DK_Graph_Launch_Args* args) {
  static const char* const kCall = "cpu.Graph_Launch";
  DKCPU_CHECK_ARGS(kCall, args, DK_Graph_Launch_Args);
  if (DK_Error* e = dkh::check_graph(kCall, args->graph)) return e;
  if (DK_Error* e = check_stream(kCall, args->stream, args->graph->device)) return e;
  if (stream_capture(args->stream) != nullptr) {
    return dkh_error(DK_ERROR_UNIMPLEMENTED,
                     "%s: the stream is capturing a graph; the CPU plugin does not record a "
                     "graph launch inside another graph",
                     kCall);
  }
  return guarded(kCall, [&]() -> DK_Error* {
    DK_Graph* g = args->graph;
    if (g->nodes.empty()) return nullptr;
    std::unique_ptr<std::vector<EventPointRef>> points;
    if (g->event_nodes != 0) {
      for (const GraphNode& n : g->nodes) {
        if (n.kind == GraphNode::kRun) continue;
        if (DK_Error* e = check_live_event(kCall, n.event)) return e;  // destroyed before the graph
      }
      points = std::make_unique<std::vector<EventPointRef>>();
      points->reserve(g->event_nodes);
      for (const GraphNode& n : g->nodes) {
        if (n.kind == GraphNode::kRecord) points->push_back(event_new_point(n.event));
        if (n.kind == GraphNode::kWait) points->push_back(event_pending_point(n.event));
      }
    }
    g->refs.fetch_add(1);
    const LaunchPayload p{g, points.release()};
    enqueue_uncaptured(args->stream, run_graph, &p, sizeof p);
    return nullptr;
  });
}

static DK_Error* dk_cpu_Graph_Destroy(DK_Graph_Destroy_Args* args) {
  static const char* const kCall = "cpu.Graph_Destroy";
  DKCPU_CHECK_ARGS(kCall, args, DK_Graph_Destroy_Args);
  if (args->graph == nullptr) return nullptr;
  if (DK_Error* e = dkh::check_graph(kCall, args->graph)) return e;
  uint32_t live = dkh::kLiveGraph;
  if (!args->graph->magic.compare_exchange_strong(live, 0)) {
    return dkh::check_graph(kCall, args->graph);  // a racing second destroy
  }
  release(args->graph);  // queued launches keep it alive until they ran
  return nullptr;
}

// The part's table, linked into DK_Api.extension_start after collectives (api.h).
const DK_Graphs dk_cpu_graphs = {
    {DK_Graphs_STRUCT_SIZE, DK_EXTENSION_GRAPHS, nullptr},
    dk_cpu_Graph_Capture,
    dk_cpu_Graph_Launch,
    dk_cpu_Graph_Destroy,
};

}  // extern "C"
