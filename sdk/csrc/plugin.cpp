#include "plugin.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <mutex>
#include <sstream>

#include "device.h"

namespace dk {

const char* error_code_name(int code) {
  switch (code) {
    case DK_ERROR_INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case DK_ERROR_OUT_OF_MEMORY: return "OUT_OF_MEMORY";
    case DK_ERROR_UNIMPLEMENTED: return "UNIMPLEMENTED";
    case DK_ERROR_INTERNAL: return "INTERNAL";
    case DK_ERROR_UNAVAILABLE: return "UNAVAILABLE";
    case DK_ERROR_OUT_OF_RANGE: return "OUT_OF_RANGE";
    case DK_ERROR_FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    default: return "UNKNOWN";
  }
}

namespace {

// DK_Api's size at each minor of major 1 (rule 4 in device_api.h). A plugin
// claiming 1.m must be at least kApiSizeByMinor[m] bytes.
constexpr size_t kApiSizeByMinor[] = {DK_Api_STRUCT_SIZE_1_0, DK_Api_STRUCT_SIZE_1_1,
                                      DK_Api_STRUCT_SIZE_1_2};
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
                            std::to_string(major) + ".x, or rebuild the plugin against "
                            "device API " + std::to_string(DK_API_MAJOR) + ".x");
  }
  if (major < DK_API_MAJOR || major < 1 || minor < 0) {
    version_error(path, "it was built for device API " + theirs +
                            ", which is older than this DeviceKit's device API " + sdk +
                            " (a major version apart); rebuild the plugin against the "
                            "device API " + std::to_string(DK_API_MAJOR) +
                            ".x header that devicekit ships (devicekit --include-dir), "
                            "or install an older devicekit");
  }
  if (minor > DK_API_MINOR) {
    version_error(path, "it was built for device API " + theirs +
                            ", which is newer than this DeviceKit's device API " + sdk +
                            "; upgrade devicekit to a release that supports device API " +
                            theirs + " (pip install -U devicekit)");
  }
  const size_t need = kApiSizeByMinor[minor];
  if (api->struct_size < need) {
    version_error(path, "its DK_Api table is " + std::to_string(api->struct_size) +
                            " bytes, but device API " + theirs + " requires " +
                            std::to_string(need) +
                            " bytes (struct_size mismatch: the plugin was compiled against "
                            "a header that does not match the version it claims); rebuild "
                            "it against the device API " + theirs + " header");
  }
}

// Every function of API 1.0 is mandatory: a NULL entry is refused at load
// rather than discovered as a crash later.
void check_functions(const std::string& path, const DK_Api* api) {
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
  const DK_KernelTable* kt = api->kernels;
  if (kt == nullptr) load_error(path, "DK_Api.kernels is NULL; pass a table with num_ops = 0 instead");
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

std::string safe_str(const char* s) { return s ? std::string(s) : std::string(); }

// Fused ops per minor of major 1 (a 1.m plugin may only register those).
int fused_op_count(int minor) { return minor >= 2 ? DK_FUSED_OP_COUNT_1_2 : 0; }

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
  std::vector<std::vector<const DK_FusedKernel*>> by_op(DK_FUSED_OP_COUNT_1_2);
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
      load_error(path, where + " has name " + (k->name ? "'" + std::string(k->name) + "'" : "NULL") +
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

}  // namespace

std::shared_ptr<Plugin> Plugin::load(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) load_error(path, "no such file");
  if (S_ISDIR(st.st_mode)) load_error(path, "it is a directory, not a shared library");

  // RTLD_LOCAL: two plugins may define the same internal symbols; RTLD_NOW:
  // an unresolved symbol is reported here, with dlerror's text, not at first call.
  dlerror();
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    load_error(path, std::string("dlopen failed: ") + (why ? why : "unknown error"));
  }
  dlerror();
  void* sym = dlsym(handle, DK_ENTRY_SYMBOL);
  if (sym == nullptr) {
    const char* err = dlerror();
    const std::string why = err ? err : "";  // copy: dlclose invalidates dlerror's text
    dlclose(handle);
    load_error(path, "it does not export the entry symbol " DK_ENTRY_SYMBOL
                     " (is it a DeviceKit plugin? is the symbol hidden by a version "
                     "script?): " + why);
  }
  const DK_Api* api = reinterpret_cast<DK_GetApi_Fn*>(sym)();
  if (api == nullptr) load_error(path, DK_ENTRY_SYMBOL "() returned NULL");
  check_version(path, api);
  check_functions(path, api);
  auto fused = check_fused(path, api);

  std::shared_ptr<Plugin> p(new Plugin());
  p->path_ = path;
  p->handle_ = handle;
  p->api_ = api;
  p->fused_ = std::move(fused);

  auto init = DK_ARGS(DK_Plugin_Initialize_Args);
  init.sdk_api_major = DK_API_MAJOR;
  init.sdk_api_minor = DK_API_MINOR;
  try {
    p->check(api->Plugin_Initialize(&init), "Plugin_Initialize");
    auto info = DK_ARGS(DK_Plugin_GetInfo_Args);
    p->check(api->Plugin_GetInfo(&info), "Plugin_GetInfo");
    p->info_ = {safe_str(info.name), safe_str(info.vendor), safe_str(info.version),
                safe_str(info.attributes)};
    auto count = DK_ARGS(DK_Device_Count_Args);
    p->check(api->Device_Count(&count), "Device_Count");
    for (int i = 0; i < count.count; ++i) {
      p->devices_.push_back(std::make_shared<Device>(p.get(), i));
    }
  } catch (const Error& e) {
    // The plugin's own words, verbatim, as the load error.
    load_error(path, e.what());
  }
  return p;
}

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
  auto m = DK_ARGS(DK_Error_Message_Args);
  m.error = err;
  api_->Error_Message(&m);
  std::string msg = m.message ? std::string(m.message, m.message_size) : std::string();
  auto c = DK_ARGS(DK_Error_GetCode_Args);
  c.error = err;
  api_->Error_GetCode(&c);
  auto d = DK_ARGS(DK_Error_Destroy_Args);
  d.error = err;
  api_->Error_Destroy(&d);
  const std::string who = info_.name.empty() ? path_ : info_.name;
  throw Error(ErrorKind::Device,
              "plugin '" + who + "' " + context + " failed [" + error_code_name(c.code) +
                  "]: " + msg,
              c.code);
}

}  // namespace dk
