#include "mcp/server.h"

#include <gtest/gtest.h>

#include "mcp/protocol.h"
#include "mcp/testing/request_text.h"
#include "mcp/testing/test_registry.h"

namespace deepbox::mcp {
namespace {

// The `_meta` member, closed.
const std::string kMeta = std::string(testing::kModernMeta) + "}";

Message Msg(const std::string& text) {
  auto m = ParseMessage(text);
  EXPECT_TRUE(m) << text;
  return *m;
}

class ServerTest : public ::testing::Test {
 protected:
  McpServer server{testing::TestRegistry(), ServerConfig{"use the tools", 60000}};
  testing::PlainContext ctx;
};

TEST_F(ServerTest, DiscoverIsModernAndCacheable) {
  LegacySession session;
  Reply r = server.Handle(
      Msg(std::string(R"({"jsonrpc":"2.0","id":1,"method":"server/discover","params":{)") + kMeta +
          "}}"),
      &session, ctx);
  ASSERT_FALSE(r.error);
  EXPECT_TRUE(r.modern);
  EXPECT_EQ(r.result.at("resultType"), "complete");
  EXPECT_EQ(r.result.at("supportedVersions").at(0), "2026-07-28");
  EXPECT_EQ(r.result.at("capabilities").at("tools").at("listChanged"), false);
  EXPECT_EQ(r.result.at("ttlMs"), 60000);
  EXPECT_EQ(r.result.at("cacheScope"), "public");
  EXPECT_EQ(r.result.at("instructions"), "use the tools");
  EXPECT_EQ(r.result.at("_meta").at(kMetaServerInfo).at("name"), "deepbox");
  EXPECT_FALSE(session.initialized());  // stateless: nothing remembered
}

TEST_F(ServerTest, ModernListAndCallNeedNoHandshake) {
  Reply list =
      server.Handle(Msg(std::string(R"({"jsonrpc":"2.0","id":1,"method":"tools/list","params":{)") +
                        kMeta + "}}"),
                    nullptr, ctx);
  ASSERT_FALSE(list.error);
  EXPECT_EQ(list.result.at("tools").as_array().size(), 4u);
  EXPECT_EQ(list.result.at("resultType"), "complete");
  EXPECT_TRUE(list.result.contains("ttlMs"));
  Reply call =
      server.Handle(Msg(std::string(R"({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{)") +
                        kMeta + R"(,"name":"echo","arguments":{"text":"x"}}})"),
                    nullptr, ctx);
  ASSERT_FALSE(call.error);
  EXPECT_EQ(call.result.at("content").at(0).at("text"), "x");
  EXPECT_EQ(call.result.at("resultType"), "complete");
}

TEST_F(ServerTest, ModernErrors) {
  // A bad version: -32022 naming what is supported.
  Reply v = server.Handle(Msg(R"({"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{
      "io.modelcontextprotocol/protocolVersion":"1900-01-01",
      "io.modelcontextprotocol/clientCapabilities":{}}}})"),
                          nullptr, ctx);
  ASSERT_TRUE(v.error);
  EXPECT_EQ(v.error->code, kUnsupportedProtocolVersion);
  EXPECT_EQ(HttpStatusForError(v.error->code), 400);
  // ping was removed in 2026-07-28.
  Reply p = server.Handle(
      Msg(std::string(R"({"jsonrpc":"2.0","id":1,"method":"ping","params":{)") + kMeta + "}}"),
      nullptr, ctx);
  ASSERT_TRUE(p.error);
  EXPECT_EQ(p.error->code, kMethodNotFound);
  EXPECT_EQ(HttpStatusForError(p.error->code), 404);
  Reply u = server.Handle(
      Msg(std::string(R"({"jsonrpc":"2.0","id":1,"method":"resources/list","params":{)") + kMeta +
          "}}"),
      nullptr, ctx);
  ASSERT_TRUE(u.error);
  EXPECT_EQ(u.error->code, kMethodNotFound);
  Reply t =
      server.Handle(Msg(std::string(R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{)") +
                        kMeta + R"(,"name":"nope"}})"),
                    nullptr, ctx);
  ASSERT_TRUE(t.error);
  EXPECT_EQ(t.error->code, kInvalidParams);
  Reply c =
      server.Handle(Msg(std::string(R"({"jsonrpc":"2.0","id":1,"method":"tools/list","params":{)") +
                        kMeta + R"(,"cursor":"x"}})"),
                    nullptr, ctx);
  ASSERT_TRUE(c.error);
  EXPECT_EQ(c.error->code, kInvalidParams);
}

TEST_F(ServerTest, NoEnvelopeAndNoHandshakeIsRefused) {
  LegacySession session;
  Reply r = server.Handle(Msg(R"({"jsonrpc":"2.0","id":1,"method":"tools/list"})"), &session, ctx);
  ASSERT_TRUE(r.error);
  EXPECT_EQ(r.error->code, kInvalidParams);
  EXPECT_NE(r.error->message.find("io.modelcontextprotocol/protocolVersion"), std::string::npos);
}

TEST_F(ServerTest, LegacyHandshake) {
  for (const char* version : {"2025-06-18", "2025-11-25"}) {
    LegacySession session;
    Reply init = server.Handle(
        Msg(std::string(R"({"jsonrpc":"2.0","id":0,"method":"initialize","params":{)") +
            R"("protocolVersion":")" + version +
            R"(","capabilities":{},"clientInfo":{"name":"t","version":"1"}}})"),
        &session, ctx);
    ASSERT_FALSE(init.error);
    EXPECT_FALSE(init.modern);
    EXPECT_EQ(init.result.at("protocolVersion"), version);
    EXPECT_EQ(init.result.at("serverInfo").at("name"), "deepbox");
    EXPECT_TRUE(init.result.at("capabilities").as_object().contains("tools"));
    EXPECT_FALSE(init.result.contains("resultType"));
    server.HandleNotification(Msg(R"({"jsonrpc":"2.0","method":"notifications/initialized"})"),
                              &session);
    EXPECT_TRUE(session.ready());
    Reply list =
        server.Handle(Msg(R"({"jsonrpc":"2.0","id":1,"method":"tools/list"})"), &session, ctx);
    ASSERT_FALSE(list.error);
    EXPECT_EQ(list.result.at("tools").as_array().size(), 4u);
    EXPECT_FALSE(list.result.contains("ttlMs"));
    Reply ping = server.Handle(Msg(R"({"jsonrpc":"2.0","id":2,"method":"ping"})"), &session, ctx);
    ASSERT_FALSE(ping.error);
    EXPECT_TRUE(ping.result.empty());
    Reply call = server.Handle(
        Msg(R"({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"fail"}})"), &session,
        ctx);
    ASSERT_FALSE(call.error);
    EXPECT_EQ(call.result.at("isError"), true);
  }
  // An old client's version is answered with ours; the client decides.
  LegacySession session;
  Reply init = server.Handle(Msg(R"({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
      "protocolVersion":"2024-11-05","capabilities":{}}})"),
                             &session, ctx);
  ASSERT_FALSE(init.error);
  EXPECT_EQ(init.result.at("protocolVersion"), "2025-11-25");
  Reply bad = server.Handle(Msg(R"({"jsonrpc":"2.0","id":0,"method":"initialize","params":{}})"),
                            &session, ctx);
  ASSERT_TRUE(bad.error);
  EXPECT_EQ(bad.error->code, kInvalidParams);
}

// logging/setLevel: legacy sessions declare logging, the level is checked
// and kept, and only messages at or above it are wanted (none before one is
// set); modern (stateless) requests have no logging.
TEST_F(ServerTest, LoggingSetLevel) {
  LegacySession session;
  Reply init = server.Handle(Msg(R"({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
      "protocolVersion":"2025-11-25","capabilities":{}}})"),
                             &session, ctx);
  ASSERT_FALSE(init.error);
  EXPECT_TRUE(init.result.at("capabilities").as_object().contains("logging"));
  EXPECT_FALSE(session.WantsLog(LogLevel::kEmergency));
  Reply set = server.Handle(
      Msg(R"({"jsonrpc":"2.0","id":1,"method":"logging/setLevel","params":{"level":"warning"}})"),
      &session, ctx);
  ASSERT_FALSE(set.error);
  EXPECT_TRUE(set.result.empty());
  EXPECT_FALSE(session.WantsLog(LogLevel::kInfo));
  EXPECT_TRUE(session.WantsLog(LogLevel::kWarning));
  EXPECT_TRUE(session.WantsLog(LogLevel::kEmergency));
  for (const char* params : {R"({"level":"loud"})", R"({"level":3})", "{}"}) {
    Reply bad = server.Handle(
        Msg(std::string(R"({"jsonrpc":"2.0","id":2,"method":"logging/setLevel","params":)") +
            params + "}"),
        &session, ctx);
    ASSERT_TRUE(bad.error) << params;
    EXPECT_EQ(bad.error->code, kInvalidParams);
  }
  EXPECT_TRUE(session.WantsLog(LogLevel::kWarning));  // unchanged by the bad ones
  Reply discover = server.Handle(
      Msg(R"({"jsonrpc":"2.0","id":3,"method":"server/discover","params":{)" + kMeta + "}}"),
      nullptr, ctx);
  ASSERT_FALSE(discover.error);
  EXPECT_FALSE(discover.result.at("capabilities").as_object().contains("logging"));
}

TEST(LogLevelTest, NamesRoundTripInSeverityOrder) {
  const char* names[] = {"debug", "info",     "notice", "warning",
                         "error", "critical", "alert",  "emergency"};
  for (size_t i = 0; i < std::size(names); ++i) {
    auto level = ParseLogLevel(names[i]);
    ASSERT_TRUE(level) << names[i];
    EXPECT_EQ(static_cast<size_t>(*level), i);
    EXPECT_EQ(LogLevelName(*level), names[i]);
  }
  EXPECT_FALSE(ParseLogLevel("Warning"));
  EXPECT_FALSE(ParseLogLevel(""));
  auto m = ParseMessage(SerializeLogMessage(LogLevel::kError, "deepbox.execute",
                                            json::value(json::object{{"k", 1}})));
  ASSERT_TRUE(m);
  EXPECT_EQ(m->method, "notifications/message");
  EXPECT_EQ(m->params.at("level"), "error");
  EXPECT_EQ(m->params.at("logger"), "deepbox.execute");
  EXPECT_EQ(m->params.at("data").at("k"), 1);
}

}  // namespace
}  // namespace deepbox::mcp
