// scaled_dot_product_attention as one fused kernel (float32 q/k/v whose
// last dim is unit-stride, any strides elsewhere: the permuted views that
// x.reshape(B, L, H, D).transpose(1, 2) makes are read in place; the mask
// bool or additive float32, any strides): the supports predicate, the
// launch's checks, and the plain kernel. float16 / bfloat16 q/k/v (and an
// additive mask of their dtype or float32) are widened to dense float32
// copies, run through the same float32 launch, and out is rounded once
// (run_sdpa_half).
//
// The plain kernel takes one query row at a time: its scores against every
// key it may see (q is scaled before the dot products, as the header
// prescribes), masked (causal / bool: -inf; additive: added), a
// max-subtracted softmax, and the p-weighted sum of v rows. Under is_causal
// the keys after the query are never read (the header allows skipping keys
// masked for the query); a key masked otherwise has p = 0, and 0 * v still
// reads v, so a NaN or inf in v there propagates, as in the decomposition. A
// row that sees no key at all gets 0, the header's result for a fully masked
// row.
//
// With the fast paths built (DKCPU_FAST) a launch runs fast/attention.cpp
// instead: the flash-style kernel (key tiles, register-tiled GEMMs, online
// softmax), the same rules, about 7x faster than this one at 8 heads of
// 1024 x 64, causal.
#include <algorithm>
#include <cmath>
#include <vector>

#include "fused_common.h"
#include "fused_half.h"
#include "parallel.h"
#if DKCPU_FAST
#include "fast/fast.h"
#endif

namespace dkcpu {
namespace {

// Query rows [r0, r1) of all B * Hq * Lq; s and acc are scratch of Lk and Dv
// floats. (Unused with DKCPU_FAST: fast::sdpa.)
[[maybe_unused]] void attend_rows(const SdpaLaunch& L, int64_t r0, int64_t r1, float* s,
                                  float* acc) {
  const int64_t mask_esize = L.mask_kind == DK_SDPA_MASK_BOOL ? 1 : 4;
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t i = r % L.lq, h = (r / L.lq) % L.hq, b = r / (L.lq * L.hq);
    const int64_t hk = h / (L.hq / L.hkv);  // grouped-query: Hq / Hkv query heads per k/v head
    const float* q = L.q + b * L.q_strides[0] + h * L.q_strides[1] + i * L.q_strides[2];
    const float* k = L.k + b * L.k_strides[0] + hk * L.k_strides[1];  // key j: k + j * ks
    const float* v = L.v + b * L.v_strides[0] + hk * L.v_strides[1];
    const int64_t ks = L.k_strides[2], vs = L.v_strides[2];
    const char* mrow =
        L.mask +
        (b * L.mask_strides[0] + h * L.mask_strides[1] + i * L.mask_strides[2]) * mask_esize;
    const int64_t nk = L.causal ? std::min(L.lk, i + 1) : L.lk;  // later keys: masked
    float m = -INFINITY;
    for (int64_t j = 0; j < nk; ++j) {
      float dot = 0.0f;
      for (int64_t c = 0; c < L.d; ++c) dot += (q[c] * L.scale) * k[j * ks + c];
      if (L.mask_kind == DK_SDPA_MASK_BOOL && !mrow[j * L.mask_strides[3]]) dot = -INFINITY;
      if (L.mask_kind == DK_SDPA_MASK_ADDITIVE)
        dot += reinterpret_cast<const float*>(mrow)[j * L.mask_strides[3]];
      s[j] = dot;
      m = s[j] > m ? s[j] : m;  // skips a NaN score; its p = exp(NaN) makes the row NaN
    }
    // No visible key: every p is exp(-inf) = 0 (not exp(-inf - -inf)), and l == 0.
    const float shift = m == -INFINITY ? 0.0f : m;
    float l = 0.0f;
    std::fill(acc, acc + L.dv, 0.0f);
    for (int64_t j = 0; j < nk; ++j) {
      const float p = std::exp(s[j] - shift);
      l += p;
      for (int64_t c = 0; c < L.dv; ++c) acc[c] += p * v[j * vs + c];
    }
    const float inv = l == 0.0f ? 0.0f : 1.0f / l;
    for (int64_t c = 0; c < L.dv; ++c) L.out[r * L.dv + c] = acc[c] * inv;
  }
}

DK_Error* run_sdpa(const void* payload) {
  const SdpaLaunch L = *static_cast<const SdpaLaunch*>(payload);
#if DKCPU_FAST
  fast::sdpa(L);
#else
  parallel_for(L.b * L.hq * L.lq, 16, [&](int64_t r0, int64_t r1) {
    thread_local std::vector<float> scratch;  // grows once per thread, then reused
    scratch.resize(size_t(L.lk + L.dv));
    attend_rows(L, r0, r1, scratch.data(), scratch.data() + L.lk);
  });
#endif
  return nullptr;
}

bool rank4(const DK_TensorView* v) { return v->rank == 4; }

// A float16 / bfloat16 launch: `l` as the float32 launch would be, its q, k,
// v, out and (an additive mask of the inputs' dtype) mask still pointing at
// the 16-bit views; run_sdpa_half swaps in float32 copies.
struct SdpaHalf {
  SdpaLaunch l;
  DK_DType dtype;
  bool widen_mask;  // an additive mask of `dtype` (else bool, float32 or none: read as is)
  int64_t mask_elements;  // the mask's span in elements, from its data pointer
};

DK_Error* run_sdpa_half(const void* payload) {
  const SdpaHalf h = *static_cast<const SdpaHalf*>(payload);
  SdpaLaunch l = h.l;
  const int64_t qs[4] = {l.b, l.hq, l.lq, l.d}, ks[4] = {l.b, l.hkv, l.lk, l.d},
                vs[4] = {l.b, l.hkv, l.lk, l.dv};
  const std::vector<float> q = widen_rows4(h.dtype, l.q, qs, l.q_strides);
  const std::vector<float> k = widen_rows4(h.dtype, l.k, ks, l.k_strides);
  const std::vector<float> v = widen_rows4(h.dtype, l.v, vs, l.v_strides);
  // The mask keeps its strides (broadcast dims stay stride 0): its span is
  // widened as it lies in memory.
  const std::vector<float> mask =
      h.widen_mask ? widen_all(h.dtype, l.mask, h.mask_elements) : std::vector<float>();
  std::vector<float> out(size_t(l.b * l.hq * l.lq * l.dv));
  l.q = q.data();
  l.k = k.data();
  l.v = v.data();
  dense_strides4(qs, l.q_strides);
  dense_strides4(ks, l.k_strides);
  dense_strides4(vs, l.v_strides);
  if (h.widen_mask) l.mask = reinterpret_cast<const char*>(mask.data());
  void* out16 = l.out;
  l.out = out.data();
  run_sdpa(&l);
  narrow_all(h.dtype, out.data(), out16, int64_t(out.size()));
  return nullptr;
}

// Strides of dims 0..2 of a q, k or v the launch read; 0 for an empty view,
// which is never read (its data may be NULL: the pointer stays unmoved).
void row_strides(const View& v, int64_t* s) {
  const bool empty = v.shape[0] == 0 || v.shape[1] == 0 || v.shape[2] == 0 || v.shape[3] == 0;
  for (int d = 0; d < 3; ++d) s[d] = empty ? 0 : v.strides[d];
}

// rank-4 q, k, v of dtype T as rows_as says, a dense rank-4 out of dtype T;
// the mask as DK_SdpaAttrs says, rank 4 with any strides (the SDK passes
// broadcast dims with stride 0), bool or additive (additive_mask_as).
// Grouped-query heads, Lq != Lk, empty dims: all handled. A view whose last
// dim is strided (k transposed in memory) is declined: the SDK then decomposes.
template <DK_DType T> int32_t sdpa_supports(const DK_Kernel_Args* a) {
  const auto* attrs = fused_frame<DK_SdpaAttrs>(a, DK_FUSED_SCALED_DOT_PRODUCT_ATTENTION, 4,
                                                DK_SdpaAttrs_STRUCT_SIZE);
  if (!attrs || (attrs->is_causal != 0 && attrs->is_causal != 1)) return 0;
  for (int i = 0; i < 3; ++i) {
    if (!rows_as(a->inputs[i], T)) return 0;
  }
  if (!dense_as(a->outputs[0], T) || !rank4(a->outputs[0])) return 0;
  const DK_TensorView* mask = a->inputs[3];
  switch (attrs->mask_kind) {
    case DK_SDPA_MASK_NONE: return mask == nullptr;
    case DK_SDPA_MASK_BOOL: return is_view(mask) && rank4(mask) && mask->dtype == DK_DTYPE_BOOL;
    case DK_SDPA_MASK_ADDITIVE: return additive_mask_as(mask, T);
    default: return 0;
  }
}

DK_Error* bad_shape(const char* call, const FusedViews& v) {
  return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                   "%s: shapes q %s, k %s, v %s, mask %s, out %s do not "
                   "fit q [B,Hq,Lq,D], k [B,Hkv,Lk,D], v [B,Hkv,Lk,Dv], mask [B,Hq,Lq,Lk], out "
                   "[B,Hq,Lq,Dv] with Hq a multiple of Hkv",
                   call, dims(v.in[0]).c_str(), dims(v.in[1]).c_str(), dims(v.in[2]).c_str(),
                   v.present[3] ? dims(v.in[3]).c_str() : "none", dims(v.out).c_str());
}

}  // namespace

void sdpa_f32(const SdpaLaunch& l) { run_sdpa(&l); }

}  // namespace dkcpu

using namespace dkcpu;

extern "C" {

static DK_Error* launch_sdpa(const DK_Kernel_Args* a, DK_FusedSupportsFn* supports) {
  const char* call = "cpu.Fused(scaled_dot_product_attention)";
  return guarded(call, [&]() -> DK_Error* {
    FusedViews v;
    if (DK_Error* e = load_fused(call, a, DK_FUSED_SCALED_DOT_PRODUCT_ATTENTION, 4, supports, &v))
      return e;
    const int64_t* q = v.in[0].shape;
    const int64_t* k = v.in[1].shape;
    const int64_t* val = v.in[2].shape;
    const int64_t* o = v.out.shape;
    const bool fits = k[0] == q[0] && val[0] == q[0] && k[1] >= 1 && q[1] % k[1] == 0 &&
                      val[1] == k[1] && val[2] == k[2] && k[3] == q[3] && o[0] == q[0] &&
                      o[1] == q[1] && o[2] == q[2] && o[3] == val[3];
    const int64_t* ms = v.in[3].shape;
    if (!fits ||
        (v.present[3] && (ms[0] != q[0] || ms[1] != q[1] || ms[2] != q[2] || ms[3] != k[2])))
      return bad_shape(call, v);
    if (v.out_numel == 0) return nullptr;
    const auto* attrs = static_cast<const DK_SdpaAttrs*>(a->attrs);
    SdpaLaunch l{};
    l.q = reinterpret_cast<const float*>(v.in[0].data);
    l.k = reinterpret_cast<const float*>(v.in[1].data);
    l.v = reinterpret_cast<const float*>(v.in[2].data);
    row_strides(v.in[0], l.q_strides);
    row_strides(v.in[1], l.k_strides);
    row_strides(v.in[2], l.v_strides);
    l.mask = v.present[3] ? v.in[3].data : nullptr;
    for (int i = 0; i < 4; ++i) l.mask_strides[i] = v.present[3] ? v.in[3].strides[i] : 0;
    l.out = reinterpret_cast<float*>(v.out.data);
    l.mask_kind = attrs->mask_kind;
    l.causal = attrs->is_causal;
    l.b = q[0];
    l.hq = q[1];
    l.hkv = k[1];
    l.lq = q[2];
    l.lk = k[2];
    l.d = q[3];
    l.dv = val[3];
    l.scale = float(attrs->scale);
    const DK_DType t = v.in[0].dtype;
    if (is_half(t)) {
      const bool widen_mask = v.present[3] && v.in[3].dtype == t;
      enqueue(a->stream, run_sdpa_half,
              SdpaHalf{l, t, widen_mask, widen_mask ? span_elements(v.in[3]) : 0});
      return nullptr;
    }
    enqueue(a->stream, run_sdpa, l);
    return nullptr;
  });
}

int32_t dk_cpu_fused_sdpa_supports(const DK_Kernel_Args* a) {
  return sdpa_supports<DK_DTYPE_FLOAT32>(a);
}
int32_t dk_cpu_fused_sdpa_bf16_supports(const DK_Kernel_Args* a) {
  return sdpa_supports<DK_DTYPE_BFLOAT16>(a);
}
int32_t dk_cpu_fused_sdpa_f16_supports(const DK_Kernel_Args* a) {
  return sdpa_supports<DK_DTYPE_FLOAT16>(a);
}

DK_Error* dk_cpu_fused_sdpa(const DK_Kernel_Args* a) {
  return launch_sdpa(a, sdpa_supports<DK_DTYPE_FLOAT32>);
}
DK_Error* dk_cpu_fused_sdpa_bf16(const DK_Kernel_Args* a) {
  return launch_sdpa(a, sdpa_supports<DK_DTYPE_BFLOAT16>);
}
DK_Error* dk_cpu_fused_sdpa_f16(const DK_Kernel_Args* a) {
  return launch_sdpa(a, sdpa_supports<DK_DTYPE_FLOAT16>);
}

}  // extern "C"
