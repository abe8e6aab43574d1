// Local sandbox lifecycle benchmark, side by side with bwrap and unshare on the
// same machine in the same run, plus how the cost grows with the number of
// idle sandboxes (scaling). See README.md.
//
//   bench_local_lifecycle [--iterations N] [--warm-replicas N] [--scaling 1,10,100]
//                         [--scaling-samples K] [--density N]
//   bench_local_lifecycle --leaderboard [--leaderboard-iterations N]
//     start-up the way the public ComputeSDK leaderboard measures it (README.md)
//   bench_local_lifecycle --concurrent N [--concurrent-singles K]
//     N creates at once against single creates of the same run (issue 23)
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <latch>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/testing/temp_dir.h"
#include "image_bench.h"
#include "local/lifecycle/provider.h"
#include "local/tree_copy.h"

extern char** environ;

namespace {

using namespace deepbox;
using namespace deepbox::local::lifecycle;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

struct Stats {
  std::string name;
  std::vector<double> ms;
  std::string note;
  double Pct(double p) const {
    if (ms.empty()) return 0;
    std::vector<double> v = ms;
    std::sort(v.begin(), v.end());
    size_t i = static_cast<size_t>(p / 100.0 * static_cast<double>(v.size() - 1) + 0.5);
    return v[std::min(i, v.size() - 1)];
  }
  double Mean() const {
    double s = 0;
    for (double x : ms) s += x;
    return ms.empty() ? 0 : s / static_cast<double>(ms.size());
  }
};

double Since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

bool Executable(const std::string& p) { return access(p.c_str(), X_OK) == 0; }

std::string Which(const std::string& name) {
  for (const char* dir : {"/usr/bin", "/bin", "/usr/sbin", "/sbin", "/usr/local/bin"}) {
    std::string p = std::string(dir) + "/" + name;
    if (Executable(p)) return p;
  }
  return {};
}

// Runs argv to completion, output discarded; returns the exit status or -1.
int RunQuiet(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  std::vector<std::string> copy = args;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid;
  int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return -1;
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::optional<Stats> TimeCommand(const std::string& name, const std::vector<std::string>& args,
                                 int n) {
  if (args.empty() || !Executable(args[0]) || RunQuiet(args) != 0) return std::nullopt;
  Stats s{name, {}, {}};
  for (int i = 0; i < n; ++i) {
    auto t0 = Clock::now();
    if (RunQuiet(args) != 0) return std::nullopt;
    s.ms.push_back(Since(t0));
  }
  return s;
}

uint64_t SmapsField(pid_t pid, const char* field) {
  std::ifstream in(fmt::format("/proc/{}/smaps_rollup", pid));
  std::string line;
  uint64_t kb = 0;
  while (std::getline(in, line)) {
    if (line.rfind(field, 0) == 0) {
      std::istringstream ss(line.substr(std::strlen(field)));
      ss >> kb;
    }
  }
  return kb;
}

std::vector<pid_t> SandboxPids(const SandboxMeta& m) {
  std::vector<pid_t> pids;
  if (m.supervisor.valid()) pids.push_back(m.supervisor.pid);
  for (const auto& cg : m.cgroups) {
    std::ifstream in(cg + "/cgroup.procs");
    pid_t p;
    bool any = false;
    while (in >> p) {
      pids.push_back(p);
      any = true;
    }
    if (any) return pids;
  }
  if (m.init.valid()) pids.push_back(m.init.pid);  // no cgroup: init only
  return pids;
}

uint64_t MemAvailableKb() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t v = 0;
  std::string unit;
  while (in >> key >> v >> unit) {
    if (key == "MemAvailable:") return v;
  }
  return 0;
}

constexpr const char* kUsage = R"(Usage: bench_local_lifecycle [OPTIONS]
Local sandbox lifecycle, side by side with bwrap and unshare in the same run (README.md).

Options (N: a whole number):
  --iterations N              creates and deletes per row (default 50)
  --warm-replicas N           warm pool size for the warm-claim rows (default 4)
  --density N                 idle sandboxes for the density rows (default 100)
  --scaling LIST              idle-sandbox counts for the scaling rows (default 1,10,DENSITY)
  --scaling-samples N         samples per scaling point (default 20)
  --fork-mib N                memory of the fork rows in MiB; 0 skips them (default 1024)
  --image-density N           idle image sandboxes for the image rows; -1 skips them (default 100)
  --leaderboard               only start-up the way the ComputeSDK leaderboard measures it
  --leaderboard-iterations N  its samples (default 100)
  --concurrent N              only N creates at once against single creates of the same run
  --concurrent-singles N      the single creates beside them (default 20)
  --warm                      only warm claim -> first command (with its phases) and bwrap
  -h, --help                  this text
)";

// Flags that take a value, and those that do not.
constexpr std::array<const char*, 10> kValueFlags = {
    "--iterations",      "--warm-replicas",     "--density",       "--scaling",
    "--scaling-samples", "--fork-mib",          "--image-density", "--leaderboard-iterations",
    "--concurrent",      "--concurrent-singles"};
constexpr std::array<const char*, 2> kSwitchFlags = {"--leaderboard", "--warm"};

// Every argument is a known flag with its value: else a usage error (exit 2)
// instead of a bench run with defaults the caller did not ask for. --help: 0.
std::optional<int> CheckCommandLine(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (std::find(kSwitchFlags.begin(), kSwitchFlags.end(), a) != kSwitchFlags.end()) continue;
    if (std::find(kValueFlags.begin(), kValueFlags.end(), a) == kValueFlags.end()) {
      std::fprintf(stderr, "bench_local_lifecycle: unknown argument '%s' (see --help)\n", argv[i]);
      return 2;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "bench_local_lifecycle: %s needs a value (see --help)\n", argv[i]);
      return 2;
    }
    ++i;
  }
  return std::nullopt;
}

// The integer value of flag `name` (at least `min`), or `dflt` when absent;
// a value that is not such a number ends the program with a usage error.
int Arg(int argc, char** argv, const char* name, int dflt, long min = 0) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) {
      char* end = nullptr;
      errno = 0;
      long v = std::strtol(argv[i + 1], &end, 10);
      if (errno != 0 || end == argv[i + 1] || *end != '\0' || v < min || v >= 1000000) {
        std::fprintf(stderr, "bench_local_lifecycle: %s: '%s' is not a whole number from %ld\n",
                     name, argv[i + 1], min);
        std::exit(2);
      }
      return static_cast<int>(v);
    }
  }
  return dflt;
}

// "1,10,100" -> {1, 10, 100} (sorted, positive, unique); empty on a bad list.
std::vector<int> IntList(const std::string& text) {
  std::vector<int> out;
  std::istringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    char* end = nullptr;
    long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || end == nullptr || *end != '\0' || v <= 0 || v > 100000) return {};
    out.push_back(static_cast<int>(v));
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

bool HasFlag(int argc, char** argv, const char* name) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return true;
  }
  return false;
}

std::string StrArg(int argc, char** argv, const char* name, const std::string& dflt) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  }
  return dflt;
}

// CPU time used so far by a sandbox's processes: its cgroup v2 dir's
// cpu.stat (every process of the sandbox, exact) + its supervisor (outside
// the cgroup; clock ticks). Microseconds.
double CpuUsedUs(const SandboxMeta& m) {
  double us = 0;
  for (const auto& cg : m.cgroups) {
    std::ifstream in(cg + "/cpu.stat");
    std::string key;
    uint64_t v = 0;
    bool found = false;
    while (in >> key >> v) {
      if (key == "usage_usec") {
        us += static_cast<double>(v);
        found = true;
        break;
      }
    }
    if (found) break;
  }
  std::ifstream stat(fmt::format("/proc/{}/stat", m.supervisor.pid));
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  size_t close = text.rfind(") ");
  if (close != std::string::npos) {
    std::istringstream fields(text.substr(close + 2));
    std::string f;
    uint64_t utime = 0, stime = 0;
    for (int i = 3; i <= 15 && fields >> f; ++i) {  // field 3 is the state
      if (i == 14) utime = std::strtoull(f.c_str(), nullptr, 10);
      if (i == 15) stime = std::strtoull(f.c_str(), nullptr, 10);
    }
    us += static_cast<double>(utime + stime) * 1e6 / static_cast<double>(sysconf(_SC_CLK_TCK));
  }
  return us;
}

// What the sandbox's memory cgroup is charged: its processes' pages (not the
// supervisor's) and the kernel memory they caused (page tables, slab, tmpfs).
// Not moved by other processes of the machine, unlike MemAvailable. Bytes, 0 if
// the sandbox has no memory cgroup.
uint64_t CgroupMemoryBytes(const SandboxMeta& m) {
  for (const auto& cg : m.cgroups) {
    for (const char* file : {"/memory.current", "/memory.usage_in_bytes"}) {
      std::ifstream in(cg + file);
      uint64_t v = 0;
      if (in >> v) return v;
    }
  }
  return 0;
}

// Median of a few MemAvailable samples (other processes make it move).
uint64_t MemAvailableSteadyKb() {
  std::vector<uint64_t> v;
  for (int i = 0; i < 5; ++i) {
    if (i > 0) std::this_thread::sleep_for(100ms);
    v.push_back(MemAvailableKb());
  }
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Spawns `deepbox sandbox create --network none --json` with the bench's state
// dir and returns the id it printed ("" on failure).
std::string CliCreate(const std::string& deepbox, const std::string& state_dir) {
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) != 0) return {};
  std::vector<std::string> args = {deepbox, "sandbox", "create", "--network",
                                   "none",  "--ttl",   "600"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::string env_state = "DEEPBOX_STATE_DIR=" + state_dir;
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) envp.push_back(*e);
  envp.push_back(env_state.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, pipefd[1], 1);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  close(pipefd[1]);
  std::string out;
  if (rc == 0) {
    char buf[256];
    for (ssize_t n; (n = read(pipefd[0], buf, sizeof(buf))) > 0;) {
      out.append(buf, static_cast<size_t>(n));
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) out.clear();
  }
  close(pipefd[0]);
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return Store::ValidId(out) ? out : std::string();
}

// One point of the scaling section: N idle sandboxes exist.
struct ScalePoint {
  int n = 0;
  double fill_ms_per_create = 0;  // mean create time while growing to N
  Stats create{"create", {}, {}};
  Stats cli_create{"CLI create", {}, {}};
  Stats bare_create{"create without limits", {}, {}};
  double rss_mib = 0, pss_mib = 0, avail_drop_mib = 0;  // per idle sandbox
  double cgroup_mib = 0;                                // per idle sandbox
  double idle_cpu_ms_per_s = 0;                         // per idle sandbox
  std::map<std::string, std::vector<double>> steps;     // the supervisors' timings, ms
};

}  // namespace

// The bwrap command the peers' rows run: new namespaces, /usr read-only, /bin/true.
std::vector<std::string> BwrapTrue(const std::string& bwrap) {
  return {bwrap,       "--unshare-all", "--die-with-parent",
          "--ro-bind", "/usr",          "/usr",
          "--symlink", "usr/bin",       "/bin",
          "--symlink", "usr/lib",       "/lib",
          "--symlink", "usr/lib64",     "/lib64",
          "--proc",    "/proc",         "--dev",
          "/dev",      "--tmpfs",       "/tmp",
          "/bin/true"};
}

// Start-up as ComputeSDK's leaderboard measures it: create -> first command,
// `iterations` times in sequence with the starts staggered every 200 ms,
// then a burst of 10 at once; median, p95, p99 and the success rate. bwrap
// runs by the same method in the same run as the baseline.
int RunLeaderboard(LocalSandboxProvider& provider, int iterations) {
  struct Method {
    std::string name;
    std::function<bool()> once;  // one create -> first command (-> cleanup, not timed)
  };
  struct Row {
    std::string name;
    Stats stats;
    int attempts = 0;
  };
  ClaimOptions claim;
  claim.network = "none";
  ExecRequest first_cmd;
  first_cmd.argv = {"true"};
  std::vector<Method> methods;
  methods.push_back({"deepbox local cold create -> first command", [&] {
                       auto m = provider.CreateSandbox(claim, false);
                       if (!m) return false;
                       auto c = provider.Connect(*m);
                       if (!c) return false;
                       auto r = (*c)->Exec(first_cmd);
                       return r.has_value() && r->exit_code == 0;
                     }});
  std::string bwrap = Which("bwrap");
  if (!bwrap.empty() && RunQuiet(BwrapTrue(bwrap)) == 0) {
    methods.push_back(
        {"bwrap --unshare-all ... /bin/true", [&] { return RunQuiet(BwrapTrue(bwrap)) == 0; }});
  }
  // The sandbox made by each timed call is deleted after the clock stops.
  auto cleanup = [&] {
    auto all = provider.ListMeta();
    if (all) {
      for (const auto& m : *all) (void)provider.Delete(m.id);
    }
  };
  // Per method: the sequential row, then the burst row.
  std::vector<std::pair<Row, Row>> results;
  for (const auto& method : methods) {
    (void)method.once();  // warm-up: page cache, binaries
    cleanup();
    Row seq{method.name + " (sequential, every 200 ms)", {}, 0};
    const auto start = Clock::now();
    for (int i = 0; i < iterations; ++i) {
      std::this_thread::sleep_until(start + i * 200ms);
      auto t0 = Clock::now();
      bool ok = method.once();
      double ms = Since(t0);
      ++seq.attempts;
      if (ok) seq.stats.ms.push_back(ms);
      cleanup();
    }
    Row burst{method.name + " (burst of 10)", {}, 10};
    std::vector<std::thread> threads;
    std::mutex mu;
    for (int i = 0; i < 10; ++i) {
      threads.emplace_back([&] {
        auto t0 = Clock::now();
        bool ok = method.once();
        double ms = Since(t0);
        std::lock_guard<std::mutex> lock(mu);
        if (ok) burst.stats.ms.push_back(ms);
      });
    }
    for (auto& t : threads) t.join();
    cleanup();
    results.emplace_back(std::move(seq), std::move(burst));
  }
  std::printf(
      "\nStart-up, ComputeSDK's method (create -> first command; %d sequential runs\n"
      "started every 200 ms, then a burst of 10), same machine, same run\n\n",
      iterations);
  std::printf("%-70s %9s %9s %9s %8s  %s\n", "scenario", "median ms", "p95 ms", "p99 ms", "success",
              "median vs bwrap");
  auto row = [](const Row& r, const Row* baseline) {
    std::string ratio = "-";
    if (baseline != nullptr && !baseline->stats.ms.empty() && !r.stats.ms.empty()) {
      ratio = fmt::format("{:.2f}x", r.stats.Pct(50) / baseline->stats.Pct(50));
    }
    double success =
        r.attempts > 0 ? 100.0 * static_cast<double>(r.stats.ms.size()) / r.attempts : 0.0;
    std::printf("%-70s %9.1f %9.1f %9.1f %7.0f%%  %s\n", r.name.c_str(), r.stats.Pct(50),
                r.stats.Pct(95), r.stats.Pct(99), success, ratio.c_str());
  };
  const bool have_bwrap = results.size() > 1;
  for (size_t i = 0; i < results.size(); ++i) {
    const bool baseline_rows = i > 0 || !have_bwrap;
    row(results[i].first, baseline_rows ? nullptr : &results[1].first);
    row(results[i].second, baseline_rows ? nullptr : &results[1].second);
  }
  std::printf(
      "\nThese are local sandboxes on this machine: no network round trip, no region.\n"
      "The leaderboard's cloud figures (Daytona 0.11 s, E2B 0.44 s medians) include both, so\n"
      "they are not measured here and not comparable one to one.\n");
  for (const auto& [seq, burst] : results) {
    for (const Row* r : {&seq, &burst}) {
      if (r->stats.ms.size() != static_cast<size_t>(r->attempts)) return 1;  // a failure counts
    }
  }
  return 0;
}

// Issue 23: N creates -> first command started at once (default limits),
// each timed on its own, against K single creates of the same run (nothing
// else of the bench running); with the supervisors' split of both, so that
// contention shows where it is.
int RunConcurrent(LocalSandboxProvider& provider, int n, int singles) {
  ClaimOptions claim;
  claim.network = "none";
  ExecRequest first_cmd;
  first_cmd.argv = {"true"};
  struct Run {
    bool ok = false;
    double ms = 0;
    std::string id;
    std::map<std::string, double> steps;  // ms
  };
  auto once = [&] {
    Run r;
    auto t0 = Clock::now();
    auto m = provider.CreateSandbox(claim, false);
    if (!m) {
      std::fprintf(stderr, "create: %s\n", m.error().ToString().c_str());
      return r;
    }
    r.id = m->id;
    auto c = provider.Connect(*m);
    if (!c) return r;
    auto e = (*c)->Exec(first_cmd);
    r.ms = Since(t0);
    r.ok = e.has_value() && e->exit_code == 0;
    for (const auto& [k, v] : m->timings) {
      if (v.is_number()) r.steps[std::string(k)] = v.to_number<double>() / 1000.0;
    }
    return r;
  };
  Stats single{"single create -> first command", {}, {}};
  Stats together{fmt::format("{} at once: each create -> first command", n), {}, {}};
  std::map<std::string, std::vector<double>> single_steps, together_steps;
  int failed = 0;
  for (int i = 0; i < singles + 2; ++i) {
    Run r = once();
    if (!r.id.empty()) (void)provider.Delete(r.id);
    if (!r.ok) ++failed;
    if (i < 2 || !r.ok) continue;  // warm-up: page cache, binaries, disk spares
    single.ms.push_back(r.ms);
    for (const auto& [k, v] : r.steps) single_steps[k].push_back(v);
  }
  std::vector<Run> runs(static_cast<size_t>(n));
  {
    std::latch start(n);
    std::vector<std::thread> threads;
    for (int i = 0; i < n; ++i) {
      threads.emplace_back([&, i] {
        start.arrive_and_wait();
        runs[static_cast<size_t>(i)] = once();
      });
    }
    for (auto& t : threads) t.join();
  }
  for (const auto& r : runs) {
    if (!r.ok) {
      ++failed;
      continue;
    }
    together.ms.push_back(r.ms);
    for (const auto& [k, v] : r.steps) together_steps[k].push_back(v);
  }
  {
    std::vector<std::thread> deleters;
    for (int lane = 0; lane < 4; ++lane) {
      deleters.emplace_back([&, lane] {
        for (size_t i = static_cast<size_t>(lane); i < runs.size(); i += 4) {
          if (!runs[i].id.empty()) (void)provider.Delete(runs[i].id);
        }
      });
    }
    for (auto& t : deleters) t.join();
  }
  std::printf("\nConcurrent creates (default limits, network none), same machine, same run\n\n");
  std::printf("%-52s %9s %9s %9s  %s\n", "scenario", "p50 ms", "p99 ms", "mean ms",
              "p50 vs single");
  for (const Stats* s : {&single, &together}) {
    std::printf("%-52s %9.2f %9.2f %9.2f  %.2fx\n", s->name.c_str(), s->Pct(50), s->Pct(99),
                s->Mean(), single.ms.empty() ? 0.0 : s->Pct(50) / single.Pct(50));
  }
  std::printf("\nsplit p50 ms (the supervisors' timings)   single   %d at once   ratio\n", n);
  for (const auto& [k, v] : together_steps) {
    Stats a{k, single_steps[k], {}};
    Stats b{k, v, {}};
    std::printf("  %-36s %8.2f %11.2f   %5.2fx\n", k.c_str(), a.Pct(50), b.Pct(50),
                a.Pct(50) > 0 ? b.Pct(50) / a.Pct(50) : 0.0);
  }
  std::printf("goal (issue 23): p50 of each of 100 concurrent creates <= 1.5x a single create\n");
  if (failed > 0) std::printf("%d creates failed\n", failed);
  return failed > 0 ? 1 : 0;
}

// Warm: claims from a running `deepbox pool serve` of `replicas` -> connect
// -> first command done, `iterations` times (after 2 warm-up claims); the
// three phases seen by the client go to `phases`.
Stats RunWarmRow(LocalSandboxProvider& provider, const LocalProviderOptions& o,
                 const std::string& tmpl, int replicas, int iterations, const ClaimOptions& claim,
                 const ExecRequest& first_cmd, std::map<std::string, std::vector<double>>& phases) {
  std::string out = tmpl + "/pool.log";
  std::vector<std::string> args = {
      o.deepbox_binary,         "pool",      "serve", "--name", "bench", "--replicas",
      std::to_string(replicas), "--network", "none"};
  std::vector<char*> pargv;
  for (auto& a : args) pargv.push_back(a.data());
  pargv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 2, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  std::string env_state = "DEEPBOX_STATE_DIR=" + tmpl;
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) envp.push_back(*e);
  envp.push_back(env_state.data());
  envp.push_back(nullptr);
  pid_t pool = -1;
  posix_spawn(&pool, pargv[0], &fa, nullptr, pargv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  auto warm_count = [&] {
    int count = 0;
    auto ids = provider.store().Ids();
    for (const auto& id : ids ? *ids : std::vector<std::string>{}) {
      count += access(provider.store().Paths(id).warm.c_str(), F_OK) == 0;
    }
    return count;
  };
  LocalProviderOptions po = o;
  po.pool = "bench";
  auto claimer = LocalSandboxProvider::Create(po);
  Stats s{"deepbox warm claim -> first command", {}, {}};
  int cold_fallbacks = 0;
  for (int i = 0; i < iterations + 2; ++i) {
    auto deadline = Clock::now() + 60s;
    while (warm_count() < replicas && Clock::now() < deadline) std::this_thread::sleep_for(5ms);
    auto t0 = Clock::now();
    auto m = (*claimer)->CreateSandbox(claim, true);
    if (!m) {
      std::fprintf(stderr, "claim: %s\n", m.error().ToString().c_str());
      break;
    }
    double t_claim = Since(t0);
    auto c = (*claimer)->Connect(*m);
    double t_connect = Since(t0);
    auto r = c ? (*c)->Exec(first_cmd) : Result<ExecResult>(tl::unexpected(c.error()));
    double ms = Since(t0);
    if (i >= 2) {
      phases["warm: claim"].push_back(t_claim);
      phases["warm: connect (GET /info)"].push_back(t_connect - t_claim);
      phases["warm: first command (exec true)"].push_back(ms - t_connect);
    }
    if (!r) {
      std::fprintf(stderr, "warm exec: %s\n", r.error().ToString().c_str());
      break;
    }
    if (m->pool != "bench") ++cold_fallbacks;
    if (i >= 2) s.ms.push_back(ms);
    if (c) c->reset();
    (void)provider.Delete(m->id);
  }
  if (cold_fallbacks > 0) s.note = fmt::format("{} cold fallbacks", cold_fallbacks);
  kill(pool, SIGTERM);
  waitpid(pool, nullptr, 0);
  auto sel = Selector::Parse("deepbox.dev/pool=bench");
  (void)provider.DeleteMatching(*sel);
  return s;
}

int main(int argc, char** argv) {
  if (auto done = CheckCommandLine(argc, argv)) return *done;
  const int iterations = Arg(argc, argv, "--iterations", 50);
  const int replicas = Arg(argc, argv, "--warm-replicas", 4);
  const int density = Arg(argc, argv, "--density", 100);
  const int fork_mib = Arg(argc, argv, "--fork-mib", 1024);               // 0 = skip the fork rows
  const int image_density = Arg(argc, argv, "--image-density", 100, -1);  // -1 = no image rows
  const std::vector<int> points =
      IntList(StrArg(argc, argv, "--scaling", fmt::format("1,10,{}", std::max(density, 10))));
  const int samples = std::max(1, Arg(argc, argv, "--scaling-samples", 20));
  if (points.empty()) {
    std::fprintf(stderr, "--scaling: give a list of positive counts, e.g. 1,10,100\n");
    return 2;
  }

  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  std::string bin_dir =
      n > 0 ? fs::path(std::string(exe, static_cast<size_t>(n))).parent_path().string() : ".";
  // The bench's state dir (short: socket paths fit 107 bytes), removed on every return.
  std::optional<deepbox::testing::TempDir> state_dir;
  if (auto made = deepbox::testing::TempDir::Make("dbx-bench", "/tmp")) {
    state_dir.emplace(std::move(*made));
  } else {
    std::fprintf(stderr, "%s\n", made.error().ToString().c_str());
    return 1;
  }
  const std::string tmpl = state_dir->path().string();
  LocalProviderOptions o;
  o.state_dir = tmpl;
  o.deepbox_binary = bin_dir + "/deepbox";
  o.sandboxd_binary = bin_dir + "/deepbox-sandboxd";
  o.pool = "";
  o.image_dir = tmpl + "/images";
  auto provider = LocalSandboxProvider::Create(o);
  if (!provider) {
    std::fprintf(stderr, "%s\n", provider.error().ToString().c_str());
    return 1;
  }
  // The same without any limit (no cgroup limits, no /workspace disk): what
  // the default limits cost, measured under the same load.
  LocalProviderOptions bare_options = o;
  bare_options.limits = SandboxLimits{};
  auto bare = LocalSandboxProvider::Create(bare_options);
  if (!bare) {
    std::fprintf(stderr, "%s\n", bare.error().ToString().c_str());
    return 1;
  }
  if (HasFlag(argc, argv, "--leaderboard")) {
    return RunLeaderboard(**provider, Arg(argc, argv, "--leaderboard-iterations", 100));
  }
  if (int n = Arg(argc, argv, "--concurrent", 0); n > 0) {
    return RunConcurrent(**provider, n, std::max(1, Arg(argc, argv, "--concurrent-singles", 20)));
  }
  ClaimOptions claim;
  claim.network = "none";
  ExecRequest first_cmd;
  first_cmd.argv = {"true"};

  std::vector<Stats> rows;
  std::map<std::string, std::vector<double>> steps;
  std::map<std::string, std::vector<double>> phases;

  if (HasFlag(argc, argv, "--warm")) {
    // Issue 23: warm claim -> first command <= 0.5x bwrap, in one run.
    Stats warm = RunWarmRow(**provider, o, tmpl, replicas, iterations, claim, first_cmd, phases);
    std::string bwrap = Which("bwrap");
    auto b = bwrap.empty()
                 ? std::nullopt
                 : TimeCommand("bwrap --unshare-all ... /bin/true", BwrapTrue(bwrap), iterations);
    std::printf("%-40s %9s %9s %9s  %s\n", "row (ms)", "p50", "p99", "mean", "p50 vs bwrap");
    for (const Stats* r : {&warm, b ? &*b : nullptr}) {
      if (r == nullptr || r->ms.empty()) continue;
      std::printf("%-40s %9.2f %9.2f %9.2f  %.2fx %s\n", r->name.c_str(), r->Pct(50), r->Pct(99),
                  r->Mean(), b ? r->Pct(50) / b->Pct(50) : 0.0, r->note.c_str());
    }
    if (!b) std::printf("bwrap: not installed or does not run here\n");
    std::printf("phases seen by the client (p50, ms):\n");
    for (const auto& [k, v] : phases)
      std::printf("  %-36s %8.3f\n", k.c_str(), Stats{k, v, {}}.Pct(50));
    std::printf("goal (issue 23): warm claim -> first command <= 0.5x bwrap\n");
    return warm.ms.empty() ? 1 : 0;
  }

  // 1. Cold: create -> connect -> first command done.
  {
    Stats s{"deepbox cold create -> first command", {}, {}};
    for (int i = 0; i < iterations + 2; ++i) {
      auto t0 = Clock::now();
      auto m = (*provider)->CreateSandbox(claim, false);
      if (!m) {
        std::fprintf(stderr, "create: %s\n", m.error().ToString().c_str());
        return 1;
      }
      double t_create = Since(t0);
      auto c = (*provider)->Connect(*m);
      double t_connect = Since(t0);
      if (!c) {
        std::fprintf(stderr, "connect: %s\n", c.error().ToString().c_str());
        return 1;
      }
      auto r = (*c)->Exec(first_cmd);
      double ms = Since(t0);
      if (!r || r->exit_code != 0) {
        std::fprintf(stderr, "exec failed\n");
        return 1;
      }
      if (i >= 2) {  // warm-up: page cache, binaries
        s.ms.push_back(ms);
        phases["cold: create (supervisor ready)"].push_back(t_create);
        phases["cold: connect (GET /info)"].push_back(t_connect - t_create);
        phases["cold: first command (exec true)"].push_back(ms - t_connect);
        for (const auto& [k, v] : m->timings) {
          if (v.is_number()) steps[std::string(k)].push_back(v.to_number<double>() / 1000.0);
        }
      }
      c->reset();
      (void)(*provider)->Delete(m->id);
    }
    rows.push_back(s);
  }

  // 1a. Issue 24: the same cold create on an image from the cache, and the
  // disk N sandboxes of one image take.
  std::string image_report, image_skipped;
  if (image_density >= 0) {
    bench::ImageBenchResult image = bench::RunImageBench(**provider, iterations, image_density);
    if (image.ran) {
      Stats s{"deepbox cold create on a cached image -> first", image.cold_ms, {}};
      s.note = fmt::format("(+{:.2f} ms p50 over the host root)", s.Pct(50) - rows[0].Pct(50));
      rows.push_back(s);
      image_report = image.density_report;
    } else {
      image_skipped = "deepbox cold create on a cached image: " + image.skipped;
    }
  }

  // 1b. The durable-workspace verbs (issue 22), next to the cold create
  // above: the first command after a pause (unpause on use: the cgroup
  // freezer) and after a suspend (resume on use: fresh processes on the same
  // /workspace), and what pause and suspend themselves take.
  {
    auto m = (*provider)->CreateSandbox(claim, false);
    if (!m) {
      std::fprintf(stderr, "create: %s\n", m.error().ToString().c_str());
      return 1;
    }
    Stats pause{"deepbox pause (freeze)", {}, {}};
    Stats unpause{"deepbox paused -> first command", {}, {}};
    Stats suspend{"deepbox suspend (processes end)", {}, {}};
    Stats resume{"deepbox suspended -> first command", {}, {}};
    auto first_command = [&](Stats& row, int i) {
      auto t0 = Clock::now();
      auto c = (*provider)->Connect(m->id);  // wakes it
      auto r = c ? (*c)->Exec(first_cmd) : Result<ExecResult>(tl::unexpected(c.error()));
      double ms = Since(t0);
      if (!r || r->exit_code != 0) {
        row.note = "failed: " + (r ? std::string("exit code") : r.error().message);
        return false;
      }
      if (i >= 2) row.ms.push_back(ms);
      return true;
    };
    for (int i = 0; i < iterations + 2; ++i) {
      auto t0 = Clock::now();
      auto st = (*provider)->Pause(m->id);
      if (!st) {
        pause.note = "not available here: " + st.error().message;
        break;
      }
      if (i >= 2) pause.ms.push_back(Since(t0));
      if (!first_command(unpause, i)) break;
    }
    for (int i = 0; i < iterations + 2; ++i) {
      auto t0 = Clock::now();
      auto st = (*provider)->Suspend(m->id, {});
      if (!st) {
        suspend.note = "failed: " + st.error().message;
        break;
      }
      if (i >= 2) suspend.ms.push_back(Since(t0));
      if (!first_command(resume, i)) break;
    }
    (void)(*provider)->Delete(m->id);
    for (Stats* row : {&pause, &unpause, &suspend, &resume}) rows.push_back(*row);
  }

  // 1c. Fork of a workspace holding --fork-mib MiB (one large file of random
  // bytes and 1000 small ones), next to `cp -a --reflink=auto` of the same
  // tree into the state directory: wall time, and what each copy takes on
  // disk. (The fork writes into its own /workspace, a disk image where the
  // default limits have one; a cold create of the new sandbox is included.)
  std::string fork_report;
  if (fork_mib > 0) {
    auto m = (*provider)->CreateSandbox(claim, false);
    if (!m) {
      std::fprintf(stderr, "create: %s\n", m.error().ToString().c_str());
      return 1;
    }
    auto c = (*provider)->Connect(*m);
    ExecRequest fill;
    fill.shell = fmt::format(
        "set -e; head -c {}M /dev/urandom > big.bin; mkdir small; i=0; "
        "while [ $i -lt 1000 ]; do echo $i > small/$i.txt; i=$((i+1)); done",
        fork_mib);
    fill.timeout = std::chrono::minutes(10);
    auto filled = c ? (*c)->Exec(fill) : Result<ExecResult>(tl::unexpected(c.error()));
    if (!filled || filled->exit_code != 0) {
      std::fprintf(stderr, "fork: filling the workspace failed\n");
      return 1;
    }
    c->reset();
    fs::path source = (*provider)->store().Paths(m->id).workspace;
    // Both copies start from the same state: the source's data on disk (a
    // fork freezes the source's file system, which writes back what it has
    // dirty first; cp would copy that from the page cache and leave it to
    // the kernel).
    sync();
    auto t0 = Clock::now();
    auto forks = (*provider)->Fork(m->id, 1, claim);
    double fork_ms = Since(t0);
    if (!forks) {
      std::fprintf(stderr, "fork: %s\n", forks.error().ToString().c_str());
      return 1;
    }
    fs::path copy = (*provider)->store().Paths((*forks)[0].id).workspace;
    uint64_t fork_disk = local::TreeDiskUsage(copy.string());
    // The baseline: the same tree copied into the state directory.
    std::string cp_dst = tmpl + "/cp-baseline";
    sync();
    t0 = Clock::now();
    int cp_rc = RunQuiet({"/bin/cp", "-a", "--reflink=auto", source.string(), cp_dst});
    double cp_ms = Since(t0);
    uint64_t cp_disk = local::TreeDiskUsage(cp_dst);
    (void)RemoveTree(cp_dst);
    (void)(*provider)->Delete((*forks)[0].id);
    (void)(*provider)->Delete(m->id);
    fork_report = fmt::format(
        "\nFork of a workspace of {} MiB + 1000 small files (same run; fork includes its create):\n"
        "  deepbox fork            {:8.1f} ms  {:8.1f} MiB on disk\n"
        "  cp -a --reflink=auto    {:8.1f} ms  {:8.1f} MiB on disk{}\n"
        "  ratio (fork / cp)       {:8.2f}x\n",
        fork_mib, fork_ms, fork_disk / 1048576.0, cp_ms, cp_disk / 1048576.0,
        cp_rc == 0 ? "" : " (cp failed)", fork_ms / std::max(cp_ms, 1e-9));
  }

  // 2. Warm: claim from a pool -> connect -> first command done.
  rows.push_back(RunWarmRow(**provider, o, tmpl, replicas, iterations, claim, first_cmd, phases));

  // 3. Peers' tools on this machine, doing a similar job (new namespaces, /bin/true).
  std::string bwrap = Which("bwrap"), unshare = Which("unshare");
  std::vector<std::string> skipped;
  if (!image_skipped.empty()) skipped.push_back(image_skipped);
  if (!bwrap.empty()) {
    auto s = TimeCommand("bwrap --unshare-all ... /bin/true", BwrapTrue(bwrap), iterations);
    if (s) {
      rows.push_back(*s);
    } else {
      skipped.push_back("bwrap (does not run here)");
    }
  } else {
    skipped.push_back("bwrap (not installed)");
  }
  if (!unshare.empty()) {
    auto s = TimeCommand("unshare -Urpmn --fork --mount-proc /bin/true",
                         {unshare, "-Urpmn", "--fork", "--mount-proc", "/bin/true"}, iterations);
    if (s) {
      rows.push_back(*s);
    } else {
      skipped.push_back("unshare (does not run here)");
    }
  } else {
    skipped.push_back("unshare (not installed)");
  }
  if (auto s =
          TimeCommand("posix_spawn /bin/true (no isolation, floor)", {"/bin/true"}, iterations)) {
    rows.push_back(*s);
  }

  // 4. Scaling: N idle sandboxes (1, 10, 100 by default), and at each N the
  // time to create one more, the memory per idle sandbox and the CPU an idle
  // sandbox uses. Ratios are against the smallest N of this run.
  std::vector<ScalePoint> scale;
  std::vector<SandboxMeta> idle;
  const uint64_t avail_base = MemAvailableSteadyKb();
  for (int n : points) {
    ScalePoint pt;
    pt.n = n;
    double fill_ms = 0;
    int filled = 0;
    while (static_cast<int>(idle.size()) < n) {
      auto t0 = Clock::now();
      auto m = (*provider)->CreateSandbox(claim, false);
      if (!m) {
        std::fprintf(stderr, "scaling: stopped at %zu idle sandboxes: %s\n", idle.size(),
                     m.error().ToString().c_str());
        break;
      }
      fill_ms += Since(t0);
      ++filled;
      idle.push_back(*m);
    }
    if (static_cast<int>(idle.size()) < n) break;
    pt.fill_ms_per_create = filled > 0 ? fill_ms / filled : 0;
    std::this_thread::sleep_for(1s);  // let them settle (idle)
    // Memory: every process of every idle sandbox; MemAvailable also counts
    // what no process maps (page tables, kernel stacks, cgroups, namespaces).
    const uint64_t avail_now = MemAvailableSteadyKb();
    double rss_sum = 0, pss_sum = 0, cgroup_sum = 0;
    for (const auto& m : idle) {
      cgroup_sum += static_cast<double>(CgroupMemoryBytes(m));
      for (pid_t p : SandboxPids(m)) {
        rss_sum += static_cast<double>(SmapsField(p, "Rss:"));
        pss_sum += static_cast<double>(SmapsField(p, "Pss:"));
      }
    }
    pt.rss_mib = rss_sum / n / 1024;
    pt.pss_mib = pss_sum / n / 1024;
    pt.cgroup_mib = cgroup_sum / n / 1024 / 1024;
    pt.avail_drop_mib =
        static_cast<double>(avail_base > avail_now ? avail_base - avail_now : 0) / n / 1024;
    // CPU of the idle sandboxes over 3 s (timers, housekeeping): should be ~0.
    double cpu_before = 0, cpu_after = 0;
    for (const auto& m : idle) cpu_before += CpuUsedUs(m);
    auto t_idle = Clock::now();
    std::this_thread::sleep_for(3s);
    for (const auto& m : idle) cpu_after += CpuUsedUs(m);
    pt.idle_cpu_ms_per_s = (cpu_after - cpu_before) / 1000 / n / (Since(t_idle) / 1000);
    // The next sandbox, with N existing: through the provider (with the
    // default limits, and without limits) and through the CLI (`deepbox
    // sandbox create`, which also looks for a warm one of the default pool).
    for (int i = 0; i < samples; ++i) {
      auto t0 = Clock::now();
      auto m = (*provider)->CreateSandbox(claim, false);
      double ms = Since(t0);
      if (!m) {
        std::fprintf(stderr, "scaling: create at N=%d: %s\n", n, m.error().ToString().c_str());
        return 1;
      }
      pt.create.ms.push_back(ms);
      for (const auto& [k, v] : m->timings) {
        if (v.is_number()) pt.steps[std::string(k)].push_back(v.to_number<double>() / 1000.0);
      }
      (void)(*provider)->Delete(m->id);
      t0 = Clock::now();
      m = (*bare)->CreateSandbox(claim, false);
      ms = Since(t0);
      if (!m) {
        std::fprintf(stderr, "scaling: create without limits at N=%d: %s\n", n,
                     m.error().ToString().c_str());
        return 1;
      }
      pt.bare_create.ms.push_back(ms);
      (void)(*provider)->Delete(m->id);
      t0 = Clock::now();
      std::string id = CliCreate(o.deepbox_binary, tmpl);
      ms = Since(t0);
      if (id.empty()) {
        std::fprintf(stderr, "scaling: `deepbox sandbox create` at N=%d failed\n", n);
        return 1;
      }
      pt.cli_create.ms.push_back(ms);
      (void)(*provider)->Delete(id);
    }
    scale.push_back(std::move(pt));
  }
  for (const auto& m : idle) (void)(*provider)->Delete(m.id);
  state_dir.reset();

  // Report.
  const Stats& cold = rows[0];
  std::printf("\nLocal sandbox lifecycle (%d iterations each, same machine, same run)\n\n",
              iterations);
  std::printf("%-46s %9s %9s %9s  %s\n", "scenario", "p50 ms", "p99 ms", "mean ms",
              "p50 vs deepbox cold");
  for (const auto& s : rows) {
    std::printf("%-46s %9.2f %9.2f %9.2f  %5.2fx %s\n", s.name.c_str(), s.Pct(50), s.Pct(99),
                s.Mean(), s.Pct(50) / std::max(cold.Pct(50), 1e-9), s.note.c_str());
  }
  for (const auto& s : skipped) std::printf("%-46s skipped\n", s.c_str());
  std::printf("%s", fork_report.c_str());
  std::printf("%s", image_report.c_str());
  std::printf("\nPeers' published numbers (not measured here; ratio = peer / deepbox p50):\n");
  struct Peer {
    const char* what;
    double ms;
    size_t row;
  };
  double warm_p50 = 0;
  for (const auto& s : rows) {
    if (s.name == "deepbox warm claim -> first command") warm_p50 = s.Pct(50);
  }
  for (const Peer& p : {Peer{"E2B cold start ~150 ms (claim)", 150, 0},
                        Peer{"Daytona cold start < 90 ms (claim)", 90, 0},
                        Peer{"agent-sandbox warm claim 35 ms p50 (3p, low)", 35, 1},
                        Peer{"agent-sandbox warm claim 64 ms p50 (3p, high)", 64, 1}}) {
    double ours = p.row == 0 ? cold.Pct(50) : warm_p50;
    std::printf("  %-48s %7.1fx deepbox %s\n", p.what, p.ms / std::max(ours, 1e-9),
                p.row == 0 ? "cold" : "warm");
  }
  std::printf("\nPhases seen by the client (p50, ms):\n");
  for (auto& [k, v] : phases) {
    Stats s{k, v, {}};
    std::printf("  %-36s %8.3f\n", k.c_str(), s.Pct(50));
  }
  std::printf("\nCold start split (p50 of the supervisor's per-step timings, ms):\n");
  std::vector<std::pair<std::string, double>> split;
  for (auto& [k, v] : steps) {
    Stats s{k, v, {}};
    split.emplace_back(k, s.Pct(50));
  }
  for (const auto& [k, v] : split) std::printf("  %-28s %8.3f\n", k.c_str(), v);
  if (scale.empty()) return 1;
  const ScalePoint& base = scale.front();
  auto ratio = [](double v, double b) { return b > 0 ? v / b : 0.0; };
  std::printf(
      "\nScaling: N idle sandboxes (network none; limits: %s),\n"
      "%d creates of the next sandbox timed at each N (and as many without limits and through\n"
      "the CLI, interleaved); ratios against N=%d of this run\n\n",
      (*provider)->options().limits.Describe().c_str(), samples, base.n);
  std::printf("%6s  %22s  %22s  %22s  %12s\n", "N", "create p50/p99 ms", "CLI create p50/p99",
              "no limits p50/p99", "fill ms/sbx");
  for (const auto& pt : scale) {
    std::printf("%6d  %7.1f %6.1f %6.2fx  %7.1f %6.1f %6.2fx  %7.1f %6.1f %6.2fx  %12.1f\n", pt.n,
                pt.create.Pct(50), pt.create.Pct(99), ratio(pt.create.Pct(50), base.create.Pct(50)),
                pt.cli_create.Pct(50), pt.cli_create.Pct(99),
                ratio(pt.cli_create.Pct(50), base.cli_create.Pct(50)), pt.bare_create.Pct(50),
                pt.bare_create.Pct(99), ratio(pt.bare_create.Pct(50), base.bare_create.Pct(50)),
                pt.fill_ms_per_create);
  }
  std::printf("\n%6s  %18s  %18s  %18s  %22s  %17s\n", "N", "PSS MiB/sbx", "RSS MiB/sbx",
              "memcg MiB/sbx", "MemAvailable drop/sbx", "idle CPU ms/s/sbx");
  for (const auto& pt : scale) {
    std::printf("%6d  %9.2f %7.2fx  %9.2f %7.2fx  %9.2f %7.2fx  %11.2f MiB %6.2fx  %17.3f\n", pt.n,
                pt.pss_mib, ratio(pt.pss_mib, base.pss_mib), pt.rss_mib,
                ratio(pt.rss_mib, base.rss_mib), pt.cgroup_mib,
                ratio(pt.cgroup_mib, base.cgroup_mib), pt.avail_drop_mib,
                ratio(pt.avail_drop_mib, base.avail_drop_mib), pt.idle_cpu_ms_per_s);
  }
  // Where a create's time goes as N grows (the supervisor's own timings).
  std::printf("\n%-30s", "create split p50 ms");
  for (const auto& pt : scale) std::printf(" %9s", fmt::format("N={}", pt.n).c_str());
  std::printf("  %s\n", "last/first");
  for (const char* step : {"spawn", "prepare", "cgroup", "clone", "cgroup attach", "launch",
                           "daemon ready", "total"}) {
    std::printf("%-30s", step);
    for (const auto& pt : scale) {
      auto it = pt.steps.find(step);
      std::printf(" %9.2f", it == pt.steps.end() ? 0.0 : Stats{step, it->second, {}}.Pct(50));
    }
    const ScalePoint& top = scale.back();
    auto first = base.steps.find(step);
    auto last = top.steps.find(step);
    if (first != base.steps.end() && last != top.steps.end()) {
      std::printf("  %9.2fx", ratio(Stats{step, last->second, {}}.Pct(50),
                                    Stats{step, first->second, {}}.Pct(50)));
    }
    std::printf("\n");
  }
  const ScalePoint& top = scale.back();
  uint64_t total_avail = MemAvailableKb();
  double per = std::max({top.pss_mib, top.cgroup_mib, top.avail_drop_mib});
  std::printf(
      "\nDensity (N=%d): fit in the %.0f MiB available now: ~%.0f idle sandboxes (by the largest "
      "of PSS, memcg and MemAvailable drop)\n",
      top.n, static_cast<double>(total_avail) / 1024,
      per > 0 ? static_cast<double>(total_avail) / 1024 / per : 0);
  std::printf(
      "  goal: < 4 MiB per idle sandbox; agent-sandbox/gVisor: ~65 MB Sentry RAM per pod\n");
  return 0;
}
