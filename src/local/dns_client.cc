#include "local/dns_client.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/strings.h"
#include "common/unique_fd.h"

namespace deepbox::local {

namespace {
constexpr size_t kMaxMessage = 4096;

std::string LowerName(std::string_view s) {
  std::string out = AsciiLower(s);
  while (!out.empty() && out.back() == '.') out.pop_back();
  return out;
}

uint16_t Get16(std::string_view m, size_t at) {
  return static_cast<uint16_t>((static_cast<uint8_t>(m[at]) << 8) |
                               static_cast<uint8_t>(m[at + 1]));
}

// Reads a (possibly compressed) name at *pos; advances *pos past it.
Result<std::string> ReadName(std::string_view m, size_t* pos) {
  std::string name;
  size_t at = *pos;
  bool jumped = false;
  size_t limit = at;  // pointers must go strictly backwards: no loops
  for (int hops = 0; hops < 128; ++hops) {
    if (at >= m.size()) return MakeError(ErrorCode::kInvalidArgument, "DNS name out of bounds");
    uint8_t len = static_cast<uint8_t>(m[at]);
    if ((len & 0xc0) == 0xc0) {
      if (at + 1 >= m.size()) return MakeError(ErrorCode::kInvalidArgument, "DNS pointer cut");
      size_t target = Get16(m, at) & 0x3fff;
      if (target >= limit) return MakeError(ErrorCode::kInvalidArgument, "DNS pointer forward");
      if (!jumped) *pos = at + 2;
      jumped = true;
      limit = target;
      at = target;
      continue;
    }
    if ((len & 0xc0) != 0) return MakeError(ErrorCode::kInvalidArgument, "DNS label type");
    if (len == 0) {
      if (!jumped) *pos = at + 1;
      return LowerName(name);
    }
    if (at + 1 + len > m.size()) return MakeError(ErrorCode::kInvalidArgument, "DNS label cut");
    if (!name.empty()) name += '.';
    name.append(m.substr(at + 1, len));
    if (name.size() > 255) return MakeError(ErrorCode::kInvalidArgument, "DNS name too long");
    at += 1 + len;
  }
  return MakeError(ErrorCode::kInvalidArgument, "DNS name has too many labels");
}
}  // namespace

Result<DnsServer> ParseDnsServer(std::string_view text) {
  DnsServer s;
  std::string t(text);
  unsigned char buf[16];
  auto port_of = [&](std::string_view p) -> Result<int> {
    int v = 0;
    if (p.empty() || p.size() > 5) return MakeError(ErrorCode::kInvalidArgument, "bad port");
    for (char c : p) {
      if (c < '0' || c > '9') return MakeError(ErrorCode::kInvalidArgument, "bad port");
      v = v * 10 + (c - '0');
    }
    if (v < 1 || v > 65535) return MakeError(ErrorCode::kInvalidArgument, "bad port");
    return v;
  };
  if (!t.empty() && t[0] == '[') {
    size_t close = t.find(']');
    if (close == std::string::npos || close + 1 >= t.size() || t[close + 1] != ':') {
      return MakeError(ErrorCode::kInvalidArgument, fmt::format("bad DNS server '{}'", t));
    }
    s.ip = t.substr(1, close - 1);
    auto p = port_of(std::string_view(t).substr(close + 2));
    if (!p) return tl::unexpected(p.error());
    s.port = *p;
  } else if (size_t colon = t.find(':');
             colon != std::string::npos && t.find(':', colon + 1) == std::string::npos) {
    s.ip = t.substr(0, colon);
    auto p = port_of(std::string_view(t).substr(colon + 1));
    if (!p) return tl::unexpected(p.error());
    s.port = *p;
  } else {
    s.ip = t;
  }
  if (inet_pton(AF_INET, s.ip.c_str(), buf) != 1 && inet_pton(AF_INET6, s.ip.c_str(), buf) != 1) {
    return MakeError(ErrorCode::kInvalidArgument, fmt::format("bad DNS server '{}'", t));
  }
  return s;
}

Result<std::string> BuildDnsQuery(uint16_t id, std::string_view name_in, DnsType type) {
  std::string name = LowerName(name_in);
  if (name.empty() || name.size() > 253) {
    return MakeError(ErrorCode::kInvalidArgument, "bad DNS name");
  }
  std::string q;
  q += static_cast<char>(id >> 8);
  q += static_cast<char>(id & 0xff);
  q += std::string("\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00", 10);  // RD, 1 question
  size_t start = 0;
  while (start <= name.size()) {
    size_t dot = name.find('.', start);
    if (dot == std::string::npos) dot = name.size();
    size_t len = dot - start;
    if (len == 0 || len > 63) return MakeError(ErrorCode::kInvalidArgument, "bad DNS label");
    q += static_cast<char>(len);
    q.append(name, start, len);
    start = dot + 1;
  }
  q += '\0';
  auto t = static_cast<uint16_t>(type);
  q += static_cast<char>(t >> 8);
  q += static_cast<char>(t & 0xff);
  q += std::string("\x00\x01", 2);  // IN
  return q;
}

Result<std::vector<sockaddr_storage>> ParseDnsResponse(std::string_view m, uint16_t id,
                                                       std::string_view name_in, DnsType type) {
  auto bad = [](std::string_view why) {
    return MakeError(ErrorCode::kInvalidArgument, fmt::format("bad DNS answer: {}", why));
  };
  if (m.size() < 12) return bad("short header");
  if (Get16(m, 0) != id) {
    return MakeError(ErrorCode::kInvalidArgument, "bad DNS answer: wrong id",
                     std::string(kReasonWrongDnsId));
  }
  uint16_t flags = Get16(m, 2);
  if ((flags & 0x8000) == 0) return bad("not a response");
  if (flags & 0x0200) return bad("truncated (TC)");
  int rcode = flags & 0xf;
  if (rcode == 3) return MakeError(ErrorCode::kNotFound, fmt::format("{}: no such name", name_in));
  if (rcode != 0) {
    return MakeError(ErrorCode::kUnavailable,
                     fmt::format("{}: the resolver answered rcode {}", name_in, rcode));
  }
  uint16_t qd = Get16(m, 4), an = Get16(m, 6);
  if (qd != 1) return bad("question count");
  size_t pos = 12;
  auto qname = ReadName(m, &pos);
  if (!qname) return tl::unexpected(qname.error());
  std::string want = LowerName(name_in);
  if (*qname != want) return bad("answers another question");
  if (pos + 4 > m.size()) return bad("question cut");
  if (Get16(m, pos) != static_cast<uint16_t>(type)) return bad("answers another type");
  pos += 4;
  std::vector<sockaddr_storage> out;
  std::vector<std::string> names = {want};  // the name and its CNAME targets
  for (int i = 0; i < an; ++i) {
    auto rname = ReadName(m, &pos);
    if (!rname) return tl::unexpected(rname.error());
    if (pos + 10 > m.size()) return bad("record cut");
    uint16_t rtype = Get16(m, pos), rclass = Get16(m, pos + 2), rdlen = Get16(m, pos + 8);
    pos += 10;
    if (pos + rdlen > m.size()) return bad("record data cut");
    bool ours = false;
    for (const auto& n : names) ours = ours || n == *rname;
    if (ours && rclass == 1) {
      if (rtype == static_cast<uint16_t>(DnsType::kCname) && names.size() < 16) {
        size_t at = pos;
        auto target = ReadName(m, &at);
        if (!target) return tl::unexpected(target.error());
        names.push_back(*target);
      } else if (rtype == static_cast<uint16_t>(type) && type == DnsType::kA && rdlen == 4) {
        sockaddr_storage ss{};
        auto* a = reinterpret_cast<sockaddr_in*>(&ss);
        a->sin_family = AF_INET;
        memcpy(&a->sin_addr, m.data() + pos, 4);
        out.push_back(ss);
      } else if (rtype == static_cast<uint16_t>(type) && type == DnsType::kAaaa && rdlen == 16) {
        sockaddr_storage ss{};
        auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
        a->sin6_family = AF_INET6;
        memcpy(&a->sin6_addr, m.data() + pos, 16);
        out.push_back(ss);
      }
    }
    pos += rdlen;
  }
  return out;
}

namespace {
Result<std::vector<sockaddr_storage>> Query(const DnsServer& server, std::string_view name,
                                            DnsType type, std::chrono::milliseconds timeout) {
  sockaddr_storage ss{};
  socklen_t len;
  auto* a4 = reinterpret_cast<sockaddr_in*>(&ss);
  auto* a6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (inet_pton(AF_INET, server.ip.c_str(), &a4->sin_addr) == 1) {
    a4->sin_family = AF_INET;
    a4->sin_port = htons(static_cast<uint16_t>(server.port));
    len = sizeof(*a4);
  } else if (inet_pton(AF_INET6, server.ip.c_str(), &a6->sin6_addr) == 1) {
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons(static_cast<uint16_t>(server.port));
    len = sizeof(*a6);
  } else {
    return MakeError(ErrorCode::kInvalidArgument, fmt::format("bad DNS server '{}'", server.ip));
  }
  uint16_t id = 0;
  if (getrandom(&id, sizeof(id), 0) != sizeof(id)) return MakeSyscallError("getrandom", errno);
  auto q = BuildDnsQuery(id, name, type);
  if (!q) return tl::unexpected(q.error());
  UniqueFd s(socket(ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!s) return MakeSyscallError("socket", errno, "DNS");
  // connect(): the kernel drops datagrams from any other source.
  if (connect(s.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    return MakeSyscallError("connect", errno, fmt::format("DNS server {}", server.ip));
  }
  if (send(s.get(), q->data(), q->size(), 0) < 0) {
    return MakeSyscallError("send", errno, fmt::format("DNS server {}", server.ip));
  }
  auto deadline = std::chrono::steady_clock::now() + timeout;
  char buf[kMaxMessage];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now())
                    .count();
    if (left <= 0) {
      return MakeError(ErrorCode::kTimeout,
                       fmt::format("DNS server {} did not answer for {}", server.ip, name));
    }
    pollfd p{s.get(), POLLIN, 0};
    int rc = poll(&p, 1, static_cast<int>(left));
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) return MakeSyscallError("poll", errno, "DNS");
    if (rc == 0) continue;
    ssize_t n = recv(s.get(), buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return MakeSyscallError("recv", errno, fmt::format("DNS server {}", server.ip));
    auto r = ParseDnsResponse(std::string_view(buf, static_cast<size_t>(n)), id, name, type);
    // A spoofed or stray datagram with the wrong id is ignored; keep waiting.
    if (!r && r.error().reason == kReasonWrongDnsId) continue;
    return r;
  }
}
}  // namespace

Result<std::vector<sockaddr_storage>> ResolveHost(std::string_view name,
                                                  const std::vector<DnsServer>& servers,
                                                  std::chrono::milliseconds timeout) {
  if (servers.empty()) return MakeError(ErrorCode::kUnavailable, "no DNS server configured");
  Error last(ErrorCode::kUnavailable, "no DNS server answered");
  for (const auto& server : servers) {
    auto a = Query(server, name, DnsType::kA, timeout);
    if (!a) {
      if (a.error().code == ErrorCode::kNotFound) return a;
      last = a.error();
      continue;
    }
    auto aaaa = Query(server, name, DnsType::kAaaa, timeout);
    if (aaaa) a->insert(a->end(), aaaa->begin(), aaaa->end());
    return a;
  }
  return tl::unexpected(last);
}

std::string AddressText(const sockaddr_storage& addr) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&addr)->sin_addr, buf, sizeof(buf));
  } else if (addr.ss_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_addr, buf, sizeof(buf));
  }
  return buf;
}

}  // namespace deepbox::local
