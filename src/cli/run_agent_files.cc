#include "cli/run_agent_files.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/project_trust.h"

namespace deepbox::run {

namespace fs = std::filesystem;

namespace {

Result<std::string> ReadHostFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return MakeSyscallError("open", errno, path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return MakeSyscallError("read", errno, path.string());
  return ss.str();
}

uint32_t ModeOf(const fs::file_status& st) {
  return (st.permissions() & fs::perms::owner_exec) != fs::perms::none ? 0755 : 0644;
}

}  // namespace

Result<AgentFiles> ReadAgentFiles(const std::vector<std::string>& skills_dirs,
                                  const std::vector<std::string>& memory_files) {
  AgentFiles out;
  uint64_t total = 0;
  auto add = [&](AgentFiles::Source& src, const fs::path& path, std::string relative,
                 const fs::file_status& st) -> Status {
    std::error_code ec;
    uint64_t size = fs::file_size(path, ec);
    if (ec) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("{}: {}", path.string(), ec.message()));
    }
    if (size > kMaxAgentFileBytes) {
      out.skipped.push_back(
          fmt::format("{} ({} bytes, over {} MiB)", path.string(), size, kMaxAgentFileBytes >> 20));
      return {};
    }
    total += size;
    if (total > kMaxAgentFilesBytes) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("skills and memory files add up to more than {} MiB (at {}); "
                                   "point --skills at a smaller directory",
                                   kMaxAgentFilesBytes >> 20, path.string()));
    }
    auto content = ReadHostFile(path);
    if (!content) return tl::unexpected(content.error());
    src.files.push_back({std::move(relative), std::move(*content), ModeOf(st)});
    return {};
  };

  for (const auto& dir : skills_dirs) {
    AgentFiles::Source src;
    src.host_path = dir;
    std::error_code ec;
    fs::recursive_directory_iterator it(dir, fs::directory_options::none, ec), end;
    if (ec) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("--skills {}: {}", dir, ec.message()));
    }
    for (; it != end; it.increment(ec)) {
      if (ec) {
        return MakeError(ErrorCode::kInvalidArgument,
                         fmt::format("--skills {}: {}", dir, ec.message()));
      }
      fs::file_status st = it->symlink_status(ec);
      if (ec) continue;
      std::string relative = fs::relative(it->path(), dir, ec).string();
      if (fs::is_symlink(st)) {
        // Never followed: a link could lead anywhere on this machine.
        out.skipped.push_back(it->path().string() + " (a symbolic link)");
        continue;
      }
      if (!fs::is_regular_file(st)) continue;  // directories are created as needed
      if (auto s = add(src, it->path(), relative, st); !s) return tl::unexpected(s.error());
      if (it->path().filename() == "SKILL.md" && it.depth() == 1) ++src.skills;
    }
    std::sort(src.files.begin(), src.files.end(),
              [](const auto& a, const auto& b) { return a.relative < b.relative; });
    out.skills.push_back(std::move(src));
  }
  for (const auto& file : memory_files) {
    AgentFiles::Source src;
    src.host_path = file;
    std::error_code ec;
    fs::file_status st = fs::status(file, ec);
    if (ec || !fs::is_regular_file(st)) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("--memory-file {}: not a readable file", file));
    }
    if (auto s = add(src, file, fs::path(file).filename().string(), st); !s) {
      return tl::unexpected(s.error());
    }
    out.memory.push_back(std::move(src));
  }
  return out;
}

Result<CopiedAgentFiles> CopyAgentFiles(Sandbox& sandbox, const AgentFiles& files) {
  CopiedAgentFiles out;
  const std::string base = sandbox.root() + "/.deepagents";
  std::vector<std::string> said;
  for (size_t k = 0; k < files.skills.size(); ++k) {
    const auto& src = files.skills[k];
    std::string dir = fmt::format("{}/skills/{}", base, k + 1);
    if (auto st = sandbox.Mkdir(dir, true); !st) return tl::unexpected(st.error());
    for (const auto& f : src.files) {
      if (auto st = sandbox.Write(dir + "/" + f.relative, f.content, f.mode); !st) {
        return tl::unexpected(st.error());
      }
    }
    out.skills_dirs.push_back(dir);
    said.push_back(
        fmt::format("{} skill{} from {}", src.skills, src.skills == 1 ? "" : "s", src.host_path));
  }
  for (size_t k = 0; k < files.memory.size(); ++k) {
    const auto& src = files.memory[k];
    if (src.files.empty()) continue;  // skipped (too big)
    std::string path = fmt::format("{}/memory/{}/{}", base, k + 1, src.files[0].relative);
    if (auto st = sandbox.Write(path, src.files[0].content, 0644); !st) {
      return tl::unexpected(st.error());
    }
    out.memory_paths.push_back(path);
    said.push_back("memory " + src.host_path);
  }
  if (!said.empty()) {
    out.summary = "copied into the sandbox under " + base + ": ";
    for (size_t i = 0; i < said.size(); ++i) out.summary += (i ? ", " : "") + said[i];
  }
  for (const auto& s : files.skipped) {
    out.summary += (out.summary.empty() ? "" : "; ") + std::string("skipped ") + s;
  }
  return out;
}

Status CheckThreadsDir(const std::string& dir) {
  if (dir.empty()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "no directory for threads: HOME is unset and this user has no home; set "
                     "DEEPBOX_THREADS_DIR (or HOME)");
  }
  std::error_code ec;
  // 0700 for every directory created, and the threads directory itself
  // (thread files hold tasks and tool output; their names say when each run was).
  if (auto st = MakePrivateDirs(dir); !st) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("cannot create {}: {}", dir, st.error().message));
  }
  if (!fs::is_directory(dir, ec)) {
    return MakeError(ErrorCode::kInvalidArgument, fmt::format("{} is not a directory", dir));
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0) return MakeSyscallError("access", errno, dir);
  return {};
}

}  // namespace deepbox::run
