// The snapshot store shared by the providers: names, records, the quota, the
// write-then-rename protocol, leftovers of dead writers, and the refusal of a
// directory that is not ours alone.
#include "sandbox/snapshot_store.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "common/testing/temp_dir.h"

namespace deepbox {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class SnapshotStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = tmp_.path();
    unsetenv("DEEPBOX_SNAPSHOT_QUOTA");
  }
  void TearDown() override { unsetenv("DEEPBOX_SNAPSHOT_QUOTA"); }

  SnapshotStore Open(uint64_t quota = 0) {
    SnapshotStoreOptions o;
    o.dir = (root_ / "snapshots").string();
    o.quota_bytes = quota;
    auto s = SnapshotStore::Open(o);
    EXPECT_TRUE(s) << s.error().ToString();
    return std::move(*s);
  }

  // A committed snapshot of `provider` with a payload file of `bytes`.
  SnapshotInfo Take(const SnapshotStore& store, const std::string& name, int64_t bytes,
                    const std::string& provider = "local") {
    auto pending = store.Begin(name);
    EXPECT_TRUE(pending) << pending.error().ToString();
    std::ofstream((*pending)->dir() / "payload") << std::string(static_cast<size_t>(bytes), 'x');
    SnapshotInfo info;
    info.provider = provider;
    info.source_id = "sb-0123456789ab";
    info.size_bytes = bytes;
    auto done = (*pending)->Commit(info);
    EXPECT_TRUE(done) << done.error().ToString();
    return *done;
  }

  std::vector<std::string> Entries() {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(root_ / "snapshots")) {
      out.push_back(e.path().filename().string());
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  deepbox::testing::TempDir tmp_{"dbx-snapstore"};
  fs::path root_;
};

TEST_F(SnapshotStoreTest, NamesAreFileNamesAndNothingElse) {
  for (const char* ok : {"a", "before-fix", "v1.2_final", "0", "ends-"}) {
    EXPECT_TRUE(ValidSnapshotName(ok)) << ok;
  }
  EXPECT_TRUE(ValidSnapshotName(std::string(63, 'z')));
  for (const char* bad : {"", ".", "..", ".hidden", "-x", "a/b", "a b", "caf\xc3\xa9", "x\n"}) {
    EXPECT_FALSE(ValidSnapshotName(bad)) << bad;
  }
  EXPECT_FALSE(ValidSnapshotName(std::string(64, 'z')));
  auto store = Open();
  auto bad = store.Begin("../x");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(store.Get("../x").error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(store.Delete("../x").error().code, ErrorCode::kInvalidArgument);
}

TEST_F(SnapshotStoreTest, ASnapshotExistsOnlyOnceWhole) {
  auto store = Open();
  auto pending = store.Begin("one");
  ASSERT_TRUE(pending) << pending.error().ToString();
  EXPECT_THAT((*pending)->dir().filename().string(), ::testing::StartsWith(".tmp-one-"));
  // Being written: not listed, not found.
  EXPECT_TRUE(store.List()->empty());
  EXPECT_EQ(store.Get("one").error().code, ErrorCode::kNotFound);
  std::ofstream((*pending)->dir() / "workspace.tar") << "bytes";
  SnapshotInfo info;
  info.provider = "k8s";
  info.source_id = "default/claim-1";
  info.size_bytes = 4096;
  info.note = "taken while it ran";
  auto done = (*pending)->Commit(info);
  ASSERT_TRUE(done) << done.error().ToString();
  EXPECT_EQ(done->name, "one");
  EXPECT_FALSE(done->created_at.empty());
  EXPECT_EQ(Entries(), std::vector<std::string>{"one"});
  auto got = store.Get("one");
  ASSERT_TRUE(got) << got.error().ToString();
  EXPECT_EQ(got->provider, "k8s");
  EXPECT_EQ(got->source_id, "default/claim-1");
  EXPECT_EQ(got->size_bytes, 4096);
  EXPECT_EQ(got->note, "taken while it ran");
  EXPECT_EQ(got->created_at, done->created_at);
  std::ifstream tar(store.PathOf("one") / "workspace.tar");
  std::string payload((std::istreambuf_iterator<char>(tar)), std::istreambuf_iterator<char>());
  EXPECT_EQ(payload, "bytes");

  auto taken = store.Begin("one");
  ASSERT_FALSE(taken);
  EXPECT_EQ(taken.error().code, ErrorCode::kConflict);

  // A failed one (never committed) leaves nothing.
  {
    auto failed = store.Begin("two");
    ASSERT_TRUE(failed);
    fs::create_directories((*failed)->dir() / "files" / "deep");
    std::ofstream((*failed)->dir() / "files" / "deep" / "f") << "half";
  }
  EXPECT_EQ(Entries(), std::vector<std::string>{"one"});
}

TEST_F(SnapshotStoreTest, ANameTakenWhileWritingIsAConflictAndKeepsNothing) {
  auto store = Open();
  auto a = store.Begin("race");
  auto b = store.Begin("race");  // neither exists yet
  ASSERT_TRUE(a && b);
  ASSERT_TRUE((*a)->Commit(SnapshotInfo{}));
  auto second = (*b)->Commit(SnapshotInfo{});
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().code, ErrorCode::kConflict);
  b->reset();
  EXPECT_EQ(Entries(), std::vector<std::string>{"race"});
  // A scratch copy is never a snapshot.
  auto scratch = store.Scratch();
  ASSERT_TRUE(scratch) << scratch.error().ToString();
  EXPECT_FALSE((*scratch)->Commit(SnapshotInfo{}));
  EXPECT_EQ(store.List()->size(), 1u);
  scratch->reset();
  EXPECT_EQ(Entries(), std::vector<std::string>{"race"});
}

TEST_F(SnapshotStoreTest, TheQuotaCountsEverySnapshotAndAFullOneKeepsNothing) {
  auto store = Open(10000);
  EXPECT_EQ(store.quota_bytes(), 10000u);
  Take(store, "a", 6000);
  auto pending = store.Begin("b");
  ASSERT_TRUE(pending) << pending.error().ToString();
  EXPECT_EQ((*pending)->budget(), 4000u);  // what is left for the payload
  pending->reset();
  Take(store, "c", 4000, "k8s");  // every provider's snapshots count
  auto full = store.Begin("d");
  ASSERT_FALSE(full);
  EXPECT_EQ(full.error().code, ErrorCode::kResourceExhausted);
  EXPECT_THAT(full.error().message, HasSubstr("quota of 9.77 KiB is used up"));
  EXPECT_THAT(full.error().message, HasSubstr("snapshot rm"));
  auto scratch = store.Scratch();
  ASSERT_FALSE(scratch);
  EXPECT_EQ(scratch.error().code, ErrorCode::kResourceExhausted);
  EXPECT_EQ(Entries(), (std::vector<std::string>{"a", "c"}));
  ASSERT_TRUE(store.Delete("a"));
  EXPECT_TRUE(store.Begin("d"));
}

TEST_F(SnapshotStoreTest, TheQuotaComesFromTheEnvironmentOrIsTwentyGiB) {
  EXPECT_EQ(Open().quota_bytes(), 20ULL << 30);
  setenv("DEEPBOX_SNAPSHOT_QUOTA", "512M", 1);
  EXPECT_EQ(Open().quota_bytes(), 512ULL << 20);
  EXPECT_EQ(Open(1000).quota_bytes(), 1000u);  // the caller's own wins
  for (const char* bad : {"lots", "0", "-1"}) {
    setenv("DEEPBOX_SNAPSHOT_QUOTA", bad, 1);
    auto s = SnapshotStore::Open({.dir = (root_ / "snapshots").string()});
    ASSERT_FALSE(s) << bad;
    EXPECT_EQ(s.error().code, ErrorCode::kInvalidArgument);
    EXPECT_THAT(s.error().message, HasSubstr("DEEPBOX_SNAPSHOT_QUOTA"));
  }
}

TEST_F(SnapshotStoreTest, ListingRemovesWhatDeadWritersLeftAfterAnHour) {
  auto store = Open();
  Take(store, "kept", 10);
  fs::path dir = root_ / "snapshots";
  for (const char* d : {".tmp-old-1234", ".tmp-rm-gone-5678", ".tmp-new-9abc"}) {
    fs::create_directories(dir / d / "files" / "sub");
    std::ofstream(dir / d / "files" / "sub" / "f") << "x";
  }
  struct timespec old[2];
  old[0].tv_sec = old[1].tv_sec = time(nullptr) - 2 * 3600;
  old[0].tv_nsec = old[1].tv_nsec = 0;
  ASSERT_EQ(utimensat(AT_FDCWD, (dir / ".tmp-old-1234").c_str(), old, 0), 0);
  ASSERT_EQ(utimensat(AT_FDCWD, (dir / ".tmp-rm-gone-5678").c_str(), old, 0), 0);
  // Not a snapshot, and not ours to remove: left alone.
  std::ofstream(dir / "README") << "x";
  fs::create_directory(dir / "no-record");
  auto list = store.List();
  ASSERT_TRUE(list) << list.error().ToString();
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].name, "kept");
  EXPECT_EQ(Entries(), (std::vector<std::string>{".tmp-new-9abc", "README", "kept", "no-record"}));
  // A writer that keeps going says so.
  auto pending = store.Begin("slow");
  ASSERT_TRUE(pending);
  ASSERT_EQ(utimensat(AT_FDCWD, (*pending)->dir().c_str(), old, 0), 0);
  (*pending)->KeepAlive();
  ASSERT_TRUE(store.List());
  EXPECT_TRUE(fs::exists((*pending)->dir()));
}

TEST_F(SnapshotStoreTest, DeleteTakesItOutOfSightThenRemovesIt) {
  auto store = Open();
  Take(store, "x", 10);
  // What a sandbox may leave in a copy of its files: a directory we cannot write.
  fs::path files = store.PathOf("x") / "files" / "ro";
  fs::create_directories(files);
  std::ofstream(files / "f") << "x";
  ASSERT_EQ(chmod(files.c_str(), 0500), 0);
  ASSERT_TRUE(store.Delete("x"));
  EXPECT_TRUE(Entries().empty());
  auto again = store.Delete("x");
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, ErrorCode::kNotFound);
  EXPECT_THAT(again.error().message, HasSubstr("deepbox sandbox snapshot ls"));
}

TEST_F(SnapshotStoreTest, ARecordSaysWhichProviderCanRestoreIt) {
  auto store = Open();
  Take(store, "of-k8s", 10, "k8s");
  EXPECT_TRUE(store.GetFor("of-k8s", "k8s"));
  auto wrong = store.GetFor("of-k8s", "local");
  ASSERT_FALSE(wrong);
  EXPECT_EQ(wrong.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(wrong.error().message,
            "snapshot 'of-k8s' was taken of a k8s sandbox; restore it with --provider k8s");
  // Records from before the field was written are local ones.
  fs::create_directory(store.PathOf("old"));
  std::ofstream(store.PathOf("old") / "snapshot.json")
      << R"({"name":"other","source_id":"sb-0123456789ab","size_bytes":5})";
  auto old = store.GetFor("old", "local");
  ASSERT_TRUE(old) << old.error().ToString();
  EXPECT_EQ(old->name, "old");  // the directory's name, whatever the record says
  EXPECT_EQ(old->provider, "local");
  EXPECT_EQ(old->file_bytes, -1);
  // A record that is not one is not a snapshot.
  fs::create_directory(store.PathOf("junk"));
  std::ofstream(store.PathOf("junk") / "snapshot.json") << "[1,";
  EXPECT_EQ(store.Get("junk").error().code, ErrorCode::kInternal);
  EXPECT_EQ(store.List()->size(), 2u);
}

TEST_F(SnapshotStoreTest, ADirectoryNotOursAloneIsRefused) {
  auto check = [&](const fs::path& dir, const char* why) -> std::string {
    auto s = SnapshotStore::Open({.dir = dir.string()});
    if (s) return fmt::format("opened {} ({})", dir.string(), why);
    EXPECT_EQ(s.error().code, ErrorCode::kPermissionDenied) << why;
    EXPECT_THAT(s.error().message, HasSubstr(dir.string())) << why;
    return s.error().message;
  };
  fs::path group_writable = root_ / "group";
  ASSERT_EQ(mkdir(group_writable.c_str(), 0770), 0);
  ASSERT_EQ(chmod(group_writable.c_str(), 0770), 0);
  EXPECT_THAT(check(group_writable, "group-writable"), HasSubstr("chmod go-w"));
  fs::path link = root_ / "link";
  fs::create_directory(root_ / "real");
  fs::create_directory_symlink(root_ / "real", link);
  EXPECT_THAT(check(link, "a symlink"), HasSubstr("symbolic link"));
  fs::path file = root_ / "file";
  std::ofstream(file) << "x";
  check(file, "a file");
  fs::path open_parent = root_ / "open";
  ASSERT_EQ(mkdir(open_parent.c_str(), 0777), 0);
  ASSERT_EQ(chmod(open_parent.c_str(), 0777), 0);
  EXPECT_THAT(check(open_parent / "snapshots", "in a world-writable directory"),
              HasSubstr("other users"));
  if (geteuid() == 0) {
    fs::path theirs = root_ / "theirs";
    ASSERT_EQ(mkdir(theirs.c_str(), 0700), 0);
    ASSERT_EQ(chown(theirs.c_str(), 65534, 65534), 0);
    EXPECT_THAT(check(theirs, "another owner"), HasSubstr("Someone else made it"));
    EXPECT_THAT(check(theirs / "snapshots", "inside another owner's"), HasSubstr("uid 65534"));
  }
  // A new one is made 0700, missing parents too.
  fs::path fresh = root_ / "a" / "b" / "snapshots";
  ASSERT_TRUE(SnapshotStore::Open({.dir = fresh.string()}));
  struct stat st {};
  ASSERT_EQ(stat(fresh.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  ASSERT_EQ(stat((root_ / "a").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 077, 0u);
  EXPECT_EQ(SnapshotStore::Open({.dir = "relative/dir"}).error().code, ErrorCode::kInvalidArgument);
}

TEST_F(SnapshotStoreTest, TheDefaultDirectoryIsOnPersistentDisk) {
  std::map<std::string, std::string> env;
  auto lookup = [&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  auto dir = [&](const std::string& state_dir = "") {
    auto d = DefaultSnapshotDir(state_dir, lookup);
    return d ? d->string() : "error: " + d.error().message;
  };
  env = {{"HOME", "/home/u"}};
  EXPECT_EQ(dir(), "/home/u/.local/state/deepbox/snapshots");
  env["XDG_STATE_HOME"] = "/xdg";
  EXPECT_EQ(dir(), "/xdg/deepbox/snapshots");
  env["XDG_RUNTIME_DIR"] = "/run/user/1000";  // a tmpfs: never used for snapshots
  EXPECT_EQ(dir(), "/xdg/deepbox/snapshots");
  env["DEEPBOX_STATE_DIR"] = "/state";
  EXPECT_EQ(dir(), "/state/snapshots");
  EXPECT_EQ(dir("/chosen"), "/chosen/snapshots");
  env["DEEPBOX_SNAPSHOT_DIR"] = "/snaps";
  EXPECT_EQ(dir("/chosen"), "/snaps");
  env["DEEPBOX_SNAPSHOT_DIR"] = "snaps";
  EXPECT_THAT(dir(), HasSubstr("DEEPBOX_SNAPSHOT_DIR must be an absolute path"));
  env = {{"DEEPBOX_STATE_DIR", "rel"}};
  EXPECT_THAT(dir(), HasSubstr("DEEPBOX_STATE_DIR must be an absolute path"));
  env = {{"XDG_STATE_HOME", "relative"}, {"HOME", "/h"}};  // XDG: absolute only
  EXPECT_EQ(dir(), "/h/.local/state/deepbox/snapshots");
  env = {};
  if (geteuid() == 0) {
    EXPECT_EQ(dir(), "/var/lib/deepbox/snapshots");
  }
}

}  // namespace
}  // namespace deepbox
