// The sandbox side of `deepbox run`: the providers the flags ask for, a
// lease that any thread may release, and a Sandbox decorator that notices
// when the sandbox went away under the agent.
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
#include "sandbox/provider.h"
#include "sandbox/sandbox.h"

namespace deepbox::run {

// The run's providers: `provider` claims (or attaches to) the sandbox;
// `side` is a second handle on the same provider for the signal thread, the
// watch and the probes (thread-safe, independent of the lease's).
struct RunProviders {
  std::unique_ptr<SandboxProvider> provider;
  std::shared_ptr<SandboxProvider> side;  // shared: the signal thread's callbacks hold it
};

// The label that identifies one `deepbox run` invocation's claim.
inline constexpr const char* kRunIdLabel = "deepbox.dev/run";

// The providers of config.sandbox, made through the registry (registry.h)
// with the run's resolved settings.
Result<RunProviders> MakeRunProviders(const RunConfig& config);

// Why sandbox `id` is unusable now (a call on it failed), or nullopt if it
// still answers: what its provider knows (deleted, expired), else whether
// it answers a stat of its root; a sandbox that stopped answering is
// UNAVAILABLE once its provider has had a moment to notice a deletion.
std::optional<Error> ProbeSandbox(SandboxProvider& provider, const std::string& id,
                                  Sandbox& sandbox);

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
