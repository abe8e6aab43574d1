#include "cli/project_trust.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <ctime>
#include <memory>

#include "agent/mcp/config.h"
#include "agent/text.h"
#include "common/json.h"
#include "common/make_dirs.h"
#include "common/terminal_text.h"
#include "common/unique_fd.h"
#include "common/user_state_dir.h"
#include "net/openssl_loader.h"

namespace deepbox::run {

namespace {

// OpenSSL's functions (net/openssl_loader.h: loaded on first use).
const net::LibOpenSsl& OpenSsl() { return net::RequireLibOpenSsl(); }

constexpr int kMaxSkillDepth = 16;
constexpr size_t kMaxSkillEntries = 10000;

// What openat(O_NOFOLLOW) of one name beneath `dirfd` found.
struct Opened {
  UniqueFd fd;
  bool absent = false;
  std::string refused;  // non-empty: not read, and why
};

Result<Opened> OpenBeneath(int dirfd, const std::string& name, const std::string& shown,
                           bool directory) {
  Opened out;
  int flags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW | (directory ? O_DIRECTORY : O_NONBLOCK);
  int fd = ::openat(dirfd, name.c_str(), flags);
  if (fd < 0) {
    int e = errno;
    struct stat lst {};
    if (e == ENOENT) {
      out.absent = true;
    } else if ((e == ELOOP || e == ENOTDIR) &&
               ::fstatat(dirfd, name.c_str(), &lst, AT_SYMLINK_NOFOLLOW) == 0) {
      // O_DIRECTORY|O_NOFOLLOW on a symlink fails ENOTDIR, not ELOOP.
      out.refused =
          S_ISLNK(lst.st_mode)
              ? shown +
                    " is a symbolic link: not followed (deepbox reads a project's "
                    "files only inside its directory)"
              : shown + " is not a " + (directory ? "directory" : "regular file") + ": not read";
    } else {
      return MakeSyscallError("openat", e, shown);
    }
    return out;
  }
  out.fd.reset(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0) return MakeSyscallError("fstat", errno, shown);
  if (directory ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode)) {
    out.fd.reset();
    out.refused =
        shown + (directory ? " is not a directory" : " is not a regular file") + ": not read";
  }
  return out;
}

Result<std::string> ReadFd(int fd, const std::string& shown, uint64_t cap) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return MakeSyscallError("fstat", errno, shown);
  if (static_cast<uint64_t>(st.st_size) > cap) {
    return MakeError(
        ErrorCode::kInvalidArgument,
        fmt::format("{}: {} bytes, over the {} MiB deepbox reads", shown, st.st_size, cap >> 20));
  }
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return MakeSyscallError("read", errno, shown);
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > cap) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("{}: over the {} MiB deepbox reads", shown, cap >> 20));
    }
  }
  return out;
}

uint32_t ModeOfFd(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return 0644;
  return (st.st_mode & S_IXUSR) != 0 ? 0755 : 0644;
}

// Every regular file beneath `dirfd`, never following a symlink.
Status WalkSkills(int dirfd, const std::string& shown, const std::string& prefix, int depth,
                  AgentFiles::Source& src, ProjectInputs& out, uint64_t& total, size_t& entries) {
  int dup = ::fcntl(dirfd, F_DUPFD_CLOEXEC, 0);
  if (dup < 0) return MakeSyscallError("fcntl", errno, shown);
  DIR* d = ::fdopendir(dup);
  if (d == nullptr) {
    int e = errno;
    ::close(dup);
    return MakeSyscallError("fdopendir", e, shown);
  }
  std::unique_ptr<DIR, int (*)(DIR*)> guard(d, ::closedir);
  std::vector<std::string> names;
  errno = 0;
  while (dirent* ent = ::readdir(d)) {
    std::string name = ent->d_name;
    if (name == "." || name == "..") continue;
    names.push_back(std::move(name));
    errno = 0;
  }
  if (errno != 0) return MakeSyscallError("readdir", errno, shown);
  std::sort(names.begin(), names.end());
  for (const auto& name : names) {
    if (++entries > kMaxSkillEntries) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("{}: more than {} entries", src.host_path, kMaxSkillEntries));
    }
    std::string rel = prefix.empty() ? name : prefix + "/" + name;
    std::string entry_shown = src.host_path + "/" + rel;
    struct stat st {};
    if (::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      return MakeSyscallError("fstatat", errno, entry_shown);
    }
    if (S_ISLNK(st.st_mode)) {
      out.refused.push_back(entry_shown + " is a symbolic link: not followed");
      continue;
    }
    if (S_ISDIR(st.st_mode)) {
      if (depth >= kMaxSkillDepth) {
        out.refused.push_back(entry_shown + ": nested too deep, not read");
        continue;
      }
      auto sub = OpenBeneath(dirfd, name, entry_shown, true);
      if (!sub) return tl::unexpected(sub.error());
      if (!sub->fd) {
        if (!sub->refused.empty()) out.refused.push_back(sub->refused);
        continue;
      }
      if (auto s = WalkSkills(sub->fd.get(), entry_shown, rel, depth + 1, src, out, total, entries);
          !s) {
        return s;
      }
      continue;
    }
    if (!S_ISREG(st.st_mode)) continue;
    auto f = OpenBeneath(dirfd, name, entry_shown, false);
    if (!f) return tl::unexpected(f.error());
    if (!f->fd) {
      if (!f->refused.empty()) out.refused.push_back(f->refused);
      continue;
    }
    struct stat fst {};
    if (::fstat(f->fd.get(), &fst) != 0) return MakeSyscallError("fstat", errno, entry_shown);
    if (static_cast<uint64_t>(fst.st_size) > kMaxAgentFileBytes) {
      out.refused.push_back(fmt::format("{}: {} bytes, over {} MiB, not read", entry_shown,
                                        fst.st_size, kMaxAgentFileBytes >> 20));
      continue;
    }
    total += static_cast<uint64_t>(fst.st_size);
    if (total > kMaxAgentFilesBytes) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("{}: the project's skills add up to more than {} MiB",
                                   src.host_path, kMaxAgentFilesBytes >> 20));
    }
    auto content = ReadFd(f->fd.get(), entry_shown, kMaxAgentFileBytes);
    if (!content) return tl::unexpected(content.error());
    src.files.push_back({rel, std::move(*content), ModeOfFd(f->fd.get())});
    if (depth == 1 && name == "SKILL.md") ++src.skills;
  }
  return {};
}

void HashPart(EVP_MD_CTX* ctx, std::string_view tag, std::string_view data) {
  std::string head = fmt::format("{}\n{}\n", tag, data.size());
  OpenSsl().EVP_DigestUpdate(ctx, head.data(), head.size());
  OpenSsl().EVP_DigestUpdate(ctx, data.data(), data.size());
}

std::string Hex(const unsigned char* p, size_t n) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    out += kDigits[p[i] >> 4];
    out += kDigits[p[i] & 15];
  }
  return out;
}

// A command-line argument as a shell would need it written.
std::string Quote(std::string_view a) {
  bool plain = !a.empty();
  for (char c : a) {
    plain = plain && (std::isalnum(static_cast<unsigned char>(c)) != 0 ||
                      std::string_view("_./=:,@%+-").find(c) != std::string_view::npos);
  }
  if (plain) return std::string(a);
  std::string out = "'";
  for (char c : a) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

std::string Sha256Hex(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  OpenSsl().EVP_Digest(data.data(), data.size(), md, &n, OpenSsl().EVP_sha256(), nullptr);
  return Hex(md, n);
}

std::string ProjectInputs::Hash() const {
  std::unique_ptr<EVP_MD_CTX, net::OpenSslFree<&net::LibOpenSsl::EVP_MD_CTX_free>> ctx(
      OpenSsl().EVP_MD_CTX_new());
  OpenSsl().EVP_DigestInit_ex(ctx.get(), OpenSsl().EVP_sha256(), nullptr);
  HashPart(ctx.get(), "deepbox-project-v1", dir);
  if (mcp_json) HashPart(ctx.get(), ".mcp.json", *mcp_json);
  if (memory && !memory->files.empty()) {
    HashPart(ctx.get(), ".deepagents/AGENTS.md", memory->files[0].content);
  }
  if (skills) {
    for (const auto& f : skills->files) {
      HashPart(ctx.get(), fmt::format(".deepagents/skills/{} {:o}", f.relative, f.mode), f.content);
    }
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  OpenSsl().EVP_DigestFinal_ex(ctx.get(), md, &n);
  return Hex(md, n);
}

std::vector<std::string> ProjectInputs::Describe() const {
  std::vector<std::string> out;
  if (mcp_json) {
    std::string path = dir + "/.mcp.json";
    auto set = agent::ParseMcpConfig(*mcp_json, path, agent::McpEnvLookup{});
    if (!set) {
      out.push_back(path + ": not a valid MCP configuration (" + set.error().message + ")");
    } else {
      out.push_back(path +
                    ": MCP servers; those without \"sandbox\": true run on this machine "
                    "as you:");
      for (const auto& s : set->servers) {
        std::string what;
        if (s.http) {
          what = "http " + s.url;
        } else {
          for (const auto& a : s.command) what += (what.empty() ? "" : " ") + Quote(a);
          if (s.sandbox) what += "  (in the sandbox)";
        }
        out.push_back("    " + s.name + ": " + what);
      }
      for (const auto& p : set->problems) out.push_back("    (not used) " + p);
    }
  }
  if (memory) out.push_back(memory->host_path + ": memory (given to the model)");
  if (skills) {
    out.push_back(
        fmt::format("{}: {} skill{}, {} file{} (copied into the sandbox, given to the "
                    "model)",
                    skills->host_path, skills->skills, skills->skills == 1 ? "" : "s",
                    skills->files.size(), skills->files.size() == 1 ? "" : "s"));
  }
  for (auto& line : out) line = SanitizeLineForTerminal(line);
  return out;
}

Result<ProjectInputs> ReadProjectInputs(const std::string& dir, bool want_mcp, bool want_memory,
                                        bool want_skills) {
  ProjectInputs out;
  out.dir = dir;
  if (!want_mcp && !want_memory && !want_skills) return out;
  UniqueFd root(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!root) return MakeSyscallError("open", errno, dir);
  if (want_mcp) {
    std::string shown = dir + "/.mcp.json";
    auto f = OpenBeneath(root.get(), ".mcp.json", shown, false);
    if (!f) return tl::unexpected(f.error());
    if (!f->refused.empty()) out.refused.push_back(f->refused);
    if (f->fd) {
      auto text = ReadFd(f->fd.get(), shown, kMaxProjectMcpBytes);
      if (!text) return tl::unexpected(text.error());
      out.mcp_json = std::move(*text);
    }
  }
  if (!want_memory && !want_skills) return out;
  std::string dd_shown = dir + "/.deepagents";
  auto dd = OpenBeneath(root.get(), ".deepagents", dd_shown, true);
  if (!dd) return tl::unexpected(dd.error());
  if (!dd->refused.empty()) out.refused.push_back(dd->refused);
  if (!dd->fd) return out;
  if (want_memory) {
    std::string shown = dd_shown + "/AGENTS.md";
    auto f = OpenBeneath(dd->fd.get(), "AGENTS.md", shown, false);
    if (!f) return tl::unexpected(f.error());
    if (!f->refused.empty()) out.refused.push_back(f->refused);
    if (f->fd) {
      auto text = ReadFd(f->fd.get(), shown, kMaxAgentFileBytes);
      if (!text) return tl::unexpected(text.error());
      AgentFiles::Source src;
      src.host_path = shown;
      src.files.push_back({"AGENTS.md", std::move(*text), 0644});
      out.memory = std::move(src);
    }
  }
  if (want_skills) {
    std::string shown = dd_shown + "/skills";
    auto s = OpenBeneath(dd->fd.get(), "skills", shown, true);
    if (!s) return tl::unexpected(s.error());
    if (!s->refused.empty()) out.refused.push_back(s->refused);
    if (s->fd) {
      AgentFiles::Source src;
      src.host_path = shown;
      uint64_t total = 0;
      size_t entries = 0;
      if (auto st = WalkSkills(s->fd.get(), shown, "", 0, src, out, total, entries); !st) {
        return tl::unexpected(st.error());
      }
      out.skills = std::move(src);
    }
  }
  return out;
}

std::string DefaultTrustDir() {
  // "" without a home: nothing is trusted, and trusting fails with a message.
  return UserStateDir(ProcessEnvironment(), "trusted-projects", "HOME").value_or("");
}

Status MakePrivateDirs(const std::string& dir) {
  if (auto st = MakeDirs(dir, 0700); !st) return st;
  // The last component: a directory of ours (not a symlink), 0700.
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return MakeSyscallError("open", errno, dir);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return MakeSyscallError("fstat", errno, dir);
  if (st.st_uid != ::geteuid()) {
    return MakeError(
        ErrorCode::kPermissionDenied,
        fmt::format("{} belongs to uid {}, not to you (uid {})", dir, st.st_uid, ::geteuid()));
  }
  if ((st.st_mode & 07777) != 0700 && ::fchmod(fd.get(), 0700) != 0) {
    return MakeSyscallError("fchmod", errno, dir);
  }
  return {};
}

std::string TrustStore::RecordPath(const std::string& project_dir) const {
  return dir_ + "/" + Sha256Hex(project_dir) + ".json";
}

bool TrustStore::IsTrusted(const std::string& project_dir, const std::string& hash) const {
  UniqueFd dfd(::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dfd) return false;
  struct stat st {};
  if (::fstat(dfd.get(), &st) != 0 || st.st_uid != ::geteuid() || (st.st_mode & 022) != 0) {
    return false;
  }
  std::string name = Sha256Hex(project_dir) + ".json";
  UniqueFd fd(::openat(dfd.get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!fd) return false;
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid() ||
      (st.st_mode & 022) != 0) {
    return false;
  }
  auto text = ReadFd(fd.get(), name, 64 * 1024);
  if (!text) return false;
  auto doc = ParseJsonObject(*text);
  if (!doc) return false;
  return GetOptString(*doc, "dir").value_or("") == project_dir &&
         GetOptString(*doc, "sha256").value_or("") == hash;
}

Status TrustStore::Trust(const std::string& project_dir, const std::string& hash) const {
  if (auto st = MakePrivateDirs(dir_); !st) return st;
  json::object o;
  o["dir"] = project_dir;
  o["sha256"] = hash;
  o["trusted_at"] = static_cast<int64_t>(std::time(nullptr));
  std::string text = ToJson(o) + "\n";
  std::string path = RecordPath(project_dir);
  std::string tmp = path + ".tmp" + std::to_string(::getpid());
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd) return MakeSyscallError("open", errno, tmp);
  std::string_view rest = text;
  while (!rest.empty()) {
    ssize_t n = ::write(fd.get(), rest.data(), rest.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int e = n < 0 ? errno : EIO;
      ::unlink(tmp.c_str());
      return MakeSyscallError("write", e, tmp);
    }
    rest.remove_prefix(static_cast<size_t>(n));
  }
  if (::fsync(fd.get()) != 0 || ::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    return MakeSyscallError("rename", e, path);
  }
  return {};
}

}  // namespace deepbox::run
