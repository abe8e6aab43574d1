// Exec round-trip latency of deepbox-sandboxd's process library.
//   sandboxd_proc_bench --benchmark_counters_tabular=true
// Each benchmark reports p50/p90/p99 per-run latency (µs) as counters.
#include <benchmark/benchmark.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "sandboxd/proc/reaper.h"
#include "sandboxd/proc/runner.h"
#include "sandboxd/proc/spawn.h"

extern char** environ;

namespace deepbox::sandboxd::proc {
namespace {

using Clock = std::chrono::steady_clock;

template <typename F>
void Measure(benchmark::State& state, F&& once) {
  std::vector<double> us;
  us.reserve(static_cast<size_t>(state.max_iterations));
  for (auto _ : state) {
    const auto t0 = Clock::now();
    if (!once()) {
      state.SkipWithError("run failed");
      return;
    }
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  std::sort(us.begin(), us.end());
  auto pct = [&](double p) {
    return us[static_cast<size_t>(p * static_cast<double>(us.size() - 1))];
  };
  state.counters["p50_us"] = pct(0.50);
  state.counters["p90_us"] = pct(0.90);
  state.counters["p99_us"] = pct(0.99);
}

// Run-to-completion of `true` with capture, as the exec endpoint does it.
void BM_RunTrue(benchmark::State& state) {
  const CommandSpec spec = CommandSpec::Argv({"true"});
  Measure(state, [&] { return KindOf(Run(spec).outcome) == OutcomeKind::kExited; });
}
BENCHMARK(BM_RunTrue)->Iterations(1000)->Unit(benchmark::kMicrosecond);

// The same through `/bin/sh -c true` (shell-string commands).
void BM_RunShellTrue(benchmark::State& state) {
  const CommandSpec spec = CommandSpec::Shell("true");
  Measure(state, [&] { return KindOf(Run(spec).outcome) == OutcomeKind::kExited; });
}
BENCHMARK(BM_RunShellTrue)->Iterations(1000)->Unit(benchmark::kMicrosecond);

// Run with the daemon's configuration: subreaper + Reaper thread active.
void BM_RunTrueWithReaper(benchmark::State& state) {
  (void)BecomeSubreaper();
  auto reaper = Reaper::Start();
  if (!reaper) {
    state.SkipWithError("reaper");
    return;
  }
  const CommandSpec spec = CommandSpec::Argv({"true"});
  Measure(state, [&] { return KindOf(Run(spec).outcome) == OutcomeKind::kExited; });
}
BENCHMARK(BM_RunTrueWithReaper)->Iterations(1000)->Unit(benchmark::kMicrosecond);

// Spawn + Wait only (no pipes, no poll loop).
void BM_SpawnWaitTrue(benchmark::State& state) {
  SpawnRequest request;
  request.argv = {"/bin/true"};
  Measure(state, [&] {
    auto child = Spawn(request);
    return child && child->Wait().has_value();
  });
}
BENCHMARK(BM_SpawnWaitTrue)->Iterations(1000)->Unit(benchmark::kMicrosecond);

// Baseline: glibc posix_spawn + waitpid (no group, no fds, no reporting).
void BM_PosixSpawnBaseline(benchmark::State& state) {
  char arg0[] = "/bin/true";
  char* argv[] = {arg0, nullptr};
  Measure(state, [&] {
    pid_t pid;
    if (posix_spawn(&pid, "/bin/true", nullptr, nullptr, argv, environ) != 0) return false;
    int status;
    return waitpid(pid, &status, 0) == pid;
  });
}
BENCHMARK(BM_PosixSpawnBaseline)->Iterations(1000)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace deepbox::sandboxd::proc

BENCHMARK_MAIN();
