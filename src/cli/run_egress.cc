#include "cli/run_egress.h"

namespace deepbox::run {

namespace {
// The log is read from its end: at most this many lines per poll.
constexpr size_t kTailLines = 2000;
}  // namespace

std::string EmitNewEgressLines(const std::vector<EgressLogLine>& log, const std::string& last,
                               const std::function<void(const json::object&)>& emit) {
  size_t start = 0;
  if (!last.empty()) {
    for (size_t i = log.size(); i-- > 0;) {
      if (log[i] == last) {
        start = i + 1;
        break;
      }
    }
  }
  std::string now = last;
  for (size_t i = start; i < log.size(); ++i) {
    auto obj = ParseJsonObject(log[i]);
    now = log[i];
    if (!obj) continue;
    json::object event;
    event["type"] = "egress";
    for (const auto& [k, v] : *obj) event[k] = v;
    emit(event);
  }
  return now;
}

EgressFollower::EgressFollower(std::shared_ptr<SandboxProvider> provider, std::string id,
                               std::function<void(const json::object&)> emit,
                               std::chrono::milliseconds period)
    : provider_(std::move(provider)), id_(std::move(id)), emit_(std::move(emit)), period_(period) {
  thread_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      lock.unlock();
      bool ok = Poll();
      lock.lock();
      if (!ok) return;
      cv_.wait_for(lock, period_, [this] { return stop_; });
    }
  });
}

EgressFollower::~EgressFollower() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  if (!unsupported_) (void)Poll();  // what came since the last poll
}

bool EgressFollower::Poll() {
  auto lines = provider_->NetworkLog(id_, kTailLines);
  if (!lines) {
    if (lines.error().code == ErrorCode::kUnimplemented) unsupported_ = true;
    return !unsupported_;  // a transient error (the sandbox restarting): try again
  }
  last_ = EmitNewEgressLines(*lines, last_, emit_);
  return true;
}

}  // namespace deepbox::run
