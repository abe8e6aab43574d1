// --files-root: the daemon's own file API may serve more than --root-dir (the
// whole sandbox, "/"), while the upstream-compatible APIs stay confined to
// --root-dir, relative paths keep resolving against it, kernel pseudo
// filesystems are refused, and a daemon started outside a sandbox (not PID 1)
// stays confined by default. Drives the real deepbox-sandboxd binary.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/json.h"
#include "net/http_client.h"
#include "sandbox/testing/scoped_sandboxd.h"

namespace deepbox {
namespace {

using testing::ScopedSandboxd;
namespace stdfs = std::filesystem;

void WriteHostFile(const stdfs::path& p, const std::string& content) {
  stdfs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << content;
}

std::string ReadHostFile(const stdfs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class FilesRootTest : public ::testing::Test {
 protected:
  void Start(std::vector<std::string> args) {
    auto d = ScopedSandboxd::Start({.extra_args = std::move(args)});
    ASSERT_TRUE(d) << d.error().ToString();
    daemon_ = std::move(*d);
    root_ = daemon_->root();
    // The daemon's private temp dir, outside its --root-dir.
    outside_ = stdfs::path(root_).parent_path() / "outside";
    WriteHostFile(outside_ / "secret.txt", "outside the root\n");
    WriteHostFile(stdfs::path(root_) / "a.txt", "in the root\n");
  }
  Sandbox& sb() { return daemon_->client(); }
  net::Response Get(const std::string& target) {
    net::ClientOptions client_options;  // named: GCC 12 -O3 maybe-uninitialized on a temporary
    auto http = net::HttpClient::Create(daemon_->unix_url(), client_options);
    EXPECT_TRUE(http);
    net::ClientRequest req;
    req.method = "GET";
    req.target = target;
    auto r = (*http)->Send(req);
    EXPECT_TRUE(r) << r.error().ToString();
    return r ? *r : net::Response{};
  }
  json::object Info() {
    auto r = Get("/deepbox/v1/info");
    auto o = ParseJsonObject(r.body);
    EXPECT_TRUE(o) << r.body;
    return o ? *o : json::object{};
  }

  std::unique_ptr<ScopedSandboxd> daemon_;
  std::string root_;
  stdfs::path outside_;
};

TEST_F(FilesRootTest, WholeFilesystemThroughTheNativeApi) {
  Start({"--files-root", "/"});
  json::object info = Info();
  EXPECT_EQ(GetOptString(info, "root").value_or(""), root_);
  EXPECT_EQ(GetOptString(info, "files_root").value_or(""), "/");

  // Absolute paths anywhere; relative ones in --root-dir.
  auto outside = sb().Read((outside_ / "secret.txt").string(), {});
  ASSERT_TRUE(outside) << outside.error().ToString();
  EXPECT_EQ(outside->content, "outside the root\n");
  auto rel = sb().Read("a.txt", {});
  ASSERT_TRUE(rel) << rel.error().ToString();
  EXPECT_EQ(rel->content, "in the root\n");
  ASSERT_TRUE(sb().Write((outside_ / "new.txt").string(), "written"));
  EXPECT_EQ(ReadHostFile(outside_ / "new.txt"), "written");
  ASSERT_TRUE(sb().Write("b.txt", "relative"));
  EXPECT_EQ(ReadHostFile(stdfs::path(root_) / "b.txt"), "relative");
  auto list = sb().List(outside_.string());
  ASSERT_TRUE(list) << list.error().ToString();
  EXPECT_EQ(list->size(), 2u);

  // Searches without a path stay in the workspace; with one they go anywhere.
  auto glob = sb().Glob("*.txt", "");
  ASSERT_TRUE(glob) << glob.error().ToString();
  EXPECT_EQ(glob->paths, (std::vector<std::string>{root_ + "/a.txt", root_ + "/b.txt"}));
  glob = sb().Glob("*.txt", outside_.string());
  ASSERT_TRUE(glob) << glob.error().ToString();
  EXPECT_EQ(glob->paths.size(), 2u);
  GrepRequest grep;
  grep.pattern = "outside the root";
  auto found = sb().Grep(grep);
  ASSERT_TRUE(found) << found.error().ToString();
  EXPECT_TRUE(found->matches.empty());
  grep.path = outside_.string();
  found = sb().Grep(grep);
  ASSERT_TRUE(found) << found.error().ToString();
  ASSERT_EQ(found->matches.size(), 1u);
  EXPECT_EQ(found->matches[0].path, (outside_ / "secret.txt").string());

  // Commands may start anywhere the file API reaches; the default stays.
  ExecRequest exec;
  exec.shell = "pwd";
  auto ran = sb().Exec(exec);
  ASSERT_TRUE(ran) << ran.error().ToString();
  EXPECT_EQ(ran->stdout_data, root_ + "\n");
  exec.cwd = outside_.string();
  ran = sb().Exec(exec);
  ASSERT_TRUE(ran) << ran.error().ToString();
  EXPECT_EQ(ran->stdout_data, outside_.string() + "\n");
}

TEST_F(FilesRootTest, KernelInterfacesAreRefused) {
  Start({"--files-root", "/"});
  // The daemon's own /proc entries hold its memory, fds and environment.
  const std::string pid = std::to_string(daemon_->pid());
  for (const std::string& p : {std::string("/proc/self/environ"), std::string("/proc/self/mem"),
                               "/proc/" + pid + "/status", std::string("/proc")}) {
    auto r = sb().Read(p, {});
    ASSERT_FALSE(r) << p << " was served";
    EXPECT_EQ(r.error().code, ErrorCode::kPermissionDenied) << p << ": " << r.error().message;
  }
  EXPECT_FALSE(sb().List("/proc/self/fd"));
  EXPECT_FALSE(sb().Write("/proc/self/comm", "x"));
  // Reached through a symlink in the workspace: refused all the same.
  std::error_code ec;
  stdfs::create_symlink("/proc/self/environ", stdfs::path(root_) / "env", ec);
  ASSERT_FALSE(ec);
  auto r = sb().Read("env", {});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kPermissionDenied) << r.error().message;
  EXPECT_FALSE(sb().Download(root_ + "/env"));
}

TEST_F(FilesRootTest, UpstreamApisStayConfinedToTheRootDir) {
  Start({"--files-root", "/"});
  const std::string escape = "../outside/secret.txt";
  for (const std::string& target : std::vector<std::string>{
           "/download/" + escape, "/list/../outside", "/exists/" + escape, "/v1/files/" + escape,
           "/download" + (outside_ / "secret.txt").string(),
           "/v1/files" + (outside_ / "secret.txt").string()}) {
    auto r = Get(target);
    if (target.starts_with("/exists/")) {  // upstream answers 200 {"exists": false}
      EXPECT_NE(r.body.find("\"exists\":false"), std::string::npos) << target << ": " << r.body;
    } else {
      EXPECT_NE(r.status, 200) << target << ": " << r.body;
    }
    EXPECT_EQ(r.body.find("outside the root"), std::string::npos) << target;
  }
  auto in_root = Get("/download/a.txt");
  EXPECT_EQ(in_root.status, 200);
  EXPECT_EQ(in_root.body, "in the root\n");
}

TEST_F(FilesRootTest, OutsideASandboxTheDefaultStaysConfined) {
  Start({});  // not PID 1: "auto" means --root-dir
  json::object info = Info();
  EXPECT_EQ(GetOptString(info, "files_root").value_or(""), root_);
  auto r = sb().Read((outside_ / "secret.txt").string(), {});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kPermissionDenied);
  auto rel = sb().Read("a.txt", {});
  ASSERT_TRUE(rel) << rel.error().ToString();
  ExecRequest exec;
  exec.shell = "pwd";
  exec.cwd = outside_.string();
  EXPECT_FALSE(sb().Exec(exec));
}

TEST_F(FilesRootTest, FilesRootMustContainTheRootDir) {
  auto d = ScopedSandboxd::Start({.extra_args = {"--files-root", "/proc/self"}});
  EXPECT_FALSE(d) << "a files root that does not contain --root-dir was accepted";
}

}  // namespace
}  // namespace deepbox
