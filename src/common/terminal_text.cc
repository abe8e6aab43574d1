#include "common/terminal_text.h"

namespace deepbox {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

constexpr unsigned char kEsc = 0x1B;
constexpr unsigned char kBel = 0x07;
constexpr unsigned char kCan = 0x18;
constexpr unsigned char kSub = 0x1A;

unsigned char At(std::string_view t, size_t i) { return static_cast<unsigned char>(t[i]); }

bool IsContinuation(unsigned char b) { return (b & 0xC0) == 0x80; }

// Decodes one strict UTF-8 sequence at t[i] (no overlongs, surrogates or values
// above U+10FFFF). Returns its length, or 0 when invalid; then *skip is the
// length of the maximal invalid subpart to replace with one U+FFFD.
size_t DecodeUtf8(std::string_view t, size_t i, char32_t* cp, size_t* skip) {
  unsigned char b0 = At(t, i);
  size_t need;
  char32_t value;
  char32_t min;
  // The allowed range of the second byte narrows for E0, ED, F0 and F4.
  unsigned char lo = 0x80;
  unsigned char hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
    value = b0 & 0x1F;
    min = 0x80;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    value = b0 & 0x0F;
    min = 0x800;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    value = b0 & 0x07;
    min = 0x10000;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    *skip = 1;
    return 0;
  }
  size_t k = 1;
  for (; k < need; ++k) {
    if (i + k >= t.size()) break;
    unsigned char b = At(t, i + k);
    if (k == 1 ? (b < lo || b > hi) : !IsContinuation(b)) break;
    value = (value << 6) | (b & 0x3F);
  }
  if (k < need || value < min) {
    *skip = k;
    return 0;
  }
  *cp = value;
  return need;
}

// Index after a CSI sequence whose parameters start at t[j]. A byte that cannot
// be part of it ends the sequence there and is processed as text.
size_t SkipCsi(std::string_view t, size_t j) {
  for (; j < t.size(); ++j) {
    unsigned char b = At(t, j);
    if (b >= 0x20 && b <= 0x3F) continue;      // parameter and intermediate bytes
    if (b >= 0x40 && b <= 0x7E) return j + 1;  // final byte
    return j;
  }
  return j;
}

// Index after a control string (OSC, DCS, SOS, PM, APC) whose body starts at
// t[j]: up to BEL, ST (ESC \ or U+009C), or CAN/SUB, which abort it. An ESC not
// followed by '\' ends the string and starts a new sequence.
size_t SkipString(std::string_view t, size_t j) {
  for (; j < t.size(); ++j) {
    unsigned char b = At(t, j);
    if (b == kBel || b == kCan || b == kSub) return j + 1;
    if (b == kEsc) return (j + 1 < t.size() && t[j + 1] == '\\') ? j + 2 : j;
    if (b == 0xC2 && j + 1 < t.size() && At(t, j + 1) == 0x9C) return j + 2;
  }
  return j;
}

// Index after an escape sequence whose ESC was at t[j - 1].
size_t SkipEscape(std::string_view t, size_t j) {
  if (j >= t.size()) return j;
  unsigned char b = At(t, j);
  if (b == '[') return SkipCsi(t, j + 1);
  if (b == ']' || b == 'P' || b == 'X' || b == '^' || b == '_') return SkipString(t, j + 1);
  if (b >= 0x20 && b <= 0x2F) {  // intermediates, then a final byte: ESC ( B
    while (j < t.size() && At(t, j) >= 0x20 && At(t, j) <= 0x2F) ++j;
    if (j < t.size() && At(t, j) >= 0x30 && At(t, j) <= 0x7E) ++j;
    return j;
  }
  if (b >= 0x30 && b <= 0x7E) return j + 1;  // ESC 7, ESC c, ESC M, ...
  return j;                                  // a lone ESC: dropped
}

bool IsBidiControl(char32_t cp) {
  return (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069);
}

bool NeedsWork(std::string_view text, bool one_line) {
  for (char ch : text) {
    unsigned char c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c < 0x7F) continue;
    if (!one_line && (c == '\n' || c == '\t')) continue;
    return true;
  }
  return false;
}

std::string Sanitize(std::string_view t, bool one_line) {
  if (!NeedsWork(t, one_line)) return std::string(t);
  std::string out;
  out.reserve(t.size() + 16);
  size_t i = 0;
  while (i < t.size()) {
    unsigned char c = At(t, i);
    if (c >= 0x20 && c < 0x7F) {
      out.push_back(static_cast<char>(c));
      ++i;
      continue;
    }
    if (c < 0x80) {
      ++i;
      if (c == kEsc) {
        i = SkipEscape(t, i);
      } else if (c == '\t') {
        out.push_back(one_line ? ' ' : '\t');
      } else if (c == '\n' || c == '\r') {
        if (c == '\r' && i < t.size() && t[i] == '\n') ++i;
        if (one_line) {
          out.append(kReplacement);
        } else {
          out.push_back('\n');
        }
      } else {
        out.append(kReplacement);  // other C0 controls and DEL
      }
      continue;
    }
    char32_t cp = 0;
    size_t skip = 0;
    size_t len = DecodeUtf8(t, i, &cp, &skip);
    if (len == 0) {
      out.append(kReplacement);
      i += skip;
      continue;
    }
    if (cp >= 0x80 && cp <= 0x9F) {  // C1 controls, as UTF-8
      i += len;
      if (cp == 0x9B) {
        i = SkipCsi(t, i);
      } else if (cp == 0x9D || cp == 0x90 || cp == 0x98 || cp == 0x9E || cp == 0x9F) {
        i = SkipString(t, i);
      } else {
        out.append(kReplacement);
      }
      continue;
    }
    if (IsBidiControl(cp)) {
      out.append(kReplacement);
    } else {
      out.append(t.substr(i, len));
    }
    i += len;
  }
  return out;
}

}  // namespace

std::string SanitizeForTerminal(std::string_view text) { return Sanitize(text, false); }

std::string SanitizeLineForTerminal(std::string_view text) { return Sanitize(text, true); }

}  // namespace deepbox
