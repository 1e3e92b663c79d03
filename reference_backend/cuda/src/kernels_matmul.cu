// matmul: a [B..., M, K] @ b [B..., K, N] -> out [B..., M, N], a tiled
// shared-memory kernel (no cuBLAS).
//
// a and b may have any non-negative strides (DK_KERNEL_CAP_STRIDED): a
// transposed weight, a broadcast batch (stride 0), a slice; out is dense.
// A block of 16 x 16 threads computes a 64 x 64 tile of out, each thread
// 4 x 4 outputs (rows ty + 16 i, columns tx + 16 j, so a warp's shared reads
// are broadcasts or consecutive words). K advances 16 at a time: the block
// stages a 64 x 16 slice of a and a 16 x 64 slice of b in shared memory
// (widened to the accumulator type, zeros past the edges), barriers,
// multiplies, barriers. Every thread runs the same number of K steps, so
// every barrier is reached by the whole block. grid.z walks the batch.
// Accumulators: float32 for float32 / float16 / bfloat16, double for float64,
// wrapping uint32 (uint64 for int64) for integers; each output sums its
// terms in K order.
#include "kernel.h"
#include "ops_math.h"

namespace dkcuda {
namespace {

constexpr int kTile = 64, kStep = 16, kPer = 4;  // kTile = 16 threads * kPer

struct MatmulPlan {
  const char* a;
  const char* b;
  char* out;
  int64_t batch, m, k, n;
  int64_t sa_row, sa_col, sb_row, sb_col;  // elements
  int32_t batch_rank;
  int64_t batch_shape[DK_MAX_RANK], a_batch[DK_MAX_RANK], b_batch[DK_MAX_RANK];
};

template <class T> struct MatAccOf { using type = dk_compute_t<T>; };  // float, double
template <> struct MatAccOf<int8_t> { using type = uint32_t; };
template <> struct MatAccOf<int32_t> { using type = uint32_t; };
template <> struct MatAccOf<uint8_t> { using type = uint32_t; };
template <> struct MatAccOf<int64_t> { using type = uint64_t; };

template <class T> DK_HD typename MatAccOf<T>::type mat_load(T x) {
  using A = typename MatAccOf<T>::type;
  if constexpr (dk_is_float<T>::value) return A(dk_widen(x));
  else return A(int64_t(x));  // sign-extend; products and sums then wrap
}
template <class T> DK_HD T mat_store(typename MatAccOf<T>::type acc) {
  if constexpr (dk_is_float<T>::value) return dk_narrow<T>(acc);
  else return T(typename std::make_unsigned<T>::type(acc));  // modulo 2^bits
}

template <class T> DK_KERNEL matmul_kernel(MatmulPlan p) {
  using A = typename MatAccOf<T>::type;
  DK_SHARED(A, s_a, kStep * kTile);  // [k][m]
  DK_SHARED(A, s_b, kStep * kTile);  // [k][n]
  const int tx = dk_thread_x(), ty = dk_thread_y(), t = ty * 16 + tx;
  const int64_t row0 = dk_block_y() * kTile, col0 = dk_block_x() * kTile;
  const T* a_all = reinterpret_cast<const T*>(p.a);
  const T* b_all = reinterpret_cast<const T*>(p.b);
  for (int64_t bi = dk_block_z(); bi < p.batch; bi += dk_grid_dim_z()) {  // uniform per block
    int64_t a_off = 0, b_off = 0, rest = bi;
    for (int32_t d = p.batch_rank - 1; d >= 0; --d) {
      const int64_t c = rest % p.batch_shape[d];
      rest /= p.batch_shape[d];
      a_off += c * p.a_batch[d];
      b_off += c * p.b_batch[d];
    }
    const T* a = a_all + a_off;
    const T* b = b_all + b_off;
    A acc[kPer][kPer];
    for (int i = 0; i < kPer; ++i)
      for (int j = 0; j < kPer; ++j) acc[i][j] = A(0);
    for (int64_t k0 = 0; k0 < p.k; k0 += kStep) {
      // Stage: 1024 elements of each slice, 4 per thread; consecutive
      // threads take consecutive rows of a (columns of b).
      for (int q = 0; q < kTile * kStep / 256; ++q) {
        const int e = t + 256 * q, mn = e % kTile, kk = e / kTile;
        const int64_t r = row0 + mn, c = col0 + mn, kg = k0 + kk;
        s_a[kk * kTile + mn] =
            r < p.m && kg < p.k ? mat_load(a[r * p.sa_row + kg * p.sa_col]) : A(0);
        s_b[kk * kTile + mn] =
            c < p.n && kg < p.k ? mat_load(b[kg * p.sb_row + c * p.sb_col]) : A(0);
      }
      dk_barrier();
      for (int kk = 0; kk < kStep; ++kk) {
        A av[kPer], bv[kPer];
        for (int i = 0; i < kPer; ++i) av[i] = s_a[kk * kTile + ty + 16 * i];
        for (int j = 0; j < kPer; ++j) bv[j] = s_b[kk * kTile + tx + 16 * j];
        for (int i = 0; i < kPer; ++i)
          for (int j = 0; j < kPer; ++j) acc[i][j] = acc[i][j] + av[i] * bv[j];
      }
      dk_barrier();  // before the next stage overwrites the slices
    }
    T* out = reinterpret_cast<T*>(p.out) + bi * p.m * p.n;
    for (int i = 0; i < kPer; ++i) {
      const int64_t r = row0 + ty + 16 * i;
      for (int j = 0; j < kPer; ++j) {
        const int64_t c = col0 + tx + 16 * j;
        if (r < p.m && c < p.n) out[r * p.n + c] = mat_store<T>(acc[i][j]);
      }
    }
  }
}

DK_Error* launch_matmul(const char* call, const DK_Kernel_Args* args) {
  Launch l;
  if (DK_Error* e = begin(call, args, DK_OP_MATMUL, &l)) return e;
  return guarded(call, [&]() -> DK_Error* {
    const View a = make_view(args->inputs[0]), b = make_view(args->inputs[1]);
    const View out = make_view(args->outputs[0]);
    if (out.numel == 0) return nullptr;
    const int32_t r = a.rank;
    MatmulPlan p{};
    p.a = a.data;
    p.b = b.data;
    p.out = out.data;
    p.m = a.shape[r - 2];
    p.k = a.shape[r - 1];
    p.n = b.shape[r - 1];
    p.sa_row = a.strides[r - 2];
    p.sa_col = a.strides[r - 1];
    p.sb_row = b.strides[r - 2];
    p.sb_col = b.strides[r - 1];
    p.batch = 1;
    p.batch_rank = r - 2;
    for (int32_t d = 0; d < r - 2; ++d) {
      p.batch *= a.shape[d];
      p.batch_shape[d] = a.shape[d];
      p.a_batch[d] = a.strides[d];
      p.b_batch[d] = b.strides[d];
    }
    const dk_dim3 grid(unsigned((p.n + kTile - 1) / kTile), unsigned((p.m + kTile - 1) / kTile),
                       unsigned(p.batch < 65535 ? p.batch : 65535));
    return dispatch(a.dtype, [&](auto tag) -> DK_Error* {
      using T = decltype(tag);
      if constexpr (std::is_same<T, dk_bool>::value) return nullptr;  // not in the mask
      else return launched(call, DK_LAUNCH(matmul_kernel<T>, grid, dk_dim3(16, 16), l.stream, p));
    });
  });
}

}  // namespace
}  // namespace dkcuda

extern "C" DK_Error* dk_cuda_kernel_matmul(const DK_Kernel_Args* args) {
  return dkcuda::launch_matmul("cuda.Kernel(matmul)", args);
}
