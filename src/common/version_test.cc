#include "common/version.h"

#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>
#include <string>

namespace deepbox {
namespace {

// The generated header says what CMakeLists.txt's project(VERSION) says.
TEST(VersionTest, IsTheProjectVersion) {
  std::ifstream in(std::string(DEEPBOX_SOURCE_DIR) + "/CMakeLists.txt");
  ASSERT_TRUE(in) << "cannot read CMakeLists.txt";
  std::stringstream text;
  text << in.rdbuf();
  std::smatch m;
  const std::string s = text.str();
  ASSERT_TRUE(std::regex_search(s, m, std::regex(R"(project\(deepbox VERSION ([0-9.]+))")));
  EXPECT_EQ(kVersion, m[1].str());
  EXPECT_TRUE(std::regex_match(std::string(kVersion), std::regex(R"([0-9]+\.[0-9]+\.[0-9]+)")));
}

}  // namespace
}  // namespace deepbox
