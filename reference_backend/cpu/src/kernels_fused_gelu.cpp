// Fused gelu and gelu_backward (device API 1.4), dense float32, float16 or
// bfloat16 (the 16-bit ones widened a chunk at a time, fused_half.h): one pass
// over x (and dout) instead of the decomposition's chain of about ten
// elementwise launches forward and twenty backward, each a full pass with a
// temporary. The element math is gelu.h's; with the fast paths built
// (DKCPU_FAST) the spans run fast/elementwise.cpp's AVX2 / AVX-512 builds of
// the same loops.
#include <algorithm>
#include <cstdint>

#include "fused_common.h"
#include "fused_half.h"
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

// The float32 span of a float16 / bfloat16 launch (gelu_span, or its fast build).
DKCPU_INLINE void gelu_f32_span(const float* dout, const float* x, float* out, int64_t n,
                                bool tanh_form) {
#if DKCPU_FAST
  fast::gelu_f32(dout, x, out, n, tanh_form);
#else
  gelu_span(dout, x, out, n, tanh_form);
#endif
}

struct GeluHalf {
  DK_DType dtype;
  const void* dout;  // NULL: the forward
  const void* x;
  void* out;
  int64_t n;
  bool tanh_form;
};

// Chunks of kGeluGrain elements widened, run through the float32 span, rounded once.
DK_Error* run_gelu_half(const void* payload) {
  const GeluHalf h = *static_cast<const GeluHalf*>(payload);
  if (h.dout) {
    const void* in[2] = {h.dout, h.x};
    half_rows<2>(h.dtype, in, h.out, h.n, 1, kGeluGrain,
                 [&](const float* const* i, float* o, int64_t, int64_t n) {
                   gelu_f32_span(i[0], i[1], o, n, h.tanh_form);
                 });
  } else {
    const void* in[1] = {h.x};
    half_rows<1>(h.dtype, in, h.out, h.n, 1, kGeluGrain,
                 [&](const float* const* i, float* o, int64_t, int64_t n) {
                   gelu_f32_span(nullptr, i[0], o, n, h.tanh_form);
                 });
  }
  return nullptr;
}

// x (and dout) and out dense of dtype T (float32, float16 or bfloat16), any
// rank; approximate 0 or 1.
template <DK_DType T>
int32_t gelu_supports_op(const DK_Kernel_Args* a, DK_FusedOpId op, int32_t num_inputs) {
  const auto* attrs = fused_frame<DK_GeluAttrs>(a, op, num_inputs, DK_GeluAttrs_STRUCT_SIZE);
  if (!attrs || (attrs->approximate != 0 && attrs->approximate != 1)) return 0;
  for (int32_t i = 0; i < num_inputs; ++i) {
    if (!dense_as(a->inputs[i], T)) return 0;
  }
  return dense_as(a->outputs[0], T);
}

template <DK_DType T> int32_t gelu_supports(const DK_Kernel_Args* a) {
  return gelu_supports_op<T>(a, DK_FUSED_GELU, 1);
}
template <DK_DType T> int32_t gelu_backward_supports(const DK_Kernel_Args* a) {
  return gelu_supports_op<T>(a, DK_FUSED_GELU_BACKWARD, 2);
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
    if (is_half(x.dtype)) {
      enqueue(a->stream, run_gelu_half,
              GeluHalf{x.dtype, num_inputs == 2 ? v.in[0].data : nullptr, x.data, v.out.data,
                       v.out_numel, attrs->approximate == 1});
      return nullptr;
    }
    enqueue(a->stream, run_gelu,
            GeluLaunch{num_inputs == 2 ? reinterpret_cast<const float*>(v.in[0].data) : nullptr,
                       reinterpret_cast<const float*>(x.data), reinterpret_cast<float*>(v.out.data),
                       v.out_numel, attrs->approximate == 1});
    return nullptr;
  });
}

constexpr DK_DType F32 = DK_DTYPE_FLOAT32, F16 = DK_DTYPE_FLOAT16, BF16 = DK_DTYPE_BFLOAT16;

}  // namespace
}  // namespace dkcpu

using namespace dkcpu;

extern "C" {

// One extern pair per .def row: float32, bfloat16, float16.
#define DKCPU_GELU_KERNELS(sfx, T)                                                \
  int32_t dk_cpu_fused_gelu##sfx##_supports(const DK_Kernel_Args* a) {            \
    return gelu_supports<T>(a);                                                   \
  }                                                                               \
  int32_t dk_cpu_fused_gelu_backward##sfx##_supports(const DK_Kernel_Args* a) {   \
    return gelu_backward_supports<T>(a);                                          \
  }                                                                               \
  DK_Error* dk_cpu_fused_gelu##sfx(const DK_Kernel_Args* a) {                     \
    return launch_gelu("cpu.Fused(gelu)", a, DK_FUSED_GELU, 1, gelu_supports<T>); \
  }                                                                               \
  DK_Error* dk_cpu_fused_gelu_backward##sfx(const DK_Kernel_Args* a) {            \
    return launch_gelu("cpu.Fused(gelu_backward)", a, DK_FUSED_GELU_BACKWARD, 2,  \
                       gelu_backward_supports<T>);                                \
  }
DKCPU_GELU_KERNELS(, F32)
DKCPU_GELU_KERNELS(_bf16, BF16)
DKCPU_GELU_KERNELS(_f16, F16)
#undef DKCPU_GELU_KERNELS

}  // extern "C"
