// Compares fs::Grep with `rg -j1` (same semantics: hidden files, no ignore
// files, binary files skipped, symlinks not followed) on a generated tree of
// text files. Prints one line per pattern with both times (best of N runs,
// warm page cache) and the ratio. Plain program: rg runs as a child process,
// its output discarded, ours kept in memory as the daemon would.
#include <fcntl.h>
#include <fmt/format.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/testing/temp_dir.h"
#include "fs/path_resolver.h"
#include "sandboxd/fs/grep.h"

extern char** environ;

namespace fs = deepbox::sandboxd::fs;
using Clock = std::chrono::steady_clock;

namespace {

// A tree of source-like text: many small files, some large ones, some
// dot-directories, a few binaries. Deterministic.
uint64_t Generate(const std::string& dir, uint64_t target_bytes) {
  std::mt19937_64 rng(7);
  const std::vector<std::string> words = {
      "return", "const",  "auto",  "std::string", "if",      "else",   "for",    "while",
      "int",    "size_t", "void",  "namespace",   "struct",  "class",  "public", "private",
      "value",  "result", "error", "buffer",      "options", "config", "path",   "file",
      "the",    "of",     "and",   "to",          "in",      "is",     "that",   "for",
      "(",      ")",      "{",     "}",           ";",       "=",      "==",     "->",
      "0",      "1",      "42",    "nullptr",     "true",    "false",  "fn",     "let",
      "mut",    "self",   "impl",  "pub",         "use",     "match",  "Some",   "None"};
  uint64_t total = 0;
  int file_no = 0;
  std::string text;
  while (total < target_bytes) {
    const int f = file_no++;
    std::string sub = fmt::format("{}/pkg{}/mod{}", f % 11 == 0 ? "/.cache" : "", f % 37, f % 7);
    std::filesystem::create_directories(dir + sub);
    // Mostly 2-40 KiB, one in 200 is 1-4 MiB.
    uint64_t size = (f % 200 == 0) ? (1 << 20) + rng() % (3 << 20) : 2048 + rng() % (38 << 10);
    text.clear();
    while (text.size() < size) {
      size_t indent = (rng() % 6) * 2;
      text.append(indent, ' ');
      size_t n = 3 + rng() % 12;
      for (size_t i = 0; i < n; ++i) {
        if (i) text += ' ';
        text += words[rng() % words.size()];
        if (rng() % 5000 == 0) text += "_deepbox_needle";
        if (rng() % 800 == 0) text += " my_func_test";
      }
      text += '\n';
    }
    if (f % 97 == 0) text[10] = '\0';  // binary
    std::ofstream(dir + sub + fmt::format("/file{}.{}", f, f % 3 ? "cc" : "rs"), std::ios::binary)
        .write(text.data(), static_cast<std::streamsize>(text.size()));
    total += text.size();
  }
  return total;
}

double CpuSeconds(int who) {
  struct rusage ru;
  getrusage(who, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

double RunRg(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  auto t0 = Clock::now();
  pid_t pid;
  if (posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ) != 0) return -1;
  int status;
  waitpid(pid, &status, 0);
  posix_spawn_file_actions_destroy(&actions);
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t mb = 50;
  std::string dir;
  bool keep = false;
  int runs = 5;
  int only = -1;  // run one case only
  bool no_rg = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--mb" && i + 1 < argc)
      mb = std::stoull(argv[++i]);
    else if (a == "--dir" && i + 1 < argc)
      dir = argv[++i];
    else if (a == "--runs" && i + 1 < argc)
      runs = std::stoi(argv[++i]);
    else if (a == "--keep")
      keep = true;
    else if (a == "--only" && i + 1 < argc)
      only = std::stoi(argv[++i]);
    else if (a == "--no-rg")
      no_rg = true;
  }
  std::optional<deepbox::testing::TempDir> generated;  // removed at the end unless --keep
  if (dir.empty()) {
    auto tmp = deepbox::testing::TempDir::Make("deepbox-grep-bench");
    if (!tmp) {
      fmt::print(stderr, "{}\n", tmp.error().ToString());
      return 1;
    }
    generated.emplace(std::move(*tmp));
    dir = keep ? generated->Release().string() : generated->path().string();
    auto t0 = Clock::now();
    uint64_t bytes = Generate(dir, mb << 20);
    fmt::print("generated {:.1f} MB in {} in {:.1f}s\n", bytes / 1048576.0, dir,
               std::chrono::duration<double>(Clock::now() - t0).count());
  }
  auto root = deepbox::fs::Root::Open(dir);
  if (!root) {
    fmt::print(stderr, "{}\n", root.error().ToString());
    return 1;
  }
  struct Case {
    const char* name;
    std::string pattern;
    bool regex;
    bool ci;
    bool count = false;  // rg -c / kCount: no line materialization
  };
  const std::vector<Case> cases = {
      {"rare literal", "_deepbox_needle", false, false},
      {"common literal", "return", false, false},
      {"common -c", "return", false, false, true},
      {"literal -i", "DEEPBOX_NEEDLE", false, true},
      {"regex", "fn\\s+[a-z_]+_test", true, false},
  };
  const bool have_rg = !no_rg && RunRg({"rg", "--version"}) >= 0;
  fmt::print("{:<16} {:>10} {:>10} {:>7}   {:>10} {:>10} {:>9}\n", "pattern", "deepbox s",
             "rg -j1 s", "ratio", "our cpu s", "rg cpu s", "matches");
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    if (only >= 0 && static_cast<size_t>(only) != ci) continue;
    const Case& c = cases[ci];
    fs::GrepOptions o;
    o.regex = c.regex;
    o.case_insensitive = c.ci;
    o.max_count = size_t{1} << 40;
    if (c.count) o.output_mode = fs::GrepOutputMode::kCount;
    double best = 1e9;
    double cpu = 1e9;
    size_t matches = 0;
    for (int r = 0; r < runs + 1; ++r) {  // first run warms the page cache
      double c0 = CpuSeconds(RUSAGE_SELF);
      auto t0 = Clock::now();
      auto res = fs::Grep(*root, c.pattern, o);
      double t = std::chrono::duration<double>(Clock::now() - t0).count();
      if (r > 0) cpu = std::min(cpu, CpuSeconds(RUSAGE_SELF) - c0);
      if (!res) {
        fmt::print(stderr, "{}\n", res.error().ToString());
        return 1;
      }
      matches = res->matches.size();
      if (c.count) {
        matches = 0;
        for (const auto& fc : res->counts) matches += fc.count;
      }
      if (r > 0) best = std::min(best, t);
    }
    double rg_best = -1;
    double rg_cpu = 1e9;
    if (have_rg) {
      std::vector<std::string> args = {
          "rg",       "--no-config", "-j1",           "--no-heading", "-n",
          "--hidden", "--no-ignore", "--no-messages", "--color=never"};
      if (!c.regex) args.push_back("-F");
      if (c.ci) args.push_back("-i");
      if (c.count) args.push_back("-c");
      args.push_back("-e");
      args.push_back(c.pattern);
      args.push_back(dir);
      rg_best = 1e9;
      for (int r = 0; r < runs + 1; ++r) {
        double c0 = CpuSeconds(RUSAGE_CHILDREN);
        double t = RunRg(args);
        if (r > 0) {
          rg_best = std::min(rg_best, t);
          rg_cpu = std::min(rg_cpu, CpuSeconds(RUSAGE_CHILDREN) - c0);
        }
      }
    }
    fmt::print("{:<16} {:>10.3f} {:>10.3f} {:>7.2f}   {:>10.3f} {:>10.3f} {:>9}\n", c.name, best,
               rg_best, rg_best > 0 ? best / rg_best : 0.0, cpu, rg_cpu, matches);
  }
  return 0;
}
