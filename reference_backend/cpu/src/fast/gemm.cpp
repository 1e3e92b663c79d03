// Fast path of matmul (kernels_matmul.cpp) for float32 and float64, and for
// float16 / bfloat16 through float32: a cache-blocked GEMM in the classic
// Goto/BLIS shape, because matmul is where a device's speed is judged and the
// SDK's benchmarks compare against numpy (OpenBLAS):
//   for each NC-wide column panel and KC-deep slice of K:
//     pack b's KC x NC block into NR-wide strips      (stays in L3; shared)
//     for each MC-tall row block (split across cores):
//       pack a's MC x KC block into MR-tall strips    (stays in L2)
//       for each NR strip, for each MR strip: micro_kernel, an MR x NR tile
//       of out held in registers over KC steps        (b's strip stays in L1)
// The micro-kernel is written with GCC/Clang vector extensions: plain C++
// arithmetic on fixed-width vector types, no intrinsics. Leaving the register
// tile to the auto-vectoriser proved fragile (GCC 12 vectorised a 6x16 tile
// along the wrong axis and ran at 5 GFLOP/s). The same code is compiled once
// per ISA level (target attributes) and picked at run time, so the wheel runs
// on any x86-64 yet uses AVX2+FMA or AVX-512 where the CPU has them.
//
// float16/bfloat16 widen to float32 buffers and reuse the float32 GEMM
// (accumulating in float32, as the header requires), then round once.
#include <algorithm>
#include <cstdlib>
#include <new>
#include <vector>

#include "../parallel.h"
#include "fast.h"

namespace dkcpu {
namespace {

// ---- The blocked GEMM (float, double) ---------------------------------------

// Block sizes, in elements: an MC x KC block of a (~128 KiB for float) fits in
// L2, a KC x NR strip of b (~32 KiB) in L1, the KC x NC panel of b in L3.
constexpr int64_t kKC = 256, kMC = 144, kNC = 4096;

// Views of one batch element, row-major: C[M, N] = A[M, K] @ B[K, N].
template <class T> struct Gemm {
  const T* a;
  const T* b;
  T* c;
  int64_t m, k, n;
  int64_t a_row, a_col, b_row, b_col;  // element strides of a and b (c is dense)
};

// out[mr x nr] (+)= sum over kc of packed a (MR per step) x packed b (NR per step).
// With kDirect, a is read in place instead: MR full rows lda apart, unit
// stride along k (see gemm_rows). `vector_size` is in bytes; VB is the ISA's
// register width.
template <class T, int MR, int NR, int VB, bool kDirect = false>
DKCPU_INLINE void micro_kernel(int64_t kc, const T* __restrict pa, int64_t lda,
                               const T* __restrict pb, T* __restrict c, int64_t ldc, int64_t mr,
                               int64_t nr, bool accumulate) {
  typedef T V __attribute__((vector_size(VB)));
  constexpr int kW = VB / int(sizeof(T)), kNV = NR / kW;
  static_assert(NR % kW == 0, "NR is a whole number of vectors");
  V acc[MR][kNV];
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < kNV; ++v) acc[i][v] = V{};
  for (int64_t p = 0; p < kc; ++p) {  // the hot loop: kNV loads, MR broadcasts, MR*kNV FMAs
    V bv[kNV];
    for (int v = 0; v < kNV; ++v) std::memcpy(&bv[v], pb + p * NR + v * kW, sizeof(V));
    for (int i = 0; i < MR; ++i) {
      const T ai = kDirect ? pa[i * lda + p] : pa[p * MR + i];
      for (int v = 0; v < kNV; ++v) acc[i][v] += ai * bv[v];
    }
  }
  if (mr == MR && nr == NR) {  // full tile: vector stores
    for (int i = 0; i < MR; ++i) {
      for (int v = 0; v < kNV; ++v) {
        T* dst = c + i * ldc + v * kW;
        V old{};
        if (accumulate) std::memcpy(&old, dst, sizeof(V));
        const V r = old + acc[i][v];
        std::memcpy(dst, &r, sizeof(V));
      }
    }
  } else {  // edge tile: the padded rows / columns are dropped
    T tile[MR][NR];
    std::memcpy(tile, acc, sizeof tile);
    for (int64_t i = 0; i < mr; ++i)
      for (int64_t j = 0; j < nr; ++j)
        c[i * ldc + j] = (accumulate ? c[i * ldc + j] : T(0)) + tile[i][j];
  }
}

// All tiles of one packed block: out[mc x nc] (+)= packed a (mc x kc) @ packed b (kc x nc).
// The strip of b (outer loop) stays in L1 while the MR strips of a stream from L2.
// With `a` (not NULL), the full MR strips of a are read in place from `a`
// (rows lda apart, unit stride along k) and `pa` holds only the last,
// partial strip, packed: see gemm_rows.
template <class T, int MR, int NR, int VB>
DKCPU_INLINE void macro_kernel(int64_t mc, int64_t nc, int64_t kc, const T* pa, const T* a,
                               int64_t lda, const T* pb, T* c, int64_t ldc, bool accumulate) {
  const int64_t full = a ? mc / MR * MR : 0;
  for (int64_t j = 0; j < nc; j += NR) {
    const int64_t nr = std::min<int64_t>(NR, nc - j);
    for (int64_t i = 0; i < full; i += MR)
      micro_kernel<T, MR, NR, VB, true>(kc, a + i * lda, lda, pb + j * kc, c + i * ldc + j, ldc, MR,
                                        nr, accumulate);
    for (int64_t i = full; i < mc; i += MR)
      micro_kernel<T, MR, NR, VB>(kc, pa + (i - full) * kc, 0, pb + j * kc, c + i * ldc + j, ldc,
                                  std::min<int64_t>(MR, mc - i), nr, accumulate);
  }
}

// One instantiation per ISA level. The micro-kernel is force-inlined, so it is
// compiled with the attribute's instruction set. Tile shapes use most of the
// vector registers for accumulators: AVX-512 has 32 (12x2 accumulators + 2 b
// vectors + a broadcast), AVX2 and SSE2 have 16 (6x2 + 2 + 1).
#define DKCPU_MACRO_KERNEL(name, attr, T, MR, NR, VB)                                      \
  attr void name(int64_t mc, int64_t nc, int64_t kc, const T* pa, const T* a, int64_t lda, \
                 const T* pb, T* c, int64_t ldc, bool accumulate) {                        \
    macro_kernel<T, MR, NR, VB>(mc, nc, kc, pa, a, lda, pb, c, ldc, accumulate);           \
  }
#if defined(__x86_64__)
#define DKCPU_AVX512 __attribute__((target("avx512f,avx512vl,avx2,fma")))
#define DKCPU_AVX2 __attribute__((target("avx2,fma")))
DKCPU_MACRO_KERNEL(macro_f32_avx512, DKCPU_AVX512, float, 12, 32, 64)
DKCPU_MACRO_KERNEL(macro_f64_avx512, DKCPU_AVX512, double, 12, 16, 64)
DKCPU_MACRO_KERNEL(macro_f32_avx2, DKCPU_AVX2, float, 6, 16, 32)
DKCPU_MACRO_KERNEL(macro_f64_avx2, DKCPU_AVX2, double, 6, 8, 32)
#endif
DKCPU_MACRO_KERNEL(macro_f32_base, , float, 6, 8, 16)  // SSE2 / NEON: 128-bit vectors
DKCPU_MACRO_KERNEL(macro_f64_base, , double, 6, 4, 16)

template <class T> struct MacroKernel {
  int64_t mr, nr;  // the tile shape the packing must match
  void (*fn)(int64_t, int64_t, int64_t, const T*, const T*, int64_t, const T*, T*, int64_t, bool);
};

template <class T> MacroKernel<T> pick_kernel() {
  const Isa isa = cpu_isa();
  if constexpr (std::is_same<T, float>::value) {
#if defined(__x86_64__)
    if (isa == Isa::kAvx512) return {12, 32, macro_f32_avx512};
    if (isa == Isa::kAvx2) return {6, 16, macro_f32_avx2};
#endif
    return {6, 8, macro_f32_base};
  } else {
#if defined(__x86_64__)
    if (isa == Isa::kAvx512) return {12, 16, macro_f64_avx512};
    if (isa == Isa::kAvx2) return {6, 8, macro_f64_avx2};
#endif
    return {6, 4, macro_f64_base};
  }
}

// Per-thread packing buffers, 64-byte aligned and kept between launches (the
// pool's threads and stream workers live as long as the process): allocating
// and page-faulting 4 MiB per call cost a few percent at 1024^3. Slot 0 holds
// the packed b panel (stream worker only), slot 1 a packed a block, slot 2 a's
// whole K slice packed once for the column split (stream worker only),
// slots 3..5 float16 / bfloat16 operands widened to float32 (gemm_half).
// Throws std::bad_alloc, so callers inside parallel_for catch it (see below).
template <class T> T* scratch(int slot, int64_t count) {
  struct Buffer {
    void* p = nullptr;
    size_t bytes = 0;
    ~Buffer() { std::free(p); }
  };
  thread_local Buffer buffers[6];
  Buffer& b = buffers[slot];
  const size_t bytes = (size_t(count) * sizeof(T) + 63) / 64 * 64;
  if (b.bytes < bytes) {
    std::free(b.p);
    b.p = std::aligned_alloc(64, bytes);
    b.bytes = b.p ? bytes : 0;
    if (!b.p) throw std::bad_alloc();
  }
  return static_cast<T*>(b.p);
}

// b[k0 .. k0+kc, j0 .. j0+nc] -> strips of NR columns, each kc x NR row-major,
// zero-padded past nc so the micro-kernel never needs a column edge case.
// A full strip of a transposed b (a step of k is contiguous in each of the
// strip's nr columns: the rows of W in x @ W^T), in 8 x 8 tiles: each tile
// reads 8 contiguous elements of 8 columns and writes 8 contiguous of 8
// steps, where an element at a time read nr different rows per step.
template <class T>
void pack_b_t(const T* b, int64_t ld, int64_t kc, int64_t nr, T* __restrict dst) {
  int64_t p = 0;
  for (; p + 8 <= kc; p += 8) {
    for (int64_t q = 0; q < nr; q += 8) {
      T t[8][8];
      for (int r = 0; r < 8; ++r)
        for (int c = 0; c < 8; ++c) t[c][r] = b[(q + r) * ld + p + c];
      for (int c = 0; c < 8; ++c)
        for (int r = 0; r < 8; ++r) dst[(p + c) * nr + q + r] = t[c][r];
    }
  }
  for (; p < kc; ++p)
    for (int64_t q = 0; q < nr; ++q) dst[p * nr + q] = b[q * ld + p];
}

template <class T> void pack_b(const Gemm<T>& g, int64_t k0, int64_t kc, int64_t j0, int64_t nc,
                               int64_t nr, int64_t strip_begin, int64_t strip_end, T* pb) {
  for (int64_t s = strip_begin; s < strip_end; ++s) {
    const int64_t j = s * nr, w = std::min(nr, nc - j);
    T* dst = pb + j * kc;
    if (g.b_row == 1 && w == nr && nr % 8 == 0) {  // b = W^T read in place (x @ W^T)
      pack_b_t(g.b + k0 + (j0 + j) * g.b_col, g.b_col, kc, nr, dst);
      continue;
    }
    for (int64_t p = 0; p < kc; ++p) {
      const T* src = g.b + (k0 + p) * g.b_row + (j0 + j) * g.b_col;
      if (g.b_col == 1) {
        for (int64_t q = 0; q < w; ++q) dst[p * nr + q] = src[q];
      } else {  // a transposed or sliced b: packing is where its layout stops mattering
        for (int64_t q = 0; q < w; ++q) dst[p * nr + q] = src[q * g.b_col];
      }
      for (int64_t q = w; q < nr; ++q) dst[p * nr + q] = T(0);
    }
  }
}

// One full strip of MR rows from a transposed a (a step of k is MR
// contiguous elements): MR known at compile time, so each step is a
// fixed-size copy rather than a loop of MR scalar moves. It was the
// weight gradients' (x^T @ dy) bottleneck when out is narrow.
template <class T, int MR> void pack_a_strip_t(const T* src, int64_t a_col, int64_t kc, T* dst) {
  for (int64_t p = 0; p < kc; ++p) std::memcpy(dst + p * MR, src + p * a_col, MR * sizeof(T));
}

// a[i0 .. i0+mc, k0 .. k0+kc] -> strips of MR rows, each kc x MR (column of
// the strip per step), zero-padded past mc.
template <class T>
void pack_a(const Gemm<T>& g, int64_t i0, int64_t mc, int64_t k0, int64_t kc, int64_t mr, T* pa) {
  for (int64_t i = 0; i < mc; i += mr) {
    const int64_t h = std::min(mr, mc - i);
    T* dst = pa + i * kc;
    if (g.a_row == 1) {  // a transposed (x^T of a weight gradient): a step of k is h contiguous
      const T* src = g.a + (i0 + i) + k0 * g.a_col;
      if (h == 12 && mr == 12) {
        pack_a_strip_t<T, 12>(src, g.a_col, kc, dst);
        continue;
      }
      if (h == 6 && mr == 6) {
        pack_a_strip_t<T, 6>(src, g.a_col, kc, dst);
        continue;
      }
      for (int64_t p = 0; p < kc; ++p) {
        for (int64_t r = 0; r < h; ++r) dst[p * mr + r] = src[p * g.a_col + r];
        for (int64_t r = h; r < mr; ++r) dst[p * mr + r] = T(0);
      }
      continue;
    }
    for (int64_t r = 0; r < mr; ++r) {
      if (r >= h) {
        for (int64_t p = 0; p < kc; ++p) dst[p * mr + r] = T(0);
        continue;
      }
      const T* src = g.a + (i0 + i + r) * g.a_row + k0 * g.a_col;
      for (int64_t p = 0; p < kc; ++p) dst[p * mr + r] = src[p * g.a_col];
    }
  }
}

// out[i0 .. i0+mc, j .. j+nc] (+)= a's rows i0.. (k0 .. k0+kc) @ the packed b.
// A row-major a (unit stride along k) is read in place, all but its last
// partial MR strip: packing it cost as much as the multiply when out is
// narrow (N = 64: two 32-wide strips of b per packed strip of a), and the
// micro-kernel broadcasts a's elements from memory either way. Any other
// layout (a transposed gradient) is packed whole.
template <class T> void block(const Gemm<T>& g, const MacroKernel<T>& mk, int64_t i0, int64_t mc,
                              int64_t k0, int64_t kc, T* pa, const T* pb, int64_t nc, int64_t j) {
  T* c = g.c + i0 * g.n + j;
  if (g.a_col != 1) {
    pack_a(g, i0, mc, k0, kc, mk.mr, pa);
    return mk.fn(mc, nc, kc, pa, nullptr, 0, pb, c, g.n, k0 > 0);
  }
  const int64_t full = mc / mk.mr * mk.mr;
  if (full < mc) pack_a(g, i0 + full, mc - full, k0, kc, mk.mr, pa);
  mk.fn(mc, nc, kc, pa, g.a + i0 * g.a_row + k0, g.a_row, pb, c, g.n, k0 > 0);
}

// Rows [i_begin, i_end) of one KC x NC block, against the already packed b.
// Blocks of nearly equal height (whole MR strips), so a 128-row chunk is one
// block of 11 strips rather than 10 strips plus a nearly empty one.
template <class T> void gemm_rows(const Gemm<T>& g, const MacroKernel<T>& mk, int64_t k0,
                                  int64_t kc, int64_t j0, int64_t nc, const T* pb, int64_t i_begin,
                                  int64_t i_end) {
  T* pa = scratch<T>(1, (kMC + mk.mr) * kc);
  const int64_t rows = i_end - i_begin, blocks = (rows + kMC - 1) / kMC;
  const int64_t height = ((rows + blocks - 1) / blocks + mk.mr - 1) / mk.mr * mk.mr;
  for (int64_t i = i_begin; i < i_end; i += height) {
    const int64_t mc = std::min(height, i_end - i);
    block(g, mk, i, mc, k0, kc, pa, pb, nc, j0);
  }
}

// Strips [s_begin, s_end) of the packed panel for all rows: the split used
// when out is wide and short, so every core has work. `pa_all` (not NULL):
// a's whole KC slice, packed once for every chunk (see gemm); else a is read
// in place as in gemm_rows.
template <class T> void gemm_cols(const Gemm<T>& g, const MacroKernel<T>& mk, int64_t k0,
                                  int64_t kc, int64_t j0, int64_t nc, const T* pb, const T* pa_all,
                                  int64_t s_begin, int64_t s_end) {
  const int64_t j = s_begin * mk.nr, w = std::min(s_end * mk.nr, nc) - j;
  if (w <= 0) return;
  T* pa = pa_all ? nullptr : scratch<T>(1, (kMC + mk.mr) * kc);
  for (int64_t i = 0; i < g.m; i += kMC) {
    const int64_t mc = std::min(kMC, g.m - i);
    if (pa_all) {
      mk.fn(mc, w, kc, pa_all + i * kc, nullptr, 0, pb + j * kc, g.c + i * g.n + j0 + j, g.n,
            k0 > 0);
    } else {
      block(g, mk, i, mc, k0, kc, pa, pb + j * kc, w, j0 + j);
    }
  }
}

// ---- A few rows: b read once, not packed -------------------------------------

// x @ W with a handful of rows (a decode step: one token, m = 1) went the
// blocked way, which packs all of b on every call: several times the memory
// traffic of the product, for one multiply-add per element of b (a small
// GPT-2's decode ran its matmuls at under 1 GFLOP/s). Up to kFewRows rows now
// read b once, as it lies. A row-major b streams its rows (out row +=
// a[i, p] * b[p, :], in K order, as the plain kernel); a b stored transposed
// (columns contiguous: x @ W^T, a tied LM head) takes the dot product of a
// row of a with each column in 16 interleaved partial sums added pairwise.
// Other layouts go the blocked way.
constexpr int64_t kFewRows = 4;

template <class T> DKCPU_INLINE void few_rows_impl(const Gemm<T>& g, int64_t j0, int64_t j1) {
  for (int64_t i = 0; i < g.m; ++i) {
    T* __restrict c = g.c + i * g.n;
    if (g.b_col == 1) {
      // four rows of b per pass over out's row (a quarter of its loads and
      // stores), added one after another: the same order as one at a time
      const T* ai = g.a + i * g.a_row;
      for (int64_t j = j0; j < j1; ++j) c[j] = T(0);
      int64_t p = 0;
      for (; p + 4 <= g.k; p += 4) {
        const T a0 = ai[p * g.a_col], a1 = ai[(p + 1) * g.a_col];
        const T a2 = ai[(p + 2) * g.a_col], a3 = ai[(p + 3) * g.a_col];
        const T* __restrict b0 = g.b + p * g.b_row;
        const T* __restrict b1 = b0 + g.b_row;
        const T* __restrict b2 = b1 + g.b_row;
        const T* __restrict b3 = b2 + g.b_row;
        for (int64_t j = j0; j < j1; ++j) {
          T v = c[j];
          v += a0 * b0[j];
          v += a1 * b1[j];
          v += a2 * b2[j];
          v += a3 * b3[j];
          c[j] = v;
        }
      }
      for (; p < g.k; ++p) {
        const T ap = ai[p * g.a_col];
        const T* __restrict br = g.b + p * g.b_row;
        for (int64_t j = j0; j < j1; ++j) c[j] += ap * br[j];
      }
      continue;
    }
    const T* __restrict a = g.a + i * g.a_row;  // a_col == 1 and b_row == 1 here
    for (int64_t j = j0; j < j1; ++j) {
      const T* __restrict bc = g.b + j * g.b_col;
      T s[16] = {};
      int64_t p = 0;
      for (; p + 16 <= g.k; p += 16) {
        for (int l = 0; l < 16; ++l) s[l] += a[p + l] * bc[p + l];
      }
      for (int l = 0; p < g.k; ++p, ++l) s[l] += a[p] * bc[p];
      for (int w = 8; w > 0; w /= 2) {
        for (int l = 0; l < w; ++l) s[l] += s[l + w];
      }
      c[j] = s[0];
    }
  }
}

// One build for every ISA level: these loops are bound by reading b from
// memory, which 128-bit vectors keep up with.
template <class T> bool few_rows(const Gemm<T>& g) {
  if (g.m > kFewRows || !(g.b_col == 1 || (g.b_row == 1 && g.a_col == 1))) return false;
  // columns in chunks of at least 256 (a 1 KiB row of out stays in L1), split
  // over the pool from 2 Mi multiply-adds (a quarter of gemm's `alone` bound:
  // each of these reads a new element of b, so a job is ~4x longer per
  // multiply-add than the blocked kernel's)
  if (double(g.m) * double(g.n) * double(g.k) < double(1 << 21)) {
    few_rows_impl(g, 0, g.n);
  } else {
    parallel_for_may_throw(g.n, 256, [&](int64_t j0, int64_t j1) { few_rows_impl(g, j0, j1); });
  }
  return true;
}

template <class T> void gemm(const Gemm<T>& g) {
  if (g.k == 0) {  // an empty sum: zeros (the block loop below would not run)
    std::fill(g.c, g.c + g.m * g.n, T(0));
    return;
  }
  if (few_rows(g)) return;
  const MacroKernel<T> mk = pick_kernel<T>();
  T* pb = scratch<T>(0, kKC * (kNC + mk.nr));
  // A small product (under 8 Mi multiply-adds, ~35 us on one AVX-512 core)
  // runs on the calling thread alone: split, its jobs of a few microseconds
  // each cost about what they save, and they keep the pool's workers
  // spinning (parallel.cpp), which on a host-bound model (a nanoGPT step at
  // 2 threads: 1.2-1.4x slower) takes the core the host thread needs.
  const bool alone = double(g.m) * double(g.n) * double(g.k) < double(1 << 23);
  auto split = [alone](int64_t n, int64_t grain, const auto& fn) {
    if (alone) return fn(int64_t(0), n);
    parallel_for_may_throw(n, grain, fn);
  };
  for (int64_t j0 = 0; j0 < g.n; j0 += kNC) {
    const int64_t nc = std::min(kNC, g.n - j0);
    for (int64_t k0 = 0; k0 < g.k; k0 += kKC) {
      const int64_t kc = std::min(kKC, g.k - k0);
      // Each parallel_for returns when all chunks are done: packing b is
      // finished before any core reads it.
      split(nc, 64, [&](int64_t c0, int64_t c1) {  // in columns: see below
        pack_b(g, k0, kc, j0, nc, mk.nr, (c0 + mk.nr - 1) / mk.nr, (c1 + mk.nr - 1) / mk.nr, pb);
      });
      // Split whichever of M and the panel width is larger. Columns are
      // split in column units (the pool rounds chunks to 64 units, which
      // would leave fewer than 64 strips in one chunk) and rounded up to
      // whole strips, which still covers every strip exactly once.
      if (g.m >= nc) {
        // Rows are split in whole MR strips, so only the last chunk has a
        // partial strip (64-row units gave every chunk one: 3% wasted
        // multiplies at 2 threads on 1024 rows).
        const int64_t strips = (g.m + mk.mr - 1) / mk.mr;
        split(strips, std::max<int64_t>(1, 64 / mk.mr), [&](int64_t s0, int64_t s1) {
          gemm_rows(g, mk, k0, kc, j0, nc, pb, s0 * mk.mr, std::min(g.m, s1 * mk.mr));
        });
      } else {
        // A layout that must be packed is packed once here, split over
        // strips, not once per column chunk: each chunk would pack all of
        // a for a few strips of b, as much work as its multiply.
        T* pa_all = nullptr;
        if (g.a_col != 1) {
          pa_all = scratch<T>(2, (g.m + mk.mr) * kc);
          const int64_t strips = (g.m + mk.mr - 1) / mk.mr;
          split(strips, 4, [&](int64_t s0, int64_t s1) {
            const int64_t i0 = s0 * mk.mr, i1 = std::min(g.m, s1 * mk.mr);
            pack_a(g, i0, i1 - i0, k0, kc, mk.mr, pa_all + i0 * kc);
          });
        }
        split(nc, 64, [&](int64_t c0, int64_t c1) {
          gemm_cols(g, mk, k0, kc, j0, nc, pb, pa_all, (c0 + mk.nr - 1) / mk.nr,
                    (c1 + mk.nr - 1) / mk.nr);
        });
      }
    }
  }
}

// ---- float16 / bfloat16: widen, multiply in float32, round once -------------

// The float32 copies of up to 4 Mi elements each live in the calling thread's
// buffers (slots 3..5, the stream worker's, kept between launches like the
// packing buffers: fresh vectors per launch cost page faults and zeroing);
// larger ones are allocated for the call, so a rare huge launch does not
// keep its memory. The widening and the rounding are split over
// parallel_for: on one thread they took as long as the multiply at 1024^3.
struct Widened {
  std::vector<float> own;
  float* p;
  Widened(int slot, int64_t count) {
    if (count <= (int64_t(4) << 20)) {
      p = scratch<float>(slot, count);
    } else {
      own.resize(size_t(count));
      p = own.data();
    }
  }
};

template <class T>
void gemm_half(const T* a, const T* b, T* out, int64_t m, int64_t k, int64_t n, const int64_t* st) {
  Widened wa(3, m * k), wb(4, k * n), wc(5, m * n);
  float *fa = wa.p, *fb = wb.p, *fc = wc.p;
  parallel_for(m, std::max<int64_t>(1, 16384 / std::max<int64_t>(k, 1)),
               [&](int64_t i0, int64_t i1) {
                 for (int64_t i = i0; i < i1; ++i)
                   for (int64_t p = 0; p < k; ++p)
                     fa[i * k + p] = float(widen(a[i * st[0] + p * st[1]]));
               });
  parallel_for(k, std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1)),
               [&](int64_t p0, int64_t p1) {
                 for (int64_t p = p0; p < p1; ++p)
                   for (int64_t j = 0; j < n; ++j)
                     fb[p * n + j] = float(widen(b[p * st[2] + j * st[3]]));
               });
  gemm(Gemm<float>{fa, fb, fc, m, k, n, k, 1, n, 1});
  parallel_for(m * n, 16384, [&](int64_t i0, int64_t i1) {  // from float32, convert's exact route
    for (int64_t i = i0; i < i1; ++i) {
      if constexpr (std::is_same<T, bf16>::value) out[i] = bf16{dkh_float_to_bfloat16(fc[i])};
      else out[i] = f16{dkh_float_to_half(fc[i])};
    }
  });
}

}  // namespace

template <class T> void fast::gemm(const T* a, const T* b, T* c, int64_t m, int64_t k, int64_t n,
                                   const int64_t* strides) {
  if constexpr (std::is_floating_point<T>::value) {
    dkcpu::gemm(Gemm<T>{a, b, c, m, k, n, strides[0], strides[1], strides[2], strides[3]});
  } else {
    gemm_half(a, b, c, m, k, n, strides);
  }
}

template void fast::gemm<float>(const float*, const float*, float*, int64_t, int64_t, int64_t,
                                const int64_t*);
template void fast::gemm<double>(const double*, const double*, double*, int64_t, int64_t, int64_t,
                                 const int64_t*);
template void fast::gemm<f16>(const f16*, const f16*, f16*, int64_t, int64_t, int64_t,
                              const int64_t*);
template void fast::gemm<bf16>(const bf16*, const bf16*, bf16*, int64_t, int64_t, int64_t,
                               const int64_t*);

}  // namespace dkcpu
