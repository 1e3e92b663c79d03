// What the fused kernels (kernels_fused.cpp, kernels_attention.cpp) share:
// the cheap checks their `supports` predicates make, the full validation
// their launches make, an exp the compiler can vectorise, and the launch
// records and row math that their fast paths (src/fast/) reuse, so a fast
// path computes a norm row with the very same arithmetic.
//
// supports() must be pure, fast and allocation-free, so it reads the raw
// views and never builds an error. launch() first runs the kernel's own
// supports() (a launch never computes what its predicate declines), then the
// same strict checks every base kernel makes (struct sizes, device, stream,
// device memory, aliasing).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "kernel_common.h"

namespace dkcpu {

// ---- For supports(): no allocation, no error objects -----------------------

inline bool is_view(const DK_TensorView* v) {
  return v != nullptr && v->struct_size >= DK_TensorView_STRUCT_SIZE && v->rank >= 0 &&
         v->rank <= DK_MAX_RANK && (v->rank == 0 || (v->shape && v->strides));
}

// A dense (row-major contiguous) view of dtype t.
inline bool dense_as(const DK_TensorView* v, DK_DType t) {
  return is_view(v) && v->dtype == t && dkh_is_contiguous(v->rank, v->shape, v->strides);
}

inline bool dense_f32(const DK_TensorView* v) { return dense_as(v, DK_DTYPE_FLOAT32); }

// The args' frame: the right op, arity and attribute struct, and output 0
// present (a backward op's later outputs may be NULL: not wanted). NULL when not.
template <class Attrs> inline const Attrs* fused_frame(const DK_Kernel_Args* a, DK_FusedOpId op,
                                                       int32_t num_inputs, size_t attrs_size,
                                                       int32_t num_outputs = 1) {
  if (a == nullptr || a->struct_size < DK_Kernel_Args_STRUCT_SIZE || a->op != op ||
      a->num_inputs != num_inputs || a->num_outputs != num_outputs || !a->inputs || !a->outputs ||
      !a->outputs[0]) {
    return nullptr;
  }
  const auto* attrs = static_cast<const Attrs*>(a->attrs);
  return attrs && attrs->struct_size >= attrs_size ? attrs : nullptr;
}

// A rank-4 q, k, v, out or dout of dtype t the attention kernels read in
// place: its rows (the last dim) unit-stride, or of size 1; any non-negative
// strides in dims 0..2 (permuted heads, a piece of a split, a broadcast). A
// view with no elements is never read, whatever its strides (the header's
// rule for empty views).
inline bool rows_as(const DK_TensorView* v, DK_DType t) {
  if (!is_view(v) || v->dtype != t || v->rank != 4) return false;
  if (v->shape[0] == 0 || v->shape[1] == 0 || v->shape[2] == 0 || v->shape[3] == 0) return true;
  for (int d = 0; d < 3; ++d)
    if (v->strides[d] < 0) return false;
  return v->strides[3] == 1 || v->shape[3] == 1;
}

inline bool rows_f32(const DK_TensorView* v) { return rows_as(v, DK_DTYPE_FLOAT32); }

// Rows per parallel chunk of a row-wise fused kernel: about 32 Ki elements,
// so tiny rows still batch up.
inline int64_t row_grain(int64_t d) {
  return std::max<int64_t>(1, (int64_t(1) << 15) / std::max<int64_t>(d, 1));
}

// ---- For launch(): the strict checks, with messages --------------------------

// The most inputs and outputs of a fused op (scaled_dot_product_attention_backward:
// dout, q, k, v, out, mask -> dq, dk, dv).
constexpr int kMaxFusedInputs = 6, kMaxFusedOutputs = 3;

// Views of one fused call: inputs (present[i] false for an absent optional
// one) and outputs (outs_present[o] false for a gradient the SDK does not
// want; output 0 is always there). `out` and `out_numel` name output 0.
struct FusedViews {
  View in[kMaxFusedInputs];
  bool present[kMaxFusedInputs] = {};
  View outs[kMaxFusedOutputs];
  bool outs_present[kMaxFusedOutputs] = {};
  int64_t outs_numel[kMaxFusedOutputs] = {};
  View& out = outs[0];
  int64_t& out_numel = outs_numel[0];
};

inline bool overlaps(const View& x, const View& y) {
  return x.span_begin != x.span_end && y.span_begin != y.span_end && x.span_begin < y.span_end &&
         y.span_begin < x.span_end;
}

inline DK_Error* load_fused(const char* call, const DK_Kernel_Args* a, DK_FusedOpId op,
                            int32_t num_inputs, DK_FusedSupportsFn* supports, FusedViews* v,
                            int32_t num_outputs = 1) {
  DKCPU_CHECK_ARGS(call, a, DK_Kernel_Args);
  if (DK_Error* e = check_device(call, a->device)) return e;
  if (DK_Error* e = check_stream(call, a->stream, a->device)) return e;
  if (a->op != op || a->num_inputs != num_inputs || a->num_outputs != num_outputs) {
    return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                     "%s: args has op %d with %d input(s) and %d "
                     "output(s); expected DK_FusedOpId %d with %d and %d",
                     call, int(a->op), a->num_inputs, a->num_outputs, int(op), num_inputs,
                     num_outputs);
  }
  if (!supports(a)) {
    return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                     "%s: called with arguments its supports() "
                     "declines (dtype, layout, rank, attrs or sizes). Hint: the SDK must launch a "
                     "fused kernel only after its supports() returned 1.",
                     call);
  }
  int64_t n = 0;
  char what[32];
  for (int32_t i = 0; i < num_inputs; ++i) {
    if (a->inputs[i] == nullptr) continue;  // an absent optional input
    std::snprintf(what, sizeof what, "input %d", int(i));
    if (DK_Error* e = load_view(call, what, a, a->inputs[i], &v->in[i], &n)) return e;
    v->present[i] = true;
  }
  for (int32_t o = 0; o < num_outputs; ++o) {
    if (o > 0 && a->outputs[o] == nullptr) continue;  // an optional gradient not wanted
    std::snprintf(what, sizeof what, "output %d", int(o));
    if (DK_Error* e = load_view(call, what, a, a->outputs[o], &v->outs[o], &v->outs_numel[o]))
      return e;
    v->outs_present[o] = true;
  }
  // Outputs overlap no input and no other output: fused kernels never run in place.
  for (int32_t o = 0; o < num_outputs; ++o) {
    if (!v->outs_present[o]) continue;
    for (int32_t i = 0; i < num_inputs; ++i) {
      if (v->present[i] && overlaps(v->outs[o], v->in[i])) {
        return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                         "%s: output %d overlaps input %d in memory; "
                         "expected disjoint views (fused kernels never run in place)",
                         call, int(o), int(i));
      }
    }
    for (int32_t p = 0; p < o; ++p) {
      if (v->outs_present[p] && overlaps(v->outs[o], v->outs[p])) {
        return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                         "%s: outputs %d and %d overlap in memory; expected disjoint views", call,
                         int(p), int(o));
      }
    }
  }
  return nullptr;
}

// ---- Math -------------------------------------------------------------------

// exp(x) in plain arithmetic, so a loop over it vectorises (a call to expf
// does not): x = n*ln2 + r with |r| <= ln2/2, e^r by the Cephes polynomial
// (about 1 ulp), 2^n from its exponent bits. Meant for x <= 0, the only
// arguments a max-subtracted softmax has: exp(-inf) = 0, NaN stays NaN, and
// x < -87.3 gives 0 instead of a subnormal (an absolute error below 1e-38).
inline float exp_nonpositive(float x) {
  const float xc = x < -88.0f ? -88.0f : (x > 0.0f ? 0.0f : x);  // NaN passes both
  const float t = xc * 1.44269504088896341f + 12582912.0f;       // round to nearest:
  const float n = t - 12582912.0f;                                 // 1.5 * 2^23 trick
  const float r = (xc - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t t_bits;  // n sits in t's low significand bits: read it without a
  std::memcpy(&t_bits, &t, sizeof t_bits);  // float-to-int conversion (UB for NaN)
  // n in [-127, 0]; unsigned, so a NaN's garbage bits wrap instead of
  // overflowing (undefined behaviour that UBSan reports).
  const uint32_t bits = (uint32_t(t_bits) - 0x4B400000u + 127u) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

// NaN-propagating maximum (std::max would keep whichever side came first).
inline float max_nan(float a, float b) { return (b > a || b != b) ? b : a; }

// Reductions keep kLanes independent partial sums: the compiler may not
// reorder a single float sum (no -ffast-math here), but it vectorises
// kLanes-wide independent lanes, and the lanes are then added pairwise.
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

// ---- rms_norm / layer_norm rows (kernels_fused.cpp; fast/norm.cpp) ------------

struct NormLaunch {
  const float* x;
  const float* weight;  // NULL: 1
  const float* bias;    // NULL: 0 (layer_norm only)
  float* out;
  int64_t rows, d;
  float eps;
  bool centered;  // layer_norm subtracts the mean; rms_norm does not
};

struct NormStats { float mean, rstd; };

// One row's mean (0 for rms_norm) and 1 / sqrt(variance + eps).
DKCPU_INLINE NormStats norm_stats(const NormLaunch& l, const float* __restrict x) {
  const float mean = l.centered ? sum(x, l.d) / float(l.d) : 0.0f;
  // Two passes for layer_norm (the header prescribes a two-pass variance).
  const float var = sum_sq_centered(x, l.d, mean) / float(l.d);
  const float rstd = 1.0f / std::sqrt(var + l.eps);
  return {mean, rstd};
}

// y[i] = (x[i] - mean) * rstd * w[i] + b[i] (w, b NULL: skipped) over [i0, i1).
DKCPU_INLINE void norm_span(const float* __restrict x, const float* __restrict w,
                            const float* __restrict b, float* __restrict y, int64_t i0, int64_t i1,
                            float mean, float rstd) {
  if (w && b)
    for (int64_t i = i0; i < i1; ++i) y[i] = (x[i] - mean) * rstd * w[i] + b[i];
  else if (w)
    for (int64_t i = i0; i < i1; ++i) y[i] = (x[i] - mean) * rstd * w[i];
  else if (b)
    for (int64_t i = i0; i < i1; ++i) y[i] = (x[i] - mean) * rstd + b[i];
  else
    for (int64_t i = i0; i < i1; ++i) y[i] = (x[i] - mean) * rstd;
}

// ---- Attention (kernels_attention.cpp; fast/attention.cpp) ----------------------

// What an attention launch copies out of its views: q [B,Hq,Lq,D],
// k [B,Hkv,Lk,D], v [B,Hkv,Lk,Dv], each with unit stride in its last dim and
// any strides in the other three (the permuted views of x.reshape(B, L, H,
// D).transpose(1, 2)); out [B,Hq,Lq,Dv] dense; the mask [B,Hq,Lq,Lk] with
// any strides.
struct SdpaLaunch {
  const float* q;
  const float* k;
  const float* v;
  const char* mask;  // bool bytes or float32, strides in elements below
  float* out;
  int64_t q_strides[3], k_strides[3], v_strides[3];  // elements, dims 0..2
  int64_t mask_strides[4];
  int32_t mask_kind, causal;
  int64_t b, hq, hkv, lq, lk, d, dv;
  float scale;
};

}  // namespace dkcpu
