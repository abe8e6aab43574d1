#include "cli/mcp/sandboxes.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <charconv>

#include "agent/text.h"
#include "local/lifecycle/selector.h"
#include "local/lifecycle/state.h"
#include "sandbox/network_policy.h"

namespace deepbox::mcp {
namespace {

namespace lc = local::lifecycle;

uint64_t PidNamespaceInode() {
  struct stat st {};
  if (::stat("/proc/self/ns/pid", &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_ino);
}

bool ParseU64(std::string_view s, uint64_t* out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

std::string NotAnId(const std::string& id) {
  return fmt::format(
      "'{}' is not a sandbox id (local ids look like sb-1a2b3c4d5e6f, Kubernetes ones like "
      "NAMESPACE/CLAIM)",
      id);
}

Error NotVisible(const std::string& id) {
  return Error(ErrorCode::kNotFound,
               fmt::format("no sandbox '{}' that this client can use (a client sees only the "
                           "sandboxes it created with sandbox_create, and its default sandbox)",
                           id));
}

Error NotAnswering(const std::string& id) {
  return Error(ErrorCode::kUnavailable,
               fmt::format("sandbox {} is not answering right now (it may be starting, or its "
                           "daemon restarting); try again in a moment",
                           id));
}

// allow= entry -> (pattern, extra port or -1).
std::pair<std::string_view, int> SplitEntry(std::string_view entry) {
  int port = -1;
  if (size_t colon = entry.rfind(':'); colon != std::string_view::npos) {
    uint64_t p = 0;
    if (ParseU64(entry.substr(colon + 1), &p) && p < 65536) port = static_cast<int>(p);
    entry = entry.substr(0, colon);
  }
  return {entry, port};
}

// Whether allow-list `max` allows every name and port that `entry` allows.
bool EntryWithin(std::string_view entry, const std::vector<std::string>& max) {
  auto [pattern, extra] = SplitEntry(entry);
  std::vector<int> ports = {80, 443};
  if (extra >= 0) ports.push_back(extra);
  for (int port : ports) {
    if (pattern.substr(0, 2) != "*.") {
      if (!AllowlistMatches(max, pattern, port)) return false;
      continue;
    }
    std::string_view domain = pattern.substr(2);  // every subdomain of it
    bool covered = false;
    for (const auto& m : max) {
      auto [mp, mport] = SplitEntry(m);
      if (!(port == 80 || port == 443 || port == mport)) continue;
      if (mp.substr(0, 2) != "*.") continue;  // a name never covers a wildcard
      std::string_view md = mp.substr(2);
      if (domain == md || (domain.size() > md.size() &&
                           domain.substr(domain.size() - md.size() - 1) == "." + std::string(md))) {
        covered = true;
        break;
      }
    }
    if (!covered) return false;
  }
  return true;
}

// A connection to sandbox `id` that keeps its lease (a borrowed one: the
// sandbox stays when the last user lets go) for as long as it is used.
Result<std::shared_ptr<Sandbox>> AttachShared(SandboxProvider& provider, const std::string& id) {
  auto lease = provider.Attach(id);
  if (!lease) return tl::unexpected(lease.error());
  std::shared_ptr<SandboxLease> shared(std::move(*lease));
  Sandbox* sandbox = &shared->sandbox();
  return std::shared_ptr<Sandbox>(std::move(shared), sandbox);
}

std::string DescribeTtl(int64_t seconds) {
  return seconds == 0 ? "never expire" : fmt::format("{} seconds", seconds);
}

}  // namespace

std::string ServerInstanceId() {
  auto self = lc::SelfRef();
  pid_t pid = self ? self->pid : ::getpid();
  uint64_t start = self ? self->start_time : 0;
  return fmt::format("{}-{}-{}", pid, start, PidNamespaceInode());
}

bool ServerInstanceGone(std::string_view instance) {
  uint64_t v[3];
  for (int i = 0; i < 3; ++i) {
    size_t dash = i < 2 ? instance.find('-') : instance.size();
    if (dash == std::string_view::npos || !ParseU64(instance.substr(0, dash), &v[i])) return false;
    instance.remove_prefix(i < 2 ? dash + 1 : dash);
  }
  if (v[0] == 0 || v[0] > 0x7fffffff || v[2] == 0 || v[2] != PidNamespaceInode()) return false;
  return !lc::ProcessAlive(lc::ProcessRef{static_cast<pid_t>(v[0]), v[1]});
}

bool NetworkWithin(std::string_view want_text, std::string_view max_text) {
  auto want = ParseNetworkPolicy(want_text);
  auto max = ParseNetworkPolicy(max_text);
  if (!want || !max) return false;
  if (max->mode == NetworkMode::kPublic || want->mode == NetworkMode::kNone) return true;
  if (max->mode == NetworkMode::kNone || want->mode == NetworkMode::kPublic) return false;
  for (const auto& e : want->allow) {
    if (!EntryWithin(e, max->allow)) return false;
  }
  return true;
}

json::object SandboxInfoJson(const SandboxInfo& info) {
  json::object o;
  o["sandbox_id"] = JsonString(info.id);
  o["provider"] = info.provider;
  json::object l;
  for (const auto& [k, v] : info.labels) l[k] = JsonString(v);
  o["labels"] = std::move(l);
  o["created_at"] = info.created_at;
  if (info.expires_at.empty()) {
    o["expires_at"] = nullptr;
  } else {
    o["expires_at"] = info.expires_at;
  }
  o["network"] = JsonString(info.network);
  o["state"] = JsonString(info.state);
  return o;
}

SandboxBroker::SandboxBroker(BrokerOptions options,
                             std::vector<std::unique_ptr<SandboxProvider>> providers)
    : options_(std::move(options)), providers_(std::move(providers)) {
  if (options_.instance_id.empty()) options_.instance_id = ServerInstanceId();
  if (options_.defaults.network.empty()) options_.defaults.network = "none";
}

SandboxBroker::~SandboxBroker() = default;

const std::vector<std::string> SandboxBroker::providers() const {
  std::vector<std::string> out;
  for (const auto& p : providers_) out.push_back(p->name());
  return out;
}

SandboxProvider* SandboxBroker::ProviderNamed(const std::string& name) {
  const std::string& want = name.empty() ? options_.default_provider : name;
  for (auto& p : providers_) {
    if (p->name() == want) return p.get();
  }
  return nullptr;
}

SandboxProvider* SandboxBroker::ProviderFor(const std::string& id) {
  for (auto& p : providers_) {
    if (p->OwnsId(id)) return p.get();
  }
  return nullptr;
}

Result<SandboxProvider*> SandboxBroker::ProviderOrError(const std::string& provider) {
  SandboxProvider* p = ProviderNamed(provider);
  if (p) return p;
  std::string known;
  for (const auto& n : providers()) known += (known.empty() ? "" : ", ") + n;
  return MakeError(ErrorCode::kInvalidArgument,
                   fmt::format("unknown provider '{}' (this server has: {})",
                               provider.empty() ? options_.default_provider : provider, known));
}

std::string SandboxBroker::ClientId(const std::string& owner) {
  if (owner == kStdioOwner) return "stdio";
  if (Stateless(owner)) return "stateless";
  std::lock_guard<std::mutex> lock(mu_);
  auto& id = clients_[owner];
  if (id.empty()) id = "c" + RandomHex(15);  // never the session id itself
  return id;
}

Result<SandboxInfo> SandboxBroker::Create(const CreateRequest& request, const std::string& owner) {
  return CreateFor(request, owner, /*is_default=*/false);
}

Result<SandboxInfo> SandboxBroker::CreateFor(const CreateRequest& request, const std::string& owner,
                                             bool is_default) {
  auto provider = ProviderOrError(request.provider);
  if (!provider) return tl::unexpected(provider.error());
  SandboxProvider* p = *provider;
  if (!request.from_snapshot.empty()) {
    const std::string client = ClientId(owner);  // takes mu_ itself
    std::lock_guard<std::mutex> lock(mu_);
    auto it = snapshots_.find(request.from_snapshot);
    // Another client's snapshot is as invisible as its sandboxes.
    if (it == snapshots_.end() || it->second.first != client) {
      return MakeError(ErrorCode::kNotFound,
                       fmt::format("no snapshot '{}' of this client (sandbox_snapshot makes one)",
                                   request.from_snapshot));
    }
    p = it->second.second;
  }
  if (!request.fork_of.empty()) {
    if (auto st = Check(request.fork_of, owner, Access::kUse); !st) {
      return tl::unexpected(st.error());
    }
    p = ProviderFor(request.fork_of);
  }
  ClaimOptions o;
  o.labels = options_.defaults.labels;
  for (const auto& [k, v] : request.labels) {
    if (k.rfind(kReservedLabelPrefix, 0) == 0) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("label '{}' is reserved: deepbox sets the {} labels itself", k,
                                   kReservedLabelPrefix));
    }
    if (auto st = lc::ValidateLabelKey(k); !st) return tl::unexpected(st.error());
    if (auto st = lc::ValidateLabelValue(k, v); !st) return tl::unexpected(st.error());
    o.labels[k] = v;
  }

  // TTL: the server's is the default and the longest.
  int64_t server_ttl = options_.defaults.ttl.count();
  int64_t ttl = request.ttl_seconds.value_or(server_ttl);
  if (ttl < 0) {
    return MakeError(ErrorCode::kInvalidArgument, "ttl_seconds must be at least 0");
  }
  if (server_ttl > 0 && (ttl == 0 || ttl > server_ttl)) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("ttl_seconds {} ({}) is not allowed: this server's sandboxes "
                                 "live at most {} seconds (deepbox mcp --ttl {}); ask for at most "
                                 "that, or omit ttl_seconds",
                                 ttl, DescribeTtl(ttl), server_ttl, server_ttl));
  }
  o.ttl = std::chrono::seconds(ttl);
  o.idle_suspend = options_.defaults.idle_suspend;  // the next call resumes it
  // The operator's secrets, each with a placeholder of this sandbox's own.
  o.secrets = options_.defaults.secrets;
  for (auto& secret : o.secrets) secret.placeholder = MakeSecretPlaceholder();
  if (!o.secrets.empty() && !p->enforces_network()) {
    return MakeError(ErrorCode::kUnimplemented,
                     fmt::format("this server's secrets (deepbox mcp --secret) are for local "
                                 "sandboxes only, not {} ones",
                                 p->name()));
  }

  // Network: the server's is the default and the widest.
  if (p->enforces_network()) {
    const std::string& max = options_.defaults.network;
    std::string want = request.network.empty() ? max : request.network;
    if (auto policy = ParseNetworkPolicy(want); !policy) {
      return tl::unexpected(policy.error());
    }
    if (!options_.allow_client_network && !NetworkWithin(want, max)) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("network '{}' is not allowed: this server gives its clients' "
                                   "sandboxes at most network '{}' (deepbox mcp --network {}; "
                                   "only --allow-client-network lets clients ask for more)",
                                   want, max, max));
    }
    o.network = want;
  } else if (!request.network.empty()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("network cannot be chosen for {} sandboxes (the "
                                 "SandboxTemplate's networkPolicy decides); omit it",
                                 p->name()));
  }

  // Image: the client's, else the server's (deepbox mcp --image); local only.
  o.image = request.image.empty() ? options_.defaults.image : request.image;
  if (!o.image.empty() && p->name() != "local") {
    if (!request.image.empty()) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("image cannot be chosen for {} sandboxes (the "
                                   "SandboxTemplate's image is theirs); omit it",
                                   p->name()));
    }
    o.image.clear();  // the server's default is for its local sandboxes
  }

  // Caps on live sandboxes, counting creates under way.
  std::string client = ClientId(owner);
  auto over = [&]() -> std::optional<Error> {
    auto pit = pending_.find(client);
    size_t mine = pit == pending_.end() ? 0 : pit->second;
    for (const auto& [id, r] : created_) mine += r.client == client ? 1 : 0;
    size_t total = created_.size() + pending_total_;
    if (options_.max_per_client > 0 && mine >= options_.max_per_client) {
      return Error(ErrorCode::kResourceExhausted,
                   fmt::format("this client already has {} live sandboxes, the most this server "
                               "allows per client (deepbox mcp --max-sandboxes-per-client {}): "
                               "delete one with sandbox_delete first",
                               mine, options_.max_per_client));
    }
    if (options_.max_per_server > 0 && total >= options_.max_per_server) {
      return Error(ErrorCode::kResourceExhausted,
                   fmt::format("this server already has {} live sandboxes, the most it allows "
                               "(deepbox mcp --max-sandboxes {}): delete one with "
                               "sandbox_delete, or try again later",
                               total, options_.max_per_server));
    }
    return std::nullopt;
  };
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (over()) {
      lock.unlock();
      PruneRecords();  // some may have expired or been deleted elsewhere
      lock.lock();
      if (auto e = over()) return tl::unexpected(*e);
    }
    ++pending_[client];
    ++pending_total_;
  }
  o.labels[kMcpLabel] = "true";
  o.labels[kMcpServerLabel] = options_.instance_id;
  o.labels[kMcpOwnerLabel] = client;
  if (is_default) o.labels[kMcpDefaultLabel] = "true";
  Result<SandboxInfo> info = tl::unexpected(Error(ErrorCode::kInternal, "not created"));
  if (!request.from_snapshot.empty()) {
    info = p->CreateFromSnapshot(request.from_snapshot, o);
  } else if (!request.fork_of.empty()) {
    auto forks = p->Fork(request.fork_of, 1, o);
    if (forks && forks->size() == 1) {
      info = (*forks)[0];
    } else if (!forks) {
      info = tl::unexpected(forks.error());
    }
  } else {
    info = p->Create(o);
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (--pending_[client] == 0) pending_.erase(client);
  --pending_total_;
  if (!info) return tl::unexpected(info.error());
  created_[info->id] = Record{client, is_default};
  return info;
}

void SandboxBroker::PruneRecords() {
  for (auto& p : providers_) {
    auto list = p->List(std::string(kMcpServerLabel) + "=" + options_.instance_id);
    if (!list) continue;
    std::set<std::string> live;
    for (const auto& i : *list) live.insert(i.id);
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = created_.begin(); it != created_.end();) {
      if (p->OwnsId(it->first) && !live.count(it->first)) {
        it = created_.erase(it);
      } else {
        ++it;
      }
    }
  }
}

bool SandboxBroker::Attached(SandboxProvider* p, const std::string& id) {
  if (options_.attach_selector.empty()) return false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (attached_.count(id)) return true;
  }
  auto list = p->List(options_.attach_selector);
  if (!list) return false;
  for (const auto& i : *list) {
    if (i.id != id) continue;
    std::lock_guard<std::mutex> lock(mu_);
    attached_.insert(id);
    return true;
  }
  return false;
}

Status SandboxBroker::Check(const std::string& id, const std::string& owner, Access access) {
  SandboxProvider* p = ProviderFor(id);
  if (!p) return MakeError(ErrorCode::kInvalidArgument, NotAnId(id));
  std::string client = ClientId(owner);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = created_.find(id);
    if (it != created_.end()) {
      if (options_.shared || it->second.client == client) return {};
      return tl::unexpected(NotVisible(id));
    }
  }
  if (Attached(p, id)) {
    if (access == Access::kUse) return {};
    return MakeError(ErrorCode::kPermissionDenied,
                     fmt::format("sandbox {} was not created by this server (the operator lets "
                                 "clients use it, --attach-selector), so it cannot be deleted "
                                 "here; `deepbox sandbox rm {}` does that",
                                 id, id));
  }
  return tl::unexpected(NotVisible(id));
}

Result<std::vector<SandboxInfo>> SandboxBroker::List(const std::string& provider,
                                                     const std::string& selector,
                                                     const std::string& owner) {
  auto p = ProviderOrError(provider);
  if (!p) return tl::unexpected(p.error());
  auto sel = lc::Selector::Parse(selector);
  if (!sel) return tl::unexpected(sel.error());
  std::optional<lc::Selector> attach;
  if (!options_.attach_selector.empty()) {
    auto a = lc::Selector::Parse(options_.attach_selector);
    if (a) attach = std::move(*a);
  }
  auto list = (*p)->List(selector);
  if (!list) return tl::unexpected(list.error());
  std::string client = ClientId(owner);
  std::vector<SandboxInfo> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& i : *list) {
    auto it = created_.find(i.id);
    bool visible = it != created_.end() && (options_.shared || it->second.client == client);
    if (!visible && it == created_.end() && attach && attach->Matches(i.labels)) {
      attached_.insert(i.id);
      visible = true;
    }
    if (visible) out.push_back(std::move(i));
  }
  return out;
}

Status SandboxBroker::Delete(const std::string& id, const std::string& owner) {
  if (auto st = Check(id, owner, Access::kDelete); !st) return st;
  SandboxProvider* p = ProviderFor(id);
  Forget(id);
  auto st = p->Delete(id);
  if (st || st.error().code == ErrorCode::kNotFound) {
    std::lock_guard<std::mutex> lock(mu_);
    created_.erase(id);
  }
  // A deleted default is no longer anybody's default.
  DropDefault(id, fmt::format("sandbox {} was deleted with sandbox_delete", id));
  return st;
}

Status SandboxBroker::ChangeMode(const std::string& id, const std::string& owner, Mode mode) {
  if (auto st = Check(id, owner, Access::kDelete); !st) return st;
  SandboxProvider* p = ProviderFor(id);
  Forget(id);
  switch (mode) {
    case Mode::kPause:
      return p->Pause(id);
    case Mode::kSuspend:
      return p->Suspend(id, SuspendOptions{});  // never losing files for a client
    case Mode::kResume:
      return p->Resume(id);
  }
  return {};
}

Result<SnapshotInfo> SandboxBroker::Snapshot(const std::string& id, const std::string& owner) {
  if (auto st = Check(id, owner, Access::kUse); !st) return tl::unexpected(st.error());
  SandboxProvider* p = ProviderFor(id);
  std::string client = ClientId(owner);
  SnapshotOptions so;
  so.name = fmt::format("mcp-{}-{}", id, RandomHex(8));
  auto s = p->Snapshot(id, so);
  if (!s) return s;
  std::lock_guard<std::mutex> lock(mu_);
  snapshots_[s->name] = {client, p};
  return s;
}

void SandboxBroker::DropDefault(const std::string& id, const std::string& why) {
  std::vector<std::shared_ptr<DefaultSlot>> slots;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [owner, slot] : defaults_) slots.push_back(slot);
  }
  for (auto& slot : slots) {
    std::lock_guard<std::mutex> lock(slot->mu);
    if (slot->id != id) continue;
    slot->id.clear();
    slot->lost = why;
  }
}

Result<std::shared_ptr<Sandbox>> SandboxBroker::Get(const std::string& id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = connections_.find(id);
    if (it != connections_.end()) return it->second;
  }
  SandboxProvider* p = ProviderFor(id);
  if (!p) return MakeError(ErrorCode::kInvalidArgument, NotAnId(id));
  auto sb = AttachShared(*p, id);
  if (!sb) {
    // Its socket path and errno mean nothing to a model (and are the host's).
    if (sb.error().code == ErrorCode::kUnavailable) return tl::unexpected(NotAnswering(id));
    return tl::unexpected(sb.error());
  }
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
    if (auto st = Check(*id, owner, Access::kUse); !st) return tl::unexpected(st.error());
    auto sb = Get(*id);
    if (!sb) return tl::unexpected(sb.error());
    r.sandbox = *sb;
    r.id = *id;
    return r;
  }
  if (Stateless(owner)) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "sandbox_id is required: this client speaks the stateless protocol "
                     "(MCP 2026-07-28 over HTTP), whose requests do not tell one client from "
                     "another, so there is no default sandbox. Call sandbox_create first and "
                     "pass its sandbox_id to every call.");
  }
  auto slot = Slot(owner);
  std::lock_guard<std::mutex> lock(slot->mu);
  if (slot->id.empty()) {
    auto info = CreateFor(CreateRequest{}, owner, /*is_default=*/true);
    if (!info) return tl::unexpected(info.error());
    slot->id = info->id;
    slot->delete_on_release = true;
    r.created = true;
    if (!slot->lost.empty()) {
      r.notice = fmt::format(
          "Note: this call ran in a new, empty default sandbox ({}). The previous default "
          "sandbox is gone ({}), and the files it held are lost.",
          info->id, slot->lost);
      slot->lost.clear();
    }
  }
  auto sb = Get(slot->id);
  if (!sb) {
    if (sb.error().code == ErrorCode::kNotFound) {
      // It is gone (expired, deleted by hand, died): the next call makes a
      // new one, and says so.
      std::string why = sb.error().message;
      slot->id.clear();
      slot->lost = why;
      return MakeError(ErrorCode::kNotFound,
                       fmt::format("{}. It was this client's default sandbox: its files are lost, "
                                   "and the next call without sandbox_id starts a new, empty "
                                   "default sandbox.",
                                   why));
    }
    return tl::unexpected(sb.error());
  }
  r.sandbox = *sb;
  r.id = slot->id;
  return r;
}

std::string SandboxBroker::Unreachable(const std::string& id, const std::string& owner) {
  Forget(id);
  SandboxProvider* p = ProviderFor(id);
  if (!p) return "Error: " + NotAnId(id);
  bool was_default = DefaultId(owner) == id;
  // The provider's own account of a sandbox that is gone, else a fresh
  // connection tells: it answers (the call hit a restart), it does not exist
  // (a provider that cannot say why: its NOT_FOUND is the reason), or neither.
  // (Only NOT_FOUND means gone: e.g. a refused id is no news about files.)
  std::string why;
  if (auto gone = p->WhyGone(id); gone && gone->code == ErrorCode::kNotFound) {
    why = gone->message;
  } else {
    auto c = AttachShared(*p, id);
    if (c) {
      return fmt::format(
          "Error: sandbox {} stopped answering during this call (its daemon restarted?), so the "
          "call may not have completed; its files are still there. Try again.",
          id);
    }
    if (c.error().code != ErrorCode::kNotFound) return "Error: " + NotAnswering(id).message;
    why = c.error().message;
  }
  // Its record stays (until a prune), so later calls get the same answer.
  DropDefault(id, why);
  return fmt::format("Error: {}. Its files are lost{}", why,
                     was_default ? "; it was this client's default sandbox, and the next call "
                                   "without sandbox_id starts a new, empty default sandbox."
                                 : "; create a new sandbox with sandbox_create.");
}

void SandboxBroker::SetDefault(const std::string& owner, const std::string& id,
                               bool delete_on_release) {
  auto slot = Slot(owner);
  std::lock_guard<std::mutex> lock(slot->mu);
  slot->id = id;
  slot->delete_on_release = delete_on_release;
  slot->lost.clear();
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
    clients_.erase(owner);
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
    if (SandboxProvider* p = ProviderFor(id)) (void)p->Delete(id);
    std::lock_guard<std::mutex> lock(mu_);
    created_.erase(id);
  }
}

void SandboxBroker::ReleaseAll() {
  std::vector<std::string> owners;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [o, s] : defaults_) owners.push_back(o);
  }
  for (const auto& o : owners) ReleaseOwner(o);
  std::map<std::string, std::pair<std::string, SandboxProvider*>> snapshots;
  {
    std::lock_guard<std::mutex> lock(mu_);
    snapshots.swap(snapshots_);
  }
  for (const auto& [name, taken] : snapshots) (void)taken.second->DeleteSnapshot(name);
  std::lock_guard<std::mutex> lock(mu_);
  connections_.clear();
}

std::vector<std::string> SandboxBroker::ReapOrphanedDefaults() {
  std::vector<std::string> out;
  for (auto& p : providers_) {
    if (p->name() != "local") continue;  // a pid means something on this host only
    auto list = p->List(std::string(kMcpDefaultLabel) + "=true");
    if (!list) continue;
    for (const auto& i : *list) {
      auto it = i.labels.find(kMcpServerLabel);
      if (it == i.labels.end() || it->second == options_.instance_id) continue;
      if (!ServerInstanceGone(it->second)) continue;
      if (p->Delete(i.id)) out.push_back(i.id);
    }
  }
  return out;
}

}  // namespace deepbox::mcp
