#include "mcp/sandboxes.h"

#include <fmt/format.h>

namespace deepbox::mcp {

json::object SandboxInfo::ToJson() const {
  json::object o;
  o["sandbox_id"] = JsonString(id);
  o["provider"] = provider;
  json::object l;
  for (const auto& [k, v] : labels) l[k] = JsonString(v);
  o["labels"] = std::move(l);
  o["created_at"] = created_at;
  if (expires_at.empty()) {
    o["expires_at"] = nullptr;
  } else {
    o["expires_at"] = expires_at;
  }
  o["network"] = JsonString(network);
  o["state"] = JsonString(state);
  return o;
}

SandboxBroker::SandboxBroker(BrokerOptions options,
                             std::vector<std::unique_ptr<SandboxBackend>> backends)
    : options_(std::move(options)), backends_(std::move(backends)) {}

SandboxBroker::~SandboxBroker() = default;

const std::vector<std::string> SandboxBroker::providers() const {
  std::vector<std::string> out;
  for (const auto& b : backends_) out.push_back(b->name());
  return out;
}

SandboxBackend* SandboxBroker::BackendNamed(const std::string& name) {
  const std::string& want = name.empty() ? options_.default_provider : name;
  for (auto& b : backends_) {
    if (b->name() == want) return b.get();
  }
  return nullptr;
}

SandboxBackend* SandboxBroker::BackendFor(const std::string& id) {
  for (auto& b : backends_) {
    if (b->Owns(id)) return b.get();
  }
  return nullptr;
}

Result<SandboxInfo> SandboxBroker::Create(const std::string& provider,
                                          const ClaimOptions& options) {
  SandboxBackend* b = BackendNamed(provider);
  if (!b) {
    std::string known;
    for (const auto& n : providers()) known += (known.empty() ? "" : ", ") + n;
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("unknown provider '{}' (this server has: {})",
                                 provider.empty() ? options_.default_provider : provider, known));
  }
  ClaimOptions o = options;
  for (const auto& [k, v] : options_.defaults.labels) o.labels.try_emplace(k, v);
  return b->Create(o);
}

Result<std::vector<SandboxInfo>> SandboxBroker::List(const std::string& provider,
                                                     const std::string& selector) {
  SandboxBackend* b = BackendNamed(provider);
  if (!b) {
    return MakeError(ErrorCode::kInvalidArgument, fmt::format("unknown provider '{}'", provider));
  }
  return b->List(selector);
}

Status SandboxBroker::Delete(const std::string& id) {
  SandboxBackend* b = BackendFor(id);
  if (!b) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("'{}' is not a sandbox id (local ids look like sb-1a2b3c4d5e6f, "
                                 "Kubernetes ones like NAMESPACE/CLAIM)",
                                 id));
  }
  Forget(id);
  auto st = b->Delete(id);
  // A deleted default is no longer anybody's default.
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [owner, slot] : defaults_) {
    if (slot->mu.try_lock()) {
      if (slot->id == id) slot->id.clear();
      slot->mu.unlock();
    }
  }
  return st;
}

Result<std::shared_ptr<Sandbox>> SandboxBroker::Get(const std::string& id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = connections_.find(id);
    if (it != connections_.end()) return it->second;
  }
  SandboxBackend* b = BackendFor(id);
  if (!b) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("'{}' is not a sandbox id (local ids look like sb-1a2b3c4d5e6f, "
                                 "Kubernetes ones like NAMESPACE/CLAIM)",
                                 id));
  }
  auto sb = b->Connect(id);
  if (!sb) return tl::unexpected(sb.error());
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, inserted] = connections_.emplace(id, *sb);
  return it->second;
}

void SandboxBroker::Forget(const std::string& id) {
  std::shared_ptr<Sandbox> old;  // released outside the lock (may stop a port-forward)
  std::lock_guard<std::mutex> lock(mu_);
  auto it = connections_.find(id);
  if (it == connections_.end()) return;
  old = std::move(it->second);
  connections_.erase(it);
}

std::shared_ptr<SandboxBroker::DefaultSlot> SandboxBroker::Slot(const std::string& owner) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& s = defaults_[owner];
  if (!s) s = std::make_shared<DefaultSlot>();
  return s;
}

Result<SandboxBroker::Resolved> SandboxBroker::Resolve(const std::optional<std::string>& id,
                                                       const std::string& owner) {
  Resolved r;
  if (id && !id->empty()) {
    auto sb = Get(*id);
    if (!sb) return tl::unexpected(sb.error());
    r.sandbox = *sb;
    r.id = *id;
    return r;
  }
  auto slot = Slot(owner);
  std::lock_guard<std::mutex> lock(slot->mu);
  if (slot->id.empty()) {
    ClaimOptions o;
    o.labels[kMcpDefaultLabel] = "true";
    o.ttl = options_.defaults.ttl;
    o.network = options_.defaults.network;
    auto info = Create("", o);
    if (!info) return tl::unexpected(info.error());
    slot->id = info->id;
    slot->delete_on_release = true;
    r.created = true;
  }
  auto sb = Get(slot->id);
  if (!sb) {
    // It is gone (expired, deleted by hand): the next call makes a new one.
    if (sb.error().code == ErrorCode::kNotFound) slot->id.clear();
    return tl::unexpected(sb.error());
  }
  r.sandbox = *sb;
  r.id = slot->id;
  return r;
}

void SandboxBroker::SetDefault(const std::string& owner, const std::string& id,
                               bool delete_on_release) {
  auto slot = Slot(owner);
  std::lock_guard<std::mutex> lock(slot->mu);
  slot->id = id;
  slot->delete_on_release = delete_on_release;
}

std::optional<std::string> SandboxBroker::DefaultId(const std::string& owner) {
  auto slot = Slot(owner);
  std::lock_guard<std::mutex> lock(slot->mu);
  if (slot->id.empty()) return std::nullopt;
  return slot->id;
}

void SandboxBroker::ReleaseOwner(const std::string& owner) {
  std::shared_ptr<DefaultSlot> slot;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = defaults_.find(owner);
    if (it == defaults_.end()) return;
    slot = it->second;
    defaults_.erase(it);
  }
  std::string id;
  bool del = false;
  {
    std::lock_guard<std::mutex> lock(slot->mu);
    id = slot->id;
    del = slot->delete_on_release;
  }
  if (id.empty()) return;
  Forget(id);
  if (del) {
    if (SandboxBackend* b = BackendFor(id)) (void)b->Delete(id);
  }
}

void SandboxBroker::ReleaseAll() {
  std::vector<std::string> owners;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [o, s] : defaults_) owners.push_back(o);
  }
  for (const auto& o : owners) ReleaseOwner(o);
  std::lock_guard<std::mutex> lock(mu_);
  connections_.clear();
}

}  // namespace deepbox::mcp
