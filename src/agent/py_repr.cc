#include "agent/py_repr.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace deepbox::agent {
namespace {

// Decodes one code point at text[i]; invalid bytes decode as themselves with
// `valid` false.
uint32_t Decode(std::string_view text, size_t& i, bool& valid) {
  unsigned char c = static_cast<unsigned char>(text[i]);
  valid = true;
  size_t len = 0;
  uint32_t cp = 0;
  if (c < 0x80) {
    ++i;
    return c;
  } else if (c >= 0xC2 && c < 0xE0) {
    len = 2;
    cp = c & 0x1F;
  } else if (c >= 0xE0 && c < 0xF0) {
    len = 3;
    cp = c & 0x0F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    cp = c & 0x07;
  } else {
    valid = false;
    ++i;
    return c;
  }
  if (i + len > text.size()) {
    valid = false;
    ++i;
    return c;
  }
  for (size_t k = 1; k < len; ++k) {
    unsigned char cc = static_cast<unsigned char>(text[i + k]);
    if ((cc & 0xC0) != 0x80) {
      valid = false;
      ++i;
      return c;
    }
    cp = (cp << 6) | (cc & 0x3F);
  }
  i += len;
  return cp;
}

// Python's str.isprintable() for the ranges that matter in practice.
bool IsPrintable(uint32_t cp) {
  if (cp < 0x20 || cp == 0x7F) return false;
  if (cp >= 0x80 && cp <= 0xA0) return false;
  if (cp == 0xAD) return false;
  if (cp >= 0x2000 && cp <= 0x200F) return false;
  if (cp >= 0x2028 && cp <= 0x202F) return false;
  if (cp >= 0x205F && cp <= 0x206F) return false;
  if (cp == 0x3000 || cp == 0xFEFF) return false;
  if (cp >= 0xD800 && cp <= 0xF8FF) return false;  // surrogates, private use
  if (cp >= 0xFFF0 && cp <= 0xFFFB) return false;
  if (cp == 0x1680 || cp == 0x180E) return false;
  if (cp >= 0xF0000) return false;  // supplementary private use
  return true;
}

void AppendEscape(std::string& out, uint32_t cp) {
  char buf[16];
  if (cp <= 0xFF) {
    std::snprintf(buf, sizeof(buf), "\\x%02x", cp);
  } else if (cp <= 0xFFFF) {
    std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
  } else {
    std::snprintf(buf, sizeof(buf), "\\U%08x", cp);
  }
  out += buf;
}

std::string FormatFloat(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == std::floor(d) && std::fabs(d) < 1e16) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.1f", d);
    return buf;
  }
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.17g", d);
  // Shortest round-trip representation.
  for (int prec = 1; prec <= 17; ++prec) {
    char tmp[64];
    std::snprintf(tmp, sizeof(tmp), "%.*g", prec, d);
    if (std::strtod(tmp, nullptr) == d) return tmp;
  }
  return buf;
}

}  // namespace

std::string PyRepr(std::string_view text) {
  bool has_single = text.find('\'') != std::string_view::npos;
  bool has_double = text.find('"') != std::string_view::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out;
  out.reserve(text.size() + 2);
  out.push_back(quote);
  size_t i = 0;
  while (i < text.size()) {
    size_t start = i;
    bool valid = true;
    uint32_t cp = Decode(text, i, valid);
    if (!valid) {
      // Python would hold a surrogate escape here: repr shows '\udcXX'.
      AppendEscape(out, 0xDC00 + cp);
      continue;
    }
    if (cp == '\\') {
      out += "\\\\";
    } else if (cp == static_cast<uint32_t>(quote)) {
      out.push_back('\\');
      out.push_back(quote);
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (!IsPrintable(cp)) {
      AppendEscape(out, cp);
    } else {
      out.append(text.substr(start, i - start));
    }
  }
  out.push_back(quote);
  return out;
}

std::string PyReprList(const std::vector<std::string>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    out += PyRepr(items[i]);
  }
  out += "]";
  return out;
}

std::string PyReprJson(const json::value& value) {
  switch (value.kind()) {
    case json::kind::null:
      return "None";
    case json::kind::bool_:
      return value.get_bool() ? "True" : "False";
    case json::kind::int64:
      return std::to_string(value.get_int64());
    case json::kind::uint64:
      return std::to_string(value.get_uint64());
    case json::kind::double_:
      return FormatFloat(value.get_double());
    case json::kind::string:
      return PyRepr(value.get_string());
    case json::kind::array: {
      std::string out = "[";
      bool first = true;
      for (const auto& item : value.get_array()) {
        if (!first) out += ", ";
        first = false;
        out += PyReprJson(item);
      }
      return out + "]";
    }
    case json::kind::object: {
      std::string out = "{";
      bool first = true;
      for (const auto& kv : value.get_object()) {
        if (!first) out += ", ";
        first = false;
        out += PyRepr(kv.key());
        out += ": ";
        out += PyReprJson(kv.value());
      }
      return out + "}";
    }
  }
  return "None";
}

}  // namespace deepbox::agent
