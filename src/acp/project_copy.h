// Copies an ACP client's project (its cwd) into a session's sandbox, so the
// agent works on a copy and the real files change only through the editor.
// What is copied: regular files and directories beneath the project, except
//   * what its .gitignore files exclude (gitignore.h) and the .git directory
//     (the working tree, not the history);
//   * symlinks, never followed (a link to ~/.ssh stays behind; a link
//     inside the project is skipped too: the agent sees its target, if that
//     is in the project, under the target's own name);
//   * FIFOs, sockets and devices.
// The walk opens every directory and file with O_NOFOLLOW relative to its
// parent's descriptor, so a symlink swapped in during the walk is not
// followed either. A project over the size or file-count cap is refused
// before anything is copied.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "acp/gitignore.h"
#include "common/error.h"
#include "sandbox/sandbox.h"

namespace deepbox::acp {

struct ProjectCopyOptions {
  uint64_t max_bytes = 256ull << 20;
  uint64_t max_files = 50000;
};

struct ProjectCopyStats {
  uint64_t files = 0;
  uint64_t directories = 0;
  uint64_t bytes = 0;
  uint64_t ignored = 0;               // entries excluded by .gitignore (and .git)
  std::vector<std::string> symlinks;  // skipped, relative paths
  std::vector<std::string> special;   // FIFOs, sockets, devices: skipped
  std::vector<std::string> copied;    // relative paths of the files (CopyProjectToSandbox)
};

// What would be copied (nothing is read but .gitignore files); over a cap:
// RESOURCE_EXHAUSTED naming the cap and how to raise it.
Result<ProjectCopyStats> ScanProject(const std::string& project_dir,
                                     const ProjectCopyOptions& options);

// Scans, then copies into `sandbox_root` of `sandbox` (directories first,
// then each file with its permission bits).
Result<ProjectCopyStats> CopyProjectToSandbox(const std::string& project_dir, Sandbox& sandbox,
                                              const std::string& sandbox_root,
                                              const ProjectCopyOptions& options);

// The project's file `rel` (relative, '/'-separated) as it is on the host,
// opened beneath the project without following any symlink. NOT_FOUND when
// it is not there (or not a regular file); RESOURCE_EXHAUSTED over
// `max_bytes`.
Result<std::string> ReadProjectFile(const std::string& project_dir, const std::string& rel,
                                    uint64_t max_bytes);

// The directory names the project's top .gitignore ignores at any depth by
// plain name ("node_modules/", "build", "__pycache__/"; no wildcard, no
// slash but a trailing one), plus ".git": what a listing of the sandbox's
// copy need not enter (Sandbox::Tree's skip_dirs). None but ".git" when the
// file re-includes anything ("!"), which a name alone cannot honour.
std::vector<std::string> IgnoredDirectoryNames(const std::string& project_dir);

// Whether `rel` (relative, '/'-separated) is a place in the project itself
// on the host: no symlink on the way or at its end (a link to ~/.ssh in the
// project leads out of it), and a regular file there or nothing yet. Only
// such paths are read or written through the editor, which follows links.
bool IsPlainProjectPath(const std::string& project_dir, const std::string& rel);

// Whether a path made in the sandbox would be kept out of a copy of the
// project: a ".git" directory on its way, or the project's .gitignore files
// on the host (those of its existing ancestors, read as the copy reads them:
// never through a symlink). What a command made in the sandbox is proposed
// to the editor only when this says no. Loads each .gitignore once.
class ProjectIgnores {
 public:
  explicit ProjectIgnores(std::string project_dir) : project_dir_(std::move(project_dir)) {}
  // `rel`: a file's path relative to the project, '/'-separated.
  bool Ignored(std::string_view rel);

 private:
  void Load(const std::string& rel_dir);
  std::string project_dir_;
  std::set<std::string> loaded_;
  IgnoreRules rules_;
};

}  // namespace deepbox::acp
