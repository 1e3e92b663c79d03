// scaled_dot_product_attention as one fused kernel (float32, contiguous
// q/k/v), flash-attention style: never materialises the Lq x Lk score matrix.
//
// Work item = (batch, query head, block of kBq query rows); items are split
// across cores. Each item walks the keys in tiles of kBk:
//   s = (q*scale) k_tile^T            (k_tile packed transposed, so the inner
//                                      loop runs along keys and vectorises)
//   mask: causal / bool / additive    (-inf for an excluded key)
//   online softmax per query row: running max m and sum l; when the max
//   grows, the row's accumulator and l are rescaled by exp(m_old - m_new)
//   acc += p v_tile
// and finally out = acc / l, or 0 for a row that saw no visible key (l == 0).
// Under is_causal, key tiles past the block's last query are never visited.
//
// Like matmul, the loops are compiled once per ISA level (target attributes)
// and picked at run time, so the AVX2+FMA build is used where the CPU has it.
#include <algorithm>
#include <vector>

#include "fused_common.h"
#include "parallel.h"

namespace dkcpu {
namespace {

constexpr int64_t kBq = 32, kBk = 64;

struct SdpaLaunch {
  const float* q;
  const float* k;
  const float* v;
  const char* mask;  // bool bytes or float32, strides in elements below
  float* out;
  int64_t mask_strides[4];
  int32_t mask_kind, causal;
  int64_t b, hq, hkv, lq, lk, d, dv;
  float scale;
};

#define DKCPU_INLINE inline __attribute__((always_inline))

// One work item. `scratch` holds kBq*d + d*kBk + kBq*dv floats.
DKCPU_INLINE void attend_block(const SdpaLaunch& L, int64_t item, float* scratch) {
  const int64_t qblocks = (L.lq + kBq - 1) / kBq;
  const int64_t bh = item / qblocks, i0 = (item % qblocks) * kBq;
  const int64_t nq = std::min(kBq, L.lq - i0);
  const int64_t b = bh / L.hq, h = bh % L.hq, hk = h / (L.hq / L.hkv);
  const int64_t d = L.d, dv = L.dv;
  const float* q = L.q + ((b * L.hq + h) * L.lq + i0) * d;
  const float* k = L.k + (b * L.hkv + hk) * L.lk * d;
  const float* v = L.v + (b * L.hkv + hk) * L.lk * dv;
  float* out = L.out + ((b * L.hq + h) * L.lq + i0) * dv;
  const char* mask = L.mask + (b * L.mask_strides[0] + h * L.mask_strides[1]) *
                                  (L.mask_kind == DK_SDPA_MASK_BOOL ? 1 : 4);
  float* __restrict qs = scratch;                // [kBq][d], q * scale
  float* __restrict kt = qs + kBq * d;           // [d][kBk], the key tile transposed
  float* __restrict acc = kt + d * kBk;          // [kBq][dv]
  float m[kBq], l[kBq], s[kBk];
  for (int64_t i = 0; i < nq; ++i) {
    for (int64_t c = 0; c < d; ++c) qs[i * d + c] = q[i * d + c] * L.scale;
    for (int64_t c = 0; c < dv; ++c) acc[i * dv + c] = 0.0f;
    m[i] = -INFINITY;
    l[i] = 0.0f;
  }
  const int64_t kend = L.causal ? std::min(L.lk, i0 + nq) : L.lk;  // later keys: all masked
  for (int64_t j0 = 0; j0 < kend; j0 += kBk) {
    const int64_t nk = std::min(kBk, kend - j0);
    for (int64_t jj = 0; jj < kBk; ++jj)
      for (int64_t c = 0; c < d; ++c) kt[c * kBk + jj] = jj < nk ? k[(j0 + jj) * d + c] : 0.0f;
    for (int64_t i = 0; i < nq; ++i) {
      const int64_t qi = i0 + i;
      if (L.causal && j0 > qi) continue;  // the whole tile is in this row's future
      for (int64_t jj = 0; jj < kBk; ++jj) s[jj] = 0.0f;
      for (int64_t c = 0; c < d; ++c) {
        const float qv = qs[i * d + c];
        for (int64_t jj = 0; jj < kBk; ++jj) s[jj] += qv * kt[c * kBk + jj];
      }
      const char* mrow = mask + qi * L.mask_strides[2] * (L.mask_kind == DK_SDPA_MASK_BOOL ? 1 : 4);
      if (L.mask_kind == DK_SDPA_MASK_BOOL) {
        for (int64_t jj = 0; jj < nk; ++jj)
          if (!mrow[(j0 + jj) * L.mask_strides[3]]) s[jj] = -INFINITY;
      } else if (L.mask_kind == DK_SDPA_MASK_ADDITIVE) {
        const float* f = reinterpret_cast<const float*>(mrow);
        for (int64_t jj = 0; jj < nk; ++jj) s[jj] += f[(j0 + jj) * L.mask_strides[3]];
      }
      if (L.causal)
        for (int64_t jj = std::max<int64_t>(0, qi + 1 - j0); jj < nk; ++jj) s[jj] = -INFINITY;
      float tile_max = -INFINITY;
      for (int64_t jj = 0; jj < nk; ++jj) tile_max = max_nan(tile_max, s[jj]);
      const float m_new = max_nan(m[i], tile_max);
      if (m_new == -INFINITY) continue;  // nothing visible yet in this row
      const float alpha = exp_nonpositive(m[i] - m_new);  // 0 on the first visible tile
      float psum = 0.0f;
      for (int64_t jj = 0; jj < nk; ++jj) {
        s[jj] = exp_nonpositive(s[jj] - m_new);
        psum += s[jj];
      }
      l[i] = l[i] * alpha + psum;
      m[i] = m_new;
      float* __restrict arow = acc + i * dv;
      if (alpha != 1.0f)
        for (int64_t c = 0; c < dv; ++c) arow[c] *= alpha;
      for (int64_t jj = 0; jj < nk; ++jj) {
        const float p = s[jj];
        if (p == 0.0f) continue;  // an excluded key contributes nothing, NaN in v included
        const float* __restrict vrow = v + (j0 + jj) * dv;
        for (int64_t c = 0; c < dv; ++c) arow[c] += p * vrow[c];
      }
    }
  }
  for (int64_t i = 0; i < nq; ++i) {
    // l == 0 only when no key was visible: the header's 0 output, not 0/0.
    const float inv = l[i] == 0.0f ? 0.0f : 1.0f / l[i];
    for (int64_t c = 0; c < dv; ++c) out[i * dv + c] = acc[i * dv + c] * inv;
  }
}

void attend_range(const SdpaLaunch& L, int64_t begin, int64_t end, float* scratch) {
  for (int64_t it = begin; it < end; ++it) attend_block(L, it, scratch);
}

__attribute__((target("avx2,fma"))) void attend_range_avx2(const SdpaLaunch& L, int64_t begin,
                                                           int64_t end, float* scratch) {
  for (int64_t it = begin; it < end; ++it) attend_block(L, it, scratch);
}

// 512-bit vectors: each key tile row (kBk = 64 floats) is four registers.
__attribute__((target("avx512f,avx512vl,avx2,fma,prefer-vector-width=512")))
void attend_range_avx512(const SdpaLaunch& L, int64_t begin, int64_t end, float* scratch) {
  for (int64_t it = begin; it < end; ++it) attend_block(L, it, scratch);
}

enum class Isa { kGeneric, kAvx2, kAvx512 };

Isa detect_isa() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl")) return Isa::kAvx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::kAvx2;
  return Isa::kGeneric;
}

DK_Error* run_sdpa(const void* payload) {
  const SdpaLaunch L = *static_cast<const SdpaLaunch*>(payload);
  static const Isa isa = detect_isa();
  const int64_t items = L.b * L.hq * ((L.lq + kBq - 1) / kBq);
  parallel_for(items, 1, [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> scratch;  // grows once per thread, then reused
    scratch.resize(size_t(kBq * L.d + L.d * kBk + kBq * L.dv));
    if (isa == Isa::kAvx512) attend_range_avx512(L, begin, end, scratch.data());
    else if (isa == Isa::kAvx2) attend_range_avx2(L, begin, end, scratch.data());
    else attend_range(L, begin, end, scratch.data());
  });
  return nullptr;
}

bool rank4(const DK_TensorView* v) { return v->rank == 4; }

// float32 dense rank-4 q, k, v and out; the mask as DK_SdpaAttrs says, rank 4
// with any strides (the SDK passes broadcast dims with stride 0), bool or
// float32. Grouped-query heads, Lq != Lk, empty dims: all handled.
int32_t sdpa_supports(const DK_Kernel_Args* a) {
  const auto* attrs = fused_frame<DK_SdpaAttrs>(a, DK_FUSED_SCALED_DOT_PRODUCT_ATTENTION, 4,
                                                DK_SdpaAttrs_STRUCT_SIZE);
  if (!attrs || (attrs->is_causal != 0 && attrs->is_causal != 1)) return 0;
  for (int i = 0; i < 3; ++i) {
    if (!dense_f32(a->inputs[i]) || !rank4(a->inputs[i])) return 0;
  }
  if (!dense_f32(a->outputs[0]) || !rank4(a->outputs[0])) return 0;
  const DK_TensorView* mask = a->inputs[3];
  switch (attrs->mask_kind) {
    case DK_SDPA_MASK_NONE: return mask == nullptr;
    case DK_SDPA_MASK_BOOL: return is_view(mask) && rank4(mask) && mask->dtype == DK_DTYPE_BOOL;
    case DK_SDPA_MASK_ADDITIVE:
      return is_view(mask) && rank4(mask) && mask->dtype == DK_DTYPE_FLOAT32;
    default: return 0;
  }
}

DK_Error* bad_shape(const char* call, const FusedViews& v) {
  return make_error(DK_ERROR_INVALID_ARGUMENT, "%s: shapes q %s, k %s, v %s, mask %s, out %s do not "
                    "fit q [B,Hq,Lq,D], k [B,Hkv,Lk,D], v [B,Hkv,Lk,Dv], mask [B,Hq,Lq,Lk], out "
                    "[B,Hq,Lq,Dv] with Hq a multiple of Hkv", call, dims(v.in[0]).c_str(),
                    dims(v.in[1]).c_str(), dims(v.in[2]).c_str(),
                    v.present[3] ? dims(v.in[3]).c_str() : "none", dims(v.out).c_str());
}

}  // namespace
}  // namespace dkcpu

using namespace dkcpu;

extern "C" {

int32_t dk_cpu_fused_sdpa_supports(const DK_Kernel_Args* a) { return sdpa_supports(a); }

DK_Error* dk_cpu_fused_sdpa(const DK_Kernel_Args* a) {
  const char* call = "cpu.Fused(scaled_dot_product_attention)";
  return guarded(call, [&]() -> DK_Error* {
    FusedViews v;
    if (DK_Error* e = load_fused(call, a, DK_FUSED_SCALED_DOT_PRODUCT_ATTENTION, 4, sdpa_supports, &v))
      return e;
    const int64_t* q = v.in[0].shape;
    const int64_t* k = v.in[1].shape;
    const int64_t* val = v.in[2].shape;
    const int64_t* o = v.out.shape;
    const bool fits = k[0] == q[0] && val[0] == q[0] && k[1] >= 1 && q[1] % k[1] == 0 &&
                      val[1] == k[1] && val[2] == k[2] && k[3] == q[3] && o[0] == q[0] &&
                      o[1] == q[1] && o[2] == q[2] && o[3] == val[3];
    const int64_t* ms = v.in[3].shape;
    if (!fits || (v.present[3] && (ms[0] != q[0] || ms[1] != q[1] || ms[2] != q[2] || ms[3] != k[2])))
      return bad_shape(call, v);
    if (v.out_numel == 0) return nullptr;
    const auto* attrs = static_cast<const DK_SdpaAttrs*>(a->attrs);
    SdpaLaunch l{};
    l.q = reinterpret_cast<const float*>(v.in[0].data);
    l.k = reinterpret_cast<const float*>(v.in[1].data);
    l.v = reinterpret_cast<const float*>(v.in[2].data);
    l.mask = v.present[3] ? v.in[3].data : nullptr;
    for (int i = 0; i < 4; ++i) l.mask_strides[i] = v.present[3] ? v.in[3].strides[i] : 0;
    l.out = reinterpret_cast<float*>(v.out.data);
    l.mask_kind = attrs->mask_kind;
    l.causal = attrs->is_causal;
    l.b = q[0]; l.hq = q[1]; l.hkv = k[1]; l.lq = q[2]; l.lk = k[2]; l.d = q[3]; l.dv = val[3];
    l.scale = float(attrs->scale);
    enqueue(a->stream, run_sdpa, l);
    return nullptr;
  });
}

}  // extern "C"
