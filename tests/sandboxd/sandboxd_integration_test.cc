// Drives the real deepbox-sandboxd binary over a unix socket and loopback TCP.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "common/json.h"
#include "common/testing/temp_dir.h"
#include "net/conn.h"
#include "net/http_client.h"
#include "net/token_digest.h"
#include "net/url.h"
#include "sandbox/testing/scoped_sandboxd.h"

namespace deepbox {
namespace {

using namespace std::chrono_literals;
using testing::ScopedSandboxd;
namespace stdfs = std::filesystem;

std::string ReadHostFile(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class SandboxdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto d = ScopedSandboxd::Start({.tcp = true});
    ASSERT_TRUE(d) << d.error().ToString();
    daemon_ = std::move(*d);
  }
  Sandbox& sb() { return daemon_->client(); }
  std::string Root() { return daemon_->root(); }
  std::unique_ptr<net::HttpClient> Http(bool tcp = false) {
    auto c = net::HttpClient::Create(tcp ? daemon_->tcp_url() : daemon_->unix_url());
    EXPECT_TRUE(c);
    return std::move(*c);
  }
  net::Response Post(const std::string& target, const std::string& body, bool tcp = false) {
    net::ClientRequest req;
    req.method = "POST";
    req.target = target;
    req.body = body;
    auto r = Http(tcp)->Send(req);
    EXPECT_TRUE(r) << r.error().ToString();
    return r ? *r : net::Response{};
  }
  net::Response Get(const std::string& target, std::string method = "GET") {
    net::ClientRequest req;
    req.method = method;
    req.target = target;
    auto r = Http()->Send(req);
    EXPECT_TRUE(r) << r.error().ToString();
    return r ? *r : net::Response{};
  }
  std::unique_ptr<ScopedSandboxd> daemon_;
};

// ---------------------------------------------------------------- basics

// What an idle timer decides on: requests in flight (an exec while it runs),
// background processes running, and the time since the last request ended;
// the probe itself and the health checks are no activity.
TEST_F(SandboxdTest, ActivityCountsRequestsAndProcessesButNotProbes) {
  auto activity = [&] {
    auto r = Get("/deepbox/v1/activity");
    EXPECT_EQ(r.status, 200) << r.body;
    auto o = ParseJsonObject(r.body);
    EXPECT_TRUE(o) << r.body;
    return o.value_or(json::object{});
  };
  ASSERT_EQ(Get("/deepbox/v1/info").status, 200);
  // A request stops counting just after its answer is sent: the client may
  // ask before that, so wait (briefly) for it.
  auto first = activity();
  for (int i = 0; i < 500 && first.at("requests_in_flight").as_int64() != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    first = activity();
  }
  EXPECT_EQ(first.at("requests_in_flight").as_int64(), 0);
  EXPECT_EQ(first.at("processes_running").as_int64(), 0);
  // Probes do not reset the idle time: it only grows.
  int64_t idle = first.at("idle_ms").as_int64();
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(Get("/deepbox/v1/health").status, 200);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    int64_t now = activity().at("idle_ms").as_int64();
    EXPECT_GE(now, idle);
    idle = now;
  }
  EXPECT_GE(idle, 100);
  // An exec in flight counts until it ends.
  std::thread exec([&] { Post("/deepbox/v1/exec", R"({"shell":"sleep 1"})"); });
  bool seen = false;
  for (int i = 0; i < 500 && !seen; ++i) {
    seen = activity().at("requests_in_flight").as_int64() == 1;
    if (!seen) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  exec.join();
  EXPECT_TRUE(seen);
  auto after = activity();
  for (int i = 0; i < 500 && after.at("requests_in_flight").as_int64() != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    after = activity();
  }
  EXPECT_EQ(after.at("requests_in_flight").as_int64(), 0);
  EXPECT_LT(after.at("idle_ms").as_int64(), idle);  // the exec just ended
  // A background process counts while it runs.
  auto start = Post("/deepbox/v1/processes", R"({"shell":"sleep 30"})");
  ASSERT_EQ(start.status, 200) << start.body;
  EXPECT_EQ(activity().at("processes_running").as_int64(), 1);
  std::string id(ParseJsonObject(start.body)->at("id").as_string());
  EXPECT_EQ(Get("/deepbox/v1/processes/" + id, "DELETE").status, 200);
  EXPECT_EQ(activity().at("processes_running").as_int64(), 0);
}

TEST_F(SandboxdTest, HealthAndInfoOnBothTransports) {
  for (bool tcp : {false, true}) {
    net::ClientRequest req;
    req.target = "/deepbox/v1/health";
    auto r = Http(tcp)->Send(req);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    EXPECT_NE(r->body.find("\"status\":\"ok\""), std::string::npos);
  }
  EXPECT_EQ(sb().root(), stdfs::canonical(Root()).string());
}

TEST_F(SandboxdTest, ExecArgvShellEnvCwdStdin) {
  ExecRequest r;
  r.argv = {"/bin/echo", "hello", "world"};
  auto e = sb().Exec(r);
  ASSERT_TRUE(e) << e.error().ToString();
  EXPECT_EQ(e->kind, ExitKind::kExited);
  EXPECT_EQ(e->exit_code, 0);
  EXPECT_EQ(e->stdout_data, "hello world\n");

  ASSERT_TRUE(sb().Mkdir("sub", true));
  ExecRequest s;
  s.shell = "echo out; echo err 1>&2; pwd; echo $FOO; cat; exit 3";
  s.cwd = "sub";
  s.env = {{"FOO", "bar"}};
  s.stdin_data = "from-stdin";
  auto e2 = sb().Exec(s);
  ASSERT_TRUE(e2) << e2.error().ToString();
  EXPECT_EQ(e2->exit_code, 3);
  EXPECT_EQ(e2->stdout_data, "out\n" + stdfs::canonical(Root()).string() + "/sub\nbar\nfrom-stdin");
  EXPECT_EQ(e2->stderr_data, "err\n");
  // Both streams land in the combined output (their relative order across two
  // pipes depends on scheduling).
  EXPECT_EQ(e2->combined.size(), e2->stdout_data.size() + e2->stderr_data.size());
  EXPECT_NE(e2->combined.find("err\n"), std::string::npos);
}

TEST_F(SandboxdTest, SpawnFailureIsTypedNotAnError) {
  ExecRequest r;
  r.argv = {"/nonexistent/binary"};
  auto e = sb().Exec(r);
  ASSERT_TRUE(e) << e.error().ToString();
  EXPECT_EQ(e->kind, ExitKind::kSpawnFailed);
  EXPECT_NE(e->error.find("ENOENT"), std::string::npos) << e->error;
}

TEST_F(SandboxdTest, OutputCapOnAFloodKeepsDaemonSmall) {
  ExecRequest r;
  // ~200 MB of output; the cap keeps 64 KiB.
  r.shell = "head -c 200000000 /dev/zero | tr '\\0' 'x'";
  r.max_output_bytes = 64 * 1024;
  auto e = sb().Exec(r);
  ASSERT_TRUE(e) << e.error().ToString();
  EXPECT_EQ(e->exit_code, 0);
  EXPECT_TRUE(e->stdout_truncated);
  EXPECT_EQ(e->stdout_data.size(), 64u * 1024);
  // The daemon's resident memory stayed far below the output size.
  std::string status = ReadHostFile(fmt::format("/proc/{}/status", daemon_->pid()));
  auto pos = status.find("VmHWM:");
  ASSERT_NE(pos, std::string::npos);
  long hwm_kb = std::stol(status.substr(pos + 6));
  EXPECT_LT(hwm_kb, 150 * 1024) << "peak RSS " << hwm_kb << " kB";
}

TEST_F(SandboxdTest, TimeoutKillsGrandchildren) {
  ExecRequest r;
  r.shell = "sleep 1000 & echo $! > grandchild.pid; sleep 1000";
  r.timeout = 500ms;
  auto e = sb().Exec(r);
  ASSERT_TRUE(e) << e.error().ToString();
  EXPECT_EQ(e->kind, ExitKind::kTimedOut);
  pid_t gc = std::stoi(ReadHostFile(Root() + "/grandchild.pid"));
  // The grandchild is gone (or a zombie about to be reaped by its reaper).
  for (int i = 0; i < 200 && ::kill(gc, 0) == 0; ++i) {
    std::string st = ReadHostFile(fmt::format("/proc/{}/stat", gc));
    if (st.find(") Z") != std::string::npos || st.empty()) break;
    std::this_thread::sleep_for(10ms);
  }
  std::string st = ReadHostFile(fmt::format("/proc/{}/stat", gc));
  EXPECT_TRUE(st.empty() || st.find(") Z") != std::string::npos) << st;
}

TEST_F(SandboxdTest, StreamingExecDeliversInOrderAndExitLast) {
  ExecRequest r;
  r.shell = "for i in 1 2 3; do echo line$i; sleep 0.05; done; echo bad >&2; exit 7";
  std::string out, err;
  auto e = sb().ExecStream(r, [&](OutputStream s, std::string_view d) {
    (s == OutputStream::kStdout ? out : err).append(d);
    return true;
  });
  ASSERT_TRUE(e) << e.error().ToString();
  EXPECT_EQ(e->exit_code, 7);
  EXPECT_EQ(out, "line1\nline2\nline3\n");
  EXPECT_EQ(err, "bad\n");
}

TEST_F(SandboxdTest, StreamingCancelKillsCommand) {
  ExecRequest r;
  // The pid file is written before the first output: the client cancels on
  // that output, and the daemon may kill the shell before its next command.
  r.shell = "echo $$ > stream.pid; echo started; sleep 1000";
  auto e = sb().ExecStream(r, [&](OutputStream, std::string_view) { return false; });
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error().code, ErrorCode::kCancelled);
  // The daemon notices the closed connection and kills the group.
  pid_t pid = 0;
  for (int i = 0; i < 100 && pid == 0; ++i) {
    auto text = ReadHostFile(Root() + "/stream.pid");
    if (!text.empty()) pid = std::stoi(text);
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_GT(pid, 0);
  bool gone = false;
  for (int i = 0; i < 1500 && !gone; ++i) {  // keepalive interval bounds detection
    std::string st = ReadHostFile(fmt::format("/proc/{}/stat", pid));
    gone = st.empty() || st.find(") Z") != std::string::npos;
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(gone);
}

TEST_F(SandboxdTest, InvalidUtf8OutputStaysValidJson) {
  // As text (what clients that do not ask for base64 get): valid UTF-8.
  auto text = Post("/deepbox/v1/exec", R"({"shell":"printf 'ok\\377\\376end'"})");
  ASSERT_EQ(text.status, 200) << text.body;
  auto o = ParseJsonObject(text.body);
  ASSERT_TRUE(o) << text.body;
  EXPECT_EQ(GetOptString(*o, "stdout").value_or(""),
            "ok\xEF\xBF\xBD\xEF\xBF\xBD"
            "end");
  // SandboxdClient asks for base64: the exact bytes (tests/sandboxd/exec_test.cc).
  ExecRequest r;
  r.shell = "printf 'ok\\377\\376end'";
  auto e = sb().Exec(r);
  ASSERT_TRUE(e) << e.error().ToString();
  EXPECT_EQ(e->stdout_data,
            "ok\xFF\xFE"
            "end");
}

// ---------------------------------------------------------------- files

TEST_F(SandboxdTest, TenMiBBinaryRoundTrip) {
  std::string data(10 << 20, '\0');
  std::mt19937 rng(42);
  for (auto& c : data) c = static_cast<char>(rng());
  ASSERT_TRUE(sb().Upload("big/blob.bin", data, 0600));
  auto back = sb().Download("big/blob.bin");
  ASSERT_TRUE(back) << back.error().ToString();
  EXPECT_EQ(*back, data);
  EXPECT_EQ(ReadHostFile(Root() + "/big/blob.bin"), data);
  struct stat st {};
  ASSERT_EQ(::stat((Root() + "/big/blob.bin").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  // And through the JSON API (base64).
  ASSERT_TRUE(sb().Write("big/blob2.bin", data, 0644));
  auto r = sb().Read("big/blob2.bin", ReadOptions{.max_bytes = 32u << 20});
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_TRUE(r->binary);
  EXPECT_EQ(r->content, data);
}

TEST_F(SandboxdTest, ListNamesGivesNamesAndTypesWithoutStat) {
  ASSERT_TRUE(sb().Write("names/file.txt", "12345", 0644));
  ASSERT_TRUE(sb().Mkdir("names/dir"));
  ExecRequest ln;
  ln.argv = {"ln", "-s", "file.txt", Root() + "/names/link"};
  auto made = sb().Exec(ln);
  ASSERT_TRUE(made && made->exit_code == 0);
  auto names = sb().ListNames("names");
  auto full = sb().List("names");
  ASSERT_TRUE(names) << names.error().ToString();
  ASSERT_TRUE(full) << full.error().ToString();
  ASSERT_EQ(names->size(), 3u);
  ASSERT_EQ(full->size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ((*names)[i].name, (*full)[i].name);
    EXPECT_EQ((*names)[i].path, (*full)[i].path);
    EXPECT_EQ((*names)[i].type, (*full)[i].type);
  }
  EXPECT_EQ((*names)[0].type, FileType::kDirectory);
  EXPECT_EQ((*names)[1].name, "file.txt");
  EXPECT_EQ((*names)[1].size, 0u);  // not asked for
  EXPECT_EQ((*full)[1].size, 5u);
  EXPECT_EQ((*names)[2].type, FileType::kSymlink);
  EXPECT_EQ((*names)[2].link_target, "");
  EXPECT_EQ((*full)[2].link_target, "file.txt");
  // "stat" must be a boolean.
  auto bad = Post("/deepbox/v1/fs/list", R"({"path":"names","stat":"no"})");
  EXPECT_EQ(bad.status, 400) << bad.body;
  EXPECT_NE(bad.body.find("stat"), std::string::npos) << bad.body;
}

TEST_F(SandboxdTest, FileOperations) {
  ASSERT_TRUE(sb().Write("/" + Root().substr(1) + "/a/b/c.txt", "l1\nl2\nl3\nl4\n", 0644));
  auto st = sb().Stat("a/b/c.txt");
  ASSERT_TRUE(st);
  EXPECT_EQ(st->size, 12);
  EXPECT_EQ(st->type, FileType::kFile);
  auto ls = sb().List("a/b");
  ASSERT_TRUE(ls);
  ASSERT_EQ(ls->size(), 1u);
  EXPECT_EQ((*ls)[0].name, "c.txt");
  auto win = sb().Read("a/b/c.txt", ReadOptions{.line_offset = 1, .line_limit = 2});
  ASSERT_TRUE(win) << win.error().ToString();
  EXPECT_EQ(win->content, "l2\nl3");
  EXPECT_EQ(win->total_lines, 4);
  EXPECT_EQ(win->lines_returned, 2);
  EXPECT_TRUE(win->more_lines);
  auto ed = sb().Edit("a/b/c.txt", "l2", "L2", false);
  ASSERT_TRUE(ed) << ed.error().ToString();
  EXPECT_EQ(ed->occurrences, 1);
  auto amb = sb().Edit("a/b/c.txt", "l", "x", false);
  ASSERT_FALSE(amb);
  EXPECT_EQ(amb.error().code, ErrorCode::kConflict);
  auto missing = sb().Edit("a/b/c.txt", "zzz", "x", false);
  ASSERT_FALSE(missing);
  EXPECT_EQ(ReadHostFile(Root() + "/a/b/c.txt"), "l1\nL2\nl3\nl4\n");
  ASSERT_TRUE(sb().Move("a/b/c.txt", "a/d.txt", false));
  EXPECT_FALSE(sb().Stat("a/b/c.txt"));
  auto del = sb().Delete("a", false);
  ASSERT_FALSE(del);
  EXPECT_EQ(del.error().code, ErrorCode::kConflict);
  ASSERT_TRUE(sb().Delete("a", true));
  EXPECT_FALSE(stdfs::exists(Root() + "/a"));
  auto nf = sb().Read("nope.txt", {});
  ASSERT_FALSE(nf);
  EXPECT_EQ(nf.error().code, ErrorCode::kNotFound);
}

TEST_F(SandboxdTest, PathEscapesAreRefusedAndTouchNothing) {
  stdfs::create_symlink("/etc", Root() + "/etc_link");
  stdfs::create_symlink("../", Root() + "/up");
  for (std::string p : {"../outside.txt", "/etc/passwd", "etc_link/passwd", "up/x", "a/../../x",
                        "/tmp/escape.txt"}) {
    auto r = sb().Read(p, {});
    ASSERT_FALSE(r) << p;
    EXPECT_EQ(r.error().code, ErrorCode::kPermissionDenied) << p << ": " << r.error().message;
    auto w = sb().Write(p, "pwned", 0644);
    ASSERT_FALSE(w) << p;
    EXPECT_TRUE(w.error().code == ErrorCode::kPermissionDenied) << p << ": " << w.error().message;
  }
  EXPECT_FALSE(stdfs::exists(stdfs::path(Root()).parent_path() / "outside.txt"));
  EXPECT_FALSE(stdfs::exists("/tmp/escape.txt"));
  auto cwd = sb().Exec(ExecRequest{.argv = {"/bin/pwd"}, .cwd = "etc_link"});
  ASSERT_FALSE(cwd);  // a working directory outside the root is refused, not run in /etc
  EXPECT_EQ(cwd.error().code, ErrorCode::kPermissionDenied) << cwd.error().message;
}

TEST_F(SandboxdTest, SymlinkSwappedDuringRequestsNeverEscapes) {
  stdfs::create_directories(Root() + "/inside");
  ReadHostFile("/etc/hostname");
  std::ofstream(Root() + "/inside/secret.txt") << "inside";
  std::atomic<bool> stop{false};
  std::thread swapper([&] {
    std::string link = Root() + "/flip";
    for (int i = 0; !stop; ++i) {
      std::error_code ec;
      stdfs::remove(link + ".tmp", ec);
      stdfs::create_directory_symlink(i % 2 ? "/etc" : Root() + "/inside", link + ".tmp", ec);
      stdfs::rename(link + ".tmp", link, ec);
    }
  });
  int escaped = 0;
  for (int i = 0; i < 300; ++i) {
    auto r = sb().Read("flip/hostname", {});
    if (r) ++escaped;
    auto w = sb().Write("flip/written.txt", "x", 0644);
    (void)w;
  }
  stop = true;
  swapper.join();
  EXPECT_EQ(escaped, 0);
  EXPECT_FALSE(stdfs::exists("/etc/written.txt"));
}

TEST_F(SandboxdTest, ConcurrentRequests) {
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 20; ++t) {
    threads.emplace_back([&, t] {
      auto client = daemon_->Connect();
      if (!client) return;
      for (int i = 0; i < 10; ++i) {
        std::string name = fmt::format("c/{}-{}.txt", t, i);
        if (!(*client)->Write(name, name, 0644)) continue;
        auto r = (*client)->Read(name, {});
        if (r && r->content == name) ++ok;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok.load(), 200);
}

TEST_F(SandboxdTest, MalformedJsonAndUnknownEndpoints) {
  auto r = Post("/deepbox/v1/fs/read", "{not json");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("INVALID_ARGUMENT"), std::string::npos);
  r = Post("/deepbox/v1/fs/read", R"({"path": 5})");
  EXPECT_EQ(r.status, 400);
  r = Post("/deepbox/v1/exec", R"({"argv": "notalist"})");
  EXPECT_EQ(r.status, 400);
  r = Post("/deepbox/v1/nope", "{}");
  EXPECT_EQ(r.status, 404);
  // Raw garbage on the socket gets a 400 and the daemon keeps serving.
  auto conn = net::Conn::Connect(*net::Endpoint::Parse("unix:" + daemon_->socket_path()),
                                 net::DeadlineAfter(2000ms));
  ASSERT_TRUE(conn);
  ASSERT_TRUE(conn->WriteAll("BLAH\r\n\r\n", net::DeadlineAfter(2000ms)));
  char buf[256];
  auto n = conn->ReadSome(buf, sizeof buf, net::DeadlineAfter(5000ms));
  ASSERT_TRUE(n);
  EXPECT_NE(std::string(buf, *n).find("400"), std::string::npos);
  EXPECT_TRUE(sb().Stat("."));
}

// Issue 16: a number the client sends never aborts the daemon (std::stoul,
// chrono overflow, infinity cast to an integer); each is a 400 naming the field.
TEST_F(SandboxdTest, HostileNumbersAre400sAndTheDaemonKeepsServing) {
  struct Case {
    std::string target, body;
  };
  const std::vector<Case> cases = {
      {"/deepbox/v1/fs/write", R"({"path":"a","content":"x","mode":"zz"})"},
      {"/deepbox/v1/fs/write", R"({"path":"a","content":"x","mode":"77777"})"},
      {"/deepbox/v1/fs/write", R"({"path":"a","content":"x","mode":"99999999999999999999"})"},
      {"/deepbox/v1/fs/write", R"({"path":"a","content":"x","mode":644})"},
      {"/deepbox/v1/fs/mkdir", R"({"path":"d","mode":"-1"})"},
      {"/deepbox/v1/fs/read", R"({"path":"a","line_offset":1e400})"},
      {"/deepbox/v1/fs/read", R"({"path":"a","byte_length":18446744073709551615})"},
      {"/deepbox/v1/fs/read", R"({"path":"a","max_bytes":-1})"},
      {"/deepbox/v1/exec", R"({"shell":"true","timeout_ms":9000000000000000000})"},
      {"/deepbox/v1/exec", R"({"shell":"true","timeout_ms":-1e400})"},
      {"/deepbox/v1/exec", R"({"shell":"true","grace_ms":9000000000000000000})"},
      {"/deepbox/v1/exec", R"({"shell":"true","max_output_bytes":"lots"})"},
      {"/deepbox/v1/exec/stream", R"({"shell":"true","timeout_ms":9000000000000000000})"},
      {"/deepbox/v1/processes", R"({"shell":"true","timeout_ms":1e19})"},
      {"/deepbox/v1/fs/grep", R"({"pattern":"x","max_count":1e400})"},
      {"/deepbox/v1/fs/glob", R"({"pattern":"*","max_results":-1e400})"},
  };
  for (const auto& c : cases) {
    auto r = Post(c.target, c.body);
    EXPECT_EQ(r.status, 400) << c.target << " " << c.body << " -> " << r.body;
    EXPECT_NE(r.body.find("INVALID_ARGUMENT"), std::string::npos) << r.body;
  }
  auto start = Post("/deepbox/v1/processes", R"({"shell":"echo hi"})");
  ASSERT_EQ(start.status, 200) << start.body;
  std::string id(ParseJsonObject(start.body)->at("id").as_string());
  for (std::string query : {"offset=-1", "offset=abc", "offset=99999999999999999999",
                            "max_bytes=1e3", "wait_ms=-5", "wait_ms=%2012", "offset="}) {
    auto r = Get("/deepbox/v1/processes/" + id + "/logs?" + query);
    EXPECT_EQ(r.status, 400) << query << " -> " << r.body;
  }
  EXPECT_EQ(Get("/deepbox/v1/processes/" + id + "/logs?offset=0&max_bytes=99999999999").status,
            200);
  net::ClientRequest put;
  put.method = "PUT";
  put.body = "x";
  for (std::string mode : {"0zz9", "-644", "00644", "9999"}) {
    put.target = "/v1/files/m.txt?mode=" + mode;
    EXPECT_EQ(Http()->Send(put)->status, 400) << mode;
  }
  EXPECT_TRUE(sb().Stat("."));
  ExecRequest ok;
  ok.shell = "echo alive";
  auto r = sb().Exec(ok);
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->stdout_data, "alive\n");
}

// One request to a daemon's unix socket, with extra headers.
net::Response Ask(const ScopedSandboxd& d, const std::string& method, const std::string& target,
                  std::vector<std::pair<std::string, std::string>> headers = {},
                  std::string body = "") {
  auto http = net::HttpClient::Create(d.unix_url());
  EXPECT_TRUE(http);
  net::ClientRequest req;
  req.method = method;
  req.target = target;
  req.body = std::move(body);
  for (auto& [k, v] : headers) req.headers.Set(k, v);
  auto r = (*http)->Send(req);
  EXPECT_TRUE(r) << r.error().ToString();
  return r ? *r : net::Response{};
}

constexpr const char* kExecBody = R"({"argv":["echo","ran"]})";

TEST(SandboxdAuthTest, TokenRequiredOnEveryRequestButHealthChecks) {
  auto d = ScopedSandboxd::Start({.token = "s3cret"});
  ASSERT_TRUE(d) << d.error().ToString();
  // The probes (Kubernetes httpGet carries no token) and nothing else.
  for (std::string target : {"/", "/healthz", "/v1/health", "/deepbox/v1/health"}) {
    EXPECT_EQ(Ask(**d, "GET", target).status, 200) << target;
  }
  for (auto [method, target] : {std::pair{"GET", "/deepbox/v1/info"},
                                {"POST", "/deepbox/v1/exec"},
                                {"POST", "/execute"},
                                {"GET", "/v1/files/"},
                                {"GET", "/v1/metadata"},
                                {"POST", "/v1/health"},
                                {"GET", "/deepbox/v1/health/../info"}}) {
    auto r = Ask(**d, method, target, {}, kExecBody);
    EXPECT_EQ(r.status, 401) << method << " " << target;
  }
  // The dedicated header, or (as before) Authorization: Bearer.
  auto r = Ask(**d, "POST", "/deepbox/v1/exec", {{"X-Sandboxd-Token", "s3cret"}}, kExecBody);
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.body.find("ran"), std::string::npos) << r.body;
  EXPECT_EQ(
      Ask(**d, "POST", "/deepbox/v1/exec", {{"Authorization", "Bearer s3cret"}}, kExecBody).status,
      200);
  // X-Sandboxd-Token wins over Authorization (a router's token may be there).
  EXPECT_EQ(
      Ask(**d, "POST", "/deepbox/v1/exec",
          {{"X-Sandboxd-Token", "router-token"}, {"Authorization", "Bearer s3cret"}}, kExecBody)
          .status,
      401);
  EXPECT_EQ(Ask(**d, "POST", "/deepbox/v1/exec", {{"X-Sandboxd-Token", "s3cre"}}, kExecBody).status,
            401);
  auto bad = (*d)->Connect({.token = "wrong"});
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::kUnauthenticated);
  EXPECT_TRUE((*d)->client().Stat("."));  // the fixture's client carries the token
  // The token does not leak into commands.
  auto e = (*d)->client().Exec(ExecRequest{.shell = "echo ${SANDBOXD_TOKEN:-unset}"});
  ASSERT_TRUE(e);
  EXPECT_EQ(e->stdout_data, "unset\n");
}

// --token-sha256-file (deploy/k8s: the claim's annotation in a downward API
// file): closed until a verifier arrives, then only its token, and a new
// verifier replaces the old one at once.
TEST(SandboxdAuthTest, TokenVerifierFileAdmitsOnlyItsToken) {
  deepbox::testing::TempDir tmp("deepbox-verifier");
  const stdfs::path& dir = tmp.path();
  stdfs::path file = dir / "token-sha256";
  // As kubelet updates a downward API volume: a new file swapped in.
  auto put = [&](const std::string& text) {
    stdfs::path tmp = dir / "next";
    std::ofstream(tmp) << text;
    stdfs::rename(tmp, file);
  };
  auto d = ScopedSandboxd::Start(
      {.extra_args = {"--token-sha256-file", file.string()}, .tcp = true, .connect = false});
  ASSERT_TRUE(d) << d.error().ToString();
  auto exec = [&](std::vector<std::pair<std::string, std::string>> headers) {
    return Ask(**d, "POST", "/deepbox/v1/exec", std::move(headers), kExecBody);
  };
  // No verifier yet (a warm pod nobody claimed): health only.
  EXPECT_EQ(Ask(**d, "GET", "/v1/health").status, 200);
  auto r = exec({{"X-Sandboxd-Token", "anything"}});
  EXPECT_EQ(r.status, 401);
  EXPECT_NE(r.body.find("no owner yet"), std::string::npos) << r.body;
  EXPECT_EQ(exec({}).status, 401);
  put("");  // the annotation is absent: kubelet writes an empty file
  EXPECT_EQ(exec({{"X-Sandboxd-Token", ""}}).status, 401);
  put("not a verifier\n");
  EXPECT_EQ(exec({{"X-Sandboxd-Token", "not a verifier"}}).status, 401);

  put(net::TokenVerifier("owner-a"));
  EXPECT_EQ(exec({}).status, 401);
  EXPECT_EQ(exec({{"X-Sandboxd-Token", "owner-b"}}).status, 401);
  EXPECT_EQ(exec({{"X-Sandboxd-Token", net::TokenVerifier("owner-a")}}).status, 401);
  r = exec({{"X-Sandboxd-Token", "owner-a"}});
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.body.find("ran"), std::string::npos) << r.body;
  // Over TCP as well (a peer pod reaches the daemon that way).
  {
    auto http = net::HttpClient::Create((*d)->tcp_url());
    ASSERT_TRUE(http);
    net::ClientRequest req;
    req.method = "POST";
    req.target = "/deepbox/v1/exec";
    req.body = kExecBody;
    auto peer = (*http)->Send(req);
    ASSERT_TRUE(peer);
    EXPECT_EQ(peer->status, 401);
    req.headers.Set("X-Sandboxd-Token", "owner-a");
    auto owner = (*http)->Send(req);
    ASSERT_TRUE(owner);
    EXPECT_EQ(owner->status, 200);
  }
  SandboxdClientOptions co;
  co.default_headers.Set("X-Sandboxd-Token", "owner-a");
  auto client = (*d)->Connect(co);
  ASSERT_TRUE(client) << client.error().ToString();
  EXPECT_TRUE((*client)->Stat("."));

  put(net::TokenVerifier("owner-b"));
  EXPECT_EQ(exec({{"X-Sandboxd-Token", "owner-a"}}).status, 401);
  EXPECT_EQ(exec({{"X-Sandboxd-Token", "owner-b"}}).status, 200);
  stdfs::remove(file);
  EXPECT_EQ(exec({{"X-Sandboxd-Token", "owner-b"}}).status, 401);
  EXPECT_EQ(Ask(**d, "GET", "/healthz").status, 200);
  d->reset();
  stdfs::remove_all(dir);
}

// OpenSSL is dlopen()ed on first use (net/openssl_loader.h): a daemon
// without a token (every local sandbox's) serves without ever loading it, one
// with a token loads it as it starts (issue 23: one library fewer per start).
TEST(SandboxdAuthTest, OpenSslIsLoadedOnlyToCheckTokens) {
#if DEEPBOX_OPENSSL_LINKED
  GTEST_SKIP() << "built with -DDEEPBOX_STATIC_OPENSSL=ON: OpenSSL is part of the binary";
#endif
  auto plain = ScopedSandboxd::Start({});
  ASSERT_TRUE(plain) << plain.error().ToString();
  ASSERT_TRUE((*plain)->client().Write("f.txt", "x", 0644));
  ASSERT_TRUE((*plain)->client().Exec(ExecRequest{.shell = "true"}));
  std::string maps = ReadHostFile(fmt::format("/proc/{}/maps", (*plain)->pid()));
  ASSERT_NE(maps.find("libc.so"), std::string::npos) << maps;  // the file was read
  EXPECT_EQ(maps.find("libssl.so"), std::string::npos) << maps;
  EXPECT_EQ(maps.find("libcrypto.so"), std::string::npos) << maps;

  auto guarded = ScopedSandboxd::Start({.token = "s3cret"});
  ASSERT_TRUE(guarded) << guarded.error().ToString();
  maps = ReadHostFile(fmt::format("/proc/{}/maps", (*guarded)->pid()));
  EXPECT_NE(maps.find("libcrypto.so"), std::string::npos) << maps;
}

TEST(SandboxdAuthTest, TokenAndVerifierFileExcludeEachOther) {
  auto d = ScopedSandboxd::Start({.extra_args = {"--token-sha256-file", "/nonexistent/v"},
                                  .token = "s3cret",
                                  .connect = false});
  EXPECT_FALSE(d);
}

TEST(SandboxdLifecycleTest, SigtermShutsDownGracefully) {
  auto d = ScopedSandboxd::Start();
  ASSERT_TRUE(d);
  int status = (*d)->Terminate();
  EXPECT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(SandboxdLifecycleTest, CrashedDaemonGivesClearClientError) {
  auto d = ScopedSandboxd::Start();
  ASSERT_TRUE(d);
  (*d)->Kill();
  auto r = (*d)->client().Exec(ExecRequest{.argv = {"/bin/true"}});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnavailable) << r.error().ToString();
}

TEST_F(SandboxdTest, TarDownloadAndUploadRoundTrip) {
  ASSERT_TRUE(sb().Write("tree/a.txt", "alpha", 0644));
  ASSERT_TRUE(sb().Write("tree/sub/b.bin", std::string("\0\1\2", 3), 0600));
  net::ClientRequest down;
  down.method = "POST";
  down.target = "/deepbox/v1/fs/tar/download";
  down.body = R"({"paths":["tree"]})";
  auto tar = Http()->Send(down);
  ASSERT_TRUE(tar) << tar.error().ToString();
  ASSERT_EQ(tar->status, 200) << tar->body;
  EXPECT_GT(tar->body.size(), 1024u);
  net::ClientRequest up;
  up.method = "PUT";
  up.target = "/deepbox/v1/fs/tar/upload?path=copy";
  up.body = tar->body;
  ASSERT_TRUE(sb().Mkdir("copy", true));
  auto r = Http()->Send(up);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(ReadHostFile(Root() + "/copy/tree/a.txt"), "alpha");
  EXPECT_EQ(ReadHostFile(Root() + "/copy/tree/sub/b.bin"), std::string("\0\1\2", 3));
  // A missing path is a clean 404 before any archive bytes are sent.
  down.body = R"({"paths":["nope"]})";
  EXPECT_EQ(Http()->Send(down)->status, 404);
  // An archive with an escaping entry is refused.
  up.target = "/deepbox/v1/fs/tar/upload?path=..";
  auto esc = Http()->Send(up);
  ASSERT_TRUE(esc);
  EXPECT_EQ(esc->status, 403) << esc->body;
}

// ---------------------------------------------------------------- background processes

TEST_F(SandboxdTest, BackgroundProcessLifecycle) {
  auto start =
      Post("/deepbox/v1/processes", R"({"shell":"read line; echo got:$line; sleep 1000"})");
  ASSERT_EQ(start.status, 200) << start.body;
  auto info = ParseJsonObject(start.body);
  std::string id(info->at("id").as_string());
  auto list = Get("/deepbox/v1/processes");
  EXPECT_NE(list.body.find(id), std::string::npos);
  auto in = Post("/deepbox/v1/processes/" + id + "/stdin", R"({"data":"hello\n"})");
  EXPECT_EQ(in.status, 200) << in.body;
  std::string logs;
  for (int i = 0; i < 500 && logs.find("got:hello") == std::string::npos; ++i) {
    logs = Get("/deepbox/v1/processes/" + id + "/logs?offset=0").body;
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_NE(logs.find("got:hello"), std::string::npos) << logs;
  auto sig = Post("/deepbox/v1/processes/" + id + "/signal", R"({"signal":"SIGTERM"})");
  EXPECT_EQ(sig.status, 200) << sig.body;
  auto waited = Post("/deepbox/v1/processes/" + id + "/wait", R"({"timeout_ms":10000})");
  EXPECT_NE(waited.body.find("\"state\":\"exited\""), std::string::npos) << waited.body;
  EXPECT_EQ(Get("/deepbox/v1/processes/p-nope").status, 404);
}

// ---------------------------------------------------------------- search

// fs/tree through the client: what deepbox acp compares before and after a
// command to see which files it changed.
TEST_F(SandboxdTest, TreeShowsWhatACommandChanged) {
  for (std::string f : {"a.txt", "sub/b.txt", ".git/HEAD", "keep.txt"}) {
    ASSERT_TRUE(sb().Write(f, "x", 0644));
  }
  TreeRequest request;
  request.skip_dirs = {".git"};
  auto before = sb().Tree(request);
  ASSERT_TRUE(before) << before.error().ToString();
  using V = std::vector<std::string>;
  auto names = [](const TreeResult& t) {
    V out;
    for (const auto& e : t.entries) out.push_back(e.path);
    return out;
  };
  EXPECT_EQ(names(*before), (V{"a.txt", "keep.txt", "sub/b.txt"}));
  ExecRequest r;
  r.shell = "sleep 0.01; echo more >> a.txt && rm sub/b.txt && echo new > c.txt && ln -s a.txt l";
  auto ran = sb().Exec(r);
  ASSERT_TRUE(ran && ran->exit_code == 0) << (ran ? ran->stderr_data : ran.error().ToString());
  auto after = sb().Tree(request);
  ASSERT_TRUE(after) << after.error().ToString();
  EXPECT_EQ(names(*after), (V{"a.txt", "c.txt", "keep.txt", "l"}));
  EXPECT_EQ(after->entries[0].size, 6u);  // "x" + "more\n"
  EXPECT_NE(after->entries[0], before->entries[0]);
  EXPECT_EQ(after->entries[2], before->entries[1]) << "keep.txt did not change";
  EXPECT_TRUE(after->entries[3].symlink);
  request.path = "/nonexistent";
  EXPECT_FALSE(sb().Tree(request));
}

TEST_F(SandboxdTest, GlobSemanticsTable) {
  for (std::string f : {"a.py", "sub/b.py", "sub/nested/c.py", "readme.md", ".hidden.py",
                        ".hidden/x.py", ".github/workflows/ci.yml"}) {
    ASSERT_TRUE(sb().Write(f, "x", 0644));
  }
  std::string root = sb().root();
  auto names = [&](const std::string& pattern) {
    auto g = sb().Glob(pattern, "", 0);
    EXPECT_TRUE(g) << pattern << ": " << (g ? "" : g.error().ToString());
    std::vector<std::string> out;
    if (g) {
      for (auto& p : g->paths) out.push_back(p.substr(root.size()));
    }
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(names("*.py"), (V{"/.hidden/x.py", "/a.py", "/sub/b.py", "/sub/nested/c.py"}));
  EXPECT_EQ(names("**/*.py"), (V{"/a.py", "/sub/b.py", "/sub/nested/c.py"}));
  EXPECT_EQ(names("sub/**/*.py"), (V{"/sub/b.py", "/sub/nested/c.py"}));
  EXPECT_EQ(names("/*.py"), (V{"/a.py"}));
  EXPECT_EQ(names("a.py/**"), V{});
  EXPECT_EQ(names("*.yml"), (V{"/.github/workflows/ci.yml"}));
  EXPECT_EQ(names("**/*.yml"), V{});
  EXPECT_EQ(names(".*.py"), (V{"/.hidden.py"}));
  EXPECT_EQ(names("[^a].py"), names("[!a].py"));
  auto all = names("*");
  EXPECT_EQ(std::count(all.begin(), all.end(), "/.hidden.py"), 0);
  EXPECT_EQ(all.size(), 6u);
}

TEST_F(SandboxdTest, GrepLiteralRegexModes) {
  ASSERT_TRUE(sb().Write("src/a.txt", "foo\nbar foo\nbaz\n", 0644));
  ASSERT_TRUE(sb().Write("src/b.md", "nothing\nFOO\n", 0644));
  ASSERT_TRUE(sb().Write("src/bin.dat", std::string("foo\0binary", 10), 0644));
  GrepRequest g;
  g.pattern = "foo";
  auto r = sb().Grep(g);
  ASSERT_TRUE(r) << r.error().ToString();
  ASSERT_EQ(r->matches.size(), 2u);  // the binary file is skipped
  EXPECT_EQ(r->matches[0].line, 1);
  EXPECT_EQ(r->matches[1].text, "bar foo");
  g.case_insensitive = true;
  g.output_mode = GrepOutputMode::kCount;
  r = sb().Grep(g);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->counts.size(), 2u);
  g = GrepRequest{
      .pattern = "ba[rz]", .regex = true, .output_mode = GrepOutputMode::kFilesWithMatches};
  r = sb().Grep(g);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->files.size(), 1u);
  g = GrepRequest{.pattern = "o", .glob = "*.txt", .max_count = 1};
  r = sb().Grep(g);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->matches.size(), 1u);
  EXPECT_TRUE(r->truncated);
  g = GrepRequest{.pattern = "(", .regex = true};
  r = sb().Grep(g);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
}

// ---------------------------------------------------------------- upstream APIs

TEST_F(SandboxdTest, LegacyPythonRuntimeApi) {
  auto root = Get("/");
  EXPECT_EQ(root.body, R"({"status":"ok","message":"Sandbox Runtime is active."})");
  auto ex = Post("/execute", R"({"command":"echo 'Hello from SDK'"})");
  EXPECT_EQ(ex.body,
            R"({"stdout":"Hello from SDK\n","stderr":"","exit_code":0,"timed_out":false})");
  // The SDK's command_timeout: a limit for this command, reported as timed_out.
  auto slow = Post("/execute", R"({"command":"sleep 30","timeout_seconds":0.5})");
  EXPECT_NE(slow.body.find(R"("exit_code":124,"timed_out":true)"), std::string::npos) << slow.body;
  EXPECT_EQ(Post("/execute", R"({"command":"true","timeout_seconds":-1})").status, 422);
  auto bad = Post("/execute", R"({"command":"echo 'unterminated"})");
  EXPECT_NE(bad.body.find("Malformed command syntax"), std::string::npos);
  auto missing = Post("/execute", R"({"command":"/no/such/thing"})");
  EXPECT_NE(missing.body.find("Failed to execute command"), std::string::npos);
  net::ClientRequest up;
  up.method = "POST";
  up.target = "/upload";
  up.headers.Set("Content-Type", "multipart/form-data; boundary=BB");
  up.body =
      "--BB\r\nContent-Disposition: form-data; name=\"file\"; "
      "filename=\"d/up.txt\"\r\n\r\nDATA\r\n--BB--\r\n";
  auto u = Http()->Send(up);
  ASSERT_TRUE(u);
  EXPECT_EQ(u->status, 200);
  EXPECT_EQ(u->body, R"({"message":"File 'd/up.txt' uploaded successfully."})");
  EXPECT_EQ(Get("/download/" + net::PercentEncode("d/up.txt")).body, "DATA");
  EXPECT_EQ(Get("/download/nope").status, 404);
  auto list = Get("/list/d");
  EXPECT_NE(list.body.find(R"("name":"up.txt","size":4,"type":"file","mod_time":)"),
            std::string::npos)
      << list.body;
  EXPECT_EQ(Get("/list/d/up.txt").status, 404);
  EXPECT_EQ(Get("/exists/d%2Fup.txt").body, R"({"path":"d/up.txt","exists":true})");
  EXPECT_EQ(Get("/exists/zz").body, R"({"path":"zz","exists":false})");
  up.body =
      "--BB\r\nContent-Disposition: form-data; name=\"file\"; "
      "filename=\"../x.txt\"\r\n\r\nD\r\n--BB--\r\n";
  auto esc = Http()->Send(up);
  EXPECT_EQ(esc->status, 403);
}

TEST_F(SandboxdTest, UpstreamSandboxdRestApi) {
  net::ClientRequest put;
  put.method = "PUT";
  put.target = "/v1/files/dir/f.txt?mode=0600";
  put.body = "content";
  auto p = Http()->Send(put);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->status, 204);
  EXPECT_EQ(Get("/v1/files/dir/f.txt").body, "content");
  EXPECT_EQ(Get("/v1/files/dir/f.txt", "HEAD").status, 200);
  EXPECT_EQ(Get("/v1/files/dir/none", "HEAD").status, 404);
  auto dir = Get("/v1/files/dir");
  EXPECT_NE(dir.body.find(R"("name":"f.txt","size":7,"type":"file")"), std::string::npos)
      << dir.body;
  EXPECT_NE(dir.body.find(R"("mode":"0600")"), std::string::npos);
  put.target = "/v1/files/dir/g.txt?mode=777";
  EXPECT_EQ(Http()->Send(put)->status, 400);
  put.target = "/v1/files/dir";
  EXPECT_EQ(Http()->Send(put)->status, 400);
  net::ClientRequest del;
  del.method = "DELETE";
  del.target = "/v1/files/dir";
  EXPECT_EQ(Http()->Send(del)->status, 409);
  del.target = "/v1/files/dir?recursive=true";
  EXPECT_EQ(Http()->Send(del)->status, 204);
  auto nf = Get("/v1/files/dir/f.txt");
  EXPECT_EQ(nf.status, 404);
  EXPECT_NE(nf.body.find(R"("code":"NOT_FOUND")"), std::string::npos);
  EXPECT_EQ(Get("/v1/files/../../etc/passwd").status, 403);
  auto health = Get("/v1/health");
  EXPECT_NE(health.body.find("uptime_seconds"), std::string::npos);
}

TEST(SandboxdMetadataTest, MetadataFiltersSecrets) {
  ::setenv("SANDBOX_REGION", "eu", 1);
  ::setenv("SANDBOX_API_KEY", "hidden", 1);
  auto d = ScopedSandboxd::Start();
  ::unsetenv("SANDBOX_REGION");
  ::unsetenv("SANDBOX_API_KEY");
  ASSERT_TRUE(d);
  auto http = net::HttpClient::Create((*d)->unix_url());
  net::ClientRequest req;
  req.target = "/v1/metadata";
  auto r = (*http)->Send(req);
  ASSERT_TRUE(r);
  EXPECT_NE(r->body.find(R"("SANDBOX_REGION":"eu")"), std::string::npos) << r->body;
  EXPECT_EQ(r->body.find("hidden"), std::string::npos);
}

}  // namespace
}  // namespace deepbox
