// matmul: a [B..., M, K] @ b [B..., K, N] -> out [B..., M, N].
//
// a and b may have any non-negative strides (DK_KERNEL_CAP_STRIDED): a
// transposed weight or gradient, a broadcast batch (stride 0), a slice. The
// SDK then hands them over as they are instead of copying each into a dense
// tensor first; out is dense.
//
// The plain kernel, for every dtype: one output row at a time, adding
// a[i, p] * b[p, :] into a row of accumulators (the inner loop runs along
// contiguous memory, so the compiler vectorises it), in K order.
// float16/bfloat16 accumulate in float32 (the header's minimum) and round
// once; integers accumulate in unsigned arithmetic, which wraps without
// undefined behaviour.
//
// With the fast paths built (DKCPU_FAST), the floating dtypes run
// fast/gemm.cpp's cache-blocked GEMM instead (88 against 7 GFLOP/s at
// 512^3 on a shared 2-core machine); integers always run the plain kernel.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "kernel_common.h"
#include "parallel.h"
#if DKCPU_FAST
#include "fast/fast.h"
#endif

namespace dkcpu {
namespace {

struct MatmulLaunch {
  const char* a;
  const char* b;
  char* out;
  DK_DType dtype;
  int64_t batch, m, k, n;
  int64_t strides[4];  // elements: a row, a column, b row, b column
  int32_t batch_rank;  // the batch dims, walked like an odometer
  int64_t batch_shape[DK_MAX_RANK], a_batch[DK_MAX_RANK], b_batch[DK_MAX_RANK];
};

// out[i, :] = sum over p of a[i, p] * b[p, :], summed in A: float32 for
// float16/bfloat16 (Wide<T>), the type itself for float32/float64, and for
// integers unsigned 32 or 64 bits: products and sums modulo 2^32 (2^64 for
// int64) reduce to the right value modulo 2^bits of T.
template <class T> void matmul_rows(const T* a, const T* b, T* out, int64_t m, int64_t k, int64_t n,
                                    const int64_t* st) {
  using U = std::conditional_t<sizeof(T) == 8, uint64_t, uint32_t>;
  using A = std::conditional_t<kIsFloat<T>, Wide<T>, U>;
  parallel_for_may_throw(m, 16, [&](int64_t i0, int64_t i1) {
    std::vector<A> acc(static_cast<size_t>(n));
    for (int64_t i = i0; i < i1; ++i) {
      std::fill(acc.begin(), acc.end(), A(0));
      for (int64_t p = 0; p < k; ++p) {
        const A ai = A(widen_exact(a[i * st[0] + p * st[1]]));
        const T* brow = b + p * st[2];
        if (st[3] == 1) {
          for (int64_t j = 0; j < n; ++j) acc[j] += ai * A(widen_exact(brow[j]));  // vectorised
        } else {
          for (int64_t j = 0; j < n; ++j) acc[j] += ai * A(widen_exact(brow[j * st[3]]));
        }
      }
      for (int64_t j = 0; j < n; ++j) {
        if constexpr (kIsFloat<T>) out[i * n + j] = convert<T>(acc[j]);
        else out[i * n + j] = T(std::make_unsigned_t<T>(acc[j]));
      }
    }
  });
}

DK_Error* run_matmul(const void* payload) {
  const MatmulLaunch& l = *static_cast<const MatmulLaunch*>(payload);
  dispatch(l.dtype, [&](auto tag) {
    using T = decltype(tag);
    const int64_t es = int64_t(sizeof(T));
    int64_t idx[DK_MAX_RANK] = {}, a_off = 0, b_off = 0;  // elements
    for (int64_t bi = 0; bi < l.batch; ++bi) {
      const T* a = reinterpret_cast<const T*>(l.a) + a_off;
      const T* b = reinterpret_cast<const T*>(l.b) + b_off;
      T* out = reinterpret_cast<T*>(l.out + bi * l.m * l.n * es);
      if constexpr (DKCPU_FAST && kIsFloat<T>) {
#if DKCPU_FAST
        fast::gemm(a, b, out, l.m, l.k, l.n, l.strides);
#endif
      } else if constexpr (!std::is_same<T, boolean>::value) {
        matmul_rows(a, b, out, l.m, l.k, l.n, l.strides);
      }
      for (int32_t d = l.batch_rank - 1; d >= 0; --d) {  // next batch element
        a_off += l.a_batch[d];
        b_off += l.b_batch[d];
        if (++idx[d] < l.batch_shape[d]) break;
        a_off -= l.a_batch[d] * l.batch_shape[d];
        b_off -= l.b_batch[d] * l.batch_shape[d];
        idx[d] = 0;
      }
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
      return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                       "%s: a, b and out have ranks %d, %d and %d; "
                       "expected one rank >= 2 for all three (a [B..., M, K], b [B..., K, N], "
                       "out [B..., M, N])",
                       kCall, a.rank, b.rank, out.rank);
    }
    const int64_t m = a.shape[r - 2], k = a.shape[r - 1], n = b.shape[r - 1];
    bool ok = b.shape[r - 2] == k && out.shape[r - 2] == m && out.shape[r - 1] == n;
    int64_t batch = 1;
    for (int32_t d = 0; d < r - 2; ++d) {
      ok = ok && b.shape[d] == a.shape[d] && out.shape[d] == a.shape[d];
      batch *= a.shape[d];
    }
    if (!ok) {
      return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                       "%s: a %s, b %s, out %s; expected a [B..., M, "
                       "K], b [B..., K, N], out [B..., M, N] with equal batch dims B (no "
                       "broadcasting: the SDK expands them)",
                       kCall, dims(a).c_str(), dims(b).c_str(), dims(out).c_str());
    }
    if (DK_Error* e = check_layout(kCall, "input 0 (a)", DK_OP_MATMUL, a)) return e;
    if (DK_Error* e = check_layout(kCall, "input 1 (b)", DK_OP_MATMUL, b)) return e;
    if (DK_Error* e = check_output_layout(kCall, out)) return e;
    if (DK_Error* e = check_no_alias(kCall, DK_OP_MATMUL, out, a, "input 0 (a)")) return e;
    if (DK_Error* e = check_no_alias(kCall, DK_OP_MATMUL, out, b, "input 1 (b)")) return e;
    if (out_numel == 0) return nullptr;
    MatmulLaunch l{a.data, b.data, out.data, a.dtype, batch, m, k, n, {}, r - 2, {}, {}, {}};
    l.strides[0] = a.strides[r - 2];
    l.strides[1] = a.strides[r - 1];
    l.strides[2] = b.strides[r - 2];
    l.strides[3] = b.strides[r - 1];
    for (int32_t d = 0; d < r - 2; ++d) {
      l.batch_shape[d] = a.shape[d];
      l.a_batch[d] = a.strides[d];
      l.b_batch[d] = b.strides[d];
    }
    enqueue(args->stream, run_matmul, l);
    return nullptr;
  });
}
