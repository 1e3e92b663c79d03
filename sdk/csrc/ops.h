// The base-op front-ends (ops.cpp): what the SDK does for a base-op call
// before and after one kernel launch. Also the umbrella header of the op
// layer: including it gives its parts, each in a header of its own:
//   dispatch.h   op table, dispatch counters, launch()
//   promotion.h  type promotion, broadcasting, axes, materialisation
//   scalars.h    Python scalars as operands, the constants cache
//   transfer.h   host <-> device copies
#pragma once

#include "tensor.h"

namespace dk {

// Base ops this SDK knows (the latest minor of its header); a plugin built
// for an older minor has a shorter table and the rest read as not implemented.
constexpr int kNumOps = DK_OP_COUNT;

}  // namespace dk

#include "dispatch.h"
#include "promotion.h"
#include "scalars.h"
#include "transfer.h"

namespace dk {

Tensor full(const std::shared_ptr<Device>& dev, const Dims& shape, DK_DType dt,
            const DK_Scalar& value);
// add has a fast path of its own (same device, dtype and shape): the most
// frequent op in models; anything else takes binary()'s generic path.
Tensor add(const Tensor& a, const Tensor& b);
// The tensors' elements one after another in a new 1-D tensor (same device
// and dtype): one copy launch per non-empty tensor (what cat's iota and
// scatter_add per piece cost several times over). Not differentiable.
Tensor pack(const std::vector<Tensor>& ts);
// The tensors joined along `dim`: same device and dtype, every other dim
// equal (the caller checks and promotes). One copy launch per non-empty
// piece, into its slice of the output (DK_OP_COPY takes strided outputs on
// every plugin): bit-exact, -0.0 and NaN payloads included. Not differentiable.
Tensor cat(const std::vector<Tensor>& ts, int dim);
// A new tensor of `shape` (g's dtype) holding g at [start, start +
// g.shape[dim]) along `dim` and `fill` elsewhere: the gradient of a narrow
// view, as one fill and one copy into the slice.
Tensor narrow_into(const Tensor& g, const Dims& shape, int dim, int64_t start,
                   const DK_Scalar& fill);
// Writes `src` into the existing view `dst` (strided, any offset): src is cast
// to dst's dtype and broadcast to its shape, then one copy launch whose output
// is dst itself, so every view sharing dst's storage sees the new values (the
// write-through that in-place ops of framework bridges need). A src that
// shares dst's storage is copied out first, so overlapping views are safe.
// Not differentiable.
void copy_into(const Tensor& dst, const Tensor& src);
// dst = op(a, b) for an arithmetic binary op, written into the existing view
// dst (the in-place ops of framework bridges: p.mul_(s), p.add_(u)). When a,
// b and dst share one dtype the plugin's kernel takes, dst is dense and has
// the broadcast shape, and dst overlaps no input except by being a itself
// with DK_KERNEL_CAP_INPLACE declared (or not at all), the kernel writes dst
// directly: one launch, no temporary, no copy. Otherwise it is binary() and
// copy_into(): the same values, one more launch. Not differentiable.
void binary_into(DK_OpId op, const Tensor& dst, const Tensor& a, const Tensor& b);

// Generic paths for the 1.1 ops: type promotion, broadcasting, dtype fallback
// through casts, then one launch.
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

}  // namespace dk
