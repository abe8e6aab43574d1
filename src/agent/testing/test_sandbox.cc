#include "agent/testing/test_sandbox.h"

#include <unistd.h>

namespace deepbox::agent::testing {

std::unique_ptr<deepbox::testing::ScopedSandboxd> StartSandbox(std::string* why) {
  std::string binary = deepbox::testing::ScopedSandboxd::DefaultBinary();
  if (::access(binary.c_str(), X_OK) != 0) {
    *why = "no daemon binary at " + binary;
    return nullptr;
  }
  auto s = deepbox::testing::ScopedSandboxd::Start();
  if (!s) {
    *why = s.error().ToString();
    return nullptr;
  }
  return std::move(*s);
}

}  // namespace deepbox::agent::testing
