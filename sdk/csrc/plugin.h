// Loading one plugin library: dlopen, the entry symbol, fail-closed version
// and struct_size checks, Initialize (once per loaded library), checks on what
// the plugin reports, and thin wrappers that turn a returned DK_Error* into a
// dk::Error carrying the plugin's own message verbatim.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "devicekit/device_api.h"
#include "errors.h"

namespace dk {

class Device;

struct PluginInfo { std::string name, vendor, version, attributes; };

class Plugin {
 public:
  // Throws Error(PluginLoad | PluginVersion) with the real cause. `path` is a
  // file-system path, never a linker search name ("libx.so" is ./libx.so).
  // A library is identified by its dlopen handle, i.e. the loaded object
  // (two paths or hard links to one file are one library): Plugin_Initialize
  // runs at most once per library and process, and loading it again returns
  // the same Plugin, or the same error when Initialize or a later step failed.
  static std::shared_ptr<Plugin> load(const std::string& path);

  // The Plugin (or the load error) of the library at `path` if this process
  // already loaded it, by whatever path; null when it has not. Opens nothing.
  static std::shared_ptr<Plugin> find_loaded(const std::string& path);

  // The Plugin that owns `p` (for Device.plugin); null if none.
  static std::shared_ptr<Plugin> owner_of(const Plugin* p);

  // The probe subprocess (devicekit._plugins.probe) passes a file descriptor here;
  // load() then writes "step <call>\n" to it before each plugin call, so a
  // crash or hang can be attributed to the call that caused it. -1: off.
  static void set_trace_fd(int fd);

  const DK_Api* api() const { return api_; }
  const PluginInfo& info() const { return info_; }
  const std::string& path() const { return path_; }
  // How errors name the plugin: its name once known, else its path.
  const std::string& who() const { return info_.name.empty() ? path_ : info_.name; }
  int api_major() const { return api_->api_major; }
  int api_minor() const { return api_->api_minor; }
  const std::vector<std::shared_ptr<Device>>& devices() const { return devices_; }

  // Kernel lookup honouring the table's num_ops (older plugins have fewer).
  DK_KernelFn* kernel(DK_OpId op) const;
  uint64_t kernel_dtypes(DK_OpId op) const;
  uint32_t kernel_caps(DK_OpId op) const;

  // Fused kernels registered for `op` (a DK_FusedOpId), in table order; empty
  // for plugins older than 1.2 or without a table. Validated at load.
  const std::vector<const DK_FusedKernel*>& fused_kernels(int op) const;
  int num_fused_kernels() const;

  // The optional parts found on the extension chain (device API 1.5+),
  // validated at load; null when the plugin has no such part (always for
  // plugins older than 1.5). Constant and owned by the plugin.
  const DK_Collectives* collectives() const { return collectives_; }
  const DK_Graphs* graphs() const { return graphs_; }

  // If `err` is non-NULL: read its code and message, free it, and throw
  // Error(Device) whose text is "<context>: [<CODE>] <plugin message>".
  void check(DK_Error* err, const std::string& context) const;

 private:
  Plugin() = default;
  void initialize_and_describe();  // Initialize, GetInfo, Device_Count (checked)
  std::string path_;
  void* handle_ = nullptr;  // never dlclose'd: plugin threads may outlive us
  const DK_Api* api_ = nullptr;
  PluginInfo info_;
  std::vector<std::shared_ptr<Device>> devices_;
  std::vector<std::vector<const DK_FusedKernel*>> fused_;  // [DK_FUSED_OP_COUNT]
  const DK_Collectives* collectives_ = nullptr;
  const DK_Graphs* graphs_ = nullptr;
};

// Fill the struct_size field of an args struct declared with
// DK_DEFINE_STRUCT_SIZE: `auto a = args<DK_Memcpy_Args>(DK_Memcpy_Args_STRUCT_SIZE);`
template <typename T> inline T make_args(size_t struct_size) {
  T a{};
  a.struct_size = struct_size;
  return a;
}
#define DK_ARGS(type) ::dk::make_args<type>(type##_STRUCT_SIZE)

}  // namespace dk
