#include "oci/layer_extract.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <optional>

#include "common/io.h"
#include "common/terminal_text.h"
#include "common/unique_fd.h"
#include "fs/archive_loader.h"
#include "fs/dir_entries.h"
#include "fs/path_resolver.h"

namespace deepbox::oci {

namespace {

constexpr size_t kLayerReadChunk = 256 * 1024;
constexpr size_t kMaxNameComponent = 255;
constexpr size_t kMaxLayerPath = 4095;
constexpr int kMaxRemoveDepth = 256;
constexpr size_t kMaxNotes = 16;
constexpr std::string_view kWhiteoutPrefix = ".wh.";
constexpr std::string_view kOpaqueMarker = ".wh..wh..opq";

struct ArchiveCloser {
  const fs::LibArchive* api;
  void operator()(archive* a) const { api->archive_read_free(a); }
};

struct SourceState {
  const LayerSource* source;
  std::unique_ptr<char[]> buffer{new char[kLayerReadChunk]};
  std::optional<Error> error;  // the source's own failure, reported as itself
};

la_ssize_t ReadFromSource(archive*, void* client, const void** out) {
  auto* state = static_cast<SourceState*>(client);
  auto n = (*state->source)(state->buffer.get(), kLayerReadChunk);
  if (!n) {
    state->error = n.error();
    return -1;
  }
  *out = state->buffer.get();
  return static_cast<la_ssize_t>(*n);
}

std::string Shown(std::string_view name) { return SanitizeLineForTerminal(name.substr(0, 300)); }

tl::unexpected<Error> Refused(std::string_view name, std::string_view why) {
  return MakeError(ErrorCode::kPermissionDenied,
                   fmt::format("layer entry '{}': {}: refused", Shown(name), why));
}

// A member name as a normalised relative path ("" = the layer's root), or
// the reason it is refused.
Result<std::string> LayerRelativePath(std::string_view name) {
  if (name.empty()) return Refused(name, "empty name");
  if (name.front() == '/') return Refused(name, "an absolute name");
  if (name.size() > kMaxLayerPath) return Refused(name, "longer than 4095 bytes");
  std::string out;
  size_t start = 0;
  while (start <= name.size()) {
    size_t slash = name.find('/', start);
    if (slash == std::string_view::npos) slash = name.size();
    std::string_view c = name.substr(start, slash - start);
    start = slash + 1;
    if (c.empty() || c == ".") continue;
    if (c == "..") return Refused(name, "a '..' component");
    if (c.size() > kMaxNameComponent) return Refused(name, "a component longer than 255 bytes");
    if (c.find('\0') != std::string_view::npos) return Refused(name, "a NUL byte");
    if (!out.empty()) out += '/';
    out += c;
  }
  return out;
}

std::pair<std::string, std::string> SplitParent(const std::string& rel) {
  size_t slash = rel.rfind('/');
  if (slash == std::string::npos) return {"", rel};
  return {rel.substr(0, slash), rel.substr(slash + 1)};
}

// Removes `name` in `dirfd` whatever it is, a directory with all it holds
// included, following no symlink.
Status RemoveEntryAt(int dirfd, const std::string& name, int depth = 0) {
  if (unlinkat(dirfd, name.c_str(), 0) == 0 || errno == ENOENT) return {};
  if (errno != EISDIR && errno != EPERM) return MakeSyscallError("unlinkat", errno, name);
  if (depth > kMaxRemoveDepth) return MakeError(ErrorCode::kInvalidArgument, "layer tree too deep");
  UniqueFd dir(openat(dirfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir) return MakeSyscallError("openat", errno, name);
  auto entries = fs::ReadDir(dir.get(), name);
  if (!entries) return tl::unexpected(entries.error());
  for (const auto& e : *entries) {
    if (auto s = RemoveEntryAt(dir.get(), e.name, depth + 1); !s) return s;
  }
  if (unlinkat(dirfd, name.c_str(), AT_REMOVEDIR) != 0) {
    return MakeSyscallError("unlinkat", errno, name);
  }
  return {};
}

class LayerWriter {
 public:
  LayerWriter(const fs::LibArchive& api, archive* a, fs::Root root)
      : A(api), a_(a), root_(std::move(root)) {}

  Status Entry(archive_entry* entry, LayerExtractStats& stats) {
    const char* raw = A.archive_entry_pathname(entry);
    std::string name = raw != nullptr ? raw : "";
    auto rel = LayerRelativePath(name);
    if (!rel) return tl::unexpected(rel.error());
    ++stats.entries;
    auto [parent_rel, base] = SplitParent(*rel);

    if (const char* link = A.archive_entry_hardlink(entry); link != nullptr) {
      return HardLink(name, *rel, link);
    }
    // Whiteouts: the marker names what lower layers lose.
    if (base.starts_with(kWhiteoutPrefix)) {
      auto dir = ParentDir(name, parent_rel);
      if (!dir) return tl::unexpected(dir.error());
      if (base == kOpaqueMarker) {
        ++stats.opaque_dirs;
        return MarkOpaque(name, dir->get());
      }
      std::string hidden = base.substr(kWhiteoutPrefix.size());
      if (hidden.starts_with(kWhiteoutPrefix)) {  // other AUFS metadata (.wh..wh.plnk...)
        Note(stats, fmt::format("'{}': AUFS metadata left out", Shown(name)));
        return {};
      }
      if (hidden.empty() || hidden == "." || hidden == "..") {
        return Refused(name, "a whiteout of no valid name");
      }
      ++stats.whiteouts;
      if (auto s = RemoveEntryAt(dir->get(), hidden); !s) return s;
      if (mknodat(dir->get(), hidden.c_str(), S_IFCHR | 0, makedev(0, 0)) != 0) {
        return MakeSyscallError(
            "mknodat (an overlay whiteout, character device 0/0)", errno,
            root_.ToAbsolute(parent_rel.empty() ? hidden : parent_rel + "/" + hidden));
      }
      return {};
    }
    if (rel->empty()) return {};  // "./": the layer's root itself

    const mode_t type = A.archive_entry_filetype(entry);
    mode_t perm = A.archive_entry_perm(entry) & 07777;
    if (perm & (S_ISUID | S_ISGID)) {
      Note(stats, fmt::format("'{}': setuid/setgid bits dropped", Shown(name)));
      perm &= ~(S_ISUID | S_ISGID);
    }
    switch (type) {
      case AE_IFDIR:
        return Directory(name, parent_rel, base, perm);
      case AE_IFREG:
        return RegularFile(entry, name, parent_rel, base, perm & 0777, stats);
      case AE_IFLNK:
        return Symlink(entry, name, parent_rel, base);
      case AE_IFIFO: {
        auto dir = ParentDir(name, parent_rel);
        if (!dir) return tl::unexpected(dir.error());
        if (auto s = RemoveEntryAt(dir->get(), base); !s) return s;
        if (mknodat(dir->get(), base.c_str(), S_IFIFO | (perm & 0777), 0) != 0) {
          return MakeSyscallError("mknodat", errno, root_.ToAbsolute(*rel));
        }
        return {};
      }
      case AE_IFCHR:
      case AE_IFBLK:
      case AE_IFSOCK:
        Note(stats, fmt::format("'{}': {} left out", Shown(name),
                                type == AE_IFSOCK ? "socket" : "device node"));
        return {};
      default:
        return Refused(name, fmt::format("unknown entry type {:o}", type));
    }
  }

 private:
  void Note(LayerExtractStats& stats, std::string note) {
    ++stats.neutralised;
    if (stats.notes.size() < kMaxNotes) stats.notes.push_back(std::move(note));
  }

  // The parent directory (an O_PATH fd), made where missing, through no symlink.
  Result<UniqueFd> ParentDir(std::string_view name, const std::string& parent_rel) {
    if (parent_rel.empty()) {
      int fd = fcntl(root_.fd(), F_DUPFD_CLOEXEC, 0);
      if (fd < 0) return MakeSyscallError("fcntl(F_DUPFD_CLOEXEC)", errno, root_.path());
      return UniqueFd(fd);
    }
    auto dir = root_.MakeDirsNoSymlinks(parent_rel, 0755);
    if (!dir) {
      Error e = dir.error();
      e.message = fmt::format("layer entry '{}': {}", Shown(name), e.message);
      if (e.code == ErrorCode::kConflict) e.code = ErrorCode::kPermissionDenied;
      return tl::unexpected(e);
    }
    return dir;
  }

  Status MarkOpaque(std::string_view name, int parent) {
    UniqueFd dir(openat(parent, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!dir) return MakeSyscallError("openat", errno, Shown(name));
    if (fsetxattr(dir.get(), std::string(kOverlayOpaqueXattr).c_str(), "y", 1, 0) != 0) {
      return MakeSyscallError(fmt::format("fsetxattr({})", kOverlayOpaqueXattr), errno,
                              Shown(name));
    }
    // Only real root may; an overlay mounted by real root reads this one.
    (void)fsetxattr(dir.get(), std::string(kOverlayOpaqueTrustedXattr).c_str(), "y", 1, 0);
    return {};
  }

  Status Directory(std::string_view name, const std::string& parent_rel, const std::string& base,
                   mode_t perm) {
    auto parent = ParentDir(name, parent_rel);
    if (!parent) return tl::unexpected(parent.error());
    struct stat st {};
    if (fstatat(parent->get(), base.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
      if (!S_ISDIR(st.st_mode)) {
        if (auto s = RemoveEntryAt(parent->get(), base); !s) return s;
      }
    } else if (errno != ENOENT) {
      return MakeSyscallError("fstatat", errno, Shown(name));
    }
    if (mkdirat(parent->get(), base.c_str(), 0700) != 0 && errno != EEXIST) {
      return MakeSyscallError("mkdirat", errno, Shown(name));
    }
    // Writable by us whatever the layer says: the rest of the layer goes in,
    // and `image prune` must be able to remove it.
    if (fchmodat(parent->get(), base.c_str(), (perm & 01777) | 0700, 0) != 0) {
      return MakeSyscallError("fchmodat", errno, Shown(name));
    }
    return {};
  }

  Status RegularFile(archive_entry* entry, std::string_view name, const std::string& parent_rel,
                     const std::string& base, mode_t perm, LayerExtractStats& stats) {
    if (!A.archive_entry_size_is_set(entry)) return Refused(name, "a file without a size");
    const int64_t size = A.archive_entry_size(entry);
    if (size < 0) return Refused(name, "a negative size");
    auto parent = ParentDir(name, parent_rel);
    if (!parent) return tl::unexpected(parent.error());
    if (auto s = RemoveEntryAt(parent->get(), base); !s) return s;
    UniqueFd fd(openat(parent->get(), base.c_str(),
                       O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!fd) return MakeSyscallError("openat", errno, Shown(name));
    uint64_t end = 0;
    for (;;) {
      const void* buf = nullptr;
      size_t len = 0;
      la_int64_t offset = 0;
      int r = A.archive_read_data_block(a_, &buf, &len, &offset);
      if (r == ARCHIVE_EOF) break;
      if (r < ARCHIVE_WARN) {
        const char* e = A.archive_error_string(a_);
        return MakeError(ErrorCode::kInvalidArgument,
                         fmt::format("layer entry '{}': {}", Shown(name),
                                     Shown(e != nullptr ? e : "unreadable data")));
      }
      if (offset < 0 || static_cast<uint64_t>(offset) + len > static_cast<uint64_t>(size)) {
        return Refused(name, fmt::format("data beyond the {} bytes its header says", size));
      }
      const char* p = static_cast<const char*>(buf);
      size_t done = 0;
      while (done < len) {
        ssize_t n = pwrite(fd.get(), p + done, len - done, offset + static_cast<off_t>(done));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return MakeSyscallError("pwrite", errno, Shown(name));
        done += static_cast<size_t>(n);
      }
      end = std::max<uint64_t>(end, static_cast<uint64_t>(offset) + len);
      stats.file_bytes += len;
    }
    // A sparse file's last hole.
    if (end < static_cast<uint64_t>(size) && ftruncate(fd.get(), size) != 0) {
      return MakeSyscallError("ftruncate", errno, Shown(name));
    }
    if (fchmod(fd.get(), perm) != 0) return MakeSyscallError("fchmod", errno, Shown(name));
    if (A.archive_entry_mtime_is_set(entry)) {
      timespec times[2] = {{0, UTIME_OMIT},
                           {A.archive_entry_mtime(entry), A.archive_entry_mtime_nsec(entry)}};
      (void)futimens(fd.get(), times);
    }
    return {};
  }

  Status Symlink(archive_entry* entry, std::string_view name, const std::string& parent_rel,
                 const std::string& base) {
    const char* target = A.archive_entry_symlink(entry);
    if (target == nullptr || *target == '\0') return Refused(name, "a symlink without a target");
    if (std::string_view(target).size() > kMaxLayerPath) {
      return Refused(name, "a symlink target longer than 4095 bytes");
    }
    auto parent = ParentDir(name, parent_rel);
    if (!parent) return tl::unexpected(parent.error());
    if (auto s = RemoveEntryAt(parent->get(), base); !s) return s;
    // Kept as written (absolute too): it is only ever resolved inside the
    // image's root; extraction never follows it (ParentDir refuses paths
    // through symlinks).
    if (symlinkat(target, parent->get(), base.c_str()) != 0) {
      return MakeSyscallError("symlinkat", errno, Shown(name));
    }
    if (A.archive_entry_mtime_is_set(entry)) {
      timespec times[2] = {{0, UTIME_OMIT},
                           {A.archive_entry_mtime(entry), A.archive_entry_mtime_nsec(entry)}};
      (void)utimensat(parent->get(), base.c_str(), times, AT_SYMLINK_NOFOLLOW);
    }
    return {};
  }

  // A hard link names a regular file this layer already holds: resolved
  // beneath the layer's root through no symlink.
  Status HardLink(std::string_view name, const std::string& rel, std::string_view link) {
    auto target = LayerRelativePath(link);
    if (!target) {
      return Refused(name, fmt::format("a hard link to '{}', outside the layer", Shown(link)));
    }
    if (target->empty() || *target == rel) return Refused(name, "a hard link to itself");
    auto [target_parent, target_base] = SplitParent(*target);
    UniqueFd tdir;
    if (target_parent.empty()) {
      tdir = UniqueFd(fcntl(root_.fd(), F_DUPFD_CLOEXEC, 0));
    } else {
      auto opened = root_.OpenNoSymlinks(target_parent, O_PATH | O_DIRECTORY);
      if (!opened) {
        return Refused(
            name, fmt::format("a hard link to '{}', which this layer does not hold", Shown(link)));
      }
      tdir = std::move(*opened);
    }
    struct stat st {};
    if (!tdir || fstatat(tdir.get(), target_base.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      return Refused(
          name, fmt::format("a hard link to '{}', which this layer does not hold", Shown(link)));
    }
    if (!S_ISREG(st.st_mode)) {
      return Refused(name,
                     fmt::format("a hard link to '{}', which is not a regular file", Shown(link)));
    }
    auto [parent_rel, base] = SplitParent(rel);
    auto parent = ParentDir(name, parent_rel);
    if (!parent) return tl::unexpected(parent.error());
    if (auto s = RemoveEntryAt(parent->get(), base); !s) return s;
    if (linkat(tdir.get(), target_base.c_str(), parent->get(), base.c_str(), 0) != 0) {
      return MakeSyscallError("linkat", errno, Shown(name));
    }
    return {};
  }

  const fs::LibArchive& A;
  archive* a_;
  fs::Root root_;
};

}  // namespace

Result<LayerExtractStats> ExtractLayer(const LayerSource& source, const std::string& dest_dir) {
  auto api = fs::LoadLibArchive("extracting image layers");
  if (!api) return tl::unexpected(api.error());
  const fs::LibArchive& A = **api;
  auto root = fs::Root::Open(dest_dir);
  if (!root) return tl::unexpected(root.error());
  std::unique_ptr<archive, ArchiveCloser> a(A.archive_read_new(), ArchiveCloser{&A});
  if (!a) return MakeError(ErrorCode::kResourceExhausted, "archive_read_new failed");
  A.archive_read_support_format_tar(a.get());
  A.archive_read_support_filter_gzip(a.get());
  A.archive_read_support_filter_zstd(a.get());
  SourceState state{&source};
  auto archive_failure = [&](std::string_view doing) -> tl::unexpected<Error> {
    if (state.error) return tl::unexpected(*state.error);
    const char* e = A.archive_error_string(a.get());
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("layer: {}: {}", doing,
                                 Shown(e != nullptr ? e : "not a tar, tar.gz or tar.zst stream")));
  };
  if (A.archive_read_open(a.get(), &state, nullptr, ReadFromSource, nullptr) != ARCHIVE_OK) {
    return archive_failure("opening");
  }
  LayerWriter writer(A, a.get(), std::move(*root));
  LayerExtractStats stats;
  for (;;) {
    archive_entry* entry = nullptr;
    int r = A.archive_read_next_header(a.get(), &entry);
    if (r == ARCHIVE_EOF) break;
    if (r < ARCHIVE_WARN) return archive_failure("reading an entry header");
    if (auto s = writer.Entry(entry, stats); !s) {
      if (state.error) return tl::unexpected(*state.error);
      return tl::unexpected(s.error());
    }
  }
  return stats;
}

Result<LayerExtractStats> ExtractLayerFile(int fd, const std::string& dest_dir) {
  LayerSource source = [fd](char* buf, size_t size) -> Result<size_t> {
    for (;;) {
      ssize_t n = read(fd, buf, size);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return MakeSyscallError("read", errno, "layer blob");
      return static_cast<size_t>(n);
    }
  };
  return ExtractLayer(source, dest_dir);
}

}  // namespace deepbox::oci
