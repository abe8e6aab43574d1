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
#include <string>
#include <vector>

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

}  // namespace deepbox::acp
