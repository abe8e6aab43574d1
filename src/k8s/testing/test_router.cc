#include "k8s/testing/test_router.h"

#include <arpa/inet.h>
#include <fmt/format.h>

#include <thread>

#include "k8s/router_token.h"
#include "net/http_client.h"

namespace deepbox::k8s::testing {

namespace {

bool IsDnsLabel(std::string_view s) {
  if (s.empty() || s.size() > 63) return false;
  auto ok = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!ok(s.front()) || !ok(s.back())) return false;
  for (char c : s) {
    if (!ok(c) && c != '-') return false;
  }
  return true;
}

bool ValidTargetIp(const std::string& ip, bool allow_loopback) {
  in_addr v4{};
  if (::inet_pton(AF_INET, ip.c_str(), &v4) == 1) {
    uint32_t a = ntohl(v4.s_addr);
    if ((a >> 24) == 127) return allow_loopback;
    if ((a >> 16) == 0xA9FE || (a >> 28) == 0xE || a == 0) return false;
    return true;
  }
  in6_addr v6{};
  if (::inet_pton(AF_INET6, ip.c_str(), &v6) == 1) {
    return !IN6_IS_ADDR_LOOPBACK(&v6) && !IN6_IS_ADDR_LINKLOCAL(&v6) &&
           !IN6_IS_ADDR_MULTICAST(&v6) && !IN6_IS_ADDR_UNSPECIFIED(&v6);
  }
  return false;
}

net::Response Detail(int status, std::string_view detail) {
  return net::Response::Json(status, fmt::format(R"({{"detail":"{}"}})", detail));
}

bool HopByHop(std::string_view name) {
  for (std::string_view h :
       {"Connection", "Keep-Alive", "Transfer-Encoding", "Content-Length", "Upgrade", "TE",
        "Trailer", "Proxy-Connection", "Host", "Authorization"}) {
    if (net::EqualsIgnoreCase(name, h)) return true;
  }
  return false;
}

}  // namespace

Result<std::unique_ptr<TestRouter>> TestRouter::Start(std::string token) {
  std::unique_ptr<TestRouter> r(new TestRouter());
  r->token_ = std::move(token);
  auto ep = net::Endpoint::Parse("127.0.0.1:0");
  if (!ep) return tl::unexpected(ep.error());
  net::ServerOptions opts;
  opts.server_header = "test-sandbox-router";
  auto server = net::HttpServer::Create(
      *ep, [p = r.get()](net::Request& req, net::ResponseWriter& w) { p->Handle(req, w); }, opts);
  if (!server) return tl::unexpected(server.error());
  r->server_ = std::move(*server);
  r->server_->Start();
  return r;
}

TestRouter::~TestRouter() {
  if (server_) server_->Stop();
  server_.reset();
  // Let the detached connection threads exit (see FakeApiServer::Stop).
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

int TestRouter::port() const { return server_->port(); }
std::string TestRouter::url() const { return fmt::format("http://127.0.0.1:{}", port()); }

void TestRouter::SetBackend(const std::string& key, const std::string& address) {
  std::lock_guard lock(mu_);
  backends_[key] = address;
}

void TestRouter::DialPodIps() {
  std::lock_guard lock(mu_);
  dial_pod_ips_ = true;
}

void TestRouter::SetDefaultBackend(const std::string& address) {
  std::lock_guard lock(mu_);
  default_backend_ = address;
}

std::vector<RoutedRequest> TestRouter::requests() const {
  std::lock_guard lock(mu_);
  return log_;
}

net::HttpClient* TestRouter::ClientFor(const std::string& address) {
  std::lock_guard lock(mu_);
  auto it = clients_.find(address);
  if (it != clients_.end()) return it->second.get();
  std::string base = address.starts_with("unix:") ? address : "http://" + address;
  net::ClientOptions opts;
  opts.read_idle_timeout = std::chrono::milliseconds(0);
  auto c = net::HttpClient::Create(base, opts);
  if (!c) return nullptr;
  auto* raw = c->get();
  clients_[address] = std::move(*c);
  return raw;
}

void TestRouter::RequireScopedTokens(std::string secret) {
  std::lock_guard lock(mu_);
  scoped_secret_ = std::move(secret);
}

void TestRouter::Handle(net::Request& req, net::ResponseWriter& w) {
  RoutedRequest rec{req.method,
                    req.target,
                    req.Header("X-Sandbox-ID").value_or(""),
                    req.Header("X-Sandbox-Namespace").value_or("default"),
                    req.Header("X-Sandbox-Port").value_or("8888"),
                    req.Header("X-Sandbox-Pod-IP").value_or(""),
                    0};
  auto finish = [&](const net::Response& r) {
    rec.status = r.status;
    {
      std::lock_guard lock(mu_);
      log_.push_back(rec);
    }
    (void)w.Send(r);
  };
  if (req.path == "/healthz") return finish(net::Response::Json(200, R"({"status":"ok"})"));
  if (!token_.empty()) {
    auto auth = req.Header("Authorization");
    if (!auth || !auth->starts_with("Bearer ")) {
      return finish(Detail(401, "Missing or invalid Authorization header."));
    }
    if (auth->substr(7) != token_) return finish(Detail(401, "Invalid token."));
  }
  std::string scoped_secret;
  {
    std::lock_guard lock(mu_);
    scoped_secret = scoped_secret_;
  }
  if (!scoped_secret.empty()) {
    auto auth = req.Header("Authorization");
    if (!auth || !auth->starts_with("Bearer ")) return finish(Detail(401, "unauthenticated"));
    auto scope =
        VerifyScopedRouterToken(scoped_secret, auth->substr(7), std::chrono::system_clock::now());
    if (!scope) return finish(Detail(401, "unauthenticated"));
    if (!rec.pod_ip.empty() || req.Header("X-Sandbox-UID")) {
      return finish(Detail(403, "forbidden"));
    }
    if (scope->namespace_name != rec.namespace_name || scope->sandbox_name != rec.sandbox_id) {
      return finish(Detail(403, "forbidden"));
    }
  }
  if (rec.sandbox_id.empty()) return finish(Detail(400, "X-Sandbox-ID header is required."));
  if (!IsDnsLabel(rec.sandbox_id)) return finish(Detail(400, "Invalid sandbox ID format."));
  if (!IsDnsLabel(rec.namespace_name)) return finish(Detail(400, "Invalid namespace format."));
  int port = std::atoi(rec.port.c_str());
  if (port < 1 || port > 65535 || std::to_string(port) != rec.port) {
    return finish(Detail(400, "Invalid port format."));
  }
  bool dial_pod_ips;
  {
    std::lock_guard lock(mu_);
    dial_pod_ips = dial_pod_ips_;
  }
  if (dial_pod_ips && rec.pod_ip.empty()) {
    return finish(Detail(400, "X-Sandbox-Pod-IP is required by this test router (no DNS)."));
  }
  if (!rec.pod_ip.empty() && !ValidTargetIp(rec.pod_ip, dial_pod_ips)) {
    return finish(Detail(400, "Invalid target IP address."));
  }
  std::string key = !rec.pod_ip.empty() ? fmt::format("{}:{}", rec.pod_ip, port)
                                        : fmt::format("{}.{}.svc.cluster.local:{}", rec.sandbox_id,
                                                      rec.namespace_name, port);
  std::string address;
  {
    std::lock_guard lock(mu_);
    auto it = backends_.find(key);
    address = it != backends_.end() ? it->second : default_backend_;
    if (dial_pod_ips && it == backends_.end()) {
      address = rec.pod_ip.find(':') != std::string::npos ? fmt::format("[{}]:{}", rec.pod_ip, port)
                                                          : key;
    }
  }
  net::HttpClient* client = address.empty() ? nullptr : ClientFor(address);
  if (client == nullptr) {
    return finish(
        Detail(502, fmt::format("Could not connect to the backend sandbox: {}", rec.sandbox_id)));
  }
  net::ClientRequest out;
  out.method = req.method;
  out.target = req.target;
  out.body = req.body;
  for (const auto& [k, v] : req.headers.entries()) {
    if (HopByHop(k) || k.starts_with("X-Sandbox-") || k.starts_with("x-sandbox-")) continue;
    out.headers.Add(k, v);
  }
  bool started = false;
  auto r = client->SendStreaming(
      out,
      [&](const net::Response& head) {
        net::Headers h;
        for (const auto& [k, v] : head.headers.entries()) {
          if (!HopByHop(k)) h.Add(k, v);
        }
        rec.status = head.status;
        started = w.BeginStream(head.status, h).has_value();
        return started;
      },
      [&](std::string_view data) { return w.WriteChunk(data).has_value(); });
  if (!started) {
    return finish(Detail(502, fmt::format("Could not connect to the backend sandbox: {} ({})",
                                          rec.sandbox_id, r ? "no answer" : r.error().message)));
  }
  {
    std::lock_guard lock(mu_);
    log_.push_back(rec);
  }
  if (r) (void)w.EndStream();
}

}  // namespace deepbox::k8s::testing
