/*
 * DeviceKit plugin runtime: float16 / bfloat16 <-> float conversions, once,
 * for every plugin, in host and device code alike.
 *
 * Written with integer bit manipulation rather than _Float16, F16C
 * intrinsics or cuda_fp16.h, so it builds with any C11 / C++17 compiler and
 * under nvcc, and every plugin that uses it produces the same bits: every
 * narrowing rounds to nearest, ties to even (RNE), like IEEE 754 hardware;
 * NaN stays a quiet NaN and keeps its sign and top payload bits.
 *
 * Optional and header-only, like plugin_helpers.h: every function is
 * `static inline` (under nvcc also `__host__ __device__`), pure, and
 * thread-safe; nothing crosses the plugin boundary. Identifiers start with
 * dkh_ / DKH_. Values are the raw 16-bit patterns (uint16_t); a plugin wraps
 * them in its own storage types if it wants distinct ones.
 */
#ifndef DEVICEKIT_PLUGIN_HALF_H_
#define DEVICEKIT_PLUGIN_HALF_H_

#include <stdint.h>
#include <string.h>

/* A function for host and device code: `__host__ __device__` under nvcc,
 * plain `static inline` for every other compiler (C and C++). */
#ifndef DKH_HD
#if defined(__CUDACC__)
#define DKH_HD static __host__ __device__ __forceinline__
#else
#define DKH_HD static inline
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The bits of a float and back: memcpy (no union or pointer cast, no UB) on
 * the host, the intrinsics in device code. */
DKH_HD uint32_t dkh_float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  return x;
#endif
}

DKH_HD float dkh_bits_float(uint32_t x) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(x);
#else
  float f;
  memcpy(&f, &x, sizeof f);
  return f;
#endif
}

/* Exact: every float16 is a float. */
DKH_HD float dkh_half_to_float(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) return dkh_bits_float(sign | 0x7f800000u | (man << 13)); /* Inf, NaN */
  if (exp != 0) return dkh_bits_float(sign | ((exp + 112) << 23) | (man << 13));
  /* Zero or subnormal: man * 2^-24, exact in float (man < 2^10). */
  const float mag = (float)man * 5.9604644775390625e-8f; /* 2^-24 */
  return sign ? -mag : mag;
}

DKH_HD uint16_t dkh_float_to_half(float f) {
  const uint32_t x = dkh_float_bits(f);
  const uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu)); /* quiet NaN */
  if (ax >= 0x47800000u) return (uint16_t)(sign | 0x7c00u); /* >= 2^16: Inf (and Inf itself) */
  if (ax <= 0x33000000u) return sign; /* <= 2^-25: rounds to zero (2^-25 is a tie, to even 0) */
  if (ax < 0x38800000u) {
    /* Result is a half subnormal, counted in units of 2^-24. The float is
     * M * 2^(e-150) with a 24-bit M, i.e. M >> (126 - e) units. */
    const uint32_t e = ax >> 23;
    const uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e; /* 14..24 */
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1), halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (r & 1))) ++r; /* may carry into the min normal: fine */
    return (uint16_t)(sign | r);
  }
  /* Normal: rebias the exponent (127 -> 15), drop 13 mantissa bits with RNE.
   * A carry out of the mantissa bumps the exponent, up to Inf: that is correct. */
  uint32_t h = (ax - 0x38000000u) >> 13;
  const uint32_t rem = ax & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) ++h;
  return (uint16_t)(sign | h);
}

/* Exact: a bfloat16 is the top half of a float. */
DKH_HD float dkh_bfloat16_to_float(uint16_t b) { return dkh_bits_float((uint32_t)b << 16); }

/* The one float32 -> bfloat16 rounding. Branch-free (the NaN test is a
 * select), so a cast kernel's loop over it vectorises. */
DKH_HD uint16_t dkh_float_to_bfloat16(float f) {
  const uint32_t x = dkh_float_bits(f);
  const uint32_t nan = (x >> 16) | 0x0040u; /* quiet NaN, sign and top payload kept */
  const uint32_t lsb = (x >> 16) & 1u;
  const uint32_t rne = (x + 0x7fffu + lsb) >> 16; /* RNE; overflow carries into Inf */
  return (uint16_t)((x & 0x7fffffffu) > 0x7f800000u ? nan : rne);
}

/* double -> float rounding to odd: truncate, and set the last bit if anything
 * was lost. Rounding first to odd with >= 2 extra bits and then to nearest
 * even gives the correctly rounded result, so double -> half / bfloat16
 * through this float rounds once, not twice (a plain (float)d would round
 * twice). The step toward zero is done on the bits (device code has no
 * nextafter): for a finite non-zero float or an infinity it is nextafter's. */
DKH_HD float dkh_double_to_float_round_odd(double d) {
  if (d != d) return (float)d; /* NaN */
  const float f = (float)d; /* round to nearest even */
  if ((double)f == d) return f;
  uint32_t b = dkh_float_bits(f);
  const double af = f < 0 ? -(double)f : (double)f, ad = d < 0 ? -d : d;
  if (af > ad) b -= 1; /* one ulp toward zero (f != 0 here: |f| > |d| >= 0) */
  return dkh_bits_float(b | 1u);
}

DKH_HD uint16_t dkh_double_to_half(double d) {
  return dkh_float_to_half(dkh_double_to_float_round_odd(d));
}

DKH_HD uint16_t dkh_double_to_bfloat16(double d) {
  return dkh_float_to_bfloat16(dkh_double_to_float_round_odd(d));
}

#ifdef __cplusplus
}
#endif

#endif /* DEVICEKIT_PLUGIN_HALF_H_ */
