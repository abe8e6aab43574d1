// A cut exec stream is recovered without running the command twice (issue 12).
// A proxy between the client and the real daemon cuts response streams the
// way a router that drops a connection does; the client re-attaches to the
// daemon's record of the exec and returns the whole output and exit status.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "common/unique_fd.h"
#include "net/http_client.h"
#include "sandbox/testing/scoped_sandboxd.h"

namespace deepbox {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

int UnixSocket(const std::string& path, bool listen_on) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, path.c_str(), sizeof(a.sun_path) - 1);
  int rc = listen_on ? bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a)
                     : connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  if (rc != 0 || (listen_on && listen(fd, 64) != 0)) {
    close(fd);
    return -1;
  }
  return fd;
}

// Forwards connections to the daemon; cuts the response of the first
// `cuts` connections whose request starts with `cut_prefix` after
// `cut_after` bytes of the response (headers included).
class CuttingProxy {
 public:
  CuttingProxy(std::string listen_path, std::string daemon_path, std::string cut_prefix, int cuts,
               size_t cut_after)
      : daemon_(std::move(daemon_path)),
        prefix_(std::move(cut_prefix)),
        cuts_left_(cuts),
        cut_after_(cut_after) {
    listener_.reset(UnixSocket(listen_path, true));
    stop_.reset(eventfd_like());
    thread_ = std::thread([this] { Loop(); });
  }
  ~CuttingProxy() {
    stopping_ = true;
    (void)!write(stop_w_, "x", 1);
    thread_.join();
    for (auto& t : workers_) t.join();
    close(stop_w_);
  }
  int cuts_done() const { return cuts_done_; }
  std::vector<std::string> requests() {
    std::lock_guard lock(mu_);
    return requests_;
  }

 private:
  int eventfd_like() {
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) return -1;
    stop_w_ = p[1];
    return p[0];
  }
  void Loop() {
    for (;;) {
      pollfd fds[2] = {{listener_.get(), POLLIN, 0}, {stop_.get(), POLLIN, 0}};
      if (poll(fds, 2, -1) < 0) continue;
      if (fds[1].revents) return;
      int c = accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      workers_.emplace_back([this, c] { Serve(c); });
    }
  }
  void Serve(int client) {
    UniqueFd c(client), d(UnixSocket(daemon_, false));
    if (!d) return;
    std::string head;
    bool decided = false, cut = false;
    size_t down = 0;
    char buf[4096];
    for (;;) {
      pollfd fds[3] = {{c.get(), POLLIN, 0}, {d.get(), POLLIN, 0}, {stop_.get(), POLLIN, 0}};
      if (poll(fds, 3, 10000) <= 0 || fds[2].revents) return;
      if (fds[0].revents) {
        ssize_t n = read(c.get(), buf, sizeof buf);
        if (n <= 0) return;
        if (!decided) {
          head.append(buf, static_cast<size_t>(n));
          if (head.size() >= prefix_.size()) {
            decided = true;
            {
              std::lock_guard lock(mu_);
              requests_.push_back(head.substr(0, head.find("\r\n\r\n")));
            }
            if (head.compare(0, prefix_.size(), prefix_) == 0 && cuts_left_ > 0) {
              --cuts_left_;
              cut = true;
            }
          }
        }
        if (write(d.get(), buf, static_cast<size_t>(n)) != n) return;
      }
      if (fds[1].revents) {
        ssize_t n = read(d.get(), buf, sizeof buf);
        if (n <= 0) return;
        size_t send = static_cast<size_t>(n);
        if (cut && down + send > cut_after_) send = cut_after_ - down;
        if (send > 0 && write(c.get(), buf, send) != static_cast<ssize_t>(send)) return;
        down += send;
        if (cut && down >= cut_after_) {
          ++cuts_done_;
          return;  // both sides closed mid-response, like a dropped proxy stream
        }
      }
    }
  }

  std::string daemon_, prefix_;
  std::atomic<int> cuts_left_;
  size_t cut_after_;
  UniqueFd listener_, stop_;
  int stop_w_ = -1;
  std::atomic<bool> stopping_{false};
  std::atomic<int> cuts_done_{0};
  std::thread thread_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::vector<std::string> requests_;
};

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class ExecReattachTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto d = testing::ScopedSandboxd::Start();
    ASSERT_TRUE(d) << d.error().ToString();
    daemon_ = std::move(*d);
    proxy_path_ = fs::path(daemon_->socket_path()).parent_path() / "proxy.sock";
  }
  Result<std::unique_ptr<SandboxdClient>> ThroughProxy() {
    return SandboxdClient::Connect("unix:" + proxy_path_.string());
  }
  ExecRequest CountingCommand() {
    ExecRequest req;
    req.argv = {"/bin/sh", "-c",
                "echo run >> count; for i in 1 2 3 4 5; do echo line$i; sleep 0.1; done; "
                "echo bye >&2; exit 3"};
    req.timeout = std::chrono::milliseconds(60000);
    return req;
  }

  std::unique_ptr<testing::ScopedSandboxd> daemon_;
  fs::path proxy_path_;
};

TEST_F(ExecReattachTest, ACutStreamIsResumedAndTheCommandRunsOnce) {
  // The first exec/stream answer is cut right after its first event.
  CuttingProxy proxy(proxy_path_, daemon_->socket_path(), "POST /deepbox/v1/exec/stream", 1, 400);
  auto client = ThroughProxy();
  ASSERT_TRUE(client) << client.error().ToString();
  std::string streamed, errors;
  auto r = (*client)->ExecStream(CountingCommand(), [&](OutputStream s, std::string_view d) {
    (s == OutputStream::kStdout ? streamed : errors).append(d);
    return true;
  });
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(proxy.cuts_done(), 1);
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_EQ(streamed, "line1\nline2\nline3\nline4\nline5\n");
  EXPECT_EQ(errors, "bye\n");
  EXPECT_FALSE(r->truncated());
  EXPECT_EQ(ReadAll(fs::path(daemon_->root()) / "count"), "run\n") << "the command ran twice";
  // The exec request went out chunked (see the router race in issue 12), and
  // the recovery was an attach, not a second exec.
  int execs = 0, attaches = 0;
  for (const auto& req : proxy.requests()) {
    if (req.starts_with("POST /deepbox/v1/exec/stream")) {
      ++execs;
      EXPECT_THAT(req, HasSubstr("Transfer-Encoding: chunked"));
    }
    if (req.starts_with("POST /deepbox/v1/exec/attach")) ++attaches;
  }
  EXPECT_EQ(execs, 1);
  EXPECT_GE(attaches, 1);
}

TEST_F(ExecReattachTest, RepeatedCutsOfTheAttachAreResumedToo) {
  CuttingProxy exec_cut(proxy_path_, daemon_->socket_path(), "POST /deepbox/v1/exec/", 3, 300);
  auto client = ThroughProxy();
  ASSERT_TRUE(client) << client.error().ToString();
  std::string streamed;
  auto r = (*client)->ExecStream(CountingCommand(), [&](OutputStream s, std::string_view d) {
    if (s == OutputStream::kStdout) streamed.append(d);
    return true;
  });
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_GE(exec_cut.cuts_done(), 2);  // the exec and at least one attach were cut
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_EQ(streamed, "line1\nline2\nline3\nline4\nline5\n");
  EXPECT_EQ(ReadAll(fs::path(daemon_->root()) / "count"), "run\n");
}

// The daemon never runs one exec id twice: a second exec/stream with the same
// id attaches to the first run.
TEST_F(ExecReattachTest, TheSameExecIdNeverRunsTwice) {
  net::ClientOptions client_options;  // named: GCC 12 -O3 maybe-uninitialized on a temporary
  auto http = net::HttpClient::Create(daemon_->unix_url(), client_options);
  ASSERT_TRUE(http);
  net::ClientRequest req;
  req.method = "POST";
  req.target = "/deepbox/v1/exec/stream";
  req.headers.Set("Content-Type", "application/json");
  req.body =
      R"({"argv":["/bin/sh","-c","echo run >> once; echo out"],"exec_id":"test-exec-000001"})";
  auto first = (*http)->Send(req);
  ASSERT_TRUE(first) << first.error().ToString();
  auto second = (*http)->Send(req);
  ASSERT_TRUE(second) << second.error().ToString();
  EXPECT_EQ(first->body, second->body);
  EXPECT_THAT(second->body, HasSubstr("\"exit\""));
  EXPECT_EQ(ReadAll(fs::path(daemon_->root()) / "once"), "run\n");
  // Attach by id, from any point; unknown ids are 404.
  net::ClientRequest attach;
  attach.method = "POST";
  attach.target = "/deepbox/v1/exec/attach";
  attach.body = R"({"exec_id":"test-exec-000001","after":1})";
  auto rest = (*http)->Send(attach);
  ASSERT_TRUE(rest);
  EXPECT_EQ(rest->status, 200);
  EXPECT_THAT(rest->body, Not(HasSubstr("\"type\":\"stdout\"")));
  EXPECT_THAT(rest->body, HasSubstr("\"exit\""));
  attach.body = R"({"exec_id":"test-exec-unknown","after":0})";
  auto unknown = (*http)->Send(attach);
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 404);
  attach.body = R"({"exec_id":"test-exec-000001","after":-5})";
  auto negative = (*http)->Send(attach);
  ASSERT_TRUE(negative);
  EXPECT_EQ(negative->status, 400);
}

}  // namespace
}  // namespace deepbox
