// Fused backward kernels (device API 1.3): the gradients of rms_norm,
// layer_norm, softmax (last axis) and scaled_dot_product_attention in one
// launch each, float32, float16 or bfloat16 (the 16-bit ones computed in
// float32 on widened copies and rounded once, fused_half.h: the norms and
// softmax a block of rows at a time, attention on whole widened operands).
// With them beside the forward kernels, the SDK runs
// these composites fused while autograd records (see device_api.h, "Backward
// ops"); conformance checks them against the gradients of the decompositions.
//
// Every sum that spans several rows (dweight, dbias; dk and dv over the query
// rows of a kv head) is taken in one fixed order by one thread, so a result
// does not depend on the thread count.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "attention_backward.h"
#include "fused_common.h"
#include "fused_half.h"
#include "parallel.h"
#if DKCPU_FAST
#include "fast/fast.h"
#endif

namespace dkcpu {
namespace {

// An absent optional view, or a present dense one of dtype t.
bool absent_or_dense(const DK_TensorView* v, DK_DType t) { return v == nullptr || dense_as(v, t); }

const float* f32(const View& v) { return reinterpret_cast<const float*>(v.data); }
float* f32_out(const View& v) { return reinterpret_cast<float*>(v.data); }

// ---- rms_norm / layer_norm ------------------------------------------------------

struct NormBackward {
  const float* dout;
  const float* x;
  const float* weight;  // NULL: 1
  float* dx;
  float* dweight;  // NULL: not wanted
  float* dbias;    // NULL: not wanted (layer_norm only)
  int64_t rows, d;
  float eps;
  bool centered;
};

// dx of rows [r0, r1), and each row's stats into stats[r].
void norm_backward_rows(const NormBackward& l, NormStats* stats, int64_t r0, int64_t r1) {
  const NormLaunch stats_of{l.x, nullptr, nullptr, nullptr, l.rows, l.d, l.eps, l.centered};
  for (int64_t r = r0; r < r1; ++r) {
    const float* __restrict x = l.x + r * l.d;
    const float* __restrict g = l.dout + r * l.d;
    float* __restrict dx = l.dx + r * l.d;
    const NormStats s = norm_stats(stats_of, x);
    stats[r] = s;
    // dx = rstd * (wg - mean(wg) - xhat * mean(wg * xhat)); rms_norm has
    // no mean(wg) term (its mean is 0 and it does not centre).
    float sum_g = 0.0f, sum_gx = 0.0f;
    for (int64_t i = 0; i < l.d; ++i) {
      const float wg = l.weight ? g[i] * l.weight[i] : g[i];
      sum_g += wg;
      sum_gx += wg * ((x[i] - s.mean) * s.rstd);
    }
    const float mean_g = l.centered ? sum_g / float(l.d) : 0.0f;
    const float mean_gx = sum_gx / float(l.d);
    for (int64_t i = 0; i < l.d; ++i) {
      const float wg = l.weight ? g[i] * l.weight[i] : g[i];
      const float xhat = (x[i] - s.mean) * s.rstd;
      dx[i] = s.rstd * (wg - mean_g - xhat * mean_gx);
    }
  }
}

// dweight / dbias columns [c0, c1), each summed over the rows in row order.
// row(r, &g, &x) points g and x at row r's dout and x from column c0.
template <class Row> void norm_backward_columns(const NormBackward& l, const NormStats* stats,
                                                int64_t c0, int64_t c1, const Row& row) {
  const int64_t n = c1 - c0;
  float* __restrict dw = l.dweight ? l.dweight + c0 : nullptr;
  float* __restrict db = l.dbias ? l.dbias + c0 : nullptr;
  for (int64_t c = 0; c < n; ++c) {
    if (dw) dw[c] = 0.0f;
    if (db) db[c] = 0.0f;
  }
  for (int64_t r = 0; r < l.rows; ++r) {
    const float* g;
    const float* x;
    row(r, &g, &x);
    const NormStats s = stats[r];
    if (dw)
      for (int64_t c = 0; c < n; ++c) dw[c] += g[c] * ((x[c] - s.mean) * s.rstd);
    if (db)
      for (int64_t c = 0; c < n; ++c) db[c] += g[c];
  }
}

constexpr int64_t norm_backward_grain(int64_t d) {
  return std::max<int64_t>(1, (int64_t(1) << 14) / std::max<int64_t>(d, 1));
}

// dx row by row; then dweight/dbias column block by column block, each
// column summed over the rows in row order by one thread.
DK_Error* run_norm_backward(const void* payload) {
  const NormBackward l = *static_cast<const NormBackward*>(payload);
  std::vector<NormStats> stats(size_t(l.rows));
  parallel_for(l.rows, norm_backward_grain(l.d),
               [&](int64_t r0, int64_t r1) { norm_backward_rows(l, stats.data(), r0, r1); });
  if (!l.dweight && !l.dbias) return nullptr;
  parallel_for(l.d, 64, [&](int64_t c0, int64_t c1) {
    norm_backward_columns(l, stats.data(), c0, c1,
                          [&](int64_t r, const float** g, const float** x) {
                            *g = l.dout + r * l.d + c0;
                            *x = l.x + r * l.d + c0;
                          });
  });
  return nullptr;
}

// A float16 / bfloat16 norm backward: `l`'s pointers at the 16-bit views
// (dtype `dtype`), weight's included.
struct NormBackwardHalf {
  NormBackward l;
  DK_DType dtype;
};

// norm_backward_rows on blocks of widened rows (dx rounded once), then
// norm_backward_columns on widened column slices into float32 sums, each
// rounded once.
DK_Error* run_norm_backward_half(const void* payload) {
  const NormBackwardHalf h = *static_cast<const NormBackwardHalf*>(payload);
  const NormBackward& l16 = h.l;
  const DK_DType t = h.dtype;
  const int64_t d = l16.d;
  const std::vector<float> w = widen_all(t, l16.weight, d);
  std::vector<NormStats> stats(size_t(l16.rows));
  NormBackward l = l16;
  l.weight = l16.weight ? w.data() : nullptr;
  const void* in[2] = {l16.dout, l16.x};
  half_rows<2>(t, in, l16.dx, l16.rows, d, norm_backward_grain(d),
               [&](const float* const* i, float* dx, int64_t b0, int64_t n) {
                 NormBackward block = l;
                 block.dout = i[0];
                 block.x = i[1];
                 block.dx = dx;
                 norm_backward_rows(block, stats.data() + b0, 0, n);
               });
  if (l16.dweight == nullptr && l16.dbias == nullptr) return nullptr;
  std::vector<float> dweight(size_t(l16.dweight ? d : 0)), dbias(size_t(l16.dbias ? d : 0));
  l.dweight = l16.dweight ? dweight.data() : nullptr;
  l.dbias = l16.dbias ? dbias.data() : nullptr;
  constexpr int64_t kSlice = 256;  // columns widened at a time, per row
  parallel_for(d, 64, [&](int64_t c0, int64_t c1) {
    float gs[kSlice], xs[kSlice];
    for (int64_t s0 = c0; s0 < c1; s0 += kSlice) {
      const int64_t n = std::min(kSlice, c1 - s0);
      norm_backward_columns(l, stats.data(), s0, s0 + n,
                            [&](int64_t r, const float** g, const float** x) {
                              widen(t, at(l16.dout, r * d + s0), gs, n);
                              widen(t, at(l16.x, r * d + s0), xs, n);
                              *g = gs;
                              *x = xs;
                            });
    }
  });
  narrow_all(t, dweight.data(), l16.dweight, int64_t(dweight.size()));
  narrow_all(t, dbias.data(), l16.dbias, int64_t(dbias.size()));
  return nullptr;
}

// dout, x dense of dtype T (float32, float16 or bfloat16; rank >= 1), weight
// dense [d] of dtype T or absent; dx dense, dweight only with weight, each
// present output dense, all of dtype T.
template <DK_DType T>
int32_t norm_backward_supports(const DK_Kernel_Args* a, DK_FusedOpId op, int32_t num_outputs) {
  if (!fused_frame<DK_NormAttrs>(a, op, 3, DK_NormAttrs_STRUCT_SIZE, num_outputs)) return 0;
  if (!dense_as(a->inputs[0], T) || !dense_as(a->inputs[1], T) || a->inputs[1]->rank < 1) return 0;
  if (!absent_or_dense(a->inputs[2], T) || !dense_as(a->outputs[0], T)) return 0;
  if (a->outputs[1] && !a->inputs[2]) return 0;  // dweight without a weight
  for (int32_t o = 1; o < num_outputs; ++o) {
    if (!absent_or_dense(a->outputs[o], T)) return 0;
  }
  return 1;
}

template <DK_DType T> int32_t rms_norm_backward_supports(const DK_Kernel_Args* a) {
  return norm_backward_supports<T>(a, DK_FUSED_RMS_NORM_BACKWARD, 2);
}
template <DK_DType T> int32_t layer_norm_backward_supports(const DK_Kernel_Args* a) {
  return norm_backward_supports<T>(a, DK_FUSED_LAYER_NORM_BACKWARD, 3);
}

DK_Error* launch_norm_backward(const char* call, const DK_Kernel_Args* a, DK_FusedOpId op,
                               int32_t num_outputs, DK_FusedSupportsFn* supports) {
  return guarded(call, [&]() -> DK_Error* {
    FusedViews v;
    if (DK_Error* e = load_fused(call, a, op, 3, supports, &v, num_outputs)) return e;
    const View& x = v.in[1];
    if (DK_Error* e = check_same_shape(call, "input 0", v.in[0], x, "input 1")) return e;
    if (DK_Error* e = check_same_shape(call, "output 0", v.outs[0], x, "input 1")) return e;
    const int64_t d = x.shape[x.rank - 1];
    auto vector_d = [&](const View& t) { return t.rank == 1 && t.shape[0] == d; };
    if ((v.present[2] && !vector_d(v.in[2])) || (v.outs_present[1] && !vector_d(v.outs[1])) ||
        (num_outputs > 2 && v.outs_present[2] && !vector_d(v.outs[2]))) {
      return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                       "%s: weight, dweight and dbias must have shape [%lld] (the last dim of "
                       "x %s)",
                       call, (long long)d, dims(x).c_str());
    }
    if (v.outs_numel[0] == 0 && d == 0) return nullptr;
    const auto* attrs = static_cast<const DK_NormAttrs*>(a->attrs);
    NormBackward l{f32(v.in[0]),
                   f32(x),
                   v.present[2] ? f32(v.in[2]) : nullptr,
                   f32_out(v.outs[0]),
                   v.outs_present[1] ? f32_out(v.outs[1]) : nullptr,
                   num_outputs > 2 && v.outs_present[2] ? f32_out(v.outs[2]) : nullptr,
                   d ? v.outs_numel[0] / d : 0,
                   d,
                   float(attrs->eps),
                   op == DK_FUSED_LAYER_NORM_BACKWARD};
    if (is_half(x.dtype)) {
      enqueue(a->stream, run_norm_backward_half, NormBackwardHalf{l, x.dtype});
      return nullptr;
    }
    enqueue(a->stream, run_norm_backward, l);
    return nullptr;
  });
}

// ---- softmax over the last axis -------------------------------------------------

struct SoftmaxBackward {
  const float* dout;
  const float* out;
  float* dx;
  int64_t rows, d;
};

void softmax_backward_rows(const SoftmaxBackward& l, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* __restrict g = l.dout + r * l.d;
    const float* __restrict y = l.out + r * l.d;
    float* __restrict dx = l.dx + r * l.d;
    float dot = 0.0f;
    for (int64_t i = 0; i < l.d; ++i) dot += g[i] * y[i];
    for (int64_t i = 0; i < l.d; ++i) dx[i] = y[i] * (g[i] - dot);
  }
}

DK_Error* run_softmax_backward(const void* payload) {
  const SoftmaxBackward l = *static_cast<const SoftmaxBackward*>(payload);
  parallel_for(l.rows, row_grain(l.d),
               [&](int64_t r0, int64_t r1) { softmax_backward_rows(l, r0, r1); });
  return nullptr;
}

struct SoftmaxBackwardHalf {
  DK_DType dtype;
  const void* dout;
  const void* out;
  void* dx;
  int64_t rows, d;
};

DK_Error* run_softmax_backward_half(const void* payload) {
  const SoftmaxBackwardHalf h = *static_cast<const SoftmaxBackwardHalf*>(payload);
  const void* in[2] = {h.dout, h.out};
  half_rows<2>(h.dtype, in, h.dx, h.rows, h.d, row_grain(h.d),
               [&](const float* const* i, float* dx, int64_t, int64_t n) {
                 softmax_backward_rows(SoftmaxBackward{i[0], i[1], dx, n, h.d}, 0, n);
               });
  return nullptr;
}

template <DK_DType T> int32_t softmax_backward_supports(const DK_Kernel_Args* a) {
  const auto* attrs =
      fused_frame<DK_SoftmaxAttrs>(a, DK_FUSED_SOFTMAX_BACKWARD, 2, DK_SoftmaxAttrs_STRUCT_SIZE);
  return attrs && dense_as(a->inputs[0], T) && dense_as(a->inputs[1], T) &&
         dense_as(a->outputs[0], T) && a->inputs[1]->rank >= 1 &&
         attrs->axis == a->inputs[1]->rank - 1;
}

// ---- scaled_dot_product_attention --------------------------------------------------

Rows4 rows4(const View& v) { return {f32(v), v.strides[0], v.strides[1], v.strides[2]}; }

DK_Error* run_sdpa_backward(const void* payload) {
  const SdpaBackward L = *static_cast<const SdpaBackward*>(payload);
  parallel_for_may_throw(L.b * L.hkv, 1, [&](int64_t t0, int64_t t1) {
    std::vector<float> scratch(size_t(sdpa_backward_scratch(L)));
    for (int64_t t = t0; t < t1; ++t) {
#if DKCPU_FAST
      fast::sdpa_backward_group(L, t / L.hkv, t % L.hkv, scratch.data());
#else
      sdpa_backward_group(L, t / L.hkv, t % L.hkv, scratch.data());
#endif
    }
  });
  return nullptr;
}

// A float16 / bfloat16 attention backward: `l`'s views still the 16-bit
// ones; run_sdpa_backward_half swaps in dense float32 copies. It does not
// read out: D_i = dout_i . out_i would carry out's 16-bit rounding into
// ds_ij = p_ij (dout_i . v_j - D_i), where the two terms nearly cancel (up to
// ~3x the dtype's bound in dq and dk, conformance found); out is recomputed
// in float32 from the widened q, k, v instead, as the decomposition's
// gradient, which never rounds out, effectively does.
struct SdpaBackwardHalf {
  SdpaBackward l;
  DK_DType dtype;
  bool widen_mask;        // an additive mask of `dtype` (else bool, float32 or none)
  int64_t mask_elements;  // its span in elements, from its data pointer
};

// A Rows4 over a dense [n0, n1, n2, n3] float32 copy.
Rows4 dense_rows4(const std::vector<float>& v, const int64_t* shape) {
  return {v.data(), shape[1] * shape[2] * shape[3], shape[2] * shape[3], shape[3]};
}

std::vector<float> widen_rows4(DK_DType t, const Rows4& r, const int64_t* shape) {
  const int64_t s[3] = {r.s0, r.s1, r.s2};
  return dkcpu::widen_rows4(t, r.data, shape, s);
}

DK_Error* run_sdpa_backward_half(const void* payload) {
  const SdpaBackwardHalf h = *static_cast<const SdpaBackwardHalf*>(payload);
  SdpaBackward l = h.l;
  const int64_t o[4] = {l.b, l.hq, l.lq, l.dvd}, qs[4] = {l.b, l.hq, l.lq, l.d},
                ks[4] = {l.b, l.hkv, l.lk, l.d}, vs[4] = {l.b, l.hkv, l.lk, l.dvd};
  const std::vector<float> dout = widen_rows4(h.dtype, l.dout, o);
  const std::vector<float> q = widen_rows4(h.dtype, l.q, qs);
  const std::vector<float> k = widen_rows4(h.dtype, l.k, ks);
  const std::vector<float> v = widen_rows4(h.dtype, l.v, vs);
  const std::vector<float> mask =
      h.widen_mask ? widen_all(h.dtype, l.mask, h.mask_elements) : std::vector<float>();
  if (h.widen_mask) l.mask = reinterpret_cast<const char*>(mask.data());
  std::vector<float> out(size_t(l.b * l.hq * l.lq * l.dvd));
  SdpaLaunch f{};  // the forward on the float32 copies
  f.q = q.data();
  f.k = k.data();
  f.v = v.data();
  f.mask = l.mask;
  f.out = out.data();
  dense_strides4(qs, f.q_strides);
  dense_strides4(ks, f.k_strides);
  dense_strides4(vs, f.v_strides);
  for (int i = 0; i < 4; ++i) f.mask_strides[i] = l.mask_strides[i];
  f.mask_kind = l.mask_kind;
  f.causal = l.causal;
  f.b = l.b;
  f.hq = l.hq;
  f.hkv = l.hkv;
  f.lq = l.lq;
  f.lk = l.lk;
  f.d = l.d;
  f.dv = l.dvd;
  f.scale = l.scale;
  if (!out.empty()) sdpa_f32(f);
  std::vector<float> dq(size_t(l.b * l.hq * l.lq * l.d)), dk(size_t(l.b * l.hkv * l.lk * l.d)),
      dv(size_t(l.b * l.hkv * l.lk * l.dvd));
  void* const out16[3] = {l.dq, l.dk, l.dv};
  l.dout = dense_rows4(dout, o);
  l.q = dense_rows4(q, qs);
  l.k = dense_rows4(k, ks);
  l.v = dense_rows4(v, vs);
  l.out = dense_rows4(out, o);
  l.dq = dq.data();
  l.dk = dk.data();
  l.dv = dv.data();
  run_sdpa_backward(&l);
  narrow_all(h.dtype, dq.data(), out16[0], int64_t(dq.size()));
  narrow_all(h.dtype, dk.data(), out16[1], int64_t(dk.size()));
  narrow_all(h.dtype, dv.data(), out16[2], int64_t(dv.size()));
  return nullptr;
}

// dout, q, k, v, out: rank 4 of dtype T with unit-stride rows (any other
// strides); the mask as the forward kernel of dtype T takes it; dq, dk, dv
// dense, of dtype T.
template <DK_DType T> int32_t sdpa_backward_supports(const DK_Kernel_Args* a) {
  const auto* attrs = fused_frame<DK_SdpaAttrs>(a, DK_FUSED_SCALED_DOT_PRODUCT_ATTENTION_BACKWARD,
                                                6, DK_SdpaAttrs_STRUCT_SIZE, 3);
  if (!attrs || (attrs->is_causal != 0 && attrs->is_causal != 1)) return 0;
  for (int i = 0; i < 5; ++i) {
    if (!rows_as(a->inputs[i], T)) return 0;
  }
  for (int o = 0; o < 3; ++o) {
    if (!dense_as(a->outputs[o], T) || a->outputs[o]->rank != 4) return 0;
  }
  const DK_TensorView* mask = a->inputs[5];
  switch (attrs->mask_kind) {
    case DK_SDPA_MASK_NONE: return mask == nullptr;
    case DK_SDPA_MASK_BOOL: return is_view(mask) && mask->rank == 4 && mask->dtype == DK_DTYPE_BOOL;
    case DK_SDPA_MASK_ADDITIVE: return additive_mask_as(mask, T);
    default: return 0;
  }
}

bool same_dims(const View& v, int64_t a, int64_t b, int64_t c, int64_t d) {
  return v.shape[0] == a && v.shape[1] == b && v.shape[2] == c && v.shape[3] == d;
}

}  // namespace
}  // namespace dkcpu

using namespace dkcpu;

extern "C" {

static DK_Error* launch_softmax_backward(const DK_Kernel_Args* a, DK_FusedSupportsFn* supports) {
  const char* call = "cpu.Fused(softmax_backward)";
  return guarded(call, [&]() -> DK_Error* {
    FusedViews v;
    if (DK_Error* e = load_fused(call, a, DK_FUSED_SOFTMAX_BACKWARD, 2, supports, &v, 1)) return e;
    if (DK_Error* e = check_same_shape(call, "input 0", v.in[0], v.in[1], "input 1")) return e;
    if (DK_Error* e = check_same_shape(call, "output 0", v.outs[0], v.in[1], "input 1")) return e;
    const int64_t d = v.in[1].shape[v.in[1].rank - 1];
    if (v.outs_numel[0] == 0) return nullptr;
    if (is_half(v.in[1].dtype)) {
      enqueue(a->stream, run_softmax_backward_half,
              SoftmaxBackwardHalf{v.in[1].dtype, v.in[0].data, v.in[1].data, v.outs[0].data,
                                  v.outs_numel[0] / d, d});
      return nullptr;
    }
    enqueue(
        a->stream, run_softmax_backward,
        SoftmaxBackward{f32(v.in[0]), f32(v.in[1]), f32_out(v.outs[0]), v.outs_numel[0] / d, d});
    return nullptr;
  });
}

static DK_Error* launch_sdpa_backward(const DK_Kernel_Args* a, DK_FusedSupportsFn* supports) {
  const char* call = "cpu.Fused(scaled_dot_product_attention_backward)";
  return guarded(call, [&]() -> DK_Error* {
    FusedViews v;
    if (DK_Error* e =
            load_fused(call, a, DK_FUSED_SCALED_DOT_PRODUCT_ATTENTION_BACKWARD, 6, supports, &v, 3))
      return e;
    const View &q = v.in[1], &k = v.in[2], &val = v.in[3];
    const int64_t B = q.shape[0], Hq = q.shape[1], Lq = q.shape[2], D = q.shape[3];
    const int64_t Hkv = k.shape[1], Lk = k.shape[2], Dv = val.shape[3];
    const bool fits = Hkv >= 1 && Hq % Hkv == 0 && same_dims(k, B, Hkv, Lk, D) &&
                      same_dims(val, B, Hkv, Lk, Dv) && same_dims(v.in[0], B, Hq, Lq, Dv) &&
                      same_dims(v.in[4], B, Hq, Lq, Dv) && same_dims(v.outs[0], B, Hq, Lq, D) &&
                      same_dims(v.outs[1], B, Hkv, Lk, D) && same_dims(v.outs[2], B, Hkv, Lk, Dv) &&
                      (!v.present[5] || same_dims(v.in[5], B, Hq, Lq, Lk));
    if (!fits) {
      return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                       "%s: shapes dout %s, q %s, k %s, v %s, out %s, mask %s do not fit q "
                       "[B,Hq,Lq,D], k [B,Hkv,Lk,D], v [B,Hkv,Lk,Dv], dout and out [B,Hq,Lq,Dv], "
                       "mask [B,Hq,Lq,Lk] with Hq a multiple of Hkv (dq, dk, dv: q's, k's, v's)",
                       call, dims(v.in[0]).c_str(), dims(q).c_str(), dims(k).c_str(),
                       dims(val).c_str(), dims(v.in[4]).c_str(),
                       v.present[5] ? dims(v.in[5]).c_str() : "none");
    }
    if (v.outs_numel[0] == 0 && v.outs_numel[1] == 0 && v.outs_numel[2] == 0) return nullptr;
    const auto* attrs = static_cast<const DK_SdpaAttrs*>(a->attrs);
    SdpaBackward l{};
    l.dout = rows4(v.in[0]);
    l.q = rows4(q);
    l.k = rows4(k);
    l.v = rows4(val);
    l.out = rows4(v.in[4]);
    l.mask = v.present[5] ? v.in[5].data : nullptr;
    for (int i = 0; i < 4; ++i) l.mask_strides[i] = v.present[5] ? v.in[5].strides[i] : 0;
    l.mask_kind = attrs->mask_kind;
    l.causal = attrs->is_causal;
    l.dq = f32_out(v.outs[0]);
    l.dk = f32_out(v.outs[1]);
    l.dv = f32_out(v.outs[2]);
    l.b = B;
    l.hq = Hq;
    l.hkv = Hkv;
    l.lq = Lq;
    l.lk = Lk;
    l.d = D;
    l.dvd = Dv;
    l.scale = float(attrs->scale);
    if (is_half(q.dtype)) {
      const bool widen_mask = v.present[5] && v.in[5].dtype == q.dtype;
      enqueue(a->stream, run_sdpa_backward_half,
              SdpaBackwardHalf{l, q.dtype, widen_mask, widen_mask ? span_elements(v.in[5]) : 0});
      return nullptr;
    }
    enqueue(a->stream, run_sdpa_backward, l);
    return nullptr;
  });
}

// One extern pair per .def row: float32, bfloat16, float16.
#define DKCPU_BACKWARD_KERNELS(sfx, T)                                                             \
  int32_t dk_cpu_fused_rms_norm_backward##sfx##_supports(const DK_Kernel_Args* a) {                \
    return rms_norm_backward_supports<T>(a);                                                       \
  }                                                                                                \
  int32_t dk_cpu_fused_layer_norm_backward##sfx##_supports(const DK_Kernel_Args* a) {              \
    return layer_norm_backward_supports<T>(a);                                                     \
  }                                                                                                \
  int32_t dk_cpu_fused_softmax_backward##sfx##_supports(const DK_Kernel_Args* a) {                 \
    return softmax_backward_supports<T>(a);                                                        \
  }                                                                                                \
  int32_t dk_cpu_fused_sdpa_backward##sfx##_supports(const DK_Kernel_Args* a) {                    \
    return sdpa_backward_supports<T>(a);                                                           \
  }                                                                                                \
  DK_Error* dk_cpu_fused_rms_norm_backward##sfx(const DK_Kernel_Args* a) {                         \
    return launch_norm_backward("cpu.Fused(rms_norm_backward)", a, DK_FUSED_RMS_NORM_BACKWARD, 2,  \
                                rms_norm_backward_supports<T>);                                    \
  }                                                                                                \
  DK_Error* dk_cpu_fused_layer_norm_backward##sfx(const DK_Kernel_Args* a) {                       \
    return launch_norm_backward("cpu.Fused(layer_norm_backward)", a, DK_FUSED_LAYER_NORM_BACKWARD, \
                                3, layer_norm_backward_supports<T>);                               \
  }                                                                                                \
  DK_Error* dk_cpu_fused_softmax_backward##sfx(const DK_Kernel_Args* a) {                          \
    return launch_softmax_backward(a, softmax_backward_supports<T>);                               \
  }                                                                                                \
  DK_Error* dk_cpu_fused_sdpa_backward##sfx(const DK_Kernel_Args* a) {                             \
    return launch_sdpa_backward(a, sdpa_backward_supports<T>);                                     \
  }
DKCPU_BACKWARD_KERNELS(, DK_DTYPE_FLOAT32)
DKCPU_BACKWARD_KERNELS(_bf16, DK_DTYPE_BFLOAT16)
DKCPU_BACKWARD_KERNELS(_f16, DK_DTYPE_FLOAT16)
#undef DKCPU_BACKWARD_KERNELS

}  // extern "C"
