// Snapshots, restores and forks of local sandboxes (issue 22 item 4), with
// the real CLI, supervisors and daemons: a tree made inside a sandbox
// (modes, symlinks, hard links, sparse and larger files, empty directories,
// FIFOs, names that are not UTF-8) comes back byte for byte in a restore and
// in every fork; forks are independent of each other and of their source;
// writes racing a snapshot leave every file whole; a snapshot over the quota
// keeps nothing and leaves the sandbox as it was; suspend -> resume keeps
// the same tree.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "cli_fixture.h"
#include "common/json.h"
#include "local/lifecycle/provider.h"
#include "local/testing/tree_compare.h"
#include "sandbox/sandbox.h"

namespace deepbox::local::lifecycle {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using testing::ReadFile;

// The tree, made by the sandbox's own user inside it.
constexpr const char* kMakeTree = R"SH(set -e
cd /workspace
mkdir -p src/deep/er empty 'with space' "$(printf 'n\377\376')"
printf 'print("hi")\n' > src/main.py
printf 'bin\000ary\377' > src/deep/blob.bin
head -c 300000 /dev/urandom > src/deep/er/random.dat
dd if=/dev/zero of=sparse.img bs=1 count=0 seek=64M 2>/dev/null
printf head | dd of=sparse.img conv=notrunc 2>/dev/null
printf tail | dd of=sparse.img bs=1 seek=33554432 conv=notrunc 2>/dev/null
ln src/main.py hard-link.py
ln -s src/main.py rel-link
ln -s /etc/passwd abs-link
ln -s ../../nowhere dangling
mkfifo fifo
printf x > "$(printf 'n\377\376')/file"
chmod 0750 src; chmod 4755 src/main.py; chmod 1777 empty; chmod 0400 src/deep/blob.bin
touch -d '2001-02-03 04:05:06' src/deep/er/random.dat
)SH";

using local::testing::SameTree;

class SnapshotTest : public testing::LocalCliTest {
 protected:
  std::string Create() {
    return CreatedId(Cli({"sandbox", "create", "--cold", "--ttl", "900", "--network", "none"}));
  }
  fs::path Workspace(const std::string& id) { return state_ / "sandboxes" / id / "workspace"; }
};

TEST_F(SnapshotTest, ATreeSurvivesSnapshotRestoreForkAndSuspendByteForByte) {
  std::string src = Create();
  auto made = Cli({"sandbox", "exec", src, "--", "sh", "-c", kMakeTree});
  ASSERT_EQ(made.code, 0) << made.err;
  auto before = local::testing::ReadTree(Workspace(src));
  ASSERT_GE(before.size(), 15u);

  auto snap = Cli({"sandbox", "snapshot", src, "--name", "tree-1", "--json"});
  ASSERT_EQ(snap.code, 0) << snap.err;
  auto record = ParseJsonObject(snap.out);
  ASSERT_TRUE(record) << snap.out;
  EXPECT_EQ(record->at("name").as_string(), "tree-1");
  EXPECT_EQ(record->at("source_id").as_string(), src);
  // On disk: the sparse image's holes are not stored.
  EXPECT_LT(record->at("size_bytes").as_int64(), 8 << 20);
  EXPECT_GT(record->at("file_bytes").as_int64(), 64 << 20);
  EXPECT_EQ(Meta(src).mode, "running");  // paused for the copy, then resumed
  EXPECT_FALSE(Meta(src).hold.valid());
  EXPECT_EQ(Cli({"sandbox", "snapshot", src, "--name", "tree-1"}).code, 1);  // name taken

  auto restored =
      CreatedId(Cli({"sandbox", "create", "--from-snapshot", "tree-1", "--ttl", "900"}));
  ASSERT_TRUE(Store::ValidId(restored)) << restored;
  EXPECT_TRUE(SameTree(Workspace(src), Workspace(restored)));
  EXPECT_EQ(Meta(restored).labels.at("deepbox.dev/snapshot"), "tree-1");
  // The restored sandbox's own user owns and uses the files.
  auto run = Cli({"sandbox", "exec", restored, "--", "sh", "-c",
                  "cat src/main.py hard-link.py; echo more >> hard-link.py; cat src/main.py"});
  ASSERT_EQ(run.code, 0) << run.err;
  EXPECT_EQ(run.out, "print(\"hi\")\nprint(\"hi\")\nprint(\"hi\")\nmore\n");

  // The snapshot outlives its sandbox.
  ASSERT_EQ(Cli({"sandbox", "rm", restored}).code, 0);
  auto ls = Cli({"sandbox", "snapshot", "ls", "--json"});
  ASSERT_EQ(ls.code, 0) << ls.err;
  EXPECT_THAT(ls.out, HasSubstr("\"tree-1\""));

  // Forks: each the source's tree, each on its own.
  auto forked = Cli({"sandbox", "fork", src, "-n", "3", "--json"});
  ASSERT_EQ(forked.code, 0) << forked.err;
  auto ids = ParseJson(forked.out);
  ASSERT_TRUE(ids && ids->is_array()) << forked.out;
  ASSERT_EQ(ids->as_array().size(), 3u);
  std::vector<std::string> forks;
  for (const auto& v : ids->as_array()) forks.emplace_back(v.as_string());
  for (const auto& f : forks) {
    EXPECT_TRUE(SameTree(Workspace(src), Workspace(f))) << f;
    EXPECT_EQ(Meta(f).labels.at("deepbox.dev/forked-from"), src);
  }
  ASSERT_EQ(
      Cli({"sandbox", "exec", forks[0], "--", "sh", "-c", "rm -r src; echo new > only0"}).code, 0);
  EXPECT_TRUE(SameTree(Workspace(src), Workspace(forks[1])));
  EXPECT_FALSE(fs::exists(Workspace(src) / "only0"));
  EXPECT_TRUE(fs::exists(Workspace(src) / "src/main.py"));

  // Suspend -> resume: the same tree.
  ASSERT_EQ(Cli({"sandbox", "suspend", src}).code, 0);
  ASSERT_EQ(Cli({"sandbox", "resume", src}).code, 0);
  auto after = local::testing::ReadTree(Workspace(src));
  EXPECT_EQ(after.size(), before.size());
  EXPECT_TRUE(SameTree(Workspace(src), Workspace(forks[2])));

  ASSERT_EQ(Cli({"sandbox", "snapshot", "rm", "tree-1"}).code, 0);
  EXPECT_FALSE(fs::exists(state_ / "snapshots" / "tree-1"));
  EXPECT_EQ(Cli({"sandbox", "create", "--from-snapshot", "tree-1"}).code, 3);  // no such snapshot
}

TEST_F(SnapshotTest, WritesRacingSnapshotsLeaveEveryFileWhole) {
  std::string id = Create();
  auto client = provider_->Connect(id);
  ASSERT_TRUE(client) << client.error().ToString();
  Sandbox& sb = **client;
  std::atomic<bool> stop{false};
  std::atomic<int> writes{0};
  // Version N is 200 KB of the letter 'a' + N % 26: a torn file mixes them.
  std::thread writer([&] {
    for (int n = 0; !stop.load(); ++n) {
      if (sb.Write("data.txt", std::string(200000, static_cast<char>('a' + n % 26)))) ++writes;
    }
  });
  std::vector<std::string> names;
  for (int i = 0; i < 5; ++i) {
    auto snap = Cli({"sandbox", "snapshot", id, "--name", fmt::format("race-{}", i)});
    EXPECT_EQ(snap.code, 0) << snap.err;
    names.push_back(fmt::format("race-{}", i));
  }
  stop = true;
  writer.join();
  EXPECT_GT(writes.load(), 5);
  for (const auto& name : names) {
    std::string data = ReadFile(state_ / "snapshots" / name / "files" / "data.txt");
    ASSERT_EQ(data.size(), 200000u) << name;
    EXPECT_EQ(data.find_first_not_of(data[0]), std::string::npos) << name << ": a torn file";
  }
}

// A fork of a sandbox with a /workspace disk is a clone of its image, taken
// with the source paused and its file system frozen: every file whole, the
// source's network (none) kept, no clone left behind.
TEST_F(SnapshotTest, ForksCloneTheDiskWholeAndKeepTheSourcesNetwork) {
  std::string id = Create();
  const bool disk = fs::exists(state_ / "sandboxes" / id / "rt" / "workspace.img");
  auto client = provider_->Connect(id);
  ASSERT_TRUE(client) << client.error().ToString();
  Sandbox& sb = **client;
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (int n = 0; !stop.load(); ++n) {
      (void)sb.Write("data.txt", std::string(200000, static_cast<char>('a' + n % 26)));
    }
  });
  auto forked = Cli({"sandbox", "fork", id, "-n", "2", "--json"});
  stop = true;
  writer.join();
  ASSERT_EQ(forked.code, 0) << forked.err;
  auto ids = ParseJson(forked.out);
  ASSERT_TRUE(ids && ids->is_array()) << forked.out;
  ASSERT_EQ(ids->as_array().size(), 2u);
  for (const auto& v : ids->as_array()) {
    std::string fork(v.as_string());
    SandboxMeta m = Meta(fork);
    EXPECT_EQ(m.network, "none") << "a fork of a sandbox without network got one";
    EXPECT_EQ(m.labels.at("deepbox.dev/forked-from"), id);
    auto read = Cli({"sandbox", "exec", fork, "--", "cat", "/workspace/data.txt"});
    ASSERT_EQ(read.code, 0) << read.err;
    if (read.out.empty()) continue;  // forked before the first write landed
    ASSERT_EQ(read.out.size(), 200000u);
    EXPECT_EQ(read.out.find_first_not_of(read.out[0]), std::string::npos) << "a torn file";
    if (disk) {
      EXPECT_TRUE(fs::exists(state_ / "sandboxes" / fork / "rt" / "workspace.img"));
      EXPECT_THAT(ReadFile(state_ / "sandboxes" / fork / "supervisor.log"),
                  ::testing::Not(HasSubstr("mkfs")));
    }
  }
  if (disk) {
    std::error_code ec;
    EXPECT_TRUE(fs::is_empty(state_ / "forks", ec)) << "a clone was left behind";
  }
  // Told otherwise, a fork gets what it is told.
  auto open = Cli({"sandbox", "fork", id, "--network", "public"});
  if (open.code != 4) {  // 4: no public network on this host
    ASSERT_EQ(open.code, 0) << open.err;
    EXPECT_EQ(Meta(CreatedId(open)).network, "public");
  }
}

// A real full disk (a 1 MiB tmpfs as the snapshot directory), not the quota:
// the snapshot fails with the reason, nothing of it is left, and the sandbox
// runs on as it was.
TEST_F(SnapshotTest, ADiskThatFillsUpDuringASnapshotKeepsNothing) {
  std::string id = Create();
  ASSERT_EQ(Cli({"sandbox", "exec", id, "--", "sh", "-c",
                 "head -c 3000000 /dev/urandom > /workspace/big && echo ok > /workspace/small"})
                .code,
            0);
  fs::path small = state_ / "small-disk";
  fs::create_directories(small);
  ASSERT_EQ(mount("tmpfs", small.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0700"), 0)
      << strerror(errno);
  setenv("DEEPBOX_SNAPSHOT_DIR", small.c_str(), 1);
  auto snap = Cli({"sandbox", "snapshot", id, "--name", "no-room"});
  auto ls = Cli({"sandbox", "snapshot", "ls"});
  unsetenv("DEEPBOX_SNAPSHOT_DIR");
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(small)) left.push_back(e.path().filename());
  ASSERT_EQ(umount2(small.c_str(), MNT_DETACH), 0);
  EXPECT_EQ(snap.code, 1) << snap.err;
  EXPECT_THAT(snap.err, HasSubstr("nothing was kept"));
  EXPECT_THAT(snap.err, ::testing::AnyOf(HasSubstr("No space left"), HasSubstr("ENOSPC")));
  EXPECT_THAT(left, ::testing::IsEmpty());
  EXPECT_THAT(ls.out, ::testing::Not(HasSubstr("no-room")));
  SandboxMeta m = Meta(id);
  EXPECT_EQ(m.mode, "running");  // resumed after the failed copy
  auto read = Cli({"sandbox", "exec", id, "--", "cat", "/workspace/small"});
  ASSERT_EQ(read.code, 0) << read.err;
  EXPECT_EQ(read.out, "ok\n");
}

TEST_F(SnapshotTest, AFullQuotaKeepsNothingAndLeavesTheSandboxAsItWas) {
  std::string id = Create();
  ASSERT_EQ(Cli({"sandbox", "exec", id, "--", "sh", "-c",
                 "head -c 3000000 /dev/urandom > /workspace/big"})
                .code,
            0);
  setenv("DEEPBOX_SNAPSHOT_QUOTA", "1M", 1);
  auto snap = Cli({"sandbox", "snapshot", id, "--name", "too-big"});
  unsetenv("DEEPBOX_SNAPSHOT_QUOTA");
  EXPECT_EQ(snap.code, 1);
  EXPECT_THAT(snap.err, HasSubstr("nothing was kept"));
  EXPECT_FALSE(fs::exists(state_ / "snapshots" / "too-big"));
  for (const auto& e : fs::directory_iterator(state_ / "snapshots")) {
    ADD_FAILURE() << "left behind: " << e.path();
  }
  SandboxMeta m = Meta(id);
  EXPECT_EQ(m.mode, "running");
  EXPECT_FALSE(m.hold.valid());
  auto still = Cli({"sandbox", "exec", id, "--", "sh", "-c", "wc -c < /workspace/big"});
  EXPECT_EQ(still.out, "3000000\n") << still.err;
}

// A hold left by a copier that died (killed mid-snapshot) does not keep the
// sandbox asleep: its next use resumes it at once.
TEST_F(SnapshotTest, AHoldOfAGoneProcessIsVoid) {
  std::string id = Create();
  if (Cli({"sandbox", "suspend", id}).code != 0) GTEST_SKIP() << "cannot suspend here";
  ASSERT_TRUE(provider_->store().Update(id, [](SandboxMeta& m) {
    m.hold = ProcessRef{.pid = 4000000, .start_time = 1};  // no such process
    return Status{};
  }));
  auto r = Cli({"sandbox", "exec", id, "--", "echo", "awake"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "awake\n");
}

// Named sandboxes (issue 22 item 5): unique, usable wherever an id is, free
// again once the sandbox is gone.
TEST_F(SnapshotTest, NamesAreUniqueAndWorkWhereIdsDo) {
  auto made =
      Cli({"sandbox", "create", "--cold", "--ttl", "900", "--network", "none", "--name", "web-1"});
  std::string id = CreatedId(made);
  ASSERT_TRUE(Store::ValidId(id)) << made.err;
  EXPECT_EQ(Meta(id).name, "web-1");
  auto twice =
      Cli({"sandbox", "create", "--cold", "--ttl", "900", "--network", "none", "--name", "web-1"});
  EXPECT_EQ(twice.code, 1);
  EXPECT_THAT(twice.err, HasSubstr("a sandbox named 'web-1' exists already"));
  EXPECT_EQ(Cli({"sandbox", "create", "--name", "sb-0123456789ab"}).code, 2);
  EXPECT_EQ(Cli({"sandbox", "create", "--name", "../x"}).code, 2);
  auto exec = Cli({"sandbox", "exec", "web-1", "--", "sh", "-c", "echo hi > f; hostname"});
  ASSERT_EQ(exec.code, 0) << exec.err;
  EXPECT_EQ(exec.out, id + "\n");
  fs::path local = state_ / "io" / "from-host.txt";
  { std::ofstream(local) << "host bytes"; }
  ASSERT_EQ(Cli({"sandbox", "cp", local.string(), "web-1:copied.txt"}).code, 0);
  EXPECT_EQ(ReadFile(Workspace(id) / "copied.txt"), "host bytes");
  EXPECT_EQ(Cli({"sandbox", "suspend", "web-1"}).code, 0);
  EXPECT_EQ(Cli({"sandbox", "resume", "web-1"}).code, 0);
  auto snap = Cli({"sandbox", "snapshot", "web-1", "--name", "web-snap"});
  EXPECT_EQ(snap.code, 0) << snap.err;
  auto ls = Cli({"sandbox", "ls"});
  EXPECT_THAT(ls.out, HasSubstr("web-1"));
  EXPECT_THAT(ls.out, HasSubstr("DISK"));
  struct stat ws, parent;
  ASSERT_EQ(stat(Workspace(id).c_str(), &ws), 0);
  ASSERT_EQ(stat(Workspace(id).parent_path().c_str(), &parent), 0);
  if (ws.st_dev != parent.st_dev) {  // its own /workspace disk: its use is shown
    auto json = Cli({"sandbox", "ls", "--json"});
    EXPECT_THAT(json.out, HasSubstr("\"disk_used_bytes\":"));
  }
  EXPECT_EQ(Cli({"sandbox", "exec", "no-such-name", "--", "true"}).code, 3);
  ASSERT_EQ(Cli({"sandbox", "rm", "web-1"}).code, 0);
  EXPECT_FALSE(fs::exists(state_ / "sandboxes" / id));
  EXPECT_FALSE(fs::exists(state_ / "names" / "web-1"));
  // Free again; a restore may carry it.
  auto again =
      Cli({"sandbox", "create", "--from-snapshot", "web-snap", "--name", "web-1", "--ttl", "900"});
  std::string second = CreatedId(again);
  ASSERT_TRUE(Store::ValidId(second)) << again.err;
  EXPECT_EQ(ReadFile(Workspace(second) / "f"), "hi\n");
  EXPECT_EQ(Meta(second).name, "web-1");
  EXPECT_EQ(Cli({"sandbox", "snapshot", "rm", "web-snap"}).code, 0);
}

// A snapshot (or removal) that died half-way leaves a .tmp- directory: it is
// removed once it is an hour old, and a fresh one (a copy under way) stays.
TEST_F(SnapshotTest, LeftoversOfADeadSnapshotAreRemoved) {
  fs::path dir = state_ / "snapshots";
  fs::create_directories(dir / ".tmp-old-1234" / "files");
  fs::create_directories(dir / ".tmp-new-5678" / "files");
  fs::last_write_time(dir / ".tmp-old-1234",
                      fs::file_time_type::clock::now() - std::chrono::hours(2));
  auto ls = Cli({"sandbox", "snapshot", "ls"});
  ASSERT_EQ(ls.code, 0) << ls.err;
  EXPECT_THAT(ls.out, HasSubstr("0 snapshot(s)"));
  EXPECT_FALSE(fs::exists(dir / ".tmp-old-1234"));
  EXPECT_TRUE(fs::exists(dir / ".tmp-new-5678"));
}

TEST_F(SnapshotTest, BadNamesAndCountsAreUsageErrors) {
  std::string id = Create();
  EXPECT_EQ(Cli({"sandbox", "snapshot", id, "--name", "../x"}).code, 2);
  EXPECT_EQ(Cli({"sandbox", "snapshot", "rm", "../x"}).code, 2);
  EXPECT_EQ(Cli({"sandbox", "fork", id, "-n", "0"}).code, 2);
  EXPECT_EQ(Cli({"sandbox", "fork", id, "-n", "33"}).code, 2);
  EXPECT_EQ(Cli({"sandbox", "snapshot", "sb-0123456789ab"}).code, 3);
  auto none = Cli({"sandbox", "snapshot"});
  EXPECT_EQ(none.code, 2);
  EXPECT_THAT(none.err, HasSubstr("give a sandbox id"));
}

}  // namespace
}  // namespace deepbox::local::lifecycle
