// Local sandbox lifecycle benchmark, side by side with bwrap and unshare on the
// same machine in the same run, plus density. See README.md.
//
//   bench_local_lifecycle [--iterations N] [--warm-replicas N] [--density N]
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "local/lifecycle/provider.h"

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

int Arg(int argc, char** argv, const char* name, int dflt) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return std::atoi(argv[i + 1]);
  }
  return dflt;
}

}  // namespace

int main(int argc, char** argv) {
  const int iterations = Arg(argc, argv, "--iterations", 50);
  const int replicas = Arg(argc, argv, "--warm-replicas", 4);
  const int density = Arg(argc, argv, "--density", 50);

  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  std::string bin_dir =
      n > 0 ? fs::path(std::string(exe, static_cast<size_t>(n))).parent_path().string() : ".";
  std::string tmpl = "/tmp/dbx-bench-XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  LocalProviderOptions o;
  o.state_dir = tmpl;
  o.deepbox_binary = bin_dir + "/deepbox";
  o.sandboxd_binary = bin_dir + "/deepbox-sandboxd";
  o.pool = "";
  auto provider = LocalSandboxProvider::Create(o);
  if (!provider) {
    std::fprintf(stderr, "%s\n", provider.error().ToString().c_str());
    return 1;
  }
  ClaimOptions claim;
  claim.network = "none";
  ExecRequest first_cmd;
  first_cmd.argv = {"true"};

  std::vector<Stats> rows;
  std::map<std::string, std::vector<double>> steps;
  std::map<std::string, std::vector<double>> phases;

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

  // 2. Warm: claim from a pool -> connect -> first command done.
  {
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
      auto ids = (*provider)->store().Ids();
      for (const auto& id : ids ? *ids : std::vector<std::string>{}) {
        count += access((*provider)->store().Paths(id).warm.c_str(), F_OK) == 0;
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
      (void)(*provider)->Delete(m->id);
    }
    if (cold_fallbacks > 0) s.note = fmt::format("{} cold fallbacks", cold_fallbacks);
    kill(pool, SIGTERM);
    waitpid(pool, nullptr, 0);
    auto sel = Selector::Parse("deepbox.dev/pool=bench");
    (void)(*provider)->DeleteMatching(*sel);
    rows.push_back(s);
  }

  // 3. Peers' tools on this machine, doing a similar job (new namespaces, /bin/true).
  std::string bwrap = Which("bwrap"), unshare = Which("unshare");
  std::vector<std::string> skipped;
  if (!bwrap.empty()) {
    auto s = TimeCommand("bwrap --unshare-all ... /bin/true",
                         {bwrap,       "--unshare-all", "--die-with-parent",
                          "--ro-bind", "/usr",          "/usr",
                          "--symlink", "usr/bin",       "/bin",
                          "--symlink", "usr/lib",       "/lib",
                          "--symlink", "usr/lib64",     "/lib64",
                          "--proc",    "/proc",         "--dev",
                          "/dev",      "--tmpfs",       "/tmp",
                          "/bin/true"},
                         iterations);
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

  // 4. Density: idle sandboxes, memory of all their processes (supervisor included).
  std::vector<SandboxMeta> idle;
  uint64_t avail_before = MemAvailableKb();
  for (int i = 0; i < density; ++i) {
    auto m = (*provider)->CreateSandbox(claim, false);
    if (!m) {
      std::fprintf(stderr, "density: stopped at %d: %s\n", i, m.error().ToString().c_str());
      break;
    }
    idle.push_back(*m);
  }
  std::this_thread::sleep_for(500ms);  // let them settle (idle)
  uint64_t avail_after = MemAvailableKb();
  double rss_sum = 0, pss_sum = 0;
  for (const auto& m : idle) {
    for (pid_t p : SandboxPids(m)) {
      rss_sum += static_cast<double>(SmapsField(p, "Rss:"));
      pss_sum += static_cast<double>(SmapsField(p, "Pss:"));
    }
  }
  double count = std::max<double>(1, static_cast<double>(idle.size()));
  double rss_mib = rss_sum / count / 1024, pss_mib = pss_sum / count / 1024;
  double avail_mib =
      static_cast<double>(avail_before > avail_after ? avail_before - avail_after : 0) / count /
      1024;
  for (const auto& m : idle) (void)(*provider)->Delete(m.id);
  (void)RemoveTree(tmpl);

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
  std::printf("\nPeers' published numbers (not measured here; ratio = peer / deepbox p50):\n");
  struct Peer {
    const char* what;
    double ms;
    size_t row;
  };
  double warm_p50 = rows.size() > 1 ? rows[1].Pct(50) : 0;
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
  std::printf("\nDensity: %zu idle sandboxes (network none)\n", idle.size());
  std::printf(
      "  memory per idle sandbox: RSS %.2f MiB, PSS %.2f MiB (supervisor + daemon), "
      "MemAvailable drop %.2f MiB\n",
      rss_mib, pss_mib, avail_mib);
  uint64_t total_avail = MemAvailableKb();
  double per = std::max(pss_mib, avail_mib);
  std::printf(
      "  fit in the %.0f MiB available now: ~%.0f idle sandboxes (by the larger of PSS and "
      "MemAvailable drop)\n",
      static_cast<double>(total_avail) / 1024,
      per > 0 ? static_cast<double>(total_avail) / 1024 / per : 0);
  std::printf(
      "  goal: < 4 MiB per idle sandbox; agent-sandbox/gVisor: ~65 MB Sentry RAM per pod\n");
  return 0;
}
