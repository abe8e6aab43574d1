#include "k8s/testing/fixtures.h"

#include <thread>

#include "k8s/claim.h"
#include "k8s/util.h"

namespace deepbox::k8s::testing {

bool WaitUntil(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

json::object MakeTemplate(const std::string& name, const std::string& api_version) {
  auto v = ParseJsonObject(R"({
    "kind": "SandboxTemplate",
    "spec": {"podTemplate": {"spec": {"containers": [
      {"name": "sandbox", "image": "python:3.12-slim",
       "ports": [{"containerPort": 8888}]}]}}}})");
  json::object o = *v;
  o["apiVersion"] = api_version;
  json::object meta;
  meta["name"] = name;
  o["metadata"] = std::move(meta);
  return o;
}

json::object MakeWarmPool(const std::string& name, const std::string& template_name, int replicas,
                          const std::string& api_version) {
  json::object o;
  o["apiVersion"] = api_version;
  o["kind"] = "SandboxWarmPool";
  json::object meta;
  meta["name"] = name;
  o["metadata"] = std::move(meta);
  json::object spec;
  spec["replicas"] = replicas;
  json::object ref;
  ref["name"] = template_name;
  spec["sandboxTemplateRef"] = std::move(ref);
  o["spec"] = std::move(spec);
  return o;
}

void SeedPool(ObjectStore& store, const std::string& ns, const std::string& pool,
              const std::string& template_name, int replicas) {
  (void)store.Create({"extensions.agents.x-k8s.io", "sandboxtemplates", ns},
                     MakeTemplate(template_name));
  (void)store.Create({"extensions.agents.x-k8s.io", "sandboxwarmpools", ns},
                     MakeWarmPool(pool, template_name, replicas));
}

int64_t PoolReadyReplicas(ObjectStore& store, const std::string& ns, const std::string& pool) {
  auto p = store.Get({"extensions.agents.x-k8s.io", "sandboxwarmpools", ns}, pool);
  if (!p) return -1;
  const json::value* r = Find(*p, {"status", "readyReplicas"});
  return r != nullptr && r->is_int64() ? r->as_int64() : 0;
}

std::vector<std::string> ClaimNames(ObjectStore& store, const std::string& ns) {
  std::vector<std::string> out;
  for (const auto& c : store.List({"extensions.agents.x-k8s.io", "sandboxclaims", ns})) {
    out.push_back(FindString(c, {"metadata", "name"}));
  }
  return out;
}

Status AddClaim(ObjectStore& store, const std::string& ns, const std::string& name,
                const std::map<std::string, std::string>& labels, const std::string& warm_pool) {
  ClaimRequest r;
  r.warm_pool = warm_pool;
  r.namespace_name = ns;
  r.labels = labels;
  auto obj = BuildClaimObject(r, name, "extensions.agents.x-k8s.io/v1beta1", "",
                              std::chrono::system_clock::now());
  auto created = store.Create({"extensions.agents.x-k8s.io", "sandboxclaims", ns}, obj);
  if (!created) return tl::unexpected(created.error());
  return {};
}

}  // namespace deepbox::k8s::testing
