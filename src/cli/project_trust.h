// Project files: what `deepbox run` would read from the directory it runs in
// (./.mcp.json, ./.deepagents/AGENTS.md, ./.deepagents/skills/), and the
// user's decision to trust them.
//
// Files in the working directory are untrusted input (docs/security.md): a
// cloned repository or a directory copied out of a sandbox can plant them,
// and a host-side MCP server is a program run as the user. So they are used
// only after an explicit trust decision, as Claude Code does:
//   * they are read beneath a directory fd, every component opened with
//     O_NOFOLLOW (a symlink, ".deepagents" itself included, is refused with a
//     notice: nothing outside the directory is read);
//   * the decision is recorded outside the directory, in the user's state dir
//     ($XDG_STATE_HOME/deepbox/trusted-projects/, else
//     ~/.local/state/deepbox/trusted-projects/; 0700, records 0600), bound to
//     the directory and a SHA-256 of exactly what was read: a changed file is
//     asked about again;
//   * on a terminal the user is asked (the servers' commands and URLs shown);
//     without one, untrusted project files are ignored with one notice.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "cli/run_agent_files.h"
#include "common/error.h"

namespace deepbox::run {

inline constexpr uint64_t kMaxProjectMcpBytes = 1u << 20;

struct ProjectInputs {
  std::string dir;                           // absolute
  std::optional<std::string> mcp_json;       // ./.mcp.json's content
  std::optional<AgentFiles::Source> memory;  // ./.deepagents/AGENTS.md
  std::optional<AgentFiles::Source> skills;  // ./.deepagents/skills
  // Symlinks and other entries not read, and why (one line each).
  std::vector<std::string> refused;

  bool empty() const { return !mcp_json && !memory && !skills; }
  // SHA-256 (hex) of everything above that would be used.
  std::string Hash() const;
  // What the user is asked about: one line per file (MCP servers listed with
  // their commands and URLs), terminal-safe.
  std::vector<std::string> Describe() const;
};

// Reads the project files of `dir` that are wanted (absent ones are skipped).
// An unreadable directory or an oversized .mcp.json is an error.
Result<ProjectInputs> ReadProjectInputs(const std::string& dir, bool want_mcp, bool want_memory,
                                        bool want_skills);

// Where trust decisions are kept (see above).
std::string DefaultTrustDir();

class TrustStore {
 public:
  explicit TrustStore(std::string dir) : dir_(std::move(dir)) {}
  const std::string& dir() const { return dir_; }
  // True only for a record deepbox wrote for this directory and this hash,
  // owned by this user and writable by nobody else.
  bool IsTrusted(const std::string& project_dir, const std::string& hash) const;
  Status Trust(const std::string& project_dir, const std::string& hash) const;

 private:
  std::string RecordPath(const std::string& project_dir) const;
  std::string dir_;
};

// mkdir -p with 0700 for every directory it creates, and the last component
// chmod'ed to 0700 (it must then be a directory owned by this user).
Status MakePrivateDirs(const std::string& dir);

// SHA-256 of `data`, lower-case hex.
std::string Sha256Hex(std::string_view data);

}  // namespace deepbox::run
