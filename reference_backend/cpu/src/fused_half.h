// What the float16 / bfloat16 fused kernels share. Each of them is its
// float32 kernel run on float32 copies: the operands are widened to float32
// (exact), the float32 code computes (float32 accumulation, the very same row
// math), and each result is rounded once, to nearest even, into the 16-bit
// output. Nothing is rounded to 16 bits in between.
//
// Two shapes of it:
// - row-wise ops (norms, softmax, gelu, their backwards; the norms' dweight /
//   dbias sum widened column slices): a block of rows at a time in a
//   per-thread scratch buffer (half_rows), so a row is read once from memory
//   and converted while in cache;
// - attention, forward and backward, whose key loops span rows: q, k, v
//   (dout) widened whole into dense float32 copies (widen_rows4), the mask's
//   span as it lies (widen_all), then the float32 launch runs on the copies.
//   Attention is compute-bound (Lq x Lk x D per head), so the copies cost
//   little.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "fused_common.h"
#include <devicekit/plugin_half.h>
#include "parallel.h"
#if DKCPU_FAST
#include "fast/fast.h"
#endif

namespace dkcpu {

inline bool is_half(DK_DType t) { return t == DK_DTYPE_FLOAT16 || t == DK_DTYPE_BFLOAT16; }

// n elements of float16 / bfloat16 `t` at src as float32 at dst (exact).
inline void widen(DK_DType t, const void* src, float* __restrict dst, int64_t n) {
  const uint16_t* __restrict s = static_cast<const uint16_t*>(src);
#if DKCPU_FAST
  if (t == DK_DTYPE_FLOAT16 && fast::widen_f16(s, dst, n)) return;
#endif
  if (t == DK_DTYPE_BFLOAT16)
    for (int64_t i = 0; i < n; ++i) dst[i] = dkh_bfloat16_to_float(s[i]);
  else
    for (int64_t i = 0; i < n; ++i) dst[i] = dkh_half_to_float(s[i]);
}

// n float32 at src rounded once (to nearest even) into `t` at dst.
inline void narrow(DK_DType t, const float* __restrict src, void* dst, int64_t n) {
  uint16_t* __restrict d = static_cast<uint16_t*>(dst);
#if DKCPU_FAST
  if (t == DK_DTYPE_FLOAT16 && fast::narrow_f16(src, d, n)) return;
#endif
  if (t == DK_DTYPE_BFLOAT16)
    for (int64_t i = 0; i < n; ++i) d[i] = dkh_float_to_bfloat16(src[i]);
  else
    for (int64_t i = 0; i < n; ++i) d[i] = dkh_float_to_half(src[i]);
}

inline const void* at(const void* p, int64_t elements) {  // 2-byte elements
  return static_cast<const uint16_t*>(p) + elements;
}
inline void* at(void* p, int64_t elements) { return static_cast<uint16_t*>(p) + elements; }

constexpr int64_t kConvertGrain = int64_t(1) << 15;  // elements per parallel chunk

// A whole dense operand of n elements widened to float32 (empty: none).
inline std::vector<float> widen_all(DK_DType t, const void* src, int64_t n) {
  std::vector<float> out(size_t(src ? n : 0));
  if (out.empty()) return out;
  parallel_for(n, kConvertGrain,
               [&](int64_t b, int64_t e) { widen(t, at(src, b), out.data() + b, e - b); });
  return out;
}

inline void narrow_all(DK_DType t, const float* src, void* dst, int64_t n) {
  if (dst == nullptr || n == 0) return;
  parallel_for(n, kConvertGrain,
               [&](int64_t b, int64_t e) { narrow(t, src + b, at(dst, b), e - b); });
}

// A rank-4 operand with unit-stride rows and element strides s[0..2] in dims
// 0..2 (rows_as), widened into a dense float32 [n0, n1, n2, n3].
inline std::vector<float> widen_rows4(DK_DType t, const void* src, const int64_t* shape,
                                      const int64_t* s) {
  const int64_t rows = shape[0] * shape[1] * shape[2], d = shape[3];
  std::vector<float> out(size_t(rows * d));
  if (out.empty()) return out;
  parallel_for(rows, std::max<int64_t>(1, kConvertGrain / std::max<int64_t>(d, 1)),
               [&](int64_t r0, int64_t r1) {
                 for (int64_t r = r0; r < r1; ++r) {
                   const int64_t i = r % shape[2], h = (r / shape[2]) % shape[1],
                                 b = r / (shape[2] * shape[1]);
                   widen(t, at(src, b * s[0] + h * s[1] + i * s[2]), out.data() + r * d, d);
                 }
               });
  return out;
}

// An additive attention mask a kernel of dtype t takes: float32 with any
// strides (read in place); for float16 / bfloat16 kernels also one of their
// dtype with non-negative strides (its span is widened as it lies, keeping
// its strides: a broadcast dim stays stride 0). Rank 4, as the SDK passes it.
inline bool additive_mask_as(const DK_TensorView* m, DK_DType t) {
  if (!is_view(m) || m->rank != 4) return false;
  if (m->dtype == DK_DTYPE_FLOAT32) return true;
  if (!is_half(t) || m->dtype != t) return false;
  for (int d = 0; d < 4; ++d)
    if (m->strides[d] < 0) return false;
  return true;
}

// Elements from a view's first element to its last (non-negative strides); 0 if empty.
inline int64_t span_elements(const View& v) {
  int64_t last = 0;
  for (int d = 0; d < v.rank; ++d) {
    if (v.shape[d] == 0) return 0;
    last += (v.shape[d] - 1) * v.strides[d];
  }
  return last + 1;
}

// kernels_attention.cpp: a float32 attention launch run now, on this thread
// and the pool (the 16-bit attention backward recomputes out with it).
void sdpa_f32(const SdpaLaunch& l);

// Scratch of at most this many floats stays with its thread for the next
// launch (a block of rows is about 32 Ki elements); a larger one (a single
// row longer than that) is freed after its chunk.
constexpr size_t kKeptScratchFloats = size_t(1) << 20;

// Element strides of dims 0..2 of a dense [n0, n1, n2, n3] (what widen_rows4 makes).
inline void dense_strides4(const int64_t* shape, int64_t* s) {
  s[2] = shape[3];
  s[1] = shape[2] * s[2];
  s[0] = shape[1] * s[1];
}

// Rows [0, rows) of a row-wise half launch of N inputs and one output, each
// dense [rows, d]: in blocks of up to `block` rows per thread, the block's
// input rows widened into float32 scratch, body(in, out, b0, n) run on the n
// rows from row b0 (in[i], out: float32, dense [n, d]), and out rounded once
// into the output's rows.
template <int N, class Body> void half_rows(DK_DType t, const void* const* in, void* out,
                                            int64_t rows, int64_t d, int64_t block,
                                            const Body& body) {
  parallel_for_may_throw(rows, block, [&](int64_t r0, int64_t r1) {
    const int64_t cap = std::min(block, r1 - r0) * d;  // floats per buffer
    const size_t need = size_t((N + 1) * cap);
    thread_local std::vector<float> kept;
    std::vector<float> once;
    std::vector<float>& scratch = need <= kKeptScratchFloats ? kept : once;
    if (scratch.size() < need) scratch.resize(need);
    for (int64_t b0 = r0; b0 < r1; b0 += block) {
      const int64_t n = std::min(block, r1 - b0);
      const float* ins[N];
      for (int i = 0; i < N; ++i) {
        float* buf = scratch.data() + i * cap;
        widen(t, at(in[i], b0 * d), buf, n * d);
        ins[i] = buf;
      }
      float* o = scratch.data() + N * cap;
      body(ins, o, b0, n);
      narrow(t, o, at(out, b0 * d), n * d);
    }
  });
}

}  // namespace dkcpu
