// The device side the fused kernels share (kernels_fused_rows.cu,
// kernels_fused_attention.cu), written once in the SIMT dialect
// (simt/simt.h): loads and stores of the three storage types (float32,
// float16, bfloat16: load, compute in float32, round once on the store),
// warp and block reductions, compensated sums, and the GELU of one element.
//
// Reductions are deterministic: a warp reduces with xor shuffles (a fixed
// butterfly), a block adds its warps' partials in warp order, and no kernel
// adds floats with atomics, so a result never depends on scheduling.
#pragma once

#include <math.h>
#include <stdint.h>

#include "half.h"
#include "simt/simt.h"

namespace dkcuda {
namespace fused {

// ---- storage types ---------------------------------------------------------------

// A stored element widened to float32 (exact); a float32 result rounded once
// (to nearest even) into T. half.h's dk_widen / dk_narrow, named for the
// kernels here, which take only float, dk_f16 and dk_bf16.
template <class T> DK_HD float load(T v) { return dk_widen(v); }
template <class T> DK_HD T store(float v) { return dk_narrow<T>(v); }

// ---- reductions ------------------------------------------------------------------

// NaN-propagating maximum (fmaxf would drop a NaN).
DK_HD float max_nan(float a, float b) { return (b > a || b != b) ? b : a; }

// The larger of a and b, skipping a NaN (NaN only when both are).
DK_HD float max_skip_nan(float a, float b) { return (b > a || a != a) ? b : a; }

DK_DEV float warp_max_skip_nan(float v) {
  for (int o = 16; o > 0; o >>= 1) v = max_skip_nan(v, dk_shfl_xor(v, o));
  return v;
}

DK_DEV float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += dk_shfl_xor(v, o);
  return v;
}
DK_DEV float warp_max(float v) {  // NaN-propagating
  for (int o = 16; o > 0; o >>= 1) v = max_nan(v, dk_shfl_xor(v, o));
  return v;
}

// The sum (or max) of v over a 1-D block whose size is a multiple of 32;
// every thread gets it. `red` is a shared array of 32 floats. Every thread
// of the block must call it (it holds two barriers); the second barrier lets
// the next call reuse `red`.
template <class S> DK_DEV float block_reduce(float v, bool is_max, S& red) {
  v = is_max ? warp_max(v) : warp_sum(v);
  const int warps = dk_block_dim_x() >> 5;
  if (dk_lane() == 0) red[dk_thread_x() >> 5] = v;
  dk_barrier();
  float t = red[0];
  for (int w = 1; w < warps; ++w) {
    const float x = red[w];
    t = is_max ? max_nan(t, x) : t + x;
  }
  dk_barrier();
  return t;
}
template <class S> DK_DEV float block_sum(float v, S& red) { return block_reduce(v, false, red); }
template <class S> DK_DEV float block_max(float v, S& red) { return block_reduce(v, true, red); }

// A compensated (Neumaier) float32 sum: its error stays near one rounding
// whatever the number of terms, where a plain running sum's grows with it.
// For the sums one thread takes over many rows (dweight, dbias; attention's
// dk and dv over every query row of a kv head, dq over every key), which
// the decomposition takes as pairwise reductions.
struct CompensatedSum {
  float s = 0.0f, c = 0.0f;
  DK_HD void add(float v) {
    const float t = s + v;
    c += fabsf(s) >= fabsf(v) ? (s - t) + v : (v - t) + s;
    s = t;
  }
  DK_HD float value() const { return s + c; }
};

// ---- GELU of one element ---------------------------------------------------------
//
// As the CPU plugin's gelu.h: double arithmetic rounded once, so the fused
// result is at least as close to the exact value as the decomposition's
// chain of float32 ops; the tanh form never forms 1 + tanh(u) by
// cancellation (with e = e^(-2|u|): 1 + tanh(u) = 2/(1+e) for u >= 0, 2e/(1+e)
// for u < 0; 1 - tanh(u)^2 = 4e/(1+e)^2). At +-inf the values are the
// formulas' in IEEE arithmetic: gelu(+inf) = +inf, gelu(-inf) = NaN, both
// derivatives NaN. The erf form uses erfc (no cancellation in the left tail).

DK_HD double gelu_elem(double x, bool tanh_form) {
  const double kC = 0.7978845608028654, kA = 0.044715, kInvSqrt2 = 0.7071067811865476;
  double y;
  if (tanh_form) {
    const double u = kC * (x + kA * x * x * x);
    const double e = exp(-2.0 * fabs(u)), r = 1.0 / (1.0 + e);
    y = 0.5 * x * ((u < 0.0 ? 2.0 * e : 2.0) * r);
  } else {
    y = x * 0.5 * erfc(-x * kInvSqrt2);
  }
  return fabs(x) == INFINITY ? (x > 0.0 ? x : NAN) : y;
}

// d/dx gelu(x)
DK_HD double gelu_grad_elem(double x, bool tanh_form) {
  const double kC = 0.7978845608028654, kA = 0.044715, kInvSqrt2 = 0.7071067811865476,
               kInvSqrt2Pi = 0.3989422804014327;
  double d;
  if (tanh_form) {
    const double u = kC * (x + kA * x * x * x);
    const double e = exp(-2.0 * fabs(u)), r = 1.0 / (1.0 + e);
    const double one_plus_t = (u < 0.0 ? 2.0 * e : 2.0) * r, sech2 = 4.0 * e * r * r;
    d = 0.5 * one_plus_t + 0.5 * x * sech2 * kC * (1.0 + 3.0 * kA * x * x);
  } else {
    d = 0.5 * erfc(-x * kInvSqrt2) + x * kInvSqrt2Pi * exp(-0.5 * x * x);
  }
  return fabs(x) == INFINITY ? NAN : d;
}

}  // namespace fused
}  // namespace dkcuda
