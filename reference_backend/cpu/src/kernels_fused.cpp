// Fused kernels for the row-wise composite ops: rms_norm, layer_norm and
// softmax over the last dimension (float32, contiguous). Each row is read
// from memory once and stays in cache for its second pass, so a launch moves
// about as many bytes as a copy, against several full passes (and temporary
// tensors) for the decomposition.
//
// Reductions keep kLanes independent partial sums: the compiler may not
// reorder a single float sum (no -ffast-math here), but it vectorises
// kLanes-wide independent lanes, and the lanes are then added pairwise.
// Rows are split across cores with parallel_for.
//
// A norm's output larger than the caches is written with streaming stores
// (norm_span_streaming): a normal store first reads the line it fills
// (read-for-ownership), so a copy-like kernel moves 3 bytes per 2; streaming
// moves 2. Measured ~8% on a 4096 x 4096 rms_norm (64 MiB out). The norm
// rows are also compiled for AVX2 (norm_rows_avx2, picked at run time).
#include <algorithm>
#include <cstdint>
#if defined(__x86_64__)
#include <xmmintrin.h>  // _mm_stream_ps, see stream_store
#endif

#include "fused_common.h"
#include "parallel.h"

namespace dkcpu {
namespace {

constexpr int kLanes = 16;

inline float sum_lanes(float* acc) {
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
  return acc[0];
}

// sum over i of (x[i] - c)^2, in float32 (the header's accumulation minimum).
DKCPU_INLINE float sum_sq_centered(const float* __restrict x, int64_t n, float c) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += (x[i + l] - c) * (x[i + l] - c);
  for (int l = 0; i < n; ++i, ++l) acc[l] += (x[i] - c) * (x[i] - c);
  return sum_lanes(acc);
}

DKCPU_INLINE float sum(const float* __restrict x, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += x[i + l];
  for (int l = 0; i < n; ++i, ++l) acc[l] += x[i];
  return sum_lanes(acc);
}

// Rows per parallel chunk: about 32 Ki elements, so tiny rows still batch up.
inline int64_t row_grain(int64_t d) { return std::max<int64_t>(1, (int64_t(1) << 15) / std::max<int64_t>(d, 1)); }

// ---- rms_norm and layer_norm ---------------------------------------------------

struct NormLaunch {
  const float* x;
  const float* weight;  // NULL: 1
  const float* bias;    // NULL: 0 (layer_norm only)
  float* out;
  int64_t rows, d;
  float eps;
  bool centered;  // layer_norm subtracts the mean; rms_norm does not
};

// Outputs larger than this are written with non-temporal (streaming) stores:
// they bypass the caches, so the store skips the read-for-ownership a normal
// store of a line not in cache pays, and does not evict the input rows. A
// smaller output is likely re-read soon, from cache: normal stores.
constexpr int64_t kStreamMinBytes = int64_t(16) << 20;

// y[i] = (x[i] - mean) * rstd * w[i] + b[i] (w, b NULL: skipped) over [i0, i1).
DKCPU_INLINE void norm_span(const float* __restrict x, const float* __restrict w,
                      const float* __restrict b, float* __restrict y, int64_t i0, int64_t i1,
                      float mean, float rstd) {
  if (w && b) for (int64_t i = i0; i < i1; ++i) y[i] = (x[i] - mean) * rstd * w[i] + b[i];
  else if (w) for (int64_t i = i0; i < i1; ++i) y[i] = (x[i] - mean) * rstd * w[i];
  else if (b) for (int64_t i = i0; i < i1; ++i) y[i] = (x[i] - mean) * rstd + b[i];
  else for (int64_t i = i0; i < i1; ++i) y[i] = (x[i] - mean) * rstd;
}

typedef float V4 __attribute__((vector_size(16)));

// One 16-byte-aligned streaming store. GCC before 15 lacks Clang's portable
// __builtin_nontemporal_store, so x86-64 uses SSE's movntps (baseline there,
// no target attribute needed): the plugin's one intrinsic. Elsewhere: a plain
// store (correct, just not streaming).
DKCPU_INLINE void stream_store(float* dst, V4 v) {
#if defined(__has_builtin) && __has_builtin(__builtin_nontemporal_store)
  __builtin_nontemporal_store(v, reinterpret_cast<V4*>(dst));
#elif defined(__x86_64__)
  _mm_stream_ps(dst, v);
#else
  std::memcpy(dst, &v, sizeof v);
#endif
}

// The same, with streaming stores of 4-float vectors (the unaligned head and
// the tail use normal stores). Same arithmetic, so the same bits.
DKCPU_INLINE void norm_span_streaming(const float* __restrict x, const float* __restrict w,
                                const float* __restrict b, float* __restrict y, int64_t n,
                                float mean, float rstd) {
  const int64_t head = std::min<int64_t>(n, (-reinterpret_cast<uintptr_t>(y) % 16) / 4);
  norm_span(x, w, b, y, 0, head, mean, rstd);
  int64_t i = head;
  for (; i + 4 <= n; i += 4) {
    V4 xv, wv, bv;
    std::memcpy(&xv, x + i, sizeof xv);
    V4 r = (xv - mean) * rstd;
    if (w) std::memcpy(&wv, w + i, sizeof wv), r *= wv;
    if (b) std::memcpy(&bv, b + i, sizeof bv), r += bv;
    stream_store(y + i, r);
  }
  norm_span(x, w, b, y, i, n, mean, rstd);
}

// Rows [r0, r1) of a norm launch.
DKCPU_INLINE void norm_rows(const NormLaunch& l, int64_t r0, int64_t r1, bool stream) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* __restrict x = l.x + r * l.d;
    float* __restrict y = l.out + r * l.d;
    const float mean = l.centered ? sum(x, l.d) / float(l.d) : 0.0f;
    // Two passes for layer_norm (the header prescribes a two-pass variance).
    const float var = sum_sq_centered(x, l.d, mean) / float(l.d);
    const float rstd = 1.0f / std::sqrt(var + l.eps);
    if (stream) norm_span_streaming(x, l.weight, l.bias, y, l.d, mean, rstd);
    else norm_span(x, l.weight, l.bias, y, 0, l.d, mean, rstd);
  }
}

// Two builds: even a memory-bound row loop gains from 256-bit vectors when a
// core is shared (4096 x 4096 rms_norm ~15% faster than SSE2); 512-bit ones
// would add nothing here.
#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) void norm_rows_avx2(const NormLaunch& l, int64_t r0,
                                                        int64_t r1, bool stream) {
  norm_rows(l, r0, r1, stream);
}
#endif
void norm_rows_base(const NormLaunch& l, int64_t r0, int64_t r1, bool stream) {
  norm_rows(l, r0, r1, stream);
}

DK_Error* run_norm(const void* payload) {
  const NormLaunch l = *static_cast<const NormLaunch*>(payload);
  const bool stream = l.rows * l.d * int64_t(sizeof(float)) >= kStreamMinBytes;
  const bool avx2 = cpu_isa() != Isa::kBase;
  parallel_for(l.rows, row_grain(l.d), [&](int64_t r0, int64_t r1) {
#if defined(__x86_64__)
    if (avx2) norm_rows_avx2(l, r0, r1, stream);
    else norm_rows_base(l, r0, r1, stream);
#else
    (void)avx2;
    norm_rows_base(l, r0, r1, stream);
#endif
    // Streaming stores are weakly ordered: fence before this chunk counts as
    // done, so whoever runs next on the stream (another thread) sees them.
    if (stream) __atomic_thread_fence(__ATOMIC_SEQ_CST);
  });
  return nullptr;
}

// x float32 dense, rank >= 1; optional weight/bias float32 dense [d] (the SDK
// checked their shapes); out dense float32.
int32_t norm_supports(const DK_Kernel_Args* a, DK_FusedOpId op, int32_t num_inputs) {
  if (!fused_frame<DK_NormAttrs>(a, op, num_inputs, DK_NormAttrs_STRUCT_SIZE)) return 0;
  if (!dense_f32(a->inputs[0]) || a->inputs[0]->rank < 1 || !dense_f32(a->outputs[0])) return 0;
  for (int32_t i = 1; i < num_inputs; ++i) {
    if (a->inputs[i] && !dense_f32(a->inputs[i])) return 0;
  }
  return 1;
}

int32_t rms_norm_supports(const DK_Kernel_Args* a) { return norm_supports(a, DK_FUSED_RMS_NORM, 2); }
int32_t layer_norm_supports(const DK_Kernel_Args* a) { return norm_supports(a, DK_FUSED_LAYER_NORM, 3); }

DK_Error* launch_norm(const char* call, const DK_Kernel_Args* a, DK_FusedOpId op, int32_t num_inputs,
                      DK_FusedSupportsFn* supports) {
  return guarded(call, [&]() -> DK_Error* {
    FusedViews v;
    if (DK_Error* e = load_fused(call, a, op, num_inputs, supports, &v)) return e;
    if (DK_Error* e = check_same_shape(call, "output 0", v.out, v.in[0], "input 0")) return e;
    const int64_t d = v.in[0].shape[v.in[0].rank - 1];
    for (int32_t i = 1; i < num_inputs; ++i) {
      if (v.present[i] && (v.in[i].rank != 1 || v.in[i].shape[0] != d)) {
        return dkh_error(DK_ERROR_INVALID_ARGUMENT, "%s: input %d has shape %s; expected [%lld] "
                         "(the last dim of input 0)", call, int(i), dims(v.in[i]).c_str(), (long long)d);
      }
    }
    if (v.out_numel == 0) return nullptr;
    const auto* attrs = static_cast<const DK_NormAttrs*>(a->attrs);
    NormLaunch l{reinterpret_cast<const float*>(v.in[0].data),
                 v.present[1] ? reinterpret_cast<const float*>(v.in[1].data) : nullptr,
                 num_inputs > 2 && v.present[2] ? reinterpret_cast<const float*>(v.in[2].data) : nullptr,
                 reinterpret_cast<float*>(v.out.data), v.out_numel / d, d, float(attrs->eps),
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

DK_Error* run_softmax(const void* payload) {
  const SoftmaxLaunch l = *static_cast<const SoftmaxLaunch*>(payload);
  parallel_for(l.rows, row_grain(l.d), [&](int64_t r0, int64_t r1) {
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
  });
  return nullptr;
}

// Last axis only: another axis would need strided rows; the decomposition
// covers it.
int32_t softmax_supports(const DK_Kernel_Args* a) {
  const auto* attrs = fused_frame<DK_SoftmaxAttrs>(a, DK_FUSED_SOFTMAX, 1, DK_SoftmaxAttrs_STRUCT_SIZE);
  return attrs && dense_f32(a->inputs[0]) && dense_f32(a->outputs[0]) && a->inputs[0]->rank >= 1 &&
         attrs->axis == a->inputs[0]->rank - 1;
}

}  // namespace
}  // namespace dkcpu

using namespace dkcpu;

extern "C" {

int32_t dk_cpu_fused_rms_norm_supports(const DK_Kernel_Args* a) { return rms_norm_supports(a); }
int32_t dk_cpu_fused_layer_norm_supports(const DK_Kernel_Args* a) { return layer_norm_supports(a); }
int32_t dk_cpu_fused_softmax_supports(const DK_Kernel_Args* a) { return softmax_supports(a); }

DK_Error* dk_cpu_fused_rms_norm(const DK_Kernel_Args* a) {
  return launch_norm("cpu.Fused(rms_norm)", a, DK_FUSED_RMS_NORM, 2, rms_norm_supports);
}

DK_Error* dk_cpu_fused_layer_norm(const DK_Kernel_Args* a) {
  return launch_norm("cpu.Fused(layer_norm)", a, DK_FUSED_LAYER_NORM, 3, layer_norm_supports);
}

DK_Error* dk_cpu_fused_softmax(const DK_Kernel_Args* a) {
  const char* call = "cpu.Fused(softmax)";
  return guarded(call, [&]() -> DK_Error* {
    FusedViews v;
    if (DK_Error* e = load_fused(call, a, DK_FUSED_SOFTMAX, 1, softmax_supports, &v)) return e;
    if (DK_Error* e = check_same_shape(call, "output 0", v.out, v.in[0], "input 0")) return e;
    if (v.out_numel == 0) return nullptr;
    const int64_t d = v.in[0].shape[v.in[0].rank - 1];
    enqueue(a->stream, run_softmax,
            SoftmaxLaunch{reinterpret_cast<const float*>(v.in[0].data),
                          reinterpret_cast<float*>(v.out.data), v.out_numel / d, d});
    return nullptr;
  });
}

}  // extern "C"
