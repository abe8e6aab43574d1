#include "sandboxd/proc/reaper.h"

#include <dirent.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>

#include "sandboxd/proc/process_table.h"
#include "sandboxd/proc/runner.h"
#include "sandboxd/proc/spawn.h"
#include "sandboxd/proc/test_util.h"

namespace deepbox::sandboxd::proc {
namespace {

using ::testing::Contains;
using ::testing::IsSupersetOf;
using ::testing::Not;
using testing::ParentOf;
using testing::ProcState;
using testing::TempDir;
using testing::WaitFor;
using testing::ZombieChildrenOfSelf;

// Runs a command that double-forks an orphan blocked on `fifo` (so that it is
// still alive, and re-parented to us, when the command ends). Returns its pid.
pid_t StartOrphan(const std::string& fifo) {
  // The inner shell prints its pid and then becomes `cat fifo` without the
  // pipes, so the command completes while the orphan lives on.
  RunResult r = Run(CommandSpec::Shell("sh -c 'echo $$; exec cat " + fifo + " >/dev/null 2>&1' &"));
  EXPECT_EQ(KindOf(r.outcome), OutcomeKind::kExited) << DescribeOutcome(r.outcome);
  EXPECT_FALSE(r.stdout_data.empty());
  return r.stdout_data.empty() ? 0 : std::stoi(r.stdout_data);
}

void ReleaseFifo(const std::string& fifo) {
  int fd = ::open(fifo.c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ::close(fd);  // EOF: cat exits
}

TEST(ReaperTest, SubreaperFlag) {
  ASSERT_TRUE(BecomeSubreaper().has_value());
  EXPECT_TRUE(IsReaperOfOrphans());
}

TEST(ReaperTest, OrphansAreReparentedAndReaped) {
  ASSERT_TRUE(BecomeSubreaper().has_value());
  auto reaper = Reaper::Start();
  ASSERT_TRUE(reaper.has_value()) << reaper.error().ToString();
  TempDir dir;
  const std::string fifo = dir.Path("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const pid_t orphan = StartOrphan(fifo);
  ASSERT_GT(orphan, 0);
  // Its parent died: it is now our child.
  ASSERT_TRUE(WaitFor([&] { return ParentOf(orphan) == getpid(); }));
  EXPECT_NE(ProcState(orphan), 'Z');
  ReleaseFifo(fifo);
  // Once it exits, no zombie remains.
  EXPECT_TRUE(WaitFor([&] { return ProcState(orphan) == 0; })) << "state " << ProcState(orphan);
  EXPECT_TRUE(WaitFor([] { return ZombieChildrenOfSelf().empty(); }));
  EXPECT_GE((*reaper)->reaped(), 1u);
}

TEST(ReaperTest, WithoutAReaperTheOrphanStaysAZombie) {
  // The control experiment for the test above: the zombie is real.
  ASSERT_TRUE(BecomeSubreaper().has_value());
  TempDir dir;
  const std::string fifo = dir.Path("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const pid_t orphan = StartOrphan(fifo);
  ASSERT_GT(orphan, 0);
  ASSERT_TRUE(WaitFor([&] { return ParentOf(orphan) == getpid(); }));
  ReleaseFifo(fifo);
  ASSERT_TRUE(WaitFor([&] { return ProcState(orphan) == 'Z'; }));
  EXPECT_THAT(ZombieChildrenOfSelf(), Contains(orphan));
  // (>= 1: strays of other tests in the same process count too.)
  EXPECT_GE(ReapOrphansOnce(), 1u);
  EXPECT_EQ(ProcState(orphan), 0);
  EXPECT_THAT(ZombieChildrenOfSelf(), Not(Contains(orphan)));
}

TEST(ReaperTest, OwnedZombiesAreNeverReapedAndDoNotHideOrphans) {
  ASSERT_TRUE(BecomeSubreaper().has_value());
  // An owned child that has exited but is not reaped yet (its owner is, say,
  // still draining output).
  auto owned = Spawn({.argv = {"/bin/sh", "-c", "exit 7"}});
  ASSERT_TRUE(owned.has_value());
  ASSERT_TRUE(WaitFor([&] { return ProcState(owned->pid()) == 'Z'; }));
  // An unowned zombie next to it.
  auto detached = Spawn({.argv = {"true"}});
  ASSERT_TRUE(detached.has_value());
  const pid_t orphan = detached->pid();
  detached->Detach();
  ASSERT_TRUE(WaitFor([&] { return ProcState(orphan) == 'Z'; }));
  EXPECT_THAT(ZombieChildrenOfSelf(), IsSupersetOf({owned->pid(), orphan}));

  EXPECT_GE(ReapOrphansOnce(/*allow_full_scan=*/true), 1u);
  EXPECT_EQ(ProcState(orphan), 0);
  EXPECT_EQ(ProcState(owned->pid()), 'Z');
  // The owner still gets its status.
  auto status = owned->Wait();
  ASSERT_TRUE(status.has_value()) << status.error().ToString();
  EXPECT_EQ(status->exit_code, 7);
  EXPECT_EQ(ProcState(owned->pid()), 0);
}

TEST(ReaperTest, ThreadReapsOrphansHiddenBehindAnOwnedZombie) {
  ASSERT_TRUE(BecomeSubreaper().has_value());
  Reaper::Options options;
  options.full_scan_delay = std::chrono::milliseconds(10);
  auto reaper = Reaper::Start(options);
  ASSERT_TRUE(reaper.has_value());
  auto owned = Spawn({.argv = {"/bin/sh", "-c", "exit 5"}});
  ASSERT_TRUE(owned.has_value());
  ASSERT_TRUE(WaitFor([&] { return ProcState(owned->pid()) == 'Z'; }));
  std::vector<pid_t> detached;
  for (int i = 0; i < 5; ++i) {
    auto c = Spawn({.argv = {"true"}});
    ASSERT_TRUE(c.has_value());
    detached.push_back(c->pid());
    c->Detach();
  }
  EXPECT_TRUE(WaitFor([&] {
    return std::all_of(detached.begin(), detached.end(),
                       [](pid_t pid) { return ProcState(pid) == 0; });
  }));
  EXPECT_EQ(ProcState(owned->pid()), 'Z');
  EXPECT_EQ(owned->Wait()->exit_code, 5);
  EXPECT_GE((*reaper)->reaped(), 5u);
}

TEST(ReaperTest, OnlyOneReaperAtATime) {
  auto first = Reaper::Start();
  ASSERT_TRUE(first.has_value());
  auto second = Reaper::Start();
  ASSERT_FALSE(second.has_value());
  EXPECT_EQ(second.error().code, ErrorCode::kConflict);
  first->reset();
  auto third = Reaper::Start();
  EXPECT_TRUE(third.has_value());
}

TEST(ReaperTest, PreviousSigchldHandlerIsChainedAndRestored) {
  static std::atomic<int> calls{0};
  struct sigaction mine {
  }, old{};
  mine.sa_handler = [](int) { ++calls; };
  sigemptyset(&mine.sa_mask);
  mine.sa_flags = SA_RESTART;
  sigaction(SIGCHLD, &mine, &old);
  {
    auto reaper = Reaper::Start();
    ASSERT_TRUE(reaper.has_value());
    auto c = Spawn({.argv = {"true"}});
    ASSERT_TRUE(c.has_value());
    EXPECT_EQ(c->Wait()->exit_code, 0);
    EXPECT_TRUE(WaitFor([] { return calls.load() >= 1; }));
  }
  struct sigaction now {};
  sigaction(SIGCHLD, nullptr, &now);
  EXPECT_EQ(now.sa_handler, mine.sa_handler);
  sigaction(SIGCHLD, &old, nullptr);
}

// The SigBlk mask of every thread of this process except the main one.
std::vector<uint64_t> OtherThreadsBlockedMasks() {
  std::vector<uint64_t> masks;
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return masks;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.' || std::to_string(getpid()) == e->d_name) continue;
    std::ifstream in(std::string("/proc/self/task/") + e->d_name + "/status");
    for (std::string line; std::getline(in, line);) {
      if (line.starts_with("SigBlk:")) masks.push_back(std::stoull(line.substr(7), nullptr, 16));
    }
  }
  closedir(d);
  return masks;
}

TEST(ReaperTest, LibraryThreadsDoNotTakeTheDaemonsSignals) {
  auto reaper = Reaper::Start();
  ASSERT_TRUE(reaper.has_value());
  auto table = ProcessTable::Create();
  ASSERT_TRUE(table.has_value());
  auto masks = OtherThreadsBlockedMasks();
  ASSERT_EQ(masks.size(), 2u);  // the reaper's and the table's
  const uint64_t must_block = (1ull << (SIGTERM - 1)) | (1ull << (SIGINT - 1)) |
                              (1ull << (SIGHUP - 1)) | (1ull << (SIGCHLD - 1));
  for (uint64_t m : masks) EXPECT_EQ(m & must_block, must_block) << std::hex << m;
}

TEST(ChildRegistryTest, RegisterAndReapIfUnregistered) {
  ChildRegistry& registry = ChildRegistry::Instance();
  auto c = Spawn({.argv = {"true"}});
  ASSERT_TRUE(c.has_value());
  const pid_t pid = c->pid();
  ASSERT_TRUE(WaitFor([&] { return ProcState(pid) == 'Z'; }));
  EXPECT_FALSE(registry.ReapIfUnregistered(pid));  // owned
  EXPECT_EQ(ProcState(pid), 'Z');
  c->Detach();
  EXPECT_FALSE(registry.IsRegistered(pid));
  EXPECT_TRUE(registry.ReapIfUnregistered(pid));
  EXPECT_EQ(ProcState(pid), 0);
  EXPECT_FALSE(registry.ReapIfUnregistered(pid));  // nothing left
}

}  // namespace
}  // namespace deepbox::sandboxd::proc
