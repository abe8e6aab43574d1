// `deepbox sandbox pause|suspend|resume|snapshot|fork`: the durable-workspace
// verbs of the provider interface (sandbox/provider.h), for any provider: each
// id goes to the provider whose id form it has (the registry), which says
// plainly when it cannot do the verb. `snapshot ls|rm` work on the snapshot
// store every provider shares (sandbox/snapshot_store.h).
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "cli/commands.h"
#include "common/byte_size.h"
#include "common/json.h"
#include "common/strings.h"
#include "common/terminal_text.h"
#include "local/egress_log.h"
#include "local/lifecycle/selector.h"
#include "local/lifecycle/state.h"
#include "sandbox/network_policy.h"
#include "sandbox/registry.h"
#include "sandbox/snapshot_store.h"

namespace deepbox::cli {
namespace {

// Settings of a provider from the flags given (the rest come from the
// provider's environment variables and defaults).
ProviderRequest RequestFor(const ProviderRegistration& provider, const ClusterFlags& flags) {
  ProviderRequest request;
  request.one_shot = true;
  request.settings = flags.settings.For(provider);
  return request;
}

// The provider of sandbox `id` (by its form), or the error already reported.
// The provider of an id's form, or the local one for a name (names are
// local sandboxes' so far).
const ProviderRegistration* OwnerOf(const std::string& id) {
  if (const auto* owner = ProviderRegistry::Global().ForId(id)) return owner;
  if (local::lifecycle::Store::ValidName(id)) return ProviderRegistry::Global().Lookup("local");
  return nullptr;
}

Result<std::unique_ptr<SandboxProvider>> ProviderOf(const std::string& id,
                                                    const ClusterFlags& flags, int* code) {
  const ProviderRegistration* owner = OwnerOf(id);
  if (owner == nullptr) {
    Error e(ErrorCode::kInvalidArgument,
            fmt::format("'{}' is no sandbox id (local: sb-..., Kubernetes: NAMESPACE/CLAIM; see "
                        "`deepbox sandbox ls`)",
                        SanitizeLineForTerminal(id)));
    *code = ReportError(e);
    return tl::unexpected(e);
  }
  auto made = ProviderRegistry::Global().Make(owner->name, RequestFor(*owner, flags));
  if (!made) *code = ReportError(made.error());
  return made;
}

// The provider of sandbox `id` for a verb given --provider/--namespace/...
// flags: the id's own (its form), which --provider must not contradict.
Result<std::unique_ptr<SandboxProvider>> ProviderOfFlagged(const std::string& id,
                                                           const ClusterFlags& flags, int* code) {
  const ProviderRegistration* owner = OwnerOf(id);
  if (owner != nullptr && flags.k8s() && owner->name != "k8s") {
    Error e(ErrorCode::kInvalidArgument,
            fmt::format("--provider k8s: '{}' is a {} sandbox id (Kubernetes ids are "
                        "NAMESPACE/CLAIM)",
                        SanitizeLineForTerminal(id), owner->name));
    *code = ReportError(e);
    return tl::unexpected(e);
  }
  return ProviderOf(id, flags, code);
}

// Snapshots of every provider are in one store (sandbox/snapshot_store.h):
// listing and removing them needs no provider.
Result<SnapshotStore> OpenSnapshots(int* code) {
  auto store = SnapshotStore::Open();
  if (!store) *code = ReportError(store.error());
  return store;
}

std::string SizeCell(int64_t bytes) {
  return bytes < 0 ? std::string("?") : FormatBytes(static_cast<uint64_t>(bytes));
}

}  // namespace

int RunSandboxSnapshot(const SnapshotArgs& args) {
  int code = kExitOk;
  auto provider = ProviderOfFlagged(args.id, args.cluster, &code);
  if (!provider) return code;
  auto s = (*provider)->Snapshot(args.id, SnapshotOptions{args.name});
  if (!s) return ReportError(s.error());
  if (!s->note.empty()) {
    std::fprintf(stderr, "deepbox: note: %s\n", SanitizeLineForTerminal(s->note).c_str());
  }
  if (args.json) {
    std::cout << SnapshotInfoJson(*s) << std::endl;
  } else {
    std::cout << s->name << std::endl;
  }
  return kExitOk;
}

int RunSnapshotLs(const SnapshotLsArgs& args) {
  int code = kExitOk;
  auto store = OpenSnapshots(&code);
  if (!store) return code;
  auto list = store->List();
  if (!list) return ReportError(list.error());
  if (args.json) {
    std::string arr = "[";
    for (const auto& s : *list) arr += (arr.size() > 1 ? "," : "") + SnapshotInfoJson(s);
    std::cout << arr << "]" << std::endl;
    return kExitOk;
  }
  // Columns as wide as their widest cell: k8s ids (NAMESPACE/CLAIM) are long.
  std::vector<std::vector<std::string>> rows = {
      {"NAME", "PROVIDER", "FROM", "ON DISK", "FILES", "CREATED"}};
  uint64_t total = 0;
  for (const auto& s : *list) {
    total += s.size_bytes > 0 ? static_cast<uint64_t>(s.size_bytes) : 0;
    rows.push_back({SanitizeLineForTerminal(s.name), SanitizeLineForTerminal(s.provider),
                    SanitizeLineForTerminal(s.source_id), SizeCell(s.size_bytes),
                    SizeCell(s.file_bytes), SanitizeLineForTerminal(s.created_at)});
  }
  std::vector<size_t> widths(rows[0].size(), 0);
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size(); ++i) {
      const bool number = i == 3 || i == 4;  // sizes align right
      if (i + 1 == row.size()) {
        out += row[i];
      } else if (number) {
        out += fmt::format("{:>{}}  ", row[i], widths[i]);
      } else {
        out += fmt::format("{:<{}} ", row[i], widths[i]);
      }
    }
    out += '\n';
  }
  out += fmt::format("{} snapshot(s), {} on disk (in {}, quota {})\n", list->size(),
                     FormatBytes(total), SanitizeLineForTerminal(store->dir().string()),
                     FormatBytes(store->quota_bytes()));
  std::cout << out << std::flush;
  return kExitOk;
}

int RunSnapshotRm(const SnapshotRmArgs& args) {
  int code = kExitOk;
  auto store = OpenSnapshots(&code);
  if (!store) return code;
  for (const auto& name : args.names) {
    if (auto st = store->Delete(name); !st) {
      code = ReportError(st.error());
      continue;
    }
    std::printf("removed %s\n", name.c_str());
  }
  return code;
}

int RunSandboxFork(const SandboxForkArgs& args) {
  int code = kExitOk;
  auto provider = ProviderOfFlagged(args.id, args.cluster, &code);
  if (!provider) return code;
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
  claim.network = args.network;
  auto made = (*provider)->Fork(args.id, args.count, claim);
  if (!made) return ReportError(made.error());
  if (args.json) {
    json::array arr;
    for (const auto& info : *made) arr.emplace_back(JsonString(info.id));
    std::cout << ToJson(arr) << std::endl;
  } else {
    for (const auto& info : *made) std::cout << info.id << "\n";
    std::cout << std::flush;
  }
  return kExitOk;
}

int RunSandboxMode(const SandboxModeArgs& args) {
  const char* verb = args.verb == SandboxModeVerb::kPause     ? "paused"
                     : args.verb == SandboxModeVerb::kSuspend ? "suspended"
                                                              : "resumed";
  if (args.ids.empty()) {
    return ReportError(Error(ErrorCode::kInvalidArgument, "give one or more sandbox ids"));
  }
  // One provider object per kind, made on first use.
  std::map<std::string, std::unique_ptr<SandboxProvider>> providers;
  int code = kExitOk;
  for (const auto& id : args.ids) {
    const ProviderRegistration* owner = OwnerOf(id);
    if (owner == nullptr) {
      code = ReportError(Error(ErrorCode::kInvalidArgument,
                               fmt::format("'{}' is no sandbox id (local: sb-..., Kubernetes: "
                                           "NAMESPACE/CLAIM; see `deepbox sandbox ls`)",
                                           SanitizeLineForTerminal(id))));
      continue;
    }
    if (args.cluster.k8s() && owner->name != "k8s") {
      code = ReportError(Error(ErrorCode::kInvalidArgument,
                               fmt::format("--provider k8s: '{}' is a {} sandbox id (Kubernetes "
                                           "ids are NAMESPACE/CLAIM)",
                                           SanitizeLineForTerminal(id), owner->name)));
      continue;
    }
    auto& provider = providers[owner->name];
    if (!provider) {
      auto made = ProviderRegistry::Global().Make(owner->name, RequestFor(*owner, args.cluster));
      if (!made) {
        code = ReportError(made.error());
        continue;
      }
      provider = std::move(*made);
    }
    Status st = args.verb == SandboxModeVerb::kPause ? provider->Pause(id)
                : args.verb == SandboxModeVerb::kSuspend
                    ? provider->Suspend(id, SuspendOptions{args.force})
                    : provider->Resume(id);
    if (!st) {
      code = ReportError(st.error());
      continue;
    }
    std::printf("%s %s\n", verb, id.c_str());
  }
  return code;
}

Result<std::string> EditAllowlist(const std::string& current, const std::string& edit) {
  std::vector<std::string> names;
  if (current != "none") {
    auto policy = ParseNetworkPolicy(current);
    if (!policy || policy->mode != NetworkMode::kAllow) {
      return MakeError(ErrorCode::kConflict,
                       fmt::format("the sandbox's network is '{}': --allow edits an allowlist "
                                   "(a sandbox created with --network allow=...)",
                                   current));
    }
    names = policy->allow;
  }
  for (std::string_view field : Split(edit, ',')) {
    std::string entry(field);
    if (entry.empty()) continue;
    bool remove = entry[0] == '-';
    if (entry[0] == '-' || entry[0] == '+') entry.erase(0, 1);
    auto checked = ParseNetworkPolicy("allow=" + entry);
    if (!checked) return tl::unexpected(checked.error());
    entry = checked->allow[0];
    auto at = std::find(names.begin(), names.end(), entry);
    if (remove) {
      if (at == names.end()) {
        return MakeError(ErrorCode::kInvalidArgument,
                         fmt::format("--allow -{}: not on the allowlist ({})", entry, current));
      }
      names.erase(at);
    } else if (at == names.end()) {
      names.push_back(entry);
    }
  }
  if (names.empty()) return std::string("none");
  NetworkPolicy policy;
  policy.mode = NetworkMode::kAllow;
  policy.allow = names;
  return policy.ToString();
}

int RunSandboxNetwork(const SandboxNetworkArgs& args) {
  if (args.allow_edit.empty() == args.mode.empty()) {
    return ReportError(Error(ErrorCode::kInvalidArgument,
                             "give one of --allow +NAME,-NAME or --mode none|allow=NAMES"));
  }
  int code = kExitOk;
  auto provider = ProviderOfFlagged(args.id, args.cluster, &code);
  if (!provider) return code;
  std::string want = args.mode;
  if (!args.allow_edit.empty()) {
    auto info = (*provider)->Inspect(args.id);
    if (!info) return ReportError(info.error());
    auto edited = EditAllowlist(info->network, args.allow_edit);
    if (!edited) return ReportError(edited.error());
    want = *edited;
  }
  auto applied = (*provider)->SetNetwork(args.id, want);
  if (!applied) return ReportError(applied.error());
  std::cout << *applied << std::endl;
  return kExitOk;
}

int RunSandboxLogs(const SandboxLogsArgs& args) {
  if (!args.network) {
    return ReportError(Error(ErrorCode::kInvalidArgument,
                             "say which log: --network (every connection and request of the "
                             "sandbox's egress proxy, and its policy changes)"));
  }
  int code = kExitOk;
  auto provider = ProviderOfFlagged(args.id, args.cluster, &code);
  if (!provider) return code;
  auto lines = (*provider)->NetworkLog(args.id, args.tail);
  if (!lines) return ReportError(lines.error());
  for (const auto& line : *lines) {
    if (args.json) {
      std::cout << line << '\n';
      continue;
    }
    auto obj = ParseJsonObject(line);
    if (!obj) continue;
    auto event = local::EgressEvent::FromJson(*obj);
    if (!event) continue;
    std::cout << SanitizeLineForTerminal(event->ToText()) << '\n';
  }
  std::cout.flush();
  return kExitOk;
}

}  // namespace deepbox::cli
