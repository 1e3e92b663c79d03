// Fused gelu and gelu_backward (device API 1.4), float32, dense: one pass
// over x (and dout) instead of the decomposition's chain of about ten
// elementwise launches forward and twenty backward, each a full pass with a
// temporary. The element math is gelu.h's; with the fast paths built
// (DKCPU_FAST) the spans run fast/elementwise.cpp's AVX2 / AVX-512 builds of
// the same loops.
#include <algorithm>
#include <cstdint>

#include "fused_common.h"
#include "gelu.h"
#include "parallel.h"
#if DKCPU_FAST
#include "fast/fast.h"
#endif

namespace dkcpu {
namespace {

struct GeluLaunch {
  const float* dout;  // NULL: the forward
  const float* x;
  float* out;
  int64_t n;
  bool tanh_form;
};

constexpr int64_t kGeluGrain = 8192;  // elements per parallel chunk

DK_Error* run_gelu(const void* payload) {
  const GeluLaunch l = *static_cast<const GeluLaunch*>(payload);
  parallel_for(l.n, kGeluGrain, [&](int64_t b, int64_t e) {
    const float* dout = l.dout ? l.dout + b : nullptr;
#if DKCPU_FAST
    fast::gelu_f32(dout, l.x + b, l.out + b, e - b, l.tanh_form);
#else
    gelu_span(dout, l.x + b, l.out + b, e - b, l.tanh_form);
#endif
  });
  return nullptr;
}

// x (and dout) and out float32 dense, any rank; approximate 0 or 1.
int32_t gelu_supports_op(const DK_Kernel_Args* a, DK_FusedOpId op, int32_t num_inputs) {
  const auto* attrs = fused_frame<DK_GeluAttrs>(a, op, num_inputs, DK_GeluAttrs_STRUCT_SIZE);
  if (!attrs || (attrs->approximate != 0 && attrs->approximate != 1)) return 0;
  for (int32_t i = 0; i < num_inputs; ++i) {
    if (!dense_f32(a->inputs[i])) return 0;
  }
  return dense_f32(a->outputs[0]);
}

int32_t gelu_supports(const DK_Kernel_Args* a) { return gelu_supports_op(a, DK_FUSED_GELU, 1); }
int32_t gelu_backward_supports(const DK_Kernel_Args* a) {
  return gelu_supports_op(a, DK_FUSED_GELU_BACKWARD, 2);
}

DK_Error* launch_gelu(const char* call, const DK_Kernel_Args* a, DK_FusedOpId op,
                      int32_t num_inputs, DK_FusedSupportsFn* supports) {
  return guarded(call, [&]() -> DK_Error* {
    FusedViews v;
    if (DK_Error* e = load_fused(call, a, op, num_inputs, supports, &v)) return e;
    const View& x = v.in[num_inputs - 1];  // gelu: x; gelu_backward: dout, x
    if (DK_Error* e = check_same_shape(call, "output 0", v.out, x, "x")) return e;
    if (num_inputs == 2) {
      if (DK_Error* e = check_same_shape(call, "input 0 (dout)", v.in[0], x, "input 1 (x)"))
        return e;
    }
    if (v.out_numel == 0) return nullptr;
    const auto* attrs = static_cast<const DK_GeluAttrs*>(a->attrs);
    enqueue(a->stream, run_gelu,
            GeluLaunch{num_inputs == 2 ? reinterpret_cast<const float*>(v.in[0].data) : nullptr,
                       reinterpret_cast<const float*>(x.data), reinterpret_cast<float*>(v.out.data),
                       v.out_numel, attrs->approximate == 1});
    return nullptr;
  });
}

}  // namespace
}  // namespace dkcpu

using namespace dkcpu;

extern "C" {

int32_t dk_cpu_fused_gelu_supports(const DK_Kernel_Args* a) { return gelu_supports(a); }
int32_t dk_cpu_fused_gelu_backward_supports(const DK_Kernel_Args* a) {
  return gelu_backward_supports(a);
}

DK_Error* dk_cpu_fused_gelu(const DK_Kernel_Args* a) {
  return launch_gelu("cpu.Fused(gelu)", a, DK_FUSED_GELU, 1, gelu_supports);
}

DK_Error* dk_cpu_fused_gelu_backward(const DK_Kernel_Args* a) {
  return launch_gelu("cpu.Fused(gelu_backward)", a, DK_FUSED_GELU_BACKWARD, 2,
                     gelu_backward_supports);
}

}  // extern "C"
