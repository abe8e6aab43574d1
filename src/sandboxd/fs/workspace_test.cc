#include "sandboxd/fs/workspace.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "fs/testing/root_fixture.h"
#include "fs/testing/test_util.h"

namespace deepbox::sandboxd::fs {
namespace {

using deepbox::fs::WriteOptions;
using deepbox::fs::testing::Cat;
using deepbox::fs::testing::Exists;
using deepbox::fs::testing::MakeDirRaw;
using deepbox::fs::testing::ReadRaw;
using deepbox::fs::testing::SymlinkRaw;
using deepbox::fs::testing::WriteRaw;

mode_t ModeOf(const std::string& path) {
  struct stat st;
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

ReadOptions Bytes(std::optional<uint64_t> offset, std::optional<uint64_t> length,
                  uint64_t max_bytes = 4 << 20) {
  ReadOptions o;
  o.offset = offset;
  o.length = length;
  o.max_bytes = max_bytes;
  return o;
}

ReadOptions Lines(std::optional<uint64_t> offset, std::optional<uint64_t> limit,
                  uint64_t max_bytes = 4 << 20) {
  ReadOptions o;
  o.line_offset = offset;
  o.line_limit = limit;
  o.max_bytes = max_bytes;
  return o;
}

WriteOptions WriteOpts(void (*edit)(WriteOptions&)) {
  WriteOptions o;
  edit(o);
  return o;
}

int CountEntries(const std::string& dir) {
  int n = 0;
  for (auto& e : std::filesystem::directory_iterator(dir)) {
    (void)e;
    ++n;
  }
  return n;
}

class WorkspaceTest : public deepbox::fs::testing::RootOnBothResolvers {
 protected:
  // d/ with a.txt, b.txt ("bb"), directory c and symlink z -> a.txt; dl -> d.
  void MakeListingDir() {
    WriteRaw(P("d/b.txt"), "bb");
    WriteRaw(P("d/a.txt"), "a");
    MakeDirRaw(P("d/c"));
    SymlinkRaw("a.txt", P("d/z"));
    SymlinkRaw("d", P("dl"));
  }
};

TEST_P(WorkspaceTest, StatReportsTypesAndTimes) {
  WriteRaw(P("a.txt"), "hello");
  ::chmod(P("a.txt").c_str(), 0640);
  MakeDirRaw(P("d"));
  SymlinkRaw("a.txt", P("link"));
  auto f = Stat(*root_, "a.txt");
  ASSERT_TRUE(f) << f.error().ToString();
  EXPECT_EQ(f->path, P("a.txt"));
  EXPECT_EQ(f->name, "a.txt");
  EXPECT_EQ(f->type, FileType::kFile);
  EXPECT_EQ(f->size, 5u);
  EXPECT_EQ(f->mode, 0640u);
  ASSERT_EQ(f->mtime.size(), 20u) << f->mtime;  // 2024-05-01T12:34:56Z
  for (size_t i = 0; i < f->mtime.size(); ++i) {
    char want = std::string_view("0000-00-00T00:00:00Z")[i];
    if (want == '0') {
      EXPECT_TRUE(f->mtime[i] >= '0' && f->mtime[i] <= '9') << f->mtime;
    } else {
      EXPECT_EQ(f->mtime[i], want) << f->mtime;
    }
  }
  EXPECT_GT(f->mtime_epoch, 1600000000);
  auto d = Stat(*root_, P("d"));
  ASSERT_TRUE(d);
  EXPECT_EQ(d->type, FileType::kDirectory);
  auto l = Stat(*root_, "link");
  ASSERT_TRUE(l);
  EXPECT_EQ(l->type, FileType::kSymlink);
  EXPECT_EQ(l->symlink_target, "a.txt");
  auto r = Stat(*root_, "/");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kPermissionDenied);
  auto root_info = Stat(*root_, dir_);
  ASSERT_TRUE(root_info);
  EXPECT_EQ(root_info->type, FileType::kDirectory);
  EXPECT_EQ(root_info->path, dir_);
  auto missing = Stat(*root_, "nope");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  EXPECT_NE(missing.error().message.find("ENOENT"), std::string::npos);
  EXPECT_EQ(FileTypeName(FileType::kDirectory), "directory");
}

TEST_P(WorkspaceTest, ListIsSortedAndTyped) {
  MakeListingDir();
  auto r = List(*root_, "dl");  // a symlinked directory inside is followed
  ASSERT_TRUE(r) << r.error().ToString();
  ASSERT_EQ(r->entries.size(), 4u);
  EXPECT_EQ(r->entries[0].name, "a.txt");
  EXPECT_EQ(r->entries[0].path, P("dl/a.txt"));
  EXPECT_EQ(r->entries[1].name, "b.txt");
  EXPECT_EQ(r->entries[1].size, 2u);
  EXPECT_EQ(r->entries[2].type, FileType::kDirectory);
  EXPECT_EQ(r->entries[3].type, FileType::kSymlink);
  EXPECT_EQ(r->entries[3].symlink_target, "a.txt");
  EXPECT_FALSE(r->truncated);
  auto capped = List(*root_, "d", ListOptions{.max_entries = 2});
  ASSERT_TRUE(capped);
  EXPECT_EQ(capped->entries.size(), 2u);
  EXPECT_TRUE(capped->truncated);
  auto file = List(*root_, "d/a.txt");
  ASSERT_FALSE(file);
  EXPECT_EQ(file.error().code, ErrorCode::kNotDirectory);
}

TEST_P(WorkspaceTest, ListWithoutStatGivesTheSameNamesAndTypesOnly) {
  MakeListingDir();
  SymlinkRaw("nowhere", P("d/dangling"));
  ASSERT_EQ(::mkfifo(P("d/fifo").c_str(), 0600), 0);
  auto full = List(*root_, "dl");
  auto bare = List(*root_, "dl", ListOptions{.stat = false});
  ASSERT_TRUE(full) << full.error().ToString();
  ASSERT_TRUE(bare) << bare.error().ToString();
  EXPECT_TRUE(full->stat);
  EXPECT_FALSE(bare->stat);
  EXPECT_EQ(bare->path, full->path);
  ASSERT_EQ(bare->entries.size(), full->entries.size());
  for (size_t i = 0; i < bare->entries.size(); ++i) {
    const auto& b = bare->entries[i];
    const auto& f = full->entries[i];
    EXPECT_EQ(b.name, f.name);
    EXPECT_EQ(b.path, f.path);
    EXPECT_EQ(b.type, f.type) << b.name;  // lstat's view: a symlink stays one
    EXPECT_EQ(b.size, 0u) << b.name;
    EXPECT_EQ(b.mtime, "") << b.name;
    EXPECT_EQ(b.symlink_target, "") << b.name;
  }
  ASSERT_EQ(bare->entries.size(), 6u);
  EXPECT_EQ(bare->entries[2].type, FileType::kDirectory);  // c
  EXPECT_EQ(bare->entries[4].type, FileType::kOther);      // fifo
  EXPECT_EQ(bare->entries[5].type, FileType::kSymlink);    // z
  auto capped = List(*root_, "d", ListOptions{.max_entries = 2, .stat = false});
  ASSERT_TRUE(capped);
  EXPECT_EQ(capped->entries.size(), 2u);
  EXPECT_TRUE(capped->truncated);
  auto file = List(*root_, "d/a.txt", ListOptions{.stat = false});
  ASSERT_FALSE(file);
  EXPECT_EQ(file.error().code, ErrorCode::kNotDirectory);
}

TEST_P(WorkspaceTest, ReadWholeAndRange) {
  WriteRaw(P("f.txt"), "0123456789");
  auto whole = Read(*root_, "f.txt");
  ASSERT_TRUE(whole) << whole.error().ToString();
  EXPECT_EQ(whole->content, "0123456789");
  EXPECT_EQ(whole->size, 10u);
  EXPECT_FALSE(whole->truncated);
  EXPECT_FALSE(whole->binary);
  auto range = Read(*root_, "f.txt", Bytes(3, 4));
  ASSERT_TRUE(range);
  EXPECT_EQ(range->content, "3456");
  EXPECT_EQ(range->offset, 3u);
  EXPECT_FALSE(range->truncated);
  auto tail = Read(*root_, "f.txt", Bytes(8, std::nullopt));
  ASSERT_TRUE(tail);
  EXPECT_EQ(tail->content, "89");
  auto past = Read(*root_, "f.txt", Bytes(100, std::nullopt));
  ASSERT_TRUE(past);
  EXPECT_EQ(past->content, "");
  auto capped = Read(*root_, "f.txt", Bytes(std::nullopt, std::nullopt, 4));
  ASSERT_TRUE(capped);
  EXPECT_EQ(capped->content, "0123");
  EXPECT_TRUE(capped->truncated);
  auto exact = Read(*root_, "f.txt", Bytes(std::nullopt, std::nullopt, 10));
  ASSERT_TRUE(exact);
  EXPECT_FALSE(exact->truncated);
  auto empty = Read(*root_, "f.txt", Bytes(0, 0));
  ASSERT_TRUE(empty);
  EXPECT_EQ(empty->content, "");
  EXPECT_FALSE(empty->truncated);
}

TEST_P(WorkspaceTest, ReadCapDoesNotSplitUtf8) {
  WriteRaw(P("u.txt"), "ab\xC3\xA9z");  // "abéz"
  auto r = Read(*root_, "u.txt", Bytes(std::nullopt, std::nullopt, 3));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->content, "ab");
  EXPECT_TRUE(r->truncated);
}

TEST_P(WorkspaceTest, ReadDetectsBinary) {
  WriteRaw(P("nul.bin"), std::string("abc\0def", 7));
  WriteRaw(P("latin1.txt"), "caf\xE9\n");
  WriteRaw(P("utf8.txt"), "caf\xC3\xA9\n");
  std::string late(10000, 'a');
  late += '\0';
  WriteRaw(P("late.txt"), late);
  EXPECT_TRUE(Read(*root_, "nul.bin")->binary);
  EXPECT_TRUE(Read(*root_, "latin1.txt")->binary);
  EXPECT_FALSE(Read(*root_, "utf8.txt")->binary);
  EXPECT_FALSE(Read(*root_, "late.txt")->binary);  // only the first 8 KiB count
  EXPECT_TRUE(Read(*root_, "nul.bin", Bytes(4, std::nullopt))->binary);
}

TEST_P(WorkspaceTest, ReadLineWindow) {
  WriteRaw(P("l.txt"), "zero\none\r\ntwo\nthree\nfour");
  auto all = Read(*root_, "l.txt", Lines(0, std::nullopt));
  ASSERT_TRUE(all) << all.error().ToString();
  EXPECT_TRUE(all->line_mode);
  EXPECT_EQ(all->lines, (std::vector<std::string>{"zero", "one", "two", "three", "four"}));
  EXPECT_EQ(all->total_lines, 5u);
  EXPECT_FALSE(all->more_lines);
  auto mid = Read(*root_, "l.txt", Lines(1, 2));
  ASSERT_TRUE(mid);
  EXPECT_EQ(mid->lines, (std::vector<std::string>{"one", "two"}));
  EXPECT_EQ(mid->total_lines, 5u);
  EXPECT_TRUE(mid->more_lines);
  EXPECT_EQ(mid->line_offset, 1u);
  auto last = Read(*root_, "l.txt", Lines(4, 10));
  ASSERT_TRUE(last);
  EXPECT_EQ(last->lines, (std::vector<std::string>{"four"}));
  EXPECT_FALSE(last->more_lines);
  auto beyond = Read(*root_, "l.txt", Lines(9, std::nullopt));
  ASSERT_TRUE(beyond);
  EXPECT_TRUE(beyond->lines.empty());
  EXPECT_EQ(beyond->total_lines, 5u);
  EXPECT_FALSE(beyond->more_lines);
  auto mixed = Read(*root_, "l.txt", [] {
    ReadOptions o;
    o.offset = 1;
    o.line_limit = 1;
    return o;
  }());
  ASSERT_FALSE(mixed);
  EXPECT_EQ(mixed.error().code, ErrorCode::kInvalidArgument);

  WriteRaw(P("empty.txt"), "");
  auto e = Read(*root_, "empty.txt", Lines(std::nullopt, 5));
  ASSERT_TRUE(e);
  EXPECT_EQ(e->total_lines, 0u);
  EXPECT_TRUE(e->lines.empty());
  WriteRaw(P("nl.txt"), "a\n\nb\n");
  auto nl = Read(*root_, "nl.txt", Lines(std::nullopt, 5));
  ASSERT_TRUE(nl);
  EXPECT_EQ(nl->total_lines, 3u);
  EXPECT_EQ(nl->lines, (std::vector<std::string>{"a", "", "b"}));
}

// Lines crossing the 64 KiB read chunks, counted over a file of several MiB.
TEST_P(WorkspaceTest, ReadLineWindowInBigFile) {
  std::string big;
  for (int i = 0; i < 200000; ++i)
    big += Cat("line ", std::to_string(i), " ", std::string(i % 37, 'x'), "\n");
  WriteRaw(P("big.txt"), big);
  auto r = Read(*root_, "big.txt", Lines(123456, 3));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->total_lines, 200000u);
  ASSERT_EQ(r->lines.size(), 3u);
  EXPECT_EQ(r->lines[0], Cat("line 123456 ", std::string(123456 % 37, 'x')));
  EXPECT_EQ(r->lines[2], Cat("line 123458 ", std::string(123458 % 37, 'x')));
  EXPECT_TRUE(r->more_lines);
  // The byte cap cuts the window and says so.
  auto capped = Read(*root_, "big.txt", Lines(0, std::nullopt, 100000));
  ASSERT_TRUE(capped);
  EXPECT_TRUE(capped->truncated);
  EXPECT_TRUE(capped->more_lines);
  EXPECT_EQ(capped->total_lines, 200000u);
  size_t bytes = 0;
  for (const auto& l : capped->lines) bytes += l.size();
  EXPECT_LE(bytes, 100000u);
  EXPECT_GT(capped->lines.size(), 100u);
  EXPECT_EQ(capped->lines[10], Cat("line 10 ", std::string(10, 'x')));
}

TEST_P(WorkspaceTest, ReadRejectsDirectoriesAndEscapes) {
  MakeDirRaw(P("d"));
  auto d = Read(*root_, "d");
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().code, ErrorCode::kIsDirectory);
  SymlinkRaw(outside_ + "/secret.txt", P("out"));
  auto out = Read(*root_, "out");
  ASSERT_FALSE(out);
  EXPECT_EQ(out.error().code, ErrorCode::kPermissionDenied);
  ::mkfifo(P("fifo").c_str(), 0644);
  auto fifo = Read(*root_, "fifo");
  ASSERT_FALSE(fifo);
  EXPECT_EQ(fifo.error().code, ErrorCode::kInvalidArgument);
}

TEST_P(WorkspaceTest, OpenForReadStreams) {
  WriteRaw(P("s.bin"), "streamed");
  auto s = OpenForRead(*root_, "s.bin");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->size, 8u);
  char buf[16];
  EXPECT_EQ(::read(s->fd.get(), buf, sizeof(buf)), 8);
  EXPECT_EQ(std::string(buf, 8), "streamed");
}

TEST_P(WorkspaceTest, WriteCreatesAtomically) {
  auto w = Write(*root_, "new/dir/f.txt", "content");
  ASSERT_TRUE(w) << w.error().ToString();
  EXPECT_EQ(w->path, P("new/dir/f.txt"));
  EXPECT_EQ(w->bytes, 7u);
  EXPECT_TRUE(w->created);
  EXPECT_EQ(ReadRaw(P("new/dir/f.txt")), "content");
  EXPECT_EQ(ModeOf(P("new/dir/f.txt")), 0644u);
  EXPECT_EQ(CountEntries(P("new/dir")), 1);  // no temporary file left

  ::chmod(P("new/dir/f.txt").c_str(), 0600);
  auto again = Write(*root_, P("new/dir/f.txt"), "v2");
  ASSERT_TRUE(again);
  EXPECT_FALSE(again->created);
  EXPECT_EQ(ReadRaw(P("new/dir/f.txt")), "v2");
  EXPECT_EQ(ModeOf(P("new/dir/f.txt")), 0600u);  // kept

  auto mode = Write(*root_, "x.sh", "#!/bin/sh\n", WriteOpts([](WriteOptions& o) {
    o.mode = 0755;
    o.fsync = true;
  }));
  ASSERT_TRUE(mode);
  EXPECT_EQ(ModeOf(P("x.sh")), 0755u);

  auto no_over =
      Write(*root_, "x.sh", "other", WriteOpts([](WriteOptions& o) { o.overwrite = false; }));
  ASSERT_FALSE(no_over);
  EXPECT_EQ(no_over.error().code, ErrorCode::kConflict);
  EXPECT_EQ(ReadRaw(P("x.sh")), "#!/bin/sh\n");

  auto no_parents =
      Write(*root_, "missing/f", "x", WriteOpts([](WriteOptions& o) { o.create_parents = false; }));
  ASSERT_FALSE(no_parents);
  EXPECT_EQ(no_parents.error().code, ErrorCode::kNotFound);
  EXPECT_FALSE(Exists(P("missing")));

  auto dir = Write(*root_, "new", "x");
  ASSERT_FALSE(dir);
  EXPECT_EQ(dir.error().code, ErrorCode::kIsDirectory);
  auto root_write = Write(*root_, dir_, "x");
  ASSERT_FALSE(root_write);
  EXPECT_EQ(root_write.error().code, ErrorCode::kIsDirectory);
}

TEST_P(WorkspaceTest, WriteThroughSymlinks) {
  WriteRaw(P("target.txt"), "old");
  SymlinkRaw("target.txt", P("link"));
  ASSERT_TRUE(Write(*root_, "link", "new"));
  EXPECT_EQ(ReadRaw(P("target.txt")), "new");
  struct stat st;
  ASSERT_EQ(::lstat(P("link").c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));  // the link survives

  SymlinkRaw(outside_ + "/secret.txt", P("out"));
  auto out = Write(*root_, "out", "pwned");
  ASSERT_FALSE(out);
  EXPECT_EQ(out.error().code, ErrorCode::kPermissionDenied);
  EXPECT_EQ(ReadRaw(outside_ + "/secret.txt"), "outside");
  SymlinkRaw(outside_, P("outdir"));
  auto out2 = Write(*root_, "outdir/new.txt", "pwned");
  ASSERT_FALSE(out2);
  EXPECT_EQ(out2.error().code, ErrorCode::kPermissionDenied);
  EXPECT_EQ(CountEntries(outside_), 1);

  // Without following, the link itself is replaced by a file.
  ASSERT_TRUE(Write(*root_, "out", "replaced",
                    WriteOpts([](WriteOptions& o) { o.follow_symlinks = false; })));
  ASSERT_EQ(::lstat(P("out").c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(ReadRaw(outside_ + "/secret.txt"), "outside");
}

TEST_P(WorkspaceTest, EditReplaces) {
  WriteRaw(P("e.py"), "def f():\n    return 1\n\ndef g():\n    return 1\n");
  ::chmod(P("e.py").c_str(), 0754);
  auto one = Edit(*root_, "e.py", "def f():\n    return 1", "def f():\n    return 2", false);
  ASSERT_TRUE(one) << one.error().ToString();
  EXPECT_EQ(one->replacements, 1u);
  EXPECT_EQ(ReadRaw(P("e.py")), "def f():\n    return 2\n\ndef g():\n    return 1\n");
  EXPECT_EQ(ModeOf(P("e.py")), 0754u);

  auto ambiguous = Edit(*root_, "e.py", "return", "yield", false);
  ASSERT_FALSE(ambiguous);
  EXPECT_EQ(ambiguous.error().code, ErrorCode::kConflict);
  EXPECT_NE(ambiguous.error().message.find("appears 2 times"), std::string::npos)
      << ambiguous.error().message;

  auto all = Edit(*root_, "e.py", "return", "yield", true);
  ASSERT_TRUE(all);
  EXPECT_EQ(all->replacements, 2u);
  EXPECT_EQ(ReadRaw(P("e.py")), "def f():\n    yield 2\n\ndef g():\n    yield 1\n");

  auto missing = Edit(*root_, "e.py", "nothing like this", "x", false);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  EXPECT_NE(missing.error().message.find("String not found in file"), std::string::npos);

  auto empty = Edit(*root_, "e.py", "", "x", false);
  ASSERT_FALSE(empty);
  EXPECT_EQ(empty.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(CountEntries(dir_), 1);
}

TEST_P(WorkspaceTest, EditHandlesLineEndings) {
  WriteRaw(P("crlf.txt"), "alpha\r\nbeta\r\ngamma\r\n");
  auto r = Edit(*root_, "crlf.txt", "alpha\nbeta\n", "one\ntwo\nthree\n", false);
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(ReadRaw(P("crlf.txt")), "one\r\ntwo\r\nthree\r\ngamma\r\n");
  WriteRaw(P("lf.txt"), "alpha\nbeta\n");
  auto back = Edit(*root_, "lf.txt", "alpha\r\nbeta", "x\r\ny", false);
  ASSERT_TRUE(back) << back.error().ToString();
  EXPECT_EQ(ReadRaw(P("lf.txt")), "x\ny\n");
}

TEST_P(WorkspaceTest, EditRefusesNonText) {
  WriteRaw(P("b.bin"), std::string("ab\0cd", 5));
  auto r = Edit(*root_, "b.bin", "ab", "x", false);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  WriteRaw(P("l1.txt"), "caf\xE9");
  EXPECT_EQ(Edit(*root_, "l1.txt", "caf", "x", false).error().code, ErrorCode::kInvalidArgument);
  MakeDirRaw(P("d"));
  EXPECT_EQ(Edit(*root_, "d", "a", "b", false).error().code, ErrorCode::kIsDirectory);
  auto big = Edit(*root_, "l1.txt", "caf", "x", false, EditOptions{.max_file_bytes = 2});
  EXPECT_EQ(big.error().code, ErrorCode::kResourceExhausted);
}

TEST_P(WorkspaceTest, EditThroughSymlinkKeepsLink) {
  WriteRaw(P("real.txt"), "abc");
  SymlinkRaw("real.txt", P("link.txt"));
  ASSERT_TRUE(Edit(*root_, "link.txt", "b", "B", false));
  EXPECT_EQ(ReadRaw(P("real.txt")), "aBc");
  struct stat st;
  ASSERT_EQ(::lstat(P("link.txt").c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
}

TEST_P(WorkspaceTest, Mkdir) {
  auto a = Mkdir(*root_, "a", false);
  ASSERT_TRUE(a);
  EXPECT_EQ(*a, P("a"));
  EXPECT_EQ(Mkdir(*root_, "a", false).error().code, ErrorCode::kConflict);
  EXPECT_TRUE(Mkdir(*root_, "a", true));
  EXPECT_EQ(Mkdir(*root_, "x/y", false).error().code, ErrorCode::kNotFound);
  ASSERT_TRUE(Mkdir(*root_, "x/y/z", true, 0700));
  EXPECT_EQ(ModeOf(P("x/y/z")), 0700u);
  SymlinkRaw(outside_, P("out"));
  EXPECT_EQ(Mkdir(*root_, "out/n", true).error().code, ErrorCode::kPermissionDenied);
  EXPECT_EQ(Mkdir(*root_, "out/n", false).error().code, ErrorCode::kPermissionDenied);
  EXPECT_EQ(CountEntries(outside_), 1);
}

TEST_P(WorkspaceTest, Move) {
  WriteRaw(P("a.txt"), "A");
  WriteRaw(P("b.txt"), "B");
  auto no = Move(*root_, "a.txt", "b.txt", false);
  ASSERT_FALSE(no);
  EXPECT_EQ(no.error().code, ErrorCode::kConflict);
  EXPECT_EQ(ReadRaw(P("a.txt")), "A");
  EXPECT_EQ(ReadRaw(P("b.txt")), "B");
  auto yes = Move(*root_, "a.txt", "b.txt", true);
  ASSERT_TRUE(yes);
  EXPECT_EQ(*yes, P("b.txt"));
  EXPECT_FALSE(Exists(P("a.txt")));
  EXPECT_EQ(ReadRaw(P("b.txt")), "A");
  MakeDirRaw(P("d"));
  ASSERT_TRUE(Move(*root_, "b.txt", "d/c.txt", false));
  EXPECT_EQ(ReadRaw(P("d/c.txt")), "A");
  SymlinkRaw(outside_ + "/secret.txt", P("link"));
  ASSERT_TRUE(Move(*root_, "link", "d/link2", false));  // moves the link itself
  char buf[256];
  ssize_t n = ::readlink(P("d/link2").c_str(), buf, sizeof(buf));
  EXPECT_EQ(std::string(buf, static_cast<size_t>(n)), outside_ + "/secret.txt");
  EXPECT_EQ(Move(*root_, "d/c.txt", outside_ + "/c.txt", true).error().code,
            ErrorCode::kPermissionDenied);
  EXPECT_EQ(Move(*root_, "d/c.txt", "../c.txt", true).error().code, ErrorCode::kPermissionDenied);
  EXPECT_EQ(Move(*root_, dir_, "elsewhere", true).error().code, ErrorCode::kPermissionDenied);
  EXPECT_EQ(Move(*root_, "missing", "m2", true).error().code, ErrorCode::kNotFound);
  EXPECT_EQ(CountEntries(outside_), 1);
}

TEST_P(WorkspaceTest, Delete) {
  WriteRaw(P("f.txt"), "x");
  ASSERT_TRUE(Delete(*root_, "f.txt", false));
  EXPECT_FALSE(Exists(P("f.txt")));
  MakeDirRaw(P("empty"));
  ASSERT_TRUE(Delete(*root_, "empty", false));
  EXPECT_FALSE(Exists(P("empty")));
  EXPECT_EQ(Delete(*root_, "nope", false).error().code, ErrorCode::kNotFound);
  EXPECT_EQ(Delete(*root_, dir_, true).error().code, ErrorCode::kPermissionDenied);
  EXPECT_EQ(Delete(*root_, ".", true).error().code, ErrorCode::kPermissionDenied);

  WriteRaw(P("tree/a/b/c.txt"), "c");
  WriteRaw(P("tree/.hidden"), "h");
  WriteRaw(outside_ + "/keep/k.txt", "k");
  SymlinkRaw(outside_, P("tree/a/out_abs"));
  SymlinkRaw("../../../outside/keep", P("tree/a/out_rel"));
  SymlinkRaw(outside_ + "/secret.txt", P("tree/out_file"));
  auto nonrec = Delete(*root_, "tree", false);
  ASSERT_FALSE(nonrec);
  EXPECT_EQ(nonrec.error().code, ErrorCode::kConflict);
  EXPECT_TRUE(Exists(P("tree/a/b/c.txt")));
  ASSERT_TRUE(Delete(*root_, "tree", true));
  EXPECT_FALSE(Exists(P("tree")));
  EXPECT_EQ(ReadRaw(outside_ + "/secret.txt"), "outside");
  EXPECT_EQ(ReadRaw(outside_ + "/keep/k.txt"), "k");

  // A symlink is deleted, not its target.
  WriteRaw(P("t.txt"), "t");
  SymlinkRaw("t.txt", P("l"));
  ASSERT_TRUE(Delete(*root_, "l", true));
  EXPECT_TRUE(Exists(P("t.txt")));
  EXPECT_FALSE(Exists(P("l")));
  // Deleting through a symlinked directory that leaves the root is refused.
  SymlinkRaw(outside_, P("od"));
  EXPECT_EQ(Delete(*root_, "od/secret.txt", false).error().code, ErrorCode::kPermissionDenied);
  EXPECT_EQ(ReadRaw(outside_ + "/secret.txt"), "outside");
}

INSTANTIATE_TEST_SUITE_P(Modes, WorkspaceTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? std::string("Fallback") : std::string("Openat2");
                         });

}  // namespace
}  // namespace deepbox::sandboxd::fs
