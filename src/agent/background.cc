#include "agent/background.h"

#include <thread>

namespace deepbox::agent {
namespace {

struct Tracker {
  std::mutex mu;
  std::condition_variable cv;
  int running = 0;
};

Tracker& GetTracker() {
  static Tracker* tracker = new Tracker();  // never destroyed: threads may outlive main
  return *tracker;
}

}  // namespace

void RunDetached(std::function<void()> fn) {
  Tracker& t = GetTracker();
  {
    std::lock_guard<std::mutex> lock(t.mu);
    ++t.running;
  }
  std::thread([fn = std::move(fn)]() mutable {
    fn();
    Tracker& tr = GetTracker();
    std::lock_guard<std::mutex> lock(tr.mu);
    --tr.running;
    tr.cv.notify_all();
  }).detach();
}

bool WaitForDetached(std::chrono::milliseconds timeout) {
  Tracker& t = GetTracker();
  std::unique_lock<std::mutex> lock(t.mu);
  return t.cv.wait_for(lock, timeout, [&] { return t.running == 0; });
}

}  // namespace deepbox::agent
