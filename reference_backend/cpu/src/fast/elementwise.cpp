// Fast path of the elementwise engine's tanh on dense float32
// (kernels_elementwise.cpp): the same tanh_float (tanh.h), so the same
// arithmetic, in an AVX2 build (4 doubles per vector against SSE2's 2).
// Picked at run time (cpu_isa).
#include "../tanh.h"
#include "fast.h"

namespace dkcpu {
namespace {

DKCPU_INLINE void tanh_impl(const float* __restrict in, float* __restrict out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = tanh_float(in[i]);
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) void tanh_avx2(const float* in, float* out, int64_t n) {
  tanh_impl(in, out, n);
}
#endif
void tanh_base(const float* in, float* out, int64_t n) { tanh_impl(in, out, n); }

}  // namespace

void fast::tanh_f32(const float* in, float* out, int64_t n) {
#if defined(__x86_64__)
  if (cpu_isa() != Isa::kBase) return tanh_avx2(in, out, n);
#endif
  tanh_base(in, out, n);
}

}  // namespace dkcpu
