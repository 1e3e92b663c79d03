// Tensor and op bindings: the per-call hot path. Each binding unpacks its
// arguments and calls straight into the op layer (ops.h); nothing is rebuilt
// per call.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include "bindings.h"

namespace dk {
namespace {

py::tuple to_tuple(const int64_t* d, int n) {
  py::tuple t(n);
  for (int i = 0; i < n; ++i) t[i] = py::int_(d[i]);
  return t;
}

DK_DType checked_dtype(int id) {
  if (id < 0 || id >= DK_DTYPE_COUNT_1_0) {
    throw Error(ErrorKind::DTypeMismatch, "unknown dtype id " + std::to_string(id));
  }
  return DK_DType(id);
}

// Host buffer of a C-contiguous numpy array whose item size matches `dt`.
py::buffer_info host_buffer(const py::array& a, DK_DType dt, bool writable) {
  if (!(a.flags() & py::array::c_style)) invalid_argument("host array must be C-contiguous");
  if (writable && !a.writeable()) invalid_argument("host array is read-only");
  if (size_t(a.itemsize()) != dtype_info(dt).itemsize) {
    invalid_argument("host array item size " + std::to_string(a.itemsize()) + " does not match " +
                     dtype_name(dt));
  }
  return a.request(writable);
}

// devicekit.autograd's add(a, b), called instead of the kernel when an operand
// is tracked. Heap-allocated and never freed: a py::object destroyed after the
// interpreter shuts down would crash at exit.
py::object& autograd_add_hook() {
  static py::object* hook = new py::object();
  return *hook;
}

// Returns a py::object, not a Tensor: the hook's result carries Python-side
// autograd attributes (grad_fn) in its __dict__, and only that very wrapper
// object has them.
py::object tensor_add(const Tensor& a, const Tensor& b, const py::object& a_obj,
                      const py::object& b_obj) {
  if ((a->requires_grad || b->requires_grad) && autograd_add_hook())
    return autograd_add_hook()(a_obj, b_obj);
  return py::cast(add(a, b));
}

py::object binary_add(const py::object& a_obj, const py::object& b) {
  const Tensor a = a_obj.cast<Tensor>();
  if (py::isinstance<TensorImpl>(b)) return tensor_add(a, b.cast<Tensor>(), a_obj, b);
  if (a->requires_grad && autograd_add_hook()) return autograd_add_hook()(a_obj, b);
  return py::cast(add(a, scalar_like(a, to_scalar(b), DK_OP_ADD)));
}

}  // namespace

void bind_tensor(py::module_& m) {
  py::class_<TensorImpl, std::shared_ptr<TensorImpl>>(m, "Tensor", py::dynamic_attr())
      .def_property_readonly("shape",
                             [](const TensorImpl& t) { return to_tuple(t.shape_data(), t.rank()); })
      .def_property_readonly(
          "strides", [](const TensorImpl& t) { return to_tuple(t.strides_data(), t.rank()); },
          "strides in elements, as in the device API (numpy's are in bytes)")
      .def_property_readonly("_dtype_id", [](const TensorImpl& t) { return int(t.dtype()); })
      .def_property_readonly("_offset", &TensorImpl::offset)
      .def_property_readonly("_storage_id",
                             [](const TensorImpl& t) { return size_t(t.storage().get()); })
      .def_property_readonly("device", &TensorImpl::device_ptr)
      .def_property_readonly("ndim", &TensorImpl::rank)
      .def("numel", &TensorImpl::numel)
      .def("dim", &TensorImpl::rank)
      .def("is_contiguous", &TensorImpl::is_contiguous)
      .def("contiguous", [](const Tensor& t) { return contiguous(t); })
      .def("_view", [](const Tensor& t, const Dims& shape, const Dims& strides,
                       int64_t offset) { return t->view(shape, strides, offset); })
      .def("_expand", [](const Tensor& t, const Dims& shape) { return expand(t, shape); })
      .def("_cast", [](const Tensor& t, int dt) { return cast(t, checked_dtype(dt)); })
      .def("_to_device",
           [](const Tensor& t, const std::shared_ptr<Device>& d) { return to_device(t, d); })
      .def("_copy_to_host",
           [](const Tensor& t, py::array out) {
             py::buffer_info b = host_buffer(out, t->dtype(), true);
             py::gil_scoped_release nogil;
             to_host(t, b.ptr, size_t(b.size) * size_t(b.itemsize));
           })
      .def_property(
          "_requires_grad", [](const TensorImpl& t) { return t.requires_grad; },
          [](TensorImpl& t, bool v) { t.requires_grad = v; },
          "the C++ tracking flag; use .requires_grad, which validates")
      .def("__add__", &binary_add, py::is_operator())
      .def("__radd__", &binary_add, py::is_operator());

  m.def(
      "add",
      [](const py::object& a, const py::object& b) {
        if (py::isinstance<TensorImpl>(a)) return binary_add(a, b);
        if (!py::isinstance<TensorImpl>(b))
          throw py::type_error("add: at least one operand must be a Tensor");
        return binary_add(b, a);
      },
      py::arg("a"), py::arg("b"));
  m.def(
      "_set_autograd_add_hook", [](py::object hook) { autograd_add_hook() = std::move(hook); },
      "install devicekit.autograd's add(a, b) for tracked operands");

  m.def(
      "from_host",
      [](const std::shared_ptr<Device>& dev, int dt, py::array a) {
        const DK_DType d = checked_dtype(dt);
        py::buffer_info b = host_buffer(a, d, false);
        // From the array, not buffer_info: the buffer protocol reports a 0-d
        // array as shape [1].
        Dims shape(a.shape(), a.shape() + a.ndim());
        py::gil_scoped_release nogil;
        return from_host(dev, d, shape, b.ptr);
      },
      "Copy a C-contiguous numpy array to a new tensor on `device` (bytes reinterpreted as dtype)");
  m.def("full",
        [](const std::shared_ptr<Device>& dev, const Dims& shape, int dt, const py::object& v) {
          return full(dev, shape, checked_dtype(dt), to_scalar(v));
        });
  m.def("empty", [](const std::shared_ptr<Device>& dev, const Dims& shape, int dt) {
    return TensorImpl::empty(dev, checked_dtype(dt), shape);
  });
  m.def("promote_types",
        [](int a, int b) { return int(promote_types(checked_dtype(a), checked_dtype(b))); });
  m.def("broadcast_shapes", &broadcast_shapes);
}

}  // namespace dk
