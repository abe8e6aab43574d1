// The small string helpers every folder needs: trimming, splitting on a
// byte, lines, joining, ASCII lower case. Byte-oriented and locale-free (a
// locale must not change how a header or a selector is parsed); Python's
// str methods are the model where the agent has to match deepagents.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace deepbox {

// Python's str.strip() set: space, \t, \n, \v, \f, \r (what std::isspace
// means in the "C" locale).
inline constexpr std::string_view kAsciiWhitespace = " \t\n\v\f\r";

// Views without the leading / trailing / both runs of bytes in `chars`.
std::string_view TrimLeft(std::string_view text, std::string_view chars = kAsciiWhitespace);
std::string_view TrimRight(std::string_view text, std::string_view chars = kAsciiWhitespace);
std::string_view Trim(std::string_view text, std::string_view chars = kAsciiWhitespace);
// Empty or only ASCII whitespace (Python: text.strip() == "").
bool IsBlank(std::string_view text);

// Python's text.split(sep): every field, the empty ones too ("" gives {""},
// "a,,b," gives {"a", "", "b", ""}). The views point into `text`.
std::vector<std::string_view> Split(std::string_view text, char sep);
// Python's str.splitlines() for \n, \r\n and \r: no trailing empty line.
std::vector<std::string_view> SplitLines(std::string_view text);

// parts[0] + sep + parts[1] + ...; empty parts are kept.
std::string Join(const std::vector<std::string>& parts, std::string_view sep);
// Every occurrence of `from` (non-empty; else text unchanged) replaced.
std::string ReplaceAll(std::string_view text, std::string_view from, std::string_view to);
// A-Z lowered, every other byte unchanged.
std::string AsciiLower(std::string_view text);

}  // namespace deepbox
