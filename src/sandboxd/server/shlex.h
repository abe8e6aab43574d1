#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace deepbox::sandboxd {

// POSIX-mode shell word splitting with the semantics of Python's shlex.split
// (quotes, backslash escapes, '#' is not a comment), as the upstream
// python-runtime /execute uses it. Unbalanced quotes -> INVALID_ARGUMENT
// ("No closing quotation" / "No escaped character").
Result<std::vector<std::string>> ShlexSplit(std::string_view text);

}  // namespace deepbox::sandboxd
