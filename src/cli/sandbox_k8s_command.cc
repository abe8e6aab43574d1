// deepbox sandbox ls|rm --provider k8s: the SandboxClaims of a namespace.
//
// `ls` lists claims (every claim, or those a label selector matches); `rm`
// deletes claims by name or by a non-empty label selector, in one namespace
// and nothing else — the cleanup the seed does with
// `kubectl delete sandboxclaim -l deepagents.example/claim=true`, without
// kubectl. The controller then deletes the Sandbox and its pod.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string_view>
#include <vector>

#include "cli/cli.h"
#include "cli/commands.h"
#include "common/json.h"
#include "common/terminal_text.h"
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

// Everything in these tables and messages comes from the API server: it is
// printed without terminal control sequences, one line per value.
std::string Cell(std::string_view text) { return SanitizeLineForTerminal(text); }

int Report(Error error) {
  error.message = SanitizeForTerminal(error.message);
  return ReportError(error);
}

// Columns on a terminal: one per code point (the cells are valid UTF-8).
size_t DisplayWidth(std::string_view text) {
  size_t n = 0;
  for (unsigned char c : text) n += (c & 0xC0) != 0x80;
  return n;
}

// Left-aligned columns as wide as their widest cell (a warm-pool Sandbox name
// is longer than any fixed width would be), separated by a space; the last
// column is not padded.
std::string FormatTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], DisplayWidth(row[i]));
  }
  std::string out;
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size(); ++i) {
      out += row[i];
      if (i + 1 < row.size()) out.append(widths[i] - DisplayWidth(row[i]) + 1, ' ');
    }
    out += '\n';
  }
  return out;
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
  if (!provider) return Report(provider.error());
  const std::string& ns = (*provider)->namespace_name();
  k8s::ListOptions lo;
  lo.label_selector = args.selector;
  auto list = (*provider)->api().ListClaims(ns, lo);
  if (!list) return Report(list.error());
  if (args.json) {
    json::array arr;
    for (const auto& item : list->items) arr.emplace_back(item);
    std::cout << ToJson(arr) << std::endl;
    return kExitOk;
  }
  if (args.quiet) {
    for (const auto& item : list->items) {
      std::cout << ns << "/" << Cell(k8s::FindString(item, {"metadata", "name"})) << "\n";
    }
    std::cout << std::flush;
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"NAME", "STATE", "SANDBOX", "AGE", "EXPIRES", "LABELS"});
  for (const auto& item : list->items) {
    std::string name = k8s::FindString(item, {"metadata", "name"});
    std::string sandbox = k8s::FindString(item, {"status", "sandbox", "name"});
    auto age = MsFromNow(k8s::FindString(item, {"metadata", "creationTimestamp"}));
    auto expires = MsFromNow(k8s::FindString(item, {"spec", "lifecycle", "shutdownTime"}));
    std::string expiry = !expires       ? "never"
                         : *expires < 0 ? "expired"
                                        : "in " + FormatAge(*expires);
    rows.push_back({name.empty() ? "-" : Cell(name), Cell(ClaimState(item)),
                    sandbox.empty() ? "-" : Cell(sandbox), age ? FormatAge(-*age) : "-", expiry,
                    Cell(ClaimLabels(item))});
  }
  std::string out = FormatTable(rows);
  std::cout << out << std::flush;
  return kExitOk;
}

int RunK8sSandboxRm(const SandboxRmArgs& args) {
  auto provider = MakeK8sProvider(args.cluster);
  if (!provider) return Report(provider.error());
  const std::string ns = (*provider)->namespace_name();
  if (!args.selector.empty()) {
    auto deleted = (*provider)->RemoveBySelector(args.selector, ns);
    if (!deleted) return Report(deleted.error());
    for (const auto& name : *deleted) std::cout << ns << "/" << Cell(name) << "\n";
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
      int c = Report(e);
      if (code == kExitOk || c == kExitError) code = c;
      continue;
    }
    std::cout << claim_ns << "/" << name << std::endl;
  }
  return code;
}

#endif  // DEEPBOX_HAVE_K8S

}  // namespace deepbox::cli
