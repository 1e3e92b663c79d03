// The host side of a kernel launch, shared by the kernels (through kernel.h)
// and the plugin's DK-ABI files: the check that begins a launch, the
// per-stream error word kernels report data errors into, and DK_LAUNCH's
// result as a DK_Error. Plain C++ (no SIMT dialect): the DK-ABI files are
// compiled by the host compiler in both builds.
#pragma once

#include <devicekit/device_api.h>

#include <stdint.h>

#include <string>

namespace dkcuda {

// ---- Data-dependent errors -------------------------------------------------------

// What a kernel found wrong in the data (not in the arguments, which begin()
// checks before anything is enqueued).
enum KernelErrorKind : int32_t {
  kIndexOutOfRange = 1,  // value: the index; bound: the size it must stay below
};

// One per stream, in the stream's device memory (the emulator: host memory);
// the host copies it back after a synchronize (gpu::take_kernel_errors).
// A kernel reports with report_error(); the stream's next synchronize reads
// it, turns it into a DK_Error naming the op (DK_ERROR_OUT_OF_RANGE for
// kIndexOutOfRange), and clears it. Only the first report's details are
// kept; count says how many elements reported.
struct KernelErrors {
  int32_t count;  // elements that reported (atomic)
  int32_t op;     // DK_OpId of the first report
  int32_t kind;   // KernelErrorKind
  int32_t input;  // which input held the bad value
  int64_t value;
  int64_t bound;
};

// ---- Beginning a launch --------------------------------------------------------

// What a kernel launch is enqueued with.
struct Launch {
  int32_t device;
  void* stream;          // the device stream handle DK_LAUNCH takes
  KernelErrors* errors;  // the stream's error word (device-visible)
};

// Checks a kernel call and prepares its launch: the plugin is initialised,
// every argument rule of base op `op` holds against what dk_cuda_kernel_table
// declares for it (dkh_check_call: dtypes, capability bits, shapes,
// broadcasting, attributes, overlap), args->device and args->stream are
// valid, and every non-empty view lies inside a live allocation of the
// device. Also makes args->device the calling thread's current device.
// Returns NULL and fills *launch, or the error to return (nothing enqueued).
DK_Error* begin(const char* call, const DK_Kernel_Args* args, int32_t op, Launch* launch);

// The same for a fused kernel's launch: plugin, device, stream and views
// (inputs and outputs inside live allocations); its own rules the fused
// kernel's supports() and launch check themselves. A NULL entry in inputs or
// outputs is an absent optional input or an unwanted gradient and is skipped.
DK_Error* begin_fused(const char* call, const DK_Kernel_Args* args, Launch* launch);

// DK_LAUNCH's result (a std::string, empty on success; CUDA's own text
// otherwise, e.g. "launch of k failed: too many resources requested for
// launch (cudaErrorLaunchOutOfResources)") as the kernel function's return
// value: NULL, or DK_ERROR_INTERNAL with "<call>: <text>".
DK_Error* launched(const char* call, const std::string& launch_error);

// Enqueues on `stream` a one-thread kernel that moves the data errors a
// graph's kernels reported into `from` over to `into` (kept there if `into`
// already holds one; the counts add up) and zeroes `from`
// (kernels_graphs.cu; the CUDA build's graph_launch uses it).
std::string move_kernel_errors(void* stream, KernelErrors* from, KernelErrors* into);

// Runs a kernel function's body so that no C++ exception crosses the C ABI
// (an exception becomes DK_ERROR_INTERNAL / OUT_OF_MEMORY naming `call`).
DK_Error* error_from_exception(const char* call) noexcept;
template <class Body> DK_Error* guarded(const char* call, Body&& body) noexcept {
  try {
    return body();
  } catch (...) { return error_from_exception(call); }
}

}  // namespace dkcuda
