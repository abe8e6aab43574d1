#include "mcp/conformance_fixture.h"

#include <chrono>
#include <thread>

namespace deepbox::mcp {
namespace {

// A 1x1 PNG and a WAV of no samples: the smallest valid media.
constexpr const char* kPixelPng =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC";
constexpr const char* kEmptyWav = "UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YQAAAAA=";

json::object TextResource(std::string_view uri, std::string_view mime_type, std::string_view text) {
  json::object resource;
  resource["uri"] = uri;
  resource["mimeType"] = mime_type;
  resource["text"] = text;
  return json::object{{"type", "resource"}, {"resource", std::move(resource)}};
}

ToolDef Fixture(std::string name, std::string description, ToolHandler handler) {
  ToolDef t;
  t.name = std::move(name);
  t.description = std::move(description);
  t.input_schema = json::object{{"type", "object"}, {"properties", json::object{}}};
  t.handler = std::move(handler);
  return t;
}

// The pauses the suite's fixtures specify between notifications (so that a
// client sees them arrive one by one during the call).
void Pause() { std::this_thread::sleep_for(std::chrono::milliseconds(50)); }

}  // namespace

void AddConformanceFixtureTools(ToolRegistry& registry) {
  registry.Add(Fixture("test_simple_text", "Returns one text block",
                       [](const json::object&, ToolCallContext&) {
                         return ToolOutcome::Text("This is a simple text response for testing.");
                       }));
  registry.Add(
      Fixture("test_image_content", "Returns a 1x1 PNG", [](const json::object&, ToolCallContext&) {
        ToolOutcome o;
        o.content.push_back(ImageContent(kPixelPng, "image/png"));
        return o;
      }));
  registry.Add(Fixture(
      "test_audio_content", "Returns an empty WAV", [](const json::object&, ToolCallContext&) {
        ToolOutcome o;
        o.content.push_back(
            json::object{{"type", "audio"}, {"data", kEmptyWav}, {"mimeType", "audio/wav"}});
        return o;
      }));
  registry.Add(Fixture("test_embedded_resource", "Returns an embedded text resource",
                       [](const json::object&, ToolCallContext&) {
                         ToolOutcome o;
                         o.content.push_back(TextResource("test://embedded-resource", "text/plain",
                                                          "This is an embedded resource content."));
                         return o;
                       }));
  registry.Add(Fixture("test_multiple_content_types", "Returns text, an image and a resource",
                       [](const json::object&, ToolCallContext&) {
                         ToolOutcome o;
                         o.content.push_back(TextContent("Multiple content types test:"));
                         o.content.push_back(ImageContent(kPixelPng, "image/png"));
                         o.content.push_back(TextResource("test://mixed-content-resource",
                                                          "application/json",
                                                          R"({"test":"data","value":123})"));
                         return o;
                       }));
  registry.Add(
      Fixture("test_error_handling", "Always fails", [](const json::object&, ToolCallContext&) {
        return ToolOutcome::Error("This tool intentionally returns an error for testing");
      }));
  registry.Add(Fixture("test_tool_with_progress", "Reports progress 0, 50, 100 of 100",
                       [](const json::object&, ToolCallContext& ctx) {
                         for (double p : {0.0, 50.0, 100.0}) {
                           if (p > 0) Pause();
                           if (ctx.wants_progress()) ctx.Progress(p, 100.0, "");
                         }
                         return ToolOutcome::Text("Progress test completed");
                       }));
  // Its schema's 2020-12 keywords ($schema, $defs, $ref) must reach the
  // listing untouched (SEP-1613).
  ToolDef schema_tool =
      Fixture("json_schema_2020_12_tool", "Tool with JSON Schema 2020-12 features",
              [](const json::object&, ToolCallContext&) { return ToolOutcome::Text("ok"); });
  auto schema = ParseJsonObject(R"({
      "$schema": "https://json-schema.org/draft/2020-12/schema",
      "type": "object",
      "$defs": {"address": {"type": "object", "properties": {
          "street": {"type": "string"}, "city": {"type": "string"}}}},
      "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
      "additionalProperties": false})");
  if (schema) schema_tool.input_schema = std::move(*schema);
  registry.Add(std::move(schema_tool));
  registry.Add(Fixture("test_tool_with_logging", "Logs three info messages",
                       [](const json::object&, ToolCallContext& ctx) {
                         const char* messages[] = {"Tool execution started", "Tool processing data",
                                                   "Tool execution completed"};
                         for (int i = 0; i < 3; ++i) {
                           if (i > 0) Pause();
                           ctx.Log(LogLevel::kInfo, "test_tool_with_logging",
                                   json::value(messages[i]));
                         }
                         return ToolOutcome::Text("Logging test completed");
                       }));
}

}  // namespace deepbox::mcp
