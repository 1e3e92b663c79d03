// matmul: a [B..., M, K] @ b [B..., K, N] -> out [B..., M, N].
//
// float32 and float64 run a cache-blocked GEMM in the classic Goto/BLIS
// shape, because matmul is where a device's speed is judged and the SDK's
// benchmarks compare against numpy (OpenBLAS):
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
// (accumulating in float32, as the header requires); integers use a simple
// row kernel in unsigned arithmetic, which wraps without undefined behaviour.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <new>

#include "kernel_common.h"
#include "parallel.h"

namespace dkcpu {
namespace {

struct MatmulLaunch {
  const char* a;
  const char* b;
  char* out;
  DK_DType dtype;
  int64_t batch, m, k, n;
};

// ---- The blocked GEMM (float, double) ---------------------------------------

// Block sizes, in elements: an MC x KC block of a (~128 KiB for float) fits in
// L2, a KC x NR strip of b (~32 KiB) in L1, the KC x NC panel of b in L3.
constexpr int64_t kKC = 256, kMC = 144, kNC = 4096;

// Views of one batch element, row-major: C[M, N] = A[M, K] @ B[K, N].
template <class T>
struct Gemm {
  const T* a;
  const T* b;
  T* c;
  int64_t m, k, n;
};

// out[mr x nr] (+)= sum over kc of packed a (MR per step) x packed b (NR per step).
// `vector_size` is in bytes; VB is the ISA's register width.
template <class T, int MR, int NR, int VB>
DKCPU_INLINE void micro_kernel(int64_t kc, const T* __restrict pa, const T* __restrict pb,
                               T* __restrict c, int64_t ldc, int64_t mr, int64_t nr,
                               bool accumulate) {
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
      const T ai = pa[p * MR + i];
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
template <class T, int MR, int NR, int VB>
DKCPU_INLINE void macro_kernel(int64_t mc, int64_t nc, int64_t kc, const T* pa, const T* pb, T* c,
                               int64_t ldc, bool accumulate) {
  for (int64_t j = 0; j < nc; j += NR)
    for (int64_t i = 0; i < mc; i += MR)
      micro_kernel<T, MR, NR, VB>(kc, pa + i * kc, pb + j * kc, c + i * ldc + j, ldc,
                                  std::min<int64_t>(MR, mc - i), std::min<int64_t>(NR, nc - j),
                                  accumulate);
}

// One instantiation per ISA level. The micro-kernel is force-inlined, so it is
// compiled with the attribute's instruction set. Tile shapes use most of the
// vector registers for accumulators: AVX-512 has 32 (12x2 accumulators + 2 b
// vectors + a broadcast), AVX2 and SSE2 have 16 (6x2 + 2 + 1).
#define DKCPU_MACRO_KERNEL(name, attr, T, MR, NR, VB)                                      \
  attr void name(int64_t mc, int64_t nc, int64_t kc, const T* pa, const T* pb, T* c,       \
                 int64_t ldc, bool accumulate) {                                           \
    macro_kernel<T, MR, NR, VB>(mc, nc, kc, pa, pb, c, ldc, accumulate);                   \
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

template <class T>
struct MacroKernel {
  int64_t mr, nr;  // the tile shape the packing must match
  void (*fn)(int64_t, int64_t, int64_t, const T*, const T*, T*, int64_t, bool);
};

template <class T>
MacroKernel<T> pick_kernel() {
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
// the packed b panel (stream worker only), slot 1 a packed a block.
// Throws std::bad_alloc, so callers inside parallel_for catch it (see below).
template <class T>
T* scratch(int slot, int64_t count) {
  struct Buffer {
    void* p = nullptr;
    size_t bytes = 0;
    ~Buffer() { std::free(p); }
  };
  thread_local Buffer buffers[2];
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
template <class T>
void pack_b(const Gemm<T>& g, int64_t k0, int64_t kc, int64_t j0, int64_t nc, int64_t nr,
            int64_t strip_begin, int64_t strip_end, T* pb) {
  for (int64_t s = strip_begin; s < strip_end; ++s) {
    const int64_t j = s * nr, w = std::min(nr, nc - j);
    T* dst = pb + j * kc;
    for (int64_t p = 0; p < kc; ++p) {
      const T* src = g.b + (k0 + p) * g.n + j0 + j;
      for (int64_t q = 0; q < w; ++q) dst[p * nr + q] = src[q];
      for (int64_t q = w; q < nr; ++q) dst[p * nr + q] = T(0);
    }
  }
}

// a[i0 .. i0+mc, k0 .. k0+kc] -> strips of MR rows, each kc x MR (column of
// the strip per step), zero-padded past mc.
template <class T>
void pack_a(const Gemm<T>& g, int64_t i0, int64_t mc, int64_t k0, int64_t kc, int64_t mr, T* pa) {
  for (int64_t i = 0; i < mc; i += mr) {
    const int64_t h = std::min(mr, mc - i);
    T* dst = pa + i * kc;
    for (int64_t r = 0; r < mr; ++r) {
      if (r >= h) {
        for (int64_t p = 0; p < kc; ++p) dst[p * mr + r] = T(0);
        continue;
      }
      const T* src = g.a + (i0 + i + r) * g.k + k0;
      for (int64_t p = 0; p < kc; ++p) dst[p * mr + r] = src[p];
    }
  }
}

// Rows [i_begin, i_end) of one KC x NC block, against the already packed b.
// Blocks of nearly equal height (whole MR strips), so a 128-row chunk is one
// block of 11 strips rather than 10 strips plus a nearly empty one.
template <class T>
void gemm_rows(const Gemm<T>& g, const MacroKernel<T>& mk, int64_t k0, int64_t kc, int64_t j0,
               int64_t nc, const T* pb, int64_t i_begin, int64_t i_end) {
  T* pa = scratch<T>(1, (kMC + mk.mr) * kc);
  const int64_t rows = i_end - i_begin, blocks = (rows + kMC - 1) / kMC;
  const int64_t height = ((rows + blocks - 1) / blocks + mk.mr - 1) / mk.mr * mk.mr;
  for (int64_t i = i_begin; i < i_end; i += height) {
    const int64_t mc = std::min(height, i_end - i);
    pack_a(g, i, mc, k0, kc, mk.mr, pa);
    mk.fn(mc, nc, kc, pa, pb, g.c + i * g.n + j0, g.n, k0 > 0);
  }
}

// Strips [s_begin, s_end) of the packed panel for all rows: the split used
// when out is wide and short, so every core has work.
template <class T>
void gemm_cols(const Gemm<T>& g, const MacroKernel<T>& mk, int64_t k0, int64_t kc, int64_t j0,
               int64_t nc, const T* pb, int64_t s_begin, int64_t s_end) {
  T* pa = scratch<T>(1, (kMC + mk.mr) * kc);
  const int64_t j = s_begin * mk.nr, w = std::min(s_end * mk.nr, nc) - j;
  if (w <= 0) return;
  for (int64_t i = 0; i < g.m; i += kMC) {
    const int64_t mc = std::min(kMC, g.m - i);
    pack_a(g, i, mc, k0, kc, mk.mr, pa);
    mk.fn(mc, w, kc, pa, pb + j * kc, g.c + i * g.n + j0 + j, g.n, k0 > 0);
  }
}

// parallel_for's fn must not throw (it may run on a pool thread): an
// allocation failure is carried out of the chunks and rethrown on the stream
// worker, which turns it into the stream's asynchronous error.
template <class F>
void parallel_for_may_throw(int64_t n, int64_t grain, const F& fn) {
  std::atomic<bool> out_of_memory{false};
  parallel_for(n, grain, [&](int64_t begin, int64_t end) {
    try {
      fn(begin, end);
    } catch (...) {
      out_of_memory = true;
    }
  });
  if (out_of_memory) throw std::bad_alloc();
}

template <class T>
void gemm(const Gemm<T>& g) {
  if (g.k == 0) {  // an empty sum: zeros (the block loop below would not run)
    std::fill(g.c, g.c + g.m * g.n, T(0));
    return;
  }
  const MacroKernel<T> mk = pick_kernel<T>();
  T* pb = scratch<T>(0, kKC * (kNC + mk.nr));
  for (int64_t j0 = 0; j0 < g.n; j0 += kNC) {
    const int64_t nc = std::min(kNC, g.n - j0);
    for (int64_t k0 = 0; k0 < g.k; k0 += kKC) {
      const int64_t kc = std::min(kKC, g.k - k0);
      // Each parallel_for returns when all chunks are done: packing b is
      // finished before any core reads it.
      parallel_for(nc, 64, [&](int64_t c0, int64_t c1) {  // in columns: see below
        pack_b(g, k0, kc, j0, nc, mk.nr, (c0 + mk.nr - 1) / mk.nr, (c1 + mk.nr - 1) / mk.nr, pb);
      });
      // Split whichever of M and the panel width is larger. Columns are
      // split in column units (the pool rounds chunks to 64 units, which
      // would leave fewer than 64 strips in one chunk) and rounded up to
      // whole strips, which still covers every strip exactly once.
      if (g.m >= nc) {
        parallel_for_may_throw(g.m, 64, [&](int64_t i0, int64_t i1) {
          gemm_rows(g, mk, k0, kc, j0, nc, pb, i0, i1);
        });
      } else {
        parallel_for_may_throw(nc, 64, [&](int64_t c0, int64_t c1) {
          gemm_cols(g, mk, k0, kc, j0, nc, pb, (c0 + mk.nr - 1) / mk.nr, (c1 + mk.nr - 1) / mk.nr);
        });
      }
    }
  }
}

// ---- float16 / bfloat16: widen, multiply in float32, round once -------------

template <class T>
void gemm_half(const T* a, const T* b, T* out, int64_t m, int64_t k, int64_t n) {
  std::vector<float> fa(static_cast<size_t>(m * k)), fb(static_cast<size_t>(k * n));
  std::vector<float> fc(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m * k; ++i) fa[i] = float(widen(a[i]));
  for (int64_t i = 0; i < k * n; ++i) fb[i] = float(widen(b[i]));
  gemm(Gemm<float>{fa.data(), fb.data(), fc.data(), m, k, n});
  for (int64_t i = 0; i < m * n; ++i) out[i] = convert<T>(fc[i]);
}

// ---- Integers: one output row at a time, in wrapping unsigned arithmetic -----

template <class T>
void gemm_int(const T* a, const T* b, T* out, int64_t m, int64_t k, int64_t n) {
  // Products and sums modulo 2^32 (2^64 for int64) reduce to the right value
  // modulo 2^bits of T; unsigned arithmetic makes the wrap well defined.
  using U = std::conditional_t<sizeof(T) == 8, uint64_t, uint32_t>;
  parallel_for_may_throw(m, 16, [&](int64_t i0, int64_t i1) {
    std::vector<U> acc(static_cast<size_t>(n));
    for (int64_t i = i0; i < i1; ++i) {
      std::fill(acc.begin(), acc.end(), U(0));
      for (int64_t p = 0; p < k; ++p) {
        const U ai = U(a[i * k + p]);
        const T* brow = b + p * n;
        for (int64_t j = 0; j < n; ++j) acc[j] += ai * U(brow[j]);  // vectorised
      }
      for (int64_t j = 0; j < n; ++j) out[i * n + j] = T(std::make_unsigned_t<T>(acc[j]));
    }
  });
}

DK_Error* run_matmul(const void* payload) {
  const MatmulLaunch& l = *static_cast<const MatmulLaunch*>(payload);
  dispatch(l.dtype, [&](auto tag) {
    using T = decltype(tag);
    const int64_t es = int64_t(sizeof(T));
    for (int64_t bi = 0; bi < l.batch; ++bi) {
      const T* a = reinterpret_cast<const T*>(l.a + bi * l.m * l.k * es);
      const T* b = reinterpret_cast<const T*>(l.b + bi * l.k * l.n * es);
      T* out = reinterpret_cast<T*>(l.out + bi * l.m * l.n * es);
      if constexpr (std::is_floating_point<T>::value) gemm(Gemm<T>{a, b, out, l.m, l.k, l.n});
      else if constexpr (kIsFloat<T>) gemm_half(a, b, out, l.m, l.k, l.n);
      else if constexpr (!std::is_same<T, boolean>::value) gemm_int(a, b, out, l.m, l.k, l.n);
    }
  });
  return nullptr;
}

}  // namespace
}  // namespace dkcpu

using namespace dkcpu;

extern "C" DK_Error* dk_cpu_kernel_matmul(const DK_Kernel_Args* args) {
  static const char* const kCall = "cpu.Kernel(matmul)";
  if (DK_Error* e = check_call(kCall, args, DK_OP_MATMUL, 2, 1)) return e;
  return guarded(kCall, [&]() -> DK_Error* {
    View a, b, out;
    int64_t a_numel = 0, b_numel = 0, out_numel = 0;
    if (DK_Error* e = load_view(kCall, "input 0 (a)", args, args->inputs[0], &a, &a_numel))
      return e;
    if (DK_Error* e = load_view(kCall, "input 1 (b)", args, args->inputs[1], &b, &b_numel))
      return e;
    if (DK_Error* e = load_view(kCall, "output 0", args, args->outputs[0], &out, &out_numel))
      return e;
    if (DK_Error* e = check_dtype_declared(kCall, "input 0 (a)", DK_OP_MATMUL, a)) return e;
    if (DK_Error* e = check_same_dtype(kCall, "input 1 (b)", b, a, "input 0 (a)")) return e;
    if (DK_Error* e = check_same_dtype(kCall, "output 0", out, a, "input 0 (a)")) return e;
    const int32_t r = a.rank;
    if (r < 2 || b.rank != r || out.rank != r) {
      return dkh_error(DK_ERROR_INVALID_ARGUMENT, "%s: a, b and out have ranks %d, %d and %d; "
                       "expected one rank >= 2 for all three (a [B..., M, K], b [B..., K, N], "
                       "out [B..., M, N])", kCall, a.rank, b.rank, out.rank);
    }
    const int64_t m = a.shape[r - 2], k = a.shape[r - 1], n = b.shape[r - 1];
    bool ok = b.shape[r - 2] == k && out.shape[r - 2] == m && out.shape[r - 1] == n;
    int64_t batch = 1;
    for (int32_t d = 0; d < r - 2; ++d) {
      ok = ok && b.shape[d] == a.shape[d] && out.shape[d] == a.shape[d];
      batch *= a.shape[d];
    }
    if (!ok) {
      return dkh_error(DK_ERROR_INVALID_ARGUMENT, "%s: a %s, b %s, out %s; expected a [B..., M, "
                       "K], b [B..., K, N], out [B..., M, N] with equal batch dims B (no "
                       "broadcasting: the SDK expands them)", kCall, dims(a).c_str(),
                       dims(b).c_str(), dims(out).c_str());
    }
    if (DK_Error* e = check_layout(kCall, "input 0 (a)", DK_OP_MATMUL, a)) return e;
    if (DK_Error* e = check_layout(kCall, "input 1 (b)", DK_OP_MATMUL, b)) return e;
    if (DK_Error* e = check_layout(kCall, "output 0", DK_OP_MATMUL, out)) return e;
    if (DK_Error* e = check_no_alias(kCall, DK_OP_MATMUL, out, a, "input 0 (a)")) return e;
    if (DK_Error* e = check_no_alias(kCall, DK_OP_MATMUL, out, b, "input 1 (b)")) return e;
    if (out_numel == 0) return nullptr;
    enqueue(args->stream, run_matmul,
            MatmulLaunch{a.data, b.data, out.data, a.dtype, batch, m, k, n});
    return nullptr;
  });
}
