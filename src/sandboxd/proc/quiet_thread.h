// A library thread that never takes the daemon's process-directed signals
// (SIGTERM, SIGINT, SIGCHLD, ...): it starts with every signal blocked, so
// they reach the thread that waits for them.
#pragma once

#include <pthread.h>
#include <signal.h>

#include <thread>
#include <utility>

namespace deepbox::sandboxd::proc {

template <typename F>
std::thread StartQuietThread(F&& fn) {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  std::thread thread(std::forward<F>(fn));
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return thread;
}

}  // namespace deepbox::sandboxd::proc
