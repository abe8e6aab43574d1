#include "sandboxd/proc/process_table.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "sandboxd/proc/reaper.h"
#include "sandboxd/proc/test_util.h"

namespace deepbox::sandboxd::proc {
namespace {

using ::testing::HasSubstr;
using testing::LiveGroupMembers;
using testing::ProcState;
using testing::WaitFor;
using namespace std::chrono_literals;

constexpr auto kBound = 30s;  // safety bound for waits, not an expectation

class ProcessTableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(BecomeSubreaper().has_value());
    auto r = Reaper::Start();
    ASSERT_TRUE(r.has_value());
    reaper_ = std::move(*r);
    MakeTable({});
  }
  void TearDown() override {
    table_.reset();
    reaper_.reset();
  }
  void MakeTable(ProcessTable::Options options) {
    table_.reset();
    auto t = ProcessTable::Create(options);
    ASSERT_TRUE(t.has_value()) << t.error().ToString();
    table_ = std::move(*t);
  }
  ProcessInfo StartOk(const CommandSpec& spec,
                      ProcessTable::StartOptions options = ProcessTable::StartOptions{}) {
    auto info = table_->Start(spec, options);
    EXPECT_TRUE(info.has_value()) << info.error().ToString();
    return info.value_or(ProcessInfo{});
  }
  ProcessInfo WaitExited(const std::string& id) {
    auto info = table_->Wait(id, kBound);
    EXPECT_TRUE(info.has_value());
    EXPECT_EQ(info->state, ProcessState::kExited);
    return *info;
  }
  // The whole log, following it until EOF.
  std::string ReadAllLog(const std::string& id) {
    std::string out;
    uint64_t offset = 0;
    for (;;) {
      auto chunk = table_->ReadLog(id, offset, 1 << 16, kBound);
      EXPECT_TRUE(chunk.has_value());
      if (!chunk) return out;
      EXPECT_EQ(chunk->dropped, 0u);
      out += chunk->data;
      offset = chunk->next_offset;
      if (chunk->eof) return out;
      if (chunk->data.empty() && !chunk->eof) {
        ADD_FAILURE() << "no output and no EOF within the bound";
        return out;
      }
    }
  }
  static bool GroupGone(pid_t pgid) {
    return WaitFor([&] { return ::kill(-pgid, 0) != 0 && errno == ESRCH; });
  }

  std::unique_ptr<Reaper> reaper_;
  std::unique_ptr<ProcessTable> table_;
};

TEST_F(ProcessTableTest, StartListGetWait) {
  ProcessInfo a = StartOk(CommandSpec::Shell("echo hi; exit 3"));
  ProcessInfo b = StartOk(CommandSpec::Argv({"sleep", "1000"}));
  EXPECT_EQ(a.id, "p-1");
  EXPECT_EQ(b.id, "p-2");
  EXPECT_GT(a.pid, 0);
  EXPECT_EQ(a.command, "echo hi; exit 3");
  EXPECT_EQ(b.command, "sleep 1000");
  EXPECT_THAT(b.argv, ::testing::ElementsAre("sleep", "1000"));
  EXPECT_TRUE(b.stdin_open);

  ProcessInfo done = WaitExited("p-1");
  ASSERT_TRUE(done.outcome.has_value());
  EXPECT_EQ(std::get<Exited>(*done.outcome).code, 3);
  EXPECT_TRUE(done.exited_at.has_value());
  EXPECT_GE(*done.exited_at, done.started_at);

  auto list = table_->List();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].id, "p-1");
  EXPECT_EQ(list[0].state, ProcessState::kExited);
  EXPECT_EQ(list[1].id, "p-2");
  EXPECT_EQ(list[1].state, ProcessState::kRunning);
  EXPECT_FALSE(list[1].outcome.has_value());

  auto waited = table_->Wait("p-2", 10ms);  // times out: still running
  ASSERT_TRUE(waited.has_value());
  EXPECT_EQ(waited->state, ProcessState::kRunning);
  EXPECT_EQ(table_->Get("p-2")->pid, b.pid);
}

TEST_F(ProcessTableTest, UnknownIds) {
  EXPECT_EQ(table_->Get("p-9").error().code, ErrorCode::kNotFound);
  EXPECT_EQ(table_->Get("nope").error().code, ErrorCode::kNotFound);
  EXPECT_EQ(table_->Get("p-1x").error().code, ErrorCode::kNotFound);
  EXPECT_EQ(table_->ReadLog("p-9", 0, 10).error().code, ErrorCode::kNotFound);
  EXPECT_EQ(table_->WriteStdin("p-9", "x").error().code, ErrorCode::kNotFound);
  EXPECT_EQ(table_->Signal("p-9", SIGTERM).error().code, ErrorCode::kNotFound);
  EXPECT_EQ(table_->Remove("p-9").error().code, ErrorCode::kNotFound);
}

TEST_F(ProcessTableTest, LogIsCombinedAndReadableFromOffsets) {
  ProcessInfo p = StartOk(CommandSpec::Shell("seq 1 20000; echo to-stderr >&2"));
  WaitExited(p.id);
  std::string expected;
  for (int i = 1; i <= 20000; ++i) expected += std::to_string(i) + "\n";
  std::string log = ReadAllLog(p.id);
  EXPECT_EQ(log, expected + "to-stderr\n");
  // Reading in small pieces from offsets gives the same bytes.
  std::string pieces;
  uint64_t offset = 0;
  for (;;) {
    auto c = table_->ReadLog(p.id, offset, 777);
    ASSERT_TRUE(c.has_value());
    EXPECT_EQ(c->offset, offset);
    pieces += c->data;
    offset = c->next_offset;
    if (c->eof) break;
    ASSERT_FALSE(c->data.empty());
  }
  EXPECT_EQ(pieces, log);
  auto info = table_->Get(p.id);
  EXPECT_EQ(info->stdout_bytes, expected.size());
  EXPECT_EQ(info->stderr_bytes, 10u);
  EXPECT_EQ(info->log_end_offset, log.size());
  EXPECT_FALSE(info->output_open);
}

TEST_F(ProcessTableTest, LogRingDropsTheOldestBytes) {
  MakeTable({.log_capacity = 1000});
  ProcessInfo p = StartOk(CommandSpec::Argv({"seq", "1", "10000"}));
  WaitExited(p.id);
  std::string expected;
  for (int i = 1; i <= 10000; ++i) expected += std::to_string(i) + "\n";
  ASSERT_TRUE(WaitFor([&] { return !table_->Get(p.id)->output_open; }));
  auto c = table_->ReadLog(p.id, 0, 1 << 20);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->dropped, expected.size() - 1000);
  EXPECT_EQ(c->offset, expected.size() - 1000);
  EXPECT_EQ(c->data, expected.substr(expected.size() - 1000));
  EXPECT_TRUE(c->eof);
}

TEST_F(ProcessTableTest, StdinCanBeWrittenAndClosed) {
  ProcessInfo p = StartOk(CommandSpec::Argv({"cat"}));
  ASSERT_TRUE(table_->WriteStdin(p.id, "hello\n").has_value());
  // ReadLog waits for the echo.
  auto c = table_->ReadLog(p.id, 0, 100, kBound);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->data, "hello\n");
  EXPECT_FALSE(c->eof);
  ASSERT_TRUE(table_->WriteStdin(p.id, "world\n").has_value());
  ASSERT_TRUE(table_->CloseStdin(p.id).has_value());
  ProcessInfo done = WaitExited(p.id);
  EXPECT_EQ(std::get<Exited>(*done.outcome).code, 0);
  EXPECT_FALSE(done.stdin_open);
  EXPECT_EQ(ReadAllLog(p.id), "hello\nworld\n");
  auto late = table_->WriteStdin(p.id, "x");
  ASSERT_FALSE(late.has_value());
  EXPECT_EQ(late.error().code, ErrorCode::kConflict);
}

TEST_F(ProcessTableTest, LargeStdinIsQueuedAndFlushedByTheLoop) {
  // 3 MiB, far more than a pipe holds: WriteStdin must not block.
  ProcessInfo p = StartOk(CommandSpec::Shell("wc -c"));
  const std::string data(3 << 20, 'z');
  ASSERT_TRUE(table_->WriteStdin(p.id, data).has_value());
  ASSERT_TRUE(table_->CloseStdin(p.id).has_value());
  WaitExited(p.id);
  EXPECT_EQ(ReadAllLog(p.id), std::to_string(data.size()) + "\n");
}

TEST_F(ProcessTableTest, PendingStdinIsBounded) {
  MakeTable({.max_pending_stdin = 1000});
  // sleep never reads its stdin: bytes beyond the pipe buffer stay queued.
  ProcessInfo p = StartOk(CommandSpec::Argv({"sleep", "1000"}));
  Status last;
  for (int i = 0; i < 1000 && last.has_value(); ++i)
    last = table_->WriteStdin(p.id, std::string(900, 'x'));
  ASSERT_FALSE(last.has_value());
  EXPECT_EQ(last.error().code, ErrorCode::kResourceExhausted);
}

TEST_F(ProcessTableTest, InitialStdinDataWithoutAPipe) {
  CommandSpec spec = CommandSpec::Argv({"cat"});
  spec.stdin_data = "given\n";
  ProcessInfo p = StartOk(spec, {.stdin_pipe = false});
  EXPECT_FALSE(p.stdin_open);
  WaitExited(p.id);
  EXPECT_EQ(ReadAllLog(p.id), "given\n");
  // No data and no pipe: /dev/null.
  ProcessInfo q = StartOk(CommandSpec::Argv({"cat"}), {.stdin_pipe = false});
  EXPECT_EQ(std::get<Exited>(*WaitExited(q.id).outcome).code, 0);
}

TEST_F(ProcessTableTest, SignalGoesToTheGroup) {
  ProcessInfo p = StartOk(CommandSpec::Shell("sleep 1000 & wait"));
  ASSERT_TRUE(WaitFor([&] { return LiveGroupMembers(p.pid).size() == 2; }));
  ASSERT_TRUE(table_->Signal(p.id, SIGTERM).has_value());
  ProcessInfo done = WaitExited(p.id);
  ASSERT_EQ(KindOf(*done.outcome), OutcomeKind::kSignaled) << DescribeOutcome(*done.outcome);
  EXPECT_EQ(std::get<Signaled>(*done.outcome).signal, SIGTERM);
  EXPECT_TRUE(GroupGone(p.pid));
  EXPECT_EQ(table_->Signal(p.id, 99).error().code, ErrorCode::kInvalidArgument);
  ASSERT_TRUE(WaitFor([&] { return !table_->Get(p.id)->output_open; }));
  EXPECT_EQ(table_->Signal(p.id, SIGTERM).error().code, ErrorCode::kConflict);
}

TEST_F(ProcessTableTest, GroupStaysSignalableWhileMembersHoldTheOutput) {
  // The leader exits at once; its background child keeps the pipes.
  ProcessInfo p = StartOk(CommandSpec::Shell("sleep 1000 & echo started"));
  ProcessInfo done = WaitExited(p.id);
  EXPECT_EQ(std::get<Exited>(*done.outcome).code, 0);
  EXPECT_TRUE(done.output_open);
  EXPECT_EQ(ProcState(p.pid), 'Z');  // pinned, not reaped
  ASSERT_EQ(LiveGroupMembers(p.pid).size(), 1u);
  ASSERT_TRUE(table_->Signal(p.id, SIGKILL).has_value());
  EXPECT_EQ(ReadAllLog(p.id), "started\n");  // EOF once the sleep is gone
  EXPECT_TRUE(GroupGone(p.pid));
}

TEST_F(ProcessTableTest, KillEscalatesAfterTheGrace) {
  ProcessInfo p = StartOk(CommandSpec::Shell("trap '' TERM; sleep 1000 & sleep 1000"));
  ASSERT_TRUE(WaitFor([&] { return LiveGroupMembers(p.pid).size() >= 2; }));
  auto killed = table_->Kill(p.id, 200ms);
  ASSERT_TRUE(killed.has_value());
  ProcessInfo done = WaitExited(p.id);
  ASSERT_EQ(KindOf(*done.outcome), OutcomeKind::kKilled) << DescribeOutcome(*done.outcome);
  EXPECT_TRUE(std::get<Killed>(*done.outcome).sigkilled);
  EXPECT_EQ(std::get<Killed>(*done.outcome).status.signal, SIGKILL);
  EXPECT_TRUE(GroupGone(p.pid));
}

TEST_F(ProcessTableTest, KillWithoutGraceAndTermHonoured) {
  ProcessInfo now = StartOk(CommandSpec::Argv({"sleep", "1000"}));
  ASSERT_TRUE(table_->Kill(now.id, 0ms).has_value());
  ProcessInfo a = WaitExited(now.id);
  EXPECT_EQ(std::get<Killed>(*a.outcome).status.signal, SIGKILL);

  ProcessInfo polite = StartOk(CommandSpec::Argv({"sleep", "1000"}));
  ASSERT_TRUE(table_->Kill(polite.id, 60s).has_value());
  ProcessInfo b = WaitExited(polite.id);
  EXPECT_FALSE(std::get<Killed>(*b.outcome).sigkilled);
  EXPECT_EQ(std::get<Killed>(*b.outcome).status.signal, SIGTERM);
}

TEST_F(ProcessTableTest, TimeoutApplies) {
  CommandSpec spec = CommandSpec::Shell("sleep 1000 & sleep 1000");
  spec.timeout = 100ms;
  ProcessInfo p = StartOk(spec);
  ProcessInfo done = WaitExited(p.id);
  ASSERT_EQ(KindOf(*done.outcome), OutcomeKind::kTimedOut) << DescribeOutcome(*done.outcome);
  EXPECT_EQ(std::get<TimedOut>(*done.outcome).timeout, 100ms);
  EXPECT_TRUE(GroupGone(p.pid));
}

TEST_F(ProcessTableTest, RemoveKillsAndForgets) {
  ProcessInfo p = StartOk(CommandSpec::Shell("sleep 1000 & sleep 1000"));
  ASSERT_TRUE(table_->Remove(p.id).has_value());
  EXPECT_EQ(table_->Get(p.id).error().code, ErrorCode::kNotFound);
  EXPECT_TRUE(table_->List().empty());
  EXPECT_TRUE(GroupGone(p.pid));
  // A finished one is removed at once.
  ProcessInfo q = StartOk(CommandSpec::Argv({"true"}));
  WaitExited(q.id);
  ASSERT_TRUE(table_->Remove(q.id).has_value());
  EXPECT_EQ(table_->Get(q.id).error().code, ErrorCode::kNotFound);
  EXPECT_EQ(table_->Remove(q.id).error().code, ErrorCode::kNotFound);
}

TEST_F(ProcessTableTest, ManyNoisyProcessesAreDrainedConcurrently) {
  // Each writes 2 MiB: they would all block on full pipes if not drained.
  MakeTable({.log_capacity = 64 << 10});
  std::vector<ProcessInfo> ps;
  for (int i = 0; i < 8; ++i) {
    ps.push_back(StartOk(CommandSpec::Shell("head -c 2097152 /dev/zero; echo end")));
  }
  for (const auto& p : ps) {
    ProcessInfo done = WaitExited(p.id);
    EXPECT_EQ(std::get<Exited>(*done.outcome).code, 0);
    ASSERT_TRUE(WaitFor([&] { return !table_->Get(p.id)->output_open; }));
    auto info = table_->Get(p.id);
    EXPECT_EQ(info->stdout_bytes, 2097152u + 4u);
    auto tail = table_->ReadLog(p.id, info->log_end_offset - 4, 10);
    EXPECT_EQ(tail->data, "end\n");
  }
}

TEST_F(ProcessTableTest, SpawnFailureIsAnError) {
  auto r = table_->Start(CommandSpec::Argv({"/nonexistent/deepbox"}));
  ASSERT_FALSE(r.has_value());
  EXPECT_THAT(r.error().message, HasSubstr("execve(/nonexistent/deepbox)"));
  EXPECT_EQ(table_->Start(CommandSpec{}).error().code, ErrorCode::kInvalidArgument);
  EXPECT_TRUE(table_->List().empty());
}

TEST_F(ProcessTableTest, FullTableEvictsTheOldestFinishedEntry) {
  MakeTable({.max_processes = 2});
  ProcessInfo a = StartOk(CommandSpec::Argv({"sleep", "1000"}));
  ProcessInfo b = StartOk(CommandSpec::Argv({"true"}));
  WaitExited(b.id);
  ASSERT_TRUE(WaitFor([&] { return !table_->Get(b.id)->output_open; }));
  ProcessInfo c = StartOk(CommandSpec::Argv({"sleep", "1000"}));  // evicts b
  EXPECT_EQ(table_->Get(b.id).error().code, ErrorCode::kNotFound);
  auto d = table_->Start(CommandSpec::Argv({"true"}));  // a and c run
  ASSERT_FALSE(d.has_value());
  EXPECT_EQ(d.error().code, ErrorCode::kResourceExhausted);
  EXPECT_TRUE(table_->Get(a.id).has_value());
  EXPECT_TRUE(table_->Get(c.id).has_value());
}

TEST_F(ProcessTableTest, ShutdownTerminatesEverything) {
  ProcessInfo a = StartOk(CommandSpec::Argv({"sleep", "1000"}));
  ProcessInfo b = StartOk(CommandSpec::Shell("trap '' TERM; sleep 1000 & sleep 1000"));
  ProcessInfo c = StartOk(CommandSpec::Argv({"true"}));
  WaitExited(c.id);
  ASSERT_TRUE(WaitFor([&] { return LiveGroupMembers(b.pid).size() >= 2; }));
  table_->Shutdown(300ms);
  auto ia = table_->Get(a.id);
  auto ib = table_->Get(b.id);
  ASSERT_TRUE(ia.has_value());
  ASSERT_EQ(KindOf(*ia->outcome), OutcomeKind::kKilled);
  EXPECT_FALSE(std::get<Killed>(*ia->outcome).sigkilled);
  ASSERT_EQ(KindOf(*ib->outcome), OutcomeKind::kKilled);
  EXPECT_TRUE(std::get<Killed>(*ib->outcome).sigkilled);
  EXPECT_EQ(KindOf(*table_->Get(c.id)->outcome), OutcomeKind::kExited);
  EXPECT_TRUE(GroupGone(a.pid));
  EXPECT_TRUE(GroupGone(b.pid));
  EXPECT_EQ(table_->Start(CommandSpec::Argv({"true"})).error().code, ErrorCode::kUnavailable);
  table_->Shutdown(0ms);  // idempotent
}

TEST_F(ProcessTableTest, ConcurrentClients) {
  constexpr int kThreads = 4;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10; ++i) {
        const std::string word = "t" + std::to_string(t) + "i" + std::to_string(i);
        auto p = table_->Start(CommandSpec::Argv({"cat"}));
        if (!p) {
          ++failures;
          continue;
        }
        bool ok =
            table_->WriteStdin(p->id, word).has_value() && table_->CloseStdin(p->id).has_value();
        auto done = table_->Wait(p->id, kBound);
        ok = ok && done && done->state == ProcessState::kExited;
        ok = ok && WaitFor([&] { return !table_->Get(p->id)->output_open; });
        auto log = table_->ReadLog(p->id, 0, 100);
        ok = ok && log && log->data == word;
        (void)table_->List();
        ok = ok && table_->Remove(p->id).has_value();
        if (!ok) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_TRUE(table_->List().empty());
}

}  // namespace
}  // namespace deepbox::sandboxd::proc
