#include "sandboxd/fs/workspace.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "common/io.h"
#include "common/utf8.h"
#include "fs/dir_entries.h"
#include "sandboxd/fs/fs_util.h"

namespace deepbox::sandboxd::fs {

using deepbox::fs::AtomicFileWriter;
using deepbox::fs::DirEntry;
using deepbox::fs::JoinRelative;
using deepbox::fs::ReadDir;
using deepbox::fs::ReadLinkAt;
using deepbox::fs::Root;
using deepbox::fs::WriteOptions;
using deepbox::fs::WriteResult;

namespace {

constexpr size_t kReadChunk = 64 << 10;
constexpr int kMaxDeleteDepth = 512;

FileType TypeOf(mode_t mode) {
  if (S_ISREG(mode)) return FileType::kFile;
  if (S_ISDIR(mode)) return FileType::kDirectory;
  if (S_ISLNK(mode)) return FileType::kSymlink;
  return FileType::kOther;
}

// A getdents64 d_type (not DT_UNKNOWN), as lstat would classify it.
FileType TypeOfDirent(unsigned char type) {
  switch (type) {
    case DT_REG:
      return FileType::kFile;
    case DT_DIR:
      return FileType::kDirectory;
    case DT_LNK:
      return FileType::kSymlink;
    default:
      return FileType::kOther;
  }
}

FileInfo InfoFromStat(const struct stat& st, std::string path, std::string name) {
  FileInfo info;
  info.path = std::move(path);
  info.name = std::move(name);
  info.type = TypeOf(st.st_mode);
  info.size = static_cast<uint64_t>(st.st_size);
  info.mode = st.st_mode & 07777;
  info.mtime_epoch = st.st_mtim.tv_sec;
  info.mtime_nsec = st.st_mtim.tv_nsec;
  info.mtime = FormatRfc3339(st.st_mtim);
  return info;
}

std::string BaseName(std::string_view abs) {
  size_t slash = abs.rfind('/');
  std::string_view base = slash == std::string_view::npos ? abs : abs.substr(slash + 1);
  return base.empty() ? std::string("/") : std::string(base);
}

// Cuts `s` to at most `max` bytes without splitting a UTF-8 sequence.
void CutUtf8(std::string& s, size_t max) {
  if (s.size() > max) s.resize(max);
  s.resize(Utf8CompletePrefix(s));
}

Result<ReadResult> ReadLines(ReadStream& stream, const ReadOptions& opts, ReadResult out) {
  out.line_mode = true;
  const uint64_t first = opts.line_offset.value_or(0);
  const uint64_t limit = opts.line_limit.value_or(std::numeric_limits<uint64_t>::max());
  const uint64_t end = limit > std::numeric_limits<uint64_t>::max() - first
                           ? std::numeric_limits<uint64_t>::max()
                           : first + limit;
  out.line_offset = first;
  std::string head;      // first bytes of the file, for binary detection
  std::string cur;       // the line being collected
  bool in_line = false;  // bytes seen after the last '\n'
  bool cap_hit = false;
  uint64_t used = 0;  // bytes returned so far
  uint64_t line = 0;  // index of the current line (= '\n' seen so far)
  std::vector<char> buf(kReadChunk);
  auto finish_line = [&]() {
    if (!cur.empty() && cur.back() == '\r') cur.pop_back();
    used += cur.size();
    out.lines.push_back(std::move(cur));
    cur.clear();
  };
  for (;;) {
    auto got = ReadFull(stream.fd.get(), buf.data(), buf.size(), stream.path);
    if (!got) return tl::unexpected(got.error());
    if (*got == 0) break;
    const char* data = buf.data();
    const size_t n = *got;
    if (head.size() < kBinaryProbeBytes) {
      head.append(data, std::min(n, kBinaryProbeBytes - head.size()));
    }
    size_t p = 0;
    while (p < n) {
      const bool collecting = line >= first && line < end && !cap_hit;
      if (!collecting) {
        // Outside the window: count lines in bulk, except to find where the
        // window starts.
        size_t count = CountNewlines(data + p, n - p);
        if (line >= end || cap_hit || line + count < first) {
          line += count;
          in_line = data[n - 1] != '\n';
          p = n;
          continue;
        }
        const char* nl = static_cast<const char*>(std::memchr(data + p, '\n', n - p));
        ++line;  // nl exists: count >= first - line >= 1
        in_line = false;
        p = static_cast<size_t>(nl - data) + 1;
        continue;
      }
      const char* nl = static_cast<const char*>(std::memchr(data + p, '\n', n - p));
      const size_t e = nl ? static_cast<size_t>(nl - data) : n;
      const size_t take = e - p;
      const uint64_t room =
          opts.max_bytes > used + cur.size() ? opts.max_bytes - used - cur.size() : 0;
      if (take > room) {
        // The cap cuts this line: return its head, skip the rest of the file
        // (still counting lines).
        cur.append(data + p, static_cast<size_t>(room));
        cur.resize(Utf8CompletePrefix(cur));
        cap_hit = true;
        out.truncated = true;
        finish_line();
        p += static_cast<size_t>(room);
        in_line = true;
        continue;
      }
      cur.append(data + p, take);
      if (nl) {
        finish_line();
        ++line;
        in_line = false;
        p = e + 1;
      } else {
        in_line = true;
        p = n;
      }
    }
  }
  if (in_line) {
    if (line >= first && line < end && !cap_hit) finish_line();
    ++line;
  }
  out.total_lines = line;
  out.more_lines = out.total_lines > first + out.lines.size();
  out.binary = LooksBinary(head);
  return out;
}

}  // namespace

std::string_view FileTypeName(FileType type) {
  switch (type) {
    case FileType::kFile:
      return "file";
    case FileType::kDirectory:
      return "directory";
    case FileType::kSymlink:
      return "symlink";
    case FileType::kOther:
      return "other";
  }
  return "other";
}

Result<FileInfo> Stat(const Root& root, std::string_view path) {
  auto rel = root.ToRelative(path);
  if (!rel) return tl::unexpected(rel.error());
  struct stat st;
  if (rel->empty()) {
    if (::fstatat(root.fd(), "", &st, AT_EMPTY_PATH) != 0) {
      return MakeSyscallError("fstatat", errno, root.path());
    }
    return InfoFromStat(st, root.path(), BaseName(root.path()));
  }
  auto loc = root.OpenParent(*rel);
  if (!loc) return tl::unexpected(loc.error());
  std::string abs = root.ToAbsolute(*rel);
  if (::fstatat(loc->dir.get(), loc->name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return MakeSyscallError("fstatat", errno, abs);
  }
  FileInfo info = InfoFromStat(st, abs, loc->name);
  if (info.type == FileType::kSymlink) {
    int err = 0;
    auto target = ReadLinkAt(loc->dir.get(), loc->name.c_str(), &err);
    if (!target) return MakeSyscallError("readlinkat", err, abs);
    info.symlink_target = std::move(*target);
  }
  return info;
}

Result<ListResult> List(const Root& root, std::string_view path, const ListOptions& options) {
  auto rel = root.ToRelative(path);
  if (!rel) return tl::unexpected(rel.error());
  ListResult out;
  out.path = root.ToAbsolute(*rel);
  auto dir = root.Open(*rel, O_RDONLY | O_DIRECTORY);
  if (!dir) return tl::unexpected(dir.error());
  auto entries = ReadDir(dir->get(), out.path);
  if (!entries) return tl::unexpected(entries.error());
  std::sort(entries->begin(), entries->end(),
            [](const DirEntry& a, const DirEntry& b) { return a.name < b.name; });
  if (entries->size() > options.max_entries) {
    entries->resize(options.max_entries);
    out.truncated = true;
  }
  out.entries.reserve(entries->size());
  out.stat = options.stat;
  // out.path + "/" + name is root.ToAbsolute(JoinRelative(*rel, name)).
  std::string prefix = out.path;
  if (prefix != "/") prefix += '/';
  auto add_bare = [&](const DirEntry& e, FileType type) {
    FileInfo info;
    info.path.reserve(prefix.size() + e.name.size());
    info.path.append(prefix).append(e.name);
    info.name = e.name;
    info.type = type;
    out.entries.push_back(std::move(info));
  };
  for (const auto& e : *entries) {
    if (!options.stat && e.type != DT_UNKNOWN) {
      add_bare(e, TypeOfDirent(e.type));
      continue;
    }
    struct stat st;
    if (::fstatat(dir->get(), e.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) continue;  // removed while listing
      return MakeSyscallError("fstatat", errno, JoinRelative(out.path, e.name));
    }
    if (!options.stat) {  // the file system gave no type: lstat's
      add_bare(e, TypeOf(st.st_mode));
      continue;
    }
    std::string abs;
    abs.reserve(prefix.size() + e.name.size());
    abs.append(prefix).append(e.name);
    FileInfo info = InfoFromStat(st, std::move(abs), e.name);
    if (info.type == FileType::kSymlink) {
      int err = 0;
      if (auto target = ReadLinkAt(dir->get(), e.name.c_str(), &err)) {
        info.symlink_target = std::move(*target);
      }
    }
    out.entries.push_back(std::move(info));
  }
  return out;
}

Result<ReadStream> OpenForRead(const Root& root, std::string_view path) {
  auto rel = root.ToRelative(path);
  if (!rel) return tl::unexpected(rel.error());
  ReadStream out;
  out.path = root.ToAbsolute(*rel);
  // O_NONBLOCK: opening a FIFO must not hang the daemon.
  auto fd = root.Open(*rel, O_RDONLY | O_NOCTTY | O_NONBLOCK);
  if (!fd) return tl::unexpected(fd.error());
  struct stat st;
  if (::fstat(fd->get(), &st) != 0) return MakeSyscallError("fstat", errno, out.path);
  if (S_ISDIR(st.st_mode)) return MakeSyscallError("read", EISDIR, out.path);
  if (!S_ISREG(st.st_mode)) {
    return MakeError(ErrorCode::kInvalidArgument, fmt::format("not a regular file: {}", out.path),
                     std::string(kReasonNotRegularFile));
  }
  int fl = ::fcntl(fd->get(), F_GETFL);
  if (fl >= 0) ::fcntl(fd->get(), F_SETFL, fl & ~O_NONBLOCK);
  out.fd = std::move(*fd);
  out.size = static_cast<uint64_t>(st.st_size);
  return out;
}

Result<ReadResult> Read(const Root& root, std::string_view path, const ReadOptions& options) {
  const bool line_mode = options.line_offset || options.line_limit;
  if (line_mode && (options.offset || options.length)) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "a read takes either a byte range or a line window, not both");
  }
  auto stream = OpenForRead(root, path);
  if (!stream) return tl::unexpected(stream.error());
  ReadResult out;
  out.path = stream->path;
  out.size = stream->size;
  if (line_mode) return ReadLines(*stream, options, std::move(out));

  const uint64_t offset = options.offset.value_or(0);
  const uint64_t want = options.length.value_or(std::numeric_limits<uint64_t>::max());
  const uint64_t cap = std::min(want, options.max_bytes);
  out.offset = offset;
  // Binary detection always looks at the file's head, whatever the range.
  std::string head(kBinaryProbeBytes, '\0');
  ssize_t hn = ::pread(stream->fd.get(), head.data(), head.size(), 0);
  if (hn < 0) return MakeSyscallError("pread", errno, out.path);
  head.resize(static_cast<size_t>(hn));
  out.binary = LooksBinary(head);
  if (offset > 0 && ::lseek(stream->fd.get(), static_cast<off_t>(offset), SEEK_SET) < 0) {
    return MakeSyscallError("lseek", errno, out.path);
  }
  // Read up to cap (+1 byte to learn whether the cap cut anything).
  const bool probe_more = want > cap;
  const uint64_t limit = cap + (probe_more ? 1 : 0);
  const uint64_t expect = stream->size > offset ? stream->size - offset : 0;
  std::string content;
  content.resize(static_cast<size_t>(std::min<uint64_t>(limit, expect + 1)));
  size_t got = 0;
  for (;;) {
    if (got == content.size()) {  // the file grew, or its size is unknown (procfs)
      if (got >= limit) break;
      content.resize(static_cast<size_t>(
          std::min<uint64_t>(limit, std::max<uint64_t>(content.size() * 2, kReadChunk))));
    }
    ssize_t n = ::read(stream->fd.get(), content.data() + got, content.size() - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      return MakeSyscallError("read", errno, out.path);
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  content.resize(got);
  if (probe_more && content.size() > cap) {
    content.resize(static_cast<size_t>(cap));
    if (!out.binary) CutUtf8(content, content.size());
    out.truncated = true;
  }
  out.content = std::move(content);
  return out;
}

Result<WriteResult> Write(const Root& root, std::string_view path, std::string_view content,
                          const WriteOptions& options) {
  auto w = AtomicFileWriter::Create(root, path, options);
  if (!w) return tl::unexpected(w.error());
  if (auto st = w->Append(content); !st) return tl::unexpected(st.error());
  return w->Commit();
}

// ---------------------------------------------------------------------------
// Edit

namespace {

uint64_t CountOccurrences(std::string_view hay, std::string_view needle) {
  uint64_t n = 0;
  for (size_t pos = hay.find(needle); pos != std::string_view::npos;
       pos = hay.find(needle, pos + needle.size())) {
    ++n;
  }
  return n;
}

// "\n" not preceded by "\r" -> "\r\n".
std::string LfToCrlf(std::string_view s) {
  std::string out;
  out.reserve(s.size() + s.size() / 16);
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\n' && (i == 0 || s[i - 1] != '\r')) out += '\r';
    out += s[i];
  }
  return out;
}

std::string CrlfToLf(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') continue;
    out += s[i];
  }
  return out;
}

std::string ReplaceAll(std::string_view hay, std::string_view from, std::string_view to, bool all) {
  std::string out;
  out.reserve(hay.size());
  size_t start = 0;
  for (size_t pos = hay.find(from); pos != std::string_view::npos; pos = hay.find(from, start)) {
    out.append(hay.substr(start, pos - start));
    out.append(to);
    start = pos + from.size();
    if (!all) break;
  }
  out.append(hay.substr(start));
  return out;
}

}  // namespace

Result<EditResult> Edit(const Root& root, std::string_view path, std::string_view old_text,
                        std::string_view new_text, bool replace_all, const EditOptions& options) {
  if (old_text.empty()) {
    return MakeError(ErrorCode::kInvalidArgument, "the string to replace must not be empty");
  }
  auto rel = root.ToRelative(path);
  if (!rel) return tl::unexpected(rel.error());
  std::string abs = root.ToAbsolute(*rel);
  if (rel->empty()) return MakeSyscallError("open", EISDIR, abs);
  auto loc = root.OpenParentFollow(*rel);
  if (!loc) return tl::unexpected(loc.error());
  int fd = ::openat(loc->dir.get(), loc->name.c_str(),
                    O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return MakeSyscallError("openat", errno, abs);
  UniqueFd file(fd);
  struct stat st;
  if (::fstat(fd, &st) != 0) return MakeSyscallError("fstat", errno, abs);
  if (S_ISDIR(st.st_mode)) return MakeSyscallError("open", EISDIR, abs);
  if (!S_ISREG(st.st_mode)) {
    return MakeError(ErrorCode::kInvalidArgument, fmt::format("not a regular file: {}", abs),
                     std::string(kReasonNotRegularFile));
  }
  if (static_cast<uint64_t>(st.st_size) > options.max_file_bytes) {
    return MakeError(ErrorCode::kResourceExhausted,
                     fmt::format("file too large to edit ({} bytes, at most {}): {}", st.st_size,
                                 options.max_file_bytes, abs));
  }
  std::string content(static_cast<size_t>(st.st_size) + 1, '\0');
  auto got = ReadFull(fd, content.data(), content.size(), abs);
  if (!got) return tl::unexpected(got.error());
  if (*got > static_cast<size_t>(st.st_size)) {
    return MakeError(ErrorCode::kConflict, fmt::format("file changed while reading: {}", abs));
  }
  content.resize(*got);
  if (content.find('\0') != std::string::npos || !IsValidUtf8(content)) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("not a UTF-8 text file, cannot edit: {}", abs),
                     std::string(kReasonNotText));
  }

  std::string from(old_text);
  std::string to(new_text);
  uint64_t count = CountOccurrences(content, from);
  if (count == 0) {
    // Line-ending mismatch between the edit and the file.
    const bool file_crlf = content.find("\r\n") != std::string::npos;
    std::string alt_from;
    std::string alt_to;
    if (file_crlf && from.find('\n') != std::string::npos) {
      alt_from = LfToCrlf(from);
      alt_to = LfToCrlf(to);
    } else if (!file_crlf && from.find("\r\n") != std::string::npos) {
      alt_from = CrlfToLf(from);
      alt_to = CrlfToLf(to);
    }
    if (!alt_from.empty() && alt_from != from) {
      count = CountOccurrences(content, alt_from);
      if (count > 0) {
        from = std::move(alt_from);
        to = std::move(alt_to);
      }
    }
  }
  if (count == 0) {
    return MakeError(ErrorCode::kNotFound, fmt::format("String not found in file: {}", abs));
  }
  if (count > 1 && !replace_all) {
    return MakeError(ErrorCode::kConflict,
                     fmt::format("String appears {} times in file: {} (set replace_all, or add "
                                 "context to make it unique)",
                                 count, abs));
  }
  std::string updated = ReplaceAll(content, from, to, replace_all);

  WriteOptions wopts;
  wopts.mode = st.st_mode & 07777;
  wopts.follow_symlinks = false;  // already resolved to the real file
  auto writer = AtomicFileWriter::CreateAt(std::move(*loc), abs, wopts);
  if (!writer) return tl::unexpected(writer.error());
  if (auto s = writer->Append(updated); !s) return tl::unexpected(s.error());
  // Refuse to clobber a concurrent change made since we read the file.
  struct stat now;
  auto reopened = root.OpenParentFollow(*rel);
  if (!reopened) return tl::unexpected(reopened.error());
  if (::fstatat(reopened->dir.get(), reopened->name.c_str(), &now, AT_SYMLINK_NOFOLLOW) != 0 ||
      now.st_ino != st.st_ino || now.st_dev != st.st_dev || now.st_size != st.st_size ||
      now.st_mtim.tv_sec != st.st_mtim.tv_sec || now.st_mtim.tv_nsec != st.st_mtim.tv_nsec) {
    return MakeError(ErrorCode::kConflict, fmt::format("file changed during the edit: {}", abs));
  }
  auto done = writer->Commit();
  if (!done) return tl::unexpected(done.error());
  return EditResult{abs, replace_all ? count : 1};
}

// ---------------------------------------------------------------------------
// Mkdir, Move, Delete

Result<std::string> Mkdir(const Root& root, std::string_view path, bool parents, mode_t mode) {
  auto rel = root.ToRelative(path);
  if (!rel) return tl::unexpected(rel.error());
  std::string abs = root.ToAbsolute(*rel);
  if (parents) {
    auto fd = root.MakeDirs(*rel, mode);
    if (!fd) return tl::unexpected(fd.error());
    return abs;
  }
  if (rel->empty()) return MakeSyscallError("mkdirat", EEXIST, abs);
  auto loc = root.OpenParent(*rel);
  if (!loc) return tl::unexpected(loc.error());
  if (::mkdirat(loc->dir.get(), loc->name.c_str(), mode) != 0) {
    return MakeSyscallError("mkdirat", errno, abs);
  }
  return abs;
}

Result<std::string> Move(const Root& root, std::string_view src, std::string_view dst,
                         bool overwrite) {
  auto src_rel = root.ToRelative(src);
  if (!src_rel) return tl::unexpected(src_rel.error());
  auto dst_rel = root.ToRelative(dst);
  if (!dst_rel) return tl::unexpected(dst_rel.error());
  auto from = root.OpenParent(*src_rel);
  if (!from) return tl::unexpected(from.error());
  auto to = root.OpenParent(*dst_rel);
  if (!to) return tl::unexpected(to.error());
  std::string abs_dst = root.ToAbsolute(*dst_rel);
  std::string subject = root.ToAbsolute(*src_rel) + " -> " + abs_dst;
  const int sdir = from->dir.get();
  const int ddir = to->dir.get();
  const char* sname = from->name.c_str();
  const char* dname = to->name.c_str();
  if (overwrite) {
    if (::renameat(sdir, sname, ddir, dname) != 0) {
      return MakeSyscallError("renameat", errno, subject);
    }
    return abs_dst;
  }
  if (::renameat2(sdir, sname, ddir, dname, RENAME_NOREPLACE) == 0) return abs_dst;
  if (errno != EINVAL) return MakeSyscallError("renameat2", errno, subject);
  // EINVAL: no RENAME_NOREPLACE on this filesystem, or a directory moved into
  // itself. Check, then plain rename (which reports the latter itself).
  struct stat st;
  if (::fstatat(ddir, dname, &st, AT_SYMLINK_NOFOLLOW) == 0) {
    return MakeSyscallError("renameat2", EEXIST, subject);
  }
  if (::renameat(sdir, sname, ddir, dname) != 0) {
    return MakeSyscallError("renameat", errno, subject);
  }
  return abs_dst;
}

namespace {

// Removes the directory `name` in `parent` and everything below it, through
// directory fds opened with O_NOFOLLOW: a symlink is unlinked, never entered.
Status RemoveTree(int parent, const std::string& name, const std::string& abs, int depth) {
  if (depth > kMaxDeleteDepth) {
    return MakeError(ErrorCode::kResourceExhausted,
                     fmt::format("directory tree too deep to delete: {}", abs));
  }
  for (int round = 0; round < 4; ++round) {
    int fd =
        ::openat(parent, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
      if (errno == ENOTDIR || errno == ELOOP) {  // replaced by a non-directory meanwhile
        if (::unlinkat(parent, name.c_str(), 0) != 0 && errno != ENOENT) {
          return MakeSyscallError("unlinkat", errno, abs);
        }
        return {};
      }
      if (errno == ENOENT) return {};
      return MakeSyscallError("openat", errno, abs);
    }
    UniqueFd dir(fd);
    auto entries = ReadDir(fd, abs);
    if (!entries) return tl::unexpected(entries.error());
    for (const auto& e : *entries) {
      std::string child = abs + "/" + e.name;
      bool is_dir = e.type == DT_DIR;
      if (e.type == DT_UNKNOWN) {
        struct stat st;
        if (::fstatat(fd, e.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
          if (errno == ENOENT) continue;
          return MakeSyscallError("fstatat", errno, child);
        }
        is_dir = S_ISDIR(st.st_mode);
      }
      if (!is_dir) {
        if (::unlinkat(fd, e.name.c_str(), 0) == 0 || errno == ENOENT) continue;
        if (errno != EISDIR) return MakeSyscallError("unlinkat", errno, child);
      }
      if (auto st = RemoveTree(fd, e.name, child, depth + 1); !st) return st;
    }
    if (::unlinkat(parent, name.c_str(), AT_REMOVEDIR) == 0 || errno == ENOENT) return {};
    if (errno != ENOTEMPTY && errno != EEXIST) return MakeSyscallError("unlinkat", errno, abs);
    // Something was created meanwhile: another round.
  }
  return MakeSyscallError("unlinkat", ENOTEMPTY, abs);
}

}  // namespace

Status Delete(const Root& root, std::string_view path, bool recursive) {
  auto rel = root.ToRelative(path);
  if (!rel) return tl::unexpected(rel.error());
  std::string abs = root.ToAbsolute(*rel);
  if (rel->empty()) {
    return MakeError(ErrorCode::kPermissionDenied,
                     fmt::format("refusing to delete the root directory {}", abs));
  }
  auto loc = root.OpenParent(*rel);
  if (!loc) return tl::unexpected(loc.error());
  struct stat st;
  if (::fstatat(loc->dir.get(), loc->name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return MakeSyscallError("fstatat", errno, abs);
  }
  if (!S_ISDIR(st.st_mode)) {
    if (::unlinkat(loc->dir.get(), loc->name.c_str(), 0) != 0) {
      return MakeSyscallError("unlinkat", errno, abs);
    }
    return {};
  }
  if (::unlinkat(loc->dir.get(), loc->name.c_str(), AT_REMOVEDIR) == 0) return {};
  if (errno != ENOTEMPTY && errno != EEXIST) return MakeSyscallError("unlinkat", errno, abs);
  if (!recursive) {
    Error e = SyscallError("unlinkat", ENOTEMPTY, abs);
    e.message = "directory not empty (delete it recursively): " + e.message;
    return tl::unexpected(std::move(e));
  }
  return RemoveTree(loc->dir.get(), loc->name, abs, 0);
}

}  // namespace deepbox::sandboxd::fs
