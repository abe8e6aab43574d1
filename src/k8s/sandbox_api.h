// The agent-sandbox resources (SandboxClaim, SandboxWarmPool, Sandbox) over
// KubeClient, at the versions the server serves: v1beta1, or v1alpha1 when
// discovery shows the server lacks v1beta1.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "common/error.h"
#include "common/json.h"
#include "k8s/rest_client.h"
#include "k8s/watch.h"

namespace deepbox::k8s {

inline constexpr std::string_view kExtensionsGroup = "extensions.agents.x-k8s.io";
inline constexpr std::string_view kSandboxGroup = "agents.x-k8s.io";

// Thread-safe.
class SandboxApi {
 public:
  explicit SandboxApi(KubeClient& client) : client_(client) {}
  KubeClient& client() { return client_; }

  Result<ResourceType> ClaimType();
  Result<ResourceType> WarmPoolType();
  Result<ResourceType> SandboxType();
  // Forget v1beta1 for the extensions group (a 404 on create showed the
  // server does not serve it although discovery could not be read).
  void FallBackToV1alpha1();
  // The claim type as far as known without a request: from discovery or a
  // create that worked (RememberClaimVersion); nullopt before either.
  std::optional<ResourceType> KnownClaimType();
  void RememberClaimVersion(const std::string& version);

  Result<json::object> CreateClaim(std::string_view ns, const json::object& claim);
  Result<json::object> CreateClaim(const ResourceType& type, std::string_view ns,
                                   const json::object& claim);
  Result<json::object> GetClaim(std::string_view ns, std::string_view name);
  Result<ObjectList> ListClaims(std::string_view ns, const ListOptions& options = {});
  Status DeleteClaim(std::string_view ns, std::string_view name);  // NOT_FOUND when gone
  Result<WatchStats> WatchClaims(std::string_view ns, const WatchOptions& options,
                                 const std::function<bool(const WatchEvent&)>& on_event);
  Result<json::object> GetSandbox(std::string_view ns, std::string_view name);
  // A merge patch of a Sandbox (spec.operatingMode: operating_mode.h).
  Result<json::object> PatchSandbox(std::string_view ns, std::string_view name,
                                    const json::object& patch);
  Result<WatchStats> WatchSandboxes(std::string_view ns, const WatchOptions& options,
                                    const std::function<bool(const WatchEvent&)>& on_event);
  Result<json::object> GetWarmPool(std::string_view ns, std::string_view name);
  Result<ObjectList> ListWarmPools(std::string_view ns);
  // SandboxTemplates (the extensions group's version).
  Result<ResourceType> TemplateType();
  Result<json::object> GetTemplate(std::string_view ns, std::string_view name);
  Result<ObjectList> ListTemplates(std::string_view ns);
  // core/v1 Events of the namespace (the controller's Events on claims and
  // Sandboxes; events.k8s.io/v1 ones are served here too, `regarding` as
  // `involvedObject`). Field selectors such as involvedObject.name=NAME.
  Result<WatchStats> WatchEvents(std::string_view ns, const WatchOptions& options,
                                 const std::function<bool(const WatchEvent&)>& on_event);

 private:
  Result<std::string> Version(std::string_view group);
  KubeClient& client_;
  std::mutex mu_;
  std::map<std::string, std::string, std::less<>> versions_;
};

}  // namespace deepbox::k8s
