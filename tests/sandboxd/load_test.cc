// Load and slow clients against the real deepbox-sandboxd binary (issue 15):
// 1,000 concurrent connections, descriptor and thread limits, slowloris
// headers and bodies, readers that take their response at 1 byte/s or not at
// all, bodies over the cap, and 50,000 mixed requests (20,000 in the
// sanitizer build) with the daemon's memory bounded. Loopback and unix
// sockets only; every wait is bounded. The assertions are invariants (served,
// cut, bounded), never speeds: bench/sandboxd_load measures the timings.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/json.h"
#include "local/cgroups.h"
#include "net/conn.h"
#include "sandbox/testing/load_clients.h"
#include "sandbox/testing/scoped_sandboxd.h"

namespace deepbox {
namespace {

using namespace std::chrono_literals;
using net::Deadline;
using net::DeadlineAfter;
using testing::JsonPost;
using testing::MixedWorkload;
using testing::OpenFdCount;
using testing::ProcStatusField;
using testing::RawClient;
using testing::ScopedSandboxd;
namespace stdfs = std::filesystem;

// Bounds a wait for something due within a few seconds: only a hang, not a
// slow or loaded machine, exceeds it.
constexpr auto kGenerous = std::chrono::milliseconds(30000);

std::string ReadHostFile(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

Deadline Soon() { return DeadlineAfter(kGenerous); }

bool Alive(pid_t pid) {
  int status = 0;
  return ::waitpid(pid, &status, WNOHANG) == 0;
}

// The test process needs a descriptor per client connection (the daemon,
// its child, inherits the limit and raises its own soft limit itself).
bool RaiseOpenFiles(rlim_t want) {
  struct rlimit r {};
  if (::getrlimit(RLIMIT_NOFILE, &r) != 0) return false;
  if (r.rlim_cur >= want) return true;
  if (r.rlim_max < want) r.rlim_max = want;  // root may raise the hard limit
  r.rlim_cur = want;
  return ::setrlimit(RLIMIT_NOFILE, &r) == 0;
}

class SandboxdLoadTest : public ::testing::Test {
 protected:
  void Start(std::vector<std::string> extra_args = {}, bool tcp = true) {
    auto d = ScopedSandboxd::Start({.extra_args = std::move(extra_args), .tcp = tcp});
    ASSERT_TRUE(d) << d.error().ToString();
    daemon_ = std::move(*d);
  }
  // Starts the daemon with `soft` as the soft RLIMIT_NOFILE it inherits (as
  // from a usual shell), then gives this process its own limit back.
  void StartWithSoftOpenFiles(rlim_t soft, bool tcp) {
    struct rlimit saved {};
    ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
    struct rlimit inherited = saved;
    inherited.rlim_cur = soft;
    ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &inherited), 0);
    Start({}, tcp);
    ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0);
  }
  std::string Unix() const { return daemon_->unix_url(); }
  std::string Tcp() const { return fmt::format("127.0.0.1:{}", daemon_->tcp_port()); }
  Sandbox& sb() { return daemon_->client(); }
  // A client whose requests give up after kGenerous (a hang fails the test
  // instead of stalling it for the default two minutes).
  std::unique_ptr<SandboxdClient> Client() {
    auto c = daemon_->Connect({.file_op_timeout = kGenerous});
    EXPECT_TRUE(c) << c.error().ToString();
    return c ? std::move(*c) : nullptr;
  }
  // The daemon still answers and never died.
  void ExpectHealthy() {
    EXPECT_TRUE(Alive(daemon_->pid()));
    auto c = Client();
    ASSERT_TRUE(c);
    auto st = c->Stat(".");
    EXPECT_TRUE(st) << st.error().ToString();
  }
  std::unique_ptr<ScopedSandboxd> daemon_;
};

// ------------------------------------------------------ 1,000 connections

TEST_F(SandboxdLoadTest, ThousandConcurrentConnectionsAreAllServed) {
  // The daemon starts with the usual soft limit of 1024 descriptors (it must
  // raise its own); this process then takes room for its 1,000 clients.
  if (!RaiseOpenFiles(4096)) GTEST_SKIP() << "needs RLIMIT_NOFILE 4096 (root can raise it)";
  StartWithSoftOpenFiles(1024, /*tcp=*/true);
  if (HasFatalFailure()) return;
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(sb().Write(fmt::format("many/f{}.txt", i), fmt::format("content-{}", i), 0644));
  }
  constexpr int kConnections = 1000;
  std::vector<RawClient> conns;
  conns.reserve(kConnections);
  for (int i = 0; i < kConnections; ++i) {
    auto c = RawClient::Connect(i % 2 ? Tcp() : Unix(), Soon());
    ASSERT_TRUE(c) << "connection " << i << ": " << c.error().ToString();
    conns.push_back(std::move(*c));
  }
  // All 1,000 are open at once; now each makes a real request, and only then
  // is any answer read, so the daemon holds them all concurrently.
  auto request = [](int i) {
    std::string f = fmt::format("many/f{}.txt", i % 10);
    switch (i % 10) {
      case 0:
        return JsonPost("/deepbox/v1/exec", R"({"argv":["true"]})");
      case 1:
      case 2:
        return JsonPost("/deepbox/v1/fs/list", R"({"path":"many"})");
      case 3:
        return JsonPost("/deepbox/v1/fs/glob", R"({"pattern":"*.txt","path":"many"})");
      case 4:
      case 5:
        return JsonPost("/deepbox/v1/fs/read", fmt::format(R"({{"path":"{}"}})", f));
      default:
        return JsonPost("/deepbox/v1/fs/stat", fmt::format(R"({{"path":"{}"}})", f));
    }
  };
  for (int i = 0; i < kConnections; ++i) {
    ASSERT_TRUE(conns[i].Send(request(i), Soon())) << "connection " << i;
  }
  int served = 0;
  for (int i = 0; i < kConnections; ++i) {
    auto r = conns[i].ReadResponse(Soon());
    ASSERT_TRUE(r) << "connection " << i << ": " << r.error().ToString();
    EXPECT_EQ(r->status, 200) << "connection " << i << ": " << r->body;
    const std::string expected = i % 10 == 0                  ? R"("exit_code":0)"
                                 : i % 10 <= 2                ? "f9.txt"
                                 : i % 10 == 3                ? "f0.txt"
                                 : i % 10 == 4 || i % 10 == 5 ? fmt::format("content-{}", i % 10)
                                                              : fmt::format("f{}.txt", i % 10);
    EXPECT_NE(r->body.find(expected), std::string::npos) << "connection " << i << ": " << r->body;
    served += r->status == 200;
  }
  EXPECT_EQ(served, kConnections);
  // Kept alive, every connection is still open in the daemon.
  EXPECT_GE(OpenFdCount(daemon_->pid()), kConnections);
  conns.clear();
  ExpectHealthy();
}

// The daemon raises its own soft RLIMIT_NOFILE (a soft limit of 1024 would cap
// it below its 1024 connections) and gives commands the limit it started with.
TEST_F(SandboxdLoadTest, DaemonRaisesItsOpenFilesLimitAndCommandsKeepTheOriginal) {
  if (!RaiseOpenFiles(4096)) GTEST_SKIP() << "needs RLIMIT_NOFILE 4096 (root can raise it)";
  StartWithSoftOpenFiles(256, /*tcp=*/false);
  if (HasFatalFailure()) return;
  struct rlimit saved {};  // the hard limit: the daemon's soft limit is raised to it
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  std::string limits = ReadHostFile(fmt::format("/proc/{}/limits", daemon_->pid()));
  EXPECT_NE(limits.find(fmt::format("Max open files            {:<21}{:<21}files", saved.rlim_max,
                                    saved.rlim_max)),
            std::string::npos)
      << limits;
  auto e = sb().Exec(ExecRequest{.shell = "ulimit -n; ulimit -Hn"});
  ASSERT_TRUE(e) << e.error().ToString();
  EXPECT_EQ(e->stdout_data, fmt::format("256\n{}\n", saved.rlim_max));
}

// With a small hard limit (a sandbox's open_files) the default connection cap
// shrinks to fit it: connections beyond get 503 at once instead of requests
// failing with EMFILE or waiting in the accept backlog.
TEST_F(SandboxdLoadTest, WithFewDescriptorsExtraConnectionsGet503) {
  // A hard limit cannot be raised again without CAP_SYS_RESOURCE: lower it in
  // a child process, which starts the daemon (inheriting it) and runs the
  // checks; its gtest failures print there and make it exit 1.
  std::fflush(nullptr);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    struct rlimit tiny = {128, 128};
    if (::setrlimit(RLIMIT_NOFILE, &tiny) != 0) ::_exit(2);
    [this] {
      Start({}, /*tcp=*/false);
      std::vector<RawClient> conns;
      for (int i = 0; i < 60; ++i) {
        auto c = RawClient::Connect(Unix(), Soon());
        ASSERT_TRUE(c) << c.error().ToString();
        (void)c->Send(JsonPost("/deepbox/v1/fs/stat", R"({"path":"."})"), Soon());
        conns.push_back(std::move(*c));
      }
      int ok = 0, refused = 0;
      for (auto& c : conns) {
        auto r = c.ReadResponse(Soon());
        ASSERT_TRUE(r) << r.error().ToString();
        EXPECT_TRUE(r->status == 200 || r->status == 503) << r->status << " " << r->body;
        ok += r->status == 200;
        refused += r->status == 503;
      }
      // (128 - 32) / 2 = 48 connections at once, with the fixture's own
      // client (and a startup probe's that may still be closing).
      EXPECT_LE(ok + 1, 48);
      EXPECT_GE(ok + 1, 46);
      EXPECT_EQ(refused, 60 - ok);
      conns.clear();
      ExpectHealthy();
    }();
    daemon_.reset();
    std::fflush(nullptr);
    ::_exit(HasFailure() ? 1 : 0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "the child's checks failed (see its output above), status " << status;
}

// A sandbox's processes can use up its pids cgroup, and then the daemon cannot
// start a thread for a connection (nor grep's workers): std::thread threw
// there, which ended the daemon. Now such a connection gets 503, grep uses
// fewer threads, and the daemon serves again once threads are free.
TEST_F(SandboxdLoadTest, ConnectionsBeyondThePidsLimitAre503NotACrash) {
  auto host = local::DetectCgroups();
  if (!host || host->layout == local::CgroupLayout::kNone) GTEST_SKIP() << "no cgroups here";
  Start({}, /*tcp=*/false);
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(sb().Write(fmt::format("g/f{}.txt", i), "needle\n", 0644));
  }
  const pid_t pid = daemon_->pid();
  std::this_thread::sleep_for(200ms);  // threads of the startup probes' connections end
  const long threads = ProcStatusField(pid, "Threads");
  ASSERT_GT(threads, 0);
  local::Limits limits;
  limits.max_processes = static_cast<uint64_t>(threads) + 1;
  auto cg =
      local::SandboxCgroup::Create(*host, fmt::format("sandboxd-load-{}", ::getpid()), limits);
  if (!cg) GTEST_SKIP() << "cannot create a cgroup: " << cg.error().ToString();
  if (!cg->support().processes.enforced) GTEST_SKIP() << "no pids controller";
  ASSERT_TRUE(cg->AttachAll(pid)) << "cannot move the daemon into the cgroup";

  // Room for one more thread: the connection's. grep then finds no thread for
  // its second worker and searches with one.
  {
    auto c = RawClient::Connect(Unix(), Soon());
    ASSERT_TRUE(c);
    ASSERT_TRUE(
        c->Send(JsonPost("/deepbox/v1/fs/grep", R"({"pattern":"needle","path":"g"})"), Soon()));
    auto r = c->ReadResponse(Soon());
    ASSERT_TRUE(r) << r.error().ToString();
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_NE(r->body.find("f7.txt"), std::string::npos) << r->body;
  }
  // Ten connections at once, room for about one thread.
  std::vector<RawClient> conns;
  for (int i = 0; i < 10; ++i) {
    auto c = RawClient::Connect(Unix(), Soon());
    ASSERT_TRUE(c);
    // A refused connection may be answered and closed before this is sent.
    (void)c->Send(JsonPost("/deepbox/v1/fs/stat", R"({"path":"g"})"), Soon());
    conns.push_back(std::move(*c));
  }
  int ok = 0, refused = 0;
  for (auto& c : conns) {
    auto r = c.ReadResponse(Soon());
    ASSERT_TRUE(r) << r.error().ToString();
    EXPECT_TRUE(r->status == 200 || r->status == 503) << r->status << " " << r->body;
    ok += r->status == 200;
    refused += r->status == 503;
  }
  EXPECT_GT(refused, 0) << "the pids limit did not bite: the test proves nothing";
  EXPECT_TRUE(Alive(pid));
  // Their threads end with their connections; then the daemon serves again.
  conns.clear();
  int status = 0;
  for (const Deadline until = DeadlineAfter(kGenerous);
       status != 200 && net::Clock::now() < until;) {
    auto c = RawClient::Connect(Unix(), Soon());
    ASSERT_TRUE(c);
    (void)c->Send(JsonPost("/deepbox/v1/fs/grep", R"({"pattern":"needle","path":"g"})"), Soon());
    auto r = c->ReadResponse(Soon());
    ASSERT_TRUE(r) << r.error().ToString();
    status = r->status;
    if (status == 200) {
      EXPECT_NE(r->body.find("f7.txt"), std::string::npos) << r->body;
    }
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_EQ(status, 200);
  EXPECT_TRUE(Alive(pid));
  // The cgroup's removal kills the daemon (it is in it); that is the end.
}

// ------------------------------------------------------ slowloris

TEST_F(SandboxdLoadTest, SlowlorisHeadersAreCutBy408WhileOthersAreServed) {
  Start({"--http-header-timeout", "2"});
  // A kept-alive connection idle for longer than the header deadline is not
  // cut by it (idle_timeout applies between requests).
  auto keep = RawClient::Connect(Unix(), Soon());
  ASSERT_TRUE(keep);
  ASSERT_TRUE(keep->Send(JsonPost("/deepbox/v1/fs/stat", R"({"path":"."})"), Soon()));
  auto first = keep->ReadResponse(Soon());
  ASSERT_TRUE(first) << first.error().ToString();
  EXPECT_EQ(first->status, 200);

  // 20 clients dripping one header byte per second (never finishing), and
  // one that connects and sends nothing.
  constexpr int kSlow = 20;
  std::vector<RawClient> slow;
  for (int i = 0; i < kSlow; ++i) {
    auto c = RawClient::Connect(i % 2 ? Tcp() : Unix(), Soon());
    ASSERT_TRUE(c) << c.error().ToString();
    slow.push_back(std::move(*c));
  }
  auto silent = RawClient::Connect(Tcp(), Soon());
  ASSERT_TRUE(silent);
  const std::string header = "GET /deepbox/v1/health HTTP/1.1\r\nHost: load\r\nX-Slow: ";
  std::atomic<bool> stop{false};
  std::thread drip([&] {
    for (size_t byte = 0; !stop; ++byte) {
      char c = byte < header.size() ? header[byte] : 'a';
      for (auto& s : slow) {
        if (!s.Readable()) (void)s.Send(std::string_view(&c, 1), Soon());
      }
      for (int i = 0; i < 10 && !stop; ++i) std::this_thread::sleep_for(100ms);
    }
  });
  // Meanwhile other clients are served, until every slow one was answered.
  auto client = Client();
  ASSERT_TRUE(client);
  int served_meanwhile = 0;
  const Deadline until = DeadlineAfter(kGenerous);
  auto all_answered = [&] {
    for (auto& s : slow) {
      if (!s.Readable()) return false;
    }
    return true;
  };
  while (!all_answered() && net::Clock::now() < until) {
    bool none_answered = true;
    for (auto& s : slow) none_answered = none_answered && !s.Readable();
    auto st = client->Stat(".");
    ASSERT_TRUE(st) << st.error().ToString();
    if (none_answered) ++served_meanwhile;
    std::this_thread::sleep_for(20ms);
  }
  stop = true;
  drip.join();
  EXPECT_GT(served_meanwhile, 0);
  for (int i = 0; i < kSlow; ++i) {
    auto all = slow[i].ReadToEnd(Soon());
    ASSERT_TRUE(all) << "slow client " << i << ": " << all.error().ToString();
    EXPECT_TRUE(all->starts_with("HTTP/1.1 408 ")) << "slow client " << i << ": " << *all;
    EXPECT_NE(all->find("Connection: close"), std::string::npos) << *all;
  }
  // The silent connection is closed too, without an answer (it asked nothing).
  auto nothing = silent->ReadToEnd(Soon());
  ASSERT_TRUE(nothing) << nothing.error().ToString();
  EXPECT_EQ(*nothing, "");

  // The kept-alive connection, idle for longer than the header deadline (and
  // older than it): a request, and the first half of a pipelined one whose
  // rest comes a moment later. Each request's deadline runs from its own
  // first byte.
  const std::string stat = JsonPost("/deepbox/v1/fs/stat", R"({"path":"."})");
  ASSERT_TRUE(keep->Send(stat + stat.substr(0, 20), Soon()));
  auto again = keep->ReadResponse(Soon());
  ASSERT_TRUE(again) << again.error().ToString();
  EXPECT_EQ(again->status, 200) << again->body;
  std::this_thread::sleep_for(300ms);
  ASSERT_TRUE(keep->Send(stat.substr(20), Soon()));
  again = keep->ReadResponse(Soon());
  ASSERT_TRUE(again) << again.error().ToString();
  EXPECT_EQ(again->status, 200) << again->body;
  ExpectHealthy();
}

TEST_F(SandboxdLoadTest, SlowBodiesAreCutBy408WhileBigUploadsPass) {
  // A body must not pause 2 s, and must average 1000 B/s after a 2 s grace.
  Start({"--http-body-timeout", "2", "--http-body-min-rate", "1000"});
  const std::string json_body =
      std::string(R"({"path":"slow.txt","content":")") + std::string(100000, 'x') + R"("})";
  struct Slow {
    std::string name;
    std::string request_head;
    std::string body;  // dripped 10 bytes per 200 ms (50 B/s); empty: silent
    std::optional<RawClient> conn;
    size_t sent = 0;
  };
  std::vector<Slow> slow;
  slow.push_back({"buffered route, dripping", JsonPost("/deepbox/v1/fs/write", json_body), "", {}});
  slow.back().body = slow.back().request_head.substr(slow.back().request_head.find("\r\n\r\n") + 4);
  slow.back().request_head.resize(slow.back().request_head.find("\r\n\r\n") + 4);
  slow.push_back({"streamed upload, dripping",
                  "PUT /deepbox/v1/fs/raw?path=slow.bin HTTP/1.1\r\nHost: load\r\n"
                  "Content-Length: 100000\r\n\r\n",
                  std::string(100000, 'y'),
                  {}});
  slow.push_back({"streamed upload, silent",
                  "PUT /deepbox/v1/fs/raw?path=silent.bin HTTP/1.1\r\nHost: load\r\n"
                  "Content-Length: 10\r\n\r\n",
                  "",
                  {}});
  slow.push_back({"buffered route, silent",
                  "POST /deepbox/v1/fs/write HTTP/1.1\r\nHost: load\r\nContent-Length: 10\r\n\r\n",
                  "",
                  {}});
  for (auto& s : slow) {
    auto c = RawClient::Connect(Unix(), Soon());
    ASSERT_TRUE(c);
    s.conn = std::move(*c);
    ASSERT_TRUE(s.conn->Send(s.request_head, Soon()));
  }
  std::atomic<bool> stop{false};
  std::thread drip([&] {
    while (!stop) {
      for (auto& s : slow) {
        if (s.sent >= s.body.size() || s.conn->Readable()) continue;
        size_t n = std::min<size_t>(10, s.body.size() - s.sent);
        (void)s.conn->Send(std::string_view(s.body).substr(s.sent, n), Soon());
        s.sent += n;
      }
      std::this_thread::sleep_for(200ms);
    }
  });
  // Big bodies at full speed pass under the same deadlines: streamed (no size
  // cap: 64 MiB) and buffered (8 MiB of JSON).
  auto client = Client();
  ASSERT_TRUE(client);
  std::string big(64u << 20, '\0');
  std::mt19937 rng(7);
  for (size_t i = 0; i < big.size(); i += 4096) big[i] = static_cast<char>(rng());
  auto up = client->Upload("big.bin", big, 0644);
  EXPECT_TRUE(up) << up.error().ToString();
  auto wr = client->Write("big.txt", std::string(8u << 20, 'z'), 0644);
  EXPECT_TRUE(wr) << wr.error().ToString();

  for (auto& s : slow) {
    auto all = s.conn->ReadToEnd(Soon());
    ASSERT_TRUE(all) << s.name << ": " << all.error().ToString();
    EXPECT_TRUE(all->starts_with("HTTP/1.1 408 ")) << s.name << ": " << *all;
    EXPECT_LT(s.sent, std::max<size_t>(s.body.size(), 1)) << s.name << ": the whole body went";
  }
  stop = true;
  drip.join();
  EXPECT_EQ(stdfs::file_size(daemon_->root() + "/big.bin"), big.size());
  EXPECT_FALSE(stdfs::exists(daemon_->root() + "/slow.bin"));
  EXPECT_FALSE(stdfs::exists(daemon_->root() + "/slow.txt"));
  ExpectHealthy();
}

// ------------------------------------------------------ slow readers

TEST_F(SandboxdLoadTest, OneBytePerSecondReadersHoldNoMemoryAndAreCut) {
  Start({"--http-write-timeout", "2"});
  constexpr size_t kFile = 64u << 20;
  {
    std::ofstream out(daemon_->root() + "/big.bin", std::ios::binary);
    std::string block(1 << 20, 'b');
    for (size_t i = 0; i < kFile; i += block.size()) out << block;
  }
  auto client = Client();
  ASSERT_TRUE(client);
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(client->Stat("big.bin"));
  ASSERT_TRUE(client->Exec(ExecRequest{.argv = {"true"}}));  // opens its /dev/null for good
  const long rss_before = ProcStatusField(daemon_->pid(), "VmRSS");
  const long fds_before = OpenFdCount(daemon_->pid());
  ASSERT_GT(rss_before, 0);

  // Readers of 64 MiB each: raw downloads (unix and TCP), a command printing
  // 64 MiB, and an upstream-API download.
  std::vector<std::pair<std::string, RawClient>> readers;
  auto add = [&](std::string name, const std::string& where, const std::string& request) {
    auto c = RawClient::Connect(where, Soon());
    ASSERT_TRUE(c);
    ASSERT_TRUE(c->Send(request, Soon()));
    readers.emplace_back(std::move(name), std::move(*c));
  };
  const std::string raw = "GET /deepbox/v1/fs/raw?path=big.bin HTTP/1.1\r\nHost: load\r\n\r\n";
  add("raw download (unix)", Unix(), raw);
  add("raw download (tcp)", Tcp(), raw);
  add("exec stream", Unix(),
      JsonPost("/deepbox/v1/exec/stream",
               fmt::format(R"({{"shell":"head -c {} /dev/zero"}})", kFile)));
  add("upstream download", Unix(), "GET /download/big.bin HTTP/1.1\r\nHost: load\r\n\r\n");

  // They read one byte per second, which the daemon cannot tell from a
  // stalled reader (the kernel takes its writes in socket-buffer steps): the
  // write deadline cuts them. A unix peer sees the close at once. A TCP peer
  // would see it only after the data in flight, or never (the kernel may drop
  // an orphaned connection whose peer shows a zero window without a reset),
  // so for all of them the daemon's side counts: its descriptors (sockets,
  // the command's pipes) are back to what they were.
  auto all_cut = [&] {
    for (size_t i = 0; i < readers.size(); ++i) {
      if (i != 1 && !readers[i].second.PeerClosed()) return false;
    }
    return OpenFdCount(daemon_->pid()) <= fds_before;
  };
  long rss_peak = rss_before;
  int served_while_held = 0;
  for (const Deadline until = DeadlineAfter(kGenerous); !all_cut() && net::Clock::now() < until;) {
    for (auto& [name, r] : readers) {
      if (r.PeerClosed()) continue;
      auto b = r.ReadSome(1, Soon());
      ASSERT_TRUE(b) << name << ": " << b.error().ToString();
    }
    // Others are served meanwhile.
    const bool none_cut_yet =
        std::none_of(readers.begin(), readers.end(), [](auto& r) { return r.second.PeerClosed(); });
    for (int k = 0; k < 5; ++k) {
      auto st = client->Stat("big.bin");
      ASSERT_TRUE(st) << st.error().ToString();
      served_while_held += none_cut_yet;
    }
    rss_peak = std::max(rss_peak, ProcStatusField(daemon_->pid(), "VmRSS"));
    std::this_thread::sleep_for(1s);
  }
  EXPECT_TRUE(all_cut()) << "the write deadline did not cut every stalled reader";

  EXPECT_GT(served_while_held, 0);
  std::printf("daemon VmRSS %ld kB before the readers, at most %ld kB with them\n", rss_before,
              rss_peak);
  // Four 64 MiB responses: nothing of them is queued in the daemon.
  EXPECT_LT(rss_peak - rss_before, 48 * 1024)
      << "RSS grew from " << rss_before << " kB to " << rss_peak << " kB";
  for (size_t i = 0; i < readers.size(); ++i) {
    if (i == 1) continue;  // TCP: see above
    auto rest = readers[i].second.ReadToEnd(Soon());
    ASSERT_TRUE(rest) << readers[i].first << ": " << rest.error().ToString();
    EXPECT_LT(rest->size(), kFile) << readers[i].first << ": got everything, was not cut";
  }
  ExpectHealthy();
}

// A reader that takes longer than the write deadline for the whole response,
// but keeps taking bytes, gets all of it: the deadline bounds a stall only.
TEST_F(SandboxdLoadTest, SlowButMovingReadersGetWholeLargeResponses) {
  Start({"--http-write-timeout", "2"}, /*tcp=*/false);
  const std::string text(3u << 20, 'm');
  {
    std::ofstream out(daemon_->root() + "/mid.txt", std::ios::binary);
    out << text;
  }
  struct Reader {
    std::string request;
    RawClient conn;
  };
  std::vector<Reader> readers;
  for (const std::string& request :
       {JsonPost("/deepbox/v1/fs/read", R"({"path":"mid.txt","max_bytes":4194304})"),
        std::string("GET /deepbox/v1/fs/raw?path=mid.txt HTTP/1.1\r\nHost: load\r\n\r\n")}) {
    auto c = RawClient::Connect(Unix(), Soon());
    ASSERT_TRUE(c);
    ASSERT_TRUE(c->Send(request, Soon()));
    readers.push_back({request, std::move(*c)});
  }
  // 64 KiB per 100 ms each: about 5 s for 3 MiB, over twice the deadline.
  std::vector<std::string> received(readers.size());
  const auto started = net::Clock::now();
  for (bool more = true; more;) {
    more = false;
    for (size_t i = 0; i < readers.size(); ++i) {
      auto chunk = readers[i].conn.ReadSome(64 << 10, DeadlineAfter(kGenerous));
      ASSERT_TRUE(chunk) << chunk.error().ToString();
      received[i] += *chunk;
      more = more || !chunk->empty();
    }
    std::this_thread::sleep_for(100ms);
    if (received[0].size() > text.size() && received[1].size() > text.size() &&
        received[1].ends_with("\r\n0\r\n\r\n") && received[0].ends_with("}")) {
      break;
    }
  }
  const auto took = net::Clock::now() - started;
  ASSERT_GT(took, 2s) << "the reader was not slower than the deadline: the test proves nothing";
  auto json_at = received[0].find("\r\n\r\n");
  ASSERT_NE(json_at, std::string::npos);
  auto o = ParseJsonObject(received[0].substr(json_at + 4));
  ASSERT_TRUE(o) << received[0].substr(0, 300);
  EXPECT_EQ(GetOptString(*o, "content").value_or("").size(), text.size());
  EXPECT_NE(received[1].find("HTTP/1.1 200"), std::string::npos);
  EXPECT_GT(received[1].size(), text.size());
  ExpectHealthy();
}

// ------------------------------------------------------ bodies over the cap

TEST_F(SandboxdLoadTest, BodiesOverTheCapAre413BeforeTheBodyIsSent) {
  Start({}, /*tcp=*/false);
  struct Case {
    std::string name;
    std::string head;
  };
  const std::vector<Case> cases = {
      {"buffered route",
       "POST /deepbox/v1/fs/write HTTP/1.1\r\nHost: load\r\nContent-Type: application/json\r\n"
       "Content-Length: 1099511627776\r\n\r\n"},
      {"buffered route, 100-continue",
       "POST /deepbox/v1/fs/write HTTP/1.1\r\nHost: load\r\nExpect: 100-continue\r\n"
       "Content-Length: 1099511627776\r\n\r\n"},
      {"streamed upload larger than the disk",
       "PUT /deepbox/v1/fs/raw?path=huge.bin HTTP/1.1\r\nHost: load\r\n"
       "Content-Length: 1152921504606846976\r\n\r\n"},
      {"streamed upload larger than the disk, 100-continue",
       "PUT /deepbox/v1/fs/raw?path=huge.bin HTTP/1.1\r\nHost: load\r\nExpect: 100-continue\r\n"
       "Content-Length: 1152921504606846976\r\n\r\n"},
  };
  for (const auto& c : cases) {
    auto conn = RawClient::Connect(Unix(), Soon());
    ASSERT_TRUE(conn);
    // Only the headers: not one byte of the body is ever sent.
    ASSERT_TRUE(conn->Send(c.head, Soon()));
    auto all = conn->ReadToEnd(Soon());
    ASSERT_TRUE(all) << c.name << ": " << all.error().ToString();
    EXPECT_TRUE(all->starts_with("HTTP/1.1 413 ")) << c.name << ": " << *all;
    EXPECT_EQ(all->find("100 Continue"), std::string::npos) << c.name << ": " << *all;
    EXPECT_NE(all->find("Connection: close"), std::string::npos) << c.name << ": " << *all;
  }
  EXPECT_FALSE(stdfs::exists(daemon_->root() + "/huge.bin"));
  ExpectHealthy();
}

// ------------------------------------------------------ 50,000 mixed requests

// The issue's 50,000 requests, except in the sanitizer build: there they took
// 19-38 s on a loaded 2-core machine (with another test running), too close
// to a minute, so it runs 20,000 (12-16 s). DEEPBOX_LOAD_REQUESTS=50000 runs
// the full count anywhere; bench/sandboxd_load runs it on the release build.
size_t MixedRequestCount() {
  if (const char* env = std::getenv("DEEPBOX_LOAD_REQUESTS"); env != nullptr) {
    size_t n = 0;
    auto [p, ec] = std::from_chars(env, env + std::strlen(env), n);
    if (ec == std::errc() && *p == '\0' && n > 0) return n;
  }
#if defined(__SANITIZE_ADDRESS__)
  return 20000;
#else
  return 50000;
#endif
}

TEST_F(SandboxdLoadTest, MixedRequestsFromSixteenClientsKeepMemoryBounded) {
  // Under ASan freed memory sits in a 256 MiB quarantine before reuse, which
  // would read as growth: a small one keeps RSS about live memory.
  std::string asan = std::getenv("ASAN_OPTIONS") ? std::getenv("ASAN_OPTIONS") : "";
  ::setenv("ASAN_OPTIONS", (asan + (asan.empty() ? "" : ":") + "quarantine_size_mb=8").c_str(), 1);
  Start({}, /*tcp=*/false);
  if (asan.empty()) {
    ::unsetenv("ASAN_OPTIONS");
  } else {
    ::setenv("ASAN_OPTIONS", asan.c_str(), 1);
  }
  ASSERT_TRUE(MixedWorkload::Prepare(sb()));
  constexpr int kClients = 16;
  std::vector<std::unique_ptr<SandboxdClient>> owned;
  std::vector<Sandbox*> clients;
  for (int c = 0; c < kClients; ++c) {
    owned.push_back(Client());
    ASSERT_TRUE(owned.back());
    clients.push_back(owned.back().get());
  }
  std::string first_failure;
  const pid_t pid = daemon_->pid();
  // Warm-up: every kind of request on every connection, caches and arenas
  // filled, so what follows measures growth, not first use.
  ASSERT_EQ(MixedWorkload::Run(clients, 3200, &first_failure), 0u) << first_failure;
  const long rss_warm = ProcStatusField(pid, "VmRSS");
  const long fds_warm = OpenFdCount(pid);
  const long threads_warm = ProcStatusField(pid, "Threads");

  const size_t total = MixedRequestCount();
  EXPECT_EQ(MixedWorkload::Run(clients, total, &first_failure), 0u) << first_failure;
  const long rss_after = ProcStatusField(pid, "VmRSS");
  std::printf(
      "%zu mixed requests from %d clients: daemon VmRSS %ld kB after warm-up, %ld kB after\n",
      total, kClients, rss_warm, rss_after);
  // Growth that comes with requests crosses 64 MiB from 64 MiB / 20,000 =
  // 3.3 KiB per request (1.3 KiB at 50,000): about one request's and
  // response's buffers, so keeping them (or anything of that size per
  // request) fails. What does not grow with the count stays well below: the
  // release build grows < 1 MiB here, the sanitizer build 8-18 MiB (its
  // quarantine and bookkeeping). Unreachable leaks of any size are
  // LeakSanitizer's, at the exit below.
  EXPECT_LT(rss_after - rss_warm, 64 * 1024) << total << " requests: RSS " << rss_warm
                                             << " kB after warm-up, " << rss_after << " kB after";
  // Nothing countable leaks either: descriptors, threads.
  EXPECT_LE(OpenFdCount(pid), fds_warm + 2);
  EXPECT_LE(ProcStatusField(pid, "Threads"), threads_warm + 2);
  owned.clear();
  // A clean exit (in the sanitizer build LeakSanitizer checks the heap then).
  int status = daemon_->Terminate();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "exit status " << status;
}

}  // namespace
}  // namespace deepbox
