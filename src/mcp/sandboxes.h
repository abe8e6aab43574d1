// The sandboxes behind `deepbox mcp`'s tools: creating, listing and deleting
// them on a provider (local, k8s), reaching one by id (connections are cached
// and reused across calls), and each client's default sandbox — created on
// its first call without a sandbox_id, deleted when that client goes away
// (ReleaseOwner), its TTL the backstop if the server itself dies.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/json.h"
#include "sandbox/sandbox.h"

namespace deepbox::mcp {

struct SandboxInfo {
  std::string id;
  std::string provider;  // local | k8s
  std::map<std::string, std::string> labels;
  std::string created_at;  // RFC 3339, "" unknown
  std::string expires_at;  // RFC 3339, "" = no TTL
  std::string network;     // local: none | public | allow=...; k8s: ""
  std::string state;       // local: claimed/warm; k8s: Ready/NotReady
  json::object ToJson() const;
};

// One provider's sandboxes.
class SandboxBackend {
 public:
  virtual ~SandboxBackend() = default;
  virtual std::string name() const = 0;
  // Whether `id` has this provider's form ("sb-..." locally, "ns/claim" on k8s).
  virtual bool Owns(const std::string& id) const = 0;
  virtual Result<SandboxInfo> Create(const ClaimOptions& options) = 0;
  virtual Result<std::vector<SandboxInfo>> List(const std::string& selector) = 0;
  virtual Status Delete(const std::string& id) = 0;  // NOT_FOUND when there is none
  virtual Result<std::shared_ptr<Sandbox>> Connect(const std::string& id) = 0;
};

struct BrokerOptions {
  std::string default_provider = "local";
  // Labels, TTL and network of every sandbox the server creates (a call's
  // own labels are added; its ttl/network replace these).
  ClaimOptions defaults;
};

class SandboxBroker {
 public:
  SandboxBroker(BrokerOptions options, std::vector<std::unique_ptr<SandboxBackend>> backends);
  ~SandboxBroker();

  // provider "" = the default provider. INVALID_ARGUMENT for an unknown one.
  Result<SandboxInfo> Create(const std::string& provider, const ClaimOptions& options);
  Result<std::vector<SandboxInfo>> List(const std::string& provider, const std::string& selector);
  Status Delete(const std::string& id);
  // A (cached) connection to sandbox `id`.
  Result<std::shared_ptr<Sandbox>> Get(const std::string& id);
  // Drops a cached connection (the sandbox stopped answering).
  void Forget(const std::string& id);

  struct Resolved {
    std::shared_ptr<Sandbox> sandbox;
    std::string id;
    bool created = false;  // the owner's default sandbox was created by this call
  };
  // `id` if given, else `owner`'s default sandbox (created now if needed).
  Result<Resolved> Resolve(const std::optional<std::string>& id, const std::string& owner);
  // Makes `id` the owner's default (a sandbox it created with make_default).
  void SetDefault(const std::string& owner, const std::string& id, bool delete_on_release);
  std::optional<std::string> DefaultId(const std::string& owner);
  // The owner's client is gone: deletes the default sandbox it got created.
  void ReleaseOwner(const std::string& owner);
  // Every owner (server shutdown).
  void ReleaseAll();

  const std::vector<std::string> providers() const;

 private:
  SandboxBackend* BackendFor(const std::string& id);
  SandboxBackend* BackendNamed(const std::string& name);
  struct DefaultSlot {
    std::mutex mu;  // held while the default sandbox is being created
    std::string id;
    bool delete_on_release = true;
  };
  std::shared_ptr<DefaultSlot> Slot(const std::string& owner);

  BrokerOptions options_;
  std::vector<std::unique_ptr<SandboxBackend>> backends_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<Sandbox>> connections_;
  std::map<std::string, std::shared_ptr<DefaultSlot>> defaults_;
};

// The label deepbox mcp puts on every sandbox it creates, and the one marking
// a client's default sandbox.
inline constexpr const char* kMcpLabel = "deepbox.dev/mcp";
inline constexpr const char* kMcpDefaultLabel = "deepbox.dev/mcp-default";

}  // namespace deepbox::mcp
