#include "sandbox/provider.h"

#include <fmt/format.h>

#include <utility>

#include "common/json.h"

namespace deepbox {

BorrowedLease::BorrowedLease(std::unique_ptr<Sandbox> sandbox, std::string describe,
                             std::function<void()> on_close)
    : sandbox_(std::move(sandbox)),
      describe_(std::move(describe)),
      on_close_(std::move(on_close)) {}

BorrowedLease::~BorrowedLease() { (void)Release(); }

Status BorrowedLease::Release() {
  if (on_close_) std::exchange(on_close_, nullptr)();
  return {};
}

std::string SnapshotInfoJson(const SnapshotInfo& s) {
  json::object o;
  o["name"] = JsonString(s.name);
  o["provider"] = JsonString(s.provider);
  o["source_id"] = JsonString(s.source_id);
  o["created_at"] = JsonString(s.created_at);
  o["size_bytes"] = s.size_bytes;
  o["file_bytes"] = s.file_bytes;
  if (!s.note.empty()) o["note"] = JsonString(s.note);
  return ToJson(o);
}

Error SandboxProvider::Unimplemented(std::string_view verb, std::string_view why) const {
  return Error(ErrorCode::kUnimplemented,
               why.empty()
                   ? fmt::format("the {} provider cannot {} sandboxes", name(), verb)
                   : fmt::format("the {} provider cannot {} sandboxes: {}", name(), verb, why));
}

Result<SandboxInfo> SandboxProvider::Create(const ClaimOptions&) {
  return tl::unexpected(Unimplemented("create lasting"));
}
Result<std::unique_ptr<SandboxLease>> SandboxProvider::Attach(const std::string&) {
  return tl::unexpected(Unimplemented("attach to"));
}
Result<DaemonAccess> SandboxProvider::ConnectDaemon(const std::string&) {
  return tl::unexpected(Unimplemented("connect to the daemon of"));
}

Result<SandboxInfo> SandboxProvider::Inspect(const std::string&) {
  return tl::unexpected(Unimplemented("inspect"));
}
Result<std::vector<SandboxInfo>> SandboxProvider::List(const std::string&) {
  return tl::unexpected(Unimplemented("list"));
}
Status SandboxProvider::Delete(const std::string&) {
  return tl::unexpected(Unimplemented("delete"));
}
Result<std::vector<std::string>> SandboxProvider::DeleteMatching(const std::string&) {
  return tl::unexpected(Unimplemented("delete by selector"));
}
std::optional<Error> SandboxProvider::WhyGone(const std::string&) { return std::nullopt; }
Result<std::unique_ptr<SandboxWatch>> SandboxProvider::Watch(const std::string&,
                                                             std::function<void(const Error&)>) {
  return tl::unexpected(Unimplemented("watch"));
}
Status SandboxProvider::Pause(const std::string&) { return tl::unexpected(Unimplemented("pause")); }
Status SandboxProvider::Suspend(const std::string&, const SuspendOptions&) {
  return tl::unexpected(Unimplemented("suspend"));
}
Status SandboxProvider::Resume(const std::string&) {
  return tl::unexpected(Unimplemented("resume"));
}
Result<SnapshotInfo> SandboxProvider::Snapshot(const std::string&, const SnapshotOptions&) {
  return tl::unexpected(Unimplemented("snapshot"));
}
Result<std::vector<SnapshotInfo>> SandboxProvider::ListSnapshots() {
  return tl::unexpected(Unimplemented("snapshot"));
}
Status SandboxProvider::DeleteSnapshot(const std::string&) {
  return tl::unexpected(Unimplemented("snapshot"));
}
Result<SandboxInfo> SandboxProvider::CreateFromSnapshot(const std::string&, const ClaimOptions&) {
  return tl::unexpected(Unimplemented("restore snapshots into"));
}
Result<std::vector<SandboxInfo>> SandboxProvider::Fork(const std::string&, int,
                                                       const ClaimOptions&) {
  return tl::unexpected(Unimplemented("fork"));
}

Result<std::string> SandboxProvider::SetNetwork(const std::string&, const std::string&) {
  return tl::unexpected(Unimplemented("change the network of"));
}

Result<std::vector<EgressLogLine>> SandboxProvider::NetworkLog(const std::string&, size_t) {
  return tl::unexpected(Unimplemented("show the network log of"));
}

}  // namespace deepbox
