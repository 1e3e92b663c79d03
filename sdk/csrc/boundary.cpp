#include "boundary.h"

#include <cstdio>
#include <cstring>

#include "plugin.h"  // DK_ARGS

namespace dk {

namespace {

// Valid range of the second byte after lead byte `b` (Unicode table 3-7), and
// the sequence length; length 0 for bytes that never start a sequence.
void utf8_lead(unsigned char b, int* len, unsigned char* lo, unsigned char* hi) {
  *lo = 0x80;
  *hi = 0xBF;
  if (b < 0x80) *len = 1;
  else if (b >= 0xC2 && b <= 0xDF) *len = 2;
  else if (b == 0xE0) {
    *len = 3;
    *lo = 0xA0;
  } else if (b >= 0xE1 && b <= 0xEC) *len = 3;
  else if (b == 0xED) {
    *len = 3;
    *hi = 0x9F;
  }  // no UTF-16 surrogates
  else if (b >= 0xEE && b <= 0xEF)
    *len = 3;
  else if (b == 0xF0) {
    *len = 4;
    *lo = 0x90;
  } else if (b >= 0xF1 && b <= 0xF3) *len = 4;
  else if (b == 0xF4) {
    *len = 4;
    *hi = 0x8F;
  }  // nothing above U+10FFFF
  else
    *len = 0;
}

}  // namespace

std::string utf8_with_replacement(const char* s, size_t n) {
  static const char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD
  std::string out;
  out.reserve(n);
  const auto* p = reinterpret_cast<const unsigned char*>(s);
  size_t i = 0;
  while (i < n) {
    int len;
    unsigned char lo, hi;
    utf8_lead(p[i], &len, &lo, &hi);
    if (len == 1) {
      out.push_back(char(p[i++]));
      continue;
    }
    // Consume the longest valid prefix of the sequence; a broken one becomes
    // a single U+FFFD (the "maximal subpart" rule Python's decoder follows)
    // and decoding resumes at the first byte that did not fit.
    size_t end = i + 1;
    bool ok = len > 0;
    for (int k = 1; ok && k < len; ++k) {
      const bool in_range =
          end < n && (k == 1 ? (p[end] >= lo && p[end] <= hi) : (p[end] >= 0x80 && p[end] <= 0xBF));
      if (in_range) ++end;
      else ok = false;
    }
    if (ok) {
      out.append(s + i, size_t(len));
    } else {
      out.append(kReplacement);
    }
    i = end;
  }
  return out;
}

std::string bounded_text(const char* s, size_t cap) {
  if (s == nullptr) return std::string();
  return utf8_with_replacement(s, strnlen(s, cap));
}

std::string printable(const char* s, size_t n) {
  if (s == nullptr) return "NULL";
  std::string out = "'";
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7F && c != '\\' && c != '\'') {
      out.push_back(char(c));
    } else {
      char buf[5];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return out + "'";
}

bool is_identifier(const char* s, size_t n) {
  if (s == nullptr || n == 0 || !(s[0] >= 'a' && s[0] <= 'z')) return false;
  for (size_t i = 1; i < n; ++i) {
    const char c = s[i];
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  }
  return true;
}

std::string error_code_label(int32_t code) {
  switch (code) {
    case DK_ERROR_INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case DK_ERROR_OUT_OF_MEMORY: return "OUT_OF_MEMORY";
    case DK_ERROR_UNIMPLEMENTED: return "UNIMPLEMENTED";
    case DK_ERROR_INTERNAL: return "INTERNAL";
    case DK_ERROR_UNAVAILABLE: return "UNAVAILABLE";
    case DK_ERROR_OUT_OF_RANGE: return "OUT_OF_RANGE";
    case DK_ERROR_FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    default: return "unknown error code " + std::to_string(code);
  }
}

void contract_error(const std::string& who, const std::string& call, const std::string& field,
                    const std::string& value, const std::string& rule, const std::string& where) {
  throw Error(ErrorKind::PluginContract, "plugin '" + who + "' " + call + " returned " + field +
                                             "=" + value + "; the device API requires " + rule +
                                             " (device_api.h, " + where + ")");
}

PluginErrorText take_plugin_error(const DK_Api* api, DK_Error* err) {
  // Error_Destroy runs on every path out of here, exceptions included.
  struct Destroy {
    const DK_Api* api;
    DK_Error* err;
    ~Destroy() {
      auto d = DK_ARGS(DK_Error_Destroy_Args);
      d.error = err;
      api->Error_Destroy(&d);
    }
  } destroy{api, err};

  PluginErrorText out;
  auto c = DK_ARGS(DK_Error_GetCode_Args);
  c.error = err;
  api->Error_GetCode(&c);
  out.code = c.code;

  auto m = DK_ARGS(DK_Error_Message_Args);
  m.error = err;
  api->Error_Message(&m);
  if (m.message == nullptr) {
    out.message =
        "(the plugin's Error_Message returned message=NULL, which the device API "
        "forbids)";
    return out;
  }
  // message_size is a claim about the string, not a bound we may read to:
  // stop at the real NUL, and at the cap.
  const size_t limit =
      m.message_size < kMaxErrorMessageBytes ? m.message_size : kMaxErrorMessageBytes;
  const size_t n = strnlen(m.message, limit);
  out.message = utf8_with_replacement(m.message, n);
  if (n == kMaxErrorMessageBytes && m.message[n] != '\0') {
    out.message += " [... cut at " + std::to_string(kMaxErrorMessageBytes) + " bytes]";
  }
  return out;
}

}  // namespace dk
