// Test-only: the fake controller's store over a real API server (the
// k8s-real tests, tests/k8s/real/README.md). Like an informer: one watch per
// resource type across all namespaces fills a cache that Get/List read and
// that wakes the listeners; writes go through the API (status through the
// /status subresource, retried on conflicts) and are put in the cache at once
// so the controller reads its own writes.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/unique_fd.h"
#include "k8s/rest_client.h"
#include "k8s/testing/store_api.h"

namespace deepbox::k8s::testing {

class RemoteStore : public StoreApi {
 public:
  // Watches SandboxClaims, SandboxWarmPools, SandboxTemplates, Sandboxes,
  // pods and PersistentVolumeClaims in every namespace; returns once each has
  // been listed.
  static Result<std::unique_ptr<RemoteStore>> Start(RestConfig config);
  ~RemoteStore() override;

  Result<json::object> Create(const ResourceKey& key, json::object object) override;
  Result<json::object> Get(const ResourceKey& key, const std::string& name) const override;
  std::vector<json::object> List(const ResourceKey& key, int64_t* rv = nullptr) const override;
  Result<json::object> Update(const ResourceKey& key, const std::string& name,
                              const std::function<void(json::object&)>& mutate) override;
  Result<json::object> Delete(const ResourceKey& key, const std::string& name) override;
  std::vector<std::string> Namespaces() const override;
  void AddListener(std::function<void(const StoreEvent&)> listener) override;

  KubeClient& client() { return *client_; }

 private:
  RemoteStore() = default;
  static Result<ResourceType> TypeOf(const ResourceKey& key);
  void WatchLoop(ResourceType type);
  // Puts `object` in the cache unless the cache has a newer version; tells
  // the listeners.
  void Cache(const ResourceKey& key, const std::string& type, const json::object& object);
  void Uncache(const ResourceKey& key, const json::object& object);
  Result<json::object> Put(const ResourceType& type, const std::string& ns, const std::string& name,
                           const json::object& object, bool status);

  std::unique_ptr<KubeClient> client_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  // "<group>/<plural>" -> "<ns>/<name>" -> object
  std::map<std::string, std::map<std::string, json::object>> cache_;
  std::vector<std::function<void(const StoreEvent&)>> listeners_;
  int synced_ = 0;
  UniqueFd stop_fd_;
  std::vector<std::thread> threads_;
};

}  // namespace deepbox::k8s::testing
