// Launches a process tree inside a fresh sandbox on this machine: the facility
// that ties namespaces, mounts, capabilities, seccomp, cgroups/rlimits and
// networking together (cf. nsjail, sandbox2).
//
// The init process (normally deepbox-sandboxd) runs:
//   * in new user, PID, mount, IPC, UTS, net and cgroup namespaces,
//   * as uid/gid 1000 (mapped to an unprivileged host id, see namespaces.h),
//   * with every capability dropped, no_new_privs, the seccomp deny list,
//   * with only the environment of the spec and only fds 0, 1, 2,
//   * inside a new session (setsid: no controlling terminal to inject into),
//   * in the sandbox's cgroups, with rlimits applied.
// Host-side layout of the runtime dir (created 0700, owned by the launcher's
// user, so no other host user can reach the socket):
//   <runtime_dir>/root  empty mount point for the sandbox's root tmpfs
//   <runtime_dir>/run   0700, the launcher's user; never visible in the sandbox.
//                       With `daemon_listener`, the launcher binds
//                       run/sandboxd.sock and passes the listening fd to init
//                       as fd 3 (see daemon_socket.h: the sandbox cannot
//                       replace or impersonate its daemon).
#pragma once

#include <sys/types.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/unique_fd.h"
#include "local/cgroups.h"
#include "local/child.h"
#include "local/egress_proxy.h"
#include "local/limits.h"
#include "local/network.h"
#include "local/seccomp.h"
#include "local/uplink.h"
#include "local/workspace_disk.h"
#include "sandbox/secrets.h"

namespace deepbox::local {

inline constexpr const char* kSandboxdPath = "/.deepbox/sandboxd";
// The daemon's --listen argument when the launcher passes its listener.
inline constexpr const char* kSandboxdListen = "fd:3";

struct SandboxSpec {
  std::string id;                               // [A-Za-z0-9_.-]{1,64}: cgroup name
  std::filesystem::path runtime_dir;            // host dir for this sandbox (see above)
  std::filesystem::path workspace_dir;          // host dir bound at /workspace
  std::optional<std::filesystem::path> rootfs;  // nullopt: host system dirs
  // An OCI image's root instead (image_root.h; excludes rootfs): its
  // extracted layer dirs, bottom first, under a writable layer on a tmpfs of
  // limits.tmp_bytes (as /tmp: it goes with the sandbox, or a restart).
  std::vector<std::filesystem::path> image_layers;
  // The daemon with its own libraries (sandboxd_bundle.h), bound read-only
  // under /deepbox: what runs in an image root (argv: SandboxdBundleArgv).
  std::vector<std::pair<std::string, std::string>> sandboxd_bundle;
  std::string sandboxd_bundle_loader;
  std::optional<std::filesystem::path> sandboxd_binary;  // bound at /.deepbox/sandboxd
  std::vector<std::string> argv;  // the init process; argv[0] searched in PATH
  std::vector<std::string> env;   // "KEY=VALUE"; the ONLY environment
  std::string cwd = "/workspace";
  std::string hostname = "sandbox";
  // kPublic falls back to kNone (network_note() says why) when this host can
  // do neither uplink; kAllow (public_network.allow) never falls back: Launch
  // fails instead. The allow mode adds HTTP(S)_PROXY to `env`.
  NetworkMode network = NetworkMode::kNone;
  PublicNetworkConfig public_network;  // kPublic and kAllow
  // Secrets (sandbox/secrets.h): $NAME holds the placeholder; the egress
  // proxy puts the value into HTTPS requests to the secret's hosts. It is
  // started for kPublic too when there are secrets (HTTP(S)_PROXY then point
  // at it; other hosts pass through it unread). A CA made for this sandbox
  // (sandbox_ca.h; its key stays in this process) joins the sandbox's trust
  // (mounts.h: extra_ca_pem, SandboxCaEnv). Needs kPublic or kAllow; with
  // kAllow every secret host must be allowed on port 443.
  std::vector<SecretGrant> secrets;
  std::string secrets_upstream_ca_file;  // the proxy's upstream trust ("" = the system's; tests)
  std::function<void(EgressEvent)> on_egress_event;  // the proxy's events (the egress log)
  // limits.workspace_bytes: an ext4 image <runtime_dir>/workspace.img is mounted on
  // workspace_dir (which must then be empty); its content is deleted with the sandbox.
  Limits limits;
  // The caller already holds limits.workspace_bytes' disk mounted on
  // workspace_dir (a restart over the same workspace, see TakeWorkspaceDisk):
  // it is bound as it is, and it outlives this sandbox.
  bool workspace_disk_mounted = false;
  // Where formatted empty disk images are kept and copied from (see
  // WorkspaceDisk::Create); empty: mkfs.ext4 for each disk.
  std::filesystem::path workspace_disk_templates;
  std::optional<uint32_t> host_id;  // host uid/gid for sandbox 1000 (root only)
  bool proc_subset_pid = false;
  bool die_with_parent = true;  // PR_SET_PDEATHSIG: fires when the launching THREAD exits
  bool use_cgroups = true;
  SeccompOptions seccomp;
  // Bind <runtime_dir>/run/sandboxd.sock on the host and pass the listening fd
  // to init as fd 3 (kDaemonListenFd); init must serve on it ("--listen fd:3").
  bool daemon_listener = false;
  int stdin_fd = -1;  // -1: /dev/null. Not closed by Launch.
  int stdout_fd = -1;
  int stderr_fd = -1;
  std::chrono::milliseconds setup_timeout{10000};
};

// Duration of each setup step (SetupStep order), in nanoseconds.
struct SetupTimings {
  std::array<int64_t, static_cast<size_t>(SetupStep::kCount)> ns{};
  int64_t total_ns = 0;
  // The /workspace disk's own time (take or copy, loop device, mount): it runs
  // beside the rest of kPrepare, which includes only what is left of it.
  int64_t workspace_disk_ns = 0;
  int64_t Get(SetupStep s) const { return ns[static_cast<size_t>(s)]; }
  std::string ToString() const;  // "prepare=0.41ms clone=0.20ms ... total=3.1ms"
};

// The outcome of the sandbox's init process.
struct ExitStatus {
  enum class Kind { kExited, kSignaled };
  Kind kind = Kind::kExited;
  int code = 0;    // kExited
  int signal = 0;  // kSignaled
  bool success() const { return kind == Kind::kExited && code == 0; }
  std::string ToString() const;
};

class SandboxProcess {
 public:
  SandboxProcess() = default;
  SandboxProcess(SandboxProcess&& other) noexcept;
  SandboxProcess& operator=(SandboxProcess&& other) noexcept;
  SandboxProcess(const SandboxProcess&) = delete;
  SandboxProcess& operator=(const SandboxProcess&) = delete;
  // Kills every process, reaps init, removes cgroups, network and runtime dirs.
  ~SandboxProcess();

  pid_t pid() const { return pid_; }  // init, in the host PID namespace
  int pidfd() const { return pidfd_.get(); }
  const SetupTimings& timings() const { return timings_; }
  // What is enforced for THIS sandbox (cgroup + rlimit + tmpfs).
  const LimitSupport& limits() const { return support_; }
  NetworkMode network() const { return network_mode_; }
  // What carries the traffic: none, veth, pasta (public) or proxy (allow).
  Uplink uplink() const { return uplink_; }
  // Allow mode, or secrets: the proxy (counters, SetPolicy); nullptr otherwise.
  const EgressProxy* proxy() const { return proxy_.get(); }
  EgressProxy* mutable_proxy() { return proxy_.get(); }
  // Public mode: what keeps the uplink's own addresses, subnets and gateways
  // refused while they change; nullptr otherwise.
  const HostAddressWatch* host_watch() const { return host_watch_.get(); }
  // Why public mode fell back to none ("" when it did not).
  const std::string& network_note() const { return network_note_; }
  const std::filesystem::path& socket_dir() const { return socket_dir_; }
  // The daemon's socket on the host (daemon_listener), else empty.
  const std::filesystem::path& daemon_socket() const { return daemon_socket_; }
  const std::filesystem::path& runtime_dir() const { return runtime_dir_; }
  // Public mode: the sandbox's address and interface names.
  const std::optional<SlotAddresses>& public_addresses() const { return public_addrs_; }

  // Waits for init to exit (timeout: kTimeout error, init keeps running).
  Result<ExitStatus> Wait(std::optional<std::chrono::milliseconds> timeout = std::nullopt);
  // Non-blocking: nullopt while init runs.
  Result<std::optional<ExitStatus>> TryWait();
  // SIGKILL to init (kills the whole PID namespace) and to every cgroup member.
  Status Kill();
  // Pids of the sandbox's processes in the host PID namespace (cgroup based).
  Result<std::vector<pid_t>> Pids() const;
  // Hands the /workspace disk (if this sandbox made one) to the caller, so
  // that destroying this sandbox keeps the image, its mount and its files:
  // the next Launch over the same workspace sets workspace_disk_mounted.
  std::optional<WorkspaceDisk> TakeWorkspaceDisk();
  // Once the sandbox is up: a spare copy of its /workspace disk's template
  // for the next sandbox (WorkspaceDisk::MakeSpareLikeThis); nothing without one.
  Status MakeWorkspaceDiskSpare() const;

 private:
  friend Result<SandboxProcess> Launch(const SandboxSpec& spec);
  void Destroy();

  pid_t pid_ = -1;
  UniqueFd pidfd_;
  std::optional<ExitStatus> exit_;
  std::optional<SandboxCgroup> cgroup_;
  std::optional<PublicNetwork> net_;
  std::optional<PastaUplink> pasta_;
  std::unique_ptr<HostAddressWatch> host_watch_;  // public mode: keeps the host sets current
  std::unique_ptr<EgressProxy> proxy_;
  bool secrets_proxy_ = false;  // a proxy for secrets beside a public uplink
  Uplink uplink_ = Uplink::kNone;
  std::optional<WorkspaceDisk> disk_;
  std::optional<SlotAddresses> public_addrs_;
  SetupTimings timings_;
  LimitSupport support_;
  NetworkMode network_mode_ = NetworkMode::kNone;
  std::string network_note_;
  std::filesystem::path runtime_dir_;
  std::filesystem::path socket_dir_;
  std::filesystem::path daemon_socket_;
  bool remove_runtime_dir_ = false;
};

Result<SandboxProcess> Launch(const SandboxSpec& spec);

// Host-level report for `deepbox doctor`: what a sandbox launched with every
// limit set would get here (creates and removes a probe cgroup).
LimitSupport ProbeHostLimitSupport();

}  // namespace deepbox::local
