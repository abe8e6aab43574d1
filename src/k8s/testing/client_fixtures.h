// Test-only helpers of k8s_client_test (rest_client_test.cc, watch_test.cc,
// sandbox_api_test.cc): a claim resource, a client with short backoffs on a
// fake API server, and a watch running on a thread that records its events.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/json.h"
#include "k8s/rest_client.h"
#include "k8s/testing/fake_api_server.h"
#include "k8s/watch.h"

namespace deepbox::k8s::testing {

inline const ResourceType kClaims{"extensions.agents.x-k8s.io", "v1beta1", "sandboxclaims",
                                  "SandboxClaim"};

// A SandboxClaim named `name` on warm pool "pool".
inline json::object Claim(const std::string& name,
                          const std::map<std::string, std::string>& labels = {}) {
  json::object obj;
  obj["apiVersion"] = kClaims.ApiVersion();
  obj["kind"] = "SandboxClaim";
  json::object meta;
  meta["name"] = name;
  json::object l;
  for (const auto& [k, v] : labels) l[k] = v;
  meta["labels"] = std::move(l);
  obj["metadata"] = std::move(meta);
  json::object spec;
  json::object ref;
  ref["name"] = "pool";
  spec["warmPoolRef"] = std::move(ref);
  obj["spec"] = std::move(spec);
  return obj;
}

// Backoffs of milliseconds: retries in tests do not wait long.
inline ClientOptions FastOptions() {
  ClientOptions o;
  o.initial_backoff = std::chrono::milliseconds(5);
  o.max_backoff = std::chrono::milliseconds(50);
  return o;
}

inline std::unique_ptr<KubeClient> MakeClient(const FakeApiServer& server,
                                              ClientOptions options = FastOptions()) {
  auto c = KubeClient::Create(server.ClientConfig(), std::move(options));
  EXPECT_TRUE(c) << c.error().ToString();
  return std::move(*c);
}

// Collects the events of a watch of kClaims in "default" on a background
// thread; the watch ends at the first non-bookmark event of `stop_on_name`
// of the type StopOn set (ADDED unless set).
class WatchRecorder {
 public:
  WatchRecorder(KubeClient& client, WatchOptions options, std::string stop_on_name = "")
      : stop_on_(std::move(stop_on_name)) {
    thread_ = std::thread([this, &client, options] {
      result_ = WatchObjects(client, kClaims, "default", options, [this](const WatchEvent& e) {
        std::lock_guard lock(mu_);
        events_.push_back(e);
        cv_.notify_all();
        return !(e.type != WatchEventType::kBookmark &&
                 FindString(e.object, {"metadata", "name"}) == stop_on_ && e.type == stop_type_);
      });
      std::lock_guard lock(mu_);
      done_ = true;
      cv_.notify_all();
    });
  }
  ~WatchRecorder() {
    if (thread_.joinable()) thread_.join();
  }
  void StopOn(std::string name, WatchEventType type) {
    std::lock_guard lock(mu_);
    stop_on_ = std::move(name);
    stop_type_ = type;
  }
  // Waits until an event of `type` for `name` arrived (false after 30 s).
  bool WaitFor(const std::string& name, WatchEventType type) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(30), [&] {
      for (const auto& e : events_) {
        if (e.type == type && FindString(e.object, {"metadata", "name"}) == name) return true;
      }
      return false;
    });
  }
  Result<WatchStats> Join() {
    thread_.join();
    return result_;
  }
  std::vector<WatchEvent> events() {
    std::lock_guard lock(mu_);
    return events_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<WatchEvent> events_;
  std::string stop_on_;
  WatchEventType stop_type_ = WatchEventType::kAdded;
  bool done_ = false;
  Result<WatchStats> result_;
  std::thread thread_;
};

}  // namespace deepbox::k8s::testing
