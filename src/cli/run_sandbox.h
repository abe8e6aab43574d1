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
class WatchedSandbox : public Sandbox {
 public:
  using Probe = std::function<std::optional<Error>()>;
  WatchedSandbox(Sandbox& inner, Probe probe, std::atomic<bool>* cancel)
      : inner_(inner), probe_(std::move(probe)), cancel_(cancel) {}

  std::optional<Error> fatal() const;
  // The sandbox is known to be gone (a watch saw it deleted): record why and
  // cancel, as a failed call's probe would.
  void MarkGone(const Error& why);

  std::string id() const override { return inner_.id(); }
  std::string root() const override { return inner_.root(); }
  Result<ExecResult> Exec(const ExecRequest& r) override { return Check(inner_.Exec(r)); }
  Result<ExecResult> ExecStream(const ExecRequest& r, const OutputCallback& cb) override {
    return Check(inner_.ExecStream(r, cb));
  }
  Result<FileInfo> Stat(const std::string& p) override { return Check(inner_.Stat(p)); }
  Result<std::vector<FileInfo>> List(const std::string& p) override {
    return Check(inner_.List(p));
  }
  Result<ReadResult> Read(const std::string& p, const ReadOptions& o) override {
    return Check(inner_.Read(p, o));
  }
  Status Write(const std::string& p, std::string_view c, uint32_t mode) override {
    return Check(inner_.Write(p, c, mode));
  }
  Result<EditResult> Edit(const std::string& p, const std::string& o, const std::string& n,
                          bool all) override {
    return Check(inner_.Edit(p, o, n, all));
  }
  Status Mkdir(const std::string& p, bool parents) override {
    return Check(inner_.Mkdir(p, parents));
  }
  Status Move(const std::string& f, const std::string& t, bool overwrite) override {
    return Check(inner_.Move(f, t, overwrite));
  }
  Status Delete(const std::string& p, bool recursive) override {
    return Check(inner_.Delete(p, recursive));
  }
  Result<GlobResult> Glob(const std::string& pattern, const std::string& p, size_t max) override {
    return Check(inner_.Glob(pattern, p, max));
  }
  Result<GrepResult> Grep(const GrepRequest& r) override { return Check(inner_.Grep(r)); }
  Result<std::string> Download(const std::string& p) override { return Check(inner_.Download(p)); }
  Status Upload(const std::string& p, std::string_view c, uint32_t mode) override {
    return Check(inner_.Upload(p, c, mode));
  }

 private:
  template <typename R>
  R Check(R r) {
    if (!r) OnError(r.error());
    return r;
  }
  void OnError(const Error& e);

  Sandbox& inner_;
  Probe probe_;
  std::atomic<bool>* cancel_;
  mutable std::mutex mu_;
  std::optional<Error> fatal_;
};

}  // namespace deepbox::run
