#include "mcp/stdio.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <thread>

#include "mcp/testing/request_text.h"
#include "mcp/testing/test_registry.h"

namespace deepbox::mcp {
namespace {

using testing::kModernMeta;

// A server on two pipes, as a client process would see it.
class StdioHarness {
 public:
  explicit StdioHarness(size_t max_message = 64u << 20) {
    int in[2], out[2];
    EXPECT_EQ(::pipe2(in, O_CLOEXEC), 0);
    EXPECT_EQ(::pipe2(out, O_CLOEXEC), 0);
    to_server_ = in[1];
    from_server_ = out[0];
    options_.in_fd = in[0];
    options_.out_fd = out[1];
    options_.max_message_bytes = max_message;
    options_.on_close = [this] { closed_ = true; };
    thread_ = std::thread([this, in0 = in[0], out1 = out[1]] {
      status_ = ServeStdio(server_, options_);
      ::close(in0);
      ::close(out1);
    });
  }
  ~StdioHarness() {
    CloseInput();
    if (thread_.joinable()) thread_.join();
    ::close(from_server_);
  }

  void Send(const std::string& line) {
    std::string l = line + "\n";
    ASSERT_EQ(::write(to_server_, l.data(), l.size()), static_cast<ssize_t>(l.size()));
  }
  // The next line, or "" after 30 s (a hung server fails the test instead of hanging it).
  std::string Read() {
    for (;;) {
      size_t nl = buf_.find('\n');
      if (nl != std::string::npos) {
        std::string line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return line;
      }
      pollfd p{from_server_, POLLIN, 0};
      if (::poll(&p, 1, 30000) <= 0) return "";
      char chunk[4096];
      ssize_t n = ::read(from_server_, chunk, sizeof chunk);
      if (n <= 0) return "";
      buf_.append(chunk, static_cast<size_t>(n));
    }
  }
  json::object ReadJson() {
    auto v = ParseJsonObject(Read());
    EXPECT_TRUE(v);
    return v ? *v : json::object{};
  }
  void CloseInput() {
    if (to_server_ >= 0) ::close(to_server_);
    to_server_ = -1;
  }
  void Join() { thread_.join(); }
  bool closed() const { return closed_; }

 private:
  McpServer server_{testing::TestRegistry(), ServerConfig{}};
  StdioOptions options_;
  int to_server_ = -1, from_server_ = -1;
  std::string buf_;
  std::thread thread_;
  Status status_;
  std::atomic<bool> closed_{false};
};

TEST(Stdio, AnswersRequestsInOrderAndReportsBadInput) {
  StdioHarness h;
  h.Send(
      R"({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{}}})");
  auto init = h.ReadJson();
  EXPECT_EQ(init.at("id"), 1);
  EXPECT_EQ(init.at("result").at("protocolVersion"), "2025-06-18");
  h.Send(R"({"jsonrpc":"2.0","method":"notifications/initialized"})");
  h.Send("this is not json");
  auto perr = h.ReadJson();
  EXPECT_TRUE(perr.at("id").is_null());
  EXPECT_EQ(perr.at("error").at("code"), kParseError);
  h.Send(R"({"jsonrpc":"2.0","id":"x","method":5})");
  auto ierr = h.ReadJson();
  EXPECT_EQ(ierr.at("id"), "x");
  EXPECT_EQ(ierr.at("error").at("code"), kInvalidRequest);
  h.Send("");  // blank lines are skipped
  h.Send(R"({"jsonrpc":"2.0","id":2,"method":"tools/list"})");
  EXPECT_EQ(h.ReadJson().at("result").at("tools").as_array().size(), 4u);
  h.Send(
      R"({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hé"}}})");
  auto call = h.ReadJson();
  EXPECT_EQ(call.at("id"), 3);
  EXPECT_EQ(call.at("result").at("content").at(0).at("text"), "hé");
}

TEST(Stdio, ProgressNotificationsPrecedeTheResult) {
  StdioHarness h;
  h.Send(std::string(R"({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{)") + kModernMeta +
         R"(,"progressToken":"tok"},"name":"progress","arguments":{"count":3}}})");
  for (int i = 1; i <= 3; ++i) {
    auto n = h.ReadJson();
    EXPECT_EQ(n.at("method"), "notifications/progress");
    EXPECT_EQ(n.at("params").at("progressToken"), "tok");
    EXPECT_EQ(n.at("params").at("progress").to_number<double>(), i);
    EXPECT_EQ(n.at("params").at("total").to_number<double>(), 3);
  }
  auto r = h.ReadJson();
  EXPECT_EQ(r.at("id"), 7);
  EXPECT_EQ(r.at("result").at("content").at(0).at("text"), "done with progress");
  EXPECT_EQ(r.at("result").at("resultType"), "complete");
}

TEST(Stdio, CancelledCallsGetNoResponse) {
  StdioHarness h;
  int before = testing::CancelledWaits().load();
  h.Send(std::string(R"({"jsonrpc":"2.0","id":"w","method":"tools/call","params":{)") +
         kModernMeta + R"(},"name":"wait"}})");
  // A later call is answered while the first still runs.
  h.Send(std::string(R"({"jsonrpc":"2.0","id":"e","method":"tools/call","params":{)") +
         kModernMeta + R"(},"name":"echo","arguments":{"text":"meanwhile"}}})");
  EXPECT_EQ(h.ReadJson().at("id"), "e");
  h.Send(
      R"({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"w","reason":"test"}})");
  // Unknown ids and malformed cancellations are ignored.
  h.Send(R"({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"nope"}})");
  h.Send(R"({"jsonrpc":"2.0","method":"notifications/cancelled","params":{}})");
  h.Send(R"({"jsonrpc":"2.0","id":"after","method":"tools/list"})");
  EXPECT_EQ(h.ReadJson().at("id"), "after");  // not a response for "w"
  h.CloseInput();
  h.Join();
  EXPECT_EQ(testing::CancelledWaits().load(), before + 1);
  EXPECT_EQ(h.Read(), "");  // nothing was sent for the cancelled call
}

TEST(Stdio, EndOfInputCancelsRunningCallsThenCloses) {
  StdioHarness h;
  int before = testing::CancelledWaits().load();
  h.Send(std::string(R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{)") + kModernMeta +
         R"(},"name":"wait"}})");
  h.Send(std::string(R"({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{)") + kModernMeta +
         R"(},"name":"wait"}})");
  h.Send(R"({"jsonrpc":"2.0","id":3,"method":"ping"})");  // both calls are running now
  EXPECT_EQ(h.ReadJson().at("id"), 3);
  h.CloseInput();
  h.Join();
  EXPECT_TRUE(h.closed());
  EXPECT_EQ(testing::CancelledWaits().load(), before + 2);
}

TEST(Stdio, OverlongMessagesAreRefused) {
  StdioHarness h(1024);
  h.Send(
      std::string(
          R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":")") +
      std::string(5000, 'a') + "\"}}}");
  auto e = h.ReadJson();
  EXPECT_EQ(e.at("error").at("code"), kInvalidRequest);
  h.Send(R"({"jsonrpc":"2.0","id":2,"method":"ping"})");
  EXPECT_EQ(h.ReadJson().at("id"), 2);  // the stream goes on after the refused line
}

}  // namespace
}  // namespace deepbox::mcp
