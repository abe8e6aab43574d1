// Secrets proxy benchmark (issue 26): HTTPS request latency and download
// throughput through the intercepting egress proxy (local/tls_intercept.h),
// next to the same proxy's plain CONNECT tunnel and to no proxy at all, in
// one run, with one client: curl. See README.md. Every packet stays in the
// bench's own test world (local/testing/test_world.h): nothing leaves this
// machine. Needs root (network namespaces) and /usr/bin/curl.
//
//   bench_secrets_proxy [--requests N] [--connections N] [--bytes N] [--downloads N] [--raw]
//
// The upstream is the tests' HTTPS echo server (local/testing/tls_echo_server.h:
// HTTP/1.1 and h2, "/bytes/N" streams N bytes) in the world's hosts netns,
// with a leaf of a test CA (testing/test_pki.h) for allowed.test and
// other.test. Rows, for HTTP/1.1 and h2 (curl --http1.1 / --http2, ALPN):
//   no proxy     curl in the world netns (the "host") straight to the server
//   tunnel       a sandbox with --network allow=: other.test holds no secret,
//                so the proxy relays its TLS unread (a CONNECT tunnel)
//   intercepted  the same sandbox: allowed.test holds one, so the proxy ends
//                the sandbox's TLS with a leaf of the sandbox's CA, opens a
//                verified TLS upstream and puts the value into each request
// Every request carries "Authorization: Bearer <placeholder>" (the value
// once intercepted; checked on the server's side). Clients trust a bundle of
// the system's CAs plus one (the test CA; for the intercepted row the
// sandbox's bundle, by SSL_CERT_FILE), so each loads as much trust.
// Measured, with curl's own timers (not process start):
//   warm  --requests requests of 128 B on one keep-alive connection (one
//         curl, a URL glob): time_total of each, the first one left out
//   new   --connections curl runs, each a new connection: TCP (+ CONNECT) +
//         TLS (time_appconnect) + one request (time_total)
//   dl    /bytes/--bytes to /dev/null, median of --downloads: size over
//         time_total - time_appconnect (the transfer; curl's speed_download,
//         which includes the connection's setup, is shown next to it)
// --raw: the clients' output too, as it comes.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "common/random.h"
#include "common/testing/temp_dir.h"
#include "local/egress_proxy.h"
#include "local/launcher.h"
#include "local/testing/test_pki.h"
#include "local/testing/test_world.h"
#include "local/testing/tls_echo_server.h"
#include "sandbox/secrets.h"

namespace {

using namespace deepbox;
using namespace deepbox::local;
namespace fs = std::filesystem;

constexpr int kEchoPort = 8443;
constexpr const char* kSystemBundle = "/etc/ssl/certs/ca-certificates.crt";

// The client, run once per measurement: bench.sh KIND ROW VERSION BASE N BYTES [curl options].
// Prints "ROW VERSION KIND values..." lines (curl's timers, in seconds).
constexpr const char* kClientScript = R"SH(kind=$1 row=$2 ver=$3 base=$4 n=$5 bytes=$6
shift 6
auth="Authorization: Bearer $API_TOKEN"
c() { curl -q -sS --http$ver -H "$auth" "$@"; }
case $kind in
check)
  c "$@" "$base/check" | while IFS= read -r l; do echo "$row $ver check $l"; done ;;
warm)  # n + 1 requests on one connection; the first one opens it
  c "$@" -o /dev/null -w "$row $ver warm %{num_connects} %{time_total}\n" "$base/bytes/128?n=[0-$n]" ;;
new)
  i=0
  while [ $i -lt $n ]; do
    c "$@" -o /dev/null -w "$row $ver new %{time_appconnect} %{time_total}\n" "$base/bytes/128"
    i=$((i + 1))
  done ;;
dl)
  c "$@" -o /dev/null \
    -w "$row $ver dl %{size_download} %{time_appconnect} %{time_total} %{speed_download}\n" \
    "$base/bytes/$bytes" ;;
esac
)SH";

struct Plan {
  int requests = 200;
  int connections = 30;
  uint64_t bytes = 100ull << 20;
  int downloads = 3;
};

struct Sample {
  std::vector<double> warm;       // ms per request on a warm connection
  std::vector<double> new_tls;    // ms until the TLS with the server is up
  std::vector<double> new_total;  // ms for the whole run on a new connection
  std::vector<double> dl;         // MiB/s after the TLS handshake
  std::vector<double> dl_curl;    // MiB/s, curl's speed_download (setup included)
  std::string protocol;           // what the server saw ("http/1.1", "h2")
  std::string authorization;      // the Authorization header the server received
  bool warm_opened = false;       // the first warm request (it opens the connection) was seen
  int warm_reconnects = 0;        // later warm requests that opened a connection
  std::vector<std::string> errors;
};

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}
double P50(const std::vector<double>& v) { return Percentile(v, 0.5); }

// Adds the clients' output to samples["ROW VERSION"]; other lines to `stray`.
void Parse(const std::string& output, std::map<std::string, Sample>* samples,
           std::vector<std::string>* stray) {
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    std::istringstream ls(line);
    std::string row, ver, kind;
    ls >> row >> ver >> kind;
    if (row == "T") continue;  // when a call started (--raw)
    if (!(row == "direct" || row == "tunnel" || row == "intercept") ||
        !(ver == "1.1" || ver == "2")) {
      if (!line.empty()) stray->push_back(line);
      continue;
    }
    Sample& s = (*samples)[row + " " + ver];
    if (kind == "warm") {
      int connects = -1;
      double total = -1;
      ls >> connects >> total;
      if (total <= 0) {
        s.errors.push_back(line);
      } else if (!s.warm_opened) {
        s.warm_opened = true;
      } else if (connects != 0) {
        ++s.warm_reconnects;
      } else {
        s.warm.push_back(total * 1e3);
      }
    } else if (kind == "new") {
      double tls = -1, total = -1;
      ls >> tls >> total;
      if (tls <= 0 || total <= 0) {
        s.errors.push_back(line);
      } else {
        s.new_tls.push_back(tls * 1e3);
        s.new_total.push_back(total * 1e3);
      }
    } else if (kind == "dl") {
      double size = 0, tls = 0, total = 0, speed = 0;
      ls >> size >> tls >> total;
      ls >> speed;
      if (size <= 0 || total <= tls) {
        s.errors.push_back(line);
      } else {
        s.dl.push_back(size / (total - tls) / (1 << 20));
        s.dl_curl.push_back(speed / (1 << 20));
      }
    } else if (kind == "check") {
      std::string rest;
      std::getline(ls, rest);
      if (!rest.empty() && rest[0] == ' ') rest.erase(0, 1);
      if (rest.rfind("protocol ", 0) == 0) s.protocol = rest.substr(9, rest.find(' ', 9) - 9);
      if (rest.rfind("header authorization: ", 0) == 0) s.authorization = rest.substr(22);
    } else {
      stray->push_back(line);
    }
  }
}

struct ClientRow {
  std::string row;   // "direct", "tunnel", "intercept"
  std::string base;  // https://host:port
  std::string opts;  // more curl options
};

std::string Call(const std::string& script, const std::string& kind, const ClientRow& r,
                 const std::string& ver, int n, uint64_t bytes) {
  return fmt::format("echo T $(date +%s.%N) {1} {2} {3}\nsh {0} {1} {2} {3} {4} {5} {6} {7} 2>&1\n",
                     script, kind, r.row, ver, r.base, n, bytes, r.opts);
}

// The shell lines measuring `rows` over one HTTP version: each kind for every
// row in turn, so that the machine's drift spreads over all of them.
std::string Measurements(const std::string& script, const Plan& plan, const std::string& ver,
                         const std::vector<ClientRow>& rows) {
  std::string sh;
  for (const auto& r : rows) sh += Call(script, "check", r, ver, 0, 0);
  for (const auto& r : rows) sh += Call(script, "warm", r, ver, plan.requests, 0);
  for (const auto& r : rows) sh += Call(script, "new", r, ver, plan.connections, 0);
  for (int i = 0; i < plan.downloads; ++i) {
    for (const auto& r : rows) sh += Call(script, "dl", r, ver, 0, plan.bytes);
  }
  return sh;
}

// "curl 7.88.1 (OpenSSL/3.0.x)"
std::string CurlVersion() {
  std::string line;
  if (FILE* f = popen("/usr/bin/curl --version", "r")) {
    char buf[512];
    if (fgets(buf, sizeof(buf), f) != nullptr) line = buf;
    pclose(f);
  }
  std::istringstream in(line);
  std::string name, version, platform, lib, ssl;
  in >> name >> version >> platform >> lib >> ssl;
  return ssl.empty() ? "curl" : fmt::format("curl {} ({})", version, ssl);
}

}  // namespace

int main(int argc, char** argv) {
  Plan plan;
  bool raw = false;
  for (int i = 1; i < argc; ++i) {
    std::string f = argv[i];
    if (f == "--raw") {
      raw = true;
      continue;
    }
    if (i + 1 >= argc) break;
    if (f == "--requests") plan.requests = std::max(1, std::atoi(argv[i + 1]));
    if (f == "--connections") plan.connections = std::max(1, std::atoi(argv[i + 1]));
    if (f == "--bytes") plan.bytes = std::strtoull(argv[i + 1], nullptr, 10);
    if (f == "--downloads") plan.downloads = std::max(1, std::atoi(argv[i + 1]));
    ++i;
  }
  setvbuf(stdout, nullptr, _IOLBF, 0);
  if (geteuid() != 0) {
    std::fprintf(stderr,
                 "bench_secrets_proxy builds its test world with network namespaces: run it "
                 "as root\n");
    return 2;
  }
  if (access("/usr/bin/curl", X_OK) != 0) {
    std::fprintf(stderr, "bench_secrets_proxy needs /usr/bin/curl\n");
    return 2;
  }
  const std::string curl = CurlVersion();

  // Forked before any thread exists: the world's servers and the echo server.
  local::testing::TestWorld world;
  if (std::string why = world.Build("secretsbench"); !why.empty()) {
    std::fprintf(stderr, "test world: %s\n", why.c_str());
    return 1;
  }
  const auto pki = local::testing::MakeTestPki("allowed.test,other.test");
  const local::testing::TlsEchoConfig echo{pki.chain_pem, pki.key_pem, true};
  local::testing::WorldServer server(
      world.hosts().fd(), [] { return local::testing::BindAny(SOCK_STREAM, kEchoPort); },
      [echo](int s) { local::testing::ServeTlsEcho(s, echo); });
  if (!server.ready()) {
    std::fprintf(stderr, "the HTTPS echo server did not start\n");
    return 1;
  }

  auto tmp_dir = deepbox::testing::TempDir::Make("deepbox-secretsbench", "/tmp");
  if (!tmp_dir) return 1;
  const fs::path& tmp = tmp_dir->path();
  const fs::path ws = tmp / "ws";
  fs::create_directories(ws);
  chmod(ws.c_str(), 0755);
  std::ofstream(ws / "bench.sh") << kClientScript;
  std::ofstream(tmp / "upstream-ca.pem") << pki.ca_pem;
  {  // The system's CAs and the test CA: as much to load as the sandbox's bundle.
    std::ifstream system(kSystemBundle, std::ios::binary);
    std::ofstream bundle(ws / "test-bundle.pem", std::ios::binary);
    bundle << system.rdbuf() << pki.ca_pem;
  }
  const std::string placeholder = MakeSecretPlaceholder();
  const std::string value = "s3cr3t-" + RandomHex(40);
  const std::string port = std::to_string(kEchoPort);
  std::map<std::string, Sample> samples;
  std::vector<std::string> stray;

  // 1. No proxy: the same script in the world netns (as root), the server's
  //    address given (no resolver there), no proxy.
  {
    const std::string script = (ws / "bench.sh").string();
    const ClientRow direct{
        "direct", "https://allowed.test:" + port,
        fmt::format("--noproxy '*' --resolve allowed.test:{}:{} --cacert {}", port,
                    local::testing::TestWorld::kPublic4, (ws / "test-bundle.pem").string())};
    std::string sh;
    for (const char* ver : {"1.1", "2"}) sh += Measurements(script, plan, ver, {direct});
    const std::string token = "API_TOKEN=" + placeholder;
    local::testing::ChildRun run =
        local::testing::RunAsUserInNetns(world.ns().fd(), 0, [&](int fd) {
          dup2(fd, 1);
          dup2(fd, 2);
          const char* args[] = {"/bin/sh", "-c", sh.c_str(), nullptr};
          const char* env[] = {"PATH=/usr/bin:/bin", "HOME=/nonexistent", "LANG=C.UTF-8",
                               token.c_str(), nullptr};
          execve("/bin/sh", const_cast<char**>(args), const_cast<char**>(env));
          return 127;
        });
    if (raw) std::fwrite(run.output.data(), 1, run.output.size(), stdout);
    Parse(run.output, &samples, &stray);
  }

  // 2 and 3. One sandbox: allow= both hosts, a secret for allowed.test.
  EgressProxy::Stats stats;
  std::string launch_error;
  {
    const std::string script = "/workspace/bench.sh";
    const std::vector<ClientRow> rows = {
        {"tunnel", "https://other.test:" + port, "--cacert /workspace/test-bundle.pem"},
        {"intercept", "https://allowed.test:" + port, ""}};  // SSL_CERT_FILE: the sandbox's
    std::string sh;
    for (const char* ver : {"1.1", "2"}) sh += Measurements(script, plan, ver, rows);
    SandboxSpec spec;
    spec.id = fmt::format("secretsbench-{}", getpid());
    spec.runtime_dir = tmp / "rt";
    spec.workspace_dir = ws;
    spec.env = {"PATH=/usr/bin:/bin", "HOME=/workspace", "LANG=C.UTF-8"};
    spec.argv = {"/bin/sh", "-c", sh};
    spec.use_cgroups = false;
    spec.network = NetworkMode::kAllow;
    spec.public_network.allow = {"allowed.test", "allowed.test:" + port, "other.test:" + port};
    spec.public_network.allowed_cidrs = local::testing::TestWorld::AllowedCidrs();
    spec.public_network.uplink_netns = world.ns().path();
    spec.public_network.nameservers = {local::testing::TestWorld::kDns4};
    spec.secrets = {SecretGrant{"API_TOKEN", {"allowed.test"}, placeholder, value}};
    spec.secrets_upstream_ca_file = tmp / "upstream-ca.pem";
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) return 1;
    UniqueFd r(p[0]), w(p[1]);
    spec.stdout_fd = w.get();
    spec.stderr_fd = w.get();
    auto sp = Launch(spec);
    w.reset();
    if (!sp) {
      launch_error = sp.error().ToString();
    } else {
      std::string out;
      char buf[4096];
      for (ssize_t n; (n = read(r.get(), buf, sizeof(buf))) > 0;) {
        out.append(buf, static_cast<size_t>(n));
        if (raw) std::fwrite(buf, 1, static_cast<size_t>(n), stdout);
      }
      (void)sp->Wait(std::chrono::milliseconds(600000));
      if (sp->proxy() != nullptr) stats = sp->proxy()->stats();
      Parse(out, &samples, &stray);
    }
  }

  std::printf(
      "Secrets proxy: HTTPS through the intercepting egress proxy, its CONNECT tunnel and no "
      "proxy; %s in the bench's own test world\n"
      "warm: %d requests of 128 B on one keep-alive connection; new: %d connections, each "
      "TCP [+ CONNECT] + TLS + one request; download: %llu MiB, median of %d\n\n",
      curl.c_str(), plan.requests, plan.connections,
      static_cast<unsigned long long>(plan.bytes >> 20), plan.downloads);
  if (!launch_error.empty()) std::printf("sandbox launch failed: %s\n\n", launch_error.c_str());
  std::printf("%-27s %-8s %8s %8s %8s %9s %7s %10s %10s\n", "path", "proto", "warm p50", "warm p99",
              "new: TLS", "new: all", "MiB/s", "warm added", "MiB/s vs");
  std::printf("%-27s %-8s %8s %8s %8s %9s %7s %10s %10s\n", "", "", "ms", "ms", "ms p50", "ms p50",
              "", "vs tunnel", "tunnel");
  struct RowName {
    const char* key;
    const char* label;
  };
  const RowName names[] = {{"direct", "no proxy (world netns)"},
                           {"tunnel", "tunnel (other.test)"},
                           {"intercept", "intercepted (allowed.test)"}};
  std::vector<std::string> problems;
  for (const char* ver : {"1.1", "2"}) {
    const Sample* tunnel = nullptr;
    if (auto it = samples.find(std::string("tunnel ") + ver); it != samples.end()) {
      tunnel = &it->second;
    }
    for (const auto& name : names) {
      const std::string label = fmt::format("{} HTTP/{}", name.label, ver);
      auto it = samples.find(std::string(name.key) + " " + ver);
      if (it == samples.end()) {
        problems.push_back(label + ": no results");
        continue;
      }
      const Sample& s = it->second;
      std::string added = "-", ratio = "-";
      if (tunnel != nullptr && !tunnel->warm.empty() && !s.warm.empty()) {
        added = fmt::format("{:+.3f}", P50(s.warm) - P50(tunnel->warm));
      }
      if (tunnel != nullptr && !tunnel->dl.empty() && !s.dl.empty()) {
        ratio = fmt::format("{:.2f}x", P50(s.dl) / P50(tunnel->dl));
      }
      std::printf("%-27s %-8s %8.3f %8.3f %8.2f %9.2f %7.0f %10s %10s\n", name.label,
                  s.protocol.empty() ? ver : s.protocol.c_str(), P50(s.warm),
                  Percentile(s.warm, 0.99), P50(s.new_tls), P50(s.new_total), P50(s.dl),
                  added.c_str(), ratio.c_str());
      if (s.warm.size() != static_cast<size_t>(plan.requests) ||
          s.new_total.size() != static_cast<size_t>(plan.connections) ||
          s.dl.size() != static_cast<size_t>(plan.downloads)) {
        problems.push_back(fmt::format("{}: {} of {} warm, {} of {} new, {} of {} downloads", label,
                                       s.warm.size(), plan.requests, s.new_total.size(),
                                       plan.connections, s.dl.size(), plan.downloads));
      }
      if (s.warm_reconnects > 0) {
        problems.push_back(
            fmt::format("{}: {} warm requests opened a connection", label, s.warm_reconnects));
      }
      for (const auto& e : s.errors) problems.push_back(label + ": " + e);
      // What the server received: the value only where the proxy intercepted.
      const bool want_value = std::string(name.key) == "intercept";
      if (s.authorization != "Bearer " + (want_value ? value : placeholder)) {
        problems.push_back(fmt::format("{}: the server did not receive the {}", label,
                                       want_value ? "secret's value" : "placeholder"));
      }
    }
  }
  std::printf(
      "\nwarm: curl's time_total per request; new: time_appconnect (TLS up) and time_total; "
      "MiB/s: size / (time_total - time_appconnect)\n"
      "proxy: %llu connections intercepted, %llu secrets put in\n",
      static_cast<unsigned long long>(stats.intercepted),
      static_cast<unsigned long long>(stats.substituted));

  std::printf("\nIssue 26's goals, intercepted vs tunnel:\n");
  for (const char* ver : {"1.1", "2"}) {
    auto t = samples.find(std::string("tunnel ") + ver);
    auto i = samples.find(std::string("intercept ") + ver);
    if (t == samples.end() || i == samples.end() || t->second.warm.empty() ||
        i->second.warm.empty() || t->second.dl.empty() || i->second.dl.empty() ||
        t->second.new_total.empty() || i->second.new_total.empty()) {
      std::printf("  HTTP/%s: incomplete\n", ver);
      continue;
    }
    const Sample& ts = t->second;
    const Sample& is = i->second;
    double added = P50(is.warm) - P50(ts.warm);
    double added_new = P50(is.new_total) - P50(ts.new_total);
    double ratio = P50(is.dl) / P50(ts.dl);
    double ratio_curl = P50(is.dl_curl) / P50(ts.dl_curl);
    std::printf(
        "  HTTP/%-3s <= 1.5 ms added per request: %+.3f ms, %s (a new connection: %+.2f ms)\n"
        "            >= 80%% of the tunnel's throughput: %.0f%%, %s (curl's speed_download, "
        "setup included: %.0f%%)\n",
        ver, added, added <= 1.5 ? "met" : "MISSED", added_new, ratio * 100,
        ratio >= 0.8 ? "met" : "MISSED", ratio_curl * 100);
  }
  if (!problems.empty() || !stray.empty()) {
    std::printf("\nProblems:\n");
    for (const auto& p : problems) std::printf("  %s\n", p.c_str());
    for (size_t k = 0; k < stray.size() && k < 20; ++k) std::printf("  > %s\n", stray[k].c_str());
  }
  return problems.empty() && stray.empty() && launch_error.empty() ? 0 : 1;
}
