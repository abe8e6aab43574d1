// Creating a directory and its missing parents (mkdir -p), each with one mode.
#pragma once

#include <sys/types.h>

#include <string>

#include "common/error.h"

namespace deepbox {

// Creates every missing component of `dir` with `mode` (umask applies);
// existing ones are left as they are. An error names the mkdir(2) that failed
// and its path.
Status MakeDirs(const std::string& dir, mode_t mode);

}  // namespace deepbox
