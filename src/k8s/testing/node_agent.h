// Test-only: a node agent that plays kubelet for the k8s-real tests
// (tests/k8s/real/README.md). It watches the pods bound to its node, runs each
// as a deepbox local sandbox (`deepbox sandbox create`: real isolation) whose
// daemon it makes reachable on a loopback address (127.0.0.N:PORT, a TCP
// proxy to the sandbox's unix socket), reports the pod Running and Ready with
// that pod IP, and stops the sandbox when the pod is deleted (finishing a
// graceful deletion as kubelet does).
//
// A pod whose first container runs deepbox-sandboxd (deploy/k8s's template)
// gets that daemon, with the container's own arguments, as a process of the
// sandbox (next to the sandbox's init daemon), and the pod IP leads to it:
// its --listen is a unix socket in the sandbox's /tmp, the paths of the
// container's downwardAPI volume mounts are directories the agent writes
// from the host (owned by host root, so read-only to the sandbox's user, as
// kubelet's are) and rewrites, like kubelet, when the pod's labels or
// annotations change. Other pods are served by the sandbox's init daemon.
//
// Native sidecars (init containers with restartPolicy Always, e.g.
// deploy/k8s/sandbox-template-secrets.yaml's egress proxy) run only in a pod
// network a test gives (annotation deepbox.dev/test-pod-netns: a network
// namespace file, standing in for the CNI; a pod without it that has a
// sidecar fails to start, so no sidecar ever reaches this machine's own
// network; pods given one pod network share its ports, so a sidecar whose
// port is taken there fails at once instead of passing its probe on another
// pod's). Each runs as a host process under `nsenter` in that namespace,
// with its securityContext's uid and gid (never root), its env (literal
// values and secretKeyRef, read from the API as kubelet does) and its
// emptyDir mounts as host directories; it is ready when its startupProbe's
// TCP port answers. The sandbox container then gets, as in one pod:
//   * the pod's loopback ports of the sidecars (their containerPorts and
//     probe ports): 127.0.0.1:PORT in the sandbox's own netns is relayed to
//     127.0.0.1:PORT in the pod network;
//   * the emptyDirs it shares with a sidecar, as a copy of what the sidecar
//     wrote before it was ready (not a live share), under the same
//     /tmp/.deepbox-pod-volumes as the downwardAPI volumes;
//   * its env (literal values, mount paths rewritten) for its daemon and so
//     for every command.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/subprocess.h"
#include "common/unique_fd.h"
#include "k8s/rest_client.h"

namespace deepbox::k8s::testing {

struct NodeAgentOptions {
  std::string node_name = "deepbox-node";
  std::string deepbox = "deepbox";  // the CLI that creates and deletes the sandboxes
  std::string state_dir;            // DEEPBOX_STATE_DIR of those sandboxes ("" = default)
  int first_ip = 10;                // pod IPs 127.0.0.<first_ip>, ... up to .250
  // Also bind unscheduled pods to this node (no scheduler runs): for pods
  // that a controller other than ours creates without spec.nodeName.
  bool bind_unscheduled = false;
  // Where the pods' emptyDir volumes of sidecars and their logs go ("" = a
  // directory under /tmp named after this process).
  std::string pod_dir;
};

class LoopbackProxy;

class NodeAgent {
 public:
  static Result<std::unique_ptr<NodeAgent>> Start(RestConfig config, NodeAgentOptions options);
  ~NodeAgent();  // stops the watch; deletes the sandboxes it runs

 private:
  NodeAgent() = default;
  struct Pod {
    std::string sandbox_id;  // deepbox local sandbox
    std::string uid;         // the pod object's: a new pod of the same name is another
    std::string ip;
    std::unique_ptr<LoopbackProxy> proxy;
    // The container's daemon (see above): the sandbox's root as the host
    // sees it (/proc/<init>/root), and each downwardAPI file (host path ->
    // field path, e.g. "metadata.annotations['k']") with what it holds.
    std::string root;
    struct Projected {
      std::string field_path;
      std::string content;
      bool written = false;
    };
    std::map<std::string, Projected> projected;
    // Sidecars (see above): the pod network, this pod's host directory, the
    // emptyDirs they mount (volume name -> host directory), the processes,
    // and the relays of their ports into the sandbox's netns.
    std::string netns;
    std::string dir;
    std::map<std::string, std::string> shared_volumes;
    std::vector<Subprocess> sidecars;
    std::vector<int> sidecar_ports;
    std::vector<std::unique_ptr<LoopbackProxy>> bridges;
  };
  void Loop();
  void OnPod(const json::object& pod, bool deleted);
  Status Run(const std::string& ns, const std::string& name, const json::object& pod);
  void StopPod(const std::string& key);
  // The container's own deepbox-sandboxd (see above), started in the
  // sandbox; the socket the pod IP leads to.
  Result<std::string> StartContainerDaemon(Pod& p, const json::object& pod,
                                           const std::string& init_socket);
  // (Re)writes the pod's downwardAPI files from its current metadata.
  Status ProjectDownwardApi(Pod& p, const json::object& pod);
  // The pod's native sidecars (see above), started and ready.
  Status StartSidecars(Pod& p, const std::string& ns, const json::object& pod);
  // The sidecars' ports, relayed into the sandbox's netns (/proc/<init>).
  Status BridgeSidecarPorts(Pod& p);
  // "NAME=value" of a container's env entry (literal or secretKeyRef).
  Result<std::string> EnvValue(const std::string& ns, const json::value& entry);
  Status ReportRunning(const std::string& ns, const std::string& name, const std::string& ip);
  std::string NextIp();

  NodeAgentOptions options_;
  std::unique_ptr<KubeClient> client_;
  std::map<std::string, Pod> pods_;  // "ns/name"; the watch thread only
  int next_ip_ = 0;
  UniqueFd stop_fd_;
  std::thread thread_;
};

}  // namespace deepbox::k8s::testing
