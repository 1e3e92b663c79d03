// The device API 1.0 base ops: copy, fill, cast, add. One strided kernel and
// a dense fast path per family, every loop a grid-stride loop; index
// arithmetic is kernel.h's (offset_of over a view broadcast to the output).
#include <string.h>

#include "convert.h"
#include "kernel.h"

namespace dkcuda {
namespace {

// ---- copy --------------------------------------------------------------------
// Moves bits only, so one instantiation per element size (T = uint8_t ..
// uint64_t), not per dtype.

template <class T> DK_KERNEL copy_dense(const T* in, T* out, int64_t n) {
  for (int64_t i = global_index(); i < n; i += global_stride()) out[i] = in[i];
}

// `in` already has out's rank and shape (broadcast dims have stride 0);
// `out` may be any non-overlapping strided view.
template <class T> DK_KERNEL copy_strided(View in, View out) {
  for (int64_t i = global_index(); i < out.numel; i += global_stride())
    at<T>(out, offset_of(out, i)) = at<T>(in, offset_of(in, i));
}

// ---- fill --------------------------------------------------------------------

template <class T> DK_KERNEL fill_dense(T* out, T value, int64_t n) {
  for (int64_t i = global_index(); i < n; i += global_stride()) out[i] = value;
}

// ---- cast (dense: the op declares no capability bits) ---------------------------

template <class D, class S> DK_KERNEL cast_dense(const S* in, D* out, int64_t n) {
  for (int64_t i = global_index(); i < n; i += global_stride()) out[i] = dk_convert<D>(in[i]);
}

// ---- add ---------------------------------------------------------------------

// One element in the compute type: bool is logical or, integers wrap (in
// unsigned arithmetic: no signed overflow), float16 / bfloat16 add in float32
// and round once.
template <class T> DK_HD T add_one(T a, T b) {
  if constexpr (std::is_same<T, dk_bool>::value) {
    return dk_bool{uint8_t((a.value != 0) || (b.value != 0))};
  } else if constexpr (std::is_integral<T>::value) {
    using U = typename std::make_unsigned<T>::type;
    return T(U(U(a) + U(b)));
  } else {
    return dk_narrow<T>(dk_widen(a) + dk_widen(b));
  }
}

template <class T> DK_KERNEL add_dense(const T* a, const T* b, T* out, int64_t n) {
  for (int64_t i = global_index(); i < n; i += global_stride()) out[i] = add_one(a[i], b[i]);
}

// a and b have out's rank and shape (broadcast dims stride 0); out is dense.
template <class T> DK_KERNEL add_strided(View a, View b, T* out) {
  for (int64_t i = global_index(); i < a.numel; i += global_stride())
    out[i] = add_one(at<T>(a, offset_of(a, i)), at<T>(b, offset_of(b, i)));
}

}  // namespace
}  // namespace dkcuda

using namespace dkcuda;

extern "C" {

DK_Error* dk_cuda_kernel_copy(const DK_Kernel_Args* args) {
  static const char* const kCall = DKCUDA_NAME ".Kernel(copy)";
  Launch l;
  if (DK_Error* e = begin(kCall, args, DK_OP_COPY, &l)) return e;
  return guarded(kCall, [&]() -> DK_Error* {
    const View out = make_view(args->outputs[0]);
    const View in = broadcast_to(make_view(args->inputs[0]), out);
    if (out.numel == 0) return nullptr;
    const bool dense = is_dense(in) && is_dense(out);
    return dispatch_bits(dkh_dtype_size(out.dtype), [&](auto tag) {
      using T = decltype(tag);
      if (dense) {
        return launched(kCall, DK_LAUNCH(copy_dense<T>, grid_for(out.numel), kBlock, l.stream,
                                         reinterpret_cast<const T*>(in.data),
                                         reinterpret_cast<T*>(out.data), out.numel));
      }
      return launched(kCall,
                      DK_LAUNCH(copy_strided<T>, grid_for(out.numel), kBlock, l.stream, in, out));
    });
  });
}

DK_Error* dk_cuda_kernel_fill(const DK_Kernel_Args* args) {
  static const char* const kCall = DKCUDA_NAME ".Kernel(fill)";
  Launch l;
  if (DK_Error* e = begin(kCall, args, DK_OP_FILL, &l)) return e;
  return guarded(kCall, [&]() -> DK_Error* {
    const View out = make_view(args->outputs[0]);
    if (out.numel == 0) return nullptr;
    const DK_Scalar v = static_cast<const DK_FillAttrs*>(args->attrs)->value;
    // The value in out's dtype, converted once on the host by cast's rules.
    unsigned char bits[8] = {};
    dispatch(out.dtype, [&](auto tag) {
      using T = decltype(tag);
      const T x = v.dtype == DK_DTYPE_FLOAT64 ? dk_convert<T>(v.value.f) : dk_convert<T>(v.value.i);
      memcpy(bits, &x, sizeof x);
    });
    return dispatch_bits(dkh_dtype_size(out.dtype), [&](auto tag) {
      using T = decltype(tag);
      T value;
      memcpy(&value, bits, sizeof value);
      return launched(kCall, DK_LAUNCH(fill_dense<T>, grid_for(out.numel), kBlock, l.stream,
                                       reinterpret_cast<T*>(out.data), value, out.numel));
    });
  });
}

DK_Error* dk_cuda_kernel_cast(const DK_Kernel_Args* args) {
  static const char* const kCall = DKCUDA_NAME ".Kernel(cast)";
  Launch l;
  if (DK_Error* e = begin(kCall, args, DK_OP_CAST, &l)) return e;
  return guarded(kCall, [&]() -> DK_Error* {
    const View in = make_view(args->inputs[0]);
    const View out = make_view(args->outputs[0]);
    if (out.numel == 0) return nullptr;
    return dispatch(in.dtype, [&](auto src_tag) {
      return dispatch(out.dtype, [&](auto dst_tag) {
        using S = decltype(src_tag);
        using D = decltype(dst_tag);
        return launched(kCall, DK_LAUNCH((cast_dense<D, S>), grid_for(out.numel), kBlock, l.stream,
                                         reinterpret_cast<const S*>(in.data),
                                         reinterpret_cast<D*>(out.data), out.numel));
      });
    });
  });
}

DK_Error* dk_cuda_kernel_add(const DK_Kernel_Args* args) {
  static const char* const kCall = DKCUDA_NAME ".Kernel(add)";
  Launch l;
  if (DK_Error* e = begin(kCall, args, DK_OP_ADD, &l)) return e;
  return guarded(kCall, [&]() -> DK_Error* {
    const View out = make_view(args->outputs[0]);
    const View a = broadcast_to(make_view(args->inputs[0]), out);
    const View b = broadcast_to(make_view(args->inputs[1]), out);
    if (out.numel == 0) return nullptr;
    const bool dense = is_dense(a) && is_dense(b);
    return dispatch(out.dtype, [&](auto tag) {
      using T = decltype(tag);
      T* o = reinterpret_cast<T*>(out.data);
      if (dense) {
        return launched(kCall, DK_LAUNCH(add_dense<T>, grid_for(out.numel), kBlock, l.stream,
                                         reinterpret_cast<const T*>(a.data),
                                         reinterpret_cast<const T*>(b.data), o, out.numel));
      }
      return launched(kCall,
                      DK_LAUNCH(add_strided<T>, grid_for(out.numel), kBlock, l.stream, a, b, o));
    });
  });
}

}  // extern "C"
