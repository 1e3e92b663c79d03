// random_bits and random_uniform: counter-based Philox4x32-10
// (<devicekit/plugin_philox.h>, shared with every plugin).
//
// Element n of the output is a pure function of (seed, offset, n), so the
// output is split across cores with no shared state and is identical to every
// other backend's, whatever the thread count.
#include <devicekit/plugin_philox.h>

#include "kernel_common.h"
#include "parallel.h"

namespace dkcpu {
namespace {

struct RandomLaunch {
  char* out;
  DK_DType dtype;
  int64_t numel;
  uint64_t seed, offset;
};

// random_uniform: the top p bits of the word as a multiple of 2^-p, where p
// is the significand width of the output type (24 for float32 and float64,
// 11 for float16, 8 for bfloat16): exact in that type and always < 1.
template <class T> T uniform_from_bits(uint32_t w) {
  if constexpr (std::is_same<T, f16>::value)
    return f16{dkh_float_to_half(float(w >> 21) * 0x1p-11f)};
  else if constexpr (std::is_same<T, bf16>::value)
    return bf16{dkh_float_to_bfloat16(float(w >> 24) * 0x1p-8f)};
  else return T(float(w >> 8) * 0x1p-24f);
}

template <class T, bool kBits> void generate(const RandomLaunch& l) {
  T* out = reinterpret_cast<T*>(l.out);
  const int64_t blocks = (l.numel + 3) / 4;
  parallel_for(blocks, 1024, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      // The counter wraps modulo 2^64, as the header's uint64 arithmetic implies.
      const dkh_Philox4x32 r = dkh_philox_block(l.seed, l.offset + uint64_t(b));
      const int64_t n0 = 4 * b, words = std::min<int64_t>(4, l.numel - n0);
      for (int64_t j = 0; j < words; ++j) {
        if constexpr (kBits) out[n0 + j] = T(r.w[j]);  // int32: the same bits
        else out[n0 + j] = uniform_from_bits<T>(r.w[j]);
      }
    }
  });
}

DK_Error* run_random_bits(const void* payload) {
  generate<int32_t, true>(*static_cast<const RandomLaunch*>(payload));
  return nullptr;
}

DK_Error* run_random_uniform(const void* payload) {
  const RandomLaunch& l = *static_cast<const RandomLaunch*>(payload);
  dispatch(l.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (kIsFloat<T>) generate<T, false>(l);  // the mask admits nothing else
  });
  return nullptr;
}

DK_Error* launch_random(const char* call, DK_OpId op, WorkFn fn, const DK_Kernel_Args* args) {
  if (DK_Error* e = check_call(call, args, op, 0, 1)) return e;
  return guarded(call, [&]() -> DK_Error* {
    View out;
    int64_t numel = 0;
    if (DK_Error* e = load_view(call, "output 0", args, args->outputs[0], &out, &numel)) return e;
    if (DK_Error* e = check_dtype_declared(call, "output 0", op, out)) return e;
    if (DK_Error* e = check_output_layout(call, out)) return e;
    const DK_RandomAttrs* attrs;
    if (DK_Error* e = load_attrs(call, args, DK_RandomAttrs_STRUCT_SIZE, "DK_RandomAttrs", &attrs))
      return e;
    if (numel == 0) return nullptr;
    enqueue(args->stream, fn, RandomLaunch{out.data, out.dtype, numel, attrs->seed, attrs->offset});
    return nullptr;
  });
}

}  // namespace
}  // namespace dkcpu

using namespace dkcpu;

extern "C" {

DK_Error* dk_cpu_kernel_random_bits(const DK_Kernel_Args* args) {
  return launch_random("cpu.Kernel(random_bits)", DK_OP_RANDOM_BITS, run_random_bits, args);
}

DK_Error* dk_cpu_kernel_random_uniform(const DK_Kernel_Args* args) {
  return launch_random("cpu.Kernel(random_uniform)", DK_OP_RANDOM_UNIFORM, run_random_uniform,
                       args);
}

}  // extern "C"
