// kernel.h's host side: checking a kernel call and preparing its launch
// (begin, begin_fused), and DK_LAUNCH's result as a DK_Error (launched).
#include "api.h"
#include "internal.h"
#include "launch.h"

namespace dkcuda {
namespace {

// A non-empty view lies inside one live allocation of the device; its byte
// extent is (offset of the last element + 1) * element size.
DK_Error* check_view_memory(const char* call, const char* what, int32_t device,
                            const DK_TensorView* v) {
  if (v == nullptr) return nullptr;  // an absent optional view (begin_fused), or rejected already
  int64_t last = 0;
  for (int32_t d = 0; d < v->rank; ++d) {
    if (v->shape[d] < 0 || v->strides[d] < 0) {
      return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                       "%s: %s has shape %lld and stride %lld in dim %d; expected both >= 0", call,
                       what, (long long)v->shape[d], (long long)v->strides[d], (int)d);
    }
  }
  for (int32_t d = 0; d < v->rank; ++d) {
    if (v->shape[d] == 0) return nullptr;  // no element: data may be NULL, never touched
    last += (v->shape[d] - 1) * v->strides[d];
  }
  const uint64_t bytes = (uint64_t(last) + 1) * dkh_dtype_size(v->dtype);
  return check_device_memory(call, what, device, v->data, bytes);
}

DK_Error* prepare(const char* call, const DK_Kernel_Args* args, Launch* launch) {
  if (DK_Error* e = check_device(call, args->device)) return e;
  if (DK_Error* e = check_stream(call, args->stream, args->device)) return e;
  char what[32];
  for (int32_t i = 0; i < args->num_inputs; ++i) {
    snprintf(what, sizeof what, "input %d", (int)i);
    if (DK_Error* e = check_view_memory(call, what, args->device, args->inputs[i])) return e;
  }
  for (int32_t i = 0; i < args->num_outputs; ++i) {
    snprintf(what, sizeof what, "output %d", (int)i);
    if (DK_Error* e = check_view_memory(call, what, args->device, args->outputs[i])) return e;
  }
  const gpu::Status st = gpu::set_device(args->device);
  if (!st.ok()) return error_from_status(call, st);
  launch->device = args->device;
  launch->stream = gpu::stream_handle(args->stream->gpu);
  launch->errors = gpu::stream_errors(args->stream->gpu);
  return nullptr;
}

}  // namespace

DK_Error* begin(const char* call, const DK_Kernel_Args* args, int32_t op, Launch* launch) {
  if (DK_Error* e = check_initialized(call)) return e;
  // Every argument rule the header states, against what api.c declares.
  if (DK_Error* e = dkh_check_call(call, args, op, &dk_cuda_kernel_table)) return e;
  return prepare(call, args, launch);
}

DK_Error* begin_fused(const char* call, const DK_Kernel_Args* args, Launch* launch) {
  if (DK_Error* e = check_initialized(call)) return e;
  DKH_CHECK_STRUCT(call, args, DK_Kernel_Args);
  if ((args->num_inputs > 0 && args->inputs == nullptr) ||
      (args->num_outputs > 0 && args->outputs == nullptr)) {
    return dkh_error(DK_ERROR_INVALID_ARGUMENT, "%s: inputs or outputs is NULL", call);
  }
  // A NULL view is an absent optional input or an unwanted gradient: no view
  // to check (prepare's check_view_memory skips it too); the fused kernel's
  // supports() already said whether it may be absent.
  for (int32_t i = 0; i < args->num_inputs; ++i) {
    if (args->inputs[i] == nullptr) continue;
    if (DK_Error* e = dkh_check_view(call, "input", args->inputs[i], DK_DTYPE_MASK_ALL_1_0,
                                     DK_KERNEL_CAP_STRIDED))
      return e;
  }
  for (int32_t i = 0; i < args->num_outputs; ++i) {
    if (args->outputs[i] == nullptr) continue;
    if (DK_Error* e = dkh_check_view(call, "output", args->outputs[i], DK_DTYPE_MASK_ALL_1_0,
                                     DK_KERNEL_CAP_STRIDED))
      return e;
  }
  return prepare(call, args, launch);
}

DK_Error* launched(const char* call, const std::string& launch_error) {
  if (launch_error.empty()) return nullptr;
  return dkh_error(DK_ERROR_INTERNAL, "%s: %s", call, launch_error.c_str());
}

}  // namespace dkcuda
