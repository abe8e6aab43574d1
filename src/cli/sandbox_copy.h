// Copies files and directory trees between the host and a sandbox, for
// `deepbox sandbox cp`. Nothing here trusts the sandbox (see docs/security.md):
//   * destination names come from the user's arguments, never from the
//     daemon's answers (its stat's "path" or "name" are ignored);
//   * everything received is written beneath the destination the user
//     named through the daemon's own confined walk (src/fs: a Root adopted
//     on that directory; no symlink followed, nothing resolved outside it),
//     into temporary files and symlinks renamed into place: no member of a
//     sandbox's archive can name, create or follow anything outside that
//     destination;
//   * sizes, modes and types from the daemon are bounded and validated; an
//     archive member the daemon would never produce (absolute or ".." names,
//     devices, hard links, names outside the requested directory) fails the
//     copy with a clear error, and what the failed copy created is removed.
// Host sources are opened with O_NOFOLLOW and checked with fstat (what was
// opened, not what lstat saw); symlinks are copied as symlinks, never
// followed. Both directions stream in bounded memory (any size up to the
// disk): files through the daemon's raw transfer, directories as one tar
// stream (file by file if the daemon has no tar endpoint).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "common/error.h"
#include "sandbox/sandboxd_client.h"

namespace deepbox::cli {

struct CopyStats {
  uint64_t files = 0;
  uint64_t directories = 0;
  uint64_t symlinks = 0;
  uint64_t bytes = 0;
  // Host entries that cannot be copied (FIFOs, sockets, devices), as shown.
  std::vector<std::string> skipped;
  // Out of a sandbox: what was written that `deepbox run` reads from the
  // directory it runs in (.mcp.json files, .deepagents/ directories), as host
  // paths; FromSandbox also says so on `warnings`.
  std::vector<std::string> deepbox_files;
};

class SandboxCopier {
 public:
  // `warnings` receives one line per skipped entry (terminal-safe text).
  explicit SandboxCopier(SandboxdClient& client, std::FILE* warnings = stderr)
      : client_(client), warnings_(warnings) {}

  // HOST_SRC -> SANDBOX_DST. A DST that is a directory, or ends in '/',
  // receives SRC under SRC's own name.
  Result<CopyStats> ToSandbox(const std::string& host_src, const std::string& sandbox_dst);
  // SANDBOX_SRC -> HOST_DST. A DST that is an existing directory (or ends in
  // '/') receives SRC under the name the user gave it (its last component);
  // SRC ending in "/." copies a directory's contents into DST.
  Result<CopyStats> FromSandbox(const std::string& sandbox_src, const std::string& host_dst);

 private:
  Result<CopyStats> FromSandboxQuietly(const std::string& sandbox_src, const std::string& host_dst);
  SandboxdClient& client_;
  std::FILE* warnings_;
};

// The name a copy takes from the user's SRC argument: its last component,
// trailing slashes ignored. "" for "." and "/." (copy the contents); an error
// for "..", "/" and empty names, which name no entry of their own.
Result<std::string> CopyNameFromArgument(const std::string& src);

}  // namespace deepbox::cli
