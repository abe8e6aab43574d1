#include "k8s/connection.h"

#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "net/conn.h"

namespace deepbox::k8s {

namespace {

constexpr size_t kTailBytes = 4096;

Result<int> FreeLocalPort() {
  auto ep = net::Endpoint::Parse("127.0.0.1:0");
  if (!ep) return tl::unexpected(ep.error());
  auto l = net::Listener::Bind(*ep);
  if (!l) return tl::unexpected(l.error());
  return l->port();
}

bool PortAccepts(int port) {
  net::Endpoint ep;
  ep.host = "127.0.0.1";
  ep.port = port;
  auto c = net::Conn::Connect(ep, net::DeadlineAfter(std::chrono::milliseconds(200)));
  return c.has_value();
}

std::string Trimmed(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  return s;
}

}  // namespace

net::Headers RouterHeaders(const RouterTarget& t) {
  net::Headers h;
  h.Set("X-Sandbox-ID", t.sandbox_id);
  h.Set("X-Sandbox-Namespace", t.namespace_name.empty() ? "default" : t.namespace_name);
  h.Set("X-Sandbox-Port", std::to_string(t.port));
  if (!t.pod_ip.empty()) h.Set("X-Sandbox-Pod-IP", t.pod_ip);
  if (!t.router_token.empty()) h.Set("Authorization", "Bearer " + t.router_token);
  return h;
}

// ------------------------------------------------------------------ PortForward

Result<std::unique_ptr<PortForward>> PortForward::Start(PortForwardOptions options) {
  std::unique_ptr<PortForward> pf(new PortForward());
  pf->options_ = std::move(options);
  auto port = FreeLocalPort();
  if (!port) return tl::unexpected(port.error());
  pf->port_ = *port;
  pf->stop_fd_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!pf->stop_fd_) return MakeSyscallError("eventfd", errno);
  if (auto s = pf->Launch(); !s) return tl::unexpected(s.error());
  pf->monitor_ = std::thread([p = pf.get()] { p->Monitor(); });
  return pf;
}

PortForward::~PortForward() { Stop(); }

std::string PortForward::base_url() const { return fmt::format("http://127.0.0.1:{}", port_); }

std::string PortForward::OutputTail() const {
  std::string t = Trimmed(tail_);
  return t.empty() ? "no output" : t;
}

Status PortForward::Launch() {
  SpawnOptions so;
  so.argv.push_back(options_.kubectl);
  so.argv.insert(so.argv.end(), options_.kubectl_args.begin(), options_.kubectl_args.end());
  so.argv.insert(so.argv.end(), {"port-forward", options_.service,
                                 fmt::format("{}:{}", port_, options_.remote_port), "-n",
                                 options_.namespace_name});
  so.env = options_.env;
  so.capture_stderr = true;  // errors; stdout only says "Handling connection for ..."
  so.new_process_group = true;
  std::string what = fmt::format("kubectl port-forward {} {}:{} -n {}", options_.service, port_,
                                 options_.remote_port, options_.namespace_name);
  auto child = Child::Spawn(so);
  if (!child) {
    Error e = child.error();
    e.code = ErrorCode::kUnavailable;
    e.message = fmt::format("cannot start {} ('{}'): {}", what, options_.kubectl, e.message);
    return tl::unexpected(e);
  }
  UniqueFd out = child->TakeStderr();
  std::string output;
  auto deadline = std::chrono::steady_clock::now() + options_.ready_timeout;
  char buf[1024];
  for (;;) {
    if (auto st = child->TryWait()) {
      if (out) {
        ssize_t n;
        while ((n = ::read(out.get(), buf, sizeof buf)) > 0) output.append(buf, n);
      }
      return MakeError(ErrorCode::kUnavailable,
                       fmt::format("{} {}: {}", what, DescribeWaitStatus(*st),
                                   Trimmed(output).empty() ? "no output" : Trimmed(output)));
    }
    if (PortAccepts(port_)) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      child->Terminate(options_.stop_grace);
      return MakeError(ErrorCode::kTimeout,
                       fmt::format("{} did not accept connections on 127.0.0.1:{} within {} ms: "
                                   "{}",
                                   what, port_, options_.ready_timeout.count(),
                                   Trimmed(output).empty() ? "no output" : Trimmed(output)));
    }
    // Wait one poll interval, draining its output meanwhile.
    pollfd p{out.get(), POLLIN, 0};
    if (out && ::poll(&p, 1, static_cast<int>(options_.poll_interval.count())) > 0) {
      ssize_t n = ::read(out.get(), buf, sizeof buf);
      if (n > 0) {
        output.append(buf, n);
      } else if (n == 0) {
        out.reset();
      }
    } else if (!out) {
      std::this_thread::sleep_for(options_.poll_interval);
    }
  }
  std::lock_guard lock(mu_);
  child_ = std::move(*child);
  output_ = std::move(out);
  tail_ = output.size() > kTailBytes ? output.substr(output.size() - kTailBytes) : output;
  return {};
}

void PortForward::Monitor() {
  char buf[4096];
  for (;;) {
    pollfd fds[3];
    int n = 0;
    fds[n++] = {stop_fd_.get(), POLLIN, 0};
    int pid_idx = -1, out_idx = -1;
    {
      std::lock_guard lock(mu_);
      if (child_.pidfd() >= 0) {
        pid_idx = n;
        fds[n++] = {child_.pidfd(), POLLIN, 0};
      }
      if (output_) {
        out_idx = n;
        fds[n++] = {output_.get(), POLLIN, 0};
      }
    }
    int r = ::poll(fds, n, pid_idx >= 0 ? -1 : 100);
    if (r < 0 && errno != EINTR) return;
    if (fds[0].revents != 0) return;  // Stop()
    if (out_idx >= 0 && fds[out_idx].revents != 0) {
      std::lock_guard lock(mu_);
      ssize_t got = ::read(output_.get(), buf, sizeof buf);
      if (got > 0) {
        tail_.append(buf, got);
        if (tail_.size() > kTailBytes) tail_.erase(0, tail_.size() - kTailBytes);
      } else if (got == 0) {
        output_.reset();
      }
    }
    std::optional<int> status;
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
      status = child_.TryWait();
      if (status && output_) {
        ssize_t got;
        while ((got = ::read(output_.get(), buf, sizeof buf)) > 0) tail_.append(buf, got);
        output_.reset();
      }
    }
    if (!status) continue;
    // The child died under us: restart it once, on the same port.
    std::string died;
    {
      std::lock_guard lock(mu_);
      died = fmt::format("kubectl port-forward {} (127.0.0.1:{}) {}: {}", options_.service, port_,
                         DescribeWaitStatus(*status), OutputTail());
      if (restarts_ >= options_.max_restarts) {
        dead_ = Error(ErrorCode::kUnavailable,
                      fmt::format("{} (after {} restart{}); the sandbox router is unreachable",
                                  died, restarts_, restarts_ == 1 ? "" : "s"));
        cv_.notify_all();
        return;
      }
      tail_.clear();
    }
    auto s = Launch();
    std::lock_guard lock(mu_);
    if (!s) {
      dead_ = Error(ErrorCode::kUnavailable,
                    fmt::format("{}; restarting it failed: {}", died, s.error().message));
      cv_.notify_all();
      return;
    }
    ++restarts_;
    cv_.notify_all();
  }
}

Status PortForward::Health() const {
  std::lock_guard lock(mu_);
  if (dead_) return tl::unexpected(*dead_);
  if (stopping_) return MakeError(ErrorCode::kUnavailable, "the port-forward was stopped");
  return {};
}

pid_t PortForward::pid() const {
  std::lock_guard lock(mu_);
  return child_.pid();
}

int PortForward::restarts() const {
  std::lock_guard lock(mu_);
  return restarts_;
}

bool PortForward::WaitForRestarts(int n, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return restarts_ >= n || dead_.has_value(); });
}

void PortForward::Stop() {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  uint64_t one = 1;
  (void)::write(stop_fd_.get(), &one, sizeof one);
  if (monitor_.joinable()) monitor_.join();
  std::lock_guard lock(mu_);
  child_.Terminate(options_.stop_grace);
  output_.reset();
}

// ------------------------------------------------------------------ SandboxConnection

Result<std::unique_ptr<SandboxConnection>> SandboxConnection::Open(const ConnectionOptions& options,
                                                                   const ClaimedSandbox& sandbox) {
  std::unique_ptr<SandboxConnection> c(new SandboxConnection());
  RouterTarget target{sandbox.sandbox_name, sandbox.namespace_name, options.daemon_port,
                      options.send_pod_ip ? sandbox.pod_ip : "", options.router_token};
  switch (options.mode) {
    case ConnectionMode::kPortForward: {
      auto pf = PortForward::Start(options.port_forward);
      if (!pf) return tl::unexpected(pf.error());
      c->forward_ = std::move(*pf);
      c->endpoint_.base_url = c->forward_->base_url();
      c->endpoint_.headers = RouterHeaders(target);
      break;
    }
    case ConnectionMode::kDirect: {
      if (options.direct_url.empty()) {
        return MakeError(ErrorCode::kInvalidArgument,
                         "a router or gateway URL is required for a direct connection");
      }
      std::string url = options.direct_url;
      while (url.size() > 1 && url.back() == '/') url.pop_back();
      c->endpoint_.base_url = url;
      c->endpoint_.headers = RouterHeaders(target);
      break;
    }
    case ConnectionMode::kInCluster: {
      std::string host = sandbox.pod_ip;
      if (host.empty()) {
        host = fmt::format("{}.{}.svc.cluster.local", sandbox.sandbox_name, sandbox.namespace_name);
      } else if (host.find(':') != std::string::npos) {
        host = "[" + host + "]";
      }
      c->endpoint_.base_url = fmt::format("http://{}:{}", host, options.daemon_port);
      break;
    }
  }
  return c;
}

SandboxConnection::~SandboxConnection() { Close(); }

Status SandboxConnection::Health() const {
  if (forward_) return forward_->Health();
  return {};
}

void SandboxConnection::Close() {
  if (forward_) forward_->Stop();
}

}  // namespace deepbox::k8s
