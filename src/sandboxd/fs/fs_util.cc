#include "sandboxd/fs/fs_util.h"

#include <algorithm>
#include <cstring>
#include <ctime>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "common/utf8.h"

namespace deepbox::sandboxd::fs {

bool HasNulInHead(std::string_view data) {
  size_t n = std::min(data.size(), kBinaryProbeBytes);
  return std::memchr(data.data(), 0, n) != nullptr;
}

bool LooksBinary(std::string_view data) {
  if (HasNulInHead(data)) return true;
  std::string_view head = data.substr(0, kBinaryProbeBytes);
  if (data.size() > kBinaryProbeBytes) head = head.substr(0, Utf8CompletePrefix(head));
  return !IsValidUtf8(head);
}

size_t CountNewlines(const char* data, size_t len) {
  size_t count = 0;
  size_t i = 0;
#if defined(__SSE2__)
  // Per-byte counters (0 - 0xFF per match), summed with SAD every 255 blocks:
  // no popcount instruction needed (plain x86-64 has none).
  const __m128i nl = _mm_set1_epi8('\n');
  const __m128i zero = _mm_setzero_si128();
  while (i + 16 <= len) {
    size_t blocks = std::min<size_t>((len - i) / 16, 255);
    __m128i acc = zero;
    for (size_t k = 0; k < blocks; ++k, i += 16) {
      __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(data + i));
      acc = _mm_sub_epi8(acc, _mm_cmpeq_epi8(v, nl));
    }
    __m128i sums = _mm_sad_epu8(acc, zero);
    count += static_cast<size_t>(_mm_cvtsi128_si32(sums)) +
             static_cast<size_t>(_mm_extract_epi16(sums, 4));
  }
#endif
  for (; i < len; ++i) count += data[i] == '\n';
  return count;
}

std::string FormatRfc3339(const struct timespec& ts) {
  struct tm tm;
  time_t secs = ts.tv_sec;
  const bool ok = gmtime_r(&secs, &tm) != nullptr;
  const long year = ok ? tm.tm_year + 1900L : 0;
  if (ok && year >= 1000 && year <= 9999) {  // %Y does not pad: other years below
    // What strftime("%Y-%m-%dT%H:%M:%SZ") gives, without its locale machinery
    // (a listing formats one per entry).
    char out[20];
    auto put2 = [&out](int at, int v) {
      out[at] = static_cast<char>('0' + v / 10);
      out[at + 1] = static_cast<char>('0' + v % 10);
    };
    put2(0, static_cast<int>(year / 100));
    put2(2, static_cast<int>(year % 100));
    out[4] = '-';
    put2(5, tm.tm_mon + 1);
    out[7] = '-';
    put2(8, tm.tm_mday);
    out[10] = 'T';
    put2(11, tm.tm_hour);
    out[13] = ':';
    put2(14, tm.tm_min);
    out[16] = ':';
    put2(17, tm.tm_sec);
    out[19] = 'Z';
    return std::string(out, sizeof out);
  }
  char buf[64];
  size_t n = std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return std::string(buf, n);
}

}  // namespace deepbox::sandboxd::fs
