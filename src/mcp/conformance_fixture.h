// The fixture tools of the official MCP conformance suite's server scenarios
// (npm @modelcontextprotocol/conformance, scripts/mcp-conformance.sh), for
// `deepbox mcp --conformance-fixture`: with them the suite's tools-call-*
// scenarios exercise deepbox's own protocol code (content blocks, isError,
// progress and logging notifications over stdio and Streamable HTTP) instead
// of failing for want of a tool. Not for agents: they do nothing useful.
#pragma once

#include "mcp/registry.h"

namespace deepbox::mcp {

// test_simple_text, test_image_content, test_audio_content,
// test_embedded_resource, test_multiple_content_types, test_error_handling,
// test_tool_with_progress, test_tool_with_logging, json_schema_2020_12_tool.
void AddConformanceFixtureTools(ToolRegistry& registry);

}  // namespace deepbox::mcp
