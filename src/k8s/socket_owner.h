// Who holds a listening TCP socket on 127.0.0.1. `kubectl port-forward` tells
// us the port it listens on; before the router token (and every request) goes
// there we check in /proc that the listener really belongs to our kubectl
// child: another local user could otherwise listen on that port first and
// receive the token and all traffic.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <set>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace deepbox::k8s {

// The inodes of the sockets in LISTEN state, in one /proc/net/tcp (v6=false)
// or /proc/net/tcp6 (v6=true) table, that a connection to 127.0.0.1:port
// could reach: 127.0.0.1 and 0.0.0.0; ::, ::ffff:127.0.0.1 and ::ffff:0.0.0.0.
// INTERNAL on a line that is not in the kernel's format.
Result<std::vector<uint64_t>> ParseLoopbackListeners(std::string_view table, bool v6,
                                                     uint16_t port);

// The same over this network namespace's /proc/net/tcp and /proc/net/tcp6.
Result<std::vector<uint64_t>> LoopbackListeners(uint16_t port);

// The socket inodes among /proc/<pid>/fd.
Result<std::set<uint64_t>> SocketInodesOf(pid_t pid);

// OK when something listens on 127.0.0.1:port and every such listener is held
// by `pid`, or by a process of ours (same uid) in the process group `pid`
// leads (a kubectl wrapper script that does not exec). PERMISSION_DENIED,
// naming the port, when a listener is held by anyone else.
Status CheckListenerOwner(pid_t pid, uint16_t port);

}  // namespace deepbox::k8s
