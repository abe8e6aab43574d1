// A socket address from an IP literal, for tests of the address policy.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <string>

namespace deepbox::local::testing {

// IPv4 or IPv6 `ip` as a sockaddr (family AF_UNSPEC when it is neither).
inline sockaddr_storage Addr(const std::string& ip) {
  sockaddr_storage ss{};
  auto* a4 = reinterpret_cast<sockaddr_in*>(&ss);
  auto* a6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (inet_pton(AF_INET, ip.c_str(), &a4->sin_addr) == 1) {
    a4->sin_family = AF_INET;
  } else if (inet_pton(AF_INET6, ip.c_str(), &a6->sin6_addr) == 1) {
    a6->sin6_family = AF_INET6;
  }
  return ss;
}

inline const sockaddr* Sa(const sockaddr_storage& ss) {
  return reinterpret_cast<const sockaddr*>(&ss);
}

}  // namespace deepbox::local::testing
