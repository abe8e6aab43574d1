// UTF-8 helpers: everything deepbox puts into JSON passes through here, because
// Boost.JSON serializes invalid UTF-8 unchecked and cannot parse it back.
#pragma once

#include <string>
#include <string_view>

namespace deepbox {

bool IsValidUtf8(std::string_view text);
// Replaces each invalid sequence with U+FFFD.
std::string SanitizeUtf8(std::string_view text);
// Longest prefix of `text` that does not end inside a multi-byte sequence
// (used to split streamed output at chunk boundaries).
size_t Utf8CompletePrefix(std::string_view text);

}  // namespace deepbox
