// Fast path of fused scaled_dot_product_attention (kernels_attention.cpp,
// which validates the call and holds the plain kernel this replaces),
// flash-attention style: never materialises the Lq x Lk score matrix.
//
// Work item = (batch, query head, block of kBq query rows); items are split
// across cores. Each item walks the keys in tiles of kBk and does two small
// GEMMs per tile, with the same register tile as matmul's micro-kernel
// (`tile_gemm`: GCC vector extensions, an MR x NR block of the result held in
// registers):
//   S = (q*scale) K_tile^T       [kBq x kBk]  (K_tile packed transposed, so a
//                                              row of it is NR contiguous keys;
//                                              q is packed scaled)
//   per query row (`softmax_row`): mask (causal / bool / additive: -inf for an
//   excluded key), then the online-softmax step: running max m and sum l,
//   P = exp(S - m_new), and alpha = exp(m_old - m_new)
//   O = O * alpha + P V_tile     [kBq x Dv]   (V rows are unit-stride: read
//                                              in place with V's row stride;
//                                              the rescale of O by alpha rides
//                                              on the tile's store)
// and finally out = O / l, or 0 for a row that saw no visible key (l == 0).
// Under is_causal, key tiles past the block's last query are never read (the
// spec lets a kernel skip keys masked for all the queries it computes
// together). Inside a visited tile an excluded key has p = 0, and 0 * v still
// reads v: a NaN or inf in v at a masked key may propagate, as in the
// decomposition (the spec allows that too).
//
// q, k and v are read through their strides (rows unit-stride, any strides
// between rows and heads: the permuted views of x.reshape(B, L, H,
// D).transpose(1, 2)); q and K are packed anyway and V is read with its row
// stride as the GEMM's leading dim, so a permuted view costs no copy.
//
// Sizes: a score tile is 64 x 128 floats (32 KiB), the packed key tile D x 128,
// the accumulator 64 x Dv: with D = Dv = 64 an item's working set (~100 KiB)
// stays in L2 while the GEMMs run. 64 query rows amortise packing a key tile
// (32 rows: ~15% slower at 1024 x 64); 128 keys beat 64 by ~5%. Like matmul,
// the loops are compiled once per ISA level (target attributes) and picked at
// run time.
#include <algorithm>
#include <vector>

#include "../attention_backward.h"
#include "../parallel.h"
#include "fast.h"

namespace dkcpu {
namespace {

constexpr int64_t kBq = 64, kBk = 128;  // multiples of every MR / NR below
constexpr int64_t kDvAlign = 32;       // the widest NR: accumulator rows are padded to it
constexpr int64_t kKeyAlign = 32;      // a narrower key tile stays a multiple of every NR

inline int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

// c[MR x NR] = a[MR x k] b[k x NR], both row-major with leading dims lda, ldb;
// with row_scale, c = c * row_scale[i] + a b instead (O's online rescale).
// `vector_size` is in bytes; VB is the ISA's register width.
template <int MR, int NR, int VB>
DKCPU_INLINE void tile_gemm(int64_t k, const float* __restrict a, int64_t lda,
                            const float* __restrict b, int64_t ldb, float* __restrict c,
                            int64_t ldc, const float* row_scale) {
  typedef float V __attribute__((vector_size(VB)));
  constexpr int kW = VB / int(sizeof(float)), kNV = NR / kW;
  static_assert(NR % kW == 0, "NR is a whole number of vectors");
  V acc[MR][kNV];
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < kNV; ++v) acc[i][v] = V{};
  for (int64_t p = 0; p < k; ++p) {  // the hot loop: kNV loads, MR broadcasts, MR*kNV FMAs
    V bv[kNV];
    for (int v = 0; v < kNV; ++v) std::memcpy(&bv[v], b + p * ldb + v * kW, sizeof(V));
    for (int i = 0; i < MR; ++i) {
      const float ai = a[i * lda + p];
      for (int v = 0; v < kNV; ++v) acc[i][v] += ai * bv[v];
    }
  }
  for (int i = 0; i < MR; ++i) {
    for (int v = 0; v < kNV; ++v) {
      float* dst = c + i * ldc + v * kW;
      V r = acc[i][v];
      if (row_scale) {
        V old;
        std::memcpy(&old, dst, sizeof(V));
        r += old * row_scale[i];
      }
      std::memcpy(dst, &r, sizeof(V));
    }
  }
}

// One query row of a score tile: exclude keys, then the online-softmax step.
// s (bk scores) becomes p = exp(s - m_new) in place; m and l are updated and
// the factor O's row must be rescaled by, exp(m_old - m_new), is returned.
DKCPU_INLINE float softmax_row(const SdpaLaunch& L, float* __restrict s, int64_t bk,
                               const char* mrow, int64_t qi, int64_t j0, int64_t nk, float& m,
                               float& l) {
  // Keys [visible, bk) of the tile are excluded: past Lk, or the causal future.
  const int64_t visible = L.causal ? std::min(nk, std::max<int64_t>(0, qi + 1 - j0)) : nk;
  if (L.mask_kind == DK_SDPA_MASK_BOOL) {
    for (int64_t jj = 0; jj < visible; ++jj)
      if (!mrow[(j0 + jj) * L.mask_strides[3]]) s[jj] = -INFINITY;
  } else if (L.mask_kind == DK_SDPA_MASK_ADDITIVE) {
    const float* f = reinterpret_cast<const float*>(mrow);
    for (int64_t jj = 0; jj < visible; ++jj) s[jj] += f[(j0 + jj) * L.mask_strides[3]];
  }
  for (int64_t jj = 0; jj < bk; ++jj) s[jj] = jj < visible ? s[jj] : -INFINITY;
  // The row maximum in 16 independent lanes (a plain compare-select, which
  // vectorises to max instructions). It may skip a NaN score: that is fine,
  // the NaN's p = exp(NaN - m) still makes l, O and so the row NaN.
  constexpr int kLanes = 16;
  float mx[kLanes];
  for (int t = 0; t < kLanes; ++t) mx[t] = -INFINITY;
  for (int64_t jj = 0; jj < bk; jj += kLanes)
    for (int t = 0; t < kLanes; ++t) mx[t] = s[jj + t] > mx[t] ? s[jj + t] : mx[t];
  float m_new = m;
  for (int t = 0; t < kLanes; ++t) m_new = mx[t] > m_new ? mx[t] : m_new;
  // No visible key so far: every p and alpha is exp(-inf) = 0, not exp(-inf - -inf).
  const float shift = m_new == -INFINITY ? 0.0f : m_new;
  for (int64_t jj = 0; jj < bk; ++jj) s[jj] = exp_nonpositive(s[jj] - shift);
  float sum[kLanes] = {};  // independent partial sums, so the sum vectorises
  for (int64_t jj = 0; jj < bk; jj += kLanes)
    for (int t = 0; t < kLanes; ++t) sum[t] += s[jj + t];
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int t = 0; t < w; ++t) sum[t] += sum[t + w];
  const float alpha = exp_nonpositive(m - shift);
  l = l * alpha + sum[0];
  m = m_new;
  return alpha;
}

// One work item. `scratch` holds kBq*d + d*kBk + kBq*kBk + (kBq + kBk)*dvp
// floats, dvp = dv rounded up to kDvAlign.
template <int MR, int NR, int VB>
DKCPU_INLINE void attend_block(const SdpaLaunch& L, int64_t item, float* scratch) {
  const int64_t qblocks = (L.lq + kBq - 1) / kBq;
  const int64_t bh = item / qblocks, i0 = (item % qblocks) * kBq;
  const int64_t nq = std::min(kBq, L.lq - i0), nqp = round_up(nq, MR);
  const int64_t b = bh / L.hq, h = bh % L.hq, hk = h / (L.hq / L.hkv);
  const int64_t d = L.d, dv = L.dv, dvp = round_up(dv, NR);
  const int64_t qs = L.q_strides[2], ks = L.k_strides[2], vs = L.v_strides[2];  // row strides
  const float* q = L.q + b * L.q_strides[0] + h * L.q_strides[1] + i0 * qs;
  const float* k = L.k + b * L.k_strides[0] + hk * L.k_strides[1];
  const float* v = L.v + b * L.v_strides[0] + hk * L.v_strides[1];
  float* out = L.out + ((b * L.hq + h) * L.lq + i0) * dv;
  const int64_t mask_esize = L.mask_kind == DK_SDPA_MASK_BOOL ? 1 : 4;
  const char* mask = L.mask + (b * L.mask_strides[0] + h * L.mask_strides[1]) * mask_esize;
  float* __restrict qp = scratch;                // [kBq][d], q * scale; rows >= nq are 0
  float* __restrict kt = qp + kBq * d;           // [d][kBk], the key tile transposed
  float* __restrict s = kt + d * kBk;            // [kBq][kBk], scores, then p
  float* __restrict o = s + kBq * kBk;           // [kBq][dvp], the accumulator
  float* __restrict vt = o + kBq * round_up(dv, kDvAlign);  // [kBk][dvp], V tile padded to NR
  const bool pack_v = dvp != dv;                 // else V_tile is read in place
  float m[kBq], l[kBq], alpha[kBq];
  for (int64_t i = 0; i < nqp; ++i) {
    for (int64_t c = 0; c < d; ++c) qp[i * d + c] = i < nq ? q[i * qs + c] * L.scale : 0.0f;
    for (int64_t c = 0; c < dvp; ++c) o[i * dvp + c] = 0.0f;
    m[i] = -INFINITY;
    l[i] = 0.0f;
    alpha[i] = 1.0f;  // rows >= nq: padding, p stays 0
  }
  const int64_t kend = L.causal ? std::min(L.lk, i0 + nq) : L.lk;  // later keys: all masked
  // The key tile's width: kBk, or fewer keys when that is all there is
  // (short sequences: 32 keys would otherwise fill a 128-wide tile with
  // padding that the GEMM and the softmax still compute).
  const int64_t bk = std::min(kBk, round_up(kend, kKeyAlign));
  for (int64_t j0 = 0; j0 < kend; j0 += bk) {
    const int64_t nk = std::min(bk, kend - j0);
    for (int64_t jj = 0; jj < nk; ++jj)
      for (int64_t c = 0; c < d; ++c) kt[c * bk + jj] = k[(j0 + jj) * ks + c];
    for (int64_t c = 0; c < d; ++c)
      for (int64_t jj = nk; jj < bk; ++jj) kt[c * bk + jj] = 0.0f;  // keys past Lk
    for (int64_t i = 0; i < nqp; i += MR)
      for (int64_t j = 0; j < bk; j += NR)
        tile_gemm<MR, NR, VB>(d, qp + i * d, d, kt + j, bk, s + i * bk + j, bk, nullptr);
    for (int64_t i = 0; i < nq; ++i)
      alpha[i] = softmax_row(L, s + i * bk, bk, mask + (i0 + i) * L.mask_strides[2] * mask_esize,
                             i0 + i, j0, nk, m[i], l[i]);
    for (int64_t i = nq; i < nqp; ++i)
      for (int64_t jj = 0; jj < bk; ++jj) s[i * bk + jj] = 0.0f;
    const float* vtile = v + j0 * vs;
    int64_t ldv = vs;
    if (pack_v) {
      for (int64_t jj = 0; jj < nk; ++jj)
        for (int64_t c = 0; c < dvp; ++c) vt[jj * dvp + c] = c < dv ? vtile[jj * vs + c] : 0.0f;
      vtile = vt;
      ldv = dvp;
    }
    for (int64_t i = 0; i < nqp; i += MR)
      for (int64_t c = 0; c < dvp; c += NR)
        tile_gemm<MR, NR, VB>(nk, s + i * bk, bk, vtile + c, ldv, o + i * dvp + c, dvp, alpha + i);
  }
  for (int64_t i = 0; i < nq; ++i) {
    // l == 0 only when no key was visible: the header's 0 output, not 0/0.
    const float inv = l[i] == 0.0f ? 0.0f : 1.0f / l[i];
    for (int64_t c = 0; c < dv; ++c) out[i * dv + c] = o[i * dvp + c] * inv;
  }
}

// One instantiation per ISA level; the tile shapes leave registers for the
// loaded b vectors and a broadcast: AVX-512 8x32 (16 accumulators of 32),
// AVX2 4x16 and SSE2 / NEON 4x8 (8 of 16).
#define DKCPU_ATTEND_RANGE(name, attr, MR, NR, VB)                                     \
  attr void name(const SdpaLaunch& L, int64_t begin, int64_t end, float* scratch) {    \
    for (int64_t it = begin; it < end; ++it) attend_block<MR, NR, VB>(L, it, scratch); \
  }
#if defined(__x86_64__)
DKCPU_ATTEND_RANGE(attend_range_avx512,
                   __attribute__((target("avx512f,avx512vl,avx2,fma,prefer-vector-width=512"))), 8,
                   32, 64)
DKCPU_ATTEND_RANGE(attend_range_avx2, __attribute__((target("avx2,fma"))), 4, 16, 32)
#endif
DKCPU_ATTEND_RANGE(attend_range_base, , 4, 8, 16)

// ---- The backward: one (batch, kv head) group as register-tiled GEMMs ----------
//
// attention_backward.h's loop took each query row alone: two by-key sums,
// then three D-long axpys per visible key (dv_j, dq_i, dk_j), all scalar
// broadcasts and short vectors; it was 13% of a GPT training step, five times
// the forward. Here a block of kBqBack query rows is one set of GEMMs with
// the forward's register tile, in "keys as rows" form so that no product
// needs a transposed operand (queries are the vector lanes):
//   St  = K Qs^T       [keys x queries]  scores (q scaled first, as forward)
//   dPt = V dO^T       [keys x queries]
//   per query column: mask, max, P = exp(S - max) / sum (the sums run over
//   keys in order), dS = P (dP - dout.out) scale
//   dV += Pt dO,  dK += dSt Q          [keys x D]  (summed over every query
//                                       block and head of the group in order)
//   dQ^T = K^T dSt                     [D x queries], written transposed
// K, V (rows padded to MR) and K^T are packed once per group, q and dout
// once per block (q^T, dout^T and zero-padded copies), so every GEMM operand
// has whole tiles; padded rows and columns are zero and fall out of the
// sums. Under is_causal a block reads keys up to its last query only. As in
// the forward, a masked key inside the block has p = 0 and 0 * (a NaN in K,
// V or dout there) may reach the gradients, as in the decomposition.
// Each group runs on one thread, so the result does not depend on the thread
// count.
constexpr int64_t kBqBack = 64;  // query rows per block: a multiple of every NR

// c[m x n] (+)= a[m x k] b[k x n]; m a multiple of MR, n of NR.
template <int MR, int NR, int VB>
DKCPU_INLINE void block_mm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                           const float* b, int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  // accumulating is the forward's rescale by 1 (c * 1 + a b: the same bits)
  struct Ones {
    float v[MR];
    constexpr Ones() : v() {
      for (float& x : v) x = 1.0f;
    }
  };
  static constexpr Ones kOnes{};
  const float* keep = accumulate ? kOnes.v : nullptr;
  for (int64_t j = 0; j < n; j += NR)  // b's k x NR strip stays in L1 over the rows
    for (int64_t i = 0; i < m; i += MR)
      tile_gemm<MR, NR, VB>(k, a + i * lda, lda, b + j, ldb, c + i * ldc + j, ldc, keep);
}

template <int MR, int NR, int VB>
DKCPU_INLINE void backward_group(const SdpaBackward& L, int64_t bi, int64_t g) {
  const int64_t group = L.hq / L.hkv, lk = L.lk, d = L.d, dvd = L.dvd;
  const int64_t dp = round_up(d, NR), dvp = round_up(dvd, NR), lkp = round_up(lk, MR);
  constexpr int64_t QB = kBqBack;
  thread_local std::vector<float> buffer;  // grows once per thread, then reused
  buffer.resize(size_t(lkp * (d + dvd + dp + dp + dvp) + QB * (d + dvd + dp + dvp + dp) +
                       2 * lkp * QB + 4 * QB));
  float* __restrict kp = buffer.data();    // [lkp][d]   K, rows past lk zero
  float* __restrict vp = kp + lkp * d;     // [lkp][dvd] V, rows past lk zero
  float* __restrict kt = vp + lkp * dvd;   // [dp][lkp]  K^T, rows past d zero
  float* __restrict dka = kt + dp * lkp;   // [lkp][dp]  dK accumulator
  float* __restrict dva = dka + lkp * dp;  // [lkp][dvp] dV accumulator
  float* __restrict qst = dva + lkp * dvp; // [d][nqp]   (q * scale)^T
  float* __restrict dot = qst + QB * d;    // [dvd][nqp] dout^T
  float* __restrict qz = dot + QB * dvd;   // [nqp][dp]  q, zero-padded
  float* __restrict doz = qz + QB * dp;    // [nqp][dvp] dout, zero-padded
  float* __restrict dqt = doz + QB * dvp;  // [dp][nqp]  dQ^T
  float* __restrict st = dqt + QB * dp;    // [nkp][nqp] scores, then P
  float* __restrict dst = st + lkp * QB;   // [nkp][nqp] dP, then dS
  float* __restrict shift = dst + lkp * QB;  // [nqp] each: per query column
  float* __restrict inv = shift + QB;
  float* __restrict di = inv + QB;
  float* __restrict total = di + QB;
  for (int64_t j = 0; j < lkp; ++j) {
    const float* kj = j < lk ? L.k.row(bi, g, j) : nullptr;
    const float* vj = j < lk ? L.v.row(bi, g, j) : nullptr;
    for (int64_t c = 0; c < d; ++c) kp[j * d + c] = kj ? kj[c] : 0.0f;
    for (int64_t c = 0; c < dvd; ++c) vp[j * dvd + c] = vj ? vj[c] : 0.0f;
  }
  for (int64_t c = 0; c < dp; ++c)
    for (int64_t j = 0; j < lkp; ++j) kt[c * lkp + j] = c < d ? kp[j * d + c] : 0.0f;
  std::fill(dka, dka + lkp * dp, 0.0f);
  std::fill(dva, dva + lkp * dvp, 0.0f);
  const int64_t esize = L.mask_kind == DK_SDPA_MASK_BOOL ? 1 : 4;
  for (int64_t h = g * group; h < (g + 1) * group; ++h) {
    for (int64_t i0 = 0; i0 < L.lq; i0 += QB) {
      const int64_t nq = std::min(QB, L.lq - i0), nqp = round_up(nq, NR);
      const int64_t kend = L.causal ? std::min(lk, i0 + nq) : lk, nkp = round_up(kend, MR);
      float* dq = L.dq + ((bi * L.hq + h) * L.lq + i0) * d;
      if (kend == 0) {  // no visible key: no gradient from these rows
        std::fill(dq, dq + nq * d, 0.0f);
        continue;
      }
      for (int64_t i = 0; i < nqp; ++i) {
        const float* q = i < nq ? L.q.row(bi, h, i0 + i) : nullptr;
        const float* go = i < nq ? L.dout.row(bi, h, i0 + i) : nullptr;
        for (int64_t c = 0; c < dp; ++c) {
          const float x = q && c < d ? q[c] : 0.0f;
          qz[i * dp + c] = x;
          if (c < d) qst[c * nqp + i] = x * L.scale;
        }
        for (int64_t c = 0; c < dvp; ++c) {
          const float x = go && c < dvd ? go[c] : 0.0f;
          doz[i * dvp + c] = x;
          if (c < dvd) dot[c * nqp + i] = x;
        }
        float t = 0.0f;
        if (go) {
          const float* o = L.out.row(bi, h, i0 + i);
          for (int64_t c = 0; c < dvd; ++c) t += go[c] * o[c];
        }
        di[i] = t;
      }
      block_mm<MR, NR, VB>(nkp, nqp, d, kp, d, qst, nqp, st, nqp, false);
      block_mm<MR, NR, VB>(nkp, nqp, dvd, vp, dvd, dot, nqp, dst, nqp, false);
      if (L.mask) {  // the additive mask first, so a causal -inf stays -inf
        for (int64_t i = 0; i < nq; ++i) {
          const int64_t at =
              bi * L.mask_strides[0] + h * L.mask_strides[1] + (i0 + i) * L.mask_strides[2];
          const char* mrow = L.mask + at * esize;
          const int64_t mstep = L.mask_strides[3] * esize;
          for (int64_t j = 0; j < kend; ++j) {
            if (L.mask_kind == DK_SDPA_MASK_BOOL && !mrow[j * mstep]) st[j * nqp + i] = -INFINITY;
            if (L.mask_kind == DK_SDPA_MASK_ADDITIVE)
              st[j * nqp + i] += *reinterpret_cast<const float*>(mrow + j * mstep);
          }
        }
      }
      if (L.causal) {  // key j is visible to query i0 + i when j <= i0 + i
        for (int64_t j = i0 + 1; j < kend; ++j)
          for (int64_t i = 0; i < std::min(j - i0, nq); ++i) st[j * nqp + i] = -INFINITY;
      }
      for (int64_t i = 0; i < nqp; ++i) shift[i] = -INFINITY;
      for (int64_t j = 0; j < kend; ++j)
        for (int64_t i = 0; i < nqp; ++i) shift[i] = max_nan(shift[i], st[j * nqp + i]);
      for (int64_t i = 0; i < nqp; ++i) {
        inv[i] = shift[i] == -INFINITY || i >= nq ? 0.0f : 1.0f;  // 0: no visible key, padding
        if (shift[i] == -INFINITY) shift[i] = 0.0f;  // exp(-inf) = 0, not exp(-inf - -inf)
        di[i] = i < nq ? di[i] : 0.0f;
      }
      for (int64_t i = 0; i < nqp; ++i) total[i] = 0.0f;
      for (int64_t j = 0; j < kend; ++j) {  // sums over keys in order, one lane per query
        for (int64_t i = 0; i < nqp; ++i) {
          const float e = exp_nonpositive(st[j * nqp + i] - shift[i]);
          st[j * nqp + i] = e;
          total[i] += e;
        }
      }
      for (int64_t i = 0; i < nqp; ++i) inv[i] = inv[i] == 0.0f ? 0.0f : 1.0f / total[i];
      for (int64_t j = 0; j < kend; ++j) {
        for (int64_t i = 0; i < nqp; ++i) {
          const float pj = st[j * nqp + i] * inv[i];
          st[j * nqp + i] = pj;
          dst[j * nqp + i] = pj * (dst[j * nqp + i] - di[i]) * L.scale;
        }
      }
      for (int64_t j = kend; j < nkp; ++j)  // padding keys: p = ds = 0
        for (int64_t i = 0; i < nqp; ++i) st[j * nqp + i] = dst[j * nqp + i] = 0.0f;
      block_mm<MR, NR, VB>(nkp, dvp, nqp, st, nqp, doz, dvp, dva, dvp, true);
      block_mm<MR, NR, VB>(nkp, dp, nqp, dst, nqp, qz, dp, dka, dp, true);
      block_mm<MR, NR, VB>(dp, nqp, kend, kt, lkp, dst, nqp, dqt, nqp, false);
      for (int64_t i = 0; i < nq; ++i)
        for (int64_t c = 0; c < d; ++c) dq[i * d + c] = dqt[c * nqp + i];
    }
  }
  float* dk = L.dk + (bi * L.hkv + g) * lk * d;
  float* dv = L.dv + (bi * L.hkv + g) * lk * dvd;
  for (int64_t j = 0; j < lk; ++j) {
    for (int64_t c = 0; c < d; ++c) dk[j * d + c] = dka[j * dp + c];
    for (int64_t c = 0; c < dvd; ++c) dv[j * dvd + c] = dva[j * dvp + c];
  }
}

// One instantiation per ISA level, the forward's tile shapes.
#define DKCPU_BACKWARD_GROUP(name, attr, MR, NR, VB)             \
  attr void name(const SdpaBackward& L, int64_t bi, int64_t g) { \
    backward_group<MR, NR, VB>(L, bi, g);                        \
  }
#if defined(__x86_64__)
DKCPU_BACKWARD_GROUP(backward_group_avx512,
                     __attribute__((target("avx512f,avx512vl,avx2,fma,prefer-vector-width=512"))),
                     8, 32, 64)
DKCPU_BACKWARD_GROUP(backward_group_avx2, __attribute__((target("avx2,fma"))), 4, 16, 32)
#endif
DKCPU_BACKWARD_GROUP(backward_group_base, , 4, 8, 16)

}  // namespace

// The caller's scratch (sized for attention_backward.h's loop) is not used:
// the tiled form keeps its own per-thread buffers.
void fast::sdpa_backward_group(const SdpaBackward& L, int64_t bi, int64_t g, float*) {
#if defined(__x86_64__)
  const Isa isa = cpu_isa();
  if (isa == Isa::kAvx512) return backward_group_avx512(L, bi, g);
  if (isa == Isa::kAvx2) return backward_group_avx2(L, bi, g);
#endif
  backward_group_base(L, bi, g);
}

void fast::sdpa(const SdpaLaunch& L) {
  const Isa isa = cpu_isa();
  const int64_t items = L.b * L.hq * ((L.lq + kBq - 1) / kBq);
  const int64_t dvp = round_up(L.dv, kDvAlign);
  parallel_for(items, 1, [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> scratch;  // grows once per thread, then reused
    scratch.resize(size_t(kBq * L.d + L.d * kBk + kBq * kBk + (kBq + kBk) * dvp));
#if defined(__x86_64__)
    if (isa == Isa::kAvx512) return attend_range_avx512(L, begin, end, scratch.data());
    if (isa == Isa::kAvx2) return attend_range_avx2(L, begin, end, scratch.data());
#endif
    attend_range_base(L, begin, end, scratch.data());
  });
}

}  // namespace dkcpu
