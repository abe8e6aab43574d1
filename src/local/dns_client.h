// A minimal DNS stub resolver for the egress proxy (egress_proxy.h): A and
// AAAA queries over UDP to resolvers the caller names, from the calling
// thread's network namespace. It never reads /etc/resolv.conf or nsswitch
// (getaddrinfo would, and would ask the host's resolver from the host's
// network namespace: tests must only ever reach their own test world).
// Answers are hostile input: every length and offset is checked, compression
// pointers may only point backwards, and only the queried name's records
// (following CNAMEs inside the answer) count.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace deepbox::local {

struct DnsServer {
  std::string ip;  // IPv4 or IPv6 literal
  int port = 53;
};
// "IP", "IP:PORT" (IPv4) or "[IPv6]:PORT".
Result<DnsServer> ParseDnsServer(std::string_view text);

enum class DnsType : uint16_t { kA = 1, kCname = 5, kAaaa = 28 };

// Error::reason of ParseDnsResponse for an answer to another query (its id
// is not ours): a stray or spoofed datagram, ignored by Resolve.
inline constexpr std::string_view kReasonWrongDnsId = "wrong_dns_id";

// Wire format (exposed for tests).
Result<std::string> BuildDnsQuery(uint16_t id, std::string_view name, DnsType type);
// The addresses (AF_INET / AF_INET6, port 0) answering `name`/`type` in a
// response with `id`; an error for a malformed or mismatched message or a
// resolver error (NXDOMAIN, SERVFAIL: named in the message).
Result<std::vector<sockaddr_storage>> ParseDnsResponse(std::string_view msg, uint16_t id,
                                                       std::string_view name, DnsType type);

// A then AAAA from the first server that answers; an empty list when the name
// has no address. Each query waits up to `timeout`.
Result<std::vector<sockaddr_storage>> ResolveHost(std::string_view name,
                                                  const std::vector<DnsServer>& servers,
                                                  std::chrono::milliseconds timeout);

std::string AddressText(const sockaddr_storage& addr);  // "203.0.113.10" / "2001:db8::10"

}  // namespace deepbox::local
