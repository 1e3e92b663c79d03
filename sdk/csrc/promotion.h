// What the SDK does to operands before a kernel sees them, once, so that no
// plugin has to: type promotion, broadcasting (numpy's right-aligned rule),
// axis normalisation, and materialisation of what a kernel did not declare it
// accepts (broadcast or strided views, other dtypes).
#pragma once

#include "dispatch.h"

namespace dk {

DK_DType promote_types(DK_DType a, DK_DType b);
Dims broadcast_shapes(const Dims& a, const Dims& b);  // InvalidArgument naming both shapes
// Whether `t` broadcasts to `shape` without changing it (no error): what the
// fused dispatcher asks before it offers a call to a kernel.
bool broadcasts_to(const Tensor& t, const Dims& shape);

// `axis` counted from the front (a negative one counts from the end), or -1
// when a tensor of `rank` has no such axis. A 0-d tensor has the one axis 0,
// as in numpy; `scalar_as_1d` also lets -1 name it, as PyTorch's dim wrapping
// does (devicekit.nn follows PyTorch, devicekit.ops numpy). Every axis the SDK
// takes, in C++ or Python (_core.normalize_axes), goes through here.
int64_t wrap_axis(int64_t axis, int rank, bool scalar_as_1d = false);
// wrap_axis for the op front-ends: InvalidArgument naming `op` when out of range.
uint32_t normalise_axis(int axis, int rank, const char* op);

Tensor contiguous(const Tensor& t);                 // self when already contiguous
Tensor expand(const Tensor& t, const Dims& shape);  // broadcast view (stride 0)
Tensor cast(const Tensor& t, DK_DType dt);          // self when dt matches

// Make `t` acceptable to a kernel with capability bits `caps`: broadcast to
// `shape` and densify, unless the plugin declared it copes.
Tensor prepare_input(const Tensor& t, const Dims& shape, uint32_t caps);

}  // namespace dk
