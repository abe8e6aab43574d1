#include "common/parse_number.h"

#include <cmath>

namespace deepbox {

std::optional<double> ParseDouble(std::string_view text) {
  if (text.empty()) return std::nullopt;
  // from_chars also reads "inf", "nan" and (with chars_format::hex only) hex;
  // restrict to what JSON and command lines mean by a number.
  for (char c : text) {
    bool ok = (c >= '0' && c <= '9') || c == '.' || c == '-' || c == 'e' || c == 'E' || c == '+';
    if (!ok) return std::nullopt;
  }
  if (text.front() == '+') return std::nullopt;
  double value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(value)) {
    return std::nullopt;
  }
  return value;
}

std::optional<uint32_t> ParseFileMode(std::string_view text) {
  if (text.size() > 12) return std::nullopt;  // leading zeros are fine, a novel is not
  auto mode = ParseInteger<uint32_t>(text, 8);
  if (!mode || *mode > 07777) return std::nullopt;
  return mode;
}

std::optional<int64_t> DoubleToInt64(double value) {
  // 2^63 is exactly representable; every double below it and >= -2^63 fits.
  constexpr double kLimit = 9223372036854775808.0;
  if (!std::isfinite(value) || value < -kLimit || value >= kLimit) return std::nullopt;
  if (std::trunc(value) != value) return std::nullopt;
  return static_cast<int64_t>(value);
}

}  // namespace deepbox
