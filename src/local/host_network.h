// What the calling thread's network namespace (the uplink's) holds, asked of
// the kernel over rtnetlink: where it would deliver a destination, and its own
// addresses, connected subnets and gateways. The sandbox rules refuse those
// (HostAddressWatch in uplink.h keeps them current), and the allow-mode proxy
// looks each answer up before it connects (egress_proxy.h). The messages are
// decoded by address_policy.h (pure, fuzzed); this file only talks to the
// kernel.
#pragma once

#include <sys/socket.h>

#include <string>
#include <vector>

#include "common/error.h"
#include "local/address_policy.h"

namespace deepbox::local {

// A route lookup of `addr` (RTM_GETROUTE, RTM_F_FIB_MATCH) in the CALLING
// THREAD's network namespace. No route (ENETUNREACH, ...) is kUnroutable.
Result<RouteKind> ClassifyRoute(const struct sockaddr* addr);

// The calling thread's netns as HostNetworkSets (rtnetlink address and route
// dumps); `allowed` are the operator's exceptions (ParseAllowedCidrs form).
Result<HostNetworkSets> ReadHostNetworkSets(const std::vector<std::string>& allowed);

}  // namespace deepbox::local
