// Python repr() of the values deepagents prints into tool results: ls and
// glob answer `str(list_of_paths)`, write_todos `str(list_of_dicts)`.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"

namespace deepbox::agent {

// repr(str): single quotes unless the text contains ' and no ", Python's
// escapes for \\, quotes, \t \n \r, other control and non-printable chars.
std::string PyRepr(std::string_view text);
// repr(list[str]) -> "['/a', '/b']".
std::string PyReprList(const std::vector<std::string>& items);
// repr() of a JSON value read as Python: dict, list, str, int, float,
// True/False/None. Object keys keep their order.
std::string PyReprJson(const json::value& value);

}  // namespace deepbox::agent
