#include "local/egress_proxy.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <future>

#include "common/strings.h"
#include "local/address_policy.h"
#include "local/host_network.h"
#include "local/tls_intercept.h"
#include "sandbox/network_policy.h"
#include "sandbox/secrets.h"

namespace deepbox::local {

namespace {
constexpr size_t kMaxHead = 16384;
constexpr char kOneRequest[] =
    "one request per connection: a further request on it was not sent (Connection: close)";
constexpr size_t kMaxTlsRecord = 5 + 16384 + 2048;

// Both legs of every connection: the proxy writes what it has as it gets it
// (a response head, then its body; a TLS flight in pieces), and Nagle would
// hold each later piece until the peer's delayed ACK (40 ms).
void SetNoDelay(int fd) {
  int one = 1;
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

uint32_t Be(std::string_view s, size_t at, int bytes) {
  uint32_t v = 0;
  for (int i = 0; i < bytes; ++i) v = (v << 8) | static_cast<uint8_t>(s[at + i]);
  return v;
}

// Lower case without trailing dots: "Example.COM." and "example.com" are
// one host.
std::string Lower(std::string_view s) {
  std::string out = AsciiLower(s);
  while (!out.empty() && out.back() == '.') out.pop_back();
  return out;
}

// The allowlist entry that lets host:port through ("" if none).
std::string MatchedEntry(const std::vector<std::string>& allow, const std::string& host, int port) {
  for (const auto& entry : allow) {
    if (MatchAllowlist({entry}, host, port).matched) return entry;
  }
  return "";
}

bool IsIpLiteral(const std::string& host) {
  unsigned char buf[16];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

// "host:port" / "[v6]:port" / "host" (default port).
bool SplitHostPort(std::string_view in, int default_port, std::string* host, int* port) {
  std::string_view h = in, p;
  if (!in.empty() && in[0] == '[') {
    size_t close = in.find(']');
    if (close == std::string_view::npos) return false;
    h = in.substr(1, close - 1);
    if (close + 1 < in.size()) {
      if (in[close + 1] != ':') return false;
      p = in.substr(close + 2);
    }
  } else if (size_t colon = in.rfind(':'); colon != std::string_view::npos) {
    h = in.substr(0, colon);
    p = in.substr(colon + 1);
    if (h.find(':') != std::string_view::npos) return false;
  }
  *port = default_port;
  if (!p.empty() || (in.size() && in.back() == ':')) {
    if (p.empty() || p.size() > 5) return false;
    int v = 0;
    for (char c : p) {
      if (c < '0' || c > '9') return false;
      v = v * 10 + (c - '0');
    }
    if (v < 1 || v > 65535) return false;
    *port = v;
  }
  if (h.empty()) return false;
  *host = Lower(h);
  return true;
}

// Waits until fd is readable (or stop or cancel fires / timeout). 1 ready,
// 0 timeout, -1 stop/cancel/error. cancel -1: none.
int WaitReadable(int fd, int stop, int timeout_ms, int cancel = -1) {
  pollfd p[3] = {{fd, POLLIN, 0}, {stop, POLLIN, 0}, {cancel, POLLIN, 0}};
  for (;;) {
    int rc = poll(p, 3, timeout_ms);
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) return -1;
    if (rc == 0) return 0;
    if (p[1].revents || p[2].revents) return -1;
    return 1;
  }
}

bool WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      if (poll(&p, 1, 10000) <= 0) return false;
      continue;
    }
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// The value of header `name` (case-insensitive) in a request head; "" if absent.
std::string HeaderValue(std::string_view head, std::string_view name, int* count) {
  std::string value;
  *count = 0;
  size_t pos = head.find("\r\n");
  while (pos != std::string_view::npos && pos + 2 < head.size()) {
    size_t start = pos + 2;
    size_t end = head.find("\r\n", start);
    if (end == std::string_view::npos || end == start) break;
    std::string_view line = head.substr(start, end - start);
    size_t colon = line.find(':');
    if (colon != std::string_view::npos && Lower(line.substr(0, colon)) == name) {
      std::string_view v = line.substr(colon + 1);
      while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
      while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
      value = std::string(v);
      ++*count;
    }
    pos = end;
  }
  return value;
}
}  // namespace

std::vector<std::string> EgressProxyEnv() {
  std::string url = fmt::format("http://{}:{}", kEgressProxyAddress, kEgressProxyPort);
  return {"HTTP_PROXY=" + url,
          "HTTPS_PROXY=" + url,
          "http_proxy=" + url,
          "https_proxy=" + url,
          "NO_PROXY=localhost,127.0.0.1,::1",
          "no_proxy=localhost,127.0.0.1,::1"};
}

size_t HttpBodyFramer::Consume(std::string_view data) {
  constexpr size_t kMaxLine = 4096;
  size_t used = 0;
  while (used < data.size() && state_ != kDone && state_ != kFailed) {
    if (state_ == kData) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(left_, data.size() - used));
      used += n;
      left_ -= n;
      if (left_ == 0) state_ = chunked_ ? kDataEnd : kDone;
      continue;
    }
    // Line states: kSize ("1a;ext"), kDataEnd (the CRLF after a chunk), kTrailer.
    char c = data[used++];
    if (c != '\n') {
      if (state_ == kDataEnd && (c != '\r' || !line_.empty())) {
        state_ = kFailed;  // only CRLF may follow a chunk's data
        continue;
      }
      line_ += c;
      if (line_.size() > kMaxLine) state_ = kFailed;
      continue;
    }
    if (line_.empty() || line_.back() != '\r') {
      state_ = kFailed;
      continue;
    }
    line_.pop_back();
    std::string line = std::move(line_);
    line_.clear();
    if (state_ == kDataEnd) {
      state_ = line.empty() ? kSize : kFailed;
    } else if (state_ == kTrailer) {
      if (line.empty()) state_ = kDone;
    } else {  // kSize
      std::string_view hex = std::string_view(line).substr(0, line.find(';'));
      while (!hex.empty() && (hex.back() == ' ' || hex.back() == '\t')) hex.remove_suffix(1);
      if (hex.empty() || hex.size() > 15) {
        state_ = kFailed;
        continue;
      }
      uint64_t v = 0;
      for (char h : hex) {
        int d = h >= '0' && h <= '9'   ? h - '0'
                : h >= 'a' && h <= 'f' ? h - 'a' + 10
                : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                       : -1;
        if (d < 0) {
          state_ = kFailed;
          break;
        }
        v = v * 16 + static_cast<uint64_t>(d);
      }
      if (state_ == kFailed) continue;
      left_ = v;
      state_ = v == 0 ? kTrailer : kData;
    }
  }
  return used;
}

Result<ClientHelloInfo> ParseTlsClientHello(std::string_view r) {
  auto bad = [](std::string_view why) {
    return MakeError(ErrorCode::kInvalidArgument, fmt::format("not a TLS ClientHello: {}", why));
  };
  if (r.size() < 5 || static_cast<uint8_t>(r[0]) != 0x16 || r[1] != 3) return bad("record type");
  size_t rec_len = Be(r, 3, 2);
  if (r.size() < 5 + rec_len) return bad("record cut");
  std::string_view h = r.substr(5, rec_len);
  if (h.size() < 4 || h[0] != 1) return bad("handshake type");
  size_t hs_len = Be(h, 1, 3);
  if (hs_len + 4 > h.size()) return bad("ClientHello spans records");
  std::string_view b = h.substr(4, hs_len);
  size_t pos = 2 + 32;  // version, random
  auto skip = [&](int len_bytes) -> bool {
    if (pos + len_bytes > b.size()) return false;
    size_t n = Be(b, pos, len_bytes);
    pos += len_bytes + n;
    return pos <= b.size();
  };
  if (pos > b.size() || !skip(1) || !skip(2) || !skip(1)) return bad("fields cut");
  ClientHelloInfo info;
  if (pos == b.size()) return info;  // no extensions
  if (pos + 2 > b.size()) return bad("extensions cut");
  size_t ext_end = pos + 2 + Be(b, pos, 2);
  pos += 2;
  if (ext_end > b.size()) return bad("extensions cut");
  std::string& sni = info.sni;
  bool seen = false, seen_alpn = false;
  while (pos + 4 <= ext_end) {
    uint32_t type = Be(b, pos, 2);
    size_t len = Be(b, pos + 2, 2);
    pos += 4;
    if (pos + len > ext_end) return bad("extension cut");
    if (type == 0) {
      if (seen) return bad("two server_name extensions");
      seen = true;
      std::string_view e = b.substr(pos, len);
      if (e.size() < 2 || Be(e, 0, 2) + 2 != e.size()) return bad("server_name list");
      size_t at = 2;
      while (at + 3 <= e.size()) {
        uint32_t name_type = static_cast<uint8_t>(e[at]);
        size_t n = Be(e, at + 1, 2);
        at += 3;
        if (at + n > e.size()) return bad("server_name cut");
        if (name_type == 0) {
          if (!sni.empty()) return bad("two host names");
          sni = Lower(e.substr(at, n));
          if (sni.empty()) return bad("empty host name");
        }
        at += n;
      }
    } else if (type == 16) {  // application_layer_protocol_negotiation
      if (seen_alpn) return bad("two ALPN extensions");
      seen_alpn = true;
      std::string_view e = b.substr(pos, len);
      if (e.size() < 2 || Be(e, 0, 2) + 2 != e.size()) return bad("ALPN list");
      size_t at = 2;
      while (at < e.size()) {
        size_t n = static_cast<uint8_t>(e[at]);
        ++at;
        if (n == 0 || at + n > e.size()) return bad("ALPN protocol");
        if (info.alpn.size() < 16) info.alpn.emplace_back(e.substr(at, n));
        at += n;
      }
    }
    pos += len;
  }
  if (pos != ext_end) return bad("extensions cut");
  return info;
}

Result<std::string> ParseTlsSni(std::string_view record) {
  auto info = ParseTlsClientHello(record);
  if (!info) return tl::unexpected(info.error());
  return info->sni;
}

Result<HttpBodyFramer> RequestBodyFramer(std::string_view head) {
  int cl_count = 0, te_count = 0;
  std::string cl = HeaderValue(head, "content-length", &cl_count);
  std::string te = Lower(HeaderValue(head, "transfer-encoding", &te_count));
  if (te_count > 0) {
    if (cl_count > 0 || te_count > 1) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "both Content-Length and Transfer-Encoding, or two of them");
    }
    size_t comma = te.rfind(',');
    std::string last = te.substr(comma == std::string::npos ? 0 : comma + 1);
    while (!last.empty() && (last.front() == ' ' || last.front() == '\t')) last.erase(0, 1);
    if (last != "chunked") {
      return MakeError(ErrorCode::kInvalidArgument, "a Transfer-Encoding that is not chunked");
    }
    return HttpBodyFramer::Chunked();
  }
  if (cl_count > 0) {
    if (cl_count > 1 || cl.empty() || cl.size() > 18 ||
        cl.find_first_not_of("0123456789") != std::string::npos) {
      return MakeError(ErrorCode::kInvalidArgument, "a bad or repeated Content-Length");
    }
    return HttpBodyFramer::Length(std::stoull(cl));
  }
  return HttpBodyFramer::None();
}

Result<std::unique_ptr<EgressProxy>> EgressProxy::Start(UniqueFd listener,
                                                        EgressProxyOptions options) {
  std::unique_ptr<EgressProxy> p(new EgressProxy());
  p->options_ = std::move(options);
  p->listener_ = std::move(listener);
  p->policy_ = {p->options_.allow, p->options_.public_mode};
  if (!p->options_.secrets.empty()) {
    if (!p->options_.ca) {
      return MakeError(ErrorCode::kInvalidArgument, "egress proxy: secrets need the sandbox's CA");
    }
    auto ctx = UpstreamTlsContext(p->options_.upstream_ca_file);
    if (!ctx) return tl::unexpected(ctx.error());
    p->upstream_ctx_ = std::move(*ctx);
    for (const auto& secret : p->options_.secrets) {
      for (const auto& h : secret.hosts) p->secret_hosts_.push_back(h);
    }
  }
  p->stop_.reset(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!p->stop_) return MakeSyscallError("eventfd", errno);
  if (!p->options_.uplink_netns.empty()) {
    p->uplink_ns_.reset(open(p->options_.uplink_netns.c_str(), O_RDONLY | O_CLOEXEC));
    if (!p->uplink_ns_) return MakeSyscallError("open", errno, p->options_.uplink_netns);
  }
  int flags = fcntl(p->listener_.get(), F_GETFL);
  if (flags < 0 || fcntl(p->listener_.get(), F_SETFL, flags | O_NONBLOCK) != 0) {
    return MakeSyscallError("fcntl", errno, "proxy listener");
  }
  // The acceptor joins the uplink netns first; a failure there fails Start
  // (the sandbox would otherwise wait on a proxy that never answers).
  std::promise<std::string> joined;
  std::future<std::string> joined_result = joined.get_future();
  p->acceptor_ = std::thread([raw = p.get(), &joined] { raw->AcceptLoop(&joined); });
  std::string why = joined_result.get();
  if (!why.empty()) {
    p->acceptor_.join();
    return MakeError(ErrorCode::kUnavailable, "egress proxy: " + why);
  }
  return p;
}

EgressProxy::~EgressProxy() {
  if (stop_) {
    uint64_t one = 1;
    (void)!write(stop_.get(), &one, sizeof(one));
  }
  if (acceptor_.joinable()) acceptor_.join();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& c : conns_) {
    if (c.thread.joinable()) c.thread.join();
  }
}

EgressProxy::Stats EgressProxy::stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return stats_;
}

void EgressProxy::ReapFinished() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = conns_.begin(); it != conns_.end();) {
    if (it->done.load()) {
      it->thread.join();
      it = conns_.erase(it);
    } else {
      ++it;
    }
  }
}

void EgressProxy::AcceptLoop(std::promise<std::string>* joined) {
  // Upstream sockets belong to the netns of the thread that creates them:
  // this thread and the connection threads it starts live in the uplink's.
  if (uplink_ns_ && setns(uplink_ns_.get(), CLONE_NEWNET) != 0) {
    joined->set_value(SyscallError("setns", errno, "the uplink network namespace").message);
    return;
  }
  joined->set_value("");
  for (;;) {
    if (WaitReadable(listener_.get(), stop_.get(), 1000) < 0) return;
    ReapFinished();
    int c = accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) continue;
    SetNoDelay(c);
    std::lock_guard<std::mutex> lock(mu_);
    if (conns_.size() >= options_.max_connections) {
      close(c);
      continue;
    }
    UniqueFd cancel(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!cancel) {
      close(c);
      continue;
    }
    conns_.emplace_back();
    Conn& conn = conns_.back();
    conn.cancel = std::move(cancel);
    conn.thread = std::thread([this, c, &conn] {
      Serve(c, &conn);
      close(c);
      conn.done.store(true);
    });
  }
}

EgressProxy::Policy EgressProxy::CurrentPolicy() const {
  std::lock_guard<std::mutex> lock(policy_mu_);
  return policy_;
}

bool EgressProxy::PolicyAllows(const Policy& policy, const std::string& host, int port) const {
  if (policy.public_mode) return true;  // addresses are checked per connection
  if (IsIpLiteral(host)) return false;
  return MatchAllowlist(policy.allow, host, port).matched;
}

size_t EgressProxy::SetPolicy(std::vector<std::string> allow, bool public_mode) {
  Policy next{std::move(allow), public_mode};
  {
    std::lock_guard<std::mutex> lock(policy_mu_);
    policy_ = next;
  }
  size_t closed = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& c : conns_) {
      if (c.done.load() || c.host.empty() || PolicyAllows(next, c.host, c.port)) continue;
      uint64_t one = 1;
      (void)!write(c.cancel.get(), &one, sizeof(one));
      ++closed;
    }
  }
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_.closed_by_policy += closed;
  }
  return closed;
}

void EgressProxy::Report(EgressEvent event) {
  if (!options_.on_event) return;
  if (event.unix_ms == 0) {
    event.unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count();
  }
  options_.on_event(std::move(event));
}

void EgressProxy::Refuse(int client, int code, const std::string& why, EgressEvent event) {
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    ++stats_.refused;
    stats_.last_refusal = why;
  }
  event.verdict = "refused";
  event.rule = why;
  Report(std::move(event));
  std::string body = "deepbox egress proxy: " + why + "\n";
  const char* text = code == 403 ? "Forbidden" : code == 400 ? "Bad Request" : "Bad Gateway";
  (void)WriteAll(client, fmt::format("HTTP/1.1 {} {}\r\nContent-Type: text/plain\r\n"
                                     "Connection: close\r\nContent-Length: {}\r\n\r\n{}",
                                     code, text, body.size(), body));
}

Result<UniqueFd> EgressProxy::Upstream(const Policy& policy, const std::string& host, int port,
                                       std::string* refusal) {
  const bool literal = IsIpLiteral(host);
  if (literal && !policy.public_mode) {
    *refusal = fmt::format("{} is an address: only allowed names are reachable", host);
    return MakeError(ErrorCode::kPermissionDenied, *refusal);
  }
  if (!PolicyAllows(policy, host, port)) {
    *refusal = fmt::format("{}:{} is not on this sandbox's allowlist", host, port);
    return MakeError(ErrorCode::kPermissionDenied, *refusal);
  }
  Result<std::vector<sockaddr_storage>> addrs = std::vector<sockaddr_storage>{};
  if (literal) {
    sockaddr_storage ss{};
    auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
    if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
      v4->sin_family = AF_INET;
    } else if (inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
      v6->sin6_family = AF_INET6;
    }
    addrs->push_back(ss);
  } else {
    addrs = ResolveHost(host, options_.nameservers, options_.dns_timeout);
  }
  if (!addrs) return tl::unexpected(addrs.error());
  if (addrs->empty()) return MakeError(ErrorCode::kNotFound, host + " has no address");
  for (const auto& a : *addrs) {
    const auto* sa = reinterpret_cast<const sockaddr*>(&a);
    if (AddressRefused(sa, options_.allowed_cidrs)) {
      *refusal = fmt::format(
          "{} resolves to {}, a blocked (private, loopback, link-local, reserved or "
          "special-purpose) address",
          host, AddressText(a));
      return MakeError(ErrorCode::kPermissionDenied, *refusal);
    }
    // Where the uplink would send it now (this thread lives in the uplink netns).
    auto kind = ClassifyRoute(sa);
    if (!kind) {
      *refusal =
          fmt::format("cannot check the route to {}: {}", AddressText(a), kind.error().message);
      return MakeError(ErrorCode::kPermissionDenied, *refusal);
    }
    if (*kind == RouteKind::kLocal) {
      *refusal = fmt::format("{} resolves to {}, an address of the host", host, AddressText(a));
      return MakeError(ErrorCode::kPermissionDenied, *refusal);
    }
    if ((*kind == RouteKind::kOnLink || *kind == RouteKind::kGateway) &&
        !AddressInCidrs(sa, options_.allowed_cidrs)) {
      *refusal =
          fmt::format("{} resolves to {}, {}", host, AddressText(a),
                      *kind == RouteKind::kGateway ? "the host's gateway"
                                                   : "on a network directly connected to the host");
      return MakeError(ErrorCode::kPermissionDenied, *refusal);
    }
  }
  Error last(ErrorCode::kUnavailable, "no address");
  for (auto a : *addrs) {
    socklen_t len;
    if (a.ss_family == AF_INET) {
      reinterpret_cast<sockaddr_in*>(&a)->sin_port = htons(static_cast<uint16_t>(port));
      len = sizeof(sockaddr_in);
    } else {
      reinterpret_cast<sockaddr_in6*>(&a)->sin6_port = htons(static_cast<uint16_t>(port));
      len = sizeof(sockaddr_in6);
    }
    UniqueFd s(socket(a.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!s) return MakeSyscallError("socket", errno);
    SetNoDelay(s.get());
    int rc = connect(s.get(), reinterpret_cast<sockaddr*>(&a), len);
    if (rc != 0 && errno != EINPROGRESS) {
      last = SyscallError("connect", errno, AddressText(a));
      continue;
    }
    if (rc != 0) {
      pollfd p[2] = {{s.get(), POLLOUT, 0}, {stop_.get(), POLLIN, 0}};
      int pr = poll(p, 2, static_cast<int>(options_.connect_timeout.count()));
      if (pr <= 0 || p[1].revents) {
        last = Error(ErrorCode::kTimeout, "connect to " + AddressText(a) + " timed out");
        continue;
      }
      int err = 0;
      socklen_t el = sizeof(err);
      getsockopt(s.get(), SOL_SOCKET, SO_ERROR, &err, &el);
      if (err != 0) {
        last = SyscallError("connect", err, AddressText(a));
        continue;
      }
    }
    // An address the host gained between the route check and connect().
    sockaddr_storage local{};
    socklen_t ll = sizeof(local);
    if (getsockname(s.get(), reinterpret_cast<sockaddr*>(&local), &ll) == 0 &&
        AddressText(local) == AddressText(a)) {
      *refusal = fmt::format("{} resolves to {}, an address of the host", host, AddressText(a));
      return MakeError(ErrorCode::kPermissionDenied, *refusal);
    }
    return s;
  }
  return tl::unexpected(last);
}

void EgressProxy::Serve(int client, Conn* conn) {
  const int head_ms = static_cast<int>(options_.head_timeout.count());
  EgressEvent event;
  event.event = "connect";
  std::string head;
  char buf[4096];
  size_t end = std::string::npos;
  while (end == std::string::npos) {
    if (head.size() > kMaxHead) return Refuse(client, 400, "request head too large", event);
    if (WaitReadable(client, stop_.get(), head_ms) <= 0) return;
    ssize_t n = recv(client, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    head.append(buf, static_cast<size_t>(n));
    end = head.find("\r\n\r\n");
  }
  std::string rest = head.substr(end + 4);  // bytes after the head (a body, a ClientHello)
  head.resize(end + 2);
  size_t line_end = head.find("\r\n");
  std::string line = head.substr(0, line_end);
  size_t sp1 = line.find(' '), sp2 = line.rfind(' ');
  if (sp1 == std::string::npos || sp2 == sp1) return Refuse(client, 400, "bad request line", event);
  std::string method = line.substr(0, sp1);
  std::string target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  std::string version = line.substr(sp2 + 1);
  if (version.rfind("HTTP/1.", 0) != 0) return Refuse(client, 400, "only HTTP/1.x", event);
  int host_count = 0;
  std::string host_header = HeaderValue(head, "host", &host_count);
  if (host_count > 1) return Refuse(client, 400, "more than one Host header", event);

  const Policy policy = CurrentPolicy();
  std::string host, refusal;
  int port = 0;
  auto track = [&] {
    std::lock_guard<std::mutex> lock(mu_);
    conn->host = host;
    conn->port = port;
  };
  if (method == "CONNECT") {
    if (!SplitHostPort(target, -1, &host, &port) || port < 0) {
      return Refuse(client, 400, "CONNECT needs host:port", event);
    }
    event.host = host;
    event.port = port;
    track();
    auto up = Upstream(policy, host, port, &refusal);
    if (!up) return Refuse(client, refusal.empty() ? 502 : 403, up.error().message, event);
    const bool secret_host = !options_.secrets.empty() && SecretHostMatches(secret_hosts_, host);
    // Public mode: the sandbox could reach the host directly anyway, so only a
    // secret host's tunnel must be TLS.
    const bool plain =
        !secret_host && (policy.public_mode || MatchAllowlist(policy.allow, host, port).plain);
    if (!WriteAll(client, "HTTP/1.1 200 Connection established\r\n\r\n")) return;
    // The tunnel's first bytes: a TLS ClientHello must name the same host
    // (anything, for a "!plain" entry).
    std::string hello = rest;
    while (hello.size() < 5 ||
           (static_cast<uint8_t>(hello[0]) == 0x16 && hello.size() < 5 + Be(hello, 3, 2))) {
      if (hello.size() > kMaxTlsRecord) break;
      if (WaitReadable(client, stop_.get(), head_ms, conn->cancel.get()) <= 0) return;
      ssize_t n = recv(client, buf, sizeof(buf), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;
      hello.append(buf, static_cast<size_t>(n));
      if (static_cast<uint8_t>(hello[0]) != 0x16) break;  // not TLS: a plain tunnel
    }
    // The tunnel is already open: a refusal just closes it.
    const bool tls = static_cast<uint8_t>(hello[0]) == 0x16;
    if (!tls && !plain) {
      return CountRefusal(
          fmt::format("the tunnel to {}:{} does not start with a TLS ClientHello (an entry "
                      "'{}:{}!plain' would allow that)",
                      host, port, host, port),
          event);
    }
    ClientHelloInfo info;
    if (tls) {
      auto parsed = ParseTlsClientHello(hello);
      if (!parsed && !plain) return CountRefusal(parsed.error().message, event);
      if (parsed) info = *parsed;
      if (parsed && info.sni.empty() && !plain) {
        return CountRefusal(fmt::format("the TLS ClientHello to {} names no server (SNI)", host),
                            event);
      }
      if (parsed && !info.sni.empty() && info.sni != host) {
        return CountRefusal(
            fmt::format("TLS server name {} differs from CONNECT {}", info.sni, host), event);
      }
      event.sni = info.sni;
    }
    {
      std::lock_guard<std::mutex> lock(stats_mu_);
      ++stats_.allowed;
      if (secret_host && tls) ++stats_.intercepted;
    }
    event.verdict = "allowed";
    event.rule = policy.public_mode ? "public" : MatchedEntry(policy.allow, host, port);
    if (secret_host && tls) {
      InterceptRequest ir;
      ir.client_fd = client;
      ir.upstream_fd = up->get();
      ir.client_hello = std::move(hello);
      ir.client_alpn = info.alpn;
      ir.host = host;
      ir.port = port;
      ir.ca = options_.ca.get();
      ir.upstream_ctx = upstream_ctx_;
      ir.secrets = &options_.secrets;
      ir.substitute_query = options_.substitute_query;
      ir.stop_fd = stop_.get();
      ir.cancel_fd = conn->cancel.get();
      ir.handshake_timeout = options_.head_timeout;
      ir.on_request = [&](EgressEvent e) {
        if (!e.secrets.empty()) {
          std::lock_guard<std::mutex> lock(stats_mu_);
          stats_.substituted += e.secrets.size();
        }
        e.rule = event.rule;
        if (e.verdict == "refused") {
          CountRefusal(e.rule, e);
          return;
        }
        Report(std::move(e));
      };
      for (int fd : {client, up->get()}) {
        int flags = fcntl(fd, F_GETFL);
        if (flags >= 0) fcntl(fd, F_SETFL, flags | O_NONBLOCK);
      }
      InterceptOutcome out = InterceptTls(ir);
      event.intercepted = true;
      event.protocol = out.protocol.empty() ? "tls" : out.protocol;
      event.bytes_up = out.bytes_up;
      event.bytes_down = out.bytes_down;
      event.secrets = out.secrets;
      event.withheld = out.withheld;
      if (!out.error.empty()) {
        event.rule += " (ended: " + out.error + ")";
        if (out.refused) {
          std::lock_guard<std::mutex> lock(stats_mu_);
          ++stats_.refused;
          stats_.last_refusal = out.error;
        }
      }
      return Report(std::move(event));
    }
    event.protocol = tls ? "tls" : "tunnel";
    event.bytes_up = hello.size();
    Relay(conn, client, up->get(), hello, nullptr, /*expect_tls=*/!plain, &event);
    return Report(std::move(event));
  }

  // Plain HTTP: absolute-form target http://host[:port]/path.
  event.event = "request";
  event.method = method.substr(0, 16);
  event.protocol = "http/1.1";
  if (target.rfind("http://", 0) != 0) {
    return Refuse(client, 400, "only http:// URLs (use CONNECT for https)", event);
  }
  size_t path_at = target.find('/', 7);
  std::string authority =
      target.substr(7, path_at == std::string::npos ? std::string::npos : path_at - 7);
  std::string path = path_at == std::string::npos ? "/" : target.substr(path_at);
  if (authority.find('@') != std::string::npos) {
    return Refuse(client, 400, "userinfo in URL", event);
  }
  if (!SplitHostPort(authority, 80, &host, &port))
    return Refuse(client, 400, "bad URL host", event);
  event.host = host;
  event.port = port;
  track();
  if (!host_header.empty()) {
    std::string hh;
    int hp = 0;
    if (!SplitHostPort(host_header, 80, &hh, &hp) || hh != host || hp != port) {
      return Refuse(client, 403,
                    fmt::format("Host header {} differs from the URL's {}", host_header, host),
                    event);
    }
  }
  // The body: exactly what the head declares (request smuggling: never both).
  auto framer = RequestBodyFramer(head + "\r\n");
  if (!framer) return Refuse(client, 400, framer.error().message, event);
  HttpBodyFramer body = *framer;
  auto up = Upstream(policy, host, port, &refusal);
  if (!up) return Refuse(client, refusal.empty() ? 502 : 403, up.error().message, event);
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    ++stats_.allowed;
  }
  event.verdict = "allowed";
  event.rule = policy.public_mode ? "public" : MatchedEntry(policy.allow, host, port);
  // Plain HTTP never carries a secret's value; its placeholders are reported.
  for (const auto& secret : options_.secrets) {
    if (head.find(secret.placeholder) != std::string::npos) event.withheld.push_back(secret.name);
  }
  // Origin-form request line; Proxy-* and hop-by-hop headers stay with us: one
  // request per connection ("Connection: close"), no upgrade.
  std::string out = fmt::format("{} {} {}\r\n", method, path, version);
  size_t pos = line_end + 2;
  while (pos < head.size()) {
    size_t e = head.find("\r\n", pos);
    std::string h = head.substr(pos, e - pos);
    pos = e + 2;
    std::string name = Lower(h.substr(0, h.find(':')));
    while (!name.empty() && (name.back() == ' ' || name.back() == '\t')) name.pop_back();
    if (name.rfind("proxy-", 0) == 0 || name == "connection" || name == "keep-alive" ||
        name == "upgrade") {
      continue;
    }
    out += h + "\r\n";
  }
  if (host_header.empty()) out += fmt::format("Host: {}\r\n", authority);
  out += "Connection: close\r\n\r\n";
  size_t n = body.Consume(rest);
  if (body.failed()) return CountRefusal("a broken chunked request body", event);
  out.append(rest, 0, n);
  if (n < rest.size()) CountRefusal(kOneRequest, event);
  event.bytes_up = n;  // Relay adds the rest
  Relay(conn, client, up->get(), std::move(out), &body, false, &event);
  Report(std::move(event));
}

void EgressProxy::CountRefusal(const std::string& why, EgressEvent event) {
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    ++stats_.refused;
    stats_.last_refusal = why;
  }
  event.verdict = "refused";
  event.rule = why;
  event.secrets.clear();
  Report(std::move(event));
}

void EgressProxy::Relay(Conn* conn, int a, int b, std::string pending_to_b, HttpBodyFramer* body,
                        bool expect_tls, EgressEvent* event) {
  for (int fd : {a, b}) {
    int flags = fcntl(fd, F_GETFL);
    if (flags >= 0) fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  }
  std::string to_b = std::move(pending_to_b), to_a;
  bool a_eof = false, b_eof = false, a_shut = false, b_shut = false;
  bool b_spoke = false;     // expect_tls: b's first byte was checked
  bool extra_seen = false;  // a further request was dropped (counted once here)
  char buf[65536];
  for (;;) {
    if (a_eof && to_b.empty() && !b_shut) {
      shutdown(b, SHUT_WR);
      b_shut = true;
    }
    if (b_eof && to_a.empty() && !a_shut) {
      shutdown(a, SHUT_WR);
      a_shut = true;
    }
    // Plain HTTP: one request, so the upstream's answer ending ends the connection.
    if (body != nullptr && a_shut) return;
    if (a_shut && b_shut) return;
    pollfd p[4] = {{a, 0, 0}, {b, 0, 0}, {stop_.get(), POLLIN, 0}, {conn->cancel.get(), POLLIN, 0}};
    if (!a_eof && to_b.size() < sizeof(buf)) p[0].events |= POLLIN;
    if (!to_a.empty()) p[0].events |= POLLOUT;
    if (!b_eof && to_a.size() < sizeof(buf)) p[1].events |= POLLIN;
    if (!to_b.empty()) p[1].events |= POLLOUT;
    int rc = poll(p, 4, 600000);
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0 || p[2].revents) return;  // idle 10 min, or stopping
    if (p[3].revents) {
      event->rule += " (closed by a change of the network policy)";
      return;
    }
    auto pump_in = [&](int fd, bool* eof, std::string* out) -> bool {
      ssize_t n = recv(fd, buf, sizeof(buf), 0);
      if (n > 0) {
        std::string_view got(buf, static_cast<size_t>(n));
        if (fd == a && body != nullptr) {
          // Only the declared body goes on; a further request never does.
          size_t used = body->Consume(got);
          if (body->failed()) {
            CountRefusal("a broken chunked request body", *event);
            return false;
          }
          if (used < got.size() && !extra_seen) {
            extra_seen = true;
            CountRefusal(kOneRequest, *event);
          }
          got = got.substr(0, used);
        }
        if (fd == b && expect_tls && !b_spoke) {
          b_spoke = true;
          uint8_t first = static_cast<uint8_t>(got[0]);
          if (first != 0x16 && first != 0x15) {
            CountRefusal("the upstream did not answer the ClientHello with TLS", *event);
            return false;
          }
        }
        (fd == a ? event->bytes_up : event->bytes_down) += got.size();
        out->append(got.data(), got.size());
      } else if (n == 0) {
        *eof = true;
      } else if (errno != EAGAIN && errno != EINTR) {
        return false;
      }
      return true;
    };
    auto pump_out = [&](int fd, std::string* data) -> bool {
      ssize_t n = send(fd, data->data(), data->size(), MSG_NOSIGNAL);
      if (n > 0) {
        data->erase(0, static_cast<size_t>(n));
      } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
        return false;
      }
      return true;
    };
    if ((p[0].revents & (POLLIN | POLLHUP | POLLERR)) && !a_eof && !pump_in(a, &a_eof, &to_b)) {
      return;
    }
    if ((p[1].revents & (POLLIN | POLLHUP | POLLERR)) && !b_eof && !pump_in(b, &b_eof, &to_a)) {
      return;
    }
    if ((p[0].revents & POLLOUT) && !pump_out(a, &to_a)) return;
    if ((p[1].revents & POLLOUT) && !pump_out(b, &to_b)) return;
  }
}

}  // namespace deepbox::local
