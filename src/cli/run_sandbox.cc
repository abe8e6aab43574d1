#include "cli/run_sandbox.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <thread>
#include <utility>

#include "common/terminal_text.h"
#include "sandbox/registry.h"

namespace deepbox::run {

namespace {

// What the run's provider is made with (run_config.h): the flags given, the
// environment, the config file; on Kubernetes with its setup warnings.
ProviderRequest RequestFor(const RunConfig& config) {
  ProviderRequest request = RunProviderRequest(config);
  if (config.sandbox == "k8s") {
    request.on_warning = [](const std::string& w) {
      std::fprintf(stderr, "deepbox: warning: %s\n", SanitizeLineForTerminal(w).c_str());
    };
  }
  return request;
}

}  // namespace

Result<RunProviders> MakeRunProviders(const RunConfig& config) {
  ProviderRequest request = RequestFor(config);
  RunProviders providers;
  auto provider = ProviderRegistry::Global().Make(config.sandbox, request);
  if (!provider) return tl::unexpected(provider.error());
  providers.provider = std::move(*provider);
  request.on_warning = nullptr;  // said once
  auto side = ProviderRegistry::Global().Make(config.sandbox, request);
  if (!side) return tl::unexpected(side.error());
  providers.side = std::move(*side);
  return providers;
}

std::optional<Error> ProbeSandbox(SandboxProvider& provider, const std::string& id,
                                  Sandbox& sandbox) {
  if (auto gone = provider.WhyGone(id)) return gone;
  auto st = sandbox.Stat(sandbox.root());
  if (st || st.error().code == ErrorCode::kNotFound ||
      st.error().code == ErrorCode::kPermissionDenied) {
    return std::nullopt;
  }
  // It stopped answering: say why once the provider knows (a deletion in
  // progress shows up as gone within moments).
  for (int i = 0; i < 30; ++i) {
    if (auto gone = provider.WhyGone(id)) return gone;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return Error(ErrorCode::kUnavailable,
               fmt::format("sandbox '{}' stopped answering: {}", id, st.error().message));
}

LeaseGuard::~LeaseGuard() { (void)Release(); }

Status LeaseGuard::Release() {
  std::lock_guard<std::mutex> lock(mu_);
  if (done_) return {};
  done_ = true;
  return lease_->Release();
}

void LeaseGuard::Keep() {
  std::lock_guard<std::mutex> lock(mu_);
  if (done_) return;
  done_ = true;
  lease_->Keep();
}

std::optional<Error> WatchedSandbox::fatal() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fatal_;
}

void WatchedSandbox::MarkGone(const Error& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!fatal_) fatal_ = why;
  }
  if (cancel_ != nullptr) cancel_->store(true);
}

void WatchedSandbox::OnError(const Error& e) {
  switch (e.code) {
    case ErrorCode::kUnavailable:
    case ErrorCode::kTimeout:
    case ErrorCode::kInternal:
      break;
    default:
      return;  // an ordinary tool failure (no such file, ...)
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (fatal_) return;
  }
  std::optional<Error> gone = probe_ ? probe_() : std::nullopt;
  if (!gone) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!fatal_) fatal_ = std::move(gone);
  }
  if (cancel_ != nullptr) cancel_->store(true);
}

}  // namespace deepbox::run
