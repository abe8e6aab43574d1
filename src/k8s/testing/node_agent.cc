#include "k8s/testing/node_agent.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/fsuid.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "common/base64.h"
#include "common/subprocess.h"
#include "k8s/util.h"
#include "k8s/watch.h"
#include "net/http_client.h"

namespace deepbox::k8s::testing {

namespace {

Result<UniqueFd> ListenTcpLoopback(const std::string& ip, int port) {
  UniqueFd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s) return MakeSyscallError("socket", errno);
  int one = 1;
  (void)::setsockopt(s.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, ip.c_str(), &addr.sin_addr) != 1) {
    return MakeError(ErrorCode::kInvalidArgument, "bad pod IP " + ip);
  }
  if (::bind(s.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    return MakeSyscallError("bind", errno, fmt::format("{}:{}", ip, port));
  }
  if (::listen(s.get(), 64) != 0) return MakeSyscallError("listen", errno);
  return s;
}

Result<UniqueFd> ConnectTcpLoopback(int port) {
  UniqueFd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s) return MakeSyscallError("socket", errno);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(s.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    return MakeSyscallError("connect", errno, fmt::format("127.0.0.1:{}", port));
  }
  return s;
}

UniqueFd ConnectUnix(const std::string& path) {
  UniqueFd s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (!s || path.size() >= sizeof addr.sun_path) return UniqueFd();
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  if (::connect(s.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return UniqueFd();
  return s;
}

// make() on a thread that joined the network namespace at `netns_path`
// (a socket keeps the namespace it was made in, whoever holds it).
Result<UniqueFd> InNetns(const std::string& netns_path,
                         const std::function<Result<UniqueFd>()>& make) {
  Result<UniqueFd> out = MakeError(ErrorCode::kInternal, "not run");
  std::thread t([&] {
    UniqueFd ns(::open(netns_path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!ns) {
      out = MakeSyscallError("open", errno, netns_path);
    } else if (::setns(ns.get(), CLONE_NEWNET) != 0) {
      out = MakeSyscallError("setns", errno, netns_path);
    } else {
      out = make();
    }
  });
  t.join();
  return out;
}

}  // namespace

// Accepts on a listening socket and relays each connection to the one
// dial() opens (the sandbox's daemon; a sidecar's port in the pod network).
// One thread accepts, one per connection relays; Stop (the destructor) wakes
// and joins them all.
class LoopbackProxy {
 public:
  using Dial = std::function<UniqueFd()>;
  static Result<std::unique_ptr<LoopbackProxy>> Serve(UniqueFd listener, Dial dial) {
    std::unique_ptr<LoopbackProxy> p(new LoopbackProxy());
    p->dial_ = std::move(dial);
    p->listen_ = std::move(listener);
    p->stop_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!p->stop_) return MakeSyscallError("eventfd", errno);
    p->accept_thread_ = std::thread([raw = p.get()] { raw->AcceptLoop(); });
    return p;
  }
  // ip:port of the host to the unix socket of a sandbox's daemon.
  static Result<std::unique_ptr<LoopbackProxy>> Start(const std::string& ip, int port,
                                                      std::string socket_path) {
    auto listener = ListenTcpLoopback(ip, port);
    if (!listener) return tl::unexpected(listener.error());
    return Serve(std::move(*listener),
                 [path = std::move(socket_path)] { return ConnectUnix(path); });
  }
  ~LoopbackProxy() {
    uint64_t one = 1;
    (void)::write(stop_.get(), &one, sizeof one);
    if (accept_thread_.joinable()) accept_thread_.join();
    std::vector<std::thread> conns;
    {
      std::lock_guard lock(mu_);
      conns.swap(conns_);
    }
    for (auto& t : conns) t.join();
  }

 private:
  LoopbackProxy() = default;
  void AcceptLoop() {
    for (;;) {
      pollfd fds[2] = {{stop_.get(), POLLIN, 0}, {listen_.get(), POLLIN, 0}};
      if (::poll(fds, 2, -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (fds[0].revents != 0) return;
      int c = ::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      UniqueFd client(c);
      // The daemon's answers come in pieces (a stream's head, then its
      // events): with Nagle on, each small piece after the first waits for
      // the router's delayed ACK (40 ms). A pod's own socket is the daemon's,
      // which sets TCP_NODELAY as every deepbox listener does.
      int one = 1;
      (void)::setsockopt(client.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      std::lock_guard lock(mu_);
      conns_.emplace_back(
          [this, fd = std::make_shared<UniqueFd>(std::move(client))] { Relay(std::move(*fd)); });
    }
  }
  void Relay(UniqueFd client) {
    UniqueFd backend = dial_();
    if (!backend) return;
    char buf[65536];
    bool open[2] = {true, true};  // client->backend, backend->client
    while (open[0] || open[1]) {
      // A finished direction's fd is left out (-1): poll reports POLLHUP
      // whatever the events asked, and a half-closed connection would spin.
      pollfd fds[3] = {{stop_.get(), POLLIN, 0},
                       {open[0] ? client.get() : -1, POLLIN, 0},
                       {open[1] ? backend.get() : -1, POLLIN, 0}};
      if (::poll(fds, 3, -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (fds[0].revents != 0) return;
      for (int dir = 0; dir < 2; ++dir) {
        const pollfd& from = fds[1 + dir];
        if (!open[dir] || from.revents == 0) continue;
        int to = dir == 0 ? backend.get() : client.get();
        ssize_t n = ::read(from.fd, buf, sizeof buf);
        if (n <= 0) {
          if (n < 0 && errno == EINTR) continue;
          open[dir] = false;
          (void)::shutdown(to, SHUT_WR);
          continue;
        }
        for (ssize_t off = 0; off < n;) {
          ssize_t w = ::send(to, buf + off, static_cast<size_t>(n - off), MSG_NOSIGNAL);
          if (w < 0 && errno == EINTR) continue;
          if (w <= 0) return;
          off += w;
        }
      }
    }
  }

  Dial dial_;
  UniqueFd stop_;
  UniqueFd listen_;
  std::thread accept_thread_;
  std::mutex mu_;
  std::vector<std::thread> conns_;
};

Result<std::unique_ptr<NodeAgent>> NodeAgent::Start(RestConfig config, NodeAgentOptions options) {
  std::unique_ptr<NodeAgent> a(new NodeAgent());
  a->options_ = std::move(options);
  a->next_ip_ = a->options_.first_ip;
  ClientOptions co;
  co.qps = 100;
  co.burst = 200;
  co.watch_timeout = std::chrono::seconds(60);
  auto client = KubeClient::Create(std::move(config), co);
  if (!client) return tl::unexpected(client.error());
  a->client_ = std::move(*client);
  a->stop_fd_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!a->stop_fd_) return MakeSyscallError("eventfd", errno);
  a->thread_ = std::thread([raw = a.get()] { raw->Loop(); });
  return a;
}

NodeAgent::~NodeAgent() {
  uint64_t one = 1;
  (void)::write(stop_fd_.get(), &one, sizeof one);
  if (thread_.joinable()) thread_.join();
  std::vector<std::string> keys;
  for (const auto& [k, p] : pods_) keys.push_back(k);
  for (const auto& k : keys) StopPod(k);
}

std::string NodeAgent::NextIp() {
  int octet = next_ip_++;
  if (next_ip_ > 250) next_ip_ = options_.first_ip;
  return fmt::format("127.0.0.{}", octet);
}

void NodeAgent::Loop() {
  const ResourceType pods{"", "v1", "pods", "Pod"};
  WatchOptions wo;  // list first (synthetic ADDED), then watch; re-list after 410
  if (!options_.bind_unscheduled) wo.field_selector = "spec.nodeName=" + options_.node_name;
  wo.cancel_fd = stop_fd_.get();
  for (;;) {
    auto r = WatchObjects(*client_, pods, "", wo, [&](const WatchEvent& ev) {
      if (ev.type == WatchEventType::kBookmark) return true;
      OnPod(ev.object, ev.type == WatchEventType::kDeleted);
      return true;
    });
    if (!r && r.error().code == ErrorCode::kCancelled) return;
    pollfd p{stop_fd_.get(), POLLIN, 0};
    if (::poll(&p, 1, 500) > 0) return;
    std::fprintf(stderr, "node agent: pod watch ended (%s); watching again\n",
                 r ? "by itself" : r.error().message.c_str());
  }
}

void NodeAgent::OnPod(const json::object& pod, bool deleted) {
  std::string ns = FindString(pod, {"metadata", "namespace"});
  std::string name = FindString(pod, {"metadata", "name"});
  std::string key = ns + "/" + name;
  bool terminating = !FindString(pod, {"metadata", "deletionTimestamp"}).empty();
  std::string node = FindString(pod, {"spec", "nodeName"});
  if (!deleted && !terminating && node.empty() && options_.bind_unscheduled) {
    // The scheduler's part: bind it here (the MODIFIED event brings it back).
    json::object binding;
    binding["apiVersion"] = "v1";
    binding["kind"] = "Binding";
    json::object meta;
    meta["name"] = name;
    binding["metadata"] = std::move(meta);
    json::object target;
    target["apiVersion"] = "v1";
    target["kind"] = "Node";
    target["name"] = options_.node_name;
    binding["target"] = std::move(target);
    std::string path = ResourceType{"", "v1", "pods", "Pod"}.Path(ns, name) + "/binding";
    (void)client_->Send("POST", path, ToJson(binding));
    return;
  }
  if (node != options_.node_name) return;
  if (deleted || terminating) {
    StopPod(key);
    if (terminating && !deleted) {
      // Kubelet's part of a graceful deletion: the containers are gone.
      std::string path = ResourceType{"", "v1", "pods", "Pod"}.Path(ns, name);
      (void)client_->Send("DELETE", path,
                          R"({"apiVersion":"v1","kind":"DeleteOptions","gracePeriodSeconds":0})");
    }
    return;
  }
  if (auto it = pods_.find(key);
      it != pods_.end() && it->second.uid != FindString(pod, {"metadata", "uid"})) {
    StopPod(key);  // a pod of that name that is gone: this one is new
  }
  if (auto it = pods_.find(key); it != pods_.end()) {
    // kubelet's part of a metadata change: the downward API files follow.
    if (auto st = ProjectDownwardApi(it->second, pod); !st) {
      std::fprintf(stderr, "node agent: pod %s: %s\n", key.c_str(), st.error().message.c_str());
    }
    return;
  }
  if (auto st = Run(ns, name, pod); !st) {
    std::fprintf(stderr, "node agent: pod %s: %s\n", key.c_str(), st.error().message.c_str());
  }
}

Status NodeAgent::Run(const std::string& ns, const std::string& name, const json::object& pod) {
  // The daemon's port: the first containerPort (the template's 8888).
  int port = 8888;
  if (const auto* cs = Find(pod, {"spec", "containers"}); cs != nullptr && cs->is_array()) {
    for (const auto& c : cs->get_array()) {
      if (const auto* ports = Find(c, {"ports"}); ports != nullptr && ports->is_array()) {
        for (const auto& p : ports->get_array()) {
          if (const auto* n = Find(p, {"containerPort"}); n != nullptr && n->is_int64()) {
            port = static_cast<int>(n->as_int64());
            break;
          }
        }
      }
    }
  }
  SubprocessOptions so;
  so.argv = {options_.deepbox, "sandbox",   "create",
             "--json",         "--network", "none",
             "--disk",         "0",         "--ttl",
             "7200",           "--label",   fmt::format("deepbox.dev/k8s-pod={}.{}", ns, name)};
  if (!options_.state_dir.empty()) so.env.emplace_back("DEEPBOX_STATE_DIR", options_.state_dir);
  so.capture_stdout = true;
  so.capture_stderr = true;
  so.new_process_group = false;
  auto r = RunCommand(so, std::chrono::seconds(120));
  if (!r) return tl::unexpected(r.error());
  if (!r->exited_ok()) {
    return MakeError(ErrorCode::kUnavailable,
                     fmt::format("deepbox sandbox create {}: {}",
                                 DescribeWaitStatus(r->wait_status), r->err.substr(0, 2000)));
  }
  auto meta = ParseJsonObject(r->out);
  if (!meta) return tl::unexpected(meta.error());
  Pod p;
  p.uid = FindString(pod, {"metadata", "uid"});
  p.sandbox_id = FindString(*meta, {"id"});
  std::string socket = FindString(*meta, {"socket"});
  if (p.sandbox_id.empty() || socket.empty()) {
    return MakeError(ErrorCode::kInternal, "deepbox sandbox create printed no id or socket");
  }
  if (const auto* init = Find(*meta, {"init", "pid"}); init != nullptr && init->is_int64()) {
    p.root = fmt::format("/proc/{}/root", init->as_int64());
  }
  std::string key = ns + "/" + name;
  // kubelet's order: native sidecars started and ready, then the containers.
  auto sidecars = StartSidecars(p, ns, pod);
  if (!sidecars) {
    pods_[key] = std::move(p);
    StopPod(key);
    return sidecars;
  }
  auto backend = StartContainerDaemon(p, pod, socket);
  if (!backend) {
    pods_[key] = std::move(p);
    StopPod(key);
    return tl::unexpected(backend.error());
  }
  if (auto bridged = BridgeSidecarPorts(p); !bridged) {
    pods_[key] = std::move(p);
    StopPod(key);
    return bridged;
  }
  socket = *backend;
  // A free loopback address (another process may hold one).
  for (int tries = 0; tries < 240 && !p.proxy; ++tries) {
    p.ip = NextIp();
    auto proxy = LoopbackProxy::Start(p.ip, port, socket);
    if (proxy) p.proxy = std::move(*proxy);
  }
  if (!p.proxy) {
    pods_[key] = std::move(p);
    StopPod(key);
    return MakeError(ErrorCode::kUnavailable, "no free loopback address for the pod");
  }
  std::string ip = p.ip;
  pods_[key] = std::move(p);
  auto reported = ReportRunning(ns, name, ip);
  if (!reported) StopPod(key);  // e.g. the pod went meanwhile: nothing keeps its name
  return reported;
}

Status NodeAgent::ReportRunning(const std::string& ns, const std::string& name,
                                const std::string& ip) {
  const ResourceType pods{"", "v1", "pods", "Pod"};
  for (int attempt = 0; attempt < 10; ++attempt) {
    auto pod = client_->Get(pods, ns, name);
    if (!pod) return tl::unexpected(pod.error());
    std::string now = FormatRfc3339(std::chrono::system_clock::now());
    json::object status;
    status["phase"] = "Running";
    status["hostIP"] = "127.0.0.1";
    status["podIP"] = ip;
    json::object ip_entry;
    ip_entry["ip"] = ip;
    status["podIPs"] = json::array{ip_entry};
    status["startTime"] = now;
    json::array conds;
    for (const char* type : {"PodScheduled", "Initialized", "ContainersReady", "Ready"}) {
      json::object c;
      c["type"] = type;
      c["status"] = "True";
      c["lastTransitionTime"] = now;
      conds.push_back(std::move(c));
    }
    status["conditions"] = std::move(conds);
    (*pod)["status"] = std::move(status);
    std::string path = pods.Path(ns, name) + "/status";
    auto r = client_->Send("PUT", path, ToJson(*pod));
    if (!r) return tl::unexpected(r.error());
    if (r->response.status == 200) return {};
    if (r->response.status != 409) {
      return tl::unexpected(
          ApiStatusError(ParseApiStatus(r->response.status, r->response.body), "PUT " + path));
    }
  }
  return MakeError(ErrorCode::kConflict, "pod status: too many conflicts");
}

namespace {

// "metadata.annotations['k']" of `pod` as kubelet projects it ("" when absent).
std::string FieldValue(const json::object& pod, std::string_view field_path) {
  for (std::string_view section : {"annotations", "labels"}) {
    std::string prefix = fmt::format("metadata.{}['", section);
    if (field_path.starts_with(prefix) && field_path.ends_with("']")) {
      std::string k(field_path.substr(prefix.size(), field_path.size() - prefix.size() - 2));
      const json::value* m = Find(pod, {"metadata", section});
      if (m == nullptr || !m->is_object()) return "";
      const json::value* v = m->get_object().if_contains(k);
      return v != nullptr && v->is_string() ? std::string(v->get_string()) : "";
    }
  }
  if (field_path == "metadata.name") return FindString(pod, {"metadata", "name"});
  if (field_path == "metadata.namespace") return FindString(pod, {"metadata", "namespace"});
  return "";
}

// Host root is not mapped in a sandbox's user namespace, so its writes into
// the sandbox's own mounts (the tmpfs /tmp) fail with EOVERFLOW. They are made
// as the sandbox's user instead: the owner of /proc/<init> (its host uid and
// gid), on this thread only (setfsuid/setfsgid are per thread), while this
// guard lives. The files are then the sandbox user's, as writable by it as
// anything in its /tmp: this stand-in for kubelet does not make them read-only.
class SandboxFsIdentity {
 public:
  explicit SandboxFsIdentity(const std::string& root) {
    struct stat st {};
    std::string proc = root.substr(0, root.rfind('/'));
    if (::stat(proc.c_str(), &st) != 0) return;
    old_gid_ = static_cast<gid_t>(::setfsgid(st.st_gid));
    old_uid_ = static_cast<uid_t>(::setfsuid(st.st_uid));
    active_ = true;
  }
  ~SandboxFsIdentity() {
    if (!active_) return;
    ::setfsuid(old_uid_);
    ::setfsgid(old_gid_);
  }
  SandboxFsIdentity(const SandboxFsIdentity&) = delete;
  SandboxFsIdentity& operator=(const SandboxFsIdentity&) = delete;

 private:
  bool active_ = false;
  uid_t old_uid_ = 0;
  gid_t old_gid_ = 0;
};

Status WriteFileAtomically(const std::string& path, const std::string& content) {
  std::string tmp = path + ".next";
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644));
  if (!fd) return MakeSyscallError("open", errno, tmp);
  if (::write(fd.get(), content.data(), content.size()) != static_cast<ssize_t>(content.size())) {
    return MakeSyscallError("write", errno, tmp);
  }
  fd.reset();
  if (::rename(tmp.c_str(), path.c_str()) != 0) return MakeSyscallError("rename", errno, path);
  return {};
}

// `arg` with a mount's container path (at its start or after '=', as a
// whole path component) replaced by where the node put the volume.
std::string RemapMountPaths(std::string arg, const std::map<std::string, std::string>& remap) {
  for (const auto& [from, to] : remap) {
    if (from.empty()) continue;
    size_t at = arg.find(from);
    if (at != std::string::npos && (at == 0 || arg[at - 1] == '=') &&
        (arg.size() == at + from.size() || arg[at + from.size()] == '/')) {
      arg.replace(at, from.size(), to);
    }
  }
  return arg;
}

// The regular files directly in `dir` (name -> content, at most 1 MiB each):
// what a sidecar wrote into an emptyDir it shares.
Result<std::map<std::string, std::string>> ReadSharedFiles(const std::string& dir) {
  std::map<std::string, std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (!e.is_regular_file(ec) || e.is_symlink(ec)) continue;
    std::string name = e.path().filename().string();
    UniqueFd fd(::open(e.path().c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (!fd) return MakeSyscallError("open", errno, e.path().string());
    std::string content;
    char buf[65536];
    for (ssize_t n; (n = ::read(fd.get(), buf, sizeof buf)) > 0;) {
      content.append(buf, static_cast<size_t>(n));
      if (content.size() > (1u << 20)) {
        return MakeError(ErrorCode::kInvalidArgument, e.path().string() + ": over 1 MiB");
      }
    }
    out[name] = std::move(content);
  }
  if (ec) return MakeError(ErrorCode::kUnavailable, dir + ": " + ec.message());
  return out;
}

}  // namespace

Result<std::string> NodeAgent::StartContainerDaemon(Pod& p, const json::object& pod,
                                                    const std::string& init_socket) {
  const json::value* containers = Find(pod, {"spec", "containers"});
  if (containers == nullptr || !containers->is_array() || containers->get_array().empty()) {
    return init_socket;
  }
  const json::value& c = containers->get_array().front();
  std::vector<std::string> argv;
  for (const char* field : {"command", "args"}) {
    if (const auto* a = Find(c, {field}); a != nullptr && a->is_array()) {
      for (const auto& v : a->get_array()) {
        if (v.is_string()) argv.emplace_back(v.get_string());
      }
    }
  }
  if (argv.empty() || !argv[0].ends_with("/deepbox-sandboxd") || p.root.empty()) {
    return init_socket;  // not the daemon: the sandbox's own serves the pod
  }
  // downwardAPI volumes -> their mount paths in the container.
  std::map<std::string, std::string> remap;  // container path -> sandbox path
  const std::string kVolumes = "/tmp/.deepbox-pod-volumes";
  // What the sidecars left in the emptyDirs this container mounts too, read
  // as host root (the sidecar's files need not be readable by others).
  const json::value* mounts = Find(c, {"volumeMounts"});
  std::map<std::string, std::map<std::string, std::string>> shared;  // volume -> files
  if (mounts != nullptr && mounts->is_array()) {
    for (const auto& m : mounts->get_array()) {
      std::string vol = FindString(m, {"name"});
      auto it = p.shared_volumes.find(vol);
      if (it == p.shared_volumes.end()) continue;
      auto files = ReadSharedFiles(it->second);
      if (!files) return tl::unexpected(files.error());
      shared[vol] = std::move(*files);
    }
  }
  // Made as the sandbox's user (host root cannot write into its /tmp); ended
  // before anything of the host is touched again.
  std::optional<SandboxFsIdentity> as_sandbox_user(std::in_place, p.root);
  // Strict mkdir (no EEXIST): nothing of the sandbox has run yet, and these
  // writes through /proc/<init>/root must never follow its links.
  if (::mkdir((p.root + kVolumes).c_str(), 0755) != 0) {
    return MakeSyscallError("mkdir", errno, p.root + kVolumes);
  }
  const json::value* volumes = Find(pod, {"spec", "volumes"});
  if (volumes != nullptr && volumes->is_array() && mounts != nullptr && mounts->is_array()) {
    for (const auto& v : volumes->get_array()) {
      const json::value* items = Find(v, {"downwardAPI", "items"});
      std::string vol = FindString(v, {"name"});
      if (items == nullptr || !items->is_array() || !IsObjectName(vol)) continue;
      std::string dir = kVolumes + "/" + vol;
      if (::mkdir((p.root + dir).c_str(), 0755) != 0) {
        return MakeSyscallError("mkdir", errno, p.root + dir);
      }
      for (const auto& item : items->get_array()) {
        std::string path = FindString(item, {"path"});
        std::string field = FindString(item, {"fieldRef", "fieldPath"});
        if (path.empty() || path.find('/') != std::string::npos || path.starts_with(".")) continue;
        p.projected[p.root + dir + "/" + path] = Pod::Projected{field, "", false};
      }
      for (const auto& m : mounts->get_array()) {
        if (FindString(m, {"name"}) == vol) remap[FindString(m, {"mountPath"})] = dir;
      }
    }
  }
  for (const auto& [vol, files] : shared) {
    std::string dir = kVolumes + "/" + vol;
    if (::mkdir((p.root + dir).c_str(), 0755) != 0) {
      return MakeSyscallError("mkdir", errno, p.root + dir);
    }
    for (const auto& [name, content] : files) {
      if (auto st = WriteFileAtomically(p.root + dir + "/" + name, content); !st) {
        return tl::unexpected(st.error());
      }
    }
    for (const auto& m : mounts->get_array()) {
      if (FindString(m, {"name"}) == vol) remap[FindString(m, {"mountPath"})] = dir;
    }
  }
  as_sandbox_user.reset();
  if (auto s = ProjectDownwardApi(p, pod); !s) return tl::unexpected(s.error());
  // The container's arguments, with its mounts' paths and its listener moved.
  const std::string socket = "/tmp/.deepbox-pod-sandboxd.sock";
  std::vector<std::string> args{"/.deepbox/sandboxd"};
  for (size_t i = 1; i < argv.size(); ++i) {
    std::string a = argv[i];
    if (a == "--listen" || a == "--listen-host" || a == "--rest-port") {
      ++i;  // and its value
      continue;
    }
    if (a.starts_with("--listen=") || a.starts_with("--listen-host=") ||
        a.starts_with("--rest-port=")) {
      continue;
    }
    args.push_back(RemapMountPaths(std::move(a), remap));
  }
  args.insert(args.end(), {"--listen", "unix:" + socket});
  // As a container's PID 1 the daemon's file API sees "/" (--files-root
  // auto); here it is not PID 1, so say it.
  if (std::none_of(args.begin(), args.end(),
                   [](const std::string& a) { return a.starts_with("--files-root"); })) {
    args.push_back("--files-root=/");
  }
  json::object req;
  json::array jargv;
  for (const auto& a : args) jargv.emplace_back(a);
  req["argv"] = std::move(jargv);
  // The container's literal env (kubelet's), its mount paths moved too; the
  // daemon passes it on to every command.
  if (const auto* env = Find(c, {"env"}); env != nullptr && env->is_array()) {
    json::object values;
    for (const auto& e : env->get_array()) {
      const json::value* v = Find(e, {"value"});
      std::string n = FindString(e, {"name"});
      if (v == nullptr || !v->is_string() || n.empty()) continue;
      values[n] = RemapMountPaths(std::string(v->get_string()), remap);
    }
    if (!values.empty()) req["env"] = std::move(values);
  }
  // Named, not the default argument: GCC 12 at -O3 takes the temporary's
  // TlsClientConfig strings for uninitialized (-Wmaybe-uninitialized).
  net::ClientOptions options;
  auto http = net::HttpClient::Create("unix:" + init_socket, std::move(options));
  if (!http) return tl::unexpected(http.error());
  net::ClientRequest start;
  start.method = "POST";
  start.target = "/deepbox/v1/processes";
  start.body = ToJson(req);
  auto r = (*http)->Send(start);
  if (!r) return tl::unexpected(r.error());
  if (r->status != 200) {
    return MakeError(ErrorCode::kUnavailable,
                     fmt::format("starting the container's daemon: HTTP {}: {}", r->status,
                                 r->body.substr(0, 500)));
  }
  auto started = ParseJsonObject(r->body);
  if (!started) return tl::unexpected(started.error());
  std::string id = FindString(*started, {"id"});
  std::string host_socket = p.root + socket;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!ConnectUnix(host_socket)) {
    if (std::chrono::steady_clock::now() > deadline) {
      net::ClientRequest logs;
      logs.target = "/deepbox/v1/processes/" + id + "/logs";
      auto l = (*http)->Send(logs);
      return MakeError(ErrorCode::kTimeout,
                       fmt::format("the container's daemon did not listen within 30 s: {}",
                                   l ? l->body.substr(0, 2000) : l.error().message));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return host_socket;
}

Status NodeAgent::ProjectDownwardApi(Pod& p, const json::object& pod) {
  SandboxFsIdentity as_sandbox_user(p.root);
  for (auto& [path, f] : p.projected) {
    std::string value = FieldValue(pod, f.field_path);
    if (f.written && value == f.content) continue;
    if (auto s = WriteFileAtomically(path, value); !s) return s;
    f.content = std::move(value);
    f.written = true;
  }
  return {};
}

namespace {

constexpr const char* kPodNetnsAnnotation = "deepbox.dev/test-pod-netns";

// runAsUser/runAsGroup of the container, else of the pod; -1 when unset.
int64_t RunAs(const json::value& container, const json::object& pod, const char* field) {
  for (const json::value* sc : {Find(container, {"securityContext", field}),
                                Find(pod, {"spec", "securityContext", field})}) {
    if (sc != nullptr && sc->is_int64()) return sc->as_int64();
  }
  return -1;
}

// The TCP ports a sidecar serves the pod on: its containerPorts and its
// startupProbe's tcpSocket port.
std::vector<int> SidecarPorts(const json::value& c) {
  std::vector<int> ports;
  if (const auto* ps = Find(c, {"ports"}); ps != nullptr && ps->is_array()) {
    for (const auto& p : ps->get_array()) {
      if (const auto* n = Find(p, {"containerPort"}); n != nullptr && n->is_int64()) {
        ports.push_back(static_cast<int>(n->as_int64()));
      }
    }
  }
  if (const auto* n = Find(c, {"startupProbe", "tcpSocket", "port"});
      n != nullptr && n->is_int64()) {
    ports.push_back(static_cast<int>(n->as_int64()));
  }
  std::sort(ports.begin(), ports.end());
  ports.erase(std::unique(ports.begin(), ports.end()), ports.end());
  return ports;
}

}  // namespace

Result<std::string> NodeAgent::EnvValue(const std::string& ns, const json::value& entry) {
  std::string name = FindString(entry, {"name"});
  if (const auto* v = Find(entry, {"value"}); v != nullptr && v->is_string()) {
    return name + "=" + std::string(v->get_string());
  }
  std::string secret = FindString(entry, {"valueFrom", "secretKeyRef", "name"});
  std::string key = FindString(entry, {"valueFrom", "secretKeyRef", "key"});
  if (secret.empty() || key.empty()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("env {}: only value and valueFrom.secretKeyRef are served", name));
  }
  auto obj = client_->Get(ResourceType{"", "v1", "secrets", "Secret"}, ns, secret);
  if (!obj) return tl::unexpected(obj.error());
  auto value = Base64Decode(FindString(*obj, {"data", key}));
  if (!value || FindString(*obj, {"data", key}).empty()) {
    return MakeError(ErrorCode::kNotFound,
                     fmt::format("env {}: Secret {}/{} has no key {}", name, ns, secret, key));
  }
  return name + "=" + *value;
}

Status NodeAgent::StartSidecars(Pod& p, const std::string& ns, const json::object& pod) {
  const json::value* inits = Find(pod, {"spec", "initContainers"});
  if (inits == nullptr || !inits->is_array()) return {};
  std::vector<const json::value*> sidecars;
  for (const auto& c : inits->get_array()) {
    if (FindString(c, {"restartPolicy"}) == "Always") sidecars.push_back(&c);
  }
  if (sidecars.empty()) return {};
  p.netns = FindString(pod, {"metadata", "annotations", kPodNetnsAnnotation});
  if (p.netns.empty() || !p.netns.starts_with("/proc/")) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("the pod has a sidecar, and this stand-in node runs sidecars only "
                                 "in a pod network a test gives (annotation {}: /proc/...)",
                                 kPodNetnsAnnotation));
  }
  std::string base = options_.pod_dir.empty()
                         ? fmt::format("/tmp/deepbox-node-agent-{}", ::getpid())
                         : options_.pod_dir;
  if (::mkdir(base.c_str(), 0711) != 0 && errno != EEXIST) {
    return MakeSyscallError("mkdir", errno, base);
  }
  p.dir = base + "/" + FindString(pod, {"metadata", "uid"});
  if (::mkdir(p.dir.c_str(), 0711) != 0) return MakeSyscallError("mkdir", errno, p.dir);
  for (const json::value* c : sidecars) {
    std::string cname = FindString(*c, {"name"});
    int64_t uid = RunAs(*c, pod, "runAsUser"), gid = RunAs(*c, pod, "runAsGroup");
    if (uid <= 0 || gid <= 0) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("sidecar {}: runAsUser and runAsGroup must be set and not 0 "
                                   "(this node runs no container as root)",
                                   cname));
    }
    // Its emptyDir mounts: host directories of the pod, owned by it.
    std::map<std::string, std::string> remap;
    if (const auto* mounts = Find(*c, {"volumeMounts"}); mounts != nullptr && mounts->is_array()) {
      for (const auto& m : mounts->get_array()) {
        std::string vol = FindString(m, {"name"});
        if (!IsObjectName(vol)) continue;
        auto [it, fresh] = p.shared_volumes.try_emplace(vol, p.dir + "/" + vol);
        if (fresh) {
          if (::mkdir(it->second.c_str(), 0755) != 0) {
            return MakeSyscallError("mkdir", errno, it->second);
          }
          if (::chown(it->second.c_str(), static_cast<uid_t>(uid), static_cast<gid_t>(gid)) != 0) {
            return MakeSyscallError("chown", errno, it->second);
          }
        }
        remap[FindString(m, {"mountPath"})] = it->second;
      }
    }
    // The probe below must find this sidecar, not another pod's: pods given
    // the same pod network share its ports (a real pod has its own).
    std::vector<int> ports = SidecarPorts(*c);
    for (int port : ports) {
      if (InNetns(p.netns, [port] { return ConnectTcpLoopback(port); })) {
        return MakeError(ErrorCode::kConflict,
                         fmt::format("sidecar {}: port {} of the pod network {} is in use by "
                                     "another pod (this node's test pod networks are shared)",
                                     cname, port, p.netns));
      }
    }
    SubprocessOptions so;
    so.argv = {"/usr/bin/nsenter", "--net=" + p.netns, "--setgid=" + std::to_string(gid),
               "--setuid=" + std::to_string(uid), "--"};
    size_t first = so.argv.size();
    for (const char* field : {"command", "args"}) {
      if (const auto* a = Find(*c, {field}); a != nullptr && a->is_array()) {
        for (const auto& v : a->get_array()) {
          if (v.is_string()) so.argv.push_back(RemapMountPaths(std::string(v.get_string()), remap));
        }
      }
    }
    if (so.argv.size() == first) {
      return MakeError(ErrorCode::kInvalidArgument, "sidecar " + cname + ": no command");
    }
    // The image's deepbox CLI is this node's.
    if (so.argv[first].ends_with("/deepbox")) so.argv[first] = options_.deepbox;
    so.replace_environment = true;
    so.env.emplace_back("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
    if (const auto* env = Find(*c, {"env"}); env != nullptr && env->is_array()) {
      for (const auto& e : env->get_array()) {
        auto kv = EnvValue(ns, e);
        if (!kv) return tl::unexpected(kv.error());
        size_t eq = kv->find('=');
        so.env.emplace_back(kv->substr(0, eq), kv->substr(eq + 1));
      }
    }
    so.stdout_to.path = p.dir + "/" + cname + ".log";
    so.stderr_to.path = p.dir + "/" + cname + ".err";
    auto child = Subprocess::Spawn(so);
    if (!child) return tl::unexpected(child.error());
    p.sidecars.push_back(std::move(*child));
    // Ready when its startup probe's port answers in the pod network.
    p.sidecar_ports.insert(p.sidecar_ports.end(), ports.begin(), ports.end());
    const json::value* probe = Find(*c, {"startupProbe", "tcpSocket", "port"});
    if (probe == nullptr || !probe->is_int64()) continue;
    int port = static_cast<int>(probe->as_int64());
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (;;) {
      if (InNetns(p.netns, [port] { return ConnectTcpLoopback(port); })) break;
      if (p.sidecars.back().HasExited() || std::chrono::steady_clock::now() > deadline) {
        std::ifstream err(so.stderr_to.path);
        std::string text((std::istreambuf_iterator<char>(err)), std::istreambuf_iterator<char>());
        return MakeError(ErrorCode::kUnavailable, fmt::format("sidecar {}: port {} not ready: {}",
                                                              cname, port, text.substr(0, 2000)));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  return {};
}

Status NodeAgent::BridgeSidecarPorts(Pod& p) {
  if (p.sidecar_ports.empty()) return {};
  if (p.root.empty()) {
    return MakeError(ErrorCode::kInternal,
                     "the sandbox's init process is unknown: no pod loopback");
  }
  std::string sandbox_netns = p.root.substr(0, p.root.rfind('/')) + "/ns/net";
  for (int port : std::set<int>(p.sidecar_ports.begin(), p.sidecar_ports.end())) {
    auto listener = InNetns(sandbox_netns, [port] { return ListenTcpLoopback("127.0.0.1", port); });
    if (!listener) return tl::unexpected(listener.error());
    std::string pod_netns = p.netns;
    auto bridge = LoopbackProxy::Serve(std::move(*listener), [pod_netns, port] {
      auto fd = InNetns(pod_netns, [port] { return ConnectTcpLoopback(port); });
      return fd ? std::move(*fd) : UniqueFd();
    });
    if (!bridge) return tl::unexpected(bridge.error());
    p.bridges.push_back(std::move(*bridge));
  }
  return {};
}

void NodeAgent::StopPod(const std::string& key) {
  auto it = pods_.find(key);
  if (it == pods_.end()) return;
  it->second.proxy.reset();
  it->second.bridges.clear();
  for (auto& sidecar : it->second.sidecars) (void)sidecar.Terminate(std::chrono::seconds(5));
  it->second.sidecars.clear();
  if (!it->second.dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(it->second.dir, ec);
  }
  if (!it->second.sandbox_id.empty()) {
    SubprocessOptions so;
    so.argv = {options_.deepbox, "sandbox", "rm", it->second.sandbox_id};
    if (!options_.state_dir.empty()) so.env.emplace_back("DEEPBOX_STATE_DIR", options_.state_dir);
    so.new_process_group = false;
    (void)RunCommand(so, std::chrono::seconds(60));
  }
  pods_.erase(it);
}

}  // namespace deepbox::k8s::testing
