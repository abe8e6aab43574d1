#include "k8s/sandbox_api.h"

#include <fmt/format.h>

#include <algorithm>

namespace deepbox::k8s {

Result<std::string> SandboxApi::Version(std::string_view group) {
  {
    std::lock_guard lock(mu_);
    if (auto it = versions_.find(group); it != versions_.end()) return it->second;
  }
  auto served = client_.ServedVersions(group);
  std::string chosen;
  if (!served) {
    if (served.error().code == ErrorCode::kNotFound) {
      return MakeError(
          ErrorCode::kNotFound,
          fmt::format("{} (is the agent-sandbox controller installed{}?)", served.error().message,
                      group == kExtensionsGroup ? " with its extensions" : ""));
    }
    // Discovery is not readable (e.g. RBAC): assume the storage version; a
    // 404 on create falls back later.
    chosen = "v1beta1";
  } else if (std::find(served->begin(), served->end(), "v1beta1") != served->end()) {
    chosen = "v1beta1";
  } else if (std::find(served->begin(), served->end(), "v1alpha1") != served->end()) {
    chosen = "v1alpha1";
  } else {
    return MakeError(ErrorCode::kUnimplemented,
                     fmt::format("{} is served at versions [{}], but deepbox speaks v1beta1 and "
                                 "v1alpha1",
                                 group, fmt::join(*served, ", ")));
  }
  std::lock_guard lock(mu_);
  versions_[std::string(group)] = chosen;
  return chosen;
}

void SandboxApi::FallBackToV1alpha1() {
  std::lock_guard lock(mu_);
  versions_[std::string(kExtensionsGroup)] = "v1alpha1";
}

std::optional<ResourceType> SandboxApi::KnownClaimType() {
  std::lock_guard lock(mu_);
  auto it = versions_.find(kExtensionsGroup);
  if (it == versions_.end()) return std::nullopt;
  return ResourceType{std::string(kExtensionsGroup), it->second, "sandboxclaims", "SandboxClaim"};
}

void SandboxApi::RememberClaimVersion(const std::string& version) {
  std::lock_guard lock(mu_);
  versions_.try_emplace(std::string(kExtensionsGroup), version);
}

Result<ResourceType> SandboxApi::ClaimType() {
  auto v = Version(kExtensionsGroup);
  if (!v) return tl::unexpected(v.error());
  return ResourceType{std::string(kExtensionsGroup), *v, "sandboxclaims", "SandboxClaim"};
}

Result<ResourceType> SandboxApi::WarmPoolType() {
  auto v = Version(kExtensionsGroup);
  if (!v) return tl::unexpected(v.error());
  return ResourceType{std::string(kExtensionsGroup), *v, "sandboxwarmpools", "SandboxWarmPool"};
}

Result<ResourceType> SandboxApi::SandboxType() {
  auto v = Version(kSandboxGroup);
  if (!v) return tl::unexpected(v.error());
  return ResourceType{std::string(kSandboxGroup), *v, "sandboxes", "Sandbox"};
}

Result<json::object> SandboxApi::CreateClaim(std::string_view ns, const json::object& claim) {
  auto t = ClaimType();
  if (!t) return tl::unexpected(t.error());
  return client_.Create(*t, ns, claim);
}

Result<json::object> SandboxApi::CreateClaim(const ResourceType& type, std::string_view ns,
                                             const json::object& claim) {
  return client_.Create(type, ns, claim);
}

Result<json::object> SandboxApi::GetClaim(std::string_view ns, std::string_view name) {
  auto t = ClaimType();
  if (!t) return tl::unexpected(t.error());
  return client_.Get(*t, ns, name);
}

Result<ObjectList> SandboxApi::ListClaims(std::string_view ns, const ListOptions& options) {
  auto t = ClaimType();
  if (!t) return tl::unexpected(t.error());
  return client_.List(*t, ns, options);
}

Status SandboxApi::DeleteClaim(std::string_view ns, std::string_view name) {
  auto t = ClaimType();
  if (!t) return tl::unexpected(t.error());
  return client_.Delete(*t, ns, name);
}

Result<WatchStats> SandboxApi::WatchClaims(std::string_view ns, const WatchOptions& options,
                                           const std::function<bool(const WatchEvent&)>& fn) {
  auto t = ClaimType();
  if (!t) return tl::unexpected(t.error());
  return WatchObjects(client_, *t, ns, options, fn);
}

Result<json::object> SandboxApi::GetSandbox(std::string_view ns, std::string_view name) {
  auto t = SandboxType();
  if (!t) return tl::unexpected(t.error());
  return client_.Get(*t, ns, name);
}

Result<json::object> SandboxApi::PatchSandbox(std::string_view ns, std::string_view name,
                                              const json::object& patch) {
  auto t = SandboxType();
  if (!t) return tl::unexpected(t.error());
  return client_.Patch(*t, ns, name, patch);
}

Result<WatchStats> SandboxApi::WatchSandboxes(std::string_view ns, const WatchOptions& options,
                                              const std::function<bool(const WatchEvent&)>& fn) {
  auto t = SandboxType();
  if (!t) return tl::unexpected(t.error());
  return WatchObjects(client_, *t, ns, options, fn);
}

Result<WatchStats> SandboxApi::WatchEvents(std::string_view ns, const WatchOptions& options,
                                           const std::function<bool(const WatchEvent&)>& fn) {
  static const ResourceType kEvents{"", "v1", "events", "Event"};
  return WatchObjects(client_, kEvents, ns, options, fn);
}

Result<json::object> SandboxApi::GetWarmPool(std::string_view ns, std::string_view name) {
  auto t = WarmPoolType();
  if (!t) return tl::unexpected(t.error());
  return client_.Get(*t, ns, name);
}

Result<ObjectList> SandboxApi::ListWarmPools(std::string_view ns) {
  auto t = WarmPoolType();
  if (!t) return tl::unexpected(t.error());
  return client_.List(*t, ns);
}

Result<ResourceType> SandboxApi::TemplateType() {
  auto v = Version(kExtensionsGroup);
  if (!v) return tl::unexpected(v.error());
  return ResourceType{std::string(kExtensionsGroup), *v, "sandboxtemplates", "SandboxTemplate"};
}

Result<json::object> SandboxApi::GetTemplate(std::string_view ns, std::string_view name) {
  auto t = TemplateType();
  if (!t) return tl::unexpected(t.error());
  return client_.Get(*t, ns, name);
}

Result<ObjectList> SandboxApi::ListTemplates(std::string_view ns) {
  auto t = TemplateType();
  if (!t) return tl::unexpected(t.error());
  return client_.List(*t, ns);
}

}  // namespace deepbox::k8s
