// JSON encoding of the harness' types, used by the thread store (JSONL) and
// by anyone persisting or transporting conversations.
#pragma once

#include "agent/state.h"
#include "common/json.h"

namespace deepbox::agent {

json::object MessageToJson(const Message& m);
Result<Message> MessageFromJson(const json::object& o);

json::object UsageToJson(const Usage& u);
Usage UsageFromJson(const json::object& o);

json::object InterruptToJson(const InterruptRequest& r);
Result<InterruptRequest> InterruptFromJson(const json::object& o);

json::object DecisionToJson(const Decision& d);
Result<Decision> DecisionFromJson(const json::object& o);

json::object SummarizationToJson(const SummarizationEvent& e);
Result<SummarizationEvent> SummarizationFromJson(const json::object& o);

std::string_view RoleName(Role r);  // "user" | "assistant" | "tool"

}  // namespace deepbox::agent
