// Flash-style scaled_dot_product_attention, forward and backward, templates
// over the storage type T only (causal, mask kind, GQA, scale, sizes and
// strides are runtime parameters). Launched by kernels_fused_attention.cu.
//
// Shapes: q [B,Hq,Lq,D], k [B,Hkv,Lk,D], v [B,Hkv,Lk,Dv] read in place through
// their strides; out, dq, dk, dv dense. D, Dv <= kMaxHead.
//
// Forward (sdpa_forward): a block of kWarps warps takes kWarps query rows of
// one (batch, head), a warp per row. Key tiles of 32 rows of k and v are
// widened into shared memory; in a tile, lane j scores key j (q scaled
// before the dot product, as the header prescribes), the warp takes the
// tile's max, and the running max m, running sum l and the accumulator
// (lane-owned dims c = lane + 32 t of Dv) are rescaled: the online softmax,
// in float32. A key masked out (causal, bool false, beyond Lk) weighs 0; a
// row that sees no key gives 0.
//
// Backward: sdpa_backward_rows (a warp per query row, as the forward)
// recomputes the row's softmax (its shift m and sum l) and out = acc / l in
// float32 (never the rounded forward out: with a 16-bit out, dout.v -
// dout.out cancels), keeps m, 1/l and D = dout . out (scratch) for the key
// kernel, and then
// dq_i = scale * sum_j p_ij (dout_i . v_j - D_i) k_j over the key tiles.
// sdpa_backward_keys takes a warp per key row j of a kv head: over every
// query head of the group and every query row, in order, it recomputes
// p_ij from the row's m and 1/l (the same arithmetic as the row kernel) and
// sums dv_j = sum_i p_ij dout_i and dk_j = scale * sum_i ds_ij q_i. Each
// gradient element is summed by one thread in a fixed order (compensated,
// fused_device.h): no atomics, the same bits on every run.
#pragma once

#include "fused_device.h"

namespace dkcuda {
namespace fused {

constexpr int kMaxHead = 128;             // largest D and Dv the kernels take
constexpr int kPer = kMaxHead / 32;       // head dims a lane owns
constexpr int kWarps = 8;                 // query (or key) rows per block
constexpr int kTile = 32;                 // key (or query) rows per shared tile
constexpr int kPad = kMaxHead + 1;        // row stride of tiles read lane-per-row
constexpr int kTileElems = kTile * kPad;  // (odd: no shared-memory bank conflicts)

// What a mask input is, resolved at launch.
enum MaskKind { kMaskNone = 0, kMaskBool = 1, kMaskF32 = 2, kMaskT = 3 };

template <class T> struct SdpaArgs {
  const T* q;
  const T* k;
  const T* v;
  const T* dout;     // backward only
  const void* mask;  // as mask_kind says; strides in elements
  T* out;            // forward: out; backward: dq
  T* dk;             // backward only
  T* dv;             // backward only
  float* stats;      // backward: [B*Hq*Lq][3] shift m, 1/l, D (scratch)
  int64_t qs[4], ks[4], vs[4], ds[4], ms[4];  // element strides
  int64_t b, hq, hkv, lq, lk, d, dv_dim;
  int mask_kind, causal;
  float scale;
};

// Score bias of (batch b, head h, query i, key j): 0, -inf (bool false), or
// the additive mask's value.
template <class T>
DK_DEV float mask_at(const SdpaArgs<T>& a, int64_t b, int64_t h, int64_t i, int64_t j) {
  if (a.mask_kind == kMaskNone) return 0.0f;
  const int64_t o = b * a.ms[0] + h * a.ms[1] + i * a.ms[2] + j * a.ms[3];
  if (a.mask_kind == kMaskBool) return static_cast<const uint8_t*>(a.mask)[o] ? 0.0f : -INFINITY;
  if (a.mask_kind == kMaskF32) return static_cast<const float*>(a.mask)[o];
  return load(static_cast<const T*>(a.mask)[o]);
}

// The visible score of query i against key j, s = (q*scale).k + mask, or
// -inf when j is out of range or masked; qrow/krow index shared tiles.
template <class T, class S1, class S2>
DK_DEV float score(const SdpaArgs<T>& a, S1& qsh, int64_t qoff, S2& ksh, int64_t koff, int64_t b,
                   int64_t h, int64_t i, int64_t j) {
  if (j >= a.lk || i >= a.lq || (a.causal && j > i)) return -INFINITY;
  float s = 0.0f;
  for (int64_t c = 0; c < a.d; ++c) {
    const float qv = qsh[qoff + c], kv = ksh[koff + c];
    s += (qv * a.scale) * kv;
  }
  return s + mask_at(a, b, h, i, j);
}

// Loads keys [j0, j0 + 32) of kv head (b, g) into k and v tiles (row stride
// kPad), widened; rows beyond Lk are left unwritten (and never read).
template <class T, class S>
DK_DEV void load_kv_tile(const SdpaArgs<T>& a, S& ksh, S& vsh, int64_t b, int64_t g, int64_t j0) {
  const int t = dk_thread_x(), nt = dk_block_dim_x();
  const int64_t rows = a.lk - j0 < kTile ? a.lk - j0 : kTile;
  for (int64_t e = t; e < rows * a.d; e += nt) {
    const int64_t r = e / a.d, c = e % a.d;
    ksh[r * kPad + c] = load(a.k[b * a.ks[0] + g * a.ks[1] + (j0 + r) * a.ks[2] + c * a.ks[3]]);
  }
  for (int64_t e = t; e < rows * a.dv_dim; e += nt) {
    const int64_t r = e / a.dv_dim, c = e % a.dv_dim;
    vsh[r * kPad + c] = load(a.v[b * a.vs[0] + g * a.vs[1] + (j0 + r) * a.vs[2] + c * a.vs[3]]);
  }
}

// The online softmax of one query row over keys [0, Lk): its final shift
// (the max score, 0 when no key is visible), l (summed over the warp) and the lane's accumulator acc[t] for dims lane + 32 t. Every
// thread of the block calls it (it loads shared tiles between barriers);
// `active` says whether the warp's row exists. qsh holds the block's q rows
// (row stride kMaxHead) widened, loaded before the call.
template <class T, class SQ, class S>
DK_DEV void online_softmax(const SdpaArgs<T>& a, SQ& qsh, S& ksh, S& vsh, int64_t b, int64_t h,
                           int64_t g, int64_t i, int64_t i_last, bool active, float* m_out,
                           float* l_out, float* acc) {
  const int lane = dk_lane(), w = dk_thread_x() >> 5;
  float m = -INFINITY, l = 0.0f;
  for (int t = 0; t < kPer; ++t) acc[t] = 0.0f;
  // Under is_causal no query of the block sees keys after its last row.
  const int64_t keys = a.causal ? (i_last + 1 < a.lk ? i_last + 1 : a.lk) : a.lk;
  for (int64_t j0 = 0; j0 < keys; j0 += kTile) {
    dk_barrier();  // the previous tile is no longer read
    load_kv_tile(a, ksh, vsh, b, g, j0);
    dk_barrier();
    if (!active) continue;
    const float s =
        score(a, qsh, int64_t(w) * kMaxHead, ksh, int64_t(lane) * kPad, b, h, i, j0 + lane);
    // The tile's max skips NaN scores; their p = exp(NaN) makes the row NaN,
    // as the decomposition's softmax does. While no key is visible the
    // shift is 0, so every p is exp(-inf) = 0 (never exp(-inf - -inf)).
    const float m_new = max_skip_nan(m, warp_max_skip_nan(s));
    const float shift = m_new == -INFINITY ? 0.0f : m_new;
    const float corr = expf(m - shift);
    const float p = expf(s - shift);
    l = l * corr + p;  // the lane's partial sum, all lanes rescaled alike
    for (int t = 0; t < kPer; ++t) acc[t] *= corr;
    const int64_t n = a.lk - j0 < kTile ? a.lk - j0 : kTile;
    for (int jj = 0; jj < n; ++jj) {
      const float pj = dk_shfl_idx(p, jj);
      for (int t = 0; t < kPer; ++t) {
        const int64_t c = lane + 32 * t;
        if (c < a.dv_dim) {
          const float vv = vsh[int64_t(jj) * kPad + c];
          acc[t] += pj * vv;
        }
      }
    }
    m = m_new;
  }
  *m_out = m == -INFINITY ? 0.0f : m;  // the shift p_ij = exp(s_ij - shift) / l used
  *l_out = active ? warp_sum(l) : 0.0f;
}

// Loads the block's q rows (kWarps of them, row stride kMaxHead), widened.
template <class T, class SQ>
DK_DEV void load_q_rows(const SdpaArgs<T>& a, SQ& qsh, int64_t b, int64_t h, int64_t i0) {
  const int t = dk_thread_x(), nt = dk_block_dim_x();
  for (int64_t e = t; e < int64_t(kWarps) * a.d; e += nt) {
    const int64_t r = e / a.d, c = e % a.d;
    if (i0 + r < a.lq)
      qsh[r * kMaxHead + c] =
          load(a.q[b * a.qs[0] + h * a.qs[1] + (i0 + r) * a.qs[2] + c * a.qs[3]]);
  }
}

// Work items: (b, h, block of kWarps query rows), grid-stride.
template <class T> DK_KERNEL sdpa_forward(SdpaArgs<T> a) {
  DK_SHARED(float, qsh, kWarps* kMaxHead);
  DK_SHARED(float, ksh, kTileElems);
  DK_SHARED(float, vsh, kTileElems);
  const int lane = dk_lane(), w = dk_thread_x() >> 5;
  const int64_t qblocks = (a.lq + kWarps - 1) / kWarps;
  const int64_t items = a.b * a.hq * qblocks;
  for (int64_t it = dk_block_x(); it < items; it += dk_grid_dim_x()) {
    const int64_t qb = it % qblocks, h = (it / qblocks) % a.hq, b = it / (qblocks * a.hq);
    const int64_t g = h / (a.hq / a.hkv), i0 = qb * kWarps, i = i0 + w;
    const int64_t i_last = i0 + kWarps - 1 < a.lq - 1 ? i0 + kWarps - 1 : a.lq - 1;
    dk_barrier();  // the previous item's q rows are no longer read
    load_q_rows(a, qsh, b, h, i0);
    float m, l, acc[kPer];
    online_softmax(a, qsh, ksh, vsh, b, h, g, i, i_last, i < a.lq, &m, &l, acc);
    if (i < a.lq) {
      T* o = a.out + ((b * a.hq + h) * a.lq + i) * a.dv_dim;
      for (int t = 0; t < kPer; ++t) {
        const int64_t c = lane + 32 * t;  // acc / l: one rounding (0 when no key is visible)
        if (c < a.dv_dim) o[c] = store<T>(l == 0.0f ? 0.0f : acc[t] / l);
      }
    }
  }
}

template <class T> DK_KERNEL sdpa_backward_rows(SdpaArgs<T> a) {
  DK_SHARED(float, qsh, kWarps* kMaxHead);
  DK_SHARED(float, ksh, kTileElems);
  DK_SHARED(float, vsh, kTileElems);
  DK_SHARED(float, gsh, kWarps* kPad);  // the block's dout rows
  const int lane = dk_lane(), w = dk_thread_x() >> 5, nt = dk_block_dim_x();
  const int64_t qblocks = (a.lq + kWarps - 1) / kWarps;
  const int64_t items = a.b * a.hq * qblocks;
  for (int64_t it = dk_block_x(); it < items; it += dk_grid_dim_x()) {
    const int64_t qb = it % qblocks, h = (it / qblocks) % a.hq, b = it / (qblocks * a.hq);
    const int64_t g = h / (a.hq / a.hkv), i0 = qb * kWarps, i = i0 + w;
    const int64_t i_last = i0 + kWarps - 1 < a.lq - 1 ? i0 + kWarps - 1 : a.lq - 1;
    const bool active = i < a.lq;
    dk_barrier();
    load_q_rows(a, qsh, b, h, i0);
    for (int64_t e = dk_thread_x(); e < int64_t(kWarps) * a.dv_dim; e += nt) {
      const int64_t r = e / a.dv_dim, c = e % a.dv_dim;
      if (i0 + r < a.lq)
        gsh[r * kPad + c] =
            load(a.dout[b * a.ds[0] + h * a.ds[1] + (i0 + r) * a.ds[2] + c * a.ds[3]]);
    }
    dk_barrier();  // dout rows are read below even when there is no key tile
    float m, l, acc[kPer];
    online_softmax(a, qsh, ksh, vsh, b, h, g, i, i_last, active, &m, &l, acc);
    // D = dout . out, out recomputed in float32.
    const float inv = l == 0.0f ? 0.0f : 1.0f / l;
    float dpart = 0.0f;
    if (active) {
      for (int t = 0; t < kPer; ++t) {
        const int64_t c = lane + 32 * t;
        if (c < a.dv_dim) {
          const float gv = gsh[int64_t(w) * kPad + c];
          dpart += gv * (acc[t] / l);
        }
      }
    }
    const float D = active ? warp_sum(dpart) : 0.0f;
    CompensatedSum dq[kPer];
    const int64_t keys = a.causal ? (i_last + 1 < a.lk ? i_last + 1 : a.lk) : a.lk;
    // A row that sees no key (l == 0) contributes nothing: its tiles are skipped.
    for (int64_t j0 = 0; j0 < keys; j0 += kTile) {
      dk_barrier();
      load_kv_tile(a, ksh, vsh, b, g, j0);
      dk_barrier();
      if (!active || l == 0.0f) continue;
      const int64_t j = j0 + lane;
      const float s = score(a, qsh, int64_t(w) * kMaxHead, ksh, int64_t(lane) * kPad, b, h, i, j);
      const float p = s == -INFINITY ? 0.0f : expf(s - m) * inv;
      float dp = 0.0f;
      if (j < a.lk) {
        for (int64_t c = 0; c < a.dv_dim; ++c) {
          const float gv = gsh[int64_t(w) * kPad + c], vv = vsh[int64_t(lane) * kPad + c];
          dp += gv * vv;
        }
      }
      const float ds = p == 0.0f ? 0.0f : p * (dp - D) * a.scale;
      const int64_t n = a.lk - j0 < kTile ? a.lk - j0 : kTile;
      for (int jj = 0; jj < n; ++jj) {
        const float dsj = dk_shfl_idx(ds, jj);
        for (int t = 0; t < kPer; ++t) {
          const int64_t c = lane + 32 * t;
          if (c < a.d) {
            const float kv = ksh[int64_t(jj) * kPad + c];
            dq[t].add(dsj * kv);
          }
        }
      }
    }
    if (active) {
      T* o = a.out + ((b * a.hq + h) * a.lq + i) * a.d;
      for (int t = 0; t < kPer; ++t) {
        const int64_t c = lane + 32 * t;
        if (c < a.d) o[c] = store<T>(dq[t].value());
      }
      if (lane == 0) {
        float* st = a.stats + 3 * ((b * a.hq + h) * a.lq + i);
        st[0] = m;
        st[1] = inv;
        st[2] = D;
      }
    }
  }
}

// Work items: (b, kv head g, block of kWarps key rows), grid-stride; a warp
// per key row j. Query tiles of 32 rows (q, dout and the rows' m, 1/l, D)
// are loaded to shared memory; lane ii takes query row i0 + ii.
template <class T> DK_KERNEL sdpa_backward_keys(SdpaArgs<T> a) {
  DK_SHARED(float, qsh, kTileElems);
  DK_SHARED(float, gsh, kTileElems);
  DK_SHARED(float, ssh, 3 * kTile);
  DK_SHARED(float, krow, kWarps* kMaxHead);
  DK_SHARED(float, vrow, kWarps* kMaxHead);
  const int lane = dk_lane(), w = dk_thread_x() >> 5, t0 = dk_thread_x(), nt = dk_block_dim_x();
  const int64_t kblocks = (a.lk + kWarps - 1) / kWarps;
  const int64_t items = a.b * a.hkv * kblocks;
  const int64_t group = a.hq / a.hkv;
  for (int64_t it = dk_block_x(); it < items; it += dk_grid_dim_x()) {
    const int64_t kb = it % kblocks, g = (it / kblocks) % a.hkv, b = it / (kblocks * a.hkv);
    const int64_t j0 = kb * kWarps, j = j0 + w;
    const bool active = j < a.lk;
    dk_barrier();
    for (int64_t e = t0; e < int64_t(kWarps) * a.d; e += nt) {
      const int64_t r = e / a.d, c = e % a.d;
      if (j0 + r < a.lk)
        krow[r * kMaxHead + c] =
            load(a.k[b * a.ks[0] + g * a.ks[1] + (j0 + r) * a.ks[2] + c * a.ks[3]]);
    }
    for (int64_t e = t0; e < int64_t(kWarps) * a.dv_dim; e += nt) {
      const int64_t r = e / a.dv_dim, c = e % a.dv_dim;
      if (j0 + r < a.lk)
        vrow[r * kMaxHead + c] =
            load(a.v[b * a.vs[0] + g * a.vs[1] + (j0 + r) * a.vs[2] + c * a.vs[3]]);
    }
    CompensatedSum dk[kPer], dv[kPer];
    // Under is_causal only queries i >= j see key j: start at the block's first key.
    const int64_t first = a.causal ? j0 - j0 % kTile : 0;
    for (int64_t h = g * group; h < (g + 1) * group; ++h) {
      for (int64_t i0 = first; i0 < a.lq; i0 += kTile) {
        const int64_t rows = a.lq - i0 < kTile ? a.lq - i0 : kTile;
        dk_barrier();
        for (int64_t e = t0; e < rows * a.d; e += nt) {
          const int64_t r = e / a.d, c = e % a.d;
          qsh[r * kPad + c] =
              load(a.q[b * a.qs[0] + h * a.qs[1] + (i0 + r) * a.qs[2] + c * a.qs[3]]);
        }
        for (int64_t e = t0; e < rows * a.dv_dim; e += nt) {
          const int64_t r = e / a.dv_dim, c = e % a.dv_dim;
          gsh[r * kPad + c] =
              load(a.dout[b * a.ds[0] + h * a.ds[1] + (i0 + r) * a.ds[2] + c * a.ds[3]]);
        }
        for (int64_t e = t0; e < rows * 3; e += nt)
          ssh[e] = a.stats[3 * ((b * a.hq + h) * a.lq + i0) + e];
        dk_barrier();
        if (!active) continue;
        const int64_t i = i0 + lane;
        // Lane ii scores query i0 + ii against this warp's key, exactly as the
        // row kernel did (same operands, same order).
        float s = -INFINITY;
        if (lane < rows)
          s = score(a, qsh, int64_t(lane) * kPad, krow, int64_t(w) * kMaxHead, b, h, i, j);
        float p = 0.0f, ds = 0.0f;
        if (s != -INFINITY) {
          const float m = ssh[3 * lane], inv = ssh[3 * lane + 1], D = ssh[3 * lane + 2];
          p = expf(s - m) * inv;
          float dp = 0.0f;
          for (int64_t c = 0; c < a.dv_dim; ++c) {
            const float gv = gsh[int64_t(lane) * kPad + c], vv = vrow[int64_t(w) * kMaxHead + c];
            dp += gv * vv;
          }
          ds = p == 0.0f ? 0.0f : p * (dp - D) * a.scale;
        }
        for (int ii = 0; ii < rows; ++ii) {
          const float pi = dk_shfl_idx(p, ii), dsi = dk_shfl_idx(ds, ii);
          for (int t = 0; t < kPer; ++t) {
            const int64_t c = lane + 32 * t;
            if (c < a.dv_dim) {
              const float gv = gsh[int64_t(ii) * kPad + c];
              dv[t].add(pi * gv);
            }
            if (c < a.d) {
              const float qv = qsh[int64_t(ii) * kPad + c];
              dk[t].add(dsi * qv);
            }
          }
        }
      }
    }
    if (active) {
      T* dko = a.dk + ((b * a.hkv + g) * a.lk + j) * a.d;
      T* dvo = a.dv + ((b * a.hkv + g) * a.lk + j) * a.dv_dim;
      for (int t = 0; t < kPer; ++t) {
        const int64_t c = lane + 32 * t;
        if (c < a.d) dko[c] = store<T>(dk[t].value());
        if (c < a.dv_dim) dvo[c] = store<T>(dv[t].value());
      }
    }
  }
}

}  // namespace fused
}  // namespace dkcuda
