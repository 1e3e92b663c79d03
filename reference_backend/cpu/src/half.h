// float16 / bfloat16 <-> float conversions, written out by hand.
//
// Written with integer bit manipulation rather than _Float16 or F16C
// intrinsics so the plugin builds with any C++17 compiler and runs on any CPU
// of the target architecture (the wheel may not use -march=native).
// All narrowing conversions round to nearest, ties to even (RNE), like IEEE
// 754 hardware; NaN stays a (quiet) NaN and keeps its sign.
#ifndef DEVICEKIT_CPU_HALF_H_
#define DEVICEKIT_CPU_HALF_H_

#include <cmath>
#include <cstdint>
#include <cstring>

namespace dkcpu {

inline uint32_t float_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);  // memcpy, not a union or pointer cast: no UB
  return x;
}

inline float bits_float(uint32_t x) {
  float f;
  std::memcpy(&f, &x, sizeof f);
  return f;
}

inline float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (man << 13));  // Inf, NaN
  if (exp != 0) return bits_float(sign | ((exp + 112) << 23) | (man << 13));
  // Zero or subnormal: man * 2^-24, exact in float (man < 2^10).
  const float mag = float(man) * 0x1p-24f;
  return sign ? -mag : mag;
}

inline uint16_t float_to_half(float f) {
  const uint32_t x = float_bits(f);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return uint16_t(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));  // quiet NaN
  if (ax >= 0x47800000u) return uint16_t(sign | 0x7c00u);  // >= 2^16: Inf (and Inf itself)
  if (ax <= 0x33000000u) return sign;  // <= 2^-25: rounds to zero (2^-25 is a tie, to even 0)
  if (ax < 0x38800000u) {
    // Result is a half subnormal, counted in units of 2^-24. The float is
    // M * 2^(e-150) with a 24-bit M, i.e. M >> (126 - e) units.
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

inline float bfloat16_to_float(uint16_t b) { return bits_float(uint32_t(b) << 16); }

inline uint16_t float_to_bfloat16(float f) {
  const uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x0040u);  // quiet NaN
  const uint32_t lsb = (x >> 16) & 1u;
  return uint16_t((x + 0x7fffu + lsb) >> 16);  // RNE; overflow carries into Inf
}

// double -> float rounding to odd: truncate, and set the last bit if anything
// was lost. Rounding a value first to odd with >= 2 extra bits and then to
// nearest-even gives the correctly rounded result, so double -> half/bfloat16
// via this float has one rounding, not two (a plain (float)d would round twice).
inline float double_to_float_round_odd(double d) {
  if (std::isnan(d)) return float(d);
  float f = float(d);
  if (double(f) == d) return f;
  if (std::fabs(double(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);  // truncate
  return bits_float(float_bits(f) | 1u);
}

inline uint16_t double_to_half(double d) { return float_to_half(double_to_float_round_odd(d)); }
inline uint16_t double_to_bfloat16(double d) {
  return float_to_bfloat16(double_to_float_round_odd(d));
}

}  // namespace dkcpu

#endif  // DEVICEKIT_CPU_HALF_H_
