// Test support: the real deepbox-sandboxd daemon (ScopedSandboxd) for agent
// tests. DEEPBOX_AGENT_SANDBOX(var) starts one or skips the test with the
// reason when the daemon cannot run here.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "sandbox/testing/scoped_sandboxd.h"

namespace deepbox::agent::testing {

// nullptr + `why` when the daemon binary is missing or does not start.
std::unique_ptr<deepbox::testing::ScopedSandboxd> StartSandbox(std::string* why);

}  // namespace deepbox::agent::testing

#define DEEPBOX_AGENT_SANDBOX(var)                                \
  std::string var##_why;                                          \
  auto var = ::deepbox::agent::testing::StartSandbox(&var##_why); \
  if (!var) GTEST_SKIP() << "real sandbox daemon unavailable: " << var##_why
