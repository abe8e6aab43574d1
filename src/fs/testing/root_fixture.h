// A test fixture for code that works beneath a Root: a fresh directory as the
// root, opened once with openat2 and once with the fallback walk (the test's
// bool parameter), beside an "outside" directory whose secret.txt nothing
// may reach. Header-only: the tests that use it link gtest already.
#pragma once

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <string_view>

#include "fs/path_resolver.h"
#include "fs/testing/test_util.h"

namespace deepbox::fs::testing {

class RootOnBothResolvers : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    dir_ = tmp_.Path("root");
    outside_ = tmp_.Path("outside");
    MakeDirRaw(dir_);
    MakeDirRaw(outside_);
    WriteRaw(outside_ + "/secret.txt", "outside");
    auto root = Root::Open(dir_, RootOptions{.force_fallback = GetParam()});
    ASSERT_TRUE(root) << root.error().ToString();
    root_.emplace(std::move(*root));
  }
  // The real path of `rel` beneath the root.
  std::string P(std::string_view rel) const { return dir_ + "/" + std::string(rel); }

  TempDir tmp_;
  std::string dir_;
  std::string outside_;
  std::optional<Root> root_;
};

}  // namespace deepbox::fs::testing
