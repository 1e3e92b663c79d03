// The graphs part (device API 1.5, optional) bound for devicekit.graphs:
// capture the kernels the tensor ops of a device enqueue on its default
// stream (every tensor op runs there), then launch them again with one
// plugin call. The allocations made during the capture belong to the graph
// (Device::begin_capture pins them to its pool), so a replay never writes
// memory that has since been handed to another tensor. A plugin without the
// part gets the SDK's own recording (graph_record.h): the same capture rules
// and pool, with the recorded calls issued again from C++ on replay; a
// caller may ask for that recording on any plugin (mode "recorded"), e.g.
// to compare it with the plugin's native graphs.
#include <cstdio>
#include <memory>
#include <optional>

#include <pybind11/stl.h>

#include "bindings.h"
#include "boundary.h"
#include "trace.h"

namespace dk {
namespace {

const DK_Graphs& graphs_of(const Device& d) {
  const DK_Graphs* g = d.plugin()->graphs();
  if (g == nullptr) {
    part_not_implemented(d, "graphs", "DK_Graphs",
                         "use mode='recorded' (or 'auto') for DeviceKit's own recording");
  }
  return *g;
}

class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  ~Graph() {
    try {
      destroy();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "devicekit: destroying a graph failed: %s\n", e.what());
    }
  }

  // mode: "auto" (native when the plugin has the graphs part, else
  // recorded), "native" or "recorded".
  void begin(std::shared_ptr<Device> dev, const std::string& mode) {
    if (mode != "auto" && mode != "native" && mode != "recorded") {
      invalid_argument("Graph.capture: mode is '" + mode +
                       "'; expected 'auto', 'native' or 'recorded'");
    }
    if (graph_ != nullptr || recording_ != nullptr || capturing_) {
      invalid_argument(
          "Graph.capture: this graph already holds a capture; make a new Graph "
          "(or reset() this one) to capture again");
    }
    const bool recorded =
        mode == "recorded" || (mode == "auto" && dev->plugin()->graphs() == nullptr);
    if (!recorded) graphs_of(*dev);  // throws for a plugin without the part
    dev->begin_use();
    if (dev->capturing()) {
      invalid_argument("Graph.capture: device " + dev->name() +
                       " is already capturing a graph; captures do not nest");
    }
    auto pool = std::make_shared<Device::GraphPool>();
    if (recorded) {
      dev->default_stream();  // created before the capture: replays use it
      auto rec = std::make_shared<Recording>();
      dev->begin_capture(pool, rec);
      recording_ = std::move(rec);
      dev_ = std::move(dev);
      pool_ = std::move(pool);
      capturing_ = true;
      return;
    }
    const DK_Graphs& g = graphs_of(*dev);
    auto a = DK_ARGS(DK_Graph_Capture_Args);
    a.stream = dev->default_stream();
    a.end = 0;
    dev->check(g.Graph_Capture(&a), "Graph_Capture(begin)");
    // "auto": which graph fits is known only once the capture's ops are
    // (user code runs once, so it cannot be captured again): record a shadow
    // copy of every call beside the plugin's capture, and keep it instead of
    // the plugin's graph when it holds random launches (see end()).
    if (mode == "auto") shadow_ = std::make_shared<Recording>();
    dev->begin_capture(pool, {}, shadow_);
    dev_ = std::move(dev);
    pool_ = std::move(pool);
    capturing_ = true;
  }

  void end() {
    if (!capturing_) invalid_argument("Graph.end_capture: this graph is not capturing");
    capturing_ = false;
    native_calls_ = dev_->captured_calls();
    dev_->end_capture();
    if (recording_ != nullptr) {
      recorded_ = true;
      return;
    }
    auto a = DK_ARGS(DK_Graph_Capture_Args);
    a.stream = dev_->default_stream();
    a.end = 1;
    DK_Error* e = graphs_of(*dev_).Graph_Capture(&a);
    if (e != nullptr) {
      // Nothing was launched from this capture: its blocks go back as they are.
      dev_->drop_pool(*pool_);
      pool_.reset();
      dev_->check(e, "Graph_Capture(end)");
    }
    if (a.graph == nullptr) {
      dev_->check_created(a.graph, "Graph_Capture(end)", "graph", "DK_Graph_Capture_Args.graph");
    }
    graph_ = a.graph;
    std::shared_ptr<Recording> shadow = std::move(shadow_);
    if (shadow == nullptr || shadow->random_calls() == 0) return;  // native it stays
    // Random launches in an "auto" capture: the plugin's graph would repeat
    // their Philox counters on every replay; the SDK's recording of the same
    // calls (same pool, same views, same order) patches them. Nothing was
    // launched from the plugin's graph yet, so it goes now.
    const std::string missed = shadow->incomplete();
    if (!missed.empty() || shadow->size() != native_calls_) {
      destroy();
      invalid_argument(
          "Graph.capture: the capture (mode 'auto') holds random launches, which only "
          "DeviceKit's recording can draw afresh per replay, but it also holds " +
          (missed.empty() ? std::string("a call the recording did not see") : missed) +
          ", which only the plugin's graph can replay. The capture is discarded. Hint: capture "
          "with mode='native' (the random launches then repeat their captured numbers) or move "
          "one of them out of the capture");
    }
    auto d = DK_ARGS(DK_Graph_Destroy_Args);
    d.graph = graph_;
    graph_ = nullptr;
    recording_ = std::move(shadow);
    recorded_ = true;
    auto_recorded_ = true;
    dev_->check(graphs_of(*dev_).Graph_Destroy(&d), "Graph_Destroy");
  }

  // On the default stream, or on `stream` ordered after the default
  // stream's earlier work and before its later work (two events), so the
  // graph's pool and the tensors it writes keep the default stream's order.
  // `seed`/`offset_shift`: see Philox (graph_record.h); a native graph
  // ignores them (devicekit.graphs refuses them for it).
  void replay(uintptr_t stream_handle, std::optional<uint64_t> seed, uint64_t offset_shift) {
    philox_.set_seed = seed.has_value();
    philox_.seed = seed.value_or(0);
    philox_.offset_shift = offset_shift;
    if (graph_ == nullptr && !recorded_) {
      invalid_argument(capturing_ ? "Graph.replay: the capture has not ended yet"
                                  : "Graph.replay: this graph holds no capture (capture one "
                                    "with devicekit.graphs.capture first)");
    }
    if (dev_->capturing()) {
      // A recorded graph would run now, outside the open capture, and a
      // plugin's graph launch cannot be captured by every plugin.
      invalid_argument("Graph.replay: device " + dev_->name() +
                       " is capturing a graph; a replay is not recorded into another capture "
                       "(captures do not nest). Hint: replay after capture_end(), or run the "
                       "work itself inside the capture");
    }
    dev_->check_fork();
    DK_Stream* dflt = dev_->default_stream();
    auto* side = reinterpret_cast<DK_Stream*>(stream_handle);
    if (side == nullptr || side == dflt) {
      launch(dflt);
      return;
    }
    if (before_ == nullptr) {
      before_ = make_event();
      after_ = make_event();
    }
    record_and_wait(before_, dflt, side);
    launch(side);
    record_and_wait(after_, side, dflt);
  }

  void destroy() {
    if (dev_ == nullptr) return;
    if (capturing_) {  // leave the stream usable; what it captured is discarded
      try {
        end();
      } catch (const Error&) {}
    }
    if (graph_ != nullptr && !dev_->stale_after_fork()) {
      auto a = DK_ARGS(DK_Graph_Destroy_Args);
      a.graph = graph_;
      graph_ = nullptr;
      dev_->check(graphs_of(*dev_).Graph_Destroy(&a), "Graph_Destroy");
    }
    graph_ = nullptr;
    // The recorded calls already issued hold plain pointers: nothing to wait for.
    recording_.reset();
    shadow_.reset();
    recorded_ = false;
    auto_recorded_ = false;
    for (DK_Event** ev : {&before_, &after_}) {
      if (*ev == nullptr || dev_->stale_after_fork()) continue;
      auto a = DK_ARGS(DK_Event_Destroy_Args);
      a.event = *ev;
      *ev = nullptr;
      dev_->check(dev_->api()->Event_Destroy(&a), "Event_Destroy");
    }
    // Every launch was on the default stream or joined back into it, so the
    // shared cache (reused in default-stream order) may have the blocks.
    if (pool_ != nullptr) dev_->drop_pool(*pool_);
    pool_.reset();
    dev_.reset();
  }

  bool captured() const { return graph_ != nullptr || recorded_; }
  // "native", "recorded", or "" before a capture; "auto" while an "auto"
  // capture on a plugin with the graphs part is open (it ends as either).
  std::string mode() const {
    if (recording_ != nullptr) return "recorded";
    if (capturing_ && shadow_ != nullptr) return "auto";
    return (graph_ != nullptr || capturing_) ? "native" : "";
  }
  // An "auto" capture that became a recorded graph for its random launches.
  bool auto_recorded() const { return auto_recorded_; }
  // The calls an SDK-side recording holds (0 for a native graph).
  size_t recorded_calls() const { return recording_ == nullptr ? 0 : recording_->size(); }
  // The calls a replay issues: the recording's, or those the SDK issued into
  // the plugin's capture.
  uint64_t calls() const { return recording_ != nullptr ? recording_->size() : native_calls_; }
  bool capturing() const { return capturing_; }
  size_t random_calls() const { return recording_ == nullptr ? 0 : recording_->random_calls(); }
  std::shared_ptr<Device> device() const { return dev_; }
  size_t pool_blocks() const { return pool_ == nullptr ? 0 : pool_->owned.size(); }

 private:
  void launch(DK_Stream* s) {
    if (trace::on()) {  // one slice per replay, with the number of calls it issues
      trace::Span span(trace::kGraph, *dev_, s,
                       recording_ != nullptr ? "graph_replay(recorded)" : "graph_replay(native)",
                       calls());
      issue(s);
      return;
    }
    issue(s);
  }
  void issue(DK_Stream* s) {
    if (recording_ != nullptr) {
      recording_->replay(*dev_, s, &philox_);
      return;
    }
    const DK_Graphs& g = graphs_of(*dev_);
    auto a = DK_ARGS(DK_Graph_Launch_Args);
    a.graph = graph_;
    a.stream = s;
    dev_->check(g.Graph_Launch(&a), "Graph_Launch");
  }
  DK_Event* make_event() {
    auto a = DK_ARGS(DK_Event_Create_Args);
    a.device = dev_->index();
    dev_->check(dev_->api()->Event_Create(&a), "Event_Create");
    dev_->check_created(a.event, "Event_Create", "event", "DK_Event_Create_Args.event");
    return a.event;
  }
  void record_and_wait(DK_Event* ev, DK_Stream* from, DK_Stream* to) {
    auto r = DK_ARGS(DK_Event_Record_Args);
    r.event = ev;
    r.stream = from;
    dev_->check(dev_->api()->Event_Record(&r), "Event_Record");
    auto w = DK_ARGS(DK_Stream_WaitEvent_Args);
    w.stream = to;
    w.event = ev;
    dev_->check(dev_->api()->Stream_WaitEvent(&w), "Stream_WaitEvent");
  }

  std::shared_ptr<Device> dev_;
  std::shared_ptr<Device::GraphPool> pool_;
  DK_Graph* graph_ = nullptr;
  std::shared_ptr<Recording> recording_;  // mode "recorded"
  std::shared_ptr<Recording> shadow_;  // an open "auto" capture's copy (Device::begin_capture)
  bool recorded_ = false;  // the recording's capture has ended
  bool auto_recorded_ = false;  // recording_ was an "auto" capture's shadow
  uint64_t native_calls_ = 0;  // calls issued into the plugin's capture
  bool capturing_ = false;
  DK_Event* before_ = nullptr;
  DK_Event* after_ = nullptr;
  Philox philox_;  // the patch of the replay in progress
};

}  // namespace

void bind_graphs(py::module_& m) {
  py::class_<Graph, std::shared_ptr<Graph>>(m, "Graph")
      .def(py::init<>())
      .def("begin_capture", &Graph::begin, py::arg("device"), py::arg("mode") = "auto")
      .def("end_capture", &Graph::end)
      .def("replay", &Graph::replay, py::arg("stream_handle") = 0, py::arg("seed") = py::none(),
           py::arg("offset_shift") = 0)
      .def("destroy", &Graph::destroy)
      .def_property_readonly("captured", &Graph::captured)
      .def_property_readonly("capturing", &Graph::capturing)
      .def_property_readonly("mode", &Graph::mode)
      .def_property_readonly("auto_recorded", &Graph::auto_recorded)
      .def_property_readonly("recorded_calls", &Graph::recorded_calls)
      .def_property_readonly("calls", &Graph::calls)
      .def_property_readonly("random_calls", &Graph::random_calls)
      .def_property_readonly("device", &Graph::device)
      .def_property_readonly("pool_blocks", &Graph::pool_blocks);
  m.def("device_has_graphs", [](const Device& d) { return d.plugin()->graphs() != nullptr; });
}

}  // namespace dk
