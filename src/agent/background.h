// Detached background work that may outlive the call that started it (a
// glob abandoned after its 10 s deadline keeps running until the sandbox
// answers). Owners of the resources such work touches (DeepAgent, which
// holds the sandbox reference) wait for it before going away.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>

namespace deepbox::agent {

// Runs fn on a detached thread, counted until it returns.
void RunDetached(std::function<void()> fn);
// Blocks until no detached work is running or `timeout` passed; true if idle.
bool WaitForDetached(std::chrono::milliseconds timeout);

// Runs fn on a detached thread and waits up to `timeout` for its value.
// nullopt on timeout (the work keeps running in the background).
template <typename T>
std::optional<T> CallWithTimeout(std::function<T()> fn, std::chrono::milliseconds timeout);

}  // namespace deepbox::agent

#include <condition_variable>
#include <mutex>

namespace deepbox::agent {

template <typename T>
std::optional<T> CallWithTimeout(std::function<T()> fn, std::chrono::milliseconds timeout) {
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    std::optional<T> value;
  };
  auto shared = std::make_shared<Shared>();
  RunDetached([shared, fn = std::move(fn)]() mutable {
    T v = fn();
    std::lock_guard<std::mutex> lock(shared->mu);
    shared->value.emplace(std::move(v));
    shared->cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(shared->mu);
  if (!shared->cv.wait_for(lock, timeout, [&] { return shared->value.has_value(); })) {
    return std::nullopt;
  }
  return std::move(shared->value);
}

}  // namespace deepbox::agent
