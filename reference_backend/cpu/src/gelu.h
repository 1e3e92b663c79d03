// The GELU of the fused gelu / gelu_backward kernels (kernels_fused_gelu.cpp)
// per float32 element, in double arithmetic rounded once, so the fused
// result is at least as close to the exact value as the decomposition's
// chain of float32 ops. The tanh form reuses tanh.h's exp_neg and never
// forms 1 + tanh(u) by cancellation: with e = e^(-2|u|),
//   1 + tanh(u) = 2 / (1 + e)   (u >= 0)   or   2e / (1 + e)   (u < 0),
//   1 - tanh(u)^2 = 4e / (1 + e)^2,
// so the left tail (x << 0) keeps its relative accuracy where the float32
// decomposition rounds it to 0 (the tanh form: within 0.5 ulp of float32
// plus ~1e-16 relative). The loops vectorise: selects, no libm calls.
//
// At +-inf the values are those of the formulas in IEEE arithmetic, as the
// decomposition's: gelu(+inf) = +inf, gelu(-inf) = NaN (-inf * 0), and both
// derivatives NaN (an infinity times a zero). NaN stays NaN.
#pragma once

#include <cmath>

#include "tanh.h"

namespace dkcpu {

constexpr double kGeluC = 0.7978845608028654;  // sqrt(2 / pi)
constexpr double kGeluA = 0.044715;
constexpr double kInvSqrt2 = 0.7071067811865476;
constexpr double kInvSqrt2Pi = 0.3989422804014327;  // 1 / sqrt(2 pi)

DKCPU_INLINE bool is_inf(double x) { return std::fabs(x) == INFINITY; }

// gelu's value at x = +-inf as the formulas give it (see above); y elsewhere.
DKCPU_INLINE double gelu_at_inf(double x, double y) { return is_inf(x) ? (x > 0.0 ? x : NAN) : y; }

// The tanh form's pieces at x, with u = sqrt(2/pi) (x + 0.044715 x^3),
// e = e^(-2|u|) and r = 1 / (1 + e): 1 + tanh(u) and 1 - tanh(u)^2.
struct TanhTerms { double one_plus_t, sech2; };
DKCPU_INLINE TanhTerms gelu_tanh_terms(double x) {
  const double u = kGeluC * (x + kGeluA * x * x * x);
  const double e = exp_neg(-2.0 * std::fabs(u)), r = 1.0 / (1.0 + e);
  return {(u < 0.0 ? 2.0 * e : 2.0) * r, 4.0 * e * r * r};
}

// 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))
DKCPU_INLINE float gelu_tanh(float xf) {
  const double x = xf;
  return float(gelu_at_inf(x, 0.5 * x * gelu_tanh_terms(x).one_plus_t));
}

// dout * d/dx of gelu_tanh
DKCPU_INLINE float gelu_tanh_grad(float dout, float xf) {
  const double x = xf;
  const TanhTerms t = gelu_tanh_terms(x);
  const double d = 0.5 * t.one_plus_t + 0.5 * x * t.sech2 * kGeluC * (1.0 + 3.0 * kGeluA * x * x);
  return float(double(dout) * (is_inf(x) ? NAN : d));
}

// erfc(z) with a relative error under 1.1e-7 for every z (measured against
// libm's erfc on a 2 Mi-point grid over [-6, 12]): the Chebyshev fit
// t * exp(-z^2 + P(t)), t = 1 / (1 + z / 2), of Numerical Recipes' erfcc,
// with exp_neg instead of a libm call so the loop vectorises. P(t) <= 1.27,
// so the exponent is at most ~3e-8 above 0, where exp_neg is still exact.
DKCPU_INLINE double erfc_fit(double z) {
  const double a = std::fabs(z), t = 1.0 / (1.0 + 0.5 * a);
  double p = 0.17087277;
  p = p * t - 0.82215223;
  p = p * t + 1.48851587;
  p = p * t - 1.13520398;
  p = p * t + 0.27886807;
  p = p * t - 0.18628806;
  p = p * t + 0.09678418;
  p = p * t + 0.37409196;
  p = p * t + 1.00002368;
  const double r = t * exp_neg(t * p - 1.26551223 - a * a);
  return z >= 0.0 ? r : 2.0 - r;
}

// x * Phi(x), Phi(x) = 0.5 * erfc(-x / sqrt(2)) (no cancellation in the
// left tail). Within 2.3 ulp of float32 (erfc_fit's error, then one rounding).
DKCPU_INLINE float gelu_erf(float xf) {
  const double x = xf;
  return float(gelu_at_inf(x, x * 0.5 * erfc_fit(-x * kInvSqrt2)));
}

// dout * (Phi(x) + x * phi(x)); the sum cancels near x = -0.75 (where gelu'
// is 0), so there its error is erfc_fit's absolute one: under 1.1e-7 |dout|.
DKCPU_INLINE float gelu_erf_grad(float dout, float xf) {
  const double x = xf;
  const double d = 0.5 * erfc_fit(-x * kInvSqrt2) + x * kInvSqrt2Pi * exp_neg(-0.5 * x * x);
  return float(double(dout) * (is_inf(x) ? NAN : d));
}

// out[i] = gelu(x[i]); with dout, out[i] = dout[i] * gelu'(x[i]).
DKCPU_INLINE void gelu_span(const float* __restrict dout, const float* __restrict x,
                            float* __restrict out, int64_t n, bool tanh_form) {
  if (tanh_form && dout)
    for (int64_t i = 0; i < n; ++i) out[i] = gelu_tanh_grad(dout[i], x[i]);
  else if (tanh_form)
    for (int64_t i = 0; i < n; ++i) out[i] = gelu_tanh(x[i]);
  else if (dout)
    for (int64_t i = 0; i < n; ++i) out[i] = gelu_erf_grad(dout[i], x[i]);
  else
    for (int64_t i = 0; i < n; ++i) out[i] = gelu_erf(x[i]);
}

}  // namespace dkcpu
