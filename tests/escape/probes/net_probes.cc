// Network probes. Addresses come from the driver: loopback, or test hosts in
// network namespaces the test created. Nothing else is ever contacted.
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/if_ether.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "probe.h"

namespace deepbox::escape {
namespace {

// A socket address from an IPv4 or IPv6 literal ("::ffff:10.0.0.1" too).
bool MakeAddr(const std::string& ip, int port, sockaddr_storage* ss, socklen_t* len) {
  *ss = {};
  auto* a4 = reinterpret_cast<sockaddr_in*>(ss);
  auto* a6 = reinterpret_cast<sockaddr_in6*>(ss);
  if (inet_pton(AF_INET, ip.c_str(), &a4->sin_addr) == 1) {
    a4->sin_family = AF_INET;
    a4->sin_port = htons(static_cast<uint16_t>(port));
    *len = sizeof(*a4);
    return true;
  }
  if (inet_pton(AF_INET6, ip.c_str(), &a6->sin6_addr) == 1) {
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons(static_cast<uint16_t>(port));
    *len = sizeof(*a6);
    return true;
  }
  return false;
}

// Connects to ip:port (3 s), sends `send` if any, reads what the server says (2 s).
// Returns "" when it cannot connect; else the bytes received (maybe empty).
std::string TcpFetch(const std::string& ip, int port, std::string* why,
                     const std::string& send = "") {
  sockaddr_storage a;
  socklen_t alen;
  if (!MakeAddr(ip, port, &a, &alen)) {
    *why = "bad address";
    return "";
  }
  int s = socket(a.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (s < 0) {
    *why = "socket " + ErrnoName(errno);
    return "";
  }
  std::string got;
  int rc = connect(s, reinterpret_cast<sockaddr*>(&a), alen);
  if (rc != 0 && errno != EINPROGRESS) {
    *why = ErrnoName(errno);
    close(s);
    return "";
  }
  pollfd p{s, POLLOUT, 0};
  if (rc != 0 && poll(&p, 1, 3000) <= 0) {
    *why = "timeout";
    close(s);
    return "";
  }
  int err = 0;
  socklen_t len = sizeof(err);
  getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len);
  if (err != 0) {
    *why = ErrnoName(err);
    close(s);
    return "";
  }
  *why = "connected";
  if (!send.empty() && ::send(s, send.data(), send.size(), MSG_NOSIGNAL) < 0) {
    *why = "send " + ErrnoName(errno);
  }
  p = {s, POLLIN, 0};
  char buf[256];
  while (poll(&p, 1, 2000) > 0) {
    ssize_t n = read(s, buf, sizeof(buf));
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  close(s);
  return got;
}

// One UDP datagram to ip:port; the reply ("" if none within 2 s).
std::string UdpAsk(const std::string& ip, int port, const std::string& payload, std::string* why) {
  sockaddr_storage a;
  socklen_t alen;
  if (!MakeAddr(ip, port, &a, &alen)) {
    *why = "bad address";
    return "";
  }
  int s = socket(a.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) {
    *why = "socket " + ErrnoName(errno);
    return "";
  }
  std::string got;
  if (sendto(s, payload.data(), payload.size(), 0, reinterpret_cast<sockaddr*>(&a), alen) < 0) {
    *why = "sendto " + ErrnoName(errno);
  } else {
    pollfd p{s, POLLIN, 0};
    char buf[512];
    ssize_t n = poll(&p, 1, 2000) > 0 ? recv(s, buf, sizeof(buf), 0) : 0;
    if (n > 0) {
      got.assign(buf, static_cast<size_t>(n));
      *why = "answered";
    } else {
      *why = n < 0 ? "no answer (" + ErrnoName(errno) + ")" : "no answer";
    }
  }
  close(s);
  return got;
}

// "IP:PORT" or "[IPv6]:PORT" (an optional "udp:" before it).
bool SplitTarget(std::string t, bool* udp, std::string* ip, int* port) {
  *udp = t.rfind("udp:", 0) == 0;
  if (*udp) t = t.substr(4);
  size_t colon = t.rfind(':');
  if (colon == std::string::npos) return false;
  *ip = t.substr(0, colon);
  if (ip->size() > 2 && (*ip)[0] == '[') *ip = ip->substr(1, ip->size() - 2);
  *port = std::atoi(t.c_str() + colon + 1);
  return *port > 0;
}

// A DNS query for public.test (type A): what a resolver would answer.
std::string DnsQuery() {
  return std::string(
      "\xab\xcd\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x06public\x04test\x00\x00\x01\x00\x01", 29);
}

// ARGS: TOKEN TARGET...; TARGET = IP:PORT, [IPv6]:PORT or udp:IP:PORT. TCP:
// breach when a server answers with TOKEN; UDP: breach on ANY answer (a DNS
// query is sent to port 53, the token elsewhere).
void ConnectAll(Report& r, const Args& args) {
  const std::string token = Arg(args, 0);
  if (token.empty() || args.size() < 2) return r.Error("usage: TOKEN IP:PORT...");
  for (size_t i = 1; i < args.size(); ++i) {
    bool udp = false;
    std::string ip, why;
    int port = 0;
    if (!SplitTarget(args[i], &udp, &ip, &port)) {
      r.Error("bad target " + args[i]);
      continue;
    }
    if (udp) {
      std::string got = UdpAsk(ip, port, port == 53 ? DnsQuery() : token, &why);
      if (!got.empty()) {
        r.Breach("UDP answer from " + args[i]);
      } else {
        r.Held(args[i] + " " + why);
      }
      continue;
    }
    std::string got = TcpFetch(ip, port, &why);
    if (Contains(got, token)) {
      r.Breach("reached " + args[i]);
    } else {
      r.Held(args[i] + " " + why);
    }
  }
}

// A TLS 1.2 ClientHello record naming `sni` (enough for an SNI check).
std::string ClientHello(const std::string& sni) {
  auto be16 = [](size_t v) {
    return std::string{static_cast<char>((v >> 8) & 255), static_cast<char>(v & 255)};
  };
  std::string list = std::string(1, '\0') + be16(sni.size()) + sni;
  std::string body = be16(list.size()) + list;
  std::string ext = std::string("\0\0", 2) + be16(body.size()) + body;
  std::string hello = std::string("\x03\x03", 2) + std::string(32, 'r') + std::string(1, '\0') +
                      std::string("\x00\x02\x13\x01", 4) + std::string("\x01\x00", 2) +
                      be16(ext.size()) + ext;
  std::string hs = std::string("\x01\x00", 2) + be16(hello.size()) + hello;
  return std::string("\x16\x03\x01", 3) + be16(hs.size()) + hs;
}

// A ClientHello with no server_name extension at all.
std::string ClientHelloNoSni() {
  std::string hello = std::string("\x03\x03", 2) + std::string(32, 'r') + std::string(1, '\0') +
                      std::string("\x00\x02\x13\x01", 4) + std::string("\x01\x00", 2);
  std::string hs = std::string("\x01\x00", 2) + static_cast<char>(hello.size() >> 8) +
                   static_cast<char>(hello.size() & 255) + hello;
  return std::string("\x16\x03\x01", 3) + static_cast<char>(hs.size() >> 8) +
         static_cast<char>(hs.size() & 255) + hs;
}

// Sends one netlink request and returns the error of its ack (0 = success,
// -errno = refused); 1 when no ack came.
int NetlinkAck(int proto, const void* msg, size_t len, uint32_t seq) {
  int s = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, proto);
  if (s < 0) return -errno;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (sendto(s, msg, len, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof(kernel)) < 0) {
    int e = errno;
    close(s);
    return -e;
  }
  int result = 1;
  char buf[8192];
  pollfd p{s, POLLIN, 0};
  while (result == 1 && poll(&p, 1, 2000) > 0) {
    ssize_t n = recv(s, buf, sizeof(buf), 0);
    if (n <= 0) break;
    for (auto* h = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(h, static_cast<unsigned>(n));
         h = NLMSG_NEXT(h, n)) {
      if (h->nlmsg_type == NLMSG_ERROR) {
        auto* e = static_cast<nlmsgerr*>(NLMSG_DATA(h));
        if (e->error != 0 || h->nlmsg_seq == seq) result = e->error;
      } else if (h->nlmsg_seq == seq) {
        result = 0;  // a data reply: the request was served
      }
    }
  }
  close(s);
  return result;
}

std::string AckText(int ack) {
  if (ack == 1) return "no answer";
  if (ack == 0) return "ok";
  return ErrnoName(-ack);
}

}  // namespace

ESCAPE_PROBE(host_loopback,
             "reach a TCP service on the host's loopback (ARGS: TOKEN 127.0.0.1:PORT): the "
             "sandbox has its own loopback") {
  ConnectAll(r, args);
}

ESCAPE_PROBE(private_range,
             "reach a private-range test host (ARGS: TOKEN 10.123.0.2:PORT...) in public mode") {
  ConnectAll(r, args);
}

ESCAPE_PROBE(metadata,
             "reach the cloud metadata stand-in 169.254.169.254 (ARGS: TOKEN IP:PORT...) in "
             "public mode") {
  ConnectAll(r, args);
}

ESCAPE_PROBE(uplink_services,
             "reach services of the uplink ('host') netns through its addresses and loopback "
             "(ARGS: TOKEN IP:PORT...) in public mode") {
  ConnectAll(r, args);
}

ESCAPE_PROBE(egress_ranges,
             "reach refused destinations through the public uplink (ARGS: TOKEN TARGET...: "
             "private, CGNAT, metadata, ULA, IPv4-mapped and NAT64 forms, the uplink's own "
             "addresses and loopback; udp:IP:PORT for UDP, a DNS query on :53)") {
  ConnectAll(r, args);
}

ESCAPE_PROBE(sandbox_to_sandbox,
             "reach a listener of another sandbox (ARGS: TOKEN TARGET...): its addresses and the "
             "uplink addresses both sandboxes share") {
  ConnectAll(r, args);
}

ESCAPE_PROBE(proxy_bypass,
             "get past the allowlist proxy at 127.0.0.1:3128 (ARGS: TOKEN ALLOWED OTHER REBIND "
             "IP [HOSTSELF]): CONNECT to another name, to an allowed name with a private answer, "
             "to an IP, with another name's SNI, to another port, with plain text or a ClientHello "
             "without SNI inside; GET with a foreign Host or URL, a second request on the "
             "connection (pipelined or after a Content-Length body) for another Host; an allowed "
             "name that resolves to the host's own address; direct TCP/UDP to the IP. Breach "
             "when TOKEN comes back (the allowed name must answer)") {
  const std::string token = Arg(args, 0), allowed = Arg(args, 1), other = Arg(args, 2),
                    rebind = Arg(args, 3), ip = Arg(args, 4);
  if (ip.empty()) return r.Error("usage: TOKEN ALLOWED OTHER REBIND IP");
  struct Try {
    std::string what, request;
  };
  auto connect_req = [](const std::string& target, const std::string& sni) {
    return "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n\r\n" +
           (sni.empty() ? "" : ClientHello(sni));
  };
  auto get_req = [](const std::string& url, const std::string& host) {
    return "GET " + url + " HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n\r\n";
  };
  // A second request reaching the upstream echoes its marker path.
  const std::string second = "GET http://" + other + "/dbx-second HTTP/1.1\r\nHost: " + other +
                             "\r\nConnection: close\r\n\r\n";
  const std::string keep =
      "GET http://" + allowed + "/first HTTP/1.1\r\nHost: " + allowed + "\r\n\r\n";
  const std::string post = "POST http://" + allowed + "/post HTTP/1.1\r\nHost: " + allowed +
                           "\r\nContent-Length: 2\r\n\r\nhi";
  for (const auto& [what, request] : std::vector<std::pair<std::string, std::string>>{
           {"a pipelined second request for Host " + other, keep + second},
           {"a second request after a Content-Length body", post + second}}) {
    std::string why;
    std::string got = TcpFetch("127.0.0.1", 3128, &why, request);
    if (Contains(got, "dbx-second")) {
      r.Breach(what + " reached the upstream");
    } else {
      r.Held(what + ": " + (got.empty() ? why : got.substr(0, got.find('\r'))));
    }
  }
  const std::string hostself = Arg(args, 5);
  std::vector<Try> tries = {
      {"CONNECT " + allowed + ":443 with plain text inside",
       "CONNECT " + allowed + ":443 HTTP/1.1\r\nHost: " + allowed +
           ":443\r\n\r\nGET / HTTP/1.1\r\nHost: " + other + "\r\nConnection: close\r\n\r\n"},
      {"CONNECT " + allowed + ":443 with a ClientHello without SNI",
       "CONNECT " + allowed + ":443 HTTP/1.1\r\nHost: " + allowed + ":443\r\n\r\n" +
           ClientHelloNoSni()},
      {"CONNECT " + other + ":443", connect_req(other + ":443", other)},
      {"CONNECT " + rebind + ":443 (private answer)", connect_req(rebind + ":443", rebind)},
      {"CONNECT " + ip + ":443", connect_req(ip + ":443", allowed)},
      {"CONNECT " + allowed + ":443 SNI " + other, connect_req(allowed + ":443", other)},
      {"CONNECT " + allowed + ":8080", connect_req(allowed + ":8080", "")},
      {"CONNECT " + allowed + "@" + other + ":443",
       connect_req(allowed + "@" + other + ":443", other)},
      {"GET http://" + other + "/", get_req("http://" + other + "/", other)},
      {"GET http://" + allowed + "/ Host " + other, get_req("http://" + allowed + "/", other)},
      {"GET http://" + ip + "/", get_req("http://" + ip + "/", ip)},
      {"GET / Host " + allowed, get_req("/", allowed)},
  };
  if (!hostself.empty()) {
    tries.push_back({"CONNECT " + hostself + ":443 (the host's own address)",
                     connect_req(hostself + ":443", hostself)});
  }
  {  // Positive control: the allowed name answers, so a refusal below is the proxy's.
    std::string why;
    std::string got = TcpFetch("127.0.0.1", 3128, &why, connect_req(allowed + ":443", allowed));
    if (!Contains(got, token)) {
      return r.Error("the allowed name " + allowed + " is unreachable (" + why +
                     "): nothing can be judged");
    }
  }
  for (const auto& t : tries) {
    std::string why;
    // The request and (for CONNECT) the tunnel's first bytes in one go.
    std::string got = TcpFetch("127.0.0.1", 3128, &why, t.request);
    if (Contains(got, token)) {
      r.Breach(t.what + " answered through the proxy");
    } else {
      r.Held(t.what + ": " + (got.empty() ? why : got.substr(0, got.find('\r'))));
    }
  }
  for (int port : {80, 443, 8080}) {
    std::string why;
    std::string got = TcpFetch(ip, port, &why);
    if (Contains(got, token)) {
      r.Breach("direct TCP to " + ip + ":" + std::to_string(port));
    } else {
      r.Held("direct " + ip + ":" + std::to_string(port) + " " + why);
    }
  }
  std::string why;
  if (!UdpAsk(ip, 9053, token, &why).empty()) {
    r.Breach("direct UDP to " + ip);
  } else {
    r.Held("direct UDP " + why);
  }
}

ESCAPE_PROBE(socket_families,
             "open sockets of refused families: AF_PACKET, AF_VSOCK, AF_ALG, AF_KEY, AF_XDP, "
             "AF_BLUETOOTH, AF_CAN, AF_TIPC, AF_RDS, AF_LLC, AF_NFC, AF_PPPOX, SOCK_PACKET") {
  struct Fam {
    int family, type, proto;
    const char* name;
  };
  for (const Fam& f :
       {Fam{AF_PACKET, SOCK_RAW, htons(ETH_P_ALL), "AF_PACKET raw"},
        Fam{AF_PACKET, SOCK_DGRAM, htons(ETH_P_ALL), "AF_PACKET dgram"},
        Fam{AF_VSOCK, SOCK_STREAM, 0, "AF_VSOCK"}, Fam{AF_ALG, SOCK_SEQPACKET, 0, "AF_ALG"},
        Fam{AF_KEY, SOCK_RAW, 2, "AF_KEY"}, Fam{AF_XDP, SOCK_RAW, 0, "AF_XDP"},
        Fam{AF_BLUETOOTH, SOCK_RAW, 0, "AF_BLUETOOTH"}, Fam{AF_CAN, SOCK_RAW, 1, "AF_CAN"},
        Fam{AF_TIPC, SOCK_RDM, 0, "AF_TIPC"}, Fam{AF_RDS, SOCK_SEQPACKET, 0, "AF_RDS"},
        Fam{AF_LLC, SOCK_DGRAM, 0, "AF_LLC"}, Fam{AF_NFC, SOCK_DGRAM, 0, "AF_NFC"},
        Fam{AF_PPPOX, SOCK_STREAM, 0, "AF_PPPOX"}, Fam{AF_SMC, SOCK_STREAM, 0, "AF_SMC"},
        Fam{AF_INET, SOCK_PACKET, htons(ETH_P_ALL), "SOCK_PACKET"},
        Fam{AF_ATMPVC, SOCK_DGRAM, 0, "AF_ATMPVC"}, Fam{AF_X25, SOCK_SEQPACKET, 0, "AF_X25"},
        Fam{AF_MAX + 5, SOCK_STREAM, 0, "AF_MAX+5"}}) {
    int s = socket(f.family, f.type | SOCK_CLOEXEC, f.proto);
    if (s >= 0) {
      r.Breach(std::string("opened ") + f.name);
      close(s);
    } else {
      r.Held(std::string(f.name) + " " + ErrnoName(errno));
    }
  }
}

ESCAPE_PROBE(raw_socket,
             "raw IP sockets (CAP_NET_RAW): AF_INET SOCK_RAW icmp/tcp/raw, AF_INET6 "
             "SOCK_RAW, IP_HDRINCL") {
  struct Raw {
    int family, proto;
    const char* name;
  };
  for (const Raw& x :
       {Raw{AF_INET, IPPROTO_ICMP, "inet icmp"}, Raw{AF_INET, IPPROTO_TCP, "inet tcp"},
        Raw{AF_INET, IPPROTO_RAW, "inet raw"}, Raw{AF_INET6, IPPROTO_ICMPV6, "inet6 icmp"}}) {
    int s = socket(x.family, SOCK_RAW | SOCK_CLOEXEC, x.proto);
    if (s >= 0) {
      r.Breach(std::string("raw socket ") + x.name);
      close(s);
    } else {
      r.Held(std::string(x.name) + " " + ErrnoName(errno));
    }
  }
}

ESCAPE_PROBE(netlink_admin,
             "reconfigure the network over netlink without CAP_NET_ADMIN: add an address to lo, "
             "create a dummy link, flush every nftables ruleset (the public-mode policy), "
             "AUDIT_GET") {
  {  // RTM_NEWADDR 10.99.0.1/32 on lo
    struct {
      nlmsghdr h;
      ifaddrmsg a;
      rtattr rta;
      in_addr addr;
    } m{};
    m.h.nlmsg_len = sizeof(m);
    m.h.nlmsg_type = RTM_NEWADDR;
    m.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL;
    m.h.nlmsg_seq = 1;
    m.a.ifa_family = AF_INET;
    m.a.ifa_prefixlen = 32;
    m.a.ifa_index = if_nametoindex("lo");
    m.rta.rta_type = IFA_LOCAL;
    m.rta.rta_len = RTA_LENGTH(sizeof(in_addr));
    inet_pton(AF_INET, "10.99.0.1", &m.addr);
    int ack = NetlinkAck(NETLINK_ROUTE, &m, sizeof(m), 1);
    if (ack == 0) {
      r.Breach("RTM_NEWADDR accepted");
    } else {
      r.Held("RTM_NEWADDR " + AckText(ack));
    }
  }
  {  // RTM_NEWLINK type dummy
    struct {
      nlmsghdr h;
      ifinfomsg i;
      rtattr name;
      char name_v[8];
      rtattr linkinfo;
      rtattr kind;
      char kind_v[8];
    } m{};
    m.h.nlmsg_len = sizeof(m);
    m.h.nlmsg_type = RTM_NEWLINK;
    m.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL;
    m.h.nlmsg_seq = 2;
    m.i.ifi_family = AF_UNSPEC;
    m.name.rta_type = IFLA_IFNAME;
    m.name.rta_len = RTA_LENGTH(8);
    std::memcpy(m.name_v, "dbxesc0", 8);
    m.linkinfo.rta_type = IFLA_LINKINFO;
    m.linkinfo.rta_len = RTA_LENGTH(sizeof(rtattr) + 8);
    m.kind.rta_type = IFLA_INFO_KIND;
    m.kind.rta_len = RTA_LENGTH(8);
    std::memcpy(m.kind_v, "dummy", 6);
    int ack = NetlinkAck(NETLINK_ROUTE, &m, sizeof(m), 2);
    if (ack == 0) {
      r.Breach("RTM_NEWLINK dummy accepted");
    } else {
      r.Held("RTM_NEWLINK " + AckText(ack));
    }
  }
  {  // nftables batch: BEGIN, DELTABLE (AF_UNSPEC, no name = flush the whole ruleset), END
    struct Msg {
      nlmsghdr h;
      nfgenmsg g;
    };
    Msg batch[3]{};
    for (int i = 0; i < 3; ++i) {
      batch[i].h.nlmsg_len = sizeof(Msg);
      batch[i].h.nlmsg_flags = NLM_F_REQUEST;
      batch[i].h.nlmsg_seq = 10 + i;
      batch[i].g.nfgen_family = AF_UNSPEC;
      batch[i].g.version = NFNETLINK_V0;
    }
    batch[0].h.nlmsg_type = NFNL_MSG_BATCH_BEGIN;
    batch[0].g.res_id = htons(NFNL_SUBSYS_NFTABLES);
    batch[1].h.nlmsg_type = (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_DELTABLE;
    batch[1].h.nlmsg_flags |= NLM_F_ACK;
    batch[2].h.nlmsg_type = NFNL_MSG_BATCH_END;
    batch[2].g.res_id = htons(NFNL_SUBSYS_NFTABLES);
    int ack = NetlinkAck(NETLINK_NETFILTER, batch, sizeof(batch), 11);
    if (ack == 0) {
      r.Breach("nftables ruleset flushed");
    } else {
      r.Held("nft flush " + AckText(ack));
    }
  }
  {  // AUDIT_GET
    struct {
      nlmsghdr h;
    } m{};
    m.h.nlmsg_len = sizeof(m);
    m.h.nlmsg_type = AUDIT_GET;
    m.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
    m.h.nlmsg_seq = 20;
    int ack = NetlinkAck(NETLINK_AUDIT, &m, sizeof(m), 20);
    if (ack == 0) {
      r.Breach("AUDIT_GET answered");
    } else {
      r.Held("AUDIT_GET " + AckText(ack));
    }
  }
}

ESCAPE_PROBE(host_unix_sockets,
             "connect to host unix sockets: an abstract socket the test listens on (ARGS: NAME "
             "TOKEN; abstract sockets are per netns) and well-known daemon sockets") {
  const std::string name = Arg(args, 0), token = Arg(args, 1);
  if (!name.empty()) {
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::memcpy(a.sun_path + 1, name.data(), std::min(name.size(), sizeof(a.sun_path) - 2));
    socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (connect(s, reinterpret_cast<sockaddr*>(&a), len) == 0) {
      char buf[128] = {};
      ssize_t n = read(s, buf, sizeof(buf) - 1);
      if (n > 0 && Contains(buf, token)) {
        r.Breach("connected to the host's abstract socket @" + name);
      } else {
        r.Held("@" + name + " answered without the token");
      }
    } else {
      r.Held("@" + name + " " + ErrnoName(errno));
    }
    close(s);
  }
  for (const char* p :
       {"/run/docker.sock", "/var/run/docker.sock", "/run/containerd/containerd.sock",
        "/run/dbus/system_bus_socket", "/run/systemd/private", "/run/systemd/journal/socket",
        "/dev/log", "/run/user/0/bus", "/run/podman/podman.sock", "/var/run/nscd/socket"}) {
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, p, sizeof(a.sun_path) - 1);
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (connect(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
      r.Breach(std::string("connected to ") + p);
    } else if (errno != ENOENT) {
      r.Held(std::string(p) + " " + ErrnoName(errno));
    }
    close(s);
  }
  if (!r.breached()) r.Held("no host daemon socket reachable");
}

}  // namespace deepbox::escape
