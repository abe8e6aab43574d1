// Elicitation (a server asks the user for input through the client,
// `elicitation/create`, form mode). The client answers with its handler's
// decision; an accepted form gets the requested schema's defaults for the
// fields the user left out (SEP-1034), so a server always sees them.
#pragma once

#include <functional>
#include <string>

#include "common/json.h"

namespace deepbox::mcp {

struct ElicitationRequest {
  std::string message;
  json::object requested_schema;  // a flat object schema of primitive properties
};

struct ElicitationAnswer {
  std::string action = "decline";  // "accept", "decline" or "cancel"
  json::object content;            // accept: the fields the user gave
};

// Asks the user. Runs on a transport thread; may block while the user answers.
using ElicitationHandler = std::function<ElicitationAnswer(const ElicitationRequest&)>;

// Sets each property's `default` the content lacks.
void ApplySchemaDefaults(const json::object& schema, json::object& content);

// The ElicitResult for elicitation/create params: the handler's answer (an
// accepted form with the defaults applied), or a decline when the request
// is not a form deepbox can show (url mode).
json::object AnswerElicitation(const json::object& params, const ElicitationHandler& handler);

}  // namespace deepbox::mcp
