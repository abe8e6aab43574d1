#include "sequence_check.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>

namespace deepbox::examples {
namespace {

// Numbers on one line, in order. "1.0" counts as 1; "1.5" is kept as a
// non-integer marker that breaks runs; digits glued to letters ("x2", "F2")
// are labels, not values.
std::vector<std::optional<long long>> NumbersOnLine(std::string_view line) {
  std::vector<std::optional<long long>> out;
  size_t i = 0;
  while (i < line.size()) {
    char c = line[i];
    bool starts =
        std::isdigit(static_cast<unsigned char>(c)) ||
        (c == '-' && i + 1 < line.size() && std::isdigit(static_cast<unsigned char>(line[i + 1])));
    bool glued =
        i > 0 && (std::isalpha(static_cast<unsigned char>(line[i - 1])) || line[i - 1] == '_');
    if (!starts) {
      ++i;
      continue;
    }
    size_t j = i + (c == '-' ? 1 : 0);
    while (j < line.size() && std::isdigit(static_cast<unsigned char>(line[j]))) ++j;
    bool fractional_zero = true;
    size_t k = j;
    if (k + 1 < line.size() && line[k] == '.' &&
        std::isdigit(static_cast<unsigned char>(line[k + 1]))) {
      ++k;
      while (k < line.size() && std::isdigit(static_cast<unsigned char>(line[k]))) {
        if (line[k] != '0') fractional_zero = false;
        ++k;
      }
    }
    if (!glued) {
      std::string digits(line.substr(i, j - i));
      if (digits.size() > 18 || !fractional_zero) {
        out.push_back(std::nullopt);
      } else {
        out.push_back(std::stoll(digits));
      }
    }
    i = k;
  }
  return out;
}

bool ContainsRun(const std::vector<std::optional<long long>>& seq) {
  const auto& want = kExpectedFibonacci;
  if (seq.size() < want.size()) return false;
  for (size_t s = 0; s + want.size() <= seq.size(); ++s) {
    bool match = true;
    for (size_t t = 0; t < want.size() && match; ++t) match = seq[s + t] == want[t];
    if (match) return true;
  }
  return false;
}

}  // namespace

SequenceCheck CheckFibonacciOutput(std::string_view output) {
  std::vector<std::vector<std::optional<long long>>> lines;
  size_t pos = 0;
  while (pos <= output.size()) {
    size_t nl = output.find('\n', pos);
    std::string_view line =
        output.substr(pos, nl == std::string_view::npos ? output.npos : nl - pos);
    auto nums = NumbersOnLine(line);
    if (!nums.empty()) lines.push_back(std::move(nums));
    if (nl == std::string_view::npos) break;
    pos = nl + 1;
  }
  // Candidate readings of the output: every number in order (lists, one per
  // line), or one value per line taken from the end ("F(3) = 2") or the
  // start ("2 is F(3)") of each line.
  std::vector<std::optional<long long>> all, last, first;
  for (const auto& l : lines) {
    all.insert(all.end(), l.begin(), l.end());
    last.push_back(l.back());
    first.push_back(l.front());
  }
  if (ContainsRun(all) || ContainsRun(last) || ContainsRun(first)) return {true, ""};
  std::vector<std::string> shown;
  for (size_t i = 0; i < all.size() && i < 20; ++i) {
    shown.push_back(all[i] ? std::to_string(*all[i]) : "?");
  }
  return {false, fmt::format("expected the sequence 0, 1, 1, 2, 3, 5, 8, 13, 21, 34; the output "
                             "holds the numbers [{}{}]",
                             fmt::join(shown, ", "), all.size() > 20 ? ", ..." : "")};
}

}  // namespace deepbox::examples
