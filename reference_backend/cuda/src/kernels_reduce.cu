// Reductions and the scan: reduce_sum / reduce_max / reduce_min and argmax
// through one block-reduction kernel, cumsum through a column scan.
//
// Geometry (host): x's dims, size-1 ones dropped, neighbours of the same
// kind (kept / reduced) merged where their strides allow it (x may be
// strided: DK_KERNEL_CAP_STRIDED), split into the kept dims (in out's
// row-major order, out is dense) and the reduced dims. Output o reads
// x[kept.offset(o) + reduced.offset(r)] for r in [0, n_red).
//
// The kernel: blocks of 32 x 8 threads, in one of two shapes picked per launch
// (uniform, so every barrier is reached by the whole block):
//  * kRow: a block per output, its 256 threads striding over the reduction
//    (the reduced dims are innermost, or there are few outputs); then a warp
//    shuffle tree (dk_shfl_down) and the 8 warp results through shared memory;
//  * kTile: a block per 32 adjacent outputs (lanes; coalesced when the kept
//    dims are innermost), 8 threads per output striding over the reduction;
//    the 8 partials meet in shared memory.
// Each thread combines its elements in index order and the tree has a fixed
// shape, so a launch is bit-reproducible. Sums accumulate in double for
// float32 and float64, in float32 for float16 / bfloat16, in wrapping uint64
// for integers; max/min propagate NaN; argmax keeps the first index on ties
// and the first NaN (a total order on (value, index), so any tree gives the
// CPU plugin's answer).
#include <math.h>

#include "kernel.h"
#include "ops_math.h"

namespace dkcuda {
namespace {

// ---- Geometry -------------------------------------------------------------------

struct Dims {
  int32_t n;
  int64_t shape[DK_MAX_RANK], stride[DK_MAX_RANK];
  // Element offset of row-major index i (i < the dims' product): the
  // outermost dim takes what is left, so one dim costs no division.
  DK_HD int64_t offset(int64_t i) const {
    int64_t off = 0;
    for (int32_t d = n - 1; d > 0; --d) {
      off += (i % shape[d]) * stride[d];
      i /= shape[d];
    }
    return n > 0 ? off + i * stride[0] : 0;
  }
};

enum Shape : int32_t { kRow = 0, kTile = 1 };
constexpr int kWarps = 8, kThreads = 32 * kWarps;

struct ReducePlan {
  const char* x;
  char* out;
  int64_t n_out, n_red;
  int32_t shape;  // Shape
  Dims kept, red;
};

// ---- The reducers ----------------------------------------------------------------

enum Kind { kSum, kMax, kMin, kArgmax };

// Max, min and argmax compare in the compute type (float for the 16-bit
// floats: exact), integers as int64 (which every shuffle takes).
template <class T> using CmpAcc =
    typename std::conditional<dk_is_float<T>::value, dk_compute_t<T>, int64_t>::type;

// A reducer: accumulator type A, identity, load, combine (of a value with its
// index, used by argmax only), and the stored result.
template <class T, int kKind> struct Reducer {
  using A = typename std::conditional<kKind == kSum, ops::SumAcc<T>, CmpAcc<T>>::type;
  static constexpr bool kArg = kKind == kArgmax;
  using Storage = T;
  using Out = typename std::conditional<kArg, int64_t, T>::type;

  DK_HD static A identity() {
    if constexpr (kKind == kSum) return A(0);
    // (macros, not std::numeric_limits: its constexpr members are host
    // functions to nvcc without --expt-relaxed-constexpr)
    else if constexpr (kKind == kMax) {
      if constexpr (dk_is_float<T>::value) return -A(INFINITY);
      else return A(INT64_MIN);  // integers compare as int64
    } else if constexpr (kKind == kMin) {
      if constexpr (dk_is_float<T>::value) return A(INFINITY);
      else return A(INT64_MAX);
    } else {
      return A(0);  // argmax: index -1 marks "nothing yet"
    }
  }
  DK_HD static A load(T x) {
    if constexpr (kKind == kSum) return ops::sum_load(x);
    else return A(dk_widen(x));
  }
  // (a, ai) becomes the combination of itself and (b, bi).
  DK_HD static void combine(A& a, int64_t& ai, A b, int64_t bi) {
    if constexpr (kKind == kSum) {
      a = a + b;
    } else if constexpr (kKind == kMax) {
      if (b > a || b != b) a = b;  // a NaN a stays: nothing compares greater
    } else if constexpr (kKind == kMin) {
      if (b < a || b != b) a = b;
    } else {
      // The order: any NaN beats any number, else the larger value; on equal
      // values (or two NaNs) the smaller index. Index -1 is "empty".
      if (bi < 0) return;
      bool take;
      if (ai < 0) take = true;
      else if (a != a) take = b != b && bi < ai;
      else if (b != b) take = true;
      else take = b > a || (b == a && bi < ai);
      if (take) a = b, ai = bi;
    }
  }
  DK_HD static Out finish(A a, int64_t ai) {
    if constexpr (kArg) return ai;
    else if constexpr (kKind == kSum) {
      return ops::sum_store<T>(a);
    } else if constexpr (dk_is_half<T>::value) {
      return dk_narrow<T>(float(a));
    } else {
      return T(a);  // float32 from double: one rounding
    }
  }
};

// ---- The kernel --------------------------------------------------------------------

template <class R> DK_KERNEL reduce_kernel(ReducePlan p) {
  using A = typename R::A;
  DK_SHARED(A, s_val, kThreads);
  DK_SHARED(int64_t, s_idx, kThreads);
  const int tx = dk_thread_x(), ty = dk_thread_y();
  const bool row = p.shape == kRow;
  const int64_t o = row ? dk_block_x() : dk_block_x() * 32 + tx;
  const int64_t r0 = row ? ty * 32 + tx : ty, r_step = row ? kThreads : kWarps;
  A v = R::identity();
  int64_t vi = -1;
  if (o < p.n_out) {  // threads past the end skip the loads, not the barrier
    const int64_t base = p.kept.offset(o);
    const auto* xs = reinterpret_cast<const typename R::Storage*>(p.x);
    for (int64_t r = r0; r < p.n_red; r += r_step) {
      R::combine(v, vi, R::load(xs[base + p.red.offset(r)]), r);
    }
  }
  if (row) {
    // Within each warp by shuffles (every lane takes part), then the eight
    // warp results through shared memory, combined by thread 0 in warp order.
    for (int d = 16; d > 0; d /= 2) {
      const A b = dk_shfl_down(v, d);
      int64_t bi = 0;
      if constexpr (R::kArg) bi = dk_shfl_down(vi, d);
      R::combine(v, vi, b, bi);
    }
    if (tx == 0) {
      s_val[ty] = v;
      if (R::kArg) s_idx[ty] = vi;
    }
    dk_barrier();
    if (tx == 0 && ty == 0) {
      for (int w = 1; w < kWarps; ++w) {
        const A b = s_val[w];
        const int64_t bi = R::kArg ? int64_t(s_idx[w]) : int64_t(0);
        R::combine(v, vi, b, bi);
      }
      reinterpret_cast<typename R::Out*>(p.out)[o] = R::finish(v, vi);
    }
  } else {
    s_val[ty * 32 + tx] = v;
    if (R::kArg) s_idx[ty * 32 + tx] = vi;
    dk_barrier();
    if (ty == 0 && o < p.n_out) {
      for (int w = 1; w < kWarps; ++w) {
        const A b = s_val[w * 32 + tx];
        const int64_t bi = R::kArg ? int64_t(s_idx[w * 32 + tx]) : int64_t(0);
        R::combine(v, vi, b, bi);
      }
      reinterpret_cast<typename R::Out*>(p.out)[o] = R::finish(v, vi);
    }
  }
}

// ---- cumsum: a thread per column, in index order ------------------------------------
// x (contiguous) seen as [outer, length, inner]; each thread scans one
// (outer, inner) column sequentially: float32 keeps a double running sum
// (every prefix is then the correctly rounded float32 of a nearly exact sum,
// bit-identical to the CPU plugin), float16 / bfloat16 a float32 one,
// integers a wrapping uint64 one. Adjacent threads take adjacent inner
// columns, so the reads coalesce when inner > 1.

struct CumsumPlan {
  const char* x;
  char* out;
  int64_t outer, length, inner;
};

template <class T> DK_KERNEL cumsum_kernel(CumsumPlan p) {
  using R = Reducer<T, kSum>;
  using A = typename R::A;
  const T* x = reinterpret_cast<const T*>(p.x);
  T* out = reinterpret_cast<T*>(p.out);
  const int64_t columns = p.outer * p.inner;
  for (int64_t col = global_index(); col < columns; col += global_stride()) {
    const int64_t base = col / p.inner * p.length * p.inner + col % p.inner;
    A acc = A(0);
    for (int64_t i = 0; i < p.length; ++i) {
      acc = acc + R::load(x[base + i * p.inner]);
      out[base + i * p.inner] = R::finish(acc, 0);
    }
  }
}

// ---- Host side --------------------------------------------------------------------

// Splits x's dims into kept and reduced (bit d of `axes`: dim d reduced).
ReducePlan make_plan(const View& x, const View& out, uint32_t axes) {
  ReducePlan p{};
  p.x = x.data;
  p.out = out.data;
  p.n_out = out.numel;
  p.n_red = 1;
  int32_t n = 0;
  bool red[DK_MAX_RANK];
  int64_t shape[DK_MAX_RANK], stride[DK_MAX_RANK];
  for (int32_t d = 0; d < x.rank; ++d) {
    const bool r = (axes >> d) & 1;
    if (r) p.n_red *= x.shape[d];
    if (x.shape[d] == 1) continue;  // any stride, either kind: drop it
    if (n > 0 && red[n - 1] == r && stride[n - 1] == x.strides[d] * x.shape[d]) {
      shape[n - 1] *= x.shape[d];
      stride[n - 1] = x.strides[d];
    } else {
      red[n] = r;
      shape[n] = x.shape[d];
      stride[n++] = x.strides[d];
    }
  }
  for (int32_t g = 0; g < n; ++g) {
    Dims& to = red[g] ? p.red : p.kept;
    to.shape[to.n] = shape[g];
    to.stride[to.n++] = stride[g];
  }
  // A block per output when the reduction runs along the innermost memory
  // (or there are too few outputs to fill a tile); else 32 outputs a block.
  const bool inner_reduced = n > 0 && red[n - 1];
  p.shape = p.n_out < 32 || (inner_reduced && p.n_red >= 64) ? kRow : kTile;
  return p;
}

template <int kKind>
DK_Error* launch_reduce(const char* call, const DK_Kernel_Args* args, DK_OpId op) {
  Launch l;
  if (DK_Error* e = begin(call, args, op, &l)) return e;
  return guarded(call, [&]() -> DK_Error* {
    const View x = make_view(args->inputs[0]), out = make_view(args->outputs[0]);
    const uint32_t axes = kKind == kArgmax
                              ? 1u << static_cast<const DK_AxisAttrs*>(args->attrs)->axis
                              : static_cast<const DK_ReduceAttrs*>(args->attrs)->axes;
    const ReducePlan p = make_plan(x, out, axes);
    if (kKind != kSum && p.n_red == 0 && out.numel > 0) {
      return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                       "%s: input 0 is empty along the reduced dims (axes 0x%x); expected at "
                       "least one element per output, since a %s of nothing is undefined",
                       call, axes, kKind == kArgmax ? "argmax" : "max or min");
    }
    if (out.numel == 0) return nullptr;
    const unsigned blocks = unsigned(p.shape == kRow ? p.n_out : (p.n_out + 31) / 32);
    return dispatch(x.dtype, [&](auto tag) -> DK_Error* {
      using T = decltype(tag);
      if constexpr (std::is_same<T, dk_bool>::value) {
        return nullptr;  // no reduction declares bool
      } else {
        using R = Reducer<T, kKind>;
        return launched(
            call, DK_LAUNCH(reduce_kernel<R>, dk_dim3(blocks), dk_dim3(32, kWarps), l.stream, p));
      }
    });
  });
}

DK_Error* launch_cumsum(const char* call, const DK_Kernel_Args* args) {
  Launch l;
  if (DK_Error* e = begin(call, args, DK_OP_CUMSUM, &l)) return e;
  return guarded(call, [&]() -> DK_Error* {
    const View x = make_view(args->inputs[0]), out = make_view(args->outputs[0]);
    if (out.numel == 0) return nullptr;
    const int32_t axis = static_cast<const DK_AxisAttrs*>(args->attrs)->axis;
    CumsumPlan p{x.data, out.data, 1, x.shape[axis], 1};
    for (int32_t d = 0; d < axis; ++d) p.outer *= x.shape[d];
    for (int32_t d = axis + 1; d < x.rank; ++d) p.inner *= x.shape[d];
    return dispatch(x.dtype, [&](auto tag) -> DK_Error* {
      using T = decltype(tag);
      if constexpr (std::is_same<T, dk_bool>::value) {
        return nullptr;  // not in cumsum's mask
      } else {
        return launched(
            call, DK_LAUNCH(cumsum_kernel<T>, grid_for(p.outer * p.inner), kBlock, l.stream, p));
      }
    });
  });
}

}  // namespace
}  // namespace dkcuda

extern "C" {

DK_Error* dk_cuda_kernel_reduce_sum(const DK_Kernel_Args* args) {
  return dkcuda::launch_reduce<dkcuda::kSum>("cuda.Kernel(reduce_sum)", args, DK_OP_REDUCE_SUM);
}
DK_Error* dk_cuda_kernel_reduce_max(const DK_Kernel_Args* args) {
  return dkcuda::launch_reduce<dkcuda::kMax>("cuda.Kernel(reduce_max)", args, DK_OP_REDUCE_MAX);
}
DK_Error* dk_cuda_kernel_reduce_min(const DK_Kernel_Args* args) {
  return dkcuda::launch_reduce<dkcuda::kMin>("cuda.Kernel(reduce_min)", args, DK_OP_REDUCE_MIN);
}
DK_Error* dk_cuda_kernel_argmax(const DK_Kernel_Args* args) {
  return dkcuda::launch_reduce<dkcuda::kArgmax>("cuda.Kernel(argmax)", args, DK_OP_ARGMAX);
}
DK_Error* dk_cuda_kernel_cumsum(const DK_Kernel_Args* args) {
  return dkcuda::launch_cumsum("cuda.Kernel(cumsum)", args);
}

}  // extern "C"
