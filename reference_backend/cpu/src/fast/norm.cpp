// Fast path of the fused norms (kernels_fused.cpp): the same row loop
// (norm_stats, norm_span from fused_common.h, so the same arithmetic), with
// two changes that are only about speed.
//
// Streaming stores. A norm's output larger than the caches is written with
// non-temporal stores (norm_span_streaming): a normal store first reads the
// line it fills (read-for-ownership), so a copy-like kernel moves 3 bytes per
// 2; streaming moves 2, and does not evict the input rows. Measured ~8% on a
// 4096 x 4096 rms_norm (64 MiB out). A smaller output is likely re-read soon,
// from cache: normal stores.
//
// An AVX2 build. Even a memory-bound row loop gains from 256-bit vectors when
// a core is shared (4096 x 4096 rms_norm ~15% faster than SSE2); 512-bit ones
// would add nothing here. Picked at run time (cpu_isa).
#include <algorithm>
#include <cstdint>
#if defined(__x86_64__)
#include <xmmintrin.h>  // _mm_stream_ps, see stream_store
#endif

#include "fast.h"

namespace dkcpu {
namespace {

// Outputs of at least this many bytes are written with streaming stores.
constexpr int64_t kStreamMinBytes = int64_t(16) << 20;

typedef float V4 __attribute__((vector_size(16)));

// One 16-byte-aligned streaming store. GCC before 15 lacks Clang's portable
// __builtin_nontemporal_store, so x86-64 uses SSE's movntps (baseline there,
// no target attribute needed): one of the plugin's two intrinsic uses (the
// other: F16C conversions, fast/convert.cpp). Elsewhere: a plain
// store (correct, just not streaming).
DKCPU_INLINE void stream_store(float* dst, V4 v) {
#if defined(__has_builtin) && __has_builtin(__builtin_nontemporal_store)
  __builtin_nontemporal_store(v, reinterpret_cast<V4*>(dst));
#elif defined(__x86_64__)
  _mm_stream_ps(dst, v);
#else
  std::memcpy(dst, &v, sizeof v);
#endif
}

// norm_span with streaming stores of 4-float vectors (the unaligned head and
// the tail use normal stores). Same arithmetic, so the same bits.
DKCPU_INLINE void norm_span_streaming(const float* __restrict x, const float* __restrict w,
                                      const float* __restrict b, float* __restrict y, int64_t n,
                                      float mean, float rstd) {
  const int64_t head = std::min<int64_t>(n, (-reinterpret_cast<uintptr_t>(y) % 16) / 4);
  norm_span(x, w, b, y, 0, head, mean, rstd);
  int64_t i = head;
  for (; i + 4 <= n; i += 4) {
    V4 xv, wv, bv;
    std::memcpy(&xv, x + i, sizeof xv);
    V4 r = (xv - mean) * rstd;
    if (w) std::memcpy(&wv, w + i, sizeof wv), r *= wv;
    if (b) std::memcpy(&bv, b + i, sizeof bv), r += bv;
    stream_store(y + i, r);
  }
  norm_span(x, w, b, y, i, n, mean, rstd);
}

// kernels_fused.cpp's norm_rows, with the choice of store.
DKCPU_INLINE void norm_rows_impl(const NormLaunch& l, int64_t r0, int64_t r1, bool stream) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* __restrict x = l.x + r * l.d;
    float* __restrict y = l.out + r * l.d;
    const NormStats s = norm_stats(l, x);
    if (stream) norm_span_streaming(x, l.weight, l.bias, y, l.d, s.mean, s.rstd);
    else norm_span(x, l.weight, l.bias, y, 0, l.d, s.mean, s.rstd);
  }
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) void norm_rows_avx2(const NormLaunch& l, int64_t r0, int64_t r1,
                                                        bool stream) {
  norm_rows_impl(l, r0, r1, stream);
}
#endif
void norm_rows_base(const NormLaunch& l, int64_t r0, int64_t r1, bool stream) {
  norm_rows_impl(l, r0, r1, stream);
}

}  // namespace

void fast::norm_rows(const NormLaunch& l, int64_t r0, int64_t r1) {
  const bool stream = l.rows * l.d * int64_t(sizeof(float)) >= kStreamMinBytes;
#if defined(__x86_64__)
  if (cpu_isa() != Isa::kBase) norm_rows_avx2(l, r0, r1, stream);
  else norm_rows_base(l, r0, r1, stream);
#else
  norm_rows_base(l, r0, r1, stream);
#endif
  // Streaming stores are weakly ordered: fence before this chunk counts as
  // done, so whoever runs next on the stream (another thread) sees them.
  if (stream) __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

}  // namespace dkcpu
