// `deepbox run --json`: the sandbox's egress log (every connection and request
// its proxy allowed or refused, policy changes; local/egress_log.h) as
// "egress" events, followed while the run lasts.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/json.h"
#include "sandbox/provider.h"

namespace deepbox::run {

// Emits the lines of `log` after `last` (the last line emitted before; all
// of them when `last` is not among them: the log rotated, or nothing was
// emitted yet). Returns the new last line. Pure, for tests.
std::string EmitNewEgressLines(const std::vector<EgressLogLine>& log, const std::string& last,
                               const std::function<void(const json::object&)>& emit);

class EgressFollower {
 public:
  // Polls provider->NetworkLog(id) every `period` from a thread of its own
  // and hands each new line to `emit` (as parsed JSON). A provider without
  // an egress log (UNIMPLEMENTED) ends the thread at once.
  EgressFollower(std::shared_ptr<SandboxProvider> provider, std::string id,
                 std::function<void(const json::object&)> emit,
                 std::chrono::milliseconds period = std::chrono::milliseconds(500));
  // One last poll, then the thread ends.
  ~EgressFollower();
  EgressFollower(const EgressFollower&) = delete;
  EgressFollower& operator=(const EgressFollower&) = delete;

 private:
  bool Poll();  // false: no log here
  std::shared_ptr<SandboxProvider> provider_;
  std::string id_;
  std::function<void(const json::object&)> emit_;
  std::chrono::milliseconds period_;
  std::string last_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool unsupported_ = false;
  std::thread thread_;
};

}  // namespace deepbox::run
