// deepbox sandbox ls|rm --provider k8s: the SandboxClaims of a namespace.
//
// `ls` lists claims (every claim, or those a label selector matches); `rm`
// deletes claims by name or by a non-empty label selector, in one namespace
// and nothing else — the cleanup the seed does with
// `kubectl delete sandboxclaim -l deepagents.example/claim=true`, without
// kubectl. The controller then deletes the Sandbox and its pod.
#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <iostream>

#include "cli/cli.h"
#include "cli/commands.h"
#include "common/json.h"
#ifdef DEEPBOX_HAVE_K8S
#include "k8s/kubeconfig.h"
#include "k8s/provider.h"
#include "k8s/util.h"
#endif

namespace deepbox::cli {

#ifndef DEEPBOX_HAVE_K8S

int RunK8sSandboxLs(const SandboxLsArgs&) {
  return ReportError(Error(ErrorCode::kUnimplemented,
                           "this deepbox was built without the Kubernetes provider (src/k8s)"));
}
int RunK8sSandboxRm(const SandboxRmArgs&) {
  return ReportError(Error(ErrorCode::kUnimplemented,
                           "this deepbox was built without the Kubernetes provider (src/k8s)"));
}

#else

namespace {

Result<std::unique_ptr<k8s::K8sSandboxProvider>> MakeK8sProvider(const ClusterFlags& flags) {
  k8s::KubeconfigOptions ko;
  if (!flags.kubeconfig.empty()) ko.kubeconfig = flags.kubeconfig;
  ko.context = flags.context;
  std::string ns = flags.namespace_name;
  if (ns.empty()) {
    // The same default as `deepbox run --sandbox k8s`.
    if (const char* env = std::getenv("AGENT_SANDBOX_NAMESPACE"); env != nullptr) ns = env;
  }
  ko.namespace_override = ns;
  auto rest = k8s::LoadDefaultConfig(ko);
  if (!rest) return tl::unexpected(rest.error());
  k8s::K8sProviderOptions po;
  po.rest = *rest;
  po.namespace_name = ns;
  // A one-shot command: an unreachable API server is reported within a
  // second, not after the long retry budget a running agent's claim gets.
  po.client.max_retries = 2;
  return k8s::K8sSandboxProvider::Create(std::move(po));
}

// "Ready", or "Pending"/the Ready condition's reason.
std::string ClaimState(const json::object& claim) {
  const json::value* conditions = k8s::Find(claim, {"status", "conditions"});
  if (conditions != nullptr && conditions->is_array()) {
    for (const auto& c : conditions->as_array()) {
      if (k8s::FindString(c, {"type"}) != "Ready") continue;
      if (k8s::FindString(c, {"status"}) == "True") return "Ready";
      std::string reason = k8s::FindString(c, {"reason"});
      return reason.empty() ? "NotReady" : reason;
    }
  }
  return "Pending";
}

std::string ClaimLabels(const json::object& claim) {
  const json::value* labels = k8s::Find(claim, {"metadata", "labels"});
  std::string out;
  if (labels != nullptr && labels->is_object()) {
    for (const auto& [k, v] : labels->as_object()) {
      if (!out.empty()) out += ',';
      out += fmt::format("{}={}", std::string_view(k), v.is_string() ? v.as_string() : "");
    }
  }
  return out.empty() ? "-" : out;
}

// Milliseconds from now until `rfc3339` (negative: in the past); nullopt if unparsable.
std::optional<int64_t> MsFromNow(const std::string& rfc3339) {
  if (rfc3339.empty()) return std::nullopt;
  auto t = k8s::ParseRfc3339(rfc3339);
  if (!t) return std::nullopt;
  return std::chrono::duration_cast<std::chrono::milliseconds>(*t -
                                                               std::chrono::system_clock::now())
      .count();
}

}  // namespace

int RunK8sSandboxLs(const SandboxLsArgs& args) {
  auto provider = MakeK8sProvider(args.cluster);
  if (!provider) return ReportError(provider.error());
  const std::string& ns = (*provider)->namespace_name();
  k8s::ListOptions lo;
  lo.label_selector = args.selector;
  auto list = (*provider)->api().ListClaims(ns, lo);
  if (!list) return ReportError(list.error());
  if (args.json) {
    json::array arr;
    for (const auto& item : list->items) arr.emplace_back(item);
    std::cout << ToJson(arr) << std::endl;
    return kExitOk;
  }
  if (args.quiet) {
    for (const auto& item : list->items) {
      std::cout << ns << "/" << k8s::FindString(item, {"metadata", "name"}) << "\n";
    }
    std::cout << std::flush;
    return kExitOk;
  }
  std::string out = fmt::format("{:<24} {:<18} {:<24} {:<6} {:<8} {}\n", "NAME", "STATE", "SANDBOX",
                                "AGE", "EXPIRES", "LABELS");
  for (const auto& item : list->items) {
    std::string sandbox = k8s::FindString(item, {"status", "sandbox", "name"});
    auto age = MsFromNow(k8s::FindString(item, {"metadata", "creationTimestamp"}));
    auto expires = MsFromNow(k8s::FindString(item, {"spec", "lifecycle", "shutdownTime"}));
    out += fmt::format("{:<24} {:<18} {:<24} {:<6} {:<8} {}\n",
                       k8s::FindString(item, {"metadata", "name"}), ClaimState(item),
                       sandbox.empty() ? "-" : sandbox, age ? FormatAge(-*age) : "-",
                       expires ? "in " + FormatAge(*expires) : "never", ClaimLabels(item));
  }
  std::cout << out << std::flush;
  return kExitOk;
}

int RunK8sSandboxRm(const SandboxRmArgs& args) {
  auto provider = MakeK8sProvider(args.cluster);
  if (!provider) return ReportError(provider.error());
  const std::string ns = (*provider)->namespace_name();
  if (!args.selector.empty()) {
    auto deleted = (*provider)->RemoveBySelector(args.selector, ns);
    if (!deleted) return ReportError(deleted.error());
    for (const auto& name : *deleted) std::cout << ns << "/" << name << "\n";
    std::cout << std::flush;
    if (deleted->empty()) {
      std::fprintf(stderr, "deepbox: no SandboxClaim in namespace %s matches %s\n", ns.c_str(),
                   args.selector.c_str());
    }
    return kExitOk;
  }
  int code = kExitOk;
  for (const auto& id : args.ids) {
    // "NAMESPACE/NAME" (what `deepbox run` prints as the sandbox id) or NAME.
    std::string claim_ns = ns;
    std::string name = id;
    if (size_t slash = id.find('/'); slash != std::string::npos) {
      claim_ns = id.substr(0, slash);
      name = id.substr(slash + 1);
    }
    if (claim_ns.empty() || name.empty()) {
      int c = ReportError(Error(ErrorCode::kInvalidArgument,
                                fmt::format("bad claim '{}': use NAME or NAMESPACE/NAME", id)));
      if (code == kExitOk) code = c;
      continue;
    }
    auto st = (*provider)->api().DeleteClaim(claim_ns, name);
    if (!st) {
      Error e = st.error();
      if (e.code == ErrorCode::kNotFound) {
        e.message = fmt::format("no SandboxClaim {} in namespace {}", name, claim_ns);
      }
      int c = ReportError(e);
      if (code == kExitOk || c == kExitError) code = c;
      continue;
    }
    std::cout << claim_ns << "/" << name << std::endl;
  }
  return code;
}

#endif  // DEEPBOX_HAVE_K8S

}  // namespace deepbox::cli
