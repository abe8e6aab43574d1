// Test support: a SandboxProvider whose sandboxes are real deepbox-sandboxd
// daemons (ScopedSandboxd, no isolation), named like local sandboxes. As the
// local provider does, it reports a sandbox whose daemon died (Kill) as gone,
// from Attach and (unless set_why_gone(false)) from WhyGone.
#pragma once

#include <fmt/format.h>

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "cli/mcp/sandboxes.h"
#include "local/lifecycle/selector.h"
#include "sandbox/provider.h"
#include "sandbox/testing/scoped_sandboxd.h"

namespace deepbox::mcp::testing {

class DaemonProvider : public SandboxProvider {
 public:
  std::string name() const override { return "local"; }
  bool OwnsId(std::string_view id) const override { return id.rfind("sb-", 0) == 0; }
  bool enforces_network() const override { return true; }

  // The broker only makes lasting sandboxes (Create).
  Result<std::unique_ptr<SandboxLease>> Claim(const ClaimOptions&) override {
    return tl::unexpected(Unimplemented("claim", "a test provider: use Create"));
  }
  Result<SandboxInfo> Create(const ClaimOptions& options) override {
    auto d = deepbox::testing::ScopedSandboxd::Start();
    if (!d) return tl::unexpected(d.error());
    std::lock_guard<std::mutex> lock(mu_);
    SandboxInfo info;
    info.id = fmt::format("sb-{:012x}", ++counter_);
    info.provider = "local";
    info.labels = options.labels;
    info.network = options.network.empty() ? "none" : options.network;
    info.state = "claimed";
    daemons_[info.id] = {std::move(*d), info};
    ++created_;
    last_options_ = options;
    return info;
  }
  Result<std::vector<SandboxInfo>> List(const std::string& selector) override {
    auto sel = local::lifecycle::Selector::Parse(selector);
    if (!sel) return tl::unexpected(sel.error());
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<SandboxInfo> out;
    for (const auto& [id, e] : daemons_) {
      if (sel->Matches(e.second.labels)) out.push_back(e.second);
    }
    return out;
  }
  Result<SandboxInfo> Inspect(const std::string& id) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto gone = GoneLocked(id)) return tl::unexpected(*gone);
    return daemons_.at(id).second;
  }
  Status Delete(const std::string& id) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!daemons_.erase(id)) {
      return MakeError(ErrorCode::kNotFound, fmt::format("no sandbox '{}'", id));
    }
    return {};
  }
  Result<std::unique_ptr<SandboxLease>> Attach(const std::string& id) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto gone = GoneLocked(id)) return tl::unexpected(*gone);
    auto c = daemons_.at(id).first->Connect();
    if (!c) return tl::unexpected(c.error());
    return std::unique_ptr<SandboxLease>(
        new BorrowedLease(std::move(*c), fmt::format("sandbox {}", id)));
  }
  std::optional<Error> WhyGone(const std::string& id) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!why_gone_) return std::nullopt;
    return GoneLocked(id);
  }
  // false: WhyGone cannot tell, as a provider without it (only Attach says).
  void set_why_gone(bool on) {
    std::lock_guard<std::mutex> lock(mu_);
    why_gone_ = on;
  }

  bool Exists(const std::string& id) {
    std::lock_guard<std::mutex> lock(mu_);
    return daemons_.count(id) > 0;
  }
  size_t count() {
    std::lock_guard<std::mutex> lock(mu_);
    return daemons_.size();
  }
  int created() {
    std::lock_guard<std::mutex> lock(mu_);
    return created_;
  }
  ClaimOptions last_options() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_options_;
  }
  deepbox::testing::ScopedSandboxd* daemon(const std::string& id) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = daemons_.find(id);
    return it == daemons_.end() ? nullptr : it->second.first.get();
  }

 private:
  // NOT_FOUND for a sandbox that is not there (never made, deleted) or whose
  // daemon was killed; nullopt while it lives.
  std::optional<Error> GoneLocked(const std::string& id) const {
    auto it = daemons_.find(id);
    if (it == daemons_.end()) {
      return Error(ErrorCode::kNotFound, fmt::format("no sandbox '{}'", id));
    }
    if (it->second.first->pid() <= 0) {
      return Error(ErrorCode::kNotFound,
                   fmt::format("sandbox '{}' is gone: its daemon was killed", id));
    }
    return std::nullopt;
  }

  std::mutex mu_;
  uint64_t counter_ = 0;
  int created_ = 0;
  bool why_gone_ = true;
  ClaimOptions last_options_;
  std::map<std::string, std::pair<std::unique_ptr<deepbox::testing::ScopedSandboxd>, SandboxInfo>>
      daemons_;
};

}  // namespace deepbox::mcp::testing
