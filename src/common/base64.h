#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace deepbox {

std::string Base64Encode(std::string_view data);
// Standard alphabet, padding optional; nullopt on invalid input.
std::optional<std::string> Base64Decode(std::string_view text);

}  // namespace deepbox
