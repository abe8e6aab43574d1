// The provider-neutral sandbox interface. The agent's tools call only this;
// the providers (provider.h) hand out objects implementing it (both backed
// by a deepbox-sandboxd daemon inside the sandbox).
//
// Paths: absolute paths are real paths inside the sandbox (e.g.
// "/workspace/fib.py"); relative paths are relative to the sandbox's
// workspace root. Paths outside the daemon's root are refused with
// PERMISSION_DENIED.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace deepbox {

// ------------------------------------------------------------------ processes

struct TerminalSize {
  uint16_t rows = 24;
  uint16_t cols = 80;
};

// The stdin of a running command started by ExecStream with
// ExecRequest::stdin_stream. Thread-safe: fed from other threads while
// ExecStream delivers output; valid until ExecStream returns.
class ExecInput {
 public:
  virtual ~ExecInput() = default;
  // Returns once the command's stdin (a pipe, or its terminal) has taken all
  // of `bytes` (so a command that does not read makes this wait). CONFLICT or
  // NOT_FOUND once the command has ended or closed its stdin.
  virtual Status Write(std::string_view bytes) = 0;
  // End of input: EOF on a pipe. On a terminal it only stops further input
  // (the terminal's own EOF is the byte ^D, sent with Write).
  virtual Status Close() = 0;
  // New window size of the terminal (ExecRequest::tty only).
  virtual Status Resize(TerminalSize size) = 0;
};

struct ExecRequest {
  std::vector<std::string> argv;           // either argv...
  std::string shell;                       // ...or a shell string run via /bin/sh -c
  std::string cwd;                         // empty = the workspace root
  std::map<std::string, std::string> env;  // added to the daemon's base environment
  std::string stdin_data;
  std::chrono::milliseconds timeout{0};  // 0 = the daemon's default
  size_t max_output_bytes = 0;           // 0 = the daemon's default cap

  // Interactive use (`deepbox sandbox exec -i/-t`), ExecStream only. With
  // stdin_stream the command's stdin stays open and stdin_data is ignored:
  // once the command runs, on_started receives its ExecInput (on the thread
  // that called ExecStream; hand it to another thread and return). Such a
  // command has no default timeout: it ends with its caller.
  bool stdin_stream = false;
  std::function<void(ExecInput& input)> on_started;
  // With on_started: called on the thread that called ExecStream just before
  // the ExecInput it gave is destroyed (the command ended, or the stream
  // failed or was cancelled), while it is still valid. When this returns, no
  // other thread may be inside that ExecInput or call it again: stop and
  // join the writers here (a write in progress returns once the command has
  // ended).
  std::function<void()> on_input_closing;
  // Run the command on a pseudo-terminal of this size (its stdin, stdout and
  // stderr and its controlling terminal): all output arrives as kStdout, with
  // the terminal's line discipline applied ("\n" becomes "\r\n").
  std::optional<TerminalSize> tty;
  // ExecStream without stdin_stream: called on the calling thread, before the
  // command is sent, with the id the client named the exec by ("" when the
  // daemon cannot take one). A client that can cancel execs by id (e.g.
  // SandboxdClient::CancelExec, from any thread) stops the command with it
  // while the stream goes on to its `killed` exit.
  std::function<void(const std::string& exec_id)> on_exec_id;
};

enum class ExitKind { kExited, kSignaled, kTimedOut, kKilled, kSpawnFailed };
std::string_view ExitKindName(ExitKind kind);  // "exited", "signaled", ...

struct ExecResult {
  ExitKind kind = ExitKind::kExited;
  int exit_code = 0;  // kExited
  int signal = 0;     // kSignaled / kTimedOut (the signal that ended it)
  // The command's bytes, exact (binary output stays intact).
  std::string stdout_data;
  std::string stderr_data;
  std::string combined;  // stdout and stderr interleaved as produced
  bool stdout_truncated = false;
  bool stderr_truncated = false;
  bool truncated() const { return stdout_truncated || stderr_truncated; }
  std::chrono::milliseconds duration{0};
  std::string error;  // kSpawnFailed: why
  // Killed by the kernel at the sandbox's memory limit (a provider that can
  // tell: the local one reads its cgroup's OOM-kill count around the command).
  bool oom_killed = false;
  uint64_t memory_limit_bytes = 0;  // that limit, when known (0: unknown)
};

// "killed at the sandbox's memory limit (256 MiB)" for a result with
// oom_killed ("... memory limit" without a known limit), else "".
std::string OomKillNote(const ExecResult& result);

enum class OutputStream { kStdout, kStderr };
// `data` is the command's output, byte for byte (binary output stays intact;
// it need not be valid UTF-8, and chunks may split characters): whoever shows
// it to a model or a terminal UI makes it valid text (see common/utf8.h).
// Return false to cancel the command (its process group is killed). During
// silence the callback is also called with empty data every keepalive
// interval (2 s), so a caller can cancel a command that prints nothing.
using OutputCallback = std::function<bool(OutputStream stream, std::string_view data)>;

// ------------------------------------------------------------------ files

enum class FileType { kFile, kDirectory, kSymlink, kOther };
std::string_view FileTypeName(FileType type);  // "file", "directory", "symlink", "other"

struct FileInfo {
  std::string path;  // absolute
  std::string name;
  FileType type = FileType::kFile;
  int64_t size = 0;
  uint32_t mode = 0;        // permission bits
  std::string modified_at;  // RFC 3339
  std::string link_target;  // kSymlink
  bool is_dir() const { return type == FileType::kDirectory; }
};

struct ReadOptions {
  // Line window (deepagents read): 0-based first line and line count.
  std::optional<int64_t> line_offset;
  std::optional<int64_t> line_limit;
  // Byte range (used when no line window is given).
  std::optional<int64_t> byte_offset;
  std::optional<int64_t> byte_length;
  size_t max_bytes = 0;  // 0 = daemon default
};

struct ReadResult {
  std::string content;       // raw bytes (may be binary)
  bool binary = false;       // NUL or invalid UTF-8 in the first 8 KiB
  bool truncated = false;    // cut at max_bytes
  int64_t size = 0;          // file size in bytes
  int64_t total_lines = -1;  // line window reads: lines in the file (-1 unknown)
  int64_t start_line = 0;    // line window reads: 0-based first line returned
  int64_t lines_returned = 0;
  bool more_lines = false;
};

struct EditResult {
  int occurrences = 0;
};

struct GlobResult {
  std::vector<std::string> paths;  // absolute, sorted, files only
  bool truncated = false;
  bool unreadable = false;  // a directory could not be read: the paths are incomplete
};

enum class GrepOutputMode { kContent, kFilesWithMatches, kCount };

struct GrepRequest {
  std::string pattern;
  bool regex = false;  // default literal
  bool case_insensitive = false;
  std::string path;  // file or directory; empty = root
  std::string glob;  // optional file filter
  GrepOutputMode output_mode = GrepOutputMode::kContent;
  size_t max_count = 0;  // 0 = daemon default
};

struct GrepMatch {
  std::string path;
  int64_t line = 0;  // 1-based
  std::string text;
};

struct GrepResult {
  std::vector<GrepMatch> matches;                       // kContent
  std::vector<std::string> files;                       // kFilesWithMatches
  std::vector<std::pair<std::string, int64_t>> counts;  // kCount
  bool truncated = false;
};

// Every file beneath a directory with what shows a change (Sandbox::Tree).
struct TreeRequest {
  std::string path;                    // the base directory; empty = the root
  size_t max_entries = 0;              // 0 = daemon default (100000)
  std::vector<std::string> skip_dirs;  // directory names not entered (".git")
};

struct TreeEntry {
  std::string path;  // relative to the base
  bool symlink = false;
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  uint32_t mode = 0;  // permission bits
  bool operator==(const TreeEntry&) const = default;
};

struct TreeResult {
  std::vector<TreeEntry> entries;  // sorted by path
  bool truncated = false;
  bool unreadable = false;  // a directory could not be read: incomplete
};

// ------------------------------------------------------------------ the interface

class Sandbox {
 public:
  virtual ~Sandbox() = default;

  // Stable identifier ("sb-1a2b3c" locally, "<namespace>/<claim>" on k8s).
  virtual std::string id() const = 0;
  // The workspace root inside the sandbox (e.g. "/workspace").
  virtual std::string root() const = 0;

  virtual Result<ExecResult> Exec(const ExecRequest& request) = 0;
  // Same, delivering output as it is produced. The result's output fields
  // are empty; the callback saw everything.
  virtual Result<ExecResult> ExecStream(const ExecRequest& request,
                                        const OutputCallback& on_output) = 0;

  virtual Result<FileInfo> Stat(const std::string& path) = 0;
  virtual Result<std::vector<FileInfo>> List(const std::string& path) = 0;
  // The same entries where only the names and types count (an agent's `ls`):
  // size, mode, modified_at and link_target may be left empty. A sandbox that
  // cannot list more cheaply answers List's.
  virtual Result<std::vector<FileInfo>> ListNames(const std::string& path);
  virtual Result<ReadResult> Read(const std::string& path, const ReadOptions& options) = 0;
  // Atomic create-or-overwrite; parent directories are created.
  virtual Status Write(const std::string& path, std::string_view content, uint32_t mode = 0644) = 0;
  virtual Result<EditResult> Edit(const std::string& path, const std::string& old_string,
                                  const std::string& new_string, bool replace_all) = 0;
  virtual Status Mkdir(const std::string& path, bool parents = true) = 0;
  virtual Status Move(const std::string& from, const std::string& to, bool overwrite = false) = 0;
  virtual Status Delete(const std::string& path, bool recursive = false) = 0;
  virtual Result<GlobResult> Glob(const std::string& pattern, const std::string& path,
                                  size_t max_results = 0) = 0;
  virtual Result<GrepResult> Grep(const GrepRequest& request) = 0;
  // One walk listing every regular file and symlink with its size and mtime
  // (symlinks not followed). UNIMPLEMENTED where a sandbox cannot (a daemon
  // without the fs_tree feature).
  virtual Result<TreeResult> Tree(const TreeRequest& request);

  // Whole-file transfer of raw bytes.
  virtual Result<std::string> Download(const std::string& path) = 0;
  virtual Status Upload(const std::string& path, std::string_view content,
                        uint32_t mode = 0644) = 0;
};

}  // namespace deepbox
