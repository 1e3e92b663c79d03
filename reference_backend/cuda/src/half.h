// float16 / bfloat16 storage types and their conversions to and from float,
// for host and device code alike (DK_HD).
//
// The same integer bit manipulation as the CPU plugin's src/half.h, so both
// plugins produce the same bits: every narrowing rounds to nearest, ties to
// even (RNE); NaN stays a quiet NaN and keeps its sign and top payload bits.
// No cuda_fp16.h: its types do not exist under the host compiler, and its
// conversions' NaN payloads differ from the CPU plugin's.
//
// Kernels never compute in 16 bits: they load a dk_f16 / dk_bf16, widen it to
// float (dk_widen), accumulate in float32, and round once when storing
// (dk_narrow<T>). dk_compute_t<T> names the type a kernel computes T in.
#pragma once

#include <stdint.h>
#include <string.h>

#include <type_traits>

#include "simt/simt.h"

// Distinct storage types (not uint16_t / uint8_t), so overloads and dispatch
// cannot confuse a float16 with an integer; bool is a byte read as != 0 (a
// byte other than 0 or 1 read as C++ bool would be undefined behaviour).
struct dk_f16 { uint16_t bits; };
struct dk_bf16 { uint16_t bits; };
struct dk_bool { uint8_t value; };

DK_HD uint32_t dk_float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t x;
  memcpy(&x, &f, sizeof x);  // memcpy, not a union or pointer cast: no UB
  return x;
#endif
}

DK_HD float dk_bits_float(uint32_t x) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(x);
#else
  float f;
  memcpy(&f, &x, sizeof f);
  return f;
#endif
}

DK_HD float dk_half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) return dk_bits_float(sign | 0x7f800000u | (man << 13));  // Inf, NaN
  if (exp != 0) return dk_bits_float(sign | ((exp + 112) << 23) | (man << 13));
  // Zero or subnormal: man * 2^-24, exact in float (man < 2^10).
  const float mag = float(man) * 5.9604644775390625e-8f;  // 2^-24
  return sign ? -mag : mag;
}

DK_HD uint16_t dk_float_to_half(float f) {
  const uint32_t x = dk_float_bits(f);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return uint16_t(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));  // quiet NaN
  if (ax >= 0x47800000u) return uint16_t(sign | 0x7c00u);  // >= 2^16: Inf (and Inf itself)
  if (ax <= 0x33000000u) return sign;  // <= 2^-25: rounds to zero (2^-25 is a tie, to even 0)
  if (ax < 0x38800000u) {
    // A half subnormal, in units of 2^-24: the float is M * 2^(e-150) with a
    // 24-bit M, i.e. M >> (126 - e) units.
    const uint32_t e = ax >> 23;
    const uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;  // 14..24
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1), halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (r & 1))) ++r;  // may carry into the min normal: fine
    return uint16_t(sign | r);
  }
  // Normal: rebias the exponent (127 -> 15), drop 13 mantissa bits with RNE.
  // A carry out of the mantissa bumps the exponent, up to Inf: that is correct.
  uint32_t h = (ax - 0x38000000u) >> 13;
  const uint32_t rem = ax & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) ++h;
  return uint16_t(sign | h);
}

DK_HD float dk_bfloat16_to_float(uint16_t b) { return dk_bits_float(uint32_t(b) << 16); }

DK_HD uint16_t dk_float_to_bfloat16(float f) {
  const uint32_t x = dk_float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x0040u);  // quiet NaN
  const uint32_t lsb = (x >> 16) & 1u;
  return uint16_t((x + 0x7fffu + lsb) >> 16);  // RNE; overflow carries into Inf
}

// double -> float rounding to odd: truncate, and set the last bit if anything
// was lost. Rounding to odd with >= 2 extra bits and then to nearest-even
// gives the correctly rounded result, so double -> half / bfloat16 through
// this float rounds once, not twice (the CPU plugin's double_to_float_round_odd,
// with the step toward zero done on the bits instead of std::nextafter, which
// device code lacks; for a finite non-zero float or an infinity they agree).
DK_HD float dk_double_to_float_round_odd(double d) {
  if (d != d) return float(d);  // NaN
  const float f = float(d);  // round to nearest even
  if (double(f) == d) return f;
  uint32_t b = dk_float_bits(f);
  const double af = f < 0 ? -double(f) : double(f), ad = d < 0 ? -d : d;
  if (af > ad) b -= 1;  // one ulp toward zero (f != 0 here: |f| > |d| >= 0)
  return dk_bits_float(b | 1u);
}

DK_HD uint16_t dk_double_to_half(double d) {
  return dk_float_to_half(dk_double_to_float_round_odd(d));
}
DK_HD uint16_t dk_double_to_bfloat16(double d) {
  return dk_float_to_bfloat16(dk_double_to_float_round_odd(d));
}

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
DK_HD float dk_widen(dk_f16 x) { return dk_half_to_float(x.bits); }
DK_HD float dk_widen(dk_bf16 x) { return dk_bfloat16_to_float(x.bits); }
DK_HD bool dk_widen(dk_bool x) { return x.value != 0; }
template <class T> DK_HD T dk_widen(T x) { return x; }

// Stores a compute value as T, rounding once (RNE) for the half types.
template <class T> DK_HD T dk_narrow(dk_compute_t<T> v) {
  if constexpr (std::is_same<T, dk_f16>::value) {
    return dk_f16{dk_float_to_half(v)};
  } else if constexpr (std::is_same<T, dk_bf16>::value) {
    return dk_bf16{dk_float_to_bfloat16(v)};
  } else if constexpr (std::is_same<T, dk_bool>::value) {
    return dk_bool{uint8_t(v ? 1 : 0)};
  } else {
    return v;
  }
}
