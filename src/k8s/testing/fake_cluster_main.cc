// deepbox-fake-cluster: the C++ tests' fake cluster (FakeCluster: the fake
// API server speaking the Kubernetes wire protocol over HTTPS with a token,
// the fake agent-sandbox controller, a real deepbox-sandboxd standing in for
// every pod, the test sandbox router) as a process, for test harnesses in
// other languages (python/tests/test_k8s.py). Writes a kubeconfig into DIR,
// prints one JSON line
//   {"kubeconfig", "router_url", "router_token", "namespace", "warm_pool",
//    "daemon_root"}
// on stdout once the warm pool is ready, and runs until its stdin closes or
// it gets SIGTERM/SIGINT. Test-only: everything listens on 127.0.0.1.
//   deepbox-fake-cluster --dir DIR [--replicas N]
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <string>

#include "common/json.h"
#include "k8s/testing/fake_cluster.h"

using namespace deepbox;

namespace {

int Usage(const char* why) {
  std::fprintf(stderr,
               "deepbox-fake-cluster: %s\nusage: deepbox-fake-cluster --dir DIR [--replicas N]\n",
               why);
  return 2;
}

// Blocks until stdin reaches EOF (or fails) or a signal in `sfd` arrives.
void WaitForEnd(int sfd) {
  char buf[256];
  while (true) {
    pollfd fds[2] = {{STDIN_FILENO, POLLIN, 0}, {sfd, POLLIN, 0}};
    int n = ::poll(fds, 2, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    if (fds[0].revents != 0) {
      ssize_t got = ::read(STDIN_FILENO, buf, sizeof buf);
      if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN)) return;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  int replicas = 2;
  for (int i = 1; i < argc; ++i) {
    if (i + 1 >= argc) return Usage(fmt::format("{} needs a value", argv[i]).c_str());
    std::string flag = argv[i];
    std::string value = argv[++i];
    if (flag == "--dir") {
      dir = value;
    } else if (flag == "--replicas") {
      auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), replicas);
      if (ec != std::errc() || end != value.data() + value.size() || replicas < 1 ||
          replicas > 16) {
        return Usage("--replicas: a number from 1 to 16");
      }
    } else {
      return Usage(fmt::format("unknown flag {}", flag).c_str());
    }
  }
  if (dir.empty()) return Usage("--dir is required");

  // Blocked before any thread starts, so only the signalfd sees them.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  int sfd = ::signalfd(-1, &set, SFD_CLOEXEC);
  if (sfd < 0) {
    std::fprintf(stderr, "deepbox-fake-cluster: signalfd: %s\n", std::strerror(errno));
    return 1;
  }
  // Harnesses close the pipe to stop us; a write to a closed stdout must not kill us first.
  ::signal(SIGPIPE, SIG_IGN);

  k8s::testing::FakeClusterOptions options;
  options.replicas = replicas;
  auto cluster = k8s::testing::FakeCluster::Start(std::move(options));
  if (!cluster) {
    std::fprintf(stderr, "deepbox-fake-cluster: %s\n", cluster.error().ToString().c_str());
    return 1;
  }
  const auto& opts = (*cluster)->options();
  std::string kubeconfig = dir + "/kubeconfig";
  if (auto written = (*cluster)->server().WriteKubeconfig(kubeconfig, opts.namespace_name);
      !written) {
    std::fprintf(stderr, "deepbox-fake-cluster: %s\n", written.error().ToString().c_str());
    return 1;
  }
  json::object line;
  line["kubeconfig"] = kubeconfig;
  line["router_url"] = fmt::format("http://127.0.0.1:{}", (*cluster)->router().port());
  line["router_token"] = opts.router_token;
  line["namespace"] = opts.namespace_name;
  line["warm_pool"] = opts.warm_pool;
  line["daemon_root"] = (*cluster)->daemon().root();
  std::string text = ToJson(line) + "\n";
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);

  WaitForEnd(sfd);
  cluster->reset();  // stops the controller, the router, the daemon, the API server
  ::close(sfd);
  return 0;
}
