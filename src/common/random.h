// Unguessable random text, from the kernel's CSPRNG (getrandom): ids that
// must not be guessed (exec and MCP session ids, claim names, temporary
// names) all come from here.
#pragma once

#include <cstddef>
#include <string>

namespace deepbox {

// `chars` lower-case hex digits (4 random bits each).
std::string RandomHex(size_t chars);

}  // namespace deepbox
