// What a kernel-table function needs, in one include: the view a kernel gets
// by value, index arithmetic for strided and broadcast views, the argument
// check, the launch context (stream handle and kernel error word), turning a
// launch's result into a DK_Error, dtype dispatch, and data-dependent errors.
//
// A kernel-table function (one row of ops_*.def) has this shape:
//
//   DK_Error* dk_cuda_kernel_neg(const DK_Kernel_Args* args) {
//     static const char* const kCall = "cuda.Kernel(neg)";
//     dkcuda::Launch l;
//     if (DK_Error* e = dkcuda::begin(kCall, args, DK_OP_NEG, &l)) return e;
//     const dkcuda::View x = dkcuda::make_view(args->inputs[0]);
//     const dkcuda::View out = dkcuda::make_view(args->outputs[0]);
//     if (out.numel == 0) return nullptr;
//     return dkcuda::dispatch(out.dtype, [&](auto tag) {
//       using T = decltype(tag);
//       return dkcuda::launched(kCall, DK_LAUNCH(neg_kernel<T>,
//           dkcuda::grid_for(out.numel), dkcuda::kBlock, l.stream, x, out));
//     });
//   }
//
// Everything here compiles under nvcc (kernels are .cu files) and under the
// host compiler (the emulated build compiles the same .cu files as C++).
#pragma once

#include <devicekit/device_api.h>
#include <devicekit/plugin_helpers.h>

#include <stdint.h>

#include "api.h"
#include "half.h"
#include "launch.h"
#include "simt/simt.h"

namespace dkcuda {

// ---- Views ------------------------------------------------------------------

// A tensor view as a kernel takes it: passed BY VALUE as a kernel argument
// (144 bytes; the views of a DK_Kernel_Args die with the call, a launch runs
// later). Strides are in elements. numel is the product of shape.
struct View {
  char* data;  // device pointer to element [0, ..., 0]
  int32_t dtype;  // a DK_DType
  int32_t rank;   // 0 .. DK_MAX_RANK
  int64_t numel;
  int64_t shape[DK_MAX_RANK];
  int64_t strides[DK_MAX_RANK];
};

// Copies a DK_TensorView (already checked by begin()). A view with zero
// elements is dense row-major by the header's rule, whatever its strides.
inline View make_view(const DK_TensorView* v) {
  View r{};
  r.data = static_cast<char*>(v->data);
  r.dtype = v->dtype;
  r.rank = v->rank;
  r.numel = 1;
  for (int32_t d = 0; d < v->rank; ++d) {
    r.shape[d] = v->shape[d];
    r.strides[d] = v->strides[d];
    r.numel *= v->shape[d];
  }
  if (r.numel == 0) {
    for (int32_t d = r.rank - 1, s = 1; d >= 0; --d) {
      r.strides[d] = s;
      s *= r.shape[d] > 0 ? r.shape[d] : 1;
    }
  }
  return r;
}

// `in` seen with `out`'s rank and shape: missing leading dims and size-1 dims
// that `out` has larger get stride 0 (numpy broadcasting; begin() checked
// that `in` broadcasts to `out`). Then one offset computation over out's
// shape serves every input of an elementwise launch.
inline View broadcast_to(const View& in, const View& out) {
  View r = in;
  r.rank = out.rank;
  r.numel = out.numel;
  const int32_t lead = out.rank - in.rank;
  for (int32_t d = 0; d < out.rank; ++d) {
    const int32_t s = d - lead;
    r.shape[d] = out.shape[d];
    r.strides[d] = s < 0 || (in.shape[s] == 1 && out.shape[d] != 1) ? 0 : in.strides[s];
  }
  return r;
}

// Row-major contiguous (size-1 dims may have any stride): a kernel may index
// it as data[i].
inline bool is_dense(const View& v) {
  return v.numel == 0 || dkh_is_contiguous(v.rank, v.shape, v.strides);
}

// Element offset (in elements) of the row-major linear index i over v.shape.
DK_HD int64_t offset_of(const View& v, int64_t i) {
  int64_t off = 0;
  for (int32_t d = v.rank - 1; d >= 0; --d) {
    const int64_t n = v.shape[d];
    off += (i % n) * v.strides[d];
    i /= n;
  }
  return off;
}

// Typed element access: at<T>(v, off) with off from offset_of (or i for a
// dense view).
template <class T> DK_HD T& at(const View& v, int64_t off) {
  return reinterpret_cast<T*>(v.data)[off];
}

// ---- Launch configuration ------------------------------------------------------

// Threads per block of the plain elementwise kernels (a multiple of 32).
constexpr int kBlock = 256;

// Blocks for a grid-stride loop over n items (dk_grid_stride_blocks: at most
// 65535 on the GPU, 3 in the emulator so every loop really strides).
inline unsigned grid_for(int64_t n, int block = kBlock) { return dk_grid_stride_blocks(n, block); }

// The grid-stride loop: for (int64_t i = global_index(); i < n; i += global_stride()).
DK_DEV int64_t global_index() {
  return dk_block_x() * int64_t(dk_block_dim_x()) + int64_t(dk_thread_x());
}
DK_DEV int64_t global_stride() { return dk_grid_dim_x() * int64_t(dk_block_dim_x()); }

// ---- Data-dependent errors (KernelErrors: launch.h) ------------------------------

// Reports one bad element; the kernel then skips it (writes nothing there).
DK_DEV void report_error(KernelErrors* e, int32_t op, KernelErrorKind kind, int32_t input,
                         int64_t value, int64_t bound) {
  if (dk_atomic_add(&e->count, int32_t(1)) == 0) {
    e->op = op;
    e->kind = kind;
    e->input = input;
    e->value = value;
    e->bound = bound;
  }
}

// ---- Dtype dispatch ----------------------------------------------------------------

// (A kernel template with several parameters goes into DK_LAUNCH in
// parentheses, DK_LAUNCH((k<D, S>), ...), so the macro sees one argument.)
// Calls f(T{}) with T the storage type of dt (float, dk_f16, dk_bf16, double,
// int8_t, int32_t, int64_t, uint8_t, dk_bool) and returns what f returns.
// f is typically a generic lambda that launches kernel<T>; only dtypes the
// op's mask allows reach it, but every branch is instantiated, so restrict
// with `if constexpr` where a kernel has no meaning for some T.
template <class F> auto dispatch(int32_t dt, F&& f) -> decltype(f(float{})) {
  switch (dt) {
    case DK_DTYPE_FLOAT16: return f(dk_f16{});
    case DK_DTYPE_BFLOAT16: return f(dk_bf16{});
    case DK_DTYPE_FLOAT64: return f(double{});
    case DK_DTYPE_INT8: return f(int8_t{});
    case DK_DTYPE_INT32: return f(int32_t{});
    case DK_DTYPE_INT64: return f(int64_t{});
    case DK_DTYPE_UINT8: return f(uint8_t{});
    case DK_DTYPE_BOOL: return f(dk_bool{});
    default: return f(float{});
  }
}

// Calls f(T{}) for the storage type of a dtype of `bytes` bytes (1, 2, 4, 8):
// for kernels that move bits and never compute (copy, fill).
template <class F> auto dispatch_bits(size_t bytes, F&& f) -> decltype(f(uint8_t{})) {
  switch (bytes) {
    case 1: return f(uint8_t{});
    case 2: return f(uint16_t{});
    case 4: return f(uint32_t{});
    default: return f(uint64_t{});
  }
}

}  // namespace dkcuda
