#include "agent/paths.h"

#include <vector>

#include "agent/text.h"
#include "common/strings.h"

namespace deepbox::agent {

Result<std::string> ValidatePath(std::string_view path) {
  std::string posix = ReplaceAll(path, "\\", "/");
  for (std::string_view part : Split(posix, '/')) {
    if (part == "..") {
      return MakeError(ErrorCode::kInvalidArgument,
                       "Path traversal not allowed: " + std::string(path));
    }
  }
  if (path.starts_with("~")) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "Path traversal not allowed: " + std::string(path));
  }
  if (path.size() >= 2 && path[1] == ':' &&
      ((path[0] >= 'a' && path[0] <= 'z') || (path[0] >= 'A' && path[0] <= 'Z'))) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "Windows absolute paths are not supported: " + std::string(path) +
                         ". Please use virtual paths starting with / (e.g., /workspace/file.txt)");
  }
  return NormalizeAbsolute("/" + posix);
}

Result<std::string> ResolveToolPath(std::string_view path, std::string_view root) {
  auto validated = ValidatePath(path);
  if (!validated) return validated;
  std::string posix = ReplaceAll(path, "\\", "/");
  if (!posix.starts_with("/")) {
    return NormalizeAbsolute(std::string(root) + "/" + posix);
  }
  return validated;
}

std::string NormalizeAbsolute(std::string_view path) {
  std::vector<std::string_view> parts;
  for (std::string_view part : Split(path, '/')) {
    if (part.empty() || part == ".") continue;
    if (part == "..") {
      if (!parts.empty()) parts.pop_back();
      continue;
    }
    parts.push_back(part);
  }
  std::string out;
  for (std::string_view part : parts) {
    out.push_back('/');
    out.append(part);
  }
  if (out.empty()) out = "/";
  return out;
}

std::string SanitizeToolCallId(std::string_view id) {
  std::string out(id);
  for (char& c : out) {
    if (c == '.' || c == '/' || c == '\\') c = '_';
  }
  return out;
}

std::string JoinPath(std::string_view dir, std::string_view name) {
  std::string out(dir);
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  if (out.empty() || out.back() != '/') out.push_back('/');
  while (!name.empty() && name.front() == '/') name.remove_prefix(1);
  out.append(name);
  return out;
}

bool PathIsWithin(std::string_view path, std::string_view dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.remove_suffix(1);
  if (dir == "/") return path.starts_with("/");
  if (path == dir) return true;
  return path.size() > dir.size() && path.starts_with(dir) && path[dir.size()] == '/';
}

}  // namespace deepbox::agent
