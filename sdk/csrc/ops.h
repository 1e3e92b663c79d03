// The SDK side of the base operators: type promotion, broadcasting,
// materialisation of whatever a kernel did not declare it accepts, and the
// launch of one kernel with its errors turned into dk::Error.
#pragma once

#include "tensor.h"

namespace dk {

// Base ops this SDK knows (the latest minor of its header); a plugin built
// for an older minor has a shorter table and the rest read as not implemented.
constexpr int kNumOps = DK_OP_COUNT_1_1;

const char* op_name(DK_OpId op);

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
// Python-scalar operand, typed the way PyTorch types "weak" scalars.
Tensor add_scalar(const Tensor& a, const DK_Scalar& s);

// Host transfers on the default stream. Both wait for completion, so the host
// buffer is free to reuse on return, and report any earlier async error.
Tensor from_host(const std::shared_ptr<Device>& dev, DK_DType dt, const Dims& shape,
                 const void* host);
void to_host(const Tensor& t, void* host, size_t nbytes);  // t: any view
Tensor to_device(const Tensor& t, const std::shared_ptr<Device>& dev);

}  // namespace dk
