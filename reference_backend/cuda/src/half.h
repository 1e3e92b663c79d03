// float16 / bfloat16 storage types, and how kernels widen and narrow them.
//
// The conversions themselves are <devicekit/plugin_half.h>'s (dkh_*), the
// ones the CPU plugin uses too, host and device code alike, so both plugins
// produce the same bits: every narrowing rounds to nearest, ties to even
// (RNE); NaN stays a quiet NaN and keeps its sign and top payload bits. No
// cuda_fp16.h: its types do not exist under the host compiler, and its
// conversions' NaN payloads differ from the CPU plugin's.
//
// Kernels never compute in 16 bits: they load a dk_f16 / dk_bf16, widen it to
// float (dk_widen), accumulate in float32, and round once when storing
// (dk_narrow<T>). dk_compute_t<T> names the type a kernel computes T in.
#pragma once

#include <stdint.h>
#include <string.h>

#include <type_traits>

#include <devicekit/plugin_half.h>

#include "simt/simt.h"

// Distinct storage types (not uint16_t / uint8_t), so overloads and dispatch
// cannot confuse a float16 with an integer; bool is a byte read as != 0 (a
// byte other than 0 or 1 read as C++ bool would be undefined behaviour).
struct dk_f16 { uint16_t bits; };
struct dk_bf16 { uint16_t bits; };
struct dk_bool { uint8_t value; };

// ---- What kernels compute in --------------------------------------------------

// float for float32 / float16 / bfloat16, bool for dk_bool, else T itself.
template <class T> struct dk_compute { using type = T; };
template <> struct dk_compute<dk_f16> { using type = float; };
template <> struct dk_compute<dk_bf16> { using type = float; };
template <> struct dk_compute<dk_bool> { using type = bool; };
template <class T> using dk_compute_t = typename dk_compute<T>::type;

template <class T> struct dk_is_half
    : std::integral_constant<bool,
                             std::is_same<T, dk_f16>::value || std::is_same<T, dk_bf16>::value> {};
template <class T> struct dk_is_float
    : std::integral_constant<bool, std::is_floating_point<T>::value || dk_is_half<T>::value> {};

// Loads a stored value into its compute type (exact).
DK_HD float dk_widen(dk_f16 x) { return dkh_half_to_float(x.bits); }
DK_HD float dk_widen(dk_bf16 x) { return dkh_bfloat16_to_float(x.bits); }
DK_HD bool dk_widen(dk_bool x) { return x.value != 0; }
template <class T> DK_HD T dk_widen(T x) { return x; }

// Stores a compute value as T, rounding once (RNE) for the half types.
template <class T> DK_HD T dk_narrow(dk_compute_t<T> v) {
  if constexpr (std::is_same<T, dk_f16>::value) {
    return dk_f16{dkh_float_to_half(v)};
  } else if constexpr (std::is_same<T, dk_bf16>::value) {
    return dk_bf16{dkh_float_to_bfloat16(v)};
  } else if constexpr (std::is_same<T, dk_bool>::value) {
    return dk_bool{uint8_t(v ? 1 : 0)};
  } else {
    return v;
  }
}
