// Host <-> device transfers of tensors, on the device's default stream so
// that they are ordered after the kernels that produced the data.
#pragma once

#include "tensor.h"

namespace dk {

// Both wait for completion, so the host buffer is free to reuse on return, and
// report any earlier async error.
Tensor from_host(const std::shared_ptr<Device>& dev, DK_DType dt, const Dims& shape,
                 const void* host);
void to_host(const Tensor& t, void* host, size_t nbytes);  // t: any view
// Self when already on `dev`; across plugins, staged through the host.
Tensor to_device(const Tensor& t, const std::shared_ptr<Device>& dev);

}  // namespace dk
