// The 1.1 ops that compute or follow indices along one axis: iota, gather
// and scatter_add.
//
// iota's output is contiguous; gather and scatter_add read and write
// strided views (DK_KERNEL_CAP_STRIDED). An index
// is data, so it can only be checked when the kernel runs: an out-of-range one
// becomes the asynchronous error of the stream, which its next synchronize
// reports with the position, the value and the valid range.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <vector>

#include "kernel_common.h"
#include "parallel.h"

namespace dkcpu {
namespace {

// ---- iota: out seen as [outer, length, inner] ------------------------------

struct IotaLaunch {
  char* out;
  DK_DType dtype;
  int64_t outer, length, inner;
  bool exact_int;          // start and step are both integers
  int64_t start_i, step_i;
  double start_f, step_f;
};

DK_Error* run_iota(const void* payload) {
  const IotaLaunch& l = *static_cast<const IotaLaunch*>(payload);
  dispatch(l.dtype, [&](auto tag) {
    using T = decltype(tag);
    T* out = reinterpret_cast<T*>(l.out);
    const int64_t grain = std::max<int64_t>(1, 16384 / l.inner);
    parallel_for(l.outer * l.length, grain, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t i = r % l.length;
        // Integer start and step: exact int64 arithmetic (wrapping), then one
        // conversion; otherwise in double, then one conversion.
        const T v =
            l.exact_int
                ? convert<T>(int64_t(uint64_t(l.start_i) + uint64_t(i) * uint64_t(l.step_i)))
                : convert<T>(l.start_f + double(i) * l.step_f);
        std::fill(out + r * l.inner, out + (r + 1) * l.inner, v);
      }
    });
  });
  return nullptr;
}

// ---- gather, scatter_add ---------------------------------------------------
//
// Both read their views through strides (DK_KERNEL_CAP_STRIDED): the SDK's
// embedding passes an index expanded along the row (stride 0) and its
// backward a transposed one, which would otherwise be copied first. They walk
// the index's shape row by row (the last dim is a row) like an odometer;
// a row whose index does not move along it (stride 0, axis not the last dim)
// is one range check and one run of copies or adds.

struct IndexLaunch {
  const char* x;
  const int64_t* index;
  const char* src;    // scatter_add only
  char* out;
  DK_DType dtype;
  int32_t rank, axis;
  int64_t x_shape[DK_MAX_RANK];
  int64_t idx_shape[DK_MAX_RANK];  // index's shape (gather: = out's; scatter_add: = src's)
  int64_t x_st[DK_MAX_RANK], idx_st[DK_MAX_RANK], src_st[DK_MAX_RANK], out_st[DK_MAX_RANK];
};

// Offsets (in elements) of the first element of index row `row` (the
// row-major number of its position over all dims but the last) in the index,
// src or out view (`st`), and in x with the axis coordinate left out.
struct RowStart { int64_t idx = 0, other = 0, x = 0; };

inline RowStart row_start(const IndexLaunch& l, const int64_t* other_st, int64_t row) {
  RowStart r;
  for (int32_t d = l.rank - 2; d >= 0; --d) {
    const int64_t i = row % l.idx_shape[d];
    row /= l.idx_shape[d];
    r.idx += i * l.idx_st[d];
    r.other += i * other_st[d];
    if (d != l.axis) r.x += i * l.x_st[d];
  }
  return r;
}

DK_Error* out_of_range(const char* call, const IndexLaunch& l, int64_t pos, int64_t value) {
  std::string where = "[";
  for (int32_t d = l.rank - 1, p = 0; d >= 0; --d, p = 1) {
    where.insert(1, std::to_string(pos % l.idx_shape[d]) + (p ? "," : ""));
    pos /= l.idx_shape[d];
  }
  return dkh_error(DK_ERROR_OUT_OF_RANGE,
                   "%s: index%s] is %lld, out of range for dim %d of x "
                   "(size %lld); expected 0 <= index < %lld. Output 0 is left unspecified.",
                   call, where.c_str(), (long long)value, l.axis, (long long)l.x_shape[l.axis],
                   (long long)l.x_shape[l.axis]);
}

// The first out-of-range index of row `row` (its position along the row),
// or -1.
inline int64_t first_bad(const IndexLaunch& l, const int64_t* idx, int64_t len, int64_t step) {
  const int64_t size = l.x_shape[l.axis];
  for (int64_t j = 0; j < len; ++j) {
    const int64_t i = idx[j * step];
    if (i < 0 || i >= size) return j;
  }
  return -1;
}

DK_Error* run_gather(const void* payload) {
  const IndexLaunch& l = *static_cast<const IndexLaunch*>(payload);
  const int32_t last = l.rank - 1;
  const int64_t len = l.idx_shape[last], rows = len ? [&] {
    int64_t n = 1;
    for (int32_t d = 0; d < last; ++d) n *= l.idx_shape[d];
    return n;
  }()
                                                    : 0;
  const int64_t es = dkh_dtype_size(l.dtype), xa = l.x_st[l.axis];
  const int64_t is = l.idx_st[last], xs = l.x_st[last], os = l.out_st[last];
  // One index per row, read as a block: the embedding's row gather.
  const bool row_copy = l.axis != last && is == 0 && xs == 1 && os == 1;
  std::mutex mu;
  int64_t bad_pos = INT64_MAX, bad_value = 0;  // the first bad index in row-major order
  parallel_for(rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(len, 1)),
               [&](int64_t r0, int64_t r1) {
                 for (int64_t r = r0; r < r1; ++r) {
                   const RowStart s = row_start(l, l.out_st, r);
                   const int64_t* idx = l.index + s.idx;
                   const int64_t bad = first_bad(l, idx, row_copy ? 1 : len, is);
                   if (bad >= 0) {
                     std::lock_guard<std::mutex> lock(mu);
                     if (r * len + bad < bad_pos)
                       bad_pos = r * len + bad, bad_value = idx[bad * is];
                     return;
                   }
                   char* out = l.out + s.other * es;
                   if (row_copy) {
                     std::memcpy(out, l.x + (s.x + idx[0] * xa) * es, size_t(len * es));
                     continue;
                   }
                   for (int64_t j = 0; j < len; ++j) {
                     const int64_t xo = s.x + idx[j * is] * xa + (l.axis == last ? 0 : j * xs);
                     std::memcpy(out + j * os * es, l.x + xo * es, size_t(es));
                   }
                 }
               });
  return bad_pos != INT64_MAX ? out_of_range("cpu.Kernel(gather)", l, bad_pos, bad_value) : nullptr;
}

// Visits x's elements in row-major order with their offset in a view of x's
// shape and strides `st`, a row (the last dim) at a time.
template <typename F> void for_each_x(const IndexLaunch& l, const int64_t* st, F&& f) {
  const int32_t last = l.rank - 1;
  const int64_t len = l.x_shape[last], step = st[last];
  int64_t rows = 1;
  for (int32_t d = 0; d < last; ++d) rows *= l.x_shape[d];
  if (len == 0) return;
  for (int64_t r = 0; r < rows; ++r) {
    int64_t off = 0, rest = r;
    for (int32_t d = last - 1; d >= 0; --d)
      off += (rest % l.x_shape[d]) * st[d], rest /= l.x_shape[d];
    for (int64_t j = 0; j < len; ++j) f(r * len + j, off + j * step);
  }
}

DK_Error* run_scatter_add(const void* payload) {
  const IndexLaunch& l = *static_cast<const IndexLaunch*>(payload);
  const int32_t last = l.rank - 1;
  int64_t rows = 1, x_numel = 1, x_contig[DK_MAX_RANK];
  for (int32_t d = 0; d < last; ++d) rows *= l.idx_shape[d];
  for (int32_t d = last; d >= 0; --d) x_contig[d] = x_numel, x_numel *= l.x_shape[d];
  const int64_t len = l.idx_shape[last], is = l.idx_st[last], ss = l.src_st[last];
  if (len == 0) rows = 0;
  // The accumulator is x's shape, row-major; rows of index/src land in it
  // through x_contig.
  IndexLaunch acc_l = l;
  std::copy(x_contig, x_contig + l.rank, acc_l.x_st);
  const int64_t aa = x_contig[l.axis];
  const bool row_add = l.axis != last && is == 0;
  DK_Error* err = nullptr;
  dispatch(l.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same<T, boolean>::value) {
      const T* x = reinterpret_cast<const T*>(l.x);
      const T* src = reinterpret_cast<const T*>(l.src);
      T* out = reinterpret_cast<T*>(l.out);
      // Sequential in src's row-major order: deterministic, and no two
      // threads ever add into one element. Sequential adds of one element
      // round in step (an embedding's gradient adds one row many times), so
      // float32 accumulates in a double copy, float16/bfloat16 in a float32
      // one (as cumsum does), rounded once at the end.
      using A = typename std::conditional_t<
          std::is_same<T, float>::value, std::common_type<double>,
          std::conditional_t<kIsFloat<T>, std::common_type<Wide<T>>,
                             std::make_unsigned<T>>>::type;  // (picked lazily)
      std::vector<A> acc(static_cast<size_t>(x_numel));
      for_each_x(l, l.x_st, [&](int64_t e, int64_t off) { acc[e] = A(widen_exact(x[off])); });
      for (int64_t r = 0; r < rows && !err; ++r) {
        const RowStart s = row_start(acc_l, l.src_st, r);
        const int64_t* idx = l.index + s.idx;
        const int64_t bad = first_bad(l, idx, row_add ? 1 : len, is);
        if (bad >= 0) {
          err = out_of_range("cpu.Kernel(scatter_add)", l, r * len + bad, idx[bad * is]);
          break;
        }
        const T* sr = src + s.other;
        if (row_add) {
          A* a = acc.data() + s.x + idx[0] * aa;
          for (int64_t j = 0; j < len; ++j) a[j] += A(widen_exact(sr[j * ss]));
          continue;
        }
        for (int64_t j = 0; j < len; ++j) {
          const int64_t ao = s.x + idx[j * is] * aa + (l.axis == last ? 0 : j);
          acc[ao] += A(widen_exact(sr[j * ss]));
        }
      }
      for_each_x(l, l.out_st, [&](int64_t e, int64_t off) {
        if constexpr (kIsFloat<T>) out[off] = convert<T>(acc[e]);
        else out[off] = T(acc[e]);
      });
    }
  });
  return err;
}

// ---- Validation ------------------------------------------------------------

// Checks an index-op tensor's shape against x's: same rank, and no larger
// than x in any dim but the axis (torch.gather / scatter_add).
DK_Error* check_index_shape(const char* call, const char* what, const View& v, const View& x,
                            int32_t axis) {
  bool ok = v.rank == x.rank;
  for (int32_t d = 0; ok && d < v.rank; ++d) ok = d == axis || v.shape[d] <= x.shape[d];
  if (ok) return nullptr;
  return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                   "%s: %s has shape %s; expected rank %d and a size "
                   "<= x's in every dim but axis %d (x is %s)",
                   call, what, dims(v).c_str(), x.rank, axis, dims(x).c_str());
}

}  // namespace
}  // namespace dkcpu

using namespace dkcpu;

extern "C" {

DK_Error* dk_cpu_kernel_iota(const DK_Kernel_Args* args) {
  static const char* const kCall = "cpu.Kernel(iota)";
  if (DK_Error* e = check_call(kCall, args, DK_OP_IOTA, 0, 1)) return e;
  return guarded(kCall, [&]() -> DK_Error* {
    View out;
    int64_t numel = 0;
    const DK_IotaAttrs* attrs;
    if (DK_Error* e = load_view(kCall, "output 0", args, args->outputs[0], &out, &numel)) return e;
    if (DK_Error* e = check_dtype_declared(kCall, "output 0", DK_OP_IOTA, out)) return e;
    if (DK_Error* e = check_output_layout(kCall, out)) return e;
    if (DK_Error* e = load_attrs(kCall, args, DK_IotaAttrs_STRUCT_SIZE, "DK_IotaAttrs", &attrs))
      return e;
    if (DK_Error* e = check_axis(kCall, attrs->axis, out, "output 0")) return e;
    IotaLaunch l{};
    if (DK_Error* e = check_scalar(kCall, "start", attrs->start)) return e;
    if (DK_Error* e = check_scalar(kCall, "step", attrs->step)) return e;
    auto is_int = [](const DK_Scalar& s) { return s.dtype != DK_DTYPE_FLOAT64; };
    auto as_double = [&](const DK_Scalar& s) { return is_int(s) ? double(s.value.i) : s.value.f; };
    l.exact_int = is_int(attrs->start) && is_int(attrs->step);
    l.start_i = attrs->start.value.i;
    l.step_i = attrs->step.value.i;
    l.start_f = as_double(attrs->start);
    l.step_f = as_double(attrs->step);
    l.out = out.data;
    l.dtype = out.dtype;
    l.outer = l.inner = 1;
    for (int32_t d = 0; d < attrs->axis; ++d) l.outer *= out.shape[d];
    for (int32_t d = attrs->axis + 1; d < out.rank; ++d) l.inner *= out.shape[d];
    l.length = out.shape[attrs->axis];
    if (numel > 0) enqueue(args->stream, run_iota, l);
    return nullptr;
  });
}

// gather(x, index) and scatter_add(x, index, src) share their checks.
static DK_Error* launch_index(const char* call, DK_OpId op, const DK_Kernel_Args* args) {
  const bool scatter = op == DK_OP_SCATTER_ADD;
  if (DK_Error* e = check_call(call, args, op, scatter ? 3 : 2, 1)) return e;
  return guarded(call, [&]() -> DK_Error* {
    View x{}, index{}, src{}, out{};
    int64_t numel = 0, index_numel = 0, out_numel = 0;
    const DK_AxisAttrs* attrs;
    if (DK_Error* e = load_view(call, "input 0 (x)", args, args->inputs[0], &x, &numel)) return e;
    if (DK_Error* e =
            load_view(call, "input 1 (index)", args, args->inputs[1], &index, &index_numel))
      return e;
    if (scatter) {
      if (DK_Error* e = load_view(call, "input 2 (src)", args, args->inputs[2], &src, &numel))
        return e;
    }
    if (DK_Error* e = load_view(call, "output 0", args, args->outputs[0], &out, &out_numel))
      return e;
    if (DK_Error* e = check_dtype_declared(call, "input 0 (x)", op, x)) return e;
    if (DK_Error* e = check_same_dtype(call, "output 0", out, x, "input 0 (x)")) return e;
    if (scatter) {
      if (DK_Error* e = check_same_dtype(call, "input 2 (src)", src, x, "input 0 (x)")) return e;
    }
    if (index.dtype != DK_DTYPE_INT64) {
      return dkh_error(DK_ERROR_INVALID_ARGUMENT, "%s: input 1 (index) is %s; expected int64", call,
                       dkh_dtype_name(index.dtype));
    }
    if (DK_Error* e = load_attrs(call, args, DK_AxisAttrs_STRUCT_SIZE, "DK_AxisAttrs", &attrs))
      return e;
    if (DK_Error* e = check_axis(call, attrs->axis, x, "input 0 (x)")) return e;
    if (DK_Error* e = check_index_shape(call, "input 1 (index)", index, x, attrs->axis)) return e;
    if (scatter) {
      if (DK_Error* e = check_same_shape(call, "input 2 (src)", src, index, "input 1 (index)"))
        return e;
      if (DK_Error* e = check_same_shape(call, "output 0", out, x, "input 0 (x)")) return e;
    } else if (DK_Error* e = check_same_shape(call, "output 0", out, index, "input 1 (index)")) {
      return e;
    }
    const View* ins[3] = {&x, &index, &src};
    static const char* const kNames[3] = {"input 0 (x)", "input 1 (index)", "input 2 (src)"};
    for (int i = 0; i < (scatter ? 3 : 2); ++i) {
      if (DK_Error* e = check_layout(call, kNames[i], op, *ins[i])) return e;
      if (DK_Error* e = check_no_alias(call, op, out, *ins[i], kNames[i])) return e;
    }
    if (DK_Error* e = check_output_layout(call, out)) return e;
    // (An empty out with a non-empty index still runs: every index is then
    // out of range, and that must be reported.)
    if (out_numel == 0 && index_numel == 0) return nullptr;
    IndexLaunch l{};
    l.x = x.data;
    l.index = reinterpret_cast<const int64_t*>(index.data);
    l.src = src.data;
    l.out = out.data;
    l.dtype = x.dtype;
    l.rank = x.rank;
    l.axis = attrs->axis;
    std::copy(x.shape, x.shape + x.rank, l.x_shape);
    std::copy(index.shape, index.shape + index.rank, l.idx_shape);
    std::copy(x.strides, x.strides + x.rank, l.x_st);
    std::copy(index.strides, index.strides + index.rank, l.idx_st);
    std::copy(out.strides, out.strides + out.rank, l.out_st);
    if (scatter) std::copy(src.strides, src.strides + src.rank, l.src_st);
    enqueue(args->stream, scatter ? run_scatter_add : run_gather, l);
    return nullptr;
  });
}

DK_Error* dk_cpu_kernel_gather(const DK_Kernel_Args* args) {
  return launch_index("cpu.Kernel(gather)", DK_OP_GATHER, args);
}

DK_Error* dk_cpu_kernel_scatter_add(const DK_Kernel_Args* args) {
  return launch_index("cpu.Kernel(scatter_add)", DK_OP_SCATTER_ADD, args);
}

}  // extern "C"
