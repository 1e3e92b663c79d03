// Checks on what a plugin hands back, applied at the boundary so that nothing
// a plugin returns is trusted: strings are bounded and decoded, identifiers
// validated, counts capped, pointers and sizes checked against the header's
// rules. A violation is an Error(PluginContract) naming the plugin, the call,
// the field, the value and the rule; nothing here reads past what the header
// promises exists.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "devicekit/device_api.h"
#include "errors.h"

namespace dk {

// Longest error message kept from Error_Message (the rest is cut, with a note).
constexpr size_t kMaxErrorMessageBytes = size_t(64) << 10;
// Longest plugin/device string read (name, vendor, version, attributes).
constexpr size_t kMaxInfoStringBytes = size_t(64) << 10;
// Most devices one plugin may report; see DK_Device_Count_Args.count.
constexpr int32_t kMaxDevicesPerPlugin = 4096;

// `s[0..n)` with every invalid UTF-8 sequence replaced by U+FFFD, so Python
// can always turn it into a str.
std::string utf8_with_replacement(const char* s, size_t n);

// A NUL-terminated plugin string, read up to `cap` bytes (never further, even
// if no NUL comes first) and decoded with replacement.
std::string bounded_text(const char* s, size_t cap = kMaxInfoStringBytes);

// The bytes of `s[0..n)` for an error message: printable ASCII as is, every
// other byte as \xNN, quoted; "NULL" for a null pointer.
std::string printable(const char* s, size_t n);

// [a-z][a-z0-9_]* (DK_Plugin_GetInfo_Args.name).
bool is_identifier(const char* s, size_t n);

// "INVALID_ARGUMENT" ... for DK_ErrorCode values, else "unknown error code N".
std::string error_code_label(int32_t code);

// "plugin 'who' <call> returned <field>=<value>; the device API requires
// <rule> (device_api.h, <where>)".
[[noreturn]] void contract_error(const std::string& who, const std::string& call,
                                 const std::string& field, const std::string& value,
                                 const std::string& rule, const std::string& where);

inline bool is_power_of_two(size_t v) { return v != 0 && (v & (v - 1)) == 0; }

// Reads `err`'s code and message and destroys it, whatever happens while
// reading (the error object is never leaked). Message bounded as above.
struct PluginErrorText {
  int32_t code = 0;
  std::string message;
};
PluginErrorText take_plugin_error(const DK_Api* api, DK_Error* err);

}  // namespace dk
