#include "common/random.h"

#include <sys/random.h>

#include <cerrno>
#include <cstdlib>

namespace deepbox {

std::string RandomHex(size_t chars) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string raw((chars + 1) / 2, '\0');
  for (size_t got = 0; got < raw.size();) {
    ssize_t n = ::getrandom(raw.data() + got, raw.size() - got, 0);
    if (n < 0 && errno == EINTR) continue;
    // getrandom(2) does not fail for a valid buffer once the pool is
    // initialised (it blocks until then): anything else is a broken kernel.
    if (n <= 0) std::abort();
    got += static_cast<size_t>(n);
  }
  std::string out;
  out.reserve(chars);
  for (unsigned char c : raw) {
    out += kHex[c >> 4];
    if (out.size() < chars) out += kHex[c & 15];
  }
  return out;
}

}  // namespace deepbox
