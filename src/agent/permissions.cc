#include "agent/permissions.h"

#include <set>

#include "agent/glob_match.h"
#include "agent/paths.h"
#include "agent/text.h"
#include "common/strings.h"

namespace deepbox::agent {

std::string_view FsOperationName(FsOperation op) {
  return op == FsOperation::kRead ? "read" : "write";
}

Result<PermissionSet> PermissionSet::Create(std::vector<PermissionRule> rules) {
  for (const auto& rule : rules) {
    for (const auto& path : rule.paths) {
      if (!path.starts_with("/")) {
        return MakeError(ErrorCode::kInvalidArgument,
                         "Permission path must start with '/': '" + path + "'");
      }
      std::string posix = ReplaceAll(path, "\\", "/");
      for (std::string_view part : Split(posix, '/')) {
        if (part == "..") {
          return MakeError(ErrorCode::kInvalidArgument,
                           "Permission path must not contain '..': '" + path + "'");
        }
        if (part == "~") {
          return MakeError(ErrorCode::kInvalidArgument,
                           "Permission path must not contain '~': '" + path + "'");
        }
      }
    }
  }
  PermissionSet set;
  set.rules_ = std::move(rules);
  return set;
}

namespace {
bool HasOp(const PermissionRule& rule, FsOperation op) {
  for (auto o : rule.operations) {
    if (o == op) return true;
  }
  return false;
}

bool PathsOverlap(std::string_view a, std::string_view b) {
  return PathIsWithin(a, b) || PathIsWithin(b, a);
}
}  // namespace

PermissionMode PermissionSet::Check(FsOperation op, std::string_view path) const {
  for (const auto& rule : rules_) {
    if (!HasOp(rule, op)) continue;
    for (const auto& pattern : rule.paths) {
      if (GlobMatch(path, pattern)) return rule.mode;
    }
  }
  return PermissionMode::kAllow;
}

bool PermissionSet::SubtreeMayAsk(FsOperation op, std::string_view path) const {
  for (const auto& rule : rules_) {
    if (rule.mode != PermissionMode::kAsk || !HasOp(rule, op)) continue;
    for (const auto& pattern : rule.paths) {
      if (PathsOverlap(path, GlobAnchor(pattern))) return true;
    }
  }
  return false;
}

std::vector<std::string> PermissionSet::DeleteDenyPatterns(std::string_view target,
                                                           bool has_descendants) const {
  std::vector<std::string> out;
  if (!has_descendants) {
    for (const auto& rule : rules_) {
      if (!HasOp(rule, FsOperation::kWrite)) continue;
      std::vector<std::string> matched;
      for (const auto& pattern : rule.paths) {
        if (GlobMatch(target, pattern)) matched.push_back(pattern);
      }
      if (matched.empty()) continue;
      if (rule.mode == PermissionMode::kDeny) return matched;
      return {};
    }
    return {};
  }
  std::set<std::string> seen;
  for (const auto& rule : rules_) {
    if (rule.mode != PermissionMode::kDeny || !HasOp(rule, FsOperation::kWrite)) continue;
    for (const auto& pattern : rule.paths) {
      if (seen.count(pattern)) continue;
      std::string anchor = GlobAnchor(pattern);
      bool overlaps = false;
      if (HasGlobMagic(pattern)) {
        // The pattern could match the target, something beneath it, or an
        // ancestor of it: fail closed unless it clearly cannot.
        if (anchor == "/" || GlobMatch(target, pattern) || PathIsWithin(anchor, target)) {
          overlaps = true;
        } else if (PathIsWithin(target, anchor)) {
          std::string_view rest = std::string_view(pattern).substr(anchor.size());
          while (!rest.empty() && rest.front() == '/') rest.remove_prefix(1);
          bool single =
              rest.find('/') == std::string_view::npos && rest.find("**") == std::string_view::npos;
          if (!single) {
            overlaps = true;
          } else {
            // Blocked when an ancestor of the target (below the anchor) matches.
            std::string prefix = anchor;
            std::string_view tail = target.substr(anchor.size());
            for (std::string_view part : Split(tail, '/')) {
              if (part.empty()) continue;
              prefix = JoinPath(prefix, part);
              if (prefix.size() >= target.size()) break;
              if (GlobMatch(prefix, pattern)) {
                overlaps = true;
                break;
              }
            }
          }
        }
      } else {
        overlaps = PathsOverlap(target, anchor);
      }
      if (overlaps) {
        seen.insert(pattern);
        out.push_back(pattern);
      }
    }
  }
  return out;
}

std::string PermissionDeniedMessage(FsOperation op, std::string_view path) {
  return "Error: permission denied for " + std::string(FsOperationName(op)) + " on " +
         std::string(path);
}

}  // namespace deepbox::agent
