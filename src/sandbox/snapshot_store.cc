#include "sandbox/snapshot_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <limits.h>
#include <stdio.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>

#include "common/byte_size.h"
#include "common/io.h"
#include "common/json.h"
#include "common/make_dirs.h"
#include "common/remove_tree.h"
#include "common/time.h"
#include "common/trusted_path.h"
#include "common/unique_fd.h"
#include "common/user_state_dir.h"

namespace deepbox {
namespace {

namespace fs = std::filesystem;

constexpr const char* kRecord = "snapshot.json";
constexpr size_t kMaxRecordBytes = 64 * 1024;  // a record is a few hundred bytes
// Far longer than any snapshot takes to write (writers that run longer say
// so: PendingSnapshot::KeepAlive).
constexpr auto kStaleAfter = std::chrono::hours(1);

std::string RandomSuffix() {
  uint32_t r = 0;
  (void)getrandom(&r, sizeof(r), 0);
  return fmt::format("{:08x}", r);
}

Error NoSuchSnapshot(std::string_view name) {
  return Error(ErrorCode::kNotFound,
               fmt::format("no snapshot '{}' (see: deepbox sandbox snapshot ls)", name));
}

Error BadName(std::string_view name) {
  return Error(ErrorCode::kInvalidArgument,
               fmt::format("snapshot name '{}': use 1-63 letters, digits, '_', '.' and '-', "
                           "starting with a letter or digit",
                           name.substr(0, 100)));
}

// The rule for the store's directory (snapshot_store.h, "Trust").
constexpr TrustedPath kStoreDir{"the snapshot directory", "DEEPBOX_SNAPSHOT_DIR",
                                "chooses the files a restore puts into a sandbox"};

Result<uint64_t> QuotaFrom(uint64_t given) {
  if (given > 0) return given;
  const char* env = std::getenv("DEEPBOX_SNAPSHOT_QUOTA");
  if (env == nullptr || *env == '\0') return kDefaultSnapshotQuotaBytes;
  auto v = ParseByteSize(env, "DEEPBOX_SNAPSHOT_QUOTA");
  if (!v) return tl::unexpected(v.error());
  if (*v == 0) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "DEEPBOX_SNAPSHOT_QUOTA '0': give the most all snapshots together may hold "
                     "(e.g. 20G), or unset it for the default of 20 GiB");
  }
  return *v;
}

Result<SnapshotInfo> ReadRecord(const fs::path& dir, const std::string& name) {
  UniqueFd dfd(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dfd) {
    if (errno == ENOENT || errno == ENOTDIR || errno == ELOOP) {
      return tl::unexpected(NoSuchSnapshot(name));
    }
    return MakeSyscallError("open", errno, dir.string());
  }
  UniqueFd fd(openat(dfd.get(), kRecord, O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) {
    if (errno == ENOENT) return tl::unexpected(NoSuchSnapshot(name));
    return MakeSyscallError("open", errno, (dir / kRecord).string());
  }
  std::string text;
  char buf[8192];
  for (;;) {
    ssize_t n = read(fd.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return MakeSyscallError("read", errno, (dir / kRecord).string());
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > kMaxRecordBytes) {
      return MakeError(ErrorCode::kInternal, fmt::format("snapshot '{}': record too large", name));
    }
  }
  auto o = ParseJsonObject(text);
  if (!o) return MakeError(ErrorCode::kInternal, fmt::format("snapshot '{}': bad record", name));
  auto str = [&](const char* key) {
    auto it = o->find(key);
    return it != o->end() && it->value().is_string() ? std::string(it->value().as_string())
                                                     : std::string();
  };
  auto num = [&](const char* key) -> int64_t {
    auto it = o->find(key);
    return it != o->end() && it->value().is_int64() ? it->value().as_int64() : -1;
  };
  SnapshotInfo s;
  s.name = name;  // the directory's name, whatever the record says
  s.provider = str("provider");
  if (s.provider.empty()) s.provider = "local";  // records from before other providers had them
  s.source_id = str("source_id");
  s.created_at = str("created_at");
  s.size_bytes = num("size_bytes");
  s.file_bytes = num("file_bytes");
  s.note = str("note");
  return s;
}

}  // namespace

bool ValidSnapshotName(std::string_view name) {
  if (name.empty() || name.size() > 63 || !std::isalnum(static_cast<unsigned char>(name[0]))) {
    return false;
  }
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
  });
}

Result<fs::path> DefaultSnapshotDir(const std::string& state_dir, const EnvLookupFn& env_fn) {
  auto env = [&](const char* name) -> std::string {
    const char* v = env_fn ? env_fn(name) : std::getenv(name);
    return v == nullptr ? std::string() : std::string(v);
  };
  auto absolute = [](const std::string& value, const char* what) -> Result<fs::path> {
    if (value.front() != '/') {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("{} must be an absolute path, not '{}'", what, value));
    }
    return fs::path(value);
  };
  if (std::string d = env("DEEPBOX_SNAPSHOT_DIR"); !d.empty()) {
    return absolute(d, "DEEPBOX_SNAPSHOT_DIR");
  }
  // Who chose a state directory keeps everything there (tests, operators).
  std::string state = state_dir.empty() ? env("DEEPBOX_STATE_DIR") : state_dir;
  if (!state.empty()) {
    auto p = absolute(state, "DEEPBOX_STATE_DIR");
    if (!p) return p;
    return *p / "snapshots";
  }
  auto dir = UserStateDir(env, "snapshots", "DEEPBOX_SNAPSHOT_DIR");
  if (!dir) return tl::unexpected(dir.error());
  return fs::path(*dir);
}

Result<SnapshotStore> SnapshotStore::Open(const SnapshotStoreOptions& options) {
  fs::path dir;
  if (!options.dir.empty()) {
    dir = options.dir;
  } else {
    auto d = DefaultSnapshotDir(options.state_dir);
    if (!d) return tl::unexpected(d.error());
    dir = *d;
  }
  dir = dir.lexically_normal();
  if (!dir.has_filename()) dir = dir.parent_path();  // "/x/" -> "/x"
  if (!dir.is_absolute() || !dir.has_filename() || dir.filename() == "..") {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("the snapshot directory must be an absolute path below /, not "
                                 "'{}'",
                                 options.dir));
  }
  auto quota = QuotaFrom(options.quota_bytes);
  if (!quota) return tl::unexpected(quota.error());
  const fs::path parent = dir.parent_path();
  if (auto st = MakeDirs(parent.string(), 0700); !st) return tl::unexpected(st.error());
  if (auto st = CheckAncestorsCannotSwap(parent, dir, kStoreDir); !st)
    return tl::unexpected(st.error());
  UniqueFd pfd(open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!pfd) return MakeSyscallError("open", errno, parent.string());
  const std::string leaf = dir.filename().string();
  if (mkdirat(pfd.get(), leaf.c_str(), 0700) != 0 && errno != EEXIST) {
    return MakeSyscallError("mkdir", errno, dir.string());
  }
  UniqueFd fd(openat(pfd.get(), leaf.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) {
    int e = errno;
    struct stat st {};
    if ((e == ELOOP || e == ENOTDIR) &&
        fstatat(pfd.get(), leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)) {
      return MakeError(ErrorCode::kPermissionDenied,
                       fmt::format("refusing to use the snapshot directory {}: it is a symbolic "
                                   "link, which deepbox does not follow there (it could be "
                                   "re-pointed at any time); set DEEPBOX_SNAPSHOT_DIR to the "
                                   "directory itself",
                                   dir.string()));
    }
    if (e == ENOTDIR) {
      return MakeError(ErrorCode::kPermissionDenied,
                       fmt::format("the snapshot directory {} is not a directory", dir.string()));
    }
    return MakeSyscallError("open(O_DIRECTORY|O_NOFOLLOW)", e, dir.string());
  }
  if (auto st = CheckOwnedByUs(fd.get(), dir, kStoreDir); !st) return tl::unexpected(st.error());
  return SnapshotStore(dir, *quota);
}

Result<uint64_t> SnapshotStore::Budget(std::string_view what) const {
  auto existing = List();
  if (!existing) return tl::unexpected(existing.error());
  uint64_t used = 0;
  for (const auto& s : *existing)
    used += s.size_bytes > 0 ? static_cast<uint64_t>(s.size_bytes) : 0;
  if (used >= quota_) {
    return MakeError(ErrorCode::kResourceExhausted,
                     fmt::format("{}: the snapshot quota of {} is used up ({} in {} snapshots; "
                                 "remove some with `deepbox sandbox snapshot rm NAME`, or raise "
                                 "DEEPBOX_SNAPSHOT_QUOTA)",
                                 what, FormatBytes(quota_), FormatBytes(used), existing->size()));
  }
  return quota_ - used;
}

Result<std::unique_ptr<PendingSnapshot>> SnapshotStore::Begin(const std::string& name) const {
  if (!ValidSnapshotName(name)) return tl::unexpected(BadName(name));
  struct stat st {};
  if (lstat(PathOf(name).c_str(), &st) == 0) {
    return MakeError(ErrorCode::kConflict, fmt::format("snapshot '{}' exists already", name));
  }
  auto budget = Budget(fmt::format("snapshot '{}' not taken", name));
  if (!budget) return tl::unexpected(budget.error());
  fs::path tmp = dir_ / fmt::format(".tmp-{}-{}", name, RandomSuffix());
  if (mkdir(tmp.c_str(), 0700) != 0) return MakeSyscallError("mkdir", errno, tmp.string());
  return std::unique_ptr<PendingSnapshot>(new PendingSnapshot(dir_, tmp, name, *budget));
}

Result<std::unique_ptr<PendingSnapshot>> SnapshotStore::Scratch() const {
  auto budget = Budget("no room for the copy");
  if (!budget) return tl::unexpected(budget.error());
  fs::path tmp = dir_ / fmt::format(".tmp-scratch-{}", RandomSuffix());
  if (mkdir(tmp.c_str(), 0700) != 0) return MakeSyscallError("mkdir", errno, tmp.string());
  return std::unique_ptr<PendingSnapshot>(new PendingSnapshot(dir_, tmp, "", *budget));
}

Result<std::vector<SnapshotInfo>> SnapshotStore::List() const {
  std::vector<SnapshotInfo> out;
  DIR* d = opendir(dir_.c_str());
  if (d == nullptr) {
    if (errno == ENOENT) return out;
    return MakeSyscallError("opendir", errno, dir_.string());
  }
  std::vector<std::string> names;
  while (dirent* ent = readdir(d)) {
    std::string_view n = ent->d_name;
    if (n != "." && n != "..") names.emplace_back(n);
  }
  closedir(d);
  const auto now = std::chrono::system_clock::now();
  for (const auto& name : names) {
    fs::path p = dir_ / name;
    struct stat st {};
    if (lstat(p.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;
    if (name.starts_with(".tmp-")) {
      // What a writer or remover that died half-way left.
      auto mtime = std::chrono::system_clock::from_time_t(st.st_mtim.tv_sec);
      if (now - mtime > kStaleAfter) (void)RemoveTree(p);
      continue;
    }
    if (!ValidSnapshotName(name)) continue;
    if (auto s = ReadRecord(p, name)) out.push_back(std::move(*s));
  }
  std::sort(out.begin(), out.end(), [](const SnapshotInfo& a, const SnapshotInfo& b) {
    return a.created_at != b.created_at ? a.created_at < b.created_at : a.name < b.name;
  });
  return out;
}

Result<SnapshotInfo> SnapshotStore::Get(const std::string& name) const {
  if (!ValidSnapshotName(name)) return tl::unexpected(BadName(name));
  return ReadRecord(PathOf(name), name);
}

Result<SnapshotInfo> SnapshotStore::GetFor(const std::string& name,
                                           std::string_view provider) const {
  auto s = Get(name);
  if (!s) return s;
  if (s->provider != provider) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("snapshot '{}' was taken of a {} sandbox; restore it with "
                                 "--provider {}",
                                 name, s->provider.substr(0, 64), s->provider.substr(0, 64)));
  }
  return s;
}

Status SnapshotStore::Delete(const std::string& name) const {
  if (auto s = Get(name); !s) return tl::unexpected(s.error());
  fs::path trash = dir_ / fmt::format(".tmp-rm-{}-{}", name, RandomSuffix());
  if (rename(PathOf(name).c_str(), trash.c_str()) != 0) {
    if (errno == ENOENT) return tl::unexpected(NoSuchSnapshot(name));  // removed meanwhile
    return MakeSyscallError("rename", errno, PathOf(name).string());
  }
  return RemoveTree(trash);
}

PendingSnapshot::~PendingSnapshot() {
  if (!committed_) (void)RemoveTree(dir_);
}

void PendingSnapshot::KeepAlive() {
  std::time_t now = std::time(nullptr);
  if (now - touched_ < 60) return;
  touched_ = now;
  (void)utimensat(AT_FDCWD, dir_.c_str(), nullptr, 0);
}

Result<SnapshotInfo> PendingSnapshot::Commit(SnapshotInfo info) {
  if (name_.empty()) return MakeError(ErrorCode::kInternal, "a scratch copy is not a snapshot");
  if (committed_) return MakeError(ErrorCode::kInternal, "snapshot committed twice");
  info.name = name_;
  if (info.created_at.empty()) info.created_at = FormatRfc3339Ms(NowMs());
  // The record is written whole (temp + rename), and synced with the
  // directory's rename: a snapshot that survives a crash is readable.
  fs::path tmp = dir_ / "snapshot.json.tmp";
  {
    UniqueFd fd(open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!fd) return MakeSyscallError("open", errno, tmp.string());
    if (auto st = WriteAll(fd.get(), SnapshotInfoJson(info) + "\n", tmp.string()); !st) {
      return tl::unexpected(st.error());
    }
    if (fsync(fd.get()) != 0) return MakeSyscallError("fsync", errno, tmp.string());
  }
  if (rename(tmp.c_str(), (dir_ / kRecord).c_str()) != 0) {
    return MakeSyscallError("rename", errno, tmp.string());
  }
  const fs::path final_dir = store_ / name_;
  // RENAME_NOREPLACE: never over a directory that appeared meanwhile (rename
  // would replace an empty one).
  if (renameat2(AT_FDCWD, dir_.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_NOREPLACE) != 0) {
    int err = errno;
    if (err == EINVAL || err == ENOSYS) {  // a file system without it
      err = rename(dir_.c_str(), final_dir.c_str()) == 0 ? 0 : errno;
    }
    if (err == EEXIST || err == ENOTEMPTY) {
      return MakeError(ErrorCode::kConflict, fmt::format("snapshot '{}' exists already", name_));
    }
    if (err != 0) return MakeSyscallError("rename", err, final_dir.string());
  }
  committed_ = true;
  if (UniqueFd sfd(open(store_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)); sfd) {
    (void)fsync(sfd.get());
  }
  return info;
}

}  // namespace deepbox
