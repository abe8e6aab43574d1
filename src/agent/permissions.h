// Path permissions for the file tools (deepagents FilesystemPermission):
// rules are checked in declaration order and the first rule whose operation
// and glob match wins; no match = allow. "ask" pauses the call for a human
// decision (the HITL interrupt), "deny" makes the tool answer
// "Error: permission denied for <op> on <path>".
//
// Scope: the rules guard the file tools (ls, read_file, write_file,
// edit_file, delete, glob, grep). `execute` runs arbitrary commands and is
// not path-checked (deepagents refuses to combine permissions with an
// executing backend; deepbox allows it and documents the gap).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace deepbox::agent {

enum class FsOperation { kRead, kWrite };
enum class PermissionMode { kAllow, kDeny, kAsk };

std::string_view FsOperationName(FsOperation op);  // "read" | "write"

struct PermissionRule {
  std::vector<FsOperation> operations;
  std::vector<std::string> paths;  // absolute glob patterns (e.g. "/workspace/secrets/**")
  PermissionMode mode = PermissionMode::kAllow;
};

class PermissionSet {
 public:
  PermissionSet() = default;
  // Validates the rules: every path must start with "/" and contain no ".."
  // or "~" component.
  static Result<PermissionSet> Create(std::vector<PermissionRule> rules);

  bool empty() const { return rules_.empty(); }
  const std::vector<PermissionRule>& rules() const { return rules_; }

  // First matching rule's mode (allow when nothing matches).
  PermissionMode Check(FsOperation op, std::string_view path) const;
  // For bulk tools (ls/glob/grep) over the subtree at `path`: true when an
  // "ask" rule for `op` could match something inside it.
  bool SubtreeMayAsk(FsOperation op, std::string_view path) const;
  // Deny-write patterns blocking a recursive delete of `target` (a deny on
  // anything in its subtree blocks it); for a plain file the first matching
  // rule decides.
  std::vector<std::string> DeleteDenyPatterns(std::string_view target, bool has_descendants) const;

 private:
  std::vector<PermissionRule> rules_;
};

// "Error: permission denied for read on /workspace/x"
std::string PermissionDeniedMessage(FsOperation op, std::string_view path);

}  // namespace deepbox::agent
