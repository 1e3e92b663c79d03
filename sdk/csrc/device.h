// One device of a loaded plugin: its properties, its default stream (all
// tensor ops of this device are ordered on it), and a caching allocator so
// that steady-state op calls never reach the plugin's Memory_Allocate/Free.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

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
  void empty_cache();  // synchronises, then returns every cached block
  CacheStats cache_stats();

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
  Plugin* plugin_;  // plugins are never unloaded (see Plugin::handle_)
  int index_;
  std::string name_;
  std::once_flag props_once_, stream_once_;
  DeviceProperties props_;
  DK_Stream* stream_ = nullptr;

  std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  CacheStats stats_;
};

}  // namespace dk
