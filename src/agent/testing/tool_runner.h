// Test support: invokes tools directly, the way the loop does (argument
// validation, then Invoke with a ToolContext over a sandbox).
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "agent/permissions.h"
#include "agent/tool.h"

namespace deepbox::agent::testing {

class ToolRunner {
 public:
  ToolRunner(Sandbox& sandbox, std::vector<ToolPtr> tools, const PermissionSet* perms = nullptr)
      : sandbox_(sandbox), perms_(perms) {
    for (auto& t : tools) tools_[t->name()] = t;
  }

  ToolResult Run(const std::string& name, json::object args) {
    auto it = tools_.find(name);
    if (it == tools_.end()) return ToolResult::Err("no tool " + name);
    if (auto err = ValidateToolArgs(it->second->spec(), args)) return ToolResult::Err(*err);
    ToolCall call;
    call.id = "call_test";
    call.name = name;
    call.input = args;
    ToolContext ctx;
    ctx.sandbox = &sandbox_;
    ctx.root = sandbox_.root();
    ctx.call = &call;
    ctx.permissions = perms_;
    ctx.state = &state_;
    ctx.on_output = [this](std::string_view s) { streamed_ += s; };
    return it->second->Invoke(ctx, args);
  }

  // Text of a successful call (fails the test otherwise).
  std::string Ok(const std::string& name, json::object args) {
    auto r = Run(name, std::move(args));
    EXPECT_FALSE(r.is_error) << name << ": " << r.text;
    return r.text;
  }
  std::string Err(const std::string& name, json::object args) {
    auto r = Run(name, std::move(args));
    EXPECT_TRUE(r.is_error) << name << ": " << r.text;
    return r.text;
  }

  const std::string& streamed() const { return streamed_; }
  AgentState& state() { return state_; }

 private:
  Sandbox& sandbox_;
  const PermissionSet* perms_;
  std::map<std::string, ToolPtr> tools_;
  AgentState state_;
  std::string streamed_;
};

// A JSON argument value from the usual C++ types.
struct ArgValue {
  json::value v;
  ArgValue(const std::string& s) : v(json::string(s)) {}  // NOLINT
  ArgValue(const char* s) : v(s) {}                       // NOLINT
  ArgValue(int x) : v(x) {}                               // NOLINT
  ArgValue(int64_t x) : v(x) {}                           // NOLINT
  ArgValue(bool b) : v(b) {}                              // NOLINT
  ArgValue(json::value x) : v(std::move(x)) {}            // NOLINT
  ArgValue(json::array x) : v(std::move(x)) {}            // NOLINT
  ArgValue(json::object x) : v(std::move(x)) {}           // NOLINT
};

// json::object from key/value pairs.
inline json::object Args(std::initializer_list<std::pair<std::string, ArgValue>> kv) {
  json::object o;
  for (const auto& [k, a] : kv) o[k] = a.v;
  return o;
}

}  // namespace deepbox::agent::testing
