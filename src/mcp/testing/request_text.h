// Pieces of request text the protocol tests build their messages from.
#pragma once

#include "common/json.h"

namespace deepbox::mcp::testing {

// The `_meta` member a 2026-07-28 client sends, its object left open: a test
// appends the rest of `params` and the closing braces.
inline constexpr char kModernMeta[] =
    R"("_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",)"
    R"("io.modelcontextprotocol/clientCapabilities":{})";

// A test's own params text as an object (it must parse).
inline json::object Params(const char* text) { return ParseJsonObject(text).value(); }

}  // namespace deepbox::mcp::testing
