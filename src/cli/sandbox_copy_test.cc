// SandboxCopier against the real daemon (round trips, odd names, symlinks,
// FIFOs, sizes above every old cap, bounded memory) and against a hostile
// daemon (issue 16): whatever it answers, nothing outside the destination the
// user named is created or modified, and the copy fails with a clear error.
#include "cli/sandbox_copy.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "sandbox/testing/hostile_daemon.h"
#include "sandbox/testing/scoped_sandboxd.h"

namespace deepbox::cli {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFile(const fs::path& p, const std::string& content, mode_t mode = 0644) {
  std::ofstream(p, std::ios::binary) << content;
  chmod(p.c_str(), mode);
}

std::string RandomBytes(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng() & 0xff);
  return s;
}

std::string AllBytes() {
  std::string s;
  for (int i = 0; i < 256; ++i) s += static_cast<char>(i);
  return s;
}

// Every entry beneath `root`: relative path -> "type:content-or-target:mode".
std::map<std::string, std::string> Snapshot(const fs::path& root) {
  std::map<std::string, std::string> out;
  if (!fs::exists(fs::symlink_status(root))) return out;
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator();
       ++it) {
    struct stat st;
    if (lstat(it->path().c_str(), &st) != 0) continue;
    std::string rel = it->path().lexically_relative(root).string();
    std::string v;
    if (S_ISLNK(st.st_mode)) {
      v = "link:" + fs::read_symlink(it->path()).string();
    } else if (S_ISDIR(st.st_mode)) {
      v = "dir";
    } else if (S_ISREG(st.st_mode)) {
      v = "file:" + ReadAll(it->path()) + fmt::format(":{:o}", st.st_mode & 0777);
    } else {
      v = "other";
    }
    out[rel] = v;
  }
  return out;
}

// ------------------------------------------------------------ real daemon

class CopyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto d = testing::ScopedSandboxd::Start();
    ASSERT_TRUE(d) << d.error().ToString();
    daemon_ = std::move(*d);
    host_ = fs::temp_directory_path() /
            ("dbx-cp-host-" + std::to_string(getpid()) + "-" + std::to_string(counter_++));
    fs::remove_all(host_);
    fs::create_directories(host_);
    warnings_ = tmpfile();
  }
  void TearDown() override {
    if (warnings_ != nullptr) fclose(warnings_);
    fs::remove_all(host_);
  }
  std::string Warnings() {
    fflush(warnings_);
    rewind(warnings_);
    std::string out;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, warnings_)) > 0) out.append(buf, n);
    return out;
  }
  fs::path Box() const { return daemon_->root(); }

  std::unique_ptr<testing::ScopedSandboxd> daemon_;
  fs::path host_;
  std::FILE* warnings_ = nullptr;
  static inline int counter_ = 0;
};

TEST_F(CopyTest, FilesAreByteExactBothWays) {
  const std::string data = AllBytes() + RandomBytes(5 << 20, 1) + AllBytes();
  WriteFile(host_ / "in.bin", data, 0750);
  SandboxCopier copier(daemon_->client(), warnings_);
  auto up = copier.ToSandbox((host_ / "in.bin").string(), "in.bin");
  ASSERT_TRUE(up) << up.error().ToString();
  EXPECT_EQ(up->bytes, data.size());
  EXPECT_EQ(ReadAll(Box() / "in.bin"), data);
  EXPECT_EQ(fs::status(Box() / "in.bin").permissions() & fs::perms::all,
            static_cast<fs::perms>(0750));
  auto down = copier.FromSandbox("in.bin", (host_ / "out.bin").string());
  ASSERT_TRUE(down) << down.error().ToString();
  EXPECT_EQ(ReadAll(host_ / "out.bin"), data);
  // Into an existing directory: under SRC's name.
  fs::create_directory(host_ / "into");
  ASSERT_TRUE(copier.FromSandbox(Box().string() + "/in.bin", (host_ / "into").string()));
  EXPECT_EQ(ReadAll(host_ / "into" / "in.bin"), data);
  // An empty file.
  WriteFile(host_ / "empty", "");
  ASSERT_TRUE(copier.ToSandbox((host_ / "empty").string(), "."));
  EXPECT_TRUE(fs::exists(Box() / "empty"));
  EXPECT_EQ(fs::file_size(Box() / "empty"), 0u);
}

// Issue 21 H1: a copy out of a sandbox that writes files `deepbox run` reads
// (a project's .mcp.json, .deepagents/) says so; other copies say nothing.
TEST_F(CopyTest, CopyOutNamesFilesDeepboxRunReads) {
  fs::create_directories(Box() / "proj" / ".deepagents" / "skills" / "s");
  WriteFile(Box() / "proj" / ".mcp.json", R"({"mcpServers": {}})");
  WriteFile(Box() / "proj" / ".deepagents" / "AGENTS.md", "memory\n");
  WriteFile(Box() / "proj" / ".deepagents" / "skills" / "s" / "SKILL.md", "skill\n");
  WriteFile(Box() / "proj" / "app.py", "print(1)\n");
  WriteFile(Box() / "plain.txt", "x\n");
  SandboxCopier copier(daemon_->client(), warnings_);
  fs::create_directory(host_ / "out");
  auto down = copier.FromSandbox("proj", (host_ / "out").string());
  ASSERT_TRUE(down) << down.error().ToString();
  const std::string out = (host_ / "out").string();
  EXPECT_EQ(down->deepbox_files,
            (std::vector<std::string>{out + "/proj/.deepagents", out + "/proj/.mcp.json"}));
  EXPECT_THAT(Warnings(), HasSubstr("deepbox: note: this copy from the sandbox wrote " + out +
                                    "/proj/.deepagents, " + out + "/proj/.mcp.json, which "));
  EXPECT_THAT(Warnings(), HasSubstr("uses them only after asking you\n"));
  // A single file by that name too.
  auto one = copier.FromSandbox("proj/.mcp.json", (host_ / "single.json").string());
  ASSERT_TRUE(one);
  EXPECT_TRUE(one->deepbox_files.empty());  // another name on the host: nothing deepbox reads
  auto same = copier.FromSandbox("proj/.mcp.json", (host_ / "out").string() + "/");
  ASSERT_TRUE(same);
  EXPECT_EQ(same->deepbox_files, std::vector<std::string>{out + "/.mcp.json"});
  auto plain = copier.FromSandbox("plain.txt", (host_ / "plain.txt").string());
  ASSERT_TRUE(plain);
  EXPECT_TRUE(plain->deepbox_files.empty());
}

TEST_F(CopyTest, TreesWithOddNamesSymlinksAndFifosRoundTrip) {
  fs::path src = host_ / "tree";
  fs::create_directories(src / "sub" / "deeper");
  fs::create_directories(src / "empty-dir");
  WriteFile(src / "a.txt", "alpha\n");
  WriteFile(src / "résumé – naïve.txt", "utf-8 name\n");
  WriteFile(src / "日本語", "cjk\n");
  WriteFile(src / std::string("bad-\xff-bytes"), "not utf-8 name\n");
  WriteFile(src / "sub" / "deeper" / "big.bin", RandomBytes(3 << 20, 2), 0600);
  WriteFile(src / "sub" / "script.sh", "#!/bin/sh\necho hi\n", 0755);
  fs::create_symlink("a.txt", src / "rel-link");
  fs::create_symlink("/etc/passwd", src / "abs-link");
  ASSERT_EQ(mkfifo((src / "a-fifo").c_str(), 0600), 0);
  SandboxCopier copier(daemon_->client(), warnings_);
  auto up = copier.ToSandbox(src.string(), ".");
  ASSERT_TRUE(up) << up.error().ToString();
  EXPECT_EQ(up->skipped.size(), 2u);
  EXPECT_THAT(Warnings(), HasSubstr("a-fifo: a FIFO (only files"));
  EXPECT_THAT(Warnings(), HasSubstr("abs-link: a symlink to /etc/passwd, outside the copied tree "
                                    "(only links within it are copied)\n"));
  EXPECT_THAT(Warnings(), Not(HasSubstr("; the sandbox keeps")));  // one sentence (issue 29 L10)
  auto expected = Snapshot(src);
  expected.erase("a-fifo");
  expected.erase("abs-link");
  EXPECT_EQ(Snapshot(Box() / "tree"), expected);
  // Back again, into a directory: the same tree, symlinks as links.
  fs::create_directory(host_ / "back");
  auto down = copier.FromSandbox("tree", (host_ / "back").string() + "/");
  ASSERT_TRUE(down) << down.error().ToString();
  EXPECT_EQ(Snapshot(host_ / "back" / "tree"), expected);
  EXPECT_EQ(down->symlinks, 1u);
  // DIR/. copies the contents into an existing directory.
  fs::create_directory(host_ / "contents");
  ASSERT_TRUE(copier.FromSandbox("tree/.", (host_ / "contents").string()));
  EXPECT_EQ(Snapshot(host_ / "contents"), expected);
}

TEST_F(CopyTest, ASymlinkSourceIsCopiedAsALinkNeverFollowed) {
  WriteFile(host_ / "secret", "host secret\n");
  fs::create_symlink("secret", host_ / "link");
  SandboxCopier copier(daemon_->client(), warnings_);
  auto up = copier.ToSandbox((host_ / "link").string(), ".");
  ASSERT_TRUE(up) << up.error().ToString();
  EXPECT_TRUE(fs::is_symlink(Box() / "link"));
  EXPECT_EQ(fs::read_symlink(Box() / "link"), "secret");
  EXPECT_FALSE(fs::exists(Box() / "secret"));  // the link, not what it points to
  // A link leading out of where it lands is refused, with the reason.
  fs::create_symlink(host_ / "secret", host_ / "abs");
  auto abs = copier.ToSandbox((host_ / "abs").string(), ".");
  ASSERT_FALSE(abs);
  EXPECT_THAT(abs.error().message, HasSubstr("outside the directory it is copied into"));
}

// Sizes above the old caps (256 MiB up, 512 MiB down) stream in bounded memory.
TEST_F(CopyTest, LargeFilesStreamInBoundedMemory) {
  constexpr off_t kSize = (300LL << 20) + 4321;
  {
    int fd = open((host_ / "large").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(ftruncate(fd, kSize), 0);  // sparse: reads as zeros, costs no disk
    ASSERT_EQ(pwrite(fd, "tail", 4, kSize - 4), 4);
    close(fd);
  }
  // Its own daemon, whose sanitizer (in ASan builds) keeps a small quarantine:
  // freed buffers must not look like memory held for the file.
  std::string asan = getenv("ASAN_OPTIONS") != nullptr ? getenv("ASAN_OPTIONS") : "";
  setenv("ASAN_OPTIONS", (asan + (asan.empty() ? "" : ":") + "quarantine_size_mb=8").c_str(), 1);
  auto own = testing::ScopedSandboxd::Start();
  setenv("ASAN_OPTIONS", asan.c_str(), 1);
  ASSERT_TRUE(own) << own.error().ToString();
  daemon_ = std::move(*own);
  struct rusage before {};
  getrusage(RUSAGE_SELF, &before);
  SandboxCopier copier(daemon_->client(), warnings_);
  auto up = copier.ToSandbox((host_ / "large").string(), "large");
  ASSERT_TRUE(up) << up.error().ToString();
  ASSERT_EQ(fs::file_size(Box() / "large"), static_cast<uintmax_t>(kSize));
  fs::remove(host_ / "large");
  auto down = copier.FromSandbox("large", (host_ / "large.back").string());
  ASSERT_TRUE(down) << down.error().ToString();
  ASSERT_EQ(fs::file_size(host_ / "large.back"), static_cast<uintmax_t>(kSize));
  std::ifstream in(host_ / "large.back", std::ios::binary);
  in.seekg(kSize - 4);
  char tail[5] = {};
  in.read(tail, 4);
  EXPECT_STREQ(tail, "tail");
  struct rusage after {};
  getrusage(RUSAGE_SELF, &after);
  // ru_maxrss is in KiB; the file is 300 MiB: memory must not grow with it.
  EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 64 * 1024)
      << "the copy held " << (after.ru_maxrss - before.ru_maxrss) / 1024 << " MiB";
  std::string status = ReadAll(fs::path("/proc") / std::to_string(daemon_->pid()) / "status");
  auto at = status.find("VmHWM:");
  ASSERT_NE(at, std::string::npos);
  long daemon_peak_kib = std::stol(status.substr(at + 6));
  EXPECT_LT(daemon_peak_kib, 160 * 1024) << "the daemon's peak RSS grew with the file";
}

TEST_F(CopyTest, MissingSourcesFailWithoutLeavingAnything) {
  SandboxCopier copier(daemon_->client(), warnings_);
  auto missing_remote = copier.FromSandbox("nope", (host_ / "x").string());
  ASSERT_FALSE(missing_remote);
  EXPECT_EQ(missing_remote.error().code, ErrorCode::kNotFound);
  auto missing_host = copier.ToSandbox((host_ / "nope").string(), "x");
  ASSERT_FALSE(missing_host);
  EXPECT_THAT(missing_host.error().message, HasSubstr("does not exist"));
  auto missing_dir = copier.FromSandbox(".", (host_ / "no" / "such" / "dir/").string());
  ASSERT_FALSE(missing_dir);
  EXPECT_TRUE(Snapshot(host_).empty());
  EXPECT_FALSE(CopyNameFromArgument(".."));
  EXPECT_FALSE(CopyNameFromArgument("/workspace/results/.."));
  EXPECT_FALSE(CopyNameFromArgument("/"));
  EXPECT_EQ(*CopyNameFromArgument("/workspace/results/"), "results");
  EXPECT_EQ(*CopyNameFromArgument("results/."), "");
}

// ------------------------------------------------------------ hostile daemon

// A ustar member (names up to 100 bytes).
std::string TarMember(const std::string& name, char type, const std::string& data = "",
                      const std::string& link = "", unsigned mode = 0644) {
  char h[512] = {};
  std::memcpy(h, name.data(), std::min<size_t>(name.size(), 100));
  std::snprintf(h + 100, 8, "%07o", mode);
  std::snprintf(h + 108, 8, "%07o", 1000);
  std::snprintf(h + 116, 8, "%07o", 1000);
  std::snprintf(h + 124, 12, "%011lo", static_cast<unsigned long>(type == '0' ? data.size() : 0));
  std::snprintf(h + 136, 12, "%011o", 0);
  h[156] = type;
  std::memcpy(h + 157, link.data(), std::min<size_t>(link.size(), 100));
  std::memcpy(h + 257, "ustar", 6);
  std::memcpy(h + 263, "00", 2);
  std::memset(h + 148, ' ', 8);
  unsigned sum = 0;
  for (unsigned char c : h) sum += c;
  std::snprintf(h + 148, 8, "%06o", sum);
  std::string out(h, 512);
  if (type == '0') {
    out += data;
    out.append((512 - data.size() % 512) % 512, '\0');
  }
  return out;
}
std::string TarEnd() { return std::string(1024, '\0'); }

class HostileCopyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto d = testing::HostileDaemon::Start();
    ASSERT_TRUE(d) << d.error().ToString();
    daemon_ = std::move(*d);
    auto c = daemon_->Connect();
    ASSERT_TRUE(c) << c.error().ToString();
    client_ = std::move(*c);
    outer_ = fs::temp_directory_path() /
             ("dbx-cp-hostile-" + std::to_string(getpid()) + "-" + std::to_string(counter_++));
    fs::remove_all(outer_);
    fs::create_directories(outer_ / "dest");
    WriteFile(outer_ / "precious", "do not touch\n");
    WriteFile(outer_ / "dest" / ".bashrc", "mine\n");
    fs::create_directories(outer_ / "dest" / ".ssh");
    WriteFile(outer_ / "dest" / ".ssh" / "authorized_keys", "my key\n");
    before_ = Snapshot(outer_);
    warnings_ = tmpfile();
  }
  void TearDown() override {
    if (warnings_ != nullptr) fclose(warnings_);
    fs::remove_all(outer_);
  }
  // The property checked on every case: nothing but `allowed_new` changed.
  void ExpectUntouched(const std::set<std::string>& allowed_new = {}) {
    auto after = Snapshot(outer_);
    for (const auto& [rel, v] : before_) {
      auto it = after.find(rel);
      ASSERT_NE(it, after.end()) << "removed: " << rel;
      EXPECT_EQ(it->second, v) << "modified: " << rel;
    }
    for (const auto& [rel, v] : after) {
      if (before_.count(rel) == 0) {
        EXPECT_TRUE(allowed_new.count(rel)) << "created outside what was asked: " << rel;
      }
    }
  }
  Result<CopyStats> Down(const std::string& src) {
    SandboxCopier copier(*client_, warnings_);
    return copier.FromSandbox(src, (outer_ / "dest").string() + "/");
  }
  void StatSays(const std::string& json) { daemon_->Answer("/deepbox/v1/fs/stat", json); }
  void TarSays(const std::string& tar) {
    daemon_->AnswerStream("/deepbox/v1/fs/tar/download", {tar});
  }

  std::unique_ptr<testing::HostileDaemon> daemon_;
  std::unique_ptr<SandboxdClient> client_;
  fs::path outer_;
  std::map<std::string, std::string> before_;
  std::FILE* warnings_ = nullptr;
  static inline int counter_ = 0;
};

// C1: the destination name comes from the user's SRC, not the daemon's stat.
TEST_F(HostileCopyTest, StatNamesAreIgnored) {
  StatSays(R"({"path":"/workspace/.bashrc","name":".bashrc","type":"file","mode":"0644"})");
  daemon_->Answer("/deepbox/v1/fs/raw", "evil payload");
  auto r = Down("/workspace/out.txt");
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(ReadAll(outer_ / "dest" / "out.txt"), "evil payload");
  ExpectUntouched({"dest/out.txt"});
}

TEST_F(HostileCopyTest, ADirectoryStatWithATarOfDotSshIsRefused) {
  StatSays(R"({"path":"/workspace/.ssh","name":".ssh","type":"directory","mode":"0700"})");
  TarSays(TarMember(".ssh", '5', "", "", 0700) +
          TarMember(".ssh/authorized_keys", '0', "attacker key\n") + TarEnd());
  auto r = Down("/workspace/results");
  ASSERT_FALSE(r);
  EXPECT_THAT(r.error().message, HasSubstr("outside the requested directory"));
  ExpectUntouched();  // and dest/results, created for the copy, is gone again
}

// The parent-directory trick: stat says "/workspace/results/..", tar is 501.
TEST_F(HostileCopyTest, DotDotPathsAndMissingTarWriteNothing) {
  StatSays(R"({"path":"/workspace/results/..","type":"directory"})");
  daemon_->Answer("/deepbox/v1/fs/tar/download",
                  R"({"error":{"code":"UNIMPLEMENTED","message":"no"}})", 501);
  daemon_->Answer("/deepbox/v1/fs/list",
                  R"({"entries":[{"path":"/workspace/x","name":"../precious","type":"file"}]})");
  auto r = Down("/workspace/results");
  ASSERT_FALSE(r);
  ExpectUntouched();
  auto dotdot = Down("/workspace/results/..");
  ASSERT_FALSE(dotdot);
  EXPECT_THAT(dotdot.error().message, HasSubstr("names no file or directory"));
  ExpectUntouched();
}

TEST_F(HostileCopyTest, UnsafeTarMembersAreRefusedAndTheCopyUndone) {
  StatSays(R"({"path":"/workspace/r","type":"directory"})");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"dotdot", TarMember("r", '5') + TarMember("r/../../precious", '0', "x") + TarEnd()},
      {"absolute", TarMember("r", '5') + TarMember("/tmp/evil", '0', "x") + TarEnd()},
      {"outside", TarMember("r", '5') + TarMember("other/file", '0', "x") + TarEnd()},
      {"through a symlink", TarMember("r", '5') + TarMember("r/l", '2', "", outer_.string()) +
                                TarMember("r/l/precious", '0', "overwritten") + TarEnd()},
      {"hard link", TarMember("r", '5') + TarMember("r/h", '1', "", "r/../../precious") + TarEnd()},
      {"char device", TarMember("r", '5') + TarMember("r/null", '3') + TarEnd()},
      {"fifo", TarMember("r", '5') + TarMember("r/fifo", '6') + TarEnd()},
      {"replaces the top", TarMember("r", '0', "file instead of dir") + TarEnd()},
      {"truncated",
       TarMember("r", '5') + TarMember("r/a", '0', std::string(5000, 'a')).substr(0, 900)},
      {"garbage", std::string(4096, '\x7f')},
  };
  for (const auto& [what, tar] : cases) {
    SCOPED_TRACE(what);
    TarSays(tar);
    auto r = Down("r");
    EXPECT_FALSE(r) << "a hostile archive (" << what << ") was accepted";
    ExpectUntouched();
  }
}

TEST_F(HostileCopyTest, ControlSequencesInNamesNeverReachTheMessages) {
  StatSays(R"({"path":"/workspace/r","type":"directory"})");
  TarSays(TarMember("r", '5') + TarMember("\x1b]52;c;ZXZpbA==\x07/x", '0', "x") + TarEnd());
  auto r = Down("r");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message.find('\x1b'), std::string::npos) << r.error().message;
  EXPECT_EQ(r.error().message.find('\x07'), std::string::npos);
  ExpectUntouched();
}

TEST_F(HostileCopyTest, HostileNumbersAndKindsAreErrorsNotCrashes) {
  for (const std::string stat : {
           R"({"path":"x","type":"file","mode":"zz"})",
           R"({"path":"x","type":"file","size":-1})",
           R"({"path":"x","type":"file","size":1e400})",
           R"({"path":7,"type":["file"]})",
           R"({"type":"file","mode":"77777777777777777777"})",
           "not json at all",
           R"({"path":"x","type":"file")",
       }) {
    SCOPED_TRACE(stat);
    StatSays(stat);
    daemon_->Answer("/deepbox/v1/fs/raw", "data");
    auto r = Down("f");
    if (r) {
      ExpectUntouched({"dest/f"});  // a tolerable answer: the user's name, nothing else
      fs::remove(outer_ / "dest" / "f");
    } else {
      ExpectUntouched();
    }
  }
}

TEST_F(HostileCopyTest, ASymlinkAnswerBecomesALinkNamedByTheUser) {
  StatSays(R"({"path":"/workspace/.bashrc","type":"symlink","link_target":"/etc/shadow"})");
  auto r = Down("l");
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_TRUE(fs::is_symlink(outer_ / "dest" / "l"));
  ExpectUntouched({"dest/l"});
  fs::remove(outer_ / "dest" / "l");
  StatSays(std::string(R"({"path":"x","type":"symlink","link_target":""})"));
  EXPECT_FALSE(Down("l"));
  ExpectUntouched();
}

}  // namespace
}  // namespace deepbox::cli
