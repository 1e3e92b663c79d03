// The collectives part (device API 1.5, optional) bound for
// devicekit.distributed: unique ids, one rank's communicator, collectives
// on DeviceKit tensors enqueued on their device's default stream (the stream
// every tensor op uses, so a collective is ordered after the ops that wrote
// its inputs and before the ops that read its outputs), and the event-backed
// work handle. Arguments are checked here, before the plugin sees them.
#include <pybind11/stl.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "bindings.h"
#include "boundary.h"
#include "tensor.h"

namespace dk {
namespace {

const DK_Collectives& collectives_of(const Device& d) {
  const DK_Collectives* c = d.plugin()->collectives();
  if (c == nullptr) part_not_implemented(d, "collectives", "DK_Collectives");
  return *c;
}

const char* collective_name(int id) {
  switch (id) {
#define DK_NAME_CASE(SUFFIX, name) \
  case DK_COLL_##SUFFIX: return #name;
    DK_COLLECTIVES(DK_NAME_CASE)
#undef DK_NAME_CASE
  }
  return "?";
}

// Element counts of the send and recv buffers, per the spec's rules
// (docs/collectives.md): "count" or "nranks*count"; -1 where the collective
// has no such buffer (send has no recv, recv no send).
void buffer_counts(int id, int64_t count, int64_t nranks, int64_t* send, int64_t* recv) {
  *send = count;
  *recv = count;
  switch (id) {
    case DK_COLL_ALL_GATHER: *recv = nranks * count; break;
    case DK_COLL_REDUCE_SCATTER: *send = nranks * count; break;
    case DK_COLL_ALL_TO_ALL: *send = *recv = nranks * count; break;
    case DK_COLL_SEND: *recv = -1; break;
    case DK_COLL_RECV: *send = -1; break;
    default: break;
  }
}

// A collective's completion: an event recorded on the default stream after
// it. wait() synchronises that stream, so the collective's asynchronous
// error (a timeout, a mismatch between ranks) is raised there, and the
// tensors it wrote are marked failed with it (Device::check_not_failed).
struct CollWork {
  std::shared_ptr<Device> dev;
  DK_Event* event = nullptr;
  std::string what;  // "all_reduce on comm rank 0/2"
  ~CollWork() {
    if (event == nullptr) return;
    release_in_destructor(*dev, "destroying a collective's event", [&] {
      auto a = DK_ARGS(DK_Event_Destroy_Args);
      a.event = event;
      dev->check(dev->api()->Event_Destroy(&a), "Event_Destroy");
    });
  }
  bool is_completed() {
    auto a = DK_ARGS(DK_Event_Query_Args);
    a.event = event;
    dev->check(dev->api()->Event_Query(&a), "Event_Query");
    return a.reached != 0;
  }
  void wait() {
    py::gil_scoped_release nogil;
    dev->synchronize(dev->default_stream());
  }
};

class Comm {
 public:
  Comm(const py::bytes& uid, int nranks, int rank, std::shared_ptr<Device> dev, double timeout_s)
      : dev_(std::move(dev)), coll_(collectives_of(*dev_)), nranks_(nranks), rank_(rank) {
    const std::string id = uid;
    if (id.size() != DK_COLL_UNIQUE_ID_BYTES) {
      invalid_argument("Communicator: the unique id is " + std::to_string(id.size()) +
                       " bytes, expected " + std::to_string(DK_COLL_UNIQUE_ID_BYTES) +
                       " (pass the bytes devicekit.distributed.unique_id returned, unchanged)");
    }
    if (nranks < 1 || rank < 0 || rank >= nranks) {
      invalid_argument("Communicator: rank " + std::to_string(rank) + " of nranks " +
                       std::to_string(nranks) + "; expected nranks >= 1 and 0 <= rank < nranks");
    }
    if (!(timeout_s > 0) || timeout_s > 1e9) {
      invalid_argument("Communicator: timeout must be a positive number of seconds, got " +
                       std::to_string(timeout_s));
    }
    std::memcpy(id_.bytes, id.data(), DK_COLL_UNIQUE_ID_BYTES);
    dev_->begin_use();
    auto a = DK_ARGS(DK_Comm_Init_Args);
    a.id = &id_;
    a.nranks = nranks;
    a.rank = rank;
    a.device = dev_->index();
    a.timeout_ms = int64_t(timeout_s * 1000.0 + 0.5);
    if (a.timeout_ms < 1) a.timeout_ms = 1;
    {
      py::gil_scoped_release nogil;
      dev_->check(coll_.Comm_Init(&a), "Comm_Init");
    }
    dev_->check_created(a.comm, "Comm_Init", "comm", "DK_Comm_Init_Args.comm");
    comm_.store(a.comm);
  }
  ~Comm() {
    release_in_destructor(*dev_, "destroying a communicator", [&] { destroy_nogil(); });
  }

  std::string what() const {
    return "communicator rank " + std::to_string(rank_) + " of " + std::to_string(nranks_) +
           " on " + dev_->name();
  }

  std::shared_ptr<CollWork> run(int id, const py::object& send_o, const py::object& recv_o,
                                int64_t count, int op, int root, int peer) {
    DK_Comm* comm = live("collective");
    if (id < 0 || id >= DK_COLLECTIVE_COUNT_1_5) invalid_argument("unknown collective id");
    const std::string name = collective_name(id);
    const std::string ctx = name + " on " + what();
    if (!(coll_.collectives & (uint64_t(1) << id))) {
      throw Error(ErrorKind::NotImplemented, "plugin '" + dev_->plugin()->who() + "': " + ctx +
                                                 ": not implemented: the plugin's collectives "
                                                 "part does not list " +
                                                 name);
    }
    if (count < 0) invalid_argument(ctx + ": count " + std::to_string(count) + " < 0");
    int64_t send_n, recv_n;
    buffer_counts(id, count, nranks_, &send_n, &recv_n);
    Tensor send = checked(send_o, send_n, "send", ctx);
    Tensor recv = checked(recv_o, recv_n, "recv", ctx);
    if (send && recv && send->dtype() != recv->dtype()) {
      throw Error(ErrorKind::DTypeMismatch, ctx + ": send is " + send->describe() +
                                                " but recv is " + recv->describe() +
                                                "; the dtypes must be equal");
    }
    const Tensor& any = send ? send : recv;
    if (!any) invalid_argument(ctx + ": no tensor given");
    const DK_DType dt = any->dtype();
    if (!(coll_.dtypes & DK_DTYPE_BIT(dt))) {
      throw Error(ErrorKind::NotImplemented,
                  "plugin '" + dev_->plugin()->who() + "': " + ctx + ": not implemented for " +
                      dtype_name(dt) +
                      " (its collectives part takes: " + dtype_mask_names(coll_.dtypes) + ")");
    }
    const bool reduces =
        id == DK_COLL_ALL_REDUCE || id == DK_COLL_REDUCE || id == DK_COLL_REDUCE_SCATTER;
    if (reduces) {
      if (op < 0 || op >= DK_COLL_OP_COUNT_1_5) {
        invalid_argument(ctx + ": unknown reduce op " + std::to_string(op));
      }
      if (!(coll_.reduce_ops & (uint64_t(1) << op))) {
        throw Error(ErrorKind::NotImplemented, "plugin '" + dev_->plugin()->who() + "': " + ctx +
                                                   ": reduce op " + std::to_string(op) +
                                                   " not implemented by its collectives part");
      }
    }
    if ((id == DK_COLL_BROADCAST || id == DK_COLL_REDUCE) && (root < 0 || root >= nranks_)) {
      invalid_argument(ctx + ": root " + std::to_string(root) + " is not a rank (0.." +
                       std::to_string(nranks_ - 1) + ")");
    }
    if ((id == DK_COLL_SEND || id == DK_COLL_RECV) &&
        (peer < 0 || peer >= nranks_ || peer == rank_)) {
      invalid_argument(ctx + ": peer " + std::to_string(peer) + " must be another rank (0.." +
                       std::to_string(nranks_ - 1) + ", not " + std::to_string(rank_) + ")");
    }
    if (dev_->has_failures()) {
      if (send) dev_->check_not_failed(send->storage()->written_epoch.load(), send->describe());
    }
    if (dev_->recording() != nullptr) {  // it would run now, out of the graph's order
      throw Error(ErrorKind::NotImplemented,
                  ctx +
                      ": not implemented: DeviceKit's own graph recording (devicekit.graphs, "
                      "mode 'recorded') does not record collectives; run them outside the "
                      "capture");
    }
    if (Recording* sh = dev_->shadow()) sh->mark_incomplete("a collective");  // not recordable
    auto a = DK_ARGS(DK_Coll_Run_Args);
    a.comm = comm;
    a.stream = dev_->default_stream();
    a.collective = id;
    a.send = send ? send->data() : nullptr;
    a.recv = recv ? recv->data() : nullptr;
    a.count = count;
    a.dtype = dt;
    a.op = reduces ? op : 0;
    a.root = root;
    a.peer = peer;
    if (recv) recv->storage()->written_epoch.store(dev_->epoch());
    {
      py::gil_scoped_release nogil;
      dev_->check(coll_.Coll_Run(&a), ("Coll_Run(" + ctx + ")").c_str());
    }
    return record(ctx);
  }

  // Abort and destroy never overlap (the header forbids Comm_Abort during
  // Comm_Destroy of the same comm): an abort that comes while a destroy runs
  // waits for it (bounded by the comm's timeout) and then finds nothing to do.
  void abort() {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(lifecycle_mu_);
    DK_Comm* comm = comm_.load();
    if (comm == nullptr) return;  // destroyed: nothing is pending
    auto a = DK_ARGS(DK_Comm_Abort_Args);
    a.comm = comm;
    dev_->check(coll_.Comm_Abort(&a), "Comm_Abort");
  }

  void destroy() {
    py::gil_scoped_release nogil;
    destroy_nogil();
  }

  bool destroyed() const { return comm_.load() == nullptr; }
  int nranks() const { return nranks_; }
  int rank() const { return rank_; }
  const std::shared_ptr<Device>& device() const { return dev_; }

 private:
  DK_Comm* live(const char* call) const {
    DK_Comm* c = comm_.load();
    if (c == nullptr) invalid_argument(std::string(call) + ": the communicator was destroyed");
    return c;
  }

  void destroy_nogil() {
    std::lock_guard<std::mutex> lock(lifecycle_mu_);
    DK_Comm* c = comm_.exchange(nullptr);
    if (c == nullptr) return;
    auto a = DK_ARGS(DK_Comm_Destroy_Args);
    a.comm = c;
    dev_->check(coll_.Comm_Destroy(&a), "Comm_Destroy");
  }

  // A tensor argument: None only where the collective has no such buffer or
  // (broadcast's send, reduce's recv) the spec lets a rank pass NULL.
  Tensor checked(const py::object& o, int64_t n, const char* which, const std::string& ctx) {
    if (o.is_none()) {
      if (n < 0) return nullptr;
      invalid_argument(ctx + ": the " + which + " tensor is required");
    }
    if (n < 0) invalid_argument(ctx + ": takes no " + which + " tensor");
    Tensor t = o.cast<Tensor>();
    if (t->device_ptr() != dev_) {
      invalid_argument(ctx + ": " + which + " is " + t->describe() +
                       ", not on the communicator's device " + dev_->name());
    }
    if (!t->is_contiguous()) {
      invalid_argument(ctx + ": " + which + " (" + t->describe() +
                       ") must be contiguous; pass t.contiguous() and copy back");
    }
    if (t->numel() != n) {
      invalid_argument(ctx + ": " + which + " has " + std::to_string(t->numel()) + " elements (" +
                       t->describe() + "), expected " + std::to_string(n) + " for " +
                       std::to_string(nranks_) + " ranks");
    }
    return t;
  }

  std::shared_ptr<CollWork> record(const std::string& ctx) {
    auto e = DK_ARGS(DK_Event_Create_Args);
    e.device = dev_->index();
    dev_->check(dev_->api()->Event_Create(&e), "Event_Create");
    dev_->check_created(e.event, "Event_Create", "event", "DK_Event_Create_Args.event");
    auto w = std::make_shared<CollWork>();
    w->dev = dev_;
    w->event = e.event;
    w->what = ctx;
    auto r = DK_ARGS(DK_Event_Record_Args);
    r.event = e.event;
    r.stream = dev_->default_stream();
    dev_->check(dev_->api()->Event_Record(&r), "Event_Record");
    return w;
  }

  std::shared_ptr<Device> dev_;
  const DK_Collectives& coll_;
  DK_CollUniqueId id_{};
  int nranks_, rank_;
  std::atomic<DK_Comm*> comm_{nullptr};
  std::mutex lifecycle_mu_;  // abort vs destroy
};

py::bytes unique_id(const std::shared_ptr<Device>& dev) {
  const DK_Collectives& c = collectives_of(*dev);
  dev->begin_use();
  auto a = DK_ARGS(DK_Comm_GetUniqueId_Args);
  a.device = dev->index();
  dev->check(c.Comm_GetUniqueId(&a), "Comm_GetUniqueId");
  return py::bytes(a.id.bytes, DK_COLL_UNIQUE_ID_BYTES);
}

void group(const std::shared_ptr<Device>& dev, bool end) {
  const DK_Collectives& c = collectives_of(*dev);
  auto a = DK_ARGS(DK_Coll_Group_Args);
  a.end = end ? 1 : 0;
  py::gil_scoped_release nogil;
  dev->check(c.Coll_Group(&a), end ? "Coll_Group(end)" : "Coll_Group(start)");
}

}  // namespace

void bind_collectives(py::module_& m) {
  py::list names;
  for (int i = 0; i < DK_COLLECTIVE_COUNT_1_5; ++i) names.append(collective_name(i));
  m.attr("COLLECTIVE_NAMES") = names;  // indexed by DK_CollectiveId
  m.attr("COLL_UNIQUE_ID_BYTES") = DK_COLL_UNIQUE_ID_BYTES;
  m.def("coll_unique_id", &unique_id, py::arg("device"),
        "Comm_GetUniqueId on the device's plugin: the id as bytes");
  m.def("coll_group", &group, py::arg("device"), py::arg("end"),
        "Coll_Group start (end=False) or end (end=True) on the device's plugin");
  py::class_<CollWork, std::shared_ptr<CollWork>>(m, "CollWork")
      .def("wait", &CollWork::wait, "Synchronise the stream; raises the collective's error")
      .def("is_completed", &CollWork::is_completed)
      .def_readonly("what", &CollWork::what);
  py::class_<Comm, std::shared_ptr<Comm>>(m, "Comm")
      .def(py::init<const py::bytes&, int, int, std::shared_ptr<Device>, double>(), py::arg("uid"),
           py::arg("nranks"), py::arg("rank"), py::arg("device"), py::arg("timeout_s"))
      .def("run", &Comm::run, py::arg("collective"), py::arg("send"), py::arg("recv"),
           py::arg("count"), py::arg("op") = 0, py::arg("root") = 0, py::arg("peer") = 0)
      .def("abort", &Comm::abort)
      .def("destroy", &Comm::destroy)
      .def_property_readonly("destroyed", &Comm::destroyed)
      .def_property_readonly("nranks", &Comm::nranks)
      .def_property_readonly("rank", &Comm::rank)
      .def_property_readonly("device", &Comm::device)
      .def("__repr__", &Comm::what);
}

}  // namespace dk
