// Errors, the plugin's own argument checks, Plugin_Initialize and
// Plugin_GetInfo. The error object and Error_* are plugin_helpers.h's.
#include <exception>
#include <new>
#include <system_error>

#include "api.h"
#include "internal.h"
#include "launch.h"

namespace dkcuda {

DK_Error* error_from_exception(const char* call) noexcept {
  try {
    throw;
  } catch (const std::bad_alloc&) {
    return dkh_error(DK_ERROR_OUT_OF_MEMORY,
                     "%s: out of host memory. Hint: free tensors or lower the batch size.", call);
  } catch (const std::system_error& e) {  // e.g. std::thread could not start a worker
    return dkh_error(DK_ERROR_UNAVAILABLE, "%s: the system refused: %s", call, e.what());
  } catch (const std::exception& e) {
    return dkh_error(DK_ERROR_INTERNAL, "%s: internal error in the %s plugin: %s", call,
                     DKCUDA_NAME, e.what());
  } catch (...) {
    return dkh_error(DK_ERROR_INTERNAL, "%s: internal error in the %s plugin", call, DKCUDA_NAME);
  }
}

DK_Error* error_from_status(const char* call, const gpu::Status& s) {
  return dkh_error(s.code != 0 ? s.code : DK_ERROR_INTERNAL, "%s: %s", call, s.message.c_str());
}

DK_Error* check_initialized(const char* call) {
  if (plugin().initialized.load(std::memory_order_acquire)) return nullptr;
  return dkh_error(DK_ERROR_FAILED_PRECONDITION,
                   "%s: called before Plugin_Initialize. Hint: the SDK must call "
                   "Plugin_Initialize once, right after checking the version.",
                   call);
}

DK_Error* check_device(const char* call, int32_t device) {
  const int32_t n = plugin().num_devices;
  if (device < 0 || device >= n) {
    return dkh_error(DK_ERROR_OUT_OF_RANGE,
                     "%s: device ordinal %d is out of range; this plugin has %d device(s), "
                     "%s:0..%s:%d",
                     call, device, n, DKCUDA_NAME, DKCUDA_NAME, n - 1);
  }
  return nullptr;
}

// Deliberately leaked: stream workers (the emulator) and the CUDA runtime's
// own threads may still run while static destructors do.
Plugin& plugin() {
  static Plugin* const instance = new Plugin();
  return *instance;
}

}  // namespace dkcuda

using namespace dkcuda;

extern "C" {

DK_Error* dk_cuda_Plugin_Initialize(DK_Plugin_Initialize_Args* args) {
  static const char* const kCall = DKCUDA_NAME ".Plugin_Initialize";
  return guarded(kCall, [&]() -> DK_Error* {
    Plugin& p = plugin();
    if (args == nullptr || args->struct_size < DK_Plugin_Initialize_Args_STRUCT_SIZE) {
      return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                       "%s: args is NULL or struct_size %zu < %zu. Hint: set it with "
                       "DK_Plugin_Initialize_Args_STRUCT_SIZE.",
                       kCall, args ? args->struct_size : size_t(0),
                       size_t(DK_Plugin_Initialize_Args_STRUCT_SIZE));
    }
    if (p.initialized.load()) {
      return dkh_error(DK_ERROR_FAILED_PRECONDITION,
                       "%s: called a second time in this process; expected exactly once. "
                       "Hint: load each plugin once per process and reuse it.",
                       kCall);
    }
    if (args->sdk_api_major != DK_API_MAJOR) {
      return dkh_error(DK_ERROR_FAILED_PRECONDITION,
                       "%s: the SDK speaks device API %d.%d, this plugin was built for %d.%d; "
                       "majors must match. Hint: install a devicekit %d.x release.",
                       kCall, args->sdk_api_major, args->sdk_api_minor, DK_API_MAJOR, DK_API_MINOR,
                       DK_API_MAJOR);
    }
    int32_t count = 0;
    const gpu::Status s = gpu::init(&count);
    // One line, the runtime's own words: the SDK shows it as the load error.
    if (!s.ok()) return error_from_status(kCall, s);
    std::unique_ptr<Device[]> devices(new Device[count]);
    for (int32_t i = 0; i < count; ++i) {
      const gpu::Status ps = gpu::properties(i, &devices[i].props);
      if (!ps.ok()) return error_from_status(kCall, ps);
    }
    p.num_devices = count;
    p.devices = std::move(devices);
    p.attributes = gpu::attributes();
    p.initialized.store(true, std::memory_order_release);
    return nullptr;
  });
}

DK_Error* dk_cuda_Plugin_GetInfo(DK_Plugin_GetInfo_Args* args) {
  static const char* const kCall = DKCUDA_NAME ".Plugin_GetInfo";
  DKCUDA_CHECK_ARGS(kCall, args, DK_Plugin_GetInfo_Args);
  args->name = DKCUDA_NAME;
  args->vendor = "DeviceKit reference";
  args->version = DKCUDA_VERSION;
  args->attributes = plugin().attributes.c_str();  // lives as long as the library
  return nullptr;
}

}  // extern "C"
