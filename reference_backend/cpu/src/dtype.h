// Element types: their C++ storage types, a switch from DK_DType to a
// template, and the one conversion every kernel uses (cast, fill). Sizes and
// names are plugin_helpers.h's (dkh_dtype_size, dkh_dtype_name).
#ifndef DEVICEKIT_CPU_DTYPE_H_
#define DEVICEKIT_CPU_DTYPE_H_

#include <devicekit/device_api.h>
#include <devicekit/plugin_helpers.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include <devicekit/plugin_half.h>

namespace dkcpu {

// Distinct types for the 16-bit floats and bool, so overloads cannot confuse
// them with uint16_t / uint8_t (bool itself is avoided: a byte other than 0
// or 1 in device memory would be undefined behaviour when read as bool).
struct f16 { uint16_t bits; };
struct bf16 { uint16_t bits; };
struct boolean { uint8_t value; };

// Calls f(T{}) with T the storage type of dt; dt must be valid (< 9).
template <class F> void dispatch(DK_DType dt, F&& f) {
  switch (dt) {
    case DK_DTYPE_FLOAT32: return f(float{});
    case DK_DTYPE_FLOAT16: return f(f16{});
    case DK_DTYPE_BFLOAT16: return f(bf16{});
    case DK_DTYPE_FLOAT64: return f(double{});
    case DK_DTYPE_INT8: return f(int8_t{});
    case DK_DTYPE_INT32: return f(int32_t{});
    case DK_DTYPE_INT64: return f(int64_t{});
    case DK_DTYPE_UINT8: return f(uint8_t{});
    default: return f(boolean{});
  }
}

template <class T> constexpr bool kIsFloat =
    std::is_floating_point<T>::value || std::is_same<T, f16>::value || std::is_same<T, bf16>::value;

// Every floating value widened to double, exactly.
template <class T> double widen(T x) {
  if constexpr (std::is_same<T, f16>::value) return dkh_half_to_float(x.bits);
  else if constexpr (std::is_same<T, bf16>::value) return dkh_bfloat16_to_float(x.bits);
  else return double(x);
}

// What reductions and scatter_add compute in: float32 for float16/bfloat16,
// else the type itself.
template <class T> using Wide =
    std::conditional_t<std::is_same<T, f16>::value || std::is_same<T, bf16>::value, float, T>;

template <class T> Wide<T> widen_exact(T x) {  // a float, double or integer that compares like x
  if constexpr (std::is_same<Wide<T>, T>::value) return x;
  else return float(widen(x));
}

inline int64_t int_value(boolean x) { return x.value != 0; }
template <class T> int64_t int_value(T x) { return int64_t(x); }

template <class T> bool is_nonzero(T x) {
  if constexpr (kIsFloat<T>) return widen(x) != 0.0;  // NaN != 0: true, -0.0: false
  else return int_value(x) != 0;
}

// Float to integer truncates toward zero. The header leaves NaN and
// out-of-range values unspecified; in C++ they are undefined behaviour, so
// this plugin defines them: NaN -> 0, out of range saturates to min / max.
template <class D> D float_to_int(double v) {
  using L = std::numeric_limits<D>;
  if (std::isnan(v)) return D(0);
  v = std::trunc(v);
  if (v <= double(L::min())) return L::min();
  if (v >= double(L::max())) return L::max();  // max() + 1 is a power of two: exact
  return D(v);
}

// Converts one element. Float targets round to nearest even (one rounding,
// see <devicekit/plugin_half.h>); integer -> integer wraps modulo 2^bits, through unsigned so no
// signed overflow happens (the final narrowing is modular on GCC and Clang,
// and by definition since C++20); anything -> bool is x != 0.
// Known limit: int64 beyond 2^53 to float16/bfloat16 rounds twice (via double).
template <class D, class S> D convert(S x) {
  if constexpr (std::is_same<D, boolean>::value) {
    return boolean{uint8_t(is_nonzero(x))};
  } else if constexpr (kIsFloat<S>) {
    const double v = widen(x);
    if constexpr (std::is_same<D, f16>::value) return f16{dkh_double_to_half(v)};
    else if constexpr (std::is_same<D, bf16>::value) return bf16{dkh_double_to_bfloat16(v)};
    else if constexpr (std::is_floating_point<D>::value) return D(v);
    else return float_to_int<D>(v);
  } else {
    const int64_t i = int_value(x);
    if constexpr (std::is_same<D, f16>::value) return f16{dkh_double_to_half(double(i))};
    else if constexpr (std::is_same<D, bf16>::value) return bf16{dkh_double_to_bfloat16(double(i))};
    else if constexpr (std::is_floating_point<D>::value) return D(i);  // one rounding
    else return D(std::make_unsigned_t<D>(uint64_t(i)));
  }
}

}  // namespace dkcpu

#endif  // DEVICEKIT_CPU_DTYPE_H_
