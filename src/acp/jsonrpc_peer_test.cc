#include "acp/jsonrpc_peer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <thread>

#include "common/unique_fd.h"

namespace deepbox::acp {
namespace {

TEST(ParseRpcMessageTest, KindsAndLooseResults) {
  auto req = ParseRpcMessage(R"({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"a":1}})");
  ASSERT_TRUE(req);
  EXPECT_EQ(req->kind, RpcMessage::Kind::kRequest);
  EXPECT_EQ(req->params.at("a").as_int64(), 1);
  auto note = ParseRpcMessage(R"({"jsonrpc":"2.0","method":"session/cancel"})");
  ASSERT_TRUE(note);
  EXPECT_EQ(note->kind, RpcMessage::Kind::kNotification);
  EXPECT_TRUE(note->params.empty());
  // The SDKs answer fs/write_text_file with a null result.
  auto nul = ParseRpcMessage(R"({"jsonrpc":"2.0","id":"x","result":null})");
  ASSERT_TRUE(nul);
  EXPECT_EQ(nul->kind, RpcMessage::Kind::kResult);
  EXPECT_TRUE(nul->result.is_null());
  auto err = ParseRpcMessage(R"({"jsonrpc":"2.0","id":3,"error":{"code":-32601,"message":"no"}})");
  ASSERT_TRUE(err);
  EXPECT_EQ(err->error.code, -32601);
}

TEST(ParseRpcMessageTest, MalformedGetsTheRightError) {
  auto bad = ParseRpcMessage("{not json");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().error.code, kParseError);
  EXPECT_TRUE(bad.error().id.is_null());
  auto version = ParseRpcMessage(R"({"jsonrpc":"1.0","id":7,"method":"x"})");
  ASSERT_FALSE(version);
  EXPECT_EQ(version.error().error.code, kInvalidRequest);
  EXPECT_EQ(version.error().id.as_int64(), 7);  // answered with its id
  EXPECT_FALSE(ParseRpcMessage(R"([{"jsonrpc":"2.0","method":"x"}])"));
  EXPECT_FALSE(ParseRpcMessage(R"({"jsonrpc":"2.0","id":1,"method":"x","params":[1]})"));
  EXPECT_FALSE(ParseRpcMessage(R"({"jsonrpc":"2.0","id":1.5,"method":"x"})"));
  EXPECT_FALSE(ParseRpcMessage(R"({"jsonrpc":"2.0","id":1})"));
}

// A peer on pipes, the test playing the client on the other ends.
class PeerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int a[2], b[2];
    ASSERT_EQ(::pipe(a), 0);
    ASSERT_EQ(::pipe(b), 0);
    to_peer_.reset(a[1]);
    peer_in_.reset(a[0]);
    from_peer_.reset(b[0]);
    peer_out_.reset(b[1]);
    peer_ = std::make_unique<JsonRpcPeer>(JsonRpcPeer::Options{peer_in_.get(), peer_out_.get()});
  }
  void Send(const std::string& line) {
    std::string l = line + "\n";
    ASSERT_EQ(::write(to_peer_.get(), l.data(), l.size()), static_cast<ssize_t>(l.size()));
  }
  std::string ReadLine() {
    std::string out;
    char c;
    while (::read(from_peer_.get(), &c, 1) == 1 && c != '\n') out += c;
    return out;
  }
  UniqueFd to_peer_, peer_in_, from_peer_, peer_out_;
  std::unique_ptr<JsonRpcPeer> peer_;
};

TEST_F(PeerTest, AnswersRequestsAndMalformedLines) {
  std::thread serve([&] {
    (void)peer_->Serve([&](RpcMessage m) {
      if (m.kind == RpcMessage::Kind::kRequest)
        (void)peer_->Respond(m.id, json::object{{"ok", true}});
    });
  });
  Send(R"({"jsonrpc":"2.0","id":1,"method":"ping"})");
  EXPECT_EQ(ReadLine(), R"({"jsonrpc":"2.0","id":1,"result":{"ok":true}})");
  Send("garbage");
  auto e = ParseJsonObject(ReadLine());
  ASSERT_TRUE(e);
  EXPECT_EQ(e->at("error").at("code").as_int64(), kParseError);
  EXPECT_TRUE(e->at("id").is_null());
  to_peer_.reset();  // the client goes away
  serve.join();
  EXPECT_TRUE(peer_->closed());
}

TEST_F(PeerTest, ALineOverTheLimitIsRefusedAndTheNextOneServed) {
  JsonRpcPeer small(JsonRpcPeer::Options{peer_in_.get(), peer_out_.get(), -1, 64});
  std::thread serve([&] {
    (void)small.Serve([&](RpcMessage m) {
      if (m.kind == RpcMessage::Kind::kRequest) (void)small.Respond(m.id, json::object{});
    });
  });
  Send(R"({"jsonrpc":"2.0","id":1,"method":"x","params":{"pad":")" + std::string(200, 'a') +
       R"("}})");
  auto e = ParseJsonObject(ReadLine());
  ASSERT_TRUE(e);
  EXPECT_EQ(e->at("error").at("code").as_int64(), kInvalidRequest);
  Send(R"({"jsonrpc":"2.0","id":2,"method":"x"})");
  EXPECT_EQ(ReadLine(), R"({"jsonrpc":"2.0","id":2,"result":{}})");
  to_peer_.reset();
  serve.join();
}

TEST_F(PeerTest, CallGetsItsResponseOrFailsWhenTheClientGoes) {
  std::thread serve([&] { (void)peer_->Serve([](RpcMessage) {}); });
  Result<json::value> got = MakeError(ErrorCode::kInternal, "unset");
  std::thread call([&] { got = peer_->Call("fs/write_text_file", json::object{{"path", "/a"}}); });
  auto req = ParseJsonObject(ReadLine());
  ASSERT_TRUE(req);
  EXPECT_EQ(req->at("method").as_string(), "fs/write_text_file");
  Send(R"({"jsonrpc":"2.0","id":)" + ToJson(req->at("id")) + R"(,"result":null})");
  call.join();
  ASSERT_TRUE(got) << got.error().message;
  EXPECT_TRUE(got->is_null());

  std::thread call2([&] { got = peer_->Call("session/request_permission", json::object{}); });
  ASSERT_FALSE(ReadLine().empty());
  to_peer_.reset();  // dies without answering
  call2.join();
  ASSERT_FALSE(got);
  EXPECT_EQ(got.error().code, ErrorCode::kUnavailable);
  serve.join();
}

TEST_F(PeerTest, CallStopsOnCancel) {
  std::thread serve([&] { (void)peer_->Serve([](RpcMessage) {}); });
  std::atomic<bool> cancel{false};
  Result<json::value> got = MakeError(ErrorCode::kInternal, "unset");
  std::thread call([&] { got = peer_->Call("session/request_permission", {}, &cancel); });
  ASSERT_FALSE(ReadLine().empty());
  cancel.store(true);
  call.join();
  ASSERT_FALSE(got);
  EXPECT_EQ(got.error().code, ErrorCode::kCancelled);
  to_peer_.reset();
  serve.join();
}

}  // namespace
}  // namespace deepbox::acp
