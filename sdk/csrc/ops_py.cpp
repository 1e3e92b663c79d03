// Bindings of the op front-ends (ops.cpp). Python's devicekit.ops
// wraps these with the PyTorch-style signatures; ops are passed by DK_OpId.
#include <pybind11/stl.h>

#include <algorithm>
#include <vector>

#include "bindings.h"

namespace dk {
namespace {

DK_OpId checked_op(int op) {
  if (op < 0 || op >= kNumOps) invalid_argument("unknown op id " + std::to_string(op));
  return DK_OpId(op);
}

DK_DType checked_dt(int dt) {
  if (dt < 0 || dt >= DK_DTYPE_COUNT_1_0)
    invalid_argument("unknown dtype id " + std::to_string(dt));
  return DK_DType(dt);
}

// A Tensor, or a Python scalar typed against the other operand of `op`.
Tensor operand(const py::object& v, const Tensor& other, DK_OpId op) {
  if (py::isinstance<TensorImpl>(v)) return v.cast<Tensor>();
  return scalar_like(other, to_scalar(v), op);
}

// devicekit.ops' `axis` (None for all, an int, or an iterable of ints) as a
// list of axes counted from the front, by wrap_axis's rule. The errors and
// their words are those devicekit.ops has always raised; devicekit.nn words
// its own from IndexOutOfRangeError.
py::list normalize_axes(const py::object& axis, int ndim, bool scalar_as_1d) {
  py::list out;
  if (axis.is_none()) {
    for (int i = 0; i < ndim; ++i) out.append(i);
    return out;
  }
  // numbers.Integral, as in Python: numpy integers and bool are one axis too.
  // Kept for the life of the process: a py::object destroyed after the
  // interpreter shuts down would crash at exit.
  static const py::handle integral =
      py::object(py::module_::import("numbers").attr("Integral")).release();
  std::vector<py::object> items;
  if (py::isinstance(axis, integral)) {
    items.push_back(axis);
  } else {
    for (py::handle h : py::iter(axis)) items.push_back(py::reinterpret_borrow<py::object>(h));
  }
  std::vector<int64_t> seen;
  for (const py::object& item : items) {
    py::object i = py::reinterpret_steal<py::object>(PyNumber_Index(item.ptr()));
    if (!i) throw py::error_already_set();
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(i.ptr(), &overflow);
    const int64_t a = overflow ? -1 : wrap_axis(v, ndim, scalar_as_1d);
    if (a < 0) {
      throw Error(ErrorKind::IndexOutOfRange, "axis " + std::string(py::str(item)) +
                                                  " is out of range for a tensor of rank " +
                                                  std::to_string(ndim));
    }
    seen.push_back(a);
    out.append(a);
  }
  std::sort(seen.begin(), seen.end());
  if (std::adjacent_find(seen.begin(), seen.end()) != seen.end()) {
    invalid_argument("repeated axis in " + std::string(py::str(axis)));
  }
  return out;
}

}  // namespace

void bind_ops(py::module_& m) {
  py::list names;
  for (int i = 0; i < kNumOps; ++i) names.append(op_name(DK_OpId(i)));
  m.attr("OP_NAMES") = names;  // indexed by DK_OpId

  m.def("unary", [](int op, const Tensor& x) { return unary(checked_op(op), x); });
  m.def("binary", [](int op, const py::object& a, const py::object& b) {
    const DK_OpId id = checked_op(op);
    if (py::isinstance<TensorImpl>(a)) {
      const Tensor x = a.cast<Tensor>();
      return binary(id, x, operand(b, x, id));
    }
    if (!py::isinstance<TensorImpl>(b)) {
      throw py::type_error(std::string(op_name(id)) + ": at least one operand must be a Tensor");
    }
    const Tensor y = b.cast<Tensor>();
    return binary(id, operand(a, y, id), y);
  });
  m.def("where", [](const Tensor& c, const py::object& a, const py::object& b) {
    const Tensor x = py::isinstance<TensorImpl>(a) ? a.cast<Tensor>()
                     : py::isinstance<TensorImpl>(b)
                         ? scalar_like(b.cast<Tensor>(), to_scalar(a), kNoOp)
                         : constant(c->device_ptr(), DK_DTYPE_FLOAT32, to_scalar(a));
    return where(c, x, operand(b, x, kNoOp));
  });
  m.def("normalize_axes", &normalize_axes, py::arg("axis"), py::arg("ndim"),
        py::arg("scalar_as_1d") = false,
        "`axis` (None: all; an int; or an iterable of ints, negative ones counted from the end) "
        "as a list of axes of a tensor of rank `ndim`. A 0-d tensor has axis 0; scalar_as_1d "
        "lets -1 name it too (PyTorch's rule). Raises IndexOutOfRangeError for an axis out of "
        "range, InvalidArgumentError for a repeated one");
  m.def("pack", &pack, py::arg("tensors"),
        "The tensors' elements one after another in a new 1-D tensor (one copy launch each; "
        "no autograd record). devicekit.optim.AdamW packs gradients with it.");
  m.def("cat", &cat, py::arg("tensors"), py::arg("dim"),
        "The tensors (same device and dtype, every other dim equal) joined along dim: one copy "
        "launch per piece into its slice, bit-exact (no autograd record)");
  m.def(
      "narrow_into",
      [](const Tensor& g, const Dims& shape, int dim, int64_t start, const py::object& fill) {
        return narrow_into(g, shape, dim, start, to_scalar(fill));
      },
      py::arg("g"), py::arg("shape"), py::arg("dim"), py::arg("start"), py::arg("fill"),
      "A new tensor of shape holding g at start along dim and fill elsewhere (the gradient of "
      "a narrow view): one fill and one copy launch (no autograd record)");
  m.def("copy_into", &copy_into, py::arg("dst"), py::arg("src"),
        "Write src (cast to dst's dtype, broadcast to its shape) into the existing, possibly "
        "strided view dst: one copy launch whose output is dst, seen through every view of its "
        "storage (no autograd record)");
  m.def(
      "binary_into",
      [](int op, const Tensor& dst, const Tensor& a, const py::object& b) {
        const DK_OpId id = checked_op(op);
        binary_into(id, dst, a, operand(b, a, id));
      },
      py::arg("op"), py::arg("dst"), py::arg("a"), py::arg("b"),
      "dst = op(a, b) (add, sub, mul or div; b a Tensor or a number) written into the existing "
      "view dst: the kernel writes dst directly when dtypes match, dst is dense and no input "
      "overlaps it except a being dst on a kernel that declares DK_KERNEL_CAP_INPLACE; else "
      "the op and one copy launch (no autograd record)");
  m.def("reduce",
        [](int op, const Tensor& x, uint32_t axes) { return reduce(checked_op(op), x, axes); });
  m.def("argmax", [](const Tensor& x, int axis) { return argmax(x, axis); });
  m.def("cumsum", [](const Tensor& x, int axis) { return cumsum(x, axis); });
  m.def("iota", [](const std::shared_ptr<Device>& dev, const Dims& shape, int dt, int axis,
                   const py::object& start, const py::object& step) {
    return iota(dev, shape, checked_dt(dt), axis, to_scalar(start), to_scalar(step));
  });
  m.def("gather",
        [](const Tensor& x, int axis, const Tensor& index) { return gather(x, axis, index); });
  m.def("scatter_add", [](const Tensor& x, int axis, const Tensor& index, const Tensor& src) {
    return scatter_add(x, axis, index, src);
  });
  m.def("matmul", [](const Tensor& a, const Tensor& b) { return matmul(a, b); });
  m.def("random", [](int op, const std::shared_ptr<Device>& dev, const Dims& shape, int dt,
                     uint64_t seed, uint64_t offset) {
    return random(checked_op(op), dev, shape, checked_dt(dt), seed, offset);
  });
  m.def("dispatch_stats", []() {
    py::dict out;
    for (int i = 0; i < kNumOps; ++i) {
      const DispatchCounts c = dispatch_counts(DK_OpId(i));
      py::dict d;
      d["kernel"] = c.kernel;
      d["cast_inserted"] = c.cast_inserted;
      out[op_name(DK_OpId(i))] = d;
    }
    return out;
  });
  m.def("reset_dispatch_stats", &reset_dispatch_counts);
}

}  // namespace dk
