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
// What it cannot check: inside TLS, the Host header. A wildcard entry for a
// CDN-hosted name (*.cloudfront.net, *.azureedge.net, ...) therefore lets a
// sandbox reach any site on that CDN by sending its own SNI-matching name and
// another site's Host header (domain fronting): list exact names instead.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
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

class EgressProxy {
 public:
  struct Stats {
    uint64_t allowed = 0;
    uint64_t refused = 0;
    std::string last_refusal;
  };

  static Result<std::unique_ptr<EgressProxy>> Start(UniqueFd listener, EgressProxyOptions options);
  ~EgressProxy();  // stops accepting, ends every connection, joins the threads
  EgressProxy(const EgressProxy&) = delete;
  EgressProxy& operator=(const EgressProxy&) = delete;

  Stats stats() const;

 private:
  EgressProxy() = default;
  void AcceptLoop(std::promise<std::string>* joined);
  void Serve(int client);
  void Refuse(int client, int code, const std::string& why);
  Result<UniqueFd> Upstream(const std::string& host, int port, std::string* refusal);
  // Copies both ways until both sides are done. With `body` (plain HTTP),
  // only the request's body goes on from `a` after `pending_to_b`; with
  // `expect_tls`, b's first byte must start a TLS record.
  void Relay(int a, int b, std::string pending_to_b, HttpBodyFramer* body = nullptr,
             bool expect_tls = false);
  void CountRefusal(const std::string& why);
  void ReapFinished();

  EgressProxyOptions options_;
  UniqueFd listener_;
  UniqueFd stop_;  // eventfd: readable once stopping
  UniqueFd uplink_ns_;
  std::thread acceptor_;
  struct Conn {
    std::thread thread;
    std::atomic<bool> done{false};
  };
  std::mutex mu_;
  std::list<Conn> conns_;
  mutable std::mutex stats_mu_;
  Stats stats_;
};

}  // namespace deepbox::local
