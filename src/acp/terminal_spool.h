// A command's output kept for a viewer in the editor's terminal (ACP
// terminal/*). `deepbox acp` runs every command in the sandbox; when the
// editor offers terminals it asks the editor to run `deepbox acp-view FILE`
// there, a viewer that only follows FILE (the output as it arrives, written
// by `deepbox acp`) and exits with the command's status when FILE.exit
// appears. Nothing of the agent's command runs on the host: the editor's
// terminal runs a reader of a file the user can read anyway.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "common/error.h"
#include "common/unique_fd.h"

namespace deepbox::acp {

// One `deepbox acp`'s private directory for spools (mkdtemp, 0700, under
// $XDG_RUNTIME_DIR, else /tmp), removed with everything in it.
class SpoolDir {
 public:
  static Result<std::unique_ptr<SpoolDir>> Create();
  SpoolDir(const SpoolDir&) = delete;
  SpoolDir& operator=(const SpoolDir&) = delete;
  ~SpoolDir();
  const std::string& path() const { return path_; }

 private:
  explicit SpoolDir(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

// One command's spool: path() (0600, created exclusively, never through a
// symlink) receives the output; Finish puts the exit status into
// path() + ".exit" (written aside, then renamed: a viewer that sees it has
// all the output). The destructor removes both.
class OutputSpool {
 public:
  // `name`: a file name in `dir` (no '/').
  static Result<std::unique_ptr<OutputSpool>> Create(const std::string& dir,
                                                     const std::string& name);
  OutputSpool(const OutputSpool&) = delete;
  OutputSpool& operator=(const OutputSpool&) = delete;
  ~OutputSpool();
  const std::string& path() const { return path_; }

  // From any thread. After Finish: ignored.
  Status Append(std::string_view bytes);
  // Once; `exit_code` as a shell shows it (0-255).
  Status Finish(int exit_code);
  bool finished() const;

 private:
  OutputSpool(std::string path, UniqueFd fd) : path_(std::move(path)), fd_(std::move(fd)) {}
  std::string path_;
  mutable std::mutex mu_;
  UniqueFd fd_;
  bool finished_ = false;
};

// The viewer (`deepbox acp-view`): copies `path` to `out_fd` as it grows
// (inotify on its directory; a 1 s poll besides), until path + ".exit"
// appears, then the rest, and returns the exit status it holds. NOT_FOUND
// when the spool is removed first (the `deepbox acp` that wrote it ended);
// INVALID_ARGUMENT for anything but a spool: a regular file of the caller's,
// named N.out in a deepbox-acp-XXXXXX directory (a symlink is not followed).
Result<int> FollowSpool(const std::string& path, int out_fd);

}  // namespace deepbox::acp
