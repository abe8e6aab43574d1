#include "mcp/protocol.h"

#include <gtest/gtest.h>

#include "mcp/testing/request_text.h"

namespace deepbox::mcp {
namespace {

using testing::Params;

TEST(Protocol, Versions) {
  EXPECT_EQ(SupportedVersions().front(), "2026-07-28");
  EXPECT_TRUE(IsLegacyVersion("2025-06-18"));
  EXPECT_TRUE(IsLegacyVersion("2025-11-25"));
  EXPECT_FALSE(IsLegacyVersion("2026-07-28"));
  EXPECT_EQ(NegotiateLegacyVersion("2025-06-18"), "2025-06-18");
  EXPECT_EQ(NegotiateLegacyVersion("2024-11-05"), "2025-11-25");
  EXPECT_EQ(NegotiateLegacyVersion("2026-07-28"), "2025-11-25");
}

TEST(Protocol, ModernMeta) {
  auto ok = ReadModernMeta(Params(R"({"_meta":{
      "io.modelcontextprotocol/protocolVersion":"2026-07-28",
      "io.modelcontextprotocol/clientCapabilities":{},
      "io.modelcontextprotocol/clientInfo":{"name":"c","version":"1"}}})"));
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_EQ(ok->protocol_version, "2026-07-28");
  EXPECT_EQ(ok->client_info.at("name"), "c");

  auto missing = ReadModernMeta(Params(R"({})"));
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, kInvalidParams);
  auto no_caps = ReadModernMeta(
      Params(R"({"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}})"));
  ASSERT_FALSE(no_caps);
  EXPECT_EQ(no_caps.error().code, kInvalidParams);

  auto old = ReadModernMeta(Params(R"({"_meta":{
      "io.modelcontextprotocol/protocolVersion":"1900-01-01",
      "io.modelcontextprotocol/clientCapabilities":{}}})"));
  ASSERT_FALSE(old);
  EXPECT_EQ(old.error().code, kUnsupportedProtocolVersion);
  EXPECT_EQ(old.error().data.at("requested"), "1900-01-01");
  EXPECT_EQ(old.error().data.at("supported").as_array().size(), SupportedVersions().size());
}

TEST(Protocol, ProgressToken) {
  EXPECT_EQ(ProgressToken(Params(R"({"_meta":{"progressToken":"t1"}})")), json::value("t1"));
  EXPECT_EQ(ProgressToken(Params(R"({"_meta":{"progressToken":5}})")), json::value(5));
  EXPECT_TRUE(ProgressToken(Params(R"({"_meta":{"progressToken":1.5}})")).is_null());
  EXPECT_TRUE(ProgressToken(Params(R"({})")).is_null());
}

TEST(Protocol, HeaderValueEncoding) {
  // The spec's examples (Value Encoding).
  EXPECT_EQ(EncodeHeaderValue("us-west1"), "us-west1");
  EXPECT_EQ(EncodeHeaderValue("Hello, 世界"), "=?base64?SGVsbG8sIOS4lueVjA==?=");
  EXPECT_EQ(EncodeHeaderValue(" padded "), "=?base64?IHBhZGRlZCA=?=");
  EXPECT_EQ(EncodeHeaderValue("line1\nline2"), "=?base64?bGluZTEKbGluZTI=?=");
  EXPECT_EQ(EncodeHeaderValue("=?base64?literal?="), "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?=");
  for (const char* v :
       {"us-west1", "Hello, 世界", " padded ", "line1\nline2", "=?base64?literal?="}) {
    EXPECT_EQ(DecodeHeaderValue(EncodeHeaderValue(v)), std::optional<std::string>(v)) << v;
  }
  EXPECT_FALSE(DecodeHeaderValue("=?base64?!!!?="));
  EXPECT_FALSE(DecodeHeaderValue(std::string("a\x01") + "b"));
}

}  // namespace
}  // namespace deepbox::mcp
