#include "fs/path_resolver.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "fs/testing/test_util.h"

namespace deepbox::fs {
namespace {

using testing::Cat;
using testing::Exists;
using testing::MakeDirRaw;
using testing::ReadRaw;
using testing::SymlinkRaw;
using testing::TempDir;
using testing::WriteRaw;

std::string ReadFd(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  return out;
}

TEST(NormalizeTest, Relative) {
  EXPECT_EQ(*NormalizeRelative("a/./b//c/"), "a/b/c");
  EXPECT_EQ(*NormalizeRelative("a/../b"), "b");
  EXPECT_EQ(*NormalizeRelative("."), "");
  EXPECT_EQ(*NormalizeRelative("a/.."), "");
  EXPECT_EQ(*NormalizeRelative("a/b/../../c/./d/.."), "c");
  for (const char* bad : {"..", "../x", "a/../../x", "a/b/../../../x"}) {
    auto r = NormalizeRelative(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().code, ErrorCode::kPermissionDenied) << bad;
  }
}

TEST(NormalizeTest, Absolute) {
  EXPECT_EQ(NormalizeAbsolute("/a//b/./c/.."), "/a/b");
  EXPECT_EQ(NormalizeAbsolute("/../.."), "/");
  EXPECT_EQ(NormalizeAbsolute("/"), "/");
}

TEST(NormalizeTest, SplitAndJoin) {
  EXPECT_EQ(SplitRelative("a/b/c").first, "a/b");
  EXPECT_EQ(SplitRelative("a/b/c").second, "c");
  EXPECT_EQ(SplitRelative("c").first, "");
  EXPECT_EQ(JoinRelative("", "x"), "x");
  EXPECT_EQ(JoinRelative("a", "x"), "a/x");
}

TEST(ValidatePathTest, Malformed) {
  EXPECT_EQ(ValidatePath("").error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(ValidatePath(std::string("a\0b", 3)).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(ValidatePath(std::string(kMaxPathBytes + 1, 'a')).error().code,
            ErrorCode::kInvalidArgument);
  EXPECT_TRUE(ValidatePath("a/b"));
}

// Every resolver test runs with openat2 and with the forced user-space walk.
class ResolverTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    root_dir_ = tmp_.Path("root");
    outside_ = tmp_.Path("outside");
    MakeDirRaw(root_dir_);
    MakeDirRaw(outside_);
    WriteRaw(root_dir_ + "/file.txt", "inside");
    WriteRaw(root_dir_ + "/sub/dir/deep.txt", "deep");
    WriteRaw(outside_ + "/secret.txt", "outside");
    auto root = Root::Open(root_dir_, RootOptions{.force_fallback = GetParam()});
    ASSERT_TRUE(root) << root.error().ToString();
    root_.emplace(std::move(*root));
  }

  Result<std::string> ReadVia(std::string_view api_path) {
    auto rel = root_->ToRelative(api_path);
    if (!rel) return tl::unexpected(rel.error());
    auto fd = root_->Open(*rel, O_RDONLY);
    if (!fd) return tl::unexpected(fd.error());
    return ReadFd(fd->get());
  }

  TempDir tmp_;
  std::string root_dir_;
  std::string outside_;
  std::optional<Root> root_;
};

TEST_P(ResolverTest, RelativeAndAbsoluteApiPaths) {
  EXPECT_EQ(*root_->ToRelative(root_dir_), "");
  EXPECT_EQ(*root_->ToRelative(root_dir_ + "/"), "");
  EXPECT_EQ(*root_->ToRelative(root_dir_ + "/sub/./dir/../dir/deep.txt"), "sub/dir/deep.txt");
  EXPECT_EQ(*root_->ToRelative("sub//dir/"), "sub/dir");
  EXPECT_EQ(root_->ToAbsolute("sub/dir"), root_dir_ + "/sub/dir");
  EXPECT_EQ(root_->ToAbsolute(""), root_dir_);
  EXPECT_EQ(*ReadVia(root_dir_ + "/file.txt"), "inside");
  EXPECT_EQ(*ReadVia("sub/dir/../dir/deep.txt"), "deep");
}

TEST_P(ResolverTest, EscapesAreDenied) {
  for (std::string bad : {std::string("../outside/secret.txt"), std::string("sub/../../x"),
                          outside_ + "/secret.txt", root_dir_ + "/../outside/secret.txt",
                          root_dir_ + "x/file.txt", std::string("/etc/passwd")}) {
    auto r = ReadVia(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().code, ErrorCode::kPermissionDenied) << bad << ": " << r.error().message;
  }
}

TEST_P(ResolverTest, MalformedPathsAreInvalid) {
  for (std::string bad : {std::string(), std::string("a\0b", 3), std::string(5000, 'x')}) {
    auto r = ReadVia(bad);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument) << r.error().message;
  }
  // A component longer than NAME_MAX: the kernel's ENAMETOOLONG.
  auto r = ReadVia(std::string(300, 'y'));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument) << r.error().message;
}

TEST_P(ResolverTest, SymlinksOutAreDenied) {
  SymlinkRaw(outside_ + "/secret.txt", root_dir_ + "/abs_file");
  SymlinkRaw("../outside/secret.txt", root_dir_ + "/rel_file");
  SymlinkRaw(outside_, root_dir_ + "/abs_dir");
  SymlinkRaw("../../../outside", root_dir_ + "/sub/dir/rel_dir");
  SymlinkRaw("/proc/self/root" + outside_ + "/secret.txt", root_dir_ + "/magic");
  SymlinkRaw("sub/dir/rel_dir/secret.txt", root_dir_ + "/chain");
  for (const char* bad : {"abs_file", "rel_file", "abs_dir/secret.txt",
                          "sub/dir/rel_dir/secret.txt", "magic", "chain"}) {
    auto r = ReadVia(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().code, ErrorCode::kPermissionDenied) << bad << ": " << r.error().message;
    EXPECT_NE(r.error().message.find("escapes the root"), std::string::npos) << r.error().message;
  }
}

TEST_P(ResolverTest, SymlinksInsideAreFollowed) {
  SymlinkRaw("sub/dir", root_dir_ + "/rel_dir");
  SymlinkRaw("../../file.txt", root_dir_ + "/sub/dir/up");
  SymlinkRaw(root_dir_ + "/sub/dir/deep.txt", root_dir_ + "/abs_inside");
  SymlinkRaw("rel_dir/up", root_dir_ + "/chain");
  EXPECT_EQ(*ReadVia("rel_dir/deep.txt"), "deep");
  EXPECT_EQ(*ReadVia("sub/dir/up"), "inside");
  EXPECT_EQ(*ReadVia("abs_inside"), "deep");
  EXPECT_EQ(*ReadVia("chain"), "inside");
  EXPECT_EQ(*root_->Canonicalize("chain"), "file.txt");
  EXPECT_EQ(*root_->Canonicalize("rel_dir/new"), "sub/dir/new");
}

TEST_P(ResolverTest, NoSymlinksMode) {
  SymlinkRaw("sub/dir", root_dir_ + "/rel_dir");
  auto r = root_->OpenNoSymlinks("rel_dir/deep.txt", O_RDONLY);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument) << r.error().message;
  EXPECT_TRUE(root_->OpenNoSymlinks("sub/dir/deep.txt", O_RDONLY));
}

TEST_P(ResolverTest, SymlinkLoopIsInvalid) {
  SymlinkRaw("b", root_dir_ + "/a");
  SymlinkRaw("a", root_dir_ + "/b");
  auto r = ReadVia("a");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument) << r.error().message;
}

TEST_P(ResolverTest, OpenParentDoesNotFollowFinal) {
  SymlinkRaw(outside_ + "/secret.txt", root_dir_ + "/abs_file");
  auto loc = root_->OpenParent("abs_file");
  ASSERT_TRUE(loc) << loc.error().ToString();
  EXPECT_EQ(loc->name, "abs_file");
  struct stat st;
  ASSERT_EQ(::fstatat(loc->dir.get(), loc->name.c_str(), &st, AT_SYMLINK_NOFOLLOW), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  // Following it is an escape.
  auto follow = root_->OpenParentFollow("abs_file");
  ASSERT_FALSE(follow);
  EXPECT_EQ(follow.error().code, ErrorCode::kPermissionDenied);
  // A dangling symlink inside is followed to where it points.
  SymlinkRaw("sub/new.txt", root_dir_ + "/dangling");
  auto in = root_->OpenParentFollow("dangling");
  ASSERT_TRUE(in) << in.error().ToString();
  EXPECT_EQ(in->name, "new.txt");
  auto root_loc = root_->OpenParent("");
  ASSERT_FALSE(root_loc);
  EXPECT_EQ(root_loc.error().code, ErrorCode::kPermissionDenied);
}

TEST_P(ResolverTest, MakeDirsStaysInside) {
  ASSERT_TRUE(root_->MakeDirs("a/b/c"));
  EXPECT_TRUE(Exists(root_dir_ + "/a/b/c"));
  ASSERT_TRUE(root_->MakeDirs("a/b/c"));  // idempotent
  SymlinkRaw(outside_, root_dir_ + "/out");
  auto r = root_->MakeDirs("out/x/y");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kPermissionDenied);
  EXPECT_FALSE(Exists(outside_ + "/x"));
  // Creating through O_CREAT is confined the same way.
  auto c = root_->Open("out/created.txt", O_WRONLY | O_CREAT, 0644);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, ErrorCode::kPermissionDenied);
  EXPECT_FALSE(Exists(outside_ + "/created.txt"));
}

TEST_P(ResolverTest, MakeDirsNoSymlinksFollowsNoneAndReportsWhatItMade) {
  std::vector<std::string> made;
  auto record = [&made](const std::string& rel) { made.push_back(rel); };
  auto dir = root_->MakeDirsNoSymlinks("sub/new/deeper", 0700, record);
  ASSERT_TRUE(dir) << dir.error().ToString();
  EXPECT_EQ(made, (std::vector<std::string>{"sub/new", "sub/new/deeper"}));
  struct stat via_fd, via_path;
  ASSERT_EQ(::fstat(dir->get(), &via_fd), 0);
  ASSERT_EQ(::stat((root_dir_ + "/sub/new/deeper").c_str(), &via_path), 0);
  EXPECT_EQ(via_fd.st_ino, via_path.st_ino);
  EXPECT_EQ(via_path.st_mode & 0777, 0700u);
  made.clear();
  ASSERT_TRUE(root_->MakeDirsNoSymlinks("sub/new/deeper", 0700, record));  // idempotent
  ASSERT_TRUE(root_->MakeDirsNoSymlinks("", 0700, record));                // the root itself
  EXPECT_TRUE(made.empty());

  // Symlinks in the way, inside the root or not, and files: never followed,
  // nothing created, the entry at fault named.
  SymlinkRaw("sub/dir", root_dir_ + "/inlink");
  SymlinkRaw(outside_, root_dir_ + "/out");
  WriteRaw(root_dir_ + "/sub/new/file.txt", "");
  const std::vector<std::pair<std::string, std::string>> in_the_way = {
      {"inlink/x", "inlink"}, {"inlink", "inlink"},       {"out/x/y", "out"},
      {"out", "out"},         {"file.txt/x", "file.txt"}, {"sub/new/file.txt", "sub/new/file.txt"},
  };
  for (const auto& [rel, culprit] : in_the_way) {
    SCOPED_TRACE(rel);
    auto r = root_->MakeDirsNoSymlinks(rel, 0700, record);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, ErrorCode::kConflict);
    EXPECT_EQ(r.error().message,
              Cat(root_dir_, "/", culprit,
                  " is not a directory (a symlink or file is in the way; nothing is written "
                  "through it)"));
  }
  EXPECT_TRUE(made.empty());
  EXPECT_FALSE(Exists(root_dir_ + "/sub/dir/x"));
  EXPECT_FALSE(Exists(outside_ + "/x"));
}

TEST_P(ResolverTest, AnAdoptedRootIsNamedAsGivenAndHoldsNoAbsolutePath) {
  UniqueFd fd(::open(root_dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  ASSERT_TRUE(fd);
  auto adopted = Root::Adopt(std::move(fd), "dest/", RootOptions{.force_fallback = GetParam()});
  ASSERT_TRUE(adopted) << adopted.error().ToString();
  EXPECT_EQ(adopted->ToAbsolute(""), "dest/");
  EXPECT_EQ(adopted->ToAbsolute("a/b"), "dest/a/b");
  auto file = adopted->Open("file.txt", O_RDONLY);
  ASSERT_TRUE(file) << file.error().ToString();
  EXPECT_EQ(ReadFd(file->get()), "inside");

  // Its real path is no spelling of it: absolute paths and absolute symlinks
  // are outside, even those that lead inside.
  EXPECT_FALSE(adopted->ToRelative(root_dir_ + "/file.txt"));
  EXPECT_FALSE(adopted->ToRelative("/"));
  SymlinkRaw(root_dir_ + "/file.txt", root_dir_ + "/abs_in");
  ASSERT_TRUE(root_->Open("abs_in", O_RDONLY));
  auto abs_in = adopted->Open("abs_in", O_RDONLY);
  ASSERT_FALSE(abs_in);
  EXPECT_EQ(abs_in.error().code, ErrorCode::kPermissionDenied);
  auto sub = adopted->Sub("sub");
  ASSERT_TRUE(sub) << sub.error().ToString();
  EXPECT_EQ(sub->path(), "dest/sub");
  EXPECT_FALSE(sub->ToRelative(root_dir_ + "/sub/dir"));

  SymlinkRaw("sub", root_dir_ + "/rel_link");
  auto r = adopted->MakeDirsNoSymlinks("rel_link/z", 0700);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message.rfind("dest/rel_link is not a directory", 0), 0u)
      << r.error().message;

  UniqueFd not_dir(::open((root_dir_ + "/file.txt").c_str(), O_RDONLY | O_CLOEXEC));
  auto bad = Root::Adopt(std::move(not_dir), "file.txt");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::kNotDirectory);
}

TEST_P(ResolverTest, SubRootNarrowsConfinement) {
  SymlinkRaw("../../file.txt", root_dir_ + "/sub/dir/up");
  auto sub = root_->Sub("sub");
  ASSERT_TRUE(sub) << sub.error().ToString();
  EXPECT_EQ(sub->path(), root_dir_ + "/sub");
  auto fd = sub->Open("dir/deep.txt", O_RDONLY);
  ASSERT_TRUE(fd);
  EXPECT_EQ(ReadFd(fd->get()), "deep");
  auto up = sub->Open("dir/up", O_RDONLY);  // inside the root, outside "sub"
  ASSERT_FALSE(up);
  EXPECT_EQ(up.error().code, ErrorCode::kPermissionDenied);
  EXPECT_EQ(*sub->ToRelative(root_dir_ + "/sub/dir"), "dir");
  EXPECT_FALSE(sub->ToRelative(root_dir_ + "/file.txt"));
}

// A thread flips a symlink between a directory inside and one outside the
// root while requests go through it: each request must see the inside or be
// refused; nothing outside is ever read or created.
TEST_P(ResolverTest, SymlinkSwappedDuringRequests) {
  MakeDirRaw(root_dir_ + "/safe");
  WriteRaw(root_dir_ + "/safe/secret.txt", "inside");
  SymlinkRaw("safe", root_dir_ + "/flip");
  std::atomic<bool> stop{false};
  std::thread flipper([&] {
    const std::string tmp_link = root_dir_ + "/flip.tmp";
    const std::string targets[] = {"safe", outside_, "../outside", "safe/../../outside"};
    for (size_t i = 0; !stop.load(); ++i) {
      ::unlink(tmp_link.c_str());
      if (::symlink(targets[i % 4].c_str(), tmp_link.c_str()) != 0) continue;
      ::rename(tmp_link.c_str(), (root_dir_ + "/flip").c_str());
    }
  });
  int ok = 0;
  int denied = 0;
  for (int i = 0; i < 3000; ++i) {
    auto r = ReadVia("flip/secret.txt");
    if (r) {
      ASSERT_EQ(*r, "inside");
      ++ok;
    } else {
      ASSERT_EQ(r.error().code, ErrorCode::kPermissionDenied) << r.error().message;
      ++denied;
    }
    auto created = root_->Open(testing::Cat("flip/new-", std::to_string(i)),
                               O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (!created) {
      ASSERT_EQ(created.error().code, ErrorCode::kPermissionDenied) << created.error().message;
    }
  }
  stop = true;
  flipper.join();
  EXPECT_EQ(ok + denied, 3000);
  EXPECT_EQ(ReadRaw(outside_ + "/secret.txt"), "outside");
  // Nothing was created outside the root.
  int outside_entries = 0;
  for (auto& e : std::filesystem::directory_iterator(outside_)) {
    (void)e;
    ++outside_entries;
  }
  EXPECT_EQ(outside_entries, 1);
}

INSTANTIATE_TEST_SUITE_P(Modes, ResolverTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? std::string("Fallback") : std::string("Openat2");
                         });

TEST(RootTest, OpenRequiresDirectory) {
  TempDir tmp;
  WriteRaw(tmp.Path("f"), "x");
  auto r = Root::Open(tmp.Path("f"));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kNotDirectory);
  auto missing = Root::Open(tmp.Path("missing"));
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
}

TEST(RootTest, RootGivenThroughSymlinkAcceptsBothSpellings) {
  TempDir tmp;
  MakeDirRaw(tmp.Path("real"));
  WriteRaw(tmp.Path("real/a"), "a");
  SymlinkRaw(tmp.Path("real"), tmp.Path("alias"));
  auto root = Root::Open(tmp.Path("alias"));
  ASSERT_TRUE(root);
  EXPECT_EQ(root->path(), tmp.Path("real"));
  EXPECT_EQ(*root->ToRelative(tmp.Path("alias/a")), "a");
  EXPECT_EQ(*root->ToRelative(tmp.Path("real/a")), "a");
}

// A root wider than the workspace (a daemon serving its whole sandbox): relative
// paths resolve against the base, absolute ones anywhere beneath the root.
class WideRootTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    MakeDirRaw(tmp_.Path("ws/sub"));
    WriteRaw(tmp_.Path("ws/a.txt"), "in the workspace");
    WriteRaw(tmp_.Path("etc/conf"), "outside the workspace");
    SymlinkRaw(tmp_.Path("etc/conf"), tmp_.Path("ws/abs_link"));  // absolute, inside the root
    RootOptions options{.force_fallback = GetParam()};
    options.relative_base = tmp_.Path("ws");
    auto root = Root::Open(tmp_.path().string(), options);
    ASSERT_TRUE(root) << root.error().ToString();
    root_.emplace(std::move(*root));
  }
  Result<std::string> ReadVia(std::string_view api_path) {
    auto rel = root_->ToRelative(api_path);
    if (!rel) return tl::unexpected(rel.error());
    auto fd = root_->Open(*rel, O_RDONLY);
    if (!fd) return tl::unexpected(fd.error());
    return ReadFd(fd->get());
  }
  TempDir tmp_;
  std::optional<Root> root_;
};

TEST_P(WideRootTest, RelativePathsResolveAgainstTheBase) {
  EXPECT_EQ(root_->relative_base(), tmp_.Path("ws"));
  EXPECT_EQ(*root_->ToRelative("a.txt"), "ws/a.txt");
  EXPECT_EQ(*root_->ToRelative("."), "ws");
  EXPECT_EQ(*root_->ToRelative("sub/../a.txt"), "ws/a.txt");
  EXPECT_EQ(*root_->ToRelative("../etc/conf"), "etc/conf");  // out of the base, not the root
  EXPECT_EQ(*ReadVia("a.txt"), "in the workspace");
  EXPECT_EQ(*ReadVia(tmp_.Path("etc/conf")), "outside the workspace");
  EXPECT_EQ(*ReadVia("abs_link"), "outside the workspace");
  for (const char* bad : {"../../x", "../../../etc/passwd"}) {
    auto r = root_->ToRelative(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().code, ErrorCode::kPermissionDenied) << bad;
  }
  // A sub root's relative paths are its own.
  auto sub = root_->Sub("ws/sub");
  ASSERT_TRUE(sub) << sub.error().ToString();
  EXPECT_EQ(sub->relative_base(), "");
  EXPECT_EQ(*sub->ToRelative("x"), "x");
}

INSTANTIATE_TEST_SUITE_P(Modes, WideRootTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? std::string("Fallback") : std::string("Openat2");
                         });

TEST(RootTest, RelativeBaseMustBeADirectoryInsideTheRoot) {
  TempDir tmp;
  MakeDirRaw(tmp.Path("root/ws"));
  WriteRaw(tmp.Path("root/file"), "x");
  auto open = [&](std::string base) {
    RootOptions options;
    options.relative_base = std::move(base);
    return Root::Open(tmp.Path("root"), options);
  };
  EXPECT_TRUE(open(tmp.Path("root/ws")));
  EXPECT_EQ(open(tmp.path().string()).error().code, ErrorCode::kPermissionDenied);
  EXPECT_EQ(open("ws").error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(open(tmp.Path("root/missing")).error().code, ErrorCode::kNotFound);
  EXPECT_EQ(open(tmp.Path("root/file")).error().code, ErrorCode::kNotDirectory);
}

// The whole filesystem as a root: kernel pseudo filesystems are refused,
// however they are reached; files elsewhere are served.
TEST(RootTest, PseudoFilesystemsAreRefused) {
  if (access("/proc/self/status", R_OK) != 0) GTEST_SKIP() << "no /proc";
  TempDir tmp;
  WriteRaw(tmp.Path("ws/f"), "plain");
  SymlinkRaw("/proc/self/environ", tmp.Path("ws/env_link"));
  SymlinkRaw("/proc", tmp.Path("ws/proc_link"));
  for (bool fallback : {false, true}) {
    RootOptions options{.force_fallback = fallback};
    options.relative_base = tmp.Path("ws");
    options.refuse_pseudo_fs = true;
    auto root = Root::Open("/", options);
    ASSERT_TRUE(root) << root.error().ToString();
    auto f = root->Open(*root->ToRelative("f"), O_RDONLY);
    ASSERT_TRUE(f) << f.error().ToString();
    EXPECT_EQ(ReadFd(f->get()), "plain");
    for (const char* bad : {"/proc/self/environ", "/proc/self/mem", "/proc/1/status", "/proc",
                            "env_link", "proc_link/self/status", "/sys/kernel"}) {
      auto rel = root->ToRelative(bad);
      ASSERT_TRUE(rel) << bad;
      auto fd = root->Open(*rel, O_RDONLY);
      if (std::string_view(bad).starts_with("/sys") && !fd &&
          fd.error().code == ErrorCode::kNotFound) {
        continue;  // no sysfs here
      }
      ASSERT_FALSE(fd) << bad << " was served (fallback=" << fallback << ")";
      EXPECT_EQ(fd.error().code, ErrorCode::kPermissionDenied) << bad << ": " << fd.error().message;
    }
    // Entries named through a parent directory on procfs (lstat, unlink, ...).
    for (const char* bad : {"/proc/self/environ", "proc_link/self/status", "env_link"}) {
      auto rel = root->ToRelative(bad);
      ASSERT_TRUE(rel) << bad;
      if (std::string_view(bad) != "env_link") {
        EXPECT_FALSE(root->OpenParent(*rel)) << bad;
      }
      auto follow = root->OpenParentFollow(*rel);
      ASSERT_FALSE(follow) << bad;
      EXPECT_EQ(follow.error().code, ErrorCode::kPermissionDenied) << bad;
    }
    // Tree walks open directories beneath one they hold: refused as well.
    auto slash = root->Open("", O_RDONLY | O_DIRECTORY);
    ASSERT_TRUE(slash);
    auto proc = root->OpenBeneathNoSymlinks(slash->get(), "proc", O_RDONLY | O_DIRECTORY);
    ASSERT_FALSE(proc);
    EXPECT_EQ(proc.error().code, ErrorCode::kPermissionDenied);
    // Grep's opens remember each device's verdict: a served file first, then
    // procfs (a new device: asked and refused), then both again from the cache.
    Root::FsVerdicts verdicts;
    auto ws_rel = root->ToRelative(tmp.Path("ws"));
    ASSERT_TRUE(ws_rel);
    for (int round = 0; round < 2; ++round) {
      struct stat st;
      auto served =
          root->OpenBeneathNoSymlinksStat(slash->get(), *ws_rel + "/f", O_RDONLY, &st, &verdicts);
      ASSERT_TRUE(served) << served.error().ToString();
      EXPECT_EQ(ReadFd(served->get()), "plain");
      EXPECT_EQ(st.st_size, 5);
      for (const char* bad : {"proc/version", "proc/1/status"}) {
        auto refused = root->OpenBeneathNoSymlinksStat(slash->get(), bad, O_RDONLY, &st, &verdicts);
        ASSERT_FALSE(refused) << bad << " was served (round " << round << ")";
        EXPECT_EQ(refused.error().code, ErrorCode::kPermissionDenied) << bad;
      }
    }
  }
  // Without the option, the same root serves them (what the option changes).
  auto open = Root::Open("/");
  ASSERT_TRUE(open);
  EXPECT_TRUE(open->Open("proc/self/status", O_RDONLY));
}

}  // namespace
}  // namespace deepbox::fs
