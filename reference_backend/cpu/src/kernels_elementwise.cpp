// The elementwise ops of device API 1.1: unary, binary, compare, logical
// and where, all through one engine.
//
// An op is a functor in namespace `op` named like its DK_OpId suffix (NEG,
// LOGICAL_AND, ...). Its base class (Unary, Binary, Compare, Logical, Select)
// says how many inputs it has, which one carries the declared dtype and what
// the output dtype is; the functor says what one element computes. The
// kernel function itself is generated from the op's row in
// ops_1_1_elementwise.def, so adding an op is that row plus its functor.
//
// Launch: one validation for every op (prepare), which also folds the views
// into a Plan: output dense, dims of size 1 dropped, neighbouring dims merged
// wherever every input allows it, so a dense launch is a single row.
// Worker: the Plan is split across cores (parallel_for); each row segment
// runs a plain loop over __restrict pointers, instantiated per pattern of
// broadcast (stride-0) inputs, so the float32 loops vectorise at -O3.
// float16 / bfloat16 compute in float32 and round once (<devicekit/plugin_half.h>); float64 in
// double; integers in unsigned arithmetic where signed could overflow.
#include <cmath>
#include <cstring>
#include <utility>

#include "kernel_common.h"
#include "parallel.h"
#include "tanh.h"
#if DKCPU_FAST
#include "fast/fast.h"
#endif

namespace dkcpu {
namespace {

// ---- The plan a launch carries to the worker ---------------------------------

constexpr int kMaxInputs = 3;
constexpr int64_t kGrain = 32 * 1024;  // elements per parallel chunk, at least

struct Plan {
  int64_t numel;
  int32_t rank;  // >= 1
  DK_DType dtype;  // the declared (dispatch) dtype
  int64_t shape[DK_MAX_RANK];
  int64_t strides[kMaxInputs][DK_MAX_RANK];  // in elements; the output is dense
  const char* in[kMaxInputs];  // an unused input repeats input 0 with stride 0
  char* out;
};

// ---- Op classes: the shape of a call ------------------------------------------

struct Unary {
  static constexpr int kArity = 1, kTyped = 0;  // kTyped: input with the declared dtype
  static constexpr bool kOutBool = false;       // else out has the declared dtype
  static constexpr unsigned kBoolInputs = 0;    // bit k: input k is bool whatever the dtype
  static constexpr bool kRaw = false;           // true: works on stored bits, no float widening
};
struct Binary : Unary { static constexpr int kArity = 2; };
struct Compare : Binary { static constexpr bool kOutBool = true; };
// The logical ops declare only bool, so "bool output" is all that differs.
struct Logical : Compare {};
struct LogicalUnary : Unary { static constexpr bool kOutBool = true; };
struct Select : Unary {
  static constexpr int kArity = 3, kTyped = 1;
  static constexpr unsigned kBoolInputs = 1;
  static constexpr bool kRaw = true;  // copies a or b exactly, NaN payloads included
};

// ---- Op functors: one element, on compute types ---------------------------------
// Compute types: float for float32/float16/bfloat16, double, the integer
// types, bool. Only the dtypes an op's row declares are instantiated.

template <class C> using Bits = std::make_unsigned_t<C>;  // wrapping integer arithmetic without UB

template <class C> constexpr bool kInt = std::is_integral<C>::value;

namespace op {

struct NEG : Unary {
  static constexpr const char* kCall = "cpu.Kernel(neg)";
  template <class C> C operator()(C x) const {
    if constexpr (kInt<C>) return C(Bits<C>(Bits<C>(0) - Bits<C>(x)));
    else return -x;
  }
};
struct ABS : Unary {
  static constexpr const char* kCall = "cpu.Kernel(abs)";
  template <class C> C operator()(C x) const {
    if constexpr (std::is_unsigned<C>::value) return x;
    else if constexpr (kInt<C>) return x < 0 ? C(Bits<C>(Bits<C>(0) - Bits<C>(x))) : x;
    else return std::fabs(x);  // abs(-0.0) = +0.0
  }
};
// The transcendental ops: one line each over the <cmath> overloads.
#define DKCPU_MATH(ID, name, expr)                               \
  struct ID : Unary {                                            \
    static constexpr const char* kCall = "cpu.Kernel(" name ")"; \
    template <class C> C operator()(C x) const { return expr; }  \
  };
// exp of float arguments (float32, float16, bfloat16): exp_float (tanh.h),
// double arithmetic that vectorises, as tanh below.
struct EXP : Unary {
  static constexpr const char* kCall = "cpu.Kernel(exp)";
  template <class C> C operator()(C x) const {
    if constexpr (std::is_same<C, float>::value) return exp_float(x);
    else return std::exp(x);
  }
};
DKCPU_MATH(LOG, "log", std::log(x))
DKCPU_MATH(SQRT, "sqrt", std::sqrt(x))
DKCPU_MATH(RSQRT, "rsqrt", C(1) / std::sqrt(x))
DKCPU_MATH(RECIPROCAL, "reciprocal", C(1) / x)
DKCPU_MATH(SIN, "sin", std::sin(x))
DKCPU_MATH(COS, "cos", std::cos(x))
// tanh of float arguments (float32, float16, bfloat16): tanh_float (tanh.h),
// double arithmetic that vectorises, instead of libm's tanhf call per element.
struct TANH : Unary {
  static constexpr const char* kCall = "cpu.Kernel(tanh)";
  template <class C> C operator()(C x) const {
    if constexpr (std::is_same<C, float>::value) return tanh_float(x);
    else return std::tanh(x);
  }
};
DKCPU_MATH(ERF, "erf", std::erf(x))
#undef DKCPU_MATH
struct FLOOR : Unary {
  static constexpr const char* kCall = "cpu.Kernel(floor)";
  template <class C> C operator()(C x) const {
    if constexpr (kInt<C>) return x;
    else return std::floor(x);
  }
};
struct SIGN : Unary {
  static constexpr const char* kCall = "cpu.Kernel(sign)";
  template <class C> C operator()(C x) const {
    if constexpr (std::is_unsigned<C>::value) return C(x != 0);
    else if constexpr (kInt<C>) return C((x > 0) - (x < 0));
    else return x > 0 ? C(1) : x < 0 ? C(-1) : x == x ? C(0) : x;  // +0 for +-0; NaN stays
  }
};

// add (a 1.0 op; its row is in ops_1_0.def): bool is logical or, integers wrap.
struct ADD : Binary {
  static constexpr const char* kCall = "cpu.Kernel(add)";
  template <class C> C operator()(C a, C b) const {
    if constexpr (std::is_same<C, bool>::value) return a || b;
    else if constexpr (kInt<C>) return C(Bits<C>(Bits<C>(a) + Bits<C>(b)));
    else return a + b;
  }
};
struct SUB : Binary {
  static constexpr const char* kCall = "cpu.Kernel(sub)";
  template <class C> C operator()(C a, C b) const {
    if constexpr (kInt<C>) return C(Bits<C>(Bits<C>(a) - Bits<C>(b)));
    else return a - b;
  }
};
struct MUL : Binary {
  static constexpr const char* kCall = "cpu.Kernel(mul)";
  template <class C> C operator()(C a, C b) const {
    if constexpr (std::is_same<C, bool>::value) return a && b;
    // Promoted operands: uint8 * uint8 fits an int; uint32/uint64 wrap.
    else if constexpr (kInt<C>) return C(Bits<C>(Bits<C>(a) * Bits<C>(b)));
    else return a * b;
  }
};
struct DIV : Binary {
  static constexpr const char* kCall = "cpu.Kernel(div)";
  template <class C> C operator()(C a, C b) const { return a / b; }
};
struct POW : Binary {
  static constexpr const char* kCall = "cpu.Kernel(pow)";
  template <class C> C operator()(C a, C b) const { return std::pow(a, b); }
};
// maximum/minimum: NaN if either is NaN (std::fmax would drop it), and
// IEEE 754-2019's order of zeros, -0.0 < +0.0, so the result does not depend
// on the argument order. Written as selects, not branches, to vectorise.
template <bool kMax> struct Extremum : Binary {
  template <class C> C operator()(C a, C b) const {
    const bool beyond = kMax ? a > b : a < b;
    if constexpr (kInt<C>) return beyond ? a : b;
    else {
      C r = beyond || (a == b && std::signbit(a) != kMax) ? a : b;  // a is the right zero
      r = b != b ? b : r;
      return a != a ? a : r;
    }
  }
};
struct MAXIMUM : Extremum<true> { static constexpr const char* kCall = "cpu.Kernel(maximum)"; };
struct MINIMUM : Extremum<false> { static constexpr const char* kCall = "cpu.Kernel(minimum)"; };

// Comparisons and the logical ops return bool; NaN compares unequal and
// unordered, -0.0 == +0.0, all by C++'s own operators.
#define DKCPU_PREDICATE(ID, Base, name, expr)                           \
  struct ID : Base {                                                    \
    static constexpr const char* kCall = "cpu.Kernel(" name ")";        \
    template <class C> bool operator()(C a, C b) const { return expr; } \
  };
DKCPU_PREDICATE(EQ, Compare, "eq", a == b)
DKCPU_PREDICATE(NE, Compare, "ne", a != b)
DKCPU_PREDICATE(LT, Compare, "lt", a < b)
DKCPU_PREDICATE(LE, Compare, "le", a <= b)
DKCPU_PREDICATE(LOGICAL_AND, Logical, "logical_and", a&& b)
DKCPU_PREDICATE(LOGICAL_OR, Logical, "logical_or", a || b)
DKCPU_PREDICATE(LOGICAL_XOR, Logical, "logical_xor", a != b)
#undef DKCPU_PREDICATE
struct LOGICAL_NOT : LogicalUnary {
  static constexpr const char* kCall = "cpu.Kernel(logical_not)";
  bool operator()(bool x) const { return !x; }
};

struct WHERE : Select {
  static constexpr const char* kCall = "cpu.Kernel(where)";
  template <class T> T operator()(boolean c, T a, T b) const { return c.value ? a : b; }
};

}  // namespace op

// ---- Storage <-> compute ---------------------------------------------------------

inline float load(f16 x) { return dkh_half_to_float(x.bits); }
inline float load(bf16 x) { return dkh_bfloat16_to_float(x.bits); }
inline bool load(boolean x) { return x.value != 0; }
template <class T> T load(T x) { return x; }

template <class T, class C> T store(C x) {
  if constexpr (std::is_same<T, f16>::value) return f16{dkh_float_to_half(x)};
  else if constexpr (std::is_same<T, bf16>::value) return bf16{dkh_float_to_bfloat16(x)};
  else if constexpr (std::is_same<T, boolean>::value) return boolean{uint8_t(x ? 1 : 0)};
  else return T(x);
}

template <class T> constexpr DK_DType dtype_of() {
  if constexpr (std::is_same<T, float>::value) return DK_DTYPE_FLOAT32;
  else if constexpr (std::is_same<T, f16>::value) return DK_DTYPE_FLOAT16;
  else if constexpr (std::is_same<T, bf16>::value) return DK_DTYPE_BFLOAT16;
  else if constexpr (std::is_same<T, double>::value) return DK_DTYPE_FLOAT64;
  else if constexpr (std::is_same<T, int8_t>::value) return DK_DTYPE_INT8;
  else if constexpr (std::is_same<T, int32_t>::value) return DK_DTYPE_INT32;
  else if constexpr (std::is_same<T, int64_t>::value) return DK_DTYPE_INT64;
  else if constexpr (std::is_same<T, uint8_t>::value) return DK_DTYPE_UINT8;
  else return DK_DTYPE_BOOL;
}

// The rows of ops_1_1_elementwise.def, at compile time: a dtype the row does
// not declare gets no loop (and never arrives: check_dtype_declared).
constexpr uint64_t row_dtypes(DK_OpId id) {
  switch (id) {
#define DKCPU_OP(ID, fn, dtypes, caps) \
  case DK_OP_##ID: return (dtypes);
#include "ops_1_1_elementwise.def"
#undef DKCPU_OP
    case DK_OP_ADD: return DK_OP_DTYPES_ADD;  // must match its row in ops_1_0.def
    default: return 0;
  }
}

// ---- The loops -----------------------------------------------------------------

// One row segment. Bit k of kScalar: input k has stride 0 here (broadcast or
// unused), so it is read once. Unused inputs alias input 0: only reads, so
// __restrict still holds. out may be input 0 itself (add, sub, mul, div
// declare DK_KERNEL_CAP_INPLACE): each a[i] is read only to compute out[i],
// which is stored after it, and no element is read again once stored, so no
// order the compiler may choose under __restrict reads a value it wrote.
template <unsigned kScalar, class O, class A, class B, class C, class F>
void row_loop(O* __restrict out, const A* __restrict a, const B* __restrict b,
              const C* __restrict c, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) {
    out[i] = f(a[kScalar & 1 ? 0 : i], b[kScalar & 2 ? 0 : i], c[kScalar & 4 ? 0 : i]);
  }
}

// Calls g(integral_constant<mask>) for the runtime mask, instantiating only
// the masks in which the inputs an op lacks are (always) stride 0.
template <int kArity, unsigned kMask = 0, class G> void with_mask(unsigned mask, G&& g) {
  if constexpr (kMask < (1u << kMaxInputs)) {
    constexpr unsigned kUnused = ((1u << kMaxInputs) - 1) & ~((1u << kArity) - 1);
    if constexpr ((kMask & kUnused) == kUnused) {
      if (mask == kMask) return g(std::integral_constant<unsigned, kMask>{});
    }
    with_mask<kArity, kMask + 1>(mask, g);
  }
}

// Calls row(out_offset, in_offsets, length) for the row segments covering
// output elements [begin, end), walking the outer dims like an odometer.
template <class Row> void for_each_row(const Plan& p, int64_t begin, int64_t end, Row&& row) {
  const int32_t r = p.rank;
  int64_t idx[DK_MAX_RANK], off[kMaxInputs] = {};
  int64_t rest = begin;
  for (int32_t d = r - 1; d >= 0; --d) {
    idx[d] = rest % p.shape[d];
    rest /= p.shape[d];
    for (int k = 0; k < kMaxInputs; ++k) off[k] += idx[d] * p.strides[k][d];
  }
  for (int64_t pos = begin; pos < end;) {
    const int64_t len = std::min(p.shape[r - 1] - idx[r - 1], end - pos);
    row(pos, off, len);
    pos += len;
    idx[r - 1] += len;
    for (int k = 0; k < kMaxInputs; ++k) off[k] += len * p.strides[k][r - 1];
    for (int32_t d = r - 1; d > 0 && idx[d] == p.shape[d]; --d) {  // carry
      idx[d] = 0;
      ++idx[d - 1];
      for (int k = 0; k < kMaxInputs; ++k) {
        off[k] += p.strides[k][d - 1] - p.shape[d] * p.strides[k][d];
      }
    }
  }
}

template <class Op, class T, int k> using InputType =
    std::conditional_t<(Op::kBoolInputs >> k) & 1, boolean, T>;

template <class Op, class T> void run_typed(const Plan& p) {
  using O = std::conditional_t<Op::kOutBool, boolean, T>;
  using A = InputType<Op, T, 0>;
  using B = std::conditional_t<(Op::kArity > 1), InputType<Op, T, 1>, A>;
  using C = std::conditional_t<(Op::kArity > 2), InputType<Op, T, 2>, A>;
  const auto element = [](A a, B b, C c) -> O {
    if constexpr (Op::kRaw) return Op{}(a, b, c);
    else if constexpr (Op::kArity == 1) return store<O>(Op{}(load(a)));
    else return store<O>(Op{}(load(a), load(b)));
  };
  unsigned mask = 0;
  for (int k = 0; k < kMaxInputs; ++k) mask |= unsigned(p.strides[k][p.rank - 1] == 0) << k;
  parallel_for(p.numel, kGrain, [&](int64_t begin, int64_t end) {
    for_each_row(p, begin, end, [&](int64_t pos, const int64_t* off, int64_t len) {
      with_mask<Op::kArity>(mask, [&](auto m) {
        row_loop<decltype(m)::value>(reinterpret_cast<O*>(p.out) + pos,
                                     reinterpret_cast<const A*>(p.in[0]) + off[0],
                                     reinterpret_cast<const B*>(p.in[1]) + off[1],
                                     reinterpret_cast<const C*>(p.in[2]) + off[2], len, element);
      });
    });
  });
}

template <class Op, DK_OpId kOp> DK_Error* run(const void* payload) {
  const Plan& p = *static_cast<const Plan*>(payload);
#if DKCPU_FAST
  // dense float32 tanh and exp: the AVX2 / AVX-512 builds of the same loop
  if constexpr (kOp == DK_OP_TANH || kOp == DK_OP_EXP) {
    if (p.dtype == DK_DTYPE_FLOAT32 && p.rank == 1 && p.strides[0][0] == 1) {
      const float* in = reinterpret_cast<const float*>(p.in[0]);
      float* out = reinterpret_cast<float*>(p.out);
      parallel_for(p.numel, kGrain, [&](int64_t begin, int64_t end) {
        if constexpr (kOp == DK_OP_TANH) fast::tanh_f32(in + begin, out + begin, end - begin);
        else fast::exp_f32(in + begin, out + begin, end - begin);
      });
      return nullptr;
    }
  }
#endif
  dispatch(p.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr ((row_dtypes(kOp) >> dtype_of<T>()) & 1) run_typed<Op, T>(p);
  });
  return nullptr;
}

// ---- Validation, the same for every op ------------------------------------------

struct Signature {
  int arity, typed;
  bool out_bool;
  unsigned bool_inputs;
};

// Checks the call and fills `p`; p->numel == 0 means there is nothing to run.
DK_Error* prepare(const char* call, const DK_Kernel_Args* a, DK_OpId id, const Signature& sig,
                  Plan* p) {
  static const char* const kIn[kMaxInputs] = {"input 0", "input 1", "input 2"};
  View out{}, in[kMaxInputs]{};
  int64_t numel = 0, in_numel = 0;
  if (DK_Error* e = load_view(call, "output 0", a, a->outputs[0], &out, &numel)) return e;
  for (int k = 0; k < sig.arity; ++k) {
    if (DK_Error* e = load_view(call, kIn[k], a, a->inputs[k], &in[k], &in_numel)) return e;
  }
  const View& typed = in[sig.typed];
  if (DK_Error* e = check_dtype_declared(call, kIn[sig.typed], id, typed)) return e;
  for (int k = 0; k < sig.arity; ++k) {
    if ((sig.bool_inputs >> k) & 1) {
      if (in[k].dtype != DK_DTYPE_BOOL) {
        return dkh_error(DK_ERROR_INVALID_ARGUMENT, "%s: %s is %s; expected bool (the condition)",
                         call, kIn[k], dkh_dtype_name(in[k].dtype));
      }
    } else if (DK_Error* e = check_same_dtype(call, kIn[k], in[k], typed, kIn[sig.typed])) {
      return e;
    }
  }
  if (sig.out_bool && out.dtype != DK_DTYPE_BOOL) {
    return dkh_error(DK_ERROR_INVALID_ARGUMENT, "%s: output 0 is %s; expected bool", call,
                     dkh_dtype_name(out.dtype));
  }
  if (!sig.out_bool) {
    if (DK_Error* e = check_same_dtype(call, "output 0", out, typed, kIn[sig.typed])) return e;
  }
  if (DK_Error* e = check_output_layout(call, out)) return e;
  const bool broadcast = declared_caps(id) & DK_KERNEL_CAP_BROADCAST;
  for (int k = 0; k < sig.arity; ++k) {
    if (DK_Error* e = check_layout(call, kIn[k], id, in[k])) return e;
    if (!broadcast) {
      if (DK_Error* e = check_same_shape(call, kIn[k], in[k], out, "output 0")) return e;
    }
    if (!broadcast_to(&in[k], out)) {
      return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                       "%s: %s has shape %s, which does not "
                       "broadcast to output 0's shape %s",
                       call, kIn[k], dims(in[k]).c_str(), dims(out).c_str());
    }
    if (DK_Error* e = check_no_alias(call, id, out, in[k], kIn[k], k == 0)) return e;
  }
  // The plan: drop size-1 dims, merge a dim into the kept one before it
  // wherever every input steps across both as one (the dense output always does).
  *p = Plan{};
  p->numel = numel;
  p->dtype = typed.dtype;
  p->out = out.data;
  for (int k = 0; k < kMaxInputs; ++k) p->in[k] = in[k < sig.arity ? k : 0].data;
  int32_t r = 0;
  for (int32_t d = 0; d < out.rank; ++d) {
    if (out.shape[d] == 1) continue;
    bool merge = r > 0;
    for (int k = 0; k < sig.arity && merge; ++k) {
      merge = p->strides[k][r - 1] == in[k].strides[d] * out.shape[d];
    }
    if (merge) {
      p->shape[r - 1] *= out.shape[d];
    } else {
      p->shape[r++] = out.shape[d];
    }
    for (int k = 0; k < sig.arity; ++k) p->strides[k][r - 1] = in[k].strides[d];
  }
  if (r == 0) p->shape[r++] = 1;  // one element; every stride 0
  p->rank = r;
  return nullptr;
}

template <class Op, DK_OpId kOp> DK_Error* launch(const DK_Kernel_Args* args) {
  if (DK_Error* e = check_call(Op::kCall, args, kOp, Op::kArity, 1)) return e;
  return guarded(Op::kCall, [&]() -> DK_Error* {
    static constexpr Signature kSig{Op::kArity, Op::kTyped, Op::kOutBool, Op::kBoolInputs};
    Plan p;
    if (DK_Error* e = prepare(Op::kCall, args, kOp, kSig, &p)) return e;
    if (p.numel > 0) enqueue(args->stream, run<Op, kOp>, p);
    return nullptr;
  });
}

}  // namespace
}  // namespace dkcpu

// The kernel functions, one per row of ops_1_1_elementwise.def.
extern "C" {
#define DKCPU_OP(ID, fn, dtypes, caps)                     \
  DK_Error* fn(const DK_Kernel_Args* args) {               \
    return dkcpu::launch<dkcpu::op::ID, DK_OP_##ID>(args); \
  }
#include "ops_1_1_elementwise.def"
#undef DKCPU_OP
DK_Error* dk_cpu_kernel_add(const DK_Kernel_Args* args) {
  return dkcpu::launch<dkcpu::op::ADD, DK_OP_ADD>(args);
}
}  // extern "C"
