// gpu.h for the emulated build (plugin `cuda_sim`): the same DK-ABI layer
// and the same kernels as the CUDA build, on the CPU.
//
//  * Device memory is host memory (aligned like cudaMalloc's, 256 bytes),
//    with a budget so running out is DK_ERROR_OUT_OF_MEMORY, not the host's
//    OOM killer.
//  * Each stream is a worker thread running its jobs in order: copies, event
//    records and waits, and kernel launches, which DK_LAUNCH hands to
//    dk::sim::enqueue (defined here) and the emulator's run_grid executes
//    (src/simt/simt_sim.cpp). Work really runs out of step with the host,
//    so a missing synchronize or event shows up here, not first on a GPU.
//  * A launch whose emulator check failed (shared-memory race, divergent
//    barrier, ...) becomes the stream's asynchronous error: the next
//    Stream_Synchronize returns it (Stream_Query reports it too), like a
//    fault on the GPU.
//  * Events carry a steady-clock timestamp taken when the worker passes them.
//  * Graphs: while a stream captures, push() appends its jobs (copies and
//    kernel launches, whose closures hold copies of their arguments) and
//    its event records and waits to the graph instead of the queue. A launch
//    is ONE job that runs them in order on the launch stream's worker; each
//    launch makes a fresh point for every recorded Event_Record (the event's
//    latest record from then on) and waits, for every recorded
//    Stream_WaitEvent, on the event's latest record at the launch, in node
//    order, like the CPU plugin's native graphs.
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "gpu.h"
#include "launch.h"
#include "simt/simt.h"

namespace dkcuda {
namespace gpu {

using Clock = std::chrono::steady_clock;

// A recorded point of an event; each Event_Record makes a new one, shared by
// the stream's marker, the event and every waiter, so re-recording or
// destroying the event never strands a waiter.
struct Point {
  std::mutex mu;
  std::condition_variable cv;
  bool reached = false;
  Clock::time_point when;

  void reach() {
    std::lock_guard<std::mutex> lock(mu);
    when = Clock::now();
    reached = true;
    cv.notify_all();
  }
  void wait() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return reached; });
  }
  bool is_reached() {
    std::lock_guard<std::mutex> lock(mu);
    return reached;
  }
};

struct Event;

struct Job {
  enum Kind { kRun, kRecord, kWait } kind;
  std::function<Status()> run;  // kRun
  std::shared_ptr<Point> point;  // kRecord, kWait
  Event* event = nullptr;        // in a graph: kRecord, kWait (the point is made at launch)
};

struct GraphBody {
  std::vector<Job> jobs;  // in capture order
  KernelErrors errors{};  // the graph's kernels report here (gpu.h)
};

// Shared by the graph and its queued launches: a graph destroyed with
// launches queued lives on until they ran.
struct Graph { std::shared_ptr<GraphBody> body; };

namespace {

constexpr size_t kAlignment = 256;  // cudaMalloc's
constexpr int32_t kMaxDevices = 8;

struct Config {
  int32_t devices = 1;
  uint64_t memory = 0;  // per device
};
Config g_config;

std::mutex g_mem_mu;
uint64_t g_in_use[kMaxDevices];

bool parse_u64(const char* s, uint64_t* out) {
  if (s == nullptr || *s < '0' || *s > '9') return false;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s, &end, 10);
  if (*end != '\0') return false;
  *out = v;
  return true;
}

uint64_t available_memory_bytes() {
  const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : 0;
}

}  // namespace

struct Stream {
  explicit Stream(int32_t dev) : device(dev) {}
  const int32_t device;
  KernelErrors errors{};
  std::mutex mu;  // guards everything below
  std::condition_variable changed;
  std::deque<Job> jobs;
  uint64_t unfinished = 0;  // enqueued and not yet finished
  bool stop = false;
  Status first_error;  // the first asynchronous error; later ones are dropped
  std::shared_ptr<GraphBody> capture;  // non-NULL while capturing: push() records into it
  std::thread worker;

  void push(Job job) {
    std::lock_guard<std::mutex> lock(mu);
    if (capture != nullptr) {
      capture->jobs.push_back(std::move(job));
      return;
    }
    jobs.push_back(std::move(job));
    ++unfinished;
    changed.notify_all();
  }

  void main() {
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mu);
        changed.wait(lock, [&] { return !jobs.empty() || stop; });
        if (jobs.empty()) return;  // stop requested and everything ran
        job = std::move(jobs.front());
        jobs.pop_front();
      }
      Status st;
      switch (job.kind) {
        case Job::kRun: st = job.run(); break;
        case Job::kRecord: job.point->reach(); break;
        case Job::kWait: job.point->wait(); break;
      }
      std::lock_guard<std::mutex> lock(mu);
      if (!st.ok() && first_error.ok()) first_error = st;
      --unfinished;
      changed.notify_all();
    }
  }
};

struct Event {
  explicit Event(int32_t dev) : device(dev) {}
  const int32_t device;
  std::mutex mu;
  std::shared_ptr<Point> point;  // the latest record; NULL until recorded
  std::shared_ptr<Point> current() {
    std::lock_guard<std::mutex> lock(mu);
    return point;
  }
};

Status init(int32_t* count) {
  uint64_t devices = 1;
  const char* env = std::getenv("DEVICEKIT_CUDA_SIM_DEVICES");
  if (env != nullptr && (!parse_u64(env, &devices) || devices < 1 || devices > kMaxDevices)) {
    return Status{DK_ERROR_INVALID_ARGUMENT, "DEVICEKIT_CUDA_SIM_DEVICES='" + std::string(env) +
                                                 "'; expected an integer from 1 to 8"};
  }
  // Default: a quarter of the memory free now, split over the devices (the
  // emulator is for correctness, not for large models).
  uint64_t memory = available_memory_bytes() / 4 / devices;
  env = std::getenv("DEVICEKIT_CUDA_SIM_MEMORY_BYTES");
  if (env != nullptr && (!parse_u64(env, &memory) || memory == 0)) {
    return Status{DK_ERROR_INVALID_ARGUMENT, "DEVICEKIT_CUDA_SIM_MEMORY_BYTES='" +
                                                 std::string(env) +
                                                 "'; expected a positive number of bytes"};
  }
  if (memory == 0) {
    return Status{DK_ERROR_UNAVAILABLE,
                  "cannot read this machine's free memory; set DEVICEKIT_CUDA_SIM_MEMORY_BYTES"};
  }
  g_config.devices = int32_t(devices);
  g_config.memory = memory;
  *count = g_config.devices;
  return Status{};
}

std::string attributes() {
  return "emulator=simt (one fiber per GPU thread, checked shared memory)\nwarp=32\ndevices=" +
         std::to_string(g_config.devices);
}

Status properties(int32_t device, Properties* out) {
  (void)device;
  out->name = "DeviceKit CUDA emulator (the CUDA plugin's kernels on the CPU)";
  out->total_memory = g_config.memory;
  out->alignment = kAlignment;
  out->async_copy = true;  // a stream's worker runs copies beside other streams' kernels
  return Status{};
}

Status set_device(int32_t) { return Status{}; }

// The DK layer synchronizes every stream of the device right after this;
// synchronous copies never queue. Nothing else runs on an emulated device.
Status device_synchronize(int32_t) { return Status{}; }

Status malloc(int32_t device, size_t bytes, void** ptr) {
  *ptr = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mem_mu);
    if (bytes > g_config.memory - g_in_use[device]) {
      return Status{DK_ERROR_OUT_OF_MEMORY,
                    "out of memory: the emulated device has " + std::to_string(g_config.memory) +
                        " bytes, " + std::to_string(g_in_use[device]) +
                        " in use (DEVICEKIT_CUDA_SIM_MEMORY_BYTES sets its size)"};
    }
    g_in_use[device] += bytes;
  }
  void* p = std::aligned_alloc(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
  if (p == nullptr) {
    std::lock_guard<std::mutex> lock(g_mem_mu);
    g_in_use[device] -= bytes;
    return Status{DK_ERROR_OUT_OF_MEMORY, "out of host memory for the emulated device"};
  }
  *ptr = p;
  return Status{};
}

Status free(int32_t device, void* ptr, size_t bytes) {
  std::free(ptr);
  std::lock_guard<std::mutex> lock(g_mem_mu);
  g_in_use[device] -= bytes;
  return Status{};
}

Status memcpy(int32_t, void* dst, const void* src, size_t bytes, CopyKind, Stream* stream) {
  if (stream == nullptr) {
    std::memcpy(dst, src, bytes);
    return Status{};
  }
  stream->push(Job{Job::kRun,
                   [dst, src, bytes]() {
                     std::memcpy(dst, src, bytes);
                     return Status{};
                   },
                   nullptr});
  return Status{};
}

Status stream_create(int32_t device, Stream** out) {
  std::unique_ptr<Stream> s(new Stream(device));
  s->worker = std::thread([p = s.get()] { p->main(); });
  *out = s.release();
  return Status{};
}

Status stream_destroy(Stream* s) {
  {
    std::lock_guard<std::mutex> lock(s->mu);
    s->stop = true;
    s->changed.notify_all();
  }
  s->worker.join();
  delete s;
  return Status{};
}

void* stream_handle(Stream* s) { return s; }

KernelErrors* stream_errors(Stream* s) {
  std::lock_guard<std::mutex> lock(s->mu);
  return s->capture != nullptr ? &s->capture->errors : &s->errors;
}

// The stream is idle (the caller synchronized): its kernels wrote the word
// on the worker, before the handoff under s->mu.
Status take_kernel_errors(Stream* s, KernelErrors* out) {
  std::lock_guard<std::mutex> lock(s->mu);
  *out = s->errors;
  s->errors = KernelErrors{};
  return Status{};
}

Status stream_synchronize(Stream* s) {
  std::unique_lock<std::mutex> lock(s->mu);
  s->changed.wait(lock, [&] { return s->unfinished == 0; });
  Status st = s->first_error;
  s->first_error = Status{};
  return st;
}

Status stream_query(Stream* s, bool* idle) {
  std::lock_guard<std::mutex> lock(s->mu);
  *idle = s->unfinished == 0;
  return s->first_error;  // stays pending for stream_synchronize
}

Status event_create(int32_t device, Event** out) {
  *out = new Event(device);
  return Status{};
}

Status event_destroy(Event* e) {
  delete e;  // its points live on in any marker or waiter holding them
  return Status{};
}

Status event_record(Event* e, Stream* s) {
  {
    std::lock_guard<std::mutex> lock(s->mu);
    if (s->capture != nullptr) {  // a node: each launch makes the point
      s->capture->jobs.push_back(Job{Job::kRecord, nullptr, nullptr, e});
      return Status{};
    }
  }
  auto point = std::make_shared<Point>();
  s->push(Job{Job::kRecord, nullptr, point});
  std::lock_guard<std::mutex> lock(e->mu);
  e->point = std::move(point);  // earlier waiters keep the old point
  return Status{};
}

Status event_query(Event* e, bool* reached) {
  const std::shared_ptr<Point> p = e->current();
  *reached = p == nullptr || p->is_reached();
  return Status{};
}

Status event_synchronize(Event* e) {
  const std::shared_ptr<Point> p = e->current();
  if (p != nullptr) p->wait();
  return Status{};
}

Status event_elapsed_ms(Event* start, Event* end, double* ms) {
  const std::shared_ptr<Point> a = start->current(), b = end->current();
  *ms = std::chrono::duration<double, std::milli>(b->when - a->when).count();
  return Status{};
}

Status stream_wait_event(Stream* s, Event* e) {
  {
    std::lock_guard<std::mutex> lock(s->mu);
    if (s->capture != nullptr) {  // a node: each launch looks up the point
      s->capture->jobs.push_back(Job{Job::kWait, nullptr, nullptr, e});
      return Status{};
    }
  }
  std::shared_ptr<Point> p = e->current();
  if (p != nullptr && !p->is_reached()) s->push(Job{Job::kWait, nullptr, std::move(p)});
  return Status{};
}

Status capture_begin(Stream* s) {
  auto g = std::make_shared<GraphBody>();
  std::lock_guard<std::mutex> lock(s->mu);
  if (s->capture != nullptr) return Status{DK_ERROR_FAILED_PRECONDITION, "already capturing"};
  s->capture = std::move(g);
  return Status{};
}

bool capturing(Stream* s) {
  std::lock_guard<std::mutex> lock(s->mu);
  return s->capture != nullptr;
}

Status capture_end(Stream* s, bool keep, Graph** out) {
  *out = nullptr;
  std::shared_ptr<GraphBody> g;
  {
    std::lock_guard<std::mutex> lock(s->mu);
    g = std::move(s->capture);
    s->capture = nullptr;
  }
  if (g == nullptr) return Status{DK_ERROR_FAILED_PRECONDITION, "the stream is not capturing"};
  if (keep) *out = new Graph{std::move(g)};
  return Status{};
}

// The launch's job shares the graph's body and owns the points resolved at
// the launch.
Status graph_launch(Graph* graph, Stream* s) {
  const GraphBody* g = graph->body.get();
  struct Launch {
    std::shared_ptr<GraphBody> graph;
    std::vector<std::shared_ptr<Point>> points;  // one per kRecord / kWait node, in order
  };
  auto l = std::make_shared<Launch>();
  l->graph = graph->body;
  for (const Job& j : g->jobs) {
    if (j.kind == Job::kRun) continue;
    if (j.kind == Job::kRecord) {
      auto point = std::make_shared<Point>();
      {
        std::lock_guard<std::mutex> lock(j.event->mu);
        j.event->point = point;
      }
      l->points.push_back(std::move(point));
    } else {
      std::shared_ptr<Point> p = j.event->current();  // NULL: never recorded, nothing to wait for
      l->points.push_back(std::move(p));
    }
  }
  s->push(Job{Job::kRun,
              [l, s]() {
                Status first;
                size_t next = 0;
                for (const Job& j : l->graph->jobs) {
                  Status st;
                  if (j.kind == Job::kRun) {
                    st = j.run();
                  } else if (const std::shared_ptr<Point>& p = l->points[next++]) {
                    if (j.kind == Job::kRecord) p->reach();
                    else p->wait();
                  }
                  if (!st.ok() && first.ok()) first = st;  // like eager work: the rest still runs
                }
                // The graph's data errors into the launch stream's word (this
                // worker is the only writer of both right now).
                KernelErrors& from = l->graph->errors;
                if (from.count != 0) {
                  if (s->errors.count == 0) s->errors = from;
                  else s->errors.count += from.count;
                  from = KernelErrors{};
                }
                return first;
              },
              nullptr});
  return Status{};
}

Status graph_destroy(Graph* g) {
  delete g;
  return Status{};
}

}  // namespace gpu
}  // namespace dkcuda

// The emulator's hook for DK_LAUNCH (simt.h): `stream` is what
// gpu::stream_handle returned, this file's Stream. The job runs on the
// stream's worker in order; a non-empty result is a failed check or launch,
// which becomes the stream's asynchronous error.
std::string dk::sim::enqueue(void* stream, const char* kernel, std::function<std::string()> job) {
  (void)kernel;  // run_grid's message names it
  auto* s = static_cast<dkcuda::gpu::Stream*>(stream);
  s->push(dkcuda::gpu::Job{dkcuda::gpu::Job::kRun,
                           [job = std::move(job)]() {
                             std::string e = job();
                             if (e.empty()) return dkcuda::gpu::Status{};
                             return dkcuda::gpu::Status{DK_ERROR_INTERNAL, std::move(e)};
                           },
                           nullptr});
  return std::string();
}
