#include "plugin.h"

#include <dlfcn.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <mutex>
#include <utility>

#include "boundary.h"
#include "device.h"

namespace dk {

namespace {

// Every library this process dlopen'ed and got as far as Plugin_Initialize,
// keyed by the dlopen handle (the loaded object: dlopen returns the same
// handle for a second path, symlink or hard link to one file). Guarded by
// g_load_mu; entries live for the process (plugins are never unloaded).
struct LoadedLibrary {
  void* handle;
  std::shared_ptr<Plugin> plugin;  // null when loading failed at or after Initialize
  std::string error;               // then: that failure, repeated to later callers
};
std::mutex g_load_mu;
std::vector<LoadedLibrary>& loaded_libraries() {
  static auto* v = new std::vector<LoadedLibrary>();  // never destroyed: see Plugin::handle_
  return *v;
}

int g_trace_fd = -1;

// Written with write(2), unbuffered, so the probe's parent sees the step even
// if the very next instruction kills the process.
void trace(const char* step) {
  if (g_trace_fd < 0) return;
  const std::string line = std::string("step ") + step + "\n";
  ssize_t r = ::write(g_trace_fd, line.data(), line.size());
  (void)r;  // a lost trace line only makes a crash report less precise
}

// A DEVICEKIT_PLUGIN_PATH entry or load_plugin() argument is a file, never a
// linker search name: dlopen("libx.so") would search LD_LIBRARY_PATH and the
// system folders instead of the current one. An absolute path avoids that.
std::string file_system_path(const std::string& path) {
  if (path.empty() || path[0] == '/') return path;
  char cwd[PATH_MAX];
  if (::getcwd(cwd, sizeof cwd) == nullptr) return "./" + path;
  return std::string(cwd) + "/" + path;
}

// DK_Api's size at each minor of major 1 (rule 4 in device_api.h). A plugin
// claiming 1.m must be at least kApiSizeByMinor[m] bytes. The rows come from
// the spec's "versions" (device_api/tools/gen_ops.py).
constexpr size_t kApiSizeByMinor[] = {
#include "api_size_by_minor.inc"
};
constexpr int kKnownMinors = sizeof(kApiSizeByMinor) / sizeof(kApiSizeByMinor[0]);
static_assert(kKnownMinors == DK_API_MINOR + 1, "add the new minor's DK_Api size");

// The smallest table from which the version fields can be read at all.
constexpr size_t kVersionFieldsEnd = DK_STRUCT_SIZE(DK_Api, api_minor);

[[noreturn]] void load_error(const std::string& path, const std::string& why) {
  throw Error(ErrorKind::PluginLoad, "cannot load plugin '" + path + "': " + why);
}

[[noreturn]] void version_error(const std::string& path, const std::string& why) {
  throw Error(ErrorKind::PluginVersion, "cannot load plugin '" + path + "': " + why);
}

std::string version_str(int major, int minor) {
  return std::to_string(major) + "." + std::to_string(minor);
}

void check_version(const std::string& path, const DK_Api* api) {
  const std::string sdk = version_str(DK_API_MAJOR, DK_API_MINOR);
  if (api->struct_size < kVersionFieldsEnd) {
    version_error(path, "its DK_Api table is " + std::to_string(api->struct_size) +
                            " bytes, smaller than the " + std::to_string(kVersionFieldsEnd) +
                            "-byte prefix every device API version has; the library is "
                            "corrupt or was not built against devicekit/device_api.h");
  }
  const int major = api->api_major, minor = api->api_minor;
  const std::string theirs = version_str(major, minor);
  if (major > DK_API_MAJOR) {
    version_error(path, "it was built for device API " + theirs +
                            ", which is newer than this DeviceKit's device API " + sdk +
                            "; install a devicekit release that supports device API " +
                            std::to_string(major) +
                            ".x, or rebuild the plugin against "
                            "device API " +
                            std::to_string(DK_API_MAJOR) + ".x");
  }
  if (major < DK_API_MAJOR || major < 1 || minor < 0) {
    version_error(path, "it was built for device API " + theirs +
                            ", which is older than this DeviceKit's device API " + sdk +
                            " (a major version apart); rebuild the plugin against the "
                            "device API " +
                            std::to_string(DK_API_MAJOR) +
                            ".x header that devicekit ships (devicekit --include-dir), "
                            "or install an older devicekit");
  }
  if (minor > DK_API_MINOR) {
    version_error(path, "it was built for device API " + theirs +
                            ", which is newer than this DeviceKit's device API " + sdk +
                            "; upgrade devicekit to a release that supports device API " + theirs +
                            " (pip install -U devicekit)");
  }
  const size_t need = kApiSizeByMinor[minor];
  if (api->struct_size < need) {
    version_error(path, "its DK_Api table is " + std::to_string(api->struct_size) +
                            " bytes, but device API " + theirs + " requires " +
                            std::to_string(need) +
                            " bytes (struct_size mismatch: the plugin was compiled against "
                            "a header that does not match the version it claims); rebuild "
                            "it against the device API " +
                            theirs + " header");
  }
}

// Every function of API 1.0 is mandatory: a NULL entry is refused at load
// rather than discovered as a crash later.
void check_functions(const std::string& path, const DK_Api* api) {
  // clang-format off: a table of the required entries, one row per line
#define DK_REQUIRE(fn) \
  if (api->fn == nullptr) load_error(path, "DK_Api." #fn " is NULL; every device API 1.0 function is required");
  DK_REQUIRE(Error_Destroy) DK_REQUIRE(Error_Message) DK_REQUIRE(Error_GetCode)
  DK_REQUIRE(Plugin_Initialize) DK_REQUIRE(Plugin_GetInfo)
  DK_REQUIRE(Device_Count) DK_REQUIRE(Device_GetProperties) DK_REQUIRE(Device_MemoryStats)
  DK_REQUIRE(Device_Synchronize) DK_REQUIRE(Memory_Allocate) DK_REQUIRE(Memory_Free)
  DK_REQUIRE(Memcpy) DK_REQUIRE(Stream_Create) DK_REQUIRE(Stream_Destroy)
  DK_REQUIRE(Stream_Synchronize) DK_REQUIRE(Stream_Query) DK_REQUIRE(Stream_WaitEvent)
  DK_REQUIRE(Event_Create) DK_REQUIRE(Event_Destroy) DK_REQUIRE(Event_Record)
  DK_REQUIRE(Event_Query) DK_REQUIRE(Event_Synchronize) DK_REQUIRE(Event_ElapsedTime)
#undef DK_REQUIRE
      // clang-format on
      const DK_KernelTable* kt = api->kernels;
  if (kt == nullptr)
    load_error(path, "DK_Api.kernels is NULL; pass a table with num_ops = 0 instead");
  if (kt->struct_size < DK_KernelTable_STRUCT_SIZE) {
    version_error(path, "its DK_KernelTable is " + std::to_string(kt->struct_size) +
                            " bytes, expected at least " +
                            std::to_string(DK_KernelTable_STRUCT_SIZE));
  }
  if (kt->num_ops < 0 || (kt->num_ops > 0 && (kt->kernels == nullptr || kt->dtypes == nullptr))) {
    load_error(path, "DK_KernelTable has num_ops=" + std::to_string(kt->num_ops) +
                         " but NULL kernels/dtypes arrays");
  }
}

// A free-text string from Plugin_GetInfo: never NULL (the header's rule),
// bounded, and decoded with replacement (it reaches Python as a str).
std::string info_text(const std::string& who, const char* field, const char* value) {
  if (value == nullptr) {
    contract_error(who, "Plugin_GetInfo", field, "NULL",
                   "a NUL-terminated UTF-8 string, never NULL (empty when unknown)",
                   std::string("DK_Plugin_GetInfo_Args.") + field);
  }
  return bounded_text(value);
}

// Plugin_GetInfo's name becomes device names ("acme:0"): it must be a valid
// identifier, or the plugin cannot be addressed.
std::string checked_name(const std::string& path, const char* name) {
  const size_t n = name ? strnlen(name, kMaxInfoStringBytes) : 0;
  if (!is_identifier(name, n)) {
    contract_error(path, "Plugin_GetInfo", "name", printable(name, n),
                   "a non-empty [a-z][a-z0-9_]* identifier (devices are addressed as "
                   "'<name>:<index>')",
                   "DK_Plugin_GetInfo_Args.name");
  }
  return std::string(name, n);
}

// The ops of each minor of major 1, from the spec (op_counts_by_minor.inc);
// a minor that added none has the previous minor's.
struct OpCounts { int base, fused; };
constexpr OpCounts kOpCountsByMinor[] = {
#include "op_counts_by_minor.inc"
};
constexpr int kOpMinors = sizeof(kOpCountsByMinor) / sizeof(kOpCountsByMinor[0]);
static_assert(kOpMinors == DK_OPS_API_MINOR + 1, "regenerate op_counts_by_minor.inc");

// Fused ops per minor of major 1 (a 1.m plugin may only register those).
int fused_op_count(int minor) {
  return kOpCountsByMinor[minor < kOpMinors ? minor : kOpMinors - 1].fused;
}

bool valid_kernel_name(const char* s) {
  if (s == nullptr || *s == '\0') return false;
  for (; *s; ++s) {
    const char c = *s;
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.')) return false;
  }
  return true;
}

// The fused-kernel registry (since 1.2), checked entry by entry so that a
// malformed table is a load error naming the entry, never a crash at the
// first composite call. Returns the kernels grouped by op, in table order.
std::vector<std::vector<const DK_FusedKernel*>> check_fused(const std::string& path,
                                                            const DK_Api* api) {
  std::vector<std::vector<const DK_FusedKernel*>> by_op(DK_FUSED_OP_COUNT);
  if (api->api_minor < 2) return by_op;  // the field does not exist in its table
  const DK_FusedKernelTable* t = api->fused_kernels;
  if (t == nullptr) return by_op;
  if (t->struct_size < DK_FusedKernelTable_STRUCT_SIZE) {
    version_error(path, "its DK_FusedKernelTable is " + std::to_string(t->struct_size) +
                            " bytes, expected at least " +
                            std::to_string(DK_FusedKernelTable_STRUCT_SIZE) +
                            "; rebuild it against the device API header it claims");
  }
  if (t->num_kernels < 0 || (t->num_kernels > 0 && t->kernels == nullptr)) {
    load_error(path, "DK_FusedKernelTable has num_kernels=" + std::to_string(t->num_kernels) +
                         (t->num_kernels < 0 ? "; expected >= 0" : " but a NULL kernels array"));
  }
  const int known = fused_op_count(api->api_minor);
  std::vector<std::string> names;
  for (int i = 0; i < t->num_kernels; ++i) {
    const DK_FusedKernel* k = t->kernels[i];
    const std::string where = "DK_FusedKernelTable.kernels[" + std::to_string(i) + "]";
    if (k == nullptr) load_error(path, where + " is NULL");
    if (k->struct_size < DK_FusedKernel_STRUCT_SIZE) {
      version_error(path, where + " has struct_size " + std::to_string(k->struct_size) +
                              ", expected at least " + std::to_string(DK_FusedKernel_STRUCT_SIZE) +
                              " (DK_FusedKernel_STRUCT_SIZE); set it with that macro");
    }
    if (!valid_kernel_name(k->name)) {
      load_error(path, where + " has name " +
                           (k->name ? "'" + std::string(k->name) + "'" : "NULL") +
                           "; expected a non-empty [a-z0-9_.]+ name");
    }
    const std::string named = where + " ('" + k->name + "')";
    if (k->op < 0 || k->op >= known) {
      load_error(path, named + " has op " + std::to_string(k->op) +
                           ", which is not a DK_FusedOpId of device API 1." +
                           std::to_string(api->api_minor) + " (expected 0.." +
                           std::to_string(known - 1) + ")");
    }
    if (k->supports == nullptr || k->launch == nullptr) {
      load_error(path, named + " has a NULL " + (k->supports ? "launch" : "supports") +
                           " function; both are required");
    }
    for (const std::string& n : names) {
      if (n == k->name) load_error(path, named + ": the name is used twice; names must be unique");
    }
    names.push_back(k->name);
    by_op[k->op].push_back(k);
  }
  return by_op;
}

// The optional parts on the extension chain (since 1.5). Each known type is
// checked as the fused registry is, so a malformed part is a load error that
// names it rather than a crash at its first call; unknown types are skipped
// (a newer minor's parts). The walk is bounded and refuses a loop.
struct Parts {
  const DK_Collectives* collectives = nullptr;
  const DK_Graphs* graphs = nullptr;
};

constexpr int kMaxExtensions = 64;

void require_ext_fn(const std::string& path, const void* fn, const char* part, const char* name) {
  if (fn == nullptr) {
    load_error(path, std::string(part) + "." + name +
                         " is NULL; every function of a part the plugin lists is required (leave "
                         "the part off the extension chain to report it absent)");
  }
}

void check_ext_size(const std::string& path, const DK_Extension_Base* e, const char* type,
                    size_t need) {
  if (e->struct_size < need) {
    version_error(path, std::string("its ") + type + " extension is " +
                            std::to_string(e->struct_size) + " bytes, expected at least " +
                            std::to_string(need) + " (" + type +
                            "_STRUCT_SIZE); set base.struct_size with that macro");
  }
}

Parts check_extensions(const std::string& path, const DK_Api* api) {
  Parts parts;
  if (api->api_minor < 5) return parts;  // no part existed: report them absent
  std::vector<const DK_Extension_Base*> seen;
  for (const DK_Extension_Base* e = api->extension_start; e != nullptr; e = e->next) {
    for (size_t i = 0; i < seen.size(); ++i) {
      if (seen[i] == e) {
        load_error(path, "DK_Api.extension_start: the extension list loops back to entry " +
                             std::to_string(i) + " (type " + std::to_string(e->type) +
                             "); end it with next = NULL");
      }
    }
    if (int(seen.size()) == kMaxExtensions) {
      load_error(path, "DK_Api.extension_start lists more than " + std::to_string(kMaxExtensions) +
                           " extensions; end it with next = NULL");
    }
    seen.push_back(e);
    if (e->struct_size < DK_Extension_Base_STRUCT_SIZE) {
      version_error(path, "extension " + std::to_string(seen.size() - 1) + " has struct_size " +
                              std::to_string(e->struct_size) + ", smaller than DK_Extension_Base");
    }
    if (e->type == DK_EXTENSION_COLLECTIVES) {
      if (parts.collectives) load_error(path, "the DK_Collectives extension is listed twice");
      check_ext_size(path, e, "DK_Collectives", DK_Collectives_STRUCT_SIZE);
      auto* c = reinterpret_cast<const DK_Collectives*>(e);
      const std::pair<const void*, const char*> fns[] = {
          {reinterpret_cast<const void*>(c->Comm_GetUniqueId), "Comm_GetUniqueId"},
          {reinterpret_cast<const void*>(c->Comm_Init), "Comm_Init"},
          {reinterpret_cast<const void*>(c->Comm_Destroy), "Comm_Destroy"},
          {reinterpret_cast<const void*>(c->Comm_Abort), "Comm_Abort"},
          {reinterpret_cast<const void*>(c->Coll_Run), "Coll_Run"},
          {reinterpret_cast<const void*>(c->Coll_Group), "Coll_Group"}};
      for (const auto& f : fns) require_ext_fn(path, f.first, "DK_Collectives", f.second);
      parts.collectives = c;
    } else if (e->type == DK_EXTENSION_GRAPHS) {
      if (parts.graphs) load_error(path, "the DK_Graphs extension is listed twice");
      check_ext_size(path, e, "DK_Graphs", DK_Graphs_STRUCT_SIZE);
      auto* g = reinterpret_cast<const DK_Graphs*>(e);
      const std::pair<const void*, const char*> fns[] = {
          {reinterpret_cast<const void*>(g->Graph_Capture), "Graph_Capture"},
          {reinterpret_cast<const void*>(g->Graph_Launch), "Graph_Launch"},
          {reinterpret_cast<const void*>(g->Graph_Destroy), "Graph_Destroy"}};
      for (const auto& f : fns) require_ext_fn(path, f.first, "DK_Graphs", f.second);
      parts.graphs = g;
    }
    // Any other type: a part this DeviceKit does not know; skipped.
  }
  return parts;
}

}  // namespace

std::shared_ptr<Plugin> Plugin::load(const std::string& given_path) {
  const std::string path = file_system_path(given_path);
  std::lock_guard<std::mutex> lock(g_load_mu);
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) load_error(path, "no such file");
  if (S_ISDIR(st.st_mode)) load_error(path, "it is a directory, not a shared library");

  // RTLD_LOCAL: two plugins may define the same internal symbols; RTLD_NOW:
  // an unresolved symbol is reported here, with dlerror's text, not at first call.
  trace("dlopen");
  dlerror();
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    load_error(path, std::string("dlopen failed: ") + (why ? why : "unknown error"));
  }
  for (const LoadedLibrary& lib : loaded_libraries()) {
    if (lib.handle != handle) continue;
    dlclose(handle);  // drops only the reference this dlopen added
    if (lib.plugin) return lib.plugin;
    throw Error(ErrorKind::PluginLoad, lib.error);
  }
  dlerror();
  void* sym = dlsym(handle, DK_ENTRY_SYMBOL);
  if (sym == nullptr) {
    const char* err = dlerror();
    const std::string why = err ? err : "";  // copy: dlclose invalidates dlerror's text
    dlclose(handle);
    load_error(path, "it does not export the entry symbol " DK_ENTRY_SYMBOL
                     " (is it a DeviceKit plugin? is the symbol hidden by a version "
                     "script?): " +
                         why);
  }
  trace(DK_ENTRY_SYMBOL);
  const DK_Api* api = reinterpret_cast<DK_GetApi_Fn*>(sym)();
  if (api == nullptr) load_error(path, DK_ENTRY_SYMBOL "() returned NULL");
  trace("version checks");
  check_version(path, api);
  check_functions(path, api);
  auto fused = check_fused(path, api);
  const Parts parts = check_extensions(path, api);

  std::shared_ptr<Plugin> p(new Plugin());
  p->path_ = path;
  p->handle_ = handle;
  p->api_ = api;
  p->fused_ = std::move(fused);
  p->collectives_ = parts.collectives;
  p->graphs_ = parts.graphs;
  try {
    p->initialize_and_describe();
  } catch (const std::exception& e) {
    // Initialize has run: this library's outcome is settled for the process.
    // The plugin's own words, verbatim, as the load error.
    const std::string msg = "cannot load plugin '" + path + "': " + e.what();
    loaded_libraries().push_back({handle, nullptr, msg});
    throw Error(ErrorKind::PluginLoad, msg);
  }
  loaded_libraries().push_back({handle, p, std::string()});
  return p;
}

void Plugin::initialize_and_describe() {
  auto init = DK_ARGS(DK_Plugin_Initialize_Args);
  init.sdk_api_major = DK_API_MAJOR;
  init.sdk_api_minor = DK_API_MINOR;
  trace("Plugin_Initialize");
  check(api_->Plugin_Initialize(&init), "Plugin_Initialize");

  auto info = DK_ARGS(DK_Plugin_GetInfo_Args);
  trace("Plugin_GetInfo");
  check(api_->Plugin_GetInfo(&info), "Plugin_GetInfo");
  const std::string name = checked_name(path_, info.name);
  info_ = {name, info_text(name, "vendor", info.vendor), info_text(name, "version", info.version),
           info_text(name, "attributes", info.attributes)};

  auto count = DK_ARGS(DK_Device_Count_Args);
  trace("Device_Count");
  check(api_->Device_Count(&count), "Device_Count");
  if (count.count < 0 || count.count > kMaxDevicesPerPlugin) {
    contract_error(who(), "Device_Count", "count", std::to_string(count.count),
                   "0 <= count <= " + std::to_string(kMaxDevicesPerPlugin),
                   "DK_Device_Count_Args.count");
  }
  for (int i = 0; i < count.count; ++i) { devices_.push_back(std::make_shared<Device>(this, i)); }
}

std::shared_ptr<Plugin> Plugin::find_loaded(const std::string& given_path) {
  const std::string path = file_system_path(given_path);
  std::lock_guard<std::mutex> lock(g_load_mu);
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (handle == nullptr) return nullptr;  // not in this process
  dlclose(handle);  // RTLD_NOLOAD still added a reference
  for (const LoadedLibrary& lib : loaded_libraries()) {
    if (lib.handle != handle) continue;
    if (lib.plugin) return lib.plugin;
    throw Error(ErrorKind::PluginLoad, lib.error);
  }
  return nullptr;  // mapped by someone else (ctypes, a dependency): never initialised by us
}

std::shared_ptr<Plugin> Plugin::owner_of(const Plugin* p) {
  std::lock_guard<std::mutex> lock(g_load_mu);
  for (const LoadedLibrary& lib : loaded_libraries()) {
    if (lib.plugin.get() == p) return lib.plugin;
  }
  return nullptr;
}

void Plugin::set_trace_fd(int fd) { g_trace_fd = fd; }

DK_KernelFn* Plugin::kernel(DK_OpId op) const {
  const DK_KernelTable* kt = api_->kernels;
  return (op >= 0 && op < kt->num_ops) ? kt->kernels[op] : nullptr;
}

uint64_t Plugin::kernel_dtypes(DK_OpId op) const {
  return kernel(op) ? api_->kernels->dtypes[op] : 0;
}

uint32_t Plugin::kernel_caps(DK_OpId op) const {
  const DK_KernelTable* kt = api_->kernels;
  return (kernel(op) && kt->caps) ? kt->caps[op] : 0;
}

const std::vector<const DK_FusedKernel*>& Plugin::fused_kernels(int op) const {
  static const std::vector<const DK_FusedKernel*> kNone;
  return (op >= 0 && op < int(fused_.size())) ? fused_[op] : kNone;
}

int Plugin::num_fused_kernels() const {
  int n = 0;
  for (const auto& v : fused_) n += int(v.size());
  return n;
}

void Plugin::check(DK_Error* err, const std::string& context) const {
  if (err == nullptr) return;
  const PluginErrorText e = take_plugin_error(api_, err);
  throw Error(ErrorKind::Device,
              "plugin '" + who() + "' " + context + " failed [" + error_code_label(e.code) +
                  "]: " + e.message,
              e.code);
}

}  // namespace dk
