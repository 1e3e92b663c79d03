// The attention backward's work per (batch, kv head) group: what
// kernels_fused_backward.cpp runs in its plain build. (fast/attention.cpp
// replaces it with a block of query rows at a time as register-tiled GEMMs;
// this header still gives it the launch record, SdpaBackward.)
//
// Per query row i the scores s_j = (q_i * scale) . k_j and dp_j = dout_i . v_j
// are taken for all visible keys at once from transposed copies of the
// group's k and v (kt[c][j], vt[c][j], made once per group): the loop over j
// is unit-stride and vectorises, where a dot product per key was a chain of
// D dependent adds. Each sum still runs over c in order 0..D-1, as one dot
// product did. The per-key updates (dk_j, dv_j, dq_i) stay axpys over the
// row. dk and dv sum over every query row of every query head reading the kv
// head, in order, so they do not depend on the thread count.
#pragma once

#include <algorithm>
#include <cstdint>

#include "fused_common.h"

namespace dkcpu {

struct Rows4 {  // a rank-4 float32 view read row by row: element strides of dims 0..2
  const float* data;
  int64_t s0, s1, s2;
  const float* row(int64_t b, int64_t h, int64_t i) const {
    return data + b * s0 + h * s1 + i * s2;
  }
};

struct SdpaBackward {
  Rows4 dout, q, k, v, out;
  const char* mask;  // bool bytes or float32, strides below in elements
  int64_t mask_strides[4];
  int32_t mask_kind, causal;
  float* dq;  // dense [B,Hq,Lq,D]
  float* dk;  // dense [B,Hkv,Lk,D]
  float* dv;  // dense [B,Hkv,Lk,Dv]
  int64_t b, hq, hkv, lq, lk, d, dvd;
  float scale;
};

// Floats of scratch one group needs: kt, vt, the scores, dp and q scaled.
inline int64_t sdpa_backward_scratch(const SdpaBackward& L) {
  return (L.d + L.dvd + 2) * std::max<int64_t>(L.lk, 1) + std::max<int64_t>(L.d, 1);
}

// out[j] = sum over c in order of a[c] * t[c * lk + j], j < n.
DKCPU_INLINE void dots_by_key(const float* __restrict a, const float* __restrict t, int64_t dims,
                              int64_t lk, int64_t n, float* __restrict out) {
  for (int64_t j = 0; j < n; ++j) out[j] = 0.0f;
  for (int64_t c = 0; c < dims; ++c) {
    const float ac = a[c];
    const float* __restrict tc = t + c * lk;
    for (int64_t j = 0; j < n; ++j) out[j] += ac * tc[j];
  }
}

DKCPU_INLINE void sdpa_backward_group(const SdpaBackward& L, int64_t bi, int64_t g,
                                      float* scratch) {
  const int64_t group = L.hq / L.hkv, lk = L.lk, d = L.d, dvd = L.dvd;
  float* __restrict kt = scratch;
  float* __restrict vt = kt + d * lk;
  float* __restrict p = vt + dvd * lk;
  float* __restrict dp = p + lk;
  float* __restrict qs = dp + lk;
  for (int64_t j = 0; j < lk; ++j) {
    const float* kj = L.k.row(bi, g, j);
    const float* vj = L.v.row(bi, g, j);
    for (int64_t c = 0; c < d; ++c) kt[c * lk + j] = kj[c];
    for (int64_t c = 0; c < dvd; ++c) vt[c * lk + j] = vj[c];
  }
  float* dk = L.dk + (bi * L.hkv + g) * lk * d;
  float* dv = L.dv + (bi * L.hkv + g) * lk * dvd;
  std::fill(dk, dk + lk * d, 0.0f);
  std::fill(dv, dv + lk * dvd, 0.0f);
  const int64_t esize = L.mask_kind == DK_SDPA_MASK_BOOL ? 1 : 4;
  for (int64_t h = g * group; h < (g + 1) * group; ++h) {
    for (int64_t i = 0; i < L.lq; ++i) {
      float* __restrict dq = L.dq + ((bi * L.hq + h) * L.lq + i) * d;
      std::fill(dq, dq + d, 0.0f);
      const float* q = L.q.row(bi, h, i);
      for (int64_t c = 0; c < d; ++c) qs[c] = q[c] * L.scale;  // q scaled first, as forward
      const int64_t seen = L.causal ? std::min(i + 1, lk) : lk;
      dots_by_key(qs, kt, d, lk, seen, p);
      if (L.mask) {
        const char* mrow =
            L.mask +
            (bi * L.mask_strides[0] + h * L.mask_strides[1] + i * L.mask_strides[2]) * esize;
        const int64_t mstep = L.mask_strides[3] * esize;
        for (int64_t j = 0; j < seen; ++j) {
          if (L.mask_kind == DK_SDPA_MASK_BOOL && !mrow[j * mstep]) p[j] = -INFINITY;
          if (L.mask_kind == DK_SDPA_MASK_ADDITIVE)
            p[j] += *reinterpret_cast<const float*>(mrow + j * mstep);
        }
      }
      float m = -INFINITY;
      for (int64_t j = 0; j < seen; ++j) m = max_nan(m, p[j]);
      if (m == -INFINITY) continue;  // no visible key: no gradient from this row
      float total = 0.0f;
      for (int64_t j = 0; j < seen; ++j) total += (p[j] = exp_nonpositive(p[j] - m));
      const float inv = 1.0f / total;
      const float* __restrict go = L.dout.row(bi, h, i);
      const float* __restrict o = L.out.row(bi, h, i);
      float di = 0.0f;
      for (int64_t c = 0; c < dvd; ++c) di += go[c] * o[c];
      dots_by_key(go, vt, dvd, lk, seen, dp);
      for (int64_t j = 0; j < seen; ++j) {
        const float pj = p[j] * inv;
        if (pj == 0.0f) continue;
        const float* __restrict kj = L.k.row(bi, g, j);
        float* __restrict dvj = dv + j * dvd;
        float* __restrict dkj = dk + j * d;
        for (int64_t c = 0; c < dvd; ++c) dvj[c] += pj * go[c];
        const float ds = pj * (dp[j] - di) * L.scale;
        for (int64_t c = 0; c < d; ++c) dq[c] += ds * kj[c];
        for (int64_t c = 0; c < d; ++c) dkj[c] += ds * q[c];
      }
    }
  }
}

}  // namespace dkcpu
