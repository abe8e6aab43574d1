// deepbox-k8s-test-agent: what the k8s-real tests run next to a real control
// plane (scripts/k8s-real-cluster.sh, tests/k8s/real/README.md) in place of
// the agent-sandbox controller, kubelet and the sandbox router:
//   * the test controller (FakeController) as a real client of the API server
//     (RemoteStore): warm pools, claims, adoption, expiry; pods for Sandboxes;
//   * a node agent that runs each pod as a deepbox local sandbox reachable on
//     127.0.0.N (NodeAgent);
//   * a sandbox router on 127.0.0.1 that dials X-Sandbox-Pod-IP and refuses
//     requests without one (no DNS lookups).
// Runs until SIGTERM/SIGINT.
//   deepbox-k8s-test-agent --kubeconfig FILE --deepbox BIN --router-port-file FILE
//                          [--state-dir DIR] [--node NAME] [--node-only]
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>

#include "k8s/kubeconfig.h"
#include "k8s/testing/fake_controller.h"
#include "k8s/testing/node_agent.h"
#include "k8s/testing/remote_store.h"
#include "k8s/testing/test_router.h"

using namespace deepbox;
using namespace deepbox::k8s;

int main(int argc, char** argv) {
  std::string kubeconfig, deepbox_bin = "deepbox", port_file, state_dir, node = "deepbox-node";
  // --node-only: just the node agent, next to the upstream controller and
  // router (the opt-in conformance run, scripts/k8s-real-conformance.sh).
  bool node_only = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--node-only") == 0) {
      node_only = true;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "deepbox-k8s-test-agent: %s needs a value\n", argv[i]);
      return 2;
    }
    std::string a = argv[i];
    std::string v = argv[++i];
    if (a == "--kubeconfig")
      kubeconfig = v;
    else if (a == "--deepbox")
      deepbox_bin = v;
    else if (a == "--router-port-file")
      port_file = v;
    else if (a == "--state-dir")
      state_dir = v;
    else if (a == "--node")
      node = v;
    else {
      std::fprintf(stderr, "deepbox-k8s-test-agent: unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  if (kubeconfig.empty() || (port_file.empty() && !node_only)) {
    std::fprintf(stderr,
                 "usage: deepbox-k8s-test-agent --kubeconfig FILE --deepbox BIN "
                 "--router-port-file FILE [--state-dir DIR] [--node NAME]\n");
    return 2;
  }
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);  // before any thread: sigwait below

  KubeconfigOptions ko;
  ko.kubeconfig = kubeconfig;
  auto rest = LoadKubeconfig(ko);
  if (!rest) {
    std::fprintf(stderr, "deepbox-k8s-test-agent: %s\n", rest.error().ToString().c_str());
    return 1;
  }
  std::unique_ptr<deepbox::k8s::testing::FakeController> controller;
  if (!node_only) {
    auto store = deepbox::k8s::testing::RemoteStore::Start(*rest);
    if (!store) {
      std::fprintf(stderr, "deepbox-k8s-test-agent: %s\n", store.error().ToString().c_str());
      return 1;
    }
    std::shared_ptr<deepbox::k8s::testing::RemoteStore> shared_store(std::move(*store));
    deepbox::k8s::testing::FakeControllerOptions co;
    co.real_pods = true;
    co.node_name = node;
    // Store events drive it; the tick is for expiry only (TTLs are whole seconds).
    co.tick = std::chrono::milliseconds(250);
    // Claims arriving together are adopted together, as upstream does.
    co.claim_workers = 8;
    controller = std::make_unique<deepbox::k8s::testing::FakeController>(shared_store, co);
    controller->Start();
  }
  deepbox::k8s::testing::NodeAgentOptions no;
  no.node_name = node;
  no.deepbox = deepbox_bin;
  no.state_dir = state_dir;
  no.bind_unscheduled = node_only;  // the upstream controller leaves pods unscheduled
  auto agent = deepbox::k8s::testing::NodeAgent::Start(*rest, no);
  if (!agent) {
    std::fprintf(stderr, "deepbox-k8s-test-agent: %s\n", agent.error().ToString().c_str());
    return 1;
  }
  std::unique_ptr<deepbox::k8s::testing::TestRouter> router;
  if (!node_only) {
    auto started = deepbox::k8s::testing::TestRouter::Start("");
    if (!started) {
      std::fprintf(stderr, "deepbox-k8s-test-agent: %s\n", started.error().ToString().c_str());
      return 1;
    }
    router = std::move(*started);
    router->DialPodIps();
    std::string tmp = port_file + ".tmp";
    std::ofstream(tmp) << router->port() << "\n";
    if (::rename(tmp.c_str(), port_file.c_str()) != 0) {
      std::perror("deepbox-k8s-test-agent: rename");
      return 1;
    }
    std::fprintf(stderr, "deepbox-k8s-test-agent: router on %s\n", router->url().c_str());
  }
  int sig = 0;
  sigwait(&set, &sig);
  router.reset();
  agent->reset();  // deletes the pods' sandboxes
  if (controller) controller->Stop();
  return 0;
}
