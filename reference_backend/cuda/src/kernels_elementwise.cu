// The elementwise ops of device API 1.1 (unary, binary, compare, logical,
// where), all through one engine: ONE kernel per (family, dtype), whose op
// is a runtime code (ops_math.h), with a dense fast path inside it.
//
// Launch (host): the inputs are broadcast to the output's shape (stride 0),
// size-1 dims are dropped and neighbouring dims merged wherever every input
// steps across both as one, so a dense, scalar-broadcast or uniformly
// strided launch is rank 1: the kernel then indexes i * stride with no
// division. Anything else walks the merged dims per element (offset math in
// the strided path). The output is dense (the header's rule).
// Variants: unary 8 dtypes, binary 9, compare 9, logical 1, where 4 element
// sizes: 31 kernels for 29 ops.
#include "kernel.h"
#include "ops_math.h"

namespace dkcuda {
namespace {

constexpr int kMaxIn = 3;

// What a launch carries to the kernel (by value; about 300 bytes).
struct EwPlan {
  int64_t numel;
  int32_t rank;  // >= 1 after merging; 1 is the fast path
  int32_t op;    // the DK_OpId, switched on per element
  int64_t shape[DK_MAX_RANK];
  int64_t strides[kMaxIn][DK_MAX_RANK];  // elements; an unused input has 0
  const char* in[kMaxIn];                // an unused input repeats input 0
  char* out;                             // dense
};

// ---- The families: one element each, storage in, storage out -------------------

template <class T> struct UnaryJob {
  DK_HD static void run(const EwPlan& p, int64_t i, int64_t o0, int64_t, int64_t) {
    using C = dk_compute_t<T>;
    const C x = dk_widen(reinterpret_cast<const T*>(p.in[0])[o0]);
    reinterpret_cast<T*>(p.out)[i] = dk_narrow<T>(ops::Unary::apply<C>(p.op, x));
  }
};

template <class T> struct BinaryJob {
  DK_HD static void run(const EwPlan& p, int64_t i, int64_t o0, int64_t o1, int64_t) {
    using C = dk_compute_t<T>;
    const C a = dk_widen(reinterpret_cast<const T*>(p.in[0])[o0]);
    const C b = dk_widen(reinterpret_cast<const T*>(p.in[1])[o1]);
    reinterpret_cast<T*>(p.out)[i] = dk_narrow<T>(ops::Binary::apply<C>(p.op, a, b));
  }
};

template <class T> struct CompareJob {
  DK_HD static void run(const EwPlan& p, int64_t i, int64_t o0, int64_t o1, int64_t) {
    using C = dk_compute_t<T>;
    const C a = dk_widen(reinterpret_cast<const T*>(p.in[0])[o0]);
    const C b = dk_widen(reinterpret_cast<const T*>(p.in[1])[o1]);
    reinterpret_cast<dk_bool*>(p.out)[i] = dk_bool{uint8_t(ops::Compare::apply<C>(p.op, a, b))};
  }
};

struct LogicalJob {
  DK_HD static void run(const EwPlan& p, int64_t i, int64_t o0, int64_t o1, int64_t) {
    const bool a = dk_widen(reinterpret_cast<const dk_bool*>(p.in[0])[o0]);
    const bool b = dk_widen(reinterpret_cast<const dk_bool*>(p.in[1])[o1]);
    reinterpret_cast<dk_bool*>(p.out)[i] = dk_bool{uint8_t(ops::Logical::apply(p.op, a, b))};
  }
};

// where(cond, a, b): copies the bits of a or b (NaN payloads included), so
// it needs only the element size: B is uint8_t .. uint64_t.
template <class B> struct WhereJob {
  DK_HD static void run(const EwPlan& p, int64_t i, int64_t o0, int64_t o1, int64_t o2) {
    const bool c = dk_widen(reinterpret_cast<const dk_bool*>(p.in[0])[o0]);
    reinterpret_cast<B*>(p.out)[i] =
        c ? reinterpret_cast<const B*>(p.in[1])[o1] : reinterpret_cast<const B*>(p.in[2])[o2];
  }
};

// The element offsets of output index i in the three inputs: the merged
// dims walked from the innermost, the outermost taking what is left (no
// division there). I: the integer type of the division.
template <class I> DK_HD void offsets(const EwPlan& p, int64_t i, int64_t* o) {
  I rest = I(i);
  o[0] = o[1] = o[2] = 0;
  for (int32_t d = p.rank - 1; d >= 0; --d) {
    I c = rest;
    if (d > 0) {
      const I n = I(p.shape[d]);
      c = rest % n;
      rest /= n;
    }
    o[0] += int64_t(c) * p.strides[0][d];
    o[1] += int64_t(c) * p.strides[1][d];
    o[2] += int64_t(c) * p.strides[2][d];
  }
}

// ---- The kernel -------------------------------------------------------------------

template <class Job> DK_KERNEL elementwise_kernel(EwPlan p) {
  const int64_t step = global_stride();
  if (p.rank == 1) {  // dense, broadcast scalar or uniformly strided: no division
    const int64_t s0 = p.strides[0][0], s1 = p.strides[1][0], s2 = p.strides[2][0];
    for (int64_t i = global_index(); i < p.numel; i += step) Job::run(p, i, i * s0, i * s1, i * s2);
    return;
  }
  // Index math in 32 bits when every index fits (a GPU divides 32-bit
  // integers several times faster than 64-bit ones).
  if (p.numel <= INT32_MAX) {
    for (int64_t i = global_index(); i < p.numel; i += step) {
      int64_t o[3];
      offsets<uint32_t>(p, i, o);
      Job::run(p, i, o[0], o[1], o[2]);
    }
  } else {
    for (int64_t i = global_index(); i < p.numel; i += step) {
      int64_t o[3];
      offsets<int64_t>(p, i, o);
      Job::run(p, i, o[0], o[1], o[2]);
    }
  }
}

template <class Job> DK_Error* launch_plan(const char* call, const Launch& l, const EwPlan& p) {
  return launched(call, DK_LAUNCH(elementwise_kernel<Job>, grid_for(p.numel), kBlock, l.stream, p));
}

// ---- Host side: the plan, then one launch per family ------------------------------

enum Family { kUnary, kBinary, kCompare, kLogical, kWhere };

// Broadcasts every input to out, drops size-1 dims and merges a dim into the
// kept one before it wherever every input steps across both as one.
EwPlan make_plan(const DK_Kernel_Args* args, int arity, const View& out) {
  View in[kMaxIn];
  for (int k = 0; k < arity; ++k) in[k] = broadcast_to(make_view(args->inputs[k]), out);
  EwPlan p{};
  p.numel = out.numel;
  p.op = args->op;
  p.out = out.data;
  for (int k = 0; k < kMaxIn; ++k) p.in[k] = in[k < arity ? k : 0].data;
  int32_t r = 0;
  for (int32_t d = 0; d < out.rank; ++d) {
    if (out.shape[d] == 1) continue;
    bool merge = r > 0;
    for (int k = 0; k < arity && merge; ++k) {
      merge = p.strides[k][r - 1] == in[k].strides[d] * out.shape[d];
    }
    if (merge) {
      p.shape[r - 1] *= out.shape[d];
    } else {
      p.shape[r++] = out.shape[d];
    }
    for (int k = 0; k < arity; ++k) p.strides[k][r - 1] = in[k].strides[d];
  }
  if (r == 0) p.shape[r++] = 1;  // one element; every stride 0
  p.rank = r;
  return p;
}

DK_Error* launch_elementwise(const char* call, const DK_Kernel_Args* args, DK_OpId op,
                             Family family) {
  Launch l;
  if (DK_Error* e = begin(call, args, op, &l)) return e;
  return guarded(call, [&]() -> DK_Error* {
    static const int kArity[] = {1, 2, 2, 2, 3};
    const int arity = op == DK_OP_LOGICAL_NOT ? 1 : kArity[family];
    const View out = make_view(args->outputs[0]);
    if (out.numel == 0) return nullptr;
    const EwPlan p = make_plan(args, arity, out);
    // The declared dtype: input 0's, but where's (input 0 is the condition).
    const int32_t dtype = args->inputs[family == kWhere ? 1 : 0]->dtype;
    switch (family) {
      case kUnary:
        return dispatch(dtype, [&](auto tag) -> DK_Error* {
          using T = decltype(tag);
          if constexpr (std::is_same<T, dk_bool>::value)
            return nullptr;  // no unary op declares bool
          else return launch_plan<UnaryJob<T>>(call, l, p);
        });
      case kBinary:
        return dispatch(
            dtype, [&](auto tag) { return launch_plan<BinaryJob<decltype(tag)>>(call, l, p); });
      case kCompare:
        return dispatch(
            dtype, [&](auto tag) { return launch_plan<CompareJob<decltype(tag)>>(call, l, p); });
      case kLogical: return launch_plan<LogicalJob>(call, l, p);
      default:
        return dispatch_bits(dkh_dtype_size(dtype), [&](auto tag) {
          return launch_plan<WhereJob<decltype(tag)>>(call, l, p);
        });
    }
  });
}

}  // namespace
}  // namespace dkcuda

// The kernel functions, one per elementwise row of ops_1_1.def.
extern "C" {
#define DKCUDA_EW(name, ID, family)                                                                \
  DK_Error* dk_cuda_kernel_##name(const DK_Kernel_Args* args) {                                    \
    return dkcuda::launch_elementwise("cuda.Kernel(" #name ")", args, DK_OP_##ID, dkcuda::family); \
  }
DKCUDA_EW(neg, NEG, kUnary)
DKCUDA_EW(abs, ABS, kUnary)
DKCUDA_EW(exp, EXP, kUnary)
DKCUDA_EW(log, LOG, kUnary)
DKCUDA_EW(sqrt, SQRT, kUnary)
DKCUDA_EW(rsqrt, RSQRT, kUnary)
DKCUDA_EW(reciprocal, RECIPROCAL, kUnary)
DKCUDA_EW(sin, SIN, kUnary)
DKCUDA_EW(cos, COS, kUnary)
DKCUDA_EW(tanh, TANH, kUnary)
DKCUDA_EW(erf, ERF, kUnary)
DKCUDA_EW(floor, FLOOR, kUnary)
DKCUDA_EW(sign, SIGN, kUnary)
DKCUDA_EW(sub, SUB, kBinary)
DKCUDA_EW(mul, MUL, kBinary)
DKCUDA_EW(div, DIV, kBinary)
DKCUDA_EW(pow, POW, kBinary)
DKCUDA_EW(maximum, MAXIMUM, kBinary)
DKCUDA_EW(minimum, MINIMUM, kBinary)
DKCUDA_EW(eq, EQ, kCompare)
DKCUDA_EW(ne, NE, kCompare)
DKCUDA_EW(lt, LT, kCompare)
DKCUDA_EW(le, LE, kCompare)
DKCUDA_EW(logical_and, LOGICAL_AND, kLogical)
DKCUDA_EW(logical_or, LOGICAL_OR, kLogical)
DKCUDA_EW(logical_xor, LOGICAL_XOR, kLogical)
DKCUDA_EW(logical_not, LOGICAL_NOT, kLogical)
DKCUDA_EW(where, WHERE, kWhere)
#undef DKCUDA_EW
}  // extern "C"
