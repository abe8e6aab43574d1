// Test support: a small tool registry for the protocol and transport tests.
//   echo     {text: string}            -> the text back (structured {"text": ...})
//   fail     {}                        -> an isError result
//   progress {count: integer}          -> `count` progress notifications, then "done"
//   wait     {}                        -> progress "waiting", then waits until cancelled (or 60 s)
// A plain context for calling tools directly is provided too.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "mcp/registry.h"

namespace deepbox::mcp::testing {

// Calls that saw their cancellation (the `wait` tool).
inline std::atomic<int>& CancelledWaits() {
  static std::atomic<int> n{0};
  return n;
}

inline std::shared_ptr<ToolRegistry> TestRegistry() {
  auto r = std::make_shared<ToolRegistry>();
  auto schema = [](const char* text) { return ParseJsonObject(text).value(); };
  r->Add({"echo",
          "Echo",
          "Returns its text.",
          schema(R"({"type":"object","properties":{"text":{"type":"string"}},
                     "required":["text"],"additionalProperties":false})"),
          schema(R"({"type":"object","properties":{"text":{"type":"string"}},
                     "required":["text"]})"),
          {},
          [](const json::object& args, ToolCallContext&) {
            ToolOutcome o = ToolOutcome::Text(std::string(args.at("text").as_string()));
            json::object st;
            st["text"] = args.at("text");
            o.structured = json::value(std::move(st));
            return o;
          }});
  r->Add({"fail",
          "",
          "Always fails.",
          schema(R"({"type":"object","additionalProperties":false})"),
          std::nullopt,
          {},
          [](const json::object&, ToolCallContext&) { return ToolOutcome::Error("it failed"); }});
  r->Add({"progress",
          "",
          "Sends progress.",
          schema(R"({"type":"object","properties":{"count":{"type":"integer","minimum":0}},
                     "required":["count"],"additionalProperties":false})"),
          std::nullopt,
          {},
          [](const json::object& args, ToolCallContext& ctx) {
            int64_t n = args.at("count").to_number<int64_t>();
            for (int64_t i = 1; i <= n; ++i) {
              ctx.Progress(static_cast<double>(i), static_cast<double>(n),
                           "step " + std::to_string(i));
              ctx.Log(i == n ? LogLevel::kNotice : LogLevel::kDebug, "test.progress",
                      json::value(json::object{{"step", i}}));
            }
            return ToolOutcome::Text(ctx.wants_progress() ? "done with progress" : "done");
          }});
  r->Add({"wait",
          "",
          "Waits until cancelled.",
          schema(R"({"type":"object","additionalProperties":false})"),
          std::nullopt,
          {},
          [](const json::object&, ToolCallContext& ctx) {
            // Tells a client that asked for progress that it is running (so a
            // test can hang up mid-call, not before the call starts).
            ctx.Progress(1, std::nullopt, "waiting");
            auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
            while (!ctx.cancelled() && std::chrono::steady_clock::now() < end) {
              std::this_thread::sleep_for(std::chrono::milliseconds(10));
            }
            if (ctx.cancelled()) CancelledWaits()++;
            return ToolOutcome::Text(ctx.cancelled() ? "cancelled" : "timed out");
          }});
  return r;
}

class PlainContext : public ToolCallContext {
 public:
  const std::atomic<bool>* cancel_flag() const override { return &cancel; }
  bool wants_progress() const override { return true; }
  void Progress(double p, std::optional<double>, std::string_view m) override {
    progress.push_back({p, std::string(m)});
  }
  void Log(LogLevel level, std::string_view logger, const json::value& data) override {
    logs.push_back({level, std::string(logger), data});
  }
  struct LogEntry {
    LogLevel level;
    std::string logger;
    json::value data;
  };
  std::vector<LogEntry> logs;
  const std::string& owner() const override { return owner_; }

  std::atomic<bool> cancel{false};
  std::vector<std::pair<double, std::string>> progress;
  std::string owner_ = "test";
};

}  // namespace deepbox::mcp::testing
