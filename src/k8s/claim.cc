#include "k8s/claim.h"

#include <fmt/format.h>
#include <sys/eventfd.h>
#include <unistd.h>

namespace deepbox::k8s {

namespace {

json::object ToJsonMap(const std::map<std::string, std::string>& m) {
  json::object o;
  for (const auto& [k, v] : m) o[k] = v;
  return o;
}

struct ReadyState {
  bool seen = false;
  std::string status;
  std::string reason;
  std::string message;
  std::string Describe() const {
    if (!seen) return "no Ready condition yet";
    std::string s = fmt::format("Ready={}", status);
    if (!reason.empty()) s += " " + reason;
    if (!message.empty()) s += ": " + message;
    return s;
  }
};

void SignalFd(const UniqueFd& fd) {
  uint64_t one = 1;
  while (::write(fd.get(), &one, sizeof one) < 0 && errno == EINTR) {
  }
}

// The Events watch beside a claim's wait: the first failure Event about the
// claim (or the Sandbox named after it) is kept and `on_failure` is
// signalled. Stop() ends it (also when it ended by itself, e.g. on a 403).
class FailureEventWatch {
 public:
  FailureEventWatch(SandboxApi& api, const std::string& ns, const std::string& name,
                    const std::string& claim_uid, const std::string& claim_created,
                    const std::string& resource_version,
                    std::chrono::steady_clock::time_point deadline, const UniqueFd& on_failure)
      : stop_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
    if (!stop_) return;  // best effort: the claim's conditions still end the wait
    WatchOptions wo;
    wo.field_selector = "involvedObject.name=" + name;
    wo.resource_version = resource_version;
    wo.deadline = deadline;
    wo.cancel_fd = stop_.get();
    auto since = ParseRfc3339(claim_created);
    thread_ = std::thread([this, &api, ns, name, claim_uid, since, wo, &on_failure] {
      (void)api.WatchEvents(ns, wo, [&](const WatchEvent& ev) {
        if (ev.type != WatchEventType::kAdded && ev.type != WatchEventType::kModified) return true;
        const json::object& e = ev.object;
        std::string kind = FindString(e, {"involvedObject", "kind"});
        if (FindString(e, {"involvedObject", "name"}) != name ||
            FindString(e, {"type"}) != "Warning" ||
            !IsFailureEventReason(FindString(e, {"reason"})) ||
            (kind != "Sandbox" && kind != "SandboxClaim")) {
          return true;
        }
        // An earlier claim of the same name (a name the user chose) is not this one.
        std::string uid = FindString(e, {"involvedObject", "uid"});
        if (kind == "SandboxClaim" && !uid.empty() && !claim_uid.empty() && uid != claim_uid) {
          return true;
        }
        if (auto t = ParseRfc3339(FindString(e, {"metadata", "creationTimestamp"}));
            t && since && *t < *since) {
          return true;
        }
        {
          std::lock_guard lock(mu_);
          failure_ = fmt::format("{} {} ({} {}/{})", FindString(e, {"reason"}),
                                 FindString(e, {"message"}), kind, ns, name);
        }
        SignalFd(on_failure);
        return false;
      });
    });
  }
  ~FailureEventWatch() { Stop(); }
  void Stop() {
    if (stop_) SignalFd(stop_);
    if (thread_.joinable()) thread_.join();
  }
  std::optional<std::string> failure() {
    std::lock_guard lock(mu_);
    return failure_;
  }

 private:
  UniqueFd stop_;
  std::mutex mu_;
  std::optional<std::string> failure_;
  std::thread thread_;
};

}  // namespace

bool IsTerminalClaimReason(std::string_view reason) {
  return reason == "InvalidMetadata" || reason == "EnvVarsInjectionRejected" ||
         reason == "VolumeClaimTemplatesError" || reason == "ClaimExpired" ||
         reason == "SandboxExpired" || reason == "InvalidConfiguration" || reason == "PodFailed" ||
         reason == "PodSucceeded";
}

bool IsFailureEventReason(std::string_view reason) {
  return reason == "SandboxPodCreateFailed" || reason == "PodFailed";
}

json::object BuildClaimObject(const ClaimRequest& request, const std::string& name,
                              const std::string& api_version, const std::string& v1alpha1_template,
                              SystemTime now) {
  json::object obj;
  obj["apiVersion"] = api_version;
  obj["kind"] = "SandboxClaim";
  json::object meta;
  meta["name"] = name;
  meta["namespace"] = request.namespace_name;
  json::object labels = ToJsonMap(request.labels);
  labels[kCreatedByLabel] = request.created_by;
  meta["labels"] = std::move(labels);
  json::object annotations;
  annotations[kRequestTimeAnnotation] = FormatIsoMicros(now);
  meta["annotations"] = std::move(annotations);
  obj["metadata"] = std::move(meta);
  json::object spec;
  json::object ref;
  if (api_version.ends_with("/v1alpha1")) {
    ref["name"] = v1alpha1_template;
    spec["sandboxTemplateRef"] = std::move(ref);
    spec["warmpool"] = request.warm_pool;
  } else {
    ref["name"] = request.warm_pool;
    spec["warmPoolRef"] = std::move(ref);
  }
  if (request.shutdown_after.count() > 0) {
    json::object lifecycle;
    // Whole seconds, rounded up: truncating would end a 15 s TTL after ~14.2 s.
    lifecycle["shutdownTime"] =
        FormatRfc3339(std::chrono::ceil<std::chrono::seconds>(now + request.shutdown_after));
    lifecycle["shutdownPolicy"] = "Delete";
    spec["lifecycle"] = std::move(lifecycle);
  }
  if (!request.pod_labels.empty() || !request.pod_annotations.empty()) {
    json::object pm;
    if (!request.pod_labels.empty()) pm["labels"] = ToJsonMap(request.pod_labels);
    if (!request.pod_annotations.empty()) pm["annotations"] = ToJsonMap(request.pod_annotations);
    spec["additionalPodMetadata"] = std::move(pm);
  }
  obj["spec"] = std::move(spec);
  return obj;
}

Result<ClaimedSandbox> Claimer::Claim(const ClaimRequest& request) {
  if (request.warm_pool.empty()) {
    return MakeError(ErrorCode::kInvalidArgument, "a SandboxWarmPool name is required");
  }
  if (request.shutdown_after.count() < 0) {
    return MakeError(ErrorCode::kInvalidArgument, "the sandbox TTL must be positive");
  }
  if (auto s = ValidateLabels(request.labels); !s) return tl::unexpected(s.error());
  if (auto s = ValidateLabels(request.pod_labels); !s) return tl::unexpected(s.error());
  const std::string& ns = request.namespace_name;
  std::string name =
      request.name.empty() ? std::string(kClaimNamePrefix) + RandomHex(8) : request.name;
  if (!IsObjectName(name) || name.size() > 63) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("'{}' is not a claim name (a DNS label)", name.substr(0, 300)));
  }
  auto now = clock_ ? clock_() : std::chrono::system_clock::now();
  auto start = std::chrono::steady_clock::now();

  Result<json::object> created = MakeError(ErrorCode::kInternal, "not attempted");
  for (int attempt = 0; attempt < 2; ++attempt) {
    // No discovery request before the first create: v1beta1 (the storage
    // version) unless the server said otherwise; a 404 asks it then.
    std::optional<ResourceType> known = api_.KnownClaimType();
    Result<ResourceType> type = known ? *known
                                      : ResourceType{std::string(kExtensionsGroup), "v1beta1",
                                                     "sandboxclaims", "SandboxClaim"};
    std::string tmpl;
    if (type->version == "v1alpha1") {
      // v1alpha1 claims name the template; the pool tells us which.
      auto pool = api_.GetWarmPool(ns, request.warm_pool);
      if (!pool) {
        Error e = pool.error();
        if (e.code == ErrorCode::kNotFound) {
          e.message = fmt::format("SandboxWarmPool '{}' not found in namespace '{}' ({})",
                                  request.warm_pool, ns, e.message);
        }
        return tl::unexpected(e);
      }
      tmpl = FindString(*pool, {"spec", "sandboxTemplateRef", "name"});
    }
    json::object obj = BuildClaimObject(request, name, type->ApiVersion(), tmpl, now);
    created = api_.CreateClaim(*type, ns, obj);
    if (created && !known) api_.RememberClaimVersion(type->version);
    // A 404 on create: the resource type may not be served at this version.
    if (!created && created.error().code == ErrorCode::kNotFound && attempt == 0 &&
        type->version == "v1beta1") {
      if (!known) {
        // Ask the server now (a group it does not serve at all is a clear error).
        auto discovered = api_.ClaimType();
        if (!discovered) return tl::unexpected(discovered.error());
        if (discovered->version != "v1beta1") continue;
      }
      api_.FallBackToV1alpha1();
      continue;
    }
    break;
  }
  if (!created) {
    // A create whose answer was lost may still have happened: our random
    // name, so the claim is ours to remove. A name the caller chose that is
    // taken (409) is another sandbox's: never touched. (A retried create of
    // such a name whose first answer was lost leaves our claim, kept until its
    // TTL and listed, rather than risk deleting someone's sandbox.)
    if (!request.users_name || created.error().code != ErrorCode::kConflict) {
      (void)Release(ns, name);
    }
    Error e = created.error();
    e.message =
        fmt::format("creating SandboxClaim '{}' in namespace '{}': {}", name, ns, e.message);
    return tl::unexpected(e);
  }
  if (request.observer) request.observer(ClaimStep::kCreated, name);
  auto result = Wait(request, name, *created);
  if (!result) {
    if (auto s = Release(ns, name); !s) {
      Error e = result.error();
      e.message += fmt::format(" (and deleting the claim failed: {})", s.error().message);
      return tl::unexpected(e);
    }
    return result;
  }
  result->api_version = FindString(*created, {"apiVersion"});
  result->requested_at = FormatIsoMicros(now);
  result->wait_time = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - start);
  if (result->pod_ips.empty()) {
    // The claim did not carry pod IPs: read them from the Sandbox (best effort;
    // without one the router resolves the sandbox by name).
    if (auto sb = api_.GetSandbox(ns, result->sandbox_name); sb) {
      if (const auto* ips = Find(*sb, {"status", "podIPs"}); ips != nullptr && ips->is_array()) {
        for (const auto& ip : ips->get_array()) {
          if (ip.is_string()) result->pod_ips.emplace_back(ip.get_string());
        }
      }
    }
  }
  result->pod_ip = SelectPodIp(result->pod_ips);
  return result;
}

Result<ClaimedSandbox> Claimer::Wait(const ClaimRequest& request, const std::string& name,
                                     const json::object& created) {
  const std::string& ns = request.namespace_name;
  std::string resource_version = FindString(created, {"metadata", "resourceVersion"});
  if (resource_version.empty()) resource_version = "0";
  WatchOptions wo;
  wo.field_selector = "metadata.name=" + name;
  wo.resource_version = resource_version;
  wo.deadline = std::chrono::steady_clock::now() + request.ready_timeout;
  // A failure Event ends the claim's watch through this fd.
  UniqueFd event_failed(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!event_failed) return MakeSyscallError("eventfd", errno);
  wo.cancel_fd = event_failed.get();
  FailureEventWatch events(api_, ns, name, FindString(created, {"metadata", "uid"}),
                           FindString(created, {"metadata", "creationTimestamp"}), resource_version,
                           wo.deadline, event_failed);
  ReadyState last;
  std::optional<Error> failure;
  std::optional<ClaimedSandbox> done;
  auto what = fmt::format("SandboxClaim '{}' in namespace '{}'", name, ns);

  auto watched = api_.WatchClaims(ns, wo, [&](const WatchEvent& ev) {
    if (ev.type == WatchEventType::kBookmark) return true;
    if (FindString(ev.object, {"metadata", "name"}) != name) return true;
    if (ev.type == WatchEventType::kDeleted) {
      failure = Error(ErrorCode::kUnavailable,
                      fmt::format("{} was deleted while waiting for it to become ready (TTL "
                                  "expiry or someone deleted it)",
                                  what));
      return false;
    }
    bool ready = false;
    if (const auto* conds = Find(ev.object, {"status", "conditions"});
        conds != nullptr && conds->is_array()) {
      for (const auto& c : conds->get_array()) {
        std::string type = FindString(c, {"type"});
        std::string status = FindString(c, {"status"});
        std::string reason = FindString(c, {"reason"});
        std::string message = FindString(c, {"message"});
        if (type == "Ready") last = ReadyState{true, status, reason, message};
        if (type == "Ready" && status == "False" && reason == "TemplateNotFound") {
          failure = Error(ErrorCode::kNotFound,
                          fmt::format("{}: the SandboxTemplate of warm pool '{}' does not exist "
                                      "(TemplateNotFound: {})",
                                      what, request.warm_pool, message));
          return false;
        }
        if (reason == "WarmPoolNotFound") {
          failure = Error(ErrorCode::kNotFound,
                          fmt::format("{}: SandboxWarmPool '{}' does not exist in namespace "
                                      "'{}' (WarmPoolNotFound: {})",
                                      what, request.warm_pool, ns, message));
          return false;
        }
        if (type == "Ready" && status == "False" && IsTerminalClaimReason(reason)) {
          ErrorCode code = reason == "ClaimExpired" || reason == "SandboxExpired" ||
                                   reason == "PodFailed" || reason == "PodSucceeded"
                               ? ErrorCode::kUnavailable
                               : ErrorCode::kInvalidArgument;
          failure = Error(
              code, fmt::format("{} failed with terminal reason {}: {}", what, reason, message));
          return false;
        }
        if (type == "Ready" && status == "True") ready = true;
      }
    }
    std::string sandbox = FindString(ev.object, {"status", "sandbox", "name"});
    if (sandbox.empty()) sandbox = FindString(ev.object, {"status", "sandbox", "Name"});
    if (!sandbox.empty() && ready) {
      // The name goes into X-Sandbox-ID, a URL path and (in cluster) a host name.
      if (!IsObjectName(sandbox)) {
        failure = Error(ErrorCode::kInternal,
                        fmt::format("{} is bound to a Sandbox with an invalid name '{}'", what,
                                    sandbox.substr(0, 300)));
        return false;
      }
      ClaimedSandbox c;
      c.namespace_name = ns;
      c.claim_name = name;
      c.sandbox_name = sandbox;
      if (const auto* ips = Find(ev.object, {"status", "sandbox", "podIPs"});
          ips != nullptr && ips->is_array()) {
        for (const auto& ip : ips->get_array()) {
          if (ip.is_string()) c.pod_ips.emplace_back(ip.get_string());
        }
      }
      done = std::move(c);
      if (request.observer) request.observer(ClaimStep::kReady, name);
      return false;
    }
    return true;
  });
  events.Stop();
  if (failure) return tl::unexpected(*failure);
  if (done) return *done;
  if (auto event = events.failure();
      event && !watched && watched.error().code == ErrorCode::kCancelled) {
    return MakeError(
        ErrorCode::kUnavailable,
        fmt::format("{} cannot become ready: the controller reported {}", what, *event));
  }
  if (!watched) {
    if (watched.error().code == ErrorCode::kTimeout) {
      return MakeError(ErrorCode::kTimeout,
                       fmt::format("{} did not become ready within {} s ({}); a cold start may "
                                   "need longer (raise the ready timeout) or the warm pool may "
                                   "be empty",
                                   what, request.ready_timeout.count() / 1000.0, last.Describe()));
    }
    Error e = watched.error();
    e.message = fmt::format("waiting for {}: {}", what, e.message);
    return tl::unexpected(e);
  }
  return MakeError(ErrorCode::kInternal, fmt::format("watching {} ended early", what));
}

Status Claimer::Release(std::string_view ns, std::string_view claim_name) {
  auto s = api_.DeleteClaim(ns, claim_name);
  if (!s && s.error().code == ErrorCode::kNotFound) return {};
  return s;
}

Result<std::vector<std::string>> Claimer::DeleteBySelector(std::string_view ns,
                                                           std::string_view label_selector) {
  if (label_selector.empty()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "a label selector is required (refusing to delete every claim)");
  }
  ListOptions lo;
  lo.label_selector = std::string(label_selector);
  auto list = api_.ListClaims(ns, lo);
  if (!list) return tl::unexpected(list.error());
  // Every name is checked before anything is deleted: a name like ".." would
  // turn DELETE .../sandboxclaims/NAME into a request on the collection.
  for (const auto& item : list->items) {
    std::string name = FindString(item, {"metadata", "name"});
    if (!name.empty() && !IsObjectName(name)) {
      return MakeError(ErrorCode::kInternal,
                       fmt::format("the API server listed a SandboxClaim with an invalid name "
                                   "'{}' in namespace '{}'; nothing was deleted",
                                   name.substr(0, 300), ns));
    }
  }
  std::vector<std::string> deleted;
  for (const auto& item : list->items) {
    std::string name = FindString(item, {"metadata", "name"});
    if (name.empty()) continue;
    if (auto s = Release(ns, name); !s) return tl::unexpected(s.error());
    deleted.push_back(name);
  }
  return deleted;
}

// ------------------------------------------------------------------ ClaimWatch

Result<std::unique_ptr<ClaimWatch>> ClaimWatch::Start(SandboxApi& api, std::string ns,
                                                      std::string name, OnGone on_gone) {
  std::unique_ptr<ClaimWatch> w(new ClaimWatch());
  w->api_ = &api;
  w->ns_ = std::move(ns);
  w->name_ = std::move(name);
  w->on_gone_ = std::move(on_gone);
  w->stop_fd_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!w->stop_fd_) return MakeSyscallError("eventfd", errno);
  auto claim = api.GetClaim(w->ns_, w->name_);
  if (!claim) {
    if (claim.error().code != ErrorCode::kNotFound) return tl::unexpected(claim.error());
    w->Gone(Error(ErrorCode::kNotFound,
                  fmt::format("SandboxClaim {}/{} no longer exists (deleted from outside or "
                              "expired)",
                              w->ns_, w->name_)));
    return w;
  }
  if (!w->Inspect(*claim)) return w;
  std::string rv = FindString(*claim, {"metadata", "resourceVersion"});
  w->thread_ = std::thread([raw = w.get(), rv, known = *claim] { raw->Loop(rv, known); });
  return w;
}

ClaimWatch::~ClaimWatch() { Stop(); }

void ClaimWatch::Stop() {
  stopped_.store(true);
  if (stop_fd_) {
    uint64_t one = 1;
    while (::write(stop_fd_.get(), &one, sizeof one) < 0 && errno == EINTR) {
    }
  }
  if (thread_.joinable()) thread_.join();
}

std::optional<Error> ClaimWatch::failure() const {
  std::lock_guard lock(mu_);
  return failure_;
}

void ClaimWatch::Gone(Error e) {
  if (stopped_.load() || fired_.exchange(true)) return;
  if (on_gone_) on_gone_(e);
}

bool ClaimWatch::Inspect(const json::object& claim) {
  std::string what = fmt::format("SandboxClaim {}/{}", ns_, name_);
  if (!FindString(claim, {"metadata", "deletionTimestamp"}).empty()) {
    Gone(Error(ErrorCode::kNotFound, fmt::format("{} is being deleted (deleted from outside, or "
                                                 "its TTL expired)",
                                                 what)));
    return false;
  }
  if (const auto* conds = Find(claim, {"status", "conditions"});
      conds != nullptr && conds->is_array()) {
    for (const auto& c : conds->get_array()) {
      std::string reason = FindString(c, {"reason"});
      if (FindString(c, {"type"}) == "Ready" && FindString(c, {"status"}) == "False" &&
          (reason == "ClaimExpired" || reason == "SandboxExpired")) {
        Gone(Error(ErrorCode::kNotFound,
                   fmt::format("{} expired ({}: {})", what, reason, FindString(c, {"message"}))));
        return false;
      }
    }
  }
  return true;
}

void ClaimWatch::Loop(std::string resource_version, json::object claim) {
  WatchOptions wo;
  wo.field_selector = "metadata.name=" + name_;
  // Watch from the version Start() read, so a deletion right after that read
  // is in the stream; with the claim known to the client, a re-list after a
  // 410 Gone (etcd compacted past our version while we were disconnected)
  // that no longer shows it reports a DELETED. (A fresh list here instead
  // would miss a deletion between the read and the list.)
  wo.resource_version = resource_version;
  wo.known_objects.push_back(std::move(claim));
  wo.cancel_fd = stop_fd_.get();
  bool seen = !resource_version.empty();
  auto watched = api_->WatchClaims(ns_, wo, [&](const WatchEvent& ev) {
    if (stopped_.load()) return false;
    if (ev.type == WatchEventType::kBookmark) {
      if (!seen) {
        // The first list did not have it: deleted since Start() read it.
        Gone(Error(ErrorCode::kNotFound,
                   fmt::format("SandboxClaim {}/{} no longer exists (deleted from outside or "
                               "expired)",
                               ns_, name_)));
        return false;
      }
      return true;
    }
    if (FindString(ev.object, {"metadata", "name"}) != name_) return true;
    seen = true;
    if (ev.type == WatchEventType::kDeleted) {
      Gone(Error(ErrorCode::kNotFound,
                 fmt::format("SandboxClaim {}/{} was deleted (from outside: kubectl delete, "
                             "deepbox sandbox rm, or its TTL expired)",
                             ns_, name_)));
      return false;
    }
    return Inspect(ev.object);
  });
  if (!watched && watched.error().code != ErrorCode::kCancelled) {
    std::lock_guard lock(mu_);
    failure_ = watched.error();
  }
}

}  // namespace deepbox::k8s
