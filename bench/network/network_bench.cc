// Network uplink benchmark: HTTP download throughput and TCP connect latency
// from inside a sandbox to a test host, through each uplink, in one run. See
// README.md. Every packet stays in the bench's own test world
// (local/testing/test_world.h): nothing leaves this machine.
//
//   bench_network [--bytes N] [--downloads N] [--connects N]
//   (internal) bench_network --client MODE HOST BYTES DOWNLOADS CONNECTS
#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "common/testing/temp_dir.h"
#include "local/launcher.h"
#include "local/namespaces.h"
#include "local/testing/test_world.h"

namespace {

using namespace deepbox;
using namespace deepbox::local;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr int kDownloadPort = 7000;  // "GET /N" -> N bytes (HTTP/1.0 style)
constexpr int kConnectPort = 7001;   // accept + close

double Since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

int Dial(const std::string& host, int port) {
  sockaddr_storage ss{};
  socklen_t len;
  auto* a4 = reinterpret_cast<sockaddr_in*>(&ss);
  auto* a6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (inet_pton(AF_INET, host.c_str(), &a4->sin_addr) == 1) {
    a4->sin_family = AF_INET;
    a4->sin_port = htons(static_cast<uint16_t>(port));
    len = sizeof(*a4);
  } else if (inet_pton(AF_INET6, host.c_str(), &a6->sin6_addr) == 1) {
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons(static_cast<uint16_t>(port));
    len = sizeof(*a6);
  } else {
    return -1;
  }
  int s = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return -1;
  if (connect(s, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    close(s);
    return -1;
  }
  return s;
}

bool SendAll(int s, const std::string& d) {
  size_t off = 0;
  while (off < d.size()) {
    ssize_t n = send(s, d.data() + off, d.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

// Reads until "\r\n\r\n"; returns what came after it (or nullopt).
std::optional<std::string> ReadHead(int s) {
  std::string got;
  char buf[4096];
  while (got.find("\r\n\r\n") == std::string::npos) {
    ssize_t n = recv(s, buf, sizeof(buf), 0);
    if (n <= 0) return std::nullopt;
    got.append(buf, static_cast<size_t>(n));
  }
  return got.substr(got.find("\r\n\r\n") + 4);
}

// Opens a connection to the download/connect server: direct, or through the
// allowlist proxy (CONNECT allowed.test:PORT, a plain tunnel).
int Open(const std::string& mode, const std::string& host, int port) {
  if (mode != "proxy") return Dial(host, port);
  int s = Dial("127.0.0.1", kEgressProxyPort);
  if (s < 0) return -1;
  if (!SendAll(s, fmt::format("CONNECT allowed.test:{0} HTTP/1.1\r\nHost: allowed.test:{0}\r\n\r\n",
                              port))) {
    close(s);
    return -1;
  }
  auto rest = ReadHead(s);
  if (!rest || !rest->empty()) {
    close(s);
    return -1;
  }
  return s;
}

// Inside the sandbox: prints "gbps=X p50_us=Y p99_us=Z".
int Client(const std::string& mode, const std::string& host, uint64_t bytes, int downloads,
           int connects) {
  std::vector<double> rates;
  std::vector<char> buf(1 << 20);
  for (int i = 0; i < downloads; ++i) {
    auto t0 = Clock::now();
    int s = Open(mode, host, kDownloadPort);
    if (s < 0) {
      std::printf("error=download connect %s\n", strerror(errno));
      return 1;
    }
    SendAll(s, fmt::format("GET /{} HTTP/1.0\r\n\r\n", bytes));
    auto body = ReadHead(s);
    uint64_t got = body ? body->size() : 0;
    for (ssize_t n; (n = recv(s, buf.data(), buf.size(), 0)) > 0;) got += static_cast<uint64_t>(n);
    close(s);
    if (got != bytes) {
      std::printf("error=short download %llu of %llu\n", static_cast<unsigned long long>(got),
                  static_cast<unsigned long long>(bytes));
      return 1;
    }
    rates.push_back(static_cast<double>(bytes) * 8 / (Since(t0) * 1e3));  // Gbit/s
  }
  std::vector<double> lat;
  for (int i = 0; i < connects; ++i) {
    auto t0 = Clock::now();
    int s = Open(mode, host, kConnectPort);
    if (s < 0) {
      std::printf("error=connect %s\n", strerror(errno));
      return 1;
    }
    lat.push_back(Since(t0));
    close(s);
  }
  std::sort(rates.begin(), rates.end());
  std::sort(lat.begin(), lat.end());
  std::printf("gbps=%.2f p50_us=%.0f p99_us=%.0f\n", rates[rates.size() / 2], lat[lat.size() / 2],
              lat[std::min(lat.size() - 1, lat.size() * 99 / 100)]);
  return 0;
}

// The servers, in the world's hosts netns (forked before any thread).
void Serve(int s, bool download) {
  std::string chunk(1 << 20, 'x');
  for (;;) {
    int c = accept4(s, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) continue;
    if (!download) {
      close(c);
      continue;
    }
    if (fork() == 0) {
      char req[256] = {};
      ssize_t n = recv(c, req, sizeof(req) - 1, 0);
      uint64_t want = n > 5 ? std::strtoull(req + 5, nullptr, 10) : 0;
      SendAll(c, fmt::format("HTTP/1.0 200 OK\r\nContent-Length: {}\r\n\r\n", want));
      while (want > 0) {
        size_t k = static_cast<size_t>(std::min<uint64_t>(want, chunk.size()));
        ssize_t w = send(c, chunk.data(), k, MSG_NOSIGNAL);
        if (w <= 0) break;
        want -= static_cast<uint64_t>(w);
      }
      _exit(0);
    }
    close(c);
    while (waitpid(-1, nullptr, WNOHANG) > 0) {
    }
  }
}

struct Row {
  std::string name;
  std::string result;  // client output or why skipped
  double gbps = 0, p50 = 0, p99 = 0;
  bool ok = false;
};

void Parse(Row* row) {
  double g = 0, p50 = 0, p99 = 0;
  if (std::sscanf(row->result.c_str(), "gbps=%lf p50_us=%lf p99_us=%lf", &g, &p50, &p99) == 3) {
    row->ok = true;
    row->gbps = g;
    row->p50 = p50;
    row->p99 = p99;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 7 && std::string(argv[1]) == "--client") {
    return Client(argv[2], argv[3], std::strtoull(argv[4], nullptr, 10), std::atoi(argv[5]),
                  std::atoi(argv[6]));
  }
  uint64_t bytes = 256ull << 20;
  int downloads = 5, connects = 500;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string f = argv[i];
    if (f == "--bytes") bytes = std::strtoull(argv[i + 1], nullptr, 10);
    if (f == "--downloads") downloads = std::atoi(argv[i + 1]);
    if (f == "--connects") connects = std::atoi(argv[i + 1]);
  }
  if (geteuid() != 0) {
    std::fprintf(stderr,
                 "bench_network builds its test world with network namespaces: run it "
                 "as root\n");
    return 2;
  }
  local::testing::TestWorld world;
  if (std::string why = world.Build("bench"); !why.empty()) {
    std::fprintf(stderr, "test world: %s\n", why.c_str());
    return 1;
  }
  local::testing::WorldServer dl(
      world.hosts().fd(), [] { return local::testing::BindAny(SOCK_STREAM, kDownloadPort); },
      [](int s) { Serve(s, true); });
  local::testing::WorldServer cn(
      world.hosts().fd(), [] { return local::testing::BindAny(SOCK_STREAM, kConnectPort); },
      [](int s) { Serve(s, false); });
  // The veth path needs forwarding in its uplink: the world only (a test netns).
  (void)world.ns().Sh("echo 1 > /proc/sys/net/ipv4/ip_forward");
  auto tmp_dir = deepbox::testing::TempDir::Make("deepbox-netbench", "/tmp");  // a short path
  if (!tmp_dir) return 1;
  const fs::path& tmp = tmp_dir->path();
  fs::create_directories(tmp / "ws");
  fs::copy_file("/proc/self/exe", tmp / "ws" / "netbench");
  chmod((tmp / "ws" / "netbench").c_str(), 0755);
  const std::string host = local::testing::TestWorld::kPublic4;
  auto client_argv = [&](const std::string& mode) {
    return std::vector<std::string>{"/workspace/netbench",
                                    "--client",
                                    mode,
                                    host,
                                    std::to_string(bytes),
                                    std::to_string(downloads),
                                    std::to_string(connects)};
  };
  int counter = 0;
  auto run_sandbox = [&](SandboxSpec spec, const std::string& mode,
                         const std::function<std::string(pid_t)>& attach) -> std::string {
    spec.id = fmt::format("netbench-{}-{}", getpid(), counter++);
    spec.runtime_dir = tmp / ("rt" + std::to_string(counter));
    spec.workspace_dir = tmp / "ws";
    spec.env = {"PATH=/usr/bin:/bin"};
    spec.argv = client_argv(mode);
    spec.use_cgroups = false;
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) return "pipe2 failed";
    UniqueFd r(p[0]), w(p[1]);
    spec.stdout_fd = w.get();
    spec.stderr_fd = w.get();
    if (attach) {
      // Wait for the uplink before the client runs: a shell that waits on stdin.
      spec.argv.insert(spec.argv.begin(), {"/bin/sh", "-c", "read x; exec \"$@\"", "sh"});
    }
    int in[2];
    if (pipe2(in, O_CLOEXEC) != 0) return "pipe2 failed";
    UniqueFd in_r(in[0]), in_w(in[1]);
    spec.stdin_fd = in_r.get();
    auto sp = Launch(spec);
    w.reset();
    in_r.reset();
    if (!sp) return "launch: " + sp.error().ToString();
    std::string note;
    if (attach) note = attach(sp->pid());
    (void)!write(in_w.get(), "go\n", 3);
    in_w.reset();
    std::string out;
    char buf[4096];
    for (ssize_t n; (n = read(r.get(), buf, sizeof(buf))) > 0;) {
      out.append(buf, static_cast<size_t>(n));
    }
    (void)sp->Wait(std::chrono::milliseconds(600000));
    while (!out.empty() && out.back() == '\n') out.pop_back();
    return note.empty() ? out : note + "; " + out;
  };

  std::vector<Row> rows;
  {  // The floor: the client in the world itself, no sandbox.
    Row row{"no sandbox (the world netns)"};
    local::testing::ChildRun run =
        local::testing::RunAsUserInNetns(world.ns().fd(), 0, [&](int fd) {
          std::string self = (tmp / "ws" / "netbench").string();
          auto args = client_argv("direct");
          args[0] = self;
          std::vector<char*> a;
          for (auto& s : args) a.push_back(s.data());
          a.push_back(nullptr);
          dup2(fd, 1);
          execv(self.c_str(), a.data());
          return 127;
        });
    row.result = run.output;
    while (!row.result.empty() && row.result.back() == '\n') row.result.pop_back();
    rows.push_back(row);
  }
  SandboxSpec base;
  base.public_network.uplink_netns = world.ns().path();
  base.public_network.nameservers = local::testing::TestWorld::Nameservers();
  base.public_network.allowed_cidrs =
      local::testing::TestWorld::AllowedCidrs();  // documentation hosts
  {
    Row row{"veth + NAT (kernel, ip_forward=1)"};
    SandboxSpec s = base;
    s.network = NetworkMode::kPublic;
    s.public_network.uplink = UplinkChoice::kVeth;
    s.public_network.slot = 4242;
    row.result = run_sandbox(s, "direct", nullptr);
    rows.push_back(row);
  }
  {
    Row row{"pasta (chosen userspace uplink)"};
    SandboxSpec s = base;
    s.network = NetworkMode::kPublic;
    s.public_network.uplink = UplinkChoice::kPasta;
    row.result = run_sandbox(s, "direct", nullptr);
    rows.push_back(row);
  }
  {
    Row row{"slirp4netns 1.2 (not used; compared)"};
    if (access("/usr/bin/slirp4netns", X_OK) != 0) {
      row.result = "skipped: slirp4netns is not installed";
    } else {
      SandboxSpec s = base;
      s.network = NetworkMode::kNone;
      pid_t slirp = -1;
      row.result = run_sandbox(s, "direct", [&](pid_t pid) -> std::string {
        // Run slirp4netns inside the world (its sockets land there), like pasta.
        int ready[2];
        if (pipe2(ready, 0) != 0) return "pipe2 failed";
        slirp = fork();
        if (slirp == 0) {
          close(ready[0]);
          if (setns(world.ns().fd(), CLONE_NEWNET) != 0) _exit(126);
          int null = open("/dev/null", O_WRONLY);
          dup2(null, 1);
          dup2(null, 2);
          std::string p = std::to_string(pid), fd = std::to_string(ready[1]);
          execl("/usr/bin/slirp4netns", "slirp4netns", "--configure", "--mtu=65520",
                "--disable-host-loopback", "--ready-fd", fd.c_str(), p.c_str(), "eth0",
                static_cast<char*>(nullptr));
          _exit(127);
        }
        close(ready[1]);
        char c;
        bool ok = read(ready[0], &c, 1) == 1;
        close(ready[0]);
        return ok ? "" : "slirp4netns did not start";
      });
      if (slirp > 0) {
        kill(slirp, SIGKILL);  // our child, not yet reaped: its pid is still ours
        waitpid(slirp, nullptr, 0);
      }
    }
    rows.push_back(row);
  }
  {
    Row row{"allow= proxy (CONNECT tunnel, pasta-free)"};
    SandboxSpec s = base;
    s.network = NetworkMode::kAllow;
    // Entries with a port allow it besides 80 and 443; "!plain": the tunnel
    // carries the raw download (not TLS).
    s.public_network.allow = {fmt::format("allowed.test:{}!plain", kDownloadPort),
                              fmt::format("allowed.test:{}!plain", kConnectPort)};
    s.public_network.nameservers = {local::testing::TestWorld::kDns4};
    row.result = run_sandbox(s, "proxy", nullptr);
    rows.push_back(row);
  }
  for (auto& r : rows) Parse(&r);

  const Row* veth = nullptr;
  for (const auto& r : rows) {
    if (r.name.rfind("veth", 0) == 0 && r.ok) veth = &r;
  }
  std::printf(
      "Network uplinks: %llu MiB HTTP downloads (median of %d) and %d TCP connects, "
      "from inside a sandbox to %s in the bench's own test world\n\n",
      static_cast<unsigned long long>(bytes >> 20), downloads, connects, host.c_str());
  std::printf("%-42s %10s %12s %12s %14s %14s\n", "path", "Gbit/s", "connect p50", "connect p99",
              "Gbit/s vs veth", "p50 vs veth");
  for (const auto& r : rows) {
    if (!r.ok) {
      std::printf("%-42s %s\n", r.name.c_str(), r.result.c_str());
      continue;
    }
    std::string tr = veth ? fmt::format("{:.2f}x", r.gbps / veth->gbps) : "-";
    std::string lr = veth ? fmt::format("{:.2f}x", r.p50 / veth->p50) : "-";
    std::printf("%-42s %10.2f %9.0f us %9.0f us %14s %14s\n", r.name.c_str(), r.gbps, r.p50, r.p99,
                tr.c_str(), lr.c_str());
  }
  return 0;
}
