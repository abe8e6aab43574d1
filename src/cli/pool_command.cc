// deepbox pool serve
#include <fmt/format.h>
#include <signal.h>
#include <sys/signalfd.h>

#include <cstdio>

#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/image_pull_display.h"
#include "cli/provider_util.h"
#include "common/terminal_text.h"
#include "common/unique_fd.h"
#include "local/lifecycle/pool.h"

namespace deepbox::cli {

int RunPoolServe(const PoolServeArgs& args) {
  if (auto st = local::lifecycle::ValidatePoolName(args.name); !st) return ReportError(st.error());
  ProviderSettingFlags settings = args.settings;
  settings.given["pool"] = "";  // the pool daemon only creates
  auto provider = MakeProvider(settings);
  if (!provider) return ReportError(provider.error());
  // SIGINT/SIGTERM stop the loop (through a signalfd); supervisors are
  // spawned with a clean signal mask, so they do not inherit this.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigprocmask(SIG_BLOCK, &set, nullptr);
  UniqueFd stop(signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!stop) return ReportError(SyscallError("signalfd", errno));
  local::lifecycle::PoolOptions o;
  o.name = args.name;
  o.replicas = args.replicas;
  o.network = args.network;
  o.rootfs = args.rootfs;
  o.image = args.image;
  if (!args.image.empty()) {
    if (!args.rootfs.empty()) {
      return ReportError(
          Error(ErrorCode::kInvalidArgument, "--image and --rootfs cannot be used together"));
    }
    if (auto st = PullImageForSandbox(args.image); !st) return ReportError(st.error());
  }
  o.parallel = args.parallel;
  o.log = [](const std::string& line) {
    // A failed creation's line can quote a daemon's stderr.
    std::string out = fmt::format("{} {}\n", FormatRfc3339Ms(NowMs()), SanitizeForTerminal(line));
    std::fputs(out.c_str(), stderr);
    std::fflush(stderr);
  };
  auto st = local::lifecycle::ServePool(**provider, o, stop.get());
  if (!st) return ReportError(st.error());
  return kExitOk;
}

}  // namespace deepbox::cli
