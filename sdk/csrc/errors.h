// C++ side of DeviceKit's error model. Each class maps one-to-one onto a
// Python exception in devicekit/errors.py (the translator lives in module.cpp);
// C++ code throws these and never a bare std::runtime_error for user-facing
// failures, so Python callers can catch precisely.
#pragma once

#include <stdexcept>
#include <string>

namespace dk {

enum class ErrorKind {
  PluginLoad,      // file, dlopen, entry symbol, Initialize, probe
  PluginVersion,   // API major/minor or struct_size mismatch
  Device,          // a plugin call returned a DK_Error (code in `code`)
  NotImplemented,  // the plugin lacks a kernel / dtype and nothing can stand in
  InvalidArgument, // caller error caught by the SDK before reaching a plugin
  DTypeMismatch,   // wrong or unsupported dtype from the caller
  DeviceNotFound,
  PluginContract,  // a plugin call "succeeded" with a result the header forbids
  Overflow,        // a size, count or scalar that does not fit its type
  ForkedProcess,   // a device used before fork() is used in the child
  IndexOutOfRange, // an axis or index outside a tensor's dimensions
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& msg, int code = 0)
      : std::runtime_error(msg), kind_(kind), code_(code) {}
  ErrorKind kind() const { return kind_; }
  int code() const { return code_; }  // DK_ErrorCode for ErrorKind::Device

 private:
  ErrorKind kind_;
  int code_;
};

[[noreturn]] inline void invalid_argument(const std::string& msg) {
  throw Error(ErrorKind::InvalidArgument, msg);
}

}  // namespace dk
