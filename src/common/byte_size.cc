#include "common/byte_size.h"

#include <fmt/format.h>

#include <array>
#include <cctype>
#include <cmath>
#include <limits>

#include "common/parse_number.h"

namespace deepbox {
namespace {

constexpr uint64_t kKiB = 1ULL << 10;

Error BadSize(std::string_view what, std::string_view text) {
  return Error(ErrorCode::kInvalidArgument,
               fmt::format("{} '{}': expected a size such as 512M, 2G or 1073741824 (bytes; "
                           "units k, m, g, t are powers of 1024)",
                           what, text));
}

}  // namespace

Result<uint64_t> ParseByteSize(std::string_view text, std::string_view what) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) {
    ++i;
  }
  std::string_view number = text.substr(0, i);
  std::string unit(text.substr(i));
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  int shift = -1;
  static constexpr std::array<std::pair<std::string_view, int>, 17> kUnits = {{
      {"", 0},
      {"b", 0},
      {"k", 10},
      {"kb", 10},
      {"kib", 10},
      {"m", 20},
      {"mb", 20},
      {"mib", 20},
      {"g", 30},
      {"gb", 30},
      {"gib", 30},
      {"t", 40},
      {"tb", 40},
      {"tib", 40},
      {"p", 50},
      {"pb", 50},
      {"pib", 50},
  }};
  for (const auto& [name, s] : kUnits) {
    if (unit == name) shift = s;
  }
  if (number.empty() || shift < 0) return tl::unexpected(BadSize(what, text));
  if (number.find('.') == std::string_view::npos) {
    auto n = ParseU64(number);
    if (!n || (shift > 0 && *n > (std::numeric_limits<uint64_t>::max() >> shift))) {
      return tl::unexpected(BadSize(what, text));
    }
    return *n << shift;
  }
  // A fraction ("1.5G"): whole bytes, rounded down, as docker does.
  auto d = ParseDouble(number);
  if (!d || *d < 0) return tl::unexpected(BadSize(what, text));
  double bytes = std::ldexp(*d, shift);
  if (!std::isfinite(bytes) || bytes >= 9.2e18) return tl::unexpected(BadSize(what, text));
  return static_cast<uint64_t>(bytes);
}

std::string FormatBytes(uint64_t bytes) {
  static constexpr std::array<std::string_view, 5> kNames = {"B", "KiB", "MiB", "GiB", "TiB"};
  size_t u = 0;
  uint64_t unit = 1;
  while (u + 1 < kNames.size() && bytes >= unit * kKiB) {
    unit *= kKiB;
    ++u;
  }
  if (bytes % unit == 0) return fmt::format("{} {}", bytes / unit, kNames[u]);
  std::string n = fmt::format("{:.2f}", static_cast<double>(bytes) / static_cast<double>(unit));
  while (n.back() == '0') n.pop_back();
  if (n.back() == '.') n.pop_back();
  return fmt::format("{} {}", n, kNames[u]);
}

}  // namespace deepbox
