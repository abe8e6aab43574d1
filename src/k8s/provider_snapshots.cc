// Snapshots, restores and forks of Kubernetes sandboxes (provider.h). A
// claim's files are what its daemon sends of its root as a tar stream:
//
//   <snapshot store>/NAME/snapshot.json   what it is (SnapshotInfo, provider k8s)
//   <snapshot store>/NAME/workspace.tar   the daemon's archive, byte for byte
//
// The archive is a hostile daemon's bytes: the host only counts them
// (against the quota's rest: a daemon that sends forever is cut off) and
// stores them, never parses or extracts them. A restore sends them to a new
// claim's daemon, which extracts them confined to its own root, as it
// would any upload from its own sandbox's code.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "common/byte_size.h"
#include "common/io.h"
#include "common/json.h"
#include "common/unique_fd.h"
#include "k8s/provider.h"
#include "k8s/util.h"
#include "net/http_client.h"
#include "net/url.h"

namespace deepbox::k8s {
namespace {

namespace fs = std::filesystem;

constexpr const char* kArchive = "workspace.tar";
constexpr int kMaxFork = 32;
constexpr size_t kMaxErrorBody = 64 * 1024;
constexpr std::string_view kWhileRunningNote =
    "taken while it ran (Kubernetes cannot freeze a pod): a file a process was writing then may "
    "be incomplete";

// "NS.CLAIM-RANDOM", within a snapshot name's 63 characters.
std::string DefaultSnapshotName(const std::string& ns, const std::string& claim) {
  std::string base = ns + "." + claim;
  if (base.size() > 54) base = base.substr(0, 45) + "-" + NameHash(base);
  return base + "-" + RandomHex(8);
}

Result<size_t> ReadAt(int fd, char* buf, size_t size, uint64_t offset) {
  for (;;) {
    ssize_t n = pread(fd, buf, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return MakeSyscallError("pread", errno, "the snapshot's archive");
    return static_cast<size_t>(n);
  }
}

Error NotTaken(const std::string& id, Error e) {
  if (e.code == ErrorCode::kResourceExhausted) {
    e.message = fmt::format(
        "snapshot of sandbox '{}' not taken (nothing was kept, the sandbox is as it was): {}", id,
        e.message);
  }
  return e;
}

}  // namespace

Result<SnapshotStore> K8sSandboxProvider::Snapshots() const {
  SnapshotStoreOptions o;
  o.dir = options_.snapshot_dir;
  o.quota_bytes = options_.snapshot_quota_bytes;
  return SnapshotStore::Open(o);
}

Result<std::string> K8sSandboxProvider::TakeArchive(const std::string& id,
                                                    PendingSnapshot& pending) {
  auto before = Inspect(id);
  if (!before) return tl::unexpected(before.error());
  const bool was_suspended = before->state == "Suspended";
  {
    auto connected = Connect(id);  // resumes a suspended one
    if (!connected) return tl::unexpected(connected.error());
    SandboxdClient& client = *connected->client;
    const std::string root = client.root();
    if (root.empty()) {
      return MakeError(ErrorCode::kUnavailable,
                       fmt::format("sandbox {}: its daemon did not say where its files are "
                                   "(GET /deepbox/v1/info)",
                                   id));
    }
    const fs::path tar = pending.dir() / kArchive;
    UniqueFd fd(open(tar.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!fd) return MakeSyscallError("open", errno, tar.string());
    net::ClientRequest req;
    req.method = "POST";
    req.target = "/deepbox/v1/fs/tar/download";
    req.headers.Set("Content-Type", "application/json");
    json::object body;
    body["paths"] = json::array{json::value(JsonString(root))};
    req.body = ToJson(body);
    int status = 0;
    std::string error_body;
    uint64_t written = 0;
    bool over_budget = false;
    Status wrote;
    auto answer = client.http().SendStreaming(
        req,
        [&](const net::Response& head) {
          status = head.status;
          return true;
        },
        [&](std::string_view data) {
          if (status != 200) {
            error_body.append(data.substr(0, kMaxErrorBody - error_body.size()));
            return error_body.size() < kMaxErrorBody;
          }
          if (data.size() > pending.budget() - written) {
            over_budget = true;  // a daemon that sends forever stops here
            return false;
          }
          wrote = WriteAll(fd.get(), data, tar.string());
          if (!wrote) return false;
          written += data.size();
          pending.KeepAlive();
          return true;
        });
    if (over_budget) {
      return MakeError(ErrorCode::kResourceExhausted,
                       fmt::format("its files pass the {} the snapshot quota has left (all "
                                   "snapshots together: DEEPBOX_SNAPSHOT_QUOTA)",
                                   FormatBytes(pending.budget())));
    }
    if (!wrote) return tl::unexpected(wrote.error());
    if (!answer) {
      return tl::unexpected(NameRouterError(answer.error(), connected->connection->endpoint()));
    }
    if (status != 200) {
      net::Response r;
      r.status = status;
      r.body = std::move(error_body);
      return tl::unexpected(SandboxdClient::AnswerError(r, "tar download"));
    }
    // On disk before the record says it is whole.
    if (fdatasync(fd.get()) != 0) return MakeSyscallError("fdatasync", errno, tar.string());
  }
  std::string note(kWhileRunningNote);
  if (was_suspended) {
    // Back as the user left it (forced: the files are in the snapshot now).
    if (auto st = Suspend(id, SuspendOptions{.force = true}); !st) {
      note += fmt::format("; it was resumed for the copy, and suspending it again failed: {}",
                          st.error().message);
    }
  }
  return note;
}

Result<SnapshotInfo> K8sSandboxProvider::Snapshot(const std::string& id,
                                                  const SnapshotOptions& options) {
  auto split = Resolve(id);
  if (!split) return tl::unexpected(split.error());
  const auto& [ns, claim] = *split;
  const std::string sandbox_id = fmt::format("{}/{}", ns, claim);
  auto store = Snapshots();
  if (!store) return tl::unexpected(store.error());
  auto pending = store->Begin(options.name.empty() ? DefaultSnapshotName(ns, claim) : options.name);
  if (!pending) return tl::unexpected(pending.error());
  auto note = TakeArchive(sandbox_id, **pending);
  if (!note) return tl::unexpected(NotTaken(sandbox_id, note.error()));
  struct stat st {};
  const fs::path tar = (*pending)->dir() / kArchive;
  if (stat(tar.c_str(), &st) != 0) return MakeSyscallError("stat", errno, tar.string());
  SnapshotInfo s;
  s.provider = name();
  s.source_id = sandbox_id;
  s.size_bytes = static_cast<int64_t>(st.st_blocks) * 512;
  s.file_bytes = -1;  // in the archive, which the host does not read
  s.note = *note;
  return (*pending)->Commit(s);
}

Result<std::vector<SnapshotInfo>> K8sSandboxProvider::ListSnapshots() {
  auto store = Snapshots();
  if (!store) return tl::unexpected(store.error());
  return store->List();
}

Status K8sSandboxProvider::DeleteSnapshot(const std::string& snapshot) {
  auto store = Snapshots();
  if (!store) return tl::unexpected(store.error());
  return store->Delete(snapshot);
}

Result<KeptClaim> K8sSandboxProvider::KeepWithArchive(int tar_fd, uint64_t size,
                                                      const ClaimOptions& options,
                                                      std::string_view what) {
  auto kept = ClaimAndKeep(options);
  if (!kept) {
    Error e = kept.error();
    e.message = fmt::format("{}: {}", what, e.message);
    return tl::unexpected(e);
  }
  const std::string id =
      fmt::format("{}/{}", kept->claimed.namespace_name, kept->claimed.claim_name);
  auto fail = [&](Error e) -> Result<KeptClaim> {
    if (auto st = Delete(id); st) {
      e.message = fmt::format("{} (the new claim {} was deleted): {}", what, id, e.message);
    } else {
      e.message = fmt::format("{} (and deleting the new claim {} failed: {}): {}", what, id,
                              st.error().message, e.message);
    }
    return tl::unexpected(e);
  };
  auto connected = Connect(id);
  if (!connected) return fail(connected.error());
  SandboxdClient& client = *connected->client;
  const std::string root = client.root();
  if (root.empty()) {
    return fail(Error(ErrorCode::kUnavailable,
                      "its daemon did not say where its files go (GET /deepbox/v1/info)"));
  }
  uint64_t offset = 0;
  net::ClientRequest req;
  req.method = "PUT";
  req.target = "/deepbox/v1/fs/tar/upload?path=" + net::PercentEncode(root);
  req.headers.Set("Content-Type", "application/x-tar");
  req.body_length = size;
  req.body_source = [&](char* buf, size_t n) -> Result<size_t> {
    auto got = ReadAt(tar_fd, buf, n, offset);
    if (got) offset += *got;
    return got;
  };
  auto r = client.http().Send(req);
  if (!r) return fail(NameRouterError(r.error(), connected->connection->endpoint()));
  if (r->status != 200) return fail(SandboxdClient::AnswerError(*r, "tar upload"));
  return kept;
}

Result<KeptClaim> K8sSandboxProvider::RestoreAndKeep(const std::string& snapshot,
                                                     const ClaimOptions& options) {
  auto store = Snapshots();
  if (!store) return tl::unexpected(store.error());
  auto record = store->GetFor(snapshot, name());
  if (!record) return tl::unexpected(record.error());
  // Open before the claim: a removal meanwhile does not take the bytes away.
  const fs::path tar = store->PathOf(snapshot) / kArchive;
  UniqueFd fd(open(tar.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) {
    if (errno == ENOENT) {
      return MakeError(
          ErrorCode::kNotFound,
          fmt::format("snapshot '{}' has no {} (removed meanwhile?)", snapshot, kArchive));
    }
    return MakeSyscallError("open", errno, tar.string());
  }
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) return MakeSyscallError("fstat", errno, tar.string());
  ClaimOptions o = options;
  o.labels["deepbox.dev/snapshot"] = LabelValueFor(snapshot);
  return KeepWithArchive(fd.get(), static_cast<uint64_t>(st.st_size), o,
                         fmt::format("restoring snapshot '{}'", snapshot));
}

Result<SandboxInfo> K8sSandboxProvider::CreateFromSnapshot(const std::string& snapshot,
                                                           const ClaimOptions& options) {
  auto kept = RestoreAndKeep(snapshot, options);
  if (!kept) return tl::unexpected(kept.error());
  ClaimOptions o = options;
  o.labels["deepbox.dev/snapshot"] = LabelValueFor(snapshot);
  return InfoOfKept(*kept, o);
}

Result<std::vector<SandboxInfo>> K8sSandboxProvider::Fork(const std::string& id, int count,
                                                          const ClaimOptions& options) {
  if (count < 1 || count > kMaxFork) {
    return MakeError(
        ErrorCode::kInvalidArgument,
        fmt::format("fork: from 1 to {} sandboxes at a time (not {})", kMaxFork, count));
  }
  auto split = Resolve(id);
  if (!split) return tl::unexpected(split.error());
  const auto& [ns, claim] = *split;
  const std::string sandbox_id = fmt::format("{}/{}", ns, claim);
  const std::string what = fmt::format("fork of sandbox '{}' (no sandbox was kept)", sandbox_id);
  auto fork_error = [&](Error e) {
    e.message = fmt::format("{}: {}", what, e.message);
    return tl::unexpected(e);
  };
  auto store = Snapshots();
  if (!store) return tl::unexpected(store.error());
  // One copy of the source (it keeps running meanwhile), restored `count` times.
  auto scratch = store->Scratch();
  if (!scratch) return fork_error(scratch.error());
  if (auto note = TakeArchive(sandbox_id, **scratch); !note) return fork_error(note.error());
  const fs::path tar = (*scratch)->dir() / kArchive;
  UniqueFd fd(open(tar.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return fork_error(SyscallError("open", errno, tar.string()));
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) return fork_error(SyscallError("fstat", errno, tar.string()));
  ClaimOptions o = options;
  o.labels["deepbox.dev/forked-from"] = LabelValueFor(ns + "." + claim);
  o.name.clear();  // a name is one sandbox's: forks have none
  std::vector<SandboxInfo> made;
  for (int i = 0; i < count; ++i) {
    auto kept =
        KeepWithArchive(fd.get(), static_cast<uint64_t>(st.st_size), o, "restoring the copy");
    if (!kept) {
      for (const auto& m : made) (void)Delete(m.id);
      return fork_error(kept.error());
    }
    made.push_back(InfoOfKept(*kept, o));
  }
  return made;
}

}  // namespace deepbox::k8s
