#include "agent/mcp/tools.h"

#include <fmt/format.h>

#include <atomic>
#include <functional>
#include <set>
#include <thread>

#include "common/utf8.h"

namespace deepbox::agent {

std::string McpToolName(std::string_view server, std::string_view tool) {
  auto clean = [](std::string_view s) {
    std::string out;
    for (char c : s) {
      bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '_' || c == '-';
      out += ok ? c : '_';
    }
    return out;
  };
  std::string name = "mcp__" + clean(server) + "__" + clean(tool);
  if (name.size() > 64) {
    // Keep it unique: a short hash of the full name replaces the tail.
    size_t h = std::hash<std::string>{}(name);
    name = name.substr(0, 55) + fmt::format("_{:08x}", static_cast<uint32_t>(h));
  }
  return name;
}

struct McpToolset::Server {
  McpServerConfig config;
  std::unique_ptr<mcp::McpClient> client;
  std::vector<mcp::RemoteTool> tools;
  std::function<void(const std::string&)> on_problem;
  std::mutex mu;
  bool reported = false;
  std::optional<std::string> dead;  // why its tools are withdrawn

  // The first failure is reported; later calls just answer with it.
  std::string Died(const std::string& why) {
    std::lock_guard<std::mutex> lock(mu);
    if (!dead) dead = why;
    if (!reported) {
      reported = true;
      if (on_problem) {
        on_problem(
            fmt::format("MCP server '{}' stopped: {}; its tools are withdrawn", config.name, why));
      }
    }
    return *dead;
  }
  std::optional<std::string> dead_reason() {
    std::lock_guard<std::mutex> lock(mu);
    return dead;
  }
};

namespace {

class McpTool : public Tool {
 public:
  McpTool(std::shared_ptr<McpToolset::Server> server, const mcp::RemoteTool& remote)
      : server_(std::move(server)), remote_name_(remote.name) {
    spec_.name = McpToolName(server_->config.name, remote.name);
    spec_.description = remote.description.empty() ? remote.title : remote.description;
    if (spec_.description.empty()) {
      spec_.description =
          fmt::format("Tool '{}' of the MCP server '{}'.", remote.name, server_->config.name);
    }
    spec_.input_schema = remote.input_schema;
  }
  const ToolSpec& spec() const override { return spec_; }
  bool Available() const override { return !server_->dead_reason(); }

  ToolResult Invoke(ToolContext& ctx, const json::object& args) override {
    if (auto dead = server_->dead_reason()) {
      return ToolResult::Err(
          fmt::format("Error: the MCP server '{}' is not running ({}); its "
                      "tools are unavailable",
                      server_->config.name, *dead));
    }
    mcp::CallOptions o;
    o.cancel = ctx.cancel;
    if (ctx.on_output) {
      o.on_progress = [&](double, std::optional<double>, std::string_view message) {
        if (!message.empty()) ctx.on_output(SanitizeUtf8(message));
      };
    }
    auto r = server_->client->CallTool(remote_name_, args, o);
    if (!r) {
      if (r.error().code == ErrorCode::kCancelled) return ToolResult::Err("[Tool call cancelled]");
      if (server_->client->failure()) {
        std::string why = server_->Died(server_->client->failure()->message);
        return ToolResult::Err(
            fmt::format("Error: the MCP server '{}' stopped ({}); its tools "
                        "are unavailable",
                        server_->config.name, why));
      }
      return ToolResult::Err("Error: " + r.error().message);
    }
    ToolResult out;
    out.text = SanitizeUtf8(r->text);
    out.is_error = r->is_error;
    for (const auto& img : r->images) out.images.push_back({img.media_type, img.base64_data});
    return out;
  }

  // Calls to one server run in call order (servers need not handle concurrency).
  ToolScheduling Scheduling(const json::object&, std::string_view) const override {
    return {"\x01mcp:" + server_->config.name};
  }

 private:
  std::shared_ptr<McpToolset::Server> server_;
  std::string remote_name_;
  ToolSpec spec_;
};

}  // namespace

std::shared_ptr<McpToolset> McpToolset::Start(const std::vector<McpServerConfig>& servers,
                                              McpToolsetOptions options) {
  std::shared_ptr<McpToolset> set(new McpToolset());
  set->options_ = options;
  std::vector<std::shared_ptr<Server>> all;
  for (const auto& c : servers) {
    auto s = std::make_shared<Server>();
    s->config = c;
    s->on_problem = options.on_problem;
    all.push_back(std::move(s));
  }
  std::vector<std::string> failures(all.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < all.size(); ++i) {
    threads.emplace_back([&, i] {
      Server& s = *all[i];
      const McpServerConfig& c = s.config;
      Result<std::unique_ptr<mcp::McpClient>> client =
          MakeError(ErrorCode::kInternal, "not started");
      if (c.http) {
        net::Headers h;
        for (const auto& [k, v] : c.headers) h.Set(k, v);
        client = mcp::McpClient::ConnectHttp(c.url, h, options.client);
      } else {
        Result<std::unique_ptr<mcp::LineChannel>> ch =
            MakeError(ErrorCode::kInternal, "not started");
        if (c.sandbox) {
          if (!options.sandbox) {
            failures[i] = "\"sandbox\": true, but there is no sandbox";
            return;
          }
          ch = mcp::SandboxProcessChannel(*options.sandbox, c.command, c.env, c.cwd);
        } else {
          ch = mcp::SpawnProcessChannel(c.command, c.env, c.cwd);
        }
        if (!ch) {
          failures[i] = ch.error().message;
          return;
        }
        client = mcp::McpClient::ConnectStdio(std::move(*ch), options.client);
      }
      if (!client) {
        failures[i] = client.error().message;
        return;
      }
      auto tools = (*client)->ListTools();
      if (!tools) {
        failures[i] = tools.error().message;
        (*client)->Close();
        return;
      }
      s.client = std::move(*client);
      s.tools = std::move(*tools);
    });
  }
  for (auto& t : threads) t.join();
  std::set<std::string> names;
  for (size_t i = 0; i < all.size(); ++i) {
    if (!failures[i].empty() || !all[i]->client) {
      if (options.on_problem) {
        options.on_problem(fmt::format("MCP server '{}' ({}) did not start: {}",
                                       all[i]->config.name, all[i]->config.source,
                                       SanitizeUtf8(failures[i])));
      }
      continue;
    }
    for (const auto& rt : all[i]->tools) {
      auto tool = std::make_shared<McpTool>(all[i], rt);
      if (!names.insert(tool->name()).second) continue;  // two names reduced alike: keep the first
      set->tools_.push_back(std::move(tool));
    }
    set->servers_.push_back(all[i]);
  }
  return set;
}

McpToolset::~McpToolset() { Close(); }

void McpToolset::Close() {
  for (auto& s : servers_) {
    if (s->client) s->client->Close();
  }
}

std::vector<std::string> McpToolset::tool_names() const {
  std::vector<std::string> out;
  for (const auto& t : tools_) out.push_back(t->name());
  return out;
}

std::vector<std::string> McpToolset::Describe() const {
  std::vector<std::string> out;
  for (const auto& s : servers_) {
    out.push_back(fmt::format("{}: {} tool{} ({}{}, protocol {})", s->config.name, s->tools.size(),
                              s->tools.size() == 1 ? "" : "s", s->config.http ? "http" : "stdio",
                              s->config.sandbox ? " in the sandbox" : "",
                              s->client->protocol_version()));
  }
  return out;
}

}  // namespace deepbox::agent
