// deepbox sandbox create | ls | rm (exec: sandbox_exec.cc)
#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <thread>

#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/image_pull_display.h"
#include "cli/provider_util.h"
#include "common/json.h"
#include "common/terminal_text.h"
#include "common/time.h"
#include "local/lifecycle/provider.h"
#include "sandbox/registry.h"

namespace deepbox::cli {
namespace {

using local::lifecycle::SandboxMeta;
using local::lifecycle::Selector;

// What `ls` shows in its STATE column.
std::string DisplayState(const SandboxMeta& m, int64_t now) {
  std::string state = m.ready ? m.state : m.restarts > 0 ? "restarting" : "starting";
  if (m.requested_mode != m.mode) {  // on its way
    state = m.requested_mode == "running"  ? "resuming"
            : m.requested_mode == "paused" ? "pausing"
                                           : "suspending";
  } else if (m.mode != "running") {
    state = m.mode;
  }
  if (!m.broken.empty()) state = "broken";
  if (m.expired(now)) state = "expiring";
  return state;
}

std::string LabelsText(const local::lifecycle::Labels& labels) {
  std::string out;
  for (const auto& [k, v] : labels) {
    if (!out.empty()) out += ',';
    out += k + "=" + v;
  }
  return out.empty() ? "-" : SanitizeLineForTerminal(out);
}

}  // namespace

std::string FormatAge(int64_t ms) {
  int64_t s = ms / 1000;
  if (s < 0) return "-";
  if (s < 120) return fmt::format("{}s", s);
  if (s < 7200) return fmt::format("{}m", s / 60);
  if (s < 172800) return fmt::format("{}h", s / 3600);
  return fmt::format("{}d", s / 86400);
}

int ExitCodeFor(const Error& error) {
  switch (error.code) {
    case ErrorCode::kInvalidArgument:
      return kExitUsage;
    case ErrorCode::kNotFound:
      return kExitNotFound;
    default:
      return kExitError;
  }
}

int ReportError(const Error& error) {
  // Messages can carry a daemon's words or a supervisor's stderr tail.
  std::fprintf(stderr, "deepbox: %s\n", SanitizeForTerminal(error.message).c_str());
  return ExitCodeFor(error);
}

Result<std::unique_ptr<local::lifecycle::LocalSandboxProvider>> MakeProvider(
    const ProviderSettingFlags& flags) {
  const ProviderRegistration* local = ProviderRegistry::Global().Lookup("local");
  ProviderRequest request;
  request.settings = flags.For(*local);
  return local::lifecycle::MakeLocalProvider(request);
}

Status CheckSettingsFor(std::string_view provider, const ProviderSettingFlags& flags) {
  const ProviderRegistry& registry = ProviderRegistry::Global();
  const ProviderRegistration* used = registry.Lookup(provider);
  if (used == nullptr) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("unknown sandbox provider '{}'", provider));
  }
  for (const std::string& flag : flags.NotFor(*used)) {
    std::string owners = ProvidersWithSetting(std::string_view(flag).substr(2));
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("{}: a setting of the {} provider, not of {} (--provider)", flag,
                                 owners.empty() ? "another" : owners, provider));
  }
  return {};
}

int RunSandboxCreate(const SandboxCreateArgs& args) {
  if (args.cluster.k8s() && args.idle_suspend_seconds > 0) {
    return ReportError(Error(ErrorCode::kUnimplemented,
                             "--idle-suspend: local sandboxes only (agent-sandbox has no idle "
                             "timer; suspend a claim with `deepbox sandbox suspend`)"));
  }
  if (args.cluster.k8s() && !args.secrets.empty()) {
    return ReportError(Error(ErrorCode::kUnimplemented,
                             "--secret: local sandboxes only so far (on Kubernetes the secrets "
                             "proxy runs as a sidecar of the SandboxTemplate: not yet)"));
  }
  if (args.cluster.k8s()) return RunK8sSandboxCreate(args);
  if (auto st = CheckSettingsFor(args.cluster.provider, args.cluster.settings); !st) {
    return ReportError(st.error());
  }
  ClaimOptions claim;
  for (const auto& l : args.labels) {
    auto kv = local::lifecycle::ParseLabel(l);
    if (!kv) return ReportError(kv.error());
    claim.labels[kv->first] = kv->second;
  }
  if (args.ttl_seconds < 0) {
    return ReportError(Error(ErrorCode::kInvalidArgument, "--ttl: must be >= 0 (0 = no TTL)"));
  }
  claim.ttl = std::chrono::seconds(args.ttl_seconds);
  if (args.idle_suspend_seconds < 0) {
    return ReportError(
        Error(ErrorCode::kInvalidArgument, "--idle-suspend: must be >= 0 (0 = never)"));
  }
  claim.idle_suspend = std::chrono::seconds(args.idle_suspend_seconds);
  claim.name = args.name;
  claim.network = args.network;
  claim.rootfs = args.rootfs;
  claim.image = args.image;
  if (!args.image.empty()) {
    if (!args.rootfs.empty()) {
      return ReportError(Error(ErrorCode::kInvalidArgument,
                               "--image and --rootfs cannot be used together: a sandbox's root "
                               "is an image or a directory"));
    }
    if (auto st = PullImageForSandbox(args.image); !st) return ReportError(st.error());
  }
  // The values are read here, from the caller's environment, files or commands.
  auto secrets = ResolveSecretFlags(args.secrets);
  if (!secrets) return ReportError(secrets.error());
  claim.secrets = std::move(*secrets);
  auto provider = MakeProvider(args.cluster.settings);
  if (!provider) return ReportError(provider.error());
  if (!args.from_snapshot.empty()) {
    // A new sandbox holding the snapshot's files (sandbox snapshot ID).
    auto info = (*provider)->CreateFromSnapshot(args.from_snapshot, claim);
    if (!info) return ReportError(info.error());
    auto restored = (*provider)->Get(info->id);
    if (!restored) return ReportError(restored.error());
    if (args.json) {
      std::cout << ToJson(restored->ToJson()) << std::endl;
    } else {
      std::cout << info->id << std::endl;
    }
    return kExitOk;
  }
  auto meta = (*provider)->CreateSandbox(claim, !args.cold);
  if (!meta) {
    int code = ReportError(meta.error());
    // UNAVAILABLE: the host cannot do what was asked (user namespaces, an
    // explicit public network, loop devices): see `deepbox doctor`.
    return meta.error().code == ErrorCode::kUnavailable ? kExitUnsupported : code;
  }
  if (!meta->network_note.empty())
    std::fprintf(stderr, "deepbox: warning: %s\n", SanitizeForTerminal(meta->network_note).c_str());
  if (!meta->limits_note.empty())
    std::fprintf(stderr, "deepbox: warning: %s\n", SanitizeForTerminal(meta->limits_note).c_str());
  if (args.ttl_seconds == 0) {
    std::fprintf(stderr,
                 "deepbox: warning: --ttl 0: sandbox %s is never deleted automatically; "
                 "delete it with `deepbox sandbox rm %s`\n",
                 meta->id.c_str(), meta->id.c_str());
  }
  if (args.json) {
    std::cout << ToJson(meta->ToJson()) << std::endl;
  } else {
    std::cout << meta->id << std::endl;
  }
  return kExitOk;
}

// RunSandboxExec: sandbox_exec.cc

// Bytes used on the sandbox's /workspace disk (its own file system: the
// default limits give it one), or nullopt for a plain directory (a walk of
// a big tree would make `ls` slow).
std::optional<uint64_t> WorkspaceDiskUsed(const std::filesystem::path& workspace) {
  struct stat here, parent;
  if (stat(workspace.c_str(), &here) != 0 || stat(workspace.parent_path().c_str(), &parent) != 0 ||
      here.st_dev == parent.st_dev) {
    return std::nullopt;
  }
  struct statvfs v;
  if (statvfs(workspace.c_str(), &v) != 0) return std::nullopt;
  return static_cast<uint64_t>(v.f_blocks - v.f_bfree) * v.f_frsize;
}

// Each sandbox's idle time (LocalSandboxProvider::IdleMs), asked of the
// daemons in parallel; nullopt where it cannot be told (warm, starting, a
// daemon that does not answer within its timeout).
std::vector<std::optional<int64_t>> IdleTimes(
    local::lifecycle::LocalSandboxProvider& provider,
    const std::vector<local::lifecycle::SandboxMeta>& list) {
  std::vector<std::optional<int64_t>> out(list.size());
  std::vector<std::thread> askers;
  std::atomic<size_t> next{0};
  const size_t threads = std::min<size_t>(8, list.size());
  for (size_t t = 0; t < threads; ++t) {
    askers.emplace_back([&] {
      for (size_t i; (i = next++) < list.size();) {
        const auto& m = list[i];
        if (m.state != "claimed" || (!m.ready && m.mode == "running")) continue;
        if (auto idle = provider.IdleMs(m)) out[i] = *idle;
      }
    });
  }
  for (auto& t : askers) t.join();
  return out;
}

int RunSandboxLs(const SandboxLsArgs& args) {
  if (args.cluster.k8s()) return RunK8sSandboxLs(args);
  if (auto st = CheckSettingsFor(args.cluster.provider, args.cluster.settings); !st) {
    return ReportError(st.error());
  }
  auto selector = Selector::Parse(args.selector);
  if (!selector) return ReportError(selector.error());
  auto provider = MakeProvider();
  if (!provider) return ReportError(provider.error());
  auto list = (*provider)->ListMeta(*selector);
  if (!list) return ReportError(list.error());
  int64_t now = NowMs();
  auto idle = IdleTimes(**provider, *list);
  if (args.json) {
    json::array arr;
    for (size_t i = 0; i < list->size(); ++i) {
      const auto& m = (*list)[i];
      json::object o = m.ToJson();
      if (auto used = WorkspaceDiskUsed((*provider)->store().Paths(m.id).workspace)) {
        o["disk_used_bytes"] = *used;
      }
      if (idle[i]) o["idle_ms"] = *idle[i];
      arr.emplace_back(std::move(o));
    }
    std::cout << ToJson(arr) << std::endl;
    return kExitOk;
  }
  if (args.quiet) {
    for (const auto& m : *list) std::cout << m.id << "\n";
    return kExitOk;
  }
  std::string out =
      fmt::format("{:<16} {:<9} {:<6} {:<6} {:<8} {:<8} {:>8} {:<16} {}\n", "ID", "STATE", "AGE",
                  "IDLE", "EXPIRES", "NETWORK", "DISK", "NAME", "LABELS");
  for (size_t i = 0; i < list->size(); ++i) {
    const auto& m = (*list)[i];
    std::string state = DisplayState(m, now);
    std::string expires = m.expires_at_ms ? "in " + FormatAge(*m.expires_at_ms - now) : "never";
    // meta.json is not trusted either: one line per sandbox, whatever it holds.
    auto used = WorkspaceDiskUsed((*provider)->store().Paths(m.id).workspace);
    std::string idle_text = !idle[i] ? "-" : *idle[i] == 0 ? "busy" : FormatAge(*idle[i]);
    out += fmt::format(
        "{:<16} {:<9} {:<6} {:<6} {:<8} {:<8} {:>8} {:<16} {}\n", SanitizeLineForTerminal(m.id),
        SanitizeLineForTerminal(state), FormatAge(now - m.created_at_ms), idle_text, expires,
        SanitizeLineForTerminal(m.network), used ? local::lifecycle::FormatBytes(*used) : "-",
        m.name.empty() ? "-" : m.name, LabelsText(m.labels));
  }
  std::cout << out << std::flush;
  return kExitOk;
}

int RunSandboxInspect(const SandboxInspectArgs& args) {
  const ProviderRegistration* by_form = ProviderRegistry::Global().ForId(args.id);
  if (args.cluster.k8s() && by_form != nullptr && by_form->name != "k8s") {
    return ReportError(
        Error(ErrorCode::kInvalidArgument,
              fmt::format("--provider k8s: '{}' is a {} sandbox's id (Kubernetes ids are "
                          "NAMESPACE/CLAIM): deepbox sandbox inspect {}",
                          SanitizeLineForTerminal(args.id), by_form->name,
                          SanitizeLineForTerminal(args.id))));
  }
  if (args.cluster.k8s() || (by_form != nullptr && by_form->name == "k8s")) {
    return RunK8sSandboxInspect(args);
  }
  if (auto st = CheckSettingsFor(args.cluster.provider, args.cluster.settings); !st) {
    return ReportError(st.error());
  }
  auto provider = MakeProvider();
  if (!provider) return ReportError(provider.error());
  // Only this user's state directory is read: another user's sandboxes are
  // not there to be found.
  auto meta = (*provider)->Get(args.id);
  if (!meta) {
    Error e = meta.error();
    if (e.code == ErrorCode::kNotFound && args.id.find('/') == std::string::npos &&
        !args.id.starts_with("sb-")) {
      e.message += fmt::format(
          "; for a Kubernetes claim of that name: deepbox sandbox inspect --provider k8s {}",
          args.id);
    }
    return ReportError(e);
  }
  const SandboxMeta& m = *meta;
  int64_t now = NowMs();
  std::string socket = (*provider)->store().Paths(m.id).socket;
  if (args.json) {
    // `sandbox ls --json`'s record, plus the common fields of every
    // provider's inspect: a local daemon is its Unix socket, in this user's
    // own state directory (0700), and takes no token.
    json::object o = m.ToJson();
    o["provider"] = "local";
    o["status"] = DisplayState(m, now);
    o["socket"] = socket;
    o["url"] = nullptr;
    o["token"] = nullptr;
    o["headers"] = json::object();
    o["owner"] = true;
    if (m.expires_at_ms) {
      o["ttl_remaining_seconds"] = std::max<int64_t>(0, (*m.expires_at_ms - now) / 1000);
    } else {
      o["ttl_remaining_seconds"] = nullptr;
    }
    if (auto used = WorkspaceDiskUsed((*provider)->store().Paths(m.id).workspace)) {
      o["disk_used_bytes"] = *used;
    }
    std::cout << ToJson(o) << std::endl;
    return kExitOk;
  }
  auto line = [](std::string_view key, std::string_view value) {
    return fmt::format("{:<10} {}\n", key, value.empty() ? "-" : SanitizeLineForTerminal(value));
  };
  std::string out;
  out += line("ID:", m.id);
  out += line("Name:", m.name);
  out += line("Provider:", "local");
  out += line("State:", DisplayState(m, now));
  out += line("Image:", m.image.empty() ? (m.rootfs.empty() ? "the host's system directories"
                                                            : "rootfs " + m.rootfs)
                                        : m.image.name);
  out += line("Network:", m.network);
  out += line("Limits:", m.limits.Describe());
  out += line("Labels:", LabelsText(m.labels));
  out += line("Created:",
              FormatRfc3339Ms(m.created_at_ms) + " (" + FormatAge(now - m.created_at_ms) + " ago)");
  out += line("Expires:", m.expires_at_ms ? FormatRfc3339Ms(*m.expires_at_ms) + " (in " +
                                                FormatAge(*m.expires_at_ms - now) + ")"
                                          : "never");
  out += line("Pool:", m.pool);
  out += line("Daemon:", "unix:" + socket);
  std::cout << out << std::flush;
  return kExitOk;
}

int RunSandboxRm(const SandboxRmArgs& args) {
  if (args.ids.empty() == args.selector.empty()) {
    return ReportError(
        Error(ErrorCode::kInvalidArgument, "give sandbox ids or --selector K=V (not both)"));
  }
  if (args.cluster.k8s()) return RunK8sSandboxRm(args);
  if (auto st = CheckSettingsFor(args.cluster.provider, args.cluster.settings); !st) {
    return ReportError(st.error());
  }
  auto provider = MakeProvider();
  if (!provider) return ReportError(provider.error());
  if (!args.selector.empty()) {
    auto selector = Selector::Parse(args.selector);
    if (!selector) return ReportError(selector.error());
    auto ids = (*provider)->DeleteMatching(*selector);
    if (!ids) return ReportError(ids.error());
    for (const auto& id : *ids) std::cout << id << "\n";
    std::cout << std::flush;
    return kExitOk;
  }
  int code = kExitOk;
  for (const auto& id : args.ids) {
    auto st = (*provider)->Delete(id);
    if (!st) {
      int c = ReportError(st.error());
      if (code == kExitOk || c == kExitError) code = c;
      continue;
    }
    std::cout << id << std::endl;
  }
  return code;
}

}  // namespace deepbox::cli
