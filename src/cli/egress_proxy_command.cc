// `deepbox egress-proxy`: the secrets proxy on its own, for a pod's sidecar
// container (deploy/k8s/sandbox-template-secrets.yaml). The same EgressProxy
// as a local sandbox's (local/egress_proxy.h), on a TCP listener of its own
// network namespace (the pod's), with a CA of its own. For the agent
// container it writes, into --share-dir (an emptyDir both mount):
//   sandbox-ca.pem   the CA certificate (its key stays in this process)
//   bundle.pem       this container's system bundle + the CA (SSL_CERT_FILE)
//   secrets.env      NAME=placeholder lines (deepbox-sandboxd --env-file)
// Every connection and request goes to --log (JSON lines; "-" = stdout, so
// `kubectl logs -c egress-proxy` shows them). Ends on SIGTERM or SIGINT.
#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include "cli/cli.h"
#include "cli/commands.h"
#include "common/terminal_text.h"
#include "local/address_policy.h"
#include "local/egress_log.h"
#include "local/egress_proxy.h"
#include "local/lifecycle/state.h"
#include "local/mounts.h"
#include "local/sandbox_ca.h"
#include "sandbox/network_policy.h"
#include "sandbox/secrets.h"

namespace deepbox::cli {

namespace {

namespace fs = std::filesystem;

Result<UniqueFd> ListenTcp(const std::string& address) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("--listen {}: expected ADDRESS:PORT", address));
  }
  std::string host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  int port = std::atoi(address.c_str() + colon + 1);
  if (port <= 0 || port > 65535) {
    return MakeError(ErrorCode::kInvalidArgument, fmt::format("--listen {}: bad port", address));
  }
  sockaddr_storage ss{};
  socklen_t len = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    len = sizeof(sockaddr_in);
  } else if (inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    len = sizeof(sockaddr_in6);
  } else {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("--listen {}: the address must be an IP address", address));
  }
  UniqueFd s(socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s) return MakeSyscallError("socket", errno);
  int one = 1;
  setsockopt(s.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(s.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    return MakeSyscallError("bind", errno, address);
  }
  if (listen(s.get(), 256) != 0) return MakeSyscallError("listen", errno, address);
  return s;
}

std::string SystemBundle() {
  for (const char* path : local::kSystemCaBundles) {
    std::error_code ec;
    if (!fs::is_regular_file(path, ec) || fs::file_size(path, ec) > (8u << 20)) continue;
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    std::string text = ss.str();
    if (!text.empty() && text.back() != '\n') text += '\n';
    return text;
  }
  return "";
}

// The files of --share-dir, each written atomically (0644: the agent
// container reads them; nothing in them is secret).
Status WriteShared(const fs::path& dir, const std::string& ca_pem,
                   const std::vector<SecretGrant>& secrets) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return MakeSyscallError("mkdir", ec.value(), dir.string());
  std::string env;
  for (const auto& s : secrets) env += s.name + "=" + s.placeholder + "\n";
  for (const auto& [name, text] : {std::pair<std::string, std::string>{"sandbox-ca.pem", ca_pem},
                                   {"bundle.pem", SystemBundle() + ca_pem},
                                   {"secrets.env", env}}) {
    fs::path path = dir / name;
    if (auto st = local::lifecycle::WriteFileAtomic(path, text); !st) return st;
    if (chmod(path.c_str(), 0644) != 0) return MakeSyscallError("chmod", errno, path.string());
  }
  return {};
}

}  // namespace

int RunEgressProxy(const EgressProxyArgs& args) {
  auto policy = ParseNetworkPolicy(args.network);
  if (!policy) return ReportError(policy.error());
  if (policy->mode == NetworkMode::kNone) {
    return ReportError(Error(ErrorCode::kInvalidArgument,
                             "--network none: a proxy that lets nothing through is no use"));
  }
  auto secrets = ResolveSecretFlags(args.secrets);
  if (!secrets) return ReportError(secrets.error());
  std::vector<std::string> hosts;
  for (const auto& s : *secrets) {
    for (const auto& h : s.hosts) {
      if (policy->mode == NetworkMode::kAllow) {
        std::string probe = h.rfind("*.", 0) == 0 ? "x" + h.substr(1) : h;
        if (!AllowlistMatches(policy->allow, probe, 443)) {
          return ReportError(Error(ErrorCode::kInvalidArgument,
                                   fmt::format("secret {}'s host {} is not allowed by --network {}",
                                               s.name, h, args.network)));
        }
      }
      if (std::find(hosts.begin(), hosts.end(), h) == hosts.end()) hosts.push_back(h);
    }
  }
  std::shared_ptr<local::SandboxCa> ca;
  if (!secrets->empty()) {
    char host[64] = "sidecar";
    (void)gethostname(host, sizeof(host) - 1);
    auto made = local::SandboxCa::Create(std::string(host).substr(0, 37), hosts);
    if (!made) return ReportError(made.error());
    ca = std::move(*made);
  }
  if (!args.share_dir.empty()) {
    if (auto st = WriteShared(args.share_dir, ca ? ca->cert_pem() : "", *secrets); !st) {
      return ReportError(st.error());
    }
  }

  // The events: a file (rotated like a sandbox's) or stdout.
  std::shared_ptr<local::EgressLog> log;
  auto stdout_mu = std::make_shared<std::mutex>();
  if (!args.log.empty() && args.log != "-") {
    auto opened = local::EgressLog::Open(args.log);
    if (!opened) return ReportError(opened.error());
    log = std::move(*opened);
  }

  auto listener = ListenTcp(args.listen);
  if (!listener) return ReportError(listener.error());
  local::EgressProxyOptions po;
  po.public_mode = policy->mode == NetworkMode::kPublic;
  po.allow = policy->allow;
  auto cidrs = local::AllowedCidrsFromEnv();
  if (!cidrs) return ReportError(cidrs.error());
  po.allowed_cidrs = *cidrs;
  std::vector<std::string> resolvers = args.nameservers;
  if (resolvers.empty()) resolvers = local::HostNameservers();
  for (const auto& ns : resolvers) {
    auto server = local::ParseDnsServer(ns);
    if (!server) return ReportError(server.error());
    po.nameservers.push_back(*server);
  }
  for (const auto& s : *secrets) {
    po.secrets.push_back({s.name, s.placeholder, s.value, s.hosts, s.in_query});
    po.substitute_query = po.substitute_query || s.in_query;
  }
  po.ca = ca;
  po.upstream_ca_file = args.upstream_ca;
  po.on_event = [log, stdout_mu](local::EgressEvent e) {
    if (log) return log->Append(std::move(e));
    std::lock_guard<std::mutex> lock(*stdout_mu);
    std::string line = ToJson(e.ToJson()) + "\n";
    std::fputs(line.c_str(), stdout);
    std::fflush(stdout);
  };

  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigprocmask(SIG_BLOCK, &set, nullptr);  // before the proxy's threads exist
  signal(SIGPIPE, SIG_IGN);
  UniqueFd stop(signalfd(-1, &set, SFD_CLOEXEC));
  if (!stop) return ReportError(SyscallError("signalfd", errno));
  auto proxy = local::EgressProxy::Start(std::move(*listener), std::move(po));
  if (!proxy) return ReportError(proxy.error());
  std::fprintf(stderr, "deepbox egress-proxy: listening on %s (network %s, %zu secret(s))\n",
               SanitizeLineForTerminal(args.listen).c_str(),
               SanitizeLineForTerminal(policy->ToString()).c_str(), secrets->size());
  std::fflush(stderr);
  signalfd_siginfo si;
  while (read(stop.get(), &si, sizeof(si)) < 0 && errno == EINTR) {
  }
  proxy->reset();
  return kExitOk;
}

}  // namespace deepbox::cli
