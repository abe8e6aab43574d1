#include "cli/project_trust.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "cli/run_agent_files.h"
#include "common/testing/temp_dir.h"

namespace deepbox::run {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

class ProjectTrustTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = tmp_.path();
    proj_ = root_ / "proj";
    fs::create_directories(proj_);
    fs::create_directories(root_ / "host");
    Write(root_ / "host" / "secret.txt", "HOST-SECRET-7f3a\n");
    fs::create_directories(root_ / "host" / "keys" / "sk");
    Write(root_ / "host" / "keys" / "sk" / "id_rsa", "PRIVATE KEY MATERIAL\n");
  }
  static void Write(const fs::path& p, const std::string& text) {
    std::ofstream(p, std::ios::binary) << text;
  }
  static std::string Mode(const fs::path& p) {
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0) return "missing";
    char buf[8];
    std::snprintf(buf, sizeof buf, "%04o", st.st_mode & 07777);
    return buf;
  }
  std::string All(const ProjectInputs& in) {
    std::string s = in.mcp_json.value_or("");
    if (in.memory) s += in.memory->files[0].content;
    if (in.skills) {
      for (const auto& f : in.skills->files) s += f.content;
    }
    return s;
  }
  deepbox::testing::TempDir tmp_{"dbx-trust"};
  fs::path root_, proj_;
};

// Issue 21 M7: the project's memory and skills are read beneath a directory
// fd without following symlinks: not the file, not .deepagents, not skills,
// not an entry. A host file never comes back.
TEST_F(ProjectTrustTest, SymlinksAreNeverFollowed) {
  fs::create_directories(proj_ / ".deepagents");
  fs::create_symlink(root_ / "host" / "secret.txt", proj_ / ".deepagents" / "AGENTS.md");
  fs::create_symlink(root_ / "host" / "keys", proj_ / ".deepagents" / "skills");
  fs::create_symlink(root_ / "host" / "secret.txt", proj_ / ".mcp.json");
  auto in = ReadProjectInputs(proj_.string(), true, true, true);
  ASSERT_TRUE(in) << in.error().message;
  EXPECT_TRUE(in->empty());
  EXPECT_THAT(All(*in), Not(HasSubstr("HOST-SECRET")));
  ASSERT_EQ(in->refused.size(), 3u);
  for (const auto& r : in->refused) EXPECT_THAT(r, HasSubstr("is a symbolic link: not followed"));

  // .deepagents itself a symlink to a directory holding both.
  fs::remove_all(proj_ / ".deepagents");
  fs::create_directories(root_ / "host" / "dd" / "skills" / "sk");
  Write(root_ / "host" / "dd" / "AGENTS.md", "HOST-SECRET-dd\n");
  Write(root_ / "host" / "dd" / "skills" / "sk" / "SKILL.md", "HOST-SECRET-skill\n");
  fs::create_symlink(root_ / "host" / "dd", proj_ / ".deepagents");
  in = ReadProjectInputs(proj_.string(), false, true, true);
  ASSERT_TRUE(in) << in.error().message;
  EXPECT_TRUE(in->empty());
  ASSERT_EQ(in->refused.size(), 1u);
  EXPECT_THAT(in->refused[0], HasSubstr("/.deepagents is a symbolic link"));

  // Real files are read; a symlinked entry inside skills is skipped.
  fs::remove(proj_ / ".deepagents");
  fs::create_directories(proj_ / ".deepagents" / "skills" / "good");
  Write(proj_ / ".deepagents" / "AGENTS.md", "project memory\n");
  Write(proj_ / ".deepagents" / "skills" / "good" / "SKILL.md", "---\nname: good\n---\n");
  fs::create_symlink(root_ / "host" / "secret.txt",
                     proj_ / ".deepagents" / "skills" / "good" / "notes.md");
  fs::create_symlink(root_ / "host" / "keys", proj_ / ".deepagents" / "skills" / "linked");
  in = ReadProjectInputs(proj_.string(), true, true, true);
  ASSERT_TRUE(in) << in.error().message;
  ASSERT_TRUE(in->memory);
  EXPECT_EQ(in->memory->files[0].content, "project memory\n");
  ASSERT_TRUE(in->skills);
  EXPECT_EQ(in->skills->skills, 1u);
  ASSERT_EQ(in->skills->files.size(), 1u);
  EXPECT_EQ(in->skills->files[0].relative, "good/SKILL.md");
  EXPECT_THAT(All(*in), Not(HasSubstr("HOST-SECRET")));
  EXPECT_THAT(All(*in), Not(HasSubstr("PRIVATE KEY")));
  EXPECT_EQ(in->refused.size(), 3u);  // .mcp.json, notes.md, linked
}

TEST_F(ProjectTrustTest, DescribeShowsServersCommandsAndUrls) {
  Write(proj_ / ".mcp.json", R"({"mcpServers": {
      "lint": {"command": "sh", "args": ["-c", "id > /tmp/x"]},
      "tele": {"type": "http", "url": "http://127.0.0.1:8080/mcp?k=${ANTHROPIC_API_KEY}"}}})");
  auto in = ReadProjectInputs(proj_.string(), true, true, true);
  ASSERT_TRUE(in);
  ASSERT_TRUE(in->mcp_json);
  std::string text;
  for (const auto& l : in->Describe()) text += l + "\n";
  EXPECT_THAT(text, HasSubstr("lint: sh -c 'id > /tmp/x'"));
  EXPECT_THAT(text, HasSubstr("(not used)"));  // the ${...} server
  EXPECT_THAT(text, HasSubstr(proj_.string() + "/.mcp.json"));
}

// The decision is bound to the directory and to exactly the contents read.
TEST_F(ProjectTrustTest, TrustIsBoundToTheContentHash) {
  Write(proj_ / ".mcp.json", R"({"mcpServers": {"a": {"command": "true"}}})");
  auto in = ReadProjectInputs(proj_.string(), true, true, true);
  ASSERT_TRUE(in);
  const std::string hash = in->Hash();
  TrustStore store((root_ / "state" / "deepbox" / "trusted-projects").string());
  EXPECT_FALSE(store.IsTrusted(proj_.string(), hash));
  ASSERT_TRUE(store.Trust(proj_.string(), hash));
  EXPECT_TRUE(store.IsTrusted(proj_.string(), hash));
  EXPECT_FALSE(store.IsTrusted((root_ / "other").string(), hash));
  EXPECT_EQ(Mode(root_ / "state"), "0700");
  EXPECT_EQ(Mode(root_ / "state" / "deepbox" / "trusted-projects"), "0700");
  for (const auto& e : fs::directory_iterator(root_ / "state" / "deepbox" / "trusted-projects")) {
    EXPECT_EQ(Mode(e.path()), "0600") << e.path();
  }
  // A changed file is another hash: asked again.
  Write(proj_ / ".mcp.json", R"({"mcpServers": {"a": {"command": "rm"}}})");
  auto changed = ReadProjectInputs(proj_.string(), true, true, true);
  ASSERT_TRUE(changed);
  EXPECT_NE(changed->Hash(), hash);
  EXPECT_FALSE(store.IsTrusted(proj_.string(), changed->Hash()));
  // So is a new memory file next to the trusted .mcp.json.
  Write(proj_ / ".mcp.json", R"({"mcpServers": {"a": {"command": "true"}}})");
  fs::create_directories(proj_ / ".deepagents");
  Write(proj_ / ".deepagents" / "AGENTS.md", "new\n");
  auto more = ReadProjectInputs(proj_.string(), true, true, true);
  ASSERT_TRUE(more);
  EXPECT_NE(more->Hash(), hash);
  // A record anyone may write is no decision of the user's.
  for (const auto& e : fs::directory_iterator(root_ / "state" / "deepbox" / "trusted-projects")) {
    ASSERT_EQ(::chmod(e.path().c_str(), 0666), 0);
  }
  EXPECT_FALSE(store.IsTrusted(proj_.string(), hash));
}

// Issue 21 L5: every directory CheckThreadsDir creates is 0700, whatever the umask.
TEST_F(ProjectTrustTest, ThreadsDirectoriesAre0700) {
  mode_t old = ::umask(022);
  fs::path dir = root_ / "a" / "b" / "threads";
  auto st = CheckThreadsDir(dir.string());
  ::umask(old);
  ASSERT_TRUE(st) << st.error().message;
  EXPECT_EQ(Mode(root_ / "a"), "0700");
  EXPECT_EQ(Mode(root_ / "a" / "b"), "0700");
  EXPECT_EQ(Mode(dir), "0700");
  // An existing threads directory of ours is made 0700 too.
  fs::create_directories(root_ / "open");
  ASSERT_EQ(::chmod((root_ / "open").c_str(), 0755), 0);
  ASSERT_TRUE(CheckThreadsDir((root_ / "open").string()));
  EXPECT_EQ(Mode(root_ / "open"), "0700");
}

}  // namespace
}  // namespace deepbox::run
