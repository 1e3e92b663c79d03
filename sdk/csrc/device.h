// One device of a loaded plugin: its properties, its default stream (all
// tensor ops of this device are ordered on it), and a caching allocator so
// that steady-state op calls never reach the plugin's Memory_Allocate/Free.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "graph_record.h"
#include "plugin.h"

namespace dk {

struct DeviceProperties {
  std::string name;
  uint64_t total_memory = 0, capabilities = 0, dtypes = 0;
  size_t alignment = 0;
};

struct CacheStats {
  uint64_t allocated_bytes = 0;  // blocks handed out to live storages
  uint64_t cached_bytes = 0;     // blocks parked in the free lists
  uint64_t plugin_alloc_calls = 0, plugin_free_calls = 0, cache_hits = 0;
};

// Incremented in every child process fork() creates (pthread_atfork), so a
// Device can tell that it was used by the parent, whose plugin threads and
// stream workers the child does not have.
uint64_t fork_generation();

class Device {
 public:
  Device(Plugin* plugin, int index);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  Plugin* plugin() const { return plugin_; }
  const DK_Api* api() const { return plugin_->api(); }
  int index() const { return index_; }
  const std::string& name() const { return name_; }  // "cpu:0"
  const DeviceProperties& properties();

  // The stream every tensor op of this device is enqueued on (created lazily,
  // because a plugin may spawn a thread per stream).
  DK_Stream* default_stream();
  void synchronize();  // Device_Synchronize
  // Memcpy on `stream` (NULL: synchronous). Host buffers of a stream copy
  // must stay valid until the stream passes it.
  void memcpy(DK_CopyKind kind, void* dst, const void* src, size_t n, DK_Stream* stream);
  void synchronize(DK_Stream* stream);  // Stream_Synchronize

  // Caching allocator. Blocks are reused only by work on the default stream,
  // which is ordered after every earlier use, so a freed block needs no event.
  void* allocate(size_t nbytes, size_t* block_size);
  void release(void* ptr, size_t block_size) noexcept;
  // Takes the cached blocks out of the cache first, then synchronises the
  // device, then frees them: every kernel that used one of those blocks was
  // enqueued before its block was released, so before the synchronize, and
  // has finished. Safe while other threads run ops and release blocks.
  void empty_cache();
  CacheStats cache_stats();
  // What allocate() runs when the plugin is out of memory, before its one
  // retry: frees what only a garbage collection would free (tensors kept
  // alive by reference cycles). Set once by the Python module (gc.collect()
  // under the GIL, see module.cpp); a null hook skips it. Must not throw.
  static void set_reclaim_hook(void (*hook)());

  // Graph capture (graphs_py.cpp). While a capture is open, every block
  // allocate() hands out is pinned to the capture's pool: the graph's
  // launches write it again on every replay, so until the graph is
  // destroyed a released pinned block goes back to that pool (reused only by
  // later allocations of the same capture, in the same order on replay),
  // never to the shared cache. Host copies and synchronisations of a
  // capturing device are refused before they reach the plugin.
  struct GraphPool {
    std::unordered_map<void*, size_t> owned;                 // block -> size
    std::unordered_map<size_t, std::vector<void*>> free;     // released blocks
    std::vector<std::shared_ptr<const void>> keepalive;      // e.g. cached constants read
  };
  // `recording`: the SDK records the capture's device work itself (see
  // graph_record.h) instead of the plugin's graphs part; NULL: the plugin does.
  // `shadow` (with a NULL `recording`: mode "auto" on a plugin with the
  // graphs part): the SDK also records every call it issues into the
  // plugin's capture, so that the graph can become a recorded one when the
  // capture holds random launches (a native graph cannot patch their Philox
  // counters per replay; graphs_py.cpp decides when the capture ends).
  void begin_capture(std::shared_ptr<GraphPool> pool, std::shared_ptr<Recording> recording = {},
                     std::shared_ptr<Recording> shadow = {});
  void end_capture();
  // The open capture's SDK-side recording, or NULL (no capture, or the
  // plugin records it). One relaxed load: launch() asks on every op.
  Recording* recording() const { return recording_ptr_.load(std::memory_order_relaxed); }
  // The open native capture's shadow recording (see begin_capture), or NULL.
  // Asked only while capturing(): every call issued into the plugin's capture
  // is added to it too.
  Recording* shadow() const { return shadow_ptr_.load(std::memory_order_relaxed); }
  // Calls the SDK issued into the open capture (kernels, fused kernels,
  // device-to-device copies); reset by begin_capture.
  void count_captured_call() { captured_calls_.fetch_add(1, std::memory_order_relaxed); }
  uint64_t captured_calls() const { return captured_calls_.load(std::memory_order_relaxed); }
  bool capturing() const { return capturing_.load(std::memory_order_relaxed); }
  // Keeps `object` alive as long as the open capture's graph (no-op if none).
  void keep_for_capture(std::shared_ptr<const void> object);
  // Unpins the pool's blocks: released ones join the shared cache, the ones
  // tensors still hold go there when released. The caller has ordered every
  // launch of the graph before later default-stream work.
  void drop_pool(GraphPool& pool) noexcept;
  // Throws InvalidArgument naming `call` when a capture is open.
  void check_not_capturing(const std::string& call) const;

  // Fork safety. A device used (stream or memory) in a parent process is
  // refused in a forked child with an error naming the 'spawn' start method:
  // the plugin's worker threads did not survive fork(), so any wait would hang.
  // Every entry point that reaches the plugin calls this first.
  void check_fork() const {
    const uint64_t g = used_in_generation_.load(std::memory_order_relaxed);
    if (g != kUnused && g != fork_generation()) forked_error();
  }
  // check_fork(), then remember that this process used the device.
  void begin_use() {
    check_fork();
    mark_used();
  }
  bool stale_after_fork() const {
    const uint64_t g = used_in_generation_.load(std::memory_order_relaxed);
    return g != kUnused && g != fork_generation();
  }

  // Failed work. The device API reports an asynchronous kernel error at the
  // next synchronize without saying which kernel failed, so every storage a
  // kernel wrote since the last clean synchronize (one "epoch") is marked
  // failed with that error, and reading it or computing from it raises the
  // same error again instead of returning undefined contents.
  uint64_t epoch() const { return epoch_.load(std::memory_order_relaxed); }
  bool has_failures() const { return has_failures_.load(std::memory_order_relaxed); }
  void check_not_failed(uint64_t written_epoch, const std::string& what) const;

  // Raw plugin allocation (no cache); throws Error(Device) on failure.
  void* raw_alloc(size_t nbytes);
  void raw_free(void* ptr);

  // Error context naming plugin, device and call.
  std::string ctx(const char* call) const { return "(device " + name_ + ") " + call; }
  void check(DK_Error* e, const char* call) const { plugin_->check(e, ctx(call)); }
  // A create call (Stream_Create, Event_Create) that succeeded must have
  // produced an object: Error(PluginContract) naming `field` otherwise.
  void check_created(const void* object, const char* call, const char* field,
                     const char* where) const;

 private:
  static constexpr uint64_t kUnused = ~uint64_t(0);
  void mark_used() {
    if (used_in_generation_.load(std::memory_order_relaxed) == kUnused)
      used_in_generation_.store(fork_generation(), std::memory_order_relaxed);
  }
  [[noreturn]] void forked_error() const;
  void pin_locked(void* p, size_t block_size);  // caller holds mu_
  // Runs a synchronizing plugin call; an error it returns fails the epoch.
  template <class Call> void synchronizing(Call call);

  std::atomic<uint64_t> used_in_generation_{kUnused};
  std::atomic<uint64_t> epoch_{1};  // 0: a storage no kernel has written
  std::atomic<bool> has_failures_{false};
  mutable std::mutex fail_mu_;
  std::map<uint64_t, Error> failed_epochs_;  // epoch -> the error it ended with

  Plugin* plugin_;  // plugins are never unloaded (see Plugin::handle_)
  int index_;
  std::string name_;
  std::once_flag props_once_, stream_once_;
  DeviceProperties props_;
  // Atomic: synchronize(stream) compares against it while another thread may
  // be creating it inside default_stream()'s call_once.
  std::atomic<DK_Stream*> stream_{nullptr};

  std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  std::atomic<bool> capturing_{false};
  std::shared_ptr<GraphPool> capture_pool_;                            // under mu_
  std::shared_ptr<Recording> recording_;                               // under mu_
  std::atomic<Recording*> recording_ptr_{nullptr};                     // recording_.get()
  std::shared_ptr<Recording> shadow_;                                  // under mu_
  std::atomic<Recording*> shadow_ptr_{nullptr};                        // shadow_.get()
  std::atomic<uint64_t> captured_calls_{0};
  std::unordered_map<void*, std::shared_ptr<GraphPool>> pinned_;       // under mu_
  CacheStats stats_;
};

}  // namespace dk
