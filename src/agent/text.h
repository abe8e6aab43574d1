// Text helpers for the agent harness. deepagents measures and cuts text in
// Python characters (code points); these helpers do the same on UTF-8 strings
// so budgets like "80 000 chars" and "5 000-char lines" match exactly.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "common/random.h"

namespace deepbox::agent {

// Number of code points (invalid bytes count one each).
size_t CodePointCount(std::string_view text);
// Byte offset of the first `n` code points (text.size() if shorter).
size_t CodePointPrefixBytes(std::string_view text, size_t n);
// The first `n` code points.
std::string_view CodePointPrefix(std::string_view text, size_t n);
// Splits into chunks of at most `n` code points each; "" yields one empty chunk.
std::vector<std::string_view> ChunkByCodePoints(std::string_view text, size_t n);

// Trim, Split, SplitLines, Join, ReplaceAll, AsciiLower: common/strings.h.
// RandomHex: common/random.h.
// Current UTC time as ISO 8601 with microseconds and "+00:00", like Python's
// datetime.now(UTC).isoformat().
std::string IsoNowUtc();

}  // namespace deepbox::agent
