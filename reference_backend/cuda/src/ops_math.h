// What one element of a device API 1.1 base op computes, as DK_HD code that
// both builds compile: the math shims (the few names that differ between
// CUDA device code and the host C library) and the op functors the
// elementwise engine (ops_elementwise.cu) instantiates.
//
// Compute types: float for float32/float16/bfloat16 (a 16-bit value is
// widened, computed in float and rounded once), double for float64, the
// integer type itself for integers (wrapping through unsigned arithmetic, so
// no signed overflow happens), bool for bool. The op is a runtime code (its
// DK_OpId), switched on per element: the switch is uniform across a launch,
// so it costs no divergence, and one kernel per (family, dtype) serves every
// op of the family (few variants to compile).
#pragma once

#include <math.h>
#include <stdint.h>

#include <type_traits>

#include <devicekit/device_api.h>

#include "half.h"
#include "simt/simt.h"

namespace dkcuda {
namespace ops {

// ---- Math shims --------------------------------------------------------------
// The float and double functions of <math.h> exist in CUDA device code under
// the same names; only rsqrt does not exist on the host.
DK_HD float m_exp(float x) { return expf(x); }
DK_HD double m_exp(double x) { return exp(x); }
DK_HD float m_log(float x) { return logf(x); }
DK_HD double m_log(double x) { return log(x); }
DK_HD float m_sqrt(float x) { return sqrtf(x); }  // IEEE-exact unless -use_fast_math
DK_HD double m_sqrt(double x) { return sqrt(x); }
#if DK_SIMT_EMULATED
DK_HD float m_rsqrt(float x) { return 1.0f / sqrtf(x); }
DK_HD double m_rsqrt(double x) { return 1.0 / sqrt(x); }
#else
DK_HD float m_rsqrt(float x) { return rsqrtf(x); }  // 2 ulp: the spec's float32 bound
DK_HD double m_rsqrt(double x) { return rsqrt(x); }
#endif
DK_HD float m_sin(float x) { return sinf(x); }
DK_HD double m_sin(double x) { return sin(x); }
DK_HD float m_cos(float x) { return cosf(x); }
DK_HD double m_cos(double x) { return cos(x); }
DK_HD float m_tanh(float x) { return tanhf(x); }
DK_HD double m_tanh(double x) { return tanh(x); }
DK_HD float m_erf(float x) { return erff(x); }
DK_HD double m_erf(double x) { return erf(x); }
DK_HD float m_floor(float x) { return floorf(x); }
DK_HD double m_floor(double x) { return floor(x); }
DK_HD float m_fabs(float x) { return fabsf(x); }
DK_HD double m_fabs(double x) { return fabs(x); }
DK_HD float m_pow(float a, float b) { return powf(a, b); }
DK_HD double m_pow(double a, double b) { return pow(a, b); }
DK_HD bool m_signbit(float x) { return signbit(x); }
DK_HD bool m_signbit(double x) { return signbit(x); }

template <class C> DK_HD bool is_nan(C x) { return x != x; }

template <class C> using Bits = typename std::make_unsigned<C>::type;
template <class C> constexpr bool kInt =
    std::is_integral<C>::value && !std::is_same<C, bool>::value;
template <class C> constexpr bool kFloat = std::is_floating_point<C>::value;

// ---- Unary: neg abs exp log sqrt rsqrt reciprocal sin cos tanh erf floor sign
struct Unary {
  template <class C> DK_HD static C apply(int32_t op, C x) {
    if constexpr (kInt<C>) {
      switch (op) {
        case DK_OP_NEG: return C(Bits<C>(Bits<C>(0) - Bits<C>(x)));  // -INT_MIN = INT_MIN
        case DK_OP_ABS:
          if constexpr (std::is_unsigned<C>::value) return x;
          else return x < 0 ? C(Bits<C>(Bits<C>(0) - Bits<C>(x))) : x;
        case DK_OP_SIGN:
          if constexpr (std::is_unsigned<C>::value) return C(x != 0);
          else return C((x > 0) - (x < 0));
        default: return x;  // floor: integers unchanged
      }
    } else {
      switch (op) {
        case DK_OP_NEG: return -x;
        case DK_OP_ABS: return m_fabs(x);  // abs(-0.0) = +0.0
        case DK_OP_EXP: return m_exp(x);
        case DK_OP_LOG: return m_log(x);
        case DK_OP_SQRT: return m_sqrt(x);
        case DK_OP_RSQRT: return m_rsqrt(x);
        case DK_OP_RECIPROCAL: return C(1) / x;
        case DK_OP_SIN: return m_sin(x);
        case DK_OP_COS: return m_cos(x);
        case DK_OP_TANH: return m_tanh(x);
        case DK_OP_ERF: return m_erf(x);
        case DK_OP_FLOOR: return m_floor(x);
        default:  // sign: +0 for +-0, NaN stays NaN
          return x > 0 ? C(1) : x < 0 ? C(-1) : x == x ? C(0) : x;
      }
    }
  }
};

// ---- Binary: sub mul div pow maximum minimum ---------------------------------
struct Binary {
  template <class C> DK_HD static C apply(int32_t op, C a, C b) {
    if constexpr (std::is_same<C, bool>::value) {
      return a && b;  // bool declares mul only: logical and
    } else if constexpr (kInt<C>) {
      switch (op) {
        case DK_OP_SUB: return C(Bits<C>(Bits<C>(a) - Bits<C>(b)));
        case DK_OP_MUL: return C(Bits<C>(Bits<C>(a) * Bits<C>(b)));
        case DK_OP_MAXIMUM: return a > b ? a : b;
        default: return a < b ? a : b;  // minimum (div and pow are floating only)
      }
    } else {
      switch (op) {
        case DK_OP_SUB: return a - b;
        case DK_OP_MUL: return a * b;
        case DK_OP_DIV: return a / b;
        case DK_OP_POW: return m_pow(a, b);  // C pow: pow(NaN, 0) = 1
        default: {
          // maximum / minimum: NaN if either is NaN, and -0.0 < +0.0 (IEEE
          // 754-2019), so the result does not depend on the argument order.
          const bool is_max = op == DK_OP_MAXIMUM;
          const bool beyond = is_max ? a > b : a < b;
          C r = beyond || (a == b && m_signbit(a) != is_max) ? a : b;
          r = is_nan(b) ? b : r;
          return is_nan(a) ? a : r;
        }
      }
    }
  }
};

// ---- Compare: eq ne lt le (bool out; NaN unordered, -0.0 == +0.0) ---------
struct Compare {
  template <class C> DK_HD static bool apply(int32_t op, C a, C b) {
    switch (op) {
      case DK_OP_EQ: return a == b;
      case DK_OP_NE: return a != b;
      case DK_OP_LT: return a < b;
      default: return a <= b;
    }
  }
};

// ---- Logical: logical_and / or / xor / not on bool -----------------------------
struct Logical {
  DK_HD static bool apply(int32_t op, bool a, bool b) {
    switch (op) {
      case DK_OP_LOGICAL_AND: return a && b;
      case DK_OP_LOGICAL_OR: return a || b;
      case DK_OP_LOGICAL_XOR: return a != b;
      default: return !a;  // logical_not (b is a repeat of a)
    }
  }
};

// ---- Sums: what reduce_sum, cumsum and scatter_add accumulate in ------------------
// double for float32 and float64, float32 for float16 / bfloat16, and for
// integers a uint64 that wraps (a sum modulo 2^64 reduces to the right value
// modulo 2^bits of the type, without signed overflow).
template <class T> struct SumAccOf { using type = dk_compute_t<T>; };
template <> struct SumAccOf<float> { using type = double; };
template <> struct SumAccOf<int8_t> { using type = uint64_t; };
template <> struct SumAccOf<int32_t> { using type = uint64_t; };
template <> struct SumAccOf<int64_t> { using type = uint64_t; };
template <> struct SumAccOf<uint8_t> { using type = uint64_t; };
template <class T> using SumAcc = typename SumAccOf<T>::type;

template <class T> DK_HD SumAcc<T> sum_load(T x) {
  if constexpr (dk_is_float<T>::value) return SumAcc<T>(dk_widen(x));
  else return SumAcc<T>(int64_t(x));  // sign-extend, then wrap
}
template <class T> DK_HD T sum_store(SumAcc<T> a) {
  if constexpr (dk_is_half<T>::value) return dk_narrow<T>(float(a));
  else if constexpr (dk_is_float<T>::value) return T(a);  // one rounding
  else return T(typename std::make_unsigned<T>::type(a));  // modulo 2^bits
}

}  // namespace ops
}  // namespace dkcuda
