// The sandbox side of `deepbox run`: building the provider the flags ask for
// (local or k8s), a lease that any thread may release, a way to delete the
// sandbox from the signal thread while the agent still uses it, and a
// Sandbox decorator that notices when the sandbox went away under the agent.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "cli/run_config.h"
#include "common/error.h"
#include "sandbox/forwarding_sandbox.h"
#include "sandbox/sandbox.h"

namespace deepbox::run {

// A provider plus what the CLI needs beyond the SandboxProvider interface.
struct RunProvider {
  std::unique_ptr<SandboxProvider> provider;
  std::string description;  // "local sandbox", "k8s warm pool default/deepagents-warmpool"
  // Deletes the sandbox of `claim_labels` / `id` out of band (thread-safe; does
  // not touch the lease or its Sandbox object, which the agent may be using).
  std::function<Status(const std::string& id)> force_delete;
  // Why the sandbox `id` is unusable now, or nullopt if it still answers.
  std::function<std::optional<Error>(const std::string& id, Sandbox& sandbox)> probe;
  // The limits sandbox `id` runs with, for the run's header ("" = nothing to say):
  // "limits: memory 2 GiB, ..." plus what this host did not enforce.
  std::function<std::string(const std::string& id)> limits_line;
  // Watches sandbox `id` while the run uses it: `on_gone` (from another
  // thread, at most once) as soon as it is deleted from outside or expires.
  // The returned function stops the watch (before the run deletes it
  // itself). Null where the provider has nothing to watch.
  std::function<std::function<void()>(const std::string& id,
                                      std::function<void(const Error&)> on_gone)>
      watch;
  // A lease on an existing sandbox (--sandbox-id) that leaves it running when
  // released; null where the provider cannot attach.
  std::function<Result<std::unique_ptr<SandboxLease>>(const std::string& id)> attach;
};

// The label that identifies one `deepbox run` invocation's claim.
inline constexpr const char* kRunIdLabel = "deepbox.dev/run";

// `run_id` becomes the kRunIdLabel value (k8s force_delete selects on it).
Result<RunProvider> MakeRunProvider(const RunConfig& config, const std::string& run_id);

// A lease that may be released from any thread, at most once.
class LeaseGuard {
 public:
  explicit LeaseGuard(std::unique_ptr<SandboxLease> lease) : lease_(std::move(lease)) {}
  ~LeaseGuard();  // releases unless kept
  LeaseGuard(const LeaseGuard&) = delete;
  LeaseGuard& operator=(const LeaseGuard&) = delete;

  Sandbox& sandbox() { return lease_->sandbox(); }
  Status Release();
  void Keep();
  std::string Describe() const { return lease_->Describe(); }

 private:
  std::mutex mu_;
  std::unique_ptr<SandboxLease> lease_;
  bool done_ = false;
};

// Forwards every call; when one fails in a way that may mean the sandbox is
// gone (unavailable, timeout, internal), asks `probe`, and if the sandbox is
// really gone records why (fatal()) and sets `cancel` so the agent stops.
class WatchedSandbox : public ForwardingSandbox {
 public:
  using Probe = std::function<std::optional<Error>()>;
  WatchedSandbox(Sandbox& inner, Probe probe, std::atomic<bool>* cancel)
      : ForwardingSandbox(inner), probe_(std::move(probe)), cancel_(cancel) {}

  std::optional<Error> fatal() const;
  // The sandbox is known to be gone (a watch saw it deleted): record why and
  // cancel, as a failed call's probe would.
  void MarkGone(const Error& why);

 private:
  void OnError(const Error& e) override;

  Probe probe_;
  std::atomic<bool>* cancel_;
  mutable std::mutex mu_;
  std::optional<Error> fatal_;
};

}  // namespace deepbox::run
