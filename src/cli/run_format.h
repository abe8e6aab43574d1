// How `deepbox run`'s transcript writes numbers and folds text: shared by the
// terminal UI, the approval prompt and the session's messages.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace deepbox::run {

// SGR codes of the transcript.
inline constexpr const char* kSgrBold = "1";
inline constexpr const char* kSgrDim = "2";
inline constexpr const char* kSgrRed = "31";
inline constexpr const char* kSgrGreen = "32";
inline constexpr const char* kSgrYellow = "33";
inline constexpr const char* kSgrCyan = "36";

// `text` in SGR `code` when `color`, else as it is.
std::string Sgr(bool color, std::string_view code, std::string_view text);

std::string FormatDuration(std::chrono::milliseconds d);  // 12ms, 1.2s, 2m05s
std::string FormatTokens(int64_t n);                      // 12,345
// At most `max_chars` code points, the last one "…" when cut.
std::string Truncate(std::string_view text, size_t max_chars);
// The first non-blank line, trimmed, with " …" when more lines follow.
std::string FirstLine(std::string_view text);
// A tool's output on one line: its first non-blank line (truncated) and how
// many more there are; execute's success marker is not counted.
std::string FoldOutput(std::string_view preview, size_t max_chars);

}  // namespace deepbox::run
