// Three of the four base operators of API 1.0: copy, fill, cast. (add runs on
// the elementwise engine, src/kernels_elementwise.cpp, which broadcasts.)
//
// Each kernel validates synchronously against the op's contract and against
// the capability bits and dtype mask it declared in the kernel table (so
// the SDK hands it nothing it did not promise to take), then copies what
// it needs from the views, which die with the call, into a fixed-size
// Launch record and enqueues that on the stream.
#include <algorithm>

#include "kernel_common.h"
#include "parallel.h"

namespace dkcpu {
namespace {

struct Launch {
  int64_t numel;
  View in[2];
  View out;
  unsigned char fill_value[8];  // fill: the value already in out's dtype
};

// ---- Work run by the stream's worker ----------------------------------------

// Rows [row0, row1) of the copy, a row being the innermost dim. A row that is
// unit-stride on both sides is one memcpy (the permuted views attention
// code merges back: [B, L, H, D] from [B, H, L, D], D-long runs).
template <size_t kBytes> void copy_rows(const Launch& l, int64_t row0, int64_t row1) {
  const View &in = l.in[0], &out = l.out;
  const int32_t r = out.rank;  // rank 0: one element, no outer dims
  const int64_t inner = r > 0 ? out.shape[r - 1] : 1;
  const int64_t in_step = r > 0 ? in.strides[r - 1] * int64_t(kBytes) : 0;
  const int64_t out_step = r > 0 ? out.strides[r - 1] * int64_t(kBytes) : 0;
  const bool dense_row = in_step == int64_t(kBytes) && out_step == int64_t(kBytes);
  int64_t idx[DK_MAX_RANK] = {};
  const char* src = in.data;
  char* dst = out.data;
  for (int64_t rest = row0, d = r - 2; d >= 0; --d) {  // the odometer at row0
    idx[d] = rest % out.shape[d];
    rest /= out.shape[d];
    src += idx[d] * in.strides[d] * int64_t(kBytes);
    dst += idx[d] * out.strides[d] * int64_t(kBytes);
  }
  for (int64_t row = row0; row < row1; ++row) {
    if (dense_row) {
      std::memcpy(dst, src, size_t(inner) * kBytes);
    } else {
      for (int64_t i = 0; i < inner; ++i)
        std::memcpy(dst + i * out_step, src + i * in_step, kBytes);
    }
    for (int32_t d = r - 2; d >= 0; --d) {  // advance the outer index like an odometer
      src += in.strides[d] * int64_t(kBytes);
      dst += out.strides[d] * int64_t(kBytes);
      if (++idx[d] < out.shape[d]) break;
      src -= in.strides[d] * out.shape[d] * int64_t(kBytes);
      dst -= out.strides[d] * out.shape[d] * int64_t(kBytes);
      idx[d] = 0;
    }
  }
}

// Split over rows (parallel_for) once there are about 32K elements a chunk
// (the elementwise engine's grain).
template <size_t kBytes> void copy_strided(const Launch& l) {
  const int64_t inner = l.out.rank > 0 ? l.out.shape[l.out.rank - 1] : 1;
  if (l.numel == 0 || inner == 0) return;
  parallel_for(l.numel / inner, std::max<int64_t>(1, 32768 / inner),
               [&](int64_t r0, int64_t r1) { copy_rows<kBytes>(l, r0, r1); });
}

DK_Error* run_copy(const void* payload) {
  const Launch& l = *static_cast<const Launch*>(payload);
  switch (dkh_dtype_size(l.out.dtype)) {
    case 1: copy_strided<1>(l); break;
    case 2: copy_strided<2>(l); break;
    case 4: copy_strided<4>(l); break;
    default: copy_strided<8>(l); break;
  }
  return nullptr;
}

DK_Error* run_memcpy(const void* payload) {
  const Launch& l = *static_cast<const Launch*>(payload);
  std::memcpy(l.out.data, l.in[0].data, size_t(l.numel) * dkh_dtype_size(l.out.dtype));
  return nullptr;
}

template <class T> void fill_as(const Launch& l) {
  T value;
  std::memcpy(&value, l.fill_value, sizeof value);
  T* out = reinterpret_cast<T*>(l.out.data);
  parallel_for(l.numel, 32768, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) out[i] = value;
  });
}

DK_Error* run_fill(const void* payload) {
  const Launch& l = *static_cast<const Launch*>(payload);
  switch (dkh_dtype_size(l.out.dtype)) {
    case 1: fill_as<uint8_t>(l); break;
    case 2: fill_as<uint16_t>(l); break;
    case 4: fill_as<uint32_t>(l); break;
    default: fill_as<uint64_t>(l); break;
  }
  return nullptr;
}

// One element, as convert<D> does. From float32 to float16 / bfloat16 and
// back, convert's route through double is exact, so these call
// <devicekit/plugin_half.h>'s float functions directly: float32 -> bfloat16
// (the one rounding every plugin shares, branch-free) is then a few integer
// ops the compiler vectorises (mixed-precision training casts every weight
// and activation at each linear layer; through double it was 14% of a
// bfloat16 GPT step).
template <class D, class S> D cast_one(S x) {
  if constexpr (std::is_same<S, float>::value && std::is_same<D, bf16>::value) {
    return bf16{dkh_float_to_bfloat16(x)};
  } else if constexpr (std::is_same<S, bf16>::value && std::is_same<D, float>::value) {
    return dkh_bfloat16_to_float(x.bits);
  } else if constexpr (std::is_same<S, float>::value && std::is_same<D, f16>::value) {
    return f16{dkh_float_to_half(x)};
  } else if constexpr (std::is_same<S, f16>::value && std::is_same<D, float>::value) {
    return dkh_half_to_float(x.bits);
  } else {
    return convert<D>(x);
  }
}

DK_Error* run_cast(const void* payload) {
  const Launch& l = *static_cast<const Launch*>(payload);
  dispatch(l.in[0].dtype, [&](auto src_tag) {
    dispatch(l.out.dtype, [&](auto dst_tag) {
      using S = decltype(src_tag);
      using D = decltype(dst_tag);
      const S* in = reinterpret_cast<const S*>(l.in[0].data);
      D* out = reinterpret_cast<D*>(l.out.data);
      parallel_for(l.numel, 32768, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) out[i] = cast_one<D>(in[i]);
      });
    });
  });
  return nullptr;
}

}  // namespace
}  // namespace dkcpu

using namespace dkcpu;

extern "C" {

DK_Error* dk_cpu_kernel_copy(const DK_Kernel_Args* args) {
  static const char* const kCall = "cpu.Kernel(copy)";
  if (DK_Error* e = check_call(kCall, args, DK_OP_COPY, 1, 1)) return e;
  return guarded(kCall, [&]() -> DK_Error* {
    Launch l{};
    int64_t in_numel = 0;
    View& in = l.in[0];
    if (DK_Error* e = load_view(kCall, "input 0", args, args->inputs[0], &in, &in_numel)) return e;
    if (DK_Error* e = load_view(kCall, "output 0", args, args->outputs[0], &l.out, &l.numel))
      return e;
    if (DK_Error* e = check_dtype_declared(kCall, "input 0", DK_OP_COPY, in)) return e;
    if (DK_Error* e = check_same_dtype(kCall, "output 0", l.out, in, "input 0")) return e;
    if (!broadcast_to(&in, l.out)) {
      return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                       "%s: input 0 has shape %s, which does not "
                       "broadcast to output 0's shape %s",
                       kCall, dims(in).c_str(), dims(l.out).c_str());
    }
    for (int32_t d = 0; l.numel > 0 && d < l.out.rank; ++d) {  // (no element: any strides)
      if (l.out.shape[d] > 1 && l.out.strides[d] == 0) {
        return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                         "%s: output 0 has stride 0 in dim %d of "
                         "size %lld; expected a non-overlapping output",
                         kCall, d, (long long)l.out.shape[d]);
      }
    }
    if (DK_Error* e = check_no_alias(kCall, DK_OP_COPY, l.out, in, "input 0")) return e;
    if (l.numel == 0) return nullptr;
    const bool dense = is_contiguous(in) && is_contiguous(l.out);
    enqueue(args->stream, dense ? run_memcpy : run_copy, l);
    return nullptr;
  });
}

DK_Error* dk_cpu_kernel_fill(const DK_Kernel_Args* args) {
  static const char* const kCall = "cpu.Kernel(fill)";
  if (DK_Error* e = check_call(kCall, args, DK_OP_FILL, 0, 1)) return e;
  return guarded(kCall, [&]() -> DK_Error* {
    Launch l{};
    if (DK_Error* e = load_view(kCall, "output 0", args, args->outputs[0], &l.out, &l.numel))
      return e;
    if (DK_Error* e = check_dtype_declared(kCall, "output 0", DK_OP_FILL, l.out)) return e;
    if (DK_Error* e = check_output_layout(kCall, l.out)) return e;
    const DK_FillAttrs* attrs;
    if (DK_Error* e = load_attrs(kCall, args, DK_FillAttrs_STRUCT_SIZE, "DK_FillAttrs", &attrs))
      return e;
    const DK_Scalar& v = attrs->value;
    if (DK_Error* e = check_scalar(kCall, "value", v)) return e;
    const bool is_int = v.dtype != DK_DTYPE_FLOAT64;
    dispatch(l.out.dtype, [&](auto tag) {
      using T = decltype(tag);
      const T x = is_int ? convert<T>(v.value.i) : convert<T>(v.value.f);
      std::memcpy(l.fill_value, &x, sizeof x);
    });
    if (l.numel > 0) enqueue(args->stream, run_fill, l);
    return nullptr;
  });
}

DK_Error* dk_cpu_kernel_cast(const DK_Kernel_Args* args) {
  static const char* const kCall = "cpu.Kernel(cast)";
  if (DK_Error* e = check_call(kCall, args, DK_OP_CAST, 1, 1)) return e;
  return guarded(kCall, [&]() -> DK_Error* {
    Launch l{};
    int64_t in_numel = 0;
    if (DK_Error* e = load_view(kCall, "input 0", args, args->inputs[0], &l.in[0], &in_numel))
      return e;
    if (DK_Error* e = load_view(kCall, "output 0", args, args->outputs[0], &l.out, &l.numel))
      return e;
    // The mask covers input dtypes; the output may be any dtype the device stores.
    if (DK_Error* e = check_dtype_declared(kCall, "input 0", DK_OP_CAST, l.in[0])) return e;
    if (DK_Error* e = check_same_shape(kCall, "output 0", l.out, l.in[0], "input 0")) return e;
    if (DK_Error* e = check_layout(kCall, "input 0", DK_OP_CAST, l.in[0])) return e;
    if (DK_Error* e = check_output_layout(kCall, l.out)) return e;
    if (DK_Error* e = check_no_alias(kCall, DK_OP_CAST, l.out, l.in[0], "input 0")) return e;
    if (l.numel > 0) enqueue(args->stream, run_cast, l);
    return nullptr;
  });
}

}  // extern "C"
