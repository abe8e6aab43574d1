#include "sandboxd/server/shlex.h"

namespace deepbox::sandboxd {

Result<std::vector<std::string>> ShlexSplit(std::string_view text) {
  std::vector<std::string> words;
  std::string cur;
  bool in_word = false;
  enum { kNone, kSingle, kDouble } quote = kNone;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (quote == kSingle) {
      if (c == '\'')
        quote = kNone;
      else
        cur.push_back(c);
      continue;
    }
    if (quote == kDouble) {
      if (c == '"') {
        quote = kNone;
      } else if (c == '\\') {
        if (i + 1 >= text.size())
          return MakeError(ErrorCode::kInvalidArgument, "No closing quotation");
        char n = text[i + 1];
        // Inside double quotes only these are escapable (as in POSIX sh).
        if (n == '"' || n == '\\' || n == '$' || n == '`' || n == '\n') {
          cur.push_back(n);
          ++i;
        } else {
          cur.push_back(c);
        }
      } else {
        cur.push_back(c);
      }
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      if (in_word) {
        words.push_back(std::move(cur));
        cur.clear();
        in_word = false;
      }
      continue;
    }
    in_word = true;
    if (c == '\'') {
      quote = kSingle;
    } else if (c == '"') {
      quote = kDouble;
    } else if (c == '\\') {
      if (i + 1 >= text.size())
        return MakeError(ErrorCode::kInvalidArgument, "No escaped character");
      cur.push_back(text[++i]);
    } else {
      cur.push_back(c);
    }
  }
  if (quote != kNone) return MakeError(ErrorCode::kInvalidArgument, "No closing quotation");
  if (in_word) words.push_back(std::move(cur));
  return words;
}

}  // namespace deepbox::sandboxd
