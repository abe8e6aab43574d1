// deepbox doctor: what this host supports, and what deepbox falls back to.
#include <fmt/format.h>
#include <sys/prctl.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/sandbox_k8s.h"
#include "common/json.h"
#include "common/terminal_text.h"
#include "local/address_policy.h"
#include "local/image_root.h"
#include "local/launcher.h"
#include "local/lifecycle/provider.h"
#include "local/namespaces.h"
#include "local/network.h"
#include "local/uplink.h"

namespace deepbox::cli {
namespace {

std::string ReadTrimmed(const char* path) {
  std::ifstream in(path);
  if (!in) return {};
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  return s;
}

json::object EnforcementJson(const local::LimitEnforcement& e) {
  json::object o;
  o["enforced"] = e.enforced;
  o["mechanism"] = std::string(local::MechanismName(e.mechanism));
  o["detail"] = JsonString(e.detail);
  return o;
}

}  // namespace

int RunDoctor(const DoctorArgs& args) {
  json::object report;
  std::string text;
  auto line = [&](const std::string& s) { text += s + "\n"; };
  bool can_run = true;

  struct utsname u;
  uname(&u);
  report["kernel"] = std::string(u.release);
  report["euid"] = geteuid();
  line(fmt::format("kernel:           {} ({})", u.release, u.machine));
  line(fmt::format("running as:       uid {}{}", geteuid(),
                   geteuid() == 0 ? " (root: cgroups and a dedicated host id per sandbox)"
                                  : " (unprivileged: no cgroups; sandbox uid maps to yours)"));

  // User namespaces: every sandbox needs one.
  bool userns = local::UserNamespacesAvailable();
  report["user_namespaces"] = userns;
  std::string hints;
  for (const char* knob :
       {"/proc/sys/user/max_user_namespaces", "/proc/sys/kernel/unprivileged_userns_clone",
        "/proc/sys/kernel/apparmor_restrict_unprivileged_userns"}) {
    std::string v = ReadTrimmed(knob);
    if (!v.empty()) hints += fmt::format(" {}={}", knob + 10, v);
  }
  line(fmt::format("user namespaces:  {}{}", userns ? "yes" : "NO - sandboxes cannot run here;",
                   userns ? "" : hints));
  if (!userns) can_run = false;

  // Image roots (--image): overlayfs mounted in a sandbox's user namespace.
  if (userns) {
    local::ImageRootSupport images = local::ProbeImageRoots();
    json::object ij;
    ij["works"] = images.works;
    if (!images.works) ij["reason"] = JsonString(images.reason);
    report["image_roots"] = std::move(ij);
    line(fmt::format("image roots:      {}",
                     images.works ? "yes (--image: overlayfs with userxattr in the sandbox's "
                                    "user namespace)"
                                  : "NO - --image cannot run here: " + images.reason));
  }

  // seccomp
  bool seccomp = prctl(PR_GET_SECCOMP, 0, 0, 0, 0) >= 0;
  std::string actions = ReadTrimmed("/proc/sys/kernel/seccomp/actions_avail");
  report["seccomp"] = seccomp;
  report["seccomp_actions"] = actions;
  line(fmt::format("seccomp filters:  {}{}", seccomp ? "yes" : "NO - sandboxes cannot run here",
                   actions.empty() ? "" : " (actions: " + actions + ")"));
  if (!seccomp) can_run = false;

  // Limits: probed by creating a cgroup with every limit set.
  local::LimitSupport limits = local::ProbeHostLimitSupport();
  if (geteuid() != 0) {
    // The lifecycle does not use cgroups when unprivileged: say so, never over-claim.
    limits.memory = {false, local::Mechanism::kNone, "cgroups are only used as root"};
    limits.cpu_rate = {false, local::Mechanism::kNone, "cgroups are only used as root"};
  }
  json::object lj;
  lj["cgroup_layout"] = std::string(local::CgroupLayoutName(limits.layout));
  lj["memory"] = EnforcementJson(limits.memory);
  lj["processes"] = EnforcementJson(limits.processes);
  lj["cpu_rate"] = EnforcementJson(limits.cpu_rate);
  lj["cpu_time"] = EnforcementJson(limits.cpu_time);
  lj["file_size"] = EnforcementJson(limits.file_size);
  lj["open_files"] = EnforcementJson(limits.open_files);
  lj["address_space"] = EnforcementJson(limits.address_space);
  lj["workspace_disk"] = EnforcementJson(limits.workspace_disk);
  lj["tmp_size"] = EnforcementJson(limits.tmp_size);
  lj["kill_all"] = EnforcementJson(limits.kill_all);
  report["limits"] = std::move(lj);
  line("limits (what a sandbox asking for each one gets here):");
  std::istringstream desc(limits.Describe());
  for (std::string l; std::getline(desc, l);) line("  " + l);
  line("  wall-clock TTL: enforced by the sandbox's supervisor (deepbox sandbox create --ttl)");

  // Network: each mode and the mechanism a sandbox gets for it here.
  local::PublicNetworkConfig net_config;
  local::NetworkProbe probe = local::ChooseUplink(net_config);
  std::string allow_obstacle = local::AllowModeObstacle(net_config);
  std::string mechanism;
  if (probe.uplink == local::Uplink::kVeth) {
    mechanism = "veth pair + NAT in the host's network namespace (kernel path, IPv4 only)";
  } else if (probe.uplink == local::Uplink::kPasta) {
    mechanism = "pasta, a userspace uplink per sandbox (IPv4 and IPv6, no ip_forward needed)";
  }
  report["public_network"] = probe.public_possible;
  report["public_network_uplink"] = std::string(local::UplinkName(probe.uplink));
  report["public_network_reason"] = JsonString(probe.reason);
  report["public_network_veth"] = JsonString(probe.veth_reason);
  report["public_network_pasta"] = JsonString(probe.pasta_reason);
  report["allow_network"] = allow_obstacle.empty();
  report["allow_network_reason"] = JsonString(allow_obstacle.empty() ? "ok" : allow_obstacle);
  report["default_network"] = probe.public_possible ? "public" : "none";
  line("network none:     yes (loopback only)");
  line(fmt::format("network public:   {}",
                   probe.public_possible
                       ? "yes, via " + mechanism +
                             "; private, CGNAT, metadata, link-local, loopback, multicast and "
                             "the host's own addresses refused inside the sandbox (nftables)"
                       : "NO - " + probe.reason));
  line(fmt::format("  veth/NAT:       {}", probe.veth_reason));
  line(fmt::format("  pasta:          {}", probe.pasta_reason));
  line(fmt::format("network allow=:   {}",
                   allow_obstacle.empty()
                       ? "yes, via a per-sandbox filtering HTTP/HTTPS proxy on the host side "
                         "(HTTP(S)_PROXY inside; names checked on CONNECT/SNI/Host and resolved "
                         "by the proxy; every other packet dropped)"
                       : "NO - " + allow_obstacle));
  // Operator exceptions to the refused ranges (docs/security.md): a bad value
  // fails every sandbox with network public or allow=, so say it here.
  auto allowed_cidrs = local::AllowedCidrsFromEnv();
  json::array jcidrs;
  if (allowed_cidrs) {
    for (const auto& c : *allowed_cidrs) jcidrs.emplace_back(c);
  }
  report["network_allow_cidrs"] = std::move(jcidrs);
  if (!allowed_cidrs) {
    report["network_allow_cidrs_error"] = JsonString(allowed_cidrs.error().message);
    line(fmt::format("  reopened CIDRs: INVALID - {} (sandboxes with a network fail to start)",
                     SanitizeLineForTerminal(allowed_cidrs.error().message)));
  } else if (!allowed_cidrs->empty()) {
    std::string joined;
    for (const auto& c : *allowed_cidrs) joined += (joined.empty() ? "" : ", ") + c;
    line(fmt::format("  reopened CIDRs: {} ({})", SanitizeLineForTerminal(joined),
                     local::kAllowCidrsEnv));
  }
  line(fmt::format("default network:  {}",
                   probe.public_possible
                       ? "public (via " + std::string(local::UplinkName(probe.uplink)) + ")"
                       : "none (public is not possible here: fail closed; an explicit "
                         "--network public fails)"));

  // Binaries and state
  auto deepbox_bin = local::lifecycle::LocateDeepbox();
  std::string sandboxd;
  if (deepbox_bin) {
    auto s = local::lifecycle::LocateSandboxd(*deepbox_bin);
    sandboxd = s ? *s : "NOT FOUND - " + s.error().message;
    if (!s) can_run = false;
  } else {
    sandboxd = "NOT FOUND - " + deepbox_bin.error().message;
    can_run = false;
  }
  report["deepbox_binary"] = JsonString(deepbox_bin ? *deepbox_bin : "");
  report["sandboxd_binary"] = JsonString(sandboxd);
  line(fmt::format("deepbox-sandboxd: {}", sandboxd));
  auto state = local::lifecycle::DefaultStateDir();
  std::string state_text;
  if (state) {
    local::lifecycle::Store store(*state);
    auto init = store.Init();
    auto ids = store.Ids();
    state_text = init ? fmt::format("{} ({} sandbox dirs)", state->string(), ids ? ids->size() : 0)
                      : fmt::format("{} - NOT usable: {}", state->string(), init.error().message);
    if (!init) can_run = false;
    report["state_dir"] = JsonString(state->string());
  } else {
    state_text = "NONE - " + state.error().message;
    can_run = false;
  }
  line(fmt::format("state directory:  {}", state_text));
  // The model key `deepbox run` and `deepbox acp` read from the environment
  // (an editor starting `deepbox acp` must pass it in its agent settings'
  // "env"): whether it is set, never its value.
  auto key_set = [](const char* name) {
    const char* v = std::getenv(name);
    return v != nullptr && *v != '\0';
  };
  const bool anthropic_key = key_set("ANTHROPIC_API_KEY");
  const bool openai_key = key_set("OPENAI_API_KEY");
  report["anthropic_api_key"] = anthropic_key;
  report["openai_api_key"] = openai_key;
  line(fmt::format("model key:        ANTHROPIC_API_KEY {}; OPENAI_API_KEY {}",
                   anthropic_key ? "set" : "NOT set", openai_key ? "set" : "not set"));
  if (!anthropic_key && !openai_key) {
    line(
        "  deepbox run / deepbox acp need one for a live model (--model replay:FILE needs "
        "none); for an editor, put it in the \"env\" of its agent server settings (docs/acp.md)");
  }
  // --provider k8s: whether the sandbox pods are isolated by a NetworkPolicy
  // (the daemons take only their claim's token either way).
  if (args.cluster.provider == "k8s") {
    K8sPolicyCheck np = CheckK8sNetworkPolicy(args.cluster);
    json::object o;
    o["checked"] = np.checked;
    o["isolated"] = np.isolated;
    o["detail"] = JsonString(np.text);
    report["k8s_network_policy"] = std::move(o);
    line(fmt::format("k8s NetworkPolicy: {}", SanitizeLineForTerminal(np.text)));
  }
  report["sandboxes_can_run"] = can_run;
  line(can_run ? "=> local sandboxes can run on this host"
               : "=> local sandboxes can NOT run on this host (see above)");

  if (args.json) {
    std::cout << ToJson(report) << std::endl;
  } else {
    std::cout << text << std::flush;
  }
  return can_run ? kExitOk : kExitUnsupported;
}

}  // namespace deepbox::cli
