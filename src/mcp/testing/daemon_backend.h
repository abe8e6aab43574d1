// Test support: a SandboxBackend whose sandboxes are real deepbox-sandboxd
// daemons (ScopedSandboxd, no isolation), named like local sandboxes. As the
// local provider does, it reports a sandbox whose daemon died (Kill) as gone.
#pragma once

#include <fmt/format.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "local/lifecycle/selector.h"
#include "mcp/sandboxes.h"
#include "sandbox/testing/scoped_sandboxd.h"

namespace deepbox::mcp::testing {

class DaemonBackend : public SandboxBackend {
 public:
  std::string name() const override { return "local"; }
  bool Owns(const std::string& id) const override { return id.rfind("sb-", 0) == 0; }
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
  Status Delete(const std::string& id) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!daemons_.erase(id)) {
      return MakeError(ErrorCode::kNotFound, fmt::format("no sandbox '{}'", id));
    }
    return {};
  }
  Result<std::shared_ptr<Sandbox>> Connect(const std::string& id) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = daemons_.find(id);
    if (it == daemons_.end()) {
      return MakeError(ErrorCode::kNotFound, fmt::format("no sandbox '{}'", id));
    }
    if (it->second.first->pid() <= 0) {
      return MakeError(ErrorCode::kNotFound,
                       fmt::format("sandbox '{}' is gone: its daemon was killed", id));
    }
    auto c = it->second.first->Connect();
    if (!c) return tl::unexpected(c.error());
    return std::shared_ptr<Sandbox>(std::move(*c));
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
  std::mutex mu_;
  uint64_t counter_ = 0;
  int created_ = 0;
  ClaimOptions last_options_;
  std::map<std::string, std::pair<std::unique_ptr<deepbox::testing::ScopedSandboxd>, SandboxInfo>>
      daemons_;
};

}  // namespace deepbox::mcp::testing
