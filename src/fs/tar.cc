#include "fs/tar.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>

#include "fs/archive_loader.h"
#include "fs/atomic_file.h"
#include "fs/dir_entries.h"

namespace deepbox::fs {
namespace {

constexpr size_t kIoBuffer = 64 << 10;
constexpr int kMaxDepth = 512;

// libarchive, loaded on first use (archive_loader.h): the daemon starts
// without it and the ten libraries it brings. WriteTar and ExtractTar check
// that it loaded before anything here calls it.
const LibArchive& La() { return **LoadLibArchive("tar archives"); }

struct ArchiveWriteDeleter {
  void operator()(struct archive* a) const { La().archive_write_free(a); }
};
struct ArchiveReadDeleter {
  void operator()(struct archive* a) const { La().archive_read_free(a); }
};
struct EntryDeleter {
  void operator()(struct archive_entry* e) const { La().archive_entry_free(e); }
};
using EntryPtr = std::unique_ptr<struct archive_entry, EntryDeleter>;

Error ArchiveError(struct archive* a, std::string_view what) {
  const char* msg = La().archive_error_string(a);
  return Error(ErrorCode::kInvalidArgument,
               fmt::format("{}: {}", what, msg != nullptr ? msg : "unknown libarchive error"));
}

// ---------------------------------------------------------------------------
// Writing

struct WriteCtx {
  const TarSink* sink = nullptr;
  Status status;  // the sink's error, if it failed
  uint64_t bytes = 0;
  // Set once WriteTar gives up: libarchive's cleanup must not feed the sink
  // the end of an archive that failed.
  bool abandoned = false;
};

la_ssize_t WriteCallback(struct archive*, void* client, const void* buf, size_t n) {
  auto* ctx = static_cast<WriteCtx*>(client);
  if (ctx->abandoned || !ctx->status) return -1;
  auto st = (*ctx->sink)(std::string_view(static_cast<const char*>(buf), n));
  if (!st) {
    ctx->status = std::move(st);
    return -1;
  }
  ctx->bytes += n;
  return static_cast<la_ssize_t>(n);
}

class TarWriter {
 public:
  TarWriter(struct archive* a, WriteCtx* ctx) : a_(a), ctx_(ctx), buf_(kIoBuffer) {}

  // Adds the entry `name` of directory `dirfd` as `arc_name` (recursively).
  Status Add(int dirfd, const std::string& name, const std::string& arc_name,
             const std::string& abs, int depth);
  uint64_t entries() const { return entries_; }

 private:
  Status WriteHeader(struct archive_entry* e, const std::string& abs);
  Status Fail(const std::string& abs) {
    if (!ctx_->status) return ctx_->status;  // the sink failed: its error
    return tl::unexpected(ArchiveError(a_, fmt::format("tar of {}", abs)));
  }

  struct archive* a_;
  WriteCtx* ctx_;
  std::vector<char> buf_;
  uint64_t entries_ = 0;
};

Status TarWriter::WriteHeader(struct archive_entry* e, const std::string& abs) {
  int rc = La().archive_write_header(a_, e);
  if (rc < ARCHIVE_WARN) return Fail(abs);
  ++entries_;
  return {};
}

Status TarWriter::Add(int dirfd, const std::string& name, const std::string& arc_name,
                      const std::string& abs, int depth) {
  if (depth > kMaxDepth) {
    return MakeError(ErrorCode::kResourceExhausted,
                     fmt::format("directory tree too deep to archive: {}", abs));
  }
  struct stat st;
  if (::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT && depth > 0) return {};  // vanished meanwhile
    return MakeSyscallError("fstatat", errno, abs);
  }
  EntryPtr entry(La().archive_entry_new());
  if (S_ISLNK(st.st_mode)) {
    int err = 0;
    auto target = ReadLinkAt(dirfd, name.c_str(), &err);
    if (!target) return MakeSyscallError("readlinkat", err, abs);
    La().archive_entry_copy_stat(entry.get(), &st);
    La().archive_entry_set_pathname(entry.get(), arc_name.c_str());
    La().archive_entry_set_symlink(entry.get(), target->c_str());
    La().archive_entry_set_size(entry.get(), 0);
    return WriteHeader(entry.get(), abs);
  }
  if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) return {};  // devices, FIFOs, sockets
  // Open without following, then check it is still what fstatat saw.
  int flags = O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC;
  if (S_ISDIR(st.st_mode)) flags |= O_DIRECTORY;
  int fd = ::openat(dirfd, name.c_str(), flags);
  if (fd < 0) {
    if ((errno == ENOENT || errno == ELOOP || errno == ENOTDIR) && depth > 0) return {};
    return MakeSyscallError("openat", errno, abs);
  }
  UniqueFd file(fd);
  struct stat now;
  if (::fstat(fd, &now) != 0) return MakeSyscallError("fstat", errno, abs);
  if (now.st_ino != st.st_ino || now.st_dev != st.st_dev ||
      (now.st_mode & S_IFMT) != (st.st_mode & S_IFMT)) {
    return depth > 0 ? Status{} : MakeSyscallError("openat", ENOENT, abs);
  }
  La().archive_entry_copy_stat(entry.get(), &now);
  La().archive_entry_set_pathname(entry.get(), arc_name.c_str());
  if (S_ISDIR(now.st_mode)) {
    La().archive_entry_set_size(entry.get(), 0);
    if (auto s = WriteHeader(entry.get(), abs); !s) return s;
    auto children = ReadDir(fd, abs);
    if (!children) return tl::unexpected(children.error());
    std::sort(children->begin(), children->end(),
              [](const DirEntry& a, const DirEntry& b) { return a.name < b.name; });
    for (const auto& c : *children) {
      if (auto s = Add(fd, c.name, arc_name + "/" + c.name, abs + "/" + c.name, depth + 1); !s) {
        return s;
      }
    }
    return {};
  }
  // A regular file: exactly st_size bytes, whatever happens to it meanwhile.
  if (auto s = WriteHeader(entry.get(), abs); !s) return s;
  uint64_t remaining = static_cast<uint64_t>(now.st_size);
  bool eof = false;
  while (remaining > 0) {
    size_t want = static_cast<size_t>(std::min<uint64_t>(remaining, buf_.size()));
    ssize_t n = 0;
    if (!eof) {
      n = ::read(fd, buf_.data(), want);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return MakeSyscallError("read", errno, abs);
    }
    if (n == 0) {  // the file shrank: pad with zeros
      eof = true;
      std::fill(buf_.begin(), buf_.begin() + static_cast<ptrdiff_t>(want), 0);
      n = static_cast<ssize_t>(want);
    }
    if (La().archive_write_data(a_, buf_.data(), static_cast<size_t>(n)) < 0) return Fail(abs);
    remaining -= static_cast<uint64_t>(n);
  }
  return {};
}

// ---------------------------------------------------------------------------
// Extraction

struct ReadCtx {
  const TarSource* source = nullptr;
  std::vector<char> buf;
  Status status;
};

la_ssize_t ReadCallback(struct archive* a, void* client, const void** out) {
  auto* ctx = static_cast<ReadCtx*>(client);
  auto n = (*ctx->source)(ctx->buf.data(), ctx->buf.size());
  if (!n) {
    ctx->status = tl::unexpected(n.error());
    La().archive_set_error(a, EIO, "reading the archive failed");
    return -1;
  }
  *out = ctx->buf.data();
  return static_cast<la_ssize_t>(std::min(*n, ctx->buf.size()));
}

// An archive member name -> a normalized path relative to the destination.
Result<std::string> EntryPath(const char* name, std::string_view what) {
  if (name == nullptr || *name == '\0') {
    return MakeError(ErrorCode::kInvalidArgument, fmt::format("tar {} without a name", what));
  }
  std::string_view n(name);
  auto escape = [&]() {
    return MakeError(ErrorCode::kPermissionDenied,
                     fmt::format("tar {} '{}' leads outside the destination", what, n));
  };
  if (n[0] == '/') return escape();
  size_t i = 0;
  while (i <= n.size()) {
    size_t j = n.find('/', i);
    if (j == std::string_view::npos) j = n.size();
    if (n.substr(i, j - i) == "..") return escape();
    i = j + 1;
  }
  auto rel = NormalizeRelative(n);
  if (!rel) return escape();
  return rel;
}

}  // namespace

Status TarSupported() {
  if (auto la = LoadLibArchive("tar archives"); !la) return tl::unexpected(la.error());
  return {};
}

Result<TarWriteStats> WriteTar(const Root& root, const std::vector<std::string>& paths,
                               const TarSink& sink) {
  if (auto ok = TarSupported(); !ok) return tl::unexpected(ok.error());
  std::vector<std::string> rels;
  for (const auto& p : paths) {
    auto rel = root.ToRelative(p);
    if (!rel) return tl::unexpected(rel.error());
    rels.push_back(std::move(*rel));
  }
  // Declared before the archive: freeing the archive may still call back.
  WriteCtx ctx;
  ctx.sink = &sink;
  std::unique_ptr<struct archive, ArchiveWriteDeleter> a(La().archive_write_new());
  if (!a) return MakeError(ErrorCode::kResourceExhausted, "archive_write_new failed");
  auto fail = [&](Error e) {
    ctx.abandoned = true;
    return tl::unexpected(std::move(e));
  };
  if (La().archive_write_set_format_pax_restricted(a.get()) != ARCHIVE_OK ||
      La().archive_write_open2(a.get(), &ctx, nullptr, WriteCallback, nullptr, nullptr) !=
          ARCHIVE_OK) {
    if (!ctx.status) return fail(ctx.status.error());
    return fail(ArchiveError(a.get(), "tar"));
  }
  // Members are named relative to the root's relative base when beneath it
  // (the workspace of a root at "/"), else relative to the root.
  std::string base_rel;
  if (!root.relative_base().empty()) {
    auto b = root.ToRelative(root.relative_base());
    if (!b) return fail(b.error());
    base_rel = std::move(*b);
  }
  TarWriter writer(a.get(), &ctx);
  for (const auto& rel : rels) {
    std::string abs = root.ToAbsolute(rel);
    std::string member = rel;
    if (!base_rel.empty()) {
      if (rel == base_rel) {
        member.clear();
      } else if (rel.size() > base_rel.size() && rel.starts_with(base_rel) &&
                 rel[base_rel.size()] == '/') {
        member = rel.substr(base_rel.size() + 1);
      }
    }
    if (member.empty()) {  // the root (or base): its children, named from it
      auto dir = root.Open(rel, O_RDONLY | O_DIRECTORY);
      if (!dir) return fail(dir.error());
      auto children = ReadDir(dir->get(), abs);
      if (!children) return fail(children.error());
      std::sort(children->begin(), children->end(),
                [](const DirEntry& x, const DirEntry& y) { return x.name < y.name; });
      for (const auto& c : *children) {
        if (auto s = writer.Add(dir->get(), c.name, c.name,
                                root.ToAbsolute(JoinRelative(rel, c.name)), 1);
            !s) {
          return fail(s.error());
        }
      }
      continue;
    }
    auto loc = root.OpenParent(rel);
    if (!loc) return fail(loc.error());
    if (auto s = writer.Add(loc->dir.get(), loc->name, member, abs, 0); !s) {
      return fail(s.error());
    }
  }
  if (La().archive_write_close(a.get()) != ARCHIVE_OK) {
    if (!ctx.status) return fail(ctx.status.error());
    return fail(ArchiveError(a.get(), "tar"));
  }
  return TarWriteStats{writer.entries(), ctx.bytes};
}

Result<std::vector<std::string>> ExtractTar(const Root& root, std::string_view dest_dir,
                                            const TarSource& source,
                                            const ExtractOptions& options) {
  if (auto ok = TarSupported(); !ok) return tl::unexpected(ok.error());
  auto dest_rel = root.ToRelative(dest_dir);
  if (!dest_rel) return tl::unexpected(dest_rel.error());
  if (auto made = root.MakeDirs(*dest_rel); !made) return tl::unexpected(made.error());
  // Every entry is resolved beneath the destination, not just the root.
  auto dest = root.Sub(*dest_rel);
  if (!dest) return tl::unexpected(dest.error());

  ReadCtx ctx;  // before the archive, which may use it until freed
  ctx.source = &source;
  ctx.buf.resize(kIoBuffer);
  std::unique_ptr<struct archive, ArchiveReadDeleter> a(La().archive_read_new());
  if (!a) return MakeError(ErrorCode::kResourceExhausted, "archive_read_new failed");
  La().archive_read_support_format_tar(a.get());
  // gzip only through the linked zlib: libarchive would otherwise run an
  // external gzip program.
  if (La().archive_zlib_version() != nullptr) La().archive_read_support_filter_gzip(a.get());
  if (La().archive_read_open(a.get(), &ctx, nullptr, ReadCallback, nullptr) != ARCHIVE_OK) {
    if (!ctx.status) return tl::unexpected(ctx.status.error());
    return tl::unexpected(ArchiveError(a.get(), "invalid tar archive"));
  }

  std::vector<std::string> written;
  std::vector<char> buf(kIoBuffer);
  for (;;) {
    struct archive_entry* entry = nullptr;
    int rc = La().archive_read_next_header(a.get(), &entry);
    if (rc == ARCHIVE_EOF) break;
    if (rc < ARCHIVE_WARN) {
      if (!ctx.status) return tl::unexpected(ctx.status.error());
      return tl::unexpected(ArchiveError(a.get(), "invalid tar archive"));
    }
    auto rel = EntryPath(La().archive_entry_pathname(entry), "entry");
    if (!rel) return tl::unexpected(rel.error());
    if (rel->empty()) continue;  // "./": the destination itself
    const std::string abs = dest->ToAbsolute(*rel);
    const mode_t perm = La().archive_entry_perm(entry) & 0777;
    const auto [parent, base] = SplitRelative(*rel);
    auto parent_dir = dest->MakeDirs(parent);
    if (!parent_dir) return tl::unexpected(parent_dir.error());

    if (const char* hardlink = La().archive_entry_hardlink(entry); hardlink != nullptr) {
      auto target = EntryPath(hardlink, "hard link target");
      if (!target) return tl::unexpected(target.error());
      if (target->empty()) return MakeSyscallError("linkat", EPERM, abs);
      auto from = dest->OpenParent(*target);
      if (!from) return tl::unexpected(from.error());
      auto to = dest->OpenParent(*rel);
      if (!to) return tl::unexpected(to.error());
      if (options.overwrite && ::unlinkat(to->dir.get(), to->name.c_str(), 0) != 0 &&
          errno != ENOENT) {
        return MakeSyscallError("unlinkat", errno, abs);
      }
      if (::linkat(from->dir.get(), from->name.c_str(), to->dir.get(), to->name.c_str(), 0) != 0) {
        return MakeSyscallError("linkat", errno, abs);
      }
      written.push_back(abs);
      continue;
    }

    switch (La().archive_entry_filetype(entry)) {
      case AE_IFDIR: {
        auto d = dest->MakeDirs(*rel, perm | 0700);  // we must be able to fill it
        if (!d) return tl::unexpected(d.error());
        break;
      }
      case AE_IFREG: {
        WriteOptions wo;
        wo.create_parents = false;  // done above
        wo.overwrite = options.overwrite;
        wo.mode = perm;
        wo.follow_symlinks = false;  // an existing symlink is replaced, not written through
        auto w = AtomicFileWriter::Create(*dest, *rel, wo);
        if (!w) return tl::unexpected(w.error());
        for (;;) {
          la_ssize_t n = La().archive_read_data(a.get(), buf.data(), buf.size());
          if (n == 0) break;
          if (n < 0) {
            if (!ctx.status) return tl::unexpected(ctx.status.error());
            return tl::unexpected(ArchiveError(a.get(), "invalid tar archive"));
          }
          if (auto s = w->Append(std::string_view(buf.data(), static_cast<size_t>(n))); !s) {
            return tl::unexpected(s.error());
          }
        }
        if (La().archive_entry_mtime_is_set(entry)) {
          struct timespec mtime = {La().archive_entry_mtime(entry),
                                   La().archive_entry_mtime_nsec(entry)};
          w->SetMtime(mtime);
        }
        auto done = w->Commit();
        if (!done) return tl::unexpected(done.error());
        break;
      }
      case AE_IFLNK: {
        const char* target = La().archive_entry_symlink(entry);
        if (target == nullptr || *target == '\0') {
          return MakeError(ErrorCode::kInvalidArgument,
                           fmt::format("tar symlink '{}' has no target", *rel));
        }
        // Judge the target from where the link really sits (its parent may be
        // reached through symlinks).
        auto canon_parent = dest->Canonicalize(parent);
        if (!canon_parent) return tl::unexpected(canon_parent.error());
        if (target[0] == '/' || !NormalizeRelative(JoinRelative(*canon_parent, target))) {
          return MakeError(
              ErrorCode::kPermissionDenied,
              fmt::format("tar symlink '{}' -> '{}' leads outside the destination", *rel, target));
        }
        auto loc = dest->OpenParent(*rel);
        if (!loc) return tl::unexpected(loc.error());
        if (auto s = CreateSymlinkAt(*loc, target, options.overwrite, abs); !s) {
          return tl::unexpected(s.error());
        }
        break;
      }
      default:
        return MakeError(
            ErrorCode::kPermissionDenied,
            fmt::format("tar entry '{}': device nodes, FIFOs and sockets are not allowed", *rel));
    }
    written.push_back(abs);
  }
  return written;
}

}  // namespace deepbox::fs
