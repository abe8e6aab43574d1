#include "fs/tar.h"

#include <archive.h>
#include <archive_entry.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "fs/testing/root_fixture.h"
#include "fs/testing/test_util.h"

namespace deepbox::fs {
namespace {

using testing::Exists;
using testing::MakeDirRaw;
using testing::ReadRaw;
using testing::SymlinkRaw;
using testing::TempDir;
using testing::WriteRaw;

// One member of an archive built or read by the tests.
struct Member {
  std::string name;
  char type = 'f';   // f: file, d: directory, l: symlink, h: hard link, c: char device
  std::string data;  // file content, or the link target
  mode_t mode = 0644;
};

// Builds a tar with libarchive directly, so that the tests can craft what
// deepbox itself would never write.
std::string BuildTar(const std::vector<Member>& members) {
  std::string out;
  struct archive* a = archive_write_new();
  archive_write_set_format_pax_restricted(a);
  archive_write_open2(
      a, &out, nullptr,
      [](struct archive*, void* client, const void* buf, size_t n) -> la_ssize_t {
        static_cast<std::string*>(client)->append(static_cast<const char*>(buf), n);
        return static_cast<la_ssize_t>(n);
      },
      nullptr, nullptr);
  for (const auto& m : members) {
    struct archive_entry* e = archive_entry_new();
    archive_entry_set_pathname(e, m.name.c_str());
    archive_entry_set_perm(e, m.mode);
    switch (m.type) {
      case 'f':
        archive_entry_set_filetype(e, AE_IFREG);
        archive_entry_set_size(e, static_cast<la_int64_t>(m.data.size()));
        break;
      case 'd':
        archive_entry_set_filetype(e, AE_IFDIR);
        break;
      case 'l':
        archive_entry_set_filetype(e, AE_IFLNK);
        archive_entry_set_symlink(e, m.data.c_str());
        break;
      case 'h':
        archive_entry_set_filetype(e, AE_IFREG);
        archive_entry_set_hardlink(e, m.data.c_str());
        break;
      case 'c':
        archive_entry_set_filetype(e, AE_IFCHR);
        archive_entry_set_rdevmajor(e, 1);
        archive_entry_set_rdevminor(e, 3);
        break;
    }
    archive_entry_set_mtime(e, 1700000000, 0);
    archive_write_header(a, e);
    if (m.type == 'f') archive_write_data(a, m.data.data(), m.data.size());
    archive_entry_free(e);
  }
  archive_write_close(a);
  archive_write_free(a);
  return out;
}

std::map<std::string, Member> ReadTar(const std::string& tar) {
  std::map<std::string, Member> out;
  struct archive* a = archive_read_new();
  archive_read_support_format_tar(a);
  EXPECT_EQ(archive_read_open_memory(a, tar.data(), tar.size()), ARCHIVE_OK);
  struct archive_entry* e;
  while (archive_read_next_header(a, &e) == ARCHIVE_OK) {
    Member m;
    m.name = archive_entry_pathname(e);
    if (m.name.size() > 1 && m.name.back() == '/') m.name.pop_back();  // pax dirs end in '/'
    m.mode = archive_entry_perm(e);
    switch (archive_entry_filetype(e)) {
      case AE_IFDIR:
        m.type = 'd';
        break;
      case AE_IFLNK:
        m.type = 'l';
        m.data = archive_entry_symlink(e);
        break;
      default: {
        m.type = 'f';
        char buf[8192];
        la_ssize_t n;
        while ((n = archive_read_data(a, buf, sizeof(buf))) > 0) {
          m.data.append(buf, static_cast<size_t>(n));
        }
      }
    }
    out[m.name] = m;
  }
  archive_read_free(a);
  return out;
}

TarSource FromString(const std::string& data, size_t chunk = 1000) {
  auto pos = std::make_shared<size_t>(0);
  return [&data, pos, chunk](char* buf, size_t size) -> Result<size_t> {
    size_t n = std::min({size, chunk, data.size() - *pos});
    std::memcpy(buf, data.data() + *pos, n);
    *pos += n;
    return n;
  };
}

// Every case on both resolvers (openat2 and the portable fallback).
class TarTest : public deepbox::fs::testing::RootOnBothResolvers {
 protected:
  Result<std::vector<std::string>> Extract(const std::vector<Member>& members,
                                           const std::string& dest = "out") {
    tar_ = BuildTar(members);
    return ExtractTar(*root_, dest, FromString(tar_));
  }

  int OutsideEntries() {
    int n = 0;
    for (auto& e : std::filesystem::recursive_directory_iterator(outside_)) {
      (void)e;
      ++n;
    }
    return n;
  }

  std::string tar_;
};

TEST_P(TarTest, WriteStreamsTreeWithSymlinksAsSymlinks) {
  std::string big(3 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7);
  WriteRaw(dir_ + "/src/main.c", "int main() {}\n");
  WriteRaw(dir_ + "/src/big.bin", big);
  WriteRaw(dir_ + "/src/empty", "");
  WriteRaw(dir_ + "/src/.hidden/h", "h");
  ::chmod((dir_ + "/src/main.c").c_str(), 0755);
  SymlinkRaw("main.c", dir_ + "/src/link");
  SymlinkRaw(outside_ + "/secret.txt", dir_ + "/src/escape");  // stored, never followed
  SymlinkRaw(outside_, dir_ + "/src/escape_dir");
  ::mkfifo((dir_ + "/src/fifo").c_str(), 0644);  // left out
  WriteRaw(dir_ + "/top.txt", "top");

  std::string tar;
  size_t chunks = 0;
  size_t largest = 0;
  auto stats = WriteTar(*root_, {"src", dir_ + "/top.txt"}, [&](std::string_view d) -> Status {
    tar.append(d);
    ++chunks;
    largest = std::max(largest, d.size());
    return {};
  });
  ASSERT_TRUE(stats) << stats.error().ToString();
  EXPECT_EQ(stats->bytes, tar.size());
  EXPECT_GT(chunks, 10u);  // streamed, not buffered whole
  EXPECT_LT(largest, 1u << 20);
  auto members = ReadTar(tar);
  EXPECT_EQ(stats->entries, members.size());
  ASSERT_TRUE(members.count("src/main.c"));
  EXPECT_EQ(members["src/main.c"].data, "int main() {}\n");
  EXPECT_EQ(members["src/main.c"].mode, 0755u);
  EXPECT_EQ(members["src/big.bin"].data, big);
  EXPECT_EQ(members["src/empty"].data, "");
  EXPECT_EQ(members["src/.hidden/h"].data, "h");
  EXPECT_EQ(members["src/link"].type, 'l');
  EXPECT_EQ(members["src/link"].data, "main.c");
  EXPECT_EQ(members["src/escape"].type, 'l');
  EXPECT_EQ(members["src/escape_dir"].type, 'l');
  EXPECT_EQ(members.count("src/escape_dir/secret.txt"), 0u);
  EXPECT_EQ(members.count("src/fifo"), 0u);
  EXPECT_EQ(members["top.txt"].data, "top");
  EXPECT_EQ(members["src"].type, 'd');

  // The whole root: its children, named from the root.
  std::string all;
  ASSERT_TRUE(WriteTar(*root_, {dir_}, [&](std::string_view d) -> Status {
    all.append(d);
    return {};
  }));
  auto root_members = ReadTar(all);
  EXPECT_TRUE(root_members.count("top.txt"));
  EXPECT_TRUE(root_members.count("src/main.c"));
}

// A root wider than the workspace (the whole sandbox): members are named
// from the workspace when beneath it, else from the root, so `deepbox sandbox
// cp` keeps its names.
TEST_P(TarTest, WriteNamesMembersFromTheRelativeBase) {
  WriteRaw(tmp_.Path("root/src/main.c"), "int main() {}\n");
  WriteRaw(tmp_.Path("root/top.txt"), "top");
  WriteRaw(tmp_.Path("etc/conf"), "conf");
  RootOptions options;
  options.relative_base = dir_;
  auto wide = Root::Open(tmp_.path().string(), options);
  ASSERT_TRUE(wide) << wide.error().ToString();
  auto archive = [&](std::vector<std::string> paths) {
    std::string tar;
    auto st = WriteTar(*wide, paths, [&](std::string_view d) -> Status {
      tar.append(d);
      return {};
    });
    EXPECT_TRUE(st) << st.error().ToString();
    return ReadTar(tar);
  };
  auto members = archive({"src", dir_ + "/top.txt", tmp_.Path("etc/conf")});
  EXPECT_EQ(members["src/main.c"].data, "int main() {}\n");
  EXPECT_EQ(members["top.txt"].data, "top");
  EXPECT_EQ(members["etc/conf"].data, "conf");
  // The workspace itself: its children, named from it.
  members = archive({dir_});
  EXPECT_TRUE(members.count("top.txt"));
  EXPECT_TRUE(members.count("src/main.c"));
  EXPECT_EQ(members.count("root/top.txt"), 0u);
}

TEST_P(TarTest, WriteErrors) {
  WriteRaw(dir_ + "/f", std::string(1 << 20, 'x'));
  auto missing = WriteTar(*root_, {"nope"}, [](std::string_view) -> Status { return {}; });
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  auto outside = WriteTar(*root_, {outside_}, [](std::string_view) -> Status { return {}; });
  ASSERT_FALSE(outside);
  EXPECT_EQ(outside.error().code, ErrorCode::kPermissionDenied);
  // A failing sink stops the archive with its own error.
  size_t seen = 0;
  auto failed = WriteTar(*root_, {"f"}, [&](std::string_view d) -> Status {
    seen += d.size();
    if (seen > 100000) return MakeError(ErrorCode::kUnavailable, "client went away");
    return {};
  });
  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.error().code, ErrorCode::kUnavailable);
  EXPECT_LT(seen, 200000u);
}

TEST_P(TarTest, RoundTrip) {
  WriteRaw(dir_ + "/proj/a/b.txt", "b");
  WriteRaw(dir_ + "/proj/run.sh", "#!/bin/sh\n");
  ::chmod((dir_ + "/proj/run.sh").c_str(), 0750);
  SymlinkRaw("a/b.txt", dir_ + "/proj/l");
  std::string tar;
  ASSERT_TRUE(WriteTar(*root_, {"proj"}, [&](std::string_view d) -> Status {
    tar.append(d);
    return {};
  }));
  auto written = ExtractTar(*root_, "copy", FromString(tar, 7777));
  ASSERT_TRUE(written) << written.error().ToString();
  EXPECT_EQ(ReadRaw(dir_ + "/copy/proj/a/b.txt"), "b");
  EXPECT_EQ(ReadRaw(dir_ + "/copy/proj/l"), "b");
  struct stat st;
  ASSERT_EQ(::stat((dir_ + "/copy/proj/run.sh").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0750u);
  ASSERT_EQ(::lstat((dir_ + "/copy/proj/l").c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  EXPECT_NE(std::find(written->begin(), written->end(), dir_ + "/copy/proj/a/b.txt"),
            written->end());
  EXPECT_EQ(written->size(), 5u);  // proj, proj/a, proj/a/b.txt, proj/l, proj/run.sh
}

TEST_P(TarTest, ExtractWritesFilesDirsLinks) {
  auto w = Extract({{"./d", 'd', "", 0755},
                    {"d/f.txt", 'f', "hello", 04755},  // setuid is dropped
                    {"d/sub/g.txt", 'f', "g", 0600},   // parent created implicitly
                    {"d/l", 'l', "f.txt", 0777},
                    {"d/up", 'l', "../d/sub/g.txt", 0777},
                    {"d/h", 'h', "d/f.txt", 0644}});
  ASSERT_TRUE(w) << w.error().ToString();
  EXPECT_EQ(*w, (std::vector<std::string>{dir_ + "/out/d", dir_ + "/out/d/f.txt",
                                          dir_ + "/out/d/sub/g.txt", dir_ + "/out/d/l",
                                          dir_ + "/out/d/up", dir_ + "/out/d/h"}));
  EXPECT_EQ(ReadRaw(dir_ + "/out/d/f.txt"), "hello");
  struct stat st;
  ASSERT_EQ(::stat((dir_ + "/out/d/f.txt").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  EXPECT_EQ(st.st_mtim.tv_sec, 1700000000);
  EXPECT_EQ(ReadRaw(dir_ + "/out/d/up"), "g");
  struct stat hl;
  ASSERT_EQ(::stat((dir_ + "/out/d/h").c_str(), &hl), 0);
  EXPECT_EQ(hl.st_ino, st.st_ino);
  // Overwrite by default; refused when asked.
  ASSERT_TRUE(Extract({{"d/f.txt", 'f', "again", 0644}}));
  EXPECT_EQ(ReadRaw(dir_ + "/out/d/f.txt"), "again");
  tar_ = BuildTar({{"d/f.txt", 'f', "third", 0644}});
  ExtractOptions no;
  no.overwrite = false;
  auto c = ExtractTar(*root_, "out", FromString(tar_), no);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, ErrorCode::kConflict);
  EXPECT_EQ(ReadRaw(dir_ + "/out/d/f.txt"), "again");
}

TEST_P(TarTest, ExtractRefusesEscapes) {
  struct Case {
    std::vector<Member> members;
    const char* what;
  };
  const std::vector<Case> cases = {
      {{{"/abs.txt", 'f', "x"}}, "absolute name"},
      {{{"../escape.txt", 'f', "x"}}, "dot-dot"},
      {{{"a/../../escape.txt", 'f', "x"}}, "inner dot-dot"},
      {{{"lnk", 'l', outside_}}, "absolute symlink"},
      {{{"lnk", 'l', "../../outside"}}, "relative symlink out"},
      {{{"d/lnk", 'l', "../../outside"}}, "nested symlink out"},
      {{{"self", 'l', "."}, {"self/lnk", 'l', "../outside"}}, "symlink out via a symlinked dir"},
      {{{"h", 'h', "../outside/secret.txt"}}, "hard link out"},
      {{{"dev", 'c', ""}}, "device node"},
  };
  for (const auto& c : cases) {
    auto r = Extract(c.members);
    ASSERT_FALSE(r) << c.what;
    EXPECT_EQ(r.error().code, ErrorCode::kPermissionDenied) << c.what << ": " << r.error().message;
  }
  EXPECT_EQ(OutsideEntries(), 1);
  EXPECT_FALSE(Exists(tmp_.Path("escape.txt")));
  EXPECT_FALSE(Exists(dir_ + "/out/dev"));

  // A symlink planted in the destination beforehand does not lead out either.
  SymlinkRaw(outside_, dir_ + "/out/planted");
  auto r = Extract({{"planted/new.txt", 'f', "pwned"}});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kPermissionDenied);
  // Nor does one inside the root but outside the destination.
  SymlinkRaw("..", dir_ + "/out/up");
  r = Extract({{"up/new.txt", 'f', "pwned"}});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kPermissionDenied);
  EXPECT_FALSE(Exists(dir_ + "/new.txt"));
  EXPECT_EQ(OutsideEntries(), 1);
  EXPECT_EQ(ReadRaw(outside_ + "/secret.txt"), "outside");
  // A destination outside the root.
  tar_ = BuildTar({{"f", 'f', "x"}});
  auto out = ExtractTar(*root_, outside_, FromString(tar_));
  ASSERT_FALSE(out);
  EXPECT_EQ(out.error().code, ErrorCode::kPermissionDenied);
}

TEST_P(TarTest, ExtractReportsSourceAndFormatErrors) {
  auto failing = ExtractTar(*root_, "x", [](char*, size_t) -> Result<size_t> {
    return MakeError(ErrorCode::kTimeout, "upload stalled");
  });
  ASSERT_FALSE(failing);
  EXPECT_EQ(failing.error().code, ErrorCode::kTimeout);
  std::string garbage(4096, 'g');
  auto bad = ExtractTar(*root_, "x", FromString(garbage));
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
  // Truncated in the middle of a file.
  std::string tar = BuildTar({{"f", 'f', std::string(100000, 'z')}});
  std::string cut = tar.substr(0, 50000);
  auto trunc = ExtractTar(*root_, "x", FromString(cut));
  ASSERT_FALSE(trunc);
  EXPECT_FALSE(Exists(dir_ + "/x/f"));  // the partial file was never renamed in
  int entries = 0;
  for (auto& e : std::filesystem::directory_iterator(dir_ + "/x")) {
    (void)e;
    ++entries;
  }
  EXPECT_EQ(entries, 0);  // nor left as a temporary
}

INSTANTIATE_TEST_SUITE_P(Modes, TarTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Fallback" : "Openat2"; });

}  // namespace
}  // namespace deepbox::fs
