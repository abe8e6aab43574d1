// Network-namespace plumbing: bringing up `lo` in the child, opening network
// namespaces, running a program inside one (the uplink's, a test's, or a
// sandbox's together with its user namespace and CAP_NET_ADMIN), and making a
// listener inside a sandbox's netns. What the programs run (ip, nft) and why
// is network.h's, uplink.h's and the launcher's.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/unique_fd.h"
#include "local/child.h"

namespace deepbox::local {

// Child, async-signal-safe: sets IFF_UP on "lo". Returns 0 or errno (+ call).
int BringUpLoopbackRaw(ChildCall* call);

// Opens a netns file (/proc/PID/ns/net, /run/netns/X); "" = our own.
Result<UniqueFd> OpenNetns(const std::string& path);

// Runs argv (absolute path) in the netns open as `netns_fd` (-1: current),
// feeding `input` on stdin. Returns stdout+stderr; non-zero exit is an error.
Result<std::string> RunInNetns(int netns_fd, const std::vector<std::string>& argv,
                               std::string_view input = {});
// Runs argv inside the user AND network namespace of `pid` with CAP_NET_ADMIN
// (raised as an ambient capability: the launcher's uid is not root in there).
// Works unprivileged when the launcher owns that user namespace.
Result<std::string> RunInSandboxNetns(pid_t pid, const std::vector<std::string>& argv,
                                      std::string_view input = {});
// The namespaces RunInSandboxNetns joins, opened once (userns only when not root).
Status OpenSandboxNamespaces(pid_t pid, UniqueFd* userns, UniqueFd* netns);
// RunInSandboxNetns with namespaces opened by OpenSandboxNamespaces.
Result<std::string> RunInOpenNamespaces(int userns_fd, int netns_fd,
                                        const std::vector<std::string>& argv,
                                        std::string_view input = {});
// A TCP listener on `ip`:`port` created inside the network namespace of `pid`
// (joining its user namespace first; `lo` is brought up). The socket stays in
// that netns whichever process holds it: the proxy serves the sandbox with it.
Result<UniqueFd> ListenInSandboxNetns(pid_t pid, const std::string& ip, int port);

}  // namespace deepbox::local
