#include "k8s/testing/object_store.h"

#include <fmt/format.h>

#include <algorithm>

#include "k8s/util.h"

namespace deepbox::k8s::testing {

void Subscription::Push(StoreEvent e) {
  {
    std::lock_guard lock(mu_);
    // A closed watch takes no more events: the stream would write them before
    // its 410 or its end, where a real server sends nothing more. The client's
    // next watch (from its version) or re-list sees them.
    if (close_ != CloseKind::kNone) return;
    events_.push_back(std::move(e));
  }
  cv_.notify_all();
}

void Subscription::RequestBookmark() {
  {
    std::lock_guard lock(mu_);
    bookmark_ = true;
  }
  cv_.notify_all();
}

void Subscription::Close(CloseKind how) {
  {
    std::lock_guard lock(mu_);
    if (close_ == CloseKind::kNone) close_ = how;
  }
  cv_.notify_all();
}

Subscription::Batch Subscription::Next(std::chrono::milliseconds wait) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, wait,
               [&] { return !events_.empty() || bookmark_ || close_ != CloseKind::kNone; });
  Batch b;
  b.events.assign(std::make_move_iterator(events_.begin()), std::make_move_iterator(events_.end()));
  events_.clear();
  b.bookmark = std::exchange(bookmark_, false);
  b.close = close_;
  return b;
}

std::string ObjectStore::Id(const ResourceKey& key, const std::string& name) {
  return fmt::format("{}/{}/{}/{}", key.group, key.plural, key.ns, name);
}

void ObjectStore::Emit(StoreEvent e, std::unique_lock<std::mutex>& lock) {
  history_.push_back(e);
  while (history_.size() > 10000) {
    compacted_ = history_.front().rv;
    history_.pop_front();
  }
  for (const auto& s : subs_) {
    if (s->key() == e.key) s->Push(e);
  }
  auto listeners = listeners_;
  lock.unlock();
  for (const auto& l : listeners) l(e);
  lock.lock();
}

Result<json::object> ObjectStore::Create(const ResourceKey& key, json::object object) {
  std::unique_lock lock(mu_);
  auto& meta = object["metadata"];
  if (!meta.is_object()) meta = json::object();
  auto& m = meta.as_object();
  std::string name = FindString(m, {"name"});
  if (name.empty()) {
    std::string prefix = FindString(m, {"generateName"});
    if (prefix.empty()) {
      return MakeError(ErrorCode::kInvalidArgument, "metadata.name or generateName is required");
    }
    do {
      name = prefix + RandomHex(5);
    } while (objects_.contains(Id(key, name)));
    m["name"] = name;
  }
  std::string id = Id(key, name);
  if (objects_.contains(id)) {
    return MakeError(ErrorCode::kConflict,
                     fmt::format("{}.{} \"{}\" already exists", key.plural, key.group, name));
  }
  ++rv_;
  m["namespace"] = key.ns;
  m["uid"] = fmt::format("{}-{}-{}-{}-{}", RandomHex(8), RandomHex(4), RandomHex(4), RandomHex(4),
                         RandomHex(12));
  m["resourceVersion"] = std::to_string(rv_);
  m["generation"] = 1;
  m["creationTimestamp"] = FormatRfc3339(std::chrono::system_clock::now());
  objects_[id] = {key, object};
  Emit(StoreEvent{"ADDED", rv_, key, object}, lock);
  return object;
}

Result<json::object> ObjectStore::Get(const ResourceKey& key, const std::string& name) const {
  std::lock_guard lock(mu_);
  auto it = objects_.find(Id(key, name));
  if (it == objects_.end()) {
    return MakeError(ErrorCode::kNotFound,
                     fmt::format("{}.{} \"{}\" not found", key.plural, key.group, name));
  }
  return it->second.second;
}

std::vector<json::object> ObjectStore::List(const ResourceKey& key, int64_t* rv) const {
  std::lock_guard lock(mu_);
  std::vector<json::object> out;
  for (const auto& [id, entry] : objects_) {
    if (entry.first == key) out.push_back(entry.second);
  }
  if (rv != nullptr) *rv = rv_;
  return out;
}

Result<json::object> ObjectStore::Update(const ResourceKey& key, const std::string& name,
                                         const std::function<void(json::object&)>& mutate) {
  std::unique_lock lock(mu_);
  auto it = objects_.find(Id(key, name));
  if (it == objects_.end()) {
    return MakeError(ErrorCode::kNotFound,
                     fmt::format("{}.{} \"{}\" not found", key.plural, key.group, name));
  }
  json::object copy = it->second.second;
  mutate(copy);
  if (copy == it->second.second) return copy;
  ++rv_;
  auto& meta = copy["metadata"].as_object();
  meta["resourceVersion"] = std::to_string(rv_);
  // As the API server (a CRD with a status subresource): a spec change is a
  // new generation, which the controller's conditions then catch up with.
  const json::value* was = it->second.second.if_contains("spec");
  const json::value* now = copy.if_contains("spec");
  if ((was == nullptr) != (now == nullptr) || (was != nullptr && *was != *now)) {
    const json::value* g = meta.if_contains("generation");
    meta["generation"] = (g != nullptr && g->is_int64() ? g->as_int64() : 0) + 1;
  }
  it->second.second = copy;
  Emit(StoreEvent{"MODIFIED", rv_, key, copy}, lock);
  return copy;
}

Result<json::object> ObjectStore::Delete(const ResourceKey& key, const std::string& name) {
  std::unique_lock lock(mu_);
  auto it = objects_.find(Id(key, name));
  if (it == objects_.end()) {
    return MakeError(ErrorCode::kNotFound,
                     fmt::format("{}.{} \"{}\" not found", key.plural, key.group, name));
  }
  json::object obj = std::move(it->second.second);
  objects_.erase(it);
  ++rv_;
  obj["metadata"].as_object()["resourceVersion"] = std::to_string(rv_);
  Emit(StoreEvent{"DELETED", rv_, key, obj}, lock);
  return obj;
}

int64_t ObjectStore::resource_version() const {
  std::lock_guard lock(mu_);
  return rv_;
}

std::vector<std::string> ObjectStore::Namespaces() const {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  for (const auto& [id, entry] : objects_) {
    if (std::find(out.begin(), out.end(), entry.first.ns) == out.end()) {
      out.push_back(entry.first.ns);
    }
  }
  return out;
}

void ObjectStore::Compact() {
  std::lock_guard lock(mu_);
  history_.clear();
  compacted_ = rv_;
}

std::optional<std::shared_ptr<Subscription>> ObjectStore::OpenWatch(
    const ResourceKey& key, const std::string& rv, std::vector<StoreEvent>* initial) {
  std::lock_guard lock(mu_);
  if (rv.empty() || rv == "0") {
    for (const auto& [id, entry] : objects_) {
      if (entry.first == key) {
        initial->push_back(StoreEvent{"ADDED", rv_, key, entry.second});
      }
    }
  } else {
    int64_t from = 0;
    try {
      from = std::stoll(rv);
    } catch (...) {
      return std::nullopt;
    }
    if (from < compacted_) return std::nullopt;
    for (const auto& e : history_) {
      if (e.rv > from && e.key == key) initial->push_back(e);
    }
  }
  auto sub = std::make_shared<Subscription>(key);
  subs_.push_back(sub);
  return sub;
}

void ObjectStore::CloseWatch(const std::shared_ptr<Subscription>& sub) {
  std::lock_guard lock(mu_);
  std::erase(subs_, sub);
}

std::vector<std::shared_ptr<Subscription>> ObjectStore::watches() const {
  std::lock_guard lock(mu_);
  return subs_;
}

void ObjectStore::AddListener(std::function<void(const StoreEvent&)> listener) {
  std::lock_guard lock(mu_);
  listeners_.push_back(std::move(listener));
}

}  // namespace deepbox::k8s::testing
