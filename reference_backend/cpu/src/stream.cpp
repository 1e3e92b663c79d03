// Streams, events and device synchronisation.
//
// Every stream has its own worker thread draining a FIFO, so work really runs
// asynchronously and out of step with the host: an SDK that forgets to order
// two streams with an event, reads a result before synchronising, or lets a
// host buffer die before an asynchronous copy ran gets wrong results here on
// the CPU already, not first on a customer's device.
//
// The queue is a fixed ring of fixed-size slots. The worker is its only
// consumer and takes no lock; producers serialise on a mutex that is
// uncontended in the usual one-thread-per-stream case. Both sides hand off
// through Waiter, which spins briefly before sleeping, so in steady state an
// enqueue is a copy and two atomic operations: no allocation, no syscall.
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <thread>

#include "api.h"
#include "internal.h"
#include "parallel.h"

namespace dkcpu {
namespace {

using Clock = std::chrono::steady_clock;

// How long a waiter spins before it sleeps. Long enough to cover the gap
// between two tiny kernels (about a microsecond), short enough that an idle
// stream stops burning a core almost at once.
constexpr auto kSpinTime = std::chrono::microseconds(50);
constexpr uint64_t kQueueSlots = 256;  // a full queue makes the producer wait, like a
                                       // full command buffer on a real device

// Waits for a condition that usually comes true within microseconds. Whoever
// makes the condition true calls wake(), which costs one atomic load unless
// somebody is actually asleep. Every atomic a `ready` predicate reads is
// stored and loaded seq_cst (the default), and so are sleepers_: either the
// waker sees the sleeper's increment and notifies under the mutex, or the
// sleeper's re-check under the mutex sees the condition. No wake-up is lost.
class Waiter {
 public:
  template <class Ready> void wait(Ready ready) {
    const auto deadline = Clock::now() + kSpinTime;
    for (unsigned i = 1; !ready(); ++i) {
      cpu_relax();
      if (i % 64 == 0) {
        if (Clock::now() > deadline) return sleep(ready);
        std::this_thread::yield();  // let a producer sharing this core run
      }
    }
  }

  void wake() {
    if (sleepers_.load() == 0) return;
    std::lock_guard<std::mutex> lock(mu_);
    cv_.notify_all();
  }

 private:
  template <class Ready> void sleep(Ready ready) {
    sleepers_.fetch_add(1);
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, ready);
    }
    sleepers_.fetch_sub(1);
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<int> sleepers_{0};
};

// One recorded point of an event. Each Event_Record makes a new one, shared
// by the marker on the stream, the event, and every stream or host waiting on
// it; so re-recording or destroying the event never strands a waiter.
struct EventPoint {
  std::atomic<bool> reached{false};
  Clock::time_point when;  // written before `reached` becomes true
  Waiter waiter;
};

struct WorkItem {
  enum Kind { kRun, kRecord, kWait } kind = kRun;
  WorkFn fn = nullptr;                // kRun
  std::shared_ptr<EventPoint> point;  // kRecord, kWait
  alignas(16) unsigned char payload[kMaxPayloadBytes];
};

}  // namespace
}  // namespace dkcpu

using namespace dkcpu;
using dkh::kDead;
using dkh::kLiveEvent;
using dkh::kLiveStream;

struct DK_Stream {
  explicit DK_Stream(int32_t dev) : device(dev), slots(new WorkItem[kQueueSlots]) {}

  std::atomic<uint32_t> magic{kLiveStream};  // best-effort use-after-destroy check
  const int32_t device;
  std::unique_ptr<WorkItem[]> slots;
  alignas(64) std::atomic<uint64_t> tail{0};  // items enqueued (under enqueue_mu)
  alignas(64) std::atomic<uint64_t> head{0};  // items finished (by the worker)
  std::mutex enqueue_mu;
  Waiter work_ready;  // the worker waits here for tail != head
  Waiter progress;    // hosts wait here for head to move (synchronize, full queue)
  std::atomic<bool> stop{false};
  std::atomic<dkcpu::Capture*> capture{nullptr};  // graphs.cpp: recording, not running
  std::mutex error_mu;
  DK_Error* first_error = nullptr;  // first asynchronous error; later ones are dropped
  std::thread worker;
};

struct DK_Event {
  explicit DK_Event(int32_t dev) : device(dev) {}

  std::atomic<uint32_t> magic{kLiveEvent};
  const int32_t device;
  std::mutex mu;
  std::shared_ptr<EventPoint> point;  // latest record; NULL until recorded
  // The stream whose capture last recorded it: Event_Synchronize of it while
  // that stream still captures is host work in the capture (forbidden).
  std::atomic<DK_Stream*> captured_on{nullptr};
};

namespace dkcpu {
namespace {

DK_Error* execute(WorkItem& item) noexcept {
  DK_Error* err = nullptr;
  switch (item.kind) {
    case WorkItem::kRun:
      err = guarded("cpu.stream worker", [&] { return item.fn(item.payload); });
      break;
    case WorkItem::kRecord:
      item.point->when = Clock::now();
      item.point->reached.store(true);
      item.point->waiter.wake();
      break;
    case WorkItem::kWait: {
      EventPoint& p = *item.point;
      p.waiter.wait([&] { return p.reached.load(); });
      break;
    }
  }
  item.point.reset();  // drop this slot's share before the slot is reused
  return err;
}

void worker_main(DK_Stream* s) {
  for (uint64_t h = 0;; ++h) {
    s->work_ready.wait([&] { return s->tail.load() != h || s->stop.load(); });
    if (s->tail.load() == h) return;  // stop was requested and everything ran
    if (DK_Error* err = execute(s->slots[h % kQueueSlots])) {
      std::lock_guard<std::mutex> lock(s->error_mu);
      if (s->first_error == nullptr) {
        s->first_error = err;
      } else {  // a later error is dropped: the header reports the first one
        DK_Error_Destroy_Args destroy = {DK_Error_Destroy_Args_STRUCT_SIZE, err};
        dkh_Error_Destroy(&destroy);  // malloc'd by dkh_error: never `delete`
      }
    }
    s->head.store(h + 1);
    s->progress.wake();
  }
}

// Appends one item; `fill` writes the slot. Items are ordered by enqueue_mu.
template <class Fill> void push(DK_Stream* s, Fill fill) {
  std::lock_guard<std::mutex> lock(s->enqueue_mu);
  const uint64_t t = s->tail.load(std::memory_order_relaxed);
  s->progress.wait([&] { return t - s->head.load() < kQueueSlots; });
  fill(s->slots[t % kQueueSlots]);
  s->tail.store(t + 1);
  s->work_ready.wake();
}

void push_point(DK_Stream* s, WorkItem::Kind kind, std::shared_ptr<EventPoint> point) {
  push(s, [&](WorkItem& item) {
    item.kind = kind;
    item.point = std::move(point);
  });
}

// Waits for everything enqueued before the call; does not take the error.
void drain(DK_Stream* s) {
  const uint64_t target = s->tail.load();
  s->progress.wait([&] { return s->head.load() >= target; });
}

DK_Error* take_error(DK_Stream* s) {
  std::lock_guard<std::mutex> lock(s->error_mu);
  DK_Error* err = s->first_error;
  s->first_error = nullptr;
  return err;
}

DK_Error* check_event(const char* call, const char* what, const DK_Event* e) {
  return dkh::check_event(call, what, e);
}

// Event_Record / Stream_WaitEvent on a capturing stream are recorded, not
// run (the header's rule): true when `s` captured the call.
bool captured_event(DK_Stream* s, int wait, DK_Event* e) {
  Capture* c = s->capture.load();
  if (c == nullptr) return false;
  std::lock_guard<std::mutex> lock(s->enqueue_mu);  // ordered with the captured kernels
  if (s->capture.load() != c) return false;
  capture_event(c, wait, e);
  if (wait == 0) e->captured_on.store(s);
  return true;
}

std::shared_ptr<EventPoint> current_point(DK_Event* e) {
  std::lock_guard<std::mutex> lock(e->mu);
  return e->point;
}

}  // namespace

DK_Error* check_stream(const char* call, const DK_Stream* s, int32_t device) {
  return dkh::check_stream(plugin(), call, s, device);
}

void enqueue_raw(DK_Stream* s, WorkFn fn, const void* payload, size_t bytes) {
  if (Capture* c = s->capture.load()) {
    std::lock_guard<std::mutex> lock(s->enqueue_mu);  // orders records like pushes
    if (s->capture.load() == c) return capture_record(c, fn, payload, bytes);
  }
  enqueue_uncaptured(s, fn, payload, bytes);
}

EventPointRef event_new_point(DK_Event* e) {
  auto point = std::make_shared<EventPoint>();
  std::lock_guard<std::mutex> lock(e->mu);
  e->point = point;
  return point;
}

EventPointRef event_pending_point(DK_Event* e) {
  std::shared_ptr<EventPoint> point = current_point(e);
  if (point == nullptr || point->reached.load()) return nullptr;
  return point;
}

void event_point_reach(const EventPointRef& ref) {
  auto* p = static_cast<EventPoint*>(ref.get());
  p->when = Clock::now();
  p->reached.store(true);
  p->waiter.wake();
}

void event_point_wait(const EventPointRef& ref) {
  if (ref == nullptr) return;
  auto* p = static_cast<EventPoint*>(ref.get());
  p->waiter.wait([&] { return p->reached.load(); });
}

DK_Error* check_live_event(const char* call, const DK_Event* e) {
  return check_event(call, "event", e);
}

void enqueue_uncaptured(DK_Stream* s, WorkFn fn, const void* payload, size_t bytes) {
  push(s, [&](WorkItem& item) {
    item.kind = WorkItem::kRun;
    item.fn = fn;
    std::memcpy(item.payload, payload, bytes);
  });
}

Capture* stream_capture(const DK_Stream* s) { return s->capture.load(); }
int32_t stream_device(const DK_Stream* s) { return s->device; }

bool stream_swap_capture(DK_Stream* s, Capture* expected, Capture* desired) {
  std::lock_guard<std::mutex> lock(s->enqueue_mu);  // no record is half-way through
  return s->capture.compare_exchange_strong(expected, desired);
}

}  // namespace dkcpu

extern "C" {

DK_Error* dk_cpu_Stream_Create(DK_Stream_Create_Args* args) {
  static const char* const kCall = "cpu.Stream_Create";
  DKCPU_CHECK_ARGS(kCall, args, DK_Stream_Create_Args);
  if (DK_Error* e = check_device(kCall, args->device)) return e;
  return guarded(kCall, [&]() -> DK_Error* {
    auto s = std::make_shared<DK_Stream>(args->device);
    s->worker = std::thread(worker_main, s.get());
    try {
      dkh::add_stream(plugin().devices[args->device], s);
    } catch (...) {
      s->stop.store(true);
      s->work_ready.wake();
      s->worker.join();
      throw;
    }
    args->stream = s.get();
    return nullptr;
  });
}

DK_Error* dk_cpu_Stream_Destroy(DK_Stream_Destroy_Args* args) {
  static const char* const kCall = "cpu.Stream_Destroy";
  DKCPU_CHECK_ARGS(kCall, args, DK_Stream_Destroy_Args);
  if (DK_Error* e = check_stream(kCall, args->stream, -1)) return e;
  return guarded(kCall, [&]() -> DK_Error* {
    DK_Stream* s = args->stream;
    const std::shared_ptr<DK_Stream> keep = dkh::remove_stream(plugin().devices[s->device], s);
    drain(s);
    s->stop.store(true);
    s->work_ready.wake();
    s->worker.join();
    capture_delete(s->capture.exchange(nullptr));  // an open capture ends with its stream
    s->magic.store(kDead);
    // The stream is gone either way; an error its last work raised is still
    // reported (nothing silent), so the caller must not destroy it again.
    return take_error(s);
  });
}

DK_Error* dk_cpu_Stream_Synchronize(DK_Stream_Synchronize_Args* args) {
  static const char* const kCall = "cpu.Stream_Synchronize";
  DKCPU_CHECK_ARGS(kCall, args, DK_Stream_Synchronize_Args);
  if (DK_Error* e = check_stream(kCall, args->stream, -1)) return e;
  if (DK_Error* e = capture_forbidden(kCall, args->stream)) return e;
  return guarded(kCall, [&] {
    drain(args->stream);
    return take_error(args->stream);
  });
}

DK_Error* dk_cpu_Stream_Query(DK_Stream_Query_Args* args) {
  static const char* const kCall = "cpu.Stream_Query";
  DKCPU_CHECK_ARGS(kCall, args, DK_Stream_Query_Args);
  if (DK_Error* e = check_stream(kCall, args->stream, -1)) return e;
  if (DK_Error* e = capture_forbidden(kCall, args->stream)) return e;
  args->idle = args->stream->head.load() == args->stream->tail.load();
  return nullptr;
}

DK_Error* dk_cpu_Device_Synchronize(DK_Device_Synchronize_Args* args) {
  static const char* const kCall = "cpu.Device_Synchronize";
  DKCPU_CHECK_ARGS(kCall, args, DK_Device_Synchronize_Args);
  if (DK_Error* e = check_device(kCall, args->device)) return e;
  return guarded(kCall, [&]() -> DK_Error* {
    const auto streams = dkh::live_streams(plugin().devices[args->device]);
    for (auto& s : streams) {
      if (DK_Error* e = capture_forbidden(kCall, s.get())) return e;
    }
    for (auto& s : streams) drain(s.get());
    // Only the first error is returned (and cleared); other streams keep
    // theirs for their own next synchronize rather than losing them.
    for (auto& s : streams) {
      if (DK_Error* err = take_error(s.get())) return err;
    }
    return nullptr;
  });
}

DK_Error* dk_cpu_Event_Create(DK_Event_Create_Args* args) {
  static const char* const kCall = "cpu.Event_Create";
  DKCPU_CHECK_ARGS(kCall, args, DK_Event_Create_Args);
  if (DK_Error* e = check_device(kCall, args->device)) return e;
  return guarded(kCall, [&]() -> DK_Error* {
    args->event = new DK_Event(args->device);
    return nullptr;
  });
}

DK_Error* dk_cpu_Event_Destroy(DK_Event_Destroy_Args* args) {
  static const char* const kCall = "cpu.Event_Destroy";
  DKCPU_CHECK_ARGS(kCall, args, DK_Event_Destroy_Args);
  if (DK_Error* e = check_event(kCall, "event", args->event)) return e;
  args->event->magic.store(kDead);
  delete args->event;  // its points live on in any marker or waiter that holds them
  return nullptr;
}

DK_Error* dk_cpu_Event_Record(DK_Event_Record_Args* args) {
  static const char* const kCall = "cpu.Event_Record";
  DKCPU_CHECK_ARGS(kCall, args, DK_Event_Record_Args);
  if (DK_Error* e = check_event(kCall, "event", args->event)) return e;
  if (DK_Error* e = check_stream(kCall, args->stream, args->event->device)) return e;
  return guarded(kCall, [&]() -> DK_Error* {
    if (captured_event(args->stream, 0, args->event)) return nullptr;
    args->event->captured_on.store(nullptr);
    auto point = std::make_shared<EventPoint>();
    push_point(args->stream, WorkItem::kRecord, point);
    std::lock_guard<std::mutex> lock(args->event->mu);
    args->event->point = std::move(point);  // earlier waiters keep the old point
    return nullptr;
  });
}

DK_Error* dk_cpu_Stream_WaitEvent(DK_Stream_WaitEvent_Args* args) {
  static const char* const kCall = "cpu.Stream_WaitEvent";
  DKCPU_CHECK_ARGS(kCall, args, DK_Stream_WaitEvent_Args);
  if (DK_Error* e = check_stream(kCall, args->stream, -1)) return e;
  if (DK_Error* e = check_event(kCall, "event", args->event)) return e;
  return guarded(kCall, [&]() -> DK_Error* {
    if (captured_event(args->stream, 1, args->event)) return nullptr;
    std::shared_ptr<EventPoint> point = current_point(args->event);
    // Never recorded, or already reached: nothing to wait for.
    if (point != nullptr && !point->reached.load()) {
      push_point(args->stream, WorkItem::kWait, std::move(point));
    }
    return nullptr;
  });
}

DK_Error* dk_cpu_Event_Query(DK_Event_Query_Args* args) {
  static const char* const kCall = "cpu.Event_Query";
  DKCPU_CHECK_ARGS(kCall, args, DK_Event_Query_Args);
  if (DK_Error* e = check_event(kCall, "event", args->event)) return e;
  std::shared_ptr<EventPoint> point = current_point(args->event);
  args->reached = point == nullptr || point->reached.load();
  return nullptr;
}

DK_Error* dk_cpu_Event_Synchronize(DK_Event_Synchronize_Args* args) {
  static const char* const kCall = "cpu.Event_Synchronize";
  DKCPU_CHECK_ARGS(kCall, args, DK_Event_Synchronize_Args);
  if (DK_Error* e = check_event(kCall, "event", args->event)) return e;
  if (DK_Stream* s = args->event->captured_on.load()) {  // recorded in a capture
    if (DK_Error* dead = check_stream(kCall, s, -1)) {  // destroyed since: not capturing
      DK_Error_Destroy_Args destroy = {DK_Error_Destroy_Args_STRUCT_SIZE, dead};
      dkh_Error_Destroy(&destroy);
    } else if (DK_Error* e = capture_forbidden(kCall, s)) {
      return e;
    }
  }
  return guarded(kCall, [&]() -> DK_Error* {
    std::shared_ptr<EventPoint> point = current_point(args->event);
    if (point != nullptr) point->waiter.wait([&] { return point->reached.load(); });
    return nullptr;
  });
}

DK_Error* dk_cpu_Event_ElapsedTime(DK_Event_ElapsedTime_Args* args) {
  static const char* const kCall = "cpu.Event_ElapsedTime";
  DKCPU_CHECK_ARGS(kCall, args, DK_Event_ElapsedTime_Args);
  if (DK_Error* e = check_event(kCall, "start", args->start)) return e;
  if (DK_Error* e = check_event(kCall, "end", args->end)) return e;
  const std::shared_ptr<EventPoint> start = current_point(args->start);
  const std::shared_ptr<EventPoint> end = current_point(args->end);
  for (const auto* p : {&start, &end}) {
    if (*p == nullptr || !(*p)->reached.load()) {
      return dkh::event_not_reached(kCall, p == &start ? "start" : "end", *p != nullptr);
    }
  }
  args->milliseconds = std::chrono::duration<double, std::milli>(end->when - start->when).count();
  return nullptr;
}

}  // extern "C"
