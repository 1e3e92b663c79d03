// tanh of a float argument in double arithmetic that vectorises, rounded
// once: libm's tanhf is a call per element (about 17 ns; the GELU of a
// GPT-style MLP spent most of its time there). Used by the elementwise
// engine for float32, float16 and bfloat16 (kernels_elementwise.cpp) and, in
// an AVX2 build, by fast/elementwise.cpp.
//
// Error: at most 0.5 ulp of float plus ~1e-16 relative, far under the spec's
// 2 ulp. Below |x| = 1e-3 the series to x^5 (relative error under 1e-19);
// above, (1 - t) / (1 + t) with t = e^(-2|x|) from exp_neg (relative error
// ~1e-16; the cancellation in 1 - t costs at most a factor 1000 there).
// NaN stays NaN; +-0 and +-inf give +-0 and +-1.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernel_common.h"

namespace dkcpu {

// e^y for y in [-1010 ln 2, 1022 ln 2] (NaN passes): Cody-Waite reduction
// by ln 2, Taylor to r^13 (|r| <= ln2/2: remainder under 1e-17), 2^n from
// its exponent bits. The caller clamps y to that range.
DKCPU_INLINE double exp_in_range(double y) {
  const double t = y * 1.4426950408889634 + 6755399441055744.0;  // 1.5 * 2^52: round
  const double n = t - 6755399441055744.0;
  const double r = (y - n * 0.6931471803691238) - n * 1.9082149292705877e-10;
  double p = 1.0 / 6227020800.0;
  p = p * r + 1.0 / 479001600.0;
  p = p * r + 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r * r + r + 1.0;
  int64_t t_bits;  // n sits in t's low significand bits (memcpy: no UB for NaN)
  std::memcpy(&t_bits, &t, sizeof t_bits);
  // 2^n, n in [-1010, 1022]: n + 1023 > 0, so the shift is of a positive value
  const uint64_t bits = uint64_t(t_bits - 0x4338000000000000LL + 1023) << 52;
  double scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

// e^y for y <= 0 (NaN passes).
DKCPU_INLINE double exp_neg(double y) { return exp_in_range(y < -700.0 ? -700.0 : y); }

// e^x of a float argument in the same double arithmetic, rounded once (at
// most 0.5 ulp of float plus ~1e-16 relative): libm's expf is a call per
// element, which kept the elementwise engine's exp (log_softmax's) at about
// 2 ns an element, 16x torch's. Clamped where float's answer is fixed already:
// e^-110 rounds to +0 and e^89 to +inf. NaN stays NaN; -inf gives +0.
DKCPU_INLINE float exp_float(float xf) {
  const double x = xf;
  const double lo = x < -110.0 ? -110.0 : x;
  return float(exp_in_range(lo > 89.0 ? 89.0 : lo));
}

DKCPU_INLINE float tanh_float(float xf) {
  const double x = xf, a = std::fabs(x), a2 = a * a;
  const double small = a * (1.0 + a2 * (-1.0 / 3.0 + a2 * (2.0 / 15.0)));
  const double t = exp_neg(-2.0 * a);
  const double large = (1.0 - t) / (1.0 + t);
  return float(std::copysign(a < 1e-3 ? small : large, x));
}

}  // namespace dkcpu
