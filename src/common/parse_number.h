// Numbers from anything a sandbox, daemon, client, model, server or file
// supplies are parsed here, never with std::stoi/stoul/stod (which throw, and
// accept "12abc" and leading blanks). The whole text must be the number: no
// blanks, no leading '+', no trailing bytes, no '-' for unsigned types, and the
// value must fit the type; anything else is std::nullopt.
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string_view>
#include <type_traits>

namespace deepbox {

template <typename T>
std::optional<T> ParseInteger(std::string_view text, int base = 10) {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>);
  if (text.empty()) return std::nullopt;
  T value{};
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value, base);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

inline std::optional<uint64_t> ParseU64(std::string_view text, int base = 10) {
  return ParseInteger<uint64_t>(text, base);
}
inline std::optional<int64_t> ParseI64(std::string_view text, int base = 10) {
  return ParseInteger<int64_t>(text, base);
}

// A finite double in plain or exponent notation ("1.5", "-2e3"); no inf/nan,
// no hex floats, nothing that overflows.
std::optional<double> ParseDouble(std::string_view text);

// A permission mode written in octal ("644", "0755", "4755"); at most 07777.
std::optional<uint32_t> ParseFileMode(std::string_view text);

// A double converted to int64_t without undefined behaviour: only when it is
// finite, integral and within range.
std::optional<int64_t> DoubleToInt64(double value);

}  // namespace deepbox
