#include "common/user_state_dir.h"

#include <fmt/format.h>
#include <pwd.h>
#include <unistd.h>

#include <cstdlib>

namespace deepbox {

EnvGetter ProcessEnvironment() {
  return [](const char* name) {
    const char* v = std::getenv(name);
    return v == nullptr ? std::string() : std::string(v);
  };
}

std::string UserHomeDir(const EnvGetter& env) {
  std::string home = env("HOME");
  if (!home.empty() && home.front() == '/') return home;
  struct passwd pw {};
  struct passwd* found = nullptr;
  char buf[4096];
  if (getpwuid_r(geteuid(), &pw, buf, sizeof(buf), &found) == 0 && found != nullptr &&
      found->pw_dir != nullptr && found->pw_dir[0] == '/') {
    return found->pw_dir;
  }
  return "";
}

Result<std::string> UserStateDir(const EnvGetter& env, std::string_view leaf,
                                 std::string_view override_var) {
  if (std::string x = env("XDG_STATE_HOME"); !x.empty() && x.front() == '/') {
    return fmt::format("{}/deepbox/{}", x, leaf);
  }
  std::string home = env("HOME");
  if (home.empty() || home.front() != '/') {
    // Root without a HOME of its own (a service): the system's state.
    if (geteuid() == 0) return fmt::format("/var/lib/deepbox/{}", leaf);
    home = UserHomeDir(env);
  }
  if (home.empty()) {
    return MakeError(ErrorCode::kUnavailable,
                     fmt::format("no directory for {}: set {} (or HOME) to a directory only you "
                                 "can write",
                                 leaf, override_var));
  }
  return fmt::format("{}/.local/state/deepbox/{}", home, leaf);
}

}  // namespace deepbox
