#include "cli/sandbox_copy.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <optional>
#include <thread>

#include "common/io.h"
#include "common/json.h"
#include "common/terminal_text.h"
#include "common/unique_fd.h"
#include "fs/archive_loader.h"
#include "fs/atomic_file.h"
#include "fs/dir_entries.h"
#include "fs/path_resolver.h"
#include "net/http_client.h"
#include "net/url.h"

namespace deepbox::cli {
namespace {

constexpr size_t kBuffer = 256 * 1024;
constexpr int kMaxDepth = 256;
constexpr size_t kMaxName = 255;
constexpr size_t kMaxLinkTarget = 4095;

// ------------------------------------------------------------ libarchive

// ------------------------------------------------------------ names

std::string Shown(std::string_view text) { return SanitizeLineForTerminal(text); }

std::string ArchiveError(const fs::LibArchive& A, archive* a) {
  const char* e = A.archive_error_string(a);
  return Shown(e != nullptr ? e : "unknown libarchive error");
}

// Splits a path into components, dropping empty and "." ones. nullopt for a
// ".." component (never resolved lexically on untrusted names).
std::optional<std::vector<std::string>> Components(std::string_view name) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= name.size()) {
    size_t slash = name.find('/', start);
    if (slash == std::string_view::npos) slash = name.size();
    std::string_view c = name.substr(start, slash - start);
    start = slash + 1;
    if (c.empty() || c == ".") continue;
    if (c == "..") return std::nullopt;
    parts.emplace_back(c);
  }
  return parts;
}

bool ValidComponent(std::string_view c) {
  return !c.empty() && c != "." && c != ".." && c.size() <= kMaxName &&
         c.find('/') == std::string_view::npos && c.find('\0') == std::string_view::npos;
}

std::string JoinComponents(const std::vector<std::string>& parts) {
  std::string out;
  for (const auto& p : parts) {
    if (!out.empty()) out += '/';
    out += p;
  }
  return out;
}

std::string JoinSandboxPath(const std::string& dir, const std::string& name) {
  if (dir.empty() || dir == ".") return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

// Lexical absolute form of a sandbox path (relative ones are relative to the
// daemon's root); ".." pops a component (the user's own argument).
std::vector<std::string> SandboxComponents(const std::string& root, const std::string& path) {
  std::string abs = !path.empty() && path[0] == '/' ? path : root + "/" + path;
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= abs.size()) {
    size_t slash = abs.find('/', start);
    if (slash == std::string::npos) slash = abs.size();
    std::string c = abs.substr(start, slash - start);
    start = slash + 1;
    if (c.empty() || c == ".") continue;
    if (c == "..") {
      if (!parts.empty()) parts.pop_back();
      continue;
    }
    parts.push_back(std::move(c));
  }
  return parts;
}

// Whether a symlink at `rel` (relative to the top of a copied tree) pointing
// to `target` stays inside the tree, judged lexically. The daemon accepts
// only such links from an archive (it refuses absolute and climbing ones).
bool LinkStaysInside(const std::string& rel, const std::string& target) {
  if (target.empty() || target[0] == '/') return false;
  int depth = static_cast<int>(std::count(rel.begin(), rel.end(), '/'));  // dirs above the link
  size_t start = 0;
  while (start <= target.size()) {
    size_t slash = target.find('/', start);
    if (slash == std::string::npos) slash = target.size();
    std::string_view c(target.data() + start, slash - start);
    start = slash + 1;
    if (c.empty() || c == ".") continue;
    depth += c == ".." ? -1 : 1;
    if (depth < 0) return false;
  }
  return true;
}

Result<size_t> ReadSome(int fd, char* buf, size_t size, const std::string& what) {
  for (;;) {
    ssize_t n = read(fd, buf, size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return MakeSyscallError("read", errno, what);
    return static_cast<size_t>(n);
  }
}

// ------------------------------------------------------------ host destination

// A host directory the user named, and everything created beneath it. Every
// entry is reached through the confined root of src/fs (fs::Root adopted on
// the directory: beneath it, no symlink followed), and files and symlinks are
// written to a temporary name renamed into place (fs::AtomicFileWriter,
// fs::CreateSymlinkAt): the daemon's walk, audited and fuzzed once.
// Rollback() removes what this copy created (never what existed before).
// Names in messages are the sandbox's: every error is made terminal-safe.
class HostDestination {
 public:
  explicit HostDestination(fs::Root root) : root_(std::move(root)) {}

  // The directory `parts` beneath the root (created with `mode` if missing).
  Result<UniqueFd> Dir(const std::vector<std::string>& parts, uint32_t mode = 0755) {
    auto dir = root_.MakeDirsNoSymlinks(JoinComponents(parts), (mode & 0777) | 0700,
                                        [this](const std::string& rel) {
                                          created_.push_back({rel, true});
                                        });
    if (!dir) return tl::unexpected(TerminalSafe(std::move(dir.error())));
    return dir;
  }

  // A file to stream into `name` beneath `dir` (from Dir): a temporary file,
  // renamed over the entry by CommitFile (a symlink there is replaced, never
  // followed). The owner keeps read/write: a copy the user cannot open helps
  // nobody.
  Result<fs::AtomicFileWriter> StartFile(UniqueFd dir, const std::string& name,
                                         const std::string& rel, uint32_t mode) {
    fs::WriteOptions options{.mode = (mode & 0777) | 0600};
    auto file = fs::AtomicFileWriter::CreateAt(fs::Root::Location{std::move(dir), name, rel},
                                               Where(rel), options);
    if (!file && file.error().sys_errno == EISDIR) {
      return MakeError(ErrorCode::kIsDirectory,
                       fmt::format("{} is a directory; not replacing it with a file", Where(rel)));
    }
    return file;
  }
  Status CommitFile(fs::AtomicFileWriter& file, const std::string& rel) {
    auto done = file.Commit();
    if (!done) return tl::unexpected(done.error());
    if (done->created) created_.push_back({rel, false});
    return {};
  }

  Status Symlink(UniqueFd dir, const std::string& name, const std::string& rel,
                 const std::string& target) {
    if (target.empty() || target.size() > kMaxLinkTarget ||
        target.find('\0') != std::string::npos) {
      return MakeError(
          ErrorCode::kInvalidArgument,
          fmt::format("the sandbox sent an invalid symlink target for {}", Where(rel)));
    }
    struct stat st {};
    bool existed = fstatat(dir.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
    if (existed && S_ISDIR(st.st_mode)) {
      return MakeError(
          ErrorCode::kIsDirectory,
          fmt::format("{} is a directory; not replacing it with a symlink", Where(rel)));
    }
    fs::Root::Location location{std::move(dir), name, rel};
    if (auto s = fs::CreateSymlinkAt(location, target, /*overwrite=*/true, Where(rel)); !s) {
      return s;
    }
    if (!existed) created_.push_back({rel, false});
    return {};
  }

  // Removes what this copy created, deepest first (entries that existed
  // before are left alone; a created directory goes with what it holds).
  void Rollback() {
    for (auto it = created_.rbegin(); it != created_.rend(); ++it) {
      if (it->rel.empty()) continue;
      auto [parent, leaf] = fs::SplitRelative(it->rel);
      auto dir = root_.OpenNoSymlinks(parent, O_PATH | O_DIRECTORY);
      if (!dir) continue;
      const std::string name(leaf);
      if (it->dir) {
        RemoveTreeAt(dir->get(), name, 0);
      } else {
        unlinkat(dir->get(), name.c_str(), 0);
      }
    }
    created_.clear();
  }

  std::string Where(const std::string& rel) const { return Shown(root_.ToAbsolute(rel)); }

 private:
  static Error TerminalSafe(Error e) {
    e.message = Shown(e.message);
    return e;
  }

  static void RemoveTreeAt(int parent, const std::string& name, int depth) {
    if (depth > kMaxDepth) return;
    UniqueFd d(openat(parent, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (d) {
      if (auto entries = fs::ReadDir(d.get(), name)) {
        for (const auto& e : *entries) {
          if (unlinkat(d.get(), e.name.c_str(), 0) != 0) RemoveTreeAt(d.get(), e.name, depth + 1);
        }
      }
      unlinkat(parent, name.c_str(), AT_REMOVEDIR);
    } else {
      unlinkat(parent, name.c_str(), 0);
    }
  }

  struct Created {
    std::string rel;
    bool dir;
  };
  fs::Root root_;  // named as the user named it (Where)
  std::vector<Created> created_;
};

// Where a copy lands on the host: the directory the user named (or DST's
// parent) and the entry name inside it.
struct HostTarget {
  UniqueFd dir;
  std::string dir_shown;
  std::string name;  // "" = DST itself is the directory to fill (contents copy)
};

Result<HostTarget> ResolveHostTarget(const std::string& dst, const std::string& name) {
  HostTarget t;
  // The user's own path may go through symlinks of theirs; below it nothing is followed.
  UniqueFd as_dir(open(dst.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (as_dir) {
    t.dir = std::move(as_dir);
    t.dir_shown = dst;
    t.name = name;
    return t;
  }
  if (errno != ENOENT && errno != ENOTDIR) return MakeSyscallError("open", errno, Shown(dst));
  if (dst.ends_with('/')) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("host directory {} does not exist", Shown(dst)));
  }
  std::string parent = dst.find('/') == std::string::npos ? "." : dst.substr(0, dst.rfind('/'));
  if (parent.empty()) parent = "/";
  std::string leaf = dst.substr(dst.rfind('/') == std::string::npos ? 0 : dst.rfind('/') + 1);
  if (!ValidComponent(leaf)) {
    return MakeError(
        ErrorCode::kInvalidArgument,
        fmt::format("cannot copy to {}: name the file or directory to create", Shown(dst)));
  }
  t.dir.reset(open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!t.dir) {
    if (errno == ENOENT || errno == ENOTDIR) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("host directory {} does not exist", Shown(parent)));
    }
    return MakeSyscallError("open", errno, Shown(parent));
  }
  t.dir_shown = parent;
  t.name = leaf;
  return t;
}

// ------------------------------------------------------------ tar from the sandbox

// Extracts an untrusted tar read from `fd` into `dest` (the directory
// `top` beneath its root). Members must be named `prefix`/... (the sandbox
// path relative to the daemon's root): the one equal to `prefix` is the
// directory itself.
std::string JoinHostPath(const std::string& dir, const std::string& rel) {
  if (dir.empty()) return rel;
  return dir.back() == '/' ? dir + rel : dir + "/" + rel;
}

// Files `deepbox run` reads from the directory it runs in (a project's
// .mcp.json and .deepagents/): a copy out of a sandbox that writes one says so.
void NoteDeepboxFile(const std::vector<std::string>& rel, CopyStats& stats) {
  std::string path;
  for (const auto& c : rel) {
    path = path.empty() ? c : path + "/" + c;
    if (c == ".deepagents" || (c == ".mcp.json" && &c == &rel.back())) {
      if (std::find(stats.deepbox_files.begin(), stats.deepbox_files.end(), path) ==
          stats.deepbox_files.end()) {
        stats.deepbox_files.push_back(path);
      }
      return;
    }
  }
}

Status ExtractUntrusted(const fs::LibArchive& A, int fd, HostDestination& dest,
                        const std::vector<std::string>& top, const std::vector<std::string>& prefix,
                        CopyStats& stats) {
  std::unique_ptr<archive, decltype(A.archive_read_free)> in(A.archive_read_new(),
                                                             A.archive_read_free);
  A.archive_read_support_format_tar(in.get());
  A.archive_read_support_format_gnutar(in.get());
  if (A.archive_read_open_fd(in.get(), fd, 64 * 1024) != ARCHIVE_OK) {
    return MakeError(ErrorCode::kInternal, fmt::format("tar: {}", ArchiveError(A, in.get())));
  }
  auto hostile = [&](const std::string& what) {
    return MakeError(ErrorCode::kPermissionDenied,
                     fmt::format("the sandbox sent an unsafe archive entry ({}); nothing was "
                                 "written for it and the copy was undone",
                                 what));
  };
  std::unique_ptr<char[]> buf(new char[kBuffer]);
  for (;;) {
    archive_entry* e = nullptr;
    int rc = A.archive_read_next_header(in.get(), &e);
    if (rc == ARCHIVE_EOF) break;
    if (rc < ARCHIVE_WARN) {
      return MakeError(ErrorCode::kInternal,
                       fmt::format("tar from the sandbox: {}", ArchiveError(A, in.get())));
    }
    const char* raw = A.archive_entry_pathname_utf8(e);
    if (raw == nullptr) raw = A.archive_entry_pathname(e);
    if (raw == nullptr) return hostile("an entry without a name");
    std::string name = raw;
    if (name.starts_with('/')) return hostile("absolute name '" + Shown(name) + "'");
    auto parts = Components(name);
    if (!parts) return hostile("'..' in '" + Shown(name) + "'");
    for (const auto& c : *parts) {
      if (!ValidComponent(c)) return hostile("bad name component in '" + Shown(name) + "'");
    }
    if (parts->size() < prefix.size() ||
        !std::equal(prefix.begin(), prefix.end(), parts->begin())) {
      return hostile("'" + Shown(name) + "' is outside the requested directory");
    }
    std::vector<std::string> rel(top);
    rel.insert(rel.end(), parts->begin() + static_cast<std::ptrdiff_t>(prefix.size()),
               parts->end());
    NoteDeepboxFile(rel, stats);
    const auto type = A.archive_entry_filetype(e);
    const uint32_t perm = static_cast<uint32_t>(A.archive_entry_perm(e)) & 0777;
    if (A.archive_entry_hardlink(e) != nullptr) return hostile("hard link '" + Shown(name) + "'");
    if (type == AE_IFDIR) {
      auto d = dest.Dir(rel, perm);
      if (!d) return tl::unexpected(d.error());
      ++stats.directories;
      continue;
    }
    if (rel.size() == top.size()) {
      return hostile("'" + Shown(name) + "' replaces the requested directory itself");
    }
    std::string leaf = rel.back();
    rel.pop_back();
    auto dir = dest.Dir(rel);
    if (!dir) return tl::unexpected(dir.error());
    rel.push_back(leaf);
    const std::string rel_text = JoinComponents(rel);
    if (type == AE_IFLNK) {
      const char* target = A.archive_entry_symlink_utf8(e);
      if (target == nullptr) target = A.archive_entry_symlink(e);
      if (target == nullptr) return hostile("symlink without a target '" + Shown(name) + "'");
      if (auto s = dest.Symlink(std::move(*dir), leaf, rel_text, target); !s) return s;
      ++stats.symlinks;
      continue;
    }
    if (type != AE_IFREG) return hostile("special file '" + Shown(name) + "'");
    auto file = dest.StartFile(std::move(*dir), leaf, rel_text, perm);
    if (!file) return tl::unexpected(file.error());
    for (;;) {
      const void* block = nullptr;
      size_t size = 0;
      la_int64_t offset = 0;
      rc = A.archive_read_data_block(in.get(), &block, &size, &offset);
      if (rc == ARCHIVE_EOF) break;
      if (rc < ARCHIVE_WARN) {
        return MakeError(ErrorCode::kInternal,
                         fmt::format("tar from the sandbox, {}: {}", dest.Where(rel_text),
                                     ArchiveError(A, in.get())));
      }
      if (offset < 0 || static_cast<uint64_t>(offset) != file->bytes_written()) {
        return hostile("sparse or out-of-order data in '" + Shown(name) + "'");
      }
      if (auto s = file->Append(std::string_view(static_cast<const char*>(block), size)); !s) {
        return s;
      }
    }
    if (auto s = dest.CommitFile(*file, rel_text); !s) return s;
    ++stats.files;
    stats.bytes += file->bytes_written();
  }
  return {};
}

// ------------------------------------------------------------ tar to the sandbox

// Writes a pax archive of the tree under `dir` (names relative to it) to
// `out`. Everything is opened beneath `dir` with O_NOFOLLOW and checked with
// fstat; symlinks are stored as links; FIFOs, sockets and devices are skipped.
class TarProducer {
 public:
  TarProducer(const fs::LibArchive& A, int out, std::FILE* warnings, CopyStats& stats)
      : A_(A), out_(out), warnings_(warnings), stats_(stats) {}

  Status Run(int dir, const std::string& shown, const std::string& single_symlink_name = "",
             const std::string& single_symlink_target = "") {
    std::unique_ptr<archive, decltype(A_.archive_write_free)> a(A_.archive_write_new(),
                                                                A_.archive_write_free);
    A_.archive_write_set_format_pax_restricted(a.get());
    // Names are bytes on Linux: store them as they are (no locale conversion,
    // which fails for non-ASCII names under the C locale).
    A_.archive_write_set_options(a.get(), "hdrcharset=BINARY");
    if (A_.archive_write_open2(
            a.get(), this, nullptr,
            [](archive*, void* ctx, const void* buf, size_t n) -> la_ssize_t {
              auto* self = static_cast<TarProducer*>(ctx);
              const char* p = static_cast<const char*>(buf);
              size_t left = n;
              while (left > 0) {
                ssize_t w = send(self->out_, p, left, MSG_NOSIGNAL);
                if (w < 0 && errno == EINTR) continue;
                if (w < 0) return -1;  // the request ended (the daemon answered or failed)
                p += w;
                left -= static_cast<size_t>(w);
              }
              return static_cast<la_ssize_t>(n);
            },
            nullptr, nullptr) != ARCHIVE_OK) {
      return MakeError(ErrorCode::kInternal, fmt::format("tar: {}", ArchiveError(A_, a.get())));
    }
    a_ = a.get();
    Status s = single_symlink_name.empty()
                   ? Walk(dir, "", shown, 0)
                   : AddSymlink(single_symlink_name, single_symlink_target, 0777);
    if (s && A_.archive_write_close(a.get()) != ARCHIVE_OK) s = Fail("finishing the archive");
    a_ = nullptr;
    return s;
  }

 private:
  Status Fail(const std::string& what) {
    return MakeError(ErrorCode::kInternal, fmt::format("tar ({}): {}", what, ArchiveError(A_, a_)));
  }

  Status AddSymlink(const std::string& rel, const std::string& target, uint32_t perm) {
    std::unique_ptr<archive_entry, decltype(A_.archive_entry_free)> e(A_.archive_entry_new(),
                                                                      A_.archive_entry_free);
    A_.archive_entry_set_pathname(e.get(), rel.c_str());
    A_.archive_entry_set_filetype(e.get(), AE_IFLNK);
    A_.archive_entry_set_perm(e.get(), perm);
    A_.archive_entry_set_symlink(e.get(), target.c_str());
    if (A_.archive_write_header(a_, e.get()) != ARCHIVE_OK) return Fail(rel);
    ++stats_.symlinks;
    return {};
  }

  Status Walk(int dir, const std::string& prefix, const std::string& shown, int depth) {
    if (depth > kMaxDepth) {
      return MakeError(
          ErrorCode::kResourceExhausted,
          fmt::format("{} is nested more than {} levels deep", Shown(shown), kMaxDepth));
    }
    auto entries = fs::ReadDir(dir, Shown(shown));
    if (!entries) return tl::unexpected(entries.error());
    std::vector<std::string> names;
    for (auto& e : *entries) names.push_back(std::move(e.name));
    std::sort(names.begin(), names.end());
    for (const auto& name : names) {
      const std::string rel = prefix.empty() ? name : prefix + "/" + name;
      const std::string where = shown + "/" + name;
      // O_NONBLOCK: opening a FIFO must not wait for a writer.
      UniqueFd fd(openat(dir, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
      struct stat st {};
      if (!fd) {
        if (errno != ELOOP && errno != ENXIO)
          return MakeSyscallError("openat", errno, Shown(where));
        // ELOOP: a symlink (copied as a link); ENXIO: a socket.
        if (fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
          return MakeSyscallError("fstatat", errno, Shown(where));
        }
        if (S_ISLNK(st.st_mode)) {
          std::string target(kMaxLinkTarget + 1, '\0');
          ssize_t n = readlinkat(dir, name.c_str(), target.data(), target.size());
          if (n < 0) return MakeSyscallError("readlinkat", errno, Shown(where));
          target.resize(static_cast<size_t>(n));
          if (!LinkStaysInside(rel, target)) {
            SkipBecause(where, fmt::format("a symlink to {}, outside the copied tree (only "
                                           "links within it are copied)",
                                           Shown(target)));
            continue;
          }
          if (auto s = AddSymlink(rel, target, st.st_mode & 0777); !s) return s;
          continue;
        }
        Skip(where, "a socket");
        continue;
      }
      if (fstat(fd.get(), &st) != 0) return MakeSyscallError("fstat", errno, Shown(where));
      if (S_ISDIR(st.st_mode)) {
        if (auto s = AddHeader(rel, AE_IFDIR, st, 0); !s) return s;
        ++stats_.directories;
        if (auto s = Walk(fd.get(), rel, where, depth + 1); !s) return s;
      } else if (S_ISREG(st.st_mode)) {
        if (auto s = AddFile(fd.get(), rel, where, st); !s) return s;
      } else {
        Skip(where, S_ISFIFO(st.st_mode) ? "a FIFO" : "a device or special file");
      }
    }
    return {};
  }

  Status AddHeader(const std::string& rel, unsigned type, const struct stat& st, uint64_t size) {
    std::unique_ptr<archive_entry, decltype(A_.archive_entry_free)> e(A_.archive_entry_new(),
                                                                      A_.archive_entry_free);
    A_.archive_entry_set_pathname(e.get(), rel.c_str());
    A_.archive_entry_set_filetype(e.get(), type);
    A_.archive_entry_set_perm(e.get(), st.st_mode & 0777);
    A_.archive_entry_set_mtime(e.get(), st.st_mtime, 0);
    if (type == AE_IFREG) A_.archive_entry_set_size(e.get(), static_cast<la_int64_t>(size));
    if (A_.archive_write_header(a_, e.get()) != ARCHIVE_OK) return Fail(rel);
    return {};
  }

  Status AddFile(int fd, const std::string& rel, const std::string& where, const struct stat& st) {
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    if (auto s = AddHeader(rel, AE_IFREG, st, size); !s) return s;
    std::unique_ptr<char[]> buf(new char[kBuffer]);
    uint64_t sent = 0;
    for (;;) {
      auto n = ReadSome(fd, buf.get(), kBuffer, Shown(where));
      if (!n) return tl::unexpected(n.error());
      if (*n == 0) break;
      if (sent + *n > size) break;  // grew: reported below
      if (A_.archive_write_data(a_, buf.get(), *n) < 0) return Fail(rel);
      sent += *n;
    }
    if (sent != size) {
      return MakeError(ErrorCode::kConflict,
                       fmt::format("{} changed size while being copied ({} bytes, then {})",
                                   Shown(where), size, sent));
    }
    ++stats_.files;
    stats_.bytes += size;
    return {};
  }

  void Skip(const std::string& where, const char* what) {
    SkipBecause(where, fmt::format("{} (only files, directories and symlinks are copied)", what));
  }
  // One sentence: "skipping WHERE: WHY".
  void SkipBecause(const std::string& where, const std::string& why) {
    std::string line = fmt::format("{}: {}", Shown(where), why);
    if (warnings_ != nullptr) std::fprintf(warnings_, "deepbox: skipping %s\n", line.c_str());
    stats_.skipped.push_back(line);
  }

  const fs::LibArchive& A_;
  int out_;
  std::FILE* warnings_;
  CopyStats& stats_;
  archive* a_ = nullptr;
};

// A socketpair for one producer/consumer stream (MSG_NOSIGNAL on send: no
// SIGPIPE when the other side stops early).
Result<std::pair<UniqueFd, UniqueFd>> StreamPair() {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    return MakeSyscallError("socketpair", errno);
  }
  return std::make_pair(UniqueFd(sv[0]), UniqueFd(sv[1]));
}

// Whether the daemon refused an endpoint it does not have (older daemons, upstream runtimes).
bool Unimplemented(const Error& e) { return e.code == ErrorCode::kUnimplemented; }

}  // namespace

Result<std::string> CopyNameFromArgument(const std::string& src) {
  std::string p = src;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  std::string leaf = p.rfind('/') == std::string::npos ? p : p.substr(p.rfind('/') + 1);
  if (leaf == ".") return std::string();
  if (leaf.empty() || leaf == ".." || p == "/") {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("'{}' names no file or directory of its own: name it (e.g. "
                                 "/workspace/results), or use DIR/. to copy a directory's "
                                 "contents",
                                 Shown(src)));
  }
  if (!ValidComponent(leaf)) {
    return MakeError(ErrorCode::kInvalidArgument, fmt::format("bad name in '{}'", Shown(src)));
  }
  return leaf;
}

// ------------------------------------------------------------ sandbox -> host

Result<CopyStats> SandboxCopier::FromSandbox(const std::string& sandbox_src,
                                             const std::string& host_dst) {
  auto copied = FromSandboxQuietly(sandbox_src, host_dst);
  if (copied && !copied->deepbox_files.empty() && warnings_ != nullptr) {
    std::string list;
    for (const auto& f : copied->deepbox_files) list += (list.empty() ? "" : ", ") + Shown(f);
    std::fprintf(warnings_,
                 "deepbox: note: this copy from the sandbox wrote %s, which `deepbox run` reads "
                 "in the directory it runs in (MCP servers it would start on this machine, "
                 "memory and skills for the model); a sandbox can plant them, so `deepbox run` "
                 "uses them only after asking you\n",
                 list.c_str());
  }
  return copied;
}

Result<CopyStats> SandboxCopier::FromSandboxQuietly(const std::string& sandbox_src,
                                                    const std::string& host_dst) {
  auto name = CopyNameFromArgument(sandbox_src);
  if (!name) return tl::unexpected(name.error());
  auto info = client_.Stat(sandbox_src);
  if (!info) return tl::unexpected(info.error());
  auto target = ResolveHostTarget(host_dst, *name);
  if (!target) return tl::unexpected(target.error());
  CopyStats stats;
  auto root = fs::Root::Adopt(std::move(target->dir), target->dir_shown);
  if (!root) return MakeError(root.error().code, Shown(root.error().message));
  HostDestination dest(std::move(*root));
  const bool contents = target->name.empty();
  if (!contents) NoteDeepboxFile({target->name}, stats);
  if (contents && !info->is_dir()) {
    return MakeError(ErrorCode::kNotDirectory,
                     fmt::format("{} is not a directory (DIR/. copies a directory's contents)",
                                 Shown(sandbox_src)));
  }

  if (info->type == FileType::kFile) {
    auto dir = dest.Dir({});
    if (!dir) return tl::unexpected(dir.error());
    auto file = dest.StartFile(std::move(*dir), target->name, target->name,
                               info->mode == 0 ? 0644 : info->mode);
    if (!file) return tl::unexpected(file.error());
    if (auto s =
            client_.DownloadTo(sandbox_src, [&](std::string_view d) { return file->Append(d); });
        !s) {
      return tl::unexpected(s.error());
    }
    if (auto s = dest.CommitFile(*file, target->name); !s) return tl::unexpected(s.error());
    stats.files = 1;
    stats.bytes = file->bytes_written();
    for (auto& f : stats.deepbox_files) f = JoinHostPath(target->dir_shown, f);
    return stats;
  }
  if (info->type == FileType::kSymlink) {
    auto dir = dest.Dir({});
    if (!dir) return tl::unexpected(dir.error());
    if (auto s = dest.Symlink(std::move(*dir), target->name, target->name, info->link_target); !s) {
      return tl::unexpected(s.error());
    }
    stats.symlinks = 1;
    for (auto& f : stats.deepbox_files) f = JoinHostPath(target->dir_shown, f);
    return stats;
  }
  if (!info->is_dir()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("{} is not a file, directory or symlink", Shown(sandbox_src)));
  }

  // A directory: its top on the host first (remembered for the rollback).
  std::vector<std::string> top;
  if (!contents) top.push_back(target->name);
  auto top_dir = dest.Dir(top);
  if (!top_dir) return tl::unexpected(top_dir.error());
  ++stats.directories;

  auto api = fs::LoadLibArchive("copying directories");
  if (!api) return tl::unexpected(api.error());
  auto pair = StreamPair();
  if (!pair) return tl::unexpected(pair.error());
  UniqueFd reader = std::move(pair->first);
  UniqueFd writer = std::move(pair->second);

  // The HTTP stream runs on a thread and feeds the socketpair; libarchive
  // pulls from the other end here (bounded memory, back-pressure both ways).
  net::ClientRequest req;
  req.method = "POST";
  req.target = "/deepbox/v1/fs/tar/download";
  req.headers.Set("Content-Type", "application/json");
  json::object body;
  body["paths"] = json::array{json::value(JsonString(sandbox_src))};
  req.body = ToJson(body);
  int status = 0;
  std::string error_body;
  Result<net::Response> answer = MakeError(ErrorCode::kInternal, "no answer");
  std::thread feeder([&] {
    answer = client_.http().SendStreaming(
        req,
        [&](const net::Response& head) {
          status = head.status;
          return true;
        },
        [&](std::string_view data) {
          if (status != 200) {
            if (error_body.size() < 64 * 1024) error_body.append(data.substr(0, 64 * 1024));
            return true;
          }
          while (!data.empty()) {
            ssize_t n = send(writer.get(), data.data(), data.size(), MSG_NOSIGNAL);
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) return false;  // the extractor stopped
            data.remove_prefix(static_cast<size_t>(n));
          }
          return true;
        });
    shutdown(writer.get(), SHUT_WR);  // end of archive for the extractor
  });
  const auto prefix = SandboxComponents(client_.root(), sandbox_src);
  std::vector<std::string> root_parts = SandboxComponents("/", client_.root());
  std::vector<std::string> member_prefix = prefix;
  if (prefix.size() >= root_parts.size() &&
      std::equal(root_parts.begin(), root_parts.end(), prefix.begin())) {
    member_prefix.assign(prefix.begin() + static_cast<std::ptrdiff_t>(root_parts.size()),
                         prefix.end());
  }
  Status extracted = ExtractUntrusted(**api, reader.get(), dest, top, member_prefix, stats);
  reader.reset();  // stops the feeder if the extraction ended early
  feeder.join();
  writer.reset();
  Status result = extracted;
  if (!answer) {
    result = tl::unexpected(answer.error());
  } else if (status != 200) {
    net::Response r;
    r.status = status;
    r.body = error_body;
    Error e = SandboxdClient::AnswerError(r, "tar download");
    if (Unimplemented(e)) {
      dest.Rollback();
      return MakeError(ErrorCode::kUnimplemented,
                       "this sandbox's daemon cannot send directories (no tar endpoint); copy "
                       "the files one by one");
    }
    result = tl::unexpected(e);
  }
  if (!result) {
    dest.Rollback();
    return tl::unexpected(result.error());
  }
  for (auto& f : stats.deepbox_files) f = JoinHostPath(target->dir_shown, f);
  return stats;
}

// ------------------------------------------------------------ host -> sandbox

Result<CopyStats> SandboxCopier::ToSandbox(const std::string& host_src,
                                           const std::string& sandbox_dst) {
  auto name = CopyNameFromArgument(host_src);
  if (!name) return tl::unexpected(name.error());
  // O_NOFOLLOW + fstat: what is copied is what was opened (a symlink is
  // copied as a link); O_NONBLOCK: a FIFO must not block the open.
  UniqueFd src(open(host_src.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  bool is_symlink = false;
  struct stat st {};
  if (!src) {
    if (errno == ENOENT || errno == ENOTDIR) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("host path {} does not exist", Shown(host_src)));
    }
    if (errno != ELOOP || lstat(host_src.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) {
      return MakeSyscallError("open", errno, Shown(host_src));
    }
    is_symlink = true;
  } else if (fstat(src.get(), &st) != 0) {
    return MakeSyscallError("fstat", errno, Shown(host_src));
  }
  if (!is_symlink && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("{} is not a file, directory or symlink", Shown(host_src)));
  }
  if (name->empty() && !S_ISDIR(st.st_mode)) {
    return MakeError(ErrorCode::kNotDirectory,
                     fmt::format("{} is not a directory (DIR/. copies a directory's contents)",
                                 Shown(host_src)));
  }
  auto dst_info = client_.Stat(sandbox_dst);
  const bool existed = dst_info.has_value();
  const bool into = (existed && dst_info->is_dir()) || sandbox_dst.ends_with('/');
  std::string target = into && !name->empty() ? JoinSandboxPath(sandbox_dst, *name) : sandbox_dst;
  CopyStats stats;

  if (!is_symlink && S_ISREG(st.st_mode)) {
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    uint64_t sent = 0;
    auto s = client_.UploadFrom(target, st.st_mode & 0777, size,
                                [&](char* buf, size_t n) -> Result<size_t> {
                                  auto got = ReadSome(src.get(), buf, n, Shown(host_src));
                                  if (got) sent += *got;
                                  return got;
                                });
    if (!s) return tl::unexpected(s.error());
    stats.files = 1;
    stats.bytes = sent;
    return stats;
  }

  auto api = fs::LoadLibArchive("copying directories");
  if (!api) return tl::unexpected(api.error());
  auto pair = StreamPair();
  if (!pair) return tl::unexpected(pair.error());
  UniqueFd reader = std::move(pair->first);
  UniqueFd writer = std::move(pair->second);
  std::string extract_dir = target;
  std::string link_name, link_target;
  if (is_symlink) {
    std::string t(kMaxLinkTarget + 1, '\0');
    ssize_t n = readlink(host_src.c_str(), t.data(), t.size());
    if (n < 0) return MakeSyscallError("readlink", errno, Shown(host_src));
    t.resize(static_cast<size_t>(n));
    link_target = t;
    if (!LinkStaysInside("", link_target)) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("{} is a symlink to {}, outside the directory it is copied "
                                   "into; the sandbox keeps only links within it (copy the "
                                   "target itself instead)",
                                   Shown(host_src), Shown(link_target)));
    }
    size_t slash = target.rfind('/');
    link_name = slash == std::string::npos ? target : target.substr(slash + 1);
    extract_dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : target.substr(0, slash));
  }
  const bool target_existed = is_symlink || (into ? client_.Stat(target).has_value() : existed);
  // The archive is produced on a thread into the socketpair; the request body
  // is pulled from the other end (bounded memory both ways).
  Status produced;
  std::thread producer([&] {
    TarProducer tar(**api, writer.get(), warnings_, stats);
    produced = tar.Run(src.get(), host_src, link_name, link_target);
    writer.reset();  // end of the request body
  });
  net::ClientRequest req;
  req.method = "PUT";
  req.target = "/deepbox/v1/fs/tar/upload?path=" + net::PercentEncode(extract_dir);
  req.headers.Set("Content-Type", "application/x-tar");
  req.body_source = [&](char* buf, size_t n) -> Result<size_t> {
    return ReadSome(reader.get(), buf, n, "the archive stream");
  };
  auto r = client_.http().Send(req);
  reader.reset();  // stops the producer if the request ended early
  producer.join();
  Status result;
  if (!r) {
    result = tl::unexpected(r.error());
  } else if (r->status != 200) {
    Error e = SandboxdClient::AnswerError(*r, "tar upload");
    if (Unimplemented(e) && !is_symlink) {
      return MakeError(ErrorCode::kUnimplemented,
                       "this sandbox's daemon cannot receive directories (no tar endpoint)");
    }
    result = tl::unexpected(e);
  }
  if (result && !produced) result = produced;
  if (!result) {
    // Undo a directory this copy created (one that existed keeps what it had).
    if (!target_existed && !is_symlink) (void)client_.Delete(target, /*recursive=*/true);
    return tl::unexpected(result.error());
  }
  return stats;
}

}  // namespace deepbox::cli
