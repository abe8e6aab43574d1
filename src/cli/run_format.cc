#include "cli/run_format.h"

#include <fmt/format.h>

#include <vector>

#include "agent/text.h"
#include "common/strings.h"

namespace deepbox::run {

std::string Sgr(bool color, std::string_view code, std::string_view text) {
  if (!color) return std::string(text);
  return fmt::format("\x1b[{}m{}\x1b[0m", code, text);
}

std::string FormatDuration(std::chrono::milliseconds d) {
  int64_t ms = d.count();
  if (ms < 1000) return fmt::format("{}ms", ms);
  if (ms < 60000) return fmt::format("{:.1f}s", static_cast<double>(ms) / 1000.0);
  int64_t s = ms / 1000;
  return fmt::format("{}m{:02d}s", s / 60, s % 60);
}

std::string FormatTokens(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

std::string Truncate(std::string_view text, size_t max_chars) {
  if (agent::CodePointCount(text) <= max_chars) return std::string(text);
  return std::string(agent::CodePointPrefix(text, max_chars > 1 ? max_chars - 1 : 0)) + "…";
}

std::string FirstLine(std::string_view text) {
  auto lines = SplitLines(text);
  for (auto l : lines) {
    if (!IsBlank(l)) {
      std::string s(Trim(l));
      return lines.size() > 1 ? s + " …" : s;
    }
  }
  return "";
}

std::string FoldOutput(std::string_view preview, size_t max_chars) {
  std::vector<std::string_view> lines;
  for (auto l : SplitLines(preview)) {
    if (IsBlank(l)) continue;
    if (l.starts_with("[Command succeeded with exit code")) continue;
    lines.push_back(TrimRight(l));
  }
  if (lines.empty()) return "";
  std::string out = Truncate(Trim(lines[0]), max_chars);
  if (lines.size() > 1)
    out += fmt::format("  (+{} more line{})", lines.size() - 1, lines.size() == 2 ? "" : "s");
  return out;
}

}  // namespace deepbox::run
