#include "common/base64.h"

#include <array>
#include <cstdint>

namespace deepbox {
namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// Sextet of each byte, -1 for bytes outside the alphabet.
constexpr std::array<int8_t, 256> kSextet = [] {
  std::array<int8_t, 256> t{};
  t.fill(-1);
  for (int i = 0; i < 64; ++i) t[static_cast<uint8_t>(kAlphabet[i])] = static_cast<int8_t>(i);
  return t;
}();

}  // namespace

// Both directions write into a buffer sized once: every file read and write
// of the daemon's API passes through here (a byte-at-a-time push_back was a
// tenth of the daemon's time for a 4 KiB write).
std::string Base64Encode(std::string_view data) {
  std::string out((data.size() + 2) / 3 * 4, '\0');
  char* o = out.data();
  const auto* in = reinterpret_cast<const uint8_t*>(data.data());
  size_t i = 0;
  for (; i + 3 <= data.size(); i += 3, o += 4) {
    const uint32_t v = (uint32_t{in[i]} << 16) | (uint32_t{in[i + 1]} << 8) | in[i + 2];
    o[0] = kAlphabet[(v >> 18) & 63];
    o[1] = kAlphabet[(v >> 12) & 63];
    o[2] = kAlphabet[(v >> 6) & 63];
    o[3] = kAlphabet[v & 63];
  }
  const size_t rest = data.size() - i;
  if (rest > 0) {
    const uint32_t v = (uint32_t{in[i]} << 16) | (rest == 2 ? uint32_t{in[i + 1]} << 8 : 0);
    o[0] = kAlphabet[(v >> 18) & 63];
    o[1] = kAlphabet[(v >> 12) & 63];
    o[2] = rest == 2 ? kAlphabet[(v >> 6) & 63] : '=';
    o[3] = '=';
  }
  return out;
}

std::optional<std::string> Base64Decode(std::string_view text) {
  while (!text.empty() && text.back() == '=') text.remove_suffix(1);
  // At most 3 bytes per 4 characters (line breaks only make it less).
  std::string out(text.size() / 4 * 3 + 3, '\0');
  char* o = out.data();
  const auto* in = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  uint32_t acc = 0;
  int bits = 0;
  size_t i = 0;
  while (i < n) {
    // Four characters of the alphabet at a sextet boundary: three bytes at once.
    if (bits == 0 && i + 4 <= n) {
      const int32_t a = kSextet[in[i]], b = kSextet[in[i + 1]], c = kSextet[in[i + 2]],
                    d = kSextet[in[i + 3]];
      if ((a | b | c | d) >= 0) {
        const uint32_t v = (static_cast<uint32_t>(a) << 18) | (static_cast<uint32_t>(b) << 12) |
                           (static_cast<uint32_t>(c) << 6) | static_cast<uint32_t>(d);
        o[0] = static_cast<char>(v >> 16);
        o[1] = static_cast<char>(v >> 8);
        o[2] = static_cast<char>(v);
        o += 3;
        i += 4;
        continue;
      }
    }
    // One at a time: line breaks are skipped, anything else outside the
    // alphabet is invalid.
    const uint8_t ch = in[i++];
    if (ch == '\n' || ch == '\r') continue;
    const int8_t v = kSextet[ch];
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      *o++ = static_cast<char>((acc >> bits) & 0xFF);
    }
  }
  if (bits >= 6) return std::nullopt;  // a single dangling sextet is not valid base64
  out.resize(static_cast<size_t>(o - out.data()));
  return out;
}

}  // namespace deepbox
