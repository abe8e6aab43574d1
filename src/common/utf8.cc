#include "common/utf8.h"

#include <utf8.h>

namespace deepbox {

bool IsValidUtf8(std::string_view text) { return utf8::is_valid(text.begin(), text.end()); }

std::string SanitizeUtf8(std::string_view text) {
  if (IsValidUtf8(text)) return std::string(text);
  std::string out;
  out.reserve(text.size() + 8);
  utf8::replace_invalid(text.begin(), text.end(), std::back_inserter(out));
  return out;
}

size_t Utf8CompletePrefix(std::string_view text) {
  // Walk back over at most 3 continuation bytes to find the last lead byte.
  size_t n = text.size();
  size_t i = n;
  int back = 0;
  while (i > 0 && back < 4) {
    unsigned char c = static_cast<unsigned char>(text[i - 1]);
    if ((c & 0xC0) != 0x80) {
      size_t need = 1;
      if ((c & 0xE0) == 0xC0)
        need = 2;
      else if ((c & 0xF0) == 0xE0)
        need = 3;
      else if ((c & 0xF8) == 0xF0)
        need = 4;
      return (n - (i - 1) >= need) ? n : i - 1;
    }
    --i;
    ++back;
  }
  return n;
}

}  // namespace deepbox
