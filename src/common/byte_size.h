// Sizes in bytes as people write and read them (flags, environment variables,
// messages): "64M", "1.5g" in; "2 GiB" out.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/error.h"

namespace deepbox {

// A size as `docker run --memory` takes it: a number of bytes with an
// optional binary unit, case-insensitive: b, k/kb/kib, m/mb/mib, g/gb/gib,
// t/tb/tib (all powers of 1024), e.g. "64M", "1.5g", "2GiB", "1048576".
// `what` names the flag or key in the error.
Result<uint64_t> ParseByteSize(std::string_view text, std::string_view what);
// "2 GiB", "64 MiB", "1.5 GiB", "1000 B".
std::string FormatBytes(uint64_t bytes);

}  // namespace deepbox
