// The implementations behind `deepbox sandbox|pool|doctor`, free of CLI11:
// main.cc fills these structs from the command line and calls Run*, which
// returns the process exit code.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cli/provider_flags.h"
#include "common/error.h"

namespace CLI {
class Option;
}  // namespace CLI

namespace deepbox::cli {

inline constexpr int64_t kDefaultCreateTtlSeconds = 3600;  // as `deepbox run`

// Where `sandbox create|ls|rm` look: the local provider, or SandboxClaims in a
// Kubernetes namespace (`--provider k8s`), and the providers' settings given
// (how to reach a cluster; for create also limits, pools, ...).
struct ClusterFlags {
  std::string provider = "local";  // a registered provider
  ProviderSettingFlags settings;
  bool k8s() const { return provider == "k8s"; }
};

struct SandboxCreateArgs {
  std::vector<std::string> labels;                 // K=V
  int64_t ttl_seconds = kDefaultCreateTtlSeconds;  // 0 = none (with a warning)
  int64_t idle_suspend_seconds = 0;                // 0 = never
  std::string from_snapshot;                       // "" = an empty workspace
  std::string name;                                // "" = none
  std::string network;                             // "" = host default
  std::string rootfs;
  std::string image;                 // --image REF (local: pulled on first use)
  std::vector<std::string> secrets;  // --secret NAME=SOURCE@HOST[,HOST...]
  bool json = false;
  bool cold = false;     // never take a warm sandbox
  ClusterFlags cluster;  // --provider k8s: a SandboxClaim
};
int RunSandboxCreate(const SandboxCreateArgs& args);

// `deepbox sandbox exec` exit status: the command's own, else (documented in
// its --help) kExitUsage for bad arguments, kExitNotFound for a missing or
// expired sandbox, and:
inline constexpr int kExecTimedOut = 124;       // --timeout (or the daemon's default) hit
inline constexpr int kExecDeepboxFailed = 125;  // deepbox itself failed (daemon unreachable, ...)
inline constexpr int kExecCannotRun = 126;      // the command exists but could not be started
inline constexpr int kExecNotFound = 127;       // the command was not found
// 128+N: killed by signal N (137 also when the sandbox killed it).
inline constexpr int kExecOutputClosed = 141;  // 128+SIGPIPE: stdout/stderr closed (`| head`)

struct SandboxExecArgs {
  std::string id;
  std::vector<std::string> command;
  double timeout_seconds = 0;  // 0 = the daemon's default (none with -i/-t)
  std::string cwd;
  std::vector<std::string> env;  // K=V
  bool interactive = false;      // -i: stdin streamed to the command as it arrives
  bool tty = false;              // -t: a pseudo-terminal in the sandbox
};
int RunSandboxExec(const SandboxExecArgs& args);

struct SandboxLsArgs {
  std::string selector;
  ClusterFlags cluster;
  bool json = false;
  bool quiet = false;  // ids only
};
int RunSandboxLs(const SandboxLsArgs& args);

// `deepbox sandbox inspect [--json] ID` (sandbox_command.cc; k8s:
// sandbox_k8s_command.cc): one sandbox's record and how a client reaches its
// daemon. The id's form picks the provider (NAMESPACE/CLAIM: k8s), as does
// --provider k8s (then a bare NAME is a claim of the namespace).
struct SandboxInspectArgs {
  std::string id;
  bool json = false;
  ClusterFlags cluster;
};
int RunSandboxInspect(const SandboxInspectArgs& args);

struct SandboxRmArgs {
  std::vector<std::string> ids;  // k8s: claim names, or NAMESPACE/NAME as `deepbox run` prints
  std::string selector;
  ClusterFlags cluster;
};
int RunSandboxRm(const SandboxRmArgs& args);

// The `--provider k8s` halves (sandbox_k8s_command.cc; only in builds with src/k8s).
int RunK8sSandboxCreate(const SandboxCreateArgs& args);
int RunK8sSandboxLs(const SandboxLsArgs& args);
int RunK8sSandboxInspect(const SandboxInspectArgs& args);
int RunK8sSandboxRm(const SandboxRmArgs& args);

// `deepbox sandbox pause|suspend|resume ID...` (sandbox_lifecycle_command.cc):
// each id's provider (by its form) asked through the lifecycle interface.
enum class SandboxModeVerb { kPause, kSuspend, kResume };
struct SandboxModeArgs {
  SandboxModeVerb verb = SandboxModeVerb::kPause;
  std::vector<std::string> ids;
  ClusterFlags cluster;  // how Kubernetes ids are reached
  bool force = false;    // suspend: even where the files are lost (k8s emptyDir)
};
int RunSandboxMode(const SandboxModeArgs& args);

// `deepbox sandbox network ID --allow +A,-B | --mode none|allow=...`
// (sandbox_lifecycle_command.cc).
struct SandboxNetworkArgs {
  std::string id;
  std::string allow_edit;  // "+a.com,-b.com,c.com" (no sign = add)
  std::string mode;        // "none" | "allow=..." (replaces the policy)
  ClusterFlags cluster;
};
int RunSandboxNetwork(const SandboxNetworkArgs& args);
// The policy `current` ("none" | "allow=...") edited by `edit` (+add, -remove).
Result<std::string> EditAllowlist(const std::string& current, const std::string& edit);

// `deepbox egress-proxy` (egress_proxy_command.cc): the secrets proxy as a
// pod's sidecar.
struct EgressProxyArgs {
  std::string listen = "127.0.0.1:3128";
  std::string network = "public";  // public | allow=NAMES
  std::vector<std::string> secrets;
  std::string share_dir;                 // CA, bundle and placeholders for the agent container
  std::string upstream_ca;               // "" = the system's trust store
  std::vector<std::string> nameservers;  // "" = /etc/resolv.conf's
  std::string log = "-";                 // JSON lines: a file, or "-" for stdout
};
int RunEgressProxy(const EgressProxyArgs& args);

// `deepbox sandbox logs --network ID` (sandbox_lifecycle_command.cc).
struct SandboxLogsArgs {
  std::string id;
  bool network = false;
  bool json = false;  // the JSON lines as stored
  size_t tail = 0;    // the last N (0 = all)
  ClusterFlags cluster;
};
int RunSandboxLogs(const SandboxLogsArgs& args);

// `deepbox sandbox snapshot ID|ls|rm`, `sandbox fork ID -n K`
// (sandbox_lifecycle_command.cc).
struct SnapshotArgs {
  std::string id;    // snapshot ID
  std::string name;  // --name ("" = the provider picks one)
  bool json = false;
  ClusterFlags cluster;  // how Kubernetes ids are reached
};
int RunSandboxSnapshot(const SnapshotArgs& args);
struct SnapshotLsArgs {
  bool json = false;
};
int RunSnapshotLs(const SnapshotLsArgs& args);
struct SnapshotRmArgs {
  std::vector<std::string> names;
};
int RunSnapshotRm(const SnapshotRmArgs& args);
struct SandboxForkArgs {
  std::string id;
  int count = 1;
  std::vector<std::string> labels;
  std::string network;  // "" = the source's
  int64_t ttl_seconds = kDefaultCreateTtlSeconds;
  bool json = false;
  ClusterFlags cluster;  // how Kubernetes ids are reached
};
int RunSandboxFork(const SandboxForkArgs& args);

struct SandboxCpArgs {
  std::string src;
  std::string dst;
};
int RunSandboxCp(const SandboxCpArgs& args);

struct PoolServeArgs {
  std::string name = "default";
  int replicas = 1;
  std::string network;
  std::string rootfs;
  std::string image;
  int parallel = 2;
  ProviderSettingFlags settings;  // the local provider's limits
};
int RunPoolServe(const PoolServeArgs& args);

struct DoctorArgs {
  bool json = false;
  ClusterFlags cluster;  // --provider k8s: also check the cluster's NetworkPolicies
};
int RunDoctor(const DoctorArgs& args);

// `deepbox image pull|ls|rm|prune` (image_command.cc): the local image cache
// of src/oci ($DEEPBOX_IMAGE_DIR, else under the state directory).
struct ImagePullArgs {
  std::string reference;
  std::string registry_ca;  // PEM file trusted on top of the system's CAs
  bool insecure = false;    // plain HTTP and unverified TLS for any registry
  bool json = false;        // one JSON event per line on stdout
};
int RunImagePull(const ImagePullArgs& args);
struct ImageLsArgs {
  bool json = false;
};
int RunImageLs(const ImageLsArgs& args);
struct ImageRmArgs {
  std::string reference;
};
int RunImageRm(const ImageRmArgs& args);
int RunImagePrune();
// `--image` given without a value: the default image (oci/default_image.h).
// Call from the command's callback with the option.
void DefaultImageIfEmpty(const CLI::Option* option, std::string& image);

}  // namespace deepbox::cli
