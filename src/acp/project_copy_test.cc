#include "acp/project_copy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/testing/temp_dir.h"
#include "sandbox/testing/scoped_sandboxd.h"

namespace deepbox::acp {
namespace {

namespace fs = std::filesystem;
using ::testing::UnorderedElementsAre;

void WriteText(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

// A project with ignored files, a symlink to a directory outside it (as to
// ~/.ssh), a symlink inside it, and a FIFO.
class ProjectCopyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    project_ = tmp_.path() / "project";
    outside_ = tmp_.path() / "dot-ssh";
    WriteText(outside_ / "id_ed25519", "PRIVATE KEY");
    WriteText(project_ / ".gitignore", "*.log\nbuild/\n.env\n");
    WriteText(project_ / "src/main.py", "print('hi')\n");
    WriteText(project_ / "src/.gitignore", "generated.py\n");
    WriteText(project_ / "src/generated.py", "x\n");
    WriteText(project_ / "debug.log", "noise\n");
    WriteText(project_ / "build/out.o", "obj\n");
    WriteText(project_ / ".env", "TOKEN=1\n");
    WriteText(project_ / ".git/config", "[core]\n");
    WriteText(project_ / "run.sh", "#!/bin/sh\n");
    fs::permissions(project_ / "run.sh", fs::perms::owner_all);
    fs::create_directory_symlink(outside_, project_ / "ssh");
    fs::create_symlink("src/main.py", project_ / "main-link.py");
    ASSERT_EQ(::mkfifo((project_ / "pipe").c_str(), 0600), 0);
  }
  testing::TempDir tmp_{"acp-copy"};
  fs::path project_, outside_;
};

TEST_F(ProjectCopyTest, ScanHonoursGitignoreAndSkipsSymlinks) {
  auto s = ScanProject(project_, {});
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(s->files, 4u);  // .gitignore, src/.gitignore, src/main.py, run.sh
  EXPECT_THAT(s->symlinks, UnorderedElementsAre("ssh", "main-link.py"));
  EXPECT_THAT(s->special, UnorderedElementsAre("pipe"));
  EXPECT_EQ(s->ignored, 5u);  // debug.log, build, .env, src/generated.py, .git
}

TEST_F(ProjectCopyTest, CapsRefuseBeforeCopying) {
  ProjectCopyOptions small;
  small.max_bytes = 10;
  auto s = ScanProject(project_, small);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, ErrorCode::kResourceExhausted);
  EXPECT_THAT(s.error().message, ::testing::HasSubstr("--max-project-size"));
  ProjectCopyOptions few;
  few.max_files = 2;
  EXPECT_FALSE(ScanProject(project_, few));
}

TEST_F(ProjectCopyTest, CopiesIntoARealSandbox) {
  auto daemon = deepbox::testing::ScopedSandboxd::Start();
  ASSERT_TRUE(daemon) << daemon.error().message;
  Sandbox& sb = (*daemon)->client();
  const std::string root = sb.root();
  auto s = CopyProjectToSandbox(project_, sb, root, {});
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_THAT(s->copied,
              UnorderedElementsAre(".gitignore", "run.sh", "src/.gitignore", "src/main.py"));
  auto main = sb.Download(root + "/src/main.py");
  ASSERT_TRUE(main) << main.error().message;
  EXPECT_EQ(*main, "print('hi')\n");
  auto info = sb.Stat(root + "/run.sh");
  ASSERT_TRUE(info);
  EXPECT_EQ(info->mode & 0777, 0700u);
  for (const char* absent :
       {"ssh", "ssh/id_ed25519", ".env", "debug.log", "build", "pipe", "main-link.py", ".git"}) {
    EXPECT_FALSE(sb.Stat(root + "/" + absent)) << absent;
  }
}

// What a command made in the sandbox is proposed only when a copy of the
// project would have taken it.
TEST_F(ProjectCopyTest, ProjectIgnoresAnswersAsTheCopyWould) {
  ProjectIgnores ignores(project_.string());
  EXPECT_FALSE(ignores.Ignored("src/main.py"));
  EXPECT_FALSE(ignores.Ignored("new.py"));
  EXPECT_FALSE(ignores.Ignored("newdir/deeper/new.py"));  // directories not on the host
  EXPECT_TRUE(ignores.Ignored("trace.log"));
  EXPECT_TRUE(ignores.Ignored("src/deep/trace.log"));
  EXPECT_TRUE(ignores.Ignored(".env"));
  EXPECT_TRUE(ignores.Ignored("build/new.o"));       // an ignored directory
  EXPECT_TRUE(ignores.Ignored("src/generated.py"));  // src/.gitignore
  EXPECT_FALSE(ignores.Ignored("generated.py"));     // ...only below src
  EXPECT_TRUE(ignores.Ignored(".git/config"));
  EXPECT_TRUE(ignores.Ignored("sub/.git/HEAD"));
  // A .gitignore reached through a symlink is not the project's.
  WriteText(outside_ / ".gitignore", "*.py\n");
  EXPECT_FALSE(ignores.Ignored("ssh/x.py"));
}

TEST_F(ProjectCopyTest, ReadProjectFileNeverFollowsASymlink) {
  auto r = ReadProjectFile(project_.string(), "src/main.py", 1 << 20);
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(*r, "print('hi')\n");
  EXPECT_EQ(ReadProjectFile(project_.string(), "ssh/id_ed25519", 1 << 20).error().code,
            ErrorCode::kNotFound);
  EXPECT_EQ(ReadProjectFile(project_.string(), "main-link.py", 1 << 20).error().code,
            ErrorCode::kNotFound);
  EXPECT_EQ(ReadProjectFile(project_.string(), "pipe", 1 << 20).error().code, ErrorCode::kNotFound);
  EXPECT_EQ(ReadProjectFile(project_.string(), "missing", 1 << 20).error().code,
            ErrorCode::kNotFound);
  EXPECT_EQ(ReadProjectFile(project_.string(), "../dot-ssh/id_ed25519", 1 << 20).error().code,
            ErrorCode::kPermissionDenied);
  EXPECT_EQ(ReadProjectFile(project_.string(), "src/main.py", 4).error().code,
            ErrorCode::kResourceExhausted);
}

TEST(IgnoredDirectoryNamesTest, PlainNamesOfTheTopGitignoreOnly) {
  testing::TempDir tmp{"acp-names"};
  const fs::path p = tmp.path();
  EXPECT_EQ(IgnoredDirectoryNames(p.string()), (std::vector<std::string>{".git"}));
  WriteText(p / ".gitignore",
            "# deps\nnode_modules/\nbuild\n*.log\n/anchored\nsrc/gen/\n__pycache__/  \r\n"
            "target/\ntarget\n.venv\n");
  EXPECT_EQ(IgnoredDirectoryNames(p.string()),
            (std::vector<std::string>{".git", "node_modules", "build", "__pycache__", "target",
                                      ".venv"}));
  WriteText(p / ".gitignore", "build/\n!build/keep\n");
  EXPECT_EQ(IgnoredDirectoryNames(p.string()), (std::vector<std::string>{".git"}));
}

// What the editor may be asked to read or write: never through a symlink
// (the editor follows it: ssh -> ~/.ssh would have it write there).
TEST_F(ProjectCopyTest, IsPlainProjectPathRefusesEverySymlinkOnTheWay) {
  const std::string p = project_.string();
  EXPECT_TRUE(IsPlainProjectPath(p, "src/main.py"));
  EXPECT_TRUE(IsPlainProjectPath(p, "src/new.py"));           // not there yet
  EXPECT_TRUE(IsPlainProjectPath(p, "new/deeper/file.txt"));  // nor its directories
  EXPECT_FALSE(IsPlainProjectPath(p, "ssh/id_ed25519"));      // through a link out
  EXPECT_FALSE(IsPlainProjectPath(p, "ssh/new_key"));         // ...even to a new file
  EXPECT_FALSE(IsPlainProjectPath(p, "ssh/sub/new"));
  EXPECT_FALSE(IsPlainProjectPath(p, "main-link.py"));   // a link at the end
  EXPECT_FALSE(IsPlainProjectPath(p, "pipe"));           // not a regular file
  EXPECT_FALSE(IsPlainProjectPath(p, "src"));            // a directory
  EXPECT_FALSE(IsPlainProjectPath(p, "src/main.py/x"));  // under a file
  EXPECT_FALSE(IsPlainProjectPath(p, "../dot-ssh/id_ed25519"));
  EXPECT_FALSE(IsPlainProjectPath(p, ""));
}

}  // namespace
}  // namespace deepbox::acp
