#include "local/capabilities.h"

#include <fmt/format.h>
#include <linux/capability.h>
#include <linux/securebits.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <fstream>
#include <sstream>

namespace deepbox::local {

CapDropPlan PlanCapDrop(uid_t uid, gid_t gid, bool clear_groups) {
  CapDropPlan plan;
  plan.uid = uid;
  plan.gid = gid;
  plan.clear_groups = clear_groups;
  plan.last_cap = CAP_LAST_CAP;
  std::ifstream in("/proc/sys/kernel/cap_last_cap");
  int v = -1;
  if (in >> v && v >= 0 && v < 64) plan.last_cap = v;
  return plan;
}

int SwitchToSandboxIdsRaw(const CapDropPlan& plan, ChildCall* failed) {
  // NO_SETUID_FIXUP: capabilities survive the uid change; they are dropped explicitly later.
  const unsigned long bits = SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
                             SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED |
                             SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
  *failed = ChildCall::kPrctl;
  if (prctl(PR_SET_SECUREBITS, bits, 0, 0, 0) != 0) return errno;
  if (plan.clear_groups) {
    *failed = ChildCall::kSetgroups;
    if (syscall(SYS_setgroups, 0, nullptr) != 0) return errno;
  }
  *failed = ChildCall::kSetresgid;
  if (syscall(SYS_setresgid, plan.gid, plan.gid, plan.gid) != 0) return errno;
  *failed = ChildCall::kSetresuid;
  if (syscall(SYS_setresuid, plan.uid, plan.uid, plan.uid) != 0) return errno;
  *failed = ChildCall::kNone;
  return 0;
}

int DropCapabilitiesRaw(const CapDropPlan& plan, ChildCall* failed) {
  *failed = ChildCall::kPrctl;
  for (int cap = 0; cap <= plan.last_cap; ++cap) {
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) return errno;
  }
  if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0) return errno;
  *failed = ChildCall::kCapset;
  struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (syscall(SYS_capset, &header, data) != 0) return errno;
  *failed = ChildCall::kNone;
  return 0;
}

int DropPrivilegesRaw(const CapDropPlan& plan, ChildCall* failed) {
  int err = SwitchToSandboxIdsRaw(plan, failed);
  if (err != 0) return err;
  return DropCapabilitiesRaw(plan, failed);
}

namespace {
Result<uint64_t> ParseHex(std::string_view s) {
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v, 16);
  if (ec != std::errc()) return MakeError(ErrorCode::kInternal, fmt::format("bad hex '{}'", s));
  return v;
}
}  // namespace

Result<ProcStatus> ParseProcStatus(std::string_view text) {
  ProcStatus st;
  std::istringstream in{std::string(text)};
  std::string line;
  while (std::getline(in, line)) {
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    std::string value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(" \t"));
    auto hex = [&](uint64_t* out) -> Status {
      auto v = ParseHex(value);
      if (!v) return tl::unexpected(v.error());
      *out = *v;
      return {};
    };
    Status s;
    if (key == "CapInh")
      s = hex(&st.cap_inh);
    else if (key == "CapPrm")
      s = hex(&st.cap_prm);
    else if (key == "CapEff")
      s = hex(&st.cap_eff);
    else if (key == "CapBnd")
      s = hex(&st.cap_bnd);
    else if (key == "CapAmb")
      s = hex(&st.cap_amb);
    else if (key == "NoNewPrivs")
      st.no_new_privs = std::stoi(value);
    else if (key == "Seccomp")
      st.seccomp = std::stoi(value);
    else if (key == "Uid")
      st.uid = static_cast<uint32_t>(std::stoul(value));
    else if (key == "Gid")
      st.gid = static_cast<uint32_t>(std::stoul(value));
    else if (key == "Groups")
      st.groups = value;
    if (!s) return tl::unexpected(s.error());
  }
  return st;
}

Result<ProcStatus> ReadProcStatus(pid_t pid) {
  std::string path = pid == 0 ? "/proc/self/status" : fmt::format("/proc/{}/status", pid);
  std::ifstream in(path);
  if (!in) return MakeSyscallError("open", errno, path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseProcStatus(ss.str());
}

}  // namespace deepbox::local
