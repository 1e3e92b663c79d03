// Direct kernel calls below the SDK, for the conformance suite's plugin-level
// section: a kernel is called with exactly the views the caller describes
// (device addresses, dtypes, shapes, strides, raw attribute bytes), with none
// of the SDK's checks, promotions, materialisation or padding in between, and
// its error comes back as a value (code, message) instead of an exception, so
// a test can demand DK_ERROR_INVALID_ARGUMENT for a call the header forbids.
#include <pybind11/stl.h>

#include <string>
#include <tuple>
#include <vector>

#include "bindings.h"

namespace dk {
namespace {

// (address, dtype, shape, strides): one DK_TensorView.
using ViewSpec = std::tuple<uintptr_t, int, std::vector<int64_t>, std::vector<int64_t>>;
using Outcome = std::pair<int, std::string>;  // (DK_ErrorCode, 0 = ok; message)

Outcome outcome_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const Error& e) { return {e.code() ? e.code() : -1, e.what()}; }
  return {0, ""};
}

struct Views {
  std::vector<DK_TensorView> views;
  std::vector<const DK_TensorView*> ptrs;
  std::vector<ViewSpec> specs;  // owns shape/strides storage for the call

  explicit Views(const std::vector<ViewSpec>& in) : specs(in) {
    views.resize(specs.size());
    for (size_t i = 0; i < specs.size(); ++i) {
      auto& [addr, dtype, shape, strides] = specs[i];
      DK_TensorView& v = views[i];
      v = DK_ARGS(DK_TensorView);
      v.data = reinterpret_cast<void*>(addr);
      v.dtype = dtype;
      v.rank = int32_t(shape.size());
      v.shape = shape.empty() ? nullptr : shape.data();
      v.strides = strides.empty() ? nullptr : strides.data();
    }
    for (auto& v : views) ptrs.push_back(&v);
  }
};

}  // namespace

void bind_raw(py::module_& m) {
  m.def(
      "raw_kernel_call",
      [](const std::shared_ptr<Device>& dev, int op, const std::vector<ViewSpec>& inputs,
         const std::vector<ViewSpec>& outputs, py::object attrs, int op_field,
         int64_t args_struct_size, int device_field, bool stream_null, const std::string& null_view,
         int64_t view_struct_size) {
        if (op < 0 || op >= kNumOps) invalid_argument("raw_kernel_call: op id out of range");
        DK_KernelFn* fn = dev->plugin()->kernel(DK_OpId(op));
        if (fn == nullptr) {
          throw Error(ErrorKind::NotImplemented, std::string("op '") + op_name(DK_OpId(op)) +
                                                     "' has no kernel in plugin '" +
                                                     dev->plugin()->info().name + "'");
        }
        std::string attr_bytes = attrs.is_none() ? std::string() : attrs.cast<std::string>();
        Views in(inputs), out(outputs);
        // Malformed views: "in<i>" / "out<i>" NULL in its array; output 0's struct_size.
        for (auto* vs : {&in, &out}) {
          const std::string prefix = vs == &in ? "in" : "out";
          for (size_t i = 0; i < vs->ptrs.size(); ++i)
            if (null_view == prefix + std::to_string(i)) vs->ptrs[i] = nullptr;
        }
        if (view_struct_size >= 0 && !out.views.empty())
          out.views[0].struct_size = size_t(view_struct_size);
        auto a = DK_ARGS(DK_Kernel_Args);
        if (args_struct_size >= 0) a.struct_size = size_t(args_struct_size);  // a malformed call
        a.device = device_field >= -1000000 ? device_field : dev->index();
        a.stream = stream_null ? nullptr : dev->default_stream();
        a.op = op_field >= -1000000 ? op_field : op;  // default: the op whose kernel is called
        a.num_inputs = int32_t(in.ptrs.size());
        a.inputs = in.ptrs.empty() ? nullptr : in.ptrs.data();
        a.num_outputs = int32_t(out.ptrs.size());
        a.outputs = out.ptrs.empty() ? nullptr : out.ptrs.data();
        a.attrs = attr_bytes.empty() ? nullptr : attr_bytes.data();
        py::gil_scoped_release nogil;
        Outcome launched = outcome_of([&] { dev->check(fn(&a), op_name(DK_OpId(op))); });
        // Whatever was enqueued finishes (or fails) here, on the kernel's own stream.
        Outcome synced = outcome_of([&] { dev->synchronize(dev->default_stream()); });
        return std::make_tuple(launched.first, launched.second, synced.first, synced.second);
      },
      py::arg("device"), py::arg("op"), py::arg("inputs"), py::arg("outputs"),
      py::arg("attrs") = py::none(), py::arg("op_field") = -2000000,
      py::arg("args_struct_size") = -1, py::arg("device_field") = -2000000,
      py::arg("stream_null") = false, py::arg("null_view") = "", py::arg("view_struct_size") = -1,
      "Calls base op `op`'s kernel directly on the device's default stream with views "
      "[(address, dtype id, shape, strides in elements)] and raw attribute bytes (or None), "
      "then synchronises that stream. `op_field` / `args_struct_size` / `device_field`: other "
      "values for DK_Kernel_Args.op / .struct_size / .device, `stream_null`: a NULL stream, "
      "`null_view` ('in0', 'out0', ...): that entry of the views array NULL, "
      "`view_struct_size`: output 0's DK_TensorView.struct_size (malformed calls). Returns "
      "(launch code, launch message, sync code, sync message); code 0 is success. Conformance "
      "use only: nothing is checked.");
}

}  // namespace dk
