#include "k8s/connection.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "common/json.h"
#include "common/parse_number.h"
#include "common/strings.h"
#include "common/terminal_text.h"
#include "k8s/router_token.h"
#include "k8s/socket_owner.h"
#include "k8s/util.h"
#include "net/token_digest.h"

namespace deepbox::k8s {

namespace {

constexpr size_t kTailBytes = 4096;
constexpr size_t kMaxStdoutLine = 4096;
constexpr std::string_view kForwardingPrefix = "Forwarding from 127.0.0.1:";

// kubectl's output in our messages: it can carry text from the cluster.
std::string Shown(std::string_view text) {
  std::string t(TrimRight(SanitizeForTerminal(text)));
  return t.empty() ? "no output" : t;
}

std::string ShownLine(std::string_view line) {
  constexpr size_t kMax = 200;
  std::string s = SanitizeLineForTerminal(line.substr(0, kMax));
  if (line.size() > kMax) s += "...";
  return s;
}

void AppendTail(std::string& tail, std::string_view data) {
  tail.append(data);
  if (tail.size() > kTailBytes) tail.erase(0, tail.size() - kTailBytes);
}

void SetNonBlocking(const UniqueFd& fd) {
  if (fd) ::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) | O_NONBLOCK);
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

Result<int> ParseForwardingLine(std::string_view line, int remote_port) {
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
  auto bad = [&] {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("expected 'Forwarding from 127.0.0.1:PORT -> {}', got '{}'",
                                 remote_port, ShownLine(line)));
  };
  if (!line.starts_with(kForwardingPrefix)) return bad();
  std::string_view rest = line.substr(kForwardingPrefix.size());
  auto arrow = rest.find(" -> ");
  if (arrow == std::string_view::npos) return bad();
  auto port = ParseInteger<uint16_t>(rest.substr(0, arrow));
  if (!port || *port == 0) return bad();
  if (rest.substr(arrow + 4) != std::to_string(remote_port)) return bad();
  return static_cast<int>(*port);
}

// ------------------------------------------------------------------ PortForward

Result<std::unique_ptr<PortForward>> PortForward::Start(PortForwardOptions options) {
  std::unique_ptr<PortForward> pf(new PortForward());
  pf->options_ = std::move(options);
  pf->stop_fd_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!pf->stop_fd_) return MakeSyscallError("eventfd", errno);
  if (auto s = pf->Launch(0); !s) return tl::unexpected(s.error());
  pf->monitor_ = std::thread([p = pf.get()] { p->Monitor(); });
  return pf;
}

PortForward::~PortForward() { Stop(); }

std::string PortForward::base_url() const { return fmt::format("http://127.0.0.1:{}", port_); }

std::string PortForward::OutputTail() const { return Shown(tail_); }

Status PortForward::Launch(int port) {
  // --address: one IPv4 listener (kubectl's default adds [::1]), the one we check.
  std::string ports = port > 0 ? fmt::format("{}:{}", port, options_.remote_port)
                               : fmt::format(":{}", options_.remote_port);
  SubprocessOptions so;
  so.argv.push_back(options_.kubectl);
  so.argv.insert(so.argv.end(), options_.kubectl_args.begin(), options_.kubectl_args.end());
  so.argv.insert(so.argv.end(), {"port-forward", "--address", "127.0.0.1", options_.service, ports,
                                 "-n", options_.namespace_name});
  so.env = options_.env;
  so.capture_stdout =
      true;  // "Forwarding from 127.0.0.1:PORT -> 8080", then one line per connection
  so.capture_stderr = true;  // errors
  so.new_process_group = true;
  std::string what = fmt::format("kubectl port-forward {} {} -n {}", options_.service, ports,
                                 options_.namespace_name);
  auto child = Subprocess::Spawn(so);
  if (!child) {
    Error e = child.error();
    e.code = ErrorCode::kUnavailable;
    e.message = fmt::format("cannot start {} ('{}'): {}", what, options_.kubectl, e.message);
    return tl::unexpected(e);
  }
  UniqueFd out = child->TakeStdout();
  UniqueFd err = child->TakeStderr();
  // Non-blocking: a grandchild holding the pipes open must not hang a drain.
  SetNonBlocking(out);
  SetNonBlocking(err);
  std::string line_buf, errors;
  auto deadline = std::chrono::steady_clock::now() + options_.ready_timeout;
  char buf[4096];
  auto drain = [&](UniqueFd& fd, auto&& sink) {
    for (;;) {
      ssize_t n = fd ? ::read(fd.get(), buf, sizeof buf) : 0;
      if (n > 0) {
        sink(std::string_view(buf, static_cast<size_t>(n)));
        continue;
      }
      if (n == 0 || errno != EINTR) {
        if (n == 0) fd.reset();
        return;
      }
    }
  };
  auto keep_errors = [&](std::string_view d) { AppendTail(errors, d); };
  auto fail = [&](ErrorCode code, std::string message) -> Status {
    child->Terminate(options_.stop_grace);
    drain(err, keep_errors);
    std::string said(TrimRight(SanitizeForTerminal(errors)));
    return MakeError(code, said.empty() ? message : fmt::format("{}: {}", message, said));
  };
  int got = 0;
  while (got == 0) {
    if (auto st = child->TryWait()) {
      drain(err, keep_errors);
      return MakeError(ErrorCode::kUnavailable,
                       fmt::format("{} {}: {}", what, DescribeWaitStatus(*st), Shown(errors)));
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      return fail(ErrorCode::kTimeout, fmt::format("{} did not say where it listens within {} ms",
                                                   what, options_.ready_timeout.count()));
    }
    pollfd fds[4];
    int n = 0;
    int out_idx = -1, err_idx = -1;
    // Stop() during a restart ends the wait at once.
    const int stop_idx = n;
    fds[n++] = {stop_fd_.get(), POLLIN, 0};
    if (out) {
      out_idx = n;
      fds[n++] = {out.get(), POLLIN, 0};
    }
    if (err) {
      err_idx = n;
      fds[n++] = {err.get(), POLLIN, 0};
    }
    if (child->pidfd() >= 0) fds[n++] = {child->pidfd(), POLLIN, 0};
    int wait_ms = static_cast<int>(
        child->pidfd() >= 0 ? left.count()
                            : std::min<int64_t>(left.count(), options_.poll_interval.count()));
    if (::poll(fds, static_cast<nfds_t>(n), wait_ms) < 0 && errno != EINTR) {
      return fail(ErrorCode::kInternal,
                  fmt::format("{}: {}", what, SyscallError("poll", errno).message));
    }
    if (fds[stop_idx].revents != 0) {
      return fail(ErrorCode::kCancelled, fmt::format("{}: the port-forward was stopped", what));
    }
    if (err_idx >= 0 && fds[err_idx].revents != 0) drain(err, keep_errors);
    if (out_idx < 0 || fds[out_idx].revents == 0) continue;
    std::optional<Error> bad;
    drain(out, [&](std::string_view d) {
      if (got != 0 || bad) return;  // later lines are the monitor's
      line_buf.append(d);
      size_t nl;
      while (got == 0 && !bad && (nl = line_buf.find('\n')) != std::string::npos) {
        std::string line = line_buf.substr(0, nl);
        line_buf.erase(0, nl + 1);
        if (IsBlank(line) || line.starts_with("Handling connection for")) continue;
        auto p = ParseForwardingLine(line, options_.remote_port);
        if (!p) {
          bad = Error(ErrorCode::kUnavailable,
                      fmt::format("{} printed something unexpected: {}", what, p.error().message));
        } else if (port > 0 && *p != port) {
          bad = Error(ErrorCode::kUnavailable,
                      fmt::format("{} listens on 127.0.0.1:{}, not on the requested port {}", what,
                                  *p, port));
        } else {
          got = *p;
        }
      }
      if (got == 0 && !bad && line_buf.size() > kMaxStdoutLine) {
        bad = Error(ErrorCode::kUnavailable,
                    fmt::format("{} printed a line longer than {} bytes: '{}'", what,
                                kMaxStdoutLine, ShownLine(line_buf)));
      }
    });
    if (bad) return fail(bad->code, bad->message);
    // kubectl closing its stdout without a word: wait for its exit status.
  }
  // The line is printed once kubectl listens: the listener must be the child's.
  if (auto owned = CheckListenerOwner(child->pid(), static_cast<uint16_t>(got)); !owned) {
    return fail(owned.error().code, fmt::format("{}: {}", what, owned.error().message));
  }
  std::lock_guard lock(mu_);
  if (port == 0) port_ = got;  // restarts keep it (and run while others read it)
  child_ = std::move(*child);
  stdout_ = std::move(out);
  stderr_ = std::move(err);
  tail_ = errors;
  return {};
}

void PortForward::DrainLocked() {
  char buf[4096];
  for (UniqueFd* fd : {&stdout_, &stderr_}) {
    while (*fd) {
      ssize_t got = ::read(fd->get(), buf, sizeof buf);
      if (got > 0) {
        if (fd == &stderr_) AppendTail(tail_, std::string_view(buf, static_cast<size_t>(got)));
        continue;
      }
      if (got == 0) fd->reset();
      if (got == 0 || errno != EINTR) break;
    }
  }
}

void PortForward::Monitor() {
  for (;;) {
    pollfd fds[4];
    nfds_t n = 0;
    fds[n++] = {stop_fd_.get(), POLLIN, 0};
    bool have_pidfd = false;
    {
      std::lock_guard lock(mu_);
      if (child_.pidfd() >= 0) {
        have_pidfd = true;
        fds[n++] = {child_.pidfd(), POLLIN, 0};
      }
      if (stdout_) fds[n++] = {stdout_.get(), POLLIN, 0};
      if (stderr_) fds[n++] = {stderr_.get(), POLLIN, 0};
    }
    int r = ::poll(fds, n, have_pidfd ? -1 : static_cast<int>(options_.poll_interval.count()));
    if (r < 0 && errno != EINTR) {
      std::lock_guard lock(mu_);
      dead_ = Error(ErrorCode::kInternal, fmt::format("watching kubectl port-forward: {}",
                                                      SyscallError("poll", errno).message));
      cv_.notify_all();
      return;
    }
    if (fds[0].revents != 0) return;  // Stop()
    std::string died;
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
      DrainLocked();
      auto status = child_.TryWait();
      if (!status) continue;
      DrainLocked();
      died = fmt::format("kubectl port-forward {} (127.0.0.1:{}) {}: {}", options_.service, port_,
                         DescribeWaitStatus(*status), OutputTail());
      if (restarts_ >= options_.max_restarts) {
        dead_ = Error(ErrorCode::kUnavailable,
                      fmt::format("{} (after {} restart{}); the sandbox router is unreachable",
                                  died, restarts_, restarts_ == 1 ? "" : "s"));
        cv_.notify_all();
        return;
      }
      // Health() holds callers back until the replacement has been checked.
      restarting_ = true;
      tail_.clear();
    }
    // The same port, so the URL handed out stays valid. If someone else took
    // it meanwhile, kubectl cannot listen there, or the owner check refuses.
    auto s = Launch(port_);
    std::lock_guard lock(mu_);
    restarting_ = false;
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
  std::unique_lock lock(mu_);
  // A child that died a moment ago, noticed or not by the monitor yet: its
  // port may already be someone else's, so wait for the restart's outcome.
  auto settled = [&] {
    return dead_.has_value() || stopping_ || (!restarting_ && !child_.HasExited());
  };
  auto bound = options_.ready_timeout + 2 * options_.stop_grace + std::chrono::seconds(5);
  if (!cv_.wait_for(lock, bound, settled)) {
    return MakeError(ErrorCode::kUnavailable,
                     fmt::format("kubectl port-forward {} (127.0.0.1:{}) is being restarted",
                                 options_.service, port_));
  }
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
    cv_.notify_all();
  }
  uint64_t one = 1;
  (void)::write(stop_fd_.get(), &one, sizeof one);
  if (monitor_.joinable()) monitor_.join();
  std::lock_guard lock(mu_);
  child_.Terminate(options_.stop_grace);
  stdout_.reset();
  stderr_.reset();
}

// ------------------------------------------------------------------ SandboxConnection

Result<DaemonEndpoint> PlanEndpoint(const ConnectionOptions& options,
                                    const ClaimedSandbox& sandbox) {
  DaemonEndpoint endpoint;
  if (!options.router_token.empty() && !IsHeaderToken(options.router_token)) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("the router token must be printable ASCII without spaces, at "
                                 "most {} bytes",
                                 kMaxHeaderToken));
  }
  std::string token = options.router_token;
  bool scoped = false;
  if (!options.router_token_secret.empty()) {
    auto expires = std::chrono::system_clock::now() + kScopedRouterTokenLifetime;
    auto minted = MintScopedRouterToken(
        options.router_token_secret,
        {sandbox.namespace_name, sandbox.sandbox_name,
         std::chrono::duration_cast<std::chrono::seconds>(expires.time_since_epoch()).count()});
    if (!minted) return tl::unexpected(minted.error());
    token = std::move(*minted);
    scoped = true;
  } else if (auto scope = ReadScopedRouterToken(token)) {
    // A scoped token someone issued: it opens one sandbox only.
    if (scope->namespace_name != sandbox.namespace_name ||
        scope->sandbox_name != sandbox.sandbox_name) {
      return MakeError(ErrorCode::kPermissionDenied,
                       fmt::format("the router token is scoped to sandbox {}/{}, not to {}/{}; "
                                   "give this sandbox's token (or the router's scoped-token "
                                   "secret: --router-token-secret-file)",
                                   scope->namespace_name, scope->sandbox_name,
                                   sandbox.namespace_name, sandbox.sandbox_name));
    }
    scoped = true;
  }
  RouterTarget target{sandbox.sandbox_name, sandbox.namespace_name, options.daemon_port,
                      options.send_pod_ip && !scoped ? sandbox.pod_ip : "", token};
  switch (options.mode) {
    case ConnectionMode::kPortForward:
      // The URL is the tunnel's, known once it is up (Open).
      endpoint.headers = RouterHeaders(target);
      endpoint.router =
          fmt::format("the sandbox router ({} in namespace {}, through kubectl port-forward)",
                      options.port_forward.service, options.port_forward.namespace_name);
      break;
    case ConnectionMode::kDirect: {
      if (options.direct_url.empty()) {
        return MakeError(ErrorCode::kInvalidArgument,
                         "a router or gateway URL is required for a direct connection");
      }
      std::string url = options.direct_url;
      while (url.size() > 1 && url.back() == '/') url.pop_back();
      endpoint.base_url = url;
      endpoint.headers = RouterHeaders(target);
      endpoint.router = fmt::format("the sandbox router at {}", url);
      break;
    }
    case ConnectionMode::kInCluster: {
      std::string host = sandbox.pod_ip;
      if (host.empty()) {
        host = fmt::format("{}.{}.svc.cluster.local", sandbox.sandbox_name, sandbox.namespace_name);
      } else if (host.find(':') != std::string::npos) {
        host = "[" + host + "]";
      }
      endpoint.base_url = fmt::format("http://{}:{}", host, options.daemon_port);
      break;
    }
  }
  endpoint.daemon_port = options.daemon_port;
  // The claim's own token (claim_token.h), whichever way the daemon is reached.
  if (!sandbox.daemon_token.empty()) {
    endpoint.headers.Set(std::string(net::kSandboxdTokenHeader), sandbox.daemon_token);
  }
  return endpoint;
}

Result<std::unique_ptr<SandboxConnection>> SandboxConnection::Open(const ConnectionOptions& options,
                                                                   const ClaimedSandbox& sandbox) {
  auto planned = PlanEndpoint(options, sandbox);
  if (!planned) return tl::unexpected(planned.error());
  std::unique_ptr<SandboxConnection> c(new SandboxConnection());
  c->endpoint_ = std::move(*planned);
  if (options.mode == ConnectionMode::kPortForward) {
    auto pf = PortForward::Start(options.port_forward);
    if (!pf) return tl::unexpected(pf.error());
    c->forward_ = std::move(*pf);
    c->endpoint_.base_url = c->forward_->base_url();
    c->endpoint_.router = fmt::format(
        "the sandbox router ({} in namespace {}, through kubectl port-forward on 127.0.0.1:{})",
        options.port_forward.service, options.port_forward.namespace_name,
        c->forward_->local_port());
  }
  return c;
}

namespace {

constexpr std::string_view kNonDaemonAnswer = "sandbox daemon answered HTTP ";

// The HTTP status of a non-daemon answer the sandbox client reported, and
// what followed it; status 0 when `error` is not one.
std::pair<int, std::string_view> NonDaemonAnswer(const Error& error) {
  size_t at = error.message.find(kNonDaemonAnswer);
  if (at == std::string::npos) return {0, {}};
  std::string_view rest = std::string_view(error.message).substr(at + kNonDaemonAnswer.size());
  int status = 0;
  size_t digits = 0;
  while (digits < rest.size() && digits < 3 && rest[digits] >= '0' && rest[digits] <= '9') {
    status = status * 10 + (rest[digits] - '0');
    ++digits;
  }
  if (digits != 3) return {0, {}};
  return {status, rest.substr(digits)};
}

}  // namespace

bool PodDidNotAnswer(const Error& error) {
  if (error.code == ErrorCode::kUnavailable) return true;
  int status = NonDaemonAnswer(error).first;
  return status == 502 || status == 503 || status == 504;
}

Error NameRouterError(Error error, const DaemonEndpoint& endpoint) {
  if (endpoint.router.empty()) return error;
  auto [status, body] = NonDaemonAnswer(error);
  if (status == 0) return error;
  size_t at = error.message.find(kNonDaemonAnswer);
  if (body.starts_with(": ")) body.remove_prefix(2);
  // Both upstream routers (Python and Go) answer {"detail": "..."}.
  std::string detail(body);
  if (auto parsed = ParseJsonObject(body); parsed) {
    if (auto it = parsed->find("detail"); it != parsed->end() && it->value().is_string()) {
      detail = std::string(it->value().as_string());
    }
  }
  std::string check;
  if (status == 401 || status == 403) {
    check =
        "check the router token (--router-token / AGENT_SANDBOX_ROUTER_TOKEN): the Python router "
        "compares it with its ROUTER_AUTH_TOKEN, the Go router checks it as its --authz-mode "
        "says (tokenreview: a Kubernetes token it may review; scoped-token: a token for this "
        "sandbox)";
  } else if (status == 400) {
    check =
        "the router rejected the X-Sandbox-ID/-Namespace/-Port/-Pod-IP headers; check the "
        "claim's Sandbox name and pod IP (a Go router refuses loopback pod IPs unless started "
        "with --allow-loopback-pod-ip)";
  } else if (status == 502 || status == 503 || status == 504) {
    check = fmt::format(
        "the router could not reach the sandbox's pod; check that the pod is Running, that its "
        "daemon listens on port {} (X-Sandbox-Port), and that a NetworkPolicy lets the router in",
        endpoint.daemon_port);
  } else {
    check =
        "check that the router is the agent-sandbox sandbox router and that it forwards to "
        "the sandbox's daemon";
  }
  std::string what(std::string_view(error.message).substr(0, at));
  while (what.ends_with(' ') || what.ends_with(':')) what.pop_back();
  error.message = fmt::format("{}{}{} answered HTTP {}: {} -- {}", what, what.empty() ? "" : ": ",
                              endpoint.router, status, detail.substr(0, 300), check);
  return error;
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
