// Test-only helpers shared by the k8s tests: seeding templates and pools into
// the fake API server's store, and bounded waiting for a condition.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <string>

#include "common/error.h"
#include "common/json.h"
#include "k8s/testing/object_store.h"

namespace deepbox::k8s::testing {

// Polls `pred` every 5 ms; false after `timeout` (a safety net, not a timing check).
bool WaitUntil(const std::function<bool()>& pred,
               std::chrono::milliseconds timeout = std::chrono::seconds(30));

// A SandboxTemplate (optionally with env / volume-claim-template policies).
json::object MakeTemplate(const std::string& name,
                          const std::string& api_version = "extensions.agents.x-k8s.io/v1beta1");
json::object MakeWarmPool(const std::string& name, const std::string& template_name, int replicas,
                          const std::string& api_version = "extensions.agents.x-k8s.io/v1beta1");

// Creates both in `ns` of the store.
void SeedPool(ObjectStore& store, const std::string& ns, const std::string& pool,
              const std::string& template_name, int replicas);

// readyReplicas of a pool as the fake controller reports it.
int64_t PoolReadyReplicas(ObjectStore& store, const std::string& ns, const std::string& pool);
std::vector<std::string> ClaimNames(ObjectStore& store, const std::string& ns);

// Puts a v1beta1 SandboxClaim on `warm_pool` straight into the store, as
// another client would have created it.
Status AddClaim(ObjectStore& store, const std::string& ns, const std::string& name,
                const std::map<std::string, std::string>& labels,
                const std::string& warm_pool = "deepagents-warmpool");

}  // namespace deepbox::k8s::testing
