// The graphs part (device API 1.5, optional) bound for devicekit.graphs:
// capture the kernels the tensor ops of a device enqueue on its default
// stream (every tensor op runs there), then launch them again with one
// plugin call. The allocations made during the capture belong to the graph
// (Device::begin_capture pins them to its pool), so a replay never writes
// memory that has since been handed to another tensor. A plugin without the
// part gets a clear "not implemented" (the SDK-side recording that would give
// every plugin graphs is not built yet).
#include <cstdio>
#include <memory>

#include "bindings.h"
#include "boundary.h"

namespace dk {
namespace {

const DK_Graphs& graphs_of(const Device& d) {
  const DK_Graphs* g = d.plugin()->graphs();
  if (g == nullptr) {
    throw Error(ErrorKind::NotImplemented,
                "plugin '" + d.plugin()->who() + "' (device " + d.name() +
                    "): not implemented: the plugin has no graphs part (device API " +
                    std::to_string(d.plugin()->api_major()) + "." +
                    std::to_string(d.plugin()->api_minor()) +
                    " plugin; the part is the optional DK_Graphs extension, since 1.5), and "
                    "DeviceKit does not record graphs for such plugins yet");
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

  void begin(std::shared_ptr<Device> dev) {
    if (graph_ != nullptr || capturing_) {
      invalid_argument(
          "Graph.capture: this graph already holds a capture; make a new Graph "
          "(or reset() this one) to capture again");
    }
    const DK_Graphs& g = graphs_of(*dev);
    dev->begin_use();
    if (dev->capturing()) {
      invalid_argument("Graph.capture: device " + dev->name() +
                       " is already capturing a graph; captures do not nest");
    }
    auto pool = std::make_shared<Device::GraphPool>();
    auto a = DK_ARGS(DK_Graph_Capture_Args);
    a.stream = dev->default_stream();
    a.end = 0;
    dev->check(g.Graph_Capture(&a), "Graph_Capture(begin)");
    dev->begin_capture(pool);
    dev_ = std::move(dev);
    pool_ = std::move(pool);
    capturing_ = true;
  }

  void end() {
    if (!capturing_) invalid_argument("Graph.end_capture: this graph is not capturing");
    capturing_ = false;
    dev_->end_capture();
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
  }

  // On the default stream, or on `stream` ordered after the default
  // stream's earlier work and before its later work (two events), so the
  // graph's pool and the tensors it writes keep the default stream's order.
  void replay(uintptr_t stream_handle) {
    if (graph_ == nullptr) {
      invalid_argument(capturing_ ? "Graph.replay: the capture has not ended yet"
                                  : "Graph.replay: this graph holds no capture (capture one "
                                    "with devicekit.graphs.capture first)");
    }
    dev_->check_fork();
    const DK_Graphs& g = graphs_of(*dev_);
    DK_Stream* dflt = dev_->default_stream();
    auto* side = reinterpret_cast<DK_Stream*>(stream_handle);
    if (side == nullptr || side == dflt) {
      launch(g, dflt);
      return;
    }
    if (before_ == nullptr) {
      before_ = make_event();
      after_ = make_event();
    }
    record_and_wait(before_, dflt, side);
    launch(g, side);
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

  bool captured() const { return graph_ != nullptr; }
  bool capturing() const { return capturing_; }
  std::shared_ptr<Device> device() const { return dev_; }
  size_t pool_blocks() const { return pool_ == nullptr ? 0 : pool_->owned.size(); }

 private:
  void launch(const DK_Graphs& g, DK_Stream* s) {
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
  bool capturing_ = false;
  DK_Event* before_ = nullptr;
  DK_Event* after_ = nullptr;
};

}  // namespace

void bind_graphs(py::module_& m) {
  py::class_<Graph, std::shared_ptr<Graph>>(m, "Graph")
      .def(py::init<>())
      .def("begin_capture", &Graph::begin, py::arg("device"))
      .def("end_capture", &Graph::end)
      .def("replay", &Graph::replay, py::arg("stream_handle") = 0)
      .def("destroy", &Graph::destroy)
      .def_property_readonly("captured", &Graph::captured)
      .def_property_readonly("capturing", &Graph::capturing)
      .def_property_readonly("device", &Graph::device)
      .def_property_readonly("pool_blocks", &Graph::pool_blocks);
  m.def("device_has_graphs", [](const Device& d) { return d.plugin()->graphs() != nullptr; });
}

}  // namespace dk
