#include "cli/line_diff.h"

#include <algorithm>
#include <cstdint>

#include "agent/text.h"
#include "common/strings.h"

namespace deepbox::run {

std::vector<std::string> LineDiff(std::string_view before, std::string_view after) {
  std::vector<std::string> a, b;
  for (auto l : SplitLines(before)) a.emplace_back(l);
  for (auto l : SplitLines(after)) b.emplace_back(l);
  std::vector<std::string> out;
  // Edits are short strings, so the table stays small.
  size_t n = a.size(), m = b.size();
  if (n * m > 250000) {
    for (const auto& l : a) out.push_back("-" + l);
    for (const auto& l : b) out.push_back("+" + l);
    return out;
  }
  std::vector<std::vector<uint32_t>> lcs(n + 1, std::vector<uint32_t>(m + 1, 0));
  for (size_t i = n; i-- > 0;) {
    for (size_t j = m; j-- > 0;) {
      lcs[i][j] = a[i] == b[j] ? lcs[i + 1][j + 1] + 1 : std::max(lcs[i + 1][j], lcs[i][j + 1]);
    }
  }
  size_t i = 0, j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && a[i] == b[j]) {
      out.push_back(" " + a[i]);
      ++i;
      ++j;
    } else if (i < n && (j == m || lcs[i + 1][j] >= lcs[i][j + 1])) {
      out.push_back("-" + a[i++]);  // removals first, as diff shows them
    } else {
      out.push_back("+" + b[j++]);
    }
  }
  return out;
}

}  // namespace deepbox::run
