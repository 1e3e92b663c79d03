// Fused kernels for the row-wise composite ops: rms_norm, layer_norm and
// softmax over the last dimension (float32, float16, bfloat16; contiguous;
// the 16-bit ones widened a block of rows at a time, fused_half.h). Each row is read
// from memory once and stays in cache for its second pass, so a launch moves
// about as many bytes as a copy, against several full passes (and temporary
// tensors) for the decomposition. Rows are split across cores with
// parallel_for; the row math (lane-wise sums, norm_stats, norm_span) is in
// fused_common.h.
//
// The plain loops here are the whole kernel. With the fast paths built
// (DKCPU_FAST), a norm launch runs fast/norm.cpp's build of the same row
// loop instead: AVX2, and streaming stores for outputs larger than the caches.
#include <algorithm>
#include <cstdint>

#include "fused_common.h"
#include "fused_half.h"
#include "parallel.h"
#if DKCPU_FAST
#include "fast/fast.h"
#endif

namespace dkcpu {
namespace {

// ---- rms_norm and layer_norm ---------------------------------------------------

// Rows [r0, r1) of a norm launch. (Unused with DKCPU_FAST: fast::norm_rows.)
[[maybe_unused]] void norm_rows(const NormLaunch& l, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* __restrict x = l.x + r * l.d;
    const NormStats s = norm_stats(l, x);
    norm_span(x, l.weight, l.bias, l.out + r * l.d, 0, l.d, s.mean, s.rstd);
  }
}

DKCPU_INLINE void norm_rows_any(const NormLaunch& l, int64_t r0, int64_t r1) {
#if DKCPU_FAST
  fast::norm_rows(l, r0, r1);
#else
  norm_rows(l, r0, r1);
#endif
}

DK_Error* run_norm(const void* payload) {
  const NormLaunch l = *static_cast<const NormLaunch*>(payload);
  parallel_for(l.rows, row_grain(l.d), [&](int64_t r0, int64_t r1) { norm_rows_any(l, r0, r1); });
  return nullptr;
}

// A float16 / bfloat16 norm: x, weight, bias and out of dtype `dtype`.
struct NormHalf {
  DK_DType dtype;
  const void* x;
  const void* weight;  // NULL: 1
  const void* bias;    // NULL: 0
  void* out;
  int64_t rows, d;
  float eps;
  bool centered;
};

// Weight and bias widened once; then blocks of rows widened, normalised by
// the float32 row loop and rounded once.
DK_Error* run_norm_half(const void* payload) {
  const NormHalf h = *static_cast<const NormHalf*>(payload);
  const std::vector<float> w = widen_all(h.dtype, h.weight, h.d);
  const std::vector<float> b = widen_all(h.dtype, h.bias, h.d);
  const void* in[1] = {h.x};
  half_rows<1>(
      h.dtype, in, h.out, h.rows, h.d, row_grain(h.d),
      [&](const float* const* x, float* y, int64_t, int64_t n) {
        const NormLaunch l{
            x[0],      h.weight ? w.data() : nullptr, h.bias ? b.data() : nullptr, y, n, h.d, h.eps,
            h.centered};
        norm_rows_any(l, 0, n);
      });
  return nullptr;
}

// x dense of dtype T (float32, float16 or bfloat16), rank >= 1; optional
// weight/bias dense [d] of the same dtype (the SDK checked their shapes); out
// dense, of the same dtype. Mixed dtypes are declined.
template <DK_DType T>
int32_t norm_supports(const DK_Kernel_Args* a, DK_FusedOpId op, int32_t num_inputs) {
  if (!fused_frame<DK_NormAttrs>(a, op, num_inputs, DK_NormAttrs_STRUCT_SIZE)) return 0;
  if (!dense_as(a->inputs[0], T) || a->inputs[0]->rank < 1 || !dense_as(a->outputs[0], T)) return 0;
  for (int32_t i = 1; i < num_inputs; ++i) {
    if (a->inputs[i] && !dense_as(a->inputs[i], T)) return 0;
  }
  return 1;
}

template <DK_DType T> int32_t rms_norm_supports(const DK_Kernel_Args* a) {
  return norm_supports<T>(a, DK_FUSED_RMS_NORM, 2);
}
template <DK_DType T> int32_t layer_norm_supports(const DK_Kernel_Args* a) {
  return norm_supports<T>(a, DK_FUSED_LAYER_NORM, 3);
}

DK_Error* launch_norm(const char* call, const DK_Kernel_Args* a, DK_FusedOpId op,
                      int32_t num_inputs, DK_FusedSupportsFn* supports) {
  return guarded(call, [&]() -> DK_Error* {
    FusedViews v;
    if (DK_Error* e = load_fused(call, a, op, num_inputs, supports, &v)) return e;
    if (DK_Error* e = check_same_shape(call, "output 0", v.out, v.in[0], "input 0")) return e;
    const int64_t d = v.in[0].shape[v.in[0].rank - 1];
    for (int32_t i = 1; i < num_inputs; ++i) {
      if (v.present[i] && (v.in[i].rank != 1 || v.in[i].shape[0] != d)) {
        return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                         "%s: input %d has shape %s; expected [%lld] "
                         "(the last dim of input 0)",
                         call, int(i), dims(v.in[i]).c_str(), (long long)d);
      }
    }
    if (v.out_numel == 0) return nullptr;
    const auto* attrs = static_cast<const DK_NormAttrs*>(a->attrs);
    if (is_half(v.in[0].dtype)) {
      enqueue(a->stream, run_norm_half,
              NormHalf{v.in[0].dtype, v.in[0].data, v.present[1] ? v.in[1].data : nullptr,
                       num_inputs > 2 && v.present[2] ? v.in[2].data : nullptr, v.out.data,
                       v.out_numel / d, d, float(attrs->eps), op == DK_FUSED_LAYER_NORM});
      return nullptr;
    }
    NormLaunch l{
        reinterpret_cast<const float*>(v.in[0].data),
        v.present[1] ? reinterpret_cast<const float*>(v.in[1].data) : nullptr,
        num_inputs > 2 && v.present[2] ? reinterpret_cast<const float*>(v.in[2].data) : nullptr,
        reinterpret_cast<float*>(v.out.data),
        v.out_numel / d,
        d,
        float(attrs->eps),
        op == DK_FUSED_LAYER_NORM};
    enqueue(a->stream, run_norm, l);
    return nullptr;
  });
}

// ---- softmax --------------------------------------------------------------------

struct SoftmaxLaunch {
  const float* x;
  float* out;
  int64_t rows, d;
};

// Rows [r0, r1) of a softmax launch.
void softmax_rows(const SoftmaxLaunch& l, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* __restrict x = l.x + r * l.d;
    float* __restrict y = l.out + r * l.d;
    float acc[kLanes];
    for (int k = 0; k < kLanes; ++k) acc[k] = -INFINITY;
    int64_t i = 0;
    for (; i + kLanes <= l.d; i += kLanes)
      for (int k = 0; k < kLanes; ++k) acc[k] = max_nan(acc[k], x[i + k]);
    for (int k = 0; i < l.d; ++i, ++k) acc[k] = max_nan(acc[k], x[i]);
    float m = acc[0];
    for (int k = 1; k < kLanes; ++k) m = max_nan(m, acc[k]);
    // Max-subtracted; a NaN max (or -inf - -inf) makes the row NaN, as the
    // decomposition does.
    for (int64_t j = 0; j < l.d; ++j) y[j] = exp_nonpositive(x[j] - m);
    const float inv = 1.0f / sum(y, l.d);
    for (int64_t j = 0; j < l.d; ++j) y[j] *= inv;
  }
}

DK_Error* run_softmax(const void* payload) {
  const SoftmaxLaunch l = *static_cast<const SoftmaxLaunch*>(payload);
  parallel_for(l.rows, row_grain(l.d), [&](int64_t r0, int64_t r1) { softmax_rows(l, r0, r1); });
  return nullptr;
}

struct SoftmaxHalf {
  DK_DType dtype;
  const void* x;
  void* out;
  int64_t rows, d;
};

DK_Error* run_softmax_half(const void* payload) {
  const SoftmaxHalf h = *static_cast<const SoftmaxHalf*>(payload);
  const void* in[1] = {h.x};
  half_rows<1>(h.dtype, in, h.out, h.rows, h.d, row_grain(h.d),
               [&](const float* const* x, float* y, int64_t, int64_t n) {
                 softmax_rows(SoftmaxLaunch{x[0], y, n, h.d}, 0, n);
               });
  return nullptr;
}

// x and out dense of dtype T (float32, float16 or bfloat16). Last axis only:
// another axis would need strided rows; the decomposition covers it.
template <DK_DType T> int32_t softmax_supports(const DK_Kernel_Args* a) {
  const auto* attrs =
      fused_frame<DK_SoftmaxAttrs>(a, DK_FUSED_SOFTMAX, 1, DK_SoftmaxAttrs_STRUCT_SIZE);
  return attrs && dense_as(a->inputs[0], T) && dense_as(a->outputs[0], T) &&
         a->inputs[0]->rank >= 1 && attrs->axis == a->inputs[0]->rank - 1;
}

constexpr DK_DType F32 = DK_DTYPE_FLOAT32, F16 = DK_DTYPE_FLOAT16, BF16 = DK_DTYPE_BFLOAT16;

DK_Error* launch_softmax(const DK_Kernel_Args* a, DK_FusedSupportsFn* supports) {
  const char* call = "cpu.Fused(softmax)";
  return guarded(call, [&]() -> DK_Error* {
    FusedViews v;
    if (DK_Error* e = load_fused(call, a, DK_FUSED_SOFTMAX, 1, supports, &v)) return e;
    if (DK_Error* e = check_same_shape(call, "output 0", v.out, v.in[0], "input 0")) return e;
    if (v.out_numel == 0) return nullptr;
    const int64_t d = v.in[0].shape[v.in[0].rank - 1];
    if (is_half(v.in[0].dtype)) {
      enqueue(a->stream, run_softmax_half,
              SoftmaxHalf{v.in[0].dtype, v.in[0].data, v.out.data, v.out_numel / d, d});
      return nullptr;
    }
    enqueue(a->stream, run_softmax,
            SoftmaxLaunch{reinterpret_cast<const float*>(v.in[0].data),
                          reinterpret_cast<float*>(v.out.data), v.out_numel / d, d});
    return nullptr;
  });
}

}  // namespace
}  // namespace dkcpu

using namespace dkcpu;

extern "C" {

// One extern pair per .def row: float32, bfloat16, float16.
#define DKCPU_NORM_KERNELS(sfx, T)                                                            \
  int32_t dk_cpu_fused_rms_norm##sfx##_supports(const DK_Kernel_Args* a) {                    \
    return rms_norm_supports<T>(a);                                                           \
  }                                                                                           \
  int32_t dk_cpu_fused_layer_norm##sfx##_supports(const DK_Kernel_Args* a) {                  \
    return layer_norm_supports<T>(a);                                                         \
  }                                                                                           \
  int32_t dk_cpu_fused_softmax##sfx##_supports(const DK_Kernel_Args* a) {                     \
    return softmax_supports<T>(a);                                                            \
  }                                                                                           \
  DK_Error* dk_cpu_fused_rms_norm##sfx(const DK_Kernel_Args* a) {                             \
    return launch_norm("cpu.Fused(rms_norm)", a, DK_FUSED_RMS_NORM, 2, rms_norm_supports<T>); \
  }                                                                                           \
  DK_Error* dk_cpu_fused_layer_norm##sfx(const DK_Kernel_Args* a) {                           \
    return launch_norm("cpu.Fused(layer_norm)", a, DK_FUSED_LAYER_NORM, 3,                    \
                       layer_norm_supports<T>);                                               \
  }                                                                                           \
  DK_Error* dk_cpu_fused_softmax##sfx(const DK_Kernel_Args* a) {                              \
    return launch_softmax(a, softmax_supports<T>);                                            \
  }
DKCPU_NORM_KERNELS(, F32)
DKCPU_NORM_KERNELS(_bf16, BF16)
DKCPU_NORM_KERNELS(_f16, F16)
#undef DKCPU_NORM_KERNELS

}  // extern "C"
