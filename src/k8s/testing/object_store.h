// Test-only: the state behind the fake API server. Objects of every resource
// type, one global resourceVersion counter (as etcd), an event history for
// watch resumption (compactable, so stale versions get 410), and watch
// subscriptions. Version-agnostic: objects are stored once per group/plural
// whatever apiVersion they were written with.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/json.h"
#include "k8s/testing/store_api.h"

namespace deepbox::k8s::testing {

// One open watch: the store pushes matching events; the watch drains them.
class Subscription {
 public:
  enum class CloseKind { kNone, kDrop, kEnd, kExpire };
  explicit Subscription(ResourceKey key) : key_(std::move(key)) {}
  const ResourceKey& key() const { return key_; }

  void Push(StoreEvent e);
  void RequestBookmark();
  void Close(CloseKind how);
  // Waits up to `wait` for something to do; returns the pending events and
  // whether a bookmark was requested, and the close state.
  struct Batch {
    std::vector<StoreEvent> events;
    bool bookmark = false;
    CloseKind close = CloseKind::kNone;
  };
  Batch Next(std::chrono::milliseconds wait);

 private:
  ResourceKey key_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<StoreEvent> events_;
  bool bookmark_ = false;
  CloseKind close_ = CloseKind::kNone;
};

class ObjectStore : public StoreApi {
 public:
  // Sets metadata (uid, resourceVersion, creationTimestamp, generation,
  // namespace; name from generateName). CONFLICT when it exists.
  Result<json::object> Create(const ResourceKey& key, json::object object) override;
  Result<json::object> Get(const ResourceKey& key, const std::string& name) const override;
  // The objects and the current resourceVersion.
  std::vector<json::object> List(const ResourceKey& key, int64_t* rv = nullptr) const override;
  // Applies `mutate` to a copy; unchanged objects are not written (no event).
  // A changed spec bumps metadata.generation, as the API server does.
  Result<json::object> Update(const ResourceKey& key, const std::string& name,
                              const std::function<void(json::object&)>& mutate) override;
  Result<json::object> Delete(const ResourceKey& key, const std::string& name) override;

  int64_t resource_version() const;
  // Namespaces that hold at least one object.
  std::vector<std::string> Namespaces() const override;
  // Forgets the event history: watches from older versions get 410 Gone.
  void Compact();

  // Opens a watch atomically with its starting point: rv "" or "0" gives the
  // current objects as ADDED; a version gives the history after it; a version
  // older than the compaction point gives nullopt (410 Gone).
  std::optional<std::shared_ptr<Subscription>> OpenWatch(const ResourceKey& key,
                                                         const std::string& rv,
                                                         std::vector<StoreEvent>* initial);
  void CloseWatch(const std::shared_ptr<Subscription>& sub);
  std::vector<std::shared_ptr<Subscription>> watches() const;

  // Called (outside the lock) after every change; for the fake controller.
  void AddListener(std::function<void(const StoreEvent&)> listener) override;

 private:
  void Emit(StoreEvent e, std::unique_lock<std::mutex>& lock);
  static std::string Id(const ResourceKey& key, const std::string& name);

  mutable std::mutex mu_;
  std::map<std::string, std::pair<ResourceKey, json::object>> objects_;
  int64_t rv_ = 100;
  int64_t compacted_ = 100;
  std::deque<StoreEvent> history_;
  std::vector<std::shared_ptr<Subscription>> subs_;
  std::vector<std::function<void(const StoreEvent&)>> listeners_;
};

}  // namespace deepbox::k8s::testing
