// Bindings of the fused-kernel dispatcher (fused.cpp). devicekit/_fused.py
// calls try_fused once per composite-op call: the attribute dict becomes the
// op's attribute struct here, in C++, so Python builds nothing per call.
#include <pybind11/stl.h>

#include "bindings.h"
#include "fused.h"

namespace dk {
namespace {

template <class T> T attr(const py::dict& attrs, const char* key, const char* op) {
  if (!attrs.contains(key)) {
    invalid_argument(std::string("composite op '") + op + "': attrs has no '" + key + "'");
  }
  return attrs[key].cast<T>();
}

// The op's attribute struct from its Python attributes, field by field as the
// spec lists them (fused_attrs.inc); a bool field becomes 1 or 0, and fields
// the SDK sets itself (the SDPA mask kind: fused.cpp) are not read here.
FusedAttrs to_attrs(int op, const py::dict& d) {
  FusedAttrs a;
  const char* name = fused_op_spec(op).name;
#define DK_X(OP, member, field, T) \
  if (op == DK_FUSED_##OP)         \
    a.member.field = static_cast<decltype(a.member.field)>(attr<T>(d, #field, name));
  DK_SDK_FUSED_ATTR_FIELDS(DK_X)
#undef DK_X
  return a;
}

}  // namespace

py::list fused_kernel_info(const Plugin& p) {
  py::list out;
  for (int op = 0; op < kNumFusedOps; ++op) {
    for (const DK_FusedKernel* k : p.fused_kernels(op)) {
      py::dict d;
      d["op"] = fused_op_spec(op).name;
      d["name"] = k->name;
      out.append(d);
    }
  }
  return out;
}

void bind_fused(py::module_& m) {
  py::list names;
  for (int i = 0; i < kNumFusedOps; ++i) names.append(fused_op_spec(i).name);
  m.attr("FUSED_OP_NAMES") = names;  // indexed by DK_FusedOpId

  m.def(
      "try_fused",
      [](const std::string& op_name, const py::sequence& inputs, const py::dict& attrs,
         const std::vector<bool>& want) -> py::object {
        const int op = fused_op_from_name(op_name);
        if (op < 0)
          return py::str("not a fused op of the device API");  // no plugin can register one
        std::vector<Tensor> in;
        in.reserve(inputs.size());
        for (const py::handle& h : inputs) {
          if (h.is_none()) in.emplace_back();
          else if (py::isinstance<TensorImpl>(h)) in.push_back(h.cast<Tensor>());
          else
            return py::str(
                "an operand is not a tensor");  // a Python scalar: the decomposition handles it
        }
        const FusedAttrs a = to_attrs(op, attrs);
        FusedHit hit;
        bool ok;
        {
          py::gil_scoped_release nogil;
          ok = try_fused(op, in, a, want, &hit);
        }
        if (!ok) return py::str(hit.declined);
        py::tuple outs(hit.outs.size());
        for (size_t i = 0; i < hit.outs.size(); ++i) {
          outs[i] = hit.outs[i] ? py::cast(hit.outs[i]) : py::none();
        }
        return py::make_tuple(outs, std::string(hit.kernel));
      },
      py::arg("op"), py::arg("inputs"), py::arg("attrs"), py::arg("want") = std::vector<bool>{},
      "Run the first registered fused kernel that accepts the call: ((outputs...), kernel "
      "name), None for an output not wanted (want: one flag per output; empty: all), or a str "
      "saying why none ran (the operands do not fit the op, no kernel accepts, ...)");

  m.def(
      "has_fused_kernel",
      [](const std::string& op_name, const Tensor& t) {
        return has_fused_kernel(fused_op_from_name(op_name), t);
      },
      py::arg("op"), py::arg("tensor"),
      "Whether the plugin of the tensor's device registers a fused kernel for the op");
}

}  // namespace dk
