// Dispatch of one base-op kernel: the op table the SDK knows from the spec,
// the per-op dispatch counters, and launch(), the one place an op call
// crosses into a plugin's kernel table. Everything above it (promotion,
// broadcasting, dtype fallback) is in promotion.h and ops.h.
#pragma once

#include <initializer_list>
#include <string>

#include "tensor.h"

namespace dk {

const char* op_name(DK_OpId op);  // "unknown-op" outside the table (kNoOp)

// What the SDK knows of each op from the spec (base_ops_table.inc).
enum class OutDType { Same, Bool, Int64, Given };
struct OpSpec {
  DK_OpId op;
  const char* name;
  int num_inputs;
  uint64_t dtypes;  // every dtype the spec allows a kernel to declare
  OutDType out;
};
const OpSpec& op_spec(DK_OpId op);
DK_OpId op_from_name(const std::string& name);  // InvalidArgument if unknown
// The spec allows `op` floating-point dtypes only (true division, pow, exp,
// ...): integer operands are computed in float32, as in PyTorch.
bool float_only(DK_OpId op);

// "No op": where an op id is optional (scalar_like for where's value
// operands). It is one past the last op (kNumOps), so it names no kernel and
// op_name() calls it "unknown-op"; never look it up in op_spec(). Defined in
// dispatch.cpp because kNumOps lives in ops.h, which includes this header.
extern const DK_OpId kNoOp;

// Dispatch counters, per op: kernel launches, and the calls for which the SDK
// inserted casts because the plugin did not declare the dtype (never silent).
struct DispatchCounts { uint64_t kernel = 0, cast_inserted = 0; };
DispatchCounts dispatch_counts(DK_OpId op);
void reset_dispatch_counts();
void count_cast_inserted(DK_OpId op);

// "float32[2] on cpu:0, None": tensors for error messages, an absent
// (optional) one as None. describe_call adds the outputs:
// "(a, b) -> (out)". Every message that lists a call's operands uses these.
std::string describe_tensors(const TensorImpl* const* ts, size_t n);

// The arguments of one kernel call on `dev`'s default stream: what a base
// kernel (launch) and a fused kernel (fused.cpp) are both handed.
DK_Kernel_Args kernel_args(Device& dev, int32_t op, const DK_TensorView* const* inputs,
                           int32_t num_inputs, const DK_TensorView* const* outputs,
                           int32_t num_outputs, const void* attrs);
std::string describe_call(std::initializer_list<const TensorImpl*> in,
                          std::initializer_list<const TensorImpl*> out);

// InvalidArgument naming `what` (an op name) and every operand unless all of
// `ts` are on one device. Op front-ends call it before they cast or launch
// anything, so a user error costs no work; launch() calls it as the guard that
// keeps a kernel from ever receiving another device's memory.
void check_same_device(const char* what, const TensorImpl* const* ts, size_t n);
inline void check_same_device(const char* what, std::initializer_list<const TensorImpl*> ts) {
  check_same_device(what, ts.begin(), ts.size());
}

// Launch `op` on the device of out[0] (or in[0]), on that device's default
// stream. Checks presence, declared dtype and devices first; the kernel
// validates the rest and its error comes back naming op, operands, device and
// plugin.
void launch(DK_OpId op, std::initializer_list<const TensorImpl*> in,
            std::initializer_list<const TensorImpl*> out, const void* attrs = nullptr);

}  // namespace dk
