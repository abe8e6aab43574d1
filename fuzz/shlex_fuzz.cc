// ShlexSplit (the upstream python-runtime /execute's word splitting) on any
// text. Property: the words it returns, each single-quoted the way Python's
// shlex.quote does, split back into the same words.
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "sandboxd/server/shlex.h"

namespace {

std::string Quote(const std::string& word) {
  std::string out = "'";
  for (char c : word) {
    if (c == '\'') {
      out += "'\"'\"'";
    } else {
      out += c;
    }
  }
  return out + "'";
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto words = deepbox::sandboxd::ShlexSplit(text);
  if (!words) return 0;
  std::string requoted;
  for (const auto& w : *words) {
    if (!requoted.empty()) requoted += ' ';
    requoted += Quote(w);
  }
  auto again = deepbox::sandboxd::ShlexSplit(requoted);
  FUZZ_CHECK(again.has_value(), "quoted words do not split again");
  FUZZ_CHECK(*again == *words, "quoted words split into different words");
  return 0;
}
