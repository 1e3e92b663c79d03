// Errors, Plugin_Initialize and Plugin_GetInfo. The error object and Error_*
// are plugin_helpers.h's; the version check, exceptions as errors and the
// argument checks are <devicekit/plugin_runtime.hpp>'s.
#include <memory>
#include <utility>

#include "api.h"
#include "internal.h"
#include "launch.h"

namespace dkcuda {

DK_Error* error_from_exception(const char* call) noexcept {
  return dkh::error_from_exception(call, DKCUDA_NAME);
}

DK_Error* error_from_status(const char* call, const gpu::Status& s) {
  return dkh_error(s.code != 0 ? s.code : DK_ERROR_INTERNAL, "%s: %s", call, s.message.c_str());
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
    if (DK_Error* e =
            dkh_check_initialize(kCall, args, p.initialized.load(), DK_API_MAJOR, DK_API_MINOR))
      return e;
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
