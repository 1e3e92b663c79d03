// Pieces shared by the pybind11 binding files.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdio>
#include <exception>
#include <string>

#include "ops.h"

// A Tensor argument never accepts None. pybind11 turns None into an empty
// holder for any shared_ptr argument, and every front-end dereferences its
// tensors, so `ops.gather(x, 0, None)` used to crash the process. With this
// caster None fails overload resolution like any other non-tensor: a
// TypeError naming the call and the argument types it takes. (Optional
// tensors are taken as py::object and checked where they are used.)
namespace pybind11::detail {
template <> class type_caster<dk::Tensor>
    : public copyable_holder_caster<dk::TensorImpl, dk::Tensor> {
 public:
  bool load(handle src, bool convert) {
    return !src.is_none() && copyable_holder_caster<dk::TensorImpl, dk::Tensor>::load(src, convert);
  }
};
}  // namespace pybind11::detail

namespace dk {
namespace py = pybind11;

using DeviceClass = py::class_<Device, std::shared_ptr<Device>>;
// runtime_py.cpp: Buffer, Stream, Event, and the Device methods that use them.
void bind_runtime(py::module_& m, DeviceClass& device_cls);
void bind_tensor(py::module_& m);   // tensor_py.cpp: Tensor, transfers, add
void bind_ops(py::module_& m);      // ops_py.cpp: the generic op paths
void bind_fused(py::module_& m);    // fused_py.cpp: fused-kernel dispatch
void bind_raw(py::module_& m);      // raw_py.cpp: direct kernel calls (conformance)
void bind_collectives(py::module_& m);  // collectives_py.cpp: communicators, collectives
void bind_trace(py::module_& m);        // trace_py.cpp: the trace recorder (devicekit.trace)
void bind_graphs(py::module_& m);       // graphs_py.cpp: capture and replay
py::list fused_kernel_info(const Plugin& p);  // fused_py.cpp: [{op, name}] in table order

// A Python bool/int/float as a DK_Scalar; TypeError for anything else.
DK_Scalar to_scalar(const py::handle& v);

// For the binding classes' destructors: a destructor cannot raise, so a
// failed release is reported on stderr ("devicekit: <what> failed: ...")
// instead of being swallowed. Nothing is released in a forked child: it does
// not own the parent's device objects (device.h).
template <class Release>
void release_in_destructor(const Device& dev, const char* what, Release release) {
  if (dev.stale_after_fork()) return;
  try {
    release();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "devicekit: %s failed: %s\n", what, e.what());
  }
}

// The error for a call that needs an optional part of the device API the
// plugin does not have: NotImplemented, naming the plugin, the device, the
// part, the extension struct and the plugin's API version; `hint` (may be
// empty) says what to do instead.
[[noreturn]] void part_not_implemented(const Device& d, const char* part, const char* extension,
                                       const std::string& hint = "");

}  // namespace dk
