// deepbox sandbox create|ls|rm --provider k8s: SandboxClaims from the shell.
//
// `create` claims a sandbox from a warm pool, checks that its daemon answers
// and leaves the claim (its TTL or `rm` ends it); `ls` lists claims (every
// claim, or those a label selector matches); `rm` deletes claims by name or
// by a non-empty label selector, in one namespace and nothing else — the
// cleanup the seed does with `kubectl delete sandboxclaim -l
// deepagents.example/claim=true`, without kubectl. The controller then
// deletes the Sandbox and its pod. (exec and cp reach a claim's daemon through
// the provider: K8sSandboxProvider::ConnectDaemon.)
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/provider_util.h"
#include "cli/sandbox_k8s.h"
#include "common/json.h"
#include "common/terminal_text.h"
#include "k8s/provider.h"
#include "k8s/settings.h"
#include "k8s/util.h"
#include "oci/default_image.h"

namespace deepbox::cli {

namespace {

// The provider for a one-shot command: the k8s settings given on the command
// line, the rest from AGENT_SANDBOX_* and the defaults (k8s/settings.h), as
// every command reads them. A setting of another provider is a usage error.
Result<std::unique_ptr<k8s::K8sSandboxProvider>> K8sProviderFor(const ClusterFlags& flags) {
  if (auto st = CheckSettingsFor("k8s", flags.settings); !st) return tl::unexpected(st.error());
  ProviderRequest request;
  request.settings = flags.settings.For(*ProviderRegistry::Global().Lookup("k8s"));
  request.one_shot = true;
  request.on_warning = [](const std::string& w) {
    std::fprintf(stderr, "deepbox: warning: %s\n", SanitizeLineForTerminal(w).c_str());
  };
  return k8s::MakeK8sProvider(request);
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
  const json::value* conditions = Find(claim, {"status", "conditions"});
  if (conditions != nullptr && conditions->is_array()) {
    for (const auto& c : conditions->as_array()) {
      if (FindString(c, {"type"}) != "Ready") continue;
      if (FindString(c, {"status"}) == "True") return "Ready";
      std::string reason = FindString(c, {"reason"});
      return reason.empty() ? "NotReady" : reason;
    }
  }
  return "Pending";
}

std::string ClaimLabels(const json::object& claim) {
  const json::value* labels = Find(claim, {"metadata", "labels"});
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
  auto t = ParseRfc3339(rfc3339);
  if (!t) return std::nullopt;
  return std::chrono::duration_cast<std::chrono::milliseconds>(*t -
                                                               std::chrono::system_clock::now())
      .count();
}

// How a client reaches the daemon, as create --json and inspect --json print
// it: the URL (null through a port-forward, which ended with the command),
// the router's headers, and where the router is.
void AddDaemonReach(json::object& o, const k8s::DaemonEndpoint& endpoint, bool endpoint_lasts) {
  if (endpoint_lasts && !endpoint.base_url.empty()) {
    o["url"] = endpoint.base_url;
  } else {
    o["url"] = nullptr;
  }
  json::object headers;
  for (const auto& [k, v] : endpoint.headers.entries()) headers[k] = v;
  o["headers"] = std::move(headers);
  json::object router;
  router["service"] = "svc/sandbox-router-svc";
  router["namespace"] = "agent-sandbox-system";
  router["port"] = 8080;
  o["router"] = std::move(router);
}

}  // namespace

K8sPolicyCheck CheckK8sNetworkPolicy(const ClusterFlags& flags) {
  K8sPolicyCheck out;
  auto provider = K8sProviderFor(flags);
  if (!provider) {
    out.text = "cannot check: " + provider.error().message;
    return out;
  }
  auto warning = (*provider)->NetworkPolicyWarning();
  if (!warning) {
    out.text = fmt::format("cannot check in namespace {} (warm pool {}): {}",
                           (*provider)->namespace_name(), (*provider)->warm_pool(),
                           warning.error().message);
    return out;
  }
  out.checked = true;
  out.isolated = warning->empty();
  out.text = out.isolated ? fmt::format(
                                "a NetworkPolicy in namespace {} selects the sandbox "
                                "pods of warm pool {} for ingress",
                                (*provider)->namespace_name(), (*provider)->warm_pool())
                          : "WARNING - " + *warning;
  return out;
}

int RunK8sSandboxCreate(const SandboxCreateArgs& args) {
  auto usage = [](std::string message) {
    return ReportError(Error(ErrorCode::kInvalidArgument, std::move(message)));
  };
  // What the local provider takes and a claim cannot: the SandboxTemplate
  // decides the image, limits and network.
  if (!args.rootfs.empty())
    return usage("--rootfs: on Kubernetes the SandboxTemplate sets the image");
  if (!args.network.empty()) {
    return usage("--network: on Kubernetes the SandboxTemplate's networkPolicy decides");
  }
  if (auto st = CheckSettingsFor("k8s", args.cluster.settings); !st) {
    // --memory, --pool, ...: on Kubernetes the SandboxTemplate and the warm pool decide.
    return usage(st.error().message + "; on Kubernetes the SandboxTemplate decides resources");
  }
  if (args.cold) return usage("--cold: a claim takes whatever its warm pool has");
  ClaimOptions claim;
  for (const auto& label : args.labels) {
    size_t eq = label.find('=');
    if (eq == std::string::npos || eq == 0) {
      return usage(fmt::format("bad --label '{}': use K=V", label));
    }
    claim.labels[label.substr(0, eq)] = label.substr(eq + 1);
  }
  if (args.ttl_seconds < 0) return usage("--ttl: must be >= 0 (0 = no TTL)");
  claim.ttl = std::chrono::seconds(args.ttl_seconds);
  claim.name = args.name;  // the claim's name: the id is NAMESPACE/NAME
  // Selects the SandboxTemplate that runs it, and a warm pool of that
  // template (k8s/template_image.h); nothing is pulled here.
  claim.image = args.image;
  auto provider = K8sProviderFor(args.cluster);
  if (!provider) return Report(provider.error());
  // --from-snapshot: the claim is made, then the snapshot's files go into it.
  auto kept = args.from_snapshot.empty() ? (*provider)->ClaimAndKeep(claim)
                                         : (*provider)->RestoreAndKeep(args.from_snapshot, claim);
  if (!args.from_snapshot.empty()) {
    claim.labels["deepbox.dev/snapshot"] = k8s::LabelValueFor(args.from_snapshot);
  }
  if (!kept) {
    Error e = kept.error();
    // 3 means "no such sandbox" (or snapshot, as locally): a missing warm
    // pool is a failed create.
    if (e.code == ErrorCode::kNotFound && !e.message.starts_with("no snapshot '")) {
      e.code = ErrorCode::kUnavailable;
    }
    return Report(e);
  }
  const k8s::ClaimedSandbox& c = kept->claimed;
  std::string id = fmt::format("{}/{}", c.namespace_name, c.claim_name);
  if (args.ttl_seconds == 0) {
    std::fprintf(stderr,
                 "deepbox: warning: --ttl 0: SandboxClaim %s is never deleted automatically; "
                 "delete it with `deepbox sandbox rm --provider k8s %s`\n",
                 id.c_str(), id.c_str());
  }
  if (!args.json) {
    std::cout << id << std::endl;
    return kExitOk;
  }
  // What a client needs to reach the daemon (python/deepbox's Sandbox.claim):
  // the router's URL and the headers to send (the router token is not
  // printed: the caller has it; the claim's daemon token, X-Sandboxd-Token,
  // is: the caller needs it, and holds the key it is derived from anyway). Through a port-forward
  // there is no lasting URL: "url" is null and "router" says what to forward to.
  json::object o;
  o["id"] = id;
  o["provider"] = "k8s";
  o["namespace"] = c.namespace_name;
  o["claim"] = c.claim_name;
  o["sandbox"] = c.sandbox_name;
  o["warm_pool"] = c.warm_pool;
  o["pod_ip"] = c.pod_ip;
  json::array ips;
  for (const auto& ip : c.pod_ips) ips.emplace_back(ip);
  o["pod_ips"] = std::move(ips);
  json::object labels;
  for (const auto& [k, v] : claim.labels) labels[k] = v;
  o["labels"] = std::move(labels);
  o["ttl_seconds"] = args.ttl_seconds;
  o["api_version"] = c.api_version;
  o["requested_at"] = c.requested_at;
  o["ready_ms"] = static_cast<int64_t>(c.wait_time.count());
  AddDaemonReach(o, kept->endpoint, kept->endpoint_lasts);
  std::cout << ToJson(o) << std::endl;
  return kExitOk;
}

int RunK8sSandboxInspect(const SandboxInspectArgs& args) {
  auto provider = K8sProviderFor(args.cluster);
  if (!provider) return Report(provider.error());
  auto record = (*provider)->Describe(args.id);
  if (!record) return Report(record.error());
  const k8s::ClaimRecord& r = *record;
  auto expires = MsFromNow(r.info.expires_at);
  if (args.json) {
    // The shape of `sandbox create --provider k8s --json` (what
    // python/deepbox's Sandbox.claim reads), plus the claim's state, template
    // and image, and whether this user owns it. The daemon token (also in
    // "headers") only for its owner; never the router token.
    json::object o;
    o["id"] = r.info.id;
    o["provider"] = "k8s";
    o["namespace"] = r.claimed.namespace_name;
    o["claim"] = r.claimed.claim_name;
    o["state"] = r.info.state;
    o["reason"] = r.reason;
    o["sandbox"] = r.claimed.sandbox_name;
    o["warm_pool"] = r.warm_pool;
    o["template"] = r.template_name;
    o["image"] = r.image;
    o["resources"] = r.resources;
    o["pod_ip"] = r.claimed.pod_ip;
    json::array ips;
    for (const auto& ip : r.claimed.pod_ips) ips.emplace_back(ip);
    o["pod_ips"] = std::move(ips);
    json::object labels;
    for (const auto& [k, v] : r.info.labels) labels[k] = v;
    o["labels"] = std::move(labels);
    o["created_at"] = r.info.created_at;
    o["requested_at"] = r.claimed.requested_at;
    o["api_version"] = r.claimed.api_version;
    if (r.info.expires_at.empty()) {
      o["expires_at"] = nullptr;
    } else {
      o["expires_at"] = r.info.expires_at;
    }
    if (expires) {
      o["ttl_remaining_seconds"] = std::max<int64_t>(0, *expires / 1000);
    } else {
      o["ttl_remaining_seconds"] = nullptr;
    }
    o["owner"] = r.owner;
    // Whether the claim's daemon takes only its owner's token (it carries a
    // verifier): false for a claim deepbox did not make.
    o["token_verifier"] = r.has_verifier;
    if (r.owner) {
      o["token"] = r.daemon_token;
    } else {
      o["token"] = nullptr;
    }
    AddDaemonReach(o, r.endpoint, r.endpoint_lasts);
    std::cout << ToJson(o) << std::endl;
    return kExitOk;
  }
  auto dash = [](const std::string& v) { return v.empty() ? std::string("-") : Cell(v); };
  std::string state = r.info.state;
  if (!r.reason.empty() && state != "Ready") state += " (" + r.reason + ")";
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"ID:", Cell(r.info.id)});
  rows.push_back({"Provider:", "k8s"});
  rows.push_back({"State:", Cell(state)});
  rows.push_back({"Sandbox:", dash(r.claimed.sandbox_name)});
  rows.push_back({"Warm pool:", dash(r.warm_pool)});
  rows.push_back({"Template:", dash(r.template_name)});
  rows.push_back({"Image:", dash(r.image)});
  rows.push_back({"Resources:", r.resources.empty() ? "-" : Cell(ToJson(r.resources))});
  std::string labels;
  for (const auto& [k, v] : r.info.labels) {
    labels += (labels.empty() ? "" : ",") + k + "=" + v;
  }
  rows.push_back({"Labels:", labels.empty() ? "-" : Cell(labels)});
  auto age = MsFromNow(r.info.created_at);
  rows.push_back(
      {"Created:", r.info.created_at.empty()
                       ? "-"
                       : Cell(r.info.created_at) + (age ? " (" + FormatAge(-*age) + " ago)" : "")});
  rows.push_back({"Expires:", r.info.expires_at.empty() ? "never"
                              : !expires                ? Cell(r.info.expires_at)
                              : *expires < 0
                                  ? Cell(r.info.expires_at) + " (expired)"
                                  : Cell(r.info.expires_at) + " (in " + FormatAge(*expires) + ")"});
  rows.push_back({"Pod IPs:", r.claimed.pod_ips.empty()
                                  ? "-"
                                  : Cell(fmt::format("{}", fmt::join(r.claimed.pod_ips, ", ")))});
  rows.push_back({"Daemon:", r.endpoint_lasts && !r.endpoint.base_url.empty()
                                 ? Cell(r.endpoint.base_url) + " (" + Cell(r.endpoint.router) + ")"
                             : r.claimed.sandbox_name.empty() ? "- (no sandbox yet)"
                                                              : Cell(r.endpoint.router)});
  rows.push_back({"Owner:", r.owner          ? "you (this user's claim key made its daemon token)"
                            : r.has_verifier ? "another key (its daemon refuses this user)"
                                             : "none recorded (not claimed by deepbox)"});
  std::cout << FormatTable(rows) << std::flush;
  return kExitOk;
}

int RunK8sSandboxLs(const SandboxLsArgs& args) {
  auto provider = K8sProviderFor(args.cluster);
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
      std::cout << ns << "/" << Cell(FindString(item, {"metadata", "name"})) << "\n";
    }
    std::cout << std::flush;
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"NAME", "STATE", "SANDBOX", "AGE", "EXPIRES", "LABELS"});
  for (const auto& item : list->items) {
    std::string name = FindString(item, {"metadata", "name"});
    std::string sandbox = FindString(item, {"status", "sandbox", "name"});
    auto age = MsFromNow(FindString(item, {"metadata", "creationTimestamp"}));
    auto expires = MsFromNow(FindString(item, {"spec", "lifecycle", "shutdownTime"}));
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
  auto provider = K8sProviderFor(args.cluster);
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

}  // namespace deepbox::cli
