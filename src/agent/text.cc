#include "agent/text.h"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <random>

namespace deepbox::agent {
namespace {

// Length of the UTF-8 sequence starting at text[i]; 1 for invalid bytes.
size_t SeqLen(std::string_view text, size_t i) {
  unsigned char c = static_cast<unsigned char>(text[i]);
  size_t len = 1;
  if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
  } else if (c >= 0xE0) {
    len = 3;
  } else if (c >= 0xC2 && c < 0xE0) {
    len = 2;
  } else {
    return 1;
  }
  if (i + len > text.size()) return 1;
  for (size_t k = 1; k < len; ++k) {
    unsigned char cc = static_cast<unsigned char>(text[i + k]);
    if ((cc & 0xC0) != 0x80) return 1;
  }
  return len;
}

}  // namespace

size_t CodePointCount(std::string_view text) {
  size_t n = 0;
  for (size_t i = 0; i < text.size(); i += SeqLen(text, i)) ++n;
  return n;
}

size_t CodePointPrefixBytes(std::string_view text, size_t n) {
  size_t i = 0;
  while (n > 0 && i < text.size()) {
    i += SeqLen(text, i);
    --n;
  }
  return i;
}

std::string_view CodePointPrefix(std::string_view text, size_t n) {
  return text.substr(0, CodePointPrefixBytes(text, n));
}

std::vector<std::string_view> ChunkByCodePoints(std::string_view text, size_t n) {
  std::vector<std::string_view> chunks;
  if (text.empty() || n == 0) {
    chunks.push_back(text);
    return chunks;
  }
  // Fast path: pure byte count bound.
  if (text.size() <= n) {
    chunks.push_back(text);
    return chunks;
  }
  size_t start = 0;
  while (start < text.size()) {
    size_t len = CodePointPrefixBytes(text.substr(start), n);
    chunks.push_back(text.substr(start, len));
    start += len;
  }
  return chunks;
}

std::vector<std::string_view> SplitOn(std::string_view text, char sep) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    size_t pos = text.find(sep, start);
    if (pos == std::string_view::npos) {
      parts.push_back(text.substr(start));
      break;
    }
    parts.push_back(text.substr(start, pos - start));
    start = pos + 1;
  }
  return parts;
}

std::vector<std::string_view> SplitLines(std::string_view text) {
  std::vector<std::string_view> lines;
  size_t start = 0;
  size_t i = 0;
  while (i < text.size()) {
    char c = text[i];
    if (c == '\n' || c == '\r') {
      lines.push_back(text.substr(start, i - start));
      if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
      ++i;
      start = i;
    } else {
      ++i;
    }
  }
  if (start < text.size()) lines.push_back(text.substr(start));
  return lines;
}

namespace {
bool IsAsciiSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
}  // namespace

bool IsBlank(std::string_view text) {
  for (char c : text) {
    if (!IsAsciiSpace(c)) return false;
  }
  return true;
}

std::string_view TrimRight(std::string_view text) {
  while (!text.empty() && IsAsciiSpace(text.back())) text.remove_suffix(1);
  return text;
}

std::string_view Trim(std::string_view text) {
  text = TrimRight(text);
  while (!text.empty() && IsAsciiSpace(text.front())) text.remove_prefix(1);
  return text;
}

bool StartsWith(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

bool EndsWith(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

std::string ReplaceAll(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  if (from.empty()) return std::string(text);
  size_t start = 0;
  while (true) {
    size_t pos = text.find(from, start);
    if (pos == std::string_view::npos) break;
    out.append(text.substr(start, pos - start));
    out.append(to);
    start = pos + from.size();
  }
  out.append(text.substr(start));
  return out;
}

std::string Join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out.append(sep);
    out.append(parts[i]);
  }
  return out;
}

std::string AsciiLower(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

std::string IsoNowUtc() {
  auto now = std::chrono::system_clock::now();
  auto secs = std::chrono::time_point_cast<std::chrono::seconds>(now);
  auto micros = std::chrono::duration_cast<std::chrono::microseconds>(now - secs).count();
  std::time_t t = std::chrono::system_clock::to_time_t(secs);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%06lld+00:00", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<long long>(micros));
  return buf;
}

}  // namespace deepbox::agent
