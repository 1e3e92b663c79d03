// random_bits and random_uniform: counter-based Philox4x32-10, bit-identical
// to the CPU plugin: both use <devicekit/plugin_philox.h> (host and device
// code), the same rounds, the same counter and key layout.
//
// Element n of the output is word n % 4 of Philox(counter = {lo32(c),
// hi32(c), 0, 0}, key = {lo32(seed), hi32(seed)}) with c = offset + n / 4
// (mod 2^64): a pure function of (seed, offset, n), so each thread computes
// one 4-word block in a grid-stride loop, in any order.
#include <devicekit/plugin_philox.h>

#include "kernel.h"

namespace dkcuda {
namespace {

// random_uniform: the top p bits of the word times 2^-p, p the significand
// width of the output type (24 for float32 and float64, 11 for float16, 8 for
// bfloat16): exact in that type and always < 1.
template <class T> DK_HD T uniform_from_bits(uint32_t w) {
  if constexpr (std::is_same<T, dk_f16>::value) {
    return dk_f16{dkh_float_to_half(float(w >> 21) * 0x1p-11f)};
  } else if constexpr (std::is_same<T, dk_bf16>::value) {
    return dk_bf16{dkh_float_to_bfloat16(float(w >> 24) * 0x1p-8f)};
  } else {
    return T(float(w >> 8) * 0x1p-24f);
  }
}

struct RandomPlan {
  char* out;
  int64_t numel;
  uint64_t seed, offset;
};

// T: int32_t for random_bits (the raw words), a float type for random_uniform.
template <class T> DK_KERNEL random_kernel(RandomPlan p) {
  T* out = reinterpret_cast<T*>(p.out);
  const int64_t blocks = (p.numel + 3) / 4;
  for (int64_t b = global_index(); b < blocks; b += global_stride()) {
    const dkh_Philox4x32 r = dkh_philox_block(p.seed, p.offset + uint64_t(b));
    for (int j = 0; j < 4; ++j) {
      const int64_t n = 4 * b + j;
      if (n >= p.numel) break;
      if constexpr (std::is_same<T, int32_t>::value) out[n] = int32_t(r.w[j]);
      else out[n] = uniform_from_bits<T>(r.w[j]);
    }
  }
}

DK_Error* launch_random(const char* call, const DK_Kernel_Args* args, DK_OpId op) {
  Launch l;
  if (DK_Error* e = begin(call, args, op, &l)) return e;
  return guarded(call, [&]() -> DK_Error* {
    const View out = make_view(args->outputs[0]);
    if (out.numel == 0) return nullptr;
    const DK_RandomAttrs* attrs = static_cast<const DK_RandomAttrs*>(args->attrs);
    const RandomPlan p{out.data, out.numel, attrs->seed, attrs->offset};
    const unsigned grid = grid_for((out.numel + 3) / 4);
    if (op == DK_OP_RANDOM_BITS) {  // int32 only (the mask)
      return launched(call, DK_LAUNCH(random_kernel<int32_t>, grid, kBlock, l.stream, p));
    }
    return dispatch(out.dtype, [&](auto tag) -> DK_Error* {
      using T = decltype(tag);
      if constexpr (!dk_is_float<T>::value) return nullptr;  // the mask admits floats only
      else return launched(call, DK_LAUNCH(random_kernel<T>, grid, kBlock, l.stream, p));
    });
  });
}

}  // namespace
}  // namespace dkcuda

extern "C" {

DK_Error* dk_cuda_kernel_random_bits(const DK_Kernel_Args* args) {
  return dkcuda::launch_random("cuda.Kernel(random_bits)", args, DK_OP_RANDOM_BITS);
}
DK_Error* dk_cuda_kernel_random_uniform(const DK_Kernel_Args* args) {
  return dkcuda::launch_random("cuda.Kernel(random_uniform)", args, DK_OP_RANDOM_UNIFORM);
}

}  // extern "C"
