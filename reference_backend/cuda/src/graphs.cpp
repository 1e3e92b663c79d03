// The graphs part (device API 1.5) as the ABI sees it: capture the work
// enqueued on a stream, then launch it again and again. The recording and
// the replay are the device layer's (gpu.h, Graphs: CUDA graphs in the real
// build, a recorded job list in the emulator); this file adds the header's
// rules, the same in both builds:
//  * forbidden work during a capture (stream.cpp and runtime.cpp call
//    capture_forbidden): Stream_Synchronize, Stream_Query, Device_Synchronize
//    of the device, Event_Synchronize of an event recorded in the capture and
//    a Memcpy to or from host memory on the stream return
//    DK_ERROR_FAILED_PRECONDITION and invalidate the capture (its end returns
//    that error and no graph);
//  * captures do not nest; a Graph_Launch into a capturing stream is refused
//    (DK_ERROR_UNIMPLEMENTED: graphs are not recorded into graphs);
//  * events recorded or waited on in a capture must outlive the graph:
//    Graph_Launch checks they are still alive (best effort, like every
//    use-after-destroy check) and marks the recorded ones as recorded;
//  * Graph_Destroy with launches still queued is safe (gpu::graph_destroy).
#include <memory>
#include <utility>
#include <vector>

#include "api.h"
#include "internal.h"
#include "launch.h"

struct DK_Graph {
  std::atomic<uint32_t> magic{dkh::kLiveGraph};  // best-effort use-after-destroy check
  int32_t device = 0;
  dkcuda::gpu::Graph* gpu = nullptr;
  std::vector<DK_Event*> records, waits;  // borrowed: must outlive the graph
};

namespace dkcuda {
namespace {

DK_Error* forbidden_error(const char* call) {
  return dkh_error(DK_ERROR_FAILED_PRECONDITION,
                   "%s: the stream is capturing a graph, and a capture may not synchronise with "
                   "the host or copy to or from host memory; the capture is now invalid "
                   "(Graph_Capture(end) returns this error). Hint: move host work out of the "
                   "captured region.",
                   call);
}

// Ends what a capture left on its events (under s->capture_mu).
void forget_events(DK_Stream* s) {
  for (DK_Event* e : s->captured_records) {
    DK_Stream* expected = s;
    e->captured_on.compare_exchange_strong(expected, nullptr);
  }
  s->captured_records.clear();
  s->captured_waits.clear();
  dkh::destroy_error(s->capture_invalid);
  s->capture_invalid = nullptr;
}

}  // namespace

DK_Error* capture_forbidden(const char* call, DK_Stream* s) {
  if (!s->capturing.load()) return nullptr;
  std::lock_guard<std::mutex> lock(s->capture_mu);
  if (!s->capturing.load()) return nullptr;
  if (s->capture_invalid == nullptr) s->capture_invalid = forbidden_error(call);
  return forbidden_error(call);
}

void capture_note_event(DK_Stream* s, DK_Event* e, bool wait) {
  std::lock_guard<std::mutex> lock(s->capture_mu);
  if (wait) {
    s->captured_waits.push_back(e);
  } else {
    s->captured_records.push_back(e);
    e->captured_on.store(s);
  }
}

void capture_abandon(DK_Stream* s) {
  std::lock_guard<std::mutex> lock(s->capture_mu);
  if (!s->capturing.load()) return;
  gpu::Graph* dropped = nullptr;
  gpu::capture_end(s->gpu, false, &dropped);
  forget_events(s);
  s->capturing.store(false);
}

}  // namespace dkcuda

using namespace dkcuda;

extern "C" {

static DK_Error* dk_cuda_Graph_Capture(DK_Graph_Capture_Args* args) {
  static const char* const kCall = DKCUDA_NAME ".Graph_Capture";
  DKCUDA_CHECK_ARGS(kCall, args, DK_Graph_Capture_Args);
  if (DK_Error* e = check_stream(kCall, args->stream, -1)) return e;
  if (args->end != 0 && args->end != 1) {
    return dkh_error(DK_ERROR_INVALID_ARGUMENT, "%s: end is %d; expected 0 (begin) or 1 (end)",
                     kCall, int(args->end));
  }
  return guarded(kCall, [&]() -> DK_Error* {
    DK_Stream* s = args->stream;
    std::lock_guard<std::mutex> lock(s->capture_mu);
    if (args->end == 0) {
      if (s->capturing.load()) {
        return dkh_error(DK_ERROR_FAILED_PRECONDITION,
                         "%s(begin): the stream is already capturing; captures do not nest "
                         "(the running capture goes on)",
                         kCall);
      }
      const gpu::Status st = gpu::capture_begin(s->gpu);
      if (!st.ok()) return error_from_status(kCall, st);
      s->capturing.store(true);
      return nullptr;
    }
    if (!s->capturing.load()) {
      return dkh_error(DK_ERROR_FAILED_PRECONDITION,
                       "%s(end): the stream is not capturing. Hint: call Graph_Capture with "
                       "end=0 first.",
                       kCall);
    }
    s->capturing.store(false);
    DK_Error* invalid = s->capture_invalid;
    s->capture_invalid = nullptr;
    auto g = std::make_unique<DK_Graph>();
    g->device = s->device;
    g->records = s->captured_records;
    g->waits = s->captured_waits;
    forget_events(s);
    const gpu::Status st = gpu::capture_end(s->gpu, invalid == nullptr, &g->gpu);
    if (invalid != nullptr) return invalid;  // handed to the caller
    if (!st.ok()) return error_from_status(kCall, st);
    args->graph = g.release();
    return nullptr;
  });
}

static DK_Error* dk_cuda_Graph_Launch(DK_Graph_Launch_Args* args) {
  static const char* const kCall = DKCUDA_NAME ".Graph_Launch";
  DKCUDA_CHECK_ARGS(kCall, args, DK_Graph_Launch_Args);
  if (DK_Error* e = dkh::check_graph(kCall, args->graph)) return e;
  if (DK_Error* e = check_stream(kCall, args->stream, args->graph->device)) return e;
  if (args->stream->capturing.load()) {
    return dkh_error(DK_ERROR_UNIMPLEMENTED,
                     "%s: the stream is capturing a graph; the %s plugin does not record a "
                     "graph launch inside another graph",
                     kCall, DKCUDA_NAME);
  }
  DK_Graph* g = args->graph;
  for (const auto* list : {&g->records, &g->waits}) {
    for (DK_Event* e : *list) {
      if (DK_Error* err = dkh::check_event(kCall, "an event recorded or waited on in the graph", e))
        return err;  // destroyed before the graph
    }
  }
  return guarded(kCall, [&]() -> DK_Error* {
    const gpu::Status st = gpu::graph_launch(g->gpu, args->stream->gpu);
    if (!st.ok()) return error_from_status(kCall, st);
    for (DK_Event* e : g->records) e->recorded.store(true);
    return nullptr;
  });
}

static DK_Error* dk_cuda_Graph_Destroy(DK_Graph_Destroy_Args* args) {
  static const char* const kCall = DKCUDA_NAME ".Graph_Destroy";
  DKCUDA_CHECK_ARGS(kCall, args, DK_Graph_Destroy_Args);
  if (args->graph == nullptr) return nullptr;
  if (DK_Error* e = dkh::check_graph(kCall, args->graph)) return e;
  uint32_t live = dkh::kLiveGraph;
  if (!args->graph->magic.compare_exchange_strong(live, 0)) {
    return dkh::check_graph(kCall, args->graph);  // a racing second destroy
  }
  std::unique_ptr<DK_Graph> g(args->graph);
  return guarded(kCall, [&]() -> DK_Error* {
    const gpu::Status st = gpu::graph_destroy(g->gpu);  // queued launches still run
    return st.ok() ? nullptr : error_from_status(kCall, st);
  });
}

// The part's table, linked into DK_Api.extension_start (api.h).
const DK_Graphs dk_cuda_graphs = {
    {DK_Graphs_STRUCT_SIZE, DK_EXTENSION_GRAPHS, nullptr},
    dk_cuda_Graph_Capture,
    dk_cuda_Graph_Launch,
    dk_cuda_Graph_Destroy,
};

}  // extern "C"
