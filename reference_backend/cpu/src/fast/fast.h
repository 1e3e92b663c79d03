// The fast paths: what the plain core (src/*) hands over to src/fast/ when
// the plugin is built with them (DKCPU_FAST, the default; see
// kernel_common.h). Each entry computes exactly what the core's plain loop
// beside its call site computes, only faster; the README's "Fast paths"
// section says why each exists and what it costs. A vendor reading the
// plugin as a model can stop at this header.
//
// The hot loops here are compiled once per ISA level (target attributes on a
// force-inlined body, DKCPU_INLINE) and one is picked at run time (cpu_isa),
// so one library runs on any x86-64 yet uses AVX2+FMA or AVX-512 where the CPU
// has them; no -march=native anywhere.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "../attention_backward.h"
#include "../fused_common.h"

namespace dkcpu {

// ---- ISA levels -----------------------------------------------------------------

enum class Isa { kBase, kAvx2, kAvx512 };

// DEVICEKIT_CPU_ISA=base|avx2|avx512 caps the level (never raises it past
// what the CPU has): each level's copy of a fast path is different code, so a
// coverage run or a test reaches the lower levels' copies on one machine only
// this way. Plugin_Initialize refuses any other value. "base" also turns off
// F16C (fast/convert.cpp).
inline Isa cpu_isa() {
  static const Isa isa = [] {
    Isa have = Isa::kBase;
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl"))
      have = Isa::kAvx512;
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) have = Isa::kAvx2;
#endif
    const char* cap = std::getenv("DEVICEKIT_CPU_ISA");
    if (cap && std::strcmp(cap, "base") == 0) return Isa::kBase;
    if (cap && std::strcmp(cap, "avx2") == 0 && have == Isa::kAvx512) return Isa::kAvx2;
    return have;
  }();
  return isa;
}

namespace fast {

// fast/gemm.cpp: c[m, n] = a[m, k] @ b[k, n], one batch element; a and b
// read through element strides {a row, a column, b row, b column} (packing
// absorbs any layout), c dense row-major. float and double (a cache-blocked
// GEMM with a register-tiled micro-kernel), f16 and bf16 (widened to float32
// buffers for it, rounded once). Splits the work over parallel_for; throws
// std::bad_alloc when scratch runs out.
template <class T>
void gemm(const T* a, const T* b, T* c, int64_t m, int64_t k, int64_t n, const int64_t* strides);

// fast/elementwise.cpp: out[i] = tanh_float(in[i]) (tanh.h) for dense float32,
// in AVX2 and AVX-512 builds (the same bits).
void tanh_f32(const float* in, float* out, int64_t n);
// The same for exp_float (tanh.h).
void exp_f32(const float* in, float* out, int64_t n);

// fast/elementwise.cpp: gelu_span (gelu.h) for dense float32 in AVX2 and
// AVX-512 builds: out = gelu(x), or with dout its gradient.
void gelu_f32(const float* dout, const float* x, float* out, int64_t n, bool tanh_form);

// fast/convert.cpp: n float16 values widened to float32 (exact) or float32
// narrowed to float16 (to nearest even), as plugin_half.h's dkh_half_to_float /
// dkh_float_to_half do, with F16C. False, having done nothing, on a CPU without
// F16C: the caller converts with plugin_half.h.
bool widen_f16(const uint16_t* src, float* dst, int64_t n);
bool narrow_f16(const float* src, uint16_t* dst, int64_t n);

// fast/norm.cpp: rows [r0, r1) of an rms_norm / layer_norm launch, as the
// core's norm_rows, in an AVX2 build and with streaming stores when the whole
// output is larger than the caches.
void norm_rows(const NormLaunch& l, int64_t r0, int64_t r1);

// fast/attention.cpp: a whole attention launch, flash-style (key tiles, two
// register-tiled GEMMs per tile, online softmax), split over parallel_for.
void sdpa(const SdpaLaunch& l);

// fast/attention.cpp: one (batch, kv head) group of the attention backward,
// what attention_backward.h's loop computes, as register-tiled GEMMs over
// blocks of query rows, per ISA level (its own scratch; `scratch` unused).
void sdpa_backward_group(const SdpaBackward& L, int64_t bi, int64_t g, float* scratch);

}  // namespace fast
}  // namespace dkcpu
