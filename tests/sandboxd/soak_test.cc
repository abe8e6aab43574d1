// A long working session against the real deepbox-sandboxd binary, with every
// time-based expiry made short by configuration, so what a day of use does
// to the daemon happens in a few seconds: identified execs whose records
// expire in every sweep (the 10-minute crash of 2026-12-03: a record freed
// while its mutex was held), re-attaches to forgotten records, background
// processes whose logs overflow their ring, file operations, and a clean
// exit. Invariants only (no crash, nothing lost, nothing leaked), never
// speeds; every step is bounded by a count.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "common/json.h"
#include "sandbox/testing/load_clients.h"
#include "sandbox/testing/scoped_sandboxd.h"

namespace deepbox {
namespace {

using namespace std::chrono_literals;
using testing::JsonPost;
using testing::OpenFdCount;
using testing::ProcStatusField;
using testing::RawClient;
using testing::ScopedSandboxd;

constexpr auto kGenerous = std::chrono::milliseconds(30000);
net::Deadline Soon() { return net::DeadlineAfter(kGenerous); }

// Retention of finished exec records: the default is 10 minutes; here every
// round's sleep outlasts it, so each sweep frees the records of the round
// before (several at once, as in the crash).
constexpr std::string_view kRetentionSeconds = "0.02";
constexpr auto kOutlastRetention = 40ms;
constexpr size_t kProcessLogBytes = 4096;  // the default is 8 MiB

class SandboxdSoakTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A small ASan quarantine keeps RSS about live memory (see load_test).
    const char* had = std::getenv("ASAN_OPTIONS");
    const std::string asan = had != nullptr ? had : "";
    ::setenv("ASAN_OPTIONS", (asan + (asan.empty() ? "" : ":") + "quarantine_size_mb=8").c_str(),
             1);
    auto d = ScopedSandboxd::Start(
        {.extra_args = {"--exec-record-retention", std::string(kRetentionSeconds),
                        "--process-log-bytes", std::to_string(kProcessLogBytes)}});
    if (had == nullptr) {
      ::unsetenv("ASAN_OPTIONS");
    } else {
      ::setenv("ASAN_OPTIONS", asan.c_str(), 1);
    }
    ASSERT_TRUE(d) << d.error().ToString();
    daemon_ = std::move(*d);
  }

  // One JSON request on a fresh connection: (status, parsed body).
  std::pair<int, json::object> Call(std::string_view method, const std::string& target,
                                    std::string_view body = {}) {
    auto c = RawClient::Connect(daemon_->unix_url(), Soon());
    EXPECT_TRUE(c) << c.error().ToString();
    if (!c) return {0, json::object()};
    std::string request =
        method == "POST"
            ? JsonPost(target, body)
            : fmt::format("{} {} HTTP/1.1\r\nHost: sandbox\r\nConnection: close\r\n\r\n", method,
                          target);
    EXPECT_TRUE(c->Send(request, Soon()));
    auto r = c->ReadResponse(Soon());
    EXPECT_TRUE(r) << r.error().ToString();
    if (!r) return {0, json::object()};
    auto parsed = ParseJsonObject(r->body);
    EXPECT_TRUE(parsed) << target << " answered " << r->body;
    return {r->status, parsed ? *parsed : json::object()};
  }

  std::unique_ptr<ScopedSandboxd> daemon_;
};

TEST_F(SandboxdSoakTest, ALongSessionWithShortExpiriesLosesAndLeaksNothing) {
  Sandbox& sb = daemon_->client();
  const pid_t pid = daemon_->pid();
  std::map<std::string, std::string> kept;  // files that must survive the session
  long rss_warm = 0, fds_warm = 0, threads_warm = 0;

  constexpr int kRounds = 120, kWarmRounds = 20;
  for (int round = 0; round < kRounds; ++round) {
    SCOPED_TRACE(fmt::format("round {}", round));
    // Identified streamed execs (the client names each one): their records
    // are swept, several per sweep, by the next round's execs.
    for (int i = 0; i < 3; ++i) {
      ExecRequest req;
      req.shell = fmt::format("echo out-{}-{}; echo err-{}-{} >&2", round, i, round, i);
      std::string streamed;
      auto r = sb.ExecStream(req, [&](OutputStream, std::string_view data) {
        streamed.append(data);
        return true;
      });
      ASSERT_TRUE(r) << r.error().ToString();
      EXPECT_EQ(r->kind, ExitKind::kExited);
      EXPECT_NE(streamed.find(fmt::format("out-{}-{}\n", round, i)), std::string::npos);
      EXPECT_NE(streamed.find(fmt::format("err-{}-{}\n", round, i)), std::string::npos);
    }
    {
      auto r = sb.Exec({.argv = {"sh", "-c", "exit 3"}});
      ASSERT_TRUE(r) << r.error().ToString();
      EXPECT_EQ(r->exit_code, 3);
    }
    // An exec the client names itself, then re-attached to after its record
    // was forgotten: a clear 404, and the daemon lives on.
    const std::string exec_id = fmt::format("soak-exec-{:06d}", round);
    {
      auto c = RawClient::Connect(daemon_->unix_url(), Soon());
      ASSERT_TRUE(c);
      ASSERT_TRUE(c->Send(JsonPost("/deepbox/v1/exec/stream",
                                   fmt::format(R"({{"argv":["true"],"exec_id":"{}"}})", exec_id)),
                          Soon()));
      auto r = c->ReadResponse(Soon());
      ASSERT_TRUE(r) << r.error().ToString();
      EXPECT_EQ(r->status, 200);
      EXPECT_NE(r->body.find("\"exit\""), std::string::npos) << r->body;
    }
    // Files: written, edited, listed, searched; every tenth kept to the end.
    const std::string dir = fmt::format("work/r{:03d}", round % 7);
    const std::string path = fmt::format("{}/f{:03d}.txt", dir, round);
    const std::string content = fmt::format("round {} line one\nneedle-{:03d}.\n", round, round);
    ASSERT_TRUE(sb.Mkdir(dir, true));
    ASSERT_TRUE(sb.Write(path, content, 0644));
    auto edited = sb.Edit(path, "line one", "line 1", false);
    ASSERT_TRUE(edited) << edited.error().ToString();
    const std::string expected = fmt::format("round {} line 1\nneedle-{:03d}.\n", round, round);
    auto read = sb.Download(path);
    ASSERT_TRUE(read) << read.error().ToString();
    EXPECT_EQ(*read, expected);
    auto listed = sb.List(dir);
    ASSERT_TRUE(listed) << listed.error().ToString();
    EXPECT_FALSE(listed->empty());
    auto globbed = sb.Glob("**/*.txt", "work", 10000);
    ASSERT_TRUE(globbed) << globbed.error().ToString();
    GrepRequest grep;
    grep.pattern = fmt::format("needle-{:03d}.", round);
    grep.path = "work";
    auto found = sb.Grep(grep);
    ASSERT_TRUE(found) << found.error().ToString();
    EXPECT_EQ(found->matches.size(), 1u);
    if (round % 10 == 0) {
      kept[path] = expected;
    } else {
      ASSERT_TRUE(sb.Delete(path, false));
    }
    // A background process whose output overflows its log ring: the log says
    // what it dropped; the process is waited for and forgotten.
    if (round % 6 == 0) {
      auto [status, started] = Call(
          "POST", "/deepbox/v1/processes",
          fmt::format(R"({{"argv":["sh","-c","i=0; while [ $i -lt 400 ]; do echo bg-{}-line-$i; )"
                      R"(i=$((i+1)); done"]}})",
                      round));
      ASSERT_EQ(status, 200);
      const std::string id = GetOptString(started, "id").value_or("");
      ASSERT_FALSE(id.empty());
      auto [wst, waited] =
          Call("POST", fmt::format("/deepbox/v1/processes/{}/wait", id), R"({"timeout_ms":20000})");
      ASSERT_EQ(wst, 200);
      EXPECT_EQ(GetOptString(waited, "state"), "exited");
      auto [lst, logs] =
          Call("GET", fmt::format("/deepbox/v1/processes/{}/logs?offset=0&max_bytes=65536", id));
      ASSERT_EQ(lst, 200);
      const std::string data = GetOptString(logs, "data").value_or("");
      EXPECT_GT(GetOptInt(logs, "dropped_bytes").value_or(std::nullopt).value_or(0), 0);
      EXPECT_LE(data.size(), kProcessLogBytes);
      EXPECT_NE(data.find(fmt::format("bg-{}-line-399\n", round)), std::string::npos);
      auto [dst, deleted] = Call("DELETE", fmt::format("/deepbox/v1/processes/{}", id));
      EXPECT_EQ(dst, 200);
    }
    std::this_thread::sleep_for(kOutlastRetention);
    {
      auto [status, answer] = Call("POST", "/deepbox/v1/exec/attach",
                                   fmt::format(R"({{"exec_id":"{}","after":0}})", exec_id));
      EXPECT_EQ(status, 404) << "a record kept past its retention";
    }
    ASSERT_EQ(::waitpid(pid, nullptr, WNOHANG), 0) << "the daemon died";
    if (round + 1 == kWarmRounds) {
      rss_warm = ProcStatusField(pid, "VmRSS");
      fds_warm = OpenFdCount(pid);
      threads_warm = ProcStatusField(pid, "Threads");
    }
  }

  // Nothing lost.
  for (const auto& [path, content] : kept) {
    auto got = sb.Download(path);
    ASSERT_TRUE(got) << path << ": " << got.error().ToString();
    EXPECT_EQ(*got, content) << path;
  }
  // Nothing leaked that grows with the session: 100 rounds of about 12
  // requests each; 16 MiB is over 13 KiB per request, far more than the
  // sanitizer build's bookkeeping (unreachable leaks are LeakSanitizer's, at
  // the exit below).
  const long rss_after = ProcStatusField(pid, "VmRSS");
  std::printf("daemon VmRSS %ld kB after warm-up, %ld kB after %d rounds\n", rss_warm, rss_after,
              kRounds);
  EXPECT_LT(rss_after - rss_warm, 16 * 1024);
  EXPECT_LE(OpenFdCount(pid), fds_warm + 2);
  EXPECT_LE(ProcStatusField(pid, "Threads"), threads_warm + 2);
  const int status = daemon_->Terminate();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "exit status " << status;
}

}  // namespace
}  // namespace deepbox
