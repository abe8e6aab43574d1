// Per-call latency of the daemon's file API on bench/python's tree (1,000
// Python files of 40 lines in 10 directories; every 10th file holds
// "needle"): fs::Grep, fs::Glob and fs::List as the daemon configures them
// (root "/", pseudo filesystems refused), next to the commands a stock
// deepagents BaseSandbox would run for the same tool (GNU grep -rHnF, find),
// timed as child processes in the same run. p50 of N calls, warm page cache;
// wall time and CPU time (user + system, all threads or the child: on a
// loaded machine wall time is mostly waiting for a core).
//   sandboxd_fs_tree_bench [--runs N] [--threads T] [--dir D] [--keep]
#include <fcntl.h>
#include <fmt/format.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/testing/temp_dir.h"
#include "fs/path_resolver.h"
#include "sandboxd/fs/glob.h"
#include "sandboxd/fs/grep.h"
#include "sandboxd/fs/workspace.h"

extern char** environ;

namespace fs = deepbox::sandboxd::fs;
using Clock = std::chrono::steady_clock;

namespace {

void MakeTree(const std::string& dir) {
  for (int d = 0; d < 10; ++d) {
    std::string sub = fmt::format("{}/pkg{}", dir, d);
    std::filesystem::create_directories(sub);
    for (int f = 0; f < 100; ++f) {
      std::string text;
      for (int i = 0; i < 40; ++i) {
        if (f % 10 == 0 && i == 20) {
          text += "needle = True\n";
        } else {
          text += fmt::format("def fn_{}_{}_{}(x):  # line {}\n", d, f, i, i);
        }
      }
      std::ofstream(fmt::format("{}/mod{}.py", sub, f)) << text;
    }
  }
}

// Wall time of one child process, stdout discarded; < 0 if it cannot run.
double RunChild(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  auto t0 = Clock::now();
  pid_t pid;
  int rc = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return -1;
  int status;
  waitpid(pid, &status, 0);
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double CpuSeconds(int who) {
  struct rusage ru;
  getrusage(who, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

double P50(std::vector<double> xs) {
  std::sort(xs.begin(), xs.end());
  return xs.empty() ? 0 : xs[xs.size() / 2];
}

struct Timing {
  double wall = 0;  // p50 seconds
  double cpu = 0;   // mean CPU seconds per call
};

Timing TimeChild(int runs, const std::vector<std::string>& args) {
  std::vector<double> xs;
  const double c0 = CpuSeconds(RUSAGE_CHILDREN);
  for (int i = 0; i < runs; ++i) xs.push_back(RunChild(args));
  return {P50(xs), (CpuSeconds(RUSAGE_CHILDREN) - c0) / runs};
}

Timing TimeFn(int runs, const std::function<void()>& fn) {
  std::vector<double> xs;
  const double c0 = CpuSeconds(RUSAGE_SELF);
  for (int i = 0; i < runs; ++i) {
    auto t0 = Clock::now();
    fn();
    xs.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return {P50(xs), (CpuSeconds(RUSAGE_SELF) - c0) / runs};
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 50;
  int threads = 2;
  std::string dir;
  bool keep = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--runs" && i + 1 < argc) {
      runs = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--threads" && i + 1 < argc) {
      threads = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--dir" && i + 1 < argc) {
      dir = argv[++i];
    } else if (a == "--keep") {
      keep = true;
    } else {
      fmt::print(stderr,
                 "usage: sandboxd_fs_tree_bench [--runs N] [--threads T] [--dir D] [--keep]\n");
      return 2;
    }
  }
  std::optional<deepbox::testing::TempDir> made;  // removed at the end unless --keep
  if (dir.empty()) {
    auto tmp = deepbox::testing::TempDir::Make("deepbox-tree-bench");
    if (!tmp) {
      fmt::print(stderr, "{}\n", tmp.error().ToString());
      return 1;
    }
    made.emplace(std::move(*tmp));
    dir = keep ? made->Release().string() : made->path().string();
  }
  const std::string tree = dir + "/tree";
  if (!std::filesystem::exists(tree)) MakeTree(tree);

  deepbox::fs::RootOptions ro;
  ro.refuse_pseudo_fs = true;  // as the daemon serving "/"
  auto root = deepbox::fs::Root::Open("/", ro);
  if (!root) {
    fmt::print(stderr, "{}\n", root.error().ToString());
    return 1;
  }
  fs::GrepOptions go;
  go.path = tree;
  go.threads = threads;
  go.max_count = 1000;  // the daemon's default
  fs::GlobOptions glo;
  glo.path = tree;
  size_t grep_matches = 0, glob_paths = 0, ls_entries = 0;
  auto grep = [&] {
    auto r = fs::Grep(*root, "needle", go);
    grep_matches = r ? r->matches.size() : 0;
  };
  auto glob = [&] {
    auto r = fs::Glob(*root, "**/*.py", glo);
    glob_paths = r ? r->paths.size() : 0;
  };
  auto ls = [&] {
    auto r = fs::List(*root, tree + "/pkg3");
    ls_entries = r ? r->entries.size() : 0;
  };
  for (int i = 0; i < 3; ++i) {  // warm the page cache and dentries
    grep();
    glob();
    ls();
    RunChild({"grep", "-rHnF", "-e", "needle", tree});
  }
  struct Row {
    const char* name;
    Timing ours, theirs;
    const char* baseline;
  };
  std::vector<Row> rows;
  rows.push_back({"grep needle", TimeFn(runs, grep),
                  TimeChild(runs, {"grep", "-rHnF", "-e", "needle", tree}), "grep -rHnF"});
  rows.push_back({"glob **/*.py", TimeFn(runs, glob),
                  TimeChild(runs, {"find", tree, "-type", "f", "-name", "*.py"}), "find -name"});
  rows.push_back(
      {"ls pkg3", TimeFn(runs, ls), TimeChild(runs, {"ls", "-la", tree + "/pkg3"}), "ls -la"});
  fmt::print("tree: 1000 files; results: grep {} matches, glob {} paths, ls {} entries\n",
             grep_matches, glob_paths, ls_entries);
  fmt::print("{:<13} {:>9} {:>9} {:>7} {:>9} {:>9} {:>7}  baseline\n", "call", "wall ms", "base ms",
             "ratio", "cpu ms", "base cpu", "ratio");
  for (const auto& r : rows) {
    fmt::print("{:<13} {:>9.3f} {:>9.3f} {:>6.1f}x {:>9.3f} {:>9.3f} {:>6.1f}x  {}\n", r.name,
               r.ours.wall * 1e3, r.theirs.wall * 1e3,
               r.ours.wall > 0 ? r.theirs.wall / r.ours.wall : 0.0, r.ours.cpu * 1e3,
               r.theirs.cpu * 1e3, r.ours.cpu > 0 ? r.theirs.cpu / r.ours.cpu : 0.0, r.baseline);
  }
  return 0;
}
