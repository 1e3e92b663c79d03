// The SDK side of the base operators: type promotion, broadcasting,
// materialisation of whatever a kernel did not declare it accepts, and the
// launch of one kernel with its errors turned into dk::Error.
#pragma once

#include "tensor.h"

namespace dk {

// Base ops this SDK knows (the latest minor of its header); a plugin built
// for an older minor has a shorter table and the rest read as not implemented.
constexpr int kNumOps = DK_OP_COUNT;

const char* op_name(DK_OpId op);

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

// Dispatch counters, per op: kernel launches, and the calls for which the SDK
// inserted casts because the plugin did not declare the dtype (never silent).
struct DispatchCounts {
  uint64_t kernel = 0, cast_inserted = 0;
};
DispatchCounts dispatch_counts(DK_OpId op);
void reset_dispatch_counts();
void count_cast_inserted(DK_OpId op);

// Make `t` acceptable to a kernel with capability bits `caps`: broadcast to
// `shape` and densify, unless the plugin declared it copes.
Tensor prepare_input(const Tensor& t, const Dims& shape, uint32_t caps);

// Launch `op` on the device of out[0] (or in[0]), on that device's default
// stream. Checks presence and declared dtype first; the kernel validates the
// rest and its error comes back naming op, operands, device and plugin.
void launch(DK_OpId op, std::initializer_list<const TensorImpl*> in,
            std::initializer_list<const TensorImpl*> out, const void* attrs = nullptr);

DK_DType promote_types(DK_DType a, DK_DType b);
Dims broadcast_shapes(const Dims& a, const Dims& b);

Tensor contiguous(const Tensor& t);             // self when already contiguous
Tensor expand(const Tensor& t, const Dims& shape);  // broadcast view (stride 0)
Tensor cast(const Tensor& t, DK_DType dt);       // self when dt matches
Tensor full(const std::shared_ptr<Device>& dev, const Dims& shape, DK_DType dt,
            const DK_Scalar& value);
Tensor add(const Tensor& a, const Tensor& b);
// A Python scalar as a 0-d tensor beside `a` in `op`, typed the way PyTorch
// types "weak" scalars: it takes a's dtype unless it is a float and a is not.
// An int that a's integer dtype cannot hold is never wrapped (see ops.cpp).
// `op` DK_OP_COUNT_1_1: no op (where's value operands).
Tensor scalar_like(const Tensor& a, const DK_Scalar& s, DK_OpId op);
// A 0-d tensor of `s` in `dt` on `dev`, from a small per-device cache of
// constants (filled once, then shared: no op writes its inputs). Never hand
// one to Python: it is shared by every op that uses the same scalar.
Tensor constant(const std::shared_ptr<Device>& dev, DK_DType dt, const DK_Scalar& s);
// The tensors' elements one after another in a new 1-D tensor (same device
// and dtype): one copy launch per non-empty tensor (what cat's iota and
// scatter_add per piece cost several times over). Not differentiable.
Tensor pack(const std::vector<Tensor>& ts);
// Releases `dev`'s cached constants (Device::empty_cache).
void drop_constants(const Device* dev);

// Generic paths for the 1.1 ops (ops_generic.cpp): type promotion,
// broadcasting, dtype fallback through casts, then one launch.
Tensor unary(DK_OpId op, const Tensor& x);
Tensor binary(DK_OpId op, const Tensor& a, const Tensor& b);  // arith, compare, logical
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor reduce(DK_OpId op, const Tensor& x, uint32_t axes);     // keeps reduced dims (size 1)
Tensor argmax(const Tensor& x, int axis);                      // keeps axis (size 1)
Tensor cumsum(const Tensor& x, int axis);
Tensor iota(const std::shared_ptr<Device>& dev, const Dims& shape, DK_DType dt, int axis,
            const DK_Scalar& start, const DK_Scalar& step);
Tensor gather(const Tensor& x, int axis, const Tensor& index);
Tensor scatter_add(const Tensor& x, int axis, const Tensor& index, const Tensor& src);
Tensor matmul(const Tensor& a, const Tensor& b);  // [B..., M, K] @ [B..., K, N], equal B
Tensor random(DK_OpId op, const std::shared_ptr<Device>& dev, const Dims& shape, DK_DType dt,
              uint64_t seed, uint64_t offset);

// Host transfers on the default stream. Both wait for completion, so the host
// buffer is free to reuse on return, and report any earlier async error.
Tensor from_host(const std::shared_ptr<Device>& dev, DK_DType dt, const Dims& shape,
                 const void* host);
void to_host(const Tensor& t, void* host, size_t nbytes);  // t: any view
Tensor to_device(const Tensor& t, const std::shared_ptr<Device>& dev);

}  // namespace dk
