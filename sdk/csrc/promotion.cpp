// Promotion, broadcasting, axes and materialisation: see promotion.h.
#include "promotion.h"

#include <algorithm>

namespace dk {

DK_DType promote_types(DK_DType a, DK_DType b) {
  if (a == b) return a;
  if (a == DK_DTYPE_BOOL) return b;
  if (b == DK_DTYPE_BOOL) return a;
  const auto& ia = dtype_info(a);
  const auto& ib = dtype_info(b);
  if (ia.is_float != ib.is_float) return ia.is_float ? a : b;
  // Rank within a kind; float16 and bfloat16 tie and meet in float32, as do
  // int8 and uint8 in int32 (the smallest set member holding both; DeviceKit
  // has no int16).
  auto rank = [](DK_DType d) {
    switch (d) {
      case DK_DTYPE_UINT8:
      case DK_DTYPE_INT8: return 1;
      case DK_DTYPE_INT32: return 2;
      case DK_DTYPE_INT64: return 3;
      case DK_DTYPE_FLOAT16:
      case DK_DTYPE_BFLOAT16: return 4;
      case DK_DTYPE_FLOAT32: return 5;
      case DK_DTYPE_FLOAT64: return 6;
      default: return 0;
    }
  };
  const int ra = rank(a), rb = rank(b);
  if (ra == rb) return ia.is_float ? DK_DTYPE_FLOAT32 : DK_DTYPE_INT32;
  return ra > rb ? a : b;
}

Dims broadcast_shapes(const Dims& a, const Dims& b) {
  const size_t r = std::max(a.size(), b.size());
  Dims out(r);
  for (size_t i = 0; i < r; ++i) {
    const int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    const int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1) {
      invalid_argument("shapes " + dims_str(a) + " and " + dims_str(b) +
                       " cannot be broadcast together (dimension " + std::to_string(i) + ": " +
                       std::to_string(da) + " vs " + std::to_string(db) + ")");
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

namespace {

// The first dimension of `t` that keeps it from broadcasting to `shape`: -1
// when none does, t's rank when t has more dimensions than `shape`.
int broadcast_conflict(const Tensor& t, const Dims& shape) {
  const int r = int(shape.size()), tr = t->rank();
  if (tr > r) return tr;
  for (int i = 0; i < tr; ++i) {
    const int64_t have = t->shape_data()[i];
    if (have != shape[r - tr + i] && have != 1) return i;
  }
  return -1;
}

}  // namespace

bool broadcasts_to(const Tensor& t, const Dims& shape) { return broadcast_conflict(t, shape) < 0; }

Tensor expand(const Tensor& t, const Dims& shape) {
  const int r = int(shape.size()), tr = t->rank();
  const int bad = broadcast_conflict(t, shape);
  if (bad == tr) {
    invalid_argument("cannot expand " + t->describe() + " to fewer dimensions " + dims_str(shape));
  }
  if (bad >= 0) {
    invalid_argument("cannot expand " + t->describe() + " to " + dims_str(shape) + ": dimension " +
                     std::to_string(bad) + " is " + std::to_string(t->shape_data()[bad]) +
                     ", not 1");
  }
  Dims strides(r, 0);  // 0 for the new and the stretched dimensions
  for (int i = 0; i < tr; ++i) {
    const int o = r - tr + i;
    if (t->shape_data()[i] == shape[o]) strides[o] = t->strides_data()[i];
  }
  return t->view(shape, strides, t->offset());
}

int64_t wrap_axis(int64_t axis, int rank, bool scalar_as_1d) {
  const int64_t n = scalar_as_1d ? std::max(rank, 1) : rank;
  const int64_t a = axis < 0 ? axis + n : axis;
  return (a >= 0 && a < std::max(rank, 1)) ? a : -1;
}

uint32_t normalise_axis(int axis, int rank, const char* op) {
  const int64_t a = wrap_axis(axis, rank);
  if (a < 0) {
    invalid_argument(std::string(op) + ": axis " + std::to_string(axis) +
                     " is out of range for rank " + std::to_string(rank));
  }
  return uint32_t(a);
}

Tensor contiguous(const Tensor& t) {
  if (t->is_contiguous()) return t;
  Tensor out = TensorImpl::empty(t->device_ptr(), t->dtype(), t->rank(), t->shape_data());
  if (out->numel() > 0) launch(DK_OP_COPY, {t.get()}, {out.get()});
  return out;
}

Tensor prepare_input(const Tensor& t, const Dims& shape, uint32_t caps) {
  Tensor v = t;
  const bool same_shape =
      t->rank() == int(shape.size()) && std::equal(shape.begin(), shape.end(), t->shape_data());
  if (!same_shape && !(caps & DK_KERNEL_CAP_BROADCAST)) v = expand(t, shape);
  if (!(caps & DK_KERNEL_CAP_STRIDED)) v = contiguous(v);
  return v;
}

Tensor cast(const Tensor& t, DK_DType dt) {
  if (t->dtype() == dt) return t;
  Tensor src = contiguous(t);
  Tensor out = TensorImpl::empty(t->device_ptr(), dt, t->rank(), t->shape_data());
  if (out->numel() > 0) launch(DK_OP_CAST, {src.get()}, {out.get()});
  return out;
}

}  // namespace dk
