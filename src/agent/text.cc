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
