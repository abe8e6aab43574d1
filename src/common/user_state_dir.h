// Where deepbox keeps a user's state that must outlive a reboot (snapshots,
// images): $XDG_STATE_HOME/deepbox/LEAF when that is absolute, else
// HOME/.local/state/deepbox/LEAF, HOME from the environment or, when it is
// unset or relative, from the password database; root with neither gets
// /var/lib/deepbox/LEAF.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "common/error.h"

namespace deepbox {

// An environment variable's value, "" when unset (tests pass their own).
using EnvGetter = std::function<std::string(const char* name)>;

// This process's environment.
EnvGetter ProcessEnvironment();

// HOME when absolute, else the password database's home of the effective
// uid; "" when neither is.
std::string UserHomeDir(const EnvGetter& env);

// The directory above for `leaf`; UNAVAILABLE when there is no home at all,
// telling the user to set `override_var` (or HOME).
Result<std::string> UserStateDir(const EnvGetter& env, std::string_view leaf,
                                 std::string_view override_var);

}  // namespace deepbox
