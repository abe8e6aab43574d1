// Strict validation of tool arguments against the JSON Schema (2020-12) the
// tool publishes: no coercion ("5" is not an integer), unknown properties
// refused when additionalProperties is false. The keywords deepbox's own
// schemas use are enforced: type, properties, required,
// additionalProperties, enum, const, minimum, maximum, exclusiveMinimum,
// exclusiveMaximum, minLength, maxLength, items, minItems, maxItems. Other
// keywords are annotations here (description, default, title, ...).
#pragma once

#include <string>
#include <vector>

#include "common/json.h"

namespace deepbox::mcp {

// Every violation, one sentence each, naming the argument by its path
// ("'limit' must be an integer, not a string"). Empty when valid.
std::vector<std::string> ValidateAgainstSchema(const json::value& instance,
                                               const json::object& schema);

// The JSON type name of a value as JSON Schema names it ("integer" for
// integral numbers).
std::string JsonTypeName(const json::value& v);

}  // namespace deepbox::mcp
