// Measures deepbox-sandboxd round trips over its unix socket, side by side
// with a baseline in the same run (this machine is noisy: compare ratios):
//   * native file ops (stat, read 4 KiB, write 4 KiB, ls of 100 entries) and
//     a `true` exec, p50/p99;
//   * the same file ops done the way Python deepagents' BaseSandbox does them:
//     one `python3 -c <script>` per operation, through the daemon's exec;
//   * idle daemon RSS.
// Usage: sandboxd_bench [iterations] [row...]   (release build recommended)
//   rows: stat read write ls names tree exec (default: all), e.g. to profile one;
//   SANDBOXD_BENCH_NO_PYTHON=1 leaves out the python3 -c baselines.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/base64.h"
#include "sandbox/sandboxd_client.h"
#include "sandbox/testing/scoped_sandboxd.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Stats {
  double p50_us = 0, p99_us = 0;
};

Stats Measure(int n, const std::function<bool()>& op) {
  for (int i = 0; i < std::min(n / 10 + 1, 20); ++i) op();  // warm-up
  std::vector<double> us;
  us.reserve(n);
  for (int i = 0; i < n; ++i) {
    auto t0 = Clock::now();
    if (!op()) {
      std::fprintf(stderr, "operation failed\n");
      std::exit(1);
    }
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  std::sort(us.begin(), us.end());
  return {us[us.size() / 2], us[std::min(us.size() - 1, us.size() * 99 / 100)]};
}

// "Rss:" or "Pss:" from smaps_rollup: RSS counts shared library pages in full;
// PSS divides them among the processes sharing them (what an extra sandbox costs).
long SmapsKb(pid_t pid, const std::string& key) {
  std::ifstream in(fmt::format("/proc/{}/smaps_rollup", pid));
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with(key)) return std::stol(line.substr(key.size()));
  }
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  int n = argc > 1 ? std::atoi(argv[1]) : 2000;
  if (n <= 0) {
    std::fprintf(stderr,
                 "usage: sandboxd_bench [iterations] [stat|read|write|ls|names|tree|exec...]\n");
    return 2;
  }
  const std::vector<std::string> only(argv + std::min(argc, 2), argv + argc);
  for (const auto& row : only) {
    if (row != "stat" && row != "read" && row != "write" && row != "ls" && row != "names" &&
        row != "tree" && row != "exec") {
      std::fprintf(stderr,
                   "sandboxd_bench: unknown row '%s' (stat read write ls names tree exec)\n",
                   row.c_str());
      return 2;
    }
  }
  auto wanted = [&](const std::string& row) {
    return only.empty() || std::find(only.begin(), only.end(), row) != only.end();
  };
  // SANDBOXD_BENCH_SOCKET=PATH: the daemon already listening there (e.g. a
  // local sandbox's, rt/run/sandboxd.sock in its state directory: the file
  // ops then land in its /workspace and python3 runs inside it), instead of
  // one started here on the host with its root under /tmp.
  const char* socket = std::getenv("SANDBOXD_BENCH_SOCKET");
  std::unique_ptr<deepbox::testing::ScopedSandboxd> daemon;
  std::unique_ptr<deepbox::SandboxdClient> given;
  if (socket != nullptr && *socket != '\0') {
    auto c = deepbox::SandboxdClient::Connect(std::string("unix:") + socket);
    if (!c) {
      std::fprintf(stderr, "cannot connect to %s: %s\n", socket, c.error().ToString().c_str());
      return 1;
    }
    given = std::move(*c);
  } else {
    auto d = deepbox::testing::ScopedSandboxd::Start();
    if (!d) {
      std::fprintf(stderr, "cannot start deepbox-sandboxd: %s\n", d.error().ToString().c_str());
      return 1;
    }
    daemon = std::move(*d);
  }
  auto& sb = given ? *given : daemon->client();
  std::string root = sb.root();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  long idle_rss = daemon ? SmapsKb(daemon->pid(), "Rss:") : -1;
  long idle_pss = daemon ? SmapsKb(daemon->pid(), "Pss:") : -1;
  long idle_anon = daemon ? SmapsKb(daemon->pid(), "Pss_Anon:") : -1;

  std::string page(4096, 'a');
  (void)sb.Write("bench/file.txt", page, 0644);
  for (int i = 0; i < 100; ++i) (void)sb.Write(fmt::format("bench/dir/f{:03}", i), "x", 0644);

  struct Row {
    std::string name;
    Stats native;
    std::optional<Stats> python;
  };
  std::vector<Row> rows;
  // SANDBOXD_BENCH_NO_PYTHON=1: the native rows only (to profile the daemon).
  const char* no_python = std::getenv("SANDBOXD_BENCH_NO_PYTHON");
  bool have_python = ::access("/usr/bin/python3", X_OK) == 0 &&
                     (no_python == nullptr || std::string_view(no_python) != "1");
  int py_n = std::max(20, n / 20);
  auto py = [&](const std::string& script) {
    return [&, script] {
      deepbox::ExecRequest r;
      r.shell = "/usr/bin/python3 -c \"" + script + "\" 2>&1";
      auto e = sb.Exec(r);
      return e && e->exit_code == 0;
    };
  };
  std::string file = root + "/bench/file.txt";
  std::string dir = root + "/bench/dir";

  if (wanted("stat")) {
    Row stat{"stat"};
    stat.native = Measure(n, [&] { return sb.Stat("bench/file.txt").has_value(); });
    if (have_python)
      stat.python = Measure(py_n, py("import os,json; s=os.stat('" + file +
                                     "'); print(json.dumps({'size': s.st_size}))"));
    rows.push_back(stat);
  }

  if (wanted("read")) {
    Row read{"read 4 KiB"};
    read.native = Measure(n, [&] { return sb.Read("bench/file.txt", {}).has_value(); });
    if (have_python)
      read.python = Measure(
          py_n, py("import json; print(json.dumps({'content': open('" + file + "').read()}))"));
    rows.push_back(read);
  }

  if (wanted("write")) {
    Row write{"write 4 KiB"};
    write.native = Measure(n, [&] { return sb.Write("bench/out.txt", page, 0644).has_value(); });
    if (have_python) {
      write.python = Measure(
          py_n, py("import base64,os; os.makedirs('" + root + "/bench', exist_ok=True); open('" +
                   root + "/bench/out2.txt','wb').write(base64.b64decode('" +
                   deepbox::Base64Encode(page) + "'))"));
    }
    rows.push_back(write);
  }

  // Both ls rows against one measurement of the same python3 listing
  // (deepagents' scandir + is_dir: names and types).
  std::optional<Stats> ls_python;
  auto ls_baseline = [&]() -> std::optional<Stats> {
    if (have_python && !ls_python) {
      ls_python = Measure(py_n, py("import os,json; print(json.dumps([{'path': e.path, 'is_dir': "
                                   "e.is_dir(follow_symlinks=False)} for e in os.scandir('" +
                                   dir + "')]))"));
    }
    return ls_python;
  };
  if (wanted("ls")) {
    Row ls{"ls 100 entries"};
    ls.native = Measure(n, [&] { return sb.List("bench/dir").has_value(); });
    ls.python = ls_baseline();
    rows.push_back(ls);
  }
  // The same listing as the agent's `ls` asks for it (names and types only,
  // as the baseline reads): no stat per entry.
  if (wanted("names")) {
    Row names{"ls 100 names"};
    names.native = Measure(n, [&] { return sb.ListNames("bench/dir").has_value(); });
    names.python = ls_baseline();
    rows.push_back(names);
  }

  if (wanted("tree")) {
    // What deepbox acp lists after every command to see what it changed
    // (fs/tree), against the same listing by python3 (os.walk + lstat) and by
    // GNU find -printf, the fastest a shell command can do it. 10,000 files.
    for (int d = 0; d < 100; ++d) {
      for (int f = 0; f < 100; ++f) {
        (void)sb.Write(fmt::format("tree/d{}/f{}.txt", d, f), "x", 0644);
      }
    }
    const int tree_n = std::max(10, n / 100);
    Row tree{"tree 10k files"};
    tree.native = Measure(tree_n, [&] {
      deepbox::TreeRequest t;
      t.path = root + "/tree";
      auto r = sb.Tree(t);
      return r && r->entries.size() == 10000;
    });
    if (have_python) {
      tree.python = Measure(
          tree_n,
          py("import os,json; R='" + root +
             "/tree'; print(json.dumps([[os.path.relpath(os.path.join(d,f),R),s.st_size,"
             "s.st_mtime_ns,s.st_mode&0o7777] for d,_,fs in os.walk(R) for f in fs for s in "
             "[os.lstat(os.path.join(d,f))]]))"));
    }
    rows.push_back(tree);
    if (::access("/usr/bin/find", X_OK) == 0) {
      Row find{"  find -printf"};
      find.native = Measure(tree_n, [&] {
        deepbox::ExecRequest r;
        r.argv = {"/usr/bin/find", root + "/tree", "-type", "f", "-printf", "%P %s %T@ %m\\n"};
        auto e = sb.Exec(r);
        return e && e->exit_code == 0;
      });
      rows.push_back(find);
    }
  }

  if (wanted("exec")) {
    Row exec{"exec true"};
    exec.native = Measure(n / 2, [&] {
      deepbox::ExecRequest r;
      r.argv = {"/bin/true"};
      auto e = sb.Exec(r);
      return e && e->exit_code == 0;
    });
    rows.push_back(exec);
  }

  std::printf(
      "deepbox-sandboxd round trips over a unix socket (%d iterations; python baseline %d)\n", n,
      py_n);
  std::printf("%-16s %12s %12s %16s %16s %10s\n", "operation", "p50 (us)", "p99 (us)",
              "python3-c p50", "python3-c p99", "speedup");
  for (const auto& r : rows) {
    if (r.python) {
      std::printf("%-16s %12.1f %12.1f %16.1f %16.1f %9.1fx\n", r.name.c_str(), r.native.p50_us,
                  r.native.p99_us, r.python->p50_us, r.python->p99_us,
                  r.python->p50_us / r.native.p50_us);
    } else {
      std::printf("%-16s %12.1f %12.1f %16s %16s %10s\n", r.name.c_str(), r.native.p50_us,
                  r.native.p99_us, "-", "-", "-");
    }
  }
  std::printf(
      "goals: file-op p50 < 150 us; exec true p50 < 2000 us; >= 50x vs python3 -c per op\n");
  if (daemon) {
    std::printf(
        "idle daemon: RSS %ld KiB, PSS %ld KiB, private anonymous %ld KiB (goal < 4096 KiB)\n",
        idle_rss, idle_pss, idle_anon);
  } else {
    std::printf("daemon at %s, root %s\n", socket, root.c_str());
  }
  return 0;
}
