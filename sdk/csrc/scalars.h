// Python scalars as operands: the dtype a scalar takes beside a tensor, and a
// small per-device cache of the 0-d constants that hold them, so that the
// scalars a model repeats on every step (0.5, 1e-5, an optimizer's betas) cost
// no allocation and no `fill` launch after the first.
#pragma once

#include "dispatch.h"

namespace dk {

// A Python scalar as a 0-d tensor beside `a` in `op`, typed the way PyTorch
// types "weak" scalars: it takes a's dtype unless it is a float and a is not.
// An int that a's integer dtype cannot hold is never wrapped (see
// scalars.cpp). `op` kNoOp: no op (where's value operands).
Tensor scalar_like(const Tensor& a, const DK_Scalar& s, DK_OpId op);
// A 0-d tensor of `s` in `dt` on `dev`, from a small per-device cache of
// constants (filled once, then shared: no op writes its inputs). Never hand
// one to Python: it is shared by every op that uses the same scalar.
Tensor constant(const std::shared_ptr<Device>& dev, DK_DType dt, const DK_Scalar& s);
// Releases `dev`'s cached constants (Device::empty_cache).
void drop_constants(const Device* dev);

}  // namespace dk
