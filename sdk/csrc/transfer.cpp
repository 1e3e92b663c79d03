// Host transfers: see transfer.h.
#include "transfer.h"

#include <vector>

#include "promotion.h"  // contiguous

namespace dk {

namespace {

void memcpy_sync(Device& dev, DK_CopyKind kind, void* dst, const void* src, size_t n) {
  if (n == 0) return;
  // Enqueued on the default stream so it is ordered after the kernels that
  // produced (or last used) the device memory; then waited for, because the
  // host buffer belongs to the caller.
  dev.memcpy(kind, dst, src, n, dev.default_stream());
  dev.synchronize(dev.default_stream());
}

}  // namespace

Tensor from_host(const std::shared_ptr<Device>& dev, DK_DType dt, const Dims& shape,
                 const void* host) {
  Tensor t = TensorImpl::empty(dev, dt, shape);
  memcpy_sync(*dev, DK_COPY_HOST_TO_DEVICE, t->data(), host,
              size_t(t->numel()) * dtype_info(dt).itemsize);
  return t;
}

void to_host(const Tensor& t, void* host, size_t nbytes) {
  Device& dev = t->device();
  if (dev.has_failures()) dev.check_not_failed(t->storage()->written_epoch.load(), t->describe());
  Tensor c = contiguous(t);
  const size_t need = size_t(c->numel()) * dtype_info(c->dtype()).itemsize;
  if (nbytes != need) {
    invalid_argument("to_host: host buffer has " + std::to_string(nbytes) + " bytes, " +
                     t->describe() + " needs " + std::to_string(need));
  }
  memcpy_sync(c->device(), DK_COPY_DEVICE_TO_HOST, host, c->data(), need);
}

Tensor to_device(const Tensor& t, const std::shared_ptr<Device>& dev) {
  if (&t->device() == dev.get()) return t;
  // Across plugins there is no shared address space: stage through the host.
  std::vector<char> staging(size_t(t->numel()) * dtype_info(t->dtype()).itemsize);
  to_host(t, staging.data(), staging.size());
  return from_host(dev, t->dtype(), t->shape(), staging.data());
}

}  // namespace dk
