// Test-only: what the fake agent-sandbox controller needs from a store of
// Kubernetes objects. Two implementations: the fake API server's in-memory
// ObjectStore, and RemoteStore over a real API server (the k8s-real tests).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/json.h"

namespace deepbox::k8s::testing {

struct ResourceKey {
  std::string group;  // "" = core (pods)
  std::string plural;
  std::string ns;
  bool operator==(const ResourceKey&) const = default;
};

struct StoreEvent {
  std::string type;  // ADDED, MODIFIED, DELETED
  int64_t rv = 0;
  ResourceKey key;
  json::object object;
};

class StoreApi {
 public:
  virtual ~StoreApi() = default;
  // CONFLICT when it exists; a name from metadata.generateName.
  virtual Result<json::object> Create(const ResourceKey& key, json::object object) = 0;
  virtual Result<json::object> Get(const ResourceKey& key, const std::string& name) const = 0;
  // The objects (and, where known, the current resourceVersion).
  virtual std::vector<json::object> List(const ResourceKey& key, int64_t* rv = nullptr) const = 0;
  // Applies `mutate` to a copy; unchanged objects are not written.
  virtual Result<json::object> Update(const ResourceKey& key, const std::string& name,
                                      const std::function<void(json::object&)>& mutate) = 0;
  virtual Result<json::object> Delete(const ResourceKey& key, const std::string& name) = 0;
  // Namespaces that hold at least one object.
  virtual std::vector<std::string> Namespaces() const = 0;
  // Called (outside any lock) after every change.
  virtual void AddListener(std::function<void(const StoreEvent&)> listener) = 0;
};

}  // namespace deepbox::k8s::testing
