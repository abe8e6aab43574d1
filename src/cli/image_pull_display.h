// What a pull shows (`deepbox image pull`, and the implicit pull of a
// sandbox's --image): JSON events, a live status line on a terminal, or one
// line per layer for logs, on stderr (JSON on stdout).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>

#include "common/error.h"
#include "oci/image_pull.h"

namespace deepbox::cli {

class PullDisplay {
 public:
  PullDisplay(bool json, bool terminal) : json_(json), terminal_(terminal) {}
  void On(const oci::PullEvent& e);
  void Finish();
  double elapsed() const;
  uint64_t total_size() const { return total_size_; }

 private:
  using Clock = std::chrono::steady_clock;
  struct LayerState {
    uint64_t size = 0;
    uint64_t done = 0;
    Clock::time_point started;
  };
  void Line(const std::string& text);
  void Status(const oci::PullEvent& e);

  bool json_;
  bool terminal_;
  bool status_shown_ = false;
  Clock::time_point started_ = Clock::now();
  Clock::time_point last_status_;
  std::map<size_t, LayerState> layers_;
  uint64_t total_size_ = 0;
  uint64_t total_done_ = 0;
};

// A sandbox's image pulled before the sandbox is created, with the display
// above on stderr (nothing when the cache has it). INVALID_ARGUMENT for a
// malformed reference.
Status PullImageForSandbox(const std::string& reference);

}  // namespace deepbox::cli
