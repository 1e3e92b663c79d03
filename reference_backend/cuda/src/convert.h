// One element from any dtype to any other, for host and device (DK_HD):
// cast's kernel and fill's value. The CPU plugin's rules (its dtype.h
// convert), so both plugins give the same bits:
//  * to a float type: round to nearest even, once (double -> float16 /
//    bfloat16 rounds to odd first, half.h); from float32 / float16 /
//    bfloat16 the value is exact in float, so those go straight through
//    half.h's float functions and a GPU thread does no double arithmetic;
//  * float -> integer truncates toward zero; NaN -> 0; out of range
//    saturates to the type's min / max (C++ leaves both undefined; the
//    header leaves them unspecified; this plugin defines them);
//  * integer -> integer wraps modulo 2^bits; anything -> bool is x != 0
//    (NaN -> true, -0.0 -> false).
// Known limit (as in the CPU plugin): int64 beyond 2^53 to float16 /
// bfloat16 rounds twice (through double).
#pragma once

#include <math.h>
#include <stdint.h>

#include <type_traits>

#include "half.h"

template <class T> struct dk_int_limits;
template <> struct dk_int_limits<int8_t> { static constexpr int8_t lo = -128, hi = 127; };
template <> struct dk_int_limits<uint8_t> { static constexpr uint8_t lo = 0, hi = 255; };
template <> struct dk_int_limits<int32_t> {
  static constexpr int32_t lo = -2147483647 - 1, hi = 2147483647;
};
template <> struct dk_int_limits<int64_t> {
  static constexpr int64_t lo = -9223372036854775807LL - 1, hi = 9223372036854775807LL;
};

// Truncate toward zero, NaN -> 0, saturate. hi + 1 is a power of two, so
// double(hi) is exactly hi + 1 for the 64-bit type and the >= test is right.
template <class D> DK_HD D dk_float_to_int(double v) {
  if (v != v) return D(0);
  v = trunc(v);
  if (v <= double(dk_int_limits<D>::lo)) return dk_int_limits<D>::lo;
  if (v >= double(dk_int_limits<D>::hi)) return dk_int_limits<D>::hi;
  return D(v);
}

template <class T> DK_HD int64_t dk_int_value(T x) {
  if constexpr (std::is_same<T, dk_bool>::value) {
    return x.value != 0;
  } else {
    return int64_t(x);
  }
}

template <class D, class S> DK_HD D dk_convert(S x) {
  if constexpr (std::is_same<D, dk_bool>::value) {
    if constexpr (dk_is_float<S>::value) {
      return dk_bool{uint8_t(dk_widen(x) != 0)};  // NaN != 0: true
    } else {
      return dk_bool{uint8_t(dk_int_value(x) != 0)};
    }
  } else if constexpr (std::is_same<S, float>::value || dk_is_half<S>::value) {
    const float f = dk_widen(x);  // exact
    if constexpr (std::is_same<D, dk_f16>::value) return dk_f16{dkh_float_to_half(f)};
    else if constexpr (std::is_same<D, dk_bf16>::value) return dk_bf16{dkh_float_to_bfloat16(f)};
    else if constexpr (std::is_floating_point<D>::value) return D(f);
    else return dk_float_to_int<D>(double(f));
  } else if constexpr (std::is_same<S, double>::value) {
    if constexpr (std::is_same<D, dk_f16>::value) return dk_f16{dkh_double_to_half(x)};
    else if constexpr (std::is_same<D, dk_bf16>::value) return dk_bf16{dkh_double_to_bfloat16(x)};
    else if constexpr (std::is_floating_point<D>::value) return D(x);
    else return dk_float_to_int<D>(x);
  } else {
    const int64_t i = dk_int_value(x);
    if constexpr (std::is_same<D, dk_f16>::value) return dk_f16{dkh_double_to_half(double(i))};
    else if constexpr (std::is_same<D, dk_bf16>::value) {
      return dk_bf16{dkh_double_to_bfloat16(double(i))};
    } else if constexpr (std::is_floating_point<D>::value) {
      return D(i);  // one rounding
    } else {
      return D(typename std::make_unsigned<D>::type(uint64_t(i)));
    }
  }
}
