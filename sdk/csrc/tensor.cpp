#include "tensor.h"

#include <algorithm>

namespace dk {

namespace {
// Indexed by DK_DType; order fixed by the header (append-only).
const DTypeInfo kDTypes[DK_DTYPE_COUNT_1_0] = {
    {"float32", 4, true, true}, {"float16", 2, true, true}, {"bfloat16", 2, true, true},
    {"float64", 8, true, true}, {"int8", 1, false, true},   {"int32", 4, false, true},
    {"int64", 8, false, true},  {"uint8", 1, false, false}, {"bool", 1, false, false},
};
}  // namespace

const DTypeInfo& dtype_info(DK_DType dt) {
  if (dt < 0 || dt >= DK_DTYPE_COUNT_1_0) {
    throw Error(ErrorKind::DTypeMismatch, "unknown dtype id " + std::to_string(int(dt)));
  }
  return kDTypes[dt];
}

DK_DType dtype_from_name(const std::string& name) {
  for (int i = 0; i < DK_DTYPE_COUNT_1_0; ++i) {
    if (name == kDTypes[i].name) return DK_DType(i);
  }
  throw Error(ErrorKind::DTypeMismatch, "unsupported dtype '" + name + "'; DeviceKit supports " +
                                            dtype_mask_names(DK_DTYPE_MASK_ALL_1_0));
}

std::string dtype_mask_names(uint64_t mask) {
  std::string out;
  for (int i = 0; i < DK_DTYPE_COUNT_1_0; ++i) {
    if (mask & DK_DTYPE_BIT(i)) out += (out.empty() ? "" : ", ") + std::string(kDTypes[i].name);
  }
  return out.empty() ? "none" : out;
}

Storage::Storage(std::shared_ptr<Device> dev, size_t n) : device(std::move(dev)), nbytes(n) {
  ptr = device->allocate(n, &block_size);
}

Storage::~Storage() { device->release(ptr, block_size); }

int64_t checked_numel(const int64_t* shape, int rank, size_t itemsize, const char* what) {
  // Zero dimensions count as 1 here, as in the strides (device_api.h) and in
  // numpy: a [0, 2**62] float32 tensor is refused too, so that no stride or
  // span computed from a valid shape can overflow.
  int64_t span = 1, bytes = 0;
  bool overflow = false, empty = false;
  for (int i = 0; i < rank; ++i) {
    if (shape[i] < 0)
      invalid_argument(std::string(what) + ": negative dimension in shape " +
                       dims_str(Dims(shape, shape + rank)));
    empty |= shape[i] == 0;
    overflow |= __builtin_mul_overflow(span, shape[i] > 0 ? shape[i] : 1, &span);
  }
  overflow |= __builtin_mul_overflow(span, int64_t(itemsize), &bytes);
  if (overflow) {
    throw Error(ErrorKind::Overflow,
                std::string(what) + ": shape " + dims_str(Dims(shape, shape + rank)) +
                    " has more elements (or bytes, at " + std::to_string(itemsize) +
                    " per element) than fit in int64 (max 9223372036854775807)");
  }
  return empty ? 0 : span;
}

void contiguous_strides(const int64_t* shape, int rank, int64_t* strides) {
  int64_t acc = 1;
  for (int i = rank; i-- > 0;) {
    strides[i] = acc;
    acc *= shape[i] > 0 ? shape[i] : 1;
  }
}

Dims contiguous_strides(const Dims& shape) {
  Dims s(shape.size());
  contiguous_strides(shape.data(), int(shape.size()), s.data());
  return s;
}

std::string dims_str(const Dims& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

Tensor TensorImpl::empty(const std::shared_ptr<Device>& dev, DK_DType dt, const Dims& shape) {
  if (shape.size() > DK_MAX_RANK) {
    invalid_argument("rank " + std::to_string(shape.size()) + " exceeds DK_MAX_RANK (" +
                     std::to_string(DK_MAX_RANK) + ")");
  }
  return empty(dev, dt, int(shape.size()), shape.data());
}

Tensor TensorImpl::empty(const std::shared_ptr<Device>& dev, DK_DType dt, int rank,
                         const int64_t* shape) {
  // Checked before anything is allocated: a wrapped product would allocate
  // too little and let kernels run past the end.
  const int64_t n = checked_numel(shape, rank, dtype_info(dt).itemsize, "new tensor");
  auto t = std::make_shared<TensorImpl>();
  t->storage_ = std::make_shared<Storage>(dev, size_t(n) * dtype_info(dt).itemsize);
  t->dtype_ = dt;
  t->rank_ = rank;
  std::copy(shape, shape + rank, t->shape_.begin());
  contiguous_strides(shape, rank, t->strides_.data());
  return t;
}

Tensor TensorImpl::view(const Dims& shape, const Dims& strides, int64_t offset) const {
  if (shape.size() != strides.size() || shape.size() > DK_MAX_RANK) {
    invalid_argument("view of rank " + std::to_string(shape.size()) + " with " +
                     std::to_string(strides.size()) + " strides (max rank " +
                     std::to_string(DK_MAX_RANK) + ")");
  }
  // Bounds: the furthest element must lie inside the storage. This is what
  // keeps a bad view from becoming an out-of-bounds kernel access.
  const int64_t item = int64_t(dtype_info(dtype_).itemsize);
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0 || strides[i] < 0) {
      invalid_argument("view with negative shape or stride: shape " + dims_str(shape) +
                       " strides " + dims_str(strides));
    }
  }
  const int64_t n = checked_numel(shape.data(), int(shape.size()), size_t(item), "view");
  int64_t last = offset, end = 0, span = 0;
  bool overflow = false;
  for (size_t i = 0; i < shape.size() && n > 0; ++i) {
    int64_t reach = 0;
    overflow |= __builtin_mul_overflow(shape[i] - 1, strides[i], &reach);
    overflow |= __builtin_add_overflow(last, reach, &last);
  }
  if (n > 0) {
    overflow |= __builtin_add_overflow(last, 1, &end);
    overflow |= __builtin_mul_overflow(end, item, &span);
  }
  if (n > 0 && (overflow || offset < 0 || span > int64_t(storage_->nbytes))) {
    invalid_argument("view shape " + dims_str(shape) + " strides " + dims_str(strides) +
                     " offset " + std::to_string(offset) + " reaches outside its storage of " +
                     std::to_string(storage_->nbytes) + " bytes");
  }
  auto t = std::make_shared<TensorImpl>();
  t->storage_ = storage_;
  t->offset_ = offset;
  t->dtype_ = dtype_;
  t->rank_ = int(shape.size());
  for (int i = 0; i < t->rank_; ++i) {
    t->shape_[i] = shape[i];
    t->strides_[i] = strides[i];
  }
  return t;
}

int64_t TensorImpl::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= shape_[i];
  return n;
}

bool TensorImpl::is_contiguous() const {
  int64_t acc = 1;
  for (int i = rank_; i-- > 0;) {
    if (shape_[i] == 0) return true;
    if (shape_[i] != 1 && strides_[i] != acc) return false;
    acc *= shape_[i];
  }
  return true;
}

void* TensorImpl::data() const {
  if (storage_->ptr == nullptr) return nullptr;
  // Byte-offset arithmetic on a device pointer, never a dereference.
  return static_cast<char*>(storage_->ptr) + offset_ * int64_t(dtype_info(dtype_).itemsize);
}

DK_TensorView TensorImpl::as_view() const {
  DK_TensorView v{};
  v.struct_size = DK_TensorView_STRUCT_SIZE;
  v.data = data();
  v.dtype = dtype_;
  v.rank = rank_;
  v.shape = rank_ ? shape_.data() : nullptr;
  v.strides = rank_ ? strides_.data() : nullptr;
  return v;
}

std::string TensorImpl::describe() const {
  return std::string(dtype_name(dtype_)) + dims_str(shape()) + " on " + device().name();
}

}  // namespace dk
