#include "local/host_network.h"

#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "common/unique_fd.h"

namespace deepbox::local {

namespace {
class Netlink {
 public:
  Status Open() {
    fd_.reset(socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE));
    if (!fd_) return MakeSyscallError("socket", errno, "AF_NETLINK");
    return {};
  }
  // Every object of a kind as the kernel lists them: RTM_GETADDR with
  // ifaddrmsg, RTM_GETROUTE with rtmsg. The header is all zero, so its family
  // is AF_UNSPEC (0): both address families.
  template <typename FamilyHeader>
  Result<std::vector<std::string>> Dump(uint16_t type) {
    struct {
      nlmsghdr h;
      FamilyHeader m;
    } req{};
    static_assert(AF_UNSPEC == 0);
    req.h.nlmsg_len = NLMSG_LENGTH(sizeof(FamilyHeader));
    req.h.nlmsg_type = type;
    req.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
    return Ask(&req, req.h.nlmsg_len, true);
  }
  // Sends `req` and collects every reply message until DONE (dump) or the
  // first non-multipart answer. An NLMSG_ERROR with an error becomes the result.
  Result<std::vector<std::string>> Ask(void* req, size_t len, bool dump) {
    auto* h = static_cast<nlmsghdr*>(req);
    h->nlmsg_seq = ++seq_;
    sockaddr_nl kernel{};
    kernel.nl_family = AF_NETLINK;
    if (sendto(fd_.get(), req, len, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof(kernel)) < 0) {
      return MakeSyscallError("sendto", errno, "rtnetlink");
    }
    std::vector<std::string> out;
    std::vector<char> buf(1 << 16);
    for (;;) {
      ssize_t n = recv(fd_.get(), buf.data(), buf.size(), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return MakeSyscallError("recv", errno, "rtnetlink");
      // Each message: a header, then nlmsg_len bytes in all, 4-aligned.
      size_t off = 0, total = static_cast<size_t>(n);
      while (off + sizeof(nlmsghdr) <= total) {
        auto* m = reinterpret_cast<nlmsghdr*>(buf.data() + off);
        if (m->nlmsg_len < sizeof(nlmsghdr) || m->nlmsg_len > total - off) break;
        off += NLMSG_ALIGN(m->nlmsg_len);
        if (m->nlmsg_seq != seq_) continue;
        if (m->nlmsg_type == NLMSG_DONE) return out;
        if (m->nlmsg_type == NLMSG_ERROR) {
          if (m->nlmsg_len < NLMSG_LENGTH(sizeof(nlmsgerr))) {
            return MakeError(ErrorCode::kInternal, "rtnetlink: a short error message");
          }
          auto* e = static_cast<nlmsgerr*>(NLMSG_DATA(m));
          if (e->error != 0) return MakeSyscallError("rtnetlink", -e->error);
          return out;
        }
        out.emplace_back(reinterpret_cast<char*>(m), m->nlmsg_len);
        if (!dump) return out;
      }
    }
  }

 private:
  UniqueFd fd_;
  uint32_t seq_ = 0;
};
}  // namespace

Result<RouteKind> ClassifyRoute(const struct sockaddr* addr) {
  std::optional<Cidr> destination = AddressAsCidr(addr);
  if (!destination) return RouteKind::kUnroutable;
  const Cidr& dst = *destination;
  Netlink nl;
  if (auto st = nl.Open(); !st) return tl::unexpected(st.error());
  struct {
    nlmsghdr h;
    rtmsg r;
    char attrs[64];
  } req{};
  size_t alen = dst.family == AF_INET ? 4 : 16;
  req.h.nlmsg_type = RTM_GETROUTE;
  req.h.nlmsg_flags = NLM_F_REQUEST;
  req.r.rtm_family = static_cast<unsigned char>(dst.family);
  req.r.rtm_dst_len = static_cast<unsigned char>(dst.len);
  req.r.rtm_flags = RTM_F_FIB_MATCH;
  auto* a = reinterpret_cast<rtattr*>(req.attrs);
  a->rta_type = RTA_DST;
  a->rta_len = static_cast<unsigned short>(RTA_LENGTH(alen));
  memcpy(RTA_DATA(a), dst.bytes, alen);
  req.h.nlmsg_len = static_cast<uint32_t>(NLMSG_LENGTH(sizeof(rtmsg)) + RTA_SPACE(alen));
  auto answer = nl.Ask(&req, req.h.nlmsg_len, false);
  if (!answer) {
    // ENETUNREACH, EHOSTUNREACH, ...: nothing would carry it.
    return RouteKind::kUnroutable;
  }
  if (answer->empty()) return RouteKind::kUnroutable;
  return ClassifyRouteAnswer(answer->front(), dst);
}

Result<HostNetworkSets> ReadHostNetworkSets(const std::vector<std::string>& allowed) {
  Netlink nl;
  if (auto st = nl.Open(); !st) return tl::unexpected(st.error());
  auto addrs = nl.Dump<ifaddrmsg>(RTM_GETADDR);
  if (!addrs) return tl::unexpected(addrs.error());
  auto routes = nl.Dump<rtmsg>(RTM_GETROUTE);
  if (!routes) return tl::unexpected(routes.error());
  return HostNetworkSetsFromDumps(*addrs, *routes, allowed);
}

}  // namespace deepbox::local
