// Tensors: a device storage plus view metadata (offset, shape, strides in
// elements). Views share storage; nothing here touches device memory except
// through the plugin.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "device.h"

namespace dk {

struct DTypeInfo {
  const char* name;
  size_t itemsize;
  bool is_float, is_signed;
};
const DTypeInfo& dtype_info(DK_DType dt);
DK_DType dtype_from_name(const std::string& name);  // throws DTypeMismatch
inline const char* dtype_name(DK_DType dt) { return dtype_info(dt).name; }
std::string dtype_mask_names(uint64_t mask);         // "float32, int32"

// A block of device memory owned by the caching allocator of `device`.
struct Storage {
  Storage(std::shared_ptr<Device> dev, size_t nbytes);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  std::shared_ptr<Device> device;
  void* ptr = nullptr;
  size_t nbytes = 0, block_size = 0;
  // The device epoch of the last kernel that wrote this storage (0: none);
  // see Device::check_not_failed.
  std::atomic<uint64_t> written_epoch{0};
};

using Dims = std::vector<int64_t>;

class TensorImpl {
 public:
  // New contiguous tensor (uninitialised device memory).
  static std::shared_ptr<TensorImpl> empty(const std::shared_ptr<Device>& dev, DK_DType dt,
                                           const Dims& shape);
  // Same, from a raw shape array: the op hot path builds no std::vector.
  static std::shared_ptr<TensorImpl> empty(const std::shared_ptr<Device>& dev, DK_DType dt,
                                           int rank, const int64_t* shape);
  // View over the same storage.
  std::shared_ptr<TensorImpl> view(const Dims& shape, const Dims& strides, int64_t offset) const;

  DK_DType dtype() const { return dtype_; }
  int rank() const { return rank_; }
  const int64_t* shape_data() const { return shape_.data(); }
  const int64_t* strides_data() const { return strides_.data(); }
  Dims shape() const { return Dims(shape_.begin(), shape_.begin() + rank_); }
  Dims strides() const { return Dims(strides_.begin(), strides_.begin() + rank_); }
  int64_t offset() const { return offset_; }
  int64_t numel() const;
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  Device& device() const { return *storage_->device; }
  const std::shared_ptr<Device>& device_ptr() const { return storage_->device; }
  void* data() const;  // device pointer to element [0,...,0] (never dereferenced)
  DK_TensorView as_view() const;  // points into this object: keep it alive

  std::string describe() const;  // "float32[2, 3] on cpu:0"

  // Set on tensors autograd tracks (leaves with requires_grad, and results
  // recorded on the tape). The add hot path reads only this byte to decide
  // whether a call must go to the Python autograd hook. New tensors and views
  // made in C++ start untracked; devicekit.autograd sets it.
  bool requires_grad = false;

 private:
  std::shared_ptr<Storage> storage_;
  int64_t offset_ = 0;  // in elements
  DK_DType dtype_ = DK_DTYPE_FLOAT32;
  int rank_ = 0;
  std::array<int64_t, DK_MAX_RANK> shape_{}, strides_{};
};

using Tensor = std::shared_ptr<TensorImpl>;

// Row-major strides in elements, a zero-size dimension counted as size 1: the
// rule device_api.h states for views with zero elements. The pointer form
// writes `rank` strides without allocating (TensorImpl::empty, the hot path).
void contiguous_strides(const int64_t* shape, int rank, int64_t* strides);
Dims contiguous_strides(const Dims& shape);
// Element count of `shape`, refused with an Overflow error (naming `what`)
// when the count or the byte size for `itemsize` exceeds int64, zero
// dimensions counted as 1 (as numpy does).
int64_t checked_numel(const int64_t* shape, int rank, size_t itemsize, const char* what);
std::string dims_str(const Dims& d);

}  // namespace dk
