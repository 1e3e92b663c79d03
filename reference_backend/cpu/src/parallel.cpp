// The thread pool behind parallel_for (see parallel.h).
//
// One job at a time: the caller publishes it under `mu`, bumps `generation`
// and joins in; workers take chunks from an atomic counter. A publisher
// first waits until no worker is still inside the previous job, so a late
// worker can never pair the old job's fn with the new job's chunk counter.
//
// Workers and the caller spin briefly before they sleep, like the stream's
// Waiter (stream.cpp): a model step is hundreds of launches, each one to a
// few parallel_for jobs a few microseconds to a millisecond apart, and a
// worker asleep on the condition variable took a futex wake-up (tens of
// microseconds, more on a busy host) to join each one, while the caller ran
// the chunks alone. With the spin, a worker that just finished a job sees the
// next one at once. It spins for kSpinTime after its last job, then sleeps,
// so an idle plugin costs nothing.
#include "parallel.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

namespace dkcpu {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kSpinTime = std::chrono::microseconds(200);

thread_local bool t_in_pool = false;

// Spins until ready() for up to kSpinTime (yielding now and then, so a thread
// sharing the core runs); true if ready() came true.
template <class Ready> bool spin_until(Ready ready) {
  const auto deadline = Clock::now() + kSpinTime;
  for (unsigned i = 1; !ready(); ++i) {
    cpu_relax();
    if (i % 64 == 0) {
      if (Clock::now() > deadline) return false;
      std::this_thread::yield();
    }
  }
  return true;
}

int configured_threads() {
  if (const char* env = std::getenv("DEVICEKIT_CPU_THREADS")) {
    char* end = nullptr;
    const long v = std::strtol(env, &end, 10);
    if (end != env && *end == '\0' && v > 0) return int(std::min(v, 1024L));
  }
  return int(std::max(1u, std::thread::hardware_concurrency()));
}

class Pool {
 public:
  explicit Pool(int threads) {
    for (int i = 1; i < threads; ++i) std::thread([this] { worker(); }).detach();
  }

  // False if another caller holds the pool: the caller then runs inline.
  bool try_run(int64_t n, int64_t chunk, const std::function<void(int64_t, int64_t)>& fn) {
    std::unique_lock<std::mutex> job(job_mu_, std::try_to_lock);
    if (!job.owns_lock()) return false;
    const int64_t chunks = (n + chunk - 1) / chunk;
    spin_until([&] { return active_.load() == 0; });  // a late worker leaving the last job
    {
      std::unique_lock<std::mutex> lk(mu_);
      idle_.wait(lk, [&] { return active_.load() == 0; });
      fn_ = &fn;
      n_ = n;
      chunk_ = chunk;
      chunks_ = chunks;
      next_.store(0, std::memory_order_relaxed);
      done_.store(0, std::memory_order_relaxed);
      generation_.fetch_add(1);
      if (sleepers_ > 0) wake_.notify_all();
    }
    run_chunks(fn, n, chunk, chunks);
    // Every chunk has run once done_ == chunks; a worker that took none may
    // still be inside run_chunks, but it calls fn no more (the next job
    // waits for it to leave: active_ above).
    if (!spin_until([&] { return done_.load() == chunks; })) {
      std::unique_lock<std::mutex> lk(mu_);
      idle_.wait(lk, [&] { return done_.load() == chunks; });
    }
    return true;
  }

 private:
  void run_chunks(const std::function<void(int64_t, int64_t)>& fn, int64_t n, int64_t chunk,
                  int64_t chunks) {
    int64_t mine = 0;
    for (int64_t c; (c = next_.fetch_add(1)) < chunks; ++mine) {
      fn(c * chunk, std::min(n, (c + 1) * chunk));
    }
    if (mine > 0) done_.fetch_add(mine);
  }

  void worker() {
    t_in_pool = true;
    uint64_t seen = 0;
    for (;;) {
      spin_until([&] { return generation_.load() != seen; });  // the next job, usually soon
      std::unique_lock<std::mutex> lk(mu_);
      ++sleepers_;
      wake_.wait(lk, [&] { return generation_.load() != seen; });
      --sleepers_;
      seen = generation_.load();
      active_.fetch_add(1);
      const auto* fn = fn_;
      const int64_t n = n_, chunk = chunk_, chunks = chunks_;
      lk.unlock();
      run_chunks(*fn, n, chunk, chunks);  // a late joiner finds no chunk left
      // A caller asleep (it spun past kSpinTime) waits for done_ or active_:
      // the last worker to leave wakes it (every chunk a worker took is done
      // by the time it leaves).
      if (active_.fetch_sub(1) == 1) {
        lk.lock();
        idle_.notify_all();
      }
    }
  }

  std::mutex job_mu_;  // held by the one caller whose job is running
  std::mutex mu_;      // guards the job's fields and the sleep counters
  std::condition_variable wake_, idle_;
  std::atomic<uint64_t> generation_{0};  // bumped under mu_; read lock-free while spinning
  std::atomic<int> active_{0};           // workers inside run_chunks
  int sleepers_ = 0;                     // under mu_: workers asleep in wake_
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0, chunk_ = 1, chunks_ = 0;
  std::atomic<int64_t> next_{0}, done_{0};
};

Pool* pool() {
  // Leaked on purpose: workers block in it until the process exits.
  static Pool* const p = new Pool(parallel_threads());
  return p;
}

}  // namespace

int parallel_threads() {
  static const int threads = configured_threads();
  return threads;
}

void parallel_for(int64_t n, int64_t grain,
                  const std::function<void(int64_t begin, int64_t end)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int threads = parallel_threads();
  if (n < 2 * grain || threads == 1 || t_in_pool) return fn(0, n);
  // About four chunks per thread balances uneven progress; never below grain.
  // Long chunks (element loops) are rounded to 64 items so each starts cache-
  // line and vector aligned; short ones (rows, tiles) are left alone.
  int64_t chunk = std::max(grain, (n + 4 * threads - 1) / (4 * int64_t(threads)));
  if (chunk >= 1024) chunk = (chunk + 63) / 64 * 64;
  if (!pool()->try_run(n, chunk, fn)) fn(0, n);
}

}  // namespace dkcpu
