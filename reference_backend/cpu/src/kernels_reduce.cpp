// Reductions and scans along axes: reduce_sum / reduce_max / reduce_min,
// argmax and cumsum (the index ops are in kernels_index.cpp).
//
// Inputs are contiguous (no capability bits: the SDK materialises), so each
// kernel reduces its view to a few sizes and strides at launch and the worker
// loops over those. Accumulators follow the header: float16/bfloat16 in
// float32, integers in wrapping unsigned arithmetic (no signed overflow).
#include <algorithm>

#include "kernel_common.h"
#include "parallel.h"

namespace dkcpu {
namespace {

// ---- Accumulation types and the three reductions ----------------------------

// What a sum accumulates in: float for the 16-bit floats, uint64 for integers
// (sums modulo 2^64 reduce to the right value modulo 2^bits).
template <class T> using SumAcc = std::conditional_t<kIsFloat<T>, Wide<T>, uint64_t>;

template <class T>
T narrow(Wide<T> x) {  // back to storage; exact for max/min, rounds once for sums
  if constexpr (std::is_same<Wide<T>, T>::value) return x;
  else return convert<T>(x);
}

enum ReduceKind : int32_t { kSum, kMax, kMin };

template <class T, int kKind> struct Reducer {
  using A = std::conditional_t<kKind == kSum, SumAcc<T>, Wide<T>>;
  static A identity() {
    using L = std::numeric_limits<A>;
    if constexpr (kKind == kSum) return A(0);
    else if constexpr (kIsFloat<T>) return kKind == kMax ? -L::infinity() : L::infinity();
    else return kKind == kMax ? L::lowest() : L::max();
  }
  static A load(T x) {
    if constexpr (kKind == kSum && !kIsFloat<T>) return A(int64_t(x));  // sign-extend, then wrap
    else return widen_exact(x);
  }
  // max/min propagate NaN: a NaN b replaces a, and a NaN a stays (nothing
  // compares greater than it).
  static A combine(A a, A b) {
    if constexpr (kKind == kSum) return a + b;
    else return (kKind == kMax ? b > a : b < a) || b != b ? b : a;
  }
  // The hot loops use `step`, which for max/min ignores a NaN b: GCC turns
  // `b > a ? b : a` into a vector max, but not the NaN-aware select (with
  // trapping math it must not evaluate both compares). Those loops count
  // NaNs beside it (kCountNans) and poison the result when there was one.
  static constexpr bool kCountNans = kKind != kSum && kIsFloat<T>;
  static A step(A a, A b) {
    if constexpr (kKind == kSum) return a + b;
    else return (kKind == kMax ? b > a : b < a) ? b : a;
  }
  static A poison_if(int nans, A a) {
    return kCountNans && nans ? std::numeric_limits<A>::quiet_NaN() : a;
  }
  static T finish(A a) {
    if constexpr (kKind == kSum && !kIsFloat<T>) return T(std::make_unsigned_t<T>(a));
    else return narrow<T>(a);
  }
};

// ---- Reduction geometry -------------------------------------------------------

// x after dropping size-1 dims and merging neighbours of the same kind: kept
// and reduced dims alternate, so each list has at most DK_MAX_RANK / 2 + 1.
struct Dims {
  int32_t n = 0;
  int64_t shape[DK_MAX_RANK], stride[DK_MAX_RANK];
  int64_t numel() const {
    int64_t p = 1;
    for (int32_t d = 0; d < n; ++d) p *= shape[d];
    return p;
  }
  int64_t offset(int64_t i) const {  // element offset of row-major index i
    int64_t off = 0;
    for (int32_t d = n - 1; d >= 0; --d) {
      off += (i % shape[d]) * stride[d];
      i /= shape[d];
    }
    return off;
  }
};

struct ReduceLaunch {
  const char* x;
  char* out;
  DK_DType dtype;
  int32_t kind;          // ReduceKind
  bool inner_reduced;    // x's innermost (merged) dim is reduced
  Dims kept, reduced;    // kept dims are in out's row-major order
};

// Walks row-major indices of `dims` from `first`, keeping the element offset.
struct Odometer {
  const Dims& dims;
  int64_t idx[DK_MAX_RANK] = {}, off = 0;
  Odometer(const Dims& d, int64_t first) : dims(d) {
    for (int32_t k = d.n - 1; k >= 0; --k) {
      idx[k] = first % d.shape[k];
      first /= d.shape[k];
      off += idx[k] * d.stride[k];
    }
  }
  void next() {
    for (int32_t k = dims.n - 1; k >= 0; --k) {
      off += dims.stride[k];
      if (++idx[k] < dims.shape[k]) return;
      off -= dims.stride[k] * dims.shape[k];
      idx[k] = 0;
    }
  }
};

// Pairwise reduction of the index range [r0, r1) into acc[0, kLanes): halves
// until a leaf of at most `leaf` indices, so a float sum's rounding error grows
// with log(n), not n (max/min are exact either way).
template <class R, int kLanes, class Leaf>
void pairwise(int64_t r0, int64_t r1, int64_t leaf, typename R::A* acc, const Leaf& leaf_fn) {
  if (r1 - r0 <= leaf) {
    if (r1 > r0) leaf_fn(r0, r1, acc);  // (an empty range has no index to seek to)
    return;
  }
  const int64_t mid = r0 + (r1 - r0) / 2;
  typename R::A right[kLanes];
  for (int w = 0; w < kLanes; ++w) right[w] = R::identity();
  pairwise<R, kLanes>(r0, mid, leaf, acc, leaf_fn);
  pairwise<R, kLanes>(mid, r1, leaf, right, leaf_fn);
  for (int w = 0; w < kLanes; ++w) acc[w] = R::combine(acc[w], right[w]);
}

// One contiguous run: eight interleaved partial results (the loop vectorises
// and the additions do not wait on each other), pairwise above 128 elements.
template <class R, class T> typename R::A reduce_run(const T* p, int64_t n) {
  using A = typename R::A;
  if (n > 128) {
    const int64_t half = n / 2 / 8 * 8;
    return R::combine(reduce_run<R>(p, half), reduce_run<R>(p + half, n - half));
  }
  A part[8];
  int nans[8] = {};
  for (int j = 0; j < 8; ++j) part[j] = R::identity();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) {
      const A v = R::load(p[i + j]);
      part[j] = R::step(part[j], v);
      if constexpr (R::kCountNans) nans[j] += v != v;
    }
  }
  for (; i < n; ++i) {
    const A v = R::load(p[i]);
    part[0] = R::step(part[0], v);
    if constexpr (R::kCountNans) nans[0] += v != v;
  }
  const A r = R::combine(R::combine(R::combine(part[0], part[1]), R::combine(part[2], part[3])),
                         R::combine(R::combine(part[4], part[5]), R::combine(part[6], part[7])));
  int total = 0;
  for (int j = 0; j < 8; ++j) total += nans[j];
  return R::poison_if(total, r);
}

// The innermost dim is reduced: every output is a pairwise combination of
// contiguous runs of length `run` (one per index of the other reduced dims).
template <class R, class T> void reduce_inner(const ReduceLaunch& l) {
  const T* x = reinterpret_cast<const T*>(l.x);
  T* out = reinterpret_cast<T*>(l.out);
  Dims outer = l.reduced;  // the reduced dims but the innermost
  const int64_t run = outer.shape[--outer.n];
  const int64_t runs = outer.numel(), outputs = l.kept.numel();
  const int64_t runs_per_leaf = std::max<int64_t>(1, 128 / std::max<int64_t>(run, 1));
  parallel_for(outputs, std::max<int64_t>(1, 32768 / std::max<int64_t>(1, runs * run)),
               [&](int64_t o0, int64_t o1) {
                 for (int64_t o = o0; o < o1; ++o) {
                   const T* base = x + l.kept.offset(o);
                   typename R::A acc = R::identity();
                   pairwise<R, 1>(0, runs, runs_per_leaf, &acc,
                                  [&](int64_t r0, int64_t r1, typename R::A* a) {
                                    Odometer it(outer, r0);
                                    for (int64_t r = r0; r < r1; ++r, it.next())
                                      *a = R::combine(*a, reduce_run<R>(base + it.off, run));
                                  });
                   out[o] = R::finish(acc);
                 }
               });
}

// The innermost dim is kept: outputs adjacent along it are reduced together,
// kLanes at a time, so the inner loop reads contiguous memory and vectorises.
// Each output's running sum covers at most kLeaf rows before the pairwise
// tree takes over: with leaves of 128, a large first term followed by 127
// small ones lost all of them, past the header's 4 sqrt(n) u sum|x| bound; a
// chain of 16 stays inside it at every n (as reduce_run's 8 lanes of 16).
constexpr int64_t kLeaf = 16;
template <class R, class T, int kLanes>
void reduce_tile(const T* base, const Dims& reduced, typename R::A* acc) {
  for (int w = 0; w < kLanes; ++w) acc[w] = R::identity();
  pairwise<R, kLanes>(0, reduced.numel(), kLeaf, acc,
                      [&](int64_t r0, int64_t r1, typename R::A* a) {
                        Odometer it(reduced, r0);
                        int nans[kLanes] = {};
                        for (int64_t r = r0; r < r1; ++r, it.next()) {
                          for (int w = 0; w < kLanes; ++w) {
                            const typename R::A v = R::load(base[it.off + w]);
                            a[w] = R::step(a[w], v);
                            if constexpr (R::kCountNans) nans[w] += v != v;
                          }
                        }
                        for (int w = 0; w < kLanes; ++w) a[w] = R::poison_if(nans[w], a[w]);
                      });
}

template <class R, class T> void reduce_outer(const ReduceLaunch& l) {
  constexpr int kLanes = 16;
  const T* x = reinterpret_cast<const T*>(l.x);
  T* out = reinterpret_cast<T*>(l.out);
  Dims rows = l.kept;  // the kept dims but the innermost, which is contiguous
  const int64_t width = rows.shape[--rows.n];
  const int64_t tiles_per_row = (width + kLanes - 1) / kLanes;
  const int64_t tiles = rows.numel() * tiles_per_row, depth = l.reduced.numel();
  parallel_for(tiles, std::max<int64_t>(1, 2048 / std::max<int64_t>(1, depth)),
               [&](int64_t t0, int64_t t1) {
                 for (int64_t t = t0; t < t1; ++t) {
                   const int64_t row = t / tiles_per_row, col = t % tiles_per_row * kLanes;
                   const T* base = x + rows.offset(row) + col;
                   T* dst = out + row * width + col;
                   typename R::A acc[kLanes];
                   if (col + kLanes <= width) {
                     reduce_tile<R, T, kLanes>(base, l.reduced, acc);
                     for (int w = 0; w < kLanes; ++w) dst[w] = R::finish(acc[w]);
                   } else {  // the ragged end of a row, one output at a time
                     for (int64_t w = 0; col + w < width; ++w) {
                       reduce_tile<R, T, 1>(base + w, l.reduced, acc);
                       dst[w] = R::finish(acc[0]);
                     }
                   }
                 }
               });
}

DK_Error* run_reduce(const void* payload) {
  const ReduceLaunch& l = *static_cast<const ReduceLaunch*>(payload);
  dispatch(l.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same<T, boolean>::value) {  // not in the masks
      auto run = [&](auto reducer) {
        using R = decltype(reducer);
        if (l.inner_reduced) reduce_inner<R, T>(l);
        else reduce_outer<R, T>(l);
      };
      if (l.kind == kSum) run(Reducer<T, kSum>{});
      else if (l.kind == kMax) run(Reducer<T, kMax>{});
      else run(Reducer<T, kMin>{});
    }
  });
  return nullptr;
}

// ---- argmax, cumsum: one axis, x seen as [outer, length, inner] -------------

struct AxisLaunch {
  const char* x;
  char* out;
  DK_DType dtype;
  int64_t outer, length, inner;
};

inline void split_at_axis(const View& v, int32_t axis, AxisLaunch* l) {
  l->outer = l->inner = 1;
  for (int32_t d = 0; d < axis; ++d) l->outer *= v.shape[d];
  for (int32_t d = axis + 1; d < v.rank; ++d) l->inner *= v.shape[d];
  l->length = v.shape[axis];
}

// Columns of the inner dim are processed kTile at a time, so every loop runs
// over contiguous memory.
constexpr int64_t kTile = 64;

// Calls fn(o, c0, c1) for each outer index and tile of inner columns, in parallel.
template <class F> void for_each_column_tile(const AxisLaunch& l, const F& fn) {
  const int64_t tiles = (l.inner + kTile - 1) / kTile;
  parallel_for(l.outer * tiles, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, l.length)),
               [&](int64_t u0, int64_t u1) {
                 for (int64_t u = u0; u < u1; ++u) {
                   const int64_t c0 = u % tiles * kTile;
                   fn(u / tiles, c0, std::min(l.inner, c0 + kTile));
                 }
               });
}

DK_Error* run_argmax(const void* payload) {
  const AxisLaunch& l = *static_cast<const AxisLaunch*>(payload);
  dispatch(l.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same<T, boolean>::value) {
      const T* x = reinterpret_cast<const T*>(l.x);
      int64_t* out = reinterpret_cast<int64_t*>(l.out);
      for_each_column_tile(l, [&](int64_t o, int64_t c0, int64_t c1) {
        const T* col = x + o * l.length * l.inner;
        Wide<T> best[kTile];
        int64_t arg[kTile];
        for (int64_t c = c0; c < c1; ++c) best[c - c0] = widen_exact(col[c]), arg[c - c0] = 0;
        for (int64_t i = 1; i < l.length; ++i) {
          for (int64_t c = c0; c < c1; ++c) {
            const Wide<T> v = widen_exact(col[i * l.inner + c]);
            Wide<T>& b = best[c - c0];
            // Strictly greater keeps the first index on ties; the first NaN
            // wins and then nothing compares greater than it.
            if (b == b && (v != v || v > b)) b = v, arg[c - c0] = i;
          }
        }
        for (int64_t c = c0; c < c1; ++c) out[o * l.inner + c] = arg[c - c0];
      });
    }
  });
  return nullptr;
}

DK_Error* run_cumsum(const void* payload) {
  const AxisLaunch& l = *static_cast<const AxisLaunch*>(payload);
  dispatch(l.dtype, [&](auto tag) {
    using T = decltype(tag);
    // A scan is sequential, so float32 keeps a double running sum: every
    // prefix is then the correctly rounded float32 of a nearly exact sum.
    using A = std::conditional_t<std::is_same<T, float>::value, double, SumAcc<T>>;
    if constexpr (!std::is_same<T, boolean>::value) {
      const T* x = reinterpret_cast<const T*>(l.x);
      T* out = reinterpret_cast<T*>(l.out);
      for_each_column_tile(l, [&](int64_t o, int64_t c0, int64_t c1) {
        A acc[kTile] = {};
        for (int64_t i = 0; i < l.length; ++i) {
          const int64_t row = (o * l.length + i) * l.inner;
          for (int64_t c = c0; c < c1; ++c) {
            A& a = acc[c - c0];
            if constexpr (kIsFloat<T>) a += A(widen(x[row + c])), out[row + c] = convert<T>(a);
            else a += A(int64_t(x[row + c])), out[row + c] = T(std::make_unsigned_t<T>(a));
          }
        }
      });
    }
  });
  return nullptr;
}

// ---- Validation shared by the launchers -----------------------------------

// out must be x's shape with the dims in `axes` set to 1.
DK_Error* check_reduced_shape(const char* call, const View& x, const View& out, uint32_t axes) {
  bool ok = out.rank == x.rank;
  std::string expected = "[";
  for (int32_t d = 0; d < x.rank; ++d) {
    const int64_t want = (axes >> d) & 1 ? 1 : x.shape[d];
    ok = ok && out.shape[d] == want;
    expected += (d ? "," : "") + std::to_string(want);
  }
  if (ok) return nullptr;
  return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                   "%s: output 0 has shape %s; expected %s] (input 0 "
                   "%s with the reduced dims kept as size 1)",
                   call, dims(out).c_str(), expected.c_str(), dims(x).c_str());
}

// Loads input 0 (if any) and output 0, checks dtype, layout and aliasing.
DK_Error* load_unary(const char* call, DK_OpId op, const DK_Kernel_Args* a, View* x, View* out,
                     int64_t* out_numel, bool out_same_dtype = true) {
  int64_t x_numel = 0;
  if (DK_Error* e = load_view(call, "input 0", a, a->inputs[0], x, &x_numel)) return e;
  if (DK_Error* e = load_view(call, "output 0", a, a->outputs[0], out, out_numel)) return e;
  if (DK_Error* e = check_dtype_declared(call, "input 0", op, *x)) return e;
  if (out_same_dtype) {
    if (DK_Error* e = check_same_dtype(call, "output 0", *out, *x, "input 0")) return e;
  }
  if (DK_Error* e = check_layout(call, "input 0", op, *x)) return e;
  if (DK_Error* e = check_output_layout(call, *out)) return e;
  return check_no_alias(call, op, *out, *x, "input 0");
}

DK_Error* launch_reduce(const char* call, DK_OpId op, ReduceKind kind, const DK_Kernel_Args* args) {
  if (DK_Error* e = check_call(call, args, op, 1, 1)) return e;
  return guarded(call, [&]() -> DK_Error* {
    View x, out;
    int64_t out_numel = 0;
    const DK_ReduceAttrs* attrs;
    if (DK_Error* e = load_unary(call, op, args, &x, &out, &out_numel)) return e;
    if (DK_Error* e = load_attrs(call, args, DK_ReduceAttrs_STRUCT_SIZE, "DK_ReduceAttrs", &attrs))
      return e;
    const uint32_t valid = x.rank >= 32 ? ~0u : (1u << x.rank) - 1;
    if (attrs->axes == 0 || (attrs->axes & ~valid) != 0) {
      return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                       "%s: attrs->axes is 0x%x; expected a non-zero "
                       "mask of dims below the rank %d of input 0 %s",
                       call, attrs->axes, x.rank, dims(x).c_str());
    }
    if (DK_Error* e = check_reduced_shape(call, x, out, attrs->axes)) return e;
    ReduceLaunch l{x.data, out.data, x.dtype, kind, false, {}, {}};
    Dims all;
    bool red[DK_MAX_RANK];
    int64_t reduced_numel = 1;
    for (int32_t d = 0; d < x.rank; ++d) {
      const bool r = (attrs->axes >> d) & 1;
      if (r) reduced_numel *= x.shape[d];
      if (x.shape[d] == 1) continue;  // any stride, either kind: drop it
      if (all.n > 0 && red[all.n - 1] == r) {
        all.shape[all.n - 1] *= x.shape[d];
      } else {
        red[all.n] = r;
        all.shape[all.n++] = x.shape[d];
      }
    }
    if (kind != kSum && reduced_numel == 0 && out_numel > 0) {
      return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                       "%s: input 0 %s is empty along the reduced dims "
                       "(axes 0x%x); expected at least one element per output, since a max or "
                       "min of nothing is undefined",
                       call, dims(x).c_str(), attrs->axes);
    }
    if (out_numel == 0) return nullptr;
    int64_t stride = 1;  // x is contiguous, so merged dims are too
    for (int32_t d = all.n - 1; d >= 0; --d) {
      all.stride[d] = stride;
      stride *= all.shape[d];
    }
    for (int32_t d = 0; d < all.n; ++d) {
      Dims& to = red[d] ? l.reduced : l.kept;
      to.shape[to.n] = all.shape[d];
      to.stride[to.n++] = all.stride[d];
    }
    l.inner_reduced = all.n > 0 && red[all.n - 1];
    if (!l.inner_reduced && l.kept.n == 0) {  // nothing left (every dim had size 1)
      l.kept.shape[0] = 1;
      l.kept.stride[0] = 1;
      l.kept.n = 1;
    }
    enqueue(args->stream, run_reduce, l);
    return nullptr;
  });
}

// argmax and cumsum: one axis of input 0.
DK_Error* launch_axis(const char* call, DK_OpId op, WorkFn fn, const DK_Kernel_Args* args) {
  if (DK_Error* e = check_call(call, args, op, 1, 1)) return e;
  return guarded(call, [&]() -> DK_Error* {
    View x, out;
    int64_t out_numel = 0;
    const DK_AxisAttrs* attrs;
    const bool is_argmax = op == DK_OP_ARGMAX;
    if (DK_Error* e = load_unary(call, op, args, &x, &out, &out_numel, !is_argmax)) return e;
    if (DK_Error* e = load_attrs(call, args, DK_AxisAttrs_STRUCT_SIZE, "DK_AxisAttrs", &attrs))
      return e;
    if (DK_Error* e = check_axis(call, attrs->axis, x, "input 0")) return e;
    if (is_argmax) {
      if (out.dtype != DK_DTYPE_INT64) {
        return dkh_error(DK_ERROR_INVALID_ARGUMENT, "%s: output 0 is %s; expected int64", call,
                         dkh_dtype_name(out.dtype));
      }
      if (DK_Error* e = check_reduced_shape(call, x, out, 1u << attrs->axis)) return e;
      if (x.shape[attrs->axis] == 0 && out_numel > 0) {
        return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                         "%s: input 0 %s has size 0 along axis %d; "
                         "expected at least one element to take the argmax of",
                         call, dims(x).c_str(), attrs->axis);
      }
    } else if (DK_Error* e = check_same_shape(call, "output 0", out, x, "input 0")) {
      return e;
    }
    AxisLaunch l{};
    l.x = x.data;
    l.out = out.data;
    l.dtype = x.dtype;
    split_at_axis(x, attrs->axis, &l);
    if (out_numel > 0) enqueue(args->stream, fn, l);
    return nullptr;
  });
}

}  // namespace
}  // namespace dkcpu

using namespace dkcpu;

extern "C" {

DK_Error* dk_cpu_kernel_reduce_sum(const DK_Kernel_Args* args) {
  return launch_reduce("cpu.Kernel(reduce_sum)", DK_OP_REDUCE_SUM, kSum, args);
}

DK_Error* dk_cpu_kernel_reduce_max(const DK_Kernel_Args* args) {
  return launch_reduce("cpu.Kernel(reduce_max)", DK_OP_REDUCE_MAX, kMax, args);
}

DK_Error* dk_cpu_kernel_reduce_min(const DK_Kernel_Args* args) {
  return launch_reduce("cpu.Kernel(reduce_min)", DK_OP_REDUCE_MIN, kMin, args);
}

DK_Error* dk_cpu_kernel_argmax(const DK_Kernel_Args* args) {
  return launch_axis("cpu.Kernel(argmax)", DK_OP_ARGMAX, run_argmax, args);
}

DK_Error* dk_cpu_kernel_cumsum(const DK_Kernel_Args* args) {
  return launch_axis("cpu.Kernel(cumsum)", DK_OP_CUMSUM, run_cumsum, args);
}

}  // extern "C"
