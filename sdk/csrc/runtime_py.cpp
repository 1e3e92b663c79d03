// The device runtime exposed as-is (buffers, streams, events, raw copies), for
// conformance tests and anyone who needs the contract without tensors.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstdio>

#include "bindings.h"
#include "graph_record.h"

namespace dk {
namespace {

struct Buffer {
  std::shared_ptr<Device> dev;
  void* ptr = nullptr;
  size_t nbytes = 0;
  bool live = false;
  void free() {
    if (!live) return;
    live = false;
    dev->raw_free(ptr);
  }
  ~Buffer() {
    release_in_destructor(*dev, "freeing a buffer", [&] { free(); });
  }
};

struct Stream {
  std::shared_ptr<Device> dev;
  DK_Stream* s = nullptr;
  bool owned = true;   // false: the device's default stream (Device.default_stream)
  py::list keepalive;  // host arrays of pending async copies
  ~Stream() {
    if (!owned) return;
    // In a forked child the stream's worker thread does not exist either.
    release_in_destructor(*dev, "destroying a stream", [&] {
      auto a = DK_ARGS(DK_Stream_Destroy_Args);
      a.stream = s;
      dev->check(dev->api()->Stream_Destroy(&a), "Stream_Destroy");
    });
  }
  void synchronize() {
    {
      py::gil_scoped_release nogil;
      dev->synchronize(s);
    }
    keepalive = py::list();
  }
};

struct Event {
  std::shared_ptr<Device> dev;
  DK_Event* e = nullptr;
  // The SDK recording this event's latest record went into (devicekit.graphs
  // mode "recorded"), or NULL: synchronizing on it while that capture is open
  // needs the host.
  const Recording* recorded_in = nullptr;
  ~Event() {
    release_in_destructor(*dev, "destroying an event", [&] {
      auto a = DK_ARGS(DK_Event_Destroy_Args);
      a.event = e;
      dev->check(dev->api()->Event_Destroy(&a), "Event_Destroy");
    });
  }
};

// Event_Record (wait = false) or Stream_WaitEvent (wait = true) on `s`.
// On the default stream of a device that captures a graph, the event must
// outlive the graph (kept with the capture's pool), and DeviceKit's own
// recording records the call instead of issuing it: true then. A native
// capture records it in the plugin (the call is issued).
bool capture_event(Stream& s, const std::shared_ptr<Event>& e, bool wait) {
  Device& d = *s.dev;
  Recording* r = nullptr;
  if (d.capturing() && s.s == d.default_stream()) {
    d.keep_for_capture(e);
    r = d.recording();
    if (r != nullptr) r->add_event(e->e, wait);
    if (Recording* sh = d.shadow()) sh->add_event(e->e, wait);  // issued natively too
  }
  if (!wait) e->recorded_in = r;
  return r != nullptr;
}

char* buffer_at(Buffer& b, size_t offset, size_t n, const char* what) {
  if (!b.live) invalid_argument(std::string(what) + ": buffer was freed");
  if (offset > b.nbytes || n > b.nbytes - offset) {
    invalid_argument(std::string(what) + ": range [" + std::to_string(offset) + ", " +
                     std::to_string(offset + n) + ") is outside the " + std::to_string(b.nbytes) +
                     "-byte buffer");
  }
  return static_cast<char*>(b.ptr) + offset;
}

void do_copy(Device& d, DK_CopyKind kind, void* dst, const void* src, size_t n, Stream* s) {
  py::gil_scoped_release nogil;
  d.memcpy(kind, dst, src, n, s ? s->s : nullptr);
}

py::buffer_info host_bytes(const py::array& a, bool writable) {
  if (!(a.flags() & py::array::c_style)) invalid_argument("host array must be C-contiguous");
  return a.request(writable);
}

// Buffer: a raw device allocation's pointer, size, device and free().
void bind_buffer(py::module_& m) {
  py::class_<Buffer, std::shared_ptr<Buffer>>(m, "Buffer")
      .def_property_readonly("ptr",
                             [](const Buffer& b) { return reinterpret_cast<uintptr_t>(b.ptr); })
      .def_property_readonly("nbytes", [](const Buffer& b) { return b.nbytes; })
      .def_property_readonly("device", [](const Buffer& b) { return b.dev; })
      .def("free", &Buffer::free);
}

// Stream: synchronize, query and wait_event over the plugin's Stream_* calls.
void bind_stream(py::module_& m) {
  py::class_<Stream, std::shared_ptr<Stream>>(m, "Stream")
      .def_property_readonly("device", [](const Stream& s) { return s.dev; })
      .def_property_readonly(  // for graphs_py.cpp's replay(stream)
          "_handle", [](const Stream& s) { return reinterpret_cast<uintptr_t>(s.s); })
      .def("synchronize", &Stream::synchronize)
      .def("query",
           [](Stream& s) {
             auto a = DK_ARGS(DK_Stream_Query_Args);
             a.stream = s.s;
             s.dev->check(s.dev->api()->Stream_Query(&a), "Stream_Query");
             return a.idle != 0;
           })
      .def("wait_event", [](Stream& s, const std::shared_ptr<Event>& e) {
        auto a = DK_ARGS(DK_Stream_WaitEvent_Args);
        a.stream = s.s;
        a.event = e->e;
        s.dev->check_fork();
        if (capture_event(s, e, true)) return;
        s.dev->check(s.dev->api()->Stream_WaitEvent(&a), "Stream_WaitEvent");
      });
}

// Event: record, query, synchronize and elapsed_ms over the Event_* calls.
void bind_event(py::module_& m) {
  py::class_<Event, std::shared_ptr<Event>>(m, "Event")
      .def("record",
           [](const std::shared_ptr<Event>& e, Stream& s) {
             auto a = DK_ARGS(DK_Event_Record_Args);
             a.event = e->e;
             a.stream = s.s;
             e->dev->check_fork();
             if (capture_event(s, e, false)) return;
             e->dev->check(e->dev->api()->Event_Record(&a), "Event_Record");
           })
      .def("query",
           [](Event& e) {
             auto a = DK_ARGS(DK_Event_Query_Args);
             a.event = e.e;
             e.dev->check(e.dev->api()->Event_Query(&a), "Event_Query");
             return a.reached != 0;
           })
      .def("synchronize",
           [](Event& e) {
             auto a = DK_ARGS(DK_Event_Synchronize_Args);
             a.event = e.e;
             e.dev->check_fork();
             if (e.recorded_in != nullptr && e.recorded_in == e.dev->recording()) {
               e.dev->check_not_capturing("Event_Synchronize of an event recorded in the capture");
             }
             py::gil_scoped_release nogil;
             e.dev->check(e.dev->api()->Event_Synchronize(&a), "Event_Synchronize");
           })
      .def(
          "elapsed_ms",
          [](Event& start, Event& end) {
            auto a = DK_ARGS(DK_Event_ElapsedTime_Args);
            a.start = start.e;
            a.end = end.e;
            start.dev->check(start.dev->api()->Event_ElapsedTime(&a), "Event_ElapsedTime");
            return a.milliseconds;
          },
          py::arg("end"));
}

// Device methods that create runtime objects: alloc, stream, event.
void bind_device_objects(DeviceClass& D) {
  D.def(
       "alloc",
       [](const std::shared_ptr<Device>& d, size_t nbytes) {
         auto b = std::make_shared<Buffer>();
         b->dev = d;
         b->nbytes = nbytes;
         b->ptr = d->raw_alloc(nbytes);
         b->live = true;
         return b;
       },
       py::arg("nbytes"), "Raw device allocation straight from the plugin (no cache)")
      // The wrapper exists only once the plugin produced a valid object, so
      // its destructor never hands the plugin a NULL to destroy.
      .def("stream",
           [](const std::shared_ptr<Device>& d) {
             d->begin_use();  // streams may own threads: fork() makes them unusable in a child
             auto a = DK_ARGS(DK_Stream_Create_Args);
             a.device = d->index();
             d->check(d->api()->Stream_Create(&a), "Stream_Create");
             d->check_created(a.stream, "Stream_Create", "stream", "DK_Stream_Create_Args.stream");
             auto s = std::make_shared<Stream>();
             s->dev = d;
             s->s = a.stream;
             return s;
           })
      .def(
          "default_stream",
          [](const std::shared_ptr<Device>& d) {
            d->begin_use();
            auto s = std::make_shared<Stream>();
            s->dev = d;
            s->s = d->default_stream();
            s->owned = false;
            return s;
          },
          "The stream every tensor op runs on (and graphs capture), not owned: events "
          "recorded or waited on here order raw work with tensor work")
      .def("event", [](const std::shared_ptr<Device>& d) {
        d->begin_use();
        auto a = DK_ARGS(DK_Event_Create_Args);
        a.device = d->index();
        d->check(d->api()->Event_Create(&a), "Event_Create");
        d->check_created(a.event, "Event_Create", "event", "DK_Event_Create_Args.event");
        auto e = std::make_shared<Event>();
        e->dev = d;
        e->e = a.event;
        return e;
      });
}

// Device methods that move raw bytes: copy_h2d, copy_d2h, copy_d2d.
void bind_device_copies(DeviceClass& D) {
  D.def(
       "copy_h2d",
       [](Device& d, Buffer& dst, py::array src, size_t dst_offset, Stream* stream) {
         py::buffer_info b = host_bytes(src, false);
         const size_t n = size_t(b.size) * size_t(b.itemsize);
         char* p = buffer_at(dst, dst_offset, n, "copy_h2d");
         if (stream) stream->keepalive.append(src);
         do_copy(d, DK_COPY_HOST_TO_DEVICE, p, b.ptr, n, stream);
       },
       py::arg("dst"), py::arg("src"), py::kw_only(), py::arg("dst_offset") = 0,
       py::arg("stream") = nullptr)
      .def(
          "copy_d2h",
          [](Device& d, py::array dst, Buffer& src, size_t src_offset, Stream* stream) {
            py::buffer_info b = host_bytes(dst, true);
            const size_t n = size_t(b.size) * size_t(b.itemsize);
            char* p = buffer_at(src, src_offset, n, "copy_d2h");
            if (stream) stream->keepalive.append(dst);
            do_copy(d, DK_COPY_DEVICE_TO_HOST, b.ptr, p, n, stream);
          },
          py::arg("dst"), py::arg("src"), py::kw_only(), py::arg("src_offset") = 0,
          py::arg("stream") = nullptr)
      .def(
          "copy_d2d",
          [](Device& d, Buffer& dst, Buffer& src, size_t nbytes, size_t dst_offset,
             size_t src_offset, Stream* stream) {
            char* q = buffer_at(dst, dst_offset, nbytes, "copy_d2d");
            char* p = buffer_at(src, src_offset, nbytes, "copy_d2d");
            do_copy(d, DK_COPY_DEVICE_TO_DEVICE, q, p, nbytes, stream);
          },
          py::arg("dst"), py::arg("src"), py::arg("nbytes"), py::kw_only(),
          py::arg("dst_offset") = 0, py::arg("src_offset") = 0, py::arg("stream") = nullptr);
}

}  // namespace

// The runtime objects (Buffer, Stream, Event) and the Device methods that
// make them or move bytes, one step each.
void bind_runtime(py::module_& m, DeviceClass& D) {
  bind_buffer(m);
  bind_stream(m);
  bind_event(m);
  bind_device_objects(D);
  bind_device_copies(D);
}

}  // namespace dk
