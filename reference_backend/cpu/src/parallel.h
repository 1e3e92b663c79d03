// A small fixed thread pool that kernels use to split one launch across the
// host's cores. Kernels run on a stream's worker thread and call
// parallel_for from there; the stream's order is unaffected because the call
// returns only when every chunk is done.
#ifndef DEVICEKIT_CPU_PARALLEL_H_
#define DEVICEKIT_CPU_PARALLEL_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <new>

namespace dkcpu {

// Calls fn(begin, end) over disjoint ranges covering [0, n), each at least
// `grain` long (the last may be shorter), possibly on several threads, and
// returns when all are done. Runs inline as fn(0, n) when n < 2 * grain, when
// the pool has one thread, when called from a pool thread (no nesting), or
// when another stream is using the pool right now (no waiting on it).
// fn must not throw. Threads: std::thread::hardware_concurrency(), or
// DEVICEKIT_CPU_THREADS if set to a positive integer; the pool starts on the
// first call that needs it and is never torn down (the library is -z nodelete).
void parallel_for(int64_t n, int64_t grain,
                  const std::function<void(int64_t begin, int64_t end)>& fn);

// A spin-wait's pause: lets the core's other hardware thread run and saves
// power while a thread polls (the pool's and the streams' short spins).
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// The number of threads parallel_for may use, the calling one included.
int parallel_threads();

// parallel_for for an fn that may throw std::bad_alloc (scratch buffers):
// fn may run on a pool thread, so an allocation failure is carried out of the
// chunks and rethrown here, on the stream worker, which turns it into the
// stream's asynchronous error.
template <class F> void parallel_for_may_throw(int64_t n, int64_t grain, const F& fn) {
  std::atomic<bool> out_of_memory{false};
  parallel_for(n, grain, [&](int64_t begin, int64_t end) {
    try {
      fn(begin, end);
    } catch (...) { out_of_memory = true; }
  });
  if (out_of_memory) throw std::bad_alloc();
}

}  // namespace dkcpu

#endif  // DEVICEKIT_CPU_PARALLEL_H_
