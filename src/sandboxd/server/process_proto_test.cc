#include "sandboxd/server/process_proto.h"

#include <gtest/gtest.h>

#include <string>

namespace deepbox::sandboxd::proto {
namespace {

using namespace std::string_literals;

// What the upstream SDK's generated code (python protobuf) serializes for
// ExecuteRequest(config=ProcessConfig(command=["/bin/sh","-c","echo hi"],
// env_vars={"A":"1"}, cwd="sub")).
const std::string kSdkExecuteRequest =
    "\n#\n\x07/bin/sh\n\x02-c\n\x07"
    "echo hi\x12\x06\n\x01"
    "A\x12\x01"
    "1\x1a\x03sub"s;

TEST(ProcessProto, DecodesWhatTheSdkSends) {
  auto r = DecodeExecuteRequest(kSdkExecuteRequest);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->config.command, (std::vector<std::string>{"/bin/sh", "-c", "echo hi"}));
  EXPECT_EQ(r->config.env_vars, (std::map<std::string, std::string>{{"A", "1"}}));
  EXPECT_EQ(r->config.cwd, "sub");
}

TEST(ProcessProto, EncodesTheSameBytesAsProtobuf) {
  ExecuteRequest request;
  request.config.command = {"/bin/sh", "-c", "echo hi"};
  request.config.env_vars = {{"A", "1"}};
  request.config.cwd = "sub";
  EXPECT_EQ(EncodeExecuteRequest(request), kSdkExecuteRequest);
  // python protobuf: ExecuteResponse(exit_code=-1, stdout=b"out").
  EXPECT_EQ(EncodeExecuteResponse({.exit_code = -1, .stdout_data = "out", .stderr_data = ""}),
            "\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01\x12\x03out"s);
  EXPECT_EQ(EncodeExecuteResponse({.exit_code = 300, .stdout_data = "", .stderr_data = "e"}),
            "\x08\xac\x02\x1a\x01"
            "e"s);
  EXPECT_EQ(EncodeExecuteResponse({}), "");  // proto3 defaults are not written
}

TEST(ProcessProto, ResponsesRoundTrip) {
  for (int32_t code : {0, 1, 124, -1, INT32_MIN, INT32_MAX}) {
    ExecuteResponse in{.exit_code = code, .stdout_data = "o\0ut"s, .stderr_data = "\xff"s};
    auto out = DecodeExecuteResponse(EncodeExecuteResponse(in));
    ASSERT_TRUE(out) << out.error().message;
    EXPECT_EQ(out->exit_code, code);
    EXPECT_EQ(out->stdout_data, in.stdout_data);
    EXPECT_EQ(out->stderr_data, in.stderr_data);
  }
}

TEST(ProcessProto, EmptyMessageIsAnEmptyConfig) {
  auto r = DecodeExecuteRequest("");
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->config.command.empty());
  EXPECT_FALSE(r->config.cwd.has_value());
}

TEST(ProcessProto, UnknownFieldsOfEveryWireTypeAreSkipped) {
  WireWriter config;
  config.Bytes(1, "ls");
  config.Varint(9, 12345);                // unknown varint
  config.data() += "\x55"s + "abcd";      // field 10, fixed32
  config.data() += "\x59"s + "abcdefgh";  // field 11, fixed64
  config.Bytes(12, "ignored");            // unknown length-delimited
  config.Varint(1, 7);                    // known number, wrong wire type
  WireWriter request;
  request.Bytes(1, config.data());
  request.Bytes(99, "x");
  auto r = DecodeExecuteRequest(request.data());
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->config.command, std::vector<std::string>{"ls"});
}

TEST(ProcessProto, RepeatedConfigsMergeAndLastMapValueWins) {
  ProcessConfig a{.command = {"a"}, .env_vars = {{"K", "1"}}, .cwd = "x"};
  ProcessConfig b{.command = {"b"}, .env_vars = {{"K", "2"}}, .cwd = "y"};
  WireWriter w;
  w.Bytes(1, EncodeProcessConfig(a));
  w.Bytes(1, EncodeProcessConfig(b));
  auto r = DecodeExecuteRequest(w.data());
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->config.command, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(r->config.env_vars.at("K"), "2");
  EXPECT_EQ(r->config.cwd, "y");
}

TEST(ProcessProto, MalformedInputIsRefusedWithoutReadingPastTheEnd) {
  const std::string cases[] = {
      "\x0a"s,  // tag, no length
      "\x0a\x05"
      "abc"s,                                               // length beyond the end
      "\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"s,      // absurd length
      "\x0a\x80"s,                                          // varint cut short
      "\x08\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01"s,  // varint of 11 bytes
      "\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\x02"s,      // varint beyond 64 bits
      "\x00\x01"s,                                          // field number 0
      "\x0b"s,                                              // wire type 3 (group start)
      "\x0f"s,                                              // wire type 7
      "\x0d\x01\x02"s,                                      // fixed32 cut short
      "\x09\x01"s,                                          // fixed64 cut short
      "\x0a\x02\x0a\x05"s,          // nested: command longer than its config
      "\x0a\x04\x12\x02\x0a\x05"s,  // nested: env entry key beyond its entry
      "\x80\x80\x80\x80\x80\x01"s,  // tag beyond 32 bits
  };
  for (const auto& bytes : cases) {
    auto r = DecodeExecuteRequest(bytes);
    ASSERT_FALSE(r) << ::testing::PrintToString(bytes);
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(r.error().message.find("malformed protobuf"), std::string::npos) << r.error().message;
  }
}

TEST(ProcessProto, EveryTruncationOfAValidMessageIsHandled) {
  // No prefix may crash; each either decodes (a field boundary) or is refused.
  for (size_t n = 0; n <= kSdkExecuteRequest.size(); ++n) {
    auto r = DecodeExecuteRequest(std::string_view(kSdkExecuteRequest).substr(0, n));
    if (r) {
      EXPECT_LE(r->config.command.size(), 3u);
    }
  }
}

}  // namespace
}  // namespace deepbox::sandboxd::proto
