// The sandboxes behind `deepbox mcp`'s tools: creating, listing and deleting
// them on a provider (local, k8s), reaching one by id (connections are cached
// and reused across calls), and each client's default sandbox — created on
// its first call without a sandbox_id, deleted when that client goes away
// (ReleaseOwner), its TTL the backstop if the server itself dies.
//
// Walls between clients (MCP clients are tenants):
//  * Every sandbox the server creates carries labels clients cannot set
//    (deepbox.dev/mcp-server = this server instance, deepbox.dev/mcp-owner =
//    the creating client); the broker also remembers them itself, so it never
//    trusts a label to grant access.
//  * A client sees, uses and deletes only the sandboxes it created, unless
//    the operator shares them between this server's clients (`shared`).
//  * Sandboxes the server did not create (CLI ones, `deepbox run`'s, another
//    server's) are invisible, unless they match the operator's
//    `attach_selector`: then every client may see and use them, never delete.
//  * Stateless (2026-07-28 HTTP) requests cannot be told apart: they are one
//    client, and get no default sandbox (sandbox_id is required).
//  * Quotas: the server's network is the default and the widest a client may
//    ask for (none < allow=subset < public) unless `allow_client_network`;
//    the server's TTL is the default and the longest (0 only when the server's
//    own TTL is 0); live sandboxes are capped per client and per server.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/json.h"
#include "sandbox/provider.h"

namespace deepbox::mcp {

// The JSON of a sandbox in sandbox_create's and sandbox_list's results
// (sandbox_id, provider, labels, created_at, expires_at or null, network,
// state): what MCP clients read, so its fields stay as they are.
json::object SandboxInfoJson(const SandboxInfo& info);

// The labels deepbox mcp puts on every sandbox it creates: kMcpLabel=true,
// the server instance, the creating client, and kMcpDefaultLabel=true on a
// client's default sandbox. Clients may set no label under deepbox.dev/.
inline constexpr const char* kMcpLabel = "deepbox.dev/mcp";
inline constexpr const char* kMcpDefaultLabel = "deepbox.dev/mcp-default";
inline constexpr const char* kMcpServerLabel = "deepbox.dev/mcp-server";
inline constexpr const char* kMcpOwnerLabel = "deepbox.dev/mcp-owner";
inline constexpr const char* kReservedLabelPrefix = "deepbox.dev/";

// ToolCallContext::owner() of the transports: one stdio client, and every
// stateless HTTP request (which carries nothing that tells clients apart).
inline constexpr const char* kStdioOwner = "stdio";
inline constexpr const char* kStatelessOwner = "http";

// This process as a server instance: "<pid>-<start time>-<pid namespace
// inode>" (a label value), so a later server can tell whether it is gone.
std::string ServerInstanceId();
// True only if the server named by `instance` (ServerInstanceId's form) is
// certainly gone: same pid namespace as ours, and that pid with that start
// time does not exist. False when it cannot tell.
bool ServerInstanceGone(std::string_view instance);

// Whether network `want` is within `max` (none < allow=subset < public): each
// allow= entry of `want` must be allowed by `max` for every port it allows.
bool NetworkWithin(std::string_view want, std::string_view max);

// What a client asks sandbox_create for.
struct CreateRequest {
  std::string provider;                       // "" = the server's
  std::map<std::string, std::string> labels;  // the client's (not deepbox.dev/)
  std::optional<int64_t> ttl_seconds;         // nullopt = the server's
  std::string network;                        // "" = the server's
  std::string image;  // local: an OCI image reference ("" = the server's default)
  // The new sandbox's files: a snapshot this client took (sandbox_snapshot),
  // or a copy of one of its sandboxes as it is now (fork). "" = empty.
  std::string from_snapshot;
  std::string fork_of;
};

struct BrokerOptions {
  std::string default_provider = "local";
  // Labels of every sandbox the server creates (a call's own labels are
  // added); the TTL is the default and the maximum (0 = never expire, and
  // then any TTL may be asked for); the network (local sandboxes; "" =
  // none) the default and the widest a client may ask for.
  ClaimOptions defaults;
  std::string instance_id;            // "" = ServerInstanceId()
  bool shared = false;                // clients see each other's sandboxes
  std::string attach_selector;        // foreign sandboxes clients may use ("" = none)
  bool allow_client_network = false;  // clients may ask for any network
  size_t max_per_client = 5;          // live sandboxes, the default one included; 0 = no cap
  size_t max_per_server = 20;
};

class SandboxBroker {
 public:
  // One provider per name (local, k8s); the first whose OwnsId accepts an id
  // is that sandbox's.
  SandboxBroker(BrokerOptions options, std::vector<std::unique_ptr<SandboxProvider>> providers);
  ~SandboxBroker();

  // A new sandbox of `owner`, within the server's limits: INVALID_ARGUMENT
  // for a reserved label, a wider network, a longer TTL or an unknown
  // provider; RESOURCE_EXHAUSTED at a cap. Each error says which limit.
  Result<SandboxInfo> Create(const CreateRequest& request, const std::string& owner);
  // The sandboxes `owner` may see, matching `selector`.
  Result<std::vector<SandboxInfo>> List(const std::string& provider, const std::string& selector,
                                        const std::string& owner);
  // Deletes one of `owner`'s sandboxes (NOT_FOUND for one it may not see,
  // as for one that does not exist; PERMISSION_DENIED for an attached one).
  Status Delete(const std::string& id, const std::string& owner);
  // Pauses, suspends or resumes one of `owner`'s sandboxes (provider.h; the
  // same access as Delete: an attached one is PERMISSION_DENIED). Its cached
  // connection is dropped: the next call reconnects, which wakes it.
  enum class Mode { kPause, kSuspend, kResume };
  Status ChangeMode(const std::string& id, const std::string& owner, Mode mode);
  // A snapshot of a sandbox `owner` may use; only that client may restore
  // it (CreateRequest::from_snapshot). The server names it. The server's
  // snapshots are removed when it shuts down (ReleaseAll).
  Result<SnapshotInfo> Snapshot(const std::string& id, const std::string& owner);

  // A (cached) connection to sandbox `id`, without any check (the server's
  // own bookkeeping and tests).
  Result<std::shared_ptr<Sandbox>> Get(const std::string& id);
  // Drops a cached connection (the sandbox stopped answering).
  void Forget(const std::string& id);

  struct Resolved {
    std::shared_ptr<Sandbox> sandbox;
    std::string id;
    bool created = false;  // the owner's default sandbox was created by this call
    // Set when this call's new default sandbox replaces one that was lost:
    // what the model must be told (the old files are gone).
    std::string notice;
  };
  // `id` if given (one `owner` may use), else `owner`'s default sandbox
  // (created now if needed; stateless owners have none).
  Result<Resolved> Resolve(const std::optional<std::string>& id, const std::string& owner);
  // A call on `id` found it unreachable: asks its provider what became of
  // it and returns the tool error for the model (which sandbox, why, what
  // now), with no host paths or socket errors. A sandbox that is gone is no
  // longer anybody's default; its owner's next default call is told so.
  std::string Unreachable(const std::string& id, const std::string& owner);

  // Makes `id` the owner's default (a sandbox it created with make_default).
  void SetDefault(const std::string& owner, const std::string& id, bool delete_on_release);
  std::optional<std::string> DefaultId(const std::string& owner);
  // The owner's client is gone: deletes the default sandbox it got created.
  void ReleaseOwner(const std::string& owner);
  // Every owner (server shutdown).
  void ReleaseAll();

  // Deletes the default sandboxes (local provider) of servers that are gone
  // (ServerInstanceGone of their kMcpServerLabel). Returns their ids.
  std::vector<std::string> ReapOrphanedDefaults();

  const std::vector<std::string> providers() const;
  const BrokerOptions& options() const { return options_; }
  static bool Stateless(const std::string& owner) { return owner == kStatelessOwner; }

 private:
  SandboxProvider* ProviderFor(const std::string& id);
  SandboxProvider* ProviderNamed(const std::string& name);
  Result<SandboxProvider*> ProviderOrError(const std::string& provider);
  Result<SandboxInfo> CreateFor(const CreateRequest& request, const std::string& owner,
                                bool is_default);
  std::string ClientId(const std::string& owner);
  enum class Access { kUse, kDelete };
  Status Check(const std::string& id, const std::string& owner, Access access);
  bool Attached(SandboxProvider* p, const std::string& id);
  void PruneRecords();
  // Clears `id` from every default slot, noting `why` for its owner.
  void DropDefault(const std::string& id, const std::string& why);

  struct DefaultSlot {
    std::mutex mu;  // held while the default sandbox is being created
    std::string id;
    bool delete_on_release = true;
    std::string lost;  // why the previous default is gone ("" = none lost)
  };
  std::shared_ptr<DefaultSlot> Slot(const std::string& owner);

  struct Record {
    std::string client;  // ClientId of the creator
    bool is_default = false;
  };

  BrokerOptions options_;
  std::vector<std::unique_ptr<SandboxProvider>> providers_;
  std::mutex mu_;
  // Attach's connections, each owning its lease (AttachShared).
  std::map<std::string, std::shared_ptr<Sandbox>> connections_;
  std::map<std::string, std::shared_ptr<DefaultSlot>> defaults_;
  std::map<std::string, Record> created_;       // every sandbox this server created
  std::map<std::string, std::string> clients_;  // owner -> client id (label value)
  std::map<std::string, size_t> pending_;       // client id -> creates under way
  size_t pending_total_ = 0;
  std::set<std::string> attached_;  // ids seen to match attach_selector
  // Snapshots this server took: name -> (client id, provider).
  std::map<std::string, std::pair<std::string, SandboxProvider*>> snapshots_;
};

}  // namespace deepbox::mcp
