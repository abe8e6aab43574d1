// Test-only: a sandbox router like upstream's (reference §3): requires
// X-Sandbox-ID (a DNS label), takes X-Sandbox-Namespace (default "default"),
// X-Sandbox-Port (default 8888) and X-Sandbox-Pod-IP, optionally a bearer
// token, and proxies the request -- streaming the answer -- to the daemon that
// stands in for that pod: a real address looked up by "<pod ip>:<port>" (or
// "<id>.<ns>.svc.cluster.local:<port>" without a pod IP).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/error.h"
#include "net/http.h"
#include "net/http_server.h"

namespace deepbox::net {
class HttpClient;
}

namespace deepbox::k8s::testing {

struct RoutedRequest {
  std::string method;
  std::string target;
  std::string sandbox_id;
  std::string namespace_name;
  std::string port;
  std::string pod_ip;
  int status = 0;
};

class TestRouter {
 public:
  // token: "" = unauthenticated access allowed (ALLOW_UNAUTHENTICATED_ROUTER).
  static Result<std::unique_ptr<TestRouter>> Start(std::string token = "");
  ~TestRouter();

  int port() const;
  std::string url() const;
  // "<pod ip>:<port>" or "<id>.<ns>.svc.cluster.local:<port>" -> "host:port"
  // (or "unix:/path") of the process standing in for the pod.
  void SetBackend(const std::string& key, const std::string& address);
  // Used when no backend matches (e.g. every pod is the same test daemon).
  void SetDefaultBackend(const std::string& address);
  // Like the Go router with --allow-loopback-pod-ip, for pods on loopback
  // addresses (the k8s-real tests): dials "<pod ip>:<port>" itself, accepts
  // 127.0.0.0/8, and refuses (400) any request without X-Sandbox-Pod-IP, so
  // no test can depend on a DNS lookup.
  void DialPodIps();
  // Like the Go router's --authz-mode=scoped-token (router_token.h): every
  // request needs a v1 scoped token signed with `secret` for its
  // X-Sandbox-Namespace/-ID (401 forged or expired, 403 another sandbox's),
  // and requests carrying X-Sandbox-Pod-IP or X-Sandbox-UID are refused (403).
  void RequireScopedTokens(std::string secret);
  std::vector<RoutedRequest> requests() const;

 private:
  TestRouter() = default;
  void Handle(net::Request& req, net::ResponseWriter& w);
  net::HttpClient* ClientFor(const std::string& address);

  std::string token_;
  mutable std::mutex mu_;
  std::map<std::string, std::string> backends_;
  std::string default_backend_;
  bool dial_pod_ips_ = false;
  std::string scoped_secret_;
  std::map<std::string, std::unique_ptr<net::HttpClient>> clients_;
  std::vector<RoutedRequest> log_;
  std::unique_ptr<net::HttpServer> server_;
};

}  // namespace deepbox::k8s::testing
