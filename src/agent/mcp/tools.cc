#include "agent/mcp/tools.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <atomic>
#include <functional>
#include <set>
#include <thread>
#include <utility>

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
  std::vector<mcp::RemoteTool> tools;  // as first listed: what the agent was given
  std::function<void(const std::string&)> on_problem;
  mutable std::mutex mu;
  std::shared_ptr<mcp::McpClient> client;  // null: did not start again
  bool reported = false;
  std::optional<std::string> dead;  // why its tools are withdrawn
  // Tools the server no longer had when it was started again.
  std::set<std::string> vanished;

  std::shared_ptr<mcp::McpClient> Client() const {
    std::lock_guard<std::mutex> lock(mu);
    return client;
  }
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
  std::optional<std::string> dead_reason() const {
    std::lock_guard<std::mutex> lock(mu);
    return dead;
  }
  bool Vanished(const std::string& remote_name) const {
    std::lock_guard<std::mutex> lock(mu);
    return vanished.contains(remote_name);
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
  bool Available() const override {
    return !server_->dead_reason() && !server_->Vanished(remote_name_);
  }

  ToolResult Invoke(ToolContext& ctx, const json::object& args) override {
    if (auto dead = server_->dead_reason()) {
      return ToolResult::Err(
          fmt::format("Error: the MCP server '{}' is not running ({}); its "
                      "tools are unavailable",
                      server_->config.name, *dead));
    }
    if (server_->Vanished(remote_name_)) {
      return ToolResult::Err(
          fmt::format("Error: the MCP server '{}' no longer has the tool '{}' (the server "
                      "was started again and did not list it); the tool is unavailable",
                      server_->config.name, remote_name_));
    }
    std::shared_ptr<mcp::McpClient> client = server_->Client();
    if (!client) {
      return ToolResult::Err("Error: the MCP server '" + server_->config.name + "' is not running");
    }
    mcp::CallOptions o;
    o.cancel = ctx.cancel;
    if (ctx.on_output) {
      o.on_progress = [&](double, std::optional<double>, std::string_view message) {
        if (!message.empty()) ctx.on_output(SanitizeUtf8(message));
      };
    }
    auto r = client->CallTool(remote_name_, args, o);
    if (!r) {
      if (r.error().code == ErrorCode::kCancelled) return ToolResult::Err("[Tool call cancelled]");
      if (auto failure = client->failure()) {
        std::string why = server_->Died(failure->message);
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

struct ConnectedServer {
  std::shared_ptr<mcp::McpClient> client;
  std::vector<mcp::RemoteTool> tools;
};

// Starts (connects to) one server, initializes it and lists its tools.
Result<ConnectedServer> ConnectMcpServer(const McpServerConfig& c,
                                         const McpToolsetOptions& options) {
  Result<std::unique_ptr<mcp::McpClient>> client = MakeError(ErrorCode::kInternal, "not started");
  if (c.http) {
    net::Headers h;
    for (const auto& [k, v] : c.headers) h.Set(k, v);
    client = mcp::McpClient::ConnectHttp(c.url, h, options.client);
  } else {
    Result<std::unique_ptr<mcp::LineChannel>> ch = MakeError(ErrorCode::kInternal, "not started");
    if (c.sandbox) {
      if (!options.sandbox) {
        return MakeError(ErrorCode::kUnavailable, "\"sandbox\": true, but there is no sandbox");
      }
      ch = mcp::SandboxProcessChannel(*options.sandbox, c.command, c.env, c.cwd);
    } else {
      ch = mcp::SpawnProcessChannel(c.command, c.env, c.cwd);
    }
    if (!ch) return tl::unexpected(ch.error());
    client = mcp::McpClient::ConnectStdio(std::move(*ch), options.client);
  }
  if (!client) return tl::unexpected(client.error());
  auto tools = (*client)->ListTools();
  if (!tools) {
    (*client)->Close();
    return tl::unexpected(tools.error());
  }
  return ConnectedServer{std::move(*client), std::move(*tools)};
}

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
      auto connected = ConnectMcpServer(all[i]->config, options);
      if (!connected) {
        failures[i] = connected.error().message;
        return;
      }
      all[i]->client = std::move(connected->client);
      all[i]->tools = std::move(connected->tools);
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
      set->tool_servers_.push_back(all[i]);
    }
    set->servers_.push_back(all[i]);
  }
  return set;
}

size_t McpToolset::RestartSandboxed() {
  std::vector<std::shared_ptr<Server>> boxed;
  for (const auto& s : servers_) {
    if (s->config.sandbox) boxed.push_back(s);
  }
  std::vector<std::thread> threads;
  for (const auto& server : boxed) {
    threads.emplace_back([this, server] {
      Server& s = *server;
      std::shared_ptr<mcp::McpClient> old;
      {
        std::lock_guard<std::mutex> lock(s.mu);
        old = std::exchange(s.client, nullptr);
      }
      if (old) old->Close();  // its process is gone: this only ends the channel
      auto connected = ConnectMcpServer(s.config, options_);
      std::lock_guard<std::mutex> lock(s.mu);
      if (!connected) {
        s.dead = "did not start again after the sandbox was suspended: " +
                 SanitizeUtf8(connected.error().message);
        s.reported = true;
        if (s.on_problem) {
          s.on_problem(fmt::format("MCP server '{}' ({}) {}; its tools are withdrawn",
                                   s.config.name, s.config.source, *s.dead));
        }
        return;
      }
      std::set<std::string> now;
      for (const auto& t : connected->tools) now.insert(t.name);
      std::set<std::string> before;
      s.vanished.clear();
      for (const auto& t : s.tools) {
        before.insert(t.name);
        if (!now.contains(t.name)) s.vanished.insert(t.name);
      }
      std::vector<std::string> added;
      for (const auto& name : now) {
        if (!before.contains(name)) added.push_back(name);
      }
      s.client = std::move(connected->client);
      s.dead.reset();
      s.reported = false;
      if (!s.on_problem) return;
      if (!s.vanished.empty()) {
        s.on_problem(fmt::format("MCP server '{}' started again without {}: {} withdrawn",
                                 s.config.name, fmt::join(s.vanished, ", "),
                                 s.vanished.size() == 1 ? "that tool is" : "those are"));
      }
      if (!added.empty()) {
        s.on_problem(
            fmt::format("MCP server '{}' started again with new tools, not offered in "
                        "this session (start a new one for them): {}",
                        s.config.name, fmt::join(added, ", ")));
      }
    });
  }
  for (auto& t : threads) t.join();
  return boxed.size();
}

McpToolset::~McpToolset() { Close(); }

void McpToolset::Close() {
  for (auto& s : servers_) {
    if (auto client = s->Client()) client->Close();
  }
}

std::vector<std::string> McpToolset::tool_names() const {
  std::vector<std::string> out;
  for (const auto& t : tools_) out.push_back(t->name());
  return out;
}

const McpServerConfig* McpToolset::ServerOf(std::string_view tool_name) const {
  for (size_t i = 0; i < tools_.size(); ++i) {
    if (tools_[i]->name() == tool_name) return &tool_servers_[i]->config;
  }
  return nullptr;
}

std::vector<std::string> McpToolset::Describe() const {
  std::vector<std::string> out;
  for (const auto& s : servers_) {
    auto client = s->Client();
    out.push_back(fmt::format("{}: {} tool{} ({}{}, {})", s->config.name, s->tools.size(),
                              s->tools.size() == 1 ? "" : "s", s->config.http ? "http" : "stdio",
                              s->config.sandbox ? " in the sandbox" : "",
                              client ? "protocol " + client->protocol_version() : "not running"));
  }
  return out;
}

}  // namespace deepbox::agent
