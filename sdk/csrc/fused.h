// The SDK side of fused kernels (device API 1.2; backward ops since 1.3): offer
// a composite-op call to the kernels a plugin registered for it, in table
// order, and launch the first whose `supports` accepts. Declining is not an
// error: the caller then runs the op's decomposition (devicekit/_fused.py
// counts which path ran).
#pragma once

#include <string>
#include <vector>

#include "tensor.h"

namespace dk {

constexpr int kNumFusedOps = DK_FUSED_OP_COUNT;

// What the SDK knows of each fused op from the spec (fused_ops_table.inc).
struct FusedOpSpec {
  DK_FusedOpId op;
  const char* name;
  int num_inputs, num_required_inputs;
  int num_outputs, num_required_outputs;  // optional outputs (backward ops) may be unwanted
  int backward_of;                        // the DK_FusedOpId this one is the backward of; -1
};
const FusedOpSpec& fused_op_spec(int op);
int fused_op_from_name(const std::string& name);  // -1 when unknown

// The fused ops' attribute structs and which op takes which, generated from
// the spec (fused_attrs.inc): DK_SDK_FUSED_ATTR_STRUCTS, _OP_ATTRS, _FIELDS.
#include "fused_attrs.inc"

// The op's attribute struct, one member per struct (the op picks which),
// each with its struct_size set.
struct FusedAttrs {
#define DK_X(type, member) type member{type##_STRUCT_SIZE};
  DK_SDK_FUSED_ATTR_STRUCTS(DK_X)
#undef DK_X
};

struct FusedHit {
  std::vector<Tensor> outs;  // one per output of the op; empty where not wanted
  const char* kernel = nullptr;  // DK_FusedKernel.name, owned by the plugin
  // When try_fused returns false: why, in a few words that are the same for
  // every call declined for the same reason (composite_stats counts them).
  std::string declined;
};

// `inputs` in the op's order, nullptr for an absent optional input; `want`
// one flag per output (empty: all), false for an optional output the caller
// does not need (its DK_Kernel_Args entry is then NULL).
// `attrs.sdpa.mask_kind` is filled in here from the mask. Returns false when
// the operands do not fit the op's signature (shapes, devices) or no kernel
// accepts; throws Error(Device) naming kernel, op, operands, device and plugin
// when the chosen kernel's launch fails.
bool try_fused(int op, const std::vector<Tensor>& inputs, FusedAttrs attrs,
               const std::vector<bool>& want, FusedHit* hit);

// Whether the plugin of `t`'s device registers any kernel for `op`.
bool has_fused_kernel(int op, const Tensor& t);

}  // namespace dk
