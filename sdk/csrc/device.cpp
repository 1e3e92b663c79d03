#include "device.h"

#include <pthread.h>
#include <cstdint>
#include <cstdio>

#include "boundary.h"
#include "ops.h"
#include "trace.h"

namespace dk {

namespace {
std::atomic<uint64_t> g_fork_generation{0};
void on_fork_child() { g_fork_generation.fetch_add(1, std::memory_order_relaxed); }
// Registered when the core is loaded, before any device can be used.
[[maybe_unused]] const int g_atfork_registered = pthread_atfork(nullptr, nullptr, &on_fork_child);
}  // namespace

uint64_t fork_generation() { return g_fork_generation.load(std::memory_order_relaxed); }

void Device::forked_error() const {
  throw Error(ErrorKind::ForkedProcess,
              "device " + name_ + " was used by the parent of this process before fork(); the " +
                  "plugin's streams and worker threads do not exist in a forked child, so it " +
                  "cannot be used here. Start worker processes with the 'spawn' start method " +
                  "(multiprocessing.get_context('spawn') or multiprocessing.set_start_method(" +
                  "'spawn')), or fork before the parent first uses the device");
}

template <class Call> void Device::synchronizing(Call call) {
  // Work enqueued from here on belongs to the next epoch.
  const uint64_t e = epoch_.fetch_add(1);
  try {
    call();
  } catch (const Error& err) {
    if (err.kind() == ErrorKind::Device) {
      std::lock_guard<std::mutex> lock(fail_mu_);
      failed_epochs_.emplace(e, err);
      has_failures_.store(true);
    }
    throw;
  }
}

void Device::check_not_failed(uint64_t written_epoch, const std::string& what) const {
  if (written_epoch == 0) return;
  std::lock_guard<std::mutex> lock(fail_mu_);
  // A failure is recorded under the epoch its synchronize ended; an epoch
  // that ended cleanly has no entry.
  auto it = failed_epochs_.find(written_epoch);
  if (it == failed_epochs_.end()) return;
  throw Error(it->second.kind(),
              std::string(it->second.what()) + " [raised again: " + what +
                  " was written by work enqueued before this asynchronous error was reported, " +
                  "so its contents are undefined]",
              it->second.code());
}

Device::Device(Plugin* plugin, int index)
    : plugin_(plugin), index_(index), name_(plugin->info().name + ":" + std::to_string(index)) {}

Device::~Device() {
  // Devices live as long as their plugin, i.e. until process exit, when
  // plugin worker threads may already be gone: deliberately release nothing.
}

const DeviceProperties& Device::properties() {
  std::call_once(props_once_, [&] {
    auto a = DK_ARGS(DK_Device_GetProperties_Args);
    a.device = index_;
    check(api()->Device_GetProperties(&a), "Device_GetProperties");
    const std::string call = ctx("Device_GetProperties");
    if (a.name == nullptr) {
      contract_error(plugin_->who(), call, "name", "NULL",
                     "a NUL-terminated UTF-8 string, never NULL",
                     "DK_Device_GetProperties_Args.name");
    }
    // The SDK checks every Memory_Allocate result against it.
    if (!is_power_of_two(a.alignment) || a.alignment < 16) {
      contract_error(plugin_->who(), call, "alignment", std::to_string(a.alignment),
                     "a power of two >= 16", "DK_Device_GetProperties_Args.alignment");
    }
    props_ = {bounded_text(a.name), a.total_memory, a.capabilities, a.dtypes, a.alignment};
  });
  return props_;
}

DK_Stream* Device::default_stream() {
  check_fork();
  mark_used();
  std::call_once(stream_once_, [&] {
    auto a = DK_ARGS(DK_Stream_Create_Args);
    a.device = index_;
    check(api()->Stream_Create(&a), "Stream_Create");
    // NULL means "synchronous" to Memcpy: never let it stand for a stream.
    check_created(a.stream, "Stream_Create", "stream", "DK_Stream_Create_Args.stream");
    stream_.store(a.stream);
  });
  return stream_.load(std::memory_order_relaxed);
}

void Device::synchronize() {
  check_fork();
  check_not_capturing("Device_Synchronize");
  auto a = DK_ARGS(DK_Device_Synchronize_Args);
  a.device = index_;
  if (trace::on()) {
    trace::Span span(trace::kSync, *this, nullptr, "Device_Synchronize");
    synchronizing([&] { check(api()->Device_Synchronize(&a), "Device_Synchronize"); });
    return;
  }
  synchronizing([&] { check(api()->Device_Synchronize(&a), "Device_Synchronize"); });
}

void Device::memcpy(DK_CopyKind kind, void* dst, const void* src, size_t n, DK_Stream* stream) {
  check_fork();
  if (kind != DK_COPY_DEVICE_TO_DEVICE) {
    check_not_capturing(kind == DK_COPY_DEVICE_TO_HOST ? "a copy to host memory"
                                                       : "a copy from host memory");
  }
  if (kind == DK_COPY_DEVICE_TO_DEVICE && stream != nullptr && stream == stream_.load()) {
    if (Recording* r = recording()) {  // recorded by the SDK, not issued
      r->add_copy(dst, src, n);
      return;
    }
    if (capturing()) {
      count_captured_call();
      if (Recording* sh = shadow()) sh->add_copy(dst, src, n);
    }
  }
  auto c = DK_ARGS(DK_Memcpy_Args);
  c.device = index_;
  c.kind = kind;
  c.dst = dst;
  c.src = src;
  c.size = n;
  c.stream = stream;
  if (trace::on()) {
    static const char* const kNames[] = {"h2d", "d2h", "d2d"};
    const char* name = (kind >= 0 && kind < 3) ? kNames[kind] : "memcpy";
    trace::Span span(trace::kCopy, *this, stream, name, n);
    check(api()->Memcpy(&c), "Memcpy");
    return;
  }
  check(api()->Memcpy(&c), "Memcpy");
}

void Device::synchronize(DK_Stream* stream) {
  check_fork();
  if (stream == stream_.load()) check_not_capturing("Stream_Synchronize");
  auto s = DK_ARGS(DK_Stream_Synchronize_Args);
  s.stream = stream;
  auto call = [&] {
    if (trace::on()) {
      trace::Span span(trace::kSync, *this, nullptr, "Stream_Synchronize");
      check(api()->Stream_Synchronize(&s), "Stream_Synchronize");
    } else {
      check(api()->Stream_Synchronize(&s), "Stream_Synchronize");
    }
  };
  // Only the default stream carries tensor kernels; raw runtime streams'
  // errors say nothing about tensors.
  if (stream != nullptr && stream == stream_.load()) {
    synchronizing(call);
  } else {
    call();
  }
}

void Device::check_created(const void* object, const char* call, const char* field,
                           const char* where) const {
  if (object == nullptr) {
    contract_error(plugin_->who(), ctx(call), field, "NULL on success",
                   "a non-NULL object whenever the call returns no error", where);
  }
}

void* Device::raw_alloc(size_t nbytes) {
  check_fork();
  mark_used();
  const size_t alignment = properties().alignment;  // checked: a power of two
  auto a = DK_ARGS(DK_Memory_Allocate_Args);
  a.device = index_;
  a.size = nbytes;
  check(api()->Memory_Allocate(&a), "Memory_Allocate");
  if (nbytes == 0) return a.ptr;  // "0 is valid and yields ptr == NULL"
  if (a.ptr == nullptr) {
    contract_error(plugin_->who(), ctx("Memory_Allocate"), "ptr",
                   "NULL on success (size=" + std::to_string(nbytes) + ")",
                   "a non-NULL pointer for size > 0, or DK_ERROR_OUT_OF_MEMORY",
                   "DK_Memory_Allocate_Args.ptr");
  }
  const uintptr_t addr = reinterpret_cast<uintptr_t>(a.ptr);
  if (addr % alignment != 0) {
    // Give the block back before refusing it, so the refusal leaks nothing.
    try {
      raw_free(a.ptr);
    } catch (const Error&) {
      // The contract error below is the one to report.
    }
    char hex[32];
    std::snprintf(hex, sizeof hex, "%#llx", static_cast<unsigned long long>(addr));
    contract_error(
        plugin_->who(), ctx("Memory_Allocate"), "ptr",
        std::string(hex) + " (size=" + std::to_string(nbytes) + ")",
        "a pointer aligned to the device's alignment (" + std::to_string(alignment) + " bytes)",
        "DK_Memory_Allocate_Args.ptr");
  }
  return a.ptr;
}

void Device::raw_free(void* ptr) {
  check_fork();
  auto a = DK_ARGS(DK_Memory_Free_Args);
  a.device = index_;
  a.ptr = ptr;
  check(api()->Memory_Free(&a), "Memory_Free");
}

namespace {
std::atomic<void (*)()> g_reclaim_hook{nullptr};

// Size classes: 512-byte granules below 1 MiB, 1 MiB granules above, so that
// tensors of nearby sizes share blocks without wasting more than ~0.1%-50%.
size_t round_block(size_t n) {
  constexpr size_t kSmall = 512, kLarge = size_t(1) << 20;
  if (n == 0) return 0;
  if (n < kLarge) return (n + kSmall - 1) / kSmall * kSmall;
  return (n + kLarge - 1) / kLarge * kLarge;
}
}  // namespace

void* Device::allocate(size_t nbytes, size_t* block_size) {
  const size_t bs = round_block(nbytes);
  *block_size = bs;
  if (bs == 0) return nullptr;
  check_fork();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (capture_pool_ != nullptr) {  // a block this capture released is reused first
      auto it = capture_pool_->free.find(bs);
      if (it != capture_pool_->free.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        stats_.cached_bytes -= bs;
        stats_.allocated_bytes += bs;
        ++stats_.cache_hits;
        return p;
      }
    }
    auto it = free_.find(bs);
    if (it != free_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      stats_.cached_bytes -= bs;
      stats_.allocated_bytes += bs;
      ++stats_.cache_hits;
      if (trace::on()) trace::memory(*this, int64_t(bs), stats_.allocated_bytes);
      pin_locked(p, bs);
      return p;
    }
  }
  void* p;
  try {
    p = raw_alloc(bs);
  } catch (const Error& e) {
    if (e.code() != DK_ERROR_OUT_OF_MEMORY) throw;
    // Out of memory. Tensors that only Python's cyclic garbage collector
    // would free may hold device memory (running out of device memory does
    // not make it run), and blocks may be parked in the cache: collect, give
    // the cached blocks (the collected tensors' among them) back, and retry
    // once before reporting the plugin's error. Only this failure path pays.
    if (void (*hook)() = g_reclaim_hook.load(std::memory_order_acquire)) hook();
    empty_cache();
    p = raw_alloc(bs);
  }
  std::lock_guard<std::mutex> lock(mu_);
  stats_.allocated_bytes += bs;
  ++stats_.plugin_alloc_calls;
  if (trace::on()) trace::memory(*this, int64_t(bs), stats_.allocated_bytes);
  pin_locked(p, bs);
  return p;
}

void Device::pin_locked(void* p, size_t bs) {
  if (capture_pool_ == nullptr) return;
  capture_pool_->owned.emplace(p, bs);
  pinned_.emplace(p, capture_pool_);
}

void Device::begin_capture(std::shared_ptr<GraphPool> pool, std::shared_ptr<Recording> recording,
                           std::shared_ptr<Recording> shadow) {
  std::lock_guard<std::mutex> lock(mu_);
  capture_pool_ = std::move(pool);
  recording_ = std::move(recording);
  recording_ptr_.store(recording_.get());
  shadow_ = std::move(shadow);
  shadow_ptr_.store(shadow_.get());
  captured_calls_.store(0);
  capturing_.store(true);
}

void Device::keep_for_capture(std::shared_ptr<const void> object) {
  std::lock_guard<std::mutex> lock(mu_);
  if (capture_pool_ != nullptr) capture_pool_->keepalive.push_back(std::move(object));
}

void Device::end_capture() {
  std::lock_guard<std::mutex> lock(mu_);
  capture_pool_.reset();
  recording_ptr_.store(nullptr);
  recording_.reset();
  shadow_ptr_.store(nullptr);
  shadow_.reset();
  capturing_.store(false);
}

void Device::drop_pool(GraphPool& pool) noexcept {
  if (stale_after_fork()) return;
  std::vector<std::shared_ptr<const void>> kept;  // released after the lock: they release blocks
  std::lock_guard<std::mutex> lock(mu_);
  kept.swap(pool.keepalive);
  for (const auto& kv : pool.owned) pinned_.erase(kv.first);
  for (auto& kv : pool.free) {
    auto& dst = free_[kv.first];
    dst.insert(dst.end(), kv.second.begin(), kv.second.end());
  }
  pool.free.clear();
  pool.owned.clear();
}

void Device::check_not_capturing(const std::string& call) const {
  if (!capturing()) return;
  throw Error(ErrorKind::InvalidArgument,
              "devicekit.graphs.capture: " + call + " on device " + name_ +
                  " needs the host while the device's stream is being captured into a graph "
                  "(a graph replays device work only: no host copies, no synchronisation). "
                  "Hint: read results after the capture, or after Graph.replay().");
}

void Device::release(void* ptr, size_t block_size) noexcept {
  if (ptr == nullptr) return;
  // In a forked child the parent's blocks are left alone: the lock may have
  // been held by a parent thread that does not exist here.
  if (stale_after_fork()) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto pin = pinned_.find(ptr);
  if (pin != pinned_.end()) {
    pin->second->free[block_size].push_back(ptr);  // stays the graph's
  } else {
    free_[block_size].push_back(ptr);
  }
  stats_.allocated_bytes -= block_size;
  stats_.cached_bytes += block_size;
  if (trace::on()) trace::memory(*this, -int64_t(block_size), stats_.allocated_bytes);
}

void Device::empty_cache() {
  check_fork();
  drop_constants(this);  // their blocks join the free lists emptied below
  // Take the blocks first, then synchronize (see device.h): synchronizing
  // first would let another thread release a block whose kernel is still
  // queued between the synchronize and the take, and free it under that kernel.
  std::unordered_map<size_t, std::vector<void*>> blocks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    blocks.swap(free_);
    // Blocks a live graph's pool holds stay cached (and counted) there.
    for (const auto& kv : blocks) stats_.cached_bytes -= kv.first * kv.second.size();
  }
  try {
    synchronize();
  } catch (...) {
    // The device reported an error: keep the blocks cached, report the error.
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& kv : blocks) {
      auto& list = free_[kv.first];
      list.insert(list.end(), kv.second.begin(), kv.second.end());
      stats_.cached_bytes += kv.first * kv.second.size();
    }
    throw;
  }
  for (auto& kv : blocks) {
    for (void* p : kv.second) {
      raw_free(p);
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.plugin_free_calls;
    }
  }
}

void Device::set_reclaim_hook(void (*hook)()) {
  g_reclaim_hook.store(hook, std::memory_order_release);
}

CacheStats Device::cache_stats() {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace dk
