#include "common/random.h"

#include <gtest/gtest.h>

#include <set>

namespace deepbox {
namespace {

TEST(RandomHexTest, GivesThatManyHexDigitsAndNeverTheSameTwice) {
  for (size_t n : {0u, 1u, 7u, 8u, 32u, 65u}) {
    std::string s = RandomHex(n);
    EXPECT_EQ(s.size(), n);
    EXPECT_EQ(s.find_first_not_of("0123456789abcdef"), std::string::npos) << s;
  }
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) EXPECT_TRUE(seen.insert(RandomHex(16)).second);
  // Every digit turns up (4 random bits each, odd lengths included).
  std::string many;
  for (int i = 0; i < 200; ++i) many += RandomHex(9);
  for (char c : std::string("0123456789abcdef")) EXPECT_NE(many.find(c), std::string::npos) << c;
}

}  // namespace
}  // namespace deepbox
