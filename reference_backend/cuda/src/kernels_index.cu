// The 1.1 ops that compute or follow indices along one axis: iota, gather
// and scatter_add.
//
// gather and scatter_add read x, index and src through their strides
// (DK_KERNEL_CAP_STRIDED: an embedding's expanded index, a transposed
// gradient); outputs are dense. An index is data: one out of range is
// reported while the kernel runs through the stream's error word
// (kernel.h report_error), which the stream's next synchronize turns into
// DK_ERROR_OUT_OF_RANGE; the element is skipped, never read out of bounds.
//
// scatter_add is deterministic without atomics: each thread owns one output
// element and walks the index axis in order, adding the src values whose
// index names it, so every element sums its terms in the order the CPU
// plugin does (x first, then src in index order; float32 in double) and the
// results are bit-identical to it and from run to run. Work is
// out elements x index length: fine for a reference, and what a GPU does
// when it must not reorder float additions.
#include "convert.h"
#include "kernel.h"
#include "ops_math.h"

namespace dkcuda {
namespace {

// ---- iota: out (dense) seen as [outer, length, inner] -------------------------------

struct IotaPlan {
  char* out;
  int64_t numel, length, inner;
  bool exact_int;  // start and step are both integers: wrapping int64 arithmetic
  int64_t start_i, step_i;
  double start_f, step_f;
};

template <class T> DK_KERNEL iota_kernel(IotaPlan p) {
  T* out = reinterpret_cast<T*>(p.out);
  for (int64_t e = global_index(); e < p.numel; e += global_stride()) {
    const int64_t i = e / p.inner % p.length;
    out[e] = p.exact_int
                 ? dk_convert<T>(int64_t(uint64_t(p.start_i) + uint64_t(i) * uint64_t(p.step_i)))
                 : dk_convert<T>(p.start_f + double(i) * p.step_f);
  }
}

// ---- gather ---------------------------------------------------------------------------

struct GatherPlan {
  View x, index;  // index has out's shape
  char* out;      // dense
  int32_t axis;
  KernelErrors* errors;
};

// B: the element's bits (gather only moves elements).
template <class B> DK_KERNEL gather_kernel(GatherPlan p) {
  const int64_t size = p.x.shape[p.axis];
  for (int64_t e = global_index(); e < p.index.numel; e += global_stride()) {
    int64_t rest = e, io = 0, xo = 0;
    for (int32_t d = p.index.rank - 1; d >= 0; --d) {
      const int64_t c = rest % p.index.shape[d];
      rest /= p.index.shape[d];
      io += c * p.index.strides[d];
      if (d != p.axis) xo += c * p.x.strides[d];
    }
    const int64_t idx = at<const int64_t>(p.index, io);
    if (idx < 0 || idx >= size) {
      report_error(p.errors, DK_OP_GATHER, kIndexOutOfRange, 1, idx, size);
      continue;
    }
    reinterpret_cast<B*>(p.out)[e] = at<const B>(p.x, xo + idx * p.x.strides[p.axis]);
  }
}

// ---- scatter_add ------------------------------------------------------------------------

struct ScatterPlan {
  View x, index, src;  // src has index's shape
  char* out;           // dense, x's shape
  int32_t axis;
  KernelErrors* errors;
};

// Every index in range, reported once per bad element (the main kernel only
// skips them: each is seen by every output of its column, or by none when x
// is empty along the axis).
DK_KERNEL check_index_kernel(ScatterPlan p) {
  const int64_t size = p.x.shape[p.axis];
  for (int64_t e = global_index(); e < p.index.numel; e += global_stride()) {
    const int64_t idx = at<const int64_t>(p.index, offset_of(p.index, e));
    if (idx < 0 || idx >= size)
      report_error(p.errors, DK_OP_SCATTER_ADD, kIndexOutOfRange, 1, idx, size);
  }
}

template <class T> DK_KERNEL scatter_add_kernel(ScatterPlan p) {
  using A = ops::SumAcc<T>;
  const int32_t axis = p.axis;
  for (int64_t e = global_index(); e < p.x.numel; e += global_stride()) {
    int64_t rest = e, xo = 0, io = 0, so = 0, mine = 0;
    bool covered = true;  // the index reaches this element's column
    for (int32_t d = p.x.rank - 1; d >= 0; --d) {
      const int64_t c = rest % p.x.shape[d];
      rest /= p.x.shape[d];
      xo += c * p.x.strides[d];
      if (d == axis) {
        mine = c;
      } else {
        covered = covered && c < p.index.shape[d];
        io += c * p.index.strides[d];
        so += c * p.src.strides[d];
      }
    }
    A acc = ops::sum_load(at<const T>(p.x, xo));
    if (covered) {
      const int64_t n = p.index.shape[axis], is = p.index.strides[axis], ss = p.src.strides[axis];
      for (int64_t i = 0; i < n; ++i) {
        if (at<const int64_t>(p.index, io + i * is) == mine) {
          acc = acc + ops::sum_load(at<const T>(p.src, so + i * ss));
        }
      }
    }
    reinterpret_cast<T*>(p.out)[e] = ops::sum_store<T>(acc);
  }
}

// ---- Host side ----------------------------------------------------------------------------

DK_Error* launch_iota(const char* call, const DK_Kernel_Args* args) {
  Launch l;
  if (DK_Error* e = begin(call, args, DK_OP_IOTA, &l)) return e;
  return guarded(call, [&]() -> DK_Error* {
    const View out = make_view(args->outputs[0]);
    if (out.numel == 0) return nullptr;
    const DK_IotaAttrs* attrs = static_cast<const DK_IotaAttrs*>(args->attrs);
    auto is_int = [](const DK_Scalar& s) { return s.dtype != DK_DTYPE_FLOAT64; };
    auto as_double = [&](const DK_Scalar& s) { return is_int(s) ? double(s.value.i) : s.value.f; };
    IotaPlan p{};
    p.out = out.data;
    p.numel = out.numel;
    p.length = out.shape[attrs->axis];
    p.inner = 1;
    for (int32_t d = attrs->axis + 1; d < out.rank; ++d) p.inner *= out.shape[d];
    p.exact_int = is_int(attrs->start) && is_int(attrs->step);
    p.start_i = attrs->start.value.i;
    p.step_i = attrs->step.value.i;
    p.start_f = as_double(attrs->start);
    p.step_f = as_double(attrs->step);
    return dispatch(out.dtype, [&](auto tag) -> DK_Error* {
      using T = decltype(tag);
      if constexpr (std::is_same<T, dk_bool>::value) return nullptr;  // not in iota's mask
      else return launched(call, DK_LAUNCH(iota_kernel<T>, grid_for(p.numel), kBlock, l.stream, p));
    });
  });
}

DK_Error* launch_gather(const char* call, const DK_Kernel_Args* args) {
  Launch l;
  if (DK_Error* e = begin(call, args, DK_OP_GATHER, &l)) return e;
  return guarded(call, [&]() -> DK_Error* {
    GatherPlan p{};
    p.x = make_view(args->inputs[0]);
    p.index = make_view(args->inputs[1]);
    p.out = make_view(args->outputs[0]).data;
    p.axis = static_cast<const DK_AxisAttrs*>(args->attrs)->axis;
    p.errors = l.errors;
    if (p.index.numel == 0) return nullptr;  // out has index's shape: empty too
    return dispatch_bits(dkh_dtype_size(p.x.dtype), [&](auto tag) {
      using B = decltype(tag);
      return launched(call,
                      DK_LAUNCH(gather_kernel<B>, grid_for(p.index.numel), kBlock, l.stream, p));
    });
  });
}

DK_Error* launch_scatter_add(const char* call, const DK_Kernel_Args* args) {
  Launch l;
  if (DK_Error* e = begin(call, args, DK_OP_SCATTER_ADD, &l)) return e;
  return guarded(call, [&]() -> DK_Error* {
    ScatterPlan p{};
    p.x = make_view(args->inputs[0]);
    p.index = make_view(args->inputs[1]);
    p.src = make_view(args->inputs[2]);
    p.out = make_view(args->outputs[0]).data;
    p.axis = static_cast<const DK_AxisAttrs*>(args->attrs)->axis;
    p.errors = l.errors;
    if (p.index.numel > 0) {
      // (also when out is empty: every index is then out of range, and says so)
      DK_Error* e = launched(
          call, DK_LAUNCH(check_index_kernel, grid_for(p.index.numel), kBlock, l.stream, p));
      if (e) return e;
    }
    if (p.x.numel == 0) return nullptr;
    return dispatch(p.x.dtype, [&](auto tag) -> DK_Error* {
      using T = decltype(tag);
      if constexpr (std::is_same<T, dk_bool>::value) return nullptr;  // not in the mask
      else
        return launched(call,
                        DK_LAUNCH(scatter_add_kernel<T>, grid_for(p.x.numel), kBlock, l.stream, p));
    });
  });
}

}  // namespace
}  // namespace dkcuda

extern "C" {

DK_Error* dk_cuda_kernel_iota(const DK_Kernel_Args* args) {
  return dkcuda::launch_iota("cuda.Kernel(iota)", args);
}
DK_Error* dk_cuda_kernel_gather(const DK_Kernel_Args* args) {
  return dkcuda::launch_gather("cuda.Kernel(gather)", args);
}
DK_Error* dk_cuda_kernel_scatter_add(const DK_Kernel_Args* args) {
  return dkcuda::launch_scatter_add("cuda.Kernel(scatter_add)", args);
}

}  // extern "C"
