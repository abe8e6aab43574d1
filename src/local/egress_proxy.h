// The filtering HTTP/HTTPS proxy of `--network allow=NAMES` (one per sandbox,
// on the host side).
//
// Path: the sandbox has no uplink at all, only `lo`; its nftables rules drop
// every packet that leaves it (network_rules.h, SandboxAllowModeNftRules). The
// launcher creates a listening socket inside the sandbox's netns
// (ListenInSandboxNetns: 127.0.0.1:kEgressProxyPort) and hands it to this
// proxy, which runs in the launcher (the supervisor) and opens its upstream
// connections from the uplink netns. HTTP(S)_PROXY in the sandbox point there.
//
// For each client connection:
//   CONNECT host:port  (HTTPS)  - the host must match the allowlist (names
//                                 only: an IP literal is refused), port 80,
//                                 443 or one the entry names; then the first
//                                 bytes must be a TLS ClientHello (in one
//                                 record) whose SNI names the same host, and
//                                 the upstream must answer with TLS. Not TLS,
//                                 or no SNI: the tunnel is closed, unless a
//                                 matching entry ends in "!plain" (e.g.
//                                 git.example.com:22!plain), which lets the
//                                 tunnel carry anything.
//   GET http://host/... (HTTP)  - the same name check on the URL and the Host
//                                 header (they must agree). ONE request per
//                                 connection: the proxy sends it with
//                                 "Connection: close" and exactly the body it
//                                 declares (Content-Length or chunked, never
//                                 both); bytes after it (a pipelined or
//                                 keep-alive request, whatever its Host) never
//                                 reach the upstream, and the connection
//                                 closes when the upstream's answer ends.
// The proxy resolves the name itself (dns_client.h, the configured resolvers
// only) and refuses the connection if ANY answer lies in a blocked range
// (AddressBlocked: private, loopback, metadata, documentation, ...; minus the
// operator's allowed_cidrs), or is, at that moment, an address of the uplink
// netns itself, on a subnet directly connected to it, or its gateway
// (ClassifyRoute: a route lookup per connection, so it is always current), so
// DNS rebinding cannot lead to a private address or to the host. Refusals
// answer 403 with the reason.
// Public mode (`public_mode`: the sandbox has its own uplink, and the proxy
// only exists for its secrets): any name or address that is not blocked, any
// port, and a tunnel may carry anything, except to a secret host.
//
// Secrets (`secrets`, with `ca`): a CONNECT to a secret host whose tunnel
// starts with TLS is intercepted (tls_intercept.h): the sandbox's TLS ends
// here with a leaf of the sandbox's CA, a verified TLS goes upstream, and
// placeholders become values by secret_rewrite.h's rules. Every other tunnel
// is relayed as before, unread. Plain HTTP never gets a value (clear text on
// the wire); its placeholders are reported as withheld.
//
// The policy can change while connections are open (SetPolicy): new
// connections follow the new one at once, and open ones the new policy
// refuses are closed (their threads poll a per-connection eventfd).
// Every connection and request, allowed or refused, is reported to
// `on_event` (the egress log, egress_log.h).
//
// What it cannot check: inside TLS, the Host header. A wildcard entry for a
// CDN-hosted name (*.cloudfront.net, *.azureedge.net, ...) therefore lets a
// sandbox reach any site on that CDN by sending its own SNI-matching name and
// another site's Host header (domain fronting): list exact names instead.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <future>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/unique_fd.h"
#include "local/dns_client.h"
#include "local/egress_log.h"
#include "local/sandbox_ca.h"
#include "local/secret_rewrite.h"

namespace deepbox::local {

inline constexpr int kEgressProxyPort = 3128;
inline constexpr const char* kEgressProxyAddress = "127.0.0.1";

struct EgressProxyOptions {
  std::vector<std::string> allow;          // NetworkPolicy::allow
  std::vector<std::string> allowed_cidrs;  // operator exceptions (ParseAllowedCidrs)
  std::vector<DnsServer> nameservers;      // the proxy's resolvers
  std::string uplink_netns;                // upstream sockets are opened here ("" = ours)
  std::chrono::milliseconds dns_timeout{3000};
  std::chrono::milliseconds connect_timeout{10000};
  std::chrono::milliseconds head_timeout{30000};  // request head / ClientHello
  size_t max_connections = 256;
  bool public_mode = false;                   // see above
  std::vector<SecretBinding> secrets;         // with `ca`
  std::shared_ptr<SandboxCa> ca;              // the sandbox's CA (its key stays in this process)
  std::string upstream_ca_file;               // intercepted upstreams' trust ("" = the system's)
  bool substitute_query = false;              // placeholders in the URL query too
  std::function<void(EgressEvent)> on_event;  // called from connection threads
};

// The environment the sandbox gets ("HTTP_PROXY=http://127.0.0.1:3128", ...).
std::vector<std::string> EgressProxyEnv();

// The body of one HTTP/1.x request, as its head declares it: how many of the
// bytes that follow the head belong to it (exposed for tests).
class HttpBodyFramer {
 public:
  static HttpBodyFramer None() { return HttpBodyFramer(kDone, 0); }
  static HttpBodyFramer Length(uint64_t n) { return HttpBodyFramer(n ? kData : kDone, n); }
  static HttpBodyFramer Chunked() { return HttpBodyFramer(kSize, 0); }
  // The count of leading bytes of `data` that are body; once done() the rest
  // is not (another request). failed(): the chunked framing is broken.
  size_t Consume(std::string_view data);
  bool done() const { return state_ == kDone; }
  bool failed() const { return state_ == kFailed; }

 private:
  enum State { kSize, kData, kDataEnd, kTrailer, kDone, kFailed };
  HttpBodyFramer(State s, uint64_t n) : state_(s), left_(n), chunked_(s == kSize) {}
  State state_;
  uint64_t left_;
  bool chunked_;
  std::string line_;
};

// The server name of a TLS ClientHello record: "" if it has none; an error if
// `record` is not a complete, well-formed ClientHello (exposed for tests).
Result<std::string> ParseTlsSni(std::string_view record);
struct ClientHelloInfo {
  std::string sni;                // "" = none
  std::vector<std::string> alpn;  // the protocols offered, in order
};
Result<ClientHelloInfo> ParseTlsClientHello(std::string_view record);

// How the body of the request with this head (request line through the empty
// line) is framed: Content-Length, chunked, or none. Both, two of either, a
// Transfer-Encoding that does not end in chunked: an error (request
// smuggling).
Result<HttpBodyFramer> RequestBodyFramer(std::string_view head);

class EgressProxy {
 public:
  struct Stats {
    uint64_t allowed = 0;
    uint64_t refused = 0;
    std::string last_refusal;
    uint64_t intercepted = 0;  // connections to secret hosts
    uint64_t substituted = 0;  // secrets put into requests
    uint64_t closed_by_policy = 0;
  };

  static Result<std::unique_ptr<EgressProxy>> Start(UniqueFd listener, EgressProxyOptions options);
  ~EgressProxy();  // stops accepting, ends every connection, joins the threads
  EgressProxy(const EgressProxy&) = delete;
  EgressProxy& operator=(const EgressProxy&) = delete;

  Stats stats() const;

  // Replaces the policy: `allow` (allow mode) or public_mode. New
  // connections follow it at once; open connections whose host:port it
  // refuses are closed (within a poll wake-up). Returns how many were closed.
  size_t SetPolicy(std::vector<std::string> allow, bool public_mode);

 private:
  struct Conn;
  struct Policy {
    std::vector<std::string> allow;
    bool public_mode = false;
  };
  Policy CurrentPolicy() const;
  bool PolicyAllows(const Policy& policy, const std::string& host, int port) const;
  EgressProxy() = default;
  void AcceptLoop(std::promise<std::string>* joined);
  void Serve(int client, Conn* conn);
  void Refuse(int client, int code, const std::string& why, EgressEvent event);
  Result<UniqueFd> Upstream(const Policy& policy, const std::string& host, int port,
                            std::string* refusal);
  // Copies both ways until both sides are done. With `body` (plain HTTP),
  // only the request's body goes on from `a` after `pending_to_b`; with
  // `expect_tls`, b's first byte must start a TLS record. Counts the bytes.
  void Relay(Conn* conn, int a, int b, std::string pending_to_b, HttpBodyFramer* body,
             bool expect_tls, EgressEvent* event);
  void CountRefusal(const std::string& why, EgressEvent event);
  void Report(EgressEvent event);
  void ReapFinished();

  EgressProxyOptions options_;
  UniqueFd listener_;
  UniqueFd stop_;  // eventfd: readable once stopping
  UniqueFd uplink_ns_;
  std::thread acceptor_;
  struct Conn {
    std::thread thread;
    std::atomic<bool> done{false};
    UniqueFd cancel;   // eventfd: readable once a policy change refuses it
    std::string host;  // under mu_: "" until known
    int port = 0;
  };
  std::mutex mu_;
  std::list<Conn> conns_;
  mutable std::mutex policy_mu_;
  Policy policy_;
  std::shared_ptr<SSL_CTX> upstream_ctx_;  // intercepted connections (created at Start)
  std::vector<std::string> secret_hosts_;  // every secret's hosts
  mutable std::mutex stats_mu_;
  Stats stats_;
};

}  // namespace deepbox::local
