#include "k8s/testing/remote_store.h"

#include <fmt/format.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <set>

#include "k8s/util.h"
#include "k8s/watch.h"

namespace deepbox::k8s::testing {

namespace {

constexpr int kTypes = 6;

std::string KindKey(std::string_view group, std::string_view plural) {
  return fmt::format("{}/{}", group, plural);
}

int64_t Version(const json::object& o) {
  std::string rv = FindString(o, {"metadata", "resourceVersion"});
  int64_t n = 0;
  for (char c : rv) {
    if (c < '0' || c > '9' || n > INT64_MAX / 10 - 10) return 0;
    n = n * 10 + (c - '0');
  }
  return n;
}

}  // namespace

Result<ResourceType> RemoteStore::TypeOf(const ResourceKey& key) {
  if (key.group == "extensions.agents.x-k8s.io") {
    if (key.plural == "sandboxclaims")
      return ResourceType{key.group, "v1beta1", key.plural, "SandboxClaim"};
    if (key.plural == "sandboxwarmpools") {
      return ResourceType{key.group, "v1beta1", key.plural, "SandboxWarmPool"};
    }
    if (key.plural == "sandboxtemplates") {
      return ResourceType{key.group, "v1beta1", key.plural, "SandboxTemplate"};
    }
  }
  if (key.group == "agents.x-k8s.io" && key.plural == "sandboxes") {
    return ResourceType{key.group, "v1beta1", key.plural, "Sandbox"};
  }
  if (key.group.empty() && key.plural == "pods") return ResourceType{"", "v1", "pods", "Pod"};
  if (key.group.empty() && key.plural == "events") return ResourceType{"", "v1", "events", "Event"};
  if (key.group.empty() && key.plural == "persistentvolumeclaims") {
    return ResourceType{"", "v1", key.plural, "PersistentVolumeClaim"};
  }
  return MakeError(ErrorCode::kInvalidArgument,
                   fmt::format("RemoteStore: no resource type {}/{}", key.group, key.plural));
}

Result<std::unique_ptr<RemoteStore>> RemoteStore::Start(RestConfig config) {
  std::unique_ptr<RemoteStore> s(new RemoteStore());
  ClientOptions co;
  co.qps = 200;
  co.burst = 400;
  co.watch_timeout = std::chrono::seconds(60);
  auto client = KubeClient::Create(std::move(config), co);
  if (!client) return tl::unexpected(client.error());
  s->client_ = std::move(*client);
  s->stop_fd_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!s->stop_fd_) return MakeSyscallError("eventfd", errno);
  for (const ResourceKey& k :
       std::vector<ResourceKey>{{"extensions.agents.x-k8s.io", "sandboxclaims", ""},
                                {"extensions.agents.x-k8s.io", "sandboxwarmpools", ""},
                                {"extensions.agents.x-k8s.io", "sandboxtemplates", ""},
                                {"agents.x-k8s.io", "sandboxes", ""},
                                {"", "pods", ""},
                                {"", "persistentvolumeclaims", ""}}) {
    auto type = TypeOf(k);
    s->threads_.emplace_back([raw = s.get(), t = *type] { raw->WatchLoop(t); });
  }
  std::unique_lock lock(s->mu_);
  if (!s->cv_.wait_for(lock, std::chrono::seconds(60), [&] { return s->synced_ >= kTypes; })) {
    return MakeError(ErrorCode::kTimeout, "RemoteStore: the initial lists took over 60 s");
  }
  return s;
}

RemoteStore::~RemoteStore() {
  uint64_t one = 1;
  (void)::write(stop_fd_.get(), &one, sizeof one);
  for (auto& t : threads_) t.join();
}

void RemoteStore::WatchLoop(ResourceType type) {
  ResourceKey all{type.group, type.plural, ""};
  bool counted = false;
  auto stopped = [&](int wait_ms) {
    pollfd p{stop_fd_.get(), POLLIN, 0};
    return ::poll(&p, 1, wait_ms) > 0;
  };
  while (!stopped(0)) {
    // List (the cache becomes exactly the list), then watch from its version.
    auto list = client_->List(type, "", {});
    if (!list) {
      if (stopped(500)) return;
      continue;
    }
    std::set<std::string> listed;
    for (const auto& o : list->items) {
      ResourceKey key = all;
      key.ns = FindString(o, {"metadata", "namespace"});
      listed.insert(fmt::format("{}/{}", key.ns, FindString(o, {"metadata", "name"})));
      Cache(key, "ADDED", o);
    }
    std::vector<json::object> gone;
    {
      std::lock_guard lock(mu_);
      for (const auto& [id, o] : cache_[KindKey(type.group, type.plural)]) {
        if (!listed.contains(id)) gone.push_back(o);
      }
    }
    for (const auto& o : gone) {
      ResourceKey key = all;
      key.ns = FindString(o, {"metadata", "namespace"});
      Uncache(key, o);
    }
    if (!counted) {
      counted = true;
      std::lock_guard lock(mu_);
      ++synced_;
      cv_.notify_all();
    }
    WatchOptions wo;
    wo.resource_version = list->resource_version;
    wo.cancel_fd = stop_fd_.get();
    auto r = WatchObjects(*client_, type, "", wo, [&](const WatchEvent& ev) {
      if (ev.type == WatchEventType::kBookmark) return true;
      ResourceKey key = all;
      key.ns = FindString(ev.object, {"metadata", "namespace"});
      if (ev.type == WatchEventType::kDeleted) {
        Uncache(key, ev.object);
      } else {
        Cache(key, ev.type == WatchEventType::kAdded ? "ADDED" : "MODIFIED", ev.object);
      }
      return true;
    });
    if (!r && r.error().code == ErrorCode::kCancelled) return;
    if (stopped(200)) return;
  }
}

void RemoteStore::Cache(const ResourceKey& key, const std::string& type,
                        const json::object& object) {
  std::vector<std::function<void(const StoreEvent&)>> listeners;
  StoreEvent ev{type, Version(object), key, object};
  {
    std::lock_guard lock(mu_);
    auto& m = cache_[KindKey(key.group, key.plural)];
    std::string id = fmt::format("{}/{}", key.ns, FindString(object, {"metadata", "name"}));
    auto it = m.find(id);
    if (it != m.end() && Version(it->second) >= Version(object)) return;
    m[id] = object;
    listeners = listeners_;
  }
  for (auto& l : listeners) l(ev);
}

void RemoteStore::Uncache(const ResourceKey& key, const json::object& object) {
  std::vector<std::function<void(const StoreEvent&)>> listeners;
  {
    std::lock_guard lock(mu_);
    auto& m = cache_[KindKey(key.group, key.plural)];
    m.erase(fmt::format("{}/{}", key.ns, FindString(object, {"metadata", "name"})));
    listeners = listeners_;
  }
  StoreEvent ev{"DELETED", Version(object), key, object};
  for (auto& l : listeners) l(ev);
}

Result<json::object> RemoteStore::Create(const ResourceKey& key, json::object object) {
  auto type = TypeOf(key);
  if (!type) return tl::unexpected(type.error());
  auto& meta = object["metadata"];
  if (!meta.is_object()) meta = json::object();
  meta.as_object()["namespace"] = key.ns;
  object["apiVersion"] = type->ApiVersion();
  object["kind"] = type->kind;
  auto created = client_->Create(*type, key.ns, object);
  if (!created) return tl::unexpected(created.error());
  Cache(key, "ADDED", *created);
  return created;
}

Result<json::object> RemoteStore::Get(const ResourceKey& key, const std::string& name) const {
  std::lock_guard lock(mu_);
  auto kind = cache_.find(KindKey(key.group, key.plural));
  if (kind != cache_.end()) {
    auto it = kind->second.find(fmt::format("{}/{}", key.ns, name));
    if (it != kind->second.end()) return it->second;
  }
  return MakeError(ErrorCode::kNotFound,
                   fmt::format("{} {}/{} not found", key.plural, key.ns, name));
}

std::vector<json::object> RemoteStore::List(const ResourceKey& key, int64_t* rv) const {
  std::vector<json::object> out;
  std::lock_guard lock(mu_);
  int64_t newest = 0;
  auto kind = cache_.find(KindKey(key.group, key.plural));
  if (kind != cache_.end()) {
    std::string prefix = key.ns + "/";
    for (const auto& [id, o] : kind->second) {
      if (key.ns.empty() || id.starts_with(prefix)) {
        out.push_back(o);
        newest = std::max(newest, Version(o));
      }
    }
  }
  if (rv != nullptr) *rv = newest;
  return out;
}

Result<json::object> RemoteStore::Put(const ResourceType& type, const std::string& ns,
                                      const std::string& name, const json::object& object,
                                      bool status) {
  std::string path = type.Path(ns, name) + (status ? "/status" : "");
  auto r = client_->Send("PUT", path, ToJson(object));
  if (!r) return tl::unexpected(r.error());
  if (r->response.status != 200 && r->response.status != 201) {
    return tl::unexpected(
        ApiStatusError(ParseApiStatus(r->response.status, r->response.body), "PUT " + path));
  }
  return ParseJsonObject(r->response.body);
}

Result<json::object> RemoteStore::Update(const ResourceKey& key, const std::string& name,
                                         const std::function<void(json::object&)>& mutate) {
  auto type = TypeOf(key);
  if (!type) return tl::unexpected(type.error());
  // The controller re-applies its desired state every pass: nothing to write
  // (and no request) when the cached object already is that.
  auto cached = Get(key, name);
  if (cached) {
    json::object next = *cached;
    mutate(next);
    if (next == *cached) return cached;
  }
  for (int attempt = 0;; ++attempt) {
    // First from the cache (its resourceVersion makes a stale copy a 409),
    // then, after a conflict, as the server has it now.
    auto current = attempt == 0 && cached ? cached : client_->Get(*type, key.ns, name);
    if (!current) return tl::unexpected(current.error());
    json::object next = *current;
    mutate(next);
    if (next == *current) return current;
    // The main object, then its status (a CRD with a status subresource
    // ignores status on the main object, and spec on /status).
    json::object main_part = next;
    main_part.erase("status");
    json::object current_main = *current;
    current_main.erase("status");
    Result<json::object> written = *current;
    if (main_part != current_main) {
      if (const auto* st = current->if_contains("status")) main_part["status"] = *st;
      written = Put(*type, key.ns, name, main_part, false);
    }
    const json::value* want_status = next.if_contains("status");
    const json::value* have_status = written ? written->if_contains("status") : nullptr;
    if (written && want_status != nullptr &&
        (have_status == nullptr || *have_status != *want_status)) {
      json::object with_status = *written;
      with_status["status"] = *want_status;
      written = Put(*type, key.ns, name, with_status, true);
    }
    if (!written && written.error().code == ErrorCode::kConflict && attempt < 10) continue;
    if (!written) return tl::unexpected(written.error());
    Cache(key, "MODIFIED", *written);
    return written;
  }
}

Result<json::object> RemoteStore::Delete(const ResourceKey& key, const std::string& name) {
  auto type = TypeOf(key);
  if (!type) return tl::unexpected(type.error());
  auto old = Get(key, name);
  if (auto st = client_->Delete(*type, key.ns, name); !st) return tl::unexpected(st.error());
  // A pod's deletion is graceful: it stays (terminating) until kubelet -- the
  // node agent -- is done, and the watch reports when it is gone.
  if (old && key.plural != "pods") Uncache(key, *old);
  return old ? *old : json::object();
}

std::vector<std::string> RemoteStore::Namespaces() const {
  std::set<std::string> ns;
  std::lock_guard lock(mu_);
  for (const auto& [kind, objects] : cache_) {
    for (const auto& [id, o] : objects) ns.insert(id.substr(0, id.find('/')));
  }
  return {ns.begin(), ns.end()};
}

void RemoteStore::AddListener(std::function<void(const StoreEvent&)> listener) {
  std::lock_guard lock(mu_);
  listeners_.push_back(std::move(listener));
}

}  // namespace deepbox::k8s::testing
