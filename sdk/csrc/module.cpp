// The `devicekit._core` extension: plugin loading, devices, tensors and ops.
// Python-side conveniences (dtype objects, discovery, CLI) live in the
// `devicekit` package; everything on the per-call path is bound here.
#include <pybind11/stl.h>

#include "bindings.h"
#include "boundary.h"

namespace dk {
namespace {

const char* exception_name(ErrorKind k, int code) {
  switch (k) {
    case ErrorKind::PluginLoad: return "PluginLoadError";
    case ErrorKind::PluginVersion: return "PluginVersionError";
    case ErrorKind::Device:
      return code == DK_ERROR_OUT_OF_MEMORY ? "OutOfMemoryError" : "DeviceError";
    case ErrorKind::NotImplemented: return "NotImplementedByPlugin";
    case ErrorKind::InvalidArgument: return "InvalidArgumentError";
    case ErrorKind::DTypeMismatch: return "DTypeError";
    case ErrorKind::DeviceNotFound: return "DeviceNotFoundError";
    case ErrorKind::PluginContract: return "PluginContractError";
    case ErrorKind::Overflow: return "InputOverflowError";
    case ErrorKind::ForkedProcess: return "ForkedProcessError";
    case ErrorKind::IndexOutOfRange: return "IndexOutOfRangeError";
  }
  return "DeviceKitError";
}

void translate(std::exception_ptr p) {
  try {
    if (p) std::rethrow_exception(p);
  } catch (const Error& e) {
    py::object cls =
        py::module_::import("devicekit.errors").attr(exception_name(e.kind(), e.code()));
    py::object code = e.kind() == ErrorKind::Device ? py::str(error_code_label(e.code()))
                                                    : py::object(py::none());
    // Plugin messages are not guaranteed UTF-8; never fail while reporting a failure.
    const std::string what = e.what();
    py::object msg = py::reinterpret_steal<py::object>(
        PyUnicode_DecodeUTF8(what.data(), Py_ssize_t(what.size()), "replace"));
    py::object exc = cls(msg, py::arg("code") = code);
    PyErr_SetObject(cls.ptr(), exc.ptr());
  }
}

py::dict properties_dict(Device& d) {
  const DeviceProperties& p = d.properties();
  py::list dtypes;
  for (int i = 0; i < DK_DTYPE_COUNT_1_0; ++i) {
    if (p.dtypes & DK_DTYPE_BIT(i)) dtypes.append(dtype_name(DK_DType(i)));
  }
  py::dict out;
  out["name"] = p.name;
  out["total_memory"] = p.total_memory;
  out["capabilities"] = p.capabilities;
  out["dtypes"] = dtypes;
  out["alignment"] = p.alignment;
  return out;
}

py::dict memory_stats(Device& d) {
  auto a = DK_ARGS(DK_Device_MemoryStats_Args);
  a.device = d.index();
  d.check(d.api()->Device_MemoryStats(&a), "Device_MemoryStats");
  const CacheStats c = d.cache_stats();
  py::dict out;
  out["allocated_bytes"] = c.allocated_bytes;
  out["cached_bytes"] = c.cached_bytes;
  out["reserved_bytes"] = c.allocated_bytes + c.cached_bytes;
  out["plugin_alloc_calls"] = c.plugin_alloc_calls;
  out["plugin_free_calls"] = c.plugin_free_calls;
  out["cache_hits"] = c.cache_hits;
  out["bytes_in_use"] = a.bytes_in_use;
  out["peak_bytes_in_use"] = a.peak_bytes_in_use;
  out["num_allocs"] = a.num_allocs;
  out["total_bytes"] = d.properties().total_memory;  // the plugin's budget for this device
  return out;
}

// Per-op facts for `devicekit devices` and conformance: which kernels exist,
// for which dtypes, with which capability bits.
py::list kernel_info(const Plugin& p) {
  py::list out;
  for (int op = 0; op < kNumOps; ++op) {
    py::dict d;
    d["op"] = op_name(DK_OpId(op));
    d["implemented"] = p.kernel(DK_OpId(op)) != nullptr;
    py::list dts;
    const uint64_t mask = p.kernel_dtypes(DK_OpId(op));
    for (int i = 0; i < DK_DTYPE_COUNT_1_0; ++i) {
      if (mask & DK_DTYPE_BIT(i)) dts.append(dtype_name(DK_DType(i)));
    }
    d["dtypes"] = dts;
    d["caps"] = p.kernel_caps(DK_OpId(op));
    out.append(d);
  }
  return out;
}

// Device::allocate's out-of-memory hook (device.h): one gc.collect(), so
// that tensors kept alive only by reference cycles give their blocks back
// before the retry. gc.collect(), not PyGC_Collect(): the latter does nothing
// while gc.disable() is in effect. allocate runs with the GIL held or
// released (ops release it around launches); PyGILState_Ensure takes it in
// either case, and the caller holds no SDK lock then. Skipped while the
// interpreter shuts down, where taking the GIL would end the thread.
void collect_garbage() noexcept {
#if PY_VERSION_HEX >= 0x030D0000
  if (!Py_IsInitialized() || Py_IsFinalizing()) return;
#else
  if (!Py_IsInitialized() || _Py_IsFinalizing()) return;
#endif
  const PyGILState_STATE gil = PyGILState_Ensure();
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);  // an error already being raised stays the one raised
  PyObject* gc = PyImport_ImportModule("gc");
  PyObject* collected = gc ? PyObject_CallMethod(gc, "collect", nullptr) : nullptr;
  if (collected == nullptr) {
    // Never turn the plugin's out-of-memory error into another one: report
    // this one as unraisable (stderr) and go on to the retry.
    PyErr_WriteUnraisable(gc);
  }
  Py_XDECREF(collected);
  Py_XDECREF(gc);
  PyErr_Restore(type, value, traceback);
  PyGILState_Release(gil);
}

}  // namespace

void part_not_implemented(const Device& d, const char* part, const char* extension,
                          const std::string& hint) {
  throw Error(ErrorKind::NotImplemented,
              "plugin '" + d.plugin()->who() + "' (device " + d.name() +
                  "): not implemented: the plugin has no " + part + " part (device API " +
                  std::to_string(d.plugin()->api_major()) + "." +
                  std::to_string(d.plugin()->api_minor()) + " plugin; the part is the optional " +
                  extension + " extension, since 1.5)" + (hint.empty() ? "" : "; " + hint));
}

DK_Scalar to_scalar(const py::handle& v) {
  DK_Scalar s{};
  // numpy scalars count as the Python scalar of their kind (x + np.int64(3)
  // behaves like x + 3); anything else is a TypeError.
  const bool is_np = !py::isinstance<py::bool_>(v) && !py::isinstance<py::int_>(v) &&
                     !py::isinstance<py::float_>(v) &&
                     py::isinstance(v, py::module_::import("numpy").attr("generic"));
  auto np_is = [&](const char* kind) {
    return is_np && py::isinstance(v, py::module_::import("numpy").attr(kind));
  };
  if (py::isinstance<py::bool_>(v) || np_is("bool_")) {
    s.dtype = DK_DTYPE_BOOL;
    s.value.i = PyObject_IsTrue(v.ptr()) ? 1 : 0;
  } else if (py::isinstance<py::int_>(v) || np_is("integer")) {
    py::object i = py::reinterpret_steal<py::object>(PyNumber_Index(v.ptr()));
    if (!i) throw py::error_already_set();
    int overflow = 0;
    const long long x = PyLong_AsLongLongAndOverflow(i.ptr(), &overflow);
    if (overflow != 0) {
      throw Error(ErrorKind::Overflow,
                  "Python int " + std::string(py::str(i)) +
                      " does not fit in int64, the widest integer DeviceKit computes in");
    }
    s.dtype = DK_DTYPE_INT64;
    s.value.i = x;
  } else if (py::isinstance<py::float_>(v) || np_is("floating")) {
    s.dtype = DK_DTYPE_FLOAT64;
    s.value.f = PyFloat_AsDouble(v.ptr());
  } else {
    throw py::type_error("expected a Tensor or a Python bool/int/float (or numpy scalar), got " +
                         std::string(py::str(py::type::of(v).attr("__name__"))));
  }
  return s;
}

}  // namespace dk

PYBIND11_MODULE(_core, m) {
  using namespace dk;
  m.doc() = "DeviceKit core: plugin loading, devices, tensors, dispatch";
  py::register_exception_translator(&translate);
  Device::set_reclaim_hook(&collect_garbage);
  m.attr("API_MAJOR") = DK_API_MAJOR;
  m.attr("API_MINOR") = DK_API_MINOR;
  py::list dts, is_float;
  for (int i = 0; i < DK_DTYPE_COUNT_1_0; ++i) {
    const DTypeInfo& d = dtype_info(DK_DType(i));
    dts.append(py::make_tuple(d.name, d.itemsize));
    is_float.append(d.is_float);
  }
  // Indexed by DK_DType, for devicekit.dtypes: (name, itemsize), and whether
  // the dtype is floating point (dtype.is_floating_point).
  m.attr("DTYPES") = dts;
  m.attr("DTYPE_IS_FLOAT") = is_float;

  py::class_<Plugin, std::shared_ptr<Plugin>>(m, "Plugin")
      .def_property_readonly("name", [](const Plugin& p) { return p.info().name; })
      .def_property_readonly("vendor", [](const Plugin& p) { return p.info().vendor; })
      .def_property_readonly("version", [](const Plugin& p) { return p.info().version; })
      .def_property_readonly("attributes", [](const Plugin& p) { return p.info().attributes; })
      .def_property_readonly("api_version",
                             [](const Plugin& p) {
                               return std::to_string(p.api_major()) + "." +
                                      std::to_string(p.api_minor());
                             })
      .def_property_readonly("path", &Plugin::path)
      .def_property_readonly("devices", &Plugin::devices)
      .def("kernels", &kernel_info, "Per base op: implemented?, declared dtypes, capability bits")
      .def("fused_kernels", &fused_kernel_info,
           "The fused kernels the plugin registered (device API 1.2+), as [{op, name}] in the "
           "order the dispatcher asks them; [] for older plugins")
      .def_property_readonly(
          "parts",
          [](const Plugin& p) {
            py::list parts;
            if (p.collectives()) parts.append("collectives");
            if (p.graphs()) parts.append("graphs");
            return parts;
          },
          "The optional device API parts the plugin has (1.5+: 'collectives', 'graphs'); [] for "
          "older plugins, which cannot have them")
      .def("__repr__", [](const Plugin& p) {
        return "<devicekit.Plugin '" + p.info().name + "' " + p.info().version + " (device API " +
               std::to_string(p.api_major()) + "." + std::to_string(p.api_minor()) + ") " +
               p.path() + ">";
      });

  DeviceClass device_cls(m, "Device");
  device_cls.def_property_readonly("name", &Device::name)
      .def_property_readonly("type", [](const Device& d) { return d.plugin()->info().name; })
      .def_property_readonly("index", &Device::index)
      .def_property_readonly("plugin", [](const Device& d) { return Plugin::owner_of(d.plugin()); })
      .def_property_readonly("properties", &properties_dict)
      .def("memory_stats", &memory_stats,
           "SDK cache (allocated/cached/reserved bytes, plugin call counts) and the plugin's own "
           "exact figures (bytes_in_use, peak_bytes_in_use, num_allocs)")
      .def(
          "synchronize", [](Device& d) { d.synchronize(); },
          py::call_guard<py::gil_scoped_release>())
      .def("empty_cache", &Device::empty_cache, py::call_guard<py::gil_scoped_release>())
      .def("__repr__", [](const Device& d) { return "device('" + d.name() + "')"; })
      .def("__str__", &Device::name);

  m.def("load_plugin", &Plugin::load, py::arg("path"),
        "Load one plugin library in this process, with no probe (devicekit.load_plugin probes "
        "first). Once per loaded library: loading it again, by any path, returns the same "
        "Plugin or raises the same error. Raises PluginLoadError/PluginVersionError with the "
        "cause");
  m.def("find_loaded_plugin", &Plugin::find_loaded, py::arg("path"),
        "The Plugin of the library at path if this process loaded it already (by any path), "
        "else None; raises the load error it failed with. Loads nothing");
  m.def("_set_probe_trace_fd", &Plugin::set_trace_fd, py::arg("fd"),
        "For devicekit._plugins.probe: write 'step <call>' lines to fd before each plugin call");

  bind_tensor(m);
  bind_ops(m);
  bind_fused(m);
  bind_raw(m);
  bind_collectives(m);
  bind_graphs(m);
  bind_runtime(m, device_cls);
  bind_trace(m);
}
