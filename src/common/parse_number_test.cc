#include "common/parse_number.h"

#include <gtest/gtest.h>

#include <limits>

#include "common/json.h"

namespace deepbox {
namespace {

TEST(ParseNumberTest, U64) {
  EXPECT_EQ(ParseU64("0"), 0u);
  EXPECT_EQ(ParseU64("18446744073709551615"), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(ParseU64("ff", 16), 255u);
  for (std::string_view bad :
       {"", "-1", "+1", " 1", "1 ", "1x", "zz", "18446744073709551616", "1e3", "0x10", "١"}) {
    EXPECT_FALSE(ParseU64(bad).has_value()) << bad;
  }
}

TEST(ParseNumberTest, I64) {
  EXPECT_EQ(ParseI64("-9223372036854775808"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(ParseI64("9223372036854775807"), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(ParseI64("-5"), -5);
  for (std::string_view bad :
       {"", "-", "+5", "9223372036854775808", "-9223372036854775809", "5.0", "\t5"}) {
    EXPECT_FALSE(ParseI64(bad).has_value()) << bad;
  }
}

TEST(ParseNumberTest, NarrowTypesCheckTheirRange) {
  EXPECT_EQ(ParseInteger<int>("2147483647"), 2147483647);
  EXPECT_FALSE(ParseInteger<int>("2147483648").has_value());
  EXPECT_FALSE(ParseInteger<uint16_t>("65536").has_value());
  EXPECT_EQ(ParseInteger<uint16_t>("65535"), 65535);
}

TEST(ParseNumberTest, Double) {
  EXPECT_EQ(ParseDouble("1.5"), 1.5);
  EXPECT_EQ(ParseDouble("-2e3"), -2000.0);
  EXPECT_EQ(ParseDouble("0"), 0.0);
  for (std::string_view bad :
       {"", "inf", "-inf", "nan", "NaN", "1e400", "-1e400", "+1", "1.5x", " 1", "0x1p3", "."}) {
    EXPECT_FALSE(ParseDouble(bad).has_value()) << bad;
  }
}

TEST(ParseNumberTest, FileMode) {
  EXPECT_EQ(ParseFileMode("644"), 0644u);
  EXPECT_EQ(ParseFileMode("0755"), 0755u);
  EXPECT_EQ(ParseFileMode("7777"), 07777u);
  for (std::string_view bad :
       {"", "zz", "8", "0o644", "-1", "17777", "4294967296", "0644 ", "0000000000000644"}) {
    EXPECT_FALSE(ParseFileMode(bad).has_value()) << bad;
  }
}

TEST(ParseNumberTest, DoubleToInt64) {
  EXPECT_EQ(DoubleToInt64(3.0), 3);
  EXPECT_EQ(DoubleToInt64(-9223372036854775808.0), std::numeric_limits<int64_t>::min());
  EXPECT_FALSE(DoubleToInt64(9223372036854775808.0).has_value());
  EXPECT_FALSE(DoubleToInt64(1.5).has_value());
  EXPECT_FALSE(DoubleToInt64(std::numeric_limits<double>::infinity()).has_value());
  EXPECT_FALSE(DoubleToInt64(std::numeric_limits<double>::quiet_NaN()).has_value());
}

TEST(ParseNumberTest, JsonToInt64AndGetOptIntRejectHugeNumbers) {
  // Boost.JSON parses 1e400 as infinity and 2^64 as a double.
  for (std::string_view text :
       {"1e400", "-1e400", "18446744073709551615", "1e19", "1.5", "\"5\"", "true", "null"}) {
    auto v = ParseJson(text);
    ASSERT_TRUE(v) << text;
    EXPECT_FALSE(JsonToInt64(*v).has_value()) << text;
  }
  EXPECT_EQ(JsonToInt64(*ParseJson("12")), 12);
  EXPECT_EQ(JsonToInt64(*ParseJson("1e3")), 1000);
  EXPECT_EQ(JsonToInt64(*ParseJson("-7")), -7);
  auto o = ParseJsonObject(R"({"n": 1e400})");
  ASSERT_TRUE(o);
  auto n = GetOptInt(*o, "n");
  ASSERT_FALSE(n);
  EXPECT_EQ(n.error().code, ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace deepbox
