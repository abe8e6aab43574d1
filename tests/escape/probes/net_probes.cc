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

// Connects to ip:port (3 s), reads what the server says (2 s).
// Returns "" when it cannot connect; else the bytes received (maybe empty).
std::string TcpFetch(const std::string& ip, int port, std::string* why) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, ip.c_str(), &a.sin_addr) != 1) {
    *why = "bad address";
    return "";
  }
  int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (s < 0) {
    *why = "socket " + ErrnoName(errno);
    return "";
  }
  std::string got;
  int rc = connect(s, reinterpret_cast<sockaddr*>(&a), sizeof(a));
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

// ARGS: TOKEN IP:PORT...; breach when a server answers with TOKEN.
void ConnectAll(Report& r, const Args& args) {
  const std::string token = Arg(args, 0);
  if (token.empty() || args.size() < 2) return r.Error("usage: TOKEN IP:PORT...");
  for (size_t i = 1; i < args.size(); ++i) {
    size_t colon = args[i].rfind(':');
    std::string ip = args[i].substr(0, colon);
    int port = std::atoi(args[i].c_str() + colon + 1);
    std::string why;
    std::string got = TcpFetch(ip, port, &why);
    if (Contains(got, token)) {
      r.Breach("reached " + args[i]);
    } else {
      r.Held(args[i] + " " + why);
    }
  }
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
