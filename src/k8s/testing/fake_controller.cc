#include "k8s/testing/fake_controller.h"

#include <fmt/format.h>

#include <algorithm>

#include "k8s/operating_mode.h"
#include "net/conn.h"

namespace deepbox::k8s::testing {

namespace {

constexpr std::string_view kExt = "extensions.agents.x-k8s.io";
constexpr std::string_view kCore = "agents.x-k8s.io";
constexpr std::string_view kPoolLabel = "agents.x-k8s.io/warm-pool-sandbox";
constexpr std::string_view kTemplateHashLabel = "agents.x-k8s.io/sandbox-template-ref-hash";
constexpr std::string_view kLaunchTypeLabel = "agents.x-k8s.io/launch-type";
constexpr std::string_view kClaimUidLabel = "agents.x-k8s.io/claim-uid";
constexpr std::string_view kCreatedByLabel = "agents.x-k8s.io/created-by";
constexpr std::string_view kSandboxNameAnnotation = "agents.x-k8s.io/sandbox-name";

ResourceKey Claims(const std::string& ns) { return {std::string(kExt), "sandboxclaims", ns}; }
ResourceKey Pools(const std::string& ns) { return {std::string(kExt), "sandboxwarmpools", ns}; }
ResourceKey Templates(const std::string& ns) { return {std::string(kExt), "sandboxtemplates", ns}; }
ResourceKey Sandboxes(const std::string& ns) { return {std::string(kCore), "sandboxes", ns}; }
ResourceKey Pods(const std::string& ns) { return {"", "pods", ns}; }
ResourceKey VolumeClaims(const std::string& ns) { return {"", "persistentvolumeclaims", ns}; }

std::string Name(const json::object& o) { return FindString(o, {"metadata", "name"}); }
std::string Uid(const json::object& o) { return FindString(o, {"metadata", "uid"}); }

json::object& Obj(json::object& parent, std::string_view key) {
  auto& v = parent[key];
  if (!v.is_object()) v = json::object();
  return v.as_object();
}

std::string Label(const json::object& o, std::string_view key) {
  return FindString(o, {"metadata", "labels", key});
}

// The controller owner (kind, uid) of an object.
std::pair<std::string, std::string> Owner(const json::object& o) {
  const json::value* refs = Find(o, {"metadata", "ownerReferences"});
  if (refs == nullptr || !refs->is_array()) return {};
  for (const auto& r : refs->get_array()) {
    if (const auto* c = Find(r, {"controller"}); c != nullptr && c->is_bool() && c->get_bool()) {
      return {FindString(r, {"kind"}), FindString(r, {"uid"})};
    }
  }
  return {};
}

json::array OwnerRef(const json::object& owner, std::string_view kind) {
  json::object ref;
  ref["apiVersion"] = FindString(owner, {"apiVersion"});
  ref["kind"] = kind;
  ref["name"] = Name(owner);
  ref["uid"] = Uid(owner);
  ref["controller"] = true;
  ref["blockOwnerDeletion"] = true;
  return json::array{ref};
}

const json::object* ReadyCondition(const json::object& o) {
  const json::value* conds = Find(o, {"status", "conditions"});
  if (conds == nullptr || !conds->is_array()) return nullptr;
  for (const auto& c : conds->get_array()) {
    if (FindString(c, {"type"}) == "Ready" && c.is_object()) return &c.get_object();
  }
  return nullptr;
}

bool IsReady(const json::object& o) {
  const auto* c = ReadyCondition(o);
  return c != nullptr && FindString(*c, {"status"}) == "True";
}

int64_t Generation(const json::object& o) {
  const json::value* g = Find(o, {"metadata", "generation"});
  return g != nullptr && g->is_int64() ? g->as_int64() : 1;
}

// Sets a condition, keeping lastTransitionTime when its status stays.
// `generation`: the one the controller acted on (observedGeneration).
void SetCondition(json::object& o, std::string_view type, bool value, std::string_view reason,
                  std::string_view message, const std::string& now, int64_t generation) {
  auto& status = Obj(o, "status");
  auto& conds = status["conditions"];
  if (!conds.is_array()) conds = json::array();
  json::object cond;
  cond["type"] = type;
  cond["status"] = value ? "True" : "False";
  cond["reason"] = reason;
  cond["message"] = message;
  cond["lastTransitionTime"] = now;
  cond["observedGeneration"] = generation;
  for (auto& c : conds.as_array()) {
    if (FindString(c, {"type"}) == type) {
      if (FindString(c, {"status"}) == (value ? "True" : "False")) {
        cond["lastTransitionTime"] = FindString(c, {"lastTransitionTime"});
      }
      c = std::move(cond);
      return;
    }
  }
  conds.as_array().push_back(std::move(cond));
}

// The Ready condition of an object whose spec the controller does not
// change meanwhile (claims).
void SetReady(json::object& o, bool ready, std::string_view reason, std::string_view message,
              const std::string& now) {
  SetCondition(o, kConditionReady, ready, reason, message, now, Generation(o));
}

// The volumes a Sandbox's pod gets for its volumeClaimTemplates: each a
// PersistentVolumeClaim "<template>-<sandbox>", replacing a pod volume of the
// same name (upstream's MergeVolumeClaimVolumes).
void MergeVolumeClaimVolumes(json::object& pod_spec, const json::object& sandbox) {
  const json::value* vcts = Find(sandbox, {"spec", "volumeClaimTemplates"});
  if (vcts == nullptr || !vcts->is_array() || vcts->get_array().empty()) return;
  json::array volumes;
  std::set<std::string> names;
  for (const auto& t : vcts->get_array()) names.insert(FindString(t, {"metadata", "name"}));
  if (const auto* v = pod_spec.if_contains("volumes"); v != nullptr && v->is_array()) {
    for (const auto& e : v->get_array()) {
      if (!names.contains(FindString(e, {"name"}))) volumes.push_back(e);
    }
  }
  for (const auto& t : vcts->get_array()) {
    std::string n = FindString(t, {"metadata", "name"});
    json::object claim;
    claim["claimName"] = VolumeClaimName(n, Name(sandbox));
    json::object vol;
    vol["name"] = n;
    vol["persistentVolumeClaim"] = std::move(claim);
    volumes.push_back(std::move(vol));
  }
  pod_spec["volumes"] = std::move(volumes);
}

// A blueprint's parts as a Sandbox takes them from its template.
void CopyBlueprint(json::object& spec, const json::object& tmpl) {
  for (std::string_view part : {"podTemplate", "volumeClaimTemplates", "service"}) {
    if (const auto* v = Find(tmpl, {"spec", part})) spec[part] = *v;
  }
}

json::array PodIps(const json::object& sandbox) {
  const json::value* ips = Find(sandbox, {"status", "podIPs"});
  if (ips == nullptr || !ips->is_array()) return {};
  return ips->get_array();
}

// The claim's additionalPodMetadata into the Sandbox's pod template
// metadata, as upstream's mergePodMetadata (from there the Sandbox controller
// puts it on the pod, also on a warm pod that is already running).
void MergePodMetadata(json::object& sandbox, const json::value& pod_meta) {
  auto& meta = Obj(Obj(Obj(sandbox, "spec"), "podTemplate"), "metadata");
  for (std::string_view section : {"labels", "annotations"}) {
    const json::value* m = Find(pod_meta, {section});
    if (m == nullptr || !m->is_object()) continue;
    auto& into = Obj(meta, section);
    for (const auto& kv : m->get_object()) into[kv.key()] = kv.value();
  }
}

bool ForbiddenKey(std::string_view key) {
  if (key == "cluster-autoscaler.kubernetes.io/safe-to-evict") return false;
  auto slash = key.find('/');
  if (slash == std::string_view::npos) return false;
  std::string_view prefix = key.substr(0, slash);
  for (std::string_view d : {"kubernetes.io", "k8s.io", "agents.x-k8s.io"}) {
    if (prefix == d || (prefix.size() > d.size() && prefix.ends_with(d) &&
                        prefix[prefix.size() - d.size() - 1] == '.')) {
      return true;
    }
  }
  return false;
}

// "" when the claim's additionalPodMetadata is acceptable, else why not.
// What the API server would refuse for good in a Sandbox's children, as its
// Invalid message ("" = nothing): a Service name is a DNS-1035 label of at
// most 63 characters (agent-sandbox v1.0.6), a container needs an image.
std::string ServiceNameProblem(const json::object& sandbox) {
  const json::value* service = Find(sandbox, {"spec", "service"});
  std::string name = Name(sandbox);
  if (service == nullptr || !service->is_bool() || !service->get_bool() || name.size() <= 63) {
    return {};
  }
  return fmt::format(
      "Service \"{}\" is invalid: metadata.name: Invalid value: \"{}\": must be no more than 63 "
      "characters",
      name, name);
}

std::string PodSpecProblem(const json::object& sandbox) {
  const json::value* containers = Find(sandbox, {"spec", "podTemplate", "spec", "containers"});
  if (containers == nullptr || !containers->is_array()) return {};
  size_t i = 0;
  for (const auto& c : containers->get_array()) {
    if (FindString(c, {"image"}).empty()) {
      return fmt::format("Pod \"{}\" is invalid: spec.containers[{}].image: Required value",
                         Name(sandbox), i);
    }
    ++i;
  }
  return {};
}

std::string CheckPodMetadata(const json::object& claim) {
  for (std::string_view section : {"labels", "annotations"}) {
    const json::value* m = Find(claim, {"spec", "additionalPodMetadata", section});
    if (m == nullptr || !m->is_object()) continue;
    for (const auto& kv : m->get_object()) {
      std::string key(kv.key());
      if (ForbiddenKey(key)) {
        return fmt::format("{} key '{}' uses a reserved domain", section, key);
      }
      std::string value = kv.value().is_string() ? std::string(kv.value().get_string()) : "";
      if (section == "labels" && value.size() > 63) {
        return fmt::format("label '{}' value is longer than 63 characters", key);
      }
      if (section == "labels" && key == "app" && value == "sandbox-router") {
        return "label app=sandbox-router is reserved";
      }
    }
  }
  return {};
}

}  // namespace

FakeController::FakeController(std::shared_ptr<StoreApi> store, FakeControllerOptions options)
    : store_(std::move(store)), options_(std::move(options)) {
  if (!options_.clock) options_.clock = [] { return std::chrono::system_clock::now(); };
}

FakeController::~FakeController() { Stop(); }

void FakeController::Start() {
  store_->AddListener([this](const StoreEvent&) {
    std::lock_guard lock(mu_);
    dirty_ = true;
    cv_.notify_all();
  });
  for (int i = 0; i < options_.claim_workers; ++i) {
    claim_workers_.emplace_back([this] { ClaimWorker(); });
  }
  thread_ = std::thread([this] { Loop(); });
}

void FakeController::Stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  claim_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  for (auto& t : claim_workers_) t.join();
  claim_workers_.clear();
}

void FakeController::EnqueueClaim(const std::string& ns, const std::string& name) {
  std::string key = ns + "/" + name;
  {
    std::lock_guard lock(mu_);
    if (!claims_pending_.insert(key).second) return;
    claim_queue_.push_back(std::move(key));
  }
  claim_cv_.notify_one();
}

void FakeController::ClaimWorker() {
  for (;;) {
    std::string key;
    {
      std::unique_lock lock(mu_);
      claim_cv_.wait(lock, [&] { return stop_ || !claim_queue_.empty(); });
      if (stop_) break;
      key = std::move(claim_queue_.front());
      claim_queue_.pop_front();
    }
    std::string ns = key.substr(0, key.find('/'));
    std::string name = key.substr(key.find('/') + 1);
    // Read again: another pass may have bound it (or it went) since it was queued.
    auto claim = store_->Get(Claims(ns), name);
    if (claim && FindString(*claim, {"status", "sandbox", "name"}).empty() &&
        FindString(*claim, {"metadata", "annotations", kSandboxNameAnnotation}).empty()) {
      std::chrono::steady_clock::time_point seen;
      {
        std::lock_guard lock(mu_);
        seen = first_seen_.try_emplace(Uid(*claim), std::chrono::steady_clock::now()).first->second;
      }
      ReconcileUnboundClaim(ns, *claim, seen);
    }
    // No pass is asked for here: the worker's own writes wake one, and a claim
    // left unbound (delay, a failed write, a missing pool) waits for the tick
    // or a change rather than spinning.
    std::lock_guard lock(mu_);
    claims_pending_.erase(key);
  }
  net::ReleaseThreadTlsState();  // RemoteStore's requests from this thread used TLS
}

void FakeController::Kick() { ReconcileAll(); }

void FakeController::FailClaimsWith(std::string reason, std::string message) {
  {
    std::lock_guard lock(mu_);
    fail_reason_ = std::move(reason);
    fail_message_ = std::move(message);
    dirty_ = true;
  }
  cv_.notify_all();
}

void FakeController::ExpireSandbox(const std::string& ns, const std::string& name) {
  {
    std::lock_guard lock(mu_);
    expired_[ns + "/" + name] = true;
    dirty_ = true;
  }
  cv_.notify_all();
}

void FakeController::FailPodCreationWith(std::string message) {
  {
    std::lock_guard lock(mu_);
    pod_create_failure_ = std::move(message);
    dirty_ = true;
  }
  cv_.notify_all();
}

void FakeController::RecordEvent(const std::string& ns, std::string_view kind,
                                 const json::object& object, std::string_view type,
                                 std::string_view reason, const std::string& message) {
  {
    std::lock_guard lock(mu_);
    if (!events_recorded_.insert(fmt::format("{}/{}/{}", Uid(object), reason, message)).second) {
      return;
    }
  }
  std::string now = FormatRfc3339(options_.clock());
  json::object e;
  e["apiVersion"] = "v1";
  e["kind"] = "Event";
  auto& meta = Obj(e, "metadata");
  meta["generateName"] = Name(object) + ".";
  auto& involved = Obj(e, "involvedObject");
  involved["apiVersion"] =
      kind == "Sandbox" ? "agents.x-k8s.io/v1beta1" : "extensions.agents.x-k8s.io/v1beta1";
  involved["kind"] = kind;
  involved["name"] = Name(object);
  involved["namespace"] = ns;
  involved["uid"] = Uid(object);
  e["type"] = type;
  e["reason"] = reason;
  e["message"] = message;
  e["count"] = 1;
  e["firstTimestamp"] = now;
  e["lastTimestamp"] = now;
  Obj(e, "source")["component"] = "sandbox-controller";
  e["reportingComponent"] = "sandbox-controller";
  (void)store_->Create({"", "events", ns}, std::move(e));
}

void FakeController::SetPodsBecomeReady(bool ready) {
  {
    std::lock_guard lock(mu_);
    options_.pods_become_ready = ready;
    dirty_ = true;
  }
  cv_.notify_all();
}

void FakeController::SetAdoptionDelay(std::chrono::milliseconds delay) {
  std::lock_guard lock(mu_);
  options_.adoption_delay = delay;
}

void FakeController::RestartPod(const std::string& ns, const std::string& name) {
  auto sb = store_->Get(Sandboxes(ns), name);
  if (!sb) return;
  {
    std::lock_guard lock(mu_);
    auto it = fake_pods_.find(Uid(*sb));
    if (it == fake_pods_.end() || it->second.deleting_since) return;
    it->second.deleting_since = std::chrono::steady_clock::now();
    dirty_ = true;
  }
  cv_.notify_all();
}

bool FakeController::HasPod(const std::string& ns, const std::string& name) const {
  if (options_.real_pods) return store_->Get(Pods(ns), name).has_value();
  auto sb = store_->Get(Sandboxes(ns), name);
  if (!sb) return false;
  std::lock_guard lock(mu_);
  return fake_pods_.contains(Uid(*sb));
}

int FakeController::adoptions() const {
  std::lock_guard lock(mu_);
  return adoptions_;
}

int FakeController::cold_starts() const {
  std::lock_guard lock(mu_);
  return cold_starts_;
}

std::string FakeController::NextPodIp() {
  std::lock_guard lock(mu_);
  // The last octet cycles through 10..249 (long benchmark runs outlive 240 pods).
  int octet = next_ip_++;
  if (next_ip_ > 249) next_ip_ = 10;
  return options_.pod_ip_prefix + std::to_string(octet);
}

void FakeController::Loop() {
  for (;;) {
    {
      std::unique_lock lock(mu_);
      // Ticks drive delays and expiry; store events wake it at once.
      cv_.wait_for(lock, options_.tick, [&] { return stop_ || dirty_; });
      if (stop_) return;
      dirty_ = false;
    }
    ReconcileAll();
  }
}

void FakeController::ReconcileAll() {
  static std::mutex reconcile_mu;  // Kick() and the loop never interleave
  std::lock_guard lock(reconcile_mu);
  for (const auto& ns : store_->Namespaces()) {
    ReconcilePools(ns);
    ReconcileSandboxes(ns);
    ReconcileClaims(ns);
  }
}

void FakeController::ReconcilePools(const std::string& ns) {
  auto sandboxes = store_->List(Sandboxes(ns));
  for (const auto& pool : store_->List(Pools(ns))) {
    std::string name = Name(pool);
    std::string uid = Uid(pool);
    std::string tmpl_name = FindString(pool, {"spec", "sandboxTemplateRef", "name"});
    int64_t replicas = 1;
    if (const auto* r = Find(pool, {"spec", "replicas"}); r != nullptr && r->is_int64()) {
      replicas = r->as_int64();
    }
    std::vector<json::object> members;
    for (const auto& sb : sandboxes) {
      if (Label(sb, kPoolLabel) == NameHash(name) && Owner(sb).second == uid) {
        members.push_back(sb);
      }
    }
    auto tmpl = store_->Get(Templates(ns), tmpl_name);
    while (tmpl && static_cast<int64_t>(members.size()) < replicas) {
      json::object sb;
      sb["apiVersion"] = "agents.x-k8s.io/v1beta1";
      sb["kind"] = "Sandbox";
      auto& meta = Obj(sb, "metadata");
      meta["generateName"] = name + "-";
      auto& labels = Obj(meta, "labels");
      labels[kPoolLabel] = NameHash(name);
      labels[kTemplateHashLabel] = NameHash(tmpl_name);
      labels[kCreatedByLabel] = "controller";
      meta["ownerReferences"] = OwnerRef(pool, "SandboxWarmPool");
      CopyBlueprint(Obj(sb, "spec"), *tmpl);
      auto created = store_->Create(Sandboxes(ns), std::move(sb));
      if (!created) break;
      members.push_back(*created);
    }
    // spec.readinessGracePeriodSeconds (v1.0.12): members not Ready by then
    // are deleted; the next pass replaces them.
    if (const auto* g = Find(pool, {"spec", "readinessGracePeriodSeconds"});
        g != nullptr && g->is_int64()) {
      auto grace = std::chrono::seconds(g->as_int64());
      std::erase_if(members, [&](const json::object& m) {
        auto created = ParseRfc3339(FindString(m, {"metadata", "creationTimestamp"}));
        if (IsReady(m) || !created || options_.clock() - *created < grace) return false;
        (void)store_->Delete(Sandboxes(ns), Name(m));
        return true;
      });
    }
    while (static_cast<int64_t>(members.size()) > replicas) {
      (void)store_->Delete(Sandboxes(ns), Name(members.back()));
      members.pop_back();
    }
    int64_t ready = 0;
    for (const auto& m : members) ready += IsReady(m) ? 1 : 0;
    (void)store_->Update(Pools(ns), name, [&](json::object& o) {
      auto& status = Obj(o, "status");
      status["replicas"] = static_cast<int64_t>(members.size());
      status["readyReplicas"] = ready;
      status["selector"] = fmt::format("{}={}", kPoolLabel, NameHash(name));
    });
  }
}

void FakeController::ReconcileSandboxes(const std::string& ns) {
  auto now = std::chrono::steady_clock::now();
  std::string wall = FormatRfc3339(options_.clock());
  auto claims = store_->List(Claims(ns));
  auto pools = store_->List(Pools(ns));
  auto owner_exists = [&](const std::pair<std::string, std::string>& owner) {
    const auto& list = owner.first == "SandboxClaim" ? claims : pools;
    return std::any_of(list.begin(), list.end(),
                       [&](const json::object& o) { return Uid(o) == owner.second; });
  };
  std::set<std::string> live;  // uids of the Sandboxes kept
  for (const auto& sb : store_->List(Sandboxes(ns))) {
    std::string name = Name(sb);
    std::string uid = Uid(sb);
    auto owner = Owner(sb);
    if (!owner.first.empty() && !owner_exists(owner)) {
      // garbage collection (on a real API server, the real collector's)
      if (!options_.real_pods) (void)store_->Delete(Sandboxes(ns), name);
      continue;
    }
    live.insert(uid);
    bool expired = false;
    bool ready_allowed;
    {
      std::lock_guard lock(mu_);
      expired = expired_.contains(ns + "/" + name);
      ready_allowed = options_.pods_become_ready;
    }
    std::string shutdown = FindString(sb, {"spec", "shutdownTime"});
    if (!shutdown.empty()) {
      auto t = ParseRfc3339(shutdown);
      if (t && *t <= options_.clock()) expired = true;
    }
    // What this pass acted on (the conditions' observedGeneration).
    int64_t generation = Generation(sb);
    bool suspended = OperatingMode(sb) == kOperatingModeSuspended;
    if (!expired) SyncVolumeClaims(ns, sb);
    bool ready = false;
    bool pod_exists = false;  // the pod is there (maybe terminating) after this pass
    json::array ips = PodIps(sb);
    // Why the pod cannot be made: for good (InvalidConfiguration), or for now.
    std::string invalid, create_failed;
    std::string pod_created_event;
    if (!expired && !suspended) {
      invalid = ServiceNameProblem(sb);
      if (invalid.empty() && !options_.real_pods) invalid = PodSpecProblem(sb);
      std::lock_guard lock(mu_);
      create_failed = pod_create_failure_;
    }
    bool was_ready = IsReady(sb);
    if (!invalid.empty() || (!create_failed.empty() && !HasPod(ns, name))) {
      RecordEvent(ns, "Sandbox", sb, "Warning", "SandboxPodCreateFailed",
                  invalid.empty() ? create_failed : invalid);
      ips.clear();
    } else if (options_.real_pods) {
      create_failed.clear();
      std::optional<Error> create_error;
      ready = SyncPod(ns, sb, expired || suspended, ips, &pod_exists, &create_error) && !expired &&
              !suspended;
      if (create_error) {
        // A 422 is permanent (upstream #1630); anything else is retried.
        (create_error->code == ErrorCode::kInvalidArgument ? invalid : create_failed) =
            create_error->message;
        RecordEvent(ns, "Sandbox", sb, "Warning", "SandboxPodCreateFailed", create_error->message);
      }
    } else {
      create_failed.clear();
      bool created_pod = false;
      // The pod as the controller and kubelet would see it: created at once,
      // Ready after pod_start_delay; a deletion ends it pod_stop_delay later
      // (the pass that asks for it still sees it terminating).
      std::lock_guard lock(mu_);
      auto it = fake_pods_.find(uid);
      bool stop = expired || suspended;
      if (it != fake_pods_.end() && it->second.deleting_since &&
          now - *it->second.deleting_since >= options_.pod_stop_delay) {
        fake_pods_.erase(it);
        it = fake_pods_.end();
      }
      if (stop && it != fake_pods_.end() && !it->second.deleting_since) {
        it->second.deleting_since = now;
      }
      if (!stop && it == fake_pods_.end()) {
        it = fake_pods_.emplace(uid, FakePod{ns, now, std::nullopt}).first;
        ips.clear();  // a new pod, a new address
        created_pod = true;
      }
      pod_exists = it != fake_pods_.end();
      ready = !stop && !it->second.deleting_since && ready_allowed &&
              now - it->second.created >= options_.pod_start_delay;
      if (created_pod) {
        pod_created_event = fmt::format("Created Pod {}", name);
      }
    }
    if (!pod_created_event.empty()) {
      RecordEvent(ns, "Sandbox", sb, "Normal", "SandboxPodCreated", pod_created_event);
    }
    if (ready && !was_ready)
      RecordEvent(ns, "Sandbox", sb, "Normal", "SandboxReady", "Sandbox is Ready");
    if (expired) RecordEvent(ns, "Sandbox", sb, "Normal", "SandboxExpired", "Sandbox has expired");
    if (!options_.real_pods && ready && ips.empty()) {
      std::string ip = NextPodIp();
      if (options_.dual_stack) ips.push_back(json::value("fd00::" + ip.substr(ip.rfind('.') + 1)));
      ips.push_back(json::value(ip));
    }
    (void)store_->Update(Sandboxes(ns), name, [&](json::object& o) {
      // The spec moved on since this pass read it: the next pass answers it.
      if (Generation(o) != generation) return;
      auto& status = Obj(o, "status");
      // Persistent, as upstream's: False (NotSuspended) while Running.
      if (!suspended) {
        SetCondition(o, kConditionSuspended, false, kReasonNotSuspended, "Sandbox is not suspended",
                     wall, generation);
      } else if (pod_exists) {
        SetCondition(o, kConditionSuspended, false, kReasonPodTerminating,
                     "Pod is terminating. Sandbox is suspending", wall, generation);
      } else {
        SetCondition(o, kConditionSuspended, true, kReasonPodTerminated,
                     "Pod has been terminated. Sandbox is suspended", wall, generation);
      }
      if (expired) {
        status.erase("podIPs");
        SetCondition(o, kConditionReady, false, "SandboxExpired", "Sandbox has expired", wall,
                     generation);
      } else if (suspended) {
        status.erase("podIPs");
        status.erase("serviceFQDN");
        SetCondition(o, kConditionReady, false, kReasonSandboxSuspended,
                     pod_exists ? "Sandbox is suspending" : "Sandbox is suspended", wall,
                     generation);
      } else if (!invalid.empty()) {
        status.erase("podIPs");
        SetCondition(o, kConditionReady, false, "InvalidConfiguration", invalid, wall, generation);
      } else if (!create_failed.empty()) {
        status.erase("podIPs");
        SetCondition(o, kConditionReady, false, "ReconcilerError", create_failed, wall, generation);
      } else if (ready) {
        status["podIPs"] = ips;
        status["serviceFQDN"] = fmt::format("{}.{}.svc.cluster.local", name, ns);
        SetCondition(o, kConditionReady, true, kReasonDependenciesReady,
                     "Pod is Ready; Service Exists", wall, generation);
      } else {
        SetCondition(o, kConditionReady, false, "DependenciesNotReady",
                     "Pod exists with phase: Pending", wall, generation);
      }
    });
  }
  if (options_.real_pods) return;  // the real garbage collector's
  {
    std::lock_guard lock(mu_);
    std::erase_if(fake_pods_,
                  [&](const auto& kv) { return !live.contains(kv.first) && kv.second.ns == ns; });
  }
  // A Sandbox's PersistentVolumeClaims go with it (they are owned by it).
  for (const auto& pvc : store_->List(VolumeClaims(ns))) {
    auto owner = Owner(pvc);
    if (owner.first == "Sandbox" && !live.contains(owner.second)) {
      (void)store_->Delete(VolumeClaims(ns), Name(pvc));
    }
  }
}

void FakeController::SyncVolumeClaims(const std::string& ns, const json::object& sandbox) {
  const json::value* vcts = Find(sandbox, {"spec", "volumeClaimTemplates"});
  if (vcts == nullptr || !vcts->is_array()) return;
  std::string sb_name = Name(sandbox);
  for (const auto& t : vcts->get_array()) {
    std::string tmpl_name = FindString(t, {"metadata", "name"});
    std::string pvc_name = VolumeClaimName(tmpl_name, sb_name);
    if (tmpl_name.empty() || !IsObjectName(pvc_name) || store_->Get(VolumeClaims(ns), pvc_name)) {
      continue;
    }
    // As upstream's reconcilePVCs: the template's metadata plus the
    // sandbox-name-hash label, its spec, owned by the Sandbox (so kept
    // while it is suspended, collected with it).
    json::object pvc;
    pvc["apiVersion"] = "v1";
    pvc["kind"] = "PersistentVolumeClaim";
    auto& meta = Obj(pvc, "metadata");
    meta["name"] = pvc_name;
    if (const auto* l = Find(t, {"metadata", "labels"}); l != nullptr && l->is_object()) {
      meta["labels"] = *l;
    }
    Obj(meta, "labels")["agents.x-k8s.io/sandbox-name-hash"] = NameHash(sb_name);
    if (const auto* a = Find(t, {"metadata", "annotations"}); a != nullptr && a->is_object()) {
      meta["annotations"] = *a;
    }
    json::object owner = sandbox;
    owner["apiVersion"] = "agents.x-k8s.io/v1beta1";
    meta["ownerReferences"] = OwnerRef(owner, "Sandbox");
    if (const auto* spec = Find(t, {"spec"}); spec != nullptr && spec->is_object()) {
      pvc["spec"] = *spec;
    }
    (void)store_->Create(VolumeClaims(ns), std::move(pvc));
  }
}

bool FakeController::SyncPod(const std::string& ns, const json::object& sandbox, bool stop,
                             json::array& ips, bool* exists, std::optional<Error>* create_error) {
  std::string name = Name(sandbox);
  auto pod = store_->Get(Pods(ns), name);
  *exists = pod.has_value();
  if (stop) {
    // Deleted (gracefully: the node agent, as kubelet, finishes it), unless
    // another object owns a pod of that name.
    if (pod && Owner(*pod).second == Uid(sandbox) &&
        FindString(*pod, {"metadata", "deletionTimestamp"}).empty()) {
      (void)store_->Delete(Pods(ns), name);
    }
    ips.clear();
    return false;
  }
  if (pod && !FindString(*pod, {"metadata", "deletionTimestamp"}).empty()) {
    ips.clear();  // resumed while the old pod still terminates: it goes first
    return false;
  }
  if (!pod) {
    // The pod of the Sandbox's podTemplate, named after it and owned by it
    // (the garbage collector removes it with the Sandbox), already bound to
    // the node agent's node (no scheduler runs).
    json::object p;
    auto& meta = Obj(p, "metadata");
    meta["name"] = name;
    if (const auto* l = Find(sandbox, {"spec", "podTemplate", "metadata", "labels"});
        l != nullptr && l->is_object()) {
      meta["labels"] = *l;
    }
    Obj(meta, "labels")["agents.x-k8s.io/sandbox-name-hash"] = NameHash(name);
    if (const auto* a = Find(sandbox, {"spec", "podTemplate", "metadata", "annotations"});
        a != nullptr && a->is_object()) {
      meta["annotations"] = *a;
    }
    json::object owner = sandbox;
    owner["apiVersion"] = "agents.x-k8s.io/v1beta1";
    meta["ownerReferences"] = OwnerRef(owner, "Sandbox");
    json::object spec;
    if (const auto* ps = Find(sandbox, {"spec", "podTemplate", "spec"});
        ps != nullptr && ps->is_object()) {
      spec = ps->get_object();
    }
    if (!spec.contains("containers")) {
      json::object c;
      c["name"] = "sandbox";
      c["image"] = "deepbox-sandboxd:dev";
      spec["containers"] = json::array{c};
    }
    MergeVolumeClaimVolumes(spec, sandbox);
    spec["nodeName"] = options_.node_name;
    p["spec"] = std::move(spec);
    auto created = store_->Create(Pods(ns), std::move(p));  // Ready on a later pass
    *exists = created.has_value();
    if (created) {
      RecordEvent(ns, "Sandbox", sandbox, "Normal", "SandboxPodCreated",
                  fmt::format("Created Pod {}", name));
    } else if (created.error().code != ErrorCode::kConflict) {
      *create_error = created.error();
    }
    ips.clear();
    return false;
  }
  // The pod template's labels and annotations onto the running pod (an
  // adopted warm pod gets its claim's metadata without a restart).
  for (std::string_view section : {"labels", "annotations"}) {
    const json::value* want = Find(sandbox, {"spec", "podTemplate", "metadata", section});
    if (want == nullptr || !want->is_object()) continue;
    const json::value* have = Find(*pod, {"metadata", section});
    bool differs = false;
    for (const auto& kv : want->get_object()) {
      const json::value* cur =
          have != nullptr && have->is_object() ? have->get_object().if_contains(kv.key()) : nullptr;
      if (cur == nullptr || *cur != kv.value()) differs = true;
    }
    if (!differs) continue;
    auto updated = store_->Update(Pods(ns), name, [&](json::object& o) {
      auto& into = Obj(Obj(o, "metadata"), section);
      for (const auto& kv : want->get_object()) into[kv.key()] = kv.value();
    });
    if (updated) pod = std::move(*updated);
  }
  ips.clear();
  if (const auto* list = Find(*pod, {"status", "podIPs"}); list != nullptr && list->is_array()) {
    for (const auto& e : list->get_array()) {
      std::string ip = FindString(e, {"ip"});
      if (!ip.empty()) ips.push_back(json::value(ip));
    }
  }
  return IsReady(*pod) && !ips.empty();
}

void FakeController::ReconcileClaims(const std::string& ns) {
  auto now = std::chrono::steady_clock::now();
  SystemTime wall_now = options_.clock();
  std::string wall = FormatRfc3339(wall_now);
  auto set_status = [&](const std::string& name, const std::function<void(json::object&)>& fn) {
    (void)store_->Update(Claims(ns), name, fn);
  };
  auto not_ready = [&](const std::string& name, std::string_view reason, std::string message) {
    set_status(name, [&](json::object& o) { SetReady(o, false, reason, message, wall); });
  };

  for (const auto& claim : store_->List(Claims(ns))) {
    std::string name = Name(claim);
    std::string uid = Uid(claim);
    std::chrono::steady_clock::time_point seen;
    {
      std::lock_guard lock(mu_);
      seen = first_seen_.try_emplace(uid, now).first->second;
    }
    std::string bound = FindString(claim, {"status", "sandbox", "name"});
    if (bound.empty())
      bound = FindString(claim, {"metadata", "annotations", kSandboxNameAnnotation});

    // Expiry.
    std::string shutdown = FindString(claim, {"spec", "lifecycle", "shutdownTime"});
    if (!shutdown.empty()) {
      auto t = ParseRfc3339(shutdown);
      if (t && *t <= wall_now) {
        std::string policy = FindString(claim, {"spec", "lifecycle", "shutdownPolicy"});
        if (policy == "Delete" || policy == "DeleteForeground") {
          (void)store_->Delete(Claims(ns), name);
        } else {
          if (!bound.empty()) (void)store_->Delete(Sandboxes(ns), bound);
          not_ready(name, "ClaimExpired", "SandboxClaim has expired");
        }
        continue;
      }
    }

    if (!bound.empty()) {
      auto sb = store_->Get(Sandboxes(ns), bound);
      if (!sb) {
        not_ready(name, "SandboxMissing", fmt::format("Sandbox {} is missing", bound));
        continue;
      }
      const json::object* cond = ReadyCondition(*sb);
      set_status(name, [&](json::object& o) {
        auto& status = Obj(o, "status");
        auto& sbs = Obj(status, "sandbox");
        sbs["name"] = bound;
        json::array ips = PodIps(*sb);
        if (!ips.empty()) {
          sbs["podIPs"] = ips;
        } else {
          sbs.erase("podIPs");
        }
        if (cond != nullptr && FindString(*cond, {"status"}) == "True") {
          SetReady(o, true, FindString(*cond, {"reason"}), FindString(*cond, {"message"}), wall);
        } else if (std::string r = cond != nullptr ? FindString(*cond, {"reason"}) : "";
                   r == "SandboxExpired" || r == kReasonSandboxSuspended ||
                   r == "InvalidConfiguration" || r == "PodFailed" || r == "PodSucceeded") {
          SetReady(o, false, FindString(*cond, {"reason"}), FindString(*cond, {"message"}), wall);
        } else {
          SetReady(o, false, "SandboxNotReady",
                   cond ? FindString(*cond, {"message"}) : "Sandbox is not ready", wall);
        }
      });
      continue;
    }

    if (options_.claim_workers > 0) {
      EnqueueClaim(ns, name);
      continue;
    }
    ReconcileUnboundClaim(ns, claim, seen);
  }
}

void FakeController::ReconcileUnboundClaim(const std::string& ns, const json::object& claim,
                                           std::chrono::steady_clock::time_point seen) {
  auto now = std::chrono::steady_clock::now();
  std::string wall = FormatRfc3339(options_.clock());
  std::string fail_reason, fail_message;
  {
    std::lock_guard lock(mu_);
    fail_reason = fail_reason_;
    fail_message = fail_message_;
  }
  auto set_status = [&](const std::string& name, const std::function<void(json::object&)>& fn) {
    (void)store_->Update(Claims(ns), name, fn);
  };
  auto not_ready = [&](const std::string& name, std::string_view reason, std::string message) {
    set_status(name, [&](json::object& o) { SetReady(o, false, reason, message, wall); });
  };
  std::string name = Name(claim);
  std::string uid = Uid(claim);
  if (!fail_reason.empty()) {
    not_ready(name, fail_reason, fail_message);
    return;
  }

  // Resolve pool and template (v1beta1: warmPoolRef; v1alpha1: template + warmpool).
  std::string api = FindString(claim, {"apiVersion"});
  std::string pool_name, tmpl_name;
  std::optional<json::object> pool;
  if (api.ends_with("/v1alpha1")) {
    tmpl_name = FindString(claim, {"spec", "sandboxTemplateRef", "name"});
    std::string wp = FindString(claim, {"spec", "warmpool"});
    if (wp.empty()) wp = "default";
    if (wp != "none") {
      for (const auto& p : store_->List(Pools(ns))) {
        bool match = wp == "default"
                         ? FindString(p, {"spec", "sandboxTemplateRef", "name"}) == tmpl_name
                         : Name(p) == wp;
        if (match) pool = p;
      }
      if (!pool && wp != "default") {
        not_ready(name, "WarmPoolNotFound",
                  fmt::format("SandboxWarmPool.extensions.agents.x-k8s.io \"{}\" not found", wp));
        return;
      }
    }
  } else {
    pool_name = FindString(claim, {"spec", "warmPoolRef", "name"});
    auto p = store_->Get(Pools(ns), pool_name);
    if (!p) {
      not_ready(
          name, "WarmPoolNotFound",
          fmt::format("SandboxWarmPool.extensions.agents.x-k8s.io \"{}\" not found", pool_name));
      return;
    }
    pool = *p;
    tmpl_name = FindString(*p, {"spec", "sandboxTemplateRef", "name"});
  }
  if (pool) pool_name = Name(*pool);
  auto tmpl = store_->Get(Templates(ns), tmpl_name);
  if (!tmpl) {
    not_ready(
        name, "TemplateNotFound",
        fmt::format("SandboxTemplate.extensions.agents.x-k8s.io \"{}\" not found", tmpl_name));
    return;
  }
  if (std::string bad = CheckPodMetadata(claim); !bad.empty()) {
    not_ready(name, "InvalidMetadata", bad);
    return;
  }
  bool has_env = Find(claim, {"spec", "env"}) != nullptr;
  bool has_vct = Find(claim, {"spec", "volumeClaimTemplates"}) != nullptr;
  std::string env_policy = FindString(*tmpl, {"spec", "envVarsInjectionPolicy"});
  std::string vct_policy = FindString(*tmpl, {"spec", "volumeClaimTemplatesPolicy"});
  if (has_env && env_policy != "Allowed" && env_policy != "Overrides") {
    not_ready(name, "EnvVarsInjectionRejected",
              "the template does not allow environment variable injection");
    return;
  }
  if (has_vct && vct_policy != "Allowed" && vct_policy != "Overrides") {
    not_ready(name, "VolumeClaimTemplatesError",
              "the template does not allow volume claim templates");
    return;
  }
  std::chrono::milliseconds delay;
  {
    std::lock_guard lock(mu_);
    delay = options_.adoption_delay;
  }
  if (now - seen < delay) return;  // the controller is "busy"

  // A Ready warm member with a pod IP, unless env/VCTs force a cold start.
  // Workers adopting for other claims at the same time each reserve their
  // candidate, and the write itself changes nothing unless the Sandbox is
  // still a pool member as the store has it now (after a 409 the store
  // re-reads it and asks again): no Sandbox goes to two claims.
  const json::value* pod_meta = Find(claim, {"spec", "additionalPodMetadata"});
  std::string pool_uid = pool ? Uid(*pool) : "";
  auto in_pool = [&](const json::object& sb) {
    return Label(sb, kPoolLabel) == NameHash(pool_name) && Owner(sb).second == pool_uid;
  };
  std::optional<json::object> adopted;
  bool write_failed = false;
  for (const auto& sb :
       pool && !has_env && !has_vct ? store_->List(Sandboxes(ns)) : std::vector<json::object>{}) {
    if (!in_pool(sb) || !IsReady(sb) || PodIps(sb).empty()) continue;
    std::string sb_name = Name(sb);
    {
      std::lock_guard lock(mu_);
      if (!reserved_.insert(ns + "/" + sb_name).second) continue;
    }
    auto written = store_->Update(Sandboxes(ns), sb_name, [&](json::object& o) {
      if (!in_pool(o)) return;  // taken meanwhile: left as it is
      auto& meta = Obj(o, "metadata");
      auto& labels = Obj(meta, "labels");
      labels.erase(kPoolLabel);
      labels.erase(kTemplateHashLabel);
      labels[kLaunchTypeLabel] = "warm";
      labels[kClaimUidLabel] = uid;
      meta["ownerReferences"] = OwnerRef(claim, "SandboxClaim");
      if (pod_meta != nullptr) MergePodMetadata(o, *pod_meta);
    });
    {
      std::lock_guard lock(mu_);
      reserved_.erase(ns + "/" + sb_name);
    }
    if (written && Label(*written, kClaimUidLabel) == uid) {
      adopted = std::move(*written);
      break;
    }
    write_failed = write_failed || !written;
  }
  if (!adopted && write_failed) return;  // a later pass tries again, before any cold start
  if (adopted) {
    std::string sb_name = Name(*adopted);
    {
      std::lock_guard lock(mu_);
      ++adoptions_;  // counted before the claim shows it (tests read it then)
    }
    set_status(name, [&](json::object& o) {
      Obj(Obj(o, "metadata"), "annotations")[kSandboxNameAnnotation] = sb_name;
      auto& sbs = Obj(Obj(o, "status"), "sandbox");
      sbs["name"] = sb_name;
      sbs["podIPs"] = PodIps(*adopted);
      const json::object* cond = ReadyCondition(*adopted);
      SetReady(o, true, cond ? FindString(*cond, {"reason"}) : "DependenciesReady",
               cond ? FindString(*cond, {"message"}) : "", wall);
    });
    return;
  }
  // Cold start: a Sandbox named after the claim.
  json::object sb;
  sb["apiVersion"] = "agents.x-k8s.io/v1beta1";
  sb["kind"] = "Sandbox";
  auto& meta = Obj(sb, "metadata");
  meta["name"] = name;
  auto& labels = Obj(meta, "labels");
  labels[kLaunchTypeLabel] = "cold";
  labels[kClaimUidLabel] = uid;
  labels[kCreatedByLabel] = "controller";
  meta["ownerReferences"] = OwnerRef(claim, "SandboxClaim");
  CopyBlueprint(Obj(sb, "spec"), *tmpl);
  if (pod_meta != nullptr) MergePodMetadata(sb, *pod_meta);
  if (!store_->Create(Sandboxes(ns), std::move(sb))) return;
  {
    std::lock_guard lock(mu_);
    ++cold_starts_;
  }
  set_status(name, [&](json::object& o) {
    Obj(Obj(o, "metadata"), "annotations")[kSandboxNameAnnotation] = name;
    Obj(Obj(o, "status"), "sandbox")["name"] = name;
    SetReady(o, false, "SandboxNotReady", "Sandbox is not ready", wall);
  });
}

}  // namespace deepbox::k8s::testing
