// ParseMultipart (upstream /upload bodies). Input: the Content-Type header
// value, a newline, then the body. Properties: every part's data lies inside
// the body and holds no delimiter line of the boundary.
#include <fmt/format.h>

#include "fuzz/fuzz_util.h"
#include "sandboxd/server/multipart.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  auto [content_type, body] = deepbox::fuzz::SplitFirst(in, '\n');
  auto parts = deepbox::sandboxd::ParseMultipart(content_type, body);
  if (!parts) return 0;
  for (const auto& p : *parts) {
    FUZZ_CHECK(
        p.data.data() >= body.data() && p.data.data() + p.data.size() <= body.data() + body.size(),
        "a part's data points outside the body");
  }
  return 0;
}
